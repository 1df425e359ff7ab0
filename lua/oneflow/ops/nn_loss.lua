-- oneflow.ops.nn_loss: F.cross_entropy and F.nll_loss -- fused C kernels
-- with their backward (core/ops/loss.c); nn.functional re-exports them.
-- PyTorch's signatures, positional or as options (size_average and reduce
-- are PyTorch's deprecated arguments, mapped onto reduction as it does):
--   F.cross_entropy(input, target, weight, size_average, ignore_index = -100,
--                   reduce, reduction = 'mean', label_smoothing = 0)
--   F.nll_loss(input, target, weight, size_average, ignore_index = -100,
--              reduce, reduction = 'mean')
-- Class labels are 1-based (1..C); ignore_index is in the same base, and its
-- default -100 matches no class.
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local A = require 'oneflow._args'

local C, out1, wrap = core.C, core.out1, core.wrap
local check_tensor, handle, check_status, parse = A.check_tensor, A.handle, A.check_status, A.parse
local EMPTY, is_tensor = A.EMPTY, T.is_tensor
local BASE = 1   -- class labels start at 1 in Lua

local M = {}

------------------------------------------------------------------ losses
local reductions = {none = 0, mean = 1, sum = 2}

local function reduction_arg(opts, op)
  local r = reductions[opts.reduction or 'mean']
  if not r then
    A.fail(("%s: reduction must be 'none', 'mean' or 'sum', got '%s'")
          :format(op, tostring(opts.reduction)))
  end
  return r
end

-- A target given as a Lua number or list becomes an int64 tensor.
local function target_arg(t, op)
  if is_tensor(t) then return t end
  if type(t) == 'number' or type(t) == 'table' then return T.flow.tensor(t, {dtype = 'int64'}) end
  A.fail(('%s: target must be a tensor of class indices or probabilities, got %s')
        :format(op, type(t)))
end

function M.cross_entropy(input, target, opts)
  check_tensor('cross_entropy', input)
  target = target_arg(target, 'cross_entropy')
  opts = opts or EMPTY
  local ls = opts.label_smoothing or 0
  check_status(C.of_cross_entropy(input.p, target.p,
    handle('cross_entropy', opts.weight, 'weight'), reduction_arg(opts, 'cross_entropy'),
    opts.ignore_index or -100, ls, BASE, out1))
  return wrap(out1[0])
end

--- F.nll_loss(input, target, {weight =, ignore_index = -100, reduction = 'mean'}): negative log-likelihood of
-- log-probabilities; targets are 1-based.
function M.nll_loss(input, target, opts)
  check_tensor('nll_loss', input)
  target = target_arg(target, 'nll_loss')
  opts = opts or EMPTY
  check_status(C.of_nll_loss(input.p, target.p, handle('nll_loss', opts.weight, 'weight'),
    reduction_arg(opts, 'nll_loss'), opts.ignore_index or -100, BASE, out1))
  return wrap(out1[0])
end

------------------------------------------------------------------ SBP (global tensors)
-- Beside each binding, its signatures for global tensors (see
-- oneflow.distributed.rules); the calls below run on the local shards.
local R = require 'oneflow.distributed.rules'

-- the sample group of a split batch and a sum over it (distributed/global.lua),
-- looked up at call time: that module loads after the ops
local function split_group(P, chosen, except)
  return require('oneflow.distributed.global').sample_group(P, chosen, except)
end
local function all_reduce(t, g) return require('oneflow.distributed.global').all_reduce_in(t, g) end

-- reduction = 'mean' on a split batch: the local sum over the global
-- denominator (the weight of the counted targets, as a single process
-- divides by), so the partial sums add up to the global mean.
local function global_mean(orig, largs, _, chosen, P)
  local x, t = largs[1], largs[2]
  local opts = {}
  for k, v in pairs(largs[3] or EMPTY) do opts[k] = v end
  opts.reduction = 'sum'
  local total = orig(x, t, opts)
  local den = require('oneflow.autograd').no_grad(function()
    if t.dtype.is_floating_point then
      return T.flow.tensor(t:numel() / x:size(2), {dtype = x.dtype})
    end
    local keep = t:ne(opts.ignore_index or -100)
    if opts.weight == nil then return keep:sum():to(x.dtype) end
    local safe = T.flow.where(keep, t, BASE):reshape(-1)
    return (opts.weight:index_select(1, safe) * keep:reshape(-1):to(opts.weight.dtype)):sum()
           :to(x.dtype)
  end)
  return total / all_reduce(den, split_group(P, chosen, 2))
end

local function needs_global_target(rule)
  return function(ctx)
    if ctx.roles[1] ~= 1 or ctx.roles[2] ~= 2 then
      return 'input and target must both be global tensors'
    end
    return rule(ctx)
  end
end

--- cross_entropy / nll_loss: the batch (and extra dims) may split; 'mean'
-- is over the global batch.
M.cross_entropy = T.sbp_fn('cross_entropy', needs_global_target(R.class_loss(global_mean)),
                           M.cross_entropy)
M.nll_loss = T.sbp_fn('nll_loss', needs_global_target(R.class_loss(global_mean)), M.nll_loss)

