-- Several hosts on one machine: network namespaces joined by veth links
-- (tools/netns_hosts.sh), mpirun reaching them through tools/netns_rsh.sh
-- with Open MPI's TCP transport kept to the links (tools/netns_mpirun.sh).
-- The distributed examples give the same losses on 2 hosts x 2 processes as
-- 4 processes on one host; a host cut off or killed makes the others fail
-- naming its ranks. Pending with the reason where namespaces cannot be made
-- (not root, no CAP_NET_ADMIN, no iproute2) or mpirun is missing.
local H = require 'spec.helpers'
local P = require 'oneflow.utils.posix'
local flow = require 'oneflow'

local HOSTS = '-H 10.77.0.1:2,10.77.0.2:2'
local ONE_HOST = 'mpirun --allow-run-as-root --oversubscribe'
local ACROSS = 'sh tools/netns_mpirun.sh ' .. HOSTS

local function sh(cmd)
  local p = io.popen('(' .. cmd .. ') 2>&1; echo "rc=$?"')
  local out = p:read('*a')
  p:close()
  local rc = tonumber(out:match('rc=(%d+)%s*$'))
  return (out:gsub('rc=%d+%s*$', '')), rc
end

local function why_not()
  if flow.env.get_world_size() ~= 1 then return 'runs from one process, not under mpirun' end
  if H.capture('command -v mpirun 2>/dev/null') == '' then return 'mpirun not found' end
  local out, rc = sh('sh tools/netns_hosts.sh check')
  if rc ~= 0 then return 'no test hosts here: ' .. out:gsub('%s+$', '') end
end

local FASHION = '/usr/share/datasets/fashion-mnist'
local function have_fashion_mnist()
  return H.read_file(FASHION .. '/train-images-idx3-ubyte.gz') ~= nil
end

-- The first n images of each Fashion-MNIST split as uncompressed IDX files:
-- 8 processes do not each unpack the 26 MB training file for 128 images.
local small_data
local function fashion_head(n)
  if small_data then return small_data end
  local ffi = require 'ffi'
  local read_idx = require('flowvision').datasets.read_idx
  local dir = H.tmpdir()
  for _, name in ipairs({'train-images-idx3-ubyte', 'train-labels-idx1-ubyte',
                         't10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'}) do
    local t = read_idx(FASHION .. '/' .. name .. '.gz')
    t = t:narrow(1, 1, n):contiguous()
    local head = {string.char(0, 0, 8, t:dim())}
    for d = 1, t:dim() do
      local v = t:size(d)
      head[#head + 1] = string.char(bit.band(bit.rshift(v, 24), 255), bit.band(bit.rshift(v, 16), 255),
                                    bit.band(bit.rshift(v, 8), 255), bit.band(v, 255))
    end
    H.write_file(dir .. '/' .. name, table.concat(head) .. ffi.string(t:data_ptr(), t:numel()))
  end
  small_data = dir
  return dir
end

-- bytes through host 2's link (both directions)
local function link_bytes(i)
  local n = 0
  for _, dir in ipairs({'rx', 'tx'}) do
    n = n + tonumber(H.read_file(('/sys/class/net/ofv%d/statistics/%s_bytes'):format(i, dir)))
  end
  return n
end

local function wait_for(pred, seconds)
  local t0 = P.now()
  while P.now() - t0 < seconds do
    if pred() then return true end
    P.C.poll(nil, 0, 100)
  end
  return pred()
end

