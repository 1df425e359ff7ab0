-- oneflow.ops.scan: running (cumulative) ops along one dim -- cumsum and
-- cumprod (C kernels, core/ops/reduce.c), cummax and cummin (values and
-- 1-based indices), and diff, their inverse. Dims are 1-based, negative
-- from the end.
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local types = require 'oneflow.types'
local A = require 'oneflow._args'

local def, is_tensor, flow, is_options = T.def, T.is_tensor, T.flow, A.is_options
local check_tensor, norm_dim, int64 = A.check_tensor, A.norm_dim, types.by_name.int64
local bool = types.by_name.bool
local C = core.C
local along_dim = require('oneflow.ops.reduce').along_dim
local M = {}

------------------------------------------------------------------ cumsum / cumprod (core/ops/reduce.c)
-- x:cumsum(dim[, {dtype =}]): ints and bool accumulate into int64.
local function cumulative(is_prod, name)
  return along_dim(C.of_cumulative, is_prod, name, 'x:' .. name .. '(1)')
end
M.cumsum = def('cumsum', cumulative(0, 'cumsum'))
M.cumprod = def('cumprod', cumulative(1, 'cumprod'))


------------------------------------------------------------------ cummax / cummin
-- x with dim d moved last, as a (rows, n) matrix, and the function that
-- turns a (rows, k) result back into x's layout with k in place of dim d.
local function rows_of(x, d)
  local moved = flow.movedim(x, d, -1)
  local shape = moved:size():totable()
  local n = shape[#shape]
  local rows = moved:reshape(-1, n)
  local function back(t)
    local sh = {unpack(shape)}
    sh[#sh] = t:size(2)
    return flow.movedim(t:reshape(unpack(sh)), -1, d)
  end
  return rows, back
end

M.rows_of = rows_of

local cum_extreme_fn = {}
local function cum_extreme(op, better)
  cum_extreme_fn[op] = function(x, d)
    check_tensor(op, x)
    if d == nil then error(op .. ': dim is required', 2) end
    if x:dim() == 0 then
      norm_dim(op, d, 1)
      local v, i = cum_extreme_fn[op](x:reshape(1), 1)
      return v:reshape({}), i:reshape({})
    end
    d = norm_dim(op, d, x:dim())
    if x:numel() == 0 then
      return x:clone(), flow.zeros(x:size():totable(), {dtype = int64, device = x.device})
    end
    local rows, back = rows_of(x, d)
    local data = rows:detach():to(types.by_name.float64):totable()
    local idx = {}
    for r = 1, #data do
      local row, out, best, ir = data[r], {}, nil, 1
      for j = 1, #row do
        local v = row[j]
        -- like torch: a NaN always takes over, ties take the later index
        if j == 1 or v ~= v or (best == best and better(v, best)) then best, ir = v, j end
        out[j] = ir
      end
      idx[r] = out
    end
    local index = back(flow.tensor(idx, {dtype = int64, device = x.device}))
    return x:gather(d, index), index
  end
  return cum_extreme_fn[op]
end
--- x:cummax(dim) -> values, 1-based indices of the running maximum (the
-- latest of equal maxima; NaN propagates). Values are differentiable.
def('cummax', cum_extreme('cummax', function(v, best) return v >= best end))
--- x:cummin(dim) -> values, indices of the running minimum.
def('cummin', cum_extreme('cummin', function(v, best) return v <= best end))


------------------------------------------------------------------ diff
--- x:diff(n = 1, dim = -1, {prepend =, append =}) (or x:diff({n =, dim =, ...})):
-- the n-th forward difference along dim; bool tensors give x[i+1] ~= x[i].
def('diff', function(x, n, d, opts)
  check_tensor('diff', x)
  if is_options(n) then opts, n = n, nil end
  if is_options(d) then opts, d = d, nil end
  opts = A.check_options('diff', opts, {n = true, dim = true, prepend = true, append = true})
  n, d = n or opts.n or 1, d or opts.dim or -1
  if type(n) ~= 'number' or n < 0 or n ~= math.floor(n) then
    error('diff: n must be a non-negative integer, got ' .. tostring(n), 2)
  end
  if x:dim() == 0 then error('diff: expected a tensor with at least 1 dim, got a 0-d tensor', 2) end
  d = norm_dim('diff', d, x:dim())
  if opts.prepend or opts.append then
    local parts = {}
    for _, p in ipairs({opts.prepend or false, x, opts.append or false}) do
      if p then
        if not is_tensor(p) then error('diff: prepend and append must be tensors, got ' .. type(p), 2) end
        parts[#parts + 1] = p
      end
    end
    x = flow.cat(parts, d)
  end
  for _ = 1, n do
    local len = x:size(d)
    if len == 0 then break end
    local hi, lo = x:narrow(d, 2, len - 1), x:narrow(d, 1, len - 1)
    x = x.dtype == bool and hi:ne(lo) or hi - lo
  end
  return x
end)


------------------------------------------------------------------ SBP (global tensors)
local R = require 'oneflow.distributed.rules'
T.sbp({'cumsum', 'cumprod'}, R.along_dim(2))

return M
