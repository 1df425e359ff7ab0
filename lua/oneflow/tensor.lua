-- oneflow.tensor: the Tensor type. A Lua tensor *is* the C handle
-- (`of_tensor*` cdata with a metatype), so calling an op costs one FFI call
-- plus two table stores for the handle's slot (see oneflow._C).
local ffi = require 'ffi'
local core = require 'oneflow._C'
local types = require 'oneflow.types'
local A = require 'oneflow._args'

local C, wrap, raise = core.C, core.wrap, core.raise
local out1 = core.out1

local T = {}
local methods, getters = {}, {}
T.methods, T.getters = methods, getters
T.flow = {}   -- functions exported as flow.<name>

-- The flow.<name> functions of T.def whose first parameter is the input
-- tensor (named x, input or self) check it before their body hands `x.p`
-- to the C library: a table or a string there would reach C as NULL.
local guards = setmetatable({}, {__mode = 'k'})
local FIRST_TENSOR = {x = true, input = true, self = true}
local NUMBER_FIRST = {xlogy = true, xlog1py = true, min = true, max = true}
local guarded

--- Registers `fn` as tensor method and/or flow function.
function T.def(name, fn, where)
  where = where or 'both'
  if where ~= 'func' then methods[name] = fn end
  if where ~= 'method' then T.flow[name] = guarded(name, fn) end
  return fn
end
local def = T.def

--- v as a tensor for an operation with `like`: a number becomes a 0-d
-- tensor of like's dtype (the default float dtype for a fraction and an
-- integral like) on like's device.
function T.as_tensor_like(v, like)
  if T.is_tensor(v) then return v end
  if type(v) == 'boolean' then v = v and 1 or 0 end
  if type(v) ~= 'number' then
    A.fail(('expected a tensor or a number as operand, got %s'):format(A.describe(v)))
  end
  local dt = like.dtype
  if not dt.is_floating_point and v ~= math.floor(v) then dt = T.get_default_dtype() end
  return T.flow.tensor(v, {dtype = dt, device = like.device})
end

--- Zeros of the given shape with like's dtype and device.
function T.zeros_of(shape, like)
  return T.flow.zeros(shape, {dtype = like.dtype, device = like.device})
end

--- SBP signatures of an op for global tensors (see oneflow.distributed.rules):
-- declared beside the op's binding, read when the first global tensor is made.
T.sbp_rules = {}
function T.sbp(names, rule)
  if type(names) == 'string' then names = {names} end
  for _, n in ipairs(names) do T.sbp_rules[n] = rule end
end

