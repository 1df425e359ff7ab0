-- oneflow.ops.extras: more of PyTorch's tensor functions, written as Lua
-- compositions of the differentiable primitives (so autograd needs no new
-- rules). Dims are 1-based (negative from the end); index results are 1-based.
--   diagonals: diag, diagonal, trace, diag_embed, tril_indices, triu_indices
--   comparison: isclose, allclose, equal
--   pointwise: lerp, addcmul, addcdiv, frac, hypot, logaddexp, fmax, fmin,
--              xlogy, heaviside, sgn, signbit, isneginf, isposinf, nan_to_num
--   reductions: count_nonzero, nansum, nanmean, var_mean, std_mean, aminmax
--   shapes: movedim/moveaxis, unflatten, tolist, tensor_split, split_with_sizes,
--           hsplit, vsplit, repeat_interleave, broadcast_tensors, meshgrid,
--           rot90, column_stack, row_stack, dstack
--   math: cross, kron, logspace, diff
--   order statistics: cummax, cummin, median, nanmedian, quantile
--   searching and counting: searchsorted, bucketize, unique, bincount
--   einsum
local types = require 'oneflow.types'
local util = require 'oneflow._util'
local T = require 'oneflow.tensor'

local def, is_tensor, is_options = T.def, T.is_tensor, util.is_options
local flow = T.flow
local EMPTY = {}
local int64, bool = types.by_name.int64, types.by_name.bool

local function shape_str(x)
  return '[' .. table.concat(x:size():totable(), ',') .. ']'
end

local function check_tensor(op, x, what)
  if not is_tensor(x) then
    error(('%s: expected a tensor%s, got %s'):format(op, what and (' ' .. what) or '', type(x)), 3)
  end
end

-- 1-based (or negative) dim of an n-dim tensor -> 1..n, or an error naming op.
local function norm_dim(op, d, n)
  if type(d) ~= 'number' or d ~= math.floor(d) then
    error(('%s: dim must be an integer, got %s'):format(op, tostring(d)), 3)
  end
  local r = d < 0 and n + d + 1 or d
  if d == 0 or r < 1 or r > n then
    error(('%s: dim %d out of range for a %d-D tensor (dims are 1-based)'):format(op, d, n), 3)
  end
  return r
end

local function is_float(x)
  return x:is_floating_point()
end

-- A number operand becomes a 0-d tensor of the other operand's float dtype.
local function as_tensor(v, like)
  if is_tensor(v) then return v end
  local dt = like.dtype
  if not is_float(like) and v ~= math.floor(v) then dt = T.get_default_dtype() end
  return flow.tensor(v, {dtype = dt, device = like.device})
end

local function zeros(shape, like)
  return flow.zeros(shape, {dtype = like.dtype, device = like.device})
end

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

------------------------------------------------------------------ shapes
local function dim_list(op, d, n)
  if type(d) == 'number' then d = {d} end
  if type(d) ~= 'table' then
    error(('%s: dims must be a number or a list, got %s'):format(op, type(d)), 3)
  end
  local res, seen = {}, {}
  for i = 1, #d do
    local v = norm_dim(op, d[i], n)
    if seen[v] then error(('%s: dim %d repeated'):format(op, v), 3) end
    seen[v] = true
    res[i] = v
  end
  return res
end

