-- flowvision.models.quantization: ResNets that flow.quantization can fuse,
-- observe and convert to int8, as torchvision.models.quantization's:
--
--   local q = require('flowvision').models.quantization
--   local m = q.resnet18({num_classes = 10})          -- float, quantizable
--   m:eval(); m:fuse_model()                         -- Conv+BN(+ReLU) folded
--   m.qconfig = flow.quantization.get_default_qconfig('x86')
--   local p = flow.quantization.prepare(m)           -- observers
--   flow.quantization.calibrate(p, batches)
--   local int8 = flow.quantization.convert(p)
--
--   q.resnet18({quantize = true, pretrained = path, calibration_data = batches})
--
-- The float model's state-dict keys are the plain ResNet's (conv1, bn1,
-- layer1.0.conv1, ..., fc), so a checkpoint of models.resnet18 loads. The
-- blocks differ from the float ones in what quantization needs: the
-- residual sum is a FloatFunctional (add_relu: one observed output), the
-- input and output pass QuantStub / DeQuantStub (torch.ao.quantization's
-- names for where convert puts the Quantize / DeQuantize modules; prepare
-- observes the input there), and no ReLU is in place.
local A = require 'oneflow._args'
local flow = require 'oneflow'
local R = require 'flowvision.models.resnet'
local ops = require 'flowvision.models._ops'

local nn, Qz = flow.nn, flow.quantization
-- no names in the model registry: models.quantization.resnet18 is its own
-- namespace, as torchvision.models.quantization
local M = {models = {}}

