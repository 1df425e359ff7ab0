-- ctest fixture of test_graph_threads: compiles a small MLP nn.Graph
-- ([4, 16] -> Linear 32 -> ReLU -> Linear 8 -> softmax), runs it once and
-- saves it for the C host test to load. Usage: luajit graph_threads_save.lua OUT
local flow = require 'oneflow'
local nn = flow.nn
local out = assert(arg[1], 'usage: graph_threads_save.lua OUT')
flow.manual_seed(11)
local model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
model:eval()
local Eval = nn.Graph:subclass('ThreadsEval')
function Eval:__init(m)
  nn.Graph.__init(self)
  self.model = m
end
function Eval:build(x) return flow.softmax(self.model(x), 2) end
local g = Eval(model)
-- batch 2 compiles first, batch 4 last: the file keeps both signatures, and
-- OUT.b2 holds the compiled batch-2 output on the input the C test builds
-- ((i * 7) % 23 - 11) / 7, i = 0..31, as raw float32, to compare exactly
local v = {}
for i = 0, 31 do v[#v + 1] = ((i * 7) % 23 - 11) / 7 end
local x2 = flow.tensor(v):reshape(2, 16)
g(x2)
local y2 = g(x2)
local x = flow.randn(4, 16)
local y = g(x)
assert(y:allclose(flow.softmax(model(x), 2), {rtol = 1e-5, atol = 1e-6}), 'the graph differs from eager')
g:save(out)
local ffi = require 'ffi'
local f = assert(io.open(out .. '.b2', 'wb'))
f:write(ffi.string(y2:contiguous():data_ptr(), 16 * 4))
f:close()
print('saved ' .. out)
