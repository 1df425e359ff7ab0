-- oneflow.distributed.cost_model: the machine figures auto-parallel plans
-- with (doc/distributed.md, "Auto-parallel"), measured once per machine and
-- rank count and kept in a cache file.
--
-- Figures (seconds; "bytes" are bytes of the logical tensor):
--   flops        float multiply-adds x 2 per second of one rank (a matmul,
--                measured while every rank of the placement runs one)
--   bytes        bytes per second an elementwise pass streams on one rank
--   box[kind]    {a = latency, b = seconds per byte} of each boxing the
--                runtime does on the placement: 'S->B' (all-gather), 'P->B'
--                (all-reduce), 'P->S' (reduce-scatter), 'S->S' (all-to-all)
--
-- Every rank must plan alike: the first rank of the placement measures (or
-- reads the cache) and broadcasts its figures to the world.
local T = require 'oneflow.tensor'
local PL = require 'oneflow.distributed.placement'
local B = require 'oneflow.distributed.boxing'
local comm = require 'oneflow.distributed.comm'
local autograd = require 'oneflow.autograd'
local ffi = require 'ffi'
local C = require('oneflow._C').C

local M = {}

M.KINDS = {'S->B', 'P->B', 'P->S', 'S->S'}
M.measured = 0   -- how many times this process measured (the specs read it)

local function now() return tonumber(C.of_profiler_now_ns()) * 1e-9 end

