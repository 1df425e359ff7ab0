-- oneflow.profiler: per-op CPU time and allocator bytes, like torch.profiler.
--
--   local prof = flow.profiler.profile({record_shapes = true}, function()
--     for _ = 1, 10 do net(x):sum():backward() end
--   end)
--   print(prof:key_averages():table({sort_by = 'cpu_time_total', row_limit = 10}))
--   prof:export_chrome_trace('trace.json')        -- chrome://tracing, ui.perfetto.dev
--
--   local p = flow.profiler.profile({profile_memory = true})  -- no function:
--   p:start(); train_step(); p:stop()                          -- start/stop by hand
--   flow.profiler.record_function('data', function() ... end)  -- a named range
--
-- The events come from the C dispatcher (core/dispatch/profile.c): every
-- public op the calling thread runs -- also ops inside ops, the ops of
-- backward rules and of nn.Graph runs on this thread -- with its nesting
-- depth, start and end, the bytes the CPU allocator served while it ran and
-- the change of bytes held by live tensors, and with record_shapes the
-- shapes of its first four inputs. Times are host times: a CUDA op's time is
-- its launch, not its kernel (synchronize inside the profiled function to
-- see it in the enclosing range). When the profiler is off an op pays
-- nothing more than before (it reads the same thread-local word).
--
-- An event's name is its op ("matmul", "reshape"), or op.kind for the
-- families that carry the operation in their record ("binary.add",
-- "unary.relu", "binary_scalar.mul"). Self time is the time not spent in
-- ops nested inside it.
local ffi = require 'ffi'
local core = require 'oneflow._C'
local A = require 'oneflow._args'
local class = require 'oneflow.class'
local json = require 'oneflow.utils.json'
local plot = require 'oneflow.utils.plot'

local C = core.C
local M = {}

local PROFILE_OPTS = {'record_shapes', 'profile_memory', 'with_backward'}
local TABLE_OPTS = {'sort_by', 'row_limit', 'header'}
local SORT_KEYS = {cpu_time_total = true, self_cpu_time_total = true, cpu_time_avg = true,
                   self_cpu_time_avg = true, count = true, cpu_memory_usage = true,
                   self_cpu_memory_usage = true, name = true}

-- the op names, by kind, read once from the schema
local op_names
local function op_name(op)
  if not op_names then
    op_names = {}
    local info = ffi.new('of_op_info')
    for k = 0, C.of_op_schema_count() - 1 do
      if C.of_op_schema(k, info) == 0 then op_names[k] = ffi.string(info.name) end
    end
  end
  return op_names[op] or ('op' .. tostring(op))
end

local desc_buf = ffi.new('char[256]')
local function event_name(e)
  local name = op_name(e.op)
  if e.attr_size > 0 and e.attr_size <= C.OF_PROF_ATTR_BYTES then
    C.of_op_describe(e.op, e.attrs, e.attr_size, desc_buf, 256)
    local d = ffi.string(desc_buf)
    -- a single word names the operation of a family op (binary: add);
    -- binary_scalar describes itself as "x add 1" or "2 sub x"
    local word = d:match('^([%a_][%w_]*)$') or d:match('^x ([%a_][%w_]*) ') or d:match(' ([%a_][%w_]*) x$')
    if word then name = name .. '.' .. word end
  end
  return name
end

