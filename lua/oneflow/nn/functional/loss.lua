-- oneflow.nn.functional.loss: losses composed from differentiable ops, each
-- with {reduction = 'mean' | 'sum' | 'none'} (PyTorch semantics). Class
-- labels are 1-based. nll_loss and cross_entropy here are the composed
-- versions; nn.functional prefers the kernel-backed ones when they exist.
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'
local act = require 'oneflow.nn.functional.activation'

local fail, shape_str = U.fail, U.shape_str
local check_tensor = require('oneflow._args').check_tensor
-- three tensor arguments, each named in the error
local function check3(op, a, na, b, nb, c, nc)
  check_tensor(op, a, na, 1); check_tensor(op, b, nb, 2); check_tensor(op, c, nc, 3)
end
local legacy_reduction = require('oneflow.ops.nn_loss').legacy_reduction

-- U.parse, then PyTorch's deprecated size_average / reduce (when the spec
-- has them and either is given) folded into reduction, as PyTorch does.
local function parse(name, spec, ...)
  local a = U.parse(name, spec, ...)
  a.reduction = legacy_reduction(a)
  return a
end
local F = {}

local function reduce(loss, reduction, name)
  if reduction == 'mean' then return loss:mean() end
  if reduction == 'sum' then return loss:sum() end
  if reduction == 'none' then return loss end
  fail(("%s: reduction must be 'none', 'mean' or 'sum', got %s"):format(name, tostring(reduction)))
end
F._reduce = reduce

local function same_shape(name, input, target)
  local a, b = input:size(), target:size()
  local ok = #a == #b
  for i = 1, ok and #a or 0 do if a[i] ~= b[i] then ok = false end end
  if not ok then
    fail(('%s: target size %s must be the same as input size %s'):format(
      name, shape_str(target), shape_str(input)))
  end
end

local red_spec = {{'size_average'}, {'reduce'}, {'reduction', 'mean'}}

--- F.mse_loss(input, target, {reduction = 'mean'})
function F.mse_loss(input, target, ...)
  local a = parse('mse_loss', red_spec, ...)
  return reduce((input - target):square(), a.reduction, 'mse_loss')
end

--- F.l1_loss(input, target, {reduction = 'mean'}): mean absolute error.
function F.l1_loss(input, target, ...)
  local a = parse('l1_loss', red_spec, ...)
  return reduce((input - target):abs(), a.reduction, 'l1_loss')
end

local smooth_spec = {{'size_average'}, {'reduce'}, {'reduction', 'mean'}, {'beta', 1}}
--- F.smooth_l1_loss(input, target, {beta = 1}): 0.5 d^2 / beta below beta, d - beta / 2 above.
function F.smooth_l1_loss(input, target, ...)
  local a = parse('smooth_l1_loss', smooth_spec, ...)
  if a.beta < 0 then fail('smooth_l1_loss: beta must be non-negative, got ' .. a.beta) end
  local d = (input - target):abs()
  if a.beta == 0 then return reduce(d, a.reduction, 'smooth_l1_loss') end
  local loss = flow.where(d:lt(a.beta), d:square() * (0.5 / a.beta), d - 0.5 * a.beta)
  return reduce(loss, a.reduction, 'smooth_l1_loss')
end

local huber_spec = {{'reduction', 'mean'}, {'delta', 1}}
--- F.huber_loss(input, target, {delta = 1}): 0.5 d^2 below delta, delta (d - delta / 2) above.
function F.huber_loss(input, target, ...)
  local a = parse('huber_loss', huber_spec, ...)
  local d = (input - target):abs()
  local loss = flow.where(d:lt(a.delta), d:square() * 0.5, (d - 0.5 * a.delta) * a.delta)
  return reduce(loss, a.reduction, 'huber_loss')
end

local bce_spec = {{'weight', nil}, {'size_average'}, {'reduce'}, {'reduction', 'mean'}}
--- F.binary_cross_entropy(p, y, {weight =, reduction =}): logs clamped at -100.
function F.binary_cross_entropy(input, target, ...)
  local a = parse('binary_cross_entropy', bce_spec, ...)
  same_shape('binary_cross_entropy', input, target)
  if input:numel() > 0 and (input:min():item() < 0 or input:max():item() > 1) then
    fail('binary_cross_entropy: all elements of input should be between 0 and 1')
  end
  local lp = input:log():clamp(-100, nil)
  local lq = (1 - input):log():clamp(-100, nil)
  local loss = -(target * lp + (1 - target) * lq)
  if a.weight ~= nil then loss = loss * a.weight end
  return reduce(loss, a.reduction, 'binary_cross_entropy')
end

