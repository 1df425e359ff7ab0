-- ir_build.lua -- writes a saved graph of one node from scratch, the way a
-- crafted file would be made (spec/graph/attr_ranges_spec.lua): the IR
-- record of core/graph/io.c (format 3, the layout spec/graph/ir_edits.lua
-- reads) with its FNV-1a checksum, inside a safetensors file.
-- The op's attribute record is the C struct of core/ops/op.h (or
-- core/graph/ops.h for graph-only ops), declared here from those headers
-- themselves, so the layout is never written down twice.
local ffi = require 'ffi'
local bit = require 'bit'

local M = {}

local function slurp(path)
  local f = assert(io.open(path, 'rb'))
  local s = f:read('*a')
  f:close()
  return s
end

-- the attribute record structs: `typedef struct {...} a_x;` of the headers
local declared = false
local function declare(root)
  if declared then return end
  declared = true
  for _, h in ipairs({'core/ops/op.h', 'core/graph/ops.h'}) do
    local src = slurp(root .. '/' .. h):gsub('/%*.-%*/', ''):gsub('//[^\n]*', '')
    src = src:gsub('OF_MAX_DIMS', '8'):gsub('OF_BACKWARD_MAX_IN', '32')
    for body, name in src:gmatch('typedef struct%s*(%b{})%s*([%w_]+)%s*;') do
      if not body:find('%[%]') then   -- a_comm's counts[] (collectives are never saved)
        ffi.cdef(('typedef struct %s of_spec_%s;'):format(body, name))
      end
    end
  end
end

local function fnv(s)
  local h = 1469598103934665603ULL
  for i = 1, #s do h = bit.bxor(h, s:byte(i)) * 1099511628211ULL end
  return h
end

local function pack(ctype, v)
  local b = ffi.new(ctype .. '[1]', v)
  return ffi.string(b, ffi.sizeof(ctype))
end

--- M.record(root, struct, fields): the bytes of attribute record `struct`
-- (e.g. 'a_conv'), zeroed, with fields set ({groups = 1, stride = {1, 1}}).
function M.record(root, struct, fields)
  declare(root)
  local r = ffi.new('of_spec_' .. struct)
  for k, v in pairs(fields or {}) do
    if type(v) == 'table' then
      for i, x in ipairs(v) do r[k][i - 1] = x end
    else
      r[k] = v
    end
  end
  return ffi.string(r, ffi.sizeof(r))
end

local DT = {bool = 0, uint8 = 1, int8 = 2, int32 = 3, int64 = 4, float32 = 7, float64 = 8,
            complex64 = 13, complex128 = 14}
M.DT = DT

local function value(kind, dtype, shape, self)
  local s = {pack('uint8_t', kind), pack('uint8_t', 0), pack('int32_t', dtype), pack('int32_t', 0),
             pack('int32_t', #shape), pack('int32_t', self), pack('int32_t', self), pack('int32_t', -1)}
  local stride, strides = 1, {}
  for d = #shape, 1, -1 do strides[d] = stride; stride = stride * math.max(shape[d], 1) end
  for d = 1, 8 do s[#s + 1] = pack('int64_t', shape[d] or 0) end
  for d = 1, 8 do s[#s + 1] = pack('int64_t', strides[d] or 0) end
  s[#s + 1] = pack('int64_t', 0)
  s[#s + 1] = pack('uint16_t', 0)
  return table.concat(s)
end

--- M.graph(op, attrs, ins, outs): the safetensors bytes of a graph whose
-- inputs are `ins` ({shape, dtype name}, or false for an absent input) and
-- whose one node `op` (record bytes `attrs`) makes `outs` (same form), the
-- graph's outputs.
function M.graph(op, attrs, ins, outs)
  local vals, node_in, node_out, gin = {}, {}, {}, {}
  for _, x in ipairs(ins) do
    if x then
      local id = #vals
      vals[#vals + 1] = value(0, DT[x[2] or 'float32'], x[1], id)
      node_in[#node_in + 1] = id
      gin[#gin + 1] = id
    else
      node_in[#node_in + 1] = -1
    end
  end
  for _, y in ipairs(outs) do
    local id = #vals
    vals[#vals + 1] = value(2, DT[y[2] or 'float32'], y[1], id)
    node_out[#node_out + 1] = id
  end
  local p = {pack('uint32_t', #vals), pack('uint32_t', 1), pack('uint32_t', #gin),
             pack('uint32_t', #node_out), pack('uint32_t', 0), pack('int32_t', 0)}
  for _, v in ipairs(vals) do p[#p + 1] = v end
  for _, v in ipairs(gin) do p[#p + 1] = pack('int32_t', v) end
  for _, v in ipairs(node_out) do p[#p + 1] = pack('int32_t', v) end
  p[#p + 1] = pack('uint16_t', #op) .. op .. pack('int32_t', #attrs) .. attrs
  for _, v in ipairs({#node_in, #node_out, #node_out, 0, 0}) do p[#p + 1] = pack('int32_t', v) end
  for _ = 1, 3 do p[#p + 1] = pack('uint32_t', 0) end
  p[#p + 1] = pack('int32_t', -1)
  for _, v in ipairs(node_in) do p[#p + 1] = pack('int32_t', v) end
  for _, v in ipairs(node_out) do p[#p + 1] = pack('int32_t', v) end
  local payload = table.concat(p)
  local ir = 'OFGRAPH\0' .. pack('uint32_t', 3) .. pack('uint32_t', 0x01020304)
    .. pack('uint64_t', #payload) .. pack('uint64_t', fnv(payload)) .. payload
  local header = ('{"__metadata__":{"format":"oneflow-graph","version":"1"},'
                  .. '"__graph__":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}'):format(#ir, #ir)
  header = header .. (' '):rep((8 - #header % 8) % 8)
  return pack('uint64_t', #header) .. header .. ir
end

-- loader(root, path): load_node(op, fields, ins, outs) writes a one-node
-- graph of op, its record made of these fields, to path and loads it with
-- flow.nn.Graph.load (pcall's results)
function M.loader(root, path)
  local flow = require 'oneflow'
  local recs = {}
  for _, r in ipairs(flow._C.op_schema()) do recs[r.name] = r.attrs end
  return function(op, fields, ins, outs)
    local f = assert(io.open(path, 'wb'))
    f:write(M.graph(op, M.record(root, recs[op], fields), ins, outs))
    f:close()
    return pcall(flow.nn.Graph.load, path)
  end
end

-- refuser(load): refused(want, ...) asserts that load(...) fails with an
-- error containing want
function M.refuser(load)
  return function(want, ...)
    local ok, err = load(...)
    assert(not ok, 'loaded, wanted an error containing: ' .. want)
    assert(tostring(err):find(want, 1, true), tostring(err))
  end
end

return M
