-- oneflow.optim.Adadelta: the same update as torch.optim.Adadelta (1.13):
--   g = grad (negated when maximize) + weight_decay * p
--   v = rho * v + (1 - rho) * g * g
--   delta = sqrt(u + eps) / sqrt(v + eps) * g
--   u = rho * u + (1 - rho) * delta * delta
--   p = p - lr * delta
-- State: step, square_avg (v), acc_delta (u), as PyTorch names them.
local Optimizer = require 'oneflow.optim.optimizer'
local T = require 'oneflow.tensor'
local U = require 'oneflow.optim._util'

local Adadelta = Optimizer:subclass('Adadelta')
Adadelta.hyper = {
  {'lr', 1.0}, {'rho', 0.9}, {'eps', 1e-6}, {'weight_decay', 0}, {'maximize', false, kw = true},
}

--- Adadelta(params, {lr = 1.0, rho = 0.9, eps = 1e-6, weight_decay = 0, maximize = false})
function Adadelta:__init(params, ...)
  self:_construct(params, ...)
end

function Adadelta.validate(_, g)
  U.check_nonneg('Adadelta', 'learning rate', g.lr)
  U.check_number('Adadelta', 'rho value', g.rho)
  if not (g.rho >= 0 and g.rho <= 1) then U.fail('Adadelta: invalid rho value ' .. tostring(g.rho)) end
  U.check_nonneg('Adadelta', 'epsilon value', g.eps)
  U.check_nonneg('Adadelta', 'weight_decay value', g.weight_decay)
end

function Adadelta:_step_group(group)
  local lr, rho, eps = group.lr, group.rho, group.eps
  local zeros_like = T.flow.zeros_like
  U.each_grad(self, group, 'square_avg', function(p)
    return {square_avg = zeros_like(p), acc_delta = zeros_like(p)}
  end, function(p, grad, state)
    local square_avg, acc_delta = state.square_avg, state.acc_delta
    square_avg:mul_(rho)
    U.addcmul_(square_avg, grad, grad, 1 - rho)
    local std = (square_avg + eps):sqrt_()
    local delta = (acc_delta + eps):sqrt_():div_(std):mul_(grad)
    acc_delta:mul_(rho)
    U.addcmul_(acc_delta, delta, delta, 1 - rho)
    U.add_(p, delta, -lr)
  end)
end

return Adadelta