local bcel_spec = {{'weight', nil}, {'size_average'}, {'reduce'}, {'reduction', 'mean'}, {'pos_weight', nil}}
--- F.binary_cross_entropy_with_logits(x, y, {weight =, pos_weight =}):
-- (1 - y) x + (1 + (pos_weight - 1) y) log(1 + exp(-x)), computed stably.
function F.binary_cross_entropy_with_logits(input, target, ...)
  local a = parse('binary_cross_entropy_with_logits', bcel_spec, ...)
  same_shape('binary_cross_entropy_with_logits', input, target)
  local sp = (-input):softplus()
  local loss
  if a.pos_weight ~= nil then
    local lw = (a.pos_weight - 1) * target + 1
    loss = (1 - target) * input + lw * sp
  else
    loss = (1 - target) * input + sp
  end
  if a.weight ~= nil then loss = loss * a.weight end
  return reduce(loss, a.reduction, 'binary_cross_entropy_with_logits')
end

local kl_spec = {{'size_average'}, {'reduce'}, {'reduction', 'mean'}, {'log_target', false}}
--- F.kl_div(input, target, {reduction = 'mean', log_target = false}):
-- input holds log-probabilities; 'batchmean' divides the sum by size(1).
function F.kl_div(input, target, ...)
  local a = parse('kl_div', kl_spec, ...)
  local loss
  if a.log_target then
    loss = target:exp() * (target - input)
  else
    -- xlogy(t, t) - t * input, with 0 log 0 = 0
    local safe = flow.where(target:gt(0), target, 1)
    loss = target * safe:log() - target * input
  end
  if a.reduction == 'batchmean' then
    if input:dim() == 0 then return loss:sum() end
    return loss:sum() / input:size(1)
  end
  return reduce(loss, a.reduction, 'kl_div')
end

------------------------------------------------------------------ distillation
local distill_spec = {{'temperature', 4}, {'alpha', 0.9}, {'reduction', 'mean'}}
--- F.distillation_loss(student_logits, teacher_logits, target, {temperature = 4,
-- alpha = 0.9, reduction = 'mean'}): Hinton et al.'s knowledge distillation,
--   alpha * T^2 * KL(softmax(teacher / T) || softmax(student / T))   (batchmean)
--   + (1 - alpha) * cross_entropy(student, target)                   (1-based labels)
-- The T^2 keeps the soft term's gradients on the scale of the hard term's;
-- the teacher's logits are detached. reduction applies to the hard term
-- ('mean' or 'sum'; the soft term is per batch).
function F.distillation_loss(student, teacher, target, ...)
  local a = parse('distillation_loss', distill_spec, ...)
  local T = a.temperature
  if type(T) ~= 'number' or T <= 0 then
    fail('distillation_loss: temperature must be a positive number, got ' .. tostring(T))
  end
  if type(a.alpha) ~= 'number' or a.alpha < 0 or a.alpha > 1 then
    fail('distillation_loss: alpha must be in [0, 1], got ' .. tostring(a.alpha))
  end
  if a.reduction ~= 'mean' and a.reduction ~= 'sum' then
    fail("distillation_loss: reduction must be 'mean' or 'sum', got " .. tostring(a.reduction))
  end
  if student:dim() ~= 2 or teacher:dim() ~= 2 or student:size(1) ~= teacher:size(1)
     or student:size(2) ~= teacher:size(2) then
    fail(('distillation_loss: student %s and teacher %s logits must both be [N, C]'):format(
      shape_str(student), shape_str(teacher)))
  end
  local soft = F.kl_div(act.log_softmax(student / T, 2), act.softmax(teacher:detach() / T, 2),
                        {reduction = 'batchmean'}) * (T * T)
  local hard = flow.nn.functional.cross_entropy(student, target, {reduction = a.reduction})
  return soft * a.alpha + hard * (1 - a.alpha)
end

------------------------------------------------------------------ nll / cross entropy
local nll_spec = {{'weight', nil}, {'size_average'}, {'ignore_index', -100}, {'reduce'}, {'reduction', 'mean'}}

-- (input [N, C, *] or [C], target [N, *] or []) -> input, target, unbatched
local function class_layout(name, input, target)
  if input:dim() == 1 then
    if target:dim() ~= 0 then
      fail(('%s: for an input %s the target must be 0-d, got %s'):format(
        name, shape_str(input), shape_str(target)))
    end
    return input:unsqueeze(1), target:reshape(1), true
  end
  local ok = target:dim() == input:dim() - 1 and target:size(1) == input:size(1)
  for d = 3, input:dim() do ok = ok and target:size(d - 1) == input:size(d) end
  if not ok then
    fail(('%s: expected target of shape [N, d1, ...] for input %s, got %s'):format(
      name, shape_str(input), shape_str(target)))
  end
  return input, target, false
end

