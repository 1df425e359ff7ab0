-- oneflow.utils.data (flow.utils.data): datasets, samplers, DataLoader.
--
--   local data = flow.utils.data
--   local MyDs = data.Dataset:subclass('MyDs')
--   function MyDs:init(n) self.n = n end
--   function MyDs:len() return self.n end
--   function MyDs:get(i) return flow.randn(3), i end   -- 1-based; any number of values
--   local loader = data.DataLoader(MyDs(100), {batch_size = 8, shuffle = true, num_workers = 2})
--   for x, y in loader:iter() do ... end       -- #loader batches; iter{progress = true}
--
-- Objects (datasets, samplers, loaders) are userdata proxies around a plain
-- table so that `#ds` calls ds:len() (LuaJIT ignores __len on tables);
-- fields and methods work as on tables, and ds[i] calls ds:get(i).
--
-- Samples: ds:get(i) returns one or more values. The default collate stacks
-- tensors along a new first dim (flow.stack), turns numbers into a tensor
-- (int64 when all are integers, else float32), booleans into a bool tensor,
-- keeps strings as a list, and collates tables key by key (same keys in
-- every sample). When get() returns several values, each position is
-- collated and the loader yields them as several values (`for x, y in`).
-- A custom collate_fn(samples) gets the list of samples (a sample with
-- several values as a list {a, b}); what it returns is yielded.
-- A dataset may define get_batch(indices) to build a whole batch at once;
-- TensorDataset does (one index_select per tensor) and Subset forwards it.
-- It is used only with the default collate and must give what collating
-- get() would.
--
-- Workers (num_workers > 0): fork() through the FFI, one process per
-- worker, at the start of each loader:iter(). Why fork: the child inherits
-- the dataset, collate_fn and any upvalues as they are, with no pickling
-- and no need for a dataset constructor that a fresh lua_State could run.
--   * The parent draws a base seed from flow's generator (in every mode, so
--     that num_workers does not change the random stream), then runs the
--     batch sampler to the end: the list of batches is fixed before forking.
--     Batch k belongs to worker (k - 1) % num_workers + 1.
--   * Each worker gets one AF_UNIX stream socketpair. The parent sends
--     one-byte credits: prefetch_factor at the start and one more per batch
--     it takes; a worker computes a batch per credit, so at most
--     prefetch_factor batches per worker are ahead of the consumer. The
--     worker encodes the collated values (tables, numbers, strings,
--     booleans, 64-bit cdata and tensors: dtype, shape, then the raw
--     contiguous bytes) and sends them; the parent reads the bytes straight
--     into fresh tensors. Since each worker handles its batches in order
--     and the parent reads batch k from worker (k-1) % n + 1, the order is
--     the sampler's, exactly as with num_workers = 0.
--   * In the worker: one thread (the library makes every fork()ed child
--     single-threaded, since GNU OpenMP hangs in a forked child that starts
--     a parallel team; flow.set_num_threads(n > 1) there is an error),
--     flow.manual_seed(base_seed + id - 1), math.randomseed likewise,
--     get_worker_info() returns {id, num_workers, seed, dataset}, then
--     worker_init_fn(id). The worker closes the parent's ends of every other
--     worker socket, asks the kernel to SIGKILL it when the parent dies,
--     and leaves with _exit (no atexit handlers, no flushing of stdio
--     buffers inherited from the parent -- the parent flushes io.stdout
--     and io.stderr before forking).
--   * An error in get()/collate/worker_init_fn is sent to the parent with
--     the worker's traceback; the parent kills and reaps all workers and
--     raises "DataLoader worker 2 (pid N) failed: <message>". A worker that
--     dies is reported with its exit status or signal, within POLL_MS
--     (0.1 s) even while the main process waits on another worker.
--   * timeout = T (seconds, 0: wait forever): a batch that has not arrived
--     T seconds after the main process asked for it raises "DataLoader
--     worker N (pid P) timed out after T s"; as with every error, all
--     workers are killed (SIGKILL) and reaped first.
--   * The end: after the last batch the workers exit and are reaped
--     (waitpid); an abandoned loop is cleaned up when the iterator is
--     garbage collected (a __gc guard: SIGKILL + waitpid) or by
--     loader:shutdown(). All sends use MSG_NOSIGNAL, so no SIGPIPE either way.
--   Each iter() forks fresh workers (no persistent workers); what the
--   dataset does in get() inside a worker (caches, counters) is not seen by
--   the parent.
--
-- pin_memory = true: every tensor of a batch is copied into page-locked
-- host memory (x:pin_memory()) in the main process, so that a copy to the
-- GPU can be asynchronous. Without a usable GPU it is a no-op, said once
-- on stderr (loader.pin_memory_note keeps the reason).
-- device = 'cuda' (or 'cuda:1'): batches arrive on that device. The copy of
-- batch k + 1 is queued on a side stream (pinned source, non_blocking) as
-- soon as batch k is handed out, so it overlaps the caller's work on k; the
-- current stream waits for the copy's event before batch k + 1 is used.
-- Implies pin_memory; an error when CUDA is unavailable.
local ffi = require 'ffi'
local OF = require('oneflow._C').C
local types = require 'oneflow.types'
local T = require 'oneflow.tensor'
local class = require 'oneflow.class'
local P = require 'oneflow.utils.posix'
local progress = require 'oneflow.utils.progress'

local C = P.C
local is_tensor = T.is_tensor
local flowf = T.flow   -- flow.* functions (stack, randperm, ...), filled by the op modules
local format = string.format
local unpack = unpack

local M = {}

