-- Every public function that takes an options table rejects an unknown key
-- with an error naming the op, the key and the nearest known key. The table
-- CASES lists, per function, the op name its errors use, one of its known
-- option keys and a call with minimal valid arguments plus an options table
-- (`o`); the spec misspells the key (see `misspell`) and checks the message.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F, optim = flow.nn, flow.nn.functional, flow.optim
local data = require 'oneflow.utils.data'
local T = require 'flowvision.transforms'
local TF = require 'flowvision.transforms.functional'
local A = require 'oneflow._args'
local VM = require 'flowvision.models'
local VL = require 'flowvision.layers'
local VD = require 'flowvision.datasets'

local x = flow.ones(2, 3)
local x4 = flow.ones(1, 2, 4, 4)
local w4 = flow.ones(2, 2, 3, 3)
local ids = flow.tensor({1, 2}, {dtype = flow.int64})
local function params() return {flow.ones(2, {requires_grad = true})} end
local function opt() return optim.SGD(params(), {lr = 0.1}) end
local ds = data.TensorDataset(x)

-- {label, op name in the error, known key, function(o) calling with options o}
local CASES = {
  -- flow.* factories
  {'flow.zeros', 'zeros', 'dtype', function(o) return flow.zeros(2, o) end},
  {'flow.ones', 'ones', 'dtype', function(o) return flow.ones(2, o) end},
  {'flow.empty', 'empty', 'dtype', function(o) return flow.empty(2, o) end},
  {'flow.full', 'full', 'dtype', function(o) return flow.full({2}, 1, o) end},
  {'flow.tensor', 'tensor', 'requires_grad', function(o) return flow.tensor({1}, o) end},
  {'flow.zeros_like', 'zeros_like', 'dtype', function(o) return flow.zeros_like(x, o) end},
  {'flow.ones_like', 'ones_like', 'device', function(o) return flow.ones_like(x, o) end},
  {'flow.full_like', 'full_like', 'dtype', function(o) return flow.full_like(x, 2, o) end},
  {'flow.empty_like', 'empty_like', 'dtype', function(o) return flow.empty_like(x, o) end},
  {'x:new_zeros', 'new_zeros', 'dtype', function(o) return x:new_zeros({2}, o) end},
  {'x:new_ones', 'new_ones', 'dtype', function(o) return x:new_ones({2}, o) end},
  {'flow.eye', 'eye', 'dtype', function(o) return flow.eye(2, o) end},
  {'flow.arange', 'arange', 'dtype', function(o) return flow.arange(0, 3, 1, o) end},
  {'flow.linspace', 'linspace', 'dtype', function(o) return flow.linspace(0, 1, 3, o) end},
  {'flow.rand', 'rand', 'requires_grad', function(o) return flow.rand(2, o) end},
  {'flow.randn', 'randn', 'dtype', function(o) return flow.randn(2, o) end},
  {'flow.randint', 'randint', 'dtype', function(o) return flow.randint(0, 3, {2}, o) end},
  {'flow.randperm', 'randperm', 'dtype', function(o) return flow.randperm(3, o) end},
  {'flow.rand_like', 'rand_like', 'dtype', function(o) return flow.rand_like(x, o) end},
  -- elementwise
  {'flow.add', 'add', 'alpha', function(o) return flow.add(x, x, o) end},
  {'x:sub', 'sub', 'alpha', function(o) return x:sub(x, o) end},
  {'flow.div', 'div', 'rounding_mode', function(o) return flow.div(x, x, o) end},
  {'flow.isclose', 'isclose', 'equal_nan', function(o) return flow.isclose(x, x, o) end},
  {'flow.allclose', 'allclose', 'atol', function(o) return flow.allclose(x, x, o) end},
  -- sorting
  {'x:sort', 'sort', 'descending', function(o) return x:sort(1, o) end},
  {'x:topk', 'topk', 'largest', function(o) return x:topk(1, 2, o) end},
  {'x:unique', 'unique', 'return_counts', function(o) return x:unique(o) end},
  {'flow.tril_indices', 'tril_indices', 'offset', function(o) return flow.tril_indices(3, 3, o) end},
  {'flow.triu_indices', 'triu_indices', 'dtype', function(o) return flow.triu_indices(3, 3, o) end},
  {'flow.logspace', 'logspace', 'base', function(o) return flow.logspace(0, 1, 3, o) end},
  {'flow.searchsorted', 'searchsorted', 'right',
   function(o) return flow.searchsorted(flow.arange(3):float(), x, o) end},
  {'flow.bucketize', 'bucketize', 'out_int32', function(o) return flow.bucketize(x, flow.arange(3):float(), o) end},
  {'flow.cdist', 'cdist', 'p', function(o) return flow.cdist(x, x, o) end},
  {'flow.multinomial', 'multinomial', 'replacement', function(o) return flow.multinomial(x, 1, o) end},
  {'x:diff', 'diff', 'append', function(o) return x:diff(o) end},
  {'x:quantile', 'quantile', 'interpolation', function(o) return x:quantile(0.5, 1, o) end},
  {'x:to', 'to', 'dtype', function(o) return x:to(o) end},
  {'x:to(device, opts)', 'to', 'non_blocking', function(o) return x:to('cpu', o) end},
  {'flow.bincount', 'bincount', 'minlength',
   function(o) return flow.bincount(flow.tensor({1, 2}, {dtype = flow.int64}), o) end},
  -- reductions (function and method forms)
  {'x:sum', 'sum', 'keepdim', function(o) return x:sum(2, o) end},
  {'flow.sum', 'sum', 'dtype', function(o) return flow.sum(x, o) end},
  {'x:mean', 'mean', 'keepdim', function(o) return x:mean(1, o) end},
  {'x:prod', 'prod', 'keepdim', function(o) return x:prod(1, o) end},
  {'x:amax', 'amax', 'keepdim', function(o) return x:amax(1, o) end},
  {'x:amin', 'amin', 'keepdim', function(o) return x:amin(1, o) end},
  {'x:all', 'all', 'keepdim', function(o) return x:all(1, o) end},
  {'x:any', 'any', 'keepdim', function(o) return x:any(1, o) end},
  {'x:logsumexp', 'logsumexp', 'keepdim', function(o) return x:logsumexp(1, o) end},
  {'x:norm', 'norm', 'keepdim', function(o) return x:norm(2, 1, o) end},
  {'x:var', 'var', 'correction', function(o) return x:var(1, o) end},
  {'x:std', 'std', 'unbiased', function(o) return x:std(1, o) end},
  {'x:max', 'max', 'keepdim', function(o) return x:max(1, o) end},
  {'x:min', 'min', 'keepdim', function(o) return x:min(1, o) end},
  {'x:argmax', 'argmax', 'keepdim', function(o) return x:argmax(1, o) end},
  {'x:argmin', 'argmin', 'keepdim', function(o) return x:argmin(1, o) end},
  {'x:softmax', 'softmax', 'dtype', function(o) return x:softmax(1, o) end},
  {'x:log_softmax', 'log_softmax', 'dtype', function(o) return x:log_softmax(1, o) end},
  {'x:cumsum', 'cumsum', 'dtype', function(o) return x:cumsum(1, o) end},
  {'x:cumprod', 'cumprod', 'dtype', function(o) return x:cumprod(1, o) end},
  -- nn.functional
  {'F.linear', 'linear', 'bias', function(o) return F.linear(x, flow.ones(2, 3), o) end},
  {'F.conv2d', 'conv2d', 'padding', function(o) return F.conv2d(x4, w4, o) end},
  {'F.max_pool2d', 'max_pool2d', 'stride', function(o) return F.max_pool2d(x4, 2, o) end},
  {'F.avg_pool2d', 'avg_pool2d', 'padding', function(o) return F.avg_pool2d(x4, 2, o) end},
  {'F.layer_norm', 'layer_norm', 'eps', function(o) return F.layer_norm(x, {3}, o) end},
  {'F.group_norm', 'group_norm', 'eps', function(o) return F.group_norm(x4, 1, o) end},
  {'F.cross_entropy', 'cross_entropy', 'label_smoothing',
   function(o) return F.cross_entropy(x, ids, o) end},
  {'F.nll_loss', 'nll_loss', 'reduction', function(o) return F.nll_loss(x, ids, o) end},
  {'F.mse_loss', 'mse_loss', 'reduction', function(o) return F.mse_loss(x, x, o) end},
  {'F.l1_loss', 'l1_loss', 'reduction', function(o) return F.l1_loss(x, x, o) end},
  {'F.smooth_l1_loss', 'smooth_l1_loss', 'beta', function(o) return F.smooth_l1_loss(x, x, o) end},
  {'F.pad', 'pad', 'mode', function(o) return F.pad(x4, {1, 1}, o) end},
  {'F.interpolate', 'interpolate', 'scale_factor',
   function(o) o.size = {8, 8}; return F.interpolate(x4, o) end},
  {'F.dropout', 'dropout', 'training', function(o) return F.dropout(x, 0.5, o) end},
  {'F.softmax', 'softmax', 'dtype', function(o) return F.softmax(x, 1, o) end},
  {'F.normalize', 'normalize', 'eps', function(o) return F.normalize(x, o) end},
  {'F.elu', 'elu', 'alpha', function(o) return F.elu(x, o) end},
  {'F.embedding', 'embedding', 'padding_idx', function(o) return F.embedding(ids, flow.ones(3, 2), o) end},
  {'F.kl_div', 'kl_div', 'reduction', function(o) return F.kl_div(x, x, o) end},
  {'F.binary_cross_entropy', 'binary_cross_entropy', 'reduction',
   function(o) return F.binary_cross_entropy(x:sigmoid(), x:sigmoid(), o) end},
  {'F.cosine_similarity', 'cosine_similarity', 'eps', function(o) return F.cosine_similarity(x, x, o) end},
  {'F.gelu', 'gelu', 'approximate', function(o) return F.gelu(x, o) end},
  {'nn.utils.clip_grad_norm_', 'clip_grad_norm_', 'norm_type',
   function(o) return nn.utils.clip_grad_norm_(params(), 1, o) end},
  -- nn module constructors
  {'nn.Linear', 'Linear', 'bias', function(o) return nn.Linear(3, 2, o) end},
  {'nn.Conv2d', 'Conv2d', 'stride', function(o) return nn.Conv2d(2, 2, 3, o) end},
  {'nn.BatchNorm2d', 'BatchNorm2d', 'momentum', function(o) return nn.BatchNorm2d(2, o) end},
  {'nn.LayerNorm', 'LayerNorm', 'elementwise_affine', function(o) return nn.LayerNorm(3, o) end},
  {'nn.Dropout', 'Dropout', 'inplace', function(o) return nn.Dropout(0.5, o) end},
  {'nn.Embedding', 'Embedding', 'padding_idx', function(o) return nn.Embedding(4, 2, o) end},
  {'nn.LSTM', 'LSTM', 'batch_first', function(o) return nn.LSTM(2, 3, o) end},
  {'nn.MaxPool2d', 'MaxPool2d', 'stride', function(o) return nn.MaxPool2d(2, o) end},
  {'nn.CrossEntropyLoss', 'CrossEntropyLoss', 'label_smoothing',
   function(o) return nn.CrossEntropyLoss(o) end},
  {'nn.MSELoss', 'MSELoss', 'reduction', function(o) return nn.MSELoss(o) end},
  {'nn.GroupNorm', 'GroupNorm', 'affine', function(o) return nn.GroupNorm(1, 2, o) end},
  {'nn.MultiheadAttention', 'MultiheadAttention', 'dropout',
   function(o) return nn.MultiheadAttention(4, 2, o) end},
  {'MultiheadAttention:forward', 'MultiheadAttention', 'need_weights',
   function(o) local q = flow.ones(1, 2, 4); return nn.MultiheadAttention(4, 2)(q, q, q, o) end},
  {'TransformerEncoderLayer:forward', 'TransformerEncoderLayer', 'is_causal',
   function(o) return nn.TransformerEncoderLayer(4, 2)(flow.ones(1, 2, 4), o) end},
  {'nn.utils.rnn.pad_sequence', 'pad_sequence', 'batch_first',
   function(o) return nn.utils.rnn.pad_sequence({flow.ones(2), flow.ones(3)}, o) end},
  {'nn.utils.weight_norm', 'weight_norm', 'name', function(o) return nn.utils.weight_norm(nn.Linear(3, 2), o) end},
  {'nn.Embedding.from_pretrained', 'Embedding.from_pretrained', 'freeze',
   function(o) return nn.Embedding.from_pretrained(flow.ones(3, 2), o) end},
  {'module:named_modules', 'named_modules', 'prefix', function(o) return nn.Linear(3, 2):named_modules(o) end},
  {'amp.GradScaler', 'GradScaler', 'enabled', function(o) return flow.amp.GradScaler(o) end},
  {'autograd.gradcheck', 'gradcheck', 'atol',
   function(o) return flow.autograd.gradcheck(function(a) return a * 2 end,
                                              {flow.ones(2, {dtype = flow.float64, requires_grad = true})}, o) end},
  -- optimizers and schedulers
  {'optim.SGD', 'SGD', 'momentum', function(o) return optim.SGD(params(), o) end},
  {'optim.Adam', 'Adam', 'weight_decay', function(o) return optim.Adam(params(), o) end},
  {'optim.AdamW', 'AdamW', 'amsgrad', function(o) return optim.AdamW(params(), o) end},
  {'optim.RMSprop', 'RMSprop', 'momentum', function(o) return optim.RMSprop(params(), o) end},
  {'optim.Adagrad', 'Adagrad', 'lr_decay', function(o) return optim.Adagrad(params(), o) end},
  {'StepLR', 'StepLR', 'gamma', function(o) return optim.lr_scheduler.StepLR(opt(), 2, o) end},
  {'MultiStepLR', 'MultiStepLR', 'gamma',
   function(o) return optim.lr_scheduler.MultiStepLR(opt(), {2}, o) end},
  {'ExponentialLR', 'ExponentialLR', 'last_epoch',
   function(o) return optim.lr_scheduler.ExponentialLR(opt(), 0.9, o) end},
  {'CosineAnnealingLR', 'CosineAnnealingLR', 'eta_min',
   function(o) return optim.lr_scheduler.CosineAnnealingLR(opt(), 10, o) end},
  -- data
  {'DataLoader', 'DataLoader', 'batch_size', function(o) return data.DataLoader(ds, o) end},
  {'RandomSampler', 'RandomSampler', 'replacement', function(o) return data.RandomSampler(ds, o) end},
  -- flowvision transforms
  {'TF.resize', 'resize', 'antialias', function(o) return TF.resize(flow.ones(3, 8, 8), 4, o) end},
  {'TF.pad', 'pad', 'fill', function(o) return TF.pad(flow.ones(3, 8, 8), 1, o) end},
  {'TF.rotate', 'rotate', 'expand', function(o) return TF.rotate(flow.ones(3, 8, 8), 10, o) end},
  {'vision.utils.make_grid', 'make_grid', 'nrow',
   function(o) return require('flowvision').utils.make_grid(flow.ones(1, 3, 4, 4), o) end},
  {'T.Resize', 'Resize', 'interpolation', function(o) return T.Resize(4, o) end},
  {'T.RandomCrop', 'RandomCrop', 'padding', function(o) return T.RandomCrop(4, o) end},
  {'T.Normalize', 'Normalize', 'inplace', function(o) return T.Normalize({0.5}, {0.5}, o) end},
  {'T.Pad', 'Pad', 'padding_mode', function(o) return T.Pad(1, o) end},
  {'T.RandomErasing', 'RandomErasing', 'scale', function(o) return T.RandomErasing(o) end},
  {'T.RandomResizedCrop', 'RandomResizedCrop', 'ratio', function(o) return T.RandomResizedCrop(4, o) end},
  {'T.RandomRotation', 'RandomRotation', 'expand', function(o) return T.RandomRotation(10, o) end},
  {'T.RandomAffine', 'RandomAffine', 'shear', function(o) return T.RandomAffine(10, o) end},
  -- flowvision models, layers, datasets and augmentations
  {'models.resnet18', 'ResNet', 'num_classes', function(o) return VM.resnet18(o) end},
  {'models.alexnet', 'AlexNet', 'dropout', function(o) return VM.alexnet(o) end},
  {'models.vgg11', 'VGG', 'init_weights', function(o) return VM.vgg11(o) end},
  {'models.mobilenet_v2', 'MobileNetV2', 'width_mult', function(o) return VM.mobilenet_v2(o) end},
  {'models.squeezenet1_0', 'SqueezeNet', 'num_classes', function(o) return VM.squeezenet1_0(o) end},
  {'layers.SEModule', 'SEModule', 'rd_ratio', function(o) return VL.SEModule(8, o) end},
  {'layers.ConvNormAct', 'ConvNormAct', 'stride', function(o) return VL.ConvNormAct(2, 2, 3, o) end},
  {'layers.DropBlock2d', 'DropBlock2d', 'batchwise', function(o) return VL.DropBlock2d(0.1, 3, o) end},
  {'datasets.MNIST', 'MNIST', 'train', function(o) return VD.MNIST('/nonexistent', o) end},
  {'data.Mixup', 'Mixup', 'mixup_alpha', function(o) return require('flowvision.data').Mixup(o) end},
  {'detection.roi_align', 'roi_align', 'spatial_scale', function(o)
    return require('flowvision.models.detection.ops').roi_align(x4, flow.tensor({{0, 0, 0, 2, 2}}), {2, 2}, o) end},
  -- autograd, graph, pruning, transformers
  {'y:backward', 'backward', 'retain_graph', function(o)
    local p = flow.ones(2, {requires_grad = true}); return p:sum():backward(o) end},
  {'autograd.grad', 'autograd.grad', 'allow_unused', function(o)
    local p = flow.ones(2, {requires_grad = true}); return flow.autograd.grad(p:sum(), p, nil, o) end},
  {'Graph:add_optimizer', 'add_optimizer', 'lr_sch', function(o) return nn.Graph():add_optimizer(opt(), o) end},
  {'prune.global_unstructured', 'prune.global_unstructured', 'amount', function(o)
    return nn.utils.prune.global_unstructured({{nn.Linear(2, 2), 'weight'}}, o) end},
  {'generate_square_subsequent_mask', 'generate_square_subsequent_mask', 'dtype',
   function(o) return nn.Transformer.generate_square_subsequent_mask(3, o) end},
}

