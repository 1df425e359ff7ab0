-- Post-training int8 quantization of a Fashion-MNIST model -- the LeNet, or
-- a ResNet-18 (flowvision.models.quantization.resnet18 with a CIFAR-style
-- stem: 3x3 stride-1 conv1 on the one channel, no max pooling): fp32 vs
-- int8 accuracy, size on disk and inference speed; optionally QAT
-- fine-tuning and 50% channel pruning (+ fine-tuning): the LeNet's conv
-- chains, a ResNet's block-internal channels (ResNet:prunable_chains), with
-- --prune-residual also its residual streams (every conv's channels).
--
--   ./bin/flow examples/quantization/ptq.lua [--model lenet|resnet18]
--       [--checkpoint model.safetensors] [--epochs 1] [--limit N]
--       [--calib-batches 32] [--threads 2] [--bench-batch 8] [--iters 50]
--       [--qat] [--qat-bn] [--prune [--prune-residual]] [--export DIR]
--
-- Without --checkpoint (a state dict of the model; for the LeNet also one of
-- examples/mnist/train.lua's: the same keys) the float model is trained first.
-- --export DIR writes the float weights, calibration and test tensors as
-- PyTorch files for bench/quant_torch.py (the side-by-side figures).
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/?.lua;%s/../../lua/?.lua;%s/../../lua/?/init.lua;'):format(here, here, here) .. package.path
local argparse = require 'argparse'
local flow = require 'oneflow'
local posix = require 'oneflow.utils.posix'
local QLeNet = require 'lenet'
local common = require 'common'

local nn, Qz = flow.nn, flow.quantization

local function parse_args(argv)
  local p = argparse('ptq.lua', 'int8 post-training quantization of a Fashion-MNIST model.')
  p:option('--model', 'lenet or resnet18.', 'lenet'):choices({'lenet', 'resnet18'})
  p:option('--checkpoint', 'Float model state dict (trained here when absent).')
  p:option('--epochs', 'Training epochs when there is no checkpoint.', '1', tonumber)
  p:option('--data', 'Fashion-MNIST directory.', '/usr/share/datasets/fashion-mnist')
  p:option('--limit', 'Use only the first N training and test images.', nil, tonumber)
  p:option('--calib-batches', 'Calibration batches of 64 training images.', '32', tonumber)
  p:option('--threads', 'CPU threads.', '2', tonumber)
  p:option('--bench-batch', 'Batch size of the speed measurement.', '8', tonumber)
  p:option('--iters', 'Timed forward passes per model and round.', '50', tonumber)
  p:flag('--qat', 'Also fine-tune with fake quantization (1 epoch) and convert.')
  p:flag('--qat-bn', 'Also QAT with BatchNorm kept and trained (fuse_modules_qat; a ResNet), 1 epoch.')
  p:flag('--prune', 'Also prune 50% of the conv channels, fine-tune 1 epoch, and quantize.')
  p:flag('--prune-residual', "With --prune and a ResNet: also its residual streams' channels.")
  p:option('--export', 'Write weights and data as PyTorch files into this directory.')
  p:option('--backend', 'int8 gemm: auto (= own), own, onednn (where built).', 'auto')
  local opts = p:parse(argv)
  if opts.prune_residual and (opts.model ~= 'resnet18' or not opts.prune) then
    p:error('--prune-residual needs --prune and a ResNet (--model resnet18)')
  end
  return opts
end

local function datasets(opts)
  local xtr, ytr = common.load(opts, true)
  local xte, yte = common.load(opts, false)
  return xtr, ytr, xte, yte
end

local accuracy, nparams = common.accuracy, common.nparams
local function train(model, x, y, epochs, lr) return common.train(model, x, y, epochs, lr, nil, true) end

local function file_size(path)
  local f = assert(io.open(path, 'rb'))
  local n = f:seek('end')
  f:close()
  return n
end

-- median ms per forward of each model, rounds alternating between them;
-- METRIC=cpu times the calling thread's CPU time instead of the wall clock
-- (what a loaded machine leaves meaningful, at --threads 1)
local cpu_metric = os.getenv('METRIC') == 'cpu'
local function speed(models, x, iters)
  local now = cpu_metric and posix.thread_cpu or posix.now
  local times = {}
  for i = 1, #models do times[i] = {} end
  flow.no_grad(function()
    for _, m in ipairs(models) do for _ = 1, 3 do m(x) end end
    for _ = 1, 5 do
      for i, m in ipairs(models) do
        local t = now()
        for _ = 1, iters do m(x) end
        times[i][#times[i] + 1] = (now() - t) / iters * 1e3
      end
    end
  end)
  for i = 1, #models do table.sort(times[i]); times[i] = times[i][3] end
  return times
end

-- a fused copy of the float model (eval-mode BatchNorm folded)
local function fused(model)
  if model.fuse_model == nil then return Qz.fuse_modules(model, QLeNet.fusable) end
  local c = model:clone()
  c:eval()
  return c:fuse_model()
end

-- a copy fused for QAT with BatchNorm kept (ConvBnReLU2d ...), in training mode
local function fused_qat(model)
  local c = model:clone()
  c:train()
  if model.fuse_model == nil then return Qz.fuse_modules_qat(c, QLeNet.fusable) end
  return c:fuse_model(true)
end

local function ptq(model, xcal, batches)
  local f = fused(model)
  f.qconfig = Qz.get_default_qconfig('x86')
  local p = Qz.prepare(f)
  local list = {}
  for i = 1, batches do
    local s = (i - 1) * 64 + 1
    if s > xcal:size(1) then break end
    list[#list + 1] = xcal:narrow(1, s, math.min(64, xcal:size(1) - s + 1))
  end
  Qz.calibrate(p, list)
  return Qz.convert(p)
end

local function main(argv)
  local opts = parse_args(argv)
  flow.set_num_threads(opts.threads)
  Qz.set_backend(opts.backend)
  flow.manual_seed(0)
  local xtr, ytr, xte, yte = datasets(opts)
  print(('Fashion-MNIST: %d training, %d test images; %d threads; load %s'):format(xtr:size(1), xte:size(1),
    flow.get_num_threads(), io.open('/proc/loadavg'):read('*l')))
  local model = common.model(opts.model)
  if opts.checkpoint then
    model:load_state_dict(flow.load(opts.checkpoint))
  else
    print(('training the float model (%d epoch(s))'):format(opts.epochs))
    train(model, xtr, ytr, opts.epochs)
  end
  model:eval()
  local dir = os.getenv('TMPDIR') or '/tmp'
  local t0 = posix.now()
  local q = ptq(model, xtr, opts.calib_batches)
  local t_ptq = posix.now() - t0
  local dyn = Qz.quantize_dynamic(model, {nn.Linear}, {dtype = flow.qint8})
  local rows = {}
  local function row(name, m, size)
    rows[#rows + 1] = {name, accuracy(m, xte, yte), size, m}
  end
  flow.save(model:state_dict(), dir .. '/ptq_fp32.safetensors')
  flow.save(q:state_dict(), dir .. '/ptq_int8.safetensors')
  flow.save(dyn:state_dict(), dir .. '/ptq_dyn.safetensors')
  row('fp32', model, file_size(dir .. '/ptq_fp32.safetensors'))
  row('int8 static (PTQ)', q, file_size(dir .. '/ptq_int8.safetensors'))
  row('int8 dynamic (Linear)', dyn, file_size(dir .. '/ptq_dyn.safetensors'))

  if opts.qat then
    print('QAT: 1 epoch of fake-quantized fine-tuning')
    local f = fused(model)
    f:train()
    f.qconfig = Qz.get_default_qat_qconfig('x86')
    local p = Qz.prepare_qat(f)
    train(p, xtr, ytr, 1, 1e-4)
    p:apply(Qz.disable_observer)
    local qq = Qz.convert(p)
    flow.save(qq:state_dict(), dir .. '/ptq_qat.safetensors')
    row('int8 QAT', qq, file_size(dir .. '/ptq_qat.safetensors'))
  end
  if opts.qat_bn then
    -- PyTorch's recipe: BatchNorm trains its statistics under fake
    -- quantization, is frozen at the end, and convert folds it
    print('QAT with BatchNorm kept: 1 epoch of fake-quantized fine-tuning')
    local p = fused_qat(model)
    p.qconfig = Qz.get_default_qat_qconfig('x86')
    p = Qz.prepare_qat(p)
    train(p, xtr, ytr, 1, 1e-4)
    p:apply(Qz.nn.qat.freeze_bn_stats)
    p:apply(Qz.disable_observer)
    local qq = Qz.convert(p)
    flow.save(qq:state_dict(), dir .. '/ptq_qat_bn.safetensors')
    row('int8 QAT, BatchNorm kept', qq, file_size(dir .. '/ptq_qat_bn.safetensors'))
  end
  if opts.prune then
    -- the LeNet's conv chains; a ResNet's block-internal channels (its residual
    -- stream stays: every block of a stage sums into it)
    local chains = model.prunable_chains and model:prunable_chains({residual = opts.prune_residual})
      or QLeNet.prunable
    print(('pruning 50%% of the channels of %d conv chains and groups (L1), 1 epoch of fine-tuning')
          :format(#chains))
    local pruned = nn.utils.prune.prune_channels(model, chains, {amount = 0.5})
    train(pruned, xtr, ytr, 1, 5e-4)
    flow.save(pruned:state_dict(), dir .. '/ptq_pruned.safetensors')
    row(('fp32 pruned 50%% (%d params vs %d)'):format(nparams(pruned), nparams(model)), pruned,
        file_size(dir .. '/ptq_pruned.safetensors'))
    local pq = ptq(pruned, xtr, opts.calib_batches)
    flow.save(pq:state_dict(), dir .. '/ptq_pruned_int8.safetensors')
    row('int8 pruned 50%', pq, file_size(dir .. '/ptq_pruned_int8.safetensors'))
  end

  local xb = xte:narrow(1, 1, opts.bench_batch)
  local models = {}
  for i, r in ipairs(rows) do models[i] = r[4] end
  local ms = speed(models, xb, opts.iters)
  print(('\nPTQ (fuse, calibrate %d batches, convert): %.2f s'):format(opts.calib_batches, t_ptq))
  print(('%-40s %9s %12s %14s %8s'):format('model', 'accuracy', 'size (KiB)',
    ('batch %d (ms)'):format(opts.bench_batch), 'speedup'))
  for i, r in ipairs(rows) do
    print(('%-40s %8.2f%% %12.1f %14.3f %7.2fx'):format(r[1], 100 * r[2], r[3] / 1024, ms[i], ms[1] / ms[i]))
  end
  print(('load after: %s'):format(io.open('/proc/loadavg'):read('*l')))

  if opts.export then
    flow.save_torch(model:state_dict(), ('%s/%s_fp32.pt'):format(opts.export, opts.model))
    local cal = xtr:narrow(1, 1, math.min(xtr:size(1), 64 * opts.calib_batches))
    flow.save_torch({calib = cal, test_x = xte, test_y = yte - 1}, opts.export .. '/data.pt')
    print('exported to ' .. opts.export)
  end
end

return main(arg or {})
