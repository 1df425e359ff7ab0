-- bench/dispatch.lua -- the per-op dispatch overhead: a 1-element add
-- `c = a + b` without and with autograd (one input requires grad), ours
-- against PyTorch 1.13 (Debian, /usr/bin/python3) and PyTorch 2.x
-- (bench/torch_venv.sh's venv, when it installs), 1 thread, alternating the
-- sides in rounds, each side's best over its rounds.
--
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' luajit bench/dispatch.lua [rounds] [adds]
--   METRIC=wall ...   time on the wall clock (default: the calling thread's
--                     CPU time, which other work on a loaded machine does not inflate
--                     by taking time slices)
local flow = require 'oneflow'
flow.set_num_threads(1)

local rounds = tonumber(arg and arg[1] or '') or 3
local N = tonumber(arg and arg[2] or '') or 200000
local wall = os.getenv('METRIC') == 'wall'
local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
local CLOCK = wall and B.MONOTONIC or B.THREAD_CPU
local function now() return B.now(CLOCK) end
local loadavg = B.loadavg

-- us per add: the best of 3 loops of n adds
local function ours(x, y, n)
  local best = math.huge
  for _ = 1, 3 do
    local t0 = now()
    for _ = 1, n do _ = x + y end
    best = math.min(best, (now() - t0) / n)
  end
  return best * 1e6
end

local py = ([[
import time, torch
torch.set_num_threads(1)
clock = time.perf_counter if %s else time.thread_time
def run(x, y, n):
    best = 1e9
    for _ in range(3):
        t0 = clock()
        for _ in range(n): c = x + y
        best = min(best, (clock() - t0) / n)
    return best * 1e6
a, b, g = torch.ones(1), torch.ones(1), torch.ones(1, requires_grad=True)
print('nograd', run(a, b, %d)); print('grad', run(g, b, %d)); print('version', torch.__version__)
]]):format(wall and 'True' or 'False', math.floor(N / 2), math.floor(N / 4))
local script = os.tmpname() .. '.py'
do
  local f = assert(io.open(script, 'w'))
  f:write(py)
  f:close()
end


local sides = {{key = 'torch1', py = '/usr/bin/python3'}}
do
  local p = io.popen('sh ' .. (debug.getinfo(1, 'S').source:match('^@(.*)/') or 'bench')
                     .. '/torch_venv.sh 2>/dev/null')
  local out = p and p:read('*a') or ''
  if p then p:close() end
  local t2 = out:match('(%S+/bin/python3)%s*$')
  if t2 then sides[2] = {key = 'torch2', py = t2} end
end

local a, b, ag = flow.ones(1), flow.ones(1), flow.ones(1):requires_grad_()
ours(a, b, math.floor(N / 10))   -- warm-up: traces compiled
local best = {}
local function keep(k, v) if v and (not best[k] or v < best[k]) then best[k] = v end end
local load0 = loadavg()
for _ = 1, rounds do
  keep('ours_nograd', ours(a, b, N))
  keep('ours_grad', ours(ag, b, math.floor(N / 4)))
  for _, s in ipairs(sides) do
    local p = io.popen(s.py .. ' ' .. script .. ' 2>/dev/null')
    local out = p and p:read('*a') or ''
    if p then p:close() end
    keep(s.key .. '_nograd', tonumber(out:match('nograd (%S+)')))
    keep(s.key .. '_grad', tonumber(out:match('\ngrad (%S+)')))
    s.version = s.version or out:match('version (%S+)')
  end
end
os.remove(script)

local function f3(v) return v and ('%.3f'):format(v) or 'n/a' end
print(('1 thread; %s; %d rounds alternating the sides, each the best of 3 loops of %d adds '
  .. '(PyTorch %d); load average %s before, %s after; %s.'):format(
  wall and 'wall clock' or 'the calling thread\'s CPU time', rounds, N, math.floor(N / 2), load0, loadavg(),
  os.date('!%Y-%m-%d %H:%M UTC')))
print('')
print('| 1-element add | ours us | PyTorch ' .. (sides[1].version or '1.13') .. ' us | PyTorch '
  .. (sides[2] and sides[2].version or 'n/a') .. ' us | ours / faster PyTorch | target |')
print('|---|---|---|---|---|---|')
for _, k in ipairs({'nograd', 'grad'}) do
  local t1, t2 = best['torch1_' .. k], best['torch2_' .. k]
  local tb = (t1 and t2) and math.min(t1, t2) or t1 or t2
  local o = best['ours_' .. k]
  print(('| %s | %s | %s | %s | %s | %s |'):format(
    k == 'grad' and 'one input requires grad' or 'no grad', f3(o), f3(t1), f3(t2),
    (o and tb) and ('%.2fx'):format(o / tb) or 'n/a',
    k == 'grad' and '<= 0.4 us' or '<= 0.25 us and <= 0.4x'))
end
