-- oneflow.onnx.import: runs ONNX models with our ops (doc/onnx.md, "Import").
--
--   local net = flow.onnx.load('model.onnx')     -- an nn.Module
--   local y = net(x)                             -- graph inputs in order, or {name = tensor}
--   local y1, y2 = flow.onnx.run('model.onnx', {x})
--
-- The file is decoded by oneflow.onnx.reader (bounded, never reads past the
-- bytes it was given). Initializers become named Parameters (floating point)
-- or buffers (integers, bool) of the module, under their ONNX names split at
-- '.', so `layer1.0.conv1.weight` is a parameter of submodule layer1.0.conv1
-- and state dicts line up with the exporter's. Nodes are put in topological
-- order when loading (a cycle or an input nothing produces is an error
-- then); forward runs them with the op table in oneflow.onnx.import_ops.
local ffi = require 'ffi'
local reader = require 'oneflow.onnx.reader'
local module = require 'oneflow.nn.module'
local class = require 'oneflow.class'
local T = require 'oneflow.tensor'

local is_tensor = T.is_tensor

local M = {}

-- 22 is read too: its op versions only add data types (bfloat16, float8,
-- int4) to ops of opset 21, which the dtype checks cover
M.MIN_OPSET, M.MAX_OPSET = 7, 22
-- elements one initializer or input may declare (2^40: 4 TiB of float32)
M.MAX_ELEMENTS = 2 ^ 40

local function fail(msg, ...) error('onnx: ' .. msg:format(...), 0) end
local function unsupported(msg, ...) error('onnx: unsupported: ' .. msg:format(...), 0) end
M.fail, M.unsupported = fail, unsupported

------------------------------------------------------------------ dtypes
-- ONNX TensorProto.DataType -> oneflow dtype name and the C type of one element
-- in raw_data.
M.DTYPES = {
  [1] = {'float32', 'float'}, [2] = {'uint8', 'uint8_t'}, [3] = {'int8', 'int8_t'},
  [6] = {'int32', 'int32_t'}, [7] = {'int64', 'int64_t'}, [9] = {'bool', 'uint8_t'},
  [10] = {'float16', 'uint16_t'}, [11] = {'float64', 'double'}, [16] = {'bfloat16', 'uint16_t'},
  [4] = {'uint16', 'uint16_t'}, [5] = {'int16', 'int16_t'}, [12] = {'uint32', 'uint32_t'},
  [13] = {'uint64', 'uint64_t'},
}
M.DTYPE_NAMES = {[0] = 'UNDEFINED', 'FLOAT', 'UINT8', 'INT8', 'UINT16', 'INT16', 'INT32', 'INT64',
                 'STRING', 'BOOL', 'FLOAT16', 'DOUBLE', 'UINT32', 'UINT64', 'COMPLEX64', 'COMPLEX128',
                 'BFLOAT16', 'FLOAT8E4M3FN', 'FLOAT8E4M3FNUZ', 'FLOAT8E5M2', 'FLOAT8E5M2FNUZ', 'UINT4',
                 'INT4', 'FLOAT4E2M1'}

local function flow() return require('oneflow') end

--- The oneflow dtype of an ONNX data type (an unsupported error otherwise).
function M.dtype(code, what)
  local d = M.DTYPES[code]
  if not d then
    unsupported('%s: data type %s (%s) has no oneflow dtype', what or 'tensor',
                M.DTYPE_NAMES[code] or '?', tostring(code))
  end
  return flow()[d[1]]
end

--- The ONNX data type of a oneflow dtype.
function M.onnx_type(dtype)
  for code, d in pairs(M.DTYPES) do
    if d[1] == dtype.name then return code end
  end
  unsupported('dtype %s has no ONNX type', tostring(dtype))
end

------------------------------------------------------------------ tensors
-- Lua values of small tensors made from the file (initializers, attribute
-- tensors) and of shape arithmetic on them (Shape, Gather, Concat ...): ops
-- read shapes, axes and pads from here, so they need no :totable() on a
-- tensor -- which nn.Graph refuses on the tensors of a traced build().
-- M.kv maps tensor -> list for the forward being run (a fresh table each
-- forward, so no entry outlives the tensors of that run).
M.kv = {}

