-- Semantic search with a pretrained sentence-embedding model: embeds a
-- query and a list of sentences with all-MiniLM-L6-v2 (flowtext's BERT and
-- WordPiece tokenizer on the model folder tools/minilm.sh unpacks) and
-- prints the sentences ranked by cosine similarity to the query.
--
--   sh tools/minilm.sh                                   # once: the model folder
--   ./bin/flow examples/text/similarity.lua --query 'A man is eating pasta.'
--   ./bin/flow examples/text/similarity.lua --query 'pets' --file sentences.txt --top 3
--
-- Without --file it ranks a built-in list. The model folder is --model,
-- else $FLOWTEXT_MINILM, else ~/.cache/oneflow/all-MiniLM-L6-v2.
-- Runs from any directory: this checkout's lua/ comes first.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/../../lua/?.lua;%s/../../lua/?/init.lua;'):format(here, here) .. package.path
local argparse = require 'argparse'
local flow = require 'oneflow'
local text = require 'flowtext'

local SENTENCES = {
  'A man is eating food.',
  'A man is eating a piece of bread.',
  'The girl is carrying a baby.',
  'A man is riding a horse.',
  'A woman is playing violin.',
  'Two men pushed carts through the woods.',
  'A man is riding a white horse on an enclosed ground.',
  'A monkey is playing drums.',
  'A cheetah is running behind its prey.',
  'Un homme mange une pizza.',
  '一个男人在吃面条。',
}

local function default_model()
  local cache = os.getenv('XDG_CACHE_HOME') or ((os.getenv('HOME') or '') .. '/.cache')
  return os.getenv('FLOWTEXT_MINILM') or cache .. '/oneflow/all-MiniLM-L6-v2'
end

local function parse_args(argv)
  local p = argparse('similarity.lua', 'Rank sentences by cosine similarity to a query with a pretrained '
    .. 'sentence-embedding model (all-MiniLM-L6-v2 through flowtext).')
  p:option('--query', 'The query sentence.', 'A man is eating pasta.')
  p:option('--file', 'A UTF-8 text file with one sentence a line (default: a built-in list).')
  p:option('--model', 'The model folder (tools/minilm.sh prints it).', default_model())
  p:option('--top', 'How many to print (0: all).', '0', tonumber)
  p:option('--threads', 'CPU threads.', '2', tonumber)
  return p:parse(argv)
end

local function read_lines(path)
  local f, err = io.open(path, 'rb')
  if not f then error('similarity.lua: cannot open ' .. path .. ': ' .. tostring(err), 0) end
  local out = {}
  for line in f:lines() do
    if line:match('%S') then out[#out + 1] = line end
  end
  f:close()
  if #out == 0 then error('similarity.lua: ' .. path .. ' has no sentences', 0) end
  return out
end

local function main(argv)
  local opts = parse_args(argv)
  flow.set_num_threads(opts.threads)
  local f = io.open(opts.model .. '/model.safetensors', 'rb')
  if not f then
    error(('similarity.lua: no model in %s (run sh tools/minilm.sh, or give --model)'):format(opts.model), 0)
  end
  f:close()
  local sentences = opts.file and read_lines(opts.file) or SENTENCES
  local st = text.SentenceTransformer(opts.model)
  local t0 = os.clock()
  local q = st:encode({opts.query})
  local e = st:encode(sentences)
  -- rows are unit vectors, so the dot product is the cosine similarity
  local scores = e:matmul(q[1]):totable()
  local order = {}
  for i = 1, #sentences do order[i] = i end
  table.sort(order, function(a, b) return scores[a] > scores[b] end)
  print(('query: %s'):format(opts.query))
  local top = (opts.top > 0 and opts.top < #order) and opts.top or #order
  for r = 1, top do
    local i = order[r]
    print(('%2d. %.4f  %s'):format(r, scores[i], sentences[i]))
  end
  print(('embedded %d sentences in %.2f s of CPU time'):format(#sentences + 1, os.clock() - t0))
end

main(arg or {})
