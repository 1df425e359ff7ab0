-- edit_child.lua -- the child process of spec/graph/edit_spec.lua: applies
-- the single-field edits first..last (1-based, in ir_edits order) to a
-- saved graph, loads each edited file and runs what loads. Prints, flushed,
-- "E i" before trying edit i and "R i load|run|ok message" after it, so
-- that the parent sees which edit a crash (a signal) interrupted.
--   luajit spec/graph/edit_child.lua graph.ofg inputs.safetensors work.ofg first last
local flow = require 'oneflow'
local edits = require 'spec.graph.ir_edits'

local path, inputs, work, first, last = arg[1], arg[2], arg[3], tonumber(arg[4]), tonumber(arg[5])
local f = assert(io.open(path, 'rb'))
local file = f:read('*a')
f:close()
local list, rec = edits.edits(file)
local ins = flow.load(inputs)
local args = {}
for i = 1, #ins do args[i] = ins[i] end

local function one_line(s) return (tostring(s):gsub('[\r\n]', ' ')) end

for i = first, math.min(last, #list) do
  local s = edits.apply(file, rec, list[i])
  if s then
    local t0, w0 = os.clock(), os.time()
    io.stdout:write('E ', i, '\n')
    io.stdout:flush()
    local w = assert(io.open(work, 'wb'))
    w:write(s)
    w:close()
    local ok, h = pcall(flow.nn.Graph.load, work)
    if not ok then
      io.stdout:write('R ', i, ' load ', one_line(h), '\n')
    else
      local rok, err = pcall(h, unpack(args))
      io.stdout:write('R ', i, rok and ' ok ' or ' run ', rok and '' or one_line(err), '\n')
    end
    if os.clock() - t0 > 0.5 or os.time() - w0 >= 2 then
      io.stdout:write(('SLOW %d %.1fs %s\n'):format(i, os.clock() - t0, edits.describe(list[i])))
    end
    io.stdout:flush()
    h = nil   -- luacheck: ignore
    collectgarbage()
  end
end
io.stdout:write('DONE\n')
