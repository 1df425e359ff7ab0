-- luacheck: ignore 212/self
local ffi = require 'ffi'
local flow = require 'oneflow'
local H = require 'spec.helpers'
local P = require 'oneflow.utils.posix'

local data = flow.utils.data

------------------------------------------------------------------ helpers
-- No child processes at all, running or zombie: waitpid(-1) says ECHILD.
local function assert_no_children()
  local st = ffi.new('int[1]')
  local r = P.C.waitpid(-1, st, P.WNOHANG)
  local e = ffi.errno()
  assert(r == -1 and e == P.ECHILD, ('child processes remain (waitpid -> %d, errno %d)'):format(r, e))
end

-- Every batch of an iteration as plain Lua data (tensors -> {dtype, shape, values}).
local function plain(v)
  if flow.is_tensor(v) then return {dtype = v.dtype.name, shape = H.shape(v), values = v:totable()} end
  if type(v) == 'table' then
    local r = {}
    for k, x in pairs(v) do r[k] = plain(x) end
    return r
  end
  return v
end

local function collect(loader, opts)
  local res = {}
  for a, b, c, d in loader:iter(opts) do res[#res + 1] = plain({a, b, c, d}) end
  return res
end

-- A dataset of Lua values: a table with a tensor, numbers, a string, a flag.
local Rich = data.Dataset:subclass('Rich')
function Rich:init(n) self.n = n end
function Rich:len() return self.n end
function Rich:get(i)
  return {x = flow.full({2, 3}, i), label = i % 3, weight = i / 4, name = 'item' .. i,
          even = i % 2 == 0, nested = {ids = flow.tensor({i, -i}, {dtype = flow.int64})}}
end

-- Several values per sample, plain numbers included.
local Pairs = data.Dataset:subclass('Pairs')
function Pairs:init(n) self.n = n end
function Pairs:len() return self.n end
function Pairs:get(i) return flow.tensor({i, 2 * i}, {dtype = flow.float64}), i end

------------------------------------------------------------------ datasets
describe('data: datasets', function()
  local X = flow.arange(20):reshape(10, 2):to(flow.float32)
  local Y = flow.arange(10)

  it('TensorDataset indexes every tensor along dim 1', function()
    local ds = data.TensorDataset(X, Y)
    assert.are.equal(10, ds:len())
    assert.are.equal(10, #ds)
    local x, y = ds:get(3)
    H.close(x, {4, 5})
    assert.are.equal(2, y:item())
    H.close(ds[10], {18, 19})
    H.raises(function() ds:get(11) end, 'index 11 out of range', 'size 10')
    H.raises(function() ds:get(0) end, 'out of range')
    H.raises(function() data.TensorDataset(X, flow.arange(3)) end, 'size mismatch')
    local one = data.TensorDataset(X)
    assert.are.equal(1, select('#', one:get(1)))
    assert.truthy(tostring(ds):find('TensorDataset', 1, true))
  end)

  it('Dataset:subclass gives classes with init, len, get and #', function()
    local ds = Rich(5)
    assert.are.equal(5, #ds)
    assert.are.equal('item2', ds:get(2).name)
    assert.is_true(data.isinstance(ds, data.Dataset))
    assert.is_true(data.isinstance(ds, Rich))
    assert.is_false(data.isinstance(ds, data.Sampler))
    local Bad = data.Dataset:subclass('Bad')
    H.raises(function() return #Bad() end, 'Bad', 'len')
    local Sub = Rich:subclass('Sub')
    function Sub:get(i) return Rich.get(self, i).label end
    assert.are.equal(1, Sub(4):get(4))
  end)

  it('Subset and ConcatDataset', function()
    local ds = data.TensorDataset(X, Y)
    local sub = data.Subset(ds, {10, 1, 5})
    assert.are.equal(3, #sub)
    assert.are.equal(9, select(2, sub:get(1)):item())
    local sub2 = data.Subset(ds, flow.tensor({2, 3}, {dtype = flow.int64}))
    assert.are.equal(2, select(2, sub2:get(2)):item())
    local cat = data.ConcatDataset({sub, sub2, ds})
    assert.are.equal(15, #cat)
    assert.are.equal(4, select(2, cat:get(3)):item())
    assert.are.equal(1, select(2, cat:get(4)):item())
    assert.are.equal(0, select(2, cat:get(6)):item())
    assert.are.equal(9, select(2, cat:get(15)):item())
    H.raises(function() cat:get(16) end, 'out of range')
  end)

  it('random_split by counts and by fractions, reproducibly', function()
    local ds = data.TensorDataset(flow.arange(11))
    flow.manual_seed(3)
    local parts = data.random_split(ds, {0.5, 0.3, 0.2})
    assert.are.same({6, 3, 2}, {#parts[1], #parts[2], #parts[3]})
    local seen = {}
    for _, p in ipairs(parts) do
      for i = 1, #p do
        local v = p:get(i):item()
        assert.is_nil(seen[v])
        seen[v] = true
      end
    end
    for v = 0, 10 do assert.is_true(seen[v]) end
    flow.manual_seed(3)
    local again = data.random_split(ds, {0.5, 0.3, 0.2})
    assert.are.same(parts[2].indices, again[2].indices)
    local a, b = unpack(data.random_split(ds, {7, 4}))
    assert.are.same({7, 4}, {#a, #b})
    H.raises(function() data.random_split(ds, {5, 5}) end, 'add up to 10', '11 samples')
  end)
end)

------------------------------------------------------------------ samplers
describe('data: samplers', function()
  local ds = data.TensorDataset(flow.arange(10))

  local function drain(s)
    local res = {}
    for i in s:iter() do res[#res + 1] = i end
    return res
  end

  it('SequentialSampler counts 1..n', function()
    local s = data.SequentialSampler(ds)
    assert.are.same({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, drain(s))
    assert.are.equal(10, #s)
  end)

  it('RandomSampler draws a permutation from the global generator', function()
    local s = data.RandomSampler(ds)
    flow.manual_seed(7)
    local a = drain(s)
    flow.manual_seed(7)
    local b = drain(s)
    assert.are.same(a, b)
    local sorted = {unpack(a)}
    table.sort(sorted)
    assert.are.same({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, sorted)
    assert.are_not.same(a, drain(s))   -- a new permutation each time
    local r = data.RandomSampler(ds, {replacement = true, num_samples = 25})
    local c = drain(r)
    assert.are.equal(25, #c)
    for _, i in ipairs(c) do assert.is_true(i >= 1 and i <= 10) end
    assert.are.equal(25, #drain(data.RandomSampler(ds, {num_samples = 25})))
  end)

  it('BatchSampler with and without drop_last', function()
    local b = data.BatchSampler(data.SequentialSampler(ds), 4, false)
    assert.are.same({{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10}}, drain(b))
    assert.are.equal(3, #b)
    local d = data.BatchSampler(data.SequentialSampler(ds), 4, true)
    assert.are.same({{1, 2, 3, 4}, {5, 6, 7, 8}}, drain(d))
    assert.are.equal(2, #d)
    assert.are.same({{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}}, drain(data.BatchSampler(data.SequentialSampler(ds), 5, true)))
    assert.are.same({{3, 1}, {2}}, drain(data.BatchSampler({3, 1, 2}, 2)))
    H.raises(function() data.BatchSampler(data.SequentialSampler(ds), 0) end, 'batch_size')
  end)
end)

------------------------------------------------------------------ loader
describe('data: DataLoader', function()
  local X = flow.arange(30):reshape(10, 3):to(flow.float32)
  local Y = flow.arange(10)
  local ds = data.TensorDataset(X, Y)

  it('batches tensors with the right shapes', function()
    local loader = data.DataLoader(ds, {batch_size = 4})
    assert.are.equal(3, #loader)
    assert.are.equal(3, loader:len())
    local shapes, labels = {}, {}
    for x, y in loader:iter() do
      shapes[#shapes + 1] = H.shape(x)
      labels[#labels + 1] = y:totable()
      assert.are.equal('int64', y.dtype.name)
    end
    assert.are.same({{4, 3}, {4, 3}, {2, 3}}, shapes)
    assert.are.same({{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}, labels)
    local dl = data.DataLoader(ds, {batch_size = 4, drop_last = true})
    assert.are.equal(2, #dl)
    assert.are.equal(2, #collect(dl))
    -- default batch_size 1
    local first = data.DataLoader(ds):iter()()
    assert.are.same({1, 3}, H.shape(first))
  end)

  it('collates tables, numbers, strings and booleans', function()
    local loader = data.DataLoader(Rich(6), {batch_size = 4})
    local it = loader:iter()
    local b = it()
    assert.are.same({4, 2, 3}, H.shape(b.x))
    H.close(b.x[3], flow.full({2, 3}, 3))
    assert.are.equal('int64', b.label.dtype.name)
    assert.are.same({1, 2, 0, 1}, b.label:totable())
    assert.are.equal('float32', b.weight.dtype.name)
    H.close(b.weight, {0.25, 0.5, 0.75, 1})
    assert.are.same({'item1', 'item2', 'item3', 'item4'}, b.name)
    assert.are.equal('bool', b.even.dtype.name)
    assert.are.same({false, true, false, true}, b.even:totable())
    assert.are.same({{1, -1}, {2, -2}, {3, -3}, {4, -4}}, b.nested.ids:totable())
    assert.are.same({2, 2, 3}, H.shape(it().x))
    assert.is_nil(it())
    -- several values per sample; numbers become an int64 tensor
    for x, i in data.DataLoader(Pairs(5), {batch_size = 5}):iter() do
      assert.are.equal('float64', x.dtype.name)
      assert.are.same({1, 2, 3, 4, 5}, i:totable())
      assert.are.equal('int64', i.dtype.name)
    end
    H.raises(function() data.default_collate({{a = 1}, {b = 1}}) end, 'default_collate')
  end)

  it('takes a custom collate_fn, sampler and batch_sampler', function()
    local loader = data.DataLoader(Pairs(4), {batch_size = 2, collate_fn = function(samples)
      local s = 0
      for _, smp in ipairs(samples) do s = s + smp[2] end
      return s, #samples
    end})
    assert.are.same({{3, 2}, {7, 2}}, collect(loader))
    local bs = data.DataLoader(ds, {batch_sampler = data.BatchSampler({10, 1, 2}, 2)})
    local got = collect(bs)
    assert.are.same({9, 0}, got[1][2].values)
    assert.are.same({1}, got[2][2].values)
    local sl = data.DataLoader(ds, {sampler = {5, 6, 7}, batch_size = 2})
    assert.are.same({4, 5}, collect(sl)[1][2].values)
    H.raises(function() data.DataLoader(ds, {batch_sampler = bs, batch_size = 3}) end, 'mutually exclusive')
    H.raises(function() data.DataLoader(ds, {sampler = {1}, shuffle = true}) end, 'mutually exclusive')
  end)

  it('shuffles reproducibly with flow.manual_seed', function()
    local loader = data.DataLoader(ds, {batch_size = 3, shuffle = true})
    flow.manual_seed(42)
    local a = collect(loader)
    local a2 = collect(loader)
    flow.manual_seed(42)
    local b = collect(loader)
    assert.are.same(a, b)
    assert.are_not.same(a, a2)
    local all = {}
    for _, batch in ipairs(a) do
      for _, v in ipairs(batch[2].values) do all[#all + 1] = v end
    end
    table.sort(all)
    assert.are.same({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, all)
  end)
end)

------------------------------------------------------------------ workers
describe('data: DataLoader workers', function()
  local X = flow.randn(37, 4, 5)
  local Y = flow.arange(37)
  local tds = data.TensorDataset(X, Y)

  local function compare_modes(ds, opts, epochs)
    local runs = {}
    for _, nw in ipairs({0, 2, 3}) do
      local o = {num_workers = nw}
      for k, v in pairs(opts) do o[k] = v end
      local loader = data.DataLoader(ds, o)
      flow.manual_seed(2024)
      local res = {}
      for e = 1, epochs or 2 do res[e] = collect(loader) end
      runs[#runs + 1] = res
      assert_no_children()
    end
    assert.are.same(runs[1], runs[2])
    assert.are.same(runs[1], runs[3])
    return runs[1]
  end

  it('give the same batches in the same order as num_workers = 0', function()
    for _, shuffle in ipairs({false, true}) do
      local r = compare_modes(tds, {batch_size = 5, shuffle = shuffle})
      assert.are.equal(8, #r[1])
      assert.are.same({2, 4, 5}, r[1][8][1].shape)
      compare_modes(Rich(11), {batch_size = 3, shuffle = shuffle})
      compare_modes(Pairs(9), {batch_size = 2, shuffle = shuffle, drop_last = true, prefetch_factor = 1})
    end
    -- uneven splits, more workers than batches, custom collate, empty dataset
    compare_modes(Rich(4), {batch_size = 3})
    compare_modes(Pairs(7), {batch_size = 2, collate_fn = function(s) return #s, {n = s[1][2]} end})
    compare_modes(data.TensorDataset(flow.zeros(0, 3)), {batch_size = 2})
    -- what a collate_fn may return: 0-d and empty tensors, nested tables, 64-bit cdata
    local r = compare_modes(Pairs(4), {batch_size = 2, collate_fn = function(s)
      return flow.tensor(#s + 0.5), flow.empty({0, 2}, {dtype = flow.int8}),
             {a = {b = 'x', c = true, [2.5] = -1}}, ffi.cast('int64_t', 2) ^ 40
    end})
    assert.are.same({dtype = 'float32', shape = {}, values = 2.5}, r[1][1][1])
    assert.are.same({0, 2}, r[1][1][2].shape)
    assert.are.equal(-1, r[1][1][3].a[2.5])
  end)

  it('run in separate processes with their own seeds', function()
    local Who = data.Dataset:subclass('Who')
    function Who:len() return 8 end
    function Who:get()
      local info = data.get_worker_info()
      return {id = info and info.id or 0, pid = P.C.getpid(), r = flow.rand(1):item()}
    end
    assert.is_nil(data.get_worker_info())
    local loader = data.DataLoader(Who(), {batch_size = 2, num_workers = 2})
    local ids, pids = {}, {}
    for b in loader:iter() do
      ids[#ids + 1] = b.id:totable()[1]
      pids[b.pid:totable()[1]] = true
    end
    assert.are.same({1, 2, 1, 2}, ids)
    pids[P.C.getpid()] = nil
    local n = 0
    for _ in pairs(pids) do n = n + 1 end
    assert.are.equal(2, n)
    assert_no_children()
  end)

  it('report an error in get() with its message and reap the workers', function()
    local Boom = data.Dataset:subclass('Boom')
    function Boom:len() return 20 end
    function Boom:get(i)
      if i == 7 then error('boom at ' .. i) end
      return flow.full({2}, i)
    end
    local loader = data.DataLoader(Boom(), {batch_size = 2, num_workers = 2})
    local got = 0
    local err = H.raises(function()
      for _ in loader:iter() do got = got + 1 end
    end, 'boom at 7', 'worker 2')
    assert.are.equal(3, got)   -- batches 1-3 came through, batch 4 failed
    assert.truthy(err:find('pid', 1, true))
    assert_no_children()
    -- in the main process the same error surfaces directly
    H.raises(function() for _ in data.DataLoader(Boom(), {batch_size = 2}):iter() do end end, 'boom at 7')
    -- a failing worker_init_fn and a batch that cannot be sent
    H.raises(function()
      for _ in data.DataLoader(Boom(), {num_workers = 1, worker_init_fn = function(id)
        error('init failed in ' .. id)
      end}):iter() do end
    end, 'init failed in 1')
    assert_no_children()
    H.raises(function()
      for _ in data.DataLoader(Boom(), {num_workers = 2, collate_fn = function() return print end}):iter() do end
    end, 'cannot send a function')
    assert_no_children()
  end)

  it('report a worker that dies', function()
    local Die = data.Dataset:subclass('Die')
    function Die:len() return 4 end
    function Die:get(i)
      if i == 3 then P.C._exit(3) end
      return i
    end
    H.raises(function()
      for _ in data.DataLoader(Die(), {num_workers = 2}):iter() do end
    end, 'worker 1', 'exited unexpectedly', 'exit status 3')
    assert_no_children()
  end)

  it('stop when the loop is abandoned (shutdown or garbage collection)', function()
    local loader = data.DataLoader(tds, {batch_size = 2, num_workers = 2})
    for _ in loader:iter() do break end   -- luacheck: ignore 512
    loader:shutdown()
    assert_no_children()
    local it = loader:iter()
    assert.truthy(it())
    it = nil   -- luacheck: ignore 311
    collectgarbage()
    collectgarbage()
    assert_no_children()
    assert.are.equal(0, data._live_worker_fds())
  end)
end)

------------------------------------------------------------------ progress
describe('data: progress bar', function()
  local progress = flow.utils.progress

  it('formats count, total, rate and ETA', function()
    local s = progress.format(25, 100, 5, {desc = 'epoch 1'})
    assert.truthy(s:find('epoch 1:', 1, true))
    assert.truthy(s:find('25/100', 1, true))
    assert.truthy(s:find('5.00it/s', 1, true))
    assert.truthy(s:find('00:05<00:15', 1, true))
    assert.truthy(progress.format(3, nil, 1):find('3 [00:01, 3.00it/s]', 1, true))
  end)

  it('passes every value through and draws when enabled', function()
    local lines = {}
    local file = {write = function(_, ...) lines[#lines + 1] = table.concat({...}) end, flush = function() end}
    local loader = data.DataLoader(data.TensorDataset(flow.arange(6), flow.arange(6)), {batch_size = 2})
    local n = 0
    for x, y in progress(loader, {desc = 'ep', enable = true, file = file}) do
      n = n + 1
      assert.are.same(x:totable(), y:totable())
    end
    assert.are.equal(3, n)
    local out = table.concat(lines)
    assert.truthy(out:find('\r', 1, true))
    assert.truthy(out:find('3/3', 1, true))
    assert.are.equal('\n', out:sub(-1))
  end)

  local function run_child(code)
    local script = os.tmpname()
    local f = assert(io.open(script, 'w'))
    f:write(code)
    f:close()
    local p = io.popen('luajit ' .. script .. ' 2>&1')
    local out = p:read('*a')
    p:close()
    os.remove(script)
    return out
  end

  it('is silent when stderr is not a terminal', function()
    local out = run_child([[
local flow = require 'oneflow'
local data = flow.utils.data
local loader = data.DataLoader(data.TensorDataset(flow.arange(6)), {batch_size = 2})
local n = 0
for _ in loader:iter({progress = true}) do n = n + 1 end
for _ in flow.utils.progress(loader:iter(), {total = #loader, desc = 'epoch 1'}) do n = n + 1 end
io.write('done ', n, '\n')
]])
    assert.are.equal('done 6\n', out)
  end)
end)
