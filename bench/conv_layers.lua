-- bench/conv_layers.lua -- single convolutions, im2col + OpenBLAS
-- (OF_CONV_BACKEND=ref) against oneDNN (=dnnl), per kind: forward, input
-- grad (conv_transpose2d of grad_output) and weight grad
-- (conv_weight_grad), float32, ResNet-18's layer shapes at 112x112 input.
-- The two backends alternate call by call; medians of 5 after a warm-up.
-- What conv.c's auto routing (dnnl_auto) was decided from.
--
--   luajit bench/conv_layers.lua [batch] [threads]
--   SHAPES=r50 ...        ResNet-50's layer shapes at 224x224 input instead
--   KINDS=forward ...     only the forwards (inference)
local ffi = require 'ffi'
local flow = require 'oneflow'
local F = require 'oneflow.ops.nn_conv'

local N, threads = tonumber(arg and arg[1]) or 16, tonumber(arg and arg[2]) or 2
flow.set_num_threads(threads)
pcall(ffi.cdef, 'int setenv(const char *name, const char *value, int overwrite);')
local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
local now = B.now

-- {C_in, C_out, H = W, kernel, stride, padding}
local shapes = {
  {3, 64, 112, 7, 2, 3}, {64, 64, 28, 3, 1, 1}, {128, 128, 14, 3, 1, 1}, {256, 256, 7, 3, 1, 1},
  {512, 512, 4, 3, 1, 1}, {64, 128, 28, 1, 2, 0}, {256, 64, 56, 1, 1, 0},
}
if os.getenv('SHAPES') == 'r50' then
  shapes = {
    {3, 64, 224, 7, 2, 3}, {64, 64, 56, 3, 1, 1}, {128, 128, 28, 3, 1, 1}, {256, 256, 14, 3, 1, 1},
    {512, 512, 7, 3, 1, 1}, {256, 64, 56, 1, 1, 0}, {1024, 256, 14, 1, 1, 0},
  }
end
local kinds = os.getenv('KINDS') == 'forward' and {'forward'} or {'forward', 'input grad', 'weight grad'}
local f = io.open('/proc/loadavg')
print(('batch %d, %d threads, load average %s'):format(N, threads, f and f:read('*l') or 'n/a'))
if f then f:close() end
print('| C_in, C_out, H=W, k, stride, pad | kind | ref ms | oneDNN ms | oneDNN / ref |')
print('|---|---|---|---|---|')
for _, s in ipairs(shapes) do
  local ci, co, hw, k, st, p = unpack(s)
  local o = {stride = st, padding = p}
  local x, w = flow.randn(N, ci, hw, hw), flow.randn(co, ci, k, k)
  local y = F.conv2d(x, w, nil, o)
  local gy = flow.randn(y:size():totable())
  local op = {}
  for i = 1, 2 do op[i] = hw - ((y:size(i + 2) - 1) * st - 2 * p + k) end
  local run = {
    forward = function() return F.conv2d(x, w, nil, o) end,
    ['input grad'] = function()
      return F.conv_transpose2d(gy, w, nil, {stride = st, padding = p, output_padding = op})
    end,
    ['weight grad'] = function() return F.conv_weight_grad(x, gy, {k, k}, o) end,
  }
  for _, kind in ipairs(kinds) do
    local times = {ref = {}, dnnl = {}}
    for i = 0, 5 do
      for _, be in ipairs({'ref', 'dnnl'}) do
        ffi.C.setenv('OF_CONV_BACKEND', be, 1)
        local t0 = now()
        run[kind]()
        if i > 0 then times[be][i] = (now() - t0) * 1000 end
      end
    end
    table.sort(times.ref)
    table.sort(times.dnnl)
    print(('| %s | %s | %.2f | %.2f | %.2f |'):format(table.concat(s, ', '), kind, times.ref[3],
      times.dnnl[3], times.dnnl[3] / times.ref[3]))
  end
end
