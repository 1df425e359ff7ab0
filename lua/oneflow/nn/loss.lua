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
loss_class('MSELoss', 'mse_loss', {red}, 2)
loss_class('L1Loss', 'l1_loss', {red}, 2)
loss_class('SmoothL1Loss', 'smooth_l1_loss', {red, {'beta', 1}}, 2)
loss_class('HuberLoss', 'huber_loss', {red, {'delta', 1}}, 2)
loss_class('BCELoss', 'binary_cross_entropy', {{'weight', nil}, red}, 2)
loss_class('BCEWithLogitsLoss', 'binary_cross_entropy_with_logits',
           {{'weight', nil}, red, {'pos_weight', nil}}, 2)
loss_class('KLDivLoss', 'kl_div', {red, {'log_target', false}}, 2)
loss_class('NLLLoss', 'nll_loss', {{'weight', nil}, {'ignore_index', -100}, red}, 2)
loss_class('CrossEntropyLoss', 'cross_entropy',
           {{'weight', nil}, {'ignore_index', -100}, red, {'label_smoothing', 0}}, 2)
loss_class('MarginRankingLoss', 'margin_ranking_loss', {{'margin', 0}, red}, 3)
loss_class('HingeEmbeddingLoss', 'hinge_embedding_loss', {{'margin', 1}, red}, 2)
loss_class('SoftMarginLoss', 'soft_margin_loss', {red}, 2)
loss_class('CosineEmbeddingLoss', 'cosine_embedding_loss', {{'margin', 0}, red}, 3)
loss_class('TripletMarginLoss', 'triplet_margin_loss',
           {{'margin', 1}, {'p', 2}, {'eps', 1e-6}, {'swap', false}, red}, 3)
loss_class('MultiLabelSoftMarginLoss', 'multilabel_soft_margin_loss', {{'weight', nil}, red}, 2)
loss_class('PoissonNLLLoss', 'poisson_nll_loss',
           {{'log_input', true}, {'full', false}, {'eps', 1e-8}, red}, 2)
loss_class('GaussianNLLLoss', 'gaussian_nll_loss', {{'full', false}, {'eps', 1e-6}, red}, 3)
-- nn.DistillationLoss({temperature = 4, alpha = 0.9})(student_logits, teacher_logits, target)
loss_class('DistillationLoss', 'distillation_loss', {{'temperature', 4}, {'alpha', 0.9}, red}, 3)

return M
