-- Auto-parallel in nn.Graph: config:enable_auto_parallel(true) picks the
-- SBP of every module call from a cost model. Two models, each trained
-- with the auto plan and with hand-written plans in one run, side by side:
--   wide: an MLP of wide Linear layers on a small batch -- hand plans
--         'data' (every weight broadcast, batch split) and 'megatron'
--         (column- then row-parallel pairs);
--   conv: a small conv net with BatchNorm on a small batch -- hand plans
--         'data' and 'channels' (convolutions split over output channels).
-- Prints the auto plan, then per plan the median step time (wall and
-- process CPU time, compiled graph steps) and the auto plan's ratio to the
-- best hand plan.
--
--   mpirun --allow-run-as-root --oversubscribe -np 4 luajit examples/distributed/auto_parallel.lua
--       [--model wide|conv|both] [--steps 20] [--width 1024] [--batch-size 16] [--grid]
--
-- Runs from any directory: this checkout's lua/ comes first.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/../../lua/?.lua;%s/../../lua/?/init.lua;%s/../../?.lua;'):format(here, here, here) .. package.path
local argparse = require 'argparse'
local flow = require 'oneflow'

local nn, F = flow.nn, flow.nn.functional

local p = argparse('auto_parallel.lua', 'nn.Graph auto-parallel against hand-written plans: step '
  .. 'times of a wide MLP and a small conv net under each plan.')
p:epilog('Run under mpirun, e.g. mpirun --allow-run-as-root --oversubscribe -np 4 luajit '
  .. 'examples/distributed/auto_parallel.lua')
p:option('--model', 'wide, conv or both.', 'both')
p:option('--steps', 'Timed steps per plan (after 3 untimed).', '20', tonumber)
p:option('--width', 'Hidden width of the wide MLP.', '1024', tonumber)
p:option('--batch-size', 'Global batch.', '16', tonumber)
p:option('--threads', 'CPU threads per process.', '1', tonumber)
p:flag('--grid', 'Processes on a 2-D grid (rows of 2; needs an even count): hand plans '
  .. 'data (batch split over both axes), for the MLP hybrid (batch over rows, Megatron over '
  .. 'columns), for the conv net rows (batch over rows, replicas along columns).')
local opts = p:parse(arg or {})
flow.set_num_threads(opts.threads)

local rank, world = flow.env.get_rank(), flow.env.get_world_size()
local ranks = {}
for i = 0, world - 1 do ranks[i + 1] = i end
if opts.grid then
  if world % 2 ~= 0 then error('auto_parallel.lua: --grid needs an even number of processes', 0) end
  local rows = {}
  for r = 1, world / 2 do rows[r] = {2 * r - 2, 2 * r - 1} end
  ranks = rows
end
local P = flow.placement('cpu', ranks)
local S, Bc = flow.sbp.split, flow.sbp.broadcast
-- one sbp for the 1-D placement, {along rows, along columns} on the grid
local function nd(a, b) if opts.grid then return {a, b} end return a end
local function say(fmt, ...) if rank == 0 then io.write(fmt:format(...), '\n') io.flush() end end

local now = require('oneflow.utils.posix').now   -- a monotonic clock
local function clock(id)   -- 1: wall, 2: this process's CPU time
  if id == 1 then return now() end
  return os.clock()
end

local function wide()
  local W = opts.width
  return nn.Sequential(nn.Linear(64, W), nn.ReLU(), nn.Linear(W, W), nn.ReLU(), nn.Linear(W, W),
                       nn.ReLU(), nn.Linear(W, 10))
end
local function conv()
  return nn.Sequential(nn.Conv2d(3, 16, 3, {padding = 1}), nn.BatchNorm2d(16), nn.ReLU(),
                       nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, {padding = 1}), nn.BatchNorm2d(32),
                       nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
end

-- hand-written plans: parameter name -> sbp (nil: broadcast)
local plans = {
  wide = {
    data = function() return Bc end,
    megatron = function(name)   -- layers 0 and 4 column parallel, 2 and 6 row parallel
      local layer = tonumber(name:match('^(%d+)%.'))
      if layer == 0 or layer == 4 then return S(1) end
      if name:match('weight$') then return S(2) end
      return Bc
    end},
  conv = {
    data = function() return Bc end,
    channels = function(name)   -- convolutions over output channels, the rest broadcast
      if name:match('^[04]%.') then return S(1) end
      return Bc
    end}}
