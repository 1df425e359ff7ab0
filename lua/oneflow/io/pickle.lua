-- oneflow.io.pickle: a restricted pickle reader (protocols 2-5) and a
-- protocol-2 writer, in plain Lua over oneflow.io.bytes readers.
--
-- The reader is a small stack machine that knows only the opcodes needed
-- for containers, numbers, strings and tensors. It never imports or calls
-- anything by itself: GLOBAL / STACK_GLOBAL ask hooks.find_global(module,
-- name), which returns a handler table or raises (the caller keeps the
-- allowlist); REDUCE / NEWOBJ / BUILD call only such handlers; BINPERSID
-- calls hooks.persistent_load(pid). Every other opcode is refused, naming
-- it and its offset. Limits: the stack (MAX_STACK items), MARK nesting
-- (MAX_MARKS), the memo (MAX_MEMO entries) and container nesting
-- (MAX_DEPTH, counted as containers are filled) are capped, so a hostile
-- pickle cannot make the reader use much more memory than its own size.
--
-- Python values become:
--   int -> number (an int64_t cdata beyond +-2^53), float -> number,
--   str / bytes -> string, True / False -> boolean,
--   None -> nil as a dict value (the key is left out), pickle.None elsewhere
--     (in lists and tuples, so that they stay proper Lua sequences),
--   dict / OrderedDict -> table (keys as they are: strings, numbers...),
--   list / tuple / set -> array (1-based).
-- Side tables (weak keys) remember what the Lua values lose:
--   pickle.kind[t]  = 'dict' | 'odict' | 'list' | 'tuple' | 'set'
--   pickle.order[t] = the dict's keys in file order
--   pickle.attrs[t] = the state BUILD gave an OrderedDict (e.g. _metadata)
--
-- The writer (pickle.writer()) emits only opcodes that torch's
-- weights_only unpickler knows: PROTO 2, EMPTY_DICT/LIST/TUPLE, MARK,
-- SETITEMS, APPENDS, TUPLE/TUPLE1-3, BININT/BININT1/BININT2/LONG1,
-- BINUNICODE, NONE, NEWTRUE/NEWFALSE, GLOBAL, REDUCE, BINPERSID, STOP -- and
-- BINFLOAT for floats (not in torch 1.13's weights_only list; torch >= 2.0
-- reads it).
local ffi = require 'ffi'
local T = require 'oneflow.tensor'

local format, char, byte = string.format, string.char, string.byte
local is_tensor = T.is_tensor

local M = {}
M.MAX_STACK = 1000000
M.MAX_MARKS = 10000
M.MAX_MEMO = 2000000
M.MAX_DEPTH = 200
M.MAX_NAME = 512

M.None = setmetatable({}, {__tostring = function() return 'None' end, __name = 'pickle.None'})
local None = M.None
M.kind = setmetatable({}, {__mode = 'k'})
M.order = setmetatable({}, {__mode = 'k'})
M.attrs = setmetatable({}, {__mode = 'k'})
local KIND, ORDER, ATTRS = M.kind, M.order, M.attrs
local DEPTH = setmetatable({}, {__mode = 'k'})

--- Handlers returned by hooks.find_global carry this metatable.
M.Global = {__name = 'pickle.Global'}
M.Global.__index = M.Global
local Global = M.Global
function M.global(full, fields)
  fields = fields or {}
  fields.full = full
  return setmetatable(fields, Global)
end

--- A short description of a value, for error messages.
function M.describe(v)
  if v == None then return 'None' end
  local t = type(v)
  if t == 'table' then
    if getmetatable(v) == Global then return "global '" .. v.full .. "'" end
    local k = KIND[v]
    if k then return 'a ' .. k end
    return 'an object'
  end
  if is_tensor(v) then return 'a tensor' end
  if t == 'number' then return 'a number' end
  if t == 'string' then return 'a string' end
  if t == 'boolean' then return 'a bool' end
  if t == 'cdata' then return 'an int' end
  return 'a ' .. t
end
local describe = M.describe

