-- oneflow.ops.nn_resample: F.interpolate (F.upsample) -- nearest and
-- (bi/tri)linear resampling, a fused C kernel with its backward
-- (core/ops/resample.c). PyTorch's signature, positional or as options:
--   F.interpolate(x, size, scale_factor, mode = 'nearest', align_corners,
--                 recompute_scale_factor, antialias = false)
-- e.g. F.interpolate(x, nil, 2, 'bilinear') == F.interpolate(x, {scale_factor = 2, mode = 'bilinear'}).
local ffi = require 'ffi'
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local A = require 'oneflow._args'

local C, out1, wrap = core.C, core.out1, core.wrap
local check_tensor, check_status, parse = A.check_tensor, A.check_status, A.parse
local EMPTY = A.EMPTY

local M = {}

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
    A.fail(('interpolate: %s must be a number or a list of %d numbers for a %d-d input')
          :format(what, nsp, nsp + 2))
  end
  for i = 1, nsp do
    if type(v[i]) ~= 'number' then
      A.fail(('interpolate: %s[%d] must be a number, got %s'):format(what, i, type(v[i])))
    end
  end
  return v
end

--- F.interpolate(x, {size =, scale_factor =, mode = 'nearest', align_corners =}): resizes x; modes nearest,
-- linear, bilinear, bicubic, trilinear, area.
function M.interpolate(x, opts)
  check_tensor('interpolate', x)
  opts = opts or EMPTY
  local mode = opts.mode or 'nearest'
  local nd = x:dim()
  local nsp = nd - 2
  if nsp < 1 or nsp > 3 then
    A.fail(('interpolate: expected a 3-d, 4-d or 5-d input [N, C, *spatial], got %d-d'):format(nd))
  end
  local cmode
  if mode == 'nearest' then
    cmode = C.OF_INTERP_NEAREST
    if opts.align_corners ~= nil then
      A.fail('interpolate: align_corners can only be set with the linear modes ' ..
            '(linear, bilinear, trilinear)')
    end
  elseif linear_modes[mode] then
    if linear_modes[mode] ~= nsp then
      A.fail(("interpolate: got a %d-d input, but mode '%s' needs a %d-d input")
            :format(nd, mode, linear_modes[mode] + 2))
    end
    cmode = C.OF_INTERP_LINEAR
  else
    A.fail(("interpolate: unsupported mode '%s' (nearest, linear, bilinear, trilinear)")
          :format(tostring(mode)))
  end
  local size, sf = opts.size, opts.scale_factor
  if (size == nil) == (sf == nil) then
    A.fail('interpolate: give exactly one of size and scale_factor')
  end
  local shape = x:size()
  local scales = nil
  if size ~= nil then
    size = per_dim(size, nsp, 'size')
    for i = 1, nsp do size_buf[i - 1] = A.integer('interpolate', size[i], nil, 'size') end
  else
    sf = per_dim(sf, nsp, 'scale_factor')
    for i = 1, nsp do
      if not (sf[i] > 0 and sf[i] < math.huge) then
        A.fail('interpolate: scale_factor must be positive and finite, got ' .. tostring(sf[i]))
      end
      local n = math.floor(shape[i + 2] * sf[i])
      -- checked before the FFI converts it: a double past 2^63 has no int64 value
      if n >= 2 ^ 62 then
        A.fail(('interpolate: scale_factor %s gives an output size of %.0f for spatial dim %d, more than a '
                .. 'tensor can hold'):format(tostring(sf[i]), n, i))
      end
      size_buf[i - 1] = n
      scale_buf[i - 1] = sf[i]
    end
    if not opts.recompute_scale_factor then scales = scale_buf end
  end
  check_status(C.of_interpolate(x.p, size_buf, scales, nsp, cmode,
                                 opts.align_corners and 1 or 0, out1))
  return wrap(out1[0])
end

------------------------------------------------------------------ SBP (global tensors)
local R = require 'oneflow.distributed.rules'
M.interpolate = T.sbp_fn('interpolate', R.per_sample(true), M.interpolate)

------------------------------------------------------------------ PyTorch's positional arguments
local interp_spec = {{'size'}, {'scale_factor'}, {'mode', 'nearest'}, {'align_corners'},
                     {'recompute_scale_factor'}, {'antialias', false}}
local interpolate = M.interpolate

-- canonical.interpolate(x, ...) -> x, options (what the SBP rule and the
-- ONNX exporter read).
M.canonical = {}
function M.canonical.interpolate(x, ...)
  local a = parse('interpolate', interp_spec, ...)
  if a.antialias then A.fail('interpolate: antialias = true is not supported') end
  return x, {size = a.size, scale_factor = a.scale_factor, mode = a.mode,
    align_corners = a.align_corners, recompute_scale_factor = a.recompute_scale_factor}
end

function M.interpolate(...) return interpolate(M.canonical.interpolate(...)) end

return M
