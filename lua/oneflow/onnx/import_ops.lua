-- oneflow.onnx.import_ops: the op table of the ONNX importer. OPS[op_type] =
-- function(ins, node, ctx) returning the list of outputs; ins holds the
-- node's input values by position (nil for an omitted optional input),
-- ctx.opset the model's ai.onnx opset. Each rule follows the ONNX
-- operator spec (onnx/docs/Operators.md) for opsets 7 to 21: attribute
-- defaults per opset, inputs that replaced attributes, 0-based axes and
-- indices translated to our 1-based ones (and back for index outputs).
local flow = require 'oneflow'
local I = require 'oneflow.onnx.import'

local F = flow.nn.functional
local floor, huge = math.floor, math.huge
local fail, unsupported = I.fail, I.unsupported

local M = {}
local OPS = {}
M.OPS = OPS

------------------------------------------------------------------ helpers
local ATTR_FIELD = {'f', 'i', 's', 't', 'g', 'floats', 'ints', 'strings', 'tensors', 'graphs'}

-- The value of attribute `name` of node n, or default.
local function attr(n, name, default)
  local a = n.attrs[name]
  if a == nil then return default end
  if a.ref_attr_name then unsupported('attribute %s refers to a function attribute', name) end
  local field = ATTR_FIELD[a.type or 0]
  if field == nil then
    -- files without AttributeProto.type (IR < 2): the field that is set
    for _, f in ipairs(ATTR_FIELD) do
      local v = a[f]
      if v ~= nil and not (type(v) == 'table' and #v == 0 and f ~= 'g') then field = f break end
    end
    if field == nil then return default end
  end
  if field == 't' then
    a.value = a.value or (I.tensor(a.t))
    return a.value
  elseif field == 'tensors' then
    if not a.value then
      a.value = {}
      for i, t in ipairs(a.tensors) do a.value[i] = (I.tensor(t)) end
    end
    return a.value
  end
  return a[field]
end
M.attr = attr

local function is_t(v) return flow.is_tensor(v) end

-- Lua numbers of a tensor (flattened).
local function vals(t)
  if t == nil then return nil end
  if not is_t(t) then return t end
  local k = I.kv[t]
  if k then return {unpack(k)} end
  if t:numel() == 0 then return {} end
  local v = t:reshape(-1)
  if v.dtype == flow.bool then v = v:to(flow.int64) end
  -- NaNs from the data made canonical before they become Lua numbers (see
  -- reader.read_f32: a NaN payload can otherwise turn into a bogus object)
  if v.dtype.is_floating_point then v = flow.where(v:isnan(), flow.full({}, 0 / 0, {dtype = v.dtype}), v) end
  return v:totable()
end
M.vals = vals

-- 0-based ONNX axis a of a rank-r tensor -> 1-based positive dim.
local function ax(a, r, what)
  local d = a < 0 and a + r or a
  if d < 0 or d >= math.max(r, 1) then
    fail('axis %d out of range for a %d-d tensor%s', a, r, what and (' (' .. what .. ')') or '')
  end
  return d + 1
end
M.ax = ax

local function axes_list(list, r)
  local out = {}
  for i, a in ipairs(list) do out[i] = ax(a, r) end
  return out
end

local function one(fn) return function(ins, n, ctx) return {fn(ins[1], n, ctx, ins)} end end

local function is_int(dt) return not dt.is_floating_point and dt ~= flow.bool end

local function full_like_scalar(x, v) return flow.full({}, v, {dtype = x.dtype}) end

-- a number in x's dtype, shaped [] (for where/maximum with numbers)
local function scalar(x, v) return full_like_scalar(x, v) end

------------------------------------------------------------------ elementwise
local function unary(method)
  return one(function(x) return x[method](x) end)
end

for onnx, m in pairs({Abs = 'abs', Acos = 'acos', Asin = 'asin', Atan = 'atan', Cos = 'cos', Sin = 'sin',
                      Tan = 'tan', Cosh = 'cosh', Sinh = 'sinh', Tanh = 'tanh', Exp = 'exp', Log = 'log',
                      Sqrt = 'sqrt', Ceil = 'ceil', Floor = 'floor', Sign = 'sign', Neg = 'neg',
                      Sigmoid = 'sigmoid', Erf = 'erf', IsNaN = 'isnan', Relu = 'relu'}) do
  OPS[onnx] = unary(m)
end
OPS.Round = one(function(x) return x:round() end)   -- half to even, as ONNX
OPS.Reciprocal = one(function(x) return x:reciprocal() end)
OPS.Acosh = one(function(x) return (x + (x * x - 1):sqrt()):log() end)
OPS.Asinh = one(function(x) return (x + (x * x + 1):sqrt()):log() end)
OPS.Atanh = one(function(x) return ((1 + x) / (1 - x)):log() * 0.5 end)
OPS.Not = one(function(x) return x:logical_not() end)
OPS.Identity = function(ins) return {ins[1]} end
OPS.IsInf = one(function(x, n)
  local pos, neg = attr(n, 'detect_positive', 1), attr(n, 'detect_negative', 1)
  local r = x:isinf()
  if pos == 0 then r = r:logical_and(x:lt(0)) end
  if neg == 0 then r = r:logical_and(x:gt(0)) end
  return r
end)

local function binary(fn) return function(ins) return {fn(ins[1], ins[2])} end end
local function same_dtype(a, b)
  if a.dtype ~= b.dtype then b = b:to(a.dtype) end
  return a, b
end

OPS.Add = binary(function(a, b) a, b = same_dtype(a, b) return a + b end)
OPS.Sub = binary(function(a, b) a, b = same_dtype(a, b) return a - b end)
OPS.Mul = binary(function(a, b) a, b = same_dtype(a, b) return a * b end)
OPS.Div = binary(function(a, b)
  a, b = same_dtype(a, b)
  if is_int(a.dtype) then return flow.div(a, b, {rounding_mode = 'trunc'}) end
  return a / b
end)
OPS.Pow = binary(function(a, b)
  if is_int(a.dtype) and not is_int(b.dtype) then
    return flow.pow(a:to(flow.float64), b:to(flow.float64)):to(a.dtype)
  end
  if a.dtype ~= b.dtype then b = b:to(a.dtype) end
  return flow.pow(a, b)
end)
OPS.Mod = function(ins, n)
  local a, b = same_dtype(ins[1], ins[2])
  if attr(n, 'fmod', 0) == 1 then return {flow.fmod(a, b)} end
  if not is_int(a.dtype) then unsupported('Mod with fmod = 0 on floating point inputs (ONNX asks for fmod = 1)') end
  return {flow.remainder(a, b)}
end
OPS.Equal = binary(function(a, b) a, b = same_dtype(a, b) return a:eq(b) end)
OPS.Greater = binary(function(a, b) a, b = same_dtype(a, b) return a:gt(b) end)
OPS.Less = binary(function(a, b) a, b = same_dtype(a, b) return a:lt(b) end)
OPS.GreaterOrEqual = binary(function(a, b) a, b = same_dtype(a, b) return a:ge(b) end)
OPS.LessOrEqual = binary(function(a, b) a, b = same_dtype(a, b) return a:le(b) end)
OPS.And = binary(function(a, b) return a:logical_and(b) end)
OPS.Or = binary(function(a, b) return a:logical_or(b) end)
OPS.Xor = binary(function(a, b) return a:logical_xor(b) end)
OPS.BitwiseAnd = binary(function(a, b) return flow.bitwise_and(a, b) end)
OPS.BitwiseOr = binary(function(a, b) return flow.bitwise_or(a, b) end)
OPS.BitwiseXor = binary(function(a, b) return flow.bitwise_xor(a, b) end)
OPS.BitwiseNot = one(function(x) return flow.bitwise_not(x) end)
OPS.BitShift = function(ins, n)
  local dir = attr(n, 'direction')
  local a, b = ins[1], ins[2]:to(ins[1].dtype)
  if a.dtype == flow.uint64 then   -- beyond int64: shift in uint64 itself
    local p = flow.pow(flow.full({}, 2, {dtype = a.dtype}), b)
    if dir == 'LEFT' then return {a * p} end
    return {flow.floor_divide(a, p)}
  end
  local p = flow.pow(flow.full({}, 2, {dtype = flow.int64}), b:to(flow.int64))
  if dir == 'LEFT' then return {(a:to(flow.int64) * p):to(a.dtype)} end
  return {flow.div(a:to(flow.int64), p, {rounding_mode = 'floor'}):to(a.dtype)}
end

local function variadic(fn)
  return function(ins)
    local acc = ins[1]
    for i = 2, ins.n do
      if ins[i] ~= nil then acc = fn(acc, ins[i]) end
    end
    return {acc}
  end
end
OPS.Max = variadic(function(a, b) a, b = same_dtype(a, b) return flow.maximum(a, b) end)
OPS.Min = variadic(function(a, b) a, b = same_dtype(a, b) return flow.minimum(a, b) end)
OPS.Sum = variadic(function(a, b) return a + b end)
OPS.Mean = function(ins)
  local s = OPS.Sum(ins)[1]
  local k = 0
  for i = 1, ins.n do if ins[i] ~= nil then k = k + 1 end end
  return {s / k}
end
OPS.Where = function(ins)
  local a, b = same_dtype(ins[2], ins[3])
  return {flow.where(ins[1]:to(flow.bool), a, b)}
end

------------------------------------------------------------------ activations
OPS.LeakyRelu = one(function(x, n) return F.leaky_relu(x, attr(n, 'alpha', 0.01)) end)
OPS.Elu = one(function(x, n)
  local a = attr(n, 'alpha', 1.0)
  return flow.where(x:gt(0), x, (x:exp() - 1) * a)
end)
OPS.Celu = one(function(x, n)
  local a = attr(n, 'alpha', 1.0)
  return flow.maximum(x, scalar(x, 0)) + flow.minimum(scalar(x, 0), ((x / a):exp() - 1) * a)
end)
OPS.Selu = one(function(x, n)
  local a, g = attr(n, 'alpha', 1.67326319217681884765625), attr(n, 'gamma', 1.05070102214813232421875)
  return flow.where(x:gt(0), x * g, (x:exp() - 1) * (a * g))
end)
OPS.ThresholdedRelu = one(function(x, n)
  return flow.where(x:gt(attr(n, 'alpha', 1.0)), x, scalar(x, 0))
end)
OPS.HardSigmoid = one(function(x, n)
  return (x * attr(n, 'alpha', 0.2) + attr(n, 'beta', 0.5)):clamp(0, 1)
end)
OPS.HardSwish = one(function(x) return x * (x / 6 + 0.5):clamp(0, 1) end)
OPS.Softplus = one(function(x)
  -- log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|))
  return flow.maximum(x, scalar(x, 0)) + ((-x:abs()):exp() + 1):log()
end)
OPS.Softsign = one(function(x) return x / (x:abs() + 1) end)
OPS.Mish = one(function(x) return x * OPS.Softplus({x})[1]:tanh() end)
OPS.Gelu = one(function(x, n)
  local approx = attr(n, 'approximate', 'none')
  if approx == 'tanh' then
    return x * 0.5 * ((x + x * x * x * 0.044715) * math.sqrt(2 / math.pi)):tanh():add(1)
  end
  return x * 0.5 * ((x * (1 / math.sqrt(2))):erf() + 1)
end)
OPS.PRelu = binary(function(x, slope)
  slope = slope:to(x.dtype)
  return flow.where(x:lt(0), x * slope, x)
end)
OPS.Shrink = one(function(x, n)
  local bias, lambd = attr(n, 'bias', 0), attr(n, 'lambd', 0.5)
  return flow.where(x:lt(-lambd), x + bias, flow.where(x:gt(lambd), x - bias, scalar(x, 0)))
end)
OPS.Clip = function(ins, n, ctx)
  local x, lo, hi = ins[1], ins[2], ins[3]
  if ctx.opset < 11 then
    lo, hi = attr(n, 'min', -huge), attr(n, 'max', huge)
    return {x:clamp(lo, hi)}
  end
  local r = x
  if lo ~= nil then r = flow.maximum(r, lo:to(x.dtype)) end
  if hi ~= nil then r = flow.minimum(r, hi:to(x.dtype)) end
  return {r}
end

-- softmax family: opset < 13 flattens to 2-D at axis (default 1)
local function softmax_like(fn)
  return function(ins, n, ctx)
    local x = ins[1]
    local r = x:dim()
    if ctx.opset < 13 then
      local a = ax(attr(n, 'axis', 1), r)
      local shape = x:size():totable()
      local outer = 1
      for i = 1, a - 1 do outer = outer * shape[i] end
      local y = fn(x:reshape(outer, -1), 2)
      return {y:reshape(shape)}
    end
    return {fn(x, ax(attr(n, 'axis', -1), r))}
  end
end
OPS.Softmax = softmax_like(function(x, d) return F.softmax(x, d) end)
OPS.LogSoftmax = softmax_like(function(x, d) return F.log_softmax(x, d) end)
OPS.Hardmax = softmax_like(function(x, d)
  local idx = x:argmax(d, {keepdim = true})
  return flow.zeros_like(x):scatter(d, idx, 1)
end)

------------------------------------------------------------------ casts, constants
local function onnx_dtype(code, what) return I.dtype(code, what) end

OPS.Cast = one(function(x, n)
  local to = onnx_dtype(attr(n, 'to'), 'Cast to')
  if x.dtype == flow.bool and to == flow.bool then return x end
  if to == flow.bool then return x:ne(0) end
  if x.dtype.is_floating_point and is_int(to) then
    -- C truncation of NaN/inf is undefined: ONNX leaves those undefined too
    return x:trunc():to(to)
  end
  return x:to(to)
end)
OPS.CastLike = function(ins, n)
  local c = {attrs = {to = {type = 2, i = I.onnx_type(ins[2].dtype)}}}
  local _ = n
  return OPS.Cast({ins[1]}, c)
end

OPS.Constant = function(_, n)
  local v = attr(n, 'value')
  if v then return {v} end
  if n.attrs.value_float then return {flow.tensor(attr(n, 'value_float'), {dtype = flow.float32})} end
  if n.attrs.value_floats then return {flow.tensor(attr(n, 'value_floats'), {dtype = flow.float32})} end
  if n.attrs.value_int then return {flow.tensor(attr(n, 'value_int'), {dtype = flow.int64})} end
  if n.attrs.value_ints then return {flow.tensor(attr(n, 'value_ints'), {dtype = flow.int64})} end
  if n.attrs.value_string or n.attrs.value_strings then unsupported('string constants') end
  if n.attrs.sparse_value then unsupported('sparse constants') end
  fail('Constant without a value')
end

OPS.ConstantOfShape = function(ins, n)
  local shape = vals(ins[1])
  local v = attr(n, 'value')
  local dt, fill = flow.float32, 0
  if v then dt, fill = v.dtype, vals(v)[1] end
  if dt == flow.bool then fill = fill and 1 or 0 end
  return {flow.full(shape, fill, {dtype = dt})}
end

