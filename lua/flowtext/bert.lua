-- flowtext.bert: the BERT encoder (Devlin et al.) as Hugging Face's
-- BertModel, with its parameter names, so that a Hugging Face checkpoint
-- (model.safetensors) loads by name:
--   embeddings.{word_embeddings, position_embeddings, token_type_embeddings, LayerNorm}
--   encoder.layer.N.attention.self.{query, key, value}
--   encoder.layer.N.attention.output.{dense, LayerNorm}
--   encoder.layer.N.intermediate.dense, encoder.layer.N.output.{dense, LayerNorm}
--   pooler.dense (optional)
--
--   local bert = text.BertModel.from_pretrained(dir)   -- config.json + model.safetensors
--   local out = bert(input_ids, {attention_mask = mask})
--   out.last_hidden_state  -- [B, L, hidden];  out.pooler_output -- [B, hidden]
--
-- Ids (input_ids, token_type_ids, position_ids) are 1-based, as
-- nn.Embedding takes them; attention_mask is 1 on tokens and 0 on padding.
-- Attention is F.scaled_dot_product_attention with a boolean key mask.
local A = require 'oneflow._args'
local C = require('oneflow._C').C
local flow = require 'oneflow'
local json = require 'oneflow.utils.json'
local tracer = require 'oneflow.onnx.tracer'
local module = require 'oneflow.nn.module'

local nn = flow.nn
local F = nn.functional
local fail = A.fail
local M = {}
-- The forwards below free each value they made once it was read, where
-- oneflow.nn.module's rules allow (doc/nn.md, "Values a forward frees");
-- the same numbers either way.
local frees, free, step, keeps_no_tensors = module.frees, module.free, module.step, module.keeps_no_tensors

local CONFIG_KEYS = {
  vocab_size = 30522, hidden_size = 768, num_hidden_layers = 12, num_attention_heads = 12,
  intermediate_size = 3072, hidden_act = 'gelu', hidden_dropout_prob = 0.1,
  attention_probs_dropout_prob = 0.1, max_position_embeddings = 512, type_vocab_size = 2,
  layer_norm_eps = 1e-12, pad_token_id = 0, add_pooling_layer = true,
}

-- The activations Hugging Face names in config.json that we have.
local ACT = {
  gelu = function(x) return F.gelu(x) end,
  gelu_new = function(x) return F.gelu(x, {approximate = 'tanh'}) end,
  gelu_pytorch_tanh = function(x) return F.gelu(x, {approximate = 'tanh'}) end,
  relu = function(x) return F.relu(x) end,
  silu = function(x) return F.silu(x) end,
}

--- BertConfig(t): t's BERT settings over Hugging Face's defaults. Keys of
-- config.json that do not change the encoder's arithmetic are ignored;
-- settings we cannot follow (another position embedding type, an unknown
-- activation) are errors.
function M.BertConfig(t)
  t = t or {}
  local c = {}
  for k, v in pairs(CONFIG_KEYS) do
    if t[k] ~= nil and t[k] ~= json.null then c[k] = t[k] else c[k] = v end
  end
  if not ACT[c.hidden_act] then
    fail(('BertConfig: hidden_act %q is not supported (have gelu, gelu_new, gelu_pytorch_tanh, relu, silu)')
      :format(tostring(c.hidden_act)))
  end
  if t.position_embedding_type ~= nil and t.position_embedding_type ~= 'absolute' then
    fail(('BertConfig: position_embedding_type %q is not supported (absolute only)'):format(
      tostring(t.position_embedding_type)))
  end
  if t.is_decoder == true or t.add_cross_attention == true then
    fail('BertConfig: decoder / cross-attention BERT is not supported (an encoder only)')
  end
  for _, k in ipairs({'vocab_size', 'hidden_size', 'num_hidden_layers', 'num_attention_heads',
                      'intermediate_size', 'max_position_embeddings', 'type_vocab_size'}) do
    A.integer('BertConfig', c[k], 1, k)
    if c[k] < 1 then fail(('BertConfig: %s must be positive, got %d'):format(k, c[k])) end
  end
  if c.hidden_size % c.num_attention_heads ~= 0 then
    fail(('BertConfig: hidden_size %d is not a multiple of num_attention_heads %d'):format(
      c.hidden_size, c.num_attention_heads))
  end
  return c
end

------------------------------------------------------------------ modules
local BertEmbeddings = nn.Module:subclass('BertEmbeddings')
M.BertEmbeddings = BertEmbeddings

function BertEmbeddings:__init(c)
  nn.Module.__init(self)
  self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size, {padding_idx = c.pad_token_id + 1})
  self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
  self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
  self.LayerNorm = nn.LayerNorm(c.hidden_size, {eps = c.layer_norm_eps})
  self.dropout = nn.Dropout(c.hidden_dropout_prob)
