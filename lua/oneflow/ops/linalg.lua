-- oneflow.ops.linalg: matrix products (core/ops/matmul.c).
--   x:matmul(y) / flow.matmul   PyTorch semantics: 1-D dot, 2-D mm, batched
--                               with broadcast batch dims
--   flow.mm(a, b[, {out = t}])  2-D only; `out` is written in place
--   flow.bmm(a, b)              3-D, equal batch sizes
--   flow.addmm(c, a, b, {beta = 1, alpha = 1})   beta * c + alpha * (a @ b)
--   flow.dot(a, b), x:mv(v), flow.outer(a, b)
-- All are differentiable (core/ops/matmul.c records one backward rule).
-- Both operands must have the same dtype (as PyTorch); errors name the op,
-- the shapes and the dtypes.
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local A = require 'oneflow._args'

local C, out1, raise, wrap = core.C, core.out1, core.raise, core.wrap
local def, is_tensor = T.def, T.is_tensor
local of_matmul, of_mm, of_bmm, of_addmm = C.of_matmul, C.of_mm, C.of_bmm, C.of_addmm

local shape_str = A.shape_str
local M = {}

-- Both arguments must be tensors; the error points at the user's call.
local function check2(op, a, b)
  if not (is_tensor(a) and is_tensor(b)) then
    error(('%s: expected two tensors, got %s and %s'):format(op, type(a), type(b)), 3)
  end
end

--- Matrix product with PyTorch's rules: 1-D operands are vectors, batch dims
-- broadcast. Also `x:matmul(y)`.
-- @tparam Tensor a
-- @tparam Tensor b
-- @treturn Tensor
def('matmul', function(a, b)
  check2('matmul', a, b)
  if of_matmul(a.p, b.p, out1) ~= 0 then raise(2) end
  return wrap(out1[0])
end)

--- flow.mm(a, b): the matrix product of two 2-d tensors.
def('mm', function(a, b, opts)
  check2('mm', a, b)
  local into = A.check_options('mm', opts, {out = true}).out
  if into ~= nil and not is_tensor(into) then
    error('mm: option out must be a tensor, got ' .. type(into), 2)
  end
  if of_mm(a.p, b.p, into and into.p, out1) ~= 0 then raise(2) end
  if into then
    C.of_tensor_release(out1[0])   -- the result is `into` itself, retained
    return into
  end
  return wrap(out1[0])
end)

--- flow.bmm(a, b): batched matrix product of [B, n, m] and [B, m, p].
def('bmm', function(a, b)
  check2('bmm', a, b)
  if of_bmm(a.p, b.p, out1) ~= 0 then raise(2) end
  return wrap(out1[0])
end)

--- flow.addmm(c, a, b, {beta =, alpha =}) = beta * c + alpha * (a @ b);
-- also c:addmm(a, b, opts). With beta = 0, c's values are not read.
def('addmm', function(c, a, b, opts)
  check2('addmm', a, b)
  if not is_tensor(c) then error('addmm: expected a tensor input, got ' .. type(c), 2) end
  local beta, alpha = 1, 1
  if opts ~= nil then
    A.check_options('addmm', opts, {beta = true, alpha = true})
    beta, alpha = opts.beta or 1, opts.alpha or 1
  end
  if of_addmm(c.p, a.p, b.p, beta, alpha, out1) ~= 0 then raise(2) end
  return wrap(out1[0])
end)

--- flow.baddbmm(c, a, b, {beta = 1, alpha = 1}) = beta * c + alpha * bmm(a, b);
-- c broadcasts to [B, n, p]. With beta = 0, c's values are not read (as
-- PyTorch: a NaN in c does not propagate). Also c:baddbmm(a, b, opts).
def('baddbmm', function(c, a, b, opts)
  check2('baddbmm', a, b)
  if not is_tensor(c) then error('baddbmm: expected a tensor input, got ' .. type(c), 2) end
  opts = A.check_options('baddbmm', opts, {beta = true, alpha = true})
  local beta, alpha = opts.beta or 1, opts.alpha or 1
  local p = T.flow.bmm(a, b)
  if alpha ~= 1 then p = p * alpha end
  if beta == 0 then return p end
  return (beta == 1 and c or c * beta) + p
end)

