-- flowvision.data auto-augmentation: timm's AutoAugment, RandAugment and
-- AugMix (timm/data/auto_augment.py) on image tensors [C, H, W], uint8 in
-- [0, 255] (as timm's PIL images) or float in [0, 1].
--
--   local ra = vision.data.RandAugment('rand-m9-mstd0.5-inc1', {translate_const = 100})
--   local aa = vision.data.AutoAugment('original')          -- the ImageNet policy
--   local am = vision.data.AugMix('augmix-m3-w3-d-1-a1')    -- or AugMix{severity =, width =, depth =, alpha =}
--   img = ra(img)
--
-- Config strings follow timm: 'rand' then '-m<magnitude>', '-n<num_layers>',
-- '-mstd<std>' (> 100: uniform in [0, m]), '-mmax<max>', '-inc<0|1>'
-- (increasing-severity ops), '-w<weights index>'; 'original' | 'originalr'
-- then '-mstd<std>'; 'augmix' then '-m', '-w' (width), '-d' (depth, -1 =
-- random 1..3), '-a' (alpha), '-mstd'. hparams (timm's): translate_const =
-- 250 (pixels at magnitude 10), translate_pct = 0.45, img_mean = {128, 128, 128}
-- (fill, in uint8 units), interpolation = 'bilinear' | 'nearest',
-- magnitude_std, magnitude_max.
--
-- The ops are the torchvision tensor forms of timm's PIL operations
-- (flowvision.transforms.functional): ImageEnhance Color/Contrast/Brightness/
-- Sharpness are adjust_saturation/contrast/brightness/sharpness, PIL's
-- AFFINE transforms are inverse-affine sampling with the same coefficients.
-- Differences from timm: '-inc0' turns increasing ops off (timm's bool('0')
-- turns them on); interpolation is one mode, not a random bilinear/bicubic pick.
local TF = require 'flowvision.transforms.functional'
local R = require 'flowvision.data.random'
local class = require 'oneflow.class'

local floor = math.floor
local M = {}

local LEVEL_DENOM = 10
local DEFAULT_HPARAMS = {translate_const = 250, img_mean = {128, 128, 128}}

local function fail(op, msg) error(op .. ': ' .. msg, 3) end

local function copy(t)
  local r = {}
  for k, v in pairs(t or {}) do r[k] = v end
  return r
end

------------------------------------------------------------------ ops
-- value in uint8 units -> the image's units
local function units(img, v) return img:is_floating_point() and v / 255 or v end

local function fill_of(img, kw)
  local f = kw.fillcolor
  if type(f) == 'number' then return units(img, f) end
  local c = TF.get_dimensions(img)
  local out = {}
  for i = 1, c do out[i] = units(img, f[math.min(i, #f)]) end
  return out
end

local function affine(img, coeffs, kw)
  return TF._affine_pixels(img, coeffs, kw.resample, fill_of(img, kw))
end

local OPS = {}
function OPS.AutoContrast(img) return TF.autocontrast(img) end
function OPS.Equalize(img) return TF.equalize(img) end
function OPS.Invert(img) return TF.invert(img) end
function OPS.Rotate(img, degrees, kw)
  return TF.rotate(img, degrees, {interpolation = kw.resample, fill = fill_of(img, kw)})
end
function OPS.Posterize(img, bits)
  if bits >= 8 then return img end
  return TF.posterize(img, math.max(bits, 0))
end
function OPS.Solarize(img, thresh)
  local t = units(img, thresh)
  if t > TF._max_value(img.dtype) then return img end
  return TF.solarize(img, t)
end
function OPS.SolarizeAdd(img, add, kw)
  local thresh = units(img, kw.thresh or 128)
  local bound = TF._max_value(img.dtype)
  local x = img:is_floating_point() and img or img:float()
  local added = (x + units(img, add)):clamp(0, bound)
  local r = x:lt(thresh):where(added, x)
  if img:is_floating_point() then return r end
  return r:to(img.dtype)
end
function OPS.Color(img, f) return TF.adjust_saturation(img, f) end
function OPS.Contrast(img, f) return TF.adjust_contrast(img, f) end
function OPS.Brightness(img, f) return TF.adjust_brightness(img, f) end
function OPS.Sharpness(img, f) return TF.adjust_sharpness(img, f) end
function OPS.ShearX(img, f, kw) return affine(img, {1, f, 0, 0, 1, 0}, kw) end
function OPS.ShearY(img, f, kw) return affine(img, {1, 0, 0, f, 1, 0}, kw) end
function OPS.TranslateX(img, px, kw) return affine(img, {1, 0, px, 0, 1, 0}, kw) end
function OPS.TranslateY(img, px, kw) return affine(img, {1, 0, 0, 0, 1, px}, kw) end
function OPS.TranslateXRel(img, pct, kw)
  local _, _, w = TF.get_dimensions(img)
  return affine(img, {1, 0, pct * w, 0, 1, 0}, kw)
end
function OPS.TranslateYRel(img, pct, kw)
  local _, h = TF.get_dimensions(img)
  return affine(img, {1, 0, 0, 0, 1, pct * h}, kw)
end
M.ops = OPS

------------------------------------------------------------------ levels
local function negate(v) return R.random() > 0.5 and -v or v end

local function rotate_level(level) return negate(level / LEVEL_DENOM * 30) end
local function enhance_level(level) return level / LEVEL_DENOM * 1.8 + 0.1 end
local function enhance_increasing_level(level)
  return math.max(0.1, 1 + negate(level / LEVEL_DENOM * 0.9))
end
local function shear_level(level) return negate(level / LEVEL_DENOM * 0.3) end
local function translate_abs_level(level, hp) return negate(level / LEVEL_DENOM * hp.translate_const) end
local function translate_rel_level(level, hp) return negate(level / LEVEL_DENOM * (hp.translate_pct or 0.45)) end
local function posterize_level(level) return floor(level / LEVEL_DENOM * 4) end
local function posterize_increasing_level(level) return 4 - posterize_level(level) end
local function posterize_original_level(level) return floor(level / LEVEL_DENOM * 4) + 4 end
local function solarize_level(level) return floor(level / LEVEL_DENOM * 256) end
local function solarize_increasing_level(level) return 256 - solarize_level(level) end
local function solarize_add_level(level) return floor(level / LEVEL_DENOM * 110) end

-- name -> {op, level_fn}
local NAMES = {
  AutoContrast = {'AutoContrast'}, Equalize = {'Equalize'}, Invert = {'Invert'},
  Rotate = {'Rotate', rotate_level},
  Posterize = {'Posterize', posterize_level},
  PosterizeIncreasing = {'Posterize', posterize_increasing_level},
  PosterizeOriginal = {'Posterize', posterize_original_level},
  Solarize = {'Solarize', solarize_level},
  SolarizeIncreasing = {'Solarize', solarize_increasing_level},
  SolarizeAdd = {'SolarizeAdd', solarize_add_level},
  Color = {'Color', enhance_level}, ColorIncreasing = {'Color', enhance_increasing_level},
  Contrast = {'Contrast', enhance_level}, ContrastIncreasing = {'Contrast', enhance_increasing_level},
  Brightness = {'Brightness', enhance_level},
  BrightnessIncreasing = {'Brightness', enhance_increasing_level},
  Sharpness = {'Sharpness', enhance_level}, SharpnessIncreasing = {'Sharpness', enhance_increasing_level},
  ShearX = {'ShearX', shear_level}, ShearY = {'ShearY', shear_level},
  TranslateX = {'TranslateX', translate_abs_level}, TranslateY = {'TranslateY', translate_abs_level},
  TranslateXRel = {'TranslateXRel', translate_rel_level},
  TranslateYRel = {'TranslateYRel', translate_rel_level},
}
M.NAMES = NAMES

------------------------------------------------------------------ AugmentOp
local AugmentOp = class('AugmentOp')
M.AugmentOp = AugmentOp

--- AugmentOp(name, prob = 0.5, magnitude = 10, hparams)
function AugmentOp:__init(name, prob, magnitude, hparams)
  local entry = NAMES[name]
  if not entry then
    local known = {}
    for k in pairs(NAMES) do known[#known + 1] = k end
    table.sort(known)
    fail('AugmentOp', ("unknown op '%s' (known: %s)"):format(tostring(name), table.concat(known, ', ')))
  end
  hparams = copy(hparams or DEFAULT_HPARAMS)
  if hparams.translate_const == nil then hparams.translate_const = DEFAULT_HPARAMS.translate_const end
  self.name, self.aug_fn, self.level_fn = name, OPS[entry[1]], entry[2]
  self.prob, self.magnitude = prob or 0.5, magnitude or 10
  self.hparams = hparams
  self.kwargs = {fillcolor = hparams.img_mean or DEFAULT_HPARAMS.img_mean,
                 resample = hparams.interpolation or 'bilinear'}
  self.magnitude_std = hparams.magnitude_std or 0
  self.magnitude_max = hparams.magnitude_max
end
AugmentOp.new = AugmentOp   -- AugmentOp.new(...) == AugmentOp(...)

function AugmentOp:__tostring()
  return ('AugmentOp(name=%s, p=%g, m=%g, mstd=%g)'):format(self.name, self.prob, self.magnitude,
                                                           self.magnitude_std)
end

--- The level arguments for one call (after the magnitude noise).
function AugmentOp:level_args()
  local magnitude = self.magnitude
  if self.magnitude_std > 0 then
    if self.magnitude_std == math.huge then magnitude = R.uniform(0, magnitude)
    else magnitude = R.gauss(magnitude, self.magnitude_std) end
  end
  local upper = self.magnitude_max or LEVEL_DENOM
  magnitude = math.max(0, math.min(magnitude, upper))
  if self.level_fn then return self.level_fn(magnitude, self.hparams) end
  return nil
end

function AugmentOp:__call(img)
  if self.prob < 1 and R.random() > self.prob then return img end
  local arg = self:level_args()
  return self.aug_fn(img, arg, self.kwargs)
end

------------------------------------------------------------------ AutoAugment
local POLICIES = {}
POLICIES.original = {
  {{'PosterizeOriginal', 0.4, 8}, {'Rotate', 0.6, 9}},
  {{'Solarize', 0.6, 5}, {'AutoContrast', 0.6, 5}},
  {{'Equalize', 0.8, 8}, {'Equalize', 0.6, 3}},
  {{'PosterizeOriginal', 0.6, 7}, {'PosterizeOriginal', 0.6, 6}},
  {{'Equalize', 0.4, 7}, {'Solarize', 0.2, 4}},
  {{'Equalize', 0.4, 4}, {'Rotate', 0.8, 8}},
  {{'Solarize', 0.6, 3}, {'Equalize', 0.6, 7}},
  {{'PosterizeOriginal', 0.8, 5}, {'Equalize', 1.0, 2}},
  {{'Rotate', 0.2, 3}, {'Solarize', 0.6, 8}},
  {{'Equalize', 0.6, 8}, {'PosterizeOriginal', 0.4, 6}},
  {{'Rotate', 0.8, 8}, {'Color', 0.4, 0}},
  {{'Rotate', 0.4, 9}, {'Equalize', 0.6, 2}},
  {{'Equalize', 0.0, 7}, {'Equalize', 0.8, 8}},
  {{'Invert', 0.6, 4}, {'Equalize', 1.0, 8}},
  {{'Color', 0.6, 4}, {'Contrast', 1.0, 8}},
  {{'Rotate', 0.8, 8}, {'Color', 1.0, 2}},
  {{'Color', 0.8, 8}, {'Solarize', 0.8, 7}},
  {{'Sharpness', 0.4, 7}, {'Invert', 0.6, 8}},
  {{'ShearX', 0.6, 5}, {'Equalize', 1.0, 9}},
  {{'Color', 0.4, 0}, {'Equalize', 0.6, 3}},
  {{'Equalize', 0.4, 7}, {'Solarize', 0.2, 4}},
  {{'Solarize', 0.6, 5}, {'AutoContrast', 0.6, 5}},
  {{'Invert', 0.6, 4}, {'Equalize', 1.0, 8}},
  {{'Color', 0.6, 4}, {'Contrast', 1.0, 8}},
  {{'Equalize', 0.8, 8}, {'Equalize', 0.6, 3}},
}
-- 'originalr': the research variant, PosterizeIncreasing for PosterizeOriginal
POLICIES.originalr = {}
for i, sub in ipairs(POLICIES.original) do
  POLICIES.originalr[i] = {}
  for j, op in ipairs(sub) do
    local name = op[1] == 'PosterizeOriginal' and 'PosterizeIncreasing' or op[1]
    POLICIES.originalr[i][j] = {name, op[2], op[3]}
  end
end
M.POLICIES = POLICIES

--- auto_augment_policy(name, hparams) -> list of sub-policies (lists of AugmentOps)
function M.auto_augment_policy(name, hparams)
  local p = POLICIES[name or 'original']
  if not p then fail('AutoAugment', ("unknown policy '%s' (original, originalr)"):format(tostring(name))) end
  local out = {}
  for i, sub in ipairs(p) do
    out[i] = {}
    for j, op in ipairs(sub) do out[i][j] = AugmentOp.new(op[1], op[2], op[3], hparams) end
  end
  return out
end

local AutoAugment = class('AutoAugment')
M.AutoAugment = AutoAugment

--- AutoAugment(policy_or_config = 'original', hparams): a policy name or
-- config string ('original-mstd0.5'), or a list of sub-policies.
function AutoAugment:__init(policy, hparams)
  if policy == nil or type(policy) == 'string' then
    policy = M.auto_augment_transform(policy or 'original', hparams).policy
  end
  self.policy = policy
end
AutoAugment.new = AutoAugment
function AutoAugment:__call(img)
  local sub = R.choice(self.policy)
  for _, op in ipairs(sub) do img = op(img) end
  return img
end
function AutoAugment:__tostring() return ('AutoAugment(%d sub-policies)'):format(#self.policy) end

-- 'key<value>' sections after the first: {key, value-string}
local function sections(config, op)
  local parts = {}
  for p in (config .. '-'):gmatch('([^-]*)-') do parts[#parts + 1] = p end
  local out = {}
  local i = 2
  while i <= #parts do
    local c = parts[i]
    -- a negative number ('d-1') is split by '-': join it back
    if parts[i + 1] and c:match('^%a+$') and parts[i + 1]:match('^%d') then
      c = c .. '-' .. parts[i + 1]
      i = i + 1
    end
    local key, val = c:match('^(%a+)(%-?%d.*)$')
    if key then out[#out + 1] = {key, val}
    elseif c ~= '' and not c:match('^%a+$') then fail(op, ("bad config section '%s'"):format(c)) end
    i = i + 1
  end
  return parts[1], out
end
M._config_sections = sections

local function number(v, op, key)
  local n = tonumber(v)
  if not n then fail(op, ("config section '%s%s' needs a number"):format(key, v)) end
  return n
end

--- auto_augment_transform('original-mstd0.5', hparams)
function M.auto_augment_transform(config_str, hparams)
  local name, secs = sections(config_str, 'AutoAugment')
  hparams = copy(hparams)
  for _, kv in ipairs(secs) do
    if kv[1] == 'mstd' then
      if hparams.magnitude_std == nil then hparams.magnitude_std = number(kv[2], 'AutoAugment', 'mstd') end
    else
      fail('AutoAugment', ("unknown config section '%s%s' (mstd)"):format(kv[1], kv[2]))
    end
  end
  return AutoAugment.new(M.auto_augment_policy(name, hparams))
end

------------------------------------------------------------------ RandAugment
M.RAND_TRANSFORMS = {'AutoContrast', 'Equalize', 'Invert', 'Rotate', 'Posterize', 'Solarize',
  'SolarizeAdd', 'Color', 'Contrast', 'Brightness', 'Sharpness', 'ShearX', 'ShearY',
  'TranslateXRel', 'TranslateYRel'}
M.RAND_INCREASING_TRANSFORMS = {'AutoContrast', 'Equalize', 'Invert', 'Rotate', 'PosterizeIncreasing',
  'SolarizeIncreasing', 'SolarizeAdd', 'ColorIncreasing', 'ContrastIncreasing', 'BrightnessIncreasing',
  'SharpnessIncreasing', 'ShearX', 'ShearY', 'TranslateXRel', 'TranslateYRel'}
local RAND_CHOICE_WEIGHTS_0 = {Rotate = 0.3, ShearX = 0.2, ShearY = 0.2, TranslateXRel = 0.1,
  TranslateYRel = 0.1, Color = 0.025, Sharpness = 0.025, AutoContrast = 0.025, Solarize = 0.005,
  SolarizeAdd = 0.005, Contrast = 0.005, Brightness = 0.005, Equalize = 0.005, Posterize = 0, Invert = 0}

function M.select_rand_weights(weight_idx, transforms)
  if weight_idx ~= 0 then fail('RandAugment', 'only weight index 0 is defined, got ' .. tostring(weight_idx)) end
  transforms = transforms or M.RAND_TRANSFORMS
  local p, total = {}, 0
  for i, name in ipairs(transforms) do
    p[i] = RAND_CHOICE_WEIGHTS_0[name] or 0
    total = total + p[i]
  end
  for i = 1, #p do p[i] = p[i] / total end
  return p
end

function M.rand_augment_ops(magnitude, hparams, transforms)
  local ops = {}
  for i, name in ipairs(transforms or M.RAND_TRANSFORMS) do
    ops[i] = AugmentOp.new(name, 0.5, magnitude or 10, hparams)
  end
  return ops
end

local RandAugment = class('RandAugment')
M.RandAugment = RandAugment

--- RandAugment(config_str, hparams) (e.g. 'rand-m9-mstd0.5') or
-- RandAugment(ops, num_layers = 2, choice_weights).
function RandAugment:__init(ops, num_layers, choice_weights)
  if type(ops) == 'string' then
    local t = M.rand_augment_transform(ops, num_layers)
    ops, num_layers, choice_weights = t.ops, t.num_layers, t.choice_weights
  end
  if type(ops) ~= 'table' or #ops == 0 then fail('RandAugment', 'expected a config string or a list of ops') end
  self.ops, self.num_layers, self.choice_weights = ops, num_layers or 2, choice_weights
end
RandAugment.new = RandAugment
function RandAugment:__call(img)
  for _, op in ipairs(R.choices(self.ops, self.num_layers, self.choice_weights)) do img = op(img) end
  return img
end
function RandAugment:__tostring()
  local names = {}
  for i, op in ipairs(self.ops) do names[i] = op.name end
  return ('RandAugment(n=%d, m=%g, ops={%s})'):format(self.num_layers, self.ops[1].magnitude,
                                                      table.concat(names, ', '))
end

--- rand_augment_transform('rand-m9-n2-mstd0.5-inc1', hparams)
function M.rand_augment_transform(config_str, hparams)
  local name, secs = sections(config_str, 'RandAugment')
  if name ~= 'rand' then fail('RandAugment', ("config must start with 'rand', got '%s'"):format(config_str)) end
  hparams = copy(hparams)
  local magnitude, num_layers, weight_idx = LEVEL_DENOM, 2, nil
  local transforms = M.RAND_TRANSFORMS
  for _, kv in ipairs(secs) do
    local key, val = kv[1], kv[2]
    if key == 'mstd' then
      local mstd = number(val, 'RandAugment', key)
      if mstd > 100 then mstd = math.huge end
      if hparams.magnitude_std == nil then hparams.magnitude_std = mstd end
    elseif key == 'mmax' then
      if hparams.magnitude_max == nil then hparams.magnitude_max = floor(number(val, 'RandAugment', key)) end
    elseif key == 'inc' then
      if number(val, 'RandAugment', key) ~= 0 then transforms = M.RAND_INCREASING_TRANSFORMS end
    elseif key == 'm' then magnitude = number(val, 'RandAugment', key)
    elseif key == 'n' then num_layers = floor(number(val, 'RandAugment', key))
    elseif key == 'w' then weight_idx = floor(number(val, 'RandAugment', key))
    else
      fail('RandAugment', ("unknown config section '%s%s' (m, n, mstd, mmax, inc, w)"):format(key, val))
    end
  end
  local ops = M.rand_augment_ops(magnitude, hparams, transforms)
  -- weights by position in the standard list (as timm, also for the increasing ops)
  local weights = weight_idx and M.select_rand_weights(weight_idx) or nil
  return RandAugment.new(ops, num_layers, weights)
end

------------------------------------------------------------------ AugMix
M.AUGMIX_TRANSFORMS = {'AutoContrast', 'ColorIncreasing', 'ContrastIncreasing', 'BrightnessIncreasing',
  'SharpnessIncreasing', 'Equalize', 'Rotate', 'PosterizeIncreasing', 'SolarizeIncreasing', 'ShearX',
  'ShearY', 'TranslateXRel', 'TranslateYRel'}

function M.augmix_ops(magnitude, hparams, transforms)
  local ops = {}
  for i, name in ipairs(transforms or M.AUGMIX_TRANSFORMS) do
    ops[i] = AugmentOp.new(name, 1.0, magnitude or 10, hparams)
  end
  return ops
end

local AugMix = class('AugMix')
M.AugMix = AugMix

--- AugMix(config_str, hparams) ('augmix-m3-w3-d-1-a1'), AugMix{severity = 3,
-- width = 3, depth = -1, alpha = 1, hparams =}, or AugMix(ops, {alpha =, width =, depth =}).
function AugMix:__init(a, b)
  if type(a) == 'string' then
    local t = M.augment_and_mix_transform(a, b)
    a, b = t.ops, t
  elseif type(a) == 'table' and #a == 0 then
    local hp = copy(a.hparams)
    if hp.magnitude_std == nil then hp.magnitude_std = math.huge end
    a, b = M.augmix_ops(a.severity or 3, hp), a
  end
  b = b or {}
  if b.blended then fail('AugMix', 'blended mode is not implemented') end
  self.ops, self.alpha, self.width, self.depth = a, b.alpha or 1.0, b.width or 3, b.depth or -1
  if self.width < 1 then fail('AugMix', 'width must be at least 1') end
end
AugMix.new = AugMix

function AugMix:__tostring()
  return ('AugMix(width=%d, depth=%d, alpha=%g, %d ops)'):format(self.width, self.depth, self.alpha, #self.ops)
end

function AugMix:__call(img)
  local alphas = {}
  for i = 1, self.width do alphas[i] = self.alpha end
  local ws = R.dirichlet(alphas)
  local m = R.beta(self.alpha, self.alpha)
  local is_float = img:is_floating_point()
  local bound = TF._max_value(img.dtype)
  local x = is_float and img or img:float()
  local mixed = x * 0
  for _, mw in ipairs(ws) do
    local depth = self.depth > 0 and self.depth or R.randint(1, 4)
    local aug = img
    for _, op in ipairs(R.choices(self.ops, depth)) do aug = op(aug) end
    mixed = mixed + (is_float and aug or aug:float()) * mw
  end
  mixed = mixed:clamp(0, bound)
  if not is_float then mixed = mixed:floor() end   -- numpy's astype(uint8) truncates
  local out = x * (1 - m) + mixed * m               -- Image.blend(img, mixed, m)
  if is_float then return out end
  return out:round():clamp(0, bound):to(img.dtype)
end

--- augment_and_mix_transform('augmix-m3-w3-d-1', hparams)
function M.augment_and_mix_transform(config_str, hparams)
  local name, secs = sections(config_str, 'AugMix')
  if name ~= 'augmix' then fail('AugMix', ("config must start with 'augmix', got '%s'"):format(config_str)) end
  hparams = copy(hparams)
  local magnitude, width, depth, alpha = 3, 3, -1, 1.0
  for _, kv in ipairs(secs) do
    local key, val = kv[1], number(kv[2], 'AugMix', kv[1])
    if key == 'mstd' then if hparams.magnitude_std == nil then hparams.magnitude_std = val end
    elseif key == 'm' then magnitude = val
    elseif key == 'w' then width = floor(val)
    elseif key == 'd' then depth = floor(val)
    elseif key == 'a' then alpha = val
    elseif key == 'b' then
      if val ~= 0 then fail('AugMix', 'blended mode (b1) is not implemented') end
    else fail('AugMix', ("unknown config section '%s%s' (m, w, d, a, mstd)"):format(key, kv[2])) end
  end
  if hparams.magnitude_std == nil then hparams.magnitude_std = math.huge end
  return AugMix.new(M.augmix_ops(magnitude, hparams), {alpha = alpha, width = width, depth = depth})
end

return M
