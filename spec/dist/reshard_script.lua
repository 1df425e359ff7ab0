-- Run under mpirun by spec/dist/reshard_spec.lua: `save DIR` writes a
-- sharded checkpoint from this world's layout; `load DIR` reads it into
-- another layout on however many ranks this launch has, and every rank
-- prints whether each tensor equals the known value.
local flow = require 'oneflow'
local mode, dir = arg[1], arg[2]
local n, me = flow.env.get_world_size(), flow.env.get_rank()
local S, Bc = flow.sbp.split, flow.sbp.broadcast
local ranks = {}
for i = 0, n - 1 do ranks[i + 1] = i end
local P = flow.placement('cpu', ranks)

-- the values, known to every rank
local full = {
  ['fc.weight'] = flow.arange(0, 7 * 5):view(7, 5):float() * 0.5,       -- 7 rows: uneven splits
  ['fc.bias'] = flow.arange(0, 11):double() - 3,
  ['emb.weight'] = flow.arange(0, 6 * 4):view(6, 4):float(),
  ['opt.step'] = flow.tensor({42}, {dtype = 'int64'}),                   -- a local tensor
}

local function global(name, pl, sbp)
  local b = {}
  for k = 1, #pl.hierarchy do b[k] = Bc end
  return full[name]:to_global(pl, b):to_global(pl, sbp)
end

if mode == 'save' then
  local state = {
    ['fc.weight'] = global('fc.weight', P, S(1)),
    ['fc.bias'] = global('fc.bias', P, Bc),
    ['opt.step'] = full['opt.step'],
  }
  if n % 2 == 0 then   -- a 2-D grid: rows over axis 1, columns over axis 2
    local grid = {}
    for r = 1, n / 2 do grid[r] = {2 * r - 2, 2 * r - 1} end
    state['emb.weight'] = global('emb.weight', flow.placement('cpu', grid), {S(1), S(2)})
  else
    state['emb.weight'] = global('emb.weight', P, S(2))
  end
  flow.distributed.save(state, dir, {gather = false})
  print(('rank %d of %d saved'):format(me, n))
else
  local function zeros_like(name, sbp)
    return flow.zeros(full[name]:size(), {dtype = full[name].dtype, placement = P, sbp = sbp})
  end
  local target = {
    ['fc.weight'] = zeros_like('fc.weight', S(2)),    -- columns now
    ['fc.bias'] = zeros_like('fc.bias', S(1)),
    ['emb.weight'] = zeros_like('emb.weight', S(1)),
    ['opt.step'] = flow.zeros(1, {dtype = 'int64'}),
  }
  flow.distributed.load(dir, target)
  local names = {}
  for k in pairs(target) do names[#names + 1] = k end
  table.sort(names)
  for _, name in ipairs(names) do
    local v = target[name]
    local got = v.is_global and v:to_global(P, Bc):to_local() or v
    local shard = v.is_global and v:to_local():size():totable() or {}
    print(('rank %d of %d: %s %s shard [%s]'):format(me, n, name,
          flow.equal(got, full[name]) and 'equal' or 'DIFFERS', table.concat(shard, ', ')))
  end
end
