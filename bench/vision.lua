-- bench/vision.lua -- flowvision models, ms per call, side by side with
-- torchvision on PyTorch CPU at the same thread count (when /usr/bin/python3
-- imports torch and torchvision; "n/a" otherwise):
--   * ResNet-50 inference (eval, no_grad), batch 1 and batch 8, 3x224x224;
--   * ResNet-18 training step (forward, cross-entropy, backward, SGD with
--     momentum), batch 16, 3x112x112, 10 classes (112 rather than 224 so that
--     the run stays short on a 2-core machine).
-- Median of the timed calls after warm-up calls.
--
--   luajit bench/vision.lua [threads] [--runs N] [--no-write]
--
-- Writes the table to doc/benchmarks.md (section "Vision models", the other
-- sections are kept) and prints it.
local flow = require 'oneflow'
local vision = require 'flowvision'
local F = flow.nn.functional

local threads, runs, write_doc = 2, 5, true
do
  local argv, i = arg or {}, 1
  while i <= #argv do
    if argv[i] == '--runs' then runs = tonumber(argv[i + 1]); i = i + 1
    elseif argv[i] == '--no-write' then write_doc = false
    elseif tonumber(argv[i]) then threads = tonumber(argv[i]) end
    i = i + 1
  end
end
local WARMUP = 2
flow.set_num_threads(threads)

local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
local now, loadavg, median = B.now, B.loadavg, B.median


local function cpu_name()
  local f = io.open('/proc/cpuinfo')
  if not f then return 'unknown CPU' end
  local name, n = nil, 0
  for line in f:lines() do
    if line:match('^processor') then n = n + 1 end
    name = name or line:match('^model name%s*:%s*(.-)%s*$')
  end
  f:close()
  return ('%s, %d cores'):format(name or 'unknown CPU', n)
end


local function time_it(fn)
  for _ = 1, WARMUP do fn() end
  flow.collect()
  local times = {}
  for i = 1, runs do
    local t0 = now()
    fn()
    times[i] = (now() - t0) * 1000
  end
  if os.getenv('OF_BENCH_VERBOSE') then print(table.concat(times, ' ')) end
  return median(times)
end

------------------------------------------------------------------ ours
local load_before = loadavg()

local function infer(batch)
  flow.manual_seed(0)
  local net = vision.models.resnet50():eval()
  local x = flow.randn(batch, 3, 224, 224)
  return time_it(function() flow.no_grad(function() return net(x) end) end)
end

local function train_step()
  flow.manual_seed(0)
  local net = vision.models.resnet18({num_classes = 10}):train()
  local x, y = flow.randn(16, 3, 112, 112), flow.randint(1, 11, {16})
  local opt = flow.optim.SGD(net:parameters(), {lr = 0.01, momentum = 0.9})
  return time_it(function()
    local loss = F.cross_entropy(net(x), y)
    opt:zero_grad()
    loss:backward()
    opt:step()
  end)
end

local ours = {r50_b1 = infer(1), r50_b8 = infer(8), r18_train = train_step()}
flow.collect()

------------------------------------------------------------------ PyTorch
local torch_script = [[
import sys, time, statistics
import torch, torch.nn.functional as F, torchvision
torch.set_num_threads(int(sys.argv[1])); runs = int(sys.argv[2]); warmup = int(sys.argv[3])
def time_it(fn):
    for _ in range(warmup): fn()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter(); fn(); ts.append((time.perf_counter() - t0) * 1000)
    return statistics.median(ts)
def infer(batch):
    torch.manual_seed(0); net = torchvision.models.resnet50().eval(); x = torch.randn(batch, 3, 224, 224)
    def f():
        with torch.no_grad(): net(x)
    return time_it(f)
def train_step():
    torch.manual_seed(0); net = torchvision.models.resnet18(num_classes=10).train()
    x = torch.randn(16, 3, 112, 112); y = torch.randint(0, 10, (16,))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    def f():
        loss = F.cross_entropy(net(x), y); opt.zero_grad(); loss.backward(); opt.step()
    return time_it(f)
print("version", torch.__version__ + "/torchvision-" + torchvision.__version__)
print("r50_b1", infer(1)); print("r50_b8", infer(8)); print("r18_train", train_step())
]]

local function run_torch()
  local path = os.tmpname()
  local f = assert(io.open(path, 'w'))
  f:write(torch_script)
  f:close()
  local p = io.popen(('/usr/bin/python3 %s %d %d %d 2>/dev/null'):format(path, threads, runs, WARMUP))
  local out = p and p:read('*a') or ''
  if p then p:close() end
  os.remove(path)
  local res = {}
  for k, v in out:gmatch('(%S+) (%S+)') do res[k] = tonumber(v) or v end
  return res
end

local torch = run_torch()
local load_after = loadavg()

------------------------------------------------------------------ report
local function fmt(v) return v and ('%.1f'):format(v) or 'n/a' end
local function ratio(a, b) return (a and b) and ('%.2fx'):format(a / b) or 'n/a' end
local rows = {
  {'ResNet-50 inference (eval, no_grad), batch 1, 3x224x224', 'r50_b1'},
  {'ResNet-50 inference (eval, no_grad), batch 8, 3x224x224', 'r50_b8'},
  {'ResNet-18 training step (SGD momentum), batch 16, 3x112x112, 10 classes', 'r18_train'},
}
local lines = {
  ('%s; %d thread(s) on both sides; LuaJIT %s; PyTorch %s; median of %d timed calls after %d warm-up calls; '
    .. 'load average %s before, %s after the run; %s.')
    :format(cpu_name(), threads, (jit and jit.version or _VERSION):gsub('^LuaJIT ', ''),
            torch.version or 'not installed', runs, WARMUP, load_before, load_after, os.date('%Y-%m-%d')),
  '',
  '| Model | OneFlow-Lua ms/call | PyTorch ms/call | ratio (ours / PyTorch) |',
  '|---|---|---|---|',
}
for _, r in ipairs(rows) do
  lines[#lines + 1] = ('| %s | %s | %s | %s |'):format(r[1], fmt(ours[r[2]]), fmt(torch[r[2]]),
                                                       ratio(ours[r[2]], torch[r[2]]))
end
lines[#lines + 1] = ''
lines[#lines + 1] = 'Models are flowvision\'s and torchvision\'s own definitions (same architecture, same '
  .. 'parameter names), randomly initialised. The training step is at 112x112 instead of 224x224 to keep '
  .. 'the run short on 2 cores. Regenerate with `luajit bench/vision.lua [threads]`; on a shared machine '
  .. 'the load average above says how much other work was running.'
local text = table.concat(lines, '\n')
print(text)

if write_doc then
  local path = 'doc/benchmarks.md'
  local f = io.open(path, 'r')
  local doc = f and f:read('*a') or '# Benchmarks\n'
  if f then f:close() end
  local title = '## Vision models'
  local section = title .. '\n\n' .. text .. '\n'
  local s = doc:find('\n' .. title .. '\n', 1, true)
  if s then
    local e = doc:find('\n## ', s + 1, true)            -- the next section, if any
    doc = doc:sub(1, s) .. section .. (e and doc:sub(e) or '')
  else
    doc = doc:gsub('%s+$', '') .. '\n\n' .. section
  end
  B.write_atomic(path, doc)
end
