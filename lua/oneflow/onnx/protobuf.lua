-- oneflow.onnx.protobuf: a small protobuf encoder (proto2 wire format) and
-- the ONNX messages the exporter writes.
--
-- Wire primitives work on a writer, a list of string pieces with their
-- total length, so a nested message is framed by appending its pieces
-- after a length prefix (large raw tensor data is never copied into a
-- bigger string until the file is written):
--   local w = pb.writer(); pb.uint(w, 1, 8); pb.bytes(w, 2, 'name')
--   pb.message(w, 7, child_writer); pb.tostring(w)
-- Repeated numeric fields are written packed (proto2 parsers accept both
-- forms). Field numbers are those of onnx/onnx.proto (see FIELDS).
--
-- ONNX messages are built from plain Lua tables:
--   tensor      {name =, data_type = ONNX enum, dims = {...}, raw = string}
--   attribute   {name =, type = 'f'|'i'|'s'|'t'|'g'|'floats'|'ints'|'strings', value =}
--   node        {op_type =, name =, domain =, inputs = {...}, outputs = {...},
--                attributes = {attribute...}}
--   value_info  {name =, elem_type =, dims = {n | 'param' | false...}}
--   graph       {name =, nodes =, initializers =, inputs =, outputs =, doc_string =}
--   model       {ir_version =, opsets = {{domain =, version =}}, producer_name =,
--                producer_version =, graph =, doc_string =}
-- pb.model(m) returns a writer; pb.write(w, file) or pb.tostring(w).
local ffi = require 'ffi'

local char, floor = string.char, math.floor

local M = {}

--- Field numbers of onnx.proto (proto2, package onnx).
M.FIELDS = {
  ModelProto = {ir_version = 1, producer_name = 2, producer_version = 3, domain = 4,
                model_version = 5, doc_string = 6, graph = 7, opset_import = 8,
                metadata_props = 14},
  OperatorSetIdProto = {domain = 1, version = 2},
  GraphProto = {node = 1, name = 2, initializer = 5, doc_string = 10, input = 11, output = 12,
                value_info = 13},
  NodeProto = {input = 1, output = 2, name = 3, op_type = 4, attribute = 5, doc_string = 6,
               domain = 7},
  AttributeProto = {name = 1, f = 2, i = 3, s = 4, t = 5, g = 6, floats = 7, ints = 8,
                    strings = 9, tensors = 10, doc_string = 13, type = 20},
  TensorProto = {dims = 1, data_type = 2, float_data = 4, int32_data = 5, int64_data = 7,
                 name = 8, raw_data = 9, doc_string = 12},
  ValueInfoProto = {name = 1, type = 2, doc_string = 3},
  TypeProto = {tensor_type = 1},
  TypeProtoTensor = {elem_type = 1, shape = 2},
  TensorShapeProto = {dim = 1},
  Dimension = {dim_value = 1, dim_param = 2},
  StringStringEntryProto = {key = 1, value = 2},
}
local FD = M.FIELDS

--- AttributeProto.AttributeType values.
M.ATTR_TYPE = {f = 1, i = 2, s = 3, t = 4, g = 5, floats = 6, ints = 7, strings = 8, tensors = 9}

--- TensorProto.DataType values for oneflow dtype names.
M.DATA_TYPE = {float32 = 1, uint8 = 2, int8 = 3, int32 = 6, int64 = 7, bool = 9, float16 = 10,
               float64 = 11, bfloat16 = 16, uint16 = 4, int16 = 5, uint32 = 12, uint64 = 13}

-- wire types
local VARINT, I64, LEN, I32 = 0, 1, 2, 5

------------------------------------------------------------------ varints
local u64 = ffi.typeof('uint64_t')
local i64 = ffi.typeof('int64_t')

