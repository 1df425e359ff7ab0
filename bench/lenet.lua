-- bench/lenet.lua -- the LeNet of examples/mnist/train.lua, shared by the
-- benchmarks (train, graph, dist) so that they time the same model.
local flow = require 'oneflow'
local nn, F = flow.nn, flow.nn.functional

local LeNet = nn.Module:subclass('LeNet')
function LeNet:__init()
  nn.Module.__init(self)
  self.conv1 = nn.Conv2d(1, 32, 3, {padding = 1})
  self.conv2 = nn.Conv2d(32, 64, 3, {padding = 1})
  self.fc1 = nn.Linear(64 * 7 * 7, 128)
  self.fc2 = nn.Linear(128, 10)
end
function LeNet:forward(x)
  x = F.max_pool2d(F.relu(self.conv1(x)), 2)
  x = F.max_pool2d(F.relu(self.conv2(x)), 2)
  return self.fc2(F.relu(self.fc1(flow.flatten(x, 2))))
end
return LeNet
