local flow = require 'oneflow'
local H = require 'spec.helpers'

local function t(v, dt) return flow.tensor(v, {dtype = dt}) end

describe('binary ops', function()
  it('operators with numbers on either side', function()
    local x = t({{1, 2}, {3, 4}})
    H.close(x + 1, {{2, 3}, {4, 5}})
    H.close(1 + x, {{2, 3}, {4, 5}})
    H.close(10 - x, {{9, 8}, {7, 6}})
    H.close(x - 1, {{0, 1}, {2, 3}})
    H.close(x * x, {{1, 4}, {9, 16}})
    H.close(2 / x, {{2, 1}, {2 / 3, 0.5}})
    H.close(x ^ 2, {{1, 4}, {9, 16}})
    H.close(2 ^ x, {{2, 4}, {8, 16}})
    H.close(-x, {{-1, -2}, {-3, -4}})
    H.close(x % 3, {{1, 2}, {0, 1}})
  end)

  it('broadcasts like PyTorch', function()
    local a = t({{1}, {2}, {3}})          -- [3,1]
    local b = t({10, 20})                  -- [2]
    local c = a + b
    assert.are.same({3, 2}, H.shape(c))
    H.close(c, {{11, 21}, {12, 22}, {13, 23}})
    local s = flow.tensor(5)               -- 0-d
    H.close(b * s, {50, 100})
  end)

  it('method forms, alpha, in-place', function()
    local x = t({1, 2, 3})
    H.close(x:add(t({1, 1, 1}), {alpha = 2}), {3, 4, 5})
    H.close(x:sub(1, {alpha = 3}), {-2, -1, 0})
    local y = x:clone()
    assert.are.equal(y, y:add_(1))
    H.close(y, {2, 3, 4})
    y:mul_(2):sub_(t({1, 1, 1}))
    H.close(y, {3, 5, 7})
    y:div_(2)
    H.close(y, {1.5, 2.5, 3.5})
    H.close(x, {1, 2, 3})   -- the original is untouched
  end)

  it('in-place through a view writes the base tensor', function()
    local x = flow.zeros(2, 3)
    x[2]:add_(5)
    H.close(x, {{0, 0, 0}, {5, 5, 5}})
    x:t()[1]:fill_(1)
    H.close(x, {{1, 0, 0}, {1, 5, 5}})
  end)

  it('non-contiguous operands', function()
    local x = flow.arange(0, 6, {dtype = flow.float32}):view(2, 3)
    local y = x:t() + x:t()
    H.close(y, {{0, 6}, {2, 8}, {4, 10}})
    local z = x[{{}, {1, 3, 2}}]    -- columns 1 and 3
    H.close(z * 10, {{0, 20}, {30, 50}})
  end)

  it('promotes types as PyTorch', function()
    assert.are.equal(flow.float64, (t({1}, 'float32') + t({1}, 'float64')).dtype)
    assert.are.equal(flow.int64, (t({1}, 'int32') + t({1}, 'int64')).dtype)
    assert.are.equal(flow.float32, (t({1}, 'int64') + t({1}, 'float32')).dtype)
    assert.are.equal(flow.int16, (t({1}, 'uint8') + t({1}, 'int8')).dtype)
    assert.are.equal(flow.float32, (t({1}, 'float16') + t({1}, 'bfloat16')).dtype)
    -- a number joins the tensor's dtype unless it changes category
    assert.are.equal(flow.int32, (t({1}, 'int32') + 2).dtype)
    assert.are.equal(flow.float32, (t({1}, 'int32') + 2.5).dtype)
    assert.are.equal(flow.float16, (t({1}, 'float16') * 2).dtype)
    assert.are.equal(flow.int64, (t({true}, 'bool') + 2).dtype)
    -- true division of integers gives float
    local q = t({3, 4}, 'int64') / t({2, 2}, 'int64')
    assert.are.equal(flow.float32, q.dtype)
    H.close(q, {1.5, 2})
  end)

  it('integer arithmetic and division modes', function()
    local a, b = t({7, -7, 7, -7}, 'int64'), t({2, 2, -2, -2}, 'int64')
    assert.are.same({3, -4, -4, 3}, a:floor_divide(b):totable())
    assert.are.same({1, 1, -1, -1}, a:remainder(b):totable())
    assert.are.same({1, -1, 1, -1}, a:fmod(b):totable())
    assert.are.same({3, -3, -3, 3}, a:div(b, {rounding_mode = 'trunc'}):totable())
    assert.are.same({3, -4, -4, 3}, a:div(b, {rounding_mode = 'floor'}):totable())
    assert.are.same({49, 49, 49, 49}, (a * a):totable())
    assert.are.same({8, 1, 0}, t({2, 1, 0}, 'int64'):pow(3):totable())
    H.close(t({7, -7}):fmod(2), {1, -1})
    H.close(t({7, -7}):remainder(2), {1, 1})
  end)

  it('integer division by zero is an error, float division gives inf', function()
    H.raises(function() return t({1}, 'int64'):floor_divide(0) end, 'floor_divide', 'division by zero', 'int64')
    H.raises(function() return t({1}, 'int32') % t({0}, 'int32') end, 'remainder', 'division by zero')
    assert.are.equal(math.huge, (t({1}) / 0):item())
    H.raises(function() return t({2}, 'int64'):pow(-1) end, 'pow', 'negative')
  end)

  it('maximum/minimum propagate NaN', function()
    local nan = 0 / 0
    local m = t({1, nan, 3}):maximum(t({2, 2, nan}))
    local v = m:totable()
    assert.are.equal(2, v[1])
    assert.is_true(v[2] ~= v[2] and v[3] ~= v[3])
    H.close(t({1, 5}):minimum(t({2, 2})), {1, 2})
  end)

  it('comparisons and logical ops give bool', function()
    local x = t({1, 2, 3})
    local lt = x:lt(2)
    assert.are.equal(flow.bool, lt.dtype)
    assert.are.same({true, false, false}, lt:totable())
    assert.are.same({false, true, false}, x:eq(t({0, 2, 0})):totable())
    assert.are.same({true, false, true}, x:ne(2):totable())
    assert.are.same({false, true, true}, x:ge(2):totable())
    assert.are.same({false, false, true}, x:gt(2):totable())
    assert.are.same({true, true, false}, x:le(2):totable())
    local a, b = t({true, true, false}), t({true, false, false})
    assert.are.same({true, false, false}, a:logical_and(b):totable())
    assert.are.same({true, true, false}, a:logical_or(b):totable())
    assert.are.same({false, true, false}, a:logical_xor(b):totable())
    assert.are.same({false, false, true}, a:logical_not():totable())
    assert.are.same({1, 2}, t({3, 6}, 'int64'):bitwise_and(t({1, 2}, 'int64')):totable())
  end)

  it('errors name op, shapes and dtypes', function()
    H.raises(function() return t({1, 2}) + t({1, 2, 3}) end, 'add', '[2]', '[3]', 'broadcast')
    H.raises(function() return t({true}) - t({true}) end, 'sub', 'bool')
    H.raises(function() return t({1.5}):bitwise_and(t({1.5})) end, 'bitwise_and', 'float32')
    H.raises(function() return t({1}) + 'x' end, 'add', 'string')
    local x = t({1, 2}, 'int64')
    H.raises(function() x:add_(0.5) end, 'add', 'float32', 'int64')
    H.raises(function() t({1, 2}):add_(t({{1, 2}, {3, 4}})) end, 'add', '[2]', '[2,2]')
  end)
end)

