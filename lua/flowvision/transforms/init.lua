-- flowvision.transforms (vision.transforms): torchvision.transforms on tensors.
--
--   local T = vision.transforms
--   local tf = T.Compose{T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
--                        T.Normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})}
--   local x = tf(img)              -- each transform is callable: t(img) or t:forward(img)
--
-- Images: [C, H, W] (or [N, C, H, W]) tensors, float in [0, 1] or uint8;
-- ToTensor/PILToTensor take a decoded image laid out [H, W, C] or [H, W].
-- Options use torchvision's keyword names in a trailing table:
--   T.Resize(256, {interpolation = 'bilinear', antialias = true})
--   T.RandomCrop(32, {padding = 4, padding_mode = 'reflect'})
-- Random draws come from oneflow's generator (flow.rand, flow.randint,
-- flow.randperm), so flow.manual_seed(s) makes a pipeline reproducible.
-- get_params results (i, j) are 0-based pixel offsets, as torchvision's.
local flow = require 'oneflow'
local TF = require 'flowvision.transforms.functional'

local is_tensor = flow.is_tensor
local floor, log, exp, sqrt = math.floor, math.log, math.exp, math.sqrt
local py_round = TF._py_round

local T = {functional = TF}

------------------------------------------------------------------ classes
local Transform = flow.class('Transform')
Transform.__label = 'transforms.'
T.Transform = Transform

local function repr_value(v)
  if type(v) == 'table' then
    if is_tensor(v) then return 'tensor' end
    local parts = {}
    for i = 1, #v do parts[i] = repr_value(v[i]) end
    return '[' .. table.concat(parts, ', ') .. ']'
  end
  if type(v) == 'string' then return "'" .. v .. "'" end
  if type(v) == 'function' then return '<function>' end
  return tostring(v)
end

