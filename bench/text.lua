-- bench/text.lua -- sentence embeddings with all-MiniLM-L6-v2: flowtext's
-- SentenceTransformer:encode (WordPiece in Lua, BERT, mean pooling,
-- normalisation) against sentence-transformers' encode on PyTorch 1.13
-- (Debian, through spec/text/setup_sentence_transformers.sh's venv) and
-- PyTorch 2.x (bench/st2_venv.sh; skipped with a message when it cannot be
-- made, or with --no-torch2), at the same thread count, in one run:
--   * 32 short sentences (9 to 18 tokens), one batch;
--   * 8 long sentences truncated to 256 tokens, one batch.
-- The contenders alternate: each round times REPS calls of ours per case,
-- then runs one PyTorch process per version (a warm-up and REPS timed calls
-- per case); figures are medians over all timed calls, ratios are ours over
-- the faster PyTorch. Prints two markdown tables, wall time and process CPU
-- time (all threads: os.clock here, time.process_time there; under a
-- loaded machine the CPU time is the steadier figure), and the machine load.
-- --int8: both sides dynamically quantized first (quantize_dynamic of the
-- Linear layers to qint8, PyTorch's torch.ao.quantization.quantize_dynamic).
--
--   sh tools/minilm.sh && luajit bench/text.lua [threads] [--rounds N] [--reps N] [--no-torch2] [--int8]
local flow = require 'oneflow'
local json = require 'oneflow.utils.json'
local text = require 'flowtext'

local threads, rounds, reps, want_torch2, int8 = 2, 3, 3, true, false
do
  local argv, i = arg or {}, 1
  while i <= #argv do
    if argv[i] == '--rounds' then rounds = tonumber(argv[i + 1]); i = i + 1
    elseif argv[i] == '--reps' then reps = tonumber(argv[i + 1]); i = i + 1
    elseif argv[i] == '--no-torch2' then want_torch2 = false
    elseif argv[i] == '--int8' then int8 = true
    elseif tonumber(argv[i]) then threads = tonumber(argv[i])
    else error('text.lua: unknown argument ' .. argv[i]) end
    i = i + 1
  end
end
flow.set_num_threads(threads)

local B = dofile((debug.getinfo(1, 'S').source:match('^@(.-)[^/]*$') or '') .. 'common.lua')
local now, loadavg, median = B.now, B.loadavg, B.median

local function last_line(cmd)
  local p = io.popen(cmd)
  local out = p:read('*a')
  p:close()
  return out:match('([^\n]*)\n?$'), out
end

local dir = last_line('sh tools/minilm.sh 2>/dev/null')
assert(dir ~= '' and io.open(dir .. '/model.safetensors'), 'text.lua: no model (sh tools/minilm.sh failed)')
local py13 = last_line('sh spec/text/setup_sentence_transformers.sh 2>/dev/null')
local py2 = want_torch2 and last_line('sh bench/st2_venv.sh 2>/dev/null') or ''
local pythons = {}
if py13 ~= '' then pythons[#pythons + 1] = py13 else print('no PyTorch 1.13 sentence-transformers venv') end
if py2 ~= '' then pythons[#pythons + 1] = py2
elseif want_torch2 then print('no PyTorch 2.x column: bench/st2_venv.sh failed') end

------------------------------------------------------------------ cases
local short = B.short_sentences()
local long = {}
for i = 1, 8 do
  long[i] = ('Sentence %d: the quick brown fox jumps over the lazy dog near the riverbank. '):format(i):rep(25)
end
local cases = {{key = 'short32', name = '32 sentences, 9-18 tokens', list = short},
               {key = 'long8', name = '8 sentences, 256 tokens (truncated)', list = long}}

local cases_path = os.tmpname()
do
  local t = {}
  for _, c in ipairs(cases) do t[c.key] = json.array(c.list) end
  local f = assert(io.open(cases_path, 'wb'))
  f:write(json.encode(t))
  f:close()
end

------------------------------------------------------------------ rounds
local st = text.SentenceTransformer(dir)
if int8 then st = flow.quantization.quantize_dynamic(st, {flow.nn.Linear}, {dtype = flow.qint8}) end
for _, c in ipairs(cases) do st:encode(c.list, {batch_size = #c.list}) end   -- warm-up
local ours, theirs, versions = {}, {}, {}
local ours_cpu, theirs_cpu = {}, {}
local load_before = loadavg()
for r = 1, rounds do
  for _, c in ipairs(cases) do
    ours[c.key], ours_cpu[c.key] = ours[c.key] or {}, ours_cpu[c.key] or {}
    for _ = 1, reps do
      local t0, c0 = now(), os.clock()
      st:encode(c.list, {batch_size = #c.list})
      ours[c.key][#ours[c.key] + 1] = (now() - t0) * 1000
      ours_cpu[c.key][#ours_cpu[c.key] + 1] = (os.clock() - c0) * 1000
      flow.collect()
    end
  end
  for i, py in ipairs(pythons) do
    local line, all = last_line(('%s bench/text_torch.py %s %s %d %d%s 2>&1'):format(
    py, dir, cases_path, threads, reps, int8 and ' int8' or ''))
    local ok, res = pcall(json.decode, line)
    if not ok then error('text.lua: ' .. py .. ' failed:\n' .. all) end
    versions[i] = res.torch
    theirs[i], theirs_cpu[i] = theirs[i] or {}, theirs_cpu[i] or {}
    for _, c in ipairs(cases) do
      theirs[i][c.key] = theirs[i][c.key] or {}
      theirs_cpu[i][c.key] = theirs_cpu[i][c.key] or {}
      for _, t in ipairs(res[c.key]) do table.insert(theirs[i][c.key], t) end
      for _, t in ipairs(res[c.key .. '_cpu'] or {}) do table.insert(theirs_cpu[i][c.key], t) end
    end
  end
  io.stderr:write(('round %d/%d done\n'):format(r, rounds))
end
os.remove(cases_path)

------------------------------------------------------------------ tables
local function report(title, mine, other)
  print(title)
  print()
  local head = {'| case | flowtext ms |'}
  local rule = {'| --- | --- |'}
  for i = 1, #pythons do
    head[#head + 1] = (' PyTorch %s ms |'):format(versions[i])
    rule[#rule + 1] = ' --- |'
  end
  head[#head + 1] = ' ratio (ours / faster PyTorch) |'
  rule[#rule + 1] = ' --- |'
  print(table.concat(head))
  print(table.concat(rule))
  for _, c in ipairs(cases) do
    local m = median(mine[c.key])
    local row, best = {('| %s | %.1f |'):format(c.name, m)}, math.huge
    for i = 1, #pythons do
      local t = median(other[i][c.key])
      best = math.min(best, t)
      row[#row + 1] = (' %.1f |'):format(t)
    end
    row[#row + 1] = best < math.huge and (' %.2fx |'):format(m / best) or ' n/a |'
    print(table.concat(row))
  end
  print()
end
report('wall time per encode call (median)', ours, theirs)
report('process CPU time per encode call, all threads (median)', ours_cpu, theirs_cpu)
print(('%sthreads %d, %d rounds x %d calls; load average before %s, after %s'):format(
  int8 and 'int8 (quantize_dynamic of the Linear layers); ' or '', threads, rounds, reps, load_before, loadavg()))
