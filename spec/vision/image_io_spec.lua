-- Image IO (core/io/image.c, lua/flowvision/io.lua, lua/flowvision/utils.lua):
-- PNG/JPEG round trips on generated images, PNG colour types built by hand
-- (palette + tRNS, 16-bit, 1-bit grey), read modes, error messages, and
-- hostile input: truncated and bit-flipped files and oversized headers give
-- errors and never crash.
local ffi = require 'ffi'
local flow = require 'oneflow'
local vision = require 'flowvision'
local H = require 'spec.helpers'

local vio = vision.io
for _, d in ipairs({
  'unsigned long crc32(unsigned long crc, const uint8_t *buf, unsigned int len);',
  'int compress(uint8_t *dest, unsigned long *destLen, const uint8_t *source, unsigned long sourceLen);',
}) do pcall(ffi.cdef, d) end
local z = ffi.load('libz.so.1')

local dir = os.tmpname()
os.remove(dir)
os.execute('mkdir -p ' .. dir)

-- a smooth RGB test image [C, H, W] uint8
local function smooth(c, h, w)
  local t = {}
  for k = 1, c do
    t[k] = {}
    for y = 1, h do
      t[k][y] = {}
      for x = 1, w do t[k][y][x] = math.floor(127.5 + 100 * math.sin(x / 7 + k) * math.cos(y / 9 - k)) end
    end
  end
  return flow.tensor(t, {dtype = flow.uint8})
end

local function be32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
                     math.floor(n / 256) % 256, n % 256)
end

