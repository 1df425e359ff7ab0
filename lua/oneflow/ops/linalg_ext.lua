-- oneflow.ops.linalg_ext: the flow.linalg namespace (torch.linalg semantics).
--   flow.linalg.vector_norm(x, ord = 2, dim = all, {keepdim =, dtype =})
--   flow.linalg.matrix_norm(A, ord = 'fro', dim = {-2, -1}, {keepdim =})
--   flow.linalg.norm(x, ord, dim, {keepdim =})      torch's dispatch rules
--   flow.linalg.multi_dot({A, B, C, ...})
--   flow.linalg.matrix_power(A, n)
--   flow.linalg.cross(a, b, {dim = -1})
--   flow.linalg.diagonal(A, {offset = 0, dim1 = -2, dim2 = -1})
-- Dims are 1-based, negative from the end. Options may also be given as
-- trailing positional arguments in torch's order (keepdim after dim).
--   flow.linalg.inv(A), det(A), slogdet(A) -> sign, logabsdet
--   flow.linalg.solve(A, B, {left = true}), cholesky(A, {upper = false}), svdvals(A)
--   flow.linalg.eigh(A, {UPLO = 'L'}) -> L, V; eigvalsh(A, {UPLO = 'L'})
--   flow.linalg.eig(A) -> L, V; eigvals(A)   complex results (complex64 /
--     complex128) of real A; torch's backward for phase-invariant losses
--   flow.linalg.qr(A, {mode = 'reduced'}) -> Q, R
--   flow.linalg.svd(A, {full_matrices = true}) -> U, S, Vh
--   flow.linalg.pinv(A, {atol =, rtol =, hermitian = false})
--   flow.linalg.matrix_rank(A, {atol =, rtol =, tol =, hermitian = false})
--   flow.linalg.lstsq(A, B, {rcond =}) -> solution, residuals, rank, singular_values
--   flow.linalg.lu(A) -> P, L, U; lu_factor(_ex), lu_solve(LU, pivots, B, {left =, adjoint =})
--   flow.linalg.ldl_factor(_ex)(A), ldl_solve(LD, pivots, B), householder_product(A, tau)
--   flow.linalg.matrix_sqrth(A), polar(A) -> U, H
-- Everything is differentiable: the first group is written with existing
-- differentiable ops; inv, det, slogdet, solve, cholesky, svdvals are LAPACK kernels
-- (core/ops/linalg_ext.c, float32/float64, CPU) with backward rules in C.
local ffi = require 'ffi'
local core = require 'oneflow._C'
local util = require 'oneflow._args'
local T = require 'oneflow.tensor'
local types = require 'oneflow.types'

local is_tensor, is_options = T.is_tensor, util.is_options
local C, out1, out2, raise, wrap = core.C, core.out1, core.out2, core.raise, core.wrap
local EMPTY = {}
local INF = math.huge

local linalg = {}

local shape_str = util.shape_str

-- o after checking its keys when it is an options table (numbers, strings
-- and nil, the positional forms, pass as they are).
local function checked(op, o, allowed)
  if is_options(o) then util.check_options('linalg.' .. op, o, allowed) end
  return o
end
local NORM_OPTS = {ord = true, dim = true, keepdim = true, dtype = true}


local function check_float(op, x)
  if not x.dtype.is_floating_point then
    error(('linalg.%s: expected a floating point tensor, got %s'):format(op, tostring(x.dtype)), 3)
  end
end

-- 1-based dim (negative from the end) -> positive 1-based dim.
local function norm_dim(op, d, nd)
  if type(d) ~= 'number' or d % 1 ~= 0 then
    error(('linalg.%s: dim must be an integer, got %s'):format(op, tostring(d)), 4)
  end
  local lo, hi = -math.max(nd, 1), math.max(nd, 1)
  if d == 0 or d < lo or d > hi then
    error(('linalg.%s: dim %d out of range for a %d-D tensor (1..%d or -%d..-1)'):format(
      op, d, nd, hi, hi), 4)
  end
  return d < 0 and d + nd + 1 or d
end

-- (dim?, keepdim?, opts?) -> dim, keepdim, opts
local function dim_args(d, k, o)
  if is_options(d) then o, d = d, nil end
  if type(k) == 'table' then o, k = k, nil end
  o = o or EMPTY
  if d == nil then d = o.dim end
  if k == nil then k = o.keepdim end
  return d, k and true or false, o
end

------------------------------------------------------------------ vector_norm
local function vector_norm(op, x, ord, d, keepdim, dtype)
  if dtype then x = x:to(dtype) end
  check_float(op, x)
  if d == nil then
    if keepdim then
      local dims = {}
      for i = 1, x:dim() do dims[i] = i end
      return x:norm(ord, dims, true)
    end
    return x:reshape(-1):norm(ord, 1)
  end
  if type(d) == 'number' then d = {d} end
  if type(d) ~= 'table' then
    error(('linalg.%s: dim must be a number or a list of numbers, got %s'):format(op, type(d)), 3)
  end
  local dims, seen = {}, {}
  for i = 1, #d do
    dims[i] = norm_dim(op, d[i], x:dim())
    if seen[dims[i]] then error(('linalg.%s: dim %d appears twice'):format(op, d[i]), 3) end
    seen[dims[i]] = true
  end
  return x:norm(ord, dims, keepdim)
end

--- linalg.vector_norm(x, ord = 2, dim = nil, keepdim = false, {dtype =}): the
-- ord-norm of the elements over dim (all when nil). ord: any number,
-- math.huge (max |x|), -math.huge (min |x|), 0 (number of non-zeros).
function linalg.vector_norm(x, ord, d, k, o)
  if is_options(ord) then o, ord = ord, nil end
  util.check_tensor('linalg.vector_norm', x)
  local keepdim, opts
  d, keepdim, opts = dim_args(d, k, o)
  checked('vector_norm', opts, NORM_OPTS)
  if ord == nil then ord = opts.ord or 2 end
  if type(ord) ~= 'number' then
    error(('linalg.vector_norm: ord must be a number, got %s'):format(tostring(ord)), 2)
  end
  return vector_norm('vector_norm', x, ord, d, keepdim, opts.dtype)
end

------------------------------------------------------------------ matrix_norm
local matrix_ords = {fro = true, nuc = true, [INF] = true, [-INF] = true, [1] = true,
                     [-1] = true, [2] = true, [-2] = true}

