-- flowtext.gpt: a decoder-only transformer (GPT-2 layout, as Karpathy's
-- nanoGPT names it), small enough to train from scratch on a CPU. Shared by
-- examples/gpt/ and its specs.
--
--   local gpt = require 'flowtext.gpt'
--   local model = gpt.GPT({vocab_size = 65, block_size = 64, n_layer = 2, n_head = 4, n_embd = 64})
--   local logits, loss = model(idx, targets)      -- idx, targets: int64 [B, T], 1-based ids
--   local out = model:generate(idx, 100, {temperature = 0.8, top_k = 20, top_p = 0.9})
--
-- Parameter names follow nanoGPT (transformer.wte / wpe / h.N.{ln_1, attn.c_attn,
-- attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj} / ln_f, lm_head), so a PyTorch
-- nanoGPT state dict maps by name (the lm_head is not tied to wte here).
-- Attention is F.scaled_dot_product_attention (causal); the MLP uses exact GELU.
local A = require 'oneflow._args'
local flow = require 'oneflow'
local tracer = require 'oneflow.onnx.tracer'
local C = require('oneflow._C').C

local nn = flow.nn
local F = nn.functional
local fail = A.fail
local M = {}

local DEFAULTS = {vocab_size = 65, block_size = 64, n_layer = 2, n_head = 4, n_embd = 64,
                  dropout = 0, bias = true}

--- GPTConfig(t): t over the defaults above; unknown keys are errors naming the nearest.
function M.GPTConfig(t)
  t = t or {}
  A.check_options('GPTConfig', t, DEFAULTS)
  local c = {}
  for k, v in pairs(DEFAULTS) do
    if t[k] == nil then c[k] = v else c[k] = t[k] end
  end
  for _, k in ipairs({'vocab_size', 'block_size', 'n_layer', 'n_head', 'n_embd'}) do
    A.integer('GPTConfig', c[k], nil, k)
    if c[k] < 1 then fail(('GPTConfig: %s must be positive, got %d'):format(k, c[k])) end
  end
  if c.n_embd % c.n_head ~= 0 then
    fail(('GPTConfig: n_embd %d is not a multiple of n_head %d'):format(c.n_embd, c.n_head))
  end
  return c
end

------------------------------------------------------------------ modules
local CausalSelfAttention = nn.Module:subclass('CausalSelfAttention')
M.CausalSelfAttention = CausalSelfAttention

function CausalSelfAttention:__init(c)
  nn.Module.__init(self)
  self.n_head, self.n_embd, self.dropout_p = c.n_head, c.n_embd, c.dropout
  self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, {bias = c.bias})
  self.c_proj = nn.Linear(c.n_embd, c.n_embd, {bias = c.bias})
  self.resid_dropout = nn.Dropout(c.dropout)
end

--- x [B, T, C]; cache (optional) {k =, v =} of earlier positions [B, H, S, D],
-- replaced by the keys and values including these T positions. With a cache
-- the T new queries see all S earlier keys and, among themselves, causally.
function CausalSelfAttention:forward(x, cache)
  local b, t = x:size(1), x:size(2)
  local h = self.n_head
  local d = self.n_embd / h
  local qkv = self.c_attn(x)
  local function heads(i)
    return qkv:narrow(3, (i - 1) * self.n_embd + 1, self.n_embd):reshape(b, t, h, d):transpose(2, 3)
  end
  local q, k, v = heads(1), heads(2), heads(3)
  local opts = {dropout_p = self.training and self.dropout_p or 0}
  if cache and cache.k then
    local s = cache.k:size(3)
    k, v = flow.cat({cache.k, k}, 3), flow.cat({cache.v, v}, 3)
    if t > 1 then   -- new query i (1-based) sees keys 1 .. s + i
      local qi = flow.arange(1, t + 1):reshape(t, 1)
      local kj = flow.arange(1, s + t + 1):reshape(1, s + t)
      opts.attn_mask = kj:le(qi + s)
    end
  else
    opts.is_causal = true
  end
  if cache then cache.k, cache.v = k, v end
  local y = F.scaled_dot_product_attention(q, k, v, opts)
  y = y:transpose(2, 3):reshape(b, t, self.n_embd)
  return self.resid_dropout(self.c_proj(y))
