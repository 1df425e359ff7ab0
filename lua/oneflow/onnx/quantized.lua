-- oneflow.onnx.quantized: ONNX export of converted (int8) models in QDQ
-- form, the form onnxruntime and TensorRT read: integers travel between
-- layers as uint8/int8 values; each quantized layer is written as
-- DequantizeLinear on its input and on its int8 weight initializer, the
-- float op (Conv, Gemm/MatMul, Relu), and QuantizeLinear to the layer's
-- output scale and zero point. Runtimes fuse the pattern into integer
-- kernels (QLinearConv, QLinearMatMul); run as written it computes the same
-- integers up to one step where float accumulation rounds differently.
--
-- A quantized tensor is traced as its integers (QTensor.__onnx_tensor), so
-- views, flatten, relu (a clamp at the zero point), average pooling (on the
-- float values) and QFunctional's mul/cat are recorded op by op through
-- the ordinary rules; the layers that call C kernels directly (convolution,
-- linear, QFunctional's add) are recorded as a whole (module rules) and
-- max pooling on the integers has a rule here.
local graph = require 'oneflow.onnx.graph'
local ops = require 'oneflow.onnx.ops'

local M = {}

local function fail(msg) error('onnx.export: ' .. msg, 0) end
local A_i, A_ints = graph.i, graph.ints

local function per_tensor_params(g, q)
  return g:scalar(q._scale, 'float32'), g:scalar(q._zp, q._int.dtype.name)
end

local function check_dtype(what, q)
  local dt = q._int.dtype.name
  if dt ~= 'uint8' and dt ~= 'int8' then
    fail(('%s: %s tensors have no QuantizeLinear/DequantizeLinear form (uint8 and int8 only)')
         :format(what, q.dtype.name))
  end
end

-- value name of a quantized activation's integers
local function ints_of(g, q, what)
  check_dtype(what, q)
  return g:val(q._int)
end

-- float values of a quantized activation
local function dequantized(g, q, what)
  local s, z = per_tensor_params(g, q)
  return g:node('DequantizeLinear', {ints_of(g, q, what), s, z})
end

-- a layer's int8 weight as DequantizeLinear of an initializer (per channel
-- along the 1-based axis, or per tensor); one initializer per weight
local function weight(g, mod, what)
  local w = rawget(mod, '_weight')
  check_dtype(what .. ' weight', w)
  local ck = 'qdq_weight:' .. graph.key(w._int)
  local cached = g.cache[ck]
  if cached then return cached end
  local q = g:const(w._int, 'weight_quantized')
  g:anchor(w._int)
  local name
  if w._qscheme == 'per_channel_affine' then
    local scales, zps = {}, {}
    for i = 1, w._scales:numel() do
      scales[i] = w._scales[i]:item()
      zps[i] = w._zps[i]:item()
    end
    name = g:node('DequantizeLinear', {q, g:list(scales, 'float32'), g:list(zps, w._int.dtype.name)},
                  {axis = A_i(w._axis - 1)})
  else
    local s, z = per_tensor_params(g, w)
    name = g:node('DequantizeLinear', {q, s, z})
  end
  g.cache[ck] = name
  return name
end

-- the float result v as the layer's output integers
local function requantize(g, out, mod, v, relu, what)
  if relu then v = g:node('Relu', {v}) end
  local y = out[1]
  check_dtype(what .. ' output', y)
  g:bind(y._int, g:node('QuantizeLinear', {v, g:scalar(mod.scale, 'float32'),
                                            g:scalar(mod.zero_point, y._int.dtype.name)}))
end

local function conv_rule(relu, what)
  return function(g, out, mod, x)
    local w = rawget(mod, '_weight')
    local b = rawget(mod, '_bias')
    local ks = {w:size(3), w:size(4)}
    local p = mod.padding
    local inputs = {dequantized(g, x, what), weight(g, mod, what)}
    if b ~= nil then inputs[3] = g:val(b) end
    local v = g:node('Conv', inputs, {kernel_shape = A_ints(ks), strides = A_ints(mod.stride),
                                      pads = A_ints({p[1], p[2], p[1], p[2]}),
                                      dilations = A_ints(mod.dilation), group = A_i(mod.groups)})
    requantize(g, out, mod, v, relu, what)
  end
end

-- xf W^T + b for float values xf of the nd-input and wf of the weight:
-- Gemm for a matrix, else MatMul + Add
local function affine(g, nd, xf, wf, b)
  if nd == 2 then
    local inputs = {xf, wf}
    if b ~= nil then inputs[3] = g:val(b) end
    return g:node('Gemm', inputs, {transB = A_i(1)})
  end
  local v = g:node('MatMul', {xf, g:node('Transpose', {wf}, {perm = A_ints({1, 0})})})
  if b ~= nil then v = g:node('Add', {v, g:val(b)}) end
  return v
end

local function linear_rule(relu, what)
  return function(g, out, mod, x)
    local v = affine(g, x:dim(), dequantized(g, x, what), weight(g, mod, what), rawget(mod, '_bias'))
    requantize(g, out, mod, v, relu, what)
  end
