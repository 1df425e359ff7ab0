-- The Lua-side device API, runnable without a GPU: device parsing, lazy
-- loading of the CUDA library, why_unavailable, and clear errors for CUDA
-- work on a machine without one. Where a GPU is present the no-GPU cases
-- are left out (spec/cuda/ops_spec.lua covers that machine).
local flow = require 'oneflow'
local H = require 'spec.helpers'

local has_gpu = flow.cuda.is_available()

-- Runs a Lua snippet in a fresh LuaJIT with this checkout's modules.
local function fresh(code, env)
  local path = package.path:gsub("'", '')
  local cmd = ("%s LUA_PATH='%s' luajit -e %q 2>&1"):format(env or '', path, code)
  local f = assert(io.popen(cmd))
  local out = f:read('*a')
  f:close()
  return out
end

describe('flow.device', function()
  it('parses cpu, cuda and cuda:N', function()
    local d = flow.device('cuda:1')
    assert.are.equal('cuda', d.type)
    assert.are.equal(1, d.index)
    assert.are.equal('cuda:1', tostring(d))
    assert.are.equal('cuda:2', tostring(flow.device('cuda', 2)))
    assert.are.equal('cpu', flow.device('cpu').type)
    assert.is_true(flow.device('cuda:0') == flow.device('cuda', 0))
    assert.is_false(flow.device('cuda:0') == flow.device('cpu'))
  end)
  it('rejects unknown devices', function()
    H.raises(function() flow.device('gpu:0') end, 'unknown device', 'gpu:0')
    H.raises(function() flow.device(3) end, 'expected a string')
    H.raises(function() flow.ones(2):to('tpu') end, 'unknown device')
  end)
  it('CPU tensors report the cpu device', function()
    local x = flow.ones(2, 3)
    assert.are.equal('cpu', x.device.type)
    assert.is_false(x.is_cuda)
    assert.are.equal(x, x:cpu())
    assert.are.equal(x, x:to('cpu'))
    assert.are.equal(x, x:to{device = 'cpu', non_blocking = true})
  end)
end)

describe('the CUDA library', function()
  it('is not loaded by importing oneflow or by CPU work', function()
    local out = fresh([[local flow = require 'oneflow'
      local x = flow.randn(4, 4); local y = flow.matmul(x, x):sum(); y = y + 1
      io.write(tostring(flow.cuda.is_initialized()))]])
    assert.are.equal('false', out)
  end)
  it('is loaded on the first question that needs it', function()
    local out = fresh([[local flow = require 'oneflow'
      flow.cuda.is_available()
      io.write(tostring(flow.cuda.is_initialized()))]])
    assert.are.equal(tostring(flow.cuda.is_built()), out)
  end)
  it('explains a library that cannot be loaded', function()
    local out = fresh([[local flow = require 'oneflow'
      io.write(tostring(flow.cuda.is_available()), '|', flow.cuda.why_unavailable())]],
      'OF_CUDA_LIBRARY=/nonexistent/liboneflow_cuda.so')
    assert.truthy(out:find('false|cannot load the CUDA library', 1, true), out)
    assert.truthy(out:find('/nonexistent/liboneflow_cuda.so', 1, true), out)
  end)
  it('says why it is unavailable, or nothing when it is', function()
    local why = flow.cuda.why_unavailable()
    if has_gpu then
      assert.are.equal('', why)
      assert.is_true(flow.cuda.device_count() >= 1)
    else
      assert.is_true(#why > 0)
      assert.are.equal(0, flow.cuda.device_count())
      if not flow.cuda.is_built() then assert.truthy(why:find('no CUDA part', 1, true)) end
    end
  end)
end)

describe('CUDA work without a GPU', function()
  if has_gpu then
    pending('a GPU is present: see spec/cuda/ops_spec.lua')
    return
  end
  local why = flow.cuda.why_unavailable()
  it('moving a tensor fails with the reason', function()
    local x = flow.ones(3)
    H.raises(function() x:to('cuda') end, 'cuda:0 is not available', why)
    H.raises(function() x:cuda() end, 'is not available')
    H.raises(function() x:to{device = 'cuda:1', dtype = 'float64'} end, 'cuda:1 is not available')
  end)
  it('factories with a CUDA device fail with the reason', function()
    H.raises(function() flow.zeros(2, 2, {device = 'cuda'}) end, 'is not available', why)
    H.raises(function() flow.randn(2, {device = 'cuda:0'}) end, 'is not available')
    H.raises(function() flow.tensor({1, 2}, {device = 'cuda'}) end, 'is not available')
    H.raises(function() flow.arange(5, {device = 'cuda'}) end, 'is not available')
  end)
  it('device queries and synchronisation fail or answer plainly', function()
    H.raises(function() flow.cuda.current_device() end, 'CUDA is not available')
    H.raises(function() flow.cuda.synchronize() end, 'synchronize', 'not available')
    H.raises(function() flow.cuda.set_device(0) end, 'set_device', 'not available')
    H.raises(function() flow.cuda.Stream() end, 'Stream', 'not available')
    H.raises(function() flow.cuda.Event() end, 'Event', 'not available')
    local s = flow.cuda.memory_stats()
    assert.are.equal(0, s.current_bytes)
    assert.are.equal(0, flow.cuda.max_memory_allocated())
    flow.cuda.empty_cache()
  end)
  it('pin_memory gives a plain copy', function()
    local x = flow.arange(6):reshape(2, 3)
    local p = x:pin_memory()
    assert.is_false(p:is_pinned())
    H.close(p, x)
    assert.are_not.equal(flow.C.of_tensor_storage_id(p.p), flow.C.of_tensor_storage_id(x.p))
  end)
end)

describe('flow.backends.cuda.matmul.allow_tf32', function()
  it('is off by default and can be set', function()
    assert.is_false(flow.backends.cuda.matmul.allow_tf32)
    flow.backends.cuda.matmul.allow_tf32 = true
    assert.is_true(flow.backends.cuda.matmul.allow_tf32)
    flow.backends.cuda.matmul.allow_tf32 = false
    assert.is_false(flow.backends.cuda.matmul.allow_tf32)
    H.raises(function() flow.backends.cuda.matmul.allow_fp8 = true end, 'unknown setting')
  end)
end)
