-- flowvision.models.detection.ops: box operations as torchvision.ops, written
-- in Lua over tensor ops (and plain LuaJIT loops for the greedy NMS).
--
--   box_area, box_iou, generalized_box_iou, box_convert ('xyxy', 'xywh',
--   'cxcywh'), clip_boxes_to_image, remove_small_boxes, nms, batched_nms,
--   roi_align, RoIAlign, MultiScaleRoIAlign, BoxCoder
--
-- Boxes are [N, 4] float tensors (x1, y1, x2, y2) unless said otherwise.
-- 1-based conventions: nms/batched_nms/remove_small_boxes return 1-based
-- int64 indices (usable with index_select); roi_align's [K, 5] box format
-- starts with the 1-based batch index of the image.
--
-- Performance: nms is O(n^2) in the worst case in plain Lua over the boxes'
-- memory (fine for the few thousand boxes of detection postprocessing);
-- roi_align loops over the boxes in Lua and does two small matmuls per box
-- on the part of the feature map the box covers (bilinear sampling is
-- separable, so each box is Wy @ F @ Wx^T); ~0.25 ms per box on 256
-- channels single-threaded (3000-box NMS: ~25 ms), differentiable with
-- respect to the input features.
local A = require 'oneflow._args'
local ffi = require 'ffi'
local flow = require 'oneflow'

local nn = flow.nn
local M = {}

local function check_boxes(b, op)
  if not flow.is_tensor(b) or b:dim() ~= 2 or b:size(2) ~= 4 then
    error(('%s: expected boxes of shape [N, 4], got %s'):format(op,
      flow.is_tensor(b) and ('[' .. table.concat(b:size():totable(), ',') .. ']') or type(b)), 3)
  end
end

local function col(b, i) return b:select(2, i) end

--- box_area(boxes) -> [N]
function M.box_area(boxes)
  check_boxes(boxes, 'box_area')
  return (col(boxes, 3) - col(boxes, 1)) * (col(boxes, 4) - col(boxes, 2))
end

local function inter_union(b1, b2)
  local a1, a2 = M.box_area(b1), M.box_area(b2)
  local lt = flow.maximum(b1:narrow(2, 1, 2):unsqueeze(2), b2:narrow(2, 1, 2):unsqueeze(1))   -- [N, M, 2]
  local rb = flow.minimum(b1:narrow(2, 3, 2):unsqueeze(2), b2:narrow(2, 3, 2):unsqueeze(1))
  local wh = (rb - lt):clamp(0, nil)
  local inter = wh:select(3, 1) * wh:select(3, 2)
  local union = a1:unsqueeze(2) + a2:unsqueeze(1) - inter
  return inter, union
end

--- box_iou(boxes1 [N, 4], boxes2 [M, 4]) -> [N, M]
function M.box_iou(b1, b2)
  check_boxes(b1, 'box_iou'); check_boxes(b2, 'box_iou')
  local inter, union = inter_union(b1, b2)
  return inter / union
end

--- generalized_box_iou(boxes1, boxes2) -> [N, M]
function M.generalized_box_iou(b1, b2)
  check_boxes(b1, 'generalized_box_iou'); check_boxes(b2, 'generalized_box_iou')
  local inter, union = inter_union(b1, b2)
  local iou = inter / union
  local lt = flow.minimum(b1:narrow(2, 1, 2):unsqueeze(2), b2:narrow(2, 1, 2):unsqueeze(1))
  local rb = flow.maximum(b1:narrow(2, 3, 2):unsqueeze(2), b2:narrow(2, 3, 2):unsqueeze(1))
  local wh = (rb - lt):clamp(0, nil)
  local area = wh:select(3, 1) * wh:select(3, 2)
  return iou - (area - union) / area
end

