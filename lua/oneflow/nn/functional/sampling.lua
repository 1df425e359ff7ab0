-- oneflow.nn.functional.sampling: affine_grid / grid_sample (spatial
-- transformers), embedding_bag and the multi-class margin losses, composed
-- from gather, index_select, index_add, where, clamp and floor (all
-- differentiable).
--   local grid = F.affine_grid(theta, {N, C, H, W})        -- [N, H, W, 2]
--   local y = F.grid_sample(x, grid, {padding_mode = 'border'})
local flow = require 'oneflow.nn._flow'
local U = require 'oneflow.nn._util'

local parse, fail, shape_str = U.parse, U.fail, U.shape_str
local F = {}

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

return F
