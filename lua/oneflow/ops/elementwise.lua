-- oneflow.ops.elementwise: binary and unary maths, comparisons, clamp,
-- where, masked_fill, and the arithmetic operators of tensors.
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local A = require 'oneflow._args'

local C, out1, raise, wrap = core.C, core.out1, core.raise, core.wrap
local def, methods, is_tensor = T.def, T.methods, T.is_tensor
local of_binary, of_binary_scalar = C.of_binary, C.of_binary_scalar

local function bool_num(v)
  if type(v) == 'boolean' then return v and 1 or 0 end
  return v
end

local function bad_operands(op, a, b)
  A.fail(('%s: expected tensors or numbers, got %s and %s'):format(
    core.ffi.string(C.of_binary_name(op)), A.describe(a), A.describe(b)))
end

-- a op b where either may be a number; `into` for in-place/out variants.
local function binary(op, a, b, into)
  local st
  if type(b) == 'number' and is_tensor(a) then
    st = of_binary_scalar(op, a.p, b, 0, into, out1)
  elseif type(a) == 'number' and is_tensor(b) then
    st = of_binary_scalar(op, b.p, a, 1, into, out1)
  elseif is_tensor(a) and is_tensor(b) then
    st = of_binary(op, a.p, b.p, into, out1)
  else
    -- a boolean operand counts as 0/1; anything else (nil, a table, a
    -- string, two numbers) is an error rather than a NULL handed to C
    local a2, b2 = bool_num(a), bool_num(b)
    if (type(a2) == 'number' and is_tensor(b2)) or (type(b2) == 'number' and is_tensor(a2)) then
      return binary(op, a2, b2, into)
    end
    bad_operands(op, a, b)
  end
  -- the user's line, also from an operator (a + b) or a composed op
  if st ~= 0 then A.raise_c() end
  return wrap(out1[0])
end
T.binary = binary

local function binary_inplace(op, a, b)
  local st
  b = bool_num(b)
  if not is_tensor(a) or not (type(b) == 'number' or is_tensor(b)) then bad_operands(op, a, b) end
  if type(b) == 'number' then st = of_binary_scalar(op, a.p, b, 0, a.p, out1)
  else st = of_binary(op, a.p, b.p, a.p, out1) end
  if st ~= 0 then A.raise_c() end
  C.of_tensor_release(out1[0])
  return a
end

local binary_ops = {
  add = C.OF_ADD, sub = C.OF_SUB, mul = C.OF_MUL, div = C.OF_DIV, pow = C.OF_POW,
  maximum = C.OF_MAXIMUM, minimum = C.OF_MINIMUM, floor_divide = C.OF_FLOOR_DIVIDE,
  remainder = C.OF_REMAINDER, fmod = C.OF_FMOD, atan2 = C.OF_ATAN2,
  eq = C.OF_EQ, ne = C.OF_NE, lt = C.OF_LT, le = C.OF_LE, gt = C.OF_GT, ge = C.OF_GE,
  logical_and = C.OF_LOGICAL_AND, logical_or = C.OF_LOGICAL_OR,
  logical_xor = C.OF_LOGICAL_XOR, bitwise_and = C.OF_BITWISE_AND,
  bitwise_or = C.OF_BITWISE_OR, bitwise_xor = C.OF_BITWISE_XOR,
}
for name, op in pairs(binary_ops) do
  def(name, function(a, b) return binary(op, a, b, nil) end)
  methods[name .. '_'] = function(a, b) return binary_inplace(op, a, b) end
end
for alias, name in pairs({multiply = 'mul', subtract = 'sub', divide = 'div',
                          greater = 'gt', less = 'lt', greater_equal = 'ge',
                          less_equal = 'le', not_equal = 'ne', true_divide = 'div'}) do
  def(alias, T.flow[name])
end

-- alpha scales the second operand: x:add(y, {alpha = 2}) is x + 2 * y
local function scaled(b, opts, op)
  opts = A.check_options(op, opts, {alpha = true})
  if opts and opts.alpha and opts.alpha ~= 1 then
    if type(b) == 'number' then return b * opts.alpha end
    return binary(C.OF_MUL, b, opts.alpha)
  end
  return b
