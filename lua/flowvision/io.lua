-- flowvision.io (vision.io): image files, as torchvision.io.
--
--   local img = vision.io.read_image('cat.jpg')            -- uint8 [C, H, W]
--   vision.io.read_image('a.png', {mode = 'rgb'})           -- 'unchanged' (default),
--                                                           -- 'gray', 'gray_alpha', 'rgb', 'rgb_alpha'
--   vision.io.decode_image(bytes)                           -- a Lua string or uint8 tensor
--   vision.io.write_png(img, 'out.png'); vision.io.write_jpeg(img, 'out.jpg', {quality = 90})
--   vision.io.encode_png(img) / encode_jpeg(img, {quality =}) -- uint8 tensor of the bytes
--   vision.io.read_file(path) -> uint8 tensor; vision.io.write_file(path, bytes)
--
--   vision.io.set_image_limits{max_side = 8192, max_bytes = 2^28}  -- bound decoding
--
-- Decoding and encoding are in C (core/io/image.c: libjpeg-turbo, libpng).
-- JPEG gives 1 (grey) or 3 channels, PNG 1 to 4 (palettes become RGB,
-- transparency an alpha channel). Corrupt or truncated files raise an error
-- naming the file; nothing crashes. An image over the limits (sides above
-- 32768, more than 1 GiB decoded, by default) is refused before its pixels
-- are allocated.
local ffi = require 'ffi'
local flow = require 'oneflow'
local core = require 'oneflow._C'

local C = core.C
local out1 = core.out1
local is_tensor = flow.is_tensor

local M = {}

local function raise(level) error(ffi.string(C.of_last_error()), level + 1) end

--- Whether this build decodes 'png' / 'jpeg'.
function M.supported(fmt)
  if fmt == 'png' then return C.of_image_supported(C.OF_IMAGE_PNG) ~= 0 end
  if fmt == 'jpeg' or fmt == 'jpg' then return C.of_image_supported(C.OF_IMAGE_JPEG) ~= 0 end
  error(("vision.io.supported: unknown format '%s' (png or jpeg)"):format(tostring(fmt)), 2)
end

-- HWC (from C) -> CHW, converted to the requested mode.
local modes = {unchanged = true, gray = 1, gray_alpha = 2, rgb = 3, rgb_alpha = 4}

local function to_gray(img)   -- [C, H, W] uint8, C = 3 -> [1, H, W], ITU-R 601-2 luma as PIL
  local f = img:float()
  local g = f[1] * 0.299 + f[2] * 0.587 + f[3] * 0.114
  return g:add(0.5):floor():clamp(0, 255):byte():unsqueeze(1)
end

local function convert_mode(img, mode, op)
  if mode == nil or mode == 'unchanged' then return img end
  local want = modes[mode]
  if not want then
    error(("%s: unknown mode '%s' (unchanged, gray, gray_alpha, rgb, rgb_alpha)")
          :format(op, tostring(mode)), 4)
  end
  local c = img:size(1)
  local color = (c >= 3) and img:narrow(1, 1, 3) or img:narrow(1, 1, 1)
  local alpha = (c == 2 or c == 4) and img:narrow(1, c, 1) or nil
  if want == 1 or want == 2 then
    if color:size(1) == 3 then color = to_gray(color) end
  else
    if color:size(1) == 1 then color = color:expand(3, img:size(2), img:size(3)) end
  end
  if want == 2 or want == 4 then
    alpha = alpha or flow.full({1, img:size(2), img:size(3)}, 255, {dtype = flow.uint8})
    return flow.cat({color, alpha}, 1):contiguous()
  end
  return color:contiguous()
end

local function chw(hwc) return hwc:permute(3, 1, 2):contiguous() end

--- read_image(path, {mode = 'unchanged'}) -> uint8 [C, H, W]
function M.read_image(path, opts)
  if type(path) ~= 'string' then
    error('read_image: path must be a string, got ' .. type(path), 2)
  end
  opts = require('oneflow._args').check_options('read_image', opts, {'mode'})
  if C.of_image_read(path, out1) ~= 0 then raise(2) end
  return convert_mode(chw(core.wrap(out1[0])), opts.mode, 'read_image')
end

local function bytes_of(data, op)
  if type(data) == 'string' then return ffi.cast('const uint8_t *', data), #data, data end
  if is_tensor(data) then
    if data.dtype ~= flow.uint8 or data:dim() ~= 1 then
      error(('%s: expected the file bytes as a 1-d uint8 tensor or a string, got %s %s')
            :format(op, data.dtype.name, tostring(data:size())), 3)
    end
    data = data:contiguous()
    return data:data_ptr(), data:numel(), data
  end
  error(('%s: expected the file bytes as a Lua string or a uint8 tensor, got %s'):format(op, type(data)), 3)
end

--- decode_image(bytes, {mode =}) -> uint8 [C, H, W]; bytes a string or uint8 tensor.
function M.decode_image(data, opts)
  opts = require('oneflow._args').check_options('decode_image', opts, {'mode'})
  local ptr, n, keep = bytes_of(data, 'decode_image')
  local st = C.of_image_decode(ptr, n, out1)
  local _ = keep   -- the bytes stay alive over the call
  if st ~= 0 then raise(2) end
  return convert_mode(chw(core.wrap(out1[0])), opts.mode, 'decode_image')
end
M.decode_png, M.decode_jpeg = M.decode_image, M.decode_image

