-- Run under mpirun by spec/dist/comm_spec.lua: rank 1 stays out of a
-- collective (or runs another one, or another global op, or dies); the
-- others must fail within the timeout, naming rank 1 (and what it is doing).
local flow = require 'oneflow'
local mode = arg[1] or 'absent'
flow.env.set_timeout(tonumber(arg[2]) or 2)
local r = flow.env.get_rank()
flow.env.barrier()
if mode == 'global' then
  -- rank 1 runs a different global op: the reports name the ops
  local P = flow.placement('cpu', {0, 1, 2})
  local x = flow.randn(6, 2, {placement = P, sbp = flow.sbp.split(1)})
  local ok, err = pcall(function()
    if r == 1 then return flow.softmax(x, 1) end
    return x:sum():to_global(P, flow.sbp.broadcast)
  end)
  io.write(('rank %d: %s\n'):format(r, ok and 'ok' or tostring(err)))
  io.stdout:flush()
  os.exit(3, true)
end
if r == 1 then
  if mode == 'dead' then
    -- dies in the middle of the job, as a crash or the OOM killer would
    local P = require 'oneflow.utils.posix'
    P.C.kill(P.C.getpid(), P.SIGKILL)
  end
  if mode == 'absent' then
    -- stays away long enough for the others to time out and ask around
    os.execute('sleep 8')
    os.exit(0, true)
  end
  local ok, err = pcall(flow.env.barrier)   -- a different collective
  io.write(('rank %d: %s\n'):format(r, ok and 'ok' or tostring(err)))
  io.stdout:flush()
  os.exit(3, true)
else
  local t0 = os.time()
  local ok, err = pcall(flow.comm.all_reduce, flow.ones(4))
  io.write(('rank %d after %d s: %s\n'):format(r, os.time() - t0, ok and 'ok' or tostring(err)))
  io.stdout:flush()
  os.exit(3, true)
end
