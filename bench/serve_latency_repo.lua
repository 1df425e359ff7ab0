-- serve_latency_repo.lua OUT [SIZE] -- the repository bench/serve_latency.sh
-- serves: OUT/thin, a graph with ResNet-18's input (1x3xSIZExSIZE) and
-- output (1x1000) that computes almost nothing (the first pixel's 3 channels
-- through a 3->1000 linear layer), so that what a request costs beyond the graph is what the
-- server adds; and OUT/resnet18 (flowvision, random init, eval). Both
-- compiled for batch 1, max_batch_size 1, one instance. Also writes the
-- request body (binary tensor data) as OUT/body.bin, its JSON header's
-- length as OUT/body.len, and each graph's in-process time at batch 1
-- (medians, ms) as OUT/<name>.ms, measured alternately.
local flow = require 'oneflow'
local json = require 'oneflow.utils.json'
local ffi = require 'ffi'
local now = require('oneflow.utils.posix').now
local out = assert(arg[1], 'usage: serve_latency_repo.lua OUT [SIZE]')
local size = tonumber(arg[2] or '') or 224
flow.manual_seed(0)

local Thin = flow.nn.Module:subclass('ThinServe')
function Thin:__init()
  flow.nn.Module.__init(self)
  self.fc = flow.nn.Linear(3, 1000)
end
function Thin:forward(x) return self.fc(x:select(4, 1):select(3, 1)) end

local Eval = flow.nn.Graph:subclass('ServeLatency')
function Eval:__init(m) flow.nn.Graph.__init(self); self.model = m end
function Eval:build(x) return self.model(x) end

local function write(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end

local x = flow.randn(1, 3, size, size)
local graphs = {}
for name, model in pairs({thin = Thin(), resnet18 = require('flowvision.models').resnet18()}) do
  model:eval()
  local g = Eval(model)
  g(x)
  os.execute(('mkdir -p %s/%s/1'):format(out, name))
  g:save(('%s/%s/1/model.ofg'):format(out, name))
  write(('%s/%s/config.json'):format(out, name),
        json.encode({name = name, max_batch_size = 1, instance_group = {{count = 1, kind = 'KIND_CPU'}}}))
  graphs[name] = g
end
local hdr = json.encode({inputs = {{name = 'INPUT__0', shape = {1, 3, size, size}, datatype = 'FP32',
                                    parameters = {binary_data_size = 3 * size * size * 4}}},
                         outputs = {{name = 'OUTPUT__0', parameters = {binary_data = true}}}})
write(out .. '/body.bin', hdr .. ffi.string(x:data_ptr(), 3 * size * size * 4))
write(out .. '/body.len', tostring(#hdr))

-- medians over rounds that alternate the two graphs (thin: 200 calls a round)
local times = {thin = {}, resnet18 = {}}
for _ = 1, 5 do
  for name, reps in pairs({thin = 200, resnet18 = 4}) do
    local g = graphs[name]
    for _ = 1, reps do
      local s = now()
      g(x)
      times[name][#times[name] + 1] = now() - s
    end
  end
end
for name, t in pairs(times) do
  table.sort(t)
  write(('%s/%s.ms'):format(out, name), ('%.3f'):format(t[math.floor(#t / 2) + 1] * 1000))
end
