-- oneflow.io.t7: flow.load_t7(path[, opts]) reads Torch7 files (what
-- torch.save wrote in Lua Torch7), binary or ascii.
--
-- The format (torch/File.lua): an object is an int type id and then
--   0 nil | 1 number (double) | 2 string (int length, bytes) | 5 boolean
--   (int 0/1) | 3 table, 4 torch object, 8 (7) function: an int reference
--   index, then -- the first time that index is seen -- the object itself:
--     table: int n, then n (key, value) object pairs
--     torch object: "V <version>" and the class name as strings (files
--       from before versioning have the class name only), then for
--       torch.<T>Tensor: int ndim, ndim longs sizes, ndim longs strides,
--       long 1-based storage offset, the storage object (or nil);
--       torch.<T>Storage: long n, n raw elements; any other class (nn
--       modules...): one object, the table of its fields
--     function: int n, n bytes of bytecode, the upvalues object
-- Objects seen again are written as their index only, so references are
-- kept: a table or tensor stored twice loads as one value, and tensors on
-- one storage are views of one flat tensor (they share memory).
-- Binary files hold little-endian ints (4 bytes), doubles and longs -- 8
-- bytes on 64-bit Linux/macOS, 4 in files from Windows or 32-bit hosts
-- ("b32" in Torch7). Ascii files hold the numbers as text separated by
-- spaces/newlines (strings as raw bytes after their length).
--
-- opts.format: 'binary' | 'ascii' | 'b64' | 'b32' (default: detected from
-- the first byte; the long size is tried as 8 bytes, then as 4).
--
-- What comes back: tables as Lua tables; torch.<T>Tensor as flow tensors
-- (Float, Double, Half, Long, Int, Short, Byte, Char and their Cuda*
-- twins), a bare storage as a
-- 1-d tensor, an empty tensor (0 dims) as a tensor of shape {0}. Other
-- classes (nn.Linear, nn.Sequential ...) become plain tables of their
-- fields with a metatable {__typename = 'nn.Linear'} (t7.typename(obj)):
-- no class code is looked up or run. Functions are never loaded: their
-- bytecode is skipped and they become {__t7_function = true, upvalues =}.
-- Errors name the file: "flow.load_t7: <path>: <what is wrong>"; every size
-- and count is checked against the bytes left before anything is
-- allocated, nesting is capped (MAX_DEPTH).
local ffi = require 'ffi'
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local bytes = require 'oneflow.io.bytes'

local C = core.C
local format = string.format

local M = {}
M.MAX_DEPTH = 500

local TYPE_NIL, TYPE_NUMBER, TYPE_STRING, TYPE_TABLE, TYPE_TORCH, TYPE_BOOLEAN = 0, 1, 2, 3, 4, 5
local TYPE_FUNCTION, LEGACY_TYPE_RECUR_FUNCTION, TYPE_RECUR_FUNCTION = 6, 7, 8

local dtypes = {Float = 'float32', Double = 'float64', Half = 'float16', Long = 'int64', Int = 'int32',
                Byte = 'uint8', Char = 'int8', Cuda = 'float32', CudaDouble = 'float64',
                CudaHalf = 'float16', CudaLong = 'int64', CudaInt = 'int32', CudaByte = 'uint8',
                CudaChar = 'int8', Short = 'int16', CudaShort = 'int16'}
local itemsize = {float32 = 4, float64 = 8, float16 = 2, int64 = 8, int32 = 4, uint8 = 1, int8 = 1,
                  int16 = 2}
local TWO53 = 2 ^ 53

--- The Torch7 class name of an object loaded from a t7 file, or nil.
function M.typename(obj)
  local mt = type(obj) == 'table' and getmetatable(obj)
  return mt and rawget(mt, '__typename') or nil
end

------------------------------------------------------------------ formats
-- A format reads the primitive values: int(), long(), double(), chars(n),
-- storage(dtype, n) -> flat tensor.
local function binary_format(r, long_size, fail)
  local F = {}
  function F.int(what) return r:i32(what) end
  function F.long(what)
    if long_size == 4 then return r:i32(what) end
    return r:i64(what)
  end
  function F.double(what) return r:f64(what) end
  function F.chars(n, what) return r:bytes(n, what) end
  function F.storage(dtype, n, what)
    local isz = itemsize[dtype]
    local file_isz = (dtype == 'int64' and long_size == 4) and 4 or isz
    if n * file_isz > r:left() then
      fail('%s of %.0f elements needs %.0f bytes, only %d are left (truncated file?)', what, n, n * file_isz, r:left())
    end
    if file_isz ~= isz then
      local t = T.flow.empty({n}, {dtype = 'int32'})
      if n > 0 then r:raw(t:data_ptr(), n * 4, what) end
      return t:to('int64')
    end
    local t = T.flow.empty({n}, {dtype = dtype})
    if n > 0 then r:raw(t:data_ptr(), n * isz, what) end
    return t
  end
  return F