OPS.Shape = function(ins, n, ctx)
  local shape = ins[1]:size():totable()
  local r = #shape
  local s, e = 0, r
  if ctx.opset >= 15 then
    s, e = attr(n, 'start', 0), attr(n, 'end', r)
    if s < 0 then s = s + r end
    if e < 0 then e = e + r end
    s, e = math.max(0, math.min(s, r)), math.max(0, math.min(e, r))
  end
  local out = {}
  for i = s + 1, e do out[#out + 1] = shape[i] end
  if #out == 0 then return {flow.zeros(0, {dtype = flow.int64})} end
  local t = flow.tensor(out, {dtype = flow.int64})
  I.kv[t] = out
  return {t}
end
OPS.Size = one(function(x) return flow.tensor(x:numel(), {dtype = flow.int64}) end)

OPS.Range = function(ins)
  local s, l, d = vals(ins[1])[1], vals(ins[2])[1], vals(ins[3])[1]
  local count = math.max(math.ceil((l - s) / d), 0)
  if count == 0 then return {flow.zeros(0, {dtype = ins[1].dtype})} end
  return {(flow.arange(0, count, {dtype = flow.float64}) * d + s):to(ins[1].dtype)}
end

OPS.EyeLike = one(function(x, n)
  local dt = n.attrs.dtype and onnx_dtype(attr(n, 'dtype')) or x.dtype
  local k = attr(n, 'k', 0)
  local r, c = x:size(1), x:size(2)
  local i = flow.arange(0, r, {dtype = flow.int64}):reshape(r, 1)
  local j = flow.arange(0, c, {dtype = flow.int64}):reshape(1, c)
  return (j - i):eq(k):to(dt)
end)

------------------------------------------------------------------ shapes
OPS.Reshape = function(ins, n, ctx)
  local x = ins[1]
  local shape
  if ctx.opset < 5 then shape = attr(n, 'shape') else shape = vals(ins[2]) end
  local allowzero = attr(n, 'allowzero', 0)
  local src = x:size():totable()
  local out = {}
  for i, d in ipairs(shape) do
    if d == 0 and allowzero == 0 then out[i] = src[i] else out[i] = d end
  end
  return {x:reshape(out)}
end
OPS.Flatten = one(function(x, n)
  local r = x:dim()
  local a = attr(n, 'axis', 1)
  if a < 0 then a = a + r end
  local shape = x:size():totable()
  local outer = 1
  for i = 1, a do outer = outer * shape[i] end
  local inner = 1
  for i = a + 1, r do inner = inner * shape[i] end
  return x:reshape(outer, inner)
end)
OPS.Squeeze = function(ins, n, ctx)
  local x = ins[1]
  local axes = ctx.opset >= 13 and vals(ins[2]) or attr(n, 'axes')
  local shape = x:size():totable()
  local drop = {}
  if axes == nil then
    for i, d in ipairs(shape) do if d == 1 then drop[i] = true end end
  else
    for _, a in ipairs(axes) do
      local d = ax(a, #shape)
      if shape[d] ~= 1 then fail('Squeeze: dim %d has size %d, not 1', a, shape[d]) end
      drop[d] = true
    end
  end
  local out = {}
  for i, d in ipairs(shape) do if not drop[i] then out[#out + 1] = d end end
  return {x:reshape(out)}
end
OPS.Unsqueeze = function(ins, n, ctx)
  local x = ins[1]
  local axes = ctx.opset >= 13 and vals(ins[2]) or attr(n, 'axes')
  local shape = x:size():totable()
  local r = #shape + #axes
  local ins_at = {}
  for _, a in ipairs(axes) do ins_at[ax(a, r)] = true end
  local out, k = {}, 1
  for i = 1, r do
    if ins_at[i] then out[i] = 1 else out[i] = shape[k]; k = k + 1 end
  end
  return {x:reshape(out)}
end
OPS.Transpose = one(function(x, n)
  local r = x:dim()
  local perm = attr(n, 'perm')
  local p = {}
  if perm == nil then
    for i = 1, r do p[i] = r - i + 1 end
  else
    for i, v in ipairs(perm) do p[i] = ax(v, r) end
  end
  if r == 0 then return x end
  return x:permute(p):contiguous()
end)
OPS.Concat = function(ins, n)
  local list = {}
  for i = 1, ins.n do if ins[i] ~= nil then list[#list + 1] = ins[i] end end
  local r = list[1]:dim()
  return {flow.cat(list, ax(attr(n, 'axis', 0), r))}
end
OPS.Split = function(ins, n, ctx)
  local x = ins[1]
  local d = ax(attr(n, 'axis', 0), x:dim())
  local sizes
  if ctx.opset >= 13 then sizes = vals(ins[2]) else sizes = attr(n, 'split') end
  local total = x:size(d)
  if sizes == nil or #sizes == 0 then
    local k = attr(n, 'num_outputs') or #n.outputs
    local chunk = math.ceil(total / k)
    sizes = {}
    local left = total
    for i = 1, k do
      sizes[i] = math.min(chunk, left)
      left = left - sizes[i]
    end
  end
  local out, start = {}, 1
  for i, s in ipairs(sizes) do
    out[i] = x:narrow(d, start, s)
    start = start + s
  end
  return out
end
OPS.Tile = binary(function(x, reps) return x:tile(vals(reps)) end)
OPS.Expand = binary(function(x, shape)
  shape = vals(shape)
  local src = x:size():totable()
  local r = math.max(#shape, #src)
  local out = {}
  for i = 1, r do
    local a = src[i - (r - #src)] or 1
    local b = shape[i - (r - #shape)] or 1
    if a ~= 1 and b ~= 1 and a ~= b then fail('Expand: shape %d vs %d at dim %d', a, b, i) end
    out[i] = a == 1 and b or a
  end
  return x:reshape(r == #src and src or (function()
    local s = {}
    for i = 1, r - #src do s[i] = 1 end
    for i = 1, #src do s[#s + 1] = src[i] end
    return s
  end)()):expand(out):contiguous()
end)

-- Slice: clamps starts/ends as numpy does, steps may be negative
local function slice(x, starts, ends, axes, steps)
  local r = x:dim()
  local shape = x:size():totable()
  local y = x
  for i = 1, #starts do
    local d = ax(axes and axes[i] or (i - 1), r)
    local dim = shape[d]
    local step = steps and steps[i] or 1
    if step == 0 then fail('Slice: step 0') end
    local s, e = starts[i], ends[i]
    if s < 0 then s = s + dim end
    if e < 0 then e = e + dim end
    if step > 0 then
      s = math.max(0, math.min(s, dim))
      e = math.max(0, math.min(e, dim))
    else
      s = math.max(-1, math.min(s, dim - 1))
      e = math.max(-1, math.min(e, dim - 1))
    end
    local idx = {}
    if step > 0 then
      for k = s, e - 1, step do idx[#idx + 1] = k + 1 end
    else
      for k = s, e + 1, step do idx[#idx + 1] = k + 1 end
    end
    if #idx == 0 then
      local sh = y:size():totable()
      sh[d] = 0
      y = flow.empty(sh, {dtype = y.dtype})
    elseif step == 1 then
      y = y:narrow(d, idx[1], #idx)
    else
      y = y:index_select(d, flow.tensor(idx, {dtype = flow.int64}))
    end
  end
  return y:contiguous()
end
OPS.Slice = function(ins, n, ctx)
  if ctx.opset < 10 then
    return {slice(ins[1], attr(n, 'starts'), attr(n, 'ends'), attr(n, 'axes'))}
  end
  return {slice(ins[1], vals(ins[2]), vals(ins[3]), vals(ins[4]), vals(ins[5]))}
end

------------------------------------------------------------------ indexing
-- 0-based ONNX indices (negative from the end) of a dim of size `size` -> 1-based int64
local function index1(idx, size)
  idx = idx:to(flow.int64)
  return flow.where(idx:lt(0), idx + (size + 1), idx + 1)
end

OPS.Gather = function(ins, n)
  local x, idx = ins[1], ins[2]
  local d = ax(attr(n, 'axis', 0), x:dim())
  local i1 = index1(idx, x:size(d))
  local ishape = idx:size():totable()
  local flat = x:index_select(d, i1:reshape(-1))
  local shape = x:size():totable()
  local out = {}
  for i = 1, d - 1 do out[#out + 1] = shape[i] end
  for _, s in ipairs(ishape) do out[#out + 1] = s end
  for i = d + 1, #shape do out[#out + 1] = shape[i] end
  return {flat:reshape(out)}
end
OPS.GatherElements = function(ins, n)
  local x, idx = ins[1], ins[2]
  local d = ax(attr(n, 'axis', 0), x:dim())
  return {x:gather(d, index1(idx, x:size(d)))}
end
local function scatter_elements(x, d, idx, upd, reduction)
  idx = index1(idx, x:size(d))
  if reduction == nil or reduction == 'none' then return x:scatter(d, idx, upd) end
  if reduction == 'add' then return x:scatter_add(d, idx, upd) end
  -- max / min / mul: one update at a time, in order, as the ONNX reference does
  local out = x:clone()
  local iv = idx:to(flow.int64):contiguous()
  local shape = iv:size():totable()
  local flat_i, flat_u = vals(iv), vals(upd)
  local ov = out:reshape(-1)
  local xs = x:size():totable()
  local strides, acc = {}, 1
  for k = #xs, 1, -1 do strides[k] = acc; acc = acc * xs[k] end
  for p = 1, #flat_i do
    -- position p in idx's shape -> its coordinates, with dim d replaced by the index
    local rem, pos = p - 1, 0
    for k = #shape, 1, -1 do
      local c = rem % shape[k]
      rem = (rem - c) / shape[k]
      pos = pos + (k == d and (flat_i[p] - 1) or c) * strides[k]
    end
    local cur = vals(ov[pos + 1])[1]
    local u = flat_u[p]
    local v = reduction == 'mul' and cur * u or reduction == 'max' and math.max(cur, u) or math.min(cur, u)
    ov[pos + 1] = v
  end
  return ov:reshape(xs)
end
OPS.ScatterElements = function(ins, n)
  local x = ins[1]
  return {scatter_elements(x, ax(attr(n, 'axis', 0), x:dim()), ins[2], ins[3]:to(x.dtype),
                           attr(n, 'reduction', 'none'))}
end
OPS.Scatter = OPS.ScatterElements

-- GatherND / ScatterND through flat indices over the first k dims
local function flat_index(shape, idx, batch)
  -- idx [..., k] 0-based -> flat positions into the product of dims batch+1 .. batch+k
  local k = idx:size(idx:dim())
  local lin = nil
  for j = 1, k do
    local size = shape[batch + j]
    local c = idx:select(idx:dim(), j):to(flow.int64)
    c = flow.where(c:lt(0), c + size, c)
    lin = lin and (lin * size + c) or c
  end
  return lin, k
end
OPS.GatherND = function(ins, n)
  local x, idx = ins[1], ins[2]
  local b = attr(n, 'batch_dims', 0)
  local shape = x:size():totable()
  local lin, k = flat_index(shape, idx, b)
  local bsz = 1
  for i = 1, b do bsz = bsz * shape[i] end
  local mid = 1
  for i = b + 1, b + k do mid = mid * shape[i] end
  local rest = {}
  for i = b + k + 1, #shape do rest[#rest + 1] = shape[i] end
  local xf = x:reshape(bsz, mid, -1)
  local l = lin:reshape(bsz, -1)
  local g = xf:gather(2, (l + 1):unsqueeze(3):expand(bsz, l:size(2), xf:size(3)))
  local out = idx:size():totable()
  out[#out] = nil
  for _, s in ipairs(rest) do out[#out + 1] = s end
  return {g:reshape(out)}
end
OPS.ScatterND = function(ins, n)
  local x, idx, upd = ins[1], ins[2], ins[3]:to(ins[1].dtype)
  local shape = x:size():totable()
  local lin, k = flat_index(shape, idx, 0)
  local mid = 1
  for i = 1, k do mid = mid * shape[i] end
  local xf = x:reshape(mid, -1):clone()
  local l = (lin:reshape(-1) + 1)
  local u = upd:reshape(l:size(1), -1)
  local red = attr(n, 'reduction', 'none')
  local li = l:unsqueeze(2):expand(l:size(1), xf:size(2))
  local r
  if red == 'none' then r = xf:scatter(1, li, u)
  elseif red == 'add' then r = xf:scatter_add(1, li, u)
  else
    -- duplicates combine in order: apply one update row at a time
    r = xf
    local lv = vals(l)
    for i, p in ipairs(lv) do
      local row = r:narrow(1, p, 1)
      local v = u:narrow(1, i, 1)
      local nv
      if red == 'mul' then nv = row * v elseif red == 'max' then nv = flow.maximum(row, v)
      else nv = flow.minimum(row, v) end
      r = flow.cat({r:narrow(1, 1, p - 1), nv, r:narrow(1, p + 1, r:size(1) - p)}, 1)
    end
  end
  return {r:reshape(shape)}
end

OPS.OneHot = function(ins, n)
  local idx, depth, values = ins[1], vals(ins[2])[1], ins[3]
  local r = idx:dim() + 1
  local a = ax(attr(n, 'axis', -1), r)
  depth = floor(depth)
  local i = idx:to(flow.int64)
  i = flow.where(i:lt(0), i + depth, i)
  local shape = {}
  for k = 1, r do shape[k] = 1 end
  shape[a] = depth
  local range = flow.arange(0, depth, {dtype = flow.int64}):reshape(shape)
  local hot = i:unsqueeze(a):eq(range)
  local off, on = values:reshape(-1)[1], values:reshape(-1)[2]
  return {flow.where(hot, on, off)}
end

OPS.NonZero = one(function(x)
  local nz = x:ne(0):nonzero()   -- [N, r], 1-based
  if nz:numel() == 0 then return flow.zeros(x:dim(), 0, {dtype = flow.int64}) end
  return (nz - 1):t():contiguous()
end)

OPS.Compress = function(ins, n)
  local x, cond = ins[1], vals(ins[2])
  local a = attr(n, 'axis')
  if a == nil then x, a = x:reshape(-1), 0 end
  local d = ax(a, x:dim())
  local idx = {}
  for i = 1, math.min(#cond, x:size(d)) do
    if cond[i] ~= 0 and cond[i] ~= false then idx[#idx + 1] = i end
  end
  if #idx == 0 then
    local sh = x:size():totable()
    sh[d] = 0
    return {flow.empty(sh, {dtype = x.dtype})}
  end
  return {x:index_select(d, flow.tensor(idx, {dtype = flow.int64}))}
end

OPS.Trilu = function(ins, n)
  local x = ins[1]
  local k = ins[2] and vals(ins[2])[1] or 0
  if attr(n, 'upper', 1) == 1 then return {x:triu(k)} end
  return {x:tril(k)}
end

OPS.CumSum = function(ins, n)
  local x = ins[1]
  local d = ax(vals(ins[2])[1], x:dim())
  local y = x
  if attr(n, 'reverse', 0) == 1 then y = y:flip(d) end
  local c = y:cumsum(d)
  if attr(n, 'exclusive', 0) == 1 then c = c - y end
  if attr(n, 'reverse', 0) == 1 then c = c:flip(d) end
  return {c}
end

------------------------------------------------------------------ reductions
local function reduce_axes(ins, n, ctx, since)
  local x = ins[1]
  local axes
  if ctx.opset >= since then axes = vals(ins[2]) else axes = attr(n, 'axes') end
  if axes == nil or #axes == 0 then
    if attr(n, 'noop_with_empty_axes', 0) == 1 then return nil end
    axes = {}
    for i = 0, x:dim() - 1 do axes[#axes + 1] = i end
  end
  return axes_list(axes, x:dim())
end

-- identity: the value of a reduction over an empty set
local function reducer(fn, since, pre, identity)
  return function(ins, n, ctx)
    local x = ins[1]
    local dims = reduce_axes(ins, n, ctx, since or 18)
    local keep = attr(n, 'keepdims', 1) == 1
    if pre then x = pre(x) end
    if dims == nil then return {x} end
    if x:numel() == 0 and identity ~= nil then
      local shape, drop, out = x:size():totable(), {}, {}
      for _, di in ipairs(dims) do drop[di] = true end
      for i, v in ipairs(shape) do
        if drop[i] then if keep then out[#out + 1] = 1 end else out[#out + 1] = v end
      end
      return {flow.full(out, identity, {dtype = x.dtype})}
    end
    if x:dim() == 0 then return {fn(x:reshape(1), {1}, false)} end
    return {fn(x, dims, keep)}
  end
end

local function sum(x, d, k) return x:sum(d, {keepdim = k}) end
OPS.ReduceSum = reducer(sum, 13, nil, 0)
OPS.ReduceMean = reducer(function(x, d, k) return x:mean(d, {keepdim = k}) end)
OPS.ReduceMax = reducer(function(x, d, k)
  if x.dtype == flow.bool then return x:any(d, {keepdim = k}) end
  return x:amax(d, {keepdim = k})
end, 18, nil, -huge)
OPS.ReduceMin = reducer(function(x, d, k)
  if x.dtype == flow.bool then return x:all(d, {keepdim = k}) end
  return x:amin(d, {keepdim = k})
end, 18, nil, huge)
OPS.ReduceProd = reducer(function(x, d, k) return x:prod(d, {keepdim = k}) end, 18, nil, 1)
OPS.ReduceL1 = reducer(sum, 18, function(x) return x:abs() end, 0)
OPS.ReduceL2 = reducer(function(x, d, k) return x:sum(d, {keepdim = k}):sqrt() end, 18,
                       function(x) return x * x end, 0)
OPS.ReduceSumSquare = reducer(sum, 18, function(x) return x * x end, 0)
OPS.ReduceLogSum = reducer(function(x, d, k) return x:sum(d, {keepdim = k}):log() end, 18, nil, -huge)
OPS.ReduceLogSumExp = reducer(function(x, d, k)
  local m = x:amax(d, {keepdim = true})
  m = flow.where(m:isinf(), flow.zeros_like(m), m)
  local s = (x - m):exp():sum(d, {keepdim = true}):log() + m
  if not k then
    local shape, drop, out = s:size():totable(), {}, {}
    for _, di in ipairs(d) do drop[di] = true end
    for i, v in ipairs(shape) do if not drop[i] then out[#out + 1] = v end end
    s = s:reshape(out)
  end
  return s
end, 18, nil, -huge)

local function arg_reduce(method)
  return function(ins, n)
    local x = ins[1]
    local d = ax(attr(n, 'axis', 0), x:dim())
    local keep = attr(n, 'keepdims', 1) == 1
    local last = attr(n, 'select_last_index', 0) == 1
    local y = last and x:flip(d) or x
    local i = y[method](y, d, {keepdim = keep}) - 1
    if last then i = (x:size(d) - 1) - i end
    return {i:to(flow.int64)}
  end
end
OPS.ArgMax = arg_reduce('argmax')
OPS.ArgMin = arg_reduce('argmin')

OPS.TopK = function(ins, n, ctx)
  local x = ins[1]
  local k = ctx.opset >= 10 and vals(ins[2])[1] or attr(n, 'k')
  local d = ax(attr(n, 'axis', -1), x:dim())
  local largest = attr(n, 'largest', 1) == 1
  -- stable order for equal values: ONNX wants the lower index first
  local v, i = x:topk(k, d, {largest = largest, sorted = true})
  return {v, (i - 1):to(flow.int64)}
end

------------------------------------------------------------------ linear algebra
OPS.MatMul = binary(function(a, b) return flow.matmul(a, b) end)
OPS.Gemm = function(ins, n)
  local a, b, c = ins[1], ins[2], ins[3]
  if attr(n, 'transA', 0) == 1 then a = a:t() end
  if attr(n, 'transB', 0) == 1 then b = b:t() end
  local y = flow.matmul(a, b)
  local alpha, beta = attr(n, 'alpha', 1.0), attr(n, 'beta', 1.0)
  if alpha ~= 1 then y = y * alpha end
  if c ~= nil and beta ~= 0 then
    y = y + (beta == 1 and c or c * beta)
  end
  return {y}
end
OPS.Einsum = function(ins, n)
  local list = {}
  for i = 1, ins.n do list[i] = ins[i] end
  return {flow.einsum(attr(n, 'equation'):gsub(' ', ''), unpack(list))}
end
OPS.Det = one(function(x) return flow.linalg.det(x) end)

------------------------------------------------------------------ conv, pool
-- pads for auto_pad SAME_UPPER / SAME_LOWER / VALID / NOTSET
local function auto_pads(n, in_sp, k, s, d, transpose)
  local mode = attr(n, 'auto_pad', 'NOTSET')
  local nsp = #in_sp
  local pads = attr(n, 'pads')
  if mode == 'NOTSET' or mode == '' then
    if pads == nil then
      pads = {}
      for i = 1, 2 * nsp do pads[i] = 0 end
    end
    return pads
  end
  pads = {}
  for i = 1, nsp do
    local total = 0
    if mode ~= 'VALID' then
      local out = math.ceil(in_sp[i] / s[i])
      local ek = (k[i] - 1) * d[i] + 1
      if transpose then
        total = math.max(0, s[i] * (in_sp[i] - 1) + ek - in_sp[i] * s[i])
      else
        total = math.max(0, (out - 1) * s[i] + ek - in_sp[i])
      end
    end
    local small, big = floor(total / 2), total - floor(total / 2)
    if mode == 'SAME_LOWER' then pads[i], pads[i + nsp] = big, small
    else pads[i], pads[i + nsp] = small, big end
  end
  return pads
end

local function ones(k, v) local t = {} for i = 1, k do t[i] = v or 1 end return t end

-- splits pads into symmetric padding plus an explicit F.pad for the rest
local function pad_input(x, pads, nsp, value)
  local sym, extra, need = {}, {}, false
  for i = 1, nsp do
    local a, b = pads[i], pads[i + nsp]
    local m = math.min(a, b)
    sym[i] = m
    extra[i] = {a - m, b - m}
    if a ~= b then need = true end
  end
  if need then
    local p = {}
    for i = nsp, 1, -1 do p[#p + 1] = extra[i][1]; p[#p + 1] = extra[i][2] end
    x = F.pad(x, p, {mode = 'constant', value = value or 0})
  end
  return x, sym
end

local function spatial(x) local s = x:size():totable() local o = {} for i = 3, #s do o[#o + 1] = s[i] end return o end

OPS.Conv = function(ins, n)
  local x, w, b = ins[1], ins[2], ins[3]
  local nsp = x:dim() - 2
  if nsp < 1 or nsp > 3 then unsupported('Conv on a %d-d input', x:dim()) end
  local wk = w:size():totable()
  local k = attr(n, 'kernel_shape') or {unpack(wk, 3)}
  local s = attr(n, 'strides') or ones(nsp)
  local d = attr(n, 'dilations') or ones(nsp)
  local pads = auto_pads(n, spatial(x), k, s, d)
  local sym
  x, sym = pad_input(x, pads, nsp)
  local fn = F['conv' .. nsp .. 'd']
  return {fn(x, w, b, s, sym, d, attr(n, 'group', 1))}
end

OPS.ConvTranspose = function(ins, n)
  local x, w, b = ins[1], ins[2], ins[3]
  local nsp = x:dim() - 2
  local wk = w:size():totable()
  local k = attr(n, 'kernel_shape') or {unpack(wk, 3)}
  local s = attr(n, 'strides') or ones(nsp)
  local d = attr(n, 'dilations') or ones(nsp)
  local group = attr(n, 'group', 1)
  local op = attr(n, 'output_padding') or ones(nsp, 0)
  local in_sp = spatial(x)
  local pads = attr(n, 'pads')
  local out_shape = attr(n, 'output_shape')
  local mode = attr(n, 'auto_pad', 'NOTSET')
  if out_shape then
    pads = {}
    op = {unpack(op)}
    if #out_shape == nsp + 2 then out_shape = {unpack(out_shape, 3)} end
    for i = 1, nsp do
      local total = s[i] * (in_sp[i] - 1) + op[i] + ((k[i] - 1) * d[i] + 1) - out_shape[i]
      if total < 0 then op[i], total = op[i] - total, 0 end
      if mode == 'SAME_UPPER' then pads[i], pads[i + nsp] = floor(total / 2), total - floor(total / 2)
      else pads[i], pads[i + nsp] = total - floor(total / 2), floor(total / 2) end
    end
  elseif mode == 'SAME_UPPER' or mode == 'SAME_LOWER' then
    pads = {}
    for i = 1, nsp do
      local total = math.max(0, s[i] * (in_sp[i] - 1) + op[i] + ((k[i] - 1) * d[i] + 1) - in_sp[i] * s[i])
      if mode == 'SAME_UPPER' then pads[i], pads[i + nsp] = floor(total / 2), total - floor(total / 2)
      else pads[i], pads[i + nsp] = total - floor(total / 2), floor(total / 2) end
    end
  end
  pads = pads or ones(2 * nsp, 0)
  -- asymmetric pads: transpose with the smaller side, then crop the rest
  local sym, crop, need = {}, {}, false
  for i = 1, nsp do
    sym[i] = math.min(pads[i], pads[i + nsp])
    crop[i] = {pads[i] - sym[i], pads[i + nsp] - sym[i]}
    if pads[i] ~= pads[i + nsp] then need = true end
  end
  local fn = F['conv_transpose' .. nsp .. 'd']
  local y = fn(x, w, b, s, sym, op, group, d)
  if need then
    for i = 1, nsp do
      local dim = i + 2
      local size = y:size(dim)
      y = y:narrow(dim, crop[i][1] + 1, size - crop[i][1] - crop[i][2])
    end
    y = y:contiguous()
  end
  return {y}
end

local function pool(kind)
  return function(ins, n)
    local x = ins[1]
    local nsp = x:dim() - 2
    if nsp < 1 or nsp > 3 then unsupported('%s on a %d-d input', n.op_type, x:dim()) end
    local k = attr(n, 'kernel_shape')
    local s = attr(n, 'strides') or ones(nsp)
    local d = attr(n, 'dilations') or ones(nsp)
    local ceil = attr(n, 'ceil_mode', 0) == 1
    local pads = auto_pads(n, spatial(x), k, s, d)
    if kind == 'max' then
      local want_idx = #n.outputs > 1 and n.outputs[2] ~= ''
      local big = false
      for i = 1, nsp do if pads[i] * 2 > k[i] or pads[i + nsp] * 2 > k[i] then big = true end end
      if not x.dtype.is_floating_point or (big and not want_idx) then
        local xf = x.dtype.is_floating_point and x or x:to(flow.float64)
        local list = M.window_slices(xf, k, s, d, pads, ceil, -huge)
        local y = list[1]
        for i = 2, #list do y = flow.maximum(y, list[i]) end
        return {y:to(x.dtype)}
      end
      local xp, sym = pad_input(x, pads, nsp, -huge)
      local y, idx = F['max_pool' .. nsp .. 'd'](xp, k, s, sym, d, ceil, want_idx)
      local out = {y}
      if want_idx then
        -- ours: 1-based within each plane of xp (x plus the asymmetric part of
        -- the pads); ONNX: flat over the whole of x, row-major (or column-major
        -- with storage_order = 1)
        local xs, ps = spatial(x), spatial(xp)
        local rem = idx:to(flow.int64) - 1
        local coords = {}
        for i = nsp, 1, -1 do
          coords[i] = flow.remainder(rem, ps[i]) - (pads[i] - sym[i])
          rem = flow.div(rem, ps[i], {rounding_mode = 'floor'})
        end
        local flat
        if attr(n, 'storage_order', 0) == 1 then
          flat = coords[nsp]
          for i = nsp - 1, 1, -1 do flat = flat * xs[i] + coords[i] end
        else
          flat = coords[1]
          for i = 2, nsp do flat = flat * xs[i] + coords[i] end
        end
        local plane = 1
        for _, v in ipairs(xs) do plane = plane * v end
        local nc = x:size(1) * x:size(2)
        local base = (flow.arange(0, nc, {dtype = flow.int64}) * plane):reshape(x:size(1), x:size(2),
                                                                           unpack(ones(nsp)))
        out[2] = flat + base
      end
      return out
    end
    local include = attr(n, 'count_include_pad', 0) == 1
    local simple = not ceil
    for i = 1, nsp do
      if d[i] ~= 1 or pads[i] ~= pads[i + nsp] or pads[i] * 2 > k[i] then simple = false end
    end
    if simple then
      local sym = {}
      for i = 1, nsp do sym[i] = pads[i] end
      return {F['avg_pool' .. nsp .. 'd'](x, k, s, sym, false, include)}
    end
    return {M.generic_avg(x, k, s, d, pads, ceil, include)}
  end
end
OPS.MaxPool = pool('max')
OPS.AveragePool = pool('avg')
OPS.GlobalAveragePool = one(function(x)
  local dims = {}
  for i = 3, x:dim() do dims[#dims + 1] = i end
  return x:mean(dims, {keepdim = true})
end)
OPS.GlobalMaxPool = one(function(x)
  local dims = {}
  for i = 3, x:dim() do dims[#dims + 1] = i end
  return x:amax(dims, {keepdim = true})
end)

------------------------------------------------------------------ normalization
local function bshape(x, v)
  local shape = ones(x:dim())
  shape[2] = v:numel()
  return v:reshape(shape)
end

OPS.BatchNormalization = function(ins, n)
  local x, scale, bias, mean, var = ins[1], ins[2], ins[3], ins[4], ins[5]
  local eps = attr(n, 'epsilon', 1e-5)
  local training = attr(n, 'training_mode', 0) == 1
  if training then
    local dims = {1}
    for i = 3, x:dim() do dims[#dims + 1] = i end
    local bm = x:mean(dims)
    local bv = ((x - bshape(x, bm)) ^ 2):mean(dims)
    local mom = attr(n, 'momentum', 0.9)
    local y = (x - bshape(x, bm)) / (bshape(x, bv) + eps):sqrt() * bshape(x, scale) + bshape(x, bias)
    return {y, mean * mom + bm * (1 - mom), var * mom + bv * (1 - mom)}
  end
  local y = (x - bshape(x, mean)) / (bshape(x, var) + eps):sqrt() * bshape(x, scale) + bshape(x, bias)
  return {y}
end
OPS.InstanceNormalization = function(ins, n)
  local x, scale, bias = ins[1], ins[2], ins[3]
  local eps = attr(n, 'epsilon', 1e-5)
  local dims = {}
  for i = 3, x:dim() do dims[#dims + 1] = i end
  local m = x:mean(dims, {keepdim = true})
  local v = ((x - m) ^ 2):mean(dims, {keepdim = true})
  return {(x - m) / (v + eps):sqrt() * bshape(x, scale) + bshape(x, bias)}
end
OPS.LayerNormalization = function(ins, n)
  local x, scale, bias = ins[1], ins[2], ins[3]
  local r = x:dim()
  local a = ax(attr(n, 'axis', -1), r)
  local eps = attr(n, 'epsilon', 1e-5)
  local dims = {}
  for i = a, r do dims[#dims + 1] = i end
  local xf = x
  local stash = attr(n, 'stash_type', 1)
  if stash == 1 and x.dtype ~= flow.float32 and x.dtype.is_floating_point then xf = x:to(flow.float32) end
  local m = xf:mean(dims, {keepdim = true})
  local v = ((xf - m) ^ 2):mean(dims, {keepdim = true})
  local inv = (v + eps):rsqrt()
  local y = ((xf - m) * inv):to(x.dtype) * scale
  if bias ~= nil then y = y + bias end
  return {y, m, inv}
end
OPS.GroupNormalization = function(ins, n, ctx)
  local x, scale, bias = ins[1], ins[2], ins[3]
  local g = attr(n, 'num_groups')
  local eps = attr(n, 'epsilon', 1e-5)
  local shape = x:size():totable()
  local xg = x:reshape(shape[1], g, -1)
  local m = xg:mean(3, {keepdim = true})
  local v = ((xg - m) ^ 2):mean(3, {keepdim = true})
  local y = ((xg - m) / (v + eps):sqrt()):reshape(shape)
  if ctx.opset < 21 and scale:numel() == g and g ~= shape[2] then
    -- opset 18: per-group scale and bias
    scale = scale:repeat_interleave(shape[2] / g)
    bias = bias:repeat_interleave(shape[2] / g)
  end
  return {y * bshape(x, scale) + bshape(x, bias)}
end
OPS.LRN = one(function(x, n)
  local size = attr(n, 'size')
  local alpha, beta, bias = attr(n, 'alpha', 1e-4), attr(n, 'beta', 0.75), attr(n, 'bias', 1.0)
  local sq = x * x
  local c = x:size(2)
  local lo, hi = floor((size - 1) / 2), math.ceil((size - 1) / 2)
  local p = {}
  for _ = 3, x:dim() do p[#p + 1] = 0; p[#p + 1] = 0 end
  p[#p + 1] = lo
  p[#p + 1] = hi
  local padded = F.pad(sq, p, {mode = 'constant', value = 0})
  local acc = nil
  for i = 1, size do
    local part = padded:narrow(2, i, c)
    acc = acc and acc + part or part
  end
  return x / (acc * (alpha / size) + bias) ^ beta
end)
OPS.MeanVarianceNormalization = one(function(x, n)
  local dims = axes_list(attr(n, 'axes', {0, 2, 3}), x:dim())
  local m = x:mean(dims, {keepdim = true})
  local v = ((x - m) ^ 2):mean(dims, {keepdim = true})
  return (x - m) / (v:sqrt() + 1e-9)
end)
OPS.LpNormalization = one(function(x, n)
  local d = ax(attr(n, 'axis', -1), x:dim())
  local p = attr(n, 'p', 2)
  local norm = p == 1 and x:abs():sum(d, {keepdim = true}) or (x * x):sum(d, {keepdim = true}):sqrt()
  return x / norm
end)

OPS.Dropout = function(ins, n)
  local x = ins[1]
  local out = {x}
  if #n.outputs > 1 then out[2] = flow.ones(x:size():totable(), {dtype = flow.bool}) end
  -- training with a ratio above 0 is random; ratio 0 (or eval) is the identity
  if ins[3] ~= nil and vals(ins[3])[1] ~= 0 and (ins[2] == nil or vals(ins[2])[1] ~= 0) then
    unsupported('Dropout in training mode (random)')
  end
  return out
end

------------------------------------------------------------------ padding, rearranging
OPS.Pad = function(ins, n, ctx)
  local x = ins[1]
  local r = x:dim()
  local pads, value, axes
  local mode = attr(n, 'mode', 'constant')
  if ctx.opset < 11 then
    pads, value = attr(n, 'pads') or attr(n, 'paddings'), attr(n, 'value', 0)
  else
    pads = vals(ins[2])
    value = ins[3] and vals(ins[3])[1] or 0
    axes = ins[4] and vals(ins[4])
  end
  local full = ones(2 * r, 0)
  if axes then
    for i, a in ipairs(axes) do
      local d = ax(a, r)
      full[d], full[d + r] = pads[i], pads[i + #axes]
    end
  else
    full = pads
  end
  local p = {}
  local crop = false
  for i = r, 1, -1 do
    p[#p + 1] = full[i]
    p[#p + 1] = full[i + r]
    if full[i] < 0 or full[i + r] < 0 then crop = true end
  end
  -- trailing zero pairs dropped: F.pad pads the last dims
  while #p > 2 and p[#p] == 0 and p[#p - 1] == 0 do p[#p] = nil; p[#p] = nil end
  local fmode = ({constant = 'constant', reflect = 'reflect', edge = 'replicate', wrap = 'circular'})[mode]
  if not fmode then unsupported("Pad mode '%s'", tostring(mode)) end
  if crop then
    local y = x
    for i = 1, r do
      if full[i] < 0 then y = y:narrow(i, -full[i] + 1, y:size(i) + full[i]); full[i] = 0 end
      if full[i + r] < 0 then y = y:narrow(i, 1, y:size(i) + full[i + r]); full[i + r] = 0 end
    end
    x = y:contiguous()
    p = {}
    for i = r, 1, -1 do p[#p + 1] = full[i]; p[#p + 1] = full[i + r] end
  end
  if fmode == 'constant' then
    if x.dtype == flow.bool then value = value ~= 0 end
    return {F.pad(x, p, {mode = 'constant', value = value})}
  end
  return {F.pad(x, p, {mode = fmode})}
end

OPS.DepthToSpace = one(function(x, n)
  local b = attr(n, 'blocksize')
  local N, C, H, W = unpack(x:size():totable())
  local y
  if attr(n, 'mode', 'DCR') == 'DCR' then
    y = x:reshape(N, b, b, C / (b * b), H, W):permute(1, 4, 5, 2, 6, 3)
  else
    y = x:reshape(N, C / (b * b), b, b, H, W):permute(1, 2, 5, 3, 6, 4)
  end
  return y:reshape(N, C / (b * b), H * b, W * b)
end)
OPS.SpaceToDepth = one(function(x, n)
  local b = attr(n, 'blocksize')
  local N, C, H, W = unpack(x:size():totable())
  return x:reshape(N, C, H / b, b, W / b, b):permute(1, 4, 6, 2, 3, 5):reshape(N, C * b * b, H / b, W / b)
end)

OPS.ReverseSequence = function(ins, n)
  local x, lens = ins[1], vals(ins[2])
  local bax, tax = attr(n, 'batch_axis', 1) + 1, attr(n, 'time_axis', 0) + 1
  local parts = {}
  for b = 1, x:size(bax) do
    local s = x:narrow(bax, b, 1)
    local L = lens[b]
    if L > 1 then
      local head = s:narrow(tax, 1, L):flip(tax)
      local rest = s:size(tax) - L
      s = rest > 0 and flow.cat({head, s:narrow(tax, L + 1, rest)}, tax) or head
    end
    parts[b] = s
  end
  return {flow.cat(parts, bax)}
end

------------------------------------------------------------------ resize
-- Source coordinate of output index o (0-based) for one axis.
local function src_coord(mode, o, scale, in_len, roi_s, roi_e, out_int)
  local out_len = in_len * scale   -- ONNX's length_resized: not rounded
  if mode == 'half_pixel' then return (o + 0.5) / scale - 0.5
  elseif mode == 'pytorch_half_pixel' then return out_len > 1 and (o + 0.5) / scale - 0.5 or -0.5
  elseif mode == 'align_corners' then return out_len == 1 and 0 or o * (in_len - 1) / (out_len - 1)
  elseif mode == 'asymmetric' then return o / scale
  elseif mode == 'tf_crop_and_resize' then
    if out_len > 1 then return roi_s * (in_len - 1) + o * (roi_e - roi_s) * (in_len - 1) / (out_len - 1) end
    return 0.5 * (roi_s + roi_e) * (in_len - 1)
  elseif mode == 'half_pixel_symmetric' then
    local adj = out_int / out_len
    local center = in_len / 2
    local off = center * (1 - adj)
    return off + (o + 0.5) / scale - 0.5
  end
  unsupported("Resize coordinate_transformation_mode '%s'", tostring(mode))
end

local function nearest(mode, c)
  if mode == 'round_prefer_floor' then return c == floor(c) + 0.5 and floor(c) or floor(c + 0.5)
  elseif mode == 'round_prefer_ceil' then return floor(c + 0.5)
  elseif mode == 'floor' then return floor(c)
  elseif mode == 'ceil' then return math.ceil(c) end
  unsupported("Resize nearest_mode '%s'", tostring(mode))
end

-- the cubic convolution kernel (Keys, coefficient A) at distance d
local function cubic(d, A)
  d = math.abs(d)
  if d <= 1 then return ((A + 2) * d - (A + 3)) * d * d + 1 end
  if d < 2 then return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A end
  return 0
end

local function cubic_weights(t, A, excl, idxs, in_len)
  local function w(d) return cubic(d, A) end
  local ws = {w(t + 1), w(t), w(1 - t), w(2 - t)}
  if excl then
    local s = 0
    for i = 1, 4 do
      if idxs[i] < 0 or idxs[i] >= in_len then ws[i] = 0 end
      s = s + ws[i]
    end
    for i = 1, 4 do ws[i] = ws[i] / s end
  end
  return ws
end

-- One row of the interpolation matrix with antialiasing (downscaling), as
-- the ONNX reference computes it: the kernel stretched by 1 / scale, its
-- taps the nearest indices to the source coordinate, edge-padded.
local function aa_row(row, c, scale, in_len, mode, A, excl)
  local ratio = c == floor(c) and 1 or c - floor(c)
  local coeffs = {}
  if mode == 'linear' then
    local start = floor(-1 / scale) + 1
    for i = start, start + 2 - 2 * start - 1 do
      coeffs[#coeffs + 1] = math.max(0, math.min(1, 1 - math.abs((i - ratio) * scale)))
    end
  else
    local st = floor(-2 / scale) + 1
    for i = st, 2 - st - 1 do coeffs[#coeffs + 1] = cubic(scale * (i - ratio), A) end
  end
  local total = 0
  for _, v in ipairs(coeffs) do total = total + v end
  for i = 1, #coeffs do coeffs[i] = coeffs[i] / total end
  local nn_ = #coeffs
  local pad = math.ceil(nn_ / 2)
  local xp = c + pad
  local cand = {}
  for i = floor(xp) - nn_ - 1, floor(xp) + nn_ + 1 do
    if i >= 0 and i < in_len + 2 * pad then cand[#cand + 1] = i end
  end
  table.sort(cand, function(a, b)
    local da, db = math.abs(xp - a), math.abs(xp - b)
    if da ~= db then return da < db end
    return a < b
  end)
  local idx = {}
  for i = 1, nn_ do idx[i] = cand[i] end
  table.sort(idx)
  if excl then
    local t2 = 0
    for i = 1, nn_ do
      local o = idx[i] - pad
      if o < 0 or o >= in_len then coeffs[i] = 0 end
      t2 = t2 + coeffs[i]
    end
    for i = 1, nn_ do coeffs[i] = coeffs[i] / t2 end
  end
  for i = 1, nn_ do
    local o = math.max(0, math.min(in_len - 1, idx[i] - pad))
    row[o + 1] = row[o + 1] + coeffs[i]
  end
end

-- Resizes dim d (1-based) of x to out_len with the ONNX rules, as a matrix
-- product with a [out_len, in_len] interpolation matrix.
local function resize_axis(x, d, out_len, scale, n, roi_s, roi_e)
  local in_len = x:size(d)
  local mode = attr(n, 'mode', 'nearest')
  local ctm = attr(n, 'coordinate_transformation_mode', 'half_pixel')
  local nm = attr(n, 'nearest_mode', 'round_prefer_floor')
  local A = attr(n, 'cubic_coeff_a', -0.75)
  local excl = attr(n, 'exclude_outside', 0) == 1
  local extrap = attr(n, 'extrapolation_value', 0)
  local antialias = attr(n, 'antialias', 0) == 1 and scale < 1
  local W = {}
  for o = 0, out_len - 1 do
    local row = {}
    for i = 1, in_len do row[i] = 0 end
    local c = src_coord(ctm, o, scale, in_len, roi_s, roi_e, out_len)
    if ctm == 'tf_crop_and_resize' and (c < 0 or c > in_len - 1) then
      row.extrap = true
    elseif mode == 'nearest' then
      local i = nearest(nm, c)
      i = math.max(0, math.min(in_len - 1, i))
      row[i + 1] = 1
    elseif antialias and mode ~= 'nearest' then
      aa_row(row, c, scale, in_len, mode, A, excl)
    elseif mode == 'linear' then
      c = math.max(0, math.min(c, in_len - 1))
      local i0 = floor(c)
      local t = c - i0
      local i1 = math.min(i0 + 1, in_len - 1)
      row[i0 + 1] = row[i0 + 1] + (1 - t)
      row[i1 + 1] = row[i1 + 1] + t
    elseif mode == 'cubic' then
      local i0 = floor(c)
      local t = c - i0
      local idxs = {i0 - 1, i0, i0 + 1, i0 + 2}
      local ws = cubic_weights(t, A, excl, idxs, in_len)
      for k = 1, 4 do
        local i = math.max(0, math.min(in_len - 1, idxs[k]))
        row[i + 1] = row[i + 1] + ws[k]
      end
    else
      unsupported("Resize mode '%s'", tostring(mode))
    end
    W[o + 1] = row
  end
  local mask = {}
  local any_extrap = false
  for o = 1, out_len do
    mask[o] = W[o].extrap and 1 or 0
    if W[o].extrap then any_extrap = true end
    W[o].extrap = nil
  end
  local Wt = flow.tensor(W, {dtype = flow.float64}):to(x.dtype.is_floating_point and x.dtype or flow.float32)
  -- move d last, multiply, move back
  local xt = x:transpose(d, x:dim())
  local xf = xt.dtype.is_floating_point and xt or xt:to(flow.float32)
  local y = flow.matmul(xf, Wt:t())
  if any_extrap then
    local mk = flow.tensor(mask, {dtype = flow.bool})
    y = flow.where(mk, flow.full({}, extrap, {dtype = y.dtype}), y)
  end
  y = y:transpose(d, x:dim()):contiguous()
  if not x.dtype.is_floating_point then y = y:round():to(x.dtype) end
  return y
end

local function resize(ins, n, ctx)
  local x = ins[1]
  local r = x:dim()
  local roi, scales, sizes
  if ctx.opset < 11 then
    scales = vals(ins[2])
  else
    roi, scales, sizes = vals(ins[2]), vals(ins[3]), vals(ins[4])
  end
  if scales and #scales == 0 then scales = nil end
  if sizes and #sizes == 0 then sizes = nil end
  if roi and #roi == 0 then roi = nil end
  local axes = attr(n, 'axes')
  local shape = x:size():totable()
  local full_scales, full_sizes = {}, {}
  local sel = {}
  if axes then for i, a in ipairs(axes) do sel[ax(a, r)] = i end else for i = 1, r do sel[i] = i end end
  local policy = attr(n, 'keep_aspect_ratio_policy', 'stretch')
  if sizes and policy ~= 'stretch' then
    local best
    for d, i in pairs(sel) do
      local s = sizes[i] / shape[d]
      if best == nil or (policy == 'not_larger' and s < best) or (policy == 'not_smaller' and s > best) then
        best = s
      end
    end
    for d, i in pairs(sel) do
      sizes[i] = floor(shape[d] * best + 0.5)
      full_scales[d] = best
    end
  end
  for d = 1, r do
    local i = sel[d]
    if i == nil then
      full_scales[d], full_sizes[d] = 1, shape[d]
    elseif sizes then
      full_sizes[d] = sizes[i]
      full_scales[d] = full_scales[d] or sizes[i] / shape[d]
    else
      full_scales[d] = scales[i]
      full_sizes[d] = floor(shape[d] * scales[i])
    end
  end
  local y = x
  for d = 1, r do
    if sel[d] and (full_sizes[d] ~= shape[d] or full_scales[d] ~= 1 or
       attr(n, 'coordinate_transformation_mode') == 'tf_crop_and_resize') then
      local rs, re = 0, 1
      if roi then
        local i = sel[d]
        local k = axes and #axes or r
        rs, re = roi[i], roi[i + k]
      end
      y = resize_axis(y, d, full_sizes[d], full_scales[d], n, rs, re)
    end
  end
  return {y}
end
OPS.Resize = resize
OPS.Upsample = function(ins, n, ctx)
  local scales = ctx.opset < 9 and attr(n, 'scales') or vals(ins[2])
  local node = {attrs = {mode = n.attrs.mode, coordinate_transformation_mode = {type = 3, s = 'asymmetric'},
                         nearest_mode = {type = 3, s = 'floor'}}}
  if node.attrs.mode == nil then node.attrs.mode = {type = 3, s = 'nearest'} end
  return resize({ins[1], flow.tensor(scales)}, node, {opset = 10})
end

------------------------------------------------------------------ windows
local function window(fn)
  return function(ins, n)
    local size = floor(vals(ins[1])[1])
    local periodic = attr(n, 'periodic', 1) == 1
    local N = periodic and size or size - 1
    local t = {}
    for i = 0, size - 1 do t[i + 1] = fn(i, N) end
    local dt = onnx_dtype(attr(n, 'output_datatype', 1))
    return {flow.tensor(t, {dtype = flow.float64}):to(dt)}
  end
end
OPS.HannWindow = window(function(i, N) return 0.5 - 0.5 * math.cos(2 * math.pi * i / N) end)
OPS.HammingWindow = window(function(i, N) return 25 / 46 - 21 / 46 * math.cos(2 * math.pi * i / N) end)
OPS.BlackmanWindow = window(function(i, N)
  return 0.42 - 0.5 * math.cos(2 * math.pi * i / N) + 0.08 * math.cos(4 * math.pi * i / N)
end)

------------------------------------------------------------------ control flow
local function sub_env(env_parent)
  return setmetatable({}, {__index = env_parent})
end

-- Runs subgraph g with its inputs bound to values; returns its outputs.
function M.run_sub(ctx, g, values, parent)
  local env = sub_env(parent)
  for _, t in ipairs(g.initializers) do
    t.value = t.value or (I.tensor(t, ctx.dir))
    env[t.name] = t.value
  end
  for i, v in ipairs(g.inputs) do env[v.name] = values[i] end
  I.run_graph(ctx, g, env)
  local out = {}
  for i, v in ipairs(g.outputs) do
    out[i] = env[v.name]
    if out[i] == nil then fail("subgraph output '%s' has no value", v.name) end
  end
  return out
end

OPS.If = function(ins, n, ctx)
  local c = vals(ins[1])[1]
  local g = (c ~= 0 and c ~= false) and attr(n, 'then_branch') or attr(n, 'else_branch')
  return M.run_sub(ctx, g, {}, ctx.env)
end

OPS.Loop = function(ins, n, ctx)
  local g = attr(n, 'body')
  local max = ins[1] and vals(ins[1])[1] or huge
  local cond = ins[2] == nil and true or (vals(ins[2])[1] ~= 0)
  local carried = {}
  for i = 3, ins.n do carried[#carried + 1] = ins[i] end
  local ncarry = #carried
  local scans = {}
  local it = 0
  while it < max and cond do
    local args = {flow.tensor(it, {dtype = flow.int64}), flow.tensor(cond)}
    for i = 1, ncarry do args[#args + 1] = carried[i] end
    local out = M.run_sub(ctx, g, args, ctx.env)
    cond = vals(out[1])[1] ~= 0 and vals(out[1])[1] ~= false
    for i = 1, ncarry do carried[i] = out[i + 1] end
    for i = ncarry + 2, #out do
      local k = i - ncarry - 1
      scans[k] = scans[k] or {}
      table.insert(scans[k], out[i])
    end
    it = it + 1
  end
  local res = {}
  for i = 1, ncarry do res[i] = carried[i] end
  for k = 1, #g.outputs - 1 - ncarry do
    local list = scans[k]
    if list and #list > 0 then
      if is_t(list[1]) then
        res[#res + 1] = flow.stack(list, 1)
      else
        res[#res + 1] = list[#list]
      end
    else
      res[#res + 1] = flow.zeros(0)
    end
  end
  return res
end

-- Scan of opset 8: a batch dim first, an optional sequence_lens input
local function scan8(ins, n, ctx)
  local g = attr(n, 'body')
  local nscan = attr(n, 'num_scan_inputs')
  if ins[1] ~= nil then unsupported('Scan (opset 8) with sequence_lens') end
  local nstate = ins.n - 1 - nscan
  local dirs = attr(n, 'directions') or ones(nscan, 0)
  local batch = ins[2] and ins[2]:size(1) or ins[2 + nstate]:size(1)
  local finals, scans = {}, {}
  for b = 1, batch do
    local carried = {}
    for i = 1, nstate do carried[i] = ins[1 + i][b] end
    local len = ins[2 + nstate][b]:size(1)
    local outs = {}
    for t = 1, len do
      local args = {}
      for i = 1, nstate do args[i] = carried[i] end
      for j = 1, nscan do
        local pos = dirs[j] == 1 and (len - t + 1) or t
        args[#args + 1] = ins[1 + nstate + j][b][pos]
      end
      local out = M.run_sub(ctx, g, args, ctx.env)
      for i = 1, nstate do carried[i] = out[i] end
      for k = nstate + 1, #out do
        outs[k - nstate] = outs[k - nstate] or {}
        outs[k - nstate][t] = out[k]
      end
    end
    for i = 1, nstate do finals[i] = finals[i] or {}; finals[i][b] = carried[i] end
    for k, list in pairs(outs) do scans[k] = scans[k] or {}; scans[k][b] = flow.stack(list, 1) end
  end
  local res = {}
  for i = 1, nstate do res[i] = flow.stack(finals[i], 1) end
  for k = 1, #g.outputs - nstate do res[#res + 1] = flow.stack(scans[k], 1) end
  return res
end

OPS.Scan = function(ins, n, ctx)
  if ctx.opset < 9 then return scan8(ins, n, ctx) end
  local g = attr(n, 'body')
  local nscan = attr(n, 'num_scan_inputs')
  local ncarry = ins.n - nscan
  local in_axes = attr(n, 'scan_input_axes') or ones(nscan, 0)
  local in_dirs = attr(n, 'scan_input_directions') or ones(nscan, 0)
  local nout = #g.outputs - ncarry
  local out_axes = attr(n, 'scan_output_axes') or ones(nout, 0)
  local out_dirs = attr(n, 'scan_output_directions') or ones(nout, 0)
  local carried = {}
  for i = 1, ncarry do carried[i] = ins[i] end
  local seqs = {}
  local len
  for j = 1, nscan do
    local x = ins[ncarry + j]
    local d = ax(in_axes[j], x:dim())
    seqs[j] = {x = x, d = d, rev = in_dirs[j] == 1}
    len = x:size(d)
  end
  local outs = {}
  for t = 1, len or 0 do
    local args = {}
    for i = 1, ncarry do args[i] = carried[i] end
    for j = 1, nscan do
      local s = seqs[j]
      local pos = s.rev and (len - t + 1) or t
      args[#args + 1] = s.x:select(s.d, pos)
    end
    local out = M.run_sub(ctx, g, args, ctx.env)
    for i = 1, ncarry do carried[i] = out[i] end
    for k = 1, nout do
      outs[k] = outs[k] or {}
      outs[k][t] = out[ncarry + k]
    end
  end
  local res = {}
  for i = 1, ncarry do res[i] = carried[i] end
  for k = 1, nout do
    local list = outs[k] or {}
    if out_dirs[k] == 1 then
      local rev = {}
      for i = #list, 1, -1 do rev[#rev + 1] = list[i] end
      list = rev
    end
    local r = list[1]:dim() + 1
    res[#res + 1] = flow.stack(list, ax(out_axes[k], r))
  end
  return res
end

------------------------------------------------------------------ losses
local function nll(logp, target, weight, ignore, reduction)
  local t = target:to(flow.int64)
  local mask = ignore ~= nil and t:ne(ignore) or nil
  local safe = mask and flow.where(mask, t, flow.zeros_like(t)) or t
  local g = logp:gather(2, (safe + 1):unsqueeze(2)):squeeze(2)
  local w
  if weight ~= nil then
    w = weight:index_select(1, (safe + 1):reshape(-1)):reshape(safe:size():totable())
  else
    w = flow.ones_like(g)
  end
  if mask then w = w * mask:to(w.dtype) end
  local loss = -g * w
  if reduction == 'none' then return loss end
  if reduction == 'sum' then return loss:sum() end
  return loss:sum() / w:sum()
end
OPS.NegativeLogLikelihoodLoss = function(ins, n)
  return {nll(ins[1], ins[2], ins[3], attr(n, 'ignore_index'), attr(n, 'reduction', 'mean'))}
end
OPS.SoftmaxCrossEntropyLoss = function(ins, n)
  local logp = F.log_softmax(ins[1], 2)
  return {nll(logp, ins[2], ins[3], attr(n, 'ignore_index'), attr(n, 'reduction', 'mean')), logp}
end

------------------------------------------------------------------ sampling
-- GridSample for any rank and mode: coordinates per spatial dim, taps
-- gathered from the flattened planes, weights multiplied per dim.
local function grid_sample(x, grid, mode, pad, align)
  local N, C = x:size(1), x:size(2)
  local sp = spatial(x)
  local r = #sp
  local gshape = grid:size():totable()
  local Mo = 1
  for i = 2, #gshape - 1 do Mo = Mo * gshape[i] end
  local g = grid:to(flow.float64):reshape(N, Mo, r)
  local coords = {}
  for k = 1, r do
    local L = sp[k]
    local v = g:select(3, r - k + 1)          -- grid's last entry is the first spatial dim's x
    local c = align and (v + 1) / 2 * (L - 1) or ((v + 1) * L - 1) / 2
    if pad == 'border' then
      c = c:clamp(0, L - 1)
    elseif pad == 'reflection' then
      local lo, hi = align and 0 or -0.5, align and L - 1 or L - 0.5
      local span = hi - lo
      if span <= 0 then c = flow.zeros_like(c) else
        local d = (c - lo):abs()
        local flips = flow.div(d, span, {rounding_mode = 'floor'})
        local extra = d - flips * span
        c = flow.where(flow.remainder(flips, 2):eq(0), extra + lo, hi - extra)
      end
    end
    coords[k] = c
  end
  -- taps per dim: list of {index tensor [N, Mo] (float, may be out of range), weight [N, Mo]}
  local function taps(k)
    local c, L = coords[k], sp[k]
    if mode == 'nearest' then return {{c:round(), nil}} end
    local f = c:floor()
    local t = c - f
    if mode == 'linear' then return {{f, 1 - t}, {f + 1, t}} end
    local A = -0.75
    local function w(d)
      d = d:abs()
      local near = ((d * (A + 2) - (A + 3)) * d * d) + 1
      local far = ((d * A - 5 * A) * d + 8 * A) * d - 4 * A
      return flow.where(d:le(1), near, flow.where(d:lt(2), far, flow.zeros_like(d)))
    end
    local _ = L
    return {{f - 1, w(t + 1)}, {f, w(t)}, {f + 1, w(1 - t)}, {f + 2, w(2 - t)}}
  end
  local per = {}
  for k = 1, r do per[k] = taps(k) end
  local xf = x:reshape(N, C, -1)
  local out = nil
  local function rec(k, lin, weight, valid)
    if k > r then
      local idx = lin:to(flow.int64):unsqueeze(2):expand(N, C, Mo) + 1
      local v = xf:gather(3, idx):to(flow.float64)
      if valid then v = v * valid:to(flow.float64):unsqueeze(2) end
      if weight then v = v * weight:unsqueeze(2) end
      out = out and out + v or v
      return
    end
    local L = sp[k]
    for _, tp in ipairs(per[k]) do
      local i, wt = tp[1], tp[2]
      local ok = i:ge(0):logical_and(i:le(L - 1))
      local ic
      if pad == 'zeros' then
        ic = i:clamp(0, L - 1)
      elseif pad == 'border' then
        ic = i:clamp(0, L - 1)
        ok = nil
      else
        -- reflection of integer taps (cubic), then clamped
        local span = 2 * (L - 1)
        if L == 1 then ic = flow.zeros_like(i) else
          local m = flow.remainder(i:abs(), span)
          ic = flow.where(m:gt(L - 1), span - m, m)
        end
        ok = nil
      end
      local nl = lin and (lin * L + ic) or ic
      local nw = weight and wt and weight * wt or (wt or weight)
      local nv = valid
      if ok then nv = nv and nv:logical_and(ok) or ok end
      rec(k + 1, nl, nw, nv)
    end
  end
  rec(1, nil, nil, nil)
  local oshape = {N, C}
  for i = 2, #gshape - 1 do oshape[#oshape + 1] = gshape[i] end
  return out:reshape(oshape):to(x.dtype)
end
M.grid_sample = grid_sample

OPS.GridSample = function(ins, n, ctx)
  local x, grid = ins[1], ins[2]
  local mode = attr(n, 'mode', ctx.opset >= 20 and 'linear' or 'bilinear')
  mode = ({linear = 'linear', bilinear = 'linear', nearest = 'nearest', cubic = 'cubic', bicubic = 'cubic'})[mode]
         or unsupported("GridSample mode '%s'", tostring(attr(n, 'mode')))
  local pad = attr(n, 'padding_mode', 'zeros')
  if pad ~= 'zeros' and pad ~= 'border' and pad ~= 'reflection' then
    unsupported("GridSample padding_mode '%s'", tostring(pad))
  end
  local align = attr(n, 'align_corners', 0) == 1
  if x:dim() == 4 and mode ~= 'cubic' then
    -- our kernel (differentiable, fast) for the 2-D linear and nearest modes
    return {F.grid_sample(x, grid, {mode = mode == 'linear' and 'bilinear' or 'nearest', padding_mode = pad,
                                    align_corners = align})}
  end
  return {grid_sample(x, grid, mode, pad, align)}
end
OPS.AffineGrid = function(ins, n)
  local theta, size = ins[1], vals(ins[2])
  if #size == 5 then
    -- base grid (x, y, z, 1) over [D, H, W], times theta^T
    local align = attr(n, 'align_corners', 0) == 1
    local function lin(L)
      local t = {}
      for i = 0, L - 1 do
        if align then t[i + 1] = L == 1 and 0 or -1 + 2 * i / (L - 1) else t[i + 1] = (2 * i + 1) / L - 1 end
      end
      return flow.tensor(t, {dtype = theta.dtype})
    end
    local N, D, Hh, W = size[1], size[3], size[4], size[5]
    local xs = lin(W):reshape(1, 1, W):expand(D, Hh, W)
    local ys = lin(Hh):reshape(1, Hh, 1):expand(D, Hh, W)
    local zs = lin(D):reshape(D, 1, 1):expand(D, Hh, W)
    local base = flow.stack({xs, ys, zs, flow.ones(D, Hh, W, {dtype = theta.dtype})}, 4):reshape(1, D * Hh * W, 4)
    local g = flow.matmul(base:expand(N, D * Hh * W, 4), theta:transpose(2, 3))
    return {g:reshape(N, D, Hh, W, 3)}
  end
  if #size ~= 4 then unsupported('AffineGrid for a %d-d size', #size - 2) end
  return {F.affine_grid(theta, size, {align_corners = attr(n, 'align_corners', 0) == 1})}
end

------------------------------------------------------------------ generic pooling
-- Pools with dilations, any pads and ceil_mode by summing shifted strided
-- slices of the padded input: out = reduce over kernel offsets.
function M.window_slices(x, k, s, d, pads, ceil, fill)
  local nsp = x:dim() - 2
  local p = {}
  local sp = spatial(x)
  local outs = {}
  local extra = {}
  for i = 1, nsp do
    local ek = (k[i] - 1) * d[i] + 1
    local len = sp[i] + pads[i] + pads[i + nsp] - ek
    local o = (ceil and math.ceil(len / s[i]) or floor(len / s[i])) + 1
    -- ceil mode: the last window must start inside the input or left pad
    if ceil and (o - 1) * s[i] >= sp[i] + pads[i] then o = o - 1 end
    outs[i] = o
    extra[i] = math.max(0, (o - 1) * s[i] + ek - (sp[i] + pads[i] + pads[i + nsp]))
  end
  for i = nsp, 1, -1 do p[#p + 1] = pads[i]; p[#p + 1] = pads[i + nsp] + extra[i] end
  local xp = F.pad(x, p, {mode = 'constant', value = fill})
  local list = {}
  local function rec(i, y)
    if i > nsp then list[#list + 1] = y return end
    for j = 0, k[i] - 1 do
      local start = j * d[i]
      local idx = {}
      for o = 0, outs[i] - 1 do idx[#idx + 1] = start + o * s[i] + 1 end
      rec(i + 1, y:index_select(i + 2, flow.tensor(idx, {dtype = flow.int64})))
    end
  end
  rec(1, xp)
  return list, extra
end

local function generic_avg(x, k, s, d, pads, ceil, include)
  local nsp = x:dim() - 2
  local list = M.window_slices(x, k, s, d, pads, ceil, 0)
  local total = list[1]
  for i = 2, #list do total = total + list[i] end
  local ones_x = flow.ones_like(x)
  local cnt
  if include then
    -- count_include_pad counts the pads but not the ceil-mode overhang
    local inner = F.pad(ones_x, (function()
      local p = {}
      for i = nsp, 1, -1 do p[#p + 1] = pads[i]; p[#p + 1] = pads[i + nsp] end
      return p
    end)(), {mode = 'constant', value = 1})
    local cl = M.window_slices(inner, k, s, d, ones(2 * nsp, 0), ceil, 0)
    cnt = cl[1]
    for i = 2, #cl do cnt = cnt + cl[i] end
  else
    local cl = M.window_slices(ones_x, k, s, d, pads, ceil, 0)
    cnt = cl[1]
    for i = 2, #cl do cnt = cnt + cl[i] end
  end
  return total / cnt
end
M.generic_avg = generic_avg

OPS.LpPool = one(function(x, n)
  local nsp = x:dim() - 2
  local k = attr(n, 'kernel_shape')
  local s = attr(n, 'strides') or ones(nsp)
  local d = attr(n, 'dilations') or ones(nsp)
  local pads = auto_pads(n, spatial(x), k, s, d)
  local p = attr(n, 'p', 2)
  local list = M.window_slices(x:abs() ^ p, k, s, d, pads, attr(n, 'ceil_mode', 0) == 1, 0)
  local total = list[1]
  for i = 2, #list do total = total + list[i] end
  return total ^ (1 / p)
end)
OPS.GlobalLpPool = one(function(x, n)
  local p = attr(n, 'p', 2)
  local dims = {}
  for i = 3, x:dim() do dims[#dims + 1] = i end
  return (x:abs() ^ p):sum(dims, {keepdim = true}) ^ (1 / p)
end)

------------------------------------------------------------------ quantization
local function qrange(dt)
  if dt == flow.uint8 then return 0, 255 end
  if dt == flow.int8 then return -128, 127 end
  if dt == flow.uint16 then return 0, 65535 end
  if dt == flow.int16 then return -32768, 32767 end
  unsupported('quantization to %s', tostring(dt))
end
-- a per-axis scale/zero point reshaped to broadcast along axis (blocked: repeated)
local function qparam(v, x, n)
  if v:dim() == 0 or v:numel() == 1 then return v:reshape({}) end
  local a = ax(attr(n, 'axis', 1), x:dim())
  local bs = attr(n, 'block_size', 0)
  if bs > 0 then v = v:repeat_interleave(bs, a):narrow(a, 1, x:size(a)) return v end
  local shape = ones(x:dim())
  shape[a] = v:numel()
  return v:reshape(shape)
end
OPS.DequantizeLinear = function(ins, n)
  local x, scale, zp = ins[1], ins[2], ins[3]
  local sc = qparam(scale, x, n)
  local xf = x:to(flow.float32)
  if zp ~= nil then xf = xf - qparam(zp, x, n):to(flow.float32) end
  return {(xf * sc:to(flow.float32)):to(scale.dtype)}
end
OPS.QuantizeLinear = function(ins, n)
  local x, scale, zp = ins[1], ins[2], ins[3]
  local dt = zp and zp.dtype or (n.attrs.output_dtype and onnx_dtype(attr(n, 'output_dtype')) or flow.uint8)
  local lo, hi = qrange(dt)
  local q = (x:to(flow.float32) / qparam(scale, x, n):to(flow.float32)):round()
  if zp ~= nil then q = q + qparam(zp, x, n):to(flow.float32) end
  return {q:clamp(lo, hi):to(dt)}
end
OPS.DynamicQuantizeLinear = one(function(x)
  local lo = math.min(0, vals(x:min())[1])
  local hi = math.max(0, vals(x:max())[1])
  local scale = (hi - lo) / 255
  local zp = scale == 0 and 0 or math.max(0, math.min(255, floor(-lo / scale + 0.5)))
  if scale ~= 0 then
    local r = -lo / scale
    zp = math.max(0, math.min(255, vals(flow.tensor(r, {dtype = flow.float32}):round())[1]))
  end
  local q = scale == 0 and flow.zeros_like(x) or (x / flow.tensor(scale, {dtype = flow.float32})):round()
  q = (q + zp):clamp(0, 255):to(flow.uint8)
  return q, flow.tensor(scale, {dtype = flow.float32}), flow.tensor(zp, {dtype = flow.uint8})
end)

------------------------------------------------------------------ recurrent
local ACT = {
  Sigmoid = function(x) return x:sigmoid() end, Tanh = function(x) return x:tanh() end,
  Relu = function(x) return x:relu() end,
}
local function act(name)
  local f = ACT[name]
  if not f then unsupported('recurrent activation %s', tostring(name)) end
  return f
end

-- Shared driver: cell(x_t, state, dir) -> new state (a list, state[1] = h).
local function recurrent(ins, n, ngates, defaults, cell)
  local x, W, R, B, lens = ins[1], ins[2], ins[3], ins[4], ins[5]
  local layout = attr(n, 'layout', 0)
  if layout == 1 then x = x:transpose(1, 2) end
  local dir = attr(n, 'direction', 'forward')
  local ndir = dir == 'bidirectional' and 2 or 1
  local H = attr(n, 'hidden_size') or R:size(3)
  local seq, batch = x:size(1), x:size(2)
  if lens ~= nil then
    for _, l in ipairs(vals(lens)) do
      if l ~= seq then unsupported('%s with sequence_lens shorter than the sequence', n.op_type) end
    end
  end
  local names = attr(n, 'activations') or {}
  local clip = attr(n, 'clip')
  local Ys, finals = {}, {}
  for d = 1, ndir do
    local acts = {}
    for i = 1, #defaults do acts[i] = act(names[(d - 1) * #defaults + i] or defaults[i]) end
    local w, r = W[d], R[d]
    local wb, rb
    if B ~= nil then
      wb, rb = B[d]:narrow(1, 1, ngates * H), B[d]:narrow(1, ngates * H + 1, ngates * H)
    else
      wb = flow.zeros(ngates * H, {dtype = x.dtype})
      rb = wb
    end
    local state = {}
    local init = {ins[6], ins[7]}
    for k = 1, 2 do
      if init[k] ~= nil then
        local v = init[k]
        if layout == 1 then v = v:transpose(1, 2) end
        state[k] = v[d]
      else
        state[k] = flow.zeros(batch, H, {dtype = x.dtype})
      end
    end
    local P = ins[8] and ins[8][d]
    local reverse = dir == 'reverse' or d == 2
    local ys = {}
    for t = 1, seq do
      local tt = reverse and (seq - t + 1) or t
      local xw = flow.matmul(x[tt], w:t()) + wb
      state = cell(xw, state, r, rb, acts, H, clip, P, n)
      ys[tt] = state[1]
    end
    Ys[d] = flow.stack(ys, 1)                 -- [seq, batch, H]
    finals[d] = state
  end
  local Y = flow.stack(Ys, 2)                 -- [seq, dirs, batch, H]
  local Yh = flow.stack({finals[1][1], finals[2] and finals[2][1]}, 1)
  local out = {Y, Yh}
  if finals[1][2] then out[3] = flow.stack({finals[1][2], finals[2] and finals[2][2]}, 1) end
  if layout == 1 then
    out[1] = Y:permute(3, 1, 2, 4):contiguous()
    out[2] = out[2]:transpose(1, 2):contiguous()
    if out[3] then out[3] = out[3]:transpose(1, 2):contiguous() end
  end
  return out
end

local function clipped(v, clip)
  if clip then return v:clamp(-clip, clip) end
  return v
end

OPS.RNN = function(ins, n)
  return recurrent(ins, n, 1, {'Tanh'}, function(xw, st, r, rb, acts, _, clip)
    return {acts[1](clipped(xw + flow.matmul(st[1], r:t()) + rb, clip))}
  end)
end

OPS.GRU = function(ins, n)
  local lbr = attr(n, 'linear_before_reset', 0) == 1
  return recurrent(ins, n, 3, {'Sigmoid', 'Tanh'}, function(xw, st, r, rb, acts, H, clip)
    local h = st[1]
    local xz, xr, xh = xw:narrow(2, 1, H), xw:narrow(2, H + 1, H), xw:narrow(2, 2 * H + 1, H)
    local rz, rr, rh = r:narrow(1, 1, H), r:narrow(1, H + 1, H), r:narrow(1, 2 * H + 1, H)
    local bz, br, bh = rb:narrow(1, 1, H), rb:narrow(1, H + 1, H), rb:narrow(1, 2 * H + 1, H)
    local z = acts[1](clipped(xz + flow.matmul(h, rz:t()) + bz, clip))
    local rg = acts[1](clipped(xr + flow.matmul(h, rr:t()) + br, clip))
    local hh
    if lbr then hh = acts[2](clipped(xh + rg * (flow.matmul(h, rh:t()) + bh), clip))
    else hh = acts[2](clipped(xh + flow.matmul(rg * h, rh:t()) + bh, clip)) end
    return {(1 - z) * hh + z * h}
  end)
end

OPS.LSTM = function(ins, n)
  local couple = attr(n, 'input_forget', 0) == 1
  return recurrent(ins, n, 4, {'Sigmoid', 'Tanh', 'Tanh'}, function(xw, st, r, rb, acts, H, clip, P)
    local h, c = st[1], st[2]
    local g = xw + flow.matmul(h, r:t()) + rb
    local gi, go, gf, gc = g:narrow(2, 1, H), g:narrow(2, H + 1, H), g:narrow(2, 2 * H + 1, H),
                           g:narrow(2, 3 * H + 1, H)
    if P ~= nil then
      gi = gi + P:narrow(1, 1, H) * c
      gf = gf + P:narrow(1, 2 * H + 1, H) * c
    end
    local i = acts[1](clipped(gi, clip))
    local f = couple and (1 - i) or acts[1](clipped(gf, clip))
    local ct = acts[2](clipped(gc, clip))
    local cn = f * c + i * ct
    if P ~= nil then go = go + P:narrow(1, H + 1, H) * cn end
    local o = acts[1](clipped(go, clip))
    return {o * acts[3](cn), cn}
  end)
end

------------------------------------------------------------------ sequences
-- A sequence value is a Lua table {seq = true, n = k, ...tensors}.
local function seq(list) list.seq = true list.n = #list return list end
M.seq = seq
local function seq_copy(s)
  local t = {}
  for i = 1, s.n do t[i] = s[i] end
  return seq(t)
end
local function seq_pos(p, len, what)
  local i = p and vals(p)[1] or len
  if i < 0 then i = i + len end
  if i < 0 or i > len then fail('%s: position %d out of range for a sequence of %d', what, i, len) end
  return i + 1
end
OPS.SequenceConstruct = function(ins)
  local t = {}
  for i = 1, ins.n do t[i] = ins[i] end
  return {seq(t)}
end
OPS.SequenceEmpty = function() return {seq({})} end
OPS.SequenceLength = function(ins) return {flow.tensor(ins[1].n, {dtype = flow.int64})} end
OPS.SequenceAt = function(ins)
  local s = ins[1]
  return {s[seq_pos(ins[2], s.n - 1, 'SequenceAt')]}
end
OPS.SequenceInsert = function(ins)
  local s = seq_copy(ins[1])
  local pos = ins[3] and seq_pos(ins[3], s.n, 'SequenceInsert') or s.n + 1
  table.insert(s, pos, ins[2])
  s.n = s.n + 1
  return {s}
end
OPS.SequenceErase = function(ins)
  local s = seq_copy(ins[1])
  local pos = ins[2] and seq_pos(ins[2], s.n - 1, 'SequenceErase') or s.n
  table.remove(s, pos)
  s.n = s.n - 1
  return {s}
end
OPS.ConcatFromSequence = function(ins, n)
  local s = ins[1]
  local list = {}
  for i = 1, s.n do list[i] = s[i] end
  local new = attr(n, 'new_axis', 0) == 1
  local r = list[1]:dim() + (new and 1 or 0)
  local a = ax(attr(n, 'axis'), r)
  if new then return {flow.stack(list, a)} end
  return {flow.cat(list, a)}
end
OPS.SplitToSequence = function(ins, n)
  local x, split = ins[1], ins[2]
  local d = ax(attr(n, 'axis', 0), x:dim())
  local keep = attr(n, 'keepdims', 1) == 1
  local out = {}
  if split == nil then
    for i = 1, x:size(d) do
      local v = x:narrow(d, i, 1)
      if not keep then v = v:squeeze(d) end
      out[i] = v:contiguous()
    end
    return {seq(out)}
  end
  local sizes = vals(split)
  if split:dim() == 0 then
    local k, total = sizes[1], x:size(d)
    sizes = {}
    local left = total
    while left > 0 do sizes[#sizes + 1] = math.min(k, left); left = left - k end
  end
  local start = 1
  for i, sz in ipairs(sizes) do
    out[i] = x:narrow(d, start, sz):contiguous()
    start = start + sz
  end
  return {seq(out)}
end
OPS.SequenceMap = function(ins, n, ctx)
  local g = attr(n, 'body')
  local s = ins[1]
  local outs = {}
  for k = 1, #g.outputs do outs[k] = {} end
  for i = 1, s.n do
    local args = {s[i]}
    for j = 2, ins.n do
      local v = ins[j]
      args[j] = (type(v) == 'table' and v.seq) and v[i] or v
    end
    local res = M.run_sub(ctx, g, args, ctx.env)
    for k = 1, #g.outputs do outs[k][i] = res[k] end
  end
  local r = {}
  for k = 1, #g.outputs do r[k] = seq(outs[k]) end
  return r
end

------------------------------------------------------------------ misc
OPS.CenterCropPad = function(ins, n)
  local x, shape = ins[1], vals(ins[2])
  local axes = attr(n, 'axes')
  local r = x:dim()
  local list = {}
  if axes then for i, a in ipairs(axes) do list[i] = ax(a, r) end else for i = 1, r do list[i] = i end end
  local y = x
  for i, d in ipairs(list) do
    local want, have = shape[i], y:size(d)
    if want < have then
      y = y:narrow(d, floor((have - want) / 2) + 1, want)
    elseif want > have then
      local before = floor((want - have) / 2)
      local sh = y:size():totable()
      sh[d] = before
      local a = flow.zeros(sh, {dtype = y.dtype})
      sh[d] = want - have - before
      local b = flow.zeros(sh, {dtype = y.dtype})
      y = flow.cat({a, y, b}, d)
    end
  end
  return {y:contiguous()}
end

OPS.Unique = function(ins, n)
  local x = ins[1]
  local a = attr(n, 'axis')
  local sorted = attr(n, 'sorted', 1) == 1
  if a ~= nil then
    local d = ax(a, x:dim())
    local rows = {}
    local xt = x:transpose(1, d):contiguous()
    local keys, first, inverse, counts, order = {}, {}, {}, {}, {}
    for i = 1, xt:size(1) do
      local row = vals(xt[i]:to(flow.float64))
      local key = table.concat(row, ',')
      rows[i] = row
      if not first[key] then first[key] = i; counts[key] = 0; order[#order + 1] = key end
      counts[key] = counts[key] + 1
      keys[i] = key
    end
    if sorted then
      table.sort(order, function(p, q)
        local rp, rq = rows[first[p]], rows[first[q]]
        for k = 1, #rp do if rp[k] ~= rq[k] then return rp[k] < rq[k] end end
        return false
      end)
    end
    local pos = {}
    for i, key in ipairs(order) do pos[key] = i end
    local idx, cnt = {}, {}
    for i, key in ipairs(order) do idx[i] = first[key]; cnt[i] = counts[key] end
    for i = 1, #keys do inverse[i] = pos[keys[i]] - 1 end
    local y = xt:index_select(1, flow.tensor(idx, {dtype = flow.int64})):transpose(1, d):contiguous()
    local i0 = {}
    for i, v in ipairs(idx) do i0[i] = v - 1 end
    return {y, flow.tensor(i0, {dtype = flow.int64}), flow.tensor(inverse, {dtype = flow.int64}),
            flow.tensor(cnt, {dtype = flow.int64})}
  end
  local v = vals(x)
  local first, counts, order = {}, {}, {}
  for i, e in ipairs(v) do
    if not first[e] then first[e] = i; counts[e] = 0; order[#order + 1] = e end
    counts[e] = counts[e] + 1
  end
  if sorted then table.sort(order) end
  local pos, y, idx, cnt, inv = {}, {}, {}, {}, {}
  for i, e in ipairs(order) do pos[e] = i; y[i] = e; idx[i] = first[e] - 1; cnt[i] = counts[e] end
  for i, e in ipairs(v) do inv[i] = pos[e] - 1 end
  return {flow.tensor(y, {dtype = x.dtype}), flow.tensor(idx, {dtype = flow.int64}),
          flow.tensor(inv, {dtype = flow.int64}), flow.tensor(cnt, {dtype = flow.int64})}
end

OPS.NonMaxSuppression = function(ins, n)
  local boxes, scores = ins[1], ins[2]
  local maxout = ins[3] and vals(ins[3])[1] or 0
  local iou_t = ins[4] and vals(ins[4])[1] or 0
  local score_t = ins[5] and vals(ins[5])[1]
  local center = attr(n, 'center_point_box', 0) == 1
  local function nested(t)   -- [a, b, c] -> Lua tables, through the NaN-safe vals
    local flat, sh, out = vals(t:to(flow.float64)), t:size():totable(), {}
    local k = 0
    for i = 1, sh[1] do
      out[i] = {}
      for j = 1, sh[2] do
        out[i][j] = {}
        for l = 1, sh[3] do k = k + 1; out[i][j][l] = flat[k] end
      end
    end
    return out
  end
  local B, S = nested(boxes), nested(scores)
  local out = {}
  local function corners(b)
    if center then
      return b[1] - b[3] / 2, b[2] - b[4] / 2, b[1] + b[3] / 2, b[2] + b[4] / 2
    end
    return math.min(b[1], b[3]), math.min(b[2], b[4]), math.max(b[1], b[3]), math.max(b[2], b[4])
  end
  local function iou(a, b)
    local ay1, ax1, ay2, ax2 = corners(a)
    local by1, bx1, by2, bx2 = corners(b)
    local ih = math.max(0, math.min(ay2, by2) - math.max(ay1, by1))
    local iw = math.max(0, math.min(ax2, bx2) - math.max(ax1, bx1))
    local inter = ih * iw
    local union = (ay2 - ay1) * (ax2 - ax1) + (by2 - by1) * (bx2 - bx1) - inter
    if union <= 0 then return 0 end
    return inter / union
  end
  for b = 1, #S do
    for c = 1, #S[b] do
      local cand = {}
      for i, sc in ipairs(S[b][c]) do
        if score_t == nil or sc > score_t then cand[#cand + 1] = i end
      end
      table.sort(cand, function(p, q)
        if S[b][c][p] ~= S[b][c][q] then return S[b][c][p] > S[b][c][q] end
        return p < q
      end)
      local kept = {}
      for _, i in ipairs(cand) do
        if #kept >= maxout then break end
        local ok = true
        for _, j in ipairs(kept) do
          if iou(B[b][i], B[b][j]) > iou_t then ok = false break end
        end
        if ok then kept[#kept + 1] = i; out[#out + 1] = {b - 1, c - 1, i - 1} end
      end
    end
  end
  if #out == 0 then return {flow.zeros(0, 3, {dtype = flow.int64})} end
  return {flow.tensor(out, {dtype = flow.int64})}
end


------------------------------------------------------------------ integer / quantized linear algebra
local function zp_sub(x, zp, rows)
  local xf = x:to(flow.float64)
  if zp == nil then return xf end
  local z = zp:to(flow.float64)
  if rows and z:numel() > 1 and z:dim() == 1 then z = z:reshape(-1, 1) end
  return xf - z
end
local function saturate(y, dt)
  local lo, hi = qrange(dt)
  return y:round():clamp(lo, hi):to(dt)
end
OPS.MatMulInteger = function(ins)
  return {flow.matmul(zp_sub(ins[1], ins[3], true), zp_sub(ins[2], ins[4])):to(flow.int32)}
end
OPS.QLinearMatMul = function(ins)
  local a, as, azp, b, bs, bzp, ys, yzp = unpack(ins, 1, 8)
  local A = zp_sub(a, azp, true) * (as:dim() == 1 and as:numel() > 1 and as:reshape(-1, 1) or as):to(flow.float64)
  local Bm = zp_sub(b, bzp) * bs:to(flow.float64)
  local y = flow.matmul(A, Bm) / ys:to(flow.float64)
  return {saturate(y:round() + yzp:to(flow.float64), yzp.dtype)}
end
OPS.ConvInteger = function(ins, n)
  local x = zp_sub(ins[1], ins[3])
  local wz = ins[4]
  local w = ins[2]:to(flow.float64)
  if wz ~= nil then w = w - (wz:numel() > 1 and bshape(w, wz) or wz):to(flow.float64) end
  return {OPS.Conv({x, w, n = 2}, n)[1]:round():to(flow.int32)}
end
OPS.QLinearConv = function(ins, n)
  local x, xs, xzp, w, ws, wzp, ys, yzp, bias = unpack(ins, 1, 9)
  local xf = zp_sub(x, xzp) * xs:to(flow.float64)
  local wf = w:to(flow.float64)
  if wzp ~= nil then wf = wf - (wzp:numel() > 1 and bshape(wf, wzp) or wzp):to(flow.float64) end
  wf = wf * (ws:numel() > 1 and bshape(wf, ws) or ws):to(flow.float64)
  local b = bias and bias:to(flow.float64) * (xs:to(flow.float64) * ws:to(flow.float64)) or nil
  local y = OPS.Conv({xf, wf, b, n = 3}, n)[1] / ys:to(flow.float64)
  return {saturate(y:round() + (yzp and yzp:to(flow.float64) or 0), yzp and yzp.dtype or flow.uint8)}
end

------------------------------------------------------------------ text
-- TfIdfVectorizer over integer tokens (ONNX's reference implementation, Lua
-- side: the pool's n-grams by key, each row scanned once per skip distance;
-- unigrams are counted on the first pass only). Weights are by output index.
local function gram_key(v)
  if type(v) == 'cdata' then return (tostring(v):gsub('U?LL$', '')) end
  return ('%.0f'):format(v)
end
OPS.TfIdfVectorizer = one(function(x, n)
  if n.attrs.pool_strings then unsupported('TfIdfVectorizer over strings (string tensors)') end
  if x.dtype.is_floating_point or x.dtype == flow.bool then
    fail('TfIdfVectorizer: X must hold integer tokens, got %s', x.dtype.name)
  end
  local minn, maxn = attr(n, 'min_gram_length'), attr(n, 'max_gram_length')
  local maxskip, mode = attr(n, 'max_skip_count'), attr(n, 'mode')
  local counts, indexes = attr(n, 'ngram_counts'), attr(n, 'ngram_indexes')
  local gram_pool, weights = attr(n, 'pool_int64s') or {}, attr(n, 'weights')
  if not (minn and maxn and maxskip and mode and counts and indexes) then
    fail('TfIdfVectorizer: needs max_gram_length, min_gram_length, max_skip_count, mode, '
         .. 'ngram_counts and ngram_indexes')
  end
  if mode ~= 'TF' and mode ~= 'IDF' and mode ~= 'TFIDF' then
    fail("TfIdfVectorizer: mode '%s' (TF, IDF or TFIDF)", tostring(mode))
  end
  local outsize = 0
  for _, v in ipairs(indexes) do outsize = math.max(outsize, v + 1) end
  -- n-gram key -> 0-based output index
  local ids, id = {}, 0
  for i = 1, #counts do
    local s, e = counts[i], counts[i + 1] or #gram_pool
    local k = math.floor((e - s) / i)
    if k > 0 and i >= minn and i <= maxn then
      for g = 0, k - 1 do
        local parts = {}
        for j = 1, i do parts[j] = gram_key(gram_pool[s + g * i + j]) end
        if indexes[id + 1] == nil then fail('TfIdfVectorizer: fewer ngram_indexes than n-grams in pool_int64s') end
        ids[table.concat(parts, ',')] = indexes[id + 1]
        id = id + 1
      end
    elseif k > 0 then
      id = id + k
    end
  end
  local r = x:dim()
  if r > 2 then fail('TfIdfVectorizer: X must be [C] or [N, C], got %d dims', r) end
  local nrows, C = r == 2 and x:size(1) or 1, r == 0 and 1 or x:size(r)
  local X = vals(x)
  local out = {}
  for row = 0, nrows - 1 do
    local f = {}
    for i = 1, outsize do f[i] = 0 end
    local tok = {}
    for c = 1, C do tok[c] = gram_key(X[row * C + c]) end
    local start = minn
    for skip = 1, maxskip + 1 do
      for s = 1, C do
        if (s - 1) + skip * (start - 1) >= C then break end
        local parts, item = {}, s
        for size = 1, maxn do
          if item > C then break end
          parts[size] = tok[item]
          if size >= start then
            local at = ids[table.concat(parts, ',', 1, size)]
            if at then f[at + 1] = f[at + 1] + 1 end
          end
          item = item + skip
        end
      end
      if start == 1 then
        start = 2
        if start > maxn then break end
      end
    end
    for i = 1, outsize do
      local v = f[i]
      if mode == 'IDF' then v = v > 0 and (weights and weights[i] or 1) or 0
      elseif mode == 'TFIDF' and weights then v = weights[i] * v end
      out[#out + 1] = v
    end
  end
  local y = flow.tensor(out, {dtype = flow.float32})
  return r == 2 and y:reshape(nrows, outsize) or y
end)

------------------------------------------------------------------ audio
-- MelWeightMatrix as ONNX's reference: the band edges in mel are float32
-- arithmetic on the float32 inputs, the bins float64, floored to integers.
OPS.MelWeightMatrix = function(ins, n)
  for i = 1, 5 do
    if ins[i] == nil or ins[i]:numel() ~= 1 then fail('MelWeightMatrix: input %d must be a scalar', i) end
  end
  local mels, dft, rate = vals(ins[1])[1], vals(ins[2])[1], vals(ins[3])[1]
  if mels < 1 or dft < 1 or rate < 1 then
    fail('MelWeightMatrix: num_mel_bins %s, dft_length %s and sample_rate %s must be positive',
         tostring(mels), tostring(dft), tostring(rate))
  end
  local ln10 = math.log(10)
  local function mel(hz)   -- float32 throughout, as numpy on float32 scalars
    local t = (hz:to(flow.float32):reshape({}) / 700):log1p()
    return t * 2595 / flow.full({}, ln10, {dtype = flow.float32})
  end
  local lo, hi = mel(ins[4]), mel(ins[5])
  local step = (hi - lo) / (mels + 2)
  local bins = {}
  local s64, l64 = step:to(flow.float64):item(), lo:to(flow.float64):item()
  for i = 0, mels + 1 do
    local f = 700 * (math.exp((i * s64 + l64) / 2595 * ln10) - 1)
    bins[i] = math.floor((dft + 1) * f / rate)
  end
  local nspec = math.floor(dft / 2) + 1
  local w = {}
  for j = 1, nspec * mels do w[j] = 0 end
  local function set(j, i, v)
    if j < 0 or j >= nspec then
      fail('MelWeightMatrix: frequency bin %d outside the %d spectrogram bins (upper_edge_hertz above '
           .. 'sample_rate / 2?)', j, nspec)
    end
    w[j * mels + i + 1] = v
  end
  for i = 0, mels - 1 do
    local l, c, h = bins[i], bins[i + 1], bins[i + 2]
    if c == l then set(c, i, 1)
    else for j = l, c do set(j, i, (j - l) / (c - l)) end end
    if h > c then for j = c, h - 1 do set(j, i, (h - j) / (h - c)) end end
  end
  local dt = n.attrs.output_datatype and onnx_dtype(attr(n, 'output_datatype'), 'MelWeightMatrix output')
             or flow.float32
  return {flow.tensor(w, {dtype = flow.float64}):reshape(nspec, mels):to(dt)}
end

------------------------------------------------------------------ images
-- ImageDecoder: PNG and JPEG through the core's decoders (libpng,
-- libjpeg-turbo), binary PPM/PGM (P6, P5) and uncompressed 24-bit BMP read
-- here; all to uint8 [H, W, C]. Grayscale is Pillow's convert('L') (ITU-R
-- 601-2 in 16-bit fixed point), which ONNX's reference uses.
local ffi = require 'ffi'
local MAX_SIDE = 32768

-- [H, W, 3] RGB from a binary PNM (P6) or [H, W, 1] from P5, at byte pointer p of n bytes
local function decode_pnm(p, n)
  local pos, tok = 2, {}
  while #tok < 3 do
    while pos < n and (p[pos] == 32 or (p[pos] >= 9 and p[pos] <= 13) or p[pos] == 35) do
      if p[pos] == 35 then while pos < n and p[pos] ~= 10 do pos = pos + 1 end end
      pos = pos + 1
    end
    local v, start = 0, pos
    while pos < n and p[pos] >= 48 and p[pos] <= 57 do v = v * 10 + p[pos] - 48; pos = pos + 1 end
    if pos == start or v > 1e9 then fail('ImageDecoder: a corrupt PNM header') end
    tok[#tok + 1] = v
  end
  pos = pos + 1   -- one whitespace byte before the samples
  local w, h, maxval = tok[1], tok[2], tok[3]
  local c = p[1] == 54 and 3 or 1
  if maxval > 255 then unsupported('ImageDecoder: PNM with 16-bit samples (maxval %d)', maxval) end
  if w < 1 or h < 1 or w > MAX_SIDE or h > MAX_SIDE or pos + w * h * c > n then
    fail('ImageDecoder: PNM of %dx%d does not fit its %d bytes', w, h, n)
  end
  return flow.from_blob(p + pos, {h, w, c}, {dtype = flow.uint8}):clone()
end

local function le(p, at, k)
  local v = 0
  for i = k - 1, 0, -1 do v = v * 256 + p[at + i] end
  return v
end
-- [H, W, 3] RGB from an uncompressed 24-bit BMP
local function decode_bmp(p, n)
  if n < 54 then fail('ImageDecoder: a BMP of %d bytes (shorter than its headers)', n) end
  local off, hsize = le(p, 10, 4), le(p, 14, 4)
  local w, h = le(p, 18, 4), le(p, 22, 4)
  if h >= 2 ^ 31 then h = h - 2 ^ 32 end
  local bpp, comp = le(p, 28, 2), le(p, 30, 4)
  if hsize < 40 or bpp ~= 24 or comp ~= 0 then
    unsupported('ImageDecoder: BMP with %d bits a pixel, compression %d (24-bit uncompressed only)', bpp, comp)
  end
  local top_down = h < 0
  h = math.abs(h)
  local stride = math.floor((w * 3 + 3) / 4) * 4
  if w < 1 or h < 1 or w > MAX_SIDE or h > MAX_SIDE or off + stride * h > n then
    fail('ImageDecoder: BMP of %dx%d does not fit its %d bytes', w, h, n)
  end
  local rows = flow.from_blob(p + off, {h, stride}, {dtype = flow.uint8}):clone()
  local img = rows:narrow(2, 1, w * 3):contiguous():view(h, w, 3):flip(3)   -- BGR -> RGB
  if not top_down then img = img:flip(1) end
  return img:contiguous()
end

OPS.ImageDecoder = one(function(x, n)
  local fmt = attr(n, 'pixel_format', 'RGB')
  if fmt ~= 'RGB' and fmt ~= 'BGR' and fmt ~= 'Grayscale' then
    fail("ImageDecoder: pixel_format '%s' (RGB, BGR or Grayscale)", tostring(fmt))
  end
  if x.dtype ~= flow.uint8 or x:dim() ~= 1 then
    fail('ImageDecoder: encoded_stream must be a 1-d uint8 tensor, got %s %s', x.dtype.name,
         tostring(x:size()))
  end
  local bytes = x:contiguous()
  local n0 = bytes:numel()
  local p = ffi.cast('const uint8_t *', bytes:data_ptr())
  local function at(i) return i < n0 and p[i] or -1 end
  local img
  if (at(0) == 0x89 and at(1) == 0x50 and at(2) == 0x4E and at(3) == 0x47) or (at(0) == 0xFF and at(1) == 0xD8) then
    local core = require 'oneflow._C'
    if core.C.of_image_decode(p, n0, core.out1) ~= 0 then
      fail('ImageDecoder: %s', ffi.string(core.C.of_last_error()))
    end
    img = core.wrap(core.out1[0])
  elseif at(0) == 0x50 and (at(1) == 0x36 or at(1) == 0x35) then   -- 'P6' / 'P5'
    img = decode_pnm(p, n0)
  elseif at(0) == 0x42 and at(1) == 0x4D then   -- 'BM'
    img = decode_bmp(p, n0)
  else
    unsupported('ImageDecoder: only PNG, JPEG, binary PNM and 24-bit BMP streams are decoded '
                .. '(no TIFF, WebP, JPEG 2000)')
  end
  local _ = bytes   -- the stream stays alive over the reads
  if img:dim() == 2 then img = img:unsqueeze(3) end
  local c = img:size(3)
  if fmt == 'Grayscale' then
    if c == 1 then return img end
    if c ~= 3 then unsupported('ImageDecoder: Grayscale from %d channels', c) end
    local w = img:to(flow.int64)
    local l = w:select(3, 1) * 19595 + w:select(3, 2) * 38470 + w:select(3, 3) * 7471 + 32768
    return flow.floor_divide(l, 65536):to(flow.uint8):unsqueeze(3)
  end
  if fmt == 'BGR' and c >= 3 then return img:flip(3):contiguous() end
  return img
end)

OPS.MaxUnpool = function(ins, n)
  local x, idx, shape = ins[1], ins[2], ins[3]
  local nsp = x:dim() - 2
  local k = attr(n, 'kernel_shape')
  local st = attr(n, 'strides') or ones(nsp)
  local pads = attr(n, 'pads') or ones(2 * nsp, 0)
  -- the indices address the inferred shape; output_shape only pads it (bottom / right)
  local inf = {x:size(1), x:size(2)}
  for i = 1, nsp do inf[i + 2] = (x:size(i + 2) - 1) * st[i] + k[i] - pads[i] - pads[i + nsp] end
  local total = 1
  for _, v in ipairs(inf) do total = total * v end
  local y = flow.zeros(total, {dtype = x.dtype}):scatter(1, idx:reshape(-1):to(flow.int64) + 1, x:reshape(-1))
  y = y:reshape(inf)
  if shape ~= nil then
    local out = vals(shape)
    local p = {}
    for i = #out, 3, -1 do p[#p + 1] = 0; p[#p + 1] = out[i] - inf[i] end
    y = F.pad(y, p, {mode = 'constant', value = 0})
  end
  return {y}
end

OPS.Col2Im = function(ins, n)
  local x, img, block = ins[1], vals(ins[2]), vals(ins[3])
  local nd = #img
  if #block ~= nd then fail('Col2Im: image_shape has %d dims, block_shape %d', nd, #block) end
  local pads = attr(n, 'pads') or ones(2 * nd, 0)
  local dil, st = attr(n, 'dilations') or ones(nd), attr(n, 'strides') or ones(nd)
  if nd == 2 and pads[1] == pads[3] and pads[2] == pads[4] then
    return {F.fold(x, img, block, {dilation = dil, padding = {pads[1], pads[2]}, stride = st})}
  end
  -- any rank, any pads: each column entry added at its place in the padded
  -- image (scatter_add over flat positions), then the pads cut off
  local P, nb, K, L = {}, {}, 1, 1
  for i = 1, nd do
    P[i] = img[i] + pads[i] + pads[nd + i]
    nb[i] = floor((P[i] - dil[i] * (block[i] - 1) - 1) / st[i]) + 1
    if nb[i] < 1 then fail('Col2Im: block %d does not fit the padded image along dim %d', block[i], i) end
    K, L = K * block[i], L * nb[i]
  end
  if x:dim() ~= 3 or x:size(3) ~= L or x:size(2) % K ~= 0 then
    fail('Col2Im: input [N, C * %d, %d] expected for these shapes, got %s', K, L, tostring(x:size()))
  end
  if K * L > 2 ^ 24 then unsupported('Col2Im with %d block positions', K * L) end
  local idx, cnt = {}, 0
  local kpos, lpos = ones(nd, 0), ones(nd, 0)
  for _ = 1, K do
    for i = 1, nd do lpos[i] = 0 end
    for _ = 1, L do
      local flat = 0
      for i = 1, nd do flat = flat * P[i] + lpos[i] * st[i] + kpos[i] * dil[i] end
      cnt = cnt + 1
      idx[cnt] = flat + 1
      for i = nd, 1, -1 do   -- next block position, last dim fastest
        lpos[i] = lpos[i] + 1
        if lpos[i] < nb[i] then break end
        lpos[i] = 0
      end
    end
    for i = nd, 1, -1 do
      kpos[i] = kpos[i] + 1
      if kpos[i] < block[i] then break end
      kpos[i] = 0
    end
  end
  local N, C = x:size(1), x:size(2) / K
  local total = 1
  for i = 1, nd do total = total * P[i] end
  local src = x:reshape(N, C, K * L)
  local where = flow.tensor(idx, {dtype = flow.int64}):reshape(1, 1, K * L):expand(N, C, K * L)
  local out = flow.zeros({N, C, total}, {dtype = x.dtype}):scatter_add(3, where, src)
  local shape = {N, C}
  for i = 1, nd do shape[2 + i] = P[i] end
  out = out:reshape(shape)
  for i = 1, nd do out = out:narrow(2 + i, pads[i] + 1, img[i]) end
  return {out:contiguous()}
end

-- DFT as products with cos / sin matrices (float64), input [..., N, 1 | 2]
OPS.DFT = function(ins, n, ctx)
  local x = ins[1]
  local r = x:dim()
  local a = ctx.opset >= 20 and (ins[3] and vals(ins[3])[1] or -2) or attr(n, 'axis', 1)
  local d = ax(a, r)
  if d == r then fail('DFT: axis %d is the real/imaginary dim', a) end
  local inverse = attr(n, 'inverse', 0) == 1
  local onesided = attr(n, 'onesided', 0) == 1
  local xf = x:to(flow.float64)
  local re, im = xf:select(r, 1), x:size(r) == 2 and xf:select(r, 2) or nil
  local N = x:size(d)
  local L = ins[2] and vals(ins[2])[1] or N
  local function fit(v)
    if v == nil then return nil end
    if L < N then return v:narrow(d, 1, L) end
    if L > N then
      local sh = v:size():totable()
      sh[d] = L - N
      return flow.cat({v, flow.zeros(sh, {dtype = v.dtype})}, d)
    end
    return v
  end
  re, im = fit(re), fit(im)
  local K = onesided and floor(L / 2) + 1 or L
  local c, s = {}, {}
  local sign = inverse and 1 or -1
  for k = 0, K - 1 do
    c[k + 1], s[k + 1] = {}, {}
    for t = 0, L - 1 do
      local ang = 2 * math.pi * k * t / L
      c[k + 1][t + 1], s[k + 1][t + 1] = math.cos(ang), sign * math.sin(ang)
    end
  end
  local Cm, Sm = flow.tensor(c, {dtype = flow.float64}), flow.tensor(s, {dtype = flow.float64})
  local function apply(m, v) return flow.matmul(v:transpose(d, r - 1), m:t()):transpose(d, r - 1) end
  local out_re = apply(Cm, re)
  local out_im = apply(Sm, re)
  if im then
    out_re = out_re - apply(Sm, im)
    out_im = out_im + apply(Cm, im)
  end
  if inverse then out_re, out_im = out_re / L, out_im / L end
  return {flow.stack({out_re, out_im}, r):to(x.dtype)}
end

------------------------------------------------------------------ optionals
-- An optional value is {opt = true, value = v} (value nil: empty).
local function opt(v) return {opt = true, value = v} end
M.opt = opt
local function is_opt(v) return type(v) == 'table' and v.opt == true end
OPS.Optional = function(ins) return {opt(ins[1])} end
OPS.OptionalHasElement = function(ins)
  local v = ins[1]
  local has = v ~= nil and (not is_opt(v) or v.value ~= nil)
  return {flow.tensor(has)}
end
OPS.OptionalGetElement = function(ins)
  local v = ins[1]
  if is_opt(v) then
    if v.value == nil then fail('OptionalGetElement of an empty optional') end
    return {v.value}
  end
  return {v}
end

OPS.STFT = function(ins, n)
  local x, step, win, flen = ins[1], vals(ins[2])[1], ins[3], ins[4] and vals(ins[4])[1]
  flen = flen or win:size(1)
  local len = x:size(2)
  local frames = floor((len - flen) / step) + 1
  local list = {}
  for f = 0, frames - 1 do
    local fr = x:narrow(2, f * step + 1, flen)
    if win ~= nil then fr = fr * win:reshape(1, flen, 1):to(fr.dtype) end
    list[#list + 1] = fr
  end
  local stacked = flow.stack(list, 2)                  -- [batch, frames, flen, 1|2]
  local node = {attrs = {onesided = {type = 2, i = attr(n, 'onesided', 1)}, axis = {type = 2, i = 2}}}
  return OPS.DFT({stacked, n = 1}, node, {opset = 17})
end

-- RoiAlign (opset 10/16) as ONNX Runtime computes it: bilinear samples on a
-- grid per bin, averaged (avg) or the largest weighted corner term (max).
-- Plain Lua loops over the input's values: meant for detection heads, not bulk.
OPS.RoiAlign = function(ins, n, ctx)
  local x, rois, bidx = ins[1], ins[2], ins[3]
  local mode = attr(n, 'mode', 'avg')
  local oh, ow = attr(n, 'output_height', 1), attr(n, 'output_width', 1)
  local sr, scale = attr(n, 'sampling_ratio', 0), attr(n, 'spatial_scale', 1.0)
  local half = attr(n, 'coordinate_transformation_mode', ctx.opset >= 16 and 'half_pixel' or 'output_half_pixel')
               == 'half_pixel'
  local N, C, H, W = unpack(x:size():totable())
  local X = vals(x:to(flow.float64))
  local R, flat = {}, vals(rois:to(flow.float64))
  for r = 1, rois:size(1) do R[r] = {flat[4 * r - 3], flat[4 * r - 2], flat[4 * r - 1], flat[4 * r]} end
  local B = vals(bidx)
  local out = {}
  local function at(b, c, y, xx) return X[((b * C + c) * H + y) * W + xx + 1] end
  for r = 1, #R do
    local b = B[r]
    if b < 0 or b >= N then fail('RoiAlign: batch index %d out of range for %d images', b, N) end
    local off = half and 0.5 or 0
    local sw, sh = R[r][1] * scale - off, R[r][2] * scale - off
    local rw, rh = R[r][3] * scale - off - sw, R[r][4] * scale - off - sh
    if not half then rw, rh = math.max(rw, 1), math.max(rh, 1) end
    local bh, bw = rh / oh, rw / ow
    local gh = sr > 0 and sr or math.ceil(rh / oh)
    local gw = sr > 0 and sr or math.ceil(rw / ow)
    local count = math.max(gh * gw, 1)
    for c = 0, C - 1 do
      for ph = 0, oh - 1 do
        for pw = 0, ow - 1 do
          local acc = mode == 'max' and -huge or 0
          local any = false
          for iy = 0, gh - 1 do
            local y = sh + ph * bh + (iy + 0.5) * bh / gh
            for ix = 0, gw - 1 do
              local xx = sw + pw * bw + (ix + 0.5) * bw / gw
              if not (y < -1 or y > H or xx < -1 or xx > W) then
                local yy, xq = math.max(y, 0), math.max(xx, 0)
                local yl, xl = floor(yy), floor(xq)
                local yh, xh
                if yl >= H - 1 then yl, yh, yy = H - 1, H - 1, H - 1 else yh = yl + 1 end
                if xl >= W - 1 then xl, xh, xq = W - 1, W - 1, W - 1 else xh = xl + 1 end
                local ly, lx = yy - yl, xq - xl
                local hy, hx = 1 - ly, 1 - lx
                local t = {hy * hx * at(b, c, yl, xl), hy * lx * at(b, c, yl, xh),
                           ly * hx * at(b, c, yh, xl), ly * lx * at(b, c, yh, xh)}
                if mode == 'max' then
                  for k = 1, 4 do acc = math.max(acc, t[k]) end
                  any = true
                else
                  acc = acc + t[1] + t[2] + t[3] + t[4]
                end
              elseif mode == 'max' then
                acc = math.max(acc, 0)
                any = true
              end
            end
          end
          if mode == 'max' then out[#out + 1] = any and acc or 0 else out[#out + 1] = acc / count end
        end
      end
    end
  end
  if #R == 0 then return {flow.zeros(0, C, oh, ow, {dtype = x.dtype})} end
  return {flow.tensor(out, {dtype = flow.float64}):reshape(#R, C, oh, ow):to(x.dtype)}
end

-- DeformConv: each kernel tap samples x bilinearly at its offset position
-- (zero outside), scaled by the mask, then one matmul per group.
OPS.DeformConv = function(ins, n)
  local x, w, off, b, mask = ins[1], ins[2], ins[3], ins[4], ins[5]
  if x:dim() ~= 4 then unsupported('DeformConv on a %d-d input (2-d only)', x:dim()) end
  local N, C, H, W = unpack(x:size():totable())
  local oC, _, kh, kw = unpack(w:size():totable())
  local k = attr(n, 'kernel_shape') or {kh, kw}
  kh, kw = k[1], k[2]
  local st = attr(n, 'strides') or {1, 1}
  local dl = attr(n, 'dilations') or {1, 1}
  local pads = attr(n, 'pads') or {0, 0, 0, 0}
  local group, og = attr(n, 'group', 1), attr(n, 'offset_group', 1)
  local oH = floor((H + pads[1] + pads[3] - ((kh - 1) * dl[1] + 1)) / st[1]) + 1
  local oW = floor((W + pads[2] + pads[4] - ((kw - 1) * dl[2] + 1)) / st[2]) + 1
  local K, L, Cg = kh * kw, oH * oW, C / og
  local xf = x:to(flow.float64):reshape(N, og, Cg, H * W)
  local offs = off:to(flow.float64):reshape(N, og, K, 2, L)
  local msk = mask and mask:to(flow.float64):reshape(N, og, K, L) or nil
  local base_y = (flow.arange(0, oH, {dtype = flow.float64}) * st[1] - pads[1]):reshape(oH, 1):expand(oH, oW):reshape(L)
  local base_x = (flow.arange(0, oW, {dtype = flow.float64}) * st[2] - pads[2]):reshape(1, oW):expand(oH, oW):reshape(L)
  local cols = {}
  for t = 0, K - 1 do
    local i, j = floor(t / kw), t % kw
    local y = base_y + i * dl[1] + offs:select(4, 1):select(3, t + 1)     -- [N, og, L]
    local xx = base_x + j * dl[2] + offs:select(4, 2):select(3, t + 1)
    local y0, x0 = y:floor(), xx:floor()
    local acc = nil
    for _, c in ipairs({{0, 0}, {0, 1}, {1, 0}, {1, 1}}) do
      local yi, xi = y0 + c[1], x0 + c[2]
      local wy = c[1] == 1 and (y - y0) or (1 - (y - y0))
      local wx = c[2] == 1 and (xx - x0) or (1 - (xx - x0))
      local ok = yi:ge(0):logical_and(yi:le(H - 1)):logical_and(xi:ge(0)):logical_and(xi:le(W - 1))
      local lin = (yi:clamp(0, H - 1) * W + xi:clamp(0, W - 1)):to(flow.int64) + 1
      local v = xf:gather(4, lin:unsqueeze(3):expand(N, og, Cg, L))
      local wgt = (wy * wx * ok:to(flow.float64)):unsqueeze(3)
      v = v * wgt
      acc = acc and acc + v or v
    end
    if msk then acc = acc * msk:select(3, t + 1):unsqueeze(3) end
    cols[t + 1] = acc:reshape(N, C, L)
  end
  local col = flow.stack(cols, 3)                                  -- [N, C, K, L]
  local cg = C / group
  local wf = w:to(flow.float64):reshape(group, oC / group, cg * K)
  local outs = {}
  for g = 1, group do
    local cgcol = col:narrow(2, (g - 1) * cg + 1, cg):reshape(N, cg * K, L)
    outs[g] = flow.matmul(wf[g], cgcol)                             -- [N, oC/g, L]
  end
  local y = flow.cat(outs, 2):reshape(N, oC, oH, oW)
  if b ~= nil then y = y + b:to(flow.float64):reshape(1, oC, 1, 1) end
  return {y:to(x.dtype)}
end

------------------------------------------------------------------ shape values
-- Lua values of small integer results computed from known inputs (shape
-- arithmetic: Shape -> Gather -> Unsqueeze -> Concat -> Reshape), so that
-- nn.Graph can trace models exported with dynamic shapes. PROP[op](vs, node,
-- ins, outs) gets the inputs' values (flat lists) and returns the first
-- output's values, or nil where it does not apply; import.run_graph calls it
-- after the op ran, and only keeps lists as long as the output.
local PROP = {}
M.PROP = PROP
local function same(vs) return vs[1] end
for _, op in ipairs({'Identity', 'Unsqueeze', 'Squeeze', 'Reshape', 'Flatten'}) do PROP[op] = same end
PROP.Cast = function(vs, n)
  local to = attr(n, 'to')
  local out = {}
  for i, v in ipairs(vs[1]) do
    if to == 9 then out[i] = v ~= 0 and 1 or 0
    elseif to == 1 or to == 10 or to == 11 or to == 16 then out[i] = v
    else out[i] = v >= 0 and floor(v) or math.ceil(v) end
  end
  return out
end
PROP.Gather = function(vs, n, ins)
  if ins[1]:dim() ~= 1 or attr(n, 'axis', 0) ~= 0 then return nil end
  local data, out = vs[1], {}
  for i, k in ipairs(vs[2]) do
    if k < 0 then k = k + #data end
    if data[k + 1] == nil then return nil end
    out[i] = data[k + 1]
  end
  return out
end
PROP.Concat = function(vs, _, ins)
  local out = {}
  for i = 1, ins.n do
    if ins[i] ~= nil then
      if ins[i]:dim() > 1 then return nil end
      for _, v in ipairs(vs[i]) do out[#out + 1] = v end
    end
  end
  return out
end
PROP.Slice = function(vs, _, ins, _, ctx)
  if ins[1]:dim() ~= 1 or ctx.opset < 10 then return nil end
  local data = vs[1]
  local st, en, stp = vs[2][1], vs[3][1], vs[5] and vs[5][1] or 1
  if vs[4] and vs[4][1] ~= 0 and vs[4][1] ~= -1 then return nil end
  local dim = #data
  if st < 0 then st = st + dim end
  if en < 0 then en = en + dim end
  local out = {}
  if stp > 0 then
    st, en = math.max(0, math.min(st, dim)), math.max(0, math.min(en, dim))
    for k = st, en - 1, stp do out[#out + 1] = data[k + 1] end
  else
    st, en = math.max(-1, math.min(st, dim - 1)), math.max(-1, math.min(en, dim - 1))
    for k = st, en + 1, stp do out[#out + 1] = data[k + 1] end
  end
  return out
end
local function elementwise(fn)
  return function(vs)
    local a, b = vs[1], vs[2]
    local len = math.max(#a, #b)
    if not ((#a == len or #a == 1) and (#b == len or #b == 1)) then return nil end
    local out = {}
    for i = 1, len do
      local r = fn(a[#a == 1 and 1 or i], b[#b == 1 and 1 or i])
      if r == nil then return nil end
      out[i] = r
    end
    return out
  end
end
PROP.Add = elementwise(function(a, b) return a + b end)
PROP.Sub = elementwise(function(a, b) return a - b end)
PROP.Mul = elementwise(function(a, b) return a * b end)
PROP.Div = elementwise(function(a, b)
  if b == 0 then return nil end
  local q = a / b
  return q >= 0 and floor(q) or math.ceil(q)
end)
-- ONNX Mod on integers: fmod = 0 takes the divisor's sign (Lua's %), 1 the
-- dividend's (C's fmod); PyTorch 2.x's exporter computes slice ends with it
PROP.Mod = function(vs, n)
  local c = attr(n, 'fmod', 0) == 1
  return elementwise(function(a, b)
    if b == 0 then return nil end
    return c and math.fmod(a, b) or a % b
  end)(vs)
end
PROP.Equal = elementwise(function(a, b) return a == b and 1 or 0 end)
PROP.Less = elementwise(function(a, b) return a < b and 1 or 0 end)
PROP.Greater = elementwise(function(a, b) return a > b and 1 or 0 end)
PROP.Max = elementwise(math.max)
PROP.Min = elementwise(math.min)
PROP.Where = function(vs)
  local c, a, b = vs[1], vs[2], vs[3]
  local len = math.max(#c, #a, #b)
  for _, l in ipairs({#c, #a, #b}) do if l ~= len and l ~= 1 then return nil end end
  local out = {}
  for i = 1, len do
    local ci = c[#c == 1 and 1 or i]
    out[i] = ci ~= 0 and a[#a == 1 and 1 or i] or b[#b == 1 and 1 or i]
  end
  return out
end
PROP.ConstantOfShape = function(_, n, _, outs)
  local v = attr(n, 'value')
  local fill = v and vals(v)[1] or 0
  local out = {}
  for i = 1, outs[1]:numel() do out[i] = fill end
  return out
end
PROP.Range = function(vs)
  local s0, l, d = vs[1][1], vs[2][1], vs[3][1]
  if d == 0 then return nil end
  local out = {}
  local count = math.max(math.ceil((l - s0) / d), 0)
  if count > 4096 then return nil end
  for i = 0, count - 1 do out[#out + 1] = s0 + i * d end
  return out
end

return M
