-- Long runs keep their memory flat: an eager training loop, an nn.Graph
-- training loop and a tensor churn loop, each for OF_SOAK_STEPS steps
-- (default 1500: a few seconds each in `make test`; `make soak` runs
-- 20,000). After a warm-up of a quarter of the steps (at least 500), the
-- resident set size, sampled ten times after a full collection, must stay
-- within 5% of the first sample. The warm-up covers one-off growth: the
-- allocator's cache of freed blocks rises to the most garbage the Lua
-- collector ever let pile up (a plateau), LuaJIT compiles its traces.
-- What a leak adds per step is caught once it passes 5% of the RSS
-- (~70 MiB here: ~3 KiB a step at 1500 steps, ~250 B at 20,000).
local flow = require 'oneflow'
local nn, optim = flow.nn, flow.optim

local STEPS = tonumber(os.getenv('OF_SOAK_STEPS') or '') or 1500
local TOLERANCE = 0.05

local PAGE = 4096
local function rss_bytes()
  local f = assert(io.open('/proc/self/statm'))
  local _, res = f:read('*n', '*n')
  f:close()
  return res * PAGE
end

local function settle()
  collectgarbage('collect')
  collectgarbage('collect')
  flow.collect()
  return rss_bytes()
end

-- Runs step(i) STEPS times; returns the samples (bytes) after the warm-up.
local function soak(name, step)
  local warm = math.min(STEPS - 10, math.max(500, math.floor(STEPS / 4)))
  for i = 1, warm do step(i) end
  local samples = {settle()}
  local every = math.max(1, math.floor((STEPS - warm) / 10))
  for i = warm + 1, STEPS do
    step(i)
    if (i - warm) % every == 0 then samples[#samples + 1] = settle() end
  end
  if os.getenv('OF_SOAK_VERBOSE') then
    for k, s in ipairs(samples) do io.stderr:write(('  sample %d: %.2f MiB\n'):format(k, s / 2 ^ 20)) end
  end
  local base, worst = samples[1], samples[1]
  for _, s in ipairs(samples) do worst = math.max(worst, s) end
  io.stderr:write(('[soak] %s: %d steps, RSS after warm-up %.1f MiB, highest %.1f MiB (%+.2f%%)\n')
                  :format(name, STEPS, base / 2 ^ 20, worst / 2 ^ 20, (worst / base - 1) * 100))
  assert(worst <= base * (1 + TOLERANCE),
         ('%s: RSS grew from %.1f MiB to %.1f MiB over %d steps'):format(name, base / 2 ^ 20, worst / 2 ^ 20, STEPS))
  return samples
end

local function mlp()
  return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
end

-- AddressSanitizer holds freed memory in its quarantine (256 MiB): RSS says
-- nothing about leaks there (LeakSanitizer does, in the C tests).
local under_asan = (os.getenv('LD_PRELOAD') or ''):find('libasan', 1, true) ~= nil

describe('long runs keep RSS flat (' .. STEPS .. ' steps)', function()
  if under_asan then
    it('is skipped under AddressSanitizer', function()
      pending('RSS is meaningless under AddressSanitizer (its quarantine keeps freed memory)')
    end)
    return
  end
  it('an eager training loop', function()
    flow.manual_seed(1)
    local model = mlp()
    local opt = optim.SGD(model:parameters(), {lr = 0.01, momentum = 0.9})
    local x, y = flow.randn(16, 32), flow.randint(1, 11, {16})
    local first
    soak('eager training', function()
      local loss = nn.functional.cross_entropy(model(x), y)
      opt:zero_grad()
      loss:backward()
      opt:step()
      first = first or loss:item()
    end)
    local final = nn.functional.cross_entropy(model(x), y):item()
    assert.is_true(final < first, 'the loop did train')
  end)

  it('an nn.Graph training loop', function()
    flow.manual_seed(2)
    local model = mlp()
    local opt = optim.SGD(model:parameters(), {lr = 0.01})
    local Train = nn.Graph:subclass('SoakTrain')
    function Train:__init(m, o)
      nn.Graph.__init(self)
      self.model = m
      self:add_optimizer(o)
    end
    function Train:build(a, b)
      local loss = nn.functional.cross_entropy(self.model(a), b)
      loss:backward()
      return loss
    end
    local g = Train(model, opt)
    local x, y = flow.randn(16, 32), flow.randint(1, 11, {16})
    local first, last
    soak('graph training', function()
      last = g(x, y):item()
      first = first or last
    end)
    assert.is_true(last < first, 'the loop did train')
  end)

  it('a tensor churn loop', function()
    flow.manual_seed(3)
    soak('tensor churn', function(i)
      local n = 1 + i % 97
      local a = flow.randn(n, 33)
      local b = a:t():contiguous():view(-1)
      local c = flow.cat({b, b * 2}, 1):narrow(1, 1, n)
      local d = (a:sum(2) + c:sum()):exp():clamp(0, 10)
      if i % 5 == 0 then
        local big = flow.empty({1 + (i % 7) * 50000})   -- a size that varies by step
        big:fill_(1)
      end
      return d
    end)
  end)
end)