end

-- ids must be an integer tensor [B, L] whose values lie in 1..n.
local function check_ids(what, ids, n, shape)
  if not A.is_tensor(ids) then fail(('BertModel: %s must be a tensor, got %s'):format(what, A.describe(ids))) end
  if ids:dim() ~= 2 then
    fail(('BertModel: %s must be [batch, length], got %s'):format(what, A.shape_str(ids, ', ')))
  end
  if shape and (ids:size(1) ~= shape[1] or ids:size(2) ~= shape[2]) then
    fail(('BertModel: %s is %s; input_ids is [%d, %d]'):format(what, A.shape_str(ids, ', '), shape[1], shape[2]))
  end
  if ids.dtype.is_floating_point then
    fail(('BertModel: %s must hold integer ids, got %s'):format(what, tostring(ids.dtype)))
  end
  -- inside nn.Graph's build values cannot be read: there the lookups' own
  -- bounds check (index_select) reports a bad id at run time
  if ids:numel() > 0 and C.of_tracing() == 0 then
    -- read the values with ONNX recording paused: the check is on the
    -- example inputs, not part of an exported graph
    local lo, hi = tracer.paused(function() return ids:min():item(), ids:max():item() end)
    if lo < 1 or hi > n then
      local bad = lo < 1 and lo or hi
      fail(('BertModel: %s holds id %d, outside 1..%d (ids are 1-based: the Hugging Face id + 1)'):format(
        what, bad, n))
    end
  end
end

function BertEmbeddings:forward(input_ids, token_type_ids, position_ids)
  -- made from input_ids (not from Lua sizes) so that an ONNX export keeps
  -- the batch and sequence axes dynamic: positions 1..L are a running sum of ones
  local f = frees(self, input_ids)
  local ones, made_pos = flow.ones_like(input_ids), position_ids == nil
  if position_ids == nil then position_ids = ones:cumsum(2) end
  if token_type_ids == nil then token_type_ids = ones end
  local words, types = self.word_embeddings(input_ids), self.token_type_embeddings(token_type_ids)
  local sum = words + types
  free(words, f, sum)
  free(types, f, sum)
  local positions = self.position_embeddings(position_ids)
  local x = sum + positions
  free(sum, f, x)
  free(positions, f, x)
  if made_pos then free(position_ids, f) end
  free(ones, f)
  return step(self.dropout, step(self.LayerNorm, x, f), f)
end
keeps_no_tensors(BertEmbeddings)

local BertSelfAttention = nn.Module:subclass('BertSelfAttention')
M.BertSelfAttention = BertSelfAttention

function BertSelfAttention:__init(c)
  nn.Module.__init(self)
  self.num_attention_heads = c.num_attention_heads
  self.attention_head_size = c.hidden_size / c.num_attention_heads
  self.query = nn.Linear(c.hidden_size, c.hidden_size)
  self.key = nn.Linear(c.hidden_size, c.hidden_size)
  self.value = nn.Linear(c.hidden_size, c.hidden_size)
  self.dropout_p = c.attention_probs_dropout_prob
end

-- [B, L, H*D] -> [B, H, L, D] (f: the caller's frees; the reshaped view
-- between them is freed)
function BertSelfAttention:heads(x, f)
  local b, l = x:size(1), x:size(2)
  local r = x:reshape(b, l, self.num_attention_heads, self.attention_head_size)
  local t = r:transpose(2, 3)
  if not rawequal(r, x) then free(r, f, t) end
  return t
end

--- mask: boolean [B, 1, 1, L] (true where a key may be attended) or nil.
function BertSelfAttention:forward(x, mask)
  local f = frees(self, x)
  local ql, kl, vl = self.query(x), self.key(x), self.value(x)
  local q, k, v = self:heads(ql, f), self:heads(kl, f), self:heads(vl, f)
  local o = F.scaled_dot_product_attention(q, k, v, {attn_mask = mask,
                                                     dropout_p = self.training and self.dropout_p or 0})
  for _, t in ipairs({ql, kl, vl, q, k, v}) do free(t, f, o) end
  local b, l = x:size(1), x:size(2)
  local ot = o:transpose(2, 3)
  local out = ot:reshape(b, l, self.num_attention_heads * self.attention_head_size)
  free(o, f, out)
  free(ot, f, out)
  return out
end
keeps_no_tensors(BertSelfAttention)

-- dense -> dropout -> LayerNorm(x + residual): BertSelfOutput and BertOutput
local BertResidual = nn.Module:subclass('BertResidual')
M.BertResidual = BertResidual

function BertResidual:__init(c, inner)
  nn.Module.__init(self)
  self.dense = nn.Linear(inner, c.hidden_size)
  self.LayerNorm = nn.LayerNorm(c.hidden_size, {eps = c.layer_norm_eps})
  self.dropout = nn.Dropout(c.hidden_dropout_prob)
