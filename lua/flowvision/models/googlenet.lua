-- flowvision.models.googlenet: GoogLeNet (Inception v1) with torchvision's
-- names (conv1.conv, inception3a.branch2.1.bn, aux1.fc1, fc), auxiliary
-- classifiers (aux_logits) and initialisation.
local A = require 'oneflow._args'
local flow = require 'oneflow'
local ops = require 'flowvision.models._ops'

local nn = flow.nn
local F = nn.functional
local M = {}

------------------------------------------------------------------ blocks
local BasicConv2d = nn.Module:subclass('BasicConv2d')
M.BasicConv2d = BasicConv2d

--- BasicConv2d(in, out, conv_opts): conv (no bias), BatchNorm (eps 1e-3), relu.
function BasicConv2d:__init(cin, cout, kernel_size, o)
  nn.Module.__init(self)
  o = o or {}
  self.conv = nn.Conv2d(cin, cout, kernel_size, {stride = o.stride or 1, padding = o.padding or 0, bias = false})
  self.bn = nn.BatchNorm2d(cout, {eps = 0.001})
end

-- relu in place, as torchvision's; the norm written into the conv's output
-- where _ops.conv_bn allows (eval, nothing to record, no hooks)
function BasicConv2d:forward(x) return F.relu(ops.conv_bn(self.conv, self.bn, x), {inplace = true}) end
ops.keeps_no_tensors(BasicConv2d)

local Inception = nn.Module:subclass('Inception')
M.Inception = Inception

function Inception:__init(cin, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj)
  nn.Module.__init(self)
  self.branch1 = BasicConv2d(cin, ch1x1, 1)
  self.branch2 = nn.Sequential(BasicConv2d(cin, ch3x3red, 1), BasicConv2d(ch3x3red, ch3x3, 3, {padding = 1}))
  self.branch3 = nn.Sequential(BasicConv2d(cin, ch5x5red, 1), BasicConv2d(ch5x5red, ch5x5, 3, {padding = 1}))
  self.branch4 = nn.Sequential(nn.MaxPool2d(3, {stride = 1, padding = 1, ceil_mode = true}),
                               BasicConv2d(cin, pool_proj, 1))
end

function Inception:forward(x)
  return flow.cat({self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)}, 2)
end
ops.keeps_no_tensors(Inception)

local InceptionAux = nn.Module:subclass('InceptionAux')
M.InceptionAux = InceptionAux

function InceptionAux:__init(cin, num_classes, dropout)
  nn.Module.__init(self)
  self.conv = BasicConv2d(cin, 128, 1)
  self.fc1 = nn.Linear(2048, 1024)
  self.fc2 = nn.Linear(1024, num_classes)
  self.dropout = nn.Dropout(dropout or 0.7)
end

function InceptionAux:forward(x)
  x = self.conv(F.adaptive_avg_pool2d(x, {4, 4})):flatten(2)
  return self.fc2(self.dropout(F.relu(self.fc1(x))))
end

------------------------------------------------------------------ GoogLeNet
local GoogLeNet = nn.Module:subclass('GoogLeNet')
M.GoogLeNet = GoogLeNet

--- torchvision's transform_input: ImageNet-normalised input to the [-1, 1]
-- scaling the original weights expect.
function M.transform_input(x)
  local c = {{0.229, 0.485}, {0.224, 0.456}, {0.225, 0.406}}
  local parts = {}
  for i = 1, 3 do
    parts[i] = x:narrow(2, i, 1) * (c[i][1] / 0.5) + (c[i][2] - 0.5) / 0.5
  end
  return flow.cat(parts, 2)
end

local function init_weights(self)
  for _, m in self:named_modules() do
    if ops.is_a(m, nn.Conv2d) or ops.is_a(m, nn.Linear) then
      nn.init.trunc_normal_(m.weight, {mean = 0, std = 0.01, a = -2, b = 2})
    elseif ops.is_a(m, nn.BatchNorm2d) then
      nn.init.constant_(m.weight, 1)
      nn.init.constant_(m.bias, 0)
    end
  end
end

