-- oneflow.nn.linear: Identity, Linear, Bilinear, Flatten, Unflatten.
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local init = require 'oneflow.nn.initialization'
local F = require 'oneflow.nn.functional'

local Module, Parameter = module.Module, module.Parameter
local parse, fail, shape_str, pyrepr = U.parse, U.fail, U.shape_str, U.pyrepr
local M = {}

--- An uninitialised parameter of the given sizes ({dtype =} optional).
local function empty_param(sizes, dtype)
  return Parameter(flow.empty(sizes, {dtype = dtype}))
end
M._empty_param = empty_param

------------------------------------------------------------------ Identity
--- nn.Identity(...): returns its input unchanged (arguments are ignored, as in PyTorch).
-- @function nn.Identity
local Identity = Module:subclass('Identity')
M.Identity = Identity
function Identity.forward(_, x) return x end
module.keeps_no_tensors(Identity)   -- nn.module's rule: its forward keeps none

------------------------------------------------------------------ Linear
local Linear = Module:subclass('Linear')
M.Linear = Linear

local linear_spec = {{'in_features', U.REQUIRED}, {'out_features', U.REQUIRED}, {'bias', true},
                     {'device', nil}, {'dtype', nil}}

--- A fully connected layer, `y = x W^T + b`: `nn.Linear(4, 8)`,
-- `nn.Linear(4, 8, {bias = false})`. Parameters `weight` [out, in] and
-- `bias` [out], initialised as PyTorch's.
-- @function nn.Linear
-- @tparam int in_features size of each input's last dim
-- @tparam int out_features size of each output's last dim
-- @tparam[opt=true] boolean bias whether to learn a bias
-- @tparam[opt] table opts the same by name, and `{dtype =, device =}`
-- @treturn Module
function Linear:__init(...)
  Module.__init(self)
  local a = parse('Linear', linear_spec, ...)
  self.in_features, self.out_features = a.in_features, a.out_features
  self.weight = empty_param({a.out_features, a.in_features}, a.dtype)
  if a.bias then self.bias = empty_param({a.out_features}, a.dtype)
  else self:register_parameter('bias', nil) end
  self:reset_parameters()
end

--- PyTorch's default: kaiming_uniform_(a = sqrt(5)) for the weight (bound
-- 1 / sqrt(fan_in)), uniform(-1 / sqrt(fan_in), 1 / sqrt(fan_in)) for the bias.
function Linear:reset_parameters()
  init.kaiming_uniform_(self.weight, {a = math.sqrt(5)})
  if self.bias ~= nil then
    local fan_in = self.in_features
    local bound = fan_in > 0 and 1 / math.sqrt(fan_in) or 0
    init.uniform_(self.bias, -bound, bound)
  end
end

function Linear:forward(x)
  if not require('oneflow._args').is_tensor(x) and not (type(x) == 'table' and rawget(x, '_local') ~= nil) then
    -- F.linear's error: 'linear: argument 1 (input) must be a tensor, got nil'
    return F.linear(x, self.weight, self.bias)
  end
  if x:dim() == 0 or x:size(-1) ~= self.in_features then
    fail(('Linear: expected input with last dim %d (in_features), got %s'):format(
      self.in_features, shape_str(x)))
  end
  return F.linear(x, self.weight, self.bias)
end

module.keeps_no_tensors(Linear)   -- nn.module's rule: its forward keeps none

function Linear:extra_repr()
  return ('in_features=%d, out_features=%d, bias=%s'):format(
    self.in_features, self.out_features, pyrepr(self.bias ~= nil))
end

--- nn.NonDynamicallyQuantizableLinear(in, out[, bias]): an nn.Linear that quantization leaves float
-- (PyTorch's class of MultiheadAttention's out_proj, whose weight the attention reads itself).
-- @function nn.NonDynamicallyQuantizableLinear
M.NonDynamicallyQuantizableLinear = Linear:subclass('NonDynamicallyQuantizableLinear')
module.keeps_no_tensors(M.NonDynamicallyQuantizableLinear)   -- Linear's forward: it keeps none

