-- oneflow.nn.initialization, exposed as nn.init: in-place initializers with
-- PyTorch's formulas. Each runs under no_grad and returns the tensor.
--   nn.init.kaiming_uniform_(w, {a = math.sqrt(5)})
--   nn.init.xavier_normal_(w, {gain = nn.init.calculate_gain('tanh')})
local flow = require 'oneflow'   -- the table being built (used at call time)
local autograd = require 'oneflow.autograd'
local U = require 'oneflow.nn._util'

local parse, fail, no_grad = U.parse, U.fail, autograd.no_grad
local I = {}

------------------------------------------------------------------ gains and fans
local linear_fns = {linear = true, conv1d = true, conv2d = true, conv3d = true,
                    conv_transpose1d = true, conv_transpose2d = true, conv_transpose3d = true,
                    sigmoid = true}

--- nn.init.calculate_gain(nonlinearity, param): the recommended gain.
function I.calculate_gain(nonlinearity, param)
  if linear_fns[nonlinearity] then return 1 end
  if nonlinearity == 'tanh' then return 5 / 3 end
  if nonlinearity == 'relu' then return math.sqrt(2) end
  if nonlinearity == 'selu' then return 3 / 4 end
  if nonlinearity == 'leaky_relu' then
    local slope = param
    if slope == nil then slope = 0.01 end
    if type(slope) ~= 'number' then
      fail('calculate_gain: negative_slope ' .. tostring(slope) .. ' is not a valid number')
    end
    return math.sqrt(2 / (1 + slope * slope))
  end
  fail('calculate_gain: unsupported nonlinearity ' .. tostring(nonlinearity))
end

--- fan_in, fan_out of a weight [out, in, *kernel].
function I._calculate_fan_in_and_fan_out(t)
  local nd = t:dim()
  if nd < 2 then
    fail(('init: fan in and fan out can not be computed for a tensor with fewer than 2 dims, got %s')
         :format(U.shape_str(t)))
  end
  local receptive = 1
  for d = 3, nd do receptive = receptive * t:size(d) end
  return t:size(2) * receptive, t:size(1) * receptive
end

local function fan(t, mode)
  local fin, fout = I._calculate_fan_in_and_fan_out(t)
  if mode == 'fan_in' then return fin end
  if mode == 'fan_out' then return fout end
  fail(("init: mode %s not supported, please use 'fan_in' or 'fan_out'"):format(tostring(mode)))
end

------------------------------------------------------------------ simple fills
--- nn.init.uniform_(t, a = 0, b = 1): fills t with uniform numbers in [a, b), in place.
function I.uniform_(t, ...)
  local a = parse('uniform_', {{'a', 0}, {'b', 1}, {'generator', nil}}, ...)
  return no_grad(function() return t:uniform_(a.a, a.b) end)
end

function I.normal_(t, ...)
  local a = parse('normal_', {{'mean', 0}, {'std', 1}, {'generator', nil}}, ...)
  return no_grad(function() return t:normal_(a.mean, a.std) end)
end

--- nn.init.constant_(t, val): fills t with val in place.
function I.constant_(t, val) return no_grad(function() return t:fill_(val) end) end
function I.ones_(t) return I.constant_(t, 1) end
function I.zeros_(t) return I.constant_(t, 0) end

--- nn.init.eye_(w): the identity for a 2-D tensor.
function I.eye_(t)
  if t:dim() ~= 2 then fail('eye_: only tensors with 2 dimensions are supported, got ' .. U.shape_str(t)) end
  return no_grad(function() return t:copy_(flow.eye(t:size(1), t:size(2), {dtype = t.dtype})) end)
end

