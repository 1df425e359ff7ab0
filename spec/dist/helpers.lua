-- spec/dist/helpers.lua -- pieces the mpirun specs share, written without
-- the library's own boxing code so that they can check it.
local flow = require 'oneflow'
local nn, F = flow.nn, flow.nn.functional

local M = {}

--- The shard of `full` at grid coordinate `coord` (0-based) for nested
-- splits: the first len % parts ranks get one more.
function M.shard(full, hierarchy, sbps, coord)
  local x = full
  for k = 1, #hierarchy do
    local v = sbps[k]
    if v.kind == 'S' then
      local len, parts = x:size(v.dim), hierarchy[k]
      local base, extra = math.floor(len / parts), len % parts
      local c = coord[k]
      x = x:narrow(v.dim, c * base + math.min(c, extra) + 1, base + (c < extra and 1 or 0))
    end
  end
  return x
end

--- The 0-based grid coordinate of `rank` in placement Pl, or nil.
function M.coord_of(Pl, rank)
  for i, q in ipairs(Pl.ranks) do
    if q == rank then
      if #Pl.hierarchy == 1 then return {i - 1} end
      return {math.floor((i - 1) / Pl.hierarchy[2]), (i - 1) % Pl.hierarchy[2]}
    end
  end
end

--- The small MLP the training specs use.
function M.mlp()
  return nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 8), nn.Tanh(),
                       nn.Linear(8, 4))
end

--- Cross entropy from ops with SBP rules: mean over the batch of -log p[y].
function M.loss_of(logits, onehot, N)
  return -(F.log_softmax(logits, 2) * onehot):sum() / N
end

return M
