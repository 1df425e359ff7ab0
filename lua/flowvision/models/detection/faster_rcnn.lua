-- flowvision.models.detection.faster_rcnn: Faster R-CNN (Ren et al.) with a
-- ResNet-50-FPN backbone, as torchvision's fasterrcnn_resnet50_fpn, with its
-- names: backbone.body.*, backbone.fpn.{inner_blocks,layer_blocks}.N.0,
-- rpn.head.{conv.0.0, cls_logits, bbox_pred}, roi_heads.box_head.{fc6, fc7},
-- roi_heads.box_predictor.{cls_score, bbox_pred}.
--
-- Inference only (no training losses): model:eval(); model(images) with
-- images a list of [3, H, W] tensors in [0, 1] (or a [N, 3, H, W] tensor)
-- returns one table per image {boxes = [K, 4] (x1, y1, x2, y2, original
-- pixels), scores = [K], labels = [K] int64}. Labels are 1-based columns of
-- the class scores, i.e. torchvision's label + 1 (column 1 is background,
-- so a COCO category id c is reported as c + 1).
local flow = require 'oneflow'
local ops = require 'flowvision.models.detection.ops'
local U = require 'flowvision.models.detection._utils'
local mops = require 'flowvision.models._ops'

local nn, F = flow.nn, flow.nn.functional
local M = {classes = {}}

