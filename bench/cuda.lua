-- bench/cuda.lua -- GPU benchmarks: bandwidth of add, softmax and layer_norm
-- (forward + backward) against the device's HBM bandwidth, gemm TFLOP/s,
-- and ResNet-50 training throughput on synthetic data.
--
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' luajit bench/cuda.lua [--hbm GBps] [--batch N]
--
-- --hbm: the device's peak bandwidth for the "% of HBM" column (default
-- 4800 GB/s, an H200). Without a usable GPU it prints why and exits with 0
-- (nothing to measure is not an error of this script).
local flow = require 'oneflow'

local hbm, batch = 4800, 256
local args = arg or {}
for i = 1, #args do
  if args[i] == '--hbm' then hbm = tonumber(args[i + 1]) end
  if args[i] == '--batch' then batch = tonumber(args[i + 1]) end
end

if not flow.cuda.is_available() then
  print('bench/cuda.lua: no usable GPU, nothing to measure: ' .. flow.cuda.why_unavailable())
  os.exit(0)
end

-- Median milliseconds of fn over `reps` runs, timed with CUDA events after
-- warm-up.
local function time_ms(fn, reps)
  reps = reps or 20
  for _ = 1, 3 do fn() end
  flow.cuda.synchronize()
  local times = {}
  for r = 1, reps do
    local e0, e1 = flow.cuda.Event({enable_timing = true}), flow.cuda.Event({enable_timing = true})
    e0:record()
    fn()
    e1:record()
    e1:synchronize()
    times[r] = e0:elapsed_time(e1)
  end
  table.sort(times)
  return times[math.floor(reps / 2) + 1]
end

local rows = {}
local function row(name, ms, bytes, flops)
  local gbs = bytes and bytes / (ms * 1e-3) / 1e9
  local tfs = flops and flops / (ms * 1e-3) / 1e12
  rows[#rows + 1] = ('| %-34s | %9.3f | %9s | %7s | %8s |'):format(name, ms,
    gbs and ('%.0f'):format(gbs) or '', gbs and ('%.0f%%'):format(100 * gbs / hbm) or '',
    tfs and ('%.1f'):format(tfs) or '')
  print(rows[#rows])
end

print(('device: %d CUDA device(s); HBM reference %d GB/s'):format(flow.cuda.device_count(), hbm))
print('| op                                 |   ms      |  GB/s     | % HBM   | TFLOP/s  |')
print('|------------------------------------|-----------|-----------|---------|----------|')

flow.manual_seed(0)
local n = 64 * 1024 * 1024
local a, b = flow.randn(n, {device = 'cuda'}), flow.randn(n, {device = 'cuda'})
row('add fwd (2 x 256 MiB in)', time_ms(function() return a + b end), 3 * 4 * n)
do
  local x = a:detach():requires_grad_(true)
  row('add fwd+bwd', time_ms(function()
    local y = x + b
    y:backward(b)
  end), (3 + 3) * 4 * n)
end

for _, shape in ipairs({{8192, 1024}, {4096, 4096}, {65536, 128}}) do
  local x = flow.randn(shape, {device = 'cuda'})
  local bytes = 2 * 4 * x:numel()
  local tag = ('[%d, %d]'):format(shape[1], shape[2])
  row('softmax fwd ' .. tag, time_ms(function() return x:softmax(2) end), bytes)
  local xr = x:detach():requires_grad_(true)
  local g = flow.randn(shape, {device = 'cuda'})
  row('softmax fwd+bwd ' .. tag, time_ms(function() xr:softmax(2):backward(g) end), 5 * 4 * x:numel())
  local w, bi = flow.ones(shape[2], {device = 'cuda'}), flow.zeros(shape[2], {device = 'cuda'})
  row('layer_norm fwd ' .. tag, time_ms(function()
    return flow.nn.functional.layer_norm(x, {shape[2]}, w, bi)
  end), bytes)
  row('layer_norm fwd+bwd ' .. tag, time_ms(function()
    flow.nn.functional.layer_norm(xr, {shape[2]}, w, bi):backward(g)
  end), 5 * 4 * x:numel())
end

for _, cfg in ipairs({{'float32', false}, {'float32', true}, {'float16', false}, {'bfloat16', false}}) do
  flow.backends.cuda.matmul.allow_tf32 = cfg[2]
  local m = 8192
  local p = flow.randn(m, m, {device = 'cuda'}):to(cfg[1])
  local q = flow.randn(m, m, {device = 'cuda'}):to(cfg[1])
  row(('gemm %d^3 %s%s'):format(m, cfg[1], cfg[2] and ' tf32' or ''),
      time_ms(function() return flow.matmul(p, q) end, 10), nil, 2 * m ^ 3)
end
flow.backends.cuda.matmul.allow_tf32 = false

-- ResNet-50 training step (synthetic data): needs convolution, pooling and
-- batch norm on the GPU, which are not implemented on CUDA yet; the
-- attempt reports the op that stops it.
local ok, err = pcall(function()
  local models = require 'flowvision.models'
  local net = models.resnet50():to('cuda')
  local opt = flow.optim.SGD(net:parameters(), {lr = 0.1, momentum = 0.9})
  local x = flow.randn(batch, 3, 224, 224, {device = 'cuda'})
  local y = flow.randint(0, 1000, {batch}):to('cuda')
  local ms = time_ms(function()
    opt:zero_grad()
    flow.nn.functional.cross_entropy(net(x), y):backward()
    opt:step()
  end, 10)
  print(('ResNet-50 training, batch %d: %.0f img/s'):format(batch, batch / (ms * 1e-3)))
end)
if not ok then print('ResNet-50 training: not run: ' .. tostring(err)) end
