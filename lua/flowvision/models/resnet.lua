-- flowvision.models.resnet: ResNet 18/34/50/101/152, ResNeXt and
-- Wide-ResNet with torchvision's module names (conv1, bn1, layer1.0.conv1,
-- layer1.0.downsample.0, fc) and initialisation.
local A = require 'oneflow._args'
local flow = require 'oneflow'
local ops = require 'flowvision.models._ops'

local nn = flow.nn
local conv_bn, frees, free, step = ops.conv_bn, ops.frees, ops.free, ops.step
local M = {}

local function conv3x3(cin, cout, stride, groups, dilation)
  return nn.Conv2d(cin, cout, 3, {stride = stride or 1, padding = dilation or 1, groups = groups or 1,
                                  bias = false, dilation = dilation or 1})
end

local function conv1x1(cin, cout, stride)
  return nn.Conv2d(cin, cout, 1, {stride = stride or 1, bias = false})
end

------------------------------------------------------------------ blocks
local BasicBlock = nn.Module:subclass('BasicBlock')
BasicBlock.expansion = 1
M.BasicBlock = BasicBlock

--- BasicBlock(inplanes, planes, {stride, downsample, groups, base_width, dilation, norm_layer})
function BasicBlock:__init(inplanes, planes, o)
  nn.Module.__init(self)
  local norm = o.norm_layer
  if (o.groups or 1) ~= 1 or (o.base_width or 64) ~= 64 then
    error('BasicBlock only supports groups=1 and base_width=64', 3)
  end
  if (o.dilation or 1) > 1 then error('BasicBlock: dilation > 1 is not supported', 3) end
  self.conv1 = conv3x3(inplanes, planes, o.stride)
  self.bn1 = norm(planes)
  self.relu = nn.ReLU({inplace = true})
  self.conv2 = conv3x3(planes, planes)
  self.bn2 = norm(planes)
  if o.downsample then self.downsample = o.downsample end
  self.stride = o.stride or 1
end

-- In place as torchvision's blocks are (ReLU(inplace=True), out += identity):
-- each saves a tensor the size of the block's output, which eager mode
-- would otherwise hold until Lua's collector finds it (a ResNet-50 forward
-- at batch 8 ran 18 full collections, 11 in place).
-- Each value made here is freed once read, where oneflow.nn.module's rules
-- allow (_ops.frees: eval or not, no gradient recorded, nothing traced,
-- plain children); never x.
function BasicBlock:forward(x)
  local f = frees(self, x)
  local mid = step(self.relu, conv_bn(self.conv1, self.bn1, x, f), f)
  local out = conv_bn(self.conv2, self.bn2, mid, f)
  free(mid, f, out)
  local identity = self.downsample and self.downsample(x) or x
  out:add_(identity)
  free(identity, f, out)
  return step(self.relu, out, f)
end
ops.keeps_no_tensors(BasicBlock)

local Bottleneck = nn.Module:subclass('Bottleneck')
Bottleneck.expansion = 4
M.Bottleneck = Bottleneck

function Bottleneck:__init(inplanes, planes, o)
  nn.Module.__init(self)
  local norm = o.norm_layer
  local width = math.floor(planes * ((o.base_width or 64) / 64)) * (o.groups or 1)
  self.conv1 = conv1x1(inplanes, width)
  self.bn1 = norm(width)
  self.conv2 = conv3x3(width, width, o.stride, o.groups, o.dilation)
  self.bn2 = norm(width)
  self.conv3 = conv1x1(width, planes * 4)
  self.bn3 = norm(planes * 4)
  self.relu = nn.ReLU({inplace = true})
  if o.downsample then self.downsample = o.downsample end
  self.stride = o.stride or 1
end

function Bottleneck:forward(x)
  local f = frees(self, x)
  local a = step(self.relu, conv_bn(self.conv1, self.bn1, x, f), f)
  local b = step(self.relu, conv_bn(self.conv2, self.bn2, a, f), f)
  free(a, f, b)
  local out = conv_bn(self.conv3, self.bn3, b, f)
  free(b, f, out)
  local identity = self.downsample and self.downsample(x) or x
  out:add_(identity)
  free(identity, f, out)
  return step(self.relu, out, f)
