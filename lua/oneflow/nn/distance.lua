-- oneflow.nn.distance: CosineSimilarity and PairwiseDistance over
-- F.cosine_similarity / F.pairwise_distance (functional/distance.lua).
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local F = require 'oneflow.nn.functional'

local Module, parse = module.Module, U.parse
local M = {}

------------------------------------------------------------------ distances
local CosineSimilarity = Module:subclass('CosineSimilarity')
M.CosineSimilarity = CosineSimilarity

--- nn.CosineSimilarity({dim = 2, eps = 1e-8})
function CosineSimilarity:__init(...)
  Module.__init(self)
  local a = parse('CosineSimilarity', {{'dim', 2}, {'eps', 1e-8}}, ...)
  self.dim, self.eps = a.dim, a.eps
end
function CosineSimilarity:forward(x1, x2) return F.cosine_similarity(x1, x2, {dim = self.dim, eps = self.eps}) end

local PairwiseDistance = Module:subclass('PairwiseDistance')
M.PairwiseDistance = PairwiseDistance

--- nn.PairwiseDistance({p = 2, eps = 1e-6, keepdim = false})
function PairwiseDistance:__init(...)
  Module.__init(self)
  local a = parse('PairwiseDistance', {{'p', 2}, {'eps', 1e-6}, {'keepdim', false}}, ...)
  self.norm, self.eps, self.keepdim = a.p, a.eps, a.keepdim
end
function PairwiseDistance:forward(x1, x2)
  return F.pairwise_distance(x1, x2, {p = self.norm, eps = self.eps, keepdim = self.keepdim})
end

return M
