-- Data-parallel LeNet on Fashion-MNIST with global tensors: the parameters
-- are broadcast global tensors on all processes, each batch is a global
-- tensor split along the batch dim, and the SBP rules place the
-- communication -- the gradients come back as partial sums and the
-- optimizer's boxing to broadcast is the all-reduce.
--
--   mpirun --allow-run-as-root --oversubscribe -np 2 luajit examples/distributed/lenet_global.lua
--       [--epochs 1] [--batch-size 128] (global) [--lr 0.001] [--limit 6000]
--
-- conv2d and max_pool2d declare no SBP rule on this branch yet, so the
-- convolutional trunk runs on each rank's shard with the local tensors of
-- the broadcast weights -- exactly the split(1) x broadcast -> split(1)
-- signature such a rule would pick -- and its output becomes a global tensor
-- again; the classifier runs on global tensors.
-- Runs from any directory: this checkout's lua/ and examples come first.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/../../lua/?.lua;%s/../../lua/?/init.lua;%s/../../?.lua;'):format(here, here, here) .. package.path
local flow = require 'oneflow'
local common = require 'examples.distributed.common'

local F, data = flow.nn.functional, flow.utils.data
local say = common.say

local opts = common.parse_args(arg or {}, {batch_size = 128}, 'lenet_global.lua',
  'Data-parallel LeNet on Fashion-MNIST with global tensors: SBP rules place the communication.')
flow.set_num_threads(opts.threads)
local world = flow.env.get_world_size()
local ranks = {}
for i = 0, world - 1 do ranks[i + 1] = i end
local P = flow.placement('cpu', ranks)
local S, Bc = flow.sbp.split, flow.sbp.broadcast

flow.manual_seed(0)
local train_ds, test_ds = common.dataset(opts, true), common.dataset(opts, false)
local model = common.LeNet()
model:to_global(P, Bc)   -- values from rank 0

local function forward(x)   -- x: global [N, 1, 28, 28], split(1)
  local m = model
  local h = x:to_local()
  h = F.max_pool2d(F.relu(F.conv2d(h, m.conv1.weight:to_local(), m.conv1.bias:to_local(),
                                   {padding = 1})), 2)
  h = F.max_pool2d(F.relu(F.conv2d(h, m.conv2.weight:to_local(), m.conv2.bias:to_local(),
                                   {padding = 1})), 2)
  h = flow.flatten(h, 2):to_global(P, S(1))
  return m.fc2(F.relu(m.fc1(h)))                  -- global ops from here
end

-- cross entropy from ops with SBP rules (mean over the global batch)
local function loss_of(logits, y, N)
  local onehot = F.one_hot(y, 10):to('float32'):to_global(P, S(1))
  return -(F.log_softmax(logits, 2) * onehot):sum() / N
end

local opt = flow.optim.Adam(model:parameters(), {lr = opts.lr})
-- every rank reads the same global batch order (same seed) and keeps its rows
local loader = data.DataLoader(train_ds, {batch_size = opts.batch_size, shuffle = true,
                                          drop_last = true})
say('%d processes, %d training images, global batch %d', world, #train_ds, opts.batch_size)

local rank = flow.env.get_rank()
local function my_rows(t)
  local n = t:size(1)
  local base, extra = math.floor(n / world), n % world
  local start = rank * base + math.min(rank, extra)
  return t:narrow(1, start + 1, base + (rank < extra and 1 or 0))
end

for epoch = 1, opts.epochs do
  local t0, sum, n = os.clock(), 0, 0
  for x, y in loader:iter() do
    local N = x:size(1)
    local xg = my_rows(x):to_global(P, S(1))
    local loss = loss_of(forward(xg), my_rows(y), N)
    opt:zero_grad()
    loss:backward()
    opt:step()
    local l = loss:item()
    sum, n = sum + l, n + 1
    common.log_step(opts, epoch, n, l)
  end
  local correct, total = 0, 0
  flow.no_grad(function()
    for x, y in data.DataLoader(test_ds, {batch_size = 500}):iter() do
      local pred = forward(my_rows(x):to_global(P, S(1))):to_local():argmax(2)   -- rows split
      correct = correct + pred:eq(my_rows(y)):sum():item()
      total = total + y:size(1)
    end
  end)
  local c = flow.comm.all_reduce(flow.tensor({correct}, {dtype = 'float64'}))
  say('epoch %d: train loss %.4f, test accuracy %.2f%% (%.1f ms/step cpu)', epoch, sum / n,
      100 * c[1]:item() / total, (os.clock() - t0) * 1000 / n)
end
