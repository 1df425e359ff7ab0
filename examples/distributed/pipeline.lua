-- Pipeline parallelism in nn.Graph: an MLP cut into one stage per process
-- (2 or 4 stages, chosen by -np), trained on micro-batches in the 1F1B
-- order; prints the losses, the same model trained in one process for
-- comparison, and the measured bubble against the 1F1B formula.
--
--   mpirun --allow-run-as-root --oversubscribe -np 4 luajit examples/distributed/pipeline.lua
--       [--steps 5] [--micro-batches 8] [--batch-size 64] [--width 256] [--lr 0.01]
--
-- Runs from any directory: this checkout's lua/ comes first.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/../../lua/?.lua;%s/../../lua/?/init.lua;%s/../../?.lua;'):format(here, here, here) .. package.path
local argparse = require 'argparse'
local flow = require 'oneflow'

local nn, F = flow.nn, flow.nn.functional

local p = argparse('pipeline.lua', 'An MLP trained with pipeline parallelism in nn.Graph: one stage '
  .. 'per process (run it on 2 or 4 processes), micro-batches in the 1F1B order.')
p:epilog('Run under mpirun, e.g. mpirun --allow-run-as-root --oversubscribe -np 4 luajit '
  .. 'examples/distributed/pipeline.lua')
p:option('--steps', 'Optimizer steps.', '5', tonumber)
p:option('--micro-batches', 'Micro-batches per step (gradient accumulation steps).', '8', tonumber)
p:option('--batch-size', 'Samples per step (split into the micro-batches).', '64', tonumber)
p:option('--width', 'Hidden width of each stage.', '256', tonumber)
p:option('--lr', 'SGD learning rate.', '0.01', tonumber)
p:option('--threads', 'CPU threads per process.', '1', tonumber)
local opts = p:parse(arg or {})
flow.set_num_threads(opts.threads)

local rank, world = flow.env.get_rank(), flow.env.get_world_size()
local function say(fmt, ...) if rank == 0 then print(fmt:format(...)) end end
if world ~= 2 and world ~= 4 then
  error(('pipeline.lua: run it on 2 or 4 processes (one stage each), not %d'):format(world), 0)
end

-- one stage per process, balanced: Linear(width, width) + ReLU each, the last
-- one ending in a small 10-class head
local function model()
  local stages = {}
  for i = 1, world do
    stages[i] = i == world and nn.Sequential(nn.Linear(opts.width, opts.width), nn.ReLU(), nn.Linear(opts.width, 10))
                            or nn.Sequential(nn.Linear(opts.width, opts.width), nn.ReLU())
  end
  return nn.Sequential(unpack(stages))
end

local Step = nn.Graph:subclass('PipelineStep')
function Step:__init(net)
  nn.Graph.__init(self)
  self.net = net
  for i = 1, world do net[i].config:set_stage(i, flow.placement('cpu', {i - 1})) end
  self:add_optimizer(flow.optim.SGD(net:parameters(), {lr = opts.lr, momentum = 0.9}))
  self.config:set_gradient_accumulation_steps(opts.micro_batches)
end
function Step:build(x, y)
  local loss = F.cross_entropy(self.net(x), y)
  loss:backward()
  return loss
end

flow.manual_seed(0)
local net, ref = model(), model()
ref:load_state_dict(net:state_dict())
local step = Step(net)
local ropt = flow.optim.SGD(ref:parameters(), {lr = opts.lr, momentum = 0.9})
say('%d stages, %d micro-batches of %d', world, opts.micro_batches, opts.batch_size / opts.micro_batches)
-- The pipeline's steps run back to back and the one-process reference runs
-- after them: computed between steps on rank 0 it would keep the other
-- stages waiting at the start of the next step, and graph:pipeline_stats()
-- would count that wait as bubble.
local batches, losses = {}, {}
for s = 1, opts.steps do
  flow.manual_seed(100 + s)   -- the same batch on every process
  batches[s] = {flow.randn(opts.batch_size, opts.width), flow.randint(1, 11, {opts.batch_size})}
  losses[s] = step(batches[s][1], batches[s][2]):item()
end
local worst = 0
for s = 1, opts.steps do
  local rl
  if rank == 0 then   -- the same model in one process, on the whole batch
    local x, y = batches[s][1], batches[s][2]
    ropt:zero_grad()
    local l = F.cross_entropy(ref(x), y)
    l:backward()
    ropt:step()
    rl = l:item()
    worst = math.max(worst, math.abs(losses[s] - rl))
  end
  say('step %d: pipeline loss %.6f, one process %.6f', s, losses[s], rl or 0)
end
say('largest difference from one process: %.2g', worst)
local st = step:pipeline_stats()   -- every rank takes part
if st then
  say('bubble: measured %.3f (mean over stages), 1F1B formula (p-1)/(m+p-1) = %.3f', st.measured, st.formula)
  for _, e in ipairs(st.stages) do
    say('  stage %d (rank %d): step %.2f ms, waiting %.2f ms (%.3f)', e.stage, e.rank, e.total * 1e3,
        e.idle * 1e3, e.fraction)
  end
end
