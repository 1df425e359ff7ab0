-- oneflow._args: the one argument parser. Every Lua module checks its
-- arguments through it: options tables, PyTorch-style positional arguments,
-- tensor checks, shape strings, 1-based dims, sizes.
--
--   local A = require 'oneflow._args'
--   local a = A.parse('F.linear', {{'weight', A.REQUIRED}, {'bias'}}, ...)
--   A.check_tensor('sum', x)                 -- 'sum: expected a tensor for input, got number'
--   opts = A.check_options('pad', opts, {mode = true, value = true})
--
-- An options table is recognised by what it is not: a table without an array
-- part that is not a value -- not a tensor (cdata), global tensor, module or
-- other class instance, dtype, device, Size, placement, sbp, ... (modules
-- register their value metatables with A.value_type). So a table a JSON
-- library decoded with a metatable of its own still works as options.
-- Unknown option keys are errors naming the op and the key.
local ffi = require 'ffi'
local core = require 'oneflow._C'   -- also declares struct of_lua_tensor
local class = require 'oneflow.class'

local A = {}

------------------------------------------------------------------ errors
-- The directory of this package's Lua files, as debug.getinfo reports it.
local ROOT = debug.getinfo(1, 'S').source:match('^(.*[/\\]oneflow[/\\])_args%.lua$') or false

-- flowvision and flowtext sit beside oneflow and report their errors the same way.
local FV_ROOT = ROOT and ROOT:gsub('oneflow([/\\])$', 'flowvision%1') or false
local FT_ROOT = ROOT and ROOT:gsub('oneflow([/\\])$', 'flowtext%1') or false

