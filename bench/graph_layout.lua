-- graph_layout.lua -- eval nn.Graphs of flowvision models in NCHW
-- (config:set_memory_format(flow.contiguous_format)) and in the layout
-- 'auto' picks (channels-last on AVX-512 CPUs with oneDNN: doc/graph.md
-- "Layouts"), side by side in one process, calls alternating; wall-clock
-- medians per call and their ratio (doc/benchmarks.md "Models", seventh pass).
-- COMPARE=convfuse compares instead, both in the 'auto' layout, the
-- default passes without and with convfuse (conv + residual add + relu as
-- one oneDNN kernel: doc/graph.md "Passes").
--   luajit bench/graph_layout.lua [ROUNDS (default 3)] [CALLS per round (default 5)]
-- LAYOUT=channels_last forces channels-last on the second side (what 'auto'
-- would pick on AVX-512), to measure it on CPUs where 'auto' keeps NCHW.
--   MODELS=resnet18:1,resnet18:8,...  THREADS=n  COMPARE=layout|convfuse
--   LAYOUT=auto|channels_last
local flow = require 'oneflow'
local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')

local ROUNDS, CALLS = tonumber(arg[1]) or 3, tonumber(arg[2]) or 5
local THREADS = tonumber(os.getenv('THREADS')) or flow.get_num_threads()
flow.set_num_threads(THREADS)
local cases = {}
for m, b in (os.getenv('MODELS') or 'resnet18:1,resnet18:8,resnet50:1,resnet50:8,mobilenet_v2:1,mobilenet_v2:8')
    :gmatch('([%w_]+):(%d+)') do
  cases[#cases + 1] = {model = m, batch = tonumber(b)}
end

local Eval = flow.nn.Graph:subclass('LayoutBench')
function Eval:__init(m, fmt, passes)
  flow.nn.Graph.__init(self)
  self.model = m
  self.config:set_memory_format(fmt)
  if passes then self.config:set_passes(passes) end
end
local CONVFUSE = os.getenv('COMPARE') == 'convfuse'
local SECOND = os.getenv('LAYOUT') == 'channels_last' and flow.channels_last or 'auto'
local WITHOUT = 'dce,cse,bnfold,fold,dce,checkpoint,poolmask,relupool,fuse,inplace,schedule'
function Eval:build(x) return self.model(x) end

print(('cpu %s, oneDNN %s, %d threads, load %s'):format(flow.backends.cpu.get_cpu_capability(),
      tostring(flow.backends.mkldnn.is_available()), THREADS, B.loadavg()))
print(CONVFUSE and '| model | batch | without convfuse ms | with ms | with / without | same result |'
      or ('| model | batch | NCHW ms | %s ms | %s / NCHW | same result |'):format(
        SECOND == 'auto' and 'auto' or 'channels-last', SECOND == 'auto' and 'auto' or 'channels-last'))
print('|---|---|---|---|---|---|')
local function run(c)
  flow.manual_seed(0)
  local model = require('flowvision.models')[c.model]()
  model:eval()
  local x = flow.randn(c.batch, 3, 224, 224)
  local plain = CONVFUSE and Eval(model, 'auto', WITHOUT) or Eval(model, flow.contiguous_format)
  local auto = Eval(model, CONVFUSE and 'auto' or SECOND)
  plain(x); auto(x)   -- the first calls trace (they run the eager ops)
  local diff = (plain(x) - auto(x)):abs():max():item()
  plain(x); auto(x)
  local tp, ta = {}, {}
  for _ = 1, ROUNDS do
    for _ = 1, CALLS do
      local t0 = B.now(); plain(x); tp[#tp + 1] = B.now() - t0
      t0 = B.now(); auto(x); ta[#ta + 1] = B.now() - t0
    end
  end
  local mp, ma = B.median(tp) * 1e3, B.median(ta) * 1e3
  print(('| %s | %d | %.1f | %.1f | %.2fx | max diff %.1e |'):format(c.model, c.batch, mp, ma,
        ma / mp, diff))
end
for _, c in ipairs(cases) do
  run(c)
  collectgarbage()   -- the case's models and graphs
end