describe('unary ops', function()
  local v = {-2, -0.5, 0, 0.5, 2}
  local function ref(f) local r = {} for i, a in ipairs(v) do r[i] = f(a) end return r end
  local function sig(a) return 1 / (1 + math.exp(-a)) end
  local cases = {
    exp = math.exp, abs = math.abs, neg = function(a) return -a end,
    sin = math.sin, cos = math.cos, tanh = math.tanh, sigmoid = sig,
    relu = function(a) return math.max(a, 0) end,
    silu = function(a) return a * sig(a) end,
    floor = math.floor, ceil = math.ceil,
    sign = function(a) return a > 0 and 1 or (a < 0 and -1 or 0) end,
    square = function(a) return a * a end,
    atan = math.atan, sinh = math.sinh, cosh = math.cosh,
    softplus = function(a) return math.log(1 + math.exp(a)) end,
    hardsigmoid = function(a) return math.min(math.max(a + 3, 0), 6) / 6 end,
    hardswish = function(a) return a * math.min(math.max(a + 3, 0), 6) / 6 end,
    mish = function(a) return a * math.tanh(math.log(1 + math.exp(a))) end,
    gelu_tanh = function(a) return 0.5 * a * (1 + math.tanh(0.7978845608028654 * (a + 0.044715 * a ^ 3))) end,
  }
  for name, f in pairs(cases) do
    it(name .. ' matches the closed form in float32 and float64', function()
      H.close(flow.tensor(v)[name](flow.tensor(v)), ref(f), 1e-6, name)
      H.close(flow.tensor(v, {dtype = flow.float64})[name](flow.tensor(v, {dtype = flow.float64})),
              ref(f), 1e-12, name)
    end)
  end

  it('log, sqrt, rsqrt, reciprocal on positives; nan/inf outside the domain', function()
    local x = t({0.25, 1, 4})
    H.close(x:log(), {math.log(0.25), 0, math.log(4)})
    H.close(x:sqrt(), {0.5, 1, 2})
    H.close(x:rsqrt(), {2, 1, 0.5})
    H.close(x:reciprocal(), {4, 1, 0.25})
    H.close(x:log2(), {-2, 0, 2})
    local r = t({-1, 0}):log():totable()
    assert.is_true(r[1] ~= r[1])
    assert.are.equal(-math.huge, r[2])
  end)

  it('gelu (erf form) matches reference values', function()
    H.close(t({-1, 0, 1}):gelu(), {-0.15865525393145707, 0, 0.8413447460685429}, 1e-6)
    H.close(t({0.5}):erf(), {0.5204998778130465}, 1e-6)
  end)

  it('round is half to even, like torch.round', function()
    assert.are.same({0, 2, 2, -0, -2}, t({0.5, 1.5, 2.5, -0.5, -1.5}):round():totable())
  end)

  it('float ops on integer tensors give float32, others keep the dtype', function()
    local i = t({1, 4}, 'int64')
    assert.are.equal(flow.float32, i:sqrt().dtype)
    H.close(i:sqrt(), {1, 2})
    assert.are.equal(flow.int64, i:abs().dtype)
    assert.are.equal(flow.int64, (-i).dtype)
    assert.are.same({-1, -4}, (-i):totable())
    H.raises(function() return -t({true}) end, 'neg', 'bool')
  end)

  it('in-place unary', function()
    local x = t({-1, 4})
    x:abs_():sqrt_()
    H.close(x, {1, 2})
  end)

  it('isnan/isinf/isfinite', function()
    local x = t({1, 0 / 0, math.huge})
    assert.are.same({false, true, false}, x:isnan():totable())
    assert.are.same({false, false, true}, x:isinf():totable())
    assert.are.same({true, false, false}, x:isfinite():totable())
  end)

  it('half precision computes through float32', function()
    local x = t({0.5, 1, 2}, 'float16')
    local y = x:exp()
    assert.are.equal(flow.float16, y.dtype)
    H.close(y:float(), {math.exp(0.5), math.exp(1), math.exp(2)}, 1e-3)
    assert.are.equal(flow.bfloat16, t({1}, 'bfloat16'):tanh().dtype)
  end)
end)

