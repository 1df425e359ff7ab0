-- oneflow.nn.functional.normalization: the normalisations composed in Lua --
-- normalize (Lp) and local_response_norm; batch/layer/rms/group/instance
-- norm are the C kernels of oneflow.ops.nn_norm.
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'

local parse, fail, shape_str = U.parse, U.fail, U.shape_str
local F = {}

------------------------------------------------------------------ normalize
local norm_spec = {{'p', 2}, {'dim', 2}, {'eps', 1e-12}}
--- F.normalize(x, {p = 2, dim = 2, eps = 1e-12}): x / max(||x||_p, eps) along dim.
function F.normalize(x, ...)
  local a = parse('normalize', norm_spec, ...)
  local n = x:norm(a.p, a.dim, {keepdim = true}):clamp(a.eps, nil)
  return x / n
end


------------------------------------------------------------------ local_response_norm
local lrn_spec = {{'size', U.REQUIRED}, {'alpha', 1e-4}, {'beta', 0.75}, {'k', 1}}

--- F.local_response_norm(x, size, {alpha = 1e-4, beta = 0.75, k = 1}):
-- x / (k + alpha / size * sum of x^2 over `size` neighbouring channels)^beta,
-- on [N, C, *] (the window is zero-padded: size // 2 before, (size - 1) // 2 after).
function F.local_response_norm(x, ...)
  local a = parse('local_response_norm', lrn_spec, ...)
  if x:dim() < 3 then
    fail(('local_response_norm: expected an input of at least 3 dims [N, C, *], got %s'):format(
      shape_str(x)))
  end
  if type(a.size) ~= 'number' or a.size < 1 or a.size ~= math.floor(a.size) then
    fail(('local_response_norm: size must be a positive integer, got %s'):format(tostring(a.size)))
  end
  if x:numel() == 0 then return x end
  local s = x:size():totable()
  local n, c = s[1], s[2]
  local sq = (x * x):reshape(n, c, -1)                 -- [N, C, R]
  local size = a.size
  local padded = flow.nn.functional.pad(sq, {0, 0, math.floor(size / 2), math.floor((size - 1) / 2)})
  local acc = padded:narrow(2, 1, c)
  for i = 2, size do acc = acc + padded:narrow(2, i, c) end
  local div = (acc * (a.alpha / size) + a.k):pow(a.beta):reshape(s)
  return x / div
end

return F
