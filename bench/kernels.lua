-- bench/kernels.lua -- the memory-bound CPU kernels side by side with
-- PyTorch 1.13 (Debian's python3-torch, /usr/bin/python3) and PyTorch 2.x
-- (bench/.venv from bench/torch_venv.sh, when it installs), at the same
-- thread count, in rounds that alternate the three sides and the C triad
-- (bench/triad.c) in one run. Prints, per case, each side's best time, the
-- ratio to the faster PyTorch, GB/s in bytes moved and the share of the
-- triad's bandwidth.
--
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' luajit bench/kernels.lua [threads] [rounds]
--   WRITE=1 ...      also replace the section "Memory-bound kernels" of doc/benchmarks.md
--   NO_TORCH2=1 ...  skip PyTorch 2.x (else bench/torch_venv.sh is run first)
--   REPEATS=N ...    calls timed per case, round and side (default 15)
--   ROWS=N ...       N rows of 1024 instead of 4096 (ROWS=128: in cache)
--
-- Threads: the first argument, else $OF_BENCH_THREADS, else 2. The table is
-- written to build/bench_kernels.md (not tracked) and, with WRITE=1, into
-- the doc.
local flow = require 'oneflow'
local core = require 'oneflow._C'
local F = flow.nn.functional

-- METRIC=cpu: time each call by the calling thread's CPU time, on one thread
-- (every side then runs its kernels on that thread), so that time slices
-- taken by other work on a loaded machine do not count; the default, wall,
-- times the call on the wall clock at the given thread count.
local cpu_metric = os.getenv('METRIC') == 'cpu'
local threads = tonumber(arg and arg[1] or '') or tonumber(os.getenv('OF_BENCH_THREADS') or '') or 2
if cpu_metric then threads = 1 end
local rounds = tonumber(arg and arg[2] or '') or 3
local REPEATS = tonumber(os.getenv('REPEATS') or '') or 15   -- calls timed per round and side
flow.set_num_threads(threads)

-- ROWS=128 ...: another row count (both sides): 128 rows are 512 KB, in
-- cache, where the arithmetic shows instead of the memory's speed
local R, M = tonumber(os.getenv('ROWS') or '') or 4096, 1024   -- as bench/kernels_torch.py
assert(R == 4096 or os.getenv('WRITE') ~= '1', 'kernels: WRITE=1 is for the 4096 rows of the doc')
local N_EW = 16 * 1024 * 1024     -- floats of the elementwise cases

------------------------------------------------------------------ helpers
local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
local CLOCK = cpu_metric and B.THREAD_CPU or B.MONOTONIC
local function now() return B.now(CLOCK) end
local read_cmd, loadavg, BENCH = B.read_cmd, B.loadavg, B.dir

------------------------------------------------------------------ cases
-- name, bytes moved per call (element size es), what it is
local CASES = {
  {'layer_norm_f32', 2, 'layer_norm forward, weight + bias'},
  {'layer_norm_bf16', 2, 'layer_norm forward, bfloat16'},
  {'layer_norm_bwd_f32', 5, 'layer_norm forward + backward (x, weight, bias grads)'},
  {'layer_norm_bwd_bf16', 5, 'layer_norm forward + backward, bfloat16'},
  {'softmax_f32', 2, 'softmax forward'},
  {'softmax_bf16', 2, 'softmax forward, bfloat16'},
  {'log_softmax_f32', 2, 'log_softmax forward'},
  {'softmax_bwd_f32', 5, 'softmax forward + backward'},
  {'softmax_bwd_bf16', 5, 'softmax forward + backward, bfloat16'},
  {'log_softmax_bwd_f32', 5, 'log_softmax forward + backward'},
  {'cross_entropy_f32', 1, 'cross_entropy forward, class indices, mean'},
  {'cross_entropy_bwd_f32', 3, 'cross_entropy forward + backward'},
  {'logsumexp_f32', 1, 'logsumexp over the last dim'},
  {'gelu_f32', 2, 'GELU (erf) forward'},
  {'gelu_bwd_f32', 5, 'GELU forward + backward'},
  {'gelu_bf16', 2, 'GELU forward, bfloat16'},
  {'silu_f32', 2, 'SiLU forward'},
  {'silu_bwd_f32', 5, 'SiLU forward + backward'},
  {'silu_bf16', 2, 'SiLU forward, bfloat16'},
  {'bias_gelu_f32', 2, 'bias add + GELU, eager (x + b, then GELU; b over the last dim)'},
  {'bias_gelu_graph_f32', 2, 'bias add + GELU in an eval nn.Graph (one fused node; PyTorch: eager)'},
  {'batch_norm_eval_f32', 2, 'batch_norm eval, NCHW, 64 channels'},
  {'batch_norm_eval_bf16', 2, 'batch_norm eval, NCHW, 64 channels, bfloat16'},
  {'batch_norm_train_f32', 2, 'batch_norm training forward (batch statistics, running stats updated)'},
  {'batch_norm_bwd_f32', 5, 'batch_norm training forward + backward (x, weight, bias grads)'},
  {'rms_norm_f32', 2, 'rms_norm forward, weight'},
  {'rms_norm_bf16', 2, 'rms_norm forward, weight, bfloat16'},
  {'rms_norm_bwd_f32', 5, 'rms_norm forward + backward (x, weight grads)'},
  {'exp_f32', 2, 'exp'},
  {'log_f32', 2, 'log (of |x| + 0.1)'},
  {'tanh_f32', 2, 'tanh'},
  {'sigmoid_f32', 2, 'sigmoid'},
  {'erf_f32', 2, 'erf'},
  {'relu_f32', 2, 'relu'},
  {'dropout_f32', 2, 'dropout forward, p = 0.5, training'},
  {'add_out_f32', 3, 'add into an existing output, 16M floats'},
  {'sum_all_f32', 1, 'sum of all elements'},
  {'sum_rows_f32', 1, 'sum over dim 1 (the rows: a bias grad)'},
  {'mean_last_f32', 1, 'mean over the last dim'},
}
-- ONLY=name,name ...: run just these cases (a quick look; WRITE=1 wants them all)
if os.getenv('ONLY') then
  local keep = {}
  for n in os.getenv('ONLY'):gmatch('[^,%s]+') do keep[n] = true end
  for i = #CASES, 1, -1 do if not keep[CASES[i][1]] then table.remove(CASES, i) end end
  assert(#CASES > 0 and os.getenv('WRITE') ~= '1', 'kernels: ONLY names no case, or with WRITE=1')
end

local function rows(dt)
  flow.manual_seed(0)
  return (flow.randn(R, M) * 2 + 0.5):to(dt)
end

-- name -> a closure running one call
local function make(name)
  local op, dts = name:match('^(.*)_(%w+)$')
  local dt = ({f32 = flow.float32, bf16 = flow.bfloat16})[dts]
  if op == 'add_out' then
    local a = flow.full({N_EW}, 1.0, {dtype = dt})
    local c = flow.full({N_EW}, 2.0, {dtype = dt})
    local o = flow.zeros(N_EW, {dtype = dt})
    local C, out1, release = core.C, core.out1, core.C.of_tensor_release
    return function()
      if C.of_binary(C.OF_ADD, a.p, c.p, o.p, out1) ~= 0 then core.raise(1) end
      release(out1[0])
    end, N_EW * ({f32 = 4, bf16 = 2})[dts]
  end
  local x = rows(dt)
  local w, b = flow.randn(M):to(dt), flow.randn(M):to(dt)
  local g = flow.randn(R, M):to(dt)
  local es = ({f32 = 4, bf16 = 2})[dts]
  local fn
  -- batch_norm: the rows as [R / 64, 64, 32, 32] (each row one plane of 1024)
  local C4 = 64
  local x4 = op:match('^batch_norm') and x:view(R / C4, C4, 32, 32)
  local w4, b4 = flow.randn(C4):to(dt), flow.randn(C4):to(dt)
  local rm, rv = flow.zeros(C4, {dtype = dt}), flow.ones(C4, {dtype = dt})
  if op == 'layer_norm' then fn = function() return F.layer_norm(x, {M}, w, b, 1e-5) end
  elseif op == 'batch_norm_eval' then fn = function() return F.batch_norm(x4, rm, rv, w4, b4, false, 0.1, 1e-5) end
  elseif op == 'batch_norm_train' then fn = function() return F.batch_norm(x4, rm, rv, w4, b4, true, 0.1, 1e-5) end
  elseif op == 'bias_gelu' then fn = function() return F.gelu(x + b) end
  elseif op == 'bias_gelu_graph' then
    local G = flow.nn.Graph:subclass('BiasGelu')
    function G:__init() flow.nn.Graph.__init(self); self.b = b end
    function G:build(z) return F.gelu(z + self.b) end
    local graph = G()
    graph(x)   -- the first call traces
    fn = function() return graph(x) end
  elseif op == 'softmax' then fn = function() return flow.softmax(x, -1) end
  elseif op == 'log_softmax' then fn = function() return flow.log_softmax(x, -1) end
  elseif op == 'cross_entropy' then
    local t = flow.randint(1, M + 1, {R}, {dtype = flow.int64})
    fn = function() return F.cross_entropy(x, t) end
  elseif op == 'logsumexp' then fn = function() return x:logsumexp(-1) end
  elseif op == 'gelu' then fn = function() return F.gelu(x) end
  elseif op == 'silu' then fn = function() return F.silu(x) end
  elseif op == 'exp' or op == 'tanh' or op == 'sigmoid' or op == 'erf' or op == 'relu' then
    local f = flow[op]
    fn = function() return f(x) end
  elseif op == 'log' then
    local xp = x:abs() + 0.1
    fn = function() return flow.log(xp) end
  elseif op == 'rms_norm' then fn = function() return F.rms_norm(x, {M}, w, 1e-6) end
  elseif op == 'dropout' then fn = function() return F.dropout(x, 0.5, true) end
  elseif op == 'sum_all' then fn = function() return x:sum() end
  elseif op == 'sum_rows' then fn = function() return x:sum(1) end
  elseif op == 'mean_last' then fn = function() return x:mean(-1) end
  elseif op:match('_bwd$') then
    local xg = x:clone():requires_grad_()
    local wg, bg = w:clone():requires_grad_(), b:clone():requires_grad_()
    local x4g = xg:view(R / C4, C4, 32, 32)
    local w4g, b4g = w4:clone():requires_grad_(), b4:clone():requires_grad_()
    local fwd = ({
      layer_norm_bwd = function() return F.layer_norm(xg, {M}, wg, bg, 1e-5) end,
      batch_norm_bwd = function() return F.batch_norm(x4g, rm, rv, w4g, b4g, true, 0.1, 1e-5):view(R, M) end,
      rms_norm_bwd = function() return F.rms_norm(xg, {M}, wg, 1e-6) end,
      softmax_bwd = function() return flow.softmax(xg, -1) end,
      log_softmax_bwd = function() return flow.log_softmax(xg, -1) end,
      gelu_bwd = function() return F.gelu(xg) end,
      silu_bwd = function() return F.silu(xg) end,
      cross_entropy_bwd = function() return F.cross_entropy(xg, flow.randint(1, M + 1, {R}, {dtype = flow.int64})) end,
    })[op]
    local scalar = op == 'cross_entropy_bwd'
    fn = function()
      xg.grad, wg.grad, bg.grad, w4g.grad, b4g.grad = nil, nil, nil, nil, nil
      if scalar then fwd():backward() else fwd():backward(g) end
    end
  else
    error('kernels: unknown case ' .. name)
  end
  return fn, R * M * es
end

-- best seconds of one call
local function time_ours(fn)
  for _ = 1, 5 do fn() end
  local best = math.huge
  for _ = 1, REPEATS do
    local t0 = now()
    fn()
    local t = now() - t0
    if t < best then best = t end
  end
  return best
end

------------------------------------------------------------------ sides
local torch2 = nil
if os.getenv('NO_TORCH2') ~= '1' then
  local out = read_cmd(('sh %s/torch_venv.sh 2>&1'):format(BENCH))
  torch2 = out:match('(%S+/bin/python3)%s*$')
  if not torch2 then io.stderr:write('kernels: no PyTorch 2.x (', out:gsub('%s+$', ''), ')\n') end
end
local sides = {{key = 'torch1', py = '/usr/bin/python3'}}
if torch2 then sides[2] = {key = 'torch2', py = torch2} end
for _, s in ipairs(sides) do
  if os.execute(s.py .. ' -c "import torch" >/dev/null 2>&1') ~= 0 then s.missing = true end
end

local names = {}
for i, c in ipairs(CASES) do names[i] = c[1] end

local function run_torch(side)
  local out = read_cmd(('%s%s %s/kernels_torch.py %d %d %s 2>&1'):format(
    cpu_metric and 'METRIC=cpu ' or '', side.py, BENCH, threads, REPEATS, table.concat(names, ' ')))
  local r = {}
  for name, t in out:gmatch('(%S+) ([%d.]+)\n') do r[name] = tonumber(t) end
  side.version = out:match('version (%S+)') or side.version
  if not next(r) then io.stderr:write('kernels: ', side.py, ' failed: ', out, '\n') end
  return r
end

local triad_exe = (core.library_path:match('^(.*)/') or '.') .. '/bench_triad'
local function triad()
  local out = read_cmd(('OMP_NUM_THREADS=%d %s %d 10 2>/dev/null'):format(threads, triad_exe, N_EW))
  return tonumber(out:match('[%d.]+'))
end

------------------------------------------------------------------ rounds
local load_before = loadavg()
local best = {ours = {}, torch1 = {}, torch2 = {}}
local bytes, triad_best = {}, nil
local fns = {}
for _, c in ipairs(CASES) do
  local fn, n = make(c[1])
  fns[c[1]], bytes[c[1]] = fn, n * c[2]
end
local function keep(tab, name, t)
  if t and (not tab[name] or t < tab[name]) then tab[name] = t end
end
for r = 1, rounds do
  -- alternate who goes first
  local order = {'ours', 'triad'}
  for _, s in ipairs(sides) do order[#order + 1] = s end
  if r % 2 == 0 then
    local rev = {}
    for i = #order, 1, -1 do rev[#rev + 1] = order[i] end
    order = rev
  end
  for _, side in ipairs(order) do
    if side == 'ours' then
      for _, c in ipairs(CASES) do keep(best.ours, c[1], time_ours(fns[c[1]])) end
    elseif side == 'triad' then
      local t = triad()
      if t and (not triad_best or t > triad_best) then triad_best = t end
    elseif not side.missing then
      local res = run_torch(side)
      for name, t in pairs(res) do keep(best[side.key], name, t) end
    end
  end
  io.stderr:write(('kernels: round %d of %d done\n'):format(r, rounds))
end
local load_after = loadavg()

------------------------------------------------------------------ table
local function cpu_name()
  local f = io.open('/proc/cpuinfo')
  if not f then return 'unknown CPU' end
  local s = f:read('*a')
  f:close()
  return s:match('model name%s*:%s*([^\n]+)') or 'unknown CPU'
end
local v1 = sides[1].version or 'n/a'
local v2 = torch2 and (sides[2].version or 'n/a') or 'not installed'
local lines = {}
local function add(s) lines[#lines + 1] = s end
add(('%s, %d cores online; %d thread(s) on every side; %s; ISA %s; PyTorch %s and %s; '
     .. 'load average %s before, %s after; %d rounds alternating the sides, best of %d calls per '
     .. 'round; C triad %.1f GB/s; %s.'):format(cpu_name(), tonumber(read_cmd('nproc')) or 0,
     threads, cpu_metric and 'times are the calling thread\'s CPU time per call (METRIC=cpu)'
       or 'times are wall-clock per call', flow.backends.cpu.get_cpu_capability(), v1, v2,
     load_before, load_after, rounds, REPEATS, triad_best or 0, os.date('!%Y-%m-%d %H:%M UTC')))
add('')
add('| case | ours ms | PyTorch 1.13 ms | PyTorch 2.x ms | ours / faster PyTorch | ours GB/s | % of triad '
    .. '| target met |')
add('|---|---|---|---|---|---|---|---|')
for _, c in ipairs(CASES) do
  local n = c[1]
  local o, t1, t2 = best.ours[n], best.torch1[n], best.torch2[n]
  local tb = (t1 and t2) and math.min(t1, t2) or t1 or t2
  local ratio = (o and tb) and o / tb or nil
  local gbs = o and bytes[n] / o / 1e9 or nil
  -- the triad is timed on the wall clock: no share of it under METRIC=cpu
  local pct = (gbs and triad_best and not cpu_metric) and 100 * gbs / triad_best or nil
  local met = '--'
  if ratio and pct then met = (ratio <= 0.8 and pct >= 70) and 'yes' or 'no'
  elseif ratio and cpu_metric then met = ratio <= 0.8 and 'ratio: yes' or 'ratio: no' end
  local function ms(t) return t and ('%.3f'):format(t * 1e3) or '--' end
  add(('| %s (%s, %s) | %s | %s | %s | %s | %s | %s | %s |'):format(c[3], n:match('_(%w+)$'),
      n == 'add_out_f32' and '16M' or ('%dx%d'):format(R, M), ms(o), ms(t1), ms(t2),
      ratio and ('%.2fx'):format(ratio) or '--', gbs and ('%.1f'):format(gbs) or '--',
      pct and ('%.0f%%'):format(pct) or '--', met))
end
add('')
add('Bytes moved: each input read once and each output written once (forward: 2 x the tensor; '
    .. 'forward + backward: 5 x, the backward reading x or y and the grad and writing the input '
    .. 'grad; add: 3 x 16M floats). Ratios below 1 mean OneFlow-Lua is faster.')
local text = table.concat(lines, '\n') .. '\n'
io.write(text)

local out_path = (core.library_path:match('^(.*)/') or '.') .. '/bench_kernels.md'
local f = io.open(out_path .. '.tmp', 'w')
if f then
  f:write(text)
  f:close()
  os.rename(out_path .. '.tmp', out_path)
  io.stderr:write('kernels: wrote ', out_path, '\n')
end

if os.getenv('WRITE') == '1' then
  local doc = BENCH .. '/../doc/benchmarks.md'
  local fd = assert(io.open(doc))
  local s = fd:read('*a')
  fd:close()
  local head = '## Memory-bound kernels\n'
  local a = s:find(head, 1, true)
  assert(a, 'kernels: doc/benchmarks.md has no section "Memory-bound kernels"')
  local b = s:find('\n## ', a + #head, true)
  local marker = cpu_metric and '<!-- kernels.lua cpu table -->\n'
    or '<!-- kernels.lua table -->\n'
  local sec = s:sub(a, b or #s)
  local m1 = sec:find(marker, 1, true)
  local m2 = m1 and sec:find(marker, m1 + #marker, true)
  assert(m1 and m2, 'kernels: the section lacks its two table markers')
  sec = sec:sub(1, m1 + #marker - 1) .. text .. sec:sub(m2)
  s = s:sub(1, a - 1) .. sec .. (b and s:sub(b + 1) or '')
  local tmp = doc .. '.tmp'
  fd = assert(io.open(tmp, 'w'))
  fd:write(s)
  fd:close()
  assert(os.rename(tmp, doc))
  io.stderr:write('kernels: updated ', doc, '\n')
end