end
--- flow.add(a, b, {alpha = 1}) / x:add(y): a + alpha * b, broadcasting; b may be a number.
def('add', function(a, b, opts) return binary(C.OF_ADD, a, scaled(b, opts, 'add')) end)
--- flow.sub(a, b, {alpha = 1}) / x:sub(y): a - alpha * b, broadcasting; b may be a number.
def('sub', function(a, b, opts) return binary(C.OF_SUB, a, scaled(b, opts, 'sub')) end)
function methods.add_(a, b, opts) return binary_inplace(C.OF_ADD, a, scaled(b, opts, 'add_')) end
function methods.sub_(a, b, opts) return binary_inplace(C.OF_SUB, a, scaled(b, opts, 'sub_')) end

--- div with {rounding_mode = 'floor' | 'trunc'}
def('div', function(a, b, opts)
  local mode = A.check_options('div', opts, {rounding_mode = true}).rounding_mode
  if mode == nil then return binary(C.OF_DIV, a, b) end
  if mode == 'floor' then return binary(C.OF_FLOOR_DIVIDE, a, b) end
  if mode == 'trunc' then
    local q = binary(C.OF_DIV, a, b)
    local x = is_tensor(a) and a or b
    if not x:is_floating_point() and not (type(a) == 'number' and a % 1 ~= 0)
       and not (type(b) == 'number' and b % 1 ~= 0) then
      return q:trunc():to(x.dtype)
    end
    return q:trunc()
  end
  error("div: rounding_mode must be nil, 'floor' or 'trunc', got " .. tostring(mode), 2)
end)

------------------------------------------------------------------ unary
-- flow.X / x:X() / x:X_() for every member of oneflow.h's of_unary_op,
-- under the name the C library gives it (core/ops/unary.c, UNARY_OPS): a new
-- unary op needs no edit here.
for op = 0, C.OF_NUM_UNARY - 1 do
  local name = core.ffi.string(C.of_unary_name(op))
  def(name, function(x)
    if C.of_unary(op, x.p, nil, out1) ~= 0 then raise(2) end
    return wrap(out1[0])
  end)
  methods[name .. '_'] = function(x)
    return T.finish_inplace(x, C.of_unary(op, x.p, x.p, out1))
  end
end
def('negative', T.flow.neg)
def('absolute', T.flow.abs)
def('fix', T.flow.trunc)

--- x:clamp(min, max); either may be nil. Also clamp{min =, max =}.
local function clamp_bound(v, what)
  if v ~= nil and type(v) ~= 'number' then
    A.fail(('clamp: %s must be a number or nil, got %s%s'):format(what, A.describe(v),
      is_tensor(v) and ' (for tensor bounds use flow.maximum / flow.minimum)' or ''))
  end
end
local function clamp_args(lo, hi)
  if type(lo) == 'table' and not is_tensor(lo) then
    A.check_options('clamp', lo, {min = true, max = true})
    lo, hi = lo.min, lo.max
  end
  clamp_bound(lo, 'min')
  clamp_bound(hi, 'max')
  return lo or 0, hi or 0, lo ~= nil and 1 or 0, hi ~= nil and 1 or 0
end
--- flow.clamp(x, min, max) / x:clamp{min =, max =}: x limited to [min, max]; either bound may be nil.
def('clamp', function(x, lo, hi)
  local a, b, ha, hb = clamp_args(lo, hi)
  if C.of_clamp(x.p, a, b, ha, hb, nil, out1) ~= 0 then raise(2) end
  return wrap(out1[0])
end)
function methods.clamp_(x, lo, hi)
  local a, b, ha, hb = clamp_args(lo, hi)
  return T.finish_inplace(x, C.of_clamp(x.p, a, b, ha, hb, x.p, out1))
end
def('clip', T.flow.clamp)
--- x:clamp_min(v): max(x, v).
def('clamp_min', function(x, v) return x:clamp(v, nil) end)
--- x:clamp_max(v): min(x, v).
def('clamp_max', function(x, v) return x:clamp(nil, v) end)

--- flow.leaky_relu(x, slope = 0.01): x for x > 0, slope * x otherwise.
def('leaky_relu', function(x, slope)
  if slope ~= nil and type(slope) ~= 'number' then
    A.fail('leaky_relu: negative_slope must be a number, got ' .. A.describe(slope))
  end
  return T.call1(C.of_leaky_relu, x.p, slope or 0.01, nil, core.out1)
end)

