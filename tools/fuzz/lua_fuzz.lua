-- lua_fuzz.lua -- a coverage-guided mutation fuzzer, driven by LuaJIT, for
-- the loaders written in Lua: safetensors (oneflow.serialization), the .pt
-- zip and legacy formats (oneflow.io.torch, oneflow.io.zip), the pickle VM
-- (oneflow.io.pickle) and Torch7 .t7 files (oneflow.io.t7).
--
-- Why not libFuzzer: these loaders are Lua, which libFuzzer's compiler
-- coverage cannot see (only the C they call). Here the coverage is the
-- loaders' own line edges (previous line -> line, from debug.sethook), and
-- an input that reaches a new edge joins the corpus. Mutations: bit flips,
-- byte and integer overwrites with boundary values (0, -1, 2^31-1, 2^63-1),
-- chunk insert / delete / duplicate, truncation and splicing of two corpus
-- entries.
--
-- An input must end in a result or a clean error: the loader's own message
-- (raised with error(msg, 0): it names the loader, "flow.load: ...",
-- "flow.load_torch: ...", "flow.load_t7: ..."). A finding is
--   * an internal error: a Lua runtime error ("attempt to index ...",
--     "bad argument ...", a file:line position), which means a check is
--     missing, or an error that is not a string;
--   * a hang: more than LINE_LIMIT loader lines for one input;
--   * memory: the Lua heap growing past MEM_LIMIT_MB for one input;
--   * a crash (a signal) ends the process: the input being tried is always
--     in WORK/current, and tools/fuzz/run.sh moves it to the crash folder.
-- Findings are written to CRASHES/<target>/<kind>-<hash> and counted; the
-- fuzzer keeps going.
--
-- onnx: the ONNX model reader (oneflow.onnx.reader, a Lua protobuf decoder)
-- and flow.onnx's model construction from it (initializers decoded into
-- tensors, external-data paths checked, nodes put in topological order, with
-- subgraphs); the graph is not run.
-- Usage (LUA_PATH must find lua/):
--   luajit tools/fuzz/lua_fuzz.lua TARGET SECONDS CORPUS_DIR CRASH_DIR [WORK_DIR]
--   luajit tools/fuzz/lua_fuzz.lua TARGET -replay FILE...   (exit 1 on a finding)
-- TARGET: safetensors | torch | pickle | t7 | onnx (and graph | image for -replay)
local ffi = require 'ffi'
local bit = require 'bit'
local flow = require 'oneflow'
local bytes = require 'oneflow.io.bytes'
local pickle = require 'oneflow.io.pickle'
local torch = require 'oneflow.io.torch'
local t7 = require 'oneflow.io.t7'

ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } lf_timespec;
  int clock_gettime(int clk, lf_timespec *ts);
  int getpid(void);
]]
local function now()
  local ts = ffi.new('lf_timespec')
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local LINE_LIMIT = 2000000       -- loader lines for one input: more is a hang
local MEM_LIMIT_MB = 512         -- Lua heap after one input
local MAX_LEN = 64 * 1024        -- inputs are kept at most this long

local target, a2 = arg[1], arg[2]
local replay = a2 == '-replay'
local seconds = tonumber(a2)
local corpus_dir, crash_dir = arg[3], arg[4]
local work = (not replay and arg[5]) or os.getenv('TMPDIR') or '/tmp'
if not target or (not replay and not (seconds and corpus_dir and crash_dir)) then
  io.stderr:write('usage: luajit tools/fuzz/lua_fuzz.lua TARGET SECONDS CORPUS CRASHES [WORK]\n' ..
                  '       luajit tools/fuzz/lua_fuzz.lua TARGET -replay FILE...\n')
  os.exit(2)
end

------------------------------------------------------------------ targets
local tmp_path = ('%s/lua_fuzz.%s.%d.bin'):format(work, target, ffi.C.getpid())