end

local function quantize_rule(g, out, mod, x)
  local y = out[1]
  if y == x then return end   -- already quantized: passed through
  check_dtype('Quantize', y)
  local v = g:cast(g:val(x), x.dtype.name, 'float32')
  g:bind(y._int, g:node('QuantizeLinear', {v, g:scalar(mod.scale, 'float32'),
                                            g:scalar(mod.zero_point, y._int.dtype.name)}))
end

local function dequantize_rule(g, out, _, x)
  if out[1] == x then return end   -- a float input passes through
  if x._qscheme ~= 'per_tensor_affine' then fail('DeQuantize: per-channel activations cannot be exported') end
  g:bind(out[1], dequantized(g, x, 'DeQuantize'))
end

-- DynamicQuantizedLinear: the input's scale and zero point computed in the
-- graph at run time as fbgemm chooses them (ONNX's DynamicQuantizeLinear
-- takes 0..255 where PyTorch's and ours take reduce_range's 0..127): the
-- range with 0 in it (ReduceMin / ReduceMax), scale = (hi - lo) / qmax, at
-- least fbgemm's 6.1e-5, zero point = round(-lo / scale) clamped (fbgemm's
-- nudge computes the same point; below the smallest scale it widens the
-- range, which leaves the point at -lo over the unwidened scale), then
-- QuantizeLinear / DequantizeLinear on the input and the int8 weight's
-- DequantizeLinear into a MatMul (+ bias). float16 weights: a Cast of the
-- float16 initializer. onnxruntime runs the input's pair as written (its
-- scale is not a constant), so outputs agree with ours within a step.
local function dynamic_linear_rule(g, out, mod, x)
  local w, b = rawget(mod, '_weight'), rawget(mod, '_bias')
  local xv = g:cast(g:val(x), x.dtype.name, 'float32')
  local wf
  if w.dtype == require('oneflow').float16 then
    wf = g:cast(g:val(w), 'float16', 'float32')
  else
    local qmax = mod.reduce_range and 127 or 255
    local zero = g:scalar(0, 'float32')
    local lo = g:node('Min', {g:node('ReduceMin', {xv}, {keepdims = A_i(0)}), zero})
    local hi = g:node('Max', {g:node('ReduceMax', {xv}, {keepdims = A_i(0)}), zero})
    local raw = g:node('Div', {g:node('Sub', {hi, lo}), g:scalar(qmax, 'float32')})
    local scale = g:node('Max', {raw, g:scalar(6.1e-5, 'float32')})
    local z = g:node('Div', {g:node('Neg', {lo}), g:node('Max', {raw, g:scalar(1e-30, 'float32')})})
    z = g:node('Round', {z})
    z = g:cast(g:node('Clip', {z, zero, g:scalar(qmax, 'float32')}), 'float32', 'uint8')
    xv = g:node('DequantizeLinear', {g:node('QuantizeLinear', {xv, scale, z}), scale, z})
    wf = weight(g, mod, mod.__name)
  end
  g:bind(out[1], g:cast(affine(g, x:dim(), xv, wf, b), 'float32', out[1].dtype.name))
end

-- QuantizedEmbedding (weight-only, float qparams per row): Gather of the
-- quint8 rows and of each row's scale and bias (-(zero_point * scale)),
-- then rows * scale + bias, the module's own two float steps. A quint4x2
-- table goes in as its values one a byte (opset 17 has no 4-bit type), with
-- the module's float16-rounded scales and biases: the same lookups.
local function row_column(g, t, hint)
  local ck = 'qemb:' .. graph.key(t)
  if not g.cache[ck] then
    g.cache[ck] = g:const(t:view(-1, 1), hint)
    g:anchor(t)
  end
  return g.cache[ck]
end
local function qembedding_rule(g, out, mod, ids)
  local w = mod:weight()
  local idx = ops.index0(g, ids)
  local gather = function(name) return g:node('Gather', {name, idx}, {axis = A_i(0)}) end
  local ck = 'qemb_rows:' .. graph.key(rawget(mod, '_packed') or w._int)
  if not g.cache[ck] then
    g.cache[ck] = g:const(w._int, 'embedding_quantized')
    g:anchor(w._int)
  end
  local rows = g:cast(gather(g.cache[ck]), 'uint8', 'float32')
  local v = g:node('Mul', {rows, gather(row_column(g, mod._row_scale, 'embedding_scale'))})
  g:bind(out[1], g:node('Add', {v, gather(row_column(g, mod._row_bias, 'embedding_bias'))}))
end

-- the dynamic recurrent modules and the quantized bags have no form here
local function refuse_dynamic(_, _, mod)
  fail(('%s: dynamically quantized recurrent modules have no ONNX form here; export the float '
        .. 'model'):format(mod.__name))
end
local function refuse_bag(_, _, mod)
  fail(('%s: embedding bags have no ONNX form here; export the float model'):format(mod.__name))
end

-- max pooling on the integers is the float rule applied to them
local function int_max_pool(g, out, x, ...)
  check_dtype('max_pool2d', x)
  return ops.rules['F.max_pool2d'](g, {out[1]._int, n = 1}, x._int, ...)
