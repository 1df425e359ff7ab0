-- The NCCL backend seen from one process (a world of one): libnccl is not
-- loaded until a collective on CUDA tensors asks for it, "cuda" placements
-- say why they cannot work without a GPU, and on a GPU machine the
-- collectives and a cuda global tensor work through NCCL. Several processes
-- on GPUs: spec/dist/nccl_mpi.lua.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local has_gpu = flow.cuda.is_available()

local function fresh(code, env)
  local path = package.path:gsub("'", '')
  local cmd = ("%s LUA_PATH='%s' luajit -e %q 2>&1"):format(env or '', path, code)
  local f = assert(io.popen(cmd))
  local out = f:read('*a')
  f:close()
  return out
end

local function maps_have(name)
  local f = io.open('/proc/self/maps')
  if not f then return nil end
  local s = f:read('*a')
  f:close()
  return s:find(name, 1, true) ~= nil
end

describe('NCCL loading', function()
  it('is not loaded by CPU work, CPU collectives or asking about CUDA', function()
    local out = fresh("local flow = require 'oneflow'; local t = flow.ones(4); " ..
                      "flow.comm.all_reduce(t); flow.comm.all_gather(t); flow.env.barrier(); " ..
                      "flow.cuda.is_available(); " ..
                      "local m = io.open('/proc/self/maps'):read('*a'); " ..
                      "print(flow.comm.nccl_loaded(), m:find('libnccl', 1, true) ~= nil, " ..
                      "t:sum():item())")
    assert.are.equal('false\tfalse\t4\n', out)
  end)
  it('is not loaded in this process either, before a CUDA collective', function()
    if flow.comm.nccl_loaded() then
      pending('a CUDA collective already ran in this busted process')
      return
    end
    assert.is_false(maps_have('libnccl') or false)
  end)
end)

describe('cuda placements', function()
  if not has_gpu then
    it('say that they need a GPU, with the reason', function()
      local P = flow.placement('cuda', {0})
      assert.are.equal('cuda', P.type)
      H.raises(function() return flow.ones(4):to_global(P, flow.sbp.broadcast) end,
               'to_global', 'placement type "cuda" needs a usable GPU')
      H.raises(function() return flow.ones(4, {placement = P, sbp = flow.sbp.split(1)}) end,
               'ones', 'needs a usable GPU')
    end)
    pending('NCCL collectives skipped: no usable GPU (' .. flow.cuda.why_unavailable() .. ')')
    return
  end

  it('collectives on CUDA tensors go through NCCL (world of one)', function()
    local t = flow.arange(6, {dtype = 'float32'}):cuda()
    flow.comm.all_reduce(t)
    assert.is_true(flow.comm.nccl_loaded())
    H.close(t:cpu(), flow.arange(6, {dtype = 'float32'}), 0, 'all_reduce')
    local l = flow.comm.all_gather(t)
    assert.are.equal('cuda', l[1].device.type)
    H.close(l[1]:cpu(), t:cpu(), 0, 'all_gather')
    local h = flow.ones(3, {dtype = 'float16'}):cuda()
    flow.comm.all_reduce(h)
    H.close(h:float():cpu(), flow.ones(3), 0, 'float16 all_reduce')
    local rs = flow.comm.reduce_scatter(flow.ones(4, 2):cuda())
    H.close(rs:cpu(), flow.ones(4, 2), 0, 'reduce_scatter')
  end)
  it('a cuda global tensor lives on the GPU and reduces like a cpu one', function()
    local P = flow.placement('cuda', {0})
    local x = flow.randn(5, 3)
    local g = x:to_global(P, flow.sbp.split(1))
    assert.are.equal('cuda', g:to_local().device.type)
    local s = (g * 2):sum(1)
    H.close(s:to_global(P, flow.sbp.broadcast):to_local():cpu(), (x * 2):sum(1), 1e-6)
  end)
  it('a missing libnccl gives a clear error, not a crash', function()
    local out = fresh("local flow = require 'oneflow'; local t = flow.ones(2):cuda(); " ..
                      "print(pcall(flow.comm.all_reduce, t))", 'OF_NCCL_LIBRARY=/nonexistent/libnccl.so')
    assert.truthy(out:find('NCCL backend', 1, true), out)
    assert.truthy(out:find('cannot load libnccl', 1, true), out)
  end)
end)
