-- oneflow.nn.functional.distance: cosine_similarity and pairwise_distance.
local U = require 'oneflow.nn._util'

local parse = U.parse
local F = {}

local cos_spec = {{'dim', 2}, {'eps', 1e-8}}
--- F.cosine_similarity(x1, x2, {dim = 2, eps = 1e-8})
function F.cosine_similarity(x1, x2, ...)
  local a = parse('cosine_similarity', cos_spec, ...)
  local n1 = x1:norm(2, a.dim, {keepdim = true}):clamp(a.eps, nil)
  local n2 = x2:norm(2, a.dim, {keepdim = true}):clamp(a.eps, nil)
  return ((x1 / n1) * (x2 / n2)):sum(a.dim)
end

local pd_spec = {{'p', 2}, {'eps', 1e-6}, {'keepdim', false}}
--- F.pairwise_distance(x1, x2, {p = 2, eps = 1e-6, keepdim = false}):
-- ||x1 - x2 + eps||_p over the last dim.
function F.pairwise_distance(x1, x2, ...)
  local a = parse('pairwise_distance', pd_spec, ...)
  return (x1 - x2 + a.eps):norm(a.p, -1, {keepdim = a.keepdim})
end

return F
