-- oneflow.optim.lr_scheduler: learning-rate schedules with the values of
-- torch.optim.lr_scheduler.
--
-- Like PyTorch, step() uses the chainable (recursive) form: each step
-- rescales the current group lr, so schedulers compose and a user's change
-- to group.lr carries on. step(epoch) jumps to an epoch and uses the closed
-- form where one exists. The two forms agree up to rounding when nothing
-- else touches the lr.
--
--   local S = flow.optim.lr_scheduler
--   local sched = S.CosineAnnealingLR(opt, {T_max = 100})   -- or (opt, 100)
--   for epoch = 1, 100 do train(); sched:step() end
local U = require 'oneflow.optim._util'
local Optimizer = require 'oneflow.optim.optimizer'

local fail, parse = U.fail, U.parse_args
local REQUIRED = U.REQUIRED
local M = {}

local function lrs_of(opt)
  local res = {}
  for i, g in ipairs(opt.param_groups) do res[i] = g.lr end
  return res
end

local function check_optimizer(name, opt)
  if not U.isinstance(opt, Optimizer) and not (type(opt) == 'table' and type(opt.param_groups) == 'table') then
    fail(('%s: expected an optimizer, got %s'):format(name, type(opt)))
  end
end

-- A number or a per-group list -> a per-group list.
local function per_group(name, what, opt, v)
  local n = #opt.param_groups
  if type(v) == 'table' then
    if #v ~= n then
      fail(('%s: %s must have the same length as optimizer.param_groups (%d values, %d groups)')
           :format(name, what, #v, n))
    end
    return U.copy(v)
  end
  local res = {}
  for i = 1, n do res[i] = v end
  return res
end

------------------------------------------------------------------ base
local LRScheduler = U.Object:subclass('LRScheduler')
M.LRScheduler = LRScheduler
M._LRScheduler = LRScheduler

--- LRScheduler.__init(self, optimizer, last_epoch = -1): subclasses set
-- their fields, then call this; it records initial_lr and takes step 0.
function LRScheduler:__init(optimizer, last_epoch)
  check_optimizer(self.__name, optimizer)
  last_epoch = last_epoch or -1
  self.optimizer = optimizer
  if last_epoch == -1 then
    for _, g in ipairs(optimizer.param_groups) do
      if g.initial_lr == nil then g.initial_lr = g.lr end
    end
  else
    for i, g in ipairs(optimizer.param_groups) do
      if g.initial_lr == nil then
        fail(("%s: param 'initial_lr' is not specified in param_groups[%d] when resuming an optimizer")
             :format(self.__name, i))
      end
    end
  end
  self.base_lrs = {}
  for i, g in ipairs(optimizer.param_groups) do self.base_lrs[i] = g.initial_lr end
  self.last_epoch = last_epoch
  self:_initial_step()
end

function LRScheduler:_initial_step()
  self._step_count = 0
  self._is_initial = true
  local ok, err = pcall(self.step, self)
  self._is_initial = false
  if not ok then error(err, 0) end
end

--- step(): next epoch, chainable form. step(epoch): jump there (closed form).
function LRScheduler:step(epoch)
  self._step_count = self._step_count + 1
  self:_update_lr(epoch)
end

function LRScheduler:_update_lr(epoch)
  local values
  if epoch == nil then
    self.last_epoch = self.last_epoch + 1
    values = self:get_lr()
  else
    self.last_epoch = epoch
    if self._get_closed_form_lr then
      values = self:_get_closed_form_lr()
    else
      values = self:get_lr()
    end
  end
  for i, g in ipairs(self.optimizer.param_groups) do g.lr = values[i] end
  self._last_lr = lrs_of(self.optimizer)
end

function LRScheduler:get_lr()
  error(self.__name .. ': get_lr is not implemented', 2)
end

--- The lrs set by the last step, one per group (a copy).
function LRScheduler:get_last_lr()
  return U.copy(self._last_lr)
end

--- Every field but the optimizer (and functions), deep-copied.
function LRScheduler:state_dict()
  local sd = {}
  for k, v in pairs(self) do
    if k ~= 'optimizer' and type(v) ~= 'function' then sd[k] = U.copy(v) end
  end
  return sd
end

function LRScheduler:load_state_dict(sd)
  for k, v in pairs(sd) do
    if k ~= 'optimizer' then self[k] = U.copy(v) end
  end
end

-- Positional argument parsing shared by the schedulers.
local function args(name, spec, ...)
  return parse(name, spec, nil, ...)
end

------------------------------------------------------------------ LambdaLR
local function lambdas(name, opt, fn)
  local list = per_group(name, 'lr_lambda', opt, fn)
  for i, f in ipairs(list) do
    if type(f) ~= 'function' and not (type(f) == 'table' and getmetatable(f) and getmetatable(f).__call) then
      fail(('%s: lr_lambda %d should be a function, got %s'):format(name, i, type(f)))
    end
  end
  return list
end

--- LambdaLR(opt, lr_lambda): lr = base_lr * lr_lambda(epoch); lr_lambda a
-- function or one per group.
local LambdaLR = LRScheduler:subclass('LambdaLR')
--- lr_scheduler.LambdaLR(opt, lr_lambda): lr = base_lr * lr_lambda(epoch).
-- @function lr_scheduler.LambdaLR
M.LambdaLR = LambdaLR
function LambdaLR:__init(opt, ...)
  local a = args('LambdaLR', {{'lr_lambda', REQUIRED}, {'last_epoch', -1}}, ...)
  check_optimizer('LambdaLR', opt)
  self.lr_lambdas = lambdas('LambdaLR', opt, a.lr_lambda)
  LRScheduler.__init(self, opt, a.last_epoch)
end
function LambdaLR:get_lr()
  local res = {}
  for i, base in ipairs(self.base_lrs) do res[i] = base * self.lr_lambdas[i](self.last_epoch) end
  return res
end
function LambdaLR:state_dict()
  local sd = LRScheduler.state_dict(self)
  sd.lr_lambdas = nil   -- functions are not saved (as PyTorch does for lambdas)
  return sd
end

--- MultiplicativeLR(opt, lr_lambda): lr = lr * lr_lambda(epoch) after step 0.
local MultiplicativeLR = LRScheduler:subclass('MultiplicativeLR')
--- lr_scheduler.MultiplicativeLR(opt, lr_lambda): lr times lr_lambda(epoch) every step.
-- @function lr_scheduler.MultiplicativeLR
M.MultiplicativeLR = MultiplicativeLR
function MultiplicativeLR:__init(opt, ...)
  local a = args('MultiplicativeLR', {{'lr_lambda', REQUIRED}, {'last_epoch', -1}}, ...)
  check_optimizer('MultiplicativeLR', opt)
  self.lr_lambdas = lambdas('MultiplicativeLR', opt, a.lr_lambda)
  LRScheduler.__init(self, opt, a.last_epoch)
end
function MultiplicativeLR:get_lr()
  local res = {}
  for i, g in ipairs(self.optimizer.param_groups) do
    res[i] = self._is_initial and g.lr or g.lr * self.lr_lambdas[i](self.last_epoch)
  end
  return res
end
MultiplicativeLR.state_dict = LambdaLR.state_dict

------------------------------------------------------------------ StepLR
--- Multiplies the lr by gamma every step_size epochs (calls of `step()`):
-- `flow.optim.lr_scheduler.StepLR(opt, 30, {gamma = 0.1})`.
-- @function flow.optim.lr_scheduler.StepLR
-- @tparam Optimizer opt
-- @tparam int step_size
-- @tparam[opt] table opts `{gamma = 0.1, last_epoch = -1}` (or positionally)

local StepLR = LRScheduler:subclass('StepLR')
M.StepLR = StepLR
function StepLR:__init(opt, ...)
  local a = args('StepLR', {{'step_size', REQUIRED}, {'gamma', 0.1}, {'last_epoch', -1}}, ...)
  U.check_number('StepLR', 'step_size', a.step_size)
  if a.step_size <= 0 then fail('StepLR: step_size must be positive, got ' .. a.step_size) end
  self.step_size, self.gamma = a.step_size, a.gamma
  LRScheduler.__init(self, opt, a.last_epoch)
end
function StepLR:get_lr()
  local res = lrs_of(self.optimizer)
  if self.last_epoch == 0 or self.last_epoch % self.step_size ~= 0 then return res end
  for i, lr in ipairs(res) do res[i] = lr * self.gamma end
  return res
end
function StepLR:_get_closed_form_lr()
  local res = {}
  for i, base in ipairs(self.base_lrs) do
    res[i] = base * self.gamma ^ math.floor(self.last_epoch / self.step_size)
  end
  return res
end

------------------------------------------------------------------ MultiStepLR
--- MultiStepLR(opt, {30, 80}, {gamma = 0.1}): lr * gamma at each milestone
-- (a milestone listed twice decays twice).
local MultiStepLR = LRScheduler:subclass('MultiStepLR')
--- lr_scheduler.MultiStepLR(opt, milestones, {gamma = 0.1}): lr times gamma at each milestone epoch.
-- @function lr_scheduler.MultiStepLR
M.MultiStepLR = MultiStepLR
function MultiStepLR:__init(opt, ...)
  local a = args('MultiStepLR', {{'milestones', REQUIRED}, {'gamma', 0.1}, {'last_epoch', -1}}, ...)
  if type(a.milestones) ~= 'table' then
    fail('MultiStepLR: milestones must be a list of epochs, got ' .. type(a.milestones))
  end
  local sorted = U.copy(a.milestones)
  table.sort(sorted)
  self.milestones, self.gamma = sorted, a.gamma
  LRScheduler.__init(self, opt, a.last_epoch)
end
function MultiStepLR:get_lr()
  local count = 0
  for _, m in ipairs(self.milestones) do if m == self.last_epoch then count = count + 1 end end
  local res = lrs_of(self.optimizer)
  if count == 0 then return res end
  for i, lr in ipairs(res) do res[i] = lr * self.gamma ^ count end
  return res
end
function MultiStepLR:_get_closed_form_lr()
  local passed = 0   -- bisect_right
  for _, m in ipairs(self.milestones) do if m <= self.last_epoch then passed = passed + 1 end end
  local res = {}
  for i, base in ipairs(self.base_lrs) do res[i] = base * self.gamma ^ passed end
  return res
end

------------------------------------------------------------------ ConstantLR
--- ConstantLR(opt, {factor = 1/3, total_iters = 5}): lr * factor until total_iters.
local ConstantLR = LRScheduler:subclass('ConstantLR')
--- lr_scheduler.ConstantLR(opt, {factor = 1/3, total_iters = 5}): lr times factor until total_iters steps.
-- @function lr_scheduler.ConstantLR
M.ConstantLR = ConstantLR
function ConstantLR:__init(opt, ...)
  local a = args('ConstantLR', {{'factor', 1 / 3}, {'total_iters', 5}, {'last_epoch', -1}}, ...)
  if a.factor > 1 or a.factor < 0 then
    fail('ConstantLR: constant multiplicative factor expected to be between 0 and 1, got ' .. a.factor)
  end
  self.factor, self.total_iters = a.factor, a.total_iters
  LRScheduler.__init(self, opt, a.last_epoch)
end
function ConstantLR:get_lr()
  local res = lrs_of(self.optimizer)
  if self.last_epoch == 0 then
    for i, lr in ipairs(res) do res[i] = lr * self.factor end
  elseif self.last_epoch == self.total_iters then
    for i, lr in ipairs(res) do res[i] = lr * (1 / self.factor) end
  end
  return res
end
function ConstantLR:_get_closed_form_lr()
  local res = {}
  local f = self.factor + (self.last_epoch >= self.total_iters and 1 - self.factor or 0)
  for i, base in ipairs(self.base_lrs) do res[i] = base * f end
  return res
end

------------------------------------------------------------------ LinearLR
--- LinearLR(opt, {start_factor = 1/3, end_factor = 1, total_iters = 5}):
-- the factor moves linearly from start_factor to end_factor (warmup).
local LinearLR = LRScheduler:subclass('LinearLR')
--- lr_scheduler.LinearLR(opt, {start_factor = 1/3, end_factor = 1, total_iters = 5}): scales lr linearly from
-- start_factor to end_factor.
-- @function lr_scheduler.LinearLR
M.LinearLR = LinearLR
function LinearLR:__init(opt, ...)
  local a = args('LinearLR', {{'start_factor', 1 / 3}, {'end_factor', 1}, {'total_iters', 5},
                              {'last_epoch', -1}}, ...)
  if a.start_factor > 1 or a.start_factor <= 0 then
    fail('LinearLR: starting multiplicative factor expected to be greater than 0 and less or equal to 1, got '
         .. a.start_factor)
  end
  if a.end_factor > 1 or a.end_factor < 0 then
    fail('LinearLR: ending multiplicative factor expected to be between 0 and 1, got ' .. a.end_factor)
  end
  self.start_factor, self.end_factor, self.total_iters = a.start_factor, a.end_factor, a.total_iters
  LRScheduler.__init(self, opt, a.last_epoch)
end
function LinearLR:get_lr()
  local res = lrs_of(self.optimizer)
  local s, e, n, t = self.start_factor, self.end_factor, self.total_iters, self.last_epoch
  if t == 0 then
    for i, lr in ipairs(res) do res[i] = lr * s end
    return res
  end
  if self._is_initial or t > n then return res end
  for i, lr in ipairs(res) do
    res[i] = lr * (1 + (e - s) / (n * s + (t - 1) * (e - s)))
  end
  return res
end
function LinearLR:_get_closed_form_lr()
  local s, e, n = self.start_factor, self.end_factor, self.total_iters
  local res = {}
  for i, base in ipairs(self.base_lrs) do
    res[i] = base * (s + (e - s) * math.min(n, self.last_epoch) / n)
  end
  return res
end

------------------------------------------------------------------ ExponentialLR
--- ExponentialLR(opt, gamma): lr * gamma every epoch.
local ExponentialLR = LRScheduler:subclass('ExponentialLR')
--- lr_scheduler.ExponentialLR(opt, gamma): lr times gamma every step.
-- @function lr_scheduler.ExponentialLR
M.ExponentialLR = ExponentialLR
function ExponentialLR:__init(opt, ...)
  local a = args('ExponentialLR', {{'gamma', REQUIRED}, {'last_epoch', -1}}, ...)
  U.check_number('ExponentialLR', 'gamma', a.gamma)
  self.gamma = a.gamma
  LRScheduler.__init(self, opt, a.last_epoch)
end
function ExponentialLR:get_lr()
  local res = lrs_of(self.optimizer)
  if self._is_initial then return res end
  for i, lr in ipairs(res) do res[i] = lr * self.gamma end
  return res
end
function ExponentialLR:_get_closed_form_lr()
  local res = {}
  for i, base in ipairs(self.base_lrs) do res[i] = base * self.gamma ^ self.last_epoch end
  return res
end

------------------------------------------------------------------ PolynomialLR
--- PolynomialLR(opt, {total_iters = 5, power = 1}): lr * (1 - t / total_iters)^power.
local PolynomialLR = LRScheduler:subclass('PolynomialLR')
--- lr_scheduler.PolynomialLR(opt, {total_iters = 5, power = 1}): lr decays polynomially to 0 over total_iters steps.
-- @function lr_scheduler.PolynomialLR
M.PolynomialLR = PolynomialLR
function PolynomialLR:__init(opt, ...)
  local a = args('PolynomialLR', {{'total_iters', 5}, {'power', 1}, {'last_epoch', -1}}, ...)
  self.total_iters, self.power = a.total_iters, a.power
  LRScheduler.__init(self, opt, a.last_epoch)
end
function PolynomialLR:get_lr()
  local res = lrs_of(self.optimizer)
  local t, n = self.last_epoch, self.total_iters
  if self._is_initial or t > n then return res end
  local f = ((1 - t / n) / (1 - (t - 1) / n)) ^ self.power
  for i, lr in ipairs(res) do res[i] = lr * f end
  return res
end
function PolynomialLR:_get_closed_form_lr()
  local res = {}
  local n = self.total_iters
  for i, base in ipairs(self.base_lrs) do
    res[i] = base * (1 - math.min(n, self.last_epoch) / n) ^ self.power
  end
  return res
end

------------------------------------------------------------------ CosineAnnealingLR
--- Cosine annealing of the lr from its initial value to eta_min over T_max
-- epochs: `flow.optim.lr_scheduler.CosineAnnealingLR(opt, {T_max = 100})`.
-- step() uses PyTorch's recursive form
--   lr_t = eta_min + (lr_{t-1} - eta_min) * (1 + cos(pi t / T_max)) / (1 + cos(pi (t-1) / T_max))
-- (which follows the closed form eta_min + (base - eta_min)(1 + cos(pi t / T_max)) / 2
-- while nothing else changes the lr, and continues as a cosine wave past T_max).
-- @function flow.optim.lr_scheduler.CosineAnnealingLR
-- @tparam Optimizer opt
-- @param ... T_max (and eta_min) positionally, or `{T_max =, eta_min = 0, last_epoch = -1}`

local CosineAnnealingLR = LRScheduler:subclass('CosineAnnealingLR')
M.CosineAnnealingLR = CosineAnnealingLR
function CosineAnnealingLR:__init(opt, ...)
  local a = args('CosineAnnealingLR', {{'T_max', REQUIRED}, {'eta_min', 0}, {'last_epoch', -1}}, ...)
  U.check_number('CosineAnnealingLR', 'T_max', a.T_max)
  if a.T_max <= 0 then fail('CosineAnnealingLR: T_max must be positive, got ' .. a.T_max) end
  self.T_max, self.eta_min = a.T_max, a.eta_min
  LRScheduler.__init(self, opt, a.last_epoch)
end
function CosineAnnealingLR:get_lr()
  local groups, res = self.optimizer.param_groups, {}
  local t, T, eta = self.last_epoch, self.T_max, self.eta_min
  if self._is_initial then return lrs_of(self.optimizer) end
  if self._step_count == 1 and t > 0 then
    for i, base in ipairs(self.base_lrs) do
      res[i] = eta + (base - eta) * (1 + math.cos(t * math.pi / T)) / 2
    end
  elseif (t - 1 - T) % (2 * T) == 0 then
    for i, base in ipairs(self.base_lrs) do
      res[i] = groups[i].lr + (base - eta) * (1 - math.cos(math.pi / T)) / 2
    end
  else
    for i, g in ipairs(groups) do
      res[i] = (1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T)) * (g.lr - eta) + eta
    end
  end
  return res
end
function CosineAnnealingLR:_get_closed_form_lr()
  local res = {}
  local t, T, eta = self.last_epoch, self.T_max, self.eta_min
  for i, base in ipairs(self.base_lrs) do
    res[i] = eta + (base - eta) * (1 + math.cos(math.pi * t / T)) / 2
  end
  return res
end

------------------------------------------------------------------ CosineAnnealingWarmRestarts
--- CosineAnnealingWarmRestarts(opt, T_0, {T_mult = 1, eta_min = 0}): SGDR;
-- step(epoch) accepts fractional epochs (epoch + i / iters).
local WarmRestarts = LRScheduler:subclass('CosineAnnealingWarmRestarts')
--- lr_scheduler.CosineAnnealingWarmRestarts(opt, {T_0 =, T_mult = 1, eta_min = 0}): cosine annealing restarted
-- every T_i epochs.
-- @function lr_scheduler.CosineAnnealingWarmRestarts
M.CosineAnnealingWarmRestarts = WarmRestarts
function WarmRestarts:__init(opt, ...)
  local name = 'CosineAnnealingWarmRestarts'
  local a = args(name, {{'T_0', REQUIRED}, {'T_mult', 1}, {'eta_min', 0}, {'last_epoch', -1}}, ...)
  if type(a.T_0) ~= 'number' or a.T_0 <= 0 or a.T_0 % 1 ~= 0 then
    fail(('%s: expected positive integer T_0, but got %s'):format(name, tostring(a.T_0)))
  end
  if type(a.T_mult) ~= 'number' or a.T_mult < 1 or a.T_mult % 1 ~= 0 then
    fail(('%s: expected integer T_mult >= 1, but got %s'):format(name, tostring(a.T_mult)))
  end
  U.check_number(name, 'eta_min', a.eta_min)
  self.T_0, self.T_i, self.T_mult, self.eta_min = a.T_0, a.T_0, a.T_mult, a.eta_min
  self.T_cur = a.last_epoch
  LRScheduler.__init(self, opt, a.last_epoch)
end
function WarmRestarts:get_lr()
  local res = {}
  for i, base in ipairs(self.base_lrs) do
    res[i] = self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
  end
  return res
end
function WarmRestarts:step(epoch)
  if epoch == nil and self.last_epoch < 0 then epoch = 0 end
  if epoch == nil then
    epoch = self.last_epoch + 1
    self.T_cur = self.T_cur + 1
    if self.T_cur >= self.T_i then
      self.T_cur = self.T_cur % self.T_i
      self.T_i = self.T_i * self.T_mult
    end
  else
    if epoch < 0 then fail('CosineAnnealingWarmRestarts: expected non-negative epoch, but got ' .. epoch) end
    if epoch >= self.T_0 then
      if self.T_mult == 1 then
        self.T_cur = epoch % self.T_0
      else
        local n = math.floor(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1) / math.log(self.T_mult))
        self.T_cur = epoch - self.T_0 * (self.T_mult ^ n - 1) / (self.T_mult - 1)
        self.T_i = self.T_0 * self.T_mult ^ n
      end
    else
      self.T_i = self.T_0
      self.T_cur = epoch
    end
  end
  self.last_epoch = math.floor(epoch)
  local values = self:get_lr()
  for i, g in ipairs(self.optimizer.param_groups) do g.lr = values[i] end
  self._last_lr = lrs_of(self.optimizer)
