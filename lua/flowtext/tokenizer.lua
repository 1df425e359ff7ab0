-- flowtext.tokenizer: BERT's WordPiece tokenizer, as Hugging Face's
-- (fast) BertTokenizer runs it, read from a model folder's vocab.txt or
-- tokenizer.json (plus tokenizer_config.json when there).
--
--   local tok = text.BertTokenizer(dir)            -- {max_length = 512}
--   tok:tokenize('Héllo, world!')                 --> {'hello', ',', 'world', '!'}
--   tok:encode('Héllo, world!')                   --> {102, 7593, 1011, 2089, 999, 103}
--   local b = tok({'a', 'b c'}, {max_length = 128}) -- b.input_ids, b.attention_mask, b.token_type_ids
--
-- Ids are 1-based: the Hugging Face id + 1 (what nn.Embedding takes).
-- Normalising follows BertNormalizer: control and format characters are
-- dropped, whitespace becomes ' ', CJK ideographs are split off, text is
-- decomposed (NFD) with its nonspacing marks (accents) dropped, then
-- lowercased; then BertPreTokenizer splits at whitespace and punctuation,
-- and WordPiece splits each word into the longest pieces in the vocabulary
-- ('##' marks a continuation; a word with no split is [UNK]). The character
-- tables are flowtext/unicode_data.lua (tools/gen_flowtext_unicode.py).
local A = require 'oneflow._args'
local class = require 'oneflow.class'
local flow = require 'oneflow'
local files = require 'flowtext._files'
local U = require 'flowtext.unicode_data'

local fail = A.fail
local M = {}

------------------------------------------------------------------ characters
-- Sorted range lists {a1, b1, a2, b2, ...}: binary search.
local function in_ranges(r, cp)
  local lo, hi = 1, #r / 2
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    local a, b = r[2 * mid - 1], r[2 * mid]
    if cp < a then hi = mid - 1 elseif cp > b then lo = mid + 1 else return true end
  end
  return false
end

local SPACE = {}
for _, cp in ipairs(U.space) do SPACE[cp] = true end

-- shift runs {first, last, step, delta}, sorted by first; runs never overlap
local function shifted(cp)
  local s = U.shift
  local lo, hi = 1, #s / 4
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    local a, b, step, delta = s[4 * mid - 3], s[4 * mid - 2], s[4 * mid - 1], s[4 * mid]
    if cp < a then hi = mid - 1 elseif cp > b then lo = mid + 1
    elseif (cp - a) % step == 0 then return cp + delta
    else return nil end
  end
  return nil
end

local SBASE, SCOUNT = 0xAC00, 11172
local KIND_DROP, KIND_SPACE, KIND_CJK, KIND_PUNCT, KIND_CHAR = 1, 2, 3, 4, 5

-- What one code point normalises to: a kind and the list of code points.
local cache = {}
local function classify(cp)
  local c = cache[cp]
  if c then return c end
  if cp >= SBASE and cp < SBASE + SCOUNT then            -- Hangul: algorithmic NFD
    local s = cp - SBASE
    local out = {0x1100 + math.floor(s / 588), 0x1161 + math.floor((s % 588) / 28)}
    if s % 28 ~= 0 then out[3] = 0x11A7 + s % 28 end
    c = {KIND_CHAR, out}
  elseif in_ranges(U.removed, cp) then c = {KIND_DROP}
  elseif SPACE[cp] then c = {KIND_SPACE}
  elseif in_ranges(U.cjk, cp) then c = {KIND_CJK, {cp}}
  else
    local out = U.multi[cp] or {shifted(cp) or cp}
    -- punctuation is judged after normalising (BertPreTokenizer runs second)
    if #out == 1 and in_ranges(U.punct, out[1]) then c = {KIND_PUNCT, out}
    else c = {KIND_CHAR, out} end
  end
  cache[cp] = c
  return c
end

