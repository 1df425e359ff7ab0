-- oneflow.distributed.comm: processes (flow.env) and collectives on local
-- tensors (flow.comm). Ranks are 0-based, as in PyTorch and OneFlow.
-- Every collective must be called by every member of the group, in the same
-- order; a call that a peer never joins fails after flow.env.get_timeout()
-- seconds with an error naming that peer.
local ffi = require 'ffi'
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local A = require 'oneflow._args'

local C, wrap, raise, out1 = core.C, core.wrap, core.raise, core.out1
-- Collectives that return a new tensor release dead tensors first, so the
-- result takes a warm block just freed (e.g. the previous step's) rather
-- than a further one. Their inputs are live locals here, never swept.
local sweep_due = core.sweep_due

local M = {}
local env = {}
M.env = env

local comm_out = ffi.new('of_comm*[1]')

local Group = A.value_type({})
Group.__index = Group
M.Group = Group

local world
--- The group of all processes.
function M.world()
  if world then return world end
  if C.of_comm_world(comm_out) ~= 0 then raise(2) end
  world = setmetatable({ptr = comm_out[0], ranks = nil}, Group)
  world.rank, world.size = C.of_comm_rank(world.ptr), C.of_comm_size(world.ptr)
  local r = {}
  for i = 1, world.size do r[i] = i - 1 end
  world.ranks = r
  return world
end

------------------------------------------------------------------ flow.env
function env.init()
  if C.of_dist_init() ~= 0 then raise(2) end
end
-- A process whose launcher cannot be joined (srun without PMI, a missing
-- MPI backend) raises the reason, at its caller's line, rather than calling
-- itself rank 0 of 1.
local function joined()
  if C.of_dist_init() ~= 0 then raise(3) end
end
--- flow.distributed.get_rank(): this process's rank (0-based, as launchers number them).
function env.get_rank()
  joined()
  return C.of_dist_rank()
end
--- flow.distributed.get_world_size(): the number of processes.
function env.get_world_size()
  joined()
  return C.of_dist_world_size()
end
--- flow.distributed.get_local_rank(): this process's rank on its host (0-based, as launchers number them).
function env.get_local_rank()
  joined()
  return C.of_dist_local_rank()
end
function env.backend() return ffi.string(C.of_dist_backend()) end

local launch = ffi.new('of_dist_launch')
--- What the launcher's environment says, read without starting MPI:
-- {name = 'mpirun' | 'slurm' | 'pmi' | 'none', rank =, size =, local_rank =,
-- node_rank =, nodes =, pmi = bool}; fields the launcher does not give are
-- nil (mpirun gives no node index). See doc/scale.md for the variables.
function env.launcher()
  if C.of_dist_launch_info(launch) ~= 0 then raise(2) end
  local function opt(v) return v >= 0 and tonumber(v) or nil end
  return {name = ffi.string(launch.launcher), rank = opt(launch.rank), size = opt(launch.size),
          local_rank = opt(launch.local_rank), node_rank = opt(launch.node_rank),
          nodes = opt(launch.nodes), pmi = launch.pmi ~= 0}
end
--- flow.distributed.barrier(): waits until every rank reaches it.
function env.barrier()
  if C.of_comm_barrier(M.world().ptr) ~= 0 then raise(2) end
end
--- Seconds a collective may wait for its peers before failing (default 60,
-- or $OF_DIST_TIMEOUT).
function env.set_timeout(seconds)
  if C.of_dist_set_timeout(seconds) ~= 0 then raise(2) end
end
function env.get_timeout() return C.of_dist_get_timeout() end
--- True once a collective on CUDA tensors loaded NCCL (it is never loaded
-- before one asks for it).
function M.nccl_loaded() return C.of_dist_device_backend_loaded() ~= 0 end

------------------------------------------------------------------ groups
local groups = {}   -- key "0,2,3" -> Group (creating one is collective)

--- Group of the given world ranks (0-based), in that order. Collective over
-- its members only; the caller must be one of them. Cached per rank list.
function M.new_group(ranks)
  if type(ranks) ~= 'table' or #ranks == 0 then
    error('new_group: expected a non-empty list of ranks', 2)
  end
  local key = table.concat(ranks, ',')
  local g = groups[key]
  if g then return g end
  local w = M.world()
  local n = #ranks
  local buf = ffi.new('int32_t[?]', n)
  for i = 1, n do
    if type(ranks[i]) ~= 'number' or ranks[i] ~= math.floor(ranks[i]) then
      error(('new_group: rank %d must be an integer, got %s'):format(i, tostring(ranks[i])), 2)
    end
    buf[i - 1] = ranks[i]
  end
  if n == w.size and key == table.concat(w.ranks, ',') then
    groups[key] = w
    return w
  end
  if C.of_comm_new_group(w.ptr, buf, n, comm_out) ~= 0 then raise(2) end
  g = setmetatable({ptr = ffi.gc(comm_out[0], C.of_comm_release)}, Group)
  g.rank, g.size = C.of_comm_rank(g.ptr), C.of_comm_size(g.ptr)
  g.ranks = {}
  for i = 1, n do g.ranks[i] = ranks[i] end
  groups[key] = g
  return g
end

local function group_of(opts)
  local g = opts and opts.group
  if g == nil then return M.world() end
  if getmetatable(g) ~= Group then
    if type(g) == 'table' then return M.new_group(g) end
    error('comm: group must be a group from flow.comm.new_group or a list of ranks', 3)
  end
  return g
end

local ops = {sum = 0, max = 1, min = 2}
local function red_op(op, name)
  if op == nil then return 0 end
  local v = ops[op]
  if not v then
    error(('%s: unknown op %s (sum, max or min)'):format(name, tostring(op)), 3)
  end
  return v
end

-- Collectives take local tensors (A.describe names a global tensor as one).
local LOCAL = 'input (a local tensor)'

local function counts_ptr(list)
  local p = ffi.new('int64_t[?]', #list)
  for i = 1, #list do p[i - 1] = list[i] end
  return p
end

------------------------------------------------------------------ collectives
--- In place: every rank ends with the sum (max, min) of everyone's t.
-- flow.comm.all_reduce(t[, {op = 'sum', group =}]) -> t
-- With {async_op = true} it returns a Work at once (oneflow.distributed.work).
function M.all_reduce(t, opts)
  A.check_tensor('all_reduce', t, LOCAL)
  local g = group_of(opts)
  if opts and opts.async_op then
    return require('oneflow.distributed.work').all_reduce(g, t, red_op(opts.op, 'all_reduce'))
  end
  if C.of_comm_all_reduce(g.ptr, t.p, red_op(opts and opts.op, 'all_reduce')) ~= 0 then
    raise(2)
  end
  return t
end

--- Like all_reduce but into a new tensor (t unchanged): no copy of t first.
function M.all_reduced(t, opts)
  A.check_tensor('all_reduce', t, LOCAL)
  sweep_due()
  local g = group_of(opts)
  return T.call1(C.of_comm_all_reduce_to, g.ptr, t.p, red_op(opts and opts.op, 'all_reduce'),
                 out1)
end

--- In place: every rank gets root's t (root is a rank of the group).
function M.broadcast(t, root, opts)
  A.check_tensor('broadcast', t, LOCAL)
  local g = group_of(opts)
  if C.of_comm_broadcast(g.ptr, t.p, root or 0) ~= 0 then raise(2) end
  return t
end

function M.barrier(opts)
  if C.of_comm_barrier(group_of(opts).ptr) ~= 0 then raise(2) end
end

--- Flat all-gather: each rank gives its (contiguous) elements, counts[i]
-- from rank i (nil: all give as many as this rank). Returns a 1-D tensor.
function M.all_gather_flat(t, counts, opts)
  A.check_tensor('all_gather', t, LOCAL)
  sweep_due()
  local g = group_of(opts)
  if counts and #counts ~= g.size then
    error(('all_gather: %d counts for a group of %d'):format(#counts, g.size), 2)
  end
  return T.call1(C.of_comm_all_gather, g.ptr, t.p, counts and counts_ptr(counts) or nil, out1)
end

-- Every rank's shape (tensors may differ in shape between ranks).
local function gather_shapes(t, g)
  local nd = t:dim()
  local mine = ffi.new('int64_t[9]')
  mine[0] = nd
  for i = 1, nd do mine[i] = t:size(i) end
  local info = T.flow.from_blob(mine, {9}, {dtype = 'int64'})
  local all = T.call1(C.of_comm_all_gather, g.ptr, info.p, nil, out1)
  local p = ffi.cast('int64_t*', C.of_tensor_data(all.p))
  local shapes = {}
  for r = 0, g.size - 1 do
    local s = {}
    for i = 1, tonumber(p[r * 9]) do s[i] = tonumber(p[r * 9 + i]) end
    shapes[r + 1] = s
  end
  return shapes
end
M.gather_shapes = gather_shapes

local function numel_of(shape)
  local n = 1
  for i = 1, #shape do n = n * shape[i] end
  return n
end

--- Every rank's t, as a list indexed by group rank + 1 (shapes may differ).
function M.all_gather(t, opts)
  A.check_tensor('all_gather', t, LOCAL)
  local g = group_of(opts)
  local shapes = gather_shapes(t, g)
  local counts = {}
  for i, s in ipairs(shapes) do counts[i] = numel_of(s) end
  local flat = T.call1(C.of_comm_all_gather, g.ptr, t.p, counts_ptr(counts), out1)
  local res, off = {}, 0
  for i, s in ipairs(shapes) do
    res[i] = flat:narrow(1, off + 1, counts[i]):view(s)
    off = off + counts[i]
  end
  return res
end

--- Reduces t over the group and gives this rank its part of dim `dim`
-- (default 1): the first size % n ranks get one more row, as OneFlow and
-- PyTorch split. flow.comm.reduce_scatter(t[, {op =, dim =, group =}])
function M.reduce_scatter(t, opts)
  A.check_tensor('reduce_scatter', t, LOCAL)
  sweep_due()
  local g = group_of(opts)
  local dim = opts and opts.dim or 1
  local n = g.size
  if t:dim() == 0 then error('reduce_scatter: a 0-d tensor cannot be scattered', 2) end
  local len = t:size(dim)
  -- split along dim 1, the parts already lie in rank order: no packing copy
  -- (and no per-part views to make)
  local along1 = dim == 1 or dim == -t:dim()
  local parts, counts, start = {}, {}, 1
  local rest = len > 0 and t:numel() / len or 0   -- elements per index of dim
  for r = 1, n do
    local sz = math.floor(len / n) + ((r - 1) < len % n and 1 or 0)
    if not along1 then parts[r] = t:narrow(dim, start, sz):contiguous():view(-1) end
    counts[r] = sz * rest
    start = start + sz
  end
  local packed = along1 and t:contiguous():view(-1) or T.flow.cat(parts, 1)
  local res = T.call1(C.of_comm_reduce_scatter, g.ptr, packed.p, counts_ptr(counts),
                      red_op(opts and opts.op, 'reduce_scatter'), out1)
  local shp = t:size():totable()
  shp[dim < 0 and #shp + dim + 1 or dim] = math.floor(len / n) + (g.rank < len % n and 1 or 0)
  return res:view(shp)
end

--- list[i] goes to group rank i-1; returns what each rank sent here, as a
-- list in rank order (shapes may differ).
function M.all_to_all(list, opts)
  local g = group_of(opts)
  if type(list) ~= 'table' or #list ~= g.size then
    error(('all_to_all: expected a list of %d tensors (one per rank)'):format(g.size), 2)
  end
  local parts, send = {}, {}
  local meta = ffi.new('int64_t[?]', 9 * g.size)
  for i = 1, g.size do
    A.check_tensor('all_to_all', list[i], 'list[' .. i .. ']' .. ' (a local tensor)')
    parts[i] = list[i]:contiguous():view(-1)
    send[i] = list[i]:numel()
    meta[(i - 1) * 9] = list[i]:dim()
    for d = 1, list[i]:dim() do meta[(i - 1) * 9 + d] = list[i]:size(d) end
  end
  local m = T.flow.from_blob(meta, {9 * g.size}, {dtype = 'int64'})
  local rmeta = T.call1(C.of_comm_all_to_all, g.ptr, m.p, nil, nil, out1)
  local p = ffi.cast('int64_t*', C.of_tensor_data(rmeta.p))
  local shapes, recv = {}, {}
  for r = 0, g.size - 1 do
    local s = {}
    for d = 1, tonumber(p[r * 9]) do s[d] = tonumber(p[r * 9 + d]) end
    shapes[r + 1], recv[r + 1] = s, numel_of(s)
  end
  local packed = T.flow.cat(parts, 1)
  local flat = T.call1(C.of_comm_all_to_all, g.ptr, packed.p, counts_ptr(send),
                       counts_ptr(recv), out1)
  local res, off = {}, 0
  for i, s in ipairs(shapes) do
    res[i] = flat:narrow(1, off + 1, recv[i]):view(s)
    off = off + recv[i]
  end
  return res
end

--- Flat all-to-all on one contiguous tensor with explicit counts.
function M.all_to_all_flat(t, send_counts, recv_counts, opts)
  A.check_tensor('all_to_all', t, LOCAL)
  sweep_due()
  local g = group_of(opts)
  return T.call1(C.of_comm_all_to_all, g.ptr, t.p, counts_ptr(send_counts),
                 counts_ptr(recv_counts), out1)
end

--- Point to point; recv fills `t` in place (shape and dtype agreed on).
function M.send(t, dst, opts)
  A.check_tensor('send', t, LOCAL)
  local g = group_of(opts)
  if C.of_comm_send(g.ptr, t.p, dst, opts and opts.tag or 0) ~= 0 then raise(2) end
end

function M.recv(t, src, opts)
  A.check_tensor('recv', t, LOCAL)
  local g = group_of(opts)
  if C.of_comm_recv(g.ptr, t.p, src, opts and opts.tag or 0) ~= 0 then raise(2) end
  return t
end

M.wrap = wrap
return M
