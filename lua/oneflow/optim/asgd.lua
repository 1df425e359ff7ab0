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
  {'maximize', false},
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

local function num(v)
  if U.is_tensor(v) then return v:item() end
  return v
end

function ASGD:_step_group(group)
  local lr, lambd, alpha, t0, wd = group.lr, group.lambd, group.alpha, group.t0, group.weight_decay
  local maximize = group.maximize
  for _, p in ipairs(group.params) do
    local grad = p.grad
    if grad ~= nil then
      local state = self.state[p]
      if state == nil or state.ax == nil then
        state = {step = 0, eta = lr, mu = 1, ax = T.flow.zeros_like(p)}
        self.state[p] = state
      end
      if maximize then grad = -grad end
      state.step = state.step + 1
      local step = state.step
      if wd ~= 0 then grad = grad + p * wd end
      local eta, mu = num(state.eta), num(state.mu)
      p:mul_(1 - lambd * eta)
      U.add_(p, grad, -eta)
      if mu ~= 1 then
        state.ax:add_((p - state.ax):mul_(mu))
      else
        state.ax:copy_(p)
      end
      state.eta = lr / (1 + lambd * lr * step) ^ alpha
      state.mu = 1 / math.max(1, step - t0)
    end
  end
end

return ASGD