------------------------------------------------------------------ classes
-- Instances are userdata proxies (so #ds and ds[i] work under LuaJIT's Lua
-- 5.1 semantics), made through oneflow.class's __alloc hook.
local Object = class('Object')
function Object.init() end
-- Constructors are `__init`, as for nn.Module; a class may define `init` instead.
function Object:__init(...) return self:init(...) end

function Object.__alloc(cls)
  local obj = setmetatable({}, cls)
  local proxy = newproxy(true)
  local mt = getmetatable(proxy)
  mt.__index = function(self, k)
    local v = obj[k]
    if v == nil and type(k) == 'number' then return self:get(k) end
    return v
  end
  mt.__newindex = obj
  mt.__len = function(self) return self:len() end
  mt.__tostring = function(self)
    local ok, n = pcall(self.len, self)
    return ok and format('%s(len=%s)', cls.__name, tostring(n)) or cls.__name
  end
  mt.__class = cls
  return proxy
end

--- Whether x is an instance of cls (or of a subclass).
M.isinstance = class.isinstance

------------------------------------------------------------------ datasets
--- Dataset: the base class; subclass it with get(i) (1-based, any number of values) and len();
-- ds[i] and #ds call them.
-- @function utils.data.Dataset
local Dataset = Object:subclass('Dataset')
M.Dataset = Dataset
function Dataset:len() error(self.__name .. ': len() is not implemented', 2) end
function Dataset:get() error(self.__name .. ': get(i) is not implemented', 2) end

local function check_index(ds, i, n)
  if type(i) ~= 'number' or i ~= math.floor(i) or i < 1 or i > n then
    error(format('%s: index %s out of range for a dataset of size %d', ds.__name, tostring(i), n), 3)
  end
end

--- A dataset over tensors of one first size: sample i is t1[i], t2[i], ....
-- `flow.utils.data.TensorDataset(images, labels)`.
-- @function flow.utils.data.TensorDataset
-- @tparam Tensor ... the tensors, of the same size(1)
-- @treturn Dataset with `len()` and `get(i)` (1-based)

local TensorDataset = Dataset:subclass('TensorDataset')
M.TensorDataset = TensorDataset
function TensorDataset:init(...)
  local n = select('#', ...)
  if n == 0 then error('TensorDataset: expected at least one tensor', 3) end
  local ts = {...}
  for i = 1, n do
    if not is_tensor(ts[i]) then error(format('TensorDataset: argument %d is not a tensor', i), 3) end
    if ts[i]:dim() == 0 then error(format('TensorDataset: tensor %d is 0-d', i), 3) end
    if ts[i]:size(1) ~= ts[1]:size(1) then
      error(format('TensorDataset: size mismatch: tensor %d has %d rows, tensor 1 has %d',
                   i, ts[i]:size(1), ts[1]:size(1)), 3)
    end
  end
  self.tensors, self.ntensors = ts, n
end
function TensorDataset:len() return self.tensors[1]:size(1) end
function TensorDataset:get(i)
  local ts = self.tensors
  check_index(self, i, ts[1]:size(1))
  if self.ntensors == 1 then return ts[1][i] end
  if self.ntensors == 2 then return ts[1][i], ts[2][i] end
  local res = {}
  for k = 1, self.ntensors do res[k] = ts[k][i] end
  return unpack(res, 1, self.ntensors)
end
function TensorDataset:get_batch(indices)
  if self.get ~= TensorDataset.get then return nil end   -- a subclass changed get()
  local n = self:len()
  for _, i in ipairs(indices) do check_index(self, i, n) end
  local idx = flowf.tensor(indices, {dtype = 'int64'})
  local res = {}
  for k = 1, self.ntensors do res[k] = self.tensors[k]:index_select(1, idx) end
  return unpack(res, 1, self.ntensors)
end

local function index_list(indices, op)
  if is_tensor(indices) and indices:dim() == 1 then
    indices = indices:totable()
  elseif type(indices) ~= 'table' then
    error(op .. ': indices must be a Lua list or a 1-d tensor, got ' .. require('oneflow._args').describe(indices), 3)
  end
  local res = {}
  for i = 1, #indices do res[i] = indices[i] end
  return res
end

--- Subset(ds, indices): indices a Lua list or a 1-based int tensor.
-- @function utils.data.Subset
local Subset = Dataset:subclass('Subset')
M.Subset = Subset
function Subset:init(ds, indices)
  self.dataset, self.indices = ds, index_list(indices, 'Subset')
