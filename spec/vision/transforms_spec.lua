-- vision.transforms: closed-form values, torchvision's parameter sampling
-- given fixed draws, reproducibility with manual_seed, error messages, and
-- (when /usr/bin/python3 has torch + torchvision) parity with torchvision's
-- functional ops on the same image (spec/vision/tv_reference.py).
local flow = require 'oneflow'
local json = require 'oneflow.utils.json'
local vision = require 'flowvision'
local H = require 'spec.helpers'

local T = vision.transforms
local TF = T.functional

-- the formula tv_reference.py uses
local function image(c, h, w)
  local t = {}
  for k = 0, c - 1 do
    t[k + 1] = {}
    for y = 0, h - 1 do
      t[k + 1][y + 1] = {}
      for x = 0, w - 1 do t[k + 1][y + 1][x + 1] = ((k + 1) * (y * 31 + x * 17) + y * x * 3) % 256 end
    end
  end
  return flow.tensor(t)
end

local function same(a, b) return a:size():totable()[1] == b:size():totable()[1] and a:eq(b):all():item() end

describe('transforms: conversion and normalisation', function()
  it('ToTensor scales uint8 HWC/CHW/HW to float CHW in [0, 1]', function()
    local hwc = flow.tensor({{{0, 255, 51}, {102, 0, 0}}}, {dtype = flow.uint8})   -- [1, 2, 3]
    local x = T.ToTensor()(hwc)
    assert.are.same({3, 1, 2}, H.shape(x))
    H.close(x, {{{0, 0.4}}, {{1, 0}}, {{0.2, 0}}})
    local chw = flow.full({3, 8, 9}, 51, {dtype = flow.uint8})
    H.close(T.ToTensor()(chw):mean(), 0.2)
    assert.are.same({1, 8, 9}, H.shape(T.ToTensor()(flow.zeros(8, 9, {dtype = flow.uint8}))))
    local keep = T.PILToTensor()(hwc)
    assert.are.equal(flow.uint8, keep.dtype)
    H.close(keep, {{{0, 102}}, {{255, 0}}, {{51, 0}}})
    H.raises(function() T.ToTensor()(flow.zeros(2, 3, 4, 5)) end, 'to_tensor', 'expected an image')
    H.raises(function() T.ToTensor()(flow.zeros(6, 7, 8)) end, 'cannot tell the channel dim')
  end)

  it('ConvertImageDtype follows torchvision', function()
    local f = flow.tensor({{{0, 0.5, 1}}})
    H.close(T.ConvertImageDtype(flow.uint8)(f), {{{0, 127, 255}}})
    local u = flow.tensor({{{0, 51, 255}}}, {dtype = flow.uint8})
    H.close(TF.convert_image_dtype(u, flow.float32), {{{0, 0.2, 1}}})
    H.close(TF.convert_image_dtype(u, flow.int32), {{{0, 51 * 2 ^ 23, 255 * 2 ^ 23}}})
    H.raises(function() TF.convert_image_dtype(f, flow.int64) end, 'cannot be performed safely')
  end)

  it('Normalize per channel, in place when asked, batched', function()
    local x = flow.ones(2, 2, 2)
    H.close(T.Normalize({0.5, 0.25}, {0.5, 0.25})(x), {{{1, 1}, {1, 1}}, {{3, 3}, {3, 3}}})
    local b = flow.ones(4, 2, 3, 3)
    assert.are.same({4, 2, 3, 3}, H.shape(TF.normalize(b, {0, 1}, {2, 2})))
    local y = T.Normalize({1, 1}, {1, 1}, {inplace = true})(x)
    H.close(x:sum(), 0)
    assert.are.equal(y, x)
    H.raises(function() TF.normalize(flow.ones(2, 2, 2, {dtype = flow.uint8}), {0}, {1}) end,
             'normalize', 'expected a float tensor')
    H.raises(function() TF.normalize(x, {0, 0}, {1, 0}) end, 'std evaluated to zero')
    H.raises(function() TF.normalize(x, {0, 0, 0}, {1, 1, 1}) end, 'mean has 3 values but the image has 2 channels')
  end)
end)

