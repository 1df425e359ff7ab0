-- flowvision.datasets.MNIST / FashionMNIST: the IDX files as distributed
-- (gzip-compressed or not), read through zlib. Labels are 1-based class
-- indices (1..10), as every class label in this API.
local A = require 'oneflow._args'
local ffi = require 'ffi'
local flow = require 'oneflow'

local M = {}

ffi.cdef [[
typedef struct gzFile_s *gzFile;
gzFile gzopen(const char *path, const char *mode);
int gzread(gzFile file, void *buf, unsigned len);
int gzclose(gzFile file);
]]
local z
local function zlib()
  if not z then
    local ok, lib = pcall(ffi.load, 'z')
    if not ok then ok, lib = pcall(ffi.load, 'libz.so.1') end
    if not ok then error('flowvision: cannot load zlib (libz.so.1): ' .. tostring(lib), 3) end
    z = lib
  end
  return z
end

--- Reads a whole (possibly gzipped) file into a Lua string.
local function read_all(path)
  local f = zlib().gzopen(path, 'rb')
  if f == nil then error(('%s: cannot open (missing or unreadable)'):format(path), 3) end
  local chunks, buf = {}, ffi.new("uint8_t[?]", 1048576)
  while true do
    local n = z.gzread(f, buf, 1048576)
    if n < 0 then
      z.gzclose(f)
      error(path .. ': corrupt gzip stream', 3)
    end
    if n == 0 then break end
    chunks[#chunks + 1] = ffi.string(buf, n)
  end
  z.gzclose(f)
  return table.concat(chunks)
end

local function be32(s, pos)
  local a, b, c, d = s:byte(pos, pos + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

--- Parses an IDX file of unsigned bytes; returns a uint8 tensor.
function M.read_idx(path)
  local s = read_all(path)
  if #s < 4 then error(path .. ': not an IDX file (too short)', 2) end
  local zero, dtype, ndim = s:byte(1), s:byte(3), s:byte(4)
  if zero ~= 0 or s:byte(2) ~= 0 or dtype ~= 0x08 or ndim < 1 or ndim > 4 then
    error(path .. ': not an IDX file of unsigned bytes (bad magic)', 2)
  end
  local shape, count = {}, 1
  for i = 1, ndim do
    shape[i] = be32(s, 5 + (i - 1) * 4)
    count = count * shape[i]
  end
  local header = 4 + 4 * ndim
  if #s ~= header + count then
    error(('%s: header says %d bytes of data, file has %d'):format(path, count, #s - header), 2)
  end
  local t = flow.empty(shape, {dtype = flow.uint8})
  ffi.copy(t:data_ptr(), ffi.cast('const uint8_t*', s) + header, count)
  return t
end

local files = {
  train = {'train-images-idx3-ubyte', 'train-labels-idx1-ubyte'},
  test = {'t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'},
}

local function find(root, name)
  for _, candidate in ipairs({name .. '.gz', name}) do
    local path = root .. '/' .. candidate
    local f = io.open(path, 'rb')
    if f then f:close() return path end
  end
  error(('MNIST: %s(.gz) not found in %s (this library never downloads; for '
         .. 'Fashion-MNIST on Debian: apt-get install dataset-fashion-mnist, '
         .. 'root /usr/share/datasets/fashion-mnist)'):format(name, root), 4)
end

local Dataset = flow.utils.data.Dataset
local MNIST = Dataset:subclass('MNIST')
M.MNIST = MNIST

--- MNIST(root, {train = true, transform = fn, target_transform = fn})
-- data: uint8 [N, 28, 28]; targets: int64 [N] in 1..10.
function MNIST:__init(root, opts)
  opts = A.check_options('MNIST', opts, {target_transform = true, train = true, transform = true})
  if type(root) ~= 'string' then error('MNIST: root must be a directory path', 3) end
  local split = (opts.train == false) and 'test' or 'train'
  self.data = M.read_idx(find(root, files[split][1]))
  self.targets = M.read_idx(find(root, files[split][2])):long() + 1
  if self.data:size(1) ~= self.targets:size(1) then
    error(('MNIST: %d images but %d labels in %s'):format(self.data:size(1), self.targets:size(1), root), 3)
  end
  self.transform, self.target_transform = opts.transform, opts.target_transform
end

function MNIST:len() return self.data:size(1) end

--- Sample i: image float32 [1, 28, 28] in [0, 1] (or transform(uint8 [28, 28])),
-- label as a number in 1..10.
function MNIST:get(i)
  local img, target = self.data[i], self.targets[i]:item()
  if self.transform then img = self.transform(img)
  else img = img:float():div(255):unsqueeze(1) end
  if self.target_transform then target = self.target_transform(target) end
  return img, target
end

--- All samples as two tensors: images float32 [N, 1, 28, 28] scaled to
-- [0, 1] and normalised by (mean, std) when given, labels int64 [N].
function MNIST:tensors(mean, std)
  local x = self.data:float():div(255):unsqueeze(2)
  if mean then x = (x - mean) / std end
  return x, self.targets
end

M.FashionMNIST = MNIST:subclass('FashionMNIST')
M.FashionMNIST.classes = {'T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal',
                          'Shirt', 'Sneaker', 'Bag', 'Ankle boot'}

return M
