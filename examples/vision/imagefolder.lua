-- ImageFolder end to end: write a tiny image tree (3 classes of synthetic
-- pictures, PNG and JPEG) into a temporary directory, load it with
-- vision.datasets.ImageFolder + transforms + a DataLoader, train a tiny CNN for
-- a few steps, then remove the directory.
--
--   ./bin/flow examples/vision/imagefolder.lua [--steps 30] [--per-class 4]
--       [--threads 2] [--keep 0]
--
-- The tree is  <tmp>/disk/*.png|jpg, <tmp>/hstripes/..., <tmp>/vstripes/...;
-- ImageFolder sorts the subfolders into classes 1..3 and decodes each file to
-- uint8 RGB [3, H, W] in C (libpng / libjpeg-turbo).
-- Runs from any directory: this checkout's lua/ and examples come first.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/../../lua/?.lua;%s/../../lua/?/init.lua;%s/../../?.lua;'):format(here, here, here) .. package.path
local argparse = require 'argparse'
local ffi = require 'ffi'
local flow = require 'oneflow'
local vision = require 'flowvision'

local nn, F = flow.nn, flow.nn.functional
local T = vision.transforms

pcall(ffi.cdef, 'char *mkdtemp(char *template);')
pcall(ffi.cdef, 'int mkdir(const char *path, unsigned int mode);')

local function parse_args(argv)
  local p = argparse('imagefolder.lua', 'Write a tiny image tree (3 classes, PNG and JPEG) into a '
    .. 'temporary directory, load it with ImageFolder + transforms + a DataLoader, train a tiny CNN '
    .. 'for a few steps, then remove the directory.')
  p:option('--steps', 'Training steps.', '30', tonumber)
  p:option('--per-class', 'Pictures per class.', '4', tonumber)
  p:option('--threads', 'CPU threads.', '2', tonumber)
  p:option('--keep', '1: keep the image tree.', '0', tonumber)
  return p:parse(argv)
end

local function make_tmpdir()
  local base = (os.getenv('TMPDIR') or '/tmp') .. '/flowvision-imagefolder-XXXXXX'
  local buf = ffi.new('char[?]', #base + 1)
  ffi.copy(buf, base)
  if ffi.C.mkdtemp(buf) == nil then error('imagefolder.lua: mkdtemp failed for ' .. base, 0) end
  return ffi.string(buf)
end

-- One synthetic picture, uint8 [3, h, w]: a bright disk, horizontal stripes or
-- vertical stripes in a random colour on a dark noisy background.
local function picture(kind, h, w)
  local ys = flow.arange(0, h):float():view(h, 1):expand(h, w)
  local xs = flow.arange(0, w):float():view(1, w):expand(h, w)
  local mask
  if kind == 'disk' then
    local cy, cx, r = h / 2 + flow.randn(1):item() * 3, w / 2 + flow.randn(1):item() * 3, math.min(h, w) / 3
    mask = ((ys - cy) ^ 2 + (xs - cx) ^ 2):lt(r * r):float()
  elseif kind == 'hstripes' then
    mask = ((ys / 4):floor() % 2):float()
  else
    mask = ((xs / 4):floor() % 2):float()
  end
  local colour = flow.rand(3, 1, 1) * 0.5 + 0.5
  local img = mask:unsqueeze(1) * colour + flow.rand(3, h, w) * 0.25
  return (img * 255):clamp(0, 255):to(flow.uint8)
end

-- Writes the tree; returns the list of files and directories to remove.
local function write_tree(root, per_class)
  local created = {}
  for _, kind in ipairs({'disk', 'hstripes', 'vstripes'}) do
    local dir = root .. '/' .. kind
    if ffi.C.mkdir(dir, tonumber('755', 8)) ~= 0 then error('imagefolder.lua: cannot create ' .. dir, 0) end
    for i = 1, per_class do
      local h, w = 36 + 4 * (i % 3), 40 + 4 * (i % 2)          -- sizes vary: the transform resizes
      local img = picture(kind, h, w)
      local path
      if i % 2 == 1 then
        path = ('%s/%s_%02d.png'):format(dir, kind, i)
        vision.io.write_png(img, path)
      else
        path = ('%s/%s_%02d.jpg'):format(dir, kind, i)
        vision.io.write_jpeg(img, path, {quality = 90})
      end
      created[#created + 1] = path
    end
    created[#created + 1] = dir
  end
  created[#created + 1] = root
  return created
end

local TinyCNN = nn.Module:subclass('TinyCNN')

function TinyCNN:__init(num_classes)
  nn.Module.__init(self)
  self.conv1 = nn.Conv2d(3, 8, 3, {padding = 1})
  self.conv2 = nn.Conv2d(8, 16, 3, {padding = 1})
  self.fc = nn.Linear(16, num_classes)
end

function TinyCNN:forward(x)
  x = F.max_pool2d(F.relu(self.conv1(x)), 2)       -- [N, 8, 16, 16]
  x = F.max_pool2d(F.relu(self.conv2(x)), 2)       -- [N, 16, 8, 8]
  return self.fc(flow.flatten(F.adaptive_avg_pool2d(x, 1), 2))
end

local function main(argv)
  local opts = parse_args(argv)
  flow.set_num_threads(opts.threads)
  flow.manual_seed(0)
  local root = make_tmpdir()
  local created = write_tree(root, opts.per_class)

  local ok, err = pcall(function()
    local tf = T.Compose{T.Resize(32), T.CenterCrop(32), T.RandomHorizontalFlip(), T.ToTensor(),
                         T.Normalize({0.5, 0.5, 0.5}, {0.5, 0.5, 0.5})}
    local ds = vision.datasets.ImageFolder(root, {transform = tf})
    local names = {}
    for name, idx in pairs(ds.class_to_idx) do names[idx] = ('%s = %d'):format(name, idx) end
    print(('ImageFolder %s: %d images, %d classes'):format(root, #ds, #ds.classes))
    print('class_to_idx: {' .. table.concat(names, ', ') .. '}')

    local loader = flow.utils.data.DataLoader(ds, {batch_size = 6, shuffle = true})
    local model = TinyCNN(#ds.classes)
    local opt = flow.optim.Adam(model:parameters(), {lr = 0.01})
    local step, first, last = 0, nil, nil
    while step < opts.steps do
      for x, y in loader:iter() do
        local loss = F.cross_entropy(model(x), y)
        opt:zero_grad()
        loss:backward()
        opt:step()
        step = step + 1
        last = loss:item()
        first = first or last
        if step == 1 or step % 10 == 0 or step == opts.steps then
          print(('step %d: loss %.4f (batch %s)'):format(step, last, tostring(x:size())))
        end
        if step >= opts.steps then break end
      end
    end

    model:eval()
    local correct = 0
    flow.no_grad(function()
      for x, y in flow.utils.data.DataLoader(ds, {batch_size = 64}):iter() do
        correct = correct + model(x):argmax(2):eq(y):sum():item()
      end
    end)
    print(('done: loss %.4f -> %.4f, training-set accuracy %d/%d'):format(first, last, correct, #ds))
  end)

  if opts.keep == 0 then
    for _, path in ipairs(created) do os.remove(path) end   -- files first, then the empty dirs
    print('removed ' .. root)
  end
  if not ok then error(err, 0) end
end

main(arg or {})
