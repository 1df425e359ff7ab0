-- vit.lua -- ViT-S/16 inference (flowvision's vit_small_patch16_224, eval)
-- at batch 8, 224x224: ours eager (no_grad) and in an eval nn.Graph, against
-- PyTorch 1.13 (Debian, /usr/bin/python3) and PyTorch 2.x (bench/.venv, made
-- by bench/torch_venv.sh; skipped with a message without it) running the same
-- architecture (bench/vit_torch.py), all at the same thread count. Rounds
-- alternate the sides; each figure is the median of the rounds' medians.
--   luajit bench/vit.lua [THREADS (default 2)] [ROUNDS (default 3)] [CALLS per round (default 5)]
--   BATCH=n
local flow = require 'oneflow'
local vision = require 'flowvision'
local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')

local THREADS, ROUNDS, CALLS = tonumber(arg[1]) or 2, tonumber(arg[2]) or 3, tonumber(arg[3]) or 5
local BATCH = tonumber(os.getenv('BATCH')) or 8
flow.set_num_threads(THREADS)

local sides = B.torch_sides('vit')

flow.manual_seed(0)
local model = vision.models.vit_small_patch16_224()
model:eval()
local x = flow.randn(BATCH, 3, 224, 224)
local Eval = flow.nn.Graph:subclass('ViTBench')
function Eval:__init() flow.nn.Graph.__init(self); self.model = model end
function Eval:build(z) return self.model(z) end
local graph = Eval()
graph(x); graph(x)   -- the first call traces
flow.no_grad(function() model(x) end)

local function ours(fn)
  local t = {}
  for _ = 1, CALLS do
    collectgarbage()
    local t0 = B.now()
    fn()
    t[#t + 1] = B.now() - t0
  end
  return B.median(t) * 1e3
end

local res = {eager = {}, graph = {}}
for _, s in ipairs(sides) do res[s.name] = {} end
for _ = 1, ROUNDS do
  table.insert(res.eager, ours(function() flow.no_grad(function() model(x) end) end))
  table.insert(res.graph, ours(function() graph(x) end))
  for _, s in ipairs(sides) do
    local out = B.read_cmd(('%s %s/vit_torch.py %d %d %d 2>&1'):format(s.py, B.dir, THREADS, BATCH, CALLS))
    s.version = out:match('version (%S+)') or s.version
    local ms = tonumber(out:match('ms (%S+)'))
    if not ms then error('vit: ' .. s.name .. ' failed: ' .. out) end
    table.insert(res[s.name], ms)
  end
end

print(('ViT-S/16, batch %d, 224, %d threads, load %s, median of %d rounds x %d calls'):format(
  BATCH, THREADS, B.loadavg(), ROUNDS, CALLS))
local fast = math.huge
for _, s in ipairs(sides) do
  s.ms = B.median(res[s.name])
  fast = math.min(fast, s.ms)
  print(('%s (%s): %.1f ms'):format(s.name, s.version or '?', s.ms))
end
for _, k in ipairs({'eager', 'graph'}) do
  local ms = B.median(res[k])
  print(('ours %s: %.1f ms, %.2fx the faster PyTorch'):format(k, ms, ms / fast))
end
