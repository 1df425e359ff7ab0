-- How a process finds its launcher (flow.env.launcher, doc/scale.md): Open
-- MPI's mpirun, an srun task (SLURM_PROCID, SLURM_STEP_NUM_TASKS,
-- SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_NUM_NODES) or nothing. There is no
-- Slurm here: its environment is faked, alone and on top of mpirun ranks
-- (spec/dist/fake_srun.sh: what srun --mpi=pmix gives a task).
local H = require 'spec.helpers'
local flow = require 'oneflow'

-- runs `lua` in a fresh luajit with only `vars` (and PATH, LUA_PATH) set
local function run(vars, lua, launcher)
  local env = {'PATH="$PATH"', 'LUA_PATH="lua/?.lua;lua/?/init.lua;;"', 'OF_DIST_TIMEOUT=20'}
  for k, v in pairs(vars) do env[#env + 1] = ('%s=%s'):format(k, v) end
  table.sort(env)
  local cmd = ('env -i %s %s luajit -e \'local flow = require "oneflow"; %s\' 2>&1; echo "rc=$?"')
              :format(table.concat(env, ' '), launcher or '', lua)
  local out = H.capture(cmd)
  return (out:gsub('rc=%d+%s*$', '')), tonumber(out:match('rc=(%d+)%s*$'))
end

local SHOW = 'local l = flow.env.launcher(); print(("%s rank=%s size=%s local=%s node=%s nodes=%s '
  .. 'pmi=%s"):format(l.name, l.rank, l.size, l.local_rank, l.node_rank, l.nodes, l.pmi)); '
  .. 'print(("world %d of %d local %d %s"):format(flow.env.get_rank(), flow.env.get_world_size(), '
  .. 'flow.env.get_local_rank(), flow.env.backend()))'

local mpirun = H.capture('command -v mpirun 2>/dev/null') ~= ''
local it_mpi = (mpirun and flow.env.get_world_size() == 1) and it or pending
local MPIRUN = 'timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 -x PATH -x LUA_PATH '
  .. '-x OF_DIST_TIMEOUT'

describe('flow.env.launcher', function()
  it('no launcher: a world of one', function()
    local out, rc = run({}, SHOW)
    assert.equal(0, rc, out)
    assert.truthy(out:find('none rank=nil size=nil local=nil node=nil nodes=nil pmi=false\n'
                           .. 'world 0 of 1 local 0 self', 1, true), out)
  end)

  it('an srun task of a one-task step is a world of one that knows its node', function()
    local out, rc = run({SLURM_PROCID = 0, SLURM_STEP_NUM_TASKS = 1, SLURM_LOCALID = 0,
                         SLURM_NODEID = 3, SLURM_STEP_NUM_NODES = 4, SLURM_STEP_ID = 7}, SHOW)
    assert.equal(0, rc, out)
    assert.truthy(out:find('slurm rank=0 size=1 local=0 node=3 nodes=4 pmi=false\n'
                           .. 'world 0 of 1 local 0 self', 1, true), out)
  end)

  it('reads rank, tasks, local id and node of a task in a larger step', function()
    local out, rc = run({SLURM_PROCID = 5, SLURM_STEP_NUM_TASKS = 8, SLURM_LOCALID = 1,
                         SLURM_NODEID = 2, SLURM_STEP_NUM_NODES = 4, SLURM_STEP_ID = 0},
                        'local l = flow.env.launcher(); print(l.name, l.rank, l.size, l.local_rank, '
                        .. 'l.node_rank, l.nodes, l.pmi)')
    assert.equal(0, rc, out)
    assert.equal('slurm\t5\t8\t1\t2\t4\tfalse\n', out)
    -- SLURM_NTASKS stands in for SLURM_STEP_NUM_TASKS inside a step only
    out = run({SLURM_PROCID = 2, SLURM_NTASKS = 3, SLURM_STEPID = 0, SLURM_NNODES = 1},
              'local l = flow.env.launcher(); print(l.name, l.rank, l.size, l.nodes)')
    assert.equal('slurm\t2\t3\t1\n', out)
  end)

  it('a batch script (the job\'s SLURM_NTASKS, no step) runs alone', function()
    local out, rc = run({SLURM_PROCID = 0, SLURM_NTASKS = 4, SLURM_NODEID = 0, SLURM_LOCALID = 0,
                         SLURM_JOB_ID = 12}, SHOW)
    assert.equal(0, rc, out)
    assert.truthy(out:find('^none rank=nil'), out)
    assert.truthy(out:find('world 0 of 1 local 0 self', 1, true), out)
  end)

  it('srun without PMI in a step of several tasks is an error, not N worlds of one', function()
    local vars = {SLURM_PROCID = 1, SLURM_STEP_NUM_TASKS = 4, SLURM_STEP_ID = 0}
    for _, call in ipairs({'flow.env.get_rank()', 'flow.env.get_world_size()',
                           'flow.comm.all_reduce(flow.ones(2))', 'flow.env.barrier()'}) do
      local out, rc = run(vars, call)
      assert.are_not.equal(0, rc, out)
      assert.truthy(out:find('srun started 4 tasks (this is SLURM_PROCID=1) but gave MPI no PMI',
                             1, true), out)
      assert.truthy(out:find('--mpi=pmix', 1, true), out)
    end
    -- the launcher's own account still reads
    local out = run(vars, 'print(flow.env.launcher().size)')
    assert.equal('4\n', out)
  end)

  it('malformed launcher variables are named', function()
    for var, val in pairs({SLURM_PROCID = 'x1', SLURM_STEP_NUM_TASKS = '-2', SLURM_LOCALID = '1.5'}) do
      local vars = {SLURM_PROCID = 0, SLURM_STEP_NUM_TASKS = 2, SLURM_STEP_ID = 0}
      vars[var] = val
      local out, rc = run(vars, 'flow.env.launcher()')
      assert.are_not.equal(0, rc, out)
      assert.truthy(out:find(('%s="%s" is not a non-negative integer'):format(var, val), 1, true), out)
    end
    local out = run({SLURM_PROCID = 4, SLURM_STEP_NUM_TASKS = 4, SLURM_STEP_ID = 0},
                    'flow.env.get_rank()')
    assert.truthy(out:find('SLURM_PROCID=4 is not below the step\'s 4 tasks', 1, true), out)
  end)

  it_mpi('under mpirun, Open MPI\'s variables win over an allocation\'s SLURM_*', function()
    local out, rc = run({SLURM_PROCID = 0, SLURM_STEP_NUM_TASKS = 1, SLURM_STEP_ID = 0,
                         SLURM_NODEID = 0}, SHOW,
                        MPIRUN .. ' -x SLURM_PROCID -x SLURM_STEP_NUM_TASKS -x SLURM_STEP_ID')
    assert.equal(0, rc, out)
    assert.truthy(out:find('mpirun rank=0 size=2 local=0 node=nil nodes=nil pmi=true', 1, true), out)
    assert.truthy(out:find('mpirun rank=1 size=2 local=1', 1, true), out)
    assert.truthy(out:find('world 1 of 2 local 1 mpi', 1, true), out)
  end)

  it_mpi('an srun --mpi=pmix task joins MPI with the rank srun gave it', function()
    local out, rc = run({}, SHOW, MPIRUN .. ' sh spec/dist/fake_srun.sh')
    assert.equal(0, rc, out)
    assert.truthy(out:find('slurm rank=0 size=2 local=0 node=0 nodes=1 pmi=true', 1, true), out)
    assert.truthy(out:find('slurm rank=1 size=2 local=1 node=0 nodes=1 pmi=true', 1, true), out)
    assert.truthy(out:find('world 0 of 2 local 0 mpi', 1, true), out)
    assert.truthy(out:find('world 1 of 2 local 1 mpi', 1, true), out)
  end)

  it_mpi('srun and MPI disagreeing on the world is an error naming both', function()
    local out, rc = run({FAKE_SLURM_TASKS = 3}, 'flow.env.barrier()',
                        MPIRUN .. ' -x FAKE_SLURM_TASKS sh spec/dist/fake_srun.sh')
    assert.are_not.equal(0, rc, out)
    assert.truthy(out:find('srun says task 1 of 3 (SLURM_PROCID, SLURM_STEP_NUM_TASKS) but MPI '
                           .. 'says rank 1 of 2', 1, true), out)
  end)
end)
