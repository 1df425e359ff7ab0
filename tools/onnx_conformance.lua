-- Runs ONNX backend node test cases with flow.onnx.load (driven by
-- tools/onnx_conformance.sh; doc/onnx.md "Conformance").
--   luajit tools/onnx_conformance.lua NODE_DIR RESULTS_FILE [case ...]
-- For each case folder (model.onnx + test_data_set_*/input_*.pb, output_*.pb)
-- it appends one line to RESULTS_FILE:
--   START <case>                       before the case runs (a crash leaves it last)
--   <status> <case> <op> <message>     status: pass | fail | unsupported
-- Cases already in RESULTS_FILE are skipped, so the shell script can restart
-- it after a crash. Tolerance: |got - want| <= atol + rtol * |want| with
-- rtol = 1e-3, atol = 1e-5 (ONNX_RTOL / ONNX_ATOL override); NaN matches NaN;
-- integer and bool outputs must be equal; dtypes and shapes must match.
local flow = require 'oneflow'
local reader = require 'oneflow.onnx.reader'
local I = require 'oneflow.onnx.import'

local node_dir, results = arg[1], arg[2]
if not node_dir or not results then
  io.stderr:write('usage: luajit tools/onnx_conformance.lua NODE_DIR RESULTS_FILE [case ...]\n')
  os.exit(2)
end
local RTOL = tonumber(os.getenv('ONNX_RTOL') or '') or 1e-3
local ATOL = tonumber(os.getenv('ONNX_ATOL') or '') or 1e-5

local function read(path)
  local fh = io.open(path, 'rb')
  if not fh then return nil end
  local s = fh:read('*a')
  fh:close()
  return s
end

