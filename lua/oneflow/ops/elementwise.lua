-- oneflow.ops.elementwise: binary and unary maths, comparisons, clamp,
-- where, masked_fill, and the arithmetic operators of tensors.
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'

local C, out1, raise, wrap = core.C, core.out1, core.raise, core.wrap
local def, methods, is_tensor = T.def, T.methods, T.is_tensor
local of_binary, of_binary_scalar = C.of_binary, C.of_binary_scalar

local function bool_num(v)
  if type(v) == 'boolean' then return v and 1 or 0 end
  return v
end

-- a op b where either may be a number; `into` for in-place/out variants.
local function binary(op, a, b, into)
  local st
  if type(b) == 'number' then
    st = of_binary_scalar(op, a.p, b, 0, into, out1)
  elseif type(a) == 'number' then
    st = of_binary_scalar(op, b.p, a, 1, into, out1)
  elseif is_tensor(a) and is_tensor(b) then
    st = of_binary(op, a.p, b.p, into, out1)
  else
    a, b = bool_num(a), bool_num(b)
    if type(a) == 'number' or type(b) == 'number' then return binary(op, a, b, into) end
    error(('%s: expected tensors or numbers, got %s and %s'):format(
      core.ffi.string(C.of_binary_name(op)), type(a), type(b)), 3)
  end
  if st ~= 0 then raise(3) end
  return wrap(out1[0])
end
T.binary = binary

local function binary_inplace(op, a, b)
  local st
  if type(b) == 'number' then st = of_binary_scalar(op, a.p, b, 0, a.p, out1)
  else st = of_binary(op, a.p, b.p, a.p, out1) end
  if st ~= 0 then raise(3) end
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
local function scaled(b, opts)
  if opts and opts.alpha and opts.alpha ~= 1 then
    if type(b) == 'number' then return b * opts.alpha end
    return binary(C.OF_MUL, b, opts.alpha)
  end
  return b
end
def('add', function(a, b, opts) return binary(C.OF_ADD, a, scaled(b, opts)) end)
def('sub', function(a, b, opts) return binary(C.OF_SUB, a, scaled(b, opts)) end)
function methods.add_(a, b, opts) return binary_inplace(C.OF_ADD, a, scaled(b, opts)) end
function methods.sub_(a, b, opts) return binary_inplace(C.OF_SUB, a, scaled(b, opts)) end

--- div with {rounding_mode = 'floor' | 'trunc'}
def('div', function(a, b, opts)
  local mode = opts and opts.rounding_mode
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
local unary_names = {
  'neg', 'abs', 'exp', 'log', 'sqrt', 'rsqrt', 'sin', 'cos', 'tan', 'tanh', 'sigmoid',
  'relu', 'gelu', 'gelu_tanh', 'silu', 'floor', 'ceil', 'round', 'trunc', 'sign',
  'reciprocal', 'square', 'log2', 'log10', 'log1p', 'expm1', 'asin', 'acos', 'atan',
  'sinh', 'cosh', 'erf', 'erfc', 'softplus', 'mish', 'hardswish', 'hardsigmoid',
  'logical_not', 'bitwise_not', 'isnan', 'isinf', 'isfinite',
}
assert(#unary_names == C.OF_NUM_UNARY, 'unary op list out of step with oneflow.h')
for i, name in ipairs(unary_names) do
  local op = i - 1
  assert(core.ffi.string(C.of_unary_name(op)) == name)
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
local function clamp_args(lo, hi)
  if type(lo) == 'table' and not is_tensor(lo) then lo, hi = lo.min, lo.max end
  return lo or 0, hi or 0, lo ~= nil and 1 or 0, hi ~= nil and 1 or 0
end
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
def('clamp_min', function(x, v) return x:clamp(v, nil) end)
def('clamp_max', function(x, v) return x:clamp(nil, v) end)

def('leaky_relu', function(x, slope)
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
  if a == nil then return cond:nonzero() end
  if not is_tensor(a) and not is_tensor(b) then
    error('where: at least one of the value arguments must be a tensor', 2)
  end
  if not is_tensor(a) then a = scalar_tensor(bool_num(a), b) end
  if not is_tensor(b) then b = scalar_tensor(bool_num(b), a) end
  return T.call1(C.of_where, cond.p, a.p, b.p, out1)
end, 'func')
function methods.where(cond, a, b) return T.flow.where(cond, a, b) end

def('masked_fill', function(x, mask, v)
  return T.call1(C.of_masked_fill, x.p, mask.p, bool_num(is_tensor(v) and v:item() or v), nil, out1)
end)
function methods.masked_fill_(x, mask, v)
  return T.finish_inplace(x, C.of_masked_fill(x.p, mask.p, bool_num(is_tensor(v) and v:item() or v), x.p, out1))
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
mt.__unm = function(a)
  if C.of_unary(C.OF_NEG, a.p, nil, out1) ~= 0 then raise(2) end
  return wrap(out1[0])
end

------------------------------------------------------------------ SBP (global tensors)
local R = require 'oneflow.distributed.rules'
T.sbp({'add', 'sub'}, R.elementwise('add'))
T.sbp('mul', R.elementwise('mul'))
T.sbp('div', R.elementwise('div'))
T.sbp('neg', R.elementwise('add'))
for name in pairs(binary_ops) do
  if not T.sbp_rules[name] then T.sbp(name, R.elementwise()) end
end
for _, name in ipairs(unary_names) do
  if not T.sbp_rules[name] then T.sbp(name, R.elementwise()) end
end
T.sbp({'clamp', 'leaky_relu', 'where', 'masked_fill'}, R.elementwise())

return {}
