-- oneflow.onnx.ops: how each traced op becomes ONNX nodes.
--
-- One rule per op name: rules[name](g, out, ...) runs after the op itself
-- (so `out` holds its real results, with their shapes and dtypes), gets the
-- op's own arguments, adds nodes to graph g (oneflow.onnx.graph) and binds
-- every tensor result with g:bind. Names are those of the tensor methods
-- and flow functions ('add', 'matmul', 'relu_'), 'F.<name>' for
-- flow.nn.functional and 'index' for x[i]. Ops without a rule are traced
-- through (their inner ops are recorded); see oneflow.onnx.tracer.
--
-- Lua's 1-based conventions are translated here: dims become 0-based axes,
-- index inputs (gather, index_select, embedding ids, one_hot) get 1
-- subtracted, index outputs (argmax, max/min/sort/topk indices, nonzero)
-- get 1 added, so onnxruntime returns what the Lua model returns.
local T = require 'oneflow.tensor'
local graph = require 'oneflow.onnx.graph'
local A = require 'oneflow._args'
local U = require 'oneflow.nn._util'

local is_tensor, is_options = T.is_tensor, A.is_options
local A_f, A_i, A_s, A_ints = graph.f, graph.i, graph.s, graph.ints
local floor, ceil = math.floor, math.ceil
local INT64_MIN = -2 ^ 63

local M = {}
local R = {}
M.rules = R

------------------------------------------------------------------ helpers
local function fail(msg) error('onnx.export: ' .. msg, 0) end

local function shape(x) return x:size():totable() end
local function dtype(x) return x.dtype.name end
local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

--- Lua dim (1-based, negative from the end) -> 0-based axis for rank r.
local function axis(d, r)
  if type(d) ~= 'number' then fail('expected a dim number, got ' .. tostring(d)) end
  if d > 0 then return d - 1 end
  return r + d
end

local FLOATS = {float16 = true, bfloat16 = true, float32 = true, float64 = true}
local function is_float(dt) return FLOATS[dt] == true end

-- int16 between int8 and int32; uint16/32/64 promote only with themselves and
-- floats (our ops refuse other pairs), so any place below the floats serves
local ORDER = {bool = 0, uint8 = 1, int8 = 2, int16 = 2.5, int32 = 3, int64 = 4, float16 = 5,
               bfloat16 = 6, float32 = 7, float64 = 8, uint16 = 2.6, uint32 = 2.7, uint64 = 2.8}

