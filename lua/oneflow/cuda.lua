-- oneflow.cuda: flow.cuda.* (devices, synchronisation, memory statistics,
-- streams and events) and flow.backends.cuda.
-- Nothing here touches CUDA until called: the CUDA library (liboneflow_cuda)
-- is loaded by the first call that needs it, so importing oneflow on a
-- machine without a GPU driver costs nothing and fails nothing.
local ffi = require 'ffi'
local core = require 'oneflow._C'
local types = require 'oneflow.types'

local C, raise = core.C, core.raise
local M = {}

--- true when the CUDA library loads and sees at least one device.
function M.is_available() return C.of_cuda_is_available() ~= 0 end

--- Why is_available() is false: "" when it is true.
function M.why_unavailable() return ffi.string(C.of_cuda_why_unavailable()) end

--- true once the CUDA library has been loaded (never loads it).
function M.is_initialized() return C.of_cuda_library_loaded() ~= 0 end

--- true when this build has the CUDA part at all.
function M.is_built() return C.of_cuda_built() ~= 0 end

--- flow.cuda.device_count(): the number of CUDA devices (0 without CUDA).
function M.device_count() return C.of_cuda_device_count() end

local function index_of(d, op)
  if d == nil then return -1 end
  if type(d) == 'number' then return d end
  local dev = types.device(d)
  if dev.type ~= 'cuda' then error(op .. ': expected a CUDA device, got ' .. tostring(dev), 3) end
  return dev.index or -1
end

--- The index of the current CUDA device (an error without CUDA).
function M.current_device()
  if not M.is_available() then
    error('current_device: CUDA is not available: ' .. M.why_unavailable(), 2)
  end
  return C.of_cuda_current_device()
end

--- flow.cuda.set_device(d): makes CUDA device d current (a device index as CUDA numbers them, 'cuda:1' or a
-- flow.device).
function M.set_device(d)
  if C.of_cuda_set_device(index_of(d, 'set_device')) ~= 0 then raise(2) end
end

--- Waits for all queued work on the device; reports asynchronous kernel
-- errors with the op that launched them.
function M.synchronize(d)
  if C.of_cuda_synchronize(index_of(d, 'synchronize')) ~= 0 then raise(2) end
end

local function dev_code(d, op)
  local i = index_of(d, op)
  if i < 0 then i = math.max(C.of_cuda_current_device(), 0) end
  return C.OF_CUDA + i * 256
end

--- Allocator statistics of a CUDA device (zeros before its first use).
function M.memory_stats(d)
  local s = C.of_memory_stats_get(dev_code(d, 'memory_stats'))
  return {current_bytes = tonumber(s.current_bytes), peak_bytes = tonumber(s.peak_bytes),
          cached_bytes = tonumber(s.cached_bytes), alloc_count = tonumber(s.alloc_count),
          allocated_bytes = tonumber(s.current_bytes), reserved_bytes =
            tonumber(s.current_bytes) + tonumber(s.cached_bytes)}
end
--- flow.cuda.memory_allocated(device?): the bytes held by tensors on the device now.
function M.memory_allocated(d) return M.memory_stats(d).current_bytes end
--- flow.cuda.max_memory_allocated(device?): the peak bytes held by tensors on the device.
function M.max_memory_allocated(d) return M.memory_stats(d).peak_bytes end
--- flow.cuda.memory_reserved(device?): the bytes the caching allocator holds on the device.
function M.memory_reserved(d) return M.memory_stats(d).reserved_bytes end
--- flow.cuda.reset_peak_memory_stats(device?): resets the device's peak counter.
function M.reset_peak_memory_stats(d) C.of_memory_reset_peak(dev_code(d, 'reset_peak_memory_stats')) end
--- Gives cached blocks back to the driver.
function M.empty_cache(d)
  if not M.is_initialized() then return end
  C.of_empty_cache(dev_code(d, 'empty_cache'))
end

------------------------------------------------------------------ streams
local Stream = require('oneflow._args').value_type({})
Stream.__index = Stream
local stream_t = ffi.typeof('of_stream*[1]')

--- flow.cuda.Stream([device]): a new stream; use it with flow.cuda.stream(s, fn)
-- or flow.cuda.set_stream(s).
function M.Stream(d)
  local out = stream_t()
  if C.of_stream_new(index_of(d, 'Stream'), out) ~= 0 then raise(2) end
  return setmetatable({h = ffi.gc(out[0], C.of_stream_release)}, Stream)
end
function Stream:synchronize()
  if C.of_stream_synchronize(self.h) ~= 0 then raise(2) end
end
function Stream:query() return C.of_stream_query(self.h) ~= 0 end
function Stream:wait_event(e)
  if C.of_stream_wait_event(self.h, e.h) ~= 0 then raise(2) end
end
function Stream:record_event(e)
  e = e or M.Event()
  e:record(self)
  return e
end
M.StreamType = Stream

local current = nil
--- Makes s (nil: the default stream) the stream later ops queue on.
function M.set_stream(s)
  if C.of_set_stream(s and s.h or nil) ~= 0 then raise(2) end
  current = s
end
--- flow.cuda.current_stream(device?): the stream new CUDA work goes to.
function M.current_stream() return current end
--- flow.cuda.wait_event(e): later work on the current stream waits for e.
function M.wait_event(e)
  if C.of_stream_wait_event(current and current.h or nil, e.h) ~= 0 then raise(2) end
end
--- flow.cuda.stream(s, fn): runs fn with s as the current stream.
function M.stream(s, fn)
  local prev = current
  M.set_stream(s)
  local ok, err = pcall(fn)
  M.set_stream(prev)
  if not ok then error(err, 0) end
