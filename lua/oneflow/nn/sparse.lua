-- oneflow.nn.sparse: Embedding (1-based ids; padding_idx 1-based too).
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local init = require 'oneflow.nn.initialization'
local F = require 'oneflow.nn.functional'

local Module, parse, fail = module.Module, U.parse, U.fail
local M = {}

local Embedding = Module:subclass('Embedding')
M.Embedding = Embedding

local spec = {{'num_embeddings', U.REQUIRED}, {'embedding_dim', U.REQUIRED}, {'padding_idx', nil},
              {'max_norm', nil}, {'norm_type', 2}, {'scale_grad_by_freq', false},
              {'sparse', false}, {'_weight', nil}, {'_freeze', false}, {'device', nil},
              {'dtype', nil}}

local function check_padding(num, pad)
  if pad == nil then return nil end
  if pad == 0 or pad > num or pad < -num then
    fail(('Embedding: padding_idx must be within 1..%d (or -%d..-1), got %d'):format(num, num, pad))
  end
  return pad < 0 and num + pad + 1 or pad
end

--- A lookup table of embeddings for 1-based ids: `nn.Embedding(1000, 64)(ids)`.
-- weight [num, dim] ~ N(0, 1), the padding_idx row zero.
-- @function nn.Embedding
-- @tparam int num_embeddings the number of ids (ids are 1 .. num_embeddings)
-- @tparam int embedding_dim
-- @tparam[opt] table opts `{padding_idx =, max_norm =, norm_type = 2, scale_grad_by_freq =, sparse =}`
-- @treturn Module
function Embedding:__init(...)
  Module.__init(self)
  local a = parse('Embedding', spec, ...)
  self.num_embeddings, self.embedding_dim = a.num_embeddings, a.embedding_dim
  self.padding_idx = check_padding(a.num_embeddings, a.padding_idx)
  self.max_norm, self.norm_type = a.max_norm, a.norm_type
  self.scale_grad_by_freq, self.sparse = a.scale_grad_by_freq, a.sparse
  if a._weight then
    self.weight = module.Parameter(a._weight, not a._freeze)
  else
    self.weight = module.Parameter(flow.empty({a.num_embeddings, a.embedding_dim}, {dtype = a.dtype}))
    self:reset_parameters()
  end
end

function Embedding:reset_parameters()
  init.normal_(self.weight)
  if self.padding_idx then
    flow.no_grad(function() self.weight[self.padding_idx]:fill_(0) end)
  end
end

function Embedding:forward(ids)
  return F.embedding(ids, self.weight, {padding_idx = self.padding_idx, max_norm = self.max_norm,
                                        norm_type = self.norm_type, sparse = self.sparse})
end

module.keeps_no_tensors(Embedding)   -- nn.module's rule: its forward keeps none

function Embedding:extra_repr()
  local s = ('%d, %d'):format(self.num_embeddings, self.embedding_dim)
  if self.padding_idx then s = s .. ', padding_idx=' .. self.padding_idx end
  if self.max_norm then s = s .. ', max_norm=' .. self.max_norm end
  if self.sparse then s = s .. ', sparse=true' end
  return s
end

--- nn.Embedding.from_pretrained(weight, {freeze = true, padding_idx =, ...})
function Embedding.from_pretrained(weight, opts)
  opts = require('oneflow._args').check_options('Embedding.from_pretrained', opts,
      {'freeze', 'max_norm', 'norm_type', 'padding_idx', 'sparse'})
  if weight:dim() ~= 2 then fail('Embedding.from_pretrained: embeddings parameter is expected to be 2-dimensional') end
  return Embedding(weight:size(1), weight:size(2), {
    _weight = weight, _freeze = opts.freeze ~= false, padding_idx = opts.padding_idx,
    max_norm = opts.max_norm, norm_type = opts.norm_type, sparse = opts.sparse})
end

return M
