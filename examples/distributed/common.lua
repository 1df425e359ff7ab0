-- Shared parts of the distributed examples: options, the Fashion-MNIST data
-- (Debian's dataset-fashion-mnist) and the LeNet of examples/mnist.
local argparse = require 'argparse'
local flow = require 'oneflow'
local vision = require 'flowvision'

local nn, F = flow.nn, flow.nn.functional
local M = {}

--- The options of a distributed example (lua-argparse: --help prints them).
-- @param argv the script's arguments
-- @param defaults the script's own defaults, e.g. `{batch_size = 128}`
-- @param name the script's file name
-- @param description what it does, for --help
-- @return the options table (`batch_size`, `epochs`, ...)
function M.parse_args(argv, defaults, name, description)
  local d = {epochs = 1, batch_size = 64, lr = 1e-3, threads = 1, limit = 6000,
             data = '/usr/share/datasets/fashion-mnist'}
  for k, v in pairs(defaults or {}) do d[k] = v end
  local p = argparse(name, description)
  p:epilog('Run under mpirun, e.g. mpirun --allow-run-as-root --oversubscribe -np 2 ./bin/flow '
    .. 'examples/distributed/' .. name .. '; alone it runs on one process.')
  local function num(key, help)
    p:option('--' .. key:gsub('_', '-'), help, tostring(d[key]), tonumber)
  end
  num('epochs', 'Training epochs.')
  num('batch_size', 'Images per step' .. (d.batch_size == 64 and ' per process.' or ' (global).'))
  num('lr', 'Adam learning rate.')
  num('threads', 'CPU threads per process.')
  num('limit', 'Use the first N training images (0: all).')
  p:flag('--log-steps', "Print every step's loss in full precision (to compare runs).")
  p:option('--data', 'Fashion-MNIST directory (Debian: dataset-fashion-mnist).', d.data)
  if d.out then p:option('--out', 'Checkpoint file.', d.out) end
  return p:parse(argv)
end

local MEAN, STD = 0.2860, 0.3530

--- TensorDataset of images [N, 1, 28, 28] and 1-based labels (the first
-- `limit` images; 0 = all).
function M.dataset(opts, train)
  local ds = vision.datasets.FashionMNIST(opts.data, {train = train})
  -- keep the first images before converting: float32 copies of all 60000
  -- in every process slow a many-process start on a small machine
  local n = opts.limit > 0 and math.min(opts.limit, ds:len()) or ds:len()
  ds.data, ds.targets = ds.data:narrow(1, 1, n), ds.targets:narrow(1, 1, n)
  local x, y = ds:tensors(MEAN, STD)
  return flow.utils.data.TensorDataset(x, y)
end

local LeNet = nn.Module:subclass('LeNet')
M.LeNet = LeNet
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

--- With --log-steps: rank 0 prints the loss of step `step` of `epoch`
-- with 9 significant digits (runs on different launches compare equal).
function M.log_step(opts, epoch, step, loss)
  if opts.log_steps then M.say('epoch %d step %d: loss %.9g', epoch, step, loss) end
end

--- Prints from rank 0 only.
function M.say(fmt, ...)
  if flow.env.get_rank() == 0 then print(fmt:format(...)) end
end

return M
