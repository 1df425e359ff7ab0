-- The integer dtypes added after the first nine: int16 (flow.short), uint16,
-- uint32, uint64. int16 is compared with Debian's PyTorch 1.13 (in CI);
-- uint16/32/64 (PyTorch 2 only, with few ops there) with PyTorch 2.x when
-- ONEFLOW_TORCH2_PYTHON or bench/.venv (sh bench/torch_venv.sh) has one,
-- and always with values computed here in Lua.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local NEW = {'int16', 'uint16', 'uint32', 'uint64'}
local BITS = {int16 = 16, uint16 = 16, uint32 = 32, uint64 = 64}

-- Lua reference: v as an element of dtype name (wrapping), for |v| < 2^53
local function wrap(v, name)
  local b = BITS[name]
  if b == 64 then return v < 0 and v + 2 ^ 64 or v end
  local m = 2 ^ b
  v = v % m
  if name == 'int16' and v >= 2 ^ 15 then v = v - m end
  return v
end

local function torch2()
  local p = os.getenv('ONEFLOW_TORCH2_PYTHON')
  if p and p ~= '' then return p end
  local here = debug.getinfo(1, 'S').source:sub(2):match('(.*)/spec/') or '.'
  local c = here .. '/bench/.venv/bin/python3'
  local check = '"' .. c .. '" -c "import torch, sys; sys.exit(int(torch.__version__[0]) < 2)"'
  if os.execute(check .. ' >/dev/null 2>&1') == 0 then
    return c
  end
end

