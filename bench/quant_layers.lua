-- bench/quant_layers.lua -- single int8 convolutions (quantized_conv2d,
-- uint8 7-bit activations as the default 'x86' qconfig gives them,
-- per-channel int8 weights, requantised with ReLU into uint8) against
-- PyTorch's quantized Conv2d (engine 'x86' = fbgemm on PyTorch 2.x; 1.13:
-- 'x86' where it has it, else 'onednn', else 'qnnpack'), channels-last
-- inputs on both sides. The shapes are the Fashion-MNIST ResNet-18's of
-- examples/quantization/ptq.lua (CIFAR-style stem, 28x28 input). Rounds
-- alternate the sides, each a fresh PyTorch process; a side's figure is
-- the median over rounds of its medians of 5 x 20 calls.
--
--   ./bin/flow bench/quant_layers.lua [batch = 8] [threads = 2] [rounds = 3]
local ffi = require 'ffi'
local flow = require 'oneflow'
local C = require('oneflow._C').C
local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')

local N, threads = tonumber(arg and arg[1]) or 8, tonumber(arg and arg[2]) or 2
local rounds = tonumber(arg and arg[3]) or 3
flow.set_num_threads(threads)
-- {C_in, C_out, H = W, kernel, stride, padding}
local shapes = {
  {1, 64, 28, 3, 1, 1}, {64, 64, 28, 3, 1, 1}, {64, 128, 28, 3, 2, 1}, {64, 128, 28, 1, 2, 0},
  {128, 128, 14, 3, 1, 1}, {256, 256, 7, 3, 1, 1}, {512, 512, 4, 3, 1, 1},
}

local function ours()
  local out = {}
  local p = ffi.new('of_tensor*[1]')
  local buf = function(v) return ffi.new('int64_t[2]', {v, v}) end
  for i, s in ipairs(shapes) do
    local ci, co, hw, k, st, pd = unpack(s)
    local x = flow.randint(0, 128, {N, ci, hw, hw}):to(flow.uint8):contiguous({memory_format = flow.channels_last})
    local w = flow.randint(-127, 128, {co, ci, k, k}):to(flow.int8)
    local ws, bias = flow.rand(co) * 0.001 + 0.0005, flow.randn(co)
    local function run()
      assert(C.of_quantized_conv2d(x.p, w.p, ws.p, nil, bias.p, buf(st), buf(pd), buf(1), 1, 0.03, 60, 0.5, 3,
                                   flow.uint8.id, 1, p) == 0, ffi.string(C.of_last_error()))
      C.of_tensor_release(p[0])
    end
    for _ = 1, 3 do run() end
    local t = {}
    for r = 1, 5 do
      local t0 = B.now()
      for _ = 1, 20 do run() end
      t[r] = (B.now() - t0) / 20 * 1e3
    end
    out[i] = B.median(t)
  end
  return out
end

local function torch_side(py)
  local cmd = ('%s %s/quant_layers_torch.py %d %d 2>/dev/null'):format(py, B.dir, N, threads)
  local out, engine = {}, nil
  for line in B.read_cmd(cmd):gmatch('[^\n]+') do
    local e = line:match('^engine (%S+)')
    if e then engine = e end
    local i, ms = line:match('^(%d+) (%S+)$')
    if i then out[tonumber(i)] = tonumber(ms) end
  end
  return #out == #shapes and out or nil, engine
end

local sides = B.torch_sides('quant_layers')
print(('batch %d, %d threads, %d rounds, load average %s, CPU capability %s'):format(N, threads, rounds,
  B.loadavg(), flow.backends.cpu.get_cpu_capability()))
local mine, theirs, engines = {}, {}, {}
for r = 1, rounds do
  mine[r] = ours()
  for si, side in ipairs(sides) do
    theirs[si] = theirs[si] or {}
    theirs[si][r], engines[si] = torch_side(side.py)
  end
end
local function med(per_round, i)
  local v = {}
  for _, row in ipairs(per_round) do if row then v[#v + 1] = row[i] end end
  return #v > 0 and B.median(v) or nil
end
local head = '| C_in, C_out, H=W, k, stride, pad | ours ms |'
local rule = '|---|---|'
for si, side in ipairs(sides) do
  head = head .. (' %s (%s) ms |'):format(side.name, engines[si] or 'not run')
  rule = rule .. '---|'
end
print(head .. ' ours / faster PyTorch |')
print(rule .. '---|')
for i, s in ipairs(shapes) do
  local row, best = ('| %s | %.3f |'):format(table.concat(s, ', '), med(mine, i)), math.huge
  for si in ipairs(sides) do
    local t = med(theirs[si], i)
    row = row .. (t and (' %.3f |'):format(t) or ' -- |')
    if t then best = math.min(best, t) end
  end
  print(row .. (best < math.huge and (' %.2fx |'):format(med(mine, i) / best) or ' -- |'))
end
print(('load average after: %s'):format(B.loadavg()))