end
ops.keeps_no_tensors(Bottleneck)

------------------------------------------------------------------ ResNet
local ResNet = nn.Module:subclass('ResNet')
M.ResNet = ResNet

local function make_layer(self, block, planes, blocks, stride, dilate)
  local norm = self._norm_layer
  stride = stride or 1
  local previous_dilation = self.dilation
  if dilate then
    self.dilation = self.dilation * stride
    stride = 1
  end
  local downsample
  if stride ~= 1 or self.inplanes ~= planes * block.expansion then
    downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
                               norm(planes * block.expansion))
  end
  local layers = {block(self.inplanes, planes, {stride = stride, downsample = downsample, groups = self.groups,
    base_width = self.base_width, dilation = previous_dilation, norm_layer = norm})}
  self.inplanes = planes * block.expansion
  for _ = 2, blocks do
    layers[#layers + 1] = block(self.inplanes, planes, {groups = self.groups, base_width = self.base_width,
      dilation = self.dilation, norm_layer = norm})
  end
  return nn.Sequential(unpack(layers))
end

local function init_weights(self, zero_init_residual)
  local init = nn.init
  for _, m in self:named_modules() do
    if ops.is_a(m, nn.Conv2d) then
      init.kaiming_normal_(m.weight, {mode = 'fan_out', nonlinearity = 'relu'})
    elseif ops.is_a(m, nn.BatchNorm2d) or ops.is_a(m, nn.GroupNorm) then
      init.constant_(m.weight, 1)
      init.constant_(m.bias, 0)
    end
  end
  if not zero_init_residual then return end
  for _, m in self:named_modules() do
    if ops.is_a(m, Bottleneck) then init.constant_(m.bn3.weight, 0)
    elseif ops.is_a(m, BasicBlock) then init.constant_(m.bn2.weight, 0) end
  end
end

--- ResNet(block, layers, {num_classes = 1000, zero_init_residual = false,
-- groups = 1, width_per_group = 64, replace_stride_with_dilation = {false x3},
-- norm_layer = BatchNorm2d factory})
function ResNet:__init(block, layers, opts)
  nn.Module.__init(self)
  opts = A.check_options('ResNet', opts, {
    groups = true, norm_layer = true, num_classes = true, replace_stride_with_dilation = true,
    width_per_group = true, zero_init_residual = true})
  local norm = opts.norm_layer or ops.batch_norm()
  self._norm_layer = norm
  self.inplanes, self.dilation = 64, 1
  local rswd = opts.replace_stride_with_dilation or {false, false, false}
  if #rswd ~= 3 then error('ResNet: replace_stride_with_dilation should be nil or a 3-element table', 2) end
  self.groups, self.base_width = opts.groups or 1, opts.width_per_group or 64
  self.conv1 = nn.Conv2d(3, 64, 7, {stride = 2, padding = 3, bias = false})
  self.bn1 = norm(64)
  self.relu = nn.ReLU({inplace = true})
  self.maxpool = nn.MaxPool2d(3, {stride = 2, padding = 1})
  self.layer1 = make_layer(self, block, 64, layers[1])
  self.layer2 = make_layer(self, block, 128, layers[2], 2, rswd[1])
  self.layer3 = make_layer(self, block, 256, layers[3], 2, rswd[2])
  self.layer4 = make_layer(self, block, 512, layers[4], 2, rswd[3])
  self.avgpool = nn.AdaptiveAvgPool2d({1, 1})
  self.fc = nn.Linear(512 * block.expansion, opts.num_classes or 1000)
  init_weights(self, opts.zero_init_residual)
end

function ResNet:forward(x)
  local f = frees(self, x)
  local y = step(self.maxpool, step(self.relu, conv_bn(self.conv1, self.bn1, x, f), f), f)
  y = step(self.layer4, step(self.layer3, step(self.layer2, step(self.layer1, y, f), f), f), f)
  y = step(self.avgpool, y, f)
  local flat = y:flatten(2)
  free(y, f, flat)
  return step(self.fc, flat, f)
end
ops.keeps_no_tensors(ResNet)

