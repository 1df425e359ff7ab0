-- Re-sharding: a sharded checkpoint (flow.distributed.save with
-- {gather = false}) written by one number of ranks loads on fewer or more
-- ranks into other layouts (rows split -> columns split, a 2-D grid -> 1-D,
-- broadcast -> split), each rank reading only the pieces it needs. Runs
-- spec/dist/reshard_script.lua under mpirun.
local H = require 'spec.helpers'
local flow = require 'oneflow'

local mpirun = H.capture('command -v mpirun 2>/dev/null') ~= '' and flow.env.get_world_size() == 1

local function launch(np, mode, dir)
  local p = io.popen(('LUA_PATH="lua/?.lua;lua/?/init.lua;;" OF_DIST_TIMEOUT=30 timeout 60 mpirun '
                      .. '--allow-run-as-root --oversubscribe -np %d luajit spec/dist/reshard_script.lua '
                      .. '%s %s 2>&1; echo "rc=$?"'):format(np, mode, dir))
  local out = p:read('*a')
  p:close()
  assert(out:find('rc=0%s*$'), out)
  return out
end

local NAMES = {'emb.weight', 'fc.bias', 'fc.weight', 'opt.step'}
local function check_loaded(out, np)
  for r = 0, np - 1 do
    for _, name in ipairs(NAMES) do
      assert.truthy(out:find(('rank %d of %d: %s equal'):format(r, np, name), 1, true), out)
    end
  end
  assert.falsy(out:find('DIFFERS', 1, true), out)
end

describe('a sharded checkpoint', function()
  if not mpirun then
    pending('re-sharding: mpirun not found (or already under mpirun)')
    return
  end
  teardown(H.remove_tmpdirs)

  it('saved by 4 ranks loads on 2 and on 3 ranks into other layouts', function()
    local dir = H.tmpdir() .. '/ck'
    local out = launch(4, 'save', dir)
    assert.truthy(out:find('rank 3 of 4 saved', 1, true), out)
    local files = H.listdir(dir)
    assert.equal(5, #files, table.concat(files, ' '))   -- a shard per rank and the index
    out = launch(2, 'load', dir)
    check_loaded(out, 2)
    -- 7 rows of fc.weight, now split by columns: 3 + 2 on 2 ranks, 2 + 2 + 1 on 3
    assert.truthy(out:find('rank 0 of 2: fc.weight equal shard [7, 3]', 1, true), out)
    out = launch(3, 'load', dir)
    check_loaded(out, 3)
    assert.truthy(out:find('rank 2 of 3: fc.weight equal shard [7, 1]', 1, true), out)
    assert.truthy(out:find('rank 2 of 3: fc.bias equal shard [3]', 1, true), out)
  end)

  it('saved by 3 ranks loads on 4', function()
    local dir = H.tmpdir() .. '/ck'
    launch(3, 'save', dir)
    local out = launch(4, 'load', dir)
    check_loaded(out, 4)
    assert.truthy(out:find('rank 3 of 4: emb.weight equal shard [1, 4]', 1, true), out)
  end)
end)
