-- bench/dist_hosts.lua -- distribution between hosts, on the test hosts of
-- tools/netns_hosts.sh (network namespaces joined by veth links, Open MPI
-- over TCP on them; needs root). In one run:
--   * bench/dist.lua's all-reduce table (raw MPI_Allreduce through the FFI,
--     flow.comm.all_reduce, boxing P->B, in turns each round) with one rank
--     on each of 2 hosts, so every byte crosses the links;
--   * weak scaling of DDP LeNet (64 images per process, 1 thread each) on
--     1, 2, 3 and 4 processes spread over the 2 hosts (--map-by node).
-- Writes them to doc/benchmarks.md, section "Distribution", subsection
-- "Between hosts", with the load average before and after.
--
--   luajit bench/dist_hosts.lua [--reps N] [--steps N] [--no-write]
local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')

local reps, steps, write_doc = 11, 10, true
do
  local argv, i = arg or {}, 1
  while i <= #argv do
    if argv[i] == '--reps' then reps = tonumber(argv[i + 1]); i = i + 1
    elseif argv[i] == '--steps' then steps = tonumber(argv[i + 1]); i = i + 1
    elseif argv[i] == '--no-write' then write_doc = false
    else error('bench/dist_hosts.lua: unknown option ' .. argv[i], 0) end
    i = i + 1
  end
end

local function sh(cmd)
  local p = io.popen('(' .. cmd .. ') 2>&1; echo "rc=$?"')
  local out = p:read('*a')
  p:close()
  return (out:gsub('rc=%d+%s*$', '')), tonumber(out:match('rc=(%d+)%s*$'))
end

local out, rc = sh('sh tools/netns_hosts.sh check')
if rc ~= 0 then
  print('bench/dist_hosts.lua: no test hosts here: ' .. out)
  os.exit(0)
end
local load_before = B.loadavg()
out, rc = sh('sh tools/netns_hosts.sh up 2')
if rc ~= 0 then error('netns_hosts.sh up 2 failed: ' .. out, 0) end

local ok, err = pcall(function()
  local env = 'LUA_PATH="$PWD/lua/?.lua;$PWD/lua/?/init.lua;$PWD/?.lua;;" OMP_NUM_THREADS=1 '
  local lines = {}
  local function add(s)
    lines[#lines + 1] = s
    print(s)
  end
  -- bench/dist.lua prints from rank 0 only: keep its table lines
  local function table_of(cmd)
    local o, code = sh(env .. cmd)
    if code ~= 0 then error(cmd .. ' failed:\n' .. o, 0) end
    return o
  end
  -- mpi_yield_when_idle: a blocking MPI_Allreduce spins on its core unless
  -- told to yield, which starves the peer on a shared machine (the hosts
  -- here share its cores) and made the raw column 10-100x slower than our
  -- polled one; with it both sides yield alike
  local o = table_of(('sh tools/netns_mpirun.sh --mca mpi_yield_when_idle 1 -H 10.77.0.1:1,10.77.0.2:1 '
                      .. '-np 2 luajit bench/dist.lua --no-lenet --reps %d'):format(reps))
  for line in o:gmatch('[^\n]+') do
    if line:find('^All%-reduce') then add(line); add('')
    elseif line:find('^|') then add(line)
    elseif line:find('^Largest') then add(''); add(line) end
  end
  add('')
  add(('DDP LeNet weak scaling (SGD, 64 images per process, 1 thread per process, median of %d '
       .. 'steps, the slowest rank\'s):'):format(steps))
  add('')
  add('| processes | hosts | ranks per host | global batch | ms/step | images/s |')
  add('|---|---|---|---|---|---|')
  for np = 1, 4 do
    o = table_of(('sh tools/netns_mpirun.sh -H 10.77.0.1:2,10.77.0.2:2 --map-by node -np %d '
                  .. 'luajit bench/dist.lua --weak --steps %d'):format(np, steps))
    add(assert(o:match('\n?(|[^\n]+)'), o))
  end
  add('')
  add(('Load average (1, 5, 15 min) before: %s, after: %s.'):format(load_before, B.loadavg()))
  add('')
  add('The test hosts share this machine\'s cores and memory and their links are veth pairs '
      .. '(copies through the kernel\'s TCP stack, no wire): these figures are the software path '
      .. 'between hosts, not a network, and on a machine with fewer cores than processes weak '
      .. 'scaling cannot hold -- the rows show what DDP\'s communication adds to compute that '
      .. 'all ranks share. Under a high load the columns of one row still compare (they run in '
      .. 'turns each round), the rows less so.')
  return lines
end)
sh('sh tools/netns_hosts.sh down')
if not ok then error(err, 0) end
local lines = err

if write_doc then
  local path = 'doc/benchmarks.md'
  local f = assert(io.open(path, 'r'))
  local doc = f:read('*a')
  f:close()
  local sub = '### Between hosts (network namespaces)\n\n`luajit bench/dist_hosts.lua`\n\n'
              .. table.concat(lines, '\n') .. '\n'
  local s = assert(doc:find('## Distribution\n', 1, true), 'doc/benchmarks.md has no Distribution section')
  local nxt = doc:find('\n## ', s + 1, true)
  local old = doc:find('\n### Between hosts', s, true)
  if old and (not nxt or old < nxt) then
    -- its own subsection only: the next heading (### or ##) ends it
    local stop = doc:find('\n##', old + 1, true)
    doc = doc:sub(1, old) .. sub .. (stop and doc:sub(stop) or '')
  else
    local at = nxt or #doc
    doc = doc:sub(1, at) .. (nxt and '' or '\n') .. sub .. (nxt and doc:sub(nxt) or '')
  end
  B.write_atomic(path, doc)
end