--- model:prunable_chains([{residual = false}]): the channel chains that
-- nn.utils.prune.prune_channels can shrink: inside each block, conv1 -> bn1
-- -> conv2 (and in a Bottleneck also conv2 -> bn2 -> conv3). The channels a
-- block adds to its input -- the residual stream -- are summed by every
-- block of a stage, so they can only go together: with residual = true the
-- list also holds one group per stream, {producers, norms, consumers}: the
-- convs writing the stream (the stem or a downsample, and each block's last
-- conv), their BatchNorms, and the convs reading it (each block's conv1, the
-- next stage's downsample, the fc). An identity shortcut carries a stream
-- into the next block unchanged, so the stem's channels are layer1's when
-- its first block has no downsample. Grouped convolutions (ResNeXt) have no
-- block chains.
--   local pruned = prune.prune_channels(model, model:prunable_chains(), {amount = 0.5})
function ResNet:prunable_chains(opts)
  opts = A.check_options('ResNet:prunable_chains', opts, {residual = true}) or {}
  local chains = {}
  for name, m in self:named_modules() do
    local p = name .. '.'
    if ops.is_a(m, Bottleneck) then
      if m.conv2.groups ~= 1 then
        error(('ResNet:prunable_chains: %s has a grouped conv2 (groups = %d): no channel chain to prune')
              :format(name, m.conv2.groups), 2)
      end
      chains[#chains + 1] = {p .. 'conv1', p .. 'bn1', p .. 'conv2'}
      chains[#chains + 1] = {p .. 'conv2', p .. 'bn2', p .. 'conv3'}
    elseif ops.is_a(m, BasicBlock) then
      chains[#chains + 1] = {p .. 'conv1', p .. 'bn1', p .. 'conv2'}
    end
  end
  if not opts.residual then return chains end
  local stream = {producers = {'conv1'}, norms = {'bn1'}, consumers = {}}
  for li = 1, 4 do
    local layer = self['layer' .. li]
    for j = 1, #layer do
      local blk, p = layer[j], ('layer%d.%d.'):format(li, j - 1)
      local last = ops.is_a(blk, Bottleneck) and '3' or '2'
      table.insert(stream.consumers, p .. 'conv1')
      if blk.downsample ~= nil then
        table.insert(stream.consumers, p .. 'downsample.0')
        chains[#chains + 1] = stream
        stream = {producers = {p .. 'downsample.0'}, norms = {p .. 'downsample.1'}, consumers = {}}
      end
      table.insert(stream.producers, p .. 'conv' .. last)
      table.insert(stream.norms, p .. 'bn' .. last)
    end
  end
  table.insert(stream.consumers, 'fc')
  chains[#chains + 1] = stream
  return chains
end

------------------------------------------------------------------ builders
local function builder(block, layers, extra)
  return function(opts)
    local o = {}
    for k, v in pairs(opts or {}) do o[k] = v end
    for k, v in pairs(extra or {}) do o[k] = v end
    return ResNet(block, layers, o)
  end
end

M.models = {
  resnet18 = builder(BasicBlock, {2, 2, 2, 2}),
  resnet34 = builder(BasicBlock, {3, 4, 6, 3}),
  resnet50 = builder(Bottleneck, {3, 4, 6, 3}),
  resnet101 = builder(Bottleneck, {3, 4, 23, 3}),
  resnet152 = builder(Bottleneck, {3, 8, 36, 3}),
  resnext50_32x4d = builder(Bottleneck, {3, 4, 6, 3}, {groups = 32, width_per_group = 4}),
  resnext101_32x8d = builder(Bottleneck, {3, 4, 23, 3}, {groups = 32, width_per_group = 8}),
  resnext101_64x4d = builder(Bottleneck, {3, 4, 23, 3}, {groups = 64, width_per_group = 4}),
  wide_resnet50_2 = builder(Bottleneck, {3, 4, 6, 3}, {width_per_group = 128}),
  wide_resnet101_2 = builder(Bottleneck, {3, 4, 23, 3}, {width_per_group = 128}),
}
M.classes = {ResNet = ResNet, BasicBlock = BasicBlock, Bottleneck = Bottleneck}

return M
