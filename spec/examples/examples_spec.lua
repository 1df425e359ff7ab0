-- Every example runs from any directory and answers --help (lua-argparse)
-- with its usage; the small ones run end to end from /tmp.
local src = debug.getinfo(1, 'S').source:sub(2)
if src:sub(1, 1) ~= '/' then src = os.getenv('PWD') .. '/' .. src end
local root = src:match('^(.*)/spec/examples/[^/]*$')

local function sh(cmd)
  local p = io.popen('(' .. cmd .. ') 2>&1; echo "rc=$?"')
  local out = p:read('*a')
  p:close()
  local rc = tonumber(out:match('rc=(%d+)%s*$'))
  return out:gsub('rc=%d+%s*$', ''), rc
end

-- not scripts with a command line: a module of the distributed examples and
-- the script examples/embed/main.c runs inside its C host
local NOT_SCRIPTS = {['distributed/common.lua'] = true, ['embed/script.lua'] = true,
                     ['quantization/lenet.lua'] = true, ['quantization/common.lua'] = true}

local scripts = {}
for f in sh('cd ' .. root .. '/examples && find . -name "*.lua" | sort'):gmatch('%./(%S+%.lua)') do
  if not NOT_SCRIPTS[f] then scripts[#scripts + 1] = f end
end

describe('examples', function()
  it('are all found', function()
    assert.truthy(#scripts >= 8, table.concat(scripts, ' '))
  end)

  for _, f in ipairs(scripts) do
    it(f .. ' --help works from another directory, by plain luajit and by bin/flow', function()
      local name = f:match('([^/]+)$')
      for _, runner in ipairs({'env -u LUA_PATH luajit', root .. '/bin/flow'}) do
        local out, rc = sh(('cd /tmp && %s %s/examples/%s --help'):format(runner, root, f))
        assert.equal(0, rc, out)
        assert.truthy(out:find('^Usage: ' .. name:gsub('%p', '%%%0')), out)
        assert.truthy(out:find('-h, --help', 1, true), out)
      end
      local out, rc = sh(('cd /tmp && luajit %s/examples/%s --no-such-option 1'):format(root, f))
      assert.are_not.equal(0, rc, out)
      assert.truthy(out:find("unknown option '--no-such-option'", 1, true), out)
    end)
  end

  it('tensor_demo.lua and imagefolder.lua run from /tmp', function()
    local out, rc = sh(('cd /tmp && env -u LUA_PATH luajit %s/examples/tensor_demo.lua'):format(root))
    assert.equal(0, rc, out)
    assert.truthy(out:find('x @ x:t() =', 1, true), out)
    out, rc = sh(('cd /tmp && env -u LUA_PATH luajit %s/examples/vision/imagefolder.lua --steps 2 --per-class 2 '
                  .. '--threads 1'):format(root))
    assert.equal(0, rc, out)
    assert.truthy(out:find('step 2: loss', 1, true), out)
  end)

  it('mnist/train.lua prints progress within an epoch (log lines when not on a terminal)', function()
    local f = io.open('/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz') or
              io.open('/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte')
    if not f then pending('dataset-fashion-mnist is not installed') return end
    f:close()
    local ckpt, svg = os.tmpname(), os.tmpname() .. '.svg'
    local out, rc = sh(('cd /tmp && %s/bin/flow %s/examples/mnist/train.lua --epochs 1 --limit 128 '
                        .. '--batch-size 32 --threads 1 --out %s --plot %s'):format(root, root, ckpt, svg))
    os.remove(ckpt)
    -- the loss curve (--plot): an SVG with the curve's polyline and legend
    local g = io.open(svg)
    local text = g and g:read('*a') or ''
    if g then g:close() end
    os.remove(svg)
    assert.equal(0, rc, out)
    assert.truthy(text:find('<svg', 1, true), 'no SVG written by --plot: ' .. out)
    assert.truthy(text:find('train loss', 1, true), text:sub(1, 300))
    assert.truthy(out:find('epoch 1: step 1/4, loss', 1, true), out)
    assert.truthy(out:find('epoch 1: step 4/4, loss', 1, true), out)
    assert.truthy(out:find('(identical)', 1, true), out)
  end)

  it('mnist/train.lua --amp bf16 trains under bfloat16 autocast about as well as float32', function()
    local f = io.open('/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz') or
              io.open('/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte')
    if not f then pending('dataset-fashion-mnist is not installed') return end
    f:close()
    local function run(extra)
      local ckpt = os.tmpname()
      local out, rc = sh(('cd /tmp && %s/bin/flow %s/examples/mnist/train.lua --epochs 1 --limit 2000 '
                          .. '--threads 1 --out %s %s'):format(root, root, ckpt, extra))
      os.remove(ckpt)
      assert.equal(0, rc, out)
      assert.truthy(out:find('(identical)', 1, true), out)
      return tonumber(out:match('test accuracy ([%d.]+)%%')), out
    end
    local a32 = run('')
    local a16, out = run('--amp bf16')
    assert.truthy(out:find('bfloat16 autocast', 1, true), out)
    -- 2,000 images, one epoch: both well above chance (10%), within a few
    -- points (doc/amp.md has the full-data figures)
    assert.is_true(a32 > 50 and a16 > 50, out)
    assert.is_true(math.abs(a16 - a32) < 5, ('bf16 %.2f%% vs fp32 %.2f%%'):format(a16, a32))
    local bad, rc = sh(('%s/bin/flow %s/examples/mnist/train.lua --amp fp8'):format(root, root))
    assert.are_not.equal(0, rc)
    assert.truthy(bad:find("'--amp' must be one of 'bf16'", 1, true), bad)
  end)

  it('quantization/ptq.lua (LeNet and ResNet-18) and distill.lua run end to end on a few images', function()
    local f = io.open('/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz') or
              io.open('/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte')
    if not f then pending('dataset-fashion-mnist is not installed') return end
    f:close()
    local out, rc = sh(('cd /tmp && %s/bin/flow %s/examples/quantization/ptq.lua --limit 200 --calib-batches 2 '
                        .. '--iters 1 --threads 1 --qat --prune'):format(root, root))
    assert.equal(0, rc, out)
    for _, row in ipairs({'fp32 ', 'int8 static (PTQ)', 'int8 dynamic (Linear)', 'int8 QAT', 'fp32 pruned 50%',
                          'int8 pruned 50%'}) do
      assert.truthy(out:find(row, 1, true), out)
    end
    -- the ResNet-18 (flowvision.models.quantization) through the same steps; pruning
    -- shrinks its 8 blocks' inner channels
    out, rc = sh(('cd /tmp && %s/bin/flow %s/examples/quantization/ptq.lua --model resnet18 --limit 100 '
                  .. '--calib-batches 1 --iters 1 --threads 2 --qat --qat-bn --prune'):format(root, root))
    assert.equal(0, rc, out)
    for _, row in ipairs({'fp32 ', 'int8 static (PTQ)', 'int8 QAT', 'int8 QAT, BatchNorm kept',
                          'channels of 8 conv chains',
                          'fp32 pruned 50% (5678154 params vs 11172810)', 'int8 pruned 50%'}) do
      assert.truthy(out:find(row, 1, true), out)
    end
    -- --prune-residual: the residual streams too, a quarter of the parameters left
    out, rc = sh(('cd /tmp && %s/bin/flow %s/examples/quantization/ptq.lua --model resnet18 --limit 100 '
                  .. '--calib-batches 1 --iters 1 --threads 2 --prune --prune-residual'):format(root, root))
    assert.equal(0, rc, out)
    for _, row in ipairs({'channels of 12 conv chains and groups', 'fp32 pruned 50% (2797034 params vs 11172810)',
                          'int8 pruned 50%'}) do
      assert.truthy(out:find(row, 1, true), out)
    end
    out, rc = sh(('cd /tmp && %s/bin/flow %s/examples/quantization/ptq.lua --limit 100 --iters 1 --prune '
                  .. '--prune-residual 2>&1'):format(root, root))
    assert.is_not.equal(0, rc)
    assert.truthy(out:find('--prune-residual needs --prune and a ResNet', 1, true), out)
    -- distillation from a ResNet-18 teacher (the default) into the small LeNet
    out, rc = sh(('cd /tmp && %s/bin/flow %s/examples/quantization/distill.lua --limit 200 --threads 1')
                 :format(root, root))
    assert.equal(0, rc, out)
    assert.truthy(out:find('student, distilled', 1, true), out)
    assert.truthy(out:find('teacher (ResNet-18)', 1, true), out)
  end)
end)
