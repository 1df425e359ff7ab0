-- oneflow.optim.Rprop: the same update as torch.optim.Rprop (1.13),
-- resilient backpropagation:
--   g = grad (negated when maximize); s = sign(g * prev)
--   step_size = clamp(step_size * (etaplus if s > 0, etaminus if s < 0, 1 if s = 0),
--                     step_size_min, step_size_max)
--   where s < 0, g = 0;  p = p - sign(g) * step_size;  prev = g
-- State: step, prev, step_size (starts at lr), as PyTorch names them.
-- PyTorch 1.13's Rprop has no weight_decay option.
local Optimizer = require 'oneflow.optim.optimizer'
local T = require 'oneflow.tensor'
local U = require 'oneflow.optim._util'

local Rprop = Optimizer:subclass('Rprop')
Rprop.hyper = {
  {'lr', 1e-2}, {'etas', {0.5, 1.2}}, {'step_sizes', {1e-6, 50}}, {'maximize', false, kw = true},
}

--- Rprop(params, {lr = 1e-2, etas = {0.5, 1.2}, step_sizes = {1e-6, 50}, maximize = false})
function Rprop:__init(params, ...)
  self:_construct(params, ...)
end

local function pair(what, v)
  if type(v) ~= 'table' or #v ~= 2 or type(v[1]) ~= 'number' or type(v[2]) ~= 'number' then
    U.fail(('Rprop: %s must be a table of two numbers, got %s'):format(what, tostring(v)))
  end
end

function Rprop.validate(_, g)
  U.check_nonneg('Rprop', 'learning rate', g.lr)
  pair('etas', g.etas)
  pair('step_sizes', g.step_sizes)
  local em, ep = g.etas[1], g.etas[2]
  if not (em > 0 and em < 1 and ep > 1) then
    U.fail(('Rprop: invalid eta values %s, %s (need 0 < etaminus < 1 < etaplus)')
           :format(tostring(em), tostring(ep)))
  end
end

function Rprop:_step_group(group)
  local etaminus, etaplus = group.etas[1], group.etas[2]
  local step_size_min, step_size_max = group.step_sizes[1], group.step_sizes[2]
  U.each_grad(self, group, 'prev', function(p, grad)
    return {prev = T.flow.zeros_like(p), step_size = T.flow.full_like(grad, group.lr)}
  end, function(p, grad, state)
    local sign = (grad * state.prev):sign()
    local up, down = sign:gt(0), sign:lt(0)
    local factor = sign:masked_fill_(up, etaplus):masked_fill_(down, etaminus)
    factor:masked_fill_(factor:eq(0), 1)
    state.step_size:mul_(factor):clamp_(step_size_min, step_size_max)
    grad = grad:clone():masked_fill_(down, 0)
    U.addcmul_(p, grad:sign(), state.step_size, -1)
    state.prev:copy_(grad)
  end)
end

return Rprop
