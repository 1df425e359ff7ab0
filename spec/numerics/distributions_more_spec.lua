-- ContinuousBernoulli, Kumaraswamy, FisherSnedecor, NegativeBinomial,
-- GeneralizedPareto, VonMises, LogisticNormal, OneHotCategoricalStraightThrough
-- and the transforms StickBreaking, Softplus, Cat, Stack, Independent,
-- CumulativeDistribution, Reshape, LowerCholesky, PositiveDefinite, plus
-- biject_to / transform_to: values against spec/fixtures/distributions_reference.json
-- (torch.distributions 2.x, float64, written by tools/distributions_reference.py),
-- sample moments / KS at fixed seeds, validate_args errors.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local json = require 'oneflow.utils.json'
local D = flow.distributions

local f = assert(io.open('spec/fixtures/distributions_reference.json'))
local REF = json.decode(f:read('*a'))
f:close()

local f64 = {dtype = flow.float64}
local function t(v) return flow.tensor(v, f64) end
local function num(v)
  if v == 'inf' then return math.huge elseif v == '-inf' then return -math.huge elseif v == 'nan' then return 0 / 0 end
  return v
end
local function close(what, ours, ref, tol)
  local got = ours:reshape(-1):totable()
  assert.are.equal(#ref, #got, what .. ': count')
  for i, r in ipairs(ref) do
    r = num(r)
    local o = got[i]
    local ok = (r ~= r and o ~= o) or o == r or math.abs(o - r) <= (tol or 1e-10) * math.max(1, math.abs(r))
    assert(ok, ('%s element %d: %.17g, torch %.17g'):format(what, i, o, r))
  end
end

local function make(name, params)
  local args = {}
  for i, p in ipairs(params) do args[i] = t(p) end
  return D[name](unpack(args))
end

-- Kolmogorov-Smirnov statistic of n samples against the cdf
local function ks(d, n)
  local s = d:sample({n}):reshape(-1):sort()
  local cdf = d:cdf(s)
  local i = flow.arange(1, n + 1, f64)
  return math.max((i / n - cdf):amax():item(), (cdf - (i - 1) / n):amax():item())
end

describe('flow.distributions (torch 2.x names)', function()
  it('log_prob, mean, variance, entropy, cdf, icdf and KL match torch.distributions', function()
    for _, c in ipairs(REF.cases) do
      local d = make(c.name, c.params)
      for _, prop in ipairs({'log_prob', 'mean', 'variance', 'entropy', 'cdf', 'icdf'}) do
        if c[prop] then
          local v
          if prop == 'log_prob' or prop == 'cdf' then v = d[prop](d, t(c.value))
          elseif prop == 'icdf' then v = d:icdf(t(c.p))
          elseif prop == 'entropy' then v = d:entropy()
          else v = d[prop] end
          -- torch's VonMises uses a polynomial approximation of log I0 / I1
          -- (Abramowitz & Stegun, about 1e-8 relative); ours the exact i0e / i1e
          close(c.name .. ' ' .. prop, v, c[prop], c.name == 'VonMises' and 1e-7 or 1e-10)
        end
      end
    end
    for _, k in ipairs(REF.kl) do
      close(('kl %s || %s'):format(k.p_name, k.q_name), D.kl_divergence(make(k.p_name, k.p), make(k.q_name, k.q)), k.kl)
    end
  end)

  it('transforms: forward, inverse and log_abs_det_jacobian match torch', function()
    local build = {
      SoftplusTransform = function() return D.SoftplusTransform() end,
      StickBreakingTransform = function() return D.StickBreakingTransform() end,
      CatTransform = function() return D.CatTransform({D.ExpTransform(), D.SoftplusTransform()}, 2, {1, 2}) end,
      StackTransform = function()
        return D.StackTransform({D.ExpTransform(), D.SoftplusTransform(), D.SigmoidTransform()}, 2)
      end,
      IndependentTransform = function() return D.IndependentTransform(D.ExpTransform(), 1) end,
      CumulativeDistributionTransform = function() return D.CumulativeDistributionTransform(D.Normal(t(0.5), t(2))) end,
      ReshapeTransform = function() return D.ReshapeTransform({3}, {3, 1}) end,
    }
    for _, r in ipairs(REF.transforms) do
      local tr = build[r.name]()
      local x = t(r.x)
      local y = tr(x)
      close(r.name .. ' forward', y, r.y, 1e-12)
      close(r.name .. ' inverse', tr.inv(y), r.inv, 1e-9)
      close(r.name .. ' log_abs_det_jacobian', tr:log_abs_det_jacobian(x, y), r.ladj, 1e-10)
    end
    local m = t(REF.lower_cholesky.x)
    close('LowerCholeskyTransform', D.LowerCholeskyTransform()(m), REF.lower_cholesky.y, 1e-12)
    local pd = D.PositiveDefiniteTransform()
    close('PositiveDefiniteTransform', pd(m), REF.lower_cholesky.pd, 1e-12)
    H.close(pd:inverse(pd(m)), m:tril():totable(), 1e-10)   -- only the lower triangle is used
    assert.is_true(D.constraints.positive_definite:check(pd(m)):item())
    assert.is_true(D.constraints.lower_cholesky:check(D.LowerCholeskyTransform()(m)):item())
    H.raises(function() D.ReshapeTransform({3}, {2, 2}) end, 'different numbers of elements')
    H.raises(function() D.StackTransform({D.ExpTransform()}, 1)(t({1, 2})) end, 'there are 1 transforms')
  end)

  it('biject_to / transform_to map the reals onto each constraint', function()
    local C = D.constraints
    local x = t({{0.3, -1, 2}, {-4, 0.5, 1}})
    for _, c in ipairs({C.real, C.positive, C.nonnegative, C.greater_than(2), C.less_than(1), C.unit_interval,
                        C.interval(-1, 3), C.simplex, C.real_vector, C.independent(C.positive, 1)}) do
      for _, reg in ipairs({D.biject_to, D.transform_to}) do
        local tr = reg(c)
        local y = tr(x)
        assert(c:check(y):all():item(), c.name .. ': ' .. tr.__name .. ' left the constraint')
        if reg == D.biject_to then H.close(tr:inverse(y), x:totable(), 1e-9) end
      end
    end
    assert.are.equal('StickBreakingTransform', D.biject_to(C.simplex).__name)
    assert.are.equal('SoftmaxTransform', D.transform_to(C.simplex).__name)
    local pd = D.biject_to(C.positive_definite)(t({{0.3, 0}, {0.5, -0.2}}))
    assert.is_true(C.positive_definite:check(pd):item())
    H.raises(function() D.biject_to(C.boolean) end, 'no transform is registered for the constraint Boolean')
  end)

  it('samples: KS tests and moments at fixed seeds; rsample gradients', function()
    local n = 10000
    local crit = 1.95 / math.sqrt(n)   -- KS critical value at alpha = 0.001
    for _, d in ipairs({D.ContinuousBernoulli(t(0.2)), D.ContinuousBernoulli(t(0.5)), D.Kumaraswamy(t(2), t(3)),
                        D.GeneralizedPareto(t(1), t(2), t(0.2)), D.GeneralizedPareto(t(0), t(1), t(-0.3))}) do
      flow.manual_seed(31)
      local stat = ks(d, n)
      assert(stat < crit, ('%s: KS statistic %.4f >= %.4f'):format(d.__name, stat, crit))
    end
    flow.manual_seed(32)
    for _, d in ipairs({D.FisherSnedecor(t(6), t(12)), D.NegativeBinomial(t(5), t(0.4)),
                        D.VonMises(t(0.5), t(3))}) do
      local x = d:sample({n})
      local mean = d.__name == 'VonMises' and x:cos():mean():item() or x:mean():item()
      local want = d.__name == 'VonMises' and (1 - d.variance:item()) * math.cos(0.5) or d.mean:item()
      local se = d.__name == 'VonMises' and 0.01 or math.sqrt(d.variance:item() / n)
      assert(math.abs(mean - want) < 5 * se, ('%s sample mean %g vs %g'):format(d.__name, mean, want))
      if d.__name ~= 'VonMises' then
        assert(math.abs(x:var():item() / d.variance:item() - 1) < 0.2, d.__name .. ' variance')
      end
    end
    local vm = D.VonMises(t({0.5, 3}), t({0.01, 50})):sample({1000})
    assert.is_true(vm:ge(-math.pi):all():item() and vm:lt(math.pi):all():item())
    local ln = D.LogisticNormal(t({0.1, -0.5}), t({1, 2}))
    assert.are.same({3}, ln.event_shape:totable())
    local s = ln:rsample({50})
    H.close(s:sum(-1), flow.ones(50, f64):totable(), 1e-12)
    -- rsample gradients flow to the parameters
    local p = flow.tensor({0.3}, {dtype = flow.float64, requires_grad = true})
    D.ContinuousBernoulli(p):rsample({100}):sum():backward()
    assert.is_true(p.grad:item() > 0)
    local q = flow.tensor({0.2, 0.8}, {dtype = flow.float64, requires_grad = true})
    local oh = D.OneHotCategoricalStraightThrough(q)
    local y = oh:rsample({4})
    H.close(y:sum(-1), {1, 1, 1, 1}, 0)
    local yl = (y * t({1, 2})):sum()
    yl:backward()
    assert.is_not_nil(q.grad)
    local df = flow.tensor({6}, {dtype = flow.float64, requires_grad = true})
    D.FisherSnedecor(df, t({12})):rsample({10}):sum():backward()
    assert.is_true(df.grad:abs():item() > 0)
  end)

  it('validate_args: invalid parameters and values out of the support raise', function()
    H.raises(function() D.ContinuousBernoulli(t({1.5})) end, 'probs')
    H.raises(function() D.ContinuousBernoulli(t({0.5}), t({0})) end, 'not both')
    H.raises(function() D.ContinuousBernoulli(t({0.3})):log_prob(t({2})) end, 'support')
    H.raises(function() D.Kumaraswamy(t({-1}), t({1})) end, 'concentration1')
    H.raises(function() D.FisherSnedecor(t({1}), t({0})) end, 'df2')
    H.raises(function() D.NegativeBinomial(t({-1}), t({0.5})) end, 'total_count')
    H.raises(function() D.NegativeBinomial(t({2}), t({1})) end, 'probs')
    H.raises(function() D.NegativeBinomial(t({2}), t({0.5})):log_prob(t({1.5})) end, 'support')
    H.raises(function() D.GeneralizedPareto(t({0}), t({-1}), t({0.1})) end, 'scale')
    H.raises(function() D.GeneralizedPareto(t({0}), t({1}), t({-0.5})):log_prob(t({3})) end, 'support')
    H.raises(function() D.VonMises(t({0}), t({0})) end, 'concentration')
    H.raises(function() D.LogisticNormal(t({0}), t({-1})) end, 'scale')
    H.raises(function() D.VonMises(t({0}), t({1})):rsample() end, 'reparameterized')
  end)
end)
