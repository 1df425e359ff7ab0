-- oneflow.quantization (flow.quantization): int8 post-training static and
-- dynamic quantization, quantization-aware training, with the names and
-- semantics of torch.ao.quantization (doc/quantization.md).
--   quantized tensors        qtensor.lua  (flow.quantize_per_tensor, ...)
--   observers                observer.lua
--   fake quantization (QAT)  fake_quantize.lua
--   modules                  modules.lua  (stubs, fused, QAT, quantized)
--   workflow                 quantize.lua (QConfig, fuse_modules, prepare,
--                            calibrate, convert, prepare_qat, quantize_dynamic)
--   functional ops           functional.lua (relu, pools, flatten accept
--                            quantized tensors)
--   kernels                  core/ops/quant.c
local A = require 'oneflow._args'
local oneflow = require 'oneflow'   -- the table being built (used at call time)
local Q = require 'oneflow.quantization.qtensor'
local O = require 'oneflow.quantization.observer'
local FQ = require 'oneflow.quantization.fake_quantize'
local QM = require 'oneflow.quantization.modules'
local W = require 'oneflow.quantization.quantize'
require('oneflow.quantization.functional').install()

local M = {}
for _, src in ipairs({O, FQ, W}) do
  for k, v in pairs(src) do M[k] = v end
end
M.QuantStub, M.DeQuantStub, M.FloatFunctional, M.QFunctional = QM.QuantStub, QM.DeQuantStub,
  QM.FloatFunctional, QM.QFunctional
M.QuantWrapper = QM.QuantWrapper
M.quantize_per_channel = Q.quantize_per_channel

