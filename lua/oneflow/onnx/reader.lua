-- oneflow.onnx.reader: a small, bounded protobuf decoder (proto2 wire
-- format) and the ONNX messages the importer reads, beside the encoder in
-- oneflow.onnx.protobuf (same field numbers, onnx/onnx.proto).
--
-- The input is a Lua string; it is read through a byte pointer, and every
-- varint, length and fixed-width field is checked against the end of the
-- message it belongs to before it is read, so a truncated or corrupt file
-- gives a Lua error ('onnx: corrupt protobuf: ...') and never reads out of
-- bounds. Nesting (subgraphs in attributes, nested types) is bounded by
-- MAX_DEPTH. Messages decode to plain tables:
--   model       {ir_version, producer_name, producer_version, domain, model_version,
--                doc_string, opsets = {{domain =, version =}}, graph, metadata = {k = v},
--                functions = n}
--   graph       {name, nodes, initializers, inputs, outputs, value_info, sparse_initializers = n}
--   node        {op_type, name, domain, inputs, outputs, attrs = {name -> attribute}, attr_list}
--   attribute   {name, type, f, i, s, t, g, floats, ints, strings, tensors, graphs, ref_attr_name}
--   tensor      {name, dims, data_type, raw | float_data | int32_data | int64_data |
--                double_data | uint64_data | string_data, external_data = {k = v}, data_location}
--   value_info  {name, elem_type, dims = {n | 'param' | false ...} | nil, kind = 'tensor' | ...}
local ffi = require 'ffi'

local floor = math.floor

local M = {}

M.MAX_DEPTH = 64

local function corrupt(msg, ...)
  error('onnx: corrupt protobuf: ' .. msg:format(...), 0)
end

local u64 = ffi.typeof('uint64_t')
local i64 = ffi.typeof('int64_t')
local bytep = ffi.typeof('const uint8_t *')

-- A cursor over s[a, b) (0-based offsets into the byte pointer p).
-- Returns the varint at pos and the position after it. Up to 7 bytes (49
-- bits) are summed as doubles; longer ones go through uint64 and come back
-- as a signed int64 (protobuf writes negative int64 as 10 bytes).
local function varint(p, pos, stop)
  local r, mul = 0, 1
  for k = 0, 6 do
    if pos >= stop then corrupt('truncated varint at byte %d', pos) end
    local b = p[pos]
    pos = pos + 1
    if b < 128 then return r + b * mul, pos end
    r = r + (b - 128) * mul
    mul = mul * 128
    if k == 6 then break end
  end
  local v = ffi.new(u64, r)
  local shift = 49
  while true do
    if pos >= stop then corrupt('truncated varint at byte %d', pos) end
    local b = p[pos]
    pos = pos + 1
    if shift >= 64 then corrupt('varint longer than 10 bytes at byte %d', pos - 1) end
    v = v + bit.lshift(ffi.new(u64, b % 128), shift)
    if b < 128 then break end
    shift = shift + 7
  end
  return tonumber(ffi.cast(i64, v)), pos
end

-- Calls fn(field, wire, value_or_start, stop) for each field of p[a, b):
-- varint: value; fixed64/fixed32: start offset; length-delimited: start, stop.
local function each_field(p, a, b, fn)
  local pos = a
  while pos < b do
    local k
    k, pos = varint(p, pos, b)
    if k < 0 then corrupt('negative field key at byte %d', pos) end
    local field, wire = floor(k / 8), k % 8
    if field == 0 then corrupt('field number 0 at byte %d', pos) end
    if wire == 0 then
      local v
      v, pos = varint(p, pos, b)
      fn(field, 0, v)
    elseif wire == 1 then
      if pos + 8 > b then corrupt('truncated 64-bit field %d', field) end
      fn(field, 1, pos)
      pos = pos + 8
    elseif wire == 2 then
      local len
      len, pos = varint(p, pos, b)
      if len < 0 or len > b - pos then
        corrupt('field %d declares %s bytes, %d left', field, tostring(len), b - pos)
      end
      fn(field, 2, pos, pos + len)
      pos = pos + len
    elseif wire == 5 then
      if pos + 4 > b then corrupt('truncated 32-bit field %d', field) end
      fn(field, 5, pos)
      pos = pos + 4
    else
      corrupt('wire type %d (field %d) at byte %d', wire, field, pos)
    end
  end
end

------------------------------------------------------------------ schemas
-- kind: 'int' (varint), 'str' (bytes), 'float', 'double', 'ints' (packed or
-- not), 'floats', 'doubles', or a message schema table. rep: repeated.
local S = {}
local function F(name, kind, rep) return {name = name, kind = kind, rep = rep} end

