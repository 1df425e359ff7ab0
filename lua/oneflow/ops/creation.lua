-- oneflow.ops.creation: factories composed in Lua (the C-backed ones --
-- zeros, ones, full, arange, linspace, eye, ... -- are in oneflow/tensor.lua,
-- core/ops/creation.c): tril_indices, triu_indices (1-based), logspace.
local T = require 'oneflow.tensor'
local types = require 'oneflow.types'
local A = require 'oneflow._args'

local def, flow, is_options = T.def, T.flow, A.is_options
local int64 = types.by_name.int64

-- The 1-based (row, col) pairs of a row x col matrix where keep(j - i) holds,
-- row-major, as a 2 x N int64 tensor.
local function tri_indices(op, keep, row, col, offset, opts)
  if is_options(offset) then opts, offset = offset, nil end
  opts = A.check_options(op, opts, {offset = true, dtype = true, device = true})
  offset = offset or opts.offset or 0
  for _, v in ipairs({row, col, offset}) do
    if type(v) ~= 'number' or v ~= math.floor(v) then
      error(('%s: row, col and offset must be integers, got %s'):format(op, tostring(v)), 3)
    end
  end
  if row < 0 or col < 0 then
    error(('%s: row and col must be >= 0, got %d and %d'):format(op, row, col), 3)
  end
  -- the pairs are listed on the host, one Lua loop step per cell: bounded
  -- so that a huge request fails at once instead of running for hours
  if row * col > 2 ^ 26 then
    error(('%s: row x col = %.0f cells is more than this host-side op lists (at most 2^26)')
          :format(op, row * col), 3)
  end
  local rs, cs = {}, {}
  for i = 1, row do
    for j = 1, col do
      if keep(j - i, offset) then rs[#rs + 1] = i; cs[#cs + 1] = j end
    end
  end
  local res = flow.tensor({rs, cs}, {dtype = opts.dtype or int64, device = opts.device})
  if #rs == 0 then res = flow.zeros(2, 0, {dtype = opts.dtype or int64, device = opts.device}) end
  return res
end

--- flow.tril_indices(row, col, offset = 0, {dtype =, device =}): 2 x N
-- 1-based indices of the lower triangle (j - i <= offset), row by row.
def('tril_indices', function(row, col, offset, opts)
  return tri_indices('tril_indices', function(d, k) return d <= k end, row, col, offset, opts)
end, 'func')
--- flow.triu_indices(row, col, offset = 0): the same for j - i >= offset.
def('triu_indices', function(row, col, offset, opts)
  return tri_indices('triu_indices', function(d, k) return d >= k end, row, col, offset, opts)
end, 'func')


--- flow.logspace(start, end, steps, base = 10, {dtype =, device =}):
-- base ^ linspace(start, end, steps) (function only).
def('logspace', function(start, stop, steps, base, opts)
  if type(base) == 'table' then base, opts = nil, base end
  opts = A.check_options('logspace', opts, {base = true, dtype = true, device = true, requires_grad = true})
  base = base or opts.base or 10
  for _, v in ipairs({start, stop, steps, base}) do
    if type(v) ~= 'number' then
      error('logspace: start, end, steps and base must be numbers, got ' .. type(v), 2)
    end
  end
  local dt = opts.dtype or T.get_default_dtype()
  local e = flow.linspace(start, stop, steps, {dtype = types.by_name.float64})
  return flow.pow(base, e):to(dt):to(opts.device or 'cpu')
end, 'func')

return {}
