-- serve_repo.lua OUT [DELAY_US [SIZE]] -- the model repository bench/serve.sh serves: a
-- flowvision ResNet-18 (random init, eval) compiled for batch 1, 2, 4 and 8
-- on 3xSIZExSIZE (default 224) and saved twice, as OUT/resnet18 (max_batch_size 8, one
-- instance) and OUT/resnet18_db (the same with dynamic batching); the
-- request body (binary tensor data, one image) as OUT/body.bin with its JSON
-- header's length in OUT/body.len; and the in-process graph's time at
-- batch 1 (median of 20 runs, ms) in OUT/inproc_ms.
local flow = require 'oneflow'
local json = require 'oneflow.utils.json'
local ffi = require 'ffi'
local out = assert(arg[1], 'usage: serve_repo.lua OUT')
local delay_us = tonumber(arg[2] or '') or 2000
local size = tonumber(arg[3] or '') or 224
flow.manual_seed(0)
local model = require('flowvision.models').resnet18()
model:eval()
local Eval = flow.nn.Graph:subclass('ServeBench')
function Eval:__init(m) flow.nn.Graph.__init(self); self.model = m end
function Eval:build(x) return self.model(x) end
local g = Eval(model)
for _, b in ipairs({8, 4, 2, 1}) do g(flow.randn(b, 3, size, size)) end
local function write(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end
for _, name in ipairs({'resnet18', 'resnet18_db'}) do
  os.execute(('mkdir -p %s/%s/1'):format(out, name))
  g:save(('%s/%s/1/model.ofg'):format(out, name))
  local cfg = {name = name, max_batch_size = 8, instance_group = {{count = 1, kind = 'KIND_CPU'}}}
  if name == 'resnet18_db' then cfg.dynamic_batching = {max_queue_delay_microseconds = delay_us} end
  write(('%s/%s/config.json'):format(out, name), json.encode(cfg))
end
local x = flow.randn(1, 3, size, size)
local hdr = json.encode({inputs = {{name = 'INPUT__0', shape = {1, 3, size, size}, datatype = 'FP32',
                                    parameters = {binary_data_size = 3 * size * size * 4}}},
                         outputs = {{name = 'OUTPUT__0', parameters = {binary_data = true}}}})
write(out .. '/body.bin', hdr .. ffi.string(x:data_ptr(), 3 * size * size * 4))
write(out .. '/body.len', tostring(#hdr))
-- the in-process graph at batch 1
g(x)
local now = require('oneflow.utils.posix').now
local times = {}
for i = 1, 20 do
  local s = now()
  g(x)
  times[i] = now() - s
end
table.sort(times)
write(out .. '/inproc_ms', ('%.2f'):format(times[10] * 1000))
