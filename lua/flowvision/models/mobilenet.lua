-- flowvision.models.mobilenet: MobileNet V2 and V3 (large, small) with
-- torchvision's names (features.N.conv / features.N.block, classifier) and
-- initialisation.
local A = require 'oneflow._args'
local flow = require 'oneflow'
local ops = require 'flowvision.models._ops'

local nn = flow.nn
local F = nn.functional
local CNA, make_divisible = ops.Conv2dNormActivation, ops.make_divisible
local M = {}

local function linear_normal(w) nn.init.normal_(w, 0, 0.01) end

------------------------------------------------------------------ V2
local InvertedResidualV2 = nn.Module:subclass('InvertedResidual')
M.InvertedResidualV2 = InvertedResidualV2

function InvertedResidualV2:__init(inp, oup, stride, expand_ratio, norm)
  nn.Module.__init(self)
  if stride ~= 1 and stride ~= 2 then error('InvertedResidual: stride should be 1 or 2, got ' .. stride, 3) end
  self.stride = stride
  local hidden = math.floor(inp * expand_ratio + 0.5)
  self.use_res_connect = stride == 1 and inp == oup
  local relu6 = ops.act(nn.ReLU6, true)   -- in place, as torchvision's
  local layers = {}
  if expand_ratio ~= 1 then
    layers[#layers + 1] = CNA(inp, hidden, {kernel_size = 1, norm_layer = norm, activation_layer = relu6})
  end
  layers[#layers + 1] = CNA(hidden, hidden, {stride = stride, groups = hidden, norm_layer = norm,
                                             activation_layer = relu6})
  layers[#layers + 1] = nn.Conv2d(hidden, oup, 1, {bias = false})
  layers[#layers + 1] = norm(oup)
  self.conv = nn.Sequential(unpack(layers))
  self.out_channels = oup
end

-- With oneflow.nn.module's rules (no gradient, nothing traced, plain
-- children) the residual is added into the block's own value (the same
-- bits as x + y), and the values made are freed once read; never x.
function InvertedResidualV2:forward(x)
  if not self.use_res_connect then return self.conv(x) end
  return ops.residual(x, self.conv(x), ops.frees(self, x))
end
ops.keeps_no_tensors(InvertedResidualV2)

local MobileNetV2 = nn.Module:subclass('MobileNetV2')
M.MobileNetV2 = MobileNetV2

local v2_setting = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2}, {6, 96, 3, 1},
                    {6, 160, 3, 2}, {6, 320, 1, 1}}

--- MobileNetV2({num_classes = 1000, width_mult = 1, inverted_residual_setting,
-- round_nearest = 8, norm_layer, dropout = 0.2})
function MobileNetV2:__init(opts)
  nn.Module.__init(self)
  opts = A.check_options('MobileNetV2', opts, {
    dropout = true, inverted_residual_setting = true, norm_layer = true, num_classes = true,
    round_nearest = true, width_mult = true})
  local norm, wm, rn = opts.norm_layer or ops.batch_norm(), opts.width_mult or 1, opts.round_nearest or 8
  local setting = opts.inverted_residual_setting or v2_setting
  if #setting == 0 or #setting[1] ~= 4 then
    error('MobileNetV2: inverted_residual_setting should be a non-empty list of 4-element lists', 2)
  end
  local cin = make_divisible(32 * wm, rn)
  self.last_channel = make_divisible(1280 * math.max(1, wm), rn)
  local relu6 = ops.act(nn.ReLU6, true)   -- in place, as torchvision's
  local features = {CNA(3, cin, {stride = 2, norm_layer = norm, activation_layer = relu6})}
  for _, s in ipairs(setting) do
    local t, c, n, st = unpack(s)
    local cout = make_divisible(c * wm, rn)
    for i = 1, n do
      features[#features + 1] = InvertedResidualV2(cin, cout, i == 1 and st or 1, t, norm)
      cin = cout
    end
  end
  features[#features + 1] = CNA(cin, self.last_channel, {kernel_size = 1, norm_layer = norm,
                                                         activation_layer = relu6})
  self.features = nn.Sequential(unpack(features))
  self.classifier = nn.Sequential(nn.Dropout(opts.dropout or 0.2),
                                  nn.Linear(self.last_channel, opts.num_classes or 1000))
  ops.init_conv_bn_linear(self, linear_normal)
