-- bench/cuda.lua -- GPU benchmarks: bandwidth of add, softmax and layer_norm
-- (forward + backward) against the device's HBM bandwidth, gemm TFLOP/s,
-- our convolution and gemm against cuDNN / cuBLAS called directly, and
-- ResNet-50 training throughput (channels-last, mixed precision) on
-- synthetic data.
--
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' luajit bench/cuda.lua [--hbm GBps] [--batch N]
--       [--json PATH] [--quick]
--
-- --hbm: the device's peak bandwidth for the "% of HBM" column (default
-- 4800 GB/s, an H200). Without a usable GPU it prints why and exits with 0
-- (nothing to measure is not an error of this script).
-- --json PATH: also writes the figures as JSON ({"available", "why",
-- "figures": {name: {ms, gbs, tflops}}}), under the names that
-- bench/cuda_torch.py gives PyTorch's runs of the same workloads
-- (tools/device_check.sh puts the two side by side). --quick: 5 timed runs
-- instead of 20 (10 for the gemm/conv/ResNet rows: 3).
local flow = require 'oneflow'

local hbm, batch, json_path, quick = 4800, 256, nil, false
local args = arg or {}
for i = 1, #args do
  if args[i] == '--hbm' then hbm = tonumber(args[i + 1]) end
  if args[i] == '--batch' then batch = tonumber(args[i + 1]) end
  if args[i] == '--json' then json_path = args[i + 1] end
  if args[i] == '--quick' then quick = true end
end

local figures, order = {}, {}
local function json_str(v)
  return '"' .. tostring(v):gsub('[%c"\\]', function(c)
    return c == '"' and '\\"' or c == '\\' and '\\\\' or ('\\u%04x'):format(c:byte())
  end) .. '"'
