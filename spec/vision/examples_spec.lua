-- Runs examples/vision/*.lua with tiny settings in a child process and checks
-- that they finish (exit status 0) and print what they promise.

-- repository root, from this file's path (spec/vision/examples_spec.lua)
local here = debug.getinfo(1, 'S').source:match('^@(.*)/spec/vision/[^/]*$')
local root = here or '.'

local function run(script, args)
  local cmd = ('cd %q && ./bin/flow examples/vision/%s %s 2>&1; echo "__exit=$?"'):format(root, script, args)
  local p = assert(io.popen(cmd))
  local out = p:read('*a')
  p:close()
  local status = tonumber(out:match('__exit=(%d+)%s*$'))
  return status, out
end

local FASHION = os.getenv('FASHION_MNIST') or '/usr/share/datasets/fashion-mnist'

local function have_fashion()
  local f = io.open(FASHION .. '/train-images-idx3-ubyte.gz', 'rb')
         or io.open(FASHION .. '/train-images-idx3-ubyte', 'rb')
  if f then f:close() return true end
  return false
end

describe('examples/vision', function()
  it('finetune.lua fine-tunes resnet18 with Mixup/CutMix for one tiny epoch', function()
    if not have_fashion() then
      pending('Fashion-MNIST not found in ' .. FASHION .. ' (apt-get install dataset-fashion-mnist)')
      return
    end
    local status, out = run('finetune.lua', ('--epochs 1 --limit 64 --batch-size 32 --data %q'):format(FASHION))
    assert.are.equal(0, status, out)
    assert.truthy(out:find('Fashion%-MNIST 32x32x3: 64 training and 64 test images'), out)
    local loss, acc = out:match('epoch 1: train loss ([%d.]+), test accuracy ([%d.]+)%%')
    assert.truthy(loss, out)
    loss, acc = tonumber(loss), tonumber(acc)
    assert.truthy(loss > 0 and loss < 10, out)           -- finite, sane soft-target CE
    assert.truthy(acc >= 0 and acc <= 100, out)
    assert.truthy(out:find('done: test accuracy [%d.]+%% on 64 images'), out)
  end)

  it('imagefolder.lua writes a tree, loads it with ImageFolder, trains and cleans up', function()
    local status, out = run('imagefolder.lua', '--steps 4 --per-class 2')
    assert.are.equal(0, status, out)
    assert.truthy(out:find('6 images, 3 classes', 1, true), out)
    assert.truthy(out:find('class_to_idx: {disk = 1, hstripes = 2, vstripes = 3}', 1, true), out)
    assert.truthy(out:find('step 4: loss [%d.]+'), out)
    assert.truthy(out:find('done: loss [%d.]+ %-> [%d.]+, training%-set accuracy %d+/6'), out)
    local dir = out:match('removed (%S+)')
    assert.truthy(dir, out)
    assert.is_nil(io.open(dir .. '/disk', 'r'), 'temporary tree left behind: ' .. dir)
  end)
end)
