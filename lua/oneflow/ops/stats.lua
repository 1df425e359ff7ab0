-- oneflow.ops.stats: order statistics and counting, composed from sort,
-- gather and scatter: median, nanmedian, quantile, mode (values and 1-based
-- indices), unique, bincount, histc.
local rows_of = require('oneflow.ops.scan').rows_of
local T = require 'oneflow.tensor'
local types = require 'oneflow.types'
local A = require 'oneflow._args'

local def, is_tensor, flow, is_options = T.def, T.is_tensor, T.flow, A.is_options
local check_tensor, shape_str, norm_dim = A.check_tensor, A.shape_str, A.norm_dim
local int64, bool, as_tensor = types.by_name.int64, types.by_name.bool, T.as_tensor_like

-- Per row of the sorted matrix, the 1-based position to take -> values, indices.
local function median_impl(op, x, d, keepdim, skip_nan)
  check_tensor(op, x)
  if is_options(d) then
    A.check_options(op, d, {dim = true, keepdim = true})
    d, keepdim = d.dim, d.keepdim
  end
  if type(keepdim) == 'table' then keepdim = A.check_options(op, keepdim, {keepdim = true}).keepdim end
  local global = d == nil
  if global then x = x:reshape(-1); d = 1 end
  if x:dim() == 0 then x = x:reshape(1); d = 1 end
  d = norm_dim(op, d, x:dim())
  local n = x:size(d)
  if n == 0 then
    error(('%s: cannot take the median of an empty dim (shape %s)'):format(op, shape_str(x)), 3)
  end
  local rows, back = rows_of(x, d)
  local _, order = rows:detach():sort(2)   -- NaN last
  local nans = x:is_floating_point() and rows:isnan():sum(2):totable() or nil
  local pos = {}
  for r = 1, rows:size(1) do
    local c = nans and nans[r] or 0
    if c == 0 then pos[r] = {math.floor((n - 1) / 2) + 1}
    elseif skip_nan then pos[r] = {math.max(1, math.floor((n - c - 1) / 2) + 1)}
    else pos[r] = {n - c + 1} end   -- the first NaN
  end
  local index = order:gather(2, flow.tensor(pos, {dtype = int64, device = x.device}))
  local values = rows:gather(2, index)
  if global then return values:reshape({}) end
  values, index = back(values), back(index)
  if not keepdim then values, index = values:squeeze(d), index:squeeze(d) end
  return values, index
end
--- x:median() -> the lower median of all elements (NaN if any is NaN);
-- x:median(dim, keepdim | {keepdim =}) -> values, 1-based indices.
def('median', function(x, d, keepdim) return median_impl('median', x, d, keepdim, false) end)
--- x:nanmedian(...): the same, ignoring NaN (NaN only where all are NaN).
def('nanmedian', function(x, d, keepdim) return median_impl('nanmedian', x, d, keepdim, true) end)

local function round_half_even(v)
  local f = math.floor(v)
  local r = v - f
  if r > 0.5 or (r == 0.5 and f % 2 == 1) then return f + 1 end
  return f
end

