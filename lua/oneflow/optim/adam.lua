-- oneflow.optim.Adam: Adam / AMSGrad, the same update as torch.optim.Adam
-- (single-tensor path):
--   g = grad (negated when maximize); t = t + 1
--   g = g + weight_decay * p          (L2; AdamW: p = p * (1 - lr * wd))
--   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
--   vmax = max(vmax, v) when amsgrad, used in place of v
--   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
--   p = p - lr / (1 - beta1^t) * m / denom
local C = require('oneflow._C').C
local Optimizer = require 'oneflow.optim.optimizer'
local T = require 'oneflow.tensor'
local U = require 'oneflow.optim._util'

local Adam = Optimizer:subclass('Adam')
Adam.hyper = {
  {'lr', 1e-3}, {'betas', {0.9, 0.999}}, {'eps', 1e-8}, {'weight_decay', 0},
  {'amsgrad', false}, {'maximize', false, kw = true}, {'decoupled_weight_decay', false, kw = true},
}

--- Adam, as torch.optim.Adam: `flow.optim.Adam(net:parameters(), {lr = 1e-3})`.
-- @function flow.optim.Adam
-- @tparam table params a list of tensors, or of param groups
-- @tparam[opt] number|table ... lr, betas, eps, weight_decay, amsgrad positionally,
-- or an options table `{lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8,
-- weight_decay = 0, amsgrad = false, maximize = false, decoupled_weight_decay = false}`
-- @treturn Optimizer
function Adam:__init(params, ...)
  self:_construct(params, ...)
end

function Adam:validate(g)
  local name = self.__name
  U.check_nonneg(name, 'learning rate', g.lr)
  U.check_nonneg(name, 'epsilon value', g.eps)
  U.check_betas(name, g.betas)
  U.check_nonneg(name, 'weight_decay value', g.weight_decay)
end

function Adam:_step_group(group)
  local lr, eps, wd = group.lr, group.eps, group.weight_decay
  local beta1, beta2 = group.betas[1], group.betas[2]
  local amsgrad, maximize = group.amsgrad, group.maximize
  local decoupled = self.decoupled or group.decoupled_weight_decay
  local ams, maxi, dec = amsgrad and 1 or 0, maximize and 1 or 0, decoupled and 1 or 0
  for _, p in ipairs(group.params) do
    local grad = p.grad
    if grad ~= nil then
      local state = self.state[p]
      if state == nil or state.exp_avg == nil then
        state = {step = 0, exp_avg = T.flow.zeros_like(p), exp_avg_sq = T.flow.zeros_like(p)}
        self.state[p] = state
      end
      if amsgrad and state.max_exp_avg_sq == nil then
        state.max_exp_avg_sq = T.flow.zeros_like(p)
      end
      local vmax = amsgrad and state.max_exp_avg_sq or nil
      local g = U.fused_grad(p, grad, state.exp_avg, state.exp_avg_sq, vmax)
      if g ~= nil then
        local h = U.hyper(self)
        h.ptr[0], h.ptr[1] = lr, state.step
        U.check(C.of_optim_adam_(p.p, g.p, state.exp_avg.p, state.exp_avg_sq.p,
                                 vmax ~= nil and vmax.p or nil, h.t.p, beta1, beta2, eps, wd,
                                 ams, maxi, dec, nil))
        state.step = state.step + 1
      else
        self:_step_param(p, grad, state, lr, eps, wd, beta1, beta2, amsgrad, maximize, decoupled)
      end
    end
  end
end

-- The op-by-op update, for what the fused kernel does not take.
function Adam._step_param(_, p, grad, state, lr, eps, wd, beta1, beta2, amsgrad, maximize,
                          decoupled)
  if maximize then grad = -grad end
  state.step = state.step + 1
  local step = state.step
  if wd ~= 0 then
    if decoupled then
      p:mul_(1 - lr * wd)
    else
      grad = grad + p * wd
    end
  end
  local exp_avg, exp_avg_sq = state.exp_avg, state.exp_avg_sq
  U.lerp_(exp_avg, grad, 1 - beta1)
  exp_avg_sq:mul_(beta2)
  U.addcmul_(exp_avg_sq, grad, grad, 1 - beta2)

  local bias_correction1 = 1 - beta1 ^ step
  local bias_correction2 = 1 - beta2 ^ step
  local step_size = lr / bias_correction1
  local bias_correction2_sqrt = math.sqrt(bias_correction2)
  local denom
  if amsgrad then
    state.max_exp_avg_sq:maximum_(exp_avg_sq)
    denom = state.max_exp_avg_sq:sqrt()
  else
    denom = exp_avg_sq:sqrt()
  end
  denom:div_(bias_correction2_sqrt):add_(eps)
  U.addcdiv_(p, exp_avg, denom, -step_size)
end

return Adam
