-- nn.Graph's memo (core/graph/exec.c): nodes that read only externals
-- nothing in the graph writes -- bnfold's folded weights, a transposed
-- weight -- keep their results across runs while those externals' storages
-- and versions stay the same; an in-place change runs them again.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn = flow.nn
local C = flow.C

local function stat(g, k) return tonumber(C.of_graph_stat(g:_graph(), k)) end

local function eval_graph(m, build)
  local G = nn.Graph:subclass('Memo')
  function G:__init() nn.Graph.__init(self); self.m = m end
  G.build = build or function(self, x) return self.m(x) end
  return G()
end

local function convnet()
  flow.manual_seed(8)
  local m = nn.Sequential(nn.Conv2d(3, 8, 3, {padding = 1}), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 36, 3))
  for _ = 1, 2 do m(flow.randn(4, 3, 6, 6)) end
  m:eval()
  return m
end

describe('nn.Graph memo', function()
  it('keeps folded weights across runs and gives eager results', function()
    local m = convnet()
    local g = eval_graph(m)
    local x = flow.randn(2, 3, 6, 6)
    local want = flow.no_grad(function() return m(x) end)
    for _ = 1, 5 do H.close(g(x), want, 1e-5) end
    local nodes, hits = stat(g, C.OF_GRAPH_MEMO_NODES), stat(g, C.OF_GRAPH_MEMO_HITS)
    assert.is_true(nodes > 0, 'memo nodes')
    -- the first call traces; the first run fills the memo, the three after it
    -- take every memo node's results from it
    assert.are.equal(3 * nodes, hits)
    -- the arena is still laid out from the first run and used
    assert.is_true(stat(g, C.OF_GRAPH_ARENA_BYTES) > 0)
  end)

  it('runs the nodes again after an in-place change or a loaded state dict', function()
    local m = convnet()
    local g = eval_graph(m)
    local x = flow.randn(2, 3, 6, 6)
    g(x)
    g(x)
    flow.no_grad(function()
      m[1].weight:mul_(1.5)
      m[2].running_var:add_(0.25)
      m[5].bias:sub_(1)
    end)
    H.close(g(x), flow.no_grad(function() return m(x) end), 1e-5)
    local sd = convnet():state_dict()
    for k, v in pairs(sd) do sd[k] = v:clone():mul(0.5) end
    m:load_state_dict(sd)
    H.close(g(x), flow.no_grad(function() return m(x) end), 1e-5)
  end)

  it('keeps no graph result: a caller writing into one changes nothing the graph holds', function()
    local lin = nn.Linear(4, 3)
    local g = eval_graph(lin, function(self) return self.m.weight:t() * 2 end)
    local a = g()
    a:fill_(7)
    H.close(g(), lin.weight:t() * 2, 0)
  end)

  it("leaves no stale reordered weights behind when parameters keep changing", function()
    -- an eval graph called between training steps: every call refolds the
    -- weights, and oneDNN's reordered copy of the old ones (or their
    -- Winograd transform) must go with them (40 calls kept 360 MiB of
    -- oneDNN's before, 242 MiB of transforms with the Winograd cache alone)
    -- float32 convolutions go to oneDNN on AVX-512 from 7x7 maps, on AVX2
    -- from 28x28 (to Winograd F(2x2) at this size: doc/nn.md)
    local isa = flow.backends.cpu.get_cpu_capability()
    if not (flow.backends.mkldnn.is_available() and (isa == 'AVX512' or isa == 'AVX2')) then
      pending('oneDNN float32 convolutions run on AVX2 and AVX-512 CPUs only')
      return
    end
    local hw = isa == 'AVX512' and 14 or 28
    -- as spec/soak/rss_spec.lua: AddressSanitizer's quarantine keeps freed memory
    if (os.getenv('LD_PRELOAD') or ''):find('libasan', 1, true) then
      pending('RSS is meaningless under AddressSanitizer (its quarantine keeps freed memory)')
      return
    end
    local function rss()
      local s = H.read_file('/proc/self/status')
      return tonumber(s:match('VmRSS:%s*(%d+)')) / 1024
    end
    local m = nn.Sequential(nn.Conv2d(512, 512, 3, {padding = 1, bias = false}), nn.BatchNorm2d(512))
    m:eval()
    local g = eval_graph(m)
    local x = flow.randn(1, 512, hw, hw)
    for _ = 1, 3 do g(x) end
    local r0 = rss()
    for _ = 1, 40 do
      flow.no_grad(function() m[1].weight:add_(0) end)   -- a new version: refolded
      g(x)
      flow.collect()
    end
    local grown = rss() - r0
    assert.is_true(grown < 100, ('RSS grew %.1f MiB over 40 refolds (a weight: 9 MiB)'):format(grown))
  end)

  it('OF_GRAPH_MEMO=0 turns it off', function()
    local script = os.tmpname()
    H.write_file(script, [[
local flow = require 'oneflow'
local nn = flow.nn
local m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
m:eval()
local G = nn.Graph:subclass('M')
function G:__init() nn.Graph.__init(self); self.m = m end
function G:build(x) return self.m(x) end
local g = G()
for _ = 1, 3 do g(flow.randn(1, 3, 5, 5)) end
print('memo', tonumber(flow.C.of_graph_stat(g:_graph(), flow.C.OF_GRAPH_MEMO_NODES)))
]])
    local out1 = H.capture(('env -u OF_GRAPH_MEMO luajit %s 2>&1'):format(script))
    local out2 = H.capture(('OF_GRAPH_MEMO=0 luajit %s 2>&1'):format(script))
    os.remove(script)
    local on, off = tonumber(out1:match('memo%s+(%d+)')), tonumber(out2:match('memo%s+(%d+)'))
    assert.is_true(on and on > 0, out1)
    assert.are.equal(0, off, out2)
  end)
end)
