-- bench/common.lua -- small helpers the bench scripts share: a clock, the
-- median, the load average, a command's output and the scripts' folder. Loaded relative to the
-- calling script's own file, so that it works from any directory:
--   local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
local ffi = require 'ffi'

local M = {MONOTONIC = 1, THREAD_CPU = 3}   -- clock ids of clock_gettime

-- guarded: a script may have declared these symbols already
pcall(ffi.cdef, [[
typedef struct { int64_t sec, nsec; } of_bench_timespec;
int clock_gettime(int clk, of_bench_timespec *ts);
]])
local ts = ffi.new('of_bench_timespec')

-- seconds on `clock` (default CLOCK_MONOTONIC)
function M.now(clock)
  ffi.C.clock_gettime(clock or 1, ts)
  return tonumber(ts.sec) + tonumber(ts.nsec) * 1e-9
end

-- the middle value (the lower of the two middle ones for an even count);
-- sorts a copy, the caller's table stays as it was
function M.median(t)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  table.sort(c)
  return c[math.floor((#c + 1) / 2)]
end

-- a command's standard output ('' when it cannot be started)
function M.read_cmd(cmd)
  local p = io.popen(cmd)
  if not p then return '' end
  local s = p:read('*a')
  p:close()
  return s or ''
end

-- the folder of the bench scripts (this file's), e.g. 'bench'
M.dir = debug.getinfo(1, 'S').source:match('^@(.*)/') or '.'

-- the PyTorch sides of a comparison: {name, py} for Debian's PyTorch 1.13 and,
-- when bench/torch_venv.sh gives one, PyTorch 2.x (else a message naming
-- `who` says its column is skipped)
function M.torch_sides(who)
  local torch2 = M.read_cmd(('sh %s/torch_venv.sh 2>/dev/null'):format(M.dir)):match('(%S+/bin/python3)%s*$')
  local sides = {{name = 'PyTorch 1.13', py = '/usr/bin/python3'}}
  if torch2 then sides[2] = {name = 'PyTorch 2.x', py = torch2}
  else print(who .. ': no PyTorch 2.x venv (bench/torch_venv.sh): its column is skipped') end
  return sides
end

-- the 1, 5 and 15 minute load averages, e.g. '1.02 0.98 0.90'
function M.loadavg()
  local f = io.open('/proc/loadavg')
  if not f then return 'n/a' end
  local s = f:read('*l') or ''
  f:close()
  return s:match('^(%S+ %S+ %S+)') or 'n/a'
end

-- writes `text` to `path` atomically (a temporary file renamed over it),
-- as the scripts that rewrite a section of doc/benchmarks.md do
function M.write_atomic(path, text)
  local tmp = path .. '.tmp'
  local o = assert(io.open(tmp, 'w'))
  o:write(text)
  o:close()
  assert(os.rename(tmp, path))
end

-- 32 short sentences (9 to 18 tokens) for the MiniLM benches (text.lua,
-- alloc_encode.lua): eight of STS's, each numbered
function M.short_sentences()
  local base = {
    'A man is eating food.', 'A man is eating a piece of bread.', 'The girl is carrying a baby.',
    'A man is riding a horse.', 'A woman is playing violin.', 'Two men pushed carts through the woods.',
    'A man is riding a white horse on an enclosed ground.', 'A monkey is playing drums.',
  }
  local t = {}
  for i = 1, 32 do t[i] = base[(i - 1) % #base + 1] .. (' Number %d of the batch.'):format(i) end
  return t
end

return M
