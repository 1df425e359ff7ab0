-- oneflow.nn.padding: ZeroPad, ConstantPad, ReflectionPad, ReplicationPad
-- and CircularPad (1d-3d) over F.pad. padding is a number (every side) or
-- {left, right[, top, bottom[, front, back]]} as in PyTorch.
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local F = require 'oneflow.nn.functional'

local Module, fail = module.Module, U.fail
local M = {}

local function pad_class(name, nsp, mode, has_value)
  local cls = Module:subclass(name)
  function cls:__init(padding, value)
    Module.__init(self)
    if type(padding) == 'number' then
      local p = {}
      for i = 1, 2 * nsp do p[i] = padding end
      padding = p
    end
    if type(padding) ~= 'table' or #padding ~= 2 * nsp then
      fail(('%s: padding must be a number or a list of %d numbers'):format(name, 2 * nsp))
    end
    self.padding, self.value = padding, has_value and (value or 0) or nil
  end
  function cls:forward(x)
    if mode == 'constant' then return F.pad(x, self.padding, {mode = 'constant', value = self.value}) end
    return F.pad(x, self.padding, {mode = mode})
  end
  function cls:extra_repr()
    local s = U.tuple_str(self.padding)
    if has_value and name:find('^Constant') then s = s .. ', value=' .. tostring(self.value) end
    return s
  end
  M[name] = cls
end

for nsp = 1, 3 do
  pad_class('ZeroPad' .. nsp .. 'd', nsp, 'constant', true)
  pad_class('ConstantPad' .. nsp .. 'd', nsp, 'constant', true)
  pad_class('ReflectionPad' .. nsp .. 'd', nsp, 'reflect', false)
  pad_class('ReplicationPad' .. nsp .. 'd', nsp, 'replicate', false)
  pad_class('CircularPad' .. nsp .. 'd', nsp, 'circular', false)
end


-- Doc comments of the functions made in loops above (help() and LDoc read them).

--- nn.CircularPad1d(padding): pads the last dim by wrapping around.
-- @function nn.CircularPad1d

--- nn.CircularPad2d(padding): pads the last 2 dims by wrapping around.
-- @function nn.CircularPad2d

--- nn.CircularPad3d(padding): pads the last 3 dims by wrapping around.
-- @function nn.CircularPad3d

--- nn.ConstantPad1d(padding, value): pads the last dim with a constant.
-- @function nn.ConstantPad1d

--- nn.ConstantPad2d(padding, value): pads the last 2 dims with a constant.
-- @function nn.ConstantPad2d

--- nn.ConstantPad3d(padding, value): pads the last 3 dims with a constant.
-- @function nn.ConstantPad3d

--- nn.ReflectionPad1d(padding): pads the last dim by reflecting at the border.
-- @function nn.ReflectionPad1d

--- nn.ReflectionPad2d(padding): pads the last 2 dims by reflecting at the border.
-- @function nn.ReflectionPad2d

--- nn.ReflectionPad3d(padding): pads the last 3 dims by reflecting at the border.
-- @function nn.ReflectionPad3d

--- nn.ReplicationPad1d(padding): pads the last dim by repeating the border value.
-- @function nn.ReplicationPad1d

--- nn.ReplicationPad2d(padding): pads the last 2 dims by repeating the border value.
-- @function nn.ReplicationPad2d

--- nn.ReplicationPad3d(padding): pads the last 3 dims by repeating the border value.
-- @function nn.ReplicationPad3d

--- nn.ZeroPad1d(padding): pads the last dim with zeros.
-- @function nn.ZeroPad1d

--- nn.ZeroPad2d(padding): pads the last 2 dims with zeros.
-- @function nn.ZeroPad2d

--- nn.ZeroPad3d(padding): pads the last 3 dims with zeros.
-- @function nn.ZeroPad3d

return M
