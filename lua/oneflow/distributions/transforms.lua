-- oneflow.distributions.transforms: invertible maps for
-- TransformedDistribution (torch.distributions.transforms). A transform t:
-- t(x) (or t:forward(x)), t.inv (the inverse transform), t:inverse(y),
-- t:log_abs_det_jacobian(x, y), t.sign (+1/-1 for monotone scalar maps),
-- t.bijective, t.event_dim, t.domain, t.codomain.
local flow = require 'oneflow'
local class = require 'oneflow.class'
local A = require 'oneflow._args'
local constraints = require 'oneflow.distributions.constraints'

local M = {}
local fail = A.fail

local Transform = class('Transform')
--- Transform: the base class of bijections (called as t(x); t:inv(y), t:log_abs_det_jacobian(x, y), domain,
-- codomain).
M.Transform = Transform
Transform.bijective, Transform.sign, Transform.event_dim = true, 1, 0
Transform.domain, Transform.codomain = constraints.real, constraints.real
function Transform:__call(x) return self:forward(x) end
function Transform.__tostring(t) return t.__name .. '()' end
function Transform:forward(x) return self:_call(x) end
function Transform:inverse(y) return self:_inverse(y) end
function Transform:_call() fail(self.__name .. ': forward is not defined') end
function Transform:_inverse() fail(self.__name .. ': the inverse is not defined (not bijective)') end
function Transform:log_abs_det_jacobian()
  fail(self.__name .. ': log_abs_det_jacobian is not defined')
end

-- t.inv: a transform running t backwards
local Inverse = Transform:subclass('_InverseTransform')
function Inverse:__init(t)
  self._inv, self.sign, self.event_dim, self.bijective = t, t.sign, t.event_dim, t.bijective
  self.domain, self.codomain = t.codomain, t.domain
end
function Inverse:_call(y) return self._inv:_inverse(y) end
function Inverse:_inverse(x) return self._inv:_call(x) end
function Inverse:log_abs_det_jacobian(x, y) return -self._inv:log_abs_det_jacobian(y, x) end
-- `inv` is a field made on first use
local function with_inv(cls)
  local index = cls.__index
  cls.__index = function(t, k)
    if k == 'inv' then
      local i = rawget(t, '_inv_cache')
      if not i then
        i = getmetatable(t) == Inverse and t._inv or Inverse(t)
        rawset(t, '_inv_cache', i)
      end
      return i
    end
    if type(index) == 'function' then return index(t, k) end
    return index[k]
  end
end
function Transform.__setup(cls) with_inv(cls) end
with_inv(Transform)
with_inv(Inverse)   -- made before __setup was set

local function sum_rightmost(x, n)
  for _ = 1, n do x = x:sum(-1) end
  return x
end

--- ExpTransform(): y = exp(x).
-- @function distributions.ExpTransform
local Exp = Transform:subclass('ExpTransform')
M.ExpTransform = Exp
Exp.codomain = constraints.positive
function Exp._call(_, x) return x:exp() end
function Exp._inverse(_, y) return y:log() end
function Exp.log_abs_det_jacobian(_, x) return x end

local Affine = Transform:subclass('AffineTransform')
M.AffineTransform = Affine
--- AffineTransform(loc, scale[, event_dim = 0]): y = loc + scale * x
function Affine:__init(loc, scale, event_dim)
  self.loc, self.scale, self.event_dim = loc, scale, event_dim or 0
  if type(scale) == 'number' then self.sign = scale > 0 and 1 or (scale < 0 and -1 or 0)
  else self.sign = nil end
end
function Affine:_call(x) return x * self.scale + self.loc end
function Affine:_inverse(y) return (y - self.loc) / self.scale end
function Affine:log_abs_det_jacobian(x)
  local s = self.scale
  local r
  if type(s) == 'number' then r = flow.full(x:size():totable(), math.log(math.abs(s)), {dtype = x.dtype})
  else r = s:abs():log():expand(flow.broadcast_tensors(x, s)[1]:size():totable()) end
  return sum_rightmost(r, self.event_dim)
end