function Transform:__tostring()
  local keys = rawget(getmetatable(self), '__repr') or {}
  local parts = {}
  for _, k in ipairs(keys) do
    if self[k] ~= nil then parts[#parts + 1] = k .. '=' .. repr_value(self[k]) end
  end
  return self.__name .. '(' .. table.concat(parts, ', ') .. ')'
end
function Transform.__call(self, ...) return self:forward(...) end

--- Cls = T.Transform:subclass(name, {'field', ...}): fields shown in tostring
-- (an oneflow.class __setup hook; the class is also T[name]).
function Transform.__setup(cls, _, repr)
  cls.__repr = repr
  cls.__call = Transform.__call
  cls.__tostring = Transform.__tostring
  T[cls.__name] = cls
end
function Transform:forward() error(self.__name .. ': forward is not implemented', 2) end

local function fail(op, msg) error(op .. ': ' .. msg, 3) end

local function rand() return flow.rand(1):item() end
local function uniform(a, b) return a + (b - a) * flow.rand(1, {dtype = flow.float64}):item() end
local function randint(lo, hi)   -- integer in [lo, hi)
  return flow.randint(lo, hi, {1}):item()
end
T._rand, T._uniform, T._randint = rand, uniform, randint

local function check_prob(p, op)
  if type(p) ~= 'number' or p < 0 or p > 1 then fail(op, 'p must be a probability in [0, 1], got ' .. tostring(p)) end
  return p
end

local check_options = require('oneflow._args').check_options
-- The options table of transform op, checked against its known keys.
local function opts_of(op, v, allowed) return check_options(op, v, allowed) end

------------------------------------------------------------------ composition
--- Chains transforms, applied in order: `T.Compose{T.ToTensor(), T.Normalize(mean, std)}`.
-- @function flowvision.transforms.Compose
-- @tparam table transforms a list of transforms (callables)
-- @return a transform

local Compose = Transform:subclass('Compose')
function Compose:__init(transforms)
  if type(transforms) ~= 'table' then fail('Compose', 'expected a list of transforms') end
  self.transforms = transforms
end
function Compose:forward(x, ...)
  for _, t in ipairs(self.transforms) do x = t(x, ...) end
  return x
end
function Compose:__tostring()
  local lines = {}
  for _, t in ipairs(self.transforms) do lines[#lines + 1] = '    ' .. tostring(t) end
  return 'Compose(\n' .. table.concat(lines, '\n') .. '\n)'
end

local Lambda = Transform:subclass('Lambda')
function Lambda:__init(fn)
  if type(fn) ~= 'function' and not (type(fn) == 'table' and getmetatable(fn) and getmetatable(fn).__call) then
    fail('Lambda', 'expected a function, got ' .. type(fn))
  end
  self.lambd = fn
end
function Lambda:forward(x) return self.lambd(x) end

local RandomApply = Transform:subclass('RandomApply', {'p'})
function RandomApply:__init(transforms, p)
  self.transforms, self.p = transforms, check_prob(p or 0.5, 'RandomApply')
end
function RandomApply:forward(x)
  if self.p < rand() then return x end
  for _, t in ipairs(self.transforms) do x = t(x) end
  return x
end

local RandomChoice = Transform:subclass('RandomChoice')
function RandomChoice:__init(transforms, p)
  self.transforms, self.p = transforms, p
end
function RandomChoice:forward(x)
  local k
  if self.p then
    local total = 0
    for _, w in ipairs(self.p) do total = total + w end
    local r, acc = rand() * total, 0
    for i, w in ipairs(self.p) do
      acc = acc + w
      if r < acc then k = i break end
    end
    k = k or #self.p
  else
    k = randint(1, #self.transforms + 1)
  end
  return self.transforms[k](x)
end

local RandomOrder = Transform:subclass('RandomOrder')
function RandomOrder:__init(transforms) self.transforms = transforms end
function RandomOrder:forward(x)
  local order = flow.randperm(#self.transforms):totable()
  for _, i in ipairs(order) do x = self.transforms[i](x) end
  return x
end

------------------------------------------------------------------ conversion
local ToTensor = Transform:subclass('ToTensor')
function ToTensor.forward(_, pic) return TF.to_tensor(pic) end

local PILToTensor = Transform:subclass('PILToTensor')
function PILToTensor.forward(_, pic) return TF.pil_to_tensor(pic) end

local ConvertImageDtype = Transform:subclass('ConvertImageDtype', {'dtype'})
function ConvertImageDtype:__init(dtype) self.dtype = flow.dtype(dtype or flow.float32) end
function ConvertImageDtype:forward(img) return TF.convert_image_dtype(img, self.dtype) end

--- Normalizes a float image [..., C, H, W] per channel: (x - mean) / std.
-- @function flowvision.transforms.Normalize
-- @tparam table mean one value per channel
-- @tparam table std one value per channel
-- @tparam[opt] table opts `{inplace = false}`
-- @return a transform

local Normalize = Transform:subclass('Normalize', {'mean', 'std'})
function Normalize:__init(mean, std, opts)
  if mean == nil or std == nil then fail('Normalize', 'expected mean and std') end
  self.mean, self.std, self.inplace = mean, std, opts_of('Normalize', opts, {'inplace'}).inplace or false
end
function Normalize:forward(x) return TF.normalize(x, self.mean, self.std, {inplace = self.inplace}) end

------------------------------------------------------------------ geometry
local Resize = Transform:subclass('Resize', {'size', 'interpolation', 'max_size', 'antialias'})
function Resize:__init(size, opts)
  opts = opts_of('Resize', opts, {'interpolation', 'max_size', 'antialias'})
  if type(size) ~= 'number' and (type(size) ~= 'table' or (#size ~= 1 and #size ~= 2)) then
    fail('Resize', 'size must be a number or a list of 1 or 2 numbers, got ' .. repr_value(size))
  end
  self.size, self.interpolation = size, opts.interpolation or 'bilinear'
  self.max_size, self.antialias = opts.max_size, opts.antialias
end
function Resize:forward(img)
  return TF.resize(img, self.size, {interpolation = self.interpolation, max_size = self.max_size,
                                    antialias = self.antialias})
end

local CenterCrop = Transform:subclass('CenterCrop', {'size'})
function CenterCrop:__init(size) self.size = size end
function CenterCrop:forward(img) return TF.center_crop(img, self.size) end

local Pad = Transform:subclass('Pad', {'padding', 'fill', 'padding_mode'})
function Pad:__init(padding, opts)
  if type(opts) == 'number' then opts = {fill = opts} end
  opts = opts_of('Pad', opts, {'fill', 'padding_mode'})
  TF._padding_ltrb(padding, 'Pad')
  self.padding, self.fill, self.padding_mode = padding, opts.fill or 0, opts.padding_mode or 'constant'
end
function Pad:forward(img)
  return TF.pad(img, self.padding, {fill = self.fill, padding_mode = self.padding_mode})
end

local RandomCrop = Transform:subclass('RandomCrop', {'size', 'padding'})
--- RandomCrop(size, {padding =, pad_if_needed = false, fill = 0, padding_mode = 'constant'})
function RandomCrop:__init(size, opts)
  opts = opts_of('RandomCrop', opts, {'padding', 'pad_if_needed', 'fill', 'padding_mode'})
  self.size = {TF._size_pair(size, 'RandomCrop')}
  self.padding, self.pad_if_needed = opts.padding, opts.pad_if_needed or false
  self.fill, self.padding_mode = opts.fill or 0, opts.padding_mode or 'constant'
end
--- i, j, h, w (0-based offsets) of a random crop of size output_size.
function RandomCrop.get_params(img, output_size)
  local _, h, w = TF.get_dimensions(img)
  local th, tw = output_size[1], output_size[2]
  if h < th or w < tw then
    fail('RandomCrop', ('required crop size %dx%d is larger than the input image %dx%d'):format(th, tw, h, w))
  end
  if w == tw and h == th then return 0, 0, h, w end
  return randint(0, h - th + 1), randint(0, w - tw + 1), th, tw
end
function RandomCrop:forward(img)
  local pad = {fill = self.fill, padding_mode = self.padding_mode}
  if self.padding then img = TF.pad(img, self.padding, pad) end
  local _, h, w = TF.get_dimensions(img)
  local th, tw = self.size[1], self.size[2]
  if self.pad_if_needed and w < tw then img = TF.pad(img, {tw - w, 0}, pad) end
  if self.pad_if_needed and h < th then img = TF.pad(img, {0, th - h}, pad) end
  local i, j, ch, cw = RandomCrop.get_params(img, self.size)
  return TF.crop(img, i, j, ch, cw)
end

local RandomHorizontalFlip = Transform:subclass('RandomHorizontalFlip', {'p'})
function RandomHorizontalFlip:__init(p) self.p = check_prob(p or 0.5, 'RandomHorizontalFlip') end
function RandomHorizontalFlip:forward(img)
  if rand() < self.p then return TF.hflip(img) end
  return img
end

local RandomVerticalFlip = Transform:subclass('RandomVerticalFlip', {'p'})
function RandomVerticalFlip:__init(p) self.p = check_prob(p or 0.5, 'RandomVerticalFlip') end
function RandomVerticalFlip:forward(img)
  if rand() < self.p then return TF.vflip(img) end
  return img
end

local RandomResizedCrop = Transform:subclass('RandomResizedCrop',
  {'size', 'scale', 'ratio', 'interpolation', 'antialias'})
--- RandomResizedCrop(size, {scale = {0.08, 1}, ratio = {3/4, 4/3},
--                     interpolation = 'bilinear', antialias =})
function RandomResizedCrop:__init(size, opts)
  opts = opts_of('RandomResizedCrop', opts, {'scale', 'ratio', 'interpolation', 'antialias'})
  self.size = {TF._size_pair(size, 'RandomResizedCrop')}
  self.scale = opts.scale or {0.08, 1.0}
  self.ratio = opts.ratio or {3 / 4, 4 / 3}
  if self.scale[1] > self.scale[2] or self.ratio[1] > self.ratio[2] then
    fail('RandomResizedCrop', 'scale and ratio should be of kind (min, max)')
  end
  self.interpolation, self.antialias = opts.interpolation or 'bilinear', opts.antialias
end

--- get_params(img_or_{h, w}, scale, ratio[, draw]) -> i, j, h, w (0-based).
-- torchvision's 10 tries, then the central-crop fallback. `draw` replaces
-- the generator: draw.uniform(a, b) and draw.randint(lo, hi) ([lo, hi)).
function RandomResizedCrop.get_params(img, scale, ratio, draw)
  local height, width
  if is_tensor(img) then
    local _
    _, height, width = TF.get_dimensions(img)
  else
    height, width = img[1], img[2]
  end
  local uni = draw and draw.uniform or uniform
  local rint = draw and draw.randint or randint
  local area = height * width
  local lr1, lr2 = log(ratio[1]), log(ratio[2])
  for _ = 1, 10 do
    local target_area = area * uni(scale[1], scale[2])
    local aspect = exp(uni(lr1, lr2))
    local w = py_round(sqrt(target_area * aspect))
    local h = py_round(sqrt(target_area / aspect))
    if w > 0 and w <= width and h > 0 and h <= height then
      local i = rint(0, height - h + 1)
      local j = rint(0, width - w + 1)
      return i, j, h, w
    end
  end
  local in_ratio = width / height
  local w, h
  if in_ratio < math.min(ratio[1], ratio[2]) then
    w = width
    h = py_round(w / math.min(ratio[1], ratio[2]))
  elseif in_ratio > math.max(ratio[1], ratio[2]) then
    h = height
    w = py_round(h * math.max(ratio[1], ratio[2]))
  else
    w, h = width, height
  end
  return floor((height - h) / 2), floor((width - w) / 2), h, w
end
function RandomResizedCrop:forward(img)
  local i, j, h, w = RandomResizedCrop.get_params(img, self.scale, self.ratio)
  return TF.resized_crop(img, i, j, h, w, self.size,
                         {interpolation = self.interpolation, antialias = self.antialias})
end

local function range_of(v, name, center, bound, op)
  if v == nil then return nil end
  if type(v) == 'number' then
    if v < 0 then fail(op, ('if %s is a single number, it must be non negative'):format(name)) end
    v = {center - v, center + v}
    if bound then v[1] = math.max(v[1], bound[1]) end
  elseif type(v) ~= 'table' or #v ~= 2 or type(v[1]) ~= 'number' or type(v[2]) ~= 'number' then
    fail(op, name .. ' should be a number or a list of 2 numbers')
  end
  if bound and (v[1] < bound[1] or v[2] > bound[2] or v[1] > v[2]) then
    fail(op, ('%s values should be between %g and %g'):format(name, bound[1], bound[2]))
  end
  if v[1] == center and v[2] == center then return nil end
  return v
end

------------------------------------------------------------------ colour
local ColorJitter = Transform:subclass('ColorJitter', {'brightness', 'contrast', 'saturation', 'hue'})
--- ColorJitter(brightness, contrast, saturation, hue): each a number x (the
-- factor is drawn from [max(0, 1 - x), 1 + x]; hue: [-x, x], x <= 0.5) or
-- a {min, max} pair. Also ColorJitter{brightness =, contrast =, ...}.
function ColorJitter:__init(brightness, contrast, saturation, hue)
  if type(brightness) == 'table' and (brightness.brightness or brightness.contrast
     or brightness.saturation or brightness.hue) then
    local o = brightness
    brightness, contrast, saturation, hue = o.brightness, o.contrast, o.saturation, o.hue
  end
  local inf = {0, math.huge}
  self.brightness = range_of(brightness or 0, 'brightness', 1, inf, 'ColorJitter')
  self.contrast = range_of(contrast or 0, 'contrast', 1, inf, 'ColorJitter')
  self.saturation = range_of(saturation or 0, 'saturation', 1, inf, 'ColorJitter')
  self.hue = range_of(hue or 0, 'hue', 0, {-0.5, 0.5}, 'ColorJitter')
end
--- fn_idx (a permutation of 1..4), then the four factors (nil when unused).
function ColorJitter.get_params(brightness, contrast, saturation, hue)
  local order = flow.randperm(4):totable()
  local b = brightness and uniform(brightness[1], brightness[2])
  local c = contrast and uniform(contrast[1], contrast[2])
  local s = saturation and uniform(saturation[1], saturation[2])
  local h = hue and uniform(hue[1], hue[2])
  return order, b, c, s, h
end
function ColorJitter:forward(img)
  local order, b, c, s, h = ColorJitter.get_params(self.brightness, self.contrast, self.saturation, self.hue)
  for _, k in ipairs(order) do
    if k == 1 and b then img = TF.adjust_brightness(img, b)
    elseif k == 2 and c then img = TF.adjust_contrast(img, c)
    elseif k == 3 and s then img = TF.adjust_saturation(img, s)
    elseif k == 4 and h then img = TF.adjust_hue(img, h) end
  end
  return img
end

local Grayscale = Transform:subclass('Grayscale', {'num_output_channels'})
function Grayscale:__init(n) self.num_output_channels = n or 1 end
function Grayscale:forward(img) return TF.rgb_to_grayscale(img, self.num_output_channels) end

local RandomGrayscale = Transform:subclass('RandomGrayscale', {'p'})
function RandomGrayscale:__init(p) self.p = check_prob(p or 0.1, 'RandomGrayscale') end
function RandomGrayscale:forward(img)
  if rand() < self.p then return TF.rgb_to_grayscale(img, (TF.get_dimensions(img))) end
  return img
end

local function random_op(name, fn, arg_name)
  local cls = Transform:subclass(name, {arg_name, 'p'})
  function cls:__init(arg, p)
    if arg_name then self[arg_name] = arg else p = arg end
    self.p = check_prob(p or 0.5, name)
  end
  function cls:forward(img)
    if rand() < self.p then return fn(img, arg_name and self[arg_name]) end
    return img
  end
end
random_op('RandomInvert', TF.invert)
random_op('RandomPosterize', TF.posterize, 'bits')
random_op('RandomSolarize', TF.solarize, 'threshold')
random_op('RandomAdjustSharpness', TF.adjust_sharpness, 'sharpness_factor')
random_op('RandomAutocontrast', TF.autocontrast)
random_op('RandomEqualize', TF.equalize)

local GaussianBlur = Transform:subclass('GaussianBlur', {'kernel_size', 'sigma'})
--- GaussianBlur(kernel_size, sigma = {0.1, 2.0}): sigma drawn uniformly per call.
function GaussianBlur:__init(kernel_size, sigma)
  local kx, ky = TF._size_pair(kernel_size, 'GaussianBlur')
  if kx <= 0 or ky <= 0 or kx % 2 == 0 or ky % 2 == 0 then
    fail('GaussianBlur', 'kernel size values should be odd and positive')
  end
  self.kernel_size = {kx, ky}
  sigma = sigma or {0.1, 2.0}
  if type(sigma) == 'number' then
    if sigma <= 0 then fail('GaussianBlur', 'if sigma is a single number, it must be positive') end
    sigma = {sigma, sigma}
  end
  if type(sigma) ~= 'table' or type(sigma[1]) ~= 'number' or type(sigma[2]) ~= 'number'
     or sigma[1] <= 0 or sigma[1] > sigma[2] then
    fail('GaussianBlur', 'sigma values should be positive and of the form (min, max)')
  end
  self.sigma = sigma
end
function GaussianBlur.get_params(smin, smax) return uniform(smin, smax) end
function GaussianBlur:forward(img)
  local s = GaussianBlur.get_params(self.sigma[1], self.sigma[2])
  return TF.gaussian_blur(img, {self.kernel_size[2], self.kernel_size[1]}, {s, s})
end

------------------------------------------------------------------ affine
local function degrees_range(d, op)
  if type(d) == 'number' then
    if d < 0 then fail(op, 'if degrees is a single number, it must be positive') end
    return {-d, d}
  end
  if type(d) ~= 'table' or #d ~= 2 then fail(op, 'degrees should be a number or a list of 2 numbers') end
  return {d[1], d[2]}
end

local RandomRotation = Transform:subclass('RandomRotation',
  {'degrees', 'interpolation', 'expand', 'fill'})
--- RandomRotation(degrees, {interpolation = 'nearest', expand = false, center =, fill = 0})
function RandomRotation:__init(degrees, opts)
  opts = opts_of('RandomRotation', opts, {'interpolation', 'expand', 'center', 'fill'})
  self.degrees = degrees_range(degrees, 'RandomRotation')
  self.interpolation, self.expand = opts.interpolation or 'nearest', opts.expand or false
  self.center, self.fill = opts.center, opts.fill or 0
end
function RandomRotation.get_params(degrees) return uniform(degrees[1], degrees[2]) end
function RandomRotation:forward(img)
  local angle = RandomRotation.get_params(self.degrees)
  return TF.rotate(img, angle, {interpolation = self.interpolation, expand = self.expand,
                                center = self.center, fill = self.fill})
end

local RandomAffine = Transform:subclass('RandomAffine',
  {'degrees', 'translate', 'scale', 'shear', 'interpolation', 'fill'})
--- RandomAffine(degrees, {translate = {a, b}, scale = {lo, hi}, shear =,
--               interpolation = 'nearest', fill = 0, center =})
-- (positional translate, scale, shear are accepted too, as in torchvision.)
function RandomAffine:__init(degrees, translate, scale, shear, opts)
  if require('oneflow._args').is_options(translate) then
    opts, translate = translate, nil
  end
  opts = opts_of('RandomAffine', opts, {'translate', 'scale', 'shear', 'interpolation', 'fill', 'center'})
  translate, scale, shear = translate or opts.translate, scale or opts.scale, shear or opts.shear
  self.degrees = degrees_range(degrees, 'RandomAffine')
  if translate then
    if #translate ~= 2 or translate[1] < 0 or translate[1] > 1 or translate[2] < 0 or translate[2] > 1 then
      fail('RandomAffine', 'translate should be a list of 2 fractions in [0, 1]')
    end
  end
  if scale and (#scale ~= 2 or scale[1] <= 0 or scale[2] <= 0) then
    fail('RandomAffine', 'scale should be a list of 2 positive numbers')
  end
  if shear then
    if type(shear) == 'number' then
      if shear < 0 then fail('RandomAffine', 'if shear is a single number, it must be positive') end
      shear = {-shear, shear}
    elseif #shear ~= 2 and #shear ~= 4 then
      fail('RandomAffine', 'shear should be a number or a list of 2 or 4 numbers')
    end
  end
  self.translate, self.scale, self.shear = translate, scale, shear
  self.interpolation, self.fill, self.center = opts.interpolation or 'nearest', opts.fill or 0, opts.center
end
--- angle, {tx, ty}, scale, {shear_x, shear_y} for an image of img_size {w, h}.
function RandomAffine.get_params(degrees, translate, scale_ranges, shears, img_size)
  local angle = uniform(degrees[1], degrees[2])
  local tx, ty = 0, 0
  if translate then
    local max_dx, max_dy = translate[1] * img_size[1], translate[2] * img_size[2]
    tx = py_round(uniform(-max_dx, max_dx))
    ty = py_round(uniform(-max_dy, max_dy))
  end
  local scale = scale_ranges and uniform(scale_ranges[1], scale_ranges[2]) or 1.0
  local sx, sy = 0.0, 0.0
  if shears then
    sx = uniform(shears[1], shears[2])
    if #shears == 4 then sy = uniform(shears[3], shears[4]) end
  end
  return angle, {tx, ty}, scale, {sx, sy}
end
function RandomAffine:forward(img)
  local _, h, w = TF.get_dimensions(img)
  local angle, tr, sc, sh = RandomAffine.get_params(self.degrees, self.translate, self.scale, self.shear, {w, h})
  return TF.affine(img, angle, tr, sc, sh, {interpolation = self.interpolation, fill = self.fill,
                                            center = self.center})
end

------------------------------------------------------------------ erasing
local RandomErasing = Transform:subclass('RandomErasing', {'p', 'scale', 'ratio', 'value', 'inplace'})
--- RandomErasing(p = 0.5, {scale = {0.02, 0.33}, ratio = {0.3, 3.3}, value = 0, inplace = false});
-- value a number, a list per channel or 'random' (normal noise). Also
-- RandomErasing{p =, scale =, ...}.
function RandomErasing:__init(p, opts)
  if type(p) == 'table' then opts, p = p, p.p end
  opts = opts_of('RandomErasing', opts, {'p', 'scale', 'ratio', 'value', 'inplace'})
  self.p = check_prob(p or 0.5, 'RandomErasing')
  self.scale = opts.scale or {0.02, 0.33}
  self.ratio = opts.ratio or {0.3, 3.3}
  self.value = opts.value or 0
  self.inplace = opts.inplace or false
  if type(self.value) == 'string' and self.value ~= 'random' then
    fail('RandomErasing', "if value is a string, it must be 'random'")
  end
  if self.scale[1] > self.scale[2] or self.ratio[1] > self.ratio[2] then
    fail('RandomErasing', 'scale and ratio should be of kind (min, max)')
  end
  if self.scale[1] < 0 or self.scale[2] > 1 then fail('RandomErasing', 'scale should be between 0 and 1') end
end
--- i, j, h, w, v for erasing img (v nil: leave the image as it is).
function RandomErasing.get_params(img, scale, ratio, value)
  local c, ih, iw = TF.get_dimensions(img)
  local area = ih * iw
  local lr1, lr2 = log(ratio[1]), log(ratio[2])
  for _ = 1, 10 do
    local erase_area = area * uniform(scale[1], scale[2])
    local aspect = exp(uniform(lr1, lr2))
    local h = py_round(sqrt(erase_area * aspect))
    local w = py_round(sqrt(erase_area / aspect))
    if h < ih and w < iw then
      local v
      if value == nil then
        v = flow.randn(c, h, w, {dtype = img:is_floating_point() and img.dtype or flow.float32})
      else
        v = flow.tensor(value):view(-1, 1, 1)
      end
      local i = randint(0, ih - h + 1)
      local j = randint(0, iw - w + 1)
      return i, j, h, w, v
    end
  end
  return 0, 0, ih, iw, img
end
function RandomErasing:forward(img)
  if rand() >= self.p then return img end
  local c = TF.get_dimensions(img)
  local value = self.value
  if type(value) == 'number' then value = {value} end
  if value == 'random' then value = nil end
  if value and #value ~= 1 and #value ~= c then
    fail('RandomErasing', ('value should be a number or a list of 1 or %d numbers (one per channel)'):format(c))
  end
  local i, j, h, w, v = RandomErasing.get_params(img, self.scale, self.ratio, value)
  if v == img then return img end
  return TF.erase(img, i, j, h, w, v:to(img.dtype), {inplace = self.inplace})
end

return T
