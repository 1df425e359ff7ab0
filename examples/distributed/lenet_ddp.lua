-- Data-parallel LeNet on Fashion-MNIST with DistributedDataParallel: every
-- process trains a replica on its share of each epoch (DistributedSampler),
-- gradients are averaged by bucketed all-reduces that overlap backward.
--
--   mpirun --allow-run-as-root --oversubscribe -np 2 luajit examples/distributed/lenet_ddp.lua
--       [--epochs 1] [--batch-size 64] (per process) [--lr 0.001] [--limit 6000]
--       [--out /tmp/lenet_ddp.safetensors]
-- Runs from any directory: this checkout's lua/ and examples come first.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/../../lua/?.lua;%s/../../lua/?/init.lua;%s/../../?.lua;'):format(here, here, here) .. package.path
local flow = require 'oneflow'
local common = require 'examples.distributed.common'

local F, data = flow.nn.functional, flow.utils.data
local say = common.say

local opts = common.parse_args(arg or {}, {out = '/tmp/lenet_ddp.safetensors'}, 'lenet_ddp.lua',
  'Data-parallel LeNet on Fashion-MNIST with DistributedDataParallel and a DistributedSampler.')
flow.set_num_threads(opts.threads)
local rank, world = flow.env.get_rank(), flow.env.get_world_size()
flow.manual_seed(0)
local train_ds, test_ds = common.dataset(opts, true), common.dataset(opts, false)

local model = flow.nn.parallel.DistributedDataParallel(common.LeNet())   -- rank 0's weights
local opt = flow.optim.Adam(model:parameters(), {lr = opts.lr})
local sampler = data.DistributedSampler(train_ds, {shuffle = true, seed = 0})
local loader = data.DataLoader(train_ds, {batch_size = opts.batch_size, sampler = sampler})
say('%d processes, %d training images (%d per process per epoch), batch %d per process',
    world, #train_ds, sampler:len(), opts.batch_size)

-- test accuracy over the whole test set, each rank scoring its share
local function accuracy()
  model:eval()
  local s = data.DistributedSampler(test_ds, {shuffle = false, drop_last = false})
  local correct, total = 0, 0
  flow.no_grad(function()
    for x, y in data.DataLoader(test_ds, {batch_size = 256, sampler = s}):iter() do
      correct = correct + model(x):argmax(2):eq(y):sum():item()
      total = total + y:size(1)
    end
  end)
  local counts = flow.tensor({correct, total}, {dtype = 'float64'})
  flow.comm.all_reduce(counts)   -- padded repeats count twice: negligible here
  model:train()
  return counts[1]:item() / counts[2]:item()
end

for epoch = 1, opts.epochs do
  sampler:set_epoch(epoch)
  local t0, sum, n = os.clock(), 0, 0
  for x, y in loader:iter() do
    local loss = F.cross_entropy(model(x), y)
    opt:zero_grad()
    loss:backward()
    opt:step()
    local l = loss:item()
    sum, n = sum + l, n + 1
    common.log_step(opts, epoch, n, l)
  end
  local acc = accuracy()
  say('epoch %d: rank 0 train loss %.4f, test accuracy %.2f%% (%.1f ms/step cpu)',
      epoch, sum / n, 100 * acc, (os.clock() - t0) * 1000 / n)
end

-- the replicas are identical: rank 0 writes the checkpoint
if rank == 0 then flow.save(model.module:state_dict(), opts.out) end
flow.env.barrier()
say('checkpoint: %s', opts.out)
