-- oneflow.ops.views: views (share storage), copies, dtype conversion and
-- Torch7-style indexing. Dims and indices are 1-based; -1 is the last.
local core = require 'oneflow._C'
local mf = require 'oneflow.memory_format'
local types = require 'oneflow.types'
local A = require 'oneflow._args'
local T = require 'oneflow.tensor'

local C, out1, raise = core.C, core.out1, core.raise
local call1, def, methods = T.call1, T.def, T.methods
local dim = A.dim

local function shape_call(cfn, name)
  return function(x, ...)
    local sizes = A.sizes_and_options(name, ...)
    local ptr, n = A.shape_ptr(sizes)
    return call1(cfn, x.p, ptr, n, out1)
  end
end
--- x:view(size...): a view of x with a new shape (x must be contiguous enough); one dim may be -1.
-- @function flow.view
def('view', shape_call(C.of_view, 'view'), 'method')
--- flow.reshape(x, shape) / x:reshape(...): x with a new shape (a view when possible); one dim may be -1.
-- @function flow.reshape
def('reshape', shape_call(C.of_reshape, 'reshape'))
--- x:expand(size...): a broadcast view of x; -1 keeps a dim.
-- @function flow.expand
def('expand', shape_call(C.of_expand, 'expand'), 'method')
--- x:view_as(other): x:view(other.shape).
function methods.view_as(x, o) return x:view(A.check_tensor('view_as', o, 'other', 1):size()) end
--- x:reshape_as(other): x:reshape(other.shape).
function methods.reshape_as(x, o) return x:reshape(A.check_tensor('reshape_as', o, 'other', 1):size()) end
--- x:expand_as(other): x:expand(other.shape).
function methods.expand_as(x, o) return x:expand(A.check_tensor('expand_as', o, 'other', 1):size()) end
--- flow.broadcast_to(x, shape): x expanded to shape by broadcasting (a view).
def('broadcast_to', function(x, ...) return x:expand(...) end)

--- flow.transpose(x, d0, d1): a view with dims d0 and d1 (1-based) swapped.
def('transpose', function(x, d0, d1)
  return call1(C.of_transpose, x.p, dim(d0, 'transpose'), dim(d1, 'transpose'), out1)
end)
--- flow.swapaxes(x, d0, d1): x:transpose(d0, d1).
def('swapaxes', function(x, d0, d1) return x:transpose(d0, d1) end)

--- x:t(): the transpose of a 2-d tensor (a 1-d tensor as is).
def('t', function(x)
  local n = x:dim()
  if n > 2 then error(('t: expects a tensor with <= 2 dims, got %d-d'):format(n), 2) end
  if n < 2 then return x:view(x:size()) end
  return call1(C.of_transpose, x.p, 0, 1, out1)
end)

--- x:permute(dims...): a view with the dims reordered (1-based).
def('permute', function(x, ...)
  local dims = A.sizes_and_options('permute', ...)
  local ptr, n = A.dims_ptr(dims, 'permute')
  return call1(C.of_permute, x.p, ptr, n, out1)
end)

--- x:narrow(dim, start, length): start is 1-based.
def('narrow', function(x, d, start, length)
  A.integer('narrow', start, 3, 'start')
  A.integer('narrow', length, 4, 'length')
  if start == 0 then error('narrow: start 0 is not valid; indices are 1-based', 2) end
  return call1(C.of_narrow, x.p, dim(d, 'narrow'), start > 0 and start - 1 or start, length, out1)
end)

--- x:select(dim, index): index is 1-based, negative counts from the end.
def('select', function(x, d, index)
  A.integer('select', index, 3, 'index')
  if index == 0 then error('select: index 0 is not valid; indices are 1-based', 2) end
  return call1(C.of_select, x.p, dim(d, 'select'), index > 0 and index - 1 or index, out1)
end)

--- x:unsqueeze(dim): a view with a size-1 dim inserted at dim (1-based).
def('unsqueeze', function(x, d)
  -- dims for unsqueeze range over ndim + 1 positions; -1 appends
  return call1(C.of_unsqueeze, x.p, dim(d, 'unsqueeze'), out1)
end)

