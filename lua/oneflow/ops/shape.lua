-- oneflow.ops.shape: PyTorch's shape functions composed from views, cat and
-- index_select (core/ops/shape.c has the kernels they use): movedim/moveaxis,
-- unflatten, tolist, tensor_split, split_with_sizes, hsplit, vsplit,
-- repeat_interleave, broadcast_tensors, meshgrid, rot90, column_stack,
-- row_stack, dstack. Dims are 1-based, negative from the end.
local T = require 'oneflow.tensor'
local types = require 'oneflow.types'
local A = require 'oneflow._args'

local def, is_tensor, flow, is_options = T.def, T.is_tensor, T.flow, A.is_options
local check_tensor, shape_str, norm_dim, EMPTY = A.check_tensor, A.shape_str, A.norm_dim, A.EMPTY
local int64 = types.by_name.int64
local M = {}

------------------------------------------------------------------ shapes
local function dim_list(op, d, n)
  if type(d) == 'number' then d = {d} end
  if type(d) ~= 'table' then
    error(('%s: dims must be a number or a list, got %s'):format(op, type(d)), 3)
  end
  local res, seen = {}, {}
  for i = 1, #d do
    local v = norm_dim(op, d[i], n)
    if seen[v] then error(('%s: dim %d repeated'):format(op, v), 3) end
    seen[v] = true
    res[i] = v
  end
  return res
end

