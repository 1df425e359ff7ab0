-- oneflow.ops.nn_norm: functional normalisation -- fused C kernels with
-- their backward (core/ops/norm.c); nn.functional re-exports them.
-- PyTorch's signatures: positional arguments in its order, or an options
-- table with the same names, or both (an argument given twice is an error):
--   F.batch_norm(x, running_mean, running_var, weight, bias, training = false,
--                momentum = 0.1, eps = 1e-5)
--   F.layer_norm(x, normalized_shape, weight, bias, eps = 1e-5)
--   F.rms_norm(x, normalized_shape, weight, eps = machine epsilon)
--   F.group_norm(x, num_groups, weight, bias, eps = 1e-5)
--   F.instance_norm(x, running_mean, running_var, weight, bias,
--                   use_input_stats = true, momentum = 0.1, eps = 1e-5)
-- e.g. F.layer_norm(x, {1024}, w, b) == F.layer_norm(x, {1024}, {weight = w, bias = b}).
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local A = require 'oneflow._args'

local C, out1, wrap = core.C, core.out1, core.wrap
local check_tensor, handle, check_status, parse = A.check_tensor, A.handle, A.check_status, A.parse
local is_tensor = T.is_tensor
local EMPTY = A.EMPTY
local types = require 'oneflow.types'

local M = {}

-- The implementations take (x, positional tensors, options) as the SBP
-- rules below read them; the PyTorch-style wrappers are at the end.
------------------------------------------------------------------ normalisation
function M.batch_norm(x, running_mean, running_var, opts)
  check_tensor('batch_norm', x)
  opts = opts or EMPTY
  local momentum = opts.momentum
  if momentum == nil then momentum = 0.1 end
  check_status(C.of_batch_norm(x.p, handle('batch_norm', running_mean, 'running_mean'),
    handle('batch_norm', running_var, 'running_var'), handle('batch_norm', opts.weight, 'weight'),
    handle('batch_norm', opts.bias, 'bias'), opts.training and 1 or 0, momentum,
    opts.eps or 1e-5, out1))
  return wrap(out1[0])
end

local function shape_list(s, op)
  if type(s) == 'number' then return {s} end
  if type(s) == 'table' and s.totable then return s:totable() end
  if type(s) ~= 'table' then
    A.fail(('%s: normalized_shape must be a number or a list of sizes, got %s'):format(op, type(s)))
  end
  return s
end

