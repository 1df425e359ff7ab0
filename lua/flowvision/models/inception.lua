-- flowvision.models.inception: Inception v3 with torchvision's names
-- (Conv2d_1a_3x3.conv, Mixed_5b.branch1x1.bn, AuxLogits.fc, fc), the
-- auxiliary classifier (aux_logits) and initialisation. Made for 299x299
-- inputs (at least 75x75).
local A = require 'oneflow._args'
local flow = require 'oneflow'
local ops = require 'flowvision.models._ops'
local googlenet = require 'flowvision.models.googlenet'

local nn = flow.nn
local F = nn.functional
local Conv = googlenet.BasicConv2d
local M = {}

local function avg3(x) return F.avg_pool2d(x, 3, {stride = 1, padding = 1}) end
local function max3(x) return F.max_pool2d(x, 3, {stride = 2}) end

-- A module class whose children come from `build(self, ...)` and whose
-- forward concatenates `branches(self, x)` along the channels.
local function block(name, build, branches)
  local cls = nn.Module:subclass(name)
  function cls:__init(...)
    nn.Module.__init(self)
    build(self, ...)
  end
  function cls:forward(x) return flow.cat(branches(self, x), 2) end
  M[name] = cls
  return cls
end

local InceptionA = block('InceptionA', function(self, cin, pool_features)
  self.branch1x1 = Conv(cin, 64, 1)
  self.branch5x5_1 = Conv(cin, 48, 1)
  self.branch5x5_2 = Conv(48, 64, 5, {padding = 2})
  self.branch3x3dbl_1 = Conv(cin, 64, 1)
  self.branch3x3dbl_2 = Conv(64, 96, 3, {padding = 1})
  self.branch3x3dbl_3 = Conv(96, 96, 3, {padding = 1})
  self.branch_pool = Conv(cin, pool_features, 1)
end, function(self, x)
  return {self.branch1x1(x), self.branch5x5_2(self.branch5x5_1(x)),
          self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x))), self.branch_pool(avg3(x))}
end)

local InceptionB = block('InceptionB', function(self, cin)
  self.branch3x3 = Conv(cin, 384, 3, {stride = 2})
  self.branch3x3dbl_1 = Conv(cin, 64, 1)
  self.branch3x3dbl_2 = Conv(64, 96, 3, {padding = 1})
  self.branch3x3dbl_3 = Conv(96, 96, 3, {stride = 2})
end, function(self, x)
  return {self.branch3x3(x), self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x))), max3(x)}
end)

local InceptionC = block('InceptionC', function(self, cin, c7)
  self.branch1x1 = Conv(cin, 192, 1)
  self.branch7x7_1 = Conv(cin, c7, 1)
  self.branch7x7_2 = Conv(c7, c7, {1, 7}, {padding = {0, 3}})
  self.branch7x7_3 = Conv(c7, 192, {7, 1}, {padding = {3, 0}})
  self.branch7x7dbl_1 = Conv(cin, c7, 1)
  self.branch7x7dbl_2 = Conv(c7, c7, {7, 1}, {padding = {3, 0}})
  self.branch7x7dbl_3 = Conv(c7, c7, {1, 7}, {padding = {0, 3}})
  self.branch7x7dbl_4 = Conv(c7, c7, {7, 1}, {padding = {3, 0}})
  self.branch7x7dbl_5 = Conv(c7, 192, {1, 7}, {padding = {0, 3}})
  self.branch_pool = Conv(cin, 192, 1)
end, function(self, x)
  local b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
  local d = self.branch7x7dbl_3(self.branch7x7dbl_2(self.branch7x7dbl_1(x)))
  d = self.branch7x7dbl_5(self.branch7x7dbl_4(d))
  return {self.branch1x1(x), b7, d, self.branch_pool(avg3(x))}
end)

local InceptionD = block('InceptionD', function(self, cin)
  self.branch3x3_1 = Conv(cin, 192, 1)
  self.branch3x3_2 = Conv(192, 320, 3, {stride = 2})
  self.branch7x7x3_1 = Conv(cin, 192, 1)
  self.branch7x7x3_2 = Conv(192, 192, {1, 7}, {padding = {0, 3}})
  self.branch7x7x3_3 = Conv(192, 192, {7, 1}, {padding = {3, 0}})
  self.branch7x7x3_4 = Conv(192, 192, 3, {stride = 2})
end, function(self, x)
  local b7 = self.branch7x7x3_4(self.branch7x7x3_3(self.branch7x7x3_2(self.branch7x7x3_1(x))))
  return {self.branch3x3_2(self.branch3x3_1(x)), b7, max3(x)}
end)

local InceptionE = block('InceptionE', function(self, cin)
  self.branch1x1 = Conv(cin, 320, 1)
  self.branch3x3_1 = Conv(cin, 384, 1)
  self.branch3x3_2a = Conv(384, 384, {1, 3}, {padding = {0, 1}})
  self.branch3x3_2b = Conv(384, 384, {3, 1}, {padding = {1, 0}})
  self.branch3x3dbl_1 = Conv(cin, 448, 1)
  self.branch3x3dbl_2 = Conv(448, 384, 3, {padding = 1})
  self.branch3x3dbl_3a = Conv(384, 384, {1, 3}, {padding = {0, 1}})
  self.branch3x3dbl_3b = Conv(384, 384, {3, 1}, {padding = {1, 0}})
  self.branch_pool = Conv(cin, 192, 1)
end, function(self, x)
  local b3 = self.branch3x3_1(x)
  b3 = flow.cat({self.branch3x3_2a(b3), self.branch3x3_2b(b3)}, 2)
  local d = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
  d = flow.cat({self.branch3x3dbl_3a(d), self.branch3x3dbl_3b(d)}, 2)
  return {self.branch1x1(x), b3, d, self.branch_pool(avg3(x))}
end)

