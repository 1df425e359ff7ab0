-- oneflow._util: argument parsing shared by the op modules (1-based dims,
-- sizes as numbers or a table, trailing option tables).
local ffi = require 'ffi'
local types = require 'oneflow.types'

local M = {}

local shape_buf = ffi.new('int64_t[8]')
local shape_buf2 = ffi.new('int64_t[8]')
local dims_buf = ffi.new('int32_t[8]')

local function is_options(t)
  return type(t) == 'table' and getmetatable(t) == nil and t[1] == nil and next(t) ~= nil
end
M.is_options = is_options

--- Splits (...) into a list of sizes and an options table.
-- Accepts f(2, 3), f({2, 3}), f(flow.Size), each with an optional trailing
-- options table.
function M.sizes_and_options(op, ...)
  local n = select('#', ...)
  local last = select(n, ...)
  local opts = {}
  if n > 0 and (is_options(last) or (type(last) == 'table' and next(last) == nil and n > 1)) then
    opts = last
    n = n - 1
  end
  local sizes
  local first = (select(1, ...))   -- not `= ...`: LuaJIT 2.1.0-beta3 miscompiles it
  if n == 1 and type(first) == 'table' then
    sizes = first
  else
    sizes = {...}
    sizes[n + 1] = nil
  end
  local res = {}
  for i = 1, #sizes do
    local s = sizes[i]
    if type(s) ~= 'number' or s ~= math.floor(s) then
      error(('%s: size %d must be an integer, got %s'):format(op, i, tostring(s)), 3)
    end
    res[i] = s
  end
  if #res > 8 then error(op .. ': at most 8 dims are supported, got ' .. #res, 3) end
  return res, opts
end

--- Fills a reusable int64_t[8] with a Lua list (second buffer with which=2).
function M.shape_ptr(list, which)
  local buf = which == 2 and shape_buf2 or shape_buf
  for i = 1, #list do buf[i - 1] = list[i] end
  return buf, #list
end

--- 1-based (or negative) dim -> 0-based dim for C; C checks the range.
-- 0 is never a valid Lua dim.
function M.dim(d, op, level)
  if type(d) ~= 'number' or d ~= math.floor(d) then
    error(('%s: dim must be an integer, got %s'):format(op, tostring(d)), (level or 2) + 1)
  end
  if d > 0 then return d - 1 end
  if d == 0 then
    error(op .. ': dim 0 is not valid; dims are 1-based (1 = first, -1 = last)',
          (level or 2) + 1)
  end
  return d
end

--- A list of dims (number or table) -> int32_t[8] of 0-based dims, count.
function M.dims_ptr(dims, op, level)
  if type(dims) == 'number' then dims = {dims} end
  for i = 1, #dims do dims_buf[i - 1] = M.dim(dims[i], op, (level or 2) + 1) end
  return dims_buf, #dims
end

function M.dtype_opt(opts, default)
  return opts.dtype and types.dtype(opts.dtype, 3) or default
end

return M
