-- Reparameterised samplers of the Gamma family (Gamma, Chi2, Beta, Dirichlet,
-- StudentT): the implicit gradients against torch._standard_gamma_grad and
-- torch._dirichlet_grad for the same (alpha, x), against finite differences
-- of the Gamma cdf, and flowing through rsample.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local D = flow.distributions
local S = flow.special

local f64 = {dtype = flow.float64}
local function t(v) return flow.tensor(v, f64) end
-- alpha, x pairs covering the three regimes of each approximation
local GA = {0.3, 0.3, 2, 2, 5, 12, 12, 12, 50, 0.05}
local GX = {0.1, 1.5, 0.5, 3, 4, 1, 12.5, 20, 45, 1e-6}
local DA = {{0.5, 1, 2}, {7, 8, 9}, {0.2, 3, 0.4}, {2, 2, 2}}
local DX = {{0.05, 0.35, 0.6}, {0.3, 0.33, 0.37}, {0.01, 0.95, 0.04}, {0.2, 0.5, 0.3}}

local function pymat(m)
  local rows = {}
  for i, r in ipairs(m) do rows[i] = H.pylist(r) end
  return '[' .. table.concat(rows, ', ') .. ']'
end

describe('Gamma-family rsample', function()
  local check = H.torch_ok() and it or pending
  check('implicit gradients match torch._standard_gamma_grad and torch._dirichlet_grad', function()
    local ref = H.torch_rows(([[
T = lambda v: torch.tensor(v, dtype=torch.float64)
def out(x): print(" ".join(repr(v) for v in x.reshape(-1).tolist()))
out(torch._standard_gamma_grad(T(%s), T(%s)))
a = T(%s)
out(torch._dirichlet_grad(T(%s), a, a.sum(-1, True).expand_as(a)))
]]):format(H.pylist(GA), H.pylist(GX), pymat(DA), pymat(DX)))
    H.close(D._standard_gamma_grad(t(GA), t(GX)), ref[1], 1e-12)
    local a = t(DA)
    local got = D._dirichlet_grad(t(DX), a, a:sum(-1, {keepdim = true}):expand({4, 3}))
    H.close(got:reshape(-1), ref[2], 1e-12)
  end)

  it('the Gamma gradient is -(d cdf / d alpha) / pdf (finite differences)', function()
    local a, x = t({0.3, 2, 5, 12, 12, 3.5}), t({0.5, 3, 4, 1, 12.5, 1.2})
    local h = 1e-6
    local dF = (S.gammainc(a + h, x) - S.gammainc(a - h, x)) / (2 * h)
    local pdf = D.Gamma(a, flow.ones_like(a)):log_prob(x):exp()
    local fd = (-dF / pdf):totable()
    local got = D._standard_gamma_grad(a, x):totable()
    for i = 1, #fd do
      -- torch's approximations are accurate to about 1e-3 relative (its own docs)
      assert(math.abs(got[i] - fd[i]) <= 2e-3 * math.abs(fd[i]), ('element %d: %g vs fd %g'):format(i, got[i], fd[i]))
    end
  end)

  it('rsample carries gradients to concentration, rate, df', function()
    local c = flow.tensor({0.7, 3}, {dtype = flow.float64, requires_grad = true})
    local r = flow.tensor({1, 2}, {dtype = flow.float64, requires_grad = true})
    flow.manual_seed(4)
    local s = D.Gamma(c, r):rsample({6})
    s:sum():backward()
    -- d(x / r)/d alpha = grad(alpha, x r) / r, d/dr = -x / r
    local xr = (s * r):detach()
    local want = (D._standard_gamma_grad(c:detach():expand({6, 2}), xr) / r:detach()):sum(1)
    H.close(c.grad, want:totable(), 1e-12)
    H.close(r.grad, (-(s / r):sum(1)):detach():totable(), 1e-12)
    -- a large-sample check: d E[x] / d alpha = 1 / rate
    local c2 = flow.tensor({2.5}, {dtype = flow.float64, requires_grad = true})
    flow.manual_seed(9)
    D.Gamma(c2, t({2})):rsample({20000}):mean():backward()
    assert(math.abs(c2.grad:item() - 0.5) < 0.02, 'dE/dalpha ' .. c2.grad:item())
    -- Beta: d E[x] / d a = b / (a + b)^2
    local ab = flow.tensor({2, 3}, {dtype = flow.float64, requires_grad = true})
    flow.manual_seed(10)
    D.Beta(ab[1], ab[2]):rsample({20000}):mean():backward()
    H.close(ab.grad, {3 / 25, -2 / 25}, 0.01)
    -- Dirichlet: the components' gradients sum to 0 per sample column
    local dc = flow.tensor({1, 2, 3}, {dtype = flow.float64, requires_grad = true})
    flow.manual_seed(11)
    D.Dirichlet(dc):rsample({20000}):select(2, 1):mean():backward()
    -- d E[x1] / d alpha = (a0 - a1) / a0^2, -a1 / a0^2, -a1 / a0^2
    H.close(dc.grad, {5 / 36, -1 / 36, -1 / 36}, 0.01)
    local df = flow.tensor({5}, {dtype = flow.float64, requires_grad = true})
    flow.manual_seed(12)
    -- E|T| depends on df: its derivative by rsample against finite differences
    -- of the closed form E|T| = 2 sqrt(df) Gamma((df+1)/2) / (sqrt(pi) (df-1) Gamma(df/2))
    D.StudentT(df):rsample({40000}):abs():mean():backward()
    local function eabs(v)
      return 2 * math.sqrt(v) * math.exp(S.gammaln(t((v + 1) / 2)):item() - S.gammaln(t(v / 2)):item())
        / (math.sqrt(math.pi) * (v - 1))
    end
    local fd = (eabs(5 + 1e-5) - eabs(5 - 1e-5)) / 2e-5
    assert(math.abs(df.grad:item() - fd) < 0.01, ('StudentT dE|T|/ddf %g vs %g'):format(df.grad:item(), fd))
    assert.is_true(D.Chi2(t({3})).has_rsample)
  end)
end)
