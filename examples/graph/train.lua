-- Train on Fashion-MNIST with an nn.Graph train step, evaluate with an eval
-- graph, and save the eval graph for a C host (examples/graph/host.c):
--
--   ./bin/flow examples/graph/train.lua [--model mlp|lenet] [--epochs 1]
--       [--batch-size 64] [--lr 0.001] [--limit N] [--threads 2]
--       [--data /usr/share/datasets/fashion-mnist] [--out /tmp/fashion_eval.ofg]
--
-- Without the dataset (or with --synthetic 1) it trains on generated blobs,
-- which is what the ctest does. Besides the graph it writes <out>.check: a
-- batch of inputs and the eval graph's outputs for them, which the C host
-- compares with its own run (raw little-endian: int64 count, float32 data,
-- for the input then the output).
-- Runs from any directory: this checkout's lua/ and examples come first.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/../../lua/?.lua;%s/../../lua/?/init.lua;%s/../../?.lua;'):format(here, here, here) .. package.path
local argparse = require 'argparse'
local ffi = require 'ffi'
local flow = require 'oneflow'

local nn, F, optim = flow.nn, flow.nn.functional, flow.optim

local function parse_args(argv)
  local p = argparse('train.lua', 'Train on Fashion-MNIST with an nn.Graph train step, evaluate '
    .. 'with an eval graph and save it for a C host (examples/graph/host.c). Without the data set '
    .. '(or with --synthetic 1) it trains on generated blobs.')
  p:option('--model', 'The network.', 'mlp'):choices({'mlp', 'lenet'})
  p:option('--epochs', 'Training epochs.', '1', tonumber)
  p:option('--batch-size', 'Images per step.', '64', tonumber)
  p:option('--lr', 'Learning rate.', '0.001', tonumber)
  p:option('--threads', 'CPU threads.', '2', tonumber)
  p:option('--limit', 'Use only the first N images (synthetic: N blobs, default 2048).', nil, tonumber)
  p:option('--data', 'Fashion-MNIST directory.', '/usr/share/datasets/fashion-mnist')
  p:option('--synthetic', '1: train on generated blobs even when the data set is there.', '0', tonumber)
  p:option('--out', 'Where the eval graph goes (and <out>.check).',
           (os.getenv('TMPDIR') or '/tmp') .. '/fashion_eval.ofg')
  return p:parse(argv)
end

local MLP = nn.Module:subclass('MLP')
function MLP:__init()
  nn.Module.__init(self)
  self.fc1 = nn.Linear(28 * 28, 256)
  self.fc2 = nn.Linear(256, 10)
end
function MLP:forward(x) return self.fc2(F.relu(self.fc1(flow.flatten(x, 2)))) end

local LeNet = nn.Module:subclass('LeNet')
function LeNet:__init()
  nn.Module.__init(self)
  self.conv1 = nn.Conv2d(1, 32, 3, {padding = 1})
  self.conv2 = nn.Conv2d(32, 64, 3, {padding = 1})
  self.fc1 = nn.Linear(64 * 7 * 7, 128)
  self.fc2 = nn.Linear(128, 10)
end
function LeNet:forward(x)
  x = F.max_pool2d(F.relu(self.conv1(x)), 2)
  x = F.max_pool2d(F.relu(self.conv2(x)), 2)
  x = F.relu(self.fc1(flow.flatten(x, 2)))
  return self.fc2(x)
end

-- one optimizer step per call: forward, backward and the Adam update
local TrainGraph = nn.Graph:subclass('TrainGraph')
function TrainGraph:__init(model, opt)
  nn.Graph.__init(self)
  self.model = model
  self:add_optimizer(opt)
end
function TrainGraph:build(x, y)
  local loss = F.cross_entropy(self.model(x), y)
  loss:backward()
  return loss
end

-- inference: class probabilities
local EvalGraph = nn.Graph:subclass('EvalGraph')
function EvalGraph:__init(model)
  nn.Graph.__init(self)
  self.model = model
