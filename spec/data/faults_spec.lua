-- DataLoader workers that block, die or ask for threads: the main process
-- never waits forever, the error names the worker, and no worker outlives
-- the error (all are killed and reaped).
-- luacheck: ignore 212/self
local ffi = require 'ffi'
local flow = require 'oneflow'
local P = require 'oneflow.utils.posix'

local data = flow.utils.data
pcall(ffi.cdef, 'int usleep(unsigned int usec);')

local function assert_no_children()
  local st = ffi.new('int[1]')
  local r = P.C.waitpid(-1, st, P.WNOHANG)
  local e = ffi.errno()
  assert(r == -1 and e == P.ECHILD, ('child processes remain (waitpid -> %d, errno %d)'):format(r, e))
end

-- blocks this process (a worker) for good, without a busy loop or a child
local function block_forever()
  while true do ffi.C.usleep(1000000) end
end

-- Items 1..n; get() runs `act(i, worker id)` first.
local Acting = data.Dataset:subclass('Acting')
function Acting:init(n, act) self.n, self.act = n, act end
function Acting:len() return self.n end
function Acting:get(i)
  self.act(i, data.get_worker_info().id)
  return flow.tensor({i})
end

local function run(loader)
  local got = {}
  local t0 = P.now()
  local ok, err = pcall(function()
    for x in loader:iter() do got[#got + 1] = x[1][1]:item() end
  end)
  return ok, tostring(err), P.now() - t0, got
end

describe('DataLoader timeout', function()
  it('a worker that blocks in get() times out, named, and all workers go', function()
    local ds = Acting(8, function(_, id) if id == 2 then block_forever() end end)
    local loader = data.DataLoader(ds, {batch_size = 1, num_workers = 3, timeout = 1})
    local ok, err, secs, got = run(loader)
    assert.is_false(ok)
    assert.truthy(err:find('DataLoader worker 2 %(pid %d+%) timed out after 1 s'), err)
    assert.are.same({1}, got)           -- batch 1 (worker 1) came, batch 2 (worker 2) did not
    assert.is_true(secs < 5, 'took ' .. secs .. ' s')
    assert_no_children()
  end)

  it('a worker that blocks in worker_init_fn times out', function()
    local ds = Acting(4, function() end)
    local loader = data.DataLoader(ds, {num_workers = 2, timeout = 0.5,
                                        worker_init_fn = function(id) if id == 1 then block_forever() end end})
    local ok, err, secs = run(loader)
    assert.is_false(ok)
    assert.truthy(err:find('DataLoader worker 1 %(pid %d+%) timed out after 0.5 s'), err)
    assert.is_true(secs < 4, 'took ' .. secs .. ' s')
    assert_no_children()
  end)

  it('a slow worker within the timeout is fine', function()
    local ds = Acting(4, function() ffi.C.usleep(20000) end)
    local loader = data.DataLoader(ds, {num_workers = 2, timeout = 5})
    local ok, err, _, got = run(loader)
    assert(ok, err)
    assert.are.same({1, 2, 3, 4}, got)
    assert_no_children()
  end)

  it('checks its value', function()
    local ds = Acting(4, function() end)
    assert.has_error(function() data.DataLoader(ds, {num_workers = 1, timeout = -1}) end,
                     'DataLoader: timeout must be a number of seconds >= 0, got -1')
    assert.has_error(function() data.DataLoader(ds, {timeout = 2}) end,
                     'DataLoader: timeout applies to worker processes; it must be 0 when num_workers = 0')
  end)
end)

describe('DataLoader dead workers', function()
  it('a worker that dies is named at once, even while another one is awaited', function()
    -- worker 1 blocks (so the main process waits on it); worker 2 dies
    local ds = Acting(8, function(_, id)
      if id == 1 then block_forever() end
      if id == 2 then P.C.kill(P.C.getpid(), P.SIGKILL) end
    end)
    local loader = data.DataLoader(ds, {num_workers = 3, timeout = 30})
    local ok, err, secs = run(loader)
    assert.is_false(ok)
    assert.truthy(err:find('DataLoader worker 2 %(pid %d+%) exited unexpectedly %(signal 9%)'), err)
    assert.is_true(secs < 10, 'took ' .. secs .. ' s')   -- well inside the timeout
    assert_no_children()
  end)

  it('without a timeout too', function()
    local ds = Acting(6, function(_, id)
      if id == 1 then block_forever() end
      if id == 3 then P.C._exit(3) end
    end)
    local loader = data.DataLoader(ds, {num_workers = 3})
    local ok, err = run(loader)
    assert.is_false(ok)
    assert.truthy(err:find('DataLoader worker 3 %(pid %d+%) exited unexpectedly %(exit status 3%)'), err)
    assert_no_children()
  end)
end)

describe('threads in DataLoader workers', function()
  it('workers run single-threaded; matmul works there', function()
    local before = flow.get_num_threads()
    finally(function() flow.set_num_threads(before) end)
    flow.set_num_threads(2)
    local a = flow.randn(64, 64)
    local _ = a:matmul(a)   -- the parent has started its OpenMP team
    local Mm = data.Dataset:subclass('Mm')
    function Mm:len() return 4 end
    function Mm:get(i)
      local x = flow.full({64, 64}, i)
      return flow.tensor({flow.get_num_threads(), x:matmul(x)[1][1]:item()})
    end
    local rows = {}
    for b in data.DataLoader(Mm(), {num_workers = 2, timeout = 20}):iter() do rows[#rows + 1] = b[1]:totable() end
    assert.are.same({{1, 64}, {1, 256}, {1, 576}, {1, 1024}}, rows)
    assert.are.equal(2, flow.get_num_threads())   -- the parent is as it was
    assert_no_children()
  end)

  it('set_num_threads(2) in worker_init_fn is refused with a clear error, not a hang', function()
    local Mm = data.Dataset:subclass('Mm2')
    function Mm:len() return 2 end
    function Mm:get() local x = flow.ones(32, 32); return x:matmul(x):sum() end
    local loader = data.DataLoader(Mm(), {num_workers = 2, timeout = 20,
                                          worker_init_fn = function() flow.set_num_threads(2) end})
    local ok, err = run(loader)
    assert.is_false(ok)
    assert.truthy(err:find('DataLoader worker 1 (pid', 1, true), err)
    assert.truthy(err:find('set_num_threads(2): this process is a fork()', 1, true), err)
    assert_no_children()
  end)

  it('set_num_threads(1) in a worker is fine', function()
    local Mm = data.Dataset:subclass('Mm3')
    function Mm:len() return 2 end
    function Mm:get() local x = flow.ones(8, 8); return x:matmul(x):sum() end
    local sums = {}
    for s in data.DataLoader(Mm(), {num_workers = 1, timeout = 20,
                                    worker_init_fn = function() flow.set_num_threads(1) end}):iter() do
      sums[#sums + 1] = s:item()
    end
    assert.are.same({512, 512}, sums)
  end)
end)
