-- r50_bf16.lua -- ResNet-50 inference at batch 1, 224x224, in bfloat16 on the
-- CPU: ours under flow.amp.autocast('cpu', {dtype = flow.bfloat16}) and with
-- the model and input in bfloat16, our float32 forward, and PyTorch 1.13
-- (Debian, /usr/bin/python3) and PyTorch 2.x (bench/.venv, made by
-- bench/torch_venv.sh; skipped with a message without it) under
-- torch.autocast('cpu', dtype=torch.bfloat16) and in float32
-- (bench/r50_bf16_torch.py), all at the same thread count. Rounds alternate
-- the sides; each figure is the median of the rounds' medians.
--   luajit bench/r50_bf16.lua [THREADS (default 2)] [ROUNDS (default 3)] [CALLS per round (default 15)]
local flow = require 'oneflow'
local vision = require 'flowvision'
local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')

local THREADS, ROUNDS, CALLS = tonumber(arg[1]) or 2, tonumber(arg[2]) or 3, tonumber(arg[3]) or 15
flow.set_num_threads(THREADS)

local sides = B.torch_sides('r50_bf16')

flow.manual_seed(0)
local r50 = vision.models.resnet50():eval()
local r50h = vision.models.resnet50():eval():to(flow.bfloat16)
local x = flow.randn(1, 3, 224, 224)
local xh = x:to(flow.bfloat16)
local cases = {
  {'float32', function() return r50(x) end},
  {'autocast', function()
    return flow.amp.autocast('cpu', {dtype = flow.bfloat16}, function() return r50(x) end)
  end},
  {'bfloat16 model and input', function() return r50h(xh) end},
}

-- median ms of CALLS calls after 3 warm-up calls
local function ours(fn)
  return flow.no_grad(function()
    for _ = 1, 3 do fn() end
    local t = {}
    for i = 1, CALLS do
      local t0 = B.now()
      fn()
      t[i] = B.now() - t0
    end
    return B.median(t) * 1e3
  end)
end

local res = {}
for _, c in ipairs(cases) do res[c[1]] = {} end
for _, s in ipairs(sides) do res[s.name] = {float32 = {}, autocast = {}} end
for _ = 1, ROUNDS do
  for _, c in ipairs(cases) do table.insert(res[c[1]], ours(c[2])) end
  for _, s in ipairs(sides) do
    local out = B.read_cmd(('%s %s/r50_bf16_torch.py %d %d 2>&1'):format(s.py, B.dir, THREADS, CALLS))
    s.version = out:match('version (%S+)') or s.version
    local f32, bf = tonumber(out:match('float32 (%S+)')), tonumber(out:match('autocast (%S+)'))
    if not (f32 and bf) then error('r50_bf16: ' .. s.name .. ' failed: ' .. out) end
    table.insert(res[s.name].float32, f32)
    table.insert(res[s.name].autocast, bf)
  end
end

print(('ResNet-50, batch 1, 224, %d threads, load %s, median of %d rounds x %d calls'):format(
  THREADS, B.loadavg(), ROUNDS, CALLS))
local fast, fast2 = math.huge, nil
for _, s in ipairs(sides) do
  local f32, bf = B.median(res[s.name].float32), B.median(res[s.name].autocast)
  fast = math.min(fast, bf)
  if s.name == 'PyTorch 2.x' then fast2 = bf end
  print(('%s (%s): float32 %.1f ms, bfloat16 autocast %.1f ms'):format(s.name, s.version or '?', f32, bf))
end
local ours32 = B.median(res.float32)
print(('ours float32: %.1f ms'):format(ours32))
for i = 2, #cases do
  local k = cases[i][1]
  local ms = B.median(res[k])
  print(('ours %s: %.1f ms, %.2fx our float32 time, %.2fx the faster PyTorch autocast%s'):format(
    k, ms, ms / ours32, ms / fast, fast2 and (', %.2fx PyTorch 2.x\'s'):format(ms / fast2) or ''))
end
