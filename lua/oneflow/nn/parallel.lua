-- oneflow.nn.parallel: DistributedDataParallel for local tensors.
--
--   local ddp = flow.nn.parallel.DistributedDataParallel(net, {bucket_cap_mb = 25})
--   local loss = F.cross_entropy(ddp(x), y)   -- x: this rank's part of the batch
--   loss:backward()                            -- grads averaged over the ranks
--
-- At wrap time rank 0's parameters and buffers are broadcast. Gradients are
-- averaged in buckets of about bucket_cap_mb MiB, parameters taken in
-- reverse registration order (roughly the order backward produces their
-- grads). A hook on each parameter copies its grad into its bucket slot;
-- when every slot of a bucket is filled, the bucket's all-reduce starts
-- nonblocking, so communication overlaps the rest of backward. Buckets
-- start in index order on every rank (collectives match by order). The
-- hook of the last parameter to get its grad waits for all buckets and
-- writes the averages into the parameters' .grad.
local ffi = require 'ffi'
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local autograd = require 'oneflow.autograd'
local module = require 'oneflow.nn.module'
local U = require 'oneflow.nn._util'

local C = core.C
local fail = U.fail
local Module = module.Module

local M = {}
local PG = require 'oneflow.nn.parallel_global'
M.to_global, M.linear_sbp = PG.to_global, PG.linear_sbp
Module.to_global = PG.to_global

local function comm() return require 'oneflow.distributed.comm' end
local function work() return require 'oneflow.distributed.work' end

local function key(ptr) return tonumber(ffi.cast('uintptr_t', ptr)) end

local DDP = Module:subclass('DistributedDataParallel')
M.DistributedDataParallel = DDP

local known = {bucket_cap_mb = true, find_unused_parameters = true, broadcast_buffers = true,
               process_group = true, group = true, device_ids = true, output_device = true,
               dim = true, gradient_as_bucket_view = true, static_graph = true,
               check_reduction = true}

