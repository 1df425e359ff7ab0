-- oneflow.ops.extras: more of PyTorch's tensor functions, written as Lua
-- compositions of the differentiable primitives (so autograd needs no new
-- rules). Dims are 1-based (negative from the end); index results are 1-based.
--   diagonals: diag, diagonal, trace, diag_embed, tril_indices, triu_indices
--   comparison: isclose, allclose, equal
--   pointwise: lerp, addcmul, addcdiv, frac, hypot, logaddexp, fmax, fmin,
--              xlogy, heaviside, sgn, signbit, isneginf, isposinf, nan_to_num
--   reductions: count_nonzero, nansum, nanmean, var_mean, std_mean, aminmax
-- Shapes and maths are in extras_shape.lua, order statistics, searching and
-- einsum in extras_stats.lua.
local X = require 'oneflow.ops._extras'
local def, is_tensor, is_options, flow, EMPTY = X.def, X.is_tensor, X.is_options, X.flow, X.EMPTY
local int64, bool, shape_str, check_tensor = X.int64, X.bool, X.shape_str, X.check_tensor
local norm_dim, is_float, as_tensor, zeros, T = X.norm_dim, X.is_float, X.as_tensor, X.zeros, X.T

------------------------------------------------------------------ diagonals
--- flow.diag_embed(x, offset = 0, dim1 = -2, dim2 = -1): the last dim of x
-- becomes the diagonal (shifted by offset) of the dims dim1, dim2 of the
-- result, which has one more dim; the rest is zero.
local function diag_embed(x, offset, dim1, dim2)
  check_tensor('diag_embed', x)
  if is_options(offset) then
    offset, dim1, dim2 = offset.offset, offset.dim1, offset.dim2
  end
  offset, dim1, dim2 = offset or 0, dim1 or -2, dim2 or -1
  if x:dim() == 0 then error('diag_embed: expected a tensor with at least 1 dim, got a 0-d tensor', 2) end
  local nd = x:dim() + 1
  local d1, d2 = norm_dim('diag_embed', dim1, nd), norm_dim('diag_embed', dim2, nd)
  if d1 == d2 then
    error(('diag_embed: dim1 and dim2 must differ, both are %d'):format(d1), 2)
  end
  local n, k = x:size(-1), math.abs(offset)
  local batch = x:size():totable()
  batch[#batch] = nil
  local esh = x:size():totable()
  esh[#esh + 1] = n
  local full = x:unsqueeze(-1):expand(unpack(esh))
  local eye = flow.eye(n, {dtype = bool, device = x.device})
  local m = flow.where(eye, full, zeros({}, x))                    -- (..., n, n)
  if k > 0 then
    local sh = {unpack(batch)}
    sh[#sh + 1], sh[#sh + 2] = n, k
    local cols = zeros(sh, x)                                       -- (..., n, k)
    m = offset > 0 and flow.cat({cols, m}, -1) or flow.cat({m, cols}, -1)
    sh[#sh - 1], sh[#sh] = k, n + k
    local rows = zeros(sh, x)                                       -- (..., k, n+k)
    m = offset > 0 and flow.cat({m, rows}, -2) or flow.cat({rows, m}, -2)
  end
  -- the two new dims (now last) go to positions d1 and d2
  local perm, b = {}, 1
  for p = 1, nd do
    if p == d1 then perm[p] = nd - 1
    elseif p == d2 then perm[p] = nd
    else perm[p] = b; b = b + 1 end
  end
  return m:permute(unpack(perm))
end
def('diag_embed', diag_embed)

--- x:diagonal(offset = 0, dim1 = 1, dim2 = 2) (or {offset =, dim1 =, dim2 =}):
-- the diagonal of the dims dim1, dim2, appended as the last dim (a copy).
local function diagonal(x, offset, dim1, dim2)
  check_tensor('diagonal', x)
  if is_options(offset) then
    offset, dim1, dim2 = offset.offset, offset.dim1, offset.dim2
  end
  offset, dim1, dim2 = offset or 0, dim1 or 1, dim2 or 2
  local nd = x:dim()
  if nd < 2 then
    error(('diagonal: expected a tensor with at least 2 dims, got shape %s'):format(shape_str(x)), 2)
  end
  local d1, d2 = norm_dim('diagonal', dim1, nd), norm_dim('diagonal', dim2, nd)
  if d1 == d2 then
    error(('diagonal: dim1 and dim2 must differ, both are %d'):format(d1), 2)
  end
  local perm, rest = {}, {}
  for p = 1, nd do
    if p ~= d1 and p ~= d2 then perm[#perm + 1] = p; rest[#rest + 1] = x:size(p) end
  end
  perm[#perm + 1], perm[#perm + 2] = d1, d2
  local n, m = x:size(d1), x:size(d2)
  local r0, c0 = math.max(0, -offset), math.max(0, offset)
  local len = math.max(0, math.min(n - r0, m - c0))
  local idx = {}
  for i = 0, len - 1 do idx[i + 1] = (i + r0) * m + (i + c0) + 1 end
  local shape = {unpack(rest)}
  shape[#shape + 1] = n * m
  local flat = x:permute(unpack(perm)):reshape(shape)
  return flat:index_select(-1, flow.tensor(idx, {dtype = int64, device = x.device}))
end
def('diagonal', diagonal)

--- flow.diag(x, diagonal = 0): a 1-D x gives the square matrix with x on that
-- diagonal; a 2-D x gives that diagonal as a 1-D tensor.
def('diag', function(x, k)
  check_tensor('diag', x)
  k = k or 0
  if type(k) ~= 'number' or k ~= math.floor(k) then
    error('diag: diagonal must be an integer, got ' .. tostring(k), 2)
  end
  if x:dim() == 1 then return diag_embed(x, k) end
  if x:dim() == 2 then return diagonal(x, k) end
  error(('diag: expected a 1-D or 2-D tensor, got shape %s'):format(shape_str(x)), 2)
end)

--- x:trace(): the sum of the main diagonal of a 2-D tensor.
def('trace', function(x)
  check_tensor('trace', x)
  if x:dim() ~= 2 then
    error(('trace: expected a 2-D tensor, got shape %s'):format(shape_str(x)), 2)
  end
  return diagonal(x):sum()
end)

-- The 1-based (row, col) pairs of a row x col matrix where keep(j - i) holds,
-- row-major, as a 2 x N int64 tensor.
local function tri_indices(op, keep, row, col, offset, opts)
  if is_options(offset) then opts, offset = offset, nil end
  opts = opts or EMPTY
  offset = offset or opts.offset or 0
  for _, v in ipairs({row, col, offset}) do
    if type(v) ~= 'number' or v ~= math.floor(v) then
      error(('%s: row, col and offset must be integers, got %s'):format(op, tostring(v)), 3)
    end
  end
  if row < 0 or col < 0 then
    error(('%s: row and col must be >= 0, got %d and %d'):format(op, row, col), 3)
  end
  local rs, cs = {}, {}
  for i = 1, row do
    for j = 1, col do
      if keep(j - i, offset) then rs[#rs + 1] = i; cs[#cs + 1] = j end
    end
  end
  local res = flow.tensor({rs, cs}, {dtype = opts.dtype or int64, device = opts.device})
  if #rs == 0 then res = flow.zeros(2, 0, {dtype = opts.dtype or int64, device = opts.device}) end
  return res
end

--- flow.tril_indices(row, col, offset = 0, {dtype =, device =}): 2 x N
-- 1-based indices of the lower triangle (j - i <= offset), row by row.
def('tril_indices', function(row, col, offset, opts)
  return tri_indices('tril_indices', function(d, k) return d <= k end, row, col, offset, opts)
end, 'func')
--- flow.triu_indices(row, col, offset = 0): the same for j - i >= offset.
def('triu_indices', function(row, col, offset, opts)
  return tri_indices('triu_indices', function(d, k) return d >= k end, row, col, offset, opts)
end, 'func')

------------------------------------------------------------------ comparison
local function isclose(a, b, opts)
  check_tensor('isclose', a)
  b = as_tensor(b, a)
  opts = opts or EMPTY
  local rtol, atol = opts.rtol or 1e-5, opts.atol or 1e-8
  if rtol < 0 or atol < 0 then
    error(('isclose: rtol and atol must be >= 0, got %g and %g'):format(rtol, atol), 3)
  end
  local eq = a:eq(b)
  local fa = is_float(a) and a or a:double()
  local fb = is_float(b) and b or b:double()
  local near = (fa - fb):abs():le(fb:abs() * rtol + atol):logical_and(fa:isfinite()):logical_and(fb:isfinite())
  local res = eq:logical_or(near)
  if opts.equal_nan then res = res:logical_or(fa:isnan():logical_and(fb:isnan())) end
  return res
end
--- flow.isclose(a, b, {rtol = 1e-5, atol = 1e-8, equal_nan = false}):
-- |a - b| <= atol + rtol * |b| elementwise (bool); infinities must be equal.
def('isclose', function(a, b, opts) return isclose(a, b, opts) end)
--- flow.allclose(a, b, opts): true when every element isclose (a Lua boolean).
def('allclose', function(a, b, opts)
  return isclose(a, b, opts):all():item()
end)
--- flow.equal(a, b): true when a and b have the same shape and elements.
def('equal', function(a, b)
  check_tensor('equal', a)
  check_tensor('equal', b)
  local sa, sb = a:size():totable(), b:size():totable()
  if #sa ~= #sb then return false end
  for i = 1, #sa do if sa[i] ~= sb[i] then return false end end
  return a:eq(b):all():item()
end)

------------------------------------------------------------------ pointwise
--- flow.lerp(start, end, weight): start + weight * (end - start); weight is
-- a number or a tensor (broadcast).
def('lerp', function(a, b, w)
  check_tensor('lerp', a, 'start')
  check_tensor('lerp', b, 'end')
  if not is_tensor(w) and type(w) ~= 'number' then
    error('lerp: weight must be a number or a tensor, got ' .. type(w), 2)
  end
  return a + (b - a) * w
end)

local function addc(op, combine)
  return function(x, t1, t2, opts)
    check_tensor(op, x, 'input')
    check_tensor(op, t1, 'tensor1')
    check_tensor(op, t2, 'tensor2')
    local value = 1
    if type(opts) == 'number' then value = opts elseif opts and opts.value then value = opts.value end
    local p = combine(t1, t2)
    if value ~= 1 then p = p * value end
    return x + p
  end
end
--- flow.addcmul(x, t1, t2, {value = 1}) = x + value * t1 * t2
def('addcmul', addc('addcmul', function(a, b) return a * b end))
--- flow.addcdiv(x, t1, t2, {value = 1}) = x + value * t1 / t2
def('addcdiv', addc('addcdiv', function(a, b) return a / b end))

--- x:frac(): x - trunc(x), with the sign of x; gradient 1.
def('frac', function(x)
  check_tensor('frac', x)
  return x - x:detach():trunc()
end)

--- flow.hypot(a, b) = sqrt(a^2 + b^2)
def('hypot', function(a, b)
  check_tensor('hypot', a)
  b = as_tensor(b, a)
  return (a * a + b * b):sqrt()
end)

--- flow.logaddexp(a, b) = log(exp(a) + exp(b)), computed stably.
def('logaddexp', function(a, b)
  check_tensor('logaddexp', a)
  b = as_tensor(b, a)
  if not is_float(a) then a = a:float() end
  if not is_float(b) then b = b:float() end
  local m = a:maximum(b)
  local both_inf = a:eq(b):logical_and(a:isinf())
  local d = flow.where(both_inf, zeros({}, m), (a - b):abs())
  return m + (-d):exp():log1p()
end)

local function fpick(op, pick)
  return function(a, b)
    check_tensor(op, a)
    b = as_tensor(b, a)
    local r = pick(a, b)
    if is_float(r) then
      r = flow.where(b:isnan(), a + zeros({}, r), r)
      r = flow.where(a:isnan(), b + zeros({}, r), r)
    end
    return r
  end
end
--- flow.fmax(a, b): elementwise maximum where a NaN loses to a number.
def('fmax', fpick('fmax', function(a, b) return a:maximum(b) end))
--- flow.fmin(a, b): elementwise minimum where a NaN loses to a number.
def('fmin', fpick('fmin', function(a, b) return a:minimum(b) end))

--- flow.xlogy(x, y) = x * log(y), and 0 where x == 0 (unless y is NaN).
def('xlogy', function(x, y)
  if not is_tensor(x) and not is_tensor(y) then
    error('xlogy: expected at least one tensor, got ' .. type(x) .. ' and ' .. type(y), 2)
  end
  if not is_tensor(x) then x = as_tensor(x, y) end
  y = as_tensor(y, x)
  if not is_float(x) then x = x:to(is_float(y) and y.dtype or T.get_default_dtype()) end
  if not is_float(y) then y = y:to(x.dtype) end
  local zero_x = x:eq(0):logical_and(y:le(0):logical_or(y:isinf()))
  local ys = flow.where(zero_x, flow.ones({}, {dtype = y.dtype, device = y.device}), y)
  return x * ys:log()
end)

--- flow.heaviside(x, values): 0 where x < 0, values where x == 0, 1 where x > 0.
def('heaviside', function(x, values)
  check_tensor('heaviside', x)
  check_tensor('heaviside', values, 'values')
  if x.dtype ~= values.dtype then
    error(('heaviside: input and values must have the same dtype, got %s and %s'):format(
      tostring(x.dtype), tostring(values.dtype)), 2)
  end
  return flow.where(x:eq(0), values, x:gt(0):to(x.dtype))
end)

--- x:sgn(): sign(x) (the same as sign for real tensors).
def('sgn', function(x)
  check_tensor('sgn', x)
  return x:sign()
end)

--- x:signbit(): true where the sign bit is set (x < 0, also -0.0).
def('signbit', function(x)
  check_tensor('signbit', x)
  if x.dtype == bool or x.dtype == flow.uint8 then return zeros(x:size(), x):bool() end
  local neg = x:lt(0)
  if is_float(x) then neg = neg:logical_or(x:eq(0):logical_and((1 / x:double()):lt(0))) end
  return neg
end)

--- x:isneginf() / x:isposinf(): true where x is -inf / +inf.
def('isneginf', function(x)
  check_tensor('isneginf', x)
  return x:isinf():logical_and(x:lt(0))
end)
def('isposinf', function(x)
  check_tensor('isposinf', x)
  return x:isinf():logical_and(x:gt(0))
end)

local FINITE_MAX = {float32 = 3.4028234663852886e38, float64 = 1.7976931348623157e308,
                    float16 = 65504, bfloat16 = 3.3895313892515355e38}

--- x:nan_to_num(nan = 0, posinf = max, neginf = lowest) (or {nan =, posinf =,
-- neginf =}): replaces NaN and infinities; the defaults are the dtype's
-- largest and lowest finite values. Integer tensors are returned as a copy.
def('nan_to_num', function(x, nan, posinf, neginf)
  check_tensor('nan_to_num', x)
  if is_options(nan) then nan, posinf, neginf = nan.nan, nan.posinf, nan.neginf end
  if not is_float(x) then return x:clone() end
  local big = FINITE_MAX[x.dtype.name] or FINITE_MAX.float32
  local r = flow.where(x:isnan(), as_tensor(nan or 0, x), x)
  r = flow.where(x:isinf():logical_and(x:gt(0)), as_tensor(posinf or big, x), r)
  r = flow.where(x:isinf():logical_and(x:lt(0)), as_tensor(neginf or -big, x), r)
  return r
end)

------------------------------------------------------------------ reductions
--- x:count_nonzero(dim = all): the number of non-zero elements (int64);
-- dim a number or a list.
def('count_nonzero', function(x, d)
  check_tensor('count_nonzero', x)
  local nz = x:ne(0)
  if d == nil then return nz:sum() end
  return nz:sum(d)
end)

--- x:nansum(dim?, keepdim?, {keepdim =, dtype =}): sum treating NaN as 0.
def('nansum', function(x, ...)
  check_tensor('nansum', x)
  if is_float(x) then x = flow.where(x:isnan(), zeros({}, x), x) end
  return x:sum(...)
end)

--- x:nanmean(dim?, keepdim?, {keepdim =}): mean of the non-NaN elements
-- (NaN where there are none).
def('nanmean', function(x, ...)
  check_tensor('nanmean', x)
  if not is_float(x) then
    error(('nanmean: expected a floating point tensor, got %s'):format(tostring(x.dtype)), 2)
  end
  local keep = x:isnan():logical_not()
  local s = flow.where(keep, x, zeros({}, x)):sum(...)
  return s / keep:sum(...):to(x.dtype)
end)

-- (dim?, unbiased?, keepdim?) / (dim, {keepdim =}) as var takes them -> dim, keepdim
local function var_dims(d, a, b)
  local keepdim
  if type(d) == 'boolean' then d = nil end
  if is_options(d) then keepdim, d = d.keepdim, d.dim end
  if type(a) == 'boolean' and type(b) == 'boolean' then keepdim = b end
  local opts = type(b) == 'table' and b or (type(a) == 'table' and a) or nil
  if opts and opts.keepdim ~= nil then keepdim = opts.keepdim end
  return d, keepdim
end

local function with_mean(name, stat)
  return function(x, d, a, b)
    check_tensor(name, x)
    local v = x[stat](x, d, a, b)
    local dim, keepdim = var_dims(d, a, b)
    if dim == nil then
      if not keepdim then return v, x:mean() end
      dim = {}
      for i = 1, x:dim() do dim[i] = i end
    end
    return v, x:mean(dim, {keepdim = keepdim})
  end
end
--- x:var_mean(dim?, {unbiased =, correction =, keepdim =}) -> var, mean
def('var_mean', with_mean('var_mean', 'var'))
--- x:std_mean(...) -> std, mean (arguments as x:std)
def('std_mean', with_mean('std_mean', 'std'))

--- x:aminmax({dim =, keepdim =}) (or x:aminmax(dim, keepdim)) -> min, max
def('aminmax', function(x, d, keepdim)
  check_tensor('aminmax', x)
  if is_options(d) then d, keepdim = d.dim, d.keepdim end
  if type(keepdim) == 'table' then keepdim = keepdim.keepdim end
  if x:numel() == 0 and d == nil then
    error('aminmax: cannot reduce an empty tensor over all its elements', 2)
  end
  if d == nil then
    if keepdim then
      local shape = {}
      for i = 1, x:dim() do shape[i] = 1 end
      return x:amin():reshape(shape), x:amax():reshape(shape)
    end
    return x:amin(), x:amax()
  end
  return x:amin(d, keepdim == true), x:amax(d, keepdim == true)
end)

return {}
