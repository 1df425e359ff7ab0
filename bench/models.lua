-- bench/models.lua -- whole models on the CPU: our convolutions through the
-- im2col + OpenBLAS path (OF_CONV_BACKEND=ref) and through oneDNN (the
-- default, auto), against PyTorch 1.13 (Debian, /usr/bin/python3) and
-- PyTorch 2.x (PyPI, in the git-ignored venv bench/.venv that
-- bench/torch_venv.sh makes on first use; skipped with a message when pip
-- cannot install it, or with --no-torch2), all at the same thread count:
--   * ResNet-50 inference (eval, no_grad), batch 1 and 8, 3x224x224;
--   * ResNet-18 training step (forward, cross-entropy, backward, SGD
--     momentum), batch 16, 3x112x112 and 3x224x224, 10 classes;
--   * MobileNetV2 inference, batch 8, 3x224x224;
--   * ResNet-50 inference batch 1 under bfloat16 autocast, and with the
--     model and input in bfloat16;
--   * ResNet-50 (batch 1 and 8) and MobileNetV2 (batch 8) in eval
--     nn.Graphs, against PyTorch's eager inference of the same cases.
-- The contenders alternate: each round times every case on our two
-- backends, then runs one PyTorch process per version; each side makes two
-- warm-up calls of a case, then takes the median of three timed calls; the
-- figures are medians over the rounds. Ratios are to the faster PyTorch.
--
--   luajit bench/models.lua [threads] [--rounds N] [--no-torch2] [--no-write]
--   luajit bench/models.lua [threads] --memory [--no-torch2] [--no-write]
--   METRIC=cpu luajit bench/models.lua ...   process CPU time instead of wall
--
-- --memory: instead of times, the peak memory of two training steps
-- (ResNet-18 and ResNet-50, batch 32, 3x112x112, SGD momentum) and of five
-- eval no_grad forwards (ResNet-50 batch 1 and 8, MobileNetV2 batch 8,
-- 3x224x224), each side in a fresh process: ours as the allocator's
-- high-water mark and as the process's peak RSS (VmHWM) over its RSS before
-- the model was made (inference: after the model and input were made);
-- PyTorch's as the same RSS delta (it has no CPU allocator statistics).
--
-- Writes the table to doc/benchmarks.md (section "Models: oneDNN
-- convolutions"; the other sections are kept) and prints it.
local ffi = require 'ffi'
local flow = require 'oneflow'
local vision = require 'flowvision'
local F = flow.nn.functional

local threads, rounds, write_doc, want_torch2, memory = 2, 3, true, true, false
do
  local argv, i = arg or {}, 1
  while i <= #argv do
    if argv[i] == '--rounds' then rounds = tonumber(argv[i + 1]); i = i + 1
    elseif argv[i] == '--no-write' then write_doc = false
    elseif argv[i] == '--no-torch2' then want_torch2 = false
    elseif argv[i] == '--memory' then memory = true
    elseif tonumber(argv[i]) then threads = tonumber(argv[i])
    else error('models.lua: unknown argument ' .. argv[i]) end
    i = i + 1
  end
end
flow.set_num_threads(threads)

pcall(ffi.cdef, 'int setenv(const char *name, const char *value, int overwrite);')
local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
local now, loadavg, median = B.now, B.loadavg, B.median

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

local function fmt(v) return v and ('%.1f'):format(v) or 'n/a' end
local function ratio(a, b) return (a and b) and ('%.2fx'):format(a / b) or 'n/a' end


------------------------------------------------------------------ cases
local cases = {
  {key = 'r50_b1', name = 'ResNet-50 inference, batch 1, 224'},
  {key = 'r50_b8', name = 'ResNet-50 inference, batch 8, 224'},
  {key = 'r18_train', name = 'ResNet-18 training step, batch 16, 112'},
  {key = 'r18_train224', name = 'ResNet-18 training step, batch 16, 224'},
  {key = 'mb2_b8', name = 'MobileNetV2 inference, batch 8, 224'},
  {key = 'r50_bf16', name = 'ResNet-50 inference, batch 1, 224, bfloat16 autocast'},
  {key = 'r50_bf16t', name = 'ResNet-50 inference, batch 1, 224, bfloat16 model and input'},
  -- eval nn.Graphs (layout 'auto': channels-last on AVX-512 with oneDNN),
  -- against PyTorch's eager inference of the same case
  {key = 'r50_b1_graph', torch = 'r50_b1', name = 'ResNet-50 eval nn.Graph, batch 1, 224 (PyTorch: eager)'},
  {key = 'r50_b8_graph', torch = 'r50_b8', name = 'ResNet-50 eval nn.Graph, batch 8, 224 (PyTorch: eager)'},
  {key = 'mb2_b8_graph', torch = 'mb2_b8', name = 'MobileNetV2 eval nn.Graph, batch 8, 224 (PyTorch: eager)'},
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
  local xt2 = flow.randn(16, 3, 224, 224)
  local function step(x)
    local loss = F.cross_entropy(r18(x), yt)
    opt:zero_grad()
    loss:backward()
    opt:step()
  end
  local function infer(net, x) return function() flow.no_grad(function() return net(x) end) end end
  local Eval = flow.nn.Graph:subclass('ModelsBench')
  function Eval:__init(net) flow.nn.Graph.__init(self); self.net = net end
  function Eval:build(x) return self.net(x) end
  local function graph(net, x)
    local g = Eval(net)
    return function() return g(x) end
  end
  return {
    r50_b1_graph = graph(r50, x1),
    r50_b8_graph = graph(r50, x8),
    mb2_b8_graph = graph(mb2, x8),
    r50_b1 = infer(r50, x1),
    r50_b8 = infer(r50, x8),
    mb2_b8 = infer(mb2, x8),
    r18_train = function() step(xt) end,
    r18_train224 = function() step(xt2) end,
    r50_bf16t = infer(r50h, x1:to(flow.bfloat16)),
    r50_bf16 = function()
      flow.no_grad(function()
        return flow.amp.autocast('cpu', {dtype = flow.bfloat16}, function() return r50(x1) end)
      end)
    end,
  }
end

local backends = {'ref', 'auto'}
-- METRIC=cpu: the process's CPU time (both sides: os.clock here,
-- time.process_time in PyTorch's) instead of wall time, for a loaded machine
local cpu_metric = os.getenv('METRIC') == 'cpu'
local function clock() return cpu_metric and os.clock() or now() end
-- As the PyTorch side below: two warm-up calls, then the median of three
-- (until 2026-12-07 one call a round, right after the other backend's call
-- of the same case: ResNet-50 b1 took 32 ms that way, 26 ms in a loop).
local function time_ours(fn, backend)
  ffi.C.setenv('OF_CONV_BACKEND', backend, 1)
  fn()
  fn()
  flow.collect()
  local ts = {}
  for i = 1, 3 do
    local t0 = clock()
    fn()
    ts[i] = (clock() - t0) * 1000
    flow.collect()
  end
  return median(ts)
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
xt2 = torch.randn(16, 3, 224, 224)
def infer(net, x):
    def f():
        with torch.no_grad(): net(x)
    return f
def train(x):
    def f():
        loss = F.cross_entropy(r18(x), yt); opt.zero_grad(); loss.backward(); opt.step()
    return f
def bf16():
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16): r50(x1)
cases = {'r50_b1': infer(r50, x1), 'r50_b8': infer(r50, x8), 'r18_train': train(xt),
         'r18_train224': train(xt2),
         'mb2_b8': infer(mb2, x8), 'r50_bf16': bf16,
         'r50_bf16t': infer(r50h, x1.to(torch.bfloat16))}
print('version', torch.__version__, flush=True)
clk = time.process_time if len(sys.argv) > 2 and sys.argv[2] == 'cpu' else time.perf_counter
for k, f in cases.items():
    # two warm-up calls, then the median of three: a second call can still
    # pay first-use costs (oneDNN primitives, glibc's growing mmap threshold),
    # while ours are timed in a process warmed by every earlier round
    f(); f()
    ts = []
    for _ in range(3):
        t0 = clk(); f(); ts.append((clk() - t0) * 1000)
    print(k, sorted(ts)[1], flush=True)
]]

