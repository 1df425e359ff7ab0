-- flowvision.data.random: scalar draws from oneflow's generator for the
-- augmentation code (what timm takes from `random` and `numpy.random`), so
-- that flow.manual_seed makes every augmentation reproducible.
local flow = require 'oneflow'

local R = {}
local log, sqrt, exp = math.log, math.sqrt, math.exp

--- U[0, 1)
function R.random() return flow.rand(1, {dtype = flow.float64}):item() end
local random = R.random

--- U[a, b)
function R.uniform(a, b) return a + (b - a) * random() end

--- Integer in [lo, hi) (numpy's randint).
function R.randint(lo, hi)
  if hi <= lo then error(('randint: empty range [%d, %d)'):format(lo, hi), 2) end
  return flow.randint(lo, hi, {1}):item()
end

--- N(mu, sigma)
function R.gauss(mu, sigma) return mu + sigma * flow.randn(1, {dtype = flow.float64}):item() end

--- Gamma(shape, 1) by Marsaglia and Tsang (shape < 1 boosted by U^(1/shape)).
function R.gamma(shape)
  if shape <= 0 then error('gamma: shape must be positive, got ' .. tostring(shape), 2) end
  if shape < 1 then
    local u = random()
    return R.gamma(shape + 1) * u ^ (1 / shape)
  end
  local d = shape - 1 / 3
  local c = 1 / sqrt(9 * d)
  while true do
    local x, v
    repeat
      x = R.gauss(0, 1)
      v = 1 + c * x
    until v > 0
    v = v * v * v
    local u = random()
    if u < 1 - 0.0331 * x ^ 4 or log(u) < 0.5 * x * x + d * (1 - v + log(v)) then
      return d * v
    end
  end
end

--- Beta(a, b) as X / (X + Y) with X ~ Gamma(a), Y ~ Gamma(b).
function R.beta(a, b)
  local x, y = R.gamma(a), R.gamma(b)
  if x + y == 0 then return 0.5 end
  return x / (x + y)
end

--- Dirichlet(alphas) -> list of weights summing to 1.
function R.dirichlet(alphas)
  local g, total = {}, 0
  for i, a in ipairs(alphas) do
    g[i] = R.gamma(a)
    total = total + g[i]
  end
  for i = 1, #g do g[i] = total > 0 and g[i] / total or 1 / #g end
  return g
end

--- One element of list, uniformly.
function R.choice(list) return list[R.randint(1, #list + 1)] end

--- k draws from list: with replacement, or without it by weights p (numpy's choice).
function R.choices(list, k, p)
  local out = {}
  if not p then
    for i = 1, k do out[i] = R.choice(list) end
    return out
  end
  if k > #list then error('choices: cannot take more elements than the list has without replacement', 2) end
  local w = {}
  for i = 1, #list do w[i] = p[i] end
  for i = 1, k do
    local total = 0
    for j = 1, #w do total = total + w[j] end
    local r, acc, pick = random() * total, 0, nil
    for j = 1, #w do
      acc = acc + w[j]
      if w[j] > 0 and r < acc then pick = j break end
    end
    if not pick then
      for j = #w, 1, -1 do if w[j] > 0 then pick = j break end end
    end
    out[i] = list[pick]
    w[pick] = 0
  end
  return out
end

R.exp = exp
return R