local opnames = {
  [0x80] = 'PROTO', [0x95] = 'FRAME', [0x7d] = 'EMPTY_DICT', [0x5d] = 'EMPTY_LIST', [0x29] = 'EMPTY_TUPLE',
  [0x28] = 'MARK', [0x85] = 'TUPLE1', [0x86] = 'TUPLE2', [0x87] = 'TUPLE3', [0x74] = 'TUPLE',
  [0x73] = 'SETITEM', [0x75] = 'SETITEMS', [0x61] = 'APPEND', [0x65] = 'APPENDS', [0x71] = 'BINPUT',
  [0x72] = 'LONG_BINPUT', [0x94] = 'MEMOIZE', [0x68] = 'BINGET', [0x6a] = 'LONG_BINGET', [0x4a] = 'BININT',
  [0x4b] = 'BININT1', [0x4d] = 'BININT2', [0x8a] = 'LONG1', [0x47] = 'BINFLOAT', [0x58] = 'BINUNICODE',
  [0x8c] = 'SHORT_BINUNICODE', [0x8d] = 'BINUNICODE8', [0x42] = 'BINBYTES', [0x43] = 'SHORT_BINBYTES',
  [0x8e] = 'BINBYTES8', [0x55] = 'SHORT_BINSTRING', [0x54] = 'BINSTRING', [0x4e] = 'NONE',
  [0x88] = 'NEWTRUE', [0x89] = 'NEWFALSE', [0x63] = 'GLOBAL', [0x93] = 'STACK_GLOBAL', [0x52] = 'REDUCE',
  [0x62] = 'BUILD', [0x81] = 'NEWOBJ', [0x51] = 'BINPERSID', [0x2e] = 'STOP', [0x8f] = 'EMPTY_SET',
  [0x90] = 'ADDITEMS', [0x91] = 'FROZENSET',
}
-- the ones we refuse, by name, for clearer messages
local refused_names = {
  [0x69] = 'INST', [0x6f] = 'OBJ', [0x92] = 'NEWOBJ_EX', [0x50] = 'PERSID', [0x49] = 'INT', [0x4c] = 'LONG',
  [0x46] = 'FLOAT', [0x53] = 'STRING', [0x56] = 'UNICODE', [0x64] = 'DICT', [0x6c] = 'LIST', [0x67] = 'GET',
  [0x70] = 'PUT', [0x30] = 'POP', [0x31] = 'POP_MARK', [0x32] = 'DUP', [0x8b] = 'LONG4', [0x82] = 'EXT1',
  [0x83] = 'EXT2', [0x84] = 'EXT4', [0x96] = 'BYTEARRAY8', [0x97] = 'NEXT_BUFFER', [0x98] = 'READONLY_BUFFER',
}

local TWO53 = 2 ^ 53
local i64buf = ffi.new('int64_t[1]')
local i64bytes = ffi.cast('uint8_t *', i64buf)

