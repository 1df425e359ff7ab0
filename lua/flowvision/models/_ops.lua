-- flowvision.models._ops: building blocks shared by the model files, with
-- torchvision's names (so state-dict keys match): Conv2dNormActivation,
-- SqueezeExcitation, StochasticDepth, LayerNorm2d, Permute, plus
-- make_divisible, norm-layer factories and the init helpers.
local A = require 'oneflow._args'
local flow = require 'oneflow'
local conv_bn_into = require('oneflow.nn.normalization').conv_bn_into
local module = require 'oneflow.nn.module'

local nn = flow.nn
local F = nn.functional
local M = {}

------------------------------------------------------------------ helpers
--- torchvision's _make_divisible: v rounded to a multiple of divisor,
-- never below min_value (default divisor) nor more than 10% below v.
function M.make_divisible(v, divisor, min_value)
  min_value = min_value or divisor
  local t = math.floor(v + divisor / 2)
  local new_v = math.max(min_value, t - t % divisor)
  if new_v < 0.9 * v then new_v = new_v + divisor end
  return new_v
end

--- Is module m an instance of class cls (or of a subclass)?
function M.is_a(m, cls)
  local c = getmetatable(m)
  while c do
    if c == cls then return true end
    c = rawget(c, 'super')
  end
  return false
end

--- A BatchNorm2d factory: bn{eps = 1e-3, momentum = 0.01}(channels).
function M.batch_norm(opts)
  opts = A.check_options('batch_norm', opts, {eps = true, momentum = true})
  return function(c) return nn.BatchNorm2d(c, {eps = opts.eps or 1e-5, momentum = opts.momentum or 0.1}) end
end

--- A factory of activation modules: act(nn.ReLU6)(); act(nn.ReLU6, true)
-- makes them in place, as torchvision's Conv2dNormActivation does.
function M.act(cls, inplace)
  if inplace then return function() return cls({inplace = true}) end end
  return function() return cls() end
end

--- fn(m) for every module of the tree that is an instance of cls.
function M.each(model, cls, fn)
  for _, m in model:named_modules() do
    if M.is_a(m, cls) then fn(m) end
  end
end

--- The "kaiming_normal_ fan_out for convs, BN 1/0, Linear normal(0, std)"
-- initialisation shared by MobileNet and EfficientNet-like models;
-- linear_init(w) initialises Linear weights (biases become zero).
--- bn(conv(x)), the norm written into the conv's fresh output where
-- oneflow.nn.normalization.conv_bn_into allows (eval, nothing to record, no
-- hooks): what nn.Sequential does for its conv + norm pairs. f: the
-- caller's oneflow.nn.module frees(self, x), under which the conv's output
-- is freed when bn made a new tensor of it.
function M.conv_bn(conv, bn, x, f)
  local y = conv(x)
  if conv_bn_into(conv, bn, y) > 0 then return y end
  local z = bn(y)
  module.free(y, f, z)
  return z
end

-- The values a block's forward makes, freed once read where
-- oneflow.nn.module's rules allow: f = frees(self, x) says whether they do,
-- free(t, f[, keep]) releases t (never x, nor keep), step(m, v, f) is m(v)
-- then v freed, residual(x, branch, f) is x + branch.
M.frees, M.free, M.step = module.frees, module.free, module.step
M.keeps_no_tensors, M.residual = module.keeps_no_tensors, module.residual

function M.init_conv_bn_linear(model, linear_init)
  local init = nn.init
  for _, m in model:named_modules() do
    if M.is_a(m, nn.Conv2d) then
      init.kaiming_normal_(m.weight, {mode = 'fan_out'})
      if m.bias ~= nil then init.zeros_(m.bias) end
    elseif M.is_a(m, nn.BatchNorm2d) or M.is_a(m, nn.GroupNorm) then
      init.ones_(m.weight)
      init.zeros_(m.bias)
    elseif M.is_a(m, nn.Linear) then
      linear_init(m.weight)
      init.zeros_(m.bias)
    end
  end
end

------------------------------------------------------------------ Conv2dNormActivation
local CNA = nn.Sequential:subclass('Conv2dNormActivation')
M.Conv2dNormActivation = CNA

local function default_padding(k, d)
  if type(k) == 'number' then return math.floor((k - 1) / 2) * d end
  local p = {}
  for i = 1, #k do p[i] = math.floor((k[i] - 1) / 2) * (type(d) == 'table' and d[i] or d) end
  return p
end

