-- Atomic checkpoints under SIGKILL (oneflow.utils.atomic): a child process
-- saving a large checkpoint is killed at random moments; the previous
-- checkpoint must always load, no file may load as a valid-looking but
-- wrong checkpoint, and the next save removes every temporary file of the
-- dead writers.
local ffi = require 'ffi'
local flow = require 'oneflow'
local H = require 'spec.helpers'
local atomic = require 'oneflow.utils.atomic'
local P = require 'oneflow.utils.posix'

local tmpdir, listdir = H.tmpdir, H.listdir
teardown(H.remove_tmpdirs)

local function temps(d)
  local res = {}
  for _, n in ipairs(listdir(d)) do
    if n:find('.tmp-', 1, true) then res[#res + 1] = n end
  end
  return res
end

local CHILD = 'spec/fixtures/atomic/save_child.lua'
local NUMEL = 2 * 1024 * 1024   -- two float32 tensors: 16 MiB per checkpoint

local function state(v)
  return {a = flow.full({NUMEL}, v), b = flow.full({NUMEL}, -v),
          version = flow.tensor({v}, {dtype = flow.int64})}
end

-- The version of the checkpoint at path, or nil, err when it does not load.
-- A file that loads must be one whole version: both tensors complete and
-- filled with that version's values (anything else is "valid but wrong").
local function version_of(path, loader)
  local ok, s = pcall(loader or flow.load, path)
  if not ok then return nil, s end
  local v = s.version[1]:item()
  assert.are.equal(NUMEL, s.a:numel())
  assert.are.equal(NUMEL, s.b:numel())
  assert.are.equal(v, s.a:min():item(), path .. ': tensor a is not all ' .. v)
  assert.are.equal(v, s.a:max():item(), path .. ': tensor a is not all ' .. v)
  assert.are.equal(-v, s.b:min():item(), path .. ': tensor b is not all ' .. -v)
  assert.are.equal(-v, s.b:max():item(), path .. ': tensor b is not all ' .. -v)
  return v
end

-- Starts the child saving version v, kills it with SIGKILL `delay` seconds
-- after it began the save.
local function save_and_kill(path, v, delay, mode)
  local marker = path .. '.started'
  os.remove(marker)
  local cmd = string.format(
    'luajit %s %s %d %s %d %s & pid=$!; ' ..
    'while [ ! -e %s ] && kill -0 $pid 2>/dev/null; do sleep 0.002; done; ' ..
    'sleep %.4f; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null; true',
    CHILD, path, v, marker, NUMEL, mode or '', marker, delay)
  os.execute(cmd)
  os.remove(marker)
end

-- One save's duration in this process (the child's is about the same): the
-- fastest of three, so that a load spike does not push the kills past the
-- child's save.
local function save_seconds(path, save)
  local s, best = state(1), math.huge
  for _ = 1, 3 do
    local t0 = P.now()
    save(s, path)
    best = math.min(best, P.now() - t0)
  end
  return best
end

local function kill_loop(d, kills, mode, loader, save)
  local path = d .. '/ckpt.safetensors'
  save = save or flow.save
  local dur = save_seconds(d .. '/timing', save)
  os.remove(d .. '/timing')
  save(state(0), path)
  math.randomseed(1234)
  local current, midway, leftovers = 0, 0, 0
  for i = 1, kills do
    save_and_kill(path, i, math.random() * dur, mode)
    local v, err = version_of(path, loader)
    assert(v, 'the previous checkpoint does not load: ' .. tostring(err))
    assert(v == current or v == i, ('kill %d: checkpoint has version %d, expected %d or %d')
                                   :format(i, v, current, i))
    if v == current then midway = midway + 1 end
    current = v
    -- every other file in the directory either does not load or is a whole version
    for _, n in ipairs(temps(d)) do
      leftovers = leftovers + 1
      local tv = version_of(d .. '/' .. n, loader)
      if tv then assert(tv == i, n .. ' loads as version ' .. tv .. ', written as ' .. i) end
    end
  end
  return {current = current, midway = midway, leftovers = leftovers, path = path, dur = dur}