describe('clamp, where, masked_fill', function()
  it('clamp with either bound', function()
    local x = t({-2, 0, 2})
    H.close(x:clamp(-1, 1), {-1, 0, 1})
    H.close(x:clamp(0), {0, 0, 2})
    H.close(x:clamp(nil, 0), {-2, 0, 0})
    H.close(x:clamp{min = -1}, {-1, 0, 2})
    local y = x:clone()
    y:clamp_(-1, 1)
    H.close(y, {-1, 0, 1})
    assert.are.same({0, 1, 1}, t({-3, 1, 5}, 'int64'):clamp(0, 1):totable())
    -- min above max: everything is max, as torch's min(max(x, min), max)
    H.close(x:clamp(2, 1), {1, 1, 1})
    H.close(t({-2, 0, 2}, 'float64'):clamp(2, 1), {1, 1, 1})
    assert.are.same({1, 1, 1}, t({-3, 1, 5}, 'int64'):clamp(2, 1):totable())
    local n = t({0 / 0}):clamp(0, 1):item()
    assert.is_true(n ~= n)
    H.raises(function() x:clamp() end, 'clamp')
  end)

  -- float32 runs go to a vectorised loop (float bounds); the float64 loop,
  -- rounded, is the reference: same bits, NaN kept, either bound absent,
  -- a bound that float32 cannot represent, in place, strided, 1 and 2 threads
  it('float32 clamp gives the bits of the float64 loop, rounded', function()
    local saved = flow.get_num_threads()
    local n = 70001
    local vals = {}
    for i = 1, n do vals[i] = (i % 97 - 48) / 7 end
    vals[5], vals[77], vals[n] = 0 / 0, 1 / 0, -1 / 0
    vals[9], vals[10] = 0.1, -0.1
    local x = flow.tensor(vals, {dtype = flow.float32})
    local xd = x:to(flow.float64)
    local function same(a, b, what)
      local ta, tb = a:reshape(-1):to(flow.float64):totable(), b:reshape(-1):to(flow.float64):totable()
      for i = 1, #tb do
        local u, v = ta[i], tb[i]
        if not (u == v or (u ~= u and v ~= v)) then
          error(('%s: element %d: %s, reference %s'):format(what, i, tostring(u), tostring(v)))
        end
      end
    end
    for _, th in ipairs({1, 2}) do
      flow.set_num_threads(th)
      for _, b in ipairs({{0, 6}, {-0.1, 0.1}, {0.3}, {nil, -1.7}, {2, 1}}) do
        local lo, hi = b[1], b[2]
        local ref = xd:clamp(lo, hi):to(flow.float32)
        same(x:clamp(lo, hi), ref, 'clamp')
        local y = x:clone()
        y:clamp_(lo, hi)
        same(y, ref, 'clamp_')
        local m = x:narrow(1, 1, 70000):view(700, 100)
        same(m:t():clamp(lo, hi), m:to(flow.float64):t():clamp(lo, hi):to(flow.float32), 'strided')
        same(x:to(flow.bfloat16):clamp(lo, hi), x:to(flow.bfloat16):to(flow.float64):clamp(lo, hi)
          :to(flow.bfloat16), 'bfloat16')
      end
    end
    flow.set_num_threads(saved)
    local c = x:clamp(0, 6):totable()
    assert.are.same({0, 6, 0}, {c[1], c[77], c[n]})
    assert.is_true(c[5] ~= c[5])
  end)

  it('leaky_relu', function()
    H.close(t({-2, 3}):leaky_relu(0.1), {-0.2, 3})
  end)

  it('where with broadcasting and numbers', function()
    local c = t({true, false, true})
    H.close(flow.where(c, t({1, 2, 3}), t({10, 20, 30})), {1, 20, 3})
    H.close(flow.where(c, t({1, 2, 3}), 0), {1, 0, 3})
    H.close(flow.where(t({{true}, {false}}), t({1, 2}), t({5})), {{1, 2}, {5, 5}})
    assert.are.equal(flow.float64, flow.where(c, t({1, 2, 3}), t({1, 1, 1}, 'float64')).dtype)
  end)

  it('masked_fill', function()
    local x = t({{1, 2}, {3, 4}})
    local m = x:gt(2)
    H.close(x:masked_fill(m, 0), {{1, 2}, {0, 0}})
    H.close(x:masked_fill(t({true, false}), -1), {{-1, 2}, {-1, 4}})
    x:masked_fill_(m, 9)
    H.close(x, {{1, 2}, {9, 9}})
    H.raises(function() x:masked_fill(t({1, 0}), 0) end, 'masked_fill', 'bool')
    H.raises(function() x:masked_fill(t({true, false, true}), 0) end, 'masked_fill', '[3]')
  end)
end)

