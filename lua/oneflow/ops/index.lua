-- oneflow.ops.index: shape and index ops -- cat, stack, gather, scatter,
-- index_select, index_add, sort, topk, tril/triu, flip, roll, repeat/tile,
-- one_hot, masked_select, nonzero. Dims and index values are 1-based; the C
-- side gets index_base = 1 and converts nothing in an extra pass.
local ffi = require 'ffi'
local core = require 'oneflow._C'
local A = require 'oneflow._args'
local T = require 'oneflow.tensor'

local C, out1, out2, raise, wrap = core.C, core.out1, core.out2, core.raise, core.wrap
local call1, def, methods, is_tensor = T.call1, T.def, T.methods, T.is_tensor
local dim, check_tensor = A.dim, A.check_tensor
local BASE = 1   -- Lua index values start at 1

-- An index argument: an int tensor as given (C checks the dtype), or a Lua
-- number / list turned into an int64 tensor on the device of `like`.
local function index_tensor(idx, op, like)
  if is_tensor(idx) then return idx end
  if type(idx) == 'number' or type(idx) == 'table' then
    local t = T.flow.tensor(idx, {dtype = 'int64'})
    if like and like.is_cuda then t = t:to(like.device) end
    return t
  end
  error(('%s: index must be an int64 tensor, got %s'):format(op, type(idx)), 3)
end


-- Two results through out1/out2.
local function two(st)
  if st ~= 0 then raise(3) end
  local a, b = out1[0], out2[0]
  return wrap(a), wrap(b)
end

------------------------------------------------------------------ cat / stack
local function tensor_list(ts, op)
  if type(ts) ~= 'table' or is_tensor(ts) then
    error(('%s: expected a table of tensors, got %s'):format(op, is_tensor(ts) and 'a tensor'
          or type(ts)), 3)
  end
  local n = #ts
  if n == 0 then error(op .. ': expected a non-empty table of tensors', 3) end
  local arr = ffi.new('of_tensor*[?]', n)
  for i = 1, n do
    local t = ts[i]
    if not is_tensor(t) then
      error(('%s: entry %d is not a tensor (got %s)'):format(op, i, type(t)), 3)
    end
    arr[i - 1] = t.p
  end
  return arr, n
end

local function dim_arg(d, op)
  if type(d) == 'table' then d = A.check_options(op, d, {dim = true}).dim end
  return dim(d or 1, op, 3)
end

--- Concatenates tensors along an existing dim; dtypes promote.
-- Also `flow.concat`, `flow.concatenate`.
-- @tparam {Tensor,...} ts the tensors, a Lua list
-- @tparam[opt=1] int d the dim (1-based, -1 = last), or `{dim = d}`
-- @treturn Tensor
def('cat', function(ts, d)
  local arr, n = tensor_list(ts, 'cat')
  return call1(C.of_cat, arr, n, dim_arg(d, 'cat'), out1)
end, 'func')
T.flow.concat, T.flow.concatenate = T.flow.cat, T.flow.cat

--- Stacks tensors of one shape along a new dim.
-- @tparam {Tensor,...} ts the tensors, a Lua list
-- @tparam[opt=1] int d the new dim (1 .. ndim + 1, -1 = last)
-- @treturn Tensor
def('stack', function(ts, d)
  local arr, n = tensor_list(ts, 'stack')
  return call1(C.of_stack, arr, n, dim_arg(d, 'stack'), out1)
end, 'func')

local function atleast(ts, nd)
  local res = {}
  for i, t in ipairs(ts) do
    if nd == 2 and t:dim() < 2 then t = t:reshape(1, -1) end
    res[i] = t
  end
  return res
end
--- flow.hstack(tensors): concatenation along dim 2 (dim 1 for 1-d tensors).
def('hstack', function(ts)
  tensor_list(ts, 'hstack')
  return T.flow.cat(ts, ts[1]:dim() <= 1 and 1 or 2)
end, 'func')
--- flow.vstack(tensors): concatenation along dim 1 (1-d tensors become rows).
def('vstack', function(ts)
  tensor_list(ts, 'vstack')
  return T.flow.cat(atleast(ts, 2), 1)
end, 'func')

