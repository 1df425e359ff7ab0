-- 3-D parallelism (data x tensor x pipeline) end to end: the example
-- examples/distributed/pipeline_3d.lua under mpirun -np 8 (two pipeline
-- stages on 2x2 grids) and -np 4 (two stages on 1x2 grids) trains like one
-- process: losses and parameters within 1e-5. Also the 2-stage
-- examples/distributed/pipeline.lua: losses and its bubble report.
local flow = require 'oneflow'

local D = require 'spec.dist.helpers'

describe('3-D parallelism (data x tensor x pipeline)', function()
  if flow.env.get_world_size() ~= 1 then return end
  local it_mpi = D.have_mpirun() and it or pending
  for _, np in ipairs({8, 4}) do
    it_mpi(('examples/distributed/pipeline_3d.lua under mpirun -np %d equals one process'):format(np), function()
      local f = io.popen(('OF_DIST_TIMEOUT=60 timeout 300 mpirun --allow-run-as-root --oversubscribe -np %d '
                          .. 'env -u LUA_PATH luajit examples/distributed/pipeline_3d.lua --steps 2 2>&1; '
                          .. 'echo "rc=$?"'):format(np))
      local out = f:read('*a')
      f:close()
      assert.truthy(out:find('rc=0', 1, true), out)
      assert.truthy(out:find('step 2: 3-D parallel loss', 1, true), out)
      local dl, dp = out:match('max difference from one process: loss (%S+), parameters (%S+)')
      assert.truthy(dl, out)
      assert.is_true(tonumber(dl) < 1e-5 and tonumber(dp) < 1e-5, out)
    end)
  end
end)

describe('examples/distributed/pipeline.lua', function()
  if flow.env.get_world_size() ~= 1 then return end
  local it_mpi = D.have_mpirun() and it or pending
  it_mpi('trains 2 stages like one process and reports the bubble next to the 1F1B formula', function()
    local f = io.popen('OF_DIST_TIMEOUT=60 timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 '
                       .. 'env -u LUA_PATH luajit examples/distributed/pipeline.lua --steps 3 '
                       .. '--micro-batches 4 2>&1; echo "rc=$?"')
    local out = f:read('*a')
    f:close()
    assert.truthy(out:find('rc=0', 1, true), out)
    local n = 0
    for l, r in out:gmatch('pipeline loss (%S+), one process (%S+)') do
      n = n + 1
      assert.is_true(math.abs(tonumber(l) - tonumber(r)) < 1e-5, out)
    end
    assert.equals(3, n, out)
    local measured, formula = out:match('bubble: measured (%S+) %(mean over stages%), 1F1B formula %S+ = (%S+)')
    assert.truthy(measured, out)
    assert.equals(0.2, tonumber(formula))   -- (p - 1) / (m + p - 1) with p = 2, m = 4
    assert.is_true(tonumber(measured) >= 0 and tonumber(measured) < 1, out)
  end)
end)