--- The same for a function that is not a tensor method or flow.<name>
-- (nn.functional's conv2d, batch_norm, ...): returns fn wrapped so that
-- calls with global arguments (also inside option tables) go through the
-- SBP dispatch; until the first global tensor exists the wrapper only
-- checks one upvalue.
T.sbp_fn_rules = {}
T.global_call = nil   -- set by oneflow.distributed.global when installed
function T.sbp_fn(name, rule, fn)
  T.sbp_fn_rules[name] = rule
  return function(...)
    local call = T.global_call
    if call then return call(name, rule, fn, ...) end
    return fn(...)
  end
end

local Handle = core.Handle
--- flow.is_tensor(v): true when v is a Tensor.
function T.is_tensor(x) return type(x) == 'cdata' and ffi.istype(Handle, x) end
local is_tensor = T.is_tensor

-- fn itself, or for a function whose first parameter is its input tensor a
-- wrapper that raises "abs: argument 1 (input) must be a tensor, got table"
-- at the user's line for nil, a boolean, a number, a string, a function or
-- a table other than a global or quantized tensor (cdata pass on: the body
-- says what it makes of them). NUMBER_FIRST: the functions that take a
-- number as first argument (flow.xlogy(2, y), flow.max(2, y)).
local guard_of = setmetatable({}, {__mode = 'k'})
function guarded(name, fn)
  if guards[fn] or type(fn) ~= 'function' then return fn end
  -- one wrapper per function, so aliases stay equal (flow.moveaxis == flow.movedim)
  if guard_of[fn] then return guard_of[fn] end
  local info = debug.getinfo(fn, 'u')
  local first = info and info.nparams and info.nparams > 0 and debug.getlocal(fn, 1)
  if not FIRST_TENSOR[first] then return fn end
  local g = function(x, ...)
    local t = type(x)
    if t ~= 'cdata' and (t ~= 'number' or NUMBER_FIRST[name] == nil)
       and (t ~= 'table' or A.describe(x) == 'table') then
      A.check_tensor(name, x, 'input', 1)
    end
    return fn(x, ...)
  end
  guards[g], guard_of[fn] = fn, g
  return g
end

--- The function a flow.<name> input check wraps (fn itself when it is none):
-- help() shows its parameters.
function T.unguard(fn) return guards[fn] or fn end

--- Calls a C function returning one tensor through `out1`; wraps it.
function T.call1(fn, ...)
  if fn(...) ~= 0 then raise(2) end
  return wrap(out1[0])
end

-- In-place results come back retained; drop that extra reference.
function T.finish_inplace(self, st)
  if st ~= 0 then raise(2) end
  C.of_tensor_release(out1[0])
  return self
end

------------------------------------------------------------------ properties
local dtypes = types.dtypes
getters.dtype = function(t) return dtypes[C.of_tensor_dtype(t.p)] end
getters.device = function(t) return types.device_of_code(C.of_tensor_device(t.p)) end
getters.shape = function(t) return t:size() end
getters.ndim = function(t) return C.of_tensor_ndim(t.p) end
getters.is_cuda = function(t) return C.of_tensor_device(t.p) ~= 0 end
getters.T = function(t)
  local n = C.of_tensor_ndim(t.p)
  local perm = {}
  for i = 1, n do perm[i] = n - i + 1 end
  return t:permute(perm)
end

------------------------------------------------------------------ basics
--- x:dim(): the number of dimensions.
function methods.dim(t) return C.of_tensor_ndim(t.p) end
--- x:ndimension(): the number of dimensions (x:dim()).
-- @function Tensor:ndimension
methods.ndimension = methods.dim
function methods.numel(t) return tonumber(C.of_tensor_numel(t.p)) end
--- x:nelement(): the number of elements (x:numel()).
-- @function Tensor:nelement
methods.nelement = methods.numel

--- x:size() -> flow.Size; x:size(d) -> number (d 1-based, negative ok).
function methods.size(t, d)
  local n = C.of_tensor_ndim(t.p)
  if d == nil then
    local shape, s = C.of_tensor_shape(t.p), {}
    for i = 1, n do s[i] = tonumber(shape[i - 1]) end
    return types.Size(s)
  end
  local cd = A.dim(d, 'size')
  if cd < 0 then cd = cd + n end
  if cd < 0 or cd >= n then
    error(('size: dim %d out of range for a %d-d tensor'):format(d, n), 2)
  end
  return tonumber(C.of_tensor_size(t.p, cd))
end

--- x:stride(dim?): the strides in elements (a table), or of one 1-based dim.
function methods.stride(t, d)
  local n = C.of_tensor_ndim(t.p)
  if d == nil then
    local st, s = C.of_tensor_strides(t.p), {}
    for i = 1, n do s[i] = tonumber(st[i - 1]) end
    return s
  end
  local cd = A.dim(d, 'stride')
  if cd < 0 then cd = cd + n end
  if cd < 0 or cd >= n then error(('stride: dim %d out of range for a %d-d tensor'):format(d, n), 2) end
  return tonumber(C.of_tensor_stride(t.p, cd))
end

--- t:is_contiguous(), t:is_contiguous{memory_format = flow.channels_last}
function methods.is_contiguous(t, opts)
  if opts ~= nil then
    local mf = require 'oneflow.memory_format'
    local f = type(opts) == 'table' and not mf.is_format(opts) and opts.memory_format or opts
    if f ~= nil then return mf.is_contiguous(t, f) end
  end
  return C.of_tensor_is_contiguous(t.p) ~= 0
end
--- x:storage_offset(): the offset of x's first element in its storage, in elements.
function methods.storage_offset(t) return tonumber(C.of_tensor_offset(t.p)) end
--- x:element_size(): bytes per element of x's dtype.
function methods.element_size(t) return C.of_dtype_size(C.of_tensor_dtype(t.p)) end
--- x:is_floating_point(): true for float16/bfloat16/float32/float64.
function methods.is_floating_point(t) return C.of_dtype_is_floating(C.of_tensor_dtype(t.p)) ~= 0 end

--- Pointer to the first element, typed by dtype (uint16_t* for halves).
function methods.data_ptr(t)
  return ffi.cast(dtypes[C.of_tensor_dtype(t.p)].ctype .. '*', C.of_tensor_data(t.p))
end

local function to_lua_value(v, dt)
  if dt == C.OF_BOOL then return v ~= 0 end
  return v
end

--- Raises when a graph is being traced: reading tensor values inside
-- nn.Graph's build() would bake one call's data into the graph.
function T.no_data_access(t, what, level)
  local shape = {}
  local nd, sz = C.of_tensor_ndim(t.p), C.of_tensor_shape(t.p)
  for i = 1, nd do shape[i] = tostring(tonumber(sz[i - 1])) end
  error(('nn.Graph: data-dependent control flow on tensor values is not supported inside build() '
         .. '(called %s on a traced tensor [%s]); compute it outside build or use flow.where')
        :format(what, table.concat(shape, ',')), (level or 2) + 1)
end

local dbl = ffi.new('double[1]')
--- x:item(): the value of a one-element tensor as a Lua number (or boolean).
function methods.item(t)
  if C.of_tracing() ~= 0 then T.no_data_access(t, ':item()', 2) end
  local n = C.of_tensor_numel(t.p)
  if n ~= 1 then
    error(('item: only one-element tensors can be converted to a number, got %d elements'):format(tonumber(n)), 2)
  end
  if C.of_tensor_get_flat(t.p, 0, dbl) ~= 0 then raise(2) end
  return to_lua_value(dbl[0], C.of_tensor_dtype(t.p))
end

--- Nested Lua tables (a number for a 0-d tensor).
function methods.totable(t)
  if C.of_tracing() ~= 0 then T.no_data_access(t, ':totable()', 2) end
  local n = tonumber(C.of_tensor_numel(t.p))
  local buf = ffi.new('double[?]', math.max(n, 1))
  if C.of_tensor_to_doubles(t.p, buf, n) ~= 0 then raise(2) end
  local dt, shape, nd = C.of_tensor_dtype(t.p), t:size(), C.of_tensor_ndim(t.p)
  if nd == 0 then return to_lua_value(buf[0], dt) end
  local pos = 0
  local function build(d)
    local res = {}
    for i = 1, shape[d] do
      if d == nd then
        res[i] = to_lua_value(buf[pos], dt)
        pos = pos + 1
      else
        res[i] = build(d + 1)
      end
    end
    return res
  end
  return build(1)
end

------------------------------------------------------------------ creation
local default_dtype = types.by_name.float32
--- flow.get_default_dtype(): the dtype of new float tensors (float32 unless set).
function T.get_default_dtype() return default_dtype end
--- flow.set_default_dtype(dtype): the dtype of new float tensors (float32 or float64).
function T.set_default_dtype(d) default_dtype = types.dtype(d, 2) end

local function device_opt(opts)
  if opts.device == nil then return C.OF_CPU end
  return types.device_code(types.device(opts.device))
end

-- The options every factory takes.
local FACTORY = {dtype = true, device = true, requires_grad = true, pin_memory = true}

local function shaped(cfn, name)
  return function(...)
    local sizes, opts = A.sizes_and_options(name, ...)
    A.check_options(name, opts, FACTORY)
    local ptr, n = A.shape_ptr(sizes)
    local t = T.call1(cfn, ptr, n, A.dtype_opt(opts, default_dtype).id, device_opt(opts), out1)
    if opts.requires_grad then t:requires_grad_(true) end
    return t
  end
end
--- An uninitialised tensor of the given sizes.
-- @function flow.empty
-- @param ... sizes, as numbers or one table `{2, 3}`
-- @tparam[opt] table opts `{dtype = flow.float32, device = 'cpu', requires_grad = false, pin_memory = false}`
-- @treturn Tensor
def('empty', shaped(C.of_empty, 'empty'), 'func')
--- A tensor of zeros: `flow.zeros(2, 3)`, `flow.zeros({2, 3}, {dtype = flow.int64})`.
-- @function flow.zeros
-- @param ... sizes, as numbers or one table `{2, 3}`
-- @tparam[opt] table opts `{dtype = flow.float32, device = 'cpu', requires_grad = false, pin_memory = false}`
-- @treturn Tensor
def('zeros', shaped(C.of_zeros, 'zeros'), 'func')
--- A tensor of ones: `flow.ones(2, 3)`, `flow.ones{2, 3}`.
-- @function flow.ones
-- @param ... sizes, as numbers or one table `{2, 3}`
-- @tparam[opt] table opts `{dtype = flow.float32, device = 'cpu', requires_grad = false, pin_memory = false}`
-- @treturn Tensor
def('ones', function(...)
  local sizes, opts = A.sizes_and_options('ones', ...)
  A.check_options('ones', opts, FACTORY)
  return T.flow.full(sizes, 1, opts)
end, 'func')

-- The Lua numbers an integer dtype takes, as PyTorch's checked conversion:
-- [min, max], and for unsigned dtypes also down to -max (which wraps, as C
-- does). 64-bit bounds are the last doubles below 2^63 and 2^64.
local INT_RANGE = {
  uint8 = {-255, 255}, int8 = {-128, 127}, int16 = {-32768, 32767}, uint16 = {-65535, 65535},
  int32 = {-2147483648, 2147483647}, uint32 = {-4294967295, 4294967295},
  int64 = {-2 ^ 63, 2 ^ 63 - 1024}, uint64 = {-(2 ^ 64 - 2048), 2 ^ 64 - 2048},
}
-- Raises for a value dtype dt cannot hold ('value cannot be converted ...').
local function check_fits(op, v, dt, level)
  local r = INT_RANGE[dt.name]
  if r and not (v >= r[1] and v <= r[2]) then
    error(('%s: value %s cannot be converted to dtype %s without overflow (range %.0f to %.0f)')
      :format(op, tostring(v), dt.name, r[1], r[2]), level + 1)
  end
end
T.check_fits = check_fits

--- A tensor filled with `value`: `flow.full({2, 3}, 7)`.
-- A boolean value gives a bool tensor unless `dtype` says otherwise.
-- @tparam number|table size a number or a table of sizes
-- @tparam number|boolean value the fill value
-- @tparam[opt] table opts `{dtype =, device =, requires_grad =, pin_memory =}`
-- @treturn Tensor
function T.flow.full(size, value, opts)
  opts = A.check_options('full', opts, FACTORY)
  if type(size) == 'number' then size = {size} end
  local sizes = A.sizes_and_options('full', size)
  local ptr, n = A.shape_ptr(sizes)
  local dt = opts.dtype and types.dtype(opts.dtype, 2)
  if not dt then dt = type(value) == 'boolean' and types.by_name.bool or default_dtype end
  if type(value) == 'boolean' then value = value and 1 or 0 end
  if type(value) ~= 'number' then
    A.fail(('full: argument 2 (fill_value) must be a number or a boolean, got %s'):format(A.describe(value)))
  end
  check_fits('full', value, dt, 2)
  local t = T.call1(C.of_full, ptr, n, value, dt.id, device_opt(opts), out1)
  if opts.requires_grad then t:requires_grad_(true) end
  return t
end

--- The identity matrix, `n` x `m` (`m` defaults to `n`).
-- @tparam int n rows
-- @tparam[opt] int m columns
-- @tparam[opt] table opts `{dtype =, device =, requires_grad =, pin_memory =}`
-- @treturn Tensor
function T.flow.eye(n, m, opts)
  if type(m) == 'table' then opts, m = m, nil end
  opts = A.check_options('eye', opts, FACTORY)
  -- sizes are integers: 2.5 would be truncated by the FFI, 'a' would raise
  -- the FFI's own message naming no op
  A.integer('eye', n, 1, 'n')
  if m ~= nil then A.integer('eye', m, 2, 'm') end
  if n < 0 or (m or 0) < 0 then
    A.fail(('eye: n and m must be non-negative, got %d and %d'):format(n, m or n))
  end
  return T.call1(C.of_eye, n, m or -1, A.dtype_opt(opts, default_dtype).id, device_opt(opts), out1)
end

--- Values from `start` up to (not including) `end` by `step`, as PyTorch:
-- `flow.arange(5)` is 0, 1, 2, 3, 4 (values are not indices). int64 unless
-- a bound is fractional.
-- @usage flow.arange(end); flow.arange(start, end[, step])[, opts]
-- @tparam number a `end`, or `start` when `b` is given
-- @tparam[opt] number b `end`
-- @tparam[opt] number c `step` (default 1)
-- @tparam[opt] table opts `{dtype =, device =, requires_grad =, pin_memory =}`
-- @treturn Tensor
function T.flow.arange(a, b, c, opts)
  local args = {a, b, c, opts}
  local n = 0
  while type(args[n + 1]) == 'number' do n = n + 1 end
  if n == 0 then
    A.fail(('arange: argument 1 (end) must be a number, got %s'):format(A.describe(a)))
  end
  opts = A.check_options('arange', args[n + 1], FACTORY)
  local start, stop, step = 0, a, 1
  if n >= 2 then start, stop = a, b end
  if n >= 3 then step = c end
  for i, v in ipairs({start, stop, step}) do
    if v ~= v or v == math.huge or v == -math.huge then
      A.fail(('arange: argument %d (%s) must be finite, got %s'):format(i, ({'start', 'end', 'step'})[i], tostring(v)))
    end
  end
  local integral = start == math.floor(start) and stop == math.floor(stop) and step == math.floor(step)
  local dt = A.dtype_opt(opts, integral and types.by_name.int64 or default_dtype)
  return T.call1(C.of_arange, start, stop, step, dt.id, device_opt(opts), out1)
end

--- flow.linspace(start, end, steps, opts): steps evenly spaced values from start to end.
function T.flow.linspace(start, stop, steps, opts)
  opts = A.check_options('linspace', opts, FACTORY)
  for i, v in ipairs({start, stop}) do
    if type(v) ~= 'number' then
      A.fail(('linspace: argument %d (%s) must be a number, got %s'):format(i, i == 1 and 'start' or 'end',
                                                                          A.describe(v)))
    end
  end
  A.integer('linspace', steps, 3, 'steps')
  if steps < 0 then A.fail(('linspace: argument 3 (steps) must be non-negative, got %d'):format(steps)) end
  return T.call1(C.of_linspace, start, stop, steps, A.dtype_opt(opts, default_dtype).id,
                 device_opt(opts), out1)
end

-- Shape of a nested Lua table, and whether its leaves are booleans.
local function table_shape(data, op)
  local shape, x = {}, data
  while type(x) == 'table' and not is_tensor(x) do
    shape[#shape + 1] = #x
    if #x == 0 then break end
    x = x[1]
  end
  if #shape > 8 then error(op .. ': nesting deeper than 8 dims', 3) end
  return shape, type(x) == 'boolean'
end

local function flatten_table(data, shape, op)
  local n = 1
  for i = 1, #shape do n = n * shape[i] end
  local buf, pos = ffi.new('double[?]', math.max(n, 1)), 0
  local function walk(x, d)
    if d > #shape then
      local v = x
      if type(v) == 'boolean' then v = v and 1 or 0 end
      if is_tensor(v) then v = v:item() end
      if type(v) ~= 'number' then
        error(('%s: expected a number at position %d, got %s'):format(op, pos + 1, type(x)), 5)
      end
      buf[pos] = v
      pos = pos + 1
      return
    end
    if type(x) ~= 'table' or #x ~= shape[d] then
      error(('%s: ragged nested table: dim %d should have %d entries, got %s'):format(
        op, d, shape[d], type(x) == 'table' and #x or type(x)), 5)
    end
    for i = 1, shape[d] do walk(x[i], d + 1) end
  end
  walk(data, 1)
  return buf
end

--- A tensor from Lua data: `flow.tensor({{1, 2}, {3, 4}})`.
-- float32 unless told (bool for booleans).
-- @param data a number, a boolean, a nested table or a tensor (copied)
-- @tparam[opt] table opts `{dtype =, device =, requires_grad =, pin_memory =}`
-- @treturn Tensor
function T.flow.tensor(data, opts)
  opts = A.check_options('tensor', opts, FACTORY)
  if is_tensor(data) then
    local t = data:clone()
    if opts.dtype then t = t:to(opts.dtype) end
    if opts.device then t = t:to(opts.device) end
    return t
  end
  local shape, is_bool
  if type(data) == 'number' or type(data) == 'boolean' then
    shape, is_bool = {}, type(data) == 'boolean'
  elseif type(data) == 'table' then
    shape, is_bool = table_shape(data, 'tensor')
  else
    error('tensor: expected a number, boolean, table or tensor, got ' .. type(data), 2)
  end
  local buf = flatten_table(#shape == 0 and {data} or data, #shape == 0 and {1} or shape, 'tensor')
  local dt = A.dtype_opt(opts, is_bool and types.by_name.bool or default_dtype)
  if INT_RANGE[dt.name] then
    local count = 1
    for i = 1, #shape do count = count * shape[i] end
    for i = 0, count - 1 do check_fits('tensor', buf[i], dt, 2) end
  end
  local ptr, n = A.shape_ptr(shape)
  local t = T.call1(C.of_from_doubles, buf, ptr, n, dt.id, out1)
  if opts.device ~= nil and types.device(opts.device).type ~= 'cpu' then t = t:to(opts.device) end
  if opts.requires_grad then t:requires_grad_(true) end
  return t
end

--- Zero-copy view of C memory: flow.from_blob(ptr, sizes, {dtype =,
-- strides =, deleter = fn(ptr)}). The memory must outlive the tensor.
function T.flow.from_blob(ptr, sizes, opts)
  A.arg('from_blob', 1, 'ptr', ptr, 'cdata|number')
  opts = A.check_options('from_blob', opts, {dtype = true, strides = true, deleter = true})
  local dt = A.dtype_opt(opts, default_dtype)
  local s = A.sizes_and_options('from_blob', sizes)
  local shape, n = A.shape_ptr(s)
  local strides = nil
  if opts.strides then strides = A.shape_ptr(opts.strides, 2) end
  return T.call1(C.of_from_blob, ffi.cast('void*', ptr), shape, strides, n, dt.id, nil, nil, out1)
end

local function like(fill, name)
  return function(x, opts)
    opts = A.check_options(name, opts, FACTORY)
    local dt = opts.dtype or x.dtype
    return T.flow.full(x:size():totable(), fill, {dtype = dt, requires_grad = opts.requires_grad,
                                                  device = opts.device or x.device})
  end
end
--- flow.zeros_like(x, opts): zeros of x's shape.
-- @function flow.zeros_like
def('zeros_like', like(0, 'zeros_like'), 'func')
--- flow.ones_like(x, opts): ones of x's shape.
-- @function flow.ones_like
def('ones_like', like(1, 'ones_like'), 'func')
--- flow.full_like(x, value, opts): a tensor of x's shape filled with value.
def('full_like', function(x, v, opts)
  opts = A.check_options('full_like', opts, FACTORY)
  return T.flow.full(x:size():totable(), v, {dtype = opts.dtype or x.dtype})
end, 'func')
--- flow.empty_like(x, opts): an uninitialised tensor of x's shape ({dtype =, device =} override).
def('empty_like', function(x, opts)
  opts = A.check_options('empty_like', opts, FACTORY)
  return T.flow.empty(x:size():totable(), {dtype = opts.dtype or x.dtype})
end, 'func')

--- x:new_zeros(size, opts): zeros with x's dtype and device.
function methods.new_zeros(x, ...)
  local s, o = A.sizes_and_options('new_zeros', ...)
  A.check_options('new_zeros', o, FACTORY)
  o.dtype = o.dtype or x.dtype
  return T.flow.zeros(s, o)
end
--- x:new_ones(size, opts): ones with x's dtype and device.
function methods.new_ones(x, ...)
  local s, o = A.sizes_and_options('new_ones', ...)
  A.check_options('new_ones', o, FACTORY)
  o.dtype = o.dtype or x.dtype
  return T.flow.ones(s, o)
end
--- x:new_empty(size, opts): an uninitialised tensor with x's dtype and device.
function methods.new_empty(x, ...)
  local s, o = A.sizes_and_options('new_empty', ...)
  A.check_options('new_empty', o, FACTORY)
  o.dtype = o.dtype or x.dtype
  o.device = o.device or x.device
  return T.flow.empty(s, o)
end
--- flow.numel(x) / x:numel(): the number of elements.
def('numel', function(x)
  if not T.is_tensor(x) then error('numel: expected a tensor, got ' .. type(x), 2) end
  return x:numel()
end, 'func')
--- x:new_full(size, value, opts): a tensor filled with value, with x's dtype and device.
function methods.new_full(x, size, v, o)
  o = o or {}
  o.dtype = o.dtype or x.dtype
  return T.flow.full(size, v, o)
end
--- x:new_tensor(data, opts): flow.tensor(data) with x's dtype and device.
function methods.new_tensor(x, data, o)
  o = o or {}
  o.dtype = o.dtype or x.dtype
  return T.flow.tensor(data, o)
end

return T
