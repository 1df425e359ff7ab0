-- nn.Graph concurrent scheduling (config:set_concurrency): independent
-- nodes run side by side on the CPU threads with the same results.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional
local C = flow.C

local function stat(g, what) return tonumber(C.of_graph_stat(g:_graph(), what)) end

describe('nn.Graph concurrent scheduler', function()
  local threads
  setup(function() threads = flow.get_num_threads(); flow.set_num_threads(2) end)
  teardown(function() flow.set_num_threads(threads) end)

  it('runs independent branches side by side with identical results', function()
    flow.manual_seed(3)
    local ws = {}
    for i = 1, 4 do ws[i] = flow.randn(32, 32) end
    local G = nn.Graph:subclass('Branches')
    function G:__init(n) nn.Graph.__init(self); if n then self.config:set_concurrency(n) end end
    function G.build(_, x)
      local outs = {}
      for i = 1, 4 do outs[i] = F.softmax(flow.matmul(x, ws[i]):tanh(), 2):sum(1) end
      return flow.stack(outs, 1), outs[1] * outs[2]
    end
    local seq, par = G(), G(4)
    local x = flow.randn(16, 32)
    for _ = 1, 3 do
      local a1, a2 = seq(x)
      local b1, b2 = par(x)
      H.close(b1, a1, 0)
      H.close(b2, a2, 0)
    end
    assert.is_true(stat(par, C.OF_GRAPH_MAX_WAVE) >= 2)
    assert.is_true(stat(par, C.OF_GRAPH_PARALLEL_WAVES) > 0)
    assert.is_true(stat(par, C.OF_GRAPH_WORKER_NODES) > 0, 'no node ran on a second thread')
    assert.are.equal(0, stat(seq, C.OF_GRAPH_PARALLEL_WAVES))
  end)

  it('trains like the sequential order, to the last bit (updates, dropout, BatchNorm)', function()
    local function make()
      flow.manual_seed(5)
      return nn.Sequential(nn.Conv2d(2, 4, 3, {padding = 1}), nn.BatchNorm2d(4), nn.ReLU(),
                           nn.Flatten(), nn.Dropout(0.2), nn.Linear(4 * 5 * 5, 8), nn.Tanh(),
                           nn.Linear(8, 3))
    end
    local T = nn.Graph:subclass('SchedTrain')
    function T:__init(m, n)
      nn.Graph.__init(self)
      self.m = m
      self:add_optimizer(flow.optim.Adam(m:parameters(), {lr = 1e-2}))
      if n then self.config:set_concurrency(n) end
    end
    function T:build(x, y) local l = F.cross_entropy(self.m(x), y); l:backward(); return l end
    local a, b = make(), make()
    local ga, gb = T(a), T(b, 4)
    flow.manual_seed(9)
    local data = {}
    for i = 1, 4 do data[i] = {flow.randn(6, 2, 5, 5), flow.randint(1, 4, {6})} end
    for _, xy in ipairs(data) do
      flow.manual_seed(1)
      local la = ga(xy[1], xy[2])
      flow.manual_seed(1)
      local lb = gb(xy[1], xy[2])
      assert.are.equal(la:item(), lb:item())
    end
    local pa, pb = a:parameters(), b:parameters()
    for i = 1, #pa do H.close(pb[i], pa[i], 0) end
    H.close(b[2].running_var, a[2].running_var, 0)
    assert.is_true(stat(gb, C.OF_GRAPH_MAX_WAVE) >= 2)   -- the parameter updates at least
    H.raises(function() ga.config:set_concurrency(0) end, 'positive integer')
  end)
end)