describe('transforms: geometry', function()
  it('Resize keeps the aspect ratio for a number, averages 2x2 blocks when halving', function()
    local img = image(3, 11, 14) / 255
    assert.are.same({3, 5, 6}, H.shape(T.Resize(5)(img)))
    assert.are.same({3, 8, 7}, H.shape(T.Resize(7)(flow.zeros(3, 17, 14))))
    assert.are.same({3, 3, 6}, H.shape(T.Resize(5, {max_size = 6})(flow.zeros(3, 11, 22))))
    H.raises(function() T.Resize(10, {max_size = 9})(img) end, 'max_size = 9 must be strictly greater')
    local x = flow.arange(16):float():view(1, 4, 4)
    H.close(TF.resize(x, {2, 2}), {{{2.5, 4.5}, {10.5, 12.5}}})
    H.close(TF.resize(x, {2, 2}, {interpolation = 'nearest'}), {{{0, 2}, {8, 10}}})
    -- antialiased halving of a 4-wide row: the triangle of support 2 cut at the
    -- border, weights (0.75, 0.75, 0.25) / 1.75 and (0.25, 0.75, 0.75) / 1.75
    H.close(TF.resize(flow.tensor({{{0, 8, 16, 24}}}), {1, 2}, {antialias = true}), {{{40 / 7, 32 / 1.75}}}, 1e-5)
    local u = TF.resize(image(3, 11, 14):byte(), {7, 9})
    assert.are.equal(flow.uint8, u.dtype)
    assert.are.same({2, 3, 4, 5}, H.shape(T.Resize({4, 5})(flow.rand(2, 3, 8, 8))))
    H.raises(function() T.Resize('big') end, 'Resize', 'size must be')
    H.raises(function() TF.resize(5, 3) end, 'resize', 'expected an image tensor')
  end)

  it('CenterCrop, Pad and flips', function()
    local x = flow.arange(20):float():view(1, 4, 5)
    -- offsets round((4 - 2) / 2) = 1 and round((5 - 2) / 2) = 2 (half to even, as Python)
    H.close(T.CenterCrop(2)(x), {{{7, 8}, {12, 13}}})
    H.close(T.CenterCrop({1, 3})(x), {{{11, 12, 13}}})
    local big = T.CenterCrop({6, 5})(x)
    assert.are.same({1, 6, 5}, H.shape(big))
    H.close(big:select(2, 1), {{0, 0, 0, 0, 0}})
    local r = flow.tensor({{{1, 2, 3}}})
    H.close(TF.pad(r, {2, 0}, {padding_mode = 'reflect'}), {{{3, 2, 1, 2, 3, 2, 1}}})
    H.close(TF.pad(r, {2, 0}, {padding_mode = 'symmetric'}), {{{2, 1, 1, 2, 3, 3, 2}}})
    H.close(TF.pad(r, {2, 0}, {padding_mode = 'edge'}), {{{1, 1, 1, 2, 3, 3, 3}}})
    H.close(T.Pad({1, 0, 0, 0}, {fill = 9})(r), {{{9, 1, 2, 3}}})
    H.close(TF.pad(r, {-1, 0, 0, 0}), {{{2, 3}}})
    H.close(T.RandomHorizontalFlip(1)(r), {{{3, 2, 1}}})
    H.close(T.RandomVerticalFlip(1)(flow.tensor({{{1}, {2}}})), {{{2}, {1}}})
    assert.are.equal(r, T.RandomHorizontalFlip(0)(r))
    H.raises(function() TF.pad(r, 1, {padding_mode = 'wrap'}) end, 'padding_mode must be')
  end)

  it('RandomCrop pads and crops reproducibly', function()
    local img = image(3, 8, 8) / 255
    local tf = T.RandomCrop(8, {padding = 2})
    flow.manual_seed(3)
    local a = tf(img)
    flow.manual_seed(3)
    assert.is_true(same(a, tf(img)))
    assert.are.same({3, 8, 8}, H.shape(a))
    assert.are.same({3, 10, 12}, H.shape(T.RandomCrop({10, 12}, {pad_if_needed = true})(img)))
    H.raises(function() T.RandomCrop(9)(img) end, 'larger than the input image')
  end)

  it('RandomResizedCrop.get_params: torchvision sampling and fallback', function()
    local function scripted(uniforms, ints)
      local u, i = 0, 0
      return {uniform = function() u = u + 1; return uniforms[u] end,
              randint = function(lo, hi) i = i + 1; assert(ints[i] >= lo and ints[i] < hi); return ints[i] end}
    end
    local scale, ratio = {0.08, 1}, {3 / 4, 4 / 3}
    -- target area 0.5 * 20000, aspect 1: a 100 x 100 crop at (0, 37)
    local i, j, h, w = T.RandomResizedCrop.get_params({100, 200}, scale, ratio, scripted({10000 / 20000, 0}, {0, 37}))
    assert.are.same({0, 37, 100, 100}, {i, j, h, w})
    -- every try too tall: fallback to the widest ratio, centred
    local us = {}
    for k = 1, 10 do us[2 * k - 1], us[2 * k] = 1.0, math.log(4 / 3) end
    i, j, h, w = T.RandomResizedCrop.get_params({100, 200}, scale, ratio, scripted(us, {}))
    assert.are.same({0, 33, 100, 133}, {i, j, h, w})
    flow.manual_seed(0)
    local out = T.RandomResizedCrop(16)(image(3, 20, 30) / 255)
    assert.are.same({3, 16, 16}, H.shape(out))
  end)

  it('rotate by 90 degrees is an exact rotation; affine identity is the identity', function()
    local x = flow.arange(9):float():view(1, 3, 3)
    H.close(TF.rotate(x, 90), x:transpose(2, 3):flip(2), 1e-6)
    H.close(TF.rotate(x, 90, {interpolation = 'bilinear'}), x:transpose(2, 3):flip(2), 1e-5)
    H.close(TF.affine(x, 0, {0, 0}, 1, 0), x)
    H.close(TF.affine(x, 0, {1, 0}, 1, 0, {fill = 7}), {{{7, 0, 1}, {7, 3, 4}, {7, 6, 7}}})
    -- torchvision's expanded size for this case (its corner shift is by the input size)
    assert.are.same({1, 5, 4}, H.shape(TF.rotate(flow.ones(1, 3, 4), 90, {expand = true})))
    flow.manual_seed(1)
    local rr = T.RandomRotation(30, {interpolation = 'bilinear', fill = 0.5})
    local a = rr(x)
    flow.manual_seed(1)
    assert.is_true(same(a, rr(x)))
    local ra = T.RandomAffine(10, {translate = {0.1, 0.1}, scale = {0.9, 1.1}, shear = 5})
    assert.are.same({2, 1, 3, 3}, H.shape(ra(x:expand(2, 1, 3, 3))))
    H.raises(function() T.RandomAffine(10, {translate = {2, 0}}) end, 'translate should be')
    H.raises(function() TF.rotate(x, 10, {interpolation = 'bicubic'}) end,
             "interpolation must be 'nearest' or 'bilinear'")
  end)
end)

