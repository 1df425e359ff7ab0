-- The auto-parallel planner (oneflow.nn.graph_auto) in one process: the
-- search over signatures with given machine figures as if on n ranks, the
-- boxing costs, the cost-model cache, and a graph on a one-rank placement.
-- (spec/dist/parallel_auto_mpi.lua runs it on 2 and 4 processes.)
local flow = require 'oneflow'
local nn, F = flow.nn, flow.nn.functional
local GA = require 'oneflow.nn.graph_auto'
local CM = require 'oneflow.distributed.cost_model'

local FIG = {flops = 2.7e10, bytes = 2.6e10, box = {
  ['S->B'] = {a = 8.3e-5, b = 1.5e-9}, ['P->B'] = {a = 4.4e-5, b = 2.3e-9},
  ['P->S'] = {a = 8.5e-5, b = 1.3e-9}, ['S->S'] = {a = 1.3e-4, b = 1.1e-9}}}

local P1 = flow.placement('cpu', {0})

-- a call record as the probe makes it
local function call(m, name, x, y, state)
  return {module = m, name = name, type = m.__name,
          input = {shape = x, itemsize = 4, state = state}, output = {shape = y, itemsize = 4}}
end

local function names(plan)
  local out = {}
  for i, st in ipairs(plan.steps) do out[i] = st.sig.name end
  return table.concat(out, ',')
end