-- x and, for integers up to 4096 values and float32/64 up to 16, its values
-- (read from the bytes; floats through the reader's NaN-safe reads)
local function remember(x, buf, n, dt)
  local ct = M.CTYPE[dt.name]
  if n > 4096 or not ct or (dt.is_floating_point and n > 16) then return x end
  local list = {}
  local bytes = ffi.cast('const uint8_t *', buf)
  local size = ffi.sizeof(ct)
  for i = 0, n - 1 do
    local q = bytes + i * size
    if ct == 'float' then list[i + 1] = reader.read_f32(q)
    elseif ct == 'double' then list[i + 1] = reader.read_f64(q)
    else
      local one = ffi.new(ct .. '[1]')
      ffi.copy(one, q, size)
      list[i + 1] = tonumber(one[0])
    end
  end
  return x, list
end
M.CTYPE = {uint8 = 'uint8_t', int8 = 'int8_t', int32 = 'int32_t', int64 = 'int64_t', bool = 'uint8_t',
           float32 = 'float', float64 = 'double', int16 = 'int16_t', uint16 = 'uint16_t',
           uint32 = 'uint32_t', uint64 = 'uint64_t'}
local function check_dims(dims, what)
  local n = 1
  for i, d in ipairs(dims) do
    if type(d) ~= 'number' or d < 0 or d ~= math.floor(d) then
      fail('%s: dim %d is %s', what, i, tostring(d))
    end
    n = n * d
  end
  if n > M.MAX_ELEMENTS then fail('%s: %s elements declared (dims %s), more than a tensor can hold',
                                  what, ('%.0f'):format(n), table.concat(dims, 'x')) end
  return n
end

-- A path relative to dir that stays inside it (no absolute path, no '..').
local function inside(dir, rel, what)
  if type(rel) ~= 'string' or rel == '' then fail('%s: external data has no location', what) end
  if rel:sub(1, 1) == '/' or rel:sub(1, 1) == '\\' or rel:match('^%a:') then
    fail("%s: external data location '%s' is an absolute path (refused: it must be inside the model's folder)",
         what, rel)
  end
  for part in rel:gmatch('[^/\\]+') do
    if part == '..' then
      fail("%s: external data location '%s' leaves the model's folder (refused)", what, rel)
    end
  end
  if rel:find('\0', 1, true) then fail('%s: external data location has a NUL byte', what) end
  if not dir then fail("%s: external data '%s' but the model was not read from a file", what, rel) end
  return dir .. '/' .. rel
end

local function external_bytes(t, dir, what, nbytes)
  local ext = t.external_data
  local path = inside(dir, ext.location, what)
  local offset = tonumber(ext.offset or '0')
  local length = ext.length and tonumber(ext.length) or nbytes
  if not offset or offset < 0 or offset ~= math.floor(offset) then
    fail('%s: external data offset %s', what, tostring(ext.offset))
  end
  if length ~= nbytes then
    fail('%s: external data length %s, but dims and type need %d bytes', what, tostring(ext.length), nbytes)
  end
  local fh, err = io.open(path, 'rb')
  if not fh then fail('%s: cannot open external data: %s', what, tostring(err)) end
  local size = fh:seek('end')
  if not size or offset + length > size then
    fh:close()
    fail("%s: external data '%s' has %s bytes, %d wanted at offset %d", what, ext.location,
         tostring(size), length, offset)
  end
  fh:seek('set', offset)
  local s = fh:read(length) or ''
  fh:close()
  return s
end

-- typed-field name and how its values turn into elements of the C type
local TYPED = {
  [1] = 'float_data', [2] = 'int32_data', [3] = 'int32_data', [6] = 'int32_data', [9] = 'int32_data',
  [10] = 'int32_data', [16] = 'int32_data', [7] = 'int64_data', [11] = 'double_data',
  [4] = 'int32_data', [5] = 'int32_data', [12] = 'uint64_data', [13] = 'uint64_data',
}

--- A oneflow tensor of a decoded TensorProto (dir: the model's folder, for
-- external data).
function M.tensor(t, dir)
  local what = ("tensor '%s'"):format(t.name or '')
  if t.data_type == 8 then unsupported('%s: string tensors', what) end
  local dt = M.dtype(t.data_type, what)
  local ctype = M.DTYPES[t.data_type][2]
  local dims = t.dims or {}
  local n = check_dims(dims, what)
  local esize = ffi.sizeof(ctype)
  local F = flow()
  local bytes
  if t.external_data or t.data_location == 1 then
    if not t.external_data then fail('%s: data_location is EXTERNAL but no external_data', what) end
    bytes = external_bytes(t, dir, what, n * esize)
  elseif t.raw then
    bytes = t.raw
    if #bytes ~= n * esize then
      fail('%s: raw_data has %d bytes, dims %s of %s need %d', what, #bytes, table.concat(dims, 'x'),
           M.DTYPE_NAMES[t.data_type], n * esize)
    end
    if not ffi.abi('le') then unsupported('%s: raw data on a big-endian host', what) end
  else
    local list = t[TYPED[t.data_type]] or {}
    if #list ~= n then
      fail('%s: %d values for dims %s (%d elements)', what, #list, table.concat(dims, 'x'), n)
    end
    if n == 0 then return F.empty(dims, {dtype = dt}) end
    local buf = ffi.new(ctype .. '[?]', n)
    for i = 1, n do buf[i - 1] = list[i] end
    return remember(F.from_blob(buf, dims, {dtype = dt}):clone(), buf, n, dt)
  end
  if n == 0 then return F.empty(dims, {dtype = dt}) end
  local buf = ffi.new('uint8_t[?]', #bytes)
  ffi.copy(buf, bytes, #bytes)
  return remember(F.from_blob(buf, dims, {dtype = dt}):clone(), buf, n, dt)
end

--- A TensorProto table of a oneflow tensor (raw little-endian data).
function M.tensor_proto(x, name)
  x = x:contiguous():cpu()
  local code = M.onnx_type(x.dtype)
  local n = x:numel()
  local raw = n == 0 and '' or ffi.string(x:data_ptr(), n * ffi.sizeof(M.DTYPES[code][2]))
  return {name = name, data_type = code, dims = x:size():totable(), raw = raw}
end

------------------------------------------------------------------ graphs
-- Orders g.nodes topologically (Kahn), from the names known before the
-- graph runs (its inputs, initializers and, for a subgraph, anything of the
-- enclosing scopes). Subgraphs in attributes are ordered too.
local function order(g, outer, where, depth)
  if depth > 32 then fail('%s: subgraphs nested deeper than 32', where) end
  local known = {}
  for _, v in ipairs(g.inputs) do known[v.name] = true end
  for _, t in ipairs(g.initializers) do known[t.name] = true end
  local producer, waiting, pending = {}, {}, {}
  for _, n in ipairs(g.nodes) do
    for _, o in ipairs(n.outputs) do
      if o ~= '' then
        if producer[o] then
          fail("%s: '%s' is produced by two nodes (%s and %s)", where, o, producer[o].op_type, n.op_type)
        end
        producer[o] = n
      end
    end
  end
  -- subgraphs first: the names they read from outside become inputs of their node
  local scope = setmetatable({}, {__index = function(_, k)
    return known[k] or producer[k] ~= nil or (outer ~= nil and outer[k] ~= nil and outer[k] ~= false)
  end})
  local function subgraphs(n)
    local list = {}
    for _, a in ipairs(n.attr_list) do
      if a.g then list[#list + 1] = {a.name, a.g} end
      for _, sg in ipairs(a.graphs) do list[#list + 1] = {a.name, sg} end
    end
    return list
  end
  for _, n in ipairs(g.nodes) do
    for _, s in ipairs(subgraphs(n)) do
      order(s[2], scope, ("%s/%s '%s'.%s"):format(where, n.op_type, n.name, s[1]), depth + 1)
    end
  end
  local function needs(n)
    local list = {}
    for _, name in ipairs(n.inputs) do if name ~= '' then list[#list + 1] = name end end
    for _, s in ipairs(subgraphs(n)) do
      for name in pairs(s[2].free or {}) do list[#list + 1] = name end
    end
    return list
  end
  local count, out, ready = {}, {}, {}
  for _, n in ipairs(g.nodes) do
    local c = 0
    for _, name in ipairs(needs(n)) do
      if known[name] then
        local _ = name -- an input or initializer of this graph
      elseif producer[name] then
        c = c + 1
        waiting[name] = waiting[name] or {}
        table.insert(waiting[name], n)
      elseif outer and outer[name] then
        g.free = g.free or {}
        g.free[name] = true
      else
        fail("%s: node %s ('%s') reads '%s', which no node, input or initializer gives", where,
             n.op_type, n.name, name)
      end
    end
    count[n] = c
    if c == 0 then ready[#ready + 1] = n end
    pending[n] = true
  end
  local head = 1
  while head <= #ready do
    local n = ready[head]
    head = head + 1
    out[#out + 1] = n
    pending[n] = nil
    for _, o in ipairs(n.outputs) do
      for _, m in ipairs(waiting[o] or {}) do
        count[m] = count[m] - 1
        if count[m] == 0 then ready[#ready + 1] = m end
      end
    end
  end
  if #out < #g.nodes then
    local names = {}
    for _, n in ipairs(g.nodes) do
      if pending[n] and #names < 6 then names[#names + 1] = ("%s '%s'"):format(n.op_type, n.name) end
    end
    fail('%s: the graph has a cycle (nodes that wait on each other: %s)', where, table.concat(names, ', '))
  end
  for _, v in ipairs(g.outputs) do
    if known[v.name] or producer[v.name] then
      local _ = v
    elseif outer and outer[v.name] then
      g.free = g.free or {}
      g.free[v.name] = true
    else
      fail("%s: graph output '%s' is not produced by any node", where, v.name)
    end
  end
  g.order = out
end
M.order = order

------------------------------------------------------------------ running
local ops -- oneflow.onnx.import_ops, loaded with the first model

-- Keeps the Lua values of a small integer result when its inputs' values
-- are known (import_ops.PROP): shape arithmetic then needs no data reads.
local function propagate(n, ins, res, ctx)
  local prop = ops.PROP[n.op_type]
  local out = res[1]
  if not prop or not is_tensor(out) or out.dtype.is_floating_point or out:numel() > 4096 then return end
  local vs = {}
  for i = 1, ins.n do
    local v = ins[i]
    if v ~= nil then
      if not is_tensor(v) or not M.kv[v] then return end
      vs[i] = M.kv[v]
    end
  end
  local ok, list = pcall(prop, vs, n, ins, res, ctx)
  if ok and list and #list == out:numel() then M.kv[out] = list end
end

--- Runs graph g with env (name -> value; a subgraph's env falls back to
-- its parent's). ctx: {opset =, dir =, model =}.
function M.run_graph(ctx, g, env)
  ctx = setmetatable({env = env}, {__index = ctx})
  for _, n in ipairs(g.order) do
    local fn
    if n.domain == '' or n.domain == 'ai.onnx' then fn = ops.OPS[n.op_type] end
    if not fn then
      if n.domain ~= '' and n.domain ~= 'ai.onnx' then
        unsupported("op %s of domain '%s' (node '%s')", n.op_type, n.domain, n.name)
      end
      unsupported("op %s (node '%s'): no mapping to oneflow ops (see doc/onnx.md)", n.op_type, n.name)
    end
    local ins = {n = #n.inputs}
    for i, name in ipairs(n.inputs) do
      if name ~= '' then
        local v = env[name]
        if v == nil then fail("node %s ('%s'): input '%s' has no value", n.op_type, n.name, name) end
        ins[i] = v
      end
    end
    local ok, res = pcall(fn, ins, n, ctx)
    if not ok then
      local msg = tostring(res)
      if msg:match('^onnx: ') then error(msg, 0) end
      fail("node %s ('%s'): %s", n.op_type, n.name, msg)
    end
    for i, name in ipairs(n.outputs) do
      if name ~= '' then
        if res[i] == nil then fail("node %s ('%s') gave no output %d ('%s')", n.op_type, n.name, i, name) end
        env[name] = res[i]
      end
    end
    propagate(n, ins, res, ctx)
  end
end

------------------------------------------------------------------ module
local OnnxModule = class('OnnxModule', module.Module)
M.OnnxModule = OnnxModule

local RESERVED = {forward = true, training = true}

local function holder_for(root, name)
  -- ONNX names split at '.', each part a submodule; a part that is not a
  -- valid module attribute keeps the whole name flattened with '_'
  local parts = {}
  for p in (name .. '.'):gmatch('([^.]*)%.') do parts[#parts + 1] = p end
  local bad = #parts == 0
  for _, p in ipairs(parts) do
    if p == '' or RESERVED[p] or p:sub(1, 1) == '_' or module.Module[p] ~= nil then bad = true end
  end
  if bad then
    local flat = name:gsub('[.]', '_')
    if flat == '' or flat:sub(1, 1) == '_' or module.Module[flat] ~= nil or RESERVED[flat] then flat = 'p' .. flat end
    return root, flat
  end
  local m = root
  for i = 1, #parts - 1 do
    local sub = rawget(m, '_modules'):get(parts[i])
    if sub == nil then
      if rawget(m, '_parameters'):has(parts[i]) or rawget(m, '_buffers'):has(parts[i]) then
        return root, (name:gsub('[.]', '_'))
      end
      sub = module.Module()
      m:add_module(parts[i], sub)
    end
    m = sub
  end
  local key = parts[#parts]
  if rawget(m, '_modules'):has(key) then return root, (name:gsub('[.]', '_')) end
  return m, key
end

local function is_float(dt) return dt.is_floating_point end

function OnnxModule:__init(m, opts)
  module.Module.__init(self)
  opts = opts or {}
  local opset
  for _, o in ipairs(m.opsets) do
    if o.domain == '' or o.domain == 'ai.onnx' then opset = o.version end
  end
  -- no ai.onnx import: the graph only has ops of other domains (refused by name when run)
  if not opset then opset = M.MAX_OPSET end
  if opset < M.MIN_OPSET or opset > M.MAX_OPSET then
    unsupported('opset %d (opsets %d to %d are read)', opset, M.MIN_OPSET, M.MAX_OPSET)
  end
  ops = ops or require('oneflow.onnx.import_ops')
  local g = m.graph
  order(g, nil, ("graph '%s'"):format(g.name), 0)
  local F = flow()
  local consts, init_names = {}, {}
  for _, t in ipairs(g.initializers) do
    if t.name == '' then fail('an initializer has no name') end
    if init_names[t.name] then fail("initializer '%s' appears twice", t.name) end
    init_names[t.name] = true
    local x, list = M.tensor(t, opts.dir)
    local holder, key = holder_for(self, t.name)
    if is_float(x.dtype) then
      holder:register_parameter(key, F.nn.Parameter(x))
    else
      holder:register_buffer(key, x)
    end
    consts[#consts + 1] = {name = t.name, holder = holder, key = key, known = list}
  end
  -- tensors of attributes and of subgraph initializers are made now, not
  -- while nn.Graph traces a forward (which would record how they were made)
  local fixed = {}   -- {tensor, values} of attribute tensors and subgraph initializers
  local function made(x, list)
    if list then fixed[#fixed + 1] = {x, list} end
    return x
  end
  local function materialize(graph)
    for _, nd in ipairs(graph.nodes) do
      for _, a in ipairs(nd.attr_list) do
        if a.t then a.value = made(M.tensor(a.t, opts.dir)) end
        if #a.tensors > 0 then
          a.value = {}
          for i, t in ipairs(a.tensors) do a.value[i] = made(M.tensor(t, opts.dir)) end
        end
        for _, sg in ipairs(a.g and {a.g} or a.graphs) do
          for _, t in ipairs(sg.initializers) do t.value = made(M.tensor(t, opts.dir)) end
          materialize(sg)
        end
      end
    end
  end
  materialize(g)
  local inputs = {}
  for _, v in ipairs(g.inputs) do
    if not init_names[v.name] then inputs[#inputs + 1] = v end
  end
  rawset(self, '_onnx', {graph = g, opset = opset, consts = consts, inputs = inputs, dir = opts.dir, fixed = fixed,
                         model = m, ir_version = m.ir_version})
end

function OnnxModule:extra_repr()
  local o = rawget(self, '_onnx')
  return ('opset=%d, nodes=%d, inputs=%d, outputs=%d'):format(o.opset, #o.graph.nodes, #o.inputs,
                                                          #o.graph.outputs)
end

-- Checks an input against its declared type: dtype and fixed dims.
local function check_input(v, x)
  if v.kind ~= 'tensor' then return end
  if not is_tensor(x) then
    fail("input '%s' must be a tensor, got %s", v.name, type(x))
  end
  if v.elem_type and v.elem_type ~= 0 then
    local want = M.DTYPES[v.elem_type]
    if want and want[1] ~= x.dtype.name then
      fail("input '%s' expects %s, got %s", v.name, want[1], x.dtype.name)
    end
  end
  if v.dims then
    local shape = x:size():totable()
    local ok = #shape == #v.dims
    if ok then
      for i, d in ipairs(v.dims) do
        if type(d) == 'number' and d ~= shape[i] and d > 0 then ok = false end
      end
    end
    if not ok then
      local want = {}
      for i, d in ipairs(v.dims) do want[i] = type(d) == 'number' and tostring(d) or (d or '?') end
      fail("input '%s' expects shape [%s], got [%s]", v.name, table.concat(want, ','),
           table.concat(shape, ','))
    end
  end
end

--- forward(x1, x2, ...) with the graph inputs in order, or forward({name = x}).
function OnnxModule:forward(...)
  local o = rawget(self, '_onnx')
  local env, kv = {}, {}
  for _, c in ipairs(o.consts) do
    local t = c.holder[c.key]
    env[c.name] = t
    if c.known and t then kv[t] = c.known end
  end
  for _, f in ipairs(o.fixed) do kv[f[1]] = f[2] end
  local args = {...}
  local by_name = #args == 1 and type(args[1]) == 'table' and not is_tensor(args[1]) and
                  next(args[1]) ~= nil and #args[1] == 0
  if #args == 1 and type(args[1]) == 'table' and not is_tensor(args[1]) and not by_name then
    args = args[1]
  end
  for i, v in ipairs(o.inputs) do
    local x
    if by_name then x = args[1][v.name] else x = args[i] end
    if x == nil then
      fail("missing input %d ('%s'): the model takes %d inputs", i, v.name, #o.inputs)
    end
    check_input(v, x)
    env[v.name] = x
  end
  if by_name then
    for k in pairs(args[1]) do
      local found = false
      for _, v in ipairs(o.inputs) do if v.name == k then found = true end end
      if not found then fail("unknown input '%s'", tostring(k)) end
    end
  elseif #args > #o.inputs then
    fail('the model takes %d inputs, got %d', #o.inputs, #args)
  end
  local ctx = {opset = o.opset, dir = o.dir, module = self, training = self.training}
  local saved = M.kv
  M.kv = kv
  local ok, err = pcall(M.run_graph, ctx, o.graph, env)
  M.kv = saved
  if not ok then error(err, 0) end
  local res = {}
  for i, v in ipairs(o.graph.outputs) do res[i] = env[v.name] end
  return unpack(res, 1, #o.graph.outputs)
end

--- Names of the graph inputs and outputs.
function OnnxModule:input_names()
  local t = {}
  for i, v in ipairs(rawget(self, '_onnx').inputs) do t[i] = v.name end
  return t
end
function OnnxModule:output_names()
  local t = {}
  for i, v in ipairs(rawget(self, '_onnx').graph.outputs) do t[i] = v.name end
  return t
end

------------------------------------------------------------------ entry points

--- Decodes model bytes (a string) into an OnnxModule; opts.dir is the
-- folder external data is read from.
function M.load_bytes(bytes, opts)
  return OnnxModule(reader.model(bytes), opts)
end

--- flow.onnx.load(path): the model as an nn.Module.
function M.load(path, opts)
  if type(path) ~= 'string' or path == '' then fail('load: expected a file path, got %s', tostring(path)) end
  require('oneflow._args').check_options('onnx.load', opts, {})
  return OnnxModule((reader.read(path)), {dir = require('oneflow.utils.atomic').dir_of(path)})
end

--- flow.onnx.run(path_or_module, inputs): the outputs of one run, in eval mode
-- and without autograd.
function M.run(model, inputs)
  if type(model) == 'string' then model = M.load(model) end
  if not module.is_module(model) then fail('run: expected a path or a loaded model, got %s', type(model)) end
  require('oneflow._args').arg('onnx.run', 2, 'inputs', inputs, 'tensor|table|nil')
  model:eval()
  if is_tensor(inputs) then inputs = {inputs} end
  local F = flow()
  local res
  F.no_grad(function() res = {model(inputs or {})} end)
  return unpack(res, 1, table.maxn(res))
end

return M
