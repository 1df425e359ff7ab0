-- bench/models.lua -- whole models on the CPU: our convolutions through the
-- im2col + OpenBLAS path (OF_CONV_BACKEND=ref) and through oneDNN (the
-- default, auto), against PyTorch 1.13 (Debian, /usr/bin/python3) and
-- PyTorch 2.x (PyPI, in the git-ignored venv bench/.venv-torch2 that this
-- script makes on first use; skipped with a message when pip cannot install
-- it, or with --no-torch2), all at the same thread count:
--   * ResNet-50 inference (eval, no_grad), batch 1 and 8, 3x224x224;
--   * ResNet-18 training step (forward, cross-entropy, backward, SGD
--     momentum), batch 16, 3x112x112, 10 classes;
--   * MobileNetV2 inference, batch 8, 3x224x224;
--   * ResNet-50 inference batch 1 under bfloat16 autocast, and with the
--     model and input in bfloat16.
-- The contenders alternate: each round times one call of every case on our
-- two backends, then runs one PyTorch process per version (one warm-up and
-- one timed call per case); the figures are medians over the rounds (after
-- one warm-up call of ours per case and backend). Ratios are to the faster
-- PyTorch.
--
--   luajit bench/models.lua [threads] [--rounds N] [--no-torch2] [--no-write]
--
-- Writes the table to doc/benchmarks.md (section "Models: oneDNN
-- convolutions"; the other sections are kept) and prints it.
local ffi = require 'ffi'
local flow = require 'oneflow'
local vision = require 'flowvision'
local F = flow.nn.functional

local threads, rounds, write_doc, want_torch2 = 2, 3, true, true
do
  local argv, i = arg or {}, 1
  while i <= #argv do
    if argv[i] == '--rounds' then rounds = tonumber(argv[i + 1]); i = i + 1
    elseif argv[i] == '--no-write' then write_doc = false
    elseif argv[i] == '--no-torch2' then want_torch2 = false
    elseif tonumber(argv[i]) then threads = tonumber(argv[i])
    else error('models.lua: unknown argument ' .. argv[i]) end
    i = i + 1
  end
end
flow.set_num_threads(threads)

pcall(ffi.cdef, [[
typedef struct { int64_t sec, nsec; } of_bench_timespec;
int clock_gettime(int clk, of_bench_timespec *ts);
int setenv(const char *name, const char *value, int overwrite);
]])
local ts = ffi.new('of_bench_timespec')
local function now()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.sec) + tonumber(ts.nsec) * 1e-9
end

local function loadavg()
  local f = io.open('/proc/loadavg')
  if not f then return 'n/a' end
  local s = f:read('*l')
  f:close()
  return s:match('^(%S+ %S+ %S+)') or 'n/a'
end

local function cpu_name()
  local f = io.open('/proc/cpuinfo')
  if not f then return 'unknown CPU' end
  local name, n, avx512 = nil, 0, false
  for line in f:lines() do
    if line:match('^processor') then n = n + 1 end
    name = name or line:match('^model name%s*:%s*(.-)%s*$')
    if line:match('^flags') and line:find('avx512f', 1, true) then avx512 = true end
  end
  f:close()
  return ('%s, %d cores, %s'):format(name or 'unknown CPU', n,
                                     avx512 and 'AVX-512' or 'AVX2 (no AVX-512 visible)')
end

