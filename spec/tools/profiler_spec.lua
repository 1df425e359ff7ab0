-- flow.profiler: op events from the dispatcher, key averages, the Chrome
-- trace (parsed back by python3's json), and no effect on graph tracing.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn = flow.nn
local C = require('oneflow._C').C

-- the names of the events at depth 0 (ops the Lua code called)
local function names(evs)
  local r = {}
  for _, e in ipairs(evs) do if e.depth == 0 then r[#r + 1] = e.name end end
  return r
end

describe('flow.profiler', function()
  it('records each op with its name, depth, shapes and bytes', function()
    local x, w = flow.randn(3, 4), flow.randn(4, 5)
    local prof = flow.profiler.profile({record_shapes = true}, function()
      local y = x:matmul(w)
      local _ = y + 1
    end)
    local evs = {}
    for _, e in ipairs(prof:events()) do if e.depth == 0 then evs[#evs + 1] = e end end
    assert.are.same({'matmul', 'binary_scalar.add'}, names(evs))
    assert.are.equal('[3, 4], [4, 5]', evs[1].input_shapes)
    assert.are.equal('[3, 5]', evs[2].input_shapes)
    for _, e in ipairs(evs) do
      assert.are.equal(0, e.depth)
      assert.is_true(e.end_ns >= e.start_ns)
      assert.is_false(e.backward)
      assert.is_true(e.bytes_allocated >= 3 * 5 * 4)   -- at least its output
    end
    assert.is_true(evs[1].start_ns < evs[2].start_ns)
  end)

  it('nests ops inside ops and subtracts them from self time', function()
    local prof = flow.profiler.profile(function() flow.full({2, 3}, 7) end)
    local evs = prof:events()
    assert.are.same({'full'}, names(evs))
    assert.are.equal(2, #evs)
    assert.are.equal('fill_', evs[2].name)
    local outer, inner = evs[1], evs[2]
    assert.are.equal(0, outer.depth)
    assert.are.equal(1, inner.depth)
    assert.is_true(inner.start_ns >= outer.start_ns and inner.end_ns <= outer.end_ns)
    assert.are.equal(outer.end_ns - outer.start_ns - (inner.end_ns - inner.start_ns), outer.self_ns)
  end)

  it('records max pools (their own dispatch path) with and without indices', function()
    local F = nn.functional
    local x = flow.randn(1, 2, 6, 6)
    local want_v, want_i = F.max_pool2d(x, 2, {return_indices = true})
    local want = F.adaptive_max_pool2d(x, 3)
    local v, i, a
    local prof = flow.profiler.profile({record_shapes = true}, function()
      v, i = F.max_pool2d(x, 2, {return_indices = true})
      a = F.adaptive_max_pool2d(x, 3)
    end)
    H.close(v, want_v, 0)
    H.close(i, want_i, 0)
    H.close(a, want, 0)
    assert.are.same({'max_pool', 'adaptive_max_pool'}, names(prof:events()))
    assert.are.equal('[1, 2, 6, 6]', prof:events()[1].input_shapes)
  end)

  it('marks the ops of backward rules and can leave them out', function()
    local x = flow.randn(3, 4, {requires_grad = true})
    local prof = flow.profiler.profile(function() x:mul(2):sum():backward() end)
    local fwd, bwd = 0, 0
    for _, e in ipairs(prof:events()) do
      if e.backward then bwd = bwd + 1 elseif e.depth == 0 then fwd = fwd + 1 end
    end
    assert.are.equal(2, fwd)
    assert.is_true(bwd >= 2)
    local p2 = flow.profiler.profile({with_backward = false}, function() x:mul(2):sum():backward() end)
    assert.are.same({'binary_scalar.mul', 'reduce'}, names(p2:events()))
    for _, e in ipairs(p2:events()) do assert.is_false(e.backward) end
  end)

  it('averages by name and prints a sorted table', function()
    local net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    local x = flow.randn(5, 8)
    local prof = flow.profiler.profile({record_shapes = true, profile_memory = true}, function()
      for _ = 1, 3 do net(x) end
    end)
    local avg = prof:key_averages()
    local by = {}
    for _, r in ipairs(avg.rows) do by[r.key] = r end
    assert.are.equal(6, by.matmul.count)
    assert.are.equal(3, by['unary.relu'].count)
    H.close(by.matmul.cpu_time_avg, by.matmul.cpu_time_total / 6, 1e-9)
    local text = avg:table({sort_by = 'count', row_limit = 2})
    local lines = {}
    for l in text:gmatch('[^\n]+') do lines[#lines + 1] = l end
    assert.truthy(lines[2]:find('Name', 1, true) and lines[2]:find('# of Calls', 1, true))
    assert.truthy(lines[2]:find('CPU Mem', 1, true))
    -- two rows, the first with the most calls
    assert.are.equal(7, #lines)
    local first = tonumber(lines[4]:match('(%d+)%s*$'))
    local second = tonumber(lines[5]:match('(%d+)%s*$'))
    assert.is_true(first >= second)
    assert.truthy(lines[7]:find('Self CPU time total', 1, true))
    local bys = prof:key_averages({group_by_input_shape = true})
    local t2 = bys:table({sort_by = 'self_cpu_time_total'})
    assert.truthy(t2:find('[5, 8], [8, 16]', 1, true))
    H.raises(function() avg:table({sort_by = 'cpu_time'}) end, "unknown sort_by 'cpu_time'")
    H.raises(function() avg:table({sortby = 'count'}) end, "profiler.table: unknown option 'sortby'")
  end)

  it('exports a Chrome trace that parses as JSON with complete events', function()
    local path = os.tmpname() .. '.json'
    local x = flow.randn(4, 4)
    local prof = flow.profiler.profile({record_shapes = true}, function()
      flow.profiler.record_function('my_range', function() return x:matmul(x):relu() end)
    end)
    prof:export_chrome_trace(path)
    local range, ops_bytes = nil, 0
    for _, e in ipairs(prof:events()) do
      if e.user then range = e elseif e.depth == 0 then ops_bytes = ops_bytes + e.bytes_allocated end
    end
    assert.are.equal('my_range', range.name)
    assert.is_true(ops_bytes >= 2 * 16 * 4)
    assert.are.equal(ops_bytes, range.bytes_allocated)
    local p = io.popen(([[python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
ev = d['traceEvents']
for e in ev:
    assert e['ph'] == 'X' and e['dur'] >= 0 and e['ts'] >= 0, e
    assert isinstance(e['pid'], int) and isinstance(e['tid'], int), e
    assert 'depth' in e['args'], e
r = [e for e in ev if e['name'] == 'my_range'][0]
end_ = r['ts'] + r['dur'] + 1e-3
inside = [e['name'] for e in ev if e['name'] != 'my_range' and r['ts'] <= e['ts'] and e['ts'] + e['dur'] <= end_]
print(len(ev), r['cat'], ','.join(inside), [e for e in ev if e['name'] == 'matmul'][0]['args']['input_shapes'])
" %s]]):format(path))
    local out = p:read('*a')
    p:close()
    os.remove(path)
    assert.are.equal('3 user_annotation matmul,unary.relu [4, 4], [4, 4]\n', out)
  end)

  it('is off outside profile() and after an error inside it', function()
    local x = flow.randn(2)
    flow.profiler.profile(function() x:add(1) end)
    local n = tonumber(C.of_profiler_num_events())
    x:add(1)
    assert.are.equal(n, tonumber(C.of_profiler_num_events()))
    assert.is_false(flow.profiler.enabled())
    H.raises(function() flow.profiler.profile(function() error('boom') end) end, 'boom')
    assert.is_false(flow.profiler.enabled())
    local p = flow.profiler.profile()
    p:start()
    H.raises(function() p:start() end, 'already running')
    H.raises(function() p:events() end, 'stop the profile')
    p:stop()
    H.raises(function() flow.profiler.profile({record_shape = true}) end,
      "profiler.profile: unknown option 'record_shape'", "'record_shapes'")
  end)

  it('leaves nn.Graph tracing as it was and sees the graph run ops', function()
    local net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    local G = nn.Graph:subclass('ProfG')
    function G:__init(m) nn.Graph.__init(self); self.m = m end
    function G:build(x) return self.m(x):softmax(2) end
    local x = flow.randn(2, 4)
    local plain = G(net)
    local want = plain(x)
    local g = G(net)
    local got
    local prof = flow.profiler.profile(function() got = g(x) end)
    H.close(got, want, 1e-6)
    assert.are.equal(C.of_graph_num_nodes(plain:_graph()), C.of_graph_num_nodes(g:_graph()))
    assert.are.equal(plain:ir(1):gsub('\n  passes.-\n', '\n'), g:ir(1):gsub('\n  passes.-\n', '\n'))
    local n = 0
    for _, e in ipairs(prof:events()) do if e.name == 'addmm' then n = n + 1 end end   -- eval: nn.Linear's addmm
    assert.is_true(n >= 2)
    -- a compiled graph's run, profiled
    local p2 = flow.profiler.profile(function() g(x) end)
    local seen = {}
    for _, e in ipairs(p2:events()) do seen[e.op] = true end
    assert.is_true(seen.addmm == true)
  end)
end)
