-- oneflow.distributed.global: global tensors -- one logical tensor laid over
-- a placement by SBP, each rank holding its shard as a local tensor.
--
-- Ops on global tensors: each op declares its SBP signatures beside its Lua
-- binding (T.sbp(name, rule) in lua/oneflow/ops/*.lua, rules built from
-- oneflow.distributed.rules). For each grid axis the runtime picks the
-- signature whose input boxing moves the fewest bytes, boxes the inputs,
-- and runs the op on the shards.
--
-- Autograd runs on the shards. A shard's gradient lives in the dual SBP
-- (broadcast <-> partial_sum, split stays split): then every local op's
-- local backward is already the right global backward, and a boxing's
-- backward is the reverse boxing between the dual SBPs. `g.grad` boxes the
-- gradient back to g's own SBP (a collective: call it on every rank).
local T = require 'oneflow.tensor'
local types = require 'oneflow.types'
local comm = require 'oneflow.distributed.comm'
local PL = require 'oneflow.distributed.placement'
local B = require 'oneflow.distributed.boxing'

local M = {}
local sbp, Placement = PL.sbp, PL.Placement
local is_tensor = T.is_tensor
local methods = T.methods

local G = {}              -- methods of global tensors
local GT = {}             -- their metatable
M.methods, M.metatable = G, GT

local function is_global(x) return type(x) == 'table' and getmetatable(x) == GT end
M.is_global = is_global

local function shape_str(s) return '[' .. table.concat(s, ', ') .. ']' end
local function sbp_str(s)
  local parts = {}
  for i, v in ipairs(s) do parts[i] = tostring(v) end
  return '(' .. table.concat(parts, ', ') .. ')'
end
M.sbp_str = sbp_str

------------------------------------------------------------------ construction
local function new(loc, shape, P, nd_sbp, dtype)
  return setmetatable({_local = loc, _shape = shape, placement = P, _sbp = nd_sbp,
                       _dtype = dtype}, GT)
end

-- sbp argument -> list with one sbp per grid axis, split dims checked
local function check_sbp(op, P, s, shape, level)
  level = (level or 2) + 1
  if PL.is_sbp(s) then s = {s} end
  if type(s) ~= 'table' then
    error(('%s: sbp must be flow.sbp.split(dim), broadcast or partial_sum, or a list of them '
           .. 'for a 2-D placement, got %s'):format(op, type(s)), level)
  end
  if #s ~= #P.hierarchy then
    error(('%s: %d sbp given for a %d-D placement %s'):format(op, #s, #P.hierarchy, tostring(P)), level)
  end
  for k, v in ipairs(s) do
    if not PL.is_sbp(v) then
      error(('%s: sbp %d is not an sbp value (%s)'):format(op, k, tostring(v)), level)
    end
    if v.kind == 'S' and shape then
      local d = B.norm_dim(v.dim, #shape)
      if d < 1 or d > #shape then
        error(('%s: split dim %d out of range for a %d-d tensor of shape %s')
              :format(op, v.dim, #shape, shape_str(shape)), level)
      end
      if v.dim < 0 then s[k] = sbp.split(d) end
    end
  end
  return s
end

local function check_placement(op, P, level)
  if getmetatable(P) ~= Placement then
    error(('%s: expected a placement from flow.placement, got %s'):format(op, type(P)), (level or 2) + 1)
  end
  if P.type == 'cuda' and not require('oneflow.cuda').is_available() then
    error(('%s: placement type "cuda" needs a usable GPU on every rank: %s; use "cpu"')
          :format(op, require('oneflow.cuda').why_unavailable()), (level or 2) + 1)
  end
end

-- x on the device of P's shards (a differentiable copy when it is not).
local function on_placement(x, P)
  local d = P:device()
  if x.device == d then return x end
  return x:to(d)
end

-- The logical shape from each rank's shard (split dims add up). Collective
-- over the placement when some axis splits.
local function logical_shape(x, P, s)
  local shape = x:size():totable()
  local any = false
  for _, v in ipairs(s) do if v.kind == 'S' then any = true end end
  if not any then return shape end
  local shapes = comm.gather_shapes(x:contiguous(), P:group())
  -- sum the shard sizes along each split dim over the ranks that differ in
  -- that axis only (coordinate 0 on the other axes)
  local res = {}
  for i = 1, #shape do res[i] = shapes[1][i] end
  for k, v in ipairs(s) do
    if v.kind == 'S' then
      local d = v.dim
      local total = 0
      for c = 0, P.hierarchy[k] - 1 do
        local idx = #P.hierarchy == 1 and c or (k == 1 and c * P.hierarchy[2] or c)
        total = total + shapes[idx + 1][d]
      end
      res[d] = total
    end
  end
  return res
end

------------------------------------------------------------------ autograd-aware boxing
local Boxing = require('oneflow.autograd').Function:subclass('Boxing')
function Boxing.forward(ctx, x, spec)
  ctx.spec = spec
  return B.box(x, spec.shape, spec.P1, spec.s1, spec.P2, spec.s2, spec.dtype)
end
local function dual_all(s)
  local d = {}
  for k, v in ipairs(s) do d[k] = PL.dual(v) end
  return d
end
function Boxing.backward(ctx, g)
  local sp = ctx.spec
  return B.box(g, sp.shape, sp.P2, dual_all(sp.s2), sp.P1, dual_all(sp.s1), sp.dtype), nil
end

local function box_local(x, shape, P1, s1, P2, s2, dtype)
  if x.requires_grad and require('oneflow.autograd').is_grad_enabled() then
    return Boxing.apply(x, {shape = shape, P1 = P1, s1 = s1, P2 = P2, s2 = s2, dtype = dtype})
  end
  return B.box(x, shape, P1, s1, P2, s2, dtype)
end

--- g:to_global(P2, sbp2): re-placement and re-SBP (differentiable).
local function global_to_global(g, P2, s2)
  check_placement('to_global', P2, 3)
  s2 = check_sbp('to_global', P2, s2, g._shape, 3)
  local src = g._local
  if P2.type ~= g.placement.type then src = on_placement(src, P2) end
  local loc = box_local(src, g._shape, g.placement, g._sbp, P2, s2, g._dtype)
  return new(loc, g._shape, P2, s2, g._dtype)
end

--- x:to_global(P, sbp) for a local x: x is this rank's shard. Broadcast
-- assumes every rank holds the same x; split shards may differ in size
-- (the logical shape is gathered). Ranks outside P give an empty shard.
local function local_to_global(x, P, s)
  check_placement('to_global', P, 3)
  s = check_sbp('to_global', P, s, x:size():totable(), 3)
  M.install()
  x = on_placement(x, P)
  if not P:has_me() then
    -- outside P the data is ignored; x gives the logical shape
    return new(B.empty(x), x:size():totable(), P, s, x.dtype)
  end
  local shape = logical_shape(x, P, s)
  return new(x, shape, P, s, x.dtype)
end

function methods.to_global(x, P, s)
  if P == nil and s == nil then error('to_global: expected a placement and an sbp', 2) end
  return local_to_global(x, P, s)
end

--- Makes a global tensor from the full logical tensor `full`, the same on
-- every rank of P (factories, flow.tensor).
function M.from_full(full, P, s)
  check_placement('global tensor', P, 3)
  s = check_sbp('global tensor', P, s, full:size():totable(), 3)
  M.install()
  full = on_placement(full, P)
  local shape = full:size():totable()
  local b = {}
  for k = 1, #s do b[k] = sbp.broadcast end
  if not P:has_me() then return new(B.empty(full), shape, P, s, full.dtype) end
  local loc = B.box(full, shape, P, b, P, s, full.dtype)
  if loc == full and full.requires_grad then loc = full:detach() end
  return new(loc, shape, P, s, full.dtype)
end

------------------------------------------------------------------ properties
local getters = {}
getters.shape = function(g) return types.Size(g._shape) end
getters.sbp = function(g)
  return setmetatable(g._sbp, {__tostring = sbp_str})
end
getters.dtype = function(g) return g._dtype end
getters.device = function(g) return g._local.device end
getters.is_global = function() return true end
getters.is_local = function() return false end
getters.ndim = function(g) return #g._shape end
getters.requires_grad = function(g) return g._local.requires_grad end
getters.is_leaf = function(g) return g._local.is_leaf end
getters.grad = function(g)
  local lg = g._local.grad
  -- nil everywhere or nowhere: the gradient flowed on every rank of P
  if lg == nil then return nil end
  local d = dual_all(g._sbp)
  return new(B.box(lg, g._shape, g.placement, d, g.placement, g._sbp, g._dtype), g._shape,
             g.placement, g._sbp, g._dtype)
end
getters.T = function(g) return g:transpose(1, 2) end

GT.__index = function(g, k)
  local m = G[k]
  if m ~= nil then return m end
  local get = getters[k]
  if get then return get(g) end
  if methods[k] then
    return function()
      error(('%s: not supported on global tensors yet (no SBP rule); use :to_local() '
             .. 'or convert with :to_global'):format(k), 2)
    end
  end
  return nil
end
GT.__newindex = function(g, k, v)
  if k == 'requires_grad' then g._local.requires_grad = v return end
  if k == 'grad' then
    if v == nil then g._local.grad = nil return end
    local d = dual_all(g._sbp)
    g._local.grad = B.box(v._local, g._shape, v.placement, v._sbp, g.placement, d, g._dtype)
    return
  end
  rawset(g, k, v)
end

function G.size(g, d)
  if d == nil then return types.Size(g._shape) end
  if d < 0 then d = d + #g._shape + 1 end
  local v = g._shape[d]
  if v == nil then error(('size: dim %d out of range for a %d-d tensor'):format(d, #g._shape), 2) end
  return v
end
function G.dim(g) return #g._shape end
function G.numel(g)
  local n = 1
  for _, v in ipairs(g._shape) do n = n * v end
  return n
end
function G.to_local(g) return g._local end
function G.to_global(g, P, s) return global_to_global(g, P, s) end
function G.requires_grad_(g, on)
  g._local:requires_grad_(on == nil or on)
  return g
end
function G.detach(g) return new(g._local:detach(), g._shape, g.placement, g._sbp, g._dtype) end
function G.is_contiguous() return true end
function G.element_size(g) return g._local:element_size() end
function G.is_floating_point(g) return g._local:is_floating_point() end
function G.zero_(g) g._local:zero_() return g end
function G.clone(g) return new(g._local:clone(), g._shape, g.placement, g._sbp, g._dtype) end
function G.to(g, dt)
  return new(g._local:to(dt), g._shape, g.placement, g._sbp, types.dtype(dt, 2))
end
G.float = function(g) return G.to(g, 'float32') end
G.double = function(g) return G.to(g, 'float64') end

-- Full value as a local tensor on every rank of P (a collective).
function G.full_local(g)
  local b = {}
  for k = 1, #g._sbp do b[k] = sbp.broadcast end
  if not g.placement:has_me() then return nil end
  return B.box(g._local, g._shape, g.placement, g._sbp, g.placement, b, g._dtype)
end
function G.totable(g)
  local f = g:full_local()
  return f and f:totable()
end
function G.item(g)
  local f = g:full_local()
  return f and f:item()
end
function G.numpy() error('numpy: not available in Lua; use :totable()', 2) end

--- g:backward([grad]): the seed is ones in g's dual SBP (or grad, a global
-- tensor, boxed there).
function G.backward(g, grad, opts)
  if type(grad) == 'table' and not is_global(grad) then opts, grad = grad, nil end
  if not g.placement:has_me() then return end
  local d = dual_all(g._sbp)
  local seed
  if grad then
    seed = B.box(grad._local, g._shape, grad.placement, grad._sbp, g.placement, d, g._dtype)
  else
    local full = T.flow.ones(g._shape, {dtype = g._dtype, device = g._local.device})
    local b = {}
    for k = 1, #d do b[k] = sbp.broadcast end
    seed = B.box(full, g._shape, g.placement, b, g.placement, d, g._dtype)
  end
  methods.backward(g._local, seed, opts)
end

GT.__tostring = function(g)
  local f = g:full_local()
  local body = f and tostring(f) or ('tensor(<rank %d is outside the placement>)')
                                     :format(comm.env.get_rank())
  return body:gsub('%)$', '') .. (', placement=%s, sbp=%s)'):format(tostring(g.placement),
                                                                     sbp_str(g._sbp))
end
GT.__len = function(g) return g._shape[1] end

------------------------------------------------------------------ ops
local function cost(from, to, bytes, n)
  if from == to then return 0 end
  if to.kind == 'B' then
    if from.kind == 'S' then return bytes * (n - 1) / n end
    return 2 * bytes * (n - 1) / n
  end
  if to.kind == 'S' then
    if from.kind == 'B' then return 0 end
    if from.kind == 'P' then return bytes * (n - 1) / n end
    return bytes * (n - 1) / (n * n)
  end
  if from.kind == 'B' then return 1 end   -- B -> P: local, but wastes memory
  return bytes / n                        -- S -> P: a zero-padded copy
end

-- Global inputs of a call, in order; tensors inside list arguments (cat)
-- count too.
local function collect(args, n)
  local list, where = {}, {}
  for i = 1, n do
    local a = args[i]
    if is_global(a) then
      list[#list + 1] = a
      where[#where + 1] = {i}
    elseif type(a) == 'table' and getmetatable(a) == nil then
      for j, v in ipairs(a) do
        if is_global(v) then
          list[#list + 1] = v
          where[#where + 1] = {i, j}
        elseif is_tensor(v) then
          error('cannot mix local and global tensors in one op; convert with :to_global', 4)
        end
      end
    elseif is_tensor(a) then
      error('cannot mix local and global tensors in one op; convert the local one with '
            .. ':to_global(placement, sbp)', 4)
    end
  end
  return list, where
end

local function copy_args(args, n)
  local c = {}
  for i = 1, n do
    local a = args[i]
    if type(a) == 'table' and getmetatable(a) == nil then
      local t = {}
      for k, v in pairs(a) do t[k] = v end
      c[i] = t
    else
      c[i] = a
    end
  end
  return c
end

local function fake_shard(g, s)
  local c = {}
  for k = 1, #g.placement.hierarchy do c[k] = 0 end
  local shape = B.shard(g._shape, g.placement.hierarchy, s, c)
  return T.flow.zeros({1}, {dtype = g._dtype, device = g._local.device}):expand(shape)
end

-- Logical size of an output's split dims from an input with the same
-- split pattern and the same local size.
local function infer_shape(out_local, out_sbp, ins, in_sbps, in_locals)
  local shape = out_local:size():totable()
  for d = 1, #shape do
    local axes = {}
    for k, v in ipairs(out_sbp) do
      if v.kind == 'S' and B.norm_dim(v.dim, #shape) == d then axes[#axes + 1] = k end
    end
    if #axes > 0 then
      local found
      for i, g in ipairs(ins) do
        for e = 1, #g._shape do
          local ok = in_locals[i]:size(e) == shape[d]
          for k = 1, #out_sbp do
            local v = in_sbps[i][k]
            local is_e = v.kind == 'S' and B.norm_dim(v.dim, #g._shape) == e
            local want = false
            for _, a in ipairs(axes) do if a == k then want = true end end
            if is_e ~= want then ok = false end
          end
          if ok then found = g._shape[e] break end
        end
        if found then break end
      end
      if not found then
        error('global op: cannot tell the logical size of output dim ' .. d
              .. '; the op needs an out_shape in its SBP rule', 4)
      end
      shape[d] = found
    end
  end
  return shape
end

local function dispatch(name, rule, orig, ...)
  local n = select('#', ...)
  local args = {...}
  local ins, where = collect(args, n)
  local P = ins[1].placement
  for i = 2, #ins do
    if ins[i].placement ~= P then
      error(('%s: inputs are on different placements: %s and %s; move one with :to_global')
            :format(name, tostring(P), tostring(ins[i].placement)), 3)
    end
  end
  local shapes = {}
  for i, g in ipairs(ins) do shapes[i] = g._shape end
  local ctx = {name = name, shapes = shapes, args = args, n = n, ins = ins}
  local sigs = rule(ctx)
  if type(sigs) == 'string' then error(name .. ': ' .. sigs, 3) end
  -- per grid axis, the cheapest signature for the inputs' current sbp
  local chosen = {}
  for k = 1, #P.hierarchy do
    local best, best_cost = nil, math.huge
    for _, sig in ipairs(sigs) do
      local c = 0
      for i, g in ipairs(ins) do
        c = c + cost(g._sbp[k], sig.ins[i], G.numel(g) * g._local:element_size(), P.hierarchy[k])
      end
      if c < best_cost then best, best_cost = sig, c end
    end
    chosen[k] = best
  end
  local in_sbps = {}
  for i = 1, #ins do
    local s = {}
    for k = 1, #P.hierarchy do s[k] = chosen[k].ins[i] end
    in_sbps[i] = s
  end
  local inside = P:has_me()
  local locals = {}
  for i, g in ipairs(ins) do
    if inside then
      locals[i] = box_local(g._local, g._shape, P, g._sbp, P, in_sbps[i], g._dtype)
    else
      locals[i] = fake_shard(g, in_sbps[i])
    end
  end
  local largs = copy_args(args, n)
  for i, w in ipairs(where) do
    if #w == 1 then largs[w[1]] = locals[i] else largs[w[1]][w[2]] = locals[i] end
  end
  local sig1 = chosen[1]
  local outs
  local function run()
    if sig1.call then return {sig1.call(orig, largs, ctx, chosen, P)} end
    return {orig(unpack(largs, 1, n))}
  end
  if inside then outs = run()
  else outs = require('oneflow.autograd').no_grad(run) end
  local res = {}
  for o, out in ipairs(outs) do
    if is_tensor(out) then
      local s = {}
      for k = 1, #P.hierarchy do s[k] = chosen[k].out[o] or chosen[k].out[1] end
      local shape = sig1.out_shape and sig1.out_shape[o]
                    or infer_shape(out, s, ins, in_sbps, locals)
      res[o] = new(inside and out or B.empty(out), shape, P, s, out.dtype)
    else
      res[o] = out
    end
  end
  return unpack(res, 1, #outs)
end
M.dispatch = dispatch

------------------------------------------------------------------ installing
local installed = false
local flow_table

--- Wraps every op that declares an SBP rule so that global arguments go
-- through dispatch. Done when the first global tensor is made, so programs
-- without global tensors pay nothing.
function M.install()
  if installed then return end
  installed = true
  for name, rule in pairs(T.sbp_rules) do
    local fm, ff = methods[name], flow_table and flow_table[name]
    local orig = fm or ff
    if orig then
      local function wrapped(...)
        local n = select('#', ...)
        for i = 1, n do
          local a = select(i, ...)
          if type(a) == 'table' then
            if getmetatable(a) == GT then return dispatch(name, rule, orig, ...) end
            if getmetatable(a) == nil and is_global(a[1]) then
              return dispatch(name, rule, orig, ...)
            end
          end
        end
        return orig(...)
      end
      G[name] = function(...) return dispatch(name, rule, orig, ...) end
      if fm then methods[name] = wrapped end
      if ff and T.flow[name] == ff then T.flow[name] = wrapped end
      if ff then flow_table[name] = wrapped end
    end
  end
  local function op(name)
    return function(a, b)
      local f = flow_table[name]
      return f(a, b)
    end
  end
  GT.__add, GT.__sub, GT.__mul, GT.__div, GT.__pow = op('add'), op('sub'), op('mul'), op('div'),
                                                      op('pow')
  GT.__unm = function(a) return flow_table.neg(a) end
end

------------------------------------------------------------------ factories
local factories = {'zeros', 'ones', 'full', 'empty', 'rand', 'randn', 'randint', 'arange',
                   'linspace', 'eye', 'tensor', 'normal'}
local random = {rand = true, randn = true, randint = true, normal = true, empty = false}

-- flow.randn(2, 3, {placement = P, sbp = S}): the full tensor is made on the
-- first rank of P (random ones broadcast from there) and cut per sbp.
local function wrap_factory(name, f)
  return function(...)
    local n = select('#', ...)
    local last = select(n, ...)
    if type(last) ~= 'table' or getmetatable(last) ~= nil or last.placement == nil then
      return f(...)
    end
    local P, s = last.placement, last.sbp
    if s == nil then error(name .. ': sbp is required with placement', 2) end
    check_placement(name, P, 2)
    local o = {}
    for k, v in pairs(last) do if k ~= 'placement' and k ~= 'sbp' then o[k] = v end end
    local args = {...}
    args[n] = o
    local full = f(unpack(args, 1, n))
    if random[name] and P:has_me() then comm.broadcast(full, 0, {group = P:group()}) end
    local g = M.from_full(full, P, s)
    if o.requires_grad then g._local:requires_grad_(true) end
    return g
  end
end

function M.attach(flow)
  flow_table = flow
  for _, name in ipairs(factories) do
    if flow[name] then flow[name] = wrap_factory(name, flow[name]) end
  end
  flow.placement = PL.placement
  flow.sbp = sbp
  flow.is_global = is_global
  T.getters.is_global = function() return false end
  T.getters.is_local = function() return true end
end

return M