-- Vocabulary-parallel cross_entropy: logits [N, C] split over the classes
-- (S(2) along one grid axis; the other axis may split the batch) with class
-- targets. Instead of gathering the logits, each rank works on its classes
-- and only per-row values cross ranks (as Megatron-LM's parallel loss):
-- the row max (all-reduce max, no gradient: the loss does not depend on
-- it), the sum of exp(x - max) and the target's logit (partial sums on the
-- class axis, reduced by boxing: N values each). Built from global ops, so
-- autograd gives the gradient: softmax - onehot on each rank's classes.
-- Class weights and label smoothing take the general path (boxing).
local comm_all_reduce_max
local function vocab_parallel(x, t, opts)
  local GL = require 'oneflow.distributed.global'
  if not (GL.is_global(x) and GL.is_global(t)) or x.placement ~= t.placement then return nil end
  opts = opts or EMPTY
  if opts.weight ~= nil or (opts.label_smoothing or 0) ~= 0 then return nil end
  if #x._shape ~= 2 or #t._shape ~= 1 or t._dtype.is_floating_point then return nil end
  local P, s, axis = x.placement, x._sbp, nil
  for a, v in ipairs(s) do
    if v.kind == 'S' and R.pos(v.dim, 2) == 2 then axis = a
    elseif v.kind == 'P' then return nil end
  end
  if not axis or P.hierarchy[axis] == 1 or not P:has_me() then return nil end
  local PL = require 'oneflow.distributed.placement'
  local row = {}   -- per-row values: whole on the class axis, rows as x's
  for a, v in ipairs(s) do row[a] = a == axis and PL.sbp.broadcast or v end
  local flow, no_grad = T.flow, require('oneflow.autograd').no_grad
  local N, Cn = x._shape[1], x._shape[2]
  local tl = t:to_global(P, row)._local
  local xl = x._local
  local rows, cl = xl:size(1), xl:size(2)
  -- this rank's classes: lo+1 .. lo+cl (the first Cn % parts ranks one more)
  local parts, c = P.hierarchy[axis], P.coord[axis]
  local lo = c * math.floor(Cn / parts) + math.min(c, Cn % parts)
  local m = no_grad(function()
    local mx = cl > 0 and xl:amax(2, true) or flow.full({rows, 1}, -math.huge, {dtype = xl.dtype})
    comm_all_reduce_max(mx, P:axis_group(axis))
    return mx
  end)
  local ignore = opts.ignore_index or -100
  local mask, keep = no_grad(function()
    local rel = tl - (lo + BASE - 1)          -- 1-based within this rank's classes
    local inside = rel:ge(1):logical_and(rel:le(cl)):logical_and(tl:ne(ignore))
    local oh = cl > 0 and flow.one_hot(flow.where(inside, rel, 1), cl):to(xl.dtype)
               or flow.zeros(rows, 0, {dtype = xl.dtype})
    return oh * inside:unsqueeze(2):to(xl.dtype), tl:ne(ignore):to(xl.dtype)
  end)
  local gm = GL.new(m, {N, 1}, P, row, x._dtype)
  local gmask = GL.new(mask, {N, Cn}, P, s, x._dtype)
  local gkeep = GL.new(keep, {N}, P, row, x._dtype)
  local z = x - gm
  local lse = z:exp():sum(2):to_global(P, row):log()
  local picked = (z * gmask):sum(2):to_global(P, row)
  local loss = (lse - picked) * gkeep
  local red = opts.reduction or 'mean'
  if red == 'none' then return loss end
  if red == 'sum' then return loss:sum() end
  if red ~= 'mean' then return nil end   -- the general path names the error
  return loss:sum() / gkeep:sum()
end

comm_all_reduce_max = function(t, g)
  require('oneflow.distributed.comm').all_reduce(t, {group = g, op = 'max'})
end

local sbp_cross_entropy = M.cross_entropy
function M.cross_entropy(input, target, opts)
  local r = vocab_parallel(input, target, opts)
  if r ~= nil then return r end
  return sbp_cross_entropy(input, target, opts)
end

------------------------------------------------------------------ PyTorch's positional arguments
local ce_spec = {{'weight'}, {'size_average'}, {'ignore_index', -100}, {'reduce'}, {'reduction', 'mean'},
                 {'label_smoothing', 0}}
local nll_spec = {{'weight'}, {'size_average'}, {'ignore_index', -100}, {'reduce'}, {'reduction', 'mean'}}

--- PyTorch's legacy size_average / reduce (either given) -> reduction.
function M.legacy_reduction(a)
  if a.size_average == nil and a.reduce == nil then return a.reduction end
  if a.reduce == false then return 'none' end
  if a.size_average == false then return 'sum' end
  return 'mean'
end

local cross_entropy, nll_loss = M.cross_entropy, M.nll_loss

-- canonical.X(input, target, ...) -> input, target, options (what the SBP
-- rules read).
M.canonical = {}
function M.canonical.cross_entropy(input, target, ...)
  local a = parse('cross_entropy', ce_spec, ...)
  return input, target, {weight = a.weight, ignore_index = a.ignore_index,
    reduction = M.legacy_reduction(a), label_smoothing = a.label_smoothing}
end

function M.canonical.nll_loss(input, target, ...)
  local a = parse('nll_loss', nll_spec, ...)
  return input, target, {weight = a.weight, ignore_index = a.ignore_index, reduction = M.legacy_reduction(a)}
end

function M.cross_entropy(...) return cross_entropy(M.canonical.cross_entropy(...)) end
function M.nll_loss(...) return nll_loss(M.canonical.nll_loss(...)) end

return M