-- dims of one tensordot operand: a count n (the last n of a, the first n of
-- b) or an explicit list of 1-based dims
local function contract_dims(op, x, dims, last)
  if type(dims) == 'number' then
    if dims < 0 or dims > x:dim() or dims ~= math.floor(dims) then
      error(('%s: dims must be an integer in [0, %d], got %s'):format(op, x:dim(), tostring(dims)), 4)
    end
    local r = {}
    for i = 1, dims do r[i] = last and x:dim() - dims + i or i end
    return r
  end
  local r = {}
  for i, d in ipairs(dims) do
    if d < 0 then d = d + x:dim() + 1 end
    if d < 1 or d > x:dim() then
      error(('%s: dim %d out of range for a tensor of shape %s'):format(op, dims[i], shape_str(x)), 4)
    end
    r[i] = d
  end
  return r
end

--- flow.tensordot(a, b, dims): sums products over the given dims.
-- `dims` is a count n (last n of a with first n of b, default 2) or a pair of
-- lists of 1-based dims `{{da...}, {db...}}`. Composed of permute/reshape/mm,
-- so differentiable.
def('tensordot', function(a, b, dims, opts)
  check2('tensordot', a, b)
  if type(dims) == 'table' and dims.dims ~= nil then dims, opts = dims.dims, dims end
  if dims == nil then dims = 2 end
  local da, db
  if type(dims) == 'number' then
    da, db = contract_dims('tensordot', a, dims, true), contract_dims('tensordot', b, dims, false)
  else
    if type(dims) ~= 'table' or #dims ~= 2 then
      error('tensordot: dims must be a number or a pair of dim lists {{...}, {...}}', 2)
    end
    da, db = contract_dims('tensordot', a, dims[1], true), contract_dims('tensordot', b, dims[2], false)
  end
  if #da ~= #db then
    error(('tensordot: %d dims of a against %d dims of b'):format(#da, #db), 2)
  end
  local ina, inb, k = {}, {}, 1
  for i = 1, #da do
    if a:size(da[i]) ~= b:size(db[i]) then
      error(('tensordot: contracted dim %d of a %s (size %d) does not match dim %d of b %s (size %d)'):format(
        da[i], shape_str(a), a:size(da[i]), db[i], shape_str(b), b:size(db[i])), 2)
    end
    ina[da[i]], inb[db[i]], k = true, true, k * a:size(da[i])
  end
  local pa, pb, shape, m, n = {}, {}, {}, 1, 1
  for d = 1, a:dim() do
    if not ina[d] then pa[#pa + 1], shape[#shape + 1], m = d, a:size(d), m * a:size(d) end
  end
  for _, d in ipairs(da) do pa[#pa + 1] = d end
  for _, d in ipairs(db) do pb[#pb + 1] = d end
  for d = 1, b:dim() do
    if not inb[d] then pb[#pb + 1], shape[#shape + 1], n = d, b:size(d), n * b:size(d) end
  end
  local am = (#pa > 0 and a:permute(pa) or a):reshape(m, k)
  local bm = (#pb > 0 and b:permute(pb) or b):reshape(k, n)
  local r = am:mm(bm)
  if A.check_options('tensordot', opts, {out = true}).out then error('tensordot: option out is not supported', 2) end
  return r:reshape(shape)
end)

--- Dot product of two 1-D tensors (a 0-d tensor).
def('dot', function(a, b)
  check2('dot', a, b)
  if a:dim() ~= 1 or b:dim() ~= 1 then
    error(('dot: expected 1-D tensors, got shapes %s and %s'):format(shape_str(a), shape_str(b)), 2)
  end
  if a:size(1) ~= b:size(1) then
    error(('dot: shapes %s and %s do not match (%d vs %d)'):format(
      shape_str(a), shape_str(b), a:size(1), b:size(1)), 2)
  end
  if of_matmul(a.p, b.p, out1) ~= 0 then raise(2) end
  return wrap(out1[0])
end)
--- Matrix (n, m) times vector (m) -> (n).
def('mv', function(x, v)
  check2('mv', x, v)
  if x:dim() ~= 2 or v:dim() ~= 1 then
    error(('mv: expected a 2-D matrix and a 1-D vector, got shapes %s and %s'):format(
      shape_str(x), shape_str(v)), 2)
  end
  if x:size(2) ~= v:size(1) then
    error(('mv: shapes %s and %s do not match (%d vs %d)'):format(
      shape_str(x), shape_str(v), x:size(2), v:size(1)), 2)
  end
  if of_matmul(x.p, v.p, out1) ~= 0 then raise(2) end
  return wrap(out1[0])
end)

--- Outer product of two 1-D tensors (n) x (m) -> (n, m); dtypes promote.
def('outer', function(a, b)
  check2('outer', a, b)
  if a:dim() ~= 1 or b:dim() ~= 1 then
    error(('outer: expected 1-D tensors, got shapes %s and %s'):format(shape_str(a), shape_str(b)), 2)
  end
  return a:unsqueeze(2) * b:unsqueeze(1)
end)
def('ger', T.flow.outer)

local types = require 'oneflow.types'
local flow, is_options, check_tensor, norm_dim = T.flow, A.is_options, A.check_tensor, A.norm_dim
local int64, bool, zeros = types.by_name.int64, types.by_name.bool, T.zeros_of

------------------------------------------------------------------ diagonals
local DIAG_OPTS = {offset = true, dim1 = true, dim2 = true}
--- flow.diag_embed(x, offset = 0, dim1 = -2, dim2 = -1): the last dim of x
-- becomes the diagonal (shifted by offset) of the dims dim1, dim2 of the
-- result, which has one more dim; the rest is zero.
local function diag_embed(x, offset, dim1, dim2)
  check_tensor('diag_embed', x)
  if is_options(offset) then
    A.check_options('diag_embed', offset, DIAG_OPTS)
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
    A.check_options('diagonal', offset, DIAG_OPTS)
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


------------------------------------------------------------------ products and distances
--- cross(op, a, b, dim): the one cross product behind flow.cross (dim nil:
-- the first dim of size 3, as torch.cross) and flow.linalg.cross (dim -1 by
-- default): 3-vectors along dim, which must have size 3 in both inputs; the
-- other dims broadcast. Differentiable.
local function cross(op, a, b, d)
  check_tensor(op, a, 'input')
  check_tensor(op, b, 'other')
  local n = math.max(a:dim(), b:dim())
  local broadcast_shape = require('oneflow.ops.shape').broadcast_shape
  if d == nil then
    local shape = broadcast_shape(op, {a:size():totable(), b:size():totable()})
    for i = 1, #shape do if shape[i] == 3 then d = i; break end end
    if d == nil then
      A.fail(('%s: no dim of size 3 in shapes %s and %s'):format(op, shape_str(a), shape_str(b)))
    end
  end
  local dd = norm_dim(op, d, math.max(n, 1))
  for _, x in ipairs({a, b}) do
    local i = dd - (n - x:dim())
    if i < 1 or x:size(i) ~= 3 then
      A.fail(('%s: dim %d must have size 3, got shapes %s and %s'):format(op, d, shape_str(a), shape_str(b)))
    end
  end
  local shape = broadcast_shape(op, {a:size():totable(), b:size():totable()})
  if #shape > 0 then a, b = a:expand(unpack(shape)), b:expand(unpack(shape)) end
  local a1, a2, a3 = a:select(dd, 1), a:select(dd, 2), a:select(dd, 3)
  local b1, b2, b3 = b:select(dd, 1), b:select(dd, 2), b:select(dd, 3)
  return flow.stack({a2 * b3 - a3 * b2, a3 * b1 - a1 * b3, a1 * b2 - a2 * b1}, dd)
end
M.cross = cross

--- flow.cross(a, b, dim?) / a:cross(b, dim?): dim defaults to the first dim
-- of size 3 (torch.cross); flow.linalg.cross defaults to -1.
def('cross', function(a, b, d) return cross('cross', a, b, d) end)

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


--- flow.cdist(x1, x2, {p = 2}): the p-norm distances between the rows of x1
-- [..., P, M] and x2 [..., R, M] -> [..., P, R] (batch dims broadcast).
-- Differentiable.
def('cdist', function(x1, x2, opts)
  check_tensor('cdist', x1)
  check_tensor('cdist', x2)
  local p = (type(opts) == 'number' and opts)
            or A.check_options('cdist', opts, {p = true}).p or 2
  if x1:dim() < 2 or x2:dim() < 2 or x1:size(-1) ~= x2:size(-1) then
    error(('cdist: x1 %s and x2 %s must be [..., P, M] and [..., R, M] with the same M'):format(
      shape_str(x1), shape_str(x2)), 2)
  end
  if p < 0 then error(('cdist: p must be >= 0, got %g'):format(p), 2) end
  local diff = x1:unsqueeze(-2) - x2:unsqueeze(-3)
  return flow.linalg.vector_norm(diff, p, -1)
end, 'func')

------------------------------------------------------------------ SBP (global tensors)
local R = require 'oneflow.distributed.rules'
T.sbp({'matmul', 'mm', 'bmm'}, R.matmul)

return M
