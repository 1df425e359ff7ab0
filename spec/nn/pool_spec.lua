-- Pooling (lua/oneflow/ops/nn_conv.lua, core/ops/pool.c): max, average and
-- adaptive pools in 1, 2 and 3 dims against hand-computed values, 1-based
-- indices, autograd (gradcheck in float64, grads of grads) and errors.
local flow = require 'oneflow'
local F = require 'oneflow.ops.nn_conv'
local H = require 'spec.helpers'

local f64 = {dtype = flow.float64}
local x4 = flow.arange(0, 16, f64):view(1, 1, 4, 4)   -- x[r][c] = 4r + c

local function randn(shape)
  return flow.randn(shape, f64):requires_grad_(true)
end

describe('max_pool', function()
  it('takes the max of each window, stride defaulting to the kernel', function()
    local v, i = F.max_pool2d(x4, 2, {return_indices = true})
    H.close(v, {{{{5, 7}, {13, 15}}}})
    assert.same({{{{6, 8}, {14, 16}}}}, i:totable())   -- 1-based, flattened plane
    assert.equal(flow.int64, i.dtype)
    -- without return_indices: one result
    assert.equal(1, select('#', F.max_pool2d(x4, 2)))
  end)

  it('handles padding, dilation and ceil_mode', function()
    H.close(F.max_pool2d(x4, 3, {stride = 1, padding = 1}),
            {{{{5, 6, 7, 7}, {9, 10, 11, 11}, {13, 14, 15, 15}, {13, 14, 15, 15}}}})
    local v, i = F.max_pool2d(x4, 2, 1, 0, 2, false, true)   -- positional, dilation 2
    H.close(v, {{{{10, 11}, {14, 15}}}})
    assert.same({{{{11, 12}, {15, 16}}}}, i:totable())
    H.close(F.max_pool2d(x4, 3, {stride = 2}), {{{{10}}}})
    H.close(F.max_pool2d(x4, 3, {stride = 2, ceil_mode = true}), {{{{10, 11}, {14, 15}}}})
    H.close(F.max_pool2d(x4, {1, 2}, {stride = {2, 1}}), {{{{1, 2, 3}, {9, 10, 11}}}})
  end)

  it('pools 1-D and 3-D inputs, batched or not', function()
    local v, i = F.max_pool1d(flow.tensor({{{1, 3, 2, 5, 4}}}, f64), 2, {return_indices = true})
    H.close(v, {{{3, 5}}})
    assert.same({{{2, 4}}}, i:totable())
    local x = flow.arange(0, 27, f64):view(1, 1, 3, 3, 3)
    H.close(F.max_pool3d(x, 2, {stride = 1}), {{{{{13, 14}, {16, 17}}, {{22, 23}, {25, 26}}}}})
    assert.same({1, 2, 2}, H.shape(F.max_pool2d(x4:view(1, 4, 4), 2)))
    assert.same({2, 2}, H.shape(F.max_pool1d(flow.ones(2, 5), 2)))
  end)

  it('propagates NaN and keeps the first of equal values', function()
    local x = flow.tensor({{{{1, 0 / 0}, {3, 2}}}})
    local v = F.max_pool2d(x, 2)
    assert.is_true(v:item() ~= v:item())
    local _, i = F.max_pool2d(flow.full({1, 1, 2, 2}, -math.huge), 2, {return_indices = true})
    assert.equal(1, i:item())
  end)

  it('computes float32, float16 and bfloat16', function()
    for _, dt in ipairs({flow.float32, flow.float16, flow.bfloat16}) do
      local v = F.max_pool2d(x4:to(dt), 2)
      assert.equal(dt, v.dtype)
      H.close(v:double(), {{{{5, 7}, {13, 15}}}})
    end
  end)

  it('3x3 stride-2 padding-1 float32 pools (the vector path) equal the row kernel of every ISA', function()
    -- sizes below, around and past 16 outputs a row; ties, NaN, -inf windows
    for _, hw in ipairs({{1, 1}, {2, 3}, {5, 7}, {9, 33}, {34, 31}, {112, 112}}) do
      local x = (flow.randn(2, 3, hw[1], hw[2]) * 2):round()   -- many equal values
      x:view(-1):narrow(1, 1, math.min(5, x:numel())):fill_(-math.huge)
      if x:numel() > 20 then x:view(-1)[12] = 0 / 0 end
      local ref_v, ref_i
      H.each_isa(function(isa)
        local v, i = F.max_pool2d(x, 3, {stride = 2, padding = 1, return_indices = true})
        if not ref_v then ref_v, ref_i = v, i end
        local both_nan = v:isnan():logical_and(ref_v:isnan())
        assert.is_true(v:eq(ref_v):logical_or(both_nan):all():item(), isa .. ' values ' .. hw[1] .. 'x' .. hw[2])
        assert.is_true(i:eq(ref_i):all():item(), isa .. ' indices ' .. hw[1] .. 'x' .. hw[2])
      end)
    end
    -- a channels-last input and ceil_mode take other kernels; the result is the same
    local x = flow.randn(1, 4, 9, 10)
    local v1 = F.max_pool2d(x, 3, {stride = 2, padding = 1})
    local xcl = x:contiguous({memory_format = flow.channels_last})
    H.close(F.max_pool2d(xcl, 3, {stride = 2, padding = 1}), v1:totable(), 0)
    H.close(F.max_pool2d(x, 3, {stride = 2, padding = 1, ceil_mode = true}):narrow(4, 1, 5), v1:totable(), 0)
  end)

  it('sends the grad to the max of each window, summing overlaps', function()
    local x = x4:clone():requires_grad_(true)
    local y = F.max_pool2d(x, 3, {stride = 1, padding = 1})
    assert.equal('MaxPoolBackward', y.grad_fn:name())
    y:backward(flow.ones(1, 1, 4, 4, f64))
    H.close(x.grad, {{{{0, 0, 0, 0}, {0, 1, 1, 2}, {0, 1, 1, 2}, {0, 2, 2, 4}}}})
  end)
end)

