-- oneflow.io.bytes: byte sources and a bounds-checked reader, shared by the
-- checkpoint readers (oneflow.io.zip, .pickle, .torch, .t7).
--
-- A source is a Lua string or an open file, seen the same way:
--   src.size                      total bytes
--   src:sub(off, n) -> string     n bytes from 0-based offset off (exact)
--   src:copy(off, n, ptr)         n bytes into C memory at ptr
--   src.str                       the string, for string sources
-- Callers check every offset and length against src.size before asking;
-- the sources check again and raise on short reads, so a lying header can
-- only ever produce a Lua error.
--
-- A reader walks a source from a start offset up to a limit:
--   r.pos (0-based, absolute), r:u8() r:u16() r:u32() r:i32() r:u64() r:i64()
--   r:f64() (little-endian) r:f64be() r:bytes(n) r:raw(ptr, n) r:line(max)
--   r:peek_byte() r:seek(pos) r:left()
-- Every read checks the limit first and calls fail(fmt, ...) (which must
-- raise) with the number of bytes wanted and left. A file source is read
-- through a window (WINDOW bytes), so many small reads cost one fread.
local ffi = require 'ffi'
local P = require 'oneflow.utils.posix'

local C = P.C
local byte, sub, format = string.byte, string.sub, string.format

local M = {}
M.WINDOW = 1024 * 1024
local TWO53 = 2 ^ 53

------------------------------------------------------------------ sources
local StringSource = {}
StringSource.__index = StringSource

function StringSource:sub(off, n)
  if off < 0 or n < 0 or off + n > self.size then
    error(format('read of %d bytes at offset %d is outside the %d-byte buffer', n, off, self.size), 0)
  end
  return sub(self.str, off + 1, off + n)
end

function StringSource:copy(off, n, ptr)
  if off < 0 or n < 0 or off + n > self.size then
    error(format('read of %d bytes at offset %d is outside the %d-byte buffer', n, off, self.size), 0)
  end
  if n > 0 then ffi.copy(ptr, ffi.cast('const uint8_t *', self.str) + off, n) end
end

function StringSource.close() end