end

------------------------------------------------------------------ OneCycleLR
--- OneCycleLR(opt, max_lr, {total_steps = n} or {epochs =, steps_per_epoch =},
-- pct_start = 0.3, anneal_strategy = 'cos', cycle_momentum = true,
-- base_momentum = 0.85, max_momentum = 0.95, div_factor = 25,
-- final_div_factor = 1e4, three_phase = false). Momentum (or beta1 of
-- Adam-style optimizers) cycles inversely to the lr.
local OneCycleLR = LRScheduler:subclass('OneCycleLR')
--- lr_scheduler.OneCycleLR(opt, {max_lr =, total_steps = or epochs =, steps_per_epoch =, pct_start = 0.3,
-- anneal_strategy = 'cos', ...}): the 1cycle policy.
-- @function lr_scheduler.OneCycleLR
M.OneCycleLR = OneCycleLR
function OneCycleLR:__init(opt, ...)
  local name = 'OneCycleLR'
  local a = args(name, {
    {'max_lr', REQUIRED}, {'total_steps', nil}, {'epochs', nil}, {'steps_per_epoch', nil},
    {'pct_start', 0.3}, {'anneal_strategy', 'cos'}, {'cycle_momentum', true},
    {'base_momentum', 0.85}, {'max_momentum', 0.95}, {'div_factor', 25},
    {'final_div_factor', 1e4}, {'three_phase', false}, {'last_epoch', -1},
  }, ...)
  check_optimizer(name, opt)
  local function positive_int(what, v)
    if type(v) ~= 'number' or v <= 0 or v % 1 ~= 0 then
      fail(('%s: expected positive integer %s, but got %s'):format(name, what, tostring(v)))
    end
  end
  if a.total_steps ~= nil then
    positive_int('total_steps', a.total_steps)
    self.total_steps = a.total_steps
  elseif a.epochs ~= nil and a.steps_per_epoch ~= nil then
    positive_int('epochs', a.epochs)
    positive_int('steps_per_epoch', a.steps_per_epoch)
    self.total_steps = a.epochs * a.steps_per_epoch
  else
    fail(name .. ': you must define either total_steps OR (epochs AND steps_per_epoch)')
  end
  local pct, n = a.pct_start, self.total_steps
  if type(pct) ~= 'number' or pct < 0 or pct > 1 then
    fail(('%s: expected pct_start between 0 and 1, but got %s'):format(name, tostring(pct)))
  end
  if a.three_phase then
    self._schedule_phases = {
      {end_step = pct * n - 1, start_lr = 'initial_lr', end_lr = 'max_lr',
       start_momentum = 'max_momentum', end_momentum = 'base_momentum'},
      {end_step = 2 * pct * n - 2, start_lr = 'max_lr', end_lr = 'initial_lr',
       start_momentum = 'base_momentum', end_momentum = 'max_momentum'},
      {end_step = n - 1, start_lr = 'initial_lr', end_lr = 'min_lr',
       start_momentum = 'max_momentum', end_momentum = 'max_momentum'},
    }
  else
    self._schedule_phases = {
      {end_step = pct * n - 1, start_lr = 'initial_lr', end_lr = 'max_lr',
       start_momentum = 'max_momentum', end_momentum = 'base_momentum'},
      {end_step = n - 1, start_lr = 'max_lr', end_lr = 'min_lr',
       start_momentum = 'base_momentum', end_momentum = 'max_momentum'},
    }
  end
  if a.anneal_strategy ~= 'cos' and a.anneal_strategy ~= 'linear' then
    fail(("%s: anneal_strategy must be one of 'cos' or 'linear', instead got %s")
         :format(name, tostring(a.anneal_strategy)))
  end
  self._anneal_func_type = a.anneal_strategy
  local max_lrs = per_group(name, 'max_lr', opt, a.max_lr)
  if a.last_epoch == -1 then
    for i, g in ipairs(opt.param_groups) do
      g.initial_lr = max_lrs[i] / a.div_factor
      g.max_lr = max_lrs[i]
      g.min_lr = g.initial_lr / a.final_div_factor
    end
  end
  self.cycle_momentum = a.cycle_momentum
  if self.cycle_momentum then
    local defaults = opt.defaults or {}
    if defaults.momentum == nil and defaults.betas == nil then
      fail(name .. ': optimizer must support momentum or beta1 with `cycle_momentum` option enabled')
    end
    self.use_beta1 = defaults.betas ~= nil
    local max_m = per_group(name, 'max_momentum', opt, a.max_momentum)
    local base_m = per_group(name, 'base_momentum', opt, a.base_momentum)
    if a.last_epoch == -1 then
      for i, g in ipairs(opt.param_groups) do
        if self.use_beta1 then
          g.betas = {max_m[i], g.betas[2]}
        else
          g.momentum = max_m[i]
        end
        g.max_momentum = max_m[i]
        g.base_momentum = base_m[i]
      end
    end
  end
  LRScheduler.__init(self, opt, a.last_epoch)
