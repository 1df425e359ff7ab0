-- oneflow.ops.nn_norm: functional normalisation, resampling, padding and the
-- main losses -- fused C kernels with their backward (core/ops/norm.c,
-- core/ops/resample.c, core/ops/loss.c). nn.functional re-exports them.
--
-- Signatures follow torch.nn.functional, positional arguments then options:
--   F.batch_norm(x, running_mean, running_var, {weight =, bias =, training = false,
--                momentum = 0.1, eps = 1e-5})
--   F.layer_norm(x, normalized_shape, {weight =, bias =, eps = 1e-5})
--   F.group_norm(x, num_groups, {weight =, bias =, eps = 1e-5})
--   F.instance_norm(x, {running_mean =, running_var =, weight =, bias =,
--                   use_input_stats = true, momentum = 0.1, eps = 1e-5})
--   F.interpolate(x, {size =, scale_factor =, mode = 'nearest', align_corners =})
--   F.pad(x, {left, right, ...}, {mode = 'constant', value = 0})   (or a mode string)
--   F.cross_entropy(input, target, {weight =, ignore_index = -100, reduction = 'mean',
--                   label_smoothing = 0})
--   F.nll_loss(input, target, {weight =, ignore_index = -100, reduction = 'mean'})
-- Class labels are 1-based (1..C); ignore_index is in the same base, and its
-- default -100 matches no class.
local ffi = require 'ffi'
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'

local C, out1, raise, wrap = core.C, core.out1, core.raise, core.wrap
local is_tensor = T.is_tensor
local EMPTY = {}
local BASE = 1   -- class labels start at 1 in Lua

local M = {}

local function check_tensor(x, op, what)
  if not is_tensor(x) then
    error(('%s: %s must be a tensor, got %s'):format(op, what or 'input', type(x)), 3)
  end
end

-- An optional tensor argument -> its C handle or nil.
local function handle(v, op, what)
  if v == nil then return nil end
  if not is_tensor(v) then
    error(('%s: %s must be a tensor or nil, got %s'):format(op, what, type(v)), 3)
  end
  return v.p
end

local function options(opts, op)
  if opts == nil then return EMPTY end
  if type(opts) ~= 'table' or is_tensor(opts) then
    error(('%s: expected an options table, got %s'):format(op, type(opts)), 3)
  end
  return opts
end

-- Raises the C error at the user's line (called as a statement, not a tail call).
local function check(st)
  if st ~= 0 then raise(3) end
end

------------------------------------------------------------------ normalisation
function M.batch_norm(x, running_mean, running_var, opts)
  check_tensor(x, 'batch_norm')
  opts = options(opts, 'batch_norm')
  local momentum = opts.momentum
  if momentum == nil then momentum = 0.1 end
  check(C.of_batch_norm(x.p, handle(running_mean, 'batch_norm', 'running_mean'),
    handle(running_var, 'batch_norm', 'running_var'), handle(opts.weight, 'batch_norm', 'weight'),
    handle(opts.bias, 'batch_norm', 'bias'), opts.training and 1 or 0, momentum,
    opts.eps or 1e-5, out1))
  return wrap(out1[0])
end

local function shape_list(s, op)
  if type(s) == 'number' then return {s} end
  if type(s) == 'table' and s.totable then return s:totable() end
  if type(s) ~= 'table' then
    error(('%s: normalized_shape must be a number or a list of sizes, got %s'):format(op, type(s)), 3)
  end
  return s
end

