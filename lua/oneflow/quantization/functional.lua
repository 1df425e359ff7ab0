-- oneflow.quantization.functional: the functional ops that accept quantized
-- tensors, as PyTorch's do: F.relu, F.max_pool2d, F.avg_pool2d,
-- F.adaptive_avg_pool2d, flow.flatten / F.flatten, flow.reshape. Each is
-- the float function wrapped with one metatable test, so float code pays
-- nothing else; a converted model's pooling and flatten run unchanged.
-- Pooling works on the integers (exact for max; average pooling rounds the
-- mean half to even with the input's scale and zero point, as PyTorch's
-- quantized avg_pool2d). Every other op refuses a quantized input naming
-- itself (qtensor.lua).
local flow = require 'oneflow'
local Q = require 'oneflow.quantization.qtensor'

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

local function wrap(tbl, name, quantized)
  local orig = tbl[name]
  if orig == nil then return end
  tbl[name] = function(x, ...)
    if getmetatable(x) == QT then return quantized(x, ...) end
    return orig(x, ...)
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
  local fmax, favg, faavg = F.max_pool2d, F.avg_pool2d, F.adaptive_avg_pool2d
  wrap(F, 'relu', qrelu)
  wrap(F, 'max_pool2d', function(x, ...)
    local args = {...}
    return through_float('max_pool2d', x, function(f)
      local t = type(args[#args]) == 'table' and args[#args] or nil
      if t and t.return_indices then Q.refuse('max_pool2d (return_indices)', x) end
      return fmax(f, unpack(args))
    end)
  end)
  wrap(F, 'avg_pool2d', function(x, ...)
    local args = {...}
    return through_float('avg_pool2d', x, function(f) return favg(f, unpack(args)) end)
  end)
  wrap(F, 'adaptive_avg_pool2d', function(x, ...)
    local args = {...}
    return through_float('adaptive_avg_pool2d', x, function(f) return faavg(f, unpack(args)) end)
  end)
  wrap(flow, 'flatten', function(x, ...) return x:flatten(...) end)
  if F.flatten then wrap(F, 'flatten', function(x, ...) return x:flatten(...) end) end
  wrap(flow, 'reshape', function(x, ...) return x:reshape(...) end)
  wrap(flow, 'dequantize', function(x) return x:dequantize() end)
end

return M
