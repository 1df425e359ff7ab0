-- oneflow.nn.functional.normalization: the normalisations composed in Lua --
-- normalize (Lp), rms_norm and local_response_norm; batch/layer/group/instance
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


------------------------------------------------------------------ rms_norm
local rms_spec = {{'normalized_shape', U.REQUIRED}, {'weight', nil}, {'eps', nil}}
-- float epsilons of the compute type: PyTorch's default eps (finfo(opmath).eps)
local EPS64, EPS32 = 2.220446049250313e-16, 1.1920928955078125e-07

--- F.rms_norm(x, normalized_shape, weight, eps) (PyTorch 2.4):
-- x / sqrt(mean(x^2 over the last #normalized_shape dims) + eps) * weight;
-- eps defaults to the machine epsilon of the compute type (float64's for
-- float64, float32's otherwise). float16/bfloat16 are computed in float32
-- and the result cast back. Composed from public ops, so autograd, nn.Graph
-- and every device take it as they are.
function F.rms_norm(x, ...)
  local a = parse('rms_norm', rms_spec, ...)
  local ns = a.normalized_shape
  if type(ns) == 'number' then ns = {ns} elseif type(ns) == 'table' and ns.totable then ns = ns:totable() end
  if type(ns) ~= 'table' then
    fail(('rms_norm: normalized_shape must be a number or a list of sizes, got %s'):format(type(ns)))
  end
  local shape, k = x:size():totable(), #ns
  local ok = k >= 1 and k <= #shape
  for i = 1, k do ok = ok and shape[#shape - k + i] == ns[i] end
  if not ok then
    fail(('rms_norm: normalized_shape [%s] does not match the last dims of the input %s')
         :format(table.concat(ns, ', '), shape_str(x)))
  end
  local w = a.weight
  if w ~= nil then
    local ws = w:size():totable()
    local same = #ws == k
    for i = 1, k do same = same and ws[i] == ns[i] end
    if not same then
      fail(('rms_norm: weight of shape %s, expected [%s] (normalized_shape)')
           :format(shape_str(w), table.concat(ns, ', ')))
    end
  end
  if not x.dtype.is_floating_point then
    fail(('rms_norm: expected a floating point input, got %s'):format(tostring(x.dtype)))
  end
  local low = x.dtype == flow.float16 or x.dtype == flow.bfloat16
  local xc = low and x:float() or x
  local eps = a.eps or (xc.dtype == flow.float64 and EPS64 or EPS32)
  local dims = {}
  for i = #shape - k + 1, #shape do dims[#dims + 1] = i end
  local y = xc * ((xc * xc):mean(dims, {keepdim = true}) + eps):rsqrt()
  if w ~= nil then y = y * w end
  return low and y:to(x.dtype) or y
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
