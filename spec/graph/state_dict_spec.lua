-- nn.Graph:state_dict / load_state_dict in one process: the modules' and
-- optimizers' state (Adam moments and step counts) copied into another
-- graph continues training exactly as the first.
local flow = require 'oneflow'
local nn, F = flow.nn, flow.nn.functional

local Step = nn.Graph:subclass('LocalStateStep')
function Step:__init(net)
  nn.Graph.__init(self)
  self.net = net
  self:add_optimizer(flow.optim.Adam(net:parameters(), {lr = 0.05}))
end
function Step:build(x, y)
  local loss = F.cross_entropy(self.net(x), y)
  loss:backward()
  return loss
end

local function net_of(seed)
  flow.manual_seed(seed)
  return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
end
local function batch(step)
  flow.manual_seed(40 + step)
  return flow.randn(6, 4), flow.randint(1, 4, {6})
end

describe('nn.Graph:state_dict', function()
  it('names module and optimizer state and round-trips it into another graph', function()
    local a, b = Step(net_of(1)), Step(net_of(1))
    local want = {}
    for s = 1, 4 do want[s] = a(batch(s)):item() end
    for s = 1, 2 do b(batch(s)) end
    local sd = b:state_dict()
    assert.truthy(sd['net.0.weight'])
    assert.truthy(sd['optimizer1.net.2.bias.exp_avg_sq'])
    assert.equal(2, sd['optimizer1.net.0.weight.step']:item())
    local c = Step(net_of(2))
    c:load_state_dict(sd)
    for s = 3, 4 do
      local got = c(batch(s)):item()
      assert.is_true(math.abs(got - want[s]) < 1e-6, ('step %d: %.8f vs %.8f'):format(s, got, want[s]))
    end
    assert.has_error(function() c:load_state_dict({['net.9.weight'] = flow.zeros(1)}) end,
                     'nn.Graph: load_state_dict: unknown entry "net.9.weight"')
  end)
end)
