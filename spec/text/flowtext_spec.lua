-- flowtext without downloads: the WordPiece tokenizer on a small vocabulary
-- written here, a small random BERT saved and loaded by its Hugging Face
-- names (and the errors for bad checkpoints and inputs), and the
-- SentenceTransformer pipeline on a model folder made here. The parity with
-- Hugging Face on the real all-MiniLM-L6-v2 is spec/text/minilm_spec.lua.
local flow = require 'oneflow'
local json = require 'oneflow.utils.json'
local text = require 'flowtext'
local H = require 'spec.helpers'

local VOCAB = {'[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'hello', 'world', 'un', '##aff', '##able',
               'cafe', ',', '!', '.', '日', '本', 'the', '##s', 'a', 'b', 'e', '##e', 'σ', '##ι',
               '-', "'", 'it', 's', 'ᄒ', '##ᅡ', '##ᆫ'}

local function write(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end

local function vocab_dir(extra)
  local d = H.tmpdir()
  write(d .. '/vocab.txt', table.concat(VOCAB, '\n') .. '\n')
  if extra then write(d .. '/tokenizer_config.json', json.encode(extra)) end
  return d
end

local CONFIG = {vocab_size = #VOCAB, hidden_size = 16, num_hidden_layers = 2, num_attention_heads = 4,
                intermediate_size = 32, max_position_embeddings = 12, type_vocab_size = 2,
                hidden_dropout_prob = 0, attention_probs_dropout_prob = 0}

describe('flowtext.BertTokenizer', function()
  teardown(H.remove_tmpdirs)

  it('splits words into the longest WordPiece pieces, 1-based ids', function()
    local tok = text.BertTokenizer(vocab_dir())
    assert.same({'un', '##aff', '##able', 'hello', ',', 'world', '!'}, tok:tokenize('unaffable Hello,world!'))
    -- [CLS] = HF id 2 -> 3; 'hello' = HF 5 -> 6
    assert.same({3, 6, 7, 4}, tok:encode('hello world'))
    assert.same({3, 4}, tok:encode(''))
    assert.same({3, 4}, tok:encode(' \t\n '))
  end)

  it('lowercases, strips accents (NFD), splits CJK and punctuation, drops control characters', function()
    local tok = text.BertTokenizer(vocab_dir())
    assert.same({'cafe'}, tok:tokenize('CAFÉ'))
    assert.same({'cafe'}, tok:tokenize('Cafe\u{301}'))          -- a combining accent
    assert.same({'日', '本', 'hello'}, tok:tokenize('日本hello'))
    assert.same({'σ', '##ι', '##s'}, tok:tokenize('ΣΊs'))
    assert.same({'hello', 'world'}, tok:tokenize('hel\0lo\u{200B} \u{3000}world'))
    assert.same({'it', "'", 's', 'a', '-', 'b'}, tok:tokenize("It's a-b"))
    assert.same({'ᄒ', '##ᅡ', '##ᆫ'}, tok:tokenize('한'))      -- Hangul: algorithmic NFD
  end)

  it('gives [UNK] for a word with no split and for words over 100 characters', function()
    local tok = text.BertTokenizer(vocab_dir())
    assert.same({'hello', '[UNK]', 'world'}, tok:tokenize('hello xyz world'))
    assert.same({'[UNK]'}, tok:tokenize(('e'):rep(101)))
    assert.same({'e', '##e', '##e'}, tok:tokenize('eee'))
    assert.same({'[UNK]'}, tok:tokenize('😀'))
  end)

  it('truncates to max_length counting [CLS] and [SEP]; pads batches with masks', function()
    local tok = text.BertTokenizer(vocab_dir({model_max_length = 4}))
    assert.equal(4, tok.max_length)
    assert.same({3, 6, 7, 4}, tok:encode('hello world hello world'))
    assert.same({3, 6, 7, 6, 4}, tok:encode('hello world hello world', {max_length = 5}))
    assert.same({6, 7, 6, 7}, tok:encode('hello world hello world', {add_special_tokens = false, truncation = false}))
    local b = tok({'hello', 'hello world!'}, {max_length = 6})
    assert.same({{3, 6, 4, 1, 1}, {3, 6, 7, 13, 4}}, b.input_ids:totable())
    assert.same({{1, 1, 1, 0, 0}, {1, 1, 1, 1, 1}}, b.attention_mask:totable())
    assert.same({{1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}}, b.token_type_ids:totable())
    local p = tok({'hello'}, {max_length = 6, padding = 'max_length'})
    assert.same({{3, 6, 4, 1, 1, 1}}, p.input_ids:totable())
  end)

  it('reads tokenizer.json (WordPiece) the same as vocab.txt', function()
    local d = H.tmpdir()
    local vocab = {}
    for i, t in ipairs(VOCAB) do vocab[t] = i - 1 end
    write(d .. '/tokenizer.json', json.encode({
      model = {type = 'WordPiece', vocab = vocab, unk_token = '[UNK]', continuing_subword_prefix = '##',
               max_input_chars_per_word = 100},
      normalizer = {type = 'BertNormalizer', lowercase = true, clean_text = true, handle_chinese_chars = true},
      pre_tokenizer = {type = 'BertPreTokenizer'}}))
    local a, b = text.BertTokenizer(d), text.BertTokenizer(vocab_dir())
    local s = 'Unaffable CAFÉ, 日本! hello'
    assert.same(b:encode(s), a:encode(s))
    write(d .. '/tokenizer.json', json.encode({model = {type = 'BPE', vocab = vocab}}))
    H.raises(function() text.BertTokenizer(d) end, 'tokenizer.json', 'BPE', 'not supported')
  end)

  it('looks tokens and ids up both ways; a repeated token keeps its first id', function()
    -- the vocabulary lives in one string and FFI arrays (off the GC's way):
    -- lookups of every token and id, absent ones, and duplicates in vocab.txt
    local tok = text.BertTokenizer(vocab_dir())
    for i, t in ipairs(VOCAB) do
      assert.equal(i - 1, tok.vocab[t], t)
      assert.same({t}, tok:convert_ids_to_tokens({i}))
    end
    assert.is_nil(tok.vocab['nothere'])
    assert.is_nil(tok.vocab['hell'])    -- a prefix of a token
    assert.is_nil(tok.vocab['hello!'])  -- a token plus more
    assert.is_nil(tok.vocab[''])
    assert.is_nil(tok.vocab[5])
    H.raises(function() tok:convert_ids_to_tokens({#VOCAB + 1}) end, 'outside the vocabulary')
    H.raises(function() tok:convert_ids_to_tokens({0}) end, 'outside the vocabulary')
    local d = H.tmpdir()
    write(d .. '/vocab.txt', table.concat(VOCAB, '\n') .. '\nhello\nzz\nsize\ntoken\n')
    local dup = text.BertTokenizer(d)
    assert.equal(5, dup.vocab['hello'])              -- line 6, not the repeat on line 32
    assert.equal(#VOCAB + 1, dup.vocab['zz'])
    assert.same({'zz'}, dup:convert_ids_to_tokens({#VOCAB + 2}))
    H.raises(function() dup:convert_ids_to_tokens({#VOCAB + 1}) end, 'outside the vocabulary')
    assert.equal(#VOCAB + 4, dup.vocab_size)
    -- words that are also names of fields or methods are plain lookups
    assert.equal(#VOCAB + 2, dup.vocab['size'])
    assert.equal(#VOCAB + 3, dup.vocab['token'])
    assert.same({3, #VOCAB + 3, #VOCAB + 4, 4}, dup:encode('size token'))
    assert.is_nil(tok.vocab['size'])
  end)

  it('rejects bad input with clear errors', function()
    local tok = text.BertTokenizer(vocab_dir())
    H.raises(function() tok:encode('ok \xff bad') end, 'BertTokenizer:encode', 'not valid UTF-8', 'byte 4')
    H.raises(function() tok:encode('\xe6\x97') end, 'not valid UTF-8', 'byte 1')
    H.raises(function() tok:encode(42) end, 'expected a string')
    H.raises(function() tok:encode('a', {max_len = 3}) end, 'max_len')
    H.raises(function() tok({'a', 7}) end, 'item 2')
    H.raises(function() tok({}) end, 'non-empty list')
    H.raises(function() tok:convert_ids_to_tokens({0}) end, 'id 0', 'outside the vocabulary')
    H.raises(function() text.BertTokenizer(H.tmpdir()) end, 'neither tokenizer.json nor vocab.txt')
    H.raises(function() text.BertTokenizer(vocab_dir({do_lower_case = false})) end, 'do_lower_case')
  end)
end)

describe('flowtext.BertModel', function()
  teardown(H.remove_tmpdirs)

  local function saved(sd)
    local p = H.tmpdir() .. '/model.safetensors'
    flow.save(sd, p)
    return p
  end

  it('has Hugging Face parameter names and shapes', function()
    flow.manual_seed(0)
    local m = text.BertModel(CONFIG)
    local sd = m:state_dict()
    assert.same({#VOCAB, 16}, H.shape(sd['embeddings.word_embeddings.weight']))
    assert.same({12, 16}, H.shape(sd['embeddings.position_embeddings.weight']))
    assert.same({32, 16}, H.shape(sd['encoder.layer.1.intermediate.dense.weight']))
    assert.same({16, 32}, H.shape(sd['encoder.layer.1.output.dense.weight']))
    assert.is_not_nil(sd['encoder.layer.0.attention.self.key.bias'])
    assert.is_not_nil(sd['encoder.layer.0.attention.output.LayerNorm.weight'])
    assert.is_not_nil(sd['pooler.dense.weight'])
    assert.is_nil(text.BertModel(setmetatable({add_pooling_layer = false}, {__index = CONFIG})):state_dict()
      ['pooler.dense.weight'])
  end)

  it('computes attention with the padding keys masked out', function()
    flow.manual_seed(1)
    local m = text.BertModel(CONFIG)
    m:eval()
    local ids = flow.tensor({{3, 6, 7, 4}}, {dtype = flow.int64})
    local padded = flow.tensor({{3, 6, 7, 4, 1, 1}}, {dtype = flow.int64})
    local mask = flow.tensor({{1, 1, 1, 1, 0, 0}}, {dtype = flow.int64})
    local a = m(ids).last_hidden_state
    local b = m(padded, {attention_mask = mask}).last_hidden_state
    H.close(b:narrow(2, 1, 4), a, 1e-5)
    assert.same({1, 16}, H.shape(m(ids).pooler_output))
    -- gradients reach every parameter
    m:train()
    m(ids).last_hidden_state:sum():backward()
    assert.is_not_nil(m.encoder.layer[1].attention.self.query.weight.grad)
  end)

  it('loads its own safetensors; errors name missing, extra and mis-shaped keys', function()
    flow.manual_seed(2)
    local a = text.BertModel(CONFIG)
    local b = text.BertModel(CONFIG)
    local sd = a:state_dict()
    b:load_safetensors(saved(sd))
    local ids = flow.tensor({{3, 6, 7, 4}}, {dtype = flow.int64})
    a:eval(); b:eval()
    H.close(b(ids).last_hidden_state, a(ids).last_hidden_state, 0)
    -- 'bert.' prefixes (BertFor* checkpoints) and the old position_ids buffer
    local pre = {['cls.predictions.bias'] = flow.zeros(3),
                 ['bert.embeddings.position_ids'] = flow.arange(0, 12, {dtype = flow.int64}):reshape(1, 12)}
    for k, v in pairs(sd) do pre['bert.' .. k] = v end
    text.BertModel(CONFIG):load_safetensors(saved(pre))

    local missing = {}
    for k, v in pairs(sd) do if k ~= 'encoder.layer.1.output.dense.bias' then missing[k] = v end end
    H.raises(function() b:load_safetensors(saved(missing)) end, 'missing', 'encoder.layer.1.output.dense.bias')
    local extra = {['encoder.layer.9.output.dense.bias'] = flow.zeros(16)}
    for k, v in pairs(sd) do extra[k] = v end
    H.raises(function() b:load_safetensors(saved(extra)) end, 'unexpected', 'encoder.layer.9.output.dense.bias')
    local shaped = {}
    for k, v in pairs(sd) do shaped[k] = v end
    shaped['encoder.layer.0.attention.self.query.weight'] = flow.zeros(16, 8)
    H.raises(function() b:load_safetensors(saved(shaped)) end,
             'encoder.layer.0.attention.self.query.weight', '[16,8]', '[16,16]')
    local pos = {['embeddings.position_ids'] = flow.ones(1, 12, {dtype = flow.int64})}
    for k, v in pairs(sd) do pos[k] = v end
    H.raises(function() b:load_safetensors(saved(pos)) end, 'embeddings.position_ids', 'not 0..11')
    local bad = H.tmpdir() .. '/bad.safetensors'
    write(bad, 'not a safetensors file')
    H.raises(function() b:load_safetensors(bad) end, 'load_safetensors', 'bad.safetensors')
  end)

  it('rejects bad ids, lengths, masks and configs', function()
    local m = text.BertModel(CONFIG)
    local ids = flow.tensor({{3, 6, 7}}, {dtype = flow.int64})
    H.raises(function() m(flow.tensor({{3, 32}}, {dtype = flow.int64})) end, 'input_ids', 'id 32', '1..31')
    H.raises(function() m(flow.tensor({{0}}, {dtype = flow.int64})) end, 'id 0', '1-based')
    H.raises(function() m(flow.ones(1, 13, {dtype = flow.int64})) end, '13 tokens', 'position table (12 positions)')
    H.raises(function() m(flow.ones(3)) end, 'input_ids', '[batch, length]', '[3]')
    H.raises(function() m(flow.ones(1, 3)) end, 'integer ids')
    H.raises(function() m(ids, {attention_mask = flow.ones(1, 2)}) end, 'attention_mask is [1, 2]', '[1, 3]')
    H.raises(function() m(ids, {attention_mask = flow.ones(1, 1, 3)}) end, 'attention_mask is [1, 1, 3]')
    H.raises(function() m(ids, {token_type_ids = flow.ones(1, 2, {dtype = flow.int64})}) end,
             'token_type_ids is [1, 2]')
    H.raises(function() m(ids, {position_ids = flow.tensor({{1, 2, 13}}, {dtype = flow.int64})}) end,
             'position_ids', 'id 13', '1..12')
    H.raises(function() m(ids, {attn_mask = 1}) end, 'attn_mask')
    H.raises(function() text.BertModel({hidden_size = 10, num_attention_heads = 4}) end, 'multiple')
    H.raises(function() text.BertModel({hidden_act = 'swish2'}) end, 'hidden_act', 'swish2')
    H.raises(function() text.BertModel({position_embedding_type = 'relative_key'}) end, 'relative_key')
  end)
end)

describe('flowtext.SentenceTransformer', function()
  teardown(H.remove_tmpdirs)

  local function folder(pool)
    flow.manual_seed(3)
    local d = vocab_dir()
    local cfg = {model_type = 'bert'}
    for k, v in pairs(CONFIG) do cfg[k] = v end
    write(d .. '/config.json', json.encode(cfg))
    local m = text.BertModel(cfg)
    flow.save(m:state_dict(), d .. '/model.safetensors')
    os.execute('mkdir -p ' .. d .. '/1_Pooling')
    write(d .. '/1_Pooling/config.json', json.encode(pool or {word_embedding_dimension = 16,
                                                              pooling_mode_mean_tokens = true}))
    write(d .. '/modules.json', json.encode(json.array({
      {idx = 0, name = '0', path = '', type = 'sentence_transformers.models.Transformer'},
      {idx = 1, name = '1', path = '1_Pooling', type = 'sentence_transformers.models.Pooling'},
      {idx = 2, name = '2', path = '2_Normalize', type = 'sentence_transformers.models.Normalize'}})))
    write(d .. '/sentence_bert_config.json', json.encode({max_seq_length = 8}))
    return d, m
  end

  it('mean-pools the tokens the mask keeps and L2-normalises, in the list\'s order', function()
    local d, m = folder()
    m:eval()
    local st = text.SentenceTransformer(d)
    assert.equal(8, st.max_seq_length)
    local list = {'hello world', '', 'the cafe, a b e e e e e e e e e'}
    local e = st:encode(list)
    assert.same({3, 16}, H.shape(e))
    assert.equal(flow.float32, e.dtype)
    for i, s in ipairs(list) do
      local ids = st.tokenizer:encode(s, {max_length = 8})
      local h = m(flow.tensor({ids}, {dtype = flow.int64})).last_hidden_state[1]:mean(1)
      H.close(e[i], h / h:norm(), 1e-5, 'sentence ' .. i)
    end
    H.close(st:encode(list, {batch_size = 1}), e, 1e-5)
  end)

  it('cls pooling; bad pooling configs and options are errors', function()
    local d = folder({pooling_mode_cls_token = true})
    local st = text.SentenceTransformer(d)
    local e = st:encode({'hello'})
    local h = st.model(flow.tensor({st.tokenizer:encode('hello')}, {dtype = flow.int64})).last_hidden_state[1][1]
    H.close(e[1], h / h:norm(), 1e-5)
    H.raises(function() text.SentenceTransformer((folder({pooling_mode_lasttoken = true}))) end, 'lasttoken')
    H.raises(function() text.SentenceTransformer((folder({}))) end, 'no pooling mode')
    H.raises(function() text.SentenceTransformer(d, {max_seq_length = 100}) end, 'max_seq_length 100', '2..12')
    H.raises(function() st:encode({'a', false}) end, 'item 2')
    H.raises(function() st:encode({'a'}, {batch = 2}) end, 'batch')
  end)
end)
