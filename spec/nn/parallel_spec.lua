-- flow.nn.parallel in a world of one process (no mpirun): DDP leaves the
-- gradients as plain training makes them, module:to_global on a one-rank
-- placement trains like the local module. Multi-process behaviour is in
-- spec/dist/ddp_mpi.lua and spec/dist/parallel_mpi.lua.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local nn, F = flow.nn, flow.nn.functional

local function pair()
  flow.manual_seed(2)
  local a = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
  local b = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
  b:load_state_dict(a:state_dict())
  return a, b
end

describe('flow.nn.parallel in one process', function()
  it('DistributedDataParallel is transparent', function()
    local net, ref = pair()
    local ddp = flow.nn.parallel.DistributedDataParallel(net, {bucket_cap_mb = 1e-4})
    local x, y = flow.randn(5, 4), flow.randint(1, 4, {5})
    F.cross_entropy(ddp(x), y):backward()
    F.cross_entropy(ref(x), y):backward()
    local a, b = net:parameters(), ref:parameters()
    for i = 1, #a do H.close(a[i].grad, b[i].grad, 1e-6, 'grad ' .. i) end
    assert.is_true(#ddp:bucket_layout() > 1)
    local sd = ddp:state_dict()
    assert.is_not_nil(sd['module.0.weight'])
    assert.equal(7, ddp:no_sync(function(v) return v end, 7))
  end)

  it('module:to_global on a one-rank placement trains like the local module', function()
    local net, ref = pair()
    local P = flow.placement('cpu', {0})
    net:to_global(P, flow.sbp.split(1))
    assert.is_true(net[1].weight.is_global)
    local opt = flow.optim.SGD(net:parameters(), {lr = 0.1})
    local ropt = flow.optim.SGD(ref:parameters(), {lr = 0.1})
    for _ = 1, 2 do
      local x = flow.randn(3, 4)
      opt:zero_grad()
      net(x:to_global(P, flow.sbp.broadcast)):sum():backward()
      opt:step()
      ropt:zero_grad()
      ref(x):sum():backward()
      ropt:step()
    end
    local a, b = net:parameters(), ref:parameters()
    for i = 1, #a do H.close(a[i]:full_local(), b[i], 1e-6, 'param ' .. i) end
  end)

  it('rejects bad arguments', function()
    H.raises(function() flow.nn.parallel.linear_sbp('diagonal') end, 'linear_sbp', 'column')
    H.raises(function() flow.nn.parallel.to_global({}, flow.placement('cpu', {0})) end,
             'to_global', 'nn.Module')
    local net = nn.Linear(2, 2)
    net:to_global(flow.placement('cpu', {0}), flow.sbp.broadcast)
    H.raises(function() flow.nn.parallel.DistributedDataParallel(net) end, 'global tensor')
  end)
end)