local function write(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end

-- the pickle VM on its own, with handlers that build plain tuples, so that
-- every opcode path (globals, REDUCE, NEWOBJ, BUILD, persistent ids) runs
local function any_global(module, name)
  local full = module .. '.' .. name
  return pickle.global(full, {
    call = function(args) return args end,
    new = function(args) return args end,
  })
end

local targets = {
  safetensors = {
    prefix = {'flow.load: '},
    run = function(s)
      write(tmp_path, s)
      -- the values are read too (printing), as a user would: a NaN with a
      -- payload used to come back as a bogus Lua object only then
      local loaded = flow.load(tmp_path)
      local function touch(v)
        if flow.is_tensor(v) then tostring(v)
        elseif type(v) == 'table' then for _, x in pairs(v) do touch(x) end end
      end
      touch(loaded)
      return loaded
    end,
  },
  torch = {
    prefix = {'flow.load_torch: '},
    run = function(s) return torch.loads(s) end,
  },
  pickle = {
    prefix = {'pickle: '},
    run = function(s)
      local function fail(fmt, ...) error('pickle: ' .. string.format(fmt, ...), 0) end
      return bytes.with_source('<bytes>', s, fail, function(src)
        local r = bytes.reader(src, 0, #s, fail)
        return pickle.load(r, {fail = fail, find_global = any_global, bigint = true,
                               persistent_load = function(pid) return pid end})
      end)
    end,
  },
  t7 = {
    prefix = {'flow.load_t7: '},
    run = function(s) return t7.loads(s) end,
  },
  onnx = {
    prefix = {'onnx: '},
    run = function(s)
      local I = require 'oneflow.onnx.import'
      -- external data is looked up in an empty folder of the work dir
      return I.load_bytes(s, {dir = work .. '/onnx_fuzz_data'})
    end,
  },
}
-- The two C loaders have libFuzzer harnesses (tools/fuzz/fuzz_graph.c,
-- fuzz_image.c); these targets let `-replay` run their corpora and crash
-- files through the normal loaders without a clang build (make test).
local function fix_checksum(s)   -- as fuzz_graph.c does: the attacker's checksum
  local at = s:find('OFGRAPH\0', 1, true)
  if not at or #s < at + 31 then return s end
  local plen = ffi.cast('const uint64_t *', ffi.cast('const char *', s) + at + 15)[0]
  if plen > #s - (at + 31) then return s end
  local h = 1469598103934665603ULL
  for i = at + 32, at + 31 + tonumber(plen) do h = bit.bxor(h, s:byte(i)) * 1099511628211ULL end
  local b = ffi.new('uint64_t[1]', h)
  return s:sub(1, at + 23) .. ffi.string(b, 8) .. s:sub(at + 32)
end
targets.graph = {
  prefix = {'nn.Graph.load: '},
  run = function(s)
    write(tmp_path, fix_checksum(s))
    return flow.nn.Graph.load(tmp_path)
  end,
}
targets.image = {   -- a failing C call is a clean error; a crash is a signal
  prefix = {''},
  run = function(s)
    local out = ffi.new('of_tensor *[1]')
    local buf = ffi.new('uint8_t[?]', math.max(#s, 1))
    ffi.copy(buf, s, #s)
    if flow.C.of_image_decode(buf, #s, out) == 0 then flow.C.of_tensor_release(out[0]) end
  end,
}

local T = targets[target]
if not T then
  io.stderr:write('lua_fuzz: unknown target ' .. tostring(target) .. ' (safetensors, torch, pickle, t7, onnx)\n')
  os.exit(2)
end

------------------------------------------------------------------ coverage
-- edges between lines of the loader sources: (prev * 31 + cur) in a set
local watched = {}
local function watch(src) return src:find('/oneflow/io/', 1, true) or src:find('serialization.lua', 1, true)
  or src:find('/oneflow/utils/json', 1, true) or src:find('/oneflow/onnx/', 1, true) end
local edges, new_edges = {}, 0
local prev, lines = 0, 0
local getinfo = debug.getinfo
local src_id, nsrc = {}, 0

local Hang = setmetatable({}, {__tostring = function() return 'hang' end})
local function hook(_, line)
  lines = lines + 1
  if lines > LINE_LIMIT then
    lines = -1e18   -- once
    error(Hang, 0)
  end
  local info = getinfo(2, 'S')
  local src = info.source
  local w = watched[src]
  if w == nil then
    w = watch(src) and true or false
    watched[src] = w
    if w then nsrc = nsrc + 1; src_id[src] = nsrc end
  end
  if not w then return end
  local cur = src_id[src] * 100000 + line
  local e = prev * 31 + cur
  if not edges[e] then
    edges[e] = true
    new_edges = new_edges + 1
  end
  prev = cur
end

------------------------------------------------------------------ running one input
local function internal(msg)
  if type(msg) ~= 'string' then return true end
  if msg:find('attempt to ', 1, true) or msg:find('bad argument', 1, true)
     or msg:find('stack overflow', 1, true) or msg:find('not enough memory', 1, true)
     or msg:find('table index is', 1, true) or msg:find('%.lua:%d+:') then
    return true
  end
  for _, p in ipairs(T.prefix) do
    if msg:sub(1, #p) == p then return false end
  end
  return true
end

-- runs s; returns nil (fine) or kind, message
local function execute(s)
  lines, prev, new_edges = 0, 0, 0
  jit.off()
  debug.sethook(hook, 'l')
  local ok, err = pcall(T.run, s)
  debug.sethook()
  if err == Hang then return 'hang', 'more than ' .. LINE_LIMIT .. ' lines' end
  if not ok and internal(err) then return 'internal', tostring(err) end
  collectgarbage()
  local mb = collectgarbage('count') / 1024
  if mb > MEM_LIMIT_MB then return 'memory', ('%.0f MB of Lua heap'):format(mb) end
  return nil
end

local function fnv(s)
  local h = 2166136261
  for i = 1, #s do h = bit.tobit(bit.bxor(h, s:byte(i)) * 16777619) end
  return bit.tohex(h)
end

local function read(path)
  local f = io.open(path, 'rb')
  if not f then return nil end
  local s = f:read('*a')
  f:close()
  return s
end

local function ls(dir)
  local out = {}
  local p = io.popen("ls -1 '" .. dir .. "' 2>/dev/null")
  for name in p:lines() do out[#out + 1] = dir .. '/' .. name end
  p:close()
  table.sort(out)
  return out
end

------------------------------------------------------------------ replay
if replay then
  local bad = 0
  for i = 3, #arg do
    local s = assert(read(arg[i]), arg[i])
    io.stdout:write('FILE ', arg[i], '\n')
    io.stdout:flush()
    local kind, msg = execute(s)
    if kind then
      bad = bad + 1
      print(('%s: %s: %s'):format(arg[i], kind, msg))
    end
  end
  os.remove(tmp_path)
  print(('lua_fuzz %s: replayed %d files, %d findings'):format(target, #arg - 2, bad))
  os.exit(bad == 0 and 0 or 1)
end

------------------------------------------------------------------ mutations
local rnd = math.random
local interesting32 = {0, 1, -1, 0x7f, 0x80, 0xff, 0x7fff, 0xffff, 0x7fffffff, -0x80000000, 0x10000}
local interesting64 = {'\255\255\255\255\255\255\255\127', '\0\0\0\0\0\0\0\128', '\255\255\255\255\255\255\255\255',
                       '\0\0\0\0\1\0\0\0', '\0\0\0\0\0\0\0\0'}
local tokens = {'"', ',', ':', '[', ']', '{', '}', '0', '-1', '1e999', '18446744073709551615',
                '"dtype"', '"shape"', '"data_offsets"', '"F32"', '"__metadata__"', 'null', 'true',
                'PK\3\4', 'PK\1\2', 'PK\5\6', '\128\2', '.', 'q\0', 'X\0\0\0', '}', ']'}

local function le32(n)
  n = bit.tobit(n)
  return string.char(bit.band(n, 255), bit.band(bit.rshift(n, 8), 255), bit.band(bit.rshift(n, 16), 255),
                     bit.band(bit.rshift(n, 24), 255))
end

local function mutate(s, corpus)
  local n = #s
  local k = rnd(1, 10)
  if n == 0 then return string.char(rnd(0, 255)) end
  local p = rnd(1, n)
  if k == 1 then   -- flip a bit
    local b = bit.bxor(s:byte(p), bit.lshift(1, rnd(0, 7)))
    return s:sub(1, p - 1) .. string.char(b) .. s:sub(p + 1)
  elseif k == 2 then   -- random byte
    return s:sub(1, p - 1) .. string.char(rnd(0, 255)) .. s:sub(p + 1)
  elseif k == 3 then   -- boundary 32-bit integer
    return s:sub(1, p - 1) .. le32(interesting32[rnd(1, #interesting32)]) .. s:sub(p + 4)
  elseif k == 4 then   -- boundary 64-bit integer
    return s:sub(1, p - 1) .. interesting64[rnd(1, #interesting64)] .. s:sub(p + 8)
  elseif k == 5 then   -- delete a chunk
    local l = rnd(1, math.min(32, n - p + 1))
    return s:sub(1, p - 1) .. s:sub(p + l)
  elseif k == 6 then   -- duplicate a chunk
    local l = rnd(1, math.min(64, n - p + 1))
    return s:sub(1, p + l - 1) .. s:sub(p, p + l - 1) .. s:sub(p + l)
  elseif k == 7 then   -- truncate
    return s:sub(1, rnd(0, n - 1))
  elseif k == 8 then   -- insert a token of the formats
    return s:sub(1, p - 1) .. tokens[rnd(1, #tokens)] .. s:sub(p)
  elseif k == 9 then   -- small arithmetic on a byte
    local b = (s:byte(p) + rnd(-8, 8)) % 256
    return s:sub(1, p - 1) .. string.char(b) .. s:sub(p + 1)
  else   -- splice with another corpus entry
    local o = corpus[rnd(1, #corpus)]
    local q = rnd(1, math.max(#o, 1))
    return s:sub(1, p) .. o:sub(q)
  end
end

------------------------------------------------------------------ the loop
math.randomseed(tonumber(os.getenv('FUZZ_SEED') or '') or os.time())
os.execute("mkdir -p '" .. corpus_dir .. "' '" .. crash_dir .. "' '" .. work .. "'")
local current = work .. '/current.' .. target
local corpus = {}
local seen_findings = {}
local counts = {execs = 0, internal = 0, hang = 0, memory = 0, corpus = 0}

local function finding(kind, msg, s)
  counts[kind] = counts[kind] + 1
  local key = kind .. ':' .. tostring(msg):gsub('%d+', '#'):sub(1, 120)
  if seen_findings[key] then return end
  seen_findings[key] = true
  local name = ('%s/%s-%s'):format(crash_dir, kind, fnv(s))
  write(name, s)
  io.stderr:write(('lua_fuzz %s: %s: %s (saved %s)\n'):format(target, kind, msg, name))
end

for _, path in ipairs(ls(corpus_dir)) do
  local s = read(path)
  if s then
    write(current, s)
    local kind, msg = execute(s)
    counts.execs = counts.execs + 1
    if kind then finding(kind, msg, s) end
    corpus[#corpus + 1] = s
  end
end
if #corpus == 0 then corpus[1] = '' end
counts.corpus = #corpus
local t_end = now() + seconds
local last_report = now()
while now() < t_end do
  local s = corpus[rnd(1, #corpus)]
  for _ = 1, rnd(1, 4) do s = mutate(s, corpus) end
  if #s > MAX_LEN then s = s:sub(1, MAX_LEN) end
  write(current, s)
  local kind, msg = execute(s)
  counts.execs = counts.execs + 1
  if kind then
    finding(kind, msg, s)
  elseif new_edges > 0 then
    corpus[#corpus + 1] = s
    counts.corpus = counts.corpus + 1
    write(('%s/cov-%s'):format(corpus_dir, fnv(s)), s)
  end
  if now() - last_report > 30 then
    last_report = now()
    io.stderr:write(('lua_fuzz %s: %d execs, corpus %d, findings %d\n'):format(
      target, counts.execs, counts.corpus, counts.internal + counts.hang + counts.memory))
  end
end
os.remove(current)
os.remove(tmp_path)
local found = counts.internal + counts.hang + counts.memory
print(('lua_fuzz %s: %d s, %d execs, corpus %d, %d internal errors, %d hangs, %d memory, 0 crashes')
  :format(target, seconds, counts.execs, counts.corpus, counts.internal, counts.hang, counts.memory))
os.exit(found == 0 and 0 or 1)
