-- bench/alloc_steps.lua -- ResNet-18 training steps (batch 32, 3x112x112,
-- SGD with momentum) on 1 thread: the median CPU time per step (the
-- calling thread's, meaningful on a loaded machine) and the peak RSS. For
-- comparing two builds of the library side by side, e.g. the allocator's
-- caching rules (doc/tensor.md "Memory"):
--   ./bin/flow bench/alloc_steps.lua [steps]
--   (cd OTHER_CHECKOUT && ./bin/flow /path/to/bench/alloc_steps.lua [steps])
local flow = require 'oneflow'
local vision = require 'flowvision'
local ffi = require 'ffi'
pcall(ffi.cdef, 'typedef struct { int64_t s, ns; } steps_ts; int clock_gettime(int, steps_ts *);')
local tsv = ffi.new('steps_ts')
local function cpu() ffi.C.clock_gettime(3, tsv); return tonumber(tsv.s) + tonumber(tsv.ns) * 1e-9 end
flow.set_num_threads(1)
flow.manual_seed(0)
local m = vision.models.resnet18({num_classes = 10}):train()
local opt = flow.optim.SGD(m:parameters(), {lr = 0.01, momentum = 0.9})
local x, y = flow.randn(32, 3, 112, 112), flow.randint(1, 11, {32})
local times = {}
for i = 1, tonumber(arg[1] or 7) do
  local t = cpu()
  opt:zero_grad()
  local loss = flow.nn.functional.cross_entropy(m(x), y)
  loss:backward()
  opt:step()
  times[i] = cpu() - t
end
table.remove(times, 1)
table.sort(times)
local rss
for l in io.lines('/proc/self/status') do rss = rss or l:match('^VmHWM:%s*(%d+)') end
print(('median step %.3f s CPU, peak RSS %d MiB'):format(
  times[math.ceil(#times / 2)], math.floor(tonumber(rss) / 1024)))
