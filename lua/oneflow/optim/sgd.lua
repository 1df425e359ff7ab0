-- oneflow.optim.SGD: stochastic gradient descent with momentum, dampening,
-- Nesterov momentum, L2 weight decay and maximize; the same update as
-- torch.optim.SGD:
--   g = grad (+ weight_decay * p); negated when maximize
--   buf = g on the first step, else momentum * buf + (1 - dampening) * g
--   g = nesterov and g + momentum * buf or buf
--   p = p - lr * g
local Optimizer = require 'oneflow.optim.optimizer'
local U = require 'oneflow.optim._util'

local SGD = Optimizer:subclass('SGD')
SGD.hyper = {
  {'lr', 1e-3}, {'momentum', 0}, {'dampening', 0}, {'weight_decay', 0},
  {'nesterov', false}, {'maximize', false},
}

--- SGD(params, {lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0,
--  nesterov = false, maximize = false}); lr may also be given positionally.
function SGD:__init(params, ...)
  self:_construct(params, ...)
end

function SGD.validate(_, g)
  U.check_nonneg('SGD', 'learning rate', g.lr)
  U.check_nonneg('SGD', 'momentum value', g.momentum)
  U.check_number('SGD', 'dampening', g.dampening)
  U.check_nonneg('SGD', 'weight_decay value', g.weight_decay)
  if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then
    U.fail('SGD: nesterov momentum requires a momentum and zero dampening')
  end
end

function SGD:_step_group(group)
  local lr, momentum, dampening = group.lr, group.momentum, group.dampening
  local wd, nesterov, maximize = group.weight_decay, group.nesterov, group.maximize
  for _, p in ipairs(group.params) do
    local grad = p.grad
    if grad ~= nil then
      if maximize then grad = -grad end
      if wd ~= 0 then grad = grad + p * wd end
      if momentum ~= 0 then
        local state = self.state[p]
        if state == nil then
          state = {}
          self.state[p] = state
        end
        local buf = state.momentum_buffer
        if buf == nil then
          buf = grad:clone()
          state.momentum_buffer = buf
        else
          buf:mul_(momentum)
          U.add_(buf, grad, 1 - dampening)
        end
        if nesterov then
          grad = grad + buf * momentum
        else
          grad = buf
        end
      end
      U.add_(p, grad, -lr)
    end
  end
end

return SGD