-- "epoch E step S: loss X" lines of rank 0, in order
local function step_losses(out)
  local res = {}
  for line in out:gmatch('epoch %d+ step %d+: loss [^\n]+') do res[#res + 1] = line end
  return res
end

local why = why_not()
describe('two test hosts (network namespaces)', function()
  if why then
    pending('multi-host: ' .. why)
    return
  end

  setup(function()
    local out, rc = sh('sh tools/netns_hosts.sh up 2')
    assert(rc == 0, out)
  end)
  teardown(function()
    sh('sh tools/netns_hosts.sh down')
    H.remove_tmpdirs()
  end)

  it('the rsh agent runs a command in the host namespace, under its own name', function()
    local out, rc = sh('sh tools/netns_rsh.sh 10.77.0.2 "hostname; cat /sys/class/net/eth0/address"'
                       .. ' && sh tools/netns_rsh.sh ofh1 hostname')
    assert.equal(0, rc, out)
    assert.truthy(out:find('^ofh2\n%x%x:'), out)
    assert.truthy(out:find('\nofh1\n'), out)
    out, rc = sh('sh tools/netns_rsh.sh 10.0.0.1 true')
    assert.equal(255, rc, out)
    assert.truthy(out:find('not a test host', 1, true), out)
  end)

  it('ranks on two hosts agree on the world, with local ranks per host', function()
    local out, rc = sh('OF_DIST_TIMEOUT=20 timeout 60 ' .. ACROSS .. ' -np 4 luajit -e "'
      .. 'local flow = require [[oneflow]]; local t = flow.tensor({flow.env.get_rank()}); '
      .. 'flow.comm.all_reduce(t); print(([[rank %d of %d local %d sum %d on %s]]):format('
      .. 'flow.env.get_rank(), flow.env.get_world_size(), flow.env.get_local_rank(), '
      .. 't[1]:item(), io.popen([[hostname]]):read([[*l]])))"')
    assert.equal(0, rc, out)
    for r, want in ipairs({'0 of 4 local 0 sum 6 on ofh1', '1 of 4 local 1 sum 6 on ofh1',
                           '2 of 4 local 0 sum 6 on ofh2', '3 of 4 local 1 sum 6 on ofh2'}) do
      assert.truthy(out:find('rank ' .. want, 1, true), ('rank %d: %s'):format(r - 1, out))
    end
  end)

  local examples = {
    {'lenet_ddp', '--batch-size 8'},       -- per process: 4 steps of 32 images in all
    {'lenet_global', '--batch-size 32'},   -- global batch
    {'hybrid_mlp', '--batch-size 32'},
  }
  for _, ex in ipairs(examples) do
    local name, args = ex[1], ex[2]
    it(name .. '.lua: 2 hosts x 2 processes give the losses of 4 processes on one host', function()
      if not have_fashion_mnist() then pending('dataset-fashion-mnist is not installed') return end
      local dir, data = H.tmpdir(), fashion_head(128)
      local function run(launcher, tag)
        local cmd = ('OF_DIST_TIMEOUT=30 timeout 120 %s -np 4 luajit examples/distributed/%s.lua '
                     .. '--data %s --threads 1 --log-steps %s%s'):format(launcher, name, data, args,
          name == 'lenet_ddp' and (' --out %s/%s.safetensors'):format(dir, tag) or '')
        local out, rc = sh(cmd)
        assert.equal(0, rc, out)
        return out
      end
      local one = run(ONE_HOST, 'one')
      local before = link_bytes(2)
      local two = run(ACROSS, 'two')
      local crossed = link_bytes(2) - before
      local a, b = step_losses(one), step_losses(two)
      assert.truthy(#a >= 4, one)
      assert.same(a, b)
      -- the epoch summary (mean loss, test accuracy) too
      assert.equal(one:match('epoch 1: [^(]*'), two:match('epoch 1: [^(]*'))
      -- the gradients' all-reduces (about 1 MB a step) really crossed the link
      assert.truthy(crossed > 1e6, ('only %d bytes through host 2\'s link'):format(crossed))
      if name == 'lenet_ddp' then
        local c1, c2 = H.read_file(dir .. '/one.safetensors'), H.read_file(dir .. '/two.safetensors')
        assert.truthy(c1 and #c1 > 1e6)
        assert.truthy(c1 == c2, 'the checkpoints differ')
      end
    end)
  end

  it('a sharded checkpoint of 4 ranks on 2 hosts loads on the 2 ranks left on host 1', function()
    local dir = H.tmpdir() .. '/ck'
    local out, rc = sh(('OF_DIST_TIMEOUT=30 timeout 60 %s -np 4 luajit spec/dist/reshard_script.lua '
                        .. 'save %s'):format(ACROSS, dir))
    assert.equal(0, rc, out)
    assert(os.execute('ip link set ofv2 down') == 0)   -- host 2 is gone
    out, rc = sh(('OF_DIST_TIMEOUT=30 timeout 60 sh tools/netns_mpirun.sh -H 10.77.0.1:2 -np 2 '
                  .. 'luajit spec/dist/reshard_script.lua load %s'):format(dir))
    os.execute('ip link set ofv2 up')
    assert.equal(0, rc, out)
    for r = 0, 1 do
      for _, name in ipairs({'emb.weight', 'fc.bias', 'fc.weight', 'opt.step'}) do
        assert.truthy(out:find(('rank %d of 2: %s equal'):format(r, name), 1, true), out)
      end
    end
  end)

  -- A job of 4 ranks all-reducing in a loop; returns the paths of its
  -- output and of the file rank 0 writes once the rounds run.
  local FAULT_TIMEOUT = 3
  local function start_job()
    local dir = H.tmpdir()
    local out, ready = dir .. '/out', dir .. '/ready'
    os.execute(('(OF_DIST_TIMEOUT=30 timeout 90 %s -np 4 luajit spec/dist/multihost_fault.lua %s %d '
                .. '> %s 2>&1; echo "rc=$?" >> %s) </dev/null >/dev/null 2>&1 &')
               :format(ACROSS, ready, FAULT_TIMEOUT, out, out))
    assert(wait_for(function() return H.read_file(ready) end, 60),
           'the job did not start: ' .. tostring(H.read_file(out)))
    return out
  end
  local function finished(out)
    return function() return (H.read_file(out) or ''):find('\nrc=%d+%s*$') end
  end

  it('a host cut off (link down) makes the others fail within the timeout, naming its ranks', function()
    local out = start_job()
    local t0 = P.now()
    assert(os.execute('ip link set ofv2 down') == 0)
    -- both ranks on host 1 time out, then ask around for 3 s (the grace)
    local both = wait_for(function()
      local s = H.read_file(out) or ''
      return s:find('rank 0 failed', 1, true) and s:find('rank 1 failed', 1, true)
    end, FAULT_TIMEOUT + 20)
    local secs = P.now() - t0
    os.execute('ip link set ofv2 up')   -- so that mpirun can end the job
    local ended = wait_for(finished(out), 30)
    local s = H.read_file(out)
    assert(both, s)
    for r = 0, 1 do
      local line = s:match('rank ' .. r .. ' failed[^\n]*')
      assert.truthy(line:find(('timed out after %d s on rank %d'):format(FAULT_TIMEOUT, r), 1, true), line)
      assert.truthy(line:find('ranks 2 3 are not responding', 1, true), line)
      assert.truthy(line:find(('rank %d is in all_reduce'):format(1 - r), 1, true), line)
    end
    assert.truthy(secs < FAULT_TIMEOUT + 15, ('took %.1f s'):format(secs))
    assert(ended, 'mpirun did not end the job after the link came back: ' .. s)
    assert.are_not.equal('0', s:match('\nrc=(%d+)'))
  end)

  it('a host whose ranks are killed is named and the job ends', function()
    local out = start_job()
    local t0 = P.now()
    local killed = 0
    for pid in H.capture('ip netns pids ofh2'):gmatch('%d+') do
      if (H.read_file('/proc/' .. pid .. '/comm') or '') == 'luajit\n' then
        P.C.kill(tonumber(pid), P.SIGKILL)
        killed = killed + 1
      end
    end
    assert.equal(2, killed)
    local ended = wait_for(finished(out), FAULT_TIMEOUT + 20)
    local secs = P.now() - t0
    local s = H.read_file(out)
    assert(ended, s)
    -- mpirun hears of it from the host's daemon; had it not, the others
    -- would have timed out naming the rank themselves
    assert(s:find('process rank [23] with PID %d+ on node 10%.77%.0%.2 exited on signal 9')
           or s:find('ranks? [%d ]-[23][%d ]- %a+ not responding'), s)
    assert.truthy(secs < FAULT_TIMEOUT + 15, ('took %.1f s'):format(secs))
  end)
end)