local function median(t)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  table.sort(c)
  return c[math.floor((#c + 1) / 2)]
end

------------------------------------------------------------------ cases
local cases = {
  {key = 'r50_b1', name = 'ResNet-50 inference, batch 1, 224'},
  {key = 'r50_b8', name = 'ResNet-50 inference, batch 8, 224'},
  {key = 'r18_train', name = 'ResNet-18 training step, batch 16, 112'},
  {key = 'mb2_b8', name = 'MobileNetV2 inference, batch 8, 224'},
  {key = 'r50_bf16', name = 'ResNet-50 inference, batch 1, 224, bfloat16 autocast'},
  {key = 'r50_bf16t', name = 'ResNet-50 inference, batch 1, 224, bfloat16 model and input'},
}

local function build_ours()
  flow.manual_seed(0)
  local r50 = vision.models.resnet50():eval()
  local r50h = vision.models.resnet50():eval():to(flow.bfloat16)
  local mb2 = vision.models.mobilenet_v2():eval()
  local r18 = vision.models.resnet18({num_classes = 10}):train()
  local opt = flow.optim.SGD(r18:parameters(), {lr = 0.01, momentum = 0.9})
  local x1, x8 = flow.randn(1, 3, 224, 224), flow.randn(8, 3, 224, 224)
  local xt, yt = flow.randn(16, 3, 112, 112), flow.randint(1, 11, {16})
  local function infer(net, x) return function() flow.no_grad(function() return net(x) end) end end
  return {
    r50_b1 = infer(r50, x1),
    r50_b8 = infer(r50, x8),
    mb2_b8 = infer(mb2, x8),
    r18_train = function()
      local loss = F.cross_entropy(r18(xt), yt)
      opt:zero_grad()
      loss:backward()
      opt:step()
    end,
    r50_bf16t = infer(r50h, x1:to(flow.bfloat16)),
    r50_bf16 = function()
      flow.no_grad(function()
        return flow.amp.autocast('cpu', {dtype = flow.bfloat16}, function() return r50(x1) end)
      end)
    end,
  }
end

local backends = {'ref', 'auto'}
local function time_ours(fn, backend)
  ffi.C.setenv('OF_CONV_BACKEND', backend, 1)
  local t0 = now()
  fn()
  local t = (now() - t0) * 1000
  flow.collect()
  return t
end

------------------------------------------------------------------ PyTorch
local torch_script = [[
import sys, time
import torch, torch.nn.functional as F, torchvision
torch.set_num_threads(int(sys.argv[1]))
torch.manual_seed(0)
m = torchvision.models
r50 = m.resnet50().eval(); mb2 = m.mobilenet_v2().eval()
r50h = m.resnet50().eval().to(torch.bfloat16)
r18 = m.resnet18(num_classes=10).train()
opt = torch.optim.SGD(r18.parameters(), lr=0.01, momentum=0.9)
x1 = torch.randn(1, 3, 224, 224); x8 = torch.randn(8, 3, 224, 224)
xt = torch.randn(16, 3, 112, 112); yt = torch.randint(0, 10, (16,))
def infer(net, x):
    def f():
        with torch.no_grad(): net(x)
    return f
def train():
    loss = F.cross_entropy(r18(xt), yt); opt.zero_grad(); loss.backward(); opt.step()
def bf16():
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16): r50(x1)
cases = {'r50_b1': infer(r50, x1), 'r50_b8': infer(r50, x8), 'r18_train': train,
         'mb2_b8': infer(mb2, x8), 'r50_bf16': bf16,
         'r50_bf16t': infer(r50h, x1.to(torch.bfloat16))}
print('version', torch.__version__, flush=True)
for k, f in cases.items():
    f()
    t0 = time.perf_counter(); f(); print(k, (time.perf_counter() - t0) * 1000, flush=True)
]]

local script_path = os.tmpname()
do
  local f = assert(io.open(script_path, 'w'))
  f:write(torch_script)
  f:close()
end

local function sh_ok(cmd) return os.execute(cmd) == 0 end

-- PyTorch 2.x from PyPI in bench/.venv-torch2 (made once); nil + why if not.
local function torch2_python()
  local py = 'bench/.venv-torch2/bin/python'
  local check = py .. ' -c "import torch, torchvision; assert int(torch.__version__[0]) >= 2"'
    .. ' >/dev/null 2>&1'
  if sh_ok(check) then return py end
  io.stderr:write('models.lua: installing PyTorch 2.x from PyPI into bench/.venv-torch2 ...\n')
  if not sh_ok('/usr/bin/python3 -m venv bench/.venv-torch2 >/dev/null 2>&1') then
    return nil, 'python3 -m venv failed'
  end
  if not sh_ok(py .. ' -m pip install -q torch torchvision >/dev/null 2>&1') or
     not sh_ok(check) then
    return nil, 'pip install torch torchvision failed (no network?)'
  end
  return py
end

local function run_torch(py)
  local p = io.popen(('%s %s %d 2>/dev/null'):format(py, script_path, threads))
  local out = p and p:read('*a') or ''
  if p then p:close() end
  local res = {}
  for k, v in out:gmatch('(%S+) (%S+)') do res[k] = tonumber(v) or v end
  return res
end

local pythons = {}
if sh_ok('/usr/bin/python3 -c "import torch, torchvision" >/dev/null 2>&1') then
  pythons[#pythons + 1] = {label = 'PyTorch (Debian)', py = '/usr/bin/python3'}
end
local torch2_note
if want_torch2 then
  local py, why = torch2_python()
  if py then pythons[#pythons + 1] = {label = 'PyTorch (PyPI)', py = py}
  else torch2_note = 'PyTorch 2.x skipped: ' .. why end
else
  torch2_note = 'PyTorch 2.x skipped (--no-torch2)'
end
if torch2_note then io.stderr:write('models.lua: ' .. torch2_note .. '\n') end

------------------------------------------------------------------ rounds
local load_before = loadavg()
local fns = build_ours()
for _, c in ipairs(cases) do
  for _, be in ipairs(backends) do time_ours(fns[c.key], be) end   -- warm-up (and primitives)
end
local ours = {ref = {}, auto = {}}
local theirs = {}
for i = 1, #pythons do theirs[i] = {} end
for r = 1, rounds do
  for _, c in ipairs(cases) do
    for _, be in ipairs(backends) do
      ours[be][c.key] = ours[be][c.key] or {}
      table.insert(ours[be][c.key], time_ours(fns[c.key], be))
    end
  end
  for i, p in ipairs(pythons) do
    local res = run_torch(p.py)
    p.version = p.version or res.version
    for _, c in ipairs(cases) do
      if type(res[c.key]) == 'number' then
        theirs[i][c.key] = theirs[i][c.key] or {}
        table.insert(theirs[i][c.key], res[c.key])
      end
    end
  end
  io.stderr:write(('models.lua: round %d/%d done\n'):format(r, rounds))
end
os.remove(script_path)
local load_after = loadavg()

------------------------------------------------------------------ report
local function med(t) return t and #t > 0 and median(t) or nil end
local function fmt(v) return v and ('%.1f'):format(v) or 'n/a' end
local function ratio(a, b) return (a and b) and ('%.2fx'):format(a / b) or 'n/a' end
local head = {'| Case | ours, im2col (ref) ms | ours, oneDNN (auto) ms |'}
local rule = {'|---|---|---|'}
for _, p in ipairs(pythons) do
  head[#head + 1] = (' %s %s ms |'):format(p.label, p.version or '?')
  rule[#rule + 1] = '---|'
end
head[#head + 1] = ' ref / faster PyTorch | oneDNN / faster PyTorch | oneDNN / ref |'
rule[#rule + 1] = '---|---|---|'
local lines = {
  ('%s; %d thread(s) on every side; %d rounds (median); load average %s before, %s after; '
    .. '%s; `luajit bench/models.lua %d --rounds %d`.'):format(cpu_name(), threads, rounds,
    load_before, load_after, os.date('!%Y-%m-%d %H:%M UTC'), threads, rounds),
  '',
  table.concat(head),
  table.concat(rule),
}
local summary = {}
for _, c in ipairs(cases) do
  local ref, auto = med(ours.ref[c.key]), med(ours.auto[c.key])
  local row = {('| %s | %s | %s |'):format(c.name, fmt(ref), fmt(auto))}
  local best
  for i = 1, #pythons do
    local v = med(theirs[i][c.key])
    row[#row + 1] = (' %s |'):format(fmt(v))
    if v and (not best or v < best) then best = v end
  end
  row[#row + 1] = (' %s | %s | %s |'):format(ratio(ref, best), ratio(auto, best), ratio(auto, ref))
  lines[#lines + 1] = table.concat(row)
  summary[c.key] = auto
end
lines[#lines + 1] = ''
if summary.r50_bf16 and summary.r50_b1 then
  lines[#lines + 1] = ('bfloat16 autocast vs our float32 (ResNet-50 batch 1, oneDNN): %.2fx the float32 '
    .. 'time.'):format(summary.r50_bf16 / summary.r50_b1)
end
if torch2_note then lines[#lines + 1] = torch2_note .. '.' end
local text = table.concat(lines, '\n')
print(text)

if write_doc then
  local path = 'doc/benchmarks.md'
  local f = io.open(path, 'r')
  local doc = f and f:read('*a') or '# Benchmarks\n'
  if f then f:close() end
  local title = '## Models: oneDNN convolutions'
  local open_m, close_m = '<!-- bench/models.lua table -->', '<!-- end of the bench/models.lua table -->'
  local a = doc:find(open_m, 1, true)
  local b = a and doc:find(close_m, a, true)
  if a and b then   -- the section's prose stays; only the table between the markers changes
    doc = doc:sub(1, a - 1) .. open_m .. '\n' .. text .. '\n' .. doc:sub(b)
  else
    doc = doc:gsub('%s+$', '') .. '\n\n' .. title .. '\n\n' .. open_m .. '\n' .. text .. '\n'
      .. close_m .. '\n'
  end
  local tmp = path .. '.tmp'
  local o = assert(io.open(tmp, 'w'))
  o:write(doc)
  o:close()
  assert(os.rename(tmp, path))
end