describe('auto-parallel planner', function()
  it('costs each boxing by its collective, and nothing where no data moves', function()
    local mib = 2 ^ 20
    assert.near(8.3e-5 + 1.5e-9 * mib, CM.box_seconds(FIG, 'S1', 'B', mib), 1e-12)
    assert.near(4.4e-5 + 2.3e-9 * mib, CM.box_seconds(FIG, 'P', 'B', mib), 1e-12)
    assert.near(8.5e-5 + 1.3e-9 * mib, CM.box_seconds(FIG, 'P', 'S2', mib), 1e-12)
    assert.near(1.3e-4 + 1.1e-9 * mib, CM.box_seconds(FIG, 'S1', 'S2', mib), 1e-12)
    for _, pair in ipairs({{'B', 'S1'}, {'B', 'P'}, {'S1', 'P'}, {'S1', 'S1'}}) do
      assert.are.equal(0, CM.box_seconds(FIG, pair[1], pair[2], mib))
    end
    -- in training the backward adds the reverse boxing between the duals:
    -- S->B forward, P->S (reduce-scatter) backward
    assert.near(CM.box_seconds(FIG, 'S1', 'B', mib) + CM.box_seconds(FIG, 'P', 'S1', mib),
                GA.box_cost(FIG, 'S1', 'B', mib, true), 1e-12)
  end)

  it('splits the weights of wide Linear layers on a small batch, keeps a conv net data parallel', function()
    local l1, a1 = nn.Linear(64, 2048):to_global(P1, flow.sbp.broadcast), nn.ReLU()
    local l2 = nn.Linear(2048, 2048):to_global(P1, flow.sbp.broadcast)
    local wide = {call(l1, 'l1', {8, 64}, {8, 2048}, 'S1'), call(a1, 'a1', {8, 2048}, {8, 2048}),
                  call(l2, 'l2', {8, 2048}, {8, 2048})}
    local plan = GA.search(wide, FIG, 4, true)
    local w1, w2 = plan.steps[1].sig.params.weight, plan.steps[3].sig.params.weight
    assert.is_true(w1 ~= 'B' and w2 ~= 'B', names(plan))
    local dp = GA.search(wide, FIG, 4, true, function(_, sg) return sg.name ~= 'column' and sg.name ~= 'row' end)
    assert.is_true(plan.cost < dp.cost / 2)
    -- the same layers on a large batch: moving activations costs more than
    -- the gradients, data parallel wins
    local big = {call(l1, 'l1', {65536, 64}, {65536, 2048}, 'S1'),
                 call(a1, 'a1', {65536, 2048}, {65536, 2048}),
                 call(l2, 'l2', {65536, 2048}, {65536, 2048})}
    for _, c in ipairs(big) do c.sigs = nil end
    assert.are.equal('data,split,data', names(GA.search(big, FIG, 4, true)))

    local c1 = nn.Conv2d(3, 16, 3, {padding = 1}):to_global(P1, flow.sbp.broadcast)
    local bn = nn.BatchNorm2d(16):to_global(P1, flow.sbp.broadcast)
    local c2 = nn.Conv2d(16, 32, 3, {padding = 1}):to_global(P1, flow.sbp.broadcast)
    local convs = {call(c1, 'c1', {16, 3, 32, 32}, {16, 16, 32, 32}, 'S1'),
                   call(bn, 'bn', {16, 16, 32, 32}, {16, 16, 32, 32}),
                   call(nn.ReLU(), 'r', {16, 16, 32, 32}, {16, 16, 32, 32}),
                   call(c2, 'c2', {16, 16, 32, 32}, {16, 32, 32, 32})}
    local cp = GA.search(convs, FIG, 4, true)
    assert.are.equal('data,data,split,data', names(cp))
    for _, st in ipairs(cp.steps) do assert.are.equal('S1', st.sig.input) end
  end)

  it('on a 2x2 grid: wide layers split along both axes, a large batch data x tensor', function()
    local FIG2 = {flops = FIG.flops, bytes = FIG.bytes, box = FIG.box, axes = {FIG, FIG}}
    local P2 = flow.placement('cpu', {{0}})   -- a 1x1 grid holds the parameters here
    local l1 = nn.Linear(64, 2048):to_global(P2, {flow.sbp.broadcast, flow.sbp.broadcast})
    local l2 = nn.Linear(2048, 2048):to_global(P2, {flow.sbp.broadcast, flow.sbp.broadcast})
    local function calls(N)
      return {call(l1, 'l1', {N, 64}, {N, 2048}, 'S1,B'), call(nn.ReLU(), 'a1', {N, 2048}, {N, 2048}),
              call(l2, 'l2', {N, 2048}, {N, 2048})}
    end
    local plan = GA.search(calls(8), FIG2, {2, 2}, true)
    local w = plan.steps[3].sig.params.weight
    assert.is_nil(w:find('B'), w)
    for _, st in ipairs(plan.steps) do assert.truthy(st.sig.input:find(',', 1, true)) end
    plan = GA.search(calls(16384), FIG2, {2, 2}, true)
    assert.are.equal('S1', plan.steps[1].sig.input:match('^([^,]+)'))
    assert.truthy(plan.steps[3].sig.name:find('data', 1, true), plan.steps[3].sig.name)
  end)

  it('refuses modules with parameters it has no signatures for, naming them', function()
    local M = nn.Module:subclass('Scale')
    function M:__init()
      nn.Module.__init(self)
      self.s = nn.Parameter(flow.ones(4))
    end
    function M:forward(x) return x * self.s end
    local m = M():to_global(P1, flow.sbp.broadcast)
    local ok, err = pcall(GA.search, {call(m, 'net.scale', {2, 4}, {2, 4}, 'S1')}, FIG, 4, true)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("no SBP signatures for Scale (module 'net.scale'", 1, true), err)
  end)

  it('reads back the cache it writes and ignores a broken one', function()
    local path = os.tmpname()
    CM.path = path
    local f1 = CM.figures(P1)
    assert.is_false(f1.cached)
    local f2 = CM.figures(P1)
    assert.is_true(f2.cached)
    assert.are.equal(f1.flops, f2.flops)
    assert.are.equal(f1.bytes, f2.bytes)
    local fh = io.open(path, 'w')
    fh:write('return {os.exit(1)}\n')
    fh:close()
    assert.is_false(CM.figures(P1).cached)   -- not code: read as data, not found, measured again
    CM.path = nil
    os.remove(path)
  end)

  it('trains a graph on a one-rank placement as eager mode does', function()
    flow.manual_seed(2)
    local net = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3))
    local ref = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3))
    ref:load_state_dict(net:state_dict())
    net:to_global(P1, flow.sbp.broadcast)
    local G = nn.Graph:subclass('AutoOne')
    function G:__init()
      nn.Graph.__init(self)
      self.net = net
      self:add_optimizer(flow.optim.SGD(net:parameters(), {lr = 0.1}))
      self.config:enable_auto_parallel(true, {figures = FIG, print = false})
    end
    function G:build(x, y)
      local l = F.cross_entropy(self.net(x), y)
      l:backward()
      return l
    end
    local g, ropt = G(), flow.optim.SGD(ref:parameters(), {lr = 0.1})
    for _ = 1, 3 do
      local x, y = flow.randn(5, 6), flow.randint(1, 4, {5})
      local l = g(x:to_global(P1, flow.sbp.split(1)), y:to_global(P1, flow.sbp.split(1)))
      ropt:zero_grad()
      local want = F.cross_entropy(ref(x), y)
      want:backward()
      ropt:step()
      assert.near(want:item(), l:item(), 1e-6)
    end
    assert.are.equal(3, #g:auto_parallel_plan())
  end)
end)
