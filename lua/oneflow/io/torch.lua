-- oneflow.io.torch: PyTorch checkpoints -- flow.load_torch / flow.save_torch.
--
-- flow.load_torch(path[, {map_location =}]) reads what torch.save wrote:
--   * the zip format (torch >= 1.6): <name>/data.pkl (the pickle),
--     <name>/data/<key> (one record per storage), <name>/version and,
--     from torch 2.1, <name>/byteorder ("little" or "big"; big-endian data
--     is byte-swapped). Records may be stored or deflated; CRCs are checked.
--   * the legacy format (_use_new_zipfile_serialization=False): pickles of
--     the magic number 0x1950a86a20f9469cfc6c, the protocol version (1001)
--     and sys_info, then the main pickle, then the list of storage keys,
--     then each storage as an 8-byte element count and its raw bytes.
-- The pickle reader (oneflow.io.pickle) is restricted: it knows only the
-- opcodes for containers, numbers, strings and tensors, and the globals
-- below; any other global is refused by name before anything is built
--   "flow.load_torch: <path>: refusing to load global 'os.system' -- only
--    tensors and containers can be loaded"
-- so loading never runs code. Allowed: collections.OrderedDict,
-- torch._utils._rebuild_tensor_v2 / _rebuild_tensor / _rebuild_parameter /
-- _rebuild_parameter_with_state, torch._tensor._rebuild_from_type_v2,
-- torch.nn.parameter.Parameter, torch.Tensor, the torch.*Storage types,
-- torch.Size, torch.device, torch dtypes (torch.float32 ...), the builtins
-- set / frozenset / bytearray and _codecs.encode (bytes in protocol 2).
-- Pickled nn.Modules, numpy objects, quantized and sparse tensors are
-- refused with a message saying what to do instead.
--
-- What comes back: the nested Lua value. Dicts and OrderedDicts become
-- tables keyed as in Python (strings stay strings, ints stay numbers: an
-- optimizer's state {0: ...} is t.state[0]); lists, tuples and sets become
-- arrays; None is left out of dicts and is io.torch.None in lists and
-- tuples; ints beyond 2^53 are int64_t cdata. Key order is kept aside, not
-- in the table (a key such as "__order" would break load_state_dict):
-- require('oneflow.io.torch').keys(t) gives a dict's keys in file order, and
-- flow.save_torch writes them back in that order.
-- Tensors are flow tensors of the storage's dtype (float32/64, float16,
-- bfloat16, int64/32/16/8, uint8, bool; complex and quantized storages
-- are refused). One flat tensor is allocated per storage and every tensor
-- is a view of it (storage offset and strides as saved), so tensors that
-- shared a storage in PyTorch share memory here too. requires_grad is
-- kept. Everything loads on the CPU; map_location = 'cuda' (or a table
-- {['cuda:0'] = 'cpu'} keyed by the saved location, or a function(location)
-- -> device) moves tensors afterwards, each view on its own.
-- opts.check_crc = false skips the CRC-32 of stored storage records (torch
-- does not check them either; ~0.3 s per GB here): a corrupt record then
-- loads as wrong numbers, never as a bad read -- every offset and size is
-- checked regardless.
-- Errors name the file: "flow.load_torch: <path>: <what is wrong>".
--
-- flow.save_torch(obj, path[, {keys =}]) writes the zip format with a
-- protocol-2 pickle that torch.load(path, weights_only=True) accepts:
-- tables of tensors (dict, or list when the table is a proper sequence),
-- nested tables, numbers (integral values as ints), strings (UTF-8),
-- booleans, io.torch.None, flow dtypes and flow.Size. Each tensor is
-- written through torch._utils._rebuild_tensor_v2 with a persistent-id
-- storage; tensors sharing a storage write it once and load as views of
-- one storage in PyTorch. Records are stored uncompressed, 64-byte
-- aligned. Floats are BINFLOAT, which torch.load reads but torch 1.13's
-- weights_only reader does not (torch >= 2.0's does). Keys are written in
-- the order they were loaded in, else sorted; opts.keys orders the
-- top-level keys and io.torch.set_keys(t, keys) those of any table (e.g.
-- with the second result of module:state_dict()). The write is atomic
-- (temporary file, fsync, rename, fsync of the directory).
local ffi = require 'ffi'
local core = require 'oneflow._C'
local types = require 'oneflow.types'
local T = require 'oneflow.tensor'
local json = require 'oneflow.utils.json'
local P = require 'oneflow.utils.posix'
local bytes = require 'oneflow.io.bytes'
local zip = require 'oneflow.io.zip'
local pickle = require 'oneflow.io.pickle'

local C = core.C
local format = string.format
local is_tensor = T.is_tensor
local None, KIND, ORDER = pickle.None, pickle.kind, pickle.order
local global = pickle.global

local M = {}
M.None = None
M.MAX_DEPTH = 200
M._hooks = {}   -- for tests: before_rename(tmp) may raise

--- A dict's keys in the order of the file (nil for tables not loaded
-- from a pickle).
function M.keys(t)
  local o = ORDER[t]
  if not o then return nil end
  local res = {}
  for _, k in ipairs(o) do if t[k] ~= nil then res[#res + 1] = k end end
  return res
end

--- Sets the order flow.save_torch writes a table's keys in (e.g. the second
-- result of module:state_dict()); returns t.
function M.set_keys(t, keys)
  local o = {}
  for i, k in ipairs(keys) do o[i] = k end
  ORDER[t] = o
  return t
end

