local ffi = require 'ffi'
local flow = require 'oneflow'
local H = require 'spec.helpers'
local json = require 'oneflow.utils.json'
local serialization = require 'oneflow.serialization'

------------------------------------------------------------------ helpers
local tmpdir, listdir = H.tmpdir, H.listdir
teardown(H.remove_tmpdirs)

local function readbytes(path)
  local f = assert(io.open(path, 'rb'))
  local s = f:read('*a')
  f:close()
  return s
end

local function writebytes(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end

local function le64(n)
  local b = {}
  for i = 1, 8 do
    b[i] = string.char(n % 256)
    n = math.floor(n / 256)
  end
  return table.concat(b)
end

local function read_le64(s)
  local n = 0
  for i = 8, 1, -1 do n = n * 256 + s:byte(i) end
  return n
end

-- A safetensors file from header text and data bytes.
local function make(header, data)
  return le64(#header) .. header .. (data or '')
end

local function same_tensor(a, b, msg)
  assert(flow.is_tensor(a) and flow.is_tensor(b), (msg or '') .. ': not tensors')
  assert.are.equal(b.dtype.name, a.dtype.name, msg)
  assert.are.same(H.shape(b), H.shape(a), msg)
  H.close(a, b, 0, msg)
end

-- Deep equality of Lua values with tensors compared by value, NaN == NaN.
local function deep_equal(a, b, path)
  path = path or 'value'
  if flow.is_tensor(a) or flow.is_tensor(b) then return same_tensor(a, b, path) end
  assert.are.equal(type(b), type(a), path)
  if type(a) == 'number' then
    if a ~= a then assert(b ~= b, path .. ': expected NaN') return end
    assert(a == b and 1 / a == 1 / b, ('%s: %.17g ~= %.17g'):format(path, a, b))
  elseif type(a) == 'table' then
    for k, v in pairs(b) do
      assert(a[k] ~= nil, path .. ': missing key ' .. tostring(k))
      deep_equal(a[k], v, path .. '.' .. tostring(k))
    end
    for k in pairs(a) do assert(b[k] ~= nil, path .. ': extra key ' .. tostring(k)) end
  else
    assert.are.equal(b, a, path)
  end
end

local all_dtypes = {
  bool = {{true, false, true}, {false, false, true}},
  uint8 = {{0, 1, 255}, {7, 128, 3}},
  int8 = {{-128, 0, 127}, {-1, 5, 9}},
  int32 = {{-2147483648, 0, 2147483647}, {1, -7, 42}},
  int64 = {{-9007199254740991, 0, 9007199254740991}, {1, -7, 42}},
  float16 = {{0.5, -2, 65504}, {1.5, 0.25, -0.125}},
  bfloat16 = {{0.5, -2, 3.0e38}, {1.5, 0.25, -0.125}},
  float32 = {{0.1, -2.5, 3.4e38}, {1e-30, 0, -1}},
  float64 = {{0.1, -2.5, 1.7e308}, {5e-324, 0, -1}},
}
local codes = {bool = 'BOOL', uint8 = 'U8', int8 = 'I8', int32 = 'I32', int64 = 'I64',
               float16 = 'F16', bfloat16 = 'BF16', float32 = 'F32', float64 = 'F64'}

local dir = tmpdir()
local function path_of(name) return dir .. '/' .. name end

------------------------------------------------------------------ specs
describe('flow.save / flow.load: round trips', function()
  it('keeps every dtype, shape and value', function()
    for name, values in pairs(all_dtypes) do
      local t = flow.tensor(values, {dtype = name})
      local p = path_of('dtype_' .. name .. '.safetensors')
      flow.save(t, p)
      same_tensor(flow.load(p), t, name)
    end
  end)

  it('writes a state dict of every dtype aligned, largest itemsize first', function()
    local sd = {}
    for name, values in pairs(all_dtypes) do sd['w.' .. name] = flow.tensor(values, {dtype = name}) end
    local p = path_of('all.safetensors')
    flow.save(sd, p)
    local back = flow.load(p)
    for k, t in pairs(sd) do same_tensor(back[k], t, k) end
    for k in pairs(back) do assert(sd[k], 'extra key ' .. k) end
    local s = readbytes(p)
    local n = read_le64(s)
    local header = json.decode(s:sub(9, 8 + n))
    for k, e in pairs(header) do
      local size = flow.tensor(0, {dtype = k:sub(3)}):element_size()
      assert.are.equal(0, e.data_offsets[1] % size, k .. ' is aligned')
      assert.are.equal(codes[k:sub(3)], e.dtype)
    end
  end)

  it('saves non-contiguous tensors and views by their elements only', function()
    local base = flow.arange(24):reshape(4, 6):to(flow.float32)
    local tt = base:t()
    assert.is_false(tt:is_contiguous())
    local p = path_of('noncontig.safetensors')
    flow.save({tt = tt, row = base[3], cols = base:narrow(2, 2, 3)}, p)
    local back = flow.load(p)
    same_tensor(back.tt, tt, 'transpose')
    assert.is_true(back.tt:is_contiguous())
    same_tensor(back.row, base[3], 'row')
    same_tensor(back.cols, base:narrow(2, 2, 3), 'cols')
    -- 24 + 6 + 12 floats, not three copies of the storage
    local s = readbytes(p)
    assert.are.equal(8 + read_le64(s) + 42 * 4, #s)
  end)

  it('handles 0-d and empty tensors', function()
    local p = path_of('small.safetensors')
    local v = {scalar = flow.tensor(3.5), iscalar = flow.tensor(7, {dtype = 'int64'}),
               empty = flow.empty({0, 3}), empty2 = flow.zeros({2, 0, 4}, {dtype = flow.int32})}
    flow.save(v, p)
    local back = flow.load(p)
    assert.are.equal(0, back.scalar:dim())
    assert.are.equal(3.5, back.scalar:item())
    assert.are.equal(7, back.iscalar:item())
    assert.are.same({0, 3}, H.shape(back.empty))
    assert.are.same({2, 0, 4}, H.shape(back.empty2))
    assert.are.equal('int32', back.empty2.dtype.name)
    -- a lone 0-d tensor too
    flow.save(flow.tensor(-1.25, {dtype = flow.float64}), p)
    local s = flow.load(p)
    assert.are.equal(0, s:dim())
    assert.are.equal(-1.25, s:item())
  end)

  it('rebuilds nested tables with numbers, strings, booleans and any keys', function()
    local w = flow.randn(3, 4)
    local obj = {
      model = {['conv1.weight'] = w, layers = {flow.ones(2), flow.zeros(3)}},
      step = 10, lr = 1e-3, third = 1 / 3, name = 'run "1"\n\ttab', flags = {true, false},
      [5] = 'five', [-1] = 'minus one', [2.5] = 'two and a half', [true] = 'a boolean key',
      [0] = {}, inf = math.huge, ninf = -math.huge, nan = 0 / 0, big = 2 ^ 60, tiny = 5e-324,
      negzero = -0.0, bytes = '\255\0\1binary', utf8 = 'héllo ✓', empty = {}, ['a.b'] = flow.ones(1),
      a = {b = flow.zeros(1)}, mixed = {1, 2, 3, x = 'y', [10] = 'ten'},
    }
    local p = path_of('nested.safetensors')
    flow.save(obj, p)
    deep_equal(flow.load(p), obj)
    -- top-level lists and lone scalars
    flow.save({w, 3, 'x'}, p)
    deep_equal(flow.load(p), {w, 3, 'x'})
    flow.save(42, p)
    assert.are.equal(42, flow.load(p))
    flow.save('text', p)
    assert.are.equal('text', flow.load(p))
  end)

  it('writes a tensor stored twice once and loads it as one tensor', function()
    local w = flow.randn(5)
    local p = path_of('shared.safetensors')
    flow.save({enc = {w = w}, dec = {w = w}}, p)
    local back = flow.load(p)
    assert.is_true(rawequal(back.enc.w, back.dec.w))
    local s = readbytes(p)
    assert.are.equal(8 + read_le64(s) + 5 * 4, #s)
  end)
end)

describe('flow.save: state dicts are plain safetensors', function()
  local w = flow.arange(6):reshape(2, 3):to(flow.float32)
  local b = flow.tensor({0.5, -1}, {dtype = flow.float64})
  local ids = flow.tensor({1, 2, 3}, {dtype = flow.int64})
  local sd = {['conv1.weight'] = w, ['conv1.bias'] = b, ['emb.ids'] = ids}
  local p = path_of('sd.safetensors')

  it('has exactly the tensor entries and a padded header', function()
    flow.save(sd, p)
    local s = readbytes(p)
    local n = read_le64(s)
    assert.are.equal(0, n % 8)
    local text = s:sub(9, 8 + n)
    assert.are.equal('{', text:sub(1, 1))
    assert.is_nil(text:find('__metadata__', 1, true))
    local header = json.decode(text)
    local names = {}
    for k in pairs(header) do names[#names + 1] = k end
    table.sort(names)
    assert.are.same({'conv1.bias', 'conv1.weight', 'emb.ids'}, names)
    assert.are.same({dtype = 'F32', shape = {2, 3}, data_offsets = {40, 64}}, header['conv1.weight'])
    assert.are.equal('F64', header['conv1.bias'].dtype)
    assert.are.same({2}, header['conv1.bias'].shape)
    assert.are.equal('I64', header['emb.ids'].dtype)
    -- offsets tile the buffer
    local ends = {}
    for _, e in pairs(header) do ends[#ends + 1] = e.data_offsets end
    table.sort(ends, function(x, y) return x[1] < y[1] end)
    local pos = 0
    for _, o in ipairs(ends) do
      assert.are.equal(pos, o[1])
      pos = o[2]
    end
    assert.are.equal(#s - 8 - n, pos)
    -- the data is raw little-endian: read conv1.weight back by hand
    local o = header['conv1.weight'].data_offsets[1]
    local raw = ffi.new('float[6]')
    ffi.copy(raw, s:sub(8 + n + o + 1, 8 + n + o + 24), 24)
    for i = 0, 5 do assert.are.equal(i, raw[i]) end
  end)

  it('loads back as the same flat table', function()
    flow.save(sd, p)
    local back = flow.load(p)
    for k, t in pairs(sd) do same_tensor(back[k], t, k) end
    local n = 0
    for _ in pairs(back) do n = n + 1 end
    assert.are.equal(3, n)
    flow.save({}, p)
    assert.are.same({}, flow.load(p))
  end)

  it('flow.safetensors.save_file / load_file keep metadata', function()
    flow.safetensors.save_file(sd, p, {format = 'pt', note = 'hi'})
    local t, meta = flow.safetensors.load_file(p)
    assert.are.same({format = 'pt', note = 'hi'}, meta)
    same_tensor(t['conv1.weight'], w)
    -- flow.load of a file with foreign metadata is the flat table
    same_tensor(flow.load(p)['emb.ids'], ids)
    local _, none = flow.safetensors.load_file(path_of('all.safetensors'))
    assert.are.same({}, none)
    H.raises(function() flow.safetensors.save_file({x = 1}, p) end, p, 'not a tensor')
    H.raises(function() flow.safetensors.save_file(sd, p, {n = 1}) end, p, 'metadata')
  end)

  it('is readable by Python (json + struct), when python3 is there', function()
    if os.execute('/usr/bin/python3 -c "import json, struct" 2>/dev/null') ~= 0 then
      pending('no /usr/bin/python3')
      return
    end
    flow.save(sd, p)
    local script = ([[
import json, struct, sys
b = open(%q, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
e = h['conv1.weight']
s, t = e['data_offsets']
print(list(struct.unpack('<6f', b[8 + n + s:8 + n + t])), sorted(h))
]]):format(p)
    local f = io.popen("/usr/bin/python3 -c '" .. script:gsub("'", "'\\''") .. "'")
    local out = f:read('*a')
    f:close()
    assert.are.equal("[0.0, 1.0, 2.0, 3.0, 4.0, 5.0] ['conv1.bias', 'conv1.weight', 'emb.ids']\n", out)
  end)

  it('interoperates with the safetensors package, when installed', function()
    -- Debian has no python3-safetensors: CI's venv (spec/vision/setup_timm.sh,
    -- $FLOWVISION_PYTHON) carries it beside Debian's torch
    local py = os.getenv('FLOWVISION_PYTHON') or '/usr/bin/python3'
    local ok = os.execute(py .. ' -c "import safetensors.torch" 2>/dev/null') == 0
    if not ok then
      pending(py .. ' has no safetensors + torch (sh spec/vision/setup_timm.sh makes a venv with both)')
      return
    end
    flow.save(sd, p)
    local q = path_of('from_torch.safetensors')
    local script = ([==[
import torch
from safetensors.torch import load_file, save_file
d = load_file(%q)
assert d['conv1.weight'].tolist() == [[0, 1, 2], [3, 4, 5]]
save_file({'a': torch.arange(6, dtype=torch.float16).reshape(2, 3)}, %q)
]==]):format(p, q)
    local f = io.popen(py .. " -c '" .. script:gsub("'", "'\\''") .. "' 2>&1")
    local out = f:read('*a')
    f:close()
    assert.are.equal('', out)
    H.close(flow.load(q).a, {{0, 1, 2}, {3, 4, 5}})
  end)
end)

describe('flow.save: atomic writes', function()
  it('leaves the target as it was when a value cannot be saved', function()
    local d = tmpdir()
    local p = d .. '/ckpt.safetensors'
    flow.save({w = flow.ones(3)}, p)
    local before = readbytes(p)
    H.raises(function() flow.save({w = flow.ones(3), f = print}, p) end, p, 'function', 'f')
    H.raises(function() flow.save({w = {co = coroutine.create(print)}}, p) end, p, 'thread', 'w.co')
    H.raises(function() flow.save({[flow.ones(1)] = 1}, p) end, p, 'key of type tensor')
    local cyc = {}
    cyc.self = cyc
    H.raises(function() flow.save({a = cyc}, p) end, p, 'cycle')
    assert.are.equal(before, readbytes(p))
    assert.are.same({'ckpt.safetensors'}, listdir(d))
  end)

  it('removes the temporary file when writing fails midway', function()
    local d = tmpdir()
    local p = d .. '/ckpt.safetensors'
    flow.save({w = flow.ones(3)}, p)
    local before = readbytes(p)
    local seen
    serialization._hooks.before_rename = function(tmp)
      seen = tmp
      error('disk on fire')
    end
    local ok, err = pcall(flow.save, {w = flow.zeros(100)}, p)
    serialization._hooks.before_rename = nil
    assert.is_false(ok)
    assert.truthy(err:find(p, 1, true) and err:find('disk on fire', 1, true))
    assert.are.equal(d, seen:match('^(.*)/'))   -- the temporary file is beside the target
    assert.are.equal(before, readbytes(p))
    assert.are.same({'ckpt.safetensors'}, listdir(d))
  end)

  it('reports a missing directory and creates nothing', function()
    local d = tmpdir()
    local p = d .. '/no/such/dir/x.safetensors'
    H.raises(function() flow.save({w = flow.ones(1)}, p) end, p, 'cannot create')
    assert.are.same({}, listdir(d))
  end)

  it('replaces an existing file in one step', function()
    local d = tmpdir()
    local p = d .. '/x.safetensors'
    for i = 1, 3 do
      flow.save({step = i, w = flow.full({4}, i)}, p)
      assert.are.equal(i, flow.load(p).step)
    end
    assert.are.same({'x.safetensors'}, listdir(d))
  end)
end)

describe('flow.load: corrupt files give errors naming the file', function()
  local d = tmpdir()
  local good = d .. '/good.safetensors'
  flow.save({a = flow.arange(10):to(flow.float32), b = flow.ones(2, 3, {dtype = flow.int64})}, good)
  local S = readbytes(good)
  local N = read_le64(S)
  local bad = d .. '/bad.safetensors'

  local function expect(bytes, ...)
    writebytes(bad, bytes)
    return H.raises(function() flow.load(bad) end, 'flow.load: ' .. bad .. ': ', ...)
  end

  it('truncated at any point', function()
    expect('', 'truncated')
    expect(S:sub(1, 4), 'truncated')
    expect(S:sub(1, 7), 'truncated')
    expect(S:sub(1, 8), 'truncated', ('header says %d bytes'):format(N))
    expect(S:sub(1, 8 + N / 2), 'truncated')
    expect(S:sub(1, 8 + N), 'out of range')
    expect(S:sub(1, 8 + N + 1), 'out of range')
    expect(S:sub(1, #S - 1), 'out of range')
    for cut = 0, #S - 1, 7 do
      writebytes(bad, S:sub(1, cut))
      H.raises(function() flow.load(bad) end, bad)
    end
  end)

  it('bad header lengths', function()
    expect(le64(2 ^ 40) .. S:sub(9), 'header size', 'limit')
    expect(le64(2 ^ 63) .. S:sub(9), 'header size')
    expect(le64(#S) .. S:sub(9), 'truncated', 'header says')
    expect(le64(0) .. S:sub(9), 'header size 0')
    expect(le64(N - 8) .. S:sub(9), 'not valid JSON')
  end)

  it('headers that are not JSON or not the right JSON', function()
    expect(make('not json at all!'), 'not valid JSON')
    expect(make('{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},}', '\0\0\0\0'), 'not valid JSON')
    expect(make('{"a": 1, "a": 2}'), 'not valid JSON', 'duplicate')
    expect(make('[1, 2, 3]'), 'not a JSON object')
    expect(make('{"a": "F32"}'), "tensor \"a\"", 'not a JSON object')
    expect(make('{"a": {"dtype": "F32", "shape": [1]}}', '\0\0\0\0'), 'data_offsets')
    expect(make('{"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}', '\0\0\0\0'), 'shape entry 1')
    expect(make('{"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}}', '\0\0\0\0'), 'shape entry 1')
    expect(make('{"a": {"dtype": "F32", "shape": 4, "data_offsets": [0, 4]}}', '\0\0\0\0'), 'not a list')
    expect(make('{"__metadata__": {"k": 1}}'), '__metadata__')
    expect(make('{"__metadata__": [1]}'), '__metadata__')
    expect(make('{"a": {"dtype": "F32", "shape": [1,1,1,1,1,1,1,1,1], "data_offsets": [0, 4]}}', '\0\0\0\0'),
           'at most 8')
    expect(make('\0\0\0\0\0\0\0\0'), 'not valid JSON')
    expect(make(string.rep('[', 100000)), 'not valid JSON', 'nesting')
  end)

  it('bad dtype strings', function()
    expect(make('{"a": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}', '\0'), 'unsupported dtype')
    expect(make('{"a": {"dtype": "f32", "shape": [1], "data_offsets": [0, 4]}}', '\0\0\0\0'), 'unsupported dtype')
    expect(make('{"a": {"dtype": 32, "shape": [1], "data_offsets": [0, 4]}}', '\0\0\0\0'), 'dtype')
  end)

  it('offsets out of range, reversed, overlapping, or not matching the shape', function()
    local data = string.rep('\0', 16)
    expect(make('{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 1000000]}}', data), 'out of range')
    expect(make('{"a": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}}', data), 'out of range')
    expect(make('{"a": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}}', data), 'reversed')
    expect(make('{"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}', data), 'size mismatch')
    expect(make('{"a": {"dtype": "I64", "shape": [2, 2], "data_offsets": [0, 16]}}', data), 'size mismatch')
    expect(make('{"a": {"dtype": "F32", "shape": [1e300, 1e300], "data_offsets": [0, 16]}}', data), 'shape')
    expect(make('{"a": {"dtype": "F32", "shape": [4], "data_offsets": [-16, 0]}}', data), 'data_offsets')
    -- many tensors over the same bytes would allocate far more than the file holds
    local parts = {}
    for i = 1, 10 do parts[i] = ('"t%d": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}'):format(i) end
    expect(make('{' .. table.concat(parts, ',') .. '}', data), 'overlapping')
  end)

  it('bad structure metadata', function()
    local function meta(s)
      return make('{"__metadata__": {"oneflow.structure": ' .. json.quote(s) .. '}}')
    end
    expect(meta('{not json'), 'bad structure metadata')
    expect(meta('{"format": "oneflow-lua", "version": 1, "root": {"tensor": "missing"}}'), 'missing')
    expect(meta('{"format": "oneflow-lua", "version": 9, "root": 1}'), 'version 9')
    expect(meta('{"format": "oneflow-lua", "version": 1, "root": {"what": 1}}'), 'unknown node')
    expect(meta('{"format": "oneflow-lua", "version": 1, "root": {"map": [[null, 1]]}}'), 'bad structure')
    expect(meta('{"format": "oneflow-lua", "version": 1, "root": {"map": [[1, 1], [1, 2]]}}'), 'duplicate')
  end)

  it('a missing file or a directory', function()
    H.raises(function() flow.load(d .. '/nope.safetensors') end, d .. '/nope.safetensors', 'cannot open')
    H.raises(function() flow.load(d) end, d)
  end)

  it('random corruption never crashes', function()
    math.randomseed(1234)
    for _ = 1, 300 do
      local b = {S:byte(1, #S)}
      for _ = 1, math.random(1, 4) do
        local i = math.random(1, 8 + N + 8)
        if i <= #b then b[i] = math.random(0, 255) end
      end
      local s = string.char(unpack(b))
      if math.random() < 0.3 then s = s:sub(1, math.random(0, #s)) end
      writebytes(bad, s)
      local ok, err = pcall(flow.load, bad)
      if not ok then assert.truthy(tostring(err):find(bad, 1, true), err) end
    end
  end)
end)
