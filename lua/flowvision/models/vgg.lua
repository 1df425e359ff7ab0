-- flowvision.models.vgg: VGG 11/13/16/19 with and without BatchNorm
-- (torchvision's features.N / classifier.N names and initialisation).
local A = require 'oneflow._args'
local flow = require 'oneflow'
local ops = require 'flowvision.models._ops'

local nn = flow.nn
local M = {}

local cfgs = {
  A = {64, 'M', 128, 'M', 256, 256, 'M', 512, 512, 'M', 512, 512, 'M'},
  B = {64, 64, 'M', 128, 128, 'M', 256, 256, 'M', 512, 512, 'M', 512, 512, 'M'},
  D = {64, 64, 'M', 128, 128, 'M', 256, 256, 256, 'M', 512, 512, 512, 'M', 512, 512, 512, 'M'},
  E = {64, 64, 'M', 128, 128, 'M', 256, 256, 256, 256, 'M', 512, 512, 512, 512, 'M', 512, 512, 512, 512, 'M'},
}
M.cfgs = cfgs

--- make_layers(cfg, batch_norm): the convolutional trunk as one Sequential.
function M.make_layers(cfg, batch_norm)
  local layers, cin = {}, 3
  for _, v in ipairs(cfg) do
    if v == 'M' then
      layers[#layers + 1] = nn.MaxPool2d(2, {stride = 2})
    else
      layers[#layers + 1] = nn.Conv2d(cin, v, 3, {padding = 1})
      if batch_norm then layers[#layers + 1] = nn.BatchNorm2d(v) end
      layers[#layers + 1] = nn.ReLU()
      cin = v
    end
  end
  return nn.Sequential(unpack(layers))
end

local VGG = nn.Module:subclass('VGG')
M.VGG = VGG

local function init_weights(self)
  local init = nn.init
  for _, m in self:named_modules() do
    if ops.is_a(m, nn.Conv2d) then
      init.kaiming_normal_(m.weight, {mode = 'fan_out', nonlinearity = 'relu'})
      if m.bias ~= nil then init.constant_(m.bias, 0) end
    elseif ops.is_a(m, nn.BatchNorm2d) then
      init.constant_(m.weight, 1)
      init.constant_(m.bias, 0)
    elseif ops.is_a(m, nn.Linear) then
      init.normal_(m.weight, 0, 0.01)
      init.constant_(m.bias, 0)
    end
  end
end

--- VGG(features, {num_classes = 1000, init_weights = true, dropout = 0.5})
function VGG:__init(features, opts)
  nn.Module.__init(self)
  opts = A.check_options('VGG', opts, {dropout = true, init_weights = true, num_classes = true})
  local p = opts.dropout or 0.5
  self.features = features
  self.avgpool = nn.AdaptiveAvgPool2d({7, 7})
  self.classifier = nn.Sequential(nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(p),
    nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(p), nn.Linear(4096, opts.num_classes or 1000))
  if opts.init_weights ~= false then init_weights(self) end
end

function VGG:forward(x)
  return self.classifier(self.avgpool(self.features(x)):flatten(2))
end

local function builder(cfg, bn)
  return function(opts) return VGG(M.make_layers(cfgs[cfg], bn), opts) end
end

M.models = {
  vgg11 = builder('A', false), vgg11_bn = builder('A', true),
  vgg13 = builder('B', false), vgg13_bn = builder('B', true),
  vgg16 = builder('D', false), vgg16_bn = builder('D', true),
  vgg19 = builder('E', false), vgg19_bn = builder('E', true),
}
M.classes = {VGG = VGG}

return M
