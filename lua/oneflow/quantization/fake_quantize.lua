-- oneflow.quantization.fake_quantize: quantization-aware training.
--   FakeQuantize{observer = ctor, ...observer options}: observes its input
--   (when the observer is enabled) and returns it quantized and dequantized
--   (when fake quantization is enabled), with PyTorch's straight-through
--   gradient: 1 where the input was inside the representable range
--   [(qmin - zp) * scale, (qmax - zp) * scale], 0 where it was clamped.
-- Everything is tensor ops (scale and zero_point are buffers computed from
-- the observer's buffers, no host reads), so a FakeQuantize records into an
-- nn.Graph like any module: a QAT training step compiles as a graph.
--   flow.quantization.fake_quantize_per_tensor_affine(x, scale, zp, qmin, qmax)
--   flow.quantization.fake_quantize_per_channel_affine(x, scales, zps, axis, qmin, qmax)
local flow = require 'oneflow'
local A = require 'oneflow._args'
local O = require 'oneflow.quantization.observer'
local Q = require 'oneflow.quantization.qtensor'

local M = {}
local nn = flow.nn

-- x fake-quantized with scale/zp (tensors broadcasting against x)
local function fake_quant(x, scale, zp, qmin, qmax)
  local inv = 1 / scale
  local q = (x * inv):round() + zp
  local inside = q:ge(qmin):logical_and(q:le(qmax)):to(x.dtype)
  local fq = ((q:clamp(qmin, qmax) - zp) * scale):detach()
  -- value fq, gradient `inside`: the straight-through estimator
  return fq + (x - x:detach()) * inside
end

--- fake_quantize_per_tensor_affine(x, scale, zero_point, quant_min, quant_max)
function M.fake_quantize_per_tensor_affine(x, scale, zp, qmin, qmax)
  A.check_tensor('fake_quantize_per_tensor_affine', x)
  if not flow.is_tensor(scale) then scale = flow.tensor(scale) end
  if not flow.is_tensor(zp) then zp = flow.tensor(zp) end
  return fake_quant(x, scale:to(x.dtype), zp:to(x.dtype), qmin, qmax)
end

local function along(nd, axis, c)
  local s = {}
  for d = 1, nd do s[d] = d == axis and c or 1 end
  return s
end

--- fake_quantize_per_channel_affine(x, scales, zero_points, axis (1-based), quant_min, quant_max)
function M.fake_quantize_per_channel_affine(x, scales, zps, axis, qmin, qmax)
  A.check_tensor('fake_quantize_per_channel_affine', x)
  A.check_tensor('fake_quantize_per_channel_affine', scales, 'scales', 2)
  A.check_tensor('fake_quantize_per_channel_affine', zps, 'zero_points', 3)
  local sh = along(x:dim(), axis, x:size(axis))
  return fake_quant(x, scales:to(x.dtype):view(sh), zps:to(x.dtype):view(sh), qmin, qmax)
end

------------------------------------------------------------------ module
local FakeQuantize = nn.Module:subclass('FakeQuantize')
--- FakeQuantize({observer =, quant_min =, quant_max =, ...}): quantize-dequantize in training with a
-- straight-through gradient (QAT).
-- @function quantization.FakeQuantize
M.FakeQuantize = FakeQuantize

function FakeQuantize:__init(opts)
  nn.Module.__init(self)
  local o = {}
  for k, v in pairs(opts or {}) do
    -- the other keys are the observer's (it checks them); a near miss of
    -- 'observer' is this constructor's
    if k ~= 'observer' and A.nearest(k, {'observer'}) then A.unknown_option('FakeQuantize', k, {'observer'}) end
    if k ~= 'observer' then o[k] = v end
  end
  local ctor = (opts and opts.observer) or O.MovingAverageMinMaxObserver
  self.activation_post_process = ctor(o)
  local obs = self.activation_post_process
  rawset(self, 'dtype', obs.dtype)
  rawset(self, 'qscheme', obs.qscheme)
  rawset(self, 'quant_min', obs.quant_min)
  rawset(self, 'quant_max', obs.quant_max)
  rawset(self, 'ch_axis', obs.ch_axis)
  rawset(self, 'is_per_channel', obs:is_per_channel())
  self:register_buffer('fake_quant_enabled', flow.tensor(1, {dtype = flow.uint8}))
  self:register_buffer('observer_enabled', flow.tensor(1, {dtype = flow.uint8}))
  self:register_buffer('scale', flow.tensor({1.0}))
  self:register_buffer('zero_point', flow.tensor({0}, {dtype = flow.int64}))
end

--- quantization.enable_fake_quant(module): turns fake quantization on (use with module:apply).
-- the switches are host flags as well (read without touching the tensors,
-- so a graph traces the branch that is on)
function FakeQuantize:enable_fake_quant(on)
  on = on ~= false
  self.fake_quant_enabled:fill_(on and 1 or 0)
  rawset(self, '_fq_off', not on)
  return self
end
--- quantization.disable_fake_quant(module): turns fake quantization off (use with module:apply).
function FakeQuantize:disable_fake_quant() return self:enable_fake_quant(false) end
--- quantization.enable_observer(module): turns the FakeQuantize observers on (use with module:apply).
function FakeQuantize:enable_observer(on)
  on = on ~= false
  self.observer_enabled:fill_(on and 1 or 0)
  rawset(self, '_obs_off', not on)
  return self
end
function FakeQuantize:disable_observer() return self:enable_observer(false) end

function FakeQuantize:forward(x)
  local obs = self.activation_post_process
  if not rawget(self, '_obs_off') then
    obs(x:detach())
    local s, z = obs:_calculate_qparams(obs.min_val, obs.max_val)
    if self.scale:numel() ~= s:numel() then
      self.scale = s:reshape(-1):clone()
      self.zero_point = z:reshape(-1):clone()
    else
      self.scale:copy_(s:reshape(-1))
      self.zero_point:copy_(z:reshape(-1))
    end
  end
  if rawget(self, '_fq_off') then return x end
  if self.is_per_channel then
    local axis = self.ch_axis < 0 and x:dim() + self.ch_axis + 1 or self.ch_axis
    return M.fake_quantize_per_channel_affine(x, self.scale, self.zero_point, axis,
                                              self.quant_min, self.quant_max)
  end
  return fake_quant(x, self.scale:to(x.dtype), self.zero_point:to(x.dtype), self.quant_min, self.quant_max)
end

--- scale, zero_point as an observer's calculate_qparams gives them.
function FakeQuantize:calculate_qparams(who) return self.activation_post_process:calculate_qparams(who) end

function FakeQuantize:extra_repr()
  return ('dtype=%s, qscheme=%s, quant_min=%d, quant_max=%d'):format(
    self.dtype.name, self.qscheme, self.quant_min, self.quant_max)
end

--- FakeQuantize.with_args(opts) -> constructor
function FakeQuantize.with_args(cls, opts)
  return function(more)
    local o = {}
    for k, v in pairs(opts or {}) do o[k] = v end
    for k, v in pairs(more or {}) do o[k] = v end
    return cls(o)
  end
end

--- FusedMovingAvgObsFakeQuantize(opts): PyTorch's default QAT fake quantizer,
-- observation and fake quantization in one kernel there; the same
-- arithmetic as FakeQuantize with its default moving-average observer here.
-- @function quantization.FusedMovingAvgObsFakeQuantize
M.FusedMovingAvgObsFakeQuantize = FakeQuantize:subclass('FusedMovingAvgObsFakeQuantize')

--- Applied with model:apply(...): switch fake quantization / observers of every FakeQuantize.
function M.disable_observer(m) if flow.class.isinstance(m, FakeQuantize) then m:disable_observer() end end
function M.enable_observer(m) if flow.class.isinstance(m, FakeQuantize) then m:enable_observer() end end
function M.disable_fake_quant(m) if flow.class.isinstance(m, FakeQuantize) then m:disable_fake_quant() end end
function M.enable_fake_quant(m) if flow.class.isinstance(m, FakeQuantize) then m:enable_fake_quant() end end

-- torch.ao.quantization's named fake quantizers, with its arguments
--- quantization.default_fake_quant(): FakeQuantize of quint8 activations (moving average, 0..255 reduce_range).
M.default_fake_quant = FakeQuantize:with_args({observer = O.MovingAverageMinMaxObserver, quant_min = 0,
                                               quant_max = 255, dtype = Q.quint8, reduce_range = true})
--- quantization.default_weight_fake_quant(): FakeQuantize of int8 weights, per-tensor symmetric.
M.default_weight_fake_quant = FakeQuantize:with_args({observer = O.MovingAverageMinMaxObserver,
  quant_min = -128, quant_max = 127, dtype = Q.qint8, qscheme = 'per_tensor_symmetric'})
--- quantization.default_per_channel_weight_fake_quant(): FakeQuantize of int8 weights, per-channel symmetric.
M.default_per_channel_weight_fake_quant = FakeQuantize:with_args({
  observer = O.MovingAveragePerChannelMinMaxObserver, quant_min = -128, quant_max = 127, dtype = Q.qint8,
  qscheme = 'per_channel_symmetric'})

return M