------------------------------------------------------------------ gather / scatter
--- x:gather(dim, index): out[i][j] = x[i][index[i][j]] (dim 2).
def('gather', function(x, d, idx)
  idx = index_tensor(idx, 'gather', x)
  return call1(C.of_gather, x.p, dim(d, 'gather'), idx.p, BASE, out1)
end)

local function reduce_code(opts, op)
  local r = type(opts) == 'table' and opts.reduce or opts
  if r == nil then return 0 end
  if r == 'add' or r == 'sum' then return 1 end
  error(("%s: reduce must be 'add' (or nil to replace), got %s"):format(op, tostring(r)), 4)
end

local function scatter(x, d, idx, src, red, into, op)
  idx = index_tensor(idx, op, x)
  local cd = dim(d, op, 3)
  if is_tensor(src) then
    return C.of_scatter(x.p, cd, idx.p, src.p, 0, 0, red, BASE, into, out1)
  end
  if type(src) == 'boolean' then src = src and 1 or 0 end
  if type(src) ~= 'number' then
    error(('%s: src must be a tensor or a number, got %s'):format(op, type(src)), 3)
  end
  return C.of_scatter(x.p, cd, idx.p, nil, src, 1, red, BASE, into, out1)
end

--- x:scatter(dim, index, src_or_value[, {reduce = 'add'}]): a new tensor.
def('scatter', function(x, d, idx, src, opts)
  if scatter(x, d, idx, src, reduce_code(opts, 'scatter'), nil, 'scatter') ~= 0 then raise(2) end
  return wrap(out1[0])
end)
function methods.scatter_(x, d, idx, src, opts)
  return T.finish_inplace(x, scatter(x, d, idx, src, reduce_code(opts, 'scatter_'), x.p, 'scatter_'))
end
--- flow.scatter_add(x, dim, index, src): adds src into x at the 1-based index along dim.
def('scatter_add', function(x, d, idx, src)
  if scatter(x, d, idx, src, 1, nil, 'scatter_add') ~= 0 then raise(2) end
  return wrap(out1[0])
end)
function methods.scatter_add_(x, d, idx, src)
  return T.finish_inplace(x, scatter(x, d, idx, src, 1, x.p, 'scatter_add_'))
end

------------------------------------------------------------------ index_select / index_add
--- x:index_select(dim, index): index a 1-D int tensor (or a Lua list).
def('index_select', function(x, d, idx)
  idx = index_tensor(idx, 'index_select', x)
  return call1(C.of_index_select, x.p, dim(d, 'index_select'), idx.p, BASE, out1)
end)

local function index_add(x, d, idx, src, opts, into)
  idx = index_tensor(idx, 'index_add', x)
  check_tensor('index_add', src, 'source')
  local alpha = type(opts) == 'number' and opts
    or (opts ~= nil and A.check_options('index_add', opts, {alpha = true}).alpha) or 1
  return C.of_index_add(x.p, dim(d, 'index_add', 3), idx.p, src.p, alpha, BASE, into, out1)
end

--- x:index_add(dim, index, source[, {alpha =}]): rows of source added at index.
def('index_add', function(x, d, idx, src, opts)
  if index_add(x, d, idx, src, opts, nil) ~= 0 then raise(2) end
  return wrap(out1[0])
end)
function methods.index_add_(x, d, idx, src, opts)
  return T.finish_inplace(x, index_add(x, d, idx, src, opts, x.p))
end

------------------------------------------------------------------ sort / topk
-- (dim, opts) with dim optional (default -1, the last) and opts optional.
local function dim_and_opts(d, opts, op, allowed)
  if type(d) == 'table' then d, opts = nil, d end
  opts = A.check_options(op, opts, allowed)
  if d == nil then d = opts.dim end
  if d == nil then return -1, opts end
  return dim(d, op, 4), opts
end

--- x:sort([dim][, {descending =, stable =}]) -> values, indices (1-based).
def('sort', function(x, d, opts)
  local cd
  if type(opts) == 'boolean' then opts = {descending = opts} end
  cd, opts = dim_and_opts(d, opts, 'sort', {dim = true, descending = true, stable = true})
  return two(C.of_sort(x.p, cd, opts.descending and 1 or 0, opts.stable and 1 or 0, BASE,
                       out1, out2))
end)

