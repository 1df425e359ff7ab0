-- A 2-D hybrid parallel MLP on Fashion-MNIST: the processes form a grid
-- (rows x 2); along the grid's first axis the batch is split (data
-- parallel), along the second the hidden layers are split (tensor model
-- parallel: the first Linear by output features, the second by input
-- features, so their product is a partial sum reduced once).
--
--   mpirun --allow-run-as-root --oversubscribe -np 4 luajit examples/distributed/hybrid_mlp.lua
--       [--epochs 1] [--batch-size 128] (global) [--lr 0.001] [--limit 6000]
--
-- With -np 4 the grid is {{0, 1}, {2, 3}}; with -np 2 it is {{0, 1}} (model
-- parallel only).
-- Runs from any directory: this checkout's lua/ and examples come first.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/../../lua/?.lua;%s/../../lua/?/init.lua;%s/../../?.lua;'):format(here, here, here) .. package.path
local flow = require 'oneflow'
local common = require 'examples.distributed.common'

local nn, F, data = flow.nn, flow.nn.functional, flow.utils.data
local say = common.say

local opts = common.parse_args(arg or {}, {batch_size = 128}, 'hybrid_mlp.lua',
  'A 2-D hybrid parallel MLP on Fashion-MNIST: data parallel along the first axis of the process '
  .. 'grid, tensor model parallel along the second (needs an even number of processes).')
flow.set_num_threads(opts.threads)
local world = flow.env.get_world_size()
if world % 2 ~= 0 then error('hybrid_mlp.lua: run it on an even number of processes', 0) end
local grid = {}
for r = 1, world / 2 do grid[r] = {2 * r - 2, 2 * r - 1} end
local P = flow.placement('cpu', grid)
local S, Bc = flow.sbp.split, flow.sbp.broadcast
local DATA = {S(1), Bc}          -- batch split over grid rows, whole on each row

flow.manual_seed(0)
local train_ds, test_ds = common.dataset(opts, true), common.dataset(opts, false)
local model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                            nn.Linear(128, 10))
model:to_global(P, function(name)
  if name:match('^0%.') then return {Bc, S(1)} end      -- column parallel: weight rows, bias
  if name == '2.weight' then return {Bc, S(2)} end      -- row parallel: weight columns
  return {Bc, Bc}
end)
say('grid %s; layer 1 weight %s, layer 3 weight %s', tostring(P), tostring(model[1].weight.sbp),
    tostring(model[3].weight.sbp))

-- this rank's rows of a batch for DATA (split over the grid's first axis)
local row, rows = P.coord[1], P.hierarchy[1]
local function shard(t)
  local n = t:size(1)
  local base, extra = math.floor(n / rows), n % rows
  local start = row * base + math.min(row, extra)
  return t:narrow(1, start + 1, base + (row < extra and 1 or 0))
end

local function forward(x) return model(shard(x):reshape(-1, 784):to_global(P, DATA)) end

local opt = flow.optim.Adam(model:parameters(), {lr = opts.lr})
local loader = data.DataLoader(train_ds, {batch_size = opts.batch_size, shuffle = true,
                                          drop_last = true})
for epoch = 1, opts.epochs do
  local t0, sum, n = os.clock(), 0, 0
  for x, y in loader:iter() do
    local onehot = shard(F.one_hot(y, 10):to('float32')):to_global(P, DATA)
    local loss = -(F.log_softmax(forward(x), 2) * onehot):sum() / x:size(1)
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
      -- logits: rows split along the grid's first axis, whole along the second
      local pred = forward(x):to_global(P, {Bc, Bc}):to_local():argmax(2)
      correct = correct + pred:eq(y):sum():item()
      total = total + y:size(1)
    end
  end)
  say('epoch %d: train loss %.4f, test accuracy %.2f%% (%.1f ms/step cpu)', epoch, sum / n,
      100 * correct / total, (os.clock() - t0) * 1000 / n)
end