local char = string.char
local floor = math.floor
local function utf8_char(cp)
  if cp < 0x80 then return char(cp) end
  if cp < 0x800 then return char(0xC0 + floor(cp / 64), 0x80 + cp % 64) end
  if cp < 0x10000 then
    return char(0xE0 + floor(cp / 4096), 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  return char(0xF0 + floor(cp / 262144), 0x80 + floor(cp / 4096) % 64, 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
end
M.utf8_char = utf8_char

-- The code points of UTF-8 string s; invalid UTF-8 is an error naming the byte.
local function code_points(op, s)
  local out, i, n = {}, 1, #s
  while i <= n do
    local b = s:byte(i)
    local len, cp, min
    if b < 0x80 then len, cp, min = 1, b, 0
    elseif b >= 0xC2 and b < 0xE0 then len, cp, min = 2, b - 0xC0, 0x80
    elseif b >= 0xE0 and b < 0xF0 then len, cp, min = 3, b - 0xE0, 0x800
    elseif b >= 0xF0 and b < 0xF5 then len, cp, min = 4, b - 0xF0, 0x10000
    else len = nil end
    if len and i + len - 1 <= n then
      for j = i + 1, i + len - 1 do
        local c = s:byte(j)
        if c < 0x80 or c >= 0xC0 then len = nil; break end
        cp = cp * 64 + c - 0x80
      end
    else
      len = nil
    end
    if not len or cp < min or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF) then
      fail(('%s: the text is not valid UTF-8 (byte %d)'):format(op, i))
    end
    out[#out + 1] = cp
    i = i + len
  end
  return out
end

--- Normalised words of s (BertNormalizer + BertPreTokenizer), each a list
-- of UTF-8 characters.
local function words(op, s)
  local res, cur = {}, nil
  local function flush()
    if cur then res[#res + 1] = cur; cur = nil end
  end
  for _, cp in ipairs(code_points(op, s)) do
    local c = classify(cp)
    local kind = c[1]
    if kind == KIND_SPACE then flush()
    elseif kind == KIND_CJK or kind == KIND_PUNCT then
      flush()
      res[#res + 1] = {utf8_char(c[2][1])}
    elseif kind == KIND_CHAR then
      cur = cur or {}
      for _, x in ipairs(c[2]) do cur[#cur + 1] = utf8_char(x) end
    end
  end
  flush()
  return res
end

------------------------------------------------------------------ vocabulary
local read_file, exists, read_json = files.read, files.exists, files.read_json

-- The vocabulary outside the garbage collector's way: one string holding
-- every token, FFI arrays of each token's offset, length and id, and an
-- open-addressed hash table of them (FNV-1a of the token's bytes). As two Lua tables of
-- 30,522 strings each (token -> id, id -> token), MiniLM's vocabulary cost
-- every full collection 2.6 ms of 4.4 (the runtime forces one per 64 MiB of
-- garbage tensors: two per encode of 32 sentences); now it is a handful of
-- objects. vocab[token] gives the HF id (0-based) or nil, as the table did.
local ffi = require 'ffi'
local bit = require 'bit'
local bxor, band, tobit = bit.bxor, bit.band, bit.tobit
pcall(ffi.cdef, 'int memcmp(const void *a, const void *b, size_t n);')

local function fnv1a(p, n)
  local h = tobit(2166136261)
  for i = 0, n - 1 do h = tobit(bxor(h, p[i]) * 16777619) end
  return h
end

-- list: {token, id} pairs -> vocab, token_of, size: vocab[token] is the id
-- (of two equal tokens the first keeps its id), token_of(id) the token whose
-- id that is (nil for ids no token has), size the largest id + 1. vocab has
-- no fields of its own: every string key is a lookup ('size' is a token too).
local function make_vocab(list)
  local n, nids = #list, 0
  local parts = {}
  for k, e in ipairs(list) do parts[k] = e[1]; nids = math.max(nids, e[2] + 1) end
  local blob = table.concat(parts)
  local base = ffi.cast('const uint8_t *', blob)
  -- pair k (0-based): its bytes in the blob and its id
  local poff, plen, pid = ffi.new('int32_t[?]', n + 1), ffi.new('int32_t[?]', n + 1),
                          ffi.new('int32_t[?]', n + 1)
  local cap = 16
  while cap < 2 * n do cap = cap * 2 end
  local slots, mask = ffi.new('int32_t[?]', cap), cap - 1   -- pair + 1, 0 empty
  local first = ffi.new('int32_t[?]', nids + 1)             -- id -> pair + 1, 0 none
  local function find(p, l)
    local h = band(fnv1a(p, l), mask)
    while true do
      local k = slots[h] - 1
      if k < 0 then return nil, h end
      if plen[k] == l and ffi.C.memcmp(base + poff[k], p, l) == 0 then return pid[k], h end
      h = band(h + 1, mask)
    end
  end
  local pos = 0
  for k, e in ipairs(list) do
    local t, id = e[1], e[2]
    poff[k - 1], plen[k - 1], pid[k - 1] = pos, #t, id
    local got, h = find(base + pos, #t)
    if got == nil then slots[h] = k end
    if first[id] == 0 then first[id] = k end
    pos = pos + #t
  end
  local function lookup(t) return (find(ffi.cast('const uint8_t *', t), #t)) end
  -- the token of a 0-based id, or nil
  local function token_of(id)
    if type(id) ~= 'number' or id < 0 or id >= nids or id ~= math.floor(id) then return nil end
    local k = first[id] - 1
    if k < 0 then return nil end
    local t = ffi.string(base + poff[k], plen[k])
    if lookup(t) ~= id then return nil end   -- a later copy of an earlier token
    return t
  end
  local vocab = setmetatable({}, {__index = function(_, k)
    if type(k) ~= 'string' then return nil end
    return lookup(k)
  end, __newindex = function() error('BertTokenizer: the vocabulary is read-only', 2) end,
  blob = blob})   -- the closures hold only `base`, a pointer into blob: this keeps blob alive
  return vocab, token_of, nids
end

-- token -> HF id from vocab.txt (line n is id n - 1)
local function vocab_txt(op, path)
  local s = read_file(op, path)
  if s:sub(-1) ~= '\n' then s = s .. '\n' end
  local list, n = {}, 0
  for line in s:gmatch('([^\n]*)\n') do
    line = line:gsub('\r$', '')
    list[#list + 1] = {line, n}
    n = n + 1
  end
  local vocab, token_of = make_vocab(list)
  return vocab, token_of, n
end

-- Settings of a tokenizer.json this tokenizer can follow, or an error naming what differs.
local function check_tokenizer_json(op, path, t)
  local function want(what, ok)
    if not ok then fail(('%s: %s: %s is not supported (flowtext follows BERT WordPiece)'):format(op, path, what)) end
  end
  local m, n, p = t.model or {}, t.normalizer or {}, t.pre_tokenizer or {}
  want('model type ' .. tostring(m.type), m.type == 'WordPiece')
  want('normalizer ' .. tostring(n.type), n.type == 'BertNormalizer')
  want('lowercase = false', n.lowercase ~= false)
  want('strip_accents = false', n.strip_accents ~= false)
  want('clean_text = false', n.clean_text ~= false)
  want('handle_chinese_chars = false', n.handle_chinese_chars ~= false)
  want('pre_tokenizer ' .. tostring(p.type), p.type == 'BertPreTokenizer')
  want('continuing_subword_prefix ' .. tostring(m.continuing_subword_prefix),
       m.continuing_subword_prefix == nil or m.continuing_subword_prefix == '##')
  return m
end

------------------------------------------------------------------ BertTokenizer
local BertTokenizer = class('BertTokenizer')
M.BertTokenizer = BertTokenizer

--- BertTokenizer(dir[, {max_length =}]): reads dir/tokenizer.json (or
-- dir/vocab.txt) and dir/tokenizer_config.json (model_max_length, the
-- special tokens). max_length (default model_max_length, else 512) is where
-- encode truncates, counting [CLS] and [SEP].
function BertTokenizer:__init(dir, opts)
  local op = 'BertTokenizer'
  if type(dir) ~= 'string' then fail(('%s: expected a model folder (string), got %s'):format(op, type(dir))) end
  opts = A.check_options(op, opts, {'max_length'})
  local cfg = exists(dir .. '/tokenizer_config.json') and read_json(op, dir .. '/tokenizer_config.json') or {}
  if cfg.do_lower_case == false then
    fail(('%s: %s/tokenizer_config.json: do_lower_case = false is not supported'):format(op, dir))
  end
  self.max_input_chars_per_word = 100
  self.unk_token = type(cfg.unk_token) == 'string' and cfg.unk_token or '[UNK]'
  if exists(dir .. '/tokenizer.json') then
    local path = dir .. '/tokenizer.json'
    local m = check_tokenizer_json(op, path, read_json(op, path))
    if type(m.vocab) ~= 'table' then fail(('%s: %s has no model.vocab'):format(op, path)) end
    local list = {}
    for tokn, id in pairs(m.vocab) do
      if type(id) ~= 'number' or id < 0 or id ~= math.floor(id) then
        fail(('%s: %s: vocab id of %q is %s'):format(op, path, tokn, tostring(id)))
      end
      list[#list + 1] = {tokn, id}
    end
    -- a fixed order (pairs has none): by id, then token
    table.sort(list, function(a, b) return a[2] < b[2] or (a[2] == b[2] and a[1] < b[1]) end)
    self.vocab, self.token_of, self.vocab_size = make_vocab(list)
    self.max_input_chars_per_word = tonumber(m.max_input_chars_per_word) or 100
    if type(m.unk_token) == 'string' then self.unk_token = m.unk_token end
  elseif exists(dir .. '/vocab.txt') then
    self.vocab, self.token_of, self.vocab_size = vocab_txt(op, dir .. '/vocab.txt')
  else
    fail(('%s: %s has neither tokenizer.json nor vocab.txt'):format(op, dir))
  end
  local function special(key, default)
    local name = type(cfg[key]) == 'string' and cfg[key] or default
    local id = self.vocab[name]
    if id == nil then fail(('%s: the vocabulary has no %s token %q'):format(op, key, name)) end
    return id + 1
  end
  self.unk_id = special('unk_token', self.unk_token)
  self.cls_id = special('cls_token', '[CLS]')
  self.sep_id = special('sep_token', '[SEP]')
  self.pad_id = special('pad_token', '[PAD]')
  local mml = tonumber(cfg.model_max_length)
  self.max_length = opts.max_length or ((mml and mml < 1e6) and mml or 512)
  A.integer(op, self.max_length, 2, 'max_length')
  if self.max_length < 2 then
    fail(('%s: max_length must be at least 2 ([CLS] and [SEP]), got %d'):format(op, self.max_length))
  end
end

-- WordPiece tokens of s; op names the caller in errors.
local function wordpiece(self, op, s)
  if type(s) ~= 'string' then fail(('%s: expected a string, got %s'):format(op, A.describe(s))) end
  local out, vocab = {}, self.vocab
  for _, w in ipairs(words(op, s)) do
    local n = #w
    if n > self.max_input_chars_per_word then
      out[#out + 1] = self.unk_token
    else
      local pieces, start = {}, 1
      while start <= n do
        local stop, piece = n, nil
        while stop >= start do
          local sub = table.concat(w, '', start, stop)
          if start > 1 then sub = '##' .. sub end
          if vocab[sub] ~= nil then piece = sub; break end
          stop = stop - 1
        end
        if not piece then pieces = {self.unk_token}; break end
        pieces[#pieces + 1] = piece
        start = stop + 1
      end
      for _, p in ipairs(pieces) do out[#out + 1] = p end
    end
  end
  return out
end

--- WordPiece tokens (strings) of one string, without special tokens.
function BertTokenizer:tokenize(s) return wordpiece(self, 'BertTokenizer:tokenize', s) end

local ENCODE_OPTS = {'max_length', 'add_special_tokens', 'truncation'}

--- 1-based ids of s: [CLS] tokens [SEP], truncated to max_length
-- (`{max_length =, add_special_tokens = true, truncation = true}`).
function BertTokenizer:encode(s, opts)
  local op = 'BertTokenizer:encode'
  opts = A.check_options(op, opts, ENCODE_OPTS)
  local ids = {}
  for _, t in ipairs(wordpiece(self, op, s)) do ids[#ids + 1] = self.vocab[t] + 1 end
  local specials = opts.add_special_tokens ~= false
  if opts.truncation ~= false then
    local max = opts.max_length or self.max_length
    A.integer(op, max, 2, 'max_length')
    local keep = max - (specials and 2 or 0)
    if keep < 0 then fail(('%s: max_length %d leaves no room for [CLS] and [SEP]'):format(op, max)) end
    for i = #ids, keep + 1, -1 do ids[i] = nil end
  end
  if specials then
    table.insert(ids, 1, self.cls_id)
    ids[#ids + 1] = self.sep_id
  end
  return ids
end

--- Tokens of 1-based ids (the inverse lookup; an unknown id is an error).
function BertTokenizer:convert_ids_to_tokens(ids)
  local out = {}
  for i, id in ipairs(ids) do
    local t = type(id) == 'number' and self.token_of(id - 1) or nil
    if t == nil then
      fail(('BertTokenizer:convert_ids_to_tokens: id %s (position %d) is outside the vocabulary 1..%d'):format(
        tostring(id), i, self.vocab_size))
    end
    out[i] = t
  end
  return out
end

--- tok(list_of_strings[, {max_length =, padding = 'longest' | 'max_length'}])
-- -> {input_ids =, attention_mask =, token_type_ids =}, int64 tensors [N, L]:
-- 1-based ids padded with [PAD], the mask 1 on tokens and 0 on padding, and
-- 1-based token types (all 1: one segment).
function BertTokenizer:batch_encode(list, opts)
  local op = 'BertTokenizer:batch_encode'
  opts = A.check_options(op, opts, {'max_length', 'padding'})
  if type(list) == 'string' then list = {list} end
  if type(list) ~= 'table' or #list == 0 then
    fail(('%s: expected a non-empty list of strings, got %s'):format(op, A.describe(list)))
  end
  local padding = opts.padding or 'longest'
  if padding ~= 'longest' and padding ~= 'max_length' then
    fail(('%s: padding must be \'longest\' or \'max_length\', got %s'):format(op, tostring(padding)))
  end
  local seqs, len = {}, 0
  for i, s in ipairs(list) do
    if type(s) ~= 'string' then fail(('%s: item %d is %s, not a string'):format(op, i, A.describe(s))) end
    seqs[i] = self:encode(s, {max_length = opts.max_length})
    len = math.max(len, #seqs[i])
  end
  if padding == 'max_length' then len = opts.max_length or self.max_length end
  local ids, mask, types = {}, {}, {}
  for i, seq in ipairs(seqs) do
    local r, m, t = {}, {}, {}
    for j = 1, len do
      r[j] = seq[j] or self.pad_id
      m[j] = seq[j] and 1 or 0
      t[j] = 1
    end
    ids[i], mask[i], types[i] = r, m, t
  end
  return {input_ids = flow.tensor(ids, {dtype = flow.int64}),
          attention_mask = flow.tensor(mask, {dtype = flow.int64}),
          token_type_ids = flow.tensor(types, {dtype = flow.int64})}
end

BertTokenizer.__call = BertTokenizer.batch_encode

return M
