-- bench/ops.lua -- tensor-op benchmarks, side by side in one run with a plain
-- C loop, OpenBLAS called directly, and PyTorch where it is installed.
--
--   make bench                    (or: LUA_PATH='lua/?.lua;lua/?/init.lua;;' luajit bench/ops.lua)
--   luajit bench/ops.lua [threads] [--no-write] [--out FILE]
--
-- Threads: the first argument, else $OF_BENCH_THREADS, else 2; the same count
-- is given to OneFlow-Lua, the C loop, OpenBLAS and PyTorch. The table is
-- printed and written to doc/benchmarks.md (section "Tensor ops"), or to
-- FILE with --out (`make bench` writes build/benchmarks.md unless WRITE=1).
local ffi = require 'ffi'
local flow = require 'oneflow'
local core = require 'oneflow._C'

local C, out1 = core.C, core.out1

local threads, write_doc, out_file = nil, true, nil
do
  local argv, i = arg or {}, 1
  while i <= #argv do
    local a = argv[i]
    if a == '--no-write' then write_doc = false
    elseif a == '--out' and argv[i + 1] then out_file = argv[i + 1]; i = i + 1
    elseif tonumber(a) then threads = tonumber(a)
    else error('bench/ops.lua: unknown argument ' .. a .. ' (expected a thread count, --no-write or --out FILE)', 0) end
    i = i + 1
  end
end
threads = threads or tonumber(os.getenv('OF_BENCH_THREADS') or '') or 2
flow.set_num_threads(threads)

local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
-- the 1-minute load average
local function loadavg() return B.loadavg():match('^(%S+)') end
local load_before = loadavg()   -- other work on the machine skews every row

local N_BIG = 16 * 1024 * 1024   -- floats per operand for the bandwidth rows
local N_MM = 1024                -- square matmul size

------------------------------------------------------------------ timing
local now = B.now

-- Best time per iteration of fn(iters) over `repeats` runs. Warm-up first:
-- with `steady` set, until the caching allocator serves the op's result
-- from its cache (Lua releases dead results in sweeps, so the first
-- results land on fresh pages; see oneflow/_C.lua), at most
-- `steady` calls; else a tenth of a run.
local function best_of(repeats, iters, fn, steady)
  if steady then
    for i = 1, steady do
      local hits = flow.memory_stats().cache_hits
      fn(1)
      if i > 2 and flow.memory_stats().cache_hits > hits then break end
    end
  else
    fn(math.max(1, math.floor(iters / 10)))
  end
  local best = math.huge
  for _ = 1, repeats do
    local t0 = now()
    fn(iters)
    local t = (now() - t0) / iters
    if t < best then best = t end
  end
  return best
end

local function script_dir() return B.dir end
local function file_exists(p)
  local f = io.open(p, 'rb')
  if f then f:close() end
  return f ~= nil
end
local read_cmd = B.read_cmd

------------------------------------------------------------------ OneFlow-Lua
local res = {flow = {}, ref = {}, torch = {}}

-- (a) eager overhead: a 1-element add, c = a + b
do
  local a, b = flow.tensor({1}), flow.tensor({2})
  local c
  local t = best_of(7, 1000000, function(n)
    for _ = 1, n do c = a + b end
  end)
  assert(c:item() == 3)
  res.flow.small_add = t * 1e6
end

-- The C yardstick: bench_triad from the CMake build next to the library,
-- else bench/triad.c compiled here.
local function triad_exe()
  local exe = (core.library_path:match('^(.*)/') or '.') .. '/bench_triad'
  if file_exists(exe) then return exe end
  local base = os.tmpname()
  os.remove(base)
  exe = base .. '_triad'
  local msg = read_cmd(('cc -O3 -fopenmp %s/triad.c -o %s 2>&1'):format(script_dir(), exe))
  if file_exists(exe) then return exe, true end
  io.stderr:write('bench: cannot build bench/triad.c: ', msg or '', '\n')
