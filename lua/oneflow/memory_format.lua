-- oneflow.memory_format: flow.contiguous_format, flow.channels_last,
-- flow.channels_last_3d and flow.preserve_format, and the conversions behind
-- x:to{memory_format =}, x:contiguous{memory_format =} and
-- x:is_contiguous{memory_format =}.
--
-- A channels-last tensor keeps its logical shape [N, C, H, W] (dims and
-- indices are unchanged) while its memory is laid out as NHWC: strides
-- {H*W*C, 1, W*C, C}. Convolutions, pools and batch norm keep the layout of
-- their input (on CUDA the convolution runs on cuDNN's NHWC kernels; on the
-- CPU ops may convert internally).
local M = {}

local A = require 'oneflow._args'

local Format = A.value_type({})
Format.__index = Format
Format.__tostring = function(f) return 'oneflow.' .. f.name end
M.Format = Format

local function new(name, ndim) return setmetatable({name = name, ndim = ndim}, Format) end
M.contiguous_format = new('contiguous_format')
M.channels_last = new('channels_last', 4)
M.channels_last_3d = new('channels_last_3d', 5)
M.preserve_format = new('preserve_format')

function M.is_format(v) return getmetatable(v) == Format end

local function check(f, op, level)
  if not M.is_format(f) then
    error(('%s: memory_format must be flow.contiguous_format, flow.channels_last, '
           .. 'flow.channels_last_3d or flow.preserve_format, got %s'):format(op, tostring(f)),
          level + 1)
  end
end

local shape_str = A.shape_str

--- true when x's memory is laid out as `f` (strides of size-1 dims ignored).
function M.is_contiguous(x, f, op)
  check(f, op or 'is_contiguous', 3)
  if f == M.contiguous_format or f == M.preserve_format then return x:is_contiguous() end
  local shape, st = x:size():totable(), x:stride()
  if #shape ~= f.ndim then return false end
  -- memory order: N, spatial..., C
  local acc = 1
  local function ok(d)
    local good = shape[d] == 1 or st[d] == acc
    acc = acc * shape[d]
    return good
  end
  if not ok(2) then return false end
  for d = #shape, 3, -1 do if not ok(d) then return false end end
  return ok(1)
end

--- x laid out as f (x itself when it already is), recorded by autograd.
function M.convert(x, f, op)
  op = op or 'to'
  check(f, op, 3)
  if f == M.preserve_format then return x end
  if f == M.contiguous_format then return x:contiguous() end
  if x:dim() ~= f.ndim then
    error(('%s: %s needs a %d-d tensor [N, C, %s], got %s'):format(op, f.name, f.ndim,
          f.ndim == 4 and 'H, W' or 'D, H, W', shape_str(x)), 3)
  end
  if M.is_contiguous(x, f) then return x end
  if f.ndim == 4 then return x:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3) end
  return x:permute(1, 3, 4, 5, 2):contiguous():permute(1, 5, 2, 3, 4)
end

--- The format x is laid out in (the one an op should keep).
function M.suggest(x)
  if x:is_contiguous() then return M.contiguous_format end
  if M.is_contiguous(x, M.channels_last) then return M.channels_last end
  if M.is_contiguous(x, M.channels_last_3d) then return M.channels_last_3d end
  return M.contiguous_format
end

return M