end

function MobileNetV2:forward(x)
  local f = ops.frees(self, x)
  local y = self.features(x)
  local pooled = F.adaptive_avg_pool2d(y, {1, 1})
  ops.free(y, f, pooled)
  local flat = pooled:flatten(2)
  ops.free(pooled, f, flat)
  return ops.step(self.classifier, flat, f)
end
ops.keeps_no_tensors(MobileNetV2)

------------------------------------------------------------------ V3
--- One inverted-residual block's settings (torchvision's InvertedResidualConfig).
function M.bneck_conf(cin, kernel, expanded, cout, use_se, activation, stride, dilation, width_mult)
  local adj = function(c) return make_divisible(c * (width_mult or 1), 8) end
  return {input_channels = adj(cin), kernel = kernel, expanded_channels = adj(expanded),
          out_channels = adj(cout), use_se = use_se, use_hs = activation == 'HS', stride = stride,
          dilation = dilation}
end

local InvertedResidualV3 = nn.Module:subclass('InvertedResidual')
M.InvertedResidualV3 = InvertedResidualV3

local function se_layer(c, squeeze)
  return ops.SqueezeExcitation(c, squeeze, {scale_activation = ops.act(nn.Hardsigmoid)})
end

function InvertedResidualV3:__init(cnf, norm)
  nn.Module.__init(self)
  if cnf.stride < 1 or cnf.stride > 2 then error('InvertedResidual: illegal stride value', 3) end
  self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
  local act = ops.act(cnf.use_hs and nn.Hardswish or nn.ReLU)
  local exp, layers = cnf.expanded_channels, {}
  if exp ~= cnf.input_channels then
    layers[#layers + 1] = CNA(cnf.input_channels, exp, {kernel_size = 1, norm_layer = norm, activation_layer = act})
  end
  layers[#layers + 1] = CNA(exp, exp, {kernel_size = cnf.kernel, stride = cnf.dilation > 1 and 1 or cnf.stride,
    dilation = cnf.dilation, groups = exp, norm_layer = norm, activation_layer = act})
  if cnf.use_se then layers[#layers + 1] = se_layer(exp, make_divisible(math.floor(exp / 4), 8)) end
  layers[#layers + 1] = CNA(exp, cnf.out_channels, {kernel_size = 1, norm_layer = norm, activation_layer = false})
  self.block = nn.Sequential(unpack(layers))
  self.out_channels = cnf.out_channels
end

function InvertedResidualV3:forward(x)
  local y = self.block(x)
  if not self.use_res_connect then return y end
  return ops.residual(x, y, ops.frees(self, x))
end
ops.keeps_no_tensors(InvertedResidualV3)

local MobileNetV3 = nn.Module:subclass('MobileNetV3')
M.MobileNetV3 = MobileNetV3

--- MobileNetV3(inverted_residual_setting, last_channel, {num_classes = 1000,
-- norm_layer = BatchNorm2d(eps 1e-3, momentum 0.01), dropout = 0.2})
function MobileNetV3:__init(setting, last_channel, opts)
  nn.Module.__init(self)
  opts = A.check_options('MobileNetV3', opts, {dropout = true, norm_layer = true, num_classes = true})
  if #setting == 0 then error('MobileNetV3: the inverted_residual_setting should not be empty', 2) end
  local norm = opts.norm_layer or ops.batch_norm({eps = 0.001, momentum = 0.01})
  local hs = ops.act(nn.Hardswish)
  local layers = {CNA(3, setting[1].input_channels, {stride = 2, norm_layer = norm, activation_layer = hs})}
  for _, cnf in ipairs(setting) do layers[#layers + 1] = InvertedResidualV3(cnf, norm) end
  local last_in = setting[#setting].out_channels
  local last_out = 6 * last_in
  layers[#layers + 1] = CNA(last_in, last_out, {kernel_size = 1, norm_layer = norm, activation_layer = hs})
  self.features = nn.Sequential(unpack(layers))
  self.avgpool = nn.AdaptiveAvgPool2d(1)
  self.classifier = nn.Sequential(nn.Linear(last_out, last_channel), nn.Hardswish(),
    nn.Dropout(opts.dropout or 0.2), nn.Linear(last_channel, opts.num_classes or 1000))
  ops.init_conv_bn_linear(self, linear_normal)
end

function MobileNetV3:forward(x)
  local f = ops.frees(self, x)
  local pooled = ops.step(self.avgpool, self.features(x), f)
  local flat = pooled:flatten(2)
  ops.free(pooled, f, flat)
  return ops.step(self.classifier, flat, f)
end
ops.keeps_no_tensors(MobileNetV3)

--- The block settings and last channel of 'mobilenet_v3_large' / 'mobilenet_v3_small'
-- ({width_mult = 1, reduced_tail = false, dilated = false}).
function M.mobilenet_v3_conf(arch, o)
  o = o or {}
  local rd, dil, wm = o.reduced_tail and 2 or 1, o.dilated and 2 or 1, o.width_mult or 1
  local function b(...)
    local a = {...}
    return M.bneck_conf(a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], wm)
  end
  if arch == 'mobilenet_v3_large' then
    return {b(16, 3, 16, 16, false, 'RE', 1, 1), b(16, 3, 64, 24, false, 'RE', 2, 1),
      b(24, 3, 72, 24, false, 'RE', 1, 1), b(24, 5, 72, 40, true, 'RE', 2, 1), b(40, 5, 120, 40, true, 'RE', 1, 1),
      b(40, 5, 120, 40, true, 'RE', 1, 1), b(40, 3, 240, 80, false, 'HS', 2, 1),
      b(80, 3, 200, 80, false, 'HS', 1, 1), b(80, 3, 184, 80, false, 'HS', 1, 1),
      b(80, 3, 184, 80, false, 'HS', 1, 1), b(80, 3, 480, 112, true, 'HS', 1, 1),
      b(112, 3, 672, 112, true, 'HS', 1, 1), b(112, 5, 672, 160 / rd, true, 'HS', 2, dil),
      b(160 / rd, 5, 960 / rd, 160 / rd, true, 'HS', 1, dil), b(160 / rd, 5, 960 / rd, 160 / rd, true, 'HS', 1, dil)},
      make_divisible(math.floor(1280 / rd) * wm, 8)
  elseif arch == 'mobilenet_v3_small' then
    return {b(16, 3, 16, 16, true, 'RE', 2, 1), b(16, 3, 72, 24, false, 'RE', 2, 1),
      b(24, 3, 88, 24, false, 'RE', 1, 1), b(24, 5, 96, 40, true, 'HS', 2, 1), b(40, 5, 240, 40, true, 'HS', 1, 1),
      b(40, 5, 240, 40, true, 'HS', 1, 1), b(40, 5, 120, 48, true, 'HS', 1, 1), b(48, 5, 144, 48, true, 'HS', 1, 1),
      b(48, 5, 288, 96 / rd, true, 'HS', 2, dil), b(96 / rd, 5, 576 / rd, 96 / rd, true, 'HS', 1, dil),
      b(96 / rd, 5, 576 / rd, 96 / rd, true, 'HS', 1, dil)},
      make_divisible(math.floor(1024 / rd) * wm, 8)
  end
  error('MobileNetV3: unsupported model type ' .. tostring(arch), 2)
end

local function v3(arch)
  return function(opts)
    local setting, last = M.mobilenet_v3_conf(arch, opts)
    return MobileNetV3(setting, last, opts)
  end
end

M.models = {
  mobilenet_v2 = function(opts) return MobileNetV2(opts) end,
  mobilenet_v3_large = v3('mobilenet_v3_large'),
  mobilenet_v3_small = v3('mobilenet_v3_small'),
}
M.classes = {MobileNetV2 = MobileNetV2, MobileNetV3 = MobileNetV3}

return M
