-- ir_edits.lua -- the fields of a saved graph's IR record and the edits an
-- attacker would make to them (spec/graph/edit_spec.lua). The layout is the
-- one core/graph/io.c writes (format 3):
--   "OFGRAPH\0" u32 version u32 endian u64 payload_len u64 fnv1a64(payload)
--   payload: u32 nvals nnodes ninputs noutputs nexternals, i32 device
--     value: u8 kind u8 is_const i32 dtype device ndim root same ext_index
--            i64 shape[8] strides[8] offset, u16 name_len, name
--     i32 inputs[ninputs] outputs[noutputs]
--     node:  u16 name_len, op name, i32 attr_size, attrs,
--            i32 nin nout nreal nmut flags, u32 needs keep_in keep_out,
--            i32 handle_nr, i32 in[nin] out[nout] mut[nmut]
-- An edit sets one field and recomputes the checksum, as a crafted file
-- would: the checksum only catches accidents.
local ffi = require 'ffi'
local bit = require 'bit'

local M = {}

local function u32(s, p) return ffi.cast('const uint32_t *', ffi.cast('const char *', s) + p)[0] end
local function i32(s, p) return ffi.cast('const int32_t *', ffi.cast('const char *', s) + p)[0] end
local function u16(s, p) return ffi.cast('const uint16_t *', ffi.cast('const char *', s) + p)[0] end

local function fnv(s, a, b)   -- FNV-1a over bytes a..b (1-based, inclusive)
  local h = 1469598103934665603ULL
  for i = a, b do h = bit.bxor(h, s:byte(i)) * 1099511628211ULL end
  return h
end

local function bytes_of(ctype, v)
  local b = ffi.new(ctype .. '[1]', v)
  return ffi.string(b, ffi.sizeof(ctype))
end

--- M.parse(file): the graph record's place in the file and its fields:
-- {at = offset of the magic (0-based), plen, fields = {{off, ctype, what,
-- node = i or nil, value = v or nil, layout = true when the field sizes what
-- follows}}}.
function M.parse(file)
  local at = file:find('OFGRAPH\0', 1, true)
  assert(at, 'no graph record')
  at = at - 1
  local plen = tonumber(ffi.cast('const uint64_t *', ffi.cast('const char *', file) + at + 16)[0])
  local p = at + 32
  local fields, seen_op = {}, {}
  local function field(off, ctype, what, extra)
    local f = {off = off, ctype = ctype, what = what}
    for k, v in pairs(extra or {}) do f[k] = v end
    fields[#fields + 1] = f
  end
  local nvals, nnodes, nin, nout = u32(file, p), u32(file, p + 4), u32(file, p + 8), u32(file, p + 12)
  field(p, 'uint32_t', 'nvals', {layout = true})
  field(p + 4, 'uint32_t', 'nnodes', {layout = true})
  field(p + 8, 'uint32_t', 'ninputs', {layout = true})
  field(p + 12, 'uint32_t', 'noutputs', {layout = true})
  field(p + 16, 'uint32_t', 'nexternals')
  field(p + 20, 'int32_t', 'device')
  p = p + 24
  for v = 0, nvals - 1 do
    local ex = {value = v}
    -- the fields every value is checked for; the rarer ones on a few values
    local all = v < 8
    field(p, 'uint8_t', 'kind', ex)
    field(p + 2, 'int32_t', 'dtype', ex)
    if all then field(p + 6, 'int32_t', 'device', ex) end
    field(p + 10, 'int32_t', 'ndim', ex)
    field(p + 14, 'int32_t', 'root', ex)
    field(p + 18, 'int32_t', 'same', ex)
    field(p + 22, 'int32_t', 'ext_index', ex)
    local ndim = i32(file, p + 10)
    for d = 0, math.min(ndim, 8) - 1 do
      if all or d == 0 then field(p + 26 + 8 * d, 'int64_t', 'shape', ex) end
    end
    if ndim > 0 and all then field(p + 26 + 64, 'int64_t', 'strides', ex) end
    if all then field(p + 26 + 128, 'int64_t', 'offset', ex) end
    p = p + 26 + 136
    local ln = u16(file, p)
    if all then field(p, 'uint16_t', 'name_len', {value = v, layout = true}) end
    p = p + 2 + ln
  end
  for i = 0, nin - 1 do field(p + 4 * i, 'int32_t', 'input', {io = i}) end
  p = p + 4 * nin
  for i = 0, nout - 1 do field(p + 4 * i, 'int32_t', 'output', {io = i}) end
  p = p + 4 * nout
  for n = 0, nnodes - 1 do
    local ln = u16(file, p)
    local op = file:sub(p + 3, p + 2 + ln)
    local ex = {node = n, op = op}
    field(p, 'uint16_t', 'op name length', {node = n, op = op, layout = true})
    p = p + 2 + ln
    local asz = i32(file, p)
    field(p, 'int32_t', 'attr_size', {node = n, op = op, layout = true})
    p = p + 4
    -- an op's attribute words are edited at its first node only (the same
    -- record layout again adds time, not coverage)
    if not seen_op[op] then
      seen_op[op] = true
      for w = 0, asz / 4 - 1 do field(p + 4 * w, 'int32_t', 'attrs', ex) end
    end
    p = p + asz
    local ni, no, nm = i32(file, p), i32(file, p + 4), i32(file, p + 12)
    local lay = {node = n, op = op, layout = true}
    field(p, 'int32_t', 'nin', lay)
    field(p + 4, 'int32_t', 'nout', lay)
    field(p + 8, 'int32_t', 'nreal', ex)
    field(p + 12, 'int32_t', 'nmut', lay)
    field(p + 16, 'int32_t', 'flags', ex)
    field(p + 20, 'uint32_t', 'needs', ex)
    field(p + 24, 'uint32_t', 'keep_in', ex)
    field(p + 28, 'uint32_t', 'keep_out', ex)
    field(p + 32, 'int32_t', 'handle_nr', ex)
    p = p + 36
    for k = 0, ni - 1 do field(p + 4 * k, 'int32_t', 'in', ex) end
    p = p + 4 * ni
    for j = 0, no - 1 do field(p + 4 * j, 'int32_t', 'out', ex) end
    p = p + 4 * no
    for m = 0, nm - 1 do field(p + 4 * m, 'int32_t', 'mut', ex) end
    p = p + 4 * nm
  end
  assert(p == at + 32 + plen, 'the record layout was not followed to its end')
  return {at = at, plen = plen, nvals = nvals, fields = fields}