--- The varint bytes of a non-negative integer (a Lua number up to 2^53, or
-- an int64/uint64 cdata); negative numbers are written as 64-bit two's
-- complement (10 bytes), as protobuf does for int64.
function M.varint(n)
  if type(n) == 'number' then
    if n ~= floor(n) then error(('protobuf: varint of a non-integer %s'):format(tostring(n)), 2) end
    if n >= 0 and n < 128 then return char(n) end
    if n >= 0 and n < 2 ^ 53 then
      local out, k = {}, 0
      while n >= 128 do
        k = k + 1
        out[k] = char(n % 128 + 128)
        n = floor(n / 128)
      end
      out[k + 1] = char(n)
      return table.concat(out)
    end
    if n >= 2 ^ 63 or n < -2 ^ 63 then
      error(('protobuf: integer %s does not fit in 64 bits'):format(tostring(n)), 2)
    end
    n = ffi.cast(u64, ffi.cast(i64, n))
  else
    n = ffi.cast(u64, n)
  end
  local out, k = {}, 0
  while n >= 128 do
    k = k + 1
    out[k] = char(tonumber(n % 128) + 128)
    n = n / 128
  end
  out[k + 1] = char(tonumber(n))
  return table.concat(out)
end
local varint = M.varint

local function key(field, wire)
  return varint(field * 8 + wire)
end

------------------------------------------------------------------ writer
--- A new, empty writer.
function M.writer() return {n = 0, len = 0} end

local function push(w, s)
  local n = w.n + 1
  w[n], w.n, w.len = s, n, w.len + #s
end
M.push = push

--- A varint field (uint/int32/int64/enum/bool). Skipped when v is nil.
function M.uint(w, field, v)
  if v == nil then return end
  if type(v) == 'boolean' then v = v and 1 or 0 end
  push(w, key(field, VARINT))
  push(w, varint(v))
end
M.int = M.uint

local f32 = ffi.new('float[1]')
local f64 = ffi.new('double[1]')

--- A float field (fixed32, little-endian IEEE 754).
function M.float(w, field, v)
  if v == nil then return end
  f32[0] = v
  push(w, key(field, I32))
  push(w, ffi.string(f32, 4))
end

--- A double field (fixed64).
function M.double(w, field, v)
  if v == nil then return end
  f64[0] = v
  push(w, key(field, I64))
  push(w, ffi.string(f64, 8))
end

