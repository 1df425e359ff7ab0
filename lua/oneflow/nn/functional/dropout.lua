-- oneflow.nn.functional.dropout: dropout, channel-wise dropout and alpha
-- dropout. Masks come from flow's bernoulli; kept values are scaled by
-- 1 / (1 - p) so the expectation is unchanged. In eval (training = false)
-- every function is the identity.
--   F.dropout(x, 0.5, self.training)   F.dropout(x, {p = 0.2, training = true})
local flow = require 'oneflow.nn._flow'
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

function F.dropout(x, ...)
  local a = args('dropout', ...)
  if not a.training or a.p == 0 then return x end
  if a.p == 1 then return apply(x, x:new_zeros(x:size():totable()), a.inplace) end
  return apply(x, scaled_mask(x, x:size():totable(), a.p), a.inplace)
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
F.dropout1d = channel_dropout('dropout1d', 1)
F.dropout2d = channel_dropout('dropout2d', 2)
F.dropout3d = channel_dropout('dropout3d', 3)

--- F.alpha_dropout(x, p, training): keeps mean and variance of SELU outputs
-- (dropped values go to SELU's negative saturation, then an affine fix).
local ALPHA = 1.7580993408473766
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

return F
