-- oneflow.ops.extras_stats: order statistics, searching and counting, and
-- einsum (see extras.lua for the conventions):
--   order statistics: cummax, cummin, median, nanmedian, quantile, mode
--   searching and counting: searchsorted, bucketize, unique, bincount, histc
--   distances and sampling: cdist, multinomial
--   einsum
local X = require 'oneflow.ops._extras'
local types = X.types
local def, is_tensor, is_options, flow, EMPTY = X.def, X.is_tensor, X.is_options, X.flow, X.EMPTY
local int64, bool, shape_str, check_tensor = X.int64, X.bool, X.shape_str, X.check_tensor
local norm_dim, is_float, as_tensor = X.norm_dim, X.is_float, X.as_tensor

------------------------------------------------------------------ order statistics
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

-- Per row of the sorted matrix, the 1-based position to take -> values, indices.
local function median_impl(op, x, d, keepdim, skip_nan)
  check_tensor(op, x)
  if is_options(d) then d, keepdim = d.dim, d.keepdim end
  if type(keepdim) == 'table' then keepdim = keepdim.keepdim end
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
  local nans = is_float(x) and rows:isnan():sum(2):totable() or nil
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
  opts = opts or EMPTY
  if d == nil then d = opts.dim end
  local mode = opts.interpolation or 'linear'
  local modes = {linear = true, lower = true, higher = true, midpoint = true, nearest = true}
  if not modes[mode] then error('quantile: unknown interpolation ' .. tostring(mode), 2) end
  if not is_float(x) then
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
  if is_options(d) then d, keepdim = d.dim, d.keepdim end
  if type(keepdim) == 'table' then keepdim = keepdim.keepdim end
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

------------------------------------------------------------------ searching, counting
local function search(op, seq, v, opts)
  opts = opts or EMPTY
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
  if is_float(v) then res = flow.where(v:isnan(), as_tensor(n + 1, res), res) end
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
  return search('bucketize', boundaries, x, {right = opts and opts.right, out_int32 = opts and opts.out_int32})
end)