--- x:argsort([dim][, {descending =, stable =}]) -> indices.
def('argsort', function(x, d, opts)
  local _, i = x:sort(d, opts)
  return i
end)
--- flow.msort(x): x sorted along dim 1.
def('msort', function(x) return (x:sort(1)) end)

--- x:topk(k[, dim][, {largest = true, sorted = true}]) -> values, indices.
def('topk', function(x, k, d, opts)
  if type(k) ~= 'number' or k ~= math.floor(k) then
    error('topk: k must be an integer, got ' .. tostring(k), 2)
  end
  local cd
  cd, opts = dim_and_opts(d, opts, 'topk', {dim = true, largest = true, sorted = true})
  return two(C.of_topk(x.p, k, cd, opts.largest == false and 0 or 1, opts.sorted == false and 0 or 1,
                       BASE, out1, out2))
end)

------------------------------------------------------------------ tril / triu
local function diag_arg(k, op)
  if type(k) == 'table' then k = A.check_options(op, k, {diagonal = true}).diagonal end
  k = k or 0
  if type(k) ~= 'number' or k ~= math.floor(k) then
    error(('%s: diagonal must be an integer, got %s'):format(op, tostring(k)), 3)
  end
  return k
end

--- x:tril(k): keep j - i <= k of the last two dims; x:triu(k): j - i >= k.
def('tril', function(x, k) return call1(C.of_tri, x.p, diag_arg(k, 'tril'), 0, out1) end)
--- flow.triu(x, diagonal = 0): the upper triangle of the last two dims, zeros below.
def('triu', function(x, k) return call1(C.of_tri, x.p, diag_arg(k, 'triu'), 1, out1) end)
function methods.tril_(x, k) return x:copy_(x:tril(k)) end
function methods.triu_(x, k) return x:copy_(x:triu(k)) end

------------------------------------------------------------------ flip / roll
--- x:flip(dims): dims a number, a list, or several numbers.
def('flip', function(x, ...)
  local dims = ...
  if type(dims) ~= 'table' then dims = {...} end
  if #dims > 8 then error('flip: at most 8 dims, got ' .. #dims, 2) end
  local ptr, n = A.dims_ptr(dims, 'flip')
  return call1(C.of_flip, x.p, ptr, n, out1)
end)
--- flow.fliplr(x): x reversed along dim 2.
def('fliplr', function(x)
  if x:dim() < 2 then error(('fliplr: input must be at least 2-d, got %d-d'):format(x:dim()), 2) end
  return x:flip(2)
end)
--- flow.flipud(x): x reversed along dim 1.
def('flipud', function(x)
  if x:dim() < 1 then error('flipud: input must be at least 1-d, got 0-d', 2) end
  return x:flip(1)
end)