local function chunk(kind, data)
  local body = kind .. data
  local crc = tonumber(z.crc32(0, ffi.cast('const uint8_t *', body), #body))
  return be32(#data) .. body .. be32(crc)
end

local function zlib(s)
  local len = ffi.new('unsigned long[1]', #s + 1024)
  local buf = ffi.new('uint8_t[?]', len[0])
  assert(z.compress(buf, len, ffi.cast('const uint8_t *', s), #s) == 0)
  return ffi.string(buf, len[0])
end

-- a PNG from raw filtered rows (filter byte 0 on each row)
local function png(w, h, depth, ctype, rows, extra)
  local ihdr = be32(w) .. be32(h) .. string.char(depth, ctype, 0, 0, 0)
  local raw = {}
  for i, r in ipairs(rows) do raw[i] = '\0' .. r end
  return '\137PNG\r\n\26\n' .. chunk('IHDR', ihdr) .. (extra or '') .. chunk('IDAT', zlib(table.concat(raw)))
         .. chunk('IEND', '')
end

local function decode_ok(bytes)
  local ok, res = pcall(vio.decode_image, bytes)
  if ok then
    assert(flow.is_tensor(res) and res.dtype == flow.uint8 and res:dim() == 3)
    return true
  end
  assert(tostring(res):find('image_decode: ', 1, true), 'unexpected error: ' .. tostring(res))
  return false
end

local have_png, have_jpeg = vio.supported('png'), vio.supported('jpeg')
local it_png = have_png and it or pending
local it_jpeg = have_jpeg and it or pending

describe('vision.io PNG', function()
  it_png('round-trips 1 to 4 channels exactly', function()
    for c = 1, 4 do
      local img = smooth(c, 13, 21)
      local bytes = vio.encode_png(img)
      assert.are.equal(flow.uint8, bytes.dtype)
      local back = vio.decode_image(bytes)
      assert.are.same({c, 13, 21}, H.shape(back))
      assert.is_true(back:eq(img):all():item())
      local path = dir .. '/rt' .. c .. '.png'
      vio.write_png(img, path)
      assert.is_true(vio.read_image(path):eq(img):all():item())
    end
  end)

  it_png('expands palettes with tRNS to RGBA, scales 16-bit, expands 1-bit grey', function()
    local plte = chunk('PLTE', string.char(255, 0, 0, 0, 255, 0, 0, 0, 255))
    local trns = chunk('tRNS', string.char(255, 128))
    local pal = vio.decode_image(png(2, 2, 8, 3, {string.char(0, 1), string.char(2, 1)}, plte .. trns))
    H.close(pal, {{{255, 0}, {0, 0}}, {{0, 255}, {0, 255}}, {{0, 0}, {255, 0}}, {{255, 128}, {255, 128}}})
    local pal_rgb = vio.decode_image(png(2, 1, 8, 3, {string.char(0, 2)}, plte))
    H.close(pal_rgb, {{{255, 0}}, {{0, 0}}, {{0, 255}}})
    local g16 = vio.decode_image(png(3, 1, 16, 0, {string.char(0, 0, 255, 255, 100, 100)}))
    H.close(g16, {{{0, 255, 100}}})
    local g1 = vio.decode_image(png(10, 1, 1, 0, {string.char(0xA0, 0x40)}))
    H.close(g1, {{{255, 0, 255, 0, 0, 0, 0, 0, 0, 255}}})
    local ga = vio.decode_image(png(1, 1, 8, 4, {string.char(7, 9)}))
    H.close(ga, {{{7}}, {{9}}})
  end)

  it_png('converts modes on reading', function()
    local path = dir .. '/gray.png'
    vio.write_png(flow.tensor({{{10, 20}}}, {dtype = flow.uint8}), path)
    H.close(vio.read_image(path, {mode = 'rgb'}), {{{10, 20}}, {{10, 20}}, {{10, 20}}})
    H.close(vio.read_image(path, {mode = 'rgb_alpha'}), {{{10, 20}}, {{10, 20}}, {{10, 20}}, {{255, 255}}})
    vio.write_png(flow.tensor({{{100}}, {{50}}, {{200}}}, {dtype = flow.uint8}), path)
    -- ITU-R 601-2 luma: 0.299 * 100 + 0.587 * 50 + 0.114 * 200 = 82.15
    H.close(vio.read_image(path, {mode = 'gray'}), {{{82}}})
    H.raises(function() vio.read_image(path, {mode = 'cmyk'}) end, "unknown mode 'cmyk'")
  end)

  it('makes grids and saves them as torchvision.utils does', function()
    local batch = flow.stack({flow.zeros(3, 2, 2), flow.ones(3, 2, 2) * 0.5, flow.ones(3, 2, 2)})
    local grid = vision.utils.make_grid(batch, {nrow = 2, padding = 1, pad_value = 0.25})
    assert.are.same({3, 7, 7}, H.shape(grid))
    H.close(grid[1][1], {0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25})
    H.close(grid[1][2], {0.25, 0, 0, 0.25, 0.5, 0.5, 0.25})
    H.close(grid[1][5], {0.25, 1, 1, 0.25, 0.25, 0.25, 0.25})
    if have_png then
      local path = dir .. '/grid.png'
      vision.utils.save_image(batch, path, {nrow = 2, padding = 1, pad_value = 0.25})
      local back = vio.read_image(path)
      assert.is_true(back:eq(grid:mul(255):add(0.5):clamp(0, 255):byte()):all():item())
    end
    H.raises(function() vision.utils.save_image(batch, dir .. '/x.bmp') end, 'unknown extension')
  end)
end)

describe('vision.io JPEG', function()
  it_jpeg('round-trips within JPEG tolerance (RGB and grey)', function()
    for _, c in ipairs({3, 1}) do
      local img = smooth(c, 32, 40)
      local back = vio.decode_image(vio.encode_jpeg(img, {quality = 95}))
      assert.are.same({c, 32, 40}, H.shape(back))
      local err = (back:float() - img:float()):abs()
      assert.is_true(err:mean():item() < 2.5, 'mean error ' .. err:mean():item())
      assert.is_true(err:max():item() < 24, 'max error ' .. err:max():item())
    end
    local path = dir .. '/a.JPG'
    vio.write_image(smooth(3, 8, 8), path, {quality = 90})
    assert.are.same({3, 8, 8}, H.shape(vio.read_image(path)))
    local low = vio.encode_jpeg(smooth(3, 32, 40), {quality = 10}):numel()
    local high = vio.encode_jpeg(smooth(3, 32, 40), {quality = 100}):numel()
    assert.is_true(low < high)
  end)

  it_jpeg('rejects what JPEG cannot hold', function()
    H.raises(function() vio.encode_jpeg(smooth(4, 4, 4)) end, 'JPEG needs 1 or 3 channels, got 4')
    H.raises(function() vio.encode_jpeg(smooth(3, 4, 4), {quality = 0}) end, 'quality must be')
  end)
end)

describe('vision.io errors', function()
  it('names the file and the problem', function()
    H.raises(function() vio.read_image(dir .. '/missing.png') end, 'image_read: cannot open', 'missing.png')
    local path = dir .. '/not_an_image.png'
    local f = io.open(path, 'wb'); f:write('hello world'); f:close()
    H.raises(function() vio.read_image(path) end, 'not_an_image.png', 'not a PNG or JPEG image')
    H.raises(function() vio.decode_image('') end, 'empty data')
    H.raises(function() vio.decode_image(42) end, 'decode_image: expected the file bytes')
    H.raises(function() vio.encode_png(flow.zeros(3, 4, 4)) end, 'expected a uint8 tensor', 'float32')
    H.raises(function() vio.encode_png(flow.zeros(2, 3, 4, 4, {dtype = flow.uint8})) end,
             'expected a uint8 tensor [C, H, W]')
    H.raises(function() vio.write_image(smooth(3, 2, 2), dir .. '/x.gif') end, 'unknown extension', 'x.gif')
    if have_png then
      H.raises(function() vio.encode_png(flow.zeros(5, 4, 4, {dtype = flow.uint8})) end, 'PNG needs 1 to 4 channels')
    else
      H.raises(function() vio.encode_png(smooth(3, 2, 2)) end, 'built without libpng')
    end
    if have_png then
      local bytes = vio.encode_png(smooth(3, 9, 9))
      local s = ffi.string(bytes:data_ptr(), bytes:numel())
      local tpath = dir .. '/truncated.png'
      f = io.open(tpath, 'wb'); f:write(s:sub(1, #s - 20)); f:close()
      H.raises(function() vio.read_image(tpath) end, 'image_read: ', 'truncated.png', 'corrupt PNG')
    end
    if have_jpeg then
      local bytes = vio.encode_jpeg(smooth(3, 16, 16))
      local s = ffi.string(bytes:data_ptr(), bytes:numel())
      H.raises(function() vio.decode_image(s:sub(1, math.floor(#s / 2))) end, 'corrupt JPEG')
    else
      local jpeg_magic = string.char(0xFF, 0xD8, 0xFF, 0xE0) .. string.rep('\0', 16)
      H.raises(function() vio.decode_image(jpeg_magic) end, 'built without libjpeg')
    end
  end)

  it_png('survives truncated and bit-flipped PNGs', function()
    local bytes = vio.encode_png(smooth(3, 12, 17))
    local s = ffi.string(bytes:data_ptr(), bytes:numel())
    for n = 0, #s - 1 do assert.is_false(decode_ok(s:sub(1, n))) end
    math.randomseed(7)
    for _ = 1, 300 do
      local b = {s:byte(1, -1)}
      for _ = 1, math.random(1, 4) do
        local i = math.random(1, #b)
        b[i] = bit.bxor(b[i], bit.lshift(1, math.random(0, 7)))
      end
      decode_ok(string.char(unpack(b)))
    end
  end)

  it_png('rejects oversized PNG headers before allocating', function()
    local big = png(40000, 1, 8, 0, {string.rep('\0', 10)})
    H.raises(function() vio.decode_image(big) end,
             'image_decode: PNG of 40000x1 pixels is larger than the 32768x32768 limit')
    local wide = png(30000, 30000, 8, 6, {string.rep('\0', 10)})
    H.raises(function() vio.decode_image(wide) end, 'larger than the 1073741824-byte limit')
    -- within the limits, but 16000x16000 raw rows cannot come from 60 bytes (deflate
    -- expands at most 1032:1): refused before the 256 MB pixel buffer is allocated
    local tall = png(16000, 16000, 8, 0, {string.rep('\0', 10)})
    H.raises(function() vio.decode_image(tall) end, 'corrupt PNG', 'cannot come from a file of')
    -- a real image compressed about as far as deflate goes still decodes
    local zeros = vio.encode_png(flow.zeros(1, 2100, 2100, {dtype = flow.uint8}))
    local img = vio.decode_image(zeros)
    assert.are.same({1, 2100, 2100}, img:size():totable())
    assert.are.equal(0, img:max():item())
  end)

  it('has configurable size limits, checked before the pixels are allocated', function()
    assert.are.same({max_side = 32768, max_bytes = 2 ^ 30, max_file_bytes = 2 ^ 30}, vio.get_image_limits())
    local img = smooth(3, 40, 60)
    local path = dir .. '/limits.png'
    finally(function() vio.set_image_limits({max_side = 32768, max_bytes = 2 ^ 30, max_file_bytes = 2 ^ 30}) end)
    for _, fmt in ipairs({'png', 'jpeg'}) do
      if vio.supported(fmt) then
        local bytes = fmt == 'png' and vio.encode_png(img) or vio.encode_jpeg(img)
        local FMT = fmt:upper()
        -- the previous limits come back; a field left out keeps its limit
        assert.are.same({max_side = 32768, max_bytes = 2 ^ 30, max_file_bytes = 2 ^ 30},
                        vio.set_image_limits({max_side = 59}))
        H.raises(function() vio.decode_image(bytes) end,
                 'image_decode: ' .. FMT .. ' of 60x40 pixels is larger than the 59x59 limit', 'max_side')
        vio.set_image_limits({max_side = 60})
        assert.are.same({3, 40, 60}, vio.decode_image(bytes):size():totable())
        vio.set_image_limits({max_bytes = 40 * 60 * 3 - 1})
        assert.are.same({max_side = 60, max_bytes = 7199, max_file_bytes = 2 ^ 30}, vio.get_image_limits())
        H.raises(function() vio.decode_image(bytes) end,
                 FMT .. ' of 40x60x3 bytes is larger than the 7199-byte limit', 'max_bytes')
        -- grey needs a third of the bytes
        assert.are.same({1, 40, 60}, vio.decode_image(fmt == 'png' and vio.encode_png(img:narrow(1, 1, 1))
                                                        or vio.encode_jpeg(img:narrow(1, 1, 1))):size():totable())
        vio.set_image_limits({max_bytes = 40 * 60 * 3})
        assert.are.same({3, 40, 60}, vio.decode_image(bytes):size():totable())
        -- read_image: the file's size first
        vio.write_file(path, bytes)
        vio.set_image_limits({max_file_bytes = bytes:numel() - 1})
        H.raises(function() vio.read_image(path) end, 'image_read: ', 'limits.png',
                 ('file of %d bytes is larger than the %d-byte limit'):format(bytes:numel(), bytes:numel() - 1),
                 'max_file_bytes')
        vio.set_image_limits({max_side = 32768, max_bytes = 2 ^ 30, max_file_bytes = bytes:numel()})
        assert.are.same({3, 40, 60}, vio.read_image(path):size():totable())
        vio.set_image_limits({max_file_bytes = 2 ^ 30})
      end
    end
    -- a larger limit lets a larger image through (sides up to 2^31 - 1)
    if have_png then
      vio.set_image_limits({max_side = 40000})
      assert.are.same({1, 1, 40000}, vio.decode_image(vio.encode_png(flow.zeros(1, 1, 40000, {dtype = flow.uint8})))
                                         :size():totable())
    end
    -- bad values name the field; nothing changes
    local before = vio.get_image_limits()
    H.raises(function() vio.set_image_limits({max_side = 0}) end,
             'set_image_limits: max_side must be in 1..2147483647, got 0')
    H.raises(function() vio.set_image_limits({max_bytes = -1}) end,
             'max_bytes must be in 1..281474976710656, got -1')
    H.raises(function() vio.set_image_limits({max_side = 2 ^ 31}) end,
             'max_side must be in 1..2147483647, got 2147483648')
    H.raises(function() vio.set_image_limits({max_file_bytes = 2.5}) end, 'max_file_bytes must be an integer, got 2.5')
    H.raises(function() vio.set_image_limits({max_side = 'a'}) end, 'max_side must be an integer, got string')
    H.raises(function() vio.set_image_limits({max_sides = 9}) end, "unknown option 'max_sides'")
    assert.are.same(before, vio.get_image_limits())
    -- the C API: 0 keeps a limit, a value out of range is an error
    local C = flow._C.C
    assert.are.equal(0, C.of_image_set_limits(0, 12345, 0))
    assert.are.same({max_side = before.max_side, max_bytes = 12345, max_file_bytes = before.max_file_bytes},
                    vio.get_image_limits())
    assert.are_not.equal(0, C.of_image_set_limits(-1, 0, 0))
    assert.truthy(ffi.string(C.of_last_error()):find('image_set_limits: max_side must be 1..2147483647', 1, true))
  end)

  it_jpeg('survives truncated, bit-flipped and oversized JPEGs', function()
    local bytes = vio.encode_jpeg(smooth(3, 24, 24), {quality = 80})
    local s = ffi.string(bytes:data_ptr(), bytes:numel())
    for n = 0, #s - 1, 3 do assert.is_false(decode_ok(s:sub(1, n))) end
    math.randomseed(11)
    for _ = 1, 300 do
      local b = {s:byte(1, -1)}
      for _ = 1, math.random(1, 4) do
        local i = math.random(3, #b)
        b[i] = bit.bxor(b[i], bit.lshift(1, math.random(0, 7)))
      end
      decode_ok(string.char(unpack(b)))
    end
    -- SOF0 claims 40000 x 40000 pixels
    local sof = s:find(string.char(0xFF, 0xC0), 1, true)
    assert.is_truthy(sof)
    local patched = s:sub(1, sof + 4) .. string.char(0x9C, 0x40, 0x9C, 0x40) .. s:sub(sof + 9)
    H.raises(function() vio.decode_image(patched) end,
             'JPEG of 40000x40000 pixels is larger than the 32768x32768 limit')
    -- 8192 x 8192 is within the limits, but not from a file of a few hundred bytes
    local claims = s:sub(1, sof + 4) .. string.char(0x20, 0x00, 0x20, 0x00) .. s:sub(sof + 9)
    H.raises(function() vio.decode_image(claims) end, 'corrupt JPEG', 'cannot come from a file of')
    local zeros = vio.encode_jpeg(flow.zeros(1, 2100, 2100, {dtype = flow.uint8}))
    assert.are.same({1, 2100, 2100}, vio.decode_image(zeros):size():totable())
  end)
end)
