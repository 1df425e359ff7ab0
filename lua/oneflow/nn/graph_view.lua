-- oneflow.nn.graph_view: the compiled IR of an nn.Graph as Lua tables, as
-- Graphviz DOT text, and rendered by `dot` (graph:to_dot(), graph:render()).
--
--   local dot = g:to_dot()                 -- after the first call of g
--   g:render('g.svg')                      -- runs `dot -Tsvg`; .png/.pdf too
--   g:to_dot({params = false})             -- leave parameters and constants out
--   local ir = require('oneflow.nn.graph_view').ir(g)   -- {nodes =, values =, inputs =, outputs =}
--
-- DOT: graph inputs and outputs are ellipses, parameters/buffers notes,
-- constants grey boxes; each op is a box labelled with its op, its record
-- ("add", "dim=1" ...) and its output types (dtype[shape]); a global
-- tensor's placement and SBP follow the type. Nodes a pass fused (an
-- elementwise chain in one kernel, ReLU + max-pool) are filled orange with a
-- double border and "fused" in the label; nodes of the backward pass are
-- grey. Edges go from the node (or input) that made a value to each node
-- that reads it.
local ffi = require 'ffi'
local core = require 'oneflow._C'
local A = require 'oneflow._args'
local plot = require 'oneflow.utils.plot'

local C = core.C
local M = {}

local KINDS = {[0] = 'input', 'external', 'internal', 'handle'}

local function compiled(g, op)
  local last = rawget(g, '_last')
  if not last then A.fail(op .. ': the graph has not been compiled yet (call it once first)') end
  return last.g
end

--- ir(graph) -> {values = {[id] = {...}}, nodes = {{...}}, inputs = {ids}, outputs = {ids}}
-- Value ids are the IR's (0-based, as graph:ir() prints them as %id).
function M.ir(g, op)
  local cg = compiled(g, op or 'nn.Graph.ir')
  local vd, nd = ffi.new('of_graph_value_desc'), ffi.new('of_graph_node_desc')
  local out = {values = {}, nodes = {}, inputs = {}, outputs = {}}
  for v = 0, tonumber(C.of_graph_stat(cg, C.OF_GRAPH_NUM_VALUES)) - 1 do
    if C.of_graph_describe_value(cg, v, vd) ~= 0 then A.raise_c() end
    local shape = {}
    for k = 0, vd.ndim - 1 do shape[k + 1] = tonumber(vd.shape[k]) end
    out.values[v] = {id = v, kind = KINDS[vd.kind] or 'internal', is_const = vd.is_const ~= 0,
                     dtype = ffi.string(C.of_dtype_name(vd.dtype)), shape = shape,
                     producer = vd.producer, index = vd.index,
                     name = vd.name ~= nil and ffi.string(vd.name) or nil,
                     note = vd.note ~= nil and ffi.string(vd.note) or nil}
  end
  for i = 0, C.of_graph_node_slots(cg) - 1 do
    if C.of_graph_describe_node(cg, i, nd) ~= 0 then A.raise_c() end
    if nd.dead == 0 then
      local ins, outs = {}, {}
      for k = 0, nd.nin - 1 do ins[k + 1] = nd['in'][k] end
      for k = 0, nd.nreal - 1 do outs[k + 1] = nd.out[k] end
      out.nodes[#out.nodes + 1] = {index = i, op = ffi.string(nd.op), inputs = ins, outputs = outs,
                                   attrs = ffi.string(nd.attrs), fused = nd.fused ~= 0,
                                   backward = nd.backward ~= 0, nmut = nd.nmut}
    end
  end
  for i = 0, C.of_graph_num_inputs(cg) - 1 do out.inputs[i + 1] = C.of_graph_io_value(cg, 0, i) end
  for i = 0, C.of_graph_num_outputs(cg) - 1 do out.outputs[i + 1] = C.of_graph_io_value(cg, 1, i) end
  return out
end