end

function BertResidual:forward(x, residual)
  local f = frees(self, x)
  local d = step(self.dropout, self.dense(x), f)
  local sum = d + residual
  if not rawequal(d, residual) then free(d, f, sum) end
  return step(self.LayerNorm, sum, f)
end
keeps_no_tensors(BertResidual)

local BertAttention = nn.Module:subclass('BertAttention')
M.BertAttention = BertAttention

function BertAttention:__init(c)
  nn.Module.__init(self)
  self.self = BertSelfAttention(c)     -- Hugging Face's name: attention.self.query ...
  self.output = BertResidual(c, c.hidden_size)
end

function BertAttention:forward(x, mask)
  local f = frees(self, x)
  local s = self.self(x, mask)
  local out = self.output(s, x)
  free(s, f, out)
  return out
end
keeps_no_tensors(BertAttention)

local BertIntermediate = nn.Module:subclass('BertIntermediate')
M.BertIntermediate = BertIntermediate

function BertIntermediate:__init(c)
  nn.Module.__init(self)
  self.dense = nn.Linear(c.hidden_size, c.intermediate_size)
  self.act = ACT[c.hidden_act]
end

function BertIntermediate:forward(x) return step(self.act, self.dense(x), frees(self, x)) end
keeps_no_tensors(BertIntermediate)

local BertLayer = nn.Module:subclass('BertLayer')
M.BertLayer = BertLayer

function BertLayer:__init(c)
  nn.Module.__init(self)
  self.attention = BertAttention(c)
  self.intermediate = BertIntermediate(c)
  self.output = BertResidual(c, c.intermediate_size)
end

function BertLayer:forward(x, mask)
  local f = frees(self, x)
  local a = self.attention(x, mask)
  local i = self.intermediate(a)
  local out = self.output(i, a)
  if not rawequal(i, a) then free(i, f, out) end
  free(a, f, out)
  return out
end
keeps_no_tensors(BertLayer)

local BertEncoder = nn.Module:subclass('BertEncoder')
M.BertEncoder = BertEncoder

function BertEncoder:__init(c)
  nn.Module.__init(self)
  local layers = {}
  for i = 1, c.num_hidden_layers do layers[i] = BertLayer(c) end
  self.layer = nn.ModuleList(layers)
end

function BertEncoder:forward(x, mask)
  local f = frees(self, x)
  for _, l in ipairs(self.layer:children()) do
    local y = l(x, mask)
    free(x, f, y)
    x = y
  end
  return x
end
keeps_no_tensors(BertEncoder)

local BertPooler = nn.Module:subclass('BertPooler')
M.BertPooler = BertPooler

function BertPooler:__init(c)
  nn.Module.__init(self)
  self.dense = nn.Linear(c.hidden_size, c.hidden_size)
end

function BertPooler:forward(x)
  local f = frees(self, x)
  local first = x:select(2, 1)
  return step(flow.tanh, step(self.dense, first, f), f)
end
keeps_no_tensors(BertPooler)

------------------------------------------------------------------ BertModel
local BertModel = nn.Module:subclass('BertModel')
M.BertModel = BertModel

