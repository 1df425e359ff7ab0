-- oneflow.quantization.functional: the functional ops that accept quantized
-- tensors, as PyTorch's do: F.relu, F.max_pool2d, F.avg_pool2d,
-- F.adaptive_avg_pool2d, flow.flatten / F.flatten, flow.reshape. Each is
-- the float function wrapped with one metatable test, so float code pays
-- nothing else; a converted model's pooling and flatten run unchanged.
-- Pooling works on the integers (exact for max; average pooling rounds the
-- mean half to even with the input's scale and zero point, as PyTorch's
-- quantized avg_pool2d). Every other op refuses a quantized input naming
-- itself (qtensor.lua).
local ffi = require 'ffi'
local flow = require 'oneflow'
local A = require 'oneflow._args'
local core = require 'oneflow._C'
local Q = require 'oneflow.quantization.qtensor'

local C = core.C

local F = flow.nn.functional
local M = {}
local QT = Q.QTensor

-- per-tensor integers through a float op, back to the same parameters
local function through_float(name, x, fn)
  if x._qscheme ~= 'per_tensor_affine' then Q.refuse(name .. ' (per-channel input)', x) end
  local y = fn(x._int:to(flow.float32))
  return Q.from_int_repr(y:round():clamp(x.dtype.qmin, x.dtype.qmax):to(x.dtype.storage),
                         x._scale, x._zp, x.dtype)
end

local pool_spec = {{'kernel_size', A.REQUIRED}, {'stride'}, {'padding', 0}, {'dilation', 1},
                   {'ceil_mode', false}, {'return_indices', false}}
local bufs = {}
for i = 1, 4 do bufs[i] = ffi.new('int64_t[2]') end
-- a number or a pair into bufs[i]
local function pair(what, v, i)
  local b = bufs[i]
  if type(v) == 'number' then b[0], b[1] = v, v
  elseif type(v) == 'table' and #v == 2 then b[0], b[1] = v[1], v[2]
  else A.fail(('max_pool2d: %s must be a number or a pair, got %s'):format(what, tostring(v))) end
  return b
end

local T = require 'oneflow.tensor'

-- tbl[name] becomes quantized(x, ...) for a quantized x, the original
-- otherwise. flow.* copies T.flow's functions: the float call looks T.flow
-- up at call time, so whoever patches T.flow later (the ONNX tracer) still
-- sees the call.
local function wrap(tbl, name, quantized)
  local orig = tbl[name]
  if orig == nil then return end
  local float = orig
  if tbl == flow and T.flow[name] == orig then
    float = function(...) return T.flow[name](...) end
  end
  tbl[name] = function(x, ...)
    if getmetatable(x) == QT then return quantized(x, ...) end
    return float(x, ...)
  end
  M[name] = orig
end

local function qrelu(x, inplace)
  if x._qscheme ~= 'per_tensor_affine' then Q.refuse('relu (per-channel input)', x) end
  local _ = inplace
  return Q.from_int_repr(x._int:clamp(x._zp), x._scale, x._zp, x.dtype)
end

function M.install()
  if M.installed then return end
  M.installed = true
  -- the float calls below go through F.* at call time (not the originals):
  -- F's entries are what the ONNX tracer records
  wrap(F, 'relu', qrelu)
  wrap(F, 'max_pool2d', function(x, ...)
    local a = A.parse('max_pool2d', pool_spec, ...)
    if a.return_indices then Q.refuse('max_pool2d (return_indices)', x) end
    if x._qscheme ~= 'per_tensor_affine' then Q.refuse('max_pool2d (per-channel input)', x) end
    if a.ceil_mode then
      return through_float('max_pool2d', x, function(f) return F.max_pool2d(f, a.kernel_size, a) end)
    end
    local k, st = pair('kernel_size', a.kernel_size, 1), pair('stride', a.stride or a.kernel_size, 2)
    local pd, dl = pair('padding', a.padding, 3), pair('dilation', a.dilation, 4)
    if C.of_quantized_max_pool2d(x._int.p, k, st, pd, dl, core.out1) ~= 0 then A.raise_c() end
    return Q.from_int_repr(core.wrap(core.out1[0]), x._scale, x._zp, x.dtype)
  end)
  wrap(F, 'avg_pool2d', function(x, ...)
    local args = {...}
    return through_float('avg_pool2d', x, function(f) return F.avg_pool2d(f, unpack(args)) end)
  end)
  wrap(F, 'adaptive_avg_pool2d', function(x, ...)
    local args = {...}
    return through_float('adaptive_avg_pool2d', x, function(f) return F.adaptive_avg_pool2d(f, unpack(args)) end)
  end)
  wrap(flow, 'flatten', function(x, ...) return x:flatten(...) end)
  if F.flatten then wrap(F, 'flatten', function(x, ...) return x:flatten(...) end) end
  wrap(flow, 'reshape', function(x, ...) return x:reshape(...) end)
  wrap(flow, 'dequantize', function(x) return x:dequantize() end)
end

return M
