local flow = require 'oneflow'
local H = require 'spec.helpers'

describe('creation', function()
  it('tensor from nested tables is float32 by default', function()
    local x = flow.tensor({{1, 2}, {3, 4}})
    assert.are.same({2, 2}, H.shape(x))
    assert.are.equal(flow.float32, x.dtype)
    assert.are.same({{1, 2}, {3, 4}}, x:totable())
  end)

  it('takes dtype options and booleans', function()
    local x = flow.tensor({1, 2, 3}, {dtype = flow.int64})
    assert.are.equal(flow.int64, x.dtype)
    local b = flow.tensor({true, false})
    assert.are.equal(flow.bool, b.dtype)
    assert.are.same({true, false}, b:totable())
    assert.are.equal(3.5, flow.tensor(3.5):item())
    assert.are.equal(0, flow.tensor(3.5):dim())
  end)

  it('zeros, ones, full, empty accept numbers or a table', function()
    assert.are.same({2, 3}, H.shape(flow.zeros(2, 3)))
    assert.are.same({2, 3}, H.shape(flow.ones({2, 3})))
    assert.are.same({{7, 7}}, flow.full({1, 2}, 7):totable())
    assert.are.same({4}, H.shape(flow.empty(4)))
    assert.are.equal(flow.float64, flow.zeros(2, {dtype = flow.float64}).dtype)
    assert.are.equal(flow.int32, flow.ones(2, 2, {dtype = 'int32'}).dtype)
    assert.are.same({}, H.shape(flow.zeros({})))
  end)

  it('eye, arange, linspace', function()
    assert.are.same({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, flow.eye(3):totable())
    assert.are.same({{1, 0, 0}, {0, 1, 0}}, flow.eye(2, 3):totable())
    local a = flow.arange(0, 5)
    assert.are.same({0, 1, 2, 3, 4}, a:totable())
    assert.are.equal(flow.int64, a.dtype)
    assert.are.same({0, 2, 4, 6, 8}, flow.arange(0, 10, 2):totable())
    assert.are.same({0, 1, 2}, flow.arange(3):totable())
    H.close(flow.arange(0, 1, 0.25), {0, 0.25, 0.5, 0.75})
    assert.are.equal(flow.float32, flow.arange(0, 1, 0.25).dtype)
    H.close(flow.linspace(0, 1, 5), {0, 0.25, 0.5, 0.75, 1})
    assert.are.same({-1}, flow.linspace(-1, 1, 1):totable())
  end)

  it('*_like and new_* follow the source dtype', function()
    local x = flow.zeros(2, 2, {dtype = flow.float64})
    assert.are.equal(flow.float64, flow.ones_like(x).dtype)
    assert.are.same({{1, 1}, {1, 1}}, flow.ones_like(x):totable())
    assert.are.same({{5, 5}, {5, 5}}, flow.full_like(x, 5):totable())
    assert.are.equal(flow.float64, x:new_zeros(3).dtype)
  end)

  it('rejects bad sizes with a clear error', function()
    H.raises(function() flow.zeros(-1, 2) end, 'zeros', 'negative size', '[-1,2]')
    H.raises(function() flow.empty(-1, 2) end, 'empty', 'negative size', '[-1,2]')
    H.raises(function() flow.zeros(1.5) end, 'zeros', 'integer')
    H.raises(function() flow.tensor({{1, 2}, {3}}) end, 'tensor', 'ragged')
    H.raises(function() flow.tensor({'a'}) end, 'tensor', 'expected a number')
    H.raises(function() flow.arange(0, 5, 0) end, 'arange')
    H.raises(function() flow.arange(5, 0, 1) end, 'arange', 'inconsistent')
    H.raises(function() flow.zeros(2, {dtype = 'complex'}) end, 'unknown dtype')
  end)

  it('every dtype round-trips small integers', function()
    for _, name in ipairs({'bool', 'uint8', 'int8', 'int32', 'int64', 'float16', 'bfloat16',
                           'float32', 'float64'}) do
      local x = flow.tensor({0, 1}, {dtype = name})
      assert.are.equal(name, x.dtype.name)
      local want = name == 'bool' and {false, true} or {0, 1}
      assert.are.same(want, x:totable())
    end
  end)

  it('float16 and bfloat16 round to nearest', function()
    H.close(flow.tensor({0.1, 65504, 1e-7}, {dtype = flow.float16}):float(),
            {0.0999755859375, 65504, 1.1920928955078125e-07})
    H.close(flow.tensor({0.1, 3.14159}, {dtype = flow.bfloat16}):float(), {0.10009765625, 3.140625})
    assert.are.equal(math.huge, flow.tensor({70000}, {dtype = flow.float16}):item())
  end)
end)

describe('from_blob and data_ptr', function()
  local ffi = require 'ffi'
  it('wraps C memory without copying', function()
    local buf = ffi.new('float[6]', {1, 2, 3, 4, 5, 6})
    local x = flow.from_blob(buf, {2, 3})
    assert.are.same({{1, 2, 3}, {4, 5, 6}}, x:totable())
    buf[0] = 10
    assert.are.equal(10, x[1][1]:item())
    x[2][3] = 60
    assert.are.equal(60, buf[5])
  end)

  it('data_ptr points at the first element of a view', function()
    local x = flow.arange(0, 6, {dtype = flow.float64}):view(2, 3)
    local p = x[2]:data_ptr()
    assert.are.equal(3, p[0])
    assert.are.equal(5, p[2])
  end)

  it('honours explicit strides', function()
    local buf = ffi.new('int32_t[6]', {1, 2, 3, 4, 5, 6})
    local x = flow.from_blob(buf, {3, 2}, {dtype = flow.int32, strides = {1, 3}})
    assert.are.same({{1, 4}, {2, 5}, {3, 6}}, x:totable())
  end)

  it('keeps an FFI array alive while the tensor lives', function()
    local x = flow.from_blob(ffi.new('float[4]', {1, 2, 3, 4}), {4})
    collectgarbage()
    collectgarbage()
    -- the freed array's memory would now hold these
    local junk = {}
    for i = 1, 20000 do junk[i] = ffi.new('float[4]', {9, 9, 9, 9}) end
    assert.are.same({1, 2, 3, 4}, x:totable())
    assert.equals(20000, #junk)
  end)

  it('refuses strides that do not match the sizes, a non-pointer and unknown options', function()
    local buf = ffi.new('float[6]')
    assert.has_error(function() flow.from_blob(buf, {2, 3}, {strides = {1}}) end,
                     'from_blob: strides must be a list of 2 numbers (one per size), got a list of 1')
    assert.has_error(function() flow.from_blob(12, {2, 3}) end,
                     'from_blob: argument 1 (ptr) must be a pointer or an FFI array, got number')
    assert.has_error(function() flow.from_blob(buf, {2, 3}, {deleter = print}) end)
    -- a struct would be cast to the address of the Lua object itself
    assert.has_error(function() flow.from_blob(flow.ones(6), {2, 3}) end,
                     'from_blob: argument 1 (ptr) must be a pointer or an FFI array, got a tensor')
    assert.equals(6, flow.from_blob(ffi.cast('float *', buf), {2, 3}):numel())
  end)
end)
