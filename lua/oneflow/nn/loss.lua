-- oneflow.nn.loss: loss modules over nn.functional; constructor options are
-- PyTorch's keyword arguments, e.g.
--   nn.CrossEntropyLoss({label_smoothing = 0.1, ignore_index = 1})
--   nn.BCEWithLogitsLoss({pos_weight = w})   nn.KLDivLoss({reduction = 'batchmean'})
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local F = require 'oneflow.nn.functional'

local Module, parse = module.Module, U.parse
local M = {}

-- spec lists the constructor arguments in PyTorch's order; tensor options
-- (weight, pos_weight) are registered as buffers, as in PyTorch.
local function loss_class(name, fname, spec, nin)
  local cls = Module:subclass(name)
  local keys = {}
  for i, s in ipairs(spec) do keys[i] = s[1] end
  function cls:__init(...)
    Module.__init(self)
    local a = parse(name, spec, ...)
    for _, k in ipairs(keys) do
      if k == 'weight' or k == 'pos_weight' then self:register_buffer(k, a[k])
      else self[k] = a[k] end
    end
  end
  function cls:forward(...)
    local args = {...}
    local opts = {}
    for _, k in ipairs(keys) do opts[k] = self[k] end
    args[nin + 1] = opts
    return F[fname](unpack(args, 1, nin + 1))
  end
  M[name] = cls
  return cls
end

--- The module form of F.cross_entropy: `nn.CrossEntropyLoss()(logits, y)`,
-- class ids 1-based. Every loss module (nn.MSELoss, nn.L1Loss, nn.NLLLoss,
-- nn.BCEWithLogitsLoss, ...) takes its F function's options, positionally in
-- PyTorch's order or by name, and is called with the F function's tensors.
-- @function nn.CrossEntropyLoss
-- @tparam[opt] Tensor weight a weight per class
-- @tparam[opt=-100] int ignore_index a target to leave out
-- @tparam[opt='mean'] string reduction 'mean', 'sum' or 'none'
-- @tparam[opt=0] number label_smoothing
-- @tparam[opt] table opts the same by name
-- @treturn Module

local red = {'reduction', 'mean'}
--- nn.MSELoss({reduction = 'mean'}): mean squared error.
-- @function nn.MSELoss
loss_class('MSELoss', 'mse_loss', {red}, 2)
--- nn.L1Loss({reduction = 'mean'}): mean absolute error.
-- @function nn.L1Loss
loss_class('L1Loss', 'l1_loss', {red}, 2)
--- nn.SmoothL1Loss({beta = 1, reduction = 'mean'}): quadratic below beta, L1 above.
-- @function nn.SmoothL1Loss
loss_class('SmoothL1Loss', 'smooth_l1_loss', {red, {'beta', 1}}, 2)
--- nn.HuberLoss({delta = 1, reduction = 'mean'}): quadratic below delta, linear above.
-- @function nn.HuberLoss
loss_class('HuberLoss', 'huber_loss', {red, {'delta', 1}}, 2)
--- nn.BCELoss({weight =, reduction = 'mean'}): binary cross entropy of probabilities.
-- @function nn.BCELoss
loss_class('BCELoss', 'binary_cross_entropy', {{'weight', nil}, red}, 2)
--- nn.BCEWithLogitsLoss({weight =, pos_weight =, reduction = 'mean'}): sigmoid + binary cross entropy, computed
-- stably.
-- @function nn.BCEWithLogitsLoss
loss_class('BCEWithLogitsLoss', 'binary_cross_entropy_with_logits',
           {{'weight', nil}, red, {'pos_weight', nil}}, 2)
--- nn.KLDivLoss({reduction = 'mean', log_target = false}): the KL divergence, input given as log-probabilities.
-- @function nn.KLDivLoss
loss_class('KLDivLoss', 'kl_div', {red, {'log_target', false}}, 2)
--- nn.NLLLoss({weight =, ignore_index = -100, reduction = 'mean'}): negative log-likelihood of log-probabilities;
-- targets are 1-based classes.
-- @function nn.NLLLoss
loss_class('NLLLoss', 'nll_loss', {{'weight', nil}, {'ignore_index', -100}, red}, 2)
loss_class('CrossEntropyLoss', 'cross_entropy',
           {{'weight', nil}, {'ignore_index', -100}, red, {'label_smoothing', 0}}, 2)
--- nn.MarginRankingLoss({margin = 0, reduction = 'mean'}): max(0, -y * (x1 - x2) + margin).
-- @function nn.MarginRankingLoss
loss_class('MarginRankingLoss', 'margin_ranking_loss', {{'margin', 0}, red}, 3)
--- nn.HingeEmbeddingLoss({margin = 1, reduction = 'mean'}): x for y = 1, max(0, margin - x) for y = -1.
-- @function nn.HingeEmbeddingLoss
loss_class('HingeEmbeddingLoss', 'hinge_embedding_loss', {{'margin', 1}, red}, 2)
--- nn.SoftMarginLoss({reduction = 'mean'}): log(1 + exp(-y * x)).
-- @function nn.SoftMarginLoss
loss_class('SoftMarginLoss', 'soft_margin_loss', {red}, 2)
--- nn.CosineEmbeddingLoss({margin = 0, reduction = 'mean'}): 1 - cos(x1, x2) for y = 1, max(0, cos - margin) for
-- y = -1.
-- @function nn.CosineEmbeddingLoss
loss_class('CosineEmbeddingLoss', 'cosine_embedding_loss', {{'margin', 0}, red}, 3)
--- nn.TripletMarginLoss({margin = 1, p = 2, eps = 1e-6, swap = false, reduction = 'mean'}): max(d(a, p) - d(a, n)
-- + margin, 0).
-- @function nn.TripletMarginLoss
loss_class('TripletMarginLoss', 'triplet_margin_loss',
           {{'margin', 1}, {'p', 2}, {'eps', 1e-6}, {'swap', false}, red}, 3)
--- nn.MultiLabelSoftMarginLoss({weight =, reduction = 'mean'}): multi-label one-vs-all logistic loss.
-- @function nn.MultiLabelSoftMarginLoss
loss_class('MultiLabelSoftMarginLoss', 'multilabel_soft_margin_loss', {{'weight', nil}, red}, 2)
--- nn.PoissonNLLLoss({log_input = true, full = false, eps = 1e-8, reduction = 'mean'}): the Poisson negative
-- log-likelihood.
-- @function nn.PoissonNLLLoss
loss_class('PoissonNLLLoss', 'poisson_nll_loss',
           {{'log_input', true}, {'full', false}, {'eps', 1e-8}, red}, 2)
--- nn.GaussianNLLLoss({full = false, eps = 1e-6, reduction = 'mean'}): the Gaussian negative log-likelihood of
-- (input, target, var).
-- @function nn.GaussianNLLLoss
loss_class('GaussianNLLLoss', 'gaussian_nll_loss', {{'full', false}, {'eps', 1e-6}, red}, 3)
--- nn.DistillationLoss({temperature = 4, alpha = 0.9, reduction = 'mean'}): F.distillation_loss as a module,
-- called as loss(student_logits, teacher_logits, target).
-- @function nn.DistillationLoss
loss_class('DistillationLoss', 'distillation_loss', {{'temperature', 4}, {'alpha', 0.9}, red}, 3)

return M
