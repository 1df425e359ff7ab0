-- Thread settings: OpenMP's spin before sleeping is shortened unless the
-- user chose a wait policy; the thread count knob round-trips.
local flow = require 'oneflow'

-- GOMP_SPINCOUNT as a fresh luajit sees it after require 'oneflow', with
-- `env` prefixed to the command.
local function spin_seen(env)
  local cmd = ([[%s LUA_PATH=%q luajit -e "require 'oneflow'; io.write(tostring(os.getenv('GOMP_SPINCOUNT')))"]])
    :format(env, package.path)
  local p = io.popen(cmd)
  local out = p:read('*a')
  p:close()
  return out
end

describe('threads', function()
  it('shortens the OpenMP spin unless the user set a wait policy', function()
    assert.equals('10000', spin_seen('env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY'))
    assert.equals('77', spin_seen('env GOMP_SPINCOUNT=77'))
    assert.equals('nil', spin_seen('env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active'))
  end)

  it('set_num_threads / get_num_threads round-trip (reliability_spec checks the range)', function()
    local nt = flow.get_num_threads()
    flow.set_num_threads(3)
    assert.equals(3, flow.get_num_threads())
    flow.set_num_threads(1)
    assert.equals(1, flow.get_num_threads())
    flow.set_num_threads(nt)
    assert.has_error(function() flow.set_num_threads('2') end,
                     'set_num_threads: argument 1 (n) must be an integer, got string')
  end)

  it('a fork()ed child runs single-threaded and refuses more threads', function()
    local ffi = require 'ffi'
    pcall(ffi.cdef, 'unsigned int alarm(unsigned int seconds);')
    local P = require 'oneflow.utils.posix'
    local C = require('oneflow._C').C
    local nt = flow.get_num_threads()
    finally(function() flow.set_num_threads(nt) end)
    flow.set_num_threads(2)
    local a = flow.randn(128, 128)
    local want = a:matmul(a)   -- the parent's OpenMP team exists
    assert.equals(0, C.of_in_forked_child())
    io.stdout:flush()
    local pid = P.C.fork()
    if pid == 0 then
      ffi.C.alarm(20)   -- a hang (the bug this guards against) ends as SIGALRM, not a stuck suite
      -- exit codes: 0 all as expected, else the first check that failed
      local code = 0
      if C.of_in_forked_child() ~= 1 then code = 1
      elseif flow.get_num_threads() ~= 1 then code = 2
      elseif pcall(flow.set_num_threads, 2) then code = 3
      elseif not pcall(flow.set_num_threads, 1) then code = 4
      elseif not a:matmul(a):allclose(want, {rtol = 1e-5, atol = 1e-4}) then code = 5   -- no hang, right
      end
      P.C._exit(code)
    end
    -- the parent bounds the wait: a deadlock inside a fork handler (libomp's,
    -- before the child's alarm is set) would otherwise hang the suite
    local st = ffi.new('int[1]')
    local t0, got = P.now(), 0
    while got == 0 and P.now() - t0 < 30 do
      got = P.C.waitpid(pid, st, P.WNOHANG)
      if got == 0 then P.C.poll(nil, 0, 20) end
    end
    if got == 0 then
      P.C.kill(pid, P.SIGKILL)
      P.C.waitpid(pid, st, 0)
      error('the forked child hung for 30 s (a deadlock in a fork handler?)')
    end
    assert.equals(pid, got)
    local how, v = P.wait_status(st[0])
    assert.are.same({'exit', 0}, {how, v})
    assert.equals(2, flow.get_num_threads())
  end)
end)