--- nn.init.dirac_(w, groups = 1): identity convolution weights (3-5 dims).
function I.dirac_(t, groups)
  groups = groups or 1
  require('oneflow._args').arg('dirac_', 2, 'groups', groups, 'integer')
  local nd = t:dim()
  if nd < 3 or nd > 5 then fail('dirac_: only tensors with 3, 4, or 5 dimensions are supported') end
  local out_g = t:size(1) / groups
  if out_g ~= math.floor(out_g) then fail('dirac_: dim 1 is not divisible by groups') end
  local min_dim = math.min(out_g, t:size(2))
  return no_grad(function()
    t:zero_()
    for g = 0, groups - 1 do
      for d = 1, min_dim do
        local idx = {g * out_g + d, d}
        for k = 3, nd do idx[k] = math.floor(t:size(k) / 2) + 1 end
        t[idx]:fill_(1)
      end
    end
    return t
  end)
end

------------------------------------------------------------------ scaled
local gain_spec = {{'gain', 1}, {'generator', nil}}

--- nn.init.xavier_uniform_(t, gain = 1): Glorot uniform initialisation, in place.
function I.xavier_uniform_(t, ...)
  local a = parse('xavier_uniform_', gain_spec, ...)
  local fin, fout = I._calculate_fan_in_and_fan_out(t)
  local bound = a.gain * math.sqrt(6 / (fin + fout))
  return no_grad(function() return t:uniform_(-bound, bound) end)
end

--- nn.init.xavier_normal_(t, gain = 1): Glorot normal initialisation, in place.
function I.xavier_normal_(t, ...)
  local a = parse('xavier_normal_', gain_spec, ...)
  local fin, fout = I._calculate_fan_in_and_fan_out(t)
  local std = a.gain * math.sqrt(2 / (fin + fout))
  return no_grad(function() return t:normal_(0, std) end)
end

local kaiming_spec = {{'a', 0}, {'mode', 'fan_in'}, {'nonlinearity', 'leaky_relu'}, {'generator', nil}}

local function kaiming_std(name, t, ...)
  local a = parse(name, kaiming_spec, ...)
  if t:numel() == 0 then return nil end
  return I.calculate_gain(a.nonlinearity, a.a) / math.sqrt(fan(t, a.mode))
end

--- nn.init.kaiming_uniform_(w, {a = 0, mode = 'fan_in', nonlinearity = 'leaky_relu'})
function I.kaiming_uniform_(t, ...)
  local std = kaiming_std('kaiming_uniform_', t, ...)
  if not std then return t end
  local bound = math.sqrt(3) * std
  return no_grad(function() return t:uniform_(-bound, bound) end)
end

--- nn.init.kaiming_normal_(t, {a = 0, mode = 'fan_in', nonlinearity = 'leaky_relu'}): He normal initialisation,
-- in place.
function I.kaiming_normal_(t, ...)
  local std = kaiming_std('kaiming_normal_', t, ...)
  if not std then return t end
  return no_grad(function() return t:normal_(0, std) end)
end

------------------------------------------------------------------ truncated normal
-- erfinv(x) elementwise: Giles' approximation, then two Newton steps on erf
local function erfinv(x)
  local w = -((1 - x) * (1 + x)):log()
  local w1 = w - 2.5
  local p1 = w1 * 0 + 2.81022636e-08
  for _, c in ipairs({3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                      -0.00125372503, -0.00417768164, 0.246640727, 1.50140941}) do
    p1 = p1 * w1 + c
  end
  local w2 = w:sqrt() - 3
  local p2 = w2 * 0 - 0.000200214257
  for _, c in ipairs({0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                      -0.0076224613, 0.00943887047, 1.00167406, 2.83297682}) do
    p2 = p2 * w2 + c
  end
  local y = flow.where(w:lt(5), p1, p2) * x
  for _ = 1, 2 do
    y = y - (y:erf() - x) / ((-(y * y)):exp() * (2 / math.sqrt(math.pi)))
  end
  return y
end
I._erfinv = erfinv

local function norm_cdf(x)
  return (1 + flow.tensor(x / math.sqrt(2), {dtype = flow.float64}):erf():item()) / 2
end