end

local function anneal(kind, start, stop, pct)
  if kind == 'cos' then
    return stop + (start - stop) / 2 * (math.cos(math.pi * pct) + 1)
  end
  return (stop - start) * pct + start
end

function OneCycleLR:get_lr()
  local step_num = self.last_epoch
  if step_num > self.total_steps then
    fail(('OneCycleLR: tried to step %d times; the specified number of total steps is %d')
         :format(step_num, self.total_steps))
  end
  local res, phases = {}, self._schedule_phases
  for gi, g in ipairs(self.optimizer.param_groups) do
    local start_step, lr, mom = 0, nil, nil
    for i, ph in ipairs(phases) do
      local end_step = ph.end_step
      if step_num <= end_step or i == #phases then
        local pct = (step_num - start_step) / (end_step - start_step)
        lr = anneal(self._anneal_func_type, g[ph.start_lr], g[ph.end_lr], pct)
        if self.cycle_momentum then
          mom = anneal(self._anneal_func_type, g[ph.start_momentum], g[ph.end_momentum], pct)
        end
        break
      end
      start_step = ph.end_step
    end
    res[gi] = lr
    if self.cycle_momentum then
      if self.use_beta1 then g.betas = {mom, g.betas[2]} else g.momentum = mom end
    end
  end
  return res
