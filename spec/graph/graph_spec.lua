-- nn.Graph: eager and graph mode give the same results (forward, training
-- with SGD and Adam, schedulers, dropout, BatchNorm, shared and unused
-- parameters), graphs recompile per input signature, and data-dependent
-- control flow inside build() is a clear error.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional

local function max_diff(a, b) return (a - b):abs():max():item() end

local function params_diff(m1, m2)
  local p1, p2 = m1:parameters(), m2:parameters()
  assert.are.equal(#p1, #p2)
  local d = 0
  for i = 1, #p1 do d = math.max(d, max_diff(p1[i], p2[i])) end
  return d
end

local Fwd = nn.Graph:subclass('Fwd')
function Fwd:__init(m) nn.Graph.__init(self); self.m = m end
function Fwd:build(x) return self.m(x) end

local Train = nn.Graph:subclass('Train')
function Train:__init(m, opt, opts)
  nn.Graph.__init(self)
  self.m = m
  self:add_optimizer(opt, opts)
end
function Train:build(x, y)
  local loss = F.cross_entropy(self.m(x), y)
  loss:backward()
  return loss
end

local function mlp(seed, dtype)
  flow.manual_seed(seed)
  local m = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))
  if dtype then m:to(dtype) end
  return m
end

local function lenet(seed, dtype)
  flow.manual_seed(seed)
  local m = nn.Sequential(nn.Conv2d(1, 4, 3, {padding = 1}), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(4, 8, 3, {padding = 1}), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(8 * 3 * 3, 16), nn.ReLU(), nn.Linear(16, 5))
  if dtype then m:to(dtype) end
  return m
end

-- runs `steps` training steps eagerly and in a graph from the same start;
-- returns the largest loss and parameter differences
local function train_both(make, make_opt, batches, sched)
  local a, b = make(), make()
  local oa, ob = make_opt(a), make_opt(b)
  local sa = sched and sched(oa)
  local g = Train(b, ob, sched and {lr_sch = sched(ob)} or nil)
  local dloss = 0
  for _, xy in ipairs(batches) do
    local la = F.cross_entropy(a(xy[1]), xy[2])
    oa:zero_grad()
    la:backward()
    oa:step()
    if sa then sa:step() end
    local lb = g(xy[1], xy[2])
    dloss = math.max(dloss, math.abs(la:item() - lb:item()))
  end
  return dloss, params_diff(a, b), g, a, b
end

local function batches(n, shape, classes, dtype)
  flow.manual_seed(99)
  local list = {}
  for i = 1, n do
    local x = flow.randn(shape)
    if dtype then x = x:to(dtype) end
    list[i] = {x, flow.randint(1, classes + 1, {shape[1]})}
  end
  return list
end