-- the tools (doc/tools.md); the writer's directory is removed after the specs
local tools_logdir = os.tmpname()
os.remove(tools_logdir)
do
  local plot, TB = flow.utils.plot, flow.utils.tensorboard
  local prof = flow.profiler.profile(function() return x + 1 end)
  local G = nn.Graph:subclass('OptionsG')
  function G.build(_, a) return a * 2 end
  local g = G()
  g(x)
  local logdir = tools_logdir
  local writer
  local function w()
    writer = writer or TB.SummaryWriter(logdir)
    return writer
  end
  for _, c in ipairs({
    {'flow.utils.summary', 'summary', 'depth', function(o) return flow.utils.summary(nn.Linear(3, 2), {1, 3}, o) end},
    {'plot.Figure', 'plot.Figure', 'title', function(o) return plot.Figure(o) end},
    {'fig:line', 'plot.line', 'label', function(o) return plot.Figure():line({1, 2}, o) end},
    {'plot.curves', 'plot.Figure', 'xlabel', function(o) return plot.curves(nil, {a = {1, 2}}, o) end},
    {'profiler.profile', 'profiler.profile', 'record_shapes', function(o) return flow.profiler.profile(o) end},
    {'prof:key_averages', 'profiler.key_averages', 'group_by_input_shape',
     function(o) return prof:key_averages(o) end},
    {'averages:table', 'profiler.table', 'row_limit', function(o) return prof:key_averages():table(o) end},
    {'SummaryWriter', 'SummaryWriter', 'comment', function(o) return TB.SummaryWriter(logdir, o) end},
    {'writer:add_histogram', 'add_histogram', 'bins', function(o) return w():add_histogram('h', {1, 2}, 1, o) end},
    {'writer:add_image', 'add_image', 'dataformats',
     function(o) return w():add_image('i', flow.ones(1, 2, 2), 1, o) end},
    {'graph:to_dot', 'nn.Graph.to_dot', 'params', function(o) return g:to_dot(o) end},
    {'graph:render', 'nn.Graph.render', 'format', function(o) return g:render(logdir .. '.svg', o) end},
  }) do CASES[#CASES + 1] = c end
end

-- A plausible misspelling of key, one edit away: a doubled letter dropped,
-- an 's' added, or the last letter dropped.
local function misspell(key)
  local d = key:gsub('(%a)%1', '%1', 1)
  if d ~= key then return d end
  if #key <= 2 then return key .. 's' end
  if key:sub(-1) ~= 's' then return key .. 's' end
  return key:sub(1, -2)
end

describe('unknown option keys', function()
  teardown(function() os.execute('rm -rf ' .. tools_logdir .. ' ' .. tools_logdir .. '.svg*') end)
  it('suggest the nearest known key, only when it is close', function()
    assert.equal('keepdim', A.nearest('keepdims', {'keepdim', 'dtype', 'dim'}))
    assert.equal('dtype', A.nearest('dtyp', {dtype = true, device = true}))
    assert.is_nil(A.nearest('completely_different', {'keepdim', 'dtype'}))
    H.raises(function() x:sum(2, {keepdims = true}) end,
             "sum: unknown option 'keepdims' (did you mean 'keepdim'?)")
    local err = H.raises(function() flow.zeros(2, {zzzzzz = 1}) end, "zeros: unknown option 'zzzzzz'")
    assert.is_nil(err:find('did you mean', 1, true))
  end)

  it('are errors at the user\'s line for ' .. #CASES .. ' functions of the public API', function()
    assert.is_true(#CASES >= 60)
    local failures = {}
    for _, c in ipairs(CASES) do
      local label, op, key, call = c[1], c[2], c[3], c[4]
      -- the call is valid with the key itself ...
      local bad = misspell(key)
      local ok, err = pcall(call, {[bad] = false})
      err = tostring(err)
      local want = ("%s: unknown option '%s' (did you mean '%s'?)"):format(op, bad, key)
      if ok then
        failures[#failures + 1] = label .. ': accepted ' .. bad
      elseif not err:find(want, 1, true) then
        failures[#failures + 1] = label .. ': ' .. err
      elseif not err:find('options_spec.lua', 1, true) then
        failures[#failures + 1] = label .. ': not at the user\'s line: ' .. err
      end
    end
    assert.same({}, failures)
  end)
end)

describe('operator and argument errors', function()
  it('a + b shape mismatch names the user\'s line', function()
    local a, b = flow.ones(2, 3), flow.ones(3, 2)
    H.raises(function() return a + b end, 'options_spec.lua:', 'add: shapes [2,3] and [3,2] cannot be broadcast')
    H.raises(function() return a * b end, 'options_spec.lua:', 'mul: shapes')
    H.raises(function() a:add_(b) end, 'options_spec.lua:', 'add')
  end)

  it('< and <= on tensors say to use x:lt(y) / x:le(y)', function()
    local a, b = flow.ones(2), flow.zeros(2)
    H.raises(function() return a < b end, 'options_spec.lua:', 'x:lt(y)')
    H.raises(function() return a > b end, 'x:gt(y)')
    H.raises(function() return a <= b end, 'options_spec.lua:', 'x:le(y)')
    H.raises(function() return a >= b end, 'x:ge(y)')
  end)

  it('nil or wrong-typed tensor arguments of F functions name the argument', function()
    H.raises(function() F.linear(nil, x) end, 'options_spec.lua:',
             'linear: argument 1 (input) must be a tensor, got nil')
    H.raises(function() F.linear(x, nil) end, 'linear: argument 2 (weight) must be a tensor, got nil')
    H.raises(function() F.relu(nil) end, 'options_spec.lua:', 'relu: argument 1 (input) must be a tensor, got nil')
    H.raises(function() F.mse_loss(x, 3) end, 'mse_loss: argument 2 (target) must be a tensor, got number')
    H.raises(function() F.cosine_similarity(nil, x) end, 'cosine_similarity: argument 1 (x1) must be a tensor')
    -- every public F function
    local bad = {}
    for k, f in pairs(F) do
      if type(f) == 'function' and k:sub(1, 1) ~= '_' and k ~= 'legacy_reduction' then
        local ok, err = pcall(f, nil, x)
        err = tostring(err)
        if ok or not err:find(k .. ': argument 1 (', 1, true) or not err:find('options_spec.lua:', 1, true) then
          bad[#bad + 1] = k .. ': ' .. err
        end
      end
    end
    assert.same({}, bad)
  end)
end)
