-- bench/train.lua -- ms per training step (forward, backward, SGD update) for
-- the LeNet of examples/mnist (batch 64, 1x28x28) and a ResNet-18 (batch 16,
-- 3x64x64, 10 classes), side by side with PyTorch CPU at the same thread count
-- when /usr/bin/python3 can import torch.
--
--   luajit bench/train.lua [threads] [--steps N] [--rounds R] [--no-write]
--
-- The machine is shared: each round times our two models, then PyTorch's in
-- a subprocess, and each side keeps its best round (the median step of that
-- round), so a burst of other work hits both sides alike. The load average
-- before and after goes into the table.
--
-- Writes the table to doc/benchmarks.md (section "Training steps").
local flow = require 'oneflow'

local threads, steps, rounds, write_doc = 2, 20, 3, true
do
  local argv, i = arg or {}, 1
  while i <= #argv do
    if argv[i] == '--steps' then steps = tonumber(argv[i + 1]); i = i + 1
    elseif argv[i] == '--rounds' then rounds = tonumber(argv[i + 1]); i = i + 1
    elseif argv[i] == '--no-write' then write_doc = false
    elseif tonumber(argv[i]) then threads = tonumber(argv[i]) end
    i = i + 1
  end
end
flow.set_num_threads(threads)

local S = require 'bench.step'

------------------------------------------------------------------ models
local LeNet = require 'bench.lenet'

local ResNet18 = require 'bench.resnet'

------------------------------------------------------------------ timing
local function bench(model, batch, shape) return S.train_step(model, batch, shape, steps) end

