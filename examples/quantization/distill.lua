-- Knowledge distillation on Fashion-MNIST: a small CNN student (a LeNet
-- 8-16-32) learns from a ResNet-18 teacher (or, --teacher-model lenet, the
-- full LeNet) through F.distillation_loss (soft targets at a temperature +
-- hard labels), next to the same student trained on the labels alone;
-- accuracy, size and speed of the three in one table.
--
--   ./bin/flow examples/quantization/distill.lua [--teacher-model resnet18|lenet]
--       [--teacher model.safetensors] [--epochs 1] [--limit N]
--       [--temperature 4] [--alpha 0.9] [--threads 2]
--
-- --teacher: a state dict of that model (ptq.lua --model resnet18 leaves its
-- float ResNet-18 in $TMPDIR/ptq_fp32.safetensors); trained here when absent.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/?.lua;%s/../../lua/?.lua;%s/../../lua/?/init.lua;'):format(here, here, here) .. package.path
local argparse = require 'argparse'
local flow = require 'oneflow'
local posix = require 'oneflow.utils.posix'
local QLeNet = require 'lenet'
local common = require 'common'

local F = flow.nn.functional
local STUDENT = {8, 16, 32}

local function parse_args(argv)
  local p = argparse('distill.lua', 'Distil the Fashion-MNIST LeNet into a small student.')
  p:option('--teacher-model', 'resnet18 or lenet.', 'resnet18'):choices({'resnet18', 'lenet'})
  p:option('--teacher', 'Teacher state dict (trained here when absent).')
  p:option('--epochs', 'Epochs for each training run.', '1', tonumber)
  p:option('--data', 'Fashion-MNIST directory.', '/usr/share/datasets/fashion-mnist')
  p:option('--limit', 'Use only the first N training and test images.', nil, tonumber)
  p:option('--temperature', 'Softmax temperature of the soft targets.', '4', tonumber)
  p:option('--alpha', 'Weight of the soft term (1 - alpha: the labels).', '0.9', tonumber)
  p:option('--threads', 'CPU threads.', '2', tonumber)
  return p:parse(argv)
end

local load, accuracy, nparams = common.load, common.accuracy, common.nparams
-- the same batches for both students
local function train(model, x, y, epochs, loss_fn, extra)
  flow.manual_seed(1)
  return common.train(model, x, y, epochs, 1e-3, loss_fn, nil, extra)
end

-- the teacher's logits for every training image, once: the images are not
-- augmented, so each epoch would compute the same ones again (a ResNet-18
-- forward is ~150x the student's)
local function logits_of(teacher, x)
  local parts = {}
  flow.no_grad(function()
    for i = 1, x:size(1), 256 do parts[#parts + 1] = teacher(x:narrow(1, i, math.min(256, x:size(1) - i + 1))) end
  end)
  return flow.cat(parts, 1)
end

local function ms_per_batch(m, x)
  local t
  flow.no_grad(function()
    for _ = 1, 3 do m(x) end
    t = posix.now()
    for _ = 1, 30 do m(x) end
  end)
  return (posix.now() - t) / 30 * 1e3
end

local function main(argv)
  local opts = parse_args(argv)
  flow.set_num_threads(opts.threads)
  local xtr, ytr = load(opts, true)
  local xte, yte = load(opts, false)
  flow.manual_seed(0)
  local teacher = common.model(opts.teacher_model)
  if opts.teacher then
    teacher:load_state_dict(flow.load(opts.teacher))
  else
    print('training the teacher')
    train(teacher, xtr, ytr, opts.epochs, function(s, _, y) return F.cross_entropy(s, y) end)
  end
  teacher:eval()
  flow.manual_seed(0)
  local plain = train(QLeNet(STUDENT), xtr, ytr, opts.epochs, function(s, _, y) return F.cross_entropy(s, y) end)
  flow.manual_seed(0)
  local soft = logits_of(teacher, xtr)
  local distilled = train(QLeNet(STUDENT), xtr, ytr, opts.epochs, function(s, _, y, t)
    return F.distillation_loss(s, t, y, {temperature = opts.temperature, alpha = opts.alpha})
  end, soft)
  local xb = xte:narrow(1, 1, 64)
  print(('\n%-28s %9s %10s %16s   (load %s)'):format('model', 'accuracy', 'params', 'batch 64 (ms)',
    io.open('/proc/loadavg'):read('*l')))
  local tname = opts.teacher_model == 'lenet' and 'teacher (LeNet 32-64-128)' or 'teacher (ResNet-18)'
  for _, r in ipairs({{tname, teacher}, {'student, labels only', plain},
                      {'student, distilled', distilled}}) do
    print(('%-28s %8.2f%% %10d %16.3f'):format(r[1], 100 * accuracy(r[2], xte, yte), nparams(r[2]),
      ms_per_batch(r[2], xb)))
  end
end

return main(arg or {})