end

-- the values an attacker tries: absent, -1, huge, just out of range
local function candidates(f, nvals)
  local w = f.what
  if f.ctype == 'uint8_t' then return {255} end
  if f.ctype == 'uint16_t' then return {0, 65535} end
  if w == 'shape' then return {-1LL, 0x10000000001LL} end
  if f.ctype == 'int64_t' then return {-1LL, 0x4000000000000000LL} end
  if w == 'attrs' then return {-1, 0x7fffffff, 0x40000000} end
  if w == 'in' or w == 'out' or w == 'input' or w == 'output' or w == 'root' or w == 'same' then
    return {-1, nvals, nvals - 1}
  end
  if f.value then return {-1, 0x7fffffff} end
  return {-1, 0x7fffffff, 65}
end

--- M.edits(file): every single-field edit, in a fixed order: {field, value}.
function M.edits(file)
  local rec = M.parse(file)
  local list = {}
  for _, f in ipairs(rec.fields) do
    for _, v in ipairs(candidates(f, rec.nvals)) do list[#list + 1] = {f = f, v = v} end
  end
  return list, rec
end

--- M.apply(file, rec, edit): the file with the edit made and the checksum
-- recomputed (nil when the edit leaves the field as it was).
function M.apply(file, rec, e)
  local f = e.f
  local new = bytes_of(f.ctype, e.v)
  local old = file:sub(f.off + 1, f.off + #new)
  if new == old then return nil end
  local s = file:sub(1, f.off) .. new .. file:sub(f.off + #new + 1)
  local p0 = rec.at + 32
  local sum = bytes_of('uint64_t', fnv(s, p0 + 1, p0 + rec.plen))
  return s:sub(1, rec.at + 24) .. sum .. s:sub(rec.at + 33)
end

--- M.describe(edit): "node 3 (conv) nin = -1" and the like.
function M.describe(e)
  local f = e.f
  local where = f.node and ('node %d (%s) '):format(f.node + 1, f.op)
    or f.value and ('value %d '):format(f.value) or f.io and ('%s %d '):format(f.what, f.io + 1)
    or ''
  return ('%s%s @%d = %s'):format(where, f.what, f.off, tostring(e.v))
end

return M
