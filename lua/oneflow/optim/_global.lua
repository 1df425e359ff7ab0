-- oneflow.optim._global: optimizers over global parameters. The optimizer
-- keeps each global parameter's local shard (a leaf) in its groups; before
-- a step the shard's grad, which autograd leaves in the dual SBP (partial
-- for a broadcast parameter), is boxed to the parameter's own SBP, so the
-- elementwise update of each shard is the update of the logical tensor.
-- Afterwards the dual-SBP grad is put back, so further backward passes keep
-- accumulating correctly.
local M = {}

function M.adopt(opt, g)
  local loc = g:to_local()
  local map = rawget(opt, '_globals')
  if not map then
    map = {list = {}}
    rawset(opt, '_globals', map)
  end
  if not map[loc] then
    map[loc] = g
    map.list[#map.list + 1] = loc
  end
  return loc
end

--- Boxes every grad (a collective over each parameter's placement: every
-- rank of it steps). Returns the dual-SBP grads to restore.
function M.box_grads(map)
  local saved = {}
  for i, loc in ipairs(map.list) do
    local dual = loc.grad
    saved[i] = dual or false
    if dual ~= nil then
      local g = map[loc].grad   -- boxed to the parameter's sbp
      loc.grad = g:to_local()
    end
  end
  return saved
end

function M.restore_grads(map, saved)
  for i, loc in ipairs(map.list) do
    if saved[i] then loc.grad = saved[i] end
  end
end

return M