--- What a loaded table was in Python: 'dict', 'odict', 'list', 'tuple', 'set'.
function M.kind(t) return KIND[t] end

--- The state an OrderedDict carried (state_dict()._metadata ...), if any.
function M.attributes(t) return pickle.attrs[t] end

local little_endian = ffi.abi('le')

------------------------------------------------------------------ dtypes
local storage_dtype = {
  FloatStorage = 'float32', DoubleStorage = 'float64', HalfStorage = 'float16',
  BFloat16Storage = 'bfloat16', LongStorage = 'int64', IntStorage = 'int32', CharStorage = 'int8',
  ByteStorage = 'uint8', BoolStorage = 'bool', UntypedStorage = 'uint8', ShortStorage = 'int16',
}
local unsupported_storage = {
  ComplexFloatStorage = 'complex64', ComplexDoubleStorage = 'complex128',
  ComplexHalfStorage = 'complex32', QInt8Storage = 'qint8', QUInt8Storage = 'quint8',
  QInt32Storage = 'qint32', QUInt4x2Storage = 'quint4x2', QUInt2x4Storage = 'quint2x4',
}
local storage_of_dtype = {}
for k, v in pairs(storage_dtype) do if k ~= 'UntypedStorage' then storage_of_dtype[v] = k end end
local itemsize = {float32 = 4, float64 = 8, float16 = 2, bfloat16 = 2, int64 = 8, int32 = 4, int8 = 1,
                  uint8 = 1, bool = 1, int16 = 2}
local torch_dtypes = {float32 = 'float32', float = 'float32', float64 = 'float64', double = 'float64',
                      float16 = 'float16', half = 'float16', bfloat16 = 'bfloat16', int64 = 'int64',
                      long = 'int64', int32 = 'int32', int = 'int32', int8 = 'int8', uint8 = 'uint8',
                      bool = 'bool', int16 = 'int16', short = 'int16'}
-- named in errors (uint16/32/64 of PyTorch 2.3+ included: not read yet)
local other_dtypes = {complex32 = true, complex64 = true, complex128 = true,
                      cfloat = true, cdouble = true, chalf = true, qint8 = true, quint8 = true,
                      qint32 = true, quint4x2 = true, uint16 = true, uint32 = true, uint64 = true,
                      float8_e4m3fn = true, float8_e5m2 = true}

------------------------------------------------------------------ views
local TWO53 = 2 ^ 53
-- storage tensor -> {flat, offset, numel, dtype, location}; flat is nil when
-- it is the key itself: LuaJIT's weak tables are not ephemerons, so a value
-- pointing at its own key would keep every loaded storage alive forever.
local STORAGE = setmetatable({}, {__mode = 'k'})
local LOCATION = setmetatable({}, {__mode = 'k'})  -- loaded tensor -> saved location

