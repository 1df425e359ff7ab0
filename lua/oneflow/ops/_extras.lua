-- oneflow.ops._extras: what the extras modules (extras, extras_shape,
-- extras_stats) share: argument checks and small tensor helpers.
local types = require 'oneflow.types'
local util = require 'oneflow._args'
local T = require 'oneflow.tensor'

local def, is_tensor, is_options = T.def, T.is_tensor, util.is_options
local flow = T.flow
local EMPTY = {}
local int64, bool = types.by_name.int64, types.by_name.bool

local function shape_str(x)
  return '[' .. table.concat(x:size():totable(), ',') .. ']'
end

local function check_tensor(op, x, what)
  if not is_tensor(x) then
    error(('%s: expected a tensor%s, got %s'):format(op, what and (' ' .. what) or '', type(x)), 3)
  end
end

-- 1-based (or negative) dim of an n-dim tensor -> 1..n, or an error naming op.
local function norm_dim(op, d, n)
  if type(d) ~= 'number' or d ~= math.floor(d) then
    error(('%s: dim must be an integer, got %s'):format(op, tostring(d)), 3)
  end
  local r = d < 0 and n + d + 1 or d
  if d == 0 or r < 1 or r > n then
    error(('%s: dim %d out of range for a %d-D tensor (dims are 1-based)'):format(op, d, n), 3)
  end
  return r
end

local function is_float(x)
  return x:is_floating_point()
end

-- A number operand becomes a 0-d tensor of the other operand's float dtype.
local function as_tensor(v, like)
  if is_tensor(v) then return v end
  local dt = like.dtype
  if not is_float(like) and v ~= math.floor(v) then dt = T.get_default_dtype() end
  return flow.tensor(v, {dtype = dt, device = like.device})
end

local function zeros(shape, like)
  return flow.zeros(shape, {dtype = like.dtype, device = like.device})
end

return {def = def, is_tensor = is_tensor, is_options = is_options, flow = flow, EMPTY = EMPTY,
        int64 = int64, bool = bool, shape_str = shape_str, check_tensor = check_tensor,
        norm_dim = norm_dim, is_float = is_float, as_tensor = as_tensor, zeros = zeros, T = T,
        types = types, util = util}
