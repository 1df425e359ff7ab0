local flow = require 'oneflow'
local H = require 'spec.helpers'

-- Statistics in Lua over data_ptr (reductions live in another module).
local function values(t)
  local c = t:contiguous():to(flow.float64)
  local p, n = c:data_ptr(), c:numel()
  local res = {}
  for i = 0, n - 1 do res[i + 1] = p[i] end
  return res
end

local function stats(t)
  local c = t:contiguous():to(flow.float64)
  local p, n = c:data_ptr(), c:numel()
  local s, s2, mn, mx = 0, 0, math.huge, -math.huge
  for i = 0, n - 1 do
    local v = p[i]
    s, s2 = s + v, s2 + v * v
    if v < mn then mn = v end
    if v > mx then mx = v end
  end
  local mean = s / n
  return {mean = mean, var = s2 / n - mean * mean, min = mn, max = mx, n = n}
end

local function same(a, b)
  local x, y = values(a), values(b)
  if #x ~= #y then return false end
  for i = 1, #x do
    if x[i] ~= y[i] then return false end
  end
  return true
end

describe('random: seeding and state', function()
  it('the same seed gives the same numbers', function()
    for _, make in ipairs({
      function() return flow.rand(3, 4) end,
      function() return flow.randn({5, 7}, {dtype = flow.float64}) end,
      function() return flow.randint(-10, 10, {100}) end,
      function() return flow.randperm(50) end,
      function() return flow.bernoulli(flow.full({64}, 0.5)) end,
    }) do
      flow.manual_seed(123)
      local a = make()
      flow.manual_seed(123)
      local b = make()
      assert.is_true(same(a, b))
      assert.is_false(same(a, make()))   -- the state moved on
    end
  end)

  it('different seeds differ', function()
    flow.manual_seed(1)
    local a = flow.rand(100)
    flow.manual_seed(2)
    local b = flow.rand(100)
    assert.is_false(same(a, b))
    flow.manual_seed(1)
    assert.is_true(same(a, flow.rand(100)))
  end)

  it('initial_seed reports the seed; seed() picks a new one', function()
    flow.manual_seed(987654321)
    assert.are.equal(987654321, flow.initial_seed())
    local s = flow.seed()
    assert.are.equal('number', type(s))
    assert.are.equal(s, flow.initial_seed())
    flow.manual_seed(-1)   -- wraps to 2^64 - 1
    assert.is_true(flow.initial_seed() == 0xffffffffffffffffULL)
    H.raises(function() flow.manual_seed(1.5) end, 'manual_seed', 'integer')
  end)

  it('get_rng_state / set_rng_state replay the same numbers', function()
    flow.manual_seed(5)
    flow.rand(10)
    local state = flow.get_rng_state()
    assert.are.equal(flow.int64, state.dtype)
    assert.are.same({5, 3}, state:totable())   -- 10 float32 values: 3 blocks of 4
    local a = flow.randn(1000)
    local b = flow.randint(0, 100, {10})
    flow.set_rng_state(state)
    assert.is_true(same(a, flow.randn(1000)))
    assert.is_true(same(b, flow.randint(0, 100, {10})))
    flow.set_rng_state({seed = 5, offset = 3})
    assert.is_true(same(a, flow.randn(1000)))
    flow.set_rng_state({5, 3})
    assert.is_true(same(a, flow.randn(1000)))
    H.raises(function() flow.set_rng_state(flow.zeros(3)) end, 'set_rng_state', 'int64')
    H.raises(function() flow.set_rng_state({seed = 1}) end, 'set_rng_state', 'offset')
  end)
end)