--- x:pow(e): e a number or a tensor; flow.pow(2, x) works too.
def('pow', function(a, b) return binary(C.OF_POW, a, b) end)
function methods.pow_(a, b) return binary_inplace(C.OF_POW, a, b) end

------------------------------------------------------------------ selection
local function scalar_tensor(v, like)
  return T.flow.full({}, v, {dtype = like.dtype})
end

--- flow.where(cond, a, b); a or b may be numbers. where(cond) = nonzero.
def('where', function(cond, a, b)
  A.check_tensor('where', cond, 'condition', 1)
  if a == nil then return cond:nonzero() end
  if not is_tensor(a) and not is_tensor(b) then
    error('where: at least one of the value arguments must be a tensor', 2)
  end
  if not is_tensor(a) then a = scalar_tensor(bool_num(a), b) end
  if not is_tensor(b) then b = scalar_tensor(bool_num(b), a) end
  return T.call1(C.of_where, cond.p, a.p, b.p, out1)
end, 'func')
function methods.where(cond, a, b) return T.flow.where(cond, a, b) end

-- the fill value of masked_fill: a number (a boolean, a one-element tensor)
local function fill_value(op, mask, v)
  A.check_tensor(op, mask, 'mask', 2)
  v = bool_num(is_tensor(v) and v:item() or v)
  if type(v) ~= 'number' then
    A.fail(('%s: value must be a number or a one-element tensor, got %s'):format(op, A.describe(v)))
  end
  return v
end
--- flow.masked_fill(x, mask, v): x with v where mask is true.
def('masked_fill', function(x, mask, v)
  v = fill_value('masked_fill', mask, v)
  return T.call1(C.of_masked_fill, x.p, mask.p, v, nil, out1)
end)
function methods.masked_fill_(x, mask, v)
  v = fill_value('masked_fill_', mask, v)
  return T.finish_inplace(x, C.of_masked_fill(x.p, mask.p, v, x.p, out1))
end

------------------------------------------------------------------ operators
local mt = T.metatable_ops or {}
T.metatable_ops = mt
mt.__add = function(a, b) return binary(C.OF_ADD, a, b, nil) end
mt.__sub = function(a, b) return binary(C.OF_SUB, a, b, nil) end
mt.__mul = function(a, b) return binary(C.OF_MUL, a, b, nil) end
mt.__div = function(a, b) return binary(C.OF_DIV, a, b, nil) end
mt.__mod = function(a, b) return binary(C.OF_REMAINDER, a, b, nil) end
mt.__pow = function(a, b) return binary(C.OF_POW, a, b, nil) end
-- Lua turns the result of < and <= into a boolean, so they cannot compare
-- tensors elementwise: say which method does.
mt.__lt = function()
  A.fail("attempt to compare tensors with '<' or '>': Lua cannot return a tensor from them; " ..
         "use x:lt(y) or x:gt(y) (or flow.lt / flow.gt)")
end
mt.__le = function()
  A.fail("attempt to compare tensors with '<=' or '>=': Lua cannot return a tensor from them; " ..
         "use x:le(y) or x:ge(y) (or flow.le / flow.ge)")
end
mt.__unm = function(a)
  if C.of_unary(C.OF_NEG, a.p, nil, out1) ~= 0 then raise(2) end
  return wrap(out1[0])
end

local types = require 'oneflow.types'
local flow, is_options, check_tensor = T.flow, A.is_options, A.check_tensor
local bool, as_tensor, zeros = types.by_name.bool, T.as_tensor_like, T.zeros_of

------------------------------------------------------------------ comparison
local function isclose(a, b, opts, op)
  check_tensor(op or 'isclose', a)
  b = as_tensor(b, a)
  opts = A.check_options(op or 'isclose', opts, {rtol = true, atol = true, equal_nan = true})
  local rtol, atol = opts.rtol or 1e-5, opts.atol or 1e-8
  if rtol < 0 or atol < 0 then
    error(('isclose: rtol and atol must be >= 0, got %g and %g'):format(rtol, atol), 3)
  end
  local eq = a:eq(b)
  local fa = a:is_floating_point() and a or a:double()
  local fb = b:is_floating_point() and b or b:double()
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
  return isclose(a, b, opts, 'allclose'):all():item()
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
    if type(opts) == 'number' then value = opts
    elseif opts ~= nil then value = A.check_options(op, opts, {value = true}).value or 1 end
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
  if not a:is_floating_point() then a = a:float() end
  if not b:is_floating_point() then b = b:float() end
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
    if r:is_floating_point() then
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
  if not x:is_floating_point() then x = x:to(y:is_floating_point() and y.dtype or T.get_default_dtype()) end
  if not y:is_floating_point() then y = y:to(x.dtype) end
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
  if x:is_floating_point() then neg = neg:logical_or(x:eq(0):logical_and((1 / x:double()):lt(0))) end
  return neg