-- the lower quartile: on a loaded machine a run now and then waits for a
-- core, which says nothing about the operation (the same for all of them)
local function quartile(list)
  table.sort(list)
  return list[math.floor((#list + 3) / 4)]
end

-- Seconds of f(): the lower quartile of reps runs, started together on the group.
local function time_it(f, reps, group)
  local ts = {}
  f()
  for i = 1, reps do
    if group then comm.barrier({group = group}) end
    local t0 = now()
    f()
    ts[i] = now() - t0
  end
  return quartile(ts)
end

--- The cache file: cost_model.path if set, else $OF_COST_MODEL, else
-- ~/.cache/oneflow/cost_model.lua (read and written by the first rank).
function M.cache_path()
  if M.path then return M.path end   -- set by a program (the specs)
  local p = os.getenv('OF_COST_MODEL')
  if p and p ~= '' then return p end
  return (os.getenv('HOME') or '/tmp') .. '/.cache/oneflow/cost_model.lua'
end

local function hostname()
  local f = io.open('/proc/sys/kernel/hostname', 'r')
  local h = f and f:read('*l')
  if f then f:close() end
  return h or 'localhost'
end

--- The cache key of a placement: host, device type and rank count.
function M.key(P)
  return ('%s/%s/%s'):format(hostname(), P.type or 'cpu', table.concat(P.hierarchy, 'x'))
end

-- The cache: key -> figures. A file that does not parse is ignored (and
-- rewritten): it holds only numbers, read as data (no code runs).
local function read_cache(path)
  local f = io.open(path, 'r')
  if not f then return {} end
  local text = f:read('*a')
  f:close()
  local out = {}
  for key, body in text:gmatch('%[(%b"")%]%s*=%s*(%b{})') do
    local t = {box = {}}
    for k, v in body:gmatch('([%w_]+)%s*=%s*([-%d%.eE+]+)') do t[k] = tonumber(v) end
    local num = '([-%d%.eE+]+)'
    local pat = '%["([SPB]%->[SPB])"%]%s*=%s*{%s*a%s*=%s*' .. num .. '%s*,%s*b%s*=%s*' .. num
    for kind, a, b in body:gmatch(pat) do
      t.box[kind] = {a = tonumber(a), b = tonumber(b)}
    end
    if t.flops and t.bytes then out[key:sub(2, -2)] = t end
  end
  return out
end

local function write_cache(path, all)
  local dir = path:match('^(.*)/[^/]*$')
  if dir then os.execute(("mkdir -p '%s' 2>/dev/null"):format(dir:gsub("'", "'\\''"))) end
  local keys = {}
  for k in pairs(all) do keys[#keys + 1] = k end
  table.sort(keys)
  local lines = {'-- oneflow auto-parallel cost model: host/device/ranks -> figures (seconds, bytes)', 'return {'}
  for _, k in ipairs(keys) do
    local t = all[k]
    local box = {}
    for _, kind in ipairs(M.KINDS) do
      local c = t.box[kind]
      if c then box[#box + 1] = ('["%s"] = {a = %.17g, b = %.17g}'):format(kind, c.a, c.b) end
    end
    lines[#lines + 1] = ('  [%q] = {flops = %.17g, bytes = %.17g, when = %d, box = {%s}},')
      :format(k, t.flops, t.bytes, t.when or os.time(), table.concat(box, ', '))
  end
  lines[#lines + 1] = '}'
  local tmp = path .. '.tmp' .. tostring(os.time())
  local f = io.open(tmp, 'w')
  if not f then return end
  f:write(table.concat(lines, '\n'), '\n')
  f:close()
  os.rename(tmp, path)
end

-- Measures on the ranks of P (every rank of P calls it); on a 2-D grid the
-- boxings along `axis` (the other axis broadcast), on the axis's groups.
local function measure(P, axis)
  local flow = T.flow
  local nax = #P.hierarchy
  local n = nax == 2 and P.hierarchy[axis] or P:size()
  local group = P:size() > 1 and P:group() or nil
  local fig = {box = {}}
  autograd.no_grad(function()
    local a, b = flow.randn(128, 128), flow.randn(128, 128)
    local t = time_it(function() a:matmul(b) end, 9, group)
    fig.flops = 2 * 128 ^ 3 / math.max(t, 1e-9)
    local x, y = flow.randn(262144), flow.randn(262144)
    t = time_it(function() x:add_(y) end, 9, group)
    fig.bytes = 3 * 4 * 262144 / math.max(t, 1e-9)
    if n == 1 then
      for _, kind in ipairs(M.KINDS) do fig.box[kind] = {a = 0, b = 0} end
      return
    end
    local S, Bc, Ps = PL.sbp.split, PL.sbp.broadcast, PL.sbp.partial_sum
    local from = {['S->B'] = S(1), ['P->B'] = Ps, ['P->S'] = Ps, ['S->S'] = S(1)}
    local to = {['S->B'] = Bc, ['P->B'] = Bc, ['P->S'] = S(1), ['S->S'] = S(2)}
    local function nd(s)
      if nax == 1 then return {s} end
      local out = {Bc, Bc}
      out[axis] = s
      return out
    end
    for _, kind in ipairs(M.KINDS) do
      local ts = {}
      for j, cols in ipairs({1, 512}) do   -- n*64 x cols floats: latency, then bandwidth
        local shape = {n * 64, cols}
        local s1, s2 = nd(from[kind]), nd(to[kind])
        local loc = flow.randn(unpack((B.shard(shape, P.hierarchy, s1, P.coord))))
        ts[j] = time_it(function()
          B.box(loc, shape, P, s1, P, s2, flow.float32)
        end, 15, group)
      end
      -- the slope between the sizes; under load the small run can take
      -- longer than its share, so at least half the large run counts
      local bytes1, bytes2 = n * 64 * 4, n * 64 * 512 * 4
      local bw = math.max(ts[2] - ts[1], 0.5 * ts[2]) / (bytes2 - bytes1)
      fig.box[kind] = {a = ts[1], b = bw}
    end
  end)
  fig.when = os.time()
  return fig
end

local function pack(fig)
  local v = {fig.flops, fig.bytes}
  for _, kind in ipairs(M.KINDS) do
    v[#v + 1] = fig.box[kind].a
    v[#v + 1] = fig.box[kind].b
  end
  return v
end

local function unpack_fig(v)
  local fig = {flops = v[1], bytes = v[2], box = {}}
  for i, kind in ipairs(M.KINDS) do fig.box[kind] = {a = v[2 * i + 1], b = v[2 * i + 2]} end
  return fig
end

--- The figures for placement P, the same on every rank of the world:
-- read from the cache or measured (and cached) on P's first rank.
-- opts.refresh = true measures again. Every rank calls it.
function M.figures(P, opts)
  if #P.hierarchy == 2 and not (opts and opts.axis) then   -- one set of figures per axis
    local a1 = M.figures(P, {refresh = opts and opts.refresh, axis = 1})
    local a2 = M.figures(P, {refresh = opts and opts.refresh, axis = 2})
    return {flops = a1.flops, bytes = a1.bytes, box = a1.box, axes = {a1, a2},
            key = M.key(P), cached = a1.cached and a2.cached}
  end
  opts = opts or {}
  local root = P.ranks[1]
  local me = comm.world().rank
  local path = M.cache_path()
  local key = M.key(P) .. (opts.axis and ('#' .. opts.axis) or '')
  local fig, cached
  local flag = T.flow.zeros(1, {dtype = 'float64'})
  if me == root and not opts.refresh then
    cached = read_cache(path)[key]
    if cached then flag:fill_(1) end
  end
  if comm.world().size > 1 then comm.broadcast(flag, root) end
  local have = flag:item() == 1
  if not have then
    if P:has_me() then fig = measure(P, opts.axis) end
    M.measured = M.measured + 1
  end
  if me == root then
    if have then fig = cached
    else
      local all = read_cache(path)
      all[key] = fig
      write_cache(path, all)
    end
  end
  local nv = 2 + 2 * #M.KINDS
  local v = T.flow.zeros(nv, {dtype = 'float64'})
  if me == root then
    local p = ffi.cast('double*', C.of_tensor_data(v.p))
    for i, x in ipairs(pack(fig)) do p[i - 1] = x end
  end
  if comm.world().size > 1 then comm.broadcast(v, root) end
  local out = unpack_fig(v:totable())
  out.key, out.path, out.cached = key, path, have
  return out
end

--- Seconds the runtime takes to box a logical tensor of `bytes` bytes from
-- sbp state a to b ('B', 'P', 'S1', 'S2', ...) on n ranks; 0 where no data
-- moves (B->S slices, B->P and S->P fill zeros).
function M.box_seconds(fig, a, b, bytes)
  if a == b then return 0 end
  local kind
  if a:sub(1, 1) == 'S' and b == 'B' then kind = 'S->B'
  elseif a == 'P' and b == 'B' then kind = 'P->B'
  elseif a == 'P' and b:sub(1, 1) == 'S' then kind = 'P->S'
  elseif a:sub(1, 1) == 'S' and b:sub(1, 1) == 'S' then kind = 'S->S'
  else return 0 end
  local c = fig.box[kind]
  return c.a + c.b * bytes
end

return M