--- A length-delimited string/bytes field. Skipped when s is nil.
function M.bytes(w, field, s)
  if s == nil then return end
  push(w, key(field, LEN))
  push(w, varint(#s))
  push(w, s)
end
M.string = M.bytes

--- An embedded message (child writer) as field `field`.
function M.message(w, field, child)
  push(w, key(field, LEN))
  push(w, varint(child.len))
  for i = 1, child.n do
    local s = child[i]
    local n = w.n + 1
    w[n], w.n = s, n
  end
  w.len = w.len + child.len
end

--- Packed repeated varints (int64 list). Nothing is written for an empty list.
function M.packed_varints(w, field, list)
  if list == nil or #list == 0 then return end
  local parts = {}
  for i = 1, #list do parts[i] = varint(list[i]) end
  local body = table.concat(parts)
  push(w, key(field, LEN))
  push(w, varint(#body))
  push(w, body)
end

--- Packed repeated floats (fixed32).
function M.packed_floats(w, field, list)
  if list == nil or #list == 0 then return end
  local n = #list
  local buf = ffi.new('float[?]', n)
  for i = 1, n do buf[i - 1] = list[i] end
  push(w, key(field, LEN))
  push(w, varint(4 * n))
  push(w, ffi.string(buf, 4 * n))
end

--- The writer's bytes as one Lua string.
function M.tostring(w)
  return table.concat(w, '', 1, w.n)
end

--- Writes the pieces with fn(piece) (e.g. a file writer).
function M.each(w, fn)
  for i = 1, w.n do fn(w[i]) end
end

------------------------------------------------------------------ ONNX messages
-- raw_data must be little-endian; the exporter copies tensor bytes as they
-- are in memory and refuses big-endian hosts.
M.little_endian = ffi.abi('le')

--- TensorProto.
function M.tensor(t)
  local F, w = FD.TensorProto, M.writer()
  M.packed_varints(w, F.dims, t.dims)
  M.uint(w, F.data_type, t.data_type)
  M.string(w, F.name, t.name)
  M.bytes(w, F.raw_data, t.raw or '')
  M.string(w, F.doc_string, t.doc_string)
  return w
end

--- AttributeProto.
function M.attribute(a)
  local F, w = FD.AttributeProto, M.writer()
  local ty = M.ATTR_TYPE[a.type]
  if not ty then error(('protobuf: unknown attribute type %s for %s'):format(tostring(a.type), a.name), 2) end
  M.string(w, F.name, a.name)
  local v = a.value
  if a.type == 'f' then M.float(w, F.f, v)
  elseif a.type == 'i' then M.int(w, F.i, v)
  elseif a.type == 's' then M.bytes(w, F.s, v)
  elseif a.type == 't' then M.message(w, F.t, M.tensor(v))
  elseif a.type == 'g' then M.message(w, F.g, M.graph(v))
  elseif a.type == 'floats' then M.packed_floats(w, F.floats, v)
  elseif a.type == 'ints' then M.packed_varints(w, F.ints, v)
  elseif a.type == 'strings' then
    for _, s in ipairs(v) do M.bytes(w, F.strings, s) end
  else
    error('protobuf: attribute type ' .. a.type .. ' is not supported', 2)
  end
  M.uint(w, F.type, ty)
  return w
end

--- NodeProto.
function M.node(n)
  local F, w = FD.NodeProto, M.writer()
  for _, s in ipairs(n.inputs) do M.string(w, F.input, s) end
  for _, s in ipairs(n.outputs) do M.string(w, F.output, s) end
  M.string(w, F.name, n.name)
  M.string(w, F.op_type, n.op_type)
  for _, a in ipairs(n.attributes or {}) do M.message(w, F.attribute, M.attribute(a)) end
  M.string(w, F.doc_string, n.doc_string)
  if n.domain and n.domain ~= '' then M.string(w, F.domain, n.domain) end
  return w
end

--- ValueInfoProto of a tensor: dims entries are numbers (dim_value),
-- strings (dim_param) or false (unknown); dims = nil leaves the shape out.
function M.value_info(v)
  local w = M.writer()
  M.string(w, FD.ValueInfoProto.name, v.name)
  local tt = M.writer()
  M.uint(tt, FD.TypeProtoTensor.elem_type, v.elem_type)
  if v.dims then
    local shape = M.writer()
    for _, d in ipairs(v.dims) do
      local dim = M.writer()
      if type(d) == 'number' then M.int(dim, FD.Dimension.dim_value, d)
      elseif type(d) == 'string' then M.string(dim, FD.Dimension.dim_param, d) end
      M.message(shape, FD.TensorShapeProto.dim, dim)
    end
    M.message(tt, FD.TypeProtoTensor.shape, shape)
  end
  local ty = M.writer()
  M.message(ty, FD.TypeProto.tensor_type, tt)
  M.message(w, FD.ValueInfoProto.type, ty)
  M.string(w, FD.ValueInfoProto.doc_string, v.doc_string)
  return w
end

--- GraphProto.
function M.graph(g)
  local F, w = FD.GraphProto, M.writer()
  for _, n in ipairs(g.nodes) do M.message(w, F.node, M.node(n)) end
  M.string(w, F.name, g.name or 'graph')
  for _, t in ipairs(g.initializers or {}) do M.message(w, F.initializer, M.tensor(t)) end
  M.string(w, F.doc_string, g.doc_string)
  for _, v in ipairs(g.inputs) do M.message(w, F.input, M.value_info(v)) end
  for _, v in ipairs(g.outputs) do M.message(w, F.output, M.value_info(v)) end
  for _, v in ipairs(g.value_info or {}) do M.message(w, F.value_info, M.value_info(v)) end
  return w
end

--- ModelProto.
function M.model(m)
  local F, w = FD.ModelProto, M.writer()
  M.int(w, F.ir_version, m.ir_version)
  M.string(w, F.producer_name, m.producer_name)
  M.string(w, F.producer_version, m.producer_version)
  M.string(w, F.domain, m.domain)
  M.int(w, F.model_version, m.model_version)
  M.string(w, F.doc_string, m.doc_string)
  M.message(w, F.graph, M.graph(m.graph))
  for _, o in ipairs(m.opsets) do
    local ow = M.writer()
    if o.domain and o.domain ~= '' then M.string(ow, FD.OperatorSetIdProto.domain, o.domain) end
    M.int(ow, FD.OperatorSetIdProto.version, o.version)
    M.message(w, F.opset_import, ow)
  end
  for _, kv in ipairs(m.metadata or {}) do
    local e = M.writer()
    M.string(e, FD.StringStringEntryProto.key, kv[1])
    M.string(e, FD.StringStringEntryProto.value, kv[2])
    M.message(w, F.metadata_props, e)
  end
  return w
end

return M
