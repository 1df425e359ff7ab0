-- flowvision.models.squeezenet: SqueezeNet 1.0 and 1.1 (torchvision's names
-- and initialisation).
local A = require 'oneflow._args'
local flow = require 'oneflow'

local nn = flow.nn
local M = {}

local Fire = nn.Module:subclass('Fire')
M.Fire = Fire

function Fire:__init(inplanes, squeeze, e1, e3)
  nn.Module.__init(self)
  self.inplanes = inplanes
  self.squeeze = nn.Conv2d(inplanes, squeeze, 1)
  self.squeeze_activation = nn.ReLU()
  self.expand1x1 = nn.Conv2d(squeeze, e1, 1)
  self.expand1x1_activation = nn.ReLU()
  self.expand3x3 = nn.Conv2d(squeeze, e3, 3, {padding = 1})
  self.expand3x3_activation = nn.ReLU()
end

function Fire:forward(x)
  x = self.squeeze_activation(self.squeeze(x))
  return flow.cat({self.expand1x1_activation(self.expand1x1(x)),
                   self.expand3x3_activation(self.expand3x3(x))}, 2)
end
require('oneflow.nn.module').keeps_no_tensors(Fire)   -- its forward keeps no tensor

local function pool() return nn.MaxPool2d(3, {stride = 2, ceil_mode = true}) end

local function features(version)
  if version == '1_0' then
    return nn.Sequential(nn.Conv2d(3, 96, 7, {stride = 2}), nn.ReLU(), pool(),
      Fire(96, 16, 64, 64), Fire(128, 16, 64, 64), Fire(128, 32, 128, 128), pool(),
      Fire(256, 32, 128, 128), Fire(256, 48, 192, 192), Fire(384, 48, 192, 192), Fire(384, 64, 256, 256),
      pool(), Fire(512, 64, 256, 256))
  elseif version == '1_1' then
    return nn.Sequential(nn.Conv2d(3, 64, 3, {stride = 2}), nn.ReLU(), pool(),
      Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), pool(),
      Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), pool(),
      Fire(256, 48, 192, 192), Fire(384, 48, 192, 192), Fire(384, 64, 256, 256), Fire(512, 64, 256, 256))
  end
  error(("SqueezeNet: unsupported version %s: '1_0' or '1_1' expected"):format(tostring(version)), 3)
end

local SqueezeNet = nn.Module:subclass('SqueezeNet')
M.SqueezeNet = SqueezeNet

--- SqueezeNet(version '1_0' | '1_1', {num_classes = 1000, dropout = 0.5})
function SqueezeNet:__init(version, opts)
  nn.Module.__init(self)
  opts = A.check_options('SqueezeNet', opts, {dropout = true, num_classes = true})
  self.num_classes = opts.num_classes or 1000
  self.features = features(version)
  local final_conv = nn.Conv2d(512, self.num_classes, 1)
  self.classifier = nn.Sequential(nn.Dropout(opts.dropout or 0.5), final_conv, nn.ReLU(),
                                  nn.AdaptiveAvgPool2d({1, 1}))
  local init = nn.init
  for _, m in self:named_modules() do
    if m == final_conv then init.normal_(m.weight, 0, 0.01)
    elseif getmetatable(m) == nn.Conv2d then init.kaiming_uniform_(m.weight) end
    if getmetatable(m) == nn.Conv2d and m.bias ~= nil then init.constant_(m.bias, 0) end
  end
end

function SqueezeNet:forward(x)
  return self.classifier(self.features(x)):flatten(2)
end

M.models = {
  squeezenet1_0 = function(opts) return SqueezeNet('1_0', opts) end,
  squeezenet1_1 = function(opts) return SqueezeNet('1_1', opts) end,
}
M.classes = {SqueezeNet = SqueezeNet, Fire = Fire}

return M