-- is_qat (torchvision's _fuse_modules): keep BatchNorm for QAT modules
local function fuse(m, groups, is_qat)
  (is_qat and Qz.fuse_modules_qat or Qz.fuse_modules)(m, groups, {inplace = true})
end

------------------------------------------------------------------ blocks
local QBasicBlock = R.BasicBlock:subclass('QuantizableBasicBlock')
QBasicBlock.expansion = 1
M.QuantizableBasicBlock = QBasicBlock

function QBasicBlock:__init(inplanes, planes, o)
  R.BasicBlock.__init(self, inplanes, planes, o)
  self.relu = nn.ReLU()
  self.add_relu = Qz.FloatFunctional()
end

function QBasicBlock:forward(x)
  local out = self.relu(self.bn1(self.conv1(x)))
  out = self.bn2(self.conv2(out))
  local identity = self.downsample and self.downsample(x) or x
  return self.add_relu:add_relu(out, identity)
end

--- block:fuse_model([is_qat]): conv1+bn1+relu, conv2+bn2 and the downsample's conv+bn, in place.
function QBasicBlock:fuse_model(is_qat)
  fuse(self, {{'conv1', 'bn1', 'relu'}, {'conv2', 'bn2'}}, is_qat)
  if self.downsample then fuse(self.downsample, {{'0', '1'}}, is_qat) end
end

local QBottleneck = R.Bottleneck:subclass('QuantizableBottleneck')
QBottleneck.expansion = 4
M.QuantizableBottleneck = QBottleneck

-- two ReLUs (torchvision's relu1 / relu2): each fuses into its own conv
function QBottleneck:__init(inplanes, planes, o)
  R.Bottleneck.__init(self, inplanes, planes, o)
  self.relu = nil
  self.relu1, self.relu2 = nn.ReLU(), nn.ReLU()
  self.skip_add_relu = Qz.FloatFunctional()
end

function QBottleneck:forward(x)
  local out = self.relu1(self.bn1(self.conv1(x)))
  out = self.relu2(self.bn2(self.conv2(out)))
  out = self.bn3(self.conv3(out))
  local identity = self.downsample and self.downsample(x) or x
  return self.skip_add_relu:add_relu(out, identity)
end

function QBottleneck:fuse_model(is_qat)
  fuse(self, {{'conv1', 'bn1', 'relu1'}, {'conv2', 'bn2', 'relu2'}, {'conv3', 'bn3'}}, is_qat)
  if self.downsample then fuse(self.downsample, {{'0', '1'}}, is_qat) end
end

------------------------------------------------------------------ ResNet
local QResNet = R.ResNet:subclass('QuantizableResNet')
M.QuantizableResNet = QResNet

function QResNet:__init(block, layers, opts)
  R.ResNet.__init(self, block, layers, opts)
  self.relu = nn.ReLU()
  self.quant = Qz.QuantStub()
  self.dequant = Qz.DeQuantStub()
end

function QResNet:forward(x)
  x = self.maxpool(self.relu(self.bn1(self.conv1(self.quant(x)))))
  x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
  return self.dequant(self.fc(self.avgpool(x):flatten(2)))
end

--- model:fuse_model([is_qat]): fuses every Conv+BatchNorm(+ReLU) of the stem
-- and the blocks, in place. Without is_qat the model must be in eval mode
-- (the BatchNorm running statistics are folded into the weights); with
-- is_qat = true (torchvision's argument) BatchNorm is kept (ConvBnReLU2d,
-- ConvBn2d: fuse_modules_qat), for prepare_qat in training mode.
function QResNet:fuse_model(is_qat)
  if is_qat ~= nil and type(is_qat) ~= 'boolean' then
    A.fail('QuantizableResNet:fuse_model: is_qat must be a boolean or nil, got ' .. A.describe(is_qat))
  end
  fuse(self, {{'conv1', 'bn1', 'relu'}}, is_qat)
  for _, m in self:named_modules() do
    if ops.is_a(m, QBasicBlock) or ops.is_a(m, QBottleneck) then m:fuse_model(is_qat) end
  end
  return self
end

------------------------------------------------------------------ builders
local OPTS = {backend = true, calibration_data = true, groups = true, norm_layer = true, num_classes = true,
              pretrained = true, quantize = true, replace_stride_with_dilation = true,
              width_per_group = true, zero_init_residual = true}

-- quantize = true: fuse, observe with the backend's default qconfig, run
-- the calibration batches (torchvision calibrates on one random batch
-- when it has no quantized weights; so does this without
-- calibration_data), convert
local function quantize_model(name, model, opts)
  model:eval()
  model:fuse_model()
  model.qconfig = Qz.get_default_qconfig(opts.backend or 'x86')
  local p = Qz.prepare(model, {inplace = true})
  local batches = opts.calibration_data
  if batches == nil then
    batches = {flow.rand(1, 3, 224, 224)}
  elseif type(batches) ~= 'table' or #batches == 0 then
    A.fail(('flowvision.models.quantization.%s: calibration_data must be a non-empty list of input batches'):format(
      name))
  end
  Qz.calibrate(p, batches)
  return Qz.convert(p, {inplace = true})
end

local function builder(name, block, layers)
  return function(opts)
    opts = A.check_options('flowvision.models.quantization.' .. name, opts, OPTS) or {}
    local o = {}
    for k in pairs(OPTS) do o[k] = opts[k] end
    o.backend, o.calibration_data, o.pretrained, o.quantize = nil, nil, nil, nil
    local model = QResNet(block, layers, o)
    if opts.pretrained then
      local models = require 'flowvision.models'
      model:load_state_dict(flow.load(models.pretrained_path(name, opts.pretrained)))
    end
    if opts.quantize then return quantize_model(name, model, opts) end
    return model
  end
end

--- resnet18 / resnet34 / resnet50({num_classes, quantize = false, backend = 'x86',
-- pretrained = false | true | path (float weights), calibration_data = {batches}, ...})
M.resnet18 = builder('resnet18', QBasicBlock, {2, 2, 2, 2})
M.resnet34 = builder('resnet34', QBasicBlock, {3, 4, 6, 3})
M.resnet50 = builder('resnet50', QBottleneck, {3, 4, 6, 3})

return M
