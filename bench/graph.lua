-- bench/graph.lua -- nn.Graph against eager mode: training step time and
-- peak memory for the LeNet of examples/mnist/train.lua (batch 64, Adam)
-- and a small MLP (dispatch-bound), and with --resnet a ResNet-18 (flowvision,
-- batch 16, 3x64x64 inputs).
--
--   luajit bench/graph.lua [threads] [--steps N] [--resnet] [--write]
--
-- --write puts the table into doc/benchmarks.md (section "nn.Graph").
--
-- Step time: eager and graph steps alternate in N rounds (--steps) and each
-- mode's fastest round counts, so that load from other processes skews
-- neither. Peak memory: the allocator's high-water mark over a few steps
-- after a collection (flow.memory_stats); it includes the parameters and
-- optimizer state both modes share.
local flow = require 'oneflow'
local nn, F = flow.nn, flow.nn.functional

local threads, steps, resnet, write_doc = 2, 10, false, false
local i = 1
while arg and arg[i] do
  local a = arg[i]
  if a == '--steps' then steps = tonumber(arg[i + 1]); i = i + 1
  elseif a == '--resnet' then resnet = true
  elseif a == '--write' then write_doc = true
  elseif tonumber(a) then threads = tonumber(a) end
  i = i + 1
end
flow.set_num_threads(threads)

local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
local now = B.now

local LeNet = require 'bench.lenet'

local TrainGraph = nn.Graph:subclass('TrainGraph')
function TrainGraph:__init(model, opt)
  nn.Graph.__init(self)
  self.model = model
  self:add_optimizer(opt)
end
function TrainGraph:build(x, y)
  local loss = F.cross_entropy(self.model(x), y)
  loss:backward()
  return loss
end

-- peak bytes over n steps after a warm-up and a collection
local function peak_of(step, n)
  for _ = 1, 2 do step() end
  flow.collect()
  flow.reset_peak_memory_stats()
  for _ = 1, n do step() end
  return flow.memory_stats().peak_bytes
end

-- Eager and graph steps alternate in rounds of k steps; each mode keeps its
-- fastest round, so that other work on the machine skews neither.
local function bench(name, make_model, x, y, rounds, k)
  local step_fns, compile = {}, 0
  for _, mode in ipairs({'eager', 'graph'}) do
    flow.manual_seed(0)
    local model = make_model()
    local opt = flow.optim.Adam(model:parameters(), {lr = 1e-3})
    if mode == 'eager' then
      step_fns.eager = function()
        local loss = F.cross_entropy(model(x), y)
        opt:zero_grad()
        loss:backward()
        opt:step()
        return loss
      end
    else
      local g = TrainGraph(model, opt)
      local t0 = now()
      g(x, y)
      compile = now() - t0
      step_fns.graph = function() return g(x, y) end
    end
  end
  local best = {eager = math.huge, graph = math.huge}
  for _ = 1, rounds do
    for _, mode in ipairs({'eager', 'graph'}) do
      local step = step_fns[mode]
      step()
      local t0 = now()
      for _ = 1, k do step() end
      best[mode] = math.min(best[mode], (now() - t0) / k)
    end
  end
  -- peaks one mode at a time, with only that mode's model and optimizer alive
  step_fns = nil   -- luacheck: ignore (lets the timed models be collected)
  local peak = {}
  for _, mode in ipairs({'eager', 'graph'}) do
    flow.collect()
    local base = flow.memory_stats().current_bytes   -- what earlier runs left
    flow.manual_seed(0)
    local model = make_model()
    local opt = flow.optim.Adam(model:parameters(), {lr = 1e-3})
    local step
    if mode == 'eager' then
      step = function()
        local loss = F.cross_entropy(model(x), y)
        opt:zero_grad()
        loss:backward()
        opt:step()
      end
    else
      local g = TrainGraph(model, opt)
      step = function() g(x, y) end
    end
    peak[mode] = peak_of(step, k) - base
  end
  local r = {time = best, peak = peak, compile = compile}
  print(('%-13s eager %8.3f ms/step  graph %8.3f ms/step  ratio %.2f | peak eager %7.1f MB  '
         .. 'graph %7.1f MB  ratio %.2f | first call (trace + compile) %.0f ms')
        :format(name, best.eager * 1e3, best.graph * 1e3, best.graph / best.eager,
                peak.eager / 2 ^ 20, peak.graph / 2 ^ 20, peak.graph / peak.eager, compile * 1e3))
  return r
