local flow = require 'oneflow'
local core = require 'oneflow._C'

describe('tensor lifetimes', function()
  it('releases C memory when Lua tensors are collected', function()
    flow.collect()
    local before = flow.memory_stats().current_bytes
    do
      local big = flow.zeros(1024, 1024)   -- 4 MiB
      assert.are.equal(1048576, big:numel())
      assert.is_true(flow.memory_stats().current_bytes >= before + 4 * 1024 * 1024)
    end
    flow.collect()
    assert.are.equal(before, flow.memory_stats().current_bytes)
  end)

  it('keeps storage alive while a view lives', function()
    local v
    do
      local x = flow.arange(0, 10, {dtype = flow.float64})
      v = x:narrow(1, 5, 2)
    end
    flow.collect()
    assert.are.same({4, 5}, v:totable())
  end)

  it('a loop of small ops keeps the handle count and memory bounded', function()
    local a, b = flow.tensor({1}), flow.tensor({2})
    flow.collect()
    for _ = 1, 200000 do local _ = a + b end
    assert.is_true(core.live_handles() < 50000, 'live handles: ' .. core.live_handles())
    assert.is_true(flow.memory_stats().current_bytes < 64 * 1024 * 1024)
  end)

  it('reuses freed blocks through the caching allocator', function()
    flow.collect()
    local s0 = flow.memory_stats()
    for _ = 1, 20 do
      assert.are.equal(1048576, flow.empty(1048576):numel())
      flow.collect()
    end
    local s1 = flow.memory_stats()
    assert.is_true(s1.cache_hits - s0.cache_hits >= 19)
    assert.is_true(s1.peak_bytes >= 4 * 1048576)
  end)

  it('shares tensors with C hosts through handles', function()
    local x = flow.tensor({1, 2})
    local p = flow.to_handle(x)
    local y = flow.from_handle(p)
    core.C.of_tensor_release(p)
    y[1] = 5
    assert.are.equal(5, x[1]:item())
    -- a NULL or non-pointer handle is an error, not a crash (the embed
    -- example run on its own, without its C host, passed NULL)
    local ffi = require 'ffi'
    local H = require 'spec.helpers'
    H.raises(function() flow.from_handle(ffi.cast('of_tensor*', nil)) end, 'from_handle', 'NULL')
    H.raises(function() flow.from_handle(nil) end, 'from_handle: expected a non-NULL of_tensor*')
    H.raises(function() flow.from_handle(42) end, 'from_handle')
  end)
end)

describe('bin/flow', function()
  local function run(cmd)
    local f = io.popen(cmd .. ' 2>&1')
    local out = f:read('*a')
    f:close()
    return out
  end

  it('runs a script with require "oneflow" working', function()
    local tmp = os.tmpname()
    local f = io.open(tmp, 'w')
    f:write("local flow = require 'oneflow'\nprint((flow.ones(2) * 3):totable()[2])\n")
    f:close()
    local out = run('./bin/flow ' .. tmp)
    os.remove(tmp)
    assert.are.equal('3\n', out)
  end)

  it('starts a REPL that prints expression values', function()
    local out = run("printf 'x = flow.ones(2)\\nx * 2\\n1 +\\n1\\n' | ./bin/flow")
    assert.is_truthy(out:find('tensor([2., 2.])', 1, true), out)
    assert.is_truthy(out:find('\n2\n', 1, true) or out:find(' 2\n', 1, true), out)
  end)
end)
