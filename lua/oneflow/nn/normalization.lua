-- oneflow.nn.normalization: BatchNorm1d/2d/3d, InstanceNorm1d/2d/3d,
-- LayerNorm and GroupNorm over the kernel-backed functions.
-- BatchNorm keeps PyTorch's buffers: running_mean, running_var and
-- num_batches_tracked (int64); momentum = false is the cumulative average
-- (PyTorch's momentum=None).
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local F = require 'oneflow.nn.functional'

local Module, Parameter = module.Module, module.Parameter
local parse, fail, shape_str, pyrepr = U.parse, U.fail, U.shape_str, U.pyrepr
local M = {}

------------------------------------------------------------------ batch / instance norm
--- Batch normalization over the channel dim (dim 2) of [N, C, H, W] inputs,
-- with running statistics for evaluation: `nn.BatchNorm2d(64)`. nn.BatchNorm1d
-- ([N, C] or [N, C, L]), nn.BatchNorm3d and nn.InstanceNorm1d/2d/3d take the
-- same arguments (instance norm: affine and track_running_stats default false).
-- @function nn.BatchNorm2d
-- @tparam int num_features C
-- @tparam[opt=1e-5] number eps
-- @tparam[opt=0.1] number|boolean momentum false for a cumulative average (PyTorch's None)
-- @tparam[opt=true] boolean affine learn weight and bias
-- @tparam[opt=true] boolean track_running_stats
-- @tparam[opt] table opts any of the above by name, and `{dtype =, device =}`
-- @treturn Module

local norm_spec = {{'num_features', U.REQUIRED}, {'eps', 1e-5}, {'momentum', 0.1}, {'affine', true},
                   {'track_running_stats', true}, {'device', nil}, {'dtype', nil}}

local function setup_norm(self, a)
  self.num_features, self.eps, self.affine = a.num_features, a.eps, a.affine
  self.momentum = a.momentum or nil   -- false (None) -> cumulative moving average
  self.track_running_stats = a.track_running_stats
  local n, o = a.num_features, {dtype = a.dtype}
  if a.affine then
    self.weight = Parameter(flow.ones({n}, o))
    self.bias = Parameter(flow.zeros({n}, o))
  else
    self:register_parameter('weight', nil)
    self:register_parameter('bias', nil)
  end
  if a.track_running_stats then
    self:register_buffer('running_mean', flow.zeros({n}, o))
    self:register_buffer('running_var', flow.ones({n}, o))
    self:register_buffer('num_batches_tracked', flow.tensor(0, {dtype = flow.int64}))
  else
    self:register_buffer('running_mean', nil)
    self:register_buffer('running_var', nil)
    self:register_buffer('num_batches_tracked', nil)
  end
end

local function reset_running_stats(self)
  if not self.track_running_stats then return end
  flow.no_grad(function()
    self.running_mean:zero_()
    self.running_var:fill_(1)
    self.num_batches_tracked:zero_()
  end)
end

local function reset_norm(self)
  reset_running_stats(self)
  if self.affine then
    flow.no_grad(function() self.weight:fill_(1); self.bias:zero_() end)
  end
end

local function norm_repr(self)
  return ('%d, eps=%s, momentum=%s, affine=%s, track_running_stats=%s'):format(
    self.num_features, tostring(self.eps), pyrepr(self.momentum), pyrepr(self.affine),
    pyrepr(self.track_running_stats))
end

local function check_dims(self, x, dims)
  local nd = x:dim()
  for _, d in ipairs(dims) do
    if nd == d then
      if x:size(2) ~= self.num_features then
        fail(('%s: expected %d channels (dim 2), got input %s'):format(
          self.__name, self.num_features, shape_str(x)))
      end
      return
    end
  end
  fail(('%s: expected %s input, got input %s'):format(
    self.__name, table.concat(dims, 'D or ') .. 'D', shape_str(x)))
end

-- the momentum passed to F.batch_norm, after counting the batch
local function batch_momentum(self)
  if not (self.training and self.track_running_stats) then return self.momentum or 0 end
  -- a global counter (module:to_global) is broadcast: each rank counts its copy
  local count = self.num_batches_tracked
  if not flow.is_tensor(count) then count = count:to_local() end
  flow.no_grad(function() count:add_(1) end)
  if self.momentum == nil then return 1 / count:item() end
  return self.momentum
end

local function make_batch_norm(name, dims)
  local cls = Module:subclass(name)
  function cls:__init(...) Module.__init(self); setup_norm(self, parse(name, norm_spec, ...)) end
  cls.reset_running_stats, cls.reset_parameters, cls.extra_repr = reset_running_stats, reset_norm, norm_repr
  function cls:forward(x)
    check_dims(self, x, dims)
    local momentum = batch_momentum(self)
    local use_batch = self.training or self.running_mean == nil
    local track = not self.training or self.track_running_stats
    return F.batch_norm(x, track and self.running_mean or nil, track and self.running_var or nil,
      {weight = self.weight, bias = self.bias, training = use_batch, momentum = momentum, eps = self.eps})
  end
  module.keeps_no_tensors(cls)   -- nn.module's rule: its forward keeps none
  M[name] = cls
end
--- nn.BatchNorm1d(num_features, {eps = 1e-5, momentum = 0.1, affine = true, track_running_stats = true}): batch
-- norm over (N, C) or (N, C, L).
-- @function nn.BatchNorm1d
make_batch_norm('BatchNorm1d', {2, 3})
make_batch_norm('BatchNorm2d', {4})
------------------------------------------------------------------ eval batch norm after a convolution
-- In eval mode with no gradient to record, BatchNorm2d after a convolution
-- whose fresh output only the caller holds (nn.Sequential's next element,
-- flowvision's blocks) is written into that output in one pass
-- (of_batch_norm_eval: batch_norm's own eval arithmetic, so the same bits),
-- with a ReLU6 after it folded in as its clamp, instead of a new tensor:
-- eager mode frees tensors only when Lua's collector runs, so every new
-- result is memory that stays taken, faulted in or evicted from the caches
-- until then (MobileNetV2 at batch 8: a forward 46.6-58.3 -> 33.1-36.1 ms).
-- Not when a module has hooks or an own forward, under graph tracing, for
-- other dtypes or devices, or when the result would need a gradient.
local core = require 'oneflow._C'
local C = core.C
local BatchNorm2d = M.BatchNorm2d
local conv2d_class, relu6_class

local function plain(m, cls)
  return getmetatable(m) == cls and m.forward == cls.forward and rawget(m, '_forward_hooks') == nil
         and rawget(m, '_forward_pre_hooks') == nil
end

--- Applies bn to y, the fresh output of conv that only the caller holds, in
-- place where the rules above allow, and act too when it is a plain
-- nn.ReLU6; returns how many of the two modules it applied (0: none).
function M.conv_bn_into(conv, bn, y, act)
  conv2d_class = conv2d_class or flow.nn.Conv2d
  relu6_class = relu6_class or flow.nn.ReLU6
  if not plain(bn, BatchNorm2d) or bn.training or not bn.running_mean or not bn.running_var
     or not plain(conv, conv2d_class) or C.of_tracing() ~= 0 or not flow.is_tensor(y)
     or C.of_tensor_ndim(y.p) ~= 4 or C.of_tensor_dtype(y.p) ~= C.OF_FLOAT32
     or C.of_tensor_device(y.p) ~= 0 then
    return 0
  end
  local w, b = bn.weight, bn.bias
  if flow.is_grad_enabled() and (y.requires_grad or (w and w.requires_grad) or (b and b.requires_grad)) then
    return 0
  end
  if y:size(2) ~= bn.num_features then return 0 end   -- the module's own error then
  local six = act ~= nil and plain(act, relu6_class) and 1 or 0
  -- nothing here needs a gradient (checked above): nothing is recorded
  if C.of_batch_norm_eval(y.p, bn.running_mean.p, bn.running_var.p, w and w.p, b and b.p, bn.eps,
                          0, 6, six, six, y.p, core.out1) ~= 0 then
    core.raise(2)
  end
  C.of_tensor_release(core.out1[0])
  return six + 1
end

--- nn.BatchNorm3d(num_features, {eps = 1e-5, momentum = 0.1, affine = true, track_running_stats = true}): batch
-- norm over (N, C, D, H, W).
-- @function nn.BatchNorm3d
make_batch_norm('BatchNorm3d', {5})

local inst_spec = {{'num_features', U.REQUIRED}, {'eps', 1e-5}, {'momentum', 0.1}, {'affine', false},
                   {'track_running_stats', false}, {'device', nil}, {'dtype', nil}}

local function make_instance_norm(name, nsp)
  local cls = Module:subclass(name)
  function cls:__init(...) Module.__init(self); setup_norm(self, parse(name, inst_spec, ...)) end
  cls.reset_running_stats, cls.reset_parameters, cls.extra_repr = reset_running_stats, reset_norm, norm_repr
  function cls:forward(x)
    local nd = x:dim()
    if nd ~= nsp + 1 and nd ~= nsp + 2 then
      fail(('%s: expected %dD (unbatched) or %dD (batched) input, got input %s'):format(
        name, nsp + 1, nsp + 2, shape_str(x)))
    end
    local unbatched = nd == nsp + 1
    if unbatched then x = x:unsqueeze(1) end
    if x:size(2) ~= self.num_features and self.affine then
      fail(('%s: expected %d channels, got input %s'):format(name, self.num_features, shape_str(x)))
    end
    local y = F.instance_norm(x, {running_mean = self.running_mean, running_var = self.running_var,
      weight = self.weight, bias = self.bias, momentum = self.momentum or 0.1, eps = self.eps,
      use_input_stats = self.training or not self.track_running_stats})
    if unbatched then y = y:squeeze(1) end
    return y
  end
  module.keeps_no_tensors(cls)   -- nn.module's rule: its forward keeps none
  M[name] = cls
end
--- nn.InstanceNorm1d(num_features, {eps = 1e-5, momentum = 0.1, affine = false, track_running_stats = false}):
-- normalises each sample and channel over L.
-- @function nn.InstanceNorm1d
make_instance_norm('InstanceNorm1d', 1)
--- nn.InstanceNorm2d(num_features, {eps = 1e-5, momentum = 0.1, affine = false, track_running_stats = false}):
-- normalises each sample and channel over (H, W).
-- @function nn.InstanceNorm2d
make_instance_norm('InstanceNorm2d', 2)
--- nn.InstanceNorm3d(num_features, {eps = 1e-5, momentum = 0.1, affine = false, track_running_stats = false}):
-- normalises each sample and channel over (D, H, W).
-- @function nn.InstanceNorm3d
make_instance_norm('InstanceNorm3d', 3)

------------------------------------------------------------------ LayerNorm
local LayerNorm = Module:subclass('LayerNorm')
M.LayerNorm = LayerNorm

local ln_spec = {{'normalized_shape', U.REQUIRED}, {'eps', 1e-5}, {'elementwise_affine', true},
                 {'bias', true}, {'device', nil}, {'dtype', nil}}

--- Layer normalization over the last dims: `nn.LayerNorm(512)`, `nn.LayerNorm({C, H, W})`.
-- @function nn.LayerNorm
-- @tparam int|table normalized_shape the sizes of the last dims
-- @tparam[opt] table opts `{eps = 1e-5, elementwise_affine = true, bias = true, dtype =, device =}`
-- @treturn Module
function LayerNorm:__init(...)
  Module.__init(self)
  local a = parse('LayerNorm', ln_spec, ...)
  local shape = a.normalized_shape
  if type(shape) == 'number' then shape = {shape} end
  self.normalized_shape, self.eps, self.elementwise_affine = shape, a.eps, a.elementwise_affine
  if a.elementwise_affine then
    self.weight = Parameter(flow.ones(shape, {dtype = a.dtype}))
    if a.bias then self.bias = Parameter(flow.zeros(shape, {dtype = a.dtype}))
    else self:register_parameter('bias', nil) end
  else
    self:register_parameter('weight', nil)
    self:register_parameter('bias', nil)
  end
end

function LayerNorm:reset_parameters()
  flow.no_grad(function()
    if self.weight ~= nil then self.weight:fill_(1) end
    if self.bias ~= nil then self.bias:zero_() end
  end)
end

function LayerNorm:forward(x)
  return F.layer_norm(x, self.normalized_shape, {weight = self.weight, bias = self.bias, eps = self.eps})
end

module.keeps_no_tensors(LayerNorm)   -- nn.module's rule: its forward keeps none

function LayerNorm:extra_repr()
  return ('%s, eps=%s, elementwise_affine=%s'):format(U.tuple_str(self.normalized_shape),
    tostring(self.eps), pyrepr(self.elementwise_affine))
end

------------------------------------------------------------------ RMSNorm
local RMSNorm = Module:subclass('RMSNorm')
M.RMSNorm = RMSNorm

local rms_spec = {{'normalized_shape', U.REQUIRED}, {'eps', nil}, {'elementwise_affine', true},
                  {'device', nil}, {'dtype', nil}}

--- Root-mean-square normalization over the last dims (PyTorch 2.4's nn.RMSNorm):
-- `nn.RMSNorm(512)`, `nn.RMSNorm({C, H, W}, {eps = 1e-6})`; see F.rms_norm.
-- @function nn.RMSNorm
-- @tparam int|table normalized_shape the sizes of the last dims
-- @tparam[opt] table opts `{eps = nil, elementwise_affine = true, dtype =, device =}`; eps nil:
-- the compute type's machine epsilon
-- @treturn Module
function RMSNorm:__init(...)
  Module.__init(self)
  local a = parse('RMSNorm', rms_spec, ...)
  local shape = a.normalized_shape
  if type(shape) == 'number' then shape = {shape} end
  self.normalized_shape, self.eps, self.elementwise_affine = shape, a.eps, a.elementwise_affine
  if a.elementwise_affine then self.weight = Parameter(flow.ones(shape, {dtype = a.dtype}))
  else self:register_parameter('weight', nil) end
end

function RMSNorm:reset_parameters()
  flow.no_grad(function()
    if self.weight ~= nil then self.weight:fill_(1) end
  end)
end

function RMSNorm:forward(x)
  return F.rms_norm(x, self.normalized_shape, {weight = self.weight, eps = self.eps})
end

module.keeps_no_tensors(RMSNorm)   -- nn.module's rule: its forward keeps none

function RMSNorm:extra_repr()
  return ('%s, eps=%s, elementwise_affine=%s'):format(U.tuple_str(self.normalized_shape),
    self.eps == nil and 'None' or tostring(self.eps), pyrepr(self.elementwise_affine))
end

------------------------------------------------------------------ GroupNorm
local GroupNorm = Module:subclass('GroupNorm')
--- nn.GroupNorm(num_groups, num_channels, {eps = 1e-5, affine = true}): normalises over groups of channels.
-- @function nn.GroupNorm
M.GroupNorm = GroupNorm

local gn_spec = {{'num_groups', U.REQUIRED}, {'num_channels', U.REQUIRED}, {'eps', 1e-5},
                 {'affine', true}, {'device', nil}, {'dtype', nil}}

function GroupNorm:__init(...)
  Module.__init(self)
  local a = parse('GroupNorm', gn_spec, ...)
  if a.num_channels % a.num_groups ~= 0 then
    fail(('GroupNorm: num_channels (%d) must be divisible by num_groups (%d)'):format(
      a.num_channels, a.num_groups))
  end
  self.num_groups, self.num_channels, self.eps, self.affine = a.num_groups, a.num_channels, a.eps, a.affine
  if a.affine then
    self.weight = Parameter(flow.ones({a.num_channels}, {dtype = a.dtype}))
    self.bias = Parameter(flow.zeros({a.num_channels}, {dtype = a.dtype}))
  else
    self:register_parameter('weight', nil)
    self:register_parameter('bias', nil)
  end
end

function GroupNorm:forward(x)
  if x:dim() < 2 or x:size(2) ~= self.num_channels then
    fail(('GroupNorm: expected input with %d channels (dim 2), got input %s'):format(
      self.num_channels, shape_str(x)))
  end
  return F.group_norm(x, self.num_groups, {weight = self.weight, bias = self.bias, eps = self.eps})
end

module.keeps_no_tensors(GroupNorm)   -- nn.module's rule: its forward keeps none

function GroupNorm:extra_repr()
  return ('%d, %d, eps=%s, affine=%s'):format(self.num_groups, self.num_channels, tostring(self.eps),
    pyrepr(self.affine))
end

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


return M
