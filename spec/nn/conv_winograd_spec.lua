-- Float32 3x3 convolutions with stride 1 through Winograd's F(2x2, 3x3) and
-- F(4x4, 3x3) (core/ops/winograd.c), forced per call with OF_CONV_WINO=1
-- and =4, against the same convolution in float64 and against the path
-- they replace (OF_CONV_WINO=0): within 1e-5 of the largest output, as
-- oneDNN's kernels are held to (spec/nn/conv_dnnl_spec.lua).
local flow = require 'oneflow'
local H = require 'spec.helpers'
local F = flow.nn.functional

local function with_wino(v, fn) return H.with_env('OF_CONV_WINO', v, fn) end

-- largest difference over the largest reference value
local function rel_err(y, ref)
  local scale = math.max(ref:abs():max():item(), 1e-30)
  return (y:double() - ref):abs():max():item() / scale
end

local TILES = {'1', '4'}   -- OF_CONV_WINO: F(2x2, 3x3), F(4x4, 3x3)

describe('conv2d through Winograd F(2x2, 3x3) and F(4x4, 3x3)', function()
  it('matches float64 and the direct path: odd and even maps, paddings, bias, batch', function()
    flow.manual_seed(1)
    -- {N, C, K, H, W, padding}
    local cases = {
      {1, 1, 1, 3, 3, 0}, {1, 3, 5, 7, 7, 1}, {2, 8, 16, 9, 10, 1}, {3, 5, 4, 6, 5, 0},
      {2, 16, 24, 13, 1, 2}, {1, 4, 3, 2, 2, 1}, {2, 7, 9, 11, 12, 2}, {1, 32, 40, 17, 15, 1},
    }
    for _, c in ipairs(cases) do
      local N, C, K, Hh, W, p = unpack(c)
      local x, w, b = flow.randn(N, C, Hh, W), flow.randn(K, C, 3, 3), flow.randn(K)
      for _, bias in ipairs({b, false}) do
        local bb = bias or nil
        local ref = F.conv2d(x:double(), w:double(), bb and bb:double(), {padding = p})
        local d = with_wino('0', function() return F.conv2d(x, w, bb, {padding = p}) end)
        for _, v in ipairs(TILES) do
          local y = with_wino(v, function() return F.conv2d(x, w, bb, {padding = p}) end)
          local name = table.concat(c, ',') .. (bias and ' bias' or '') .. ' OF_CONV_WINO=' .. v
          assert.same(ref:size():totable(), y:size():totable(), name)
          assert.equals(flow.float32, y.dtype)
          assert.is_true(rel_err(y, ref) < 1e-5, name .. ': ' .. rel_err(y, ref))
          assert.is_true(rel_err(y, d:double()) < 1e-5, name)
        end
      end
    end
  end)

  it('channels-last inputs: NHWC tiles, a channels-last result, the same numbers', function()
    flow.manual_seed(7)
    local mf = flow.channels_last
    -- {N, C, K, H, W, padding}: border tiles on every side, odd maps, one column
    local cases = {
      {1, 3, 5, 7, 7, 1}, {2, 8, 16, 9, 10, 1}, {3, 5, 4, 6, 5, 0}, {2, 16, 24, 13, 1, 2},
      {1, 4, 3, 2, 2, 1}, {2, 7, 9, 11, 12, 2}, {1, 32, 40, 17, 15, 1}, {2, 64, 64, 28, 28, 1},
    }
    for _, c in ipairs(cases) do
      local N, C, K, Hh, W, p = unpack(c)
      local x = flow.randn(N, C, Hh, W):contiguous({memory_format = mf})
      local w, b = flow.randn(K, C, 3, 3), flow.randn(K)
      local ref = F.conv2d(x:double(), w:double(), b:double(), {padding = p})
      for _, v in ipairs(TILES) do
        local y = with_wino(v, function() return F.conv2d(x, w, b, {padding = p}) end)
        local name = table.concat(c, ',') .. ' OF_CONV_WINO=' .. v
        assert.is_true(y:is_contiguous({memory_format = mf}), name)
        assert.is_true(rel_err(y, ref) < 1e-5, name .. ': ' .. rel_err(y, ref))
      end
    end
    -- a kept transform is per layout: the same parameter through both
    local w = flow.randn(8, 8, 3, 3):requires_grad_()
    local x = flow.randn(2, 8, 12, 12)
    flow.no_grad(function()
      for _, v in ipairs(TILES) do
        for _ = 1, 2 do
          for _, xx in ipairs({x, x:contiguous({memory_format = mf})}) do
            local y = with_wino(v, function() return F.conv2d(xx, w, nil, {padding = 1}) end)
            local ref = F.conv2d(xx:double(), w:double(), nil, {padding = 1})
            assert.is_true(rel_err(y, ref) < 1e-5, v)
          end
        end
      end
    end)
  end)

  it('reads non-contiguous and float64-cast inputs as the direct path does', function()
    flow.manual_seed(2)
    local x = flow.randn(2, 6, 9, 8):transpose(3, 4)   -- [2, 6, 8, 9], not contiguous
    local w = flow.randn(4, 6, 3, 3)
    local ref = F.conv2d(x:double(), w:double(), nil, {padding = 1})
    for _, v in ipairs(TILES) do
      local y = with_wino(v, function() return F.conv2d(x, w, nil, {padding = 1}) end)
      assert.is_true(rel_err(y, ref) < 1e-5, v)
    end
  end)

  it('layers the routing sends there agree with float64 (ResNet-50\'s 56x56 and 14x14 layers)', function()
    flow.manual_seed(3)
    -- {N, C, H}: 64 channels on 56x56 maps (F(4x4) on AVX2), 128 on 14x14
    -- (F(2x2)), 256 on 28x28 (F(4x4), the most channels it meets there)
    for _, c in ipairs({{2, 64, 56}, {8, 128, 14}, {2, 256, 28}}) do
      local N, Ch, Hh = unpack(c)
      local x, w = flow.randn(N, Ch, Hh, Hh), flow.randn(Ch, Ch, 3, 3) * (1 / math.sqrt(9 * Ch))
      local b = flow.randn(Ch)
      local ref = F.conv2d(x:double(), w:double(), b:double(), {padding = 1})
      for _, v in ipairs({'1', '4', ''}) do   -- forced, and the CPU's own routing
        local y = with_wino(v, function() return F.conv2d(x, w, b, {padding = 1}) end)
        local e = rel_err(y, ref)
        assert.is_true(e < 1e-5, table.concat(c, ',') .. ' OF_CONV_WINO=' .. v .. ': ' .. e)
      end
    end
  end)

  it('keeps an inference weight\'s transform, and drops it when the weight changes', function()
    flow.manual_seed(6)
    local x = flow.randn(2, 8, 12, 12)
    local w = flow.randn(8, 8, 3, 3):requires_grad_()   -- a parameter's kind: kept under no_grad
    flow.no_grad(function()
      for _, v in ipairs(TILES) do
        for round = 1, 3 do
          local ref = F.conv2d(x:double(), w:double(), nil, {padding = 1})
          -- twice: the second call takes the kept transform
          for _ = 1, 2 do
            local y = with_wino(v, function() return F.conv2d(x, w, nil, {padding = 1}) end)
            assert.is_true(rel_err(y, ref) < 1e-5, v .. ' round ' .. round)
          end
          w:mul_(-1.5)   -- an in-place write: a new version, so a new transform
          if round == 2 then flow.empty_cache() end
        end
      end
      -- a view of another part of the same storage is another weight
      local big = flow.randn(2, 8, 8, 3, 3):requires_grad_()
      for i = 1, 2 do
        local wi = big[i]
        local y = with_wino('4', function() return F.conv2d(x, wi, nil, {padding = 1}) end)
        local ref = F.conv2d(x:double(), wi:double(), nil, {padding = 1})
        assert.is_true(rel_err(y, ref) < 1e-5, 'view ' .. i)
      end
    end)
  end)

  it('OF_CONV_VERBOSE names the path each forward took', function()
    local src = [[
local flow = require 'oneflow'
local F = flow.nn.functional
flow.no_grad(function()
  F.conv2d(flow.randn(2, 64, 28, 28), flow.randn(64, 64, 3, 3), nil, {padding = 1})
  F.conv2d(flow.randn(2, 64, 28, 28), flow.randn(64, 64, 1, 1))
end)
]]
    local four = H.run_lua(src, 'OF_CONV_WINO=4 OF_CONV_VERBOSE=1')
    local two = H.run_lua(src, 'OF_CONV_WINO=1 OF_CONV_VERBOSE=1')
    assert.truthy(four:find('oneflow conv: forward winograd_f4 N=2 C=64 K=64 in=28x28 out=28x28 k=3x3',
      1, true), four)
    assert.truthy(two:find('forward winograd_f2 N=2 C=64', 1, true), two)
    -- the 1x1 layer is no Winograd problem either way
    assert.truthy(four:find('forward gemm N=2 C=64 K=64 in=28x28 out=28x28 k=1x1', 1, true), four)
  end)

  it('the routing: F(4x4) on AVX2 and AVX-512, F(2x2) on AVX2 only, NHWC tiles on AVX-512', function()
    local src = [[
local flow = require 'oneflow'
local F = flow.nn.functional
io.write(flow.backends.cpu.get_cpu_capability(), '\n')
flow.no_grad(function()
  F.conv2d(flow.randn(2, 64, 56, 56), flow.randn(64, 64, 3, 3), nil, {padding = 1})
  F.conv2d(flow.randn(8, 128, 14, 14), flow.randn(128, 128, 3, 3), nil, {padding = 1})
  -- channels-last: 28x28 maps at batch 1, 14x14 from 8 samples, not 7x7
  local cl = {memory_format = flow.channels_last}
  for _, s in ipairs({{1, 28}, {8, 14}, {8, 7}}) do
    F.conv2d(flow.randn(s[1], 64, s[2], s[2]):contiguous(cl), flow.randn(64, 64, 3, 3), nil,
             {padding = 1})
  end
end)
]]
    local out = H.run_lua(src, 'OF_CONV_WINO= OF_CONV_VERBOSE=1')
    -- the capability line (stdout) and the conv lines (stderr) interleave in any order
    local isa = out:match('%f[%w](AVX512)%f[%W]') or out:match('%f[%w](AVX2)%f[%W]')
    local f4 = out:find('forward winograd_f4 N=2 C=64 K=64 in=56x56', 1, true)
    local f2 = out:find('forward winograd_f2 N=8 C=128 K=128 in=14x14', 1, true)
    local other = out:find('forward [%w_]+ N=8 C=128 K=128 in=14x14')
    assert.truthy(other, out)
    local function cl(n, h)
      return out:find(('forward winograd_f4 N=%d C=64 K=64 in=%dx%d'):format(n, h, h), 1, true)
    end
    if isa == 'AVX2' then   -- NHWC tiles measured on AVX-512 only
      assert.truthy(f4 and f2 and not cl(1, 28) and not cl(8, 14), out)
    elseif isa == 'AVX512' then
      assert.truthy(f4 and not f2 and cl(1, 28) and cl(8, 14) and not cl(8, 7), out)
    else   -- the baseline: no Winograd unless asked for
      assert.truthy(not f4 and not f2 and not cl(1, 28), out)
    end
  end)

  it('gradients through a forward computed by Winograd', function()
    flow.manual_seed(4)
    local x0, w0 = flow.randn(2, 3, 6, 7), flow.randn(4, 3, 3, 3)
    local function grads(v)
      local x, w = x0:clone():requires_grad_(), w0:clone():requires_grad_()
      with_wino(v, function() F.conv2d(x, w, nil, {padding = 1}):square():sum():backward() end)
      return x.grad, w.grad
    end
    local rx, rw = grads('0')
    for _, v in ipairs(TILES) do
      local gx, gw = grads(v)
      assert.is_true(rel_err(gx, rx:double()) < 1e-5 and rel_err(gw, rw:double()) < 1e-5, v)
    end
  end)

  it('input grads of 3x3 stride-1 layers (and conv_transpose2d) as a forward on turned weights', function()
    flow.manual_seed(8)
    -- {N, C, K, H, W, padding}: every padding a 3x3 kernel allows, odd maps
    local cases = {{2, 3, 4, 7, 6, 1}, {1, 5, 6, 9, 9, 0}, {2, 8, 8, 11, 13, 2}, {1, 16, 12, 17, 3, 1}}
    for _, c in ipairs(cases) do
      local N, C, K, Hh, W, p = unpack(c)
      for _, mf in ipairs({flow.contiguous_format, flow.channels_last}) do
        local x0 = flow.randn(N, C, Hh, W):contiguous({memory_format = mf})
        local w0 = flow.randn(K, C, 3, 3)
        local xd = x0:double():requires_grad_()
        local yd = F.conv2d(xd, w0:double(), nil, {padding = p})
        local gy = flow.randn(unpack(yd:size():totable()))
        yd:backward(gy:double())
        for _, v in ipairs(TILES) do
          local x = x0:clone():requires_grad_()
          with_wino(v, function() F.conv2d(x, w0, nil, {padding = p}):backward(gy) end)
          local name = table.concat(c, ',') .. ' ' .. tostring(mf) .. ' OF_CONV_WINO=' .. v
          assert.is_true(rel_err(x.grad, xd.grad) < 1e-5, name .. ': ' .. rel_err(x.grad, xd.grad))
        end
      end
      -- conv_transpose2d with stride 1 is the same input grad, with a bias
      local xt, wt, bt = flow.randn(N, K, Hh + 2 - 2 * p, W + 2 - 2 * p), flow.randn(K, C, 3, 3),
                         flow.randn(C)
      if xt:size(3) > 0 and xt:size(4) > 0 then
        local ref = F.conv_transpose2d(xt:double(), wt:double(), bt:double(), {padding = p})
        for _, v in ipairs(TILES) do
          local y = with_wino(v, function() return F.conv_transpose2d(xt, wt, bt, {padding = p}) end)
          assert.is_true(rel_err(y, ref) < 1e-5, 'conv_transpose2d ' .. table.concat(c, ','))
        end
      end
    end
    -- the routing: on AVX-512, 56x56 maps (64 channels) and 28x28 maps with
    -- 128 channels; not 28x28 with 64, nor another instruction set
    local out = H.run_lua([[
local flow = require 'oneflow'
local F = flow.nn.functional
io.write(flow.backends.cpu.get_cpu_capability(), '\n')
for _, s in ipairs({{2, 64, 56}, {2, 128, 28}, {2, 64, 28}}) do
  local x = flow.randn(s[1], s[2], s[3], s[3]):requires_grad_()
  F.conv2d(x, flow.randn(s[2], s[2], 3, 3), nil, {padding = 1}):sum():backward()
end
]], 'OF_CONV_WINO= OF_CONV_VERBOSE=1')
    local function ig(c, h)
      return out:find(('input_grad winograd_f4 N=2 C=%d K=%d in=%dx%d'):format(c, c, h, h), 1, true)
    end
    if out:match('%f[%w](AVX512)%f[%W]') then
      assert.truthy(ig(64, 56) and ig(128, 28) and not ig(64, 28), out)
    else
      assert.truthy(not ig(64, 56) and not ig(128, 28), out)
    end
  end)

  it('leaves other convolutions alone: strides, dilation, groups, 1x1, float64', function()
    flow.manual_seed(5)
    local x = flow.randn(1, 4, 9, 9)
    local cases = {
      {flow.randn(4, 4, 3, 3), {stride = 2, padding = 1}},
      {flow.randn(4, 4, 3, 3), {dilation = 2, padding = 2}},
      {flow.randn(4, 2, 3, 3), {groups = 2, padding = 1}},
      {flow.randn(4, 4, 1, 1), {}},
    }
    local xd, wd = x:double(), flow.randn(2, 4, 3, 3):double()
    for _, v in ipairs(TILES) do
      for i, c in ipairs(cases) do
        local a = with_wino(v, function() return F.conv2d(x, c[1], nil, c[2]) end)
        local b = with_wino('0', function() return F.conv2d(x, c[1], nil, c[2]) end)
        assert.is_true(a:eq(b):all():item(), 'case ' .. i)   -- the same kernel: the same bits
      end
      local a = with_wino(v, function() return F.conv2d(xd, wd, nil, {padding = 1}) end)
      local b = with_wino('0', function() return F.conv2d(xd, wd, nil, {padding = 1}) end)
      assert.equals(flow.float64, a.dtype)
      assert.is_true(a:eq(b):all():item())
    end
  end)
end)
