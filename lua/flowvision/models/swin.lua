-- flowvision.models.swin: Swin Transformer (Liu et al.) as timm (>= 0.9)
-- builds it, with its names: patch_embed.{proj, norm}, layers.S.downsample
-- (PatchMerging: norm, reduction; stages 2..4), layers.S.blocks.N.{norm1,
-- attn.{relative_position_bias_table, qkv, proj}, norm2, mlp.fc1, mlp.fc2},
-- norm, head.fc. Window attention adds the relative position bias; odd
-- blocks shift the windows by half a window (cyclic roll) and mask the
-- pairs that were not neighbours (-100, as timm). relative_position_index
-- (timm's 0-based values) and attn_mask are non-persistent buffers, as in
-- timm, so they are not in the state dict. Windows larger than a stage's
-- resolution shrink to it (and do not shift); resolutions that are not a
-- multiple of the window are padded.
--   vision.models.swin_tiny_patch4_window7_224({num_classes = 10, img_size = 32})
local flow = require 'oneflow'
local L = require 'flowvision.models.transformer_layers'

local nn, F = flow.nn, flow.nn.functional
local M = {models = {}, classes = {}}

------------------------------------------------------------------ window helpers
-- [B, H, W, C] -> [B * nW, wh * ww, C]
local function window_partition(x, wh, ww)
  local b, h, w, c = x:size(1), x:size(2), x:size(3), x:size(4)
  x = x:view(b, h / wh, wh, w / ww, ww, c):permute(1, 2, 4, 3, 5, 6):contiguous()
  return x:view(-1, wh * ww, c)
end

-- [B * nW, wh * ww, C] -> [B, H, W, C]
local function window_reverse(x, wh, ww, h, w)
  local c = x:size(-1)
  x = x:view(-1, h / wh, w / ww, wh, ww, c):permute(1, 2, 4, 3, 5, 6):contiguous()
  return x:view(-1, h, w, c)
end

-- timm's get_relative_position_index, as a Lua table [N][N] of 0-based values
local function relative_position_index(wh, ww)
  local n, idx = wh * ww, {}
  for i = 0, n - 1 do
    local row, hi, wi = {}, math.floor(i / ww), i % ww
    for j = 0, n - 1 do
      local hj, wj = math.floor(j / ww), j % ww
      row[j + 1] = (hi - hj + wh - 1) * (2 * ww - 1) + (wi - wj + ww - 1)
    end
    idx[i + 1] = row
  end
  return idx
end

------------------------------------------------------------------ WindowAttention
local WindowAttention = nn.Module:subclass('WindowAttention')
M.classes.WindowAttention = WindowAttention

function WindowAttention:__init(dim, o)
  nn.Module.__init(self)
  local wh, ww = o.window_size[1], o.window_size[2]
  self.window_size, self.window_area = {wh, ww}, wh * ww
  self.num_heads = o.num_heads
  self.head_dim = o.head_dim or math.floor(dim / o.num_heads)
  local attn_dim = self.head_dim * self.num_heads
  self.scale = self.head_dim ^ -0.5
  self.relative_position_bias_table = nn.Parameter(flow.zeros((2 * wh - 1) * (2 * ww - 1), self.num_heads))
  local idx = flow.tensor(relative_position_index(wh, ww), {dtype = flow.int64})
  self:register_buffer('relative_position_index', idx, {persistent = false})
  self._index1 = (idx + 1):view(-1)     -- 1-based, flattened, for index_select
  self.qkv = nn.Linear(dim, attn_dim * 3, o.qkv_bias ~= false)
  self.attn_drop_p = o.attn_drop or 0
  self.proj = nn.Linear(attn_dim, dim)
  self.proj_drop = nn.Dropout(o.proj_drop or 0)
  L.trunc_normal_(self.relative_position_bias_table, 0.02)
end

-- [1, nH, N, N]
function WindowAttention:_get_rel_pos_bias()
  local n = self.window_area
  local b = self.relative_position_bias_table:index_select(1, self._index1):view(n, n, -1)
  return b:permute(3, 1, 2):unsqueeze(1)
end

--- x [B * nW, N, C]; mask [nW, N, N] (0 / -100) or nil.
function WindowAttention:forward(x, mask)
  local b, n = x:size(1), x:size(2)
  local h = self.num_heads
  local qkv = self.qkv(x):reshape(b, n, 3, h, -1):permute(3, 1, 4, 2, 5)
  local q, k, v = qkv[1], qkv[2], qkv[3]
  local attn = (q * self.scale):matmul(k:transpose(-2, -1)) + self:_get_rel_pos_bias()
  if mask ~= nil then
    local nw = mask:size(1)
    attn = attn:view(-1, nw, h, n, n) + mask:unsqueeze(2):unsqueeze(1)
    attn = attn:view(-1, h, n, n)
  end
  attn = F.softmax(attn, -1)
  if self.attn_drop_p > 0 then attn = F.dropout(attn, self.attn_drop_p, self.training) end
  x = attn:matmul(v):transpose(2, 3):reshape(b, n, -1)
  return self.proj_drop(self.proj(x))
end

------------------------------------------------------------------ SwinTransformerBlock
local SwinBlock = nn.Module:subclass('SwinTransformerBlock')
M.classes.SwinTransformerBlock = SwinBlock

-- the shifted-window mask [nW, N, N] for a padded hp x wp map
local function shift_mask(hp, wp, wh, ww, sh, sw)
  local function region(i, size, win, shift)
    if i < size - win then return 0 elseif i < size - shift then return 1 end
    return 2
  end
  local masks = {}
  for wy = 0, hp / wh - 1 do
    for wx = 0, wp / ww - 1 do
      local ids = {}
      for y = 0, wh - 1 do
        for x = 0, ww - 1 do
          ids[#ids + 1] = region(wy * wh + y, hp, wh, sh) * 3 + region(wx * ww + x, wp, ww, sw)
        end
      end
      local m = {}
      for i = 1, #ids do
        local row = {}
        for j = 1, #ids do row[j] = ids[i] == ids[j] and 0 or -100 end
        m[i] = row
      end
      masks[#masks + 1] = m
    end
  end
  return flow.tensor(masks)
end

function SwinBlock:__init(dim, o)
  nn.Module.__init(self)
  local res, ws, ss = o.input_resolution, L.pair(o.window_size or 7), L.pair(o.shift_size or 0)
  self.input_resolution = res
  local win, shift = {}, {}
  for i = 1, 2 do
    win[i] = res[i] <= ws[i] and res[i] or ws[i]
    shift[i] = res[i] <= win[i] and 0 or ss[i]
  end
  self.window_size, self.shift_size = win, shift
  self.window_area = win[1] * win[2]
  self.norm1 = nn.LayerNorm(dim)
  self.attn = WindowAttention(dim, {num_heads = o.num_heads, head_dim = o.head_dim, window_size = win,
                                    qkv_bias = o.qkv_bias, attn_drop = o.attn_drop,
                                    proj_drop = o.proj_drop})
  self.drop_path1 = L.drop_path(o.drop_path)
  self.norm2 = nn.LayerNorm(dim)
  self.mlp = L.Mlp(dim, math.floor(dim * (o.mlp_ratio or 4)), dim, {drop = o.proj_drop})
  self.drop_path2 = L.drop_path(o.drop_path)
  local mask
  if shift[1] > 0 or shift[2] > 0 then
    local hp = math.ceil(res[1] / win[1]) * win[1]
    local wp = math.ceil(res[2] / win[2]) * win[2]
    mask = shift_mask(hp, wp, win[1], win[2], shift[1], shift[2])
  end
  self:register_buffer('attn_mask', mask, {persistent = false})
end

function SwinBlock:_attn(x)
  local h, w = x:size(2), x:size(3)
  local wh, ww = self.window_size[1], self.window_size[2]
  local sh, sw = self.shift_size[1], self.shift_size[2]
  local shifted = sh > 0 or sw > 0
  if shifted then x = flow.roll(x, {-sh, -sw}, {2, 3}) end
  local ph, pw = (wh - h % wh) % wh, (ww - w % ww) % ww
  if ph > 0 or pw > 0 then x = F.pad(x, {0, 0, 0, pw, 0, ph}) end
  local hp, wp = h + ph, w + pw
  local windows = self.attn(window_partition(x, wh, ww), self.attn_mask)
  x = window_reverse(windows, wh, ww, hp, wp)
  if ph > 0 or pw > 0 then x = x:narrow(2, 1, h):narrow(3, 1, w):contiguous() end
  if shifted then x = flow.roll(x, {sh, sw}, {2, 3}) end
  return x
end

--- x [B, H, W, C] -> [B, H, W, C]
function SwinBlock:forward(x)
  local b, h, w, c = x:size(1), x:size(2), x:size(3), x:size(4)
  x = x + self.drop_path1(self:_attn(self.norm1(x)))
  x = x:reshape(b, -1, c)
  x = x + self.drop_path2(self.mlp(self.norm2(x)))
  return x:reshape(b, h, w, c)
end

------------------------------------------------------------------ PatchMerging
local PatchMerging = nn.Module:subclass('PatchMerging')
M.classes.PatchMerging = PatchMerging

function PatchMerging:__init(dim, out_dim)
  nn.Module.__init(self)
  self.dim, self.out_dim = dim, out_dim or 2 * dim
  self.norm = nn.LayerNorm(4 * dim)
  self.reduction = nn.Linear(4 * dim, self.out_dim, false)
end

function PatchMerging:forward(x)
  local b, h, w, c = x:size(1), x:size(2), x:size(3), x:size(4)
  if h % 2 ~= 0 or w % 2 ~= 0 then
    error(('PatchMerging: expected an even height and width, got %dx%d'):format(h, w), 2)
  end
  x = x:reshape(b, h / 2, 2, w / 2, 2, c):permute(1, 2, 4, 5, 3, 6):reshape(b, h / 2, w / 2, 4 * c)
  return self.reduction(self.norm(x))
end

------------------------------------------------------------------ stage, head, model
local Stage = nn.Module:subclass('SwinTransformerStage')
M.classes.SwinTransformerStage = Stage

function Stage:__init(dim, out_dim, o)
  nn.Module.__init(self)
  local res = o.input_resolution
  if o.downsample then
    self.downsample = PatchMerging(dim, out_dim)
    res = {math.floor(res[1] / 2), math.floor(res[2] / 2)}
  else
    self.downsample = nn.Identity()
  end
  self.output_resolution = res
  local ws = L.pair(o.window_size or 7)
  local blocks = {}
  for i = 1, o.depth do
    blocks[i] = SwinBlock(out_dim, {input_resolution = res, num_heads = o.num_heads, head_dim = o.head_dim,
      window_size = ws, shift_size = (i % 2 == 0) and {math.floor(ws[1] / 2), math.floor(ws[2] / 2)} or 0,
      mlp_ratio = o.mlp_ratio, qkv_bias = o.qkv_bias, proj_drop = o.proj_drop, attn_drop = o.attn_drop,
      drop_path = o.drop_path[i]})
  end
  self.blocks = nn.Sequential(unpack(blocks))
end

function Stage:forward(x) return self.blocks(self.downsample(x)) end

local ClassifierHead = nn.Module:subclass('ClassifierHead')
M.classes.ClassifierHead = ClassifierHead

--- timm's ClassifierHead: global average pool ('avg', NHWC or NCHW input),
-- dropout, fc.
function ClassifierHead:__init(in_features, num_classes, o)
  nn.Module.__init(self)
  o = o or {}
  self.pool_type, self.input_fmt = o.pool_type or 'avg', o.input_fmt or 'NCHW'
  self.drop = nn.Dropout(o.drop_rate or 0)
  self.fc = num_classes > 0 and nn.Linear(in_features, num_classes) or nn.Identity()
end

function ClassifierHead:forward(x, pre_logits)
  if self.pool_type == 'avg' then
    if self.input_fmt == 'NHWC' then x = x:mean({2, 3}) else x = x:mean({3, 4}) end
  end
  x = self.drop(x)
  if pre_logits then return x end
  return self.fc(x)
end

local SwinTransformer = nn.Module:subclass('SwinTransformer')
M.classes.SwinTransformer = SwinTransformer

--- SwinTransformer{img_size = 224, patch_size = 4, in_chans = 3, num_classes =
-- 1000, embed_dim = 96, depths = {2, 2, 6, 2}, num_heads = {3, 6, 12, 24},
-- window_size = 7, mlp_ratio = 4, qkv_bias = true, drop_rate = 0,
-- proj_drop_rate = 0, attn_drop_rate = 0, drop_path_rate = 0.1}
function SwinTransformer:__init(o)
  nn.Module.__init(self)
  local depths, heads = o.depths or {2, 2, 6, 2}, o.num_heads or {3, 6, 12, 24}
  local nl, e = #depths, o.embed_dim or 96
  self.num_classes = o.num_classes or 1000
  self.num_layers = nl
  self.num_features = e * 2 ^ (nl - 1)
  self.patch_embed = L.PatchEmbed{img_size = o.img_size or 224, patch_size = o.patch_size or 4,
    in_chans = o.in_chans or 3, embed_dim = e, norm_layer = nn.LayerNorm, output_fmt = 'NHWC'}
  local grid = self.patch_embed.grid_size
  local total = 0
  for _, d in ipairs(depths) do total = total + d end
  local dpr_all = L.dpr(o.drop_path_rate == nil and 0.1 or o.drop_path_rate, total)
  local layers, in_dim, scale, cur = {}, e, 1, 0
  for i = 1, nl do
    local dpr = {}
    for j = 1, depths[i] do dpr[j] = dpr_all[cur + j] end
    cur = cur + depths[i]
    local out_dim = e * 2 ^ (i - 1)
    layers[i] = Stage(in_dim, out_dim, {input_resolution = {math.floor(grid[1] / scale),
      math.floor(grid[2] / scale)}, depth = depths[i], downsample = i > 1, num_heads = heads[i],
      window_size = o.window_size or 7, mlp_ratio = o.mlp_ratio, qkv_bias = o.qkv_bias,
      proj_drop = o.proj_drop_rate, attn_drop = o.attn_drop_rate, drop_path = dpr})
    in_dim = out_dim
    if i > 1 then scale = scale * 2 end
  end
  self.layers = nn.Sequential(unpack(layers))
  self.norm = nn.LayerNorm(self.num_features)
  self.head = ClassifierHead(self.num_features, self.num_classes, {pool_type = 'avg', input_fmt = 'NHWC',
                                                                   drop_rate = o.drop_rate})
  L.init_linear_trunc(self)
end

--- [B, H/32, W/32, C] after the final norm (NHWC, as timm).
function SwinTransformer:forward_features(x)
  return self.norm(self.layers(self.patch_embed(x)))
end

function SwinTransformer:forward_head(x, pre_logits) return self.head(x, pre_logits) end

function SwinTransformer:forward(x) return self:forward_head(self:forward_features(x)) end

M.models.swin_tiny_patch4_window7_224 = L.variant('swin_tiny_patch4_window7_224', SwinTransformer,
  {patch_size = 4, window_size = 7, embed_dim = 96, depths = {2, 2, 6, 2}, num_heads = {3, 6, 12, 24}})
M.models.swin_t = M.models.swin_tiny_patch4_window7_224

return M
