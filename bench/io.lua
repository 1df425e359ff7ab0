-- bench/io.lua -- checkpoint IO: time to load and save a ~100 MB state dict
-- (25 float32 tensors of 1M elements) with flow.load_torch / flow.save_torch
-- and flow.load / flow.save (safetensors), side by side with torch.load /
-- torch.save run by /usr/bin/python3 in the same run (when it can import
-- torch; the checkpoint is then written by torch.save, else by
-- flow.save_torch).
--
--   luajit bench/io.lua [--repeats N] [--no-write]
--
-- Warm runs: every file is read once before timing (so it is in the page
-- cache); each figure is the median of N (default 3) timed runs. Writes the
-- table to doc/benchmarks.md (section "Checkpoint IO").
local flow = require 'oneflow'

local repeats, write_doc = 3, true
do
  local argv, i = arg or {}, 1
  while i <= #argv do
    if argv[i] == '--repeats' then repeats = tonumber(argv[i + 1]); i = i + 1
    elseif argv[i] == '--no-write' then write_doc = false end
    i = i + 1
  end
end

local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
local now, median = B.now, B.median


local N_TENSORS, NUMEL = 25, 1024 * 1024

local dir = os.tmpname()
os.remove(dir)
assert(os.execute('mkdir -p ' .. dir) == 0)
local torch_pt, ours_pt, st_path = dir .. '/torch.pt', dir .. '/ours.pt', dir .. '/ours.safetensors'

local function warm(path)
  local f = assert(io.open(path, 'rb'))
  while f:read(16 * 1024 * 1024) do end
  f:close()
end

-- Times fn() (after one untimed run), in ms: the median of `repeats`.
local function time_ms(fn)
  fn()
  flow.collect()
  local t = {}
  for i = 1, repeats do
    local t0 = now()
    fn()
    t[i] = (now() - t0) * 1000
    flow.collect()
  end
  return median(t)
end

------------------------------------------------------------------ torch side
local torch_script = [[
import sys, os, time, statistics
import torch
torch.set_num_threads(1)
mode, d, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
n, numel = int(sys.argv[4]), int(sys.argv[5])
def med(fn):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); ts.append((time.perf_counter() - t0) * 1000)
    return statistics.median(ts)
if mode == 'gen':
    g = torch.Generator().manual_seed(0)
    sd = {'layer%d.weight' % i: torch.randn(numel, generator=g) for i in range(n)}
    torch.save(sd, os.path.join(d, 'torch.pt'))
    print('version', torch.__version__)
else:
    p = os.path.join(d, 'torch.pt')
    open(p, 'rb').read()
    print('load_ms', med(lambda: torch.load(p)))
    sd = torch.load(p)
    q = os.path.join(d, 'torch_again.pt')
    print('save_ms', med(lambda: torch.save(sd, q)))
    o = torch.load(os.path.join(d, 'ours.pt'), weights_only=True)
    ok = all(torch.equal(o[k], sd[k]) for k in sd) and set(o) == set(sd)
    print('ours_equal', 'yes' if ok else 'NO')
]]

local script_path = dir .. '/bench_io.py'
do
  local f = assert(io.open(script_path, 'w'))
  f:write(torch_script)
  f:close()
end

local function run_torch(mode)
  local p = io.popen(('/usr/bin/python3 %s %s %s %d %d %d 2>/dev/null'):format(
    script_path, mode, dir, repeats, N_TENSORS, NUMEL))
  local out = p:read('*a')
  p:close()
  local res = {}
  for k, v in out:gmatch('(%S+) (%S+)') do res[k] = tonumber(v) or v end
  return res
end

------------------------------------------------------------------ run
local gen = run_torch('gen')
local have_torch = gen.version ~= nil
if not have_torch then
  flow.manual_seed(0)
  local sd = {}
  for i = 0, N_TENSORS - 1 do sd[('layer%d.weight'):format(i)] = flow.randn(NUMEL) end
  flow.save_torch(sd, torch_pt)
end
local file_mb
do
  local f = assert(io.open(torch_pt, 'rb'))
  file_mb = f:seek('end') / 2 ^ 20
  f:close()
end