local InceptionAux = nn.Module:subclass('InceptionAux')
M.InceptionAux = InceptionAux

function InceptionAux:__init(cin, num_classes)
  nn.Module.__init(self)
  self.conv0 = Conv(cin, 128, 1)
  self.conv1 = Conv(128, 768, 5)
  self.conv1.stddev = 0.01
  self.fc = nn.Linear(768, num_classes)
  self.fc.stddev = 0.001
end

function InceptionAux:forward(x)
  x = self.conv1(self.conv0(F.avg_pool2d(x, 5, {stride = 3})))
  return self.fc(F.adaptive_avg_pool2d(x, {1, 1}):flatten(2))
end

------------------------------------------------------------------ Inception3
local Inception3 = nn.Module:subclass('Inception3')
M.Inception3 = Inception3

-- trunc_normal(std = m.stddev or 0.1) for convs and linears, as torchvision:
-- AuxLogits.fc has stddev 0.001; the 0.01 set on AuxLogits.conv1 (a
-- BasicConv2d) is not seen by its conv, which gets 0.1
local function init_weights(self)
  for _, m in self:named_modules() do
    if ops.is_a(m, nn.Conv2d) or ops.is_a(m, nn.Linear) then
      nn.init.trunc_normal_(m.weight, {mean = 0, std = rawget(m, 'stddev') or 0.1, a = -2, b = 2})
    elseif ops.is_a(m, nn.BatchNorm2d) then
      nn.init.constant_(m.weight, 1)
      nn.init.constant_(m.bias, 0)
    end
  end
end

--- Inception3({num_classes = 1000, aux_logits = true, transform_input = false,
-- init_weights = true, dropout = 0.5}). In training mode with aux_logits the
-- forward returns logits, aux (torchvision's InceptionOutputs).
function Inception3:__init(opts)
  nn.Module.__init(self)
  opts = A.check_options('Inception3', opts, {
    aux_logits = true, dropout = true, init_weights = true, num_classes = true, transform_input = true})
  local nc = opts.num_classes or 1000
  self.aux_logits = opts.aux_logits ~= false
  self.transform_input = opts.transform_input == true
  self.Conv2d_1a_3x3 = Conv(3, 32, 3, {stride = 2})
  self.Conv2d_2a_3x3 = Conv(32, 32, 3)
  self.Conv2d_2b_3x3 = Conv(32, 64, 3, {padding = 1})
  self.maxpool1 = nn.MaxPool2d(3, {stride = 2})
  self.Conv2d_3b_1x1 = Conv(64, 80, 1)
  self.Conv2d_4a_3x3 = Conv(80, 192, 3)
  self.maxpool2 = nn.MaxPool2d(3, {stride = 2})
  self.Mixed_5b = InceptionA(192, 32)
  self.Mixed_5c = InceptionA(256, 64)
  self.Mixed_5d = InceptionA(288, 64)
  self.Mixed_6a = InceptionB(288)
  self.Mixed_6b = InceptionC(768, 128)
  self.Mixed_6c = InceptionC(768, 160)
  self.Mixed_6d = InceptionC(768, 160)
  self.Mixed_6e = InceptionC(768, 192)
  if self.aux_logits then self.AuxLogits = InceptionAux(768, nc) end
  self.Mixed_7a = InceptionD(768)
  self.Mixed_7b = InceptionE(1280)
  self.Mixed_7c = InceptionE(2048)
  self.avgpool = nn.AdaptiveAvgPool2d({1, 1})
  self.dropout = nn.Dropout(opts.dropout or 0.5)
  self.fc = nn.Linear(2048, nc)
  if opts.init_weights ~= false then init_weights(self) end
end

function Inception3:forward(x)
  if self.transform_input then x = googlenet.transform_input(x) end
  x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))
  x = self.maxpool2(self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(self.maxpool1(x))))
  x = self.Mixed_6a(self.Mixed_5d(self.Mixed_5c(self.Mixed_5b(x))))
  x = self.Mixed_6e(self.Mixed_6d(self.Mixed_6c(self.Mixed_6b(x))))
  local aux = self.training and self.aux_logits and self.AuxLogits and self.AuxLogits(x)
  x = self.Mixed_7c(self.Mixed_7b(self.Mixed_7a(x)))
  x = self.fc(self.dropout(self.avgpool(x)):flatten(2))
  if aux then return x, aux end
  return x
end

--- Drops the auxiliary classifier (after loading a checkpoint that has it).
function Inception3:drop_aux()
  self.aux_logits = false
  self:delete('AuxLogits')
end

M.models = {inception_v3 = function(opts) return Inception3(opts) end}
M.pretrained = {inception_v3 = {
  prepare = function(opts)
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    if o.transform_input == nil then o.transform_input = true end
    o.aux_logits, o.init_weights = true, false
    return o
  end,
  finish = function(model, opts) if opts.aux_logits == false then model:drop_aux() end end,
}}
M.classes = {Inception3 = Inception3}

return M