--- x:movedim(source, destination): dims (numbers or equal-length lists)
-- move to the new positions; the others keep their order. Alias moveaxis.
local function movedim(x, src, dst)
  check_tensor('movedim', x)
  local n = x:dim()
  local s, d = dim_list('movedim', src, n), dim_list('movedim', dst, n)
  if #s ~= #d then
    error(('movedim: source and destination have different lengths (%d vs %d)'):format(#s, #d), 2)
  end
  local perm, used = {}, {}
  for i = 1, #s do perm[d[i]] = s[i]; used[s[i]] = true end
  local rest = 1
  for p = 1, n do
    if perm[p] == nil then
      while used[rest] do rest = rest + 1 end
      perm[p] = rest
      rest = rest + 1
    end
  end
  if n == 0 then return x end
  return x:permute(unpack(perm))
end
def('movedim', movedim)
def('moveaxis', movedim)

--- x:unflatten(dim, sizes): splits dim into sizes (one may be -1).
def('unflatten', function(x, d, sizes)
  check_tensor('unflatten', x)
  local n = x:dim()
  d = norm_dim('unflatten', d, n)
  if type(sizes) ~= 'table' and not is_tensor(sizes) then
    error('unflatten: sizes must be a list, got ' .. type(sizes), 2)
  end
  if is_tensor(sizes) then sizes = sizes:totable() end
  if type(sizes.totable) == 'function' then sizes = sizes:totable() end
  local prod, free = 1, nil
  for i = 1, #sizes do
    if sizes[i] == -1 then free = i else prod = prod * sizes[i] end
  end
  local size = x:size(d)
  if (free and (prod == 0 or size % prod ~= 0)) or (not free and prod ~= size) then
    error(('unflatten: sizes {%s} do not multiply to the size %d of dim %d of %s'):format(
      table.concat(sizes, ','), size, d, shape_str(x)), 2)
  end
  local shape = {}
  for i = 1, n do
    if i == d then
      for j = 1, #sizes do shape[#shape + 1] = sizes[j] == -1 and size / prod or sizes[j] end
    else
      shape[#shape + 1] = x:size(i)
    end
  end
  return x:reshape(shape)
end)

--- x:tolist(): the same as x:totable() (nested Lua tables, or a number).
def('tolist', function(x) return x:totable() end, 'method')

-- Pieces of dim d (1-based) starting at the 1-based positions in starts.
local function split_at(x, d, starts)
  local size, res, from = x:size(d), {}, 1
  for i = 1, #starts + 1 do
    local to = i <= #starts and math.min(math.max(starts[i], from), size + 1) or size + 1
    res[i] = x:narrow(d, math.min(from, size + 1), to - from)
    from = to
  end
  return res
end

--- x:tensor_split(sections | indices, dim = 1): a number n gives n pieces
-- whose sizes differ by at most 1 (the first ones larger); a list gives the
-- 1-based positions where new pieces start (torch's split points + 1).
local function tensor_split(x, what, d, op)
  op = op or 'tensor_split'
  check_tensor(op, x)
  d = norm_dim(op, d or 1, x:dim())
  local size = x:size(d)
  if is_tensor(what) then
    what = what:dim() == 0 and what:item() or what:totable()
  end
  if type(what) == 'number' then
    if what < 1 or what ~= math.floor(what) then
      error(('%s: the number of sections must be a positive integer, got %s'):format(op, tostring(what)), 3)
    end
    local base, extra, starts, pos = math.floor(size / what), size % what, {}, 1
    for i = 1, what - 1 do
      pos = pos + base + (i <= extra and 1 or 0)
      starts[i] = pos
    end
    return split_at(x, d, starts)
  end
  if type(what) ~= 'table' then
    error(('%s: expected a number of sections or a list of indices, got %s'):format(op, type(what)), 3)
  end
  for i = 1, #what do
    if type(what[i]) ~= 'number' or what[i] < 1 then
      error(('%s: split indices are 1-based positions >= 1, got %s'):format(op, tostring(what[i])), 3)
    end
  end
  return split_at(x, d, what)
end
def('tensor_split', function(x, what, d) return tensor_split(x, what, d) end)

--- x:split_with_sizes(sizes, dim = 1): pieces of the given sizes (they must add up).
def('split_with_sizes', function(x, sizes, d)
  check_tensor('split_with_sizes', x)
  if type(sizes) ~= 'table' then
    error('split_with_sizes: sizes must be a list, got ' .. type(sizes), 2)
  end
  return x:split(sizes, d or 1)
end)

local function even_split(op, d)
  return function(x, what)
    check_tensor(op, x)
    local dim = d
    if op == 'hsplit' then dim = x:dim() == 1 and 1 or 2 end
    if x:dim() < (op == 'hsplit' and 1 or 2) then
      error(('%s: expected at least %d dims, got shape %s'):format(
        op, op == 'hsplit' and 1 or 2, shape_str(x)), 2)
    end
    if type(what) == 'number' and x:size(dim) % what ~= 0 then
      error(('%s: dim %d of size %d is not divisible into %d sections'):format(
        op, dim, x:size(dim), what), 2)
    end
    return tensor_split(x, what, dim, op)
  end
end
--- x:hsplit(n | indices): tensor_split along dim 2 (dim 1 for 1-D); n must divide.
def('hsplit', even_split('hsplit'))
--- x:vsplit(n | indices): tensor_split along dim 1 of a tensor with >= 2 dims.
def('vsplit', even_split('vsplit', 1))

--- x:repeat_interleave(repeats, dim?): repeats each element (each slice along
-- dim) repeats times; repeats is a number or a 1-D tensor (one count per
-- element). Without dim x is flattened. flow.repeat_interleave(counts) alone
-- gives the 1-based indices 1..n, each repeated counts[i] times.
def('repeat_interleave', function(x, repeats, d)
  check_tensor('repeat_interleave', x)
  if repeats == nil then
    local counts = x:totable()
    local idx = {}
    for i = 1, #counts do
      for _ = 1, counts[i] do idx[#idx + 1] = i end
    end
    if #idx == 0 then return flow.zeros(0, {dtype = int64, device = x.device}) end
    return flow.tensor(idx, {dtype = int64, device = x.device})
  end
  if d == nil then
    x = x:reshape(-1)
    d = 1
  end
  d = norm_dim('repeat_interleave', d, x:dim())
  local size = x:size(d)
  if type(repeats) == 'number' or (is_tensor(repeats) and repeats:numel() == 1) then
    local r = type(repeats) == 'number' and repeats or repeats:reshape(-1)[1]:item()
    if r < 0 or r ~= math.floor(r) then
      error('repeat_interleave: repeats must be a non-negative integer, got ' .. tostring(r), 2)
    end
    local idx = {}
    for i = 1, size do for _ = 1, r do idx[#idx + 1] = i end end
    repeats = idx
  elseif is_tensor(repeats) then
    if repeats:dim() ~= 1 or repeats:size(1) ~= size then
      error(('repeat_interleave: repeats must be a number or a 1-D tensor of size %d, got shape %s'):format(
        size, shape_str(repeats)), 2)
    end
    local counts, idx = repeats:totable(), {}
    for i = 1, size do
      if counts[i] < 0 then error('repeat_interleave: repeats must be >= 0, got ' .. counts[i], 2) end
      for _ = 1, counts[i] do idx[#idx + 1] = i end
    end
    repeats = idx
  else
    error('repeat_interleave: repeats must be a number or a tensor, got ' .. type(repeats), 2)
  end
  local index = #repeats == 0 and flow.zeros(0, {dtype = int64, device = x.device})
    or flow.tensor(repeats, {dtype = int64, device = x.device})
  return x:index_select(d, index)
end)

-- The broadcast shape of several shapes (Lua lists), or an error naming op.
local function broadcast_shape(op, shapes)
  local n = 0
  for _, s in ipairs(shapes) do n = math.max(n, #s) end
  local res = {}
  for i = 1, n do
    local size = 1
    for k, s in ipairs(shapes) do
      local v = s[#s - n + i] or 1
      if v ~= 1 then
        if size ~= 1 and size ~= v then
          error(('%s: shapes cannot be broadcast (size %d vs %d at dim %d of tensor %d)'):format(
            op, size, v, i, k), 4)
        end
        size = v
      end
    end
    res[i] = size
  end
  return res
end

-- A list of tensors from f(t1, t2, ...) or f({t1, t2, ...}) (+ optional options).
local function tensor_list(op, ...)
  local args, opts = {...}, nil
  local n = select('#', ...)
  if n > 0 and is_options(args[n]) then opts = args[n]; args[n] = nil; n = n - 1 end
  if n == 1 and type(args[1]) == 'table' and not is_tensor(args[1]) then args = args[1]; n = #args end
  for i = 1, n do
    if not is_tensor(args[i]) then
      error(('%s: argument %d is not a tensor (%s)'):format(op, i, type(args[i])), 3)
    end
  end
  return args, opts or EMPTY
end

--- flow.broadcast_tensors(a, b, ...) (or a list): the tensors expanded to
-- their common shape, as a Lua array.
def('broadcast_tensors', function(...)
  local ts = tensor_list('broadcast_tensors', ...)
  local shapes = {}
  for i, t in ipairs(ts) do shapes[i] = t:size():totable() end
  local shape = broadcast_shape('broadcast_tensors', shapes)
  local res = {}
  for i, t in ipairs(ts) do res[i] = #shape == 0 and t or t:expand(unpack(shape)) end
  return res
end, 'func')

--- flow.meshgrid(a, b, ..., {indexing = 'ij'}) (or a list): N 1-D tensors
-- give N grids (a Lua array) of shape (#a, #b, ...); 'xy' swaps the first two dims.
def('meshgrid', function(...)
  local ts, opts = tensor_list('meshgrid', ...)
  local indexing = opts.indexing or 'ij'
  if indexing ~= 'ij' and indexing ~= 'xy' then
    error("meshgrid: indexing must be 'ij' or 'xy', got " .. tostring(indexing), 2)
  end
  local n = #ts
  local pos = {}
  for i = 1, n do
    if ts[i]:dim() > 1 then
      error(('meshgrid: expected 0-D or 1-D tensors, tensor %d has shape %s'):format(i, shape_str(ts[i])), 2)
    end
    pos[i] = i
  end
  if indexing == 'xy' and n >= 2 then pos[1], pos[2] = 2, 1 end
  local shape = {}
  for i = 1, n do shape[pos[i]] = ts[i]:numel() end
  local res = {}
  for i = 1, n do
    local view = {}
    for p = 1, n do view[p] = 1 end
    view[pos[i]] = ts[i]:numel()
    res[i] = ts[i]:reshape(unpack(view)):expand(unpack(shape))
  end
  return res
end, 'func')

--- x:rot90(k = 1, dims = {1, 2}): rotates by 90 degrees k times, from the
-- first dim towards the second.
def('rot90', function(x, k, dims)
  check_tensor('rot90', x)
  if type(k) == 'table' then k, dims = nil, k end
  k, dims = k or 1, dims or {1, 2}
  if type(dims) ~= 'table' or #dims ~= 2 then
    error('rot90: dims must be a list of two dims', 2)
  end
  if x:dim() < 2 then
    error(('rot90: expected at least 2 dims, got shape %s'):format(shape_str(x)), 2)
  end
  local d1, d2 = norm_dim('rot90', dims[1], x:dim()), norm_dim('rot90', dims[2], x:dim())
  if d1 == d2 then error(('rot90: the two dims must differ, both are %d'):format(d1), 2) end
  k = k % 4
  if k == 1 then return x:flip(d2):transpose(d1, d2) end
  if k == 2 then return x:flip({d1, d2}) end
  if k == 3 then return x:flip(d1):transpose(d1, d2) end
  return x:clone()
end)

--- flow.column_stack(list): 0-D and 1-D tensors become columns, then hstack.
def('column_stack', function(...)
  local ts = tensor_list('column_stack', ...)
  local cols = {}
  for i, t in ipairs(ts) do cols[i] = t:dim() <= 1 and t:reshape(t:numel(), 1) or t end
  return flow.hstack(cols)
end, 'func')

--- flow.row_stack(list): the same as vstack.
def('row_stack', function(...)
  return flow.vstack((tensor_list('row_stack', ...)))
end, 'func')

--- flow.dstack(list): stacks along dim 3 after making each tensor at least 3-D
-- ((n) -> (1, n, 1), (m, n) -> (m, n, 1)).
def('dstack', function(...)
  local ts = tensor_list('dstack', ...)
  local t3 = {}
  for i, t in ipairs(ts) do
    local nd = t:dim()
    if nd == 0 then t3[i] = t:reshape(1, 1, 1)
    elseif nd == 1 then t3[i] = t:reshape(1, t:size(1), 1)
    elseif nd == 2 then t3[i] = t:unsqueeze(3)
    else t3[i] = t end
  end
  return flow.cat(t3, 3)
end, 'func')

------------------------------------------------------------------ math
--- flow.cross(a, b, dim?): the 3-D cross product along dim (default: the
-- first dim of size 3); a and b broadcast.
def('cross', function(a, b, d)
  check_tensor('cross', a)
  check_tensor('cross', b)
  local shape = broadcast_shape('cross', {a:size():totable(), b:size():totable()})
  if #shape > 0 then a, b = a:expand(unpack(shape)), b:expand(unpack(shape)) end
  if d == nil then
    for i = 1, #shape do if shape[i] == 3 then d = i; break end end
    if d == nil then
      error(('cross: no dim of size 3 in shapes %s and %s'):format(shape_str(a), shape_str(b)), 2)
    end
  end
  d = norm_dim('cross', d, #shape)
  if shape[d] ~= 3 then
    error(('cross: dim %d must have size 3, got shapes %s and %s'):format(d, shape_str(a), shape_str(b)), 2)
  end
  local a1, a2, a3 = a:narrow(d, 1, 1), a:narrow(d, 2, 1), a:narrow(d, 3, 1)
  local b1, b2, b3 = b:narrow(d, 1, 1), b:narrow(d, 2, 1), b:narrow(d, 3, 1)
  return flow.cat({a2 * b3 - a3 * b2, a3 * b1 - a1 * b3, a1 * b2 - a2 * b1}, d)
end)

--- flow.kron(a, b): the Kronecker product (at most 4 dims).
def('kron', function(a, b)
  check_tensor('kron', a)
  check_tensor('kron', b)
  local n = math.max(a:dim(), b:dim())
  if n > 4 then
    error(('kron: at most 4 dims are supported, got shapes %s and %s'):format(shape_str(a), shape_str(b)), 2)
  end
  local sa, sb = a:size():totable(), b:size():totable()
  while #sa < n do table.insert(sa, 1, 1) end
  while #sb < n do table.insert(sb, 1, 1) end
  if n == 0 then return a * b end
  local va, vb, out = {}, {}, {}
  for i = 1, n do
    va[2 * i - 1], va[2 * i] = sa[i], 1
    vb[2 * i - 1], vb[2 * i] = 1, sb[i]
    out[i] = sa[i] * sb[i]
  end
  return (a:reshape(unpack(va)) * b:reshape(unpack(vb))):reshape(unpack(out))
end)

--- flow.logspace(start, end, steps, base = 10, {dtype =, device =}):
-- base ^ linspace(start, end, steps) (function only).
def('logspace', function(start, stop, steps, base, opts)
  if type(base) == 'table' then base, opts = nil, base end
  opts = opts or EMPTY
  base = base or opts.base or 10
  for _, v in ipairs({start, stop, steps, base}) do
    if type(v) ~= 'number' then
      error('logspace: start, end, steps and base must be numbers, got ' .. type(v), 2)
    end
  end
  local dt = opts.dtype or T.get_default_dtype()
  local e = flow.linspace(start, stop, steps, {dtype = types.by_name.float64})
  return flow.pow(base, e):to(dt):to(opts.device or 'cpu')
end, 'func')

--- x:diff(n = 1, dim = -1, {prepend =, append =}) (or x:diff({n =, dim =, ...})):
-- the n-th forward difference along dim; bool tensors give x[i+1] ~= x[i].
def('diff', function(x, n, d, opts)
  check_tensor('diff', x)
  if is_options(n) then opts, n = n, nil end
  if is_options(d) then opts, d = d, nil end
  opts = opts or EMPTY
  n, d = n or opts.n or 1, d or opts.dim or -1
  if type(n) ~= 'number' or n < 0 or n ~= math.floor(n) then
    error('diff: n must be a non-negative integer, got ' .. tostring(n), 2)
  end
  if x:dim() == 0 then error('diff: expected a tensor with at least 1 dim, got a 0-d tensor', 2) end
  d = norm_dim('diff', d, x:dim())
  if opts.prepend or opts.append then
    local parts = {}
    for _, p in ipairs({opts.prepend or false, x, opts.append or false}) do
      if p then
        if not is_tensor(p) then error('diff: prepend and append must be tensors, got ' .. type(p), 2) end
        parts[#parts + 1] = p
      end
    end
    x = flow.cat(parts, d)
  end
  for _ = 1, n do
    local len = x:size(d)
    if len == 0 then break end
    local hi, lo = x:narrow(d, 2, len - 1), x:narrow(d, 1, len - 1)
    x = x.dtype == bool and hi:ne(lo) or hi - lo
  end
  return x
end)

------------------------------------------------------------------ order statistics
-- x with dim d moved last, as a (rows, n) matrix, and the function that
-- turns a (rows, k) result back into x's layout with k in place of dim d.
local function rows_of(x, d)
  local moved = movedim(x, d, -1)
  local shape = moved:size():totable()
  local n = shape[#shape]
  local rows = moved:reshape(-1, n)
  local function back(t)
    local sh = {unpack(shape)}
    sh[#sh] = t:size(2)
    return movedim(t:reshape(unpack(sh)), -1, d)
  end
  return rows, back
end

local cum_extreme_fn = {}
local function cum_extreme(op, better)
  cum_extreme_fn[op] = function(x, d)
    check_tensor(op, x)
    if d == nil then error(op .. ': dim is required', 2) end
    if x:dim() == 0 then
      norm_dim(op, d, 1)
      local v, i = cum_extreme_fn[op](x:reshape(1), 1)
      return v:reshape({}), i:reshape({})
    end
    d = norm_dim(op, d, x:dim())
    if x:numel() == 0 then
      return x:clone(), flow.zeros(x:size():totable(), {dtype = int64, device = x.device})
    end
    local rows, back = rows_of(x, d)
    local data = rows:detach():to(types.by_name.float64):totable()
    local idx = {}
    for r = 1, #data do
      local row, out, best, ir = data[r], {}, nil, 1
      for j = 1, #row do
        local v = row[j]
        -- like torch: a NaN always takes over, ties take the later index
        if j == 1 or v ~= v or (best == best and better(v, best)) then best, ir = v, j end
        out[j] = ir
      end
      idx[r] = out
    end
    local index = back(flow.tensor(idx, {dtype = int64, device = x.device}))
    return x:gather(d, index), index
  end
  return cum_extreme_fn[op]
end
--- x:cummax(dim) -> values, 1-based indices of the running maximum (the
-- latest of equal maxima; NaN propagates). Values are differentiable.
def('cummax', cum_extreme('cummax', function(v, best) return v >= best end))
--- x:cummin(dim) -> values, indices of the running minimum.
def('cummin', cum_extreme('cummin', function(v, best) return v <= best end))

-- Per row of the sorted matrix, the 1-based position to take -> values, indices.
local function median_impl(op, x, d, keepdim, skip_nan)
  check_tensor(op, x)
  if is_options(d) then d, keepdim = d.dim, d.keepdim end
  if type(keepdim) == 'table' then keepdim = keepdim.keepdim end
  local global = d == nil
  if global then x = x:reshape(-1); d = 1 end
  if x:dim() == 0 then x = x:reshape(1); d = 1 end
  d = norm_dim(op, d, x:dim())
  local n = x:size(d)
  if n == 0 then
    error(('%s: cannot take the median of an empty dim (shape %s)'):format(op, shape_str(x)), 3)
  end
  local rows, back = rows_of(x, d)
  local _, order = rows:detach():sort(2)   -- NaN last
  local nans = is_float(x) and rows:isnan():sum(2):totable() or nil
  local pos = {}
  for r = 1, rows:size(1) do
    local c = nans and nans[r] or 0
    if c == 0 then pos[r] = {math.floor((n - 1) / 2) + 1}
    elseif skip_nan then pos[r] = {math.max(1, math.floor((n - c - 1) / 2) + 1)}
    else pos[r] = {n - c + 1} end   -- the first NaN
  end
  local index = order:gather(2, flow.tensor(pos, {dtype = int64, device = x.device}))
  local values = rows:gather(2, index)
  if global then return values:reshape({}) end
  values, index = back(values), back(index)
  if not keepdim then values, index = values:squeeze(d), index:squeeze(d) end
  return values, index
end
--- x:median() -> the lower median of all elements (NaN if any is NaN);
-- x:median(dim, keepdim | {keepdim =}) -> values, 1-based indices.
def('median', function(x, d, keepdim) return median_impl('median', x, d, keepdim, false) end)
--- x:nanmedian(...): the same, ignoring NaN (NaN only where all are NaN).
def('nanmedian', function(x, d, keepdim) return median_impl('nanmedian', x, d, keepdim, true) end)

local function round_half_even(v)
  local f = math.floor(v)
  local r = v - f
  if r > 0.5 or (r == 0.5 and f % 2 == 1) then return f + 1 end
  return f
end

--- x:quantile(q, dim?, {keepdim = false, interpolation = 'linear'}): q is a
-- number or a 1-D tensor in [0, 1] (a tensor q adds a leading dim of #q);
-- without dim x is flattened. interpolation: linear, lower, higher,
-- midpoint, nearest. Rows with NaN give NaN.
def('quantile', function(x, q, d, opts)
  check_tensor('quantile', x)
  if is_options(d) then opts, d = d, nil end
  if type(opts) == 'boolean' then opts = {keepdim = opts} end
  opts = opts or EMPTY
  if d == nil then d = opts.dim end
  local mode = opts.interpolation or 'linear'
  local modes = {linear = true, lower = true, higher = true, midpoint = true, nearest = true}
  if not modes[mode] then error('quantile: unknown interpolation ' .. tostring(mode), 2) end
  if not is_float(x) then
    error(('quantile: expected a floating point input, got %s'):format(tostring(x.dtype)), 2)
  end
  local qs, q_dim
  if is_tensor(q) then
    if q:dim() > 1 then
      error(('quantile: q must be a number or a 0-D/1-D tensor, got shape %s'):format(shape_str(q)), 2)
    end
    q_dim = q:dim() == 1
    qs = q_dim and q:totable() or {q:item()}
  elseif type(q) == 'number' then
    qs = {q}
  else
    error('quantile: q must be a number or a tensor, got ' .. type(q), 2)
  end
  for _, v in ipairs(qs) do
    if not (v >= 0 and v <= 1) then error(('quantile: q must be in [0, 1], got %s'):format(tostring(v)), 2) end
  end
  local keepdim, global = opts.keepdim, d == nil
  local src = x
  if global then src = x:reshape(-1); d = 1 end
  if src:dim() == 0 then src = src:reshape(1); d = 1 end
  d = norm_dim('quantile', d, src:dim())
  local n = src:size(d)
  if n == 0 then error(('quantile: cannot take a quantile of an empty dim (shape %s)'):format(shape_str(x)), 2) end
  local rows, back = rows_of(src, d)
  local _, order = rows:detach():sort(2)
  local sorted = rows:gather(2, order)                      -- differentiable
  local has_nan = rows:isnan():any(2, true)                 -- (rows, 1)
  local outs = {}
  for i, v in ipairs(qs) do
    local pos = v * (n - 1)
    local lo, hi = math.floor(pos), math.ceil(pos)
    local w = pos - lo
    if mode == 'lower' then w = 0
    elseif mode == 'higher' then w = lo == hi and 0 or 1
    elseif mode == 'midpoint' then w = lo == hi and 0 or 0.5
    elseif mode == 'nearest' then lo = round_half_even(pos); hi, w = lo, 0 end
    local a = sorted:narrow(2, lo + 1, 1)
    local r = a
    if w ~= 0 then r = a + (sorted:narrow(2, hi + 1, 1) - a) * w end
    r = flow.where(has_nan, as_tensor(0 / 0, r), r)
    if global then
      local shape = {}
      if keepdim then for j = 1, x:dim() do shape[j] = 1 end end
      r = r:reshape(shape)
    else
      r = back(r)
      if not keepdim then r = r:squeeze(d) end
    end
    outs[i] = r
  end
  if q_dim then return flow.stack(outs, 1) end
  return outs[1]
end)

------------------------------------------------------------------ searching, counting
local function search(op, seq, v, opts)
  opts = opts or EMPTY
  local right = opts.right or opts.side == 'right'
  if opts.side ~= nil and opts.side ~= 'left' and opts.side ~= 'right' then
    error(op .. ": side must be 'left' or 'right', got " .. tostring(opts.side), 3)
  end
  if opts.right == true and opts.side == 'left' then
    error(op .. ": right = true contradicts side = 'left'", 3)
  end
  local scalar = type(v) == 'number'
  if scalar then v = as_tensor(v, seq):reshape(1) end
  if seq:dim() == 0 then error(op .. ': the boundaries must have at least 1 dim', 3) end
  if seq:dim() > 1 then
    local ok = v:dim() == seq:dim()
    for i = 1, seq:dim() - 1 do ok = ok and v:size(i) == seq:size(i) end
    if not ok then
      error(('%s: the leading dims of the sorted sequence %s and the values %s must match'):format(
        op, shape_str(seq), shape_str(v)), 3)
    end
  end
  local n = seq:size(-1)
  local s = seq:dim() == 1 and seq or seq:unsqueeze(-2)           -- (..., 1, n)
  local vv = v:unsqueeze(-1)                                      -- (..., m, 1)
  local before = right and s:le(vv) or s:lt(vv)
  local res = before:sum(-1) + 1
  if is_float(v) then res = flow.where(v:isnan(), as_tensor(n + 1, res), res) end
  if opts.out_int32 then res = res:to(types.by_name.int32) end
  if scalar then res = res:reshape({}) end
  return res
end

--- flow.searchsorted(sorted, values, {right = false, side =, out_int32 =}):
-- the 1-based positions where values would be inserted to keep each row
-- of sorted in order (1 .. n + 1; torch's result + 1). values may be a number.
def('searchsorted', function(seq, v, opts)
  check_tensor('searchsorted', seq, 'sorted_sequence')
  if not is_tensor(v) and type(v) ~= 'number' then
    error('searchsorted: values must be a tensor or a number, got ' .. type(v), 2)
  end
  return search('searchsorted', seq, v, opts)
end, 'func')

--- flow.bucketize(x, boundaries, {right = false, out_int32 =}): the 1-based
-- bucket of each element (1 .. #boundaries + 1; torch's result + 1).
def('bucketize', function(x, boundaries, opts)
  if not is_tensor(x) and type(x) ~= 'number' then
    error('bucketize: input must be a tensor or a number, got ' .. type(x), 2)
  end
  check_tensor('bucketize', boundaries, 'boundaries')
  if boundaries:dim() ~= 1 then
    error(('bucketize: boundaries must be 1-D, got shape %s'):format(shape_str(boundaries)), 2)
  end
  return search('bucketize', boundaries, x, {right = opts and opts.right, out_int32 = opts and opts.out_int32})
end)

--- x:unique({sorted = true, return_inverse = false, return_counts = false}):
-- the distinct elements of the flattened x in ascending order; then, as
-- asked, the 1-based inverse indices (x's shape) and the counts (int64).
def('unique', function(x, opts)
  check_tensor('unique', x)
  opts = opts or EMPTY
  if opts.dim ~= nil then
    error('unique: only dim = nil (the flattened tensor) is supported', 2)
  end
  local flat = x:detach():reshape(-1)
  local is_bool = x.dtype == bool
  if is_bool then flat = flat:to(int64) end
  local vals = flat:totable()
  local n = #vals
  local order = {}
  for i = 1, n do order[i] = i end
  -- NaN sorts last; each NaN stays distinct (NaN ~= NaN), as in torch
  table.sort(order, function(a, b)
    local va, vb = vals[a], vals[b]
    if va ~= va then return false end
    if vb ~= vb then return true end
    if va == vb then return a < b end
    return va < vb
  end)
  local uniq, counts, inverse = {}, {}, {}
  for _, i in ipairs(order) do
    local v = vals[i]
    if #uniq == 0 or uniq[#uniq] ~= v then
      uniq[#uniq + 1] = v
      counts[#uniq] = 0
    end
    counts[#uniq] = counts[#uniq] + 1
    inverse[i] = #uniq
  end
  local dev = x.device
  local out = #uniq == 0 and flow.zeros(0, {dtype = x.dtype, device = dev})
    or flow.tensor(uniq, {dtype = is_bool and int64 or x.dtype, device = dev})
  if is_bool then out = out:to(bool) end
  local res = {out}
  if opts.return_inverse then
    res[#res + 1] = n == 0 and flow.zeros(x:size():totable(), {dtype = int64, device = dev})
      or flow.tensor(inverse, {dtype = int64, device = dev}):reshape(unpack(x:size():totable()))
  end
  if opts.return_counts then
    res[#res + 1] = #uniq == 0 and flow.zeros(0, {dtype = int64, device = dev})
      or flow.tensor(counts, {dtype = int64, device = dev})
  end
  return unpack(res)
end)

--- flow.bincount(x, {weights =, minlength = 0}): for a 1-D tensor of
-- non-negative integers (values, not indices), how often each value
-- 0 .. max occurs (int64), or the sum of the weights per value
-- (float32 weights give float32, others float64). Differentiable in weights.
def('bincount', function(x, opts)
  check_tensor('bincount', x)
  opts = opts or EMPTY
  local w, minlength = opts.weights, opts.minlength or 0
  if x:dim() ~= 1 or is_float(x) or x.dtype == bool then
    error(('bincount: expected a 1-D integer tensor, got shape %s and %s'):format(
      shape_str(x), tostring(x.dtype)), 2)
  end
  if minlength < 0 then error('bincount: minlength must be >= 0, got ' .. minlength, 2) end
  if w ~= nil then
    check_tensor('bincount', w, 'weights')
    if w:dim() ~= 1 or w:size(1) ~= x:size(1) then
      error(('bincount: weights %s must have the shape of the input %s'):format(shape_str(w), shape_str(x)), 2)
    end
  end
  local len = minlength
  if x:numel() > 0 then
    if x:amin():item() < 0 then error('bincount: input values must be >= 0', 2) end
    len = math.max(len, x:amax():item() + 1)
  end
  local dt = w == nil and int64 or (w.dtype == types.by_name.float32 and w.dtype or types.by_name.float64)
  local res = flow.zeros(len, {dtype = dt, device = x.device})
  if x:numel() == 0 then return res end
  local src = w and w:to(dt) or flow.ones(x:size(1), {dtype = dt, device = x.device})
  return res:scatter_add(1, x:to(int64) + 1, src)
end)

------------------------------------------------------------------ einsum
-- One operand's labels: a list of one-character strings; '...' becomes the
-- pseudo-labels \1 .. \8 aligned from the right (they sort before letters).
local function parse_term(term, ndim, n_ell, where)
  local labels, ell_at = {}, nil
  local i = 1
  while i <= #term do
    local ch = term:sub(i, i)
    if term:sub(i, i + 2) == '...' then
      if ell_at then error('einsum: more than one ellipsis in ' .. where, 4) end
      ell_at = #labels + 1
      i = i + 3
    elseif ch:match('%a') then
      labels[#labels + 1] = ch
      i = i + 1
    else
      error(('einsum: invalid character %q in %s'):format(ch, where), 4)
    end
  end
  if ell_at then
    local k = ndim and (ndim - #labels) or n_ell
    if k < 0 then
      error(('einsum: %s has %d labels but the operand has %d dims'):format(where, #labels, ndim), 4)
    end
    local ell = {}
    for j = 1, k do ell[j] = string.char(n_ell - k + j) end
    for j = #ell, 1, -1 do table.insert(labels, ell_at, ell[j]) end
    return labels, k
  end
  return labels, 0
end

-- Collapses repeated labels of one operand to their diagonal.
local function take_diagonals(t, labels)
  local j = 1
  while j <= #labels do
    local k = nil
    for m = j + 1, #labels do if labels[m] == labels[j] then k = m; break end end
    if k then
      t = diagonal(t, 0, j, k)
      local l = labels[j]
      table.remove(labels, k); table.remove(labels, j)
      labels[#labels + 1] = l
    else
      j = j + 1
    end
  end
  return t, labels
end

local function index_of(list, v)
  for i = 1, #list do if list[i] == v then return i end end
end

-- Sums the dims of t whose labels are not in keep.
local function sum_unkept(t, labels, keep)
  local dims, rest = {}, {}
  for i, l in ipairs(labels) do
    if keep[l] then rest[#rest + 1] = l else dims[#dims + 1] = i end
  end
  if #dims > 0 then t = t:sum(dims) end
  return t, rest
end

-- a (labels la) times b (labels lb), summing labels not in keep.
local function contract(a, la, b, lb, keep, sizes)
  local batch, left, right, red = {}, {}, {}, {}
  for _, l in ipairs(la) do
    if index_of(lb, l) then
      if keep[l] then batch[#batch + 1] = l else red[#red + 1] = l end
    else
      left[#left + 1] = l
    end
  end
  for _, l in ipairs(lb) do if not index_of(la, l) then right[#right + 1] = l end end
  local function prod(ls)
    local p = 1
    for _, l in ipairs(ls) do p = p * sizes[l] end
    return p
  end
  local function arrange(t, ls, groups)
    local perm = {}
    for _, g in ipairs(groups) do
      for _, l in ipairs(g) do perm[#perm + 1] = index_of(ls, l) end
    end
    if #perm > 1 then t = t:permute(unpack(perm)) end
    return t:reshape(prod(groups[1]), prod(groups[2]), prod(groups[3]))
  end
  local am = arrange(a, la, {batch, left, red})                 -- (B, L, K)
  local bm = arrange(b, lb, {batch, red, right})                -- (B, K, R)
  local res = flow.bmm(am, bm)
  local out_labels, shape = {}, {}
  for _, g in ipairs({batch, left, right}) do
    for _, l in ipairs(g) do out_labels[#out_labels + 1] = l; shape[#shape + 1] = sizes[l] end
  end
  return res:reshape(shape), out_labels
end

--- flow.einsum(equation, a, b, ...) (or flow.einsum(equation, {a, b, ...})):
-- Einstein summation with explicit ('ij,jk->ik') or implicit ('ij,jk')
-- output, repeated labels (diagonals, 'ii->i'), '...' and size-1
-- broadcasting; built on permute/reshape/bmm/sum, so differentiable.
def('einsum', function(eq, ...)
  if type(eq) ~= 'string' then error('einsum: the equation must be a string, got ' .. type(eq), 2) end
  local ops = {...}
  if #ops == 1 and type(ops[1]) == 'table' and not is_tensor(ops[1]) then ops = ops[1] end
  for i = 1, #ops do
    if not is_tensor(ops[i]) then
      error(('einsum: operand %d is not a tensor (%s)'):format(i, type(ops[i])), 2)
    end
    if ops[i].dtype ~= ops[1].dtype then
      error(('einsum: operands must have the same dtype, got %s and %s'):format(
        tostring(ops[1].dtype), tostring(ops[i].dtype)), 2)
    end
  end
  eq = eq:gsub('%s', '')
  local lhs, rhs = eq:match('^(.-)%->(.*)$')
  if not lhs then lhs = eq end
  local terms = {}
  for term in (lhs .. ','):gmatch('([^,]*),') do terms[#terms + 1] = term end
  if #terms ~= #ops then
    error(('einsum: the equation has %d operands but %d tensors were given'):format(#terms, #ops), 2)
  end
  -- how many dims '...' stands for: the most over the operands
  local n_ell = 0
  for i, term in ipairs(terms) do
    local letters = select(2, term:gsub('%a', ''))
    if term:find('...', 1, true) then n_ell = math.max(n_ell, ops[i]:dim() - letters) end
  end
  if n_ell > 8 then error('einsum: ... stands for too many dims', 2) end
  local labels, sizes, count = {}, {}, {}
  local ts = {}
  for i, term in ipairs(terms) do
    local ls = parse_term(term, ops[i]:dim(), n_ell, 'operand ' .. i)
    if #ls ~= ops[i]:dim() then
      error(('einsum: operand %d has %d dims but the equation gives it %d labels (%s)'):format(
        i, ops[i]:dim(), #ls, term), 2)
    end
    for j, l in ipairs(ls) do
      local s = ops[i]:size(j)
      if sizes[l] == nil or sizes[l] == 1 then
        sizes[l] = s
      elseif s ~= 1 and s ~= sizes[l] then
        error(('einsum: label %s has size %d in operand %d but %d elsewhere'):format(
          l:byte() < 32 and '...' or l, s, i, sizes[l]), 2)
      end
    end
    labels[i], ts[i] = ls, ops[i]
  end
  for i, ls in ipairs(labels) do
    local seen = {}
    for _, l in ipairs(ls) do
      if not seen[l] then count[l] = (count[l] or 0) + 1; seen[l] = true end
    end
    -- size-1 dims broadcast against the other operands
    local shape, grow = {}, false
    for j, l in ipairs(ls) do
      shape[j] = sizes[l]
      if ts[i]:size(j) ~= sizes[l] then grow = true end
    end
    if grow then ts[i] = ts[i]:expand(unpack(shape)) end
  end
  local out = {}
  if rhs then
    out = parse_term(rhs, nil, n_ell, 'the output')
    local seen = {}
    for _, l in ipairs(out) do
      if seen[l] then error('einsum: output label ' .. l .. ' appears twice', 2) end
      if not sizes[l] then error('einsum: output label ' .. l .. ' is not in any operand', 2) end
      seen[l] = true
    end
  else
    for j = 1, n_ell do out[j] = string.char(j) end
    local once = {}
    for l, c in pairs(count) do
      if c == 1 and l:byte() >= 32 then once[#once + 1] = l end
    end
    -- a label repeated inside one operand counts once there; torch leaves it out
    for _, ls in ipairs(labels) do
      local k = {}
      for _, l in ipairs(ls) do k[l] = (k[l] or 0) + 1 end
      for l, c in pairs(k) do
        if c > 1 then
          local pos = index_of(once, l)
          if pos then table.remove(once, pos) end
        end
      end
    end
    table.sort(once)
    for _, l in ipairs(once) do out[#out + 1] = l end
  end
  local in_out = {}
  for _, l in ipairs(out) do in_out[l] = true end
  -- keep[l] for operand i: l is in the output or in a later operand
  local function keep_after(i)
    local keep = {}
    for l in pairs(in_out) do keep[l] = true end
    for j = i + 1, #ts do for _, l in ipairs(labels[j]) do keep[l] = true end end
    return keep
  end
  local cur, cl
  for i = 1, #ts do
    local t, ls = take_diagonals(ts[i], {unpack(labels[i])})
    local keep = keep_after(i)
    if cur then for _, l in ipairs(cl) do keep[l] = true end end
    t, ls = sum_unkept(t, ls, keep)
    if cur == nil then
      cur, cl = t, ls
    else
      cur, cl = contract(cur, cl, t, ls, keep_after(i), sizes)
    end
  end
  cur, cl = sum_unkept(cur, cl, in_out)
  local perm = {}
  for j, l in ipairs(out) do perm[j] = index_of(cl, l) end
  if #perm > 1 then cur = cur:permute(unpack(perm)) end
  return cur
end, 'func')

return {}
