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
local function size_list(s, what)
  if s == nil then return {} end
  if type(s) == 'number' then return {s} end
  if type(s) == 'table' and s.totable then s = s:totable() end
  if type(s) ~= 'table' then
    fail(('%s: expected a shape (a number, a list or a flow.Size), got %s'):format(what or 'shape',
      A.describe(s)))
  end
  for _, v in ipairs(s) do
    if type(v) ~= 'number' then
      fail(('%s: expected a shape of numbers, got an element %s'):format(what or 'shape', A.describe(v)))
    end
  end
  return s
end

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
  A.arg('ComposeTransform', 1, 'parts', parts, 'table|nil')
  self.parts = parts or {}
  local sign, ev, bij = 1, 0, true
  for i, p in ipairs(self.parts) do
    if type(p) ~= 'table' or type(p.forward) ~= 'function' then
      fail(('ComposeTransform: parts[%d] must be a transform, got %s'):format(i, A.describe(p)))
    end
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

local F = function() return flow.nn.functional end

--- SoftplusTransform(): y = log(1 + exp(x)).
-- @function distributions.SoftplusTransform
local Softplus = Transform:subclass('SoftplusTransform')
M.SoftplusTransform = Softplus
Softplus.codomain = constraints.positive
function Softplus._call(_, x) return F().softplus(x) end
function Softplus._inverse(_, y) return (-y):expm1():neg():log() + y end
function Softplus.log_abs_det_jacobian(_, x) return -F().softplus(-x) end

-- torch's offsets K - k + 1 (k = 1..K-1) of the stick-breaking map, as a tensor
local function stick_offset(k, like) return flow.arange(k, 0, -1, {dtype = like.dtype}) end

