-- Gradient accumulation with global graph arguments under mpirun (-np 2
-- and -np 4): micro-batches of a global batch (split or broadcast, 1-D or
-- a 2-D grid) train like one process on the whole batch.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local D = require 'spec.dist.helpers'
local P = D.world_or_pending('nn.Graph gradient accumulation with global arguments')
if not P then return end
local n = flow.env.get_world_size()
local nn, F = flow.nn, flow.nn.functional
local P2 = flow.placement('cpu', n == 4 and {{0, 1}, {2, 3}} or {{0, 1}})
local S, Bc = flow.sbp.split, flow.sbp.broadcast
local N = 12

local Step = nn.Graph:subclass('AccStep')
function Step:__init(net, acc)
  nn.Graph.__init(self)
  self.net = net
  self:add_optimizer(flow.optim.SGD(net:parameters(), {lr = 0.2, momentum = 0.9}))
  self.config:set_gradient_accumulation_steps(acc)
end
function Step:build(x, onehot)
  local loss = D.loss_of(self.net(x), onehot, x.shape[1])
  loss:backward()
  return loss
end

local function batch(step)
  flow.manual_seed(500 + step)
  return flow.randn(N, 6), F.one_hot(flow.randint(1, 5, {N}), 4):to('float32')
end

-- trains the global net in a graph with `acc` micro-batches and a copy in
-- one process on the whole batch
local function check(Pl, layout, x_sbp, acc)
  flow.manual_seed(11)
  local net, ref = D.mlp(), D.mlp()
  ref:load_state_dict(net:state_dict())
  net:to_global(Pl, layout)
  local g = Step(net, acc)
  local ropt = flow.optim.SGD(ref:parameters(), {lr = 0.2, momentum = 0.9})
  for step = 1, 3 do
    local X, OH = batch(step)
    local l = g(flow.tensor(X:totable(), {placement = Pl, sbp = x_sbp}),
                flow.tensor(OH:totable(), {placement = Pl, sbp = x_sbp}))
    assert.is_true(l.is_global)
    ropt:zero_grad()
    local rl = D.loss_of(ref(X), OH, N)
    rl:backward()
    ropt:step()
    H.close(l:item(), rl:item(), 1e-5, ('loss at step %d (%d micro-batches)'):format(step, acc))
  end
  local a, b = net:parameters(), ref:parameters()
  for i = 1, #a do H.close(a[i]:full_local(), b[i], 1e-5, 'parameter ' .. i) end
end

describe('nn.Graph gradient accumulation with global arguments', function()
  it('data parallel (batch split) equals one process, 2 and 3 micro-batches', function()
    check(P, Bc, S(1), 2)
    check(P, Bc, S(1), 3)
  end)

  it('broadcast arguments with column-split parameters', function()
    check(P, function(name) return name:match('^0%.') and S(1) or Bc end, Bc, 3)
  end)

  it('2-D grid: batch split along one axis, hidden layer split along the other', function()
    check(P2, function(name)
      if name:match('^0%.') then return {Bc, S(1)} end
      if name == '2.weight' then return {Bc, S(2)} end
      return {Bc, Bc}
    end, {S(1), Bc}, 2)
  end)
end)