local script_path = os.tmpname()
do
  local f = assert(io.open(script_path, 'w'))
  f:write(torch_script)
  f:close()
end

local function sh_ok(cmd) return os.execute(cmd) == 0 end

-- PyTorch 2.x and torchvision from PyPI in bench/.venv (bench/torch_venv.sh,
-- shared with bench/kernels.lua; made once); nil + why if not.
local function torch2_python()
  local p = io.popen('sh bench/torch_venv.sh 2>&1')
  local out = p and p:read('*a') or ''
  if p then p:close() end
  local py = out:match('(%S+/bin/python3)%s*$')
  if py then return py end
  return nil, (out:gsub('%s+$', ''):match('[^\n]*$'))
end

-- a command's output lines `key value` as a table (numbers converted)
local function run_kv(cmd)
  local p = io.popen(cmd)
  local out = p and p:read('*a') or ''
  if p then p:close() end
  local r = {}
  for k, v in out:gmatch('(%S+)[ \t]+(%S+)') do r[k] = tonumber(v) or v end
  return r
end

local function run_torch(py)
  return run_kv(('%s %s %d %s 2>/dev/null'):format(py, script_path, threads,
                                                  os.getenv('METRIC') == 'cpu' and 'cpu' or 'wall'))
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

------------------------------------------------------------------ peak memory (--memory)
-- rows: training steps (batch 32, 3x112x112) and eval inference (5 no_grad
-- forwards, 3x224x224); each side in a fresh process
local MEM_MODELS = {
  {key = 'resnet18', name = 'ResNet-18', mode = 'train', batch = 32, size = 112},
  {key = 'resnet50', name = 'ResNet-50', mode = 'train', batch = 32, size = 112},
  {key = 'resnet50', name = 'ResNet-50, batch 1', mode = 'infer', batch = 1, size = 224},
  {key = 'resnet50', name = 'ResNet-50, batch 8', mode = 'infer', batch = 8, size = 224},
  {key = 'mobilenet_v2', name = 'MobileNetV2, batch 8', mode = 'infer', batch = 8, size = 224},
}
-- both sides: kB of VmRSS just before the model is made and of VmHWM (the
-- process's peak RSS) at the end
local ours_mem = [[
local flow = require 'oneflow'
local vision = require 'flowvision'
local name, threads, batch, size, mode = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]), arg[5]
flow.set_num_threads(threads)
local function status(k)
  local f = assert(io.open('/proc/self/status'))
  local s = f:read('*a')
  f:close()
  return tonumber(s:match(k .. ':%s*(%d+)'))
end
flow.manual_seed(0)
flow.collect()
local base_rss, base_bytes = status('VmRSS'), flow.memory_stats().current_bytes
flow.reset_peak_memory_stats()
if mode == 'train' then
  local net = vision.models[name]({num_classes = 10}):train()
  local opt = flow.optim.SGD(net:parameters(), {lr = 0.01, momentum = 0.9})
  local x, y = flow.randn(batch, 3, size, size), flow.randint(1, 11, {batch})
  for _ = 1, 2 do
    local loss = flow.nn.functional.cross_entropy(net(x), y)
    opt:zero_grad()
    loss:backward()
    opt:step()
  end
else
  local net = vision.models[name]():eval()
  local x = flow.randn(batch, 3, size, size)
  base_rss, base_bytes = status('VmRSS'), flow.memory_stats().current_bytes
  flow.reset_peak_memory_stats()
  for _ = 1, 5 do flow.no_grad(function() return net(x) end) end
end
print('alloc', (flow.memory_stats().peak_bytes - base_bytes) / 2 ^ 20)
print('rss', (status('VmHWM') - base_rss) / 1024)
]]
local torch_mem = [[
import sys, re
import torch, torch.nn.functional as F, torchvision
name, threads, batch, size, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
torch.set_num_threads(threads)
def status(k):
    return int(re.search(k + r':\s*(\d+)', open('/proc/self/status').read()).group(1))
torch.manual_seed(0)
base = status('VmRSS')
if mode == 'train':
    net = getattr(torchvision.models, name)(num_classes=10).train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,))
    for _ in range(2):
        loss = F.cross_entropy(net(x), y); opt.zero_grad(); loss.backward(); opt.step()
