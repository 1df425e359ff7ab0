-- flowvision.data.mixup: timm's Mixup / CutMix.
--
--   local mixup = vision.data.Mixup{mixup_alpha = 0.8, cutmix_alpha = 1.0, num_classes = 10,
--                                   label_smoothing = 0.1, prob = 1.0, switch_prob = 0.5,
--                                   mode = 'batch', cutmix_minmax = nil, correct_lam = true}
--   local x, soft = mixup(images, labels)   -- images [N, C, H, W] (N even) mixed in place;
--                                           -- labels 1..num_classes; soft [N, num_classes]
--
-- Semantics are timm's (timm/data/mixup.py): 'batch' draws one lambda for the
-- batch and mixes x with x:flip(1); 'pair' one per pair (i, N+1-i); 'elem'
-- one per element. Draws come from oneflow's generator.
local A = require 'oneflow._args'
local flow = require 'oneflow'
local R = require 'flowvision.data.random'

local is_tensor = flow.is_tensor
local floor = math.floor
local M = {}

local function fail(op, msg) error(op .. ': ' .. msg, 3) end

--- one_hot(labels, num_classes, on, off): labels 1-based -> float [N, num_classes].
function M.one_hot(x, num_classes, on_value, off_value)
  on_value, off_value = on_value or 1, off_value or 0
  if not is_tensor(x) then x = flow.tensor(x, {dtype = flow.int64}) end
  x = x:long():view(-1, 1)
  local n = x:size(1)
  local lo, hi = x:min():item(), x:max():item()
  if lo < 1 or hi > num_classes then
    fail('one_hot', ('labels must be class indices in 1..%d (1-based), got %d..%d'):format(num_classes, lo, hi))
  end
  return flow.full({n, num_classes}, off_value):scatter_(2, x, on_value)
end

--- mixup_target(target, num_classes, lam, smoothing): soft targets of the
-- pairing with target:flip(1); lam a number or a tensor [N, 1].
function M.mixup_target(target, num_classes, lam, smoothing)
  lam, smoothing = lam or 1, smoothing or 0
  local off = smoothing / num_classes
  local on = 1 - smoothing + off
  local y1 = M.one_hot(target, num_classes, on, off)
  local y2 = M.one_hot(target:flip(1), num_classes, on, off)
  if is_tensor(lam) then return y1 * lam + y2 * (lam * -1 + 1) end
  return y1 * lam + y2 * (1 - lam)
end

