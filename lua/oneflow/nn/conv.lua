-- oneflow.nn.conv: Conv1d/2d/3d and ConvTranspose1d/2d/3d over the
-- kernel-backed F.conv*d / F.conv_transpose*d, with PyTorch's parameter
-- names (weight [out, in / groups, *k], bias [out]) and default init.
--   nn.Conv2d(1, 32, 3, 1, 1)   nn.Conv2d(4, 6, 3, {stride = 2, padding = 'same', groups = 2})
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local init = require 'oneflow.nn.initialization'
local F = require 'oneflow.nn.functional'

local Module, Parameter = module.Module, module.Parameter
local parse, fail, shape_str, ntuple, tuple_str = U.parse, U.fail, U.shape_str, U.ntuple, U.tuple_str
local M = {}

local function all_equal(t, v)
  for _, x in ipairs(t) do if x ~= v then return false end end
  return true
end

local padding_modes = {zeros = true, reflect = true, replicate = true, circular = true}

-- fields shared by Conv and ConvTranspose
local function setup(self, name, a, nsp, transposed)
  if a.in_channels % a.groups ~= 0 then fail(name .. ': in_channels must be divisible by groups') end
  if a.out_channels % a.groups ~= 0 then fail(name .. ': out_channels must be divisible by groups') end
  if not padding_modes[a.padding_mode] then
    fail(("%s: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got '%s'")
         :format(name, tostring(a.padding_mode)))
  end
  self.in_channels, self.out_channels, self.groups = a.in_channels, a.out_channels, a.groups
  self.kernel_size = ntuple(a.kernel_size, nsp, name, 'kernel_size')
  self.stride = ntuple(a.stride, nsp, name, 'stride')
  self.dilation = ntuple(a.dilation, nsp, name, 'dilation')
  if type(a.padding) == 'string' then
    if a.padding ~= 'same' and a.padding ~= 'valid' then
      fail(("%s: padding must be a number, a list, 'same' or 'valid', got '%s'"):format(name, a.padding))
    end
    if a.padding == 'same' and not all_equal(self.stride, 1) then
      fail(name .. ": padding='same' is not supported for strided convolutions")
    end
    self.padding = a.padding
  else
    self.padding = ntuple(a.padding, nsp, name, 'padding')
  end
  self.padding_mode, self.transposed, self.nsp = a.padding_mode, transposed, nsp
  local shape = transposed and {a.in_channels, a.out_channels / a.groups}
                           or {a.out_channels, a.in_channels / a.groups}
  for _, k in ipairs(self.kernel_size) do shape[#shape + 1] = k end
  self.weight = Parameter(flow.empty(shape, {dtype = a.dtype}))
  if a.bias then self.bias = Parameter(flow.empty({a.out_channels}, {dtype = a.dtype}))
  else self:register_parameter('bias', nil) end
  self:reset_parameters()
end

-- PyTorch's default: kaiming_uniform_(a = sqrt(5)), bias U(-1/sqrt(fan_in), 1/sqrt(fan_in))
local function reset(self)
  init.kaiming_uniform_(self.weight, {a = math.sqrt(5)})
  if self.bias ~= nil then
    local fan_in = init._calculate_fan_in_and_fan_out(self.weight)
    local bound = fan_in > 0 and 1 / math.sqrt(fan_in) or 0
    init.uniform_(self.bias, -bound, bound)
  end
end

local function conv_repr(self)
  local s = ('%d, %d, kernel_size=%s, stride=%s'):format(self.in_channels, self.out_channels,
    tuple_str(self.kernel_size), tuple_str(self.stride))
  if type(self.padding) == 'string' then s = s .. ", padding='" .. self.padding .. "'"
  elseif not all_equal(self.padding, 0) then s = s .. ', padding=' .. tuple_str(self.padding) end
  if not all_equal(self.dilation, 1) then s = s .. ', dilation=' .. tuple_str(self.dilation) end
  if self.output_padding and not all_equal(self.output_padding, 0) then
    s = s .. ', output_padding=' .. tuple_str(self.output_padding)
  end
  if self.groups ~= 1 then s = s .. ', groups=' .. self.groups end
  if self.bias == nil then s = s .. ', bias=False' end
  if self.padding_mode ~= 'zeros' then s = s .. ", padding_mode='" .. self.padding_mode .. "'" end
  return s
end

-- input [N, C, *spatial] or unbatched [C, *spatial]; returns batched x and
-- whether a batch dim was added
local function check_input(self, x)
  require('oneflow._args').arg(self.__name, 1, 'input', x, 'tensor|global')
  local nd, nsp = x:dim(), self.nsp
  if nd ~= nsp + 2 and nd ~= nsp + 1 then
    fail(('%s: expected %dD (unbatched) or %dD (batched) input, got input %s'):format(
      self.__name, nsp + 1, nsp + 2, shape_str(x)))
  end
  local c = x:size(nd - nsp)
  if c ~= self.in_channels then
    fail(('%s: expected %d input channels, got input %s'):format(self.__name, self.in_channels,
      shape_str(x)))
  end
  if nd == nsp + 1 then return x:unsqueeze(1), true end
  return x, false
end

------------------------------------------------------------------ Conv
--- A 2-D convolution over [N, C, H, W] (or [C, H, W]) inputs:
-- `nn.Conv2d(1, 32, 3, 1, 1)`, `nn.Conv2d(4, 6, 3, {stride = 2, padding = 'same', groups = 2})`.
-- nn.Conv1d and nn.Conv3d take the same arguments.
-- @function nn.Conv2d
-- @tparam int in_channels
-- @tparam int out_channels
-- @tparam int|table kernel_size a number or a pair
-- @tparam[opt=1] int|table stride
-- @tparam[opt=0] int|table|string padding numbers, `'same'` or `'valid'`
-- @tparam[opt=1] int|table dilation
-- @tparam[opt=1] int groups
-- @tparam[opt=true] boolean bias
-- @tparam[opt] table opts any of the above by name, and `{padding_mode = 'zeros', dtype =, device =}`
-- @treturn Module

local conv_spec = {{'in_channels', U.REQUIRED}, {'out_channels', U.REQUIRED},
                   {'kernel_size', U.REQUIRED}, {'stride', 1}, {'padding', 0}, {'dilation', 1},
                   {'groups', 1}, {'bias', true}, {'padding_mode', 'zeros'}, {'device', nil},
                   {'dtype', nil}}

-- padding of F.pad for a non-zeros padding_mode: last dim first, both sides
local function pad_list(self)
  local p, r = self.padding, {}
  if p == 'same' or p == 'valid' then
    fail(self.__name .. ": padding_mode other than 'zeros' needs numeric padding")
  end
  for i = #p, 1, -1 do r[#r + 1] = p[i]; r[#r + 1] = p[i] end
  return r
end

local function make_conv(nsp)
  local name = 'Conv' .. nsp .. 'd'
  local cls = Module:subclass(name)
  local fn = 'conv' .. nsp .. 'd'
  function cls:__init(...) Module.__init(self); setup(self, name, parse(name, conv_spec, ...), nsp, false) end
  cls.reset_parameters = reset
  cls.extra_repr = conv_repr
  function cls:forward(x)
    local xb, unbatched = check_input(self, x)
    local y
    if self.padding_mode ~= 'zeros' then
      xb = F.pad(xb, pad_list(self), {mode = self.padding_mode})
      y = F[fn](xb, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
    else
      y = F[fn](xb, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
    end
    if unbatched then y = y:squeeze(1) end
    return y
  end
  module.keeps_no_tensors(cls)   -- nn.module's rule: its forward keeps none
  M[name] = cls
end

------------------------------------------------------------------ ConvTranspose
local convt_spec = {{'in_channels', U.REQUIRED}, {'out_channels', U.REQUIRED},
                    {'kernel_size', U.REQUIRED}, {'stride', 1}, {'padding', 0},
                    {'output_padding', 0}, {'groups', 1}, {'bias', true}, {'dilation', 1},
                    {'padding_mode', 'zeros'}, {'device', nil}, {'dtype', nil}}

-- output_padding that makes the output spatial size equal output_size
local function output_padding_for(self, x, output_size)
  if output_size == nil then return self.output_padding end
  local nsp, nd = self.nsp, x:dim()
  local want = {}
  for i = 1, nsp do want[i] = output_size[#output_size - nsp + i] end
  local res = {}
  for i = 1, nsp do
    local base = (x:size(nd - nsp + i) - 1) * self.stride[i] - 2 * self.padding[i]
                 + self.dilation[i] * (self.kernel_size[i] - 1) + 1
    local op = want[i] - base
    if op < 0 or op >= math.max(self.stride[i], self.dilation[i]) then
      fail(('%s: requested an output size of %s, but valid sizes for dim %d are %d..%d'):format(
        self.__name, tuple_str(output_size), i, base, base + math.max(self.stride[i], self.dilation[i]) - 1))
    end
    res[i] = op
  end
  return res
end

local function make_conv_transpose(nsp)
  local name = 'ConvTranspose' .. nsp .. 'd'
  local cls = Module:subclass(name)
  local fn = 'conv_transpose' .. nsp .. 'd'
  function cls:__init(...)
    Module.__init(self)
    local a = parse(name, convt_spec, ...)
    if a.padding_mode ~= 'zeros' then fail(name .. ": only 'zeros' padding_mode is supported") end
    if type(a.padding) == 'string' then fail(name .. ': padding must be a number or a list') end
    self.output_padding = ntuple(a.output_padding, nsp, name, 'output_padding')
    setup(self, name, a, nsp, true)
  end
  cls.reset_parameters = reset
  cls.extra_repr = conv_repr
  --- forward(x[, output_size]): output_size picks the output_padding.
  function cls:forward(x, output_size)
    local xb, unbatched = check_input(self, x)
    local opad = output_padding_for(self, xb, output_size)
    local y = F[fn](xb, self.weight, self.bias, self.stride, self.padding, opad, self.groups,
                    self.dilation)
    if unbatched then y = y:squeeze(1) end
    return y
  end
  module.keeps_no_tensors(cls)   -- nn.module's rule: its forward keeps none
  M[name] = cls
end

for nsp = 1, 3 do
  make_conv(nsp)
  make_conv_transpose(nsp)
end


-- Doc comments of the functions made in loops above (help() and LDoc read them).

--- nn.Conv1d(in_channels, out_channels, kernel_size, {stride = 1, padding = 0, dilation = 1, groups = 1, bias =
-- true, padding_mode = 'zeros'}): 1-d convolution over (N, C, L).
-- @function nn.Conv1d

--- nn.Conv3d(in_channels, out_channels, kernel_size, {stride = 1, padding = 0, dilation = 1, groups = 1, bias =
-- true}): 3-d convolution over (N, C, D, H, W).
-- @function nn.Conv3d

--- nn.ConvTranspose1d(in_channels, out_channels, kernel_size, {stride = 1, padding = 0, output_padding = 0,
-- groups = 1, bias = true, dilation = 1}): 1-d transposed convolution.
-- @function nn.ConvTranspose1d

--- nn.ConvTranspose2d(in_channels, out_channels, kernel_size, {stride = 1, padding = 0, output_padding = 0,
-- groups = 1, bias = true, dilation = 1}): 2-d transposed convolution.
-- @function nn.ConvTranspose2d

--- nn.ConvTranspose3d(in_channels, out_channels, kernel_size, {stride = 1, padding = 0, output_padding = 0,
-- groups = 1, bias = true, dilation = 1}): 3-d transposed convolution.
-- @function nn.ConvTranspose3d

return M
