-- oneflow.nn.functional.sampling: affine_grid / grid_sample (spatial
-- transformers), embedding_bag and the multi-class margin losses, composed
-- from gather, index_select, index_add, where, clamp and floor (all
-- differentiable).
--   local grid = F.affine_grid(theta, {N, C, H, W})        -- [N, H, W, 2]
--   local y = F.grid_sample(x, grid, {padding_mode = 'border'})
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'

local parse, fail, shape_str = U.parse, U.fail, U.shape_str
local legacy_reduction = require('oneflow.ops.nn_loss').legacy_reduction
local F = {}

local function reduce(loss, reduction, name)
  if reduction == 'mean' then return loss:mean() end
  if reduction == 'sum' then return loss:sum() end
  if reduction == 'none' then return loss end
  fail(("%s: reduction must be 'none', 'mean' or 'sum', got %s"):format(name, tostring(reduction)))
end

-- an int64 tensor [rows, cols] from a Lua list (row-major), on like's device
local function long_tensor(list, rows, cols, like)
  local t = flow.tensor(list, {dtype = flow.int64}):reshape(rows, cols)
  if like.is_cuda then t = t:to(like.device) end
  return t
end

-- a bool tensor [rows, cols] from a Lua list of 0/1, on like's device
local function mask_tensor(list, rows, cols, like)
  return long_tensor(list, rows, cols, like):ne(0)
end

------------------------------------------------------------------ affine_grid
-- n points spanning [-1, 1] (align_corners) or the pixel centres
-- (-1 + 1/n ... 1 - 1/n); a single point is 0, as torch's linspace_from_neg_one.
local function base_coords(n, align, like)
  if n <= 1 then return flow.zeros(n, {dtype = like.dtype, device = like.device}) end
  local t = flow.linspace(-1, 1, n, {dtype = like.dtype, device = like.device})
  if not align then t = t * ((n - 1) / n) end
  return t
end

local ag_spec = {{'align_corners', false}}

