-- oneflow.nn.extras: Unfold, Fold, PixelUnshuffle, ChannelShuffle,
-- LocalResponseNorm, Softmax2d, CosineSimilarity and PairwiseDistance --
-- thin modules over the functions of the same names in nn.functional.
--   local cols = nn.Unfold({3, 3}, {padding = 1})(x)   -- [N, C*9, H*W]
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local F = require 'oneflow.nn.functional'

local Module, parse, fail, pyrepr, shape_str = module.Module, U.parse, U.fail, U.pyrepr, U.shape_str
local M = {}

------------------------------------------------------------------ Unfold / Fold
local Unfold = Module:subclass('Unfold')
M.Unfold = Unfold

local unfold_spec = {{'kernel_size', U.REQUIRED}, {'dilation', 1}, {'padding', 0}, {'stride', 1}}

--- nn.Unfold(kernel_size, {dilation = 1, padding = 0, stride = 1})
function Unfold:__init(...)
  Module.__init(self)
  local a = parse('Unfold', unfold_spec, ...)
  self.kernel_size, self.dilation, self.padding, self.stride = a.kernel_size, a.dilation, a.padding, a.stride
end

function Unfold:forward(x)
  return F.unfold(x, self.kernel_size, {dilation = self.dilation, padding = self.padding, stride = self.stride})
end

function Unfold:extra_repr()
  return ('kernel_size=%s, dilation=%s, padding=%s, stride=%s'):format(
    pyrepr(self.kernel_size), pyrepr(self.dilation), pyrepr(self.padding), pyrepr(self.stride))
end

local Fold = Module:subclass('Fold')
M.Fold = Fold

local fold_spec = {{'output_size', U.REQUIRED}, {'kernel_size', U.REQUIRED}, {'dilation', 1},
                   {'padding', 0}, {'stride', 1}}

--- nn.Fold(output_size, kernel_size, {dilation = 1, padding = 0, stride = 1})
function Fold:__init(...)
  Module.__init(self)
  local a = parse('Fold', fold_spec, ...)
  self.output_size, self.kernel_size = a.output_size, a.kernel_size
  self.dilation, self.padding, self.stride = a.dilation, a.padding, a.stride
end

function Fold:forward(x)
  return F.fold(x, self.output_size, self.kernel_size,
                {dilation = self.dilation, padding = self.padding, stride = self.stride})
end

function Fold:extra_repr()
  return ('output_size=%s, kernel_size=%s, dilation=%s, padding=%s, stride=%s'):format(
    pyrepr(self.output_size), pyrepr(self.kernel_size), pyrepr(self.dilation), pyrepr(self.padding),
    pyrepr(self.stride))
end

------------------------------------------------------------------ PixelUnshuffle / ChannelShuffle
local PixelUnshuffle = Module:subclass('PixelUnshuffle')
M.PixelUnshuffle = PixelUnshuffle

--- nn.PixelUnshuffle(downscale_factor)
function PixelUnshuffle:__init(...)
  Module.__init(self)
  self.downscale_factor = parse('PixelUnshuffle', {{'downscale_factor', U.REQUIRED}}, ...).downscale_factor
end
function PixelUnshuffle:forward(x) return F.pixel_unshuffle(x, self.downscale_factor) end
function PixelUnshuffle:extra_repr() return 'downscale_factor=' .. self.downscale_factor end

local ChannelShuffle = Module:subclass('ChannelShuffle')
M.ChannelShuffle = ChannelShuffle

--- nn.ChannelShuffle(groups)
function ChannelShuffle:__init(...)
  Module.__init(self)
  self.groups = parse('ChannelShuffle', {{'groups', U.REQUIRED}}, ...).groups
end
function ChannelShuffle:forward(x) return F.channel_shuffle(x, self.groups) end
function ChannelShuffle:extra_repr() return 'groups=' .. self.groups end

------------------------------------------------------------------ LocalResponseNorm
local LRN = Module:subclass('LocalResponseNorm')
M.LocalResponseNorm = LRN

local lrn_spec = {{'size', U.REQUIRED}, {'alpha', 1e-4}, {'beta', 0.75}, {'k', 1}}

--- nn.LocalResponseNorm(size, {alpha = 1e-4, beta = 0.75, k = 1})
function LRN:__init(...)
  Module.__init(self)
  local a = parse('LocalResponseNorm', lrn_spec, ...)
  self.size, self.alpha, self.beta, self.k = a.size, a.alpha, a.beta, a.k
end

function LRN:forward(x)
  return F.local_response_norm(x, self.size, {alpha = self.alpha, beta = self.beta, k = self.k})
end

function LRN:extra_repr()
  return ('%s, alpha=%s, beta=%s, k=%s'):format(self.size, self.alpha, self.beta, self.k)
end

------------------------------------------------------------------ Softmax2d
local Softmax2d = Module:subclass('Softmax2d')
M.Softmax2d = Softmax2d

--- nn.Softmax2d(): softmax over the channels of [N, C, H, W] or [C, H, W].
function Softmax2d.forward(_, x)
  if x:dim() ~= 3 and x:dim() ~= 4 then
    fail(('Softmax2d: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got %s'):format(shape_str(x)))
  end
  return F.softmax(x, -3)
end

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
