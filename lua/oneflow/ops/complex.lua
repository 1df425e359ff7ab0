-- oneflow.ops.complex: complex64 / complex128 tensors (flow.cfloat /
-- flow.cdouble). The C library knows the dtypes (storage, copies, casts,
-- add/sub, equality) and two views, view_as_real ([*] -> [*, 2] float
-- pairs) and view_as_complex; everything else here is composed of real ops
-- on the (re, im) pairs, so gradients come out as PyTorch's (the gradient
-- of a real loss w.r.t. a complex tensor is dL/dre + i dL/dim, the
-- conjugate Wirtinger convention) without complex backward rules.
--   flow.complex(re, im), flow.view_as_real(z), flow.view_as_complex(x)
--   z:real(), z:imag(), z:abs(), z:angle(), z:conj(), z + w, z * w, z / w,
--   z:sum(dim), z:mean(dim), flow.is_complex(z)
-- Ops without a complex form refuse complex input: "exp: complex64 is not
-- supported (shape [3])".
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local A = require 'oneflow._args'

local C, out1 = core.C, core.out1
local call1, def, is_tensor = T.call1, T.def, T.is_tensor
local flow, methods = T.flow, T.methods
local types = require 'oneflow.types'
local F64, F32 = types.by_name.float64, types.by_name.float32
local C64, C128 = types.by_name.complex64, types.by_name.complex128

local function is_complex(x)
  return is_tensor(x) and C.of_dtype_is_complex(x.dtype.id) ~= 0
end
T.is_complex = is_complex

--- flow.is_complex(x): whether x is complex64 or complex128.
def('is_complex', function(x) return is_complex(x) end)

--- flow.view_as_real(z): complex [*] -> float [*, 2] (re, im), a view.
def('view_as_real', function(x) return call1(C.of_view_as_real, x.p, out1) end)
--- flow.view_as_complex(x): float [*, 2] (last dim of stride 1) -> complex [*], a view.
def('view_as_complex', function(x) return call1(C.of_view_as_complex, x.p, out1) end)

local function parts(z)
  local r = call1(C.of_view_as_real, z.p, out1)
  return r:select(-1, 1), r:select(-1, 2)
end

local function make(re, im)
  return flow.view_as_complex(flow.stack({re, im}, -1))
end

--- flow.complex(real, imag): the complex tensor real + i imag (float32 ->
-- complex64, float64 -> complex128; shapes broadcast), as torch.complex.
def('complex', function(re, im)
  A.check_tensor('complex', re, 'real', 1)
  A.check_tensor('complex', im, 'imag', 2)
  local ok = {float32 = true, float64 = true}
  if not ok[re.dtype.name] or re.dtype ~= im.dtype then
    A.fail(('complex: expected real and imag of the same dtype, float32 or float64, got %s and %s')
      :format(re.dtype.name, im.dtype.name))
  end
  if re:dim() ~= im:dim() or tostring(re:size()) ~= tostring(im:size()) then
    local b = flow.broadcast_tensors(re, im)
    re, im = b[1], b[2]
  end
  return make(re, im)
end, 'func')

-- a tensor or number as (re, im) parts of dtype dt's real part
local function as_parts(v, like)
  if is_complex(v) then return parts(v) end
  local rd = like.dtype.name == 'complex128' and F64 or F32
  if type(v) == 'number' then
    local t = flow.tensor(v, {dtype = rd, device = like.device})
    return t, flow.zeros_like(t)
  end
  if not is_tensor(v) then
    A.fail(('expected a tensor or a number as operand, got %s'):format(A.describe(v)))
  end
  local r = v.dtype == F64 and v or v:to(rd)
  return r, flow.zeros_like(r)
end

local function common(a, b)
  local c = is_complex(a) and a or b
  local d = is_complex(b) and b or a
  if c.dtype.name == 'complex128' or (is_tensor(d) and d.dtype.name == 'complex128')
     or (is_tensor(d) and d.dtype == F64) then
    return C128
  end
  return C64
end