-- A value from the file, for an error message: numbers and (short) strings
-- as they are, anything else only by its kind. Never tostring(): a storage
-- tensor met before its data was read would print uninitialised memory (and
-- a bool storage holding bytes other than 0/1 is not a valid bool).
local function show_value(v)
  if type(v) == 'number' then return tostring(v) end
  if type(v) == 'string' then return format('%q', #v > 64 and v:sub(1, 64) .. '...' or v) end
  return pickle.describe(v)
end

local function int_list(v, what, err)
  if type(v) ~= 'table' or (KIND[v] ~= 'tuple' and KIND[v] ~= 'list') then
    err('%s must be a tuple of ints, got %s', what, pickle.describe(v))
  end
  local res = {}
  for i = 1, #v do
    local x = v[i]
    if type(x) ~= 'number' or x < 0 or x ~= math.floor(x) or x >= TWO53 then
      err('%s entry %d is not a non-negative integer (%s)', what, i, show_value(x))
    end
    res[i] = x
  end
  return res
end

local shape_buf, stride_buf = ffi.new('int64_t[8]'), ffi.new('int64_t[8]')

-- A view of storage tensor st with (offset, size, stride) as torch saved
-- them; everything is checked before C sees it.
local function make_view(st, offset, size, stride, err)
  local info = STORAGE[st]
  if not info then err('the first argument is %s, not a storage', pickle.describe(st)) end
  if type(offset) ~= 'number' or offset < 0 or offset ~= math.floor(offset) or offset >= TWO53 then
    err('storage offset %s is not a non-negative integer', show_value(offset))
  end
  size = int_list(size, 'size', err)
  stride = int_list(stride, 'stride', err)
  if #size ~= #stride then err('size has %d dims but stride has %d', #size, #stride) end
  if #size > 8 then err('a %d-d tensor: at most 8 dims are supported', #size) end
  local numel, hi = 1, offset
  for i = 1, #size do
    numel = numel * size[i]
    if size[i] > 0 then hi = hi + (size[i] - 1) * stride[i] end
  end
  if numel >= TWO53 or hi >= TWO53 then err('tensor of shape [%s] is too large', table.concat(size, ', ')) end
  if numel > 0 and hi >= info.numel then
    err('tensor of shape [%s], stride [%s], offset %d reaches element %d of a storage of %d elements',
        table.concat(size, ', '), table.concat(stride, ', '), offset, hi, info.numel)
  end
  if numel == 0 and offset > info.numel then
    err('storage offset %d is past the end of a storage of %d elements', offset, info.numel)
  end
  for i = 1, #size do
    shape_buf[i - 1] = size[i]
    stride_buf[i - 1] = stride[i]
  end
  local t = T.call1(C.of_as_strided, (info.flat or st).p, shape_buf, stride_buf, #size, info.offset + offset, core.out1)
  LOCATION[t] = info.location
  return t
end

local function set_requires_grad(t, rg, err)
  if rg == nil or rg == None or rg == false then return t end
  if rg ~= true then err('requires_grad must be a bool, got %s', pickle.describe(rg)) end
  if not t:is_floating_point() then err('requires_grad on a %s tensor', t.dtype.name) end
  t:requires_grad_(true)
  return t
end

local function as_tensor(v, what, err)
  if not is_tensor(v) or STORAGE[v] then err('%s is %s, not a tensor', what, pickle.describe(v)) end
  return v
end

------------------------------------------------------------------ globals
local function utf8_to_latin1(s, err)
  local out, i, n = {}, 1, #s
  while i <= n do
    local b = s:byte(i)
    if b < 0x80 then
      out[#out + 1] = string.char(b)
      i = i + 1
    elseif b >= 0xC2 and b <= 0xC3 and i < n then
      local c = s:byte(i + 1)
      if c < 0x80 or c > 0xBF then err('bad UTF-8 in a latin-1 bytes object') end
      out[#out + 1] = string.char((b - 0xC0) * 64 + (c - 0x80))
      i = i + 2
    else
      err('a latin-1 bytes object holds a character above U+00FF')
    end
  end
  return table.concat(out)
end

local function new_dict(kind)
  local t = {}
  KIND[t], ORDER[t] = kind, {}
  return t
end

local function fill_from_pairs(d, src, err)
  if src == nil or src == None then return d end
  if type(src) ~= 'table' or not KIND[src] or KIND[src] == 'dict' or KIND[src] == 'odict' then
    err('OrderedDict() from %s is not supported', pickle.describe(src))
  end
  for _, kv in ipairs(src) do
    if type(kv) ~= 'table' or (KIND[kv] ~= 'tuple' and KIND[kv] ~= 'list') or #kv ~= 2 then
      err('OrderedDict() items must be pairs')
    end
    local k, v = kv[1], kv[2]
    if v ~= None then
      if d[k] == nil then ORDER[d][#ORDER[d] + 1] = k end
      d[k] = v
    end
  end
  return d
end

local function seq_copy(kind, src, err)
  local t = {}
  KIND[t] = kind
  if src == nil then return t end
  if type(src) ~= 'table' or not KIND[src] then err('expected a sequence, got %s', pickle.describe(src)) end
  if KIND[src] == 'dict' or KIND[src] == 'odict' then
    for _, k in ipairs(ORDER[src]) do t[#t + 1] = k end
  else
    for i = 1, #src do t[i] = src[i] end
  end
  return t
end

local function rebuild_tensor(args, err)
  local t = make_view(args[1], args[2], args[3], args[4], err)
  return set_requires_grad(t, args[5], err)
end

local handlers = {
  ['collections.OrderedDict'] = {
    call = function(args, err) return fill_from_pairs(new_dict('odict'), args[1], err) end,
    new = function() return new_dict('odict') end,
  },
  ['torch._utils._rebuild_tensor_v2'] = {call = rebuild_tensor},
  ['torch._utils._rebuild_tensor'] = {call = function(args, err)
    return make_view(args[1], args[2], args[3], args[4], err)
  end},
  ['torch._utils._rebuild_parameter'] = {call = function(args, err)
    return set_requires_grad(as_tensor(args[1], 'parameter data', err), args[2], err)
  end},
  ['torch._utils._rebuild_parameter_with_state'] = {call = function(args, err)
    return set_requires_grad(as_tensor(args[1], 'parameter data', err), args[2], err)
  end},
  ['torch._tensor._rebuild_from_type_v2'] = {call = function(args, err)
    local f, typ, fargs = args[1], args[2], args[3]
    if getmetatable(f) ~= pickle.Global or not f.rebuild then
      err('_rebuild_from_type_v2 with %s', pickle.describe(f))
    end
    if getmetatable(typ) ~= pickle.Global or not typ.tensor_type then
      err('_rebuild_from_type_v2 to %s', pickle.describe(typ))
    end
    if type(fargs) ~= 'table' or KIND[fargs] ~= 'tuple' then err('_rebuild_from_type_v2 arguments') end
    return f.call(fargs, err)
  end},
  ['torch.nn.parameter.Parameter'] = {tensor_type = true, new = function(args, err)
    local t = as_tensor(args[1], 'Parameter data', err)
    local rg = args[2]
    if rg == nil then rg = true end
    return set_requires_grad(t, rg, err)
  end},
  ['torch.Tensor'] = {tensor_type = true},
  ['torch.Size'] = {call = function(args, err) return seq_copy('tuple', args[1] or nil, err) end},
  ['torch.device'] = {call = function(args, err)
    local typ, idx = args[1], args[2]
    if type(typ) ~= 'string' then err('torch.device(%s)', pickle.describe(typ)) end
    if idx ~= nil and idx ~= None then
      if type(idx) ~= 'number' then err('torch.device index %s', pickle.describe(idx)) end
      return typ .. ':' .. format('%d', idx)
    end
    return typ
  end},
  ['_codecs.encode'] = {call = function(args, err)
    local s, enc = args[1], args[2]
    if type(s) ~= 'string' then err('_codecs.encode of %s', pickle.describe(s)) end
    enc = type(enc) == 'string' and enc:lower() or 'utf-8'
    if enc == 'latin1' or enc == 'latin-1' or enc == 'iso-8859-1' then return utf8_to_latin1(s, err) end
    if enc == 'utf-8' or enc == 'utf8' or enc == 'ascii' then return s end
    err('_codecs.encode with encoding %q', enc)
  end},
}
for _, b in ipairs({'builtins', '__builtin__'}) do
  handlers[b .. '.set'] = {
    call = function(args, err) return seq_copy('set', args[1], err) end,
    new = function() return seq_copy('set') end,
  }
  handlers[b .. '.frozenset'] = handlers[b .. '.set']
  handlers[b .. '.bytearray'] = {call = function(args, err)
    local s = args[1]
    if s == nil then return '' end
    if type(s) ~= 'string' then err('bytearray(%s)', pickle.describe(s)) end
    if args[2] ~= nil then return handlers['_codecs.encode'].call(args, err) end
    return s
  end}
end
for _, name in ipairs({'_rebuild_tensor_v2', '_rebuild_tensor', '_rebuild_parameter',
                       '_rebuild_parameter_with_state'}) do
  handlers['torch._utils.' .. name].rebuild = true
end

local REFUSED = "refusing to load global '%s' -- only tensors and containers can be loaded"

local function find_global(module, name, fail)
  local full = module .. '.' .. name
  local h = handlers[full]
  if h then return global(full, h) end
  if module == 'torch' or module == 'torch.storage' then
    if storage_dtype[name] then return global(full, {storage = storage_dtype[name]}) end
    if unsupported_storage[name] then return global(full, {storage_unsupported = unsupported_storage[name]}) end
    if torch_dtypes[name] then
      local d = types.by_name[torch_dtypes[name]]
      return global(full, {value = d})
    end
    if other_dtypes[name] then return global(full, {value = 'torch.' .. name}) end
  end
  local hint = ''
  if module:find('^torch%.nn%.modules') or module:find('^torch%.nn') or module:find('^torchvision%.models') then
    hint = ' (the file holds a pickled nn.Module: save model.state_dict() in PyTorch and load that)'
  elseif module:find('^__torch__') then
    hint = ' (a TorchScript archive: load it with torch.jit.load in PyTorch and save its state_dict())'
  elseif module:find('^numpy') then
    hint = ' (numpy objects are not supported: save Python numbers or tensors instead)'
  elseif full:find('^torch%._utils%._rebuild_qtensor') or full:find('quantiz') then
    hint = ' (quantized tensors are not supported)'
  elseif full:find('sparse') or full:find('_get_layout') then
    hint = ' (sparse tensors are not supported)'
  elseif full == 'torch.storage._load_from_bytes' then
    hint = ' (storages pickled as bytes: the object was pickled with pickle, not torch.save)'
  end
  fail(REFUSED .. hint, full)
end

local function global_hook(fail)
  return function(module, name) return find_global(module, name, fail) end
end

------------------------------------------------------------------ loading
local MAGIC = '\108\252\156\70\249\32\106\168\80\25'   -- 0x1950a86a20f9469cfc6c, little-endian

local function byteswap(ptr, n, size)
  local p = ffi.cast('uint8_t *', ptr)
  for i = 0, n - 1 do
    local b = p + i * size
    for k = 0, size / 2 - 1 do
      b[k], b[size - 1 - k] = b[size - 1 - k], b[k]
    end
  end
end

local function fix_bools(flat, numel)
  if numel == 0 then return end
  local p = ffi.cast('uint8_t *', flat:data_ptr())
  for i = 0, numel - 1 do if p[i] > 1 then p[i] = 1 end end
end

-- Reads a persistent id ('storage', type, key, location, numel[, view]).
local function parse_pid(pid, err)
  if type(pid) ~= 'table' or KIND[pid] ~= 'tuple' then err('persistent id is %s, not a tuple', pickle.describe(pid)) end
  local tag = pid[1]
  if tag == 'module' then
    err(REFUSED .. ' (the file holds a pickled nn.Module with its source: save model.state_dict() instead)',
        'module')
  end
  if tag ~= 'storage' then err('persistent id of kind %s (only storages can be loaded)', show_value(tag)) end
  local typ, key, location, numel = pid[2], pid[3], pid[4], pid[5]
  if getmetatable(typ) ~= pickle.Global or not (typ.storage or typ.storage_unsupported) then
    err('storage type is %s, not a torch storage type', pickle.describe(typ))
  end
  if typ.storage_unsupported then
    err('%s holds %s, which is not a supported dtype here (convert it in PyTorch, e.g. to int32 or float32)',
        typ.full, typ.storage_unsupported)
  end
  if type(key) == 'number' then key = format('%d', key) end
  if type(key) ~= 'string' or #key == 0 or #key > 256 or key:find('[^%w_.%-]') then
    err('bad storage key %s', type(key) == 'string' and format('%q', key) or pickle.describe(key))
  end
  if type(location) ~= 'string' then location = 'cpu' end
  if type(numel) ~= 'number' or numel < 0 or numel ~= math.floor(numel) or numel >= TWO53 then
    err('storage %q: bad element count %s', key, show_value(numel))
  end
  return typ.storage, key, location, numel, pid[6]
end

local function new_storage(dtype, numel, location)
  local flat = T.flow.empty({numel}, {dtype = dtype})
  STORAGE[flat] = {offset = 0, numel = numel, dtype = dtype, location = location}
  return flat
end

local function load_zip(src, fail, opts)
  local dir = zip.read_directory(src, fail)
  local prefix
  local first = dir.list[1] and dir.list[1].name:match('^([^/]+)/')
  for _, e in ipairs(dir.list) do
    local p = e.name:match('^([^/]+)/data%.pkl$')
    if p and (not prefix or p == first) then prefix = p end
  end
  if not prefix then
    fail('not a PyTorch checkpoint: the zip archive has no <name>/data.pkl record')
  end
  local by_name = dir.by_name
  local function small_record(e)
    if e.usize > 64 then fail('record %q of %.0f bytes is too large', e.name, e.usize) end
    return zip.read_entry_string(src, e, fail)
  end
  local swap = false
  local bo = by_name[prefix .. '/byteorder']
  if bo then
    local order = small_record(bo)
    if order == 'big' then swap = true
    elseif order ~= 'little' then fail('unknown byteorder record %q', order:sub(1, 32)) end
  end
  if not little_endian then fail('big-endian hosts are not supported') end
  local ver = by_name[prefix .. '/version'] or by_name[prefix .. '/.data/version']
  if ver then
    local v = small_record(ver)
    local n = tonumber(v:match('^%s*(%d+)%s*$'))
    if not n then fail('bad version record %q', v:sub(1, 32)) end
    if n > 20 then fail('checkpoint format version %d is newer than this reader knows', n) end
  end
  local pkl_entry = by_name[prefix .. '/data.pkl']
  if pkl_entry.usize > 1024 * 1024 * 1024 then fail('data.pkl of %.0f bytes is too large', pkl_entry.usize) end
  local pkl = zip.read_entry_string(src, pkl_entry, fail)
  local storages = {}

  local function persistent_load(pid, err)
    local dtype, key, location, numel = parse_pid(pid, err)
    local st = storages[key]
    if st then
      if STORAGE[st].dtype ~= dtype then
        err('storage %q is used as both %s and %s', key, STORAGE[st].dtype, dtype)
      end
      return st
    end
    local name = prefix .. '/data/' .. key
    local e = by_name[name]
    if not e then err('storage %q has no record %q in the archive', key, name) end
    local nbytes = numel * itemsize[dtype]
    if e.usize ~= nbytes then
      err('storage %q: record %q holds %.0f bytes, but %.0f elements of %s need %.0f', key, name, e.usize,
          numel, dtype, nbytes)
    end
    st = new_storage(dtype, numel, location)
    if nbytes > 0 then
      zip.read_entry_into(src, e, st:data_ptr(), fail, opts.check_crc == false)
      if swap and itemsize[dtype] > 1 then byteswap(st:data_ptr(), numel, itemsize[dtype]) end
      if dtype == 'bool' then fix_bools(st, numel) end
    end
    storages[key] = st
    return st
  end

  local r = bytes.reader(bytes.string_source(pkl), 0, #pkl, fail)
  return pickle.load(r, {find_global = global_hook(fail), persistent_load = persistent_load, fail = fail})
end

local function refuse_globals(fail)
  return function(module, name) fail(REFUSED, module .. '.' .. name) end
end

local function load_legacy(src, fail)
  local r = bytes.reader(src, 0, src.size, fail)
  local plain = {find_global = refuse_globals(fail), fail = fail, bigint = true}
  local magic = pickle.load(r, plain)
  if type(magic) ~= 'table' or magic.bigint ~= MAGIC then
    fail('not a PyTorch checkpoint (wrong magic number)')
  end
  plain.bigint = false
  local proto = pickle.load(r, plain)
  if proto ~= 1001 then fail('legacy checkpoint protocol %s is not supported (1001 is)', show_value(proto)) end
  local sys_info = pickle.load(r, plain)
  if type(sys_info) ~= 'table' then fail('bad sys_info record') end
  if sys_info.little_endian == false then fail('big-endian legacy checkpoints are not supported') end
  if not little_endian then fail('big-endian hosts are not supported') end

  local roots, pending, total = {}, {}, 0
  local function persistent_load(pid, err)
    local dtype, key, location, numel, view = parse_pid(pid, err)
    local root = roots[key]
    if root then
      if STORAGE[root].dtype ~= dtype then
        err('storage %q is used as both %s and %s', key, STORAGE[root].dtype, dtype)
      end
    else
      local nbytes = numel * itemsize[dtype]
      total = total + nbytes
      if total > src.size - r.pos then
        err('storage %q claims %.0f bytes (%.0f in all), more than the rest of the file holds (%d)', key,
            nbytes, total, src.size - r.pos)
      end
      root = new_storage(dtype, numel, location)
      roots[key] = root
      pending[#pending + 1] = key
    end
    if view == nil or view == None then return root end
    if type(view) ~= 'table' or KIND[view] ~= 'tuple' or #view ~= 3 then
      err('bad storage view %s', pickle.describe(view))
    end
    local vkey, voff, vsize = view[1], view[2], view[3]
    if type(vkey) == 'number' then vkey = format('%d', vkey) end
    if type(vkey) ~= 'string' then err('bad storage view key %s', show_value(vkey)) end
    if type(voff) ~= 'number' or type(vsize) ~= 'number' or voff < 0 or vsize < 0 or voff ~= math.floor(voff)
       or vsize ~= math.floor(vsize) or voff + vsize > STORAGE[root].numel then
      err('storage view %s (offset %s, %s elements) does not fit its storage of %d elements', show_value(vkey),
          show_value(voff), show_value(vsize), STORAGE[root].numel)
    end
    local v = roots['view:' .. vkey]
    if v then return v end
    local vs, one = {vsize}, {1}
    KIND[vs], KIND[one] = 'tuple', 'tuple'
    v = make_view(root, voff, vs, one, err)
    STORAGE[v] = {flat = root, offset = voff, numel = vsize, dtype = dtype, location = location}
    roots['view:' .. vkey] = v
    return v
  end
  local result = pickle.load(r, {find_global = global_hook(fail), persistent_load = persistent_load, fail = fail})
  local keys = pickle.load(r, plain)
  if type(keys) ~= 'table' or (KIND[keys] ~= 'list' and KIND[keys] ~= 'tuple') then
    fail('bad storage key list (%s)', pickle.describe(keys))
  end
  local filled = {}
  for i = 1, #keys do
    local key = keys[i]
    if type(key) == 'number' then key = format('%d', key) end
    local st = type(key) == 'string' and roots[key]
    if not st then fail('storage key %s in the file is not used by the pickle', show_value(key)) end
    if filled[key] then fail('storage %q is listed twice', key) end
    filled[key] = true
    local info = STORAGE[st]
    local count = r:i64('a storage size')
    if count ~= info.numel then
      fail('storage %q: the file holds %.0f elements, the pickle declared %.0f', key, count, info.numel)
    end
    local nbytes = info.numel * itemsize[info.dtype]
    if nbytes > 0 then
      r:raw(st:data_ptr(), nbytes, 'storage ' .. key)
      if info.dtype == 'bool' then fix_bools(st, info.numel) end
    end
  end
  for _, key in ipairs(pending) do
    if not filled[key] then fail('storage %q has no data in the file', key) end
  end
  return result
end

local function resolve_device(ml, location)
  if ml == nil then return nil end
  if type(ml) == 'function' then
    local d = ml(location)
    return d and types.device(d) or nil
  end
  if getmetatable(ml) == types.Device or type(ml) == 'string' then return types.device(ml) end
  if type(ml) == 'table' then
    local d = ml[location]
    return d and types.device(d) or nil
  end
  error('flow.load_torch: map_location must be a device, a string, a table or a function', 3)
end

-- Moves tensors per map_location (iterative walk; each tensor once).
local function apply_map_location(value, ml)
  if ml == nil or ml == 'cpu' then return value end
  local moved = {}
  local function convert(t)
    local key = t
    if moved[key] then return moved[key] end
    local dev = resolve_device(ml, LOCATION[t] or 'cpu')
    local res = t
    if dev and dev.type ~= 'cpu' then res = t:to(tostring(dev)) end
    moved[key] = res
    return res
  end
  if is_tensor(value) then return convert(value) end
  if type(value) ~= 'table' then return value end
  local seen, todo = {[value] = true}, {value}
  while #todo > 0 do
    local t = table.remove(todo)
    for k, v in pairs(t) do
      if is_tensor(v) then
        t[k] = convert(v)
      elseif type(v) == 'table' and KIND[v] and not seen[v] then
        seen[v] = true
        todo[#todo + 1] = v
      end
    end
  end
  return value
end

local function load_source(src, fail, opts)
  if src.size < 4 then fail('not a PyTorch checkpoint (%d bytes)', src.size) end
  local head = src:sub(0, math.min(src.size, 16))
  if head:sub(1, 2) == 'PK' then return load_zip(src, fail, opts) end
  if head:byte(1) == 0x80 then return load_legacy(src, fail) end
  if src.size >= 262 and src:sub(257, 5) == 'ustar' then
    fail('tar checkpoints (PyTorch < 0.4) are not supported: load and re-save the file with a newer torch')
  end
  local shown = head:sub(1, 8):gsub('.', function(c) return format('\\x%02x', c:byte()) end)
  fail('not a PyTorch checkpoint (starts with "%s"; expected a zip archive or the legacy magic number)', shown)
end

-- The tensor metatype is attached by require 'oneflow'; make sure it is
-- there when this module is used on its own (e.g. by a fuzzing harness).
local function ensure_flow()
  if not package.loaded.oneflow then require 'oneflow' end
end

local function run(op, name, bytes_, opts, fn)
  ensure_flow()
  opts = opts or {}
  if type(opts) ~= 'table' then error(op .. ': options must be a table', 3) end
  local prefix = format('%s: %s: ', op, name)
  local function fail(fmt, ...)
    error(prefix .. format(fmt, ...), 0)
  end
  local ok, res = pcall(bytes.with_source, name, bytes_, fail, function(src) return fn(src, fail, opts) end)
  if not ok then
    res = tostring(res)
    if res:sub(1, #prefix) ~= prefix then res = prefix .. res end
    error(res, 0)
  end
  return apply_map_location(res, opts.map_location)
end

--- Reads a PyTorch checkpoint (what torch.save wrote: zip or legacy format)
-- into Lua tables of flow tensors, without running any code from the file
-- (only known classes are rebuilt). See doc/migrating.md.
-- @function flow.load_torch
-- @tparam string path the .pt / .pth file
-- @tparam[opt] table opts `{map_location =}` (a device, accepted for PyTorch's sake)
-- @return the loaded object (a state dict is a table name -> tensor)
function M.load(path, opts)
  if type(path) ~= 'string' or path == '' then
    error('flow.load_torch: expected a file path (string), got ' .. tostring(path), 2)
  end
  return run('flow.load_torch', path, nil, opts, load_source)
end

--- The same over the bytes of a checkpoint held in a Lua string (opts.name
-- names it in errors).
function M.loads(s, opts)
  if type(s) ~= 'string' then error('flow.load_torch: expected a string of bytes, got ' .. type(s), 2) end
  return run('flow.load_torch', opts and opts.name or '<bytes>', s, opts, load_source)
end

------------------------------------------------------------------ saving
local function path_string(path)
  if #path == 0 then return 'the top level' end
  return table.concat(path, '.')
end

local type_rank = {number = 1, string = 2, boolean = 3}
local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return (type_rank[ta] or 4) < (type_rank[tb] or 4) end
  if ta == 'number' or ta == 'string' then return a < b end
  if ta == 'boolean' then return (not a) and b end
  return tostring(a) < tostring(b)
end

local function seq_len(v)
  local n = 0
  while rawget(v, n + 1) ~= nil do n = n + 1 end
  for k in next, v do
    if not (type(k) == 'number' and k >= 1 and k <= n and k == math.floor(k)) then return n, true end
  end
  return n, false
end

-- The storage groups: tensors sharing one storage (and dtype) are written
-- as views of one record covering every element they reach.
local function plan_tensor(t, st, fail, where)
  local dname = t.dtype.name
  if not storage_of_dtype[dname] then fail('cannot save a tensor of dtype %s at %s', dname, where) end
  if t.device.type ~= 'cpu' then t = t:to('cpu') end
  local size, stride = t:size():totable(), t:stride()
  local offset = t:storage_offset()
  local lo, hi, numel, negative = offset, offset, t:numel(), false
  for i = 1, #size do
    if size[i] > 1 then
      local ext = (size[i] - 1) * stride[i]
      if ext < 0 then negative = true end
      if ext > 0 then hi = hi + ext else lo = lo + ext end
    end
  end
  if numel == 0 or negative then
    -- own storage: empty, or contiguous copy
    local c = negative and t:contiguous() or t
    local g = {tensor = c, lo = 0, hi = c:numel() - 1, dtype = dname, base = c}
    st.groups[#st.groups + 1] = g
    local cs = c:size():totable()
    local cstride = {}
    local acc = 1
    for i = #cs, 1, -1 do cstride[i] = acc; acc = acc * math.max(cs[i], 1) end
    return {group = g, offset = 0, size = cs, stride = cstride, requires_grad = t.requires_grad}
  end
  local id = tonumber(C.of_tensor_storage_id(t.p)) .. ':' .. dname
  local g = st.by_id[id]
  if not g then
    g = {lo = lo, hi = hi, dtype = dname, base = t}
    st.by_id[id] = g
    st.groups[#st.groups + 1] = g
  else
    if lo < g.lo then g.lo, g.base = lo, t end
    if hi > g.hi then g.hi = hi end
  end
  return {group = g, t = t, offset = offset, size = size, stride = stride, requires_grad = t.requires_grad}
end

local function encode(obj, opts, fail)
  local st = {groups = {}, by_id = {}}
  local tensors = {}       -- tensor -> plan
  local visiting = {}

  local function collect(v, path, depth)
    if is_tensor(v) then
      if not tensors[v] then tensors[v] = plan_tensor(v, st, fail, path_string(path)) end
      return
    end
    if type(v) ~= 'table' or v == None or getmetatable(v) == types.DType or getmetatable(v) == types.Size then
      return
    end
    if getmetatable(v) ~= nil then
      fail('cannot save a table with a metatable (a class instance?) at %s; for a module save module:state_dict()',
           path_string(path))
    end
    if depth > M.MAX_DEPTH then fail('tables nested deeper than %d levels (at %s)', M.MAX_DEPTH, path_string(path)) end
    if visiting[v] then fail('the table at %s contains itself (a cycle)', path_string(path)) end
    visiting[v] = true
    for k, x in pairs(v) do
      path[#path + 1] = tostring(k)
      collect(x, path, depth + 1)
      if type(k) == 'table' then collect(k, path, depth + 1) end
      path[#path] = nil
    end
    visiting[v] = nil
  end
  collect(obj, {}, 0)

  -- storage keys in order of first appearance
  for i, g in ipairs(st.groups) do
    g.key = format('%d', i - 1)
    g.numel = g.hi - g.lo + 1
  end

  local w = pickle.writer()
  local function emit_ints(list)
    local n = #list
    if n == 0 then return w:empty_tuple() end
    if n > 3 then w:mark() end
    for i = 1, n do w:int(list[i]) end
    if n > 3 then w:tuple_end() else w:tuple_n(n) end
  end
  local function emit_tensor(p)
    local g = p.group
    w:global('torch._utils', '_rebuild_tensor_v2')
    w:mark()
    w:mark()
    w:str('storage')
    w:global('torch', storage_of_dtype[g.dtype])
    w:str(g.key)
    w:str('cpu')
    w:int(g.numel)
    w:tuple_end()
    w:persid()
    w:int(p.offset - g.lo)
    emit_ints(p.size)
    emit_ints(p.stride)
    w:bool(p.requires_grad)
    w:global('collections', 'OrderedDict')
    w:empty_tuple()
    w:reduce()
    w:tuple_end()
    w:reduce()
  end

  local emit
  local function emit_number(v)
    if v == math.floor(v) and v > -2 ^ 63 and v < 2 ^ 63 and not (v == 0 and 1 / v < 0) then
      w:int(v)
    else
      w:float(v)
    end
  end
  local function emit_string(s, path)
    if not json.valid_utf8(s) then
      fail('string at %s is not valid UTF-8 (PyTorch strings are text)', path_string(path))
    end
    w:str(s)
  end
  local function emit_key(k, path)
    local tk = type(k)
    if tk == 'string' then return emit_string(k, path) end
    if tk == 'number' then
      if k ~= k then fail('NaN key at %s', path_string(path)) end
      return emit_number(k)
    end
    if tk == 'boolean' then return w:bool(k) end
    if k == None then return w:none() end
    if tk == 'table' and (KIND[k] == 'tuple') then return emit(k, path, 0) end
    fail('cannot save a table key of type %s at %s', is_tensor(k) and 'tensor' or tk, path_string(path))
  end
  local function ordered_keys(v, top)
    local keys, seen = {}, {}
    local given = top and opts.keys or ORDER[v]
    if given then
      for _, k in ipairs(given) do
        if v[k] ~= nil and not seen[k] then
          keys[#keys + 1] = k
          seen[k] = true
        end
      end
    end
    local rest = {}
    for k in pairs(v) do if not seen[k] then rest[#rest + 1] = k end end
    table.sort(rest, key_less)
    for _, k in ipairs(rest) do keys[#keys + 1] = k end
    return keys
  end

  emit = function(v, path, depth)
    local tv = type(v)
    if is_tensor(v) then return emit_tensor(tensors[v]) end
    if v == nil or v == None then return w:none() end
    if tv == 'boolean' then return w:bool(v) end
    if tv == 'number' then return emit_number(v) end
    if tv == 'string' then return emit_string(v, path) end
    if tv == 'cdata' then
      if ffi.istype('int64_t', v) then return w:int(v) end
      if ffi.istype('uint64_t', v) and v < 2 ^ 63 then return w:int(ffi.new('int64_t', v)) end
      fail('cannot save a cdata value at %s', path_string(path))
    end
    if tv ~= 'table' then
      fail('cannot save a %s at %s; only tensors, tables, numbers, strings and booleans', tv, path_string(path))
    end
    local mt = getmetatable(v)
    if mt == types.DType then return w:global('torch', v.name) end
    if mt == types.Size then
      w:global('torch', 'Size')
      w:mark(); emit_ints(v); w:tuple_end()
      return w:reduce()
    end
    local n, extra = seq_len(v)
    local kind = KIND[v]
    local seq_kind = kind == 'list' or kind == 'tuple' or kind == 'set'
    if not extra and kind ~= 'dict' and kind ~= 'odict' and (n > 0 or seq_kind) then
      if kind == 'tuple' then
        if n == 0 then return w:empty_tuple() end
        w:mark()
        for i = 1, n do
          path[#path + 1] = tostring(i)
          emit(v[i], path, depth + 1)
          path[#path] = nil
        end
        return w:tuple_end()
      end
      w:empty_list()
      for i = 1, n, 1000 do
        w:mark()
        for j = i, math.min(n, i + 999) do
          path[#path + 1] = tostring(j)
          emit(v[j], path, depth + 1)
          path[#path] = nil
        end
        w:appends()
      end
      return
    end
    if kind == 'odict' then
      w:global('collections', 'OrderedDict')
      w:empty_tuple()
      w:reduce()
    else
      w:empty_dict()
    end
    local keys = ordered_keys(v, depth == 0)
    for i = 1, #keys, 1000 do
      w:mark()
      for j = i, math.min(#keys, i + 999) do
        local k = keys[j]
        path[#path + 1] = tostring(k)
        emit_key(k, path)
        emit(v[k], path, depth + 1)
        path[#path] = nil
      end
      w:setitems()
    end
  end

  w:proto()
  emit(obj, {}, 0)
  w:stop()
  return w:result(), st.groups
end

--- flow.save_torch(obj, path[, opts]): see the file header.
function M.save(obj, path, opts)
  if type(path) ~= 'string' or path == '' then
    error('flow.save_torch: expected a file path (string), got ' .. tostring(path), 2)
  end
  ensure_flow()
  opts = opts or {}
  local prefix = 'flow.save_torch: ' .. path .. ': '
  local function fail(fmt, ...) error(prefix .. format(fmt, ...), 0) end
  if type(opts) ~= 'table' then fail('options must be a table, got %s', type(opts)) end
  if opts.keys ~= nil and type(opts.keys) ~= 'table' then fail('opts.keys must be a list of keys') end
  if not little_endian then fail('big-endian hosts are not supported') end
  local pkl, groups = encode(obj, opts, fail)

  local PC = P.C
  local atomic = require 'oneflow.utils.atomic'
  local okh, h = pcall(atomic.open, path)
  if not okh then fail('%s', h) end
  local f = h.f
  local ok, err = pcall(function()
    local w = zip.writer(function(data, n)
      local wrote = PC.fwrite(data, 1, n, f)
      if tonumber(wrote) ~= n then error('write failed (' .. P.strerror() .. ')', 0) end
    end)
    w:add('archive/data.pkl', pkl)
    w:add('archive/byteorder', 'little')
    for _, g in ipairs(groups) do
      local isz = itemsize[g.dtype]
      local nbytes = g.numel * isz
      local ptr = ffi.cast('const uint8_t *', g.base:data_ptr())
      -- g.base reaches element g.lo at its first element
      w:add('archive/data/' .. g.key, nbytes > 0 and ptr or '', nbytes)
    end
    w:add('archive/version', '3\n')
    w:finish()
  end)
  if not ok then
    atomic.abort(h)
    fail('%s (the file was left as it was)', tostring(err))
  end
  ok, err = pcall(atomic.commit, h, M._hooks.before_rename)
  if not ok then fail('%s', tostring(err)) end
end

M._internal = {encode = encode, zip = zip, pickle = pickle}
return M