--- GoogLeNet({num_classes = 1000, aux_logits = true, transform_input = false,
-- init_weights = true, dropout = 0.2, dropout_aux = 0.7}). In training mode
-- with aux_logits the forward returns logits, aux2, aux1 (torchvision's
-- GoogLeNetOutputs order); otherwise the logits.
function GoogLeNet:__init(opts)
  nn.Module.__init(self)
  opts = A.check_options('GoogLeNet', opts, {
    aux_logits = true, dropout = true, dropout_aux = true, init_weights = true, num_classes = true,
    transform_input = true})
  local nc = opts.num_classes or 1000
  self.aux_logits = opts.aux_logits ~= false
  self.transform_input = opts.transform_input == true
  self.conv1 = BasicConv2d(3, 64, 7, {stride = 2, padding = 3})
  self.maxpool1 = nn.MaxPool2d(3, {stride = 2, ceil_mode = true})
  self.conv2 = BasicConv2d(64, 64, 1)
  self.conv3 = BasicConv2d(64, 192, 3, {padding = 1})
  self.maxpool2 = nn.MaxPool2d(3, {stride = 2, ceil_mode = true})
  self.inception3a = Inception(192, 64, 96, 128, 16, 32, 32)
  self.inception3b = Inception(256, 128, 128, 192, 32, 96, 64)
  self.maxpool3 = nn.MaxPool2d(3, {stride = 2, ceil_mode = true})
  self.inception4a = Inception(480, 192, 96, 208, 16, 48, 64)
  self.inception4b = Inception(512, 160, 112, 224, 24, 64, 64)
  self.inception4c = Inception(512, 128, 128, 256, 24, 64, 64)
  self.inception4d = Inception(512, 112, 144, 288, 32, 64, 64)
  self.inception4e = Inception(528, 256, 160, 320, 32, 128, 128)
  self.maxpool4 = nn.MaxPool2d(2, {stride = 2, ceil_mode = true})
  self.inception5a = Inception(832, 256, 160, 320, 32, 128, 128)
  self.inception5b = Inception(832, 384, 192, 384, 48, 128, 128)
  if self.aux_logits then
    self.aux1 = InceptionAux(512, nc, opts.dropout_aux)
    self.aux2 = InceptionAux(528, nc, opts.dropout_aux)
  end
  self.avgpool = nn.AdaptiveAvgPool2d({1, 1})
  self.dropout = nn.Dropout(opts.dropout or 0.2)
  self.fc = nn.Linear(1024, nc)
  if opts.init_weights ~= false then init_weights(self) end
end

function GoogLeNet:forward(x)
  if self.transform_input then x = M.transform_input(x) end
  x = self.maxpool2(self.conv3(self.conv2(self.maxpool1(self.conv1(x)))))
  x = self.inception4a(self.maxpool3(self.inception3b(self.inception3a(x))))
  local train_aux = self.training and self.aux_logits and self.aux1
  local aux1 = train_aux and self.aux1(x)
  x = self.inception4d(self.inception4c(self.inception4b(x)))
  local aux2 = train_aux and self.aux2(x)
  x = self.inception5b(self.inception5a(self.maxpool4(self.inception4e(x))))
  x = self.fc(self.dropout(self.avgpool(x):flatten(2)))
  if train_aux then return x, aux2, aux1 end
  return x
end

--- Drops the auxiliary classifiers (after loading a checkpoint that has them).
function GoogLeNet:drop_aux()
  self.aux_logits = false
  self:delete('aux1')
  self:delete('aux2')
end

-- The registry's pretrained hooks: torchvision's checkpoint has the aux
-- heads and expects transform_input unless told otherwise.
local function pretrained_opts(opts)
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  if o.transform_input == nil then o.transform_input = true end
  o.aux_logits, o.init_weights = true, false
  return o
end

M.models = {googlenet = function(opts) return GoogLeNet(opts) end}
M.pretrained = {googlenet = {
  prepare = pretrained_opts,
  finish = function(model, opts) if opts.aux_logits ~= true then model:drop_aux() end end,
}}
M.classes = {GoogLeNet = GoogLeNet}

return M
