-- oneflow.nn.prune (nn.utils.prune): PyTorch's reparametrisation pruning.
-- Pruning `name` of a module moves the parameter to `<name>_orig`, adds a
-- buffer `<name>_mask`, and recomputes `module.<name> = orig * mask` before
-- every forward (a forward pre-hook). Pruning again prunes among the
-- entries still kept. remove() makes the pruning permanent.
--   prune.l1_unstructured(m, 'weight', 0.3)     -- 30% of the entries
--   prune.random_unstructured(m, 'bias', 2)     -- 2 entries
--   prune.remove(m, 'weight')
-- amount: a fraction in [0, 1) or a whole number of entries (>= 1).
local A = require 'oneflow._args'
local flow = require 'oneflow'   -- the table being built (used at call time)
local autograd = require 'oneflow.autograd'
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'

local fail, no_grad = U.fail, autograd.no_grad
local P = {}

local function round_half_even(x)
  local f = math.floor(x)
  local d = x - f
  if d > 0.5 or (d == 0.5 and f % 2 == 1) then return f + 1 end
  return f
end

--- The number of entries `amount` stands for out of n.
function P._count(amount, n)
  if type(amount) ~= 'number' or amount < 0 then
    fail('prune: amount must be a non-negative number, got ' .. tostring(amount))
  end
  local k = amount < 1 and round_half_even(amount * n) or amount
  if k ~= math.floor(k) then fail('prune: an amount >= 1 must be a whole number of entries, got ' .. amount) end
  if k > n then
    fail(('prune: amount=%d should be smaller than the number of parameters to prune=%d'):format(k, n))
  end
  return k
end

local function hooks_of(m)
  local h = rawget(m, '_prune_hooks')
  if not h then h = {}; rawset(m, '_prune_hooks', h) end
  return h
end

local function recompute(m, name)
  rawset(m, name, m[name .. '_orig'] * m[name .. '_mask'])
end

-- Prunes m.<name> with new_mask(orig, old_mask) -> mask (same shape, 0/1).
local function apply(m, name, new_mask)
  if not module.is_module(m) then fail('prune: expected a module, got ' .. type(m)) end
  local hooks = hooks_of(m)
  local orig
  if hooks[name] then
    orig = m[name .. '_orig']
  else
    orig = m._parameters:get(name)
    if orig == nil then
      fail(("prune: module %s has no parameter named '%s'"):format(m.__name, tostring(name)))
    end
  end
  local old = hooks[name] and m[name .. '_mask'] or flow.ones_like(orig)
  local mask = no_grad(function() return new_mask(orig:detach(), old):to(orig.dtype) end)
  if not hooks[name] then
    m:delete(name)
    m:register_parameter(name .. '_orig', orig)
    m:register_buffer(name .. '_mask', mask)
    hooks[name] = m:register_forward_pre_hook(function(mod) recompute(mod, name) end)
  else
    m[name .. '_mask'] = mask
  end
  recompute(m, name)
  return m
end

-- old mask with the k lowest-scored kept entries set to 0
local function drop_lowest(scores, old, k)
  local mask = old:clone()
  if k == 0 then return mask end
  local inf = flow.full_like(scores, math.huge)
  local masked = flow.where(old:ne(0), scores, inf):reshape(-1)
  local _, idx = masked:topk(k, 1, {largest = false})
  mask:view(-1):scatter_(1, idx, 0)
  return mask
end

local function kept(old) return old:ne(0):sum():item() end

--- prune.identity(m, name): the reparametrisation with an all-ones mask.
function P.identity(m, name)
  return apply(m, name, function(_, old) return old end)
end

