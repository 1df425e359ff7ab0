-- Float32 unary math through the vector loops of core/ops/vmath.c (libmvec's
-- exp, log, tanh, erf, ... and the arithmetic ops on AVX2 / AVX-512) and,
-- on the baseline instruction set, libm's scalar loops: on every instruction
-- set this CPU has, each op is within a few ulp of the float64 result,
-- special values (inf, NaN, signed zeros, subnormals) come out as libm's,
-- and a value's result does not depend on the tensor's layout or length.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local f32 = flow.float32

-- |a - b| <= ulps * ulp(b) (b the float64 result rounded to float32),
-- subnormals by their absolute spacing; NaN matches NaN, inf the same inf
local function within_ulps(got, want, ulps, what)
  local a, b = got:totable(), want:float():totable()
  for i = 1, #a do
    local x, y = a[i], b[i]
    local ok = x == y or (x ~= x and y ~= y)
    if not ok and y == y and math.abs(y) ~= math.huge then
      local m, e = math.frexp(math.abs(y))
      local ulp = m == 0 and 2 ^ -149 or 2 ^ math.max(e - 24, -149)
      ok = math.abs(x - y) <= ulps * ulp
    end
    if not ok then
      error(('%s: element %d is %.9g, float64 gives %.9g'):format(what, i, x, y), 2)
    end
  end
end

local function cat(...) return flow.cat({...}) end
local function lin(a, b, n) return flow.linspace(a, b, n) end
local SPECIAL = flow.tensor({0, -0.0, math.huge, -math.huge, 0 / 0, 1e-40, -1e-40, 1, -1})

-- op, inputs over its domain (float32), allowed ulps
local CASES = {
  {'exp', cat(lin(-110, 95, 4001), SPECIAL)},
  {'expm1', cat(lin(-20, 89, 4001), lin(-1e-3, 1e-3, 101), SPECIAL)},
  {'log', cat(flow.exp(lin(-85, 85, 4001)), SPECIAL, flow.tensor({-2}))},
  {'log2', cat(flow.exp(lin(-85, 85, 4001)), SPECIAL)},
  {'log10', cat(flow.exp(lin(-85, 85, 4001)), SPECIAL)},
  {'log1p', cat(lin(-0.999, 100, 4001), lin(-1e-3, 1e-3, 101), SPECIAL, flow.tensor({-2}))},
  {'sin', cat(lin(-100, 100, 4001), SPECIAL)},
  {'cos', cat(lin(-100, 100, 4001), SPECIAL)},
  {'tan', cat(lin(-10, 10, 4001), SPECIAL)},
  {'tanh', cat(lin(-20, 20, 4001), lin(-1e-3, 1e-3, 101), SPECIAL)},
  {'sigmoid', cat(lin(-80, 80, 4001), SPECIAL)},
  {'erf', cat(lin(-6, 6, 4001), lin(-1e-3, 1e-3, 101), SPECIAL)},
  {'erfc', cat(lin(-6, 9, 4001), SPECIAL)},
  {'asin', cat(lin(-1, 1, 4001), SPECIAL, flow.tensor({1.5}))},
  {'acos', cat(lin(-1, 1, 4001), SPECIAL, flow.tensor({-1.5}))},
  {'atan', cat(lin(-1000, 1000, 4001), SPECIAL)},
  {'sinh', cat(lin(-90, 90, 4001), SPECIAL)},
  {'cosh', cat(lin(-90, 90, 4001), SPECIAL)},
  {'sqrt', cat(flow.exp(lin(-85, 85, 4001)), SPECIAL)},
  {'rsqrt', cat(flow.exp(lin(-85, 85, 4001)), SPECIAL)},
  {'reciprocal', cat(lin(-100, 100, 4000), SPECIAL)},
  {'square', cat(lin(-1e19, 1e19, 4001), SPECIAL)},
  {'neg', cat(lin(-100, 100, 4001), SPECIAL)},
  {'abs', cat(lin(-100, 100, 4001), SPECIAL)},
  {'relu', cat(lin(-100, 100, 4001), SPECIAL)},
}

describe('float32 unary math (vector loops)', function()
  it('is within 4 ulp of float64 on every instruction set, special values as libm', function()
    H.each_isa(function(isa)
      for _, c in ipairs(CASES) do
        local name, x = c[1], c[2]:to(f32)
        local got = flow[name](x)
        assert.equal(f32, got.dtype)
        within_ulps(got, flow[name](x:double()), 4, ('%s (%s)'):format(name, isa))
      end
    end)
  end)

  it("gives a value's result whatever the layout, length or thread split", function()
    H.each_isa(function(isa)
      for _, c in ipairs(CASES) do
        local name = c[1]
        local x = flow.randn(37, 41) * 3
        if name:match('^log') or name:match('sqrt$') then x = x:abs() + 0.5 end
        if name == 'asin' or name == 'acos' then x = flow.tanh(x) end
        local want = flow[name](x)
        -- a transposed (strided) input, a slice of odd length, one thread
        local t = flow[name](x:t():contiguous():t())
        assert.is_true(flow.equal(want, t), ('%s transposed (%s)'):format(name, isa))
        assert.is_true(flow.equal(want:reshape(-1)[{{3, 1000}}], flow[name](x:reshape(-1)[{{3, 1000}}])),
                       ('%s slice (%s)'):format(name, isa))
        local strided = flow[name](x:t())
        assert.is_true(flow.equal(want:t(), strided), ('%s of a strided view (%s)'):format(name, isa))
        local n = flow.get_num_threads()
        flow.set_num_threads(1)
        local one = flow[name](x)
        flow.set_num_threads(n)
        assert.is_true(flow.equal(want, one), ('%s on one thread (%s)'):format(name, isa))
        assert.same({0, 3}, flow[name](flow.randn(0, 3)):size():totable())
      end
    end)
  end)

  it('writes into an existing output and in place with the same values', function()
    local x = flow.randn(1000) * 4
    for _, name in ipairs({'exp', 'tanh', 'sigmoid', 'sqrt', 'relu'}) do
      local src = name == 'sqrt' and x:abs() or x
      local want = flow[name](src)
      local y = src:clone()
      y[name .. '_'](y)
      assert.is_true(flow.equal(want, y), name .. '_')
    end
  end)

  it('leaves float64 and bfloat16 to their own kernels within their precision', function()
    local x = flow.linspace(-5, 5, 1001)
    local d = flow.tanh(x:double())
    assert.equal(flow.float64, d.dtype)
    H.close(flow.tanh(x:to(flow.bfloat16)):double(), d, 2e-2, 'bfloat16 tanh')
    H.close(flow.exp(x:to(flow.bfloat16)):double(), flow.exp(x:double()), 2e-2, 'bfloat16 exp')
  end)
end)
