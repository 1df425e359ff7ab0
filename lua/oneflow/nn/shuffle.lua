-- oneflow.nn.shuffle: PixelShuffle, PixelUnshuffle and ChannelShuffle, over
-- the functions of the same names in nn.functional (functional/shuffle.lua).
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local F = require 'oneflow.nn.functional'

local Module, parse = module.Module, U.parse
local M = {}

------------------------------------------------------------------ PixelShuffle
local PixelShuffle = Module:subclass('PixelShuffle')
--- nn.PixelShuffle(upscale_factor): (N, C*r^2, H, W) -> (N, C, H*r, W*r).
-- @function nn.PixelShuffle
M.PixelShuffle = PixelShuffle
function PixelShuffle:__init(r) Module.__init(self); self.upscale_factor = r end
function PixelShuffle:forward(x) return F.pixel_shuffle(x, self.upscale_factor) end
function PixelShuffle:extra_repr() return 'upscale_factor=' .. self.upscale_factor end

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

return M
