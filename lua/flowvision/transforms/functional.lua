-- flowvision.transforms.functional (vision.transforms.functional, "TF"):
-- torchvision.transforms.functional on tensors.
--
-- Images are tensors [..., C, H, W] (a batch [N, C, H, W] works wherever
-- torchvision's tensor backend allows it): float in [0, 1] or uint8 in
-- [0, 255]. Results keep the input dtype; uint8 results of interpolating ops
-- are rounded, as torchvision does.
--
-- Pixel coordinates (crop's top/left, erase's i/j, get_params results) are
-- 0-based offsets from the top-left corner, exactly torchvision's numbers:
-- they are geometric values, not Lua indices.
local ffi = require 'ffi'
local A = require 'oneflow._args'
local flow = require 'oneflow'

local F = flow.nn.functional
local is_tensor = flow.is_tensor
local floor, ceil, abs = math.floor, math.ceil, math.abs
local rad, cos, sin, tan = math.rad, math.cos, math.sin, math.tan

local TF = {}

------------------------------------------------------------------ helpers
--- Python's round(): half to even.
local function py_round(x)
  local f = floor(x)
  local d = x - f
  if d > 0.5 then return f + 1 end
  if d < 0.5 then return f end
  return (f % 2 == 0) and f or f + 1
end
TF._py_round = py_round

local function fail(op, msg, level) error(op .. ': ' .. msg, (level or 2) + 1) end


--- Checks for an image tensor [..., C, H, W] (or [H, W] when allow2d).
local function check_image(img, op, allow2d)
  if not is_tensor(img) then
    fail(op, ('expected an image tensor [C, H, W] or [N, C, H, W], got %s'):format(type(img)), 3)
  end
  local nd = img:dim()
  if nd < 2 or (nd == 2 and not allow2d) then
    fail(op, ('expected an image tensor [..., C, H, W], got shape %s'):format(A.shape_str(img, ', ')), 3)
  end
end
TF._check_image = check_image

local function is_float(img) return img:is_floating_point() end

--- Largest value of the image's dtype range: 1 for floats, 255 for uint8.
local int_max = {uint8 = 255, int8 = 127, int32 = 2 ^ 31 - 1, int64 = 2 ^ 63 - 1, bool = 1}
local function max_value(dtype)
  if dtype.is_floating_point then return 1.0 end
  return int_max[dtype.name] or 255
end
TF._max_value = max_value

--- C, H, W of an image ([H, W] counts as one channel).
function TF.get_dimensions(img)
  check_image(img, 'get_dimensions', true)
  local s = img:size()
  local n = #s
  if n == 2 then return 1, s[1], s[2] end
  return s[n - 2], s[n - 1], s[n]
end
local get_dimensions = TF.get_dimensions

function TF.get_image_size(img)   -- {W, H}, as torchvision
  local _, h, w = get_dimensions(img)
  return {w, h}
end

function TF.get_image_num_channels(img) return (get_dimensions(img)) end

-- Float working copy and a finisher that restores the dtype (rounding ints).
local function to_float(img)
  if is_float(img) then return img, nil end
  return img:float(), img.dtype
end

local function from_float(x, dtype, no_round)
  if dtype == nil then return x end
  if not no_round then x = x:round() end
  local m = max_value(dtype)
  return x:clamp(0, m):to(dtype)
end

-- Adds leading dims so that img is [N, C, H, W]; returns it and an undo.
local function as_batch(img)
  local nd = img:dim()
  if nd == 4 then return img, function(y) return y end end
  if nd == 3 then return img:unsqueeze(1), function(y) return y:squeeze(1) end end
  if nd == 2 then return img:unsqueeze(1):unsqueeze(1), function(y) return y:squeeze(1):squeeze(1) end end
  local lead = img:size():totable()
  local c, h, w = lead[nd - 2], lead[nd - 1], lead[nd]
  local n = 1
  for i = 1, nd - 3 do n = n * lead[i] end
  return img:reshape(n, c, h, w), function(y)
    local s = {}
    for i = 1, nd - 3 do s[i] = lead[i] end
    s[nd - 2], s[nd - 1], s[nd] = y:size(2), y:size(3), y:size(4)
    return y:reshape(s)
  end
end
TF._as_batch = as_batch

------------------------------------------------------------------ conversion
-- Layout of a decoded image: 'hwc' or 'chw' (3-d), 'hw' (2-d). A 3-d
-- tensor is [C, H, W] when only its first dim can be a channel count (1..4),
-- [H, W, C] when only its last can, and [H, W, C] (numpy's layout) when both can.
local function layout(pic, op)
  if not is_tensor(pic) then
    fail(op, ('expected an image tensor [C, H, W], [H, W, C] or [H, W], got %s'):format(type(pic)), 3)
  end
  local nd = pic:dim()
  if nd == 2 then return 'hw' end
  if nd ~= 3 then
    fail(op, ('expected an image [C, H, W], [H, W, C] or [H, W], got shape %s'):format(A.shape_str(pic, ', ')), 3)
  end
  local first, last = pic:size(1) <= 4, pic:size(3) <= 4
  if last then return 'hwc' end
  if first then return 'chw' end
  fail(op, ('cannot tell the channel dim of shape %s (expected 1 to 4 channels first or last)')
       :format(A.shape_str(pic, ', ')), 3)
end
TF._layout = layout

--- to_tensor(pic): a decoded image -> float32 [C, H, W]; uint8 is scaled to
-- [0, 1], other dtypes are kept (torchvision's rule). pic is uint8 [C, H, W]
-- (vision.io.read_image, the datasets), [H, W, C] (numpy/PIL layout) or [H, W].
function TF.to_tensor(pic)
  local l = layout(pic, 'to_tensor')
  local img
  if l == 'hw' then img = pic:unsqueeze(1)
  elseif l == 'hwc' then img = pic:permute(3, 1, 2)
  else img = pic end
  img = img:contiguous()
  if pic.dtype == flow.uint8 then return img:float():div(255) end
  return img
end

--- pil_to_tensor(pic): the same layouts -> [C, H, W], dtype kept (no scaling).
function TF.pil_to_tensor(pic)
  local l = layout(pic, 'pil_to_tensor')
  if l == 'hw' then return pic:unsqueeze(1):contiguous() end
  if l == 'hwc' then return pic:permute(3, 1, 2):contiguous() end
  return pic:contiguous()
end

--- to_pil_image-like: [C, H, W] -> [H, W, C] uint8 (floats are scaled by 255).
function TF.to_hwc_uint8(img)
  check_image(img, 'to_hwc_uint8')
  if is_float(img) then img = img:mul(255):clamp(0, 255):to(flow.uint8) end
  return img:permute(2, 3, 1):contiguous()
end

--- convert_image_dtype(image, dtype): rescales values between dtype ranges.
function TF.convert_image_dtype(image, dtype)
  if not is_tensor(image) then fail('convert_image_dtype', 'expected a tensor, got ' .. type(image)) end
  dtype = flow.dtype(dtype or flow.float32)
  local src = image.dtype
  if src == dtype then return image end
  local src_float, dst_float = is_float(image), dtype.is_floating_point
  if src_float then
    if dst_float then return image:to(dtype) end
    if (src.name == 'float32' and (dtype.name == 'int32' or dtype.name == 'int64'))
       or (src.name == 'float64' and dtype.name == 'int64') then
      fail('convert_image_dtype', ('the cast from %s to %s cannot be performed safely')
           :format(src.name, dtype.name))
    end
    local eps = 1e-3
    return image:mul(max_value(dtype) + 1.0 - eps):to(dtype)
  end
  local in_max = max_value(src)
  if dst_float then return image:to(dtype):div(in_max) end
  local out_max = max_value(dtype)
  if in_max > out_max then
    local factor = floor((in_max + 1) / (out_max + 1))
    return image:div(factor, {rounding_mode = 'floor'}):to(dtype)
  end
  local factor = floor((out_max + 1) / (in_max + 1))
  return image:to(dtype):mul(factor)
end

------------------------------------------------------------------ normalize
local function per_channel(v, c, op, what)
  if type(v) == 'number' then
    local t = {}
    for i = 1, c do t[i] = v end
    return t
  end
  if is_tensor(v) then v = v:totable() end
  if type(v) ~= 'table' then fail(op, what .. ' must be a number or a list of numbers', 4) end
  if #v == 1 and c > 1 then return per_channel(v[1], c, op, what) end
  if #v ~= c then
    fail(op, ('%s has %d values but the image has %d channels'):format(what, #v, c), 4)
  end
  return v
end

--- normalize(tensor, mean, std, {inplace = false}): (x - mean[c]) / std[c].
function TF.normalize(tensor, mean, std, opts)
  check_image(tensor, 'normalize')
  opts = A.check_options('normalize', opts, {inplace = true})
  if not is_float(tensor) then
    fail('normalize', ('expected a float tensor, got %s (use ConvertImageDtype or ToTensor first)')
         :format(tensor.dtype.name))
  end
  local c = get_dimensions(tensor)
  mean = per_channel(mean, c, 'normalize', 'mean')
  std = per_channel(std, c, 'normalize', 'std')
  for i = 1, c do
    if std[i] == 0 then
      fail('normalize', ('std evaluated to zero at channel %d, leading to division by zero'):format(i))
    end
  end
  local m = flow.tensor(mean, {dtype = tensor.dtype}):view(c, 1, 1)
  local s = flow.tensor(std, {dtype = tensor.dtype}):view(c, 1, 1)
  if opts.inplace then return tensor:sub_(m):div_(s) end
  return (tensor - m) / s
end

------------------------------------------------------------------ resize
--- Output size (h, w) of resize(img, size, max_size), torchvision's rules.
function TF._resized_size(h, w, size, max_size)
  if type(size) == 'table' and #size == 2 then
    if max_size then
      fail('resize', 'max_size is only supported for a single int size (the shorter side)', 3)
    end
    return size[1], size[2]
  end
  if type(size) == 'table' then size = size[1] end
  if type(size) ~= 'number' then fail('resize', 'size must be a number or {h, w}, got ' .. type(size), 3) end
  local short, long = math.min(h, w), math.max(h, w)
  local new_short, new_long = size, floor(size * long / short)
  if max_size then
    if max_size <= size then
      fail('resize', ('max_size = %d must be strictly greater than the requested size = %d')
           :format(max_size, size), 3)
    end
    if new_long > max_size then
      new_short, new_long = floor(max_size * new_short / new_long), max_size
    end
  end
  if w <= h then return new_long, new_short end
  return new_short, new_long
end

-- Resampling matrix [out, in] of PIL's / PyTorch's antialiased bilinear
-- (triangle filter stretched by the downscale factor), align_corners=false.
local function aa_weights(n_in, n_out)
  local scale = n_in / n_out
  local support = scale >= 1 and scale or 1
  local inv = scale >= 1 and 1 / scale or 1
  local wts = flow.zeros(n_out, n_in)
  local p = wts:data_ptr()
  for i = 0, n_out - 1 do
    local center = scale * (i + 0.5)
    local xmin = math.max(floor(center - support + 0.5), 0)
    local xmax = math.min(floor(center + support + 0.5), n_in)
    local total = 0
    local ws = {}
    for j = xmin, xmax - 1 do
      local x = (j - center + 0.5) * inv
      local v = 1 - abs(x)
      if v < 0 then v = 0 end
      ws[j] = v
      total = total + v
    end
    for j = xmin, xmax - 1 do
      if total ~= 0 then p[i * n_in + j] = ws[j] / total end
    end
  end
  return wts
end

local function interp_modes(interpolation, op)
  interpolation = interpolation or 'bilinear'
  if interpolation ~= 'bilinear' and interpolation ~= 'nearest' then
    fail(op, ("interpolation must be 'bilinear' or 'nearest', got '%s'"):format(tostring(interpolation)), 3)
  end
  return interpolation
end

--- resize(img, size, {interpolation = 'bilinear', max_size =, antialias = false})
-- size: a number (the shorter side, keeping the aspect ratio) or {h, w}.
-- antialias (bilinear only) applies PIL's filter when downscaling; the
-- default false is torchvision 0.14's tensor default.
function TF.resize(img, size, opts)
  check_image(img, 'resize', true)
  opts = A.check_options('resize', opts, {'interpolation', 'max_size', 'antialias'})
  local mode = interp_modes(opts.interpolation, 'resize')
  local _, h, w = get_dimensions(img)
  local oh, ow = TF._resized_size(h, w, size, opts.max_size)
  if oh < 1 or ow < 1 then
    fail('resize', ('output size %dx%d is empty (input %dx%d, size %s)'):format(oh, ow, h, w, tostring(size)))
  end
  if oh == h and ow == w then return img end
  local x, dt = to_float(img)
  local b, undo = as_batch(x)
  local y
  if opts.antialias and mode == 'bilinear' and (oh < h or ow < w) then
    local n, c = b:size(1), b:size(2)
    local wh, ww = aa_weights(h, oh), aa_weights(w, ow)
    -- rows: [oh, h] @ [n*c, h, w] -> [n*c, oh, w]; columns: @ [w, ow]
    local flat = b:reshape(n * c, h, w)
    y = flow.matmul(wh:unsqueeze(1), flat)
    y = flow.matmul(y, ww:t():unsqueeze(1))
    y = y:reshape(n, c, oh, ow)
  else
    local opts_i = {size = {oh, ow}, mode = mode}
    if mode == 'bilinear' then opts_i.align_corners = false end   -- torchvision's choice
    y = F.interpolate(b, opts_i)
  end
  return from_float(undo(y), dt, mode == 'nearest')
end

------------------------------------------------------------------ crop, pad, flip
local function pad_index(n, before, after, mode)
  local idx = {}
  for k = -before, n + after - 1 do
    local m
    if mode == 'edge' then
      m = math.min(math.max(k, 0), n - 1)
    elseif mode == 'reflect' then
      if n == 1 then m = 0 else
        local period = 2 * n - 2
        m = k % period
        if m >= n then m = period - m end
      end
    else   -- symmetric
      local period = 2 * n
      m = k % period
      if m >= n then m = period - 1 - m end
    end
    idx[#idx + 1] = m + 1
  end
  return flow.tensor(idx, {dtype = flow.int64})
end

local pad_modes = {constant = true, edge = true, reflect = true, symmetric = true}

--- Padding as {left, top, right, bottom} from a number, {lr, tb} or {l, t, r, b}.
function TF._padding_ltrb(padding, op)
  if type(padding) == 'number' then return {padding, padding, padding, padding} end
  if type(padding) ~= 'table' or (#padding ~= 1 and #padding ~= 2 and #padding ~= 4) then
    fail(op or 'pad', 'padding must be a number or a list of 1, 2 or 4 numbers', 3)
  end
  if #padding == 1 then return {padding[1], padding[1], padding[1], padding[1]} end
  if #padding == 2 then return {padding[1], padding[2], padding[1], padding[2]} end
  return {padding[1], padding[2], padding[3], padding[4]}
end

--- pad(img, padding, {fill = 0, padding_mode = 'constant'}); modes constant,
-- edge, reflect, symmetric; negative constant padding crops.
function TF.pad(img, padding, opts)
  check_image(img, 'pad', true)
  if type(opts) == 'number' then opts = {fill = opts} end
  opts = A.check_options('pad', opts, {'fill', 'padding_mode'})
  local mode = opts.padding_mode or 'constant'
  if not pad_modes[mode] then
    fail('pad', ("padding_mode must be constant, edge, reflect or symmetric, got '%s'"):format(tostring(mode)))
  end
  local p = TF._padding_ltrb(padding, 'pad')
  local l, t, r, b = p[1], p[2], p[3], p[4]
  for i = 1, 4 do
    if p[i] ~= floor(p[i]) then fail('pad', 'padding values must be integers') end
  end
  if l < 0 or t < 0 or r < 0 or b < 0 then
    local _, h, w = get_dimensions(img)
    local cl, ct, cr, cb = math.max(-l, 0), math.max(-t, 0), math.max(-r, 0), math.max(-b, 0)
    img = img:narrow(-2, ct + 1, h - ct - cb):narrow(-1, cl + 1, w - cl - cr)
    l, t, r, b = math.max(l, 0), math.max(t, 0), math.max(r, 0), math.max(b, 0)
  end
  if l == 0 and t == 0 and r == 0 and b == 0 then return img end
  if mode == 'constant' then
    local fill = opts.fill or 0
    if type(fill) == 'table' then
      if #fill == 1 then fill = fill[1] else
        -- per-channel fill: pad with 0, then paint the border
        local out = F.pad(img, {l, r, t, b}, {value = 0})
        local c = get_dimensions(img)
        fill = per_channel(fill, c, 'pad', 'fill')
        local _, h, w = get_dimensions(img)
        local mask = flow.ones(h + t + b, w + l + r)
        mask:narrow(1, t + 1, h):narrow(2, l + 1, w):zero_()
        local fv = flow.tensor(fill):view(c, 1, 1):to(out.dtype)
        return flow.where(mask:gt(0), fv, out)
      end
    end
    return F.pad(img, {l, r, t, b}, {value = fill})
  end
  local _, h, w = get_dimensions(img)
  local nd = img:dim()
  return img:index_select(nd - 1, pad_index(h, t, b, mode)):index_select(nd, pad_index(w, l, r, mode))
end

--- crop(img, top, left, height, width): top/left are 0-based pixel offsets;
-- a crop reaching outside the image is zero-padded (torchvision).
function TF.crop(img, top, left, height, width)
  check_image(img, 'crop', true)
  A.arg('crop', 2, 'top', top, 'integer'); A.arg('crop', 3, 'left', left, 'integer')
  A.arg('crop', 4, 'height', height, 'integer'); A.arg('crop', 5, 'width', width, 'integer')
  local _, h, w = get_dimensions(img)
  local right, bottom = left + width, top + height
  if left < 0 or top < 0 or right > w or bottom > h then
    local pl, pt = math.max(-left, 0), math.max(-top, 0)
    local pr, pb = math.max(right - w, 0), math.max(bottom - h, 0)
    local inner = img:narrow(-2, math.max(top, 0) + 1, math.min(bottom, h) - math.max(top, 0))
                     :narrow(-1, math.max(left, 0) + 1, math.min(right, w) - math.max(left, 0))
    return F.pad(inner, {pl, pr, pt, pb}, {value = 0})
  end
  return img:narrow(-2, top + 1, height):narrow(-1, left + 1, width)
end

local function size_pair(size, op)
  if type(size) == 'number' then return size, size end
  if type(size) == 'table' and #size == 1 and type(size[1]) == 'number' then return size[1], size[1] end
  if type(size) == 'table' and #size == 2 and type(size[1]) == 'number' and type(size[2]) == 'number' then
    return size[1], size[2]
  end
  A.fail(op .. ': size must be a number or {h, w}, got ' .. A.describe(size))
end
TF._size_pair = size_pair

--- center_crop(img, output_size): pads with zeros when the crop is larger.
function TF.center_crop(img, output_size)
  check_image(img, 'center_crop', true)
  local ch, cw = size_pair(output_size, 'center_crop')
  local _, h, w = get_dimensions(img)
  if cw > w or ch > h then
    local pad = {cw > w and floor((cw - w) / 2) or 0, ch > h and floor((ch - h) / 2) or 0,
                 cw > w and floor((cw - w + 1) / 2) or 0, ch > h and floor((ch - h + 1) / 2) or 0}
    img = TF.pad(img, pad, {fill = 0})
    _, h, w = get_dimensions(img)
    if cw == w and ch == h then return img end
  end
  local top = py_round((h - ch) / 2)
  local left = py_round((w - cw) / 2)
  return TF.crop(img, top, left, ch, cw)
end

--- resized_crop(img, top, left, height, width, size, opts): crop, then resize.
function TF.resized_crop(img, top, left, height, width, size, opts)
  return TF.resize(TF.crop(img, top, left, height, width), size, opts)
end

function TF.hflip(img) check_image(img, 'hflip', true); return img:flip(-1) end
function TF.vflip(img) check_image(img, 'vflip', true); return img:flip(-2) end

--- five_crop(img, size) -> tl, tr, bl, br, center
function TF.five_crop(img, size)
  local ch, cw = size_pair(size, 'five_crop')
  local _, h, w = get_dimensions(img)
  if ch > h or cw > w then
    fail('five_crop', ('requested crop size %dx%d is bigger than the image %dx%d'):format(ch, cw, h, w))
  end
  return TF.crop(img, 0, 0, ch, cw), TF.crop(img, 0, w - cw, ch, cw), TF.crop(img, h - ch, 0, ch, cw),
         TF.crop(img, h - ch, w - cw, ch, cw), TF.center_crop(img, {ch, cw})
end

--- erase(img, i, j, h, w, v, {inplace = false}): img[..., i:i+h, j:j+w] = v
-- (i, j 0-based; v a number or a tensor broadcastable to the patch).
function TF.erase(img, i, j, h, w, v, opts)
  check_image(img, 'erase')
  opts = A.check_options('erase', opts, {'inplace'})
  A.arg('erase', 2, 'i', i, 'integer'); A.arg('erase', 3, 'j', j, 'integer')
  A.arg('erase', 4, 'h', h, 'integer'); A.arg('erase', 5, 'w', w, 'integer')
  if not (opts and opts.inplace) then img = img:clone() end
  local patch = img:narrow(-2, i + 1, h):narrow(-1, j + 1, w)
  if is_tensor(v) then patch:copy_(v:expand(patch:size()))
  else patch:fill_(v) end
  return img
end

------------------------------------------------------------------ colour
-- ratio * a + (1 - ratio) * b, clamped to the dtype's range (torchvision's _blend).
local function blend(img1, img2, ratio)
  local bound = max_value(img1.dtype)
  local a = is_float(img1) and img1 or img1:float()
  local b = is_tensor(img2) and (is_float(img2) and img2 or img2:float()) or img2
  local r = (a * ratio + b * (1.0 - ratio)):clamp(0, bound)
  if is_float(img1) then return r end
  return r:to(img1.dtype)
end
TF._blend = blend

--- rgb_to_grayscale(img, num_output_channels = 1): 0.2989 r + 0.587 g + 0.114 b.
function TF.rgb_to_grayscale(img, num_output_channels)
  check_image(img, 'rgb_to_grayscale')
  num_output_channels = num_output_channels or 1
  if num_output_channels ~= 1 and num_output_channels ~= 3 then
    fail('rgb_to_grayscale', 'num_output_channels must be 1 or 3, got ' .. tostring(num_output_channels))
  end
  local c = get_dimensions(img)
  if c ~= 1 and c ~= 3 then
    fail('rgb_to_grayscale', ('expected 1 or 3 channels, got %d (shape %s)'):format(c, A.shape_str(img, ', ')))
  end
  local l
  if c == 3 then
    local x = is_float(img) and img or img:float()
    local r, g, b = x:select(-3, 1), x:select(-3, 2), x:select(-3, 3)
    l = (r * 0.2989 + g * 0.587 + b * 0.114)
    if not is_float(img) then l = l:to(img.dtype) end
    l = l:unsqueeze(-3)
  else
    l = img:clone()
  end
  if num_output_channels == 3 then
    local s = l:size():totable()
    s[#s - 2] = 3
    return l:expand(s):contiguous()
  end
  return l
end
TF.to_grayscale = TF.rgb_to_grayscale

local function check_factor(f, op, what)
  if type(f) ~= 'number' or f < 0 then
    fail(op, ('%s must be a non-negative number, got %s'):format(what, tostring(f)), 3)
  end
end

function TF.adjust_brightness(img, factor)
  check_image(img, 'adjust_brightness')
  check_factor(factor, 'adjust_brightness', 'brightness_factor')
  return blend(img, 0, factor)
end

function TF.adjust_contrast(img, factor)
  check_image(img, 'adjust_contrast')
  check_factor(factor, 'adjust_contrast', 'contrast_factor')
  local c = get_dimensions(img)
  local g = c == 3 and TF.rgb_to_grayscale(img) or img
  local mean = (is_float(g) and g or g:float()):mean({-3, -2, -1}, true)
  return blend(img, mean, factor)
end

function TF.adjust_saturation(img, factor)
  check_image(img, 'adjust_saturation')
  check_factor(factor, 'adjust_saturation', 'saturation_factor')
  if get_dimensions(img) == 1 then return img end
  return blend(img, TF.rgb_to_grayscale(img), factor)
end

local function rgb2hsv(img)
  local r, g, b = img:select(-3, 1), img:select(-3, 2), img:select(-3, 3)
  local maxc = img:amax(-3)
  local minc = img:amin(-3)
  local eqc = maxc:eq(minc)
  local cr = maxc - minc
  local ones = flow.ones_like(maxc)
  local s = cr / flow.where(eqc, ones, maxc)
  local crd = flow.where(eqc, ones, cr)
  local rc, gc, bc = (maxc - r) / crd, (maxc - g) / crd, (maxc - b) / crd
  local is_r = maxc:eq(r)
  local is_g = maxc:eq(g):logical_and(is_r:logical_not())
  local is_b = maxc:ne(g):logical_and(is_r:logical_not())
  local zero = flow.zeros_like(maxc)
  local h = flow.where(is_r, bc - gc, zero) + flow.where(is_g, rc - bc + 2.0, zero)
            + flow.where(is_b, gc - rc + 4.0, zero)
  h = flow.fmod(h / 6.0 + 1.0, 1.0)
  return h, s, maxc
end
TF._rgb2hsv = rgb2hsv

local function hsv2rgb(h, s, v)
  local i = (h * 6.0):floor()
  local f = h * 6.0 - i
  local p = (v * (s * -1 + 1.0)):clamp(0, 1)
  local q = (v * (s * f * -1 + 1.0)):clamp(0, 1)
  local t = (v * (s * (f * -1 + 1.0) * -1 + 1.0)):clamp(0, 1)
  i = flow.remainder(i, 6)
  local sel = {}
  for k = 0, 5 do sel[k] = i:eq(k) end
  local function pick(a)
    local out = flow.zeros_like(v)
    for k = 0, 5 do out = flow.where(sel[k], a[k + 1], out) end
    return out
  end
  local r = pick({v, q, p, p, t, v})
  local g = pick({t, v, v, q, p, p})
  local b = pick({p, p, t, v, v, q})
  return flow.stack({r, g, b}, -3)
end
TF._hsv2rgb = hsv2rgb

--- adjust_hue(img, hue_factor in [-0.5, 0.5]): shifts the hue in HSV space.
function TF.adjust_hue(img, hue_factor)
  check_image(img, 'adjust_hue')
  if type(hue_factor) ~= 'number' or hue_factor < -0.5 or hue_factor > 0.5 then
    fail('adjust_hue', ('hue_factor (%s) is not in [-0.5, 0.5]'):format(tostring(hue_factor)))
  end
  local c = get_dimensions(img)
  if c == 1 then return img end
  if c ~= 3 then fail('adjust_hue', ('expected 1 or 3 channels, got %d'):format(c)) end
  local dt = img.dtype
  local x = is_float(img) and img or img:float():div(255)
  local h, s, v = rgb2hsv(x)
  h = flow.remainder(h + hue_factor, 1.0)
  local out = hsv2rgb(h, s, v)
  if is_float(img) then return out end
  return (out * 255.0):to(dt)
end

--- adjust_gamma(img, gamma, gain = 1): gain * img ^ gamma on the [0, 1] scale.
function TF.adjust_gamma(img, gamma, gain)
  check_image(img, 'adjust_gamma')
  if type(gamma) ~= 'number' or gamma < 0 then fail('adjust_gamma', 'gamma must be non-negative') end
  gain = gain or 1
  local dt = img.dtype
  local x = is_float(img) and img or TF.convert_image_dtype(img, flow.float32)
  local r = (x:pow(gamma) * gain):clamp(0, 1)
  if is_float(img) then return r end
  return TF.convert_image_dtype(r, dt)
end

--- Depthwise 2-d convolution of a float batch [N, C, H, W] by a kernel [kh, kw].
local function depthwise(b, kernel)
  local c = b:size(2)
  local kh, kw = kernel:size(1), kernel:size(2)
  local weight = kernel:to(b.dtype):view(1, 1, kh, kw):expand(c, 1, kh, kw):contiguous()
  return F.conv2d(b, weight, nil, 1, 0, 1, c)
end

function TF.adjust_sharpness(img, factor)
  check_image(img, 'adjust_sharpness')
  check_factor(factor, 'adjust_sharpness', 'sharpness_factor')
  local _, h, w = get_dimensions(img)
  if h <= 2 or w <= 2 then return img end
  local x, dt = to_float(img)
  local b, undo = as_batch(x)
  local kernel = flow.tensor({{1, 1, 1}, {1, 5, 1}, {1, 1, 1}}) / 13
  local inner = depthwise(b, kernel)
  if dt then inner = inner:round() end
  local degenerate = b:clone()
  degenerate:narrow(3, 2, h - 2):narrow(4, 2, w - 2):copy_(inner)
  degenerate = undo(degenerate)
  if dt then degenerate = degenerate:to(dt) end
  return blend(img, degenerate, factor)
end

function TF.invert(img)
  check_image(img, 'invert')
  local bound = max_value(img.dtype)
  if is_float(img) then return (img * -1) + bound end
  return (img:float() * -1 + bound):to(img.dtype)
end

--- posterize(img, bits): keeps the `bits` high bits of uint8 values; floats
-- are quantized to 2^bits levels (torchvision v2's rule).
function TF.posterize(img, bits)
  check_image(img, 'posterize')
  if type(bits) ~= 'number' or bits < 0 or bits > 8 or bits ~= floor(bits) then
    fail('posterize', 'bits must be an integer in 0..8, got ' .. tostring(bits))
  end
  if is_float(img) then
    local levels = 2 ^ bits
    return (img * levels):floor():clamp(0, levels - 1) * (1.0 / levels)
  end
  if img.dtype ~= flow.uint8 then fail('posterize', 'expected a uint8 or float image, got ' .. img.dtype.name) end
  local mask = 256 - 2 ^ (8 - bits)
  return img:bitwise_and(flow.tensor(mask % 256, {dtype = flow.uint8}))
end

--- solarize(img, threshold): values >= threshold are inverted.
function TF.solarize(img, threshold)
  check_image(img, 'solarize')
  A.arg('solarize', 2, 'threshold', threshold, 'number')
  local bound = max_value(img.dtype)
  if threshold > bound then fail('solarize', ('threshold %g exceeds the maximum value %g'):format(threshold, bound)) end
  return flow.where(img:ge(threshold), TF.invert(img), img)
end

--- autocontrast(img): stretches each channel to the full range.
function TF.autocontrast(img)
  check_image(img, 'autocontrast')
  local bound = max_value(img.dtype)
  local x = is_float(img) and img or img:float()
  local mn = x:amin({-2, -1}, true)
  local mx = x:amax({-2, -1}, true)
  local eq = mx:eq(mn)
  local scale = bound / flow.where(eq, flow.ones_like(mx), mx - mn)
  scale = flow.where(eq, flow.ones_like(scale), scale)
  mn = flow.where(eq, flow.zeros_like(mn), mn)
  local r = ((x - mn) * scale):clamp(0, bound)
  if is_float(img) then return r end
  return r:to(img.dtype)
end

-- equalize one contiguous uint8 plane of n pixels in place (torchvision's LUT)
local function equalize_plane(p, n)
  local hist = {}
  for v = 0, 255 do hist[v] = 0 end
  for k = 0, n - 1 do hist[p[k]] = hist[p[k]] + 1 end
  local last, total = -1, 0
  for v = 0, 255 do
    if hist[v] ~= 0 then last = v end
    total = total + hist[v]
  end
  local step = floor((total - (last >= 0 and hist[last] or 0)) / 255)
  if step == 0 then return end
  local lut, cum = {}, 0
  local half = floor(step / 2)
  lut[0] = 0
  for v = 0, 254 do
    cum = cum + hist[v]
    lut[v + 1] = math.min(floor((cum + half) / step), 255)
  end
  for k = 0, n - 1 do p[k] = lut[p[k]] end
end

--- equalize(img): histogram equalization per channel (uint8; floats are
-- converted to uint8 and back).
function TF.equalize(img)
  check_image(img, 'equalize')
  if is_float(img) then
    local u = TF.convert_image_dtype(img, flow.uint8)
    return TF.convert_image_dtype(TF.equalize(u), img.dtype)
  end
  if img.dtype ~= flow.uint8 then fail('equalize', 'expected a uint8 or float image, got ' .. img.dtype.name) end
  -- the histogram loop reads host memory: a device image goes through the CPU
  local out = img:cpu():contiguous():clone()
  local _, h, w = get_dimensions(out)
  local planes = out:numel() / (h * w)
  local base = ffi.cast('uint8_t *', out:data_ptr())
  for k = 0, planes - 1 do equalize_plane(base + k * h * w, h * w) end
  return out:to(img.device)
end

--- gaussian_blur(img, kernel_size, sigma): reflect-padded separable Gaussian.
function TF.gaussian_blur(img, kernel_size, sigma)
  check_image(img, 'gaussian_blur')
  local kx, ky
  if type(kernel_size) == 'number' then kx, ky = kernel_size, kernel_size
  else kx, ky = A.arg('gaussian_blur', 2, 'kernel_size', kernel_size, 'table')[1], kernel_size[#kernel_size] end
  for _, k in pairs({kx or false, ky or false}) do
    if type(k) ~= 'number' or k <= 0 or k % 2 ~= 1 then
      fail('gaussian_blur', 'kernel_size values must be odd positive integers, got ' .. tostring(k))
    end
  end
  local sx, sy
  if sigma == nil then
    sx = 0.3 * ((kx - 1) * 0.5 - 1) + 0.8
    sy = 0.3 * ((ky - 1) * 0.5 - 1) + 0.8
  elseif type(sigma) == 'number' then sx, sy = sigma, sigma
  else sx, sy = A.arg('gaussian_blur', 3, 'sigma', sigma, 'table')[1], sigma[#sigma] end
  if type(sx) ~= 'number' or type(sy) ~= 'number' then
    fail('gaussian_blur', 'sigma must be a number or a list of numbers, got ' .. A.describe(sx))
  end
  if sx <= 0 or sy <= 0 then fail('gaussian_blur', 'sigma values must be positive') end
  local function k1d(k, s)
    local half = (k - 1) * 0.5
    local vals, total = {}, 0
    for i = 0, k - 1 do
      local x = -half + i
      vals[i + 1] = math.exp(-0.5 * (x / s) ^ 2)
      total = total + vals[i + 1]
    end
    for i = 1, k do vals[i] = vals[i] / total end
    return vals
  end
  local ker_x, ker_y = k1d(kx, sx), k1d(ky, sy)
  local k2 = {}
  for i = 1, ky do
    k2[i] = {}
    for j = 1, kx do k2[i][j] = ker_y[i] * ker_x[j] end
  end
  local x, dt = to_float(img)
  local b, undo = as_batch(x)
  local _, h, w = get_dimensions(img)
  local px, py = floor(kx / 2), floor(ky / 2)
  if px >= w or py >= h then
    fail('gaussian_blur', ('kernel %dx%d is too large for a %dx%d image (reflect padding)'):format(kx, ky, h, w))
  end
  local padded = F.pad(b, {px, px, py, py}, 'reflect')
  local y = depthwise(padded, flow.tensor(k2))
  return from_float(undo(y), dt)
end

------------------------------------------------------------------ geometry
--- torchvision's _get_inverse_affine_matrix: output -> input coordinates,
-- both relative to the image centre. Returns a list of 6 numbers.
function TF._inverse_affine_matrix(center, angle, translate, scale, shear)
  local rot = rad(angle)
  local sx, sy = rad(shear[1]), rad(shear[2])
  local cx, cy = center[1], center[2]
  local tx, ty = translate[1], translate[2]
  local a = cos(rot - sy) / cos(sy)
  local b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot)
  local c = sin(rot - sy) / cos(sy)
  local d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot)
  local m = {d, -b, 0.0, -c, a, 0.0}
  for i = 1, 6 do m[i] = m[i] / scale end
  m[3] = m[3] + m[1] * (-cx - tx) + m[2] * (-cy - ty)
  m[6] = m[6] + m[4] * (-cx - tx) + m[5] * (-cy - ty)
  m[3] = m[3] + cx
  m[6] = m[6] + cy
  return m
end

--- Output size (w, h) that holds the whole transformed image (expand = true).
function TF._affine_output_size(m, w, h)
  local pts = {{-0.5 * w, -0.5 * h}, {-0.5 * w, 0.5 * h}, {0.5 * w, 0.5 * h}, {0.5 * w, -0.5 * h}}
  local minx, miny, maxx, maxy = math.huge, math.huge, -math.huge, -math.huge
  for _, p in ipairs(pts) do
    local x = p[1] * m[1] + p[2] * m[2] + m[3]
    local y = p[1] * m[4] + p[2] * m[5] + m[6]
    minx, maxx = math.min(minx, x), math.max(maxx, x)
    miny, maxy = math.min(miny, y), math.max(maxy, y)
  end
  -- shifted to [0, w] x [0, h] as PIL (and torchvision) do
  minx, maxx, miny, maxy = minx + w * 0.5, maxx + w * 0.5, miny + h * 0.5, maxy + h * 0.5
  local tol = 1e-4
  local function tr(v) return v >= 0 and floor(v) or ceil(v) end
  local cmaxx, cmaxy = ceil(tr(maxx / tol) * tol), ceil(tr(maxy / tol) * tol)
  local cminx, cminy = floor(tr(minx / tol) * tol), floor(tr(miny / tol) * tol)
  return cmaxx - cminx, cmaxy - cminy
end

local function fill_list(fill, c)
  if fill == nil then return nil end
  if type(fill) == 'number' then
    local t = {}
    for i = 1, c do t[i] = fill end
    return t
  end
  if #fill == 1 then return fill_list(fill[1], c) end
  if #fill ~= c then
    error(('fill has %d values but the image has %d channels'):format(#fill, c), 4)
  end
  return fill
end

--- Samples img [..., C, H, W] at the inverse-affine grid of `m` (6 numbers),
-- output ow x oh, 'bilinear' or 'nearest', zeros outside (or `fill`).
-- Same maths as torchvision's affine_grid + grid_sample(align_corners=False).
function TF._affine_sample(img, m, ow, oh, mode, fill)
  local c, h, w = get_dimensions(img)
  local x, dt = to_float(img)
  local b, undo = as_batch(x)
  local n = b:size(1)
  local flat = b:reshape(n * c, h * w)
  -- output pixel centres relative to the output centre
  local xs = flow.linspace(-ow * 0.5 + 0.5, ow * 0.5 - 0.5, ow):view(1, ow):expand(oh, ow)
  local ys = flow.linspace(-oh * 0.5 + 0.5, oh * 0.5 - 0.5, oh):view(oh, 1):expand(oh, ow)
  -- source pixel coordinates (0-based) in the input
  local sx = (xs * m[1] + ys * m[2] + m[3] + (w * 0.5 - 0.5)):reshape(oh * ow)
  local sy = (xs * m[4] + ys * m[5] + m[6] + (h * 0.5 - 0.5)):reshape(oh * ow)
  local out, mask
  local function tap(ix, iy, wgt)
    local valid = ix:ge(0):logical_and(ix:le(w - 1)):logical_and(iy:ge(0)):logical_and(iy:le(h - 1))
    local idx = (iy:clamp(0, h - 1) * w + ix:clamp(0, w - 1)):long() + 1
    local vals = flat:index_select(2, idx)
    local wv = flow.where(valid, wgt, flow.zeros_like(wgt))
    return vals * wv:view(1, -1), wv
  end
  if mode == 'nearest' then
    local ix, iy = sx:round(), sy:round()
    out, mask = tap(ix, iy, flow.ones_like(sx))
  else
    local x0, y0 = sx:floor(), sy:floor()
    local fx, fy = sx - x0, sy - y0
    local gx, gy = fx * -1 + 1, fy * -1 + 1
    local v1, m1 = tap(x0, y0, gx * gy)
    local v2, m2 = tap(x0 + 1, y0, fx * gy)
    local v3, m3 = tap(x0, y0 + 1, gx * fy)
    local v4, m4 = tap(x0 + 1, y0 + 1, fx * fy)
    out = v1 + v2 + v3 + v4
    mask = m1 + m2 + m3 + m4
  end
  fill = fill_list(fill, c)
  if fill then
    local fv = flow.tensor(fill, {dtype = out.dtype}):view(1, c, 1):expand(n, c, 1):reshape(n * c, 1)
    if mode == 'nearest' then
      out = flow.where(mask:lt(0.5):view(1, -1), fv, out)
    else
      out = out * mask:view(1, -1) + fv * (mask * -1 + 1):view(1, -1)
    end
  end
  return from_float(undo(out:reshape(n, c, oh, ow)), dt, mode == 'nearest')
end

local function interp_or_default(v, op)
  v = v or 'nearest'
  if v ~= 'nearest' and v ~= 'bilinear' then
    fail(op, ("interpolation must be 'nearest' or 'bilinear', got '%s'"):format(tostring(v)), 3)
  end
  return v
end

--- rotate(img, angle, {interpolation = 'nearest', expand = false, center =, fill =}):
-- counter-clockwise by `angle` degrees about the centre (or center = {x, y}).
function TF.rotate(img, angle, opts)
  check_image(img, 'rotate')
  A.arg('rotate', 2, 'angle', angle, 'number')
  opts = A.check_options('rotate', opts, {'interpolation', 'expand', 'center', 'fill'})
  local mode = interp_or_default(opts.interpolation, 'rotate')
  local _, h, w = get_dimensions(img)
  local cf = {0.0, 0.0}
  if opts.center then cf = {opts.center[1] - w * 0.5, opts.center[2] - h * 0.5} end
  local m = TF._inverse_affine_matrix(cf, -angle, {0, 0}, 1.0, {0, 0})
  local ow, oh = w, h
  if opts.expand then ow, oh = TF._affine_output_size(m, w, h) end
  return TF._affine_sample(img, m, ow, oh, mode, opts.fill)
end

--- affine(img, angle, translate, scale, shear, {interpolation =, fill =, center =}):
-- clockwise rotation by `angle` degrees, translate {tx, ty} in pixels,
-- scale, shear a number (x only) or {sx, sy} in degrees.
function TF.affine(img, angle, translate, scale, shear, opts)
  check_image(img, 'affine')
  opts = A.check_options('affine', opts, {'interpolation', 'fill', 'center'})
  local mode = interp_or_default(opts.interpolation, 'affine')
  if type(translate) ~= 'table' or #translate ~= 2 then fail('affine', 'translate must be a list of 2 numbers') end
  if type(scale) ~= 'number' or scale <= 0 then fail('affine', 'scale must be a positive number') end
  if type(shear) == 'number' then shear = {shear, 0} end
  if type(shear) ~= 'table' then fail('affine', 'shear must be a number or a list of 1 or 2 numbers') end
  if #shear == 1 then shear = {shear[1], shear[1]} end
  local _, h, w = get_dimensions(img)
  local cf = {0.0, 0.0}
  if opts.center then cf = {opts.center[1] - w * 0.5, opts.center[2] - h * 0.5} end
  local m = TF._inverse_affine_matrix(cf, angle, translate, scale, shear)
  return TF._affine_sample(img, m, w, h, mode, opts.fill)
end

--- perspective-free shear helpers used by the auto-augment ops (timm's PIL
-- forms): shear_x(img, factor) maps output (x, y) to input (x + factor*y, y).
function TF._affine_pixels(img, coeffs, mode, fill)
  -- coeffs a, b, c, d, e, f (PIL's AFFINE data): input = (a x + b y + c, d x + e y + f)
  -- with pixel-centre coordinates, converted to the centre-relative form
  local _, h, w = get_dimensions(img)
  local a, b, c, d, e, f = unpack(coeffs)
  local cx, cy = w * 0.5, h * 0.5
  -- x_in_c + cx = a (x_out_c + cx) + b (y_out_c + cy) + c
  local m = {a, b, a * cx + b * cy + c - cx, d, e, d * cx + e * cy + f - cy}
  return TF._affine_sample(img, m, w, h, mode or 'nearest', fill)
end

return TF
