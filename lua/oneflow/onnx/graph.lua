-- oneflow.onnx.graph: the ONNX graph being built while a model is traced.
--
-- Values are named strings. A traced tensor is bound to the name of the
-- value that computes it (keyed by its C handle, so a re-wrapped handle is
-- the same value); a tensor that is not bound is a constant and becomes an
-- initializer the first time an op reads it (parameters and buffers keep
-- their state-dict names). Rules of oneflow.onnx.ops use:
--   g:val(x)                 name of tensor x (binding or initializer)
--   g:bind(x, name)          x is now computed by `name`
--   g:node(op, inputs, attrs[, nout]) -> output name(s)
--   g:scalar(v, dtype), g:ints({...}), g:const(tensor[, hint])
--   g:cast(name, from, to), g:shape_of(name)
-- Attributes are built with graph.f/i/s/ints/floats/tensor.
local ffi = require 'ffi'
local T = require 'oneflow.tensor'
local pb = require 'oneflow.onnx.protobuf'

local is_tensor = T.is_tensor
local DATA_TYPE = pb.DATA_TYPE

local M = {}
local Graph = {}
Graph.__index = Graph
M.Graph = Graph

------------------------------------------------------------------ attributes
function M.f(v) return {type = 'f', value = v} end
function M.i(v) return {type = 'i', value = v} end
function M.s(v) return {type = 's', value = v} end
function M.ints(v) return {type = 'ints', value = v} end
function M.floats(v) return {type = 'floats', value = v} end
--- A TENSOR attribute: {dtype = name, dims = {...}, values = {...}}.
function M.tensor(dtype, dims, values)
  return {type = 't', value = {dtype = dtype, dims = dims, values = values}}
end

------------------------------------------------------------------ raw data
local CTYPE = {float32 = 'float', float64 = 'double', int64 = 'int64_t', int32 = 'int32_t',
               int8 = 'int8_t', uint8 = 'uint8_t', bool = 'uint8_t', int16 = 'int16_t',
               uint16 = 'uint16_t', uint32 = 'uint32_t', uint64 = 'uint64_t'}

--- Little-endian bytes of Lua numbers as `dtype` (float32, int64, ...).
function M.raw_of(values, dtype)
  local ct = CTYPE[dtype]
  local n = #values
  if not ct then
    -- float16 / bfloat16: let the tensor library round the values
    local flow = package.loaded.oneflow
    local vals = {}
    for i = 1, n do vals[i] = type(values[i]) == 'boolean' and (values[i] and 1 or 0) or values[i] end
    local t = flow.tensor(vals, {dtype = dtype})
    return n == 0 and '' or ffi.string(t:data_ptr(), n * t:element_size())
  end
  local buf = ffi.new(ct .. '[?]', math.max(n, 1))
  for i = 1, n do
    local v = values[i]
    if type(v) == 'boolean' then v = v and 1 or 0 end
    buf[i - 1] = v
  end
  return ffi.string(buf, n * ffi.sizeof(ct))
end

--- Key of a tensor: the address of its C handle.
local function key(x)
  return tonumber(ffi.cast('intptr_t', x.p))
end
M.key = key

------------------------------------------------------------------ graph
--- A new graph. opts: opset (number), param_names ({key = name}).
function M.new(opts)
  local g = setmetatable({
    opset = opts.opset,
    nodes = {}, initializers = {}, inputs = {}, outputs = {},
    dyn = {},          -- key -> value name (tensors computed by the graph)
    consts = {},       -- key -> initializer name (constant tensors already written)
    folded = {},       -- key -> true (tensors made by ops on constants only)
    param_names = opts.param_names or {},
    anchors = {},      -- every tensor we keyed, kept alive so handles are not reused
    used_names = {},
    cache = {},        -- small constants by content
    counter = 0,
    scope = {},
    dim_sources = {},  -- {name =, axis =, size =}: dynamic axes of the inputs
    shapes = {},       -- value name -> Shape node output
  }, Graph)
  return g
end

