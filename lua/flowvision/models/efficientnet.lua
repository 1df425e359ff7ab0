-- flowvision.models.efficientnet: EfficientNet B0-B7 and V2 S/M/L in
-- torchvision's layout (features.N.M.block.K, stochastic depth per block,
-- classifier.1) and initialisation.
local A = require 'oneflow._args'
local flow = require 'oneflow'
local ops = require 'flowvision.models._ops'

local nn = flow.nn
local CNA, make_divisible = ops.Conv2dNormActivation, ops.make_divisible
local M = {}

local function adjust_channels(c, width_mult, min_value)
  return make_divisible(c * width_mult, 8, min_value)
end

--- An MBConv stage setting: expand_ratio, kernel, stride, input/out channels,
-- num_layers, scaled by width_mult / depth_mult (torchvision's MBConvConfig).
function M.mbconv_conf(expand, kernel, stride, cin, cout, n, width_mult, depth_mult)
  width_mult, depth_mult = width_mult or 1, depth_mult or 1
  return {expand_ratio = expand, kernel = kernel, stride = stride, input_channels = adjust_channels(cin, width_mult),
          out_channels = adjust_channels(cout, width_mult), num_layers = math.ceil(n * depth_mult),
          block = 'MBConv'}
end

--- A FusedMBConv stage setting (EfficientNet V2), unscaled.
function M.fused_conf(expand, kernel, stride, cin, cout, n)
  return {expand_ratio = expand, kernel = kernel, stride = stride, input_channels = cin, out_channels = cout,
          num_layers = n, block = 'FusedMBConv'}
end

local silu = ops.act(nn.SiLU)

------------------------------------------------------------------ blocks
local MBConv = nn.Module:subclass('MBConv')
M.MBConv = MBConv

function MBConv:__init(cnf, sd_prob, norm)
  nn.Module.__init(self)
  if cnf.stride < 1 or cnf.stride > 2 then error('MBConv: illegal stride value', 3) end
  self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
  local exp = adjust_channels(cnf.input_channels, cnf.expand_ratio)
  local layers = {}
  if exp ~= cnf.input_channels then
    layers[#layers + 1] = CNA(cnf.input_channels, exp, {kernel_size = 1, norm_layer = norm, activation_layer = silu})
  end
  layers[#layers + 1] = CNA(exp, exp, {kernel_size = cnf.kernel, stride = cnf.stride, groups = exp,
                                       norm_layer = norm, activation_layer = silu})
  local squeeze = math.max(1, math.floor(cnf.input_channels / 4))
  layers[#layers + 1] = ops.SqueezeExcitation(exp, squeeze, {activation = silu})
  layers[#layers + 1] = CNA(exp, cnf.out_channels, {kernel_size = 1, norm_layer = norm, activation_layer = false})
  self.block = nn.Sequential(unpack(layers))
  self.stochastic_depth = ops.StochasticDepth(sd_prob, 'row')
  self.out_channels = cnf.out_channels
end

-- values freed once read where oneflow.nn.module's rules allow (_ops.frees)
local function residual_forward(self, x)
  local f = ops.frees(self, x)
  local y = self.block(x)
  if not self.use_res_connect then return y end
  return ops.residual(x, ops.step(self.stochastic_depth, y, f), f)
end
MBConv.forward = residual_forward
ops.keeps_no_tensors(MBConv)

local FusedMBConv = nn.Module:subclass('FusedMBConv')
M.FusedMBConv = FusedMBConv

function FusedMBConv:__init(cnf, sd_prob, norm)
  nn.Module.__init(self)
  if cnf.stride < 1 or cnf.stride > 2 then error('FusedMBConv: illegal stride value', 3) end
  self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
  local exp = adjust_channels(cnf.input_channels, cnf.expand_ratio)
  local layers = {}
  if exp ~= cnf.input_channels then
    layers[1] = CNA(cnf.input_channels, exp, {kernel_size = cnf.kernel, stride = cnf.stride, norm_layer = norm,
                                              activation_layer = silu})
    layers[2] = CNA(exp, cnf.out_channels, {kernel_size = 1, norm_layer = norm, activation_layer = false})
  else
    layers[1] = CNA(cnf.input_channels, cnf.out_channels, {kernel_size = cnf.kernel, stride = cnf.stride,
                                                           norm_layer = norm, activation_layer = silu})
  end
  self.block = nn.Sequential(unpack(layers))
  self.stochastic_depth = ops.StochasticDepth(sd_prob, 'row')
  self.out_channels = cnf.out_channels
end
FusedMBConv.forward = residual_forward
ops.keeps_no_tensors(FusedMBConv)

------------------------------------------------------------------ EfficientNet
local EfficientNet = nn.Module:subclass('EfficientNet')
M.EfficientNet = EfficientNet
local blocks = {MBConv = MBConv, FusedMBConv = FusedMBConv}

local function linear_uniform(w)
  local r = 1 / math.sqrt(w:size(1))
  nn.init.uniform_(w, -r, r)
end

local function stages(setting, sd, norm)
  local total, id, layers = 0, 0, {}
  for _, cnf in ipairs(setting) do total = total + cnf.num_layers end
  for _, cnf in ipairs(setting) do
    local stage = {}
    for i = 1, cnf.num_layers do
      local c = {}
      for k, v in pairs(cnf) do c[k] = v end
      if i > 1 then c.input_channels, c.stride = c.out_channels, 1 end
      stage[i] = blocks[c.block](c, sd * id / total, norm)
      id = id + 1
    end
    layers[#layers + 1] = nn.Sequential(unpack(stage))
  end
  return layers
end

--- EfficientNet(inverted_residual_setting, dropout, {stochastic_depth_prob = 0.2,
-- num_classes = 1000, norm_layer = BatchNorm2d factory, last_channel})
function EfficientNet:__init(setting, dropout, opts)
  nn.Module.__init(self)
  opts = A.check_options('EfficientNet', opts, {
    last_channel = true, norm_layer = true, num_classes = true, stochastic_depth_prob = true})
  if #setting == 0 then error('EfficientNet: the inverted_residual_setting should not be empty', 2) end
  local norm = opts.norm_layer or ops.batch_norm()
  local layers = {CNA(3, setting[1].input_channels, {stride = 2, norm_layer = norm, activation_layer = silu})}
  for _, s in ipairs(stages(setting, opts.stochastic_depth_prob or 0.2, norm)) do layers[#layers + 1] = s end
  local last_in = setting[#setting].out_channels
  local last_out = opts.last_channel or 4 * last_in
  layers[#layers + 1] = CNA(last_in, last_out, {kernel_size = 1, norm_layer = norm, activation_layer = silu})
  self.features = nn.Sequential(unpack(layers))
  self.avgpool = nn.AdaptiveAvgPool2d(1)
  self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last_out, opts.num_classes or 1000))
  ops.init_conv_bn_linear(self, linear_uniform)
end

function EfficientNet:forward(x)
  return self.classifier(self.avgpool(self.features(x)):flatten(2))
end

------------------------------------------------------------------ configurations
local function b_setting(wm, dm)
  local c = function(...)
    local a = {...}
    return M.mbconv_conf(a[1], a[2], a[3], a[4], a[5], a[6], wm, dm)
  end
  return {c(1, 3, 1, 32, 16, 1), c(6, 3, 2, 16, 24, 2), c(6, 5, 2, 24, 40, 2), c(6, 3, 2, 40, 80, 3),
          c(6, 5, 1, 80, 112, 3), c(6, 5, 2, 112, 192, 4), c(6, 3, 1, 192, 320, 1)}
end

local f, m = M.fused_conf, M.mbconv_conf
local v2_settings = {
  s = {f(1, 3, 1, 24, 24, 2), f(4, 3, 2, 24, 48, 4), f(4, 3, 2, 48, 64, 4), m(4, 3, 2, 64, 128, 6),
       m(6, 3, 1, 128, 160, 9), m(6, 3, 2, 160, 256, 15)},
  m = {f(1, 3, 1, 24, 24, 3), f(4, 3, 2, 24, 48, 5), f(4, 3, 2, 48, 80, 5), m(4, 3, 2, 80, 160, 7),
       m(6, 3, 1, 160, 176, 14), m(6, 3, 2, 176, 304, 18), m(6, 3, 1, 304, 512, 5)},
  l = {f(1, 3, 1, 32, 32, 4), f(4, 3, 2, 32, 64, 7), f(4, 3, 2, 64, 96, 7), m(4, 3, 2, 96, 192, 10),
       m(6, 3, 1, 192, 224, 19), m(6, 3, 2, 224, 384, 25), m(6, 3, 1, 384, 640, 7)},
}

local function merged(opts, extra)
  local o = {}
  for k, v in pairs(extra) do o[k] = v end
  for k, v in pairs(opts or {}) do o[k] = v end
  return o
end

-- {width_mult, depth_mult, dropout, bn eps/momentum override}
local b_params = {
  b0 = {1.0, 1.0, 0.2}, b1 = {1.0, 1.1, 0.2}, b2 = {1.1, 1.2, 0.3}, b3 = {1.2, 1.4, 0.3},
  b4 = {1.4, 1.8, 0.4}, b5 = {1.6, 2.2, 0.4, true}, b6 = {1.8, 2.6, 0.5, true}, b7 = {2.0, 3.1, 0.5, true},
}

M.models = {}
for name, p in pairs(b_params) do
  M.models['efficientnet_' .. name] = function(opts)
    local norm = p[4] and ops.batch_norm({eps = 0.001, momentum = 0.01}) or nil
    return EfficientNet(b_setting(p[1], p[2]), (opts or {}).dropout or p[3], merged(opts, {norm_layer = norm}))
  end
end
for name, dropout in pairs({s = 0.2, m = 0.3, l = 0.4}) do
  M.models['efficientnet_v2_' .. name] = function(opts)
    return EfficientNet(v2_settings[name], (opts or {}).dropout or dropout,
                        merged(opts, {norm_layer = ops.batch_norm({eps = 0.001}), last_channel = 1280}))
  end
end
M.classes = {EfficientNet = EfficientNet, MBConv = MBConv, FusedMBConv = FusedMBConv}

return M
