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
function M.memory_allocated(d) return M.memory_stats(d).current_bytes end
function M.max_memory_allocated(d) return M.memory_stats(d).peak_bytes end
function M.memory_reserved(d) return M.memory_stats(d).reserved_bytes end
function M.reset_peak_memory_stats(d) C.of_memory_reset_peak(dev_code(d, 'reset_peak_memory_stats')) end
--- Gives cached blocks back to the driver.
function M.empty_cache(d)
  if not M.is_initialized() then return end
  C.of_empty_cache(dev_code(d, 'empty_cache'))
end

------------------------------------------------------------------ streams
local Stream = {}
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
local Event = {}
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
M.backends = {cuda = {matmul = matmul, is_built = M.is_built}}

return M
