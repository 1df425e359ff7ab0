-- bench/resnet.lua -- the ResNet-18 (BasicBlock, torchvision's layout) that the
-- training benchmarks time (bench/train.lua, bench/ab_step.lua).
local flow = require 'oneflow'
local nn, F = flow.nn, flow.nn.functional

local BasicBlock = nn.Module:subclass('BasicBlock')
function BasicBlock:__init(cin, cout, stride)
  nn.Module.__init(self)
  self.conv1 = nn.Conv2d(cin, cout, 3, {stride = stride, padding = 1, bias = false})
  self.bn1 = nn.BatchNorm2d(cout)
  self.conv2 = nn.Conv2d(cout, cout, 3, {padding = 1, bias = false})
  self.bn2 = nn.BatchNorm2d(cout)
  if stride ~= 1 or cin ~= cout then
    self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, {stride = stride, bias = false}),
                                    nn.BatchNorm2d(cout))
  end
end
function BasicBlock:forward(x)
  local out = F.relu(self.bn1(self.conv1(x)))
  out = self.bn2(self.conv2(out))
  local identity = self.downsample and self.downsample(x) or x
  return F.relu(out + identity)
end

local ResNet18 = nn.Module:subclass('ResNet18')
function ResNet18:__init(num_classes)
  nn.Module.__init(self)
  self.conv1 = nn.Conv2d(3, 64, 7, {stride = 2, padding = 3, bias = false})
  self.bn1 = nn.BatchNorm2d(64)
  local cin = 64
  for i, cout in ipairs({64, 128, 256, 512}) do
    local stride = i == 1 and 1 or 2
    self['layer' .. i] = nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1))
    cin = cout
  end
  self.fc = nn.Linear(512, num_classes)
end
function ResNet18:forward(x)
  x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, {stride = 2, padding = 1})
  x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
  return self.fc(flow.flatten(F.adaptive_avg_pool2d(x, 1), 2))
end
return ResNet18
