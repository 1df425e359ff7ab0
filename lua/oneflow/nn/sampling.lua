-- oneflow.nn.sampling: EmbeddingBag (1-based ids, offsets and padding_idx),
-- MultiMarginLoss and MultiLabelMarginLoss -- modules over the functions of
-- oneflow.nn.functional.sampling.
--   local bag = nn.EmbeddingBag(1000, 64, {mode = 'sum'})
--   local y = bag(ids, offsets)                          -- [#offsets, 64]
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local init = require 'oneflow.nn.initialization'
local F = require 'oneflow.nn.functional'

local Module, parse, fail = module.Module, U.parse, U.fail
local M = {}

------------------------------------------------------------------ EmbeddingBag
local EmbeddingBag = Module:subclass('EmbeddingBag')
M.EmbeddingBag = EmbeddingBag

local bag_spec = {{'num_embeddings', U.REQUIRED}, {'embedding_dim', U.REQUIRED}, {'mode', 'mean'},
                  {'include_last_offset', false}, {'padding_idx', nil}, {'_weight', nil}, {'_freeze', false},
                  {'sparse', false}, {'device', nil}, {'dtype', nil}}

--- nn.EmbeddingBag(num_embeddings, embedding_dim, {mode = 'mean', include_last_offset =
-- false, padding_idx =, sparse = false}): weight [num, dim] ~ N(0, 1), the padding_idx row zero;
-- forward(input, offsets, per_sample_weights) as F.embedding_bag.
function EmbeddingBag:__init(...)
  Module.__init(self)
  local a = parse('EmbeddingBag', bag_spec, ...)
  local num = a.num_embeddings
  self.num_embeddings, self.embedding_dim = num, a.embedding_dim
  self.mode, self.include_last_offset, self.sparse = a.mode, a.include_last_offset, a.sparse
  local pad = a.padding_idx
  if pad ~= nil then
    if pad == 0 or pad > num or pad < -num then
      fail(('EmbeddingBag: padding_idx must be within 1..%d (or -%d..-1), got %d'):format(num, num, pad))
    end
    if pad < 0 then pad = num + pad + 1 end
  end
  self.padding_idx = pad
  if a._weight then
    self.weight = module.Parameter(a._weight, not a._freeze)
  else
    self.weight = module.Parameter(flow.empty({num, a.embedding_dim}, {dtype = a.dtype}))
    self:reset_parameters()
  end
end

function EmbeddingBag:reset_parameters()
  init.normal_(self.weight)
  if self.padding_idx then
    flow.no_grad(function() self.weight[self.padding_idx]:fill_(0) end)
  end
end

function EmbeddingBag:forward(input, offsets, per_sample_weights)
  return F.embedding_bag(input, self.weight, offsets, {
    mode = self.mode, per_sample_weights = per_sample_weights, padding_idx = self.padding_idx,
    include_last_offset = self.include_last_offset, sparse = self.sparse})
end

function EmbeddingBag:extra_repr()
  local s = ("%d, %d, mode='%s'"):format(self.num_embeddings, self.embedding_dim, self.mode)
  if self.padding_idx then s = s .. ', padding_idx=' .. self.padding_idx end
  if self.sparse then s = s .. ', sparse=true' end
  return s
end

--- nn.EmbeddingBag.from_pretrained(weight, {freeze = true, mode = 'mean', include_last_offset =, padding_idx =,
-- sparse =})
function EmbeddingBag.from_pretrained(weight, opts)
  opts = require('oneflow._args').check_options('EmbeddingBag.from_pretrained', opts,
      {'freeze', 'include_last_offset', 'mode', 'padding_idx', 'sparse'})
  if weight:dim() ~= 2 then
    fail('EmbeddingBag.from_pretrained: embeddings parameter is expected to be 2-dimensional')
  end
  return EmbeddingBag(weight:size(1), weight:size(2), {
    _weight = weight, _freeze = opts.freeze ~= false, mode = opts.mode, padding_idx = opts.padding_idx,
    include_last_offset = opts.include_last_offset, sparse = opts.sparse})
end

------------------------------------------------------------------ margin losses
local MultiMarginLoss = Module:subclass('MultiMarginLoss')
M.MultiMarginLoss = MultiMarginLoss

local mm_spec = {{'p', 1}, {'margin', 1}, {'weight', nil}, {'reduction', 'mean'}}

--- nn.MultiMarginLoss({p = 1, margin = 1, weight =, reduction = 'mean'}); weight is a buffer.
function MultiMarginLoss:__init(...)
  Module.__init(self)
  local a = parse('MultiMarginLoss', mm_spec, ...)
  self.p, self.margin, self.reduction = a.p, a.margin, a.reduction
  self:register_buffer('weight', a.weight)
end

function MultiMarginLoss:forward(x, target)
  return F.multi_margin_loss(x, target, {p = self.p, margin = self.margin, weight = self.weight,
                                         reduction = self.reduction})
end

local MultiLabelMarginLoss = Module:subclass('MultiLabelMarginLoss')
M.MultiLabelMarginLoss = MultiLabelMarginLoss

--- nn.MultiLabelMarginLoss({reduction = 'mean'}): targets are 1-based class ids, 0 ends each list.
function MultiLabelMarginLoss:__init(...)
  Module.__init(self)
  self.reduction = parse('MultiLabelMarginLoss', {{'reduction', 'mean'}}, ...).reduction
end

function MultiLabelMarginLoss:forward(x, target)
  return F.multilabel_margin_loss(x, target, {reduction = self.reduction})
end

------------------------------------------------------------------ CTCLoss
local CTCLoss = Module:subclass('CTCLoss')
M.CTCLoss = CTCLoss

--- nn.CTCLoss({blank = 1, reduction = 'mean', zero_infinity = false}): blank is a 1-based class id;
-- forward(log_probs, targets, input_lengths, target_lengths) as F.ctc_loss.
function CTCLoss:__init(...)
  Module.__init(self)
  local a = parse('CTCLoss', {{'blank', 1}, {'reduction', 'mean'}, {'zero_infinity', false}}, ...)
  self.blank, self.reduction, self.zero_infinity = a.blank, a.reduction, a.zero_infinity
end

function CTCLoss:forward(log_probs, targets, input_lengths, target_lengths)
  return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, {
    blank = self.blank, reduction = self.reduction, zero_infinity = self.zero_infinity})
end

return M
