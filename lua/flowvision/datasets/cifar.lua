-- flowvision.datasets.CIFAR10 / CIFAR100: the binary versions, as distributed
-- (cifar-10-binary.tar.gz, cifar-100-binary.tar.gz, unpacked). No download.
--
--   vision.datasets.CIFAR10(root, {train = true, transform =, target_transform =})
--     root is the folder holding data_batch_1.bin .. data_batch_5.bin and
--     test_batch.bin, or its parent (with cifar-10-batches-bin/ inside).
--   vision.datasets.CIFAR100(root, {train = true, ...})
--     train.bin / test.bin in root or root/cifar-100-binary/. Records carry a
--     coarse (20) and a fine (100) label; targets are the fine ones,
--     coarse_targets the coarse ones.
--
-- data: uint8 [N, 3, 32, 32] (channels first, as vision.io.read_image);
-- targets: int64 [N], 1-based class indices. get(i) gives the image as float
-- [3, 32, 32] in [0, 1], or transform(uint8 [3, 32, 32]), and the label.
local A = require 'oneflow._args'
local ffi = require 'ffi'
local flow = require 'oneflow'

local M = {}

local RECORD = 3072

local function exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() return true end
  return false
end

local function read_all(path, op)
  local f, err = io.open(path, 'rb')
  if not f then error(('%s: cannot open %s (%s)'):format(op, path, tostring(err)), 4) end
  local s = f:read('*a')
  f:close()
  return s
end

-- The folder holding `probe`: root itself or root/sub.
local function find_dir(root, sub, probe, op, hint)
  if type(root) ~= 'string' then error(op .. ': root must be a directory path, got ' .. type(root), 4) end
  if exists(root .. '/' .. probe) then return root end
  if exists(root .. '/' .. sub .. '/' .. probe) then return root .. '/' .. sub end
  error(('%s: %s not found in %s or %s/%s (this library never downloads; unpack %s there)')
        :format(op, probe, root, root, sub, hint), 4)
end

-- Reads records of `labels` label bytes + 3072 pixel bytes from files.
-- Returns uint8 images [N, 3, 32, 32] and a list of int64 label tensors [N] (1-based).
local function read_records(paths, nlabels, op)
  local size = nlabels + RECORD
  local blobs, total = {}, 0
  for i, p in ipairs(paths) do
    local s = read_all(p, op)
    if #s == 0 or #s % size ~= 0 then
      error(('%s: %s is not a CIFAR binary file (%d bytes is not a multiple of the %d-byte record)')
            :format(op, p, #s, size), 4)
    end
    blobs[i] = s
    total = total + #s / size
  end
  local raw = flow.empty({total, size}, {dtype = flow.uint8})
  local dst = ffi.cast('uint8_t *', raw:data_ptr())
  local off = 0
  for _, s in ipairs(blobs) do
    ffi.copy(dst + off, s, #s)
    off = off + #s
  end
  local images = raw:narrow(2, nlabels + 1, RECORD):reshape(total, 3, 32, 32):contiguous()
  local labels = {}
  for k = 1, nlabels do labels[k] = raw:select(2, k):long() + 1 end
  return images, labels
end

local function read_names(path)
  local f = io.open(path, 'r')
  if not f then return nil end
  local names = {}
  for line in f:lines() do
    line = line:gsub('%s+$', '')
    if line ~= '' then names[#names + 1] = line end
  end
  f:close()
  return names
end

local Dataset = flow.utils.data.Dataset

local CIFAR10 = Dataset:subclass('CIFAR10')
M.CIFAR10 = CIFAR10
CIFAR10.classes = {'airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck'}

function CIFAR10:__init(root, opts)
  opts = A.check_options('CIFAR10', opts, {target_transform = true, train = true, transform = true})
  local train = opts.train ~= false
  local dir = find_dir(root, 'cifar-10-batches-bin', train and 'data_batch_1.bin' or 'test_batch.bin',
                       'CIFAR10', 'cifar-10-binary.tar.gz')
  local paths = {}
  if train then
    for i = 1, 5 do
      local p = ('%s/data_batch_%d.bin'):format(dir, i)
      if not exists(p) then
        error(('CIFAR10: %s is missing (the training set is data_batch_1.bin .. data_batch_5.bin)'):format(p), 3)
      end
      paths[i] = p
    end
  else
    paths[1] = dir .. '/test_batch.bin'
  end
  local labels
  self.data, labels = read_records(paths, 1, 'CIFAR10')
  self.targets = labels[1]
  if self.targets:max():item() > 10 then
    error(('CIFAR10: labels above 10 in %s (is this CIFAR-100?)'):format(dir), 3)
  end
  self.classes = read_names(dir .. '/batches.meta.txt') or CIFAR10.classes
  self.class_to_idx = {}
  for i, c in ipairs(self.classes) do self.class_to_idx[c] = i end
  self.train, self.root = train, dir
  self.transform, self.target_transform = opts.transform, opts.target_transform
end

function CIFAR10:len() return self.data:size(1) end

function CIFAR10:get(i)
  local img, target = self.data[i], self.targets[i]:item()
  if self.transform then img = self.transform(img)
  else img = img:float():div(255) end
  if self.target_transform then target = self.target_transform(target) end
  return img, target
end

--- All samples: float [N, 3, 32, 32] in [0, 1], normalized by per-channel
-- (or scalar) mean/std when given, and the int64 labels [N].
function CIFAR10:tensors(mean, std)
  local x = self.data:float():div(255)
  if mean then
    if type(mean) == 'table' then mean = flow.tensor(mean):view(1, -1, 1, 1) end
    if type(std) == 'table' then std = flow.tensor(std):view(1, -1, 1, 1) end
    x = (x - mean) / std
  end
  return x, self.targets
end

local CIFAR100 = CIFAR10:subclass('CIFAR100')
M.CIFAR100 = CIFAR100

function CIFAR100:__init(root, opts)
  opts = A.check_options('CIFAR100', opts, {target_transform = true, train = true, transform = true})
  local train = opts.train ~= false
  local file = train and 'train.bin' or 'test.bin'
  local dir = find_dir(root, 'cifar-100-binary', file, 'CIFAR100', 'cifar-100-binary.tar.gz')
  local labels
  self.data, labels = read_records({dir .. '/' .. file}, 2, 'CIFAR100')
  self.coarse_targets, self.targets = labels[1], labels[2]
  if self.targets:max():item() > 100 or self.coarse_targets:max():item() > 20 then
    error(('CIFAR100: labels out of range in %s/%s (fine 1..100, coarse 1..20)'):format(dir, file), 3)
  end
  -- names from the meta files shipped with the binary version ({} without them)
  self.classes = read_names(dir .. '/fine_label_names.txt') or {}
  self.coarse_classes = read_names(dir .. '/coarse_label_names.txt') or {}
  self.class_to_idx = {}
  for i, c in ipairs(self.classes) do self.class_to_idx[c] = i end
  self.train, self.root = train, dir
  self.transform, self.target_transform = opts.transform, opts.target_transform
end

return M
