-- oneflow.io.zip: a small ZIP reader and writer for checkpoint archives
-- (PyTorch's torch.save format), over oneflow.io.bytes sources.
--
-- Reading: the end-of-central-directory record is searched in the last
-- 64 KiB + 22 bytes; a ZIP64 locator before it, when present, is followed
-- to the ZIP64 record (torch writes one even for small files). Every count,
-- offset and size is checked against the file size before it is used: the
-- central directory must lie inside the file and before the end record,
-- each entry's local header and data must lie before the central
-- directory, names are unique, encrypted and multi-disk archives are
-- refused. Entries are stored or deflated (method 8, inflated by zlib through
-- the FFI with a bound on the ratio, so a small entry cannot claim a huge
-- size); the CRC-32 of every entry read is checked.
--
-- Writing: stored entries, each local header padded with an extra field
-- (id 0x4246, as PyTorch's writer does) so that data starts on a 64-byte
-- boundary, ZIP64 fields when a size or offset needs them (or when forced),
-- and always a ZIP64 end record + locator, like torch.save.
--
--   zip.read_directory(src, fail) -> {list = {entry...}, by_name = {}}
--       entry: name, method, crc, csize, usize, local_offset
--   zip.read_entry_string(src, entry, fail) -> string
--   zip.read_entry_into(src, entry, ptr, fail)  (entry.usize bytes)
--   zip.writer(sink) -> w; w:add(name, data, size) (data a string or a
--       pointer + size); w:finish(). sink(ptr_or_string, n) writes bytes.
--   zip.build(entries, opts) -> string  ({{name, string}...}; for tests)
--   zip.crc32(ptr_or_string, n[, crc])
local A = require 'oneflow._args'
local ffi = require 'ffi'
local bytes = require 'oneflow.io.bytes'

local format = string.format
local M = {}

M.MAX_ENTRIES = 1000000
M.MAX_RATIO = 1100      -- deflate cannot expand data by more than ~1032:1
M.CRC_SLICE = 64 * 1024   -- stored entries are read and CRC-checked in slices this size

------------------------------------------------------------------ zlib
ffi.cdef [[
typedef struct of_io_z_stream {
  const uint8_t *next_in; unsigned int avail_in; unsigned long total_in;
  uint8_t *next_out; unsigned int avail_out; unsigned long total_out;
  const char *msg; void *state;
  void *zalloc; void *zfree; void *opaque;
  int data_type; unsigned long adler; unsigned long reserved;
} of_io_z_stream;
]]
for _, d in ipairs({
  'const char *zlibVersion(void);',
  'int inflateInit2_(void *strm, int windowBits, const char *version, int stream_size);',
  'int inflate(void *strm, int flush);',
  'int inflateEnd(void *strm);',
  'unsigned long crc32(unsigned long crc, const uint8_t *buf, unsigned int len);',
}) do pcall(ffi.cdef, d) end

local zlib
local function Z()
  if not zlib then
    local ok, lib = pcall(ffi.load, 'libz.so.1')
    if not ok then ok, lib = pcall(ffi.load, 'z') end
    if not ok then error('cannot load zlib (libz.so.1): ' .. tostring(lib), 0) end
    zlib = lib
  end
  return zlib
end

local CHUNK = 1024 * 1024 * 1024

--- CRC-32 of a string, or of n bytes at a pointer.
function M.crc32(data, n, crc)
  local z = Z()
  local p
  if type(data) == 'string' then
    p, n = ffi.cast('const uint8_t *', data), n or #data
  else
    p = ffi.cast('const uint8_t *', data)
  end
  crc = crc or 0
  local off = 0
  while off < n do
    local len = math.min(CHUNK, n - off)
    crc = z.crc32(crc, p + off, len)
    off = off + len
  end
  return tonumber(crc)
end

-- Inflates raw deflate data (src, slen) into exactly dlen bytes at dst;
-- returns nil or an error message. inflateEnd always runs.
local function inflate_raw(src, slen, dst, dlen)
  local z = Z()
  local zs = ffi.new('of_io_z_stream')
  if z.inflateInit2_(zs, -15, z.zlibVersion(), ffi.sizeof('of_io_z_stream')) ~= 0 then
    return 'zlib cannot start inflating'
  end
  local sp, dp = ffi.cast('const uint8_t *', src), ffi.cast('uint8_t *', dst)
  local in_off, out_off, err = 0, 0, nil
  while true do
    if zs.avail_in == 0 and in_off < slen then
      local n = math.min(CHUNK, slen - in_off)
      zs.next_in, zs.avail_in = sp + in_off, n
      in_off = in_off + n
    end
    if zs.avail_out == 0 and out_off < dlen then
      local n = math.min(CHUNK, dlen - out_off)
      zs.next_out, zs.avail_out = dp + out_off, n
      out_off = out_off + n
    end
    local rc = z.inflate(zs, 0)
    if rc == 1 then   -- Z_STREAM_END
      if tonumber(zs.total_out) ~= dlen then
        err = format('deflate data inflates to %d bytes, the directory says %d', tonumber(zs.total_out), dlen)
      end
      break
    elseif rc ~= 0 then
      if rc == -5 and zs.avail_out == 0 and out_off >= dlen then   -- Z_BUF_ERROR: output full
        err = format('deflate data inflates to more than the %d bytes the directory says', dlen)
      elseif rc == -5 then
        err = 'deflate data ends early (truncated entry)'
      else
        local msg = zs.msg ~= nil and ffi.string(zs.msg) or ('zlib error ' .. rc)
        err = 'corrupt deflate data (' .. msg .. ')'
      end
      break
    end
  end
  z.inflateEnd(zs)
  return err
end

------------------------------------------------------------------ reading
local SIG_LOCAL, SIG_CENTRAL, SIG_END, SIG_END64, SIG_LOC64 =
  0x04034b50, 0x02014b50, 0x06054b50, 0x06064b50, 0x07064b50

local function find_end(src, fail)
  local size = src.size
  if size < 22 then fail('not a zip archive: %d bytes is too short for the end record', size) end
  local from = math.max(0, size - 22 - 65535)
  local tail = src:sub(from, size - from)
  -- the last "PK\5\6" whose comment length reaches exactly the end (or
  -- failing that, any that fits)
  local best
  local i = #tail - 21
  while i >= 1 do
    if tail:byte(i) == 0x50 and tail:byte(i + 1) == 0x4b and tail:byte(i + 2) == 5 and tail:byte(i + 3) == 6 then
      local clen = tail:byte(i + 20) + tail:byte(i + 21) * 256
      if i + 21 + clen == #tail then return from + i - 1 end
      if not best and i + 21 + clen <= #tail then best = from + i - 1 end
    end
    i = i - 1
  end
  if best then return best end
  fail('not a zip archive (no end-of-central-directory record; truncated file?)')
end

--- Reads and checks the central directory.
function M.read_directory(src, fail)
  local size = src.size
  local eocd = find_end(src, fail)
  local r = bytes.reader(src, eocd, size, fail)
  r:u32()
  local disk, cd_disk = r:u16('end record'), r:u16('end record')
  local n_disk, n_total = r:u16('end record'), r:u16('end record')
  local cd_size, cd_off = r:u32('end record'), r:u32('end record')
  local dir_end = eocd
  if eocd >= 20 then
    local lr = bytes.reader(src, eocd - 20, eocd, fail)
    if lr:u32() == SIG_LOC64 then
      local d64 = lr:u32('zip64 locator')
      local off64 = lr:u64('zip64 locator')
      if d64 ~= 0 then fail('multi-disk zip archives are not supported') end
      if off64 > eocd - 20 - 56 then
        fail('zip64 end record offset %.0f is outside the file (%d bytes)', off64, size)
      end
      local zr = bytes.reader(src, off64, eocd - 20, fail)
      if zr:u32('zip64 end record') ~= SIG_END64 then fail('bad zip64 end record signature at offset %.0f', off64) end
      zr:u64('zip64 end record')          -- record size
      zr:u16('zip64 end record'); zr:u16('zip64 end record')
      disk, cd_disk = zr:u32('zip64 end record'), zr:u32('zip64 end record')
      n_disk, n_total = zr:u64('zip64 end record'), zr:u64('zip64 end record')
      cd_size, cd_off = zr:u64('zip64 end record'), zr:u64('zip64 end record')
      dir_end = off64
    elseif n_total == 0xFFFF or cd_size == 0xFFFFFFFF or cd_off == 0xFFFFFFFF then
      fail('zip64 archive without a zip64 locator (truncated or corrupt)')
    end
  end
  if disk ~= 0 or cd_disk ~= 0 or n_disk ~= n_total then fail('multi-disk zip archives are not supported') end
  if n_total > M.MAX_ENTRIES then fail('zip directory claims %.0f entries (limit %d)', n_total, M.MAX_ENTRIES) end
  if cd_off > dir_end or cd_size > dir_end - cd_off then
    fail('zip central directory (offset %.0f, %.0f bytes) is outside the file (%d bytes; truncated?)',
         cd_off, cd_size, size)
  end
  if n_total * 46 > cd_size then
    fail('zip central directory of %.0f bytes cannot hold %.0f entries', cd_size, n_total)
  end
  local dr = bytes.reader(src, cd_off, cd_off + cd_size, fail)
  local list, by_name = {}, {}
  for k = 1, n_total do
    local at = dr.pos
    if dr:u32('central directory') ~= SIG_CENTRAL then
      fail('bad zip central directory entry %d (signature at offset %d)', k, at)
    end
    dr:u16('central directory'); dr:u16('central directory')
    local flags, method = dr:u16('central directory'), dr:u16('central directory')
    dr:u16('central directory'); dr:u16('central directory')
    local crc = dr:u32('central directory')
    local csize, usize = dr:u32('central directory'), dr:u32('central directory')
    local nlen, xlen, clen = dr:u16('central directory'), dr:u16('central directory'), dr:u16('central directory')
    local dstart = dr:u16('central directory')
    dr:u16('central directory'); dr:u32('central directory')
    local loff = dr:u32('central directory')
    local name = dr:bytes(nlen, 'entry name')
    local xend = dr.pos + xlen
    if xlen > dr:left() then fail('zip entry %q: extra field runs past the central directory', name) end
    while dr.pos + 4 <= xend do
      local id, len = dr:u16(), dr:u16()
      if len > xend - dr.pos then fail('zip entry %q: extra field runs past its end', name) end
      local fend = dr.pos + len
      if id == 1 then
        local function take(what)
          if dr.pos + 8 > fend then fail('zip entry %q: zip64 field lacks the %s', name, what) end
          return dr:u64()
        end
        if usize == 0xFFFFFFFF then usize = take('size') end
        if csize == 0xFFFFFFFF then csize = take('compressed size') end
        if loff == 0xFFFFFFFF then loff = take('offset') end
      end
      dr.pos = fend
    end
    dr.pos = xend
    dr:bytes(clen, 'entry comment')
    if dstart ~= 0 and dstart ~= 0xFFFF then fail('multi-disk zip archives are not supported') end
    if bit.band(flags, 1) ~= 0 then fail('zip entry %q is encrypted', name) end
    if method ~= 0 and method ~= 8 then
      fail('zip entry %q uses compression method %d (only stored and deflate are supported)', name, method)
    end
    if loff >= cd_off or csize > cd_off - loff then
      fail('zip entry %q (offset %.0f, %.0f bytes) is outside the archive data (%.0f bytes; truncated?)',
           name, loff, csize, cd_off)
    end
    if method == 0 and csize ~= usize then
      fail('zip entry %q is stored but its sizes differ (%.0f vs %.0f)', name, csize, usize)
    end
    if method == 8 and usize > csize * M.MAX_RATIO + 1024 then
      fail('zip entry %q claims to inflate %.0f bytes to %.0f (a zip bomb?)', name, csize, usize)
    end
    if by_name[name] then fail('zip archive has two entries named %q', name) end
    local e = {name = name, method = method, crc = crc, csize = csize, usize = usize,
               local_offset = loff, limit = cd_off}
    list[#list + 1] = e
    by_name[name] = e
  end
  return {list = list, by_name = by_name}
end

local function data_offset(src, e, fail)
  if e.data_offset then return e.data_offset end
  -- read ahead only the header and the name (not a whole window per entry)
  local r = bytes.reader(src, e.local_offset, e.limit, fail, 30 + #e.name)
  if r:u32('local header') ~= SIG_LOCAL then
    fail('zip entry %q: bad local header signature at offset %.0f', e.name, e.local_offset)
  end
  r.pos = r.pos + 22
  local nlen, xlen = r:u16('local header'), r:u16('local header')
  local start = e.local_offset + 30 + nlen + xlen
  if start > e.limit or e.csize > e.limit - start then
    fail('zip entry %q: data (offset %.0f, %.0f bytes) runs into the central directory (truncated?)',
         e.name, start, e.csize)
  end
  local lname = r:bytes(nlen, 'local header name')
  if lname ~= e.name then fail('zip entry %q: local header names it %q', e.name, lname) end
  e.data_offset = start
  return start
end

--- Reads an entry's uncompressed bytes into C memory (entry.usize bytes);
-- the CRC-32 is checked unless no_crc (stored entries only: inflated data
-- is always checked).
function M.read_entry_into(src, e, ptr, fail, no_crc)
  local off = data_offset(src, e, fail)
  if e.method == 0 then
    if no_crc then return src:copy(off, e.usize, ptr) end
    -- read and check in slices, so that each slice is summed while it is
    -- still in the cache
    local dst, n, crc, done = ffi.cast('uint8_t *', ptr), e.usize, 0, 0
    while done < n do
      local len = math.min(M.CRC_SLICE, n - done)
      src:copy(off + done, len, dst + done)
      crc = M.crc32(dst + done, len, crc)
      done = done + len
    end
    if crc ~= e.crc then
      fail('zip entry %q: CRC-32 mismatch (%08x, the directory says %08x): the data is corrupt', e.name, crc, e.crc)
    end
    return
  else
    local cbuf = ffi.new('uint8_t[?]', math.max(e.csize, 1))
    src:copy(off, e.csize, cbuf)
    local err = inflate_raw(cbuf, e.csize, ptr, e.usize)
    if err then fail('zip entry %q: %s', e.name, err) end
  end
  local crc = M.crc32(ptr, e.usize)
  if crc ~= e.crc then
    fail('zip entry %q: CRC-32 mismatch (%08x, the directory says %08x): the data is corrupt', e.name, crc, e.crc)
  end
end

--- An entry's uncompressed bytes as a Lua string.
function M.read_entry_string(src, e, fail)
  if e.method == 0 then
    local s = src:sub(data_offset(src, e, fail), e.usize)
    if M.crc32(s) ~= e.crc then
      fail('zip entry %q: CRC-32 mismatch: the data is corrupt', e.name)
    end
    return s
  end
  local buf = ffi.new('uint8_t[?]', math.max(e.usize, 1))
  M.read_entry_into(src, e, buf, fail)
  return ffi.string(buf, e.usize)
end

------------------------------------------------------------------ writing
local function le(n, width)
  local b = {}
  for i = 1, width do
    b[i] = string.char(n % 256)
    n = math.floor(n / 256)
  end
  return table.concat(b)
end
M.le = le

local Writer = {}
Writer.__index = Writer
local DOS_DATE = 0x21   -- 1980-01-01
local BIG = 0xFFFFFFFF

--- A ZIP writer over sink(data, n): data is a string or a pointer.
function M.writer(sink, opts)
  opts = A.check_options('zip.writer', opts, {align = true, force_zip64 = true})
  return setmetatable({sink = sink, offset = 0, entries = {}, force64 = opts.force_zip64,
                       align = opts.align or 64}, Writer)
end

local function put(w, data, n)
  n = n or #data
  if n > 0 then w.sink(data, n) end
  w.offset = w.offset + n
end

--- Adds a stored entry: data is a string, or a pointer with size bytes.
function Writer:add(name, data, size)
  size = size or #data
  local crc = M.crc32(data, size)
  local off = self.offset
  local z64 = self.force64 or size >= BIG or off >= BIG
  local x64 = z64 and (le(1, 2) .. le(16, 2) .. le(size, 8) .. le(size, 8)) or ''
  local base = off + 30 + #name + #x64 + 4
  local pad = (self.align - base % self.align) % self.align
  local extra = x64 .. le(0x4246, 2) .. le(pad, 2) .. string.rep('Z', pad)
  local hsize = z64 and BIG or size
  put(self, le(SIG_LOCAL, 4) .. le(z64 and 45 or 20, 2) .. le(0, 2) .. le(0, 2) .. le(0, 2) .. le(DOS_DATE, 2)
        .. le(crc, 4) .. le(hsize, 4) .. le(hsize, 4) .. le(#name, 2) .. le(#extra, 2) .. name .. extra)
  put(self, data, size)
  self.entries[#self.entries + 1] = {name = name, crc = crc, size = size, offset = off, z64 = z64}
end

function Writer:finish()
  local cd_off = self.offset
  for _, e in ipairs(self.entries) do
    local z64 = e.z64 or self.force64
    local extra, hsize, hoff = '', e.size, e.offset
    if z64 or e.size >= BIG or e.offset >= BIG then
      extra = le(1, 2) .. le(24, 2) .. le(e.size, 8) .. le(e.size, 8) .. le(e.offset, 8)
      hsize, hoff = BIG, BIG
    end
    put(self, le(SIG_CENTRAL, 4) .. le(45, 2) .. le(extra ~= '' and 45 or 20, 2) .. le(0, 2) .. le(0, 2)
          .. le(0, 2) .. le(DOS_DATE, 2) .. le(e.crc, 4) .. le(hsize, 4) .. le(hsize, 4) .. le(#e.name, 2)
          .. le(#extra, 2) .. le(0, 2) .. le(0, 2) .. le(0, 2) .. le(0, 4) .. le(hoff, 4) .. e.name .. extra)
  end
  local cd_size = self.offset - cd_off
  local end64 = self.offset
  local n = #self.entries
  put(self, le(SIG_END64, 4) .. le(44, 8) .. le(45, 2) .. le(45, 2) .. le(0, 4) .. le(0, 4) .. le(n, 8)
        .. le(n, 8) .. le(cd_size, 8) .. le(cd_off, 8))
  put(self, le(SIG_LOC64, 4) .. le(0, 4) .. le(end64, 8) .. le(1, 4))
  local force = self.force64
  put(self, le(SIG_END, 4) .. le(0, 2) .. le(0, 2) .. le((force or n >= 0xFFFF) and 0xFFFF or n, 2)
        .. le((force or n >= 0xFFFF) and 0xFFFF or n, 2)
        .. le((force or cd_size >= BIG) and BIG or cd_size, 4)
        .. le((force or cd_off >= BIG) and BIG or cd_off, 4) .. le(0, 2))
end

--- A whole archive as a string, from {{name, bytes}...} (for tests).
function M.build(entries, opts)
  local parts = {}
  local w = M.writer(function(data, n)
    if type(data) == 'string' then parts[#parts + 1] = data
    else parts[#parts + 1] = ffi.string(data, n) end
  end, opts)
  for _, e in ipairs(entries) do w:add(e[1], e[2]) end
  w:finish()
  return table.concat(parts)
end

return M
