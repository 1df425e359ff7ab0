-- nn.Graph with global tensors under mpirun (-np 2 and -np 4): data
-- parallel, tensor model parallel and 2-D hybrid train graphs equal
-- single-process eager training on the same global batch; the IR holds the
-- boxing collectives and shows placements and SBP; ZeRO (config:enable_zero)
-- equals the graph without it and takes less memory per rank.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local nn, F = flow.nn, flow.nn.functional
local r, n = flow.env.get_rank(), flow.env.get_world_size()
if n < 2 then   -- run by tools/run_tests.sh under mpirun -np 2 and 4
  describe('nn.Graph with global tensors', function()
    it('runs under mpirun', function() pending('needs mpirun -np 2 or more') end)
  end)
  return
end
local all = {}
for i = 0, n - 1 do all[i + 1] = i end
local P = flow.placement('cpu', all)
local S, Bc = flow.sbp.split, flow.sbp.broadcast
local grid = n == 4 and {{0, 1}, {2, 3}} or {{0, 1}}
local P2 = flow.placement('cpu', grid)

local D = require 'spec.dist.helpers'
local mlp, loss_of = D.mlp, D.loss_of

local TrainGraph = nn.Graph:subclass('TrainGraph')
function TrainGraph:__init(net, opt, N, zero)
  nn.Graph.__init(self)
  self.net, self.N = net, N
  self:add_optimizer(opt)
  if zero then self.config:enable_zero(true, {stage = zero}) end
end
function TrainGraph:build(x, onehot)
  local loss = loss_of(self.net(x), onehot, self.N)
  loss:backward()
  return loss
end

local function sgd(ps) return flow.optim.SGD(ps, {lr = 0.2, momentum = 0.9}) end
local function adam(ps) return flow.optim.Adam(ps, {lr = 0.05}) end

-- the same batch on every rank (and in the reference)
local function batch(step, N)
  flow.manual_seed(100 + step)
  local X = flow.randn(N, 6)
  local OH = F.one_hot(flow.randint(1, 5, {N}), 4):to('float32')
  return X, OH
end

