-- DistributedDataParallel and nonblocking all-reduce under mpirun (-np 2
-- and -np 4). Every rank also trains a plain copy of the model on the whole
-- global batch (the data come from a fixed seed), and DDP must match it.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local nn, F = flow.nn, flow.nn.functional
local DDP = flow.nn.parallel.DistributedDataParallel
local r, n = flow.env.get_rank(), flow.env.get_world_size()

local function mlp()
  return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(),
                       nn.Linear(16, 4))
end

-- a copy of `net` (same values) as a plain single-process model
local function copy_of(make, net)
  local ref = make()
  ref:load_state_dict(net:state_dict())
  return ref
end

local function batch(seed, per_rank)
  flow.manual_seed(seed)
  local X = flow.randn(per_rank * n, 6)
  local Y = flow.randint(1, 5, {per_rank * n})
  return X, Y, X:narrow(1, r * per_rank + 1, per_rank), Y:narrow(1, r * per_rank + 1, per_rank)
end

local function check_params(net, ref, msg)
  local a, b = net:parameters(), ref:parameters()
  for i = 1, #a do H.close(a[i], b[i], 1e-5, msg .. ' param ' .. i) end
end

describe('flow.comm.all_reduce async', function()
  it('returns a Work; several in flight complete in order', function()
    local ts, ws = {}, {}
    for i = 1, 3 do
      ts[i] = flow.full({1000 * i}, r + i)
      ws[i] = flow.comm.all_reduce(ts[i], {async_op = true})
    end
    local want = 0
    for q = 0, n - 1 do want = want + q end
    for i = 3, 1, -1 do
      local t = ws[i]:wait()
      assert.equal(ts[i], t)
      H.close(t:narrow(1, 1000 * i, 1), {want + n * i}, 0, 'async sum ' .. i)
      assert.is_true(ws[i]:is_completed())
    end
    local t = flow.tensor({r, -r}, {dtype = 'float64'})
    local w = flow.comm.all_reduce(t, {async_op = true, op = 'max'})
    while not w:is_completed() do end
    H.close(t, {n - 1, 0}, 0, 'async max')
  end)
end)

