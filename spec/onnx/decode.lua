-- A small protobuf decoder for the specs: reads an ONNX file back into Lua
-- tables, independently of the encoder in oneflow.onnx.protobuf (field
-- numbers from onnx/onnx.proto).
local ffi = require 'ffi'

local D = {}

--- Decodes one message: field number -> list of raw values (numbers for
-- varints, strings for length-delimited and fixed fields).
function D.fields(s)
  local fields, pos, n = {}, 1, #s
  local function varint()
    local r, shift = ffi.new('uint64_t', 0), 0
    while true do
      if pos > n then error('protobuf: truncated varint') end
      local b = s:byte(pos)
      pos = pos + 1
      r = r + bit.lshift(ffi.cast('uint64_t', b % 128), shift)
      if b < 128 then break end
      shift = shift + 7
      if shift > 63 then error('protobuf: varint too long') end
    end
    return tonumber(ffi.cast('int64_t', r))
  end
  while pos <= n do
    local k = varint()
    local field, wire = math.floor(k / 8), k % 8
    local v
    if wire == 0 then v = varint()
    elseif wire == 1 then v = s:sub(pos, pos + 7); pos = pos + 8
    elseif wire == 2 then
      local len = varint()
      if pos + len - 1 > n then error('protobuf: truncated field ' .. field) end
      v = s:sub(pos, pos + len - 1)
      pos = pos + len
    elseif wire == 5 then v = s:sub(pos, pos + 3); pos = pos + 4
    else error(('protobuf: bad wire type %d for field %d'):format(wire, field)) end
    fields[field] = fields[field] or {}
    table.insert(fields[field], v)
  end
  return fields
end

--- A packed run of varints -> list of numbers.
function D.packed(s)
  local res = {}
  if s == nil then return res end
  local pos, n = 1, #s
  while pos <= n do
    local r, shift = ffi.new('uint64_t', 0), 0
    while true do
      local b = s:byte(pos)
      pos = pos + 1
      r = r + bit.lshift(ffi.cast('uint64_t', b % 128), shift)
      if b < 128 then break end
      shift = shift + 7
    end
    res[#res + 1] = tonumber(ffi.cast('int64_t', r))
  end
  return res
end

local function float_of(s)
  local buf = ffi.new('float[1]')
  ffi.copy(buf, s, 4)
  return buf[0]
end
D.float_of = float_of

local function first(f, k) return f[k] and f[k][1] end

local function ints_of(f, k)
  local res = {}
  for _, v in ipairs(f[k] or {}) do
    if type(v) == 'string' then
      for _, x in ipairs(D.packed(v)) do res[#res + 1] = x end
    else
      res[#res + 1] = v
    end
  end
  return res
end

function D.tensor(s)
  local f = D.fields(s)
  return {dims = ints_of(f, 1), data_type = first(f, 2), name = first(f, 8), raw = first(f, 9) or ''}
end

function D.attribute(s)
  local f = D.fields(s)
  local a = {name = first(f, 1), type = first(f, 20)}
  if f[2] then a.f = float_of(f[2][1]) end
  a.i = first(f, 3)
  a.s = first(f, 4)
  if f[5] then a.t = D.tensor(f[5][1]) end
  a.ints = ints_of(f, 8)
  local floats = {}
  for _, v in ipairs(f[7] or {}) do
    for i = 1, #v, 4 do floats[#floats + 1] = float_of(v:sub(i, i + 3)) end
  end
  a.floats = floats
  return a
end

function D.node(s)
  local f = D.fields(s)
  local n = {inputs = f[1] or {}, outputs = f[2] or {}, name = first(f, 3), op_type = first(f, 4),
             domain = first(f, 7) or '', attrs = {}}
  for _, a in ipairs(f[5] or {}) do
    local at = D.attribute(a)
    n.attrs[at.name] = at
  end
  return n
end

function D.value_info(s)
  local f = D.fields(s)
  local v = {name = first(f, 1)}
  local ty = D.fields(first(f, 2) or '')
  local tt = D.fields(first(ty, 1) or '')
  v.elem_type = first(tt, 1)
  if tt[2] then
    v.dims = {}
    for _, ds in ipairs(D.fields(tt[2][1])[1] or {}) do
      local df = D.fields(ds)
      v.dims[#v.dims + 1] = first(df, 2) or first(df, 1) or false
    end
  end
  return v
end

function D.graph(s)
  local f = D.fields(s)
  local g = {name = first(f, 2), nodes = {}, initializers = {}, inputs = {}, outputs = {}}
  for _, x in ipairs(f[1] or {}) do g.nodes[#g.nodes + 1] = D.node(x) end
  for _, x in ipairs(f[5] or {}) do g.initializers[#g.initializers + 1] = D.tensor(x) end
  for _, x in ipairs(f[11] or {}) do g.inputs[#g.inputs + 1] = D.value_info(x) end
  for _, x in ipairs(f[12] or {}) do g.outputs[#g.outputs + 1] = D.value_info(x) end
  return g
end

function D.model(s)
  local f = D.fields(s)
  local m = {ir_version = first(f, 1), producer_name = first(f, 2), producer_version = first(f, 3),
             opsets = {}}
  for _, o in ipairs(f[8] or {}) do
    local of = D.fields(o)
    m.opsets[#m.opsets + 1] = {domain = first(of, 1) or '', version = first(of, 2)}
  end
  m.graph = D.graph(first(f, 7) or '')
  return m
end

function D.read(path)
  local fh = assert(io.open(path, 'rb'))
  local s = fh:read('*a')
  fh:close()
  return D.model(s), s
end

--- Op types of a decoded graph, in order.
function D.op_types(g)
  local t = {}
  for i, n in ipairs(g.nodes) do t[i] = n.op_type end
  return t
end

--- Initializers by name.
function D.inits(g)
  local t = {}
  for _, x in ipairs(g.initializers) do t[x.name] = x end
  return t
end

return D