--- x:movedim(source, destination): dims (numbers or equal-length lists)
-- move to the new positions; the others keep their order. Alias moveaxis.
local function movedim(x, src, dst)
  check_tensor('movedim', x)
  local n = x:dim()
  local s, d = dim_list('movedim', src, n), dim_list('movedim', dst, n)
  if #s ~= #d then
    error(('movedim: source and destination have different lengths (%d vs %d)'):format(#s, #d), 2)
  end
  local perm, used = {}, {}
  for i = 1, #s do perm[d[i]] = s[i]; used[s[i]] = true end
  local rest = 1
  for p = 1, n do
    if perm[p] == nil then
      while used[rest] do rest = rest + 1 end
      perm[p] = rest
      rest = rest + 1
    end
  end
  if n == 0 then return x end
  return x:permute(unpack(perm))
end
def('movedim', movedim)
def('moveaxis', movedim)

--- x:unflatten(dim, sizes): splits dim into sizes (one may be -1).
def('unflatten', function(x, d, sizes)
  check_tensor('unflatten', x)
  local n = x:dim()
  d = norm_dim('unflatten', d, n)
  if type(sizes) ~= 'table' and not is_tensor(sizes) then
    error('unflatten: sizes must be a list, got ' .. type(sizes), 2)
  end
  if is_tensor(sizes) then sizes = sizes:totable() end
  if type(sizes.totable) == 'function' then sizes = sizes:totable() end
  local prod, free = 1, nil
  for i = 1, #sizes do
    A.integer('unflatten', sizes[i], nil, 'sizes[' .. i .. ']')
    if sizes[i] == -1 then free = i else prod = prod * sizes[i] end
  end
  local size = x:size(d)
  if (free and (prod == 0 or size % prod ~= 0)) or (not free and prod ~= size) then
    error(('unflatten: sizes {%s} do not multiply to the size %d of dim %d of %s'):format(
      table.concat(sizes, ','), size, d, shape_str(x)), 2)
  end
  local shape = {}
  for i = 1, n do
    if i == d then
      for j = 1, #sizes do shape[#shape + 1] = sizes[j] == -1 and size / prod or sizes[j] end
    else
      shape[#shape + 1] = x:size(i)
    end
  end
  return x:reshape(shape)
end)

--- x:tolist(): the same as x:totable() (nested Lua tables, or a number).
def('tolist', function(x) return x:totable() end, 'method')

-- Pieces of dim d (1-based) starting at the 1-based positions in starts.
local function split_at(x, d, starts)
  local size, res, from = x:size(d), {}, 1
  for i = 1, #starts + 1 do
    local to = i <= #starts and math.min(math.max(starts[i], from), size + 1) or size + 1
    res[i] = x:narrow(d, math.min(from, size + 1), to - from)
    from = to
  end
  return res
end

--- x:tensor_split(sections | indices, dim = 1): a number n gives n pieces
-- whose sizes differ by at most 1 (the first ones larger); a list gives the
-- 1-based positions where new pieces start (torch's split points + 1).
local function tensor_split(x, what, d, op)
  op = op or 'tensor_split'
  check_tensor(op, x)
  d = norm_dim(op, d or 1, x:dim())
  local size = x:size(d)
  if is_tensor(what) then
    what = what:dim() == 0 and what:item() or what:totable()
  end
  if type(what) == 'number' then
    if what < 1 or what ~= math.floor(what) then
      error(('%s: the number of sections must be a positive integer, got %s'):format(op, tostring(what)), 3)
    end
    local base, extra, starts, pos = math.floor(size / what), size % what, {}, 1
    for i = 1, what - 1 do
      pos = pos + base + (i <= extra and 1 or 0)
      starts[i] = pos
    end
    return split_at(x, d, starts)
  end
  if type(what) ~= 'table' then
    error(('%s: expected a number of sections or a list of indices, got %s'):format(op, type(what)), 3)
  end
  for i = 1, #what do
    if type(what[i]) ~= 'number' or what[i] < 1 then
      error(('%s: split indices are 1-based positions >= 1, got %s'):format(op, tostring(what[i])), 3)
    end
  end
  return split_at(x, d, what)
end
def('tensor_split', function(x, what, d) return tensor_split(x, what, d) end)

--- x:split_with_sizes(sizes, dim = 1): pieces of the given sizes (they must add up).
def('split_with_sizes', function(x, sizes, d)
  check_tensor('split_with_sizes', x)
  if type(sizes) ~= 'table' then
    error('split_with_sizes: sizes must be a list, got ' .. type(sizes), 2)
  end
  return x:split(sizes, d or 1)
end)

local function even_split(op, d)
  return function(x, what)
    check_tensor(op, x)
    local dim = d
    if op == 'hsplit' then dim = x:dim() == 1 and 1 or 2 end
    if x:dim() < (op == 'hsplit' and 1 or 2) then
      error(('%s: expected at least %d dims, got shape %s'):format(
        op, op == 'hsplit' and 1 or 2, shape_str(x)), 2)
    end
    if type(what) == 'number' and x:size(dim) % what ~= 0 then
      error(('%s: dim %d of size %d is not divisible into %d sections'):format(
        op, dim, x:size(dim), what), 2)
    end
    return tensor_split(x, what, dim, op)
  end
end
--- x:hsplit(n | indices): tensor_split along dim 2 (dim 1 for 1-D); n must divide.
def('hsplit', even_split('hsplit'))
--- x:vsplit(n | indices): tensor_split along dim 1 of a tensor with >= 2 dims.
def('vsplit', even_split('vsplit', 1))

--- x:repeat_interleave(repeats, dim?): repeats each element (each slice along
-- dim) repeats times; repeats is a number or a 1-D tensor (one count per
-- element). Without dim x is flattened. flow.repeat_interleave(counts) alone
-- gives the 1-based indices 1..n, each repeated counts[i] times.
def('repeat_interleave', function(x, repeats, d)
  check_tensor('repeat_interleave', x)
  if repeats == nil then
    local counts = x:totable()
    local idx = {}
    for i = 1, #counts do
      for _ = 1, counts[i] do idx[#idx + 1] = i end
    end
    if #idx == 0 then return flow.zeros(0, {dtype = int64, device = x.device}) end
    return flow.tensor(idx, {dtype = int64, device = x.device})
  end
  if d == nil then
    x = x:reshape(-1)
    d = 1
  end
  d = norm_dim('repeat_interleave', d, x:dim())
  local size = x:size(d)
  if type(repeats) == 'number' or (is_tensor(repeats) and repeats:numel() == 1) then
    local r = type(repeats) == 'number' and repeats or repeats:reshape(-1)[1]:item()
    if r < 0 or r ~= math.floor(r) then
      error('repeat_interleave: repeats must be a non-negative integer, got ' .. tostring(r), 2)
    end
    local idx = {}
    for i = 1, size do for _ = 1, r do idx[#idx + 1] = i end end
    repeats = idx
  elseif is_tensor(repeats) then
    if repeats:dim() ~= 1 or repeats:size(1) ~= size then
      error(('repeat_interleave: repeats must be a number or a 1-D tensor of size %d, got shape %s'):format(
        size, shape_str(repeats)), 2)
    end
    local counts, idx = repeats:totable(), {}
    for i = 1, size do
      if counts[i] < 0 then error('repeat_interleave: repeats must be >= 0, got ' .. counts[i], 2) end
      for _ = 1, counts[i] do idx[#idx + 1] = i end
    end
    repeats = idx
  else
    error('repeat_interleave: repeats must be a number or a tensor, got ' .. type(repeats), 2)
  end
  local index = #repeats == 0 and flow.zeros(0, {dtype = int64, device = x.device})
    or flow.tensor(repeats, {dtype = int64, device = x.device})
  return x:index_select(d, index)
end)

-- The broadcast shape of several shapes (Lua lists), or an error naming op.
local function broadcast_shape(op, shapes)
  local n = 0
  for _, s in ipairs(shapes) do n = math.max(n, #s) end
  local res = {}
  for i = 1, n do
    local size = 1
    for k, s in ipairs(shapes) do
      local v = s[#s - n + i] or 1
      if v ~= 1 then
        if size ~= 1 and size ~= v then
          error(('%s: shapes cannot be broadcast (size %d vs %d at dim %d of tensor %d)'):format(
            op, size, v, i, k), 4)
        end
        size = v
      end
    end
    res[i] = size
  end
  return res
end

-- A list of tensors from f(t1, t2, ...) or f({t1, t2, ...}) (+ optional options).
local function tensor_list(op, ...)
  local args, opts = {...}, nil
  local n = select('#', ...)
  if n > 0 and is_options(args[n]) then opts = args[n]; args[n] = nil; n = n - 1 end
  if n == 1 and type(args[1]) == 'table' and not is_tensor(args[1]) then args = args[1]; n = #args end
  for i = 1, n do
    if not is_tensor(args[i]) then
      error(('%s: argument %d is not a tensor (%s)'):format(op, i, type(args[i])), 3)
    end
  end
  return args, opts or EMPTY
end

--- flow.broadcast_tensors(a, b, ...) (or a list): the tensors expanded to
-- their common shape, as a Lua array.
def('broadcast_tensors', function(...)
  local ts = tensor_list('broadcast_tensors', ...)
  local shapes = {}
  for i, t in ipairs(ts) do shapes[i] = t:size():totable() end
  local shape = broadcast_shape('broadcast_tensors', shapes)
  local res = {}
  for i, t in ipairs(ts) do res[i] = #shape == 0 and t or t:expand(unpack(shape)) end
  return res
end, 'func')

--- flow.meshgrid(a, b, ..., {indexing = 'ij'}) (or a list): N 1-D tensors
-- give N grids (a Lua array) of shape (#a, #b, ...); 'xy' swaps the first two dims.
def('meshgrid', function(...)
  local ts, opts = tensor_list('meshgrid', ...)
  local indexing = A.check_options('meshgrid', opts, {indexing = true}).indexing or 'ij'
  if indexing ~= 'ij' and indexing ~= 'xy' then
    error("meshgrid: indexing must be 'ij' or 'xy', got " .. tostring(indexing), 2)
  end
  local n = #ts
  local pos = {}
  for i = 1, n do
    if ts[i]:dim() > 1 then
      error(('meshgrid: expected 0-D or 1-D tensors, tensor %d has shape %s'):format(i, shape_str(ts[i])), 2)
    end
    pos[i] = i
  end
  if indexing == 'xy' and n >= 2 then pos[1], pos[2] = 2, 1 end
  local shape = {}
  for i = 1, n do shape[pos[i]] = ts[i]:numel() end
  local res = {}
  for i = 1, n do
    local view = {}
    for p = 1, n do view[p] = 1 end
    view[pos[i]] = ts[i]:numel()
    res[i] = ts[i]:reshape(unpack(view)):expand(unpack(shape))
  end
  return res
end, 'func')

--- x:rot90(k = 1, dims = {1, 2}): rotates by 90 degrees k times, from the
-- first dim towards the second.
def('rot90', function(x, k, dims)
  check_tensor('rot90', x)
  if type(k) == 'table' then k, dims = nil, k end
  k, dims = k or 1, dims or {1, 2}
  if type(dims) ~= 'table' or #dims ~= 2 then
    error('rot90: dims must be a list of two dims', 2)
  end
  if x:dim() < 2 then
    error(('rot90: expected at least 2 dims, got shape %s'):format(shape_str(x)), 2)
  end
  local d1, d2 = norm_dim('rot90', dims[1], x:dim()), norm_dim('rot90', dims[2], x:dim())
  if d1 == d2 then error(('rot90: the two dims must differ, both are %d'):format(d1), 2) end
  k = k % 4
  if k == 1 then return x:flip(d2):transpose(d1, d2) end
  if k == 2 then return x:flip({d1, d2}) end
  if k == 3 then return x:flip(d1):transpose(d1, d2) end
  return x:clone()
end)

--- flow.column_stack(list): 0-D and 1-D tensors become columns, then hstack.
def('column_stack', function(...)
  local ts = tensor_list('column_stack', ...)
  local cols = {}
  for i, t in ipairs(ts) do cols[i] = t:dim() <= 1 and t:reshape(t:numel(), 1) or t end
  return flow.hstack(cols)
end, 'func')

--- flow.row_stack(list): the same as vstack.
def('row_stack', function(...)
  return flow.vstack((tensor_list('row_stack', ...)))
end, 'func')

--- flow.dstack(list): stacks along dim 3 after making each tensor at least 3-D
-- ((n) -> (1, n, 1), (m, n) -> (m, n, 1)).
def('dstack', function(...)
  local ts = tensor_list('dstack', ...)
  local t3 = {}
  for i, t in ipairs(ts) do
    local nd = t:dim()
    if nd == 0 then t3[i] = t:reshape(1, 1, 1)
    elseif nd == 1 then t3[i] = t:reshape(1, t:size(1), 1)
    elseif nd == 2 then t3[i] = t:unsqueeze(3)
    else t3[i] = t end
  end
  return flow.cat(t3, 3)
end, 'func')


M.broadcast_shape, M.tensor_list = broadcast_shape, tensor_list

return M
