-- Pipeline parallelism in nn.Graph under mpirun (-np 2 and -np 4): stages
-- set with m.config:set_stage(i, placement), micro-batches from
-- set_gradient_accumulation_steps, the 1F1B schedule; the losses and the
-- parameters after a few optimizer steps equal single-process training of
-- the same model on the whole batch; the bubble is reported.
local flow = require 'oneflow'

local nn, F = flow.nn, flow.nn.functional
local D = require 'spec.dist.helpers'
local P = D.world_or_pending('nn.Graph pipeline parallelism')
if not P then return end
local r, n = flow.env.get_rank(), flow.env.get_world_size()

-- p stages of Linear + Tanh (the last: Linear to 3 classes)
local function model(p)
  local widths = {5, 8, 7, 6, 9}
  local stages = {}
  for i = 1, p do
    local out = i == p and 3 or widths[i + 1]
    stages[i] = i == p and nn.Linear(widths[i], out) or nn.Sequential(nn.Linear(widths[i], out), nn.Tanh())
  end
  return nn.Sequential(unpack(stages))
end

local Step = nn.Graph:subclass('PipeStep')
function Step:__init(net, opt, stage_ranks, acc)
  nn.Graph.__init(self)
  self.net = net
  for i, ranks in ipairs(stage_ranks) do
    net[i].config:set_stage(i, flow.placement('cpu', ranks))
  end
  self:add_optimizer(opt)
  self.config:set_gradient_accumulation_steps(acc)
end
function Step:build(x, y)
  local loss = F.cross_entropy(self.net(x), y)
  loss:backward()
  return loss
end

local function batch(step, N)
  flow.manual_seed(50 + step)
  return flow.randn(N, 5), flow.randint(1, 4, {N})
end

-- Trains the pipeline and, in this process alone, the same model eagerly on
-- the whole batch; every loss and every parameter of this rank's stage agree.
local function compare(stage_ranks, acc, make_opt, steps, N)
  local p = #stage_ranks
  flow.manual_seed(7)
  local net, ref = model(p), model(p)
  ref:load_state_dict(net:state_dict())
  local g = Step(net, make_opt(net:parameters()), stage_ranks, acc)
  local ropt = make_opt(ref:parameters())
  local my
  for i, ranks in ipairs(stage_ranks) do
    for _, q in ipairs(ranks) do if q == r then my = i end end
  end
  for step = 1, steps do
    local x, y = batch(step, N)
    local loss = g(x, y)
    ropt:zero_grad()
    local rl = F.cross_entropy(ref(x), y)
    rl:backward()
    ropt:step()
    assert.is_true(math.abs(loss:item() - rl:item()) < 1e-5,
                   ('step %d: pipeline loss %.8f, one process %.8f'):format(step, loss:item(), rl:item()))
  end
  if my then
    local a, b = net[my]:state_dict(), ref[my]:state_dict()
    for k, v in pairs(a) do
      local d = (v - b[k]):abs():max():item()
      assert.is_true(d < 1e-5, ('stage %d %s differs by %g'):format(my, k, d))
    end
  end
  return g
end

local function sgd(ps) return flow.optim.SGD(ps, {lr = 0.3, momentum = 0.9}) end
local function adam(ps) return flow.optim.Adam(ps, {lr = 0.05}) end

local function one_rank_stages()
  local s = {}
  for i = 0, n - 1 do s[i + 1] = {i} end
  return s
end

describe('nn.Graph pipeline parallelism (1F1B)', function()
  it('equals one process with SGD, 4 micro-batches, one stage per rank', function()
    compare(one_rank_stages(), 4, sgd, 3, 8)
  end)

  it('equals one process with Adam for 1, 2 and 6 micro-batches', function()
    for _, acc in ipairs({1, 2, 6}) do compare(one_rank_stages(), acc, adam, 3, 12) end
  end)

  if n == 4 then
    it('runs stages of two ranks each (pairs exchange by position)', function()
      compare({{0, 1}, {2, 3}}, 4, sgd, 3, 8)
    end)

    it('leaves a rank outside every stage idle (it still gets the loss)', function()
      compare({{0}, {1}, {2}}, 3, adam, 2, 6)
    end)
  end

  it('reports the bubble of a compiled step against the 1F1B formula', function()
    local g = compare(one_rank_stages(), 4, sgd, 3, 8)
    local st = g:pipeline_stats()
    assert.is_not_nil(st)
    assert.are.equal(n, st.p)
    assert.are.equal(4, st.m)
    assert.is_true(math.abs(st.formula - (n - 1) / (4 + n - 1)) < 1e-12)
    assert.are.equal(n, #st.stages)
    for _, e in ipairs(st.stages) do
      assert.is_true(e.total > 0 and e.idle >= 0 and e.idle <= e.total)
    end
    local path = os.tmpname()
    local f = io.open(path, 'w')
    g:debug(1, f)
    g:debug(0)
    f:close()
    local text = io.open(path):read('*a')
    os.remove(path)
    assert.truthy(text:find('1F1B formula', 1, true))
    assert.truthy(text:find('stage ' .. n .. ' (rank ' .. (n - 1) .. ')', 1, true))
  end)

  it('refuses stages not numbered 1..p and graphs without an optimizer', function()
    flow.manual_seed(7)
    local net = model(2)
    local Bad = nn.Graph:subclass('BadPipe')
    function Bad:__init(m) nn.Graph.__init(self); self.net = m end
    function Bad:build(x) return self.net(x) end
    net[1].config:set_stage(1, flow.placement('cpu', {0}))
    net[2].config:set_stage(3, flow.placement('cpu', {1}))
    local ok, err = pcall(function() return Bad(net)(flow.randn(2, 5)) end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find('stages must be numbered 1..2', 1, true))
    net[2].config:set_stage(2, flow.placement('cpu', {1}))
    ok, err = pcall(function() return Bad(net)(flow.randn(2, 5)) end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find('need a training graph', 1, true))
    assert.has_error(function() net[1].config:set_stage(0, flow.placement('cpu', {0})) end,
                     'set_stage: the stage must be a positive integer (1-based), got 0')
  end)
end)
