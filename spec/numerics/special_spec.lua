-- flow.special against torch.special (float64, 1e-6 relative, tails
-- included): values and gradients from spec/fixtures/special_reference.json
-- (written by tools/special_reference.py with PyTorch 2.x), gradcheck,
-- float32 results, errors.
local flow = require 'oneflow'
local json = require 'oneflow.utils.json'
local H = require 'spec.helpers'
local S = flow.special

local f = assert(io.open('spec/fixtures/special_reference.json'))
local REF = json.decode(f:read('*a'))
f:close()

local function num(v)
  if v == 'inf' then return math.huge elseif v == '-inf' then return -math.huge
  elseif v == 'nan' then return 0 / 0 end
  return v
end

-- |ours - ref| <= 1e-6 |ref| (+ abs; exact match for infinities and NaN)
local function agree(name, ours, ref, abs)
  local got = ours:reshape(-1):totable()
  assert.are.equal(#ref, #got, name .. ': count')
  for i, r in ipairs(ref) do
    r = num(r)
    local o = got[i]
    local ok
    if r ~= r then ok = o ~= o
    elseif r == math.huge or r == -math.huge then ok = o == r
    else ok = math.abs(o - r) <= 1e-6 * math.abs(r) + (abs or 1e-300) end
    assert(ok, ('%s element %d: %.17g, torch %.17g'):format(name, i, o, r))
  end
end

local function t64(v) return flow.tensor(v, {dtype = flow.float64}) end

describe('flow.special', function()
  it('one-input functions match torch.special over their tails', function()
    local n = 0
    for name, c in pairs(REF.unary) do
      assert(S[name], 'flow.special.' .. name .. ' is missing')
      -- torch computes ndtr as (1 + erf(x / sqrt 2)) / 2: 0 below about -8.3,
      -- where ours (erfc in the left tail) keeps its relative accuracy
      agree(name, S[name](t64(c.x)), c.y, name == 'ndtr' and 1e-16 or nil)
      n = n + 1
    end
    local tail = t64({-20, -30})
    H.close(S.ndtr(tail):log(), S.log_ndtr(tail):totable(), 1e-12)
    assert(n >= 30, 'expected the reference to cover at least 30 functions, got ' .. n)
  end)

  it('two-input functions (zeta, gammainc, polynomials, xlogy) match torch', function()
    for name, c in pairs(REF.binary) do
      assert(S[name], 'flow.special.' .. name .. ' is missing')
      local a, b = t64(c.x):view(-1, 1), t64(c.y):view(1, -1)
      agree(name, S[name](a, b), c.z)
    end
    -- a number as either argument
    H.close(S.chebyshev_polynomial_t(t64({0.5}), 3), {-1}, 1e-15)
    H.close(S.zeta(2, t64({1})), {math.pi ^ 2 / 6}, 1e-14)
  end)

  it('polygamma, multigammaln, softmax family and round match torch', function()
    for n, c in pairs(REF.polygamma) do agree('polygamma' .. n, S.polygamma(tonumber(n), t64(c.x)), c.y) end
    local o = REF.other
    local v = t64(o.input)
    agree('softmax', S.softmax(v, 2), o.softmax)
    agree('log_softmax', S.log_softmax(v, 2), o.log_softmax)
    agree('logsumexp', S.logsumexp(v, 2), o.logsumexp)
    agree('multigammaln', S.multigammaln(t64(o.multigammaln_x), 3), o.multigammaln3)
    agree('round', S.round(t64(o.round_x)), o.round0)
    agree('round(decimals = 2)', S.round(t64(o.round_x), {decimals = 2}), o.round2)
  end)

  it('gradients match torch where PyTorch has them', function()
    for name, c in pairs(REF.grad) do
      local x = flow.tensor(c.x, {dtype = flow.float64, requires_grad = true})
      local y
      local n = name:match('^polygamma(%d)$')
      if n then y = S.polygamma(tonumber(n), x) else y = S[name](x) end
      y:sum():backward()
      agree('d ' .. name, x.grad, c.g)
    end
    for name, c in pairs(REF.grad_binary) do
      local x = flow.tensor(c.x, {dtype = flow.float64, requires_grad = true})
      S[name](t64(c.a), x):sum():backward()
      agree('d ' .. name .. '/dx', x.grad, c.g)
    end
  end)

  it('gradcheck (float64) for the kernel-backed derivatives, broadcast included', function()
    local gc = flow.autograd.gradcheck
    local function x64(v) return flow.tensor(v, {dtype = flow.float64, requires_grad = true}) end
    assert.is_true(gc(S.erfcx, {x64({-1.5, 0.2, 3})}))
    assert.is_true(gc(S.i1e, {x64({-2, 0.4, 9})}))
    assert.is_true(gc(S.log_ndtr, {x64({-8, 0.1, 2})}))
    assert.is_true(gc(function(x) return S.polygamma(2, x) end, {x64({0.7, 3})}))
    assert.is_true(gc(function(q) return S.zeta(t64({{2}, {3.5}}), q) end, {x64({0.5, 2, 4})}))
    assert.is_true(gc(function(x) return S.gammaincc(t64({1.5}), x) end, {x64({0.3, 2})}))
  end)

  it('keeps float32, promotes integers to float32, and flow.lgamma/erfinv/i0 exist', function()
    local x = flow.tensor({0.5, 2, 10})
    local y = S.i0(x)
    assert.are.equal('float32', y.dtype.name)
    H.close(y, S.i0(x:double()):float():totable(), 1e-6)
    assert.are.equal('float32', S.gammaln(flow.tensor({1, 2, 3})).dtype.name)
    H.close(flow.lgamma(t64({5})), {math.log(24)}, 1e-14)
    H.close(t64({0.5}):erfinv(), {0.47693627620446987}, 1e-14)
    H.close(t64({2}):polygamma(1), {math.pi ^ 2 / 6 - 1}, 1e-9)   -- torch's trigamma: ~1e-9
    H.close(flow.mvlgamma(t64({2.5}), 2), S.multigammaln(t64({2.5}), 2):totable(), 0)
    -- non-contiguous input
    local m = t64({{1, 2}, {3, 4}}):t()
    H.close(S.bessel_j0(m), S.bessel_j0(m:contiguous()):totable(), 0)
  end)

  it('errors: no derivative where PyTorch has none, bad polygamma n, bool input', function()
    local x = flow.tensor({1.0, 2.0}, {dtype = flow.float64, requires_grad = true})
    H.raises(function() S.bessel_j0(x) end, 'derivative for input 1 is not implemented')
    H.raises(function() S.zeta(x, t64({1, 2})) end, 'derivative for input 1 is not implemented')
    H.raises(function() S.polygamma(-1, t64({1})) end, 'n must be a non-negative integer')
    H.raises(function() S.i0(flow.tensor({true})) end, 'bool')
    H.raises(function() S.i0(3) end, 'expected a tensor')
    H.raises(function() S.multigammaln(t64({0.4}), 3) end, 'greater than')
  end)
end)
