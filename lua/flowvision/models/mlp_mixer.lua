-- flowvision.models.mlp_mixer: MLP-Mixer (Tolstikhin et al.) as timm's MlpMixer,
-- with its names: stem.proj, blocks.N.{norm1, mlp_tokens.fc1/fc2, norm2,
-- mlp_channels.fc1/fc2}, norm, head. MlpMixer also hosts ResMLP and gMLP
-- (flowvision.models.resmlp / gmlp), which swap the block and norm layers.
--   vision.models.mixer_s16_224({num_classes = 10, img_size = 32})
local flow = require 'oneflow'
local L = require 'flowvision.models.transformer_layers'

local nn, init = flow.nn, flow.nn.init
local M = {models = {}, classes = {}}

local MixerBlock = nn.Module:subclass('MixerBlock')
M.classes.MixerBlock = MixerBlock

--- MixerBlock(dim, seq_len, {mlp_ratio = {0.5, 4}, norm_layer, drop, drop_path})
function MixerBlock:__init(dim, seq_len, o)
  nn.Module.__init(self)
  local r = L.pair(o.mlp_ratio or {0.5, 4})
  local norm = o.norm_layer or L.layer_norm(1e-6)
  self.norm1 = norm(dim)
  self.mlp_tokens = L.Mlp(seq_len, math.floor(r[1] * dim), seq_len, {drop = o.drop})
  self.drop_path = L.drop_path(o.drop_path)
  self.norm2 = norm(dim)
  self.mlp_channels = L.Mlp(dim, math.floor(r[2] * dim), dim, {drop = o.drop})
end

function MixerBlock:forward(x)
  x = x + self.drop_path(self.mlp_tokens(self.norm1(x):transpose(2, 3)):transpose(2, 3))
  return x + self.drop_path(self.mlp_channels(self.norm2(x)))
end

local MlpMixer = nn.Module:subclass('MlpMixer')
M.classes.MlpMixer = MlpMixer

--- MlpMixer{num_classes = 1000, img_size = 224, in_chans = 3, patch_size = 16,
-- num_blocks = 8, embed_dim = 512, mlp_ratio = {0.5, 4}, block_layer =
-- MixerBlock, norm_layer = LayerNorm(eps 1e-6), drop_rate, proj_drop_rate,
-- drop_path_rate, stem_norm = false, global_pool = 'avg'}
function MlpMixer:__init(o)
  nn.Module.__init(self)
  local dim = o.embed_dim or 512
  local norm = o.norm_layer or L.layer_norm(1e-6)
  self.num_classes = o.num_classes or 1000
  self.global_pool = o.global_pool or 'avg'
  self.num_features, self.embed_dim = dim, dim
  self.stem = L.PatchEmbed{img_size = o.img_size or 224, patch_size = o.patch_size or 16,
                           in_chans = o.in_chans or 3, embed_dim = dim,
                           norm_layer = o.stem_norm and norm or nil}
  local block = o.block_layer or MixerBlock
  local blocks = {}
  for i = 1, o.num_blocks or 8 do
    blocks[i] = block(dim, self.stem.num_patches, {mlp_ratio = o.mlp_ratio or {0.5, 4}, norm_layer = norm,
                                                   drop = o.proj_drop_rate, drop_path = o.drop_path_rate})
  end
  self.blocks = nn.Sequential(unpack(blocks))
  self.norm = norm(dim)
  self.head_drop = nn.Dropout(o.drop_rate or 0)
  self.head = self.num_classes > 0 and nn.Linear(dim, self.num_classes) or nn.Identity()
  self:init_weights()
end

--- timm's init: xavier_uniform Linear weights (zeros for the head), conv
-- as lecun normal; block-specific overrides (gMLP's gate) via m:init_weights().
function MlpMixer:init_weights()
  local hooks = {}
  for name, m in self:named_modules() do
    if m.__name == 'Linear' then
      if name:sub(1, 4) == 'head' then
        init.zeros_(m.weight); init.zeros_(m.bias)
      else
        init.xavier_uniform_(m.weight)
        if m.bias ~= nil then
          if name:find('mlp', 1, true) then init.normal_(m.bias, {std = 1e-6}) else init.zeros_(m.bias) end
        end
      end
    elseif m ~= self and m.init_weights then
      hooks[#hooks + 1] = m
    end
  end
  for _, m in ipairs(hooks) do m:init_weights() end
end

function MlpMixer:forward_features(x)
  return self.norm(self.blocks(self.stem(x)))
end

function MlpMixer:forward_head(x, pre_logits)
  if self.global_pool == 'avg' then x = x:mean(2) end
  x = self.head_drop(x)
  if pre_logits then return x end
  return self.head(x)
end

function MlpMixer:forward(x) return self:forward_head(self:forward_features(x)) end

local function arch(patch, blocks, dim)
  return {patch_size = patch, num_blocks = blocks, embed_dim = dim}
end

M.models.mixer_s32_224 = L.variant('mixer_s32_224', MlpMixer, arch(32, 8, 512))
M.models.mixer_s16_224 = L.variant('mixer_s16_224', MlpMixer, arch(16, 8, 512))
M.models.mixer_b32_224 = L.variant('mixer_b32_224', MlpMixer, arch(32, 12, 768))
M.models.mixer_b16_224 = L.variant('mixer_b16_224', MlpMixer, arch(16, 12, 768))
M.models.mixer_l32_224 = L.variant('mixer_l32_224', MlpMixer, arch(32, 24, 1024))
M.models.mixer_l16_224 = L.variant('mixer_l16_224', MlpMixer, arch(16, 24, 1024))
-- flowvision's names
M.models.mlp_mixer_s16_224 = M.models.mixer_s16_224
M.models.mlp_mixer_b16_224 = M.models.mixer_b16_224

return M