local function internal(src)
  if src == '=[C]' then return true end
  if ROOT then
    return src:sub(1, #ROOT) == ROOT or src:sub(1, #FV_ROOT) == FV_ROOT or src:sub(1, #FT_ROOT) == FT_ROOT
  end
  return src:find('oneflow/', 1, true) ~= nil or src:find('flowvision/', 1, true) ~= nil
    or src:find('flowtext/', 1, true) ~= nil
end

--- Raises msg at the first caller outside the oneflow, flowvision and flowtext
-- packages (the user's line), whatever the depth of internal calls.
function A.fail(msg)
  local level = 2
  while true do
    local info = debug.getinfo(level, 'S')
    if not info then level = 0; break end
    if not internal(info.source) then break end
    level = level + 1
  end
  error(msg, level)
end
local fail = A.fail

------------------------------------------------------------------ values and options
local value_mts = setmetatable({}, {__mode = 'k'})

--- Marks tables with metatable mt as values (never an options table).
function A.value_type(mt)
  value_mts[mt] = true
  return mt
end

--- A placeholder default: the argument must be given.
A.REQUIRED = setmetatable({}, A.value_type({__tostring = function() return '<required>' end}))

--- Whether v is a value rather than an options table (any non-table, a
-- registered value type or an instance of an oneflow.class class).
local function is_value(v)
  if type(v) ~= 'table' then return true end
  local mt = getmetatable(v)
  if mt == nil then return false end
  if value_mts[mt] or class.is_class(mt) then return true end
  return type(mt) == 'table' and rawget(mt, '__is_module') == true
end
A.is_value = is_value

--- Whether v is an options table: a table with no array part that is not a
-- value. Its metatable, if any, does not matter (a JSON decoder's is fine).
local function is_options(v)
  return type(v) == 'table' and rawget(v, 1) == nil and not is_value(v)
end
A.is_options = is_options

local EMPTY = setmetatable({}, {__newindex = function() error('oneflow._args: EMPTY is read-only', 2) end})
A.EMPTY = EMPTY

-- Levenshtein distance between two strings.
local function distance(a, b)
  local la, lb = #a, #b
  local prev, cur = {}, {}
  for j = 0, lb do prev[j] = j end
  for i = 1, la do
    cur[0] = i
    local ca = a:byte(i)
    for j = 1, lb do
      local cost = (ca == b:byte(j)) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev, cur = cur, prev
  end
  return prev[lb]
end
A.distance = distance

--- nearest(key, names): the name in names (a set or a list) closest to key
-- by edit distance, when it is close (<= max(2, #key/3)); nil otherwise.
function A.nearest(key, names)
  if type(key) ~= 'string' then return nil end
  local best, bd
  local function try(n)
    if type(n) ~= 'string' then return end
    local d = distance(key, n)
    if not bd or d < bd or (d == bd and n < best) then best, bd = n, d end
  end
  if names[1] ~= nil then
    for _, n in ipairs(names) do try(type(n) == 'table' and n[1] or n) end
  else
    for n in pairs(names) do try(n) end
  end
  if best and bd <= math.max(2, math.floor(#key / 3)) then return best end
  return nil
end

--- The unknown-option error for key of op, suggesting the nearest of names.
function A.unknown_option(op, key, names)
  local near = names and A.nearest(key, names)
  local msg = ("%s: unknown option '%s'"):format(op, tostring(key))
  if near then msg = msg .. (" (did you mean '%s'?)"):format(near) end
  fail(msg)
end

local function key_set(allowed)
  if allowed[1] == nil then return allowed end
  local s = {}
  for _, k in ipairs(allowed) do s[k] = true end
  return s
end

--- check_options(op, opts, allowed): opts (or an empty table for nil) after
-- checking it is an options table whose keys are all in allowed (a set or a
-- list of names); an unknown key is an error naming op and the key.
function A.check_options(op, opts, allowed)
  if opts == nil then return EMPTY end
  if not is_options(opts) then
    fail(('%s: expected an options table, got %s'):format(op, A.describe(opts)))
  end
  if allowed then
    local set = key_set(allowed)
    for k in pairs(opts) do
      if not set[k] then A.unknown_option(op, k, set) end
    end
  end
  return opts
end

local function copy_default(v)
  if type(v) ~= 'table' or getmetatable(v) ~= nil then return v end
  local r = {}
  for k, x in pairs(v) do r[k] = copy_default(x) end
  return r
end
A.copy = copy_default

--- parse(op, spec, ...) -> a table of every argument by name.
-- spec lists {name, default} in PyTorch's positional order; an entry with
-- kw = true is keyword-only (options table only). spec.ignored is a set of
-- option names accepted and dropped. The arguments are positional values
-- (nil skips one) optionally followed by an options table with the same
-- names; an argument given both ways, too many positional arguments, a
-- missing required one or an unknown option is an error naming op.
local function parse(op, spec, ignored, ...)
  local n = select('#', ...)
  local args = {...}
  local opts = EMPTY
  if n > 0 and is_options(args[n]) then
    opts = args[n]
    n = n - 1
  end
  local res, pos = {}, 0
  for _, s in ipairs(spec) do
    local key = s[1]
    local v
    if not s.kw then
      pos = pos + 1
      if pos <= n then v = args[pos] end
    end
    local o = opts[key]
    if o ~= nil then
      if v ~= nil then
        fail(('%s: argument %s given twice (positionally and as an option)'):format(op, key))
      end
      v = o
    end
    if v == nil then
      v = s[2]
      if v == A.REQUIRED then fail(('%s: missing required argument %s'):format(op, key)) end
      if type(v) == 'table' then v = copy_default(v) end
    end
    res[key] = v
  end
  if n > pos then
    fail(('%s: expected at most %d positional arguments, got %d'):format(op, pos, n))
  end
  if opts ~= EMPTY then
    for k in pairs(opts) do
      if res[k] == nil and not (ignored and ignored[k]) then
        local known = false
        for _, s in ipairs(spec) do if s[1] == k then known = true; break end end
        if not known then A.unknown_option(op, k, spec) end
      end
    end
  end
  return res
end
function A.parse(op, spec, ...) return parse(op, spec, spec.ignored, ...) end
--- parse_ignoring(op, spec, ignored, ...): parse with a set of option names
-- accepted and dropped.
A.parse_ignoring = parse

------------------------------------------------------------------ tensors and shapes
local function is_tensor(v)
  return type(v) == 'cdata' and ffi.istype('struct of_lua_tensor', v)
end
A.is_tensor = is_tensor

--- 'tensor', 'a global tensor' or the Lua type, for messages.
function A.describe(v)
  if is_tensor(v) then return 'tensor' end
  local q = A.quantized_describe and A.quantized_describe(v)
  if q then return q end
  if type(v) == 'table' and rawget(v, '_local') ~= nil and v.placement ~= nil then
    return 'a global tensor'
  end
  return type(v)
end

--- iter_tensors(op, it) -> the tensors an iterator yields: pairs over named
-- parameters gives (name, tensor), ipairs (index, tensor), an iterator of
-- one's own the tensor first. Anything else is refused at its first value
-- (an iterator that never ends, `function() return 1 end`, would loop forever).
function A.iter_tensors(op, it)
  local list = {}
  for a, b in it do
    local t = is_tensor(a) and a or b
    if not is_tensor(t) and A.describe(t) ~= 'a global tensor' then
      fail(('%s: params iterator yielded %s, %s; expected a tensor (pairs over named parameters)')
           :format(op, A.describe(a), A.describe(b)))
    end
    list[#list + 1] = t
  end
  return list
end

--- check_tensor(op, v[, what[, pos]]): v must be a (local) tensor; what
-- names the argument ('input', argument 1, by default) and pos its position:
-- 'linear: argument 1 (input) must be a tensor, got nil'.
function A.check_tensor(op, v, what, pos)
  if not is_tensor(v) then
    if A.quantized_describe and A.quantized_describe(v) then
      fail(('%s: %s is %s, which this op does not support; dequantize() it first or use the '
        .. 'quantized module (flow.quantization.convert)'):format(op, what or 'the input', A.describe(v)))
    end
    if what == nil then what, pos = 'input', pos or 1 end
    if pos then
      fail(('%s: argument %d (%s) must be a tensor, got %s'):format(op, pos, what, A.describe(v)))
    end
    fail(('%s: expected a tensor for %s, got %s'):format(op, what, A.describe(v)))
  end
  return v
end

--- arg(op, pos, name, v, kinds) -> v, or an error naming op and the
-- argument: kinds is a '|'-separated list of 'tensor', 'number', 'integer',
-- 'string', 'table', 'function', 'boolean', 'nil', 'global' (a global tensor)
-- or 'module' (a table with parameters):
-- 'pixel_shuffle: argument 2 (upscale_factor) must be an integer, got table'.
-- pos may be nil ('dirac_: groups must be an integer, got table').
local NOUN = {integer = 'an integer', ['nil'] = 'nil', global = 'a global tensor'}
function A.arg(op, pos, name, v, kinds)
  for k in kinds:gmatch('[^|]+') do
    if k == 'tensor' then if is_tensor(v) then return v end
    elseif k == 'integer' then if A.is_integer(v) then return v end
    elseif k == 'global' then
      if type(v) == 'table' and rawget(v, '_local') ~= nil then return v end
    elseif k == 'module' then
      if type(v) == 'table' and type(v.parameters) == 'function' then return v end
    elseif type(v) == k then return v end
  end
  local want = {}
  for k in kinds:gmatch('[^|]+') do
    want[#want + 1] = NOUN[k] or ('a ' .. k)
  end
  local what = pos and ('argument %d (%s)'):format(pos, name) or name
  if kinds:find('tensor', 1, true) and A.quantized_describe and A.quantized_describe(v) then
    fail(('%s: %s is %s, which this op does not support; dequantize() it first or use the quantized module '
      .. '(flow.quantization.convert)'):format(op, what, A.describe(v)))
  end
  local got = (type(v) == 'number' and kinds:find('integer', 1, true)) and tostring(v) or A.describe(v)
  fail(('%s: %s must be %s, got %s'):format(op, what, table.concat(want, ' or '), got))
end

--- An optional tensor argument -> its C handle (nil for nil); anything else
-- is an error naming op and the argument.
function A.handle(op, v, what)
  if v == nil then return nil end
  if not is_tensor(v) then
    fail(('%s: %s must be a tensor or nil, got %s'):format(op, what, A.describe(v)))
  end
  return v.p
end

--- Raises the C library's last error at the user's line.
function A.raise_c() fail(ffi.string(core.C.of_last_error())) end

--- A.raise_c() unless st (a C status) is 0.
function A.check_status(st)
  if st ~= 0 then fail(ffi.string(core.C.of_last_error())) end
end

--- true when tensors a and b have the same sizes.
function A.same_shape(a, b)
  local sa, sb = a:size(), b:size()
  if #sa ~= #sb then return false end
  for i = 1, #sa do if sa[i] ~= sb[i] then return false end end
  return true
end

--- '[2,3]' for a tensor, a Size or a list of sizes (sep ', ' gives '[2, 3]').
function A.shape_str(x, sep)
  if is_tensor(x) then
    x = x:size():totable()
  elseif type(x) == 'table' and rawget(x, '_local') ~= nil and x.shape ~= nil then
    x = x.shape
  end
  if type(x) == 'table' and x.totable then x = x:totable() end
  if type(x) ~= 'table' then return tostring(x) end
  return '[' .. table.concat(x, sep or ',') .. ']'
end

------------------------------------------------------------------ dims and sizes
local shape_buf = ffi.new('int64_t[8]')
local shape_buf2 = ffi.new('int64_t[8]')
local dims_buf = ffi.new('int32_t[8]')

--- Whether v is a number with an integral value that fits int64_t (finite,
-- not NaN, |v| < 2^63): what may be passed through the FFI as a size, count
-- or index without being silently truncated or wrapped.
local function is_integer(v)
  return type(v) == 'number' and v == math.floor(v) and v >= -2^63 and v < 2^63
end
A.is_integer = is_integer

--- integer(op, v, pos, name) -> v, or an error naming op and the argument:
-- 'eye: argument 1 (n) must be an integer, got string' ('got 2.5' for a
-- fractional number). pos may be nil ('eye: n must be an integer, ...').
function A.integer(op, v, pos, name)
  if is_integer(v) then return v end
  local got = type(v) == 'number' and tostring(v) or A.describe(v)
  local what = pos and ('argument %d (%s)'):format(pos, name) or name
  fail(('%s: %s must be an integer, got %s'):format(op, what, got))
end

--- 1-based (or negative) dim -> 0-based dim for C; C checks the range.
-- 0 is never a valid Lua dim.
function A.dim(d, op)
  if type(d) ~= 'number' or d ~= math.floor(d) then
    fail(('%s: dim must be an integer, got %s'):format(op, tostring(d)))
  end
  if d > 0 then return d - 1 end
  if d == 0 then
    fail(op .. ': dim 0 is not valid; dims are 1-based (1 = first, -1 = last)')
  end
  return d
end

--- 1-based (or negative) dim of an n-dim tensor -> 1..n, or an error naming op.
function A.norm_dim(op, d, n)
  if type(d) ~= 'number' or d ~= math.floor(d) then
    fail(('%s: dim must be an integer, got %s'):format(op, tostring(d)))
  end
  local r = d < 0 and n + d + 1 or d
  if d == 0 or r < 1 or r > n then
    fail(('%s: dim %d out of range for a %d-D tensor (dims are 1-based)'):format(op, d, n))
  end
  return r
end

--- A list of dims (number or table) -> int32_t[8] of 0-based dims, count.
function A.dims_ptr(dims, op)
  if type(dims) == 'number' then dims = {dims} end
  -- the buffer is a fixed int32_t[8]: a longer list would write past it
  -- into LuaJIT's heap
  if #dims > 8 then fail(('%s: at most 8 dims, got %d'):format(op, #dims)) end
  for i = 1, #dims do dims_buf[i - 1] = A.dim(dims[i], op) end
  return dims_buf, #dims
end

--- Splits (...) into a list of sizes and an options table.
-- Accepts f(2, 3), f({2, 3}), f(flow.Size), each with an optional trailing
-- options table.
function A.sizes_and_options(op, ...)
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
    if not is_integer(s) then
      fail(('%s: size %d must be an integer, got %s'):format(op, i, type(s) == 'number' and tostring(s)
                                                                   or A.describe(s)))
    end
    res[i] = s
  end
  if #res > 8 then fail(op .. ': at most 8 dims are supported, got ' .. #res) end
  return res, opts
end

--- Fills a reusable int64_t[8] with a Lua list (second buffer with which=2).
-- op names the caller in the error a list of more than 8 entries gets (it
-- would write past the buffer into LuaJIT's heap).
function A.shape_ptr(list, which, op)
  if #list > 8 then
    fail(('%s: at most 8 dims are supported, got %d'):format(op or 'shape', #list))
  end
  local buf = which == 2 and shape_buf2 or shape_buf
  for i = 1, #list do buf[i - 1] = list[i] end
  return buf, #list
end

--- opts.dtype as a dtype, or default.
function A.dtype_opt(opts, default)
  return opts.dtype and require('oneflow.types').dtype(opts.dtype, 3) or default
end

return A
