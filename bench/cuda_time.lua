-- bench/cuda_time.lua -- median milliseconds of fn over `reps` runs (default
-- 20), timed with CUDA events after 3 warm-up runs; shared by the CUDA
-- benchmarks.
local flow = require 'oneflow'

return function(fn, reps)
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
