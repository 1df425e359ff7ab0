-- flowvision.layers drop: DropPath (stochastic depth) and DropBlock2d, timm's
-- semantics (timm/layers/drop.py). Both are identity in eval mode.
local A = require 'oneflow._args'
local flow = require 'oneflow'

local nn = flow.nn
local F = nn.functional
local L = {}

--- drop_path(x, drop_prob = 0, training = false, scale_by_keep = true): zeroes
-- whole samples with probability drop_prob, scaling the kept ones by 1/keep.
function L.drop_path(x, drop_prob, training, scale_by_keep)
  drop_prob = drop_prob or 0
  if drop_prob == 0 or not training then return x end
  if scale_by_keep == nil then scale_by_keep = true end
  local keep = 1 - drop_prob
  local shape = {x:size(1)}
  for i = 2, x:dim() do shape[i] = 1 end
  local mask = flow.empty(shape, {dtype = x.dtype}):bernoulli_(keep)
  if keep > 0 and scale_by_keep then mask:div_(keep) end
  return x * mask
end

local DropPath = nn.Module:subclass('DropPath')
L.DropPath = DropPath
--- DropPath(drop_prob = 0, {scale_by_keep = true})
function DropPath:__init(drop_prob, opts)
  nn.Module.__init(self)
  if type(drop_prob) == 'table' then opts, drop_prob = drop_prob, drop_prob.drop_prob end
  self.drop_prob = drop_prob or 0
  if self.drop_prob < 0 or self.drop_prob > 1 then
    error('DropPath: drop_prob must be in [0, 1], got ' .. tostring(self.drop_prob), 3)
  end
  self.scale_by_keep = not (opts and opts.scale_by_keep == false)
end
function DropPath:forward(x) return L.drop_path(x, self.drop_prob, self.training, self.scale_by_keep) end
function DropPath:extra_repr() return ('drop_prob=%.3f'):format(self.drop_prob) end

-- min-pool of a 0/1 mask [B, C, H, W] over k x k windows (stride 1, same size)
local function max_pool_same(mask, k, h, w)
  local y = F.max_pool2d(mask, k, 1, math.floor(k / 2))
  if y:size(3) ~= h or y:size(4) ~= w then y = y:narrow(3, 1, h):narrow(4, 1, w) end
  return y
end

--- timm's gamma: the seed-drop rate giving drop_prob of the map dropped.
function L.drop_block_gamma(drop_prob, block_size, h, w, gamma_scale)
  local clipped = math.min(block_size, math.min(w, h))
  return (gamma_scale or 1) * drop_prob * (w * h) / clipped ^ 2 / ((w - block_size + 1) * (h - block_size + 1))
end

--- drop_block_2d(x, {drop_prob = 0.1, block_size = 7, gamma_scale = 1, with_noise = false,
--                batchwise = false}): timm's exact variant (blocks kept inside the map).
function L.drop_block_2d(x, o)
  o = o or {}
  local drop_prob, block_size = o.drop_prob or 0.1, o.block_size or 7
  local c, h, w = x:size(2), x:size(3), x:size(4)
  local clipped = math.min(block_size, math.min(w, h))
  local gamma = L.drop_block_gamma(drop_prob, block_size, h, w, o.gamma_scale)
  -- timm builds the valid region on an (W, H) meshgrid and reshapes it to (H, W)
  local wi = flow.arange(w):view(w, 1):expand(w, h)
  local hi = flow.arange(h):view(1, h):expand(w, h)
  local half, rest = math.floor(clipped / 2), math.floor((clipped - 1) / 2)
  local valid = wi:ge(half):logical_and(wi:lt(w - rest)):logical_and(hi:ge(half)):logical_and(hi:lt(h - rest))
  valid = valid:contiguous():reshape(1, 1, h, w):to(x.dtype)
  local noise = o.batchwise and flow.rand({1, c, h, w}, {dtype = x.dtype}) or flow.rand_like(x)
  local mask = (noise - valid + (2 - gamma)):ge(1):to(x.dtype)
  mask = max_pool_same(mask * -1, clipped, h, w) * -1
  if o.with_noise then
    local nn_ = o.batchwise and flow.randn({1, c, h, w}, {dtype = x.dtype}) or flow.randn_like(x)
    return x * mask + nn_ * (mask * -1 + 1)
  end
  local scale = mask:numel() / (mask:float():sum():item() + 1e-7)
  return x * mask * scale
end

--- drop_block_fast_2d(x, opts): timm's fast variant (seeds anywhere, Bernoulli(gamma)).
function L.drop_block_fast_2d(x, o)
  o = o or {}
  local drop_prob, block_size = o.drop_prob or 0.1, o.block_size or 7
  local h, w = x:size(3), x:size(4)
  local clipped = math.min(block_size, math.min(w, h))
  local gamma = L.drop_block_gamma(drop_prob, block_size, h, w, o.gamma_scale)
  local seeds = flow.empty_like(x):bernoulli_(gamma)
  local mask = max_pool_same(seeds, clipped, h, w)
  if o.with_noise then
    return x * (mask * -1 + 1) + flow.randn_like(x) * mask
  end
  mask = mask * -1 + 1
  local scale = mask:numel() / (mask:float():sum():item() + 1e-6)
  return x * mask * scale
end

local DropBlock2d = nn.Module:subclass('DropBlock2d')
L.DropBlock2d = DropBlock2d
--- DropBlock2d{drop_prob = 0.1, block_size = 7, gamma_scale = 1, with_noise = false,
--              batchwise = false, fast = true} (or DropBlock2d(drop_prob, block_size, opts))
function DropBlock2d:__init(drop_prob, block_size, opts)
  nn.Module.__init(self)
  if type(drop_prob) == 'table' then
    opts, drop_prob, block_size = drop_prob, drop_prob.drop_prob, drop_prob.block_size
  end
  opts = A.check_options('DropBlock2d', opts, {
    batchwise = true, block_size = true, drop_prob = true, fast = true, gamma_scale = true, with_noise = true})
  self.drop_prob = drop_prob or 0.1
  self.block_size = block_size or 7
  self.gamma_scale = opts.gamma_scale or 1
  self.with_noise = opts.with_noise or false
  self.batchwise = opts.batchwise or false
  self.fast = opts.fast ~= false
end
function DropBlock2d:forward(x)
  if not self.training or self.drop_prob == 0 then return x end
  if x:dim() ~= 4 then error('DropBlock2d: expected input [B, C, H, W], got a ' .. x:dim() .. '-d tensor', 2) end
  local o = {drop_prob = self.drop_prob, block_size = self.block_size, gamma_scale = self.gamma_scale,
             with_noise = self.with_noise, batchwise = self.batchwise}
  if self.fast then return L.drop_block_fast_2d(x, o) end
  return L.drop_block_2d(x, o)
end
function DropBlock2d:extra_repr()
  return ('drop_prob=%g, block_size=%d'):format(self.drop_prob, self.block_size)
end

return L