describe('random: layout and threads', function()
  it('gives identical results for 1 and 2 threads', function()
    local threads = flow.get_num_threads()
    flow.set_num_threads(1)
    flow.manual_seed(77)
    local a = flow.rand(1000000)
    local c = flow.randn(100001, {dtype = flow.float64})
    flow.set_num_threads(2)
    flow.manual_seed(77)
    local b = flow.rand(1000000)
    local d = flow.randn(100001, {dtype = flow.float64})
    flow.set_num_threads(threads)
    assert.is_true(same(a, b))
    assert.is_true(same(c, d))
  end)

  it('gives identical results on every instruction set (the Philox words of each)', function()
    -- lengths that end in every tail of a step of 12 blocks; 1, 2 and 4
    -- elements a block (randint, randn and rand)
    local ref
    H.each_isa(function(isa)
      local got = {}
      for _, n in ipairs({1, 47, 48, 49, 100003}) do
        flow.manual_seed(5)
        flow.rand(3)   -- an offset that is not a multiple of a step
        got[#got + 1] = flow.rand(n)
        got[#got + 1] = flow.randn(n, {dtype = flow.float64})
        got[#got + 1] = flow.randint(0, 1000, {n})
        got[#got + 1] = flow.bernoulli(flow.full({n}, 0.3))
        got[#got + 1] = flow.randperm(n)
      end
      if not ref then ref = got end
      for i = 1, #got do assert.is_true(same(got[i], ref[i]), isa .. ' case ' .. i) end
    end)
  end)

  it('fills non-contiguous tensors in logical order', function()
    local base = flow.zeros(300, 200)
    local x = base:t()   -- [200, 300], not contiguous
    assert.is_false(x:is_contiguous())
    flow.manual_seed(9)
    x:uniform_()
    flow.manual_seed(9)
    assert.is_true(same(x, flow.rand(200, 300)))

    local y = flow.zeros(50, 40, {dtype = flow.int64}):narrow(2, 3, 30)
    flow.manual_seed(9)
    y:random_(0, 1000)
    flow.manual_seed(9)
    assert.is_true(same(y, flow.randint(0, 1000, {50, 30})))

    local z = flow.zeros(6, 7, 8, {dtype = flow.float64}):permute(3, 1, 2)
    flow.manual_seed(10)
    z:normal_(1, 2)
    flow.manual_seed(10)
    assert.is_true(same(z, flow.normal(1, 2, {8, 6, 7}, {dtype = flow.float64})))
  end)
end)

describe('random: distributions', function()
  it('rand is uniform on [0, 1)', function()
    flow.manual_seed(0)
    local s = stats(flow.rand(1000000))
    assert.is_true(math.abs(s.mean - 0.5) < 0.005, 'mean ' .. s.mean)
    assert.is_true(math.abs(s.var - 1 / 12) < 0.002, 'var ' .. s.var)
    assert.is_true(s.min >= 0 and s.max < 1)
  end)

  it('uniform_ honours the bounds and never reaches hi', function()
    flow.manual_seed(0)
    local s = stats(flow.empty(100000, {dtype = flow.float64}):uniform_(-3, 5))
    assert.is_true(s.min >= -3 and s.max < 5 and math.abs(s.mean - 1) < 0.05)
    -- every float32 in [1, 1.0000001) is 1; the nearest above rounds to hi
    s = stats(flow.empty(100000):uniform_(1, 1.0000001))
    assert.are.equal(1, s.min)
    assert.are.equal(1, s.max)
    for _, dt in ipairs({flow.float16, flow.bfloat16}) do
      s = stats(flow.rand(200000, {dtype = dt}))
      assert.is_true(s.max < 1 and s.min >= 0, dt.name)
      assert.is_true(math.abs(s.mean - 0.5) < 0.01, dt.name)
    end
    assert.are.same({2, 2}, flow.empty(2):uniform_(2, 2):totable())
  end)

  it('uniform_ in float32 is float(lo + u * (hi - lo)), u the value rand gives, to the bit', function()
    -- the two roundings of the double expression, no fused multiply-add
    -- (the fill's loops are compiled per instruction set)
    local ffi = require 'ffi'
    local lo, hi, n = -3.7, 11.1, 4099
    flow.manual_seed(21)
    local u = flow.rand(n):contiguous()
    flow.manual_seed(21)
    local y = flow.empty(n):uniform_(lo, hi):contiguous()
    local up, yp = ffi.cast('const float *', u:data_ptr()), ffi.cast('const float *', y:data_ptr())
    local f = ffi.new('float[1]')
    for i = 0, n - 1 do
      f[0] = lo + up[i] * (hi - lo)
      if f[0] ~= yp[i] then error(('element %d: %.9g, expected %.9g'):format(i, yp[i], f[0])) end
    end
  end)

  it('randn is standard normal; normal_ shifts and scales', function()
    flow.manual_seed(0)
    local s = stats(flow.randn(1000000))
    assert.is_true(math.abs(s.mean) < 0.01, 'mean ' .. s.mean)
    assert.is_true(math.abs(math.sqrt(s.var) - 1) < 0.01, 'std ' .. math.sqrt(s.var))
    s = stats(flow.empty(200000, {dtype = flow.float64}):normal_(3, 2))
    assert.is_true(math.abs(s.mean - 3) < 0.03 and math.abs(math.sqrt(s.var) - 2) < 0.03)
    s = stats(flow.normal(-1, 0.5, {100000}))
    assert.is_true(math.abs(s.mean + 1) < 0.02 and math.abs(math.sqrt(s.var) - 0.5) < 0.02)
    assert.are.same({0, 0, 0}, flow.empty(3):normal_(0, 0):totable())
  end)

  it('randint covers exactly [low, high)', function()
    flow.manual_seed(0)
    local counts = {}
    for _, v in ipairs(values(flow.randint(-3, 4, {70000}))) do
      counts[v] = (counts[v] or 0) + 1
    end
    for v = -3, 3 do assert.is_true((counts[v] or 0) > 9000, 'value ' .. v) end
    local n = 0
    for _ in pairs(counts) do n = n + 1 end
    assert.are.equal(7, n)
    local x = flow.randint(5, {1000})   -- randint(high, size)
    assert.are.equal(flow.int64, x.dtype)
    local s = stats(x)
    assert.is_true(s.min == 0 and s.max == 4)
    for _, dt in ipairs({flow.int32, flow.uint8, flow.int8, flow.float32, flow.float16, flow.bool}) do
      local hi = dt == flow.bool and 2 or 100
      local y = flow.randint(0, hi, {500}, {dtype = dt})
      assert.are.equal(dt, y.dtype)
      s = stats(y)
      assert.is_true(s.min == 0 and s.max == hi - 1, dt.name)
    end
  end)

  it('randperm is a permutation of 1..n', function()
    flow.manual_seed(0)
    for _, dt in ipairs({flow.int64, flow.int32, flow.float32}) do
      local p = flow.randperm(1000, {dtype = dt})
      assert.are.equal(dt, p.dtype)
      local seen = {}
      for _, v in ipairs(values(p)) do
        assert.is_true(v >= 1 and v <= 1000 and v % 1 == 0 and not seen[v])
        seen[v] = true
      end
    end
    assert.are.same({1}, flow.randperm(1):totable())
    assert.are.equal(0, flow.randperm(0):numel())
    local ordered = true
    for i, v in ipairs(flow.randperm(100):totable()) do ordered = ordered and v == i end
    assert.is_false(ordered)
  end)

  it('bernoulli draws with the given probabilities', function()
    flow.manual_seed(0)
    local p = flow.full({100000}, 0.3, {dtype = flow.float64})
    local b = flow.bernoulli(p)
    assert.are.equal(flow.float64, b.dtype)
    assert.are.same({100000}, H.shape(b))
    local s = stats(b)
    assert.is_true(math.abs(s.mean - 0.3) < 0.01 and s.min == 0 and s.max == 1)
    assert.are.same({{0, 1}, {1, 0}}, flow.tensor({{0, 1}, {1, 0}}):bernoulli():totable())
    s = stats(flow.zeros(100000):bernoulli_(0.75))
    assert.is_true(math.abs(s.mean - 0.75) < 0.01)
    -- a scalar p (integer threshold on the 53-bit draw) and a tensor of p
    -- (the double compare) take the same words to the same values
    for _, q in ipairs({0.3, 0.5, 1e-17, 1 - 1e-16, 1, 0}) do
      flow.manual_seed(7)
      local a = flow.empty(10007, {dtype = flow.float64}):bernoulli_(q)
      flow.manual_seed(7)
      local c = flow.full({10007}, q, {dtype = flow.float64}):bernoulli()
      assert.is_true(a:eq(c):all():item(), 'p = ' .. q)
    end
    s = stats(flow.zeros(50000, {dtype = flow.int32}):bernoulli(0.5))
    assert.is_true(math.abs(s.mean - 0.5) < 0.02)
    local x = flow.zeros(1000, 3):bernoulli_(flow.tensor({0, 1, 0.5}))
    local cols = x:t():contiguous()
    assert.are.equal(0, stats(cols[1]).max)
    assert.are.equal(1, stats(cols[2]).min)
    assert.is_true(math.abs(stats(cols[3]).mean - 0.5) < 0.1)
    assert.are.same({true, true}, flow.empty(2, {dtype = flow.bool}):bernoulli_(1):totable())
  end)
end)

describe('random: factories', function()
  it('accept sizes as numbers or a table, with options', function()
    assert.are.same({2, 3}, H.shape(flow.rand(2, 3)))
    assert.are.same({2, 3}, H.shape(flow.randn({2, 3})))
    assert.are.same({}, H.shape(flow.rand({})))
    assert.are.equal(flow.float64, flow.rand(2, {dtype = flow.float64}).dtype)
    assert.are.equal(flow.float16, flow.randn(2, 2, {dtype = 'float16'}).dtype)
    assert.are.equal(flow.int32, flow.randint(0, 3, 4, {dtype = flow.int32}).dtype)
    assert.are.same({0, 0}, H.shape(flow.rand(0, 0)))
  end)

  it('*_like follow the source shape and dtype', function()
    local x = flow.zeros(3, 2, {dtype = flow.float64})
    assert.are.same({3, 2}, H.shape(flow.rand_like(x)))
    assert.are.equal(flow.float64, flow.randn_like(x).dtype)
    assert.are.equal(flow.float32, flow.rand_like(x, {dtype = flow.float32}).dtype)
    local r = flow.randint_like(x, 10)
    assert.are.equal(flow.float64, r.dtype)
    local s = stats(r)
    assert.is_true(s.min >= 0 and s.max < 10)
    s = stats(flow.randint_like(x, 5, 7))
    assert.is_true(s.min >= 5 and s.max < 7)
  end)

  it('normal takes tensor mean and std', function()
    local m = flow.tensor({0, 100, 1000})
    local r = flow.normal(m, 0.001)
    H.close(r, {0, 100, 1000}, 0.01)
    r = flow.normal(m, flow.tensor({0, 0, 0}))
    H.close(r, {0, 100, 1000})
  end)

  it('random_ draws integers', function()
    local x = flow.zeros(1000):random_(3)
    local s = stats(x)
    assert.is_true(s.min == 0 and s.max == 2)
    s = stats(flow.zeros(1000, {dtype = flow.int64}):random_(-5, -2))
    assert.is_true(s.min == -5 and s.max == -3)
    s = stats(flow.zeros(1000, {dtype = flow.uint8}):random_())
    assert.is_true(s.min >= 0 and s.max <= 255 and s.max > 200)
  end)
end)

describe('random: errors', function()
  it('randint needs low < high and a dtype that holds the range', function()
    H.raises(function() flow.randint(5, 5, {2}) end, 'randint', 'lo < hi', 'lo=5', 'hi=5')
    H.raises(function() flow.randint(3, 1, {2}) end, 'randint', 'lo < hi')
    H.raises(function() flow.randint(0, 300, {2}, {dtype = flow.uint8}) end, 'randint', 'uint8')
    H.raises(function() flow.randint(0.5, 3, {2}) end, 'randint', 'low', 'integer')
    H.raises(function() flow.randint(0, 3) end, 'randint', 'size')
  end)

  it('bernoulli rejects probabilities outside [0, 1]', function()
    H.raises(function() flow.bernoulli(flow.tensor({0.2, 1.5})) end, 'bernoulli', '[0, 1]',
             '1.5', '[2]', 'float32')
    H.raises(function() flow.bernoulli(flow.tensor({-0.1})) end, 'bernoulli', '[0, 1]')
    H.raises(function() flow.bernoulli(flow.tensor({0 / 0})) end, 'bernoulli', '[0, 1]')
    H.raises(function() flow.zeros(3):bernoulli_(2) end, 'bernoulli_', '[0, 1]', '[3]')
  end)

  it('rejects negative sizes and bad dtypes', function()
    H.raises(function() flow.rand(-1, 2) end, 'rand', 'negative size', '[-1,2]')
    H.raises(function() flow.randn({3, -2}) end, 'randn', 'negative size')
    H.raises(function() flow.randint(0, 5, {-4}) end, 'randint', 'negative size')
    H.raises(function() flow.randperm(-3) end, 'randperm', '-3')
    H.raises(function() flow.rand(2, {dtype = flow.int64}) end, 'rand', 'floating', 'int64')
    H.raises(function() flow.zeros(2, {dtype = flow.int32}):uniform_() end, 'uniform_', 'int32')
    H.raises(function() flow.zeros(2, {dtype = flow.int32}):normal_() end, 'normal_', 'int32')
    H.raises(function() flow.zeros(2):normal_(0, -1) end, 'normal_', 'std')
    H.raises(function() flow.zeros(2):uniform_(1, 0) end, 'uniform_', 'lo <= hi')
    H.raises(function() flow.randperm(300, {dtype = flow.uint8}) end, 'randperm', 'uint8')
    H.raises(function() flow.zeros(3):expand(2, 3):uniform_() end, 'uniform_', 'single memory location')
  end)

  it('a failed call consumes no random numbers', function()
    flow.manual_seed(4)
    local state = flow.get_rng_state():totable()
    pcall(flow.randint, 3, 1, {5})
    pcall(flow.bernoulli, flow.tensor({2}))
    assert.are.same(state, flow.get_rng_state():totable())
  end)
end)