--- [N, A*C, H, W] per level -> [N, sum HWA, C] (torchvision's permute_and_flatten + cat)
function M.concat_levels(list, c)
  local out = {}
  for i, t in ipairs(list) do
    local n, h, w = t:size(1), t:size(3), t:size(4)
    out[i] = t:view(n, -1, c, h, w):permute(1, 4, 5, 2, 3):reshape(n, -1, c)
  end
  return flow.cat(out, 2)
end

local function index(t, idx) return t:index_select(1, idx) end

------------------------------------------------------------------ RPN
local RPNHead = nn.Module:subclass('RPNHead')
M.classes.RPNHead = RPNHead

function RPNHead:__init(cin, num_anchors, conv_depth)
  nn.Module.__init(self)
  local convs = {}
  for i = 1, conv_depth or 1 do
    convs[i] = mops.Conv2dNormActivation(cin, cin, {kernel_size = 3, norm_layer = false})
  end
  self.conv = nn.Sequential(unpack(convs))
  self.cls_logits = nn.Conv2d(cin, num_anchors, 1, 1)
  self.bbox_pred = nn.Conv2d(cin, num_anchors * 4, 1, 1)
  for _, m in ipairs(self:modules()) do
    if mops.is_a(m, nn.Conv2d) then
      nn.init.normal_(m.weight, {std = 0.01})
      nn.init.zeros_(m.bias)
    end
  end
end

function RPNHead:forward(x)
  local logits, reg = {}, {}
  for i, f in ipairs(x) do
    local t = self.conv(f)
    logits[i], reg[i] = self.cls_logits(t), self.bbox_pred(t)
  end
  return logits, reg
end

local RPN = nn.Module:subclass('RegionProposalNetwork')
M.classes.RegionProposalNetwork = RPN

function RPN:__init(anchor_generator, head, o)
  nn.Module.__init(self)
  self.anchor_generator, self.head = anchor_generator, head
  self.box_coder = ops.BoxCoder.new({1, 1, 1, 1})
  self.pre_nms_top_n, self.post_nms_top_n = o.pre_nms_top_n, o.post_nms_top_n
  self.nms_thresh, self.score_thresh, self.min_size = o.nms_thresh, o.score_thresh or 0, 1e-3
end

--- forward(images [N, C, H, W], sizes, features list) -> list of proposals [Ki, 4]
function RPN:forward(images, sizes, features)
  local objectness, deltas = self.head(features)
  local n = images:size(1)
  local anchors = self.anchor_generator({images:size(3), images:size(4)}, features, n)
  local per_level = {}
  for i, o in ipairs(objectness) do per_level[i] = o:size(2) * o:size(3) * o:size(4) end
  local obj = M.concat_levels(objectness, 1):reshape(n, -1)
  local reg = M.concat_levels(deltas, 4)
  local pre = self.training and self.pre_nms_top_n.training or self.pre_nms_top_n.testing
  local post = self.training and self.post_nms_top_n.training or self.post_nms_top_n.testing
  local result = {}
  for b = 1, n do
    local props = self.box_coder:decode_single(reg[b]:detach(), anchors[b])
    local ob = obj[b]:detach()
    -- top-n per level
    local idx, lvl, offset = {}, {}, 0
    for l, cnt in ipairs(per_level) do
      local k = math.min(pre, cnt)
      local _, top = ob:narrow(1, offset + 1, cnt):topk(k, 1)
      idx[l] = top + offset
      lvl[l] = flow.full({k}, l, {dtype = flow.int64})
      offset = offset + cnt
    end
    local sel = flow.cat(idx, 1)
    local levels = flow.cat(lvl, 1)
    local boxes = U.clip(index(props, sel), sizes[b])
    local scores = index(ob, sel):sigmoid()
    local keep = ops.remove_small_boxes(boxes, self.min_size)
    boxes, scores, levels = index(boxes, keep), index(scores, keep), index(levels, keep)
    keep = scores:ge(self.score_thresh):nonzero():reshape(-1)
    boxes, scores, levels = index(boxes, keep), index(scores, keep), index(levels, keep)
    keep = ops.batched_nms(boxes, scores, levels, self.nms_thresh)
    keep = keep:narrow(1, 1, math.min(post, keep:size(1)))
    result[b] = index(boxes, keep)
  end
  return result
end

------------------------------------------------------------------ RoI heads
local TwoMLPHead = nn.Module:subclass('TwoMLPHead')
M.classes.TwoMLPHead = TwoMLPHead
function TwoMLPHead:__init(cin, rep)
  nn.Module.__init(self)
  self.fc6 = nn.Linear(cin, rep)
  self.fc7 = nn.Linear(rep, rep)
end
function TwoMLPHead:forward(x) return F.relu(self.fc7(F.relu(self.fc6(x:flatten(2))))) end

local FastRCNNPredictor = nn.Module:subclass('FastRCNNPredictor')
M.classes.FastRCNNPredictor = FastRCNNPredictor
function FastRCNNPredictor:__init(cin, num_classes)
  nn.Module.__init(self)
  self.cls_score = nn.Linear(cin, num_classes)
  self.bbox_pred = nn.Linear(cin, num_classes * 4)
end
function FastRCNNPredictor:forward(x)
  x = x:flatten(2)
  return self.cls_score(x), self.bbox_pred(x)
end

local RoIHeads = nn.Module:subclass('RoIHeads')
M.classes.RoIHeads = RoIHeads

function RoIHeads:__init(pool, head, predictor, o)
  nn.Module.__init(self)
  self.box_roi_pool, self.box_head, self.box_predictor = pool, head, predictor
  self.box_coder = ops.BoxCoder.new({10, 10, 5, 5})
  self.score_thresh, self.nms_thresh, self.detections_per_img = o.score_thresh, o.nms_thresh, o.detections_per_img
end

function RoIHeads:forward(features, proposals, sizes)
  local x = self.box_roi_pool(features, proposals, sizes)
  local logits, reg = self.box_predictor(self.box_head(x))
  local nc = logits:size(2)
  local scores_all = F.softmax(logits, -1)
  local results, offset = {}, 0
  for b, props in ipairs(proposals) do
    local k = props:size(1)
    local boxes = self.box_coder:decode_single(reg:narrow(1, offset + 1, k), props):view(k, nc, 4)
    local scores = scores_all:narrow(1, offset + 1, k)
    offset = offset + k
    boxes = U.clip(boxes, sizes[b])
    local labels = flow.arange(1, nc + 1):view(1, -1):expand(k, nc)
    boxes = boxes:narrow(2, 2, nc - 1):reshape(-1, 4)
    scores = scores:narrow(2, 2, nc - 1):reshape(-1)
    labels = labels:narrow(2, 2, nc - 1):reshape(-1)
    local keep = scores:gt(self.score_thresh):nonzero():reshape(-1)
    boxes, scores, labels = index(boxes, keep), index(scores, keep), index(labels, keep)
    keep = ops.remove_small_boxes(boxes, 1e-2)
    boxes, scores, labels = index(boxes, keep), index(scores, keep), index(labels, keep)
    keep = ops.batched_nms(boxes, scores, labels, self.nms_thresh)
    keep = keep:narrow(1, 1, math.min(self.detections_per_img, keep:size(1)))
    results[b] = {boxes = index(boxes, keep), scores = index(scores, keep), labels = index(labels, keep)}
  end
  return results
end

------------------------------------------------------------------ FasterRCNN
local FasterRCNN = nn.Module:subclass('FasterRCNN')
M.classes.FasterRCNN = FasterRCNN

--- FasterRCNN(backbone, {num_classes = 91, min_size = 800, max_size = 1333,
-- image_mean, image_std, rpn_pre_nms_top_n_test = 1000, rpn_post_nms_top_n_test
-- = 1000, rpn_nms_thresh = 0.7, rpn_score_thresh = 0, box_score_thresh = 0.05,
-- box_nms_thresh = 0.5, box_detections_per_img = 100})
function FasterRCNN:__init(backbone, o)
  nn.Module.__init(self)
  o = o or {}
  self.transform = U.GeneralizedRCNNTransform(o.min_size or 800, o.max_size or 1333,
    o.image_mean or {0.485, 0.456, 0.406}, o.image_std or {0.229, 0.224, 0.225})
  self.backbone = backbone
  local c = backbone.out_channels
  local anchor = U.AnchorGenerator({{32}, {64}, {128}, {256}, {512}}, {{0.5, 1.0, 2.0}})
  self.rpn = RPN(anchor, RPNHead(c, anchor:num_anchors_per_location()[1]), {
    pre_nms_top_n = {training = o.rpn_pre_nms_top_n_train or 2000, testing = o.rpn_pre_nms_top_n_test or 1000},
    post_nms_top_n = {training = o.rpn_post_nms_top_n_train or 2000, testing = o.rpn_post_nms_top_n_test or 1000},
    nms_thresh = o.rpn_nms_thresh or 0.7, score_thresh = o.rpn_score_thresh or 0})
  local pool = ops.MultiScaleRoIAlign({'0', '1', '2', '3'}, 7, 2)
  self.roi_heads = RoIHeads(pool, TwoMLPHead(c * 49, 1024), FastRCNNPredictor(1024, o.num_classes or 91), {
    score_thresh = o.box_score_thresh or 0.05, nms_thresh = o.box_nms_thresh or 0.5,
    detections_per_img = o.box_detections_per_img or 100})
end

--- model(images) -> list of {boxes, scores, labels} (see the file header).
function FasterRCNN:forward(images)
  if self.training then
    error('FasterRCNN: training losses are not implemented; call model:eval() for inference', 2)
  end
  local batch, sizes, orig = self.transform(images)
  local feats, names = self.backbone(batch)
  local named = {}
  for i, n in ipairs(names) do named[n] = feats[i] end
  local proposals = self.rpn(batch, sizes, feats)
  local results = self.roi_heads(named, proposals, sizes)
  return self.transform:postprocess(results, sizes, orig)
end

--- fasterrcnn_resnet50_fpn{num_classes = 91, trainable_backbone_layers = 3,
-- frozen_bn = true (FrozenBatchNorm2d, as torchvision's pretrained model;
-- false: BatchNorm2d, as torchvision without weights), min_size, ...}
function M.fasterrcnn_resnet50_fpn(o)
  o = o or {}
  local backbone = U.resnet_fpn_backbone{depth = 50, trainable_layers = o.trainable_backbone_layers or 3,
                                         frozen_bn = o.frozen_bn}
  return FasterRCNN(backbone, o)
end

M.models = {fasterrcnn_resnet50_fpn = M.fasterrcnn_resnet50_fpn}

return M
