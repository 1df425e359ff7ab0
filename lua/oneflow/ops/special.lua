-- oneflow.ops.special: the flow.special namespace (torch.special's names and
-- values). Functions that need their own kernel call core/ops/special.c
-- (PyTorch's algorithms in float64; CPU); the rest are composed from
-- differentiable ops. Also flow.erfinv / lgamma / digamma / polygamma / i0 /
-- mvlgamma / logit / sinc / exp2 and the same tensor methods.
--   flow.special.gammaln(x), flow.special.i0e(x), flow.special.zeta(x, q),
--   flow.special.polygamma(2, x), flow.special.chebyshev_polynomial_t(x, 3)
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local A = require 'oneflow._args'

local C, out1 = core.C, core.out1
local call1, def, is_tensor = T.call1, T.def, T.is_tensor
local flow = T.flow
local special = {}

local function check(name, x)
  if not is_tensor(x) then
    A.fail(('special.%s: expected a tensor, got %s'):format(name, A.describe(x)))
  end
  return x
end

-- float64 kernel of one input
local function sp1(name, fn)
  return function(x)
    check(name, x)
    return call1(C.of_special, fn, x.p, nil, 0, out1)
  end
end

-- float64 kernel of two inputs (either may be a number)
local function sp2(name, fn)
  return function(x, y)
    if not is_tensor(x) and not is_tensor(y) then
      A.fail(('special.%s: expected at least one tensor, got %s and %s'):format(name, type(x), type(y)))
    end
    if not is_tensor(x) then x = T.as_tensor_like(x, y) end
    if not is_tensor(y) then y = T.as_tensor_like(y, x) end
    return call1(C.of_special, fn, x.p, y.p, 0, out1)
  end
end

for name, fn in pairs({
  erfcx = C.OF_SP_ERFCX, erfinv = C.OF_SP_ERFINV, gammaln = C.OF_SP_GAMMALN,
  digamma = C.OF_SP_DIGAMMA, i0 = C.OF_SP_I0, i0e = C.OF_SP_I0E, i1 = C.OF_SP_I1,
  i1e = C.OF_SP_I1E, ndtri = C.OF_SP_NDTRI, log_ndtr = C.OF_SP_LOG_NDTR,
  bessel_j0 = C.OF_SP_BESSEL_J0, bessel_j1 = C.OF_SP_BESSEL_J1, bessel_y0 = C.OF_SP_BESSEL_Y0,
  bessel_y1 = C.OF_SP_BESSEL_Y1, modified_bessel_i0 = C.OF_SP_MODIFIED_BESSEL_I0,
  modified_bessel_i1 = C.OF_SP_MODIFIED_BESSEL_I1, modified_bessel_k0 = C.OF_SP_MODIFIED_BESSEL_K0,
  modified_bessel_k1 = C.OF_SP_MODIFIED_BESSEL_K1,
  scaled_modified_bessel_k0 = C.OF_SP_SCALED_MODIFIED_BESSEL_K0,
  scaled_modified_bessel_k1 = C.OF_SP_SCALED_MODIFIED_BESSEL_K1,
  spherical_bessel_j0 = C.OF_SP_SPHERICAL_BESSEL_J0, airy_ai = C.OF_SP_AIRY_AI,
}) do special[name] = sp1(name, fn) end

for name, fn in pairs({
  zeta = C.OF_SP_ZETA, gammainc = C.OF_SP_GAMMAINC, gammaincc = C.OF_SP_GAMMAINCC,
  chebyshev_polynomial_t = C.OF_SP_CHEBYSHEV_T, chebyshev_polynomial_u = C.OF_SP_CHEBYSHEV_U,
  chebyshev_polynomial_v = C.OF_SP_CHEBYSHEV_V, chebyshev_polynomial_w = C.OF_SP_CHEBYSHEV_W,
  shifted_chebyshev_polynomial_t = C.OF_SP_SHIFTED_CHEBYSHEV_T,
  shifted_chebyshev_polynomial_u = C.OF_SP_SHIFTED_CHEBYSHEV_U,
  shifted_chebyshev_polynomial_v = C.OF_SP_SHIFTED_CHEBYSHEV_V,
  shifted_chebyshev_polynomial_w = C.OF_SP_SHIFTED_CHEBYSHEV_W,
  hermite_polynomial_h = C.OF_SP_HERMITE_H, hermite_polynomial_he = C.OF_SP_HERMITE_HE,
  laguerre_polynomial_l = C.OF_SP_LAGUERRE_L, legendre_polynomial_p = C.OF_SP_LEGENDRE_P,
}) do special[name] = sp2(name, fn) end

special.psi = special.digamma

--- special.polygamma(n, x): the n-th derivative of digamma (n >= 0 an integer).
function special.polygamma(n, x)
  check('polygamma', x)
  if type(n) ~= 'number' then A.fail('special.polygamma: n must be a number, got ' .. type(n)) end
  return call1(C.of_special, C.OF_SP_POLYGAMMA, x.p, nil, n, out1)
end

--- special.multigammaln(x, p): log of the multivariate gamma function,
-- sum_{i=0}^{p-1} gammaln(x - i/2) + p(p-1)/4 log(pi); every x must exceed (p-1)/2.
function special.multigammaln(x, p)
  check('multigammaln', x)
  if type(p) ~= 'number' or p < 1 or p ~= math.floor(p) then
    A.fail('special.multigammaln: p must be a positive integer, got ' .. tostring(p))
  end
  if x:le((p - 1) / 2):any():item() then
    A.fail(('special.multigammaln: all elements of x must be greater than (p-1)/2 = %g'):format((p - 1) / 2))
  end
  local r = special.gammaln(x)
  for i = 1, p - 1 do r = r + special.gammaln(x - i / 2) end
  return r + p * (p - 1) / 4 * math.log(math.pi)
end

local function float_of(x)
  check('special', x)
  if x:is_floating_point() then return x end
  return x:to(T.get_default_dtype())
end

special.erf = function(x) return check('erf', x):erf() end
special.erfc = function(x) return check('erfc', x):erfc() end
special.expm1 = function(x) return check('expm1', x):expm1() end
special.log1p = function(x) return check('log1p', x):log1p() end
--- flow.special.expit(x): the logistic sigmoid.
special.expit = function(x) return check('expit', x):sigmoid() end

local LN2 = math.log(2)
--- special.exp2(x) = 2^x.
function special.exp2(x) return (float_of(x) * LN2):exp() end

--- special.logit(x, {eps =}) = log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps is given.
function special.logit(x, eps)
  x = float_of(x)
  if type(eps) == 'table' then eps = A.check_options('logit', eps, {eps = true}).eps end
  if eps ~= nil then x = x:clamp(eps, 1 - eps) end
  return (x / (1 - x)):log()
end

--- special.ndtr(x): the standard normal CDF (accurate in both tails).
function special.ndtr(x)
  x = float_of(x)
  local h = math.sqrt(0.5)
  local lo = (x * -h):erfc() * 0.5
  return flow.where(x:lt(0), lo, 1 - (x * h):erfc() * 0.5)
end

--- special.xlogy(x, y) = x log(y), 0 where x == 0; special.xlog1py(x, y) = x log1p(y).
special.xlogy = function(x, y) return flow.xlogy(x, y) end
--- flow.xlog1py(x, y): x * log1p(y), and 0 where x == 0.
function special.xlog1py(x, y)
  if not is_tensor(x) and not is_tensor(y) then
    A.fail('special.xlog1py: expected at least one tensor, got ' .. type(x) .. ' and ' .. type(y))
  end
  if not is_tensor(x) then x = T.as_tensor_like(x, y) end
  if not is_tensor(y) then y = T.as_tensor_like(y, x) end
  x, y = float_of(x), float_of(y)
  local zero_x = x:eq(0):logical_and(y:isnan():logical_not())
  local ys = flow.where(zero_x, flow.zeros({}, {dtype = y.dtype, device = y.device}), y)
  return flow.where(zero_x, flow.zeros({}, {dtype = x.dtype, device = x.device}), x * ys:log1p())
end

--- special.entr(x) = -x log(x) for x > 0, 0 at 0, -inf for x < 0.
function special.entr(x)
  x = float_of(x)
  local pos = x:gt(0)
  local safe = flow.where(pos, x, flow.ones({}, {dtype = x.dtype, device = x.device}))
  local r = flow.where(pos, -(safe * safe:log()), flow.zeros({}, {dtype = x.dtype, device = x.device}))
  return flow.where(x:lt(0), flow.full({}, -math.huge, {dtype = x.dtype, device = x.device}), r)
end

--- special.sinc(x) = sin(pi x) / (pi x), 1 at 0.
function special.sinc(x)
  x = float_of(x)
  local z = x:eq(0)
  local px = flow.where(z, flow.ones({}, {dtype = x.dtype, device = x.device}), x) * math.pi
  return flow.where(z, flow.ones({}, {dtype = x.dtype, device = x.device}), px:sin() / px)
end

--- special.round(x, {decimals = 0}): round half to even, at `decimals` places.
function special.round(x, opts)
  check('round', x)
  local d = type(opts) == 'number' and opts
    or (opts ~= nil and A.check_options('special.round', opts, {decimals = true}).decimals) or 0
  if d == 0 then return x:round() end
  local s = 10 ^ d
  return (x * s):round() / s
end

special.softmax = function(x, dim, opts) return flow.softmax(x, dim, opts) end
special.log_softmax = function(x, dim, opts) return flow.log_softmax(x, dim, opts) end
special.logsumexp = function(x, dim, opts) return flow.logsumexp(x, dim, opts) end

T.flow.special = special

-- torch's top-level names and tensor methods for the common ones
for _, name in ipairs({'erfinv', 'digamma', 'i0', 'logit', 'sinc', 'exp2', 'xlog1py'}) do
  if flow[name] == nil then def(name, special[name]) end
end
--- flow.lgamma(x): log|Gamma(x)| elementwise.
-- @function flow.lgamma
def('lgamma', special.gammaln)
def('polygamma', special.polygamma, 'func')
function T.methods.polygamma(x, n) return special.polygamma(n, x) end
def('mvlgamma', special.multigammaln)


-- Doc comments of the functions made in loops above (help() and LDoc read them).

--- flow.digamma(x): the derivative of lgamma, elementwise.
-- @function flow.digamma

--- flow.erfinv(x): the inverse error function elementwise.
-- @function flow.erfinv

--- flow.i0(x): the modified Bessel function of the first kind, order 0.
-- @function flow.i0


-- Doc comments of the functions made in loops above (help() and LDoc read them).

--- flow.special.airy_ai(x): the Airy function Ai.
-- @function special.airy_ai

--- flow.special.bessel_j0(x): the Bessel function of the first kind, order 0.
-- @function special.bessel_j0

--- flow.special.bessel_j1(x): the Bessel function of the first kind, order 1.
-- @function special.bessel_j1

--- flow.special.bessel_y0(x): the Bessel function of the second kind, order 0.
-- @function special.bessel_y0

--- flow.special.bessel_y1(x): the Bessel function of the second kind, order 1.
-- @function special.bessel_y1

--- flow.special.chebyshev_polynomial_t(x, n): the Chebyshev polynomial T_n(x).
-- @function special.chebyshev_polynomial_t

--- flow.special.chebyshev_polynomial_u(x, n): the Chebyshev polynomial U_n(x).
-- @function special.chebyshev_polynomial_u

--- flow.special.chebyshev_polynomial_v(x, n): the Chebyshev polynomial V_n(x).
-- @function special.chebyshev_polynomial_v

--- flow.special.chebyshev_polynomial_w(x, n): the Chebyshev polynomial W_n(x).
-- @function special.chebyshev_polynomial_w

--- flow.special.erfcx(x): exp(x^2) * erfc(x), the scaled complementary error function.
-- @function special.erfcx

--- flow.special.gammainc(a, x): the regularised lower incomplete gamma function.
-- @function special.gammainc

--- flow.special.gammaincc(a, x): the regularised upper incomplete gamma function.
-- @function special.gammaincc

--- flow.special.hermite_polynomial_h(x, n): the physicists' Hermite polynomial H_n(x).
-- @function special.hermite_polynomial_h

--- flow.special.hermite_polynomial_he(x, n): the probabilists' Hermite polynomial He_n(x).
-- @function special.hermite_polynomial_he

--- flow.special.i0e(x): exp(-|x|) * I0(x).
-- @function special.i0e

--- flow.special.i1(x): the modified Bessel function of the first kind, order 1.
-- @function special.i1

--- flow.special.i1e(x): exp(-|x|) * I1(x).
-- @function special.i1e

--- flow.special.laguerre_polynomial_l(x, n): the Laguerre polynomial L_n(x).
-- @function special.laguerre_polynomial_l

--- flow.special.legendre_polynomial_p(x, n): the Legendre polynomial P_n(x).
-- @function special.legendre_polynomial_p

--- flow.special.log_ndtr(x): log of the standard normal CDF, accurate in the tails.
-- @function special.log_ndtr

--- flow.special.modified_bessel_i0(x): the modified Bessel function I0.
-- @function special.modified_bessel_i0

--- flow.special.modified_bessel_i1(x): the modified Bessel function I1.
-- @function special.modified_bessel_i1

--- flow.special.modified_bessel_k0(x): the modified Bessel function K0.
-- @function special.modified_bessel_k0

--- flow.special.modified_bessel_k1(x): the modified Bessel function K1.
-- @function special.modified_bessel_k1

--- flow.special.ndtri(p): the inverse of the standard normal CDF.
-- @function special.ndtri

--- flow.special.scaled_modified_bessel_k0(x): exp(x) * K0(x).
-- @function special.scaled_modified_bessel_k0

--- flow.special.scaled_modified_bessel_k1(x): exp(x) * K1(x).
-- @function special.scaled_modified_bessel_k1

--- flow.special.shifted_chebyshev_polynomial_t(x, n): T*_n(x) = T_n(2x - 1).
-- @function special.shifted_chebyshev_polynomial_t

--- flow.special.shifted_chebyshev_polynomial_u(x, n): U*_n(x) = U_n(2x - 1).
-- @function special.shifted_chebyshev_polynomial_u

--- flow.special.shifted_chebyshev_polynomial_v(x, n): V*_n(x) = V_n(2x - 1).
-- @function special.shifted_chebyshev_polynomial_v

--- flow.special.shifted_chebyshev_polynomial_w(x, n): W*_n(x) = W_n(2x - 1).
-- @function special.shifted_chebyshev_polynomial_w

--- flow.special.spherical_bessel_j0(x): sin(x) / x.
-- @function special.spherical_bessel_j0

--- flow.special.zeta(x, q): the Hurwitz zeta function.
-- @function special.zeta

return special
