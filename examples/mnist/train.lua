-- Train a LeNet-style CNN on Fashion-MNIST, save a checkpoint, reload it and
-- check that the reloaded model scores the same.
--
--   ./bin/flow examples/mnist/train.lua [--epochs 3] [--batch-size 64]
--       [--lr 0.001] [--threads 2] [--data /usr/share/datasets/fashion-mnist]
--       [--out /tmp/fashion_lenet.safetensors] [--limit N] [--plot loss.svg]
--
-- Data: Debian's dataset-fashion-mnist (`make example` installs it).
local flow = require 'oneflow'
local vision = require 'flowvision'

local nn, F, optim = flow.nn, flow.nn.functional, flow.optim

local function parse_args(argv)
  local opts = {epochs = 3, batch_size = 64, lr = 1e-3, threads = 2, plot = false,
                data = '/usr/share/datasets/fashion-mnist',
                out = os.getenv('TMPDIR') and (os.getenv('TMPDIR') .. '/fashion_lenet.safetensors')
                      or '/tmp/fashion_lenet.safetensors'}
  local i = 1
  while i <= #argv do
    local key = argv[i]:match('^%-%-(.+)$')
    if not key or argv[i + 1] == nil then error('usage: train.lua [--option value]...', 0) end
    key = key:gsub('-', '_')
    if opts[key] == nil and key ~= 'limit' then error('train.lua: unknown option --' .. key, 0) end
    opts[key] = tonumber(argv[i + 1]) or argv[i + 1]
    i = i + 2
  end
  return opts
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

local function accuracy(model, ds, batch_size)
  model:eval()
  local correct, total = 0, 0
  flow.no_grad(function()
    local loader = flow.utils.data.DataLoader(ds, {batch_size = batch_size * 4})
    for x, y in loader:iter() do
      correct = correct + model(x):argmax(2):eq(y):sum():item()
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
  print(('Fashion-MNIST: %d training and %d test images, %d threads'):format(
    #train_ds, #test_ds, flow.get_num_threads()))

  local model = LeNet()
  local opt = optim.Adam(model:parameters(), {lr = opts.lr})
  local loader = flow.utils.data.DataLoader(train_ds, {batch_size = opts.batch_size, shuffle = true})
  local acc, losses = nil, {}   -- losses: per step, for --plot
  for epoch = 1, opts.epochs do
    local t0, sum, n = os.time(), 0, 0
    local clock0 = os.clock()
    for x, y in flow.utils.progress(loader:iter(), {total = #loader, desc = 'epoch ' .. epoch}) do
      local loss = F.cross_entropy(model(x), y)
      opt:zero_grad()
      loss:backward()
      opt:step()
      losses[#losses + 1] = loss:item()
      sum, n = sum + losses[#losses], n + 1
    end
    acc = accuracy(model, test_ds, opts.batch_size)
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
  local acc2 = accuracy(reloaded, test_ds, opts.batch_size)
  print(('checkpoint %s reloaded: test accuracy %.2f%% (%s)'):format(
    opts.out, 100 * acc2, acc2 == acc and 'identical' or 'DIFFERENT'))
  if acc2 ~= acc then os.exit(1) end
  return acc
end

return main(arg or {})
