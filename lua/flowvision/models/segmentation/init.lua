-- flowvision.models.segmentation: FCN (Long et al.) and DeepLabV3 (Chen et
-- al.) on a dilated ResNet-50 (strides of layer3/layer4 replaced by
-- dilation, output stride 8), as torchvision's fcn_resnet50 and
-- deeplabv3_resnet50, with its names: backbone.{conv1, bn1, layer1..4}
-- (no fc), classifier.N, aux_classifier.N (with aux_loss = true).
--   local m = vision.models.deeplabv3_resnet50({num_classes = 21, aux_loss = true})
--   local out = m(x)          -- {out = [N, C, H, W], aux = [N, C, H, W]} (logits at input size)
-- Options: num_classes = 21, aux_loss = false.
local flow = require 'oneflow'
local U = require 'flowvision.models.detection._utils'

local nn, F = flow.nn, flow.nn.functional
local M = {models = {}, classes = {}}

local function upsample(x, h, w)
  return F.interpolate(x, {size = {h, w}, mode = 'bilinear', align_corners = false})
end

------------------------------------------------------------------ heads
local FCNHead = nn.Sequential:subclass('FCNHead')
M.classes.FCNHead = FCNHead

--- FCNHead(in_channels, channels): conv3x3 (in / 4), BN, ReLU, Dropout(0.1), conv1x1.
function FCNHead:__init(cin, channels)
  local inter = math.floor(cin / 4)
  nn.Sequential.__init(self, nn.Conv2d(cin, inter, 3, {padding = 1, bias = false}), nn.BatchNorm2d(inter),
    nn.ReLU(), nn.Dropout(0.1), nn.Conv2d(inter, channels, 1))
end

local ASPPPooling = nn.Sequential:subclass('ASPPPooling')
M.classes.ASPPPooling = ASPPPooling
function ASPPPooling:__init(cin, cout)
  nn.Sequential.__init(self, nn.AdaptiveAvgPool2d(1), nn.Conv2d(cin, cout, 1, {bias = false}),
                       nn.BatchNorm2d(cout), nn.ReLU())
end
function ASPPPooling:forward(x)
  local h, w = x:size(3), x:size(4)
  return upsample(nn.Sequential.forward(self, x), h, w)
end

local function aspp_conv(cin, cout, d)
  return nn.Sequential(nn.Conv2d(cin, cout, 3, {padding = d, dilation = d, bias = false}),
                       nn.BatchNorm2d(cout), nn.ReLU())
end

local ASPP = nn.Module:subclass('ASPP')
M.classes.ASPP = ASPP

--- ASPP(in_channels, atrous_rates, out_channels = 256)
function ASPP:__init(cin, rates, cout)
  nn.Module.__init(self)
  cout = cout or 256
  local convs = {nn.Sequential(nn.Conv2d(cin, cout, 1, {bias = false}), nn.BatchNorm2d(cout), nn.ReLU())}
  for _, r in ipairs(rates) do convs[#convs + 1] = aspp_conv(cin, cout, r) end
  convs[#convs + 1] = ASPPPooling(cin, cout)
  self.convs = nn.ModuleList(convs)
  self.project = nn.Sequential(nn.Conv2d(#convs * cout, cout, 1, {bias = false}), nn.BatchNorm2d(cout),
                               nn.ReLU(), nn.Dropout(0.5))
end

function ASPP:forward(x)
  local res = {}
  for i, c in ipairs(self.convs) do res[i] = c(x) end
  return self.project(flow.cat(res, 2))
end

local DeepLabHead = nn.Sequential:subclass('DeepLabHead')
M.classes.DeepLabHead = DeepLabHead
function DeepLabHead:__init(cin, num_classes)
  nn.Sequential.__init(self, ASPP(cin, {12, 24, 36}), nn.Conv2d(256, 256, 3, {padding = 1, bias = false}),
                       nn.BatchNorm2d(256), nn.ReLU(), nn.Conv2d(256, num_classes, 1))
end

------------------------------------------------------------------ model
local Simple = nn.Module:subclass('SimpleSegmentationModel')
M.classes.SimpleSegmentationModel = Simple

function Simple:__init(backbone, classifier, aux)
  nn.Module.__init(self)
  self.backbone, self.classifier = backbone, classifier
  if aux then self.aux_classifier = aux end
end

--- x [N, 3, H, W] -> {out = logits [N, C, H, W], aux = ... (with aux_loss)}
function Simple:forward(x)
  local h, w = x:size(3), x:size(4)
  local feats, names = self.backbone(x)
  local byname = {}
  for i, n in ipairs(names) do byname[n] = feats[i] end
  local res = {out = upsample(self.classifier(byname.out), h, w)}
  if self.aux_classifier ~= nil then res.aux = upsample(self.aux_classifier(byname.aux), h, w) end
  return res
end

local function dilated_resnet50(aux)
  local resnet = require 'flowvision.models.resnet'
  local r = resnet.models.resnet50({replace_stride_with_dilation = {false, true, true}})
  local ret = {layer4 = 'out'}
  if aux then ret.layer3 = 'aux' end
  return U.IntermediateLayerGetter(r, ret, 8)
end

--- fcn_resnet50{num_classes = 21, aux_loss = false}
function M.models.fcn_resnet50(o)
  o = o or {}
  local nc = o.num_classes or 21
  return Simple(dilated_resnet50(o.aux_loss), FCNHead(2048, nc), o.aux_loss and FCNHead(1024, nc) or nil)
end

--- deeplabv3_resnet50{num_classes = 21, aux_loss = false}
function M.models.deeplabv3_resnet50(o)
  o = o or {}
  local nc = o.num_classes or 21
  return Simple(dilated_resnet50(o.aux_loss), DeepLabHead(2048, nc), o.aux_loss and FCNHead(1024, nc) or nil)
end

-- flowvision's names for the COCO-trained variants
M.models.fcn_resnet50_coco = M.models.fcn_resnet50
M.models.deeplabv3_resnet50_coco = M.models.deeplabv3_resnet50

return M
