local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional

-- the same values, bit for bit
local function same(a, b) return a:eq(b):all():item() end

describe('dropout', function()
  it('zeroes about p of the values and scales the rest by 1 / (1 - p)', function()
    flow.manual_seed(3)
    local x = flow.ones(200, 100)
    local y = F.dropout(x, 0.3, true)
    local vals = y:reshape(-1):totable()
    local zeros = 0
    for _, v in ipairs(vals) do
      if v == 0 then zeros = zeros + 1
      else assert.is_true(math.abs(v - 1 / 0.7) < 1e-6) end
    end
    assert.is_true(math.abs(zeros / #vals - 0.3) < 0.02, 'zero fraction ' .. zeros / #vals)
    assert.is_true(math.abs(y:mean():item() - 1) < 0.03)
  end)

  it('is the identity in eval mode and for p = 0; p = 1 gives zeros', function()
    local x = flow.randn(4, 5)
    assert.equals(x, F.dropout(x, 0.5, false))
    assert.equals(x, F.dropout(x, {p = 0}))
    H.close(F.dropout(x, 1), flow.zeros(4, 5):totable())
    local m = nn.Dropout(0.5)
    m:eval()
    assert.equals(x, m(x))
    m:train()
    assert.is_true(m(flow.ones(100)):eq(0):any():item())
    H.raises(function() nn.Dropout(1.5) end, 'dropout probability has to be between 0 and 1, but got 1.5')
  end)

  it('passes gradients through the kept values only', function()
    local x = flow.ones(50, {requires_grad = true})
    local y = F.dropout(x, 0.5)
    y:sum():backward()
    H.close(x.grad, y:detach():totable())
  end)

  it('native_dropout: one pass, its mask is rand(shape) >= p from the same generator state', function()
    -- sizes around the 128-element vector steps and the 4096-element tasks
    for _, n in ipairs({1, 63, 129, 4096 * 3 + 17, 70001}) do
      for _, p in ipairs({0, 0.1, 0.5, 0.9}) do
        local x = flow.randn(n)
        flow.manual_seed(7)
        local u = flow.rand(n):double()
        flow.manual_seed(7)
        local y, m = flow.native_dropout(x, p, true)
        assert.equals(flow.bool, m.dtype)
        assert.is_true(m:eq(u:ge(p)):all():item(), 'mask n=' .. n .. ' p=' .. p)
        local scale = flow.tensor(1 / (1 - p)):float()
        assert.is_true(y:eq(x * m:float() * scale):all():item(), 'values n=' .. n .. ' p=' .. p)
      end
    end
    -- p = 1 drops everything, NaN and infinities included
    local y1, m1 = flow.native_dropout(flow.tensor({0 / 0, math.huge, -1, 2}):expand(100, 4):reshape(-1), 1, true)
    assert.is_true(y1:eq(0):all():item() and not m1:any():item())
    -- the generator moves on as flow.rand's fill does (4 elements a block)
    flow.manual_seed(3)
    flow.native_dropout(flow.ones(10), 0.5, true)
    local after = flow.rand(5)
    flow.manual_seed(3)
    flow.rand(10)
    assert.is_true(same(after, flow.rand(5)))
  end)

  it('native_dropout gives the same bits for every instruction set, thread count, dtype and layout', function()
    local x = flow.randn(257, 301)
    local ref_y, ref_m, ref_b
    H.each_isa(function(isa)
      for _, th in ipairs({1, 2}) do
        local before = flow.get_num_threads()
        flow.set_num_threads(th)
        flow.manual_seed(11)
        local y, m = flow.native_dropout(x, 0.3, true)
        flow.manual_seed(11)
        local yb = flow.native_dropout(x:bfloat16(), 0.3, true)
        flow.set_num_threads(before)
        if not ref_y then ref_y, ref_m, ref_b = y, m, yb end
        assert.is_true(y:eq(ref_y):all():item() and m:eq(ref_m):all():item(), isa .. ' threads ' .. th)
        assert.is_true(yb:eq(ref_b):all():item(), isa .. ' bfloat16 threads ' .. th)
      end
    end)
    -- NaN and infinities in bfloat16: kept NaN stays NaN, dropped ones give 0, on every ISA
    local special = flow.tensor({0 / 0, math.huge, -math.huge, 1.5}):expand(100, 4):reshape(-1):bfloat16()
    local ref_s
    H.each_isa(function(isa)
      flow.manual_seed(3)
      local ys, ms = flow.native_dropout(special, 0.5, true)
      local nan = ys:isnan()
      assert.is_true(nan:eq(special:isnan():logical_and(ms)):all():item(), isa .. ' NaN where kept')
      if not ref_s then ref_s = ys end
      assert.is_true(ys:eq(ref_s):logical_or(nan):all():item(), isa .. ' bfloat16 specials')
    end)
    -- float64, bfloat16 and float16 take the same draws (the scalar path)
    for _, dt in ipairs({flow.float64, flow.bfloat16, flow.float16}) do
      flow.manual_seed(11)
      local y, m = flow.native_dropout(x:to(dt), 0.3, true)
      assert.equals(dt, y.dtype)
      assert.is_true(m:eq(ref_m):all():item(), tostring(dt))
      local want = (x:to(dt):float() * m:float() * flow.tensor(1 / 0.7):float()):to(dt)
      if dt == flow.float64 then want = x:double() * m:double() * (1 / 0.7) end
      assert.is_true(y:eq(want):all():item(), tostring(dt) .. ' values')
    end
    -- a transposed input: the mask follows the logical order
    local xt = flow.randn(301, 257):t()
    flow.manual_seed(5)
    local y1, m1 = flow.native_dropout(xt, 0.4, true)
    flow.manual_seed(5)
    local y2, m2 = flow.native_dropout(xt:contiguous(), 0.4, true)
    assert.is_true(y1:eq(y2):all():item() and m1:eq(m2):all():item())
  end)

  it('native_dropout: p = 0 keeps all, p = 1 drops all, train = false copies, empty and bad input', function()
    local x = flow.randn(40, 7)
    local y, m = flow.native_dropout(x, 0, true)
    assert.is_true(same(x, y))
    assert.is_true(m:all():item())
    y, m = flow.native_dropout(x, 1, true)
    assert.is_true(y:eq(0):all():item() and not m:any():item())
    y, m = flow.native_dropout(x, 0.5, false)
    assert.is_true(same(x, y))
    assert.is_true(m:all():item())
    y:add_(1)
    assert.is_false(x:eq(y):all():item(), 'train = false returns a copy')
    y, m = flow.native_dropout(flow.empty(0, 3), 0.5, true)
    assert.same({0, 3}, H.shape(y))
    assert.same({0, 3}, H.shape(m))
    H.raises(function() flow.native_dropout(flow.ones(3, {dtype = flow.int64}), 0.5, true) end,
             'dropout', 'floating', 'int64')
    H.raises(function() flow.native_dropout(flow.ones(3), 1.5, true) end, 'dropout', 'p', '1.5')
    H.raises(function() flow.native_dropout(flow.ones(3), 0 / 0, true) end, 'dropout', 'p')
    H.raises(function() flow.native_dropout(3, 0.5, true) end, 'native_dropout', 'tensor')
  end)

  it('dropout backward is g * mask / (1 - p), in place too; gradcheck (graphs: spec/graph/graph_spec.lua)', function()
    local x = flow.randn(33, 65, {requires_grad = true})
    flow.manual_seed(9)
    local y = F.dropout(x, 0.25)
    local g = flow.randn(33, 65)
    y:backward(g)
    flow.manual_seed(9)
    local _, m = flow.native_dropout(x:detach(), 0.25, true)
    H.close(x.grad, (g * m:float() / 0.75):totable(), 1e-6)
    assert.equals('DropoutBackward', flow.native_dropout(x, 0.25, true).grad_fn:name())
    -- in place: the values of the out-of-place call
    local z = flow.randn(8, 9)
    flow.manual_seed(4)
    local want = F.dropout(z, 0.5)
    flow.manual_seed(4)
    local zi = z:clone()
    assert.equals(zi, F.dropout(zi, {p = 0.5, inplace = true}))
    assert.is_true(same(want, zi))
    -- float64 gradcheck with the mask fixed by reseeding before each call
    local x64 = flow.randn(5, 6, {dtype = flow.float64, requires_grad = true})
    assert.is_true(flow.autograd.gradcheck(function(t)
      flow.manual_seed(2)
      return F.dropout(t, 0.4)
    end, {x64}))
  end)

  it('dropout2d drops whole channels', function()
    flow.manual_seed(1)
    local y = F.dropout2d(flow.ones(4, 8, 3, 3), 0.5)
    local per_channel = y:sum({3, 4}):reshape(-1):totable()
    for _, s in ipairs(per_channel) do assert.is_true(s == 0 or math.abs(s - 18) < 1e-5) end
    assert.same({4, 8, 3, 3}, H.shape(nn.Dropout2d(0.2)(flow.ones(4, 8, 3, 3))))
    assert.same({8, 3, 3}, H.shape(F.dropout2d(flow.ones(8, 3, 3), 0.2)))
    H.raises(function() F.dropout2d(flow.ones(3, 3), 0.5) end, 'dropout2d: expected a 3D or 4D input')
  end)

  it('alpha_dropout keeps mean and variance of a standard normal input', function()
    flow.manual_seed(5)
    local x = flow.randn(100000, {dtype = flow.float64})
    local y = F.alpha_dropout(x, 0.2, true)
    assert.is_true(math.abs(y:mean():item()) < 0.02)
    assert.is_true(math.abs(y:std():item() - 1) < 0.02)
    assert.equals(x, nn.AlphaDropout(0.2):eval()(x))
  end)
end)
