-- flowvision.models.detection._utils: what the detectors share, as
-- torchvision builds it: AnchorGenerator, DefaultBoxGenerator (SSD),
-- GeneralizedRCNNTransform (normalize, resize, batch, and boxes back to the
-- original sizes), FrozenBatchNorm2d, FeaturePyramidNetwork with
-- LastLevelMaxPool / LastLevelP6P7, and the ResNet-FPN backbone
-- (backbone.body, backbone.fpn).
local ffi = require 'ffi'
local flow = require 'oneflow'
local ops = require 'flowvision.models._ops'
local box_ops = require 'flowvision.models.detection.ops'

local nn, F = flow.nn, flow.nn.functional
local M = {}

local function float32(v)
  local f = ffi.new('float[1]', v)
  return f[0]
end
M.float32 = float32
M.clip = box_ops.clip_boxes_to_image

-- torch.round: halves to even
local function round_half_even(x)
  local f = math.floor(x)
  local d = x - f
  if d > 0.5 then return f + 1 elseif d < 0.5 then return f end
  return (f % 2 == 0) and f or f + 1
end

------------------------------------------------------------------ AnchorGenerator
local AnchorGenerator = nn.Module:subclass('AnchorGenerator')
M.AnchorGenerator = AnchorGenerator

--- AnchorGenerator(sizes, aspect_ratios): per feature map i, anchors of
-- sizes[i] x aspect_ratios[i] (ratio = height / width) at every location.
function AnchorGenerator:__init(sizes, aspect_ratios)
  nn.Module.__init(self)
  sizes = sizes or {{128, 256, 512}}
  if type(sizes[1]) == 'number' then
    local s = {}
    for i, v in ipairs(sizes) do s[i] = {v} end
    sizes = s
  end
  aspect_ratios = aspect_ratios or {{0.5, 1.0, 2.0}}
  if type(aspect_ratios[1]) == 'number' or (#aspect_ratios == 1 and #sizes > 1) then
    if type(aspect_ratios[1]) == 'table' then aspect_ratios = aspect_ratios[1] end
    local a = {}
    for i = 1, #sizes do a[i] = aspect_ratios end
    aspect_ratios = a
  end
  self.sizes, self.aspect_ratios = sizes, aspect_ratios
  self.cell_anchors = {}
  for i = 1, #sizes do self.cell_anchors[i] = self:generate_anchors(sizes[i], aspect_ratios[i]) end
end

--- Base anchors [#ratios * #scales, 4] centred on 0, rounded (as torchvision).
function AnchorGenerator.generate_anchors(_, scales, ratios)
  local rows = {}
  for _, ar in ipairs(ratios) do
    local hr = float32(math.sqrt(float32(ar)))
    local wr = float32(1 / hr)
    for _, s in ipairs(scales) do
      local ws, hs = float32(wr * s), float32(hr * s)
      rows[#rows + 1] = {round_half_even(float32(-ws / 2)), round_half_even(float32(-hs / 2)),
                         round_half_even(float32(ws / 2)), round_half_even(float32(hs / 2))}
    end
  end
  return flow.tensor(rows)
end

function AnchorGenerator:num_anchors_per_location()
  local r = {}
  for i = 1, #self.sizes do r[i] = #self.sizes[i] * #self.aspect_ratios[i] end
  return r
end

--- forward(image_size {h, w} of the batched tensor, feature_maps list,
-- num_images) -> list (per image) of [sum HWA, 4] anchors.
function AnchorGenerator:forward(image_size, feature_maps, num_images)
  local all = {}
  for i, fm in ipairs(feature_maps) do
    local gh, gw = fm:size(3), fm:size(4)
    local sh, sw = math.floor(image_size[1] / gh), math.floor(image_size[2] / gw)
    local sx = flow.arange(0, gw):float() * sw
    local sy = flow.arange(0, gh):float() * sh
    sx = sx:view(1, gw):expand(gh, gw):reshape(-1)
    sy = sy:view(gh, 1):expand(gh, gw):reshape(-1)
    local shifts = flow.stack({sx, sy, sx, sy}, 2)
    all[i] = (shifts:view(-1, 1, 4) + self.cell_anchors[i]:view(1, -1, 4)):reshape(-1, 4)
  end
  local a = flow.cat(all, 1)
  local res = {}
  for i = 1, num_images do res[i] = a end
  return res
end

------------------------------------------------------------------ DefaultBoxGenerator
local DefaultBoxGenerator = nn.Module:subclass('DefaultBoxGenerator')
M.DefaultBoxGenerator = DefaultBoxGenerator

--- DefaultBoxGenerator(aspect_ratios, {min_ratio = 0.15, max_ratio = 0.9,
-- scales =, steps =, clip = true}): SSD's default boxes.
function DefaultBoxGenerator:__init(aspect_ratios, o)
  nn.Module.__init(self)
  o = o or {}
  self.aspect_ratios, self.steps = aspect_ratios, o.steps
  self.clip = o.clip ~= false
  local n = #aspect_ratios
  if o.scales then self.scales = o.scales
  elseif n > 1 then
    local lo, hi = o.min_ratio or 0.15, o.max_ratio or 0.9
    self.scales = {}
    for k = 0, n - 1 do self.scales[k + 1] = lo + (hi - lo) * k / (n - 1) end
    self.scales[n + 1] = 1.0
  else
    self.scales = {o.min_ratio or 0.15, o.max_ratio or 0.9}
  end
  self._wh_pairs = {}
  for k = 1, n do
    local sk = self.scales[k]
    local sp = math.sqrt(sk * self.scales[k + 1])
    local pairs_ = {{sk, sk}, {sp, sp}}
    for _, ar in ipairs(aspect_ratios[k]) do
      local q = math.sqrt(ar)
      pairs_[#pairs_ + 1] = {sk * q, sk / q}
      pairs_[#pairs_ + 1] = {sk / q, sk * q}
    end
    self._wh_pairs[k] = pairs_
  end
end

function DefaultBoxGenerator:num_anchors_per_location()
  local r = {}
  for i, a in ipairs(self.aspect_ratios) do r[i] = 2 + 2 * #a end
  return r
end

function DefaultBoxGenerator:forward(image_size, feature_maps, num_images)
  local boxes = {}
  for k, fm in ipairs(feature_maps) do
    local fh, fw = fm:size(3), fm:size(4)
    local xfk, yfk
    if self.steps then xfk, yfk = image_size[2] / self.steps[k], image_size[1] / self.steps[k]
    else xfk, yfk = fw, fh end
    local wh = flow.tensor(self._wh_pairs[k])
    if self.clip then wh = wh:clamp(0, 1) end
    local np = wh:size(1)
    local sx = ((flow.arange(0, fw):double() + 0.5) / xfk):float()
    local sy = ((flow.arange(0, fh):double() + 0.5) / yfk):float()
    sx = sx:view(1, fw, 1):expand(fh, fw, np)
    sy = sy:view(fh, 1, 1):expand(fh, fw, np)
    local w = wh:select(2, 1):view(1, 1, np):expand(fh, fw, np)
    local h = wh:select(2, 2):view(1, 1, np):expand(fh, fw, np)
    boxes[k] = flow.stack({sx, sy, w, h}, 4):reshape(-1, 4)
  end
  local d = flow.cat(boxes, 1)
  local cxcy, whs = d:narrow(2, 1, 2), d:narrow(2, 3, 2)
  local size = flow.tensor({image_size[2], image_size[1]})
  local out = flow.cat({(cxcy - whs * 0.5) * size, (cxcy + whs * 0.5) * size}, 2)
  local res = {}
  for i = 1, num_images do res[i] = out end
  return res
end

------------------------------------------------------------------ GeneralizedRCNNTransform
local Transform = nn.Module:subclass('GeneralizedRCNNTransform')
M.GeneralizedRCNNTransform = Transform

--- GeneralizedRCNNTransform(min_size, max_size, image_mean, image_std,
-- {size_divisible = 32, fixed_size = nil ({w, h})})
function Transform:__init(min_size, max_size, mean, std, o)
  nn.Module.__init(self)
  o = o or {}
  self.min_size = type(min_size) == 'number' and {min_size} or min_size
  self.max_size, self.image_mean, self.image_std = max_size, mean, std
  self.size_divisible, self.fixed_size = o.size_divisible or 32, o.fixed_size
end

--- images: a list of [C, H, W] tensors or a [N, C, H, W] tensor ->
-- batched [N, C, H', W'], image_sizes (list of {h, w} after resizing),
-- original sizes.
function Transform:forward(images)
  if flow.is_tensor(images) then
    if images:dim() == 3 then images = {images}
    else images = images:unbind(1) end
  end
  local dt = images[1].dtype
  local mean = flow.tensor(self.image_mean, {dtype = dt}):view(-1, 1, 1)
  local std = flow.tensor(self.image_std, {dtype = dt}):view(-1, 1, 1)
  local resized, sizes, orig = {}, {}, {}
  for i, img in ipairs(images) do
    if img:dim() ~= 3 then
      error(('GeneralizedRCNNTransform: images must be [C, H, W] tensors, got %d-d'):format(img:dim()), 3)
    end
    local h, w = img:size(2), img:size(3)
    orig[i] = {h, w}
    img = ((img - mean) / std):unsqueeze(1)
    if self.fixed_size then
      img = F.interpolate(img, {size = {self.fixed_size[2], self.fixed_size[1]}, mode = 'bilinear',
                                align_corners = false})
    else
      local size = self.min_size[#self.min_size]
      local lo, hi = math.min(h, w), math.max(h, w)
      local scale = math.min(float32(size / lo), float32(self.max_size / hi))
      img = F.interpolate(img, {scale_factor = scale, mode = 'bilinear', align_corners = false,
                                recompute_scale_factor = true})
    end
    resized[i] = img[1]
    sizes[i] = {img:size(3), img:size(4)}
  end
  -- batch: pad to the largest size, rounded up to size_divisible
  local mh, mw = 0, 0
  for _, s in ipairs(sizes) do mh, mw = math.max(mh, s[1]), math.max(mw, s[2]) end
  local d = self.size_divisible
  mh, mw = math.ceil(mh / d) * d, math.ceil(mw / d) * d
  local batch = {}
  for i, img in ipairs(resized) do
    local ph, pw = mh - img:size(2), mw - img:size(3)
    batch[i] = (ph > 0 or pw > 0) and F.pad(img, {0, pw, 0, ph}) or img
  end
  return flow.stack(batch, 1), sizes, orig
end

--- Rescales each result's boxes from the resized to the original size.
function Transform.postprocess(_, results, sizes, orig)
  for i, r in ipairs(results) do
    local rh = float32(float32(orig[i][1]) / float32(sizes[i][1]))
    local rw = float32(float32(orig[i][2]) / float32(sizes[i][2]))
    if r.boxes:size(1) > 0 then
      r.boxes = r.boxes * flow.tensor({rw, rh, rw, rh})
    end
  end
  return results
end

------------------------------------------------------------------ FrozenBatchNorm2d
local FrozenBN = nn.Module:subclass('FrozenBatchNorm2d')
M.FrozenBatchNorm2d = FrozenBN

--- BatchNorm2d with fixed statistics and affine parameters, all buffers
-- (weight, bias, running_mean, running_var), as torchvision.ops.misc.
function FrozenBN:__init(n, eps)
  nn.Module.__init(self)
  self.eps = eps or 1e-5
  self:register_buffer('weight', flow.ones(n))
  self:register_buffer('bias', flow.zeros(n))
  self:register_buffer('running_mean', flow.zeros(n))
  self:register_buffer('running_var', flow.ones(n))
end

function FrozenBN:forward(x)
  local scale = self.weight * (self.running_var + self.eps):rsqrt()
  local bias = self.bias - self.running_mean * scale
  return x * scale:view(1, -1, 1, 1) + bias:view(1, -1, 1, 1)
end

function FrozenBN:extra_repr() return ('%d, eps=%s'):format(self.weight:size(1), self.eps) end

------------------------------------------------------------------ FPN
local FPN = nn.Module:subclass('FeaturePyramidNetwork')
M.FeaturePyramidNetwork = FPN

local function conv_only(cin, cout, k)
  return ops.Conv2dNormActivation(cin, cout, {kernel_size = k, padding = k == 3 and 1 or 0,
                                              norm_layer = false, activation_layer = false})
end

--- FeaturePyramidNetwork(in_channels_list, out_channels[, extra_blocks])
function FPN:__init(in_list, out_channels, extra)
  nn.Module.__init(self)
  local inner, layer = {}, {}
  for i, c in ipairs(in_list) do
    inner[i] = conv_only(c, out_channels, 1)
    layer[i] = conv_only(out_channels, out_channels, 3)
  end
  self.inner_blocks = nn.ModuleList(inner)
  self.layer_blocks = nn.ModuleList(layer)
  for _, m in ipairs(self:modules()) do
    if ops.is_a(m, nn.Conv2d) then
      nn.init.kaiming_uniform_(m.weight, {a = 1})
      nn.init.zeros_(m.bias)
    end
  end
  if extra then self.extra_blocks = extra end
end

--- forward(list of features, list of names) -> list of outputs, names
function FPN:forward(x, names)
  local n = #x
  local last = self.inner_blocks[n](x[n])
  local results = {self.layer_blocks[n](last)}
  for i = n - 1, 1, -1 do
    local lateral = self.inner_blocks[i](x[i])
    local top_down = F.interpolate(last, {size = {lateral:size(3), lateral:size(4)}, mode = 'nearest'})
    last = lateral + top_down
    table.insert(results, 1, self.layer_blocks[i](last))
  end
  names = {unpack(names)}
  if self.extra_blocks ~= nil then results, names = self.extra_blocks(results, x, names) end
  return results, names
end

local LastLevelMaxPool = nn.Module:subclass('LastLevelMaxPool')
M.LastLevelMaxPool = LastLevelMaxPool
function LastLevelMaxPool.forward(_, results, _, names)
  results[#results + 1] = F.max_pool2d(results[#results], 1, {stride = 2})
  names[#names + 1] = 'pool'
  return results, names
end

local LastLevelP6P7 = nn.Module:subclass('LastLevelP6P7')
M.LastLevelP6P7 = LastLevelP6P7
function LastLevelP6P7:__init(cin, cout)
  nn.Module.__init(self)
  self.p6 = nn.Conv2d(cin, cout, 3, 2, 1)
  self.p7 = nn.Conv2d(cout, cout, 3, 2, 1)
  for _, m in ipairs({self.p6, self.p7}) do
    nn.init.kaiming_uniform_(m.weight, {a = 1})
    nn.init.zeros_(m.bias)
  end
  self.use_P5 = cin == cout
end
function LastLevelP6P7:forward(results, inputs, names)
  local x = self.use_P5 and results[#results] or inputs[#inputs]
  local p6 = self.p6(x)
  local p7 = self.p7(F.relu(p6))
  results[#results + 1], results[#results + 2] = p6, p7
  names[#names + 1], names[#names + 2] = 'p6', 'p7'
  return results, names
end

------------------------------------------------------------------ ResNet body + FPN
local Body = nn.Module:subclass('IntermediateLayerGetter')
M.IntermediateLayerGetter = Body

--- The ResNet trunk up to layer4 (conv1, bn1, relu, maxpool, layer1..4;
-- no avgpool / fc), returning the layers named in return_layers
-- ({layer2 = '1', ...}) in order.
function Body:__init(resnet, return_layers, upto)
  nn.Module.__init(self)
  self._order = {'conv1', 'bn1', 'relu', 'maxpool', 'layer1', 'layer2', 'layer3', 'layer4'}
  local n = #self._order
  for i, name in ipairs(self._order) do
    if upto and i > upto then n = i - 1; break end
    self[name] = resnet[name]
  end
  self._n = n
  self.return_layers = return_layers
end

function Body:forward(x)
  local outs, names = {}, {}
  for i = 1, self._n do
    local name = self._order[i]
    x = self[name](x)
    local r = self.return_layers[name]
    if r then outs[#outs + 1] = x; names[#names + 1] = r end
  end
  return outs, names
end

local BackboneWithFPN = nn.Module:subclass('BackboneWithFPN')
M.BackboneWithFPN = BackboneWithFPN

function BackboneWithFPN:__init(body, in_list, out_channels, extra)
  nn.Module.__init(self)
  self.body = body
  self.fpn = FPN(in_list, out_channels, extra or LastLevelMaxPool())
  self.out_channels = out_channels
end

--- -> list of feature maps, list of names ('0', '1', ..., 'pool' | 'p6', 'p7')
function BackboneWithFPN:forward(x)
  local feats, names = self.body(x)
  return self.fpn(feats, names)
end

--- resnet_fpn_backbone{depth = 50, trainable_layers = 3, returned_layers =
-- {1, 2, 3, 4}, extra_blocks = LastLevelMaxPool(), frozen_bn = true}:
-- torchvision's _resnet_fpn_extractor over the ResNet of flowvision.models.resnet.
function M.resnet_fpn_backbone(o)
  o = o or {}
  local resnet = require 'flowvision.models.resnet'
  local norm = o.frozen_bn == false and ops.batch_norm() or function(c) return FrozenBN(c) end
  local r = resnet.models['resnet' .. (o.depth or 50)]({norm_layer = norm})
  local trainable = o.trainable_layers or 3
  local train_names = ({'layer4', 'layer3', 'layer2', 'layer1', 'conv1'})
  local trainable_set = {}
  for i = 1, trainable do trainable_set[train_names[i]] = true end
  if trainable == 5 then trainable_set.bn1 = true end
  for _, name in ipairs({'conv1', 'bn1', 'layer1', 'layer2', 'layer3', 'layer4'}) do
    if not trainable_set[name] then r[name]:requires_grad_(false) end
  end
  local returned = o.returned_layers or {1, 2, 3, 4}
  local return_layers, in_list = {}, {}
  for i, l in ipairs(returned) do
    return_layers['layer' .. l] = tostring(i - 1)
    in_list[i] = 256 * 2 ^ (l - 1)
  end
  local body = Body(r, return_layers, 4 + returned[#returned])
  return BackboneWithFPN(body, in_list, 256, o.extra_blocks)
end

return M
