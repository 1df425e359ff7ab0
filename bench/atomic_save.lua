-- flow.save of a 16 MiB state through an O_TMPFILE inode against a named
-- temporary file (oneflow.utils.atomic), 20 saves each, alternating in one
-- run. Usage: luajit bench/atomic_save.lua [saves]
local flow = require 'oneflow'
local atomic = require 'oneflow.utils.atomic'
local P = require 'oneflow.utils.posix'

local n = tonumber(arg and arg[1]) or 20
local d = os.tmpname()
os.remove(d)
assert(os.execute('mkdir -p ' .. d) == 0)
local s = {a = flow.randn(4 * 1024 * 1024)}
local t = {tmpfile = 0, named = 0}
for i = 1, n do
  for _, m in ipairs(i % 2 == 0 and {'tmpfile', 'named'} or {'named', 'tmpfile'}) do
    atomic._hooks.force_named = (m == 'named') or nil
    local t0 = P.now()
    flow.save(s, d .. '/x.safetensors')
    t[m] = t[m] + P.now() - t0
  end
end
atomic._hooks.force_named = nil
os.execute('rm -rf ' .. d)
print(('16 MiB flow.save, %d each, alternating: O_TMPFILE %.1f ms, named temporary file %.1f ms, ratio %.2f')
      :format(n, t.tmpfile / n * 1000, t.named / n * 1000, t.tmpfile / t.named))
