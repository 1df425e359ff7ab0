-- oneflow.distributed: processes, collectives, placements, SBP and global
-- tensors. flow.env and flow.comm are its parts; see doc/distributed.md.
local comm = require 'oneflow.distributed.comm'

local M = {}
M.env = comm.env
M.comm = comm
M.get_rank, M.get_world_size = comm.env.get_rank, comm.env.get_world_size
M.get_local_rank, M.barrier = comm.env.get_local_rank, comm.env.barrier
M.new_group = comm.new_group
local PL = require 'oneflow.distributed.placement'
M.placement, M.sbp = PL.placement, PL.sbp
local CK = require 'oneflow.distributed.checkpoint'
M.save, M.load = CK.save, CK.load
return M
