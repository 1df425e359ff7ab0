-- oneflow.onnx: export of models to ONNX (doc/onnx.md).
--
--   flow.onnx.export(model, example_inputs, 'model.onnx', {opset = 17,
--     input_names = {'input'}, output_names = {'output'},
--     dynamic_axes = {input = {[1] = 'batch'}, output = {[1] = 'batch'}}})
--
-- The model (an nn.Module, a plain function, or an object with a `build`
-- method such as an nn.Graph) runs once, eagerly, in eval mode and without
-- autograd, on example_inputs (a tensor or a list; non-tensor entries are
-- passed as they are). Every op it runs is recorded (oneflow.onnx.tracer)
-- and mapped to ONNX nodes (oneflow.onnx.ops); parameters and other
-- constants become initializers. The file is written atomically.
--
-- flow.onnx.trace(model, example_inputs[, opts]) gives the model as a Lua
-- table without writing it; flow.onnx.encode(model_table) its bytes;
-- flow.onnx.save(model_table, path) writes it.
local T = require 'oneflow.tensor'
local P = require 'oneflow.utils.posix'
local module = require 'oneflow.nn.module'
local pb = require 'oneflow.onnx.protobuf'
local graph = require 'oneflow.onnx.graph'
local tracer = require 'oneflow.onnx.tracer'
local ops = require 'oneflow.onnx.ops'

local C = P.C
local is_tensor, key = T.is_tensor, graph.key

local M = {}
M.ops = ops
M.protobuf = pb

