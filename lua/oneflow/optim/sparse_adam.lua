-- oneflow.optim.SparseAdam: lazy Adam for sparse embedding gradients
-- (oneflow.sparse_grad), the same update as torch.optim.SparseAdam: only the
-- rows the batch used move, their moments too; the other rows and their
-- moments stay as they are. Per row r in the coalesced grad (duplicates summed):
--   g = grad[r] (negated when maximize); t = t + 1 (per parameter step)
--   m[r] = m[r] + (1 - beta1) * (g - m[r]); v[r] = v[r] + (1 - beta2) * (g^2 - v[r])
--   p[r] = p[r] - lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m[r] / (sqrt(v[r]) + eps)
local Optimizer = require 'oneflow.optim.optimizer'
local T = require 'oneflow.tensor'
local U = require 'oneflow.optim._util'

local SparseAdam = Optimizer:subclass('SparseAdam')
SparseAdam.hyper = {
  {'lr', 1e-3}, {'betas', {0.9, 0.999}}, {'eps', 1e-8}, {'maximize', false, kw = true},
}
SparseAdam.grad_kinds = {sparse = true}

--- Lazy Adam for sparse gradients, as torch.optim.SparseAdam:
-- `flow.optim.SparseAdam(emb:parameters(), {lr = 1e-3})` with
-- `nn.Embedding(n, d, {sparse = true})`. A dense gradient is an error.
-- @function flow.optim.SparseAdam
-- @tparam table params a list of tensors, or of param groups
-- @tparam[opt] number|table ... lr, betas, eps positionally, or an options
-- table `{lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, maximize = false}`
-- @treturn Optimizer
function SparseAdam:__init(params, ...)
  self:_construct(params, ...)
end

function SparseAdam.validate(_, g)
  U.check_nonneg('SparseAdam', 'learning rate', g.lr)
  U.check_nonneg('SparseAdam', 'epsilon value', g.eps)
  U.check_betas('SparseAdam', g.betas)
end

function SparseAdam:_step_group(group)
  local lr, eps, maximize = group.lr, group.eps, group.maximize
  local beta1, beta2 = group.betas[1], group.betas[2]
  for _, p in ipairs(group.params) do
    local grad = p.grad
    if grad ~= nil then
      local state = self.state[p]
      if state == nil or state.exp_avg == nil then
        -- dense moments as PyTorch's (state_dict layout), touched row-wise
        state = {step = 0, exp_avg = T.flow.zeros_like(p), exp_avg_sq = T.flow.zeros_like(p)}
        self.state[p] = state
      end
      state.step = state.step + 1
      grad = grad:coalesce()
      local idx, gv = grad.indices, grad.values
      if maximize then gv = -gv end
      if idx:size(1) > 0 then
        local m, v = state.exp_avg, state.exp_avg_sq
        local old_m = m:index_select(1, idx)
        local dm = (gv - old_m):mul_(1 - beta1)
        m:index_add_(1, idx, dm)
        local old_v = v:index_select(1, idx)
        local dv = (gv * gv):sub_(old_v):mul_(1 - beta2)
        v:index_add_(1, idx, dv)
        local numer = dm:add_(old_m)
        local denom = dv:add_(old_v):sqrt_():add_(eps)
        local step_size = lr * math.sqrt(1 - beta2 ^ state.step) / (1 - beta1 ^ state.step)
        p:index_add_(1, idx, numer:div_(denom):mul_(-step_size))
      end
    end
  end
end

return SparseAdam
