-- flowvision.models.vit: Vision Transformer (Dosovitskiy et al.) as timm's
-- VisionTransformer, with its parameter names: patch_embed.proj, cls_token,
-- pos_embed, blocks.N.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2},
-- norm, head.
--   local m = vision.models.vit_tiny_patch16_224({num_classes = 10, img_size = 32})
-- Options: num_classes = 1000, img_size = 224, in_chans = 3, global_pool =
-- 'token' | 'avg', drop_rate, attn_drop_rate, proj_drop_rate, drop_path_rate,
-- qkv_bias = true (pretrained through flowvision.models.create).
local flow = require 'oneflow'
local L = require 'flowvision.models.transformer_layers'

local nn, init = flow.nn, flow.nn.init
local M = {models = {}, classes = {}}

local VisionTransformer = nn.Module:subclass('VisionTransformer')

function VisionTransformer:__init(o)
  nn.Module.__init(self)
  o = o or {}
  local dim, depth = o.embed_dim or 768, o.depth or 12
  self.num_classes = o.num_classes or 1000
  self.global_pool = o.global_pool or 'token'
  self.embed_dim, self.num_features = dim, dim
  self.num_prefix_tokens = o.class_token == false and 0 or 1
  self.patch_embed = L.PatchEmbed{img_size = o.img_size or 224, patch_size = o.patch_size or 16,
                                  in_chans = o.in_chans or 3, embed_dim = dim}
  local n = self.patch_embed.num_patches
  if self.num_prefix_tokens > 0 then self.cls_token = nn.Parameter(flow.zeros(1, 1, dim)) end
  self.pos_embed = nn.Parameter(flow.zeros(1, n + self.num_prefix_tokens, dim))
  self.pos_drop = nn.Dropout(o.pos_drop_rate or 0)
  local dpr = L.dpr(o.drop_path_rate or 0, depth)
  local blocks = {}
  for i = 1, depth do
    blocks[i] = L.Block(dim, {num_heads = o.num_heads or 12, mlp_ratio = o.mlp_ratio or 4,
                              qkv_bias = o.qkv_bias, proj_drop = o.proj_drop_rate,
                              attn_drop = o.attn_drop_rate, drop_path = dpr[i]})
  end
  self.blocks = nn.Sequential(unpack(blocks))
  self.norm = nn.LayerNorm(dim, {eps = 1e-6})
  self.head_drop = nn.Dropout(o.drop_rate or 0)
  self.head = self.num_classes > 0 and nn.Linear(dim, self.num_classes) or nn.Identity()
  self:init_weights()
end

function VisionTransformer:init_weights()
  L.trunc_normal_(self.pos_embed, 0.02)
  if self.cls_token ~= nil then init.normal_(self.cls_token, {std = 1e-6}) end
  L.init_linear_trunc(self)
end

-- prefix tokens (cls, and dist for DeiT) then patches, plus pos_embed
function VisionTransformer:_pos_embed(x)
  if self.cls_token ~= nil then
    x = flow.cat({self.cls_token:expand(x:size(1), -1, -1), x}, 2)
  end
  return self.pos_drop(x + self.pos_embed)
end

--- [B, N + prefix, C] tokens after the final norm.
function VisionTransformer:forward_features(x)
  x = self:_pos_embed(self.patch_embed(x))
  x = self.blocks(x)
  return self.norm(x)
end

function VisionTransformer:forward_head(x, pre_logits)
  if self.global_pool == 'avg' then
    x = x:narrow(2, self.num_prefix_tokens + 1, x:size(2) - self.num_prefix_tokens):mean(2)
  elseif self.global_pool and self.global_pool ~= '' then
    x = x:select(2, 1)
  end
  x = self.head_drop(x)
  if pre_logits then return x end
  return self.head(x)
end

function VisionTransformer:forward(x)
  return self:forward_head(self:forward_features(x))
end

M.classes.VisionTransformer = VisionTransformer

local variant = L.variant
M.models.vit_tiny_patch16_224 = variant('vit_tiny_patch16_224', VisionTransformer,
  {patch_size = 16, embed_dim = 192, depth = 12, num_heads = 3})
M.models.vit_small_patch16_224 = variant('vit_small_patch16_224', VisionTransformer,
  {patch_size = 16, embed_dim = 384, depth = 12, num_heads = 6})
M.models.vit_base_patch16_224 = variant('vit_base_patch16_224', VisionTransformer,
  {patch_size = 16, embed_dim = 768, depth = 12, num_heads = 12})

return M
