-- bench/batching.lua -- what merging requests can gain: a model's eval
-- nn.Graph timed at batch 1, 2, 4 and 8 in one process (the graphs flow-serve
-- runs, compiled for each size), and each batch's images per second against
-- batch 1's. Dynamic batching can raise a server's throughput by at most
-- that ratio (issue 15 asks 1.5x at concurrency 32; doc/benchmarks.md,
-- "Serving").
--   luajit bench/batching.lua [threads] [model] [size] [rounds]
--   defaults: 2 threads, resnet18, 224, 9 rounds (medians)
local flow = require 'oneflow'
local vision = require 'flowvision'
local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')

local threads = tonumber(arg[1]) or 2
local name, size, rounds = arg[2] or 'resnet18', tonumber(arg[3]) or 224, tonumber(arg[4]) or 9
flow.set_num_threads(threads)
flow.manual_seed(0)
local model = vision.models[name]()
model:eval()
local G = flow.nn.Graph:subclass('Batching')
function G:__init() flow.nn.Graph.__init(self); self.m = model end
function G:build(x) return self.m(x) end
local g = G()
local sizes, xs, times = {1, 2, 4, 8}, {}, {}
for _, b in ipairs(sizes) do
  xs[b] = flow.randn(b, 3, size, size)
  g(xs[b])   -- compiles this signature
  g(xs[b])
  times[b] = {}
end
for r = 1, rounds do   -- the sizes alternate within each round
  for _, b in ipairs(sizes) do
    local t0 = B.now()
    g(xs[b])
    times[b][r] = (B.now() - t0) * 1e3
  end
end
print(('%s eval graph, %dx%d, %d thread(s), load %s, medians of %d'):format(name, size, size, threads,
  B.loadavg(), rounds))
print('| batch | ms | ms a sample | samples/s vs batch 1 |')
print('|---|---|---|---|')
local t1 = B.median(times[1])
for _, b in ipairs(sizes) do
  local t = B.median(times[b])
  print(('| %d | %.2f | %.2f | %.2fx |'):format(b, t, t / b, b * t1 / t))
end