M.DEFAULT_OPSET = 17
M.MIN_OPSET, M.MAX_OPSET = 14, 21
-- IR version released with each opset (onnx/helper.py's VERSION_TABLE)
local IR_VERSION = {[14] = 7, [15] = 8, [16] = 8, [17] = 8, [18] = 8, [19] = 9, [20] = 9, [21] = 10}

-- errors carry no position: the message names what is wrong
local function fail(msg) error('onnx.export: ' .. msg, 0) end

------------------------------------------------------------------ options
local function check_names(list, what)
  if list == nil then return {} end
  if type(list) == 'string' then list = {list} end
  if type(list) ~= 'table' then fail(('%s must be a list of strings'):format(what)) end
  local seen = {}
  for i, n in ipairs(list) do
    if type(n) ~= 'string' or n == '' then fail(('%s[%d] must be a non-empty string'):format(what, i)) end
    if seen[n] then fail(('%s has %q twice'):format(what, n)) end
    seen[n] = true
  end
  return list
end

local function options(opts)
  local known = {opset = true, opset_version = true, input_names = true, output_names = true,
                 dynamic_axes = true, do_constant_folding = true, doc_string = true,
                 producer_name = true, model_name = true}
  opts = require('oneflow._args').check_options('onnx.export', opts, known)
  local opset = opts.opset or opts.opset_version or M.DEFAULT_OPSET
  if type(opset) ~= 'number' or opset ~= math.floor(opset) or opset < M.MIN_OPSET or opset > M.MAX_OPSET then
    fail(('opset must be an integer from %d to %d, got %s'):format(M.MIN_OPSET, M.MAX_OPSET, tostring(opset)))
  end
  local dyn = opts.dynamic_axes or {}
  if type(dyn) ~= 'table' then fail('dynamic_axes must be a table {name = {[dim] = "param"}}') end
  return {opset = opset, input_names = check_names(opts.input_names, 'input_names'),
          output_names = check_names(opts.output_names, 'output_names'), dynamic_axes = dyn,
          doc_string = opts.doc_string, producer_name = opts.producer_name,
          model_name = opts.model_name}
end

-- {[dim] = 'param'} or {dim, ...} (1-based dims) -> {[axis0] = 'param'}
local function dynamic_dims(spec, name, rank)
  local res = {}
  if spec == nil then return res end
  if type(spec) ~= 'table' then fail(('dynamic_axes[%q] must be a table'):format(name)) end
  for k, v in pairs(spec) do
    local d, param
    if type(v) == 'string' then d, param = k, v
    elseif type(v) == 'number' then d, param = v, nil
    else fail(('dynamic_axes[%q]: expected {[dim] = "name"} or {dim, ...}'):format(name)) end
    if type(d) ~= 'number' or d ~= math.floor(d) or d == 0 or d > rank or d < -rank then
      fail(('dynamic_axes[%q]: dim %s out of range for a %d-d tensor'):format(name, tostring(d), rank))
    end
    local ax = d > 0 and d - 1 or rank + d
    res[ax] = param or (name .. '_dim' .. (ax + 1))
  end
  return res
end

local function value_info(name, x, dyn)
  local dims = {}
  for i, s in ipairs(x:size():totable()) do dims[i] = dyn[i - 1] or s end
  local et = pb.DATA_TYPE[x.dtype.name]
  if not et then fail(('%s has dtype %s, which ONNX cannot describe'):format(name, x.dtype.name)) end
  return {name = name, elem_type = et, dims = dims}
end

------------------------------------------------------------------ tracing
-- the modules a model holds, with the prefix of their names: the module
-- itself, or an nn.Graph's module attributes (self.model = ... in __init:
-- named "model.0.weight" as graph:save names them)
local function modules_of(model)
  if module.is_module(model) then return {{'', model}} end
  local list = {}
  if type(model) == 'table' and type(model.build) == 'function' then
    for k, v in pairs(model) do
      if type(k) == 'string' and module.is_module(v) then list[#list + 1] = {k .. '.', v} end
    end
    table.sort(list, function(a, b) return a[1] < b[1] end)
  end
  return list
end

local function callable(model)
  if module.is_module(model) then return function(...) return model(...) end end
  if type(model) == 'function' then return model end
  if type(model) == 'table' and type(model.build) == 'function' then
    return function(...) return model:build(...) end
  end
  if type(model) == 'table' and getmetatable(model) and getmetatable(model).__name == 'LoadedGraph' then
    fail('a loaded graph (flow.nn.Graph.load) holds no model code to trace: export the nn.Graph '
         .. 'object (or its modules) before graph:save')
  end
  fail('expected an nn.Module, a function or an object with a build method, got ' .. type(model))
end

local function parameter_names(model)
  local names = {}
  for _, e in ipairs(modules_of(model)) do
    local prefix, m = e[1], e[2]
    for name, p in m:named_parameters() do names[key(p)] = names[key(p)] or prefix .. name end
    for name, b in m:named_buffers() do names[key(b)] = names[key(b)] or prefix .. name end
  end
  return names
end

-- eval mode for the trace, and scope hooks naming nodes after modules
local function prepare_modules(model, g)
  local modes, handles = {}, {}
  for _, e in ipairs(modules_of(model)) do
    local prefix, top = e[1], e[2]
    for name, m in top:named_modules() do
      local scope = prefix == '' and name or (name == '' and prefix:sub(1, -2) or prefix .. name)
      modes[#modes + 1] = {m, rawget(m, 'training')}
      handles[#handles + 1] = m:register_forward_pre_hook(function()
        g.scope[#g.scope + 1] = scope
      end)
      handles[#handles + 1] = m:register_forward_hook(function()
        g.scope[#g.scope] = nil
      end)
    end
    top:eval()
  end
  return function()
    for i = #handles, 1, -1 do handles[i].remove() end
    for _, e in ipairs(modes) do rawset(e[1], 'training', e[2]) end
  end
end

local function flatten_outputs(res)
  local outs = {}
  for i = 1, res.n do
    local v = res[i]
    if is_tensor(v) then outs[#outs + 1] = v
    elseif type(v) == 'table' and getmetatable(v) == nil then
      for j, e in ipairs(v) do
        if not is_tensor(e) then fail(('output %d[%d] is a %s, not a tensor'):format(i, j, type(e))) end
        outs[#outs + 1] = e
      end
    elseif v ~= nil then
      fail(('output %d is a %s, not a tensor'):format(i, type(v)))
    end
  end
  if #outs == 0 then fail('the model returned no tensor') end
  return outs
end

--- Traces model on example_inputs; returns the ONNX model as a Lua table
-- (see oneflow.onnx.protobuf for its layout).
function M.trace(model, example_inputs, opts)
  local o = options(opts)
  local fn = callable(model)
  local args, n = {}, 0
  if is_tensor(example_inputs) then
    args, n = {example_inputs}, 1
  elseif type(example_inputs) == 'table' and getmetatable(example_inputs) == nil then
    n = table.maxn(example_inputs)
    for i = 1, n do args[i] = example_inputs[i] end
  else
    fail('example_inputs must be a tensor or a list of inputs, got ' .. type(example_inputs))
  end

  local g = graph.new({opset = o.opset, param_names = parameter_names(model)})
  -- graph inputs
  local ntensors = 0
  for i = 1, n do if is_tensor(args[i]) then ntensors = ntensors + 1 end end
  if ntensors == 0 then fail('example_inputs hold no tensor') end
  if #o.input_names > ntensors then
    fail(('%d input_names for %d tensor inputs'):format(#o.input_names, ntensors))
  end
  local k = 0
  for i = 1, n do
    local x = args[i]
    if is_tensor(x) then
      k = k + 1
      local name = o.input_names[k] or (ntensors == 1 and 'input' or ('input_' .. k))
      if g.dyn[key(x)] then fail(('example input %d is the same tensor as an earlier one'):format(i)) end
      if g.param_names[key(x)] then
        fail(('example input %d is the model parameter %s'):format(i, g.param_names[key(x)]))
      end
      g.used_names[name] = true
      g:bind(x, name)
      local dyn = dynamic_dims(o.dynamic_axes[name], name, x:dim())
      for ax, _ in pairs(dyn) do
        g.dim_sources[#g.dim_sources + 1] = {name = name, axis = ax, size = x:size(ax + 1)}
      end
      g.inputs[#g.inputs + 1] = value_info(name, x, dyn)
    end
  end
  for _, t in ipairs({o.input_names, o.output_names}) do
    for _, name in ipairs(t) do g.used_names[name] = true end
  end
  for name in pairs(o.dynamic_axes) do
    local ok = false
    for _, vi in ipairs(g.inputs) do if vi.name == name then ok = true end end
    for i = 1, #o.output_names do if o.output_names[i] == name then ok = true end end
    if not ok and name ~= 'output' and not tostring(name):match('^output_%d+$') then
      fail(('dynamic_axes names %s, which is neither an input nor an output name'):format(tostring(name)))
    end
  end

  -- run
  local restore = prepare_modules(model, g)
  local flow = package.loaded.oneflow
  local grad = flow.is_grad_enabled()
  flow.set_grad_enabled(false)
  -- quantized modules export in QDQ form once flow.quantization is loaded
  local extra = package.loaded['oneflow.quantization.modules'] and require('oneflow.onnx.quantized').rules()
  local ok, res = pcall(tracer.run, g, ops.rules, function() return fn(unpack(args, 1, n)) end, ops.unfold,
                        extra)
  flow.set_grad_enabled(grad)
  restore()
  if not ok then
    -- positions inside oneflow say nothing to the user
    local msg = tostring(res):gsub('^[^:\n]*lua/oneflow/[^:\n]*:%d+: ', '')
    if not msg:find('onnx.export', 1, true) then
      msg = 'onnx.export: running the model on the example inputs failed: ' .. msg
    elseif msg:sub(1, 13) ~= 'onnx.export: ' then
      -- "in block (Bad): onnx.export: ..." -> "onnx.export: in block (Bad): ..."
      msg = 'onnx.export: ' .. msg:gsub('onnx%.export: ', '', 1)
    end
    error(msg, 0)
  end

  -- outputs
  local outs = flatten_outputs(res)
  if #o.output_names > #outs then
    fail(('%d output_names for %d outputs'):format(#o.output_names, #outs))
  end
  local input_set, init_set, taken = {}, {}, {}
  for _, vi in ipairs(g.inputs) do input_set[vi.name] = true end
  for _, t in ipairs(g.initializers) do init_set[t.name] = true end
  local out_names = {}
  for i, x in ipairs(outs) do
    local name = o.output_names[i] or (#outs == 1 and 'output' or ('output_' .. i))
    if input_set[name] or init_set[name] then
      fail(('output name %q is already the name of an input or a constant'):format(name))
    end
    local v = g:val(x)
    if input_set[v] or init_set[v] or taken[v] or not g:produced(v) then
      v = g:node('Identity', {v})
    end
    g:rename(v, name)
    taken[name] = true
    out_names[i] = name
    local dyn = dynamic_dims(o.dynamic_axes[name], name, x:dim())
    g.outputs[i] = value_info(name, x, dyn)
  end
  g:prune(out_names)
  -- graph inputs the outputs do not depend on stay: they are part of the signature

  local flowv = flow and flow.__version__ or '0'
  return {
    ir_version = IR_VERSION[o.opset],
    opsets = {{domain = '', version = o.opset}},
    producer_name = o.producer_name or 'oneflow-lua',
    producer_version = flowv,
    doc_string = o.doc_string,
    graph = {name = o.model_name or (module.is_module(model) and model.__name) or 'graph',
             nodes = g.nodes, initializers = g.initializers, inputs = g.inputs, outputs = g.outputs},
  }
end

------------------------------------------------------------------ writing
--- The bytes of a model table (a Lua string).
function M.encode(m)
  require('oneflow._args').arg('onnx.encode', 1, 'model', m, 'table')
  require('oneflow._args').arg('onnx.encode', 1, 'model.graph', m.graph, 'table')
  return pb.tostring(pb.model(m))
end

--- Writes a model table to path atomically (oneflow.utils.atomic).
function M.save(m, path)
  if type(path) ~= 'string' or path == '' then fail('expected a file path, got ' .. tostring(path)) end
  if not pb.little_endian then fail('big-endian hosts are not supported') end
  local w = pb.model(m)
  local atomic = require 'oneflow.utils.atomic'
  local okh, h = pcall(atomic.open, path)
  if not okh then fail(h) end
  local ok, err = pcall(function()
    for i = 1, w.n do
      local s = w[i]
      if #s > 0 and tonumber(C.fwrite(s, 1, #s, h.f)) ~= #s then
        error('write failed (' .. P.strerror() .. ')', 0)
      end
    end
  end)
  if not ok then
    atomic.abort(h)
    fail(('%s: %s (the file was left as it was)'):format(path, tostring(err)))
  end
  ok, err = pcall(atomic.commit, h)
  if not ok then fail(('%s: %s'):format(path, tostring(err))) end
  return w.len
end

--- Traces a model on example inputs and writes it as an ONNX file (doc/onnx.md).
-- @function flow.onnx.export
-- @param model an nn.Module, a Lua function of the inputs, or an object with `build`
-- @param example_inputs a tensor or a list (non-tensors are passed as they are)
-- @tparam string path the .onnx file to write (atomically)
-- @tparam[opt] table opts `{opset = 17, input_names =, output_names =, dynamic_axes =,
-- do_constant_folding =}`
-- @treturn table the ONNX model table that was written
function M.export(model, example_inputs, path, opts)
  if type(path) ~= 'string' or path == '' then
    fail('expected a file path as third argument, got ' .. tostring(path))
  end
  local m = M.trace(model, example_inputs, opts)
  M.save(m, path)
  return m
end

--- Reads an ONNX file as an nn.Module whose forward runs the graph with our
-- ops (doc/onnx.md, "Import"); initializers are its named parameters.
-- @function flow.onnx.load
-- @tparam string path the .onnx file (external data is read next to it)
-- @tparam[opt] table opts no options yet
-- @treturn nn.Module the model (forward takes the graph inputs in order, or a table by name)
function M.load(path, opts) return require('oneflow.onnx.import').load(path, opts) end

--- Runs an ONNX model once, in eval mode and without autograd.
-- @function flow.onnx.run
-- @param model a path, or a module from flow.onnx.load
-- @param inputs a tensor, a list of tensors or a table of tensors by input name
-- @return the graph outputs, as several return values
function M.run(model, inputs)
  require('oneflow._args').arg('onnx.run', 1, 'model', model, 'table|string')
  return require('oneflow.onnx.import').run(model, inputs) end

--- Decodes an ONNX file into Lua tables (oneflow.onnx.reader).
-- @function flow.onnx.read
-- @tparam string path the .onnx file
-- @treturn table the model: ir_version, opsets, graph (nodes, initializers, inputs, outputs)
-- @treturn string the file's bytes
function M.read(path) return require('oneflow.onnx.reader').read(path) end

return M
