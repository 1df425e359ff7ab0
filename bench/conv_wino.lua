-- bench/conv_wino.lua -- single float32 3x3 stride-1 convolutions through
-- the direct paths (OF_CONV_WINO=0: oneDNN or im2col, as conv's routing
-- picks), Winograd F(2x2, 3x3) (=1), F(4x4, 3x3) (=4) and the routing's
-- own choice (auto), alternating call by call; medians after a warm-up,
-- ratios to the direct paths. ResNet-50's 3x3 layer shapes (56x56, 28x28,
-- 14x14, 7x7 maps) at several batches: what wino_pick (core/ops/conv.c)
-- was decided from.
--
--   luajit bench/conv_wino.lua [threads] [rounds]
--   KEEP=0 ...     plain weights (a training forward: the weight transform
--                  runs at every call) instead of parameters under no_grad
--                  (inference: the transform is kept)
--   SHAPES=NxCxH,... other layers (N samples, C channels each way, H x H)
--   LAYOUT=channels_last  channels-last inputs (NHWC tiles; the direct path
--                  is then oneDNN's NHWC kernel)
--   PASS=input_grad  time the input grad (autograd.grad of the layer's
--                  output, the graph kept) instead of the forward
local ffi = require 'ffi'
local flow = require 'oneflow'
local F = flow.nn.functional

local threads, rounds = tonumber(arg and arg[1]) or 2, tonumber(arg and arg[2]) or 9
flow.set_num_threads(threads)
pcall(ffi.cdef, 'int setenv(const char *name, const char *value, int overwrite);')
local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
local keep = os.getenv('KEEP') ~= '0'
local layout = os.getenv('LAYOUT') or 'contiguous'
local pass = os.getenv('PASS') or 'forward'
if pass ~= 'forward' and pass ~= 'input_grad' then
  error('conv_wino.lua: PASS wants forward or input_grad, got ' .. pass)
end
keep = keep and pass == 'forward'   -- an input grad alone: the weight needs none
if layout ~= 'contiguous' and layout ~= 'channels_last' then
  error('conv_wino.lua: LAYOUT wants contiguous or channels_last, got ' .. layout)
end

local shapes = {}
local spec = os.getenv('SHAPES') or
  '8x64x56,8x128x28,8x256x14,8x512x7,16x512x7,4x256x14,2x256x14,2x128x28,1x128x28,1x64x56,16x64x28,16x128x14'
for s in spec:gmatch('[^,]+') do
  local n, c, h = s:match('^(%d+)x(%d+)x(%d+)$')
  if not n then error('conv_wino.lua: SHAPES wants NxCxH items, got ' .. s) end
  shapes[#shapes + 1] = {tonumber(n), tonumber(c), tonumber(h)}
end

local variants = {{'0', 'direct'}, {'1', 'F(2x2)'}, {'4', 'F(4x4)'}, {'', 'auto'}}
local f = io.open('/proc/loadavg')
print(('%d threads, %d rounds, %s, %s weights, %s inputs, load average %s'):format(threads,
  rounds, pass, keep and 'kept (parameters, no_grad)' or 'plain', layout,
  f and f:read('*l') or 'n/a'))
if f then f:close() end
print('| N, C, H | direct ms | F(2x2) | F(4x4) | auto |')
print('|---|---|---|---|---|')
for _, s in ipairs(shapes) do
  local N, C, H = unpack(s)
  local x, w = flow.randn(N, C, H, H), flow.randn(C, C, 3, 3)
  if layout == 'channels_last' then x = x:contiguous({memory_format = flow.channels_last}) end
  if keep then w:requires_grad_(true) end
  local times = {}
  local call = function() F.conv2d(x, w, nil, {padding = 1}) end
  local run = flow.no_grad
  if pass == 'input_grad' then   -- the backward reads OF_CONV_WINO when it runs
    x:requires_grad_(true)
    local y = F.conv2d(x, w, nil, {padding = 1})
    local gy = flow.randn(unpack(y:size():totable()))
    call = function() flow.autograd.grad({y}, {x}, {gy}, {retain_graph = true}) end
    run = function(fn) fn() end
  end
  run(function()
    for _, v in ipairs(variants) do
      times[v[1]] = {}
      ffi.C.setenv('OF_CONV_WINO', v[1], 1)
      call()
    end
    for i = 1, rounds do
      for _, v in ipairs(variants) do
        ffi.C.setenv('OF_CONV_WINO', v[1], 1)
        local t0 = B.now()
        call()
        times[v[1]][i] = (B.now() - t0) * 1000
      end
    end
  end)
  local med = {}
  for _, v in ipairs(variants) do med[v[1]] = B.median(times[v[1]]) end
  print(('| %d, %d, %dx%d | %.2f | %.2fx | %.2fx | %.2fx |'):format(N, C, H, H, med['0'],
    med['1'] / med['0'], med['4'] / med['0'], med[''] / med['0']))
end
ffi.C.setenv('OF_CONV_WINO', '', 1)