S.StringString = {[1] = F('key', 'str'), [2] = F('value', 'str')}
S.OperatorSetId = {[1] = F('domain', 'str'), [2] = F('version', 'int')}
S.Tensor = {
  [1] = F('dims', 'ints', true), [2] = F('data_type', 'int'), [4] = F('float_data', 'floats', true),
  [5] = F('int32_data', 'ints', true), [6] = F('string_data', 'str', true),
  [7] = F('int64_data', 'ints', true), [8] = F('name', 'str'), [9] = F('raw', 'str'),
  [10] = F('double_data', 'doubles', true), [11] = F('uint64_data', 'ints', true),
  [12] = F('doc_string', 'str'), [13] = F('external_data', S.StringString, true),
  [14] = F('data_location', 'int'),
}
S.SparseTensor = {[1] = F('values', S.Tensor), [2] = F('indices', S.Tensor), [3] = F('dims', 'ints', true)}
S.Dimension = {[1] = F('dim_value', 'int'), [2] = F('dim_param', 'str'), [3] = F('denotation', 'str')}
S.TensorShape = {[1] = F('dim', S.Dimension, true)}
S.TypeTensor = {[1] = F('elem_type', 'int'), [2] = F('shape', S.TensorShape)}
S.Type = {}
S.TypeSequence = {[1] = F('elem_type', S.Type)}
S.TypeOptional = {[1] = F('elem_type', S.Type)}
S.TypeMap = {[1] = F('key_type', 'int'), [2] = F('value_type', S.Type)}
S.Type[1] = F('tensor_type', S.TypeTensor)
S.Type[4] = F('sequence_type', S.TypeSequence)
S.Type[5] = F('map_type', S.TypeMap)
S.Type[6] = F('denotation', 'str')
S.Type[8] = F('sparse_tensor_type', S.TypeTensor)
S.Type[9] = F('optional_type', S.TypeOptional)
S.Sequence = {[1] = F('name', 'str'), [2] = F('elem_type', 'int'), [3] = F('tensor_values', S.Tensor, true),
              [5] = F('sequence_values', {}, true), [7] = F('optional_values', {}, true)}
S.Sequence[5].kind = S.Sequence
S.Optional = {[1] = F('name', 'str'), [2] = F('elem_type', 'int'), [3] = F('tensor_value', S.Tensor),
              [5] = F('sequence_value', S.Sequence), [7] = F('optional_value', {})}
S.Optional[7].kind = S.Optional
S.Sequence[7].kind = S.Optional
S.ValueInfo = {[1] = F('name', 'str'), [2] = F('type', S.Type), [3] = F('doc_string', 'str')}
S.Graph = {}
S.Attribute = {
  [1] = F('name', 'str'), [2] = F('f', 'float'), [3] = F('i', 'int'), [4] = F('s', 'str'),
  [5] = F('t', S.Tensor), [6] = F('g', S.Graph), [7] = F('floats', 'floats', true),
  [8] = F('ints', 'ints', true), [9] = F('strings', 'str', true), [10] = F('tensors', S.Tensor, true),
  [11] = F('graphs', S.Graph, true), [13] = F('doc_string', 'str'), [14] = F('tp', S.Type),
  [15] = F('type_protos', S.Type, true), [20] = F('type', 'int'), [21] = F('ref_attr_name', 'str'),
  [22] = F('sparse_tensor', S.SparseTensor), [23] = F('sparse_tensors', S.SparseTensor, true),
}
S.Node = {
  [1] = F('inputs', 'str', true), [2] = F('outputs', 'str', true), [3] = F('name', 'str'),
  [4] = F('op_type', 'str'), [5] = F('attr_list', S.Attribute, true), [6] = F('doc_string', 'str'),
  [7] = F('domain', 'str'), [8] = F('overload', 'str'),
}
S.Graph[1] = F('nodes', S.Node, true)
S.Graph[2] = F('name', 'str')
S.Graph[5] = F('initializers', S.Tensor, true)
S.Graph[10] = F('doc_string', 'str')
S.Graph[11] = F('inputs', S.ValueInfo, true)
S.Graph[12] = F('outputs', S.ValueInfo, true)
S.Graph[13] = F('value_info', S.ValueInfo, true)
S.Graph[15] = F('sparse_initializers', S.SparseTensor, true)
S.Function = {[1] = F('name', 'str'), [4] = F('inputs', 'str', true), [5] = F('outputs', 'str', true),
              [7] = F('nodes', S.Node, true), [10] = F('domain', 'str')}
