-- flowvision.models.transformer_layers: the pieces that the transformer and
-- MLP models (vit, deit, swin, pvt, mlp_mixer, resmlp, gmlp) share, with
-- timm's attribute names so that state-dict keys equal timm's:
-- PatchEmbed (proj, norm), Mlp (fc1, act, fc2), DropPath, Attention (qkv,
-- proj), Block (norm1, attn, norm2, mlp), plus timm's weight init.
local flow = require 'oneflow'
local module = require 'oneflow.nn.module'

local nn, F = flow.nn, flow.nn.functional
local init = nn.init
local L = {}
-- The forwards below free each value they made once it was read, where
-- oneflow.nn.module's rules allow (doc/nn.md, "Values a forward frees").
local frees, free, step, residual = module.frees, module.free, module.step, module.residual

local function pair(v) if type(v) == 'table' then return v end return {v, v} end
L.pair = pair

--- Copies opts over defaults (neither is modified).
function L.merge(defaults, opts)
  local r = {}
  for k, v in pairs(defaults) do r[k] = v end
  for k, v in pairs(opts or {}) do r[k] = v end
  return r
end

------------------------------------------------------------------ DropPath
local DropPath = nn.Module:subclass('DropPath')
L.DropPath = DropPath

--- Stochastic depth: in training, zeroes whole samples with probability p and
-- scales the kept ones by 1 / (1 - p) (timm's drop_path, scale_by_keep).
function DropPath:__init(p)
  nn.Module.__init(self)
  self.drop_prob = p or 0
end

function DropPath:forward(x)
  local p = self.drop_prob
  if p == 0 or not self.training then return x end
  local shape = {x:size(1)}
  for i = 2, x:dim() do shape[i] = 1 end
  local keep = flow.empty(shape, {dtype = x.dtype}):bernoulli_(1 - p)
  return x * (keep / (1 - p))
end
module.keeps_no_tensors(DropPath)

function DropPath:extra_repr() return ('drop_prob=%s'):format(self.drop_prob) end

--- DropPath(p) when p > 0, else Identity (as timm builds them).
function L.drop_path(p)
  if p and p > 0 then return DropPath(p) end
  return nn.Identity()
end

--- timm's per-block stochastic-depth rates: linspace(0, rate, n).
function L.dpr(rate, n)
  local r = {}
  for i = 1, n do r[i] = n > 1 and rate * (i - 1) / (n - 1) or 0 end
  return r
end

------------------------------------------------------------------ PatchEmbed
local PatchEmbed = nn.Module:subclass('PatchEmbed')
L.PatchEmbed = PatchEmbed

--- PatchEmbed{img_size = 224, patch_size = 16, in_chans = 3, embed_dim = 768,
-- norm_layer = nil, flatten = true, output_fmt = 'NCHW' | 'NHWC', bias = true}
-- -> [B, N, C] (flatten) or [B, H, W, C] (NHWC).
function PatchEmbed:__init(o)
  nn.Module.__init(self)
  self.img_size, self.patch_size = pair(o.img_size or 224), pair(o.patch_size or 16)
  self.grid_size = {math.floor(self.img_size[1] / self.patch_size[1]),
                    math.floor(self.img_size[2] / self.patch_size[2])}
  self.num_patches = self.grid_size[1] * self.grid_size[2]
  self.output_fmt = o.output_fmt
  self.flatten = o.output_fmt == nil and o.flatten ~= false
  self.proj = nn.Conv2d(o.in_chans or 3, o.embed_dim or 768, self.patch_size,
                        {stride = self.patch_size, bias = o.bias ~= false})
  self.norm = o.norm_layer and o.norm_layer(o.embed_dim or 768) or nn.Identity()
end

function PatchEmbed:forward(x)
  if x:dim() ~= 4 or x:size(3) ~= self.img_size[1] or x:size(4) ~= self.img_size[2] then
    error(('PatchEmbed: expected input [B, C, %d, %d] (img_size), got [%s]'):format(
      self.img_size[1], self.img_size[2], table.concat(x:size():totable(), ',')), 2)
  end
  local f = frees(self, x)
  local y = self.proj(x)
  local flat, v = nil, y
  if self.flatten then
    flat = y:flatten(3)
    v = flat:transpose(2, 3)
  elseif self.output_fmt == 'NHWC' then
    v = y:permute(1, 3, 4, 2)
  end
  local out = self.norm(v)
  free(y, f, out)
  free(flat, f, out)
  free(v, f, out)
  return out
end

------------------------------------------------------------------ Mlp
local Mlp = nn.Module:subclass('Mlp')
L.Mlp = Mlp

--- Mlp(in, hidden, out, {act_layer = nn.GELU, drop = 0}): fc1, act, fc2.
function Mlp:__init(in_f, hidden, out_f, o)
  nn.Module.__init(self)
  o = o or {}
  hidden, out_f = hidden or in_f, out_f or in_f
  self.fc1 = nn.Linear(in_f, hidden)
  self.act = (o.act_layer or nn.GELU)()
  self.drop1 = nn.Dropout(o.drop or 0)
  self.fc2 = nn.Linear(hidden, out_f)
  self.drop2 = nn.Dropout(o.drop or 0)
end

function Mlp:forward(x)
  local f = frees(self, x)
  return step(self.drop2, step(self.fc2, step(self.drop1, step(self.act, self.fc1(x), f), f), f), f)
end
module.keeps_no_tensors(Mlp)

------------------------------------------------------------------ attention
--- softmax(q k^T * scale + bias) v for q, k, v [B, H, N, d]; with f (the
-- caller's frees(self, x)) each value made here is freed once read.
function L.attention(q, k, v, scale, bias, drop, training, f)
  local qs, kt = q * scale, k:transpose(-2, -1)
  local attn = qs:matmul(kt)
  free(qs, f, attn)
  free(kt, f, attn)
  if bias ~= nil then
    local biased = attn + bias
    free(attn, f, biased)
    attn = biased
  end
  local p = F.softmax(attn, -1)
  free(attn, f, p)
  if drop and drop > 0 then
    local dropped = F.dropout(p, drop, training)
    free(p, f, dropped)
    p = dropped
  end
  local out = p:matmul(v)
  free(p, f, out)
  return out
end

local Attention = nn.Module:subclass('Attention')
L.Attention = Attention

--- Attention(dim, {num_heads = 8, qkv_bias = true, attn_drop = 0, proj_drop = 0})
function Attention:__init(dim, o)
  nn.Module.__init(self)
  o = o or {}
  self.num_heads = o.num_heads or 8
  self.head_dim = math.floor(dim / self.num_heads)
  self.scale = self.head_dim ^ -0.5
  self.qkv = nn.Linear(dim, dim * 3, o.qkv_bias ~= false)
  self.attn_drop_p = o.attn_drop or 0
  self.proj = nn.Linear(dim, dim)
  self.proj_drop = nn.Dropout(o.proj_drop or 0)
end

function Attention:forward(x)
  local f = frees(self, x)
  local b, n, c = x:size(1), x:size(2), x:size(3)
  local lin = self.qkv(x)
  local split = lin:reshape(b, n, 3, self.num_heads, self.head_dim)
  local qkv = split:permute(3, 1, 4, 2, 5)
  local q, k, v = qkv[1], qkv[2], qkv[3]
  local o = L.attention(q, k, v, self.scale, nil, self.attn_drop_p, self.training, f)
  for _, t in ipairs({lin, split, qkv, q, k, v}) do free(t, f, o) end
  local ot = o:transpose(2, 3)
  local merged = ot:reshape(b, n, c)
  free(o, f, merged)
  free(ot, f, merged)
  return step(self.proj_drop, step(self.proj, merged, f), f)
end
module.keeps_no_tensors(Attention)

------------------------------------------------------------------ Block
local Block = nn.Module:subclass('Block')
L.Block = Block

--- Pre-norm transformer block: x + attn(norm1(x)), x + mlp(norm2(x)).
-- Block(dim, {num_heads, mlp_ratio = 4, qkv_bias = true, drop_path = 0,
-- proj_drop = 0, attn_drop = 0, norm_layer = LayerNorm(eps 1e-6)})
function Block:__init(dim, o)
  nn.Module.__init(self)
  local norm = o.norm_layer or L.layer_norm(1e-6)
  self.norm1 = norm(dim)
  self.attn = Attention(dim, {num_heads = o.num_heads, qkv_bias = o.qkv_bias,
                              attn_drop = o.attn_drop, proj_drop = o.proj_drop})
  self.drop_path1 = L.drop_path(o.drop_path)
  self.norm2 = norm(dim)
  self.mlp = Mlp(dim, math.floor(dim * (o.mlp_ratio or 4)), dim, {drop = o.proj_drop})
  self.drop_path2 = L.drop_path(o.drop_path)
end

-- (a norm may be an Identity: its output is then the value it read, which
-- stays live for the residual)
function Block:forward(x)
  local f = frees(self, x)
  local n1 = self.norm1(x)
  local x1 = residual(x, step(self.drop_path1, step(self.attn, n1, f), f), f)
  local n2 = self.norm2(x1)
  local m = self.mlp(n2)
  if not rawequal(n2, x1) then free(n2, f, m) end
  local out = residual(x1, step(self.drop_path2, m, f), f)
  free(x1, f, out)
  return out
end
module.keeps_no_tensors(Block)

--- A norm_layer constructor: LayerNorm(dim) with the given eps.
function L.layer_norm(eps)
  return function(dim) return nn.LayerNorm(dim, {eps = eps}) end
end

------------------------------------------------------------------ init
--- timm's trunc_normal_(t, std = std) with its default bounds (-2, 2): at
-- the small stds used they are 50+ sigmas away, so a clamped normal draw is
-- the same distribution, and much faster than the inverse-CDF method.
function L.trunc_normal_(t, std)
  return flow.no_grad(function() return t:normal_(0, std):clamp_(-2, 2) end)
end

--- timm's usual init: Linear weights trunc_normal(std = .02), biases 0,
-- LayerNorm 1 / 0 (already their defaults).
function L.init_linear_trunc(m)
  for _, mod in ipairs(m:modules()) do
    if mod.__name == 'Linear' then
      L.trunc_normal_(mod.weight, 0.02)
      if mod.bias ~= nil then init.zeros_(mod.bias) end
    end
  end
end

------------------------------------------------------------------ constructors
--- A registry constructor: fn(opts) builds cls(defaults + opts). Pretrained
-- weights are loaded by flowvision.models.create (the registry).
function L.variant(_, cls, defaults)
  return function(opts) return cls(L.merge(defaults, opts)) end
end

return L
