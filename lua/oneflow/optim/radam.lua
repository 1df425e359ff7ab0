-- oneflow.optim.RAdam: the same update as torch.optim.RAdam (1.13),
-- rectified Adam:
--   g = grad + weight_decay * p; t = t + 1
--   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
--   rho_inf = 2 / (1 - beta2) - 1;  rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t)
--   rho_t > 5: r = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))
--              p = p - lr * m / (1 - beta1^t) * sqrt(1 - beta2^t) / (sqrt(v) + eps) * r
--   otherwise  p = p - lr * m / (1 - beta1^t)
-- State: step, exp_avg, exp_avg_sq. PyTorch 1.13's RAdam has no maximize
-- option.
local Optimizer = require 'oneflow.optim.optimizer'
local T = require 'oneflow.tensor'
local U = require 'oneflow.optim._util'

local RAdam = Optimizer:subclass('RAdam')
RAdam.hyper = {
  {'lr', 1e-3}, {'betas', {0.9, 0.999}}, {'eps', 1e-8}, {'weight_decay', 0},
}

--- RAdam(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0})
function RAdam:__init(params, ...)
  self:_construct(params, ...)
end

function RAdam.validate(_, g)
  U.check_nonneg('RAdam', 'learning rate', g.lr)
  U.check_nonneg('RAdam', 'epsilon value', g.eps)
  U.check_betas('RAdam', g.betas)
  U.check_nonneg('RAdam', 'weight_decay value', g.weight_decay)
end

function RAdam:_step_group(group)
  local lr, eps = group.lr, group.eps
  local beta1, beta2 = group.betas[1], group.betas[2]
  local zeros_like = T.flow.zeros_like
  U.each_grad(self, group, 'exp_avg', function(p)
    return {exp_avg = zeros_like(p), exp_avg_sq = zeros_like(p)}
  end, function(p, grad, state, step)
    local bias_correction1 = 1 - beta1 ^ step
    local bias_correction2 = 1 - beta2 ^ step
    local exp_avg, exp_avg_sq = state.exp_avg, state.exp_avg_sq
    exp_avg:mul_(beta1)
    U.add_(exp_avg, grad, 1 - beta1)
    exp_avg_sq:mul_(beta2)
    U.addcmul_(exp_avg_sq, grad, grad, 1 - beta2)
    local corrected = exp_avg / bias_correction1
    local rho_inf = 2 / (1 - beta2) - 1
    local rho_t = rho_inf - 2 * step * (beta2 ^ step) / bias_correction2
    if rho_t > 5 then   -- the variance is tractable: rectified adaptive step
      local rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf
                             / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
      local adaptive_lr = math.sqrt(bias_correction2) / exp_avg_sq:sqrt():add_(eps)
      p:sub_((corrected * lr):mul_(adaptive_lr):mul_(rect))
    else
      p:sub_(corrected * lr)
    end
  end)
end

return RAdam