describe('avg_pool', function()
  it('averages each window', function()
    H.close(F.avg_pool2d(x4, 2), {{{{2.5, 4.5}, {10.5, 12.5}}}})
    H.close(F.avg_pool2d(x4, 2, {divisor_override = 2}), {{{{5, 9}, {21, 25}}}})
  end)

  it('counts the padding or not', function()
    local y = F.avg_pool2d(x4, 3, {stride = 1, padding = 1})
    H.close(y:narrow(3, 1, 2):narrow(4, 1, 2), {{{{10 / 9, 2}, {3, 5}}}})
    y = F.avg_pool2d(x4, 3, {stride = 1, padding = 1, count_include_pad = false})
    H.close(y:narrow(3, 1, 2):narrow(4, 1, 2), {{{{2.5, 3}, {4.5, 5}}}})
    -- positional: stride, padding, ceil_mode, count_include_pad
    H.close(F.avg_pool2d(x4, 3, 1, 1, false, false), y)
  end)

  it('clips windows that run past the input in ceil_mode', function()
    H.close(F.avg_pool2d(x4, 3, {stride = 2, ceil_mode = true}), {{{{5, 6.5}, {11, 12.5}}}})
  end)

  it('pools 1-D and 3-D inputs', function()
    local x = flow.tensor({{{1, 2, 3, 4, 5, 6}}}, f64)
    H.close(F.avg_pool1d(x, 3), {{{2, 5}}})
    H.close(F.avg_pool1d(x, 3, {stride = 2, padding = 1}), {{{1, 3, 5}}})
    local x3 = flow.arange(0, 27, f64):view(1, 1, 3, 3, 3)
    H.close(F.avg_pool3d(x3, 2, {stride = 1}),
            {{{{{6.5, 7.5}, {9.5, 10.5}}, {{15.5, 16.5}, {18.5, 19.5}}}}})
  end)
end)

describe('adaptive pools', function()
  it('averages over floor/ceil windows', function()
    H.close(F.adaptive_avg_pool2d(x4, 2), {{{{2.5, 4.5}, {10.5, 12.5}}}})
    H.close(F.adaptive_avg_pool2d(x4, 3),
            {{{{2.5, 3.5, 4.5}, {6.5, 7.5, 8.5}, {10.5, 11.5, 12.5}}}})
    H.close(F.adaptive_avg_pool2d(x4, 1), {{{{7.5}}}})
    H.close(F.adaptive_avg_pool1d(flow.tensor({{{0, 1, 2, 3, 4}}}, f64), 3), {{{0.5, 2, 3.5}}})
    H.close(F.adaptive_avg_pool3d(flow.arange(0, 27, f64):view(1, 1, 3, 3, 3), 1), {{{{{13}}}}})
    assert.same({1, 5, 7}, H.shape(F.adaptive_avg_pool2d(flow.ones(1, 3, 3), {5, 7})))
  end)

  it('takes the max with indices', function()
    local v, i = F.adaptive_max_pool2d(x4, {3, 2}, {return_indices = true})
    H.close(v, {{{{5, 7}, {9, 11}, {13, 15}}}})
    assert.same({{{{6, 8}, {10, 12}, {14, 16}}}}, i:totable())
    assert.equal(1, select('#', F.adaptive_max_pool2d(x4, 2)))
  end)
end)

