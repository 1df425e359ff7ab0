-- bench/ab_step.lua -- one side of an A/B run (tools/ab_bench.sh): times our
-- side only (no PyTorch, writes no doc) and prints machine-readable lines.
--
--   luajit bench/ab_step.lua add   [threads]              -> small_add_us X
--   luajit bench/ab_step.lua train [threads] [--steps N]  -> lenet_ms X, resnet18_ms X
--
-- The timings copy bench/ops.lua (a) "1-element add" (best of 7 runs of 1e6
-- adds, after a warm-up of a tenth of a run) and bench/step.lua's train_step()
-- (3 warm-up steps, then the median of N timed steps; LeNet batch 64 1x28x28
-- from bench/lenet.lua, its ResNet-18 batch 16 3x64x64, SGD with momentum).
--
-- Which library and Lua modules are used is decided by the caller through
-- OF_LIBRARY and LUA_PATH; the driver prints what it really loaded:
--   lib <path>       the liboneflow.so mapped into this process (/proc/self/maps)
--   lib_asked <path> the path oneflow._C resolved
--   lua <path>       the oneflow/_C.lua this process loaded

local mode = arg and arg[1] or 'train'
local threads, steps = tonumber(os.getenv('OF_BENCH_THREADS') or '') or 2, 20
do
  local i = 2
  while arg and i <= #arg do
    if arg[i] == '--steps' then steps = tonumber(arg[i + 1]); i = i + 1
    elseif tonumber(arg[i]) then threads = tonumber(arg[i]) end
    i = i + 1
  end
end

local flow = require 'oneflow'
local core = require 'oneflow._C'
flow.set_num_threads(threads)

------------------------------------------------------------------ provenance
do
  local mapped
  local f = io.open('/proc/self/maps')
  if f then
    for l in f:lines() do
      local p = l:match('%s(/%S*liboneflow[^/%s]*%.so[^/%s]*)$')
      if p then mapped = p; break end
    end
    f:close()
  end
  print('lib ' .. (mapped or 'unknown'))
  print('lib_asked ' .. tostring(core.library_path))
  print('lua ' .. tostring(package.searchpath('oneflow._C', package.path)))
  print('threads ' .. flow.get_num_threads())
end

------------------------------------------------------------------ timing
local S = require 'bench.step'
local now = S.now

if mode == 'add' then
  -- bench/ops.lua's best_of without `steady`, and its row (a)
  local function best_of(repeats, iters, fn)
    fn(math.max(1, math.floor(iters / 10)))
    local best = math.huge
    for _ = 1, repeats do
      local t0 = now()
      fn(iters)
      local t = (now() - t0) / iters
      if t < best then best = t end
    end
    return best
  end
  local a, b = flow.tensor({1}), flow.tensor({2})
  local c
  local t = best_of(7, 1000000, function(n)
    for _ = 1, n do c = a + b end
  end)
  assert(c:item() == 3)
  print(('small_add_us %.4f'):format(t * 1e6))
  os.exit(0)
end

assert(mode == 'train', 'mode must be add or train')

------------------------------------------------------------------ models (as bench/train.lua)
local LeNet = require 'bench.lenet'

local ResNet18 = require 'bench.resnet'

local function bench(model, batch, shape) return (S.train_step(model, batch, shape, steps)) end

flow.manual_seed(0)
print(('lenet_ms %.3f'):format(bench(LeNet(), 64, {1, 28, 28})))
flow.manual_seed(0)
print(('resnet18_ms %.3f'):format(bench(ResNet18(10), 16, {3, 64, 64})))
