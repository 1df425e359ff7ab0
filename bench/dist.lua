-- bench/dist.lua -- distribution overheads, all measured in one mpirun job:
--   * all-reduce (sum, float32) for 4 KiB .. 64 MiB: raw MPI_Allreduce
--     called through the FFI in place on a tensor's own buffer and
--     flow.comm.all_reduce on the same tensor; raw MPI_Allreduce out of
--     place from t into a preallocated tensor, and the global-tensor boxing
--     partial_sum -> broadcast (g:to_global(P, B) of a P tensor over t; the
--     result is a new tensor from the caching allocator, reduced straight
--     into it). Median of --reps rounds (default 21, after 3 warm-up
--     rounds); each round runs the four in turn, each between barriers with
--     garbage collected before it (untimed), as a training loop does every
--     so often.
--   * the LeNet of examples/mnist: ms per training step on 1 process
--     (batch 64) vs DistributedDataParallel on every process of the job
--     (batch 64 per process, and the same global batch 64 split).
--
--   mpirun --allow-run-as-root --oversubscribe -np 2 luajit bench/dist.lua [--reps N]
--       [--steps N] [--no-write] [--no-lenet] [--weak]
-- --weak prints only one row of a weak-scaling table (DDP LeNet, 64 images
-- per process); bench/dist_hosts.lua runs it at 1-4 processes and the
-- all-reduce tables between the test hosts of tools/netns_hosts.sh.
--
-- Writes the tables to doc/benchmarks.md (section "Distribution") from rank 0.
local ffi = require 'ffi'
local flow = require 'oneflow'
local F = flow.nn.functional

local reps, steps, write_doc, lenet, weak_only = 21, 10, true, true, false
do
  local argv, i = arg or {}, 1
  while i <= #argv do
    if argv[i] == '--reps' then reps = tonumber(argv[i + 1]); i = i + 1
    elseif argv[i] == '--steps' then steps = tonumber(argv[i + 1]); i = i + 1
    elseif argv[i] == '--no-write' then write_doc = false
    elseif argv[i] == '--no-lenet' then lenet, write_doc = false, false
    elseif argv[i] == '--weak' then weak_only, write_doc = true, false
    else error('bench/dist.lua: unknown option ' .. argv[i], 0) end
    i = i + 1
  end
end
flow.set_num_threads(1)

local rank, world = flow.env.get_rank(), flow.env.get_world_size()
if flow.env.backend() ~= 'mpi' then
  print('bench/dist.lua: run it under mpirun (-np 2 or more); this process is a world of one')
  os.exit(0)
end

local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
local now, median = B.now, B.median

-- where the ranks run: a host is a distinct host name (the test hosts of
-- tools/netns_hosts.sh have their own)
local function hosts_line()
  local h = io.popen('hostname'):read('*l') or '?'
  local bytes = flow.tensor({string.byte(h, 1, -1)}, {dtype = 'uint8'})
  local seen, names = {}, {}
  for _, b in ipairs(flow.comm.all_gather(bytes)) do
    local name = string.char(unpack(b:totable()))
    if not seen[name] then seen[name], names[#names + 1] = 0, name end
    seen[name] = seen[name] + 1
  end
  local parts = {}
  for i, name in ipairs(names) do parts[i] = ('%s: %d'):format(name, seen[name]) end
  return #names, table.concat(parts, ', ')
end
local nhosts, placement_desc = hosts_line()

-- Open MPI's handles are the addresses of its predefined objects; libmpi is
-- already in the global namespace (liboneflow_mpi.so loaded it so).
pcall(ffi.cdef, [[
extern char ompi_mpi_comm_world[];
extern char ompi_mpi_float[];
extern char ompi_mpi_op_sum[];
int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, void *datatype, void *op,
                  void *comm);
]])
local MPI_IN_PLACE = ffi.cast('void *', 1)
-- in place on t, or from t into out (what a P -> B boxing must do: the
-- partial tensor stays as it was)
local function raw_allreduce(t, out)
  local rc = ffi.C.MPI_Allreduce(out and t:data_ptr() or MPI_IN_PLACE,
                                 (out or t):data_ptr(), t:numel(), ffi.C.ompi_mpi_float,
                                 ffi.C.ompi_mpi_op_sum, ffi.C.ompi_mpi_comm_world)
  assert(rc == 0, 'MPI_Allreduce failed')
