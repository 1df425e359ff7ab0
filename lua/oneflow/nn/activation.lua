-- oneflow.nn.activation: activation modules over nn.functional.
--   nn.ReLU(), nn.LeakyReLU(0.2), nn.GELU({approximate = 'tanh'}),
--   nn.Softmax(-1), nn.PReLU(16, 0.25)
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local F = require 'oneflow.nn.functional'

local Module, parse, pyrepr, fail, shape_str = module.Module, U.parse, U.pyrepr, U.fail, U.shape_str
local M = {}

-- A class whose constructor parses `spec` into fields and whose forward is
-- fn(self, x); repr lists the fields named in `shown`.
local function activation(name, spec, fn, shown)
  local cls = Module:subclass(name)
  function cls:__init(...)
    Module.__init(self)
    local a = parse(name, spec, ...)
    for _, s in ipairs(spec) do self[s[1]] = a[s[1]] end
  end
  cls.forward = fn
  module.keeps_no_tensors(cls)   -- nn.module's rule: its forward keeps none
  function cls:extra_repr()
    local parts = {}
    for _, k in ipairs(shown or {}) do parts[#parts + 1] = k .. '=' .. pyrepr(self[k]) end
    if self.inplace then parts[#parts + 1] = 'inplace=True' end
    return table.concat(parts, ', ')
  end
  M[name] = cls
  return cls
end

local inplace = {{'inplace', false}}
local none = {}

--- nn.ReLU({inplace = false}): max(0, x).
-- @function nn.ReLU
activation('ReLU', inplace, function(self, x) return F.relu(x, self.inplace) end)
--- nn.ReLU6({inplace = false}): min(max(0, x), 6).
-- @function nn.ReLU6
activation('ReLU6', inplace, function(self, x) return F.relu6(x, self.inplace) end)
--- nn.SiLU({inplace = false}): x * sigmoid(x).
-- @function nn.SiLU
activation('SiLU', inplace, function(self, x) return F.silu(x, self.inplace) end)
--- nn.Mish({inplace = false}): x * tanh(softplus(x)).
-- @function nn.Mish
activation('Mish', inplace, function(self, x) return F.mish(x, self.inplace) end)
--- nn.Hardswish({inplace = false}): x * relu6(x + 3) / 6.
-- @function nn.Hardswish
activation('Hardswish', inplace, function(self, x) return F.hardswish(x, self.inplace) end)
--- nn.Hardsigmoid({inplace = false}): relu6(x + 3) / 6.
-- @function nn.Hardsigmoid
activation('Hardsigmoid', inplace, function(self, x) return F.hardsigmoid(x, self.inplace) end)
--- nn.Sigmoid(): 1 / (1 + exp(-x)).
-- @function nn.Sigmoid
activation('Sigmoid', none, function(_, x) return x:sigmoid() end)
--- nn.Tanh(): the hyperbolic tangent.
-- @function nn.Tanh
activation('Tanh', none, function(_, x) return x:tanh() end)
--- nn.LogSigmoid(): log(sigmoid(x)), computed stably.
-- @function nn.LogSigmoid
activation('LogSigmoid', none, function(_, x) return F.logsigmoid(x) end)
--- nn.Softsign(): x / (1 + |x|).
-- @function nn.Softsign
activation('Softsign', none, function(_, x) return F.softsign(x) end)
--- nn.Tanhshrink(): x - tanh(x).
-- @function nn.Tanhshrink
activation('Tanhshrink', none, function(_, x) return F.tanhshrink(x) end)
--- nn.SELU({inplace = false}): scale * elu(x, alpha) with the self-normalising constants.
-- @function nn.SELU
activation('SELU', inplace, function(self, x) return F.selu(x, self.inplace) end)

--- nn.GELU({approximate = 'none'}): x * Phi(x); approximate = 'tanh' uses the tanh formula.
-- @function nn.GELU
activation('GELU', {{'approximate', 'none'}}, function(self, x)
  return F.gelu(x, {approximate = self.approximate})
end, {'approximate'})
--- nn.LeakyReLU(negative_slope = 0.01, {inplace = false}): x for x > 0, negative_slope * x otherwise.
-- @function nn.LeakyReLU
activation('LeakyReLU', {{'negative_slope', 0.01}, {'inplace', false}}, function(self, x)
  return F.leaky_relu(x, self.negative_slope, self.inplace)
end, {'negative_slope'})
--- nn.ELU({alpha = 1, inplace = false}): x for x > 0, alpha * (exp(x) - 1) otherwise.
-- @function nn.ELU
activation('ELU', {{'alpha', 1}, {'inplace', false}}, function(self, x)
  return F.elu(x, self.alpha, self.inplace)
end, {'alpha'})
--- nn.CELU({alpha = 1, inplace = false}): max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).
-- @function nn.CELU
activation('CELU', {{'alpha', 1}, {'inplace', false}}, function(self, x)
  return F.celu(x, self.alpha, self.inplace)
end, {'alpha'})
--- nn.Hardtanh(min_val = -1, max_val = 1, {inplace = false}): x clamped to [min_val, max_val].
-- @function nn.Hardtanh
activation('Hardtanh', {{'min_val', -1}, {'max_val', 1}, {'inplace', false}}, function(self, x)
  return F.hardtanh(x, self.min_val, self.max_val, self.inplace)
end, {'min_val', 'max_val'})
--- nn.Softplus({beta = 1, threshold = 20}): log(1 + exp(beta * x)) / beta, linear above threshold.
-- @function nn.Softplus
activation('Softplus', {{'beta', 1}, {'threshold', 20}}, function(self, x)
  return F.softplus(x, self.beta, self.threshold)
end, {'beta', 'threshold'})
--- nn.Hardshrink(lambd = 0.5): x where |x| > lambd, else 0.
-- @function nn.Hardshrink
activation('Hardshrink', {{'lambd', 0.5}}, function(self, x) return F.hardshrink(x, self.lambd) end,
           {'lambd'})
--- nn.Softshrink(lambd = 0.5): x - lambd above lambd, x + lambd below -lambd, else 0.
-- @function nn.Softshrink
activation('Softshrink', {{'lambd', 0.5}}, function(self, x) return F.softshrink(x, self.lambd) end,
           {'lambd'})
--- nn.Threshold(threshold, value, {inplace = false}): x where x > threshold, else value.
-- @function nn.Threshold
activation('Threshold', {{'threshold', U.REQUIRED}, {'value', U.REQUIRED}, {'inplace', false}},
           function(self, x) return F.threshold(x, self.threshold, self.value) end,
           {'threshold', 'value'})
--- nn.GLU(dim = -1): a * sigmoid(b), a and b the halves of the input along dim.
-- @function nn.GLU
activation('GLU', {{'dim', -1}}, function(self, x) return F.glu(x, self.dim) end, {'dim'})

-- Softmax(dim): without a dim, PyTorch's legacy choice (dim 1 for 0-, 1- and
-- 3-d inputs, else dim 2).
local function softmax_dim(self, x)
  if self.dim ~= nil then return self.dim end
  local nd = x:dim()
  return (nd == 0 or nd == 1 or nd == 3) and 1 or 2
