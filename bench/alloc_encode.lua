-- bench/alloc_encode.lua -- the caching allocator under a MiniLM encode
-- (flowtext's SentenceTransformer, 32 short sentences, one batch, 1 thread):
-- the CPU time per encode, the page faults per encode (fresh pages mapped
-- in) and the bytes cached after them. For comparing two builds side by
-- side (doc/tensor.md "Memory"):
--   sh tools/minilm.sh   # the model folder
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' luajit bench/alloc_encode.lua [encodes]
--   OF_LIBRARY=/other/build/liboneflow.so ... (the other build)
local flow = require 'oneflow'
local text = require 'flowtext'
local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')

local n = tonumber(arg[1] or '') or 25
flow.set_num_threads(1)
local dir = B.read_cmd('sh tools/minilm.sh 2>/dev/null'):match('([^\n]*)\n?$')
assert(dir ~= '' and io.open(dir .. '/model.safetensors'), 'alloc_encode: no model (sh tools/minilm.sh failed)')

local function minflt()   -- field 10 of /proc/self/stat: minor faults
  local f = assert(io.open('/proc/self/stat'))
  local s = f:read('*a')
  f:close()
  return tonumber(s:match('%) %S+ ' .. ('%S+ '):rep(6) .. '(%d+)'))
end

local short = B.short_sentences()
local st = text.SentenceTransformer(dir)
for _ = 1, 3 do st:encode(short, {batch_size = 32}) end
local f0, t0 = minflt(), os.clock()
for _ = 1, n do st:encode(short, {batch_size = 32}) end
local t, f = (os.clock() - t0) / n, (minflt() - f0) / n
local s = flow.memory_stats()
print(('encode %.1f ms CPU, %.0f page faults per encode, %.1f MiB cached, peak %.1f MiB in use')
      :format(t * 1e3, f, s.cached_bytes / 2^20, s.peak_bytes / 2^20))
