-- oneflow.ops.nn_conv: convolution and pooling (core/ops/conv.c, core/ops/pool.c).
--
-- `require('oneflow.ops.nn_conv')` returns a table of functions for
-- flow.nn.functional to re-export (they are not registered as tensor methods):
--   conv1d/conv2d/conv3d(input, weight[, bias, stride, padding, dilation, groups][, opts])
--   conv_transpose1d/2d/3d(input, weight[, bias, stride, padding, output_padding,
--                          groups, dilation][, opts])
--   conv_weight_grad(input, grad_output, kernel_size[, opts])   (weight grad of a conv)
--   max_pool1d/2d/3d(input, kernel_size[, stride, padding, dilation, ceil_mode,
--                    return_indices][, opts])
--   avg_pool1d/2d/3d(input, kernel_size[, stride, padding, ceil_mode,
--                    count_include_pad, divisor_override][, opts])
--   adaptive_avg_pool1d/2d/3d(input, output_size)
--   adaptive_max_pool1d/2d/3d(input, output_size[, return_indices][, opts])
-- Positional arguments follow PyTorch's order; a trailing options table uses
-- PyTorch's keyword names. Per-dim sizes are a number or a table of one per
-- spatial dim. padding may also be 'same' (stride 1) or 'valid'.
-- Max pools with return_indices give values, indices; indices are 1-based
-- positions in each flattened input plane (as PyTorch's, plus one).
local ffi = require 'ffi'
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local A = require 'oneflow._args'

local C, out1, out2, wrap = core.C, core.out1, core.out2, core.wrap
local raise_c = A.raise_c
local is_tensor, parse, check_tensor = T.is_tensor, A.parse, A.check_tensor

local M = {}

local bufs = {}
for i = 1, 5 do bufs[i] = ffi.new('int64_t[3]') end

-- A per-dim size (number or table of nsp numbers) into bufs[which].
local function per_dim(op, what, v, nsp, default, which)
  local buf = bufs[which]
  if v == nil then v = default end
  if type(v) == 'number' then
    if v ~= math.floor(v) then
      A.fail(('%s: %s must be an integer, got %s'):format(op, what, tostring(v)))
    end
    for i = 0, nsp - 1 do buf[i] = v end
    return buf
  end
  if type(v) ~= 'table' or #v ~= nsp then
    A.fail(('%s: %s must be a number or a table of %d numbers, got %s'):format(
      op, what, nsp, type(v) == 'table' and ('a table of ' .. #v) or tostring(v)))
  end
  for i = 1, nsp do
    local e = v[i]
    if type(e) ~= 'number' or e ~= math.floor(e) then
      A.fail(('%s: %s must hold integers, got %s'):format(op, what, tostring(e)))
    end
    buf[i - 1] = e
  end
  return buf
end

local function flag(v, default)
  if v == nil then return default end
  return v and 1 or 0
end

------------------------------------------------------------------ convolution
local conv_spec = {{'bias'}, {'stride', 1}, {'padding', 0}, {'dilation', 1}, {'groups', 1}}

local function make_conv(nsp)
  local op = 'conv' .. nsp .. 'd'
  return function(x, w, ...)
    check_tensor(op, x)
    check_tensor(op, w, 'weight', 2)
    local a = parse(op, conv_spec, ...)
    local b = a.bias
    if b ~= nil and not is_tensor(b) then
      A.fail(('%s: bias must be a tensor or nil, got %s'):format(op, type(b)))
    end
    local groups = a.groups or 1
    local stride = per_dim(op, 'stride', a.stride, nsp, 1, 1)
    local dilation = per_dim(op, 'dilation', a.dilation, nsp, 1, 3)
    local pad = a.padding
    local trim   -- 'same' with an odd total padding: one extra on the left, cut
    if pad == 'valid' then
      pad = 0
    elseif pad == 'same' then
      for i = 0, nsp - 1 do
        if stride[i] ~= 1 then
          A.fail(op .. ": padding='same' is not supported for strided convolutions")
        end
      end
      if w:dim() ~= nsp + 2 then
        A.fail(('%s: expected weight with %d dims, got %d'):format(op, nsp + 2, w:dim()))
      end
      pad = {}
      for i = 1, nsp do
        local total = tonumber(dilation[i - 1]) * (w:size(i + 2) - 1)
        pad[i] = math.ceil(total / 2)
        if total % 2 == 1 then
          trim = trim or {}
          trim[i] = true
        end
      end
    elseif type(pad) == 'string' then
      A.fail(("%s: padding must be a number, a table, 'same' or 'valid', got '%s'"):format(op, pad))
    end
    local padding = per_dim(op, 'padding', pad, nsp, 0, 2)
    if C.of_conv(x.p, w.p, b and b.p, stride, padding, dilation, nsp, groups, out1) ~= 0 then
      raise_c()
    end
    local y = wrap(out1[0])
    if trim then
      for i = 1, nsp do
        if trim[i] then y = y:narrow(i + 2, 2, y:size(i + 2) - 1) end
      end
    end
    return y
  end
end

local convt_spec = {{'bias'}, {'stride', 1}, {'padding', 0}, {'output_padding', 0}, {'groups', 1},
                    {'dilation', 1}}

local function make_conv_transpose(nsp)
  local op = 'conv_transpose' .. nsp .. 'd'
  return function(x, w, ...)
    check_tensor(op, x)
    check_tensor(op, w, 'weight', 2)
    local a = parse(op, convt_spec, ...)
    local b = a.bias
    if b ~= nil and not is_tensor(b) then
      A.fail(('%s: bias must be a tensor or nil, got %s'):format(op, type(b)))
    end
    if type(a.padding) == 'string' then
      A.fail(('%s: padding must be a number or a table, got %s'):format(op, a.padding))
    end
    local stride = per_dim(op, 'stride', a.stride, nsp, 1, 1)
    local padding = per_dim(op, 'padding', a.padding, nsp, 0, 2)
    local opad = per_dim(op, 'output_padding', a.output_padding, nsp, 0, 3)
    local dilation = per_dim(op, 'dilation', a.dilation, nsp, 1, 4)
    if C.of_conv_transpose(x.p, w.p, b and b.p, stride, padding, opad, dilation, nsp,
                           a.groups or 1, out1) ~= 0 then
      raise_c()
    end
    return wrap(out1[0])
  end
end

for nsp = 1, 3 do
  M['conv' .. nsp .. 'd'] = make_conv(nsp)
  M['conv_transpose' .. nsp .. 'd'] = make_conv_transpose(nsp)
end

--- The grad of a convolution w.r.t. its weight:
-- conv_weight_grad(input, grad_output, kernel_size, {stride, padding, dilation, groups})
-- (the number of spatial dims comes from input).
function M.conv_weight_grad(x, gy, kernel_size, opts)
  local op = 'conv_weight_grad'
  check_tensor(op, x)
  check_tensor(op, gy, 'grad_output')
  opts = A.check_options(op, opts, {'stride', 'padding', 'dilation', 'groups'})
  local nsp = x:dim() - 2
  if nsp < 1 or nsp > 3 then
    A.fail(('%s: expected an input with 3 to 5 dims, got %d'):format(op, x:dim()))
  end
  local k = per_dim(op, 'kernel_size', kernel_size, nsp, nil, 5)
  if C.of_conv_weight_grad(x.p, gy.p, k, per_dim(op, 'stride', opts.stride, nsp, 1, 1),
                           per_dim(op, 'padding', opts.padding, nsp, 0, 2),
                           per_dim(op, 'dilation', opts.dilation, nsp, 1, 3), nsp,
                           opts.groups or 1, out1) ~= 0 then
    raise_c()
  end
  return wrap(out1[0])
end

------------------------------------------------------------------ pooling
local max_spec = {{'stride'}, {'padding', 0}, {'dilation', 1}, {'ceil_mode', false}, {'return_indices', false}}
local avg_spec = {{'stride'}, {'padding', 0}, {'ceil_mode', false}, {'count_include_pad', true},
                  {'divisor_override'}}
local amax_spec = {{'return_indices', false}}
-- The argument specs after the fixed arguments (the ONNX exporter reads calls with them too).
M.specs = {conv = conv_spec, conv_transpose = convt_spec, max_pool = max_spec, avg_pool = avg_spec,
           adaptive_max_pool = amax_spec}

local function make_max_pool(nsp)
  local op = 'max_pool' .. nsp .. 'd'
  return function(x, kernel_size, ...)
    check_tensor(op, x)
    local a = parse(op, max_spec, ...)
    local k = per_dim(op, 'kernel_size', kernel_size, nsp, nil, 1)
    local stride = a.stride ~= nil and per_dim(op, 'stride', a.stride, nsp, nil, 2) or nil
    local padding = per_dim(op, 'padding', a.padding, nsp, 0, 3)
    local dilation = per_dim(op, 'dilation', a.dilation, nsp, 1, 4)
    -- indices not asked for stay in C (freed there, or kept by the autograd
    -- node), not a tensor for Lua's collector to find
    local want = a.return_indices
    if C.of_max_pool(x.p, k, stride, padding, dilation, nsp, flag(a.ceil_mode, 0), 1,
                     out1, want and out2 or nil) ~= 0 then
      raise_c()
    end
    if want then return wrap(out1[0]), wrap(out2[0]) end
    return wrap(out1[0])
  end
end

local function make_avg_pool(nsp)
  local op = 'avg_pool' .. nsp .. 'd'
  return function(x, kernel_size, ...)
    check_tensor(op, x)
    local a = parse(op, avg_spec, ...)
    local k = per_dim(op, 'kernel_size', kernel_size, nsp, nil, 1)
    local stride = a.stride ~= nil and per_dim(op, 'stride', a.stride, nsp, nil, 2) or nil
    local padding = per_dim(op, 'padding', a.padding, nsp, 0, 3)
    local div = a.divisor_override
    if div ~= nil and (type(div) ~= 'number' or div < 1 or div ~= math.floor(div)) then
      A.fail(('%s: divisor_override must be a positive integer, got %s'):format(op, tostring(div)))
    end
    if C.of_avg_pool(x.p, k, stride, padding, nsp, flag(a.ceil_mode, 0),
                     flag(a.count_include_pad, 1), div or 0, out1) ~= 0 then
      raise_c()
    end
    return wrap(out1[0])
  end
end

-- output_size: a number or a table; nil entries keep the input's size.
local function adaptive_size(op, x, size, nsp)
  if type(size) == 'table' then
    local full = {}
    for i = 1, nsp do
      local s = size[i]
      if s == nil and x:dim() >= nsp then s = x:size(x:dim() - nsp + i) end
      full[i] = s
    end
    if #size > nsp then
      A.fail(('%s: output_size must have %d entries, got %d'):format(op, nsp, #size))
    end
    size = full
  end
  return per_dim(op, 'output_size', size, nsp, nil, 1)
end

local function make_adaptive_avg(nsp)
  local op = 'adaptive_avg_pool' .. nsp .. 'd'
  return function(x, output_size)
    check_tensor(op, x)
    if C.of_adaptive_avg_pool(x.p, adaptive_size(op, x, output_size, nsp), nsp, out1) ~= 0 then
      raise_c()
    end
    return wrap(out1[0])
  end
end

local function make_adaptive_max(nsp)
  local op = 'adaptive_max_pool' .. nsp .. 'd'
  return function(x, output_size, ...)
    check_tensor(op, x)
    local a = parse(op, amax_spec, ...)
    local want = a.return_indices   -- as max_pool's
    if C.of_adaptive_max_pool(x.p, adaptive_size(op, x, output_size, nsp), nsp, 1,
                              out1, want and out2 or nil) ~= 0 then
      raise_c()
    end
    if want then return wrap(out1[0]), wrap(out2[0]) end
    return wrap(out1[0])
  end
end

for nsp = 1, 3 do
  M['max_pool' .. nsp .. 'd'] = make_max_pool(nsp)
  M['avg_pool' .. nsp .. 'd'] = make_avg_pool(nsp)
  M['adaptive_avg_pool' .. nsp .. 'd'] = make_adaptive_avg(nsp)
  M['adaptive_max_pool' .. nsp .. 'd'] = make_adaptive_max(nsp)
end

------------------------------------------------------------------ SBP (global tensors)
-- Convolutions: batch split (data parallel), output or input channels
-- (groups = 1); transposed convolutions and pools keep batch (pools also
-- channel) splits. See oneflow.distributed.rules.
local R = require 'oneflow.distributed.rules'
for nsp = 1, 3 do
  local conv = 'conv' .. nsp .. 'd'
  M[conv] = T.sbp_fn(conv, R.conv(nsp), M[conv])
  local convt = 'conv_transpose' .. nsp .. 'd'
  M[convt] = T.sbp_fn(convt, R.per_sample(false), M[convt])
  for _, pool in ipairs({'max_pool', 'avg_pool', 'adaptive_avg_pool', 'adaptive_max_pool'}) do
    local name = pool .. nsp .. 'd'
    M[name] = T.sbp_fn(name, R.per_sample(true, pool:find('max') and 2 or 1), M[name])
  end
end

return M