end
--- nn.Softmax(dim): exp(x) / sum(exp(x)) along dim (1-based).
-- @function nn.Softmax
activation('Softmax', {{'dim', nil}}, function(self, x) return F.softmax(x, softmax_dim(self, x)) end,
           {'dim'})
--- nn.LogSoftmax(dim): log(softmax(x)) along dim (1-based).
-- @function nn.LogSoftmax
activation('LogSoftmax', {{'dim', nil}}, function(self, x)
  return F.log_softmax(x, softmax_dim(self, x))
end, {'dim'})
--- nn.Softmin(dim): softmax(-x) along dim (1-based).
-- @function nn.Softmin
activation('Softmin', {{'dim', nil}}, function(self, x) return F.softmin(x, softmax_dim(self, x)) end,
           {'dim'})

------------------------------------------------------------------ PReLU
local PReLU = Module:subclass('PReLU')
M.PReLU = PReLU

--- nn.PReLU(num_parameters = 1, init = 0.25): a learnable negative slope
-- per channel (dim 2) or shared.
function PReLU:__init(...)
  Module.__init(self)
  local a = parse('PReLU', {{'num_parameters', 1}, {'init', 0.25}, {'device', nil}, {'dtype', nil}}, ...)
  self.num_parameters, self.init = a.num_parameters, a.init
  self.weight = module.Parameter(flow.full({a.num_parameters}, a.init, {dtype = a.dtype}))
end
function PReLU:reset_parameters()
  flow.no_grad(function() self.weight:fill_(self.init) end)
end
function PReLU:forward(x) return F.prelu(x, self.weight) end
function PReLU:extra_repr() return 'num_parameters=' .. self.num_parameters end

------------------------------------------------------------------ Softmax2d
--- nn.Softmax2d(): softmax over the channels of (N, C, H, W) or (C, H, W).
-- @function nn.Softmax2d
local Softmax2d = Module:subclass('Softmax2d')
M.Softmax2d = Softmax2d

--- nn.Softmax2d(): softmax over the channels of [N, C, H, W] or [C, H, W].
function Softmax2d.forward(_, x)
  if x:dim() ~= 3 and x:dim() ~= 4 then
    fail(('Softmax2d: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got %s'):format(shape_str(x)))
  end
  return F.softmax(x, -3)
end


return M
