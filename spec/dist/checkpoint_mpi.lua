-- Checkpoints of global tensors under mpirun (-np 2 and -np 4): gathered and
-- sharded saves, loading into other placements and sbp, atomic writes and
-- corrupt files.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local serialization = require 'oneflow.serialization'

local nn = flow.nn
local r, n = flow.env.get_rank(), flow.env.get_world_size()
local all = {}
for i = 0, n - 1 do all[i + 1] = i end
local P = flow.placement('cpu', all)
local S, Bc, Ps = flow.sbp.split, flow.sbp.broadcast, flow.sbp.partial_sum
local grid = n == 4 and {{0, 1}, {2, 3}} or {{0, 1}}
local P2 = flow.placement('cpu', grid)
local Plast = flow.placement('cpu', {n - 1})

-- a directory name every rank agrees on
local base
do
  local t = flow.tensor({r == 0 and math.random(1, 2 ^ 30) or 0}, {dtype = 'int64'})
  flow.comm.broadcast(t, 0)
  base = ('/tmp/of_ck_spec_%d'):format(t[1]:item())
end
local function path(name) return base .. '_' .. name end

local function cleanup()
  flow.env.barrier()
  if r == 0 then os.execute('rm -rf ' .. base .. '_*') end
  flow.env.barrier()
end

flow.manual_seed(5)
local A, Bv, Cv = flow.randn(7, 5), flow.randn(9), flow.randn(3, 2)

local function state()
  return {
    a = flow.tensor(A:totable(), {placement = P, sbp = S(1)}),        -- uneven rows
    b = flow.tensor(Bv:totable(), {placement = P, sbp = Ps}),         -- partial
    c = flow.tensor(Cv:totable(), {placement = P2, sbp = {S(2), Bc}}),
    step = flow.tensor({42}, {dtype = 'int64'}),                       -- local
  }
end

local function check_full(full)
  H.close(full.a, A, 1e-6, 'a')
  H.close(full.b, Bv, 1e-6, 'b')
  H.close(full.c, Cv, 1e-6, 'c')
  assert.same({42}, full.step:totable())
end

-- targets on other layouts
local function targets()
  return {
    a = flow.zeros(7, 5, {placement = P2, sbp = {S(2), S(1)}}),
    b = flow.zeros(9, {placement = P, sbp = S(1)}),
    c = flow.zeros(3, 2, {placement = Plast, sbp = Ps}),
    step = flow.zeros(1, {dtype = 'int64'}),
  }
end

local function check_targets(t)
  H.close(t.a:full_local(), A, 1e-6, 'a resharded')
  H.close(t.b:full_local(), Bv, 1e-6, 'b resharded')
  local c = t.c:full_local()
  if r == n - 1 then H.close(c, Cv, 1e-6, 'c moved') else assert.is_nil(c) end
  assert.same({42}, t.step:totable())
end