local function list(dir, pattern)
  local out = {}
  local p = io.popen('ls -1 "' .. dir .. '" 2>/dev/null')
  for line in p:lines() do
    if not pattern or line:match(pattern) then out[#out + 1] = line end
  end
  p:close()
  table.sort(out)
  return out
end

local done = {}
do
  local s = read(results) or ''
  for line in s:gmatch('[^\n]+') do
    local status, case = line:match('^(%S+) (%S+)')
    if status and status ~= 'START' then done[case] = true end
    if status == 'START' then done[case] = done[case] or 'started' end
  end
end

local out = assert(io.open(results, 'a'))
local function emit(line)
  out:write(line, '\n')
  out:flush()
end

local function op_of(m, case)
  local types, seen = {}, {}
  for _, n in ipairs(m.graph.nodes) do
    if not seen[n.op_type] then seen[n.op_type] = true; types[#types + 1] = n.op_type end
  end
  if #types == 1 then return types[1] end
  if case:match('_expanded') then return 'expanded' end
  -- the op the case is named after, when the graph has it
  local lower = case:gsub('^test_', ''):lower():gsub('_', '')
  for _, t in ipairs(types) do
    if lower:sub(1, #t) == t:lower() then return t end
  end
  return types[#types] or '?'
end

local function compare(got, want, what)
  if not flow.is_tensor(got) then return ('%s: got a %s, not a tensor'):format(what, type(got)) end
  if got.dtype ~= want.dtype then
    return ('%s: dtype %s, expected %s'):format(what, got.dtype.name, want.dtype.name)
  end
  local gs, ws = got:size():totable(), want:size():totable()
  if table.concat(gs, 'x') ~= table.concat(ws, 'x') or #gs ~= #ws then
    return ('%s: shape [%s], expected [%s]'):format(what, table.concat(gs, ','), table.concat(ws, ','))
  end
  if want:numel() == 0 then return nil end
  if want.dtype.is_floating_point then
    local g, w = got:to(flow.float64), want:to(flow.float64)
    local both_nan = g:isnan():logical_and(w:isnan())
    local diff = (g - w):abs()
    local tol = w:abs() * RTOL + ATOL
    local ok = diff:le(tol):logical_or(both_nan):logical_or(g:eq(w))
    if not ok:all():item() then
      -- the largest error among the elements that fail (inf - inf elsewhere is NaN)
      local bad = diff:masked_fill(ok, 0):max():item()
      return ('%s: max abs error %.3g'):format(what, bad)
    end
    return nil
  end
  if not got:eq(want):all():item() then return what .. ': values differ' end
  return nil
end

-- a test value: a TensorProto, or a SequenceProto of tensors for a sequence input
local IO = require 'oneflow.onnx.import_ops'
local function sequence(sq, dir)
  local items = {}
  for i, t in ipairs(sq.tensor_values) do items[i] = I.tensor(t, dir) end
  if #sq.sequence_values > 0 then I.unsupported('sequences of sequences') end
  return IO.seq(items)
end
local function value_of(s, v, dir)
  if v.kind == 'optional' then
    local o = reader.decode(s, 'Optional')
    if o.tensor_value then return IO.opt(I.tensor(o.tensor_value, dir)) end
    if o.sequence_value then return IO.opt(sequence(o.sequence_value, dir)) end
    return IO.opt(nil)
  end
  if v.kind == 'sequence' then return sequence(reader.decode(s, 'Sequence'), dir) end
  local t = reader.decode(s, 'Tensor')
  -- ONNX writes the bfloat16 cases' data as UINT16 (numpy has no bfloat16):
  -- the same 2-byte bit patterns, read as the bfloat16 the model declares
  if t.data_type == 4 and v.elem_type == 16 then t.data_type = 16 end
  return I.tensor(t, dir)
end

local function run_case(case)
  local dir = node_dir .. '/' .. case
  local m = reader.model(assert(read(dir .. '/model.onnx'), 'no model.onnx'))
  local op = op_of(m, case)
  local ok, res = pcall(function()
    for _, v in ipairs(m.graph.inputs) do
      if v.kind ~= 'tensor' and v.kind ~= 'sequence' and v.kind ~= 'optional' then
        I.unsupported("input '%s' of %s type", v.name, tostring(v.kind))
      end
    end
    for _, v in ipairs(m.graph.outputs) do
      if v.kind ~= 'tensor' and v.kind ~= 'sequence' and v.kind ~= 'optional' then
        I.unsupported("output '%s' of %s type", v.name, tostring(v.kind))
      end
    end
    local net = I.OnnxModule(m, {dir = dir})
    net:eval()
    local sets = list(dir, '^test_data_set_')
    if #sets == 0 then error('no test_data_set_*') end
    local ninit = {}
    for _, t in ipairs(m.graph.initializers) do ninit[t.name] = true end
    for _, set in ipairs(sets) do
      local sd = dir .. '/' .. set
      local inputs = {}
      local k = 0
      for _, v in ipairs(m.graph.inputs) do
        if not ninit[v.name] then
          local s = read(('%s/input_%d.pb'):format(sd, k))
          k = k + 1
          if s then inputs[v.name] = value_of(s, v, sd) end
        end
      end
      local outs
      flow.no_grad(function() outs = {net(inputs)} end)
      for i = 1, #m.graph.outputs do
        local s = read(('%s/output_%d.pb'):format(sd, i - 1))
        if s then
          local want = value_of(s, m.graph.outputs[i], sd)
          local what = ('%s output %d'):format(set, i - 1)
          local err
          local got = outs[i]
          if type(want) == 'table' and want.opt then
            want = want.value
            if type(got) == 'table' and got.opt then got = got.value end
          end
          if want == nil then
            if got ~= nil then err = what .. ': expected an empty optional' end
          elseif type(want) == 'table' and want.seq then
            if type(got) ~= 'table' or not got.seq then err = what .. ': not a sequence'
            elseif got.n ~= want.n then err = ('%s: %d tensors, expected %d'):format(what, got.n, want.n)
            else
              for j = 1, want.n do err = err or compare(got[j], want[j], what .. '[' .. j .. ']') end
            end
          else
            err = compare(got, want, what)
          end
          if err then return {status = 'fail', msg = err} end
        end
      end
    end
    return {status = 'pass', msg = ''}
  end)
  if not ok then
    local msg = tostring(res):gsub('\n', ' ')
    local status = msg:match('^onnx: unsupported') and 'unsupported' or 'fail'
    return status, op, msg
  end
  return res.status, op, res.msg
end

local cases = {}
if #arg > 2 then
  for i = 3, #arg do cases[#cases + 1] = arg[i] end
else
  cases = list(node_dir, '^test_')
end
for _, case in ipairs(cases) do
  if done[case] == 'started' then
    emit(('fail %s ? crashed the process'):format(case))
  elseif not done[case] then
    emit('START ' .. case)
    local ok, status, op, msg = pcall(run_case, case)
    if not ok then status, op, msg = 'fail', '?', tostring(status):gsub('\n', ' ') end
    if tostring(msg):match('^onnx: unsupported') then status = 'unsupported' end
    emit(('%s %s %s %s'):format(status, case, op, (tostring(msg):sub(1, 300))))
    collectgarbage()
  end
end
out:close()
