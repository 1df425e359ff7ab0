local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn = flow.nn
local init = nn.init

local function stats(t)
  local d = t:double()
  return d:mean():item(), d:std():item(), d:min():item(), d:max():item()
end

describe('nn.init', function()
  it('calculate_gain follows PyTorch', function()
    assert.equals(1, init.calculate_gain('linear'))
    assert.equals(1, init.calculate_gain('conv2d'))
    assert.equals(5 / 3, init.calculate_gain('tanh'))
    assert.equals(math.sqrt(2), init.calculate_gain('relu'))
    assert.equals(3 / 4, init.calculate_gain('selu'))
    H.close(init.calculate_gain('leaky_relu', 0.2), math.sqrt(2 / 1.04), 1e-12)
    H.raises(function() init.calculate_gain('swish') end, 'unsupported nonlinearity swish')
  end)

  it('fills in place and returns the tensor, also for parameters', function()
    local w = nn.Parameter(flow.empty(3, 4))
    assert.equals(w, init.constant_(w, 0.5))
    H.close(w, {{0.5, 0.5, 0.5, 0.5}, {0.5, 0.5, 0.5, 0.5}, {0.5, 0.5, 0.5, 0.5}})
    init.zeros_(w)
    assert.equals(0, w:abs():sum():item())
    init.ones_(w)
    assert.equals(12, w:sum():item())
    init.eye_(w)
    H.close(w, {{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}})
    assert.is_true(w.requires_grad and w.is_leaf)
  end)

  it('uniform_ and normal_ have the requested statistics', function()
    local t = flow.empty(200, 200)
    local m, s, lo, hi = stats(init.uniform_(t, -2, 4))
    assert.is_true(lo >= -2 and hi <= 4 and math.abs(m - 1) < 0.05 and math.abs(s - math.sqrt(3)) < 0.03)
    m, s = stats(init.normal_(t, {mean = 3, std = 0.5}))
    assert.is_true(math.abs(m - 3) < 0.01 and math.abs(s - 0.5) < 0.01)
  end)

  it('xavier and kaiming scale with the fans', function()
    local w = flow.empty(300, 200, 3)      -- fan_in 600, fan_out 900
    local _, s, lo, hi = stats(init.xavier_uniform_(w, {gain = 2}))
    assert.is_true(s > 0)
    local bound = 2 * math.sqrt(6 / 1500)
    assert.is_true(lo >= -bound and hi <= bound and hi > 0.99 * bound)
    _, s = stats(init.xavier_normal_(w))
    assert.is_true(math.abs(s - math.sqrt(2 / 1500)) < 0.02 * math.sqrt(2 / 1500))
    _, _, lo, hi = stats(init.kaiming_uniform_(w, {a = math.sqrt(5)}))
    assert.is_true(hi <= 1 / math.sqrt(600) and lo >= -1 / math.sqrt(600) and hi > 0.99 / math.sqrt(600))
    _, s = stats(init.kaiming_normal_(w, {mode = 'fan_out', nonlinearity = 'relu'}))
    assert.is_true(math.abs(s - math.sqrt(2 / 900)) < 0.02 * math.sqrt(2 / 900))
    H.raises(function() init.xavier_uniform_(flow.empty(5)) end, 'fewer than 2 dims')
    H.raises(function() init.kaiming_uniform_(w, {mode = 'fan_avg'}) end, "mode fan_avg not supported")
  end)

  it('trunc_normal_ stays in [a, b] with the truncated normal moments', function()
    local t = flow.empty(100000, {dtype = flow.float64})
    local m, s, lo, hi = stats(init.trunc_normal_(t, {std = 1, a = -1, b = 2}))
    assert.is_true(lo >= -1 and hi <= 2)
    -- truncated N(0, 1) on [-1, 2]: mean 0.2296, std 0.7210
    assert.is_true(math.abs(m - 0.2296) < 0.01, 'mean ' .. m)
    assert.is_true(math.abs(s - 0.7210) < 0.01, 'std ' .. s)
    local xs = flow.tensor({-0.9, -0.5, 0, 0.3, 0.99}, {dtype = flow.float64})
    local inv = init._erfinv(xs)
    H.close(inv:erf(), xs:totable(), 1e-12)
  end)

  it('orthogonal_ gives orthonormal rows or columns', function()
    for _, shape in ipairs({{6, 4}, {3, 7}, {4, 2, 2}}) do
      local w = init.orthogonal_(flow.empty(shape, {dtype = flow.float64}), {gain = 2})
      local m = w:reshape(shape[1], -1)
      local r, c = m:size(1), m:size(2)
      local g = r >= c and m:t():matmul(m) or m:matmul(m:t())
      H.close(g, (flow.eye(math.min(r, c), {dtype = flow.float64}) * 4):totable(), 1e-9)
    end
  end)

  it('dirac_ and sparse_', function()
    local w = init.dirac_(flow.empty(2, 2, 3))
    H.close(w, {{{0, 1, 0}, {0, 0, 0}}, {{0, 0, 0}, {0, 1, 0}}})
    local s = init.sparse_(flow.empty(10, 4), 0.3)
    for c = 1, 4 do assert.equals(3, s:select(2, c):eq(0):sum():item()) end
  end)
end)