-- Trains `net` made global by `setup` in a graph and a plain copy eagerly
-- for `steps` steps; x_sbp: the sbp of the batch and one-hot targets.
-- Returns the global net and its graph.
local function graph_equals_eager(setup, x_sbp, placement, opts)
  opts = opts or {}
  flow.manual_seed(opts.seed or 1)
  local net, ref = mlp(), mlp()
  ref:load_state_dict(net:state_dict())
  setup(net)
  local make = opts.optim or sgd
  local N = opts.batch or 3 * n + 1   -- uneven split on purpose
  local g = TrainGraph(net, make(net:parameters()), N, opts.zero)
  local ropt = make(ref:parameters())
  for step = 1, opts.steps or 4 do
    local X, OH = batch(step, N)
    local Xg = flow.tensor(X:totable(), {placement = placement, sbp = x_sbp})
    local OHg = flow.tensor(OH:totable(), {placement = placement, sbp = x_sbp})
    local l = g(Xg, OHg)
    assert.is_true(l.is_global)
    ropt:zero_grad()
    local rl = loss_of(ref(X), OH, N)
    rl:backward()
    ropt:step()
    H.close(l:item(), rl:item(), 1e-5, 'loss at step ' .. step)
  end
  local a, b = net:parameters(), ref:parameters()
  assert.equal(#b, #a)
  for i = 1, #a do
    assert.is_true(a[i].is_global)
    H.close(a[i]:full_local(), b[i], 1e-5, 'parameter ' .. i .. ' after training')
  end
  return net, g
end

local C = require('oneflow._C').C
local function count(g, op) return C.of_graph_count_op(g:_graph(), op) end

local col, row = flow.nn.parallel.linear_sbp('column'), flow.nn.parallel.linear_sbp('row')
local function hybrid(m)
  m:to_global(P2, function(name)
    if name:match('^0%.') then return {Bc, S(1)} end           -- column parallel
    if name == '2.weight' then return {Bc, S(2)} end           -- row parallel
    return {Bc, Bc}
  end)
end

describe('nn.Graph with global tensors', function()
  it('data parallel: batch split, parameters broadcast, grads all-reduced in the graph', function()
    local _, g = graph_equals_eager(function(m) m:to_global(P, Bc) end, S(1), P)
    -- one all-reduce per parameter's partial-sum grad, recorded as graph nodes
    assert.equal(6, count(g, 'all_reduce_to') + count(g, 'all_reduce'))
    assert.equal(0, count(g, 'reduce_scatter'))
    local ir = g:ir(2)
    local rows = math.floor((3 * n + 1) / n) + (r < (3 * n + 1) % n and 1 or 0)
    local ranks = table.concat(all, ',')
    assert(ir:find('input %0: f32[' .. rows .. ',6] <sbp=(S(1)) placement=cpu:' .. ranks, 1, true), ir)
    assert(ir:find('<sbp=(B) placement=cpu:' .. ranks .. '> "net.0.weight"', 1, true), ir)
    assert(ir:find('sgd_update', 1, true), ir)
  end)

  it('tensor model parallel: column then row split Linear, Adam', function()
    local net, g = graph_equals_eager(function(m)
      m:to_global(P, function(name, p)
        if name:match('^0%.') then return col(name, p) end
        if name:match('^2%.') then return row(name, p) end
        return Bc
      end)
    end, Bc, P, {optim = adam})
    assert.equal(S(1), net[1].weight.sbp[1])
    -- the row-parallel layer's partial sums are all-reduced in forward,
    -- the column-parallel layer's input grads in backward
    assert.is_true(count(g, 'all_reduce_to') + count(g, 'all_reduce') >= 2)
  end)

  it('2-D hybrid: data parallel along grid axis 1, model parallel along axis 2', function()
    local net, g = graph_equals_eager(hybrid, {S(1), Bc}, P2, {batch = 4 * n + 2, optim = adam})
    assert.equal(S(1), net[1].weight.sbp[2])
    local ir = g:ir(2)
    assert(ir:find('sbp=(B, S(1)) placement=cpu:' .. table.concat(all, ',') .. ' grid ' ..
                   #grid .. 'x2> "net.0.weight"', 1, true), ir)
  end)

  it('eval graph: column-parallel forward, global results, a new sbp compiles again', function()
    flow.manual_seed(4)
    local net, ref = mlp(), mlp()
    ref:load_state_dict(net:state_dict())
    net:to_global(P, function(name, p)
      if name:match('^4%.') then return col(name, p) end   -- the last layer's outputs split
      return Bc
    end)
    local Eval = nn.Graph:subclass('Eval')
    function Eval:__init(m) nn.Graph.__init(self); self.m = m end
    function Eval:build(x) return self.m(x) end
    local g = Eval(net)
    local X = batch(1, 2 * n + 1)
    for _, sbp in ipairs({S(1), Bc, S(1)}) do
      local y = g(flow.tensor(X:totable(), {placement = P, sbp = sbp}))
      assert.is_true(y.is_global)
      assert.equal(P, y.placement)
      H.close(y:full_local(), ref(X), 1e-5, 'eval output with input ' .. tostring(sbp))
    end
    assert(tostring(g):find('2 compiled', 1, true), tostring(g))
  end)

  it('AMP loss scaling: every rank skips the same steps', function()
    flow.manual_seed(6)
    local net = mlp():to_global(P, Bc)
    local g = TrainGraph(net, sgd(net:parameters()), 2 * n)
    g.config:enable_amp(true)
    g:set_grad_scaler(flow.amp.GradScaler{init_scale = 2 ^ 10})
    local X, OH = batch(1, 2 * n)
    -- an inf in rank 0's rows: only its grads are inf/nan
    if r == 0 then X:narrow(1, 1, 1):fill_(math.huge) end
    local Xl = flow.tensor(X:narrow(1, 2 * r + 1, 2):totable())
    local xg = Xl:to_global(P, S(1))
    local og = flow.tensor(OH:totable(), {placement = P, sbp = S(1)})
    g(xg, og)
    local skipped = flow.tensor({g:step_skipped() and 1 or 0})
    flow.comm.all_reduce(skipped, {op = 'min'})
    assert.equal(1, skipped:item(), 'every rank skipped the step')
    assert.is_true(count(g, 'all_reduce') >= 1)
  end)

  it('graph:debug(1) prints the IR with placements and SBP', function()
    local _, g = graph_equals_eager(function(m) m:to_global(P, Bc) end, S(1), P, {steps = 1})
    local f = io.tmpfile()
    g:debug(1, f)
    g:debug(0)
    f:seek('set')
    local text = f:read('*a')
    f:close()
    assert(text:find('sbp=(S(1))', 1, true), text)
    assert(text:find('all_reduce', 1, true), text)
  end)
end)

describe('ZeRO (config:enable_zero)', function()
  it('data parallel: Adam with ZeRO equals eager training, SGD with stage 2 the graph without', function()
    local _, g = graph_equals_eager(function(m) m:to_global(P, Bc) end, S(1), P,
                                    {optim = adam, zero = 1})
    -- grads reduce-scattered, parameters all-gathered after the update
    assert.equal(6, count(g, 'reduce_scatter'))
    assert.equal(6, count(g, 'all_gather'))
    assert.equal(0, count(g, 'all_reduce_to') + count(g, 'all_reduce'))
    -- the optimizer state is this rank's part
    local opt = g._optimizers[1].opt
    local st = opt.state[opt.param_groups[1].params[1]]   -- net.0.weight [10, 6]
    local rows = math.floor(10 / n) + (r < 10 % n and 1 or 0)
    assert.same({rows, 6}, st.exp_avg:size():totable())
    -- with and without ZeRO: the same parameters
    flow.manual_seed(3)
    local a, b = mlp(), mlp()
    b:load_state_dict(a:state_dict())
    a:to_global(P, Bc)
    b:to_global(P, Bc)
    local N = 2 * n + 1
    local function sgd_wd(ps)
      return flow.optim.SGD(ps, {lr = 0.1, momentum = 0.9, weight_decay = 0.01})
    end
    local ga = TrainGraph(a, sgd_wd(a:parameters()), N, 2)
    local gb = TrainGraph(b, sgd_wd(b:parameters()), N)
    for step = 1, 3 do
      local X, OH = batch(step, N)
      local Xg = flow.tensor(X:totable(), {placement = P, sbp = S(1)})
      local OHg = flow.tensor(OH:totable(), {placement = P, sbp = S(1)})
      H.close(ga(Xg, OHg):item(), gb(Xg, OHg):item(), 1e-5, 'loss at step ' .. step)
    end
    local pa, pb = a:parameters(), b:parameters()
    for i = 1, #pa do H.close(pa[i]:to_local(), pb[i]:to_local(), 1e-5, 'parameter ' .. i) end
  end)

  it('stage 3: parameters split between steps, equal to eager training', function()
    local net, g = graph_equals_eager(function(m) m:to_global(P, Bc) end, S(1), P,
                                      {optim = adam, zero = 3, batch = 8 * n + 1})
    -- net.0.weight [10, 6] is now split on dim 1: this rank holds its rows
    local w = net[1].weight
    assert.equal(S(1), w.sbp[1])
    local rows = math.floor(10 / n) + (r < 10 % n and 1 or 0)
    assert.same({rows, 6}, w:to_local():size():totable())
    assert.is_true(count(g, 'all_gather') > 0)
    assert.equal(0, count(g, 'all_reduce_to') + count(g, 'all_reduce'))
    -- eager code sees the same logical parameters and can keep training them
    local opt = g._optimizers[1].opt
    local X, OH = batch(9, 8 * n + 1)
    local Xg = flow.tensor(X:totable(), {placement = P, sbp = S(1)})
    local OHg = flow.tensor(OH:totable(), {placement = P, sbp = S(1)})
    local l0 = loss_of(net(Xg), OHg, 8 * n + 1):item()
    H.close(g(Xg, OHg):item(), l0, 1e-5, 'graph loss on the split parameters')
    assert.equal(opt.param_groups[1].params[1], w:to_local())
    -- an eager step of the same optimizer, then the graph again: both see it
    opt:zero_grad()
    loss_of(net(Xg), OHg, 8 * n + 1):backward()
    opt:step()
    local l1 = loss_of(net(Xg), OHg, 8 * n + 1):item()
    H.close(g(Xg, OHg):item(), l1, 1e-5, 'graph after an eager step')
  end)

  it('2-D hybrid with ZeRO along the data-parallel axis equals eager training', function()
    local _, g = graph_equals_eager(hybrid, {S(1), Bc}, P2,
                                    {batch = 4 * n + 2, optim = adam, zero = 1})
    assert.is_true(count(g, 'reduce_scatter') > 0)
    local ir = g:ir(2)
    if n == 4 then   -- the column-parallel weight [10, 6]: state split on dim 2 along axis 1
      assert(ir:find('sbp=(S(2), S(1))', 1, true), ir)
    end
  end)

  it('takes less memory per rank than the graph without ZeRO (allocator peak)', function()
    local N = 4 * n
    flow.manual_seed(9)
    local X = flow.randn(N, 64)
    local OH = F.one_hot(flow.randint(1, 65, {N}), 64):to('float32')
    -- the peak of a step once compiled, above what was live before the
    -- model was made: parameters, optimizer state, the graph's arena
    local function measure(zero)
      flow.collect()
      local base = flow.memory_stats().current_bytes
      flow.manual_seed(5)
      local net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
      net:to_global(P, Bc)
      local g = TrainGraph(net, adam(net:parameters()), N, zero)
      local Xg = flow.tensor(X:totable(), {placement = P, sbp = S(1)})
      local OHg = flow.tensor(OH:totable(), {placement = P, sbp = S(1)})
      for _ = 1, 2 do g(Xg, OHg) end
      flow.collect()
      flow.reset_peak_memory_stats()
      local loss = g(Xg, OHg)
      local peak = flow.memory_stats().peak_bytes - base
      flow.collect()
      local live = flow.memory_stats().current_bytes - base   -- between steps
      local params = {}
      for i, p in ipairs(net:parameters()) do params[i] = p:full_local() end
      return peak, loss:item(), params, live
    end
    local plain, l1, p1, live1 = measure(nil)
    local zero, l2, p2, live2 = measure(1)
    local peak3, l3, p3, live3 = measure(3)
    H.close(l2, l1, 1e-5, 'loss')
    H.close(l3, l1, 1e-5, 'loss, stage 3')
    for i = 1, #p1 do
      H.close(p2[i], p1[i], 1e-5, 'parameter ' .. i)
      H.close(p3[i], p1[i], 1e-5, 'parameter ' .. i .. ', stage 3')
    end
    -- Adam keeps two tensors per parameter; with ZeRO 1/n of them per rank
    local pbytes = (64 * 256 + 256 + 256 * 64 + 64) * 4
    if r == 0 then
      io.stderr:write(('ZeRO, %d ranks: step peak %.0f KiB without, %.0f KiB with '
                       .. '(stage 3: %.0f; parameters %.0f KiB); between steps %.0f, %.0f, '
                       .. '%.0f KiB\n'):format(n, plain / 1024, zero / 1024, peak3 / 1024,
                                           pbytes / 1024, live1 / 1024, live2 / 1024,
                                           live3 / 1024))
    end
    assert.is_true(zero < plain - pbytes * (1 - 1 / n),
                   ('peak with ZeRO %d, without %d'):format(zero, plain))
    -- stage 3 also keeps 1/n of the parameters between steps
    assert.is_true(live3 < live2 - pbytes * (1 - 1 / n) / 2,
                   ('between steps: stage 3 %d, stage 1 %d'):format(live3, live2))
  end)
end)

describe('nn.Graph with global tensors: limits', function()
  it('refuses to save and ZeRO stage 4 (accumulation: spec/dist/graph_acc_mpi.lua)', function()
    local _, g = graph_equals_eager(function(m) m:to_global(P, Bc) end, S(1), P, {steps = 1})
    local path = os.tmpname()
    H.raises(function() g:save(path) end, 'nn.Graph', 'save', 'global tensors')
    os.remove(path)
    local net = mlp():to_global(P, Bc)
    local g3 = TrainGraph(net, sgd(net:parameters()), 4)
    H.raises(function() g3.config:enable_zero(true, {stage = 4}) end, 'enable_zero', 'stage must be')
  end)
end)
