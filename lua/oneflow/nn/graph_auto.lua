-- oneflow.nn.graph_auto: auto-parallel for nn.Graph (doc/distributed.md,
-- "Auto-parallel"): self.config:enable_auto_parallel(true).
--
-- When the graph compiles for the first time:
--  1. probe: build runs once eagerly (not traced) with a forward hook on
--     every leaf module, which records the calls in order with the logical
--     shapes and SBP of their first tensor argument and result; grads,
--     buffers and the random generator are put back afterwards;
--  2. signatures: each call gets its candidate SBP signatures (input state,
--     output state, parameter SBP) with a cost in seconds from the machine
--     figures of oneflow.distributed.cost_model: compute (multiply-adds or
--     bytes streamed, divided by the ranks where the work is split), the
--     op's own communication (SyncBatchNorm's statistics, partial sums of
--     the gradients of broadcast parameters all-reduced before the update)
--     and the optimizer update on the parameter part a rank holds;
--  3. search: dynamic programming over the calls as a chain, the state
--     being the SBP of the value passed on, each step adding the boxing
--     between the previous call's state and the next call's input state
--     (forward, and in training its backward: the reverse boxing between
--     the dual SBPs) -- the cheapest plan over all signatures of all calls;
--  4. apply: parameters get the plan's SBP (the same logical tensors, held
--     in other parts; optimizer state boxed alike); while build is traced a
--     forward pre-hook boxes each planned call's first tensor argument to
--     the plan's input state, so the global runtime picks the planned
--     signature. Values that skip calls (residual branches) and the ops
--     between module calls are left to the runtime's own rules.
local T = require 'oneflow.tensor'
local module = require 'oneflow.nn.module'
local autograd = require 'oneflow.autograd'
local GL = require 'oneflow.distributed.global'
local PL = require 'oneflow.distributed.placement'
local Bx = require 'oneflow.distributed.boxing'
local CM = require 'oneflow.distributed.cost_model'

local is_tensor, is_module, is_global = T.is_tensor, module.is_module, GL.is_global
local unpack = unpack

local M = {}

local function fail(msg, level) error('nn.Graph: auto-parallel: ' .. msg, (level or 1) + 1) end

local function set(list)
  local s = {}
  for _, k in ipairs(list) do s[k] = true end
  return s
end

local ELEMENTWISE = set{'ReLU', 'ReLU6', 'GELU', 'SiLU', 'Sigmoid', 'Tanh', 'LeakyReLU', 'ELU',
  'SELU', 'CELU', 'Softplus', 'Hardswish', 'Hardsigmoid', 'Hardtanh', 'Mish', 'Softsign',
  'Tanhshrink', 'LogSigmoid', 'GLU'}
local LINEAR_OPS = set{'Identity', 'Dropout', 'Dropout1d', 'Dropout2d', 'Dropout3d'}
local POOLS = set{'MaxPool1d', 'MaxPool2d', 'MaxPool3d', 'AvgPool1d', 'AvgPool2d', 'AvgPool3d',
  'AdaptiveAvgPool1d', 'AdaptiveAvgPool2d', 'AdaptiveAvgPool3d', 'AdaptiveMaxPool1d',
  'AdaptiveMaxPool2d', 'AdaptiveMaxPool3d'}
local CONVS = set{'Conv1d', 'Conv2d', 'Conv3d'}
local NORMS = set{'BatchNorm1d', 'BatchNorm2d', 'BatchNorm3d'}
local LOSSES = set{'CrossEntropyLoss', 'NLLLoss', 'MSELoss', 'L1Loss', 'SmoothL1Loss', 'BCELoss',
  'BCEWithLogitsLoss', 'KLDivLoss'}