describe('transforms: colour', function()
  it('brightness, contrast, saturation, hue, grayscale: closed forms', function()
    local px = flow.tensor({{{0.2}}, {{0.4}}, {{0.6}}})
    H.close(TF.adjust_brightness(px, 2), {{{0.4}}, {{0.8}}, {{1}}}, 1e-6)
    local gray = 0.2989 * 0.2 + 0.587 * 0.4 + 0.114 * 0.6
    H.close(T.Grayscale()(px), {{{gray}}}, 1e-6)
    H.close(T.Grayscale(3)(px), {{{gray}}, {{gray}}, {{gray}}}, 1e-6)
    H.close(TF.adjust_saturation(px, 0), {{{gray}}, {{gray}}, {{gray}}}, 1e-6)
    H.close(TF.adjust_contrast(px, 0), {{{gray}}, {{gray}}, {{gray}}}, 1e-6)
    H.close(TF.adjust_hue(px, 0), px, 1e-6)
    local red = flow.tensor({{{1}}, {{0}}, {{0}}})
    H.close(TF.adjust_hue(red, 1 / 3), {{{0}}, {{1}}, {{0}}}, 1e-5)
    H.close(TF.adjust_hue(red, -1 / 3), {{{0}}, {{0}}, {{1}}}, 1e-5)
    local u = flow.tensor({{{10, 200}}}, {dtype = flow.uint8})
    H.close(TF.adjust_brightness(u, 1.5), {{{15, 255}}})
    H.close(TF.invert(u), {{{245, 55}}})
    H.close(TF.posterize(u, 2), {{{0, 192}}})
    H.close(TF.solarize(u, 100), {{{10, 55}}})
    H.close(TF.autocontrast(flow.tensor({{{0.25, 0.5, 0.75}}})), {{{0, 0.5, 1}}})
    H.close(TF.gaussian_blur(flow.full({1, 5, 5}, 0.3), 3, 1.0), flow.full({1, 5, 5}, 0.3), 1e-6)
    H.close(TF.adjust_gamma(flow.tensor({{{0.25}}}), 0.5), {{{0.5}}}, 1e-6)
    H.raises(function() TF.adjust_hue(px, 0.7) end, 'hue_factor (0.7) is not in [-0.5, 0.5]')
    H.raises(function() TF.adjust_brightness(px, -1) end, 'brightness_factor must be a non-negative number')
    H.raises(function() T.ColorJitter(0, 0, 0, 0.6) end, 'hue values should be between')
  end)

  it('ColorJitter and RandomGrayscale are reproducible with manual_seed', function()
    local img = image(3, 6, 7) / 255
    local cj = T.ColorJitter(0.4, 0.4, 0.4, 0.1)
    flow.manual_seed(5)
    local a = cj(img)
    flow.manual_seed(5)
    assert.is_true(same(a, cj(img)))
    flow.manual_seed(6)
    assert.is_false(same(a, cj(img)))
    local g = T.RandomGrayscale(1)(img)
    assert.are.same({3, 6, 7}, H.shape(g))
    H.close(g[1], g[2])
    assert.are.same({brightness = {0.5, 1.5}}, {brightness = T.ColorJitter{brightness = 0.5}.brightness})
  end)

  it('GaussianBlur and RandomErasing', function()
    local img = image(3, 9, 9) / 255
    assert.are.same({3, 9, 9}, H.shape(T.GaussianBlur(3, {0.5, 1.5})(img)))
    H.raises(function() T.GaussianBlur(4) end, 'kernel size values should be odd')
    flow.manual_seed(2)
    local e = T.RandomErasing(1, {value = 0})(img)
    local zeros = e:eq(0):logical_and(img:ne(0)):sum():item()
    assert.is_true(zeros > 0)
    assert.is_true(img:ne(0):sum():item() > 0)
    flow.manual_seed(2)
    assert.is_true(same(e, T.RandomErasing(1, {value = 0})(img)))
    local r = T.RandomErasing{p = 1, value = 'random'}(img)
    assert.are.same({3, 9, 9}, H.shape(r))
    assert.are.equal(img, T.RandomErasing(0)(img))
    H.raises(function() T.RandomErasing(1, {value = 'noise'}) end, "must be 'random'")
  end)

  it('Compose, Lambda, RandomApply, RandomChoice, RandomOrder', function()
    local tf = T.Compose{T.Lambda(function(x) return x * 2 end), T.Lambda(function(x) return x + 1 end)}
    H.close(tf(flow.tensor({1})), {3})
    assert.is_truthy(tostring(tf):find('Compose(', 1, true))
    H.close(T.RandomApply({T.Lambda(function(x) return x * 0 end)}, 1)(flow.tensor({5})), {0})
    H.close(T.RandomApply({T.Lambda(function(x) return x * 0 end)}, 0)(flow.tensor({5})), {5})
    local v = T.RandomChoice({T.Lambda(function() return 1 end), T.Lambda(function() return 2 end)})(0)
    assert.is_true(v == 1 or v == 2)
    H.close(T.RandomOrder({T.Lambda(function(x) return x + 1 end)})(flow.tensor({1})), {2})
    local full = T.Compose{T.RandomResizedCrop(8), T.RandomHorizontalFlip(), T.ConvertImageDtype(flow.float32),
                           T.Normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})}
    flow.manual_seed(9)
    local a = full(image(3, 12, 12):byte())
    flow.manual_seed(9)
    assert.is_true(same(a, full(image(3, 12, 12):byte())))
    assert.are.equal(flow.float32, a.dtype)
  end)
