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
  end)
end)