end

------------------------------------------------------------------ CyclicLR
--- CyclicLR(opt, base_lr, max_lr, {step_size_up = 2000, step_size_down = nil,
-- mode = 'triangular', gamma = 1, scale_fn = nil, scale_mode = 'cycle',
-- cycle_momentum = true, base_momentum = 0.8, max_momentum = 0.9}): the lr
-- goes from base_lr up to max_lr in step_size_up steps and back down in
-- step_size_down (default step_size_up) steps, the amplitude scaled by
-- mode ('triangular': 1, 'triangular2': halved each cycle, 'exp_range':
-- gamma^iteration) or by scale_fn(x), x the cycle number (scale_mode =
-- 'cycle', from 1) or the iteration ('iterations'). Meant to be stepped
-- after every batch. With cycle_momentum the momentum (or beta1 of an
-- Adam-style optimizer, as PyTorch 2) moves inversely between max_momentum
-- and base_momentum. base_lr, max_lr and the momenta may be per-group lists.
-- A scale_fn is not saved by state_dict (as PyTorch does for functions).
local CyclicLR = LRScheduler:subclass('CyclicLR')
--- lr_scheduler.CyclicLR(opt, {base_lr =, max_lr =, step_size_up = 2000, mode = 'triangular', ...}): the lr
-- cycles between base_lr and max_lr.
-- @function lr_scheduler.CyclicLR
M.CyclicLR = CyclicLR
function CyclicLR:__init(opt, ...)
  local name = 'CyclicLR'
  local a = args(name, {
    {'base_lr', REQUIRED}, {'max_lr', REQUIRED}, {'step_size_up', 2000}, {'step_size_down', nil},
    {'mode', 'triangular'}, {'gamma', 1}, {'scale_fn', nil}, {'scale_mode', 'cycle'},
    {'cycle_momentum', true}, {'base_momentum', 0.8}, {'max_momentum', 0.9}, {'last_epoch', -1},
  }, ...)
  check_optimizer(name, opt)
  local base_lrs = per_group(name, 'base_lr', opt, a.base_lr)
  if a.last_epoch == -1 then
    for i, g in ipairs(opt.param_groups) do g.lr = base_lrs[i] end
  end
  self.max_lrs = per_group(name, 'max_lr', opt, a.max_lr)
  U.check_number(name, 'step_size_up', a.step_size_up)
  local up = a.step_size_up
  local down = a.step_size_down
  if down == nil then down = up end
  U.check_number(name, 'step_size_down', down)
  if up + down <= 0 then
    fail(('%s: step_size_up + step_size_down must be positive, got %s'):format(name, tostring(up + down)))
  end
  self.total_size = up + down
  self.step_ratio = up / self.total_size
  local mode, scale_fn = a.mode, a.scale_fn
  if scale_fn == nil and mode ~= 'triangular' and mode ~= 'triangular2' and mode ~= 'exp_range' then
    fail(("%s: mode is invalid and scale_fn is nil (mode must be 'triangular', 'triangular2' or " ..
          "'exp_range', got %s)"):format(name, tostring(mode)))
  end
  self.mode, self.gamma = mode, a.gamma
  if scale_fn ~= nil then
    if type(scale_fn) ~= 'function' and not (type(scale_fn) == 'table' and getmetatable(scale_fn)
                                              and getmetatable(scale_fn).__call) then
      fail(('%s: scale_fn should be a function, got %s'):format(name, type(scale_fn)))
    end
    self._scale_fn_custom = scale_fn
    self.scale_mode = a.scale_mode
  else
    self.scale_mode = mode == 'exp_range' and 'iterations' or 'cycle'
  end
  self.cycle_momentum = a.cycle_momentum
  if self.cycle_momentum then
    local defaults = opt.defaults or {}
    if defaults.momentum == nil and defaults.betas == nil then
      fail(name .. ': optimizer must support momentum or beta1 with `cycle_momentum` option enabled')
    end
    self.use_beta1 = defaults.momentum == nil
    local base_m = per_group(name, 'base_momentum', opt, a.base_momentum)
    if a.last_epoch == -1 then
      for i, g in ipairs(opt.param_groups) do
        if self.use_beta1 then g.betas = {base_m[i], g.betas[2]} else g.momentum = base_m[i] end
      end
    end
    self.base_momentums = {}
    for i, g in ipairs(opt.param_groups) do
      self.base_momentums[i] = self.use_beta1 and g.betas[1] or g.momentum
    end
    self.max_momentums = per_group(name, 'max_momentum', opt, a.max_momentum)
  end
  LRScheduler.__init(self, opt, a.last_epoch)
  self.base_lrs = base_lrs
