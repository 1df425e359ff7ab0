-- `make install PREFIX=... DESTDIR=...` puts the library, the header, the Lua
-- modules and bin/flow where they belong, and the installed `flow` runs a
-- script from another directory with nothing from the checkout on its paths.
local src = debug.getinfo(1, 'S').source:sub(2)
if src:sub(1, 1) ~= '/' then src = os.getenv('PWD') .. '/' .. src end
local root = src:match('^(.*)/spec/install/[^/]*$')
local build = os.getenv('OF_BUILD_DIR') or 'build'
if build:sub(1, 1) ~= '/' then build = root .. '/' .. build end

local function sh(cmd)
  local p = io.popen('(' .. cmd .. ') 2>&1; echo "rc=$?"')
  local out = p:read('*a')
  p:close()
  local rc = tonumber(out:match('rc=(%d+)%s*$'))
  return out:gsub('rc=%d+%s*$', ''), rc
end

local function exists(p)
  local f = io.open(p)
  if f then f:close() end
  return f ~= nil
end

describe('make install', function()
  local dest = os.tmpname()

  setup(function()
    os.remove(dest)
  end)
  teardown(function()
    sh('rm -rf ' .. dest)
  end)

  it('honours PREFIX and DESTDIR, and the installed flow runs from any directory', function()
    if not exists(build .. '/Makefile') then
      pending('no CMake build tree at ' .. build)
      return
    end
    local out, rc = sh(('cd %s && env -u LD_PRELOAD make -s install BUILD=%s PREFIX=/opt/oneflow DESTDIR=%s JOBS=2')
                       :format(root, build, dest))
    assert.equal(0, rc, out)
    local prefix = dest .. '/opt/oneflow'
    assert.truthy(exists(prefix .. '/bin/flow'), out)
    assert.truthy(exists(prefix .. '/include/oneflow/oneflow.h'), out)
    assert.truthy(exists(prefix .. '/share/lua/5.1/oneflow/init.lua'), out)
    assert.truthy(exists(prefix .. '/share/lua/5.1/flowvision/init.lua'), out)
    assert.truthy(exists(prefix .. '/share/lua/5.1/flowtext/init.lua'), out)
    local lib = sh('ls ' .. prefix .. '/lib*/liboneflow.so ' .. prefix .. '/lib/*/liboneflow.so 2>/dev/null')
    assert.truthy(lib:find('liboneflow.so', 1, true), out)
    -- the static library: a C host links the runtime in and runs without liboneflow.so
    local a = sh('ls ' .. prefix .. '/lib*/liboneflow.a ' .. prefix .. '/lib/*/liboneflow.a 2>/dev/null')
      :match('%S+liboneflow%.a')
    assert.truthy(a, out)
    local host = dest .. '/host_static'
    local dnnl = sh('ls /usr/lib/*/libdnnl.so 2>/dev/null'):find('libdnnl', 1, true) and ' -ldnnl' or ''
    -- glibc's libmvec, where the build found it (core/ops/vmath.c calls it)
    local mvec = sh('nm ' .. a .. ' 2>/dev/null'):find(' U _ZGV', 1, true) and ' -lmvec' or ''
    out = sh(('cc -std=c11 -I%s/include %s/examples/graph/host.c %s -fopenmp -lopenblas%s%s -lm -ldl '
                  .. '-lpthread -o %s && %s; true'):format(prefix, root, a, dnnl, mvec, host, host))
    assert.truthy(out:find('usage: graph_host', 1, true), out)
    assert.falsy(sh('ldd ' .. host):find('liboneflow', 1, true))
    -- the server, where libmicrohttpd was found
    if exists(build .. '/flow-serve') then
      assert.truthy(exists(prefix .. '/bin/flow-serve'), out)
    end

    local script = os.tmpname()
    local f = io.open(script, 'w')
    f:write([[
local flow = require 'oneflow'
print(package.searchpath('oneflow', package.path))
print(require('oneflow._C').library_path)
print(flow.ones(2, 3):sum():item())
]])
    f:close()
    out, rc = sh(('cd /tmp && env -u LUA_PATH -u LUA_CPATH -u OF_LIBRARY %s/bin/flow %s'):format(prefix, script))
    os.remove(script)
    assert.equal(0, rc, out)
    local mod, libpath, sum = out:match('^(%S+)\n(%S+)\n(%S+)\n$')
    assert.equal(prefix .. '/share/lua/5.1/oneflow/init.lua', mod, out)
    assert.equal(prefix, libpath:sub(1, #prefix), out)
    assert.equal('6', sum)
  end)
end)