end
local triad, triad_tmp = triad_exe()
local function triad_rate(repeats)
  if not triad then return nil end
  local out = read_cmd(('OMP_NUM_THREADS=%d %s %d %d 2>/dev/null'):format(threads, triad, N_BIG, repeats))
  return out and tonumber(out:match('[%d%.]+'))
end

-- (b) 16M float32 add into an existing output, in rounds alternating with
-- the C triad (so both see the same machine load); (c) into a fresh result
local big_bytes = 3 * 4 * N_BIG
do
  local a = flow.full({N_BIG}, 1.0, {dtype = flow.float32})
  local b = flow.full({N_BIG}, 2.0, {dtype = flow.float32})
  local out = flow.zeros(N_BIG)
  local of_binary, release, ADD = C.of_binary, C.of_tensor_release, C.OF_ADD
  local function add_into(n)
    for _ = 1, n do
      if of_binary(ADD, a.p, b.p, out.p, out1) ~= 0 then core.raise(1) end
      release(out1[0])
    end
  end
  local t = math.huge
  for _ = 1, 5 do
    t = math.min(t, best_of(2, 10, add_into))
    local r = triad_rate(10)
    if r and r > (res.ref.triad or 0) then res.ref.triad = r end
  end
  res.flow.add_into = big_bytes / t / 1e9
  local c
  t = best_of(7, 10, function(n)
    for _ = 1, n do c = a + b end
  end, 64)
  assert(c:numel() == N_BIG)
  res.flow.add_fresh = big_bytes / t / 1e9
end
if triad_tmp then os.remove(triad) end
flow.collect()

-- (d) 1024^3 float32 matmul, and OpenBLAS's cblas_sgemm on the same inputs
local mm_flops = 2 * N_MM ^ 3
do
  local n = N_MM
  local a = (flow.arange(n * n) % 17 - 8):float():view(n, n) * 0.125
  local b = (flow.arange(n * n) % 13 - 6):float():view(n, n) * 0.25
  local c
  local function flow_mm(iters)
    for _ = 1, iters do c = a:matmul(b) end
  end
  best_of(0, 1, flow_mm, 400)   -- warm-up only (see best_of)

  pcall(ffi.cdef, [[
  void cblas_sgemm(int order, int transa, int transb, int m, int n, int k, float alpha,
                   const float *a, int lda, const float *b, int ldb, float beta,
                   float *c, int ldc);
  void openblas_set_num_threads(int n);
  ]])
  local ok, blas = pcall(ffi.load, 'openblas')
  if not ok then ok, blas = pcall(ffi.load, 'libopenblas.so.0') end
  local direct = flow.zeros(n, n)
  local pa, pb, pc = a:data_ptr(), b:data_ptr(), direct:data_ptr()
  local function blas_mm(iters)
    for _ = 1, iters do blas.cblas_sgemm(101, 111, 111, n, n, n, 1, pa, n, pb, n, 0, pc, n) end
  end
  if ok then blas.openblas_set_num_threads(threads) end
  -- alternate the two, so both see the same machine load
  local tf, tb = math.huge, math.huge
  for _ = 1, 7 do
    tf = math.min(tf, best_of(1, 5, flow_mm, 1))
    if ok then tb = math.min(tb, best_of(1, 5, blas_mm, 1)) end
  end
  res.flow.matmul = mm_flops / tf / 1e9
  if ok then
    res.ref.matmul = mm_flops / tb / 1e9
    local pm = c:data_ptr()
    for i = 0, n * n - 1 do
      if pm[i] ~= pc[i] then error(('matmul and cblas_sgemm disagree at %d'):format(i)) end
    end
  end
  flow.set_num_threads(threads)
end