warm(torch_pt)
local sd = flow.load_torch(torch_pt)
local load_torch_ms = time_ms(function() flow.load_torch(torch_pt) end)
local load_torch_nocrc_ms = time_ms(function() flow.load_torch(torch_pt, {check_crc = false}) end)
local save_torch_ms = time_ms(function() flow.save_torch(sd, ours_pt) end)
local save_st_ms = time_ms(function() flow.save(sd, st_path) end)
warm(st_path)
local load_st_ms = time_ms(function() flow.load(st_path) end)
-- the data survived both formats
do
  local back, back_st = flow.load_torch(ours_pt), flow.load(st_path)
  for k, t in pairs(sd) do
    assert(back[k]:eq(t):all():item() and back_st[k]:eq(t):all():item(), 'round trip changed ' .. k)
  end
end
sd = nil   -- luacheck: ignore 311
flow.collect()

local torch = have_torch and run_torch('time') or {}
os.execute('rm -rf ' .. dir)

local function machine()
  local cpu, cores = 'unknown CPU', 0
  local f = io.open('/proc/cpuinfo', 'r')
  if f then
    for line in f:lines() do
      local m = line:match('^model name%s*:%s*(.-)%s*$')
      if m then cpu, cores = m, cores + 1 end
    end
    f:close()
  end
  local la = io.open('/proc/loadavg', 'r')
  local load = la and la:read('*l'):match('^(%S+)') or '?'
  if la then la:close() end
  return ('%s, %d cores, load average %s after the run; %s'):format(cpu, cores, load, os.date('%Y-%m-%d'))
end

local function fmt(v) return v and ('%.1f'):format(v) or 'n/a' end
local function ratio(a, b) return b and ('%.2fx'):format(a / b) or 'n/a' end
local function rate(ms) return ('%.2f'):format(file_mb / 1024 / (ms / 1000)) end
local rows = {
  {'load: flow.load_torch (CRC-32 checked) vs torch.load', load_torch_ms, torch.load_ms},
  {'load: flow.load_torch {check_crc = false} vs torch.load', load_torch_nocrc_ms, torch.load_ms},
  {'load: flow.load (safetensors) vs torch.load', load_st_ms, torch.load_ms},
  {'save: flow.save_torch vs torch.save', save_torch_ms, torch.save_ms},
  {'save: flow.save (safetensors) vs torch.save', save_st_ms, torch.save_ms},
}
local lines = {
  machine() .. '.',
  '',
  ('A state dict of %d float32 tensors of %d elements (%.1f MiB file, written by %s); warm page cache; '
    .. 'median of %d timed runs after one untimed run; PyTorch %s, 1 thread, in the same run.')
    :format(N_TENSORS, NUMEL, file_mb, have_torch and 'torch.save' or 'flow.save_torch', repeats,
            gen.version or 'not installed'),
  '',
  '| Operation | OneFlow-Lua ms | ours GiB/s | PyTorch ms | ratio (ours / PyTorch) |',
  '|---|---|---|---|---|',
}
for _, r in ipairs(rows) do
  lines[#lines + 1] = ('| %s | %s | %s | %s | %s |'):format(r[1], fmt(r[2]), rate(r[2]), fmt(r[3]),
                                                             ratio(r[2], r[3]))
end
lines[#lines + 1] = ''
lines[#lines + 1] = 'Both of our writers fsync the file and its directory before returning (atomic '
  .. 'replace); torch.save does not, so the save rows include a flush to disk that the PyTorch figure '
  .. 'leaves to the kernel. torch.load does not check CRC-32s; flow.load_torch does unless told not to. '
  .. ('torch.load(weights_only=True) of the flow.save_torch file gives equal tensors: %s.')
    :format(torch.ours_equal or 'n/a')
local text = table.concat(lines, '\n')
print(text)

if write_doc then
  local path = 'doc/benchmarks.md'
  local fd = io.open(path, 'r')
  local doc = fd and fd:read('*a') or '# Benchmarks\n'
  if fd then fd:close() end
  local title = '## Checkpoint IO'
  local section = title .. '\n\n' .. text .. '\n'
  local s = doc:find(title .. '\n', 1, true)
  if s then
    local e = doc:find('\n## ', s + #title, true)
    doc = doc:sub(1, s - 1) .. section .. (e and doc:sub(e) or '')
  else
    doc = doc:gsub('%s+$', '') .. '\n\n' .. section
  end
  B.write_atomic(path, doc)
end