--- A source over the bytes of a Lua string.
function M.string_source(s)
  return setmetatable({str = s, size = #s}, StringSource)
end

local FileSource = {}
FileSource.__index = FileSource

local function file_read(self, off, n, ptr)
  if off < 0 or n < 0 or off + n > self.size then
    error(format('read of %d bytes at offset %d is outside the %d-byte file', n, off, self.size), 0)
  end
  if n == 0 then return end
  if self.f == nil then error('read from a closed file', 0) end
  if C.fseeko(self.f, off, P.SEEK_SET) ~= 0 then error('cannot seek (' .. P.strerror() .. ')', 0) end
  local got = tonumber(C.fread(ptr, 1, n, self.f))
  if got ~= n then
    if C.ferror(self.f) ~= 0 then error('read error (' .. P.strerror() .. ')', 0) end
    error(format('file shrank while reading (%d of %d bytes at offset %d)', got, n, off), 0)
  end
end

function FileSource:sub(off, n)
  if n == 0 then return '' end
  if n > self.size then
    error(format('read of %d bytes at offset %d is outside the %d-byte file', n, off, self.size), 0)
  end
  local buf = ffi.new('uint8_t[?]', n)
  file_read(self, off, n, buf)
  return ffi.string(buf, n)
end

function FileSource:copy(off, n, ptr)
  file_read(self, off, n, ptr)
end

function FileSource:close()
  if self.f ~= nil then
    C.fclose(self.f)
    self.f = nil
  end
end

--- A source over an open file: returns the source or nil, message.
function M.file_source(path)
  local f = C.fopen(path, 'rb')
  if f == nil then return nil, 'cannot open (' .. P.strerror() .. ')' end
  if C.fseeko(f, 0, P.SEEK_END) ~= 0 then
    local e = P.strerror()
    C.fclose(f)
    return nil, 'cannot seek (' .. e .. ')'
  end
  local size = tonumber(C.ftello(f))
  if size < 0 then
    local e = P.strerror()
    C.fclose(f)
    return nil, 'cannot tell the file size (' .. e .. ')'
  end
  return setmetatable({f = f, size = size}, FileSource)
end

--- Runs fn(src) over the file at path (or the string given as opts.bytes),
-- closing the file whatever happens. fail(msg) is called on open errors.
function M.with_source(path, bytes, fail, fn)
  local src
  if bytes ~= nil then
    src = M.string_source(bytes)
  else
    local err
    src, err = M.file_source(path)
    if not src then fail('%s', err) end
  end
  local ok, a, b = pcall(fn, src)
  src:close()
  if not ok then error(a, 0) end
  return a, b
end

------------------------------------------------------------------ reader
local Reader = {}
Reader.__index = Reader

--- A reader over src for [start, limit); fail(fmt, ...) must raise.
-- window (default M.WINDOW) is how much a file source reads ahead: small
-- for a reader that only wants a header.
function M.reader(src, start, limit, fail, window)
  start = start or 0
  limit = limit or src.size
  local r = setmetatable({src = src, pos = start, limit = limit, fail = fail, window = window or M.WINDOW}, Reader)
  if src.str then
    r.buf, r.base = src.str, 0
  else
    r.buf, r.base = '', start
  end
  return r
end

function Reader:left() return self.limit - self.pos end

function Reader:seek(pos)
  if pos < 0 or pos > self.limit then
    self.fail('offset %d is outside the data (%d bytes)', pos, self.limit)
  end
  self.pos = pos
end

-- Makes bytes [pos, pos + n) available; returns the 1-based index in buf.
local function window(self, n, what)
  local pos = self.pos
  if n > self.limit - pos then
    self.fail('truncated data: %s needs %.0f bytes at offset %d, only %d left',
              what or 'a read', n, pos, self.limit - pos)
  end
  local i = pos - self.base + 1
  if i < 1 or i + n - 1 > #self.buf then
    local len = math.min(math.max(n, self.window), self.limit - pos)
    self.buf = self.src:sub(pos, len)
    self.base = pos
    i = 1
  end
  return i
end

function Reader:u8(what)
  local i = window(self, 1, what)
  self.pos = self.pos + 1
  return byte(self.buf, i)
end

function Reader:peek_byte()
  if self.pos >= self.limit then return nil end
  local i = window(self, 1)
  return byte(self.buf, i)
end

function Reader:u16(what)
  local i = window(self, 2, what)
  self.pos = self.pos + 2
  local a, b = byte(self.buf, i, i + 1)
  return a + b * 256
end

function Reader:u32(what)
  local i = window(self, 4, what)
  self.pos = self.pos + 4
  local a, b, c, d = byte(self.buf, i, i + 3)
  return a + b * 256 + c * 65536 + d * 16777216
end

function Reader:i32(what)
  local v = self:u32(what)
  if v >= 2147483648 then v = v - 4294967296 end
  return v
end

--- Unsigned 64-bit as a double; values >= 2^53 come back as math.huge
-- (every caller treats them as "too large").
function Reader:u64(what)
  local lo = self:u32(what)
  local hi = self:u32(what)
  local v = hi * 4294967296 + lo
  if v >= TWO53 then return math.huge end
  return v
end

--- Signed 64-bit as a double; |v| >= 2^53 comes back as +-math.huge.
function Reader:i64(what)
  local lo = self:u32(what)
  local hi = self:u32(what)
  if hi >= 2147483648 then
    local v = (hi - 4294967296) * 4294967296 + lo
    if v <= -TWO53 then return -math.huge end
    return v
  end
  local v = hi * 4294967296 + lo
  if v >= TWO53 then return math.huge end
  return v
end

local dbl = ffi.new('double[1]')
local dbl_bytes = ffi.cast('uint8_t *', dbl)
local dbl_words = ffi.cast('uint32_t *', dbl)
local little = ffi.abi('le')
local band = require('bit').band
local NAN = 0 / 0

-- LuaJIT keeps type tags in NaN payloads and does not canonicalise NaNs it
-- loads from FFI memory: a hostile file's NaN with the sign bit and a payload
-- would become a bogus object (crash in the GC), so the bits are looked at first.
local function f64_value()
  local hi, lo = dbl_words[little and 1 or 0], dbl_words[little and 0 or 1]
  if band(hi, 0x7ff00000) == 0x7ff00000 and (band(hi, 0xfffff) ~= 0 or lo ~= 0) then return NAN end
  return dbl[0]
end

function Reader:f64(what)
  local i = window(self, 8, what)
  self.pos = self.pos + 8
  for k = 0, 7 do dbl_bytes[little and k or 7 - k] = byte(self.buf, i + k) end
  return f64_value()
end

function Reader:f64be(what)
  local i = window(self, 8, what)
  self.pos = self.pos + 8
  for k = 0, 7 do dbl_bytes[little and 7 - k or k] = byte(self.buf, i + k) end
  return f64_value()
end

local flt = ffi.new('float[1]')
local flt_bytes = ffi.cast('uint8_t *', flt)
local flt_word = ffi.cast('uint32_t *', flt)
function Reader:f32(what)
  local i = window(self, 4, what)
  self.pos = self.pos + 4
  for k = 0, 3 do flt_bytes[little and k or 3 - k] = byte(self.buf, i + k) end
  local w = flt_word[0]
  if band(w, 0x7f800000) == 0x7f800000 and band(w, 0x7fffff) ~= 0 then return NAN end
  return flt[0]
end

function Reader:bytes(n, what)
  if n == 0 then return '' end
  local i = window(self, n, what)
  self.pos = self.pos + n
  return sub(self.buf, i, i + n - 1)
end

--- Copies n bytes into C memory at ptr.
function Reader:raw(ptr, n, what)
  if n > self.limit - self.pos then
    self.fail('truncated data: %s needs %.0f bytes at offset %d, only %d left',
              what or 'a read', n, self.pos, self.limit - self.pos)
  end
  if n == 0 then return end
  local dst = ffi.cast('uint8_t *', ptr)
  local i = self.pos - self.base + 1
  local inbuf = #self.buf - i + 1
  local take = 0
  if i >= 1 and inbuf > 0 then
    take = math.min(inbuf, n)
    ffi.copy(dst, ffi.cast('const uint8_t *', self.buf) + (i - 1), take)
  end
  if take < n then self.src:copy(self.pos + take, n - take, dst + take) end
  self.pos = self.pos + n
end

--- The bytes up to the next '\n' (which is consumed), at most max bytes.
function Reader:line(max, what)
  local n = math.min(max + 1, self.limit - self.pos)
  if n <= 0 then self.fail('truncated data: %s needs a line at offset %d', what or 'a read', self.pos) end
  local i = window(self, n, what)
  local j = string.find(self.buf, '\n', i, true)
  if not j or j > i + n - 1 then
    self.fail('%s: no end of line within %d bytes at offset %d', what or 'a line', max, self.pos)
  end
  self.pos = self.pos + (j - i) + 1
  return sub(self.buf, i, j - 1)
end

--- Skips ASCII whitespace and returns the next run of non-space bytes
-- (at most max), or nil at the end of the data.
function Reader:token(max, what)
  while true do
    local b = self:peek_byte()
    if b == nil then return nil end
    if b ~= 32 and (b < 9 or b > 13) then break end
    self.pos = self.pos + 1
  end
  local n = math.min(max + 1, self.limit - self.pos)
  local i = window(self, n, what)
  local j = string.find(self.buf, '[%s]', i)
  local len
  if j and j <= i + n - 1 then len = j - i else len = n end
  if len > max then self.fail('%s: a token longer than %d bytes at offset %d', what or 'a token', max, self.pos) end
  self.pos = self.pos + len
  return sub(self.buf, i, i + len - 1)
end

return M
