-- Training with global tensors under mpirun (-np 2 and -np 4): data
-- parallel, tensor model parallel (Linear column / row split) and 2-D hybrid
-- SBP, each N optimizer steps equal to single-process training of a plain
-- copy on the same global batch (every rank computes that reference itself).
-- Also DistributedSampler with the defaults from flow.env.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local F = flow.nn.functional
local r, n = flow.env.get_rank(), flow.env.get_world_size()
local all = {}
for i = 0, n - 1 do all[i + 1] = i end
local P = flow.placement('cpu', all)
local S, Bc = flow.sbp.split, flow.sbp.broadcast
local grid = n == 4 and {{0, 1}, {2, 3}} or {{0, 1}}
local P2 = flow.placement('cpu', grid)

local D = require 'spec.dist.helpers'
local mlp, loss_of = D.mlp, D.loss_of

-- trains `net` made global by `setup` and a plain copy for `steps` steps;
-- x_sbp is the sbp of the input batch (and of the one-hot targets)
local function train_equal(setup, x_sbp, placement, opts)
  opts = opts or {}
  flow.manual_seed(opts.seed or 1)
  local net = mlp()
  local ref = mlp()
  ref:load_state_dict(net:state_dict())
  setup(net)
  local make = opts.optim or function(ps) return flow.optim.SGD(ps, {lr = 0.2, momentum = 0.9}) end
  local opt, ropt = make(net:parameters()), make(ref:parameters())
  local N = opts.batch or 3 * n + 1   -- uneven split on purpose
  for step = 1, opts.steps or 3 do
    flow.manual_seed(100 + step)
    local X = flow.randn(N, 6)
    local OH = F.one_hot(flow.randint(1, 5, {N}), 4):to('float32')
    local Xg = flow.tensor(X:totable(), {placement = placement, sbp = x_sbp})
    local OHg = flow.tensor(OH:totable(), {placement = placement, sbp = x_sbp})
    opt:zero_grad()
    local l = loss_of(net(Xg), OHg, N)
    l:backward()
    opt:step()
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
  return net
end

describe('training with global tensors', function()
  it('data parallel: batch split, parameters broadcast', function()
    local net = train_equal(function(m) m:to_global(P, Bc) end, S(1), P)
    assert.equal(Bc, net[1].weight.sbp[1])
    -- every rank holds the whole parameter
    assert.same({10, 6}, net[1].weight:to_local():size():totable())
  end)

  it('tensor model parallel: column then row split Linear', function()
    local col, row = flow.nn.parallel.linear_sbp('column'), flow.nn.parallel.linear_sbp('row')
    local net = train_equal(function(m)
      m:to_global(P, function(name, p)
        if name:match('^0%.') then return col(name, p) end   -- out features split
        if name:match('^2%.') then return row(name, p) end   -- in features split
        return Bc
      end)
    end, Bc, P)
    assert.equal(S(1), net[1].weight.sbp[1])
    assert.equal(S(2), net[3].weight.sbp[1])
    -- shards: 10 output features of layer 1 over n ranks (uneven for n = 4)
    local rows = math.floor(10 / n) + (r < 10 % n and 1 or 0)
    assert.same({rows, 6}, net[1].weight:to_local():size():totable())
  end)

  it('model parallel with Adam and a split batch at once (1-D, mixed)', function()
    train_equal(function(m)
      m:to_global(P, {['0.weight'] = S(1), ['0.bias'] = S(1)})
    end, S(1), P, {optim = function(ps) return flow.optim.Adam(ps, {lr = 0.05}) end})
  end)

  it('2-D hybrid: data parallel along grid axis 1, model parallel along axis 2', function()
    local net = train_equal(function(m)
      m:to_global(P2, function(name)
        if name:match('^0%.') then return {Bc, S(1)} end           -- column parallel
        if name == '2.weight' then return {Bc, S(2)} end           -- row parallel
        return {Bc, Bc}
      end)
    end, {S(1), Bc}, P2, {batch = 4 * n + 2})
    local sbp = net[1].weight.sbp
    assert.equal(Bc, sbp[1])
    assert.equal(S(1), sbp[2])
  end)

  it('rejects a placement that is not one and split dims out of range', function()
    H.raises(function() mlp():to_global('cpu', Bc) end, 'to_global', 'placement')
    H.raises(function() mlp():to_global(P, S(3)) end, 'to_global', 'parameter 0.weight',
             'split dim 3 out of range')
  end)
end)

describe('DistributedSampler under mpirun', function()
  it('takes rank and world size from flow.env; ranks cover the dataset once', function()
    local ds = flow.utils.data.TensorDataset(flow.arange(1, 4 * n + 2))   -- 4n+1 items
    local s = flow.utils.data.DistributedSampler(ds, {seed = 3})
    s:set_epoch(2)
    assert.equal(r, s.rank)
    assert.equal(n, s.num_replicas)
    local mine = {}
    for i in s:iter() do mine[#mine + 1] = i end
    assert.equal(5, #mine)
    local got = flow.comm.all_gather(flow.tensor(mine))
    local count = {}
    for _, t in ipairs(got) do
      for _, i in ipairs(t:totable()) do count[i] = (count[i] or 0) + 1 end
    end
    local padded = 0
    for i = 1, 4 * n + 1 do
      assert.is_true((count[i] or 0) >= 1, 'index ' .. i .. ' not given to any rank')
      padded = padded + count[i] - 1
    end
    assert.equal(5 * n - (4 * n + 1), padded)
  end)
end)
