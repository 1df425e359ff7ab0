-- flowvision.models.gmlp: gMLP (Liu et al., "Pay Attention to MLPs") as timm
-- builds it (an MlpMixer with SpatialGatingBlock and GatedMlp), with its
-- names: stem.proj, blocks.N.{norm, mlp_channels.{fc1, gate.norm, gate.proj,
-- fc2}}, norm, head.
--   vision.models.gmlp_s16_224({num_classes = 10, img_size = 32})
local flow = require 'oneflow'
local L = require 'flowvision.models.transformer_layers'
local mixer = require 'flowvision.models.mlp_mixer'

local nn, init = flow.nn, flow.nn.init
local M = {models = {}, classes = {}}

local SpatialGatingUnit = nn.Module:subclass('SpatialGatingUnit')
M.classes.SpatialGatingUnit = SpatialGatingUnit

--- u * proj(norm(v)^T)^T with (u, v) the halves of the last dim; proj mixes tokens.
function SpatialGatingUnit:__init(dim, seq_len)
  nn.Module.__init(self)
  self.norm = nn.LayerNorm(math.floor(dim / 2))
  self.proj = nn.Linear(seq_len, seq_len)
end

function SpatialGatingUnit:init_weights()
  init.normal_(self.proj.weight, {std = 1e-6})
  init.ones_(self.proj.bias)
end

function SpatialGatingUnit:forward(x)
  local h = x:chunk(2, -1)
  local v = self.proj(self.norm(h[2]):transpose(-1, -2))
  return h[1] * v:transpose(-1, -2)
end

local GatedMlp = nn.Module:subclass('GatedMlp')
M.classes.GatedMlp = GatedMlp

function GatedMlp:__init(in_f, hidden, seq_len, o)
  nn.Module.__init(self)
  self.fc1 = nn.Linear(in_f, hidden)
  self.act = nn.GELU()
  self.drop1 = nn.Dropout(o.drop or 0)
  self.gate = SpatialGatingUnit(hidden, seq_len)
  self.fc2 = nn.Linear(math.floor(hidden / 2), in_f)
  self.drop2 = nn.Dropout(o.drop or 0)
end

function GatedMlp:forward(x)
  x = self.gate(self.drop1(self.act(self.fc1(x))))
  return self.drop2(self.fc2(x))
end

local SpatialGatingBlock = nn.Module:subclass('SpatialGatingBlock')
M.classes.SpatialGatingBlock = SpatialGatingBlock

function SpatialGatingBlock:__init(dim, seq_len, o)
  nn.Module.__init(self)
  self.norm = (o.norm_layer or L.layer_norm(1e-6))(dim)
  self.mlp_channels = GatedMlp(dim, math.floor(dim * (o.mlp_ratio or 4)), seq_len, o)
  self.drop_path = L.drop_path(o.drop_path)
end

function SpatialGatingBlock:forward(x)
  return x + self.drop_path(self.mlp_channels(self.norm(x)))
end

local function arch(dim)
  return {patch_size = 16, num_blocks = 30, embed_dim = dim, mlp_ratio = 6, block_layer = SpatialGatingBlock}
end

M.models.gmlp_ti16_224 = L.variant('gmlp_ti16_224', mixer.classes.MlpMixer, arch(128))
M.models.gmlp_s16_224 = L.variant('gmlp_s16_224', mixer.classes.MlpMixer, arch(256))
M.models.gmlp_b16_224 = L.variant('gmlp_b16_224', mixer.classes.MlpMixer, arch(512))

return M