-- per-element weights w[target] (0 where ignored) and the safe target
local function target_weights(input, target, weight, ignore_index)
  local keep = target:ne(ignore_index)
  local safe = flow.where(keep, target, 1)
  local w
  if weight ~= nil then
    w = weight:index_select(1, safe:reshape(-1)):view(safe:size()) * keep:to(input.dtype)
  else
    w = keep:to(input.dtype)
  end
  return safe, w, keep
end

--- F.nll_loss(logp, target, {weight =, ignore_index = -100, reduction = 'mean'})
function F.nll_loss(input, target, ...)
  local a = parse('nll_loss', nll_spec, ...)
  local x, t, unbatched = class_layout('nll_loss', input, target)
  local safe, w = target_weights(x, t, a.weight, a.ignore_index)
  local picked = x:gather(2, safe:unsqueeze(2)):squeeze(2)
  local loss = -picked * w
  if a.reduction == 'mean' then return loss:sum() / w:sum() end
  if unbatched and a.reduction == 'none' then return loss:reshape({}) end
  return reduce(loss, a.reduction, 'nll_loss')
end

local ce_spec = {{'weight', nil}, {'size_average'}, {'ignore_index', -100}, {'reduce'},
                 {'reduction', 'mean'}, {'label_smoothing', 0}}

local function weight_view(weight, x)
  local shape = {}
  for d = 1, x:dim() do shape[d] = d == 2 and weight:numel() or 1 end
  return weight:view(shape)
end

-- cross entropy with class probabilities as target
local function ce_probs(a, logp, target)
  local c = logp:size(2)
  if a.label_smoothing > 0 then target = target * (1 - a.label_smoothing) + a.label_smoothing / c end
  local prod = logp * target
  if a.weight ~= nil then prod = prod * weight_view(a.weight, logp) end
  local loss = -prod:sum(2)
  if a.reduction == 'mean' then return loss:sum() / (logp:numel() / c) end
  return reduce(loss, a.reduction, 'cross_entropy')
end

--- Cross entropy of logits against class ids or class probabilities, as
-- PyTorch's: `F.cross_entropy(net(x), y)`. Class ids are 1-based.
-- @function F.cross_entropy
-- @tparam Tensor input logits [N, C] (or [C], or [N, C, d1, ...])
-- @tparam Tensor target int64 class ids 1..C [N] (or [N, d1, ...]), or probabilities shaped like input
-- @param[opt] ... weight, ignore_index, reduction, label_smoothing positionally,
-- or an options table `{weight =, ignore_index = -100, reduction = 'mean', label_smoothing = 0}`
-- @treturn Tensor a scalar, or [N, ...] with `reduction = 'none'`
function F.cross_entropy(input, target, ...)
  local a = parse('cross_entropy', ce_spec, ...)
  local unbatched = input:dim() == 1
  local x = unbatched and input:unsqueeze(1) or input
  local logp = act.log_softmax(x, 2)
  if target.dtype.is_floating_point then
    same_shape('cross_entropy', input, target)
    local r = ce_probs(a, logp, unbatched and target:unsqueeze(1) or target)
    return unbatched and a.reduction == 'none' and r:reshape({}) or r
  end
  local nll_opts = {weight = a.weight, ignore_index = a.ignore_index, reduction = a.reduction}
  local nll = F.nll_loss(unbatched and logp:squeeze(1) or logp, target, nll_opts)
  local eps = a.label_smoothing
  if eps == 0 then return nll end
  local _, t = class_layout('cross_entropy', x, unbatched and target:reshape({}) or target)
  local _, w, keep = target_weights(x, t, a.weight, a.ignore_index)
  local lw = a.weight ~= nil and logp * weight_view(a.weight, logp) or logp
  local smooth = -lw:sum(2) * keep:to(logp.dtype)
  local r
  if a.reduction == 'mean' then r = smooth:sum() / w:sum()
  elseif a.reduction == 'none' and unbatched then r = smooth:reshape({})
  else r = reduce(smooth, a.reduction, 'cross_entropy') end
  return nll * (1 - eps) + r * (eps / x:size(2))
end

------------------------------------------------------------------ margin losses
local margin_spec = {{'margin', 0}, {'size_average'}, {'reduce'}, {'reduction', 'mean'}}

--- F.margin_ranking_loss(x1, x2, y, {margin = 0}): max(0, -y (x1 - x2) + margin)
function F.margin_ranking_loss(x1, x2, y, ...)
  check3('margin_ranking_loss', x1, 'input1', x2, 'input2', y, 'target')
  local a = parse('margin_ranking_loss', margin_spec, ...)
  return reduce((-y * (x1 - x2) + a.margin):clamp(0, nil), a.reduction, 'margin_ranking_loss')
end