--- dtype two operands are compared in (PyTorch's promotion, simplified).
local function promote(a, b)
  local ta, tb = is_tensor(a) and dtype(a), is_tensor(b) and dtype(b)
  if ta and tb then return ORDER[ta] >= ORDER[tb] and ta or tb end
  local t, v = ta or tb, ta and b or a
  if type(v) == 'boolean' then return t end
  if type(v) == 'number' and v ~= floor(v) and not is_float(t) then return 'float32' end
  if t == 'bool' then return 'int64' end
  return t
end

--- Value name of a tensor or number as dtype dt (cast or constant).
local function operand(g, v, dt)
  if is_tensor(v) then return g:cast(g:val(v), dtype(v), dt) end
  if type(v) == 'boolean' then v = v and 1 or 0 end
  if type(v) ~= 'number' then fail(('expected a tensor or a number, got %s'):format(type(v))) end
  return g:scalar(v, dt)
end

local function bind(g, x, name) g:bind(x, name) end
local function alias(g, out, x) g:bind(out[1], g:val(x)) end

local function reduce(g, op, name, axes, keepdims)
  local attrs = {keepdims = A_i(keepdims and 1 or 0)}
  if op == 'ReduceSum' or g.opset >= 18 then
    local inputs = {name}
    if axes and #axes > 0 then inputs[2] = g:ints(axes) end
    return g:node(op, inputs, attrs)
  end
  if axes and #axes > 0 then attrs.axes = A_ints(axes) end
  return g:node(op, {name}, attrs)
end
M.reduce = reduce

local function slice(g, name, starts, ends, axes, steps)
  local inputs = {name, g:ints(starts), g:ints(ends), g:ints(axes)}
  if steps then inputs[5] = g:ints(steps) end
  return g:node('Slice', inputs)
end

--- 0-based index values from 1-based ones (tensor, number or list).
local function index0(g, idx)
  if is_tensor(idx) then
    if g:is_dynamic(idx) then return g:node('Sub', {g:val(idx), g:scalar(1, dtype(idx))}) end
    return g:const(idx - 1, 'index')
  end
  local flow = package.loaded.oneflow
  return g:const(flow.tensor(idx, {dtype = flow.int64}) - 1, 'index')
end

M.index0 = index0

local function plus_one(g, name) return g:node('Add', {name, g:scalar(1, 'int64')}) end

-- trunc of a float value: sign(x) * floor(|x|)
local function trunc_of(g, v)
  return g:node('Mul', {g:node('Sign', {v}), g:node('Floor', {g:node('Abs', {v})})})
end

-- runs fn(g, name) with a batch dim added when x has nsp + 1 dims
local function batched(g, x, nsp, fn)
  local v = g:val(x)
  if x:dim() == nsp + 1 then
    local y = fn(g:node('Unsqueeze', {v, g:ints({0})}))
    return g:node('Squeeze', {y, g:ints({0})})
  end
  return fn(v)
end

-- the `[C, 1, ..., 1]` reshaped constant (or value) of a per-channel tensor
local function per_channel(g, t, rank)
  local s = {t:numel()}
  for i = 2, rank - 1 do s[i] = 1 end
  if g:is_dynamic(t) then return g:node('Reshape', {g:val(t), g:ints(s)}) end
  return g:const(t:reshape(s), 'channel')
end

local function ones_like_list(g, n, dt, v)
  local vals = {}
  for i = 1, n do vals[i] = v end
  return g:list(vals, dt)
end

------------------------------------------------------------------ elementwise
local function arith(op)
  return function(g, out, a, b)
    local dt = dtype(out[1])
    bind(g, out[1], g:node(op, {operand(g, a, dt), operand(g, b, dt)}))
  end
end

local function add_sub(op)
  return function(g, out, a, b, opts)
    local dt = dtype(out[1])
    local bn
    local alpha = type(opts) == 'table' and opts.alpha
    if alpha and alpha ~= 1 then
      if type(b) == 'number' then bn = g:scalar(b * alpha, dt)
      else bn = g:node('Mul', {operand(g, b, dt), g:scalar(alpha, dt)}) end
    else
      bn = operand(g, b, dt)
    end
    bind(g, out[1], g:node(op, {operand(g, a, dt), bn}))
  end
end
R.add = add_sub('Add')
R.sub = add_sub('Sub')
R.mul = arith('Mul')
R.pow = arith('Pow')
R.maximum = arith('Max')
R.minimum = arith('Min')

local function floor_divide(g, out, a, b)
  local dt = dtype(out[1])
  if is_float(dt) then
    return bind(g, out[1], g:node('Floor', {g:node('Div', {operand(g, a, dt), operand(g, b, dt)})}))
  end
  local q = g:node('Div', {operand(g, a, 'float64'), operand(g, b, 'float64')})
  bind(g, out[1], g:cast(g:node('Floor', {q}), 'float64', dt))
end
R.floor_divide = floor_divide

R.div = function(g, out, a, b, opts)
  local mode = type(opts) == 'table' and opts.rounding_mode or nil
  local dt = dtype(out[1])
  if mode == nil then
    return bind(g, out[1], g:node('Div', {operand(g, a, dt), operand(g, b, dt)}))
  end
  if mode == 'floor' then return floor_divide(g, out, a, b) end
  if is_float(dt) then
    return bind(g, out[1], trunc_of(g, g:node('Div', {operand(g, a, dt), operand(g, b, dt)})))
  end
  -- integers: Cast truncates toward zero
  local q = g:node('Div', {operand(g, a, 'float64'), operand(g, b, 'float64')})
  bind(g, out[1], g:cast(q, 'float64', dt))
end

R.remainder = function(g, out, a, b)
  local dt = dtype(out[1])
  local an, bn = operand(g, a, dt), operand(g, b, dt)
  if not is_float(dt) then return bind(g, out[1], g:node('Mod', {an, bn}, {fmod = A_i(0)})) end
  -- Python's remainder: a - floor(a / b) * b (sign of the divisor)
  local q = g:node('Floor', {g:node('Div', {an, bn})})
  bind(g, out[1], g:node('Sub', {an, g:node('Mul', {q, bn})}))
end
R.fmod = function(g, out, a, b)
  local dt = dtype(out[1])
  bind(g, out[1], g:node('Mod', {operand(g, a, dt), operand(g, b, dt)}, {fmod = A_i(1)}))
end

local function compare(op, negate)
  return function(g, out, a, b)
    local dt = promote(a, b)
    local r = g:node(op, {operand(g, a, dt), operand(g, b, dt)})
    if negate then r = g:node('Not', {r}) end
    bind(g, out[1], r)
  end
end
R.eq = compare('Equal')
R.ne = compare('Equal', true)
R.lt = compare('Less')
R.le = compare('LessOrEqual')
R.gt = compare('Greater')
R.ge = compare('GreaterOrEqual')

local function logical(op)
  return function(g, out, a, b)
    bind(g, out[1], g:node(op, {operand(g, a, 'bool'), operand(g, b, 'bool')}))
  end
end
R.logical_and = logical('And')
R.logical_or = logical('Or')
R.logical_xor = logical('Xor')
R.logical_not = function(g, out, x) bind(g, out[1], g:node('Not', {operand(g, x, 'bool')})) end

local function bitwise(op, bool_op)
  return function(g, out, a, b)
    local dt = dtype(out[1])
    if dt == 'bool' then return bind(g, out[1], g:node(bool_op, {operand(g, a, dt), operand(g, b, dt)})) end
    if g.opset < 18 then fail(op .. ' needs opset 18 or later') end
    bind(g, out[1], g:node(op, {operand(g, a, dt), operand(g, b, dt)}))
  end
end
R.bitwise_and = bitwise('BitwiseAnd', 'And')
R.bitwise_or = bitwise('BitwiseOr', 'Or')
R.bitwise_xor = bitwise('BitwiseXor', 'Xor')
R.bitwise_not = function(g, out, x)
  local dt = dtype(out[1])
  if dt == 'bool' then return bind(g, out[1], g:node('Not', {g:val(x)})) end
  if g.opset < 18 then fail('BitwiseNot needs opset 18 or later') end
  bind(g, out[1], g:node('BitwiseNot', {g:val(x)}))
end

------------------------------------------------------------------ unary
-- op on x cast to the result's dtype (ints become floats for exp, ...)
local function unary(op)
  return function(g, out, x)
    bind(g, out[1], g:node(op, {operand(g, x, dtype(out[1]))}))
  end
end
-- fn(g, v, dt) -> name, for composed ops
local function composed(fn)
  return function(g, out, x)
    local dt = dtype(out[1])
    bind(g, out[1], fn(g, operand(g, x, dt), dt))
  end
end

for name, op in pairs({neg = 'Neg', abs = 'Abs', exp = 'Exp', log = 'Log', sqrt = 'Sqrt', sin = 'Sin',
                       cos = 'Cos', tan = 'Tan', tanh = 'Tanh', sigmoid = 'Sigmoid', relu = 'Relu',
                       floor = 'Floor', ceil = 'Ceil', round = 'Round', sign = 'Sign',
                       reciprocal = 'Reciprocal', asin = 'Asin', acos = 'Acos', atan = 'Atan',
                       sinh = 'Sinh', cosh = 'Cosh', erf = 'Erf', softplus = 'Softplus',
                       hardswish = 'HardSwish'}) do
  R[name] = unary(op)
end
R.rsqrt = composed(function(g, v) return g:node('Reciprocal', {g:node('Sqrt', {v})}) end)
R.square = composed(function(g, v) return g:node('Mul', {v, v}) end)
R.log2 = composed(function(g, v, dt) return g:node('Div', {g:node('Log', {v}), g:scalar(math.log(2), dt)}) end)
R.log10 = composed(function(g, v, dt) return g:node('Div', {g:node('Log', {v}), g:scalar(math.log(10), dt)}) end)
R.log1p = composed(function(g, v, dt) return g:node('Log', {g:node('Add', {v, g:scalar(1, dt)})}) end)
R.expm1 = composed(function(g, v, dt) return g:node('Sub', {g:node('Exp', {v}), g:scalar(1, dt)}) end)
R.erfc = composed(function(g, v, dt) return g:node('Sub', {g:scalar(1, dt), g:node('Erf', {v})}) end)
R.trunc = composed(function(g, v, dt)
  if not is_float(dt) then return v end
  return trunc_of(g, v)
end)
R.silu = composed(function(g, v) return g:node('Mul', {v, g:node('Sigmoid', {v})}) end)
R.hardsigmoid = composed(function(g, v)
  return g:node('HardSigmoid', {v}, {alpha = A_f(1 / 6), beta = A_f(0.5)})
end)
R.mish = composed(function(g, v)
  if g.opset >= 18 then return g:node('Mish', {v}) end
  return g:node('Mul', {v, g:node('Tanh', {g:node('Softplus', {v})})})
end)
R.gelu = composed(function(g, v, dt)
  if g.opset >= 20 then return g:node('Gelu', {v}) end
  -- 0.5 x (1 + erf(x / sqrt 2))
  local e = g:node('Erf', {g:node('Div', {v, g:scalar(math.sqrt(2), dt)})})
  return g:node('Mul', {g:node('Mul', {v, g:scalar(0.5, dt)}), g:node('Add', {e, g:scalar(1, dt)})})
end)
R.gelu_tanh = composed(function(g, v, dt)
  if g.opset >= 20 then return g:node('Gelu', {v}, {approximate = A_s('tanh')}) end
  -- 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
  local x3 = g:node('Mul', {g:node('Mul', {v, v}), v})
  local inner = g:node('Add', {v, g:node('Mul', {x3, g:scalar(0.044715, dt)})})
  local t = g:node('Tanh', {g:node('Mul', {inner, g:scalar(math.sqrt(2 / math.pi), dt)})})
  return g:node('Mul', {g:node('Mul', {v, g:scalar(0.5, dt)}), g:node('Add', {t, g:scalar(1, dt)})})
end)

local function predicate(fn)
  return function(g, out, x) bind(g, out[1], fn(g, g:val(x), dtype(x))) end
end
-- integer tensors hold no NaN or inf: Equal(x, x) is all true
R.isnan = predicate(function(g, v, dt)
  if not is_float(dt) then return g:node('Not', {g:node('Equal', {v, v})}) end
  return g:node('IsNaN', {v})
end)
R.isinf = predicate(function(g, v, dt)
  if not is_float(dt) then return g:node('Not', {g:node('Equal', {v, v})}) end
  return g:node('IsInf', {v})
end)
R.isfinite = predicate(function(g, v, dt)
  if not is_float(dt) then return g:node('Equal', {v, v}) end
  return g:node('Not', {g:node('Or', {g:node('IsNaN', {v}), g:node('IsInf', {v})})})
end)

R.leaky_relu = function(g, out, x, slope)
  bind(g, out[1], g:node('LeakyRelu', {g:val(x)}, {alpha = A_f(slope or 0.01)}))
end

R.clamp = function(g, out, x, lo, hi)
  if type(lo) == 'table' and not is_tensor(lo) then lo, hi = lo.min, lo.max end
  if is_tensor(lo) or is_tensor(hi) then fail('clamp with tensor bounds is not supported') end
  local dt = dtype(out[1])
  local inputs = {operand(g, x, dt), lo ~= nil and g:scalar(lo, dt) or ''}
  if hi ~= nil then inputs[3] = g:scalar(hi, dt) end
  bind(g, out[1], g:node('Clip', inputs))
end
R.clip = R.clamp

------------------------------------------------------------------ selection
R.nonzero = function(g, out, x, opts)
  local nz = g:node('NonZero', {g:val(x)})                    -- [ndim, N], 0-based
  if type(opts) == 'table' and opts.as_tuple then
    if x:dim() == 0 then fail('nonzero(as_tuple) of a 0-d tensor is not supported') end
    for i, t in ipairs(out[1]) do
      local row = g:node('Gather', {nz, g:scalar(i - 1, 'int64')}, {axis = A_i(0)})
      bind(g, t, plus_one(g, row))
    end
    return
  end
  bind(g, out[1], plus_one(g, g:node('Transpose', {nz}, {perm = A_ints({1, 0})})))
end

R.where = function(g, out, cond, a, b)
  if a == nil then return R.nonzero(g, out, cond) end
  local dt = dtype(out[1])
  bind(g, out[1], g:node('Where', {operand(g, cond, 'bool'), operand(g, a, dt), operand(g, b, dt)}))
end

R.masked_fill = function(g, out, x, mask, v)
  local dt = dtype(out[1])
  bind(g, out[1], g:node('Where', {operand(g, mask, 'bool'), operand(g, v, dt), operand(g, x, dt)}))
end

------------------------------------------------------------------ shapes and views
--- Reshape of x to y's shape; dims equal to x's at the same position are
-- copied at run time (0) and the first other dim is inferred (-1), so a
-- dynamic batch dim passes through.
local function reshape_to(g, y, x)
  local xs, ys = shape(x), shape(y)
  if same_shape(xs, ys) then return bind(g, y, g:val(x)) end
  local t = {}
  for i = 1, #ys do t[i] = ys[i] end
  local zero = false
  for i = 1, #ys do if ys[i] == 0 then zero = true end end
  if not zero then
    for i = 1, math.min(#xs, #ys) do if ys[i] == xs[i] then t[i] = 0 end end
    for i = 1, #t do
      if t[i] ~= 0 then t[i] = -1; break end
    end
  end
  bind(g, y, g:node('Reshape', {g:val(x), g:ints(t)}))
end
M.reshape_to = reshape_to

local function reshape_rule(g, out, x) reshape_to(g, out[1], x) end
R.view, R.reshape, R.flatten = reshape_rule, reshape_rule, reshape_rule

R.squeeze = function(g, out, x, d)
  local xs = shape(x)
  local axes = {}
  if d == nil then
    for i, s in ipairs(xs) do if s == 1 then axes[#axes + 1] = i - 1 end end
  elseif #xs > 0 then
    local a = axis(d, #xs)
    if xs[a + 1] == 1 then axes = {a} end
  end
  if #axes == 0 then return alias(g, out, x) end
  bind(g, out[1], g:node('Squeeze', {g:val(x), g:ints(axes)}))
end

R.unsqueeze = function(g, out, x, d)
  local a = axis(d, x:dim() + 1)
  bind(g, out[1], g:node('Unsqueeze', {g:val(x), g:ints({a})}))
end

local function transpose_perm(g, out, x, perm)
  local id = true
  for i = 1, #perm do if perm[i] ~= i - 1 then id = false end end
  if id then return alias(g, out, x) end
  bind(g, out[1], g:node('Transpose', {g:val(x)}, {perm = A_ints(perm)}))
end

R.transpose = function(g, out, x, d0, d1)
  local r = x:dim()
  local perm = {}
  for i = 1, r do perm[i] = i - 1 end
  local a, b = axis(d0, r), axis(d1, r)
  perm[a + 1], perm[b + 1] = perm[b + 1], perm[a + 1]
  transpose_perm(g, out, x, perm)
end
R.t = function(g, out, x)
  if x:dim() < 2 then return alias(g, out, x) end
  transpose_perm(g, out, x, {1, 0})
end
R.permute = function(g, out, x, ...)
  local dims = A.sizes_and_options('permute', ...)
  local r, perm = x:dim(), {}
  for i = 1, #dims do perm[i] = axis(dims[i], r) end
  transpose_perm(g, out, x, perm)
end

R.expand = function(g, out, x)
  local xs, ys = shape(x), shape(out[1])
  if same_shape(xs, ys) then return alias(g, out, x) end
  local off, t = #ys - #xs, {}
  for i = 1, #ys do
    local xi = xs[i - off]
    t[i] = (xi ~= nil and xi == ys[i]) and 1 or ys[i]
  end
  bind(g, out[1], g:node('Expand', {g:val(x), g:shape_vector(t)}))
end

-- repeat / tile: Tile by the ratio of output to input sizes
local function tile_rule(g, out, x)
  local xs, ys = shape(x), shape(out[1])
  local v = g:val(x)
  local k = #ys - #xs
  if k > 0 then
    local axes = {}
    for i = 1, k do axes[i] = i - 1 end
    v = g:node('Unsqueeze', {v, g:ints(axes)})
    for _ = 1, k do table.insert(xs, 1, 1) end
  end
  local reps = {}
  for i = 1, #ys do reps[i] = xs[i] == 0 and 1 or floor(ys[i] / xs[i]) end
  bind(g, out[1], g:node('Tile', {v, g:ints(reps)}))
end
R['repeat'], R.tile = tile_rule, tile_rule

R.narrow = function(g, out, x, d, start, length)
  local xs = shape(x)
  local a = axis(d, #xs)
  local s0 = start > 0 and start - 1 or xs[a + 1] + start
  if s0 == 0 and length == xs[a + 1] then return alias(g, out, x) end
  bind(g, out[1], slice(g, g:val(x), {s0}, {s0 + length}, {a}))
end

R.select = function(g, out, x, d, i)
  local a = axis(d, x:dim())
  local idx = i > 0 and i - 1 or i
  bind(g, out[1], g:node('Gather', {g:val(x), g:scalar(idx, 'int64')}, {axis = A_i(a)}))
end
R.index = function(g, out, x, k) R.select(g, out, x, 1, k) end

-- x[{a, {b, c}, {}, {b, c, step}}] (Torch7 ranges, inclusive) and x[idx]
R.index_table = function(g, out, x, idx)
  if is_tensor(idx) then
    if dtype(idx) == 'bool' then fail('x[mask] with a boolean mask has a data-dependent shape; no ONNX mapping') end
    return R.index_select(g, out, x, 1, idx)
  end
  local v, xs, d = g:val(x), shape(x), 1
  for _, k in ipairs(idx) do
    if type(k) == 'number' then
      v = g:node('Gather', {v, g:scalar(k > 0 and k - 1 or k, 'int64')}, {axis = A_i(d - 1)})
      table.remove(xs, d)
    else
      local n = xs[d]
      local s, e = k[1] or 1, k[2] or k[1] or n
      if k[1] == nil then s, e = 1, n end
      if s < 0 then s = n + s + 1 end
      if e < 0 then e = n + e + 1 end
      local step = k[3] or 1
      if not (s == 1 and e == n and step == 1) then
        v = slice(g, v, {s - 1}, {e}, {d - 1}, step ~= 1 and {step} or nil)
      end
      d = d + 1
    end
  end
  bind(g, out[1], v)
end

local function split_rule(g, pieces, x, d)
  local a = axis(d or 1, x:dim())
  if #pieces == 1 then return bind(g, pieces[1], g:val(x)) end
  local sizes = {}
  for i, p in ipairs(pieces) do sizes[i] = p:size(a + 1) end
  local names = {g:node('Split', {g:val(x), g:ints(sizes)}, {axis = A_i(a)}, #pieces)}
  for i, p in ipairs(pieces) do bind(g, p, names[i]) end
end
R.chunk = function(g, out, x, _, d) split_rule(g, out[1], x, d) end
R.split = function(g, out, x, _, d) split_rule(g, out[1], x, d) end

local function cat_dim(d)
  if type(d) == 'table' then d = d.dim end
  return d or 1
end

R.cat = function(g, out, ts, d)
  local dt = dtype(out[1])
  local a = axis(cat_dim(d), out[1]:dim())
  local names = {}
  for i, t in ipairs(ts) do names[i] = operand(g, t, dt) end
  if #names == 1 then return bind(g, out[1], names[1]) end
  bind(g, out[1], g:node('Concat', names, {axis = A_i(a)}))
end
R.concat, R.concatenate = R.cat, R.cat

R.stack = function(g, out, ts, d)
  local dt = dtype(out[1])
  local a = axis(cat_dim(d), out[1]:dim())
  local names = {}
  for i, t in ipairs(ts) do names[i] = g:node('Unsqueeze', {operand(g, t, dt), g:ints({a})}) end
  if #names == 1 then return bind(g, out[1], names[1]) end
  bind(g, out[1], g:node('Concat', names, {axis = A_i(a)}))
end

-- copies and dtype conversions: a Cast when the dtype changes, else the same value
local function cast_rule(g, out, x)
  if not is_tensor(out[1]) then return end
  bind(g, out[1], g:cast(g:val(x), dtype(x), dtype(out[1])))
end
for _, name in ipairs({'contiguous', 'clone', 'detach', 'cpu', 'to', 'float', 'double', 'half',
                       'long', 'int', 'short', 'char', 'byte', 'bool', 'bfloat16', 'type',
                       'type_as'}) do
  R[name] = cast_rule
end

R.fill_ = function(g, out, x)
  -- x now holds a constant
  bind(g, out[1], g:const(x, 'filled'))
end
R.copy_ = function(g, out, x, src)
  if not is_tensor(src) then return R.fill_(g, out, x) end
  local v = g:cast(g:val(src), dtype(src), dtype(x))
  if not same_shape(shape(src), shape(x)) then v = g:node('Expand', {v, g:ints(shape(x))}) end
  bind(g, out[1], v)
end

-- zeros_like & co: ConstantOfShape of the input's run-time shape
local function like(fill)
  return function(g, out, x, v)
    if fill ~= nil then v = fill end
    if type(v) == 'boolean' then v = v and 1 or 0 end
    local dt = dtype(out[1])
    bind(g, out[1], g:node('ConstantOfShape', {g:shape_of(g:val(x))},
                           {value = graph.tensor(dt, {1}, {v})}))
  end
end
R.zeros_like, R.empty_like, R.ones_like, R.full_like = like(0), like(0), like(1), like(nil)

------------------------------------------------------------------ linear algebra
-- A 1-D operand against a matrix is made 2-D around the MatMul:
-- onnxruntime (1.32) fuses Transpose + MatMul wrongly when the other side
-- is 1-D.
local function matmul(g, out, a, b)
  local dt = dtype(out[1])
  local an, bn = operand(g, a, dt), operand(g, b, dt)
  local ra, rb = a:dim(), b:dim()
  if rb == 1 and ra >= 2 then
    local y = g:node('MatMul', {an, g:node('Unsqueeze', {bn, g:ints({1})})})
    return bind(g, out[1], g:node('Squeeze', {y, g:ints({-1})}))
  end
  if ra == 1 and rb >= 2 then
    local y = g:node('MatMul', {g:node('Unsqueeze', {an, g:ints({0})}), bn})
    return bind(g, out[1], g:node('Squeeze', {y, g:ints({-2})}))
  end
  bind(g, out[1], g:node('MatMul', {an, bn}))
end
R.matmul, R.mm, R.bmm, R.dot, R.mv = matmul, matmul, matmul, matmul, matmul

R.addmm = function(g, out, c, a, b, opts)
  local dt = dtype(out[1])
  local beta, alpha = 1, 1
  if type(opts) == 'table' then beta, alpha = opts.beta or 1, opts.alpha or 1 end
  local p = g:node('MatMul', {operand(g, a, dt), operand(g, b, dt)})
  if alpha ~= 1 then p = g:node('Mul', {p, g:scalar(alpha, dt)}) end
  if beta == 0 then return bind(g, out[1], p) end
  local cn = operand(g, c, dt)
  if beta ~= 1 then cn = g:node('Mul', {cn, g:scalar(beta, dt)}) end
  bind(g, out[1], g:node('Add', {cn, p}))
end

------------------------------------------------------------------ reductions
-- (dim?, keepdim?, opts?) as oneflow.ops.reduce reads them
local function reduce_args(d, a, b)
  local opts, keepdim
  if is_options(d) then opts, d = d, nil end
  if type(a) == 'boolean' then keepdim = a elseif type(a) == 'table' then opts = a end
  if type(b) == 'table' then opts = b end
  opts = opts or {}
  if d == nil then d = opts.dim end
  if opts.keepdim ~= nil then keepdim = opts.keepdim end
  return d, keepdim == true, opts
end

local function axes_of(d, r)
  if d == nil then return nil end
  if type(d) == 'number' then d = {d} end
  local t = {}
  for i, v in ipairs(d) do t[i] = axis(v, r) end
  return t
end

local function reducer(op)
  return function(g, out, x, d, a, b)
    local dims, keep = reduce_args(d, a, b)
    local v = operand(g, x, dtype(out[1]))
    bind(g, out[1], reduce(g, op, v, axes_of(dims, x:dim()), keep))
  end
end
R.sum = reducer('ReduceSum')
R.mean = reducer('ReduceMean')
R.prod = reducer('ReduceProd')
R.amax = reducer('ReduceMax')
R.amin = reducer('ReduceMin')
R.logsumexp = reducer('ReduceLogSumExp')

local function all_any(op)
  return function(g, out, x, d, a, b)
    local dims, keep = reduce_args(d, a, b)
    local v = g:cast(operand(g, x, 'bool'), 'bool', 'int32')
    local r = reduce(g, op, v, axes_of(dims, x:dim()), keep)
    bind(g, out[1], g:cast(r, 'int32', 'bool'))
  end
end
R.all = all_any('ReduceMin')
R.any = all_any('ReduceMax')

local norm_names = {fro = 2, inf = math.huge, ['-inf'] = -math.huge}
R.norm = function(g, out, x, p, d, a, b)
  if is_options(p) then
    local o = p
    p, d, a = o.p, o.dim, o
  end
  if type(p) == 'string' then p = norm_names[p] end
  if p == nil then p = 2 end
  local dims, keep = reduce_args(d, a, b)
  local dt = dtype(out[1])
  local v = operand(g, x, dt)
  local axes = axes_of(dims, x:dim())
  local r
  if p == 2 then r = reduce(g, 'ReduceL2', v, axes, keep)
  elseif p == 1 then r = reduce(g, 'ReduceL1', v, axes, keep)
  elseif p == math.huge then r = reduce(g, 'ReduceMax', g:node('Abs', {v}), axes, keep)
  elseif p == -math.huge then r = reduce(g, 'ReduceMin', g:node('Abs', {v}), axes, keep)
  elseif p == 0 then
    local nz = g:cast(g:node('Not', {g:node('Equal', {v, g:scalar(0, dt)})}), 'bool', dt)
    r = reduce(g, 'ReduceSum', nz, axes, keep)
  else
    local s = reduce(g, 'ReduceSum', g:node('Pow', {g:node('Abs', {v}), g:scalar(p, dt)}), axes, keep)
    r = g:node('Pow', {s, g:scalar(1 / p, dt)})
  end
  bind(g, out[1], r)
end

local function variance(is_std)
  return function(g, out, x, d, a, b)
    local unbiased, keepdim, opts
    if type(d) == 'boolean' then unbiased, d = d, nil end
    if is_options(d) then opts, d = d, nil end
    if type(a) == 'boolean' then
      unbiased = a
      if type(b) == 'boolean' then keepdim, b = b, nil end
    elseif type(a) == 'table' then
      opts = a
    end
    if type(b) == 'table' then opts = b end
    opts = opts or {}
    if d == nil then d = opts.dim end
    if opts.keepdim ~= nil then keepdim = opts.keepdim end
    if opts.unbiased ~= nil then unbiased = opts.unbiased end
    local correction = opts.correction
    if correction == nil then correction = unbiased == false and 0 or 1 end
    local dt = dtype(out[1])
    local v = operand(g, x, dt)
    local xs = shape(x)
    local axes = axes_of(d, #xs)
    local count = 1
    if axes then
      for _, ax in ipairs(axes) do count = count * xs[ax + 1] end
    else
      for _, s in ipairs(xs) do count = count * s end
    end
    local mean = reduce(g, 'ReduceMean', v, axes, true)
    local dev = g:node('Sub', {v, mean})
    local ss = reduce(g, 'ReduceSum', g:node('Mul', {dev, dev}), axes, keepdim == true)
    local r = g:node('Div', {ss, g:scalar(math.max(count - correction, 0), dt)})
    if is_std then r = g:node('Sqrt', {r}) end
    bind(g, out[1], r)
  end
end
R.var = variance(false)
R.std = variance(true)

local function extreme(reduce_op, arg_op, elementwise)
  return function(g, out, x, d, a, b)
    if is_tensor(d) then return R[elementwise](g, out, x, d) end
    local opts
    if is_options(d) then opts, d = d, nil end
    if type(a) == 'table' then opts = a end
    if type(b) == 'table' then opts = b end
    opts = opts or {}
    if d == nil then d = opts.dim end
    local v = g:val(x)
    if d == nil then return bind(g, out[1], reduce(g, reduce_op, v, nil, false)) end
    local keep = a == true or opts.keepdim == true
    local ax = axis(d, x:dim())
    bind(g, out[1], reduce(g, reduce_op, v, {ax}, keep))
    local idx = g:node(arg_op, {v}, {axis = A_i(ax), keepdims = A_i(keep and 1 or 0)})
    bind(g, out[2], plus_one(g, idx))
  end
end
R.max = extreme('ReduceMax', 'ArgMax', 'maximum')
R.min = extreme('ReduceMin', 'ArgMin', 'minimum')

local function arg_extreme(op)
  return function(g, out, x, d, a, b)
    local opts
    if is_options(d) then opts, d = d, nil end
    if type(a) == 'table' then opts = a end
    if type(b) == 'table' then opts = b end
    opts = opts or {}
    if d == nil then d = opts.dim end
    local keep = a == true or opts.keepdim == true
    local v = g:val(x)
    local r
    if d == nil then
      r = g:node(op, {g:node('Reshape', {v, g:ints({-1})})}, {axis = A_i(0), keepdims = A_i(0)})
      r = plus_one(g, r)
      if out[1]:dim() > 0 then r = g:node('Reshape', {r, g:ints(shape(out[1]))}) end
    else
      r = plus_one(g, g:node(op, {v}, {axis = A_i(axis(d, x:dim())), keepdims = A_i(keep and 1 or 0)}))
    end
    bind(g, out[1], r)
  end
end
R.argmax = arg_extreme('ArgMax')
R.argmin = arg_extreme('ArgMin')

local function softmax(op)
  return function(g, out, x, d)
    if is_options(d) then d = d.dim end
    local v = operand(g, x, dtype(out[1]))
    bind(g, out[1], g:node(op, {v}, {axis = A_i(axis(d, x:dim()))}))
  end
end
R.softmax = softmax('Softmax')
R.log_softmax = softmax('LogSoftmax')

R.cumsum = function(g, out, x, d)
  if is_options(d) then d = d.dim end
  local v = operand(g, x, dtype(out[1]))
  bind(g, out[1], g:node('CumSum', {v, g:scalar(axis(d, x:dim()), 'int64')}))
end

------------------------------------------------------------------ index ops
R.gather = function(g, out, x, d, idx)
  bind(g, out[1], g:node('GatherElements', {g:val(x), index0(g, idx)}, {axis = A_i(axis(d, x:dim()))}))
end

R.index_select = function(g, out, x, d, idx)
  bind(g, out[1], g:node('Gather', {g:val(x), index0(g, idx)}, {axis = A_i(axis(d, x:dim()))}))
end

local function scatter(reduction)
  return function(g, out, x, d, idx, src, opts)
    local red = reduction
    if red == nil then
      local r = type(opts) == 'table' and opts.reduce or opts
      if r == 'add' or r == 'sum' then red = 'add' end
    end
    local dt = dtype(x)
    local i0 = index0(g, idx)
    local upd
    if is_tensor(src) then upd = operand(g, src, dt)
    else upd = g:node('Expand', {operand(g, src, dt), g:shape_of(i0)}) end
    local attrs = {axis = A_i(axis(d, x:dim()))}
    if red then attrs.reduction = A_s(red) end
    bind(g, out[1], g:node('ScatterElements', {g:val(x), i0, upd}, attrs))
  end
end
R.scatter = scatter(nil)
R.scatter_add = scatter('add')

local function topk(g, out, x, k, a, largest, sorted)
  local vals, idx = g:node('TopK', {g:val(x), g:ints({k})},
    {axis = A_i(a), largest = A_i(largest and 1 or 0), sorted = A_i(sorted and 1 or 0)}, 2)
  bind(g, out[1], vals)
  bind(g, out[2], plus_one(g, idx))
end

R.sort = function(g, out, x, d, opts)
  if type(opts) == 'boolean' then opts = {descending = opts} end
  if type(d) == 'table' then d, opts = nil, d end
  opts = opts or {}
  local a = axis(d or -1, x:dim())
  topk(g, out, x, x:size(a + 1), a, opts.descending == true, true)
end

R.topk = function(g, out, x, k, d, opts)
  if type(d) == 'table' then d, opts = nil, d end
  opts = opts or {}
  topk(g, out, x, k, axis(d or -1, x:dim()), opts.largest ~= false, opts.sorted ~= false)
end

local function trilu(upper)
  return function(g, out, x, k)
    if type(k) == 'table' then k = k.diagonal end
    bind(g, out[1], g:node('Trilu', {g:val(x), g:scalar(k or 0, 'int64')}, {upper = A_i(upper)}))
  end
end
R.tril, R.triu = trilu(0), trilu(1)

R.flip = function(g, out, x, ...)
  local dims = ...
  if type(dims) ~= 'table' then dims = {...} end
  local axes, starts, ends, steps = {}, {}, {}, {}
  for i, d in ipairs(dims) do
    axes[i], starts[i], ends[i], steps[i] = axis(d, x:dim()), -1, INT64_MIN, -1
  end
  bind(g, out[1], slice(g, g:val(x), starts, ends, axes, steps))
end

R.roll = function(g, out, x, shifts, dims)
  if type(shifts) == 'number' then shifts = {shifts} end
  local v, xs = g:val(x), shape(x)
  local flat = dims == nil
  if flat then
    v = g:node('Reshape', {v, g:ints({-1})})
    xs = {x:numel()}
    dims = {1}
  elseif type(dims) == 'number' then
    dims = {dims}
  end
  for i, d in ipairs(dims) do
    local a = axis(d, #xs)
    local n = xs[a + 1]
    local s = n > 0 and shifts[i] % n or 0
    if s ~= 0 then
      local tail = slice(g, v, {n - s}, {n}, {a})
      local head = slice(g, v, {0}, {n - s}, {a})
      v = g:node('Concat', {tail, head}, {axis = A_i(a)})
    end
  end
  if flat then v = g:node('Reshape', {v, g:ints(shape(x))}) end
  bind(g, out[1], v)
end

R.one_hot = function(g, out, idx)
  local depth = out[1]:size(-1)
  bind(g, out[1], g:node('OneHot', {index0(g, idx), g:ints({depth}), g:list({0, 1}, 'int64')},
                         {axis = A_i(-1)}))
end

------------------------------------------------------------------ in-place variants
-- x:op_(...) is x = op(x, ...); comparisons keep x's dtype
local KEEP_DTYPE = {eq = true, ne = true, lt = true, le = true, gt = true, ge = true,
                    logical_and = true, logical_or = true, logical_xor = true,
                    logical_not = true, isnan = true, isinf = true, isfinite = true}
local function inplace(base)
  local rule = R[base]
  return function(g, out, x, ...)
    if KEEP_DTYPE[base] then
      rule(g, out, x, ...)
      local name = g.dyn[graph.key(x)]
      return bind(g, x, g:cast(name, 'bool', dtype(x)))
    end
    rule(g, out, x, ...)
  end
end
for _, base in ipairs({'add', 'sub', 'mul', 'div', 'pow', 'maximum', 'minimum', 'floor_divide',
                       'remainder', 'fmod', 'eq', 'ne', 'lt', 'le', 'gt', 'ge', 'logical_and',
                       'logical_or', 'logical_xor', 'logical_not', 'bitwise_and', 'bitwise_or',
                       'bitwise_xor', 'bitwise_not', 'neg', 'abs', 'exp', 'log', 'sqrt', 'rsqrt',
                       'sin', 'cos', 'tan', 'tanh', 'sigmoid', 'relu', 'gelu', 'gelu_tanh', 'silu',
                       'floor', 'ceil', 'round', 'trunc', 'sign', 'reciprocal', 'square', 'log2',
                       'log10', 'log1p', 'expm1', 'asin', 'acos', 'atan', 'sinh', 'cosh', 'erf',
                       'erfc', 'softplus', 'mish', 'hardswish', 'hardsigmoid', 'isnan', 'isinf',
                       'isfinite', 'clamp', 'masked_fill', 'scatter', 'scatter_add', 'tril',
                       'triu'}) do
  R[base .. '_'] = inplace(base)
end

------------------------------------------------------------------ aliases
for alias_name, name in pairs({multiply = 'mul', subtract = 'sub', divide = 'div', true_divide = 'div',
                               greater = 'gt', less = 'lt', greater_equal = 'ge', less_equal = 'le',
                               not_equal = 'ne', negative = 'neg', absolute = 'abs', fix = 'trunc'}) do
  R[alias_name] = R[name]
end

------------------------------------------------------------------ nn.functional
-- positional arguments after the fixed ones and a trailing options table,
-- parsed with oneflow.ops.nn_conv's specs
local conv_specs = require('oneflow.ops.nn_conv').specs

local function per_dim(v, nsp, default)
  if v == nil then v = default end
  local t = {}
  for i = 1, nsp do t[i] = type(v) == 'number' and v or v[i] end
  return t
end

local function concat_lists(a, b)
  local t = {}
  for i = 1, #a do t[#t + 1] = a[i] end
  for i = 1, #b do t[#t + 1] = b[i] end
  return t
end

local function all_equal(t, v)
  for _, x in ipairs(t) do if x ~= v then return false end end
  return true
end

local function conv(nsp)
  return function(g, out, x, w, ...)
    local a = A.parse('conv' .. nsp .. 'd', conv_specs.conv, ...)
    local stride, dil = per_dim(a.stride, nsp, 1), per_dim(a.dilation, nsp, 1)
    local ks = {}
    for i = 1, nsp do ks[i] = w:size(i + 2) end
    local pb, pe = {}, {}
    if a.padding == 'same' then
      for i = 1, nsp do
        local total = dil[i] * (ks[i] - 1)
        pb[i] = floor(total / 2)
        pe[i] = total - pb[i]
      end
    else
      local p = per_dim(a.padding == 'valid' and 0 or a.padding, nsp, 0)
      for i = 1, nsp do pb[i], pe[i] = p[i], p[i] end
    end
    local attrs = {kernel_shape = A_ints(ks), strides = A_ints(stride), pads = A_ints(concat_lists(pb, pe)),
                   dilations = A_ints(dil), group = A_i(a.groups or 1)}
    local inputs = {nil, g:val(w)}
    if a.bias ~= nil then inputs[3] = g:val(a.bias) end
    bind(g, out[1], batched(g, x, nsp, function(v)
      inputs[1] = v
      return g:node('Conv', inputs, attrs)
    end))
  end
end

local function conv_transpose(nsp)
  return function(g, out, x, w, ...)
    local a = A.parse('conv_transpose' .. nsp .. 'd', conv_specs.conv_transpose, ...)
    local ks = {}
    for i = 1, nsp do ks[i] = w:size(i + 2) end
    local p = per_dim(a.padding, nsp, 0)
    local attrs = {kernel_shape = A_ints(ks), strides = A_ints(per_dim(a.stride, nsp, 1)),
                   pads = A_ints(concat_lists(p, p)), dilations = A_ints(per_dim(a.dilation, nsp, 1)),
                   output_padding = A_ints(per_dim(a.output_padding, nsp, 0)), group = A_i(a.groups or 1)}
    local inputs = {nil, g:val(w)}
    if a.bias ~= nil then inputs[3] = g:val(a.bias) end
    bind(g, out[1], batched(g, x, nsp, function(v)
      inputs[1] = v
      return g:node('ConvTranspose', inputs, attrs)
    end))
  end
end

-- ceil_mode for ONNX: PyTorch drops a last window that starts in the right
-- padding, which ONNX's ceil formula may not; the real output size decides.
local function pool_ceil(op, x, y, nsp, k, s, p, d, ceil_mode)
  if not ceil_mode then return 0 end
  local xs, ys = shape(x), shape(y)
  local ceil_ok, floor_ok = true, true
  for i = 1, nsp do
    local inn, o = xs[#xs - nsp + i], ys[#ys - nsp + i]
    local num = inn + 2 * p[i] - d[i] * (k[i] - 1) - 1
    if ceil(num / s[i]) + 1 ~= o then ceil_ok = false end
    if floor(num / s[i]) + 1 ~= o then floor_ok = false end
  end
  if ceil_ok then return 1 end
  if floor_ok then return 0 end
  fail(op .. ': this ceil_mode configuration has no ONNX equivalent')
end

local function max_pool(nsp)
  local op = 'max_pool' .. nsp .. 'd'
  return function(g, out, x, kernel, ...)
    local a = A.parse(op, conv_specs.max_pool, ...)
    if a.return_indices then fail(op .. ' with return_indices cannot be exported') end
    local k = per_dim(kernel, nsp)
    local s = a.stride ~= nil and per_dim(a.stride, nsp) or k
    local p, d = per_dim(a.padding, nsp, 0), per_dim(a.dilation, nsp, 1)
    local attrs = {kernel_shape = A_ints(k), strides = A_ints(s), pads = A_ints(concat_lists(p, p)),
                   ceil_mode = A_i(pool_ceil(op, x, out[1], nsp, k, s, p, d, a.ceil_mode))}
    if not all_equal(d, 1) then attrs.dilations = A_ints(d) end
    bind(g, out[1], batched(g, x, nsp, function(v) return g:node('MaxPool', {v}, attrs) end))
  end
end

local function avg_pool(nsp)
  local op = 'avg_pool' .. nsp .. 'd'
  return function(g, out, x, kernel, ...)
    local a = A.parse(op, conv_specs.avg_pool, ...)
    local k = per_dim(kernel, nsp)
    local s = a.stride ~= nil and per_dim(a.stride, nsp) or k
    local p = per_dim(a.padding, nsp, 0)
    local ones = per_dim(1, nsp)
    local include = a.count_include_pad ~= false
    local div = a.divisor_override
    if div then include = true end
    local attrs = {kernel_shape = A_ints(k), strides = A_ints(s), pads = A_ints(concat_lists(p, p)),
                   ceil_mode = A_i(pool_ceil(op, x, out[1], nsp, k, s, p, ones, a.ceil_mode)),
                   count_include_pad = A_i(include and 1 or 0)}
    bind(g, out[1], batched(g, x, nsp, function(v)
      local y = g:node('AveragePool', {v}, attrs)
      if div then
        local kp = 1
        for i = 1, nsp do kp = kp * k[i] end
        y = g:node('Mul', {y, g:scalar(kp / div, dtype(x))})
      end
      return y
    end))
  end
end

-- adaptive pooling: global pool, a plain pool when sizes divide, else per-dim
-- bins (Slice + reduce + Concat; both means and maxima are separable)
local function adaptive(nsp, is_max)
  local global, pool, red = is_max and 'GlobalMaxPool' or 'GlobalAveragePool',
                            is_max and 'MaxPool' or 'AveragePool', is_max and 'ReduceMax' or 'ReduceMean'
  return function(g, out, x, _, ...)
    local a = A.parse('adaptive_max_pool', conv_specs.adaptive_max_pool, ...)
    if a.return_indices then fail('adaptive_max_pool with return_indices cannot be exported') end
    local xs, ys = shape(x), shape(out[1])
    local r = #xs
    local ins, outs = {}, {}
    for i = 1, nsp do ins[i], outs[i] = xs[r - nsp + i], ys[r - nsp + i] end
    bind(g, out[1], batched(g, x, nsp, function(v)
      if all_equal(outs, 1) then return g:node(global, {v}) end
      local divides = true
      for i = 1, nsp do if ins[i] % outs[i] ~= 0 then divides = false end end
      if divides then
        local k = {}
        for i = 1, nsp do k[i] = ins[i] / outs[i] end
        return g:node(pool, {v}, {kernel_shape = A_ints(k), strides = A_ints(k)})
      end
      for i = 1, nsp do
        local ax, n, o = 2 + i - 1, ins[i], outs[i]
        if n ~= o then
          local pieces = {}
          for j = 0, o - 1 do
            local s, e = floor(j * n / o), ceil((j + 1) * n / o)
            pieces[#pieces + 1] = reduce(g, red, slice(g, v, {s}, {e}, {ax}), {ax}, true)
          end
          v = #pieces == 1 and pieces[1] or g:node('Concat', pieces, {axis = A_i(ax)})
        end
      end
      return v
    end))
  end
end

for nsp = 1, 3 do
  R['F.conv' .. nsp .. 'd'] = conv(nsp)
  R['F.conv_transpose' .. nsp .. 'd'] = conv_transpose(nsp)
  R['F.max_pool' .. nsp .. 'd'] = max_pool(nsp)
  R['F.avg_pool' .. nsp .. 'd'] = avg_pool(nsp)
  R['F.adaptive_avg_pool' .. nsp .. 'd'] = adaptive(nsp, false)
  R['F.adaptive_max_pool' .. nsp .. 'd'] = adaptive(nsp, true)
end

-- normalisation over `axes` with batch statistics: (x - mean) / sqrt(var + eps)
local function normalize(g, v, axes, eps, dt)
  local mean = reduce(g, 'ReduceMean', v, axes, true)
  local dev = g:node('Sub', {v, mean})
  local var = reduce(g, 'ReduceMean', g:node('Mul', {dev, dev}), axes, true)
  local den = g:node('Sqrt', {g:node('Add', {var, g:scalar(eps, dt)})})
  return g:node('Div', {dev, den})
end

local function affine(g, y, weight, bias, rank)
  if weight ~= nil then y = g:node('Mul', {y, per_channel(g, weight, rank)}) end
  if bias ~= nil then y = g:node('Add', {y, per_channel(g, bias, rank)}) end
  return y
end

local function channel_const(g, t, n, dt, v)
  if t ~= nil then return g:val(t) end
  return ones_like_list(g, n, dt, v)
end

R['F.batch_norm'] = function(g, out, x, rm, rv, opts)
  opts = opts or {}
  local dt, c, r = dtype(x), x:size(2), x:dim()
  local eps = opts.eps or 1e-5
  if opts.training or rm == nil or rv == nil then
    local axes = {0}
    for i = 3, r do axes[#axes + 1] = i - 1 end
    local y = normalize(g, g:val(x), axes, eps, dt)
    return bind(g, out[1], affine(g, y, opts.weight, opts.bias, r))
  end
  bind(g, out[1], g:node('BatchNormalization', {g:val(x), channel_const(g, opts.weight, c, dt, 1),
    channel_const(g, opts.bias, c, dt, 0), g:val(rm), g:val(rv)}, {epsilon = A_f(eps)}))
end

R['F.instance_norm'] = function(g, out, x, opts)
  opts = opts or {}
  local dt, c, r = dtype(x), x:size(2), x:dim()
  local eps = opts.eps or 1e-5
  local w, b = channel_const(g, opts.weight, c, dt, 1), channel_const(g, opts.bias, c, dt, 0)
  if opts.use_input_stats == false then
    return bind(g, out[1], g:node('BatchNormalization', {g:val(x), w, b, g:val(opts.running_mean),
      g:val(opts.running_var)}, {epsilon = A_f(eps)}))
  end
  if r < 3 then fail('instance_norm needs a [N, C, ...] input') end
  bind(g, out[1], g:node('InstanceNormalization', {g:val(x), w, b}, {epsilon = A_f(eps)}))
end

R['F.layer_norm'] = function(g, out, x, ns, opts)
  opts = opts or {}
  if type(ns) == 'number' then ns = {ns} end
  if type(ns) == 'table' and ns.totable then ns = ns:totable() end
  local k, dt, r = #ns, dtype(x), x:dim()
  local eps = opts.eps or 1e-5
  local flow = package.loaded.oneflow
  if g.opset >= 17 then
    local scale = opts.weight and g:val(opts.weight) or g:val(flow.ones(ns, {dtype = x.dtype}))
    local inputs = {g:val(x), scale}
    if opts.bias then inputs[3] = g:val(opts.bias) end
    return bind(g, out[1], g:node('LayerNormalization', inputs, {axis = A_i(-k), epsilon = A_f(eps)}))
  end
  local axes = {}
  for i = r - k + 1, r do axes[#axes + 1] = i - 1 end
  local y = normalize(g, g:val(x), axes, eps, dt)
  if opts.weight then y = g:node('Mul', {y, g:val(opts.weight)}) end
  if opts.bias then y = g:node('Add', {y, g:val(opts.bias)}) end
  bind(g, out[1], y)
end

-- x / sqrt(ReduceMean(x^2) + eps) * weight (ONNX's RMSNormalization is opset 23)
R['F.rms_norm'] = function(g, out, x, ns, opts)
  if type(ns) == 'number' then ns = {ns} end
  if type(ns) == 'table' and ns.totable then ns = ns:totable() end
  local dt, r, v = dtype(x), x:dim(), g:val(x)
  local axes = {}
  for i = r - #ns + 1, r do axes[#axes + 1] = i - 1 end
  local ms = reduce(g, 'ReduceMean', g:node('Mul', {v, v}), axes, true)
  local y = g:node('Div', {v, g:node('Sqrt', {g:node('Add', {ms, g:scalar(opts.eps, dt)})})})
  if opts.weight then y = g:node('Mul', {y, g:val(opts.weight)}) end
  bind(g, out[1], y)
end

R['F.group_norm'] = function(g, out, x, groups, opts)
  opts = opts or {}
  local dt, c, r = dtype(x), x:size(2), x:dim()
  local eps = opts.eps or 1e-5
  local v = g:val(x)
  if g.opset >= 21 then
    return bind(g, out[1], g:node('GroupNormalization', {v, channel_const(g, opts.weight, c, dt, 1),
      channel_const(g, opts.bias, c, dt, 0)}, {epsilon = A_f(eps), num_groups = A_i(groups)}))
  end
  local xr = g:node('Reshape', {v, g:ints({0, groups, -1})})
  local y = normalize(g, xr, {2}, eps, dt)
  y = g:node('Reshape', {y, g:shape_of(v)})
  bind(g, out[1], affine(g, y, opts.weight, opts.bias, r))
end

R['F.interpolate'] = function(g, out, x, opts)
  opts = opts or {}
  local mode = opts.mode or 'nearest'
  local attrs
  if mode == 'nearest' then
    attrs = {mode = A_s('nearest'), coordinate_transformation_mode = A_s('asymmetric'),
             nearest_mode = A_s('floor')}
  else
    attrs = {mode = A_s('linear'), coordinate_transformation_mode =
             A_s(opts.align_corners and 'align_corners' or 'pytorch_half_pixel')}
  end
  local v, nsp = g:val(x), x:dim() - 2
  if opts.scale_factor ~= nil and not opts.recompute_scale_factor then
    local sf = per_dim(opts.scale_factor, nsp)
    local scales = {1, 1}
    for i = 1, nsp do scales[i + 2] = sf[i] end
    return bind(g, out[1], g:node('Resize', {v, '', g:list(scales, 'float32')}, attrs))
  end
  local ys = shape(out[1])
  local spatial = {}
  for i = 1, nsp do spatial[i] = ys[i + 2] end
  local nc = slice(g, g:shape_of(v), {0}, {2}, {0})
  local sizes = g:node('Concat', {nc, g:ints(spatial)}, {axis = A_i(0)})
  bind(g, out[1], g:node('Resize', {v, '', '', sizes}, attrs))
end
R['F.upsample'] = R['F.interpolate']


local pad_modes = {constant = 'constant', reflect = 'reflect', replicate = 'edge', circular = 'wrap'}
R['F.pad'] = function(g, out, x, pad, opts)
  if type(opts) == 'string' then opts = {mode = opts} end
  opts = opts or {}
  if type(pad) == 'table' and pad.totable then pad = pad:totable() end
  local mode = opts.mode or 'constant'
  if mode == 'circular' and g.opset < 19 then fail("pad mode 'circular' needs opset 19 or later") end
  local r = x:dim()
  local pads = {}
  for i = 1, 2 * r do pads[i] = 0 end
  for j = 1, #pad / 2 do
    local ax = r - j
    pads[ax + 1], pads[r + ax + 1] = pad[2 * j - 1], pad[2 * j]
  end
  local inputs = {g:val(x), g:ints(pads)}
  if mode == 'constant' then inputs[3] = g:scalar(opts.value or 0, dtype(x)) end
  bind(g, out[1], g:node('Pad', inputs, {mode = A_s(pad_modes[mode])}))
end

-- F.scaled_dot_product_attention (one fused op here) as ONNX's composition:
-- softmax(q k^T * scale + mask) v. Inference only: dropout must be off.
R['F.scaled_dot_product_attention'] = function(g, out, q, k, v, opts)
  opts = opts or {}
  local dt, r = dtype(q), q:dim()
  if (opts.dropout_p or 0) > 0 then
    fail('F.scaled_dot_product_attention: export with dropout_p = 0 (eval mode); got dropout_p = '
      .. tostring(opts.dropout_p))
  end
  if r > 2 and k:dim() > 2 and q:size(-3) ~= k:size(-3) then
    fail(('F.scaled_dot_product_attention: query heads %d and key heads %d differ '
      .. '(enable_gqa) and have no ONNX mapping'):format(q:size(-3), k:size(-3)))
  end
  local perm = {}
  for i = 0, k:dim() - 1 do perm[#perm + 1] = i end
  perm[#perm], perm[#perm - 1] = perm[#perm - 1], perm[#perm]
  local kt = g:node('Transpose', {g:val(k)}, {perm = A_ints(perm)})
  local s = g:node('MatMul', {g:val(q), kt})
  s = g:node('Mul', {s, g:scalar(opts.scale or 1 / math.sqrt(q:size(-1)), dt)})
  local mask = opts.attn_mask
  if opts.is_causal and g.opset >= 14 then
    -- from the scores' shape, so that a dynamic sequence axis stays dynamic:
    -- Trilu of ones [L, S] (top-left aligned, as PyTorch's is_causal)
    local ls = slice(g, g:shape_of(s), {r - 2}, {r}, {0})
    local tri = g:node('Trilu', {g:node('Expand', {g:scalar(1, 'int64'), ls})}, {upper = A_i(0)})
    s = g:node('Where', {g:cast(tri, 'int64', 'bool'), s, g:scalar(-math.huge, dt)})
  elseif opts.is_causal then   -- before Trilu: a constant mask of the traced sizes
    local flow = package.loaded.oneflow
    mask = flow.ones(q:size(-2), k:size(-2), {dtype = flow.bool}):tril()
  end
  if mask ~= nil then
    if dtype(mask) == 'bool' then
      s = g:node('Where', {g:val(mask), s, g:scalar(-math.huge, dt)})
    else
      s = g:node('Add', {s, g:cast(g:val(mask), dtype(mask), dt)})
    end
  end
  local p = g:node('Softmax', {s}, {axis = A_i(g.opset >= 13 and -1 or r - 1)})
  bind(g, out[1], g:node('MatMul', {p, g:val(v)}))
end

R['F.linear'] = function(g, out, x, w, b)
  if is_options(b) then b = b.bias end
  local dt = dtype(out[1])
  if x:dim() == 2 and w:dim() == 2 then
    local inputs = {g:val(x), g:val(w)}
    if b ~= nil then inputs[3] = g:val(b) end
    return bind(g, out[1], g:node('Gemm', inputs, {transB = A_i(1)}))
  end
  local wt
  if g:is_dynamic(w) then
    wt = g:node('Transpose', {g:val(w)}, {perm = A_ints({1, 0})})
  else
    local ck = 'T:' .. graph.key(w)
    wt = g.cache[ck]
    if not wt then
      local k = graph.key(w)
      wt = g:const(w:t():contiguous(), (g.param_names[k] or 'weight') .. '_T')
      g:anchor(w)
      g.cache[ck] = wt
    end
  end
  local y = g:node('MatMul', {operand(g, x, dt), wt})
  if b ~= nil then y = g:node('Add', {y, g:val(b)}) end
  bind(g, out[1], y)
end

local emb_spec = {{'padding_idx', nil}, {'max_norm', nil}, {'norm_type', 2},
                  {'scale_grad_by_freq', false}, {'sparse', false}}
R['F.embedding'] = function(g, out, ids, w, ...)
  local a = U.parse('embedding', emb_spec, ...)
  if a.max_norm then fail('embedding with max_norm changes the weights while running; cannot be exported') end
  bind(g, out[1], g:node('Gather', {g:val(w), index0(g, ids)}, {axis = A_i(0)}))
end

R['F.elu'] = function(g, out, x, ...)
  local a = U.parse('elu', {{'alpha', 1}, {'inplace', false}}, ...)
  bind(g, out[1], g:node('Elu', {g:val(x)}, {alpha = A_f(a.alpha)}))
end
R['F.celu'] = function(g, out, x, ...)
  local a = U.parse('celu', {{'alpha', 1}, {'inplace', false}}, ...)
  bind(g, out[1], g:node('Celu', {g:val(x)}, {alpha = A_f(a.alpha)}))
end
R['F.selu'] = function(g, out, x)
  bind(g, out[1], g:node('Selu', {g:val(x)}))
end
R['F.prelu'] = function(g, out, x, weight)
  local slope
  if weight:numel() == 1 then
    slope = g:is_dynamic(weight) and g:node('Reshape', {g:val(weight), g:ints({1})})
            or g:const(weight:reshape(1), 'slope')
  else
    slope = per_channel(g, weight, x:dim())
  end
  bind(g, out[1], g:node('PRelu', {g:val(x), slope}))
end

------------------------------------------------------------------ shapes made from sizes
-- An op on constants only is folded into an initializer, which bakes in
-- the example sizes. When dynamic axes are declared, these ops are recorded
-- instead if their result has a dim equal to the example size of a dynamic
-- axis that their input did not have (cls_token:expand(x:size(1), -1, -1),
-- flow.zeros(x:size(1), hidden)): the dim is then read from the input at
-- run time (see graph:shape_vector).
M.unfold = {}
local function has_dynamic_size(g, sizes, skip)
  for i, v in ipairs(sizes) do
    if not (skip and skip[i]) and v > 1 then
      for _, d in ipairs(g.dim_sources) do if d.size == v then return true end end
    end
  end
  return false
end

local function expand_unfold(g, out, x)
  local xs, ys = shape(x), shape(out[1])
  local off, skip = #ys - #xs, {}
  for i = 1, #ys do
    local xi = xs[i - off]
    skip[i] = xi ~= nil and xi == ys[i]
  end
  return has_dynamic_size(g, ys, skip)
end
M.unfold.expand = expand_unfold
M.unfold.expand_as = expand_unfold
M.unfold.broadcast_to = expand_unfold
R.expand_as, R.broadcast_to = R.expand, R.expand

local function creation_unfold(g, out) return is_tensor(out[1]) and has_dynamic_size(g, shape(out[1])) end
local function filled(value_of)
  return function(g, out, ...)
    local y = out[1]
    local v = value_of(...)
    bind(g, y, g:node('ConstantOfShape', {g:shape_vector(shape(y))},
                      {value = graph.tensor(dtype(y), {1}, {v})}))
  end
end
local zero = filled(function() return 0 end)
local one = filled(function() return 1 end)
for _, name in ipairs({'zeros', 'empty', 'new_zeros', 'ones', 'new_ones', 'full', 'new_full'}) do
  M.unfold[name] = creation_unfold
end
R.zeros, R.empty, R.new_zeros, R.ones, R.new_ones = zero, zero, zero, one, one
R.full = filled(function(_, v) return v end)
R.new_full = filled(function(_, _, v) return v end)

--- The op names with rules, sorted (for docs and tests).
function M.names()
  local t = {}
  for k in pairs(R) do t[#t + 1] = k end
  table.sort(t)
  return t
end

-- F.* take PyTorch's positional arguments or options; the rules above read
-- the implementation's canonical form (ops/nn_*.lua's `canonical`).
for _, mod in ipairs({'oneflow.ops.nn_norm', 'oneflow.ops.nn_pad', 'oneflow.ops.nn_resample'}) do
  for name, canon in pairs(require(mod).canonical) do
    local rule = R['F.' .. name]
    if rule then
      R['F.' .. name] = function(g, out, ...) return rule(g, out, canon(...)) end
    end
  end
end
R['F.upsample'] = R['F.interpolate']

return M