else:
    net = getattr(torchvision.models, name)().eval()
    x = torch.randn(batch, 3, size, size)
    base = status('VmRSS')
    with torch.no_grad():
        for _ in range(5): net(x)
print('rss', (status('VmHWM') - base) / 1024)
print('version', torch.__version__)
]]

local function write_tmp(text, suffix)
  local path = os.tmpname() .. suffix
  local f = assert(io.open(path, 'w'))
  f:write(text)
  f:close()
  return path
end

-- rewrite the doc's text between two markers (appended, with a title, when missing)
local function write_between(text, open_m, close_m, title)
  local path = 'doc/benchmarks.md'
  local f = io.open(path, 'r')
  local doc = f and f:read('*a') or '# Benchmarks\n'
  if f then f:close() end
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

if memory then
  local lua_path, py_path = write_tmp(ours_mem, '.lua'), write_tmp(torch_mem, '.py')
  local load0 = loadavg()
  local rows = {}
  -- the median of MEM_REPS fresh processes a side (3 for inference, 1 for
  -- training), the sides in turn: one process's RSS delta varies by up to a
  -- third (PyTorch 1.13's ResNet-50 at batch 1: 30.7-43.1 MiB in six runs)
  local function median_of(list, key)
    local v = {}
    for _, r in ipairs(list) do if type(r[key]) == 'number' then v[#v + 1] = r[key] end end
    if #v == 0 then return nil end
    return median(v), math.min(unpack(v)), math.max(unpack(v))
  end
  local function summary(list)
    local out = {version = list[1] and list[1].version}
    out.alloc = median_of(list, 'alloc')
    out.rss, out.rss_lo, out.rss_hi = median_of(list, 'rss')
    out.n = #list
    return out
  end
  for _, m in ipairs(MEM_MODELS) do
    local args = ('%s %d %d %d %s'):format(m.key, threads, m.batch, m.size, m.mode)
    local reps = tonumber(os.getenv('MEM_REPS') or '') or (m.mode == 'infer' and 3 or 1)
    local ours, torch = {}, {}
    for k = 1, reps do
      ours[k] = run_kv(('luajit %s %s 2>/dev/null'):format(lua_path, args))
      for i, p in ipairs(pythons) do
        torch[i] = torch[i] or {}
        torch[i][k] = run_kv(('%s %s %s 2>/dev/null'):format(p.py, py_path, args))
      end
    end
    local r = {ours = summary(ours), torch = {}}
    for i, p in ipairs(pythons) do
      r.torch[i] = summary(torch[i])
      p.version = p.version or r.torch[i].version
    end
    rows[#rows + 1] = r
    io.stderr:write(('models.lua: memory %s (%s) done\n'):format(m.name, m.mode))
  end
  os.remove(lua_path)
  os.remove(py_path)
  local lines = {('%s; %d thread(s) on every side; load average %s before, %s after; %s; '
    .. '`luajit bench/models.lua %d --memory`.'):format(cpu_name(), threads, load0, loadavg(),
    os.date('!%Y-%m-%d %H:%M UTC'), threads)}
  for _, mode in ipairs({'train', 'infer'}) do
    local head = mode == 'train' and '| Training step, batch 32, 3x112x112 |'
                 or '| Inference, 5 no_grad forwards, 3x224x224 |'
    head = head .. ' ours: allocator peak MiB | ours: peak RSS delta MiB |'
    local rule = '|---|---|---|'
    for _, p in ipairs(pythons) do
      head = head .. (' %s %s: peak RSS delta MiB |'):format(p.label, p.version or '?')
      rule = rule .. '---|'
    end
    lines[#lines + 1] = ''
    lines[#lines + 1] = head .. ' ours RSS / smaller PyTorch RSS |'
    lines[#lines + 1] = rule .. '---|'
    for i, m in ipairs(MEM_MODELS) do
      if m.mode == mode then
        local r = rows[i]
        -- a median of several processes shows their range
        local function rss(t)
          if type(t.rss) ~= 'number' then return fmt(nil) end
          if t.n > 1 then return ('%s (%s-%s)'):format(fmt(t.rss), fmt(t.rss_lo), fmt(t.rss_hi)) end
          return fmt(t.rss)
        end
        local row = ('| %s | %s | %s |'):format(m.name, fmt(r.ours.alloc), rss(r.ours))
        local best
        for k = 1, #pythons do
          local v = r.torch[k].rss
          row = row .. (' %s |'):format(rss(r.torch[k]))
          if type(v) == 'number' and (not best or v < best) then best = v end
        end
        lines[#lines + 1] = row .. (' %s |'):format(ratio(r.ours.rss, best))
      end
    end
  end
  lines[#lines + 1] = ''
  lines[#lines + 1] = 'Each figure from a fresh process (inference: the median of three, their range '
    .. 'in brackets, the sides in turn; the ratio divides medians); RSS delta: VmHWM (peak resident set) less '
    .. 'VmRSS just before the model was made (PyTorch: after `import torch, torchvision`), for '
    .. 'training two steps, so it counts parameters, grads, momentum, activations and whatever the '
    .. 'allocators keep cached, plus code pages first touched by the steps; for inference VmRSS '
    .. 'after the model and its input were made, so it counts activations, caches (ours: the '
    .. 'oneDNN weights kept in its layouts), library work buffers and code pages first touched.'
  if torch2_note then lines[#lines + 1] = torch2_note .. '.' end
  local text = table.concat(lines, '\n')
  print(text)
  if write_doc then
    write_between(text, '<!-- bench/models.lua memory table -->',
                  '<!-- end of the bench/models.lua memory table -->', '## Peak memory of training steps')
  end
  os.remove(script_path)
  os.exit(0)
end

------------------------------------------------------------------ rounds
local load_before = loadavg()
local fns = build_ours()
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
      local v = res[c.torch or c.key]
      if type(v) == 'number' then
        theirs[i][c.key] = theirs[i][c.key] or {}
        table.insert(theirs[i][c.key], v)
      end
    end
  end
  io.stderr:write(('models.lua: round %d/%d done\n'):format(r, rounds))
end
os.remove(script_path)
local load_after = loadavg()

------------------------------------------------------------------ report
local function med(t) return t and #t > 0 and median(t) or nil end
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
    .. '%s; %s`luajit bench/models.lua %d --rounds %d`.'):format(cpu_name(), threads, rounds,
    load_before, load_after, os.date('!%Y-%m-%d %H:%M UTC'),
    cpu_metric and 'process CPU time (both sides), `METRIC=cpu ' or '', threads, rounds),
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
  write_between(text, '<!-- bench/models.lua table -->', '<!-- end of the bench/models.lua table -->',
                '## Models: oneDNN convolutions')
end
