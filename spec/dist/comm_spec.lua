-- flow.env / flow.comm in a single process (a world of one), and the fault
-- path under mpirun: a rank that stays away is named within the timeout.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local have_mpirun = require('spec.dist.helpers').have_mpirun

describe('flow.env in one process', function()
  if flow.env.get_world_size() ~= 1 then return end
  it('is rank 0 of 1', function()
    assert.equal(0, flow.env.get_rank())
    assert.equal(1, flow.env.get_world_size())
    assert.equal(0, flow.env.get_local_rank())
    assert.equal('self', flow.env.backend())
    flow.env.barrier()
  end)
  it('collectives are identities on a world of one', function()
    local t = flow.tensor({1, 2, 3})
    flow.comm.all_reduce(t)
    H.close(t, {1, 2, 3})
    local g = flow.comm.all_gather(flow.tensor({{1, 2}}))
    assert.equal(1, #g)
    H.close(g[1], {{1, 2}})
    H.close(flow.comm.reduce_scatter(flow.tensor({4, 5})), {4, 5})
    local a = flow.comm.all_to_all({flow.tensor({7})})
    H.close(a[1], {7})
    flow.comm.broadcast(t, 0)
    H.close(t, {1, 2, 3})
  end)
  it('rejects bad arguments clearly', function()
    H.raises(function() flow.comm.all_reduce(flow.ones(2), {op = 'prod'}) end, 'all_reduce', 'prod')
    H.raises(function() flow.comm.broadcast(flow.ones(2), 3) end, 'broadcast', 'root 3')
    H.raises(function() flow.comm.send(flow.ones(2), 0) end, 'send', 'itself')
    H.raises(function() flow.comm.all_reduce({}) end, 'all_reduce', 'local tensor')
    H.raises(function() flow.env.set_timeout(0) end, 'set_timeout', 'positive')
  end)
  it('timeout is configurable', function()
    local old = flow.env.get_timeout()
    flow.env.set_timeout(12.5)
    assert.equal(12.5, flow.env.get_timeout())
    flow.env.set_timeout(old)
  end)
end)

describe('a rank that does not take part', function()
  if flow.env.get_world_size() ~= 1 then return end
  local mpirun = have_mpirun()
  local function run(mode, token)
    local cmd = ('LUA_PATH="lua/?.lua;lua/?/init.lua;;" timeout 60 mpirun --allow-run-as-root '
                 .. '--oversubscribe -np 3 luajit spec/dist/fault_script.lua %s 2 %s 2>&1'):format(mode, token or '')
    local t0 = os.time()
    local f = io.popen(cmd)
    local out = f:read('*a')
    f:close()
    return out, os.time() - t0
  end
  local it_mpi = mpirun and it or pending
  it_mpi('is named as not responding, within the bound', function()
    local out, secs = run('absent')
    assert(out:find('rank 0 after', 1, true), out)
    assert(out:find('timed out after 2 s', 1, true), out)
    assert(out:find('rank 1 is not responding', 1, true), out)
    assert(secs < 30, 'took ' .. secs .. ' s')
  end)
  it_mpi('that dies is named, and every other process of the job exits', function()
    local token = 'dead-rank-' .. require('oneflow.utils.posix').C.getpid()
    local out, secs = run('dead', token)
    -- mpirun ends the job when a rank dies and names it; a launcher that
    -- did not would leave the others to time out and name it themselves
    assert(out:find('process rank 1 with PID %d+ on node .- exited on signal 9')
           or out:find('rank 1 is not responding', 1, true), out)
    assert(secs < 30, 'took ' .. secs .. ' s')
    local p = io.popen('pgrep -f "fault_script.lua [d]ead 2 ' .. token .. '"')   -- [d]: not this shell
    local left = p:read('*a')
    p:close()
    assert.are.equal('', left, 'processes of the job remain')
  end)
  it_mpi('in another collective is named with what it is doing', function()
    local out = run('other')
    -- MPI may see the mismatch as a timeout on the all-reducing ranks (they
    -- name rank 1's barrier) or as an error on rank 1 (it names theirs)
    assert(out:find('rank 1 is in barrier', 1, true)
           or out:find('rank [02] is in all_reduce'), out)
  end)
  it_mpi('in another global op is named with the op', function()
    local out = run('global')
    -- which rank sees what depends on MPI's matching; each op is named
    assert(out:find('all_reduce (in to_global)', 1, true), out)
    assert(out:find('all_to_all (in softmax)', 1, true), out)
  end)
end)
