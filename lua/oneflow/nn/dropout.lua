-- oneflow.nn.dropout: Dropout, Dropout1d/2d/3d, AlphaDropout. Active in
-- training mode, the identity after m:eval().
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local F = require 'oneflow.nn.functional'

local Module, parse, fail = module.Module, U.parse, U.fail
local M = {}

--- Zeroes each element with probability p while training (scaling the rest
-- by 1 / (1 - p)); the identity in eval mode: `nn.Dropout(0.1)`.
-- nn.Dropout1d/2d/3d (whole channels) and nn.AlphaDropout take the same arguments.
-- @function nn.Dropout
-- @tparam[opt=0.5] number p
-- @tparam[opt=false] boolean inplace
-- @treturn Module

local function dropout_class(name, fn)
  local cls = Module:subclass(name)
  --- nn.Dropout(p = 0.5[, inplace = false])
  function cls:__init(...)
    Module.__init(self)
    local a = parse(name, {{'p', 0.5}, {'inplace', false}}, ...)
    if type(a.p) ~= 'number' or a.p < 0 or a.p > 1 then
      fail(('%s: dropout probability has to be between 0 and 1, but got %s'):format(name, tostring(a.p)))
    end
    self.p, self.inplace = a.p, a.inplace
  end
  function cls:forward(x) return fn(x, self.p, self.training, self.inplace) end
  module.keeps_no_tensors(cls)   -- nn.module's rule: its forward keeps none
  function cls:extra_repr() return ('p=%s, inplace=%s'):format(self.p, U.pyrepr(self.inplace)) end
  M[name] = cls
end

dropout_class('Dropout', F.dropout)
dropout_class('Dropout1d', F.dropout1d)
dropout_class('Dropout2d', F.dropout2d)
dropout_class('Dropout3d', F.dropout3d)
dropout_class('AlphaDropout', F.alpha_dropout)

return M
