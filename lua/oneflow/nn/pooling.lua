-- oneflow.nn.pooling: MaxPool/AvgPool 1d-3d and the adaptive pools over
-- the kernel-backed functions of nn.functional.
--   nn.MaxPool2d(2)   nn.AvgPool2d(3, {stride = 2, padding = 1})   nn.AdaptiveAvgPool2d({1, 1})
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local F = require 'oneflow.nn.functional'

local Module, parse, pyrepr = module.Module, U.parse, U.pyrepr
local M = {}

-- A class whose fields come from `spec` and whose repr lists `shown`.
local function pool_class(name, spec, shown, forward)
  local cls = Module:subclass(name)
  function cls:__init(...)
    Module.__init(self)
    local a = parse(name, spec, ...)
    for _, s in ipairs(spec) do self[s[1]] = a[s[1]] end
    if self.stride == nil and self.kernel_size ~= nil then self.stride = self.kernel_size end
  end
  cls.forward = forward
  module.keeps_no_tensors(cls)   -- nn.module's rule: its forward keeps none
  function cls:extra_repr()
    local parts = {}
    for _, k in ipairs(shown) do parts[#parts + 1] = k .. '=' .. pyrepr(self[k]) end
    return table.concat(parts, ', ')
  end
  M[name] = cls
end

local max_spec = {{'kernel_size', U.REQUIRED}, {'stride', nil}, {'padding', 0}, {'dilation', 1},
                  {'return_indices', false}, {'ceil_mode', false}}
local avg_spec = {{'kernel_size', U.REQUIRED}, {'stride', nil}, {'padding', 0},
                  {'ceil_mode', false}, {'count_include_pad', true}, {'divisor_override', nil}}

--- Max pooling over [N, C, H, W] (or [C, H, W]): `nn.MaxPool2d(2)`,
-- `nn.MaxPool2d(3, {stride = 2, padding = 1})`. nn.MaxPool1d/3d likewise;
-- nn.AvgPool1d/2d/3d take kernel_size, stride, padding, ceil_mode,
-- count_include_pad, divisor_override; nn.AdaptiveAvgPool/AdaptiveMaxPool
-- take output_size.
-- @function nn.MaxPool2d
-- @tparam int|table kernel_size
-- @tparam[opt] int|table stride defaults to kernel_size
-- @tparam[opt=0] int|table padding
-- @tparam[opt] table opts the same by name, and `{dilation = 1, return_indices = false, ceil_mode = false}`
-- @treturn Module

for nsp = 1, 3 do
  local max_fn, avg_fn = 'max_pool' .. nsp .. 'd', 'avg_pool' .. nsp .. 'd'
  pool_class('MaxPool' .. nsp .. 'd', max_spec,
    {'kernel_size', 'stride', 'padding', 'dilation', 'ceil_mode'}, function(self, x)
      return F[max_fn](x, self.kernel_size, {stride = self.stride, padding = self.padding,
        dilation = self.dilation, ceil_mode = self.ceil_mode, return_indices = self.return_indices})
    end)
  pool_class('AvgPool' .. nsp .. 'd', avg_spec, {'kernel_size', 'stride', 'padding'}, function(self, x)
    return F[avg_fn](x, self.kernel_size, {stride = self.stride, padding = self.padding,
      ceil_mode = self.ceil_mode, count_include_pad = self.count_include_pad,
      divisor_override = self.divisor_override})
  end)
  local aavg, amax = 'adaptive_avg_pool' .. nsp .. 'd', 'adaptive_max_pool' .. nsp .. 'd'
  pool_class('AdaptiveAvgPool' .. nsp .. 'd', {{'output_size', U.REQUIRED}}, {'output_size'},
    function(self, x) return F[aavg](x, self.output_size) end)
  pool_class('AdaptiveMaxPool' .. nsp .. 'd', {{'output_size', U.REQUIRED}, {'return_indices', false}},
    {'output_size'}, function(self, x)
      return F[amax](x, self.output_size, {return_indices = self.return_indices})
    end)
end


-- Doc comments of the functions made in loops above (help() and LDoc read them).

--- nn.AdaptiveAvgPool1d(output_size): average pooling to a fixed output length.
-- @function nn.AdaptiveAvgPool1d

--- nn.AdaptiveAvgPool2d(output_size): average pooling to a fixed output size (H, W).
-- @function nn.AdaptiveAvgPool2d

--- nn.AdaptiveAvgPool3d(output_size): average pooling to a fixed output size (D, H, W).
-- @function nn.AdaptiveAvgPool3d

--- nn.AdaptiveMaxPool1d(output_size, {return_indices = false}): max pooling to a fixed output length.
-- @function nn.AdaptiveMaxPool1d

--- nn.AdaptiveMaxPool2d(output_size, {return_indices = false}): max pooling to a fixed output size (H, W).
-- @function nn.AdaptiveMaxPool2d

--- nn.AdaptiveMaxPool3d(output_size, {return_indices = false}): max pooling to a fixed output size (D, H, W).
-- @function nn.AdaptiveMaxPool3d

--- nn.AvgPool1d(kernel_size, {stride =, padding = 0, ceil_mode = false, count_include_pad = true}): 1-d average
-- pooling.
-- @function nn.AvgPool1d

--- nn.AvgPool2d(kernel_size, {stride =, padding = 0, ceil_mode = false, count_include_pad = true,
-- divisor_override =}): 2-d average pooling.
-- @function nn.AvgPool2d

--- nn.AvgPool3d(kernel_size, {stride =, padding = 0, ceil_mode = false, count_include_pad = true}): 3-d average
-- pooling.
-- @function nn.AvgPool3d

--- nn.MaxPool1d(kernel_size, {stride =, padding = 0, dilation = 1, return_indices = false, ceil_mode = false}):
-- 1-d max pooling.
-- @function nn.MaxPool1d

--- nn.MaxPool3d(kernel_size, {stride =, padding = 0, dilation = 1, return_indices = false, ceil_mode = false}):
-- 3-d max pooling.
-- @function nn.MaxPool3d

return M