local function arith(op, a, b)
  local like = {dtype = common(a, b), device = (is_tensor(a) and a or b).device}
  local ar, ai = as_parts(a, like)
  local br, bi = as_parts(b, like)
  local rd = like.dtype.name == 'complex128' and F64 or F32
  ar, ai, br, bi = ar:to(rd), ai:to(rd), br:to(rd), bi:to(rd)
  if op == 'add' then return make(ar + br, ai + bi) end
  if op == 'sub' then return make(ar - br, ai - bi) end
  if op == 'mul' then return make(ar * br - ai * bi, ar * bi + ai * br) end
  local den = br * br + bi * bi
  return make((ar * br + ai * bi) / den, (ai * br - ar * bi) / den)
end
T.complex_arith = arith

-- operators: complex operands go through arith, the rest to the real op
local mt = T.metatable_ops
for mm, op in pairs({__add = 'add', __sub = 'sub', __mul = 'mul', __div = 'div'}) do
  local real_fn = mt[mm]
  mt[mm] = function(a, b)
    if is_complex(a) or is_complex(b) then return arith(op, a, b) end
    return real_fn(a, b)
  end
end
local unm = mt.__unm
mt.__unm = function(a)
  if is_complex(a) then
    local r, i = parts(a)
    return make(-r, -i)
  end
  return unm(a)
end

-- method and flow.<name>: the complex form when an operand is complex
local function override(name, fn, where)
  local m, f = methods[name], flow[name]
  if m and where ~= 'func' then
    methods[name] = function(x, ...)
      if is_complex(x) or is_complex((...)) then return fn(x, ...) end
      return m(x, ...)
    end
  end
  if f and where ~= 'method' then
    flow[name] = function(x, ...)
      if is_complex(x) or is_complex((...)) then return fn(x, ...) end
      return f(x, ...)
    end
  end
end
for _, op in ipairs({'add', 'sub', 'mul', 'div'}) do
  override(op, function(a, b, opts)
    if opts ~= nil then A.fail(op .. ': options are not supported with complex operands') end
    return arith(op, a, b)
  end)
end

local function need_complex(op, z)
  if not is_complex(z) then
    A.fail(('%s: expected a complex tensor, got %s (shape %s)'):format(op, z.dtype.name,
      A.shape_str(z)))
  end
end

--- z:real(): the real part (a view, as torch.real); a real tensor itself.
def('real', function(x)
  if not is_complex(x) then return x end
  local r = parts(x)
  return r
end)
--- z:imag(): the imaginary part (a view); real tensors have none (an error, as torch).
def('imag', function(x)
  need_complex('imag', x)
  local _, i = parts(x)
  return i
end)
--- z:conj(): the complex conjugate (a copy here; PyTorch's is a lazy view);
-- a real tensor itself.
def('conj', function(x)
  if not is_complex(x) then return x end
  local r, i = parts(x)
  return make(r, -i)
end)
--- flow.conj_physical(z): the complex conjugate as a new tensor (conj is one too).
def('conj_physical', function(x) return methods.conj(x) end)
--- flow.angle(z): atan2(imag, real); for real x, pi where x < 0, else 0.
def('angle', function(x)
  if not is_complex(x) then
    if not x.dtype.is_floating_point then x = x:to(T.get_default_dtype()) end
    return flow.atan2(flow.zeros_like(x), x)
  end
  local r, i = parts(x)
  return flow.atan2(i, r)
end)
override('abs', function(x)
  local r, i = parts(x)
  return (r * r + i * i):sqrt()
end)
for _, name in ipairs({'sum', 'mean'}) do
  override(name, function(x, ...)
    local r, i = parts(x)
    return make(r[name](r, ...), i[name](i, ...))
  end)
end
-- reshaping ops that work on any dtype in C need no override; ops whose
-- kernels have no complex form raise "<op>: complex64 is not supported"
-- from the C library (elementwise) or from here (the rest that would
-- read a complex tensor as real):
for _, name in ipairs({'exp', 'log', 'sqrt', 'sin', 'cos', 'tanh', 'sigmoid', 'relu', 'pow',
                        'max', 'min', 'argmax', 'argmin', 'sort', 'topk', 'cumsum', 'cumprod',
                        'prod', 'var', 'std', 'norm', 'matmul', 'mm', 'clamp', 'softmax',
                        'maximum', 'minimum', 'lt', 'le', 'gt', 'ge', 'amax', 'amin'}) do
  override(name, function(x, y)
    local z = is_complex(x) and x or y
    A.fail(('%s: %s is not supported (shape %s)'):format(name, z.dtype.name, A.shape_str(z)))
  end)
end

return {is_complex = is_complex, parts = parts, make = make}
