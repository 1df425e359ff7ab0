-- nn.Graph activation checkpointing: checkpointed modules' activations are
-- recomputed in backward (the checkpoint pass), giving the same parameters
-- with a lower peak memory.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional
local C = flow.C

local Net = nn.Module:subclass('CkNet')
function Net:__init(width, dropout)
  nn.Module.__init(self)
  local function block()
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.Tanh(),
                         nn.Linear(width, width), nn.GELU())
  end
  self.inp = nn.Linear(16, width)
  self.b1, self.b2, self.b3 = block(), block(), block()
  self.drop = dropout and nn.Dropout(0.3) or nil
  self.out = nn.Linear(width, 4)
end
function Net:forward(x)
  x = self.b3(self.b2(self.b1(self.inp(x))))
  if self.drop then x = self.drop(x) end
  return self.out(x)
end

local Train = nn.Graph:subclass('CkTrain')
function Train:__init(m, mode)
  nn.Graph.__init(self)
  self.m = m
  self:add_optimizer(flow.optim.Adam(m:parameters(), {lr = 1e-3}))
  if mode == 'graph' then self.config:enable_activation_checkpointing(true)
  elseif mode == 'module' then
    self.m.b1.config.activation_checkpointing = true
    self.m.b2.config.activation_checkpointing = true
  end
end
function Train:build(x, y)
  local loss = F.cross_entropy(self.m(x), y)
  loss:backward()
  return loss
end

-- a train graph class over a module m: opt(m) its optimizer, checkpointed
-- by configure(graph) when the graph is made with ck = true
local function ck_graph(name, opt, configure)
  local G = nn.Graph:subclass(name)
  function G:__init(m, ck)
    nn.Graph.__init(self)
    self.m = m
    self:add_optimizer(opt(m))
    if ck then configure(self) end
  end
  G.build = Train.build
  return G
end

local function make(seed, width, dropout)
  flow.manual_seed(seed)
  return Net(width, dropout)
end

-- the step's own high-water mark: peak above what was live before it (tensors
-- that earlier specs still hold must not count)
local function peak(step)
  step()
  flow.collect()
  flow.reset_peak_memory_stats()
  local base = flow.memory_stats().current_bytes
  for _ = 1, 2 do step() end
  return flow.memory_stats().peak_bytes - base
end

describe('nn.Graph activation checkpointing', function()
  it('gives the same parameters after N steps, per module and for the whole graph', function()
    flow.manual_seed(5)
    local data = {}
    for i = 1, 4 do data[i] = {flow.randn(32, 16), flow.randint(1, 5, {32})} end
    local ref = make(1, 32, true)
    local g0 = Train(ref, nil)
    for _, mode in ipairs({'module', 'graph'}) do
      local m = make(1, 32, true)
      local g = Train(m, mode)
      flow.manual_seed(11)
      local losses = {}
      for i, xy in ipairs(data) do losses[i] = g(xy[1], xy[2]):item() end
      flow.manual_seed(11)
      if mode == 'module' then
        for i, xy in ipairs(data) do
          assert.are.equal(losses[i], g0(xy[1], xy[2]):item())
        end
      end
      local pr, pm = ref:parameters(), m:parameters()
      for i = 1, #pr do H.close(pm[i], pr[i], 0, mode .. ' param ' .. i) end
      assert.is_truthy(g:ir():find('checkpoint(', 1, true) or tostring(g):find('checkpoint(', 1, true))
      local recomputed = tostring(g):match('checkpoint%((%d+)%)')
      assert.is_true(tonumber(recomputed) > 0, tostring(g))
    end
  end)

  it('checkpointed conv + relu + max_pool blocks (relupool) train to the same parameters', function()
    local function convnet()
      flow.manual_seed(8)
      local m = nn.Sequential(nn.Sequential(nn.Conv2d(1, 4, 3, {padding = 1}), nn.ReLU(),
                                            nn.MaxPool2d(2)),
                              nn.Sequential(nn.Conv2d(4, 8, 3, {padding = 1}), nn.ReLU(),
                                            nn.MaxPool2d(2)),
                              nn.Flatten(), nn.Linear(8 * 4 * 4, 5))
      return m
    end
    local T = ck_graph('CkPool', function(m) return flow.optim.Adam(m:parameters(), {lr = 1e-2}) end,
                       function(g) g.config:enable_activation_checkpointing(true) end)
    local a, b, e = convnet(), convnet(), convnet()
    local ga, gb = T(a, false), T(b, true)
    local eo = flow.optim.Adam(e:parameters(), {lr = 1e-2})
    flow.manual_seed(4)
    for _ = 1, 3 do
      local x, y = flow.randn(6, 1, 16, 16), flow.randint(1, 6, {6})
      ga(x, y)
      gb(x, y)
      eo:zero_grad()
      F.cross_entropy(e(x), y):backward()
      eo:step()
    end
    local pa, pb, pe = a:parameters(), b:parameters(), e:parameters()
    for i = 1, #pa do
      H.close(pb[i], pa[i], 0, 'checkpointed param ' .. i)
      H.close(pa[i], pe[i], 1e-5, 'eager param ' .. i)
    end
    assert.are.equal(2, C.of_graph_count_op(ga:_graph(), 'relu_max_pool'))
  end)

  it('lowers the peak memory measured by the allocator', function()
    local x, y = flow.randn(2048, 16), flow.randint(1, 5, {2048})
    local a = Train(make(2, 256), nil)
    local pa = peak(function() a(x, y) end)
    a = nil
    flow.collect()
    local b = Train(make(2, 256), 'graph')
    local pb = peak(function() b(x, y) end)
    assert.is_true(pb < 0.85 * pa, ('checkpointed peak %d vs %d'):format(pb, pa))
    assert.is_true(tonumber(C.of_graph_stat(b:_graph(), C.OF_GRAPH_PLANNED_PEAK)) > 0)
  end)

  it('recomputes a conv block with training-mode BatchNorm without updating its statistics twice', function()
    local function conv_net()
      flow.manual_seed(3)
      local m = nn.Sequential(nn.Conv2d(3, 8, 3, {padding = 1}), nn.BatchNorm2d(8), nn.ReLU(),
                              nn.Sequential(nn.Conv2d(8, 8, 3, {padding = 1}), nn.BatchNorm2d(8),
                                            nn.ReLU()),
                              nn.Flatten(), nn.Linear(8 * 6 * 6, 3))
      return m
    end
    local G = ck_graph('CkConv', function(m)
      return flow.optim.SGD(m:parameters(), {lr = 0.05, momentum = 0.9})
    end, function(g) g.m[4].config.activation_checkpointing = true end)
    local a, b = conv_net(), conv_net()
    local ga, gb = G(a, false), G(b, true)
    flow.manual_seed(8)
    for _ = 1, 3 do
      local x, t = flow.randn(4, 3, 6, 6), flow.randint(1, 4, {4})
      assert.are.equal(ga(x, t):item(), gb(x, t):item())
    end
    local pa, pb = a:parameters(), b:parameters()
    for i = 1, #pa do H.close(pb[i], pa[i], 0) end
    H.close(b[4][2].running_mean, a[4][2].running_mean, 0)
    H.close(b[4][2].running_var, a[4][2].running_var, 0)
    assert.is_truthy(tostring(gb):match('checkpoint%([1-9]'))
  end)
end)
