-- oneflow.nn.functional.dropout: dropout, channel-wise dropout and alpha
-- dropout. F.dropout is flow.native_dropout (one fused pass); the channel
-- masks come from flow's bernoulli. Kept values are scaled by 1 / (1 - p)
-- so the expectation is unchanged. In eval (training = false)
-- every function is the identity.
--   F.dropout(x, 0.5, self.training)   F.dropout(x, {p = 0.2, training = true})
local flow = require 'oneflow'   -- the table being built (used at call time)
local T = require 'oneflow.tensor'
local U = require 'oneflow.nn._util'

local parse, fail = U.parse, U.fail
local F = {}

local spec = {{'p', 0.5}, {'training', true}, {'inplace', false}}

local function args(name, ...)
  local a = parse(name, spec, ...)
  if type(a.p) ~= 'number' or a.p < 0 or a.p > 1 then
    fail(('%s: probability has to be between 0 and 1, but got %s'):format(name, tostring(a.p)))
  end
  return a
end

-- mask of shape `shape` with entries 1 / (1 - p) (kept) or 0, x's dtype
local function scaled_mask(x, shape, p)
  local m = flow.empty(shape, {dtype = x.dtype, device = x.device}):bernoulli_(1 - p)
  return m:mul_(1 / (1 - p))
end

local function apply(x, mask, inplace)
  if inplace then return x:mul_(mask) end
  return x * mask
end

--- F.dropout(x, p = 0.5, training = true, inplace = false): zeroes elements with probability p and scales the
-- rest by 1/(1-p).
function F.dropout(x, ...)
  local a = args('dropout', ...)
  if not a.training or a.p == 0 then return x end
  if a.p == 1 then return apply(x, x:new_zeros(x:size():totable()), a.inplace) end
  -- one fused pass (mask and product); its bool mask is what backward keeps
  local y = flow.native_dropout(x, a.p, true)
  if a.inplace then return x:copy_(y) end
  return y
end

-- Whole channels are zeroed: the mask has shape [N, C, 1, ...] (or [C, 1, ...]
-- for an unbatched input with `batched_dims` spatial dims).
local function channel_dropout(name, spatial)
  return function(x, ...)
    local a = args(name, ...)
    local nd = x:dim()
    if spatial and nd ~= spatial + 1 and nd ~= spatial + 2 then
      fail(('%s: expected a %dD or %dD input, got %s'):format(name, spatial + 1, spatial + 2,
        U.shape_str(x)))
    end
    if not a.training or a.p == 0 then return x end
    local shape = x:size():totable()
    local first = (spatial and nd == spatial + 1) and 1 or 2
    for i = first + 1, nd do shape[i] = 1 end
    if a.p == 1 then return apply(x, x:new_zeros(shape), a.inplace) end
    return apply(x, scaled_mask(x, shape, a.p), a.inplace)
  end
end
--- F.dropout1d(x, p = 0.5, training = true): zeroes whole channels of (N, C, L).
-- @function F.dropout1d
F.dropout1d = channel_dropout('dropout1d', 1)
--- F.dropout2d(x, p = 0.5, training = true): zeroes whole channels of (N, C, H, W).
-- @function F.dropout2d
F.dropout2d = channel_dropout('dropout2d', 2)
--- F.dropout3d(x, p = 0.5, training = true): zeroes whole channels of (N, C, D, H, W).
-- @function F.dropout3d
F.dropout3d = channel_dropout('dropout3d', 3)

