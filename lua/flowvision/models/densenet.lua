-- flowvision.models.densenet: DenseNet 121/161/169/201 with torchvision's
-- names (features.denseblock1.denselayer1.norm1, features.transition1.conv,
-- classifier) and initialisation.
local A = require 'oneflow._args'
local flow = require 'oneflow'
local ops = require 'flowvision.models._ops'

local nn = flow.nn
local F = nn.functional
local M = {}

local DenseLayer = nn.Module:subclass('_DenseLayer')
M.DenseLayer = DenseLayer

function DenseLayer:__init(cin, growth_rate, bn_size, drop_rate)
  nn.Module.__init(self)
  self.norm1 = nn.BatchNorm2d(cin)
  self.relu1 = nn.ReLU()
  self.conv1 = nn.Conv2d(cin, bn_size * growth_rate, 1, {bias = false})
  self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
  self.relu2 = nn.ReLU()
  self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, 3, {padding = 1, bias = false})
  self.drop_rate = drop_rate
end

--- forward(features): features a Lua array of the tensors so far.
-- Its values are freed once read where oneflow.nn.module's rules allow
-- (_ops.frees; the features, the block's, never).
function DenseLayer:forward(features)
  local f = ops.frees(self, features[1])
  local step = ops.step
  local cat = #features == 1 and features[1] or flow.cat(features, 2)
  local x = self.norm1(cat)
  if #features > 1 then ops.free(cat, f, x) end
  x = step(self.conv1, step(self.relu1, x, f), f)
  x = step(self.conv2, step(self.relu2, step(self.norm2, x, f), f), f)
  if self.drop_rate > 0 then
    local d = F.dropout(x, self.drop_rate, self.training)
    ops.free(x, f, d)
    x = d
  end
  return x
end
ops.keeps_no_tensors(DenseLayer)

local DenseBlock = nn.Module:subclass('_DenseBlock')
M.DenseBlock = DenseBlock

function DenseBlock:__init(num_layers, cin, bn_size, growth_rate, drop_rate)
  nn.Module.__init(self)
  self.num_layers = num_layers
  for i = 1, num_layers do
    self:add_module('denselayer' .. i, DenseLayer(cin + (i - 1) * growth_rate, growth_rate, bn_size, drop_rate))
  end
end

function DenseBlock:forward(x)
  local f = ops.frees(self, x)
  local features = {x}
  for i = 1, self.num_layers do
    features[#features + 1] = self['denselayer' .. i](features)
  end
  local out = flow.cat(features, 2)
  for i = 2, #features do ops.free(features[i], f, out) end
  return out
end
ops.keeps_no_tensors(DenseBlock)

local function transition(cin, cout)
  return nn.Sequential({{'norm', nn.BatchNorm2d(cin)}, {'relu', nn.ReLU()},
    {'conv', nn.Conv2d(cin, cout, 1, {bias = false})}, {'pool', nn.AvgPool2d(2, {stride = 2})}})
end

local DenseNet = nn.Module:subclass('DenseNet')
M.DenseNet = DenseNet

local function init_weights(self)
  local init = nn.init
  for _, m in self:named_modules() do
    if ops.is_a(m, nn.Conv2d) then init.kaiming_normal_(m.weight)
    elseif ops.is_a(m, nn.BatchNorm2d) then
      init.constant_(m.weight, 1)
      init.constant_(m.bias, 0)
    elseif ops.is_a(m, nn.Linear) then init.constant_(m.bias, 0) end
  end
end

--- DenseNet({growth_rate = 32, block_config = {6, 12, 24, 16}, num_init_features = 64,
-- bn_size = 4, drop_rate = 0, num_classes = 1000})
function DenseNet:__init(opts)
  nn.Module.__init(self)
  opts = A.check_options('DenseNet', opts, {
    block_config = true, bn_size = true, drop_rate = true, growth_rate = true, num_classes = true,
    num_init_features = true})
  local growth, cfg = opts.growth_rate or 32, opts.block_config or {6, 12, 24, 16}
  local nf, bn_size = opts.num_init_features or 64, opts.bn_size or 4
  local layers = {{'conv0', nn.Conv2d(3, nf, 7, {stride = 2, padding = 3, bias = false})},
    {'norm0', nn.BatchNorm2d(nf)}, {'relu0', nn.ReLU()}, {'pool0', nn.MaxPool2d(3, {stride = 2, padding = 1})}}
  for i, n in ipairs(cfg) do
    layers[#layers + 1] = {'denseblock' .. i, DenseBlock(n, nf, bn_size, growth, opts.drop_rate or 0)}
    nf = nf + n * growth
    if i ~= #cfg then
      layers[#layers + 1] = {'transition' .. i, transition(nf, math.floor(nf / 2))}
      nf = math.floor(nf / 2)
    end
  end
  layers[#layers + 1] = {'norm5', nn.BatchNorm2d(nf)}
  self.features = nn.Sequential(layers)
  self.classifier = nn.Linear(nf, opts.num_classes or 1000)
  init_weights(self)
end

function DenseNet:forward(x)
  local f = ops.frees(self, x)
  local feat = self.features(x)
  local out = F.relu(feat)
  ops.free(feat, f, out)
  local pooled = F.adaptive_avg_pool2d(out, {1, 1})
  ops.free(out, f, pooled)
  local flat = pooled:flatten(2)
  ops.free(pooled, f, flat)
  return ops.step(self.classifier, flat, f)
end
ops.keeps_no_tensors(DenseNet)

local function builder(growth, cfg, nf)
  return function(opts)
    local o = {growth_rate = growth, block_config = cfg, num_init_features = nf}
    for k, v in pairs(opts or {}) do o[k] = v end
    return DenseNet(o)
  end
end

M.models = {
  densenet121 = builder(32, {6, 12, 24, 16}, 64),
  densenet161 = builder(48, {6, 12, 36, 24}, 96),
  densenet169 = builder(32, {6, 12, 32, 32}, 64),
  densenet201 = builder(32, {6, 12, 48, 32}, 64),
}
M.classes = {DenseNet = DenseNet}

return M
