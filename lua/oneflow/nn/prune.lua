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

------------------------------------------------------------------ pruning methods
-- PyTorch's classes: a method is made with its arguments (L1Unstructured(0.3),
-- LnStructured(0.5, 2, 1), or their keywords in a table) and has
-- PRUNING_TYPE ('unstructured', 'structured' with a dim, or 'global') and
-- compute_mask(t, default_mask) -> mask. Cls.apply(module, name, ...)
-- prunes with Cls(...) (PyTorch's classmethod; Cls:apply(...) too). A
-- tensor pruned again keeps a PruningContainer of its methods, which
-- computes the new method's mask on what is still kept: the kept entries
-- (unstructured), the kept slices along the method's dim (structured) or
-- all of it (global). A user method subclasses BasePruningMethod:
--   local Every2nd = prune.BasePruningMethod:subclass('Every2nd')
--   Every2nd.PRUNING_TYPE = 'unstructured'
--   function Every2nd:compute_mask(t, default_mask) ... end
--   Every2nd.apply(m, 'bias')
local class = require 'oneflow.class'
local isinstance = class.isinstance

local Base = class('BasePruningMethod')
P.BasePruningMethod = Base
Base.__label = 'prune.'

local prune_with   -- (method, m, name, importance_scores)
function Base.__setup(cls)
  -- each class its own apply, so that Cls.apply(m, name, ...) knows Cls
  local function apply_cls(m, name, ...) return prune_with(cls(...), m, name) end
  cls.apply = function(a, ...)
    if rawequal(a, cls) then return apply_cls(...) end
    return apply_cls(a, ...)
  end
end
function Base.apply()
  fail('prune.BasePruningMethod.apply: call apply on a subclass that defines compute_mask')
end
function Base:compute_mask()
  fail(('prune.%s: compute_mask(t, default_mask) is not defined; a subclass of BasePruningMethod '
    .. 'must define it'):format(self.__name))
end
--- method:prune(t[, default_mask[, importance_scores]]): t times the mask computed for it.
function Base:prune(t, default_mask, importance_scores)
  A.check_tensor('prune', t, 't', 1)
  return no_grad(function()
    return t * self:compute_mask(importance_scores or t, default_mask or flow.ones_like(t))
  end)
end
--- method:remove(module): prune.remove(module, method._tensor_name).
function Base:remove(m) return P.remove(m, self._tensor_name) end

local function same_shape(a, b)
  if a:dim() ~= b:dim() then return false end
  for d = 1, a:dim() do if a:size(d) ~= b:size(d) then return false end end
  return true
end

local function check_amount(op, amount)
  if type(amount) ~= 'number' or amount < 0 or (amount > 1 and amount ~= math.floor(amount)) then
    fail(('%s: amount must be a fraction in [0, 1] or a whole number >= 0, got %s'):format(op, tostring(amount)))
  end
  return amount
end

-- the built-in methods: init(self, ...) takes the positional arguments (or
-- one table of PyTorch's keywords, listed in keys); mask(self, t, old)
-- already prunes among the entries old keeps, as a container would
local function method(name, ptype, keys, init, mask)
  local cls = Base:subclass(name)
  cls.PRUNING_TYPE = ptype
  cls._keeps_old, cls._keys = true, keys
  function cls:__init(...)
    local a = {...}
    if type(a[1]) == 'table' and getmetatable(a[1]) == nil then
      local allowed = {}
      for _, k in ipairs(keys) do allowed[k] = true end
      local o = A.check_options('prune.' .. name, a[1], allowed)
      a = {}
      for i, k in ipairs(keys) do a[i] = o[k] end
    end
    init(self, unpack(a, 1, #keys))
  end
  cls.compute_mask = mask
  return cls
end

local function dim_of(op, dim, nd)
  if type(dim) ~= 'number' or dim == 0 or dim ~= math.floor(dim) or dim > nd or dim < -nd then
    fail(('%s: dim is 1-based (or negative from the end) for a %d-d tensor, got %s'):format(op, nd, tostring(dim)))
  end
  return dim < 0 and nd + dim + 1 or dim
end

-- per slice along dim: any entry still kept
local function alive_slices(old, dim)
  local others = {}
  for d = 1, old:dim() do if d ~= dim then others[#others + 1] = d end end
  return #others > 0 and old:ne(0):any(others) or old:ne(0), others
end

-- old with the slices along dim listed in idx (1-based) set to 0
local function drop_slices(old, dim, idx)
  local mask = old:clone()
  for _, i in ipairs(idx) do mask:select(dim, i):fill_(0) end
  return mask
end

P.Identity = method('Identity', 'unstructured', {}, function() end, function(_, _, old) return old end)

P.RandomUnstructured = method('RandomUnstructured', 'unstructured', {'amount'}, function(self, amount)
  self.amount = check_amount('prune.RandomUnstructured', amount)
end, function(self, t, old)
  return drop_lowest(flow.rand_like(t, {dtype = flow.float64}), old, P._count(self.amount, kept(old)))
end)

P.L1Unstructured = method('L1Unstructured', 'unstructured', {'amount'}, function(self, amount)
  self.amount = check_amount('prune.L1Unstructured', amount)
end, function(self, t, old)
  return drop_lowest(t:abs(), old, P._count(self.amount, kept(old)))
end)

-- drops the k kept slices along dim with the lowest scores (one per slice)
local function drop_slices_by(scores, old, dim, amount)
  local alive = alive_slices(old, dim)
  local k = P._count(amount, alive:sum():item())
  if k == 0 then return old:clone() end
  local masked = flow.where(alive, scores, flow.full_like(scores, math.huge))
  local _, idx = masked:topk(k, 1, {largest = false})
  return drop_slices(old, dim, idx:totable())
end

P.RandomStructured = method('RandomStructured', 'structured', {'amount', 'dim'}, function(self, amount, dim)
  self.amount = check_amount('prune.RandomStructured', amount)
  self.dim = dim or -1
end, function(self, t, old)
  if t:dim() == 0 then fail('prune.RandomStructured: structured pruning needs a tensor of at least 1 dim') end
  local dim = dim_of('prune.RandomStructured', self.dim, t:dim())
  return drop_slices_by(flow.rand(t:size(dim), {dtype = flow.float64}), old, dim, self.amount)
end)

P.LnStructured = method('LnStructured', 'structured', {'amount', 'n', 'dim'}, function(self, amount, n, dim)
  self.amount = check_amount('prune.LnStructured', amount)
  if n == nil then fail('prune.LnStructured: n (the norm) is required') end
  self.n, self.dim = n, dim or -1
end, function(self, t, old)
  if t:dim() == 0 then fail('prune.LnStructured: structured pruning needs a tensor of at least 1 dim') end
  local dim = dim_of('prune.LnStructured', self.dim, t:dim())
  local _, others = alive_slices(old, dim)
  local x = t * old
  local norms = #others > 0 and x:norm(self.n, others) or x:abs()
  return drop_slices_by(norms, old, dim, self.amount)
end)

P.CustomFromMask = method('CustomFromMask', 'global', {'mask'}, function(self, mask)
  A.check_tensor('prune.CustomFromMask', mask, 'mask', 1)
  self.mask = mask
end, function(self, _, old)
  if not same_shape(self.mask, old) then
    fail(('prune.CustomFromMask: mask of shape %s for a tensor of shape %s'):format(
      tostring(self.mask:size()), tostring(old:size())))
  end
  return old * self.mask:to(old.dtype)
end)

--- prune.PruningContainer(method, ...): the methods applied in turn to one tensor.
local Container = Base:subclass('PruningContainer')
P.PruningContainer = Container
function Container:__init(...)
  self._pruning_methods = {}
  for i = 1, select('#', ...) do self:add_pruning_method((select(i, ...))) end
end
--- container:add_pruning_method(method)
function Container:add_pruning_method(m)
  if not isinstance(m, Base) then fail('PruningContainer: ' .. A.describe(m) .. ' is not a pruning method') end
  if self._tensor_name == nil then self._tensor_name = m._tensor_name
  elseif m._tensor_name ~= self._tensor_name then
    fail(("PruningContainer: can only add methods acting on '%s', got '%s'"):format(
      tostring(self._tensor_name), tostring(m._tensor_name)))
  end
  self._pruning_methods[#self._pruning_methods + 1] = m
end
function Container:__len() return #self._pruning_methods end
function Container:methods() return self._pruning_methods end

-- the mask of method m over what old keeps (PyTorch's _combine_masks)
local function combine(m, t, old)
  if m._keeps_old then return m:compute_mask(t, old) end
  local kind = m.PRUNING_TYPE
  local new = old:clone()
  if kind == 'unstructured' then
    local sel = old:eq(1)
    if sel:any():item() then
      new:masked_scatter_(sel, m:compute_mask(t:masked_select(sel), old:masked_select(sel)):to(new.dtype))
    end
  elseif kind == 'structured' then
    if m.dim == nil then fail(('prune.%s: a structured method needs a dim'):format(m.__name)) end
    local dim = dim_of('prune.' .. m.__name, m.dim, t:dim())
    local alive = alive_slices(old, dim)
    local idx = alive:nonzero():view(-1)   -- 1-based
    if idx:numel() > 0 then
      new:index_copy_(dim, idx, m:compute_mask(t:index_select(dim, idx), old:index_select(dim, idx)):to(new.dtype))
    end
  elseif kind == 'global' then
    new = m:compute_mask(t, old):to(new.dtype)
  else
    fail(("prune.%s: PRUNING_TYPE must be 'unstructured', 'structured' or 'global', got %s"):format(
      m.__name, tostring(kind)))
  end
  return new
end
function Container:compute_mask(t, old)
  return combine(self._pruning_methods[#self._pruning_methods], t, old)
end

-- prunes m.<name> with method (the first time, or added to its container)
prune_with = function(meth, m, name, scores)
  if not module.is_module(m) then fail('prune: expected a module, got ' .. A.describe(m)) end
  if type(name) ~= 'string' then fail('prune: the parameter name must be a string, got ' .. A.describe(name)) end
  meth._tensor_name = name
  local methods = rawget(m, '_prune_methods')
  if not methods then methods = {}; rawset(m, '_prune_methods', methods) end
  local prev = hooks_of(m)[name] and methods[name]
  local now = meth
  if prev then
    if isinstance(prev, Container) then prev:add_pruning_method(meth); now = prev
    else now = Container(prev, meth) end
  end
  if scores ~= nil then A.check_tensor('prune', scores, 'importance_scores') end
  apply(m, name, function(orig, old)
    if scores ~= nil and not same_shape(scores, orig) then
      fail(('prune: importance_scores of shape %s for %s of shape %s'):format(
        tostring(scores:size()), name, tostring(orig:size())))
    end
    -- PyTorch scores the tensor as pruned so far (orig * mask)
    local t = scores ~= nil and scores:detach() or (prev and orig * old or orig)
    return combine(meth, t, old)
  end)
  methods[name] = now
  return now
end

--- prune.identity(m, name): the reparametrisation with an all-ones mask.
function P.identity(m, name) prune_with(P.Identity(), m, name); return m end

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
  prune_with(P.RandomUnstructured(amount), m, name)
  return m
end

--- prune.l1_unstructured(m, name, amount, {importance_scores =}): drops the
-- kept entries with the smallest absolute value (or score).
function P.l1_unstructured(m, name, amount, opts)
  local o
  amount, o = amount_of('prune.l1_unstructured', amount, {'importance_scores'})
  prune_with(P.L1Unstructured(amount), m, name, (opts and opts.importance_scores) or o.importance_scores)
  return m
end

--- prune.random_structured(m, name, amount, dim): drops random whole slices
-- along dim (1-based) among those still kept.
function P.random_structured(m, name, amount, dim)
  if type(amount) == 'table' then
    local o = A.check_options('prune.random_structured', amount, {amount = true, dim = true})
    amount, dim = o.amount, o.dim
  end
  if amount == nil or dim == nil then fail('prune.random_structured: amount and dim are required') end
  prune_with(P.RandomStructured(amount, dim), m, name)
  return m
end

--- prune.ln_structured(m, name, amount, n, dim, {importance_scores =}): drops
-- whole slices along dim (1-based) with the smallest L-n norm.
function P.ln_structured(m, name, amount, n, dim, opts)
  local scores = opts and opts.importance_scores
  if type(amount) == 'table' then
    local o = A.check_options('prune.ln_structured', amount, {amount = true, n = true, dim = true,
                                                              importance_scores = true})
    amount, n, dim, scores = o.amount, o.n, o.dim, o.importance_scores
  end
  if amount == nil or n == nil or dim == nil then fail('prune.ln_structured: amount, n and dim are required') end
  if type(dim) ~= 'number' or dim == 0 then fail('prune.ln_structured: dim is 1-based, got ' .. tostring(dim)) end
  prune_with(P.LnStructured(amount, n, dim), m, name, scores)
  return m
end

--- prune.custom_from_mask(m, name, mask)
function P.custom_from_mask(m, name, mask)
  prune_with(P.CustomFromMask(mask), m, name)
  return m
end

--- prune.global_unstructured({{m1, 'weight'}, {m2, 'weight'}}, {pruning_method =
-- prune.L1Unstructured (or 'l1'), amount =, ...}): the smallest entries over all
-- the tensors together. pruning_method may be any unstructured method class
-- (RandomUnstructured or 'random', or a user's); the other options are its
-- constructor's keywords.
function P.global_unstructured(params, opts)
  local op = 'prune.global_unstructured'
  if type(opts) ~= 'table' then fail(op .. ': options {pruning_method =, amount =, ...} are required') end
  local cls = opts.pruning_method or 'l1'
  if cls == 'l1' then cls = P.L1Unstructured elseif cls == 'random' then cls = P.RandomUnstructured end
  if class.issubclass(cls, Base) and rawget(cls, '_keys') then   -- a built-in method: its keywords are known
    local allowed = {pruning_method = true}
    for _, k in ipairs(cls._keys) do allowed[k] = true end
    A.check_options(op, opts, allowed)
  end
  if cls == 'l1' then cls = P.L1Unstructured elseif cls == 'random' then cls = P.RandomUnstructured end
  if cls == Base or not class.issubclass(cls, Base) then
    fail(op .. ": pruning_method must be 'l1', 'random' or a pruning method class, got " .. A.describe(cls))
  end
  if cls.PRUNING_TYPE ~= 'unstructured' then
    fail(("%s: only 'unstructured' methods prune globally, %s is '%s'"):format(
      op, cls.__name, tostring(cls.PRUNING_TYPE)))
  end
  local kw = {}
  for k, v in pairs(opts) do if k ~= 'pruning_method' then kw[k] = v end end
  local meth = cls(kw)
  if type(params) ~= 'table' or #params == 0 then fail(op .. ': params must be a non-empty list of {module, name}') end
  local scores, olds = {}, {}
  for i, e in ipairs(params) do
    local m, name = e[1], e[2]
    A.arg(op, nil, ('params[%d][1]'):format(i), m, 'module')
    local hooks = hooks_of(m)
    local t = hooks[name] and m[name .. '_orig'] or m._parameters:get(name)
    if t == nil then fail(("%s: module %s has no parameter '%s'"):format(op, m.__name, tostring(name))) end
    olds[i] = hooks[name] and m[name .. '_mask'] or flow.ones_like(t)
    scores[i] = (t:detach() * olds[i]):reshape(-1)
  end
  local flat_old = {}
  for i, o in ipairs(olds) do flat_old[i] = o:reshape(-1) end
  local all_old = flow.cat(flat_old, 1)
  local mask = no_grad(function() return combine(meth, flow.cat(scores, 1), all_old) end)
  local pos = 1
  for i, e in ipairs(params) do
    local n = olds[i]:numel()
    P.custom_from_mask(e[1], e[2], mask:narrow(1, pos, n):view(olds[i]:size()))
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
  local methods = rawget(m, '_prune_methods')
  if methods then methods[name] = nil end
  m:delete(name .. '_orig')
  m:delete(name .. '_mask')
  m:delete(name)
  m:register_parameter(name, orig)
  return m
end

--- prune.method_of(m, name): the method (or PruningContainer) pruning m.<name>, or nil.
function P.method_of(m, name)
  local methods = rawget(m, '_prune_methods')
  return methods and methods[name] or nil
end

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
