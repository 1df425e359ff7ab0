-- oneflow.quantization.modules: the modules of the quantization workflow.
--   fused float modules   ConvReLU2d, LinearReLU (fuse_modules makes them),
--                         ConvBn2d, ConvBnReLU2d, LinearBn1d (fuse_modules_qat)
--   QAT modules           qat.Conv2d, qat.ConvReLU2d, qat.Linear, qat.LinearReLU
--                         (weight fake-quantized in forward), qat.ConvBn2d,
--                         qat.ConvBnReLU2d, qat.LinearBn1d (BatchNorm kept)
--   quantized modules     Quantize, DeQuantize, Conv2d, ConvReLU2d, Linear,
--                         LinearReLU, ReLU, QFunctional (add, add_relu, mul, cat),
--                         dynamic Linear (float in and out, int8 weights)
--   stubs                 QuantStub, DeQuantStub, FloatFunctional
-- The quantized Conv2d/Linear run core/ops/quant.c (int8 x int8 -> int32,
-- requantised with the output's scale/zero_point, ReLU fused). Functional
-- max/avg pooling, relu and flatten accept quantized tensors (functional.lua),
-- so the float pooling modules work unchanged in a converted model.
local ffi = require 'ffi'
local flow = require 'oneflow'
local A = require 'oneflow._args'
local core = require 'oneflow._C'
local Q = require 'oneflow.quantization.qtensor'

local nn, F = flow.nn, flow.nn.functional
local C, out1, wrap = core.C, core.out1, core.wrap
local M = {qat = {}, dynamic = {}}

local function is_q(v) return Q.is_quantized(v) end
local class_of = require('oneflow.class').of

------------------------------------------------------------------ stubs
--- quantization.QuantStub(): marks where tensors enter the quantized region (convert makes it a Quantize).
-- @function quantization.QuantStub
local QuantStub = nn.Module:subclass('QuantStub')
M.QuantStub = QuantStub
function QuantStub.forward(_, x) return x end

--- quantization.DeQuantStub(): marks where tensors leave the quantized region (convert makes it a DeQuantize).
-- @function quantization.DeQuantStub
local DeQuantStub = nn.Module:subclass('DeQuantStub')
M.DeQuantStub = DeQuantStub
function DeQuantStub.forward(_, x) return x end

-- FloatFunctional: add/mul/cat as modules so that prepare can observe
-- their outputs (PyTorch's nn.quantized.FloatFunctional)
local FloatFunctional = nn.Module:subclass('FloatFunctional')
--- FloatFunctional(): add/mul/cat as a module, so that prepare can observe them.
-- @function quantization.FloatFunctional
M.FloatFunctional = FloatFunctional
function FloatFunctional:__init()
  nn.Module.__init(self)
  self.activation_post_process = nn.Identity()
end
function FloatFunctional.forward() A.fail('FloatFunctional: call add, add_relu, mul or cat, not forward') end
function FloatFunctional:add(a, b) return self.activation_post_process(a + b) end
function FloatFunctional:add_relu(a, b) return self.activation_post_process(F.relu(a + b)) end
function FloatFunctional:mul(a, b) return self.activation_post_process(a * b) end
function FloatFunctional:cat(xs, dim) return self.activation_post_process(flow.cat(xs, dim or 1)) end

--- quantization.QuantWrapper(module): QuantStub, the module, DeQuantStub
-- (with the module's qconfig, in its mode), as torch.ao.quantization's.
-- @function quantization.QuantWrapper
local QuantWrapper = nn.Module:subclass('QuantWrapper')
M.QuantWrapper = QuantWrapper
function QuantWrapper:__init(mod)
  nn.Module.__init(self)
  A.arg('QuantWrapper', 1, 'module', mod, 'module')
  self.quant = QuantStub()
  self.dequant = DeQuantStub()
  self.module = mod
  local qc = rawget(mod, 'qconfig')
  if qc ~= nil then rawset(self, 'qconfig', qc) end
  self:train(mod.training)
end
function QuantWrapper:forward(x) return self.dequant(self.module(self.quant(x))) end

------------------------------------------------------------------ fused float modules
-- children '0', '1' (, '2') (PyTorch's state-dict keys: conv1.0.weight,
-- conv1.1.running_mean); a plain module, not a Sequential, so that prepare
-- can hang an observer on it
local registry = require('oneflow.nn.module').registry
local function fused(name, kinds)
  local cls = nn.Module:subclass(name)
  cls._fused_kinds = kinds
  function cls:__init(...)
    nn.Module.__init(self)
    local parts = {...}
    if #parts ~= #kinds then
      A.fail(('%s: expected %d modules (%s), got %d'):format(name, #kinds, table.concat(kinds, ', '), #parts))
    end
    for i, m in ipairs(parts) do self:add_module(tostring(i - 1), m) end
  end
  function cls:part(i) return registry(self, '_modules'):get(tostring(i - 1)) end
  function cls:forward(x)
    for i = 1, #kinds do x = self:part(i)(x) end
    return x
  end
  return cls
end
M.ConvReLU2d = fused('ConvReLU2d', {'Conv2d', 'ReLU'})
M.LinearReLU = fused('LinearReLU', {'Linear', 'ReLU'})
-- fuse_modules_qat keeps BatchNorm: prepare_qat turns these into the QAT
-- modules below, which train BatchNorm's statistics (as torch.ao.nn.intrinsic)
M.ConvBn2d = fused('ConvBn2d', {'Conv2d', 'BatchNorm2d'})
M.ConvBnReLU2d = fused('ConvBnReLU2d', {'Conv2d', 'BatchNorm2d', 'ReLU'})
M.LinearBn1d = fused('LinearBn1d', {'Linear', 'BatchNorm1d'})

------------------------------------------------------------------ QAT modules
local FLOAT_ATTRS = {'stride', 'padding', 'dilation', 'groups', 'in_channels', 'out_channels',
                     'kernel_size', 'in_features', 'out_features', 'padding_mode'}
local function take_float(self, name, float_mod, qconfig)
  if not qconfig then A.fail(name .. ': needs a qconfig') end
  self.weight = float_mod.weight
  if float_mod.bias ~= nil then self.bias = float_mod.bias else self:register_parameter('bias', nil) end
  for _, k in ipairs(FLOAT_ATTRS) do rawset(self, k, rawget(float_mod, k)) end
  rawset(self, 'qconfig', qconfig)
  self.weight_fake_quant = qconfig.weight()
end

local function linear_or_conv(self, float_kind, x, w, b)
  if float_kind == 'Conv2d' then
    return F.conv2d(x, w, b, self.stride, self.padding, self.dilation, self.groups)
  end
  return F.linear(x, w, b)
end

-- a float conv/linear whose weight goes through weight_fake_quant
local function qat_class(name, float_kind, relu)
  local cls = nn.Module:subclass(name)
  cls._float_kind, cls._relu = float_kind, relu
  function cls:__init(float_mod, qconfig) nn.Module.__init(self); take_float(self, name, float_mod, qconfig) end
  function cls:forward(x)
    local y = linear_or_conv(self, float_kind, x, self.weight_fake_quant(self.weight), self.bias)
    if relu then y = F.relu(y) end
    return y
  end
  return cls
end
M.qat.Conv2d = qat_class('QATConv2d', 'Conv2d', false)
M.qat.ConvReLU2d = qat_class('QATConvReLU2d', 'Conv2d', true)
M.qat.Linear = qat_class('QATLinear', 'Linear', false)
M.qat.LinearReLU = qat_class('QATLinearReLU', 'Linear', true)

-- Conv2d/Linear + BatchNorm for QAT (torch.ao.nn.intrinsic.qat.ConvBn2d,
-- ConvBnReLU2d, LinearBn1d; PyTorch's forward, term for term): the weight
-- is scaled by gamma / sqrt(running_var + eps) before fake quantization,
-- as the converted model will fold it; the product is scaled back and the
-- BatchNorm then runs as usual (batch statistics, running stats updated in
-- training), so training sees the quantized folded weight while BatchNorm
-- keeps learning. freeze_bn_stats() keeps BatchNorm in eval mode (running
-- statistics) from then on; convert folds BatchNorm into the weight.
local function qat_bn_class(name, float_kind, relu)
  local cls = nn.Module:subclass(name)
  cls._float_kind, cls._relu, cls._bn = float_kind, relu, true
  function cls:__init(fused_mod, qconfig)
    nn.Module.__init(self)
    local lin, bn = fused_mod:part(1), fused_mod:part(2)
    take_float(self, name, lin, qconfig)
    if bn.running_var == nil then
      A.fail(('%s: the BatchNorm needs running statistics (track_running_stats = true)'):format(name))
    end
    self.bn = bn
    rawset(self, 'freeze_bn', false)
  end
  function cls:forward(x)
    local bn = self.bn
    local std = (bn.running_var + bn.eps):sqrt()
    local sf = bn.weight ~= nil and bn.weight / std or 1 / std
    local nd = self.weight:dim()
    local wsh, bsh = {-1}, {1, -1}
    for i = 2, nd do wsh[i] = 1 end
    for i = 3, nd do bsh[i] = 1 end
    local w = self.weight_fake_quant(self.weight * sf:reshape(wsh))
    -- PyTorch adds a zero bias here; x + 0 is x
    local y = linear_or_conv(self, float_kind, x, w, nil) / sf:reshape(bsh)
    if self.bias ~= nil then y = y + self.bias:reshape(bsh) end
    y = bn(y)
    if relu then y = F.relu(y) end
    return y
  end
  --- BatchNorm uses (and no longer updates) its running statistics, also in training mode.
  function cls:freeze_bn_stats()
    rawset(self, 'freeze_bn', true)
    self.bn:train(false)
    return self
  end
  --- BatchNorm follows the module's mode again.
  function cls:update_bn_stats()
    rawset(self, 'freeze_bn', false)
    self.bn:train(self.training)
    return self
  end
  function cls:train(mode)
    if mode == nil then mode = true end
    nn.Module.train(self, mode)
    if rawget(self, 'freeze_bn') then self.bn:train(false) end
    return self
  end
  return cls
end
M.qat.ConvBn2d = qat_bn_class('QATConvBn2d', 'Conv2d', false)
M.qat.ConvBnReLU2d = qat_bn_class('QATConvBnReLU2d', 'Conv2d', true)
M.qat.LinearBn1d = qat_bn_class('QATLinearBn1d', 'Linear', false)

--- qat.freeze_bn_stats(m) / qat.update_bn_stats(m): for model:apply (PyTorch's
-- torch.ao.nn.intrinsic.qat.freeze_bn_stats): switch every QAT Conv/Linear+BN.
local function has_bn(m) local c = class_of(m); return c ~= nil and c._bn == true end
M.has_bn = has_bn
function M.qat.freeze_bn_stats(m) if has_bn(m) then m:freeze_bn_stats() end end
function M.qat.update_bn_stats(m) if has_bn(m) then m:update_bn_stats() end end

------------------------------------------------------------------ quantized modules
local function f32(v) return tonumber(ffi.new('float', v)) end

local function check_input(name, x)
  if not is_q(x) then
    A.fail(('%s: expected a quantized tensor (put a QuantStub before it), got %s'):format(
      name, A.describe(x)))
  end
  if x._qscheme ~= 'per_tensor_affine' or x.dtype == Q.qint32 then
    A.fail(('%s: input must be per-tensor quint8/qint8, got %s %s'):format(name, x.dtype.name, x._qscheme))
  end
end

-- weight qtensor -> float32 scales, int64 zero points (one per output channel or one)
local function weight_params(name, w)
  if not is_q(w) or w.dtype ~= Q.qint8 then
    A.fail(('%s: weight must be a qint8 quantized tensor, got %s'):format(name, A.describe(w)))
  end
  if w._qscheme == 'per_tensor_affine' then
    return flow.tensor({w._scale}, {dtype = flow.float32}), flow.tensor({w._zp}, {dtype = flow.int64})
  end
  if w._axis ~= 1 then A.fail(name .. ': per-channel weights must be quantized along axis 1 (output channels)') end
  return w._scales:to(flow.float32), w._zps
end

local function check_scale(name, scale, zp, dt)
  if type(scale) ~= 'number' or scale ~= scale or scale <= 0 or scale == math.huge then
    A.fail(('%s: scale must be a positive finite number, got %s'):format(name, tostring(scale)))
  end
  if type(zp) ~= 'number' or zp ~= math.floor(zp) or zp < dt.qmin or zp > dt.qmax then
    A.fail(('%s: zero_point must be an integer in [%d, %d], got %s'):format(name, dt.qmin, dt.qmax, tostring(zp)))
  end
end

-- a loaded output scale / zero point, named by its state-dict key
function M.check_loaded(prefix, scale, zp, dt)
  if scale ~= scale or scale <= 0 or scale == math.huge then
    A.fail(('load_state_dict: %sscale = %s is not a positive finite number'):format(prefix, tostring(scale)))
  end
  if zp ~= math.floor(zp) or zp < dt.qmin or zp > dt.qmax then
    A.fail(('load_state_dict: %szero_point = %s is not an integer in [%d, %d] (%s)'):format(
      prefix, tostring(zp), dt.qmin, dt.qmax, dt.name))
  end
end

-- the output's dtype, scale and zero point of a quantized module, checked
local function set_out(self, name, scale, zero_point, dtype)
  if dtype ~= nil and (type(dtype) ~= 'table' or type(dtype.qmin) ~= 'number') then
    A.fail(('%s: argument 3 (dtype) must be a quantized dtype (flow.quint8, ...), got %s')
      :format(name, A.describe(dtype)))
  end
  rawset(self, 'out_dtype', dtype or Q.quint8)
  check_scale(name, scale, zero_point, self.out_dtype)
  rawset(self, 'scale', scale)
  rawset(self, 'zero_point', zero_point)
end

local QuantizedBase = nn.Module:subclass('QuantizedModule')

-- weight (qtensor), bias (float tensor or nil), scale/zero_point of the output
function QuantizedBase:_set_weight_bias(w, b)
  local ws, wz = weight_params(self.__name, w)
  rawset(self, '_weight', w)
  rawset(self, '_ws', ws)
  rawset(self, '_wz', wz)
  rawset(self, '_bias', b and b:detach():to(flow.float32):contiguous() or nil)
end
function QuantizedBase:weight() return rawget(self, '_weight') end
function QuantizedBase:bias() return rawget(self, '_bias') end

-- quantized modules keep a qtensor and two numbers: state_dict holds
-- <prefix>weight (qtensor), bias, scale, zero_point as PyTorch's do
function QuantizedBase:__extra_state(prefix, out, keys)
  local function put(k, v) out[prefix .. k] = v; keys[#keys + 1] = prefix .. k end
  put('weight', rawget(self, '_weight'))
  if rawget(self, '_bias') then put('bias', rawget(self, '_bias')) end
  if rawget(self, 'scale') then
    put('scale', flow.tensor(self.scale, {dtype = flow.float64}))
    put('zero_point', flow.tensor(self.zero_point, {dtype = flow.int64}))
  end
end

-- checks a state dict's entries; returns a function that applies them or
-- raises naming the key and what does not match
function QuantizedBase:__load_extra(prefix, sd, seen)
  local wk = prefix .. 'weight'
  local w, b = sd[wk], sd[prefix .. 'bias']
  seen[wk], seen[prefix .. 'bias'] = true, true
  local cur = self:weight()
  if not is_q(w) then A.fail(('load_state_dict: %s must be a quantized tensor, got %s'):format(wk, A.describe(w))) end
  if w.dtype ~= cur.dtype or w._qscheme ~= cur._qscheme then
    A.fail(('load_state_dict: %s is %s %s, the module has %s %s'):format(wk, w.dtype.name, w._qscheme,
      cur.dtype.name, cur._qscheme))
  end
  if tostring(w:size()) ~= tostring(cur:size()) then
    A.fail(('load_state_dict: size mismatch for %s: checkpoint %s, model %s'):format(wk,
      A.shape_str(w._int), A.shape_str(cur._int)))
  end
  if w._qscheme:find('per_channel', 1, true) and (w._axis ~= cur._axis or w._scales:numel() ~= cur._scales:numel()) then
    A.fail(('load_state_dict: %s has %d per-channel scales along axis %d, the module %d along axis %d')
      :format(wk, w._scales:numel(), w._axis, cur._scales:numel(), cur._axis))
  end
  if (b ~= nil) ~= (rawget(self, '_bias') ~= nil) then
    A.fail(('load_state_dict: %sbias is %s in the checkpoint but %s in the model'):format(prefix,
      b and 'present' or 'missing', rawget(self, '_bias') and 'present' or 'absent'))
  end
  local scale, zp
  if rawget(self, 'scale') then
    local sk, zk = prefix .. 'scale', prefix .. 'zero_point'
    seen[sk], seen[zk] = true, true
    local s, z = sd[sk], sd[zk]
    if not (flow.is_tensor(s) and s:numel() == 1 and flow.is_tensor(z) and z:numel() == 1) then
      A.fail(('load_state_dict: %s and %s must be one-element tensors'):format(sk, zk))
    end
    scale, zp = s:item(), z:item()
    M.check_loaded(prefix, scale, zp, self.out_dtype)
  end
  return function()
    self:_set_weight_bias(w, b)
    if scale then rawset(self, 'scale', scale); rawset(self, 'zero_point', zp) end
  end
end

local function pair(v, what, name)
  if type(v) == 'number' then return {v, v} end
  if type(v) == 'table' and #v == 2 then return {v[1], v[2]} end
  A.fail(('%s: %s must be a number or a pair, got %s'):format(name, what, tostring(v)))
end

local pbuf = {}
for i = 1, 3 do pbuf[i] = ffi.new('int64_t[2]') end

-- quantized Conv2d (relu: ConvReLU2d)
local function qconv_class(name, relu)
  local cls = QuantizedBase:subclass(name)
  function cls:__init(o)
    nn.Module.__init(self)
    rawset(self, 'stride', pair(o.stride or 1, 'stride', name))
    rawset(self, 'padding', pair(o.padding or 0, 'padding', name))
    rawset(self, 'dilation', pair(o.dilation or 1, 'dilation', name))
    rawset(self, 'groups', o.groups or 1)
    set_out(self, name, o.scale, o.zero_point, o.dtype)
    self:_set_weight_bias(o.weight, o.bias)
  end
  function cls:forward(x)
    check_input(name, x)
    for i = 1, 2 do
      pbuf[1][i - 1], pbuf[2][i - 1], pbuf[3][i - 1] = self.stride[i], self.padding[i], self.dilation[i]
    end
    local w = rawget(self, '_weight')
    local b = rawget(self, '_bias')
    local dt = self.out_dtype
    if C.of_quantized_conv2d(x._int.p, w._int.p, self._ws.p, self._wz.p, b and b.p or nil,
                             pbuf[1], pbuf[2], pbuf[3], self.groups, x._scale, x._zp, self.scale,
                             self.zero_point, dt.storage.id, relu and 1 or 0, out1) ~= 0 then
      A.raise_c()
    end
    return Q.from_int_repr(wrap(out1[0]), self.scale, self.zero_point, dt)
  end
  function cls:extra_repr()
    local w = rawget(self, '_weight')
    return ('%d, %d, kernel_size=(%d, %d), stride=(%d, %d), padding=(%d, %d), scale=%.6g, zero_point=%d%s')
      :format(w:size(2) * self.groups, w:size(1), w:size(3), w:size(4), self.stride[1], self.stride[2],
              self.padding[1], self.padding[2], self.scale, self.zero_point,
              self.groups > 1 and (', groups=' .. self.groups) or '')
  end
  return cls
end
M.Conv2d = qconv_class('QuantizedConv2d', false)
M.ConvReLU2d_q = qconv_class('QuantizedConvReLU2d', true)

-- quantized Linear (relu: LinearReLU); out_dtype float32 = dynamic
local function qlinear_class(name, relu)
  local cls = QuantizedBase:subclass(name)
  function cls:__init(o)
    nn.Module.__init(self)
    set_out(self, name, o.scale, o.zero_point, o.dtype)
    self:_set_weight_bias(o.weight, o.bias)
  end
  function cls:forward(x)
    check_input(name, x)
    local w = rawget(self, '_weight')
    local b = rawget(self, '_bias')
    local dt = self.out_dtype
    if C.of_quantized_linear(x._int.p, w._int.p, self._ws.p, self._wz.p, b and b.p or nil,
                             x._scale, x._zp, self.scale, self.zero_point, dt.storage.id,
                             relu and 1 or 0, out1) ~= 0 then
      A.raise_c()
    end
    return Q.from_int_repr(wrap(out1[0]), self.scale, self.zero_point, dt)
  end
  function cls:extra_repr()
    local w = rawget(self, '_weight')
    return ('in_features=%d, out_features=%d, scale=%.6g, zero_point=%d, qscheme=%s'):format(
      w:size(2), w:size(1), self.scale, self.zero_point, w._qscheme)
  end
  return cls
end
M.Linear = qlinear_class('QuantizedLinear', false)
M.LinearReLU_q = qlinear_class('QuantizedLinearReLU', true)

-- dynamic Linear: float input quantized per batch (quint8, fbgemm's
-- ChooseQuantizationParams with reduce_range), int8 weights, float output
local DynLinear = QuantizedBase:subclass('DynamicQuantizedLinear')
M.dynamic.Linear = DynLinear
function DynLinear:__init(o)
  nn.Module.__init(self)
  rawset(self, 'reduce_range', o.reduce_range ~= false)
  if M.is_fp16_weight(o.weight) then   -- float16_dynamic_qconfig: float16 weights, float products
    rawset(self, '_weight', o.weight)
    rawset(self, '_bias', o.bias and o.bias:detach():to(flow.float32):contiguous() or nil)
    return
  end
  self:_set_weight_bias(o.weight, o.bias)
end

-- float16 dynamic quantization (PyTorch's float16_dynamic_qconfig,
-- quantize_dynamic(..., {dtype = flow.float16})): the weights are stored as
-- float16 (saturated at +-65504 as fbgemm's packing does), the input and
-- the products stay float32 (fbgemm's fp16 gemm widens the weights too)
function M.is_fp16_weight(w) return flow.is_tensor(w) and w.dtype == flow.float16 end
--- The float16 copy of a float weight: values beyond float16's range saturate (fbgemm's).
function M.fp16_weight(w)
  return w:detach():to(flow.float32):clamp(-65504, 65504):to(flow.float16)
end
local function fp16_linear(x, w16, b)
  return F.linear(x:to(flow.float32), w16:to(flow.float32), b)
end
-- x (float, [..., in]) -> float [..., out]: x quantized to quint8 with its
-- own range (fbgemm's apply_dynamic), int8 weight w (scales ws, zero points
-- wz), float bias b; name is the module that calls it
--- x's min and max as numbers (0, 0 when empty), for a scale chosen at run
-- time; NaN or infinite values are an error naming the caller.
local range2 = ffi.new('double[2]')
function M.dynamic_range(name, x)
  local lo, hi = 0, 0
  if x:numel() > 0 then
    local xf = x:detach():to(flow.float32)
    local tracer = package.loaded['oneflow.onnx.tracer']
    if not xf.is_cuda and not (tracer and tracer.active()) then
      -- one pass in C (of_quant_range) instead of two reductions; refused
      -- while an nn.Graph traces (it reads values)
      if C.of_quant_range(xf.p, range2, range2 + 1) ~= 0 then A.raise_c() end
      lo, hi = range2[0], range2[1]
    else
      lo, hi = xf:min():item(), xf:max():item()
    end
  end
  if lo ~= lo or hi ~= hi or lo == -math.huge or hi == math.huge then
    A.fail(name .. ': input has NaN or infinite values, which cannot be quantized')
  end
  return lo, hi
end

-- one op in C (range, parameters, quantization, int8 product), recorded as
-- one node in nn.Graph so that a graph chooses them at every run; it refuses
-- CUDA tensors (the int8 kernels are the CPU's), and ONNX export writes the
-- layers through their module rules (oneflow.onnx.quantized) instead
local function dynamic_linear(name, x, w, ws, wz, b, reduce_range)
  if C.of_dynamic_quantized_linear(x:to(flow.float32).p, w._int.p, ws.p, wz.p, b and b.p or nil,
                                   reduce_range and 1 or 0, out1) ~= 0 then
    A.fail(name .. ': ' .. ffi.string(C.of_last_error()))
  end
  return wrap(out1[0])
end

function DynLinear:forward(x)
  A.check_tensor(self.__name, x)
  local w = rawget(self, '_weight')
  if M.is_fp16_weight(w) then return fp16_linear(x, w, rawget(self, '_bias')) end
  return dynamic_linear(self.__name, x, w, self._ws, self._wz, rawget(self, '_bias'), self.reduce_range)
end
function DynLinear:extra_repr()
  local w = rawget(self, '_weight')
  if M.is_fp16_weight(w) then return ('in_features=%d, out_features=%d, dtype=float16'):format(w:size(2), w:size(1)) end
  return ('in_features=%d, out_features=%d, dtype=%s, qscheme=%s'):format(w:size(2), w:size(1),
    w.dtype.name, w._qscheme)
end
-- a float16 layer's state dict: weight (float16) and bias, checked on load
function DynLinear:__load_extra(prefix, sd, seen)
  local cur = rawget(self, '_weight')
  if not M.is_fp16_weight(cur) then return QuantizedBase.__load_extra(self, prefix, sd, seen) end
  local wk, bk = prefix .. 'weight', prefix .. 'bias'
  seen[wk], seen[bk] = true, true
  local w, b = sd[wk], sd[bk]
  if not M.is_fp16_weight(w) or tostring(w:size()) ~= tostring(cur:size()) then
    A.fail(('load_state_dict: %s must be a float16 tensor of size %s, got %s'):format(wk, A.shape_str(cur),
      A.describe(w)))
  end
  if (b ~= nil) ~= (rawget(self, '_bias') ~= nil) then
    A.fail(('load_state_dict: %s is %s in the checkpoint but %s in the model'):format(bk,
      b and 'present' or 'missing', rawget(self, '_bias') and 'present' or 'absent'))
  end
  return function()
    rawset(self, '_weight', w)
    rawset(self, '_bias', b and b:detach():to(flow.float32):contiguous() or nil)
  end
end

-- dynamic LSTM and GRU (torch.ao.nn.quantized.dynamic.LSTM / GRU): every
-- weight_ih/hh is int8 (per-tensor symmetric, or the qconfig's), each gate
-- affine a dynamic_linear -- the input-hidden one over the whole sequence
-- at once, the hidden-hidden one per step -- with fbgemm's reduce_range as
-- PyTorch's (ATen's FullLayer precomputes the input products the same way
-- for both); the cell maths, layouts and state handling are nn.LSTM's /
-- nn.GRU's (RNNBase:_gates is the hook). The cells (LSTMCell, GRUCell,
-- RNNCell) quantize each step's input and state (their _affine hook).
local RNN_KEYS = {'mode', 'input_size', 'hidden_size', 'num_layers', 'bias', 'batch_first', 'dropout',
                  'bidirectional'}
local CELL_KEYS = {'mode', 'input_size', 'hidden_size', 'bias'}

-- {weight = qint8, ws, wz, bias = float or nil} for weight_<k> / bias_<k> of float
local function qentry(name, float, k, quantize_weight)
  local b = float.bias and float['bias_' .. k] or nil
  local qw = quantize_weight(float['weight_' .. k])
  if M.is_fp16_weight(qw) then return {weight = qw, bias = b and b:detach():to(flow.float32):contiguous() or nil} end
  local ws, wz = weight_params(name, qw)
  return {weight = qw, ws = ws, wz = wz, bias = b and b:detach():to(flow.float32):contiguous() or nil}
end

-- the methods every dynamic recurrent module shares: weights by suffix in
-- _qw (names in _qnames), state_dict as the float module's keys
local function dyn_recurrent(cls)
  --- get_weight(): {weight_ih_l0 = qint8 tensor, weight_hh_l0 = ..., ...} (PyTorch's _weight_bias()[0]).
  function cls:get_weight()
    local r = {}
    for k, e in pairs(rawget(self, '_qw')) do r['weight_' .. k] = e.weight end
    return r
  end
  --- get_bias(): {bias_ih_l0 = float tensor, ...} (empty without bias).
  function cls:get_bias()
    local r = {}
    for k, e in pairs(rawget(self, '_qw')) do r['bias_' .. k] = e.bias end
    return r
  end
  -- state_dict: weight_ih_l0 (qint8 tensor), bias_ih_l0 (float), ... in
  -- the float module's order
  function cls:__extra_state(prefix, out, keys)
    local w = rawget(self, '_qw')
    for _, k in ipairs(rawget(self, '_qnames')) do
      out[prefix .. 'weight_' .. k] = w[k].weight
      keys[#keys + 1] = prefix .. 'weight_' .. k
    end
    if self.bias then
      for _, k in ipairs(rawget(self, '_qnames')) do
        out[prefix .. 'bias_' .. k] = w[k].bias
        keys[#keys + 1] = prefix .. 'bias_' .. k
      end
    end
  end
  function cls:__load_extra(prefix, sd, seen)
    local w, new = rawget(self, '_qw'), {}
    for _, k in ipairs(rawget(self, '_qnames')) do
      local wk, bk = prefix .. 'weight_' .. k, prefix .. 'bias_' .. k
      seen[wk], seen[bk] = true, true
      local v, b, cur = sd[wk], sd[bk], w[k]
      local fp16 = M.is_fp16_weight(cur.weight)
      if fp16 and not M.is_fp16_weight(v) then
        A.fail(('load_state_dict: %s must be a float16 tensor, got %s'):format(wk, A.describe(v)))
      elseif not fp16 and (not is_q(v) or v.dtype ~= Q.qint8 or v._qscheme ~= cur.weight._qscheme) then
        A.fail(('load_state_dict: %s must be a qint8 %s quantized tensor, got %s'):format(wk,
          cur.weight._qscheme == 'per_tensor_affine' and 'per-tensor' or 'per-channel', A.describe(v)))
      end
      if tostring(v:size()) ~= tostring(cur.weight:size()) then
        A.fail(('load_state_dict: size mismatch for %s: checkpoint %s, model %s'):format(wk,
          A.shape_str(v._int), A.shape_str(cur.weight._int)))
      end
      if not fp16 and v._qscheme == 'per_tensor_affine' then M.check_loaded(wk .. ' ', v._scale, v._zp, Q.qint8) end
      if (b ~= nil) ~= (cur.bias ~= nil) then
        A.fail(('load_state_dict: %s is %s in the checkpoint but %s in the model'):format(bk,
          b ~= nil and 'present' or 'missing', cur.bias ~= nil and 'present' or 'absent'))
      end
      if b ~= nil and (not flow.is_tensor(b) or tostring(b:size()) ~= tostring(cur.bias:size())) then
        A.fail(('load_state_dict: size mismatch for %s: checkpoint %s, model %s'):format(bk,
          A.describe(b), A.shape_str(cur.bias)))
      end
      local ws, wz
      if not fp16 then ws, wz = weight_params(self.__name, v) end
      new[k] = {weight = v, ws = ws, wz = wz, bias = b and b:detach():to(flow.float32):contiguous() or nil}
    end
    return function() rawset(self, '_qw', new) end
  end
end

-- the weight names of a float recurrent module: ih/hh per layer and
-- direction (LSTM, GRU), or ih and hh (the cells)
local function rnn_names(float)
  local names = {}
  for l = 0, float.num_layers - 1 do
    for d = 0, (float.bidirectional and 2 or 1) - 1 do
      for _, which in ipairs({'ih', 'hh'}) do
        names[#names + 1] = ('%s_l%d%s'):format(which, l, d == 1 and '_reverse' or '')
      end
    end
  end
  return names
end
local function cell_names() return {'ih', 'hh'} end

-- the dynamic version of float_cls: its weights int8, its affine hook
-- (RNNBase:_gates(x, which, sfx), a cell's _affine(x, which)) a
-- dynamic_linear, everything else float_cls's
local function dyn_class(name, float_cls, keys, names_of, hook)
  local cls = float_cls:subclass(name)
  --- quantization.nn.quantized.dynamic.LSTM / GRU / LSTMCell / GRUCell / RNNCell(float, quantize_weight):
  -- the dynamically quantized copy of a recurrent module (quantize_dynamic makes it).
  function cls:__init(float, quantize_weight)
    nn.Module.__init(self)
    for _, k in ipairs(keys) do rawset(self, k, float[k]) end
    local w, names = {}, names_of(float)
    for _, k in ipairs(names) do w[k] = qentry(name, float, k, quantize_weight) end
    rawset(self, '_qw', w)
    rawset(self, '_qnames', names)
  end
  cls[hook] = function(self, x, which, sfx)
    local e = rawget(self, '_qw')[which .. (sfx or '')]
    if not e.ws then return fp16_linear(x, e.weight, e.bias) end
    return dynamic_linear(self.__name, x, e.weight, e.ws, e.wz, e.bias, true)
  end
  function cls:forward(input, hx)
    -- a PackedSequence runs each step on its active rows (nn.RNNBase)
    if not require('oneflow.nn.packed').is_packed(input) then A.check_tensor(self.__name, input) end
    return float_cls.forward(self, input, hx)
  end
  dyn_recurrent(cls)
  return cls
end
M.dynamic.LSTM = dyn_class('DynamicQuantizedLSTM', nn.LSTM, RNN_KEYS, rnn_names, '_gates')
M.dynamic.GRU = dyn_class('DynamicQuantizedGRU', nn.GRU, RNN_KEYS, rnn_names, '_gates')
M.dynamic.LSTMCell = dyn_class('DynamicQuantizedLSTMCell', nn.LSTMCell, CELL_KEYS, cell_names, '_affine')
M.dynamic.GRUCell = dyn_class('DynamicQuantizedGRUCell', nn.GRUCell, CELL_KEYS, cell_names, '_affine')
M.dynamic.RNNCell = dyn_class('DynamicQuantizedRNNCell', nn.RNNCell, CELL_KEYS, cell_names, '_affine')

------------------------------------------------------------------ other quantized modules
local Quantize = nn.Module:subclass('Quantize')
M.Quantize = Quantize
function Quantize:__init(scale, zero_point, dtype)
  nn.Module.__init(self)
  set_out(self, 'Quantize', scale, zero_point, dtype)
end
function Quantize:forward(x)
  if is_q(x) then return x end
  return Q.quantize_per_tensor(x, self.scale, self.zero_point, self.out_dtype)
end
function Quantize:extra_repr()
  return ('scale=%.6g, zero_point=%d, dtype=%s'):format(self.scale, self.zero_point, self.out_dtype.name)
end
function Quantize:__extra_state(prefix, out, keys)
  out[prefix .. 'scale'] = flow.tensor(self.scale, {dtype = flow.float64})
  out[prefix .. 'zero_point'] = flow.tensor(self.zero_point, {dtype = flow.int64})
  keys[#keys + 1] = prefix .. 'scale'
  keys[#keys + 1] = prefix .. 'zero_point'
end
function Quantize:__load_extra(prefix, sd, seen)
  local sk, zk = prefix .. 'scale', prefix .. 'zero_point'
  seen[sk], seen[zk] = true, true
  local s, z = sd[sk], sd[zk]
  if not (flow.is_tensor(s) and s:numel() == 1 and flow.is_tensor(z) and z:numel() == 1) then
    A.fail(('load_state_dict: %s and %s must be one-element tensors'):format(sk, zk))
  end
  local scale, zp = s:item(), z:item()
  M.check_loaded(prefix, scale, zp, self.out_dtype)
  return function() rawset(self, 'scale', scale); rawset(self, 'zero_point', zp) end
end

-- BatchNorm2d on a quantized activation (PyTorch's nnq.BatchNorm2d, what
-- convert makes of a BatchNorm that nothing was fused into): the eval-mode
-- normalisation of the dequantized values, requantised to the observed
-- output scale and zero point. Its state dict is the float BatchNorm's plus
-- scale and zero_point.
local QBatchNorm2d = nn.BatchNorm2d:subclass('QuantizedBatchNorm2d')
M.BatchNorm2d_q = QBatchNorm2d
--- quantization.nn.quantized.BatchNorm2d(float_bn, scale, zero_point, dtype): convert makes it.
function QBatchNorm2d:__init(float, scale, zero_point, dtype)
  A.arg('QuantizedBatchNorm2d', 1, 'float_bn', float, 'module')
  nn.BatchNorm2d.__init(self, float.num_features, {eps = float.eps, momentum = float.momentum,
                                                   affine = float.affine, track_running_stats = true})
  if float.running_mean == nil or float.running_var == nil then
    A.fail('QuantizedBatchNorm2d: the BatchNorm has no running statistics to normalise with')
  end
  flow.no_grad(function()
    self.running_mean:copy_(float.running_mean)
    self.running_var:copy_(float.running_var)
    if float.affine then
      self.weight:copy_(float.weight)
      self.bias:copy_(float.bias)
    end
  end)
  set_out(self, 'QuantizedBatchNorm2d', scale, zero_point, dtype)
  self:eval()
end
function QBatchNorm2d:forward(x)
  check_input(self.__name, x)
  if x:dim() ~= 4 then A.fail(('%s: expected a 4-d input, got %d-d'):format(self.__name, x:dim())) end
  local y = F.batch_norm(x:dequantize(), self.running_mean, self.running_var,
                         {weight = self.weight, bias = self.bias, training = false, eps = self.eps})
  return Q.quantize_per_tensor(y, self.scale, self.zero_point, self.out_dtype)
end
function QBatchNorm2d:extra_repr()
  return ('%d, eps=%g, scale=%.6g, zero_point=%d'):format(self.num_features, self.eps, self.scale, self.zero_point)
end
QBatchNorm2d.__extra_state = Quantize.__extra_state
QBatchNorm2d.__load_extra = Quantize.__load_extra

local DeQuantize = nn.Module:subclass('DeQuantize')
M.DeQuantize = DeQuantize
function DeQuantize.forward(_, x)
  if is_q(x) then return x:dequantize() end
  return x
end


local QReLU = nn.Module:subclass('QuantizedReLU')
M.ReLU = QReLU
function QReLU.forward(_, x)
  check_input('QuantizedReLU', x)
  return F.relu(x)   -- the integers clamped at the zero point (functional.lua)
end

-- add/mul/cat of quantized tensors requantised to the observed output
-- scale/zero_point (computed on the dequantized values, then rounded once)
local QFunctional = nn.Module:subclass('QFunctional')
--- QFunctional(): FloatFunctional's quantized counterpart after convert.
-- @function quantization.QFunctional
M.QFunctional = QFunctional
function QFunctional:__init(scale, zero_point, dtype)
  nn.Module.__init(self)
  set_out(self, 'QFunctional', scale, zero_point, dtype)
end
local function deq(name, v)
  if is_q(v) then return v:dequantize() end
  if type(v) == 'number' then return v end
  A.fail(('%s: operands must be quantized tensors or numbers, got %s'):format(name, A.describe(v)))
end
function QFunctional:_out(y) return Q.quantize_per_tensor(y, self.scale, self.zero_point, self.out_dtype) end
-- two per-tensor quantized operands of one shape: one C pass
-- (of_quantized_add, equal to the float chain below to the bit)
local function qadd(self, a, b, relu)
  if not (is_q(a) and is_q(b) and a._qscheme == 'per_tensor_affine' and b._qscheme == 'per_tensor_affine'
          and A.same_shape(a._int, b._int)) then
    return nil
  end
  if C.of_quantized_add(a._int.p, b._int.p, a._scale, a._zp, b._scale, b._zp, self.scale, self.zero_point,
                        self.out_dtype.storage.id, relu and 1 or 0, out1) ~= 0 then
    A.raise_c()
  end
  return Q.from_int_repr(wrap(out1[0]), self.scale, self.zero_point, self.out_dtype)
end
function QFunctional:add(a, b)
  return qadd(self, a, b, false) or self:_out(deq('QFunctional.add', a) + deq('QFunctional.add', b))
end
function QFunctional:add_relu(a, b)
  return qadd(self, a, b, true)
    or self:_out(F.relu(deq('QFunctional.add_relu', a) + deq('QFunctional.add_relu', b)))
end
function QFunctional:mul(a, b) return self:_out(deq('QFunctional.mul', a) * deq('QFunctional.mul', b)) end
function QFunctional:cat(xs, dim)
  local fs = {}
  for i, v in ipairs(xs) do fs[i] = deq('QFunctional.cat', v) end
  return self:_out(flow.cat(fs, dim or 1))
end
function QFunctional.forward() A.fail('QFunctional: call add, add_relu, mul or cat, not forward') end
function QFunctional:extra_repr() return ('scale=%.6g, zero_point=%d'):format(self.scale, self.zero_point) end
QFunctional.__extra_state = Quantize.__extra_state
QFunctional.__load_extra = Quantize.__load_extra

M.f32 = f32
------------------------------------------------------------------ embeddings
-- Weight-only quantized lookups (torch.ao.nn.quantized.Embedding /
-- EmbeddingBag, made by quantize_dynamic or convert with
-- float_qparams_weight_only_qconfig[_4bit]): the table is quint8 or
-- quint4x2 rows, each with a float scale and zero point
-- (per_channel_affine_float_qparams: 4x / 8x smaller than float32); a
-- lookup dequantizes only the rows it reads, as fbgemm's q * scale + bias
-- with bias = -(zero_point * scale) per row. quint4x2 tables are kept packed
-- two values a byte, each row padded to whole bytes (an odd embedding_dim
-- too), and their scale and bias rounded to float16, as fbgemm's 4-bit rows
-- store them: lookups equal PyTorch's.
local QEmbBase = QuantizedBase:subclass('QuantizedEmbeddingBase')
function QEmbBase:_set_weight_bias(w)
  if not is_q(w) or (w.dtype ~= Q.quint8 and w.dtype ~= Q.quint4x2)
     or w._qscheme ~= 'per_channel_affine_float_qparams' or w._axis ~= 1 or w:dim() ~= 2 then
    A.fail(('%s: weight must be a 2-d quint8 or quint4x2 tensor quantized per row '
      .. '(per_channel_affine_float_qparams, axis 1), got %s'):format(self.__name,
      is_q(w) and (w.dtype.name .. ' ' .. w._qscheme) or A.describe(w)))
  end
  local s32 = w._scales:to(flow.float32):contiguous()
  local bias = -(w._zps:to(flow.float32) * s32)
  local n, d = w:size(1), w:size(2)
  if w.dtype == Q.quint4x2 then
    -- rows padded to an even length, packed: [n, ceil(d / 2)] bytes
    local int = w._int
    if d % 2 == 1 then int = flow.cat({int, flow.zeros(n, 1, {dtype = flow.uint8})}, 2) end
    rawset(self, '_packed', Q.pack4(int):view(n, -1))
    rawset(self, '_qparams', {s32, w._zps:to(flow.float32):contiguous()})
    rawset(self, '_weight', nil)
    s32, bias = s32:to(flow.float16):to(flow.float32), bias:to(flow.float16):to(flow.float32)
  else
    rawset(self, '_weight', w)
    rawset(self, '_packed', nil)
  end
  rawset(self, '_row_scale', s32)
  rawset(self, '_row_bias', bias)
  rawset(self, 'num_embeddings', n)
  rawset(self, 'embedding_dim', d)
end

--- m:weight(): the quantized table (a quint4x2 one unpacked from its rows).
function QEmbBase:weight()
  local w = rawget(self, '_weight')
  if w then return w end
  local n, d = self.num_embeddings, self.embedding_dim
  local packed = rawget(self, '_packed')
  local int = Q.unpack4(packed, {n, packed:size(2) * 2}):narrow(2, 1, d):contiguous()
  local qp = rawget(self, '_qparams')
  return Q.quantize_float_qparams_from_int(int, Q.quint4x2, qp[1], qp[2], 1)
end

-- the integers of the rows flat (int64 ids, 1-based) picks, as uint8 [k, dim]
function QEmbBase:_row_ints(flat)
  local packed = rawget(self, '_packed')
  if not packed then return rawget(self, '_weight')._int:index_select(1, flat) end
  local k = flat:numel()
  return Q.unpack4(packed:index_select(1, flat), {k, packed:size(2) * 2}):narrow(2, 1, self.embedding_dim)
end

function QEmbBase:__extra_state(prefix, out, keys)
  out[prefix .. 'weight'] = self:weight()
  keys[#keys + 1] = prefix .. 'weight'
end

-- ids (integer, any shape, 1-based) -> float32 [n, dim] rows of the flat ids
function QEmbBase:_rows(ids)
  A.check_tensor(self.__name, ids, 'input', 1)
  if ids.dtype.is_floating_point or ids.dtype == flow.bool then
    A.fail(('%s: input must hold integer ids, got %s'):format(self.__name, ids.dtype.name))
  end
  local flat = ids:reshape(-1):to(flow.int64)
  local n = self.num_embeddings
  -- the ids' range named by the module (eagerly; in a graph being traced the
  -- values are not there: index_select checks them at every run)
  if flat:numel() > 0 and C.of_tracing() == 0 then
    local lo, hi = flat:min():item(), flat:max():item()
    if lo < 1 or hi > n then
      A.fail(('%s: id %d is outside 1..%d'):format(self.__name, lo < 1 and lo or hi, n))
    end
  end
  local q = self:_row_ints(flat):to(flow.float32)
  return q * self._row_scale:index_select(1, flat):unsqueeze(2) + self._row_bias:index_select(1, flat):unsqueeze(2)
end

function QEmbBase:extra_repr()
  local s = ('num_embeddings=%d, embedding_dim=%d, dtype=%s, qscheme=per_channel_affine_float_qparams'):format(
    self.num_embeddings, self.embedding_dim, rawget(self, '_packed') and 'quint4x2' or 'quint8')
  if rawget(self, 'mode') then s = s .. (", mode='%s'"):format(self.mode) end
  if rawget(self, 'padding_idx') then s = s .. ', padding_idx=' .. self.padding_idx end
  return s
end

local QEmbedding = QEmbBase:subclass('QuantizedEmbedding')
--- quantization.nn.quantized.Embedding({weight =, padding_idx =}): a lookup in a quint8 table
-- quantized per row (PyTorch's nnq.Embedding); forward(ids) -> float32 [..., dim].
-- @function quantization.nn.quantized.Embedding
M.Embedding = QEmbedding
function QEmbBase:__init(o)
  nn.Module.__init(self)
  self:_set_weight_bias(o.weight)
  rawset(self, 'padding_idx', o.padding_idx)
end
function QEmbedding:forward(ids)
  local rows = self:_rows(ids)
  local shape = ids:size():totable()
  shape[#shape + 1] = self.embedding_dim
  return rows:view(shape)
end

local QEmbeddingBag = QEmbBase:subclass('QuantizedEmbeddingBag')
--- quantization.nn.quantized.EmbeddingBag({weight =, mode = 'sum', include_last_offset =, padding_idx =}):
-- nn.EmbeddingBag over a quint8 table quantized per row; forward(input, offsets, per_sample_weights).
-- @function quantization.nn.quantized.EmbeddingBag
M.EmbeddingBag = QEmbeddingBag
function QEmbeddingBag:__init(o)
  QEmbBase.__init(self, o)
  rawset(self, 'mode', o.mode or 'sum')
  rawset(self, 'include_last_offset', o.include_last_offset or false)
end
-- the bag's rows are gathered and dequantized first; F.embedding_bag then
-- reduces them as a table of its own (ids 1..n; padding_idx's positions
-- point at a zero row n + 1 that is the padding row there)
function QEmbeddingBag:forward(input, offsets, per_sample_weights)
  local rows = self:_rows(input)
  local n = rows:size(1)
  local ids = flow.arange(1, n + 1):view(input:size():totable())
  local pad
  if self.padding_idx then
    pad = n + 1
    rows = flow.cat({rows, flow.zeros(1, self.embedding_dim)}, 1)
    ids = flow.where(input:to(flow.int64):eq(self.padding_idx), flow.full_like(ids, pad), ids)
  end
  return F.embedding_bag(ids, rows, offsets, {mode = self.mode, per_sample_weights = per_sample_weights,
                                              padding_idx = pad, include_last_offset = self.include_last_offset})
end

return M
