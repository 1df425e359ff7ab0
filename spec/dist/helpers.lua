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

--- For the *_mpi.lua files: in a world of one, declares `title` pending
-- (tools/run_tests.sh runs them under mpirun -np 2 and 4) and returns
-- nil; else returns the placement of every rank.
function M.world_or_pending(title)
  local n = flow.env.get_world_size()
  if n < 2 then
    local env = getfenv(2)   -- busted's describe/it/pending live in the spec file's env
    env.describe(title, function()
      env.it('runs under mpirun', function() env.pending(title .. ': needs mpirun -np 2 or more') end)
    end)
    return nil
  end
  local all = {}
  for i = 0, n - 1 do all[i + 1] = i end
  return flow.placement('cpu', all)
end

--- Whether mpirun is on the PATH (for the specs that launch it themselves).
function M.have_mpirun()
  local f = io.popen('command -v mpirun 2>/dev/null')
  local s = f:read('*a')
  f:close()
  return s ~= ''
end

return M