--- StickBreakingTransform(): R^(K-1) -> the K-simplex.
-- @function distributions.StickBreakingTransform
local StickBreaking = Transform:subclass('StickBreakingTransform')
M.StickBreakingTransform = StickBreaking
StickBreaking.event_dim, StickBreaking.domain, StickBreaking.codomain = 1, constraints.real_vector, constraints.simplex
--- StickBreakingTransform(): R^(K-1) -> the K-simplex (torch's, same offsets)
function StickBreaking._call(_, x)
  local k = x:size(-1)
  local z = (x - stick_offset(k, x):log()):sigmoid()
  local zc = (1 - z):cumprod(-1)
  local P = F().pad
  return P(z, {0, 1}, 'constant', 1) * P(zc, {1, 0}, 'constant', 1)
end
function StickBreaking._inverse(_, y)
  local k = y:size(-1) - 1
  local crop = y:narrow(-1, 1, k)
  local tiny = y.dtype == flow.float64 and 2.2250738585072014e-308 or 1.1754943508222875e-38
  local sf = (1 - crop:cumsum(-1)):clamp(tiny)
  return crop:log() - sf:log() + stick_offset(k, y):log()
end
function StickBreaking.log_abs_det_jacobian(_, x, y)
  local k = x:size(-1)
  local xo = x - stick_offset(k, x):log()
  return (-xo + F().logsigmoid(xo) + y:narrow(-1, 1, k):log()):sum(-1)
end
function StickBreaking.forward_shape(_, shape)
  local s = {unpack(shape)}
  s[#s] = s[#s] + 1
  return s
end
function StickBreaking.inverse_shape(_, shape)
  local s = {unpack(shape)}
  s[#s] = s[#s] - 1
  return s
end

local function diag_embed(d) return d:unsqueeze(-1) * flow.eye(d:size(-1), {dtype = d.dtype}) end

--- LowerCholeskyTransform(): strictly lower part kept, diagonal exponentiated.
-- @function distributions.LowerCholeskyTransform
local LowerCholesky = Transform:subclass('LowerCholeskyTransform')
M.LowerCholeskyTransform = LowerCholesky
LowerCholesky.event_dim = 2
LowerCholesky.domain = constraints.independent(constraints.real, 2)
LowerCholesky.codomain = constraints.lower_cholesky
--- LowerCholeskyTransform(): strictly lower part kept, diagonal exponentiated
function LowerCholesky._call(_, x) return x:tril(-1) + diag_embed(x:diagonal(0, -2, -1):exp()) end
function LowerCholesky._inverse(_, y) return y:tril(-1) + diag_embed(y:diagonal(0, -2, -1):log()) end

--- PositiveDefiniteTransform(): a matrix to a positive-definite one (L L^T of LowerCholeskyTransform).
-- @function distributions.PositiveDefiniteTransform
local PositiveDefinite = Transform:subclass('PositiveDefiniteTransform')
M.PositiveDefiniteTransform = PositiveDefinite
PositiveDefinite.event_dim = 2
PositiveDefinite.domain = constraints.independent(constraints.real, 2)
PositiveDefinite.codomain = constraints.positive_definite
--- PositiveDefiniteTransform(): L L^T of LowerCholeskyTransform's L
function PositiveDefinite._call(_, x)
  local l = LowerCholesky._call(nil, x)
  return l:matmul(l:transpose(-2, -1))
end
function PositiveDefinite._inverse(_, y) return LowerCholesky._inverse(nil, flow.linalg.cholesky(y)) end

-- torch's tril_matrix_to_vec / vec_to_tril_matrix (row order, entries with
-- j <= i + diag), through index_select so they are differentiable
local function tril_positions(n, diag)
  local pos = {}
  for i = 1, n do
    for j = 1, n do
      if j <= i + diag then pos[#pos + 1] = (i - 1) * n + j end
    end
  end
  return pos
end
local function tril_matrix_to_vec(mat, diag)
  local n = mat:size(-1)
  local idx = flow.tensor(tril_positions(n, diag or 0), {dtype = flow.int64, device = mat.device})
  local s = mat:size():totable()
  s[#s] = nil
  s[#s] = n * n
  return mat:reshape(s):index_select(-1, idx)
end
local function vec_to_tril_matrix(vec, diag)
  diag = diag or 0
  local len = vec:size(-1)
  local a = 1 + 2 * diag
  local nf = (-a + math.sqrt(a * a + 8 * len + 4 * math.abs(diag) * (diag + 1))) / 2
  local n = math.floor(nf + 0.5)
  if math.abs(n - nf) > 1e-9 or #tril_positions(n, diag) ~= len then
    fail(('vec_to_tril_matrix: the size of the last dimension is %d, which cannot be expressed as the lower '
      .. 'triangular part of a square D x D matrix'):format(len))
  end
  -- every cell picks its vector entry, or the appended zero (index len + 1)
  local map = {}
  for k = 1, n * n do map[k] = len + 1 end
  for k, p in ipairs(tril_positions(n, diag)) do map[p] = k end
  local zs = vec:size():totable()
  zs[#zs] = 1
  local padded = flow.cat({vec, flow.zeros(zs, {dtype = vec.dtype, device = vec.device})}, -1)
  local out = padded:index_select(-1, flow.tensor(map, {dtype = flow.int64, device = vec.device}))
  local s = vec:size():totable()
  s[#s] = nil
  s[#s + 1], s[#s + 2] = n, n
  return out:reshape(s)
end
M._tril_matrix_to_vec, M._vec_to_tril_matrix = tril_matrix_to_vec, vec_to_tril_matrix

--- CorrCholeskyTransform(): unconstrained vectors to Cholesky factors of correlation matrices.
-- @function distributions.CorrCholeskyTransform
local CorrCholesky = Transform:subclass('CorrCholeskyTransform')
M.CorrCholeskyTransform = CorrCholesky
CorrCholesky.event_dim = 1
CorrCholesky.domain, CorrCholesky.codomain = constraints.real_vector, constraints.corr_cholesky
--- CorrCholeskyTransform(): R^(D(D-1)/2) -> Cholesky factors of D x D
-- correlation matrices (torch's: tanh, then a signed stick-breaking per row)
function CorrCholesky._call(_, x)
  x = x:tanh()
  local eps = x:element_size() == 8 and 2.220446049250313e-16 or 1.1920928955078125e-07
  x = x:clamp(-1 + eps, 1 - eps)
  local r = vec_to_tril_matrix(x, -1)
  local z = r ^ 2
  local z1m = (1 - z):sqrt():cumprod(-1)
  local n = r:size(-1)
  r = r + flow.eye(n, {dtype = r.dtype, device = r.device})
  return r * F().pad(z1m:narrow(-1, 1, n - 1), {1, 0}, 'constant', 1)
end
function CorrCholesky._inverse(_, y)
  local n = y:size(-1)
  local cs = 1 - (y * y):cumsum(-1)
  local shifted = F().pad(cs:narrow(-1, 1, n - 1), {1, 0}, 'constant', 1)
  local t = tril_matrix_to_vec(y, -1) / tril_matrix_to_vec(shifted, -1):sqrt()
  return ((1 + t) / (1 - t)):log() / 2
end
function CorrCholesky.log_abs_det_jacobian(_, x, y)
  local cs = tril_matrix_to_vec(1 - (y * y):cumsum(-1), -2)
  local stick = cs:log():sum(-1) * 0.5
  local tanh = ((x + F().softplus(x * -2) - math.log(2)):sum(-1)) * -2
  return stick + tanh
end
function CorrCholesky.forward_shape(_, shape)
  local s = {unpack(size_list(shape))}
  if #s < 1 then fail('CorrCholeskyTransform: too few dimensions on input') end
  local nv = s[#s]
  local d = math.floor(math.sqrt(0.25 + 2 * nv) + 0.5 + 0.5)
  if d * (d - 1) / 2 ~= nv then
    fail(('CorrCholeskyTransform: the input size %d is not D (D - 1) / 2 for any D'):format(nv))
  end
  s[#s] = d
  s[#s + 1] = d
  return s
end
function CorrCholesky.inverse_shape(_, shape)
  local s = {unpack(size_list(shape))}
  if #s < 2 then fail('CorrCholeskyTransform: too few dimensions on input') end
  if s[#s] ~= s[#s - 1] then fail('CorrCholeskyTransform: input is not square') end
  local d = s[#s]
  s[#s] = nil
  s[#s] = d * (d - 1) / 2
  return s
end

local Reshape = Transform:subclass('ReshapeTransform')
M.ReshapeTransform = Reshape
--- ReshapeTransform(in_shape, out_shape): the event reshaped (same numel)
function Reshape:__init(in_shape, out_shape)
  local function numel(s) local n = 1 for _, v in ipairs(s) do n = n * v end return n end
  self.in_shape = size_list(in_shape, 'ReshapeTransform: in_shape')
  self.out_shape = size_list(out_shape, 'ReshapeTransform: out_shape')
  if numel(self.in_shape) ~= numel(self.out_shape) then
    fail(('ReshapeTransform: in_shape %s and out_shape %s have different numbers of elements'):format(
      A.shape_str(self.in_shape), A.shape_str(self.out_shape)))
  end
  self.event_dim = #self.in_shape
  self.domain = constraints.independent(constraints.real, #self.in_shape)
  self.codomain = constraints.independent(constraints.real, #self.out_shape)
end
local function reshape_event(x, from, to)
  local s = x:size():totable()
  local b = {}
  for i = 1, #s - #from do b[i] = s[i] end
  for _, v in ipairs(to) do b[#b + 1] = v end
  return x:reshape(b)
end
function Reshape:_call(x) return reshape_event(x, self.in_shape, self.out_shape) end
function Reshape:_inverse(y) return reshape_event(y, self.out_shape, self.in_shape) end
function Reshape:log_abs_det_jacobian(x)
  local s = x:size():totable()
  local b = {}
  for i = 1, #s - #self.in_shape do b[i] = s[i] end
  return flow.zeros(b, {dtype = x.dtype})
end
function Reshape:forward_shape(shape)
  local b = {}
  for i = 1, #shape - #self.in_shape do b[i] = shape[i] end
  for _, v in ipairs(self.out_shape) do b[#b + 1] = v end
  return b
end

local IndependentT = Transform:subclass('IndependentTransform')
M.IndependentTransform = IndependentT
--- IndependentTransform(base, n): base with n more rightmost dims in its event
function IndependentT:__init(base, n)
  if not class.isinstance(base, Transform) then
    fail(('IndependentTransform: base_transform must be a Transform, got %s'):format(A.describe(base)))
  end
  if type(n) ~= 'number' or n < 0 or n % 1 ~= 0 then
    fail(('IndependentTransform: reinterpreted_batch_ndims must be an integer >= 0, got %s'):format(
      A.describe(n)))
  end
  self.base_transform, self.reinterpreted_batch_ndims = base, n
  self.event_dim, self.sign, self.bijective = base.event_dim + n, base.sign, base.bijective
  self.domain = constraints.independent(base.domain, n)
  self.codomain = constraints.independent(base.codomain, n)
end
function IndependentT:_call(x) return self.base_transform:forward(x) end
function IndependentT:_inverse(y) return self.base_transform:inverse(y) end
function IndependentT:log_abs_det_jacobian(x, y)
  return sum_rightmost(self.base_transform:log_abs_det_jacobian(x, y), self.reinterpreted_batch_ndims)
end

local CDF = Transform:subclass('CumulativeDistributionTransform')
M.CumulativeDistributionTransform = CDF
CDF.codomain = constraints.unit_interval
--- CumulativeDistributionTransform(dist): y = dist:cdf(x)
function CDF:__init(dist)
  if type(dist) ~= 'table' or rawget(dist, 'batch_shape') == nil then
    error(('CumulativeDistributionTransform: dist must be a distribution, got %s'):format(
      flow.is_tensor(dist) and 'a tensor' or type(dist)), 3)
  end
  self.distribution = dist
  self.domain = dist.support
end
function CDF:_call(x) return self.distribution:cdf(x) end
function CDF:_inverse(y) return self.distribution:icdf(y) end
function CDF:log_abs_det_jacobian(x) return self.distribution:log_prob(x) end

-- Cat/Stack: transforms applied to pieces of a dim (1-based `dim`, as flow's
-- dims; negative counts from the end)
local function check_parts(name, ts)
  if type(ts) ~= 'table' or #ts == 0 then fail(name .. ': expected a non-empty list of transforms') end
  for i, t in ipairs(ts) do
    if not (type(t) == 'table' and t.forward) then fail(('%s: element %d is not a transform'):format(name, i)) end
  end
end

local Cat = Transform:subclass('CatTransform')
M.CatTransform = Cat
--- CatTransform(transforms, dim = 1, lengths = {1, 1, ...}): transforms[i]
-- applied to the i-th block (lengths[i] long) of dim `dim`
function Cat:__init(ts, dim, lengths)
  check_parts('CatTransform', ts)
  self.transforms, self.dim = ts, dim or 1
  self.lengths = lengths or {}
  for i = 1, #ts do self.lengths[i] = self.lengths[i] or 1 end
  if #self.lengths ~= #ts then fail('CatTransform: lengths must have one entry per transform') end
  local ev, bij = 0, true
  for _, t in ipairs(ts) do ev, bij = math.max(ev, t.event_dim), bij and t.bijective end
  self.event_dim, self.bijective, self.sign = ev, bij, nil
end
local function cat_map(self, x, method)
  local out, start = {}, 1
  for i, t in ipairs(self.transforms) do
    out[i] = t[method](t, x:narrow(self.dim, start, self.lengths[i]))
    start = start + self.lengths[i]
  end
  if start - 1 ~= x:size(self.dim) then
    fail(('CatTransform: the lengths sum to %d but dim %d has size %d'):format(start - 1, self.dim, x:size(self.dim)))
  end
  return flow.cat(out, self.dim)
end
function Cat:_call(x) return cat_map(self, x, 'forward') end
function Cat:_inverse(y) return cat_map(self, y, 'inverse') end
function Cat:log_abs_det_jacobian(x, y)
  local parts, start = {}, 1
  for i, t in ipairs(self.transforms) do
    local len = self.lengths[i]
    local l = t:log_abs_det_jacobian(x:narrow(self.dim, start, len), y:narrow(self.dim, start, len))
    parts[i] = sum_rightmost(l, self.event_dim - t.event_dim)
    start = start + len
  end
  if self.event_dim == 0 then return flow.cat(parts, self.dim) end
  local total = parts[1]
  for i = 2, #parts do total = total + parts[i] end
  return total
end

local Stack = Transform:subclass('StackTransform')
M.StackTransform = Stack
--- StackTransform(transforms, dim = 1): transforms[i] applied to x:select(dim, i)
function Stack:__init(ts, dim)
  check_parts('StackTransform', ts)
  self.transforms, self.dim = ts, dim or 1
  local bij = true
  for _, t in ipairs(ts) do bij = bij and t.bijective end
  self.bijective, self.sign = bij, nil
end
local function stack_map(self, x, method)
  if x:size(self.dim) ~= #self.transforms then
    fail(('StackTransform: dim %d has size %d but there are %d transforms'):format(
      self.dim, x:size(self.dim), #self.transforms))
  end
  local out = {}
  for i, t in ipairs(self.transforms) do out[i] = t[method](t, x:select(self.dim, i)) end
  return flow.stack(out, self.dim)
end
function Stack:_call(x) return stack_map(self, x, 'forward') end
function Stack:_inverse(y) return stack_map(self, y, 'inverse') end
function Stack:log_abs_det_jacobian(x, y)
  local out = {}
  for i, t in ipairs(self.transforms) do
    out[i] = t:log_abs_det_jacobian(x:select(self.dim, i), y:select(self.dim, i))
  end
  return flow.stack(out, self.dim)
end

M.identity_transform = Compose({})
------------------------------------------------------------------ biject_to / transform_to
-- torch's two registries: biject_to(c) is a bijection from the reals onto c
-- (simplex: StickBreaking), transform_to(c) any map onto it (simplex:
-- Softmax); both are found from the constraint's kind (the name before its
-- parameters) and its bounds.
local function kind_of(c) return type(c) == 'table' and type(c.name) == 'string' and c.name:match('^(%w+)') end
local function lower_map(c)
  local lo = c.lower_bound
  if lo == 0 then return Exp() end
  return Compose({Exp(), Affine(lo, 1)})
end
local function interval_map(c)
  local lo, hi = c.lower_bound, c.upper_bound
  if lo == 0 and hi == 1 then return Sigmoid() end
  return Compose({Sigmoid(), Affine(lo, hi - lo)})
end
local function registry(simplex)
  local r = {
    Real = function() return M.identity_transform end,
    GreaterThan = lower_map, GreaterThanEq = lower_map,
    LessThan = function(c) return Compose({Exp(), Affine(c.upper_bound, -1)}) end,
    Interval = interval_map, HalfOpenInterval = interval_map,
    Simplex = simplex,
    LowerCholesky = function() return LowerCholesky() end,
    PositiveDefinite = function() return PositiveDefinite() end,
    CorrCholesky = function() return CorrCholesky() end,
  }
  local self
  r.IndependentConstraint = function(c)
    return IndependentT(self(c.base_constraint), c.reinterpreted_batch_ndims)
  end
  self = function(c)
    local f = r[kind_of(c)]
    if not f then fail(('biject_to/transform_to: no transform is registered for the constraint %s'):format(
      tostring(type(c) == 'table' and c.name or c))) end
    return f(c)
  end
  return self, r
end
local biject, biject_reg = registry(function() return StickBreaking() end)
local transform, transform_reg = registry(function() return Softmax() end)
M.biject_to = setmetatable({register = function(kind, fn) biject_reg[kind] = fn end},
  {__call = function(_, c) return biject(c) end})
M.transform_to = setmetatable({register = function(kind, fn) transform_reg[kind] = fn end},
  {__call = function(_, c) return transform(c) end})

M._sum_rightmost = sum_rightmost
return M