--- x:quantile(q, dim?, {keepdim = false, interpolation = 'linear'}): q is a
-- number or a 1-D tensor in [0, 1] (a tensor q adds a leading dim of #q);
-- without dim x is flattened. interpolation: linear, lower, higher,
-- midpoint, nearest. Rows with NaN give NaN.
def('quantile', function(x, q, d, opts)
  check_tensor('quantile', x)
  if is_options(d) then opts, d = d, nil end
  if type(opts) == 'boolean' then opts = {keepdim = opts} end
  opts = A.check_options('quantile', opts, {dim = true, keepdim = true, interpolation = true})
  if d == nil then d = opts.dim end
  local mode = opts.interpolation or 'linear'
  local modes = {linear = true, lower = true, higher = true, midpoint = true, nearest = true}
  if not modes[mode] then error('quantile: unknown interpolation ' .. tostring(mode), 2) end
  if not x:is_floating_point() then
    error(('quantile: expected a floating point input, got %s'):format(tostring(x.dtype)), 2)
  end
  local qs, q_dim
  if is_tensor(q) then
    if q:dim() > 1 then
      error(('quantile: q must be a number or a 0-D/1-D tensor, got shape %s'):format(shape_str(q)), 2)
    end
    q_dim = q:dim() == 1
    qs = q_dim and q:totable() or {q:item()}
  elseif type(q) == 'number' then
    qs = {q}
  else
    error('quantile: q must be a number or a tensor, got ' .. type(q), 2)
  end
  for _, v in ipairs(qs) do
    if not (v >= 0 and v <= 1) then error(('quantile: q must be in [0, 1], got %s'):format(tostring(v)), 2) end
  end
  local keepdim, global = opts.keepdim, d == nil
  local src = x
  if global then src = x:reshape(-1); d = 1 end
  if src:dim() == 0 then src = src:reshape(1); d = 1 end
  d = norm_dim('quantile', d, src:dim())
  local n = src:size(d)
  if n == 0 then error(('quantile: cannot take a quantile of an empty dim (shape %s)'):format(shape_str(x)), 2) end
  local rows, back = rows_of(src, d)
  local _, order = rows:detach():sort(2)
  local sorted = rows:gather(2, order)                      -- differentiable
  local has_nan = rows:isnan():any(2, true)                 -- (rows, 1)
  local outs = {}
  for i, v in ipairs(qs) do
    local pos = v * (n - 1)
    local lo, hi = math.floor(pos), math.ceil(pos)
    local w = pos - lo
    if mode == 'lower' then w = 0
    elseif mode == 'higher' then w = lo == hi and 0 or 1
    elseif mode == 'midpoint' then w = lo == hi and 0 or 0.5
    elseif mode == 'nearest' then lo = round_half_even(pos); hi, w = lo, 0 end
    local a = sorted:narrow(2, lo + 1, 1)
    local r = a
    if w ~= 0 then r = a + (sorted:narrow(2, hi + 1, 1) - a) * w end
    r = flow.where(has_nan, as_tensor(0 / 0, r), r)
    if global then
      local shape = {}
      if keepdim then for j = 1, x:dim() do shape[j] = 1 end end
      r = r:reshape(shape)
    else
      r = back(r)
      if not keepdim then r = r:squeeze(d) end
    end
    outs[i] = r
  end
  if q_dim then return flow.stack(outs, 1) end
  return outs[1]
end)

-- Per row: the most frequent value (the smallest of equally frequent ones)
-- and the 1-based position of its last occurrence, as PyTorch.
local function row_modes(vals, n)
  local order = {}
  for j = 1, n do order[j] = j end
  table.sort(order, function(a, b)
    if vals[a] ~= vals[b] then return vals[a] < vals[b] end
    return a < b
  end)
  local best_len, best_at, i = 0, 1, 1
  while i <= n do
    local j = i
    while j < n and vals[order[j + 1]] == vals[order[i]] do j = j + 1 end
    if j - i + 1 > best_len then best_len, best_at = j - i + 1, j end
    i = j + 1
  end
  return order[best_at]   -- equal values are in position order: the last one
end

--- x:mode(dim = -1, keepdim = false | {keepdim =}) -> values, 1-based indices:
-- per slice along dim the most frequent value (the smallest among equally
-- frequent ones) and where it last occurs. Values are differentiable.
def('mode', function(x, d, keepdim)
  check_tensor('mode', x)
  if is_options(d) then
    A.check_options('mode', d, {dim = true, keepdim = true})
    d, keepdim = d.dim, d.keepdim
  end
  if type(keepdim) == 'table' then keepdim = A.check_options('mode', keepdim, {keepdim = true}).keepdim end
  local scalar = x:dim() == 0
  if scalar then x = x:reshape(1) end
  d = norm_dim('mode', d or -1, x:dim())
  local n = x:size(d)
  if n == 0 then error(('mode: cannot take the mode of an empty dim (shape %s)'):format(shape_str(x)), 2) end
  local rows, back = rows_of(x, d)
  local data = rows:detach():totable()
  local pos = {}
  for r, vals in ipairs(data) do pos[r] = {row_modes(vals, n)} end
  local index = flow.tensor(pos, {dtype = int64, device = x.device})
  local values = rows:gather(2, index)
  values, index = back(values), back(index)
  if scalar then return values:reshape({}), index:reshape({}) end
  if not keepdim then values, index = values:squeeze(d), index:squeeze(d) end
  return values, index
end)


------------------------------------------------------------------ counting
--- x:unique({sorted = true, return_inverse = false, return_counts = false}):
-- the distinct elements of the flattened x in ascending order; then, as
-- asked, the 1-based inverse indices (x's shape) and the counts (int64).
def('unique', function(x, opts)
  check_tensor('unique', x)
  opts = A.check_options('unique', opts, {sorted = true, return_inverse = true, return_counts = true, dim = true})
  if opts.dim ~= nil then
    error('unique: only dim = nil (the flattened tensor) is supported', 2)
  end
  local flat = x:detach():reshape(-1)
  local is_bool = x.dtype == bool
  if is_bool then flat = flat:to(int64) end
  local vals = flat:totable()
  local n = #vals
  local order = {}
  for i = 1, n do order[i] = i end
  -- NaN sorts last; each NaN stays distinct (NaN ~= NaN), as in torch
  table.sort(order, function(a, b)
    local va, vb = vals[a], vals[b]
    if va ~= va then return false end
    if vb ~= vb then return true end
    if va == vb then return a < b end
    return va < vb
  end)
  local uniq, counts, inverse = {}, {}, {}
  for _, i in ipairs(order) do
    local v = vals[i]
    if #uniq == 0 or uniq[#uniq] ~= v then
      uniq[#uniq + 1] = v
      counts[#uniq] = 0
    end
    counts[#uniq] = counts[#uniq] + 1
    inverse[i] = #uniq
  end
  local dev = x.device
  local out = #uniq == 0 and flow.zeros(0, {dtype = x.dtype, device = dev})
    or flow.tensor(uniq, {dtype = is_bool and int64 or x.dtype, device = dev})
  if is_bool then out = out:to(bool) end
  local res = {out}
  if opts.return_inverse then
    res[#res + 1] = n == 0 and flow.zeros(x:size():totable(), {dtype = int64, device = dev})
      or flow.tensor(inverse, {dtype = int64, device = dev}):reshape(unpack(x:size():totable()))
  end
  if opts.return_counts then
    res[#res + 1] = #uniq == 0 and flow.zeros(0, {dtype = int64, device = dev})
      or flow.tensor(counts, {dtype = int64, device = dev})
  end
  return unpack(res)
end)

--- flow.bincount(x, {weights =, minlength = 0}): for a 1-D tensor of
-- non-negative integers (values, not indices), how often each value
-- 0 .. max occurs (int64), or the sum of the weights per value
-- (float32 weights give float32, others float64). Differentiable in weights.
def('bincount', function(x, opts)
  check_tensor('bincount', x)
  opts = A.check_options('bincount', opts, {weights = true, minlength = true})
  local w, minlength = opts.weights, opts.minlength or 0
  if x:dim() ~= 1 or x:is_floating_point() or x.dtype == bool then
    error(('bincount: expected a 1-D integer tensor, got shape %s and %s'):format(
      shape_str(x), tostring(x.dtype)), 2)
  end
  if minlength < 0 then error('bincount: minlength must be >= 0, got ' .. minlength, 2) end
  if w ~= nil then
    check_tensor('bincount', w, 'weights')
    if w:dim() ~= 1 or w:size(1) ~= x:size(1) then
      error(('bincount: weights %s must have the shape of the input %s'):format(shape_str(w), shape_str(x)), 2)
    end
  end
  local len = minlength
  if x:numel() > 0 then
    if x:amin():item() < 0 then error('bincount: input values must be >= 0', 2) end
    len = math.max(len, x:amax():item() + 1)
  end
  local dt = w == nil and int64 or (w.dtype == types.by_name.float32 and w.dtype or types.by_name.float64)
  local res = flow.zeros(len, {dtype = dt, device = x.device})
  if x:numel() == 0 then return res end
  local src = w and w:to(dt) or flow.ones(x:size(1), {dtype = dt, device = x.device})
  return res:scatter_add(1, x:to(int64) + 1, src)
end)

--- x:histc({bins = 100, min = 0, max = 0}) (or x:histc(bins, min, max)): the
-- counts of the elements in bins equal-width bins over [min, max] (the data's
-- range when min = max; values equal to max in the last bin; others outside
-- ignored), in x's float dtype.
def('histc', function(x, bins, lo, hi)
  check_tensor('histc', x)
  if is_options(bins) then
    A.check_options('histc', bins, {bins = true, min = true, max = true})
    bins, lo, hi = bins.bins, bins.min, bins.max
  end
  bins, lo, hi = bins or 100, lo or 0, hi or 0
  if not x:is_floating_point() then
    error(('histc: expected a floating point tensor, got %s'):format(tostring(x.dtype)), 2)
  end
  if type(bins) ~= 'number' or bins < 1 or bins ~= math.floor(bins) then
    error(('histc: bins must be a positive integer, got %s'):format(tostring(bins)), 2)
  end
  if lo > hi then error(('histc: max (%g) must be >= min (%g)'):format(hi, lo), 2) end
  local flat = x:detach():reshape(-1)
  if lo == hi and flat:numel() > 0 then lo, hi = flat:amin():item(), flat:amax():item() end
  if lo == hi then lo, hi = lo - 1, hi + 1 end
  local inside = flat:ge(lo):logical_and(flat:le(hi))
  local v = flat:masked_select(inside)
  local res = flow.zeros(bins, {dtype = x.dtype, device = x.device})
  if v:numel() == 0 then return res end
  local b = ((v - lo) * (bins / (hi - lo))):floor():clamp(0, bins - 1):to(int64)
  return res:scatter_add(1, b + 1, flow.ones(b:size(1), {dtype = x.dtype, device = x.device}))
end)

return {}