------------------------------------------------------------------ PyTorch
local torch_py = [[
import sys, time
import torch
threads, n_big, n_mm = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
def best_of(repeats, iters, fn):
    fn(max(1, iters // 10))
    best = float('inf')
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(iters)
        best = min(best, (time.perf_counter() - t0) / iters)
    return best
a, b = torch.ones(1), torch.ones(1)
def small(n):
    for _ in range(n):
        c = a + b
print('small_add', best_of(7, 200000, small) * 1e6)
a, b, out = torch.full((n_big,), 1.0), torch.full((n_big,), 2.0), torch.zeros(n_big)
def into(n):
    for _ in range(n):
        torch.add(a, b, out=out)
print('add_into', 12 * n_big / best_of(7, 10, into) / 1e9)
def fresh(n):
    for _ in range(n):
        c = a + b
print('add_fresh', 12 * n_big / best_of(7, 10, fresh) / 1e9)
del a, b, out
x = (torch.arange(n_mm * n_mm) % 17 - 8).float().view(n_mm, n_mm) * 0.125
y = (torch.arange(n_mm * n_mm) % 13 - 6).float().view(n_mm, n_mm) * 0.25
def mm(n):
    for _ in range(n):
        z = x.matmul(y)
print('matmul', 2 * n_mm ** 3 / best_of(7, 5, mm) / 1e9)
print('version', torch.__version__)
]]

local torch_note
do
  local py
  for _, cand in ipairs({'/usr/bin/python3', 'python3'}) do
    local ok = os.execute(cand .. ' -c "import torch" >/dev/null 2>&1')
    if ok == 0 or ok == true then py = cand; break end
  end
  if py then
    local path = os.tmpname()
    local f = assert(io.open(path, 'w'))
    f:write(torch_py)
    f:close()
    local out
    for _ = 1, 2 do   -- best of two runs, as the OneFlow-Lua figures are best-of too
      out = read_cmd(('%s %s %d %d %d 2>&1'):format(py, path, threads, N_BIG, N_MM)) or ''
      for k, v in out:gmatch('(%w+_?%w*) ([^\n]+)') do
        local old, x = res.torch[k], tonumber(v)
        if k == 'version' then res.torch_version = v
        elseif x and (old == nil or (k == 'small_add' and x < old) or (k ~= 'small_add' and x > old)) then
          res.torch[k] = x
        end
      end
    end
    os.remove(path)
    if not res.torch.matmul then torch_note = 'PyTorch run failed: ' .. out:sub(1, 200) end
  else
    torch_note = 'PyTorch is not installed (`import torch` failed), so its column is n/a.'
  end
end

------------------------------------------------------------------ report
local function fmt(v, digits)
  if v == nil then return 'n/a' end
  return ('%.' .. (digits or 1) .. 'f'):format(v)
end
local function ratio(x, y)
  if x == nil or y == nil or y == 0 then return 'n/a' end
  return ('%.2fx'):format(x / y)
end
local function met(ok)
  if ok == nil then return 'n/a' end
  return ok and 'yes' or 'NO'
end

local F, R, P = res.flow, res.ref, res.torch
local rows = {
  {'1-element add `c = a + b` (us/op, lower is better)', fmt(F.small_add, 3), '--', '--',
   fmt(P.small_add, 3), ratio(P.small_add, F.small_add), '<= 0.3 us',
   met(F.small_add <= 0.3)},
  {'16M float32 add into existing output (GB/s)', fmt(F.add_into), 'C triad ' .. fmt(R.triad),
   ratio(F.add_into, R.triad), fmt(P.add_into), ratio(F.add_into, P.add_into),
   '>= 70% of C triad', met(R.triad and F.add_into >= 0.7 * R.triad)},
  {'16M float32 add, fresh result `c = a + b` (GB/s)', fmt(F.add_fresh), '--', '--',
   fmt(P.add_fresh), ratio(F.add_fresh, P.add_fresh), '>= 17 GB/s (10x PyTorch\'s 1.7)',
   met(F.add_fresh >= 17)},
  {'1024x1024x1024 float32 matmul (GFLOP/s)', fmt(F.matmul),
   'OpenBLAS sgemm ' .. fmt(R.matmul), ratio(F.matmul, R.matmul), fmt(P.matmul),
   ratio(F.matmul, P.matmul), '>= 90% of OpenBLAS', met(R.matmul and F.matmul >= 0.9 * R.matmul)},
}
local header = {'Measure', 'OneFlow-Lua', 'Reference', 'vs reference', 'PyTorch',
                'vs PyTorch', 'Target', 'Met'}

local function cpu_name()
  local f = io.open('/proc/cpuinfo')
  if not f then return 'unknown CPU' end
  local s = f:read('*a')
  f:close()
  return (s:match('model name%s*:%s*([^\n]+)') or 'unknown CPU')
end
local ncpu = tonumber((read_cmd('nproc 2>/dev/null') or ''):match('%d+')) or 0
local context = ('%s, %d cores; %d thread(s) on every side; %s; PyTorch %s; load average %s before the run; %s'):format(
  cpu_name(), ncpu, threads, jit.version, res.torch_version or 'n/a', load_before, os.date('%Y-%m-%d'))

-- console
local widths = {}
for i, h in ipairs(header) do widths[i] = #h end
for _, r in ipairs(rows) do
  for i, c in ipairs(r) do widths[i] = math.max(widths[i], #c) end
end
local function line(cells)
  local parts = {}
  for i, c in ipairs(cells) do parts[i] = c .. (' '):rep(widths[i] - #c) end
  return table.concat(parts, '  ')
end
print('Tensor ops -- ' .. context)
print(line(header))
for _, r in ipairs(rows) do print(line(r)) end
if torch_note then print(torch_note) end

-- markdown
local md = {'## Tensor ops', '', context .. '.', '',
            '| ' .. table.concat(header, ' | ') .. ' |',
            '|' .. ('---|'):rep(#header)}
for _, r in ipairs(rows) do md[#md + 1] = '| ' .. table.concat(r, ' | ') .. ' |' end
md[#md + 1] = ''
md[#md + 1] = 'Bytes counted for the adds: 3 x 4 x 16M (two reads, one write). The fresh-result ' ..
  'rows (add and matmul) allocate a result per call and are timed once the caching allocator ' ..
  'serves those results from its cache (before the first sweep of dead Lua handles they land ' ..
  'on fresh pages, which costs about half the matmul rate); OpenBLAS writes into a ' ..
  'preallocated output. Ratios above 1 mean OneFlow-Lua is faster. Times are the best of ' ..
  'several repeats; other work on the machine lowers every figure, so compare within a run.'
if torch_note then md[#md + 1] = ''; md[#md + 1] = torch_note end
local section = table.concat(md, '\n') .. '\n'

if write_doc then
  local dir = script_dir()
  local root = dir == 'bench' and '.' or dir:match('^(.*)/bench$') or dir .. '/..'
  local doc = out_file or (root .. '/doc/benchmarks.md')
  local f = io.open(doc)
  local text = f and f:read('*a')
  if f then f:close() end
  local intro = '# Benchmarks\n\n' ..
    'Measured side by side in one run on the machine named in each section.\n' ..
    'Regenerate with `make bench WRITE=1` (runs `luajit bench/ops.lua`; pass a thread count as\n' ..
    'its argument or set `OF_BENCH_THREADS`, default 2). Plain `make bench` writes its table to\n' ..
    '`build/benchmarks.md` and leaves this page alone. PyTorch figures appear where\n' ..
    '`import torch` works.\n\n'
  if not text or not text:find('^# Benchmarks') then
    text = intro .. section
  else
    local s, e = text:find('\n## Tensor ops\n.-\n## ')
    if s then
      text = text:sub(1, s) .. section .. '\n' .. text:sub(e - 2)
    else
      s = text:find('\n## Tensor ops\n')
      if s then text = text:sub(1, s) .. section
      else text = text:gsub('\n*$', '\n\n') .. section end
    end
  end
  f = assert(io.open(doc .. '.tmp', 'w'))   -- written whole, then renamed over
  f:write(text)
  f:close()
  assert(os.rename(doc .. '.tmp', doc))
  print('wrote ' .. doc)
end
