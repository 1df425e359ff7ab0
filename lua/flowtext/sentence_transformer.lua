-- flowtext.sentence_transformer: sentence embeddings the way the
-- sentence-transformers library computes them from a model folder such as
-- all-MiniLM-L6-v2's: BERT (flowtext.bert) over WordPiece ids, pooling over
-- the tokens the attention mask keeps (1_Pooling/config.json: mean, cls,
-- max or mean_sqrt_len), then L2 normalisation when modules.json lists a
-- Normalize module.
--
--   local st = text.SentenceTransformer(dir)
--   local e = st:encode({'A man is eating food.', 'A man rides a horse.'})  -- [2, 384] float32
--   print(e[1]:dot(e[2]):item())                                          -- cosine similarity
local A = require 'oneflow._args'
local flow = require 'oneflow'
local bert = require 'flowtext.bert'
local files = require 'flowtext._files'
local tokenizer = require 'flowtext.tokenizer'

local fail = A.fail
local M = {}

local exists, read_json = files.exists, files.read_json

local MODULES = {
  ['sentence_transformers.models.Transformer'] = 'transformer',
  ['sentence_transformers.models.Pooling'] = 'pooling',
  ['sentence_transformers.models.Normalize'] = 'normalize',
}

local POOL_MODES = {'pooling_mode_cls_token', 'pooling_mode_mean_tokens', 'pooling_mode_max_tokens',
                    'pooling_mode_mean_sqrt_len_tokens'}

-- a module, as sentence-transformers' is (an nn.Sequential), so that what
-- takes a model takes it: quantize_dynamic, state_dict, to / bfloat16, eval
local SentenceTransformer = flow.nn.Module:subclass('SentenceTransformer')
M.SentenceTransformer = SentenceTransformer

--- SentenceTransformer(dir[, {max_seq_length =}]): the model folder (the
-- one with modules.json, config.json, model.safetensors, the tokenizer
-- files and 1_Pooling/config.json). max_seq_length defaults to
-- sentence_bert_config.json's (else the tokenizer's max length).
function SentenceTransformer:__init(dir, opts)
  local op = 'SentenceTransformer'
  flow.nn.Module.__init(self)
  if type(dir) ~= 'string' then fail(('%s: expected a model folder (string), got %s'):format(op, type(dir))) end
  opts = A.check_options(op, opts, {'max_seq_length'})
  local pooling_dir, normalize = '1_Pooling', false
  if exists(dir .. '/modules.json') then
    local mods = read_json(op, dir .. '/modules.json')
    local seen = {}
    for _, m in ipairs(type(mods) == 'table' and mods or {}) do
      local kind = MODULES[m.type]
      if not kind then
        fail(('%s: %s/modules.json: module %s is not supported (Transformer, Pooling, Normalize)'):format(
          op, dir, tostring(m.type)))
      end
      if kind == 'transformer' and m.path ~= '' then
        fail(('%s: %s/modules.json: the Transformer must be the folder itself, not %q'):format(op, dir, m.path))
      end
      if kind == 'pooling' then pooling_dir = m.path end
      if kind == 'normalize' then normalize = true end
      seen[kind] = true
    end
    if not seen.transformer or not seen.pooling then
      fail(('%s: %s/modules.json needs a Transformer and a Pooling module'):format(op, dir))
    end
  end
  self.normalize = normalize
  local pool = read_json(op, dir .. '/' .. pooling_dir .. '/config.json')
  self.pooling_mode = nil
  for _, k in ipairs(POOL_MODES) do
    if pool[k] == true then
      if self.pooling_mode then
        fail(('%s: %s/%s/config.json sets both %s and %s (one pooling mode only)'):format(
          op, dir, pooling_dir, self.pooling_mode, k))
      end
      self.pooling_mode = k
    end
  end
  for _, k in ipairs({'pooling_mode_weightedmean_tokens', 'pooling_mode_lasttoken'}) do
    if pool[k] == true then fail(('%s: %s/%s/config.json: %s is not supported'):format(op, dir, pooling_dir, k)) end
  end
  if not self.pooling_mode then
    fail(('%s: %s/%s/config.json sets no pooling mode'):format(op, dir, pooling_dir))
  end
  self.tokenizer = tokenizer.BertTokenizer(dir)
  self.model = bert.BertModel.from_pretrained(dir, {add_pooling_layer = false})
  local sb_path = dir .. '/sentence_bert_config.json'
  local sb = exists(sb_path) and read_json(op, sb_path) or {}
  self.max_seq_length = opts.max_seq_length or tonumber(sb.max_seq_length) or self.tokenizer.max_length
  A.integer(op, self.max_seq_length, 2, 'max_seq_length')
  local npos = self.model.config.max_position_embeddings
  if self.max_seq_length > npos or self.max_seq_length < 2 then
    fail(('%s: max_seq_length %d is outside 2..%d (the position table)'):format(op, self.max_seq_length, npos))
  end
  self.dim = self.model.config.hidden_size