--- x:unique({sorted = true, return_inverse = false, return_counts = false}):
-- the distinct elements of the flattened x in ascending order; then, as
-- asked, the 1-based inverse indices (x's shape) and the counts (int64).
def('unique', function(x, opts)
  check_tensor('unique', x)
  opts = opts or EMPTY
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
  opts = opts or EMPTY
  local w, minlength = opts.weights, opts.minlength or 0
  if x:dim() ~= 1 or is_float(x) or x.dtype == bool then
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
  if is_options(bins) then bins, lo, hi = bins.bins, bins.min, bins.max end
  bins, lo, hi = bins or 100, lo or 0, hi or 0
  if not is_float(x) then
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

--- flow.cdist(x1, x2, {p = 2}): the p-norm distances between the rows of x1
-- [..., P, M] and x2 [..., R, M] -> [..., P, R] (batch dims broadcast).
-- Differentiable.
def('cdist', function(x1, x2, opts)
  check_tensor('cdist', x1)
  check_tensor('cdist', x2)
  local p = (type(opts) == 'number' and opts) or (opts or EMPTY).p or 2
  if x1:dim() < 2 or x2:dim() < 2 or x1:size(-1) ~= x2:size(-1) then
    error(('cdist: x1 %s and x2 %s must be [..., P, M] and [..., R, M] with the same M'):format(
      shape_str(x1), shape_str(x2)), 2)
  end
  if p < 0 then error(('cdist: p must be >= 0, got %g'):format(p), 2) end
  local diff = x1:unsqueeze(-2) - x2:unsqueeze(-3)
  return flow.linalg.vector_norm(diff, p, -1)
end, 'func')

--- flow.multinomial(weights, n, {replacement = false}) (or x:multinomial):
-- n 1-based category indices per row of the non-negative weights (1-D or
-- 2-D), drawn in proportion to them from flow's generator (flow.manual_seed);
-- without replacement each category is drawn at most once.
def('multinomial', function(w, n, opts)
  check_tensor('multinomial', w)
  local replacement = (opts == true) or (type(opts) == 'table' and opts.replacement) or false
  if w:dim() < 1 or w:dim() > 2 or not is_float(w) then
    error(('multinomial: expected a 1-D or 2-D float tensor of weights, got shape %s and %s'):format(
      shape_str(w), tostring(w.dtype)), 2)
  end
  local k = w:size(-1)
  if type(n) ~= 'number' or n < 1 or n ~= math.floor(n) then
    error(('multinomial: the number of samples must be a positive integer, got %s'):format(tostring(n)), 2)
  end
  if not replacement and n > k then
    error(('multinomial: cannot draw %d samples from %d categories without replacement'):format(n, k), 2)
  end
  local rows = w:detach():reshape(-1, k):double():totable()
  local u = flow.rand(#rows, n, {dtype = types.by_name.float64}):totable()
  local out = {}
  for r, ws in ipairs(rows) do
    local total = 0
    for j = 1, k do
      local v = ws[j]
      if v < 0 or v ~= v or v == math.huge then
        error('multinomial: weights must be finite and non-negative', 3)
      end
      total = total + v
    end
    out[r] = {}
    for i = 1, n do
      if total <= 0 then
        error(('multinomial: row %d has no weight left to draw sample %d from'):format(r, i), 3)
      end
      local target, acc, pick = u[r][i] * total, 0, nil
      for j = 1, k do
        if ws[j] > 0 then
          acc = acc + ws[j]
          pick = j
          if target < acc then break end
        end
      end
      out[r][i] = pick
      if not replacement then total = total - ws[pick]; ws[pick] = 0 end
    end
  end
  local res = flow.tensor(out, {dtype = int64, device = w.device})
  return w:dim() == 1 and res:reshape(n) or res
end)

------------------------------------------------------------------ einsum
-- One operand's labels: a list of one-character strings; '...' becomes the
-- pseudo-labels \1 .. \8 aligned from the right (they sort before letters).
local function parse_term(term, ndim, n_ell, where)
  local labels, ell_at = {}, nil
  local i = 1
  while i <= #term do
    local ch = term:sub(i, i)
    if term:sub(i, i + 2) == '...' then
      if ell_at then error('einsum: more than one ellipsis in ' .. where, 4) end
      ell_at = #labels + 1
      i = i + 3
    elseif ch:match('%a') then
      labels[#labels + 1] = ch
      i = i + 1
    else
      error(('einsum: invalid character %q in %s'):format(ch, where), 4)
    end
  end
  if ell_at then
    local k = ndim and (ndim - #labels) or n_ell
    if k < 0 then
      error(('einsum: %s has %d labels but the operand has %d dims'):format(where, #labels, ndim), 4)
    end
    local ell = {}
    for j = 1, k do ell[j] = string.char(n_ell - k + j) end
    for j = #ell, 1, -1 do table.insert(labels, ell_at, ell[j]) end
    return labels, k
  end
  return labels, 0
end

-- Collapses repeated labels of one operand to their diagonal.
local function take_diagonals(t, labels)
  local j = 1
  while j <= #labels do
    local k = nil
    for m = j + 1, #labels do if labels[m] == labels[j] then k = m; break end end
    if k then
      t = flow.diagonal(t, 0, j, k)
      local l = labels[j]
      table.remove(labels, k); table.remove(labels, j)
      labels[#labels + 1] = l
    else
      j = j + 1
    end
  end
  return t, labels
end

local function index_of(list, v)
  for i = 1, #list do if list[i] == v then return i end end
end

-- Sums the dims of t whose labels are not in keep.
local function sum_unkept(t, labels, keep)
  local dims, rest = {}, {}
  for i, l in ipairs(labels) do
    if keep[l] then rest[#rest + 1] = l else dims[#dims + 1] = i end
  end
  if #dims > 0 then t = t:sum(dims) end
  return t, rest
end

-- a (labels la) times b (labels lb), summing labels not in keep.
local function contract(a, la, b, lb, keep, sizes)
  local batch, left, right, red = {}, {}, {}, {}
  for _, l in ipairs(la) do
    if index_of(lb, l) then
      if keep[l] then batch[#batch + 1] = l else red[#red + 1] = l end
    else
      left[#left + 1] = l
    end
  end
  for _, l in ipairs(lb) do if not index_of(la, l) then right[#right + 1] = l end end
  local function prod(ls)
    local p = 1
    for _, l in ipairs(ls) do p = p * sizes[l] end
    return p
  end
  local function arrange(t, ls, groups)
    local perm = {}
    for _, g in ipairs(groups) do
      for _, l in ipairs(g) do perm[#perm + 1] = index_of(ls, l) end
    end
    if #perm > 1 then t = t:permute(unpack(perm)) end
    return t:reshape(prod(groups[1]), prod(groups[2]), prod(groups[3]))
  end
  local am = arrange(a, la, {batch, left, red})                 -- (B, L, K)
  local bm = arrange(b, lb, {batch, red, right})                -- (B, K, R)
  local res = flow.bmm(am, bm)
  local out_labels, shape = {}, {}
  for _, g in ipairs({batch, left, right}) do
    for _, l in ipairs(g) do out_labels[#out_labels + 1] = l; shape[#shape + 1] = sizes[l] end
  end
  return res:reshape(shape), out_labels
end

--- flow.einsum(equation, a, b, ...) (or flow.einsum(equation, {a, b, ...})):
-- Einstein summation with explicit ('ij,jk->ik') or implicit ('ij,jk')
-- output, repeated labels (diagonals, 'ii->i'), '...' and size-1
-- broadcasting; built on permute/reshape/bmm/sum, so differentiable.
def('einsum', function(eq, ...)
  if type(eq) ~= 'string' then error('einsum: the equation must be a string, got ' .. type(eq), 2) end
  local ops = {...}
  if #ops == 1 and type(ops[1]) == 'table' and not is_tensor(ops[1]) then ops = ops[1] end
  for i = 1, #ops do
    if not is_tensor(ops[i]) then
      error(('einsum: operand %d is not a tensor (%s)'):format(i, type(ops[i])), 2)
    end
    if ops[i].dtype ~= ops[1].dtype then
      error(('einsum: operands must have the same dtype, got %s and %s'):format(
        tostring(ops[1].dtype), tostring(ops[i].dtype)), 2)
    end
  end
  eq = eq:gsub('%s', '')
  local lhs, rhs = eq:match('^(.-)%->(.*)$')
  if not lhs then lhs = eq end
  local terms = {}
  for term in (lhs .. ','):gmatch('([^,]*),') do terms[#terms + 1] = term end
  if #terms ~= #ops then
    error(('einsum: the equation has %d operands but %d tensors were given'):format(#terms, #ops), 2)
  end
  -- how many dims '...' stands for: the most over the operands
  local n_ell = 0
  for i, term in ipairs(terms) do
    local letters = select(2, term:gsub('%a', ''))
    if term:find('...', 1, true) then n_ell = math.max(n_ell, ops[i]:dim() - letters) end
  end
  if n_ell > 8 then error('einsum: ... stands for too many dims', 2) end
  local labels, sizes, count = {}, {}, {}
  local ts = {}
  for i, term in ipairs(terms) do
    local ls = parse_term(term, ops[i]:dim(), n_ell, 'operand ' .. i)
    if #ls ~= ops[i]:dim() then
      error(('einsum: operand %d has %d dims but the equation gives it %d labels (%s)'):format(
        i, ops[i]:dim(), #ls, term), 2)
    end
    for j, l in ipairs(ls) do
      local s = ops[i]:size(j)
      if sizes[l] == nil or sizes[l] == 1 then
        sizes[l] = s
      elseif s ~= 1 and s ~= sizes[l] then
        error(('einsum: label %s has size %d in operand %d but %d elsewhere'):format(
          l:byte() < 32 and '...' or l, s, i, sizes[l]), 2)
      end
    end
    labels[i], ts[i] = ls, ops[i]
  end
  for i, ls in ipairs(labels) do
    local seen = {}
    for _, l in ipairs(ls) do
      if not seen[l] then count[l] = (count[l] or 0) + 1; seen[l] = true end
    end
    -- size-1 dims broadcast against the other operands
    local shape, grow = {}, false
    for j, l in ipairs(ls) do
      shape[j] = sizes[l]
      if ts[i]:size(j) ~= sizes[l] then grow = true end
    end
    if grow then ts[i] = ts[i]:expand(unpack(shape)) end
  end
  local out = {}
  if rhs then
    out = parse_term(rhs, nil, n_ell, 'the output')
    local seen = {}
    for _, l in ipairs(out) do
      if seen[l] then error('einsum: output label ' .. l .. ' appears twice', 2) end
      if not sizes[l] then error('einsum: output label ' .. l .. ' is not in any operand', 2) end
      seen[l] = true
    end
  else
    for j = 1, n_ell do out[j] = string.char(j) end
    local once = {}
    for l, c in pairs(count) do
      if c == 1 and l:byte() >= 32 then once[#once + 1] = l end
    end
    -- a label repeated inside one operand counts once there; torch leaves it out
    for _, ls in ipairs(labels) do
      local k = {}
      for _, l in ipairs(ls) do k[l] = (k[l] or 0) + 1 end
      for l, c in pairs(k) do
        if c > 1 then
          local pos = index_of(once, l)
          if pos then table.remove(once, pos) end
        end
      end
    end
    table.sort(once)
    for _, l in ipairs(once) do out[#out + 1] = l end
  end
  local in_out = {}
  for _, l in ipairs(out) do in_out[l] = true end
  -- keep[l] for operand i: l is in the output or in a later operand
  local function keep_after(i)
    local keep = {}
    for l in pairs(in_out) do keep[l] = true end
    for j = i + 1, #ts do for _, l in ipairs(labels[j]) do keep[l] = true end end
    return keep
  end
  local cur, cl
  for i = 1, #ts do
    local t, ls = take_diagonals(ts[i], {unpack(labels[i])})
    local keep = keep_after(i)
    if cur then for _, l in ipairs(cl) do keep[l] = true end end
    t, ls = sum_unkept(t, ls, keep)
    if cur == nil then
      cur, cl = t, ls
    else
      cur, cl = contract(cur, cl, t, ls, keep_after(i), sizes)
    end
  end
  cur, cl = sum_unkept(cur, cl, in_out)
  local perm = {}
  for j, l in ipairs(out) do perm[j] = index_of(cl, l) end
  if #perm > 1 then cur = cur:permute(unpack(perm)) end
  return cur
end, 'func')

return {}
