-- oneflow.optim.ASGD: the same update as torch.optim.ASGD (1.13), averaged
-- SGD:
--   g = grad (negated when maximize) + weight_decay * p; t = t + 1
--   p = p * (1 - lambd * eta) - eta * g
--   ax = ax + mu * (p - ax)   (ax = p while mu = 1)
--   eta = lr / (1 + lambd * lr * t)^alpha;  mu = 1 / max(1, t - t0)
-- State: step, eta, mu (numbers here, 0-d tensors in PyTorch; a loaded
-- tensor is read as its value), ax (the averaged parameter).
local Optimizer = require 'oneflow.optim.optimizer'
local T = require 'oneflow.tensor'
local U = require 'oneflow.optim._util'

local ASGD = Optimizer:subclass('ASGD')
ASGD.hyper = {
  {'lr', 1e-2}, {'lambd', 1e-4}, {'alpha', 0.75}, {'t0', 1e6}, {'weight_decay', 0},
  {'maximize', false, kw = true},
}

--- ASGD(params, {lr = 1e-2, lambd = 1e-4, alpha = 0.75, t0 = 1e6, weight_decay = 0,
--  maximize = false})
function ASGD:__init(params, ...)
  self:_construct(params, ...)
end

function ASGD.validate(_, g)
  U.check_nonneg('ASGD', 'learning rate', g.lr)
  U.check_nonneg('ASGD', 'weight_decay value', g.weight_decay)
  U.check_number('ASGD', 'lambd', g.lambd)
  U.check_number('ASGD', 'alpha', g.alpha)
  U.check_number('ASGD', 't0', g.t0)
end


function ASGD:_step_group(group)
  local lr, lambd, alpha, t0 = group.lr, group.lambd, group.alpha, group.t0
  U.each_grad(self, group, 'ax', function(p)
    return {eta = lr, mu = 1, ax = T.flow.zeros_like(p)}
  end, function(p, grad, state, step)
    local eta, mu = U.num(state.eta), U.num(state.mu)
    p:mul_(1 - lambd * eta)
    U.add_(p, grad, -eta)
    if mu ~= 1 then
      state.ax:add_((p - state.ax):mul_(mu))
    else
      state.ax:copy_(p)
    end
    state.eta = lr / (1 + lambd * lr * step) ^ alpha
    state.mu = 1 / math.max(1, step - t0)
  end)
end

return ASGD