end)

--- x:isneginf() / x:isposinf(): true where x is -inf / +inf.
def('isneginf', function(x)
  check_tensor('isneginf', x)
  return x:isinf():logical_and(x:lt(0))
end)
--- x:isposinf(): true where x is +inf.
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
  if is_options(nan) then
    A.check_options('nan_to_num', nan, {nan = true, posinf = true, neginf = true})
    nan, posinf, neginf = nan.nan, nan.posinf, nan.neginf
  end
  if not x:is_floating_point() then return x:clone() end
  local big = FINITE_MAX[x.dtype.name] or FINITE_MAX.float32
  local r = flow.where(x:isnan(), as_tensor(nan or 0, x), x)
  r = flow.where(x:isinf():logical_and(x:gt(0)), as_tensor(posinf or big, x), r)
  r = flow.where(x:isinf():logical_and(x:lt(0)), as_tensor(neginf or -big, x), r)
  return r
end)

------------------------------------------------------------------ SBP (global tensors)
local R = require 'oneflow.distributed.rules'
T.sbp({'add', 'sub'}, R.elementwise('add'))
T.sbp('mul', R.elementwise('mul'))
T.sbp('div', R.elementwise('div'))
T.sbp('neg', R.elementwise('add'))
for name in pairs(binary_ops) do
  if not T.sbp_rules[name] then T.sbp(name, R.elementwise()) end
end
for op = 0, C.OF_NUM_UNARY - 1 do
  local name = core.ffi.string(C.of_unary_name(op))
  if not T.sbp_rules[name] then T.sbp(name, R.elementwise()) end
end
T.sbp({'clamp', 'leaky_relu', 'where', 'masked_fill'}, R.elementwise())


-- Doc comments of the functions made in loops above (help() and LDoc read them).

--- flow.subtract(a, b) / x:subtract(y): a - b elementwise (flow.sub without alpha).
-- @function flow.subtract

--- flow.divide(a, b) / x:divide(y): a / b elementwise (flow.div without rounding_mode).
-- @function flow.divide

--- flow.true_divide(a, b): a / b elementwise, as flow.divide.
-- @function flow.true_divide

--- flow.abs(x) / x:abs(): |x| elementwise.
-- @function flow.abs

--- flow.acos(x): arccosine elementwise.
-- @function flow.acos

--- flow.asin(x): arcsine elementwise.
-- @function flow.asin

--- flow.atan(x): arctangent elementwise.
-- @function flow.atan

--- flow.atan2(a, b): the angle of (b, a) in radians, elementwise.
-- @function flow.atan2

--- flow.bitwise_and(a, b): a & b for integer and bool tensors.
-- @function flow.bitwise_and

--- flow.bitwise_not(x): ~x for integer and bool tensors.
-- @function flow.bitwise_not

--- flow.bitwise_or(a, b): a | b for integer and bool tensors.
-- @function flow.bitwise_or

--- flow.bitwise_xor(a, b): a ~ b (xor) for integer and bool tensors.
-- @function flow.bitwise_xor

--- flow.ceil(x): the smallest integer >= x, elementwise.
-- @function flow.ceil

--- flow.cos(x): cosine elementwise.
-- @function flow.cos

--- flow.cosh(x): hyperbolic cosine elementwise.
-- @function flow.cosh

--- flow.eq(a, b) / x:eq(y): a == b elementwise (bool).
-- @function flow.eq

--- flow.erf(x): the error function elementwise.
-- @function flow.erf

--- flow.erfc(x): 1 - erf(x), elementwise.
-- @function flow.erfc

--- flow.exp(x): e^x elementwise.
-- @function flow.exp