--- DistributedDataParallel(module[, {bucket_cap_mb = 25, find_unused_parameters = false,
--  broadcast_buffers = true, process_group = group or list of ranks}])
function DDP:__init(mod, opts)
  Module.__init(self)
  if not module.is_module(mod) then
    fail('DistributedDataParallel: expected an nn.Module to wrap, got ' .. type(mod))
  end
  opts = U.check_options('DistributedDataParallel', opts, known)
  local cap = opts.bucket_cap_mb or 25
  if type(cap) ~= 'number' or cap <= 0 then
    fail('DistributedDataParallel: bucket_cap_mb must be a positive number, got '
         .. tostring(cap))
  end
  self.module = mod
  local g = opts.process_group or opts.group
  local group = g == nil and comm().world() or (type(g) == 'table' and g.ptr and g
                                                 or comm().new_group(g))
  rawset(self, '_group', group)
  rawset(self, 'find_unused_parameters', opts.find_unused_parameters == true)
  rawset(self, 'broadcast_buffers', opts.broadcast_buffers ~= false)
  rawset(self, 'require_backward_grad_sync', true)
  rawset(self, 'bucket_cap_mb', cap)

  local params, names = {}, {}
  for name, p in mod:named_parameters() do
    if type(p) ~= 'cdata' then
      fail(('DistributedDataParallel: parameter %s is a global tensor; DDP is for local '
            .. 'tensors (global tensors are data parallel through their sbp)'):format(name))
    end
    if p.requires_grad then
      params[#params + 1] = p
      names[#names + 1] = name
    end
  end
  rawset(self, '_params', params)
  rawset(self, '_names', names)
  self:_sync_module_states()
  self:_build_buckets(cap * 1024 * 1024)
  for i, p in ipairs(params) do
    p:register_hook(function(grad) return self:_on_grad(i, grad) end)
  end
  rawset(self, '_state', nil)
end

-- Rank 0's parameters and buffers everywhere (one broadcast per dtype).
function DDP:_sync_module_states()
  local list = {}
  for _, p in ipairs(self.module:parameters()) do list[#list + 1] = p end
  for _, b in ipairs(self.module:buffers()) do list[#list + 1] = b end
  self:_broadcast_coalesced(list)
end

function DDP:_broadcast_coalesced(list)
  local group = self._group
  if group.size == 1 or #list == 0 then return end
  local by_dtype, order = {}, {}
  for _, t in ipairs(list) do
    local d = tostring(t.dtype)
    if not by_dtype[d] then by_dtype[d] = {}; order[#order + 1] = d end
    table.insert(by_dtype[d], t)
  end
  autograd.no_grad(function()
    for _, d in ipairs(order) do
      local ts = by_dtype[d]
      local flat = {}
      for i, t in ipairs(ts) do flat[i] = t:reshape(-1) end
      local buf = T.flow.cat(flat, 1)
      comm().broadcast(buf, 0, {group = group})
      local off = 0
      for _, t in ipairs(ts) do
        local n = t:numel()
        t:copy_(buf:narrow(1, off + 1, n):view(t:size()))
        off = off + n
      end
    end
  end)
end

-- Buckets: consecutive parameters (reverse order) of one dtype up to cap bytes.
function DDP:_build_buckets(cap)
  local params = self._params
  local buckets, where = {}, {}
  local cur
  for i = #params, 1, -1 do
    local p = params[i]
    local bytes = p:numel() * p:element_size()
    if not cur or cur.dtype ~= p.dtype or (cur.bytes > 0 and cur.bytes + bytes > cap) then
      cur = {dtype = p.dtype, bytes = 0, members = {}, numel = 0}
      buckets[#buckets + 1] = cur
    end
    cur.members[#cur.members + 1] = i
    cur.bytes = cur.bytes + bytes
    cur.numel = cur.numel + p:numel()
    where[i] = #buckets
  end
  local slots = {}
  for _, b in ipairs(buckets) do
    b.flat = T.flow.zeros(b.numel, {dtype = b.dtype})
    local off = 0
    for _, i in ipairs(b.members) do
      local p = params[i]
      slots[i] = b.flat:narrow(1, off + 1, p:numel()):view(p:size())
      off = off + p:numel()
    end
  end
  rawset(self, '_buckets', buckets)
  rawset(self, '_bucket_of', where)
  rawset(self, '_slots', slots)
end

--- Number of gradient buckets and the parameter names in each (for tests
-- and tuning bucket_cap_mb).
function DDP:bucket_layout()
  local res = {}
  for b, bk in ipairs(self._buckets) do
    local names = {}
    for j, i in ipairs(bk.members) do names[j] = self._names[i] end
    res[b] = names
  end
  return res
end

------------------------------------------------------------------ forward
local function collect_tensors(v, out, seen)
  if T.is_tensor(v) then
    out[#out + 1] = v
  elseif type(v) == 'table' and not seen[v] then
    seen[v] = true
    for _, x in pairs(v) do collect_tensors(x, out, seen) end
  end
  return out
end

-- Indices of the parameters the graph behind `outputs` does not reach.
function DDP:_unused(outputs)
  local acc = {}
  for i, p in ipairs(self._params) do
    local a = C.of_tensor_grad_accumulator(p.p)
    if a ~= nil then acc[key(a)] = i end
  end
  local used, seen, stack = {}, {}, {}
  for _, t in ipairs(collect_tensors(outputs, {}, {})) do
    local fn = C.of_tensor_grad_fn(t.p)
    if fn ~= nil then
      stack[#stack + 1] = fn
    else
      for i, p in ipairs(self._params) do if p == t then used[i] = true end end
    end
  end
  while #stack > 0 do
    local n = table.remove(stack)
    local k = key(n)
    if not seen[k] then
      seen[k] = true
      local i = acc[k]
      if i then used[i] = true end
      for j = 0, C.of_node_num_next(n) - 1 do
        local m = C.of_node_next(n, j)
        if m ~= nil then stack[#stack + 1] = m end
      end
    end
  end
  local unused = {}
  for i = 1, #self._params do if not used[i] then unused[#unused + 1] = i end end
  return unused
end

-- An earlier backward that started reducing but left parameters without a
-- grad: the same error as PyTorch, after finishing what was started (the
-- other ranks wait on those collectives).
function DDP:_check_previous()
  local st = self._state
  if not st or st.fired == 0 then return end
  for _, w in pairs(st.works) do w:wait() end
  rawset(self, '_state', nil)
  local missing = {}
  for i = 1, #self._params do
    if not st.ready[i] then missing[#missing + 1] = self._names[i] end
  end
  fail(('DistributedDataParallel: expected to have finished reduction in the prior iteration '
        .. 'before starting a new one; parameters that did not receive a gradient on rank %d: '
        .. '%s. Pass find_unused_parameters = true when part of the model may not take part '
        .. 'in the loss, and make sure every output of forward takes part in it')
       :format(self._group.rank, table.concat(missing, ', ')))
end

function DDP:forward(...)
  self:_check_previous()
  if self.broadcast_buffers and #self.module:buffers() > 0 and self.training then
    self:_broadcast_coalesced(self.module:buffers())
  end
  local out = self.module(...)
  if autograd.is_grad_enabled() and self.require_backward_grad_sync and self._group.size > 1 then
    local st = {ready = {}, nready = 0, fired = 0, pending = {}, launched = 0, works = {},
                unused = nil, early = 0}
    for b, bk in ipairs(self._buckets) do st.pending[b] = #bk.members end
    if self.find_unused_parameters then st.unused = self:_unused(out) end
    rawset(self, '_state', st)
  else
    rawset(self, '_state', nil)
  end
  return out
end

--- ddp:no_sync(fn, ...): runs fn with gradient synchronisation off, so
-- backward passes inside only accumulate local grads; the first backward
-- after it averages the accumulated grads.
function DDP:no_sync(fn, ...)
  local old = self.require_backward_grad_sync
  rawset(self, 'require_backward_grad_sync', false)
  local res = {pcall(fn, ...)}
  rawset(self, 'require_backward_grad_sync', old)
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, table.maxn(res))
end

------------------------------------------------------------------ backward
function DDP:_launch_ready(st)
  local buckets = self._buckets
  local n = self._group.size
  while st.launched < #buckets and st.pending[st.launched + 1] == 0 do
    local b = st.launched + 1
    local flat = buckets[b].flat
    flat:div_(n)
    st.works[b] = work().all_reduce(self._group, flat, 0)
    st.launched = b
    if st.nready < #self._params then st.early = st.early + 1 end
  end
  -- testing lets MPI progress the collectives already in flight
  for b = 1, st.launched do
    local w = st.works[b]
    if w and w:is_completed() then st.works[b] = nil end
  end
end

function DDP:_mark_ready(st, i)
  st.ready[i] = true
  st.nready = st.nready + 1
  local b = self._bucket_of[i]
  st.pending[b] = st.pending[b] - 1
end

-- Every bucket reduced: the averages become the parameters' grads. `cur`
-- is the parameter whose hook runs now: its grad is set by the engine from
-- what the hook returns.
function DDP:_finalize(st, cur)
  for b = 1, #self._buckets do
    local w = st.works[b]
    if w then w:wait() end
  end
  rawset(self, '_state', nil)
  -- buckets whose all-reduce started while backward still had grads to make
  rawset(self, 'last_reduction', {buckets = #self._buckets, launched_during_backward = st.early})
  local global_used
  if st.unused then
    -- a parameter unused on every rank keeps its grad, as in PyTorch
    local used = {}
    for i = 1, #self._params do used[i] = st.local_unused[i] and 0 or 1 end
    local flags = T.flow.tensor(used, {dtype = 'int32'})
    comm().all_reduce(flags, {group = self._group})
    global_used = flags:totable()
  end
  local res
  for i, p in ipairs(self._params) do
    if not global_used or global_used[i] > 0 then
      local slot = self._slots[i]
      if i == cur then
        p.grad = nil
        res = slot
      else
        local g = p.grad
        if g ~= nil and g:is_contiguous() and g.grad_fn == nil then g:copy_(slot)
        else p.grad = slot:clone() end
      end
    end
  end
  return res
end

function DDP:_on_grad(i, grad)
  local st = self._state
  if not st or st.ready[i] then return nil end
  return autograd.no_grad(function()
    st.fired = st.fired + 1
    if st.fired == 1 and st.unused then
      st.local_unused = {}
      for _, j in ipairs(st.unused) do
        st.local_unused[j] = true
        self._slots[j]:zero_()
        local prev = self._params[j].grad
        if prev ~= nil then self._slots[j]:copy_(prev) end
        self:_mark_ready(st, j)
      end
    end
    local slot, prev = self._slots[i], self._params[i].grad
    slot:copy_(grad)
    if prev ~= nil then slot:add_(prev) end
    self:_mark_ready(st, i)
    self:_launch_ready(st)
    if st.nready == #self._params then return self:_finalize(st, i) end
    return nil
  end)
end

return M
