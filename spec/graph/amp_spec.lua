-- nn.Graph auto mixed precision (config:enable_amp): build's forward is
-- traced under autocast, so the graph holds the casts; float16 graphs scale
-- the loss with a GradScaler updated inside the graph.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional
local C = flow.C

local function mlp(seed)
  flow.manual_seed(seed)
  return nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))
end

local Train = nn.Graph:subclass('AmpTrain')
function Train:__init(m, opt, dtype, scaler)
  nn.Graph.__init(self)
  self.m = m
  self:add_optimizer(opt)
  self.config:enable_amp(true)
  if dtype then self.config:set_amp_dtype(dtype) end
  if scaler then self:set_grad_scaler(scaler) end
end
function Train:build(x, y)
  local loss = F.cross_entropy(self.m(x), y)
  loss:backward()
  return loss
end

local function params_diff(a, b)
  local pa, pb, d = a:parameters(), b:parameters(), 0
  for i = 1, #pa do d = math.max(d, (pa[i] - pb[i]):abs():max():item()) end
  return d
end

local function batches(n)
  flow.manual_seed(9)
  local list = {}
  for i = 1, n do list[i] = {flow.randn(16, 6), flow.randint(1, 5, {16})} end
  return list
end

describe('nn.Graph AMP', function()
  it('runs matmuls in bfloat16 with casts in the IR, as eager autocast does', function()
    local m = mlp(1)
    local G = nn.Graph:subclass('AmpEval')
    function G:__init() nn.Graph.__init(self); self.m = m; self.config:enable_amp(true) end
    function G:build(x) return self.m(x), F.softmax(self.m(x), 2) end
    local g = G()
    local x = flow.randn(5, 6)
    for _ = 1, 2 do
      local y, p = g(x)
      assert.are.equal(flow.bfloat16, y.dtype)
      assert.are.equal(flow.float32, p.dtype)   -- softmax is in the float32 list
      local want = flow.amp.autocast({dtype = flow.bfloat16}, function() return m(x) end)
      H.close(y:float(), want:float(), 0)
    end
    assert.is_true(C.of_graph_count_op(g:_graph(), 'to') >= 3)
    assert.is_truthy(g:ir():find('bfloat16', 1, true))
    assert.is_false(flow.amp.is_autocast_enabled())
  end)

  it('trains in bfloat16 like eager autocast, close to float32 eager', function()
    local data = batches(2)
    for i = 3, 10 do data[i] = data[(i - 1) % 2 + 1] end   -- loss goes down on repeated batches
    local a, b, c = mlp(2), mlp(2), mlp(2)
    local oa = flow.optim.Adam(a:parameters(), {lr = 1e-2})
    local oc = flow.optim.Adam(c:parameters(), {lr = 1e-2})
    local g = Train(b, flow.optim.Adam(b:parameters(), {lr = 1e-2}))
    local first, last, dloss = nil, nil, 0
    for i, xy in ipairs(data) do
      local la = flow.amp.autocast({dtype = flow.bfloat16}, function()
        return F.cross_entropy(a(xy[1]), xy[2])
      end)
      oa:zero_grad(); la:backward(); oa:step()
      local lc = F.cross_entropy(c(xy[1]), xy[2])
      oc:zero_grad(); lc:backward(); oc:step()
      local lb = g(xy[1], xy[2])
      assert.is_true(math.abs(lb:item() - la:item()) < 1e-5, ('step %d: %g vs %g'):format(i, lb:item(), la:item()))
      dloss = math.max(dloss, math.abs(lb:item() - lc:item()))
      if i == 2 then first = lb:item() end
      last = lb:item()
    end
    assert.is_true(params_diff(a, b) < 1e-5, 'graph vs eager autocast ' .. params_diff(a, b))
    assert.is_true(dloss < 0.02, 'amp vs float32 loss ' .. dloss)
    assert.is_true(params_diff(b, c) < 0.1, 'amp vs float32 params ' .. params_diff(b, c))
    assert.is_true(last < first)
  end)

  it('scales the loss for float16 and skips steps with inf/nan grads', function()
    local m, ref = mlp(3), mlp(3)
    local scaler = flow.amp.GradScaler({init_scale = 1024, growth_interval = 2})
    local g = Train(m, flow.optim.SGD(m:parameters(), {lr = 0.1}), flow.float16, scaler)
    local oref = flow.optim.SGD(ref:parameters(), {lr = 0.1})
    local sref = flow.amp.GradScaler({init_scale = 1024, growth_interval = 2})
    local data = batches(3)
    local function eager(x, y)
      oref:zero_grad()
      local l = flow.amp.autocast({dtype = flow.float16}, function() return F.cross_entropy(ref(x), y) end)
      sref:scale(l):backward()
      sref:step(oref)
      sref:update()
      return l
    end
    for i = 1, 3 do
      local l = g(data[i][1], data[i][2])
      local le = eager(data[i][1], data[i][2])
      assert.is_false(g:step_skipped())
      assert.is_true(math.abs(l:item() - le:item()) < 1e-5)
    end
    assert.is_true(params_diff(m, ref) < 1e-5, 'fp16 graph vs eager ' .. params_diff(m, ref))
    assert.are.equal(2048, scaler:get_scale())   -- grew once after two good steps
    assert.are.equal(sref:get_scale(), scaler:get_scale())
    -- an inf in the input makes inf/nan grads: the step is skipped, the scale backs off
    local before = {}
    for i, p in ipairs(m:parameters()) do before[i] = p:clone() end
    local bad = data[1][1]:clone()
    bad[1][1] = math.huge
    g(bad, data[1][2])
    assert.is_true(g:step_skipped())
    for i, p in ipairs(m:parameters()) do H.close(p, before[i], 0) end
    assert.are.equal(1024, scaler:get_scale())
    assert.are.equal(0, scaler:_get_growth_tracker())
    g(data[2][1], data[2][2])
    assert.is_false(g:step_skipped())
    assert.is_true((m:parameters()[1] - before[1]):abs():max():item() > 0)
  end)

  it('gives float16 graphs a default scaler and rejects bad settings', function()
    local m = mlp(4)
    local g = Train(m, flow.optim.SGD(m:parameters(), {lr = 0.1}), flow.float16)
    local data = batches(1)
    g(data[1][1], data[1][2])
    assert.are.equal(65536, rawget(g, '_grad_scaler'):get_scale())
    H.raises(function() g:set_grad_scaler({}) end, 'expected a flow.amp.GradScaler')
    H.raises(function() g.config:set_amp_dtype('float64') end, 'float16 or flow.bfloat16')
  end)
end)
