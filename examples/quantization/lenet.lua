-- The Fashion-MNIST LeNet of examples/mnist/train.lua, written with modules
-- (ReLUs, pools) and quantization stubs so that flow.quantization can fuse,
-- observe and convert it. Its state-dict keys are train.lua's (conv1, conv2,
-- fc1, fc2), so a checkpoint of either loads into the other.
local flow = require 'oneflow'
local nn, Qz = flow.nn, flow.quantization

local QLeNet = nn.Module:subclass('QLeNet')

function QLeNet:__init(width)
  nn.Module.__init(self)
  width = width or {32, 64, 128}
  self.quant = Qz.QuantStub()
  self.conv1 = nn.Conv2d(1, width[1], 3, {padding = 1})
  self.relu1 = nn.ReLU()
  self.pool1 = nn.MaxPool2d(2)
  self.conv2 = nn.Conv2d(width[1], width[2], 3, {padding = 1})
  self.relu2 = nn.ReLU()
  self.pool2 = nn.MaxPool2d(2)
  self.flatten = nn.Flatten()
  self.fc1 = nn.Linear(width[2] * 7 * 7, width[3])
  self.relu3 = nn.ReLU()
  self.fc2 = nn.Linear(width[3], 10)
  self.dequant = Qz.DeQuantStub()
end

function QLeNet:forward(x)
  x = self.pool1(self.relu1(self.conv1(self.quant(x))))
  x = self.pool2(self.relu2(self.conv2(x)))
  x = self.relu3(self.fc1(self.flatten(x)))
  return self.dequant(self.fc2(x))
end

-- the Conv+ReLU and Linear+ReLU pairs fuse_modules takes
QLeNet.fusable = {{'conv1', 'relu1'}, {'conv2', 'relu2'}, {'fc1', 'relu3'}}
-- the channel chains prune_channels shrinks
QLeNet.prunable = {{'conv1', 'conv2'}, {'conv2', 'fc1'}}

return QLeNet
