-- oneflow.optim.NAdam: the same update as torch.optim.NAdam (1.13), Adam
-- with Nesterov momentum and a momentum schedule:
--   g = grad + weight_decay * p; t = t + 1
--   mu_t = beta1 * (1 - 0.5 * 0.96^(t * momentum_decay)); mu_product = prod mu_1..mu_t
--   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
--   denom = sqrt(v / (1 - beta2^t)) + eps
--   p = p - lr (1 - mu_t) / (1 - mu_product) * g / denom
--         - lr mu_{t+1} / (1 - mu_product * mu_{t+1}) * m / denom
-- State: step, mu_product (numbers here, 0-d tensors in PyTorch; a loaded
-- tensor is read as its value), exp_avg, exp_avg_sq. PyTorch 1.13's NAdam
-- has no maximize option.
local Optimizer = require 'oneflow.optim.optimizer'
local T = require 'oneflow.tensor'
local U = require 'oneflow.optim._util'

local NAdam = Optimizer:subclass('NAdam')
NAdam.hyper = {
  {'lr', 2e-3}, {'betas', {0.9, 0.999}}, {'eps', 1e-8}, {'weight_decay', 0},
  {'momentum_decay', 4e-3},
}

--- NAdam(params, {lr = 2e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0,
--  momentum_decay = 4e-3})
function NAdam:__init(params, ...)
  self:_construct(params, ...)
end

function NAdam.validate(_, g)
  U.check_nonneg('NAdam', 'learning rate', g.lr)
  U.check_nonneg('NAdam', 'epsilon value', g.eps)
  U.check_betas('NAdam', g.betas)
  U.check_nonneg('NAdam', 'weight_decay value', g.weight_decay)
  U.check_nonneg('NAdam', 'momentum_decay value', g.momentum_decay)
end


function NAdam:_step_group(group)
  local lr, eps, mdecay = group.lr, group.eps, group.momentum_decay
  local beta1, beta2 = group.betas[1], group.betas[2]
  local zeros_like = T.flow.zeros_like
  U.each_grad(self, group, 'exp_avg', function(p)
    return {mu_product = 1, exp_avg = zeros_like(p), exp_avg_sq = zeros_like(p)}
  end, function(p, grad, state, step)
    local bias_correction2 = 1 - beta2 ^ step
    local mu = beta1 * (1 - 0.5 * 0.96 ^ (step * mdecay))
    local mu_next = beta1 * (1 - 0.5 * 0.96 ^ ((step + 1) * mdecay))
    local mu_product = U.num(state.mu_product) * mu
    state.mu_product = mu_product
    local mu_product_next = mu_product * mu * mu_next
    local exp_avg, exp_avg_sq = state.exp_avg, state.exp_avg_sq
    exp_avg:mul_(beta1)
    U.add_(exp_avg, grad, 1 - beta1)
    exp_avg_sq:mul_(beta2)
    U.addcmul_(exp_avg_sq, grad, grad, 1 - beta2)
    local denom = (exp_avg_sq / bias_correction2):sqrt():add_(eps)
    U.addcdiv_(p, grad, denom, -lr * (1 - mu) / (1 - mu_product))
    U.addcdiv_(p, exp_avg, denom, -lr * mu_next / (1 - mu_product_next))
  end)
end

return NAdam