local function matrix_norm(op, A, ord, d, keepdim)
  check_float(op, A)
  if matrix_ords[ord] == nil then
    error(("linalg.%s: ord %s is not supported for matrices (use 'fro', 'nuc', math.huge, "
      .. "-math.huge, 1, -1, 2 or -2)"):format(op, tostring(ord)), 3)
  end
  if A:dim() < 2 then
    error(('linalg.%s: expected a tensor with 2 or more dims, got shape %s'):format(
      op, shape_str(A)), 3)
  end
  d = d or {-2, -1}
  if type(d) ~= 'table' or #d ~= 2 then
    error(('linalg.%s: dim must be a list of 2 dims, got %s'):format(op, tostring(d)), 3)
  end
  local d1, d2 = norm_dim(op, d[1], A:dim()), norm_dim(op, d[2], A:dim())
  if d1 == d2 then error(('linalg.%s: dims must be different, got %d and %d'):format(
    op, d[1], d[2]), 3) end
  if ord == 'fro' then return A:norm(2, {d1, d2}, keepdim) end
  if ord == 'nuc' or ord == 2 or ord == -2 then   -- from the singular values
    local perm = {}
    for i = 1, A:dim() do if i ~= d1 and i ~= d2 then perm[#perm + 1] = i end end
    perm[#perm + 1], perm[#perm + 2] = d1, d2
    local sv = linalg.svdvals(A:permute(perm))
    local r = ord == 'nuc' and sv:sum(-1) or ord == 2 and sv:amax(-1) or sv:amin(-1)
    if keepdim then r = r:unsqueeze(math.min(d1, d2)):unsqueeze(math.max(d1, d2)) end
    return r
  end
  -- inf: max row sum (sum over d2, extreme over d1); 1: max column sum
  local sum_dim, ext_dim = d2, d1
  if ord == 1 or ord == -1 then sum_dim, ext_dim = d1, d2 end
  local s = A:abs():sum(sum_dim, true)
  local r = ord > 0 and s:amax(ext_dim, true) or s:amin(ext_dim, true)
  if not keepdim then r = r:squeeze(math.max(d1, d2)):squeeze(math.min(d1, d2)) end
  return r
end

--- linalg.matrix_norm(A, ord = 'fro', dim = {-2, -1}, keepdim = false):
-- ord 'fro', math.huge / -math.huge (max / min row sum of |A|), 1 / -1
-- (max / min column sum), over the two dims, batched over the others.
function linalg.matrix_norm(A, ord, d, k, o)
  if is_options(ord) then o, ord = ord, nil end
  util.check_tensor('linalg.matrix_norm', A)
  local keepdim, opts
  d, keepdim, opts = dim_args(d, k, o)
  checked('matrix_norm', opts, NORM_OPTS)
  if ord == nil then ord = opts.ord or 'fro' end
  if opts.dtype then A = A:to(opts.dtype) end
  return matrix_norm('matrix_norm', A, ord, d, keepdim)
end

------------------------------------------------------------------ norm
--- linalg.norm(x, ord = nil, dim = nil, keepdim = false), as torch:
-- dim a number (or list of one): vector norm; a list of two: matrix norm;
-- dim nil: ord nil gives the 2-norm of all elements, else x must be 1-D
-- (vector norm) or 2-D (matrix norm).
function linalg.norm(x, ord, d, k, o)
  if is_options(ord) then o, ord = ord, nil end
  util.check_tensor('linalg.norm', x)
  local keepdim, opts
  d, keepdim, opts = dim_args(d, k, o)
  checked('norm', opts, NORM_OPTS)
  if ord == nil then ord = opts.ord end
  if opts.dtype then x = x:to(opts.dtype) end
  if type(d) == 'number' or (type(d) == 'table' and #d == 1) then
    if type(ord) == 'string' then
      error(("linalg.norm: ord '%s' needs a matrix (dim with 2 dims)"):format(ord), 2)
    end
    return vector_norm('norm', x, ord or 2, d, keepdim)
  end
  if type(d) == 'table' then
    if #d ~= 2 then
      error(('linalg.norm: dim must have 1 or 2 dims, got %d'):format(#d), 2)
    end
    return matrix_norm('norm', x, ord or 'fro', d, keepdim)
  end
  if d ~= nil then error('linalg.norm: dim must be a number or a list, got ' .. type(d), 2) end
  if ord == nil then return vector_norm('norm', x, 2, nil, keepdim) end
  if x:dim() == 1 then
    if type(ord) == 'string' then
      error(("linalg.norm: ord '%s' needs a 2-D input, got shape %s"):format(
        ord, shape_str(x)), 2)
    end
    return vector_norm('norm', x, ord, nil, keepdim)
  elseif x:dim() == 2 then
    return matrix_norm('norm', x, ord, {1, 2}, keepdim)
  end
  error(('linalg.norm: with ord given and dim nil the input must be 1-D or 2-D, got shape %s')
    :format(shape_str(x)), 2)
end

------------------------------------------------------------------ multi_dot
--- linalg.multi_dot({A1, ..., An}): A1 @ ... @ An; the first may be 1-D (a
-- row vector), the last 1-D (a column vector), the others are 2-D.
function linalg.multi_dot(ts)
  if type(ts) ~= 'table' or is_tensor(ts) then
    error('linalg.multi_dot: expected a list of tensors, got ' .. type(ts), 2)
  end
  local n = #ts
  if n < 2 then
    error(('linalg.multi_dot: expected at least 2 tensors, got %d'):format(n), 2)
  end
  for i = 1, n do
    if not is_tensor(ts[i]) then
      error(('linalg.multi_dot: element %d is a %s, not a tensor'):format(i, type(ts[i])), 2)
    end
    local nd, at_end = ts[i]:dim(), i == 1 or i == n
    local ok = nd == 2 or (at_end and nd == 1)
    if not ok then
      error(('linalg.multi_dot: tensor %d must be %s, got shape %s'):format(
        i, at_end and '1-D or 2-D' or '2-D', shape_str(ts[i])), 2)
    end
    if ts[i].dtype ~= ts[1].dtype then
      error(('linalg.multi_dot: all tensors must have the same dtype, got %s and %s'):format(
        tostring(ts[1].dtype), tostring(ts[i].dtype)), 2)
    end
  end
  local first_vec, last_vec = ts[1]:dim() == 1, ts[n]:dim() == 1
  local mats = {}
  for i = 1, n do mats[i] = ts[i] end
  if first_vec then mats[1] = mats[1]:unsqueeze(1) end
  if last_vec then mats[n] = mats[n]:unsqueeze(2) end
  for i = 1, n - 1 do
    if mats[i]:size(2) ~= mats[i + 1]:size(1) then
      error(('linalg.multi_dot: tensors %d and %d cannot be multiplied (shapes %s and %s)')
        :format(i, i + 1, shape_str(ts[i]), shape_str(ts[i + 1])), 2)
    end
  end
  local r = mats[1]
  for i = 2, n do r = r:matmul(mats[i]) end
  if first_vec and last_vec then return r:reshape({}) end
  if first_vec then return r:squeeze(1) end
  if last_vec then return r:squeeze(2) end
  return r
end

------------------------------------------------------------------ matrix_power
local function check_square(op, A)
  if A:dim() < 2 or A:size(-1) ~= A:size(-2) then
    error(('linalg.%s: expected a batch of square matrices, got shape %s'):format(
      op, shape_str(A)), 3)
  end
end

--- linalg.matrix_power(A, n): A^n for an integer n (n = 0: identity,
-- n < 0: inv(A)^-n), batched over leading dims; by repeated squaring.
function linalg.matrix_power(A, n)
  util.check_tensor('linalg.matrix_power', A)
  check_square('matrix_power', A)
  if type(n) ~= 'number' or n % 1 ~= 0 then
    error('linalg.matrix_power: n must be an integer, got ' .. tostring(n), 2)
  end
  if n == 0 then
    local I = T.flow.eye(A:size(-1), {dtype = A.dtype})
    return I:expand(A:size()):contiguous()
  end
  if n < 0 then A, n = linalg.inv(A), -n end
  local result, base = nil, A
  while true do
    if n % 2 == 1 then result = result and result:matmul(base) or base end
    n = math.floor(n / 2)
    if n == 0 then break end
    base = base:matmul(base)
  end
  return result
end

------------------------------------------------------------------ cross
--- linalg.cross(a, b, {dim = -1}): the cross product of 3-vectors along dim
-- (size 3 in both); the other dims broadcast.
function linalg.cross(a, b, o)
  local d = -1
  if type(o) == 'number' then
    d = o
  elseif is_options(o) then
    d = util.check_options('linalg.cross', o, {'dim'}).dim or -1
  end
  return require('oneflow.ops.linalg').cross('linalg.cross', a, b, d)
end

------------------------------------------------------------------ diagonal
--- linalg.diagonal(A, {offset = 0, dim1 = -2, dim2 = -1}): the diagonal
-- (offset > 0 above, < 0 below) of the matrices in dims dim1, dim2, as a
-- new last dim. Differentiable (a gather, not a view).
function linalg.diagonal(A, o)
  util.check_tensor('linalg.diagonal', A)
  o = checked('diagonal', o, {offset = true, dim1 = true, dim2 = true}) or EMPTY
  local offset = o.offset or 0
  if type(offset) ~= 'number' or offset % 1 ~= 0 then
    error('linalg.diagonal: offset must be an integer, got ' .. tostring(offset), 2)
  end
  if A:dim() < 2 then
    error(('linalg.diagonal: expected at least 2 dims, got shape %s'):format(shape_str(A)), 2)
  end
  local d1 = norm_dim('diagonal', o.dim1 or -2, A:dim())
  local d2 = norm_dim('diagonal', o.dim2 or -1, A:dim())
  if d1 == d2 then
    error(('linalg.diagonal: dim1 and dim2 must differ, got %d twice'):format(d1), 2)
  end
  local perm = {}
  for i = 1, A:dim() do if i ~= d1 and i ~= d2 then perm[#perm + 1] = i end end
  perm[#perm + 1], perm[#perm + 2] = d1, d2
  local x = A:permute(perm)
  local rows, cols = A:size(d1), A:size(d2)
  local r0, c0 = math.max(-offset, 0), math.max(offset, 0)
  local len = math.max(math.min(rows - r0, cols - c0), 0)
  local idx = {}
  for i = 0, len - 1 do idx[i + 1] = (r0 + i) * cols + c0 + i + 1 end
  local flat = x:flatten(-2, -1)
  local index = T.flow.tensor(idx, {dtype = types.by_name.int64})
  if len == 0 then return flat:narrow(-1, 1, 0) end
  return flat:index_select(-1, index)
end


------------------------------------------------------------------ kernels
-- inv, det, slogdet, solve, cholesky, svdvals: LAPACK kernels in C (core/ops/linalg_ext.c,
-- float32/float64 on the CPU, batched over leading dims); each records its
-- backward rule there.
local function kcall(fn, ...)
  if fn(...) ~= 0 then raise(3) end
  return wrap(out1[0])
end

local function mT(x) return x:transpose(-2, -1) end

local function check_kernel_input(op, A)
  util.check_tensor('linalg.' .. op, A, 'A')
  if A:dim() < 2 or A:size(-1) ~= A:size(-2) then
    error(('linalg.%s: A must be batches of square matrices, got shape %s'):format(
      op, shape_str(A)), 3)
  end
end

--- linalg.inv(A): the inverse of each matrix of A (..., n, n). A singular
-- matrix raises (as torch) naming the zero diagonal element of its LU factor.
function linalg.inv(A)
  check_kernel_input('inv', A)
  return kcall(C.of_linalg_inv, A.p, out1)
end

--- linalg.det(A): determinants (...) of A (..., n, n). Its gradient needs A
-- invertible.
function linalg.det(A)
  check_kernel_input('det', A)
  return kcall(C.of_linalg_det, A.p, out1)
end

--- linalg.slogdet(A): sign, log|det| (two results), each of shape (...);
-- for a singular matrix sign 0 and logabsdet -inf.
function linalg.slogdet(A)
  check_kernel_input('slogdet', A)
  if C.of_linalg_slogdet(A.p, out1, out2) ~= 0 then raise(2) end
  return wrap(out1[0]), wrap(out2[0])
end

-- Broadcast of two batch shapes (lists), or nil when they don't broadcast.
local function broadcast_batch(a, b)
  local n, r = math.max(#a, #b), {}
  for i = 1, n do
    local x, y = a[#a - n + i] or 1, b[#b - n + i] or 1
    if x ~= y and x ~= 1 and y ~= 1 then return nil end
    r[i] = x == 1 and y or x
  end
  return r
end

--- linalg.svdvals(A): the singular values (..., min(m, n)) of A (..., m, n),
-- in descending order. Differentiable once (gA = U diag(gS) V^T).
function linalg.svdvals(A)
  util.check_tensor('linalg.svdvals', A, 'A')
  if A:dim() < 2 then
    error(('linalg.svdvals: A must have at least 2 dims, got shape %s'):format(shape_str(A)), 2)
  end
  return kcall(C.of_linalg_svdvals, A.p, out1)
end

--- linalg.solve(A, B, {left = true}): X with A X = B (left = false: X A = B).
-- A (..., n, n); B (..., n, k), or (..., n) / (n) for vectors (torch's rule:
-- B is a vector when 1-D or when its shape is A's without the last dim);
-- batch dims broadcast.
function linalg.solve(A, B, o)
  check_kernel_input('solve', A)
  util.check_tensor('linalg.solve', B, 'B')
  if o ~= nil and type(o) ~= 'table' then
    error('linalg.solve: options must be a table, got ' .. type(o), 2)
  end
  checked('solve', o, {left = true})
  if o and o.left == false then
    if B:dim() < 2 then
      error(('linalg.solve: with left = false B must have at least 2 dims, got shape %s')
        :format(shape_str(B)), 2)
    end
    return mT(linalg.solve(mT(A), mT(B)))
  end
  local ashape, bshape = A:size():totable(), B:size():totable()
  local vec = B:dim() == 1
  if B:dim() == A:dim() - 1 then
    vec = true
    for i = 1, #bshape do if bshape[i] ~= ashape[i] then vec = false end end
  end
  local n = A:size(-1)
  if vec then B = B:unsqueeze(-1) end
  if B:dim() < 2 or B:size(-2) ~= n then
    error(('linalg.solve: incompatible shapes of A and B for the equation AX = B (%s and %s)')
      :format(shape_str(A), shape_str(vec and B:squeeze(-1) or B)), 2)
  end
  local ab, bb = {}, {}
  for i = 1, A:dim() - 2 do ab[i] = ashape[i] end
  for i = 1, B:dim() - 2 do bb[i] = B:size(i) end
  local batch = broadcast_batch(ab, bb)
  if batch == nil then
    error(('linalg.solve: the batch dims of A and B do not broadcast (shapes %s and %s)')
      :format(shape_str(A), shape_str(B)), 2)
  end
  if A.dtype ~= B.dtype then
    error(('linalg.solve: A and B must have the same dtype, got %s and %s'):format(
      tostring(A.dtype), tostring(B.dtype)), 2)
  end
  local sa, sb = {unpack(batch)}, {unpack(batch)}
  sa[#sa + 1], sa[#sa + 2] = n, n
  sb[#sb + 1], sb[#sb + 2] = n, B:size(-1)
  A, B = A:expand(sa), B:expand(sb)
  local X = kcall(C.of_linalg_solve, A.p, B.p, out1)
  if vec then X = X:squeeze(-1) end
  return X
end

--- linalg.cholesky(A, {upper = false}): L lower triangular with A = L L^T
-- (upper: U = L^T with A = U^T U). Only A's lower triangle is read; a matrix
-- that is not positive-definite raises (as torch).
function linalg.cholesky(A, o)
  check_kernel_input('cholesky', A)
  checked('cholesky', o, {upper = true})
  local upper = type(o) == 'table' and o.upper or false
  return kcall(C.of_linalg_cholesky, A.p, upper and 1 or 0, out1)
end

------------------------------------------------------------------ decompositions
-- eigh, qr, svd: LAPACK kernels (dsyevd, dgeqrf + dorgqr, dgesdd) in
-- core/ops/linalg_ext.c with their backward rules; pinv, matrix_rank, lstsq
-- are written on top of svd / eigh (so they are differentiable too).
local out3 = ffi.new('of_tensor*[1]')

local function opt(o, key, pos_type, default)
  if type(o) == pos_type then return o end
  if o == nil then return default end
  if type(o) ~= 'table' then
    error(('expected %s or an options table, got %s'):format(pos_type, type(o)), 3)
  end
  local v = o[key]
  if v == nil then return default end
  return v
end

local function uplo_arg(op, o)
  checked(op, o, {UPLO = true})
  local uplo = opt(o, 'UPLO', 'string', 'L')
  if uplo ~= 'L' and uplo ~= 'U' and uplo ~= 'l' and uplo ~= 'u' then
    error(("linalg.%s: UPLO must be 'L' or 'U', got %s"):format(op, tostring(uplo)), 3)
  end
  return (uplo == 'U' or uplo == 'u') and 1 or 0
end

--- linalg.eigh(A, {UPLO = 'L'}): eigenvalues (..., n) in ascending order and
-- eigenvectors (..., n, n) (the columns) of the symmetric matrices A; only the
-- triangle UPLO names is read. Eigenvectors are unique only up to sign.
function linalg.eigh(A, o)
  check_kernel_input('eigh', A)
  local upper = uplo_arg('eigh', o)
  if C.of_linalg_eigh(A.p, upper, out1, out2) ~= 0 then raise(2) end
  return wrap(out1[0]), wrap(out2[0])
end

--- linalg.eigvalsh(A, {UPLO = 'L'}): the eigenvalues of eigh only.
function linalg.eigvalsh(A, o)
  check_kernel_input('eigvalsh', A)
  local upper = uplo_arg('eigvalsh', o)
  if C.of_linalg_eigh(A.p, upper, out1, nil) ~= 0 then raise(2) end
  return wrap(out1[0])
end

local qr_modes = {reduced = 0, complete = 1, r = 2}

--- linalg.qr(A, {mode = 'reduced'}): Q, R with A = Q R, R upper triangular.
-- A (..., m, n), k = min(m, n): 'reduced' Q (..., m, k), R (..., k, n);
-- 'complete' Q (..., m, m), R (..., m, n); 'r' Q empty, R (..., k, n).
-- Differentiable in 'reduced' mode, and in 'complete' mode when m <= n.
function linalg.qr(A, o)
  util.check_tensor('linalg.qr', A, 'A')
  if A:dim() < 2 then
    error(('linalg.qr: A must have at least 2 dims, got shape %s'):format(shape_str(A)), 2)
  end
  local mode = opt(checked('qr', o, {mode = true}), 'mode', 'string', 'reduced')
  if qr_modes[mode] == nil then
    error(("linalg.qr: mode must be 'reduced', 'complete' or 'r', got %s"):format(
      tostring(mode)), 2)
  end
  if C.of_linalg_qr(A.p, qr_modes[mode], out1, out2) ~= 0 then raise(2) end
  return wrap(out1[0]), wrap(out2[0])
end

local function check_matrix(op, A)
  util.check_tensor('linalg.' .. op, A, 'A')
  if A:dim() < 2 then
    error(('linalg.%s: A must have at least 2 dims, got shape %s'):format(op, shape_str(A)), 3)
  end
end

--- linalg.svd(A, {full_matrices = true}): U, S, Vh with A = U diag(S) Vh, S
-- descending. full_matrices: U (..., m, m), Vh (..., n, n); false: U (..., m, k),
-- Vh (..., k, n), k = min(m, n). Singular vectors are unique only up to sign.
function linalg.svd(A, o)
  check_matrix('svd', A)
  local full = opt(checked('svd', o, {full_matrices = true}), 'full_matrices', 'boolean', true)
  if C.of_linalg_svd(A.p, full and 1 or 0, out1, out2, out3) ~= 0 then raise(2) end
  return wrap(out1[0]), wrap(out2[0]), wrap(out3[0])
end

local function eps_of(op, A)
  if A.dtype == types.by_name.float64 then return 2.220446049250313e-16 end
  if A.dtype == types.by_name.float32 then return 1.1920928955078125e-07 end
  error(('linalg.%s: expected a float32 or float64 tensor as A, got %s (shape %s)'):format(
    op, tostring(A.dtype), shape_str(A)), 3)
end

-- torch's tolerances: atol (default 0), rtol (default eps * max(m, n) when
-- atol is not given, else 0); threshold max(atol, rtol * smax) per matrix.
local function threshold(op, A, o, smax)
  local atol, rtol = o.atol, o.rtol
  if o.tol ~= nil then atol = o.tol end
  for _, v in ipairs({atol, rtol}) do
    if v ~= nil and type(v) ~= 'number' then
      error(('linalg.%s: atol / rtol must be numbers, got %s'):format(op, type(v)), 3)
    end
  end
  if rtol == nil then rtol = (atol ~= nil and atol > 0) and 0 or
    eps_of(op, A) * math.max(A:size(-1), A:size(-2)) end
  local thr = smax:detach() * rtol
  if atol ~= nil and atol > 0 then thr = thr:clamp_min(atol) end
  return thr:unsqueeze(-1)
end

-- s, and the basis: U S Vh (svd) or V L V^T (hermitian, s = |L|)
local function spectrum(op, A, hermitian)
  if hermitian then
    check_kernel_input(op, A)
    local l, v = linalg.eigh(A)
    return l, v, mT(v), l:abs()
  end
  local u, s, vh = linalg.svd(A, {full_matrices = false})
  return s, u, vh, s
end

--- linalg.pinv(A, {atol =, rtol =, hermitian = false}): the pseudo-inverse
-- (..., n, m) of A (..., m, n): singular values at or below max(atol, rtol *
-- largest) count as zero (rtol's default: eps * max(m, n) when atol is not
-- given). hermitian: A symmetric, through eigh. Differentiable.
function linalg.pinv(A, o)
  check_matrix('pinv', A)
  o = checked('pinv', o, {atol = true, rtol = true, hermitian = true}) or EMPTY
  local d, u, vh, mag = spectrum('pinv', A, o.hermitian)
  if mag:size(-1) == 0 then return T.flow.zeros_like(mT(A)) end
  local keep = mag:gt(threshold('pinv', A, o, mag:amax(-1)))
  local dinv = T.flow.where(keep, d:reciprocal(), T.flow.zeros_like(d))
  return mT(vh):matmul(dinv:unsqueeze(-1) * mT(u))
end

--- linalg.matrix_rank(A, {atol =, rtol =, tol =, hermitian = false}): the
-- number of singular values above max(atol, rtol * largest) (int64, (...)).
function linalg.matrix_rank(A, o)
  check_matrix('matrix_rank', A)
  o = checked('matrix_rank', o, {atol = true, rtol = true, tol = true, hermitian = true}) or EMPTY
  if type(o) == 'number' then o = {tol = o} end
  local mag
  if o.hermitian then
    check_kernel_input('matrix_rank', A)
    mag = linalg.eigvalsh(A):abs()
  else
    mag = linalg.svdvals(A)
  end
  if mag:size(-1) == 0 then return mag:sum(-1):to(types.by_name.int64) end
  local keep = mag:gt(threshold('matrix_rank', A, o, mag:amax(-1)))
  return keep:to(types.by_name.int64):sum(-1)
end

local lstsq_drivers = {gels = true, gelsy = true, gelsd = true, gelss = true}

--- linalg.lstsq(A, B, {rcond =, driver = 'gelsy'}) -> solution, residuals,
-- rank, singular_values: the least-squares solution X (..., n, k) of A X = B,
-- A (..., m, n), B (..., m, k) (or (m) for a 2-D A), batch dims broadcast.
-- Always computed through the SVD (pinv with rtol = rcond, default
-- eps * max(m, n)): the minimum-norm solution, also for rank-deficient A.
-- The other fields are filled as torch fills them for the driver: rank (...)
-- int64 except for 'gels'; singular_values (..., min(m, n)) for 'gelsd' and
-- 'gelss'; residuals (squared residual norms (..., k)) when m > n, for 'gels',
-- and for 'gelsd' / 'gelss' when every matrix has full rank. The others are
-- empty tensors. Differentiable in A and B (solution and residuals).
function linalg.lstsq(A, B, o)
  check_matrix('lstsq', A)
  util.check_tensor('linalg.lstsq', B, 'B')
  o = checked('lstsq', o, {rcond = true, driver = true}) or EMPTY
  if type(o) == 'number' then o = {rcond = o} end
  local driver = o.driver or 'gelsy'
  if not lstsq_drivers[driver] then
    error(('linalg.lstsq: driver should be one of gels, gelsy, gelsd, gelss, got %s'):format(
      tostring(driver)), 2)
  end
  if A.dtype ~= B.dtype then
    error(('linalg.lstsq: A and B must have the same dtype, got %s and %s'):format(
      tostring(A.dtype), tostring(B.dtype)), 2)
  end
  local vec = B:dim() == 1 and A:dim() == 2
  if vec then B = B:unsqueeze(-1) end
  if B:dim() < 2 or B:size(-2) ~= A:size(-2) then
    error(('linalg.lstsq: incompatible shapes of A and B for the equation AX = B (%s and %s)')
      :format(shape_str(A), shape_str(vec and B:squeeze(-1) or B)), 2)
  end
  local m, n = A:size(-2), A:size(-1)
  local rcond = o.rcond
  if rcond ~= nil and rcond < 0 then rcond = nil end
  local X = linalg.pinv(A, {rtol = rcond}):matmul(B)
  local empty = T.flow.zeros({0}, {dtype = A.dtype})
  local rank = linalg.matrix_rank(A:detach(), {rtol = rcond})
  local sv = (driver == 'gelsd' or driver == 'gelss') and linalg.svdvals(A):detach() or empty
  local residuals = empty
  local full_rank = driver == 'gels' or rank:eq(n):all():item()
  if m > n and driver ~= 'gelsy' and full_rank then
    residuals = (A:matmul(X) - B):pow(2):sum(-2)
    if vec then residuals = residuals:squeeze(-1) end
  end
  if driver == 'gels' then rank = T.flow.zeros({0}, {dtype = types.by_name.int64}) end
  if vec then X = X:squeeze(-1) end
  return X, residuals, rank, sv
end

------------------------------------------------------------------ composed
-- matmul, vecdot, vander, tensorinv, tensorsolve, solve_triangular,
-- matrix_exp, cond and the *_ex forms, written on the kernels above (so
-- their gradients are those of the ops they are made of).
linalg.matmul = function(a, b) return T.flow.matmul(a, b) end

--- linalg.vecdot(x, y, {dim = -1}): sum(x * y) over dim, broadcasting.
function linalg.vecdot(x, y, o)
  util.check_tensor('linalg.vecdot', x, 'x', 1)
  util.check_tensor('linalg.vecdot', y, 'y', 2)
  local d = opt(checked('vecdot', o, {dim = true}), 'dim', 'number', -1)
  return (x * y):sum(d)
end

--- linalg.vander(x, {N = x:size(-1)}): [..., n, N] with columns x^0 .. x^(N-1).
function linalg.vander(x, o)
  util.check_tensor('linalg.vander', x, 'x')
  if x:dim() < 1 then error('linalg.vander: x must have at least 1 dim', 2) end
  local n = opt(checked('vander', o, {N = true}), 'N', 'number', x:size(-1))
  if n < 0 then error('linalg.vander: N must be non-negative, got ' .. n, 2) end
  if n == 0 then
    local shape = x:size():totable()
    shape[#shape + 1] = 0
    return T.flow.zeros(shape, {dtype = x.dtype})
  end
  local cols = {T.flow.ones_like(x)}
  for i = 2, n do cols[i] = cols[i - 1] * x end
  return T.flow.stack(cols, -1)
end

local function prod(t, i, j)
  local r = 1
  for k = i, j do r = r * t[k] end
  return r
end

--- linalg.tensorinv(A, {ind = 2}): the inverse of A seen as a
-- (prod(shape[1..ind]) x prod(shape[ind+1..])) matrix, shaped
-- shape[ind+1..] .. shape[1..ind].
function linalg.tensorinv(A, o)
  util.check_tensor('linalg.tensorinv', A, 'A')
  local ind = opt(o, 'ind', 'number', 2)
  local s = A:size():totable()
  if ind < 1 or ind > #s then error(('linalg.tensorinv: ind must be in [1, %d], got %d'):format(#s, ind), 2) end
  local m, n = prod(s, 1, ind), prod(s, ind + 1, #s)
  if m ~= n then
    error(('linalg.tensorinv: expected prod(shape[1..ind]) == prod(shape[ind+1..]), got %d and %d (shape %s)')
      :format(m, n, shape_str(A)), 2)
  end
  local out = {}
  for i = ind + 1, #s do out[#out + 1] = s[i] end
  for i = 1, ind do out[#out + 1] = s[i] end
  return linalg.inv(A:reshape(m, n)):reshape(out)
end

--- linalg.tensorsolve(A, B, {dims =}): X with tensordot(A, X, X:dim()) = B.
-- dims (1-based) are moved to the end of A first.
function linalg.tensorsolve(A, B, o)
  util.check_tensor('linalg.tensorsolve', A, 'A')
  util.check_tensor('linalg.tensorsolve', B, 'B')
  local dims = opt(o, 'dims', 'table', nil)
  if dims then
    local moved, keep = {}, {}
    for _, d in ipairs(dims) do moved[(d < 0 and d + A:dim() + 1 or d)] = true end
    for d = 1, A:dim() do if not moved[d] then keep[#keep + 1] = d end end
    for _, d in ipairs(dims) do keep[#keep + 1] = d < 0 and d + A:dim() + 1 or d end
    A = A:permute(keep)
  end
  local s = A:size():totable()
  local nb = B:dim()
  local xshape = {}
  for i = nb + 1, #s do xshape[#xshape + 1] = s[i] end
  local m, n = B:numel(), prod(xshape, 1, #xshape)
  if m ~= n or prod(s, 1, nb) ~= m then
    error(('linalg.tensorsolve: shapes %s and %s do not form a square system'):format(shape_str(A), shape_str(B)), 2)
  end
  return linalg.solve(A:reshape(m, n), B:reshape(m)):reshape(xshape)
end

--- linalg.solve_triangular(A, B, {upper =, left = true, unitriangular = false}):
-- X with A X = B (left = false: X A = B), reading only A's upper or lower
-- triangle (and taking its diagonal as ones when unitriangular).
function linalg.solve_triangular(A, B, o)
  if type(o) ~= 'table' or o.upper == nil then
    error('linalg.solve_triangular: the option upper (true or false) is required', 2)
  end
  util.check_tensor('linalg.solve_triangular', A, 'A')
  local tri = o.upper and A:triu() or A:tril()
  if o.unitriangular then
    local n = A:size(-1)
    local eye = T.flow.eye(n, {dtype = A.dtype})
    tri = tri * (1 - eye) + eye
  end
  if o.left == false then return mT(linalg.solve(mT(tri), mT(B))) end
  if B:dim() < 2 then
    error(('linalg.solve_triangular: B must have at least 2 dims, got shape %s'):format(shape_str(B)), 2)
  end
  return linalg.solve(tri, B)
end

--- linalg.matrix_exp(A): exp of square matrices, by scaling and squaring
-- with a degree-18 Taylor polynomial (||A / 2^s|| <= 0.5: truncation below
-- 1e-18 relative); differentiable through matmul.
function linalg.matrix_exp(A)
  check_kernel_input('matrix_exp', A)
  local norm = A:abs():sum(-2):amax():item()   -- the 1-norm, over the batch
  local s = 0
  if norm > 0.5 then s = math.ceil(math.log(norm / 0.5) / math.log(2)) end
  local X = A / (2 ^ s)
  local n = A:size(-1)
  local eye = T.flow.eye(n, {dtype = A.dtype})
  local term, sum = eye:expand(A:size():totable()), eye:expand(A:size():totable())
  for k = 1, 18 do
    term = term:matmul(X) / k
    sum = sum + term
  end
  for _ = 1, s do sum = sum:matmul(sum) end
  return sum
end

--- linalg.cond(A, {p = nil}): the condition number in the p-norm (nil or 2:
-- largest / smallest singular value; -2: the reverse; 'fro', 'nuc', 1, -1,
-- inf, -inf: norm(A, p) * norm(inv(A), p)).
function linalg.cond(A, o)
  local p = o
  if type(o) == 'table' then p = util.check_options('linalg.cond', o, {p = true}).p end
  check_kernel_input('cond', A)
  if p == nil or p == 2 or p == -2 then
    local sv = linalg.svdvals(A)
    local hi, lo = sv:narrow(-1, 1, 1):squeeze(-1), sv:narrow(-1, sv:size(-1), 1):squeeze(-1)
    if p == -2 then return lo / hi end
    return hi / lo
  end
  return linalg.matrix_norm(A, p) * linalg.matrix_norm(linalg.inv(A), p)
end

-- f(A[, B], o) with errors turned into info /= 0 (info has A's batch
-- shape; 1 marks a matrix that failed, whose result is NaN; LAPACK's pivot
-- index is not reported). With check_errors the error is raised.
local function ex_form(name, f, two, allowed)
  allowed = allowed or {}
  allowed.check_errors = true
  return function(A, B, o)
    if not two then o, B = B, nil end
    checked(name, o, allowed)
    local check = type(o) == 'table' and o.check_errors
    local fo = o
    if type(o) == 'table' then
      fo = {}
      for k, v in pairs(o) do if k ~= 'check_errors' then fo[k] = v end end
    end
    util.check_tensor('linalg.' .. name, A, 'A', 1)
    if two then util.check_tensor('linalg.' .. name, B, 'B', 2) end
    local bshape = A:size():totable()
    bshape[#bshape], bshape[#bshape - 1] = nil, nil
    local ok, r = pcall(f, A, B, fo)
    if ok then return r, T.flow.zeros(bshape, {dtype = 'int32'}) end
    if check or (two and B:dim() ~= A:dim()) then error(('linalg.%s: %s'):format(name, tostring(r)), 2) end
    local n = 1
    for _, v in ipairs(bshape) do n = n * v end
    local flatA = A:reshape(n, A:size(-2), A:size(-1))
    local flatB = two and B:reshape(n, B:size(-2), B:size(-1))
    local outs, info = {}, {}
    for i = 1, n do
      local ok1, ri = pcall(f, flatA[i], flatB and flatB[i], fo)
      if ok1 then outs[i], info[i] = ri, 0 end
      if not ok1 then info[i] = 1 end
    end
    local like
    for i = 1, n do like = like or outs[i] end
    if like == nil then   -- every matrix failed: the result has the shape f would give
      like = two and flatB[1] or flatA[1]
    end
    for i = 1, n do
      if not outs[i] then outs[i] = T.flow.full(like:size():totable(), 0 / 0, {dtype = A.dtype}) end
    end
    local full = {unpack(bshape)}
    for _, v in ipairs(like:size():totable()) do full[#full + 1] = v end
    return T.flow.stack(outs, 1):reshape(full), T.flow.tensor(info, {dtype = 'int32'}):reshape(bshape)
  end
end
--- linalg.inv_ex(A, {check_errors = false}) -> inverse, info (0 = ok);
-- cholesky_ex(A, {upper, check_errors}) -> L, info; solve_ex(A, B, {left,
-- check_errors}) -> X, info (B with A's batch dims for the per-matrix info).
linalg.inv_ex = ex_form('inv_ex', function(A) return linalg.inv(A) end)
--- flow.linalg.cholesky_ex(A, {upper = false}) -> L, info: cholesky without raising; info > 0 where A is not
-- positive definite.
-- @function linalg.cholesky_ex
linalg.cholesky_ex = ex_form('cholesky_ex', function(A, _, o) return linalg.cholesky(A, o) end, false, {upper = true})
--- flow.linalg.solve_ex(A, B, {left = true}) -> X, info: solve without raising; info > 0 where A is singular.
-- @function linalg.solve_ex
linalg.solve_ex = ex_form('solve_ex', function(A, B, o) return linalg.solve(A, B, o) end, true, {left = true})


------------------------------------------------------------------ LU, LDL, Householder
-- The kernels (dgetrf, dsytrf, dsytrs) have no autograd of their own: lu and
-- lu_factor(_ex) get torch's gradient from a custom Function on the factors;
-- lu_solve and householder_product are composed of differentiable ops
-- (triangular solves, matmul); ldl_factor(_ex) and ldl_solve raise in the
-- backward, as torch.
local function factor_outs(fn, op, A)
  util.check_tensor('linalg.' .. op, A, 'A')
  if fn(A.p, out1, out2, out3) ~= 0 then raise(3) end
  return wrap(out1[0]), wrap(out2[0]), wrap(out3[0])
end

local function pivot_opt(op, o, with_check)
  if o ~= nil and type(o) ~= 'table' then
    error(('linalg.%s: options must be a table, got %s'):format(op, type(o)), 3)
  end
  if o then util.check_options('linalg.' .. op, o, with_check and {'pivot', 'check_errors'} or {'pivot'}) end
  if o and o.pivot == false then
    error(('linalg.%s: pivot = false is only supported on CUDA in torch; this CPU kernel always pivots')
      :format(op), 3)
  end
  return o and o.check_errors or false
end

-- the first nonzero info as torch's message
local function first_failure(info)
  local flat = info:reshape(-1):totable()
  for i, v in ipairs(flat) do if v ~= 0 then return i, v end end
end

-- check_errors of the *_factor_ex functions: the first zero pivot of `what`
-- (U or D) as torch's message, raised at the caller's caller
local function raise_singular(op, what, info, A)
  local b, v = first_failure(info)
  if b then
    error(('linalg.%s: %s%s[%d,%d] is zero (the matrix of shape %s is singular)'):format(
      op, A:dim() > 2 and ('(Batch element %d): '):format(b) or '', what, v, v, shape_str(A)), 3)
  end
end

-- The permutation matrices P (..., m, m) with A = P L U from LAPACK pivots
-- (..., k): row i was swapped with row pivots[i], in order.
local function pivots_to_perm(pivots, m, dtype)
  local bshape = pivots:size():totable()
  local k = table.remove(bshape)
  local flat = pivots:reshape(-1, math.max(k, 1)):totable()
  local nb = #flat
  if k == 0 then nb = pivots:numel() == 0 and 1 or nb end
  local rows = {}
  for b = 1, nb do
    local perm = {}
    for i = 1, m do perm[i] = i end
    local pv = flat[b] or {}
    for i = 1, k do
      local p = pv[i]
      if p < 1 or p > m then
        error(('linalg.lu_solve: pivots[%d] = %d is out of range 1..%d (pivots come from lu_factor)')
          :format(i, p, m), 4)
      end
      perm[i], perm[p] = perm[p], perm[i]
    end
    -- A[perm] = L U, so P = I[:, perm]: P[perm[j], j] = 1
    local P = {}
    for i = 1, m do
      P[i] = {}
      for j = 1, m do P[i][j] = 0 end
    end
    for j = 1, m do P[perm[j]][j] = 1 end
    rows[b] = P
  end
  local full = {unpack(bshape)}
  full[#full + 1], full[#full + 2] = m, m
  return T.flow.tensor(rows, {dtype = dtype}):reshape(full)
end

-- L (unit lower, m x k) and U (upper, k x n) from a packed LU (..., m, n)
local function unpack_lu(LU)
  local m, n = LU:size(-2), LU:size(-1)
  local k = math.min(m, n)
  local L = LU:narrow(-1, 1, k):tril(-1) + T.flow.eye(m, k, {dtype = LU.dtype})
  local U = LU:narrow(-2, 1, k):triu()
  return L, U
end

local function needs_grad(...)
  if C.of_is_grad_enabled() == 0 then return false end
  for i = 1, select('#', ...) do
    local x = select(i, ...)
    if x and x.requires_grad then return true end
  end
  return false
end

-- The autograd Functions (made on first use: autograd loads after this module).
local Functions = {}
local function fn_class(name)
  if not Functions[name] then Functions[name] = require('oneflow.autograd').Function:subclass(name) end
  return Functions[name]
end

-- torch's linalg_lu_backward (real case) for A = P L U, A (..., m, n),
-- k = min(m, n), L = [L1; L2] (m, k), U = [U1, U2] (k, n):
--   phi = tril(L1^T gL1 - gU2 U2^T, -1) + triu(gU1 U1^T - L2^T gL2)
--   gA = P [L1^-T phi U1^-T, L1^-T gU2; gL2 U1^-T]
local function lu_backward(f, gL, gU)
  local P, L, U = f.P, f.L, f.U
  local m, n = L:size(-2), U:size(-1)
  local k = math.min(m, n)
  gL = gL or T.flow.zeros_like(L)
  gU = gU or T.flow.zeros_like(U)
  local L1, U1 = L:narrow(-2, 1, k), U:narrow(-1, 1, k)
  local gL1, gU1 = gL:narrow(-2, 1, k), gU:narrow(-1, 1, k)
  local low, up = mT(L1):matmul(gL1), gU1:matmul(mT(U1))
  if n > k then low = low - gU:narrow(-1, k + 1, n - k):matmul(mT(U:narrow(-1, k + 1, n - k))) end
  if m > k then up = up - mT(L:narrow(-2, k + 1, m - k)):matmul(gL:narrow(-2, k + 1, m - k)) end
  local phi = low:tril(-1) + up:triu()
  local G = linalg.solve_triangular(mT(L1), phi, {upper = true, unitriangular = true})
  G = linalg.solve_triangular(mT(U1), G, {upper = false, left = false})   -- G U1^-T
  if n > k then
    G = T.flow.cat({G, linalg.solve_triangular(mT(L1), gU:narrow(-1, k + 1, n - k),
      {upper = true, unitriangular = true})}, -1)
  end
  if m > k then
    G = T.flow.cat({G, linalg.solve_triangular(mT(U1), gL:narrow(-2, k + 1, m - k),
      {upper = false, left = false})}, -2)
  end
  return P:matmul(G)
end

-- P, L, U of A (and the packed LU, pivots, info), differentiable in A
local function lu_parts(op, A)
  util.check_tensor('linalg.' .. op, A, 'A')
  local LU, piv, info = factor_outs(C.of_linalg_lu_factor, op, A:detach())
  local P = pivots_to_perm(piv, A:size(-2), A.dtype)
  local L, U = unpack_lu(LU)
  if needs_grad(A) then
    local F = fn_class('LinalgLu')
    if not F.forward then
      function F.forward(ctx, _, f)
        ctx.f = f
        return f.L:clone(), f.U:clone()
      end
      function F.backward(ctx, gL, gU)
        -- the rule uses the forward's P, L, U as constants: a second
        -- derivative would miss their part, so it is refused (as svdvals)
        if C.of_is_grad_enabled() ~= 0 then
          error('linalg.lu: create_graph (second derivatives) is not supported through lu / lu_factor', 0)
        end
        return lu_backward(ctx.f, gL, gU)
      end
    end
    L, U = F.apply(A, {P = P, L = L, U = U})
    -- the packed form from the differentiable L and U
    local m, n = A:size(-2), A:size(-1)
    local function zeros(r, c)
      local sh = A:size():totable()
      sh[#sh - 1], sh[#sh] = r, c
      return T.flow.zeros(sh, {dtype = A.dtype})
    end
    local Lp, Up = L:tril(-1), U
    if m > n then Up = T.flow.cat({U, zeros(m - n, n)}, -2) end
    if n > m then Lp = T.flow.cat({Lp, zeros(m, n - m)}, -1) end
    LU = Lp + Up
  end
  return P, L, U, LU, piv, info
end

-- torch raises in the backward of ldl_factor / ldl_solve; so does flow
local function not_differentiable(op, out, ...)
  if not needs_grad(...) then return out end
  local F = fn_class('Linalg' .. op:gsub('^%l', string.upper):gsub('_(%l)', string.upper))
  if not F.forward then
    function F.forward(_, x) return x:clone() end
    function F.backward()
      error(('linalg.%s: the derivative is not implemented (as in torch)'):format(op), 0)
    end
  end
  return F.apply(out, ...)
end

--- linalg.lu(A, {pivot = true}) -> P, L, U with A = P L U: P (..., m, m) a
-- permutation matrix, L (..., m, k) unit lower, U (..., k, n) upper,
-- k = min(m, n). Differentiable (torch's rule, also for m ~= n).
function linalg.lu(A, o)
  pivot_opt('lu', o)
  local P, L, U = lu_parts('lu', A)
  return P, L, U
end

--- linalg.lu_factor_ex(A, {pivot = true, check_errors = false}) -> LU, pivots, info:
-- LU of A (..., m, n) with partial pivoting; pivots int32 (..., min(m, n)),
-- 1-based row swaps (LAPACK's, as torch's; 1-based indices as everywhere in
-- flow); info int32 (...): k > 0 when U[k, k] is exactly zero.
function linalg.lu_factor_ex(A, o)
  local check = pivot_opt('lu_factor_ex', o, true)
  local _, _, _, LU, piv, info = lu_parts('lu_factor_ex', A)
  if check then raise_singular('lu_factor_ex', 'U', info, A) end
  return LU, piv, info
end

--- linalg.lu_factor(A, {pivot = true}) -> LU, pivots; a singular matrix raises
-- (as torch: U[k, k] zero would divide by zero in lu_solve).
function linalg.lu_factor(A, o)
  pivot_opt('lu_factor', o)
  local _, _, _, LU, piv, info = lu_parts('lu_factor', A)
  local b, v = first_failure(info)
  if b then
    error(('linalg.lu_factor: %sU[%d,%d] is zero and using it on lu_solve would result in a division by '
      .. 'zero (A of shape %s, %s). Use linalg.lu or linalg.lu_factor_ex to factor it anyway'):format(
      A:dim() > 2 and ('(Batch element %d): '):format(b) or '', v, v, shape_str(A), tostring(A.dtype)), 2)
  end
  return LU, piv
end

--- linalg.lu_solve(LU, pivots, B, {left = true, adjoint = false}): X with
-- A X = B (left = false: X A = B; adjoint: A^T instead of A) for
-- A = P L U from lu_factor. Differentiable w.r.t. LU and B.
function linalg.lu_solve(LU, pivots, B, o)
  util.check_tensor('linalg.lu_solve', LU, 'LU')
  util.check_tensor('linalg.lu_solve', B, 'B')
  util.check_tensor('linalg.lu_solve', pivots, 'pivots')
  if o ~= nil and type(o) ~= 'table' then error('linalg.lu_solve: options must be a table, got ' .. type(o), 2) end
  local left, adjoint = not (o and o.left == false), o and o.adjoint or false
  for _, x in ipairs({LU, pivots, B}) do
    if x.device.type ~= 'cpu' then
      error(('linalg.lu_solve: not implemented on cuda (a CUDA tensor of shape %s; the triangular solves use '
        .. 'the CPU\'s LAPACK: move it with :cpu())'):format(shape_str(x)), 2)
    end
  end
  if LU:dim() < 2 or LU:size(-1) ~= LU:size(-2) then
    error(('linalg.lu_solve: LU must be batches of square matrices, got shape %s'):format(shape_str(LU)), 2)
  end
  local n = LU:size(-1)
  if pivots:dim() ~= LU:dim() - 1 or pivots:size(-1) ~= n then
    error(('linalg.lu_solve: pivots of shape %s do not match LU of shape %s (expected LU\'s shape without '
      .. 'its last dim)'):format(shape_str(pivots), shape_str(LU)), 2)
  end
  if B:dim() < 2 or B:size(left and -2 or -1) ~= n then
    error(('linalg.lu_solve: incompatible shapes of LU and B (%s and %s) for %s'):format(shape_str(LU),
      shape_str(B), left and 'A X = B' or 'X A = B'), 2)
  end
  if LU.dtype ~= B.dtype then
    error(('linalg.lu_solve: LU and B must have the same dtype, got %s and %s'):format(
      tostring(LU.dtype), tostring(B.dtype)), 2)
  end
  local P = pivots_to_perm(pivots, n, LU.dtype)
  local L, U = unpack_lu(LU)
  local function solveA(R)   -- A^-1 R
    local Y = linalg.solve_triangular(L, mT(P):matmul(R), {upper = false, unitriangular = true})
    return linalg.solve_triangular(U, Y, {upper = true})
  end
  local function solveAt(R)   -- A^-T R = P L^-T U^-T R
    local Y = linalg.solve_triangular(mT(U), R, {upper = false})
    return P:matmul(linalg.solve_triangular(mT(L), Y, {upper = true, unitriangular = true}))
  end
  if left then return adjoint and solveAt(B) or solveA(B) end
  -- X A = B  <=>  A^T X^T = B^T
  return mT(adjoint and solveA(mT(B)) or solveAt(mT(B)))
end

--- linalg.householder_product(A, tau): the first n columns of
-- H_1 H_2 ... H_k, H_i = I - tau_i v_i v_i^T, v_i the i-th column of A
-- (..., m, n) below the diagonal with a 1 on it (LAPACK's orgqr);
-- differentiable in A and tau.
function linalg.householder_product(A, tau)
  util.check_tensor('linalg.householder_product', A, 'A')
  util.check_tensor('linalg.householder_product', tau, 'tau')
  if A:dim() < 2 or A:size(-2) < A:size(-1) then
    error(('linalg.householder_product: A must have at least 2 dims with rows >= columns, got shape %s')
      :format(shape_str(A)), 2)
  end
  local m, n, k = A:size(-2), A:size(-1), tau:size(-1)
  if tau:dim() ~= A:dim() - 1 or k > n then
    error(('linalg.householder_product: tau of shape %s does not fit A of shape %s (expected (..., k), k <= %d)')
      :format(shape_str(tau), shape_str(A), n), 2)
  end
  if A.dtype ~= tau.dtype then
    error(('linalg.householder_product: A and tau must have the same dtype, got %s and %s'):format(
      tostring(A.dtype), tostring(tau.dtype)), 2)
  end
  local eye = T.flow.eye(m, {dtype = A.dtype, device = A.device})
  local V = A:tril(-1) + T.flow.eye(m, n, {dtype = A.dtype, device = A.device})
  local Q = eye:narrow(-1, 1, n)
  -- Q = H_1 (H_2 (... (H_k I[:, :n]))): applied from the last reflector
  for i = k, 1, -1 do
    local v = V:narrow(-1, i, 1)                              -- (..., m, 1)
    local t = tau:narrow(-1, i, 1):unsqueeze(-1)              -- (..., 1, 1)
    Q = Q - (v * t):matmul(mT(v):matmul(Q))
  end
  return Q
end

--- linalg.ldl_factor_ex(A, {hermitian = false, check_errors = false}) -> LD,
-- pivots, info: Bunch-Kaufman LDL^T of symmetric A (its lower triangle is
-- read) as LAPACK's dsytrf: LD holds L below the diagonal and the 1x1 / 2x2
-- blocks of D; pivots int32, 1-based, negative for 2 x 2 blocks (as torch);
-- info k > 0 when D[k, k] is exactly zero. Its backward raises (as torch).
function linalg.ldl_factor_ex(A, o)
  if o ~= nil and type(o) ~= 'table' then error('linalg.ldl_factor_ex: options must be a table, got ' .. type(o), 2) end
  if o then util.check_options('linalg.ldl_factor_ex', o, {'hermitian', 'check_errors'}) end
  util.check_tensor('linalg.ldl_factor_ex', A, 'A')
  local LD, piv, info = factor_outs(C.of_linalg_ldl_factor, 'ldl_factor_ex', A:detach())
  LD = not_differentiable('ldl_factor', LD, A)
  if o and o.check_errors then raise_singular('ldl_factor_ex', 'D', info, A) end
  return LD, piv, info
end

--- linalg.ldl_factor(A, {hermitian = false}) -> LD, pivots (real matrices:
-- hermitian is symmetric). A singular D is reported by ldl_factor_ex's info.
function linalg.ldl_factor(A, o)
  if type(o) == 'table' then util.check_options('linalg.ldl_factor', o, {'hermitian'}) end
  local LD, piv = linalg.ldl_factor_ex(A, o)
  return LD, piv
end

--- linalg.ldl_solve(LD, pivots, B, {hermitian = false}): X with A X = B from
-- ldl_factor's results (LAPACK dsytrs); B (..., n, k) with LD's batch dims.
-- Its backward raises (as torch).
function linalg.ldl_solve(LD, pivots, B, o)
  util.check_tensor('linalg.ldl_solve', LD, 'LD')
  util.check_tensor('linalg.ldl_solve', pivots, 'pivots')
  util.check_tensor('linalg.ldl_solve', B, 'B')
  if o ~= nil and type(o) ~= 'table' then error('linalg.ldl_solve: options must be a table, got ' .. type(o), 2) end
  -- each detached handle in a local: a bare .p of a temporary could be
  -- released by the sweep the second detach() runs
  local ld, b = LD:detach(), B:detach()
  local X = kcall(C.of_linalg_ldl_solve, ld.p, pivots.p, b.p, out1)
  return not_differentiable('ldl_solve', X, LD, B)
end

------------------------------------------------------------------ matrix_sqrth, polar (torch 2.x)
local function matrix_input(op, A, tall)
  util.check_tensor('linalg.' .. op, A, 'A')
  if not A.dtype.is_floating_point then
    error(('linalg.%s: expected a floating point tensor as A, got %s (shape %s)'):format(
      op, tostring(A.dtype), shape_str(A)), 3)
  end
  if A:dim() < 2 then
    error(('linalg.%s: A must have at least 2 dims, got shape %s'):format(op, shape_str(A)), 3)
  end
  if A.device.type ~= 'cpu' then
    error(('linalg.%s: not implemented on cuda (A of shape %s is a CUDA tensor; it goes through the CPU\'s '
      .. 'LAPACK: move it with :cpu())'):format(op, shape_str(A)), 3)
  end
  local m, n = A:size(-2), A:size(-1)
  if tall and m < n then
    error(('linalg.%s: input must have at least as many rows as columns, but got %d by %d matrices')
      :format(op, m, n), 3)
  elseif not tall and m ~= n then
    error(('linalg.%s: A must be batches of square matrices, but they are %d by %d matrices'):format(
      op, m, n), 3)
  end
end

-- V (M o 1 / (s_i + s_j)) V^T
local function sylvester(V, s, Mx)
  local den = s:unsqueeze(-1) + s:unsqueeze(-2)
  return V:matmul((mT(V):matmul(Mx):matmul(V)) / den):matmul(mT(V))
end

local function no_double_backward(op)
  if C.of_is_grad_enabled() ~= 0 then
    error(('linalg.%s: create_graph (second derivatives) is not supported'):format(op), 0)
  end
end

--- linalg.matrix_sqrth(A): the principal square root X (X X = A) of the
-- symmetric positive-definite A (..., n, n), from eigh (only A's lower
-- triangle is read; negative eigenvalues are clamped to 0, as torch 2.x).
-- Gradient (torch's): gA = V (V^T sym(gX) V / (s_i + s_j)) V^T, s = sqrt(eigenvalues).
function linalg.matrix_sqrth(A)
  matrix_input('matrix_sqrth', A)
  local L, V = linalg.eigh(A:detach())
  local s = L:clamp(0):sqrt()
  local X = V:matmul(s:unsqueeze(-1) * mT(V))
  if not needs_grad(A) then return X end
  local F = fn_class('LinalgMatrixSqrth')
  if not F.forward then
    function F.forward(ctx, _, f)
      ctx.f = f
      return f.X:clone()
    end
    function F.backward(ctx, g)
      no_double_backward('matrix_sqrth')
      return sylvester(ctx.f.V, ctx.f.s, (g + mT(g)) * 0.5)
    end
  end
  return F.apply(A, {X = X, V = V, s = s})
end

--- linalg.polar(A) -> U, H: A = U H for A (..., m, n), m >= n, U with
-- orthonormal columns, H symmetric positive-semidefinite (through the thin
-- SVD A = W S Vh: U = W Vh, H = Vh^T S Vh). Differentiable where A has full
-- column rank: with G = gH - U^T gU H^-1, K = V (V^T G V / (s_i + s_j)) V^T
-- (V = Vh^T), gA = gU H^-1 + A (K + K^T) (torch 2.x's values).
function linalg.polar(A)
  matrix_input('polar', A, true)
  local W, S, Vh = linalg.svd(A:detach(), {full_matrices = false})
  local U = W:matmul(Vh)
  local H = mT(Vh):matmul(S:unsqueeze(-1) * Vh)
  if not needs_grad(A) then return U, H end
  local F = fn_class('LinalgPolar')
  if not F.forward then
    function F.forward(ctx, _, f)
      ctx.f = f
      return f.U:clone(), f.H:clone()
    end
    function F.backward(ctx, gU, gH)
      no_double_backward('polar')
      local f = ctx.f
      local V = mT(f.Vh)
      local Hinv = V:matmul(mT(V) / f.S:unsqueeze(-1))
      local gA = gU:matmul(Hinv)
      local K = sylvester(V, f.S, gH - mT(f.U):matmul(gU):matmul(Hinv))
      return gA + f.A:matmul(K + mT(K))
    end
  end
  return F.apply(A, {U = U, H = H, Vh = Vh, S = S, A = A:detach()})
end

------------------------------------------------------------------ eig, eigvals
-- LAPACK's dgeev (core/ops/linalg_ext.c) gives complex L, V; torch's
-- linalg_eig_backward (real A) is recorded here with a custom Function. Flow
-- has no complex matmul or solve, so the rule works on (re, im) pairs of real
-- tensors: a complex product is four real matmuls, a complex solve one real
-- solve of the 2n x 2n system [[Mr, -Mi], [Mi, Mr]].
local function cparts(z)
  local r = T.flow.view_as_real(z:contiguous())
  return r:select(-1, 1), r:select(-1, 2)
end

local function cmm(ar, ai, br, bi)   -- (ar + i ai)(br + i bi)
  return ar:matmul(br) - ai:matmul(bi), ar:matmul(bi) + ai:matmul(br)
end

local function cdiv(ar, ai, br, bi)   -- elementwise (ar + i ai) / (br + i bi)
  local den = br * br + bi * bi
  return (ar * br + ai * bi) / den, (ai * br - ar * bi) / den
end

local function diag_of(x) return x:diagonal(0, -2, -1) end

local function diag_mat(d)   -- (..., n) -> (..., n, n)
  local n = d:size(-1)
  return d:unsqueeze(-1) * T.flow.eye(n, {dtype = d.dtype})
end

-- torch's linalg_eig_backward for real A (is_hermitian = false):
--   gV: W = V^H gV, W = W - V^H V diag(Re(diag(W))) (the unit-norm
--       normalisation), W_ij / E_ij off the diagonal with
--       E_ij = conj(L_j) - conj(L_i) (1 on the diagonal); + diag(gL)
--   gA = Re(V^-H (W V^H))
-- A loss that depends on the eigenvectors' phases (Im diag(V^H gV) not ~0)
-- raises, with torch's message.
local function eig_backward(f, gL, gV)
  local Vr, Vi = cparts(f.V)
  local Hr, Hi = mT(Vr), -mT(Vi)   -- V^H
  local Wr, Wi
  if gV then
    local gr, gi = cparts(gV)
    Wr, Wi = cmm(Hr, Hi, gr, gi)
    local dim = diag_of(Wi)
    if dim:numel() > 0 and dim:abs():max():item() > 1e-2 then
      error('linalg.eig: linalg_eig_backward: The eigenvectors in the complex case are specified up to '
        .. 'multiplication by e^{i phi}. The specified loss function depends on this quantity, so it is '
        .. 'ill-defined.', 0)
    end
    local dre = diag_of(Wr):unsqueeze(-2)
    local pr, pi = cmm(Hr, Hi, Vr * dre, Vi * dre)
    Wr, Wi = Wr - pr, Wi - pi
    local Lr, Li = cparts(f.L)
    local n = Lr:size(-1)
    local Er = Lr:unsqueeze(-2) - Lr:unsqueeze(-1) + T.flow.eye(n, {dtype = Lr.dtype})
    local Ei = Li:unsqueeze(-1) - Li:unsqueeze(-2)   -- Im(conj(L_j) - conj(L_i))
    Wr, Wi = cdiv(Wr, Wi, Er, Ei)
  end
  if gL then
    local lr, li = cparts(gL)
    if Wr then
      Wr, Wi = Wr + diag_mat(lr), Wi + diag_mat(li)
    else
      Wr, Wi = diag_mat(lr), diag_mat(li)
    end
  end
  local Pr, Pi = cmm(Wr, Wi, Hr, Hi)
  -- V^H X = P as [[Hr, -Hi], [Hi, Hr]] [Xr; Xi] = [Pr; Pi]; gA = Xr
  local cat = T.flow.cat
  local M = cat({cat({Hr, -Hi}, -1), cat({Hi, Hr}, -1)}, -2)
  local X = linalg.solve(M, cat({Pr, Pi}, -2))
  return X:narrow(-2, 1, Hr:size(-1)):contiguous()
end

local function eig_parts(op, A, o, vectors)
  check_kernel_input(op, A)
  checked(op, o, {})
  if o ~= nil and not is_options(o) then
    error(('linalg.%s: expected an options table, got %s'):format(op, type(o)), 3)
  end
  local grad = needs_grad(A)
  local a = A:detach()   -- in a local: the sweep may release a temporary's handle
  if C.of_linalg_eig(a.p, out1, (vectors or grad) and out2 or nil) ~= 0 then raise(3) end
  local L = wrap(out1[0])
  local V = (vectors or grad) and wrap(out2[0]) or nil
  if not grad then return L, V end
  local F = fn_class(vectors and 'LinalgEig' or 'LinalgEigvals')
  if not F.forward then
    function F.forward(ctx, _, f)
      ctx.f = f
      if f.vectors then return f.L:clone(), f.V:clone() end
      return f.L:clone()
    end
    function F.backward(ctx, gL, gV)
      -- the rule uses the forward's L and V as constants: refused (as svdvals)
      no_double_backward(ctx.f.vectors and 'eig' or 'eigvals')
      if not gL and not gV then return nil end
      return eig_backward(ctx.f, gL, ctx.f.vectors and gV or nil)
    end
  end
  return F.apply(A, {L = L, V = V, vectors = vectors})
end

--- linalg.eig(A) -> L, V: the eigenvalues (..., n) and right eigenvectors
-- (..., n, n) (the columns, A V = V diag(L)) of the real square matrices A,
-- complex64 for float32 A and complex128 for float64 (LAPACK dgeev, as
-- torch: its order, a conjugate pair with the positive imaginary part first,
-- each column of unit norm with its largest component real). Eigenvectors
-- are unique only up to a complex phase: differentiable (torch's rule) for
-- losses that do not depend on it; A with NaN or inf raises.
function linalg.eig(A, o)
  return eig_parts('eig', A, o, true)
end

--- linalg.eigvals(A): the eigenvalues of eig only (complex, (..., n)).
-- Gradient: Re(V^-H diag(gL) V^H).
function linalg.eigvals(A, o)
  return (eig_parts('eigvals', A, o, false))
end

T.flow.linalg = linalg
return linalg
