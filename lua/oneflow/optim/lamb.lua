-- oneflow.optim.LAMB: layer-wise adaptive moments (You et al. 2019), the
-- update of timm's Lamb / apex FusedLAMB (NVLAMB variant):
--   optional global clipping: g = grad / max(1, ||all grads|| / max_grad_norm)
--   adam_w_mode = false: g = g + weight_decay * p        (L2)
--   m = beta1 * m + beta3 * g  (beta3 = 1 - beta1 with grad_averaging)
--   v = beta2 * v + (1 - beta2) * g * g
--   u = (m / bc1) / (sqrt(v) / sqrt(bc2) + eps)   (bc = 1 - beta^t, t per group)
--   adam_w_mode: u = u + weight_decay * p               (decoupled)
--   if weight_decay ~= 0 or always_adapt: u = u * trust, with
--     trust = ||p|| / ||u||, or 1 when either norm is 0 (clipped at 1 with trust_clip)
--   p = p - lr * u
local Optimizer = require 'oneflow.optim.optimizer'
local T = require 'oneflow.tensor'
local U = require 'oneflow.optim._util'

local LAMB = Optimizer:subclass('LAMB')
LAMB.hyper = {
  {'lr', 1e-3}, {'betas', {0.9, 0.999}}, {'eps', 1e-6}, {'weight_decay', 0.01},
  {'adam_w_mode', true}, {'bias_correction', true}, {'grad_averaging', true},
  {'max_grad_norm', nil}, {'trust_clip', false}, {'always_adapt', false},
}

--- LAMB(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-6, weight_decay = 0.01,
--  adam_w_mode = true, bias_correction = true, grad_averaging = true,
--  max_grad_norm = nil (no clipping), trust_clip = false, always_adapt = false})
function LAMB:__init(params, ...)
  self:_construct(params, ...)
end

function LAMB.validate(_, g)
  U.check_nonneg('LAMB', 'learning rate', g.lr)
  U.check_nonneg('LAMB', 'epsilon value', g.eps)
  U.check_betas('LAMB', g.betas)
  U.check_nonneg('LAMB', 'weight_decay value', g.weight_decay)
  if g.max_grad_norm ~= nil then
    U.check_number('LAMB', 'max_grad_norm', g.max_grad_norm)
    if g.max_grad_norm ~= g.max_grad_norm or g.max_grad_norm <= 0 then
      U.fail('LAMB: invalid max_grad_norm ' .. tostring(g.max_grad_norm))
    end
  end
end

-- max(1, global grad norm / max_grad_norm), or nil without clipping
function LAMB:_clip_factor()
  local max_norm = self.defaults.max_grad_norm
  if max_norm == nil then return nil end
  local sq, any = 0, false
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do
      local grad = p.grad
      if grad ~= nil then
        local n = grad:norm():item()
        sq = sq + n * n
        any = true
      end
    end
  end
  if not any then return nil end
  return math.max(math.sqrt(sq) / max_norm, 1)
end

function LAMB:_update()
  local clip = self:_clip_factor()
  for _, group in ipairs(self.param_groups) do self:_step_group(group, clip) end
end

function LAMB:_step_group(group, clip)
  local beta1, beta2 = group.betas[1], group.betas[2]
  local beta3 = group.grad_averaging and 1 - beta1 or 1
  local lr, eps, wd = group.lr, group.eps, group.weight_decay
  group.step = (group.step or 0) + 1
  local step = group.step
  local bc1, bc2 = 1, 1
  if group.bias_correction then
    bc1 = 1 - beta1 ^ step
    bc2 = 1 - beta2 ^ step
  end
  for _, p in ipairs(group.params) do
    local grad = p.grad
    if grad ~= nil then
      local state = self.state[p]
      if state == nil or state.exp_avg == nil then
        state = {exp_avg = T.flow.zeros_like(p), exp_avg_sq = T.flow.zeros_like(p)}
        self.state[p] = state
      end
      if clip ~= nil and clip ~= 1 then grad = grad / clip end
      if wd ~= 0 and not group.adam_w_mode then grad = grad + p * wd end
      local exp_avg, exp_avg_sq = state.exp_avg, state.exp_avg_sq
      if beta3 == 1 - beta1 then
        U.lerp_(exp_avg, grad, beta3)
      else
        exp_avg:mul_(beta1)
        U.add_(exp_avg, grad, beta3)
      end
      exp_avg_sq:mul_(beta2)
      U.addcmul_(exp_avg_sq, grad, grad, 1 - beta2)
      local denom = exp_avg_sq:sqrt():div_(math.sqrt(bc2)):add_(eps)
      local update = (exp_avg / bc1):div_(denom)
      if wd ~= 0 and group.adam_w_mode then U.add_(update, p, wd) end
      if wd ~= 0 or group.always_adapt then
        local w_norm, u_norm = p:norm():item(), update:norm():item()
        local trust = 1
        if w_norm > 0 and u_norm > 0 then trust = w_norm / u_norm end
        if group.trust_clip then trust = math.min(trust, 1) end
        update:mul_(trust)
      end
      U.add_(p, update, -lr)
    end
  end
end

return LAMB