local function shapes_of(e)
  local parts = {}
  for i = 0, C.OF_PROF_MAX_INPUTS - 1 do
    if i >= e.nin then break end
    local nd = e.in_ndim[i]
    if nd < 0 then parts[#parts + 1] = '[]'
    else
      local s = {}
      for k = 0, nd - 1 do s[k + 1] = tostring(tonumber(e.in_shape[i][k])) end
      parts[#parts + 1] = '[' .. table.concat(s, ', ') .. ']'
    end
  end
  return table.concat(parts, ', ')
end

------------------------------------------------------------------ profile
--- flow.profiler.Profile({record_shapes = false, profile_memory = false, ...}): a profiling session; :start(),
-- :stop(), :key_averages(), :export_chrome_trace(path).
-- @function profiler.Profile
M.Profile = class('Profile')
local Profile = M.Profile

function Profile:__init(opts)
  opts = A.check_options('profiler.profile', opts, PROFILE_OPTS)
  self.record_shapes = opts.record_shapes == true
  self.profile_memory = opts.profile_memory == true
  self.with_backward = opts.with_backward ~= false
  self.ranges = {}
  self.running = false
end

--- Starts recording on this thread.
function Profile:start()
  if self.running then A.fail('profiler: this profile is already running') end
  if C.of_profiler_start(self.record_shapes and C.OF_PROF_SHAPES or 0) ~= 0 then A.raise_c() end
  self.running = true
  M._current = self
  self.t_start = tonumber(C.of_profiler_now_ns())
  return self
end

--- Stops recording and reads the events.
function Profile:stop()
  if not self.running then A.fail('profiler: this profile is not running') end
  self.t_stop = tonumber(C.of_profiler_now_ns())
  C.of_profiler_stop()
  self.running = false
  if M._current == self then M._current = nil end
  local n = tonumber(C.of_profiler_num_events())
  local ev = C.of_profiler_events()
  local list = {}
  for i = 0, n - 1 do
    local e = ev[i]
    if self.with_backward or e.backward == 0 then
      list[#list + 1] = {
        name = event_name(e), op = op_name(e.op), depth = e.depth,
        start_ns = tonumber(e.start_ns), end_ns = tonumber(e.end_ns),
        bytes_allocated = tonumber(e.bytes_allocated), bytes_net = tonumber(e.bytes_net),
        backward = e.backward ~= 0, input_shapes = self.record_shapes and shapes_of(e) or nil,
      }
    end
  end
  -- user ranges (record_function) join the ops, one level above the ops they hold
  for _, r in ipairs(self.ranges) do list[#list + 1] = r end
  self.dropped = tonumber(C.of_profiler_dropped())
  table.sort(list, function(a, b)
    if a.start_ns ~= b.start_ns then return a.start_ns < b.start_ns end
    return a.end_ns > b.end_ns   -- the enclosing one first
  end)
  -- self time and self bytes: minus the direct children (events nested inside)
  local stack = {}
  for _, e in ipairs(list) do
    e.self_ns = e.end_ns - e.start_ns
    e.self_bytes = e.bytes_allocated or 0
    while #stack > 0 and stack[#stack].end_ns <= e.start_ns do stack[#stack] = nil end
    local parent = stack[#stack]
    if parent and e.end_ns <= parent.end_ns then
      parent.self_ns = parent.self_ns - (e.end_ns - e.start_ns)
      parent.self_bytes = parent.self_bytes - (e.bytes_allocated or 0)
    end
    stack[#stack + 1] = e
  end
  -- a user range's bytes: those of the ops it holds (ops at depth 0 inside it)
  for _, r in ipairs(self.ranges) do
    for _, e in ipairs(list) do
      if not e.user and e.depth == 0 and e.start_ns >= r.start_ns and e.end_ns <= r.end_ns then
        r.bytes_allocated = r.bytes_allocated + e.bytes_allocated
        r.bytes_net = r.bytes_net + e.bytes_net
      end
    end
  end
  for _, e in ipairs(list) do
    if e.self_ns < 0 then e.self_ns = 0 end
    if e.self_bytes < 0 then e.self_bytes = 0 end
  end
  self._events = list
  return self
end

--- The events, in start order: {name, op, depth, start_ns, end_ns, self_ns,
-- bytes_allocated, bytes_net, self_bytes, backward, input_shapes}.
function Profile:events()
  if self.running then A.fail('profiler: stop the profile before reading its events') end
  return self._events or {}
end

------------------------------------------------------------------ key averages
local Averages = class('ProfilerAverages')
--- The per-op table of Profile:key_averages(): rows sorted by :sorted(key), printed by :table(opts).
-- @function profiler.Averages
M.Averages = Averages

function Averages:__init(rows, total_self_ns, prof)
  self.rows, self.total_self_ns, self.prof = rows, total_self_ns, prof
end

--- prof:key_averages({group_by_input_shape = false}) -> rows by name
function Profile:key_averages(opts)
  opts = A.check_options('profiler.key_averages', opts, {'group_by_input_shape'})
  local by_shape = opts.group_by_input_shape == true
  if by_shape and not self.record_shapes then
    A.fail('profiler.key_averages: group_by_input_shape needs profile({record_shapes = true})')
  end
  local groups, order, total_self = {}, {}, 0
  for _, e in ipairs(self:events()) do
    local key = by_shape and (e.name .. '|' .. (e.input_shapes or '')) or e.name
    local g = groups[key]
    if not g then
      g = {key = e.name, count = 0, cpu_time_total = 0, self_cpu_time_total = 0,
           cpu_memory_usage = 0, self_cpu_memory_usage = 0,
           input_shapes = by_shape and e.input_shapes or nil}
      groups[key] = g
      order[#order + 1] = g
    end
    local dur = (e.end_ns - e.start_ns) / 1e3
    g.count = g.count + 1
    g.cpu_time_total = g.cpu_time_total + dur
    g.self_cpu_time_total = g.self_cpu_time_total + e.self_ns / 1e3
    g.cpu_memory_usage = g.cpu_memory_usage + (e.bytes_allocated or 0)
    g.self_cpu_memory_usage = g.self_cpu_memory_usage + (e.self_bytes or 0)
    total_self = total_self + e.self_ns / 1e3
  end
  for _, g in ipairs(order) do
    g.cpu_time_avg = g.cpu_time_total / g.count
    g.self_cpu_time_avg = g.self_cpu_time_total / g.count
  end
  return Averages(order, total_self, self)
end

local function us_str(us)
  if us >= 1e6 then return ('%.3fs'):format(us / 1e6) end
  if us >= 1e3 then return ('%.3fms'):format(us / 1e3) end
  return ('%.3fus'):format(us)
end

local function bytes_str(b)
  if b >= 2 ^ 30 then return ('%.2f Gb'):format(b / 2 ^ 30) end
  if b >= 2 ^ 20 then return ('%.2f Mb'):format(b / 2 ^ 20) end
  if b >= 2 ^ 10 then return ('%.2f Kb'):format(b / 2 ^ 10) end
  return ('%d b'):format(b)
end

--- The rows sorted (descending) by opts.sort_by ('cpu_time_total' default).
function Averages:sorted(sort_by)
  sort_by = sort_by or 'cpu_time_total'
  if not SORT_KEYS[sort_by] then
    A.fail(("profiler: unknown sort_by '%s'%s"):format(tostring(sort_by),
      A.nearest(sort_by, SORT_KEYS) and (" (did you mean '" .. A.nearest(sort_by, SORT_KEYS) .. "'?)") or ''))
  end
  local rows = {}
  for i, r in ipairs(self.rows) do rows[i] = r end
  table.sort(rows, function(a, b)
    if sort_by == 'name' then return a.key < b.key end
    if a[sort_by] ~= b[sort_by] then return a[sort_by] > b[sort_by] end
    return a.key < b.key
  end)
  return rows
end

--- averages:table({sort_by =, row_limit = 100}) -> text like torch's.
function Averages:table(opts)
  opts = A.check_options('profiler.table', opts, TABLE_OPTS)
  local rows = self:sorted(opts.sort_by)
  local limit = opts.row_limit or 100
  local mem = self.prof.profile_memory
  local shapes = false
  for _, r in ipairs(rows) do if r.input_shapes then shapes = true end end
  local cols = {{'Name', 28, '-'}, {'Self CPU %', 10}, {'Self CPU', 11}, {'CPU total %', 11},
                {'CPU total', 11}, {'CPU time avg', 12}}
  if mem then cols[#cols + 1] = {'CPU Mem', 11}; cols[#cols + 1] = {'Self CPU Mem', 12} end
  cols[#cols + 1] = {'# of Calls', 10}
  if shapes then cols[#cols + 1] = {'Input Shapes', 30, '-'} end
  local fmts, heads, rule = {}, {}, {}
  for i, c in ipairs(cols) do
    fmts[i] = '%' .. (c[3] or '') .. c[2] .. 's'
    heads[i] = fmts[i]:format(c[1])
    rule[i] = string.rep('-', c[2])
  end
  local out = {}
  local sep = table.concat(rule, '  ')
  if opts.header then out[#out + 1] = opts.header end
  out[#out + 1] = sep
  out[#out + 1] = table.concat(heads, '  ')
  out[#out + 1] = sep
  local total = self.total_self_ns > 0 and self.total_self_ns or 1
  for k, r in ipairs(rows) do
    if k > limit then break end
    local name = #r.key > 28 and (r.key:sub(1, 25) .. '...') or r.key
    local vals = {name, ('%.2f%%'):format(100 * r.self_cpu_time_total / total), us_str(r.self_cpu_time_total),
                  ('%.2f%%'):format(100 * r.cpu_time_total / total), us_str(r.cpu_time_total), us_str(r.cpu_time_avg)}
    if mem then
      vals[#vals + 1] = bytes_str(r.cpu_memory_usage)
      vals[#vals + 1] = bytes_str(r.self_cpu_memory_usage)
    end
    vals[#vals + 1] = tostring(r.count)
    if shapes then vals[#vals + 1] = r.input_shapes or '' end
    local cells = {}
    for i, v in ipairs(vals) do cells[i] = fmts[i]:format(v) end
    out[#out + 1] = table.concat(cells, '  ')
  end
  out[#out + 1] = sep
  out[#out + 1] = 'Self CPU time total: ' .. us_str(self.total_self_ns)
  if (self.prof.dropped or 0) > 0 then
    out[#out + 1] = ('(%d events were dropped: out of memory)'):format(self.prof.dropped)
  end
  return table.concat(out, '\n')
end

------------------------------------------------------------------ chrome trace
--- Writes the events as Chrome trace JSON (chrome://tracing, ui.perfetto.dev):
-- complete events ('X') with ts/dur in microseconds on one thread track.
function Profile:export_chrome_trace(path)
  local evs = self:events()
  local base = self.t_start or (evs[1] and evs[1].start_ns) or 0
  local pid = tonumber(require('oneflow.utils.posix').C.getpid())
  local list = json.array({})
  for _, e in ipairs(evs) do
    local args = {depth = e.depth, op = e.op, bytes_allocated = e.bytes_allocated,
                  bytes_net = e.bytes_net, backward = e.backward}
    if e.input_shapes then args.input_shapes = e.input_shapes end
    list[#list + 1] = {name = e.name, cat = e.user and 'user_annotation' or 'cpu_op', ph = 'X',
                       ts = (e.start_ns - base) / 1e3, dur = (e.end_ns - e.start_ns) / 1e3,
                       pid = pid, tid = 1, args = args}
  end
  local doc = {traceEvents = list, displayTimeUnit = 'ms',
               otherData = {producer = 'oneflow-lua flow.profiler'}}
  plot.write_atomic(path, json.encode(doc), 'profiler.export_chrome_trace')
  return path
end

function Profile:__tostring()
  return ('profiler.Profile(%d events)'):format(#(self._events or {}))
end

------------------------------------------------------------------ API
--- profile([opts,] fn): runs fn under the profiler and returns the profile;
-- without fn, an unstarted profile (p:start() ... p:stop()).
function M.profile(opts, fn)
  if type(opts) == 'function' then opts, fn = nil, opts end
  local p = Profile(opts)
  if fn == nil then return p end
  if type(fn) ~= 'function' then A.fail('profiler.profile: expected a function, got ' .. A.describe(fn)) end
  p:start()
  local ok, err = pcall(fn)
  p:stop()
  if not ok then error(err, 0) end
  return p
end

local function pack(...) return {n = select('#', ...), ...} end

--- record_function(name, fn, ...): runs fn; while a profile runs, its time
-- is a named range holding the ops fn ran. Returns fn's results.
function M.record_function(name, fn, ...)
  if type(name) ~= 'string' then A.fail('profiler.record_function: name must be a string, got ' .. A.describe(name)) end
  if type(fn) ~= 'function' then A.fail('profiler.record_function: expected a function, got ' .. A.describe(fn)) end
  local p = M._current
  if not p then return fn(...) end
  local t0 = tonumber(C.of_profiler_now_ns())
  local r = pack(pcall(fn, ...))
  local t1 = tonumber(C.of_profiler_now_ns())
  local ok = r[1]
  p.ranges[#p.ranges + 1] = {name = name, op = 'user', depth = -1, start_ns = t0, end_ns = t1,
                             bytes_allocated = 0, bytes_net = 0, backward = false, user = true}
  if not ok then error(r[2], 0) end
  return unpack(r, 2, r.n)
end

--- Whether a profile is running on this thread.
function M.enabled() return C.of_profiler_enabled() ~= 0 end

return M