end

function CyclicLR:scale_fn(x)
  if self._scale_fn_custom ~= nil then return self._scale_fn_custom(x) end
  if self.mode == 'triangular' then return 1 end
  if self.mode == 'triangular2' then return 1 / 2 ^ (x - 1) end
  return self.gamma ^ x
end

function CyclicLR:get_lr()
  local cycle = math.floor(1 + self.last_epoch / self.total_size)
  local x = 1 + self.last_epoch / self.total_size - cycle
  local scale_factor
  if x <= self.step_ratio then
    scale_factor = x / self.step_ratio
  else
    scale_factor = (x - 1) / (self.step_ratio - 1)
  end
  -- scale_fn is called once per value, as PyTorch does
  local at = self.scale_mode == 'cycle' and cycle or self.last_epoch
  local res = {}
  for i, base in ipairs(self.base_lrs) do
    res[i] = base + (self.max_lrs[i] - base) * scale_factor * self:scale_fn(at)
  end
  if self.cycle_momentum then
    for i, g in ipairs(self.optimizer.param_groups) do
      local max_m = self.max_momentums[i]
      local m = max_m - (max_m - self.base_momentums[i]) * scale_factor * self:scale_fn(at)
      if self.use_beta1 then g.betas = {m, g.betas[2]} else g.momentum = m end
    end
  end
  return res
