-- oneflow.nn.graph_pipeline: pipeline parallelism for nn.Graph (see
-- doc/distributed.md, "Pipeline parallelism").
--
-- Modules marked with m.config:set_stage(i, placement) are the stages. Each
-- rank runs its own stage only, on micro-batches (the graph's gradient
-- accumulation steps), in the 1F1B order of Megatron-LM's non-interleaved
-- schedule: stage s runs min(p - s, m) forwards, then alternates one
-- forward and one backward, then finishes the backwards. Activations go
-- to the next stage and their gradients back to the previous one point to
-- point, on a two-rank group per pair of neighbouring ranks; a send and the
-- receive that the schedule wants at the same time travel in one exchange
-- (an all-to-all of the pair), so that neither side waits on the other's
-- send (what blocking send/recv would do in the steady phase).
--
-- The whole schedule is traced like any build: the first call runs it
-- eagerly and records it, later calls replay each rank's recorded plan.
local T = require 'oneflow.tensor'
local class_of = require 'oneflow.nn.module'
local comm = require 'oneflow.distributed.comm'
local GL = require 'oneflow.distributed.global'
local PL = require 'oneflow.distributed.placement'
local ffi = require 'ffi'
local C = require('oneflow._C').C

local is_tensor, is_module = T.is_tensor, class_of.is_module
local unpack = unpack

local M = {}

local function fail(msg, level) error('nn.Graph: pipeline: ' .. msg, (level or 1) + 1) end