-- LONG1 payload (little-endian two's complement) -> number or int64 cdata.
local function decode_long(s)
  local n = #s
  if n == 0 then return 0 end
  local neg = byte(s, n) >= 128
  for k = 0, 7 do
    if k < n then i64bytes[k] = byte(s, k + 1) else i64bytes[k] = neg and 255 or 0 end
  end
  local v = i64buf[0]
  if v > -TWO53 and v < TWO53 then return tonumber(v) end
  return ffi.new('int64_t', v)
end

--- Runs the pickle at the reader's position until STOP; returns the value
-- (nil for None). hooks: find_global(module, name) -> handler,
-- persistent_load(pid) -> value, bigint (allow ints wider than 64 bits,
-- returned as {bigint = little-endian bytes}), fail(fmt, ...) raising.
function M.load(r, hooks)
  local fail = hooks.fail
  local stack, top = {}, 0
  local marks, nmarks = {}, 0
  local memo, nmemo = {}, 0
  local op_at = 0

  local current_op = 0
  local function err(fmt, ...)
    fail('pickle opcode %s at byte %d: ' .. fmt, opnames[current_op] or format('0x%02x', current_op), op_at, ...)
  end

  local function push(v)
    if v == nil then v = None end
    if top >= M.MAX_STACK then err('the stack is deeper than %d items', M.MAX_STACK) end
    top = top + 1
    stack[top] = v
  end
  local function pop()
    if top <= (nmarks > 0 and marks[nmarks] or 0) then err('the stack is empty') end
    local v = stack[top]
    stack[top] = nil
    top = top - 1
    return v
  end
  local function peek()
    if top <= (nmarks > 0 and marks[nmarks] or 0) then err('the stack is empty') end
    return stack[top]
  end
  local function pop_mark()
    if nmarks == 0 then err('no MARK on the stack') end
    local m = marks[nmarks]
    marks[nmarks] = nil
    nmarks = nmarks - 1
    local items = {}
    for k = m + 1, top do
      items[k - m] = stack[k]
      stack[k] = nil
    end
    local n = top - m
    top = m
    return items, n
  end
  local function container(kind)
    local t = {}
    KIND[t] = kind
    if kind == 'dict' or kind == 'odict' then ORDER[t] = {} end
    return t
  end
  -- depth bookkeeping when value v is put inside container c
  local function nest(c, v)
    if type(v) == 'table' and KIND[v] then
      local d = (DEPTH[v] or 1) + 1
      if d > M.MAX_DEPTH then err('containers nested deeper than %d levels', M.MAX_DEPTH) end
      if d > (DEPTH[c] or 1) then DEPTH[c] = d end
    end
  end
  local function tuple(items, n)
    local t = container('tuple')
    for k = 1, n do
      local v = items[k]
      nest(t, v)
      t[k] = v
    end
    return t
  end
  local function setitem(d, k, v)
    local kind = KIND[d]
    if kind ~= 'dict' and kind ~= 'odict' then err('cannot set an item on %s', describe(d)) end
    if k ~= k then err('a NaN dict key cannot be a Lua table key') end
    if v == None then
      d[k] = nil
      return
    end
    nest(d, v)
    if d[k] == nil then
      local o = ORDER[d]
      o[#o + 1] = k
    end
    d[k] = v
  end
  local function append(l, v)
    local kind = KIND[l]
    if kind ~= 'list' and kind ~= 'set' then err('cannot append to %s', describe(l)) end
    nest(l, v)
    l[#l + 1] = v
  end
  local function memo_put(idx)
    if memo[idx] == nil then
      nmemo = nmemo + 1
      if nmemo > M.MAX_MEMO then err('more than %d memo entries', M.MAX_MEMO) end
    end
    memo[idx] = peek()
  end
  local function memo_get(idx)
    local v = memo[idx]
    if v == nil then err('memo entry %d was never stored', idx) end
    push(v)
  end
  local function check_len(n, what)
    if n > r:left() then err('%s of %.0f bytes, but only %d bytes are left', what, n, r:left()) end
  end
  local function call(f, args)
    if getmetatable(f) ~= Global or not f.call then err('cannot call %s', describe(f)) end
    if KIND[args] ~= 'tuple' then err('arguments of %s are %s, not a tuple', f.full, describe(args)) end
    return f.call(args, err)
  end

  local ops = {}
  ops[0x80] = function()
    local v = r:u8('PROTO')
    if v > 5 then err('pickle protocol %d is not supported (2 to 5 are)', v) end
  end
  ops[0x95] = function()
    local n = r:u64('FRAME')
    check_len(n, 'a frame')
  end
  ops[0x7d] = function() push(container('dict')) end
  ops[0x5d] = function() push(container('list')) end
  ops[0x29] = function() push(container('tuple')) end
  ops[0x8f] = function() push(container('set')) end
  ops[0x28] = function()
    if nmarks >= M.MAX_MARKS then err('MARKs nested deeper than %d', M.MAX_MARKS) end
    nmarks = nmarks + 1
    marks[nmarks] = top
  end
  ops[0x85] = function() local a = pop(); push(tuple({a}, 1)) end
  ops[0x86] = function() local b = pop(); local a = pop(); push(tuple({a, b}, 2)) end
  ops[0x87] = function() local c = pop(); local b = pop(); local a = pop(); push(tuple({a, b, c}, 3)) end
  ops[0x74] = function() push(tuple(pop_mark())) end
  ops[0x91] = function()
    local items, n = pop_mark()
    local t = container('set')
    for k = 1, n do append(t, items[k]) end
    push(t)
  end
  ops[0x73] = function()
    local v = pop()
    local k = pop()
    setitem(peek(), k, v)
  end
  ops[0x75] = function()
    local items, n = pop_mark()
    if n % 2 ~= 0 then err('an odd number of items (%d) for key/value pairs', n) end
    local d = peek()
    for k = 1, n, 2 do setitem(d, items[k], items[k + 1]) end
  end
  ops[0x61] = function()
    local v = pop()
    append(peek(), v)
  end
  ops[0x65] = function()
    local items, n = pop_mark()
    local l = peek()
    for k = 1, n do append(l, items[k]) end
  end
  ops[0x90] = function()
    local items, n = pop_mark()
    local s = peek()
    if KIND[s] ~= 'set' then err('cannot add items to %s', describe(s)) end
    for k = 1, n do append(s, items[k]) end
  end
  ops[0x71] = function() memo_put(r:u8('BINPUT')) end
  ops[0x72] = function() memo_put(r:u32('LONG_BINPUT')) end
  ops[0x94] = function() memo_put(nmemo) end
  ops[0x68] = function() memo_get(r:u8('BINGET')) end
  ops[0x6a] = function() memo_get(r:u32('LONG_BINGET')) end
  ops[0x4a] = function() push(r:i32('BININT')) end
  ops[0x4b] = function() push(r:u8('BININT1')) end
  ops[0x4d] = function() push(r:u16('BININT2')) end
  ops[0x8a] = function()
    local n = r:u8('LONG1')
    local s = r:bytes(n, 'LONG1')
    if n > 8 then
      if not hooks.bigint then err('an integer of %d bytes does not fit in 64 bits', n) end
      push({bigint = s})
    else
      push(decode_long(s))
    end
  end
  ops[0x47] = function() push(r:f64be('BINFLOAT')) end
  local function str(n, what)
    check_len(n, what)
    push(r:bytes(n, what))
  end
  ops[0x58] = function() str(r:u32('BINUNICODE'), 'a string') end
  ops[0x8c] = function() str(r:u8('SHORT_BINUNICODE'), 'a string') end
  ops[0x8d] = function() str(r:u64('BINUNICODE8'), 'a string') end
  ops[0x42] = function() str(r:u32('BINBYTES'), 'a bytes object') end
  ops[0x43] = function() str(r:u8('SHORT_BINBYTES'), 'a bytes object') end
  ops[0x8e] = function() str(r:u64('BINBYTES8'), 'a bytes object') end
  ops[0x55] = function() str(r:u8('SHORT_BINSTRING'), 'a string') end
  ops[0x54] = function()
    local n = r:i32('BINSTRING')
    if n < 0 then err('negative string length %d', n) end
    str(n, 'a string')
  end
  ops[0x4e] = function() push(None) end
  ops[0x88] = function() push(true) end
  ops[0x89] = function() push(false) end
  local function global(module, name)
    if #module == 0 or #name == 0 or module:find('[^%w_.]') or name:find('[^%w_.]') then
      err('bad global name %q %q', module, name)
    end
    local g = hooks.find_global(module, name)
    if getmetatable(g) ~= Global then err('global %s.%s has no handler', module, name) end
    -- a global that stands for a value (torch.float32) is pushed as that value
    if g.value ~= nil then push(g.value) else push(g) end
  end
  ops[0x63] = function()
    local module = r:line(M.MAX_NAME, 'GLOBAL')
    local name = r:line(M.MAX_NAME, 'GLOBAL')
    global(module, name)
  end
  ops[0x93] = function()
    local name = pop()
    local module = pop()
    if type(module) ~= 'string' or type(name) ~= 'string' then
      err('module and name must be strings, got %s and %s', describe(module), describe(name))
    end
    if #module > M.MAX_NAME or #name > M.MAX_NAME then err('global name too long') end
    global(module, name)
  end
  ops[0x52] = function()
    local args = pop()
    local f = pop()
    push(call(f, args))
  end
  ops[0x81] = function()
    local args = pop()
    local cls = pop()
    if getmetatable(cls) ~= Global or not cls.new then err('cannot instantiate %s', describe(cls)) end
    if KIND[args] ~= 'tuple' then err('arguments of %s are %s, not a tuple', cls.full, describe(args)) end
    push(cls.new(args, err))
  end
  ops[0x62] = function()
    local state = pop()
    local inst = peek()
    local kind = type(inst) == 'table' and KIND[inst]
    if kind == 'dict' or kind == 'odict' then
      ATTRS[inst] = state
    elseif is_tensor(inst) then   -- tensor state (Python attributes): dropped
      return
    else
      err('cannot set the state of %s', describe(inst))
    end
  end
  ops[0x51] = function()
    if not hooks.persistent_load then err('persistent ids are not expected here') end
    local pid = pop()
    push(hooks.persistent_load(pid, err))
  end

  while true do
    op_at = r.pos
    local op = r:u8('the next opcode (no STOP)')
    current_op = op
    if op == 0x2e then   -- STOP
      if top == 0 then err('the stack is empty') end
      local v = stack[top]
      if v == None then return nil end
      return v
    end
    local f = ops[op]
    if not f then
      local name = refused_names[op]
      fail('pickle: unsupported opcode %s at byte %d (only the opcodes for containers, numbers, strings '
           .. 'and tensors are allowed)', name and (name .. format(' (0x%02x)', op)) or format('0x%02x', op), op_at)
    end
    f()
  end
end

------------------------------------------------------------------ writer
local Writer = {}
Writer.__index = Writer

function M.writer()
  return setmetatable({parts = {}, n = 0}, Writer)
end

local function le(n, width)
  local b = {}
  for i = 1, width do
    b[i] = char(n % 256)
    n = math.floor(n / 256)
  end
  return table.concat(b)
end

function Writer:raw(s)
  self.n = self.n + 1
  self.parts[self.n] = s
end

function Writer:proto() self:raw('\128\2') end
function Writer:stop() self:raw('.') end
function Writer:mark() self:raw('(') end
function Writer:none() self:raw('N') end
function Writer:bool(b) self:raw(b and '\136' or '\137') end
function Writer:empty_dict() self:raw('}') end
function Writer:empty_list() self:raw(']') end
function Writer:empty_tuple() self:raw(')') end
function Writer:setitems() self:raw('u') end
function Writer:appends() self:raw('e') end
function Writer:tuple_end() self:raw('t') end
function Writer:tuple_n(n) self:raw(({'\133', '\134', '\135'})[n]) end
function Writer:reduce() self:raw('R') end
function Writer:persid() self:raw('Q') end

function Writer:global(module, name) self:raw('c' .. module .. '\n' .. name .. '\n') end

function Writer:str(s)
  self:raw('X' .. le(#s, 4) .. s)
end

local TWO63 = 2 ^ 63
--- An integer: a Lua number with an integral value, or an int64_t cdata.
function Writer:int(v)
  if type(v) == 'number' then
    if v >= 0 and v < 256 then return self:raw('K' .. char(v)) end
    if v >= 0 and v < 65536 then return self:raw('M' .. le(v, 2)) end
    if v >= -2147483648 and v < 2147483648 then
      return self:raw('J' .. le(v < 0 and v + 4294967296 or v, 4))
    end
    if v >= -TWO63 and v < TWO63 then v = ffi.new('int64_t', v) end
  end
  -- LONG1 with the shortest two's complement encoding
  i64buf[0] = v
  local bytes = {}
  for k = 0, 7 do bytes[k + 1] = i64bytes[k] end
  local n = 8
  while n > 1 do
    local last, prev = bytes[n], bytes[n - 1]
    if (last == 0 and prev < 128) or (last == 255 and prev >= 128) then n = n - 1 else break end
  end
  local s = {}
  for k = 1, n do s[k] = char(bytes[k]) end
  self:raw('\138' .. char(n) .. table.concat(s))
end

local fbuf = ffi.new('double[1]')
local fbytes = ffi.cast('uint8_t *', fbuf)
local little = ffi.abi('le')
function Writer:float(v)
  fbuf[0] = v
  local s = {}
  for k = 0, 7 do s[k + 1] = char(fbytes[little and 7 - k or k]) end
  self:raw('G' .. table.concat(s))
end

function Writer:result()
  return table.concat(self.parts, '', 1, self.n)
end

return M