------------------------------------------------------------------ states
-- A state is the SBP of a value on a 1-D placement: 'B', 'P', 'S1',
-- 'S2', ... (1-based split dim); 'L' after a loss module (the end).
-- On a 2-D grid a state is the two axes' states joined by a comma ('S1,B').
local function axes(state)
  local out = {}
  for part in state:gmatch('[^,]+') do out[#out + 1] = part end
  return out
end

local function state_of(sbp, nd)
  local parts = {}
  for k, s in ipairs(sbp) do
    parts[k] = s.kind == 'S' and ('S' .. Bx.norm_dim(s.dim, nd)) or s.kind
  end
  return table.concat(parts, ',')
end
M.state_of = state_of

local function sbp1(state)
  if state == 'B' then return PL.sbp.broadcast end
  if state == 'P' then return PL.sbp.partial_sum end
  return PL.sbp.split(tonumber(state:sub(2)))
end

-- the sbp list of a state (one per grid axis)
local function sbp_of(state)
  local out = {}
  for k, a in ipairs(axes(state)) do out[k] = sbp1(a) end
  return out
end

local function show1(state)
  if state == 'B' or state == 'P' then return state end
  if state == 'L' then return 'loss' end
  return 'S(' .. state:sub(2) .. ')'
end

local function show(state)
  local parts = axes(state)
  if #parts == 1 then return show1(state) end
  if state:find('L', 1, true) then return 'loss' end
  for k, a in ipairs(parts) do parts[k] = show1(a) end
  return '(' .. table.concat(parts, ', ') .. ')'
end
M.show = show

local function dual(state)
  if state == 'B' then return 'P' end
  if state == 'P' then return 'B' end
  return state
end

local function numel(shape)
  local k = 1
  for _, v in ipairs(shape) do k = k * v end
  return k
end

-- the share of a dim of length len one rank works on (the largest part)
local function share(len, n) return len > 0 and math.ceil(len / n) / len or 1 end

------------------------------------------------------------------ probe
local function describe(x)
  if is_global(x) then
    return {shape = {unpack(x._shape)}, state = #x.placement.hierarchy <= 2
              and state_of(x._sbp, #x._shape) or nil,
            itemsize = x._dtype.itemsize, placement = x.placement}
  elseif is_tensor(x) then
    return {shape = x:size():totable(), itemsize = x.dtype.itemsize, is_local = true}
  end
end

local function first_tensor(list, n)
  for i = 1, n do
    local v = list[i]
    if is_global(v) or is_tensor(v) then return v, i end
  end
end

-- The graph's modules' leaves (modules without children): {module = name}.
local function leaves(self)
  local names, out = {}, {}
  for k, v in pairs(self) do
    if type(k) == 'string' and is_module(v) then names[#names + 1] = k end
  end
  table.sort(names)
  for _, k in ipairs(names) do
    for name, m in self[k]:named_modules() do
      if out[m] == nil and #m:children() == 0 then
        out[m] = name == '' and k or (k .. '.' .. name)
      end
    end
  end
  return out
end

--- Runs build once eagerly and records the leaf module calls:
-- {{module =, name =, type =, input = describe(x), output = describe(y),
--   chained = x is the previous call's result}, ...}.
function M.probe(self, args, n, training)
  local flow = T.flow
  local names = leaves(self)
  local calls, hooks = {}, {}
  for m, name in pairs(names) do
    hooks[#hooks + 1] = m:register_forward_hook(function(mod, input, out)
      local x = first_tensor(input, table.maxn(input))
      local y = (type(out) == 'table' and not is_global(out)) and out[1] or out
      calls[#calls + 1] = {module = mod, name = name, type = mod.__name, x = x, y = y,
                           input = describe(x), output = describe(y)}
    end)
  end
  local saved, rng = {}, flow.get_rng_state()
  for m in pairs(names) do
    for _, b in m:named_buffers({recurse = false}) do
      local loc = is_global(b) and b._local or b
      if is_tensor(loc) then saved[#saved + 1] = {t = loc, v = loc:clone()} end
    end
  end
  local prev = autograd.is_grad_enabled()
  local ok, err = pcall(function()
    autograd.set_grad_enabled(training or prev)
    self:build(unpack(args, 1, n))
  end)
  autograd.set_grad_enabled(prev)
  for _, h in ipairs(hooks) do h.remove() end
  autograd.no_grad(function()
    for _, e in ipairs(saved) do e.t:copy_(e.v) end
  end)
  flow.set_rng_state(rng)
  for m in pairs(names) do
    for _, p in m:named_parameters({recurse = false}) do
      local loc = is_global(p) and p._local or p
      if is_tensor(loc) then loc.grad = nil end
    end
  end
  if not ok then error(err, 0) end
  for i, c in ipairs(calls) do
    c.chained = i > 1 and c.x ~= nil and c.x == calls[i - 1].y
    c.x = nil
  end
  for _, c in ipairs(calls) do c.y = nil end
  return calls
end

------------------------------------------------------------------ signatures
-- cost helpers on figures fig, n ranks, training or not
local function mm(fig, flops, training) return flops * (training and 3 or 1) / fig.flops end
local function ew(fig, bytes, passes) return bytes * passes / fig.bytes end

-- seconds to all-reduce the grads of the broadcast parameters and to update
-- each parameter's part (Adam: about 7 passes over 4-byte elements)
local function param_cost(fig, n, params, plan, training)
  if not training then return 0, 0 end
  local comm, upd = 0, 0
  local names = {}
  for name in pairs(params) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local p = params[name]
    local st = plan[name] or 'B'
    local bytes = numel(p._shape) * p._dtype.itemsize
    if st == 'B' then comm = comm + CM.box_seconds(fig, 'P', 'B', bytes)
    else
      upd = upd - ew(fig, bytes, 7) * (1 - share(p._shape[tonumber(st:sub(2))], n))
    end
    upd = upd + ew(fig, bytes, 7)
  end
  return comm, upd
end

local function sig(list, fig, n, params, training, t)
  local comm, upd = param_cost(fig, n, params, t.params or {}, training)
  t.own = t.comm or 0
  t.comm = t.own + comm
  t.update = upd
  t.cost = t.compute + t.comm + t.update
  list[#list + 1] = t
end

-- {name = global parameter}, whether there is one, the names in order
-- (loops that box or add costs go in this order: pairs() order differs
-- between processes, and every rank must box alike)
local function own_params(m)
  local out, any, names = {}, false, {}
  for name, p in m:named_parameters({recurse = false}) do
    if is_global(p) then out[name] = p; any = true; names[#names + 1] = name
    elseif is_tensor(p) then fail(('module %s has local parameters; give the model a placement first: '
      .. 'model:to_global(P, flow.sbp.broadcast)'):format(m.__name), 5) end
  end
  table.sort(names)
  return out, any, names
end

--- The candidate signatures of one call: {{name =, input =, output =,
-- params = {pname = state}, compute =, comm =, update =, cost =}, ...}.
function M.signatures(call, fig, n, training)
  local m, ty = call.module, call.type
  local X = call.input and call.input.shape or {}
  local Y = call.output and call.output.shape or {}
  local nd, ndy = #X, #Y
  local xb = numel(X) * (call.input and call.input.itemsize or 4)
  local yb = numel(Y) * (call.output and call.output.itemsize or 4)
  local params, has = own_params(m)
  local list = {}
  local function add(t) sig(list, fig, n, params, training, t) end
  if ty == 'Linear' and nd >= 1 then
    local W = params.weight._shape
    local F = 2 * numel(X) * W[1]
    for d = 1, nd - 1 do
      add{name = 'data', input = 'S' .. d, output = 'S' .. d, params = {weight = 'B', bias = 'B'},
          compute = mm(fig, F, training) * share(X[d], n)}
    end
    add{name = 'column', input = 'B', output = 'S' .. ndy, params = {weight = 'S1', bias = 'S1'},
        compute = mm(fig, F, training) * share(W[1], n)}
    add{name = 'row', input = 'S' .. nd, output = 'P', params = {weight = 'S2', bias = 'B'},
        compute = mm(fig, F, training) * share(W[2], n)}
  elseif CONVS[ty] and nd >= 2 then
    local W = params.weight._shape
    local k = 1
    for i = 2, #W do k = k * W[i] end
    local F = 2 * numel(Y) * k
    add{name = 'data', input = 'S1', output = 'S1', params = {weight = 'B', bias = 'B'},
        compute = mm(fig, F, training) * share(X[1], n)}
    if (m.groups or 1) == 1 then
      add{name = 'out-channels', input = 'B', output = 'S2', params = {weight = 'S1', bias = 'S1'},
          compute = mm(fig, F, training) * share(W[1], n)}
      add{name = 'in-channels', input = 'S2', output = 'P', params = {weight = 'S2', bias = 'B'},
          compute = mm(fig, F, training) * share(W[2], n)}
    end
  elseif NORMS[ty] and nd >= 2 then
    local C = X[2] * 4
    local sync = m.training and training and (2 * CM.box_seconds(fig, 'P', 'B', C)
                 + CM.box_seconds(fig, 'P', 'B', 2 * C)) or 0
    if m.training and not training then sync = 2 * CM.box_seconds(fig, 'P', 'B', C) end
    local pb = {}
    for name in pairs(params) do pb[name] = 'B' end
    add{name = 'data', input = 'S1', output = 'S1', params = pb,
        compute = ew(fig, xb, training and 10 or 4) * share(X[1], n), comm = sync}
  elseif ty == 'LayerNorm' and nd >= 1 then
    local k = type(m.normalized_shape) == 'table' and #m.normalized_shape or 1
    local pb = {}
    for name in pairs(params) do pb[name] = 'B' end
    for d = 1, nd - k do
      add{name = 'data', input = 'S' .. d, output = 'S' .. d, params = pb,
          compute = ew(fig, xb, training and 10 or 4) * share(X[d], n)}
    end
  elseif ty == 'Embedding' then
    local W = params.weight._shape
    add{name = 'data', input = 'S1', output = 'S1', params = {weight = 'B'},
        compute = ew(fig, yb, training and 3 or 1) * share(X[1] or 1, n)}
    add{name = 'vocab', input = 'B', output = 'P', params = {weight = 'S1'},
        compute = ew(fig, yb, training and 3 or 1)}
    add{name = 'hidden', input = 'B', output = 'S' .. ndy, params = {weight = 'S2'},
        compute = ew(fig, yb, training and 3 or 1) * share(W[2], n)}
  elseif has then
    fail(("no SBP signatures for %s (module '%s', which has parameters); give its parameters an "
          .. 'sbp by hand and leave auto-parallel off'):format(ty, call.name), 4)
  elseif LOSSES[ty] then
    add{name = 'loss', input = 'S1', output = 'L', compute = ew(fig, xb, 3) * share(X[1] or 1, n)}
    if ty == 'CrossEntropyLoss' and m.weight == nil and (m.label_smoothing or 0) == 0 and nd == 2 then
      add{name = 'vocab-parallel', input = 'S2', output = 'L', compute = ew(fig, xb, 3) * share(X[2], n),
          comm = 3 * CM.box_seconds(fig, 'P', 'B', X[1] * 4) * (training and 2 or 1)}
    end
    add{name = 'loss', input = 'B', output = 'L', compute = ew(fig, xb, 3)}
  else
    local passes = training and 5 or 2
    local states = {'B'}
    local function splits(dmax, ok)
      for d = 1, dmax do if ok(d) then states[#states + 1] = 'S' .. d end end
    end
    local keep = true   -- the result has the input's shape and keeps its sbp
    if ELEMENTWISE[ty] or LINEAR_OPS[ty] or POOLS[ty] then
      splits(nd, function(d) return not POOLS[ty] or d <= 2 end)
      if LINEAR_OPS[ty] then states[#states + 1] = 'P' end
    elseif (ty == 'Softmax' or ty == 'LogSoftmax') and m.dim then
      local sd = Bx.norm_dim(m.dim, nd)
      splits(nd, function(d) return d ~= sd end)
    elseif ty == 'Flatten' then
      keep = false
      local s, e = Bx.norm_dim(m.start_dim or 2, nd), Bx.norm_dim(m.end_dim or -1, nd)
      add{name = 'flatten', input = 'B', output = 'B', compute = 0}
      for d = 1, nd do
        if d < s then add{name = 'flatten', input = 'S' .. d, output = 'S' .. d, compute = 0}
        elseif d == s then add{name = 'flatten', input = 'S' .. d, output = 'S' .. s, compute = 0}
        elseif d > e then add{name = 'flatten', input = 'S' .. d, output = 'S' .. (d - (e - s)), compute = 0}
        end
      end
    else
      if nd >= 1 and ndy >= 1 then states[#states + 1] = 'S1' end
    end
    if keep then
      for _, st in ipairs(states) do
        local fr = st:sub(1, 1) == 'S' and share(X[tonumber(st:sub(2))], n) or 1
        local out = st
        if ndy ~= nd and st ~= 'B' and st ~= 'P' then out = 'S1' end
        add{name = st == 'B' and 'replicated' or (st == 'P' and 'partial' or 'split'), input = st,
            output = out, compute = ew(fig, xb + yb, passes) * fr}
      end
    end
  end
  if #list == 0 then
    fail(("no SBP signature fits %s (module '%s') on input %s"):format(ty, call.name,
         table.concat(X, 'x')), 4)
  end
  return list
end

------------------------------------------------------------------ search
-- forward boxing, and in training its backward (dual states, reversed)
local function box_cost(fig, a, b, bytes, training)
  local c = CM.box_seconds(fig, a, b, bytes)
  if training then c = c + CM.box_seconds(fig, dual(b), dual(a), bytes) end
  return c
end
M.box_cost = box_cost

-- the state a value in state a has as the input of a call with nd dims
local function fit(a, nd)
  if a:sub(1, 1) == 'S' and tonumber(a:sub(2)) > nd then return 'S1' end
  return a
end

local function sorted_keys(t)
  local k = {}
  for s in pairs(t) do k[#k + 1] = s end
  table.sort(k)
  return k
end

------------------------------------------------------------------ 2-D grids
-- The signatures of a call on an h1 x h2 grid: a 1-D signature per axis
-- (each with that axis's figures), except the same model-parallel split on
-- both axes. Compute is the whole work times each axis's share; the op's
-- own communication adds; each parameter's gradient is all-reduced along
-- the axes that broadcast it (its bytes divided by the other axis's split)
-- and its part updated.
local function signatures2(call, figs, h, training)
  local full = M.signatures(call, figs[1], 1, training)
  local fullb = M.signatures(call, figs[2], 1, training)
  local sa = M.signatures(call, figs[1], h[1], training)
  local sb = M.signatures(call, figs[2], h[2], training)
  local params, _, pnames = own_params(call.module)
  local out = {}
  local function part(sg, whole)
    local w = whole.compute
    return w > 0 and sg.compute / w or 1
  end
  local function pshare(p, st, n)
    if st:sub(1, 1) ~= 'S' then return 1 end
    return share(p._shape[tonumber(st:sub(2))], n)
  end
  local model = {column = true, row = true, ['out-channels'] = true, ['in-channels'] = true,
                 vocab = true, hidden = true, ['vocab-parallel'] = true}
  for i, a in ipairs(sa) do
    for j, b in ipairs(sb) do
      local lossy = (a.output == 'L') ~= (b.output == 'L')
      if not lossy and not (a.name == b.name and model[a.name]) then
        local pa, pb = part(a, full[i]), part(b, fullb[j])
        local t = {name = a.name .. ' x ' .. b.name, input = a.input .. ',' .. b.input,
                   output = a.output .. ',' .. b.output, params = {},
                   compute = full[i].compute * pa * pb, comm = a.own + b.own, update = 0}
        for _, name in ipairs(pnames) do
          local p = params[name]
          local s1 = a.params and a.params[name] or 'B'
          local s2 = b.params and b.params[name] or 'B'
          t.params[name] = s1 .. ',' .. s2
          if training then
            local bytes = numel(p._shape) * p._dtype.itemsize
            local sh1, sh2 = pshare(p, s1, h[1]), pshare(p, s2, h[2])
            if s1 == 'B' then t.comm = t.comm + CM.box_seconds(figs[1], 'P', 'B', bytes * sh2) end
            if s2 == 'B' then t.comm = t.comm + CM.box_seconds(figs[2], 'P', 'B', bytes * sh1) end
            t.update = t.update + ew(figs[1], bytes * sh1 * sh2, 7)
          end
        end
        t.cost = t.compute + t.comm + t.update
        out[#out + 1] = t
      end
    end
  end
  return out
end

-- boxing between 2-D states: each axis that changes moves the tensor's
-- bytes over the other axis's split
local function box_cost2(figs, h, a, b, bytes, training)
  local A, Bv = axes(a), axes(b)
  local c = 0
  for k = 1, 2 do
    if A[k] ~= Bv[k] then
      local o = 3 - k
      local shr = (A[o]:sub(1, 1) == 'S' or Bv[o]:sub(1, 1) == 'S') and 1 / h[o] or 1
      c = c + box_cost(figs[k], A[k], Bv[k], bytes * shr, training)
    end
  end
  return c
end

--- The cheapest plan for the calls (M.probe) on n ranks (a number, or the
-- grid {h1, h2} with fig.axes = {figures of axis 1, of axis 2}). only(call)
-- may limit a call's signatures (by name) for the comparison plans.
-- Returns {steps = {{call =, sig =, box =}, ...}, cost =}.
function M.search(calls, fig, n, training, only)
  local grid = type(n) == 'table'
  local function boxf(a, b, bytes, nd)
    if grid then
      local A = axes(a)
      for k = 1, #A do A[k] = fit(A[k], nd) end
      return box_cost2(fig.axes, n, table.concat(A, ','), b, bytes, training)
    end
    return box_cost(fig, fit(a, nd), b, bytes, training)
  end
  local first = calls[1]
  local start = first.input and first.input.state or (grid and 'B,B' or 'B')
  local best = {[start] = {cost = 0}}
  for _, call in ipairs(calls) do
    local sigs = call.sigs or (grid and signatures2(call, fig.axes, n, training)
                               or M.signatures(call, fig, n, training))
    call.sigs = sigs
    local nd = #(call.input and call.input.shape or {})
    local bytes = numel(call.input and call.input.shape or {}) * (call.input and call.input.itemsize or 4)
    local nb = {}
    for _, sg in ipairs(sigs) do
      if not only or only(call, sg) then
        for _, s in ipairs(sorted_keys(best)) do
          local e = best[s]
          if not s:find('L', 1, true) then
            local bx = boxf(s, sg.input, bytes, nd)
            local c = e.cost + bx + sg.cost
            local cur = nb[sg.output]
            if cur == nil or c < cur.cost * (1 - 1e-9) then
              nb[sg.output] = {cost = c, prev = e, sig = sg, call = call, box = bx, from = s}
            end
          end
        end
      end
    end
    if next(nb) == nil then return nil end
    best = nb
  end
  -- after the last call: a loss module ends it; else the value meets the
  -- loss in build, split on the batch or whole
  local last = calls[#calls]
  local yb = numel(last.output and last.output.shape or {}) * (last.output and last.output.itemsize or 4)
  local win, wc
  for _, s in ipairs(sorted_keys(best)) do
    local e = best[s]
    local c = e.cost
    if not s:find('L', 1, true) then
      local S1, Bb = grid and 'S1,B' or 'S1', grid and 'B,B' or 'B'
      c = c + math.min(boxf(s, S1, yb, 99), boxf(s, Bb, yb, 99))
    end
    if wc == nil or c < wc * (1 - 1e-9) then win, wc = e, c end
  end
  local steps = {}
  local e = win
  while e and e.sig do
    table.insert(steps, 1, {call = e.call, sig = e.sig, box = e.box, from = e.from})
    e = e.prev
  end
  return {steps = steps, cost = wc}
end

------------------------------------------------------------------ plan
local function check(calls)
  local P, seen = nil, {}
  for _, c in ipairs(calls) do
    local _, has = own_params(c.module)
    if has then
      if seen[c.module] then
        fail(("module '%s' (%s) is called more than once in build; auto-parallel plans each module "
              .. 'with parameters once -- give its parameters an sbp by hand'):format(c.name, c.type), 4)
      end
      seen[c.module] = true
      for _, p in pairs(own_params(c.module)) do
        if #p.placement.hierarchy > 2 then
          fail(('searches 1-D placements and 2-D grids; %s has the %s grid %s'):format(c.name,
               table.concat(p.placement.hierarchy, 'x'), tostring(p.placement)), 4)
        end
        if P and p.placement ~= P and tostring(p.placement) ~= tostring(P) then
          fail(('parameters on two placements (%s, %s)'):format(tostring(P), tostring(p.placement)), 4)
        end
        P = p.placement
      end
    end
    if c.input and c.input.is_local and P then
      fail(("module '%s' gets a local tensor; pass global tensors to the graph"):format(c.name), 4)
    end
  end
  if not P then
    fail('no module with global parameters was called; give the model a placement: '
         .. 'model:to_global(P, flow.sbp.broadcast)', 4)
  end
  return P
end

--- Plans the graph's parallelism: probe, figures, search. Returns
-- {placement =, steps =, cost =, data_parallel = cost of the all-data plan,
--  figures =, training =}.
function M.plan(self, args, n, training, opts)
  for m in pairs(leaves(self)) do own_params(m) end   -- local parameters: say so first
  local calls = M.probe(self, args, n, training)
  if #calls == 0 then fail('build called no module', 3) end
  local P = check(calls)
  local fig = opts.figures or CM.figures(P)
  local ranks = #P.hierarchy == 2 and P.hierarchy or P:size()
  if #P.hierarchy == 2 and not fig.axes then
    fail('figures for a 2-D grid need axes = {figures of axis 1, of axis 2}', 3)
  end
  for _, c in ipairs(calls) do c.sigs = nil end
  local plan = M.search(calls, fig, ranks, training)
  if not plan then fail('no plan fits the calls (no signature chain)', 3) end
  local dp = M.search(calls, fig, ranks, training, function(call, sg)
    local _, has = own_params(call.module)
    if not has then return true end
    for _, a in ipairs(axes((sg.name:gsub(' x ', ',')))) do
      if a ~= 'data' and a ~= 'loss' then return false end
    end
    return true
  end)
  plan.data_parallel = dp and dp.cost or nil
  plan.placement, plan.figures, plan.training, plan.calls = P, fig, training, #calls
  return plan
end

local STATE_KEYS = {'exp_avg', 'exp_avg_sq', 'max_exp_avg_sq', 'momentum_buffer'}

-- The global parameter g gets sbp `to`: a new leaf holding this rank's part
-- of the same logical value takes the old shard's place in g, in the
-- optimizer that steps it (its state boxed alike) and in the graph's
-- per-parameter tensors.
local function reshard(self, g, to)
  local p, from = g._local, g._sbp
  local function box(t)
    return Bx.box(t, g._shape, g.placement, from, g.placement, to, g._dtype):contiguous():clone()
  end
  local part = autograd.no_grad(function() return box(p:detach()) end)
  part:requires_grad_(p.requires_grad)
  for _, e in ipairs(self._optimizers) do
    local opt = e.opt
    for _, group in ipairs(opt.param_groups) do
      for i, q in ipairs(group.params) do
        if q == p then
          local st = opt.state[p]
          if st then
            autograd.no_grad(function()
              for _, key in ipairs(STATE_KEYS) do
                local t = st[key]
                if is_tensor(t) and t:dim() == p:dim() and t:numel() == p:numel() then st[key] = box(t) end
              end
            end)
            opt.state[part], opt.state[p] = st, nil
          end
          local map = rawget(opt, '_globals')
          if map then
            map[p], map[part] = nil, g
            for j, r in ipairs(map.list or {}) do if r == p then map.list[j] = part end end
          end
          group.params[i] = part
        end
      end
    end
  end
  if self._hyper[p] then self._hyper[part], self._hyper[p] = self._hyper[p], nil end
  rawset(g, '_local', part)
  rawset(g, '_sbp', to)
  GL.note(part, g.placement, to)
end

--- Gives the parameters of the planned calls the plan's SBP.
function M.apply(self, plan)
  for _, st in ipairs(plan.steps) do
    local params, _, names = own_params(st.call.module)
    for _, name in ipairs(names) do
      local g = params[name]
      local nax = #g.placement.hierarchy
      local want = st.sig.params and st.sig.params[name] or (nax == 2 and 'B,B' or 'B')
      if state_of(g._sbp, #g._shape) ~= want then reshard(self, g, sbp_of(want)) end
    end
  end
end

--- While build is traced: each planned call's first tensor argument is
-- boxed to the plan's input state (a module called k times in build takes
-- the plan of its k-th call; gradient accumulation starts over). Returns a
-- function that removes the hooks.
function M.install(plan)
  local per, hooks = {}, {}
  for _, st in ipairs(plan.steps) do
    local m = st.call.module
    if not per[m] then per[m] = {k = 0, list = {}} end
    local l = per[m].list
    l[#l + 1] = st.sig.input
  end
  for m, e in pairs(per) do
    hooks[#hooks + 1] = m:register_forward_pre_hook(function(_, input)
      e.k = e.k % #e.list + 1
      local want = e.list[e.k]
      local x, i = first_tensor(input, table.maxn(input))
      if not is_global(x) or want:find('L', 1, true) then return nil end
      if #axes(want) ~= #x.placement.hierarchy then return nil end
      local nd = #x._shape
      for _, a in ipairs(axes(want)) do
        if a:sub(1, 1) == 'S' and tonumber(a:sub(2)) > nd then return nil end
      end
      if state_of(x._sbp, nd) == want then return nil end
      local sb = sbp_of(want)
      input[i] = x:to_global(x.placement, #sb == 1 and sb[1] or sb)
      return input
    end)
  end
  return function() for _, h in ipairs(hooks) do h.remove() end end
end

local function ms(s) return ('%.3f'):format(s * 1e3) end

--- The plan as text (what enable_auto_parallel prints on the first rank).
function M.format(plan, title)
  local out = {}
  local fig = plan.figures
  out[1] = ('%s: auto-parallel plan on %s (%d ranks), %d module calls; cost model %s%s')
    :format(title, tostring(plan.placement), plan.placement:size(), plan.calls,
            fig.key or 'given', fig.cached and ' (cached)' or (fig.key and ' (measured now)' or ''))
  out[2] = ('  %-24s %-14s %-14s %-26s %8s %8s'):format('module', 'signature', 'in -> out',
           'parameters', 'box ms', 'op ms')
  for _, st in ipairs(plan.steps) do
    local ps = {}
    local names = {}
    for name in pairs(st.sig.params or {}) do names[#names + 1] = name end
    table.sort(names)
    local own = own_params(st.call.module)
    for _, name in ipairs(names) do
      if own[name] then ps[#ps + 1] = name .. ' ' .. show(st.sig.params[name]) end
    end
    out[#out + 1] = ('  %-24s %-14s %-14s %-26s %8s %8s'):format(
      st.call.name .. ' ' .. st.call.type, st.sig.name,
      show(st.sig.input) .. ' -> ' .. show(st.sig.output),
      #ps > 0 and table.concat(ps, ', ') or '-', ms(st.box), ms(st.sig.cost))
  end
  out[#out + 1] = ('  estimated step %s ms; all data parallel %s ms'):format(ms(plan.cost),
    plan.data_parallel and ms(plan.data_parallel) or '-')
  return table.concat(out, '\n') .. '\n'
end

--- A plan as a plain table: {{module =, type =, signature =, input =,
-- output =, params = {name = 'S(1)'}}, ..., cost =, data_parallel =,
-- cached = whether the machine figures came from the cache}.
function M.summary(plan)
  local t = {cost = plan.cost, data_parallel = plan.data_parallel, cached = plan.figures.cached}
  for i, st in ipairs(plan.steps) do
    local ps = {}
    for name in pairs(own_params(st.call.module)) do
      ps[name] = show(st.sig.params and st.sig.params[name] or 'B')   -- 1-D: always given
    end
    t[i] = {module = st.call.name, type = st.call.type, signature = st.sig.name,
            input = show(st.sig.input), output = show(st.sig.output), params = ps, cost = st.sig.cost}
  end
  return t
end

return M
