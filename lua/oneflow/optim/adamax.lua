-- oneflow.optim.Adamax: the same update as torch.optim.Adamax (1.13), Adam
-- with the infinity norm:
--   g = grad (negated when maximize) + weight_decay * p; t = t + 1
--   m = beta1 * m + (1 - beta1) * g
--   u = max(beta2 * u, |g| + eps)
--   p = p - lr / (1 - beta1^t) * m / u
-- State: step, exp_avg (m), exp_inf (u), as PyTorch names them.
local Optimizer = require 'oneflow.optim.optimizer'
local T = require 'oneflow.tensor'
local U = require 'oneflow.optim._util'

local Adamax = Optimizer:subclass('Adamax')
Adamax.hyper = {
  {'lr', 2e-3}, {'betas', {0.9, 0.999}}, {'eps', 1e-8}, {'weight_decay', 0}, {'maximize', false, kw = true},
}

--- Adamax(params, {lr = 2e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0,
--  maximize = false})
function Adamax:__init(params, ...)
  self:_construct(params, ...)
end

function Adamax.validate(_, g)
  U.check_nonneg('Adamax', 'learning rate', g.lr)
  U.check_nonneg('Adamax', 'epsilon value', g.eps)
  U.check_betas('Adamax', g.betas)
  U.check_nonneg('Adamax', 'weight_decay value', g.weight_decay)
end

function Adamax:_step_group(group)
  local lr, eps = group.lr, group.eps
  local beta1, beta2 = group.betas[1], group.betas[2]
  local zeros_like = T.flow.zeros_like
  U.each_grad(self, group, 'exp_avg', function(p)
    return {exp_avg = zeros_like(p), exp_inf = zeros_like(p)}
  end, function(p, grad, state, step)
    local exp_avg, exp_inf = state.exp_avg, state.exp_inf
    exp_avg:mul_(beta1)
    U.add_(exp_avg, grad, 1 - beta1)
    exp_inf:mul_(beta2):maximum_(grad:abs():add_(eps))
    U.addcdiv_(p, exp_avg, exp_inf, -lr / (1 - beta1 ^ step))
  end)
end

return Adamax