end

local specials = {inf = math.huge, ['+inf'] = math.huge, ['-inf'] = -math.huge, infinity = math.huge,
                  ['-infinity'] = -math.huge, nan = 0 / 0, ['-nan'] = 0 / 0, ['+nan'] = 0 / 0}

local function ascii_format(r, fail)
  local F = {}
  local function token(what)
    local tok = r:token(64, what)
    if not tok then fail('truncated file: %s expected at offset %d', what or 'a number', r.pos) end
    return tok
  end
  -- after each write call Torch7 adds a newline (and reads one back)
  local function eol()
    if r:peek_byte() == 10 then r.pos = r.pos + 1 end
  end
  local function integer(what)
    local tok = token(what)
    if not tok:find('^[-+]?%d+$') then
      fail('%s: expected an integer at offset %d, got %q', what or 'a value', r.pos, tok)
    end
    local v = tonumber(tok)
    if not v or v >= TWO53 or v <= -TWO53 then fail('%s: integer %s is too large', what or 'a value', tok) end
    return v
  end
  local function number(tok, what)
    local v = tonumber(tok)
    if v == nil then v = specials[tok:lower()] end
    if v == nil then fail('%s: expected a number at offset %d, got %q', what or 'a value', r.pos, tok) end
    return v
  end
  function F.int(what) local v = integer(what); eol(); return v end
  F.long = F.int
  function F.double(what) local v = number(token(what), what); eol(); return v end
  function F.chars(n, what)
    local s = r:bytes(n, what)
    if n > 0 then eol() end
    return s
  end
  function F.storage(dtype, n, what)
    if n * 2 > r:left() + 1 then
      fail('%s of %.0f elements cannot fit in the %d bytes left (truncated file?)', what, n, r:left())
    end
    local is_half = dtype == 'float16'
    local t = T.flow.empty({n}, {dtype = is_half and 'float32' or dtype})
    local p = t:data_ptr()
    local integral = dtype ~= 'float32' and dtype ~= 'float64' and not is_half
    for i = 0, n - 1 do
      local tok = token(what)
      if integral then
        if not tok:find('^[-+]?%d+$') then fail('%s: expected an integer at offset %d, got %q', what, r.pos, tok) end
        local v = tonumber(tok)
        if dtype == 'int64' and (v >= TWO53 or v <= -TWO53) then
          -- exact 64-bit value
          local neg = tok:sub(1, 1) == '-'
          local acc = ffi.new('int64_t', 0)
          for d in tok:gmatch('%d') do acc = acc * 10 + (neg and -tonumber(d) or tonumber(d)) end
          p[i] = acc
        else
          local lo, hi = -2 ^ 63, 2 ^ 63
          if dtype == 'int32' then lo, hi = -2 ^ 31, 2 ^ 31 end
          if dtype == 'uint8' then lo, hi = 0, 256 end
          if dtype == 'int8' then lo, hi = -128, 128 end
          if v < lo or v >= hi then fail('%s: value %s is out of range for %s', what, tok, dtype) end
          p[i] = v
        end
      else
        p[i] = number(tok, what)
      end
    end
    if n > 0 then eol() end
    if is_half then return t:to('float16') end
    return t
  end
  return F
end

------------------------------------------------------------------ objects
local shape_buf, stride_buf = ffi.new('int64_t[8]'), ffi.new('int64_t[8]')