--- x:squeeze(dim?): a view without size-1 dims (only dim when given).
def('squeeze', function(x, d)
  return call1(C.of_squeeze, x.p, d == nil and -100 or dim(d, 'squeeze'), out1)
end)

--- flow.flatten(x, start_dim = 1, end_dim = -1): dims start_dim..end_dim merged into one.
def('flatten', function(x, s, e)
  return call1(C.of_flatten, x.p, s and dim(s, 'flatten') or 0, e and dim(e, 'flatten') or -1, out1)
end)

--- x:contiguous(), x:contiguous{memory_format = flow.channels_last}
def('contiguous', function(x, opts)
  if opts ~= nil then
    local f = type(opts) == 'table' and not mf.is_format(opts) and opts.memory_format or opts
    if f ~= nil and f ~= mf.contiguous_format then return mf.convert(x, f, 'contiguous') end
  end
  return call1(C.of_contiguous, x.p, out1)
end, 'method')
--- flow.clone(x) / x:clone(): a copy of x with its own storage (differentiable).
def('clone', function(x) return call1(C.of_clone, x.p, out1) end)

------------------------------------------------------------------ split family
--- x:chunk(n, dim): a Lua array of views.
def('chunk', function(x, chunks, d)
  d = d or 1
  if not A.is_integer(chunks) or chunks < 1 then
    error('chunk: number of chunks must be a positive integer, got ' .. tostring(chunks), 2)
  end
  local size = x:size(d)
  local step = math.ceil(size / chunks)
  local res = {}
  for start = 1, size, math.max(step, 1) do
    res[#res + 1] = x:narrow(d, start, math.min(step, size - start + 1))
  end
  if size == 0 then res[1] = x end
  return res
end)

--- x:split(size_or_sizes, dim) as in PyTorch.
def('split', function(x, sizes, d)
  d = d or 1
  local size, res = x:size(d), {}
  if type(sizes) == 'number' then
    A.integer('split', sizes, 2, 'split_size')
    if sizes < 1 then error('split: split size must be positive, got ' .. sizes, 2) end
    for start = 1, size, sizes do
      res[#res + 1] = x:narrow(d, start, math.min(sizes, size - start + 1))
    end
  else
    local total = 0
    for i = 1, #sizes do total = total + A.integer('split', sizes[i], nil, 'size ' .. i) end
    if total ~= size then
      error(('split: sizes add up to %d but dim %d has size %d'):format(total, d, size), 2)
    end
    local start = 1
    for i = 1, #sizes do
      res[i] = x:narrow(d, start, sizes[i])
      start = start + sizes[i]
    end
  end
  return res
end)

--- flow.unbind(x, dim = 1): the slices of x along dim, as a Lua list of views.
def('unbind', function(x, d)
  d = d or 1
  local res = {}
  for i = 1, x:size(d) do res[i] = x:select(d, i) end
  return res
end)

--- x:unfold(dim, size, step): every slice of length `size` along `dim`, `step`
-- apart, as a new last dim of length `size` (PyTorch's Tensor.unfold). A view
-- sharing x's storage when x needs no gradient; when it does, a copy made
-- with index_select so the gradient flows (as_strided views are not
-- differentiable here).
def('unfold', function(x, d, size, step)
  local nd = math.max(x:dim(), 1)
  if type(d) ~= 'number' or type(size) ~= 'number' or type(step) ~= 'number' then
    error('unfold: expected (dim, size, step) numbers', 2)
  end
  if d < 0 then d = d + nd + 1 end
  if d < 1 or d > nd then error(('unfold: dim %d out of range for %d-d tensor'):format(d, x:dim()), 2) end
  local len = x:dim() == 0 and 1 or x:size(d)
  if size < 0 or size > len then
    error(('unfold: size %d exceeds the size %d of dim %d'):format(size, len, d), 2)
  end
  if step <= 0 then error(('unfold: step must be positive, got %d'):format(step), 2) end
  local nw = math.floor((len - size) / step) + 1
  if x:dim() == 0 then return x:reshape(size) end
  if not x.requires_grad then
    local shape, strides = x:size():totable(), {}
    for i = 1, x:dim() do strides[i] = x:stride(i) end
    shape[d], shape[#shape + 1] = nw, size
    strides[#strides + 1] = strides[d]
    strides[d] = strides[d] * step
    local sp, n = A.shape_ptr(shape, 1, 'unfold')
    return call1(C.of_as_strided, x.p, sp, A.shape_ptr(strides, 2, 'unfold'), n, x:storage_offset(), out1)
  end
  local idx = {}
  for w = 0, nw - 1 do
    for j = 1, size do idx[#idx + 1] = w * step + j end
  end
  local it = T.flow.tensor(idx, {dtype = 'int64', device = x.device})
  local shape = x:size():totable()
  shape[d] = nw
  table.insert(shape, d + 1, size)
  return x:index_select(d, it):reshape(shape):movedim(d + 1, -1)
end, 'method')

------------------------------------------------------------------ copy / fill
--- x:copy_(src): copies src (broadcast, converted) into x in place; returns x.
function methods.copy_(x, src)
  if type(src) == 'number' then return x:fill_(src) end
  A.check_tensor('copy_', src, 'src', 1)
  if C.of_copy_(x.p, src.p) ~= 0 then raise(2) end
  return x
end

--- x:fill_(v): sets every element of x to v in place; returns x.
function methods.fill_(x, v)
  if type(v) == 'boolean' then v = v and 1 or 0 end
  if T.is_tensor(v) then v = v:item() end
  if type(v) ~= 'number' then A.fail('fill_: value must be a number or a one-element tensor, got ' .. A.describe(v)) end
  if C.of_fill_(x.p, v) ~= 0 then raise(2) end
  return x
end

--- x:zero_(): sets every element of x to 0 in place; returns x.
function methods.zero_(x) return x:fill_(0) end

------------------------------------------------------------------ dtype / device
local function to_dtype(x, d)
  return call1(C.of_to_dtype, x.p, types.dtype(d, 3).id, out1)
end

local function to_device(x, dev, non_blocking)
  local code = types.device_code(dev)
  if C.of_tensor_device(x.p) == code then return x end
  return call1(C.of_to_device, x.p, code, non_blocking and 1 or 0, out1)
end

--- x:to(dtype), x:to('cuda'), x:to(other_tensor), x:to{dtype =, device =,
-- non_blocking =}, x:to('cuda', 'float16'), x:to('cuda', {non_blocking = true}).
function methods.to(x, a, b)
  local dt, dev, nb, fmt
  if T.is_tensor(a) then
    dt, dev = a.dtype, a.device
  elseif mf.is_format(a) then
    fmt = a
  elseif A.is_options(a) then
    A.check_options('to', a, {dtype = true, device = true, non_blocking = true, memory_format = true})
    dt, dev, nb, fmt = a.dtype, a.device, a.non_blocking, a.memory_format
  elseif getmetatable(a) == types.DType then
    dt = a
  elseif getmetatable(a) == types.Device then
    dev = a
  elseif type(a) == 'string' then
    if types.by_name[a] then dt = a else dev = a end
  end
  if getmetatable(b) == types.DType or (type(b) == 'string' and types.by_name[b]) then dt = b end
  if A.is_options(b) then
    A.check_options('to', b, {non_blocking = true, memory_format = true})
    nb = b.non_blocking
    fmt = b.memory_format or fmt
  end
  if dev ~= nil then
    local ok, d = pcall(types.device, dev)
    if not ok then error('to: ' .. tostring(d):gsub('^.-device: ', 'device: '), 2) end
    x = to_device(x, d, nb)
  end
  if dt ~= nil then x = to_dtype(x, dt) end
  if fmt ~= nil then
    local ok, r = pcall(mf.convert, x, fmt, 'to')
    if not ok then error(r, 2) end
    x = r
  end
  return x
end

for name, dt in pairs({float = 'float32', double = 'float64', half = 'float16',
                       bfloat16 = 'bfloat16', long = 'int64', int = 'int32', short = 'int16',
                       char = 'int8', byte = 'uint8', bool = 'bool'}) do
  methods[name] = function(x) return to_dtype(x, dt) end
end
--- x:type_as(other): x converted to other's dtype.
function methods.type_as(x, o) return to_dtype(x, A.check_tensor('type_as', o, 'other', 1).dtype) end
--- x:cpu(): x on the CPU (x itself when it is there).
function methods.cpu(x) return to_device(x, types.device('cpu')) end
--- x:cuda(), x:cuda(1), x:cuda{non_blocking = true}, x:cuda(1, {non_blocking = true})
function methods.cuda(x, index, opts)
  if type(index) == 'table' then index, opts = nil, index end
  A.arg('cuda', 1, 'device', index, 'integer|nil')
  A.arg('cuda', 2, 'options', opts, 'table|nil')
  if index == nil then index = C.of_cuda_current_device() end
  if index < 0 then index = 0 end   -- no CUDA: the copy reports why
  return to_device(x, types.device('cuda', index), opts and opts.non_blocking)
end
--- A copy in page-locked host memory (a plain copy where CUDA is unavailable).
function methods.pin_memory(x) return call1(C.of_pin_memory, x.p, out1) end
--- x:is_pinned(): true when x lives in page-locked host memory.
function methods.is_pinned(x) return C.of_tensor_is_pinned(x.p) ~= 0 end

--- x:type() -> 'oneflow.FloatTensor' style name; x:type(dtype) converts.
local type_names = {float32 = 'FloatTensor', float64 = 'DoubleTensor', float16 = 'HalfTensor',
                    bfloat16 = 'BFloat16Tensor', int64 = 'LongTensor', int32 = 'IntTensor',
                    int8 = 'CharTensor', uint8 = 'ByteTensor', bool = 'BoolTensor',
                    int16 = 'ShortTensor'}
--- x:type(dtype?): the type name ('oneflow.FloatTensor') or, given a dtype, x converted to it.
function methods.type(x, d)
  if d == nil then
    local tn = type_names[x.dtype.name]
    -- PyTorch 2 has no legacy tensor type for uint16/32/64 either
    if not tn then error(('type: dtype %s has no tensor type name'):format(x.dtype.name), 2) end
    return 'oneflow.' .. tn
  end
  return to_dtype(x, d)
end

------------------------------------------------------------------ indexing
-- x[i] selects along dim 1; x[{a, {b, c}, {}}] takes Torch7 ranges:
-- a number selects (drops the dim), {b, c} is the inclusive range b..c
-- (negative counts from the end), {b} is b..b, {} the whole dim.
local function range_view(x, d, r)
  local n = x:size(d)
  for j = 1, 3 do
    if r[j] ~= nil and not A.is_integer(r[j]) then
      A.fail(('index: range entries must be integers, got %s in {%s, %s}'):format(
        tostring(r[j]), tostring(r[1]), tostring(r[2])))
    end
  end
  local s, e = r[1] or 1, r[2] or r[1] or n
  if r[1] == nil then s, e = 1, n end
  if s < 0 then s = n + s + 1 end
  if e < 0 then e = n + e + 1 end
  if s < 1 or e > n or s > e + 1 then
    error(('index: range {%s, %s} out of bounds for dim %d of size %d'):format(
      tostring(r[1]), tostring(r[2]), d, n), 4)
  end
  local step = r[3] or 1
  if step == 1 then return x:narrow(d, s, e - s + 1) end
  return call1(C.of_slice, x.p, d - 1, s - 1, e, step, out1)
end

local function index_table(x, idx)
  local d = 1
  for i = 1, #idx do
    local k = idx[i]
    if type(k) == 'number' then
      x = x:select(d, k)
    elseif type(k) == 'table' then
      x = range_view(x, d, k)
      d = d + 1
    else
      error('index: entries must be numbers or {start, end} ranges, got ' .. type(k), 3)
    end
  end
  return x
end

function T.index(x, k)
  if type(k) == 'number' then
    if not A.is_integer(k) then A.fail(('index: indices must be integers, got %s'):format(tostring(k))) end
    if k == 0 then error('index: 0 is not a valid index; indices are 1-based', 2) end
    return call1(C.of_select, x.p, 0, k > 0 and k - 1 or k, out1)
  elseif type(k) == 'table' then
    return index_table(x, k)
  elseif T.is_tensor(k) then
    if k.dtype.name == 'bool' then return x:masked_select(k) end
    return x:index_select(1, k)
  end
  return nil
end

function T.newindex(x, k, v)
  local target
  if T.is_tensor(k) and k.dtype.name == 'bool' then
    if type(v) ~= 'number' then v = v:item() end
    return x:masked_fill_(k, v)
  end
  if type(k) == 'number' then target = T.index(x, k)
  elseif type(k) == 'table' then target = index_table(x, k)
  else error('index assignment: unsupported key ' .. tostring(k), 2) end
  if type(v) == 'number' or type(v) == 'boolean' then target:fill_(v)
  else target:copy_(v) end
end

------------------------------------------------------------------ SBP (global tensors)
local R = require 'oneflow.distributed.rules'
T.sbp({'reshape', 'view'}, R.reshape)
T.sbp({'narrow'}, R.slice(2))

local function pos(d, n) return d < 0 and d + n + 1 or d end
-- a split dim follows its dim through the view
T.sbp({'transpose', 'swapaxes'}, R.dim_map(function(ctx)
  local n = #ctx.shapes[1]
  local a, b = pos(ctx.args[2], n), pos(ctx.args[3], n)
  return function(d) return d == a and b or d == b and a or d end
end))
T.sbp('t', R.dim_map(function(ctx)
  if #ctx.shapes[1] < 2 then return function(d) return d end end
  return function(d) return 3 - d end
end))
T.sbp('permute', R.dim_map(function(ctx)
  local dims = {}
  for i = 2, ctx.n do
    local a = ctx.args[i]
    if type(a) == 'number' then dims[#dims + 1] = a
    elseif type(a) == 'table' then for _, v in ipairs(a) do dims[#dims + 1] = v end end
  end
  local n = #ctx.shapes[1]
  return function(d)
    for j, v in ipairs(dims) do if pos(v, n) == d then return j end end
  end
end))
T.sbp('unsqueeze', R.dim_map(function(ctx)
  local at = pos(ctx.args[2], #ctx.shapes[1] + 1)
  return function(d) return d >= at and d + 1 or d end
end))
T.sbp('squeeze', R.dim_map(function(ctx)
  local shape, at = ctx.shapes[1], ctx.args[2]
  local gone = {}
  for d, v in ipairs(shape) do
    if v == 1 and (at == nil or pos(at, #shape) == d) then gone[d] = true end
  end
  return function(d)
    if gone[d] then return nil end
    local e = d
    for f = 1, d - 1 do if gone[f] then e = e - 1 end end
    return e
  end
end))
-- dims start..end merge: only the dims outside them keep a split
T.sbp('flatten', R.dim_map(function(ctx)
  local n = #ctx.shapes[1]
  if n == 0 then return nil end
  local s, e = pos(ctx.args[2] or 1, n), pos(ctx.args[3] or -1, n)
  return function(d)
    if d < s then return d end
    if d > e then return d - (e - s) end
    if s == e then return d end
  end
end))


-- Doc comments of the functions made in loops above (help() and LDoc read them).

--- x:bfloat16(): x converted to bfloat16 (x itself when it already is).
-- @function Tensor:bfloat16

--- x:bool(): x converted to bool.
-- @function Tensor:bool

--- x:byte(): x converted to uint8.
-- @function Tensor:byte

--- x:char(): x converted to int8.
-- @function Tensor:char

--- x:double(): x converted to float64.
-- @function Tensor:double

--- x:float(): x converted to float32.
-- @function Tensor:float

--- x:half(): x converted to float16.
-- @function Tensor:half

--- x:int(): x converted to int32.
-- @function Tensor:int

--- x:long(): x converted to int64.
-- @function Tensor:long

--- x:short(): x converted to int16.
-- @function Tensor:short

return {}
