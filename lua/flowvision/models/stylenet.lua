-- flowvision.models.stylenet: the fast neural style transfer network of
-- Johnson et al. (as flowvision's stylenet and the PyTorch examples'
-- TransformerNet), with their names: conv1..conv3 (.conv2d), in1..in5
-- (InstanceNorm2d, affine), res1..res5 (.conv1, .in1, .conv2, .in2),
-- deconv1, deconv2 (nearest 2x upsample then conv), deconv3.
-- Reflection padding before every conv. Input and output are images in
-- the 0..255 range, [N, 3, H, W] with H and W multiples of 4.
--   local net = vision.models.stylenet(); local y = net(x)
local flow = require 'oneflow'

local nn, F = flow.nn, flow.nn.functional
local M = {models = {}, classes = {}}

local ConvLayer = nn.Module:subclass('ConvLayer')
M.classes.ConvLayer = ConvLayer

--- ConvLayer(in, out, kernel_size, stride[, upsample]): reflection pad, conv.
function ConvLayer:__init(cin, cout, k, stride, up)
  nn.Module.__init(self)
  self.upsample = up
  self.reflection_pad = nn.ReflectionPad2d(math.floor(k / 2))
  self.conv2d = nn.Conv2d(cin, cout, k, stride)
end

function ConvLayer:forward(x)
  if self.upsample then x = F.interpolate(x, {scale_factor = self.upsample, mode = 'nearest'}) end
  return self.conv2d(self.reflection_pad(x))
end

local ResidualBlock = nn.Module:subclass('ResidualBlock')
M.classes.ResidualBlock = ResidualBlock

function ResidualBlock:__init(c)
  nn.Module.__init(self)
  self.conv1 = ConvLayer(c, c, 3, 1)
  self.in1 = nn.InstanceNorm2d(c, {affine = true})
  self.conv2 = ConvLayer(c, c, 3, 1)
  self.in2 = nn.InstanceNorm2d(c, {affine = true})
  self.relu = nn.ReLU()
end

function ResidualBlock:forward(x)
  local out = self.relu(self.in1(self.conv1(x)))
  return self.in2(self.conv2(out)) + x
end

local TransformerNet = nn.Module:subclass('TransformerNet')
M.classes.TransformerNet = TransformerNet

function TransformerNet:__init()
  nn.Module.__init(self)
  self.conv1 = ConvLayer(3, 32, 9, 1)
  self.in1 = nn.InstanceNorm2d(32, {affine = true})
  self.conv2 = ConvLayer(32, 64, 3, 2)
  self.in2 = nn.InstanceNorm2d(64, {affine = true})
  self.conv3 = ConvLayer(64, 128, 3, 2)
  self.in3 = nn.InstanceNorm2d(128, {affine = true})
  for i = 1, 5 do self['res' .. i] = ResidualBlock(128) end
  self.deconv1 = ConvLayer(128, 64, 3, 1, 2)
  self.in4 = nn.InstanceNorm2d(64, {affine = true})
  self.deconv2 = ConvLayer(64, 32, 3, 1, 2)
  self.in5 = nn.InstanceNorm2d(32, {affine = true})
  self.deconv3 = ConvLayer(32, 3, 9, 1)
  self.relu = nn.ReLU()
end

function TransformerNet:forward(x)
  local y = self.relu(self.in1(self.conv1(x)))
  y = self.relu(self.in2(self.conv2(y)))
  y = self.relu(self.in3(self.conv3(y)))
  for i = 1, 5 do y = self['res' .. i](y) end
  y = self.relu(self.in4(self.deconv1(y)))
  y = self.relu(self.in5(self.deconv2(y)))
  return self.deconv3(y)
end

--- stylenet(): a TransformerNet (options are ignored; pretrained weights for
-- a style load through flowvision.models.create / the registry).
function M.models.stylenet() return TransformerNet() end
M.models.fast_neural_style = M.models.stylenet

return M