end
function EvalGraph:build(x) return F.softmax(self.model(x), 2) end

local MEAN, STD = 0.2860, 0.3530

local function datasets(opts)
  local ok, vision = pcall(require, 'flowvision')
  local have = ok and io.open(opts.data .. '/train-images-idx3-ubyte.gz', 'rb')
  if have then have:close() end
  if have and opts.synthetic == 0 then
    local function load(train)
      local x, y = vision.datasets.FashionMNIST(opts.data, {train = train}):tensors(MEAN, STD)
      if opts.limit then
        local n = math.min(opts.limit, x:size(1))
        x, y = x:narrow(1, 1, n), y:narrow(1, 1, n)
      end
      return x, y
    end
    local xt, yt = load(true)
    local xe, ye = load(false)
    return xt, yt, xe, ye, 'Fashion-MNIST'
  end
  -- ten Gaussian blobs in image space
  flow.manual_seed(42)
  local centers = flow.randn(10, 1, 28, 28)
  local function blobs(n)
    local y = flow.randint(1, 11, {n})
    local x = centers:index_select(1, y) + flow.randn(n, 1, 28, 28) * 0.8
    return x, y
  end
  local n = opts.limit or 2048
  local xt, yt = blobs(n)
  local xe, ye = blobs(math.max(256, math.floor(n / 4)))
  return xt, yt, xe, ye, 'synthetic blobs'
end

local function write_check(path, x, y)
  local f = assert(io.open(path, 'wb'))
  for _, t in ipairs({x:contiguous(), y:contiguous()}) do
    local n = ffi.new('int64_t[1]', t:numel())
    f:write(ffi.string(n, 8))
    f:write(ffi.string(t:data_ptr(), t:numel() * 4))
  end
  f:close()
end

local function main(argv)
  local opts = parse_args(argv)
  flow.set_num_threads(opts.threads)
  flow.manual_seed(0)
  local xt, yt, xe, ye, what = datasets(opts)
  print(('%s: %d training and %d test images, model %s, %d threads'):format(
    what, xt:size(1), xe:size(1), opts.model, flow.get_num_threads()))
  local model = opts.model == 'lenet' and LeNet() or MLP()
  local opt = optim.Adam(model:parameters(), {lr = opts.lr})
  local train_step = TrainGraph(model, opt)
  local loader = flow.utils.data.DataLoader(flow.utils.data.TensorDataset(xt, yt),
                                            {batch_size = opts.batch_size, shuffle = true})
  for epoch = 1, opts.epochs do
    local sum, n, t0 = 0, 0, os.clock()
    for x, y in loader:iter() do
      sum, n = sum + train_step(x, y):item(), n + 1
    end
    print(('epoch %d: train loss %.4f (%.1f ms/step cpu)'):format(epoch, sum / n,
                                                                  (os.clock() - t0) * 1000 / n))
  end
  print(tostring(train_step))

  model:eval()
  local eval = EvalGraph(model)
  local bs = opts.batch_size
  local correct, total = 0, 0
  for i = 1, xe:size(1) - bs + 1, bs do   -- whole batches: one compiled signature
    local p = eval(xe:narrow(1, i, bs))
    correct = correct + p:argmax(2):eq(ye:narrow(1, i, bs)):sum():item()
    total = total + bs
  end
  print(('eval graph: test accuracy %.2f%% on %d images'):format(100 * correct / total, total))
  eval:save(opts.out)
  local x = xe:narrow(1, 1, bs)
  local reloaded = nn.Graph.load(opts.out)
  local a, b = eval(x), reloaded(x)
  local diff = (a - b):abs():max():item()
  print(('saved %s; reloaded in Lua: max difference %g'):format(opts.out, diff))
  write_check(opts.out .. '.check', x, a)
  if diff ~= 0 then os.exit(1) end
  return correct / total
end

return main(arg or {})
