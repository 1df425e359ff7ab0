-- flowvision.models.detection.retinanet: RetinaNet (Lin et al.) with a
-- ResNet-50-FPN backbone (P3-P7), as torchvision's retinanet_resnet50_fpn,
-- with its names: backbone.body.*, backbone.fpn.* (+ extra_blocks.p6/p7),
-- head.classification_head.{conv.N.0, cls_logits},
-- head.regression_head.{conv.N.0, bbox_reg}.
--
-- Inference only: model:eval(); model(images) -> one {boxes, scores,
-- labels} per image. RetinaNet's classes have no background column, so the
-- 1-based label is torchvision's label + 1 here too.
local flow = require 'oneflow'
local ops = require 'flowvision.models.detection.ops'
local U = require 'flowvision.models.detection._utils'
local frcnn = require 'flowvision.models.detection.faster_rcnn'
local mops = require 'flowvision.models._ops'

local nn = flow.nn
local M = {classes = {}}

local function conv_stack(c)
  local convs = {}
  for i = 1, 4 do convs[i] = mops.Conv2dNormActivation(c, c, {norm_layer = false}) end
  local seq = nn.Sequential(unpack(convs))
  for _, m in ipairs(seq:modules()) do
    if mops.is_a(m, nn.Conv2d) then
      nn.init.normal_(m.weight, {std = 0.01})
      nn.init.zeros_(m.bias)
    end
  end
  return seq
end

local ClsHead = nn.Module:subclass('RetinaNetClassificationHead')
M.classes.RetinaNetClassificationHead = ClsHead
function ClsHead:__init(c, num_anchors, num_classes, prior)
  nn.Module.__init(self)
  self.conv = conv_stack(c)
  self.cls_logits = nn.Conv2d(c, num_anchors * num_classes, 3, 1, 1)
  nn.init.normal_(self.cls_logits.weight, {std = 0.01})
  nn.init.constant_(self.cls_logits.bias, -math.log((1 - (prior or 0.01)) / (prior or 0.01)))
  self.num_classes = num_classes
end
function ClsHead:forward(x)
  local out = {}
  for i, f in ipairs(x) do out[i] = self.cls_logits(self.conv(f)) end
  return frcnn.concat_levels(out, self.num_classes)
end

local RegHead = nn.Module:subclass('RetinaNetRegressionHead')
M.classes.RetinaNetRegressionHead = RegHead
function RegHead:__init(c, num_anchors)
  nn.Module.__init(self)
  self.conv = conv_stack(c)
  self.bbox_reg = nn.Conv2d(c, num_anchors * 4, 3, 1, 1)
  nn.init.normal_(self.bbox_reg.weight, {std = 0.01})
  nn.init.zeros_(self.bbox_reg.bias)
end
function RegHead:forward(x)
  local out = {}
  for i, f in ipairs(x) do out[i] = self.bbox_reg(self.conv(f)) end
  return frcnn.concat_levels(out, 4)
end

local Head = nn.Module:subclass('RetinaNetHead')
M.classes.RetinaNetHead = Head
function Head:__init(c, num_anchors, num_classes)
  nn.Module.__init(self)
  self.classification_head = ClsHead(c, num_anchors, num_classes)
  self.regression_head = RegHead(c, num_anchors)
end
function Head:forward(x)
  return {cls_logits = self.classification_head(x), bbox_regression = self.regression_head(x)}
end

local RetinaNet = nn.Module:subclass('RetinaNet')
M.classes.RetinaNet = RetinaNet

