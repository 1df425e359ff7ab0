-- examples/gpt's character-level GPT trained data parallel or tensor
-- parallel under mpirun, checked step by step against one process: every
-- rank also trains a plain copy on the whole global batch and the example
-- prints both losses and their largest difference over the steps.
--
--   mpirun --allow-run-as-root --oversubscribe -np 2 ./bin/flow examples/gpt/parallel.lua --mode ddp
--   mpirun --allow-run-as-root --oversubscribe -np 2 ./bin/flow examples/gpt/parallel.lua --mode tp
--   ./bin/flow examples/gpt/parallel.lua --help
--
-- ddp: DistributedDataParallel on local tensors, each rank a slice of the
-- batch. tp: global tensors, the MLPs split over the ranks (gpt.tensor_parallel:
-- c_fc by output features, c_proj by input features), the rest broadcast.
-- Corpus: /usr/share/common-licenses (Debian's base-files), as train.lua.
-- Runs from any directory: this checkout's lua/ comes first.
local here = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = ('%s/../../lua/?.lua;%s/../../lua/?/init.lua;'):format(here, here) .. package.path
local argparse = require 'argparse'
local flow = require 'oneflow'
local gpt = require 'flowtext.gpt'

local p = argparse('parallel.lua', 'Train the character-level GPT data parallel (ddp) or tensor parallel '
  .. '(tp, global tensors) and compare each step\'s loss with one process.')
p:epilog('Run under mpirun, e.g. mpirun --allow-run-as-root --oversubscribe -np 2 ./bin/flow '
  .. 'examples/gpt/parallel.lua; alone it runs on one process.')
p:option('--mode', 'ddp or tp.', 'ddp'):choices({'ddp', 'tp'})
p:option('--corpus', 'Text file or directory.', '/usr/share/common-licenses')
p:option('--steps', 'Training steps.', '5', tonumber)
p:option('--batch-size', 'Sequences per step (global; a multiple of the processes for ddp).', '8', tonumber)
p:option('--block-size', 'Context length.', '32', tonumber)
p:option('--n-layer', 'Transformer blocks.', '2', tonumber)
p:option('--n-head', 'Attention heads.', '4', tonumber)
p:option('--n-embd', 'Embedding width (4 x n_embd, the MLP width, a multiple of the processes for tp).',
         '64', tonumber)
p:option('--lr', 'AdamW learning rate.', '3e-3', tonumber)
p:option('--threads', 'CPU threads per process.', '1', tonumber)
local opts = p:parse(arg or {})
flow.set_num_threads(opts.threads)

local rank, world = flow.env.get_rank(), flow.env.get_world_size()
local function say(fmt, ...)
  if rank == 0 then print(fmt:format(...)) end
end
if opts.mode == 'ddp' and opts.batch_size % world ~= 0 then
  error(('parallel.lua: --batch-size %d is not a multiple of the %d processes'):format(opts.batch_size, world), 0)
end

local data, chars = gpt.char_corpus(opts.corpus)
local cfg = {vocab_size = #chars, block_size = opts.block_size, n_layer = opts.n_layer, n_head = opts.n_head,
             n_embd = opts.n_embd}
flow.manual_seed(0)
local model = gpt.GPT(cfg)
local ref = gpt.GPT(cfg)
ref:load_state_dict(model:state_dict())

local all = {}
for i = 0, world - 1 do all[i + 1] = i end
local P = flow.placement('cpu', all)
local forward
if opts.mode == 'ddp' then
  local ddp = flow.nn.parallel.DistributedDataParallel(model)
  local per = opts.batch_size / world
  forward = function(X, Y)
    -- DDP's forward returns the module's first result (the logits)
    local logits = ddp(X:narrow(1, rank * per + 1, per))
    local l = flow.nn.functional.cross_entropy(logits:reshape(-1, cfg.vocab_size),
                                               Y:narrow(1, rank * per + 1, per):reshape(-1))
    -- the global batch's loss: the mean of the ranks' means (equal shards)
    return l, function() return flow.comm.all_reduce(l:detach():clone()):item() / world end
  end
else
  gpt.tensor_parallel(model, P)
  local Bc = flow.sbp.broadcast
  forward = function(X, Y)
    local _, l = model(X:to_global(P, Bc), Y:to_global(P, Bc))
    return l, function() return l:item() end
  end
end
say('%s on %d processes: %d parameters, batch %d x %d', opts.mode, world, ref:num_parameters(),
    opts.batch_size, opts.block_size)

local opt = flow.optim.AdamW(model:parameters(), {lr = opts.lr, weight_decay = 0.1})
local ropt = flow.optim.AdamW(ref:parameters(), {lr = opts.lr, weight_decay = 0.1})
local worst = 0
for step = 1, opts.steps do
  -- the same global batch on every rank (same seed)
  flow.manual_seed(100 + step)
  local starts = flow.randint(1, data:size(1) - opts.block_size, {opts.batch_size}):totable()
  local xs, ys = {}, {}
  for i, s in ipairs(starts) do
    xs[i], ys[i] = data:narrow(1, s, opts.block_size), data:narrow(1, s + 1, opts.block_size)
  end
  local X, Y = flow.stack(xs), flow.stack(ys)
  opt:zero_grad()
  local l, value = forward(X, Y)
  l:backward()
  opt:step()
  local got = value()
  ropt:zero_grad()
  local _, rl = ref(X, Y)
  rl:backward()
  ropt:step()
  local want = rl:item()
  worst = math.max(worst, math.abs(got - want))
  say('step %d: loss %.7f (%s), one process %.7f, difference %.1e', step, got, opts.mode, want,
      math.abs(got - want))
end
say('largest loss difference over %d steps: %.1e (%s)', opts.steps, worst,
    worst <= 1e-5 and 'within 1e-5' or 'LARGER than 1e-5')
if worst > 1e-5 then os.exit(1) end
