-- oneflow.serialization: flow.save / flow.load and flow.safetensors.
--
-- Format: safetensors (https://huggingface.co/docs/safetensors). An 8-byte
-- little-endian header size N, N bytes of JSON
--   {"__metadata__": {string: string}, "name": {"dtype": "F32",
--    "shape": [..], "data_offsets": [begin, end]}, ...}
-- padded with spaces to a multiple of 8, then the data buffer. Tensors are
-- written contiguous, little-endian, largest itemsize first then by name
-- (so every tensor is aligned to its itemsize, as the reference writer does).
--
-- flow.save(obj, path):
--   * obj a flat table {string = tensor} (a state dict): plain entries with
--     those names, no metadata -- any safetensors reader sees the state dict;
--     flow.load returns the same flat table. Any safetensors file without
--     our metadata loads this way.
--   * anything else (a tensor, nested tables, numbers, strings, booleans,
--     any keys but functions/userdata/tensors): the tensors become entries
--     named after their path ("model.conv1.weight", "1.2", made unique with
--     "#2" ...; a tensor stored twice is written once and loads as one
--     tensor), and __metadata__["oneflow.structure"] holds a JSON
--     description of the Lua value:
--       {"format": "oneflow-lua", "version": 1, "root": NODE}
--       NODE: a JSON number, string or boolean as is;
--             {"tensor": entry} | {"float": "inf"|"-inf"|"nan"}
--             {"bytes": hex} (strings that are not UTF-8)
--             {"list": [NODE...], "map": [[KEY, NODE]...]} (a table: the
--             1..n part, then other keys, sorted; either may be absent)
--     Metatables are not saved (a flow.Size loads as a plain list). Cycles
--     are an error.
--   Writing is atomic: everything is checked and the header built before the
--   file is touched; then the data is written to an unnamed file in the same
--   directory (O_TMPFILE; a named temporary file where the file system has
--   none), flushed and fsync'ed, given a temporary name, renamed over the
--   target, and the directory fsync'ed (oneflow.utils.atomic). On any error
--   the temporary file is removed and the target is left as it was; a writer
--   killed midway leaves nothing, and temporary files of dead writers are
--   removed by the next save into that directory.
--
-- flow.load(path): reads with stdio through the FFI straight into freshly
-- allocated tensors (the data is read once, never through a Lua string).
-- Hostile files are checked before anything is allocated: file size, header
-- size (<= file size - 8 and <= 100 MB), a strict JSON parser (no load()),
-- dtypes, shapes (<= 8 dims, no overflow), offsets inside the buffer, end -
-- begin == numel * itemsize, and the total size of the tensors <= the
-- buffer (so a small file cannot make us allocate a lot). Errors read
-- "flow.load: <path>: <what is wrong>".
--
-- flow.safetensors.save_file(tbl, path[, metadata]) / load_file(path) ->
-- tbl, metadata (a table, empty when the file has none) are the plain
-- safetensors helpers (same checks, same atomic write).
local ffi = require 'ffi'
local json = require 'oneflow.utils.json'
local P = require 'oneflow.utils.posix'
local atomic = require 'oneflow.utils.atomic'
local T = require 'oneflow.tensor'
local types = require 'oneflow.types'

local C = P.C
local is_tensor = T.is_tensor
local format = string.format

local M = {}
M.MAX_HEADER = 100 * 1000 * 1000
M.STRUCTURE_KEY = 'oneflow.structure'
M.MAX_DEPTH = 150
M._hooks = {}   -- for tests: before_rename(tmp) may raise to simulate a failure
-- Values other than tensors that flow.save knows (flow.quantization's
-- quantized tensors): codecs[name] = {is(v), encode(v, tensor_node(t, suffix))
-- -> JSON table, decode(node, tensor_of(ref), bad(what)) -> v}; the node is
-- saved as {name: encoded}. Registered by the module that owns the type.
M.codecs = {}

local code_of = {bool = 'BOOL', uint8 = 'U8', int8 = 'I8', int32 = 'I32', int64 = 'I64',
                 float16 = 'F16', bfloat16 = 'BF16', float32 = 'F32', float64 = 'F64',
                 int16 = 'I16', uint16 = 'U16', uint32 = 'U32', uint64 = 'U64'}
local name_of = {}
for k, v in pairs(code_of) do name_of[v] = k end
local CODES = 'BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64'
local TWO53 = 2 ^ 53
local little_endian = ffi.abi('le')

local function fail(ctx, fmt, ...)
  error(format('%s: %s: ', ctx.op, ctx.path) .. format(fmt, ...), 0)
end

local function q(s) return json.quote(s) end

------------------------------------------------------------------ planning
local function tohex(s)
  return (s:gsub('.', function(c) return format('%02x', c:byte()) end))
end

local function key_string(k)
  if type(k) == 'number' then return json.number(k) end
  return tostring(k)
end

local function path_string(path)
  if #path == 0 then return 'the top level' end
  return table.concat(path, '.')
end

-- One tensor to write: contiguous data, its code and shape.
local function entry_for(t, name, ctx, where)
  local dname = t.dtype.name
  local code = code_of[dname]
  if not code then fail(ctx, 'cannot save a tensor of dtype %s at %s', dname, where) end
  if t.device.type ~= 'cpu' then t = t:to('cpu') end
  local c = t:contiguous()
  local shape = c:size():totable()
  return {name = name, tensor = c, code = code, shape = shape,
          nbytes = c:numel() * c:element_size(), itemsize = c:element_size()}
end

local function is_flat(obj)
  if type(obj) ~= 'table' or getmetatable(obj) ~= nil then return false end
  for k, v in pairs(obj) do
    if type(k) ~= 'string' or not is_tensor(v) or k == '__metadata__' or not json.valid_utf8(k) then
      return false
    end
  end
  return true
end

local type_rank = {number = 1, string = 2, boolean = 3}
local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return type_rank[ta] < type_rank[tb] end
  if ta == 'boolean' then return (not a) and b end
  if ta == 'number' and a ~= a then return false end
  return a < b
end

local function plan_structured(obj, ctx)
  local st = {entries = {}, by_ptr = {}, used = {['__metadata__'] = true}, visiting = {}}

  local function unique(name)
    if name == '' then name = 'tensor' end
    if not json.valid_utf8(name) then name = 'tensor' end
    local base, n = name, 1
    while st.used[name] do
      n = n + 1
      name = base .. '#' .. n
    end
    st.used[name] = true
    return name
  end

  local function scalar(v, path)
    local t = type(v)
    if t == 'number' then
      if v ~= v then return {float = 'nan'} end
      if v == math.huge then return {float = 'inf'} end
      if v == -math.huge then return {float = '-inf'} end
      return v
    elseif t == 'string' then
      if json.valid_utf8(v) then return v end
      return {bytes = tohex(v)}
    elseif t == 'boolean' then
      return v
    end
    fail(ctx, 'cannot save a %s (at %s); only tensors, tables, numbers, strings and booleans',
         t, path_string(path))
  end

  local function node(v, path, depth)
    for cname, codec in pairs(M.codecs) do
      if codec.is(v) then
        return {[cname] = codec.encode(v, function(t, suffix)
          path[#path + 1] = suffix
          local r = node(t, path, depth + 1)
          path[#path] = nil
          return r
        end)}
      end
    end
    if is_tensor(v) then
      local addr = tonumber(ffi.cast('intptr_t', v.p))
      local name = st.by_ptr[addr]
      if not name then
        name = unique(table.concat(path, '.'))
        st.by_ptr[addr] = name
        st.entries[#st.entries + 1] = entry_for(v, name, ctx, path_string(path))
      end
      return {tensor = name}
    end
    if type(v) ~= 'table' then return scalar(v, path) end
    if depth > M.MAX_DEPTH then
      fail(ctx, 'tables nested deeper than %d levels (at %s)', M.MAX_DEPTH, path_string(path))
    end
    if st.visiting[v] then fail(ctx, 'the table at %s contains itself (a cycle)', path_string(path)) end
    st.visiting[v] = true
    local n = 0
    while rawget(v, n + 1) ~= nil do n = n + 1 end
    local list = json.array()
    for i = 1, n do
      path[#path + 1] = tostring(i)
      list[i] = node(rawget(v, i), path, depth + 1)
      path[#path] = nil
    end
    local keys = {}
    for k in next, v do
      local tk = type(k)
      if not (tk == 'number' and k >= 1 and k <= n and k == math.floor(k)) then
        if not type_rank[tk] then
          fail(ctx, 'cannot save a table key of type %s (in the table at %s)',
               is_tensor(k) and 'tensor' or tk, path_string(path))
        end
        keys[#keys + 1] = k
      end
    end
    table.sort(keys, key_less)
    local res = {}
    if n > 0 or #keys == 0 then res.list = list end
    if #keys > 0 then
      local map = json.array()
      for i, k in ipairs(keys) do
        path[#path + 1] = key_string(k)
        map[i] = json.array({scalar(k, path), node(rawget(v, k), path, depth + 1)})
        path[#path] = nil
      end
      res.map = map
    end
    st.visiting[v] = nil
    return res
  end

  local root = node(obj, {}, 0)
  local structure = json.encode({format = 'oneflow-lua', version = 1, root = root})
  return st.entries, {[M.STRUCTURE_KEY] = structure}
end

local function plan_flat(tbl, ctx)
  local entries = {}
  for k, v in pairs(tbl) do
    if type(k) ~= 'string' then fail(ctx, 'keys must be strings, got a %s key', type(k)) end
    if k == '__metadata__' then fail(ctx, 'a tensor cannot be named "__metadata__"') end
    if not json.valid_utf8(k) then fail(ctx, 'tensor name %s is not valid UTF-8', q(k)) end
    if not is_tensor(v) then fail(ctx, 'value for %s is a %s, not a tensor', q(k), type(v)) end
    entries[#entries + 1] = entry_for(v, k, ctx, q(k))
  end
  return entries
end

------------------------------------------------------------------ writing
local function build_header(entries, metadata)
  table.sort(entries, function(a, b)
    if a.itemsize ~= b.itemsize then return a.itemsize > b.itemsize end
    return a.name < b.name
  end)
  local parts, offset = {}, 0
  if metadata and next(metadata) ~= nil then
    parts[#parts + 1] = '"__metadata__":' .. json.encode(metadata)
  end
  for _, e in ipairs(entries) do
    local dims = {}
    for i, d in ipairs(e.shape) do dims[i] = format('%d', d) end
    parts[#parts + 1] = format('%s:{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}',
                               q(e.name), e.code, table.concat(dims, ','), offset, offset + e.nbytes)
    offset = offset + e.nbytes
  end
  local header = '{' .. table.concat(parts, ',') .. '}'
  local pad = (8 - #header % 8) % 8
  return header .. string.rep(' ', pad)
end

local function write_all(f, ptr, n, what)
  if n == 0 then return end
  local w = C.fwrite(ptr, 1, n, f)
  if tonumber(w) ~= n then error(format('write failed in %s (%s)', what, P.strerror()), 0) end
end

local function write_file(path, header, entries, ctx)
  if not little_endian then fail(ctx, 'big-endian hosts are not supported') end
  local okh, h = pcall(atomic.open, path)
  if not okh then fail(ctx, '%s', h) end
  local f = h.f
  local ok, err = pcall(function()
    local size = ffi.new('uint64_t[1]', #header)
    write_all(f, size, 8, 'the header size')
    write_all(f, header, #header, 'the header')
    for _, e in ipairs(entries) do
      if e.nbytes > 0 then write_all(f, e.tensor:data_ptr(), e.nbytes, 'tensor ' .. q(e.name)) end
    end
  end)
  if not ok then
    atomic.abort(h)
    fail(ctx, '%s (the file was left as it was)', tostring(err))
  end
  ok, err = pcall(atomic.commit, h, M._hooks.before_rename)
  if not ok then fail(ctx, '%s', tostring(err)) end
end

local function check_path(path, op)
  if type(path) ~= 'string' or path == '' then
    error(format('%s: expected a file path (string), got %s', op, tostring(path)), 3)
  end
end

--- Saves a tensor, a state dict or a Lua table of tensors, numbers, strings
-- and booleans as one safetensors file, atomically (a temporary file renamed).
-- A flat table of tensors is a plain safetensors file any reader takes.
-- @function flow.save
-- @param obj the value to save
-- @tparam string path the file to write
function M.save(obj, path)
  check_path(path, 'flow.save')
  local ctx = {op = 'flow.save', path = path}
  local entries, metadata
  if is_flat(obj) then
    entries = plan_flat(obj, ctx)
  else
    entries, metadata = plan_structured(obj, ctx)
  end
  write_file(path, build_header(entries, metadata), entries, ctx)
end

local function save_file(tbl, path, metadata)
  local op = 'flow.safetensors.save_file'
  check_path(path, op)
  local ctx = {op = op, path = path}
  if type(tbl) ~= 'table' or is_tensor(tbl) then
    fail(ctx, 'expected a table of tensors keyed by name, got %s', is_tensor(tbl) and 'a tensor' or type(tbl))
  end
  if metadata ~= nil then
    if type(metadata) ~= 'table' then fail(ctx, 'metadata must be a table of strings, got %s', type(metadata)) end
    for k, v in pairs(metadata) do
      if type(k) ~= 'string' or type(v) ~= 'string' then
        fail(ctx, 'metadata must map strings to strings (got %s = %s)', tostring(k), type(v))
      end
    end
  end
  local entries = plan_flat(tbl, ctx)
  write_file(path, build_header(entries, metadata), entries, ctx)
end

------------------------------------------------------------------ reading
local function read_exact(f, ptr, n, ctx, what)
  if n == 0 then return end
  local r = tonumber(C.fread(ptr, 1, n, f))
  if r ~= n then
    if C.ferror(f) ~= 0 then fail(ctx, 'read error in %s (%s)', what, P.strerror()) end
    fail(ctx, 'truncated file (%s: got %d of %d bytes)', what, r, n)
  end
end

local function uint(v)
  return type(v) == 'number' and v >= 0 and v == math.floor(v) and v < TWO53
end

local function check_entry(name, e, buflen, ctx)
  local tn = 'tensor ' .. q(name)
  if type(e) ~= 'table' or json.is_array(e) then fail(ctx, '%s: entry is not a JSON object', tn) end
  local code = e.dtype
  if type(code) ~= 'string' then fail(ctx, '%s: missing or non-string "dtype"', tn) end
  local dname = name_of[code]
  if not dname then fail(ctx, '%s: unsupported dtype %s (expected one of %s)', tn, q(code), CODES) end
  local shape = e.shape
  if type(shape) ~= 'table' or not json.is_array(shape) then fail(ctx, '%s: "shape" is not a list', tn) end
  if #shape > 8 then fail(ctx, '%s: shape has %d dims; at most 8 are supported', tn, #shape) end
  local numel = 1
  for i = 1, #shape do
    if not uint(shape[i]) then
      fail(ctx, '%s: shape entry %d is not a non-negative integer (%s)', tn, i, tostring(shape[i]))
    end
    numel = numel * shape[i]
  end
  local itemsize = types.by_name[dname].itemsize
  local nbytes = numel * itemsize
  if numel ~= 0 and nbytes >= TWO53 then fail(ctx, '%s: shape is too large', tn) end
  local off = e.data_offsets
  if type(off) ~= 'table' or not json.is_array(off) or #off ~= 2 or not uint(off[1]) or not uint(off[2]) then
    fail(ctx, '%s: "data_offsets" must be a list of two non-negative integers', tn)
  end
  local b, en = off[1], off[2]
  if b > en then fail(ctx, '%s: data_offsets [%d, %d] are reversed', tn, b, en) end
  if en > buflen then
    fail(ctx, '%s: data_offsets [%d, %d] are out of range: the data buffer has %d bytes (truncated file?)',
         tn, b, en, buflen)
  end
  if en - b ~= nbytes then
    local dims = {}
    for i = 1, #shape do dims[i] = format('%d', shape[i]) end
    fail(ctx, '%s: size mismatch: data_offsets [%d, %d] hold %d bytes, but %s [%s] needs %d',
         tn, b, en, en - b, code, table.concat(dims, ', '), nbytes)
  end
  local sizes = {}
  for i = 1, #shape do sizes[i] = shape[i] end
  return {name = name, dtype = dname, shape = sizes, begin = b, nbytes = nbytes}
end

local function read_open(f, ctx)
  if C.fseeko(f, 0, P.SEEK_END) ~= 0 then fail(ctx, 'cannot seek (%s)', P.strerror()) end
  local size = tonumber(C.ftello(f))
  if size < 0 or C.fseeko(f, 0, P.SEEK_SET) ~= 0 then fail(ctx, 'cannot seek (%s)', P.strerror()) end
  if size < 8 then
    fail(ctx, 'truncated file (%d bytes; a safetensors file starts with an 8-byte header size)', size)
  end
  local hb = ffi.new('uint8_t[8]')
  read_exact(f, hb, 8, ctx, 'header size')
  local n = 0
  for i = 7, 0, -1 do n = n * 256 + hb[i] end
  if n > M.MAX_HEADER then
    fail(ctx, 'bad header size %.0f: larger than the %d-byte limit (not a safetensors file?)', n, M.MAX_HEADER)
  end
  if n > size - 8 then fail(ctx, 'truncated file (header says %d bytes, file has %d)', n, size) end
  if n < 2 then fail(ctx, 'bad header size %d: too small for a JSON object', n) end
  local hbuf = ffi.new('uint8_t[?]', n)
  read_exact(f, hbuf, n, ctx, 'header')
  local text = ffi.string(hbuf, n)
  local ok, header = pcall(json.decode, text, {max_depth = 8})
  if not ok then fail(ctx, 'header is not valid JSON (%s)', header) end
  if type(header) ~= 'table' or json.is_array(header) then fail(ctx, 'header is not a JSON object') end

  local buflen = size - 8 - n
  local infos, metadata, total = {}, {}, 0
  for name, e in pairs(header) do
    if name == '__metadata__' then
      if type(e) ~= 'table' or json.is_array(e) then fail(ctx, '"__metadata__" is not a JSON object') end
      for k, v in pairs(e) do
        if type(v) ~= 'string' then fail(ctx, '"__metadata__" value for %s is not a string', q(k)) end
        metadata[k] = v
      end
    else
      local info = check_entry(name, e, buflen, ctx)
      total = total + info.nbytes
      infos[#infos + 1] = info
    end
  end
  if total > buflen then
    fail(ctx, 'tensors need %d bytes in all but the data buffer has %d (overlapping offsets?)', total, buflen)
  end
  table.sort(infos, function(a, b) return a.begin < b.begin end)
  local tensors = {}
  for _, info in ipairs(infos) do
    local t = T.flow.empty(info.shape, {dtype = info.dtype})
    if info.nbytes > 0 then
      if C.fseeko(f, 8 + n + info.begin, P.SEEK_SET) ~= 0 then fail(ctx, 'cannot seek (%s)', P.strerror()) end
      local p = ffi.cast('uint8_t*', t:data_ptr())
      read_exact(f, p, info.nbytes, ctx, 'tensor ' .. q(info.name))
      if info.dtype == 'bool' then
        for i = 0, info.nbytes - 1 do if p[i] > 1 then p[i] = 1 end end
      end
    end
    tensors[info.name] = t
  end
  return tensors, metadata
end

local function read_file(path, op)
  check_path(path, op)
  local ctx = {op = op, path = path}
  if not little_endian then fail(ctx, 'big-endian hosts are not supported') end
  local f = C.fopen(path, 'rb')
  if f == nil then fail(ctx, 'cannot open (%s)', P.strerror()) end
  local ok, tensors, metadata = pcall(read_open, f, ctx)
  C.fclose(f)
  if not ok then error(tensors, 0) end
  return tensors, metadata, ctx
end

local function unhex(s, ctx)
  if type(s) ~= 'string' or #s % 2 ~= 0 or s:find('[^%x]') then
    fail(ctx, 'bad structure metadata: "bytes" is not a hex string')
  end
  return (s:gsub('%x%x', function(h) return string.char(tonumber(h, 16)) end))
end

local specials = {inf = math.huge, ['-inf'] = -math.huge, nan = 0 / 0}

local function rebuild(structure, tensors, ctx)
  local ok, doc = pcall(json.decode, structure, {max_depth = 3 * M.MAX_DEPTH + 8})
  if not ok then fail(ctx, 'bad structure metadata (%s)', doc) end
  if type(doc) ~= 'table' or doc.format ~= 'oneflow-lua' or doc.root == nil then
    fail(ctx, 'bad structure metadata (not a oneflow-lua description)')
  end
  if doc.version ~= 1 then fail(ctx, 'structure metadata version %s is not supported', tostring(doc.version)) end
  local function bad(what) fail(ctx, 'bad structure metadata (%s)', what) end
  local function build(nd)
    local t = type(nd)
    if t == 'number' or t == 'string' or t == 'boolean' then return nd end
    if t ~= 'table' or json.is_array(nd) or nd == json.null then bad('unexpected ' .. t) end
    if nd.tensor ~= nil then
      local x = tensors[nd.tensor]
      if x == nil then bad('refers to tensor ' .. q(tostring(nd.tensor)) .. ', which is not in the file') end
      return x
    end
    for cname, codec in pairs(M.codecs) do
      if nd[cname] ~= nil then
        if type(nd[cname]) ~= 'table' then bad(cname .. ' is not an object') end
        return codec.decode(nd[cname], function(ref)
          local r = type(ref) == 'table' and ref.tensor ~= nil and build(ref)
          if not is_tensor(r) then bad(cname .. ' refers to no tensor') end
          return r
        end, bad)
      end
    end
    if nd.float ~= nil then
      local v = specials[nd.float]
      if not v then bad('unknown float ' .. tostring(nd.float)) end
      return v
    end
    if nd.bytes ~= nil then return unhex(nd.bytes, ctx) end
    if nd.list == nil and nd.map == nil then bad('unknown node') end
    local res = {}
    if nd.list ~= nil then
      if not json.is_array(nd.list) then bad('"list" is not an array') end
      for i = 1, #nd.list do res[i] = build(nd.list[i]) end
    end
    if nd.map ~= nil then
      if not json.is_array(nd.map) then bad('"map" is not an array') end
      for _, kv in ipairs(nd.map) do
        if type(kv) ~= 'table' or not json.is_array(kv) or #kv ~= 2 then bad('"map" entry is not a pair') end
        local k = build(kv[1])
        local tk = type(k)
        if not type_rank[tk] or k ~= k then bad('bad table key') end
        if res[k] ~= nil then bad('duplicate table key ' .. tostring(k)) end
        res[k] = build(kv[2])
      end
    end
    return res
  end
  return build(doc.root)
end

--- Loads what `flow.save` wrote (or any safetensors file): the same table
-- structure with CPU tensors. Never runs code from the file.
-- @function flow.load
-- @tparam string path the file to read
-- @return the saved value
function M.load(path)
  local tensors, metadata, ctx = read_file(path, 'flow.load')
  local structure = metadata[M.STRUCTURE_KEY]
  if structure == nil then return tensors end
  return rebuild(structure, tensors, ctx)
end

M.safetensors = {
  save_file = save_file,
  load_file = function(path)
    local tensors, metadata = read_file(path, 'flow.safetensors.load_file')
    return tensors, metadata
  end,
}

return M
