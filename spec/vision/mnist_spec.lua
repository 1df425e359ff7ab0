local ffi = require 'ffi'
local flow = require 'oneflow'
local vision = require 'flowvision'
local H = require 'spec.helpers'

ffi.cdef [[
gzFile gzopen(const char *path, const char *mode);
int gzwrite(gzFile file, const void *buf, unsigned len);
int gzclose(gzFile file);
]]
local z = ffi.load('libz.so.1')

local function be32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
                     math.floor(n / 256) % 256, n % 256)
end

local function write_gz(path, bytes)
  local f = z.gzopen(path, 'wb')
  z.gzwrite(f, bytes, #bytes)
  z.gzclose(f)
end

local function idx(dims, data)
  local s = '\0\0\8' .. string.char(#dims)
  for _, d in ipairs(dims) do s = s .. be32(d) end
  return s .. data
end

describe('flowvision.datasets.MNIST', function()
  local root = os.tmpname()
  os.remove(root)
  os.execute('mkdir -p ' .. root)

  it('reads gzipped IDX files; labels are 1-based', function()
    local pixels = {}
    for i = 0, 2 * 2 * 3 - 1 do pixels[#pixels + 1] = string.char(i * 20) end
    write_gz(root .. '/train-images-idx3-ubyte.gz', idx({3, 2, 2}, table.concat(pixels)))
    write_gz(root .. '/train-labels-idx1-ubyte.gz', idx({3}, '\0\9\4'))
    local ds = vision.datasets.MNIST(root, {train = true})
    assert.are.equal(3, ds:len())
    local img, label = ds:get(2)
    assert.are.same({1, 2, 2}, H.shape(img))
    H.close(img, {{{80 / 255, 100 / 255}, {120 / 255, 140 / 255}}}, 1e-6)
    assert.are.equal(10, label)
    assert.are.same({1, 10, 5}, ds.targets:totable())
    local x, y = ds:tensors(0.5, 0.5)
    assert.are.same({3, 1, 2, 2}, H.shape(x))
    H.close(x[1][1][1][1], (0 - 0.5) / 0.5)
    assert.are.equal(flow.int64, y.dtype)
  end)

  it('rejects bad files and missing paths clearly', function()
    write_gz(root .. '/t10k-images-idx3-ubyte.gz', idx({5, 2, 2}, 'abc'))
    write_gz(root .. '/t10k-labels-idx1-ubyte.gz', idx({5}, 'abcde'))
    H.raises(function() vision.datasets.MNIST(root, {train = false}) end, 't10k-images', 'header says 20 bytes')
    write_gz(root .. '/t10k-images-idx3-ubyte.gz', 'not an idx file')
    H.raises(function() vision.datasets.MNIST(root, {train = false}) end, 'bad magic')
    H.raises(function() vision.datasets.MNIST('/nonexistent') end, 'not found', '/nonexistent', 'never downloads')
  end)

  local real = '/usr/share/datasets/fashion-mnist'
  local f = io.open(real .. '/t10k-labels-idx1-ubyte.gz', 'rb')
  if f then f:close() end
  local it_real = f and it or pending
  it_real('reads the real Fashion-MNIST test set', function()
    local ds = vision.datasets.FashionMNIST(real, {train = false})
    assert.are.equal(10000, ds:len())
    assert.are.equal(1, ds.targets:min():item())
    assert.are.equal(10, ds.targets:max():item())
    assert.are.same({1, 28, 28}, H.shape((ds:get(1))))
  end)
end)
