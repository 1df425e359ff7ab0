-- oneflow.utils.json: a strict, small JSON reader and writer in plain Lua.
--
-- The reader is meant for untrusted input (safetensors headers): it never
-- calls load/loadstring, limits nesting depth, rejects duplicate object
-- keys, control characters in strings, lone surrogates, leading zeros,
-- trailing commas and anything after the value but whitespace. Bytes >= 0x80
-- inside strings are passed through as they are.
--
--   json.decode(s[, {max_depth = 128}]) -> value   (raises 'json: ... at byte N')
--   json.encode(v) -> string    object keys sorted; json.null; arrays are
--                               sequences or tables marked with json.array(t)
--   json.valid_utf8(s) -> boolean
local M = {}

local byte, sub, find, char, format = string.byte, string.sub, string.find, string.char, string.format
local concat = table.concat

-- null and arrays are values, never an options table (oneflow._args); a
-- decoded object is a plain table and works as one.
local value_type = require('oneflow._args').value_type
M.null = setmetatable({}, value_type({__tostring = function() return 'json.null' end}))
local array_mt = value_type({__name = 'json.array'})
--- Marks t as a JSON array (so that {} encodes as []).
function M.array(t) return setmetatable(t or {}, array_mt) end
function M.is_array(t) return getmetatable(t) == array_mt end

------------------------------------------------------------------ decoding
local function fail(what, pos)
  error(format('json: %s at byte %d', what, pos), 0)
end

local ws = {[32] = true, [9] = true, [10] = true, [13] = true}
local function skip(s, pos)
  local b = byte(s, pos)
  while b and ws[b] do pos = pos + 1; b = byte(s, pos) end
  return pos, b
end

local escapes = {[34] = '"', [92] = '\\', [47] = '/', [98] = '\b', [102] = '\f',
                 [110] = '\n', [114] = '\r', [116] = '\t'}

