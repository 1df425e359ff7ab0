-- flow.distributions: log_prob / entropy / cdf / icdf / moments / KL against
-- torch.distributions (float64, when /usr/bin/python3 imports torch), sample
-- moments and a Kolmogorov-Smirnov test with a fixed seed, expand,
-- validate_args errors.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local D = flow.distributions

local f64 = {dtype = flow.float64}
local function t(v) return flow.tensor(v, f64) end

-- name, Lua constructor, Python constructor, values for log_prob/cdf, has cdf/icdf
local V = {0.3, 1.2, 2.5}
local cases = {
  {'Normal', function() return D.Normal(t({0.1, -1, 2}), t({1, 0.5, 3})) end,
   'D.Normal(T([0.1, -1, 2]), T([1, 0.5, 3]))', V, true},
  {'Uniform', function() return D.Uniform(t({0, 0.2, -1}), t({1, 1.5, 3})) end,
   'D.Uniform(T([0, 0.2, -1]), T([1, 1.5, 3]))', {0.3, 1.2, 2.5}, true},
  {'Exponential', function() return D.Exponential(t({0.5, 1, 3})) end, 'D.Exponential(T([0.5, 1, 3]))', V, true},
  {'Laplace', function() return D.Laplace(t({0, 1, -2}), t({1, 2, 0.5})) end,
   'D.Laplace(T([0, 1, -2]), T([1, 2, 0.5]))', V, true},
  {'Cauchy', function() return D.Cauchy(t({0, 1, -2}), t({1, 2, 0.5})) end,
   'D.Cauchy(T([0, 1, -2]), T([1, 2, 0.5]))', V, true, true},   -- torch's Cauchy mean: nan, variance: inf
  {'Gumbel', function() return D.Gumbel(t({0, 1, -2}), t({1, 2, 0.5})) end,
   'D.Gumbel(T([0, 1, -2]), T([1, 2, 0.5]))', V, true},
  {'LogNormal', function() return D.LogNormal(t({0, 0.5, -1}), t({1, 0.3, 2})) end,
   'D.LogNormal(T([0, 0.5, -1]), T([1, 0.3, 2]))', V, true},
  {'HalfNormal', function() return D.HalfNormal(t({1, 0.3, 2})) end, 'D.HalfNormal(T([1, 0.3, 2]))', V, true},
  {'Bernoulli', function() return D.Bernoulli(t({0.2, 0.5, 0.9})) end, 'D.Bernoulli(T([0.2, 0.5, 0.9]))', {1, 0, 1}},
  {'Bernoulli(logits)', function() return D.Bernoulli(nil, t({-2, 0.3, 4})) end,
   'D.Bernoulli(logits=T([-2, 0.3, 4]))', {0, 1, 1}},
  {'Geometric', function() return D.Geometric(t({0.2, 0.5, 0.9})) end, 'D.Geometric(T([0.2, 0.5, 0.9]))', {0, 3, 1}},
  {'HalfCauchy', function() return D.HalfCauchy(t({1, 0.3, 2})) end, 'D.HalfCauchy(T([1, 0.3, 2]))', V, true, true},
  {'Weibull', function() return D.Weibull(t({1, 2, 0.5}), t({0.7, 1.5, 3})) end,
   'D.Weibull(T([1, 2, 0.5]), T([0.7, 1.5, 3]))', V, true},
  {'Pareto', function() return D.Pareto(t({0.2, 1, 0.1}), t({0.8, 2.5, 4})) end,
   'D.Pareto(T([0.2, 1, 0.1]), T([0.8, 2.5, 4]))', V, true},
  {'Gamma', function() return D.Gamma(t({0.5, 2, 9}), t({1, 2, 0.5})) end,
   'D.Gamma(T([0.5, 2, 9]), T([1, 2, 0.5]))', V},
  {'Chi2', function() return D.Chi2(t({1, 3, 10})) end, 'D.Chi2(T([1, 3, 10]))', V},
  {'Beta', function() return D.Beta(t({0.5, 2, 5}), t({3, 2, 0.7})) end,
   'D.Beta(T([0.5, 2, 5]), T([3, 2, 0.7]))', {0.3, 0.5, 0.9}},
  {'StudentT', function() return D.StudentT(t({3, 5, 30}), t({0, 1, -1}), t({1, 2, 0.5})) end,
   'D.StudentT(T([3, 5, 30]), T([0, 1, -1]), T([1, 2, 0.5]))', V},
}

