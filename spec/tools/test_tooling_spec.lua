-- Issue 20's checkout and CI items that no other spec runs:
--   * tools/run_tests.sh ends with "N passed, N failed, N skipped" and lists
--     the skipped (pending) specs by name before it;
--   * tools/install_deps.sh with CI=true (as .ci/run sets it) installs
--     Debian's python3-torch and python3-torchvision, so that the PyTorch
--     parity specs compare in CI instead of being pending;
--   * `make bench` writes its results under the build folder, and only
--     `make bench WRITE=1` the tracked doc/benchmarks.md;
--   * luarocks' build.luarocks/ is ignored by git.
local src = debug.getinfo(1, 'S').source:sub(2)
if src:sub(1, 1) ~= '/' then src = os.getenv('PWD') .. '/' .. src end
local root = src:match('^(.*)/spec/tools/[^/]*$')

local function sh(cmd)
  local p = io.popen('(' .. cmd .. ') 2>&1; echo "rc=$?"')
  local out = p:read('*a')
  p:close()
  local rc = tonumber(out:match('rc=(%d+)%s*$'))
  return (out:gsub('rc=%d+%s*$', '')), rc
end
local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local function write(path, text)
  local f = assert(io.open(path, 'w'))
  f:write(text)
  f:close()
end
local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute('mkdir -p ' .. q(d)) == 0)
  return d
end

describe('tools/run_tests.sh', function()
  it('counts passed, failed and skipped specs apart on its last line and names the skipped', function()
    -- a checkout of its own: the runner, a stub layer check, one spec
    -- directory with a passing, a failing and a pending test, an empty build
    local d = tmpdir()
    assert(os.execute(('mkdir -p %s/tools %s/spec/x %s/build %s/lua'):format(q(d), q(d), q(d), q(d))) == 0)
    assert(os.execute(('cp %s %s/tools/'):format(q(root .. '/tools/run_tests.sh'), q(d))) == 0)
    write(d .. '/tools/check_layers.sh', 'exit 0\n')
    write(d .. '/.luacheckrc', "std = 'max+busted'\n")
    write(d .. '/spec/x/a_spec.lua', [[
describe('fake', function()
  it('passes', function() assert.equal(1, 1) end)
  it('fails', function() assert.equal(1, 2) end)
  pending('needs a thing it lacks')
end)
]])
    local out, rc = sh(('cd %s && CI= PATH=%s sh tools/run_tests.sh build'):format(
      q(d), q(d .. '/nompi:' .. os.getenv('PATH'))))
    os.execute('rm -rf ' .. q(d))
    assert.equal(1, rc, out)
    local last = out:match('([^\n]+)\n*$')
    -- the mpirun specs count nothing here (no spec/dist), ctest finds no tests
    assert.equal('1 passed, 1 failed, 1 skipped', last, out)
    local skipped = out:match('== skipped\n(.-)\n[^\n]+\n*$')
    assert.truthy(skipped and skipped:find('needs a thing it lacks', 1, true), out)
  end)
end)

describe('tools/install_deps.sh', function()
  -- a fake dpkg-query that reports every package installed except the
  -- PyTorch ones, and a fake apt-get (and sudo) that records its arguments
  local function run(ci)
    local d = tmpdir()
    write(d .. '/dpkg-query', [[#!/bin/sh
for a; do p=$a; done
case "$p" in python3-torch*) exit 1;; esac
echo "install ok installed"
]])
    write(d .. '/apt-get', '#!/bin/sh\necho "apt-get $*" >> "$APT_LOG"\n')
    write(d .. '/sudo', '#!/bin/sh\nexec "$@"\n')
    assert(os.execute(('chmod +x %s/dpkg-query %s/apt-get %s/sudo'):format(q(d), q(d), q(d))) == 0)
    local out, rc = sh(('cd %s && APT_LOG=%s/log CI=%s PATH=%s:$PATH sh tools/install_deps.sh'
      .. ' && { cat %s/log 2>/dev/null || true; }'):format(q(root), q(d), ci, q(d), q(d)))
    os.execute('rm -rf ' .. q(d))
    return out, rc
  end

  it('installs python3-torch and python3-torchvision with CI=true, and only then', function()
    local out, rc = run('true')
    assert.equal(0, rc, out)
    assert.truthy(out:find('apt%-get install[^\n]* python3%-torch '), out)
    assert.truthy(out:find('apt%-get install[^\n]* python3%-torchvision'), out)
    out, rc = run('')
    assert.equal(0, rc, out)
    assert.falsy(out:find('apt-get install', 1, true), out)
  end)
end)

describe('make bench', function()
  it('writes under the build folder unless WRITE=1 asks for doc/benchmarks.md', function()
    local out, rc = sh(('cd %s && make -n bench'):format(q(root)))
    assert.equal(0, rc, out)
    local cmd = out:match('[^\n]*bench/ops%.lua[^\n]*')
    assert.truthy(cmd, out)
    assert.truthy(cmd:find('--out build/benchmarks.md', 1, true), cmd)
    out, rc = sh(('cd %s && make -n bench WRITE=1'):format(q(root)))
    assert.equal(0, rc, out)
    cmd = out:match('[^\n]*bench/ops%.lua[^\n]*')
    assert.truthy(cmd, out)
    assert.falsy(cmd:find('--out', 1, true), cmd)
    -- and bench/ops.lua writes the tracked file only without --out
    local f = assert(io.open(root .. '/bench/ops.lua'))
    local text = f:read('*a')
    f:close()
    assert.truthy(text:find('--out', 1, true))
    assert.truthy(text:find('doc/benchmarks.md', 1, true))
  end)
end)

describe('the checkout', function()
  it('ignores luarocks\' build.luarocks/', function()
    local out, rc = sh(('cd %s && git rev-parse --is-inside-work-tree'):format(q(root)))
    if rc ~= 0 then pending('not a git checkout: ' .. out) return end
    out, rc = sh(('cd %s && git check-ignore -q build.luarocks/x.o'):format(q(root)))
    assert.equal(0, rc, 'build.luarocks/ is not ignored: ' .. out)
  end)
end)