end
function Subset:len() return #self.indices end
function Subset:get(i)
  check_index(self, i, #self.indices)
  return self.dataset:get(self.indices[i])
end
function Subset:get_batch(indices)
  if self.get ~= Subset.get or not self.dataset.get_batch then return nil end
  local inner, map, n = {}, self.indices, #self.indices
  for k, i in ipairs(indices) do
    check_index(self, i, n)
    inner[k] = map[i]
  end
  return self.dataset:get_batch(inner)
end

--- ConcatDataset({ds1, ds2, ...}).
-- @function utils.data.ConcatDataset
-- a dataset argument: anything with a len method (a table, or the userdata
-- proxy of a Dataset that gives #ds)
local function check_dataset(op, ds, what)
  local t = type(ds)
  if (t ~= 'table' and t ~= 'userdata') or type(ds.len) ~= 'function' then
    require('oneflow._args').fail(('%s: %s must be a dataset (with a len method), got %s')
      :format(op, what, require('oneflow._args').describe(ds)))
  end
end

local ConcatDataset = Dataset:subclass('ConcatDataset')
M.ConcatDataset = ConcatDataset
function ConcatDataset:init(list)
  if type(list) ~= 'table' or #list == 0 then error('ConcatDataset: expected a non-empty list of datasets', 3) end
  local cum, total = {}, 0
  for i, ds in ipairs(list) do
    check_dataset('ConcatDataset', ds, 'datasets[' .. i .. ']')
    total = total + ds:len()
    cum[i] = total
  end
  self.datasets, self.cumulative_sizes = list, cum
end
function ConcatDataset:len() return self.cumulative_sizes[#self.cumulative_sizes] end
function ConcatDataset:get(i)
  local cum = self.cumulative_sizes
  check_index(self, i, cum[#cum])
  local lo, hi = 1, #cum
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cum[mid] >= i then hi = mid else lo = mid + 1 end
  end
  return self.datasets[lo]:get(i - (cum[lo - 1] or 0))
end

--- random_split(ds, lengths): lengths are counts adding up to #ds, or
-- fractions adding up to 1 (floored, the remainder handed out one by one
-- from the first). Uses flow.randperm, so flow.manual_seed fixes it.
function M.random_split(ds, lengths)
  check_dataset('random_split', ds, 'argument 1 (dataset)')
  local n = ds:len()
  if type(lengths) ~= 'table' or #lengths == 0 then
    error('random_split: expected a list of lengths or fractions', 2)
  end
  local sum, sizes = 0, {}
  for _, l in ipairs(lengths) do
    if type(l) ~= 'number' or l < 0 then error('random_split: lengths must be non-negative numbers', 2) end
    sum = sum + l
  end
  if math.abs(sum - 1) < 1e-9 and n ~= 1 then
    local given = 0
    for i, f in ipairs(lengths) do
      sizes[i] = math.floor(n * f)
      given = given + sizes[i]
    end
    local i = 1
    while given < n do
      sizes[i] = sizes[i] + 1
      given = given + 1
      i = i % #sizes + 1
    end
  else
    for i, l in ipairs(lengths) do
      if l ~= math.floor(l) then error('random_split: lengths must be integers or fractions adding up to 1', 2) end
      sizes[i] = l
    end
    if sum ~= n then
      error(format('random_split: lengths add up to %s but the dataset has %d samples', tostring(sum), n), 2)
    end
  end
  local perm = n > 0 and flowf.randperm(n):totable() or {}
  local res, start = {}, 0
  for i, s in ipairs(sizes) do
    local idx = {}
    for k = 1, s do idx[k] = perm[start + k] end
    start = start + s
    res[i] = Subset(ds, idx)
  end
  return res
end

------------------------------------------------------------------ samplers
--- Sampler: the base class of index samplers (iter() gives the indices, len() their number).
-- @function utils.data.Sampler
local Sampler = Object:subclass('Sampler')
M.Sampler = Sampler
function Sampler:len() error(self.__name .. ': len() is not implemented', 2) end

local function list_iter(list)
  local i = 0
  return function()
    i = i + 1
    return list[i]
  end
end

--- SequentialSampler(ds): 1, 2, ..., #ds.
-- @function utils.data.SequentialSampler
local SequentialSampler = Sampler:subclass('SequentialSampler')
M.SequentialSampler = SequentialSampler
function SequentialSampler:init(ds) self.data_source = ds end
function SequentialSampler:len() return self.data_source:len() end
function SequentialSampler:iter()
  local i, n = 0, self:len()
  return function()
    if i >= n then return nil end
    i = i + 1
    return i
  end
end

--- RandomSampler(ds, {replacement = false, num_samples = #ds}): a fresh
-- permutation (flow.randperm, the global generator) at each iter().
-- @function utils.data.RandomSampler
local RandomSampler = Sampler:subclass('RandomSampler')
M.RandomSampler = RandomSampler
function RandomSampler:init(ds, opts)
  opts = require('oneflow._args').check_options('RandomSampler', opts, {replacement = true, num_samples = true})
  self.data_source, self.replacement, self.num_samples = ds, opts.replacement or false, opts.num_samples
end
function RandomSampler:len() return self.num_samples or self.data_source:len() end
function RandomSampler:iter()
  local n, want = self.data_source:len(), self:len()
  local list = {}
  if want > 0 and n == 0 then error('RandomSampler: cannot sample from an empty dataset', 2) end
  if self.replacement then
    if want > 0 then list = flowf.randint(1, n + 1, {want}):totable() end
  else
    while #list < want do
      local perm = flowf.randperm(n):totable()
      for k = 1, math.min(n, want - #list) do list[#list + 1] = perm[k] end
    end
  end
  return list_iter(list)
end

--- SubsetRandomSampler(indices): the given indices in random order.
-- @function utils.data.SubsetRandomSampler
local SubsetRandomSampler = Sampler:subclass('SubsetRandomSampler')
M.SubsetRandomSampler = SubsetRandomSampler
function SubsetRandomSampler:init(indices) self.indices = index_list(indices, 'SubsetRandomSampler') end
function SubsetRandomSampler:len() return #self.indices end
function SubsetRandomSampler:iter()
  local n, list = #self.indices, {}
  if n > 0 then
    local perm = flowf.randperm(n):totable()
    for k = 1, n do list[k] = self.indices[perm[k]] end
  end
  return list_iter(list)
end

-- Anything usable as a sampler: an object with :iter(), or a Lua list.
local function sampler_iter(s)
  if type(s) == 'table' and getmetatable(s) == nil then return list_iter(s) end
  return s:iter()
end
local function sampler_len(s)
  if type(s) == 'table' and getmetatable(s) == nil then return #s end
  return s:len()
end

--- BatchSampler(sampler, batch_size, drop_last): lists of indices.
-- @function utils.data.BatchSampler
local BatchSampler = Sampler:subclass('BatchSampler')
M.BatchSampler = BatchSampler
function BatchSampler:init(sampler, batch_size, drop_last)
  if type(batch_size) ~= 'number' or batch_size < 1 or batch_size ~= math.floor(batch_size) then
    error('BatchSampler: batch_size must be a positive integer, got ' .. tostring(batch_size), 3)
  end
  self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last or false
end
function BatchSampler:len()
  local n = sampler_len(self.sampler)
  if self.drop_last then return math.floor(n / self.batch_size) end
  return math.ceil(n / self.batch_size)
end
function BatchSampler:iter()
  local it, bs, drop = sampler_iter(self.sampler), self.batch_size, self.drop_last
  local finished = false
  return function()
    if finished then return nil end
    local b = {}
    for k = 1, bs do
      local i = it()
      if i == nil then finished = true; break end
      b[k] = i
    end
    if #b == 0 or (#b < bs and drop) then finished = true; return nil end
    return b
  end
end

------------------------------------------------------------------ collate
local function pack(...) return {n = select('#', ...), ...} end

--- default_collate(samples): see the file header.
function M.default_collate(batch)
  require('oneflow._args').arg('default_collate', 1, 'batch', batch, 'table')
  local elem = batch[1]
  if is_tensor(elem) then
    for i = 2, #batch do
      if not is_tensor(batch[i]) then error(format('default_collate: sample %d is not a tensor', i), 2) end
    end
    return flowf.stack(batch, 1)
  end
  local t = type(elem)
  if t == 'number' then
    local integral = true
    for i, v in ipairs(batch) do
      if type(v) ~= 'number' then error(format('default_collate: sample %d is not a number', i), 2) end
      if v ~= math.floor(v) or v ~= v or math.abs(v) == math.huge then integral = false end
    end
    return flowf.tensor(batch, {dtype = integral and 'int64' or 'float32'})
  elseif t == 'boolean' then
    return flowf.tensor(batch, {dtype = 'bool'})
  elseif t == 'string' then
    local res = {}
    for i, v in ipairs(batch) do res[i] = v end
    return res
  elseif t == 'table' then
    local keys, nkeys = {}, 0
    for k in pairs(elem) do nkeys = nkeys + 1; keys[nkeys] = k end
    for i = 2, #batch do
      local s = batch[i]
      if type(s) ~= 'table' or is_tensor(s) then error(format('default_collate: sample %d is not a table', i), 2) end
      local c = 0
      for k in pairs(s) do
        c = c + 1
        if elem[k] == nil then
          error(format('default_collate: sample %d has key %s that sample 1 lacks', i, tostring(k)), 2)
        end
      end
      if c ~= nkeys then error(format('default_collate: samples 1 and %d have different keys', i), 2) end
    end
    local res = {}
    for _, k in ipairs(keys) do
      local col = {}
      for i, s in ipairs(batch) do col[i] = s[k] end
      res[k] = M.default_collate(col)
    end
    return res
  end
  error('default_collate: cannot collate a ' .. t, 2)
end

-- One batch from a list of indices: a packed list of values to yield.
local function fetch(loader, indices)
  local ds = loader.dataset
  local custom = loader.collate_fn
  if not custom and ds.get_batch then
    local r = pack(ds:get_batch(indices))
    if r[1] ~= nil then return r end
  end
  local samples, arity = {}, nil
  for k, i in ipairs(indices) do
    local s = pack(ds:get(i))
    if arity == nil then arity = s.n end
    if s.n ~= arity and not custom then
      error(format('DataLoader: samples %d and %d have %d and %d values', indices[1], i, arity, s.n), 2)
    end
    if s.n == 1 then samples[k] = s[1] else s.n = nil; samples[k] = s end
  end
  if custom then return pack(custom(samples)) end
  if arity == 1 then return {n = 1, M.default_collate(samples)} end
  local res = {n = arity}
  for j = 1, arity do
    local col = {}
    for k, s in ipairs(samples) do col[k] = s[j] end
    res[j] = M.default_collate(col)
  end
  return res
end

------------------------------------------------------------------ wire format
-- Values: tag byte, then  1 false | 2 true | 3 f64 | 4 u32 len + bytes |
-- 5 tensor: u8 dtype, u8 ndim, ndim x i64, raw bytes | 6 table: u32 pairs,
-- key value ... | 7 int64 cdata | 8 uint64 cdata | 0 nil.
-- Messages: u8 kind (1 batch: u32 n, n values; 2 error: one string).
local CAP = 65536
local scratch = ffi.new('union { double d; int64_t i; uint64_t u; uint32_t u32; uint8_t b[8]; }')
local sbytes = scratch.b
local i64_t, u64_t = ffi.typeof('int64_t'), ffi.typeof('uint64_t')
local EOF = setmetatable({}, {__tostring = function() return 'end of stream' end})

local function send_all(fd, ptr, n)
  local p = ffi.cast('const uint8_t*', ptr)
  while n > 0 do
    local r = tonumber(C.send(fd, p, n, P.MSG_NOSIGNAL))
    if r < 0 then
      local e = ffi.errno()
      if e ~= P.EINTR then error('send failed (' .. P.strerror(e) .. ')', 0) end
    else
      p, n = p + r, n - r
    end
  end
end

local Writer = {}
Writer.__index = Writer
local function writer(fd) return setmetatable({fd = fd, buf = ffi.new('uint8_t[?]', CAP), pos = 0}, Writer) end
function Writer:flush()
  if self.pos > 0 then send_all(self.fd, self.buf, self.pos) end
  self.pos = 0
end
function Writer:raw(ptr, n)
  if self.pos + n > CAP then self:flush() end
  if n > CAP / 4 then send_all(self.fd, ptr, n); return end
  ffi.copy(self.buf + self.pos, ptr, n)
  self.pos = self.pos + n
end
function Writer:u8(v)
  if self.pos + 1 > CAP then self:flush() end
  self.buf[self.pos] = v
  self.pos = self.pos + 1
end
function Writer:u32(v) scratch.u32 = v; self:raw(sbytes, 4) end
function Writer:f64(v) scratch.d = v; self:raw(sbytes, 8) end
function Writer:i64(v) scratch.i = v; self:raw(sbytes, 8) end

-- Checks that v can be sent (before anything is written).
local function check_value(v, seen, depth, where)
  local t = type(v)
  if t == 'nil' or t == 'boolean' or t == 'number' or t == 'string' then return end
  if is_tensor(v) then return end
  if t == 'cdata' and (ffi.istype(i64_t, v) or ffi.istype(u64_t, v)) then return end
  if t == 'table' then
    if seen[v] then error('DataLoader: a collated batch contains a table twice or a cycle (at ' .. where .. ')', 0) end
    if depth > 100 then error('DataLoader: collated batch nested too deeply', 0) end
    seen[v] = true
    for k, x in pairs(v) do
      check_value(k, seen, depth + 1, where .. ' key')
      check_value(x, seen, depth + 1, where .. '.' .. tostring(k))
    end
    return
  end
  error(format('DataLoader: a worker cannot send a %s (at %s) to the main process', t, where), 0)
end

local function put_value(w, v)
  local t = type(v)
  if v == nil then w:u8(0)
  elseif v == false then w:u8(1)
  elseif v == true then w:u8(2)
  elseif t == 'number' then w:u8(3); w:f64(v)
  elseif t == 'string' then w:u8(4); w:u32(#v); w:raw(v, #v)
  elseif is_tensor(v) then
    if v.device.type ~= 'cpu' then v = v:to('cpu') end
    local c = v:contiguous()
    local nd = c:dim()
    w:u8(5); w:u8(OF.of_tensor_dtype(c.p)); w:u8(nd)
    for d = 1, nd do w:i64(c:size(d)) end
    local nbytes = c:numel() * c:element_size()
    if nbytes > 0 then w:raw(OF.of_tensor_data(c.p), nbytes) end
  elseif t == 'table' then
    local n = 0
    for _ in pairs(v) do n = n + 1 end
    w:u8(6); w:u32(n)
    for k, x in pairs(v) do put_value(w, k); put_value(w, x) end
  elseif ffi.istype(i64_t, v) then w:u8(7); w:i64(v)
  else w:u8(8); scratch.u = v; w:raw(sbytes, 8) end
end

local Reader = {}
Reader.__index = Reader
-- wait(): called before each read in the main process; it returns once the
-- socket is readable and raises on a timeout or a dead worker
local function reader(fd, wait)
  return setmetatable({fd = fd, buf = ffi.new('uint8_t[?]', CAP), pos = 0, have = 0, wait = wait}, Reader)
end

local function read_some(fd, ptr, n, wait)
  while true do
    if wait then wait() end
    local r = tonumber(C.read(fd, ptr, n))
    if r > 0 then return r end
    if r == 0 then error(EOF, 0) end
    local e = ffi.errno()
    -- a peer that exits with unread credits resets the connection
    if e == P.ECONNRESET then error(EOF, 0) end
    if e ~= P.EINTR then error('read failed (' .. P.strerror(e) .. ')', 0) end
  end
end

-- Makes at least n (<= 8) bytes available in the buffer.
function Reader:need(n)
  local avail = self.have - self.pos
  if avail >= n then return end
  local buf = self.buf
  for i = 0, avail - 1 do buf[i] = buf[self.pos + i] end
  self.pos, self.have = 0, avail
  while self.have < n do
    self.have = self.have + read_some(self.fd, buf + self.have, CAP - self.have, self.wait)
  end
end
function Reader:raw(dst, n)
  local p = ffi.cast('uint8_t*', dst)
  local avail = math.min(self.have - self.pos, n)
  if avail > 0 then
    ffi.copy(p, self.buf + self.pos, avail)
    self.pos = self.pos + avail
    p, n = p + avail, n - avail
  end
  while n > 0 do
    local r = read_some(self.fd, p, n, self.wait)
    p, n = p + r, n - r
  end
end
function Reader:u8()
  self:need(1)
  local v = self.buf[self.pos]
  self.pos = self.pos + 1
  return v
end
function Reader:word()
  self:need(8)
  ffi.copy(sbytes, self.buf + self.pos, 8)
  self.pos = self.pos + 8
end
function Reader:u32()
  self:need(4)
  ffi.copy(sbytes, self.buf + self.pos, 4)
  self.pos = self.pos + 4
  return scratch.u32
end

local function get_value(r, depth)
  local tag = r:u8()
  if tag == 0 then return nil
  elseif tag == 1 then return false
  elseif tag == 2 then return true
  elseif tag == 3 then r:word(); return scratch.d
  elseif tag == 4 then
    local n = r:u32()
    if n <= r.have - r.pos then
      local s = ffi.string(r.buf + r.pos, n)
      r.pos = r.pos + n
      return s
    end
    local tmp = ffi.new('uint8_t[?]', n)
    r:raw(tmp, n)
    return ffi.string(tmp, n)
  elseif tag == 5 then
    local dt, nd = r:u8(), r:u8()
    if dt >= OF.OF_NUM_DTYPES or nd > 8 then error('corrupt message (tensor header)', 0) end
    local shape = {}
    for d = 1, nd do r:word(); shape[d] = tonumber(scratch.i) end
    local t = flowf.empty(shape, {dtype = types.dtypes[dt]})
    local nbytes = t:numel() * t:element_size()
    if nbytes > 0 then r:raw(OF.of_tensor_data(t.p), nbytes) end
    return t
  elseif tag == 6 then
    if depth > 100 then error('corrupt message (nesting)', 0) end
    local n, res = r:u32(), {}
    for _ = 1, n do
      local k = get_value(r, depth + 1)
      local v = get_value(r, depth + 1)
      if k == nil then error('corrupt message (nil key)', 0) end
      res[k] = v
    end
    return res
  elseif tag == 7 then r:word(); return i64_t(scratch.i)
  elseif tag == 8 then r:word(); return u64_t(scratch.u)
  end
  error('corrupt message (tag ' .. tag .. ')', 0)
end

------------------------------------------------------------------ workers
local worker_info = nil
--- In a worker process: {id =, num_workers =, seed =, dataset =}; nil in the main process.
function M.get_worker_info() return worker_info end

-- Parent-side socket ends of all live workers (closed in every new child).
local parent_fds = {}

local function child_exit(code)
  pcall(io.stdout.flush, io.stdout)
  pcall(io.stderr.flush, io.stderr)
  C._exit(code)
end

local function traceback(e)
  return debug.traceback(tostring(e), 2)
end

local function send_error(w, msg)
  pcall(function()
    w.pos = 0
    w:u8(2)
    put_value(w, tostring(msg))
    w:flush()
  end)
end

-- Runs in the forked child; never returns.
local function worker_main(state, id, fd, parent_end)
  local code = 1
  local ok0, e0 = pcall(function()
    C.close(parent_end)
    for pfd in pairs(parent_fds) do C.close(pfd) end
    parent_fds = {}
    pcall(C.prctl, P.PR_SET_PDEATHSIG, P.SIGKILL, 0, 0, 0)
    if C.getppid() ~= state.owner then child_exit(0) end
    OF.of_set_num_threads(1)
    local loader, nw = state.loader, state.nw
    local seed = state.base_seed + id - 1
    flowf.manual_seed(seed)
    math.randomseed(seed)
    worker_info = {id = id, num_workers = nw, seed = seed, dataset = loader.dataset}
    local w = writer(fd)
    if loader.worker_init_fn then
      local ok, err = xpcall(loader.worker_init_fn, traceback, id)
      if not ok then
        send_error(w, 'worker_init_fn: ' .. tostring(err))
        return
      end
    end
    local tok = ffi.new('uint8_t[1]')
    local batches = state.batches
    for k = id, #batches, nw do
      -- wait for a credit; end of stream: the main process is done with us
      local ok = pcall(read_some, fd, tok, 1)
      if not ok then code = 0; return end
      local res
      ok, res = xpcall(fetch, traceback, loader, batches[k])
      if ok then
        local checked, err = pcall(check_value, res, {}, 0, 'batch')
        if not checked then ok, res = false, err end
      end
      if not ok then
        send_error(w, format('batch %d: %s', k, tostring(res)))
        return
      end
      local sent = pcall(function()
        w:u8(1)
        w:u32(res.n)
        for j = 1, res.n do put_value(w, res[j]) end
        w:flush()
      end)
      if not sent then code = 0; return end   -- the main process went away
    end
    code = 0
  end)
  if not ok0 then send_error(writer(fd), 'internal error: ' .. tostring(e0)) end
  child_exit(code)
end

local status_buf = ffi.new('int[1]')
local function reap(wk, hard)
  if wk.reaped then return wk.how end
  if hard then C.kill(wk.pid, P.SIGKILL) end
  while true do
    local r = C.waitpid(wk.pid, status_buf, 0)
    if r == wk.pid then
      local how, v = P.wait_status(status_buf[0])
      wk.how = how == 'exit' and ('exit status ' .. v) or ('signal ' .. v)
      break
    end
    if r < 0 and ffi.errno() ~= P.EINTR then wk.how = 'unknown status'; break end
  end
  wk.reaped = true
  return wk.how
end

local function close_fd(wk)
  if wk.fd >= 0 then
    C.close(wk.fd)
    parent_fds[wk.fd] = nil
    wk.fd = -1
  end
end

-- Stops all workers of an iteration: close the sockets, then kill (hard) or
-- let them exit on end of stream, and reap them.
local function shutdown(state, hard)
  if state.closed then return end
  state.closed = true
  if C.getpid() ~= state.owner then return end   -- a forked child's copy
  for _, wk in ipairs(state.workers) do close_fd(wk) end
  for _, wk in ipairs(state.workers) do reap(wk, hard) end
end

-- Raised by wait_readable (tables, so that receive() can tell them apart).
local TIMEOUT = {}

-- A worker other than `id` that died: raises {dead = j} naming it. Workers
-- that exit normally (status 0, after their last batch) are only reaped.
local function check_others(state, id)
  for j, wk in ipairs(state.workers) do
    if j ~= id and not wk.reaped then
      local r = C.waitpid(wk.pid, status_buf, P.WNOHANG)
      if r == wk.pid then
        local how, v = P.wait_status(status_buf[0])
        wk.how = how == 'exit' and ('exit status ' .. v) or ('signal ' .. v)
        wk.reaped = true
        if not (how == 'exit' and v == 0) then error({dead = j}, 0) end
      end
    end
  end
end

-- Waits until worker id's socket is readable (data, end of stream or an
-- error: read() tells which), waking every POLL_MS to see whether another
-- worker died, and raising TIMEOUT when the batch's deadline passes.
local POLL_MS = 100
local pfd = ffi.new('struct pollfd[1]')
local function wait_readable(state, id)
  local wk = state.workers[id]
  while true do
    local slice = POLL_MS
    if state.deadline then
      local left = state.deadline - P.now()
      if left <= 0 then error(TIMEOUT, 0) end
      slice = math.min(slice, math.ceil(left * 1000))
    end
    pfd[0].fd, pfd[0].events, pfd[0].revents = wk.fd, P.POLLIN, 0
    local r = C.poll(pfd, 1, slice)
    if r > 0 then return end
    if r < 0 and ffi.errno() ~= P.EINTR then error('poll failed (' .. P.strerror() .. ')', 0) end
    check_others(state, id)
  end
end

local function credit(wk)
  if wk.fd < 0 or wk.credits >= wk.count then return end
  wk.credits = wk.credits + 1
  pcall(send_all, wk.fd, '\1', 1)   -- a dead worker shows up when we read
end

local function fail(state, msg)
  shutdown(state, true)
  error(msg, 0)
end

local function receive(state, k)
  local id = (k - 1) % state.nw + 1
  local wk = state.workers[id]
  local timeout = state.loader.timeout
  state.deadline = timeout > 0 and P.now() + timeout or nil
  local ok, res = pcall(function()
    local r = wk.reader
    local kind = r:u8()
    if kind == 2 then return {err = get_value(r, 0)} end
    if kind ~= 1 then error('corrupt message (kind ' .. kind .. ')', 0) end
    local n = r:u32()
    local vals = {n = n}
    for j = 1, n do vals[j] = get_value(r, 0) end
    return vals
  end)
  if not ok then
    if res == TIMEOUT then
      fail(state, format('DataLoader worker %d (pid %d) timed out after %g s (waiting for batch %d)',
                         id, wk.pid, timeout, k))
    end
    if type(res) == 'table' and res.dead then
      local d = state.workers[res.dead]
      fail(state, format('DataLoader worker %d (pid %d) exited unexpectedly (%s) while waiting for batch %d',
                         res.dead, d.pid, d.how, k))
    end
    if res == EOF then
      close_fd(wk)
      local how = reap(wk, false)
      fail(state, format('DataLoader worker %d (pid %d) exited unexpectedly (%s) before sending batch %d',
                         id, wk.pid, how, k))
    end
    fail(state, format('DataLoader worker %d (pid %d): %s', id, wk.pid, tostring(res)))
  end
  if res.err then fail(state, format('DataLoader worker %d (pid %d) failed: %s', id, wk.pid, tostring(res.err))) end
  return res
end

local function start_workers(loader, batches, base_seed)
  local nw = math.min(loader.num_workers, #batches)
  local state = {workers = {}, batches = batches, nw = nw, owner = C.getpid(), loader = loader,
                 base_seed = base_seed, next = 1, closed = false}
  local guard = newproxy(true)
  getmetatable(guard).__gc = function() shutdown(state, true) end
  state.guard = guard
  loader._iters[state] = true
  pcall(io.stdout.flush, io.stdout)
  pcall(io.stderr.flush, io.stderr)
  local pf = loader.prefetch_factor
  for id = 1, nw do
    local sv = ffi.new('int[2]')
    if C.socketpair(P.AF_UNIX, P.SOCK_STREAM + P.SOCK_CLOEXEC, 0, sv) ~= 0 then
      fail(state, 'DataLoader: socketpair failed (' .. P.strerror() .. ')')
    end
    local pid = C.fork()
    if pid == 0 then worker_main(state, id, sv[1], sv[0]) end
    if pid < 0 then
      local e = P.strerror()
      C.close(sv[0]); C.close(sv[1])
      fail(state, 'DataLoader: fork failed (' .. e .. ')')
    end
    C.close(sv[1])
    parent_fds[sv[0]] = true
    local count = math.floor((#batches - id) / nw) + 1
    local wk = {pid = pid, fd = sv[0], credits = 0, count = count}
    wk.reader = reader(sv[0], function() wait_readable(state, id) end)
    state.workers[id] = wk
    for _ = 1, math.min(pf, count) do credit(wk) end
  end
  return function()
    if state.closed then return nil end
    local k = state.next
    if k > #batches then
      shutdown(state, false)
      return nil
    end
    local res = receive(state, k)
    state.next = k + 1
    credit(state.workers[(k - 1) % nw + 1])
    return unpack(res, 1, res.n)
  end
end

------------------------------------------------------------------ DataLoader
local DataLoader = Object:subclass('DataLoader')
M.DataLoader = DataLoader

local function opt_int(v, name, min, default)
  if v == nil then return default end
  if type(v) ~= 'number' or v ~= math.floor(v) or v < min then
    error(format('DataLoader: %s must be an integer >= %d, got %s', name, min, tostring(v)), 4)
  end
  return v
end

--- Batches of a dataset: `for x, y in loader:iter() do ... end`.
-- `flow.utils.data.DataLoader(ds, {batch_size = 64, shuffle = true, num_workers = 2})`.
-- @function flow.utils.data.DataLoader
-- @param dataset a Dataset (`:len()`, `:get(i)`, 1-based) or a TensorDataset
-- @tparam[opt] table opts `{batch_size = 1, shuffle = false, sampler =, batch_sampler =,
-- drop_last = false, collate_fn =, num_workers = 0, prefetch_factor = 2,
-- worker_init_fn =, timeout = 0, progress =, pin_memory = false, device =, generator =}`
-- @treturn DataLoader with `iter([opts])`, `len()`, `shutdown()`
function DataLoader:init(ds, opts)
  opts = require('oneflow._args').check_options('DataLoader', opts, {
    batch_size = true, shuffle = true, sampler = true, batch_sampler = true, drop_last = true,
    collate_fn = true, num_workers = true, prefetch_factor = true, worker_init_fn = true,
    progress = true, device = true, pin_memory = true, timeout = true})
  if ds == nil then error('DataLoader: expected a dataset', 3) end
  self.dataset = ds
  self.num_workers = opt_int(opts.num_workers, 'num_workers', 0, 0)
  self.prefetch_factor = opt_int(opts.prefetch_factor, 'prefetch_factor', 1, 2)
  local timeout = opts.timeout or 0
  if type(timeout) ~= 'number' or timeout < 0 or timeout ~= timeout then
    error(format('DataLoader: timeout must be a number of seconds >= 0, got %s', tostring(opts.timeout)), 3)
  end
  if timeout > 0 and self.num_workers == 0 then
    error('DataLoader: timeout applies to worker processes; it must be 0 when num_workers = 0', 3)
  end
  self.timeout = timeout
  self.collate_fn = opts.collate_fn
  self.worker_init_fn = opts.worker_init_fn
  self.progress = opts.progress
  self._iters = setmetatable({}, {__mode = 'k'})
  self.device = opts.device and types.device(opts.device) or nil
  if self.device and self.device.type == 'cpu' then self.device = nil end
  if self.device and not require('oneflow.cuda').is_available() then
    error(format('DataLoader: device %s is not available: %s', tostring(self.device),
                 require('oneflow.cuda').why_unavailable()), 3)
  end
  self.pin_memory = (opts.pin_memory or self.device ~= nil) and true or false
  if self.pin_memory and not require('oneflow.cuda').is_available() then
    self.pin_memory = false
    self.pin_memory_note = 'pin_memory ignored: CUDA is not available (' ..
                           require('oneflow.cuda').why_unavailable() .. ')'
    if not M._pin_note_said then
      M._pin_note_said = true
      io.stderr:write('DataLoader: ', self.pin_memory_note, '\n')
    end
  end
  if opts.batch_sampler ~= nil then
    if (opts.batch_size ~= nil and opts.batch_size ~= 1) or opts.shuffle or opts.sampler ~= nil or opts.drop_last then
      error('DataLoader: batch_sampler is mutually exclusive with batch_size, shuffle, sampler and drop_last', 3)
    end
    self.batch_sampler = opts.batch_sampler
    return
  end
  if opts.sampler ~= nil and opts.shuffle then
    error('DataLoader: sampler is mutually exclusive with shuffle', 3)
  end
  self.batch_size = opt_int(opts.batch_size, 'batch_size', 1, 1)
  self.drop_last = opts.drop_last or false
  self.sampler = opts.sampler or (opts.shuffle and RandomSampler(ds) or SequentialSampler(ds))
  self.batch_sampler = BatchSampler(self.sampler, self.batch_size, self.drop_last)
end

function DataLoader:len() return sampler_len(self.batch_sampler) end

-- A seed for the workers, drawn in every mode (as PyTorch does), so that the
-- global generator advances the same way whatever num_workers is.
local function draw_seed()
  return flowf.randint(0, 2 ^ 31 - 1, {1}):item()
end

-- f applied to every tensor of a collated value (tables key by key).
local function map_tensors(v, f)
  if is_tensor(v) then return f(v) end
  if type(v) ~= 'table' then return v end
  local r = {}
  for k, x in pairs(v) do r[k] = map_tensors(x, f) end
  return r
end

local function pin(t) return t:is_pinned() and t or t:pin_memory() end

local function pinned(it)
  return function()
    local r = pack(it())
    if r[1] == nil then return nil end
    for i = 1, r.n do r[i] = map_tensors(r[i], pin) end
    return unpack(r, 1, r.n)
  end
end

-- Batches copied to `device` one ahead, on a side stream (see the header).
local function to_device(it, device)
  local cuda = require 'oneflow.cuda'
  local side = cuda.Stream(device.index)
  local function stage()
    local r = pack(it())
    if r[1] == nil then return nil end
    local host, ev = r, cuda.Event()
    local dev = {n = r.n}
    cuda.stream(side, function()
      for i = 1, r.n do
        dev[i] = map_tensors(r[i], function(t) return t:to(device, {non_blocking = true}) end)
      end
      ev:record(side)
    end)
    return {dev = dev, host = host, ev = ev}
  end
  local nxt, prev = stage(), nil
  return function()
    -- the batch handed out last time has been copied long ago; its pinned
    -- host buffers may go only once the copy is known to be done
    if prev then prev.ev:synchronize() end
    local cur = nxt
    if not cur then return nil end
    cuda.wait_event(cur.ev)
    prev, nxt = cur, stage()
    return unpack(cur.dev, 1, cur.dev.n)
  end
end

--- loader:iter([{progress = true | {desc =, ...}}]): an iterator for a generic for.
function DataLoader:iter(opts)
  opts = require('oneflow._args').check_options('DataLoader:iter', opts, {'progress'})
  local base_seed = draw_seed()
  local it, total
  if self.num_workers == 0 then
    local bit = sampler_iter(self.batch_sampler)
    it = function()
      local idx = bit()
      if idx == nil then return nil end
      local r = fetch(self, idx)
      return unpack(r, 1, r.n)
    end
  else
    local batches = {}
    for idx in sampler_iter(self.batch_sampler) do batches[#batches + 1] = idx end
    total = #batches
    it = start_workers(self, batches, base_seed)
  end
  if self.pin_memory then it = pinned(it) end
  if self.device then it = to_device(it, self.device) end
  local pg = opts.progress
  if pg == nil then pg = self.progress end
  if pg then
    local po = type(pg) == 'table' and pg or {}
    local o = {}
    for k, v in pairs(po) do o[k] = v end
    if o.total == nil then
      o.total = total
      if o.total == nil then
        local ok, n = pcall(self.len, self)
        if ok then o.total = n end
      end
    end
    it = progress.wrap(it, o)
  end
  return it
end

--- Kills and reaps the workers of every unfinished iterator of this loader.
function DataLoader:shutdown()
  for state in pairs(self._iters) do shutdown(state, true) end
end

M.DistributedSampler = require('oneflow.utils.data_distributed')(M)

M._live_worker_fds = function()
  local n = 0
  for _ in pairs(parent_fds) do n = n + 1 end
  return n
end

return M
