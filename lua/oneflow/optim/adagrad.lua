-- oneflow.optim.Adagrad: the same update as torch.optim.Adagrad:
--   t = t + 1; g = grad (negated when maximize) + weight_decay * p
--   clr = lr / (1 + (t - 1) * lr_decay)
--   sum = sum + g * g;  p = p - clr * g / (sqrt(sum) + eps)
-- As in PyTorch, state (step = 0, sum = initial_accumulator_value) is made
-- for every parameter when it joins the optimizer.
local Optimizer = require 'oneflow.optim.optimizer'
local T = require 'oneflow.tensor'
local U = require 'oneflow.optim._util'

local Adagrad = Optimizer:subclass('Adagrad')
Adagrad.hyper = {
  {'lr', 1e-2}, {'lr_decay', 0}, {'weight_decay', 0}, {'initial_accumulator_value', 0},
  {'eps', 1e-10}, {'maximize', false, kw = true},
}

--- Adagrad(params, {lr = 1e-2, lr_decay = 0, weight_decay = 0,
--  initial_accumulator_value = 0, eps = 1e-10, maximize = false})
function Adagrad:__init(params, ...)
  self:_construct(params, ...)
end

function Adagrad.validate(_, g)
  U.check_nonneg('Adagrad', 'learning rate', g.lr)
  U.check_nonneg('Adagrad', 'lr_decay value', g.lr_decay)
  U.check_nonneg('Adagrad', 'weight_decay value', g.weight_decay)
  U.check_nonneg('Adagrad', 'initial_accumulator_value value', g.initial_accumulator_value)
  U.check_nonneg('Adagrad', 'epsilon value', g.eps)
end

function Adagrad:_init_group_state(group)
  for _, p in ipairs(group.params) do
    if self.state[p] == nil then
      self.state[p] = {step = 0, sum = T.flow.full_like(p, group.initial_accumulator_value)}
    end
  end
end

function Adagrad:_step_group(group)
  local lr, lr_decay, wd, eps = group.lr, group.lr_decay, group.weight_decay, group.eps
  local maximize = group.maximize
  for _, p in ipairs(group.params) do
    local grad = p.grad
    if grad ~= nil then
      local state = self.state[p]
      if state == nil or state.sum == nil then
        state = {step = 0, sum = T.flow.full_like(p, group.initial_accumulator_value)}
        self.state[p] = state
      end
      state.step = state.step + 1
      local step = state.step
      if maximize then grad = -grad end
      if wd ~= 0 then grad = grad + p * wd end
      local clr = lr / (1 + (step - 1) * lr_decay)
      U.addcmul_(state.sum, grad, grad, 1)
      local std = state.sum:sqrt():add_(eps)
      U.addcdiv_(p, grad, std, -clr)
    end
  end
end

return Adagrad