--- rand_bbox(img_shape, lam, margin) -> yl, yh, xl, xh (0-based, half-open).
function M.rand_bbox(img_shape, lam, margin)
  margin = margin or 0
  local ratio = math.sqrt(1 - lam)
  local img_h, img_w = img_shape[#img_shape - 1], img_shape[#img_shape]
  local cut_h, cut_w = floor(img_h * ratio), floor(img_w * ratio)
  local my, mx = floor(margin * cut_h), floor(margin * cut_w)
  local cy = R.randint(my, img_h - my)
  local cx = R.randint(mx, img_w - mx)
  local function clip(v, hi) return math.min(math.max(v, 0), hi) end
  local yl, yh = clip(cy - floor(cut_h / 2), img_h), clip(cy + floor(cut_h / 2), img_h)
  local xl, xh = clip(cx - floor(cut_w / 2), img_w), clip(cx + floor(cut_w / 2), img_w)
  return yl, yh, xl, xh
end

--- rand_bbox_minmax(img_shape, {min, max}) -> yl, yu, xl, xu
function M.rand_bbox_minmax(img_shape, minmax)
  local img_h, img_w = img_shape[#img_shape - 1], img_shape[#img_shape]
  local cut_h = R.randint(floor(img_h * minmax[1]), floor(img_h * minmax[2]))
  local cut_w = R.randint(floor(img_w * minmax[1]), floor(img_w * minmax[2]))
  local yl = R.randint(0, img_h - cut_h)
  local xl = R.randint(0, img_w - cut_w)
  return yl, yl + cut_h, xl, xl + cut_w
end

--- cutmix_bbox_and_lam(img_shape, lam, ratio_minmax, correct_lam) -> {yl, yh, xl, xh}, lam
function M.cutmix_bbox_and_lam(img_shape, lam, ratio_minmax, correct_lam)
  if correct_lam == nil then correct_lam = true end
  local yl, yu, xl, xu
  if ratio_minmax then yl, yu, xl, xu = M.rand_bbox_minmax(img_shape, ratio_minmax)
  else yl, yu, xl, xu = M.rand_bbox(img_shape, lam) end
  if correct_lam or ratio_minmax then
    local area = (yu - yl) * (xu - xl)
    lam = 1 - area / (img_shape[#img_shape - 1] * img_shape[#img_shape])
  end
  return {yl, yu, xl, xu}, lam
end

-- view of x[..., yl:yh, xl:xh] (0-based, half-open) or nil when empty
local function box(x, b)
  local yl, yh, xl, xh = b[1], b[2], b[3], b[4]
  if yh <= yl or xh <= xl then return nil end
  return x:narrow(-2, yl + 1, yh - yl):narrow(-1, xl + 1, xh - xl)
end

local Mixup = flow.class('Mixup')
M.Mixup = Mixup

local modes = {batch = true, pair = true, elem = true}

function Mixup:__init(opts)
  opts = A.check_options('Mixup', opts, {
    correct_lam = true, cutmix_alpha = true, cutmix_minmax = true, label_smoothing = true,
    mixup_alpha = true, mode = true, num_classes = true, prob = true, switch_prob = true})
  self.mixup_alpha = opts.mixup_alpha or 1.0
  self.cutmix_alpha = opts.cutmix_alpha or 0.0
  self.cutmix_minmax = opts.cutmix_minmax
  if self.cutmix_minmax then
    if #self.cutmix_minmax ~= 2 then fail('Mixup', 'cutmix_minmax must be {min, max}') end
    self.cutmix_alpha = 1.0
  end
  self.mix_prob = opts.prob or 1.0
  self.switch_prob = opts.switch_prob or 0.5
  self.label_smoothing = opts.label_smoothing or 0.1
  self.num_classes = opts.num_classes or 1000
  self.mode = opts.mode or 'batch'
  if not modes[self.mode] then
    fail('Mixup', ("mode must be 'batch', 'pair' or 'elem', got '%s'"):format(tostring(self.mode)))
  end
  self.correct_lam = opts.correct_lam ~= false
  self.mixup_enabled = true
  if self.mixup_alpha <= 0 and self.cutmix_alpha <= 0 then
    fail('Mixup', 'one of mixup_alpha > 0, cutmix_alpha > 0 or cutmix_minmax should be set')
  end
end
Mixup.new = Mixup   -- Mixup.new(...) == Mixup(...)

function Mixup:__tostring()
  return ('Mixup(mixup_alpha=%g, cutmix_alpha=%g, prob=%g, switch_prob=%g, mode=%s, label_smoothing=%g, '
          .. 'num_classes=%d)'):format(self.mixup_alpha, self.cutmix_alpha, self.mix_prob, self.switch_prob,
          self.mode, self.label_smoothing, self.num_classes)
end

-- one (lam, use_cutmix) draw with the alphas' rules (lam_mix before prob)
local function draw_mix(self)
  if self.mixup_alpha > 0 and self.cutmix_alpha > 0 then
    local use_cutmix = R.random() < self.switch_prob
    local a = use_cutmix and self.cutmix_alpha or self.mixup_alpha
    return R.beta(a, a), use_cutmix
  elseif self.mixup_alpha > 0 then
    return R.beta(self.mixup_alpha, self.mixup_alpha), false
  end
  return R.beta(self.cutmix_alpha, self.cutmix_alpha), true
end

function Mixup:_params_per_elem(n)
  local lam, use_cutmix = {}, {}
  for i = 1, n do lam[i], use_cutmix[i] = 1, false end
  if self.mixup_enabled then
    for i = 1, n do
      local l, cm = draw_mix(self)
      use_cutmix[i] = cm
      if R.random() < self.mix_prob then lam[i] = l end
    end
  end
  return lam, use_cutmix
end

function Mixup:_params_per_batch()
  local lam, use_cutmix = 1, false
  if self.mixup_enabled and R.random() < self.mix_prob then
    lam, use_cutmix = draw_mix(self)
  end
  return lam, use_cutmix
end

function Mixup:_mix_elem(x)
  local n = x:size(1)
  local lam, use_cutmix = self:_params_per_elem(n)
  local orig = x:clone()
  for i = 1, n do
    local j = n - i + 1
    if lam[i] ~= 1 then
      if use_cutmix[i] then
        local b, l = M.cutmix_bbox_and_lam(x[i]:size():totable(), lam[i], self.cutmix_minmax, self.correct_lam)
        local dst = box(x[i], b)
        if dst then dst:copy_(box(orig[j], b)) end
        lam[i] = l
      else
        x[i]:copy_(x[i] * lam[i] + orig[j] * (1 - lam[i]))
      end
    end
  end
  return flow.tensor(lam, {dtype = x.dtype}):unsqueeze(2)
end

function Mixup:_mix_pair(x)
  local n = x:size(1)
  local half = floor(n / 2)
  local lam, use_cutmix = self:_params_per_elem(half)
  local orig = x:clone()
  for i = 1, half do
    local j = n - i + 1
    if lam[i] ~= 1 then
      if use_cutmix[i] then
        local b, l = M.cutmix_bbox_and_lam(x[i]:size():totable(), lam[i], self.cutmix_minmax, self.correct_lam)
        local di, dj = box(x[i], b), box(x[j], b)
        if di then
          di:copy_(box(orig[j], b))
          dj:copy_(box(orig[i], b))
        end
        lam[i] = l
      else
        x[i]:copy_(x[i] * lam[i] + orig[j] * (1 - lam[i]))
        x[j]:copy_(x[j] * lam[i] + orig[i] * (1 - lam[i]))
      end
    end
  end
  local all = {}
  for i = 1, half do all[i] = lam[i] end
  for i = 1, half do all[half + i] = lam[half - i + 1] end
  return flow.tensor(all, {dtype = x.dtype}):unsqueeze(2)
end

function Mixup:_mix_batch(x)
  local lam, use_cutmix = self:_params_per_batch()
  if lam == 1 then return 1 end
  if use_cutmix then
    local b
    b, lam = M.cutmix_bbox_and_lam(x:size():totable(), lam, self.cutmix_minmax, self.correct_lam)
    local dst = box(x, b)
    if dst then dst:copy_(box(x:flip(1), b)) end
  else
    local flipped = x:flip(1):mul_(1 - lam)
    x:mul_(lam):add_(flipped)
  end
  return lam
end

--- mixup(x, target) -> x (mixed in place), soft targets [N, num_classes].
function Mixup:__call(x, target)
  if not is_tensor(x) or x:dim() ~= 4 then
    fail('Mixup', 'expected images [N, C, H, W], got ' .. (is_tensor(x) and x:dim() .. '-d tensor' or type(x)))
  end
  if not x:is_floating_point() then fail('Mixup', 'expected float images, got ' .. x.dtype.name) end
  if x:size(1) % 2 ~= 0 then fail('Mixup', ('batch size should be even, got %d'):format(x:size(1))) end
  if not is_tensor(target) then target = flow.tensor(target, {dtype = flow.int64}) end
  if target:numel() ~= x:size(1) then
    fail('Mixup', ('expected %d labels, got %d'):format(x:size(1), target:numel()))
  end
  local lam
  if self.mode == 'elem' then lam = self:_mix_elem(x)
  elseif self.mode == 'pair' then lam = self:_mix_pair(x)
  else lam = self:_mix_batch(x) end
  return x, M.mixup_target(target, self.num_classes, lam, self.label_smoothing)
end

--- CutMix only: Mixup with mixup_alpha = 0.
function M.CutMix(opts)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.mixup_alpha = 0
  o.cutmix_alpha = o.cutmix_alpha or 1.0
  return Mixup.new(o)
end

return M