S.Model = {
  [1] = F('ir_version', 'int'), [2] = F('producer_name', 'str'), [3] = F('producer_version', 'str'),
  [4] = F('domain', 'str'), [5] = F('model_version', 'int'), [6] = F('doc_string', 'str'),
  [7] = F('graph', S.Graph), [8] = F('opsets', S.OperatorSetId, true),
  [14] = F('metadata_props', S.StringString, true), [25] = F('functions', S.Function, true),
}
M.SCHEMA = S

local WIRE = {int = 0, str = 2, float = 5, double = 1}

-- A float / double at byte pointer q, any alignment. A NaN comes back as
-- Lua's own NaN: LuaJIT keeps tags in NaN payloads, and turning a NaN with
-- another payload into a number can make a bogus object (a crash later in
-- the GC), so the bits are looked at first.
local u32buf, f32buf = ffi.new('uint32_t[2]'), ffi.new('float[1]')
local f64buf = ffi.new('double[1]')
local NAN = 0 / 0
local function read_f32(q)
  ffi.copy(u32buf, q, 4)
  local b = u32buf[0]
  if bit.band(b, 0x7f800000) == 0x7f800000 and bit.band(b, 0x7fffff) ~= 0 then return NAN end
  ffi.copy(f32buf, q, 4)
  return tonumber(f32buf[0])
end
local function read_f64(q)
  ffi.copy(u32buf, q, 8)
  local hi = u32buf[ffi.abi('le') and 1 or 0]
  local lo = u32buf[ffi.abi('le') and 0 or 1]
  if bit.band(hi, 0x7ff00000) == 0x7ff00000 and (bit.band(hi, 0xfffff) ~= 0 or lo ~= 0) then return NAN end
  ffi.copy(f64buf, q, 8)
  return tonumber(f64buf[0])
end
M.read_f32, M.read_f64 = read_f32, read_f64