-- the number of normalized dims, after checking they are x's last ones
local function normalized_dims(op, x, normalized_shape)
  local ns = shape_list(normalized_shape, op)
  local shape, k = x:size(), #ns
  local ok = k >= 1 and k <= #shape
  for i = 1, k do ok = ok and shape[#shape - k + i] == ns[i] end
  if not ok then
    A.fail(('%s: normalized_shape [%s] does not match the last dims of the input [%s]')
          :format(op, table.concat(ns, ', '), table.concat(shape:totable(), ', ')))
  end
  return k
end

function M.layer_norm(x, normalized_shape, opts)
  check_tensor('layer_norm', x)
  opts = opts or EMPTY
  local k = normalized_dims('layer_norm', x, normalized_shape)
  check_status(C.of_layer_norm(x.p, k, handle('layer_norm', opts.weight, 'weight'),
    handle('layer_norm', opts.bias, 'bias'), opts.eps or 1e-5, out1))
  return wrap(out1[0])
end

-- PyTorch's default eps: the machine epsilon of the compute type (float64's
-- for float64, float32's for float32/float16/bfloat16)
local EPS64, EPS32 = 2.220446049250313e-16, 1.1920928955078125e-07
local function rms_eps(x, eps)
  if eps ~= nil then return eps end
  return x.dtype == types.by_name.float64 and EPS64 or EPS32
end

function M.rms_norm(x, normalized_shape, opts)
  check_tensor('rms_norm', x)
  opts = opts or EMPTY
  local k = normalized_dims('rms_norm', x, normalized_shape)
  check_status(C.of_rms_norm(x.p, k, handle('rms_norm', opts.weight, 'weight'),
    rms_eps(x, opts.eps), out1))
  return wrap(out1[0])
end

--- F.group_norm(x, num_groups, weight?, bias?, {eps = 1e-5}): normalises over groups of channels.
function M.group_norm(x, num_groups, opts)
  check_tensor('group_norm', x)
  opts = opts or EMPTY
  if type(num_groups) ~= 'number' then
    A.fail('group_norm: num_groups must be a number, got ' .. type(num_groups))
  end
  check_status(C.of_group_norm(x.p, num_groups, handle('group_norm', opts.weight, 'weight'),
    handle('group_norm', opts.bias, 'bias'), opts.eps or 1e-5, out1))
  return wrap(out1[0])
end

function M.instance_norm(x, opts)
  check_tensor('instance_norm', x)
  opts = opts or EMPTY
  local use_input_stats = opts.use_input_stats
  if use_input_stats == nil then use_input_stats = true end
  local momentum = opts.momentum
  if momentum == nil then momentum = 0.1 end
  local op = 'instance_norm'
  check_status(C.of_instance_norm(x.p, handle(op, opts.running_mean, 'running_mean'),
    handle(op, opts.running_var, 'running_var'), handle(op, opts.weight, 'weight'),
    handle(op, opts.bias, 'bias'), use_input_stats and 1 or 0, momentum, opts.eps or 1e-5, out1))
  return wrap(out1[0])
end

------------------------------------------------------------------ SBP (global tensors)
-- Beside each binding, its signatures for global tensors (see
-- oneflow.distributed.rules); the calls below run on the local shards.
local R = require 'oneflow.distributed.rules'
local S, Bc = R.S, R.B

-- the sample group of a split batch and a sum over it (distributed/global.lua),
-- looked up at call time: that module loads after the ops
local function split_group(P, chosen, except)
  return require('oneflow.distributed.global').sample_group(P, chosen, except)
end
local function all_reduce(t, g) return require('oneflow.distributed.global').all_reduce_in(t, g) end

-- SyncBatchNorm: batch statistics over the whole split batch (two small
-- all-reduces of C values forward, one of 2C backward); the weight and bias
-- gradients stay per-rank partial sums, as for any broadcast parameter.
local SyncBN = require('oneflow.autograd').Function:subclass('SyncBatchNorm')

local function bn_layout(x)
  local dims, shape = {}, {}
  for d = 1, x:dim() do
    if d ~= 2 then dims[#dims + 1] = d end
    shape[d] = d == 2 and x:size(2) or 1
  end
  return dims, shape
end

function SyncBN.forward(ctx, x, w, b, o)
  local dims, shape = bn_layout(x)
  local mean = all_reduce(x:sum(dims), o.group) / o.n
  local xc = x - mean:view(shape)
  local var = all_reduce((xc * xc):sum(dims), o.group) / o.n
  local invstd = (var + o.eps):rsqrt()
  local xhat = xc * invstd:view(shape)
  local y = xhat
  if w ~= nil then y = y * w:view(shape) end
  if b ~= nil then y = y + b:view(shape) end
  local m = o.momentum
  if o.running_mean ~= nil then
    o.running_mean:mul_(1 - m):add_(mean:to(o.running_mean.dtype) * m)
  end
  if o.running_var ~= nil then
    o.running_var:mul_(1 - m):add_((var * (o.n / (o.n - 1))):to(o.running_var.dtype) * m)
  end
  ctx.xhat, ctx.invstd, ctx.w, ctx.has_b, ctx.o = xhat, invstd, w, b ~= nil, o
  return y
end

function SyncBN.backward(ctx, dy)
  local xhat, o, w = ctx.xhat, ctx.o, ctx.w
  local dims, shape = bn_layout(xhat)
  local c = xhat:size(2)
  local dxhat = w ~= nil and dy * w:view(shape) or dy
  local sums = all_reduce(T.flow.cat({dxhat:sum(dims), (dxhat * xhat):sum(dims)}, 1), o.group)
  local s1, s2 = sums:narrow(1, 1, c), sums:narrow(1, c + 1, c)
  local dx = (dxhat * o.n - s1:view(shape) - xhat * s2:view(shape)) * (ctx.invstd / o.n):view(shape)
  local dw = w ~= nil and (dy * xhat):sum(dims) or nil
  local db = ctx.has_b and dy:sum(dims) or nil
  return dx, dw, db, nil
end

local function sync_batch_norm(orig, largs, ctx, chosen, P)
  local opts = largs[4] or EMPTY
  if not opts.training then return orig(unpack(largs, 1, ctx.n)) end
  local shape = ctx.shapes[1]
  local n = 1
  for d, v in ipairs(shape) do if d ~= 2 then n = n * v end end
  if n <= 1 then
    error(('batch_norm: expected more than 1 value per channel when training, got a global '
           .. 'input [%s] (statistics are synchronised over the split batch)')
          :format(table.concat(shape, ', ')), 0)
  end
  -- the running statistics are updated in place: they must be the global
  -- tensors' own shards, not boxed copies
  for i, what in pairs({[2] = 'running_mean', [3] = 'running_var'}) do
    local g = ctx.args[i]
    if g ~= nil and not rawequal(largs[i], g._local) then
      error(('batch_norm: %s must be broadcast (split(1) when the input is split on '
             .. 'channels) to be updated in place, got sbp %s'):format(what, tostring(g.sbp[1])), 0)
    end
  end
  local momentum = opts.momentum
  if momentum == nil then momentum = 0.1 end
  return SyncBN.apply(largs[1], opts.weight, opts.bias, {
    group = split_group(P, chosen, 2), n = n, eps = opts.eps or 1e-5, momentum = momentum,
    running_mean = largs[2], running_var = largs[3]})
end

--- batch_norm: channels split (statistics, weight and bias split on dim 1)
-- needs no communication; any other split dim synchronises the statistics
-- (SyncBatchNorm) when training.
M.batch_norm = T.sbp_fn('batch_norm', function(ctx)
  local sig = R.signer(ctx, {'input', 'running_mean', 'running_var'})
  local nd = #ctx.shapes[1]
  local sigs = {sig({}, Bc)}
  if nd < 2 then return sigs end
  sigs[#sigs + 1] = sig({input = S(2), running_mean = S(1), running_var = S(1), weight = S(1),
                         bias = S(1)}, S(2))
  for d = 1, nd do
    if d ~= 2 then sigs[#sigs + 1] = sig({input = S(d)}, S(d), {call = sync_batch_norm}) end
  end
  return sigs
end, M.batch_norm)

--- layer_norm (and rms_norm): any dim before the normalised ones may split.
local function norm_rows_sbp(ctx)
  local sig = R.signer(ctx, {'input'})
  local nd = #ctx.shapes[1]
  local ns = ctx.args[2]
  local k = type(ns) == 'number' and 1 or (type(ns) == 'table' and (ns.totable and #ns:totable()
                                                                    or #ns)) or nd
  local sigs = {sig({}, Bc)}
  for d = 1, nd - k do sigs[#sigs + 1] = sig({input = S(d)}, S(d)) end
  return sigs
end
M.layer_norm = T.sbp_fn('layer_norm', norm_rows_sbp, M.layer_norm)

--- rms_norm: as layer_norm.
M.rms_norm = T.sbp_fn('rms_norm', norm_rows_sbp, M.rms_norm)

M.group_norm = T.sbp_fn('group_norm', R.per_sample(false), M.group_norm)

--- instance_norm: per sample; running statistics (averaged over the batch)
-- need the whole batch.
M.instance_norm = T.sbp_fn('instance_norm', function(ctx)
  local o = ctx.args[2]
  if type(o) == 'table' and o.running_mean ~= nil then return {{ins = R.fill(#ctx.shapes, Bc), out = {Bc}}} end
  return R.per_sample(true)(ctx)
end, M.instance_norm)

------------------------------------------------------------------ PyTorch's positional arguments
local REQUIRED = A.REQUIRED
local bn_spec = {{'running_mean'}, {'running_var'}, {'weight'}, {'bias'}, {'training', false},
                 {'momentum', 0.1}, {'eps', 1e-5}}
local ln_spec = {{'normalized_shape', REQUIRED}, {'weight'}, {'bias'}, {'eps', 1e-5}}
local rms_spec = {{'normalized_shape', REQUIRED}, {'weight'}, {'eps'}}
local gn_spec = {{'num_groups', REQUIRED}, {'weight'}, {'bias'}, {'eps', 1e-5}}
local in_spec = {{'running_mean'}, {'running_var'}, {'weight'}, {'bias'}, {'use_input_stats', true},
                 {'momentum', 0.1}, {'eps', 1e-5}}

local batch_norm, layer_norm, rms_norm, group_norm, instance_norm =
  M.batch_norm, M.layer_norm, M.rms_norm, M.group_norm, M.instance_norm

-- canonical.X(x, ...) -> the arguments of the implementation (x, positional
-- tensors, options), which the SBP rules and the ONNX exporter read.
local canonical = {}
M.canonical = canonical

function canonical.batch_norm(x, ...)
  local a = parse('batch_norm', bn_spec, ...)
  return x, a.running_mean, a.running_var, {weight = a.weight, bias = a.bias, training = a.training,
    momentum = a.momentum, eps = a.eps}
end

function canonical.layer_norm(x, ...)
  local a = parse('layer_norm', ln_spec, ...)
  return x, a.normalized_shape, {weight = a.weight, bias = a.bias, eps = a.eps}
end

function canonical.rms_norm(x, ...)
  local a = parse('rms_norm', rms_spec, ...)
  -- the default eps filled in here, where the ONNX exporter reads it too
  return x, a.normalized_shape, {weight = a.weight, eps = is_tensor(x) and rms_eps(x, a.eps) or a.eps}
end

function canonical.group_norm(x, ...)
  local a = parse('group_norm', gn_spec, ...)
  return x, a.num_groups, {weight = a.weight, bias = a.bias, eps = a.eps}
end

function canonical.instance_norm(x, ...)
  local a = parse('instance_norm', in_spec, ...)
  return x, {running_mean = a.running_mean, running_var = a.running_var, weight = a.weight,
    bias = a.bias, use_input_stats = a.use_input_stats, momentum = a.momentum, eps = a.eps}
end

function M.batch_norm(...) return batch_norm(canonical.batch_norm(...)) end
--- F.layer_norm(x, normalized_shape, weight?, bias?, {eps = 1e-5}): normalises over the last dims.
function M.layer_norm(...) return layer_norm(canonical.layer_norm(...)) end
--- F.rms_norm(x, normalized_shape, weight, eps) (PyTorch 2.4): x / sqrt(mean(x^2
-- over the last #normalized_shape dims) + eps) * weight, one fused kernel
-- forward and backward; eps defaults to the compute type's machine epsilon.
function M.rms_norm(...) return rms_norm(canonical.rms_norm(...)) end
function M.group_norm(...) return group_norm(canonical.group_norm(...)) end
function M.instance_norm(...) return instance_norm(canonical.instance_norm(...)) end

return M
