-- vision.datasets: CIFAR-10/100 binary files and ImageFolder trees written
-- to a temporary folder; labels 1-based; transforms and the DataLoader.
local flow = require 'oneflow'
local vision = require 'flowvision'
local H = require 'spec.helpers'

local T = vision.transforms
local vio = vision.io

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  os.execute('mkdir -p ' .. d)
  return d
end

local function write(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end

-- one CIFAR record: label bytes, then R, G, B planes of 32 x 32, pixel (c, y, x) =
-- (seed + 3 c + y + x) % 256
local function record(labels, seed)
  local px = {}
  for c = 0, 2 do
    for y = 0, 31 do
      for x = 0, 31 do px[#px + 1] = string.char((seed + 3 * c + y + x) % 256) end
    end
  end
  return string.char(unpack(labels)) .. table.concat(px)
end

describe('datasets: CIFAR10 / CIFAR100 (binary version)', function()
  local root = tmpdir()
  local bin = root .. '/cifar-10-batches-bin'
  os.execute('mkdir -p ' .. bin)
  for b = 1, 5 do write(('%s/data_batch_%d.bin'):format(bin, b), record({b - 1}, b) .. record({9}, 10 + b)) end
  write(bin .. '/test_batch.bin', record({3}, 0))
  write(bin .. '/batches.meta.txt', 'airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n')

  it('reads the five training batches; labels 1-based; CHW uint8 data', function()
    local ds = vision.datasets.CIFAR10(root)   -- the parent folder works
    assert.are.equal(10, ds:len())
    assert.are.same({10, 3, 32, 32}, H.shape(ds.data))
    assert.are.same({1, 10, 2, 10, 3, 10, 4, 10, 5, 10}, ds.targets:totable())
    -- record 3 is batch 2's first: seed 2
    assert.are.equal((2 + 3 * 1 + 4 + 5) % 256, ds.data[3][2][5][6]:item())
    local img, label = ds:get(3)
    assert.are.equal(2, label)
    assert.are.same({3, 32, 32}, H.shape(img))
    H.close(img[1][1][1], 2 / 255)
    assert.are.equal('automobile', ds.classes[2])
    assert.are.equal(4, ds.class_to_idx.cat)
    local tf = T.Compose{T.RandomCrop(32, {padding = 4}), T.RandomHorizontalFlip(), T.ToTensor(),
                         T.Normalize({0.5, 0.5, 0.5}, {0.25, 0.25, 0.25})}
    local ds2 = vision.datasets.CIFAR10(bin, {train = true, transform = tf,
                                              target_transform = function(t) return t - 1 end})
    local x, y = ds2:get(1)
    assert.are.same({3, 32, 32}, H.shape(x))
    assert.are.equal(0, y)
    local loader = flow.utils.data.DataLoader(ds2, {batch_size = 4})
    local xb, yb = loader:iter()()
    assert.are.same({4, 3, 32, 32}, H.shape(xb))
    assert.are.same({4}, H.shape(yb))
    local xs, ys = ds:tensors({0.5, 0.5, 0.5}, {0.5, 0.5, 0.5})
    assert.are.same({10, 3, 32, 32}, H.shape(xs))
    H.close(xs[1][1][1][1], (1 / 255 - 0.5) / 0.5, 1e-6)
    assert.are.equal(flow.int64, ys.dtype)
    local test = vision.datasets.CIFAR10(root, {train = false})
    assert.are.equal(1, test:len())
    assert.are.equal(4, test.targets[1]:item())
  end)

  it('CIFAR100: coarse and fine labels', function()
    local r = tmpdir()
    os.execute('mkdir -p ' .. r .. '/cifar-100-binary')
    write(r .. '/cifar-100-binary/train.bin', record({19, 99}, 1) .. record({0, 0}, 2) .. record({5, 42}, 3))
    write(r .. '/cifar-100-binary/fine_label_names.txt', 'apple\naquarium_fish\n')
    local ds = vision.datasets.CIFAR100(r)
    assert.are.equal(3, ds:len())
    assert.are.same({100, 1, 43}, ds.targets:totable())
    assert.are.same({20, 1, 6}, ds.coarse_targets:totable())
    assert.are.equal('aquarium_fish', ds.classes[2])
    local _, label = ds:get(1)
    assert.are.equal(100, label)
    H.raises(function() vision.datasets.CIFAR100(r, {train = false}) end, 'test.bin not found', 'never downloads')
  end)

  it('reports missing and malformed files', function()
    H.raises(function() vision.datasets.CIFAR10('/nonexistent') end, 'data_batch_1.bin not found',
             '/nonexistent', 'never downloads')
    local r = tmpdir()
    write(r .. '/data_batch_1.bin', record({1}, 0))
    H.raises(function() vision.datasets.CIFAR10(r) end, 'data_batch_2.bin is missing')
    write(r .. '/test_batch.bin', record({1}, 0):sub(1, 100))
    H.raises(function() vision.datasets.CIFAR10(r, {train = false}) end, 'test_batch.bin',
             'not a multiple of the 3073-byte record')
    write(r .. '/test_batch.bin', record({50}, 0))
    H.raises(function() vision.datasets.CIFAR10(r, {train = false}) end, 'labels above 10')
  end)
end)

describe('datasets: ImageFolder', function()
  local png, jpeg = vio.supported('png'), vio.supported('jpeg')
  local it_img = (png and jpeg) and it or pending
  local root = tmpdir()

  local function img(c, h, w, v) return flow.full({c, h, w}, v, {dtype = flow.uint8}) end

  it_img('finds sorted classes, walks folders recursively, decodes PNG and JPEG', function()
    os.execute(('mkdir -p %s/dog/nested %s/cat %s/bird'):format(root, root, root))
    vio.write_png(img(3, 5, 4, 10), root .. '/dog/b.png')
    vio.write_png(img(1, 5, 4, 20), root .. '/dog/a.PNG')
    vio.write_jpeg(img(3, 8, 8, 128), root .. '/dog/nested/c.jpg', {quality = 95})
    vio.write_png(img(4, 3, 3, 200), root .. '/cat/x.png')
    vio.write_png(img(3, 2, 2, 5), root .. '/bird/z.png')
    write(root .. '/cat/notes.txt', 'not an image')
    local ds = vision.datasets.ImageFolder(root)
    assert.are.same({'bird', 'cat', 'dog'}, ds.classes)
    assert.are.same({bird = 1, cat = 2, dog = 3}, ds.class_to_idx)
    assert.are.equal(5, ds:len())
    local names = {}
    for i, s in ipairs(ds.samples) do names[i] = s[1]:sub(#root + 2) end
    assert.are.same({'bird/z.png', 'cat/x.png', 'dog/a.PNG', 'dog/b.png', 'dog/nested/c.jpg'}, names)
    assert.are.same({1, 2, 3, 3, 3}, ds.targets)
    local x, y = ds:get(3)   -- grey PNG, read as RGB
    assert.are.same({3, 5, 4}, H.shape(x))
    assert.are.equal(flow.uint8, x.dtype)
    assert.is_true(x:eq(20):all():item())
    assert.are.equal(3, y)
    local rgba = ds:get(2)
    assert.are.same({3, 3, 3}, H.shape(rgba))
    local j = ds:get(5)
    assert.is_true((j:float() - 128):abs():max():item() <= 2)
  end)

  it_img('applies transforms and batches through the DataLoader', function()
    local tf = T.Compose{T.Resize({6, 6}), T.ToTensor(), T.Normalize({0.5, 0.5, 0.5}, {0.5, 0.5, 0.5})}
    local ds = vision.datasets.ImageFolder(root, {transform = tf, target_transform = function(t) return t * 10 end})
    local x, y = ds:get(1)
    assert.are.same({3, 6, 6}, H.shape(x))
    H.close(x[1][1][1], (5 / 255 - 0.5) / 0.5, 1e-6)
    assert.are.equal(10, y)
    local loader = flow.utils.data.DataLoader(ds, {batch_size = 5})
    local xb, yb = loader:iter()()
    assert.are.same({5, 3, 6, 6}, H.shape(xb))
    assert.are.same({10, 20, 30, 30, 30}, yb:totable())
    local only_png = vision.datasets.ImageFolder(root, {extensions = {'.png'}})
    assert.are.equal(4, only_png:len())
    local valid = vision.datasets.ImageFolder(root, {is_valid_file = function(p) return p:find('nested') ~= nil end,
                                                     allow_empty = true})
    assert.are.equal(1, valid:len())
  end)

  it_img('names corrupt files and empty classes', function()
    local r = tmpdir()
    os.execute(('mkdir -p %s/a %s/b'):format(r, r))
    write(r .. '/a/broken.png', '\137PNG\r\n\26\n' .. string.rep('x', 40))
    vio.write_png(img(3, 2, 2, 1), r .. '/b/ok.png')
    local ds = vision.datasets.ImageFolder(r)
    H.raises(function() ds:get(1) end, 'broken.png', 'corrupt PNG')
    assert.are.same({3, 2, 2}, H.shape((ds:get(2))))
    H.raises(function() ds:get(3) end, 'index 3 out of range for a dataset of size 2')
    os.execute('mkdir -p ' .. r .. '/c')
    H.raises(function() vision.datasets.ImageFolder(r) end, 'found no valid file for the classes c',
             'Supported extensions are: .jpg, .jpeg, .png')
    H.raises(function() vision.datasets.ImageFolder(r .. '/missing') end, 'cannot open directory', 'missing')
    local flat = tmpdir()
    write(flat .. '/x.png', 'x')
    H.raises(function() vision.datasets.ImageFolder(flat) end, "couldn't find any class folder")
  end)

  it('keeps MNIST and FashionMNIST registered', function()
    assert.is_function(vision.datasets.MNIST.__init)
    assert.is_function(vision.datasets.FashionMNIST.get)
  end)
end)