describe('large tensors', function()
  it('parallel elementwise gives the same result as the scalar formula', function()
    local n = 1000003
    local x = flow.arange(0, n, {dtype = flow.float64})
    local y = (x * 2 + 1):totable()
    for _, i in ipairs({1, 2, 65536, 500000, n}) do assert.are.equal(2 * (i - 1) + 1, y[i]) end
  end)
end)

describe('streamed outputs (of_stream_store)', function()
  it('binary and unary ops over outputs past the streaming threshold equal the cached path, any alignment',
     function()
    -- OF_STREAM_MIN_BYTES is read when the library loads: a child process with a
    -- 256-byte threshold streams every output of 64+ floats; the parent does not
    local script = [[
      local flow = require 'oneflow'
      flow.manual_seed(1)
      local out = {}
      for _, n in ipairs({1, 63, 64, 1000, 4099, 70001}) do
        for _, off in ipairs({0, 1, 3}) do
          -- a view starting `off` floats into its storage: unaligned output rows
          local a, b = flow.randn(n + off):narrow(1, off + 1, n), flow.randn(n)
          local d = flow.randn(n, {dtype = flow.float64})
          local prod, diff = a * b, d - d * 2
          -- unary float32 ops with vector loops (vmath.c, rowk.c)
          local ex, ge, sg, re = a:exp(), flow.nn.functional.gelu(a), a:sigmoid(), a:relu()
          a:add_(b)
          for _, t in ipairs({prod, diff, a, ex, ge, sg, re}) do
            for _, v in ipairs(t:double():totable()) do out[#out + 1] = string.format('%.17g', v) end
          end
        end
      end
      print(#out, table.concat(out, ';'))
    ]]
    local path = os.tmpname()
    local f = assert(io.open(path, 'w'))
    f:write(script)
    f:close()
    local env = "LUA_PATH='lua/?.lua;lua/?/init.lua;;' "
    local streamed = H.capture(env .. 'OF_STREAM_MIN_BYTES=256 luajit ' .. path)
    local cached = H.capture(env .. 'OF_STREAM_MIN_BYTES=0 luajit ' .. path)
    os.remove(path)
    assert.is_true(#streamed > 100, streamed)
    assert.equals(cached, streamed)
  end)
end)