end

local MLP = nn.Module:subclass('MLP')
M.MLP = MLP

function MLP:__init(c)
  nn.Module.__init(self)
  self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, {bias = c.bias})
  self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, {bias = c.bias})
  self.dropout = nn.Dropout(c.dropout)
end

function MLP:forward(x) return self.dropout(self.c_proj(F.gelu(self.c_fc(x)))) end

local Block = nn.Module:subclass('Block')
M.Block = Block

function Block:__init(c)
  nn.Module.__init(self)
  self.ln_1 = nn.LayerNorm(c.n_embd)
  self.attn = CausalSelfAttention(c)
  self.ln_2 = nn.LayerNorm(c.n_embd)
  self.mlp = MLP(c)
end

function Block:forward(x, cache)
  x = x + self.attn(self.ln_1(x), cache)
  return x + self.mlp(self.ln_2(x))
end

local GPT = nn.Module:subclass('GPT')
M.GPT = GPT

function GPT:__init(config)
  nn.Module.__init(self)
  local c = M.GPTConfig(config)
  self.config = c
  local blocks = {}
  for i = 1, c.n_layer do blocks[i] = Block(c) end
  self.transformer = nn.ModuleDict({
    wte = nn.Embedding(c.vocab_size, c.n_embd),
    wpe = nn.Embedding(c.block_size, c.n_embd),
    drop = nn.Dropout(c.dropout),
    h = nn.ModuleList(blocks),
    ln_f = nn.LayerNorm(c.n_embd),
  })
  self.lm_head = nn.Linear(c.n_embd, c.vocab_size, {bias = false})
  -- GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer)
  flow.no_grad(function()
    for name, p in self:named_parameters() do
      if name:match('weight$') and p:dim() == 2 then
        local std = name:match('c_proj%.weight$') and 0.02 / math.sqrt(2 * c.n_layer) or 0.02
        p:normal_(0, std)
      elseif name:match('bias$') and not name:match('ln_') then
        p:zero_()
      end
    end
  end)
end