--- flow.expm1(x): exp(x) - 1, accurate near 0.
-- @function flow.expm1

--- flow.floor(x): the largest integer <= x, elementwise.
-- @function flow.floor

--- flow.floor_divide(a, b): floor(a / b) elementwise.
-- @function flow.floor_divide

--- flow.fmod(a, b): the C-style remainder of a / b (sign of a).
-- @function flow.fmod

--- flow.ge(a, b): a >= b elementwise (bool); Lua's >= cannot return a tensor.
-- @function flow.ge

--- flow.gelu(x): x * Phi(x) with the exact erf.
-- @function flow.gelu

--- flow.gelu_tanh(x): GELU with the tanh approximation.
-- @function flow.gelu_tanh

--- flow.gt(a, b): a > b elementwise (bool); Lua's > cannot return a tensor.
-- @function flow.gt

--- flow.hardsigmoid(x): relu6(x + 3) / 6.
-- @function flow.hardsigmoid

--- flow.hardswish(x): x * relu6(x + 3) / 6.
-- @function flow.hardswish

--- flow.isfinite(x): true where x is neither inf nor NaN.
-- @function flow.isfinite

--- flow.isinf(x): true where x is +inf or -inf.
-- @function flow.isinf

--- flow.isnan(x): true where x is NaN.
-- @function flow.isnan

--- flow.le(a, b): a <= b elementwise (bool); Lua's <= cannot return a tensor.
-- @function flow.le

--- flow.log(x): the natural logarithm elementwise.
-- @function flow.log

--- flow.log10(x): the base-10 logarithm elementwise.
-- @function flow.log10

--- flow.log1p(x): log(1 + x), accurate near 0.
-- @function flow.log1p

--- flow.log2(x): the base-2 logarithm elementwise.
-- @function flow.log2

--- flow.logical_and(a, b): a and b elementwise (bool).
-- @function flow.logical_and

--- flow.logical_not(x): not x elementwise (bool).
-- @function flow.logical_not

--- flow.logical_or(a, b): a or b elementwise (bool).
-- @function flow.logical_or

--- flow.logical_xor(a, b): a xor b elementwise (bool).
-- @function flow.logical_xor

--- flow.lt(a, b): a < b elementwise (bool); Lua's < cannot return a tensor.
-- @function flow.lt

--- flow.maximum(a, b): the elementwise maximum (NaN propagates).
-- @function flow.maximum

--- flow.minimum(a, b): the elementwise minimum (NaN propagates).
-- @function flow.minimum

--- flow.mish(x): x * tanh(softplus(x)).
-- @function flow.mish

--- flow.mul(a, b) / x:mul(y): a * b elementwise, broadcasting; b may be a number.
-- @function flow.mul

--- flow.ne(a, b): a ~= b elementwise (bool).
-- @function flow.ne

--- flow.neg(x): -x elementwise.
-- @function flow.neg

--- flow.reciprocal(x): 1 / x elementwise.
-- @function flow.reciprocal

--- flow.relu(x): max(0, x).
-- @function flow.relu

--- flow.remainder(a, b): the Python-style remainder of a / b (sign of b).
-- @function flow.remainder

--- flow.round(x): x rounded to the nearest integer, halves to even.
-- @function flow.round

--- flow.rsqrt(x): 1 / sqrt(x) elementwise.
-- @function flow.rsqrt

--- flow.sigmoid(x): 1 / (1 + exp(-x)).
-- @function flow.sigmoid

--- flow.sign(x): -1, 0 or 1 by the sign of x.
-- @function flow.sign

--- flow.silu(x): x * sigmoid(x).
-- @function flow.silu

--- flow.sin(x): sine elementwise.
-- @function flow.sin

--- flow.sinh(x): hyperbolic sine elementwise.
-- @function flow.sinh

--- flow.softplus(x): log(1 + exp(x)).
-- @function flow.softplus

--- flow.sqrt(x): the square root elementwise.
-- @function flow.sqrt

--- flow.square(x): x * x elementwise.
-- @function flow.square

--- flow.tan(x): tangent elementwise.
-- @function flow.tan

--- flow.tanh(x): hyperbolic tangent elementwise.
-- @function flow.tanh

--- flow.trunc(x): x rounded toward zero.
-- @function flow.trunc

return {}
