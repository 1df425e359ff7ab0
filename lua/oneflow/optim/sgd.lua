-- oneflow.optim.SGD: stochastic gradient descent with momentum, dampening,
-- Nesterov momentum, L2 weight decay and maximize; the same update as
-- torch.optim.SGD:
--   g = grad (+ weight_decay * p); negated when maximize
--   buf = g on the first step, else momentum * buf + (1 - dampening) * g
--   g = nesterov and g + momentum * buf or buf
--   p = p - lr * g
local C = require('oneflow._C').C
local Optimizer = require 'oneflow.optim.optimizer'
local T = require 'oneflow.tensor'
local U = require 'oneflow.optim._util'

local SGD = Optimizer:subclass('SGD')
SGD.hyper = {
  {'lr', 1e-3}, {'momentum', 0}, {'dampening', 0}, {'weight_decay', 0},
  {'nesterov', false}, {'maximize', false, kw = true},
}

--- Stochastic gradient descent with momentum, as torch.optim.SGD:
-- `flow.optim.SGD(net:parameters(), {lr = 0.1, momentum = 0.9})`, or
-- `flow.optim.SGD(params, 0.1, 0.9)` (PyTorch's positional order).
-- @function flow.optim.SGD
-- @tparam table params a list of tensors, or of param groups `{params = {...}, lr = ...}`
-- @tparam[opt] number|table ... lr, momentum, dampening, weight_decay, nesterov
-- positionally, or an options table `{lr = 1e-3, momentum = 0, dampening = 0,
-- weight_decay = 0, nesterov = false, maximize = false}`
-- @treturn Optimizer with `step()`, `zero_grad()`, `state_dict()`, `param_groups`
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

SGD.grad_kinds = {dense = true, sparse = true}

-- A sparse embedding gradient: p[ids] -= lr * rows, only the rows used
-- (duplicate ids add up), as torch's dense.add_(sparse).
local function sparse_step(p, pi, grad, lr, momentum, wd, maximize)
  if momentum ~= 0 or wd ~= 0 then
    U.fail(('SGD: parameter %d has a sparse gradient; sparse gradients take momentum = 0 '
            .. 'and weight_decay = 0 (got %g, %g)'):format(pi, momentum, wd))
  end
  if grad:_nnz() > 0 then p:index_add_(1, grad.indices, grad.values, {alpha = maximize and lr or -lr}) end
end

function SGD:_step_group(group)
  local lr, momentum, dampening = group.lr, group.momentum, group.dampening
  local wd, nesterov, maximize = group.weight_decay, group.nesterov, group.maximize
  local nest, maxi = nesterov and 1 or 0, maximize and 1 or 0
  for pi, p in ipairs(group.params) do
    local grad = p.grad
    if grad ~= nil and grad.is_sparse then
      sparse_step(p, pi, grad, lr, momentum, wd, maximize)
    elseif grad ~= nil then
      local state = self.state[p]
      local buf = momentum ~= 0 and state ~= nil and state.momentum_buffer or nil
      local g = U.fused_grad(p, grad, buf)
      if g ~= nil then
        local h = U.hyper(self)
        h.ptr[0], h.ptr[1] = lr, buf ~= nil and 1 or 0
        if momentum ~= 0 and buf == nil then
          -- the kernel's first step writes the whole buffer
          buf = T.flow.empty_like(p)
          if state == nil then
            state = {}
            self.state[p] = state
          end
          state.momentum_buffer = buf
        end
        U.check(C.of_optim_sgd_(p.p, g.p, buf ~= nil and buf.p or nil, h.t.p, momentum, dampening,
                                wd, nest, maxi, nil))
      else
        self:_step_param(p, grad, lr, momentum, dampening, wd, nesterov, maximize)
      end
    end
  end
end

-- The op-by-op update, for what the fused kernel does not take.
function SGD:_step_param(p, grad, lr, momentum, dampening, wd, nesterov, maximize)
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

return SGD