end

--- Pools token embeddings x [B, L, H] with mask [B, L] (1 = token) into [B, H].
function SentenceTransformer:pool(x, mask)
  local m = mask:to(x.dtype):unsqueeze(3)
  local mode = self.pooling_mode
  if mode == 'pooling_mode_cls_token' then return x:select(2, 1) end
  if mode == 'pooling_mode_max_tokens' then
    return x:masked_fill(m:eq(0):expand_as(x), -1e9):max(2)
  end
  local sum = (x * m):sum(2)
  local n = m:sum(2):clamp({min = 1e-9})
  if mode == 'pooling_mode_mean_sqrt_len_tokens' then return sum / n:sqrt() end
  return sum / n
end

--- Embeddings of one batch from the tokenizer's output (a table with
-- input_ids, attention_mask): [B, H].
function SentenceTransformer:forward(batch)
  local out = self.model(batch.input_ids, {attention_mask = batch.attention_mask,
                                           token_type_ids = batch.token_type_ids})
  local e = self:pool(out.last_hidden_state, batch.attention_mask)
  if self.normalize then e = flow.nn.functional.normalize(e, {p = 2, dim = 2}) end
  return e
end

--- st:encode(list_of_strings[, {batch_size = 32}]) -> float32 [N, H].
-- Sentences are batched by length in characters (as sentence-transformers
-- does, so a batch pads little) and the rows come back in the list's order; sentences
-- longer than max_seq_length tokens are truncated. No gradients.
function SentenceTransformer:encode(list, opts)
  local op = 'SentenceTransformer:encode'
  opts = A.check_options(op, opts, {'batch_size'})
  if type(list) == 'string' then list = {list} end
  if type(list) ~= 'table' then fail(('%s: expected a list of strings, got %s'):format(op, A.describe(list))) end
  local bs = opts.batch_size or 32
  A.integer(op, bs, 2, 'batch_size')
  if bs < 1 then fail(('%s: batch_size must be positive, got %d'):format(op, bs)) end
  local n = #list
  if n == 0 then return flow.zeros(0, self.dim) end
  local lens, order = {}, {}
  for i, s in ipairs(list) do
    if type(s) ~= 'string' then fail(('%s: item %d is %s, not a string'):format(op, i, A.describe(s))) end
    -- characters (code points), as sentence-transformers' len(text): the
    -- batches hold the same sentences as its, which dynamic quantization
    -- (a range per batch) can tell apart
    lens[i] = #s - select(2, s:gsub('[\128-\191]', ''))
    order[i] = i
  end
  table.sort(order, function(a, b) if lens[a] ~= lens[b] then return lens[a] > lens[b] end return a < b end)
  local rows = {}
  flow.no_grad(function()
    for start = 1, n, bs do
      local idx, texts = {}, {}
      for j = start, math.min(n, start + bs - 1) do
        idx[#idx + 1] = order[j]
        texts[#texts + 1] = list[order[j]]
      end
      local e = self:forward(self.tokenizer(texts, {max_length = self.max_seq_length}))
      for j, i in ipairs(idx) do rows[i] = e[j] end
    end
  end)
  return flow.stack(rows, 1):to(flow.float32)
end

return M
