-- flow.load_torch / flow.save_torch: PyTorch checkpoints (zip and legacy
-- formats), the restricted pickle reader, and hostile inputs.
--
-- Fixtures: a few tiny checkpoints made by torch 1.13 are committed under
-- spec/fixtures/torch/ (made by tools/make_fixtures.py, which says what each
-- holds) so the reader is tested everywhere, with a hand-built malicious
-- pickle that must be refused; the rest are generated at run time by
-- /usr/bin/python3 when it can import torch (pending otherwise). The other
-- hostile inputs are built by hand here and need no torch.
local ffi = require 'ffi'
local flow = require 'oneflow'
local H = require 'spec.helpers'
local json = require 'oneflow.utils.json'
local torchio = require 'oneflow.io.torch'
local pickle = require 'oneflow.io.pickle'
local zip = require 'oneflow.io.zip'

local PYTHON = os.getenv('ONEFLOW_TEST_PYTHON') or '/usr/bin/python3'

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
local function path_of(name) return dir .. '/' .. name end

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
  return path
end

local function exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
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

local torch_ok
local function have_torch()
  if torch_ok == nil then
    torch_ok = os.execute(PYTHON .. ' -c "import torch" >/dev/null 2>&1') == 0
  end
  return torch_ok
end

-- Runs a python script (text) with arguments; returns its output, asserting success.
local function python(script, ...)
  local p = path_of('script_' .. tostring(#made) .. '_' .. tostring(math.random(1e9)) .. '.py')
  writebytes(p, script)
  local args = {}
  for i = 1, select('#', ...) do args[i] = "'" .. select(i, ...) .. "'" end
  local h = io.popen(PYTHON .. ' ' .. p .. ' ' .. table.concat(args, ' ') .. ' 2>&1')
  local out = h:read('*a')
  h:close()
  assert(out:find('\nOK%s*$') or out:find('^OK%s*$'), 'python failed:\n' .. out)
  return out
end

local function storage_id(t) return tonumber(flow.C.of_tensor_storage_id(t.p)) end

local specials = {nan = 0 / 0, inf = math.huge, ['-inf'] = -math.huge}
-- Compares a tensor with python's description {dtype, shape, stride, offset, values}.
local function check_tensor(t, e, what)
  assert(flow.is_tensor(t), what .. ': not a tensor')
  assert.are.equal(e.dtype, t.dtype.name, what)
  assert.are.same(e.shape, H.shape(t), what)
  local want = {}
  for i, v in ipairs(e.values) do want[i] = specials[v] or v end
  local got = H.flat(t:totable())
  if t:dim() == 0 then got = {t:item()} end
  H.close(got, want, 0, what)
end

-- A pickle assembler.
local PK = {}
function PK.str(s) return 'X' .. le(#s, 4) .. s end
function PK.int(n) return 'J' .. le(n, 4) end
function PK.global(m, n) return 'c' .. m .. '\n' .. n .. '\n' end
local function ints(list)
  local s = '('
  for _, v in ipairs(list) do s = s .. PK.int(v) end
  return s .. 't'
end
-- a tensor through _rebuild_tensor_v2 on storage `key`
function PK.tensor(o)
  return PK.global('torch._utils', '_rebuild_tensor_v2') .. '((' .. PK.str('storage')
    .. PK.global('torch', o.storage or 'FloatStorage') .. PK.str(o.key or '0') .. PK.str('cpu')
    .. PK.int(o.numel) .. 'tQ' .. PK.int(o.offset or 0) .. ints(o.size) .. ints(o.stride) .. '\137'
    .. PK.global('collections', 'OrderedDict') .. ')Rt' .. 'R'
end
-- {'k': value} as a pickle
function PK.dict1(k, v) return '\128\2}(' .. PK.str(k) .. v .. 'u.' end

local function floats(list)
  local buf = ffi.new('float[?]', #list, list)
  return ffi.string(buf, 4 * #list)
end

-- A checkpoint archive (torch's layout) from a pickle and storage records.
local function archive(pkl, records, opts)
  local entries = {{'archive/data.pkl', pkl}}
  for key, data in pairs(records or {}) do entries[#entries + 1] = {'archive/data/' .. key, data} end
  entries[#entries + 1] = {'archive/version', '3\n'}
  return zip.build(entries, opts)
end

-- A plain zip (no zip64 records) with per-entry overrides, to lie in headers.
local function rawzip(entries, o)
  o = o or {}
  local parts, central, off = {}, {}, 0
  for _, e in ipairs(entries) do
    local name, data = e[1], e[2]
    local crc = e.crc or zip.crc32(data)
    local method, csize, usize = e.method or 0, e.csize or #data, e.usize or #data
    local lh = le(0x04034b50, 4) .. le(20, 2) .. le(e.flags or 0, 2) .. le(method, 2) .. le(0, 4) .. le(crc, 4)
      .. le(csize, 4) .. le(usize, 4) .. le(#name, 2) .. le(0, 2) .. name
    if e.bad_local then lh = 'XXXX' .. lh:sub(5) end
    parts[#parts + 1] = lh .. data
    central[#central + 1] = le(0x02014b50, 4) .. le(20, 2) .. le(20, 2) .. le(e.flags or 0, 2) .. le(method, 2)
      .. le(0, 4) .. le(crc, 4) .. le(csize, 4) .. le(usize, 4) .. le(e.name_len or #name, 2) .. le(0, 2)
      .. le(0, 2) .. le(0, 2) .. le(0, 2) .. le(0, 4) .. le(e.offset or off, 4) .. name
    off = off + #lh + #data
  end
  local cd = table.concat(central)
  local n = o.count or #entries
  parts[#parts + 1] = cd
  parts[#parts + 1] = le(0x06054b50, 4) .. le(0, 2) .. le(0, 2) .. le(n, 2) .. le(n, 2)
    .. le(o.cd_size or #cd, 4) .. le(o.cd_offset or off, 4) .. le(0, 2)
  return table.concat(parts)
end

local function load_bytes(name, s, opts)
  return flow.load_torch(writebytes(path_of(name), s), opts)
end

-- Asserts that loading bytes s fails with an error naming the file and
-- containing every given fragment.
local function refused(name, s, ...)
  local p = writebytes(path_of(name), s)
  local err = H.raises(function() flow.load_torch(p) end, 'flow.load_torch', p, ...)
  -- the string reader gives the same verdict
  H.raises(function() torchio.loads(s, {name = name}) end, name, ...)
  return err
end

------------------------------------------------------------------ committed fixtures
-- spec/fixtures/torch/, next to this directory (see tools/make_fixtures.py).
local FIXTURES = (debug.getinfo(1, 'S').source:match('^@(.*)/io/[^/]*$') or 'spec') .. '/fixtures/torch/'
local function fixture(name) return FIXTURES .. name end
-- torch 1.13: w = [[1.5, -2], [3, 4.25]]; OrderedDict(w=w, row=w[1], b=int64 [1, -2],
-- h=float16 [0.5, -1], epoch=3, name='tiny'); zip and legacy formats.
local TINY = readbytes(fixture('small_state_dict.pt'))
local TINY_LEGACY = readbytes(fixture('legacy.pt'))

local function check_tiny(v, what)
  assert.are.equal(3, v.epoch, what)
  assert.are.equal('tiny', v.name, what)
  H.close(v.w, {{1.5, -2}, {3, 4.25}}, 0, what)
  H.close(v.row, {3, 4.25}, 0, what)
  assert.are.equal('int64', v.b.dtype.name)
  H.close(v.b, {1, -2}, 0, what)
  assert.are.equal('float16', v.h.dtype.name)
  H.close(v.h, {0.5, -1}, 0, what)
  assert.are.equal(storage_id(v.w), storage_id(v.row), what .. ': row is a view of w')
  assert.are.equal(2, v.row:storage_offset())
  assert.are.same({'w', 'row', 'b', 'h', 'epoch', 'name'}, torchio.keys(v))
end

describe('flow.load_torch: committed torch 1.13 files', function()
  it('reads the zip format', function()
    check_tiny(flow.load_torch(fixture('small_state_dict.pt')), 'zip')
    check_tiny(torchio.loads(TINY), 'zip (bytes)')
  end)

  it('reads the legacy format', function()
    check_tiny(flow.load_torch(fixture('legacy.pt')), 'legacy')
    check_tiny(torchio.loads(TINY_LEGACY), 'legacy (bytes)')
  end)

  it('keeps views of one storage: offsets, strides, shared memory', function()
    local v = flow.load_torch(fixture('shared_views.pt'))
    assert.are.same({'x', 'tail', 't', 'col', 'row', 'other'}, torchio.keys(v))
    H.close(v.x, {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}}, 0)
    H.close(v.tail, {{4, 5, 6, 7}, {8, 9, 10, 11}}, 0)
    H.close(v.t, {{0, 4, 8}, {1, 5, 9}, {2, 6, 10}, {3, 7, 11}}, 0)
    H.close(v.col, {1, 5, 9}, 0)
    H.close(v.row, {8, 9, 10, 11}, 0)
    H.close(v.other, {5, 6}, 0)
    local want = {x = {0, {4, 1}}, tail = {4, {4, 1}}, t = {0, {1, 4}}, col = {1, {4}}, row = {8, {1}}}
    for k, e in pairs(want) do
      assert.are.equal(e[1], v[k]:storage_offset(), k .. ' offset')
      assert.are.same(e[2], v[k]:stride(), k .. ' stride')
      assert.are.equal(storage_id(v.x), storage_id(v[k]), k .. ' shares x')
    end
    assert.are_not.equal(storage_id(v.x), storage_id(v.other))
    v.x:select(1, 2):fill_(-1)
    H.close(v.col, {1, -1, 9}, 0)
    H.close(v.tail[1], {-1, -1, -1, -1}, 0)
  end)

  it('refuses the malicious pickle (os.system) and never runs it', function()
    local marker = '/tmp/oneflow_fixture_pwned'
    os.remove(marker)
    for _, name in ipairs({'malicious.pt', 'malicious_legacy.pt'}) do
      H.raises(function() flow.load_torch(fixture(name)) end, 'flow.load_torch', name,
               "refusing to load global 'os.system'", 'only tensors and containers can be loaded')
    end
    assert.is_false(exists(marker), 'nothing ran')
  end)

  it('keeps the committed fixtures small (< 50 KB in all)', function()
    local total = 0
    for _, name in ipairs({'small_state_dict.pt', 'legacy.pt', 'shared_views.pt', 'malicious.pt',
                           'malicious_legacy.pt'}) do
      total = total + #readbytes(fixture(name))
    end
    assert(total < 50 * 1024, total .. ' bytes')
  end)

  it('keeps shared storage: writing through one view shows in the other', function()
    local v = load_bytes('tiny.pt', TINY)
    v.w[2]:fill_(7)
    H.close(v.row, {7, 7}, 0)
  end)

  it('is registered on flow', function()
    assert.are.equal(torchio.load, flow.load_torch)
    assert.are.equal(torchio.save, flow.save_torch)
    assert.is_function(flow.load_t7)
  end)
end)

------------------------------------------------------------------ round trips without torch
describe('flow.save_torch', function()
  it('round-trips through flow.load_torch with views, dtypes and nesting', function()
    local x = flow.arange(12):to(flow.float32):reshape(3, 4)
    local obj = {
      x = x, tail = x:narrow(1, 2, 2), t = x:t(), row = x[3],
      f64 = flow.tensor({0.1, -2.5}, {dtype = flow.float64}), f16 = flow.tensor({0.5, -2}, {dtype = 'float16'}),
      bf16 = flow.tensor({1.5, 3}, {dtype = 'bfloat16'}), i64 = flow.tensor({-5, 2 ^ 40}, {dtype = 'int64'}),
      i32 = flow.tensor({-7, 9}, {dtype = 'int32'}), i8 = flow.tensor({-128, 127}, {dtype = 'int8'}),
      u8 = flow.tensor({0, 255}, {dtype = 'uint8'}), bool = flow.tensor({true, false}),
      i16 = flow.tensor({-32768, 32767}, {dtype = 'int16'}),
      empty = flow.empty({0, 3}), scalar = flow.tensor(2.5),
      nested = {list = {1, 2, 3}, str = 'héllo', yes = true, no = false, deep = {deeper = {flow.ones(2)}}},
      n = 42, neg = -7, big = 2 ^ 40, huge = ffi.new('int64_t', 2 ^ 62) + 1, lr = 0.1, inf = math.huge,
      none_in_list = {1, torchio.None, 3}, ints = {[0] = 'zero', [1] = 'one'},
    }
    local p = path_of('rt.pt')
    flow.save_torch(obj, p)
    local back = flow.load_torch(p)
    for _, k in ipairs({'x', 'tail', 't', 'row', 'f64', 'f16', 'bf16', 'i64', 'i32', 'i8', 'u8', 'bool',
                        'i16', 'empty', 'scalar'}) do
      assert.are.equal(obj[k].dtype.name, back[k].dtype.name, k)
      assert.are.same(H.shape(obj[k]), H.shape(back[k]), k)
      H.close(back[k], obj[k], 0, k)
    end
    -- one storage for x and its views, with the saved offsets and strides
    assert.are.equal(storage_id(back.x), storage_id(back.tail))
    assert.are.equal(storage_id(back.x), storage_id(back.t))
    assert.are.equal(4, back.tail:storage_offset())
    assert.are.same({1, 4}, back.t:stride())
    assert.are.same({1, 2, 3}, back.nested.list)
    assert.are.equal('héllo', back.nested.str)
    assert.is_true(back.nested.yes)
    assert.is_false(back.nested.no)
    H.close(back.nested.deep.deeper[1], {1, 1}, 0)
    assert.are.equal(42, back.n)
    assert.are.equal(-7, back.neg)
    assert.are.equal(2 ^ 40, back.big)
    assert.are.equal(tostring(obj.huge), tostring(back.huge))
    assert.are.equal(0.1, back.lr)
    assert.are.equal(math.huge, back.inf)
    assert.are.equal(torchio.None, back.none_in_list[2])
    assert.are.equal('zero', back.ints[0])
    assert.are.equal('one', back.ints[1])
    assert.are.equal('dict', torchio.kind(back.ints))
  end)

  it('writes a 64-byte aligned stored zip that Python would read', function()
    local p = path_of('aligned.pt')
    flow.save_torch({a = flow.ones(3), b = flow.zeros(5, {dtype = flow.float64})}, p)
    local s = readbytes(p)
    local d = zip.read_directory(require('oneflow.io.bytes').string_source(s), error)
    for _, e in ipairs(d.list) do
      assert.are.equal(0, e.method, e.name)
      if e.name:find('/data/') then
        local off = e.local_offset + 30 + s:byte(e.local_offset + 27) + 256 * s:byte(e.local_offset + 28)
          + s:byte(e.local_offset + 29) + 256 * s:byte(e.local_offset + 30)
        assert.are.equal(0, off % 64, e.name .. ' aligned')
      end
    end
    assert.is_truthy(d.by_name['archive/data.pkl'])
    assert.is_truthy(d.by_name['archive/version'])
  end)

  it('orders keys as loaded, or as opts.keys says', function()
    local v = load_bytes('tiny.pt', TINY)
    local p = path_of('order.pt')
    flow.save_torch(v, p)
    assert.are.same({'w', 'row', 'b', 'h', 'epoch', 'name'}, torchio.keys(flow.load_torch(p)))
    flow.save_torch({a = 1, b = 2, c = 3}, p, {keys = {'c', 'a', 'b'}})
    assert.are.same({'c', 'a', 'b'}, torchio.keys(flow.load_torch(p)))
  end)

  it('refuses what PyTorch cannot read, leaving the target alone', function()
    local p = path_of('refuse.pt')
    flow.save_torch({ok = 1}, p)
    local before = readbytes(p)
    H.raises(function() flow.save_torch({f = print}, p) end, 'flow.save_torch', p, 'function')
    local cyc = {}
    cyc.self = cyc
    H.raises(function() flow.save_torch(cyc, p) end, 'cycle')
    H.raises(function() flow.save_torch({s = '\255\254'}, p) end, 'UTF-8')
    H.raises(function() flow.save_torch(flow.nn.Linear(2, 2), p) end, 'metatable', 'state_dict')
    local deep = {}
    local cur = deep
    for _ = 1, 300 do cur.x = {}; cur = cur.x end
    H.raises(function() flow.save_torch(deep, p) end, 'deeper')
    torchio._hooks.before_rename = function() error('disk full') end
    H.raises(function() flow.save_torch({a = flow.ones(2)}, p) end, 'disk full', 'left as it was')
    torchio._hooks.before_rename = nil
    assert.are.equal(before, readbytes(p))
    for f in io.popen('ls -A ' .. dir):lines() do assert.is_nil(f:find('refuse.pt.tmp', 1, true)) end
  end)

  it('writes forced ZIP64 records that the reader follows', function()
    local s = archive(PK.dict1('w', PK.tensor({numel = 2, size = {2}, stride = {1}})), {['0'] = floats({1, 2})},
                      {force_zip64 = true})
    H.close(torchio.loads(s).w, {1, 2}, 0)
  end)
end)

------------------------------------------------------------------ hostile inputs
describe('flow.load_torch: hostile and broken files', function()
  it('refuses files that are not checkpoints', function()
    refused('empty.pt', '', 'not a PyTorch checkpoint')
    refused('short.pt', 'PK', 'not a PyTorch checkpoint')
    refused('text.pt', 'hello, world\n', 'not a PyTorch checkpoint')
    refused('pkjunk.pt', 'PK\3\4' .. ('x'):rep(40), 'not a zip archive')
    refused('magic.pt', '\128\2\138\10' .. ('\1'):rep(10) .. '.', 'wrong magic number')
    refused('nopkl.pt', zip.build({{'archive/other', 'x'}}), 'no <name>/data.pkl')
    H.raises(function() flow.load_torch(path_of('does-not-exist.pt')) end, 'does-not-exist.pt', 'cannot open')
  end)

  it('refuses every truncation of a real checkpoint, naming the file', function()
    for _, f in ipairs({{'tiny.pt', TINY}, {'tiny_legacy.pt', TINY_LEGACY}}) do
      local name, s = f[1], f[2]
      for n = 0, #s - 1 do
        local ok, err = pcall(torchio.loads, s:sub(1, n), {name = name})
        assert(not ok, name .. ' truncated to ' .. n .. ' bytes loaded')
        assert(tostring(err):find('flow.load_torch: ' .. name, 1, true), err)
      end
    end
  end)

  it('never crashes on flipped bytes: each one loads or raises an error naming the file', function()
    for _, f in ipairs({{'tiny.pt', TINY}, {'tiny_legacy.pt', TINY_LEGACY}}) do
      local name, s = f[1], f[2]
      local errors = 0
      for i = 1, #s do
        for _, x in ipairs({0x01, 0x80, 0xff}) do
          local b = string.char(bit.bxor(s:byte(i), x))
          local ok, err = pcall(torchio.loads, s:sub(1, i - 1) .. b .. s:sub(i + 1), {name = name})
          if not ok then
            errors = errors + 1
            assert(tostring(err):find('flow.load_torch: ' .. name, 1, true), err)
          end
        end
      end
      assert(errors > #s, name .. ': most flips are detected')
    end
  end)

  it('checks every zip header field against the file', function()
    local pkl = PK.dict1('w', PK.tensor({numel = 2, size = {2}, stride = {1}}))
    local good = {{'archive/data.pkl', pkl}, {'archive/data/0', floats({1, 2})}}
    H.close(load_bytes('rawzip.pt', rawzip(good)).w, {1, 2}, 0)
    refused('cdoff.pt', rawzip(good, {cd_offset = 0xFFFFFF00}), 'central directory', 'outside the file')
    refused('cdsize.pt', rawzip(good, {cd_size = 0x7FFFFFFF}), 'outside the file')
    refused('count.pt', rawzip(good, {count = 60000}), 'cannot hold 60000 entries')
    refused('loff.pt', rawzip({good[1], {'archive/data/0', floats({1, 2}), offset = 0x7FFFFFF0}}),
            'archive/data/0', 'outside the archive data')
    refused('csize.pt', rawzip({good[1], {'archive/data/0', floats({1, 2}), csize = 0x7FFFFFF0,
                                          usize = 0x7FFFFFF0}}), 'outside the archive data')
    refused('namelen.pt', rawzip({good[1], {'archive/data/0', floats({1, 2}), name_len = 60000}}), 'truncated')
    refused('badlocal.pt', rawzip({good[1], {'archive/data/0', floats({1, 2}), bad_local = true}}),
            'bad local header')
    local badcrc = rawzip({good[1], {'archive/data/0', floats({1, 2}), crc = 12345}})
    refused('crc.pt', badcrc, 'CRC-32 mismatch')
    H.close(torchio.loads(badcrc, {check_crc = false}).w, {1, 2}, 0)   -- as torch does
    refused('dup.pt', rawzip({good[1], good[2], good[2]}), 'two entries named')
    refused('enc.pt', rawzip({{'archive/data.pkl', pkl, flags = 1}, good[2]}), 'encrypted')
    refused('bzip.pt', rawzip({{'archive/data.pkl', pkl, method = 12}, good[2]}), 'compression method 12')
    refused('bomb.pt', rawzip({{'archive/data.pkl', pkl, method = 8, usize = 0x7FFFFFFF}, good[2]}), 'zip bomb')
    refused('deflate.pt', rawzip({{'archive/data.pkl', ('\255'):rep(40), method = 8, usize = 100}, good[2]}),
            'corrupt deflate data')
    -- deflate (method 8) made by hand: one stored deflate block
    local function deflated(raw) return '\1' .. le(#raw, 2) .. le(bit.bxor(#raw, 0xFFFF), 2) .. raw end
    local data = floats({1, 2})
    local function dz(raw, usize)
      return {method = 8, crc = zip.crc32(raw), usize = usize or #raw}
    end
    local function entry(name, raw, usize)
      local e = dz(raw, usize)
      e[1], e[2] = name, deflated(raw)
      return e
    end
    H.close(load_bytes('inflate.pt', rawzip({entry('archive/data.pkl', pkl), entry('archive/data/0', data)})).w,
            {1, 2}, 0)
    refused('inflate_short.pt', rawzip({entry('archive/data.pkl', pkl, #pkl + 10), good[2]}),
            'inflates to ' .. #pkl .. ' bytes, the directory says ' .. (#pkl + 10))
    refused('inflate_long.pt', rawzip({entry('archive/data.pkl', pkl, #pkl - 5), good[2]}), 'inflates to more than')
    refused('inflate_cut.pt', rawzip({{'archive/data.pkl', deflated(pkl):sub(1, 20), method = 8, usize = #pkl},
                                      good[2]}), 'ends early')
    refused('inflate_crc.pt', rawzip({entry('archive/data.pkl', pkl), {'archive/data/0', deflated(data), method = 8,
                                                                       usize = 8, crc = 1}}), 'CRC-32 mismatch')
    -- a zip64 locator pointing outside the file
    local s = archive(pkl, {['0'] = floats({1, 2})})
    local loc = #s - 22 - 20
    assert.are.equal('PK\6\7', s:sub(loc + 1, loc + 4))
    refused('loc64.pt', s:sub(1, loc + 8) .. le(2 ^ 40, 8) .. s:sub(loc + 17), 'zip64 end record offset')
  end)

  it('refuses os.system and never runs it', function()
    local marker = path_of('pwned')
    local cmd = 'touch ' .. marker
    local variants = {
      -- GLOBAL os system + REDUCE, as pickle.dumps of a __reduce__ exploit
      {'\128\2' .. PK.global('os', 'system') .. PK.str(cmd) .. '\133R.', 'os.system'},
      {'\128\2' .. PK.global('posix', 'system') .. PK.str(cmd) .. '\133R.', 'posix.system'},
      -- protocol 4 STACK_GLOBAL
      {'\128\4\140\2os\140\6system\147' .. PK.str(cmd) .. '\133R.', 'os.system'},
      {'\128\2' .. PK.global('builtins', 'eval') .. PK.str('__import__("os").system("' .. cmd .. '")') .. '\133R.',
       'builtins.eval'},
      {'\128\2' .. PK.global('subprocess', 'Popen') .. PK.str(cmd) .. '\133R.', 'subprocess.Popen'},
      {'\128\2' .. PK.global('__builtin__', 'getattr') .. '.', '__builtin__.getattr'},
      -- hidden inside an otherwise fine state dict
      {'\128\2}(' .. PK.str('w') .. PK.global('os', 'system') .. PK.str(cmd) .. '\133Ru.', 'os.system'},
    }
    for i, v in ipairs(variants) do
      local err = refused('evil' .. i .. '.pt', archive(v[1]), "refusing to load global '" .. v[2] .. "'",
                          'only tensors and containers can be loaded')
      assert(err)
      -- and in a legacy file
      local legacy = '\128\2\138\10\108\252\156\70\249\32\106\168\80\25.\128\2M\233\3.\128\2}.' .. v[1]
      refused('evil_legacy' .. i .. '.pt', legacy, v[2])
    end
    assert.is_false(exists(marker), 'nothing ran')
    -- protocol 0/1 object opcodes are refused as opcodes
    refused('inst.pt', archive('(S\'' .. cmd .. '\'\nios\nsystem\n.'), 'unsupported opcode')
    refused('inst2.pt', archive('\128\2(ios\nsystem\n' .. PK.str(cmd) .. '.'), 'unsupported opcode INST')
    refused('obj.pt', archive('\128\2(' .. PK.global('os', 'system') .. PK.str(cmd) .. 'o.'), "'os.system'")
    assert.is_false(exists(marker), 'nothing ran')
  end)

  it('names what it refuses: modules, numpy, complex, quantized (int16 loads)', function()
    refused('module.pt', archive('\128\2' .. PK.global('torch.nn.modules.linear', 'Linear') .. ').'),
            'torch.nn.modules.linear.Linear', 'state_dict')
    refused('numpy.pt', archive('\128\2' .. PK.global('numpy.core.multiarray', 'scalar') .. ').'),
            'numpy.core.multiarray.scalar', 'numpy objects are not supported')
    local short = path_of('short.pt')
    writebytes(short, archive(PK.dict1('w', PK.tensor({storage = 'ShortStorage', numel = 2, size = {2},
                                                  stride = {1}})), {['0'] = '\255\255\2\0'}))
    local w = flow.load_torch(short).w
    assert.are.equal(flow.int16, w.dtype)
    assert.are.same({-1, 2}, w:totable())
    refused('cplx.pt', archive(PK.dict1('w', PK.tensor({storage = 'ComplexFloatStorage', numel = 1, size = {1},
                                                        stride = {1}})), {['0'] = ('\0'):rep(8)}), 'complex64')
    refused('qt.pt', archive('\128\2' .. PK.global('torch._utils', '_rebuild_qtensor') .. '.'), 'quantized')
    refused('frombytes.pt', archive('\128\2' .. PK.global('torch.storage', '_load_from_bytes') .. '.'),
            'torch.storage._load_from_bytes')
    refused('modpid.pt', archive('\128\2(' .. PK.str('module') .. 'NNNtQ.'), "'module'")
    refused('tsc.pt', archive('\128\2' .. PK.global('__torch__', 'MyModule') .. '.'), 'TorchScript')
  end)

  it('refuses unknown opcodes and lying lengths in the pickle', function()
    refused('op.pt', archive('\128\2\255.'), 'unsupported opcode 0xff')
    refused('pop.pt', archive('\128\2N0N.'), 'unsupported opcode POP')
    refused('proto.pt', archive('\128\9N.'), 'protocol 9')
    refused('ustr.pt', archive('\128\2X\255\255\255\255abc.'), 'string of 4294967295 bytes', 'left')
    refused('ustr8.pt', archive('\128\4\141' .. le(2 ^ 40, 8) .. 'abc.'), 'bytes, but only')
    refused('frame.pt', archive('\128\4\149' .. le(2 ^ 40, 8) .. 'N.'), 'a frame')
    refused('bytes.pt', archive('\128\3B\0\0\0\16ab.'), 'bytes object')
    refused('memo.pt', archive('\128\2j\1\0\0\0.'), 'memo entry 1 was never stored')
    refused('nostop.pt', archive('\128\2}(' .. PK.str('a') .. 'Ku'), 'truncated')
    refused('empty_stop.pt', archive('\128\2.'), 'the stack is empty')
    refused('badreduce.pt', archive('\128\2' .. PK.str('x') .. ')R.'), 'cannot call a string')
    refused('badappend.pt', archive('\128\2}Na.'), 'cannot append to a dict')
    refused('badset.pt', archive('\128\2]NNs.'), 'cannot set an item on a list')
    refused('long.pt', archive('\128\2\138\9' .. ('\1'):rep(9) .. '.'), 'does not fit in 64 bits')
    refused('pid.pt', archive('\128\2' .. PK.str('x') .. 'Q.'), 'persistent id is a string')
    refused('setitems.pt', archive('\128\2}(Nu.'), 'odd number')
    refused('tuple.pt', archive('\128\2t.'), 'no MARK')
    refused('global.pt', archive('\128\2cos system\nx\n.'), 'bad global name')
  end)

  it('caps stack depth, nesting and the memo', function()
    refused('marks.pt', archive('\128\2' .. ('('):rep(pickle.MAX_MARKS + 1) .. 'N.'), 'MARKs nested deeper')
    local n = pickle.MAX_DEPTH + 5
    refused('nest.pt', archive('\128\2' .. (']'):rep(n) .. ('a'):rep(n - 1) .. '.'), 'nested deeper than')
    local saved_memo, saved_stack = pickle.MAX_MEMO, pickle.MAX_STACK
    pickle.MAX_MEMO, pickle.MAX_STACK = 100, 1000
    local ok, err = pcall(function()
      local parts = {'\128\2N'}
      for i = 1, 101 do parts[#parts + 1] = 'r' .. le(i, 4) end
      refused('memobomb.pt', archive(table.concat(parts) .. '.'), 'more than 100 memo entries')
      refused('stackbomb.pt', archive('\128\2' .. ('N'):rep(1001) .. '.'), 'deeper than 1000 items')
    end)
    pickle.MAX_MEMO, pickle.MAX_STACK = saved_memo, saved_stack
    assert(ok, err)
    -- a big memo index is fine as long as the count is small
    local v = torchio.loads(archive('\128\2' .. PK.str('ok') .. 'r\255\255\255\255j\255\255\255\255.'))
    assert.are.equal('ok', v)
  end)

  it('checks storages and views against the data', function()
    local function one(o, rec)
      return archive(PK.dict1('w', PK.tensor(o)), {['0'] = rec})
    end
    H.close(torchio.loads(one({numel = 4, size = {2, 2}, stride = {2, 1}}, floats({1, 2, 3, 4}))).w,
            {{1, 2}, {3, 4}}, 0)
    refused('numel.pt', one({numel = 1000, size = {2}, stride = {1}}, floats({1, 2})), 'holds 8 bytes',
            '1000 elements')
    refused('huge.pt', one({numel = 2 ^ 31 - 1, size = {2}, stride = {1}}, floats({1, 2})), 'holds 8 bytes')
    refused('norec.pt', archive(PK.dict1('w', PK.tensor({numel = 2, size = {2}, stride = {1}}))),
            'has no record')
    refused('view.pt', one({numel = 4, size = {10}, stride = {1}}, floats({1, 2, 3, 4})), 'reaches element 9',
            'storage of 4 elements')
    refused('view2.pt', one({numel = 4, offset = 3, size = {2}, stride = {1}}, floats({1, 2, 3, 4})),
            'reaches element 4')
    refused('stride.pt', one({numel = 4, size = {2, 2}, stride = {2 ^ 30, 1}}, floats({1, 2, 3, 4})),
            'reaches element')
    refused('neg.pt', one({numel = 4, size = {2}, stride = {-1}}, floats({1, 2, 3, 4})), 'stride entry 1')
    refused('negoff.pt', one({numel = 4, offset = -1, size = {2}, stride = {1}}, floats({1, 2, 3, 4})),
            'storage offset -1')
    refused('ndim.pt', one({numel = 4, size = {1, 1, 1, 1, 1, 1, 1, 1, 1}, stride = {1, 1, 1, 1, 1, 1, 1, 1, 1}},
                           floats({1, 2, 3, 4})), 'at most 8 dims')
    refused('mism.pt', one({numel = 4, size = {2, 2}, stride = {1}}, floats({1, 2, 3, 4})), 'size has 2 dims')
    refused('badkey.pt', archive(PK.dict1('w', PK.tensor({key = '../../etc/passwd', numel = 1, size = {1},
                                                          stride = {1}}))), 'bad storage key')
    refused('notstorage.pt', archive(PK.dict1('w', PK.global('torch._utils', '_rebuild_tensor_v2')
                                              .. '(' .. PK.str('x') .. 'K\0))\137NtR.')), 'not a storage')
    -- legacy: a storage claiming more than the file holds, and a wrong count
    local head = '\128\2\138\10\108\252\156\70\249\32\106\168\80\25.\128\2M\233\3.\128\2}.'
    local function legacy_tensor(numel)
      return '\128\2' .. PK.global('torch._utils', '_rebuild_tensor_v2') .. '((' .. PK.str('storage')
        .. PK.global('torch', 'FloatStorage') .. PK.str('0') .. PK.str('cpu') .. PK.int(numel) .. 'NtQ'
        .. PK.int(0) .. ints({2}) .. ints({1}) .. '\137)tR.'
    end
    local keys = '\128\2](' .. PK.str('0') .. 'e.'
    local ok_legacy = head .. legacy_tensor(2) .. keys .. le(2, 8) .. floats({5, 6})
    H.close(torchio.loads(ok_legacy), {5, 6}, 0)
    refused('lbig.pt', head .. legacy_tensor(2 ^ 31 - 1) .. keys .. le(2, 8) .. floats({5, 6}),
            'more than the rest of the file holds')
    refused('lcount.pt', head .. legacy_tensor(2) .. keys .. le(3, 8) .. floats({5, 6, 7}), 'holds 3 elements')
    refused('ltrunc.pt', head .. legacy_tensor(2) .. keys .. le(2, 8) .. floats({5}), 'truncated')
    refused('lnodata.pt', head .. legacy_tensor(2) .. '\128\2].', 'has no data')
    refused('lunused.pt', head .. legacy_tensor(2) .. '\128\2](' .. PK.str('0') .. PK.str('9') .. 'e.'
            .. le(2, 8) .. floats({5, 6}), 'not used')
    refused('tar.pt', ('\0'):rep(257) .. 'ustar' .. ('\0'):rep(300), 'tar checkpoints')
  end)

  it('never shows a storage in a message before its data was read (legacy)', function()
    -- The storage offset is the storage itself: the message must describe it,
    -- not print it (its memory is not read yet; a bool storage with bytes
    -- other than 0/1 is not even valid).
    local head = '\128\2\138\10\108\252\156\70\249\32\106\168\80\25.\128\2M\233\3.\128\2}.'
    local n = 4096
    local pid = '(' .. PK.str('storage') .. PK.global('torch', 'BoolStorage') .. PK.str('0') .. PK.str('cpu')
      .. PK.int(n) .. 'NtQ'
    local body = '\128\2' .. PK.global('torch._utils', '_rebuild_tensor_v2') .. '(' .. pid .. pid
      .. ints({2}) .. ints({1}) .. '\137)tR.'
    local keys = '\128\2](' .. PK.str('0') .. 'e.'
    local err = refused('lstale.pt', head .. body .. keys .. le(n, 8) .. ('\1'):rep(n),
                        'storage offset a tensor is not a non-negative integer')
    assert.is_nil(err:find('tensor(', 1, true), err)
    -- a view whose key is a storage is refused the same way
    local vbody = '\128\2' .. PK.global('torch._utils', '_rebuild_tensor_v2') .. '((' .. PK.str('storage')
      .. PK.global('torch', 'BoolStorage') .. PK.str('0') .. PK.str('cpu') .. PK.int(n) .. '(' .. pid
      .. PK.int(0) .. PK.int(2) .. 'ttQ' .. PK.int(0) .. ints({2}) .. ints({1}) .. '\137)tR.'
    err = refused('lstale2.pt', head .. vbody .. keys .. le(n, 8) .. ('\1'):rep(n), 'bad storage view key a tensor')
    assert.is_nil(err:find('tensor(', 1, true), err)
  end)

  it('byte-swaps big-endian archives (the byteorder record of torch >= 2.1)', function()
    local pkl = PK.dict1('w', PK.tensor({numel = 2, size = {2}, stride = {1}}))
    local be = floats({1.5, -2}):gsub('(.)(.)(.)(.)', '%4%3%2%1')
    local function with_order(order)
      return zip.build({{'archive/data.pkl', pkl}, {'archive/byteorder', order}, {'archive/data/0', be},
                        {'archive/version', '3\n'}})
    end
    H.close(torchio.loads(with_order('big')).w, {1.5, -2}, 0)
    refused('order.pt', with_order('middle'), 'byteorder')
  end)

  it('map_location: cpu keeps tensors, bad values are errors', function()
    local v = torchio.loads(TINY, {map_location = 'cpu'})
    assert.are.equal('cpu', v.w.device.type)
    v = torchio.loads(TINY, {map_location = function() return 'cpu' end})
    assert.are.equal('cpu', v.w.device.type)
    H.raises(function() torchio.loads(TINY, {map_location = 42}) end, 'map_location')
  end)
end)

------------------------------------------------------------------ against torch
local GEN = [==[
import sys, math, json, collections, zipfile
import torch, torch.nn as nn
d = sys.argv[1]
def fix(v):
    if isinstance(v, float) and not math.isfinite(v):
        return 'nan' if v != v else ('inf' if v > 0 else '-inf')
    return v
def enc(t):
    t = t.detach()
    flat = t.reshape(-1)
    if t.dtype in (torch.float16, torch.bfloat16):
        flat = flat.float()
    return {'dtype': str(t.dtype).replace('torch.', ''), 'shape': list(t.shape), 'stride': list(t.stride()),
            'offset': t.storage_offset(), 'values': [fix(v) for v in flat.tolist()]}
expected = {}
torch.manual_seed(0)
sd = collections.OrderedDict()
sd['f32'] = torch.tensor([[0.1, -2.5, 3.4e38], [1e-30, float('inf'), float('nan')]])
sd['f64'] = torch.tensor([0.1, -2.5, 1.7e308, 5e-324], dtype=torch.float64)
sd['f16'] = torch.tensor([0.5, -2, 65504, 1e-7], dtype=torch.float16)
sd['bf16'] = torch.tensor([0.5, -2, 3.0e38, 1.5], dtype=torch.bfloat16)
sd['i64'] = torch.tensor([-9007199254740991, 0, 9007199254740991, 42], dtype=torch.int64)
sd['i32'] = torch.tensor([-2147483648, 0, 2147483647], dtype=torch.int32)
sd['i8'] = torch.tensor([-128, 0, 127], dtype=torch.int8)
sd['u8'] = torch.tensor([0, 1, 255], dtype=torch.uint8)
sd['i16'] = torch.tensor([-32768, 0, 32767], dtype=torch.int16)
sd['bool'] = torch.tensor([True, False, True])
sd['scalar'] = torch.tensor(3.5)
sd['empty'] = torch.zeros(0, 3)
sd['randn'] = torch.randn(3, 4, 5)
sd['t'] = torch.arange(6.).reshape(2, 3).t()
torch.save(sd, d + '/dtypes.pt')
torch.save(sd, d + '/dtypes_legacy.pt', _use_new_zipfile_serialization=False)
torch.save(sd, d + '/dtypes_p4.pt', pickle_protocol=4)
expected['dtypes'] = {k: enc(v) for k, v in sd.items()}
expected['dtypes_order'] = list(sd.keys())

x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
shared = {'x': x, 'tail': x[1:], 't': x.t(), 'row': x[2], 'col': x[:, 1], 'other': torch.ones(2)}
torch.save(shared, d + '/shared.pt')
torch.save(shared, d + '/shared_legacy.pt', _use_new_zipfile_serialization=False)
expected['shared'] = {k: enc(v) for k, v in shared.items()}

nested = {'a': [1, 2.5, 'three', None, True, (4, 5)], 'b': {'c': {'d': torch.ones(2, 2)}},
          'tup': (torch.arange(3), 7), 'neg': -5, 'big': 2**40, 'huge': 2**62, 'bytes': b'\x00\xffab',
          'none': None, 'tiny': 1e-300, 'inf': float('inf'), 'unicode': 'h\u00e9llo \u2713',
          'int_keys': {0: 'zero', 1: 'one', 7: 'seven'}, 'dtype': torch.float16, 'size': torch.Size([2, 3]),
          'set': {3}, 'empty_list': [], 'empty_dict': {}, 'false': False}
torch.save(nested, d + '/nested.pt')
torch.save(nested, d + '/nested_legacy.pt', _use_new_zipfile_serialization=False)
torch.save(nested, d + '/nested_p5.pt', pickle_protocol=5)

torch.manual_seed(1)
model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2), nn.BatchNorm1d(2))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
inp = torch.randn(5, 3)
model(inp).sum().backward()
opt.step()
model.eval()
ck = {'state_dict': model.state_dict(), 'epoch': 3, 'optimizer': opt.state_dict()}
torch.save(ck, d + '/checkpoint.pt')
with torch.no_grad():
    expected['checkpoint'] = {'input': inp.tolist(), 'output': model(inp).tolist(),
                              'keys': list(ck['state_dict'].keys())}
torch.save({'p': nn.Parameter(torch.ones(2)), 'q': torch.zeros(2, requires_grad=True)}, d + '/params.pt')
torch.save(nn.Linear(2, 2), d + '/module.pt')
with zipfile.ZipFile(d + '/dtypes.pt') as zin, zipfile.ZipFile(d + '/deflated.pt', 'w', zipfile.ZIP_DEFLATED) as zout:
    for info in zin.infolist():
        zout.writestr(info.filename, zin.read(info.filename))
with open(d + '/expected.json', 'w') as f:
    json.dump(expected, f)
print('OK')
]==]

local CHECK_RT = [==[
import sys, math, torch
p, p2 = sys.argv[1], sys.argv[2]
d = torch.load(p, weights_only=True)
def same(a, b, what):
    assert a.dtype == b.dtype, (what, a.dtype, b.dtype)
    assert a.shape == b.shape, (what, a.shape, b.shape)
    assert torch.equal(a, b), (what, a, b)
x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
same(d['x'], x, 'x'); same(d['tail'], x[1:], 'tail'); same(d['t'], x.t(), 't'); same(d['row'], x[2], 'row')
st = (lambda t: t.untyped_storage()) if hasattr(torch.Tensor, 'untyped_storage') else (lambda t: t.storage())
assert st(d['tail']).data_ptr() == st(d['x']).data_ptr(), 'tail shares x storage'
assert st(d['t']).data_ptr() == st(d['x']).data_ptr(), 't shares x storage'
assert d['tail'].storage_offset() == 4 and d['t'].stride() == (1, 4)
same(d['f64'], torch.tensor([0.5, -2.5], dtype=torch.float64), 'f64')
same(d['f16'], torch.tensor([0.5, -2], dtype=torch.float16), 'f16')
same(d['bf16'], torch.tensor([1.5, 3], dtype=torch.bfloat16), 'bf16')
same(d['i64'], torch.tensor([-5, 2**40], dtype=torch.int64), 'i64')
same(d['i32'], torch.tensor([-7, 9], dtype=torch.int32), 'i32')
same(d['i8'], torch.tensor([-128, 127], dtype=torch.int8), 'i8')
same(d['u8'], torch.tensor([0, 255], dtype=torch.uint8), 'u8')
same(d['i16'], torch.tensor([-32768, 32767], dtype=torch.int16), 'i16')
same(d['bool'], torch.tensor([True, False]), 'bool')
same(d['empty'], torch.zeros(0, 3), 'empty')
same(d['scalar'], torch.tensor(2.5), 'scalar')
assert d['nested'] == {'list': [1, 2, 3], 'str': 'h\u00e9llo', 'yes': True, 'no': False, 'neg': -7,
                       'big': 2**40, 'huge': 2**62 + 1}, d['nested']
assert d['ints'] == {0: 'zero', 1: 'one'}, d['ints']
assert list(d['sd'].keys()) == ['0.weight', '0.bias', '2.weight', '2.bias', '3.weight', '3.bias',
                                '3.running_mean', '3.running_var', '3.num_batches_tracked'], list(d['sd'].keys())
assert d['sd']['3.num_batches_tracked'].dtype == torch.int64
wo = tuple(int(v) for v in torch.__version__.split('.')[:1]) >= (2,)
f = torch.load(p2, weights_only=wo)
assert f == {'lr': 0.1, 'third': 1 / 3, 'inf': math.inf, 'neg': -1.5e-300, 'list': [0.25, 1]}, f
print('OK')
]==]

local function gen()
  local d = tmpdir()
  python(GEN, d)
  local expected = json.decode(readbytes(d .. '/expected.json'))
  return d, expected
end

local check = have_torch() and it or pending

describe('flow.load_torch against torch', function()
  local d, expected
  local function fixtures()
    if not d then d, expected = gen() end
    return d, expected
  end

  check('reads every dtype exactly, in zip, legacy, protocol 4 and deflated files', function()
    local fd, ex = fixtures()
    for _, f in ipairs({'dtypes', 'dtypes_legacy', 'dtypes_p4', 'deflated'}) do
      local v = flow.load_torch(fd .. '/' .. f .. '.pt')
      for k, e in pairs(ex.dtypes) do check_tensor(v[k], e, f .. '.' .. k) end
      assert.are.same(ex.dtypes_order, torchio.keys(v), f)
      assert.are.same({1, 3}, v.t:stride(), f .. ': t keeps its strides')
    end
  end)

  check('keeps shared storages, offsets and strides (zip and legacy)', function()
    local fd, ex = fixtures()
    for _, f in ipairs({'shared', 'shared_legacy'}) do
      local v = flow.load_torch(fd .. '/' .. f .. '.pt')
      for k, e in pairs(ex.shared) do
        check_tensor(v[k], e, f .. '.' .. k)
        assert.are.same(e.stride, v[k]:stride(), f .. '.' .. k .. ' stride')
        assert.are.equal(e.offset, v[k]:storage_offset(), f .. '.' .. k .. ' offset')
      end
      for _, k in ipairs({'tail', 't', 'row', 'col'}) do
        assert.are.equal(storage_id(v.x), storage_id(v[k]), f .. ': ' .. k .. ' shares x')
      end
      assert.are_not.equal(storage_id(v.x), storage_id(v.other))
      v.x:select(1, 2):fill_(-1)
      H.close(v.tail[1], {-1, -1, -1, -1}, 0)
      H.close(v.col, {1, -1, 9}, 0)
    end
  end)

  check('rebuilds nested containers and Python scalars', function()
    local fd = fixtures()
    for _, f in ipairs({'nested', 'nested_legacy', 'nested_p5'}) do
      local v = flow.load_torch(fd .. '/' .. f .. '.pt')
      local a = v.a
      assert.are.equal(1, a[1]); assert.are.equal(2.5, a[2]); assert.are.equal('three', a[3])
      assert.are.equal(torchio.None, a[4]); assert.is_true(a[5]); assert.are.same({4, 5}, a[6])
      assert.are.equal('list', torchio.kind(a))
      assert.are.equal('tuple', torchio.kind(a[6]))
      H.close(v.b.c.d, {{1, 1}, {1, 1}}, 0)
      H.close(v.tup[1], {0, 1, 2}, 0)
      assert.are.equal('int64', v.tup[1].dtype.name)
      assert.are.equal(7, v.tup[2])
      assert.are.equal(-5, v.neg)
      assert.are.equal(2 ^ 40, v.big)
      assert.are.equal('4611686018427387904LL', tostring(v.huge))
      assert.are.equal('\0\255ab', v.bytes, f)
      assert.is_nil(v.none)
      assert.are.equal(1e-300, v.tiny)
      assert.are.equal(math.huge, v.inf)
      assert.are.equal('héllo ✓', v.unicode)
      assert.are.same({[0] = 'zero', [1] = 'one', [7] = 'seven'}, v.int_keys)
      assert.are.equal(flow.float16, v.dtype)
      assert.are.same({2, 3}, v.size)
      assert.are.same({3}, v.set)
      assert.are.same({}, v.empty_list)
      assert.are.equal('list', torchio.kind(v.empty_list))
      assert.are.equal('dict', torchio.kind(v.empty_dict))
      assert.is_false(v['false'])
    end
  end)

  check('loads a checkpoint dict: state_dict into a model, epoch, optimizer state', function()
    local fd, ex = fixtures()
    local ck = flow.load_torch(fd .. '/checkpoint.pt')
    assert.are.equal(3, ck.epoch)
    assert.are.same(ex.checkpoint.keys, torchio.keys(ck.state_dict))
    local nn = flow.nn
    local m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2), nn.BatchNorm1d(2))
    m:load_state_dict(ck.state_dict)
    m:eval()
    H.close(m(flow.tensor(ex.checkpoint.input)), ex.checkpoint.output, 1e-5)
    local opt = ck.optimizer
    assert.are.equal(0.1, opt.param_groups[1].lr)
    assert.are.equal(0.9, opt.param_groups[1].momentum)
    assert.are.same({0, 1, 2, 3, 4, 5}, opt.param_groups[1].params)
    assert.is_true(flow.is_tensor(opt.state[0].momentum_buffer))
    assert.are.same({4, 3}, H.shape(opt.state[0].momentum_buffer))
    -- and back to a file PyTorch reads, keeping the order
    local p = path_of('ck_again.pt')
    flow.save_torch(ck, p)
    local again = flow.load_torch(p)
    assert.are.same(ex.checkpoint.keys, torchio.keys(again.state_dict))
    for k, t in pairs(ck.state_dict) do H.close(again.state_dict[k], t, 0, k) end
  end)

  check('keeps requires_grad of parameters; refuses a pickled module', function()
    local fd = fixtures()
    local v = flow.load_torch(fd .. '/params.pt')
    assert.is_true(v.p.requires_grad)
    assert.is_true(v.q.requires_grad)
    H.raises(function() flow.load_torch(fd .. '/module.pt') end, fd .. '/module.pt',
             "refusing to load global 'torch.nn.modules.linear.Linear'", 'state_dict')
  end)

  local have_tv = have_torch() and os.execute(PYTHON .. ' -c "import torchvision" >/dev/null 2>&1') == 0
  local check_tv = have_tv and it or pending
  check_tv('a torchvision resnet18 state dict gives flowvision resnet18 the same outputs', function()
    local td = tmpdir()
    python([==[
import sys, torch, torchvision
torch.manual_seed(0)
m = torchvision.models.resnet18(num_classes=10).eval()
x = torch.randn(2, 3, 64, 64)
torch.save(m.state_dict(), sys.argv[1] + '/resnet18.pth')
with torch.no_grad():
    torch.save({'x': x, 'y': m(x)}, sys.argv[1] + '/io.pt')
print('OK')
]==], td)
    local vision = require 'flowvision'
    local m = vision.models.resnet18({num_classes = 10})
    m:load_state_dict(flow.load_torch(td .. '/resnet18.pth'))
    m:eval()
    local io_ = flow.load_torch(td .. '/io.pt')
    H.close(m(io_.x), io_.y, 1e-4)
  end)

  check('writes files that torch.load(weights_only=True) reads back exactly', function()
    local x = flow.arange(12):to(flow.float32):reshape(3, 4)
    local net = flow.nn.Sequential(flow.nn.Linear(3, 4), flow.nn.ReLU(), flow.nn.Linear(4, 2),
                                   flow.nn.BatchNorm1d(2))
    local sd, keys = net:state_dict()
    local obj = {
      x = x, tail = x:narrow(1, 2, 2), t = x:t(), row = x[3],
      f64 = flow.tensor({0.5, -2.5}, {dtype = flow.float64}), f16 = flow.tensor({0.5, -2}, {dtype = 'float16'}),
      bf16 = flow.tensor({1.5, 3}, {dtype = 'bfloat16'}), i64 = flow.tensor({-5, 2 ^ 40}, {dtype = 'int64'}),
      i32 = flow.tensor({-7, 9}, {dtype = 'int32'}), i8 = flow.tensor({-128, 127}, {dtype = 'int8'}),
      u8 = flow.tensor({0, 255}, {dtype = 'uint8'}), bool = flow.tensor({true, false}),
      i16 = flow.tensor({-32768, 32767}, {dtype = 'int16'}),
      empty = flow.empty({0, 3}), scalar = flow.tensor(2.5),
      nested = {list = {1, 2, 3}, str = 'héllo', yes = true, no = false, neg = -7, big = 2 ^ 40,
                huge = ffi.new('int64_t', 2 ^ 62) + 1},
      ints = {[0] = 'zero', [1] = 'one'},
      sd = sd,
    }
    local p, p2 = path_of('for_torch.pt'), path_of('floats.pt')
    torchio.set_keys(sd, keys)   -- the state dict in module order
    flow.save_torch(obj, p)
    flow.save_torch({lr = 0.1, third = 1 / 3, inf = math.huge, neg = -1.5e-300, list = {0.25, 1}}, p2)
    python(CHECK_RT, p, p2)
  end)
end)
