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

local C, out1, raise, wrap = core.C, core.out1, core.raise, core.wrap
local def, is_tensor = T.def, T.is_tensor
local of_matmul, of_mm, of_bmm, of_addmm = C.of_matmul, C.of_mm, C.of_bmm, C.of_addmm

local function shape_str(x)
  return '[' .. table.concat(x:size():totable(), ',') .. ']'
end

-- Both arguments must be tensors; the error points at the user's call.
local function check2(op, a, b)
  if not (is_tensor(a) and is_tensor(b)) then
    error(('%s: expected two tensors, got %s and %s'):format(op, type(a), type(b)), 3)
  end
end

def('matmul', function(a, b)
  check2('matmul', a, b)
  if of_matmul(a.p, b.p, out1) ~= 0 then raise(2) end
  return wrap(out1[0])
end)

def('mm', function(a, b, opts)
  check2('mm', a, b)
  local into = opts and opts.out
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
  if opts then beta, alpha = opts.beta or 1, opts.alpha or 1 end
  if of_addmm(c.p, a.p, b.p, beta, alpha, out1) ~= 0 then raise(2) end
  return wrap(out1[0])
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

------------------------------------------------------------------ SBP (global tensors)
local R = require 'oneflow.distributed.rules'
T.sbp({'matmul', 'mm', 'bmm'}, R.matmul)

return {}
