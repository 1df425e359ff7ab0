-- Saved graphs are validated: every single-field edit of a real saved
-- graph's IR record (each field of every value and node record set to
-- absent / -1 / huge / out of range, the checksum recomputed as a crafted
-- file would) either loads and runs -- to a result or a clean error -- or
-- fails to load with an error naming the node (index and op) or value it
-- found wrong. The edits run in a child process (spec/graph/edit_child.lua),
-- so that a crash is a failed edit here, not the end of busted.
local flow = require 'oneflow'
local edits = require 'spec.graph.ir_edits'
local nn, F = flow.nn, flow.nn.functional

local Train = nn.Graph:subclass('EditTrain')
function Train:__init(m, opt) nn.Graph.__init(self); self.m = m; self:add_optimizer(opt) end
function Train:build(x, y)
  local loss = F.cross_entropy(self.m(x), y)
  loss:backward()
  return loss
end

local Eval = nn.Graph:subclass('EditEval')
function Eval:__init(w) nn.Graph.__init(self); self.w = w end
function Eval:build(x)
  local z = flow.matmul(x, self.w) + flow.full({2, 3}, 0.5)
  return F.softmax(z, 2), z:sum()
end

local function read(path)
  local f = assert(io.open(path, 'rb'))
  local s = f:read('*a')
  f:close()
  return s
end

-- Runs the child over all edits of `graph`, restarting it after a crash.
-- Returns the edit list and results[i] = {kind, msg} (kind 'crash' when the
-- child died during edit i).
local function run_edits(dir, graph, inputs)
  local list = edits.edits(read(graph))
  local results, first = {}, 1
  local lua_path = os.getenv('LUA_PATH') or './?.lua;./?/init.lua;;'
  local restarts = 0
  while first <= #list and restarts < 50 do
    local cmd = ("LUA_PATH='%s' OMP_NUM_THREADS=1 timeout 300 luajit spec/graph/edit_child.lua "
                 .. "'%s' '%s' '%s/work.ofg' %d %d 2>&1"):format(lua_path, graph, inputs, dir, first,
                                                                 #list)
    local p = assert(io.popen(cmd))
    local current, done = nil, false
    for line in p:lines() do
      local i = line:match('^E (%d+)$')
      if i then current = tonumber(i) end
      local j, kind, msg = line:match('^R (%d+) (%a+) ?(.*)$')
      if j then results[tonumber(j)] = {kind, msg}; current = nil end
      if line == 'DONE' then done = true end
    end
    p:close()
    if done then break end
    if current then
      results[current] = {'crash', 'the child process died (signal or timeout)'}
      first = current + 1
    else
      -- died outside an edit (startup): report it once and stop
      results[first] = {'crash', 'the child process failed outside an edit'}
      break
    end
    restarts = restarts + 1
  end
  return list, results
end

-- What an edit's outcome must look like; nil when it is acceptable.
local function judge(e, r)
  local f, kind, msg = e.f, r[1], r[2]
  if kind == 'crash' then return msg end
  if kind == 'ok' then return nil end
  if kind == 'run' then
    if msg == '' or msg:find('attempt to', 1, true) then return 'unclean run error: ' .. msg end
    return nil
  end
  if not msg:find('nn.Graph.load', 1, true) then return 'load error without nn.Graph.load: ' .. msg end
  if f.node then
    -- names this node or, when the edit breaks what a later node reads,
    -- the later node; an edited output may leave a graph output unmade
    local n, op = msg:match('node (%d+) %(([^)]+)%)')
    if n and tonumber(n) >= f.node + 1 then
      if tonumber(n) == f.node + 1 and op ~= f.op and f.what ~= 'op name length' then
        return 'names the node with another op: ' .. msg
      end
      return nil
    end
    if f.what == 'out' and msg:find('an output is never computed', 1, true) then return nil end
    if f.layout and msg:find('trailing bytes', 1, true) then return nil end
    return 'load error does not name the node: ' .. msg
  end
  if f.value then
    local v = tonumber(msg:match('value %%(%d+):'))
    if v == f.value or (f.layout and v and v > f.value) or msg:find('node %d+ %(') then return nil end
    if msg:find('external', 1, true) or msg:find('input', 1, true) or msg:find('output', 1, true)
       or msg:find('bad counts', 1, true) or msg:find('trailing bytes', 1, true) then
      return nil
    end
    return 'load error does not name the value: ' .. msg
  end
  return nil
end

local function check_all(dir, name, graph, inputs)
  local list, results = run_edits(dir, graph, inputs)
  local bad, counts = {}, {ok = 0, run = 0, load = 0, crash = 0}
  for i, e in ipairs(list) do
    local r = results[i]
    if r then
      counts[r[1]] = (counts[r[1]] or 0) + 1
      local why = judge(e, r)
      if why then bad[#bad + 1] = edits.describe(e) .. ': ' .. why end
    end
  end
  local tried = counts.ok + counts.run + counts.load + counts.crash
  assert.is_true(tried > 100, name .. ': too few edits tried (' .. tried .. ')')
  assert.are.equal(0, #bad, ('%s: %d of %d edits misbehave:\n%s'):format(name, #bad, tried,
                   table.concat(bad, '\n', 1, math.min(#bad, 40))))
  return counts
end

describe('saved graphs are validated', function()
  local dir = os.tmpname()
  os.remove(dir)
  os.execute('mkdir -p ' .. dir)

  it('every single-field edit of an eval graph (matmul, full, softmax) is safe', function()
    flow.manual_seed(3)
    local g = Eval(flow.randn(4, 3))
    local x = flow.randn(2, 4)
    g(x)
    g:save(dir .. '/eval.ofg')
    flow.save({x}, dir .. '/eval_in.safetensors')
    local c = check_all(dir, 'eval graph', dir .. '/eval.ofg', dir .. '/eval_in.safetensors')
    assert.is_true(c.load > 0 and c.crash == 0)
  end)

  it('every single-field edit of a train graph (conv, batch norm, pool, backward, sgd) is safe',
     function()
    flow.manual_seed(21)
    local m = nn.Sequential(nn.Conv2d(1, 2, 3, {padding = 1}), nn.BatchNorm2d(2), nn.ReLU(),
                            nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2 * 2 * 2, 3))
    local g = Train(m, flow.optim.SGD(m:parameters(), {lr = 0.1, momentum = 0.9}))
    local x, y = flow.randn(2, 1, 4, 4), flow.randint(1, 4, {2})
    g(x, y)
    g:save(dir .. '/train.ofg')
    flow.save({x, y}, dir .. '/train_in.safetensors')
    local c = check_all(dir, 'train graph', dir .. '/train.ofg', dir .. '/train_in.safetensors')
    assert.is_true(c.load > 0 and c.crash == 0)
  end)
end)