end

function CyclicLR:state_dict()
  local sd = LRScheduler.state_dict(self)
  sd._scale_fn_custom = nil
  return sd
end

------------------------------------------------------------------ ReduceLROnPlateau
--- ReduceLROnPlateau(opt, {mode = 'min', factor = 0.1, patience = 10,
-- threshold = 1e-4, threshold_mode = 'rel', cooldown = 0, min_lr = 0,
-- eps = 1e-8}); sched:step(metric) with a number or a one-element tensor.
local Plateau = LRScheduler:subclass('ReduceLROnPlateau')
--- lr_scheduler.ReduceLROnPlateau(opt, {mode = 'min', factor = 0.1, patience = 10, threshold = 1e-4, cooldown =
-- 0, min_lr = 0}): lowers lr when :step(metric) stops improving.
-- @function lr_scheduler.ReduceLROnPlateau
M.ReduceLROnPlateau = Plateau
function Plateau:__init(opt, ...)
  local name = 'ReduceLROnPlateau'
  local a = args(name, {
    {'mode', 'min'}, {'factor', 0.1}, {'patience', 10}, {'threshold', 1e-4},
    {'threshold_mode', 'rel'}, {'cooldown', 0}, {'min_lr', 0}, {'eps', 1e-8},
  }, ...)
  U.check_number(name, 'factor', a.factor)
  if a.factor >= 1 then fail(name .. ': factor should be < 1.0, got ' .. a.factor) end
  check_optimizer(name, opt)
  self.factor = a.factor
  self.optimizer = opt
  if type(a.min_lr) == 'table' then
    if #a.min_lr ~= #opt.param_groups then
      fail(('%s: expected %d min_lrs, got %d'):format(name, #opt.param_groups, #a.min_lr))
    end
    self.default_min_lr = nil
    self.min_lrs = U.copy(a.min_lr)
  else
    self.default_min_lr = a.min_lr
    self.min_lrs = per_group(name, 'min_lr', opt, a.min_lr)
  end
  self.patience, self.cooldown, self.eps = a.patience, a.cooldown, a.eps
  self.last_epoch = 0
  self._last_lr = lrs_of(opt)
  self:_init_is_better(a.mode, a.threshold, a.threshold_mode)
  self:_reset()
end

function Plateau:_init_is_better(mode, threshold, threshold_mode)
  if mode ~= 'min' and mode ~= 'max' then fail('ReduceLROnPlateau: mode ' .. tostring(mode) .. ' is unknown!') end
  if threshold_mode ~= 'rel' and threshold_mode ~= 'abs' then
    fail('ReduceLROnPlateau: threshold mode ' .. tostring(threshold_mode) .. ' is unknown!')
  end
  self.mode_worse = mode == 'min' and math.huge or -math.huge
  self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
end

function Plateau:_reset()
  self.best = self.mode_worse
  self.cooldown_counter = 0
  self.num_bad_epochs = 0
end

function Plateau:is_better(a, best)
  if self.mode == 'min' and self.threshold_mode == 'rel' then return a < best * (1 - self.threshold) end
  if self.mode == 'min' then return a < best - self.threshold end
  if self.threshold_mode == 'rel' then return a > best * (self.threshold + 1) end
  return a > best + self.threshold
end

function Plateau:in_cooldown() return self.cooldown_counter > 0 end

function Plateau:step(metrics, epoch)
  local current = metrics
  if U.is_tensor(current) then current = current:item() end
  if type(current) ~= 'number' then
    fail('ReduceLROnPlateau: step expects a number or a one-element tensor, got ' .. type(metrics))
  end
  epoch = epoch or self.last_epoch + 1
  self.last_epoch = epoch
  if self:is_better(current, self.best) then
    self.best = current
    self.num_bad_epochs = 0
  else
    self.num_bad_epochs = self.num_bad_epochs + 1
  end
  if self:in_cooldown() then
    self.cooldown_counter = self.cooldown_counter - 1
    self.num_bad_epochs = 0
  end
  if self.num_bad_epochs > self.patience then
    self:_reduce_lr()
    self.cooldown_counter = self.cooldown
    self.num_bad_epochs = 0
  end
  self._last_lr = lrs_of(self.optimizer)
end

function Plateau:_reduce_lr()
  local groups = self.optimizer.param_groups
  if #groups ~= #self.min_lrs then
    if self.default_min_lr == nil then
      fail(('ReduceLROnPlateau: the number of param groups in the optimizer (%d) differs from when ' ..
            'it was initialized (%d); set min_lrs to match'):format(#groups, #self.min_lrs))
    end
    self.min_lrs = per_group('ReduceLROnPlateau', 'min_lr', self.optimizer, self.default_min_lr)
  end
  for i, g in ipairs(groups) do
    local old = g.lr
    local new = math.max(old * self.factor, self.min_lrs[i])
    if old - new > self.eps then g.lr = new end
  end
end

function Plateau:load_state_dict(sd)
  LRScheduler.load_state_dict(self, sd)
  self:_init_is_better(self.mode, self.threshold, self.threshold_mode)
end

------------------------------------------------------------------ SequentialLR / ChainedScheduler
local function check_schedulers(name, opt, list)
  if type(list) ~= 'table' or #list < 1 then
    fail(name .. ' expects at least one scheduler, but got no scheduler')
  end
  for i, s in ipairs(list) do
    if type(s) ~= 'table' or s.optimizer == nil then
      fail(('%s: scheduler at index %d should have an optimizer field'):format(name, i))
    end
    if U.isinstance(s, Plateau) then
      fail(('%s does not support ReduceLROnPlateau, which needs a metric in step ' ..
            '(got one at index %d)'):format(name, i))
    end
    if s.optimizer ~= opt then
      fail(('%s expects all schedulers to belong to the same optimizer, but scheduler %s at index %d ' ..
            'has another one'):format(name, s.__name, i))
    end
  end
end

local function undo(s)
  if s._schedulers then
    for _, c in ipairs(s._schedulers) do undo(c) end
  elseif s.last_epoch then
    s.last_epoch = s.last_epoch - 1
  end
end

local function nested_state_dict(self)
  local sd = {}
  for k, v in pairs(self) do
    if k ~= 'optimizer' and k ~= '_schedulers' and type(v) ~= 'function' then sd[k] = U.copy(v) end
  end
  sd._schedulers = {}
  for i, s in ipairs(self._schedulers) do sd._schedulers[i] = s:state_dict() end
  return sd
end

local function nested_load_state_dict(self, sd)
  for k, v in pairs(sd) do
    if k ~= '_schedulers' and k ~= 'optimizer' then self[k] = U.copy(v) end
  end
  for i, s in ipairs(sd._schedulers or {}) do self._schedulers[i]:load_state_dict(s) end
end

--- SequentialLR(opt, {s1, s2, ...}, {milestones = {m1, ...}}): runs s1 until
-- epoch m1, then s2 (restarted at its epoch 0), and so on.
local SequentialLR = LRScheduler:subclass('SequentialLR')
--- lr_scheduler.SequentialLR(opt, schedulers, milestones): runs the schedulers one after the other, switching at
-- the milestones.
-- @function lr_scheduler.SequentialLR
M.SequentialLR = SequentialLR
function SequentialLR:__init(opt, ...)
  local name = 'SequentialLR'
  local a = args(name, {{'schedulers', REQUIRED}, {'milestones', REQUIRED}, {'last_epoch', -1}}, ...)
  check_optimizer(name, opt)
  check_schedulers(name, opt, a.schedulers)
  if type(a.milestones) ~= 'table' or #a.milestones ~= #a.schedulers - 1 then
    fail(('%s expects the number of schedulers to be one more than the number of milestones, ' ..
          'but got %d schedulers and %d milestones'):format(
          name, #a.schedulers, type(a.milestones) == 'table' and #a.milestones or 0))
  end
  self._schedulers = a.schedulers
  self._milestones = U.copy(a.milestones)
  self.last_epoch = a.last_epoch + 1
  self.optimizer = opt
  for _, g in ipairs(opt.param_groups) do g.lr = g.initial_lr end
  undo(self)
  self._schedulers[1]:_initial_step()
  self._last_lr = self._schedulers[1]:get_last_lr()
end

function SequentialLR:step()
  self.last_epoch = self.last_epoch + 1
  local idx = 0   -- bisect_right: milestones passed
  for _, m in ipairs(self._milestones) do if m <= self.last_epoch then idx = idx + 1 end end
  local s = self._schedulers[idx + 1]
  if idx > 0 and self._milestones[idx] == self.last_epoch then
    s:_update_lr(0)
  else
    s:step()
  end
  self._last_lr = s:get_last_lr()
end
SequentialLR.state_dict = nested_state_dict
SequentialLR.load_state_dict = nested_load_state_dict

--- ChainedScheduler({s1, s2, ...}[, opt]): steps every scheduler each step.
local ChainedScheduler = LRScheduler:subclass('ChainedScheduler')
--- lr_scheduler.ChainedScheduler(schedulers): steps every scheduler in the list at once.
-- @function lr_scheduler.ChainedScheduler
M.ChainedScheduler = ChainedScheduler
function ChainedScheduler:__init(schedulers, opt)
  local name = 'ChainedScheduler'
  if type(schedulers) ~= 'table' or #schedulers < 1 then
    fail(name .. ' expects at least one scheduler to be chained, but got no scheduler')
  end
  opt = opt or schedulers[1].optimizer
  check_schedulers(name, opt, schedulers)
  self._schedulers = schedulers
  self.optimizer = opt
  self._last_lr = lrs_of(opt)
end
function ChainedScheduler:step()
  for _, s in ipairs(self._schedulers) do s:step() end
  self._last_lr = lrs_of(self.optimizer)
end
ChainedScheduler.state_dict = nested_state_dict
ChainedScheduler.load_state_dict = nested_load_state_dict

return M
