-- NaNs with a sign bit and a payload (as a hostile or corrupt file can hold)
-- must reach Lua as real NaNs: LuaJIT keeps type tags in NaN payloads and does
-- not canonicalise NaNs it loads from FFI memory (floats nor doubles), so such
-- a value used to come back as a bogus object (type() 'proto') and crash the GC.
local flow = require 'oneflow'
local ffi = require 'ffi'

-- Each bit pattern, stored in its dtype, widens to a double that LuaJIT reads
-- as a non-number when not canonicalised.
local CASES = {
  {dtype = 'float32', ctype = 'uint32_t', bits = {0xffa03039, 0xfffc0607, 0x3f800000}},
  {dtype = 'float64', ctype = 'uint64_t', bits = {0xfffc060720000000ULL, 0xfff9000000000001ULL,
                                                  0x3ff0000000000000ULL}},
  {dtype = 'float16', ctype = 'uint16_t', bits = {0xfd01, 0xffff, 0x3c00}},
  {dtype = 'bfloat16', ctype = 'uint16_t', bits = {0xffa0, 0xfffc, 0x3f80}},
}

local function hostile(c)
  local raw = ffi.new(c.ctype .. '[?]', #c.bits, c.bits)
  return flow.from_blob(raw, {#c.bits}, {dtype = flow[c.dtype]}):clone()
end

local function is_nan(v)
  return type(v) == 'number' and v ~= v
end

describe('NaNs with payload bits', function()
  for _, c in ipairs(CASES) do
    it(c.dtype .. ': item, totable, tolist, indexing and printing give real NaNs', function()
      local t = hostile(c)
      local tab = t:totable()
      assert.is_true(is_nan(tab[1]), type(tab[1]))
      assert.is_true(is_nan(tab[2]), type(tab[2]))
      assert.are.equal(1, tab[3])
      assert.is_true(is_nan(t:tolist()[1]))
      assert.is_true(is_nan(t[1]:item()))
      assert.is_true(is_nan(t[2]:item()))
      -- a strided view goes through the same reads
      assert.is_true(is_nan(t:flip(1)[3]:item()))
      -- the payload survives arithmetic; the result still reads as NaN
      assert.is_true(is_nan((t + 1)[1]:item()))
      assert.are.equal('tensor([nan, nan, 1.]' .. (c.dtype == 'float32' and ')'
        or ', dtype=oneflow.' .. c.dtype .. ')'), tostring(t))
      assert.is_true(is_nan(t:sum():item()))
      collectgarbage()
      collectgarbage()
    end)
  end

  it('survive a safetensors file and load as real NaNs', function()
    local path = os.tmpname()
    local saved = {}
    for _, c in ipairs(CASES) do saved[c.dtype] = hostile(c) end
    flow.save(saved, path)
    local loaded = flow.load(path)
    os.remove(path)
    for _, c in ipairs(CASES) do
      local t = loaded[c.dtype]
      assert.are.equal(flow[c.dtype], t.dtype)
      for i = 1, 2 do assert.is_true(is_nan(t:totable()[i]), c.dtype) end
      assert.is_truthy(tostring(t):find('nan, nan', 1, true))
    end
    collectgarbage()
  end)

  it('pickle floats and raw f32/f64 reads of file bytes come back as real NaNs', function()
    local bytes = require 'oneflow.io.bytes'
    local pickle = require 'oneflow.io.pickle'
    local function fail(fmt, ...) error(string.format(fmt, ...), 0) end
    local function with_reader(s, fn)
      return bytes.with_source('<bytes>', s, fail, function(src) return fn(bytes.reader(src, 0, #s, fail)) end)
    end
    -- BINFLOAT: 'G' and a big-endian double
    local v = with_reader('\128\2G\255\252\6\7\32\0\0\0.', function(r) return pickle.load(r, {fail = fail}) end)
    assert.is_true(is_nan(v), type(v))
    local le = '\0\0\0\32\7\6\252\255'
    assert.is_true(is_nan(with_reader(le, function(r) return r:f64('x') end)))
    assert.is_true(is_nan(with_reader(le:reverse(), function(r) return r:f64be('x') end)))
    assert.is_true(is_nan(with_reader('\57\48\160\255', function(r) return r:f32('x') end)))
    -- ordinary values are untouched
    assert.are.equal(1, with_reader('\0\0\128\63', function(r) return r:f32('x') end))
    assert.are.equal(math.huge, with_reader('\0\0\128\127', function(r) return r:f32('x') end))
    assert.are.equal(-math.huge, with_reader('\0\0\0\0\0\0\240\255', function(r) return r:f64('x') end))
    collectgarbage()
  end)
end)

describe('flowvision nms with NaN payload scores and boxes', function()
  it('reads them as NaNs (it compared a bogus object before)', function()
    local ops = require 'flowvision.models.detection.ops'
    local boxes = flow.tensor({{0, 0, 10, 10}, {1, 1, 10, 10}, {20, 20, 30, 30}})
    local s = flow.from_blob(ffi.new('uint32_t[3]', 0xffa03039, 0x3f000000, 0x3f400000), {3},
                             {dtype = flow.float32}):clone()
    boxes[1][1] = s[1]
    local keep = ops.nms(boxes, s, 0.5)
    assert.are.equal(3, keep:numel())
    collectgarbage()
  end)
end)
