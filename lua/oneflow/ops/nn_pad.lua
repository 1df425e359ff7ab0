-- oneflow.ops.nn_pad: F.pad -- constant, reflect, replicate and circular
-- padding of the last dims, a C kernel with its backward (core/ops/shape.c).
-- PyTorch's signature, positional or as options:
--   F.pad(x, pad, mode = 'constant', value = 0)   pad = {left, right, top, bottom, ...}
-- e.g. F.pad(x, {1, 1}, 'reflect') == F.pad(x, {1, 1}, {mode = 'reflect'}).
local ffi = require 'ffi'
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local A = require 'oneflow._args'

local C, out1, wrap = core.C, core.out1, core.wrap
local check_tensor, check_status, parse = A.check_tensor, A.check_status, A.parse
local EMPTY = A.EMPTY

local M = {}

------------------------------------------------------------------ pad
local pad_buf = ffi.new('int64_t[16]')
local pad_modes = {constant = 0, reflect = 1, replicate = 2, circular = 3}

function M.pad(x, pad, opts)
  check_tensor('pad', x)
  if type(opts) == 'string' then opts = {mode = opts} end
  opts = opts or EMPTY
  if type(pad) == 'table' and pad.totable then pad = pad:totable() end
  if type(pad) ~= 'table' or #pad == 0 or #pad % 2 ~= 0 or #pad > 16 then
    A.fail('pad: expected a list of (left, right) pairs, last dim first, e.g. {1, 1, 2, 2}')
  end
  for i = 1, #pad do
    local v = pad[i]
    if type(v) ~= 'number' or v ~= math.floor(v) then
      A.fail(('pad: padding %d must be an integer, got %s'):format(i, tostring(v)))
    end
    pad_buf[i - 1] = v
  end
  local mode = pad_modes[opts.mode or 'constant']
  if not mode then
    A.fail(("pad: unknown mode '%s' (constant, reflect, replicate, circular)")
          :format(tostring(opts.mode)))
  end
  if opts.value ~= nil and mode ~= 0 then
    A.fail(("pad: value only applies to constant padding, not '%s'"):format(opts.mode))
  end
  check_status(C.of_pad(x.p, pad_buf, #pad / 2, mode, opts.value or 0, out1))
  return wrap(out1[0])
end

------------------------------------------------------------------ SBP (global tensors)
local R = require 'oneflow.distributed.rules'
local S, Bc = R.S, R.B
--- pad: dims that are not padded may split.
M.pad = T.sbp_fn('pad', function(ctx)
  local nd, pad = #ctx.shapes[1], ctx.args[2]
  local m = type(pad) == 'table' and math.floor(#pad / 2) or nd
  local sigs = {{ins = {Bc}, out = {Bc}}}
  for d = 1, nd - m do sigs[#sigs + 1] = {ins = {S(d)}, out = {S(d)}} end
  return sigs
end, M.pad)

------------------------------------------------------------------ PyTorch's positional arguments
local pad_spec = {{'pad', A.REQUIRED}, {'mode', 'constant'}, {'value'}}
local pad_impl = M.pad

-- canonical.pad(x, ...) -> x, pad, options (what the SBP rule and the ONNX
-- exporter read).
M.canonical = {}
function M.canonical.pad(x, ...)
  local a = parse('pad', pad_spec, ...)
  return x, a.pad, {mode = a.mode, value = a.value}
end

function M.pad(...) return pad_impl(M.canonical.pad(...)) end

return M