local function read_all(src, fmt, long_size, fail)
  local r = bytes.reader(src, 0, src.size, fail)
  local F = fmt == 'ascii' and ascii_format(r, fail) or binary_format(r, long_size, fail)
  local objects = {}
  local storages = setmetatable({}, {__mode = 'k'})   -- flat tensor -> dtype
  local read_object

  local function count(v, what)
    if v < 0 then fail('%s: negative count %d at offset %d', what, v, r.pos) end
    return v
  end

  local function read_storage(dtype, what)
    local n = F.long(what .. ' size')
    if n < 0 or n >= TWO53 then fail('%s: bad size %.0f', what, n) end
    local t = F.storage(dtype, n, what)
    storages[t] = dtype
    return t
  end

  local function read_tensor(dtype, cls, depth)
    local nd = count(F.int(cls .. ' ndim'), cls)
    if nd > 8 then fail('%s with %d dims: at most 8 are supported', cls, nd) end
    local size, stride = {}, {}
    for i = 1, nd do size[i] = F.long(cls .. ' size') end
    for i = 1, nd do stride[i] = F.long(cls .. ' stride') end
    local offset = F.long(cls .. ' storage offset') - 1
    local st = read_object(depth + 1)
    local numel, hi = 1, offset
    for i = 1, nd do
      if size[i] < 0 or size[i] >= TWO53 then fail('%s: bad size %s', cls, tostring(size[i])) end
      if stride[i] < 0 or stride[i] >= TWO53 then fail('%s: bad stride %s', cls, tostring(stride[i])) end
      numel = numel * size[i]
      if size[i] > 0 then hi = hi + (size[i] - 1) * stride[i] end
    end
    if nd == 0 then return T.flow.empty({0}, {dtype = dtype}) end
    if numel >= TWO53 or hi >= TWO53 then fail('%s of shape [%s] is too large', cls, table.concat(size, ', ')) end
    if st == nil then
      if numel > 0 then fail('%s of shape [%s] has no storage', cls, table.concat(size, ', ')) end
      return T.flow.empty(size, {dtype = dtype})
    end
    if not T.is_tensor(st) or not storages[st] then
      fail('%s: its storage is %s, not a storage', cls, type(st))
    end
    if storages[st] ~= dtype then fail('%s on a storage of %s', cls, storages[st]) end
    if offset < 0 then fail('%s: storage offset %d is before the storage', cls, offset + 1) end
    local cap = st:numel()
    if numel > 0 and hi >= cap then
      fail('%s of shape [%s], stride [%s], offset %d reaches element %d of a storage of %d', cls,
           table.concat(size, ', '), table.concat(stride, ', '), offset + 1, hi + 1, cap)
    end
    if numel == 0 and offset > cap then fail('%s: storage offset %d is past the storage', cls, offset + 1) end
    for i = 1, nd do
      shape_buf[i - 1] = size[i]
      stride_buf[i - 1] = stride[i]
    end
    return T.call1(C.of_as_strided, st.p, shape_buf, stride_buf, nd, offset, core.out1)
  end

  local function read_string(what)
    local n = count(F.int(what .. ' length'), what)
    return F.chars(n, what)
  end

  read_object = function(depth)
    if depth > M.MAX_DEPTH then fail('objects nested deeper than %d levels', M.MAX_DEPTH) end
    local at = r.pos
    local typ = F.int('a type id')
    if typ == TYPE_NIL then return nil end
    if typ == TYPE_NUMBER then return F.double('a number') end
    if typ == TYPE_STRING then return read_string('a string') end
    if typ == TYPE_BOOLEAN then return F.int('a boolean') == 1 end
    if typ == TYPE_FUNCTION then
      read_string('function bytecode')
      return {__t7_function = true, upvalues = read_object(depth + 1)}
    end
    if typ ~= TYPE_TABLE and typ ~= TYPE_TORCH and typ ~= TYPE_RECUR_FUNCTION and typ ~= LEGACY_TYPE_RECUR_FUNCTION then
      fail('unknown object type %d at offset %d (not a Torch7 file, or a wrong format/long size?)', typ, at)
    end
    local index = F.int('an object index')
    local seen = objects[index]
    if seen ~= nil then return seen end
    if typ == TYPE_TABLE then
      local t = {}
      objects[index] = t
      local n = count(F.int('a table size'), 'a table size')
      if n * 2 > r:left() then fail('a table of %d entries cannot fit in the %d bytes left', n, r:left()) end
      for _ = 1, n do
        local k = read_object(depth + 1)
        local v = read_object(depth + 1)
        if k == nil then fail('a table key is nil (corrupt file)') end
        if k ~= k then fail('a table key is NaN (corrupt file)') end
        t[k] = v
      end
      return t
    end
    if typ == TYPE_RECUR_FUNCTION or typ == LEGACY_TYPE_RECUR_FUNCTION then
      local fn = {__t7_function = true}
      objects[index] = fn
      read_string('function bytecode')   -- skipped, never loaded
      fn.upvalues = read_object(depth + 1)
      return fn
    end
    -- a torch class
    local version = read_string('a class version')
    local cls
    if version:find('^V %d+$') then
      cls = read_string('a class name')
    else
      cls = version
    end
    if #cls == 0 or #cls > 256 or cls:find('[^%w_.]') then
      fail('bad class name %q at offset %d', cls:sub(1, 64), at)
    end
    local kind, prefix = nil, cls:match('^torch%.(%w+)Tensor$')
    if prefix then kind = 'Tensor' else
      prefix = cls:match('^torch%.(%w+)Storage$')
      if prefix then kind = 'Storage' end
    end
    if kind then
      local dtype = dtypes[prefix]
      if not dtype then
        fail('unsupported Torch7 class %s', cls)
      end
      local v
      if kind == 'Tensor' then v = read_tensor(dtype, cls, depth) else v = read_storage(dtype, cls) end
      objects[index] = v
      return v
    end
    if cls:find('^tds%.') then fail('%s objects are not supported (custom serialization)', cls) end
    -- any other class: the table of its fields, with its class name
    local obj = setmetatable({}, {__typename = cls})
    objects[index] = obj
    local fields = read_object(depth + 1)
    if fields ~= nil then
      if type(fields) ~= 'table' or getmetatable(fields) ~= nil then
        fail('%s: expected the table of its fields, got %s (a class with its own serialization?)', cls,
             T.is_tensor(fields) and 'a tensor' or type(fields))
      end
      for k, v in pairs(fields) do obj[k] = v end
    end
    return obj
  end

  local v = read_object(0)
  return v, r:left()
