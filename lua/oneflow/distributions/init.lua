-- oneflow.distributions (flow.distributions): torch.distributions' API.
--   local D = flow.distributions
--   local d = D.Normal(flow.zeros(3), flow.ones(3))
--   local x = d:rsample({100})          -- [100, 3], differentiable in loc/scale
--   d:log_prob(x), d:entropy(), d:cdf(x), d:icdf(p), d.mean, d.variance
--   D.kl_divergence(d, D.Normal(1, 2))
-- Attributes as PyTorch's: mean, mode, variance, stddev, batch_shape,
-- event_shape, support, arg_constraints, has_rsample. Samples come from
-- flow's Philox generator (flow.manual_seed makes them reproducible).
-- Parameters are checked against their constraints when validate_args is on
-- (the default, as PyTorch's), and so are the values given to log_prob.
-- Categorical samples and values are 1-based category indices (the Lua
-- convention of flow); everything else follows PyTorch.
local flow = require 'oneflow'
local class = require 'oneflow.class'
local A = require 'oneflow._args'
local constraints = require 'oneflow.distributions.constraints'

local M = {constraints = constraints}
local fail, is_tensor = A.fail, A.is_tensor
-- a distribution argument (an instance with batch and event shapes)
local function check_dist(op, d, pos, name)
  if type(d) ~= 'table' or type(d.batch_shape) ~= 'table' or type(d.event_shape) ~= 'table' then
    fail(('%s: argument %d (%s) must be a distribution, got %s'):format(op, pos, name, A.describe(d)))
  end
  return d
end
local EULER = 0.57721566490153286061
local LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
local default_validate = true

--- flow.distributions.Distribution.set_default_validate_args(on)
local function set_default_validate_args(on) default_validate = on and true or false end

local function size_list(s)
  if s == nil then return {} end
  if type(s) == 'number' then return {s} end
  if type(s) == 'table' and s.totable then return s:totable() end
  return A.arg('Distribution', nil, 'batch_shape and event_shape', s, 'table')
end
local function concat(a, b)
  local r = {}
  for _, v in ipairs(a) do r[#r + 1] = v end
  for _, v in ipairs(b) do r[#r + 1] = v end
  return r
end

-- numbers and tensors -> tensors of one floating dtype, broadcast together
local function broadcast_all(...)
  local args, n = {...}, select('#', ...)
  local like
  for i = 1, n do if is_tensor(args[i]) then like = like or args[i] end end
  local dt = like and like:is_floating_point() and like.dtype or flow.get_default_dtype()
  for i = 1, n do
    local v = args[i]
    if not is_tensor(v) then
      if type(v) ~= 'number' then
        fail(('distribution parameter %d must be a tensor or number, got %s'):format(i, type(v)))
      end
      args[i] = flow.tensor(v, {dtype = dt})
    elseif not v:is_floating_point() then args[i] = v:to(dt) end
  end
  if n == 1 then return args[1] end
  return unpack(flow.broadcast_tensors(unpack(args, 1, n)))
end

------------------------------------------------------------------ Distribution
local Distribution = class('Distribution')
--- Distribution: the base class (sample, rsample, log_prob, entropy, mean, variance, batch_shape, event_shape).
-- @function distributions.Distribution
M.Distribution = Distribution
Distribution.has_rsample = false
Distribution.has_enumerate_support = false
Distribution.set_default_validate_args = set_default_validate_args

-- attributes computed on access: cls._get_<name>(self)
local function getter_index(cls)
  return function(t, k)
    local v = cls[k]
    if v ~= nil then return v end
    local g = cls['_get_' .. k]
    if g then return g(t) end
    return nil
  end
end
Distribution.__index = getter_index(Distribution)
function Distribution.__setup(cls) cls.__index = getter_index(cls) end

function Distribution:__init(batch_shape, event_shape, validate_args)
  self.batch_shape = flow.Size(size_list(batch_shape))
  self.event_shape = flow.Size(size_list(event_shape))
  if validate_args ~= nil then self._validate_args = validate_args else self._validate_args = default_validate end
  if self._validate_args then
    for name, c in pairs(self.arg_constraints or {}) do
      local v = rawget(self, name)
      if v ~= nil and not c:check(v):all():item() then
        fail(('%s: expected parameter %s (tensor of shape %s) to satisfy the constraint %s, but found '
              .. 'invalid values:\n%s'):format(self.__name, name, A.shape_str(v), c.name, tostring(v)))
      end
    end
  end
end

function Distribution:__tostring()
  local parts = {}
  for name in pairs(self.arg_constraints or {}) do
    local v = rawget(self, name)
    if v ~= nil then parts[#parts + 1] = name .. ': ' .. (v:dim() == 0 and tostring(v:item()) or A.shape_str(v)) end
  end
  table.sort(parts)
  return self.__name .. '(' .. table.concat(parts, ', ') .. ')'
end

function Distribution:_extended_shape(sample_shape)
  return concat(concat(size_list(sample_shape), self.batch_shape:totable()), self.event_shape:totable())
end

function Distribution:_get_stddev() return self.variance:sqrt() end

function Distribution:sample(sample_shape)
  if self.has_rsample then
    return flow.no_grad(function() return self:rsample(sample_shape) end)
  end
  fail(self.__name .. ': sample is not implemented')
end
function Distribution:rsample()
  fail(self.__name .. ': has no reparameterized sampler (has_rsample = false); use sample')
end
function Distribution:sample_n(n) return self:sample({n}) end
function Distribution:perplexity() return self:entropy():exp() end

-- the value must lie in the support (validate_args) and broadcast
function Distribution:_validate_sample(value)
  if not is_tensor(value) then fail(self.__name .. ': log_prob expects a tensor value, got ' .. type(value)) end
  if not self._validate_args then return end
  local support = self.support
  if support and not support:check(value):all():item() then
    fail(('%s: expected value argument (tensor of shape %s) to be within the support (%s) of the '
          .. 'distribution, but found invalid values:\n%s'):format(self.__name, A.shape_str(value),
          support.name, tostring(value)))
  end
end

--- expand(batch_shape): the same distribution with its parameters expanded.
function Distribution:expand(batch_shape)
  batch_shape = size_list(batch_shape)
  local new = setmetatable({}, getmetatable(self))
  for k, v in pairs(self) do new[k] = v end
  local ev = #(self._param_event_dims or {})
  local names = {}
  for name in pairs(self.arg_constraints or {}) do names[#names + 1] = name end
  for _, name in ipairs(self._derived or {}) do names[#names + 1] = name end
  for _, name in ipairs(names) do
    local v = rawget(self, name)
    if v ~= nil then
      local shape = concat(batch_shape, {})
      for i = v:dim() - ev + 1, v:dim() do shape[#shape + 1] = v:size(i) end
      new[name] = v:expand(shape)
    end
  end
  new.batch_shape = flow.Size(batch_shape)
  return new
end

local function uniform_like(shape, like)
  -- in (0, 1): flow.rand draws [0, 1); 0 is moved to the smallest positive double/float
  local u = flow.rand(shape, {dtype = like.dtype, device = like.device})
  local tiny = like.dtype == flow.float64 and 2.2250738585072014e-308 or 1.1754943508222875e-38
  return u:clamp(tiny, 1)
end

-- a distribution class with the scalar parameters `params` ({name,
-- constraint} in the constructor's order, broadcast together)
local function family(name, params, support, has_rsample)
  local cls = Distribution:subclass(name)
  M[name] = cls
  cls.arg_constraints = {}
  for _, p in ipairs(params) do cls.arg_constraints[p[1]] = p[2] end
  cls.support, cls.has_rsample = support, has_rsample
  function cls:__init(...)
    local n = #params
    local args = {...}
    local vals = {broadcast_all(unpack(args, 1, n))}
    for i, p in ipairs(params) do self[p[1]] = vals[i] end
    Distribution.__init(self, vals[1]:size(), {}, args[n + 1])
  end
  return cls
end
-- a location-scale family: loc real, scale positive, reparameterised, mode = loc
local LOC_SCALE = {{'loc', constraints.real}, {'scale', constraints.positive}}
local function loc_scale_family(name, support)
  local cls = family(name, LOC_SCALE, support or constraints.real, true)
  function cls:_get_mode() return self.loc end
  return cls
end

------------------------------------------------------------------ Normal
local Normal = loc_scale_family('Normal')
function Normal:_get_mean() return self.loc end
function Normal:_get_stddev() return self.scale end
function Normal:_get_variance() return self.scale ^ 2 end
function Normal:rsample(sample_shape)
  local shape = self:_extended_shape(sample_shape)
  local eps = flow.randn(shape, {dtype = self.loc.dtype, device = self.loc.device})
  return self.loc + eps * self.scale
end
function Normal:log_prob(value)
  self:_validate_sample(value)
  return -((value - self.loc) ^ 2) / (self.scale ^ 2 * 2) - self.scale:log() - LOG_SQRT_2PI
end
function Normal:cdf(value)
  return ((value - self.loc) / (self.scale * math.sqrt(2))):erf():add(1):mul(0.5)
end
function Normal:icdf(p) return self.loc + self.scale * (p * 2 - 1):erfinv() * math.sqrt(2) end
function Normal:entropy() return self.scale:log() + 0.5 + LOG_SQRT_2PI end

------------------------------------------------------------------ probs / logits
local function probs_to_logits(p, binary)
  local eps = p.dtype == flow.float64 and 2.220446049250313e-16 or 1.1920928955078125e-07
  local c = p:clamp(eps, 1 - eps)
  if binary then return c:log() - (-c):log1p() end
  return c:log()
end
-- one of probs / logits given; the other derived
local function probs_or_logits(name, probs, logits)
  if (probs == nil) == (logits == nil) then
    fail(name .. ': either probs or logits must be specified, but not both')
  end
  return probs, logits
end

------------------------------------------------------------------ Bernoulli
local Bernoulli = Distribution:subclass('Bernoulli')
--- Bernoulli(probs[, logits]) or Bernoulli({probs =} | {logits =}): 1 with probability probs, else 0.
-- @function distributions.Bernoulli
M.Bernoulli = Bernoulli
Bernoulli.support = constraints.boolean
--- Bernoulli(probs[, logits[, validate_args]]) or Bernoulli({probs =} | {logits =})
-- probs (checked by `probs_constraint`) or logits, for Bernoulli and Geometric
local function init_binary(self, name, probs, logits, validate_args, probs_constraint)
  if type(probs) == 'table' and not is_tensor(probs) then
    probs, logits, validate_args = probs.probs, probs.logits, probs.validate_args
  end
  probs_or_logits(name, probs, logits)
  if probs ~= nil then
    self.probs = broadcast_all(probs)
    self.arg_constraints = {probs = probs_constraint}
  else
    self.logits = broadcast_all(logits)
    self.arg_constraints = {logits = constraints.real}
  end
  Distribution.__init(self, (self.probs or self.logits):size(), {}, validate_args)
end
function Bernoulli:__init(probs, logits, validate_args)
  init_binary(self, 'Bernoulli', probs, logits, validate_args, constraints.unit_interval)
end
function Bernoulli:_get_probs() return rawget(self, 'logits'):sigmoid() end
function Bernoulli:_get_logits() return probs_to_logits(rawget(self, 'probs'), true) end
function Bernoulli:_get_mean() return self.probs end
function Bernoulli:_get_mode() return self.probs:ge(0.5):to(self.probs.dtype) end
function Bernoulli:_get_variance() return self.probs * (1 - self.probs) end
function Bernoulli:sample(sample_shape)
  local shape = self:_extended_shape(sample_shape)
  return flow.no_grad(function() return flow.bernoulli(self.probs:expand(shape)) end)
end
-- -BCE with logits: v l - softplus(l), computed stably
local function bce_logits(l, v)
  return l:clamp(0) - l * v + (-l:abs()):exp():log1p()
end
function Bernoulli:log_prob(value)
  self:_validate_sample(value)
  local l, v = unpack(flow.broadcast_tensors(self.logits, value:to(self.logits.dtype)))
  return -bce_logits(l, v)
end
function Bernoulli:entropy() return bce_logits(self.logits, self.probs) end

------------------------------------------------------------------ Categorical
local Categorical = Distribution:subclass('Categorical')
M.Categorical = Categorical
Categorical._param_event_dims = {1}
--- Categorical(probs[, logits[, validate_args]]): categories 1..K over the last dim.
function Categorical:__init(probs, logits, validate_args)
  if type(probs) == 'table' and not is_tensor(probs) then
    probs, logits, validate_args = probs.probs, probs.logits, probs.validate_args
  end
  probs_or_logits('Categorical', probs, logits)
  local p = probs or logits
  if not is_tensor(p) or p:dim() < 1 then fail('Categorical: probs or logits must be a tensor of at least 1 dim') end
  if probs ~= nil then
    self.probs = probs / probs:sum(-1, {keepdim = true})
    self.arg_constraints = {probs = constraints.simplex}
  else
    self.logits = logits - logits:logsumexp(-1, {keepdim = true})
    self.arg_constraints = {logits = constraints.independent(constraints.real, 1)}
  end
  self._num_events = p:size(-1)
  local bs = p:size():totable()
  bs[#bs] = nil
  Distribution.__init(self, bs, {}, validate_args)
end
function Categorical:_get_probs() return rawget(self, 'logits'):softmax(-1) end
function Categorical:_get_logits() return probs_to_logits(rawget(self, 'probs')) end
function Categorical:_get_support() return constraints.integer_interval(1, self._num_events) end
function Categorical:_get_mean() return flow.full(self.batch_shape:totable(), 0 / 0, {dtype = self.probs.dtype}) end
function Categorical:_get_variance() return self:_get_mean() end
function Categorical:_get_mode() return self.probs:argmax(-1) end
function Categorical:sample(sample_shape)
  local ss = size_list(sample_shape)
  local n = 1
  for _, s in ipairs(ss) do n = n * s end
  local p2 = self.probs:reshape(-1, self._num_events)
  local draws = flow.no_grad(function() return flow.multinomial(p2, n, {replacement = true}) end)  -- [B, n]
  local shape = concat(ss, self.batch_shape:totable())
  return draws:t():reshape(shape)
end
function Categorical:log_prob(value)
  self:_validate_sample(value)
  local v = value:to('int64'):unsqueeze(-1)
  local l = self.logits
  local shape = flow.broadcast_tensors(v, l:narrow(-1, 1, 1))[1]:size():totable()
  v = v:expand(shape)
  shape[#shape] = self._num_events
  return l:expand(shape):gather(-1, v):squeeze(-1)
end
function Categorical:entropy()
  local min = self.logits.dtype == flow.float64 and -1.7976931348623157e308 or -3.4028234663852886e38
  return -(self.logits:clamp(min) * self.probs):sum(-1)
end

------------------------------------------------------------------ OneHotCategorical
local OneHotCategorical = Distribution:subclass('OneHotCategorical')
--- OneHotCategorical(probs[, logits]): one-hot vectors of a Categorical sample.
-- @function distributions.OneHotCategorical
M.OneHotCategorical = OneHotCategorical
OneHotCategorical.support = constraints.one_hot
OneHotCategorical._param_event_dims = {1}
function OneHotCategorical:__init(probs, logits, validate_args)
  self._categorical = Categorical(probs, logits, validate_args)
  self.arg_constraints = {}
  Distribution.__init(self, self._categorical.batch_shape, {self._categorical._num_events}, validate_args)
end
function OneHotCategorical:_get_probs() return self._categorical.probs end
function OneHotCategorical:_get_logits() return self._categorical.logits end
function OneHotCategorical:_get_mean() return self._categorical.probs end
function OneHotCategorical:_get_variance() local p = self._categorical.probs return p * (1 - p) end
function OneHotCategorical:sample(sample_shape)
  local idx = self._categorical:sample(sample_shape)
  return flow.nn.functional.one_hot(idx, self._categorical._num_events):to(self.probs.dtype)
end
function OneHotCategorical:log_prob(value)
  self:_validate_sample(value)
  return self._categorical:log_prob(value:argmax(-1))
end
function OneHotCategorical:entropy() return self._categorical:entropy() end

------------------------------------------------------------------ Uniform
local Uniform = Distribution:subclass('Uniform')
M.Uniform = Uniform
Uniform.has_rsample = true
--- Uniform(low, high[, validate_args]): [low, high)
function Uniform:__init(low, high, validate_args)
  self.low, self.high = broadcast_all(low, high)
  if validate_args ~= false and default_validate and not self.low:lt(self.high):all():item() then
    fail('Uniform: expected parameter low to be less than high')
  end
  self.arg_constraints = {low = constraints.real, high = constraints.real}
  Distribution.__init(self, self.low:size(), {}, validate_args)
end
function Uniform:_get_support() return constraints.interval(self.low, self.high) end
function Uniform:_get_mean() return (self.low + self.high) / 2 end
function Uniform:_get_mode() return self.low * (0 / 0) end
function Uniform:_get_variance() return (self.high - self.low) ^ 2 / 12 end
function Uniform:rsample(sample_shape)
  local shape = self:_extended_shape(sample_shape)
  local u = flow.rand(shape, {dtype = self.low.dtype, device = self.low.device})
  return self.low + u * (self.high - self.low)
end
function Uniform:log_prob(value)
  self:_validate_sample(value)
  local inside = self.low:le(value):logical_and(value:lt(self.high)):to(self.low.dtype)
  return inside:log() - (self.high - self.low):log()
end
function Uniform:cdf(value) return ((value - self.low) / (self.high - self.low)):clamp(0, 1) end
function Uniform:icdf(p) return p * (self.high - self.low) + self.low end
function Uniform:entropy() return (self.high - self.low):log() end

------------------------------------------------------------------ Exponential
local Exponential = family('Exponential', {{'rate', constraints.positive}}, constraints.nonnegative, true)
function Exponential:_get_mean() return self.rate:reciprocal() end
function Exponential:_get_mode() return flow.zeros_like(self.rate) end
function Exponential:_get_variance() return self.rate:pow(-2) end
function Exponential:rsample(sample_shape)
  local u = uniform_like(self:_extended_shape(sample_shape), self.rate)
  return -u:log() / self.rate
end
function Exponential:log_prob(value)
  self:_validate_sample(value)
  return self.rate:log() - self.rate * value
end
function Exponential:cdf(value) return 1 - (-self.rate * value):exp() end
function Exponential:icdf(p) return -(-p):log1p() / self.rate end
function Exponential:entropy() return 1 - self.rate:log() end

------------------------------------------------------------------ Laplace
local Laplace = loc_scale_family('Laplace')
function Laplace:_get_mean() return self.loc end
function Laplace:_get_variance() return self.scale ^ 2 * 2 end
function Laplace:_get_stddev() return self.scale * math.sqrt(2) end
function Laplace:rsample(sample_shape)
  local u = uniform_like(self:_extended_shape(sample_shape), self.loc) * 2 - 1   -- (-1, 1)
  return self.loc - self.scale * u:sign() * (-u:abs()):log1p()
end
function Laplace:log_prob(value)
  self:_validate_sample(value)
  return -(self.scale * 2):log() - (value - self.loc):abs() / self.scale
end
function Laplace:cdf(value)
  local d = value - self.loc
  return 0.5 - (d:sign() * (-d:abs() / self.scale):expm1()) * 0.5
end
function Laplace:icdf(p)
  local t = p - 0.5
  return self.loc - self.scale * t:sign() * (-t:abs() * 2):log1p()
end
function Laplace:entropy() return (self.scale * 2):log() + 1 end

------------------------------------------------------------------ Cauchy
local Cauchy = loc_scale_family('Cauchy')
function Cauchy:_get_mean() return self.loc * (0 / 0) end
function Cauchy:_get_variance() return flow.full(self.loc:size():totable(), math.huge, {dtype = self.loc.dtype}) end
function Cauchy:rsample(sample_shape)
  local u = uniform_like(self:_extended_shape(sample_shape), self.loc)
  return self.loc + self.scale * ((u - 0.5) * math.pi):tan()
end
function Cauchy:log_prob(value)
  self:_validate_sample(value)
  return -math.log(math.pi) - self.scale:log() - (((value - self.loc) / self.scale) ^ 2):log1p()
end
function Cauchy:cdf(value) return ((value - self.loc) / self.scale):atan() / math.pi + 0.5 end
function Cauchy:icdf(p) return ((p - 0.5) * math.pi):tan() * self.scale + self.loc end
function Cauchy:entropy() return self.scale:log() + math.log(4 * math.pi) end

------------------------------------------------------------------ Gumbel
local Gumbel = loc_scale_family('Gumbel')
function Gumbel:_get_mean() return self.loc + self.scale * EULER end
function Gumbel:_get_variance() return self.scale ^ 2 * (math.pi ^ 2 / 6) end
function Gumbel:_get_stddev() return self.scale * (math.pi / math.sqrt(6)) end
function Gumbel:rsample(sample_shape)
  local u = uniform_like(self:_extended_shape(sample_shape), self.loc)
  return self.loc - self.scale * (-u:log()):log()
end
function Gumbel:log_prob(value)
  self:_validate_sample(value)
  local z = (value - self.loc) / self.scale
  return -(z + (-z):exp()) - self.scale:log()
end
function Gumbel:cdf(value) return (-(-(value - self.loc) / self.scale):exp()):exp() end
function Gumbel:icdf(p) return self.loc - self.scale * (-p:log()):log() end
function Gumbel:entropy() return self.scale:log() + (1 + EULER) end

------------------------------------------------------------------ LogNormal
local LogNormal = loc_scale_family('LogNormal', constraints.positive)
function LogNormal:_get_base_dist() return Normal(self.loc, self.scale, false) end
function LogNormal:_get_mean() return (self.loc + self.scale ^ 2 / 2):exp() end
function LogNormal:_get_mode() return (self.loc - self.scale ^ 2):exp() end
function LogNormal:_get_variance()
  local s2 = self.scale ^ 2
  return s2:expm1() * (self.loc * 2 + s2):exp()
end
function LogNormal:rsample(sample_shape) return Normal(self.loc, self.scale, false):rsample(sample_shape):exp() end
function LogNormal:log_prob(value)
  self:_validate_sample(value)
  local lv = value:log()
  return Normal(self.loc, self.scale, false):log_prob(lv) - lv
end
function LogNormal:cdf(value) return Normal(self.loc, self.scale, false):cdf(value:log()) end
function LogNormal:icdf(p) return Normal(self.loc, self.scale, false):icdf(p):exp() end
function LogNormal:entropy() return Normal(self.loc, self.scale, false):entropy() + self.loc end

------------------------------------------------------------------ HalfNormal
local HalfNormal = family('HalfNormal', {{'scale', constraints.positive}}, constraints.nonnegative, true)
-- |X| for X of a zero-centred symmetric distribution full(self): the
-- sampler, log_prob, cdf, icdf, entropy and mode of the half distribution
local function half_of(cls, full)
  function cls:rsample(sample_shape) return full(self):rsample(sample_shape):abs() end
  function cls:log_prob(value)
    self:_validate_sample(value)
    local lp = full(self):log_prob(value) + math.log(2)
    return flow.where(value:ge(0), lp, flow.full({}, -math.huge, {dtype = lp.dtype}))
  end
  function cls:cdf(value) return full(self):cdf(value) * 2 - 1 end
  function cls:icdf(p) return full(self):icdf((p + 1) / 2) end
  function cls:entropy() return full(self):entropy() - math.log(2) end
  function cls:_get_mode() return flow.zeros_like(self.scale) end
end
local function std_normal(self) return Normal(flow.zeros_like(self.scale), self.scale, false) end
half_of(HalfNormal, std_normal)
function HalfNormal:_get_mean() return self.scale * math.sqrt(2 / math.pi) end
function HalfNormal:_get_variance() return self.scale ^ 2 * (1 - 2 / math.pi) end

------------------------------------------------------------------ Geometric
local Geometric = Distribution:subclass('Geometric')
M.Geometric = Geometric
Geometric.support = constraints.nonnegative_integer
--- Geometric(probs[, logits]): failures before the first success.
function Geometric:__init(probs, logits, validate_args)
  init_binary(self, 'Geometric', probs, logits, validate_args, constraints.unit_interval)
  local p = rawget(self, 'probs')
  if p ~= nil and self._validate_args and not p:gt(0):all():item() then
    fail('Geometric: expected parameter probs to be in (0, 1]')
  end
end
Geometric._get_probs = Bernoulli._get_probs
Geometric._get_logits = Bernoulli._get_logits
function Geometric:_get_mean() return self.probs:reciprocal() - 1 end
function Geometric:_get_mode() return flow.zeros_like(self.probs) end
function Geometric:_get_variance() return (self.probs:reciprocal() - 1) / self.probs end
function Geometric:sample(sample_shape)
  local shape = self:_extended_shape(sample_shape)
  return flow.no_grad(function()
    local u = uniform_like(shape, self.probs)
    return (u:log() / (-self.probs):log1p()):floor()
  end)
end
function Geometric:log_prob(value)
  self:_validate_sample(value)
  local v, p = unpack(flow.broadcast_tensors(value:to(self.probs.dtype), self.probs))
  -- value * log1p(-p), 0 where p == 1 and value == 0
  local t = flow.where(p:eq(1):logical_and(v:eq(0)), flow.zeros({}, {dtype = p.dtype}), v * (-p):log1p())
  return t + p:log()
end
function Geometric:entropy() return bce_logits(self.logits, self.probs) / self.probs end

------------------------------------------------------------------ Independent
local Independent = Distribution:subclass('Independent')
M.Independent = Independent
--- Independent(base, n): base with its n rightmost batch dims as event dims.
function Independent:__init(base, n, validate_args)
  check_dist('Independent', base, 1, 'base_distribution')
  if type(n) ~= 'number' or n < 0 or n > #base.batch_shape:totable() then
    fail(('Independent: reinterpreted_batch_ndims must be in [0, %d], got %s'):format(
      #base.batch_shape:totable(), tostring(n)))
  end
  self.base_dist, self.reinterpreted_batch_ndims = base, n
  self.has_rsample = base.has_rsample
  local bs = base.batch_shape:totable()
  local b, e = {}, {}
  for i = 1, #bs - n do b[#b + 1] = bs[i] end
  for i = #bs - n + 1, #bs do e[#e + 1] = bs[i] end
  self.arg_constraints = {}
  Distribution.__init(self, b, concat(e, base.event_shape:totable()), validate_args)
end
local function sum_rightmost(x, n)
  for _ = 1, n do x = x:sum(-1) end
  return x
end
function Independent:_get_support()
  return constraints.independent(self.base_dist.support, self.reinterpreted_batch_ndims)
end
function Independent:_get_mean() return self.base_dist.mean end
function Independent:_get_mode() return self.base_dist.mode end
function Independent:_get_variance() return self.base_dist.variance end
function Independent:sample(s) return self.base_dist:sample(s) end
function Independent:rsample(s) return self.base_dist:rsample(s) end
function Independent:log_prob(v) return sum_rightmost(self.base_dist:log_prob(v), self.reinterpreted_batch_ndims) end
function Independent:entropy() return sum_rightmost(self.base_dist:entropy(), self.reinterpreted_batch_ndims) end
function Independent:expand(batch_shape)
  batch_shape = size_list(batch_shape)
  local full = concat(batch_shape, {})
  local bs = self.base_dist.batch_shape:totable()
  for i = #bs - self.reinterpreted_batch_ndims + 1, #bs do full[#full + 1] = bs[i] end
  return Independent(self.base_dist:expand(full), self.reinterpreted_batch_ndims, self._validate_args)
end

------------------------------------------------------------------ Gamma family
local S = flow.special

-- Standard Gamma(alpha, 1) draws, Marsaglia & Tsang (2000): for alpha >= 1
-- a squeeze-rejection sampler from a transformed normal (acceptance above
-- 95%), repeated for the rejected elements only; alpha < 1 draws
-- Gamma(alpha + 1) * U^(1/alpha).
local function standard_gamma(alpha)
  return flow.no_grad(function()
    local small = alpha:lt(1)
    local a = flow.where(small, alpha + 1, alpha)
    local d = a - 1 / 3
    local c = (d * 9):rsqrt()
    local out = flow.zeros_like(a)
    local redraw = flow.ones(a:size():totable(), {dtype = flow.bool})
    for _ = 1, 200 do
      local x = flow.randn(a:size():totable(), {dtype = a.dtype})
      local v = (x * c + 1) ^ 3
      local u = uniform_like(a:size():totable(), a)
      local vpos = v:gt(0)
      local vs = flow.where(vpos, v, flow.ones({}, {dtype = v.dtype}))
      local ok = vpos:logical_and(u:log():lt(x * x * 0.5 + d - d * vs + d * vs:log()))
      local take = ok:logical_and(redraw)
      out = flow.where(take, d * vs, out)
      redraw = redraw:logical_and(ok:logical_not())
      if not redraw:any():item() then break end
    end
    if redraw:any():item() then fail('Gamma: the sampler did not converge (parameters too extreme?)') end
    local boost = uniform_like(a:size():totable(), a):pow(alpha:reciprocal())
    return flow.where(small, out * boost, out)
  end)
end

-- d x / d alpha of a standard Gamma(alpha) draw x, holding its cdf fixed
-- (implicit reparameterisation): torch's _standard_gamma_grad, the same three
-- regimes (a Taylor series of the incomplete gamma function for x < 0.8, Rice's
-- saddle-point expansion for alpha > 8, else a bivariate rational fit), so
-- gradients agree with torch's for the same samples.
local GAMMA_UV = {
  {0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1, 0.32668115, 0.10406089, 0.0014179084},
  {0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113, -0.0035938915, -0.00058392623},
  {0.040121004, -0.0065914022, -0.0026286047, -0.0013441777, 0.017050642, -0.0021309326, 0.00085092367,
   -1.5247877e-07},
}
local function gamma_grad_one(alpha, x, dig)
  local exp, log, sqrt = math.exp, math.log, math.sqrt
  if x < 0.8 then
    local numer, denom = 1, alpha
    local s1, s2 = numer / denom, numer / (denom * denom)
    for i = 1, 5 do
      numer = numer * (-x / i)
      denom = denom + 1
      s1, s2 = s1 + numer / denom, s2 + numer / (denom * denom)
    end
    local pxa = x ^ alpha
    local pdf = x ^ (alpha - 1) * exp(-x)
    local r = -((log(x) - dig) * pxa * s1 - pxa * s2) / pdf
    return r ~= r and 0 or r
  end
  if alpha > 8 then
    if 0.9 * alpha <= x and x <= 1.1 * alpha then
      local n1 = 1 + 24 * alpha * (1 + 12 * alpha)
      local n2 = 1440 * alpha * alpha + 6 * x * (53 - 120 * x) - 65 * x * x / alpha + alpha * (107 + 3600 * x)
      return n1 * n2 / (1244160 * alpha * alpha * alpha * alpha)
    end
    local denom = sqrt(8 * alpha)
    local t2 = denom / (alpha - x)
    local t3 = (x - alpha - alpha * log(x / alpha)) ^ -1.5
    local t23 = x < alpha and t2 - t3 or t2 + t3
    local t1 = log(x / alpha) * t23 - sqrt(2 / alpha) * (alpha + x) / ((alpha - x) * (alpha - x))
    local stirling = 1 + 1 / (12 * alpha) * (1 + 1 / (24 * alpha))
    return -stirling * x * t1 / denom
  end
  local u, v = log(x / alpha), log(alpha)
  local c = {}
  for i = 1, 8 do c[i] = GAMMA_UV[1][i] + u * (GAMMA_UV[2][i] + u * GAMMA_UV[3][i]) end
  local p = c[1] + v * (c[2] + v * (c[3] + v * c[4]))
  local q = c[5] + v * (c[6] + v * (c[7] + v * c[8]))
  return exp(p / q)
end

local function flat64(t) return t:to(flow.float64):contiguous():reshape(-1) end
--- standard_gamma_grad(alpha, x): d x / d alpha for standard Gamma(alpha)
-- draws x (torch._standard_gamma_grad), elementwise on same-shape tensors.
local function standard_gamma_grad(alpha, x)
  return flow.no_grad(function()
    local shape = x:size():totable()
    local a64 = flat64(alpha)
    local av, xv = a64:totable(), flat64(x):totable()
    local dv = S.digamma(a64):totable()
    local r = {}
    for i = 1, #xv do r[i] = gamma_grad_one(av[i], xv[i], dv[i]) end
    return flow.tensor(r, {dtype = x.dtype, device = x.device}):reshape(shape)
  end)
end
M._standard_gamma_grad = standard_gamma_grad

-- a standard Gamma draw differentiable w.r.t. alpha through the implicit gradient
local StandardGamma = require('oneflow.autograd').Function:subclass('StandardGamma')
function StandardGamma.forward(ctx, alpha)
  local x = standard_gamma(alpha)
  ctx:save_for_backward(alpha, x)
  return x
end
function StandardGamma.backward(ctx, g)
  local alpha, x = unpack(ctx.saved_tensors)
  return g * standard_gamma_grad(alpha, x)
end
-- d x / d alpha_i of a Dirichlet draw's component x (torch's
-- dirichlet_grad_one: the Beta(alpha, total - alpha) marginal's implicit
-- gradient, scaled by 1 / (1 - x)); dga, dgt are the digammas of alpha, total.
local DIR_C = {
  {{{1.003668233, -0.01061107488, -0.0657888334, 0.01201642863},
    {0.6336835991, -0.3557432599, 0.05486251648, -0.001465281033},
    {-0.03276231906, 0.004474107445, 0.002429354597, -0.0001557569013}},
   {{0.221950385, -0.3187676331, 0.01799915743, 0.01074823814},
    {-0.2951249643, 0.06219954479, 0.01535556598, 0.001550077057},
    {0.02155310298, 0.004170831599, 0.001292462449, 6.976601077e-05}},
   {{-0.05980841433, 0.008441916499, 0.01085618172, 0.002319392565},
    {0.02911413504, 0.01400243777, -0.002721828457, 0.000751041181},
    {0.005900514878, -0.001936558688, -9.495446725e-06, 5.385558597e-05}}},
  {{{1, -0.02924021934, -0.04438342661, 0.007285809825},
    {0.6357567472, -0.3473456711, 0.05454656494, -0.002407477521},
    {-0.03301322327, 0.004845219414, 0.00231480583, -0.0002307248149}},
   {{0.5925320577, -0.1757678135, 0.01505928619, 0.000564515273},
    {0.1014815858, -0.06589186703, 0.01272886114, -0.0007316646956},
    {-0.007258481865, 0.001096195486, 0.0003934994223, -4.12701925e-05}},
   {{0.06469649321, -0.0236701437, 0.002902096474, -5.896963079e-05},
    {0.001925008108, -0.002869809258, 0.0008000589141, -6.063713228e-05},
    {-0.0003477407336, 6.959756487e-05, 1.097287507e-05, -1.650964693e-06}}},
}
local function beta_grad_alpha_small(x, alpha, beta, dga, dgt)
  local factor = dga - dgt - math.log(x)
  local numer = 1
  local series = numer / alpha * (factor + 1 / alpha)
  for i = 1, 10 do
    numer = numer * ((i - beta) * x / i)
    local denom = alpha + i
    series = series + numer / denom * (factor + 1 / denom)
  end
  local r = x * (1 - x) ^ -beta * series
  return r ~= r and 0 or r
end
local function beta_grad_beta_small(x, alpha, beta, dgb, dgt)
  local factor = dgt - dgb
  local numer, betas, dbetas, series = 1, 1, 0, factor / alpha
  for i = 1, 8 do
    numer = numer * (-x / i)
    dbetas = dbetas * (beta - i) + betas
    betas = betas * (beta - i)
    series = series + numer / (alpha + i) * (dbetas + factor * betas)
  end
  local r = -(1 - x) ^ (1 - beta) * series
  return r ~= r and 0 or r
end
local function beta_grad_alpha_mid(x, alpha, beta)
  local sqrt, log = math.sqrt, math.log
  local total = alpha + beta
  local mean = alpha / total
  local std = sqrt(alpha * beta / (total + 1)) / total
  if mean - 0.1 * std <= x and x <= mean + 0.1 * std then
    local b2 = beta * beta
    local poly = 47 * x * b2 * b2 + alpha * ((43 + 20 * (16 + 27 * beta) * x) * b2 * beta + alpha * (
      3 * (59 + 180 * beta - 90 * x) * b2 + alpha * ((453 + 1620 * beta * (1 - x) - 455 * x) * beta
      + alpha * (8 * (1 - x) * (135 * beta - 11)))))
    local pnum = (1 + 12 * alpha) * (1 + 12 * beta) / (total * total)
    local pden = 12960 * alpha * alpha * alpha * beta * beta * (1 + 12 * total)
    return pnum / (1 - x) * poly / pden
  end
  local prefactor = -x / sqrt(2 * alpha * beta / total)
  local stirling = (1 + 1 / (12 * alpha) + 1 / (288 * alpha * alpha)) * (1 + 1 / (12 * beta) + 1 / (288 * beta * beta))
    / (1 + 1 / (12 * total) + 1 / (288 * total * total))
  local t1num = 2 * (alpha * alpha) * (x - 1) + alpha * beta * (x - 1) - x * (beta * beta)
  local axbx = alpha * (x - 1) + beta * x
  local t1 = t1num / (sqrt(2 * alpha / beta) * total ^ 1.5 * axbx * axbx)
  local t2 = 0.5 * log(alpha / (total * x))
  local t3 = sqrt(8 * alpha * beta / total) / (beta * x + alpha * (x - 1))
  local t4 = (beta * log(beta / (total * (1 - x))) + alpha * log(alpha / (total * x))) ^ -1.5
  return stirling * prefactor * (t1 + t2 * (t3 + (x < mean and t4 or -t4)))
end
local function dirichlet_grad_one(x, alpha, total, dga, dgt)
  local beta = total - alpha
  local boundary = total * x * (1 - x)
  if x <= 0.5 and boundary < 2.5 then return beta_grad_alpha_small(x, alpha, beta, dga, dgt) end
  if x >= 0.5 and boundary < 0.75 then return -beta_grad_beta_small(1 - x, beta, alpha, dga, dgt) end
  if alpha > 6 and beta > 6 then return beta_grad_alpha_mid(x, alpha, beta) end
  local log = math.log
  local u = log(x)
  local a = log(alpha) - u
  local b = log(total) - a
  local pu, pa = {1, u, u * u}, {1, a, a * a}
  local p, q = 0, 0
  for i = 1, 3 do
    for j = 1, 3 do
      local ua = pu[i] * pa[j]
      local c0, c1 = DIR_C[1][i][j], DIR_C[2][i][j]
      p = p + ua * (c0[1] + b * (c0[2] + b * (c0[3] + b * c0[4])))
      q = q + ua * (c1[1] + b * (c1[2] + b * (c1[3] + b * c1[4])))
    end
  end
  return p / q * (x * (dgt - dga) / beta)
end

--- dirichlet_grad(x, alpha, total): torch._dirichlet_grad, elementwise.
local function dirichlet_grad(x, alpha, total)
  return flow.no_grad(function()
    local a, tt = flat64(alpha), flat64(total)
    local xv, av, tv = flat64(x):totable(), a:totable(), tt:totable()
    local dga, dgt = S.digamma(a):totable(), S.digamma(tt):totable()
    local r = {}
    for i = 1, #xv do r[i] = dirichlet_grad_one(xv[i], av[i], tv[i], dga[i], dgt[i]) end
    return flow.tensor(r, {dtype = x.dtype, device = x.device}):reshape(x:size():totable())
  end)
end
M._dirichlet_grad = dirichlet_grad

-- a Dirichlet draw (normalised standard Gammas) differentiable w.r.t. the
-- concentration as torch's _Dirichlet
local DirichletSample = require('oneflow.autograd').Function:subclass('DirichletSample')
function DirichletSample.forward(ctx, alpha)
  local g = standard_gamma(alpha)
  local x = g / g:sum(-1, {keepdim = true})
  ctx:save_for_backward(alpha, x)
  return x
end
function DirichletSample.backward(ctx, g)
  local alpha, x = unpack(ctx.saved_tensors)
  local total = alpha:sum(-1, {keepdim = true}):expand(alpha:size():totable())
  return dirichlet_grad(x, alpha, total) * (g - (x * g):sum(-1, {keepdim = true}))
end

local function rstandard_gamma(alpha)
  if not alpha.requires_grad then return standard_gamma(alpha) end
  return StandardGamma.apply(alpha)
end

--- Gamma(concentration, rate[, validate_args]). rsample is reparameterised
-- as torch's: implicit gradients w.r.t. concentration, explicit w.r.t. rate.
local Gamma = family('Gamma', {{'concentration', constraints.positive}, {'rate', constraints.positive}},
                     constraints.nonnegative, true)
function Gamma:_get_mean() return self.concentration / self.rate end
function Gamma:_get_mode() return ((self.concentration - 1) / self.rate):clamp(0) end
function Gamma:_get_variance() return self.concentration / self.rate ^ 2 end
function Gamma:rsample(sample_shape)
  local shape = self:_extended_shape(sample_shape)
  return rstandard_gamma(self.concentration:expand(shape)) / self.rate:expand(shape)
end
function Gamma:log_prob(value)
  self:_validate_sample(value)
  local a, r = self.concentration, self.rate
  return flow.xlogy(a, r) + flow.xlogy(a - 1, value) - r * value - S.gammaln(a)
end
function Gamma:cdf(value) return S.gammainc(self.concentration, self.rate * value) end
function Gamma:entropy()
  local a = self.concentration
  return a - self.rate:log() + S.gammaln(a) + (1 - a) * S.digamma(a)
end

local Chi2 = Gamma:subclass('Chi2')
M.Chi2 = Chi2
Chi2.arg_constraints = {df = constraints.positive}
--- Chi2(df[, validate_args]) = Gamma(df / 2, 1 / 2)
function Chi2:__init(df, validate_args)
  self.df = broadcast_all(df)
  self.concentration, self.rate = self.df * 0.5, flow.full(self.df:size():totable(), 0.5, {dtype = self.df.dtype})
  self._derived = {'concentration', 'rate'}
  Distribution.__init(self, self.df:size(), {}, validate_args)
end

local function lbeta_sum(conc)   -- log B(conc) over the last dim
  return S.gammaln(conc):sum(-1) - S.gammaln(conc:sum(-1))
end

local Dirichlet = Distribution:subclass('Dirichlet')
M.Dirichlet = Dirichlet
Dirichlet.arg_constraints = {concentration = constraints.independent(constraints.positive, 1)}
Dirichlet.support = constraints.simplex
Dirichlet._param_event_dims = {1}
--- Dirichlet(concentration [..., K][, validate_args])
function Dirichlet:__init(concentration, validate_args)
  if not is_tensor(concentration) or concentration:dim() < 1 then
    fail('Dirichlet: concentration must be a tensor of at least 1 dim')
  end
  self.concentration = broadcast_all(concentration)
  local bs = concentration:size():totable()
  local k = table.remove(bs)
  Distribution.__init(self, bs, {k}, validate_args)
end
function Dirichlet:_get_mean() return self.concentration / self.concentration:sum(-1, {keepdim = true}) end
function Dirichlet:_get_variance()
  local a = self.concentration
  local a0 = a:sum(-1, {keepdim = true})
  return a * (a0 - a) / (a0 ^ 2 * (a0 + 1))
end
Dirichlet.has_rsample = true
function Dirichlet:rsample(sample_shape)
  local alpha = self.concentration:expand(self:_extended_shape(sample_shape))
  if alpha.requires_grad then return DirichletSample.apply(alpha) end
  local g = standard_gamma(alpha)
  return g / g:sum(-1, {keepdim = true})
end
function Dirichlet:log_prob(value)
  self:_validate_sample(value)
  return flow.xlogy(self.concentration - 1, value):sum(-1) - lbeta_sum(self.concentration)
end
function Dirichlet:entropy()
  local a = self.concentration
  local k, a0 = a:size(-1), a:sum(-1)
  return lbeta_sum(a) + (a0 - k) * S.digamma(a0) - ((a - 1) * S.digamma(a)):sum(-1)
end

--- Beta(concentration1, concentration0[, validate_args])
local Beta = family('Beta', {{'concentration1', constraints.positive}, {'concentration0', constraints.positive}},
                    constraints.unit_interval, true)
local function beta_dirichlet(self)
  return Dirichlet(flow.stack({self.concentration1, self.concentration0}, -1), false)
end
function Beta:_get_mean() return self.concentration1 / (self.concentration1 + self.concentration0) end
function Beta:_get_variance()
  local a, b = self.concentration1, self.concentration0
  local t = a + b
  return a * b / (t ^ 2 * (t + 1))
end
function Beta:rsample(sample_shape) return beta_dirichlet(self):rsample(sample_shape):select(-1, 1) end
function Beta:log_prob(value)
  self:_validate_sample(value)
  local v = flow.stack({value, 1 - value}, -1)
  return beta_dirichlet(self):log_prob(v)
end
function Beta:entropy() return beta_dirichlet(self):entropy() end

local StudentT = Distribution:subclass('StudentT')
M.StudentT = StudentT
StudentT.arg_constraints = {df = constraints.positive, loc = constraints.real, scale = constraints.positive}
StudentT.support = constraints.real
--- StudentT(df[, loc = 0[, scale = 1[, validate_args]]])
function StudentT:__init(df, loc, scale, validate_args)
  self.df, self.loc, self.scale = broadcast_all(df, loc or 0, scale or 1)
  Distribution.__init(self, self.df:size(), {}, validate_args)
end
function StudentT:_get_mean()
  return flow.where(self.df:gt(1), self.loc, flow.full({}, 0 / 0, {dtype = self.loc.dtype}))
end
function StudentT:_get_mode() return self.loc end
function StudentT:_get_variance()
  local df = self.df
  local v = self.scale ^ 2 * df / (df - 2)
  v = flow.where(df:le(2), flow.full({}, math.huge, {dtype = v.dtype}), v)
  return flow.where(df:le(1), flow.full({}, 0 / 0, {dtype = v.dtype}), v)
end
StudentT.has_rsample = true
function StudentT:rsample(sample_shape)
  local shape = self:_extended_shape(sample_shape)
  local z = flow.randn(shape, {dtype = self.loc.dtype})
  local chi2 = rstandard_gamma((self.df * 0.5):expand(shape)) * 2
  return self.loc + self.scale * z * (chi2 / self.df):rsqrt()
end
function StudentT:log_prob(value)
  self:_validate_sample(value)
  local df = self.df
  local y = (value - self.loc) / self.scale
  local z = self.scale:log() + df:log() * 0.5 + 0.5 * math.log(math.pi)
    + S.gammaln(df * 0.5) - S.gammaln((df + 1) * 0.5)
  return -((df + 1) * 0.5) * (y ^ 2 / df):log1p() - z
end
function StudentT:entropy()
  local df = self.df
  local lbeta = S.gammaln(df * 0.5) + S.gammaln(flow.full({}, 0.5, {dtype = df.dtype}))
    - S.gammaln((df + 1) * 0.5)
  return self.scale:log() + (df + 1) * 0.5 * (S.digamma((df + 1) * 0.5) - S.digamma(df * 0.5))
    + df:log() * 0.5 + lbeta
end

------------------------------------------------------------------ counts
-- Poisson(rate) draws: the multiplication method for rate < 10 (a loop over
-- the count, every element at once), Hormann's transformed rejection (PTRS,
-- as NumPy) for rate >= 10.
local function poisson_draw(rate)
  return flow.no_grad(function()
    local shape = rate:size():totable()
    local out = flow.zeros_like(rate)
    local small = rate:lt(10)
    if small:any():item() then
      local lim = (-flow.where(small, rate, flow.zeros({}, {dtype = rate.dtype}))):exp()
      local prod = uniform_like(shape, rate)
      local k = flow.zeros_like(rate)
      local go = small:logical_and(prod:gt(lim))
      for _ = 1, 200 do
        if not go:any():item() then break end
        k = k + go:to(rate.dtype)
        prod = flow.where(go, prod * uniform_like(shape, rate), prod)
        go = go:logical_and(prod:gt(lim))
      end
      out = flow.where(small, k, out)
    end
    local big = small:logical_not()
    if big:any():item() then
      local lam = flow.where(big, rate, flow.full({}, 10, {dtype = rate.dtype}))
      local slam, loglam = lam:sqrt(), lam:log()
      local b = slam * 2.53 + 0.931
      local a = b * 0.02483 - 0.059
      local invalpha = (b - 3.4):reciprocal() * 1.1328 + 1.1239
      local vr = 0.9277 - (b - 2):reciprocal() * 3.6224
      local redraw = big
      for _ = 1, 200 do
        if not redraw:any():item() then break end
        local U = uniform_like(shape, rate) - 0.5
        local V = uniform_like(shape, rate)
        local us = 0.5 - U:abs()
        local k = ((a * 2 / us + b) * U + lam + 0.43):floor()
        local quick = us:ge(0.07):logical_and(V:le(vr))
        local bad = k:lt(0):logical_or(us:lt(0.013):logical_and(V:gt(us)))
        local ks = k:clamp(0)
        local slow = (V:log() + invalpha:log() - (a / (us * us) + b):log())
          :le(-lam + ks * loglam - S.gammaln(ks + 1))
        local ok = redraw:logical_and(quick:logical_or(bad:logical_not():logical_and(slow)))
        out = flow.where(ok, k, out)
        redraw = redraw:logical_and(ok:logical_not())
      end
      if redraw:any():item() then fail('Poisson: the sampler did not converge') end
    end
    return out
  end)
end

local Poisson = family('Poisson', {{'rate', constraints.nonnegative}}, constraints.nonnegative_integer, false)
function Poisson:_get_mean() return self.rate end
function Poisson:_get_mode() return self.rate:floor() end
function Poisson:_get_variance() return self.rate end
function Poisson:sample(sample_shape) return poisson_draw(self.rate:expand(self:_extended_shape(sample_shape))) end
function Poisson:log_prob(value)
  self:_validate_sample(value)
  local r, v = unpack(flow.broadcast_tensors(self.rate, value:to(self.rate.dtype)))
  return flow.xlogy(v, r) - r - S.gammaln(v + 1)
end

local MAX_TRIALS = 100000
local Binomial = Distribution:subclass('Binomial')
M.Binomial = Binomial
--- Binomial(total_count, probs[, logits[, validate_args]])
function Binomial:__init(total_count, probs, logits, validate_args)
  if type(total_count) == 'table' and not is_tensor(total_count) then
    local o = total_count
    total_count, probs, logits, validate_args = o.total_count, o.probs, o.logits, o.validate_args
  end
  probs_or_logits('Binomial', probs, logits)
  if probs ~= nil then
    self.total_count, self.probs = broadcast_all(total_count or 1, probs)
    self.arg_constraints = {total_count = constraints.nonnegative_integer, probs = constraints.unit_interval}
  else
    self.total_count, self.logits = broadcast_all(total_count or 1, logits)
    self.arg_constraints = {total_count = constraints.nonnegative_integer, logits = constraints.real}
  end
  Distribution.__init(self, self.total_count:size(), {}, validate_args)
end
Binomial._get_probs = Bernoulli._get_probs
Binomial._get_logits = Bernoulli._get_logits
function Binomial:_get_support() return constraints.integer_interval(0, self.total_count) end
function Binomial:_get_mean() return self.total_count * self.probs end
function Binomial:_get_variance() return self.total_count * self.probs * (1 - self.probs) end
--- sample: a sum of Bernoulli draws (total_count up to 100000).
function Binomial:sample(sample_shape)
  local shape = self:_extended_shape(sample_shape)
  local n = self.total_count:max():item()
  if n > MAX_TRIALS then
    fail(('Binomial: sample draws one Bernoulli per trial; total_count %d exceeds %d'):format(n, MAX_TRIALS))
  end
  return flow.no_grad(function()
    local full = concat(shape, {n})
    local p = self.probs:expand(shape):unsqueeze(-1):expand(full)
    local trial = flow.arange(1, n + 1, {dtype = p.dtype})
    local live = trial:le(self.total_count:expand(shape):unsqueeze(-1)):to(p.dtype)
    return (flow.bernoulli(p) * live):sum(-1)
  end)
end
function Binomial:log_prob(value)
  self:_validate_sample(value)
  local n, l = self.total_count, self.logits
  local v = value:to(l.dtype)
  local lfact = S.gammaln(n + 1) - S.gammaln(v + 1) - S.gammaln(n - v + 1)
  -- v * l - n * log1p(exp(l)), stable in both tails (PyTorch's form)
  local norm = n * l:clamp(0) + n * (-l:abs()):exp():log1p()
  return lfact + v * l - norm
end

local Multinomial = Distribution:subclass('Multinomial')
M.Multinomial = Multinomial
Multinomial._param_event_dims = {1}
--- Multinomial(total_count, probs[, logits[, validate_args]]): counts over
-- the last dim (total_count an integer, the same for every batch element).
function Multinomial:__init(total_count, probs, logits, validate_args)
  if type(total_count) ~= 'number' or total_count < 0 or total_count ~= math.floor(total_count) then
    fail('Multinomial: total_count must be a non-negative integer, got ' .. tostring(total_count))
  end
  self.total_count = total_count
  self._categorical = Categorical(probs, logits, validate_args)
  self.arg_constraints = {}
  Distribution.__init(self, self._categorical.batch_shape, {self._categorical._num_events}, validate_args)
end
function Multinomial:_get_probs() return self._categorical.probs end
function Multinomial:_get_logits() return self._categorical.logits end
function Multinomial:_get_support()
  local n = self.total_count
  return constraints.independent(constraints.integer_interval(0, n), 1)
end
function Multinomial:_get_mean() return self.probs * self.total_count end
function Multinomial:_get_variance() return self.probs * (1 - self.probs) * self.total_count end
function Multinomial:sample(sample_shape)
  local ss = size_list(sample_shape)
  local k = self._categorical._num_events
  local idx = self._categorical:sample(concat({self.total_count}, ss))   -- [n, sample..., batch...]
  local counts = flow.nn.functional.one_hot(idx, k):to(self.probs.dtype):sum(1)
  return counts
end
function Multinomial:log_prob(value)
  self:_validate_sample(value)
  local v = value:to(self.logits.dtype)
  local logits = self.logits
  local t = flow.where(v:eq(0), flow.zeros({}, {dtype = v.dtype}), v * logits)
  return S.gammaln(v:sum(-1) + 1) - S.gammaln(v + 1):sum(-1) + t:sum(-1)
end

------------------------------------------------------------------ MultivariateNormal
local MultivariateNormal = Distribution:subclass('MultivariateNormal')
M.MultivariateNormal = MultivariateNormal
MultivariateNormal.support = constraints.real_vector
MultivariateNormal.has_rsample = true
--- MultivariateNormal(loc, {covariance_matrix = | precision_matrix = | scale_tril =}[, validate_args])
-- (also positionally: MultivariateNormal(loc, covariance_matrix))
function MultivariateNormal:__init(loc, opts, validate_args)
  if is_tensor(opts) then opts = {covariance_matrix = opts} end
  opts = A.check_options('MultivariateNormal', opts,
    {covariance_matrix = true, precision_matrix = true, scale_tril = true, validate_args = true})
  local n = (opts.covariance_matrix and 1 or 0) + (opts.precision_matrix and 1 or 0)
    + (opts.scale_tril and 1 or 0)
  if n ~= 1 then
    fail('MultivariateNormal: exactly one of covariance_matrix, precision_matrix or scale_tril must be given')
  end
  if validate_args == nil then validate_args = opts.validate_args end
  loc = broadcast_all(loc)
  if loc:dim() < 1 then fail('MultivariateNormal: loc must be at least one-dimensional') end
  local L
  if opts.scale_tril then L = opts.scale_tril
  elseif opts.covariance_matrix then L = flow.linalg.cholesky(opts.covariance_matrix)
  else L = flow.linalg.cholesky(flow.linalg.inv(opts.precision_matrix)) end
  local k = loc:size(-1)
  if L:dim() < 2 or L:size(-1) ~= k or L:size(-2) ~= k then
    fail(('MultivariateNormal: the matrix must be [..., %d, %d] for loc %s, got %s'):format(
      k, k, A.shape_str(loc), A.shape_str(L)))
  end
  -- broadcast the batch dims of loc and the matrix
  local lb = loc:unsqueeze(-1)
  local bl = flow.broadcast_tensors(lb, L:narrow(-1, 1, 1))[1]
  local bshape = bl:size():totable()
  bshape[#bshape] = nil
  bshape[#bshape] = nil
  self.loc = loc:expand(concat(bshape, {k}))
  self._unbroadcasted_scale_tril = L
  self.scale_tril = L:expand(concat(bshape, {k, k}))
  self.arg_constraints = {loc = constraints.real_vector}
  Distribution.__init(self, bshape, {k}, validate_args)
end
function MultivariateNormal:_get_covariance_matrix()
  return self.scale_tril:matmul(self.scale_tril:transpose(-1, -2))
end
function MultivariateNormal:_get_precision_matrix() return flow.linalg.inv(self.covariance_matrix) end
function MultivariateNormal:_get_mean() return self.loc end
function MultivariateNormal:_get_mode() return self.loc end
function MultivariateNormal:_get_variance() return (self.scale_tril ^ 2):sum(-1) end
function MultivariateNormal:rsample(sample_shape)
  local shape = self:_extended_shape(sample_shape)
  local eps = flow.randn(shape, {dtype = self.loc.dtype})
  return self.loc + self.scale_tril:matmul(eps:unsqueeze(-1)):squeeze(-1)
end
-- ||L^-1 x||^2 over the last dim, L broadcast to x's batch dims
local function mahalanobis(L, x)
  local k = x:size(-1)
  local xb, Lb = x:unsqueeze(-1), L
  local shape = flow.broadcast_tensors(xb:narrow(-2, 1, 1), Lb:narrow(-2, 1, 1):narrow(-1, 1, 1))[1]
    :size():totable()
  shape[#shape - 1], shape[#shape] = k, 1
  local lshape = concat(shape, {})
  lshape[#lshape] = k
  local y = flow.linalg.solve(Lb:expand(lshape), xb:expand(shape))
  return (y ^ 2):sum(-2):squeeze(-1)
end
local function half_log_det(L) return L:diagonal(0, -2, -1):log():sum(-1) end
function MultivariateNormal:log_prob(value)
  self:_validate_sample(value)
  local k = self.loc:size(-1)
  local m = mahalanobis(self.scale_tril, value - self.loc)
  return -(m + k * math.log(2 * math.pi)) * 0.5 - half_log_det(self.scale_tril)
end
function MultivariateNormal:entropy()
  local k = self.loc:size(-1)
  return half_log_det(self.scale_tril) + 0.5 * k * (1 + math.log(2 * math.pi))
end

local transforms = require 'oneflow.distributions.transforms'
------------------------------------------------------------------ LowRankMultivariateNormal
local function mT(x) return x:transpose(-2, -1) end
local function diag_embed(d) return d:unsqueeze(-1) * flow.eye(d:size(-1), {dtype = d.dtype, device = d.device}) end
local function batch_mv(Mx, v) return Mx:matmul(v:unsqueeze(-1)):squeeze(-1) end
local function shape_of(x, drop, extra)
  local s = x:size():totable()
  for _ = 1, drop do s[#s] = nil end
  return concat(s, extra or {})
end

local LowRankMVN = Distribution:subclass('LowRankMultivariateNormal')
M.LowRankMultivariateNormal = LowRankMVN
LowRankMVN.arg_constraints = {loc = constraints.real_vector,
  cov_factor = constraints.independent(constraints.real, 2),
  cov_diag = constraints.independent(constraints.positive, 1)}
LowRankMVN.support = constraints.real_vector
LowRankMVN.has_rsample = true
-- the Cholesky factor of the capacitance I + W^T D^-1 W
local function capacitance_tril(W, D)
  local K = (mT(W) / D:unsqueeze(-2)):matmul(W)
  return flow.linalg.cholesky(K + flow.eye(W:size(-1), {dtype = W.dtype, device = W.device}))
end
--- LowRankMultivariateNormal(loc, cov_factor, cov_diag[, validate_args]): the
-- normal law with covariance cov_factor cov_factor^T + diag(cov_diag);
-- loc (..., k), cov_factor (..., k, m), cov_diag (..., k), batch dims broadcast.
function LowRankMVN:__init(loc, cov_factor, cov_diag, validate_args)
  for i, v in ipairs({loc, cov_factor, cov_diag}) do
    if not is_tensor(v) then
      fail(('LowRankMultivariateNormal: %s must be a tensor, got %s'):format(
        ({'loc', 'cov_factor', 'cov_diag'})[i], type(v)))
    end
  end
  if loc:dim() < 1 then fail('LowRankMultivariateNormal: loc must be at least one-dimensional') end
  local k = loc:size(-1)
  if cov_factor:dim() < 2 or cov_factor:size(-2) ~= k then
    fail(('LowRankMultivariateNormal: cov_factor must be a batch of matrices with shape %d x m (loc %s), got %s')
      :format(k, A.shape_str(loc), A.shape_str(cov_factor)))
  end
  if cov_diag:dim() < 1 or cov_diag:size(-1) ~= k then
    fail(('LowRankMultivariateNormal: cov_diag must be a batch of vectors with shape [%d], got %s'):format(
      k, A.shape_str(cov_diag)))
  end
  local ok, res = pcall(flow.broadcast_tensors, loc:unsqueeze(-1), cov_factor, cov_diag:unsqueeze(-1))
  if not ok then
    fail(('LowRankMultivariateNormal: incompatible batch shapes: loc %s, cov_factor %s, cov_diag %s'):format(
      A.shape_str(loc), A.shape_str(cov_factor), A.shape_str(cov_diag)))
  end
  self.loc, self.cov_factor, self.cov_diag = res[1]:select(-1, 1), res[2], res[3]:select(-1, 1)
  self._W, self._D = cov_factor, cov_diag
  Distribution.__init(self, shape_of(self.loc, 1), {k}, validate_args)   -- validates first
  self._capacitance_tril = capacitance_tril(cov_factor, cov_diag)
end
function LowRankMVN:expand(batch_shape)
  local new = setmetatable({}, getmetatable(self))
  for key, v in pairs(self) do new[key] = v end
  local b = size_list(batch_shape)
  local k, m = self.loc:size(-1), self.cov_factor:size(-1)
  new.loc, new.cov_diag = self.loc:expand(concat(b, {k})), self.cov_diag:expand(concat(b, {k}))
  new.cov_factor = self.cov_factor:expand(concat(b, {k, m}))
  new.batch_shape = flow.Size(b)
  return new
end
function LowRankMVN:_full() return concat(self.batch_shape:totable(), self.event_shape:totable()) end
function LowRankMVN:_get_mean() return self.loc end
function LowRankMVN:_get_mode() return self.loc end
function LowRankMVN:_get_variance() return ((self._W ^ 2):sum(-1) + self._D):expand(self:_full()) end
function LowRankMVN:_get_scale_tril()
  local dsq = self._D:sqrt():unsqueeze(-1)
  local W = self._W / dsq
  local K = W:matmul(mT(W)) + flow.eye(self._W:size(-2), {dtype = W.dtype, device = W.device})
  local k = self.event_shape[1]
  return (dsq * flow.linalg.cholesky(K)):expand(concat(self:_full(), {k}))
end
function LowRankMVN:_get_covariance_matrix()
  local k = self.event_shape[1]
  return (self._W:matmul(mT(self._W)) + diag_embed(self._D)):expand(concat(self:_full(), {k}))
end
function LowRankMVN:_get_precision_matrix()
  local WtDinv = mT(self._W) / self._D:unsqueeze(-2)
  local Am = flow.linalg.solve_triangular(self._capacitance_tril, WtDinv, {upper = false})
  local k = self.event_shape[1]
  return (diag_embed(self._D:reciprocal()) - mT(Am):matmul(Am)):expand(concat(self:_full(), {k}))
end
function LowRankMVN:rsample(sample_shape)
  local shape = self:_extended_shape(sample_shape)
  local wshape = concat(shape, {})
  wshape[#wshape] = self.cov_factor:size(-1)
  local o = {dtype = self.loc.dtype, device = self.loc.device}
  local eps_W, eps_D = flow.randn(wshape, o), flow.randn(shape, o)
  return self.loc + batch_mv(self._W, eps_W) + self._D:sqrt() * eps_D
end
local function lowrank_logdet(D, C)
  return C:diagonal(0, -2, -1):log():sum(-1) * 2 + D:log():sum(-1)
end
function LowRankMVN:log_prob(value)
  self:_validate_sample(value)
  local diff = value - self.loc
  local WtDinv = mT(self._W) / self._D:unsqueeze(-2)
  local m = (diff ^ 2 / self._D):sum(-1) - mahalanobis(self._capacitance_tril, batch_mv(WtDinv, diff))
  local logdet = lowrank_logdet(self._D, self._capacitance_tril)
  return (m + logdet + self.event_shape[1] * math.log(2 * math.pi)) * -0.5
end
function LowRankMVN:entropy()
  local logdet = lowrank_logdet(self._D, self._capacitance_tril)
  local H = (logdet + self.event_shape[1] * (1 + math.log(2 * math.pi))) * 0.5
  return H:expand(self.batch_shape:totable())
end

------------------------------------------------------------------ Wishart
local LOG2 = math.log(2)
local Wishart = Distribution:subclass('Wishart')
M.Wishart = Wishart
Wishart.support = constraints.positive_definite
Wishart.has_rsample = true
local MATRIX_PARAMS = {covariance_matrix = constraints.positive_definite,
  precision_matrix = constraints.positive_definite, scale_tril = constraints.lower_cholesky}
--- Wishart(df, {covariance_matrix = | precision_matrix = | scale_tril =}[, validate_args])
-- (also Wishart(df, covariance_matrix)): df > p - 1, a number or a tensor
-- broadcasting with the matrix's batch dims.
function Wishart:__init(df, opts, validate_args)
  if is_tensor(opts) then opts = {covariance_matrix = opts} end
  opts = A.check_options('Wishart', opts,
    {covariance_matrix = true, precision_matrix = true, scale_tril = true, validate_args = true})
  if validate_args == nil then validate_args = opts.validate_args end
  local given, n = nil, 0
  for name in pairs(MATRIX_PARAMS) do if opts[name] ~= nil then given, n = name, n + 1 end end
  if n ~= 1 then
    fail('Wishart: exactly one of covariance_matrix, precision_matrix or scale_tril must be given')
  end
  local param = opts[given]
  if not is_tensor(param) then fail(('Wishart: %s must be a tensor, got %s'):format(given, type(param))) end
  if param:dim() < 2 or param:size(-1) ~= param:size(-2) then
    fail(('Wishart: %s must be a batch of square matrices (at least 2 dims), got %s'):format(
      given, A.shape_str(param)))
  end
  local p = param:size(-1)
  local bshape = shape_of(param, 2)
  if is_tensor(df) then
    local ok, r = pcall(flow.broadcast_tensors, df, param:narrow(-1, 1, 1):narrow(-2, 1, 1):squeeze(-1):squeeze(-1))
    if not ok then
      fail(('Wishart: df of shape %s does not broadcast with the batch shape %s of %s'):format(
        A.shape_str(df), A.shape_str(bshape), given))
    end
    bshape = r[1]:size():totable()
    self.df = df:to(param.dtype):expand(bshape)
  elseif type(df) == 'number' then
    self.df = flow.full(bshape, df, {dtype = param.dtype, device = param.device})
  else
    fail('Wishart: df must be a number or a tensor, got ' .. type(df))
  end
  if self.df:le(p - 1):any():item() then
    fail(('Wishart: value of df = %s expected to be greater than ndim - 1 = %d'):format(
      is_tensor(df) and A.shape_str(df) .. ' tensor' or tostring(df), p - 1))
  end
  self[given] = param:expand(concat(bshape, {p, p}))
  self.arg_constraints = {df = constraints.greater_than(p - 1), [given] = MATRIX_PARAMS[given]}
  Distribution.__init(self, bshape, {p, p}, validate_args)   -- validates first
  if given == 'scale_tril' then self._L = param
  elseif given == 'covariance_matrix' then self._L = flow.linalg.cholesky(param)
  else self._L = flow.linalg.cholesky(flow.linalg.inv(param)) end
end
function Wishart:expand(batch_shape)
  local new = setmetatable({}, getmetatable(self))
  local b = size_list(batch_shape)
  local p = self.event_shape[1]
  new.df, new._L, new._validate_args = self.df:expand(b), self._L, self._validate_args
  new.arg_constraints = self.arg_constraints
  for name in pairs(MATRIX_PARAMS) do
    local v = rawget(self, name)
    if v ~= nil then new[name] = v:expand(concat(b, {p, p})) end
  end
  new.batch_shape, new.event_shape = flow.Size(b), self.event_shape
  return new
end
function Wishart:_full() return concat(self.batch_shape:totable(), self.event_shape:totable()) end
function Wishart:_get_scale_tril() return self._L:expand(self:_full()) end
function Wishart:_get_covariance_matrix() return self._L:matmul(mT(self._L)):expand(self:_full()) end
function Wishart:_get_precision_matrix()
  return flow.linalg.inv(self._L:matmul(mT(self._L))):expand(self:_full())
end
local function df_mat(self) return self.df:unsqueeze(-1):unsqueeze(-1) end
function Wishart:_get_mean() return df_mat(self) * self.covariance_matrix end
function Wishart:_get_mode()
  local factor = self.df - self.event_shape[1] - 1
  factor = flow.where(factor:le(0), flow.full_like(factor, 0 / 0), factor)
  return factor:unsqueeze(-1):unsqueeze(-1) * self.covariance_matrix
end
function Wishart:_get_variance()
  local V = self.covariance_matrix
  local d = V:diagonal(0, -2, -1)
  return df_mat(self) * (V ^ 2 + d:unsqueeze(-1) * d:unsqueeze(-2))
end
-- Bartlett: L A, A lower with sqrt(chi2(df - i + 1)) on the diagonal and
-- standard normals below it
function Wishart:_bartlett(sample_shape)
  local p = self.event_shape[1]
  local o = {dtype = self.df.dtype, device = self.df.device}
  local chi2 = M.Chi2(self.df:unsqueeze(-1) - flow.arange(0, p, o), false)
  local eps = self.df.dtype == flow.float64 and 2.220446049250313e-16 or 1.1920928955078125e-07
  local noise = diag_embed(chi2:rsample(sample_shape):sqrt():clamp(eps))
  local shape = concat(size_list(sample_shape), self.batch_shape:totable())
  if p > 1 then
    noise = noise + transforms._vec_to_tril_matrix(flow.randn(concat(shape, {p * (p - 1) / 2}), o), -1)
  end
  local chol = self._L:matmul(noise)
  return chol:matmul(mT(chol))
end
--- rsample(sample_shape, {max_try_correction = 10}): Bartlett's
-- decomposition; samples that are not positive-definite are drawn again
-- (up to max_try_correction times), as torch.
function Wishart:rsample(sample_shape, opts)
  opts = A.check_options('Wishart.rsample', opts, {max_try_correction = true})
  local tries = opts.max_try_correction or 10
  local sample = self:_bartlett(sample_shape)
  local ev = #self.event_shape:totable()
  local function singular(x)
    local bad = constraints.positive_definite:check(x):logical_not()
    return bad
  end
  local bad = singular(sample)
  local t = 0
  while t < tries and bad:any():item() do
    local new = self:_bartlett(sample_shape)
    local mask = bad
    for _ = 1, ev do mask = mask:unsqueeze(-1) end
    sample = flow.where(mask, new, sample)
    bad = singular(sample)
    t = t + 1
  end
  return sample
end
local function mvdigamma(x, p)
  return S.digamma(x:unsqueeze(-1) - flow.arange(0, p, {dtype = x.dtype, device = x.device}) / 2):sum(-1)
end
function Wishart:log_prob(value)
  self:_validate_sample(value)
  local nu, p = self.df, self.event_shape[1]
  local logdiag = self._L:diagonal(0, -2, -1):log():sum(-1)
  local _, logabsdet = flow.linalg.slogdet(value)
  local cov = self._L:matmul(mT(self._L))
  local full = flow.broadcast_tensors(cov, value)
  local tr = flow.linalg.solve(full[1], full[2]):diagonal(0, -2, -1):sum(-1)
  return -nu * (logdiag + p * LOG2 / 2) - S.multigammaln(nu / 2, p) + (nu - p - 1) / 2 * logabsdet - tr / 2
end
function Wishart:entropy()
  local nu, p = self.df, self.event_shape[1]
  local logdiag = self._L:diagonal(0, -2, -1):log():sum(-1)
  return (logdiag + p * LOG2 / 2) * (p + 1) + S.multigammaln(nu / 2, p)
    - (nu - p - 1) / 2 * mvdigamma(nu / 2, p) + nu * p / 2
end

------------------------------------------------------------------ LKJCholesky
local LKJCholesky = Distribution:subclass('LKJCholesky')
M.LKJCholesky = LKJCholesky
LKJCholesky.arg_constraints = {concentration = constraints.positive}
LKJCholesky.support = constraints.corr_cholesky
--- LKJCholesky(dim, concentration = 1[, validate_args]): Cholesky factors L
-- of dim x dim correlation matrices with density of L L^T proportional to
-- det^(concentration - 1); sampled by the onion method (torch's).
function LKJCholesky:__init(dim, concentration, validate_args)
  if type(dim) ~= 'number' or dim % 1 ~= 0 or dim < 2 then
    fail(('LKJCholesky: expected dim to be an integer greater than or equal to 2, found dim = %s'):format(
      tostring(dim)))
  end
  self.dim = dim
  self.concentration = broadcast_all(concentration == nil and 1 or concentration)
  local c = self.concentration
  local o = {dtype = c.dtype, device = c.device}
  local offset = flow.cat({flow.zeros(1, o), flow.arange(0, dim - 1, o)})
  local marginal = c + 0.5 * (dim - 2)
  self._beta = M.Beta(offset + 0.5, marginal:unsqueeze(-1) - offset * 0.5, false)
  Distribution.__init(self, c:size(), {dim, dim}, validate_args)
end
function LKJCholesky:expand(batch_shape)
  local new = setmetatable({}, getmetatable(self))
  for k, v in pairs(self) do new[k] = v end
  local b = size_list(batch_shape)
  new.concentration = self.concentration:expand(b)
  new._beta = self._beta:expand(concat(b, {self.dim}))
  new.batch_shape = flow.Size(b)
  return new
end
function LKJCholesky:sample(sample_shape)
  return flow.no_grad(function()
    local y = self._beta:sample(sample_shape):unsqueeze(-1)
    local shape = self:_extended_shape(sample_shape)
    local u = flow.randn(shape, {dtype = y.dtype, device = y.device}):tril(-1)
    local tiny = y.dtype == flow.float64 and 2.2250738585072014e-308 or 1.1754943508222875e-38
    -- row 1 is all zeros: divided by a tiny norm it stays 0 (torch fills it with 0)
    local hyper = u / u:norm(2, -1, true):clamp(tiny)
    local w = y:sqrt() * hyper
    local diag = (1 - (w ^ 2):sum(-1)):clamp(tiny):sqrt()
    return w + diag_embed(diag)
  end)
end
function LKJCholesky:log_prob(value)
  self:_validate_sample(value)
  local dim, c = self.dim, self.concentration
  local d = value:diagonal(0, -2, -1):narrow(-1, 2, dim - 1)
  local order = flow.arange(2, dim + 1, {dtype = c.dtype, device = c.device})
  order = (c - 1):unsqueeze(-1) * 2 + dim - order
  local unnormalized = (order * d:log()):sum(-1)
  local dm1 = dim - 1
  local alpha = c + 0.5 * dm1
  local normalize = 0.5 * dm1 * math.log(math.pi) + S.multigammaln(alpha - 0.5, dm1) - flow.lgamma(alpha) * dm1
  return unnormalized - normalize
end

------------------------------------------------------------------ TransformedDistribution
for k, v in pairs(transforms) do if k:sub(1, 1) ~= '_' then M[k] = v end end
M.transforms = transforms

local TransformedDistribution = Distribution:subclass('TransformedDistribution')
M.TransformedDistribution = TransformedDistribution
--- TransformedDistribution(base, transforms[, validate_args]): the law of
-- t_n(...t_1(x)) for x ~ base (transforms a transform or a list).
function TransformedDistribution:__init(base, ts, validate_args)
  check_dist('TransformedDistribution', base, 1, 'base_distribution')
  A.arg('TransformedDistribution', 2, 'transforms', ts, 'table|nil')
  if type(ts) == 'table' and ts.forward then ts = {ts} end
  self.base_dist, self.transforms = base, ts or {}
  self.has_rsample = base.has_rsample
  self.arg_constraints = {}
  local ev = #base.event_shape:totable()
  for _, t in ipairs(self.transforms) do ev = math.max(ev, t.event_dim) end
  self._event_dim = ev
  local shape = concat(base.batch_shape:totable(), base.event_shape:totable())
  local cut = #shape - ev
  local b, e = {}, {}
  for i = 1, #shape do if i <= cut then b[#b + 1] = shape[i] else e[#e + 1] = shape[i] end end
  Distribution.__init(self, b, e, validate_args)
end
function TransformedDistribution:_get_support()
  local t = self.transforms[#self.transforms]
  return t and t.codomain or self.base_dist.support
end
function TransformedDistribution:sample(sample_shape)
  local x = self.base_dist:sample(sample_shape)
  for _, t in ipairs(self.transforms) do x = t:forward(x) end
  return x
end
function TransformedDistribution:rsample(sample_shape)
  local x = self.base_dist:rsample(sample_shape)
  for _, t in ipairs(self.transforms) do x = t:forward(x) end
  return x
end
function TransformedDistribution:log_prob(value)
  self:_validate_sample(value)
  local lp, y = 0, value
  local ev = self._event_dim
  for i = #self.transforms, 1, -1 do
    local t = self.transforms[i]
    local x = t:inverse(y)
    lp = lp - transforms._sum_rightmost(t:log_abs_det_jacobian(x, y), ev - t.event_dim)
    y = x
  end
  local base_ev = #self.base_dist.event_shape:totable()
  return lp + transforms._sum_rightmost(self.base_dist:log_prob(y), ev - base_ev)
end
-- monotone increasing maps only (sign +1 for every transform)
local function monotone(self)
  local s = 1
  for _, t in ipairs(self.transforms) do
    if t.sign == nil then fail(self.__name .. ': cdf/icdf need transforms with a known sign') end
    s = s * t.sign
  end
  return s
end
function TransformedDistribution:cdf(value)
  local s = monotone(self)
  for i = #self.transforms, 1, -1 do value = self.transforms[i]:inverse(value) end
  local c = self.base_dist:cdf(value)
  return s > 0 and c or 1 - c
end
function TransformedDistribution:icdf(p)
  local s = monotone(self)
  local x = self.base_dist:icdf(s > 0 and p or 1 - p)
  for _, t in ipairs(self.transforms) do x = t:forward(x) end
  return x
end

------------------------------------------------------------------ relaxed
local LogitRelaxedBernoulli = Distribution:subclass('LogitRelaxedBernoulli')
M.LogitRelaxedBernoulli = LogitRelaxedBernoulli
LogitRelaxedBernoulli.support = constraints.real
LogitRelaxedBernoulli.has_rsample = true
--- LogitRelaxedBernoulli(temperature, probs[, logits[, validate_args]])
function LogitRelaxedBernoulli:__init(temperature, probs, logits, validate_args)
  self.temperature = broadcast_all(temperature)
  init_binary(self, 'LogitRelaxedBernoulli', probs, logits, validate_args, constraints.unit_interval)
end
LogitRelaxedBernoulli._get_probs = Bernoulli._get_probs
LogitRelaxedBernoulli._get_logits = Bernoulli._get_logits
function LogitRelaxedBernoulli:rsample(sample_shape)
  local shape = self:_extended_shape(sample_shape)
  local l = self.logits:expand(shape)
  local u = uniform_like(shape, l):clamp(1e-12, 1 - 1e-12)
  return (l + u:log() - (-u):log1p()) / self.temperature
end
function LogitRelaxedBernoulli:log_prob(value)
  self:_validate_sample(value)
  local diff = self.logits - value * self.temperature
  return self.temperature:log() + diff - flow.nn.functional.softplus(diff) * 2
end

local RelaxedBernoulli = TransformedDistribution:subclass('RelaxedBernoulli')
M.RelaxedBernoulli = RelaxedBernoulli
--- RelaxedBernoulli(temperature, probs[, logits[, validate_args]]): values in (0, 1),
-- reparameterised (Concrete / Gumbel-softmax for two classes).
function RelaxedBernoulli:__init(temperature, probs, logits, validate_args)
  local base = LogitRelaxedBernoulli(temperature, probs, logits, validate_args)
  TransformedDistribution.__init(self, base, {transforms.SigmoidTransform()}, validate_args)
  self.temperature = base.temperature
end
function RelaxedBernoulli:_get_probs() return self.base_dist.probs end
function RelaxedBernoulli:_get_logits() return self.base_dist.logits end

local ExpRelaxedCategorical = Distribution:subclass('ExpRelaxedCategorical')
--- ExpRelaxedCategorical(temperature, probs[, logits]): the log of a RelaxedOneHotCategorical sample.
-- @function distributions.ExpRelaxedCategorical
M.ExpRelaxedCategorical = ExpRelaxedCategorical
ExpRelaxedCategorical.support = constraints.real_vector
ExpRelaxedCategorical.has_rsample = true
ExpRelaxedCategorical._param_event_dims = {1}
function ExpRelaxedCategorical:__init(temperature, probs, logits, validate_args)
  self._categorical = Categorical(probs, logits, validate_args)
  self.temperature = broadcast_all(temperature)
  self.arg_constraints = {}
  Distribution.__init(self, self._categorical.batch_shape, {self._categorical._num_events}, validate_args)
end
function ExpRelaxedCategorical:_get_probs() return self._categorical.probs end
function ExpRelaxedCategorical:_get_logits() return self._categorical.logits end
function ExpRelaxedCategorical:rsample(sample_shape)
  local shape = self:_extended_shape(sample_shape)
  local u = uniform_like(shape, self.logits):clamp(1e-12, 1 - 1e-12)
  local scores = (self.logits - (-u:log()):log()) / self.temperature
  return scores - scores:logsumexp(-1, {keepdim = true})
end
function ExpRelaxedCategorical:log_prob(value)
  local k = self._categorical._num_events
  local log_scale = S.gammaln(flow.full({}, k, {dtype = self.logits.dtype})) + self.temperature:log() * (k - 1)
  local score = self.logits - value * self.temperature
  score = (score - score:logsumexp(-1, {keepdim = true})):sum(-1)
  return score + log_scale
end

local RelaxedOneHotCategorical = TransformedDistribution:subclass('RelaxedOneHotCategorical')
M.RelaxedOneHotCategorical = RelaxedOneHotCategorical
--- RelaxedOneHotCategorical(temperature, probs[, logits[, validate_args]]):
-- points of the simplex, reparameterised (Gumbel-softmax).
function RelaxedOneHotCategorical:__init(temperature, probs, logits, validate_args)
  local base = ExpRelaxedCategorical(temperature, probs, logits, validate_args)
  TransformedDistribution.__init(self, base, {transforms.ExpTransform()}, validate_args)
  self.temperature = base.temperature
end
function RelaxedOneHotCategorical._get_support() return constraints.simplex end
function RelaxedOneHotCategorical:_get_probs() return self.base_dist.probs end
function RelaxedOneHotCategorical:_get_logits() return self.base_dist.logits end

------------------------------------------------------------------ MixtureSameFamily
local MixtureSameFamily = Distribution:subclass('MixtureSameFamily')
M.MixtureSameFamily = MixtureSameFamily
--- MixtureSameFamily(mixture (a Categorical over K), components (batch [..., K]))
function MixtureSameFamily:__init(mixture, components, validate_args)
  if getmetatable(mixture) ~= Categorical then
    fail('MixtureSameFamily: the mixture distribution must be a Categorical')
  end
  local cb = components.batch_shape:totable()
  local k = mixture._num_events
  if cb[#cb] ~= k then
    fail(('MixtureSameFamily: the components\' last batch dim (%s) must equal the number of mixture '
          .. 'categories (%d)'):format(tostring(cb[#cb]), k))
  end
  self.mixture_distribution, self.component_distribution = mixture, components
  self.arg_constraints = {}
  self._k = k
  local b = {}
  for i = 1, #cb - 1 do b[i] = cb[i] end
  Distribution.__init(self, b, components.event_shape, validate_args)
  self.has_rsample = false
end
function MixtureSameFamily:_get_support() return self.component_distribution.support end
-- mixture probabilities shaped to broadcast against component quantities [..., K, event...]
local function mix_weights(x, ev)
  for _ = 1, ev do x = x:unsqueeze(-1) end
  return x
end
function MixtureSameFamily:_get_mean()
  local ev = #self.event_shape:totable()
  return (mix_weights(self.mixture_distribution.probs, ev) * self.component_distribution.mean):sum(-1 - ev)
end
function MixtureSameFamily:_get_variance()
  local ev = #self.event_shape:totable()
  local p = mix_weights(self.mixture_distribution.probs, ev)
  local cm, cv = self.component_distribution.mean, self.component_distribution.variance
  local m = (p * cm):sum(-1 - ev, {keepdim = true})
  return (p * cv):sum(-1 - ev) + (p * (cm - m) ^ 2):sum(-1 - ev)
end
function MixtureSameFamily:log_prob(value)
  self:_validate_sample(value)
  local ev = #self.event_shape:totable()
  local x = value:unsqueeze(-1 - ev)
  local lp = self.component_distribution:log_prob(x)                   -- [..., K]
  local lw = self.mixture_distribution.logits:log_softmax(-1)
  return (lp + lw):logsumexp(-1)
end
function MixtureSameFamily:cdf(value)
  local x = value:unsqueeze(-1 - #self.event_shape:totable())
  return (self.component_distribution:cdf(x) * self.mixture_distribution.probs):sum(-1)
end
function MixtureSameFamily:sample(sample_shape)
  local ss = size_list(sample_shape)
  return flow.no_grad(function()
    local idx = self.mixture_distribution:sample(ss)                     -- [S, B], 1-based
    local comp = self.component_distribution:sample(ss)                  -- [S, B, K, E]
    local ev = #self.event_shape:totable()
    local gi = idx:unsqueeze(-1)
    for _ = 1, ev do gi = gi:unsqueeze(-1) end
    local shape = comp:size():totable()
    shape[#shape - ev] = 1
    return comp:gather(-1 - ev, gi:expand(shape)):squeeze(-1 - ev)
  end)
end

------------------------------------------------------------------ more continuous
local HalfCauchy = family('HalfCauchy', {{'scale', constraints.positive}}, constraints.nonnegative, true)
half_of(HalfCauchy, function(self) return Cauchy(flow.zeros_like(self.scale), self.scale, false) end)
function HalfCauchy:_get_mean() return flow.full(self.scale:size():totable(), math.huge, {dtype = self.scale.dtype}) end
function HalfCauchy:_get_variance() return self:_get_mean() end

--- Weibull(scale, concentration[, validate_args])
local Weibull = family('Weibull', {{'scale', constraints.positive}, {'concentration', constraints.positive}},
                       constraints.positive, true)
function Weibull:_get_mean() return self.scale * S.gammaln(1 + self.concentration:reciprocal()):exp() end
function Weibull:_get_mode()
  local k = self.concentration
  return self.scale * ((k - 1) / k):pow(k:reciprocal()) * k:gt(1):to(k.dtype)
end
function Weibull:_get_variance()
  local k = self.concentration
  return self.scale ^ 2 * (S.gammaln(1 + k:reciprocal() * 2):exp() - (S.gammaln(1 + k:reciprocal()) * 2):exp())
end
function Weibull:rsample(sample_shape)
  local u = uniform_like(self:_extended_shape(sample_shape), self.scale)
  return self.scale * (-u:log()):pow(self.concentration:reciprocal())
end
function Weibull:log_prob(value)
  self:_validate_sample(value)
  local k, z = self.concentration, value / self.scale
  return (k / self.scale):log() + (k - 1) * z:log() - z:pow(k)
end
function Weibull:cdf(value) return 1 - (-(value / self.scale):pow(self.concentration)):exp() end
function Weibull:icdf(p) return self.scale * (-(-p):log1p()):pow(self.concentration:reciprocal()) end
function Weibull:entropy()
  local k = self.concentration
  return EULER * (1 - k:reciprocal()) + (self.scale / k):log() + 1
end

--- Pareto(scale, alpha[, validate_args]): support [scale, inf)
local Pareto = family('Pareto', {{'scale', constraints.positive}, {'alpha', constraints.positive}}, nil, true)
function Pareto:_get_support() return constraints.greater_than_eq(self.scale) end
function Pareto:_get_mean()
  local a = self.alpha
  return flow.where(a:le(1), flow.full({}, math.huge, {dtype = a.dtype}), a * self.scale / (a - 1))
end
function Pareto:_get_mode() return self.scale end
function Pareto:_get_variance()
  local a = self.alpha
  local v = self.scale ^ 2 * a / ((a - 1) ^ 2 * (a - 2))
  return flow.where(a:le(2), flow.full({}, math.huge, {dtype = a.dtype}), v)
end
function Pareto:rsample(sample_shape)
  local u = uniform_like(self:_extended_shape(sample_shape), self.scale)
  return self.scale * (-u:log() / self.alpha):exp()
end
function Pareto:log_prob(value)
  self:_validate_sample(value)
  local a = self.alpha
  return a:log() + a * self.scale:log() - (a + 1) * value:log()
end
function Pareto:cdf(value) return 1 - (self.scale / value):pow(self.alpha) end
function Pareto:icdf(p) return self.scale * (-(-p):log1p() / self.alpha):exp() end
function Pareto:entropy() return (self.scale / self.alpha):log() + self.alpha:reciprocal() + 1 end

--- InverseGamma(concentration, rate[, validate_args]): 1 / Gamma(concentration, rate)
local InverseGamma = family('InverseGamma', {{'concentration', constraints.positive}, {'rate', constraints.positive}},
                            constraints.positive, false)
function InverseGamma:_get_mean()
  local a = self.concentration
  return flow.where(a:gt(1), self.rate / (a - 1), flow.full({}, math.huge, {dtype = a.dtype}))
end
function InverseGamma:_get_mode() return self.rate / (self.concentration + 1) end
function InverseGamma:_get_variance()
  local a = self.concentration
  local v = self.rate ^ 2 / ((a - 1) ^ 2 * (a - 2))
  return flow.where(a:gt(2), v, flow.full({}, math.huge, {dtype = a.dtype}))
end
function InverseGamma:sample(sample_shape)
  local shape = self:_extended_shape(sample_shape)
  return self.rate:expand(shape) / standard_gamma(self.concentration:expand(shape))
end
function InverseGamma:log_prob(value)
  self:_validate_sample(value)
  local a, r = self.concentration, self.rate
  return a * r:log() - S.gammaln(a) - (a + 1) * value:log() - r / value
end
function InverseGamma:cdf(value) return S.gammaincc(self.concentration, self.rate / value) end
function InverseGamma:entropy()
  local a = self.concentration
  return a + self.rate:log() + S.gammaln(a) - (a + 1) * S.digamma(a)
end

------------------------------------------------------------------ more families
local function eps_of(t) return t.dtype == flow.float64 and 2.220446049250313e-16 or 1.1920928955078125e-07 end
local function nan_where(mask, t) return flow.where(mask, flow.full({}, 0 / 0, {dtype = t.dtype}), t) end

--- ExponentialFamily: the base class of exponential-family distributions
-- (torch's; ContinuousBernoulli derives from it). Subclasses give
-- _natural_params and _log_normalizer.
local ExponentialFamily = Distribution:subclass('ExponentialFamily')
M.ExponentialFamily = ExponentialFamily
ExponentialFamily._mean_carrier_measure = 0

local ContinuousBernoulli = ExponentialFamily:subclass('ContinuousBernoulli')
M.ContinuousBernoulli = ContinuousBernoulli
ContinuousBernoulli.support, ContinuousBernoulli.has_rsample = constraints.unit_interval, true
--- ContinuousBernoulli(probs[, logits[, lims = {0.499, 0.501}[, validate_args]]])
-- (Loaiza-Ganem & Cunningham 2019), Taylor expansions inside lims as torch.
function ContinuousBernoulli:__init(probs, logits, lims, validate_args)
  if type(probs) == 'table' and not is_tensor(probs) then
    probs, logits, lims, validate_args = probs.probs, probs.logits, probs.lims, probs.validate_args
  end
  init_binary(self, 'ContinuousBernoulli', probs, logits, validate_args, constraints.unit_interval)
  local p = rawget(self, 'probs')
  if p then self.probs = p:clamp(eps_of(p), 1 - eps_of(p)) end
  self._lims = lims or {0.499, 0.501}
end
function ContinuousBernoulli:_get_probs()
  local l = rawget(self, 'logits'):sigmoid()
  return l:clamp(eps_of(l), 1 - eps_of(l))
end
function ContinuousBernoulli:_get_logits() return probs_to_logits(rawget(self, 'probs'), true) end
function ContinuousBernoulli:_outside()
  return self.probs:le(self._lims[1]):logical_or(self.probs:gt(self._lims[2]))
end
function ContinuousBernoulli:_cut_probs()
  return flow.where(self:_outside(), self.probs, flow.full({}, self._lims[1], {dtype = self.probs.dtype}))
end
function ContinuousBernoulli:_cont_bern_log_norm()
  local c = self:_cut_probs()
  local below = c:le(0.5)
  local cb = flow.where(below, c, flow.zeros_like(c))
  local ca = flow.where(c:ge(0.5), c, flow.ones_like(c))
  local ln = ((-c):log1p() - c:log()):abs():log() - flow.where(below, (cb * -2):log1p(), (ca * 2 - 1):log())
  local x = (self.probs - 0.5) ^ 2
  return flow.where(self:_outside(), ln, (x * (104 / 45) + 4 / 3) * x + math.log(2))
end
function ContinuousBernoulli:_get_mean()
  local c = self:_cut_probs()
  local mus = c / (c * 2 - 1) + ((-c):log1p() - c:log()):reciprocal()
  local x = self.probs - 0.5
  return flow.where(self:_outside(), mus, (x ^ 2 * (16 / 45) + 1 / 3) * x + 0.5)
end
function ContinuousBernoulli:_get_variance()
  local c = self:_cut_probs()
  local v = c * (c - 1) / (1 - c * 2) ^ 2 + ((-c):log1p() - c:log()) ^ -2
  local x = (self.probs - 0.5) ^ 2
  return flow.where(self:_outside(), v, 1 / 12 - (1 / 15 - x * (128 / 945)) * x)
end
function ContinuousBernoulli:rsample(sample_shape)
  return self:icdf(uniform_like(self:_extended_shape(sample_shape), self.probs))
end
function ContinuousBernoulli:log_prob(value)
  self:_validate_sample(value)
  return -bce_logits(self.logits, value) + self:_cont_bern_log_norm()
end
function ContinuousBernoulli:cdf(value)
  local c = self:_cut_probs()
  local cdfs = (c:pow(value) * (1 - c):pow(1 - value) + c - 1) / (c * 2 - 1)
  local unb = flow.where(self:_outside(), cdfs, value)
  return flow.where(value:le(0), flow.zeros_like(unb), flow.where(value:ge(1), flow.ones_like(unb), unb))
end
function ContinuousBernoulli:icdf(value)
  local c = self:_cut_probs()
  local r = (((-c) + value * (c * 2 - 1)):log1p() - (-c):log1p()) / (c:log() - (-c):log1p())
  return flow.where(self:_outside(), r, value)
end
function ContinuousBernoulli:entropy()
  local l0, l1 = (-self.probs):log1p(), self.probs:log()
  return self.mean * (l0 - l1) - self:_cont_bern_log_norm() - l0
end

-- E[X^k] of Kumaraswamy(a, b): b * B(1 + k / a, b)
local function kumaraswamy_moment(a, b, k)
  local arg1 = k / a + 1
  return (b:log() + S.gammaln(arg1) + S.gammaln(b) - S.gammaln(arg1 + b)):exp()
end
local Kumaraswamy = TransformedDistribution:subclass('Kumaraswamy')
M.Kumaraswamy = Kumaraswamy
Kumaraswamy.support, Kumaraswamy.has_rsample = constraints.unit_interval, true
--- Kumaraswamy(concentration1, concentration0[, validate_args]): a transformed Uniform
function Kumaraswamy:__init(c1, c0, validate_args)
  self.concentration1, self.concentration0 = broadcast_all(c1, c0)
  local arg = {concentration1 = constraints.positive, concentration0 = constraints.positive}
  local base = Uniform(flow.zeros_like(self.concentration0), flow.ones_like(self.concentration0), validate_args)
  TransformedDistribution.__init(self, base, {transforms.PowerTransform(self.concentration0:reciprocal()),
    transforms.AffineTransform(1, -1), transforms.PowerTransform(self.concentration1:reciprocal())}, validate_args)
  self.arg_constraints = arg
  if self._validate_args then Distribution.__init(self, self.batch_shape, {}, true) end
end
function Kumaraswamy._get_support() return constraints.unit_interval end
function Kumaraswamy:_get_mean() return kumaraswamy_moment(self.concentration1, self.concentration0, 1) end
function Kumaraswamy:_get_variance()
  return kumaraswamy_moment(self.concentration1, self.concentration0, 2) - self.mean ^ 2
end
function Kumaraswamy:_get_mode()
  local a, b = self.concentration1, self.concentration0
  local lm = b:reciprocal() * (-b):log1p() - (-b * a):log1p()
  return nan_where(b:lt(1):logical_or(a:lt(1)), lm):exp()
end
function Kumaraswamy:entropy()
  local a, b = self.concentration1, self.concentration0
  local t1, t0 = 1 - a:reciprocal(), 1 - b:reciprocal()
  local h0 = S.digamma(b + 1) + EULER
  return t0 + t1 * h0 - a:log() - b:log()
end

--- FisherSnedecor(df1, df2[, validate_args]): X1 / X2 of Gamma(df / 2, df) draws
local FisherSnedecor = family('FisherSnedecor', {{'df1', constraints.positive}, {'df2', constraints.positive}},
                              constraints.positive, true)
function FisherSnedecor:_get_mean() local d2 = nan_where(self.df2:le(2), self.df2) return d2 / (d2 - 2) end
function FisherSnedecor:_get_mode()
  return nan_where(self.df1:le(2), (self.df1 - 2) / self.df1 * self.df2 / (self.df2 + 2))
end
function FisherSnedecor:_get_variance()
  local d1, d2 = self.df1, nan_where(self.df2:le(4), self.df2)
  return d2 ^ 2 * 2 * (d1 + d2 - 2) / (d1 * (d2 - 2) ^ 2 * (d2 - 4))
end
function FisherSnedecor:rsample(sample_shape)
  local x1 = Gamma(self.df1 * 0.5, self.df1, false):rsample(sample_shape)
  local x2 = Gamma(self.df2 * 0.5, self.df2, false):rsample(sample_shape)
  local tiny = self.df1.dtype == flow.float64 and 2.2250738585072014e-308 or 1.1754943508222875e-38
  return (x1 / x2:clamp(tiny)):clamp(tiny)
end
function FisherSnedecor:log_prob(value)
  self:_validate_sample(value)
  local c1, c2, c3 = self.df1 * 0.5, self.df2 * 0.5, self.df1 / self.df2
  local t1 = S.gammaln(c1 + c2) - S.gammaln(c1) - S.gammaln(c2)
  return t1 + c1 * c3:log() + (c1 - 1) * value:log() - (c1 + c2) * (c3 * value):log1p()
end

local NegativeBinomial = Distribution:subclass('NegativeBinomial')
M.NegativeBinomial = NegativeBinomial
NegativeBinomial.support = constraints.nonnegative_integer
--- NegativeBinomial(total_count, probs[, logits[, validate_args]]): the number
-- of successes (probability probs each) before total_count failures
function NegativeBinomial:__init(total_count, probs, logits, validate_args)
  if type(probs) == 'table' and not is_tensor(probs) then
    probs, logits, validate_args = probs.probs, probs.logits, probs.validate_args
  end
  probs_or_logits('NegativeBinomial', probs, logits)
  if probs ~= nil then
    self.total_count, self.probs = broadcast_all(total_count, probs)
    self.arg_constraints = {total_count = constraints.greater_than_eq(0),
                            probs = constraints.half_open_interval(0, 1)}
  else
    self.total_count, self.logits = broadcast_all(total_count, logits)
    self.arg_constraints = {total_count = constraints.greater_than_eq(0), logits = constraints.real}
  end
  Distribution.__init(self, self.total_count:size(), {}, validate_args)
end
function NegativeBinomial:_get_probs() return rawget(self, 'logits'):sigmoid() end
function NegativeBinomial:_get_logits() return probs_to_logits(rawget(self, 'probs'), true) end
function NegativeBinomial:_get_mean() return self.total_count * self.logits:exp() end
function NegativeBinomial:_get_mode() return ((self.total_count - 1) * self.logits:exp()):floor():clamp(0) end
function NegativeBinomial:_get_variance() return self.mean / (-self.logits):sigmoid() end
function NegativeBinomial:sample(sample_shape)
  return flow.no_grad(function()
    local rate = Gamma(self.total_count, (-self.logits):exp(), false):sample(sample_shape)
    return poisson_draw(rate)
  end)
end
function NegativeBinomial:log_prob(value)
  self:_validate_sample(value)
  local F = flow.nn.functional
  local n, l = self.total_count, self.logits
  local un = n * F.logsigmoid(-l) + value * F.logsigmoid(l)
  local norm = -S.gammaln(n + value) + S.gammaln(value + 1) + S.gammaln(n)
  norm = flow.where((n + value):eq(0), flow.zeros_like(norm), norm)
  return un - norm
end

--- GeneralizedPareto(loc, scale, concentration[, validate_args]) (torch 2.x)
local GeneralizedPareto = family('GeneralizedPareto',
  {{'loc', constraints.real}, {'scale', constraints.positive}, {'concentration', constraints.real}}, nil, true)
local function gp_safe(self)
  local eq0 = self.concentration:abs():le(1e-8)
  return eq0, flow.where(eq0, flow.ones_like(self.concentration), self.concentration)
end
function GeneralizedPareto:_get_support()
  local upper = flow.where(self.concentration:lt(0), self.loc - self.scale / self.concentration,
                           flow.full({}, math.huge, {dtype = self.loc.dtype}))
  return constraints.interval(self.loc, upper)
end
function GeneralizedPareto:_get_mode() return self.loc end
function GeneralizedPareto:rsample(sample_shape)
  return self:icdf(uniform_like(self:_extended_shape(sample_shape), self.loc))
end
function GeneralizedPareto:log_prob(value)
  self:_validate_sample(value)
  local z = (value - self.loc) / self.scale
  local eq0, c = gp_safe(self)
  local y = c:reciprocal() + 1
  local nz = flow.where(y:eq(0), y, y * (c * z):log1p())
  return -self.scale:log() - flow.where(eq0, z, nz)
end
function GeneralizedPareto:log_survival_function(value)
  local z = (value - self.loc) / self.scale
  local eq0, c = gp_safe(self)
  return flow.where(eq0, -z, -(c * z):log1p() / c)
end
function GeneralizedPareto:log_cdf(value) return (-self:log_survival_function(value):exp()):log1p() end
function GeneralizedPareto:cdf(value) return self:log_cdf(value):exp() end
function GeneralizedPareto:icdf(p)
  local eq0, c = gp_safe(self)
  local logu = (-p):log1p()
  return flow.where(eq0, self.loc - self.scale * logu, self.loc + self.scale / c * (-c * logu):expm1())
end
function GeneralizedPareto:_get_mean()
  local c = self.concentration
  local ok = c:lt(1)
  local sc = flow.where(ok, c, flow.full({}, 0.5, {dtype = c.dtype}))
  return nan_where(ok:logical_not(), self.loc + self.scale / (1 - sc))
end
function GeneralizedPareto:_get_variance()
  local c = self.concentration
  local ok = c:lt(0.5)
  local sc = flow.where(ok, c, flow.full({}, 0.25, {dtype = c.dtype}))
  return nan_where(ok:logical_not(), self.scale ^ 2 / ((1 - sc) ^ 2 * (1 - sc * 2)))
end
function GeneralizedPareto:entropy() return self.scale:log() + self.concentration + 1 end

local OneHotST = OneHotCategorical:subclass('OneHotCategoricalStraightThrough')
M.OneHotCategoricalStraightThrough = OneHotST
OneHotST.has_rsample = true
--- OneHotCategoricalStraightThrough(probs[, logits]): rsample is the one-hot
-- sample with the straight-through gradient of probs
function OneHotST:rsample(sample_shape)
  local s = self:sample(sample_shape)
  local p = self._categorical.probs
  return s + (p - p:detach())
end

local LogisticNormal = TransformedDistribution:subclass('LogisticNormal')
M.LogisticNormal = LogisticNormal
LogisticNormal.support, LogisticNormal.has_rsample = constraints.simplex, true
--- LogisticNormal(loc, scale[, validate_args]): StickBreakingTransform of
-- Normal(loc, scale) over the last dim (K - 1 -> the K-simplex)
function LogisticNormal:__init(loc, scale, validate_args)
  local n = Normal(loc, scale, validate_args)
  if #n.batch_shape:totable() == 0 then n = n:expand({1}) end
  TransformedDistribution.__init(self, Independent(n, 1), {transforms.StickBreakingTransform()}, validate_args)
  local ev = self.event_shape:totable()
  ev[#ev] = ev[#ev] + 1
  self.event_shape = flow.Size(ev)
  self.arg_constraints = {}
end
function LogisticNormal._get_support() return constraints.simplex end
function LogisticNormal:_get_loc() return self.base_dist.base_dist.loc end
function LogisticNormal:_get_scale() return self.base_dist.base_dist.scale end

local VonMises = family('VonMises', {{'loc', constraints.real}, {'concentration', constraints.positive}},
                        constraints.real, false)
--- VonMises(loc, concentration[, validate_args]): the circular normal on
-- [-pi, pi); sampled with Best & Fisher's rejection method as torch
function VonMises:_get_mean() return self.loc end
function VonMises:_get_mode() return self.loc end
function VonMises:_get_variance()
  local k = self.concentration
  return 1 - (S.i1e(k) / S.i0e(k))
end
function VonMises:log_prob(value)
  self:_validate_sample(value)
  local k = self.concentration
  return k * ((value - self.loc):cos() - 1) - math.log(2 * math.pi) - S.i0e(k):log()
end
function VonMises:sample(sample_shape)
  local shape = self:_extended_shape(sample_shape)
  return flow.no_grad(function()
    local k = self.concentration:to(flow.float64):expand(shape)
    local tau = 1 + (1 + 4 * k ^ 2):sqrt()
    local rho = (tau - (2 * tau):sqrt()) / (2 * k)
    local proposal_r = (1 + rho ^ 2) / (2 * rho)
    -- small concentrations: the second-order Taylor expansion of proposal_r (as torch)
    local small = k:lt(1e-5)
    proposal_r = flow.where(small, 1 / k + k, proposal_r)
    local x = flow.zeros(shape, {dtype = flow.float64})
    local redraw = flow.ones(shape, {dtype = flow.bool})
    for _ = 1, 1000 do
      if not redraw:any():item() then break end
      local u1 = uniform_like(shape, x)
      local u2 = uniform_like(shape, x)
      local u3 = uniform_like(shape, x)
      local z = (u1 * math.pi):cos()
      local f = (1 + proposal_r * z) / (proposal_r + z)
      local c = k * (proposal_r - f)
      local ok = (c * (2 - c) - u2):gt(0):logical_or(((c / u2):log() + 1 - c):ge(0))
      local take = ok:logical_and(redraw)
      x = flow.where(take, (u3 - 0.5):sign() * f:acos(), x)
      redraw = redraw:logical_and(take:logical_not())
    end
    if redraw:any():item() then fail('VonMises: the sampler did not converge') end
    local r = (x + math.pi + self.loc:to(flow.float64)):remainder(2 * math.pi) - math.pi
    return r:to(self.loc.dtype)
  end)
end

------------------------------------------------------------------ KL divergence
local registry = {}

--- register_kl(P, Q)(fn): fn(p, q) is KL(p || q) for instances of P and Q.
function M.register_kl(P, Q)
  if not (class.is_class(P) and class.is_class(Q)) then fail('register_kl: expected two distribution classes') end
  return function(fn)
    registry[P] = registry[P] or {}
    registry[P][Q] = fn
    return fn
  end
end

--- kl_divergence(p, q): KL(p || q) per batch element, for the registered pairs
-- (the most specific classes registered win).
function M.kl_divergence(p, q)
  check_dist('kl_divergence', p, 1, 'p')
  check_dist('kl_divergence', q, 2, 'q')
  local P = getmetatable(p)
  while P do
    local Q = getmetatable(q)
    while Q do
      local fn = registry[P] and registry[P][Q]
      if fn then return fn(p, q) end
      Q = Q.super
    end
    P = P.super
  end
  fail(('kl_divergence: no KL(p || q) is registered for p of type %s and q of type %s'):format(
    tostring(p.__name), tostring(q.__name)))
end

local reg = M.register_kl
local function kl_normal(p, q)
  local var_ratio = (p.scale / q.scale) ^ 2
  local t1 = ((p.loc - q.loc) / q.scale) ^ 2
  return (var_ratio + t1 - 1 - var_ratio:log()) * 0.5
end
reg(Normal, Normal)(kl_normal)
-- the Gaussian pairs of torch: (LowRank)MultivariateNormal against each
-- other, through their scale_tril (torch's formula for MultivariateNormal)
local function kl_gaussian(p, q)
  local k = p.event_shape[1]
  if q.event_shape[1] ~= k then
    fail(('kl_divergence: KL-divergence between two %s with different event shapes (%d and %d) cannot be '
      .. 'computed'):format(p.__name, k, q.event_shape[1]))
  end
  local Lp, Lq = unpack(flow.broadcast_tensors(p.scale_tril, q.scale_tril))
  local tr = (flow.linalg.solve_triangular(Lq, Lp, {upper = false}) ^ 2):sum(-1):sum(-1)
  local m = mahalanobis(Lq, q.loc - p.loc)
  return half_log_det(Lq) - half_log_det(Lp) + (tr + m - k) * 0.5
end
for _, P in ipairs({MultivariateNormal, LowRankMVN}) do
  for _, Q in ipairs({MultivariateNormal, LowRankMVN}) do reg(P, Q)(kl_gaussian) end
end
reg(LogNormal, LogNormal)(kl_normal)
reg(HalfNormal, HalfNormal)(function(p, q) return kl_normal(std_normal(p), std_normal(q)) end)
local function inf_where(mask, t) return flow.where(mask, flow.full({}, math.huge, {dtype = t.dtype}), t) end
reg(Bernoulli, Bernoulli)(function(p, q)
  local F = flow.nn.functional
  local t1 = p.probs * (F.softplus(-q.logits) - F.softplus(-p.logits))
  t1 = inf_where(q.probs:eq(0), t1)
  t1 = flow.where(p.probs:eq(0), flow.zeros({}, {dtype = t1.dtype}), t1)
  local t2 = (1 - p.probs) * (F.softplus(q.logits) - F.softplus(p.logits))
  t2 = inf_where(q.probs:eq(1), t2)
  t2 = flow.where(p.probs:eq(1), flow.zeros({}, {dtype = t2.dtype}), t2)
  return t1 + t2
end)
local function kl_categorical(p, q)
  local t = p.probs * (p.logits - q.logits)
  t = inf_where(q.probs:eq(0):logical_and(p.probs:gt(0)), t)
  t = flow.where(p.probs:eq(0), flow.zeros({}, {dtype = t.dtype}), t)
  return t:sum(-1)
end
reg(Categorical, Categorical)(kl_categorical)
reg(OneHotCategorical, OneHotCategorical)(function(p, q) return kl_categorical(p._categorical, q._categorical) end)
reg(Uniform, Uniform)(function(p, q)
  local r = ((q.high - q.low) / (p.high - p.low)):log()
  return inf_where(q.low:gt(p.low):logical_or(q.high:lt(p.high)), r)
end)
reg(Exponential, Exponential)(function(p, q)
  local ratio = q.rate / p.rate
  return -ratio:log() + ratio - 1
end)
reg(Laplace, Laplace)(function(p, q)
  local sr = p.scale / q.scale
  local d = (p.loc - q.loc):abs()
  return -sr:log() + d / q.scale + sr * (-d / p.scale):exp() - 1
end)
reg(Cauchy, Cauchy)(function(p, q)
  return (((p.scale + q.scale) ^ 2 + (p.loc - q.loc) ^ 2) / (p.scale * q.scale * 4)):log()
end)
reg(Gumbel, Gumbel)(function(p, q)
  local ct1, ct2, ct3 = p.scale / q.scale, q.loc / q.scale, p.loc / q.scale
  local t1 = -ct1:log() - ct2 + ct3
  local t2 = ct1 * EULER
  local t3 = (ct2 + (ct1 + 1):lgamma() - ct3):exp()
  return t1 + t2 + t3 - (1 + EULER)
end)
reg(Geometric, Geometric)(function(p, q)
  return -p:entropy() - (-q.probs):log1p() / p.probs - q.logits
end)
reg(Gamma, Gamma)(function(p, q)
  local t1 = q.concentration * (p.rate / q.rate):log()
  local t2 = S.gammaln(q.concentration) - S.gammaln(p.concentration)
  local t3 = (p.concentration - q.concentration) * S.digamma(p.concentration)
  local t4 = (q.rate - p.rate) * (p.concentration / p.rate)
  return t1 + t2 + t3 + t4
end)
local function kl_dirichlet(pa, qa)
  local sp, sq = pa:sum(-1), qa:sum(-1)
  local t1 = S.gammaln(sp) - S.gammaln(sq)
  local t2 = (S.gammaln(pa) - S.gammaln(qa)):sum(-1)
  local t4 = S.digamma(pa) - S.digamma(sp):unsqueeze(-1)
  return t1 - t2 + ((pa - qa) * t4):sum(-1)
end
reg(Dirichlet, Dirichlet)(function(p, q) return kl_dirichlet(p.concentration, q.concentration) end)
reg(Beta, Beta)(function(p, q)
  return kl_dirichlet(flow.stack({p.concentration1, p.concentration0}, -1),
                      flow.stack({q.concentration1, q.concentration0}, -1))
end)
reg(Poisson, Poisson)(function(p, q) return p.rate * (p.rate:log() - q.rate:log()) - (p.rate - q.rate) end)
reg(Independent, Independent)(function(p, q)
  if p.reinterpreted_batch_ndims ~= q.reinterpreted_batch_ndims then
    fail('kl_divergence: Independent distributions with different reinterpreted_batch_ndims')
  end
  return sum_rightmost(M.kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)
end)

-- pairs torch registers for the ContinuousBernoulli
local CB = M.ContinuousBernoulli
reg(CB, CB)(function(p, q)
  return p.mean * (p.logits - q.logits) + p:_cont_bern_log_norm() + (-p.probs):log1p()
    - q:_cont_bern_log_norm() - (-q.probs):log1p()
end)
local function kl_to_cb(p, q) return -p:entropy() - p.mean * q.logits - (-q.probs):log1p() - q:_cont_bern_log_norm() end
reg(Beta, CB)(kl_to_cb)
reg(Uniform, CB)(function(p, q)
  -- torch's condition (inclusive: a Uniform on exactly [0, 1] also gets inf)
  return inf_where(p.high:ge(1):logical_or(p.low:le(0)), kl_to_cb(p, q))
end)
reg(CB, M.Exponential)(function(p, q) return -p:entropy() - q.rate:log() + q.rate * p.mean end)
reg(CB, Normal)(function(p, q)
  local t2 = (math.log(2 * math.pi) + (q.loc / q.scale) ^ 2) * 0.5 + q.scale:log()
  return -p:entropy() + t2 + (p.variance + p.mean ^ 2 - q.loc * p.mean * 2) / (q.scale ^ 2 * 2)
end)
reg(CB, Uniform)(function(p, q)
  return inf_where(q.low:ge(0):logical_or(q.high:le(1)), -p:entropy() + (q.high - q.low):log())
end)
local function kl_inf(param)
  return function(p) return flow.full(p[param]:size():totable(), math.huge, {dtype = p[param].dtype}) end
end
for _, pq in ipairs({{M.Exponential, CB, 'rate'}, {Gamma, CB, 'concentration'}, {M.Gumbel, CB, 'loc'},
                     {M.Laplace, CB, 'loc'}, {Normal, CB, 'loc'}, {CB, M.Pareto, 'probs'}}) do
  reg(pq[1], pq[2])(kl_inf(pq[3]))
end

-- Doc comments of the functions made in loops above (help() and LDoc read them).

--- Beta(concentration1, concentration0): the Beta distribution on (0, 1).
-- @function distributions.Beta

--- Cauchy(loc, scale): the Cauchy distribution.
-- @function distributions.Cauchy

--- Exponential(rate): the exponential distribution.
-- @function distributions.Exponential

--- Gamma(concentration, rate): the Gamma distribution.
-- @function distributions.Gamma

--- Gumbel(loc, scale): the Gumbel distribution.
-- @function distributions.Gumbel

--- HalfCauchy(scale): |X| for X ~ Cauchy(0, scale).
-- @function distributions.HalfCauchy

--- HalfNormal(scale): |X| for X ~ Normal(0, scale).
-- @function distributions.HalfNormal

--- InverseGamma(concentration, rate): 1 / X for X ~ Gamma(concentration, rate).
-- @function distributions.InverseGamma

--- Laplace(loc, scale): the Laplace distribution.
-- @function distributions.Laplace

--- LogNormal(loc, scale): exp(X) for X ~ Normal(loc, scale).
-- @function distributions.LogNormal

--- Normal(loc, scale): the normal distribution; rsample is reparameterised.
-- @function distributions.Normal

--- Pareto(scale, alpha): the Pareto distribution.
-- @function distributions.Pareto

--- Poisson(rate): the Poisson distribution.
-- @function distributions.Poisson

--- Weibull(scale, concentration): the Weibull distribution.
-- @function distributions.Weibull

--- ExponentialFamily: the base class of exponential-family distributions (entropy through the log normaliser).
-- @function distributions.ExponentialFamily

--- FisherSnedecor(df1, df2): the F distribution.
-- @function distributions.FisherSnedecor

--- GeneralizedPareto(loc, scale, concentration): the generalized Pareto distribution.
-- @function distributions.GeneralizedPareto

--- OneHotCategoricalStraightThrough(probs | logits): one-hot samples with straight-through gradients.
-- @function distributions.OneHotCategoricalStraightThrough

--- VonMises(loc, concentration): the von Mises distribution on the circle.
-- @function distributions.VonMises

return M
