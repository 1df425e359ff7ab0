-- flowvision.models.deit: DeiT (Touvron et al.) as timm builds it. The plain
-- variants are ViTs (timm's VisionTransformer); the distilled ones add
-- dist_token and head_dist (timm's VisionTransformerDistilled): pos_embed
-- has two prefix entries, and in eval the output is the mean of head(cls)
-- and head_dist(dist). With m.distilled_training = true, training mode
-- returns both logits (cls, dist).
--   vision.models.deit_tiny_distilled_patch16_224({num_classes = 10, img_size = 32})
local flow = require 'oneflow'
local L = require 'flowvision.models.transformer_layers'
local vit = require 'flowvision.models.vit'

local nn = flow.nn
local VisionTransformer = vit.classes.VisionTransformer
local M = {models = {}, classes = {}}

local Distilled = VisionTransformer:subclass('VisionTransformerDistilled')
M.classes.VisionTransformerDistilled = Distilled

function Distilled:__init(o)
  o = L.merge(o, {global_pool = 'token'})
  VisionTransformer.__init(self, o)
  local dim = self.embed_dim
  self.num_prefix_tokens = 2
  self.dist_token = nn.Parameter(flow.zeros(1, 1, dim))
  self.pos_embed = nn.Parameter(flow.zeros(1, self.patch_embed.num_patches + 2, dim))
  self.head_dist = self.num_classes > 0 and nn.Linear(dim, self.num_classes) or nn.Identity()
  self.distilled_training = false
  L.trunc_normal_(self.dist_token, 0.02)
  self:init_weights()
end

function Distilled:_pos_embed(x)
  local b = x:size(1)
  x = flow.cat({self.cls_token:expand(b, -1, -1), self.dist_token:expand(b, -1, -1), x}, 2)
  return self.pos_drop(x + self.pos_embed)
end

function Distilled:forward_head(x, pre_logits)
  local xc, xd = x:select(2, 1), x:select(2, 2)
  if pre_logits then return (xc + xd) / 2 end
  xc, xd = self.head(self.head_drop(xc)), self.head_dist(self.head_drop(xd))
  if self.distilled_training and self.training then return xc, xd end
  return (xc + xd) / 2
end

local variant = L.variant
local function arch(dim, heads) return {patch_size = 16, embed_dim = dim, depth = 12, num_heads = heads} end

M.models.deit_tiny_patch16_224 = variant('deit_tiny_patch16_224', VisionTransformer, arch(192, 3))
M.models.deit_small_patch16_224 = variant('deit_small_patch16_224', VisionTransformer, arch(384, 6))
M.models.deit_base_patch16_224 = variant('deit_base_patch16_224', VisionTransformer, arch(768, 12))
M.models.deit_tiny_distilled_patch16_224 = variant('deit_tiny_distilled_patch16_224', Distilled, arch(192, 3))
M.models.deit_small_distilled_patch16_224 = variant('deit_small_distilled_patch16_224', Distilled, arch(384, 6))
M.models.deit_base_distilled_patch16_224 = variant('deit_base_distilled_patch16_224', Distilled, arch(768, 12))

return M