local function utf8_char(cp)
  if cp < 0x80 then return char(cp) end
  if cp < 0x800 then return char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64) end
  if cp < 0x10000 then
    return char(0xE0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  return char(0xF0 + math.floor(cp / 262144), 0x80 + math.floor(cp / 4096) % 64,
              0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
end

local function hex4(s, pos)
  local h = sub(s, pos, pos + 3)
  if not find(h, '^%x%x%x%x$') then fail('bad \\u escape', pos) end
  return tonumber(h, 16)
end

-- s[pos] is the opening quote; returns the string and the position after it.
local function read_string(s, pos)
  local parts, n = nil, 0
  local i = pos + 1
  while true do
    local j = find(s, '["\\%z\1-\31]', i)
    if not j then fail('unterminated string', pos) end
    local b = byte(s, j)
    if b == 34 then
      if not parts then return sub(s, pos + 1, j - 1), j + 1 end
      n = n + 1; parts[n] = sub(s, i, j - 1)
      return concat(parts, '', 1, n), j + 1
    elseif b == 92 then
      parts = parts or {}
      n = n + 1; parts[n] = sub(s, i, j - 1)
      local e = byte(s, j + 1)
      if e == 117 then -- \u
        local cp = hex4(s, j + 2)
        i = j + 6
        if cp >= 0xD800 and cp <= 0xDBFF then
          if sub(s, i, i + 1) ~= '\\u' then fail('lone surrogate in \\u escape', j) end
          local lo = hex4(s, i + 2)
          if lo < 0xDC00 or lo > 0xDFFF then fail('bad surrogate pair in \\u escape', j) end
          cp = 0x10000 + (cp - 0xD800) * 1024 + (lo - 0xDC00)
          i = i + 6
        elseif cp >= 0xDC00 and cp <= 0xDFFF then
          fail('lone surrogate in \\u escape', j)
        end
        n = n + 1; parts[n] = utf8_char(cp)
      else
        local c = escapes[e]
        if not c then fail('bad escape in string', j) end
        n = n + 1; parts[n] = c
        i = j + 2
      end
    else
      fail('control character in string', j)
    end
  end
end

local decode_value

local function read_number(s, pos)
  local a, e = find(s, '^-?%d+', pos)
  if not a then fail('unexpected character ' .. format('%q', sub(s, pos, pos)), pos) end
  local int = sub(s, a, e)
  if find(int, '^-?0%d') then fail('leading zero in number', pos) end
  local stop = e
  local f1, f2 = find(s, '^%.%d+', stop + 1)
  if f1 then stop = f2 elseif byte(s, stop + 1) == 46 then fail('bad number', pos) end
  local x1, x2 = find(s, '^[eE][-+]?%d+', stop + 1)
  if x1 then stop = x2 elseif find(s, '^[eE]', stop + 1) then fail('bad number', pos) end
  return tonumber(sub(s, pos, stop)), stop + 1
end

local function read_object(s, pos, depth, opts)
  local res = {}
  local p, b = skip(s, pos + 1)
  if b == 125 then return res, p + 1 end
  while true do
    if b ~= 34 then fail('expected a string key', p) end
    local k
    k, p = read_string(s, p)
    if res[k] ~= nil then fail(format('duplicate key %q', k), p) end
    p, b = skip(s, p)
    if b ~= 58 then fail("expected ':'", p) end
    local v
    v, p = decode_value(s, p + 1, depth, opts)
    res[k] = v
    p, b = skip(s, p)
    if b == 125 then return res, p + 1 end
    if b ~= 44 then fail("expected ',' or '}'", p) end
    p, b = skip(s, p + 1)
  end
end

local function read_array(s, pos, depth, opts)
  local res, n = setmetatable({}, array_mt), 0
  local p, b = skip(s, pos + 1)
  if b == 93 then return res, p + 1 end
  while true do
    local v
    v, p = decode_value(s, p, depth, opts)
    n = n + 1; res[n] = v
    p, b = skip(s, p)
    if b == 93 then return res, p + 1 end
    if b ~= 44 then fail("expected ',' or ']'", p) end
    p = p + 1
  end
end

function decode_value(s, pos, depth, opts)
  local p, b = skip(s, pos)
  if b == nil then fail('unexpected end of input', p) end
  if b == 123 or b == 91 then
    if depth >= opts.max_depth then fail('nesting deeper than ' .. opts.max_depth, p) end
    if b == 123 then return read_object(s, p, depth + 1, opts) end
    return read_array(s, p, depth + 1, opts)
  elseif b == 34 then return read_string(s, p)
  elseif b == 116 then
    if sub(s, p, p + 3) == 'true' then return true, p + 4 end
  elseif b == 102 then
    if sub(s, p, p + 4) == 'false' then return false, p + 5 end
  elseif b == 110 then
    if sub(s, p, p + 3) == 'null' then return M.null, p + 4 end
  else
    return read_number(s, p)
  end
  fail('unexpected character ' .. format('%q', sub(s, p, p)), p)
end

function M.decode(s, opts)
  if type(s) ~= 'string' then error('json.decode: expected a string, got ' .. type(s), 2) end
  opts = {max_depth = opts and opts.max_depth or 128}
  local v, p = decode_value(s, 1, 0, opts)
  local q = skip(s, p)
  if q <= #s then fail('trailing characters after the value', q) end
  return v
end

------------------------------------------------------------------ encoding
local short = {['"'] = '\\"', ['\\'] = '\\\\', ['\b'] = '\\b', ['\f'] = '\\f',
               ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t'}
local function quote(s)
  return '"' .. s:gsub('[%z\1-\31"\\]', function(c)
    return short[c] or format('\\u%04x', byte(c))
  end) .. '"'
end
M.quote = quote

--- Shortest of %.14g / %.17g that reads back exactly.
function M.number(v)
  if v ~= v or v == math.huge or v == -math.huge then
    error('json.encode: cannot encode ' .. tostring(v), 2)
  end
  local s = format('%.14g', v)
  if tonumber(s) ~= v then s = format('%.17g', v) end
  return s
end

local function encode(v, out, depth)
  local t = type(v)
  if depth > 200 then error('json.encode: nesting too deep', 0) end
  if t == 'string' then out[#out + 1] = quote(v)
  elseif t == 'number' then out[#out + 1] = M.number(v)
  elseif t == 'boolean' then out[#out + 1] = tostring(v)
  elseif v == M.null then out[#out + 1] = 'null'
  elseif t == 'table' then
    local n = #v
    local is_arr = getmetatable(v) == array_mt
    if not is_arr and n > 0 then
      -- a sequence with no other keys
      local count = 0
      for _ in pairs(v) do count = count + 1 end
      is_arr = count == n
    end
    if is_arr then
      out[#out + 1] = '['
      for i = 1, n do
        if i > 1 then out[#out + 1] = ',' end
        encode(v[i], out, depth + 1)
      end
      out[#out + 1] = ']'
    else
      local keys = {}
      for k in pairs(v) do
        if type(k) ~= 'string' then error('json.encode: object keys must be strings, got ' .. type(k), 0) end
        keys[#keys + 1] = k
      end
      table.sort(keys)
      out[#out + 1] = '{'
      for i, k in ipairs(keys) do
        if i > 1 then out[#out + 1] = ',' end
        out[#out + 1] = quote(k)
        out[#out + 1] = ':'
        encode(v[k], out, depth + 1)
      end
      out[#out + 1] = '}'
    end
  else
    error('json.encode: cannot encode a ' .. t, 0)
  end
end

function M.encode(v)
  local out = {}
  encode(v, out, 0)
  return concat(out)
end

------------------------------------------------------------------ utf-8
function M.valid_utf8(s)
  local i, n = 1, #s
  while i <= n do
    local j = find(s, '[\128-\255]', i)
    if not j then return true end
    local c = byte(s, j)
    local len, min
    if c >= 0xC2 and c <= 0xDF then len, min = 2, 0x80
    elseif c >= 0xE0 and c <= 0xEF then len, min = 3, 0x800
    elseif c >= 0xF0 and c <= 0xF4 then len, min = 4, 0x10000
    else return false end
    local cp = c % (2 ^ (7 - len))
    for k = 1, len - 1 do
      local cc = byte(s, j + k)
      if not cc or cc < 0x80 or cc > 0xBF then return false end
      cp = cp * 64 + cc % 64
    end
    if cp < min or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF) then return false end
    i = j + len
  end
  return true
end

return M