describe('dtypes int16, uint16, uint32, uint64', function()
  it('have names, sizes, aliases and round-trip values', function()
    assert.are.equal(flow.int16, flow.short)
    for _, name in ipairs(NEW) do
      local d = flow[name]
      assert.are.equal(name, d.name)
      assert.are.equal(BITS[name] / 8, d.itemsize)
      assert.is_false(d.is_floating_point)
      local x = flow.tensor({0, 1, 7, 255}, {dtype = name})
      assert.are.equal(name, x.dtype.name)
      assert.are.same({0, 1, 7, 255}, x:totable())
      assert.are.equal(7, x[3]:item())
      assert.are.same({3, 3}, flow.full({2}, 3, {dtype = d}):totable())
      assert.are.same({0, 0}, flow.zeros(2, {dtype = d}):totable())
      assert.are.same({1, 1}, flow.ones(2, {dtype = d}):totable())
    end
  end)

  it('creation checks ranges as PyTorch (unsigned also take down to -max, wrapping)', function()
    H.raises(function() flow.tensor({32768}, {dtype = flow.int16}) end, 'tensor', '32768', 'int16', 'overflow')
    H.raises(function() flow.tensor({65536}, {dtype = flow.uint16}) end, 'uint16', 'overflow')
    H.raises(function() flow.full({1}, 2 ^ 32, {dtype = flow.uint32}) end, 'full', 'uint32')
    H.raises(function() flow.full({1}, 2 ^ 64, {dtype = flow.uint64}) end, 'full', 'uint64')
    H.raises(function() flow.tensor({0 / 0}, {dtype = flow.int16}) end, 'nan', 'int16')
    H.raises(function() flow.tensor({300}, {dtype = flow.uint8}) end, 'uint8', 'overflow')
    assert.are.same({65535}, flow.tensor({-1}, {dtype = flow.uint16}):totable())
    assert.are.same({4294967295}, flow.tensor({-1}, {dtype = flow.uint32}):totable())
    assert.are.same({-32768, 32767}, flow.tensor({-32768, 32767}, {dtype = flow.short}):totable())
    assert.are.same({2}, flow.tensor({2.7}, {dtype = flow.int16}):totable())   -- truncates
  end)

  it('prints; uint64 keeps all 64 bits', function()
    assert.are.equal('tensor([1, 2], dtype=oneflow.int16)',
                     tostring(flow.tensor({1, 2}, {dtype = flow.int16})))
    local u = flow.full({2}, -1, {dtype = flow.uint64})
    assert.are.equal('tensor([18446744073709551615, 18446744073709551615], dtype=oneflow.uint64)',
                     tostring(u))
    local big = flow.tensor({2 ^ 63, 1}, {dtype = flow.uint64})
    assert.matches('9223372036854775808,%s+1%]', tostring(big))
  end)

  it('casts to and from every other dtype', function()
    for _, name in ipairs(NEW) do
      local x = flow.tensor({0, 3, 100}, {dtype = name})
      for _, other in ipairs({'bool', 'uint8', 'int8', 'int32', 'int64', 'float16', 'bfloat16',
                              'float32', 'float64', 'int16', 'uint16', 'uint32', 'uint64'}) do
        local y = x:to(other)
        assert.are.equal(other, y.dtype.name)
        local want = other == 'bool' and {false, true, true} or {0, 3, 100}
        assert.are.same(want, y:totable())
        if other ~= 'bool' then assert.are.same({0, 3, 100}, y:to(name):totable()) end
      end
    end
    -- float -> unsigned saturates beyond the range rather than being undefined
    assert.are.same({0}, flow.tensor({0 / 0}):to(flow.uint32):totable())
    assert.are.same({65535}, flow.tensor({-1}, {dtype = flow.int64}):to(flow.uint16):totable())
    assert.are.equal('9223372036854775808',
                     tostring(flow.tensor({2 ^ 63}, {dtype = flow.float64}):to(flow.uint64)):match('%d+'))
  end)

  it('promote as PyTorch 2', function()
    local function t(name) return flow.tensor({1}, {dtype = name}) end
    assert.are.equal(flow.int16, (t('uint8') + t('int8')).dtype)
    assert.are.equal(flow.int16, (t('int16') + t('uint8')).dtype)
    assert.are.equal(flow.int32, (t('int16') + t('int32')).dtype)
    assert.are.equal(flow.float16, (t('int16') + t('float16')).dtype)
    assert.are.equal(flow.float32, (t('uint32') + t('float32')).dtype)
    assert.are.equal(flow.float64, (t('uint64') + t('float64')).dtype)
    assert.are.equal(flow.uint32, (t('uint32') + 1).dtype)
    H.raises(function() return t('uint32') + t('int64') end, 'add', 'no common dtype', 'uint32', 'int64')
    H.raises(function() return t('uint16') + t('bool') end, 'add', 'uint16', 'bool')
    H.raises(function() return flow.cat({t('uint64'), t('int32')}) end, 'cat', 'uint64')
    H.raises(function() return flow.where(t('bool'), t('uint16'), t('uint8')) end, 'where', 'uint16')
  end)

  it('elementwise arithmetic, comparison and bitwise ops wrap as C does', function()
    local av, bv = {0, 1, 5, 200, 65535}, {3, 7, 2, 9, 1}
    for _, name in ipairs(NEW) do
      local A = flow.tensor(name == 'int16' and {0, 1, 5, 200, -32768} or av, {dtype = name})
      local a = A:totable()
      local B = flow.tensor(bv, {dtype = name})
      local function ref(f)
        local r = {}
        for i = 1, #a do r[i] = f(a[i], bv[i]) end
        return r
      end
      assert.are.same(ref(function(x, y) return wrap(x + y, name) end), (A + B):totable())
      assert.are.same(ref(function(x, y) return wrap(x - y, name) end), (A - B):totable())
      assert.are.same(ref(function(x, y) return wrap(x * y, name) end), (A * B):totable())
      assert.are.same(ref(function(x, y) return x % y end), flow.remainder(A, B):totable())
      assert.are.same(ref(function(x, y) return math.floor(x / y) end), flow.floor_divide(A, B):totable())
      assert.are.same(ref(math.max), flow.maximum(A, B):totable())
      assert.are.same(ref(math.min), flow.minimum(A, B):totable())
      assert.are.same(ref(function(x, y) return x < y end), A:lt(B):totable())
      assert.are.same(ref(function(x, y) return x == y end), A:eq(B):totable())
      assert.are.same(ref(function(x, y) return wrap(bit.band(x, y), name) end),
                      flow.bitwise_and(A, B):totable())
      assert.are.same(ref(function(x, y) return wrap(bit.bor(x, y), name) end),
                      flow.bitwise_or(A, B):totable())
      assert.are.same(ref(function(x, y) return wrap(bit.bxor(x, y), name) end),
                      flow.bitwise_xor(A, B):totable())
      if name ~= 'uint64' then
        assert.are.same(ref(function(x) return wrap(bit.bnot(x), name) end), flow.bitwise_not(A):totable())
      end
      H.close(A / B, ref(function(x, y) return x / y end))
      assert.are.equal(flow.float32, (A / B).dtype)
      assert.are.same({0, 1, 3, 3, name == 'int16' and 0 or 3}, A:clamp(0, 3):totable())
      H.raises(function() flow.remainder(A, flow.zeros(5, {dtype = name})) end, 'remainder')
    end
    -- uint64 above 2^63 stays unsigned in comparisons and division
    local u = flow.full({1}, -1, {dtype = flow.uint64})
    assert.is_true(u:gt(flow.tensor({1}, {dtype = flow.uint64})):item())
    assert.are.equal('9223372036854775807',
                     tostring(flow.floor_divide(u, flow.tensor({2}, {dtype = flow.uint64}))):match('%d+'))
    H.raises(function() flow.tensor({1}, {dtype = flow.uint32}):clamp(-1, 3) end, 'clamp', 'negative')
    assert.are.equal(flow.float32, flow.tensor({1}, {dtype = flow.uint16}):exp().dtype)
  end)

  it('reductions, indexing and shape ops', function()
    for _, name in ipairs(NEW) do
      local x = flow.tensor({{3, 1, 4}, {1, 5, 9}}, {dtype = name})
      assert.are.same(23, x:sum():item())
      assert.are.equal(flow.int64, x:sum().dtype)
      assert.are.same({4, 6, 13}, x:sum(1):totable())
      assert.are.same(540, x:prod():item())
      if name ~= 'uint64' then
        assert.are.same({4, 9}, x:amax(2):totable())
        assert.are.equal(name, x:amax(2).dtype.name)
        local v, i = x:max(2)
        assert.are.same({4, 9}, v:totable())
        assert.are.same({3, 3}, i:totable())
        assert.are.same({2, 1}, x:argmin(2):totable())
      else
        H.raises(function() x:max() end, 'max', 'uint64')
        H.raises(function() x:argmax() end, 'argmax', 'uint64')
      end
      assert.are.same({{3, 1, 4, 3, 1, 4}, {1, 5, 9, 1, 5, 9}}, flow.cat({x, x}, 2):totable())
      assert.are.same({3, 1, 4, 1, 5, 9}, x:reshape(6):totable())
      assert.are.same({{3, 1}, {1, 5}, {4, 9}}, x:t():contiguous():totable())
      assert.are.same({{4, 3}, {9, 1}},
                      flow.gather(x, 2, flow.tensor({{3, 1}, {3, 1}}, {dtype = flow.int64})):totable())
      assert.are.same({5}, x[2]:index_select(1, flow.tensor({2}, {dtype = flow.int64})):totable())
      assert.are.same({1, 3, 4}, x[1]:sort():totable())
      local m = flow.where(x:gt(flow.full({}, 2, {dtype = name})), x, flow.zeros_like(x))
      assert.are.same({{3, 0, 4}, {0, 5, 9}}, m:totable())
      assert.are.equal(name, m.dtype.name)
    end
  end)

  it('matmul, random fills and the legacy names', function()
    for _, name in ipairs(NEW) do
      local a = flow.tensor({{1, 2}, {3, 4}}, {dtype = name})
      local b = flow.tensor({{5, 6}, {7, 8}}, {dtype = name})
      local c = a:matmul(b)
      assert.are.equal(name, c.dtype.name)
      assert.are.same({{19, 22}, {43, 50}}, c:totable())
      assert.are.same({{19, 43}, {22, 50}}, flow.matmul(b:t(), a:t()):contiguous():totable())
      local r = flow.zeros(200, {dtype = name}):random_(3, 6)
      assert.are.equal(3, r:to(flow.int64):min():item())
      assert.are.equal(5, r:to(flow.int64):max():item())
      local full = flow.zeros(4000, {dtype = name}):random_():to(flow.float64)
      assert.is_true(full:min():item() >= 0)
      if name ~= 'uint64' then   -- uint64's random_ is bounded by int64, as its arguments are
        assert.is_true(full:max():item() > (BITS[name] == 16 and 2 ^ 13 or 2 ^ 29))
      end
      H.raises(function() flow.randint(0, 2 ^ 17, {3}, {dtype = flow.int16}) end, 'randint', 'int16')
    end
    assert.are.equal(flow.int16, flow.ones(2):short().dtype)
    assert.are.equal('oneflow.ShortTensor', flow.ones(2, {dtype = flow.int16}):type())
    H.raises(function() flow.ones(2, {dtype = flow.uint32}):type() end, 'type', 'uint32')
  end)

  it('save and load as safetensors I16/U16/U32/U64', function()
    local dir = H.tmpdir()
    local tbl = {}
    for _, name in ipairs(NEW) do tbl[name] = flow.tensor({1, 2, 300}, {dtype = name}) end
    tbl.u64 = flow.full({2}, -1, {dtype = flow.uint64})
    flow.save(tbl, dir .. '/d.safetensors')
    local raw = H.read_file(dir .. '/d.safetensors')
    for _, code in ipairs({'I16', 'U16', 'U32', 'U64'}) do assert.matches('"' .. code .. '"', raw) end
    local back = flow.load(dir .. '/d.safetensors')
    for _, name in ipairs(NEW) do
      assert.are.equal(name, back[name].dtype.name)
      assert.are.same({1, 2, 300}, back[name]:totable())
    end
    assert.are.equal(tostring(tbl.u64), tostring(back.u64))
  end)

  it('agrees with PyTorch 1.13 on int16', function()
    if not H.torch_ok() then pending('/usr/bin/python3 has no torch') return end
    local a, b = {-300, -7, 0, 5, 32767, 1234}, {7, 3, 9, -4, 2, -1000}
    local A, B = flow.tensor(a, {dtype = flow.int16}), flow.tensor(b, {dtype = flow.int16})
    local rows = H.torch_rows(([[
a = torch.tensor(%s, dtype=torch.int16); b = torch.tensor(%s, dtype=torch.int16)
for r in [a + b, a * b, a - b, torch.remainder(a, b), torch.fmod(a, b), torch.floor_divide(a, b),
          a & b, a | b, a ^ b, ~a, torch.maximum(a, b), a.abs(), -a, a.sign()]:
    print(' '.join(str(int(v)) for v in r.tolist()))
print(int(a.sum()), int(a.amax()), int(a.argmin()))
]]):format(H.pylist(a), H.pylist(b)))
    local ours = {A + B, A * B, A - B, flow.remainder(A, B), flow.fmod(A, B), flow.floor_divide(A, B),
                  flow.bitwise_and(A, B), flow.bitwise_or(A, B), flow.bitwise_xor(A, B),
                  flow.bitwise_not(A), flow.maximum(A, B), A:abs(), -A, A:sign()}
    for i, t in ipairs(ours) do
      assert.are.equal(flow.int16, t.dtype)
      assert.are.same(rows[i], t:totable(), 'op ' .. i)
    end
    assert.are.same(rows[#ours + 1], {A:sum():item(), A:amax():item(), A:argmin():item() - 1})
  end)

  it('agrees with PyTorch 2 on uint16/32/64 where PyTorch has the op', function()
    local py = torch2()
    if not py then
      pending('no PyTorch 2.x (set ONEFLOW_TORCH2_PYTHON or run sh bench/torch_venv.sh)')
      return
    end
    local a, b = {0, 1, 5, 200, 65535}, {3, 7, 2, 9, 1}
    local lines = H.python_lines(([[
import torch
for dt in [torch.uint16, torch.uint32, torch.uint64]:
    a = torch.tensor(%s, dtype=dt); b = torch.tensor(%s, dtype=dt)
    for r in [a * b, a & b, a | b, a ^ b, torch.maximum(a, b), torch.minimum(a, b), a == b]:
        print(' '.join(str(int(v)) for v in r.tolist()))
    print(int(a.sum()), str(torch.promote_types(dt, torch.float16)).split('.')[1])
    print(str(a.to(torch.float32).tolist()))
]]):format(H.pylist(a), H.pylist(b)), py)
    local k = 0
    for _, name in ipairs({'uint16', 'uint32', 'uint64'}) do
      local A, B = flow.tensor(a, {dtype = name}), flow.tensor(b, {dtype = name})
      for _, t in ipairs({A * B, flow.bitwise_and(A, B), flow.bitwise_or(A, B), flow.bitwise_xor(A, B),
                          flow.maximum(A, B), flow.minimum(A, B), A:eq(B):to(flow.int64)}) do
        k = k + 1
        assert.are.same(H.numbers(lines[k]), t:totable(), name .. ' line ' .. k)
      end
      k = k + 1
      local sum, pt = lines[k]:match('(%S+) (%S+)')
      assert.are.equal(tonumber(sum), A:sum():item())
      assert.are.equal(pt, (A + flow.tensor({1}, {dtype = flow.float16})).dtype.name)
      k = k + 1
    end
  end)
end)
