-- flowvision.models.resmlp: ResMLP (Touvron et al.) as timm builds it (an
-- MlpMixer with ResBlock and Affine norms), with its names: stem.proj,
-- blocks.N.{norm1.alpha/beta, linear_tokens, norm2, mlp_channels.fc1/fc2,
-- ls1, ls2}, norm.alpha/beta, head.
--   vision.models.resmlp_12_224({num_classes = 10, img_size = 32})
local flow = require 'oneflow'
local L = require 'flowvision.models.transformer_layers'
local mixer = require 'flowvision.models.mlp_mixer'

local nn = flow.nn
local M = {models = {}, classes = {}}

local Affine = nn.Module:subclass('Affine')
M.classes.Affine = Affine

--- beta + alpha * x, alpha and beta of shape [1, 1, dim].
function Affine:__init(dim)
  nn.Module.__init(self)
  self.alpha = nn.Parameter(flow.ones(1, 1, dim))
  self.beta = nn.Parameter(flow.zeros(1, 1, dim))
end

function Affine:forward(x) return self.beta + self.alpha * x end

local ResBlock = nn.Module:subclass('ResBlock')
M.classes.ResBlock = ResBlock

--- ResBlock(dim, seq_len, {mlp_ratio = 4, norm_layer = Affine, init_values = 1e-4,
-- drop, drop_path})
function ResBlock:__init(dim, seq_len, o)
  nn.Module.__init(self)
  local norm = o.norm_layer or Affine
  self.norm1 = norm(dim)
  self.linear_tokens = nn.Linear(seq_len, seq_len)
  self.drop_path = L.drop_path(o.drop_path)
  self.norm2 = norm(dim)
  self.mlp_channels = L.Mlp(dim, math.floor(dim * (o.mlp_ratio or 4)), dim, {drop = o.drop})
  local iv = o.init_values or 1e-4
  self.ls1 = nn.Parameter(flow.full({dim}, iv))
  self.ls2 = nn.Parameter(flow.full({dim}, iv))
end

function ResBlock:forward(x)
  x = x + self.drop_path(self.ls1 * self.linear_tokens(self.norm1(x):transpose(2, 3)):transpose(2, 3))
  return x + self.drop_path(self.ls2 * self.mlp_channels(self.norm2(x)))
end

-- ResBlock with a fixed LayerScale init
local function res_block(init_values)
  return function(dim, seq_len, o)
    return ResBlock(dim, seq_len, L.merge(o, {init_values = init_values}))
  end
end

local function arch(patch, blocks, dim, init_values)
  return {patch_size = patch, num_blocks = blocks, embed_dim = dim, mlp_ratio = 4,
          block_layer = res_block(init_values), norm_layer = Affine}
end

M.models.resmlp_12_224 = L.variant('resmlp_12_224', mixer.classes.MlpMixer, arch(16, 12, 384, 1e-4))
M.models.resmlp_24_224 = L.variant('resmlp_24_224', mixer.classes.MlpMixer, arch(16, 24, 384, 1e-5))
M.models.resmlp_36_224 = L.variant('resmlp_36_224', mixer.classes.MlpMixer, arch(16, 36, 384, 1e-6))

return M
