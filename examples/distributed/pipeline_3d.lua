-- 3-D parallelism in nn.Graph: data x tensor x pipeline. Two pipeline
-- stages, each on its own grid of processes: along the grid's first axis
-- the batch is split (data parallel), along the second each stage's MLP
-- block is split (tensor parallel: the first Linear by output features,
-- the second by input features). The stages run the 1F1B schedule on
-- micro-batches; the losses are compared with one process training the
-- same model on the whole batch.
--
--   mpirun --allow-run-as-root --oversubscribe -np 8 luajit examples/distributed/pipeline_3d.lua
--       [--steps 3] [--micro-batches 4] [--batch-size 16]
--
-- -np 8: stages on {{0,1},{2,3}} and {{4,5},{6,7}} (2 x 2 x 2); -np 4:
-- stages on {{0,1}} and {{2,3}} (tensor x pipeline).
-- Runs from any directory: this checkout's lua/ comes first.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/../../lua/?.lua;%s/../../lua/?/init.lua;%s/../../?.lua;'):format(here, here, here) .. package.path
local argparse = require 'argparse'
local flow = require 'oneflow'

local nn, F = flow.nn, flow.nn.functional

local p = argparse('pipeline_3d.lua', 'Data x tensor x pipeline parallel MLP in nn.Graph (run it '
  .. 'on 8 or 4 processes), compared with one process.')
p:epilog('Run under mpirun, e.g. mpirun --allow-run-as-root --oversubscribe -np 8 luajit '
  .. 'examples/distributed/pipeline_3d.lua')
p:option('--steps', 'Optimizer steps.', '3', tonumber)
p:option('--micro-batches', 'Micro-batches per step.', '4', tonumber)
p:option('--batch-size', 'Samples per step.', '16', tonumber)
p:option('--width', 'Hidden width (even).', '8', tonumber)
local opts = p:parse(arg or {})
flow.set_num_threads(1)

local rank, world = flow.env.get_rank(), flow.env.get_world_size()
local function say(fmt, ...) if rank == 0 then print(fmt:format(...)) end end
if world ~= 8 and world ~= 4 then
  error(('pipeline_3d.lua: run it on 8 or 4 processes, not %d'):format(world), 0)
end
local S, Bc = flow.sbp.split, flow.sbp.broadcast
local grids = world == 8 and {{{0, 1}, {2, 3}}, {{4, 5}, {6, 7}}} or {{{0, 1}}, {{2, 3}}}
local P = {flow.placement('cpu', grids[1]), flow.placement('cpu', grids[2])}
local DATA = {S(1), Bc}

local D, W = 6, opts.width
local function block(out)   -- Linear (column split), ReLU, Linear (row split)
  return nn.Sequential(nn.Linear(D, W), nn.ReLU(), nn.Linear(W, out))
end
local function model() return nn.Sequential(block(D), block(4)) end

flow.manual_seed(0)
local net, ref = model(), model()
ref:load_state_dict(net:state_dict())
for i = 1, 2 do
  net[i]:to_global(P[i], function(name)
    if name:match('^0%.') then return {Bc, S(1)} end   -- weight rows and bias: output features
    if name == '2.weight' then return {Bc, S(2)} end   -- weight columns: input features
    return {Bc, Bc}
  end)
end

local Step = nn.Graph:subclass('Pipeline3D')
function Step:__init()
  nn.Graph.__init(self)
  self.net = net
  net[1].config:set_stage(1, P[1])
  net[2].config:set_stage(2, P[2])
  self:add_optimizer(flow.optim.SGD(net:parameters(), {lr = 0.1, momentum = 0.9}))
  self.config:set_gradient_accumulation_steps(opts.micro_batches)
end
function Step:build(x, onehot)
  local loss = -(F.log_softmax(self.net(x), 2) * onehot):sum() / x.shape[1]
  loss:backward()
  return loss
end

local step = Step()
local ropt = flow.optim.SGD(ref:parameters(), {lr = 0.1, momentum = 0.9})
say('%d processes: 2 pipeline stages on %s and %s, %d micro-batches', world, tostring(P[1]),
    tostring(P[2]), opts.micro_batches)
local worst = 0
for s = 1, opts.steps do
  flow.manual_seed(100 + s)   -- the same batch on every process
  local X = flow.randn(opts.batch_size, D)
  local OH = F.one_hot(flow.randint(1, 5, {opts.batch_size}), 4):to('float32')
  local x = flow.tensor(X:totable(), {placement = P[1], sbp = DATA})     -- on stage 1
  local oh = flow.tensor(OH:totable(), {placement = P[2], sbp = DATA})   -- on stage 2
  local loss = step(x, oh):item()
  ropt:zero_grad()
  local rl = -(F.log_softmax(ref(X), 2) * OH):sum() / opts.batch_size
  rl:backward()
  ropt:step()
  worst = math.max(worst, math.abs(loss - rl:item()))
  say('step %d: 3-D parallel loss %.7f, one process %.7f', s, loss, rl:item())
end
-- every rank's parameters of its stage against the reference
local pworst = 0
for i = 1, 2 do
  local mine = net[i]:parameters()
  local theirs = ref[i]:parameters()
  for j = 1, #mine do
    local full = mine[j]:full_local()   -- collective over the stage's ranks
    if P[i]:has_me() then pworst = math.max(pworst, (full - theirs[j]):abs():max():item()) end
  end
end
local t = flow.tensor({worst, pworst}, {dtype = 'float64'})
flow.comm.all_reduce(t, {op = 'max'})
say('max difference from one process: loss %.3g, parameters %.3g', t[1]:item(), t[2]:item())
