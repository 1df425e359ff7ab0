-- Float32 3x3 convolutions with stride 1 through Winograd's F(2x2, 3x3)
-- (core/ops/winograd.c), forced per call with OF_CONV_WINO=1, against the
-- same convolution in float64 and against the path it replaces
-- (OF_CONV_WINO=0): within 1e-5 of the largest output, as oneDNN's kernels
-- are held to (spec/nn/conv_dnnl_spec.lua).
local flow = require 'oneflow'
local H = require 'spec.helpers'
local F = flow.nn.functional

local function with_wino(v, fn) return H.with_env('OF_CONV_WINO', v, fn) end

-- largest difference over the largest reference value
local function rel_err(y, ref)
  local scale = math.max(ref:abs():max():item(), 1e-30)
  return (y:double() - ref):abs():max():item() / scale
end

describe('conv2d through Winograd F(2x2, 3x3)', function()
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
        local y = with_wino('1', function() return F.conv2d(x, w, bb, {padding = p}) end)
        local d = with_wino('0', function() return F.conv2d(x, w, bb, {padding = p}) end)
        local name = table.concat(c, ',') .. (bias and ' bias' or '')
        assert.same(ref:size():totable(), y:size():totable(), name)
        assert.equals(flow.float32, y.dtype)
        assert.is_true(rel_err(y, ref) < 1e-5, name .. ': ' .. rel_err(y, ref))
        assert.is_true(rel_err(y, d:double()) < 1e-5, name)
      end
    end
  end)

  it('reads non-contiguous and float64-cast inputs as the direct path does', function()
    flow.manual_seed(2)
    local x = flow.randn(2, 6, 9, 8):transpose(3, 4)   -- [2, 6, 8, 9], not contiguous
    local w = flow.randn(4, 6, 3, 3)
    local ref = F.conv2d(x:double(), w:double(), nil, {padding = 1})
    local y = with_wino('1', function() return F.conv2d(x, w, nil, {padding = 1}) end)
    assert.is_true(rel_err(y, ref) < 1e-5)
  end)

  it('a layer the routing sends there (128 channels, 392 tiles) agrees with float64', function()
    flow.manual_seed(3)
    local x, w, b = flow.randn(8, 128, 14, 14), flow.randn(128, 128, 3, 3) * 0.05, flow.randn(128)
    local ref = F.conv2d(x:double(), w:double(), b:double(), {padding = 1})
    for _, v in ipairs({'1', ''}) do   -- forced, and the CPU's own routing
      local y = with_wino(v, function() return F.conv2d(x, w, b, {padding = 1}) end)
      assert.is_true(rel_err(y, ref) < 1e-5, 'OF_CONV_WINO=' .. v)
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
    local gx, gw = grads('1')
    local rx, rw = grads('0')
    assert.is_true(rel_err(gx, rx:double()) < 1e-5 and rel_err(gw, rw:double()) < 1e-5)
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
    for i, c in ipairs(cases) do
      local a = with_wino('1', function() return F.conv2d(x, c[1], nil, c[2]) end)
      local b = with_wino('0', function() return F.conv2d(x, c[1], nil, c[2]) end)
      assert.is_true(a:eq(b):all():item(), 'case ' .. i)   -- the same kernel: the same bits
    end
    local xd, wd = x:double(), flow.randn(2, 4, 3, 3):double()
    local a = with_wino('1', function() return F.conv2d(xd, wd, nil, {padding = 1}) end)
    local b = with_wino('0', function() return F.conv2d(xd, wd, nil, {padding = 1}) end)
    assert.equals(flow.float64, a.dtype)
    assert.is_true(a:eq(b):all():item())
  end)
end)
