-- attention.lua -- F.scaled_dot_product_attention forward + backward
-- (core/ops/attention.c) at head dim 64, side by side with PyTorch 1.13
-- (Debian's python3-torch: the reference math, it has no fused SDPA) and
-- PyTorch 2.x (its F.scaled_dot_product_attention, CPU flash kernel), in
-- alternating rounds in one run; and the peak memory of one forward +
-- backward per length (growth of VmHWM in a fresh process after the inputs
-- exist; linear in L means no [L, L] matrix).
--   luajit bench/attention.lua [ROUNDS] [REPEATS]
--   TORCH2_PY=/path/to/python3  PyTorch 2.x's python (else bench/torch_venv.sh)
--   B=1 H=2 LENGTHS=1024,4096 THREADS=n
--   METRIC=cpu  time by the process's CPU time (all threads; both sides), not
--               the wall clock: steadier on a shared machine
local flow = require 'oneflow'
local F = flow.nn.functional

local ROUNDS, REPEATS = tonumber(arg[1]) or 3, tonumber(arg[2]) or 2
local B, H = tonumber(os.getenv('B')) or 1, tonumber(os.getenv('H')) or 2
local THREADS = tonumber(os.getenv('THREADS')) or flow.get_num_threads()
flow.set_num_threads(THREADS)
local LENGTHS = {}
for l in (os.getenv('LENGTHS') or '1024,4096'):gmatch('%d+') do LENGTHS[#LENGTHS + 1] = tonumber(l) end
local E = 64

local BC = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
local read_cmd, BENCH = BC.read_cmd, BC.dir

local torch2 = os.getenv('TORCH2_PY')
if not torch2 and os.getenv('NO_TORCH2') ~= '1' then
  torch2 = read_cmd(('sh %s/torch_venv.sh 2>/dev/null'):format(BENCH)):match('(%S+/bin/python3)%s*$')
end
local sides = {{key = 'torch1', py = '/usr/bin/python3'}}
if torch2 then sides[2] = {key = 'torch2', py = torch2} end

local cpu_metric = os.getenv('METRIC') == 'cpu'

local function torch_run(side, env, lengths, repeats)
  local out = read_cmd(('%s %s/attention_torch.py %d %d %d %d %s 2>/dev/null'):format(
    env .. (cpu_metric and 'METRIC=cpu ' or '') .. side.py, BENCH, THREADS, repeats, B, H, table.concat(lengths, ' ')))
  side.version = out:match('version (%S+)') or side.version
  local r = {}
  for l, x in out:gmatch('%a+ (%d+) (%S+)') do r[tonumber(l)] = tonumber(x) end
  return r
end

local function ours(L)
  flow.manual_seed(0)
  local q = flow.randn(B, H, L, E):requires_grad_()
  local k = flow.randn(B, H, L, E):requires_grad_()
  local v = flow.randn(B, H, L, E):requires_grad_()
  local g = flow.randn(B, H, L, E)
  return function()
    q.grad, k.grad, v.grad = nil, nil, nil
    F.scaled_dot_product_attention(q, k, v):backward(g)
  end
end

local function best_of(fn, n)
  local best = math.huge
  for _ = 1, n do
    local t0 = flow._C.now and flow._C.now() or os.clock()
    fn()
    local t = (flow._C.now and flow._C.now() or os.clock()) - t0
    if t < best then best = t end
  end
  return best
end

-- the wall clock (monotonic), or under METRIC=cpu the process's CPU time
-- (CLOCK_PROCESS_CPUTIME_ID: every thread's)
flow._C.now = cpu_metric and function() return BC.now(2) end or BC.now

if os.getenv('OURS_MEM') then   -- child: one length's peak memory
  local L = tonumber(os.getenv('OURS_MEM'))
  local step = ours(L)
  local function hwm()
    for line in io.lines('/proc/self/status') do
      local kb = line:match('^VmHWM:%s+(%d+)')
      if kb then return tonumber(kb) * 1024 end
    end
  end
  local base = hwm()
  step()
  print(hwm() - base)
  os.exit(0)
end

local best = {ours = {}, torch1 = {}, torch2 = {}}
for _ = 1, ROUNDS do
  for _, L in ipairs(LENGTHS) do
    local step = ours(L)
    step()
    local t = best_of(step, REPEATS)
    if t < (best.ours[L] or math.huge) then best.ours[L] = t end
  end
  collectgarbage()
  for _, s in ipairs(sides) do
    local r = torch_run(s, '', LENGTHS, REPEATS)
    for L, t in pairs(r) do
      if t < (best[s.key][L] or math.huge) then best[s.key][L] = t end
    end
  end
end

-- peak memory, one fresh process per length and side
local mem = {ours = {}, torch1 = {}, torch2 = {}}
local lua = ('LUA_PATH=%q luajit %s/attention.lua'):format(package.path, BENCH)
for _, L in ipairs(LENGTHS) do
  mem.ours[L] = tonumber(read_cmd(('OURS_MEM=%d THREADS=%d B=%d H=%d %s'):format(
    L, THREADS, B, H, lua)):match('(%d+)%s*$'))
  for _, s in ipairs(sides) do
    mem[s.key][L] = torch_run(s, 'MEM=1 ', {L}, 1)[L]
  end
end

local load = BC.loadavg()
print(('attention forward+backward, float32, [B=%d, H=%d, L, %d], %d threads, load %s, '
       .. 'best of %d x %d, %s'):format(B, H, E, THREADS, load, ROUNDS, REPEATS,
       cpu_metric and 'process CPU time (METRIC=cpu)' or 'wall clock'))
print(('torch1 %s (reference math), torch2 %s (F.scaled_dot_product_attention)'):format(
  sides[1].version or 'n/a', sides[2] and sides[2].version or 'not installed'))
print('| L | ours (s) | PyTorch 1.13 (s) | PyTorch 2.x (s) | ours / faster | peak MiB ours | 1.13 | 2.x |')
print('|---|---|---|---|---|---|---|---|')
local function f(x, fmt) return x and (fmt or '%.3f'):format(x) or 'n/a' end
local function mib(x) return x and ('%.1f'):format(x / 2 ^ 20) or 'n/a' end
for _, L in ipairs(LENGTHS) do
  local o, t1, t2 = best.ours[L], best.torch1[L], best.torch2[L]
  local fast = math.min(t1 or math.huge, t2 or math.huge)
  print(('| %d | %s | %s | %s | %s | %s | %s | %s |'):format(L, f(o), f(t1), f(t2),
    fast < math.huge and ('%.2fx'):format(o / fast) or 'n/a', mib(mem.ours[L]),
    mib(mem.torch1[L]), mib(mem.torch2[L])))
end
