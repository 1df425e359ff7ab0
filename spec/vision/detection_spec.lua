-- flowvision detection, segmentation and style transfer: the box operations
-- (box_iou, box_convert, nms, batched_nms, roi_align, anchors) against
-- hand-computed values; SSD300/SSDLite/RetinaNet/Faster R-CNN, FCN,
-- DeepLabV3 and StyleNet build with torchvision's parameter counts and
-- state-dict sizes (hard-coded) and run; and -- when $FLOWVISION_PYTHON
-- (default /usr/bin/python3) can import torch and torchvision -- names,
-- shapes and eval outputs (detections, segmentation maps, stylised images)
-- against torchvision / the PyTorch example (the ResNet-based ones in
-- float64), written by tools/export_timm.py into a temporary directory
-- (pending otherwise).
local flow = require 'oneflow'
local models = require 'flowvision.models'
local ops = require 'flowvision.models.detection.ops'
local U = require 'flowvision.models.detection._utils'
local H = require 'spec.helpers'

-- {family, name, options, {torchvision's parameter count, state-dict size}}:
-- the configurations of tools/export_timm.py
local CASES = {
  {'detection', 'fasterrcnn_resnet50_fpn', {num_classes = 5, min_size = 96, max_size = 128, box_score_thresh = 0,
    rpn_pre_nms_top_n_test = 200, rpn_post_nms_top_n_test = 50, box_detections_per_img = 20}, {41314536, 295}},
  {'detection', 'retinanet_resnet50_fpn', {num_classes = 5, min_size = 96, max_size = 128, score_thresh = 0,
    topk_candidates = 100, detections_per_img = 20}, {32230929, 301}},
  {'detection', 'ssdlite320_mobilenet_v3_large', {num_classes = 5, score_thresh = 0, topk_candidates = 50,
    detections_per_img = 20}, {2248100, 476}},
  {'detection', 'ssd300_vgg16', {num_classes = 5, score_thresh = 0, topk_candidates = 50,
    detections_per_img = 20}, {24146894, 71}},
  {'segmentation', 'fcn_resnet50', {num_classes = 5, aux_loss = true}, {35309898, 334}},
  {'segmentation', 'deeplabv3_resnet50', {num_classes = 5, aux_loss = true}, {41995850, 370}},
  {'stylenet', 'stylenet', {}, {1679235, 62}},
}

-- computed in float64 by the reference (deep random ResNets amplify float32 rounding)
local DOUBLE = {fasterrcnn_resnet50_fpn = true, retinanet_resnet50_fpn = true, fcn_resnet50 = true,
                deeplabv3_resnet50 = true, ssdlite320_mobilenet_v3_large = true}

local function build(c) return require('flowvision.models.' .. c[1]).models[c[2]](c[3]) end

local function count(m)
  local n = 0
  for _, p in m:named_parameters() do n = n + p:numel() end
  return n
end

local function nkeys(sd)
  local n = 0
  for _ in pairs(sd) do n = n + 1 end
  return n
end

local function rel_err(y, ref)
  local scale = ref:abs():max():item()
  return (y - ref):abs():max():item() / (scale > 0 and scale or 1)
end

------------------------------------------------------------------ torchvision export (background)
local PY = os.getenv('FLOWVISION_PYTHON') or '/usr/bin/python3'
local TV = os.execute(PY .. ' -c "import torch, torchvision" >/dev/null 2>&1') == 0
local export = H.background_export(TV, function(dir)
  local names = {}
  for i, c in ipairs(CASES) do names[i] = c[2] end
  return ('%s tools/export_timm.py %s %s'):format(PY, dir, table.concat(names, ' '))
end)
local exported = export.wait

local built = {}

describe('flowvision.models.detection.ops', function()
  local b = flow.tensor({{0, 0, 10, 10}, {1, 1, 11, 11}, {20, 20, 30, 30}, {0, 0, 10, 20}})

  it('box_area, box_iou and generalized_box_iou', function()
    H.close(ops.box_area(b), {100, 100, 100, 200})
    -- boxes 1 and 2 overlap 9x9 = 81 of a union 119; box 4 contains box 1
    H.close(ops.box_iou(b:narrow(1, 1, 2), b), {{1, 81 / 119, 0, 0.5}, {81 / 119, 1, 0, 90 / 210}}, 1e-6)
    -- GIoU of disjoint boxes 1 and 3: 0 - (900 - 200) / 900
    H.close(ops.generalized_box_iou(b:narrow(1, 1, 1), b:narrow(1, 3, 1)), {{-700 / 900}}, 1e-6)
  end)

  it('box_convert between xyxy, xywh and cxcywh', function()
    H.close(ops.box_convert(b:narrow(1, 4, 1), 'xyxy', 'xywh'), {{0, 0, 10, 20}})
    H.close(ops.box_convert(b:narrow(1, 4, 1), 'xyxy', 'cxcywh'), {{5, 10, 10, 20}})
    H.close(ops.box_convert(flow.tensor({{5, 10, 10, 20}}), 'cxcywh', 'xyxy'), {{0, 0, 10, 20}})
    H.close(ops.box_convert(flow.tensor({{1, 2, 3, 4}}), 'xywh', 'xyxy'), {{1, 2, 4, 6}})
    H.raises(function() ops.box_convert(b, 'xyxy', 'yolo') end, 'box_convert', 'yolo')
  end)

  it('clip_boxes_to_image and remove_small_boxes (1-based indices)', function()
    H.close(ops.clip_boxes_to_image(flow.tensor({{-5, 3, 50, 70}}), {60, 40}), {{0, 3, 40, 60}})
    local keep = ops.remove_small_boxes(flow.tensor({{0, 0, 1, 5}, {0, 0, 0.5, 5}, {2, 2, 4, 4}}), 1)
    assert.same({1, 3}, keep:totable())
    assert.equal(flow.int64, keep.dtype)
  end)

  it('nms keeps the best box of each overlapping group, 1-based, by decreasing score', function()
    local s = flow.tensor({0.8, 0.9, 0.7, 0.1})
    -- IoU(1, 2) = 0.68, IoU(1, 4) = 0.5, IoU(2, 4) = 0.43
    assert.same({2, 3, 4}, ops.nms(b, s, 0.5):totable())
    assert.same({2, 3}, ops.nms(b, s, 0.4):totable())
    assert.same({2, 1, 3, 4}, ops.nms(b, s, 0.7):totable())
    assert.equal(0, ops.nms(flow.zeros(0, 4), flow.zeros(0), 0.5):numel())
    -- batched: box 1 (class 1) and box 2 (class 2) do not suppress each other
    assert.same({2, 1, 3}, ops.batched_nms(b, s, flow.tensor({1, 2, 1, 1}), 0.45):totable())
    assert.same({2, 3, 4}, ops.batched_nms(b, s, flow.tensor({1, 1, 1, 1}), 0.5):totable())
  end)

  it('roi_align samples bilinearly (exact on a linear map)', function()
    -- f(y, x) = 4y + x on a 4x4 map: the bin average is f at the mean sample point
    local f = flow.arange(0, 16):float():view(1, 1, 4, 4)
    -- aligned: box (0, 0, 4, 4) starts at -0.5; 2x2 bins of 2 samples each
    local y = ops.roi_align(f, {flow.tensor({{0, 0, 4, 4}})}, 2, {sampling_ratio = 2, aligned = true})
    H.close(y, {{{{2.5, 4.5}, {10.5, 12.5}}}}, 1e-6)
    -- not aligned: box (0, 0, 3, 3), one bin, samples at 0.75 and 2.25
    H.close(ops.roi_align(f, {flow.tensor({{0, 0, 3, 3}})}, 1, {sampling_ratio = 2}), {{{{7.5}}}}, 1e-6)
    -- spatial_scale and the [K, 5] form with a 1-based image index
    H.close(ops.roi_align(f, flow.tensor({{1, 0, 0, 6, 6}}), {1, 1}, {spatial_scale = 0.5, sampling_ratio = 2}),
            {{{{7.5}}}}, 1e-6)
    -- a sample on the last row/column is clamped to it; samples far outside give 0
    H.close(ops.roi_align(f, {flow.tensor({{2, 2, 4, 4}, {10, 10, 12, 12}})}, 1, {sampling_ratio = 1}),
            {{{{15}}}, {{{0}}}}, 1e-6)
    -- adaptive sampling (ratio <= 0): ceil(roi size / bins) samples per bin
    H.close(ops.roi_align(f, {flow.tensor({{0, 0, 2, 2}})}, 1, {sampling_ratio = -1, aligned = true}),
            {{{{2.5}}}}, 1e-6)
    H.raises(function() ops.roi_align(f, flow.tensor({{2, 0, 0, 1, 1}}), 1) end, 'batch index', '1..1')
  end)

  it('roi_align is differentiable: each output spreads its gradient with total weight 1', function()
    local f = flow.randn(1, 2, 6, 6, {requires_grad = true})
    local y = ops.roi_align(f, {flow.tensor({{0.5, 1.2, 4.3, 5}})}, {2, 3}, {sampling_ratio = 2})
    y:sum():backward()
    H.close(f.grad:sum(), 2 * 2 * 3, 1e-5)
  end)

  it('AnchorGenerator: torchvision base anchors and grid shifts', function()
    local ag = U.AnchorGenerator({{32}}, {{0.5, 1.0, 2.0}})
    H.close(ag.cell_anchors[1], {{-23, -11, 23, 11}, {-16, -16, 16, 16}, {-11, -23, 11, 23}})
    local a = ag({8, 12}, {flow.zeros(1, 1, 2, 3)}, 2)
    assert.equal(2, #a)
    assert.same({18, 4}, H.shape(a[1]))
    H.close(a[1]:narrow(1, 4, 1), {{-19, -11, 27, 11}})      -- second location: x shifted by 12 / 3
    H.close(a[1]:narrow(1, 10, 1), {{-23, -7, 23, 15}})      -- second row: y shifted by 8 / 2
  end)

  it('DefaultBoxGenerator: SSD300 default boxes', function()
    local g = U.DefaultBoxGenerator({{2}, {2, 3}, {2, 3}, {2, 3}, {2}, {2}},
      {scales = {0.07, 0.15, 0.33, 0.51, 0.69, 0.87, 1.05}, steps = {8, 16, 32, 64, 100, 300}})
    local sizes = {38, 19, 10, 5, 3, 1}
    local fms = {}
    for i, s in ipairs(sizes) do fms[i] = flow.zeros(1, 1, s, s) end
    local d = g({300, 300}, fms, 1)[1]
    assert.same({8732, 4}, H.shape(d))
    -- first box: centre 0.5 / 37.5 of 300 = 4, size 0.07 * 300 = 21
    H.close(d:narrow(1, 1, 1), {{-6.5, -6.5, 14.5, 14.5}}, 1e-4)
  end)

  it('BoxCoder decodes (with the width/height clip) and inverts encode', function()
    local bc = ops.BoxCoder.new({10, 10, 5, 5})
    local anchors = flow.tensor({{0, 0, 10, 20}, {5, 5, 15, 15}})
    local gt = flow.tensor({{1, 2, 11, 18}, {4, 6, 20, 12}})
    H.close(bc:decode_single(bc:encode_single(gt, anchors), anchors), gt, 1e-5)
    H.close(bc:decode_single(flow.zeros(2, 4), anchors), anchors, 1e-6)
  end)
end)

describe('flowvision detection / segmentation / style transfer models', function()
  it('are in the registry', function()
    local have = {}
    for _, n in ipairs(models.list()) do have[n] = true end
    for _, c in ipairs(CASES) do assert.is_true(have[c[2]], c[2]) end
  end)

  for _, c in ipairs(CASES) do
    it(c[2] .. ': torchvision parameter count and state-dict size, eval forward', function()
      flow.manual_seed(0)
      local m = build(c)
      assert.equal(c[4][1], count(m))
      assert.equal(c[4][2], nkeys(m:state_dict()))
      m:eval()
      built[c[2]] = m
      if c[1] == 'detection' then
        if c[2] == 'ssd300_vgg16' and TV then return end    -- 300x300 VGG16: covered by the parity test
        local img = flow.rand(3, 80, 96)
        local r = m({img})
        assert.equal(1, #r)
        local k = r[1].boxes:size(1)
        assert.same({k, 4}, H.shape(r[1].boxes))
        assert.same({k}, H.shape(r[1].scores))
        assert.equal(flow.int64, r[1].labels.dtype)
        if k > 0 then
          local lo = c[2] == 'retinanet_resnet50_fpn' and 1 or 2
          assert.is_true(r[1].labels:min():item() >= lo and r[1].labels:max():item() <= 5)
          assert.is_true(r[1].boxes:min():item() >= 0)
          assert.is_true(r[1].boxes:select(2, 3):max():item() <= 96 + 1e-3)
          assert.is_true(r[1].boxes:select(2, 4):max():item() <= 80 + 1e-3)
        end
        H.raises(function() m:train(); m({img}) end, 'not implemented', 'eval')
        m:eval()
      elseif c[1] == 'segmentation' then
        local x = flow.randn(1, 3, 32, 40)
        local out = m(x)
        assert.same({1, 5, 32, 40}, H.shape(out.out))
        assert.same({1, 5, 32, 40}, H.shape(out.aux))
      else
        assert.same({1, 3, 16, 20}, H.shape(m(flow.rand(1, 3, 16, 20) * 255)))
      end
    end)
  end

  it('DeepLabV3 trains: a backward step reaches the backbone', function()
    local m = models.create('deeplabv3_resnet50', {num_classes = 3})
    m:train()
    local out = m(flow.randn(2, 3, 24, 24)).out
    out:mean():backward()
    assert.is_true(m.backbone.conv1.weight.grad:abs():sum():item() > 0)
    assert.is_true(m.classifier[1].project[1].weight.grad:abs():sum():item() > 0)
  end)

  it('Faster R-CNN freezes the stem and layer1 by default (trainable_backbone_layers = 3)', function()
    local m = built.fasterrcnn_resnet50_fpn or build(CASES[1])
    assert.is_false(m.backbone.body.conv1.weight.requires_grad)
    assert.is_false(m.backbone.body.layer1[1].conv1.weight.requires_grad)
    assert.is_true(m.backbone.body.layer2[1].conv1.weight.requires_grad)
    assert.equal('FrozenBatchNorm2d', m.backbone.body.bn1.__name)
  end)

  teardown(export.remove)   -- the exported weights: about 700 MB

  for _, c in ipairs(CASES) do
    local check = TV and it or pending
    check(c[2] .. ' matches torchvision (names, shapes, eval outputs 1e-4)', function()
      local dir = exported()
      assert(export.ok, 'export_timm.py failed:\n' .. tostring(export.log))
      local sd = flow.load(dir .. '/' .. c[2] .. '.safetensors')
      local io = flow.load(dir .. '/' .. c[2] .. '.io.safetensors')
      local m = built[c[2]] or build(c)
      built[c[2]] = nil
      local mine = m:state_dict()
      for k, v in pairs(sd) do
        assert.is_not_nil(mine[k], 'missing ' .. k)
        assert.same(H.shape(v), H.shape(mine[k]), k)
      end
      assert.equal(nkeys(sd), nkeys(mine))
      if DOUBLE[c[2]] then m:double() end
      m:load_state_dict(sd)
      m:eval()
      if c[1] == 'detection' then
        local r = m({io.input[1]})[1]
        local want = io['boxes.0']
        assert.same(H.shape(want), H.shape(r.boxes))
        assert.is_true(rel_err(r.boxes, want) < 1e-4, 'boxes ' .. rel_err(r.boxes, want))
        assert.is_true(rel_err(r.scores, io['scores.0']) < 1e-4, 'scores')
        assert.same((io['labels.0'] + 1):totable(), r.labels:totable())
      elseif c[1] == 'segmentation' then
        local r = m(io.input)
        assert.is_true(rel_err(r.out, io.out) < 1e-4, 'out ' .. rel_err(r.out, io.out))
        assert.is_true(rel_err(r.aux, io.aux) < 1e-4, 'aux ' .. rel_err(r.aux, io.aux))
      else
        local y = m(io.input)
        assert.is_true(rel_err(y, io.output) < 1e-4, 'output ' .. rel_err(y, io.output))
      end
    end)
  end
end)
