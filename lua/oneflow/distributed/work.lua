-- oneflow.distributed.work: nonblocking collectives. A Work is returned by
-- flow.comm.all_reduce(t, {async_op = true}) (PyTorch's name): the call
-- returns at once and t holds the result after work:wait(). Every Work must
-- be waited on (or seen completed by is_completed) on every rank; the
-- collectives are matched by the order in which ranks start them.
local ffi = require 'ffi'
local core = require 'oneflow._C'

local C, raise = core.C, core.raise

local M = {}

local Work = require('oneflow._args').value_type({})
Work.__index = Work
M.Work = Work

local req_out = ffi.new('of_comm_request*[1]')
local done = ffi.new('int32_t[1]')

--- Starts an in-place all-reduce of the local tensor t over group g (a
-- flow.comm group); op 0 sum, 1 max, 2 min.
function M.all_reduce(g, t, op)
  if C.of_comm_iall_reduce(g.ptr, t.p, op or 0, req_out) ~= 0 then raise(3) end
  return setmetatable({req = req_out[0], tensor = t}, Work)
end

--- Whether the collective finished (it also lets MPI make progress).
function Work:is_completed()
  if self.req == nil then return true end
  if C.of_comm_test(self.req, done) ~= 0 then
    self.req = nil
    raise(2)
  end
  if done[0] ~= 0 then self.req = nil end
  return self.req == nil
end

--- Blocks until done (or the timeout, flow.env.set_timeout); returns the
-- tensor, now holding the result.
function Work:wait()
  if self.req ~= nil then
    local r = self.req
    self.req = nil
    if C.of_comm_wait(r) ~= 0 then raise(2) end
  end
  return self.tensor
end

function Work:result() return {self:wait()} end

return M
