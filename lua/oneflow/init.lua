-- oneflow: `local flow = require 'oneflow'`.
-- Assembles the flow table from the tensor type and the op modules, and
-- attaches the metatype that makes an `of_tensor*` behave as a tensor.
local ffi = require 'ffi'
local core = require 'oneflow._C'
local A = require 'oneflow._args'
local types = require 'oneflow.types'
local T = require 'oneflow.tensor'

-- One module per topic, as core/ops (see doc/internals.md, "Lua layout").
local op_modules = {
  'oneflow.ops.views', 'oneflow.ops.shape', 'oneflow.ops.creation',
  'oneflow.ops.elementwise', 'oneflow.ops.reduce', 'oneflow.ops.scan', 'oneflow.ops.stats',
  'oneflow.ops.index', 'oneflow.ops.linalg', 'oneflow.ops.einsum', 'oneflow.ops.random',
  'oneflow.ops.nn_conv', 'oneflow.ops.nn_norm', 'oneflow.ops.nn_loss', 'oneflow.ops.nn_pad',
  'oneflow.ops.nn_resample',
  'oneflow.ops.linalg_ext', 'oneflow.ops.special', 'oneflow.ops.complex',
}
for _, name in ipairs(op_modules) do require(name) end
local printing = require 'oneflow.print'
local autograd = require 'oneflow.autograd'

-- The flow table is package.loaded.oneflow from here on, so the modules
-- required below (nn, optim, ...) may `require 'oneflow'` while it is being
-- built; they read it when they run, by which time it is complete.
local flow = {}
package.loaded.oneflow = flow
for k, v in pairs(T.flow) do flow[k] = v end

local methods, getters, index, newindex = T.methods, T.getters, T.index, T.newindex
local mt = T.metatable_ops
mt.__index = function(t, k)
  local m = methods[k]
  if m ~= nil then return m end
  local g = getters[k]
  if g ~= nil then return g(t) end
  return index(t, k)
end
mt.__newindex = function(t, k, v)
  local setter = T.setters and T.setters[k]
  if setter then return setter(t, v) end
  return newindex(t, k, v)
end
mt.__tostring = printing.tostring
mt.__len = function(t) return t:size(1) end
ffi.metatype('struct of_lua_tensor', mt)

flow.C = core.C
flow._C = core   -- the library loader; _C.op_schema() lists the C ops (core/ops/ops.def)
flow.class = require 'oneflow.class'
flow.autograd = autograd
flow.no_grad, flow.enable_grad = autograd.no_grad, autograd.enable_grad
flow.set_grad_enabled, flow.is_grad_enabled = autograd.set_grad_enabled, autograd.is_grad_enabled
flow.Tensor = methods
flow.is_tensor = T.is_tensor
flow.Size = types.Size
flow.device = types.device
flow.dtype = types.dtype
for name, d in pairs(types.by_name) do flow[name] = d end
flow.get_default_dtype, flow.set_default_dtype = T.get_default_dtype, T.set_default_dtype
--- flow.set_printoptions({precision = 4, threshold = 1000, edgeitems = 3, linewidth = 80, sci_mode =}): how
-- tensors print.
flow.set_printoptions = function(o) for k, v in pairs(o) do printing.options[k] = v end end

--- set_num_threads(n): threads for CPU kernels, an integer in 1..1024.
function flow.set_num_threads(n)
  A.integer('set_num_threads', n, 1, 'n')
  if n < 1 or n > 1024 then
    A.fail(('set_num_threads: argument 1 (n) must be within 1..1024, got %d'):format(n))
  end
  A.check_status(core.C.of_set_num_threads(n))
end
--- flow.get_num_threads(): the number of CPU threads the kernels use.
function flow.get_num_threads() return core.C.of_get_num_threads() end

--- Allocator statistics: current, peak and cached bytes (CPU).
function flow.memory_stats()
  local s = core.C.of_memory_stats_get(0)
  return {current_bytes = tonumber(s.current_bytes), peak_bytes = tonumber(s.peak_bytes),
          cached_bytes = tonumber(s.cached_bytes), alloc_count = tonumber(s.alloc_count),
          cache_hits = tonumber(s.cache_hits)}
end
--- flow.reset_peak_memory_stats(): resets the CPU allocator's peak counter.
function flow.reset_peak_memory_stats() core.C.of_memory_reset_peak(0) end
--- flow.empty_cache(): returns the CPU allocator's cached blocks to the system and drops
-- the kernel caches (oneDNN's reordered weights, autocast's bfloat16 weight copies, the int8
-- kernels' packed weights, Winograd's weight transforms).
function flow.empty_cache()
  core.C.of_release_kernel_caches()
  core.C.of_empty_cache(0)