end

describe('atomic checkpoints under SIGKILL', function()
  it('O_TMPFILE writes: the previous checkpoint always loads and a kill leaves no file', function()
    local d = tmpdir()
    local r = kill_loop(d, 20)
    -- most kills land inside the save (random moments over its duration)
    assert.is_true(r.midway >= 1, 'no kill landed inside a save')
    -- a kill leaves a name only between link and rename (microseconds)
    assert.is_true(#temps(d) <= 1, 'temporary files left: ' .. table.concat(temps(d), ' '))
    flow.save(state(99), r.path)
    assert.are.same({}, temps(d))
    assert.are.equal(99, version_of(r.path))
    io.stderr:write(('[atomic] O_TMPFILE: 20 kills over %.3f s saves, %d inside a save, %d ' ..
                     'temporary names seen\n'):format(r.dur, r.midway, r.leftovers))
  end)

  it('named temporary files (no O_TMPFILE): dead writers\' files go on the next save', function()
    local d = tmpdir()
    atomic._hooks.force_named = true
    local ok, r = pcall(kill_loop, d, 10, 'named')
    atomic._hooks.force_named = nil
    assert(ok, r)
    assert.is_true(r.midway >= 1, 'no kill landed inside a save')
    -- a kill inside a named save leaves its file (the next child's save removes it)
    assert.is_true(r.leftovers >= 1, 'no kill left a temporary file')
    flow.save(state(99), r.path)
    assert.are.same({}, temps(d))
    assert.are.equal(99, version_of(r.path))
  end)

  it('flow.save_torch is atomic too', function()
    local d = tmpdir()
    local torchio = require 'oneflow.io.torch'
    local r = kill_loop(d, 4, 'torch', torchio.load, function(s, p) flow.save_torch(s, p) end)
    flow.save_torch(state(7), r.path)
    assert.are.same({}, temps(d))
  end)

  it('removes temporary files of dead processes only', function()
    local d = tmpdir()
    local p = io.popen('sh -c "echo \\$\\$"')
    local dead = tonumber(p:read('*l'))
    p:close()
    local live = P.C.getppid()
    local me = P.C.getpid()
    for _, n in ipairs({'x.tmp-' .. dead .. '-1', 'y.safetensors.tmp-' .. dead .. '-7',
                        'x.tmp-' .. live .. '-1', 'x.tmp-' .. me .. '-12345', 'x.tmp-notapid-1',
                        'keep.safetensors'}) do
      local f = assert(io.open(d .. '/' .. n, 'w'))
      f:write('x')
      f:close()
    end
    flow.save({w = flow.ones(2)}, d .. '/new.safetensors')
    -- the dead pid's files and this process's own stale file are gone
    assert.are.same({'keep.safetensors', 'new.safetensors', 'x.tmp-' .. live .. '-1',
                     'x.tmp-notapid-1'}, listdir(d))
  end)

  it('a missing directory is an error naming the temporary file', function()
    local d = tmpdir()
    local ok, err = pcall(flow.save, {w = flow.ones(1)}, d .. '/no/dir/x.safetensors')
    assert.is_false(ok)
    assert.truthy(err:find('cannot create', 1, true) and err:find('No such file', 1, true))
  end)

  it('uses O_TMPFILE where the file system has it', function()
    if ffi.arch ~= 'x64' and ffi.arch ~= 'arm64' then return pending('no O_TMPFILE constant for ' .. ffi.arch) end
    local d = tmpdir()
    local h = atomic.open(d .. '/f.bin')
    -- nothing has a name while the data is written
    assert.are.same({}, listdir(d))
    assert.is_nil(h.named)
    P.C.fwrite('hello', 1, 5, h.f)
    atomic.commit(h)
    assert.are.same({'f.bin'}, listdir(d))
    local f = io.open(d .. '/f.bin', 'rb')
    assert.are.equal('hello', f:read('*a'))
    f:close()
  end)
end)