function M.layer_norm(x, normalized_shape, opts)
  check_tensor(x, 'layer_norm')
  opts = options(opts, 'layer_norm')
  local ns = shape_list(normalized_shape, 'layer_norm')
  local shape, k = x:size(), #ns
  local ok = k >= 1 and k <= #shape
  for i = 1, k do ok = ok and shape[#shape - k + i] == ns[i] end
  if not ok then
    error(('layer_norm: normalized_shape [%s] does not match the last dims of the input [%s]')
          :format(table.concat(ns, ', '), table.concat(shape:totable(), ', ')), 2)
  end
  check(C.of_layer_norm(x.p, k, handle(opts.weight, 'layer_norm', 'weight'),
    handle(opts.bias, 'layer_norm', 'bias'), opts.eps or 1e-5, out1))
  return wrap(out1[0])
end

function M.group_norm(x, num_groups, opts)
  check_tensor(x, 'group_norm')
  opts = options(opts, 'group_norm')
  if type(num_groups) ~= 'number' then
    error('group_norm: num_groups must be a number, got ' .. type(num_groups), 2)
  end
  check(C.of_group_norm(x.p, num_groups, handle(opts.weight, 'group_norm', 'weight'),
    handle(opts.bias, 'group_norm', 'bias'), opts.eps or 1e-5, out1))
  return wrap(out1[0])
end

function M.instance_norm(x, opts)
  check_tensor(x, 'instance_norm')
  opts = options(opts, 'instance_norm')
  local use_input_stats = opts.use_input_stats
  if use_input_stats == nil then use_input_stats = true end
  local momentum = opts.momentum
  if momentum == nil then momentum = 0.1 end
  local op = 'instance_norm'
  check(C.of_instance_norm(x.p, handle(opts.running_mean, op, 'running_mean'),
    handle(opts.running_var, op, 'running_var'), handle(opts.weight, op, 'weight'),
    handle(opts.bias, op, 'bias'), use_input_stats and 1 or 0, momentum, opts.eps or 1e-5, out1))
  return wrap(out1[0])
end

------------------------------------------------------------------ interpolate
local size_buf = ffi.new('int64_t[3]')
local scale_buf = ffi.new('double[3]')
local linear_modes = {linear = 1, bilinear = 2, trilinear = 3}

-- A number or a list of nsp numbers -> a list of nsp numbers.
local function per_dim(v, nsp, what)
  if type(v) == 'number' then
    local t = {}
    for i = 1, nsp do t[i] = v end
    return t
  end
  if type(v) == 'table' and v.totable then v = v:totable() end
  if type(v) ~= 'table' or #v ~= nsp then
    error(('interpolate: %s must be a number or a list of %d numbers for a %d-d input')
          :format(what, nsp, nsp + 2), 4)
  end
  for i = 1, nsp do
    if type(v[i]) ~= 'number' then
      error(('interpolate: %s[%d] must be a number, got %s'):format(what, i, type(v[i])), 4)
    end
  end
  return v
end

function M.interpolate(x, opts)
  check_tensor(x, 'interpolate')
  opts = options(opts, 'interpolate')
  local mode = opts.mode or 'nearest'
  local nd = x:dim()
  local nsp = nd - 2
  if nsp < 1 or nsp > 3 then
    error(('interpolate: expected a 3-d, 4-d or 5-d input [N, C, *spatial], got %d-d'):format(nd), 2)
  end
  local cmode
  if mode == 'nearest' then
    cmode = C.OF_INTERP_NEAREST
    if opts.align_corners ~= nil then
      error('interpolate: align_corners can only be set with the linear modes ' ..
            '(linear, bilinear, trilinear)', 2)
    end
  elseif linear_modes[mode] then
    if linear_modes[mode] ~= nsp then
      error(("interpolate: got a %d-d input, but mode '%s' needs a %d-d input")
            :format(nd, mode, linear_modes[mode] + 2), 2)
    end
    cmode = C.OF_INTERP_LINEAR
  else
    error(("interpolate: unsupported mode '%s' (nearest, linear, bilinear, trilinear)")
          :format(tostring(mode)), 2)
  end
  local size, sf = opts.size, opts.scale_factor
  if (size == nil) == (sf == nil) then
    error('interpolate: give exactly one of size and scale_factor', 2)
  end
  local shape = x:size()
  local scales = nil
  if size ~= nil then
    size = per_dim(size, nsp, 'size')
    for i = 1, nsp do size_buf[i - 1] = size[i] end
  else
    sf = per_dim(sf, nsp, 'scale_factor')
    for i = 1, nsp do
      if sf[i] <= 0 then error('interpolate: scale_factor must be positive', 2) end
      size_buf[i - 1] = math.floor(shape[i + 2] * sf[i])
      scale_buf[i - 1] = sf[i]
    end
    if not opts.recompute_scale_factor then scales = scale_buf end
  end
  check(C.of_interpolate(x.p, size_buf, scales, nsp, cmode,
                                 opts.align_corners and 1 or 0, out1))
  return wrap(out1[0])
end

------------------------------------------------------------------ pad
local pad_buf = ffi.new('int64_t[16]')
local pad_modes = {constant = 0, reflect = 1, replicate = 2, circular = 3}

function M.pad(x, pad, opts)
  check_tensor(x, 'pad')
  if type(opts) == 'string' then opts = {mode = opts} end
  opts = options(opts, 'pad')
  if type(pad) == 'table' and pad.totable then pad = pad:totable() end
  if type(pad) ~= 'table' or #pad == 0 or #pad % 2 ~= 0 or #pad > 16 then
    error('pad: expected a list of (left, right) pairs, last dim first, e.g. {1, 1, 2, 2}', 2)
  end
  for i = 1, #pad do
    local v = pad[i]
    if type(v) ~= 'number' or v ~= math.floor(v) then
      error(('pad: padding %d must be an integer, got %s'):format(i, tostring(v)), 2)
    end
    pad_buf[i - 1] = v
  end
  local mode = pad_modes[opts.mode or 'constant']
  if not mode then
    error(("pad: unknown mode '%s' (constant, reflect, replicate, circular)")
          :format(tostring(opts.mode)), 2)
  end
  if opts.value ~= nil and mode ~= 0 then
    error(("pad: value only applies to constant padding, not '%s'"):format(opts.mode), 2)
  end
  check(C.of_pad(x.p, pad_buf, #pad / 2, mode, opts.value or 0, out1))
  return wrap(out1[0])
end

------------------------------------------------------------------ losses
local reductions = {none = 0, mean = 1, sum = 2}

local function reduction_arg(opts, op)
  local r = reductions[opts.reduction or 'mean']
  if not r then
    error(("%s: reduction must be 'none', 'mean' or 'sum', got '%s'")
          :format(op, tostring(opts.reduction)), 3)
  end
  return r
end

-- A target given as a Lua number or list becomes an int64 tensor.
local function target_arg(t, op)
  if is_tensor(t) then return t end
  if type(t) == 'number' or type(t) == 'table' then return T.flow.tensor(t, {dtype = 'int64'}) end
  error(('%s: target must be a tensor of class indices or probabilities, got %s')
        :format(op, type(t)), 3)
end

function M.cross_entropy(input, target, opts)
  check_tensor(input, 'cross_entropy')
  target = target_arg(target, 'cross_entropy')
  opts = options(opts, 'cross_entropy')
  local ls = opts.label_smoothing or 0
  check(C.of_cross_entropy(input.p, target.p,
    handle(opts.weight, 'cross_entropy', 'weight'), reduction_arg(opts, 'cross_entropy'),
    opts.ignore_index or -100, ls, BASE, out1))
  return wrap(out1[0])
end

function M.nll_loss(input, target, opts)
  check_tensor(input, 'nll_loss')
  target = target_arg(target, 'nll_loss')
  opts = options(opts, 'nll_loss')
  check(C.of_nll_loss(input.p, target.p, handle(opts.weight, 'nll_loss', 'weight'),
    reduction_arg(opts, 'nll_loss'), opts.ignore_index or -100, BASE, out1))
  return wrap(out1[0])
end

------------------------------------------------------------------ SBP (global tensors)
-- Beside each binding, its signatures for global tensors (see
-- oneflow.distributed.rules); the calls below run on the local shards.
local R = require 'oneflow.distributed.rules'
local S, Bc = R.S, R.B

-- The comm group spanning the grid axes where the chosen signature splits
-- the input on a dim other than `except` (the ranks holding different
-- samples), or nil.
local function split_group(P, chosen, except)
  return require('oneflow.distributed.global').axes_group(P, chosen, function(sg)
    local v = sg.ins[1]
    return v.kind == 'S' and v.dim ~= except
  end)
end

local function all_reduce(t, g)
  if g then require('oneflow.distributed.comm').all_reduce(t, {group = g}) end
  return t
end

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

--- layer_norm: any dim before the normalised ones may split.
M.layer_norm = T.sbp_fn('layer_norm', function(ctx)
  local sig = R.signer(ctx, {'input'})
  local nd = #ctx.shapes[1]
  local ns = ctx.args[2]
  local k = type(ns) == 'number' and 1 or (type(ns) == 'table' and (ns.totable and #ns:totable()
                                                                    or #ns)) or nd
  local sigs = {sig({}, Bc)}
  for d = 1, nd - k do sigs[#sigs + 1] = sig({input = S(d)}, S(d)) end
  return sigs
end, M.layer_norm)

M.group_norm = T.sbp_fn('group_norm', R.per_sample(false), M.group_norm)

--- instance_norm: per sample; running statistics (averaged over the batch)
-- need the whole batch.
M.instance_norm = T.sbp_fn('instance_norm', function(ctx)
  local o = ctx.args[2]
  if type(o) == 'table' and o.running_mean ~= nil then return {{ins = R.fill(#ctx.shapes, Bc), out = {Bc}}} end
  return R.per_sample(true)(ctx)
end, M.instance_norm)

M.interpolate = T.sbp_fn('interpolate', R.per_sample(true), M.interpolate)

--- pad: dims that are not padded may split.
M.pad = T.sbp_fn('pad', function(ctx)
  local nd, pad = #ctx.shapes[1], ctx.args[2]
  local m = type(pad) == 'table' and math.floor(#pad / 2) or nd
  local sigs = {{ins = {Bc}, out = {Bc}}}
  for d = 1, nd - m do sigs[#sigs + 1] = {ins = {S(d)}, out = {S(d)}} end
  return sigs
end, M.pad)

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

return M