function Graph:anchor(x) self.anchors[#self.anchors + 1] = x end

--- A value name not used yet, from `base`.
function Graph:unique(base)
  local name = base
  local k = 1
  while self.used_names[name] do
    k = k + 1
    name = base .. '_' .. k
  end
  self.used_names[name] = true
  return name
end

function Graph:is_dynamic(x) return self.dyn[key(x)] ~= nil end

function Graph:bind(x, name)
  if not is_tensor(x) then error('onnx.export: internal error: binding a ' .. type(x), 2) end
  if type(name) ~= 'string' then error('onnx.export: internal error: bad value name', 2) end
  self.dyn[key(x)] = name
  self:anchor(x)
end

--- Marks x as made from constants only (not bound, not an error to return).
function Graph:mark_folded(x)
  self.folded[key(x)] = true
  self:anchor(x)
end

--- Forgets the initializer written for x (x was changed in place).
function Graph:forget(x)
  self.consts[key(x)] = nil
end

--- Whether x is something the graph knows (bound, folded, written, a parameter).
function Graph:knows(x)
  local k = key(x)
  return self.dyn[k] ~= nil or self.folded[k] or self.consts[k] ~= nil or self.param_names[k] ~= nil
end

--- Adds an initializer of raw little-endian bytes; returns its name.
function Graph:initializer(hint, dtype, dims, raw)
  local dt = DATA_TYPE[dtype]
  if not dt then
    error(('onnx.export: constants of dtype %s cannot be written'):format(tostring(dtype)), 2)
  end
  local name = self:unique(hint)
  self.initializers[#self.initializers + 1] = {name = name, data_type = dt, dims = dims, raw = raw}
  return name
end

local function tensor_bytes(x)
  local c = x:cpu():contiguous()   -- weights of a model on the GPU are read from a host copy
  local n = c:numel() * c:element_size()
  if n == 0 then return '', c end
  return ffi.string(c:data_ptr(), n), c
end

--- An initializer holding a copy of tensor x's current values.
function Graph:const(x, hint)
  local raw = tensor_bytes(x)
  return self:initializer(hint or 'const', x.dtype.name, x:size():totable(), raw)
end

--- The value name of tensor x: its binding, or an initializer (written once).
function Graph:val(x)
  if not is_tensor(x) then
    error(('onnx.export: internal error: expected a tensor, got %s'):format(type(x)), 2)
  end
  local k = key(x)
  local name = self.dyn[k] or self.consts[k]
  if name then return name end
  name = self:const(x, self.param_names[k] or 'const')
  self.consts[k] = name
  self:anchor(x)
  return name
end

--- A 0-d constant of dtype (cached by value).
function Graph:scalar(v, dtype)
  if type(v) == 'boolean' then v = v and 1 or 0 end
  local ck = ('scalar:%s:%.17g'):format(dtype, v)
  local name = self.cache[ck]
  if not name then
    name = self:initializer('c_' .. dtype, dtype, {}, M.raw_of({v}, dtype))
    self.cache[ck] = name
  end
  return name
end

--- A 1-D int64 constant (cached by content).
function Graph:ints(list)
  local parts = {}
  for i = 1, #list do parts[i] = ('%.17g'):format(list[i]) end
  local ck = 'ints:' .. table.concat(parts, ',')
  local name = self.cache[ck]
  if not name then
    name = self:initializer('ints', 'int64', {#list}, M.raw_of(list, 'int64'))
    self.cache[ck] = name
  end
  return name
end

--- A 1-D constant of dtype from Lua numbers.
function Graph:list(values, dtype)
  return self:initializer('c_' .. dtype, dtype, {#values}, M.raw_of(values, dtype))
end

--- Adds a node; returns its output names (nout of them, default 1).
function Graph:node(op, inputs, attrs, nout)
  self.counter = self.counter + 1
  local prefix = self.scope[#self.scope]
  local nname = (prefix and prefix ~= '' and ('/' .. prefix .. '/') or '/') .. op .. '_' .. self.counter
  nout = nout or 1
  local outs = {}
  for i = 1, nout do outs[i] = self:unique(nname .. '_output_' .. (i - 1)) end
  local attributes = {}
  if attrs then
    local names = {}
    for k in pairs(attrs) do names[#names + 1] = k end
    table.sort(names)
    for _, k in ipairs(names) do
      local a = attrs[k]
      local value = a.value
      if a.type == 't' then
        value = {dims = a.value.dims, data_type = DATA_TYPE[a.value.dtype],
                 raw = M.raw_of(a.value.values, a.value.dtype)}
      end
      attributes[#attributes + 1] = {name = k, type = a.type, value = value}
    end
  end
  for i = 1, #inputs do
    if type(inputs[i]) ~= 'string' then
      error(('onnx.export: internal error: input %d of %s is a %s'):format(i, op, type(inputs[i])), 2)
    end
  end
  self.nodes[#self.nodes + 1] = {op_type = op, name = nname, inputs = inputs, outputs = outs,
                                 attributes = attributes}
  return unpack(outs)
end

--- Cast of value `name` to dtype `to` (nothing when from == to).
function Graph:cast(name, from, to)
  if from == to then return name end
  local dt = DATA_TYPE[to]
  if not dt then error(('onnx.export: cannot cast to %s'):format(tostring(to)), 2) end
  return self:node('Cast', {name}, {to = M.i(dt)})
end

--- The Shape of value `name` (one node per value).
function Graph:shape_of(name)
  local s = self.shapes[name]
  if not s then
    s = self:node('Shape', {name})
    self.shapes[name] = s
  end
  return s
end

--- A 1-D int64 shape vector for `sizes`. Entries equal to the example size
-- of a dynamic input axis are read from that input at run time, so
-- expanded batch dims follow the input.
function Graph:shape_vector(sizes)
  local pieces, dynamic = {}, false
  for i, v in ipairs(sizes) do
    local src
    if v > 1 then
      for _, d in ipairs(self.dim_sources) do
        if d.size == v then src = d; break end
      end
    end
    if src then
      dynamic = true
      pieces[i] = self:node('Gather', {self:shape_of(src.name), self:ints({src.axis})}, {axis = M.i(0)})
    else
      pieces[i] = v
    end
  end
  if not dynamic then return self:ints(sizes) end
  local names = {}
  for i, p in ipairs(pieces) do
    names[i] = type(p) == 'string' and p or self:ints({p})
  end
  return self:node('Concat', names, {axis = M.i(0)})
end

------------------------------------------------------------------ finishing
--- Removes nodes whose outputs nobody reads and initializers nobody uses.
function Graph:prune(output_names)
  local needed = {}
  for _, n in ipairs(output_names) do needed[n] = true end
  local keep = {}
  for i = #self.nodes, 1, -1 do
    local node = self.nodes[i]
    local live = false
    for _, o in ipairs(node.outputs) do
      if needed[o] then live = true; break end
    end
    if live then
      keep[#keep + 1] = node
      for _, inp in ipairs(node.inputs) do
        if inp ~= '' then needed[inp] = true end
      end
    end
  end
  local nodes = {}
  for i = #keep, 1, -1 do nodes[#nodes + 1] = keep[i] end
  self.nodes = nodes
  local inits = {}
  for _, t in ipairs(self.initializers) do
    if needed[t.name] then inits[#inits + 1] = t end
  end
  self.initializers = inits
end

--- Renames value `from` to `to` everywhere (node outputs and inputs).
function Graph:rename(from, to)
  for _, node in ipairs(self.nodes) do
    for i, o in ipairs(node.outputs) do if o == from then node.outputs[i] = to end end
    for i, o in ipairs(node.inputs) do if o == from then node.inputs[i] = to end end
  end
  for k, v in pairs(self.dyn) do if v == from then self.dyn[k] = to end end
end

--- Whether `name` is produced by a node.
function Graph:produced(name)
  for _, node in ipairs(self.nodes) do
    for _, o in ipairs(node.outputs) do if o == name then return true end end
  end
  return false
end

return M