local hinge_spec = {{'margin', 1}, {'size_average'}, {'reduce'}, {'reduction', 'mean'}}
--- F.hinge_embedding_loss(x, y, {margin = 1}): x where y = 1, max(0, margin - x) where y = -1.
function F.hinge_embedding_loss(x, y, ...)
  local a = parse('hinge_embedding_loss', hinge_spec, ...)
  local neg = (a.margin - x):clamp(0, nil)
  local loss = flow.where(y:eq(1), x, 0) + flow.where(y:eq(-1), neg, 0)
  return reduce(loss, a.reduction, 'hinge_embedding_loss')
end

--- F.soft_margin_loss(x, y): log(1 + exp(-y x))
function F.soft_margin_loss(x, y, ...)
  local a = parse('soft_margin_loss', red_spec, ...)
  return reduce((-y * x):softplus(), a.reduction, 'soft_margin_loss')
end

--- F.cosine_embedding_loss(x1, x2, y, {margin = 0}): 1 - cos where y = 1,
-- max(0, cos - margin) where y = -1 (cosine over the last dim).
function F.cosine_embedding_loss(x1, x2, y, ...)
  check3('cosine_embedding_loss', x1, 'input1', x2, 'input2', y, 'target')
  local a = parse('cosine_embedding_loss', margin_spec, ...)
  local EPS = 1e-12
  local dot = (x1 * x2):sum(-1)
  local m1 = (x1 * x1):sum(-1) + EPS
  local m2 = (x2 * x2):sum(-1) + EPS
  local cos = dot / (m1 * m2):sqrt()
  local loss = flow.where(y:eq(1), 1 - cos, 0) + flow.where(y:eq(-1), (cos - a.margin):clamp(0, nil), 0)
  return reduce(loss, a.reduction, 'cosine_embedding_loss')
end

local triplet_spec = {{'margin', 1}, {'p', 2}, {'eps', 1e-6}, {'swap', false}, {'size_average'}, {'reduce'},
                      {'reduction', 'mean'}}
--- F.triplet_margin_loss(anchor, pos, neg, {margin = 1, p = 2, eps = 1e-6, swap = false})
function F.triplet_margin_loss(an, pos, neg, ...)
  local a = parse('triplet_margin_loss', triplet_spec, ...)
  local function dist(u, v) return (u - v + a.eps):norm(a.p, -1) end
  local dp, dn = dist(an, pos), dist(an, neg)
  if a.swap then dn = flow.minimum(dn, dist(pos, neg)) end
  return reduce((dp - dn + a.margin):clamp(0, nil), a.reduction, 'triplet_margin_loss')
end

local mlsm_spec = {{'weight', nil}, {'size_average'}, {'reduce'}, {'reduction', 'mean'}}
--- F.multilabel_soft_margin_loss(x [N, C], y [N, C], {weight =})
function F.multilabel_soft_margin_loss(x, y, ...)
  local a = parse('multilabel_soft_margin_loss', mlsm_spec, ...)
  local loss = -(y * act.logsigmoid(x) + (1 - y) * act.logsigmoid(-x))
  if a.weight ~= nil then loss = loss * a.weight end
  return reduce(loss:mean(-1), a.reduction, 'multilabel_soft_margin_loss')
end

local poisson_spec = {{'log_input', true}, {'full', false}, {'size_average'}, {'eps', 1e-8}, {'reduce'},
                      {'reduction', 'mean'}}
--- F.poisson_nll_loss(input, target, {log_input = true, full = false, eps = 1e-8})
function F.poisson_nll_loss(input, target, ...)
  local a = parse('poisson_nll_loss', poisson_spec, ...)
  local loss
  if a.log_input then loss = input:exp() - target * input
  else loss = input - target * (input + a.eps):log() end
  if a.full then
    local t = flow.where(target:gt(1), target, 1)
    local stirling = t * t:log() - t + (t * (2 * math.pi)):log() * 0.5
    loss = loss + flow.where(target:gt(1), stirling, 0)
  end
  return reduce(loss, a.reduction, 'poisson_nll_loss')
end

local gauss_spec = {{'full', false}, {'eps', 1e-6}, {'reduction', 'mean'}}
--- F.gaussian_nll_loss(input, target, var, {full = false, eps = 1e-6})
function F.gaussian_nll_loss(input, target, var, ...)
  check3('gaussian_nll_loss', input, 'input', target, 'target', var, 'var')
  local a = parse('gaussian_nll_loss', gauss_spec, ...)
  local v = var:clamp(a.eps, nil)
  local loss = (v:log() + (input - target):square() / v) * 0.5
  if a.full then loss = loss + 0.5 * math.log(2 * math.pi) end
  return reduce(loss, a.reduction, 'gaussian_nll_loss')
end

return F
