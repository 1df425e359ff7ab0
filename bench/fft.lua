-- bench/fft.lua: flow.fft against torch.fft (PyTorch 2.x from bench/.venv and
-- Debian's 1.13), 2^20-point 1-D and 1024x1024 2-D fft (complex64) and rfft
-- (float32), same thread count, rounds alternating flow / torch 2.x / torch
-- 1.13 in one run; CPU seconds per call (os.clock / process_time: the
-- machine is shared), the median of the rounds, with the load average.
--   ./bin/flow bench/fft.lua [threads=1] [rounds=3] [reps=5]
local flow = require 'oneflow'
local threads = tonumber(arg and arg[1]) or 1
local rounds = tonumber(arg and arg[2]) or 3
local reps = tonumber(arg and arg[3]) or 5
flow.set_num_threads(threads)
flow.manual_seed(0)
local x1, x2 = flow.randn(2 ^ 20), flow.randn(1024, 1024)
local c1 = flow.complex(flow.randn(2 ^ 20), flow.randn(2 ^ 20))
local c2 = flow.complex(flow.randn(1024, 1024), flow.randn(1024, 1024))
local cases = {
  {'fft 2^20 c64', function() return flow.fft.fft(c1) end},
  {'rfft 2^20 f32', function() return flow.fft.rfft(x1) end},
  {'fft2 1024x1024 c64', function() return flow.fft.fft2(c2) end},
  {'rfft2 1024x1024 f32', function() return flow.fft.rfft2(x2) end},
}
local pythons = {
  {'torch2', (os.getenv('TORCH2_PYTHON') or 'bench/.venv/bin/python')},
  {'torch1.13', '/usr/bin/python3'},
}
local function load()
  local f = io.open('/proc/loadavg')
  local l = f and f:read('*l') or '?'
  if f then f:close() end
  return l:match('^(%S+ %S+ %S+)') or l
end
local res = {}
local function add(who, name, v)
  res[who] = res[who] or {}
  res[who][name] = res[who][name] or {}
  table.insert(res[who][name], v)
end
local versions = {}
for _ = 1, rounds do
  for _, c in ipairs(cases) do
    c[2]()
    local t0 = os.clock()
    for _ = 1, reps do c[2]() end
    add('flow', c[1], (os.clock() - t0) / reps)
    collectgarbage()
  end
  for _, p in ipairs(pythons) do
    local h = io.popen(('%s bench/fft_torch.py %d %d 2>/dev/null'):format(p[2], threads, reps))
    for line in h:lines() do
      local name, v = line:match('^(.-) (%S+)$')
      if name == 'version' then versions[p[1]] = v
      elseif name and tonumber(v) then add(p[1], name, tonumber(v)) end
    end
    h:close()
  end
end
local function median(t)
  if not t then return nil end
  table.sort(t)
  return t[math.floor((#t + 1) / 2)]
end
print(('threads %d, %d rounds x %d calls, load average %s; torch2 %s, torch1.13 %s')
  :format(threads, rounds, reps, load(), versions.torch2 or 'n/a', versions['torch1.13'] or 'n/a'))
print(('%-22s %10s %10s %10s %8s'):format('case (CPU ms/call)', 'flow', 'torch2', 'torch1.13',
  'ratio'))
for _, c in ipairs(cases) do
  local f, a, b = median(res.flow[c[1]]), median((res.torch2 or {})[c[1]]),
    median((res['torch1.13'] or {})[c[1]])
  local best = a and b and math.min(a, b) or a or b
  print(('%-22s %10.2f %10s %10s %8s'):format(c[1], f * 1e3, a and ('%.2f'):format(a * 1e3) or '-',
    b and ('%.2f'):format(b * 1e3) or '-', best and ('%.2fx'):format(f / best) or '-'))
end