end


-- Median time of each of `fns`, run in turns: every round runs each once
-- (in a rotating order), so a change of load on this shared host hits all
-- of them alike instead of the one whose runs happened to be in progress.
local function timed(fns, n)
  local times = {}
  for k = 1, #fns do times[k] = {} end
  for i = 0, n + 2 do
    for j = 0, #fns - 1 do
      local k = (i + j) % #fns + 1
      -- steady state as in a training loop: results of earlier runs are
      -- collected, so their blocks are back in the allocator's cache
      collectgarbage()
      flow.env.barrier()
      local t0 = now()
      fns[k]()
      local dt = now() - t0
      -- the slowest rank decides: reduce the time with max
      local m = flow.tensor({dt}, {dtype = 'float64'})
      flow.comm.all_reduce(m, {op = 'max'})
      if i > 2 then times[k][#times[k] + 1] = m[1]:item() end   -- rounds 0-2 warm up
    end
  end
  local res = {}
  for k = 1, #fns do res[k] = median(times[k]) end
  return res
end

------------------------------------------------------------------ all-reduce
local LeNet = require 'bench.lenet'
local lines = {}
local function out(s)
  lines[#lines + 1] = s
  if rank == 0 then print(s) end
end

local function step_time(model, batch, nsteps)
  local opt = flow.optim.SGD(model:parameters(), {lr = 0.01, momentum = 0.9})
  local x, y = flow.randn(batch, 1, 28, 28), flow.randint(1, 11, {batch})
  local function step()
    opt:zero_grad()
    F.cross_entropy(model(x), y):backward()
    opt:step()
  end
  step()
  local times = {}
  for _ = 1, nsteps do
    local t0 = now()
    step()
    times[#times + 1] = now() - t0
  end
  return median(times)
end

local function ddp_time(batch)
  local m = flow.nn.parallel.DistributedDataParallel(LeNet())
  local dt = step_time(m, batch, steps)
  local t = flow.tensor({dt}, {dtype = 'float64'})
  flow.comm.all_reduce(t, {op = 'max'})
  return t[1]:item()
end

if weak_only then
  -- one row of the weak-scaling table: 64 images per process
  flow.manual_seed(0)
  local dt = ddp_time(64)
  out(('| %d | %d | %s | %d | %.1f | %.0f |'):format(world, nhosts, placement_desc, 64 * world,
      dt * 1e3, 64 * world / dt))
  os.exit(0)
end

local all = {}
for i = 0, world - 1 do all[i + 1] = i end
local P = flow.placement('cpu', all)
local Ps, Bc = flow.sbp.partial_sum, flow.sbp.broadcast

out(nhosts == 1 and
    ('All-reduce (sum, float32) on %d processes of this host (Open MPI, shared memory), '
     .. 'median of %d; bandwidth is message bytes / time:'):format(world, reps) or
    ('All-reduce (sum, float32) on %d processes on %d hosts (%s; Open MPI over TCP), '
     .. 'median of %d; bandwidth is message bytes / time:'):format(world, nhosts, placement_desc,
                                                                 reps))
out('')
out('| size | MPI_Allreduce in place | flow.comm.all_reduce | MPI_Allreduce t -> out '
    .. '| boxing P->B | comm vs in place | boxing vs t -> out | boxing vs in place |')
out('|---|---|---|---|---|---|---|---|')
local function human(b)
  if b >= 1024 * 1024 then return ('%d MiB'):format(b / 1024 / 1024) end
  return ('%d KiB'):format(b / 1024)
end
local function bw(bytes, s) return ('%.2f ms, %.2f GB/s'):format(s * 1e3, bytes / s / 1e9) end
local size = 4 * 1024
local worst_big = 0
while size <= 64 * 1024 * 1024 do
  local n = size / 4
  -- u is reduced in place; t, the partial tensor, stays as it was
  local t, u, o = flow.ones(n), flow.ones(n), flow.empty(n)
  local g = t:to_global(P, Ps)
  local r = timed({function() raw_allreduce(u) end, function() flow.comm.all_reduce(u) end,
                   function() raw_allreduce(t, o) end, function() g:to_global(P, Bc) end}, reps)
  local raw, lib, raw2, box = r[1], r[2], r[3], r[4]
  local oc, ob, ob2 = (lib / raw - 1) * 100, (box / raw2 - 1) * 100, (box / raw - 1) * 100
  if size >= 1024 * 1024 then worst_big = math.max(worst_big, ob) end
  out(('| %s | %s | %s | %s | %s | %+.0f%% | %+.0f%% | %+.0f%% |'):format(human(size),
      bw(size, raw), bw(size, lib), bw(size, raw2), bw(size, box), oc, ob, ob2))
  size = size * 4
end
out('')
out(('Largest boxing overhead over the same out-of-place MPI_Allreduce for messages >= 1 MiB: '
     .. '%+.0f%% (target <= 10%%).'):format(worst_big))
out('')
out('Notes: flow.comm.all_reduce runs MPI_Iallreduce (polled, so a missing peer times out); '
    .. 'messages of 64 KiB and up switch Open MPI\'s libnbc to Rabenseifner\'s schedule, without '
    .. 'which it was 5-8x slower than MPI_Allreduce at 1-16 MiB. The P->B boxing must leave '
    .. 'the partial tensor as it was, so it reduces into a new tensor (out of place, compared '
    .. 'with MPI_Allreduce t -> out into a preallocated tensor); dead tensors are released before '
    .. 'it allocates, so a loop reuses the previous result\'s warm block from the caching '
    .. 'allocator (strace: no mmap/munmap per call). Below 1 MiB the '
    .. 'boxing pays a fixed ~20-40 us (the polled wait, the result tensor, the SBP checks). '
    .. 'The four columns run in turns each round, so the shared 2-core host\'s changes of load '
    .. 'hit them alike; figures still vary between runs.')
out('')

------------------------------------------------------------------ LeNet
if not lenet then os.exit(0) end
flow.manual_seed(0)
-- one process alone: rank 0 trains while the others wait at the barrier
local single = 0
if rank == 0 then single = step_time(LeNet(), 64, steps) end
flow.env.barrier()
local weak = ddp_time(64)
local strong = ddp_time(math.floor(64 / world))
out('')
out(('LeNet training step (SGD, 1 thread per process, median of %d steps):'):format(steps))
out('')
out('| run | global batch | ms/step | images/s |')
out('|---|---|---|---|')
out(('| 1 process | 64 | %.1f | %.0f |'):format(single * 1e3, 64 / single))
out(('| DDP, %d processes, 64 each | %d | %.1f | %.0f |'):format(world, 64 * world, weak * 1e3,
    64 * world / weak))
out(('| DDP, %d processes, %d each | %d | %.1f | %.0f |'):format(world, math.floor(64 / world),
    math.floor(64 / world) * world, strong * 1e3, math.floor(64 / world) * world / strong))

if write_doc and rank == 0 then
  local path = 'doc/benchmarks.md'
  local f = io.open(path, 'r')
  local doc = f and f:read('*a') or '# Benchmarks\n'
  if f then f:close() end
  local text = table.concat(lines, '\n')
  local section = '## Distribution\n\n`mpirun --allow-run-as-root --oversubscribe -np '
                  .. world .. ' luajit bench/dist.lua`\n\n' .. text .. '\n'
  -- replace the section up to the next heading of the same level, or append
  local s = doc:find('## Distribution\n', 1, true)
  if s then
    local nxt = doc:find('\n## ', s + 1, true)
    -- bench/dist_hosts.lua's subsection (between hosts) stays
    local sub = doc:find('\n### Between hosts', s, true)
    if sub and (not nxt or sub < nxt) then section = section .. doc:sub(sub + 1, nxt or -1) end
    doc = doc:sub(1, s - 1) .. section .. (nxt and doc:sub(nxt) or '')
  else doc = doc .. '\n' .. section end
  B.write_atomic(path, doc)
end