local function rows_of(d, c)
  local v = t(c[4])
  local r = {d:log_prob(v), d:entropy()}
  if not c[6] then r[#r + 1] = d.mean; r[#r + 1] = d.variance end
  if c[5] then r[#r + 1] = d:cdf(v); r[#r + 1] = d:icdf(t({0.1, 0.5, 0.9})) end
  return r
end

local function py_script()
  local lines = {'import torch.distributions as D', 'T = lambda v: torch.tensor(v, dtype=torch.float64)',
                 'def out(x): print(" ".join(repr(v) for v in x.reshape(-1).tolist()))'}
  for _, c in ipairs(cases) do
    lines[#lines + 1] = 'd = ' .. c[3]
    lines[#lines + 1] = ('v = T(%s)'):format(H.pylist(c[4]))
    lines[#lines + 1] = 'out(d.log_prob(v)); out(d.entropy())'
    if not c[6] then lines[#lines + 1] = 'out(d.mean); out(d.variance)' end
    if c[5] then lines[#lines + 1] = 'out(d.cdf(v)); out(d.icdf(T([0.1, 0.5, 0.9])))' end
  end
  -- Categorical: values 0-based in torch, 1-based here
  lines[#lines + 1] = 'c = D.Categorical(T([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]]))'
  lines[#lines + 1] = 'out(c.log_prob(torch.tensor([2, 0]))); out(c.entropy())'
  lines[#lines + 1] = 'c = D.Poisson(T([0.5, 4, 30]))'
  lines[#lines + 1] = 'out(c.log_prob(T([0, 3, 28]))); out(c.mean)'
  lines[#lines + 1] = 'c = D.Binomial(T([10, 3, 7]), T([0.3, 0.9, 0.5]))'
  lines[#lines + 1] = 'out(c.log_prob(T([2, 3, 0]))); out(c.mean); out(c.variance)'
  lines[#lines + 1] = 'c = D.Multinomial(10, T([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]]))'
  lines[#lines + 1] = 'out(c.log_prob(T([[2, 3, 5], [10, 0, 0]]))); out(c.mean); out(c.variance)'
  lines[#lines + 1] = 'c = D.MultivariateNormal(T([1, -1]), T([[2, 0.5], [0.5, 1]]))'
  lines[#lines + 1] = 'out(c.log_prob(T([[0, 0], [1, 2]]))); out(c.entropy()); out(c.variance)'
  lines[#lines + 1] = 'c = D.Dirichlet(T([[1, 2, 3], [0.5, 0.5, 4]]))'
  lines[#lines + 1] = 'out(c.log_prob(T([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]]))); out(c.entropy())'
  lines[#lines + 1] = 'out(c.mean); out(c.variance)'
  local kl = {
    'D.Normal(T([0.1, -1]), T([1, 0.5])), D.Normal(T([0.3, 1]), T([2, 0.7]))',
    'D.Bernoulli(T([0.2, 0.7])), D.Bernoulli(T([0.5, 0.1]))',
    'D.Categorical(T([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]])), D.Categorical(T([[0.1, 0.1, 0.8], [0.3, 0.3, 0.4]]))',
    'D.Uniform(T([0.0, 0.2]), T([1.0, 0.5])), D.Uniform(T([-1.0, 0.0]), T([2.0, 3.0]))',
    'D.Exponential(T([0.5, 2])), D.Exponential(T([1, 0.3]))',
    'D.Laplace(T([0, 1]), T([1, 2])), D.Laplace(T([0.5, -1]), T([2, 0.5]))',
    'D.Gumbel(T([0, 1]), T([1, 2])), D.Gumbel(T([0.5, -1]), T([2, 0.5]))',
    'D.Geometric(T([0.2, 0.7])), D.Geometric(T([0.5, 0.1]))',
    'D.LogNormal(T([0, 1]), T([1, 2])), D.LogNormal(T([0.5, -1]), T([2, 0.5]))',
    'D.HalfNormal(T([1, 2])), D.HalfNormal(T([2, 0.5]))',
    'D.Gamma(T([0.5, 3]), T([1, 2])), D.Gamma(T([2, 1]), T([0.5, 3]))',
    'D.Beta(T([0.5, 3]), T([1, 2])), D.Beta(T([2, 1]), T([0.5, 3]))',
    'D.Dirichlet(T([[1, 2, 3]])), D.Dirichlet(T([[0.5, 4, 1]]))',
    'D.Poisson(T([0.5, 3])), D.Poisson(T([2, 1]))',
    'D.MultivariateNormal(T([1, -1]), T([[2, 0.5], [0.5, 1]])), '
      .. 'D.MultivariateNormal(T([0, 0]), scale_tril=T([[1, 0], [0.2, 2]]))',
    'D.Independent(D.Normal(T([[0.1, -1]]), T([[1, 0.5]])), 1), '
      .. 'D.Independent(D.Normal(T([[0.3, 1]]), T([[2, 0.7]])), 1)',
  }
  for _, k in ipairs(kl) do lines[#lines + 1] = 'out(D.kl_divergence(' .. k .. '))' end
  return table.concat(lines, '\n') .. '\n'
end

local kl_pairs = {
  function() return D.Normal(t({0.1, -1}), t({1, 0.5})), D.Normal(t({0.3, 1}), t({2, 0.7})) end,
  function() return D.Bernoulli(t({0.2, 0.7})), D.Bernoulli(t({0.5, 0.1})) end,
  function()
    return D.Categorical(t({{0.2, 0.3, 0.5}, {0.6, 0.1, 0.3}})), D.Categorical(t({{0.1, 0.1, 0.8}, {0.3, 0.3, 0.4}}))
  end,
  function() return D.Uniform(t({0, 0.2}), t({1, 0.5})), D.Uniform(t({-1, 0}), t({2, 3})) end,
  function() return D.Exponential(t({0.5, 2})), D.Exponential(t({1, 0.3})) end,
  function() return D.Laplace(t({0, 1}), t({1, 2})), D.Laplace(t({0.5, -1}), t({2, 0.5})) end,
  function() return D.Gumbel(t({0, 1}), t({1, 2})), D.Gumbel(t({0.5, -1}), t({2, 0.5})) end,
  function() return D.Geometric(t({0.2, 0.7})), D.Geometric(t({0.5, 0.1})) end,
  function() return D.LogNormal(t({0, 1}), t({1, 2})), D.LogNormal(t({0.5, -1}), t({2, 0.5})) end,
  function() return D.HalfNormal(t({1, 2})), D.HalfNormal(t({2, 0.5})) end,
  function() return D.Gamma(t({0.5, 3}), t({1, 2})), D.Gamma(t({2, 1}), t({0.5, 3})) end,
  function() return D.Beta(t({0.5, 3}), t({1, 2})), D.Beta(t({2, 1}), t({0.5, 3})) end,
  function() return D.Dirichlet(t({{1, 2, 3}})), D.Dirichlet(t({{0.5, 4, 1}})) end,
  function() return D.Poisson(t({0.5, 3})), D.Poisson(t({2, 1})) end,
  function()
    return D.MultivariateNormal(t({1, -1}), t({{2, 0.5}, {0.5, 1}})),
      D.MultivariateNormal(t({0, 0}), {scale_tril = t({{1, 0}, {0.2, 2}})})
  end,
  function()
    return D.Independent(D.Normal(t({{0.1, -1}}), t({{1, 0.5}})), 1),
      D.Independent(D.Normal(t({{0.3, 1}}), t({{2, 0.7}})), 1)
  end,
}

local function close_rows(what, ours, ref)
  local got = ours:reshape(-1):totable()
  assert.are.equal(#ref, #got, what .. ': count')
  for i, r in ipairs(ref) do
    local o = got[i]
    local ok = (r ~= r and o ~= o) or o == r or math.abs(o - r) <= 1e-10 * math.max(1, math.abs(r))
    assert(ok, ('%s element %d: %.17g, torch %.17g'):format(what, i, o, r))
  end
end

describe('flow.distributions', function()
  local check = H.torch_ok() and it or pending
  check('log_prob, entropy, mean, variance, cdf, icdf and KL match torch.distributions', function()
    local ref = H.torch_rows(py_script())
    local k = 1
    for _, c in ipairs(cases) do
      local d = c[2]()
      local names = c[6] and {'log_prob', 'entropy', 'cdf', 'icdf'}
        or {'log_prob', 'entropy', 'mean', 'variance', 'cdf', 'icdf'}
      for i, r in ipairs(rows_of(d, c)) do
        close_rows(c[1] .. ' ' .. names[i], r, ref[k])
        k = k + 1
      end
    end
    local cat = D.Categorical(t({{0.2, 0.3, 0.5}, {0.6, 0.1, 0.3}}))
    close_rows('Categorical log_prob', cat:log_prob(flow.tensor({3, 1})), ref[k]); k = k + 1
    close_rows('Categorical entropy', cat:entropy(), ref[k]); k = k + 1
    local po = D.Poisson(t({0.5, 4, 30}))
    close_rows('Poisson log_prob', po:log_prob(t({0, 3, 28})), ref[k]); k = k + 1
    close_rows('Poisson mean', po.mean, ref[k]); k = k + 1
    local bi = D.Binomial(t({10, 3, 7}), t({0.3, 0.9, 0.5}))
    close_rows('Binomial log_prob', bi:log_prob(t({2, 3, 0})), ref[k]); k = k + 1
    close_rows('Binomial mean', bi.mean, ref[k]); k = k + 1
    close_rows('Binomial variance', bi.variance, ref[k]); k = k + 1
    local mu = D.Multinomial(10, t({{0.2, 0.3, 0.5}, {0.6, 0.1, 0.3}}))
    close_rows('Multinomial log_prob', mu:log_prob(t({{2, 3, 5}, {10, 0, 0}})), ref[k]); k = k + 1
    close_rows('Multinomial mean', mu.mean, ref[k]); k = k + 1
    close_rows('Multinomial variance', mu.variance, ref[k]); k = k + 1
    local mvn = D.MultivariateNormal(t({1, -1}), t({{2, 0.5}, {0.5, 1}}))
    close_rows('MultivariateNormal log_prob', mvn:log_prob(t({{0, 0}, {1, 2}})), ref[k]); k = k + 1
    close_rows('MultivariateNormal entropy', mvn:entropy(), ref[k]); k = k + 1
    close_rows('MultivariateNormal variance', mvn.variance, ref[k]); k = k + 1
    local dir = D.Dirichlet(t({{1, 2, 3}, {0.5, 0.5, 4}}))
    close_rows('Dirichlet log_prob', dir:log_prob(t({{0.2, 0.3, 0.5}, {0.1, 0.1, 0.8}})), ref[k]); k = k + 1
    close_rows('Dirichlet entropy', dir:entropy(), ref[k]); k = k + 1
    close_rows('Dirichlet mean', dir.mean, ref[k]); k = k + 1
    close_rows('Dirichlet variance', dir.variance, ref[k]); k = k + 1
    for i, mk in ipairs(kl_pairs) do
      local p, q = mk()
      close_rows('kl pair ' .. i, D.kl_divergence(p, q), ref[k]); k = k + 1
    end
  end)

  check('TransformedDistribution and the transforms match torch', function()
    local ref = H.torch_rows([==[
import torch.distributions as D
import torch.distributions.transforms as Tr
T = lambda v: torch.tensor(v, dtype=torch.float64)
def out(x): print(" ".join(repr(v) for v in x.reshape(-1).tolist()))
d = D.TransformedDistribution(D.Normal(T([0.5, -1]), T([1.5, 0.7])), [Tr.SigmoidTransform()])
out(d.log_prob(T([0.3, 0.9])))
d = D.TransformedDistribution(D.Normal(T([0.5, -1]), T([1.5, 0.7])), [Tr.AffineTransform(1., 2.), Tr.TanhTransform()])
out(d.log_prob(T([0.3, -0.6])))
d = D.TransformedDistribution(D.Exponential(T([2.0, 0.5])), [Tr.PowerTransform(T(0.5))])
out(d.log_prob(T([0.3, 1.9])))
c = Tr.ComposeTransform([Tr.AffineTransform(0.5, -3.), Tr.ExpTransform()])
x = T([0.1, -0.4]); out(c.log_abs_det_jacobian(x, c(x))); out(c.inv(c(x)))
d = D.TransformedDistribution(D.Uniform(T([0.0]), T([1.0])), [Tr.AffineTransform(1., -2.)])
out(d.cdf(T([-0.5]))); out(d.icdf(T([0.3])))
]==])
    local Nm = function() return D.Normal(t({0.5, -1}), t({1.5, 0.7})) end
    close_rows('sigmoid', D.TransformedDistribution(Nm(), {D.SigmoidTransform()}):log_prob(t({0.3, 0.9})), ref[1])
    close_rows('affine+tanh', D.TransformedDistribution(Nm(), {D.AffineTransform(1, 2), D.TanhTransform()})
      :log_prob(t({0.3, -0.6})), ref[2])
    close_rows('power', D.TransformedDistribution(D.Exponential(t({2, 0.5})), {D.PowerTransform(t(0.5))})
      :log_prob(t({0.3, 1.9})), ref[3])
    local c = D.ComposeTransform({D.AffineTransform(0.5, -3), D.ExpTransform()})
    local x = t({0.1, -0.4})
    close_rows('compose ladj', c:log_abs_det_jacobian(x, c(x)), ref[4])
    close_rows('compose inverse', c.inv(c(x)), ref[5])
    assert.are.equal(c, c.inv.inv)
    local u = D.TransformedDistribution(D.Uniform(t({0}), t({1})), {D.AffineTransform(1, -2)})
    close_rows('cdf through a decreasing map', u:cdf(t({-0.5})), ref[6])
    close_rows('icdf through a decreasing map', u:icdf(t({0.3})), ref[7])
    -- rsample flows through the transforms
    local loc = flow.tensor({0.2}, {dtype = flow.float64, requires_grad = true})
    local ln = D.TransformedDistribution(D.Normal(loc, t({1})), {D.ExpTransform()})
    assert.is_true(ln.has_rsample)
    ln:rsample({10}):sum():backward()
    assert.is_true(loc.grad:item() > 0)
    assert.is_false(D.AbsTransform().bijective)
    H.raises(function() D.SoftmaxTransform():log_abs_det_jacobian(t({1}), t({1})) end, 'not defined')
  end)

  check('Relaxed distributions and MixtureSameFamily match torch', function()
    local ref = H.torch_rows([==[
import torch.distributions as D
T = lambda v: torch.tensor(v, dtype=torch.float64)
def out(x): print(" ".join(repr(v) for v in x.reshape(-1).tolist()))
out(D.RelaxedBernoulli(T([0.5]), T([0.3, 0.8])).log_prob(T([0.2, 0.9])))
out(D.RelaxedOneHotCategorical(T([0.7]), T([0.2, 0.3, 0.5])).log_prob(T([0.1, 0.3, 0.6])))
m = D.MixtureSameFamily(D.Categorical(T([0.3, 0.7])), D.Normal(T([-1, 2]), T([0.5, 1])))
out(m.log_prob(T([0, 1.5]))); out(m.mean); out(m.variance); out(m.cdf(T([0.0])))
]==])
    close_rows('RelaxedBernoulli', D.RelaxedBernoulli(t({0.5}), t({0.3, 0.8})):log_prob(t({0.2, 0.9})), ref[1])
    close_rows('RelaxedOneHotCategorical',
      D.RelaxedOneHotCategorical(t({0.7}), t({0.2, 0.3, 0.5})):log_prob(t({0.1, 0.3, 0.6})), ref[2])
    local m = D.MixtureSameFamily(D.Categorical(t({0.3, 0.7})), D.Normal(t({-1, 2}), t({0.5, 1})))
    close_rows('mixture log_prob', m:log_prob(t({0, 1.5})), ref[3])
    close_rows('mixture mean', m.mean, ref[4])
    close_rows('mixture variance', m.variance, ref[5])
    close_rows('mixture cdf', m:cdf(t({0})), ref[6])
    flow.manual_seed(21)
    local s = m:sample({10000})
    assert(math.abs(s:mean():item() - 1.1) < 5 * math.sqrt(2.665 / 10000), 'mixture sample mean')
    local y = D.RelaxedOneHotCategorical(t({0.7}), t({0.2, 0.3, 0.5})):rsample({100})
    H.close(y:sum(-1), flow.ones(100, f64):totable(), 1e-12)
    local x = D.RelaxedBernoulli(t({0.5}), t({0.3})):rsample({100})
    assert.is_true(x:gt(0):all():item() and x:lt(1):all():item())
    H.raises(function() D.MixtureSameFamily(D.Categorical(t({0.5, 0.5})), D.Normal(t({0, 1, 2}), t({1, 1, 1}))) end,
      'must equal the number')
  end)

  -- Kolmogorov-Smirnov statistic of samples against the cdf
  local function ks(d, n)
    local s = d:sample({n}):reshape(-1)
    local sorted = s:sort()
    local cdf = d:cdf(sorted)
    local i = flow.arange(1, n + 1, f64)
    return math.max((i / n - cdf):amax():item(), (cdf - (i - 1) / n):amax():item())
  end

  it('samples: reproducible with manual_seed, moments and a KS test at a fixed seed', function()
    local n = 10000
    -- KS critical value at alpha = 0.001: 1.95 / sqrt(n)
    local crit = 1.95 / math.sqrt(n)
    for _, mk in ipairs({
      function() return D.Normal(t(0.5), t(2)) end, function() return D.Exponential(t(1.5)) end,
      function() return D.Laplace(t(-1), t(0.5)) end, function() return D.Cauchy(t(0), t(1)) end,
      function() return D.Gumbel(t(1), t(2)) end, function() return D.LogNormal(t(0), t(0.5)) end,
      function() return D.Uniform(t(-1), t(3)) end, function() return D.HalfNormal(t(1.5)) end,
      function() return D.Gamma(t(0.4), t(1)) end, function() return D.Gamma(t(3), t(2)) end,
      function() return D.Chi2(t(4)) end,
    }) do
      flow.manual_seed(1234)
      local d = mk()
      local stat = ks(d, n)
      assert(stat < crit, ('%s: KS statistic %.4f >= %.4f'):format(d.__name, stat, crit))
      flow.manual_seed(99)
      local a = d:sample({5})
      flow.manual_seed(99)
      H.close(d:sample({5}), a:totable(), 0)
      if d.__name ~= 'Cauchy' then
        flow.manual_seed(7)
        local s = d:sample({n})
        local se = math.sqrt(d.variance:item() / n)
        assert(math.abs(s:mean():item() - d.mean:item()) < 5 * se, d.__name .. ': sample mean')
        local v = s:var():item()
        assert(math.abs(v / d.variance:item() - 1) < 0.1, d.__name .. ': sample variance ' .. v)
      end
    end
    -- discrete: frequencies against probabilities
    flow.manual_seed(5)
    local cat = D.Categorical(t({0.2, 0.3, 0.5}))
    local s = cat:sample({n})
    for k, p in ipairs({0.2, 0.3, 0.5}) do
      local freq = s:eq(k):to(flow.float64):mean():item()
      assert(math.abs(freq - p) < 5 * math.sqrt(p * (1 - p) / n), 'Categorical frequency of ' .. k)
    end
    local b = D.Bernoulli(t({0.3})):sample({n})
    assert(math.abs(b:mean():item() - 0.3) < 5 * math.sqrt(0.21 / n))
    local g = D.Geometric(t({0.25})):sample({n})
    assert(math.abs(g:mean():item() - 3) < 5 * math.sqrt(12 / n))
    -- Beta, StudentT, Dirichlet (no cdf): moments
    flow.manual_seed(11)
    for _, d in ipairs({D.Beta(t(0.5), t(3)), D.StudentT(t(6), t(1), t(2))}) do
      local x = d:sample({n})
      assert(math.abs(x:mean():item() - d.mean:item()) < 5 * math.sqrt(d.variance:item() / n), d.__name .. ' mean')
      assert(math.abs(x:var():item() / d.variance:item() - 1) < 0.15, d.__name .. ' variance')
    end
    -- Poisson (both samplers), Binomial, Multinomial, MultivariateNormal: moments
    local po = D.Poisson(t({0.7, 4, 40, 300}))
    local ps = po:sample({n})
    for i, r in ipairs({0.7, 4, 40, 300}) do
      assert(math.abs(ps:select(2, i):mean():item() - r) < 5 * math.sqrt(r / n), 'Poisson mean ' .. r)
      assert(math.abs(ps:select(2, i):var():item() / r - 1) < 0.1, 'Poisson variance ' .. r)
    end
    local bs = D.Binomial(t({12}), t({0.3})):sample({n})
    assert(math.abs(bs:mean():item() - 3.6) < 5 * math.sqrt(2.52 / n), 'Binomial mean')
    local ms = D.Multinomial(10, t({0.2, 0.3, 0.5})):sample({n})
    H.close(ms:sum(2), flow.full({n}, 10, f64):totable(), 0)
    H.close(ms:mean(1), {2, 3, 5}, 0.06)
    local mvn = D.MultivariateNormal(t({1, -1}), t({{2, 0.5}, {0.5, 1}}))
    local xs = mvn:sample({n}) - t({1, -1})
    H.close(xs:t():matmul(xs) / n, {{2, 0.5}, {0.5, 1}}, 0.08)
    local dir = D.Dirichlet(t({1, 2, 3}))
    local ds = dir:sample({n})
    H.close(ds:sum(2), flow.ones(n, f64):totable(), 1e-12)
    H.close(ds:mean(1), dir.mean:totable(), 0.01)
    local o = D.OneHotCategorical(t({0.2, 0.8})):sample({n})
    assert.are.same({n, 2}, H.shape(o))
    assert(math.abs(o:select(2, 2):mean():item() - 0.8) < 5 * math.sqrt(0.16 / n))
  end)

  it('rsample is differentiable; batch and event shapes; expand; Independent', function()
    local loc = flow.tensor({0.5, -1}, {dtype = flow.float64, requires_grad = true})
    local scale = flow.tensor({1, 2}, {dtype = flow.float64, requires_grad = true})
    local d = D.Normal(loc, scale)
    flow.manual_seed(3)
    local x = d:rsample({1000})
    x:mean():backward()
    H.close(loc.grad, {0.5, 0.5}, 1e-12)   -- mean over 1000 x 2 samples
    assert.are.same({2}, d.batch_shape:totable())
    assert.are.same({}, d.event_shape:totable())
    local e = d:expand({4, 2})
    assert.are.same({4, 2}, e.batch_shape:totable())
    assert.are.same({3, 4, 2}, H.shape(e:sample({3})))
    local ind = D.Independent(D.Normal(flow.zeros(5, 3, f64), flow.ones(5, 3, f64)), 1)
    assert.are.same({5}, ind.batch_shape:totable())
    assert.are.same({3}, ind.event_shape:totable())
    assert.is_true(ind.has_rsample)
    H.close(ind:log_prob(flow.zeros(5, 3, f64)), flow.full({5}, 3 * -0.5 * math.log(2 * math.pi), f64):totable(), 1e-12)
    local cd = D.Cauchy(t({0, 1}), t({1, 1}))
    assert.is_true(cd.mean[1]:item() ~= cd.mean[1]:item())
    assert.are.equal(math.huge, cd.variance[2]:item())
    local cat = D.Categorical(flow.ones(4, 3, f64))
    assert.are.same({2, 4}, H.shape(cat:sample({2})))
    assert.are.equal('IntegerInterval(lower_bound=1, upper_bound=3)', cat.support.name)
  end)

  it('validate_args: invalid parameters and values out of the support raise', function()
    H.raises(function() D.Normal(0, -1) end, 'scale')
    H.raises(function() D.Gamma(t({1}), t({0})) end, 'rate')
    H.raises(function() D.Beta(0.5, 2):log_prob(t({1.5})) end, 'support')
    H.raises(function() D.Poisson(t({1})):rsample() end, 'reparameterized')
    H.raises(function() D.MultivariateNormal(t({0, 0}), {}) end, 'exactly one of')
    H.raises(function() D.MultivariateNormal(t({0, 0}), t({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}})) end, '[..., 2, 2]')
    H.raises(function() D.Poisson(t({-1})) end, 'rate')
    H.raises(function() D.Binomial(t({3}), t({0.5})):log_prob(t({4})) end, 'support')
    H.raises(function() D.Multinomial(2.5, t({0.5, 0.5})) end, 'total_count')
    H.raises(function() D.Bernoulli(t({1.5})) end, 'probs')
    H.raises(function() D.Bernoulli(t({0.5}), t({0})) end, 'not both')
    H.raises(function() D.Categorical(t({0.5, -0.5})) end, 'Simplex')
    H.raises(function() D.Uniform(1, 0) end, 'low to be less than high')
    H.raises(function() D.Exponential(1):log_prob(t({-1})) end, 'support')
    H.raises(function() D.Categorical(t({0.5, 0.5})):log_prob(flow.tensor({3})) end, 'support')
    H.raises(function() D.kl_divergence(D.Normal(0, 1), D.Laplace(0, 1)) end, 'no KL')
    -- validate_args = false skips the checks
    assert.are.equal(1, D.Exponential(t({1}), false):log_prob(t({-1})):item())   -- log 1 - 1 * -1
  end)

  it('InverseGamma (not in torch 1.13): through Gamma of 1 / x, moments', function()
    local a, r = t({0.5, 2, 9}), t({1, 2, 0.5})
    local ig, g = D.InverseGamma(a, r), D.Gamma(a, r)
    local v = t({0.3, 1.2, 2.5})
    H.close(ig:log_prob(v), (g:log_prob(v:reciprocal()) - v:log() * 2):totable(), 1e-12)
    H.close(ig:cdf(v), (1 - g:cdf(v:reciprocal())):totable(), 1e-12)
    flow.manual_seed(8)
    local d = D.InverseGamma(t(6), t(3))
    local x = d:sample({10000})
    assert(math.abs(x:mean():item() - d.mean:item()) < 5 * math.sqrt(d.variance:item() / 10000))
    -- entropy by quadrature of -p log p
    local grid = flow.linspace(1e-3, 10, 200001, f64)
    local p = d:log_prob(grid):exp()
    local h = -(p * d:log_prob(grid)):sum():item() * (grid[2]:item() - grid[1]:item())
    assert(math.abs(h - d:entropy():item()) < 1e-4, 'entropy ' .. h)
  end)

  it('register_kl adds a pair', function()
    local My = D.Normal:subclass('MyNormal')
    D.register_kl(My, D.Laplace)(function() return flow.tensor(42) end)
    assert.are.equal(42, D.kl_divergence(My(0, 1), D.Laplace(0, 1)):item())
    -- a subclass finds its base's pair
    H.close(D.kl_divergence(My(t(0), t(1)), D.Normal(t(0), t(1))), 0, 1e-15)
  end)
end)