end
local function write_json(available, why)
  if not json_path then return end
  local parts = {}
  for _, name in ipairs(order) do
    local f, fields = figures[name], {}
    for _, k in ipairs({'ms', 'gbs', 'tflops', 'img_s', 'lib_ms'}) do
      if f[k] then fields[#fields + 1] = ('%s: %.6g'):format(json_str(k), f[k]) end
    end
    parts[#parts + 1] = json_str(name) .. ': {' .. table.concat(fields, ', ') .. '}'
  end
  local fh = assert(io.open(json_path .. '.tmp', 'w'))
  fh:write(('{"available": %s, "why": %s, "figures": {%s}}\n'):format(tostring(available),
           json_str(why or ''), table.concat(parts, ', ')))
  fh:close()
  assert(os.rename(json_path .. '.tmp', json_path))
end
local function figure(name, t)
  if not figures[name] then order[#order + 1] = name end
  figures[name] = t
end

if not flow.cuda.is_available() then
  print('bench/cuda.lua: no usable GPU, nothing to measure: ' .. flow.cuda.why_unavailable())
  write_json(false, flow.cuda.why_unavailable())
  os.exit(0)
end

local timer = require 'bench.cuda_time'
local function time_ms(fn, reps)
  reps = reps or 20
  if quick then reps = reps >= 20 and 5 or 3 end
  return timer(fn, reps)
end

local rows = {}
local function row(name, ms, bytes, flops)
  local gbs = bytes and bytes / (ms * 1e-3) / 1e9
  local tfs = flops and flops / (ms * 1e-3) / 1e12
  rows[#rows + 1] = ('| %-34s | %9.3f | %9s | %7s | %8s |'):format(name, ms,
    gbs and ('%.0f'):format(gbs) or '', gbs and ('%.0f%%'):format(100 * gbs / hbm) or '',
    tfs and ('%.1f'):format(tfs) or '')
  print(rows[#rows])
  figure(name, {ms = ms, gbs = gbs, tflops = tfs})
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

-- Ours against the libraries called directly (bench/cuda_ref.lua: FFI into
-- libcudnn / libcublas on the same buffers): convolutions of ResNet-50's
-- shapes with cuDNN's fastest algorithm on both sides
-- (flow.backends.cudnn.benchmark), and gemm.
local ref = require 'bench.cuda_ref'
if ref.why_unavailable() ~= '' then
  print('direct cuDNN/cuBLAS comparison: not run: ' .. ref.why_unavailable())
else
  print()
  print('| vs library (same buffers)                 | ours ms | lib ms | ours/lib |')
  print('|-------------------------------------------|---------|--------|----------|')
  flow.backends.cudnn.benchmark = true
  local F = flow.nn.functional
  local convs = {   -- N, C, H, K, kernel, stride, pad
    {batch, 64, 56, 64, 3, 1, 1}, {batch, 256, 56, 64, 1, 1, 0}, {batch, 128, 28, 128, 3, 1, 1},
    {batch, 512, 7, 512, 3, 1, 1}, {batch, 3, 224, 64, 7, 2, 3},
  }
  for _, c in ipairs(convs) do
    for _, cfg in ipairs({{'float16', true}, {'float32', false}}) do
      local dt, cl = cfg[1], cfg[2]
      local x = flow.randn(c[1], c[2], c[3], c[3], {device = 'cuda'}):to(dt)
      local w = flow.randn(c[4], c[2], c[5], c[5], {device = 'cuda'}):to(dt)
      if cl then
        x = x:to({memory_format = flow.channels_last})
        w = w:to({memory_format = flow.channels_last})
      end
      local y = F.conv2d(x, w, nil, {stride = c[6], padding = c[7]})
      local ours = time_ms(function() return F.conv2d(x, w, nil, {stride = c[6], padding = c[7]}) end, 10)
      local run = ref.conv2d(x, w, y, c[7], c[6])
      local lib = time_ms(run, 10)
      print(('| conv %dx%d %3d->%3d @%3d %s %-8s | %7.3f | %6.3f | %8.2f |'):format(c[5], c[5], c[2],
            c[4], c[3], cl and 'NHWC' or 'NCHW', dt, ours, lib, ours / lib))
      figure(('conv %dx%d %d->%d @%d s%d %s %s'):format(c[5], c[5], c[2], c[4], c[3], c[6],
             cl and 'NHWC' or 'NCHW', dt), {ms = ours, lib_ms = lib})
    end
  end
  flow.backends.cudnn.benchmark = false
  for _, cfg in ipairs({{'float16', false}, {'bfloat16', false}, {'float32', true}}) do
    local m = 8192
    flow.backends.cuda.matmul.allow_tf32 = cfg[2]
    local p = flow.randn(m, m, {device = 'cuda'}):to(cfg[1])
    local q = flow.randn(m, m, {device = 'cuda'}):to(cfg[1])
    local r = flow.matmul(p, q)
    local ours = time_ms(function() return flow.matmul(p, q) end, 10)
    local lib = time_ms(ref.gemm(p, q, r, cfg[2]), 10)
    print(('| gemm %d^3 %-9s%s                  | %7.3f | %6.3f | %8.2f |'):format(m, cfg[1],
          cfg[2] and ' tf32' or '     ', ours, lib, ours / lib))
    local key = ('gemm %d^3 %s%s'):format(m, cfg[1], cfg[2] and ' tf32' or '')
    if figures[key] then figures[key].lib_ms = lib end
  end
  flow.backends.cuda.matmul.allow_tf32 = false
end

-- ResNet-50 training on synthetic data: channels-last, mixed precision
-- (flow.amp when this build has it, else the model and data in float16),
-- cuDNN's timed algorithm choice, SGD with momentum.
print()
local ok, err = pcall(function()
  local models = require 'flowvision.models'
  local F = flow.nn.functional
  flow.backends.cudnn.benchmark = true
  local cl = {memory_format = flow.channels_last}
  local net = models.resnet50():to('cuda'):to(cl)
  local amp = flow.amp and flow.amp.autocast and flow.amp.GradScaler
  local mode
  if amp then
    mode = 'AMP (flow.amp)'
  else
    net:half()
    mode = 'float16 weights'
  end
  local opt = flow.optim.SGD(net:parameters(), {lr = 0.1, momentum = 0.9})
  local x = flow.randn(batch, 3, 224, 224, {device = 'cuda'})
  if not amp then x = x:half() end
  x = x:to(cl)
  local y = flow.randint(1, 1001, {batch}):to('cuda')
  local scaler = amp and flow.amp.GradScaler()
  local step
  if amp then
    step = function()
      opt:zero_grad()
      local loss = flow.amp.autocast('cuda', function() return F.cross_entropy(net(x), y) end)
      scaler:scale(loss):backward()
      scaler:step(opt)
      scaler:update()
    end
  else
    step = function()
      opt:zero_grad()
      F.cross_entropy(net(x):float(), y):backward()
      opt:step()
    end
  end
  local ms = time_ms(step, 10)
  print(('ResNet-50 training, batch %d, channels-last, %s: %.1f ms/step, %.0f img/s'):format(
        batch, mode, ms, batch / (ms * 1e-3)))
  figure(('resnet50 train batch %d channels-last amp'):format(batch),
         {ms = ms, img_s = batch / (ms * 1e-3)})
  flow.backends.cudnn.benchmark = false
end)
if not ok then print('ResNet-50 training: failed: ' .. tostring(err)) end
write_json(true, '')
