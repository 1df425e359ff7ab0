-- bench/step.lua -- the timing pieces the training benchmarks share
-- (bench/train.lua, bench/ab_step.lua): a monotonic clock, the median, and
-- the timed training step (forward, backward, SGD with momentum).
local flow = require 'oneflow'
local F = flow.nn.functional

local M = {}

local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
M.now, M.median = B.now, B.median

-- 3 warm-up steps, then the median of `steps` timed ones (ms) and the peak
-- tensor memory of the timed steps (MiB). Random input of `batch` x shape,
-- labels 1..10.
function M.train_step(model, batch, shape, steps)
  -- compiled traces can hold the previous round's model as a constant: drop
  -- them so that its memory is free before this model's peak is measured
  jit.flush()
  flow.collect()
  flow.manual_seed(0)
  local x = flow.randn(batch, unpack(shape))
  local y = flow.randint(1, 11, {batch})
  local opt = flow.optim.SGD(model:parameters(), {lr = 0.01, momentum = 0.9})
  local function step()
    local loss = F.cross_entropy(model(x), y)
    opt:zero_grad()
    loss:backward()
    opt:step()
  end
  for _ = 1, 3 do step() end
  flow.collect()
  flow.reset_peak_memory_stats()
  local times = {}
  for i = 1, steps do
    local t0 = M.now()
    step()
    times[i] = (M.now() - t0) * 1000
  end
  if os.getenv('OF_BENCH_VERBOSE') then print(table.concat(times, ' ')) end
  return M.median(times), flow.memory_stats().peak_bytes / 2 ^ 20
end

return M