-- on the grid: data parallel over all ranks, and data over rows x the
-- 1-D model-parallel plan over columns
local one = plans
local grid_plans = {
  wide = {data = function() return {Bc, Bc} end,
          hybrid = function(name) return {Bc, one.wide.megatron(name)} end},
  -- (convolutions split over columns would leave BatchNorm's running
  -- statistics broadcast while its input is split on channels: refused)
  conv = {data = function() return {Bc, Bc} end,
          rows = function() return {Bc, Bc} end}}
local grid_input = {data = {S(1), S(1)}, hybrid = {S(1), Bc}, rows = {S(1), Bc}, auto = {S(1), Bc}}
if opts.grid then plans = grid_plans end
local order = opts.grid and {wide = {'data', 'hybrid'}, conv = {'data', 'rows'}}
              or {wide = {'data', 'megatron'}, conv = {'data', 'channels'}}

local Step = nn.Graph:subclass('Step')
function Step:__init(net, auto)
  nn.Graph.__init(self)
  self.net = net
  self:add_optimizer(flow.optim.SGD(net:parameters(), {lr = 0.01, momentum = 0.9}))
  if auto then self.config:enable_auto_parallel(true) end
end
function Step:build(x, y)
  local loss = F.cross_entropy(self.net(x), y)
  loss:backward()
  return loss
end

local function median(t)
  table.sort(t)
  return t[math.floor((#t + 1) / 2)]
end

-- A graph of the model under a plan ('auto' or a hand-written one) and
-- its global batch.
local function graph_of(make, plan, batch)
  flow.manual_seed(0)
  local net = make()
  if plan == 'auto' then net:to_global(P, nd(Bc, Bc)) else net:to_global(P, plans[opts.model_now][plan]) end
  local g = Step(net, plan == 'auto')
  local x, y = batch()
  -- every rank drew the same batch: broadcast, then split (a slice)
  local s = opts.grid and grid_input[plan] or S(1)
  x, y = x:to_global(P, nd(Bc, Bc)):to_global(P, s), y:to_global(P, nd(Bc, Bc)):to_global(P, s)
  return {g = g, x = x, y = y, walls = {}, cpus = {}}
end

-- The plans' steps interleaved (one step of each in turn, so that the
-- machine's load drifts alike for all): median seconds per step, wall and
-- CPU, the slowest rank's, and the last loss.
local function time_plans(list)
  for i = 1, opts.steps + 3 do
    for _, e in ipairs(list) do
      flow.env.barrier()
      local w0, c0 = clock(1), clock(2)
      e.loss = e.g(e.x, e.y)
      if i > 3 then
        e.walls[#e.walls + 1] = clock(1) - w0
        e.cpus[#e.cpus + 1] = clock(2) - c0
      end
    end
  end
  for _, e in ipairs(list) do
    local t = flow.tensor({median(e.walls), median(e.cpus)}, {dtype = flow.float64})
    flow.comm.all_reduce(t, {op = 'max'})
    e.wall, e.cpu = t:totable()[1], t:totable()[2]
  end
end

local function loadavg()
  local f = io.open('/proc/loadavg', 'r')
  local l = f and f:read('*l') or '?'
  if f then f:close() end
  return l:match('^(%S+)') or '?'
end

local models = opts.model == 'both' and {'wide', 'conv'} or {opts.model}
for _, name in ipairs(models) do
  opts.model_now = name
  local make = name == 'wide' and wide or conv
  local N = opts.batch_size
  local function batch()
    flow.manual_seed(1)
    local x = name == 'wide' and flow.randn(N, 64) or flow.randn(N, 3, 16, 16)
    return x, flow.randint(1, 11, {N})
  end
  say('== %s, %d ranks%s, batch %d%s, load %s', name, world,
      opts.grid and (' on a grid of rows of 2') or '', opts.batch_size,
      name == 'wide' and (', width ' .. opts.width) or '', loadavg())
  local rows, best = {}, nil
  for _, plan in ipairs({'auto', unpack(order[name])}) do
    rows[#rows + 1] = graph_of(make, plan, batch)
    rows[#rows].plan = plan
  end
  time_plans(rows)
  for _, e in ipairs(rows) do
    if e.plan ~= 'auto' and (best == nil or e.wall < best.wall) then best = e end
  end
  say('%-10s %12s %12s %12s', 'plan', 'wall ms', 'cpu ms', 'last loss')
  for _, e in ipairs(rows) do
    say('%-10s %12.2f %12.2f %12.5f', e.plan, e.wall * 1e3, e.cpu * 1e3, e.loss:item())
  end
  say('auto / best hand-written (%s): wall %.2f, cpu %.2f', best.plan, rows[1].wall / best.wall,
      rows[1].cpu / best.cpu)
end
