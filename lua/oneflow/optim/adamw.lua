-- oneflow.optim.AdamW: Adam with decoupled weight decay (Loshchilov &
-- Hutter), as torch.optim.AdamW: p = p * (1 - lr * weight_decay) before the
-- Adam update, which then runs without L2 decay. Default weight_decay 1e-2.
local Adam = require 'oneflow.optim.adam'

local AdamW = Adam:subclass('AdamW')
AdamW.decoupled = true
AdamW.hyper = {
  {'lr', 1e-3}, {'betas', {0.9, 0.999}}, {'eps', 1e-8}, {'weight_decay', 1e-2},
  {'amsgrad', false}, {'maximize', false, kw = true},
}

--- Adam with decoupled weight decay, as torch.optim.AdamW:
-- `flow.optim.AdamW(net:parameters(), {lr = 1e-3, weight_decay = 1e-2})`.
-- @function flow.optim.AdamW
-- @tparam table params a list of tensors, or of param groups
-- @param[opt] ... lr, betas, eps, weight_decay, amsgrad positionally, or an options
-- table `{lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 1e-2,
-- amsgrad = false, maximize = false}`
-- @treturn Optimizer
function AdamW:__init(params, ...)
  self:_construct(params, ...)
end

return AdamW