-- [C, H, W] (or [H, W]) uint8 -> HWC for C
local function to_hwc(img, op)
  if not is_tensor(img) then error(op .. ': expected a uint8 tensor [C, H, W], got ' .. type(img), 3) end
  if img.dtype ~= flow.uint8 then
    error(('%s: expected a uint8 tensor [C, H, W], got %s (convert with '
           .. 'img:mul(255):add(0.5):clamp(0, 255):byte())'):format(op, img.dtype.name), 3)
  end
  if img:dim() == 2 then return img end
  if img:dim() ~= 3 then
    error(('%s: expected a uint8 tensor [C, H, W], got shape %s'):format(op, tostring(img:size())), 3)
  end
  return img:permute(2, 3, 1)
end

local function encode(img, fmt, quality, op)
  local hwc = to_hwc(img, op)
  if C.of_image_encode(hwc.p, fmt, quality or 0, out1) ~= 0 then raise(3) end
  return core.wrap(out1[0])
end

--- encode_png(img) -> uint8 [n] (PNG file bytes)
function M.encode_png(img) return encode(img, C.OF_IMAGE_PNG, 0, 'encode_png') end

--- encode_jpeg(img, {quality = 75}) -> uint8 [n]
function M.encode_jpeg(img, opts)
  local q = type(opts) == 'number' and opts or (opts or {}).quality or 75
  if type(q) ~= 'number' or q < 1 or q > 100 then
    error('encode_jpeg: quality must be a number in 1..100, got ' .. tostring(q), 2)
  end
  return encode(img, C.OF_IMAGE_JPEG, q, 'encode_jpeg')
end

--- write_file(path, bytes): bytes a uint8 tensor or a string.
function M.write_file(path, data)
  local ptr, n, keep = bytes_of(data, 'write_file')
  local f, err = io.open(path, 'wb')
  if not f then error('write_file: cannot open ' .. tostring(path) .. ' (' .. tostring(err) .. ')', 2) end
  f:write(ffi.string(ptr, n))
  f:close()
  local _ = keep
end

--- read_file(path) -> uint8 [n]
function M.read_file(path)
  local f, err = io.open(path, 'rb')
  if not f then error('read_file: cannot open ' .. tostring(path) .. ' (' .. tostring(err) .. ')', 2) end
  local s = f:read('*a')
  f:close()
  local t = flow.empty(#s, {dtype = flow.uint8})
  if #s > 0 then ffi.copy(t:data_ptr(), s, #s) end
  return t
end

--- write_png(img, path): img uint8 [C, H, W] with C = 1..4.
function M.write_png(img, path)
  if type(path) ~= 'string' then error('write_png: path must be a string', 2) end
  M.write_file(path, encode(img, C.OF_IMAGE_PNG, 0, 'write_png'))
end

--- write_jpeg(img, path, {quality = 75}): img uint8 [C, H, W] with C = 1 or 3.
function M.write_jpeg(img, path, opts)
  if type(path) ~= 'string' then error('write_jpeg: path must be a string', 2) end
  local q = type(opts) == 'number' and opts or (opts or {}).quality or 75
  if type(q) ~= 'number' or q < 1 or q > 100 then
    error('write_jpeg: quality must be a number in 1..100, got ' .. tostring(q), 2)
  end
  M.write_file(path, encode(img, C.OF_IMAGE_JPEG, q, 'write_jpeg'))
end

--- get_image_limits() -> {max_side =, max_bytes =, max_file_bytes =}: the
-- limits decoding checks before it allocates the pixels (process-wide).
function M.get_image_limits()
  local v = ffi.new('int64_t[3]')
  C.of_image_get_limits(v, v + 1, v + 2)
  return {max_side = tonumber(v[0]), max_bytes = tonumber(v[1]), max_file_bytes = tonumber(v[2])}
end

--- set_image_limits({max_side =, max_bytes =, max_file_bytes =}) -> the previous limits.
-- max_side: the longest side a decoded (or encoded) image may have (default
-- 32768, at most 2^31 - 1); max_bytes: its decoded size H * W * C in bytes
-- (default 2^30); max_file_bytes: the largest file read_image reads (default
-- 2^30); both at most 2^48. A field left out keeps its limit. The limits hold
-- for the whole process (DataLoader workers forked later inherit them).
function M.set_image_limits(opts)
  local A = require 'oneflow._args'
  opts = A.check_options('set_image_limits', opts, {'max_side', 'max_bytes', 'max_file_bytes'})
  local v = {}
  for i, k in ipairs({'max_side', 'max_bytes', 'max_file_bytes'}) do
    local x = opts[k]
    if x ~= nil then
      A.integer('set_image_limits', x, nil, k)
      local cap = k == 'max_side' and 2 ^ 31 - 1 or 2 ^ 48
      if x < 1 or x > cap then
        error(('set_image_limits: %s must be in 1..%.0f, got %.0f'):format(k, cap, x), 2)
      end
    end
    v[i] = x or 0
  end
  local old = M.get_image_limits()
  if C.of_image_set_limits(v[1], v[2], v[3]) ~= 0 then raise(2) end
  return old
end

--- write_image(img, path, {quality =}): format from the extension (.png, .jpg, .jpeg).
function M.write_image(img, path, opts)
  local hwc = to_hwc(img, 'write_image')
  local q = (type(opts) == 'number' and opts) or (opts or {}).quality or 0
  if C.of_image_write(path, hwc.p, q) ~= 0 then raise(2) end
end

return M
