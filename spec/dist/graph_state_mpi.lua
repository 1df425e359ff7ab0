-- nn.Graph state dicts with global tensors under mpirun (-np 2 and -np 4):
-- graph:state_dict() saved with flow.distributed.save and loaded into a
-- new graph (flow.distributed.load + graph:load_state_dict) continues
-- training exactly as the graph that was never stopped (Adam: moments and
-- step counts), also with ZeRO and onto another layout.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local nn = flow.nn
local D = require 'spec.dist.helpers'
local P = D.world_or_pending('nn.Graph state dicts with global tensors')
if not P then return end
local r = flow.env.get_rank()
local S, Bc = flow.sbp.split, flow.sbp.broadcast

local Step = nn.Graph:subclass('StateStep')
function Step:__init(net, zero)
  nn.Graph.__init(self)
  self.net = net
  self:add_optimizer(flow.optim.Adam(net:parameters(), {lr = 0.05}))
  if zero then self.config:enable_zero(true, {stage = zero}) end
end
function Step:build(x, onehot)
  local loss = D.loss_of(self.net(x), onehot, 9)
  loss:backward()
  return loss
end

local function batch(step)
  flow.manual_seed(300 + step)
  local X = flow.randn(9, 6)
  local OH = flow.nn.functional.one_hot(flow.randint(1, 5, {9}), 4):to('float32')
  return flow.tensor(X:totable(), {placement = P, sbp = S(1)}),
         flow.tensor(OH:totable(), {placement = P, sbp = S(1)})
end

local function net_of(seed, layout)
  flow.manual_seed(seed)
  local net = D.mlp()
  net:to_global(P, layout or Bc)
  return net
end

-- a directory every rank agrees on
local function shared_dir()
  local t = flow.tensor({math.random(1, 2 ^ 30)}, {dtype = 'int64'})
  flow.comm.broadcast(t, 0)
  return ('/tmp/of_graph_state_%d'):format(t:item())
end

local function round_trip(zero, layout2)
  local a = Step(net_of(1), zero)
  local b = Step(net_of(1), zero)
  local want = {}
  for step = 1, 4 do want[step] = a(batch(step)):item() end
  for step = 1, 2 do b(batch(step)) end
  local dir = shared_dir()
  flow.distributed.save(b:state_dict(), dir, {gather = false})
  local c = Step(net_of(2, layout2), zero)   -- another init (and maybe layout)
  local sd = c:state_dict()
  assert.is_true(sd['net.0.weight'].is_global)
  assert.is_true(sd['optimizer1.net.0.weight.exp_avg'].is_global)
  flow.distributed.load(dir, sd)
  c:load_state_dict(sd)
  for step = 3, 4 do
    H.close(c(batch(step)):item(), want[step], 1e-6, 'loss at step ' .. step .. ' after loading')
  end
  flow.env.barrier()
  if r == 0 then os.execute('rm -rf ' .. dir) end
end

describe('nn.Graph state dicts with global tensors', function()
  it('round trip through flow.distributed.save/load continues training exactly (Adam)', function()
    round_trip(nil)
  end)

  it('with ZeRO stage 1 (the optimizer state split over the ranks)', function()
    round_trip(1)
  end)

  it('into a graph whose parameters use another layout (column-split first layer)', function()
    round_trip(nil, function(name) return name:match('^0%.') and S(1) or Bc end)
  end)

  it('load_state_dict names unknown and missing entries; save explains the way', function()
    local g = Step(net_of(1))
    assert.has_error(function() g:load_state_dict({nope = flow.zeros(1)}) end)
    local ok, err = pcall(g.load_state_dict, g, {['net.0.weight'] = flow.zeros(10, 6)})
    assert.is_false(ok)
    assert.truthy(tostring(err):find('missing entry', 1, true))
    g(batch(1))
    ok, err = pcall(g.save, g, '/tmp/never_written_graph.safetensors')
    assert.is_false(ok)
    assert.truthy(tostring(err):find('graph:state_dict()', 1, true))
  end)
end)