end)

-- torchvision parity ------------------------------------------------------
local ref
do
  local here = debug.getinfo(1, 'S').source:match('^@(.*)/[^/]*$') or 'spec/vision'
  local p = io.popen(('/usr/bin/python3 %s/tv_reference.py 2>/dev/null'):format(here))
  local out = p and p:read('*a') or ''
  if p then p:close() end
  if out:sub(1, 1) == '{' then ref = json.decode(out) end
end
local it_tv = ref and it or pending

describe('transforms: parity with torchvision', function()
  local u8 = image(3, 11, 14):to(flow.uint8)
  local f = u8:float() / 255
  -- absolute differences: float images within tol (default 2e-6), uint8 within tol levels
  local function cmp(name, got, tol)
    tol = tol or 2e-6
    local a, b = H.flat(got:double():totable()), H.flat(ref[name])
    assert(#a == #b, ('%s: %d elements, torchvision has %d'):format(name, #a, #b))
    for i = 1, #a do
      if math.abs(a[i] - b[i]) > tol then
        error(('%s: element %d is %.8g, torchvision %.8g'):format(name, i, a[i], b[i]), 2)
      end
    end
  end

  it_tv('resize, crop, pad', function()
    cmp('resize_bilinear', TF.resize(f, {7, 9}))
    cmp('resize_up', TF.resize(f, {15, 20}))
    cmp('resize_short', TF.resize(f, 5))
    cmp('resize_nearest', TF.resize(f, {7, 9}, {interpolation = 'nearest'}))
    cmp('resize_u8', TF.resize(u8, {7, 9}), 1)
    cmp('resize_aa', TF.resize(f, {5, 6}, {antialias = true}))
    cmp('center_crop', TF.center_crop(f, {6, 5}))
    cmp('center_crop_pad', TF.center_crop(f, {14, 17}))
    for _, m in ipairs({'constant', 'edge', 'reflect', 'symmetric'}) do
      cmp('pad_' .. m, TF.pad(f, {1, 2, 3, 4}, {fill = m == 'constant' and 0.5 or 0, padding_mode = m}))
    end
    cmp('erase', TF.erase(f, 2, 3, 4, 5, flow.tensor({0.1, 0.2, 0.3}):view(3, 1, 1)))
    cmp('normalize', TF.normalize(f, {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}))
    cmp('convert_to_u8', TF.convert_image_dtype(f, flow.uint8))
    cmp('convert_to_int32', TF.convert_image_dtype(u8, flow.int32))
  end)

  it_tv('colour ops (float exact, uint8 within one level)', function()
    cmp('gray', TF.rgb_to_grayscale(f))
    cmp('gray_u8', TF.rgb_to_grayscale(u8, 3))
    local ops = {brightness = {TF.adjust_brightness, 1.3}, contrast = {TF.adjust_contrast, 0.6},
                 saturation = {TF.adjust_saturation, 1.7}, hue = {TF.adjust_hue, 0.21},
                 hue_neg = {TF.adjust_hue, -0.4}, sharpness = {TF.adjust_sharpness, 1.8},
                 gamma = {TF.adjust_gamma, 0.7}}
    for name, e in pairs(ops) do
      cmp(name, e[1](f, e[2]))
      -- uint8 results may differ by one level where float32 rounding straddles .5
      cmp(name .. '_u8', e[1](u8, e[2]), 1)
    end
    cmp('posterize_u8', TF.posterize(u8, 3))
    cmp('solarize', TF.solarize(f, 0.4))
    cmp('solarize_u8', TF.solarize(u8, 100))
    cmp('autocontrast', TF.autocontrast(f))
    cmp('autocontrast_u8', TF.autocontrast(u8), 1)
    cmp('equalize_u8', TF.equalize(u8))
    cmp('invert_u8', TF.invert(u8))
    cmp('blur', TF.gaussian_blur(f, {5, 3}, {1.5, 0.8}))
    cmp('blur_u8', TF.gaussian_blur(u8, {3, 3}, {0.9, 0.9}))
  end)

  it_tv('rotate and affine', function()
    cmp('rotate_nearest', TF.rotate(f, 33.0))
    cmp('rotate_bilinear', TF.rotate(f, -21.0, {interpolation = 'bilinear'}), 1e-5)
    cmp('rotate_expand', TF.rotate(f, 40.0, {interpolation = 'bilinear', expand = true,
                                             fill = {0.2, 0.4, 0.6}}), 1e-5)
    cmp('rotate_center_u8', TF.rotate(u8, 15.0, {interpolation = 'bilinear', center = {3, 4}, fill = 7}), 1)
    cmp('affine', TF.affine(f, 12.0, {2, -1}, 1.1, {5.0, -3.0}, {interpolation = 'bilinear'}), 1e-5)
    cmp('affine_nearest_u8', TF.affine(u8, -30.0, {-1, 2}, 0.8, {10.0}, {interpolation = 'nearest',
                                                                        fill = {10, 20, 30}}))
  end)

  it_tv('make_grid', function()
    local batch = flow.stack({f, f * -1 + 1, f * 0.5})
    local U = vision.utils
    cmp('grid', U.make_grid(batch, {nrow = 2, padding = 1, pad_value = 0.25}))
    cmp('grid_norm', U.make_grid(batch * 3 - 1, {nrow = 2, padding = 2, normalize = true}))
    cmp('grid_range', U.make_grid(batch, {nrow = 3, padding = 0, normalize = true, value_range = {0.2, 0.8},
                                          scale_each = true}))
    cmp('grid_gray', U.make_grid(batch:narrow(2, 1, 1), {nrow = 8, padding = 2}))
  end)
end)
