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

return M