describe('flow.distributed.save / load', function()
  teardown(cleanup)

  it('gathered: one safetensors file from rank 0, loads into any layout', function()
    local p = path('g.safetensors')
    flow.distributed.save(state(), p)
    check_full(flow.distributed.load(p))
    check_targets(flow.distributed.load(p, targets()))
    -- a plain safetensors reader sees the full tensors
    local plain = flow.safetensors.load_file(p)
    H.close(plain.a, A, 1e-6, 'plain a')
  end)

  it('sharded: one file per rank with pieces and an index; loads into any layout', function()
    local p = path('d')
    flow.distributed.save(state(), p, {gather = false})
    local f = io.open(('%s/index.safetensors'):format(p), 'rb')
    assert.is_not_nil(f)
    f:close()
    check_full(flow.distributed.load(p))
    check_targets(flow.distributed.load(p, targets()))
    -- saving again replaces the files of the previous generation
    flow.distributed.save(state(), p, {gather = false})
    flow.env.barrier()
    local ls = io.popen('ls ' .. p):read('*a')
    local gens = {}
    for g in ls:gmatch('shard%-(%d+)%-r') do gens[g] = true end
    local count = 0
    for _ in pairs(gens) do count = count + 1 end
    assert.equal(1, count)
    check_full(flow.distributed.load(p))
  end)

  it('module: a model-parallel net loads into a data-parallel layout', function()
    flow.manual_seed(9)
    local net = nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 3))
    local ref = net:state_dict()
    local plain = {}
    for k, v in pairs(ref) do plain[k] = v:clone() end
    net:to_global(P, {['0.weight'] = S(1), ['0.bias'] = S(1), ['2.weight'] = S(2)})
    for _, gather in ipairs({true, false}) do
      local p = path(gather and 'm.safetensors' or 'm')
      flow.distributed.save(net, p, {gather = gather})
      local net2 = nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 3))
      net2:to_global(P2, function() return {S(1), Bc} end)
      flow.distributed.load(p, net2)
      -- sorted: full_local is a collective, and pairs order differs between processes
      local sd2, keys = net2:state_dict()
      table.sort(keys)
      for _, k in ipairs(keys) do H.close(sd2[k]:full_local(), plain[k], 1e-6, k) end
      -- and into a plain local model
      local net3 = nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 3))
      flow.distributed.load(p, net3)
      for k, v in pairs(net3:state_dict()) do H.close(v, plain[k], 1e-6, 'local ' .. k) end
    end
  end)

  it('an interrupted save leaves the previous checkpoint loadable', function()
    for _, gather in ipairs({true, false}) do
      local p = path(gather and 'atomic.safetensors' or 'atomic')
      flow.distributed.save(state(), p, {gather = gather})
      local s2 = state()
      s2.step = flow.tensor({7}, {dtype = 'int64'})
      -- the write fails just before its rename on the last rank (or on the
      -- root, which alone writes a gathered file)
      local failing = gather and 0 or n - 1
      if r == failing then
        serialization._hooks.before_rename = function() error('disk full (simulated)', 0) end
      end
      local ok, err = pcall(flow.distributed.save, s2, p, {gather = gather})
      serialization._hooks.before_rename = nil
      assert.is_false(ok)
      if r == failing then
        assert.truthy(tostring(err):find('disk full', 1, true), err)
      else
        assert.truthy(tostring(err):find('failed on rank ' .. failing, 1, true), err)
      end
      check_full(flow.distributed.load(p))
    end
  end)

  it('corrupt, truncated or missing files and mismatched targets are clear errors', function()
    local p = path('bad')
    flow.distributed.save(state(), p, {gather = false})
    flow.env.barrier()
    local shard = io.popen('ls ' .. p .. '/shard-*-r0.safetensors'):read('*l')
    local tgt = targets()
    tgt.c, tgt.step = nil, nil
    flow.env.barrier()
    if r == 0 then
      -- flip the last byte (tensor data)
      local f = io.open(shard, 'r+b')
      local size = f:seek('end')
      f:seek('set', size - 1)
      local byte = f:read(1):byte()
      f:seek('set', size - 1)
      f:write(string.char((byte + 1) % 256))
      f:close()
    end
    flow.env.barrier()
    -- rank 0 reads its own piece of b (split) and of a; others may read it too
    H.raises(function() flow.distributed.load(p) end, 'flow.distributed.load',
             'fails its CRC-32 check', 'corrupt')
    flow.env.barrier()
    if r == 0 then
      local f = io.open(shard, 'rb')
      local data = f:read('*a')
      f:close()
      f = io.open(shard, 'wb')
      f:write(data:sub(1, 20))
      f:close()
    end
    flow.env.barrier()
    H.raises(function() flow.distributed.load(p) end, 'flow.distributed.load', shard)
    flow.env.barrier()
    if r == 0 then os.remove(shard) end
    flow.env.barrier()
    H.raises(function() flow.distributed.load(p) end, 'shard file', 'is missing')
    local g = path('ok.safetensors')
    flow.distributed.save(state(), g)
    H.raises(function() flow.distributed.load(g, {zzz = flow.zeros(1)}) end,
             'has no tensor named zzz')
    H.raises(function() flow.distributed.load(g, {a = flow.zeros(7, 4)}) end,
             'tensor a has shape [7, 5] in the checkpoint but [7, 4] in the target')
    H.raises(function() flow.distributed.load(path('nothing')) end, 'no such file')
    H.raises(function() flow.distributed.save({x = 1}, g) end, 'x is a number, not a tensor')
  end)
end)
