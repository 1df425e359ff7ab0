-- oneflow.nn.fold: Unfold and Fold (im2col / col2im) over F.unfold / F.fold.
--   local cols = nn.Unfold({3, 3}, {padding = 1})(x)   -- [N, C*9, H*W]
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local F = require 'oneflow.nn.functional'

local Module, parse, pyrepr = module.Module, U.parse, U.pyrepr
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

return M