end

-- QFunctional's add / add_relu (one C kernel on the integers): both
-- operands dequantized, Add (and Relu), QuantizeLinear to the module's
-- output parameters; onnxruntime fuses it into QLinearAdd
local function qadd_rule(relu, what)
  return function(g, out, mod, a, b)
    local function operand(v)
      if type(v) == 'table' and v._int then
        if v._qscheme ~= 'per_tensor_affine' then fail(what .. ': per-channel operands cannot be exported') end
        return dequantized(g, v, what)
      end
      return g:scalar(v, 'float32')   -- QFunctional takes numbers beside quantized tensors
    end
    requantize(g, out, mod, g:node('Add', {operand(a), operand(b)}), relu, what)
  end
end

-- FakeQuantize (a QAT model, not converted) as QuantizeLinear (+ Clip where
-- quant_min/quant_max narrow the dtype's range, as reduce_range's 0..127)
-- and DequantizeLinear: PyTorch's export of fake_quantize_per_tensor_affine
-- / _per_channel_affine, the form TensorRT and onnxruntime read for QAT
-- models. Weights too (constants = true): their Q/DQ pair stays in the
-- file rather than being folded into float values.
local QDTYPE = {quint8 = {'uint8', 0, 255}, qint8 = {'int8', -128, 127}}
local function fake_quant_rule(g, out, mod, x)
  local y = out[1]
  if rawget(mod, '_fq_off') then   -- fake quantization off: the value passes
    if not g:knows(y) then g:bind(y, g:val(x)) end
    return
  end
  local q = QDTYPE[mod.dtype.name]
  if not q then fail(('FakeQuantize: %s has no QuantizeLinear form (quint8 and qint8 only)'):format(mod.dtype.name)) end
  local dt = q[1]
  local s, z, attrs
  if mod.is_per_channel then
    local axis = mod.ch_axis < 0 and x:dim() + mod.ch_axis or mod.ch_axis - 1
    s, z = g:list(mod.scale:to(require('oneflow').float64):totable(), 'float32'),
           g:list(mod.zero_point:totable(), dt)
    attrs = {axis = A_i(axis)}
  else
    s, z = g:scalar(mod.scale:view(-1)[1]:item(), 'float32'), g:scalar(mod.zero_point:view(-1)[1]:item(), dt)
  end
  local v = g:node('QuantizeLinear', {g:cast(g:val(x), x.dtype.name, 'float32'), s, z}, attrs)
  if mod.quant_min ~= q[2] or mod.quant_max ~= q[3] then
    v = g:node('Clip', {v, g:scalar(mod.quant_min, dt), g:scalar(mod.quant_max, dt)})
  end
  g:bind(y, g:cast(g:node('DequantizeLinear', {v, s, z}, attrs), 'float32', x.dtype.name))
end

--- The extra rules for oneflow.onnx.tracer.run.
function M.rules()
  local Qm = require 'oneflow.quantization.modules'
  return {
    wrapped = {['F.max_pool2d'] = int_max_pool},
    modules = {
      {Qm.Quantize, quantize_rule, 'Quantize'},
      {Qm.DeQuantize, dequantize_rule, 'DeQuantize'},
      {Qm.Conv2d, conv_rule(false, 'QuantizedConv2d'), 'QuantizedConv2d'},
      {Qm.ConvReLU2d_q, conv_rule(true, 'QuantizedConvReLU2d'), 'QuantizedConvReLU2d'},
      {Qm.Linear, linear_rule(false, 'QuantizedLinear'), 'QuantizedLinear'},
      {Qm.LinearReLU_q, linear_rule(true, 'QuantizedLinearReLU'), 'QuantizedLinearReLU'},
      {Qm.dynamic.Linear, dynamic_linear_rule, 'DynamicQuantizedLinear'},
      {Qm.Embedding, qembedding_rule, 'QuantizedEmbedding'},
      {Qm.EmbeddingBag, refuse_bag, 'QuantizedEmbeddingBag'},
      {Qm.dynamic.LSTM, refuse_dynamic, 'DynamicQuantizedLSTM'},
      {Qm.dynamic.GRU, refuse_dynamic, 'DynamicQuantizedGRU'},
      {Qm.dynamic.LSTMCell, refuse_dynamic, 'DynamicQuantizedLSTMCell'},
      {Qm.dynamic.GRUCell, refuse_dynamic, 'DynamicQuantizedGRUCell'},
      {Qm.dynamic.RNNCell, refuse_dynamic, 'DynamicQuantizedRNNCell'},
      {Qm.QFunctional, qadd_rule(false, 'QFunctional.add'), 'QFunctional.add', 'add'},
      {Qm.QFunctional, qadd_rule(true, 'QFunctional.add_relu'), 'QFunctional.add_relu', 'add_relu'},
      {require('oneflow.quantization.fake_quantize').FakeQuantize, fake_quant_rule, 'FakeQuantize',
       constants = true},
    },
  }
end

return M
