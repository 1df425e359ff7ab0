-- Fine-tune flowvision's resnet18 (10 classes) on Fashion-MNIST resized to
-- 32x32 and replicated to 3 channels, with timm-style Mixup/CutMix, soft-target
-- cross-entropy and a cosine learning-rate schedule.
--
--   ./bin/flow examples/vision/finetune.lua [--epochs 2] [--batch-size 64]
--       [--lr 0.05] [--limit 5000] [--threads 2] [--size 32]
--       [--data /usr/share/datasets/fashion-mnist] [--pretrained FILE]
--
-- --limit is the number of training images (the first N) and also the size of
-- the test subset. --pretrained loads an ImageNet resnet18 checkpoint
-- (safetensors, torchvision names, 1000 classes) and replaces its head with a
-- fresh 10-class one; without it the network starts from random weights.
-- Data: Debian's dataset-fashion-mnist (`make example` installs it).
-- Runs from any directory: this checkout's lua/ and examples come first.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/../../lua/?.lua;%s/../../lua/?/init.lua;%s/../../?.lua;'):format(here, here, here) .. package.path
local argparse = require 'argparse'
local flow = require 'oneflow'
local vision = require 'flowvision'

local nn, optim = flow.nn, flow.optim
local T, D = vision.transforms, vision.data

local function parse_args(argv)
  local p = argparse('finetune.lua', "Fine-tune flowvision's resnet18 (10 classes) on Fashion-MNIST "
    .. 'resized and replicated to 3 channels, with Mixup/CutMix, soft-target cross-entropy and a '
    .. 'cosine learning-rate schedule.')
  p:option('--epochs', 'Training epochs.', '2', tonumber)
  p:option('--batch-size', 'Images per step.', '64', tonumber)
  p:option('--lr', 'Peak SGD learning rate.', '0.05', tonumber)
  p:option('--limit', 'Training images (the first N), also the size of the test subset.', '5000', tonumber)
  p:option('--threads', 'CPU threads.', '2', tonumber)
  p:option('--size', 'Image side after resizing.', '32', tonumber)
  p:option('--data', 'Fashion-MNIST directory.', '/usr/share/datasets/fashion-mnist')
  p:option('--pretrained', 'An ImageNet resnet18 checkpoint (safetensors, torchvision names); '
    .. 'its head is replaced by a fresh 10-class one.')
  local opts = p:parse(argv)
  opts.pretrained = opts.pretrained or false
  return opts
end

local MEAN, STD = 0.2860, 0.3530   -- Fashion-MNIST training-set statistics

-- uint8 [28, 28] -> float [3, size, size], normalised.
local function transforms(size, train)
  local list = {T.ToTensor(), T.Resize(size)}
  if train then list[#list + 1] = T.RandomHorizontalFlip() end
  list[#list + 1] = T.Grayscale(3)
  list[#list + 1] = T.Normalize({MEAN, MEAN, MEAN}, {STD, STD, STD})
  return T.Compose(list)
end

local function load(opts, train)
  local ds = vision.datasets.FashionMNIST(opts.data, {train = train, transform = transforms(opts.size, train)})
  local n = math.min(opts.limit, #ds)
  if n < #ds then
    local idx = {}
    for i = 1, n do idx[i] = i end
    ds = flow.utils.data.Subset(ds, idx)
  end
  return ds
end

local function accuracy(model, ds, batch_size)
  model:eval()
  local correct, total = 0, 0
  flow.no_grad(function()
    local loader = flow.utils.data.DataLoader(ds, {batch_size = batch_size * 2})
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
  print(('Fashion-MNIST %dx%dx3: %d training and %d test images, %d threads'):format(
    opts.size, opts.size, #train_ds, #test_ds, flow.get_num_threads()))

  local model
  if opts.pretrained then
    model = vision.models.resnet18({pretrained = opts.pretrained})
    model.fc = nn.Linear(model.fc.in_features, 10)
    print('loaded ' .. opts.pretrained .. ', new 10-class head')
  else
    model = vision.models.resnet18({num_classes = 10})
  end

  local loader = flow.utils.data.DataLoader(train_ds, {batch_size = opts.batch_size, shuffle = true,
                                                       drop_last = true})   -- Mixup wants even batches
  local steps = #loader
  if steps == 0 then error('finetune.lua: --limit must be at least --batch-size', 0) end
  local opt = optim.SGD(model:parameters(), {lr = opts.lr, momentum = 0.9, weight_decay = 5e-4})
  local sched = optim.lr_scheduler.CosineAnnealingLR(opt, {T_max = opts.epochs * steps})  -- per step
  local mixup = D.Mixup{mixup_alpha = 0.8, cutmix_alpha = 1.0, prob = 1.0, switch_prob = 0.5,
                        mode = 'batch', label_smoothing = 0.1, num_classes = 10}
  local criterion = D.SoftTargetCrossEntropy()

  local acc
  for epoch = 1, opts.epochs do
    local t0, sum, n = os.time(), 0, 0
    for x, y in flow.utils.progress(loader:iter(), {total = steps, desc = 'epoch ' .. epoch}) do
      local mixed, soft = mixup(x, y)
      local loss = criterion(model(mixed), soft)
      opt:zero_grad()
      loss:backward()
      opt:step()
      sched:step()
      sum, n = sum + loss:item(), n + 1
    end
    acc = accuracy(model, test_ds, opts.batch_size)
    print(('epoch %d: train loss %.4f, test accuracy %.2f%%, lr %.4g (%ds)'):format(
      epoch, sum / n, 100 * acc, opt.param_groups[1].lr, os.time() - t0))
  end
  print(('done: test accuracy %.2f%% on %d images'):format(100 * acc, #test_ds))
  return acc
end

return main(arg or {})
