-- flowvision.models.shufflenet: ShuffleNetV2 x0.5/x1.0/x1.5/x2.0 (torchvision's
-- names; PyTorch's default initialisation).
local A = require 'oneflow._args'
local flow = require 'oneflow'

local nn = flow.nn
local M = {}

--- channel_shuffle(x, groups) on an NCHW tensor.
function M.channel_shuffle(x, groups)
  local b, c, h, w = x:size(1), x:size(2), x:size(3), x:size(4)
  x = x:view(b, groups, c / groups, h, w):transpose(2, 3):contiguous()
  return x:view(b, c, h, w)
end

local function depthwise(i, o, stride)
  return nn.Conv2d(i, o, 3, {stride = stride, padding = 1, bias = false, groups = i})
end

local function pointwise(i, o) return nn.Conv2d(i, o, 1, {bias = false}) end

local InvertedResidual = nn.Module:subclass('InvertedResidual')
M.InvertedResidual = InvertedResidual

function InvertedResidual:__init(inp, oup, stride)
  nn.Module.__init(self)
  if stride < 1 or stride > 3 then error('InvertedResidual: illegal stride value', 3) end
  self.stride = stride
  local bf = math.floor(oup / 2)
  if stride == 1 and inp ~= bf * 2 then
    error(('InvertedResidual: invalid combination of stride %d, inp %d and oup %d'):format(stride, inp, oup), 3)
  end
  if stride > 1 then
    self.branch1 = nn.Sequential(depthwise(inp, inp, stride), nn.BatchNorm2d(inp),
      pointwise(inp, bf), nn.BatchNorm2d(bf), nn.ReLU())
  else
    self.branch1 = nn.Sequential()
  end
  self.branch2 = nn.Sequential(pointwise(stride > 1 and inp or bf, bf), nn.BatchNorm2d(bf), nn.ReLU(),
    depthwise(bf, bf, stride), nn.BatchNorm2d(bf), pointwise(bf, bf), nn.BatchNorm2d(bf), nn.ReLU())
end

function InvertedResidual:forward(x)
  local out
  if self.stride == 1 then
    local x1, x2 = unpack(x:chunk(2, 2))
    out = flow.cat({x1, self.branch2(x2)}, 2)
  else
    out = flow.cat({self.branch1(x), self.branch2(x)}, 2)
  end
  return M.channel_shuffle(out, 2)
end
require('oneflow.nn.module').keeps_no_tensors(InvertedResidual)   -- its forward keeps no tensor

local ShuffleNetV2 = nn.Module:subclass('ShuffleNetV2')
M.ShuffleNetV2 = ShuffleNetV2

--- ShuffleNetV2(stages_repeats {3 numbers}, stages_out_channels {5 numbers}, {num_classes = 1000})
function ShuffleNetV2:__init(repeats, channels, opts)
  nn.Module.__init(self)
  opts = A.check_options('ShuffleNetV2', opts, {num_classes = true})
  if #repeats ~= 3 then error('ShuffleNetV2: expected stages_repeats as a list of 3 positive ints', 2) end
  if #channels ~= 5 then error('ShuffleNetV2: expected stages_out_channels as a list of 5 positive ints', 2) end
  self._stage_out_channels = channels
  local cin = channels[1]
  self.conv1 = nn.Sequential(nn.Conv2d(3, cin, 3, {stride = 2, padding = 1, bias = false}),
                             nn.BatchNorm2d(cin), nn.ReLU())
  self.maxpool = nn.MaxPool2d(3, {stride = 2, padding = 1})
  for i = 1, 3 do
    local cout = channels[i + 1]
    local seq = {InvertedResidual(cin, cout, 2)}
    for _ = 2, repeats[i] do seq[#seq + 1] = InvertedResidual(cout, cout, 1) end
    self['stage' .. (i + 1)] = nn.Sequential(unpack(seq))
    cin = cout
  end
  local cout = channels[5]
  self.conv5 = nn.Sequential(nn.Conv2d(cin, cout, 1, {bias = false}), nn.BatchNorm2d(cout), nn.ReLU())
  self.fc = nn.Linear(cout, opts.num_classes or 1000)
end

function ShuffleNetV2:forward(x)
  x = self.maxpool(self.conv1(x))
  x = self.conv5(self.stage4(self.stage3(self.stage2(x))))
  return self.fc(x:mean({3, 4}))
end

local function builder(channels)
  return function(opts) return ShuffleNetV2({4, 8, 4}, channels, opts) end
end

M.models = {
  shufflenet_v2_x0_5 = builder({24, 48, 96, 192, 1024}),
  shufflenet_v2_x1_0 = builder({24, 116, 232, 464, 1024}),
  shufflenet_v2_x1_5 = builder({24, 176, 352, 704, 1024}),
  shufflenet_v2_x2_0 = builder({24, 244, 488, 976, 2048}),
}
M.classes = {ShuffleNetV2 = ShuffleNetV2}

return M