--- quantize_per_tensor(x, scale, zero_point, dtype): x quantized; a list of
-- tensors with lists of scales and zero points gives a list (PyTorch's form).
function M.quantize_per_tensor(x, scale, zero_point, dtype)
  if type(x) == 'table' and not oneflow.is_tensor(x) then
    if type(scale) ~= 'table' or type(zero_point) ~= 'table' or #scale ~= #x or #zero_point ~= #x then
      A.fail(('quantize_per_tensor: a list of %d tensors needs as many scales and zero points'):format(#x))
    end
    local out = {}
    for i, t in ipairs(x) do out[i] = Q.quantize_per_tensor(t, scale[i], zero_point[i], dtype) end
    return out
  end
  return Q.quantize_per_tensor(x, scale, zero_point, dtype)
end
M.is_quantized = Q.is_quantized

--- quantize_per_tensor_dynamic(x, dtype, reduce_range): x quantized with a
-- scale and zero point chosen from its own min and max (fbgemm's
-- ChooseQuantizationParams, as torch.quantize_per_tensor_dynamic; the range
-- halved with reduce_range).
function M.quantize_per_tensor_dynamic(x, dtype, reduce_range)
  local op = 'quantize_per_tensor_dynamic'
  A.check_tensor(op, x)
  local dt = Q.qdtype(op, dtype)
  if dt ~= Q.quint8 and dt ~= Q.qint8 then
    A.fail(('%s: dtype must be flow.quint8 or flow.qint8, got %s'):format(op, dt.name))
  end
  A.arg(op, 3, 'reduce_range', reduce_range, 'boolean|nil')
  local lo, hi = QM.dynamic_range(op, x)
  local s, z = O.choose_qparams(lo, hi, dt.qmin, dt.qmax, reduce_range or false, true)
  return Q.quantize_per_tensor(x, s, z, dt)
end
-- torch.ao.nn's namespaces (also flow.nn.intrinsic, flow.nn.qat, flow.nn.quantized)
M.nn = {
  intrinsic = {ConvReLU2d = QM.ConvReLU2d, LinearReLU = QM.LinearReLU, ConvBn2d = QM.ConvBn2d,
               ConvBnReLU2d = QM.ConvBnReLU2d, LinearBn1d = QM.LinearBn1d, qat = QM.qat,
               quantized = {ConvReLU2d = QM.ConvReLU2d_q, LinearReLU = QM.LinearReLU_q}},
  qat = QM.qat,
  quantized = {Conv2d = QM.Conv2d, ConvReLU2d = QM.ConvReLU2d_q, Linear = QM.Linear,
               LinearReLU = QM.LinearReLU_q, ReLU = QM.ReLU, Quantize = QM.Quantize,
               DeQuantize = QM.DeQuantize, QFunctional = QM.QFunctional, BatchNorm2d = QM.BatchNorm2d_q,
               Embedding = QM.Embedding, EmbeddingBag = QM.EmbeddingBag, dynamic = QM.dynamic},
}
M.f32 = nil

--- set_backend('auto' | 'own' | 'onednn'): the int8 gemm of the quantized
-- Conv2d/Linear (core/ops/quant.c): the own AVX2 / AVX-512 VNNI kernels
-- ('auto' = 'own', measured faster) or oneDNN's int8 matmul where the build
-- has it. Returns the previous one.
local BACKENDS = {auto = 0, own = 1, onednn = 2}
--- quantization.set_backend(name): the int8 kernels to use ('auto', 'own' or 'onednn'); returns the previous one.
function M.set_backend(name)
  local C = require('oneflow._C').C
  local v = BACKENDS[name]
  if not v then
    require('oneflow._args').fail(("set_backend: expected 'auto', 'own' or 'onednn', got %s"):format(tostring(name)))
  end
  local prev = C.of_quantized_backend(-1)
  C.of_quantized_backend(v)
  for k, n in pairs(BACKENDS) do if n == prev then return k end end
end

--- Puts the quantized dtypes and tensor functions on flow.
function M.attach(flow)
  require('oneflow._args').arg('quantization.attach', 1, 'flow', flow, 'table')
  flow.qint8, flow.quint8, flow.qint32, flow.quint4x2 = Q.qint8, Q.quint8, Q.qint32, Q.quint4x2
  flow.quantize_per_tensor, flow.quantize_per_channel = M.quantize_per_tensor, Q.quantize_per_channel
  flow.quantize_per_tensor_dynamic = M.quantize_per_tensor_dynamic
  flow.dequantize = function(x)
    if type(x) == 'table' and not flow.is_tensor(x) and not Q.is_quantized(x) then
      local out = {}
      for i, t in ipairs(x) do out[i] = flow.dequantize(t) end
      return out
    end
    if not Q.is_quantized(x) then
      require('oneflow._args').fail('dequantize: expected a quantized tensor, got ' ..
        require('oneflow._args').describe(x))
    end
    return x:dequantize()
  end
  flow.is_quantized = Q.is_quantized
  flow._make_per_tensor_quantized_tensor = Q.from_int_repr
  flow.fake_quantize_per_tensor_affine = FQ.fake_quantize_per_tensor_affine
  flow.fake_quantize_per_channel_affine = FQ.fake_quantize_per_channel_affine
  -- the quantization schemes are their names (q:qscheme() == flow.per_tensor_affine)
  for _, q in ipairs({'per_tensor_affine', 'per_tensor_symmetric', 'per_channel_affine',
                      'per_channel_symmetric', 'per_channel_affine_float_qparams'}) do flow[q] = q end
  if type(flow.nn) == 'table' then   -- oneflow's table (nn loaded first)
    flow.nn.intrinsic, flow.nn.qat, flow.nn.quantized = M.nn.intrinsic, M.nn.qat, M.nn.quantized
    -- torch.nn.utils' fusion helpers
    local U = flow.nn.utils
    if type(U) == 'table' then
      U.fuse_conv_bn_eval, U.fuse_conv_bn_weights = W.fuse_conv_bn_eval, W.fuse_conv_bn_weights
      U.fuse_linear_bn_eval, U.fuse_linear_bn_weights = W.fuse_linear_bn_eval, W.fuse_linear_bn_weights
    end
  end
  -- torch.ao.quantization / torch.ao.nn, for code written against those paths
  flow.ao = {quantization = M, nn = M.nn}
end


-- Doc comments of the functions made in loops above (help() and LDoc read them).

--- flow.dequantize(q): a quantized tensor back to float32 (a list: each of them).
-- @function flow.dequantize

return M