end
flow.collect = core.collect

local handle_types = {ffi.typeof('of_tensor*'), ffi.typeof('void*')}
--- Shares a C host's `of_tensor*` with Lua (takes a reference of its own).
function flow.from_handle(ptr)
  -- a NULL or non-pointer handle would crash in the core: refuse it here.
  -- Only a pointer: ffi.cast of a struct (a Lua tensor is one) gives the
  -- address of the Lua object itself, and retaining / releasing that wrote
  -- into LuaJIT's heap (the options walk's crashes in the GC).
  local is_ptr = type(ptr) == 'userdata' and getmetatable(ptr) == nil   -- a light userdata
  if type(ptr) == 'cdata' then
    for _, ct in ipairs(handle_types) do is_ptr = is_ptr or ffi.istype(ct, ptr) end
  end
  if not is_ptr or ptr == nil then
    A.fail('from_handle: expected a non-NULL of_tensor* (or void*) from a C host, got ' ..
           (T.is_tensor(ptr) and 'a Lua tensor (it is one already)'
            or is_ptr and 'NULL' or type(ptr) == 'cdata' and tostring(ffi.typeof(ptr)) or A.describe(ptr)))
  end
  ptr = ffi.cast('of_tensor*', ptr)
  core.C.of_tensor_retain(ptr)
  return core.wrap(ptr)
end

--- Gives a C host a retained `of_tensor*` for x; the host releases it.
function flow.to_handle(x)
  A.check_tensor('to_handle', x)
  core.C.of_tensor_retain(x.p)
  return x.p
end
local serialization = require 'oneflow.serialization'
flow.save, flow.load, flow.safetensors = serialization.save, serialization.load, serialization.safetensors
local torchio = require 'oneflow.io.torch'
flow.load_torch, flow.save_torch = torchio.load, torchio.save
flow.load_t7 = require('oneflow.io.t7').load
-- flow.utils.data, .progress, .summary, .plot, .tensorboard: each loaded
-- on first use (oneflow/lazy.lua)
local lazy = require 'oneflow.lazy'
flow.utils = lazy.fields({}, {data = 'oneflow.utils.data', progress = 'oneflow.utils.progress',
                              summary = 'oneflow.utils.summary', plot = 'oneflow.utils.plot',
                              tensorboard = 'oneflow.utils.tensorboard'})
flow.optim = require 'oneflow.optim'
flow.cuda = require 'oneflow.cuda'
flow.backends = flow.cuda.backends
-- flow.backends.cpu: the instruction set of the run-time dispatched CPU
-- kernels (layer_norm, softmax, log_softmax), as torch.backends.cpu:
-- 'AVX512', 'AVX2' or 'DEFAULT'. OF_CPU_ISA caps it at load time;
-- set_cpu_capability lowers or restores it (never above what the CPU has).
flow.backends.cpu = {
  get_cpu_capability = function() return ffi.string(core.C.of_get_cpu_capability()) end,
  -- OpenBLAS's kernels ('SkylakeX', 'Haswell', ...; '' for another BLAS),
  -- chosen again when OpenBLAS fell back to SSE3 on a CPU it does not know
  get_blas_core = function() return ffi.string(core.C.of_get_blas_core()) end,
  set_cpu_capability = function(name)
    if type(name) ~= 'string' then
      A.fail(('backends.cpu.set_cpu_capability: expected a string, got %s')
        :format(type(name)))
    end
    A.check_status(core.C.of_set_cpu_capability(name))
  end,
}
-- flow.backends.mkldnn.is_available(): whether oneDNN is built in (it runs
-- convolutions where it measured faster, doc/nn.md)
flow.backends.mkldnn = {is_available = function() return core.C.of_mkldnn_is_available() ~= 0 end}
do
  local mf = require 'oneflow.memory_format'
  flow.memory_format = mf.Format
  for _, k in ipairs({'contiguous_format', 'channels_last', 'channels_last_3d', 'preserve_format'}) do
    flow[k] = mf[k]
  end
end
flow.nn = require 'oneflow.nn'
flow.quantization = require 'oneflow.quantization'
flow.quantization.attach(flow)
flow.amp = require 'oneflow.amp'
-- loaded on first use (oneflow/lazy.lua: less heap for the collector)
lazy.fields(flow, {distributions = 'oneflow.distributions', fft = 'oneflow.fft',
                   onnx = 'oneflow.onnx', profiler = 'oneflow.profiler'})
flow.distributed = require 'oneflow.distributed'
flow.env, flow.comm = flow.distributed.env, flow.distributed.comm
require('oneflow.distributed.global').attach(flow)
flow.version = core.C.of_version()
flow.__version__ = '0.1.0'

return flow