--- RetinaNet(backbone, {num_classes = 91, min_size = 800, max_size = 1333,
-- score_thresh = 0.05, nms_thresh = 0.5, detections_per_img = 300,
-- topk_candidates = 1000})
function RetinaNet:__init(backbone, o)
  nn.Module.__init(self)
  o = o or {}
  self.backbone = backbone
  local sizes = {}
  for i, x in ipairs({32, 64, 128, 256, 512}) do
    sizes[i] = {x, math.floor(x * 2 ^ (1 / 3)), math.floor(x * 2 ^ (2 / 3))}
  end
  self.anchor_generator = U.AnchorGenerator(sizes, {{0.5, 1.0, 2.0}})
  self.head = Head(backbone.out_channels, self.anchor_generator:num_anchors_per_location()[1],
                   o.num_classes or 91)
  self.box_coder = ops.BoxCoder.new({1, 1, 1, 1})
  self.transform = U.GeneralizedRCNNTransform(o.min_size or 800, o.max_size or 1333,
    o.image_mean or {0.485, 0.456, 0.406}, o.image_std or {0.229, 0.224, 0.225})
  self.score_thresh, self.nms_thresh = o.score_thresh or 0.05, o.nms_thresh or 0.5
  self.detections_per_img, self.topk_candidates = o.detections_per_img or 300, o.topk_candidates or 1000
end

function RetinaNet:postprocess_detections(head, anchors, sizes, per_level)
  local results = {}
  for b = 1, #anchors do
    local boxes_l, scores_l, labels_l, offset = {}, {}, {}, 0
    for _, cnt in ipairs(per_level) do
      local logits = head.cls_logits[b]:narrow(1, offset + 1, cnt)
      local reg = head.bbox_regression[b]:narrow(1, offset + 1, cnt)
      local anc = anchors[b]:narrow(1, offset + 1, cnt)
      offset = offset + cnt
      local nc = logits:size(2)
      local scores = logits:sigmoid():reshape(-1)
      local keep = scores:gt(self.score_thresh):nonzero():reshape(-1)
      scores = scores:index_select(1, keep)
      local k = math.min(self.topk_candidates, keep:size(1))
      local top_scores, idxs = scores:topk(k, 1)
      local flat = keep:index_select(1, idxs) - 1                  -- 0-based flat index
      local anchor_idx = flat:floor_divide(nc) + 1
      labels_l[#labels_l + 1] = flat:remainder(nc) + 1
      local boxes = self.box_coder:decode_single(reg:index_select(1, anchor_idx), anc:index_select(1, anchor_idx))
      boxes_l[#boxes_l + 1] = U.clip(boxes, sizes[b])
      scores_l[#scores_l + 1] = top_scores
    end
    local boxes, scores, labels = flow.cat(boxes_l, 1), flow.cat(scores_l, 1), flow.cat(labels_l, 1)
    local keep = ops.batched_nms(boxes, scores, labels, self.nms_thresh)
    keep = keep:narrow(1, 1, math.min(self.detections_per_img, keep:size(1)))
    results[b] = {boxes = boxes:index_select(1, keep), scores = scores:index_select(1, keep),
                  labels = labels:index_select(1, keep)}
  end
  return results
end

function RetinaNet:forward(images)
  if self.training then
    error('RetinaNet: training losses are not implemented; call model:eval() for inference', 2)
  end
  local batch, sizes, orig = self.transform(images)
  local feats = self.backbone(batch)
  local head = self.head(feats)
  local anchors = self.anchor_generator({batch:size(3), batch:size(4)}, feats, batch:size(1))
  local per_level, a = {}, self.anchor_generator:num_anchors_per_location()[1]
  for i, f in ipairs(feats) do per_level[i] = f:size(3) * f:size(4) * a end
  local results = self:postprocess_detections(head, anchors, sizes, per_level)
  return self.transform:postprocess(results, sizes, orig)
end

--- retinanet_resnet50_fpn{num_classes = 91, trainable_backbone_layers = 3,
-- frozen_bn = true, min_size, max_size, score_thresh, ...}
function M.retinanet_resnet50_fpn(o)
  o = o or {}
  local backbone = U.resnet_fpn_backbone{depth = 50, trainable_layers = o.trainable_backbone_layers or 3,
    frozen_bn = o.frozen_bn, returned_layers = {2, 3, 4}, extra_blocks = U.LastLevelP6P7(256, 256)}
  return RetinaNet(backbone, o)
end

M.models = {retinanet_resnet50_fpn = M.retinanet_resnet50_fpn}

return M
