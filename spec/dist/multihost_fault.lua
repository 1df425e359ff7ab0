-- Run under mpirun across the namespace hosts by spec/dist/multihost_spec.lua:
-- every rank all-reduces in a loop; rank 0 writes `ready` after the first
-- rounds, then the spec cuts a host off (its link down) or kills its ranks.
-- A rank whose collective fails prints what it got and how long after the
-- last good round, and exits 3.
--   luajit spec/dist/multihost_fault.lua READY_FILE TIMEOUT_S
local flow = require 'oneflow'
local P = require 'oneflow.utils.posix'
local ready, timeout = arg[1], tonumber(arg[2]) or 3
flow.env.set_timeout(timeout)
local r = flow.env.get_rank()
flow.env.barrier()
local last = P.now()
for round = 1, 6000 do
  local ok, err = pcall(flow.comm.all_reduce, flow.ones(4096))
  if not ok then
    io.write(('rank %d failed %.1f s after round %d: %s\n'):format(r, P.now() - last, round - 1,
                                                                  tostring(err)))
    io.stdout:flush()
    os.exit(3, true)
  end
  last = P.now()
  if round == 5 and r == 0 then
    local f = assert(io.open(ready .. '.tmp', 'w'))
    f:write('ready\n')
    f:close()
    os.rename(ready .. '.tmp', ready)
  end
  P.C.poll(nil, 0, 20)   -- 20 ms between rounds
end
io.write(('rank %d: no fault came\n'):format(r))
os.exit(4, true)
