-- oneflow.optim.RMSprop: the same update as torch.optim.RMSprop:
--   g = grad (negated when maximize) + weight_decay * p
--   v = alpha * v + (1 - alpha) * g * g
--   centered: ga = lerp(ga, g, 1 - alpha); avg = sqrt(v - ga * ga) + eps
--   otherwise avg = sqrt(v) + eps
--   momentum > 0: buf = momentum * buf + g / avg; p = p - lr * buf
--   otherwise p = p - lr * g / avg
local Optimizer = require 'oneflow.optim.optimizer'
local T = require 'oneflow.tensor'
local U = require 'oneflow.optim._util'

local RMSprop = Optimizer:subclass('RMSprop')
RMSprop.hyper = {
  {'lr', 1e-2}, {'alpha', 0.99}, {'eps', 1e-8}, {'weight_decay', 0}, {'momentum', 0},
  {'centered', false}, {'maximize', false, kw = true},
}

--- RMSprop(params, {lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0,
--  momentum = 0, centered = false, maximize = false})
function RMSprop:__init(params, ...)
  self:_construct(params, ...)
end

function RMSprop.validate(_, g)
  U.check_nonneg('RMSprop', 'learning rate', g.lr)
  U.check_nonneg('RMSprop', 'epsilon value', g.eps)
  U.check_nonneg('RMSprop', 'momentum value', g.momentum)
  U.check_nonneg('RMSprop', 'weight_decay value', g.weight_decay)
  U.check_nonneg('RMSprop', 'alpha value', g.alpha)
end

function RMSprop:_step_group(group)
  local lr, alpha, eps, wd = group.lr, group.alpha, group.eps, group.weight_decay
  local momentum, centered, maximize = group.momentum, group.centered, group.maximize
  local zeros_like = T.flow.zeros_like
  for _, p in ipairs(group.params) do
    local grad = p.grad
    if grad ~= nil then
      local state = self.state[p]
      if state == nil or state.square_avg == nil then
        state = {step = 0, square_avg = zeros_like(p)}
        self.state[p] = state
      end
      if momentum > 0 and state.momentum_buffer == nil then state.momentum_buffer = zeros_like(p) end
      if centered and state.grad_avg == nil then state.grad_avg = zeros_like(p) end
      if maximize then grad = -grad end
      state.step = state.step + 1
      if wd ~= 0 then grad = grad + p * wd end
      local square_avg = state.square_avg
      square_avg:mul_(alpha)
      U.addcmul_(square_avg, grad, grad, 1 - alpha)
      local avg
      if centered then
        local grad_avg = state.grad_avg
        U.lerp_(grad_avg, grad, 1 - alpha)
        avg = square_avg:clone()
        U.addcmul_(avg, grad_avg, grad_avg, -1)
        avg:sqrt_()
      else
        avg = square_avg:sqrt()
      end
      avg:add_(eps)
      if momentum > 0 then
        local buf = state.momentum_buffer
        buf:mul_(momentum)
        U.addcdiv_(buf, grad, avg, 1)
        U.add_(p, buf, -lr)
      else
        U.addcdiv_(p, grad, avg, -lr)
      end
    end
  end
end

return RMSprop