--- x:roll(shifts[, dims]): without dims, rolls the flattened tensor.
def('roll', function(x, shifts, dims)
  if type(shifts) == 'number' then shifts = {shifts} end
  if type(shifts) ~= 'table' then error('roll: shifts must be a number or a list, got ' .. type(shifts), 2) end
  if #shifts > 8 then error('roll: at most 8 shifts, got ' .. #shifts, 2) end
  for i = 1, #shifts do
    if type(shifts[i]) ~= 'number' or shifts[i] ~= math.floor(shifts[i]) then
      error(('roll: shift %d must be an integer, got %s'):format(i, tostring(shifts[i])), 2)
    end
  end
  local sp = A.shape_ptr(shifts, 2)
  if dims == nil then
    if #shifts ~= 1 then
      error(('roll: without dims, shifts must be a single number, got %d'):format(#shifts), 2)
    end
    return call1(C.of_roll, x.p, sp, nil, 0, out1)
  end
  if type(dims) == 'number' then dims = {dims} end
  if #dims ~= #shifts then
    error(('roll: shifts and dims must have the same length, got %d and %d'):format(#shifts, #dims), 2)
  end
  local dp, n = A.dims_ptr(dims, 'roll')
  return call1(C.of_roll, x.p, sp, dp, n, out1)
end)

------------------------------------------------------------------ repeat / tile
--- x['repeat'](x, 2, 3) (torch.Tensor.repeat; `repeat` is a Lua keyword).
local function repeat_tensor(x, ...)
  local reps = A.sizes_and_options('repeat', ...)
  local ptr, n = A.shape_ptr(reps)
  return call1(C.of_repeat, x.p, ptr, n, out1)
end
def('repeat', repeat_tensor, 'method')

--- x:tile(reps): like repeat, but fewer reps than dims are padded with 1s.
def('tile', function(x, ...)
  local reps = A.sizes_and_options('tile', ...)
  local nd, pad = x:dim(), {}
  for _ = 1, nd - #reps do pad[#pad + 1] = 1 end
  for i = 1, #reps do pad[#pad + 1] = reps[i] end
  return repeat_tensor(x, pad)
end)

------------------------------------------------------------------ one_hot / masked_select / nonzero
--- flow.one_hot(index, num_classes): int64, classes 1..num_classes map to
-- columns 1..num_classes; num_classes -1 (default) infers max(index).
def('one_hot', function(idx, num_classes)
  idx = index_tensor(idx, 'one_hot')
  num_classes = num_classes or -1
  if type(num_classes) ~= 'number' or num_classes ~= math.floor(num_classes) then
    error('one_hot: num_classes must be an integer, got ' .. tostring(num_classes), 2)
  end
  return call1(C.of_one_hot, idx.p, num_classes, BASE, out1)
end, 'func')

--- x:masked_select(mask): 1-D tensor of the elements where mask (bool,
-- broadcast) is true.
def('masked_select', function(x, mask)
  check_tensor('masked_select', mask, 'mask')
  return call1(C.of_masked_select, x.p, mask.p, out1)
end)

--- x:nonzero(): N x ndim int64 of 1-based indices; {as_tuple = true} gives
-- a Lua array of ndim 1-D tensors instead.
def('nonzero', function(x, opts)
  opts = A.check_options('nonzero', opts, {as_tuple = true})
  local r = call1(C.of_nonzero, x.p, BASE, out1)
  if not opts.as_tuple then return r end
  local res = {}
  if x:dim() == 0 then   -- as PyTorch: a 0-d input counts as 1-d
    res[1] = T.flow.ones(r:size(1), {dtype = 'int64'})
    return res
  end
  for i = 1, x:dim() do res[i] = r:select(2, i):contiguous() end
  return res
end)
--- flow.argwhere(x): the 1-based indices of the non-zero elements, one row each (int64 [n, ndim]).
def('argwhere', function(x) return x:nonzero() end)

------------------------------------------------------------------ composed index ops
-- Written with the kernel-backed ops above, so they run on every device and
-- are differentiable through them. Errors of the inner op are renamed.
local function renamed(op, inner, f, ...)
  local ok, r = pcall(f, ...)
  if not ok then error((tostring(r):gsub('^.-' .. inner .. ': ', op .. ': ')), 3) end
  return r
end

-- idx (1-D) as an index of x's shape with `n` entries along dim d.
local function spread(x, d, idx)
  local shape, view = x:size():totable(), {}
  for i = 1, #shape do view[i] = 1 end
  view[d], shape[d] = idx:numel(), idx:numel()
  return idx:reshape(view):expand(shape)
end

local function number_value(v, op)
  if is_tensor(v) then
    if v:numel() ~= 1 then error(op .. ': value must be a number or a 1-element tensor', 3) end
    return v:item()
  end
  if type(v) == 'boolean' then return v and 1 or 0 end
  if type(v) ~= 'number' then error(op .. ': value must be a number, got ' .. type(v), 3) end
  return v
end

local function need_dims(x, op)
  if x:dim() == 0 then error(op .. ': input must have at least 1 dim, got a 0-d tensor', 3) end
end

-- A 1-based dim of x (negative from the end), checked.
local function lua_dim(x, d, op)
  dim(d, op, 3)
  local nd = x:dim()
  local r = d < 0 and nd + d + 1 or d
  if r < 1 or r > math.max(nd, 1) then
    error(('%s: dim %d out of range for a %d-d tensor'):format(op, d, nd), 3)
  end
  return r
end

--- x:index_fill(dim, index, value): entries at index along dim set to value.
def('index_fill', function(x, d, idx, value)
  need_dims(x, 'index_fill')
  d = lua_dim(x, d, 'index_fill')
  idx = index_tensor(idx, 'index_fill', x):reshape(-1)
  local v = number_value(value, 'index_fill')
  return renamed('index_fill', 'scatter', x.scatter, x, d, spread(x, d, idx), v)
end)
function methods.index_fill_(x, d, idx, value) return x:copy_(x:index_fill(d, idx, value)) end

--- x:index_copy(dim, index, source): slices of source put at index along dim
-- (source is x's shape with #index entries along dim).
def('index_copy', function(x, d, idx, src)
  need_dims(x, 'index_copy')
  check_tensor('index_copy', src, 'source')
  d = lua_dim(x, d, 'index_copy')
  idx = index_tensor(idx, 'index_copy', x):reshape(-1)
  local want = x:size():totable()
  want[d] = idx:numel()
  local got = src:size():totable()
  if table.concat(got, ',') ~= table.concat(want, ',') then
    error(('index_copy: source of shape [%s] must have shape [%s] (the input [%s] with %d '
           .. 'entries along dim %d)'):format(table.concat(got, ', '), table.concat(want, ', '),
           table.concat(x:size():totable(), ', '), idx:numel(), d), 2)
  end
  return renamed('index_copy', 'scatter', x.scatter, x, d, spread(x, d, idx), src)
end)
function methods.index_copy_(x, d, idx, src) return x:copy_(x:index_copy(d, idx, src)) end

--- x:take(index): x flattened, read at index (the result has index's shape).
def('take', function(x, idx)
  idx = index_tensor(idx, 'take', x)
  local r = renamed('take', 'index_select', x.index_select, x:reshape(-1), 1, idx:reshape(-1))
  return r:view(idx:size():totable())
end)

--- x:put(index, source[, {accumulate = false}]): x flattened, written (or
-- added to, with accumulate) at index from source (flattened).
local function put(x, idx, src, opts)
  if type(opts) == 'table' then require('oneflow._args').check_options('put', opts, {'accumulate'}) end
  idx = index_tensor(idx, 'put', x):reshape(-1)
  check_tensor('put', src, 'source')
  if src:numel() ~= idx:numel() then
    error(('put: source has %d elements for %d indices'):format(src:numel(), idx:numel()), 3)
  end
  local flat, s = x:reshape(-1), src:reshape(-1)
  local acc = type(opts) == 'table' and opts.accumulate or opts == true
  local r = acc and renamed('put', 'index_add', flat.index_add, flat, 1, idx, s)
            or renamed('put', 'scatter', flat.scatter, flat, 1, idx, s)
  return r:view(x:size():totable())
end
def('put', put)
--- x:put_(index, source, {accumulate = false}): writes source at the 1-based flat index of x.
function methods.put_(x, idx, src, opts) return x:copy_(put(x, idx, src, opts)) end

--- x:masked_scatter(mask, source): where mask (bool, broadcast to x) is
-- true, the next elements of source in row-major order.
local function masked_scatter(x, mask, src)
  check_tensor('masked_scatter', mask, 'mask')
  check_tensor('masked_scatter', src, 'source')
  if mask.dtype.name ~= 'bool' then
    error('masked_scatter: mask must be a bool tensor, got ' .. mask.dtype.name, 3)
  end
  local shape = x:size():totable()
  local ok, m = pcall(mask.expand, mask, shape)
  if not ok then
    error(('masked_scatter: mask of shape [%s] does not broadcast to the input [%s]'):format(
      table.concat(mask:size():totable(), ', '), table.concat(shape, ', ')), 3)
  end
  local pos = m:reshape(-1):nonzero():reshape(-1)
  local k = pos:numel()
  if k > src:numel() then
    error(('masked_scatter: the mask selects %d elements but source has only %d'):format(
      k, src:numel()), 3)
  end
  local s = src:reshape(-1):narrow(1, 1, k)
  return x:reshape(-1):scatter(1, pos, s):view(shape)
end
--- flow.masked_scatter(x, mask, source): x with source's elements, in order, where mask is true.
-- @function flow.masked_scatter
def('masked_scatter', masked_scatter)
function methods.masked_scatter_(x, mask, src) return x:copy_(masked_scatter(x, mask, src)) end

--- x:kthvalue(k[, dim = -1][, {keepdim = false}]) -> values, indices: the
-- k-th smallest along dim (ties: the first in the stable order).
def('kthvalue', function(x, k, d, opts)
  if type(d) == 'table' then d, opts = nil, d end
  opts = A.check_options('kthvalue', opts, {keepdim = true})
  if type(k) ~= 'number' or k ~= math.floor(k) then
    error('kthvalue: k must be an integer, got ' .. tostring(k), 2)
  end
  local cd = d == nil and math.max(x:dim(), 1) or lua_dim(x, d, 'kthvalue')
  local len = x:dim() == 0 and 1 or x:size(cd)
  if k < 1 or k > len then
    error(('kthvalue: k %d out of range for dim %d of size %d (expected 1..%d)'):format(
      k, cd, len, len), 2)
  end
  if x:dim() == 0 then return x:clone(), T.flow.ones({}, {dtype = 'int64', device = x.device}) end
  local v, i = x:sort(cd)
  v, i = v:narrow(cd, k, 1), i:narrow(cd, k, 1)
  if not (opts and opts.keepdim) then v, i = v:squeeze(cd), i:squeeze(cd) end
  return v, i
end)

local types = require 'oneflow.types'
local flow, shape_str, as_tensor = T.flow, A.shape_str, T.as_tensor_like

------------------------------------------------------------------ searching
local function search(op, seq, v, opts)
  opts = A.check_options(op, opts, {right = true, side = true, out_int32 = true})
  local right = opts.right or opts.side == 'right'
  if opts.side ~= nil and opts.side ~= 'left' and opts.side ~= 'right' then
    error(op .. ": side must be 'left' or 'right', got " .. tostring(opts.side), 3)
  end
  if opts.right == true and opts.side == 'left' then
    error(op .. ": right = true contradicts side = 'left'", 3)
  end
  local scalar = type(v) == 'number'
  if scalar then v = as_tensor(v, seq):reshape(1) end
  if seq:dim() == 0 then error(op .. ': the boundaries must have at least 1 dim', 3) end
  if seq:dim() > 1 then
    local ok = v:dim() == seq:dim()
    for i = 1, seq:dim() - 1 do ok = ok and v:size(i) == seq:size(i) end
    if not ok then
      error(('%s: the leading dims of the sorted sequence %s and the values %s must match'):format(
        op, shape_str(seq), shape_str(v)), 3)
    end
  end
  local n = seq:size(-1)
  local s = seq:dim() == 1 and seq or seq:unsqueeze(-2)           -- (..., 1, n)
  local vv = v:unsqueeze(-1)                                      -- (..., m, 1)
  local before = right and s:le(vv) or s:lt(vv)
  local res = before:sum(-1) + 1
  if v:is_floating_point() then res = flow.where(v:isnan(), as_tensor(n + 1, res), res) end
  if opts.out_int32 then res = res:to(types.by_name.int32) end
  if scalar then res = res:reshape({}) end
  return res
end

--- flow.searchsorted(sorted, values, {right = false, side =, out_int32 =}):
-- the 1-based positions where values would be inserted to keep each row
-- of sorted in order (1 .. n + 1; torch's result + 1). values may be a number.
def('searchsorted', function(seq, v, opts)
  check_tensor('searchsorted', seq, 'sorted_sequence')
  if not is_tensor(v) and type(v) ~= 'number' then
    error('searchsorted: values must be a tensor or a number, got ' .. type(v), 2)
  end
  return search('searchsorted', seq, v, opts)
end, 'func')

--- flow.bucketize(x, boundaries, {right = false, out_int32 =}): the 1-based
-- bucket of each element (1 .. #boundaries + 1; torch's result + 1).
def('bucketize', function(x, boundaries, opts)
  if not is_tensor(x) and type(x) ~= 'number' then
    error('bucketize: input must be a tensor or a number, got ' .. type(x), 2)
  end
  check_tensor('bucketize', boundaries, 'boundaries')
  if boundaries:dim() ~= 1 then
    error(('bucketize: boundaries must be 1-D, got shape %s'):format(shape_str(boundaries)), 2)
  end
  opts = A.check_options('bucketize', opts, {right = true, out_int32 = true})
  return search('bucketize', boundaries, x, {right = opts.right, out_int32 = opts.out_int32})
end)

------------------------------------------------------------------ SBP (global tensors)
local R = require 'oneflow.distributed.rules'
T.sbp('cat', R.cat)

return {}
