-- oneflow.nn.upsampling: Upsample, UpsamplingNearest2d, UpsamplingBilinear2d
-- (over F.interpolate); PixelShuffle is in shuffle.lua.
--   nn.Upsample({scale_factor = 2, mode = 'bilinear', align_corners = false})
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local F = require 'oneflow.nn.functional'

local Module, parse, pyrepr = module.Module, U.parse, U.pyrepr
local M = {}

local Upsample = Module:subclass('Upsample')
--- nn.Upsample({size =, scale_factor =, mode = 'nearest', align_corners =}): F.interpolate as a module.
-- @function nn.Upsample
M.Upsample = Upsample

local spec = {{'size', nil}, {'scale_factor', nil}, {'mode', 'nearest'}, {'align_corners', nil},
              {'recompute_scale_factor', nil}}

function Upsample:__init(...)
  Module.__init(self)
  local a = parse('Upsample', spec, ...)
  self.size, self.scale_factor, self.mode = a.size, a.scale_factor, a.mode
  self.align_corners, self.recompute_scale_factor = a.align_corners, a.recompute_scale_factor
end

function Upsample:forward(x)
  return F.interpolate(x, {size = self.size, scale_factor = self.scale_factor, mode = self.mode,
                           align_corners = self.align_corners,
                           recompute_scale_factor = self.recompute_scale_factor})
end

function Upsample:extra_repr()
  local s = self.scale_factor ~= nil and ('scale_factor=' .. pyrepr(self.scale_factor))
            or ('size=' .. pyrepr(self.size))
  return s .. ', mode=' .. pyrepr(self.mode)
end

local UpsamplingNearest2d = Upsample:subclass('UpsamplingNearest2d')
--- nn.UpsamplingNearest2d({size =, scale_factor =}): nearest-neighbour upsampling.
-- @function nn.UpsamplingNearest2d
M.UpsamplingNearest2d = UpsamplingNearest2d
local UPSAMPLING_OPTS = {size = true, scale_factor = true}
function UpsamplingNearest2d:__init(size, scale_factor)
  if type(size) == 'table' and U.is_options(size) then
    U.check_options('UpsamplingNearest2d', size, UPSAMPLING_OPTS)
    size, scale_factor = size.size, size.scale_factor
  end
  Upsample.__init(self, {size = size, scale_factor = scale_factor, mode = 'nearest'})
end

local UpsamplingBilinear2d = Upsample:subclass('UpsamplingBilinear2d')
--- nn.UpsamplingBilinear2d({size =, scale_factor =}): bilinear upsampling with align_corners = true.
-- @function nn.UpsamplingBilinear2d
M.UpsamplingBilinear2d = UpsamplingBilinear2d
function UpsamplingBilinear2d:__init(size, scale_factor)
  if type(size) == 'table' and U.is_options(size) then
    U.check_options('UpsamplingBilinear2d', size, UPSAMPLING_OPTS)
    size, scale_factor = size.size, size.scale_factor
  end
  Upsample.__init(self, {size = size, scale_factor = scale_factor, mode = 'bilinear',
                         align_corners = true})
end

return M