-- Decodes p[a, b) with schema; unknown fields are skipped (proto2 rules).
local decode
decode = function(s, p, a, b, schema, depth)
  if depth > M.MAX_DEPTH then corrupt('messages nested deeper than %d', M.MAX_DEPTH) end
  local out = {}
  for _, f in pairs(schema) do
    if f.rep then out[f.name] = {} end
  end
  each_field(p, a, b, function(field, wire, v, stop)
    local f = schema[field]
    if not f then return end
    local kind = f.kind
    local val
    if type(kind) == 'table' then
      if wire ~= 2 then corrupt('field %s: wire type %d, message expected', f.name, wire) end
      val = decode(s, p, v, stop, kind, depth + 1)
    elseif kind == 'ints' then
      local list = out[f.name]
      if wire == 0 then list[#list + 1] = v; return end
      if wire ~= 2 then corrupt('field %s: wire type %d for integers', f.name, wire) end
      local pos = v
      while pos < stop do
        local x
        x, pos = varint(p, pos, stop)
        list[#list + 1] = x
      end
      return
    elseif kind == 'floats' or kind == 'doubles' then
      local list, width = out[f.name], kind == 'floats' and 4 or 8
      local read = width == 4 and read_f32 or read_f64
      if wire == (width == 4 and 5 or 1) then
        list[#list + 1] = read(p + v)
        return
      end
      if wire ~= 2 then corrupt('field %s: wire type %d for floats', f.name, wire) end
      if (stop - v) % width ~= 0 then corrupt('field %s: packed length %d', f.name, stop - v) end
      for q = v, stop - 1, width do list[#list + 1] = read(p + q) end
      return
    else
      if WIRE[kind] ~= wire then corrupt('field %s: wire type %d', f.name, wire) end
      if kind == 'int' then val = v
      elseif kind == 'str' then val = s:sub(v + 1, stop)
      elseif kind == 'float' then
        val = read_f32(p + v)
      else
        val = read_f64(p + v)
      end
    end
    if f.rep then
      local list = out[f.name]
      list[#list + 1] = val
    else
      out[f.name] = val
    end
  end)
  return out
end

------------------------------------------------------------------ shaping
local function pairs_to_map(list)
  local m = {}
  for _, kv in ipairs(list or {}) do m[kv.key or ''] = kv.value or '' end
  return m
end

local function tensor(t)
  t.name = t.name or ''
  t.external_data = t.external_data and #t.external_data > 0 and pairs_to_map(t.external_data) or nil
  return t
end

local function value_info(v)
  local out = {name = v.name or '', doc_string = v.doc_string}
  local ty = v.type
  if ty and ty.tensor_type then
    out.kind = 'tensor'
    out.elem_type = ty.tensor_type.elem_type
    local sh = ty.tensor_type.shape
    if sh then
      out.dims = {}
      for i, d in ipairs(sh.dim) do out.dims[i] = d.dim_param or d.dim_value or false end
    end
  elseif ty and ty.sequence_type then out.kind = 'sequence'
  elseif ty and ty.optional_type then out.kind = 'optional'
  elseif ty and ty.map_type then out.kind = 'map'
  elseif ty and ty.sparse_tensor_type then out.kind = 'sparse_tensor'
  end
  out.type = ty
  return out
end

local graph

local function attribute(a)
  if a.t then tensor(a.t) end
  for _, t in ipairs(a.tensors) do tensor(t) end
  if a.g then a.g = graph(a.g) end
  for i, g in ipairs(a.graphs) do a.graphs[i] = graph(g) end
  a.name = a.name or ''
  return a
end

local function node(n)
  n.op_type, n.domain, n.name = n.op_type or '', n.domain or '', n.name or ''
  n.attrs = {}
  for _, a in ipairs(n.attr_list) do
    attribute(a)
    n.attrs[a.name] = a
  end
  return n
end

graph = function(g)
  for _, n in ipairs(g.nodes) do node(n) end
  for _, t in ipairs(g.initializers) do tensor(t) end
  for _, key in ipairs({'inputs', 'outputs', 'value_info'}) do
    for i, v in ipairs(g[key]) do g[key][i] = value_info(v) end
  end
  g.name = g.name or ''
  return g
end

--- Decodes a ModelProto from a string.
function M.model(s)
  if type(s) ~= 'string' then error('onnx: model bytes must be a string', 2) end
  local p = ffi.cast(bytep, s)
  local m = decode(s, p, 0, #s, S.Model, 0)
  if not m.graph then corrupt('model has no graph (not an ONNX model?)') end
  graph(m.graph)
  for _, o in ipairs(m.opsets) do o.domain = o.domain or '' end
  m.metadata = pairs_to_map(m.metadata_props)
  m.metadata_props = nil
  return m
end

--- Decodes a message of any schema in M.SCHEMA (e.g. 'Tensor' for the
-- conformance suite's input_*.pb files).
function M.decode(s, schema_name)
  local schema = S[schema_name]
  if not schema then error('onnx: no protobuf schema ' .. tostring(schema_name), 2) end
  local msg = decode(s, ffi.cast(bytep, s), 0, #s, schema, 0)
  if schema == S.Tensor then return tensor(msg) end
  if schema == S.Graph then return graph(msg) end
  if schema == S.Sequence then
    for _, t in ipairs(msg.tensor_values) do tensor(t) end
  end
  if schema == S.Optional then
    if msg.tensor_value then tensor(msg.tensor_value) end
    if msg.sequence_value then
      for _, t in ipairs(msg.sequence_value.tensor_values) do tensor(t) end
    end
  end
  return msg
end

--- Low level: field number -> list of raw values of one message (numbers
-- for varints, strings for the others), for tests of the wire format.
function M.fields(s)
  local out = {}
  each_field(ffi.cast(bytep, s), 0, #s, function(field, wire, v, stop)
    local list = out[field] or {}
    out[field] = list
    if wire == 0 then list[#list + 1] = v
    elseif wire == 2 then list[#list + 1] = s:sub(v + 1, stop)
    else list[#list + 1] = s:sub(v + 1, v + (wire == 1 and 8 or 4)) end
  end)
  return out
end

--- A packed run of varints -> list of numbers.
function M.packed(s)
  local res, p, pos = {}, ffi.cast(bytep, s), 0
  while pos < #s do
    local x
    x, pos = varint(p, pos, #s)
    res[#res + 1] = x
  end
  return res
end

--- The float of 4 little-endian bytes.
function M.float_of(s)
  if #s ~= 4 then corrupt('float of %d bytes', #s) end
  return read_f32(ffi.cast(bytep, s))
end

--- Reads and decodes a model file: returns the model table and the bytes.
function M.read(path)
  require('oneflow._args').arg('onnx.read', 1, 'path', path, 'string')
  local fh, err = io.open(path, 'rb')
  if not fh then error('onnx: cannot open ' .. tostring(err), 0) end
  local s = fh:read('*a')
  fh:close()
  return M.model(s), s
end

--- Op types of a decoded graph, in order.
function M.op_types(g)
  local t = {}
  for i, n in ipairs(g.nodes) do t[i] = n.op_type end
  return t
end

--- Initializers by name.
function M.inits(g)
  local t = {}
  for _, x in ipairs(g.initializers) do t[x.name] = x end
  return t
end

return M