--- nn.init.trunc_normal_(w, {mean = 0, std = 1, a = -2, b = 2}): a normal
-- truncated to [a, b], drawn by the inverse CDF of a uniform (PyTorch's method).
function I.trunc_normal_(t, ...)
  local o = parse('trunc_normal_', {{'mean', 0}, {'std', 1}, {'a', -2}, {'b', 2}, {'generator', nil}}, ...)
  local l, u = norm_cdf((o.a - o.mean) / o.std), norm_cdf((o.b - o.mean) / o.std)
  return no_grad(function()
    local x = flow.empty(t:size():totable(), {dtype = flow.float64}):uniform_(2 * l - 1, 2 * u - 1)
    local y = erfinv(x) * (o.std * math.sqrt(2)) + o.mean
    return t:copy_(y:clamp(o.a, o.b))
  end)
end

------------------------------------------------------------------ orthogonal / sparse
-- Q of the QR of an m x n table (m >= n) by modified Gram-Schmidt, as a
-- list of columns. R's diagonal comes out positive, which is the sign
-- convention PyTorch enforces after its QR.
local function gram_schmidt(a, m, n)
  local q = {}
  for j = 1, n do
    local v = {}
    for i = 1, m do v[i] = a[i][j] end
    for k = 1, j - 1 do
      local qk, dot = q[k], 0
      for i = 1, m do dot = dot + qk[i] * v[i] end
      for i = 1, m do v[i] = v[i] - dot * qk[i] end
    end
    local nrm = 0
    for i = 1, m do nrm = nrm + v[i] * v[i] end
    nrm = math.sqrt(nrm)
    for i = 1, m do v[i] = nrm > 0 and v[i] / nrm or 0 end
    q[j] = v
  end
  return q
end

--- nn.init.orthogonal_(w, gain = 1): a (semi-)orthogonal matrix from the QR
-- of a normal matrix (w flattened to [rows, cols]).
function I.orthogonal_(t, ...)
  local a = parse('orthogonal_', gain_spec, ...)
  if t:dim() < 2 then fail('orthogonal_: only tensors with 2 or more dimensions are supported') end
  if t:numel() == 0 then return t end
  local rows = t:size(1)
  local cols = t:numel() / rows
  local m, n = math.max(rows, cols), math.min(rows, cols)
  local g = flow.randn(m, n, {dtype = flow.float64}):totable()
  local q = gram_schmidt(g, m, n)
  local mat = {}
  for i = 1, rows do
    mat[i] = {}
    for j = 1, cols do
      mat[i][j] = rows >= cols and q[j][i] or q[i][j]
      mat[i][j] = mat[i][j] * a.gain
    end
  end
  return no_grad(function()
    return t:copy_(flow.tensor(mat, {dtype = flow.float64}):view(t:size()))
  end)
end

--- nn.init.sparse_(w, sparsity, std = 0.01): 2-D; in each column a fraction
-- `sparsity` of the rows is zero, the rest N(0, std).
function I.sparse_(t, sparsity, std)
  require('oneflow._args').arg('sparse_', 2, 'sparsity', sparsity, 'number')
  if t:dim() ~= 2 then fail('sparse_: only tensors with 2 dimensions are supported') end
  std = std or 0.01
  local rows, cols = t:size(1), t:size(2)
  local nz = math.ceil(sparsity * rows)
  return no_grad(function()
    t:normal_(0, std)
    for c = 1, cols do
      local perm = flow.randperm(rows):totable()
      for k = 1, nz do t[{perm[k], c}]:fill_(0) end
    end
    return t
  end)
end

-- Every initializer checks its first argument first, so nn.init.xavier_uniform_(nil)
-- says "xavier_uniform_: argument 1 (tensor) must be a tensor, got nil" at
-- the user's line (as the F functions do, nn/functional/init.lua).
do
  local A, is_tensor = require('oneflow._args'), require('oneflow.tensor').is_tensor
  local names = {}
  for k, v in pairs(I) do
    if type(v) == 'function' and k:sub(1, 1) ~= '_' and k ~= 'calculate_gain' then names[#names + 1] = k end
  end
  for _, k in ipairs(names) do
    local f = I[k]
    I[k] = function(t, ...)
      if not is_tensor(t) then A.check_tensor(k, t, 'tensor', 1) end
      return f(t, ...)
    end
  end
end

return I