-- amount given positionally or as {amount = ...} (PyTorch's keyword)
local function amount_of(op, amount, extra)
  if type(amount) == 'table' then
    local allowed = {amount = true}
    for _, k in ipairs(extra or {}) do allowed[k] = true end
    local o = A.check_options(op, amount, allowed)
    if o.amount == nil then fail(op .. ': amount is required') end
    return o.amount, o
  end
  return amount, {}
end

--- prune.random_unstructured(m, name, amount | {amount =}): drops random kept entries.
function P.random_unstructured(m, name, amount)
  amount = amount_of('prune.random_unstructured', amount)
  return apply(m, name, function(t, old)
    local k = P._count(amount, kept(old))
    return drop_lowest(flow.rand_like(t, {dtype = flow.float64}), old, k)
  end)
end

--- prune.l1_unstructured(m, name, amount, {importance_scores =}): drops the
-- kept entries with the smallest absolute value (or score).
function P.l1_unstructured(m, name, amount, opts)
  local o
  amount, o = amount_of('prune.l1_unstructured', amount, {'importance_scores'})
  local scores = (opts and opts.importance_scores) or o.importance_scores
  return apply(m, name, function(t, old)
    local k = P._count(amount, kept(old))
    return drop_lowest((scores or t):abs(), old, k)
  end)
end

--- prune.ln_structured(m, name, amount, n, dim): drops whole slices along
-- dim (1-based) with the smallest L-n norm.
function P.ln_structured(m, name, amount, n, dim)
  if type(amount) == 'table' then
    local o = A.check_options('prune.ln_structured', amount, {amount = true, n = true, dim = true,
                                                              importance_scores = true})
    amount, n, dim = o.amount, o.n, o.dim
  end
  if amount == nil or n == nil or dim == nil then fail('prune.ln_structured: amount, n and dim are required') end
  if type(dim) ~= 'number' or dim == 0 then fail('prune.ln_structured: dim is 1-based, got ' .. tostring(dim)) end
  return apply(m, name, function(t, old)
    local nd = t:dim()
    if dim < 0 then dim = nd + dim + 1 end
    local others = {}
    for d = 1, nd do if d ~= dim then others[#others + 1] = d end end
    local norms = (t * old):norm(n, others)                 -- one per slice
    local alive = #others > 0 and old:ne(0):any(others) or old:ne(0)
    local k = P._count(amount, alive:sum():item())
    local inf = flow.full_like(norms, math.huge)
    local masked = flow.where(alive, norms, inf)
    local mask = old:clone()
    if k > 0 then
      local _, idx = masked:topk(k, 1, {largest = false})
      for _, i in ipairs(idx:totable()) do mask:select(dim, i):fill_(0) end
    end
    return mask
  end)
end

--- prune.custom_from_mask(m, name, mask)
function P.custom_from_mask(m, name, mask)
  return apply(m, name, function(_, old) return old * mask end)
end

--- prune.global_unstructured({{m1, 'weight'}, {m2, 'weight'}}, {pruning_method = 'l1',
-- amount =}): the smallest entries over all the tensors together.
function P.global_unstructured(params, opts)
  opts = A.check_options('prune.global_unstructured', opts, {amount = true, pruning_method = true})
  local method = opts.pruning_method or 'l1'
  if method == P.L1Unstructured then method = 'l1' elseif method == P.RandomUnstructured then method = 'random' end
  if method ~= 'l1' and method ~= 'random' then
    fail("global_unstructured: pruning_method must be 'l1' or 'random'")
  end
  local scores, olds = {}, {}
  for i, e in ipairs(params) do
    local m, name = e[1], e[2]
    local hooks = hooks_of(m)
    local t = hooks[name] and m[name .. '_orig'] or m._parameters:get(name)
    if t == nil then fail(("global_unstructured: module %s has no parameter '%s'"):format(m.__name, name)) end
    olds[i] = hooks[name] and m[name .. '_mask'] or flow.ones_like(t)
    local s = method == 'l1' and t:detach():abs() or flow.rand_like(t)
    scores[i] = s:reshape(-1)
  end
  local flat_old = {}
  for i, o in ipairs(olds) do flat_old[i] = o:reshape(-1) end
  local all_old = flow.cat(flat_old, 1)
  local mask = drop_lowest(flow.cat(scores, 1), all_old, P._count(opts.amount or 0, kept(all_old)))
  local pos = 1
  for i, e in ipairs(params) do
    local n = olds[i]:numel()
    local piece = mask:narrow(1, pos, n):view(olds[i]:size())
    apply(e[1], e[2], function() return piece end)
    pos = pos + n
  end
end

--- prune.remove(m, name): makes the pruning permanent (m.<name> becomes a
-- parameter again, holding orig * mask).
function P.remove(m, name)
  local hooks = rawget(m, '_prune_hooks')
  if not (hooks and hooks[name]) then
    fail(("prune.remove: parameter '%s' of module %s has to be pruned before pruning can be removed")
         :format(tostring(name), m.__name))
  end
  local orig, mask = m[name .. '_orig'], m[name .. '_mask']
  no_grad(function() orig:mul_(mask) end)
  hooks[name]:remove()
  hooks[name] = nil
  m:delete(name .. '_orig')
  m:delete(name .. '_mask')
  m:delete(name)
  m:register_parameter(name, orig)
  return m
end

-- PyTorch's method classes, as values for global_unstructured's pruning_method
P.L1Unstructured = setmetatable({}, {__tostring = function() return 'prune.L1Unstructured' end})
P.RandomUnstructured = setmetatable({}, {__tostring = function() return 'prune.RandomUnstructured' end})

------------------------------------------------------------------ channel pruning
-- prune.prune_channels(model, chains, {amount =, n = 1, inplace = false}):
-- structured pruning that shrinks the layers. Each chain is a list of
-- dotted module paths {producer, [BatchNorm...], consumer}: the producer
-- (Conv2d with groups 1, or Linear) loses the output channels whose filters
-- have the smallest L-n norms, the BatchNorms the same channels, the
-- consumer (Conv2d with groups 1, or Linear whose inputs are the flattened
-- [C, H, W] map: H*W features per channel) the matching inputs. The result
-- is a model with smaller weights -- fewer parameters and less compute, not
-- a mask. Returns the model and, per chain, the kept channels (1-based).
local function lookup(model, path)
  local m = model
  for part in path:gmatch('[^.]+') do
    local child = module.registry(m, '_modules'):get(part)
    if child == nil then fail(('prune.prune_channels: the model has no submodule %s'):format(path)) end
    m = child
  end
  return m
end

local function param(t) return module.Parameter(t:detach():contiguous()) end

local function is_a(m, name)
  local nn = flow.nn
  return require('oneflow.class').isinstance(m, nn[name])
end

local PRODUCER = 'must be a Conv2d with groups 1 or a Linear'

local function check_prod_cons(op, path, m)
  if not ((is_a(m, 'Conv2d') and m.groups == 1) or is_a(m, 'Linear')) then
    fail(('%s: %s (%s) %s'):format(op, path, m.__name, PRODUCER))
  end
end

local function out_count(m) return m.weight:size(1) end

-- the producer keeps output channels `keep` (1-based, ascending) of O
local function shrink_producer(prod, keep, n_kept)
  prod.weight = param(prod.weight:detach():index_select(1, keep))
  if prod.bias ~= nil then prod.bias = param(prod.bias:index_select(1, keep)) end
  if is_a(prod, 'Conv2d') then rawset(prod, 'out_channels', n_kept) else rawset(prod, 'out_features', n_kept) end
end

local function shrink_norm(op, path, bn, keep, O, n_kept)
  if not (is_a(bn, 'BatchNorm2d') or is_a(bn, 'BatchNorm1d')) then
    fail(('%s: %s (%s) between producer and consumer must be a BatchNorm'):format(op, path, bn.__name))
  end
  if bn.num_features ~= O then
    fail(('%s: %s has %d features, its producers make %d'):format(op, path, bn.num_features, O))
  end
  if bn.weight ~= nil then bn.weight = param(bn.weight:index_select(1, keep)) end
  if bn.bias ~= nil then bn.bias = param(bn.bias:index_select(1, keep)) end
  if bn.running_mean ~= nil then
    bn.running_mean = bn.running_mean:index_select(1, keep):contiguous()
    bn.running_var = bn.running_var:index_select(1, keep):contiguous()
  end
  rawset(bn, 'num_features', n_kept)
end

-- the consumer keeps inputs `keep` of O channels (a Linear: H*W features each)
local function shrink_consumer(op, path, cons, keep, O, n_kept)
  local cw = cons.weight:detach()
  if is_a(cons, 'Conv2d') then
    if cw:size(2) ~= O then
      fail(('%s: %s takes %d channels, its producers make %d'):format(op, path, cw:size(2), O))
    end
    cons.weight = param(cw:index_select(2, keep))
    rawset(cons, 'in_channels', n_kept)
  else
    local F_ = cw:size(2)
    if F_ % O ~= 0 then
      fail(('%s: %s has %d inputs, not a multiple of the %d channels of its producers'):format(op, path, F_, O))
    end
    local S = math.floor(F_ / O)
    local idx = ((keep - 1):view(-1, 1) * S + flow.arange(1, S + 1):view(1, -1)):reshape(-1)
    cons.weight = param(cw:index_select(2, idx))
    rawset(cons, 'in_features', n_kept * S)
  end
end

-- A chain {producer, [bn...], consumer} as a group of one producer.
local function as_group(op, ci, chain)
  if chain.producers ~= nil then
    for _, key in ipairs({'producers', 'consumers'}) do
      if type(chain[key]) ~= 'table' or #chain[key] < 1 then
        fail(('%s: group %d needs a non-empty list of %s'):format(op, ci, key))
      end
    end
    return {producers = chain.producers, norms = chain.norms or {}, consumers = chain.consumers}
  end
  if #chain < 2 then fail(('%s: chain %d needs a producer and a consumer'):format(op, ci)) end
  local norms = {}
  for i = 2, #chain - 1 do norms[#norms + 1] = chain[i] end
  return {producers = {chain[1]}, norms = norms, consumers = {chain[#chain]}}
end

function P.prune_channels(model, chains, opts)
  local op = 'prune.prune_channels'
  opts = A.check_options(op, opts, {amount = true, n = true, inplace = true}) or {}
  if not module.is_module(model) then fail(op .. ': expected a module') end
  if type(chains) ~= 'table' or type(chains[1]) ~= 'table' then
    fail(op .. ': chains must be a list of {producer, [batchnorm...], consumer} path lists or '
         .. '{producers =, norms =, consumers =} groups')
  end
  if not opts.inplace then model = model:clone() end
  local kept_all = {}
  for ci, chain in ipairs(chains) do
    local g = as_group(op, ci, chain)
    local function mods(paths)
      local r = {}
      for i, path in ipairs(paths) do r[i] = lookup(model, path) end
      return r
    end
    local prods, norms, conss = mods(g.producers), mods(g.norms), mods(g.consumers)
    for i, m in ipairs(prods) do check_prod_cons(op, g.producers[i], m) end
    for i, m in ipairs(conss) do check_prod_cons(op, g.consumers[i], m) end
    -- the producers' output channels are one set (a residual stream: they are
    -- summed), ranked by the sum of their filters' L-n norms
    local O = out_count(prods[1])
    local score
    for i, prod in ipairs(prods) do
      if out_count(prod) ~= O then
        fail(('%s: %s makes %d channels, %s %d'):format(op, g.producers[i], out_count(prod), g.producers[1], O))
      end
      local w = prod.weight:detach()
      local norms_i = w:reshape(O, -1):double():norm(opts.n or 1, 2)
      score = score and score + norms_i or norms_i
    end
    local k = P._count(opts.amount or 0, O)
    if k >= O then fail(('%s: pruning %d of %d channels of %s leaves none'):format(op, k, O, g.producers[1])) end
    local _, order = score:sort(1, {descending = true})
    local keep = order:narrow(1, 1, O - k):sort(1)            -- 1-based, ascending
    kept_all[ci] = keep
    no_grad(function()
      for _, prod in ipairs(prods) do shrink_producer(prod, keep, O - k) end
      for i, bn in ipairs(norms) do shrink_norm(op, g.norms[i], bn, keep, O, O - k) end
      for i, cons in ipairs(conss) do shrink_consumer(op, g.consumers[i], cons, keep, O, O - k) end
    end)
  end
  return model, kept_all
end

--- prune.is_pruned(m): whether m or a submodule has a pruning hook.
function P.is_pruned(m)
  for _, sub in ipairs(m:modules()) do
    local h = rawget(sub, '_prune_hooks')
    if h and next(h) then return true end
  end
  return false
end

return P
