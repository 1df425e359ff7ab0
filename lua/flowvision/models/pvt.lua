-- flowvision.models.pvt: Pyramid Vision Transformer v2 (Wang et al.) as timm's
-- PyramidVisionTransformerV2, with its names: patch_embed.{proj, norm},
-- stages.S.downsample.{proj, norm} (stages 2..4), stages.S.blocks.N.{norm1,
-- attn.{q, kv, proj, sr, norm}, norm2, mlp.{fc1, dwconv, fc2}}, stages.S.norm,
-- head. Attention keys and values come from a map reduced by a strided conv
-- (sr_ratio); the MLP has a 3x3 depthwise conv. Any input size whose
-- feature maps stay >= sr_ratio works (e.g. 64x64 for a quick test).
--   vision.models.pvt_v2_b0({num_classes = 10})
local flow = require 'oneflow'
local L = require 'flowvision.models.transformer_layers'

local nn = flow.nn
local M = {models = {}, classes = {}}

------------------------------------------------------------------ MLP with depthwise conv
local MlpDW = nn.Module:subclass('MlpWithDepthwiseConv')

function MlpDW:__init(in_f, hidden, o)
  nn.Module.__init(self)
  self.fc1 = nn.Linear(in_f, hidden)
  self.relu = o.extra_relu and nn.ReLU() or nn.Identity()
  self.dwconv = nn.Conv2d(hidden, hidden, 3, 1, 1, {groups = hidden, bias = true})
  self.act = nn.GELU()
  self.fc2 = nn.Linear(hidden, in_f)
  self.drop = nn.Dropout(o.drop or 0)
end

function MlpDW:forward(x, h, w)
  x = self.fc1(x)
  local b, c = x:size(1), x:size(3)
  x = x:transpose(2, 3):reshape(b, c, h, w)
  x = self.dwconv(self.relu(x))
  x = self.drop(self.act(x:flatten(3):transpose(2, 3)))
  return self.drop(self.fc2(x))
end

------------------------------------------------------------------ spatial-reduction attention
local Attention = nn.Module:subclass('PvtAttention')

function Attention:__init(dim, o)
  nn.Module.__init(self)
  self.num_heads = o.num_heads
  self.head_dim = math.floor(dim / o.num_heads)
  self.scale = self.head_dim ^ -0.5
  self.q = nn.Linear(dim, dim, o.qkv_bias ~= false)
  self.kv = nn.Linear(dim, dim * 2, o.qkv_bias ~= false)
  self.attn_drop_p = o.attn_drop or 0
  self.proj = nn.Linear(dim, dim)
  self.proj_drop = nn.Dropout(o.proj_drop or 0)
  self.linear_attn = o.linear_attn
  if o.linear_attn then
    self.pool = nn.AdaptiveAvgPool2d(7)
    self.sr = nn.Conv2d(dim, dim, 1, 1)
    self.norm = nn.LayerNorm(dim)
    self.act = nn.GELU()
  elseif (o.sr_ratio or 1) > 1 then
    self.sr = nn.Conv2d(dim, dim, o.sr_ratio, o.sr_ratio)
    self.norm = nn.LayerNorm(dim)
  end
end

function Attention:forward(x, h, w)
  local b, n, c = x:size(1), x:size(2), x:size(3)
  local nh, hd = self.num_heads, self.head_dim
  local q = self.q(x):reshape(b, n, nh, -1):permute(1, 3, 2, 4)
  local kvin = x
  if self.sr ~= nil then
    local m = x:permute(1, 3, 2):reshape(b, c, h, w)
    if self.linear_attn then m = self.pool(m) end
    kvin = self.norm(self.sr(m):reshape(b, c, -1):permute(1, 3, 2))
    if self.linear_attn then kvin = self.act(kvin) end
  end
  local kv = self.kv(kvin):reshape(b, -1, 2, nh, hd):permute(3, 1, 4, 2, 5)
  x = L.attention(q, kv[1], kv[2], self.scale, nil, self.attn_drop_p, self.training)
  x = x:transpose(2, 3):reshape(b, n, c)
  return self.proj_drop(self.proj(x))
end

------------------------------------------------------------------ block, patch embed, stage
local Block = nn.Module:subclass('PvtBlock')

function Block:__init(dim, o)
  nn.Module.__init(self)
  self.norm1 = nn.LayerNorm(dim, {eps = 1e-6})
  self.attn = Attention(dim, o)
  self.drop_path1 = L.drop_path(o.drop_path)
  self.norm2 = nn.LayerNorm(dim, {eps = 1e-6})
  self.mlp = MlpDW(dim, math.floor(dim * o.mlp_ratio), {drop = o.proj_drop, extra_relu = o.linear_attn})
  self.drop_path2 = L.drop_path(o.drop_path)
end

function Block:forward(x, h, w)
  x = x + self.drop_path1(self.attn(self.norm1(x), h, w))
  return x + self.drop_path2(self.mlp(self.norm2(x), h, w))
end

local OverlapPatchEmbed = nn.Module:subclass('OverlapPatchEmbed')

function OverlapPatchEmbed:__init(patch_size, stride, in_chans, embed_dim)
  nn.Module.__init(self)
  self.proj = nn.Conv2d(in_chans, embed_dim, patch_size, {stride = stride,
                                                          padding = math.floor(patch_size / 2)})
  self.norm = nn.LayerNorm(embed_dim)
end