------------------------------------------------------------------ Bilinear
local Bilinear = Module:subclass('Bilinear')
M.Bilinear = Bilinear

local bilinear_spec = {{'in1_features', U.REQUIRED}, {'in2_features', U.REQUIRED},
                       {'out_features', U.REQUIRED}, {'bias', true}, {'device', nil}, {'dtype', nil}}

--- nn.Bilinear(in1, in2, out[, bias = true]): y = x1^T W x2 + b.
function Bilinear:__init(...)
  Module.__init(self)
  local a = parse('Bilinear', bilinear_spec, ...)
  self.in1_features, self.in2_features, self.out_features =
    a.in1_features, a.in2_features, a.out_features
  self.weight = empty_param({a.out_features, a.in1_features, a.in2_features}, a.dtype)
  if a.bias then self.bias = empty_param({a.out_features}, a.dtype)
  else self:register_parameter('bias', nil) end
  self:reset_parameters()
end

function Bilinear:reset_parameters()
  local bound = 1 / math.sqrt(self.in1_features)
  init.uniform_(self.weight, -bound, bound)
  if self.bias ~= nil then init.uniform_(self.bias, -bound, bound) end
end

function Bilinear:forward(x1, x2)
  if x1:size(-1) ~= self.in1_features or x2:size(-1) ~= self.in2_features then
    fail(('Bilinear: expected inputs with last dims %d and %d, got %s and %s'):format(
      self.in1_features, self.in2_features, shape_str(x1), shape_str(x2)))
  end
  return F.bilinear(x1, x2, self.weight, self.bias)
end

function Bilinear:extra_repr()
  return ('in1_features=%d, in2_features=%d, out_features=%d, bias=%s'):format(
    self.in1_features, self.in2_features, self.out_features, pyrepr(self.bias ~= nil))
end

------------------------------------------------------------------ Flatten / Unflatten
local Flatten = Module:subclass('Flatten')
M.Flatten = Flatten

--- nn.Flatten(start_dim = 2, end_dim = -1): 1-based, so the batch dim stays.
function Flatten:__init(...)
  Module.__init(self)
  local a = parse('Flatten', {{'start_dim', 2}, {'end_dim', -1}}, ...)
  self.start_dim, self.end_dim = a.start_dim, a.end_dim
end
function Flatten:forward(x) return x:flatten(self.start_dim, self.end_dim) end
module.keeps_no_tensors(Flatten)   -- nn.module's rule: its forward keeps none
function Flatten:extra_repr()
  return ('start_dim=%d, end_dim=%d'):format(self.start_dim, self.end_dim)
end

local Unflatten = Module:subclass('Unflatten')
M.Unflatten = Unflatten

--- nn.Unflatten(dim, sizes): dim (1-based) becomes sizes (one may be -1).
function Unflatten:__init(dim, sizes)
  Module.__init(self)
  if type(dim) ~= 'number' or type(sizes) ~= 'table' then
    fail('Unflatten: expected (dim, {sizes...}), got ' .. type(dim) .. ', ' .. type(sizes))
  end
  self.dim, self.unflattened_size = dim, sizes
end

function Unflatten:forward(x)
  local s = x:size():totable()
  local d = self.dim < 0 and #s + self.dim + 1 or self.dim
  local shape = {}
  for i = 1, d - 1 do shape[#shape + 1] = s[i] end
  for _, v in ipairs(self.unflattened_size) do shape[#shape + 1] = v end
  for i = d + 1, #s do shape[#shape + 1] = s[i] end
  return x:reshape(shape)
end
function Unflatten:extra_repr()
  return ('dim=%d, unflattened_size=%s'):format(self.dim, U.tuple_str(self.unflattened_size))
end

return M
