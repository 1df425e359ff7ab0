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