--- BertModel(config): config as BertConfig takes (config.json's keys);
-- add_pooling_layer = false leaves out the pooler.
function BertModel:__init(config)
  nn.Module.__init(self)
  local c = M.BertConfig(config)
  self.config = c
  self.embeddings = BertEmbeddings(c)
  self.encoder = BertEncoder(c)
  if c.add_pooling_layer then self.pooler = BertPooler(c) end
  self:init_weights()
end

-- Hugging Face's _init_weights: N(0, initializer_range) for Linear and
-- Embedding weights, zero biases and padding rows, LayerNorm 1 / 0.
function BertModel:init_weights()
  local std = 0.02
  flow.no_grad(function()
    for _, m in ipairs(self:modules()) do
      if flow.class.isinstance(m, nn.Linear) then
        nn.init.normal_(m.weight, {std = std})
        if m.bias ~= nil then m.bias:zero_() end
      elseif flow.class.isinstance(m, nn.Embedding) then
        nn.init.normal_(m.weight, {std = std})
        if m.padding_idx then m.weight[m.padding_idx]:fill_(0) end
      end
    end
  end)
end

--- bert(input_ids[, {attention_mask =, token_type_ids =, position_ids =}])
-- -> {last_hidden_state = [B, L, H], pooler_output = [B, H] (with the pooler)}.
function BertModel:forward(input_ids, opts)
  opts = A.check_options('BertModel', opts, {'attention_mask', 'token_type_ids', 'position_ids'})
  local c = self.config
  check_ids('input_ids', input_ids, c.vocab_size)
  local b, l = input_ids:size(1), input_ids:size(2)
  if l > c.max_position_embeddings then
    fail(('BertModel: input_ids is [%d, %d]: %d tokens are past the position table (%d positions)'):format(
      b, l, l, c.max_position_embeddings))
  end
  if opts.token_type_ids ~= nil then check_ids('token_type_ids', opts.token_type_ids, c.type_vocab_size, {b, l}) end
  if opts.position_ids ~= nil then
    check_ids('position_ids', opts.position_ids, c.max_position_embeddings, {b, l})
  end
  local mask = opts.attention_mask
  local key_mask
  if mask ~= nil then
    if not A.is_tensor(mask) then
      fail(('BertModel: attention_mask must be a tensor, got %s'):format(A.describe(mask)))
    end
    if mask:dim() ~= 2 or mask:size(1) ~= b or mask:size(2) ~= l then
      fail(('BertModel: attention_mask is %s; input_ids is [%d, %d] and the mask must be the same shape'):format(
        A.shape_str(mask, ', '), b, l))
    end
    key_mask = mask:ne(0):unsqueeze(2):unsqueeze(2)   -- [B, 1, 1, L]; no sizes baked into an export
  end
  local f = frees(self, input_ids)
  local e = self.embeddings(input_ids, opts.token_type_ids, opts.position_ids)
  local x = self.encoder(e, key_mask)
  free(e, f, x)
  return {last_hidden_state = x, pooler_output = self.pooler and self.pooler(x) or nil}
end
keeps_no_tensors(BertModel)

------------------------------------------------------------------ loading
local read_json = require('flowtext._files').read_json

--- bert:load_safetensors(path): loads a Hugging Face BertModel checkpoint
-- by name. Keys may carry the 'bert.' prefix (BertFor* checkpoints: other
-- heads are then ignored); 'embeddings.position_ids' (a buffer older
-- checkpoints store) must be 0..n-1 and is dropped; without a pooler,
-- 'pooler.*' keys are dropped. Anything else missing, extra or of another
-- shape is an error naming the keys and shapes.
function BertModel:load_safetensors(path)
  local op = 'BertModel:load_safetensors'
  local ok, sd = pcall(flow.load, path)
  if not ok then fail(('%s: %s'):format(op, tostring(sd))) end
  local has_prefix = false
  for k in pairs(sd) do if type(k) == 'string' and k:sub(1, 5) == 'bert.' then has_prefix = true end end
  local clean = {}
  for k, v in pairs(sd) do
    if has_prefix then
      if k:sub(1, 5) == 'bert.' then clean[k:sub(6)] = v end
    else
      clean[k] = v
    end
  end
  local pos = clean['embeddings.position_ids']
  if pos ~= nil then
    local n = self.config.max_position_embeddings
    if not A.is_tensor(pos) or pos:numel() ~= n
        or not flow.equal(pos:reshape(n):to(flow.int64), flow.arange(0, n, {dtype = flow.int64})) then
      fail(('%s: %s: embeddings.position_ids %s is not 0..%d'):format(op, path,
        A.is_tensor(pos) and A.shape_str(pos, ', ') or type(pos), n - 1))
    end
    clean['embeddings.position_ids'] = nil
  end
  if not self.pooler then
    for k in pairs(clean) do if k:sub(1, 7) == 'pooler.' then clean[k] = nil end end
  end
  local dtype = self.embeddings.word_embeddings.weight.dtype
  for k, v in pairs(clean) do
    if A.is_tensor(v) and v.dtype ~= dtype and v.dtype.is_floating_point then clean[k] = v:to(dtype) end
  end
  local ok2, err = pcall(self.load_state_dict, self, clean)
  if not ok2 then fail(('%s: %s: %s'):format(op, path, tostring(err))) end
  return self
end

--- BertModel.from_pretrained(dir[, {add_pooling_layer = true}]): dir/config.json
-- and dir/model.safetensors; in eval mode.
function BertModel.from_pretrained(dir, opts)
  local op = 'BertModel.from_pretrained'
  if type(dir) ~= 'string' then fail(('%s: expected a model folder (string), got %s'):format(op, type(dir))) end
  opts = A.check_options(op, opts, {'add_pooling_layer'})
  local cfg = read_json(op, dir .. '/config.json')
  if type(cfg) ~= 'table' then fail(('%s: %s/config.json is not a JSON object'):format(op, dir)) end
  local c = {}
  for k, v in pairs(cfg) do c[k] = v end
  if opts.add_pooling_layer ~= nil then c.add_pooling_layer = opts.add_pooling_layer end
  if c.model_type ~= nil and c.model_type ~= 'bert' then
    fail(('%s: %s/config.json: model_type %q is not bert'):format(op, dir, tostring(c.model_type)))
  end
  local m = BertModel(c)
  m:load_safetensors(dir .. '/model.safetensors')
  m:eval()
  return m
end

return M
