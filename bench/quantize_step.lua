-- The input quantize step of the int8 LeNet (a batch of 8 Fashion-MNIST-sized
-- images): five tensor ops against flow.quantize_per_tensor's one C pass,
-- 1 thread, process CPU time (os.clock), rounds alternating.
--   ./bin/flow bench/quantize_step.lua
local flow = require 'oneflow'
flow.set_num_threads(1)
local x = flow.randn(8, 1, 28, 28)
local inv, zp = 1 / 0.0235, 33
local function ops() return ((x * inv):round() + zp):clamp(0, 255):to(flow.uint8) end
local function one() return flow.quantize_per_tensor(x, 0.0235, 33, flow.quint8) end
for _ = 1, 200 do ops(); one() end
for r = 1, 3 do
  local t0 = os.clock(); for _ = 1, 2000 do ops() end; local a = (os.clock() - t0) / 2000 * 1e3
  t0 = os.clock(); for _ = 1, 2000 do one() end; local b = (os.clock() - t0) / 2000 * 1e3
  print(('round %d: 5 tensor ops %.4f ms, quantize_per_tensor (one op + qtensor) %.4f ms'):format(r, a, b))
end
