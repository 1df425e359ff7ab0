-- flowvision.models.alexnet: AlexNet as torchvision defines it (PyTorch's
-- default initialisation).
local A = require 'oneflow._args'
local flow = require 'oneflow'

local nn = flow.nn
local M = {}

local AlexNet = nn.Module:subclass('AlexNet')
M.AlexNet = AlexNet

--- AlexNet({num_classes = 1000, dropout = 0.5})
function AlexNet:__init(opts)
  nn.Module.__init(self)
  opts = A.check_options('AlexNet', opts, {dropout = true, num_classes = true})
  local p = opts.dropout or 0.5
  self.features = nn.Sequential(
    nn.Conv2d(3, 64, 11, {stride = 4, padding = 2}), nn.ReLU(), nn.MaxPool2d(3, {stride = 2}),
    nn.Conv2d(64, 192, 5, {padding = 2}), nn.ReLU(), nn.MaxPool2d(3, {stride = 2}),
    nn.Conv2d(192, 384, 3, {padding = 1}), nn.ReLU(),
    nn.Conv2d(384, 256, 3, {padding = 1}), nn.ReLU(),
    nn.Conv2d(256, 256, 3, {padding = 1}), nn.ReLU(), nn.MaxPool2d(3, {stride = 2}))
  self.avgpool = nn.AdaptiveAvgPool2d({6, 6})
  self.classifier = nn.Sequential(nn.Dropout(p), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(),
    nn.Dropout(p), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, opts.num_classes or 1000))
end

function AlexNet:forward(x)
  return self.classifier(self.avgpool(self.features(x)):flatten(2))
end

M.models = {alexnet = function(opts) return AlexNet(opts) end}
M.classes = {AlexNet = AlexNet}

return M