describe('pool autograd', function()
  local gradcheck = flow.autograd.gradcheck

  it('gradchecks max pools', function()
    flow.manual_seed(20)
    local x = randn({2, 3, 5, 6})
    assert.is_true(gradcheck(function(a) return F.max_pool2d(a, 3, {stride = 2, padding = 1}) end, {x}))
    assert.is_true(gradcheck(function(a)
      return F.max_pool2d(a, 2, {stride = 1, dilation = 2, ceil_mode = true})
    end, {x}))
    assert.is_true(gradcheck(function(a) return F.max_pool1d(a, 3, {stride = 2}) end, {randn({2, 2, 7})}))
    assert.is_true(gradcheck(function(a) return F.max_pool3d(a, 2) end, {randn({1, 2, 4, 4, 3})}))
    assert.is_true(gradcheck(function(a) return F.adaptive_max_pool2d(a, {3, 4}) end, {x}))
  end)

  it('gradchecks average pools', function()
    flow.manual_seed(21)
    local x = randn({2, 3, 5, 6})
    assert.is_true(gradcheck(function(a)
      return F.avg_pool2d(a, 3, {stride = 2, padding = 1, ceil_mode = true})
    end, {x}))
    assert.is_true(gradcheck(function(a)
      return F.avg_pool2d(a, 3, {stride = 2, padding = 1, count_include_pad = false})
    end, {x}))
    assert.is_true(gradcheck(function(a) return F.avg_pool2d(a, 2, {divisor_override = 3}) end, {x}))
    assert.is_true(gradcheck(function(a) return F.avg_pool1d(a, 2) end, {randn({2, 2, 7})}))
    assert.is_true(gradcheck(function(a) return F.avg_pool3d(a, 2, {stride = 1}) end, {randn({1, 2, 3, 3, 3})}))
    assert.is_true(gradcheck(function(a) return F.adaptive_avg_pool2d(a, {3, 4}) end, {x}))
  end)

  it('differentiates twice (grads of grads)', function()
    flow.manual_seed(22)
    local x = randn({2, 2, 5, 5})
    local pools = {
      function(a) return F.max_pool2d(a, 2, {stride = 1}) end,
      function(a) return F.avg_pool2d(a, 3, {stride = 2, padding = 1}) end,
      function(a) return F.adaptive_avg_pool2d(a, 3) end,
      function(a) return F.adaptive_max_pool2d(a, 2) end,
    }
    for _, pool in ipairs(pools) do
      assert.is_true(gradcheck(function(a)
        return flow.enable_grad(function()
          local y = pool(a)
          return flow.autograd.grad({y}, {a}, {y * y}, {create_graph = true})[1]
        end)
      end, {x}))
    end
  end)
end)

describe('pool errors', function()
  it('names the op and the shapes', function()
    H.raises(function() F.max_pool2d(flow.ones(1, 1, 2, 2), 3) end,
             'max_pool2d: output size [0,0] is too small (input [1,1,2,2], kernel [3,3]')
    H.raises(function() F.max_pool2d(flow.ones(1, 1, 4, 4), 2, {padding = 2}) end,
             'max_pool2d: padding [2,2] must be non-negative and at most half the kernel size [2,2]')
    H.raises(function() F.max_pool2d(flow.ones(1, 1, 4, 4), 2, {stride = 0}) end,
             'max_pool2d: stride must be positive')
    H.raises(function() F.max_pool2d(flow.ones(1, 1, 1, 4, 4), 2) end,
             'max_pool2d: expected input with 3 or 4 dims ([C, H, W] or [N, C, H, W]), got [1,1,1,4,4]')
    H.raises(function() F.avg_pool2d(flow.ones(1, 1, 4, 4, {dtype = flow.int64}), 2) end,
             'avg_pool2d: expected a floating-point input, got int64')
    H.raises(function() F.avg_pool2d(flow.ones(1, 1, 4, 4), 2, {divisor_override = 0}) end,
             'avg_pool2d: divisor_override must be a positive integer')
    H.raises(function() F.adaptive_avg_pool2d(flow.ones(1, 1, 4, 4), -1) end,
             'adaptive_avg_pool2d: output_size must be non-negative')
    H.raises(function() F.max_pool2d(flow.ones(1, 1, 4, 4), {2, 2, 2}) end,
             'max_pool2d: kernel_size must be a number or a table of 2 numbers')
    H.raises(function() F.avg_pool3d(flow.ones(4, 4, 4), 2) end,
             'avg_pool3d: expected input with 4 or 5 dims ([C, D, H, W] or [N, C, D, H, W]), got [4,4,4]')
  end)
end)
