-- flow.load_t7: Torch7 files, binary (64- and 32-bit longs) and ascii. Torch7
-- is not installed here: the files are written by hand below, byte for byte
-- as torch/File.lua writes them.
local ffi = require 'ffi'
local flow = require 'oneflow'
local H = require 'spec.helpers'
local t7 = require 'oneflow.io.t7'

------------------------------------------------------------------ helpers
local made = {}
local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute('mkdir -p ' .. d) == 0)
  made[#made + 1] = d
  return d
end
teardown(function()
  for _, d in ipairs(made) do os.execute('rm -rf ' .. d) end
end)
local dir = tmpdir()

local function writebytes(name, s)
  local p = dir .. '/' .. name
  local f = assert(io.open(p, 'wb'))
  f:write(s)
  f:close()
  return p
end

local function le(n, width)
  local b = {}
  if n < 0 then n = n + 2 ^ (8 * width) end
  for i = 1, width do
    b[i] = string.char(n % 256)
    n = math.floor(n / 256)
  end
  return table.concat(b)
end

local function packed(ctype, list)
  local n = #list
  local buf = ffi.new(ctype .. '[?]', math.max(n, 1), list)
  return ffi.string(buf, ffi.sizeof(ctype) * n)
end

-- Binary writer (longs of `ls` bytes).
local function binary(ls)
  local E = {}
  function E.int(n) return le(n, 4) end
  function E.long(n) return le(n, ls) end
  function E.double(x) return packed('double', {x}) end
  E.none = le(0, 4)
  function E.number(x) return E.int(1) .. E.double(x) end
  function E.string(s) return E.int(2) .. E.int(#s) .. s end
  function E.bool(b) return E.int(5) .. E.int(b and 1 or 0) end
  function E.table(idx, kvs)
    local s = E.int(3) .. E.int(idx) .. E.int(#kvs)
    for _, kv in ipairs(kvs) do s = s .. kv[1] .. kv[2] end
    return s
  end
  function E.ref(typ, idx) return E.int(typ) .. E.int(idx) end
  function E.class(idx, cls, unversioned)
    local s = E.int(4) .. E.int(idx)
    if not unversioned then s = s .. E.int(3) .. 'V 1' end
    return s .. E.int(#cls) .. cls
  end
  function E.storage(idx, cls, n, data) return E.class(idx, cls) .. E.long(n) .. data end
  function E.tensor(idx, cls, sizes, strides, offset1, storage)
    local s = E.class(idx, cls) .. E.int(#sizes)
    for _, v in ipairs(sizes) do s = s .. E.long(v) end
    for _, v in ipairs(strides) do s = s .. E.long(v) end
    return s .. E.long(offset1) .. storage
  end
  function E.func(idx, bytecode, upvalues)
    return E.int(8) .. E.int(idx) .. E.int(#bytecode) .. bytecode .. upvalues
  end
  return E
end
local B = binary(8)

-- Ascii writer: numbers as text, a newline after each write call.
local A = {}
function A.int(n) return string.format('%d\n', n) end
A.long = A.int
function A.longs(list) return #list > 0 and (table.concat(list, ' ') .. '\n') or '' end
function A.double(x) return string.format('%.17g\n', x) end
function A.chars(s) return s .. (#s > 0 and '\n' or '') end
A.none = A.int(0)
function A.number(x) return A.int(1) .. A.double(x) end
function A.string(s) return A.int(2) .. A.int(#s) .. A.chars(s) end
function A.bool(b) return A.int(5) .. A.int(b and 1 or 0) end
function A.table(idx, kvs)
  local s = A.int(3) .. A.int(idx) .. A.int(#kvs)
  for _, kv in ipairs(kvs) do s = s .. kv[1] .. kv[2] end
  return s
end
function A.ref(typ, idx) return A.int(typ) .. A.int(idx) end
function A.class(idx, cls)
  return A.int(4) .. A.int(idx) .. A.int(3) .. A.chars('V 1') .. A.int(#cls) .. A.chars(cls)
end
function A.storage(idx, cls, values)
  local v = {}
  for i, x in ipairs(values) do v[i] = type(x) == 'string' and x or string.format('%.17g', x) end
  return A.class(idx, cls) .. A.long(#values) .. A.longs(v)
end
function A.tensor(idx, cls, sizes, strides, offset1, storage)
  return A.class(idx, cls) .. A.int(#sizes) .. A.longs(sizes) .. A.longs(strides) .. A.long(offset1) .. storage
end

local function storage_id(t) return tonumber(flow.C.of_tensor_storage_id(t.p)) end

local function load(name, s, opts) return flow.load_t7(writebytes(name, s), opts) end

local function refused(name, s, ...)
  local p = writebytes(name, s)
  return H.raises(function() flow.load_t7(p) end, 'flow.load_t7', p, ...)
end

-- {w = FloatTensor 2x3 (storage idx 3), v = FloatTensor view of row 2 of the
-- same storage, d = DoubleTensor, n = 3.5, s = 'hello', b = true}
local function sample(E, float_data)
  local st = E.storage(3, 'torch.FloatStorage', 6, float_data or packed('float', {1, 2, 3, 4, 5, 6.5}))
  return E.table(1, {
    {E.string('w'), E.tensor(2, 'torch.FloatTensor', {2, 3}, {3, 1}, 1, st)},
    {E.string('v'), E.tensor(4, 'torch.FloatTensor', {3}, {1}, 4, E.ref(4, 3))},
    {E.string('d'), E.tensor(5, 'torch.DoubleTensor', {2}, {1}, 1,
                             E.storage(6, 'torch.DoubleStorage', 2, packed('double', {0.1, -1e300})))},
    {E.string('n'), E.number(3.5)},
    {E.string('s'), E.string('hello')},
    {E.string('b'), E.bool(true)},
  })
end

local function check_sample(v, what)
  H.close(v.w, {{1, 2, 3}, {4, 5, 6.5}}, 0, what)
  H.close(v.v, {4, 5, 6.5}, 0, what)
  assert.are.equal('float32', v.w.dtype.name)
  assert.are.equal(storage_id(v.w), storage_id(v.v), what .. ': shared storage')
  assert.are.equal(3, v.v:storage_offset())
  H.close(v.d, {0.1, -1e300}, 0, what)
  assert.are.equal('float64', v.d.dtype.name)
  assert.are.equal(3.5, v.n)
  assert.are.equal('hello', v.s)
  assert.is_true(v.b)
end

------------------------------------------------------------------ specs
describe('flow.load_t7: binary files', function()
  it('reads tables, numbers, strings, booleans and tensors', function()
    check_sample(load('sample.t7', sample(B)), 'binary')
    check_sample(t7.loads(sample(B)), 'bytes')
    assert.is_nil(load('nil.t7', B.none))
    assert.are.equal(42, load('num.t7', B.number(42)))
    assert.are.equal('', load('empty_str.t7', B.string('')))
  end)

  it('shares storage between views and keeps references', function()
    local v = load('shared.t7', sample(B))
    v.w[2]:fill_(0)
    H.close(v.v, {0, 0, 0}, 0)
    -- a tensor and a table stored twice load as one value; a table may hold itself
    local st = B.storage(3, 'torch.FloatStorage', 2, packed('float', {1, 2}))
    local s = B.table(1, {
      {B.string('a'), B.tensor(2, 'torch.FloatTensor', {2}, {1}, 1, st)},
      {B.string('b'), B.ref(4, 2)},
      {B.string('sub'), B.table(5, {{B.number(1), B.string('x')}})},
      {B.string('sub2'), B.ref(3, 5)},
      {B.string('self'), B.ref(3, 1)},
      {B.string('storage'), B.ref(4, 3)},
    })
    local r = load('refs.t7', s)
    assert.is_true(rawequal(r.a, r.b))
    assert.is_true(rawequal(r.sub, r.sub2))
    assert.are.equal('x', r.sub[1])
    assert.is_true(rawequal(r, r.self))
    -- a bare storage is a 1-d tensor over the same memory
    assert.are.equal(storage_id(r.a), storage_id(r.storage))
    H.close(r.storage, {1, 2}, 0)
  end)

  it('reads every tensor type but Short, with offsets and strides', function()
    local function one(cls, scls, ctype, values, n)
      n = n or #values
      return B.tensor(1, cls, {n}, {1}, 1, B.storage(2, scls, n, packed(ctype, values)))
    end
    local cases = {
      {'Double', 'double', {0.5, -2}, 'float64'},
      {'Long', 'int64_t', {-9007199254740991, 9007199254740991}, 'int64'},
      {'Int', 'int32_t', {-2147483648, 2147483647}, 'int32'},
      {'Byte', 'uint8_t', {0, 255}, 'uint8'},
      {'Char', 'int8_t', {-128, 127}, 'int8'},
      {'Short', 'int16_t', {-32768, 32767}, 'int16'},
      {'Cuda', 'float', {1.5, 2}, 'float32'},
    }
    for _, c in ipairs(cases) do
      local t = load(c[1] .. '.t7', one('torch.' .. c[1] .. 'Tensor', 'torch.' .. c[1] .. 'Storage', c[2], c[3]))
      assert.are.equal(c[4], t.dtype.name, c[1])
      H.close(t, c[3], 0, c[1])
    end
    local h = load('half.t7', one('torch.HalfTensor', 'torch.HalfStorage', 'uint16_t', {0x3800, 0xBC00}))
    assert.are.equal('float16', h.dtype.name)
    H.close(h, {0.5, -1}, 0)
    -- transposed view with an offset
    local tr = load('tr.t7', B.tensor(1, 'torch.FloatTensor', {3, 2}, {1, 3}, 2,
                                      B.storage(2, 'torch.FloatStorage', 8, packed('float', {0, 1, 2, 3, 4, 5, 6, 7}))))
    H.close(tr, {{1, 4}, {2, 5}, {3, 6}}, 0)
    assert.are.same({1, 3}, tr:stride())
    -- an empty tensor
    local e = load('emptyt.t7', B.tensor(1, 'torch.FloatTensor', {}, {}, 1, B.none))
    assert.are.same({0}, H.shape(e))
  end)

  it('loads nn modules as plain tables of fields, never running code', function()
    local lin = B.class(2, 'nn.Linear') .. B.table(3, {
      {B.string('weight'), B.tensor(4, 'torch.FloatTensor', {1, 2}, {2, 1}, 1,
                                    B.storage(5, 'torch.FloatStorage', 2, packed('float', {0.5, -0.5})))},
      {B.string('train'), B.bool(true)},
      {B.string('_type'), B.string('torch.FloatTensor')},
      -- a function field: bytecode that must never be loaded
      {B.string('hook'), B.func(6, 'os.execute("touch ' .. dir .. '/pwned")', B.table(7, {}))},
    })
    local seq = B.class(1, 'nn.Sequential') .. B.table(8, {
      {B.string('modules'), B.table(9, {{B.number(1), lin}})},
    })
    local m = load('seq.t7', seq)
    assert.are.equal('nn.Sequential', t7.typename(m))
    local l = m.modules[1]
    assert.are.equal('nn.Linear', t7.typename(l))
    H.close(l.weight, {{0.5, -0.5}}, 0)
    assert.is_true(l.train)
    assert.is_true(l.hook.__t7_function)
    local f = io.open(dir .. '/pwned')
    assert.is_nil(f, 'nothing ran')
    -- files from before versioning: the class name alone
    local old = B.class(1, 'torch.FloatTensor', true) .. B.int(1) .. B.long(2) .. B.long(1) .. B.long(1)
      .. B.class(2, 'torch.FloatStorage', true) .. B.long(2) .. packed('float', {7, 8})
    H.close(load('old.t7', old), {7, 8}, 0)
  end)

  it('reads files with 32-bit longs (b32), detected or told', function()
    local B4 = binary(4)
    check_sample(load('b32.t7', sample(B4)), 'b32 detected')
    check_sample(load('b32b.t7', sample(B4), {format = 'b32'}), 'b32 told')
    check_sample(load('b64.t7', sample(B), {format = 'b64'}), 'b64 told')
    -- a LongTensor in a b32 file has 4-byte elements
    local lt = B4.tensor(1, 'torch.LongTensor', {2}, {1}, 1, B4.storage(2, 'torch.LongStorage', 2,
                                                                       packed('int32_t', {-3, 7})))
    local t = load('b32long.t7', lt, {format = 'b32'})
    assert.are.equal('int64', t.dtype.name)
    H.close(t, {-3, 7}, 0)
    H.raises(function() load('bad_fmt.t7', sample(B), {format = 'xml'}) end, 'format')
  end)
end)

describe('flow.load_t7: ascii files', function()
  it('reads the same objects written as text', function()
    local st = A.storage(3, 'torch.FloatStorage', {1, 2, 3, 4, 5, 6.5})
    local s = A.table(1, {
      {A.string('w'), A.tensor(2, 'torch.FloatTensor', {2, 3}, {3, 1}, 1, st)},
      {A.string('v'), A.tensor(4, 'torch.FloatTensor', {3}, {1}, 4, A.ref(4, 3))},
      {A.string('d'), A.tensor(5, 'torch.DoubleTensor', {2}, {1}, 1,
                               A.storage(6, 'torch.DoubleStorage', {0.1, -1e300}))},
      {A.string('n'), A.number(3.5)},
      {A.string('s'), A.string('hello')},
      {A.string('b'), A.bool(true)},
      {A.string('text'), A.string(' two\nlines ')},
      {A.string('inf'), A.number(math.huge)},
      {A.string('nan'), A.number(0 / 0)},
      {A.string('l'), A.tensor(7, 'torch.LongTensor', {2}, {1}, 1,
                               A.storage(8, 'torch.LongStorage', {'-9223372036854775807', '42'}))},
      {A.string('h'), A.tensor(9, 'torch.HalfTensor', {2}, {1}, 1, A.storage(10, 'torch.HalfStorage', {0.5, -1}))},
      {A.number(1), A.string('')},
    })
    local v = load('ascii.t7', s)
    check_sample(v, 'ascii')
    assert.are.equal(' two\nlines ', v.text)
    assert.are.equal(math.huge, v.inf)
    assert.is_true(v.nan ~= v.nan)
    assert.are.equal('int64', v.l.dtype.name)
    assert.are.equal('-9223372036854775807LL', tostring(v.l:data_ptr()[0]))
    assert.are.equal(42, v.l[2]:item())
    assert.are.equal('float16', v.h.dtype.name)
    H.close(v.h, {0.5, -1}, 0)
    assert.are.equal('', v[1])
    check_sample(load('ascii2.t7', s, {format = 'ascii'}), 'ascii told')
  end)

  it('refuses bad text', function()
    refused('a_word.t7', '3\n1\nfoo\n', 'expected an integer')
    refused('a_byte.t7', A.tensor(1, 'torch.ByteTensor', {1}, {1}, 1, A.storage(2, 'torch.ByteStorage', {300})),
            'out of range for uint8')
    refused('a_trunc.t7', A.tensor(1, 'torch.FloatTensor', {4}, {1}, 1,
                                   '4\n2\n3\nV 1\n18\ntorch.FloatStorage\n4\n1 2'), 'truncated')
  end)
end)

describe('flow.load_t7: hostile and broken files', function()
  it('refuses every truncation and survives flipped bytes', function()
    local s = sample(B)
    for n = 0, #s - 1 do
      local ok, err = pcall(t7.loads, s:sub(1, n), {name = 'cut.t7'})
      assert(not ok, 'truncated to ' .. n .. ' bytes loaded')
      assert(tostring(err):find('flow.load_t7: cut.t7', 1, true), err)
    end
    local errors = 0
    for i = 1, #s do
      for _, x in ipairs({0x01, 0x80, 0xff}) do
        local b = string.char(bit.bxor(s:byte(i), x))
        local ok, err = pcall(t7.loads, s:sub(1, i - 1) .. b .. s:sub(i + 1), {name = 'flip.t7'})
        if not ok then
          errors = errors + 1
          assert(tostring(err):find('flow.load_t7: flip.t7', 1, true), err)
        end
      end
    end
    assert(errors > #s, 'most flips are detected')
  end)

  it('checks sizes, counts, views and class names', function()
    refused('empty.t7', '', 'empty file')
    refused('magic.t7', '\200\1\2\3', 'not a Torch7 file')
    refused('type.t7', B.table(1, {{B.string('a'), B.int(9)}}), 'unknown object type 9')
    refused('strlen.t7', B.int(2) .. B.int(-5), 'negative count')
    refused('strbig.t7', B.int(2) .. B.int(0x7FFFFFFF) .. 'abc', 'truncated')
    refused('stbig.t7', B.storage(1, 'torch.FloatStorage', 2 ^ 40, ''), 'only')
    refused('view.t7', B.tensor(1, 'torch.FloatTensor', {10}, {1}, 1, B.storage(2, 'torch.FloatStorage', 2,
                                                                                packed('float', {1, 2}))),
            'reaches element 10', 'storage of 2')
    refused('offset.t7', B.tensor(1, 'torch.FloatTensor', {1}, {1}, 0, B.storage(2, 'torch.FloatStorage', 2,
                                                                               packed('float', {1, 2}))),
            'before the storage')
    refused('ndim.t7', B.tensor(1, 'torch.FloatTensor', {1, 1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1, 1}, 1,
                                B.none), 'at most 8')
    refused('nostorage.t7', B.tensor(1, 'torch.FloatTensor', {2}, {1}, 1, B.none), 'has no storage')
    refused('mixed.t7', B.tensor(1, 'torch.FloatTensor', {2}, {1}, 1, B.storage(2, 'torch.DoubleStorage', 2,
                                                                              packed('double', {1, 2}))),
            'on a storage of float64')
    refused('notst.t7', B.tensor(1, 'torch.FloatTensor', {2}, {1}, 1, B.string('x')), 'not a storage')
    refused('cls.t7', B.class(1, 'os.execute("rm")') .. B.none, 'bad class name')
    refused('tds.t7', B.class(1, 'tds.Hash') .. B.none, 'tds.Hash', 'not supported')
    refused('fields.t7', B.class(1, 'nn.Linear') .. B.number(3), 'expected the table of its fields')
    refused('tsize.t7', B.int(3) .. B.int(1) .. B.int(0x7FFFFFFF), 'cannot fit')
    refused('nilkey.t7', B.table(1, {{B.none, B.number(1)}}), 'key is nil')
    refused('nankey.t7', B.table(1, {{B.number(0 / 0), B.number(1)}}), 'NaN')
    -- nesting bombs
    local deep = {}
    for i = 1, t7.MAX_DEPTH + 10 do deep[#deep + 1] = B.int(3) .. B.int(i) .. B.int(1) .. B.number(1) end
    refused('deep.t7', table.concat(deep) .. B.none, 'nested deeper than')
    H.raises(function() flow.load_t7(dir .. '/missing.t7') end, 'missing.t7', 'cannot open')
  end)
end)