-- idx must be an integer [B, T] tensor of ids in 1..vocab_size and, with
-- `past` earlier positions, past + T must fit the position table.
function GPT:check_input(idx, past)
  local c = self.config
  if not (A.is_tensor(idx) or (type(idx) == 'table' and idx.is_global == true)) then
    fail(('GPT: idx must be a tensor, got %s'):format(A.describe(idx)))
  end
  if idx:dim() ~= 2 then fail(('GPT: idx must be [batch, time], got %s'):format(A.shape_str(idx, ', '))) end
  if idx.dtype.is_floating_point then
    fail(('GPT: idx must hold integer ids, got %s (shape %s)'):format(tostring(idx.dtype), A.shape_str(idx, ', ')))
  end
  local t = idx:size(2)
  if t == 0 then fail(('GPT: idx %s has no positions'):format(A.shape_str(idx, ', '))) end
  if past + t > c.block_size then
    fail(('GPT: idx %s%s is past the position table (block_size %d)'):format(A.shape_str(idx, ', '),
      past > 0 and (' after %d cached positions'):format(past) or '', c.block_size))
  end
  -- inside nn.Graph's build values cannot be read: there the lookup's own
  -- bounds check (index_select) reports a bad id at run time
  if idx:numel() > 0 and C.of_tracing() == 0 then
    -- the values are read with ONNX recording paused: a check on the example
    -- input, not part of an exported graph
    -- (a global idx: this rank's shard, each rank checks its own)
    local loc = type(idx) == 'table' and idx:to_local() or idx
    local lo, hi = tracer.paused(function() return loc:min():item(), loc:max():item() end)
    if lo < 1 or hi > c.vocab_size then
      fail(('GPT: idx %s holds id %d, outside the vocabulary 1..%d'):format(A.shape_str(idx, ', '),
        lo < 1 and lo or hi, c.vocab_size))
    end
  end
end

--- model(idx[, targets][, cache]) -> logits [B, T, vocab][, loss]
-- targets: int64 [B, T] (cross-entropy over all positions) or nil.
-- cache: a table from GPT:new_cache() (generation): the positions continue
-- after those already cached, and the cache grows by T.
function GPT:forward(idx, targets, cache)
  local past = cache and cache.len or 0
  self:check_input(idx, past)
  local t = idx:size(2)
  -- positions past+1 .. past+T; made from idx (a running sum of ones) so that
  -- an ONNX export keeps the sequence axis dynamic (idx * 0 + 1, not
  -- ones_like: elementwise ops also keep a global idx global; [B, T], not
  -- one row: a global op on a dim of size 1 cannot tell its logical size)
  local pos = (idx * 0 + 1):cumsum(2)
  if past > 0 then pos = pos + past end
  local x = self.transformer.wte(idx) + self.transformer.wpe(pos)
  x = self.transformer.drop(x)
  for i = 1, #self.transformer.h do
    x = self.transformer.h[i](x, cache and cache.layers[i])
  end
  if cache then cache.len = past + t end
  local logits = self.lm_head(self.transformer.ln_f(x))
  if targets == nil then return logits end
  local v = self.config.vocab_size
  return logits, F.cross_entropy(logits:reshape(-1, v), targets:reshape(-1))
end

--- an empty key/value cache for generate / forward
function GPT:new_cache()
  local layers = {}
  for i = 1, self.config.n_layer do layers[i] = {} end
  return {len = 0, layers = layers}
end

local GEN_OPTS = {temperature = 1, top_k = 0, top_p = 1, use_cache = true}

-- the next id for one row of logits (a Lua array) after temperature, top-k, top-p
local function sample(row, o)
  local n = #row
  if o.temperature == 0 then   -- greedy: the first maximum
    local best = 1
    for i = 2, n do if row[i] > row[best] then best = i end end
    return best
  end
  local order = {}
  for i = 1, n do order[i] = i end
  table.sort(order, function(a, b) return row[a] > row[b] or (row[a] == row[b] and a < b) end)
  local keep = n
  if o.top_k > 0 and o.top_k < n then keep = o.top_k end
  local m = row[order[1]]
  local p, sum = {}, 0
  for r = 1, keep do
    p[r] = math.exp((row[order[r]] - m) / o.temperature)
    sum = sum + p[r]
  end
  if o.top_p < 1 then   -- the smallest prefix whose probability reaches top_p (at least one)
    local acc = 0
    for r = 1, keep do
      acc = acc + p[r] / sum
      if acc >= o.top_p then keep = r break end
    end
    sum = 0
    for r = 1, keep do sum = sum + p[r] end
  end
  local u = flow.rand(1):item() * sum
  for r = 1, keep do
    u = u - p[r]
    if u <= 0 then return order[r] end
  end
  return order[keep]
end

--- model:generate(idx, max_new_tokens[, {temperature = 1, top_k = 0, top_p = 1, use_cache = true}])
-- -> int64 [B, T + max_new_tokens]: idx followed by sampled ids.
-- temperature 0 is greedy (argmax); top_k 0 and top_p 1 keep every id.
-- Draws use flow's global generator (flow.manual_seed makes them repeat).
-- The prompt must hold at least one token (an empty one is an error: a
-- character model can start from a newline, as examples/gpt does);
-- max_new_tokens = 0 returns a copy of idx. With use_cache the prompt is run
-- once and each new token costs one position; once the sequence reaches
-- block_size the window slides and each step recomputes the last block_size
-- positions (as without the cache), so both give the same ids.
function GPT:generate(idx, max_new_tokens, opts)
  opts = opts or {}
  A.check_options('GPT:generate', opts, GEN_OPTS)
  local o = {}
  for k, v in pairs(GEN_OPTS) do if opts[k] == nil then o[k] = v else o[k] = opts[k] end end
  A.integer('GPT:generate', max_new_tokens, 2, 'max_new_tokens')
  if max_new_tokens < 0 then fail(('GPT:generate: max_new_tokens must be >= 0, got %d'):format(max_new_tokens)) end
  if type(o.temperature) ~= 'number' or o.temperature < 0 then
    fail(('GPT:generate: temperature must be a number >= 0, got %s'):format(tostring(o.temperature)))
  end
  A.integer('GPT:generate', o.top_k, nil, 'top_k')
  if type(o.top_p) ~= 'number' or o.top_p <= 0 or o.top_p > 1 then
    fail(('GPT:generate: top_p must be in (0, 1], got %s'):format(tostring(o.top_p)))
  end
  if not A.is_tensor(idx) or idx:dim() ~= 2 or idx:size(2) == 0 then
    fail(('GPT:generate: the prompt must be an integer [batch, time] tensor with at least one token, got %s')
      :format(A.is_tensor(idx) and A.shape_str(idx, ', ') or A.describe(idx)))
  end
  local bs = self.config.block_size
  local was_training = self.training
  self:eval()
  local out = idx:to(flow.int64):clone()
  flow.no_grad(function()
    local cache = o.use_cache and self:new_cache() or nil
    local pending = out   -- the positions the next forward must see
    for _ = 1, max_new_tokens do
      local logits
      if cache and cache.len + pending:size(2) <= bs then
        logits = self:forward(pending, nil, cache)
      else
        local t = out:size(2)
        local ctx = t > bs and out:narrow(2, t - bs + 1, bs) or out
        if cache then   -- the window slides: start a cache on it
          cache = self:new_cache()
          logits = self:forward(ctx, nil, cache)
        else
          logits = self:forward(ctx)
        end
      end
      local last = logits:select(2, logits:size(2)):float():totable()
      local nxt = {}
      for b = 1, #last do nxt[b] = {sample(last[b], o)} end
      pending = flow.tensor(nxt, {dtype = flow.int64})
      out = flow.cat({out, pending}, 2)
    end
  end)
  if was_training then self:train() end
  return out
end

--- gpt.tensor_parallel(model, placement): makes model's parameters global
-- on placement, the MLPs tensor parallel (Megatron's pair): c_fc split by
-- output features (weight, bias S(1)), c_proj by input features (weight
-- S(2): its products are partial sums, reduced once, the bias added once);
-- the rest broadcast. Feed it global ids (e.g. idx:to_global(P, flow.sbp.broadcast)).
function M.tensor_parallel(model, placement)
  local S, Bc = flow.sbp.split, flow.sbp.broadcast
  model:to_global(placement, function(name)
    if name:match('mlp%.c_fc%.') then return S(1) end
    if name:match('mlp%.c_proj%.weight$') then return S(2) end
    return Bc
  end)
  return model
end

--- gpt.char_corpus(path) -> ids (int64 [N]), chars (a list of byte values:
-- id i is the byte chars[i]), nfiles. path is a text file or a directory
-- whose regular files (not symbolic links) are concatenated in byte order
-- of their names.
function M.char_corpus(path)
  local files = {}
  local p = io.popen(('find %q -maxdepth 1 -type f 2>/dev/null | LC_ALL=C sort'):format(path))
  for f in p:lines() do files[#files + 1] = f end
  p:close()
  if #files == 0 then fail('gpt.char_corpus: no text files at ' .. tostring(path)) end
  local parts = {}
  for _, f in ipairs(files) do
    local h, err = io.open(f, 'rb')
    if not h then fail('gpt.char_corpus: cannot read ' .. f .. ': ' .. tostring(err)) end
    parts[#parts + 1] = h:read('*a')
    h:close()
  end
  local s = table.concat(parts)
  if #s < 2 then fail(('gpt.char_corpus: %s has %d bytes, too few to train on'):format(path, #s)) end
  local seen, chars, stoi = {}, {}, {}
  for i = 1, #s do seen[s:byte(i)] = true end
  for b = 0, 255 do
    if seen[b] then
      chars[#chars + 1] = b
      stoi[b] = #chars
    end
  end
  local ids = {}
  for i = 1, #s do ids[i] = stoi[s:byte(i)] end
  return flow.tensor(ids, {dtype = flow.int64}), chars, #files
end

--- the number of parameters
function GPT:num_parameters()
  local n = 0
  for _, p in ipairs(self:parameters()) do n = n + p:numel() end
  return n
end

return M
