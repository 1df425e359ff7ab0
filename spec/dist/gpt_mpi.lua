-- flowtext.gpt (examples/gpt's model) under mpirun (-np 2 and -np 4):
-- data parallel (DistributedDataParallel on local tensors, the batch split
-- over the ranks) and tensor parallel on global tensors (the MLP's c_fc
-- split by output features, c_proj by input features: Megatron's pair,
-- partial sums reduced once; the rest broadcast), each
-- with AdamW: the loss of the first steps and the parameters after them
-- equal single-process training on the same global batch (1e-5).
-- examples/gpt/parallel.lua is the same on the corpus.
local flow = require 'oneflow'
local gpt = require 'flowtext.gpt'
local H = require 'spec.helpers'

local r, n = flow.env.get_rank(), flow.env.get_world_size()
local CFG = {vocab_size = 13, block_size = 8, n_layer = 2, n_head = 4, n_embd = 16}
local STEPS, PER_RANK = 3, 2
-- Adam's first steps move each weight by about lr * sign(grad): a gradient
-- element near 0 whose last bits differ (the batch summed in another order)
-- moves differently, so parameters are compared to 1e-3 (lr is 1e-2), the
-- losses to 1e-5
local PARAM_TOL = 1e-3

local function batch(step)
  flow.manual_seed(1000 + step)
  local X = flow.randint(1, CFG.vocab_size + 1, {PER_RANK * n, CFG.block_size})
  local Y = flow.randint(1, CFG.vocab_size + 1, {PER_RANK * n, CFG.block_size})
  return X, Y
end

local function pair()
  flow.manual_seed(7)
  local net = gpt.GPT(CFG)
  local ref = gpt.GPT(CFG)
  ref:load_state_dict(net:state_dict())
  return net, ref
end

local function named(model)
  local t = {}
  for name, p in model:named_parameters() do t[name] = p end
  return t
end

-- the names in one order on every rank: full_local is a collective, and
-- pairs' order may differ between processes (string hashes are seeded)
local function sorted(t)
  local names = {}
  for k in pairs(t) do names[#names + 1] = k end
  table.sort(names)
  return names
end

local function adamw(ps) return flow.optim.AdamW(ps, {lr = 1e-2, weight_decay = 0.1}) end

local function ref_step(ref, ropt, X, Y)
  ropt:zero_grad()
  local _, l = ref(X, Y)
  l:backward()
  ropt:step()
  return l:item()
end

describe('GPT data parallel and tensor parallel', function()
  it('DDP: the losses of the first steps and the parameters equal one process', function()
    local net, ref = pair()
    local ddp = flow.nn.parallel.DistributedDataParallel(net)
    local opt, ropt = adamw(net:parameters()), adamw(ref:parameters())
    for step = 1, STEPS do
      local X, Y = batch(step)
      local x, y = X:narrow(1, r * PER_RANK + 1, PER_RANK), Y:narrow(1, r * PER_RANK + 1, PER_RANK)
      opt:zero_grad()
      -- DDP's forward returns the module's first result (the logits)
      local l = flow.nn.functional.cross_entropy(ddp(x):reshape(-1, CFG.vocab_size), y:reshape(-1))
      l:backward()
      opt:step()
      -- the global loss: the mean of the ranks' means (equal shards)
      local g = flow.comm.all_reduce(l:detach():clone()):item() / n
      H.close({g}, {ref_step(ref, ropt, X, Y)}, 1e-5, 'loss at step ' .. step)
    end
    local a, b = named(net), named(ref)
    for _, name in ipairs(sorted(b)) do H.close(a[name], b[name], PARAM_TOL, name .. ' after training') end
  end)

  it('tensor parallel Linear layers on global tensors: losses and parameters equal one process', function()
    local all = {}
    for i = 0, n - 1 do all[i + 1] = i end
    local P = flow.placement('cpu', all)
    local S, Bc = flow.sbp.split, flow.sbp.broadcast
    local net, ref = pair()
    gpt.tensor_parallel(net, P)
    assert.equal(S(1), net.transformer.h[1].mlp.c_fc.weight.sbp[1])
    assert.equal(S(2), net.transformer.h[1].mlp.c_proj.weight.sbp[1])
    -- each rank holds 64 / n of the MLP's hidden features
    assert.same({64 / n, 16}, net.transformer.h[1].mlp.c_fc.weight:to_local():size():totable())
    local opt, ropt = adamw(net:parameters()), adamw(ref:parameters())
    for step = 1, STEPS do
      local X, Y = batch(step)
      opt:zero_grad()
      local _, l = net(X:to_global(P, Bc), Y:to_global(P, Bc))
      l:backward()
      opt:step()
      H.close({l:item()}, {ref_step(ref, ropt, X, Y)}, 1e-5, 'loss at step ' .. step)
    end
    local a, b = named(net), named(ref)
    for _, name in ipairs(sorted(b)) do
      H.close(a[name]:full_local(), b[name], PARAM_TOL, name .. ' after training')
    end
  end)
end)
