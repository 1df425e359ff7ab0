-- Train a LeNet-style CNN on Fashion-MNIST, save a checkpoint, reload it and
-- check that the reloaded model scores the same.
--
--   ./bin/flow examples/mnist/train.lua [--epochs 3] [--batch-size 64]
--       [--lr 0.001] [--threads 2] [--data /usr/share/datasets/fashion-mnist]
--       [--out /tmp/fashion_lenet.safetensors] [--limit N] [--log-every N]
--       [--plot loss.svg] [--amp bf16]
--   ./bin/flow examples/mnist/train.lua --help
--
-- Data: Debian's dataset-fashion-mnist (`make example` installs it).
-- Runs from any directory: this checkout's lua/ and examples come first.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/../../lua/?.lua;%s/../../lua/?/init.lua;%s/../../?.lua;'):format(here, here, here) .. package.path
local argparse = require 'argparse'
local flow = require 'oneflow'
local vision = require 'flowvision'

local nn, F, optim = flow.nn, flow.nn.functional, flow.optim

local function parse_args(argv)
  local p = argparse('train.lua', 'Train a LeNet-style CNN on Fashion-MNIST, save a checkpoint, '
    .. 'reload it and check that the reloaded model scores the same.')
  p:option('--epochs', 'Training epochs.', '3', tonumber)
  p:option('--batch-size', 'Images per step.', '64', tonumber)
  p:option('--lr', 'Adam learning rate.', '1e-3', tonumber)
  p:option('--threads', 'CPU threads.', '2', tonumber)
  p:option('--data', 'Fashion-MNIST directory (Debian: dataset-fashion-mnist).',
           '/usr/share/datasets/fashion-mnist')
  p:option('--out', 'Checkpoint file.', (os.getenv('TMPDIR') or '/tmp') .. '/fashion_lenet.safetensors')
  p:option('--limit', 'Use only the first N training and test images.', nil, tonumber)
  p:option('--log-every', 'Print the loss every N steps (0: only when stderr is not a terminal, '
    .. 'every tenth of an epoch).', '0', tonumber)
  p:option('--plot', 'Write the per-step training loss curve to this SVG file.')
  p:option('--amp', 'Mixed precision: run forward and loss under '
    .. "flow.amp.autocast('cpu', {dtype = bfloat16}) (bf16; the weights, grads and "
    .. 'optimizer stay float32), training and evaluation alike.')
    :choices({'bf16'})
  return p:parse(argv)
end

local LeNet = nn.Module:subclass('LeNet')

function LeNet:__init()
  nn.Module.__init(self)
  self.conv1 = nn.Conv2d(1, 32, 3, {padding = 1})
  self.conv2 = nn.Conv2d(32, 64, 3, {padding = 1})
  self.fc1 = nn.Linear(64 * 7 * 7, 128)
  self.fc2 = nn.Linear(128, 10)
end

function LeNet:forward(x)
  x = F.max_pool2d(F.relu(self.conv1(x)), 2)     -- [N, 32, 14, 14]
  x = F.max_pool2d(F.relu(self.conv2(x)), 2)     -- [N, 64, 7, 7]
  x = F.relu(self.fc1(flow.flatten(x, 2)))
  return self.fc2(x)
end

local MEAN, STD = 0.2860, 0.3530   -- Fashion-MNIST training-set statistics

local function load(opts, train)
  local ds = vision.datasets.FashionMNIST(opts.data, {train = train})
  local x, y = ds:tensors(MEAN, STD)
  if opts.limit then
    local n = math.min(opts.limit, x:size(1))
    x, y = x:narrow(1, 1, n), y:narrow(1, 1, n)
  end
  return flow.utils.data.TensorDataset(x, y)
end

-- fn() under bfloat16 autocast when amp is set, as it is otherwise
local function maybe_autocast(amp, fn)
  if not amp then return fn() end
  return flow.amp.autocast('cpu', {dtype = flow.bfloat16}, fn)
end

local function accuracy(model, ds, batch_size, amp)
  model:eval()
  local correct, total = 0, 0
  flow.no_grad(function()
    local loader = flow.utils.data.DataLoader(ds, {batch_size = batch_size * 4})
    for x, y in loader:iter() do
      local out = maybe_autocast(amp, function() return model(x) end)
      correct = correct + out:argmax(2):eq(y):sum():item()
      total = total + y:size(1)
    end
  end)
  model:train()
  return correct / total
end

local function main(argv)
  local opts = parse_args(argv)
  flow.set_num_threads(opts.threads)
  flow.manual_seed(0)
  local train_ds, test_ds = load(opts, true), load(opts, false)
  print(('Fashion-MNIST: %d training and %d test images, %d threads%s'):format(
    #train_ds, #test_ds, flow.get_num_threads(), opts.amp and ', bfloat16 autocast' or ''))

  local model = LeNet()
  local opt = optim.Adam(model:parameters(), {lr = opts.lr})
  local loader = flow.utils.data.DataLoader(train_ds, {batch_size = opts.batch_size, shuffle = true})
  -- the progress bar draws on a terminal; elsewhere (a log) plain lines show progress
  local log_every = opts.log_every
  if log_every == 0 and not require('oneflow.utils.posix').isatty(2) then
    log_every = math.max(1, math.floor(#loader / 10))
  end
  local acc, losses = nil, {}   -- losses: per step, for --plot
  for epoch = 1, opts.epochs do
    local t0, sum, n = os.time(), 0, 0
    local clock0 = os.clock()
    for x, y in flow.utils.progress(loader:iter(), {total = #loader, desc = 'epoch ' .. epoch}) do
      -- the backward runs outside autocast, as PyTorch recommends: its ops
      -- follow the dtypes the forward recorded
      local loss = maybe_autocast(opts.amp, function() return F.cross_entropy(model(x), y) end)
      opt:zero_grad()
      loss:backward()
      opt:step()
      losses[#losses + 1] = loss:item()
      sum, n = sum + losses[#losses], n + 1
      if log_every > 0 and n % log_every == 0 then
        print(('epoch %d: step %d/%d, loss %.4f'):format(epoch, n, #loader, sum / n))
      end
    end
    acc = accuracy(model, test_ds, opts.batch_size, opts.amp)
    print(('epoch %d: train loss %.4f, test accuracy %.2f%% (%ds, %.1f ms/step cpu)'):format(
      epoch, sum / n, 100 * acc, os.time() - t0, (os.clock() - clock0) * 1000 / n))
  end

  if opts.plot then   -- the loss curve as SVG (flow.utils.plot, doc/tools.md)
    flow.utils.plot.curves(opts.plot, {{label = 'train loss', ys = losses}}, {xlabel = 'step',
      ylabel = 'cross-entropy', title = ('LeNet, test accuracy %.2f%%'):format(100 * acc)})
  end
  flow.save(model:state_dict(), opts.out)
  local reloaded = LeNet()
  reloaded:load_state_dict(flow.load(opts.out))
  local acc2 = accuracy(reloaded, test_ds, opts.batch_size, opts.amp)
  print(('checkpoint %s reloaded: test accuracy %.2f%% (%s)'):format(
    opts.out, 100 * acc2, acc2 == acc and 'identical' or 'DIFFERENT'))
  if acc2 ~= acc then os.exit(1) end
  return acc
end

return main(arg or {})
