-- oneflow._C: loads liboneflow, declares its API to the FFI from the header
-- text embedded in the library, and owns the Lua side of tensor lifetimes.
local ffi = require 'ffi'
local bit = require 'bit'

local M = {}

local function script_dir()
  local src = debug.getinfo(1, 'S').source
  if src:sub(1, 1) ~= '@' then return nil end
  return src:sub(2):match('^(.*)[/\\]') or '.'
end

-- Where to look, in order: $OF_LIBRARY, the build/ tree of this checkout,
-- package.cpath (luarocks / make install), then the system loader.
local function candidates()
  local list = {}
  if os.getenv('OF_LIBRARY') then list[#list + 1] = os.getenv('OF_LIBRARY') end
  local dir = script_dir()
  if dir then
    list[#list + 1] = dir .. '/../../build/liboneflow.so'
    list[#list + 1] = dir .. '/../../../../lib/liboneflow.so'
    list[#list + 1] = dir .. '/../../../../lib/x86_64-linux-gnu/liboneflow.so'
  end
  local found = package.searchpath('liboneflow', package.cpath)
  if found then list[#list + 1] = found end
  list[#list + 1] = 'oneflow'
  return list
end

local function load_library()
  local tried = {}
  for _, path in ipairs(candidates()) do
    local isfile = path:find('/', 1, true) ~= nil
    local f = isfile and io.open(path, 'rb')
    if f then f:close() end
    if not isfile or f then
      local ok, lib = pcall(ffi.load, path)
      if ok then return lib, path end
      tried[#tried + 1] = path .. ' (' .. tostring(lib) .. ')'
    else
      tried[#tried + 1] = path .. ' (not found)'
    end
  end
  error('oneflow: cannot load liboneflow.so; looked in:\n  ' .. table.concat(tried, '\n  ')
        .. '\nBuild it with `make` in the checkout, or set OF_LIBRARY to its path.', 3)
end

-- OpenMP's worker threads spin up to 300000 pauses (milliseconds) for the
-- next parallel region before they sleep. On a shared machine a spinning
-- thread holds a core that other processes, and our own other thread, need:
-- a ResNet-18 step at 2 threads took 0.8-2.5 s instead of ~0.5 s with a
-- load average of 12 on 2 cores. 10000 (about half a millisecond) still
-- bridges the gaps between one op and the next. Set before the library
-- (and libgomp with it) loads; OMP_WAIT_POLICY or GOMP_SPINCOUNT set by the
-- user win.
if not os.getenv('GOMP_SPINCOUNT') and not os.getenv('OMP_WAIT_POLICY') then
  pcall(ffi.cdef, 'int setenv(const char *name, const char *value, int overwrite);')
  M.set_spincount = pcall(function() ffi.C.setenv('GOMP_SPINCOUNT', '10000', 0) end)
end

local C, path = load_library()
ffi.cdef('const char *of_cdef(void); int32_t of_version(void);')
ffi.cdef(ffi.string(C.of_cdef()))
if C.of_version() ~= C.OF_VERSION then
  error(('oneflow: library %s is version %d, the Lua modules expect %d')
        :format(path, C.of_version(), C.OF_VERSION))
end
M.C, M.ffi, M.library_path = C, ffi, path

-- A Lua tensor is a struct holding the C handle, not the bare pointer:
-- LuaJIT gives pointers built-in `p[i]` indexing, which would shadow
-- Torch-style `x[i]`. Pass `x.p` to C. `_slot` is its entry in `slots`.
ffi.cdef('struct of_lua_tensor { of_tensor *p; int32_t _slot; };')
local Handle = ffi.typeof('struct of_lua_tensor')
M.Handle = Handle

-- Errors: every C call returns a status; the message is thread-local in C.
function M.raise(level)
  error(ffi.string(C.of_last_error()), (level or 2) + 1)
end

------------------------------------------------------------------------------
-- Tensor lifetimes without a finalizer per tensor.
--
-- ffi.gc on every result costs ~0.25 us here, as much as a small op itself.
-- Instead each handle given to Lua gets a slot: `slots[id]` keeps the C
-- pointer, the weak-valued `live[id]` the Lua cdata. When the GC has run
-- (a sentinel's __gc tells us), the slots whose cdata died are released in
-- one sweep. A handle therefore costs two table stores.
------------------------------------------------------------------------------
local live = setmetatable({}, {__mode = 'v'})
local cap = 4096
local slots = ffi.new('of_tensor*[?]', cap + 1)
local free_ids, nfree, top = {}, 0, 0
local gc_epoch, swept_epoch = 0, 0
local stats = C.of_memory_stats_get(0)
-- Garbage tensors may hold this much C memory before a full collection:
-- reused blocks stay warm in the allocator's cache, fresh pages cost ~11 us
-- each to fault in.
local GC_FLOOR = 64 * 1024 * 1024
local gc_threshold = GC_FLOOR
-- Handles created since the last full collection, and how many we allow:
-- small enough that freed blocks go back to the allocator's cache while
-- still warm, large enough that a full GC of the user's heap stays cheap.
local wrapped, wrap_budget = 0, 8192

local function arm_sentinel()
  local proxy = newproxy(true)
  getmetatable(proxy).__gc = function()
    gc_epoch = gc_epoch + 1
    arm_sentinel()
  end
end
arm_sentinel()

local function sweep()
  swept_epoch = gc_epoch
  for id = 1, top do
    local p = slots[id]
    if p ~= nil and live[id] == nil then
      C.of_tensor_release(p)
      slots[id] = nil
      nfree = nfree + 1
      free_ids[nfree] = id
    end
  end
end

-- Warming Lua's heap before a forced full collection.
--
-- A full collection chases pointers through all of Lua's heap (3 MiB once
-- a model is made), and the tensors since the last one have evicted it
-- from the caches: every line is a trip to memory (MobileNetV2 at batch 8
-- ran 3 collections of 3.1 ms a forward, 0.9 ms with the heap in cache).
-- Prefetch hints over the heap's pages first (of_prefetch: they never
-- fault, also on a page unmapped since the scan, and change nothing) let
-- the memory stream them in, and the collector's chasing then hits the
-- caches: 3.1 -> 1.6 ms. The pages are the mappings (/proc/self/maps) that
-- hold the loaded modules' tables and functions, rescanned when the heap
-- has grown or shrunk by a quarter and every 64 collections; at most 24
-- MiB (past that the caches would not keep them anyway). OF_GC_WARM=0 turns
-- it off. (process_vm_readv on this process, the first form, also never
-- faulted but took 0.67 ms a collection to copy the heap.)
local warm = {on = ffi.os == 'Linux' and os.getenv('OF_GC_WARM') ~= '0', n = 0, kb = 0, sweeps = 0,
              rescan = true, base = {}, len = {}}
local WARM_MAX_BYTES = 24 * 1048576

local function address(v) return tonumber(string.format('%p', v):sub(3), 16) end

-- The mappings that hold a sample, in address order.
local function warm_scan()
  local samples = {}
  for _, mod in pairs(package.loaded) do
    if type(mod) == 'table' then
      samples[#samples + 1] = address(mod)
      for _, v in pairs(mod) do
        local t = type(v)
        if t == 'function' or t == 'table' then samples[#samples + 1] = address(v) end
      end
    end
  end
  table.sort(samples)
  local n, total, k = 0, 0, 1
  local f = io.open('/proc/self/maps')
  if f then
    for line in f:lines() do
      local a, b, perm = line:match('^(%x+)-(%x+) (%S+)')
      if perm == 'rw-p' then
        a, b = tonumber(a, 16), tonumber(b, 16)
        while k <= #samples and samples[k] < a do k = k + 1 end
        local held = k <= #samples and samples[k] < b
        while k <= #samples and samples[k] < b do k = k + 1 end
        if held and total < WARM_MAX_BYTES then
          n = n + 1
          warm.base[n] = ffi.cast('const void *', a)
          warm.len[n] = math.min(b - a, WARM_MAX_BYTES - total)
          total = total + warm.len[n]
        end
      end
    end
    f:close()
  end
  warm.n, warm.bytes, warm.sweeps, warm.rescan = n, total, 0, false
end

local function warm_heap()
  warm.sweeps = warm.sweeps + 1
  if warm.rescan or warm.sweeps > 64 then warm_scan() end
  for i = 1, warm.n do C.of_prefetch(warm.base[i], warm.len[i]) end
end

-- the allocator's running count of bytes handed out, at the last full sweep
local swept_bytes = stats.bytes_since_sweep

-- C memory is invisible to Lua's GC pacing: when tensors hold much more
-- than after the last sweep, collect now rather than at Lua's leisure.
local function full_sweep()
  if warm.on then warm_heap() end
  collectgarbage('collect')
  if warm.on then   -- the heap after a collection: rescan when it moved by a quarter
    local kb = collectgarbage('count')
    if kb > warm.kb * 1.25 or kb < warm.kb * 0.8 then warm.rescan, warm.kb = true, kb end
  end
  sweep()
  local cur = tonumber(stats.current_bytes)
  swept_bytes = stats.bytes_since_sweep
  gc_threshold = cur + math.max(cur / 4, GC_FLOOR)
  wrapped = 0
  wrap_budget = math.max(8192, 4 * collectgarbage('count'))
end

local function grow()
  local ncap = cap * 2
  local n = ffi.new('of_tensor*[?]', ncap + 1)
  ffi.copy(n, slots, ffi.sizeof('of_tensor*') * (cap + 1))
  slots, cap = n, ncap
end

--- Takes ownership of a C tensor handle and returns it as a Lua tensor.
-- (The Handle metatype is set by oneflow/init.lua.)
function M.wrap(p)
  if gc_epoch ~= swept_epoch then sweep() end
  wrapped = wrapped + 1
  if wrapped > wrap_budget or stats.current_bytes > gc_threshold then full_sweep() end
  local id
  if nfree > 0 then
    id = free_ids[nfree]
    nfree = nfree - 1
  else
    top = top + 1
    if top > cap then grow() end
    id = top
  end
  slots[id] = p
  local h = Handle(p, id)
  live[id] = h
  return h
end

--- Releases Lua tensor h's C handle now, not when the collector finds h
-- dead: for a caller that made h and knows nothing else holds it (the
-- values nn forwards pass on, oneflow.nn.module's free). h must not be
-- used after: its pointer is NULL. False when h is not a live handle.
function M.release(h)
  local id = h._slot
  if not rawequal(live[id], h) then return false end
  C.of_tensor_release(h.p)
  slots[id], live[id] = nil, nil
  nfree = nfree + 1
  free_ids[nfree] = id
  h.p = nil
  return true
end

-- Tracers that key values by their C address (the ONNX exporter) hold
-- every value while they run: a released value's address would pass to a
-- new tensor, which would then read as the old one.
local holders = 0
--- hold_values(1) before such a tracer runs, hold_values(-1) after.
function M.hold_values(d) holders = holders + d end

--- May code that made a tensor release it early (M.release)? Not while a
-- graph is traced or a tracer holds values. The one answer for nn forwards
-- and functionals. A gradient being recorded does not stop it: a value an
-- autograd node saves is its own alias of the storage (core/tensor/tape.c,
-- of_node_save), which the backward frees after its last use, and the
-- edges hold the nodes. (Until 2026-12-07 training kept every value of a
-- forward until Lua's collector found it: through the backward and often
-- into the next step.)
function M.may_release()
  return holders == 0 and C.of_tracing() == 0
end

--- Releases every handle whose Lua tensor is gone (also runs on its own).
M.collect = full_sweep

-- Before a backward. The forward's values that Lua no longer holds still
-- pin their memory through their handles until a sweep, so the whole
-- forward stayed in memory through the backward, and a step's dead values
-- into the next step: a ResNet-18 training step at batch 32 (112x112) had
-- 310 MiB in use at its peak after two steps and 417 MiB after eight.
-- Swept first, each saved value is freed by the backward after its last
-- use, as PyTorch's reference counts free it. Only once GC_FLOOR bytes
-- were handed out since the last full collection (which costs 1-3 ms,
-- "Warming" above): then the automatic one was due soon anyway, and this
-- one takes its place rather than adding one per step of a small model.
function M.sweep_for_backward()
  if stats.bytes_since_sweep - swept_bytes >= GC_FLOOR then full_sweep() end
end

-- the heap warming's state, for the specs: on, n ranges at base[i], len[i], rescan
M.gc_warm = warm

--- Releases the handles of tensors the GC has collected since the last
-- sweep, if any. wrap() does it after the C call; calling this before a
-- C call that allocates lets that call reuse the dead tensors' blocks
-- (warm, from the allocator's cache) rather than take further ones.
function M.sweep_due()
  if gc_epoch ~= swept_epoch then sweep() end
end

function M.live_handles()
  local n = 0
  for id = 1, top do if slots[id] ~= nil then n = n + 1 end end
  return n
end

-- When the Lua state closes (embedded hosts call lua_close), release all.
M._closer = newproxy(true)
getmetatable(M._closer).__gc = function()
  for id = 1, top do
    if slots[id] ~= nil then C.of_tensor_release(slots[id]); slots[id] = nil end
  end
end

-- Scratch out-parameters, reused by every call (one Lua state is one thread).
-- The op schema of core/ops/ops.def, one row per op kind in kind order
-- (kind is 0-based, as the C enum): name, attribute record (C struct),
-- record size (-1 variable), tensor inputs min..max, outputs (-1: from the
-- record), OF_OPF_* flags, family file core/ops/<family>.c, graph_only.
local FLAG_NAMES = {'elementwise', 'random', 'view', 'create', 'empty', 'opaque', 'varin',
                    'into', 'collective', 'varattr'}
function M.op_schema()
  local rows, info = {}, ffi.new('of_op_info')
  for k = 0, C.of_op_schema_count() - 1 do
    if C.of_op_schema(k, info) ~= 0 then M.raise(2) end
    local flags = {}
    for b, name in ipairs(FLAG_NAMES) do
      if bit.band(info.flags, bit.lshift(1, b - 1)) ~= 0 then flags[name] = true end
    end
    rows[#rows + 1] = {
      kind = k, name = ffi.string(info.name), attrs = ffi.string(info.attrs),
      family = ffi.string(info.family), attr_size = info.attr_size,
      min_inputs = info.min_inputs, max_inputs = info.max_inputs, outputs = info.outputs,
      flags = flags, graph_only = info.graph_only ~= 0,
    }
  end
  return rows
end

M.out1 = ffi.new('of_tensor*[1]')
M.out2 = ffi.new('of_tensor*[1]')

return M
