-- Helpers shared by ptq.lua and distill.lua: the models, Fashion-MNIST
-- tensors, accuracy, parameter counts, a plain training loop.
local flow = require 'oneflow'
local vision = require 'flowvision'
local QLeNet = require 'lenet'

local M = {}
local MEAN, STD = 0.2860, 0.3530   -- Fashion-MNIST training-set statistics

--- A float model for 1 x 28 x 28 images: 'lenet' (lenet.lua's QLeNet), or
-- 'resnet18': flowvision.models.quantization.resnet18 with a CIFAR-style
-- stem (3x3 stride-1 conv1 on the one channel, no max pooling), 10 classes.
function M.model(kind)
  if kind == 'lenet' then return QLeNet() end
  assert(kind == 'resnet18', 'common.model: lenet or resnet18')
  local m = vision.models.quantization.resnet18({num_classes = 10})
  m.conv1 = flow.nn.Conv2d(1, 64, 3, {padding = 1, bias = false})
  m.maxpool = flow.nn.Identity()
  return m
end

--- (x, y) of the training or test set, the first opts.limit images when given.
function M.load(opts, train)
  local x, y = vision.datasets.FashionMNIST(opts.data, {train = train}):tensors(MEAN, STD)
  if opts.limit then
    local n = math.min(opts.limit, x:size(1))
    x, y = x:narrow(1, 1, n), y:narrow(1, 1, n)
  end
  return x, y
end

--- Fraction of x classified as y, in eval mode, batches of 256.
function M.accuracy(model, x, y)
  model:eval()
  local correct = 0
  flow.no_grad(function()
    for i = 1, x:size(1), 256 do
      local n = math.min(256, x:size(1) - i + 1)
      correct = correct + model(x:narrow(1, i, n)):argmax(2):eq(y:narrow(1, i, n)):sum():item()
    end
  end)
  return correct / x:size(1)
end

function M.nparams(m)
  local n = 0
  for _, p in ipairs(m:parameters()) do n = n + p:numel() end
  return n
end

--- Adam over shuffled batches of 64: loss_fn(logits, x, y, extra) (cross
-- entropy by default); extra (optional) is a tensor with a row per image,
-- batched with it (a teacher's logits).
function M.train(model, x, y, epochs, lr, loss_fn, log, extra)
  loss_fn = loss_fn or function(s, _, t) return flow.nn.functional.cross_entropy(s, t) end
  model:train()
  local opt = flow.optim.Adam(model:parameters(), {lr = lr or 1e-3})
  local data = extra and flow.utils.data.TensorDataset(x, y, extra) or flow.utils.data.TensorDataset(x, y)
  local loader = flow.utils.data.DataLoader(data, {batch_size = 64, shuffle = true})
  for e = 1, epochs do
    local sum, n = 0, 0
    for xb, yb, eb in loader:iter() do
      local loss = loss_fn(model(xb), xb, yb, eb)
      opt:zero_grad(); loss:backward(); opt:step()
      sum, n = sum + loss:item(), n + 1
    end
    if log then print(('  epoch %d: train loss %.4f'):format(e, sum / n)) end
  end
  model:eval()
  return model
end

return M