describe('DistributedDataParallel', function()
  it('broadcasts rank 0 parameters at wrap time', function()
    flow.manual_seed(100 + r)
    local net = mlp()
    DDP(net)
    flow.manual_seed(100)
    local ref = mlp()
    check_params(net, ref, 'after wrap')
  end)

  it('N steps equal single-process training on the global batch (several buckets)', function()
    flow.manual_seed(3)
    local net = mlp()
    local ref = copy_of(mlp, net)
    local ddp = DDP(net, {bucket_cap_mb = 400 / 2 ^ 20})   -- ~100 floats: 4+ buckets
    local layout = ddp:bucket_layout()
    assert.is_true(#layout >= 4, 'buckets: ' .. #layout)
    -- reverse order: last layer first
    assert.same({'4.bias', '4.weight'}, {layout[1][1], layout[1][2]})
    local opt = flow.optim.SGD(net:parameters(), {lr = 0.1, momentum = 0.9})
    local ropt = flow.optim.SGD(ref:parameters(), {lr = 0.1, momentum = 0.9})
    for step = 1, 4 do
      local X, Y, x, y = batch(10 + step, 3)
      opt:zero_grad()
      local loss = F.cross_entropy(ddp(x), y)
      loss:backward()
      ropt:zero_grad()
      local rloss = F.cross_entropy(ref(X), Y)
      rloss:backward()
      local a, b = net:parameters(), ref:parameters()
      for i = 1, #a do H.close(a[i].grad, b[i].grad, 1e-5, 'grad ' .. i .. ' step ' .. step) end
      opt:step()
      ropt:step()
      check_params(net, ref, 'step ' .. step)
    end
    -- overlap: all but the last bucket started while backward was running
    assert.equal(#layout, ddp.last_reduction.buckets)
    assert.equal(#layout - 1, ddp.last_reduction.launched_during_backward)
  end)

  it('one bucket with the default cap; Adam steps match too', function()
    flow.manual_seed(4)
    local net = mlp()
    local ref = copy_of(mlp, net)
    local ddp = DDP(net)
    assert.equal(1, #ddp:bucket_layout())
    local opt = flow.optim.Adam(net:parameters(), {lr = 0.01})
    local ropt = flow.optim.Adam(ref:parameters(), {lr = 0.01})
    for step = 1, 3 do
      local X, Y, x, y = batch(20 + step, 2)
      opt:zero_grad()
      F.cross_entropy(ddp(x), y):backward()
      opt:step()
      ropt:zero_grad()
      F.cross_entropy(ref(X), Y):backward()
      ropt:step()
    end
    check_params(net, ref, 'adam')
  end)

  it('no_sync accumulates local grads; the next backward averages the sum', function()
    flow.manual_seed(5)
    local net = mlp()
    local ref = copy_of(mlp, net)
    local ddp = DDP(net, {bucket_cap_mb = 1 / 2 ^ 12})
    local Xs, Ys = {}, {}
    for k = 1, 3 do
      local X, Y, x, y = batch(30 + k, 2)
      Xs[k], Ys[k] = X, Y
      if k < 3 then
        ddp:no_sync(function() F.cross_entropy(ddp(x), y):backward() end)
        -- still local: rank-specific grads, not averaged
        assert.is_nil(ddp.last_reduction)
      else
        F.cross_entropy(ddp(x), y):backward()
      end
    end
    for k = 1, 3 do F.cross_entropy(ref(Xs[k]), Ys[k]):backward() end
    local a, b = net:parameters(), ref:parameters()
    for i = 1, #a do H.close(a[i].grad, b[i].grad, 1e-5, 'accumulated grad ' .. i) end
    assert.is_true(ddp.require_backward_grad_sync)
  end)

  it('find_unused_parameters: parameters used on some ranks only, or on none', function()
    local Net = nn.Module:subclass('Branchy')
    function Net:__init()
      nn.Module.__init(self)
      self.a = nn.Linear(6, 4)
      self.b = nn.Linear(6, 4)       -- used on even ranks only
      self.never = nn.Linear(6, 4)   -- used nowhere
    end
    function Net:forward(x, use_b)
      local y = self.a(x)
      if use_b then y = y + self.b(x) end
      return y
    end
    flow.manual_seed(6)
    local net = Net()
    local ref = Net()
    ref:load_state_dict(net:state_dict())
    local ddp = DDP(net, {find_unused_parameters = true, bucket_cap_mb = 1 / 2 ^ 14})
    local opt = flow.optim.SGD(net:parameters(), {lr = 0.5})
    local ropt = flow.optim.SGD(ref:parameters(), {lr = 0.5})
    for step = 1, 3 do
      local X, Y, x, y = batch(40 + step, 2)
      opt:zero_grad()
      F.cross_entropy(ddp(x, r % 2 == 0), y):backward()
      opt:step()
      -- reference: the average of each rank's loss
      ropt:zero_grad()
      for q = 0, n - 1 do
        local xq, yq = X:narrow(1, q * 2 + 1, 2), Y:narrow(1, q * 2 + 1, 2)
        local lq = F.cross_entropy(ref(xq, q % 2 == 0), yq) / n
        lq:backward()
      end
      ropt:step()
    end
    check_params(net, ref, 'find_unused')
    assert.is_nil(net.never.weight.grad)
    assert.is_not_nil(net.b.weight.grad)   -- averaged even where unused locally
  end)

  it('without find_unused_parameters an unused parameter is a clear error next time', function()
    local Net = nn.Module:subclass('Skip')
    function Net:__init()
      nn.Module.__init(self)
      self.a = nn.Linear(3, 2)
      self.skipped = nn.Linear(3, 2)
    end
    function Net:forward(x) return self.a(x) end
    local ddp = DDP(Net())
    local x = flow.randn(2, 3)
    ddp(x):sum():backward()
    H.raises(function() ddp(x) end, 'expected to have finished reduction',
             'skipped.weight', 'find_unused_parameters')
    -- the state is reset: forward works again (still without grads for it)
    ddp(x)
  end)

  it('rejects bad arguments', function()
    H.raises(function() DDP({}) end, 'DistributedDataParallel', 'nn.Module')
    H.raises(function() DDP(nn.Linear(2, 2), {bucket_cap_mb = 0}) end, 'bucket_cap_mb')
    H.raises(function() DDP(nn.Linear(2, 2), {bucket_size = 1}) end, "unknown option 'bucket_size'")
  end)
end)