end

local function loadavg()
  local f = io.open('/proc/loadavg')
  if not f then return 'n/a' end
  local l = f:read('*l') or ''
  f:close()
  return l:match('^(%S+)') or 'n/a'
end
local load_before = loadavg()

print(('nn.Graph vs eager, %d threads, %d rounds'):format(threads, steps))
local rows = {}
-- a small MLP: the step is dispatch-bound (tens of small ops)
local function mlp() return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)) end
flow.manual_seed(1)
local xm, ym = flow.randn(8, 16), flow.randint(1, 5, {8})
rows[#rows + 1] = {'MLP 16-32-4, batch 8 (dispatch-bound)', bench('MLP b8', mlp, xm, ym, steps, 200), 0.8}
flow.manual_seed(1)
local x, y = flow.randn(64, 1, 28, 28), flow.randint(1, 11, {64})
rows[#rows + 1] = {'LeNet (examples/mnist), batch 64, 1x28x28', bench('LeNet b64', LeNet, x, y, steps, 5), 0.8}
if resnet then
  local vision = require 'flowvision'
  local xr, yr = flow.randn(16, 3, 64, 64), flow.randint(1, 11, {16})
  rows[#rows + 1] = {'ResNet-18 (flowvision), batch 16, 3x64x64',
                     bench('ResNet-18 b16', function() return vision.models.resnet18({num_classes = 10}) end,
                           xr, yr, math.max(3, math.floor(steps / 2)), 2), 0.95}
end

if write_doc then
  local lines = {'## nn.Graph', '',
    ('%d thread(s); LuaJIT; load average %s before the run; %s. Adam, cross-entropy, '
     .. 'one optimizer step per call; `luajit bench/graph.lua %d%s --write`.')
      :format(threads, load_before, os.date('%Y-%m-%d'), threads, resnet and ' --resnet' or ''), '',
    '| Model | eager ms/step | graph ms/step | graph / eager | target | eager peak MiB | graph peak MiB '
      .. '| graph / eager | target | first call (trace + compile) |',
    '|---|---|---|---|---|---|---|---|---|---|'}
  for _, r in ipairs(rows) do
    local t, p = r[2].time, r[2].peak
    lines[#lines + 1] = ('| %s | %.3f | %.3f | %.2f | <= %.2f | %.2f | %.2f | %.2f | <= 0.80 | %.0f ms |')
      :format(r[1], t.eager * 1e3, t.graph * 1e3, t.graph / t.eager, r[3], p.eager / 2 ^ 20,
              p.graph / 2 ^ 20, p.graph / p.eager, r[2].compile * 1e3)
  end
  lines[#lines + 1] = ''
  lines[#lines + 1] = 'Step times: eager and graph steps alternate in rounds; each keeps its fastest '
    .. 'round. Peak: the allocator\'s high-water mark over a few steps after a collection, '
    .. 'measured for one mode at a time (only its model, optimizer and graph alive, '
    .. 'less what was allocated before the model was made), '
    .. 'parameters and optimizer state included; eager mode holds dead tensors until Lua\'s '
    .. 'collector runs and keeps the grads after the step, the graph frees every value after '
    .. 'its last reader and runs from one arena. The first call runs the step eagerly while '
    .. 'tracing, then compiles.'
  local section = table.concat(lines, '\n') .. '\n'
  local path = 'doc/benchmarks.md'
  local f = io.open(path)
  local text = f and f:read('*a') or '# Benchmarks\n'
  if f then f:close() end
  local s0 = text:find('\n## nn.Graph\n', 1, true)
  if s0 then
    local s1 = text:find('\n## ', s0 + 1, true)
    text = text:sub(1, s0) .. section .. (s1 and text:sub(s1) or '')
  else
    text = text:gsub('\n*$', '\n\n') .. section
  end
  f = assert(io.open(path, 'w'))
  f:write(text)
  f:close()
  print('written to ' .. path)
end