end

------------------------------------------------------------------ events
local Event = require('oneflow._args').value_type({})
Event.__index = Event
local event_t = ffi.typeof('of_event*[1]')

--- flow.cuda.Event({enable_timing = true}).
function M.Event(opts)
  local out = event_t()
  if C.of_event_new(opts and opts.enable_timing and 1 or 0, out) ~= 0 then raise(2) end
  return setmetatable({h = ffi.gc(out[0], C.of_event_release)}, Event)
end
function Event:record(s)
  if C.of_event_record(self.h, s and s.h or (current and current.h) or nil) ~= 0 then raise(2) end
end
function Event:synchronize()
  if C.of_event_synchronize(self.h) ~= 0 then raise(2) end
end
function Event:query() return C.of_event_query(self.h) ~= 0 end
--- Milliseconds between this event and `other` (both recorded, with timing).
function Event:elapsed_time(other)
  local ms = ffi.new('double[1]')
  if C.of_event_elapsed_ms(self.h, other.h, ms) ~= 0 then raise(2) end
  return ms[0]
end
M.EventType = Event

------------------------------------------------------------------ backends
-- flow.backends.cuda.matmul.allow_tf32: float32 matmuls may use TF32
-- tensor cores (10-bit mantissa products). Off by default.
local matmul = setmetatable({}, {
  __index = function(_, k)
    if k == 'allow_tf32' then return C.of_cuda_get_allow_tf32() ~= 0 end
  end,
  __newindex = function(_, k, v)
    if k ~= 'allow_tf32' then error('backends.cuda.matmul: unknown setting ' .. tostring(k), 2) end
    C.of_cuda_set_allow_tf32(v and 1 or 0)
  end,
})

-- flow.backends.cudnn: benchmark (cudnnFind: time every algorithm once per
-- shape; default false), deterministic (only deterministic algorithms;
-- default false), allow_tf32 (float32 convolutions may use TF32; default
-- true, as in PyTorch), enabled (always true: convolutions on CUDA are
-- cuDNN's), is_available(), version(), why_unavailable().
local dnn_flags = {benchmark = false, deterministic = false, allow_tf32 = true}
local cudnn = setmetatable({
  is_available = function() return M.is_available() and C.of_cudnn_version() > 0 end,
  version = function() return C.of_cudnn_version() end,
  why_unavailable = function() return ffi.string(C.of_cudnn_why_unavailable()) end,
}, {
  __index = function(_, k)
    if k == 'enabled' then return true end
    return dnn_flags[k]
  end,
  __newindex = function(_, k, v)
    if dnn_flags[k] == nil then error('backends.cudnn: unknown setting ' .. tostring(k), 2) end
    if type(v) ~= 'boolean' then
      error(('backends.cudnn.%s: expected a boolean, got %s'):format(k, tostring(v)), 2)
    end
    dnn_flags[k] = v
    C.of_cudnn_set_flags(dnn_flags.benchmark and 1 or 0, dnn_flags.deterministic and 1 or 0,
                         dnn_flags.allow_tf32 and 1 or 0)
  end,
})
M.backends = {cuda = {matmul = matmul, is_built = M.is_built}, cudnn = cudnn}

------------------------------------------------------------------ graphs
-- flow.cuda.CUDAGraph: records the kernels queued on the current stream
-- between capture_begin and capture_end (nothing runs then), and replays
-- them with one launch. Tensors made during the capture are the graph's
-- static outputs: each replay writes them again at the same addresses;
-- inputs are fed by copying into tensors made before the capture.
local CUDAGraph = require('oneflow._args').value_type({})
CUDAGraph.__index = CUDAGraph
local graph_t = ffi.typeof('of_cuda_graph*[1]')

--- flow.cuda.CUDAGraph(): captures a stream's work once and replays it (:capture_begin, :capture_end, :replay).
function M.CUDAGraph()
  local out = graph_t()
  if C.of_cuda_graph_new(out) ~= 0 then raise(2) end
  return setmetatable({h = ffi.gc(out[0], C.of_cuda_graph_release)}, CUDAGraph)
end

function CUDAGraph:capture_begin(d)
  if C.of_cuda_graph_capture_begin(self.h, index_of(d, 'CUDAGraph.capture_begin')) ~= 0 then
    raise(2)
  end
end
function CUDAGraph:capture_end()
  if C.of_cuda_graph_capture_end(self.h) ~= 0 then raise(2) end
end
--- g:capture(fn[, device]): capture_begin, fn(), capture_end (ended also
-- when fn fails, whose error is raised). Returns fn's results.
function CUDAGraph:capture(fn, d)
  self:capture_begin(d)
  local res = {n = 0}
  local function run(...)
    res = {n = select('#', ...), ...}
  end
  local ok, err = pcall(function() run(fn()) end)
  local ok_end, err_end = pcall(self.capture_end, self)
  if not ok then error(err, 2) end
  if not ok_end then error(err_end, 2) end
  return unpack(res, 1, res.n)
end
function CUDAGraph:replay()
  if C.of_cuda_graph_replay(self.h) ~= 0 then raise(2) end
end
M.CUDAGraph_type = CUDAGraph
--- flow.cuda.graph(g, fn): g:capture(fn), as PyTorch's `with torch.cuda.graph(g)`.
function M.graph(g, fn, d) return g:capture(fn, d) end
M.graphs = {CUDAGraph = M.CUDAGraph, graph = M.graph}

return M