describe('nn.Graph', function()
  it('runs an MLP forward like eager mode (float32 and float64)', function()
    for _, dt in ipairs({flow.float32, flow.float64}) do
      local m = mlp(1, dt)
      local g = Fwd(m)
      for _ = 1, 3 do
        local x = flow.randn(5, 6):to(dt)
        assert.is_true(max_diff(g(x), m(x)) <= (dt == flow.float64 and 1e-6 or 1e-5))
      end
      assert.is_truthy(tostring(g):find('1 compiled', 1, true))
    end
  end)

  it('runs a LeNet-like conv net forward like eager mode', function()
    for _, dt in ipairs({flow.float32, flow.float64}) do
      local m = lenet(2, dt)
      m:eval()
      local g = Fwd(m)
      for _ = 1, 2 do
        local x = flow.randn(3, 1, 12, 12):to(dt)
        assert.is_true(max_diff(g(x), m(x)) <= (dt == flow.float64 and 1e-6 or 1e-5))
      end
    end
  end)

  it('trains an MLP with SGD (momentum, weight decay, nesterov) like eager mode', function()
    local dl, dp = train_both(function() return mlp(3) end, function(m)
      return flow.optim.SGD(m:parameters(), {lr = 0.1, momentum = 0.9, weight_decay = 1e-3, nesterov = true})
    end, batches(5, {8, 6}, 4))
    assert.is_true(dl <= 1e-5 and dp <= 1e-5, ('loss diff %g, param diff %g'):format(dl, dp))
  end)

  it('trains with Adam, AdamW (amsgrad) and plain SGD like eager mode, to the last bit', function()
    local opts = {
      function(m) return flow.optim.Adam(m:parameters(), {lr = 1e-2}) end,
      function(m) return flow.optim.AdamW(m:parameters(), {lr = 1e-2, amsgrad = true}) end,
      function(m) return flow.optim.SGD(m:parameters(), {lr = 0.05}) end,
    }
    for _, mk in ipairs(opts) do
      local dl, dp = train_both(function() return mlp(4) end, mk, batches(5, {8, 6}, 4))
      assert.are.equal(0, dl)
      assert.are.equal(0, dp)
    end
  end)

  it('trains a LeNet-like conv net (float64, Adam) like eager mode', function()
    local dl, dp = train_both(function() return lenet(5, flow.float64) end, function(m)
      return flow.optim.Adam(m:parameters(), {lr = 1e-3})
    end, batches(5, {4, 1, 12, 12}, 5, flow.float64))
    assert.is_true(dl <= 1e-6 and dp <= 1e-6, ('loss diff %g, param diff %g'):format(dl, dp))
  end)

  it('trains exactly like eager mode with the fusions off, and within 1e-5 with them (float32)', function()
    local function resblock()
      flow.manual_seed(9)
      local Block = nn.Module:subclass('ResBlockSpec')
      function Block:__init()
        nn.Module.__init(self)
        self.c1, self.b1 = nn.Conv2d(3, 6, 3, {padding = 1}), nn.BatchNorm2d(6)
        self.c2, self.b2 = nn.Conv2d(6, 6, 3, {padding = 1}), nn.BatchNorm2d(6)
        self.fc = nn.Linear(6 * 4 * 4, 4)
      end
      function Block:forward(x)
        local h = F.relu(self.b1(self.c1(x)))
        h = F.relu(self.b2(self.c2(h)) + h)
        return self.fc(flow.flatten(F.max_pool2d(h, 2), 2))
      end
      return Block()
    end
    local cases = {{function() return lenet(21) end, {4, 1, 12, 12}, 5},
                   {resblock, {4, 3, 8, 8}, 4}}
    for _, case in ipairs(cases) do
      for _, fusion in ipairs({false, true}) do
        local a, b = case[1](), case[1]()
        local oa = flow.optim.Adam(a:parameters(), {lr = 1e-2})
        local g = Train(b, flow.optim.Adam(b:parameters(), {lr = 1e-2}))
        g.config:enable_fusion(fusion)
        for _, xy in ipairs(batches(4, case[2], case[3])) do
          local la = F.cross_entropy(a(xy[1]), xy[2])
          oa:zero_grad(); la:backward(); oa:step()
          local lb = g(xy[1], xy[2])
          if not fusion then assert.are.equal(la:item(), lb:item()) end
        end
        local dp = params_diff(a, b)
        if fusion then
          assert.is_true(dp <= 1e-5, tostring(dp))
          assert.is_truthy(g:ir():find('fused_elementwise', 1, true), g:ir())
          assert.is_truthy(g:ir():find('relu_max_pool', 1, true), g:ir())
        else
          assert.are.equal(0, dp)
          local ir = g:ir()
          assert.is_falsy(ir:find('fused_elementwise', 1, true), ir)
          assert.is_falsy(ir:find('relu_max_pool', 1, true), ir)
        end
      end
    end
  end)

  it('accumulates gradients over micro-batches (set_gradient_accumulation_steps)', function()
    local a, b = mlp(15, flow.float64), mlp(15, flow.float64)
    local oa = flow.optim.SGD(a:parameters(), {lr = 0.1, momentum = 0.9})
    local ob = flow.optim.SGD(b:parameters(), {lr = 0.1, momentum = 0.9})
    local g = Train(b, ob)
    g.config:set_gradient_accumulation_steps(4)
    for _, xy in ipairs(batches(3, {8, 6}, 4, flow.float64)) do
      local la = F.cross_entropy(a(xy[1]), xy[2])
      oa:zero_grad(); la:backward(); oa:step()
      local lb = g(xy[1], xy[2])
      assert.is_true(math.abs(la:item() - lb:item()) < 1e-12)
    end
    assert.is_true(params_diff(a, b) < 1e-12)
    H.raises(function() g(flow.randn(6, 6):double(), flow.randint(1, 5, {6})) end, 'does not split into 4')
  end)

  it('steps a learning-rate scheduler added with add_optimizer', function()
    local dl, dp = train_both(function() return mlp(6) end, function(m)
      return flow.optim.SGD(m:parameters(), {lr = 0.2, momentum = 0.5})
    end, batches(6, {8, 6}, 4), function(opt) return flow.optim.lr_scheduler.StepLR(opt, 2, {gamma = 0.5}) end)
    assert.are.equal(0, dl)
    assert.are.equal(0, dp)
  end)

  it('draws fresh random numbers each run, as eager mode does (dropout)', function()
    local function make()
      flow.manual_seed(7)
      return nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 4))
    end
    local a, b = make(), make()
    local oa, ob = flow.optim.SGD(a:parameters(), {lr = 0.1}), flow.optim.SGD(b:parameters(), {lr = 0.1})
    local g = Train(b, ob)
    local data = batches(4, {8, 6}, 4)
    local la, lb = {}, {}
    flow.manual_seed(123)
    for i, xy in ipairs(data) do
      local l = F.cross_entropy(a(xy[1]), xy[2])
      oa:zero_grad(); l:backward(); oa:step()
      la[i] = l:item()
    end
    flow.manual_seed(123)
    for i, xy in ipairs(data) do lb[i] = g(xy[1], xy[2]):item() end
    H.close(lb, la, 1e-6)
    assert.is_true(la[2] ~= la[3])
    assert.are.equal(0, params_diff(a, b))
  end)

  it('trains a ResNet-style block with BatchNorm (running statistics too)', function()
    local Block = nn.Module:subclass('Block')
    function Block:__init()
      nn.Module.__init(self)
      self.conv1 = nn.Conv2d(3, 6, 3, {padding = 1, bias = false})
      self.bn1 = nn.BatchNorm2d(6)
      self.conv2 = nn.Conv2d(6, 6, 3, {padding = 1, bias = false})
      self.bn2 = nn.BatchNorm2d(6)
      self.short = nn.Conv2d(3, 6, 1, {bias = false})
      self.fc = nn.Linear(6, 3)
    end
    function Block:forward(x)
      local h = F.relu(self.bn1(self.conv1(x)))
      h = self.bn2(self.conv2(h))
      h = F.relu(h + self.short(x))
      return self.fc(F.adaptive_avg_pool2d(h, 1):flatten(2))
    end
    local function make() flow.manual_seed(8); return Block():to(flow.float64) end
    local dl, dp, _, a, b = train_both(make, function(m)
      return flow.optim.SGD(m:parameters(), {lr = 0.1, momentum = 0.9})
    end, batches(4, {4, 3, 6, 6}, 3, flow.float64))
    assert.is_true(dl <= 1e-6 and dp <= 1e-6, ('loss diff %g, param diff %g'):format(dl, dp))
    assert.is_true(max_diff(a.bn1.running_mean, b.bn1.running_mean) <= 1e-9)
    assert.is_true(max_diff(a.bn2.running_var, b.bn2.running_var) <= 1e-9)
    assert.are.equal(a.bn1.num_batches_tracked:item(), b.bn1.num_batches_tracked:item())
  end)

  it('handles shared and unused parameters like eager mode', function()
    local Shared = nn.Module:subclass('Shared')
    function Shared:__init()
      nn.Module.__init(self)
      self.lin = nn.Linear(6, 6)
      self.unused = nn.Linear(6, 6)
      self.out = nn.Linear(6, 4)
    end
    function Shared:forward(x) return self.out(F.relu(self.lin(F.relu(self.lin(x))))) end
    local function make() flow.manual_seed(9); return Shared() end
    local before = make().unused.weight:clone()
    local dl, dp, _, _, b = train_both(make, function(m)
      return flow.optim.Adam(m:parameters(), {lr = 1e-2})
    end, batches(4, {8, 6}, 4))
    assert.are.equal(0, dl)
    assert.are.equal(0, dp)
    assert.are.equal(0, max_diff(b.unused.weight, before))
  end)

  -- generic loss function and inputs: build(m, ...) -> loss, for both modes
  local function train_generic(make, inputs, loss_fn, steps)
    local G = nn.Graph:subclass('Generic')
    function G:__init(m, opt) nn.Graph.__init(self); self.m = m; self:add_optimizer(opt) end
    function G:build(...) local l = loss_fn(self.m, ...); l:backward(); return l end
    local a, b = make(), make()
    local oa, ob = flow.optim.Adam(a:parameters(), {lr = 1e-2}), flow.optim.Adam(b:parameters(), {lr = 1e-2})
    local g = G(b, ob)
    local dl = 0
    for i = 1, steps do
      flow.manual_seed(1000 + i)
      local args = {inputs()}
      flow.manual_seed(2000 + i)
      local la = loss_fn(a, unpack(args))
      oa:zero_grad(); la:backward(); oa:step()
      flow.manual_seed(2000 + i)
      dl = math.max(dl, math.abs(la:item() - g(unpack(args)):item()))
    end
    return dl, params_diff(a, b)
  end

  it('replays backward rules that read the targets (nll_loss over a cat) correctly', function()
    local dl, dp = train_generic(function()
      flow.manual_seed(1)
      return nn.Sequential(nn.Linear(4, 6), nn.LeakyReLU(0.1), nn.Linear(6, 3), nn.LogSoftmax(2))
    end, function() return flow.randn(5, 4), flow.randint(1, 4, {5}) end, function(m, x, y)
      local o = m(x)
      return F.nll_loss(flow.cat({o, o}, 1), flow.cat({y, y}, 1))
    end, 5)
    assert.are.equal(0, dl)
    assert.are.equal(0, dp)
  end)

  it('trains a transformer encoder layer (with dropout) and an LSTM like eager mode', function()
    local dl, dp = train_generic(function()
      flow.manual_seed(2)
      return nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, dropout = 0.1, batch_first = true})
    end, function() return flow.randn(2, 5, 8) end, function(m, x) return m(x):pow(2):mean() end, 3)
    assert.are.equal(0, dl)
    assert.are.equal(0, dp)
    dl, dp = train_generic(function()
      flow.manual_seed(3)
      return nn.LSTM(4, 8, {num_layers = 2, batch_first = true})
    end, function() return flow.randn(3, 6, 4) end, function(m, x) return m(x):tanh():sum() end, 3)
    assert.are.equal(0, dl)
    assert.are.equal(0, dp)
  end)

  it('updates the module\'s own parameters, and sees eager changes to them', function()
    local m = mlp(10)
    local w = m[1].weight
    local before = w:clone()
    local g = Train(m, flow.optim.SGD(m:parameters(), {lr = 0.1}))
    local xy = batches(1, {8, 6}, 4)[1]
    g(xy[1], xy[2])
    assert.is_true(m[1].weight == w)
    assert.is_true(max_diff(w, before) > 0)
    assert.is_nil(w.grad)
    -- an eager change is seen by the next run
    local f = Fwd(m)
    local x = flow.randn(2, 6)
    f(x)
    flow.no_grad(function() m[5].bias:fill_(100) end)
    assert.is_true(max_diff(f(x), m(x)) == 0)
  end)

  it('compiles again for a new input signature and keeps both', function()
    local m = mlp(11)
    local g = Fwd(m)
    local x4, x6 = flow.randn(4, 6), flow.randn(6, 6)
    assert.are.equal(0, max_diff(g(x4), m(x4)))
    assert.are.equal(0, max_diff(g(x6), m(x6)))
    assert.are.equal(0, max_diff(g(x4), m(x4)))
    assert.is_truthy(tostring(g):find('2 compiled', 1, true))
    -- a non-contiguous input is made contiguous first
    local xt = flow.randn(6, 4):t()
    assert.are.equal(0, max_diff(g(xt), m(xt)))
  end)

  it('returns results without autograd history, from the first call on', function()
    local m = mlp(16)
    local g = Fwd(m)
    local x = flow.randn(2, 6)
    local y1, y2 = g(x), g(x)
    assert.is_false(y1.requires_grad)
    assert.is_false(y2.requires_grad)
    -- a graph without optimizer may still take grads inside build
    local G = nn.Graph:subclass('Grads')
    function G:__init(mm) nn.Graph.__init(self); self.m = mm end
    function G:build(z)
      local w = self.m[1].weight
      local gw = flow.autograd.grad(self.m(z):sum(), w)
      return gw
    end
    local gg = G(m)
    local want = flow.autograd.grad(m(x):sum(), m[1].weight)
    H.close(gg(x), want, 1e-6)
    H.close(gg(x), want, 1e-6)
  end)

  it('adds each call\'s grads into p.grad when the graph has no optimizer, as eager does', function()
    local G = nn.Graph:subclass('NoOpt')
    function G:__init(mm) nn.Graph.__init(self); self.m = mm end
    function G:build(z)
      local l = self.m(z):pow(2):mean()
      l:backward()
      return l
    end
    local m, ref = mlp(17), mlp(17)
    local g = G(m)
    local xs = {}
    for i = 1, 4 do xs[i] = flow.randn(3, 6) end
    -- a grad already there before the compiling call is added to, not replaced
    m[1].weight.grad = flow.ones(m[1].weight.shape)
    ref[1].weight.grad = flow.ones(ref[1].weight.shape)
    for i = 1, 3 do   -- accumulating over calls (compiling, then plain runs)
      g(xs[i])
      ref(xs[i]):pow(2):mean():backward()
      for k, p in ipairs(m:parameters()) do
        H.close(p.grad, ref:parameters()[k].grad, 1e-6)
      end
    end
    -- cleared between calls: each call's own grads
    for _, p in ipairs(m:parameters()) do p.grad = nil end
    for _, p in ipairs(ref:parameters()) do p.grad = nil end
    g(xs[4])
    ref(xs[4]):pow(2):mean():backward()
    for k, p in ipairs(m:parameters()) do H.close(p.grad, ref:parameters()[k].grad, 1e-6) end
    -- a frozen parameter gets none
    m[1].bias.requires_grad = false
    m[1].bias.grad = nil
    local g2 = G(m)
    g2(xs[1])
    g2(xs[1])
    assert.is_nil(m[1].bias.grad)
    m[1].bias.requires_grad = true
  end)

  it('compiles separately for train and eval mode', function()
    flow.manual_seed(13)
    local m = nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5), nn.Linear(6, 2))
    local g = Fwd(m)
    local x = flow.randn(4, 6)
    g(x)
    m:eval()
    assert.are.equal(0, max_diff(g(x), m(x)))
    assert.are.equal(0, max_diff(g(x), m(x)))
    assert.is_truthy(tostring(g):find('2 compiled', 1, true))
  end)

  it('compiles again when the optimizer state is replaced (load_state_dict)', function()
    local a, b = mlp(14), mlp(14)
    local oa = flow.optim.Adam(a:parameters(), {lr = 1e-2})
    local ob = flow.optim.Adam(b:parameters(), {lr = 1e-2})
    local g = Train(b, ob)
    local data = batches(4, {8, 6}, 4)
    local function eager(xy)
      local l = F.cross_entropy(a(xy[1]), xy[2])
      oa:zero_grad(); l:backward(); oa:step()
      return l:item()
    end
    for i = 1, 2 do assert.are.equal(eager(data[i]), g(data[i][1], data[i][2]):item()) end
    local sd = ob:state_dict()
    ob:load_state_dict(sd)
    oa:load_state_dict(oa:state_dict())
    for i = 3, 4 do assert.are.equal(eager(data[i]), g(data[i][1], data[i][2]):item()) end
    assert.are.equal(0, params_diff(a, b))
  end)

  it('replays shape ops from their records on new inputs (roll flattened and by dims, repeat, flip)', function()
    local G = nn.Graph:subclass('ShapeOps')
    function G:__init() nn.Graph.__init(self) end
    function G.build(_, x)
      return x:roll(4), x:roll({1, -1}, {1, 2}), x['repeat'](x, 2, 1), x:flip(2)
    end
    local g = G()
    for k = 0, 2 do
      local x = flow.arange(0, 6):reshape(2, 3) + 10 * k
      local a, b, c, d = g(x)
      H.close(a, x:roll(4), 0)
      H.close(b, x:roll({1, -1}, {1, 2}), 0)
      H.close(c, x['repeat'](x, 2, 1), 0)
      H.close(d, x:flip(2), 0)
    end
  end)

  it('unrolls Lua control flow that does not read tensor values', function()
    local G = nn.Graph:subclass('Unroll')
    function G:__init() nn.Graph.__init(self) end
    function G.build(_, x, n)
      for _ = 1, n do x = x * 2 end
      if x:size(1) > 2 then return x + 1 end
      return x - 1
    end
    local g = G()
    local x = flow.ones(3, 2)
    H.close(g(x, 3), flow.full({3, 2}, 9))
    H.close(g(flow.ones(2, 2), 2), flow.full({2, 2}, 3))
    H.close(g(x, 1), flow.full({3, 2}, 3))
  end)

  it('raises a clear error on data-dependent control flow inside build', function()
    local G = nn.Graph:subclass('Branchy')
    function G:__init() nn.Graph.__init(self) end
    function G.build(_, x)
      if x:sum():item() > 0 then return x end
      return -x
    end
    local err = H.raises(function() G()(flow.ones(2, 3)) end,
                         'data-dependent control flow', ':item()', 'use flow.where')
    assert.is_truthy(err:find('[]', 1, true))
    local P = nn.Graph:subclass('Printy')
    function P:__init() nn.Graph.__init(self) end
    function P.build(_, x) return tostring(x) end
    H.raises(function() P()(flow.ones(2, 3)) end, 'tostring()', '[2,3]')
    local L = nn.Graph:subclass('Listy')
    function L:__init() nn.Graph.__init(self) end
    function L.build(_, x) local _ = x:totable(); return x end
    H.raises(function() L()(flow.ones(2)) end, ':totable()')
    -- eager mode is unaffected after the failed traces
    assert.are.equal(6, flow.ones(2, 3):sum():item())
    assert.are.equal(0, flow.C.of_tracing())
  end)

  it('reports unsupported features and bad arguments clearly', function()
    local G = nn.Graph:subclass('Cfg')
    function G:__init() nn.Graph.__init(self) end
    local g = G()
    H.raises(function() g.config:set_amp_dtype(flow.float32) end, 'float16 or flow.bfloat16')
    H.raises(function() g.config:set_gradient_accumulation_steps(0) end, 'positive integer')
    g.config:enable_amp(false)
    local m = mlp(1)
    H.raises(function() g:add_optimizer(flow.optim.RMSprop(m:parameters())) end, 'RMSprop', 'SGD, Adam')
    H.raises(function() g(flow.ones(2)) end, 'build is not implemented')
    local Bad = nn.Graph:subclass('BadArg')
    function Bad:__init() nn.Graph.__init(self) end
    function Bad.build(_, x) return x end
    H.raises(function() Bad()({}) end, 'graphs take tensors')
    H.raises(function() g:save('/tmp/never.ofg') end, 'call the graph once first')
  end)

  it('returns several results and tables of results', function()
    local G = nn.Graph:subclass('Multi')
    function G:__init() nn.Graph.__init(self) end
    function G.build(_, x) return x + 1, {a = x * 2, b = {x - 1}}, 'tag' end
    local g = G()
    for _ = 1, 2 do
      local x = flow.ones(2)
      local p, t, s = g(x)
      H.close(p, {2, 2})
      H.close(t.a, {2, 2})
      H.close(t.b[1], {0, 0})
      assert.are.equal('tag', s)
    end
  end)

  it('prints a summary and the IR', function()
    local g = Fwd(mlp(12))
    assert.is_truthy(tostring(g):find('not compiled', 1, true))
    g(flow.randn(2, 6))
    local s = tostring(g)
    assert.is_truthy(s:find('nodes', 1, true) and s:find('passes', 1, true) and s:find('KiB', 1, true))
    local ir = g:ir(2)
    assert.is_truthy(ir:find('addmm', 1, true))   -- an eval graph's nn.Linear
    assert.is_truthy(ir:find('"m.0.weight"', 1, true))
  end)
end)