--- F.affine_grid(theta, size, {align_corners = false}): theta [N, 2, 3] with
-- size {N, C, H, W} gives the sampling grid [N, H, W, 2] (x, y in [-1, 1]);
-- theta [N, 3, 4] with size {N, C, D, H, W} gives [N, D, H, W, 3].
function F.affine_grid(theta, size, ...)
  local a = parse('affine_grid', ag_spec, ...)
  if type(size) ~= 'table' then size = size:totable() end
  local nd = #size - 2
  if (nd ~= 2 and nd ~= 3) or not flow.is_tensor(theta) or theta:dim() ~= 3
      or theta:size(2) ~= nd or theta:size(3) ~= nd + 1 or theta:size(1) ~= size[1] then
    fail(('affine_grid: expected theta [N, 2, 3] with size {N, C, H, W} or theta [N, 3, 4] with '
          .. 'size {N, C, D, H, W}, got theta %s and size %s'):format(
      flow.is_tensor(theta) and shape_str(theta) or type(theta), U.tuple_str(size)))
  end
  if not theta.dtype.is_floating_point then
    fail(('affine_grid: theta must be floating point, got %s'):format(theta.dtype.name))
  end
  local n = size[1]
  -- the base grid [points, nd + 1]: columns x (fastest), y, (z), 1
  local spatial = {}
  for i = 3, #size do spatial[#spatial + 1] = size[i] end
  local npts = 1
  for _, s in ipairs(spatial) do npts = npts * s end
  local cols = {}
  for k = 1, nd do
    local len = spatial[nd + 1 - k]                      -- x runs along the last dim
    local shape = {}
    for i = 1, nd do shape[i] = (i == nd + 1 - k) and len or 1 end
    cols[k] = base_coords(len, a.align_corners, theta):reshape(shape):expand(spatial):reshape(npts, 1)
  end
  cols[nd + 1] = flow.ones(npts, 1, {dtype = theta.dtype, device = theta.device})
  local base = flow.cat(cols, 2):unsqueeze(1):expand(n, npts, nd + 1)
  local grid = flow.bmm(base, theta:transpose(2, 3))     -- [N, points, nd]
  local out = {n}
  for _, s in ipairs(spatial) do out[#out + 1] = s end
  out[#out + 1] = nd
  return grid:reshape(out)
end

------------------------------------------------------------------ grid_sample
-- torch's reflect_coordinates: reflect x into [lo2/2, hi2/2] (lo2, hi2 are
-- twice the bounds); the fold count is detached, so d/dx is +-1.
local function reflect(x, lo2, hi2)
  if lo2 == hi2 then return x * 0 end
  local lo, span = lo2 / 2, (hi2 - lo2) / 2
  local y = (x - lo):abs()
  local flips = (y / span):detach():floor()
  local extra = y - flips * span
  local even = (flips - (flips / 2):floor() * 2):eq(0)
  return flow.where(even, extra + lo, (span - extra) + lo)
end

-- pixel coordinate of the normalised c along a side of n pixels, padded
local function source_index(c, n, pad, align)
  local x
  if align then x = (c + 1) * ((n - 1) / 2) else x = ((c + 1) * n - 1) / 2 end
  if pad == 'border' then
    x = x:clamp(0, n - 1)
  elseif pad == 'reflection' then
    if align then x = reflect(x, 0, 2 * (n - 1)) else x = reflect(x, -1, 2 * n - 1) end
    x = x:clamp(0, n - 1)
  end
  return x
end

-- input [N, C, H*W] at integer pixels (xi, yi: [N, L] float, detached) ->
-- [N, C, L]; pixels outside the image read 0.
local function pick(flat, xi, yi, h, w)
  local inside = xi:ge(0):logical_and(xi:le(w - 1)):logical_and(yi:ge(0)):logical_and(yi:le(h - 1))
  local idx = (yi:clamp(0, h - 1) * w + xi:clamp(0, w - 1)):to(flow.int64) + 1
  local n, c, l = flat:size(1), flat:size(2), xi:size(2)
  local v = flat:gather(3, idx:unsqueeze(2):expand(n, c, l):contiguous())
  return v * inside:to(flat.dtype):unsqueeze(2)
end

local gs_spec = {{'mode', 'bilinear'}, {'padding_mode', 'zeros'}, {'align_corners', false}}

--- F.grid_sample(input [N, C, H, W], grid [N, Ho, Wo, 2], {mode = 'bilinear' |
-- 'nearest', padding_mode = 'zeros' | 'border' | 'reflection', align_corners =
-- false}) -> [N, C, Ho, Wo]: input read at the normalised points of grid
-- (x then y, -1 and 1 the outer edges, or the outer pixel centres with
-- align_corners). Bilinear is differentiable in input and grid.
function F.grid_sample(input, grid, ...)
  local a = parse('grid_sample', gs_spec, ...)
  if not flow.is_tensor(input) or not flow.is_tensor(grid) or input:dim() ~= 4 or grid:dim() ~= 4
      or grid:size(4) ~= 2 or grid:size(1) ~= input:size(1) then
    fail(('grid_sample: expected input [N, C, H, W] and grid [N, Ho, Wo, 2], got %s and %s'):format(
      flow.is_tensor(input) and shape_str(input) or type(input),
      flow.is_tensor(grid) and shape_str(grid) or type(grid)))
  end
  if a.mode ~= 'bilinear' and a.mode ~= 'nearest' then
    fail(("grid_sample: mode must be 'bilinear' or 'nearest', got %s"):format(tostring(a.mode)))
  end
  local pm = a.padding_mode
  if pm ~= 'zeros' and pm ~= 'border' and pm ~= 'reflection' then
    fail(("grid_sample: padding_mode must be 'zeros', 'border' or 'reflection', got %s"):format(tostring(pm)))
  end
  local n, c, h, w = input:size(1), input:size(2), input:size(3), input:size(4)
  local ho, wo = grid:size(2), grid:size(3)
  local g = grid:reshape(n, ho * wo, 2)
  local x = source_index(g:select(3, 1), w, pm, a.align_corners)   -- [N, L]
  local y = source_index(g:select(3, 2), h, pm, a.align_corners)
  local flat = input:reshape(n, c, h * w)
  local out
  if a.mode == 'nearest' then
    -- nearbyint: halves round to even
    local function rint(t)
      local f = t:floor()
      local d = t - f
      local odd = (f - (f / 2):floor() * 2):ne(0)
      local up = d:gt(0.5):logical_or(d:eq(0.5):logical_and(odd))
      return flow.where(up, f + 1, f)
    end
    out = pick(flat, rint(x:detach()), rint(y:detach()), h, w)
  else
    local x0, y0 = x:detach():floor(), y:detach():floor()
    local wx1, wy1 = x - x0, y - y0
    local wx0, wy0 = 1 - wx1, 1 - wy1
    local function corner(xi, yi, wt) return pick(flat, xi, yi, h, w) * wt:unsqueeze(2) end
    out = corner(x0, y0, wx0 * wy0) + corner(x0 + 1, y0, wx1 * wy0)
        + corner(x0, y0 + 1, wx0 * wy1) + corner(x0 + 1, y0 + 1, wx1 * wy1)
  end
  return out:reshape(n, c, ho, wo)
end

------------------------------------------------------------------ embedding_bag
local eb_spec = {{'offsets', nil}, {'mode', 'mean'}, {'per_sample_weights', nil}, {'padding_idx', nil},
                 {'include_last_offset', false}, {'sparse', false}}

--- F.embedding_bag(input, weight, offsets, {mode = 'mean' | 'sum' | 'max',
-- per_sample_weights =, padding_idx =, include_last_offset = false, sparse = false}) -> [B, dim]:
-- the rows of weight [num, dim] at the 1-based ids of input, reduced per bag.
-- input 1-D with offsets (1-based start positions of the bags in input; with
-- include_last_offset the last one is #input + 1 and closes the last bag), or
-- 2-D [B, L] (fixed-size bags, offsets nil). Ids equal to padding_idx are left
-- out of their bag; an empty bag gives zeros. per_sample_weights (shaped like
-- input) scale the rows, mode 'sum' only. sparse = true: the backward leaves a
-- oneflow.sparse_grad (the ids of input, padding_idx left out, and their
-- gradient rows) on weight.grad, as F.embedding's, for optim.SparseAdam / SGD.
function F.embedding_bag(input, weight, ...)
  local a = parse('embedding_bag', eb_spec, ...)
  if not flow.is_tensor(input) or input.dtype.is_floating_point then
    fail(('embedding_bag: input must be an integer tensor of ids, got %s'):format(
      flow.is_tensor(input) and input.dtype.name or type(input)))
  end
  if not flow.is_tensor(weight) or weight:dim() ~= 2 then
    fail(('embedding_bag: weight must be 2-D [num, dim], got %s'):format(
      flow.is_tensor(weight) and shape_str(weight) or type(weight)))
  end
  local mode = a.mode
  if mode ~= 'sum' and mode ~= 'mean' and mode ~= 'max' then
    fail(("embedding_bag: mode must be 'sum', 'mean' or 'max', got %s"):format(tostring(mode)))
  end
  local psw = a.per_sample_weights
  if psw ~= nil and mode ~= 'sum' then
    fail(("embedding_bag: per_sample_weights is only supported for mode='sum', got mode='%s'"):format(mode))
  end
  if psw ~= nil and psw:numel() ~= input:numel() then
    fail(('embedding_bag: per_sample_weights %s must have the shape of input %s'):format(
      shape_str(psw), shape_str(input)))
  end
  local num, dim = weight:size(1), weight:size(2)
  local pad = a.padding_idx
  if pad ~= nil then
    if pad == 0 or pad > num or pad < -num then
      fail(('embedding_bag: padding_idx must be within 1..%d (or -%d..-1), got %d'):format(num, num, pad))
    end
    if pad < 0 then pad = num + pad + 1 end
  end
  local ids = input:reshape(-1)
  local len = ids:numel()
  -- bag b covers positions starts[b] .. starts[b + 1] - 1 of the flat input
  local starts = {}
  if input:dim() == 2 then
    if a.offsets ~= nil then fail('embedding_bag: offsets must be nil for a 2-D input') end
    for b = 1, input:size(1) do starts[b] = (b - 1) * input:size(2) + 1 end
    starts[#starts + 1] = len + 1
  elseif input:dim() == 1 then
    if a.offsets == nil then fail('embedding_bag: a 1-D input needs offsets') end
    local offs = flow.is_tensor(a.offsets) and a.offsets:reshape(-1):totable() or a.offsets
    for i, o in ipairs(offs) do starts[i] = o end
    if not a.include_last_offset then starts[#starts + 1] = len + 1 end
    if #starts < 2 then fail('embedding_bag: offsets must not be empty') end
    if starts[1] ~= 1 then fail(('embedding_bag: the first offset must be 1, got %d'):format(starts[1])) end
    for i = 2, #starts do
      if starts[i] < starts[i - 1] or starts[i] > len + 1 then
        fail(('embedding_bag: offsets must be non-decreasing within 1..%d, got %d after %d'):format(
          len + 1, starts[i], starts[i - 1]))
      end
    end
  else
    fail(('embedding_bag: input must be 1-D (with offsets) or 2-D [B, L], got %s'):format(shape_str(input)))
  end
  local nb = #starts - 1
  local idv = pad and ids:totable()
  -- pos [B, M]: flat positions of each bag's entries (1 where unused), ok [B, M]
  local m = 1
  for b = 1, nb do m = math.max(m, starts[b + 1] - starts[b]) end
  local pos, ok, count = {}, {}, {}
  for b = 1, nb do
    local k = 0
    for p = starts[b], starts[b + 1] - 1 do
      if not (pad and idv[p] == pad) then
        k = k + 1
        pos[(b - 1) * m + k], ok[(b - 1) * m + k] = p, 1
      end
    end
    for j = k + 1, m do pos[(b - 1) * m + j], ok[(b - 1) * m + j] = 1, 0 end
    count[b] = k
  end
  if len == 0 then
    return flow.zeros(nb, dim, {dtype = weight.dtype, device = weight.device})
  end
  local posT = long_tensor(pos, nb, m, weight)
  local okT = mask_tensor(ok, nb, m, weight):unsqueeze(3)           -- [B, M, 1]
  local rows = a.sparse and flow.nn.functional.embedding(ids, weight, {padding_idx = pad, sparse = true})
    or flow.nn.functional.embedding(ids, weight)                   -- [L, dim]
  if psw ~= nil then rows = rows * psw:reshape(len, 1) end
  local g = rows:index_select(1, posT:reshape(-1)):reshape(nb, m, dim)
  local zero = flow.zeros(1, {dtype = weight.dtype, device = weight.device})
  if mode == 'max' then
    local filled = flow.where(okT, g, zero - math.huge)
    local v = filled:max(2)
    local nonempty = mask_tensor(count, nb, 1, weight)
    return flow.where(nonempty, v, zero)
  end
  local s = flow.where(okT, g, zero):sum(2)
  if mode == 'mean' then
    local cnt = {}
    for b = 1, nb do cnt[b] = math.max(count[b], 1) end
    s = s / long_tensor(cnt, nb, 1, weight):to(weight.dtype)
  end
  return s
end

------------------------------------------------------------------ margin losses
-- targets as a Lua list of 1-based class ids, checked against 1..c
local function class_ids(name, target, n, c)
  if not flow.is_tensor(target) or target.dtype.is_floating_point or target:numel() ~= n then
    fail(('%s: target must be an integer tensor of %d class ids, got %s'):format(
      name, n, flow.is_tensor(target) and (shape_str(target) .. ' ' .. target.dtype.name) or type(target)))
  end
  local t = target:reshape(-1):totable()
  for i = 1, n do
    if t[i] < 1 or t[i] > c then
      fail(('%s: target %d is out of bounds 1..%d'):format(name, t[i], c))
    end
  end
  return t
end

local mm_spec = {{'p', 1}, {'margin', 1}, {'weight', nil}, {'size_average'}, {'reduce'}, {'reduction', 'mean'}}

--- F.multi_margin_loss(x [N, C] or [C], target [N] (1-based class ids),
-- {p = 1, margin = 1, weight =, reduction = 'mean'}):
-- sum over j ~= y of w[y] max(0, margin - x[y] + x[j])^p / C.
function F.multi_margin_loss(x, target, ...)
  local a = parse('multi_margin_loss', mm_spec, ...)
  a.reduction = legacy_reduction(a)
  if a.p ~= 1 and a.p ~= 2 then fail(('multi_margin_loss: p must be 1 or 2, got %s'):format(tostring(a.p))) end
  if not flow.is_tensor(x) or (x:dim() ~= 1 and x:dim() ~= 2) then
    fail(('multi_margin_loss: expected input [N, C] or [C], got %s'):format(
      flow.is_tensor(x) and shape_str(x) or type(x)))
  end
  local single = x:dim() == 1
  if single then x = x:unsqueeze(1) end
  local n, c = x:size(1), x:size(2)
  local t = class_ids('multi_margin_loss', target, n, c)
  local tt = long_tensor(t, n, 1, x)
  local xy = x:gather(2, tt)                                          -- [N, 1]
  local z = (x - xy + a.margin):clamp(0, nil)
  if a.p == 2 then z = z * z end
  local other = {}
  for i = 1, n do for j = 1, c do other[(i - 1) * c + j] = (j == t[i]) and 0 or 1 end end
  z = flow.where(mask_tensor(other, n, c, x), z, flow.zeros(1, {dtype = x.dtype, device = x.device}))
  if a.weight ~= nil then z = z * a.weight:index_select(1, tt:reshape(-1)):unsqueeze(2) end
  local loss = z:sum(2) / c
  if single then loss = loss:squeeze(1) end
  return reduce(loss, a.reduction, 'multi_margin_loss')
end

local mlm_spec = {{'size_average'}, {'reduce'}, {'reduction', 'mean'}}

--- F.multilabel_margin_loss(x [N, C] or [C], target (same shape, 1-based class
-- ids, the list ending at the first 0; torch's -1 terminator shifted), {reduction =
-- 'mean'}): sum over listed j and unlisted k of max(0, 1 - (x[j] - x[k])) / C.
function F.multilabel_margin_loss(x, target, ...)
  local a = parse('multilabel_margin_loss', mlm_spec, ...)
  a.reduction = legacy_reduction(a)
  if not flow.is_tensor(x) or (x:dim() ~= 1 and x:dim() ~= 2) or not flow.is_tensor(target)
      or target:numel() ~= x:numel() or target.dtype.is_floating_point then
    fail(('multilabel_margin_loss: expected input [N, C] or [C] and an integer target of the same shape, '
          .. 'got %s and %s'):format(flow.is_tensor(x) and shape_str(x) or type(x),
      flow.is_tensor(target) and (shape_str(target) .. ' ' .. target.dtype.name) or type(target)))
  end
  local single = x:dim() == 1
  if single then x = x:unsqueeze(1) end
  local n, c = x:size(1), x:size(2)
  local t = target:reshape(-1):totable()
  -- ids [N, C] (listed targets, 1 where unused), used [N, C], unlisted [N, C]
  local ids, used, unlisted = {}, {}, {}
  for i = 1, n do
    local listed, stop = {}, false
    for j = 1, c do
      local v = t[(i - 1) * c + j]
      if v == 0 then stop = true end
      if not stop and (v < 1 or v > c) then
        fail(('multilabel_margin_loss: target %d is out of bounds 1..%d (0 ends the list)'):format(v, c))
      end
      ids[(i - 1) * c + j] = stop and 1 or v
      used[(i - 1) * c + j] = stop and 0 or 1
      if not stop then listed[v] = true end
    end
    for k = 1, c do unlisted[(i - 1) * c + k] = listed[k] and 0 or 1 end
  end
  local xj = x:gather(2, long_tensor(ids, n, c, x))                   -- [N, C(listed)]
  local z = (x:unsqueeze(2) - xj:unsqueeze(3) + 1):clamp(0, nil)      -- [N, listed, k]
  local keep = mask_tensor(used, n, c, x):unsqueeze(3):logical_and(mask_tensor(unlisted, n, c, x):unsqueeze(2))
  z = flow.where(keep, z, flow.zeros(1, {dtype = x.dtype, device = x.device}))
  local loss = z:sum(3):sum(2) / c
  if single then loss = loss:squeeze(1) end
  return reduce(loss, a.reduction, 'multilabel_margin_loss')
end

------------------------------------------------------------------ ctc_loss
-- a Lua list of numbers from a tensor, a list or a number
local function int_list(v)
  if flow.is_tensor(v) then return v:reshape(-1):totable() end
  if type(v) == 'number' then return {v} end
  return require('oneflow._args').arg('ctc_loss', nil, 'input_lengths and target_lengths', v, 'table')
end

local NEG = -1e30   -- log(0) stand-in: finite, so no inf - inf in the gradients

local ctc_spec = {{'blank', 1}, {'reduction', 'mean'}, {'zero_infinity', false}}

--- F.ctc_loss(log_probs [T, N, C] (or [T, C]), targets, input_lengths, target_lengths,
-- {blank = 1, reduction = 'mean', zero_infinity = false}): the connectionist temporal
-- classification loss -log p(target | log_probs), by the alpha recursion in log
-- space. targets are 1-based class ids, [N, S] padded or 1-D concatenated; blank is
-- a 1-based class id (torch's blank = 0 is 1 here). input_lengths, target_lengths:
-- tensors or Lua lists. 'mean' divides each loss by its target length, then
-- averages. An impossible alignment gives inf (0 with zero_infinity).
function F.ctc_loss(log_probs, targets, input_lengths, target_lengths, ...)
  local a = parse('ctc_loss', ctc_spec, ...)
  if not flow.is_tensor(log_probs) or (log_probs:dim() ~= 3 and log_probs:dim() ~= 2) then
    fail(('ctc_loss: expected log_probs [T, N, C] or [T, C], got %s'):format(
      flow.is_tensor(log_probs) and shape_str(log_probs) or type(log_probs)))
  end
  local single = log_probs:dim() == 2
  if single then log_probs = log_probs:unsqueeze(2) end
  local tmax, n, c = log_probs:size(1), log_probs:size(2), log_probs:size(3)
  local blank = a.blank
  if blank < 1 or blank > c then fail(('ctc_loss: blank must be within 1..%d, got %d'):format(c, blank)) end
  local il, tl = int_list(input_lengths), int_list(target_lengths)
  if #il ~= n or #tl ~= n then
    fail(('ctc_loss: expected %d input_lengths and target_lengths, got %d and %d'):format(n, #il, #tl))
  end
  if not flow.is_tensor(targets) or targets.dtype.is_floating_point then
    fail('ctc_loss: targets must be an integer tensor of class ids')
  end
  local tv = targets:reshape(-1):totable()
  local padded = targets:dim() == 2 or (single and targets:dim() == 1)
  local stride = padded and (targets:dim() == 2 and targets:size(2) or targets:numel()) or 0
  -- per sample: its labels, then the extended sequence blank, l1, blank, ..., blank
  local smax, base = 0, 0
  local labels = {}
  for b = 1, n do
    if il[b] < 1 or il[b] > tmax then
      fail(('ctc_loss: input_lengths[%d] = %d is out of 1..%d'):format(b, il[b], tmax))
    end
    local lab = {}
    local first = padded and (b - 1) * stride or base
    if padded and tl[b] > stride then
      fail(('ctc_loss: target_lengths[%d] = %d exceeds the target width %d'):format(b, tl[b], stride))
    end
    for k = 1, tl[b] do
      local v = tv[first + k]
      if v == nil or v < 1 or v > c or v == blank then
        fail(('ctc_loss: target %s of sample %d must be a class id within 1..%d other than blank %d'):format(
          tostring(v), b, c, blank))
      end
      lab[k] = v
    end
    base = base + tl[b]
    labels[b] = lab
    smax = math.max(smax, tl[b])
  end
  local lmax = 2 * smax + 1
  local ext, skip, last, endok = {}, {}, {}, {}
  for b = 1, n do
    local lab = labels[b]
    for s = 1, lmax do
      local k = (b - 1) * lmax + s
      local lbl = (s % 2 == 0 and lab[s / 2]) or blank
      ext[k] = lbl
      -- s may come from s - 2: a label differing from the one two back
      skip[k] = (s % 2 == 0 and s > 2 and lab[s / 2] ~= lab[s / 2 - 1]) and 1 or 0
    end
    -- the two end states (1-based); an empty target ends in state 1 only
    last[2 * b - 1], last[2 * b] = math.max(2 * #lab, 1), 2 * #lab + 1
    endok[2 * b - 1], endok[2 * b] = #lab > 0 and 1 or 0, 1
  end
  local extT = long_tensor(ext, n, lmax, log_probs)
  local skipT = mask_tensor(skip, n, lmax, log_probs)
  local opts = {dtype = log_probs.dtype, device = log_probs.device}
  local neg1 = flow.full({n, 1}, NEG, opts)
  local neg2 = flow.full({n, 2}, NEG, opts)
  local negl = flow.full({n, lmax}, NEG, opts)
  local lp1 = log_probs:select(1, 1):gather(2, extT)                  -- [N, L]
  local start = {}
  for b = 1, n do
    for s = 1, lmax do start[(b - 1) * lmax + s] = (s <= 2) and 1 or 0 end
  end
  local alpha = flow.where(mask_tensor(start, n, lmax, log_probs), lp1, negl)
  for t = 2, tmax do
    local active = {}
    for b = 1, n do active[b] = t <= il[b] and 1 or 0 end
    local from1 = flow.cat({neg1, alpha:narrow(2, 1, lmax - 1)}, 2)
    local from2 = lmax > 2 and flow.where(skipT, flow.cat({neg2, alpha:narrow(2, 1, lmax - 2)}, 2), negl) or negl
    local nxt = flow.stack({alpha, from1, from2}, 3):logsumexp(3) + log_probs:select(1, t):gather(2, extT)
    alpha = flow.where(mask_tensor(active, n, 1, log_probs), nxt, alpha)
  end
  local ends = alpha:gather(2, long_tensor(last, n, 2, log_probs))
  ends = flow.where(mask_tensor(endok, n, 2, log_probs), ends, neg2)
  local nll = -ends:logsumexp(2)                                      -- [N]
  local impossible = nll:detach():gt(-NEG / 2)
  local inf = flow.full({n}, a.zero_infinity and 0 or math.huge, opts)
  nll = flow.where(impossible, inf, nll)
  if single then nll = nll:squeeze(1) end
  if a.reduction == 'mean' then
    local d = {}
    for b = 1, n do d[b] = math.max(tl[b], 1) end
    return (nll:reshape(n) / flow.tensor(d, opts)):mean()
  end
  return reduce(nll, a.reduction, 'ctc_loss')
end

return F