--- box_convert(boxes, in_fmt, out_fmt) with formats 'xyxy', 'xywh', 'cxcywh'.
function M.box_convert(boxes, in_fmt, out_fmt)
  local fmts = {xyxy = true, xywh = true, cxcywh = true}
  if not fmts[in_fmt] or not fmts[out_fmt] then
    error(("box_convert: formats must be 'xyxy', 'xywh' or 'cxcywh', got '%s' and '%s'"):format(
      tostring(in_fmt), tostring(out_fmt)), 2)
  end
  check_boxes(boxes, 'box_convert')
  if in_fmt == out_fmt then return boxes:clone() end
  local a, b, c, d = col(boxes, 1), col(boxes, 2), col(boxes, 3), col(boxes, 4)
  local x1, y1, x2, y2
  if in_fmt == 'xyxy' then x1, y1, x2, y2 = a, b, c, d
  elseif in_fmt == 'xywh' then x1, y1, x2, y2 = a, b, a + c, b + d
  else x1, y1, x2, y2 = a - 0.5 * c, b - 0.5 * d, a + 0.5 * c, b + 0.5 * d end
  if out_fmt == 'xyxy' then return flow.stack({x1, y1, x2, y2}, 2) end
  if out_fmt == 'xywh' then return flow.stack({x1, y1, x2 - x1, y2 - y1}, 2) end
  return flow.stack({(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1}, 2)
end

--- clip_boxes_to_image(boxes [..., 4], {height, width})
function M.clip_boxes_to_image(boxes, size)
  local h, w = size[1], size[2]
  local shape = boxes:size():totable()
  local b = boxes:reshape(-1, 2, 2)                  -- (x, y) pairs
  local xs = b:select(3, 1):clamp(0, w)
  local ys = b:select(3, 2):clamp(0, h)
  return flow.stack({xs, ys}, 3):reshape(shape)
end

--- remove_small_boxes(boxes, min_size) -> 1-based int64 indices of the boxes
-- whose width and height are both >= min_size.
function M.remove_small_boxes(boxes, min_size)
  check_boxes(boxes, 'remove_small_boxes')
  local ws, hs = col(boxes, 3) - col(boxes, 1), col(boxes, 4) - col(boxes, 2)
  local keep = ws:ge(min_size):logical_and(hs:ge(min_size))
  if boxes:size(1) == 0 then return flow.zeros(0, {dtype = flow.int64}) end
  return keep:nonzero():reshape(-1)
end

------------------------------------------------------------------ nms
-- a float64 pointer to t's values; the converted tensor stays in `pinned`
-- (so it is not collected) until unpin()
local pinned = {}
local function ptr64(t)
  -- the loops read host memory: device boxes are copied over
  local v = t:detach():cpu():to(flow.float64):contiguous()
  -- a NaN keeps its payload through the ops; LuaJIT would read a NaN whose
  -- payload looks like a type tag as a bogus object, so NaNs are made Lua's own
  v = v:masked_fill(v:isnan(), 0 / 0)
  pinned[#pinned + 1] = v
  return ffi.cast('double *', v:data_ptr())
end
local function unpin() for i = #pinned, 1, -1 do pinned[i] = nil end end

-- greedy suppression over `order` (0-based box ids sorted by score);
-- `group` (0-based ids -> class) limits suppression to equal classes
local function greedy(bp, order, thr, group)
  local n = #order
  local suppressed, keep = {}, {}
  for a = 1, n do
    local i = order[a]
    if not suppressed[i] then
      keep[#keep + 1] = i
      local x1, y1, x2, y2 = bp[4 * i], bp[4 * i + 1], bp[4 * i + 2], bp[4 * i + 3]
      local area_i = (x2 - x1) * (y2 - y1)
      local gi = group and group[i]
      for c = a + 1, n do
        local j = order[c]
        if not suppressed[j] and (not group or group[j] == gi) then
          local xx1, yy1 = math.max(x1, bp[4 * j]), math.max(y1, bp[4 * j + 1])
          local xx2, yy2 = math.min(x2, bp[4 * j + 2]), math.min(y2, bp[4 * j + 3])
          local w, h = math.max(0, xx2 - xx1), math.max(0, yy2 - yy1)
          local inter = w * h
          local area_j = (bp[4 * j + 2] - bp[4 * j]) * (bp[4 * j + 3] - bp[4 * j + 1])
          if inter / (area_i + area_j - inter) > thr then suppressed[j] = true end
        end
      end
    end
  end
  return keep
end

local function score_order(sp, n)
  local order = {}
  for i = 1, n do order[i] = i - 1 end
  table.sort(order, function(a, b)
    local sa, sb = sp[a], sp[b]
    if sa ~= sb then return sa > sb end
    return a < b                                   -- stable, as torchvision's sort
  end)
  return order
end

local function to_index(keep)
  local r = {}
  for i, v in ipairs(keep) do r[i] = v + 1 end
  if #r == 0 then return flow.zeros(0, {dtype = flow.int64}) end
  return flow.tensor(r, {dtype = flow.int64})
end

--- nms(boxes [N, 4], scores [N], iou_threshold) -> int64 1-based indices of
-- the kept boxes, by decreasing score. A box is dropped when its IoU with a
-- higher-scoring kept box is > iou_threshold.
function M.nms(boxes, scores, iou_threshold)
  check_boxes(boxes, 'nms')
  local n = boxes:size(1)
  if scores:dim() ~= 1 or scores:size(1) ~= n then
    error(('nms: expected %d scores, got %s'):format(n, table.concat(scores:size():totable(), 'x')), 2)
  end
  if n == 0 then return flow.zeros(0, {dtype = flow.int64}) end
  local bp, sp = ptr64(boxes), ptr64(scores)
  local keep = greedy(bp, score_order(sp, n), iou_threshold)
  unpin()
  return to_index(keep):to(boxes.device)
end

--- batched_nms(boxes, scores, idxs, iou_threshold): NMS done independently
-- per category (idxs [N], integers); 1-based indices by decreasing score.
function M.batched_nms(boxes, scores, idxs, iou_threshold)
  check_boxes(boxes, 'batched_nms')
  local n = boxes:size(1)
  if n == 0 then return flow.zeros(0, {dtype = flow.int64}) end
  local bp, sp, gp = ptr64(boxes), ptr64(scores), ptr64(idxs)
  local group = {}
  for i = 0, n - 1 do group[i] = gp[i] end
  local keep = greedy(bp, score_order(sp, n), iou_threshold, group)
  unpin()
  return to_index(keep):to(boxes.device)
end

------------------------------------------------------------------ roi_align
-- separable bilinear weights of one roi along one axis: a table [pooled]
-- of {index -> weight} plus the touched index range (0-based)
local function axis_weights(start, size, pooled, grid, extent)
  local bin = size / pooled
  local rows, lo, hi = {}, math.huge, -math.huge
  for p = 0, pooled - 1 do
    local w = {}
    for i = 0, grid - 1 do
      local y = start + p * bin + (i + 0.5) * bin / grid
      if not (y < -1.0 or y > extent) then
        if y <= 0 then y = 0 end
        local low = math.floor(y)
        local high
        if low >= extent - 1 then
          low, high, y = extent - 1, extent - 1, extent - 1
        else
          high = low + 1
        end
        local l = y - low
        w[low] = (w[low] or 0) + (1 - l) / grid
        w[high] = (w[high] or 0) + l / grid
        if low < lo then lo = low end
        if high > hi then hi = high end
      end
    end
    rows[p + 1] = w
  end
  return rows, lo, hi
end

local function weight_matrix(rows, lo, hi)
  local m = {}
  for p, w in ipairs(rows) do
    local r = {}
    for k = lo, hi do r[k - lo + 1] = w[k] or 0 end
    m[p] = r
  end
  return m
end

-- rois as a Lua array of {batch (1-based), x1, y1, x2, y2}
local function roi_list(boxes, n_images)
  local list = {}
  if flow.is_tensor(boxes) then
    if boxes:dim() ~= 2 or boxes:size(2) ~= 5 then
      error('roi_align: boxes must be a [K, 5] tensor (1-based batch index, x1, y1, x2, y2) or a list '
            .. 'of [Ki, 4] tensors, one per image', 3)
    end
    for i, r in ipairs(boxes:to(flow.float64):totable()) do
      if r[1] < 1 or r[1] > n_images then
        error(('roi_align: box %d has batch index %s, expected 1..%d (1-based)'):format(i, r[1], n_images), 3)
      end
      list[i] = r
    end
  else
    for b, t in ipairs(boxes) do
      check_boxes(t, 'roi_align')
      for _, r in ipairs(t:to(flow.float64):totable()) do list[#list + 1] = {b, r[1], r[2], r[3], r[4]} end
    end
  end
  return list
end

--- roi_align(input [N, C, H, W], boxes, output_size, {spatial_scale = 1,
-- sampling_ratio = -1, aligned = false}) -> [K, C, oh, ow], torchvision's
-- RoIAlign: boxes is a list of [Ki, 4] tensors (one per image) or a [K, 5]
-- tensor whose first column is the 1-based image index. sampling_ratio <= 0
-- takes ceil(roi size / output size) samples per bin; aligned = true shifts
-- the box by -0.5 pixel (pixel-center model).
function M.roi_align(input, boxes, output_size, opts)
  opts = A.check_options('roi_align', opts, {aligned = true, sampling_ratio = true, spatial_scale = true})
  if type(output_size) == 'number' then output_size = {output_size, output_size} end
  local scale, ratio = opts.spatial_scale or 1, opts.sampling_ratio or -1
  local aligned = opts.aligned == true
  local n, c, h, w = input:size(1), input:size(2), input:size(3), input:size(4)
  local ph, pw = output_size[1], output_size[2]
  local rois = roi_list(boxes, n)
  local offset = aligned and 0.5 or 0
  local outs = {}
  for k, r in ipairs(rois) do
    local sx, sy = r[2] * scale - offset, r[3] * scale - offset
    local rw, rh = r[4] * scale - offset - sx, r[5] * scale - offset - sy
    if not aligned then rw, rh = math.max(rw, 1), math.max(rh, 1) end
    local gh = ratio > 0 and ratio or math.ceil(rh / ph)
    local gw = ratio > 0 and ratio or math.ceil(rw / pw)
    local out
    if gh > 0 and gw > 0 then
      local ry, ylo, yhi = axis_weights(sy, rh, ph, gh, h)
      local rx, xlo, xhi = axis_weights(sx, rw, pw, gw, w)
      if ylo <= yhi and xlo <= xhi then
        local wy = flow.tensor(weight_matrix(ry, ylo, yhi), {dtype = input.dtype})            -- [ph, hr]
        local wx = flow.tensor(weight_matrix(rx, xlo, xhi), {dtype = input.dtype}):t()        -- [wr, pw]
        local hr, wr = yhi - ylo + 1, xhi - xlo + 1
        local f = input[math.floor(r[1])]:narrow(2, ylo + 1, hr):narrow(3, xlo + 1, wr)                   -- [C, hr, wr]
        local t = f:reshape(c * hr, wr):matmul(wx):view(c, hr, pw)
        out = wy:matmul(t)                                                                    -- [C, ph, pw]
      end
    end
    outs[k] = out or flow.zeros({c, ph, pw}, {dtype = input.dtype})
  end
  if #outs == 0 then return flow.zeros({0, c, ph, pw}, {dtype = input.dtype}) end
  return flow.stack(outs, 1)
end

local RoIAlign = nn.Module:subclass('RoIAlign')
M.RoIAlign = RoIAlign

--- nn module form: RoIAlign(output_size, spatial_scale, sampling_ratio[, aligned = false])
function RoIAlign:__init(output_size, spatial_scale, sampling_ratio, aligned)
  nn.Module.__init(self)
  self.output_size, self.spatial_scale = output_size, spatial_scale
  self.sampling_ratio, self.aligned = sampling_ratio, aligned == true
end

function RoIAlign:forward(input, rois)
  return M.roi_align(input, rois, self.output_size, {spatial_scale = self.spatial_scale,
    sampling_ratio = self.sampling_ratio, aligned = self.aligned})
end

------------------------------------------------------------------ MultiScaleRoIAlign
local MSRoIAlign = nn.Module:subclass('MultiScaleRoIAlign')
M.MultiScaleRoIAlign = MSRoIAlign

--- MultiScaleRoIAlign(featmap_names, output_size, sampling_ratio,
-- {canonical_scale = 224, canonical_level = 4}): torchvision's FPN pooler;
-- each box is pooled from level floor(4 + log2(sqrt(area) / 224) + 1e-6).
function MSRoIAlign:__init(featmap_names, output_size, sampling_ratio, o)
  nn.Module.__init(self)
  o = o or {}
  self.featmap_names = featmap_names
  self.output_size = type(output_size) == 'number' and {output_size, output_size} or output_size
  self.sampling_ratio = sampling_ratio
  self.canonical_scale, self.canonical_level = o.canonical_scale or 224, o.canonical_level or 4
end

local function log2(x) return math.log(x) / math.log(2) end

local function float32(v)
  local f = ffi.new('float[1]', v)
  return f[0]
end

--- forward(features (table name -> [N, C, H, W]), boxes (list of [Ki, 4]),
-- image_shapes (list of {h, w})) -> [sum Ki, C, oh, ow]
function MSRoIAlign:forward(features, boxes, image_shapes)
  local feats = {}
  for i, name in ipairs(self.featmap_names) do feats[i] = features[name] end
  local max_h, max_w = 0, 0
  for _, s in ipairs(image_shapes) do max_h, max_w = math.max(max_h, s[1]), math.max(max_w, s[2]) end
  local scales = {}
  for i, f in ipairs(feats) do
    scales[i] = 2 ^ math.floor(log2(f:size(3) / max_h) + 0.5)
  end
  local k_min, k_max = math.floor(-log2(scales[1]) + 0.5), math.floor(-log2(scales[#scales]) + 0.5)
  -- all rois with their image, in order, and their level
  local rois, levels = {}, {}
  for b, t in ipairs(boxes) do
    for _, r in ipairs(t:to(flow.float64):totable()) do
      rois[#rois + 1] = {b, r[1], r[2], r[3], r[4]}
      local area = float32((r[3] - r[1]) * (r[4] - r[2]))
      local s = math.sqrt(area)
      local lvl = math.floor(self.canonical_level + log2(s / self.canonical_scale) + 1e-6)
      levels[#levels + 1] = math.min(math.max(lvl, k_min), k_max) - k_min + 1
    end
  end
  local c = feats[1]:size(2)
  if #rois == 0 then return flow.zeros({0, c, self.output_size[1], self.output_size[2]}) end
  local outs = {}
  for li = 1, #feats do
    local sel, idx = {}, {}
    for k, l in ipairs(levels) do
      if l == li then sel[#sel + 1] = rois[k]; idx[#idx + 1] = k end
    end
    if #sel > 0 then
      local res = M.roi_align(feats[li], flow.tensor(sel, {dtype = flow.float64}), self.output_size,
        {spatial_scale = scales[li], sampling_ratio = self.sampling_ratio})
      for j, k in ipairs(idx) do outs[k] = res[j] end
    end
  end
  return flow.stack(outs, 1)
end

------------------------------------------------------------------ BoxCoder
local BoxCoder = flow.class('BoxCoder')
M.BoxCoder = BoxCoder

--- BoxCoder({wx, wy, ww, wh}[, bbox_xform_clip = log(1000 / 16)]) (or BoxCoder.new)
function BoxCoder:__init(weights, clip)
  self.weights, self.bbox_xform_clip = weights, clip or math.log(1000 / 16)
end
BoxCoder.new = BoxCoder

--- decode_single(rel_codes [N, 4k], boxes [N, 4]) -> [N, 4k]
function BoxCoder:decode_single(rel, boxes)
  boxes = boxes:to(rel.dtype)
  local widths = col(boxes, 3) - col(boxes, 1)
  local heights = col(boxes, 4) - col(boxes, 2)
  local cx, cy = col(boxes, 1) + 0.5 * widths, col(boxes, 2) + 0.5 * heights
  local wx, wy, ww, wh = unpack(self.weights)
  local n = rel:size(1)
  local r = rel:reshape(n, -1, 4)
  local dx, dy = r:select(3, 1) / wx, r:select(3, 2) / wy
  local dw = (r:select(3, 3) / ww):clamp(nil, self.bbox_xform_clip)
  local dh = (r:select(3, 4) / wh):clamp(nil, self.bbox_xform_clip)
  local pcx = dx * widths:unsqueeze(2) + cx:unsqueeze(2)
  local pcy = dy * heights:unsqueeze(2) + cy:unsqueeze(2)
  local pw, phh = dw:exp() * widths:unsqueeze(2), dh:exp() * heights:unsqueeze(2)
  local hw, hh = pw * 0.5, phh * 0.5
  return flow.stack({pcx - hw, pcy - hh, pcx + hw, pcy + hh}, 3):reshape(n, -1)
end

--- encode_single(reference_boxes [N, 4], proposals [N, 4]) -> [N, 4] targets
function BoxCoder:encode_single(ref, proposals)
  local wx, wy, ww, wh = unpack(self.weights)
  local pw, ph = col(proposals, 3) - col(proposals, 1), col(proposals, 4) - col(proposals, 2)
  local pcx, pcy = col(proposals, 1) + 0.5 * pw, col(proposals, 2) + 0.5 * ph
  local gw, gh = col(ref, 3) - col(ref, 1), col(ref, 4) - col(ref, 2)
  local gcx, gcy = col(ref, 1) + 0.5 * gw, col(ref, 2) + 0.5 * gh
  return flow.stack({wx * (gcx - pcx) / pw, wy * (gcy - pcy) / ph, ww * (gw / pw):log(),
                     wh * (gh / ph):log()}, 2)
end

return M