--- Conv2dNormActivation(in, out, {kernel_size = 3, stride = 1, padding = auto,
-- groups = 1, dilation = 1, bias = (no norm), norm_layer = BatchNorm2d factory
-- or false, activation_layer = ReLU factory or false}): Sequential of conv,
-- norm, activation (keys 0, 1, 2 as torchvision's).
function CNA:__init(cin, cout, opts)
  opts = A.check_options('Conv2dNormActivation', opts, {
    activation_layer = true, bias = true, dilation = true, groups = true, kernel_size = true,
    norm_layer = true, padding = true, stride = true})
  local k, d = opts.kernel_size or 3, opts.dilation or 1
  local norm = opts.norm_layer
  if norm == nil then norm = M.batch_norm() end
  local act = opts.activation_layer
  if act == nil then act = M.act(nn.ReLU) end
  local bias = opts.bias
  if bias == nil then bias = not norm end
  local layers = {nn.Conv2d(cin, cout, k, {stride = opts.stride or 1,
    padding = opts.padding or default_padding(k, d), dilation = d, groups = opts.groups or 1, bias = bias})}
  if norm then layers[#layers + 1] = norm(cout) end
  if act then layers[#layers + 1] = act() end
  nn.Sequential.__init(self, unpack(layers))
  self.out_channels = cout
end
module.keeps_no_tensors(CNA)   -- Sequential's forward (oneflow.nn.module's rule)

------------------------------------------------------------------ SqueezeExcitation
local SE = nn.Module:subclass('SqueezeExcitation')
M.SqueezeExcitation = SE

--- SqueezeExcitation(channels, squeeze_channels, {activation = ReLU factory,
-- scale_activation = Sigmoid factory}): x * scale(fc2(act(fc1(avgpool(x))))).
function SE:__init(cin, squeeze, opts)
  nn.Module.__init(self)
  opts = A.check_options('SqueezeExcitation', opts, {activation = true, scale_activation = true})
  self.avgpool = nn.AdaptiveAvgPool2d(1)
  self.fc1 = nn.Conv2d(cin, squeeze, 1)
  self.fc2 = nn.Conv2d(squeeze, cin, 1)
  self.activation = (opts.activation or M.act(nn.ReLU))()
  self.scale_activation = (opts.scale_activation or M.act(nn.Sigmoid))()
end

function SE:forward(x)
  local f = M.frees(self, x)
  local step = M.step
  local h = step(self.activation, step(self.fc1, self.avgpool(x), f), f)
  local s = step(self.scale_activation, step(self.fc2, h, f), f)
  local y = s * x
  M.free(s, f, y)
  return y
end
M.keeps_no_tensors(SE)

------------------------------------------------------------------ StochasticDepth
--- stochastic_depth(x, p, mode, training): torchvision.ops.stochastic_depth;
-- mode 'row' drops whole samples, 'batch' the whole batch.
function M.stochastic_depth(x, p, mode, training)
  if p < 0 or p > 1 then error(('stochastic_depth: p must be in [0, 1], got %s'):format(p), 2) end
  if mode ~= 'row' and mode ~= 'batch' then
    error(("stochastic_depth: mode must be 'row' or 'batch', got %s"):format(tostring(mode)), 2)
  end
  if not training or p == 0 then return x end
  local size = {}
  for i = 1, x:dim() do size[i] = 1 end
  if mode == 'row' then size[1] = x:size(1) end
  local survival = 1 - p
  local noise = flow.empty(size, {dtype = x.dtype}):bernoulli_(survival)
  if survival > 0 then noise = noise / survival end
  return x * noise
end

local SD = nn.Module:subclass('StochasticDepth')
M.StochasticDepth = SD

function SD:__init(p, mode)
  nn.Module.__init(self)
  self.p, self.mode = p, mode
end
function SD:forward(x) return M.stochastic_depth(x, self.p, self.mode, self.training) end
M.keeps_no_tensors(SD)
function SD:extra_repr() return ('p=%s, mode=%s'):format(self.p, self.mode) end

------------------------------------------------------------------ LayerNorm2d, Permute
local LN2d = nn.LayerNorm:subclass('LayerNorm2d')
M.LayerNorm2d = LN2d

--- LayerNorm over the channels of an NCHW tensor (ConvNeXt).
function LN2d:forward(x)
  x = x:permute(1, 3, 4, 2)
  x = F.layer_norm(x, self.normalized_shape, {weight = self.weight, bias = self.bias, eps = self.eps})
  return x:permute(1, 4, 2, 3)
end
M.keeps_no_tensors(LN2d)

local Permute = nn.Module:subclass('Permute')
M.Permute = Permute

--- Permute({1, 3, 4, 2}): x:permute(dims) (1-based dims).
function Permute:__init(dims)
  nn.Module.__init(self)
  self.dims = dims
end
function Permute:forward(x) return x:permute(unpack(self.dims)) end
M.keeps_no_tensors(Permute)

return M
