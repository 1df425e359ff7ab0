-- bench/blas_core.lua -- what OpenBLAS's kernel choice costs on this CPU:
-- a 1024x1024 float32 matmul and flowvision's ResNet-50 no_grad forward
-- (batch 1, 224), 1 thread, process CPU time, best of 7, once with the
-- kernels the library asks OpenBLAS for (flow.backends.cpu.get_blas_core())
-- and once with OpenBLAS's SSE3 fallback forced (OPENBLAS_CORETYPE=Prescott),
-- each in its own process (doc/benchmarks.md, "Fifth pass").
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' luajit bench/blas_core.lua
local flow = require 'oneflow'

if arg[1] == '--child' then
  local models = require 'flowvision.models'
  flow.set_num_threads(1)
  local function best(fn)
    for _ = 1, 2 do fn() end
    local b = math.huge
    for _ = 1, 7 do
      local t0 = os.clock()
      fn()
      b = math.min(b, os.clock() - t0)
    end
    return b * 1e3
  end
  local a, b = flow.randn(1024, 1024), flow.randn(1024, 1024)
  local mm = best(function() return a:matmul(b) end)
  local m = models.resnet50()
  m:eval()
  local x = flow.randn(1, 3, 224, 224)
  local r50 = flow.no_grad(function() return best(function() return m:forward(x) end) end)
  print(flow.backends.cpu.get_blas_core(), mm, r50)
  return
end

local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
local function run(env)
  local out = B.read_cmd(('env %s LUA_PATH=%q luajit %s/blas_core.lua --child')
                         :format(env, package.path, B.dir))
  local core, mm, r50 = out:match('(%S+)%s+(%S+)%s+(%S+)')
  assert(core, 'blas_core: the child printed ' .. out)
  return core, tonumber(mm), tonumber(r50)
end
local c0, mm0, r0 = run('OPENBLAS_CORETYPE=Prescott')
local c1, mm1, r1 = run('-u OPENBLAS_CORETYPE')
print(('| case | %s (forced) | %s (chosen) | speed-up |'):format(c0, c1))
print('|---|---|---|---|')
print(('| `a:matmul(b)`, 1024x1024 float32 | %.1f ms (%.0f GFLOP/s) | %.1f ms (%.0f GFLOP/s) | %.1fx |')
      :format(mm0, 2 * 1024^3 / mm0 / 1e6, mm1, 2 * 1024^3 / mm1 / 1e6, mm0 / mm1))
print(('| flowvision ResNet-50 no_grad forward, batch 1, 224 | %.1f ms | %.1f ms | %.1fx |')
      :format(r0, r1, r0 / r1))