--- F.alpha_dropout(x, p, training): keeps mean and variance of SELU outputs
-- (dropped values go to SELU's negative saturation, then an affine fix).
local ALPHA = 1.7580993408473766
--- F.alpha_dropout(x, p = 0.5, training = false): dropout that keeps the SELU mean and variance.
function F.alpha_dropout(x, ...)
  local a = args('alpha_dropout', ...)
  if not a.training or a.p == 0 then return x end
  local p = a.p
  if p == 1 then return x * 0 end
  local keep = flow.empty(x:size():totable(), {dtype = x.dtype, device = x.device}):bernoulli_(1 - p)
  local scale = 1 / math.sqrt((ALPHA * ALPHA * p + 1) * (1 - p))
  local b = (keep - 1) * (ALPHA * scale) + ALPHA * scale * p
  return x * (keep * scale) + b
end

------------------------------------------------------------------ global tensors
-- On a global tensor any sbp stays (the op is linear in x given the mask).
-- The mask is drawn for the whole logical shape, so it holds exactly the
-- numbers one process would draw from the same generator state: every rank
-- draws it (keeping the default generators in step, as the global
-- factories do) and the first rank of the placement sends each rank its
-- part (uint8), so ranks agree even when seeded differently.
local R = require 'oneflow.distributed.rules'
local B = require 'oneflow.distributed.boxing'
local comm = require 'oneflow.distributed.comm'

local function mask_part(m, shape, mshape, P, s, coord)
  local sizes, start = B.shard(shape, P.hierarchy, s, coord)
  for d = 1, #mshape do
    if mshape[d] ~= 1 and sizes[d] ~= mshape[d] then m = m:narrow(d, start[d] + 1, sizes[d]) end
  end
  return m
end

local function coord_of(P, j)
  if #P.hierarchy == 1 then return {j - 1} end
  return {math.floor((j - 1) / P.hierarchy[2]), (j - 1) % P.hierarchy[2]}
end

-- the call for F[name] on shards; mask_shape(name, logical shape)
local function global_dropout(name, mask_shape)
  return function(orig, largs, ctx, _, P)
    local a = args(name, unpack(largs, 2, ctx.n))
    if not a.training or a.p == 0 or a.p == 1 then return orig(unpack(largs, 1, ctx.n)) end
    local x, shape = largs[1], ctx.shapes[1]
    local mshape = mask_shape(name, shape)
    -- F.dropout's own draws (native_dropout's mask), the channel masks bernoulli_'s
    local full
    if name == 'dropout' then
      full = select(2, flow.native_dropout(flow.ones(mshape, {dtype = x.dtype}), a.p, true))
    else
      full = flow.empty(mshape, {dtype = x.dtype}):bernoulli_(1 - a.p)
    end
    if not P:has_me() then return x end
    local s, g = ctx.in_sbps[1], P:group()
    local mine = mask_part(full, shape, mshape, P, s, P.coord):size():totable()
    local sends, counts, recv = {}, {}, {}
    for j = 1, #P.ranks do
      counts[j], recv[j] = 0, 0
      if P.index == 1 then
        local part = mask_part(full, shape, mshape, P, s, coord_of(P, j))
        sends[#sends + 1] = part:to('uint8'):contiguous():view(-1)
        counts[j] = part:numel()
      end
    end
    local n = 1
    for _, v in ipairs(mine) do n = n * v end
    recv[1] = n
    local packed = #sends > 0 and flow.cat(sends, 1) or flow.empty({0}, {dtype = 'uint8'})
    local got = comm.all_to_all_flat(packed, counts, recv, {group = g})
    local m = got:view(mine):to(x.dtype):mul_(1 / (1 - a.p))
    return apply(x, m, a.inplace)
  end
end

local function same_shape(_, shape) return shape end
local function channel_shape(spatial)
  return function(name, shape)
    local nd = #shape
    if nd ~= spatial + 1 and nd ~= spatial + 2 then
      fail(('%s: expected a %dD or %dD input, got [%s]'):format(name, spatial + 1, spatial + 2,
        table.concat(shape, ', ')))
    end
    local m = {}
    local first = nd == spatial + 1 and 1 or 2
    for d = 1, nd do m[d] = d > first and 1 or shape[d] end
    return m
  end
end

for name, mshape in pairs({dropout = same_shape, dropout1d = channel_shape(1),
                           dropout2d = channel_shape(2), dropout3d = channel_shape(3)}) do
  local call = global_dropout(name, mshape)
  local rule = function(ctx)
    local sigs = R.same_sbp(ctx)
    for _, sg in ipairs(sigs) do sg.call = call end
    return sigs
  end
  F[name] = T.sbp_fn(name, rule, F[name])
end

return F