--- "float32[2, 3]" (and " <placement, sbp>" for a global tensor's shard)
function M.type_str(v)
  local s = v.dtype .. '[' .. table.concat(v.shape, ', ') .. ']'
  if v.note then s = s .. ' <' .. v.note .. '>' end
  return s
end

local function q(s)
  return '"' .. tostring(s):gsub('\\', '\\\\'):gsub('"', '\\"'):gsub('\n', '\\n') .. '"'
end

--- to_dot(graph, {params = true, name =}) -> DOT text
function M.to_dot(g, opts)
  opts = A.check_options('nn.Graph.to_dot', opts, {'params', 'name', 'rankdir'})
  local ir = M.ir(g, 'nn.Graph.to_dot')
  local show_params = opts.params ~= false
  local lines = {('digraph %s {'):format(q(opts.name or g.__name or 'Graph')),
                 ('  rankdir=%s;'):format(opts.rankdir or 'TB'),
                 '  node [fontname="Helvetica", fontsize=10];',
                 '  edge [fontname="Helvetica", fontsize=9];'}
  local function add(s) lines[#lines + 1] = '  ' .. s end
  local src = {}   -- value id -> DOT node id that provides it
  for i, v in ipairs(ir.inputs) do
    local id = 'in' .. i
    add(('%s [shape=ellipse, style=filled, fillcolor="#cfe2f3", label=%s];'):format(
      id, q(('input %d\n%s'):format(i, M.type_str(ir.values[v])))))
    src[v] = id
  end
  -- the nodes that read each value, for externals shown only when read
  for _, n in ipairs(ir.nodes) do
    for _, v in ipairs(n.inputs) do
      local val = ir.values[v]
      if v >= 0 and val and val.kind == 'external' and not src[v] and show_params then
        local id = 'p' .. v
        if val.is_const then
          add(('%s [shape=box, style="filled,dashed", fillcolor="#eeeeee", label=%s];'):format(
            id, q(('const %%%d\n%s'):format(v, M.type_str(val)))))
        else
          add(('%s [shape=note, style=filled, fillcolor="#fff2cc", label=%s];'):format(
            id, q(((val.name or ('extern %' .. v)) .. '\n' .. M.type_str(val)))))
        end
        src[v] = id
      end
    end
  end
  for _, n in ipairs(ir.nodes) do
    local id = 'n' .. n.index
    local types = {}
    for _, v in ipairs(n.outputs) do
      if v >= 0 and ir.values[v] then types[#types + 1] = M.type_str(ir.values[v]) end
    end
    local label = ('#%d %s%s'):format(n.index, n.op, n.fused and ' (fused)' or '')
    if n.attrs ~= '' then label = label .. '\n{' .. n.attrs .. '}' end
    if #types > 0 then label = label .. '\n' .. table.concat(types, '\n') end
    local style
    if n.fused then style = 'style="filled,bold", fillcolor="#f9cb9c", peripheries=2'
    elseif n.backward then style = 'style=filled, fillcolor="#d9d9d9"'
    else style = 'style=filled, fillcolor="#ffffff"' end
    add(('%s [shape=box, %s, label=%s];'):format(id, style, q(label)))
    for k, v in ipairs(n.inputs) do
      local val = v >= 0 and ir.values[v] or nil
      local from = val and (src[v] or (val.producer >= 0 and ('n' .. val.producer)) or nil)
      if from then
        if #n.inputs > 1 then add(('%s -> %s [label=%s];'):format(from, id, q('in' .. k)))
        else add(('%s -> %s;'):format(from, id)) end
      end
    end
    for _, v in ipairs(n.outputs) do if v >= 0 then src[v] = id end end
  end
  for i, v in ipairs(ir.outputs) do
    local id = 'out' .. i
    local val = ir.values[v]
    add(('%s [shape=ellipse, style=filled, fillcolor="#d9ead3", label=%s];'):format(
      id, q(('output %d\n%s'):format(i, val and M.type_str(val) or '?'))))
    local from = src[v] or (val and val.producer >= 0 and ('n' .. val.producer))
    if from then add(('%s -> %s;'):format(from, id)) end
  end
  lines[#lines + 1] = '}'
  return table.concat(lines, '\n') .. '\n'
end

--- Where `dot` is, or nil.
function M.dot_path()
  for dir in (os.getenv('PATH') or '/usr/bin:/bin'):gmatch('[^:]+') do
    local p = dir .. '/dot'
    local f = io.open(p, 'rb')
    if f then f:close(); return p end
  end
  return nil
end

local FORMATS = {svg = true, png = true, pdf = true, dot = true}

--- render(graph, path, {format =, params =}): runs Graphviz `dot`; the format
-- comes from the extension (.svg, .png, .pdf; .dot writes the text).
-- The file appears whole or not at all (written beside it, then renamed).
function M.render(g, path, opts)
  opts = A.check_options('nn.Graph.render', opts, {'format', 'params', 'name', 'rankdir'})
  if type(path) ~= 'string' or path == '' then
    A.fail('nn.Graph.render: expected a file path, got ' .. A.describe(path))
  end
  local fmt = opts.format or path:match('%.(%w+)$')
  if not FORMATS[fmt] then
    A.fail(('nn.Graph.render: unknown format %s (use .svg, .png, .pdf or .dot, or opts.format)'):format(tostring(fmt)))
  end
  local text = M.to_dot(g, {params = opts.params, name = opts.name, rankdir = opts.rankdir})
  if fmt == 'dot' then plot.write_atomic(path, text, 'nn.Graph.render'); return path end
  local dot = M.dot_path()
  if not dot then
    A.fail('nn.Graph.render: Graphviz `dot` was not found on PATH (install graphviz, e.g. '
           .. 'apt-get install graphviz; graph:to_dot() gives the text without it)')
  end
  local tmp = ('%s.tmp-%d'):format(path, math.random(0, 2 ^ 30))
  local dotfile = tmp .. '.dot'
  plot.write_atomic(dotfile, text, 'nn.Graph.render')
  local function sh(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
  local cmd = ('%s -T%s -o %s %s 2>&1'):format(sh(dot), fmt, sh(tmp), sh(dotfile))
  local p = io.popen(cmd)
  local msg = p:read('*a')
  local ok, _, code = p:close()
  os.remove(dotfile)
  -- LuaJIT's close gives true for exit 0 (5.2 compat) or the status
  local good = (ok == true and (code == nil or code == 0)) or ok == 0
  if not good then
    os.remove(tmp)
    A.fail(('nn.Graph.render: dot failed: %s'):format(msg ~= '' and msg or tostring(code)))
  end
  local rok, rerr = os.rename(tmp, path)
  if not rok then
    os.remove(tmp)
    A.fail(('nn.Graph.render: cannot rename %s over %s (%s)'):format(tmp, path, tostring(rerr)))
  end
  return path
end

return M