local torch_script = [[
import sys, time, statistics, resource
import torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(int(sys.argv[1])); steps = int(sys.argv[2])
class LeNet(nn.Module):
    def __init__(s):
        super().__init__(); s.conv1 = nn.Conv2d(1, 32, 3, padding=1); s.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        s.fc1 = nn.Linear(64 * 7 * 7, 128); s.fc2 = nn.Linear(128, 10)
    def forward(s, x):
        x = F.max_pool2d(F.relu(s.conv1(x)), 2); x = F.max_pool2d(F.relu(s.conv2(x)), 2)
        return s.fc2(F.relu(s.fc1(torch.flatten(x, 1))))
def resnet18():
    try:
        import torchvision; return torchvision.models.resnet18(num_classes=10)
    except Exception:
        return None
def bench(model, batch, shape):
    torch.manual_seed(0); x = torch.randn(batch, *shape); y = torch.randint(0, 10, (batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    def step():
        loss = F.cross_entropy(model(x), y); opt.zero_grad(); loss.backward(); opt.step()
    for _ in range(3): step()
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter(); step(); ts.append((time.perf_counter() - t0) * 1000)
    return statistics.median(ts)
print("lenet", bench(LeNet(), 64, (1, 28, 28)))
r = resnet18()
if r is not None: print("resnet18", bench(r, 16, (3, 64, 64)))
print("version", torch.__version__)
print("maxrss_mb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
]]

local function run_torch()
  local path = os.tmpname()
  local f = io.open(path, 'w')
  f:write(torch_script)
  f:close()
  -- PyTorch as its users get it: without the GOMP_SPINCOUNT that
  -- require 'oneflow' put into this process's environment
  local env = require('oneflow._C').set_spincount and 'env -u GOMP_SPINCOUNT ' or ''
  local p = io.popen(('%s/usr/bin/python3 %s %d %d 2>/dev/null'):format(env, path, threads, steps))
  local out = p:read('*a')
  p:close()
  os.remove(path)
  local res = {}
  for k, v in out:gmatch('(%S+) (%S+)') do res[k] = tonumber(v) or v end
  return res
end

------------------------------------------------------------------ run
local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
local loadavg = B.loadavg
local function cpu_name()
  local f = io.open('/proc/cpuinfo')
  if not f then return 'unknown CPU' end
  local s = f:read('*a')
  f:close()
  local n = 0
  for _ in s:gmatch('\nprocessor') do n = n + 1 end
  return ('%s, %d cores'):format(s:match('model name%s*:%s*([^\n]+)') or 'unknown CPU', n + 1)
end

local load_before = loadavg()
local best, torch = {}, {}
local function keep(key, v) if v and (best[key] == nil or v < best[key]) then best[key] = v end end
for _ = 1, rounds do
  local ms, mb = bench(LeNet(), 64, {1, 28, 28})
  keep('lenet', ms)
  best.lenet_mb = math.max(best.lenet_mb or 0, mb)
  ms, mb = bench(ResNet18(10), 16, {3, 64, 64})
  keep('resnet', ms)
  best.resnet_mb = math.max(best.resnet_mb or 0, mb)
  local t = run_torch()
  for _, k in ipairs({'lenet', 'resnet18', 'maxrss_mb'}) do
    if type(t[k]) == 'number' and (torch[k] == nil or t[k] < torch[k] or k == 'maxrss_mb') then
      torch[k] = k == 'maxrss_mb' and math.max(torch[k] or 0, t[k]) or t[k]
    end
  end
  torch.version = torch.version or t.version
end
local load_after = loadavg()
local lenet_ms, lenet_mb, resnet_ms, resnet_mb = best.lenet, best.lenet_mb, best.resnet, best.resnet_mb

local function ratio(a, b) return b and ('%.2fx'):format(a / b) or 'n/a' end
local function fmt(v) return v and ('%.1f'):format(v) or 'n/a' end
local rows = {
  {'LeNet (examples/mnist), batch 64, 1x28x28', lenet_ms, torch.lenet, lenet_mb},
  {'ResNet-18, batch 16, 3x64x64', resnet_ms, torch.resnet18, resnet_mb},
}
local lines = {
  ('%s; %d thread(s) on both sides; LuaJIT %s; PyTorch %s; SGD with momentum; %d rounds of '
   .. '%d timed steps, each side\'s best round (median step); load average %s before, %s after '
   .. 'the run; %s.'):format(cpu_name(), threads, jit.version:gsub('^LuaJIT ', ''),
     torch.version or 'not installed', rounds, steps, load_before, load_after, os.date('%Y-%m-%d')),
  '',
  '| Model | OneFlow-Lua ms/step | PyTorch ms/step | ratio (ours / PyTorch) | target | peak tensor memory (ours) |',
  '|---|---|---|---|---|---|',
}
for _, r in ipairs(rows) do
  lines[#lines + 1] = ('| %s | %s | %s | %s | <= 0.80x | %.0f MiB |'):format(
    r[1], fmt(r[2]), fmt(r[3]), ratio(r[2], r[3]), r[4])
end
lines[#lines + 1] = ''
lines[#lines + 1] = ('PyTorch process max RSS: %s MiB (includes the Python runtime and both models).')
  :format(fmt(torch.maxrss_mb))
lines[#lines + 1] = ''
lines[#lines + 1] = ('Both sides use libgomp. OneFlow-Lua runs with GOMP_SPINCOUNT=%s (set by '
  .. '`require \'oneflow\'` unless given, see doc/tensor.md "Threads"); PyTorch runs with %s. '
  .. 'Peak tensor memory: the allocator\'s high-water mark over the timed steps (parameters, '
  .. 'grads and optimizer state included).')
  :format(os.getenv('GOMP_SPINCOUNT') or 'unset', require('oneflow._C').set_spincount
          and 'libgomp\'s default' or 'the same setting')
local text = table.concat(lines, '\n')
print(text)

if write_doc then
  local path = 'doc/benchmarks.md'
  local f = io.open(path, 'r')
  local doc = f and f:read('*a') or '# Benchmarks\n'
  if f then f:close() end
  local section = '## Training steps\n\n' .. text .. '\n'
  local s, e = doc:find('## Training steps\n.-\n(## )', 1)
  if s then doc = doc:sub(1, s - 1) .. section .. '\n' .. doc:sub(e - 2)
  elseif doc:find('## Training steps', 1, true) then doc = doc:gsub('## Training steps\n.*$', section)
  else doc = doc .. '\n' .. section end
  local tmp = path .. '.tmp'
  local o = assert(io.open(tmp, 'w'))
  o:write(doc)
  o:close()
  os.rename(tmp, path)
end
