-- flowvision.models.detection.ssd: SSD300-VGG16 (Liu et al.) and
-- SSDLite320-MobileNetV3-Large as torchvision builds them, with its names:
-- SSD300: backbone.features.N (VGG16 up to conv4_3), backbone.scale_weight,
-- backbone.extra.N (conv5 + FC6/FC7, then conv8_2..conv11_2),
-- head.classification_head.module_list.N, head.regression_head.module_list.N.
-- SSDLite: backbone.features.{0,1} (MobileNetV3 split at the C4 expansion),
-- backbone.extra.N (3 Conv2dNormActivation each), head.*.module_list.N.{0,1}.
--
-- Inference only: model:eval(); model(images) -> one {boxes, scores,
-- labels} per image; labels are 1-based columns of the class scores
-- (torchvision's label + 1; column 1 is background).
local flow = require 'oneflow'
local ops = require 'flowvision.models.detection.ops'
local U = require 'flowvision.models.detection._utils'
local frcnn = require 'flowvision.models.detection.faster_rcnn'
local mops = require 'flowvision.models._ops'

local nn, F = flow.nn, flow.nn.functional
local M = {classes = {}}

------------------------------------------------------------------ heads
local ScoringHead = nn.Module:subclass('SSDScoringHead')
M.classes.SSDScoringHead = ScoringHead

function ScoringHead:__init(module_list, num_columns)
  nn.Module.__init(self)
  self.module_list = nn.ModuleList(module_list)
  self.num_columns = num_columns
end

function ScoringHead:forward(x)
  local out = {}
  for i, f in ipairs(x) do out[i] = self.module_list[i](f) end
  return frcnn.concat_levels(out, self.num_columns)
end

local function xavier(mods)
  for _, mod in ipairs(mods) do
    for _, m in ipairs(mod:modules()) do
      if mops.is_a(m, nn.Conv2d) then
        nn.init.xavier_uniform_(m.weight)
        if m.bias ~= nil then nn.init.zeros_(m.bias) end
      end
    end
  end
end

local function normal_init(mods)
  for _, mod in ipairs(mods) do
    for _, m in ipairs(mod:modules()) do
      if mops.is_a(m, nn.Conv2d) then
        nn.init.normal_(m.weight, {mean = 0, std = 0.03})
        if m.bias ~= nil then nn.init.zeros_(m.bias) end
      end
    end
  end
end

local SSDHead = nn.Module:subclass('SSDHead')
M.classes.SSDHead = SSDHead

--- SSDHead(in_channels, num_anchors, num_classes[, block]) with block(cin, cout)
-- the per-level predictor (default: a 3x3 conv).
function SSDHead:__init(in_channels, num_anchors, num_classes, block, init)
  nn.Module.__init(self)
  block = block or function(cin, cout) return nn.Conv2d(cin, cout, 3, {padding = 1}) end
  local cls, reg = {}, {}
  for i, c in ipairs(in_channels) do
    cls[i] = block(c, num_classes * num_anchors[i])
    reg[i] = block(c, 4 * num_anchors[i])
  end
  ;(init or xavier)(cls); (init or xavier)(reg)
  self.classification_head = ScoringHead(cls, num_classes)
  self.regression_head = ScoringHead(reg, 4)
end

function SSDHead:forward(x)
  return {bbox_regression = self.regression_head(x), cls_logits = self.classification_head(x)}
end

------------------------------------------------------------------ SSD
local SSD = nn.Module:subclass('SSD')
M.classes.SSD = SSD

--- SSD(backbone, anchor_generator, size {w, h}, num_classes, {image_mean,
-- image_std, head, score_thresh = 0.01, nms_thresh = 0.45,
-- detections_per_img = 200, topk_candidates = 400})
function SSD:__init(backbone, anchor_generator, size, num_classes, o)
  nn.Module.__init(self)
  o = o or {}
  self.backbone, self.anchor_generator = backbone, anchor_generator
  self.box_coder = ops.BoxCoder.new({10, 10, 5, 5})
  self.head = o.head or SSDHead(backbone.out_channels, anchor_generator:num_anchors_per_location(), num_classes)
  self.transform = U.GeneralizedRCNNTransform(math.min(size[1], size[2]), math.max(size[1], size[2]),
    o.image_mean or {0.485, 0.456, 0.406}, o.image_std or {0.229, 0.224, 0.225},
    {size_divisible = 1, fixed_size = size})
  self.score_thresh, self.nms_thresh = o.score_thresh or 0.01, o.nms_thresh or 0.45
  self.detections_per_img, self.topk_candidates = o.detections_per_img or 200, o.topk_candidates or 400
end

function SSD:postprocess_detections(head, anchors, sizes)
  local results = {}
  local all_scores = F.softmax(head.cls_logits, -1)
  for b = 1, #anchors do
    local boxes = U.clip(self.box_coder:decode_single(head.bbox_regression[b], anchors[b]), sizes[b])
    local scores = all_scores[b]
    local nc = scores:size(2)
    local bl, sl, ll = {}, {}, {}
    for label = 2, nc do
      local s = scores:select(2, label)
      local keep = s:gt(self.score_thresh):nonzero():reshape(-1)
      s = s:index_select(1, keep)
      local k = math.min(self.topk_candidates, s:size(1))
      local top, idx = s:topk(k, 1)
      bl[#bl + 1] = boxes:index_select(1, keep:index_select(1, idx))
      sl[#sl + 1] = top
      ll[#ll + 1] = flow.full({k}, label, {dtype = flow.int64})
    end
    local ib, is, il = flow.cat(bl, 1), flow.cat(sl, 1), flow.cat(ll, 1)
    local keep = ops.batched_nms(ib, is, il, self.nms_thresh)
    keep = keep:narrow(1, 1, math.min(self.detections_per_img, keep:size(1)))
    results[b] = {boxes = ib:index_select(1, keep), scores = is:index_select(1, keep),
                  labels = il:index_select(1, keep)}
  end
  return results
end

function SSD:forward(images)
  if self.training then
    error('SSD: training losses are not implemented; call model:eval() for inference', 2)
  end
  local batch, sizes, orig = self.transform(images)
  local feats = self.backbone(batch)
  local head = self.head(feats)
  local anchors = self.anchor_generator({batch:size(3), batch:size(4)}, feats, batch:size(1))
  return self.transform:postprocess(self:postprocess_detections(head, anchors, sizes), sizes, orig)
end

------------------------------------------------------------------ VGG16 feature extractor
local VGGExtractor = nn.Module:subclass('SSDFeatureExtractorVGG')
M.classes.SSDFeatureExtractorVGG = VGGExtractor

local function seq(...) return nn.Sequential(...) end

function VGGExtractor:__init(features, highres)
  nn.Module.__init(self)
  local pools = {}
  for i = 1, #features do
    if mops.is_a(features[i], nn.MaxPool2d) then pools[#pools + 1] = i end
  end
  features[pools[3]].ceil_mode = true
  self.scale_weight = nn.Parameter(flow.full({512}, 20))
  local head = {}
  for i = 1, pools[4] - 1 do head[i] = features[i] end
  self.features = nn.Sequential(unpack(head))
  local extra = {
    seq(nn.Conv2d(1024, 256, 1), nn.ReLU(), nn.Conv2d(256, 512, 3, {padding = 1, stride = 2}), nn.ReLU()),
    seq(nn.Conv2d(512, 128, 1), nn.ReLU(), nn.Conv2d(128, 256, 3, {padding = 1, stride = 2}), nn.ReLU()),
    seq(nn.Conv2d(256, 128, 1), nn.ReLU(), nn.Conv2d(128, 256, 3), nn.ReLU()),
    seq(nn.Conv2d(256, 128, 1), nn.ReLU(), nn.Conv2d(128, 256, 3), nn.ReLU()),
  }
  if highres then
    extra[#extra + 1] = seq(nn.Conv2d(256, 128, 1), nn.ReLU(), nn.Conv2d(128, 256, 4), nn.ReLU())
  end
  xavier(extra)
  local fc = seq(nn.MaxPool2d(3, {stride = 1, padding = 1}),
                 nn.Conv2d(512, 1024, 3, {padding = 6, dilation = 6}), nn.ReLU(),
                 nn.Conv2d(1024, 1024, 1), nn.ReLU())
  xavier({fc})
  local first = {}
  for i = pools[4], #features - 1 do first[#first + 1] = features[i] end
  first[#first + 1] = fc
  table.insert(extra, 1, nn.Sequential(unpack(first)))
  self.extra = nn.ModuleList(extra)
  self.out_channels = {512, 1024, 512, 256, 256, 256}
  if highres then self.out_channels[7] = 256 end
end

function VGGExtractor:forward(x)
  x = self.features(x)
  local out = {self.scale_weight:view(1, -1, 1, 1) * F.normalize(x, {dim = 2})}
  for _, block in ipairs(self.extra) do
    x = block(x)
    out[#out + 1] = x
  end
  return out
end

--- ssd300_vgg16{num_classes = 91, score_thresh = 0.01, nms_thresh = 0.45,
-- detections_per_img = 200, topk_candidates = 400}
function M.ssd300_vgg16(o)
  o = o or {}
  local vgg = require 'flowvision.models.vgg'
  local features = vgg.make_layers(vgg.cfgs.D, false)
  local backbone = VGGExtractor(features, false)
  local anchor = U.DefaultBoxGenerator({{2}, {2, 3}, {2, 3}, {2, 3}, {2}, {2}},
    {scales = {0.07, 0.15, 0.33, 0.51, 0.69, 0.87, 1.05}, steps = {8, 16, 32, 64, 100, 300}})
  local opts = {image_mean = {0.48235, 0.45882, 0.40784}, image_std = {1 / 255, 1 / 255, 1 / 255}}
  for k, v in pairs(o) do opts[k] = v end
  return SSD(backbone, anchor, {300, 300}, o.num_classes or 91, opts)
end

------------------------------------------------------------------ SSDLite
local MobileExtractor = nn.Module:subclass('SSDLiteFeatureExtractorMobileNet')
M.classes.SSDLiteFeatureExtractorMobileNet = MobileExtractor

local function extra_block(cin, cout, norm)
  local mid = math.floor(cout / 2)
  local relu6 = mops.act(nn.ReLU6)
  return nn.Sequential(
    mops.Conv2dNormActivation(cin, mid, {kernel_size = 1, norm_layer = norm, activation_layer = relu6}),
    mops.Conv2dNormActivation(mid, mid, {kernel_size = 3, stride = 2, groups = mid, norm_layer = norm,
                                         activation_layer = relu6}),
    mops.Conv2dNormActivation(mid, cout, {kernel_size = 1, norm_layer = norm, activation_layer = relu6}))
end

-- a Sequential whose children keep the given names ({name, module} pairs)
local function named_seq(list) return nn.Sequential(list) end

--- features: MobileNetV3's features; c4: 1-based position of the C4 block.
function MobileExtractor:__init(features, c4, norm, width_mult, min_depth)
  nn.Module.__init(self)
  local first, second = {}, {}
  for i = 1, c4 - 1 do first[#first + 1] = {tostring(i - 1), features[i]} end
  local block = features[c4].block
  first[#first + 1] = {tostring(c4 - 1), block[1]}
  local rest = {}
  for i = 2, #block do rest[#rest + 1] = {tostring(i - 1), block[i]} end
  second[1] = {'0', named_seq(rest)}
  for i = c4 + 1, #features do second[#second + 1] = {tostring(i - c4), features[i]} end
  self.features = nn.Sequential(named_seq(first), named_seq(second))
  local depth = function(d) return math.max(min_depth or 16, math.floor(d * (width_mult or 1))) end
  local last = features[#features].out_channels
  local extra = {extra_block(last, depth(512), norm), extra_block(depth(512), depth(256), norm),
                 extra_block(depth(256), depth(256), norm), extra_block(depth(256), depth(128), norm)}
  normal_init(extra)
  self.extra = nn.ModuleList(extra)
end

function MobileExtractor:forward(x)
  local out = {}
  for _, block in ipairs(self.features) do
    x = block(x)
    out[#out + 1] = x
  end
  for _, block in ipairs(self.extra) do
    x = block(x)
    out[#out + 1] = x
  end
  return out
end

--- ssdlite320_mobilenet_v3_large{num_classes = 91, reduced_tail = true
-- (torchvision's choice without backbone weights), score_thresh = 0.001,
-- nms_thresh = 0.55, detections_per_img = 300, topk_candidates = 300}
function M.ssdlite320_mobilenet_v3_large(o)
  o = o or {}
  local mobilenet = require 'flowvision.models.mobilenet'
  local norm = function(c) return nn.BatchNorm2d(c, {eps = 0.001, momentum = 0.03}) end
  local reduced = o.reduced_tail ~= false
  local setting, last = mobilenet.mobilenet_v3_conf('mobilenet_v3_large', {reduced_tail = reduced})
  local net = mobilenet.classes.MobileNetV3(setting, last, {norm_layer = norm})
  normal_init({net})
  local c4
  for i, cnf in ipairs(setting) do if cnf.stride > 1 then c4 = i + 1 end end
  local backbone = MobileExtractor(net.features, c4, norm)
  -- output channels: C4 expansion, last features conv, then the extras
  local outc = {setting[c4 - 1].expanded_channels, net.features[#net.features].out_channels, 512, 256, 256, 128}
  backbone.out_channels = outc
  local anchor = U.DefaultBoxGenerator({{2, 3}, {2, 3}, {2, 3}, {2, 3}, {2, 3}, {2, 3}},
                                       {min_ratio = 0.2, max_ratio = 0.95})
  local nc = o.num_classes or 91
  local block = function(cin, cout)
    return nn.Sequential(mops.Conv2dNormActivation(cin, cin, {kernel_size = 3, groups = cin, norm_layer = norm,
                                                              activation_layer = mops.act(nn.ReLU6)}),
                         nn.Conv2d(cin, cout, 1))
  end
  local head = SSDHead(outc, anchor:num_anchors_per_location(), nc, block, normal_init)
  local opts = {score_thresh = 0.001, nms_thresh = 0.55, detections_per_img = 300, topk_candidates = 300,
                image_mean = {0.5, 0.5, 0.5}, image_std = {0.5, 0.5, 0.5}, head = head}
  for k, v in pairs(o) do if k ~= 'reduced_tail' then opts[k] = v end end
  return SSD(backbone, anchor, {320, 320}, nc, opts)
end

M.models = {ssd300_vgg16 = M.ssd300_vgg16, ssdlite320_mobilenet_v3_large = M.ssdlite320_mobilenet_v3_large}

return M
