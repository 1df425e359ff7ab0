-- End-to-end: small models trained for 200 steps reach a target loss.
local flow = require 'oneflow'
local nn, F = flow.nn, flow.nn.functional

-- plain SGD by hand, under no_grad
local function sgd_step(params, lr)
  flow.no_grad(function()
    for _, p in ipairs(params) do
      local g = p.grad
      if g then p:sub_(g * lr) end
    end
  end)
end

describe('training', function()
  it('a linear regression fits its target with SGD by hand', function()
    flow.manual_seed(0)
    local x = flow.randn(64, 3)
    local y = x:matmul(flow.tensor({{1}, {-2}, {3}})) + 0.5
    local lin = nn.Linear(3, 1)
    local params = lin:parameters()
    local first, loss
    for step = 1, 200 do
      lin:zero_grad()
      loss = F.mse_loss(lin(x), y)
      loss:backward()
      sgd_step(params, 0.1)
      if step == 1 then first = loss:item() end
    end
    assert.is_true(loss:item() < 1e-4 * first, ('loss %g (first %g)'):format(loss:item(), first))
    assert.is_true(math.abs(lin.bias:item() - 0.5) < 1e-2)
  end)

  it('a 2-layer MLP learns XOR', function()
    flow.manual_seed(1)
    local x = flow.tensor({{0, 0}, {0, 1}, {1, 0}, {1, 1}})
    local y = flow.tensor({{0}, {1}, {1}, {0}})
    local net = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
    local opt = flow.optim and flow.optim.SGD(net:parameters(), {lr = 0.5, momentum = 0.9})
    local loss
    for _ = 1, 200 do
      loss = F.binary_cross_entropy_with_logits(net(x), y)
      if opt then opt:zero_grad() else net:zero_grad() end
      loss:backward()
      if opt then opt:step() else sgd_step(net:parameters(), 0.5) end
    end
    assert.is_true(loss:item() < 0.05, 'loss ' .. loss:item())
    local pred = net(x):gt(0):totable()
    assert.same({{false}, {true}, {true}, {false}}, pred)
  end)

  it('a small classifier with dropout, batch norm and cross entropy', function()
    flow.manual_seed(2)
    local n = 120
    local labels = flow.randint(1, 4, {n})
    local centers = flow.tensor({{2, 0}, {-2, 0}, {0, 2}})
    local x = centers:index_select(1, labels) + flow.randn(n, 2) * 0.5
    local net = nn.Sequential(nn.Linear(2, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 3))
    local loss_fn = nn.CrossEntropyLoss({label_smoothing = 0.05})
    local params = net:parameters()
    for _ = 1, 200 do
      net:zero_grad()
      local loss = loss_fn(net(x), labels)
      loss:backward()
      sgd_step(params, 0.1)
    end
    net:eval()
    local _, pred = net(x):max(2)
    local acc = pred:eq(labels):float():mean():item()
    assert.is_true(acc > 0.95, 'accuracy ' .. acc)
    assert.equals(200, net[2].num_batches_tracked:item())
  end)
end)