--- SigmoidTransform(): y = sigmoid(x).
-- @function distributions.SigmoidTransform
local Sigmoid = Transform:subclass('SigmoidTransform')
M.SigmoidTransform = Sigmoid
Sigmoid.codomain = constraints.unit_interval
function Sigmoid._call(_, x) return x:sigmoid() end
function Sigmoid._inverse(_, y)
  local eps = y.dtype == flow.float64 and 2.220446049250313e-16 or 1.1920928955078125e-07
  local c = y:clamp(eps, 1 - eps)
  return c:log() - (-c):log1p()
end
function Sigmoid.log_abs_det_jacobian(_, x)
  local F = flow.nn.functional
  return -F.softplus(-x) - F.softplus(x)
end

--- TanhTransform(): y = tanh(x).
-- @function distributions.TanhTransform
local Tanh = Transform:subclass('TanhTransform')
M.TanhTransform = Tanh
Tanh.codomain = constraints.interval(-1, 1)
function Tanh._call(_, x) return x:tanh() end
function Tanh._inverse(_, y) return ((1 + y) / (1 - y)):log() * 0.5 end
function Tanh.log_abs_det_jacobian(_, x)
  return (math.log(2) - x - flow.nn.functional.softplus(x * -2)) * 2
end

--- AbsTransform(): y = |x| (not bijective; no inverse log-det).
-- @function distributions.AbsTransform
local Abs = Transform:subclass('AbsTransform')
M.AbsTransform = Abs
Abs.bijective, Abs.codomain = false, constraints.positive
function Abs._call(_, x) return x:abs() end
function Abs._inverse(_, y) return y end

local Power = Transform:subclass('PowerTransform')
M.PowerTransform = Power
Power.domain, Power.codomain = constraints.positive, constraints.positive
--- PowerTransform(exponent): y = x ^ exponent on the positive reals
function Power:__init(exponent)
  self.exponent = exponent
  if type(exponent) == 'number' then self.sign = exponent > 0 and 1 or -1 else self.sign = nil end
end
function Power:_call(x) return x ^ self.exponent end
function Power:_inverse(y)
  return y ^ (type(self.exponent) == 'number' and 1 / self.exponent or self.exponent:reciprocal())
end
function Power:log_abs_det_jacobian(x, y) return (y * self.exponent / x):abs():log() end

--- SoftmaxTransform(): y = softmax(x) over the last dim (not bijective).
-- @function distributions.SoftmaxTransform
local Softmax = Transform:subclass('SoftmaxTransform')
M.SoftmaxTransform = Softmax
Softmax.bijective, Softmax.event_dim, Softmax.codomain = false, 1, constraints.simplex
function Softmax._call(_, x) return x:softmax(-1) end
function Softmax._inverse(_, y) return y:log() end

local Compose = Transform:subclass('ComposeTransform')
M.ComposeTransform = Compose
--- ComposeTransform({t1, t2, ...}): t1 first
function Compose:__init(parts)
  self.parts = parts or {}
  local sign, ev, bij = 1, 0, true
  for _, p in ipairs(self.parts) do
    sign = (sign and p.sign) and sign * p.sign or nil
    ev = math.max(ev, p.event_dim)
    bij = bij and p.bijective
  end
  self.sign, self.event_dim, self.bijective = sign, ev, bij
  if #self.parts > 0 then self.domain, self.codomain = self.parts[1].domain, self.parts[#self.parts].codomain end
end
function Compose:_call(x)
  for _, p in ipairs(self.parts) do x = p:forward(x) end
  return x
end
function Compose:_inverse(y)
  for i = #self.parts, 1, -1 do y = self.parts[i]:inverse(y) end
  return y
end
function Compose:log_abs_det_jacobian(x, y)
  if #self.parts == 0 then return flow.zeros_like(x) end
  local total = 0
  for i, p in ipairs(self.parts) do
    local ny = i == #self.parts and y or p:forward(x)
    total = total + sum_rightmost(p:log_abs_det_jacobian(x, ny), self.event_dim - p.event_dim)
    x = ny
  end
  return total
end
M.identity_transform = Compose({})
M._sum_rightmost = sum_rightmost
return M