end

local function load_source(src, opts, fail)
  local fmt, long_size = opts.format, opts.long_size
  if fmt == 'b64' then fmt, long_size = 'binary', 8 end
  if fmt == 'b32' then fmt, long_size = 'binary', 4 end
  if fmt ~= nil and fmt ~= 'binary' and fmt ~= 'ascii' then
    error(format("flow.load_t7: format must be 'binary', 'ascii', 'b64' or 'b32', got %s", tostring(fmt)), 0)
  end
  if long_size ~= nil and long_size ~= 4 and long_size ~= 8 then
    error('flow.load_t7: long_size must be 4 or 8', 0)
  end
  if src.size == 0 then fail('empty file') end
  if fmt == nil then
    local b = src:sub(0, 1):byte()
    fmt = (b >= 48 and b <= 57) and 'ascii' or 'binary'
    if b > 8 and fmt == 'binary' then
      fail('not a Torch7 file (first byte 0x%02x is no type id, binary or ascii)', b)
    end
  end
  if fmt == 'ascii' or long_size then return (read_all(src, fmt, long_size or 8, fail)) end
  -- binary with an unknown long size: 8 bytes (64-bit hosts), else 4
  -- (a 4-byte reading is taken only when it accounts for every byte)
  local ok8, v8, left8 = pcall(read_all, src, 'binary', 8, fail)
  if ok8 and left8 == 0 then return v8 end
  local ok4, v4, left4 = pcall(read_all, src, 'binary', 4, fail)
  if ok4 and left4 == 0 then return v4 end
  if ok8 then return v8 end
  error(v8, 0)
end

-- The tensor metatype is attached by require 'oneflow'; make sure it is
-- there when this module is used on its own (e.g. by a fuzzing harness).
local function ensure_flow()
  if not package.loaded.oneflow then require 'oneflow' end
end

local function run(name, s, opts)
  ensure_flow()
  opts = opts or {}
  if type(opts) ~= 'table' then error('flow.load_t7: options must be a table', 3) end
  local prefix = format('flow.load_t7: %s: ', name)
  local function fail(fmt, ...) error(prefix .. format(fmt, ...), 0) end
  local ok, res = pcall(bytes.with_source, name, s, fail, function(src) return load_source(src, opts, fail) end)
  if not ok then
    res = tostring(res)
    if res:sub(1, #prefix) ~= prefix then res = prefix .. res end
    error(res, 0)
  end
  return res
end

--- flow.load_t7(path[, opts]): see the file header.
function M.load(path, opts)
  if type(path) ~= 'string' or path == '' then
    error('flow.load_t7: expected a file path (string), got ' .. tostring(path), 2)
  end
  return run(path, nil, opts)
end

--- The same over the bytes of a t7 file held in a Lua string.
function M.loads(s, opts)
  if type(s) ~= 'string' then error('flow.load_t7: expected a string of bytes, got ' .. type(s), 2) end
  return run(opts and opts.name or '<bytes>', s, opts)
end

return M
