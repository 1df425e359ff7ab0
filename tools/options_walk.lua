-- tools/options_walk.lua: walks the public API and feeds every function an
-- options table with a key it cannot know, to find the functions that take
-- an options table and ignore an unknown key (issue 20: "every function that
-- takes an options table rejects an unknown key").
--
--   luajit tools/options_walk.lua            -- the report, one line a function
--   luajit tools/options_walk.lua --summary  -- only the counts and the problems
--
-- It ran with -joff for a while: about 1 run in 10 crashed in LuaJIT's GC.
-- The cause was ours: probing flow.from_handle with a Lua tensor (a struct
-- cdata) cast the Lua object's own address to of_tensor*, and the retain /
-- release wrote into LuaJIT's heap (from_handle and from_blob refuse structs
-- now; 0 crashes in 120 runs, JIT on and off).
--
-- Run it in a scratch directory: it calls hundreds of functions with made-up
-- arguments (side-effecting names are skipped, see SKIP), and one may leave a
-- file behind. spec/core/options_walk_spec.lua runs it that way.
--
-- How: for each public function (the roots of spec/docs/api_help_spec.lua
-- plus flowvision.transforms and its functional module) it tries argument
-- lists from TEMPLATES (small tensors, numbers, a module, an optimizer, ...),
-- each followed by a probe table {zzprobe = 1} whose metatable records every
-- key the function looks up in it. The first argument list that makes the
-- function reject zzprobe or look up a key decides:
--   strict   the call raised "unknown option 'zzprobe'": then a second call
--            misspells one of the keys the function looked up (a known
--            option) and the error must name the misspelling and suggest a
--            key ("(did you mean 'keepdim'?)"), at the caller's line
--   lax      the call looked up option keys in the table, ignored zzprobe
--            and returned: the bug this walk looks for
--   ignored  no list did either, and some call returned without looking at
--            the table (the function takes no options; the extra argument
--            is Lua's to drop)
--   unprobed every argument list failed for other reasons
-- Besides, a function for which some argument list raised one of Lua's own
-- errors inside lua/oneflow or lua/flowvision ("attempt to index local 'x'
-- (a number value)", "bad argument #2 to 'of_clamp'") -- a wrong-typed
-- argument that no check caught -- gets an extra line `internal <name> <error>`.
-- Each line: `<class> <name> [detail]`; the last line counts them.
-- run from the checkout as a script: its lua/ first (not when required: the
-- caller's path stays as it is, or flowvision would load from a second path)
if (...) ~= 'tools.options_walk' then package.path = './lua/?.lua;./lua/?/init.lua;' .. package.path end
local flow = require 'oneflow'
local T = require 'oneflow.tensor'
local nn, F, optim = flow.nn, flow.nn.functional, flow.optim

local SUMMARY = (...) == '--summary'
local TRACE = os.getenv('OPTIONS_WALK_TRACE') == '1'

local function roots()
  local r = {
    {'flow', flow}, {'flow.nn', nn}, {'F', F},
    {'flow.optim', optim}, {'flow.optim.lr_scheduler', optim.lr_scheduler},
    {'flow.utils.data', flow.utils.data}, {'flow.utils.tensorboard', flow.utils.tensorboard},
    {'flow.profiler', flow.profiler}, {'Tensor', T.methods},
    {'flow.utils.plot', flow.utils.plot}, {'flow.utils', {summary = flow.utils.summary}},
    {'flow.linalg', flow.linalg}, {'flow.special', flow.special}, {'flow.onnx', flow.onnx},
    {'flow.amp', flow.amp}, {'flow.autograd', flow.autograd}, {'flow.quantization', flow.quantization},
    {'flow.distributions', flow.distributions}, {'flow.nn.init', nn.init}, {'flow.nn.utils', nn.utils},
  }
  local ok, TR = pcall(require, 'flowvision.transforms')
  if ok then r[#r + 1] = {'flowvision.transforms', TR} end
  local ok2, TF = pcall(require, 'flowvision.transforms.functional')
  if ok2 then r[#r + 1] = {'flowvision.transforms.functional', TF} end
  return r
end

-- Names not called: they write files, start processes or servers, wait for
-- other ranks, change process-wide settings, or run user code for a long time.
local SKIP = {
  ['flow.save'] = true, ['flow.save_torch'] = true, ['flow.onnx.export'] = true,
  ['flow.cuda'] = true, ['flow.distributed'] = true,
  ['flow.utils.tensorboard.SummaryWriter'] = true,
  -- takes the parsed arguments of a loss (size_average, reduce, reduction), not options
  ['F.legacy_reduction'] = true,
  -- puts the quantized names on oneflow's table (once, when oneflow loads)
  ['flow.quantization.attach'] = true,
}
local SKIP_PATTERNS = {
  '^flow%.set_', '^flow%.manual_seed', '^flow%.seed', '^flow%.use_', '%.set_default',
  'init_process_group', '^flow%.load', 'set_num_threads', 'set_printoptions',
  '^flow%.enable_', '^flow%.disable_', '^flow%.autograd%.set_', 'set_detect_anomaly',
  'save', 'export', 'render', 'write', 'spawn', 'launch',
}
for n in (os.getenv('OPTIONS_WALK_SKIP') or ''):gmatch('%S+') do SKIP[n] = true end
local ONLY = os.getenv('OPTIONS_WALK_ONLY')
local function skipped(name)
  if ONLY and name ~= ONLY then return true end
  if SKIP[name] then return true end
  for _, p in ipairs(SKIP_PATTERNS) do if name:find(p) then return true end end
  return false
end

-- The argument lists tried, in order, before the probe table. Built fresh
-- for every call (a call may modify its arguments).
local function templates()
  local x = flow.ones(2, 3)
  local x4 = flow.ones(1, 2, 4, 4)
  local w4 = flow.ones(2, 2, 3, 3)
  local ids = flow.tensor({1, 2}, {dtype = flow.int64})
  local p = {flow.ones(2, {requires_grad = true})}
  local function opt() return optim.SGD({flow.ones(2, {requires_grad = true})}, {lr = 0.1}) end
  local xr = flow.ones(2, {dtype = flow.float64, requires_grad = true})
  local fn = function(a) return a * 2 end
  local sq = flow.tensor({{2, 1}, {1, 3}}, {dtype = flow.float64})
  local D, img = flow.distributions, flow.rand(3, 8, 8)
  return {
    {}, {x}, {x, x}, {x, 1}, {x, 2}, {x, ids}, {x, {3}}, {x, x, x}, {x, 1, 2},
    {x4}, {x4, w4}, {x4, 2}, {x4, 2, 2}, {x4, {2, 2}}, {x4, 1},
    {x:sigmoid(), x:sigmoid()}, {ids}, {ids, x},
    {2}, {3}, {3, 2}, {2, 2, 3}, {2, 3, 3}, {4, 2}, {0, 1}, {0, 3, 1}, {{2, 3}}, {{2}, 1},
    {p}, {p, 0.1}, {opt()}, {opt(), 2}, {opt(), 0.9}, {opt(), {2}}, {opt(), 10},
    {nn.Linear(3, 2)}, {nn.Linear(3, 2), {1, 3}}, {nn.Linear(3, 2), 'weight'},
    {fn}, {fn, {xr}}, {xr:sum(), xr}, {{1, 2}}, {{0.5}, {0.5}}, {flow.ones(3, 8, 8)},
    {flow.ones(3, 8, 8), 4}, {flow.ones(3, 8, 8), 10}, {flow.ones(3, 8, 8), 1},
    {flow.utils.data.TensorDataset(x)}, {flow.tensor({0.5, 0.5})},
    -- matrices, integer and boolean operands, index + source, mask + value
    {sq}, {sq, sq}, {sq, sq, sq}, {sq, flow.ones(2, {dtype = flow.float64})}, {ids, ids},
    {x, 1, ids, flow.ones(2, 3)}, {x, 1, ids, 0.5}, {x, x:gt(0), 0.5}, {x, x:gt(0), x},
    {x, 1, ids:view(2, 1):expand(2, 3):contiguous(), x}, {ids, 3}, {x, 1, 1, 1},
    {flow.tensor({0.3, 0.7})}, {x, 1, {2, 1}},
    -- the shapes, strings and objects of the functions the lists above
    -- missed (the "unprobed" of the first walks): batched and transposed
    -- matrices, names, datasets, distributions, modules, images
    {x:view(1, 2, 3), x:view(1, 3, 2)}, {x, x:t(), 1}, {x, {3, 2}}, {x, {1, 1}}, {x, ids, flow.ones(2)},
    {'ij,jk->ik', x, x:t()}, {function() return 1 end}, {'cpu'}, {'float32'}, {'relu'}, {'x86'}, {'abc'},
    {flow.float64}, {'cpu', {0}}, {-1, 1, 0, 255}, {x, 0.1, 0, 0, 255}, {x, 0.1, 0, flow.quint8},
    {flow.quantize_per_tensor(x, 0.1, 0, flow.quint8)},
    {{flow.utils.data.TensorDataset(x), flow.utils.data.TensorDataset(x)}},
    {nn.Linear(3, 2), nn.ReLU()}, {nn.TransformerEncoderLayer(4, 2), 2},
    {nn.utils.weight_norm(nn.Linear(3, 2))}, {nn.Conv2d(2, 2, 3):eval(), nn.BatchNorm2d(2):eval()},
    {D.Normal(0, 1), D.Normal(0, 1)}, {D.Normal(flow.zeros(2), flow.ones(2)), 1},
    {D.Normal(0, 1), {D.transforms.ExpTransform()}},
    {img, 1, 1, 4, 4}, {img, 1, 1, 2, 2, 0}, {img, {3, 3}}, {img, 0.1}, {img, 'CHW'},
    {img, 10, {0, 0}, 1, {0, 0}},
    -- a complex tensor (view_as_real, imag) and a C host's handle (from_handle)
    {flow.complex(x, x)}, {flow.to_handle(x)},
    -- per-channel scales and zero points, BatchNorm statistics to fold, a
    -- module with an empty qconfig_dict (quantization's positional forms)
    {x, flow.ones(2), flow.zeros(2), 1, 0, 255},
    {w4, flow.ones(2), flow.zeros(2), flow.ones(2), 1e-5, flow.ones(2), flow.zeros(2)},
    {x, flow.ones(2), flow.zeros(2), flow.ones(2), 1e-5, flow.ones(2), flow.zeros(2)},
    {nn.Linear(3, 2), {}},
  }
end
local function method_templates()
  local ids = flow.tensor({1, 2}, {dtype = flow.int64})
  return {{}, {1}, {2}, {flow.ones(2, 3)}, {1, 2}, {{3, 2}}, {2, 1}, {0.5}, {'cpu'}, {flow.float64},
          {flow.ones(2, 3):gt(0), 0.5}, {flow.ones(2, 3):gt(0), flow.ones(2, 3)}, {1, ids, flow.ones(2, 3)},
          {1, ids, 0.5}, {1, ids:view(2, 1):expand(2, 3):contiguous(), flow.ones(2, 3)}, {1, 1, 1},
          {flow.ones(2, 3), 1}, {{1, 2}},
          {flow.ones(3, 2)}, {flow.tensor({1, 2}, {dtype = flow.int64})},
          -- a method of complex tensors (imag, view_as_real) on a complex self,
          -- view_as_complex on a float [*, 2]
          {self = flow.complex(flow.ones(2, 3), flow.ones(2, 3))}, {self = flow.ones(3, 2)},
          {1, flow.tensor({{1, 2}}, {dtype = flow.int64})}, {{2, 3}}, {{1, 2}, 2}, {flow.ones(3)}}
end

-- Lua's own errors from inside the package (a wrong-typed argument that no
-- check caught): 'attempt to index local ...', 'bad argument #1 to ...'
local INTERNAL = {'attempt to index', 'attempt to call', 'attempt to perform', 'attempt to compare',
                  'attempt to concatenate', 'attempt to get length', 'bad argument #', 'cannot convert', 'has no \'__',
                  "'for' initial value", "'for' limit", "'for' step"}
local function is_internal(err)
  if not err:find('/oneflow/', 1, true) and not err:find('/flowvision/', 1, true) then return false end
  for _, p in ipairs(INTERNAL) do if err:find(p, 1, true) then return true end end
  return false
end
local INTERNAL_LOG = {}

local PROBE = 'zzprobe'
local VALUE_READS = {p = true, totable = true, parameters = true}

-- A probe options table: {[key] = 1} whose lookups of absent keys are recorded.
local function probe(key, reads)
  return setmetatable({[key] = 1}, {__index = function(_, k)
    if type(k) == 'string' then reads[k] = true end
    return nil
  end})
end

local function call(f, self, args, o)
  local a = {}
  if self ~= nil then a[1] = self end
  for i = 1, #args do a[#a + 1] = args[i] end
  a[#a + 1] = o
  -- a bounded call: a function that loops in Lua is stopped (random
  -- arguments can make a sampler loop for minutes). The count hook fires
  -- only in interpreted code: a loop the JIT compiled runs on until the
  -- spec's timeout, which names the function being probed (that is how the
  -- endless-iterator loops of Optimizer and parameters_to_vector showed up)
  local n = #a
  if TRACE then
    local d = {}
    for i = 1, n do d[i] = type(a[i]) == 'cdata' and 'tensor' or type(a[i]) end
    io.stderr:write('  (', table.concat(d, ', '), ')\n')
  end
  debug.sethook(function() error('options_walk: too long', 2) end, '', 5e7)
  local ok, err = pcall(f, unpack(a, 1, n))
  debug.sethook()
  if ok then return true, nil end
  return false, tostring(err)
end

local function unknown_msg(err, key) return err:find("unknown option '" .. key .. "'", 1, true) ~= nil end

-- A misspelling of key, one edit away (the one of spec/core/options_spec.lua).
local function misspell(key)
  local d = key:gsub('(%a)%1', '%1', 1)
  if d ~= key then return d end
  if key:sub(-1) ~= 's' then return key .. 's' end
  return key:sub(1, -2)
end

-- Classifies one public function; returns class, detail.
local function walk_one(f, is_method)
  local tries = is_method and method_templates() or templates()
  local last_err, any_ok
  for _, args in ipairs(tries) do
    local self = is_method and (args.self or flow.ones(2, 3)) or nil
    local reads = {}
    local ok, err = call(f, self, args, probe(PROBE, reads))
    if not ok and unknown_msg(err, PROBE) then
      -- at the caller's line: this file's (or the spec's, for its own functions)
      if not err:find('options_walk', 1, true) then
        return 'strict-elsewhere', err
      end
      -- a known key: one it looked up (the longest, for a clear misspelling)
      local known
      for k in pairs(reads) do
        if #k >= 4 and (not known or #k > #known or (#k == #known and k < known)) then known = k end
      end
      if not known then return 'strict', 'no known key seen' end
      local bad = misspell(known)
      self = is_method and (args.self or flow.ones(2, 3)) or nil
      local ok2, err2 = call(f, self, args, probe(bad, {}))
      if ok2 or not unknown_msg(err2, bad) then
        return 'nosuggest', ('misspelt %s: %s'):format(bad, ok2 and 'accepted' or err2)
      end
      if not err2:find("(did you mean '", 1, true) then
        return 'nosuggest', ('misspelt %s: %s'):format(bad, err2)
      end
      return 'strict', known
    elseif ok then
      -- lookups a value check makes (x.p, sizes.totable, m.parameters) are
      -- not options
      for k in pairs(VALUE_READS) do reads[k] = nil end
      if next(reads) then
        local ks = {}
        for k in pairs(reads) do ks[#ks + 1] = k end
        table.sort(ks)
        return 'lax', 'looked up ' .. table.concat(ks, ',') .. ' and ignored ' .. PROBE
      end
      -- no lookups: confirm with a plain table (a metatable may have made
      -- the function take the probe for a value)
      self = is_method and (args.self or flow.ones(2, 3)) or nil
      local ok2, err2 = call(f, self, args, {[PROBE] = 1})
      if not ok2 and unknown_msg(err2, PROBE) then return 'strict', 'plain table only' end
      -- the probe may have landed where no options go (f(probe) for
      -- f(x, opts)): the other argument lists may still reach the options
      any_ok = true
    else
      last_err = err
      if is_internal(err) then INTERNAL_LOG[#INTERNAL_LOG + 1] = err end
    end
  end
  if any_ok then return 'ignored', '' end
  return 'unprobed', (last_err or ''):gsub('\n.*', '')
end

--- The walk: a list of {name, class, detail} in root order, and the counts
-- by class.
local function run()
  local results, counts, seen = {}, {}, {}
  for _, r in ipairs(roots()) do
    local keys = {}
    for k in pairs(r[2]) do
      if type(k) == 'string' and not k:match('^_') then keys[#keys + 1] = k end
    end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local v = r[2][k]
      local name = r[1] .. '.' .. k
      local f
      if type(v) == 'function' and debug.getinfo(v, 'S').what ~= 'C' then f = v
      elseif type(v) == 'table' and type(v.__init) == 'function' then f = v end
      if f and not seen[f] and not skipped(name) then
        seen[f] = true
        if TRACE then io.stderr:write(name, '\n') end
        INTERNAL_LOG = {}
        local cls, detail = walk_one(f, r[1] == 'Tensor')
        counts[cls] = (counts[cls] or 0) + 1
        results[#results + 1] = {name, cls, detail}
        if #INTERNAL_LOG > 0 then
          counts.internal = (counts.internal or 0) + 1
          results[#results + 1] = {name, 'internal', (INTERNAL_LOG[1]:gsub('\n.*', ''))}
        end
        -- tidy up between calls: no grad mode left off by a call
        if not flow.is_grad_enabled() then flow.set_grad_enabled(true) end
      end
    end
  end
  return results, counts
end

-- required as a module (the spec classifies functions of its own with it)
if (...) == 'tools.options_walk' then return {classify = walk_one, run = run} end

local results, counts = run()
for _, e in ipairs(results) do
  if not SUMMARY or e[2] == 'lax' or e[2] == 'nosuggest' or e[2] == 'strict-elsewhere' then
    print(('%s %s %s'):format(e[2], e[1], e[3]))
  end
end
local n = 0
for _, e in ipairs(results) do if e[2] ~= 'internal' then n = n + 1 end end
print(('options walk: %d functions, %d strict, %d lax, %d nosuggest, %d strict-elsewhere, %d ignored, %d unprobed;'
       .. ' %d raised a Lua error from inside the package')
  :format(n, counts.strict or 0, counts.lax or 0, counts.nosuggest or 0, counts['strict-elsewhere'] or 0,
          counts.ignored or 0, counts.unprobed or 0, counts.internal or 0))