--- The stages of a graph's modules, or nil: {p =, list = {{module =, id =,
-- placement =, name =}, ...} by id, me = this rank's stage or nil, pos =
-- this rank's 1-based position in it}.
function M.stages(self)
  local names = {}
  for k, v in pairs(self) do
    if type(k) == 'string' and is_module(v) then names[#names + 1] = k end
  end
  table.sort(names)
  local list, seen = {}, {}
  for _, k in ipairs(names) do
    for name, m in self[k]:named_modules() do
      local cfg = rawget(m, 'config')
      if type(cfg) == 'table' and cfg.stage and not seen[m] then
        seen[m] = true
        list[#list + 1] = {module = m, id = cfg.stage, placement = cfg.placement,
                           name = name == '' and k or (k .. '.' .. name)}
      end
    end
  end
  if #list == 0 then return nil end
  table.sort(list, function(a, b) return a.id < b.id end)
  local pipe = {p = #list, list = list}
  local owner = {}
  for i, st in ipairs(list) do
    if st.id ~= i then
      fail(('stages must be numbered 1..%d, each once; %s is stage %d')
           :format(#list, st.name, st.id), 4)
    end
    if st.placement:size() ~= list[1].placement:size()
       or #st.placement.hierarchy ~= #list[1].placement.hierarchy
       or st.placement.hierarchy[1] ~= list[1].placement.hierarchy[1] then
      fail(('every stage needs the same grid of ranks: stage 1 (%s) has %s, stage %d (%s) has %s')
           :format(list[1].name, table.concat(list[1].placement.hierarchy, 'x'), i, st.name,
                   table.concat(st.placement.hierarchy, 'x')), 4)
    end
    for _, r in ipairs(st.placement.ranks) do
      if owner[r] then
        fail(('rank %d is in stage %d and stage %d: stages need their own ranks')
             :format(r, owner[r], i), 4)
      end
      owner[r] = i
    end
    if st.placement:has_me() then pipe.me, pipe.pos = i, st.placement.index end
  end
  return pipe
end

-- The values of a small contiguous int64 or float64 tensor, read while
-- tracing (build may not read traced values; these are sizes and results
-- that every replay repeats the same, so reading the traced call's is right).
local function peek(t, ctype)
  local ptr = ffi.cast(ctype, C.of_tensor_data(t.p))
  local out = {}
  for i = 1, t:numel() do out[i] = tonumber(ptr[i - 1]) end
  return out
end

-- The two-rank group between this rank and its peer in stage `other`
-- (same position), made once (collective over the two).
local function link(pipe, other)
  local mine = pipe.list[pipe.me].placement.ranks[pipe.pos]
  local peer = pipe.list[other].placement.ranks[pipe.pos]
  local ranks = other < pipe.me and {peer, mine} or {mine, peer}
  return {g = comm.new_group(ranks), me = other < pipe.me and 2 or 1}
end

-- One exchange on a link: sends t (or nothing) and returns what the peer
-- sends (nil when want is false). A header comes first: the shard's shape
-- and, for a global tensor (stages on grids: its shard goes to the rank at
-- the same grid position), the logical shape and sbp, so that the receiver
-- needs to know nothing beforehand and makes the same global tensor on its
-- own stage's placement. HDR: [ndim, shard dims x8, global, logical dims
-- x8, sbp x2 (0 broadcast, -1 partial, d split(d))].
local HDR = 20
local function sbp_code(v) return v.kind == 'B' and 0 or (v.kind == 'P' and -1 or v.dim) end
local function header(t)
  local h = {}
  for i = 1, HDR do h[i] = 0 end
  if t == nil then return h end
  local loc = GL.is_global(t) and t._local or t
  h[1] = loc:dim()
  for d = 1, loc:dim() do h[d + 1] = loc:size(d) end
  if GL.is_global(t) then
    h[10] = 1
    for d = 1, #t._shape do h[10 + d] = t._shape[d] end
    for k, v in ipairs(t._sbp) do h[18 + k] = sbp_code(v) end
  end
  return h
end

local function exchange(l, t, want, dtype, P)
  local h2 = {}
  for i = 1, HDR do h2[i] = 0 end
  local hdr = header(t)
  local send_h = T.flow.tensor(l.me == 1 and {h2, hdr} or {hdr, h2}, {dtype = 'int64'}):view(-1)
  local counts = {HDR, HDR}
  local got = comm.all_to_all_flat(send_h, counts, counts, {group = l.g})
  local all_h, ph = peek(got, 'int64_t*'), {}
  for i = 1, HDR do ph[i] = all_h[(2 - l.me) * HDR + i] end
  local shape, numel = {}, 1
  for d = 1, ph[1] do shape[d] = ph[d + 1]; numel = numel * ph[d + 1] end
  if not want then numel = 0 end
  if want and ph[1] == 0 then fail('expected a tensor from the neighbouring stage, got none', 3) end
  local loc = t and (GL.is_global(t) and t._local or t)
  local out = loc and loc:detach():contiguous():view(-1) or T.flow.empty(0, {dtype = dtype})
  local send, recv = {0, 0}, {0, 0}
  send[3 - l.me] = loc and out:numel() or 0
  recv[3 - l.me] = numel
  local flat = comm.all_to_all_flat(out, send, recv, {group = l.g})
  if not want then return nil end
  local r = flat:view(shape)
  if ph[10] == 0 then return r end
  local lshape, sbp = {}, {}
  for d = 1, ph[1] do lshape[d] = ph[10 + d] end
  for k = 1, #P.hierarchy do
    local c = ph[18 + k]
    sbp[k] = c == 0 and PL.sbp.broadcast or (c < 0 and PL.sbp.partial_sum or PL.sbp.split(c))
  end
  return GL.new(r, lshape, P, sbp, r.dtype)
end

-- The stage modules' forwards while the schedule runs: stages before this
-- rank's pass their argument through (they ran elsewhere), this rank's
-- stage computes on `cur.input` (what the previous stage sent; stage 1: the
-- argument) and, unless it is the last stage, ends build by raising
-- `stop` with its output in `cur.out`. Returns the function undoing it.
local function wrap_stages(pipe, cur, stop)
  local saved = {}
  for j, st in ipairs(pipe.list) do
    local m = st.module
    local own = rawget(m, 'forward')
    saved[j] = own or false
    local fwd = own or getmetatable(m).forward
    rawset(m, 'forward', function(mod, x, ...)
      if j < pipe.me then return x end
      if j > pipe.me then
        fail(('stage %d (%s) was called before stage %d (%s) returned'):format(j, st.name,
             pipe.me, pipe.list[pipe.me].name), 2)
      end
      local out = fwd(mod, cur.input or x, ...)
      if j < pipe.p then
        cur.out = out
        error(stop, 0)
      end
      return out
    end)
  end
  return function()
    for j, st in ipairs(pipe.list) do rawset(st.module, 'forward', saved[j] or nil) end
  end
end

-- The dtype activations travel in: the stages' first parameter's.
local function activation_dtype(pipe)
  for _, st in ipairs(pipe.list) do
    for _, p in st.module:named_parameters() do
      local t = is_tensor(p) and p or p._local
      if t then return t.dtype end
    end
  end
  return require('oneflow.types').by_name.float32
end

--- Runs the 1F1B schedule of `m` micro-batches (micro(k): the k-th argument
-- list of build) on this rank's stage; returns the last stage's results of
-- each micro-batch (a list of result lists) there, nil elsewhere.
function M.schedule(self, pipe, m, micro, n)
  local s, p = pipe.me, pipe.p
  if s == nil then return nil end   -- a rank outside every stage idles
  local up = s > 1 and link(pipe, s - 1) or nil
  local down = s < p and link(pipe, s + 1) or nil
  local dtype = activation_dtype(pipe)
  local stop = {}
  local cur = {}
  local unwrap = wrap_stages(pipe, cur, stop)
  local ins, outs, results = {}, {}, {}

  local function forward_step(k, inp)
    cur.input, cur.out = inp, nil
    local res = {pcall(self.build, self, unpack(micro(k), 1, n))}
    ins[k] = inp
    if not res[1] then
      if res[2] ~= stop then error(res[2], 0) end
      outs[k] = cur.out
      return cur.out
    end
    if s < p then
      fail(('build returned on stage %d without calling its module %s'):format(s, pipe.list[s].name), 2)
    end
    results[k] = {unpack(res, 2, table.maxn(res))}
    return nil
  end
  local function backward_step(k, og)
    if s < p then
      local out = outs[k]
      if not (is_tensor(out) or GL.is_global(out)) then
        fail(('stage %d (%s) must return one tensor'):format(s, pipe.list[s].name), 2)
      end
      -- on the shards: og is the shard of the gradient in the dual sbp, as
      -- the next stage's autograd left it (see doc/distributed.md, Autograd)
      local lo, lg = GL.is_global(out) and out._local or out, GL.is_global(og) and og._local or og
      lo:backward(lg)
    end
    local inp = ins[k]
    outs[k], ins[k] = nil, nil
    if inp == nil then return nil end
    inp = GL.is_global(inp) and inp._local or inp
    if inp.grad == nil then
      fail(('no gradient reached the input of stage %d: build must call loss:backward()'):format(s), 2)
    end
    return inp.grad
  end
  local P = pipe.list[s].placement
  local function leaf(t) return t and t:requires_grad_(true) or nil end
  local function recv_forward() return up and leaf(exchange(up, nil, true, dtype, P)) end
  local function send_forward(out) if down then exchange(down, out, false, dtype, P) end end
  local function send_forward_recv_backward(out) return down and exchange(down, out, true, dtype, P) end
  local function send_backward_recv_forward(g) return up and leaf(exchange(up, g, true, dtype, P)) end
  local function recv_backward() return down and exchange(down, nil, true, dtype, P) end
  local function send_backward(g) if up then exchange(up, g, false, dtype, P) end end

  local ok, err = pcall(function()
    local warm = math.min(p - s, m)
    local rest = m - warm
    for k = 1, warm do send_forward(forward_step(k, recv_forward())) end
    local inp = rest > 0 and recv_forward() or nil
    for i = 1, rest do
      local out = forward_step(warm + i, inp)
      local og = send_forward_recv_backward(out)
      local ig = backward_step(i, og)
      if i == rest then
        inp = nil
        send_backward(ig)
      else
        inp = send_backward_recv_forward(ig)
      end
    end
    for i = rest + 1, m do send_backward(backward_step(i, recv_backward())) end
  end)
  unwrap()
  if not ok then error(err, 0) end
  return s == p and results or nil
end

--- The results for every rank: scalar tensors of the last stage's results
-- (its first rank's) go to every rank in one all-reduce over the world;
-- other results stay on the last stage (nil elsewhere).
function M.share(pipe, out, nout)
  local last = pipe.me == pipe.p and pipe.pos == 1
  local count = T.flow.tensor({last and nout or 0}, {dtype = 'float64'})
  count = math.floor(peek(comm.all_reduced(count), 'double*')[1] + 0.5)
  if count == 0 then return {}, 0 end
  local parts = {}
  for j = 1, count do
    local v = pipe.me == pipe.p and out[j]
    if GL.is_global(v) and #v._shape == 0 then   -- its value (a collective in the stage)
      local b = {}
      for k = 1, #v._sbp do b[k] = PL.sbp.broadcast end
      v = v:to_global(v.placement, b)._local
    end
    if not last then v = nil end
    if is_tensor(v) and v:dim() == 0 then
      parts[#parts + 1] = T.flow.stack({T.flow.ones({}, {dtype = 'float64'}), v:detach():double()}, 1)
    else
      parts[#parts + 1] = T.flow.zeros(2, {dtype = 'float64'})
    end
  end
  local vec = comm.all_reduced(T.flow.cat(parts, 1))
  if pipe.me == pipe.p then return out, nout end
  local flags = peek(vec, 'double*')
  local shared = {}
  for j = 1, count do
    if flags[2 * j - 1] > 0 then shared[j] = vec:narrow(1, 2 * j, 1):view({}):float() end
  end
  return shared, count
end

------------------------------------------------------------------ bubble
local a2a_kind
local function all_to_all_kind()
  if a2a_kind == nil then
    local info = ffi.new('of_op_info')
    a2a_kind = -1
    for k = 0, C.of_op_schema_count() - 1 do
      if C.of_op_schema(k, info) == 0 and ffi.string(info.name) == 'all_to_all' then a2a_kind = k end
    end
  end
  return a2a_kind
end

--- Runs f() (a replay of the compiled step) and returns the nanoseconds
-- it took and those spent in all-to-all nodes (the stage exchanges: the
-- wait for a neighbour and the transfer). Not measured (nil) while the op
-- profiler is on for the user.
function M.timed(f)
  if C.of_profiler_enabled() ~= 0 then return nil, nil, f() end
  if C.of_profiler_start(0) ~= 0 then return nil, nil, f() end
  local t0 = C.of_profiler_now_ns()
  local res = {pcall(f)}
  local t1 = C.of_profiler_now_ns()
  C.of_profiler_stop()
  if not res[1] then error(res[2], 0) end
  local kind, idle = all_to_all_kind(), 0
  local ev = C.of_profiler_events()
  for i = 0, tonumber(C.of_profiler_num_events()) - 1 do
    local e = ev[i]
    if e.op == kind then idle = idle + tonumber(e.end_ns - e.start_ns) end
  end
  return tonumber(t1 - t0), idle, unpack(res, 2, table.maxn(res))
end

--- The bubble of the last measured call on every rank (a collective over
-- the world): {p =, m =, formula = (p-1)/(m+p-1), stages = {{stage =,
-- rank =, idle =, total =, fraction =}, ...}} or nil when not measured.
function M.stats(pipe, m, measured)
  local me = measured or {total = 0, idle = 0}
  local t = T.flow.tensor({pipe.me or 0, me.total, me.idle}, {dtype = 'float64'})
  local all = comm.all_gather_flat(t):totable()
  local out = {p = pipe.p, m = m, formula = (pipe.p - 1) / (m + pipe.p - 1), stages = {}}
  local any = true
  for r = 0, #all / 3 - 1 do
    local st, total, idle = all[3 * r + 1], all[3 * r + 2], all[3 * r + 3]
    if st > 0 then
      if total <= 0 then any = false end
      out.stages[#out.stages + 1] = {stage = st, rank = r, total = total / 1e9, idle = idle / 1e9,
                                     fraction = total > 0 and idle / total or 0}
    end
  end
  if not any then return nil end
  local sum = 0
  for _, e in ipairs(out.stages) do sum = sum + e.fraction end
  out.measured = sum / #out.stages
  return out
end

--- The report graph:debug prints.
function M.report(st)
  local lines = {('pipeline: %d stages, %d micro-batches, 1F1B; bubble (idle share of the step) '
                  .. 'measured %.3f (mean over stages), 1F1B formula (p-1)/(m+p-1) = %.3f')
                 :format(st.p, st.m, st.measured, st.formula)}
  for _, e in ipairs(st.stages) do
    lines[#lines + 1] = ('  stage %d (rank %d): step %.3f ms, waiting in exchanges %.3f ms (%.3f)')
                        :format(e.stage, e.rank, e.total * 1e3, e.idle * 1e3, e.fraction)
  end
  return table.concat(lines, '\n') .. '\n'
end

return M
