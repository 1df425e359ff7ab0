-- A character-level GPT (flowtext.gpt, nanoGPT's layout) trained from
-- scratch on the licence texts Debian's base-files package installs in
-- /usr/share/common-licenses (every Debian system has them: ~250 KB of
-- English), with an nn.Graph train step under bfloat16 autocast, atomic
-- checkpoints, a loss curve (SVG) and sampling with a key/value cache.
--
--   ./bin/flow examples/gpt/train.lua                       # ~2-3 minutes on 2 cores
--   ./bin/flow examples/gpt/train.lua --steps 3000 --n-layer 4 --n-embd 128 --block-size 128
--   ./bin/flow examples/gpt/train.lua --steps 0 --resume --prompt 'This License' --tokens 300
--   ./bin/flow examples/gpt/train.lua --help
--
-- Bytes are the characters (the vocabulary is the corpus's distinct bytes).
-- Runs from any directory: this checkout's lua/ comes first.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/../../lua/?.lua;%s/../../lua/?/init.lua;'):format(here, here) .. package.path
local argparse = require 'argparse'
local flow = require 'oneflow'
local gpt = require 'flowtext.gpt'

local nn = flow.nn

local function parse_args(argv)
  local p = argparse('train.lua', 'Train a character-level GPT on the licence texts of Debian\'s '
    .. 'base-files (/usr/share/common-licenses) and sample from it with a key/value cache.')
  p:option('--corpus', 'A text file, or a directory whose regular files are concatenated (sorted by name).',
           '/usr/share/common-licenses')
  p:option('--steps', 'Training steps (0: only sample, e.g. with --resume).', '500', tonumber)
  p:option('--batch-size', 'Sequences per step.', '16', tonumber)
  p:option('--block-size', 'Context length (the position table).', '64', tonumber)
  p:option('--n-layer', 'Transformer blocks.', '2', tonumber)
  p:option('--n-head', 'Attention heads.', '4', tonumber)
  p:option('--n-embd', 'Embedding width.', '64', tonumber)
  p:option('--dropout', 'Dropout probability.', '0', tonumber)
  p:option('--lr', 'AdamW learning rate.', '3e-3', tonumber)
  p:option('--eval-every', 'Validation loss (and a checkpoint) every N steps.', '100', tonumber)
  p:option('--eval-batches', 'Batches per validation estimate.', '8', tonumber)
  p:option('--out-dir', 'Checkpoint (gpt.safetensors) and loss curve (loss.svg) folder.',
           (os.getenv('TMPDIR') or '/tmp') .. '/flow_gpt')
  p:flag('--resume', 'Start from the checkpoint in --out-dir (weights and step; AdamW moments restart).')
  p:flag('--eager', 'Train eagerly instead of with an nn.Graph.')
  p:flag('--fp32', 'Train in float32 (no bfloat16 autocast).')
  p:option('--threads', 'CPU threads.', '2', tonumber)
  p:option('--seed', 'Random seed.', '1337', tonumber)
  p:option('--prompt', 'Text to continue (empty: start from a newline).', '')
  p:option('--tokens', 'Characters to sample (0: print the prompt only).', '200', tonumber)
  p:option('--temperature', 'Sampling temperature (0: greedy).', '0.8', tonumber)
  p:option('--top-k', 'Keep the k most likely characters (0: all).', '0', tonumber)
  p:option('--top-p', 'Keep the most likely characters up to this total probability.', '0.95', tonumber)
  return p:parse(argv)
end

local function encode(s, stoi)
  local ids = {}
  for i = 1, #s do
    local id = stoi[s:byte(i)]
    if not id then error(('train.lua: the prompt has the byte %d, not in the vocabulary'):format(s:byte(i)), 0) end
    ids[i] = id
  end
  return ids
end

local function decode(ids, chars)
  local out = {}
  for i, id in ipairs(ids) do out[i] = string.char(chars[id]) end
  return table.concat(out)
end

local TrainGraph = nn.Graph:subclass('GPTTrainGraph')
function TrainGraph:__init(model, opt, amp)
  nn.Graph.__init(self)
  self.model = model
  self:add_optimizer(opt)
  if amp then self.config:enable_amp(true) end   -- bfloat16 (the default AMP dtype)
end
function TrainGraph:build(x, y)
  local _, loss = self.model(x, y)
  loss:backward()
  return loss
end

local function main(argv)
  local opts = parse_args(argv)
  flow.set_num_threads(opts.threads)
  flow.manual_seed(opts.seed)
  local data, chars, nfiles = gpt.char_corpus(opts.corpus)
  local stoi = {}
  for i, b in ipairs(chars) do stoi[b] = i end
  local n = data:size(1)
  local ntrain = math.floor(n * 0.9)
  local splits = {train = data:narrow(1, 1, ntrain), val = data:narrow(1, ntrain + 1, n - ntrain)}
  print(('corpus %s: %d files, %d characters, vocabulary %d; %d threads'):format(
    opts.corpus, nfiles, n, #chars, flow.get_num_threads()))

  local ckpt = opts.out_dir .. '/gpt.safetensors'
  local cfg = {vocab_size = #chars, block_size = opts.block_size, n_layer = opts.n_layer,
               n_head = opts.n_head, n_embd = opts.n_embd, dropout = opts.dropout}
  local start = 0
  local saved
  if opts.resume then
    saved = flow.load(ckpt)
    for k in pairs(cfg) do
      if k ~= 'dropout' then cfg[k] = saved.config[k] end
    end
    start = saved.step
    if table.concat(saved.vocab:totable(), ',') ~= table.concat(chars, ',') then
      error(('train.lua: the checkpoint %s was trained on another vocabulary (%d characters, this corpus has %d)')
        :format(ckpt, saved.vocab:size(1), #chars), 0)
    end
  end
  local model = gpt.GPT(cfg)
  if saved then model:load_state_dict(saved.model) end
  print(('GPT: %d layers, %d heads, width %d, context %d, %d parameters'):format(
    cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size, model:num_parameters()))

  local bs, B = cfg.block_size, opts.batch_size
  local function batch(split)
    local d = splits[split]
    local starts = flow.randint(1, d:size(1) - bs, {B}):totable()
    local xs, ys = {}, {}
    for i, s in ipairs(starts) do
      xs[i], ys[i] = d:narrow(1, s, bs), d:narrow(1, s + 1, bs)
    end
    return flow.stack(xs), flow.stack(ys)
  end
  local function estimate(split)
    model:eval()
    local sum = 0
    flow.no_grad(function()
      for _ = 1, opts.eval_batches do
        local x, y = batch(split)
        local _, loss = model(x, y)
        sum = sum + loss:item()
      end
    end)
    model:train()
    return sum / opts.eval_batches
  end

  local opt = flow.optim.AdamW(model:parameters(), {lr = opts.lr, weight_decay = 0.1})
  local step_fn
  if opts.eager then
    step_fn = function(x, y)
      local loss
      if opts.fp32 then
        local _, l = model(x, y)
        loss = l
      else
        loss = flow.amp.autocast({dtype = flow.bfloat16}, function() local _, l = model(x, y) return l end)
      end
      opt:zero_grad()
      loss:backward()
      opt:step()
      return loss
    end
  else
    local g = TrainGraph(model, opt, not opts.fp32)
    step_fn = function(x, y) return g(x, y) end
  end

  os.execute(('mkdir -p %q'):format(opts.out_dir))
  local train_losses, val_steps, val_losses = {}, {}, {}
  local function checkpoint(step)
    -- flow.save writes a temporary file and renames it: a crash leaves the old checkpoint
    flow.save({model = model:state_dict(), step = step, config = {vocab_size = cfg.vocab_size,
      block_size = cfg.block_size, n_layer = cfg.n_layer, n_head = cfg.n_head, n_embd = cfg.n_embd},
      vocab = flow.tensor(chars, {dtype = flow.int64})}, ckpt)
  end
  local t0 = os.time()
  local c0 = os.clock()
  for step = start + 1, start + opts.steps do
    local x, y = batch('train')
    local loss = step_fn(x, y):item()
    train_losses[#train_losses + 1] = loss
    if step % opts.eval_every == 0 or step == start + opts.steps then
      local v = estimate('val')
      val_steps[#val_steps + 1], val_losses[#val_losses + 1] = step - start, v
      checkpoint(step)
      print(('step %d: train loss %.4f, val loss %.4f (%.0f ms/step cpu, %ds)'):format(step, loss, v,
        (os.clock() - c0) * 1000 / (step - start), os.time() - t0))
    end
  end
  if opts.steps > 0 then
    local fig = flow.utils.plot.Figure({title = 'character-level GPT on /usr/share/common-licenses',
                                        xlabel = 'step', ylabel = 'cross-entropy (nats)'})
    fig:line(train_losses, {label = 'train'})
    fig:line(val_steps, val_losses, {label = 'val', marker = true})
    fig:save(opts.out_dir .. '/loss.svg')
    print(('checkpoint %s, loss curve %s/loss.svg'):format(ckpt, opts.out_dir))
  end

  -- sampling: the prompt (or a newline), then --tokens characters
  local prompt = opts.prompt ~= '' and opts.prompt or '\n'
  local ids = encode(prompt, stoi)
  if #ids > bs then error(('train.lua: the prompt has %d characters, more than the context %d'):format(#ids, bs), 0) end
  local idx = flow.tensor({ids}, {dtype = flow.int64})
  local gen = {temperature = opts.temperature, top_k = opts.top_k, top_p = opts.top_p}
  flow.manual_seed(opts.seed)
  local out = model:generate(idx, opts.tokens, gen)
  print(('--- sample (%d characters) ---'):format(opts.tokens))
  print(decode(out[1]:totable(), chars))
  -- speed: within the context window, where the cache applies (learned absolute
  -- positions: once the window slides every position's keys change, so both
  -- ways recompute the window)
  local n_speed = math.min(opts.tokens, bs - #ids)
  if n_speed > 0 then
    local rates = {}
    for i, use_cache in ipairs({true, false}) do
      gen.use_cache = use_cache
      flow.manual_seed(opts.seed)
      local c = os.clock()
      model:generate(idx, n_speed, gen)
      rates[i] = n_speed / math.max(os.clock() - c, 1e-9)
    end
    print(('---\ngeneration of %d tokens: %.0f tokens/s with the key/value cache, %.0f tokens/s without (cpu time)')
      :format(n_speed, rates[1], rates[2]))
  end
  return model
end

return main(arg or {})
