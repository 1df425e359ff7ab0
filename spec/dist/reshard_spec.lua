-- Re-sharding: a sharded checkpoint (flow.distributed.save with
-- {gather = false}) written by one number of ranks loads on fewer or more
-- ranks into other layouts (rows split -> columns split, a 2-D grid -> 1-D,
-- broadcast -> split), each rank reading only the pieces it needs; and
-- training saved by 4 ranks resumes on 2 or 3 and ends where one process
-- training throughout does. Runs spec/dist/reshard_script.lua and
-- resume_script.lua under mpirun.
local H = require 'spec.helpers'
local flow = require 'oneflow'

local mpirun = H.capture('command -v mpirun 2>/dev/null') ~= '' and flow.env.get_world_size() == 1

-- runs a script of spec/dist with `args` under mpirun -np `np` (0: alone)
local function launch(np, args, script)
  local p = io.popen(('LUA_PATH="lua/?.lua;lua/?/init.lua;;" OF_DIST_TIMEOUT=30 timeout 60 %s '
                      .. 'luajit spec/dist/%s %s 2>&1; echo "rc=$?"')
                     :format(np == 0 and '' or 'mpirun --allow-run-as-root --oversubscribe -np ' .. np,
                             script or 'reshard_script.lua', args))
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
    local out = launch(4, 'save ' .. dir)
    assert.truthy(out:find('rank 3 of 4 saved', 1, true), out)
    local files = H.listdir(dir)
    assert.equal(5, #files, table.concat(files, ' '))   -- a shard per rank and the index
    out = launch(2, 'load ' .. dir)
    check_loaded(out, 2)
    -- 7 rows of fc.weight, now split by columns: 3 + 2 on 2 ranks, 2 + 2 + 1 on 3
    assert.truthy(out:find('rank 0 of 2: fc.weight equal shard [7, 3]', 1, true), out)
    out = launch(3, 'load ' .. dir)
    check_loaded(out, 3)
    assert.truthy(out:find('rank 2 of 3: fc.weight equal shard [7, 1]', 1, true), out)
    assert.truthy(out:find('rank 2 of 3: fc.bias equal shard [3]', 1, true), out)
  end)

  -- parameter name -> its values, from resume_script.lua's output
  local function params(out)
    local res = {}
    for name, values in out:gmatch('([%w%.]+%.[wb]%a+) ([^\n]+)') do res[name] = H.numbers(values) end
    return res
  end

  it('training resumes from it on fewer ranks, losing only the steps since it', function()
    local dir = H.tmpdir() .. '/ck'
    -- the reference: one process, 6 steps
    local ref = params(launch(0, dir .. '-unused 0 6', 'resume_script.lua'))
    local count = 0
    for _ in pairs(ref) do count = count + 1 end
    assert.equal(6, count)   -- 3 Linear layers
    -- 4 ranks save after step 3 and stop after step 4 (that step is lost)
    launch(4, dir .. ' 0 4 3', 'resume_script.lua')
    -- the survivors' next launch: 2 ranks, and 3, resume at step 4
    for _, np in ipairs({2, 3}) do
      local got = params(launch(np, dir .. ' 3 6', 'resume_script.lua'))
      for name, want in pairs(ref) do
        assert.truthy(got[name], name)
        H.close(flow.tensor(got[name]), flow.tensor(want), 1e-5, ('%s on %d ranks'):format(name, np))
      end
    end
  end)

  it('saved by 3 ranks loads on 4', function()
    local dir = H.tmpdir() .. '/ck'
    launch(3, 'save ' .. dir)
    local out = launch(4, 'load ' .. dir)
    check_loaded(out, 4)
    assert.truthy(out:find('rank 3 of 4: emb.weight equal shard [1, 4]', 1, true), out)
  end)
end)