--- [B, C, H, W] -> [B, H', W', C']
function OverlapPatchEmbed:forward(x)
  return self.norm(self.proj(x):permute(1, 3, 4, 2))
end

local Stage = nn.Module:subclass('PyramidVisionTransformerStage')

function Stage:__init(dim, dim_out, o)
  nn.Module.__init(self)
  if o.downsample then self.downsample = OverlapPatchEmbed(3, 2, dim, dim_out) end
  local blocks = {}
  for i = 1, o.depth do
    blocks[i] = Block(dim_out, {num_heads = o.num_heads, sr_ratio = o.sr_ratio, linear_attn = o.linear_attn,
      mlp_ratio = o.mlp_ratio, qkv_bias = o.qkv_bias, proj_drop = o.proj_drop, attn_drop = o.attn_drop,
      drop_path = o.drop_path[i]})
  end
  self.blocks = nn.ModuleList(blocks)
  self.norm = nn.LayerNorm(dim_out, {eps = 1e-6})
end

--- [B, H, W, C] -> [B, C', H', W']
function Stage:forward(x)
  if self.downsample ~= nil then x = self.downsample(x:permute(1, 4, 2, 3)) end
  local b, h, w, c = x:size(1), x:size(2), x:size(3), x:size(4)
  x = x:reshape(b, -1, c)
  for _, blk in ipairs(self.blocks) do x = blk(x, h, w) end
  x = self.norm(x)
  return x:reshape(b, h, w, -1)
end

------------------------------------------------------------------ model
local PVT = nn.Module:subclass('PyramidVisionTransformerV2')
M.classes.PyramidVisionTransformerV2 = PVT

--- PyramidVisionTransformerV2{in_chans = 3, num_classes = 1000, depths =
-- {3, 4, 6, 3}, embed_dims = {64, 128, 256, 512}, num_heads = {1, 2, 4, 8},
-- sr_ratios = {8, 4, 2, 1}, mlp_ratios = {8, 8, 4, 4}, qkv_bias = true,
-- linear = false, drop_rate, proj_drop_rate, attn_drop_rate, drop_path_rate}
function PVT:__init(o)
  nn.Module.__init(self)
  local depths, dims = o.depths or {3, 4, 6, 3}, o.embed_dims or {64, 128, 256, 512}
  local heads, srs = o.num_heads or {1, 2, 4, 8}, o.sr_ratios or {8, 4, 2, 1}
  local mlps = o.mlp_ratios or {8, 8, 4, 4}
  self.num_classes = o.num_classes or 1000
  self.patch_embed = OverlapPatchEmbed(7, 4, o.in_chans or 3, dims[1])
  local total = 0
  for _, d in ipairs(depths) do total = total + d end
  local dpr_all, cur = L.dpr(o.drop_path_rate or 0, total), 0
  local stages, prev = {}, dims[1]
  for i = 1, #depths do
    local dpr = {}
    for j = 1, depths[i] do dpr[j] = dpr_all[cur + j] end
    cur = cur + depths[i]
    stages[i] = Stage(prev, dims[i], {depth = depths[i], downsample = i > 1, num_heads = heads[i],
      sr_ratio = srs[i], linear_attn = o.linear, mlp_ratio = mlps[i], qkv_bias = o.qkv_bias,
      proj_drop = o.proj_drop_rate, attn_drop = o.attn_drop_rate, drop_path = dpr})
    prev = dims[i]
  end
  self.stages = nn.Sequential(unpack(stages))
  self.num_features = dims[#dims]
  self.head_drop = nn.Dropout(o.drop_rate or 0)
  self.head = self.num_classes > 0 and nn.Linear(self.num_features, self.num_classes) or nn.Identity()
  L.init_linear_trunc(self)
end

--- [B, C, H/32, W/32]
function PVT:forward_features(x)
  x = self.patch_embed(x)
  local n = #self.stages
  for i = 1, n do
    x = self.stages[i](x)
    if i < n then x = x:contiguous() end
  end
  return x:permute(1, 4, 2, 3):contiguous()
end

function PVT:forward_head(x, pre_logits)
  x = self.head_drop(x:mean({3, 4}))
  if pre_logits then return x end
  return self.head(x)
end

function PVT:forward(x) return self:forward_head(self:forward_features(x)) end

local function b(depths, dims, extra)
  local a = {depths = depths, embed_dims = dims or {64, 128, 320, 512}, num_heads = {1, 2, 5, 8}}
  for k, v in pairs(extra or {}) do a[k] = v end
  return a
end

M.models.pvt_v2_b0 = L.variant('pvt_v2_b0', PVT, b({2, 2, 2, 2}, {32, 64, 160, 256}))
M.models.pvt_v2_b1 = L.variant('pvt_v2_b1', PVT, b({2, 2, 2, 2}))
M.models.pvt_v2_b2 = L.variant('pvt_v2_b2', PVT, b({3, 4, 6, 3}))
M.models.pvt_v2_b3 = L.variant('pvt_v2_b3', PVT, b({3, 4, 18, 3}))
M.models.pvt_v2_b4 = L.variant('pvt_v2_b4', PVT, b({3, 8, 27, 3}))
M.models.pvt_v2_b5 = L.variant('pvt_v2_b5', PVT, b({3, 6, 40, 3}, nil, {mlp_ratios = {4, 4, 4, 4}}))
M.models.pvt_v2_b2_li = L.variant('pvt_v2_b2_li', PVT, b({3, 4, 6, 3}, nil, {linear = true}))

return M
