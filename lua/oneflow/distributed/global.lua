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
local A = require 'oneflow._args'
local comm = require 'oneflow.distributed.comm'
local PL = require 'oneflow.distributed.placement'
local B = require 'oneflow.distributed.boxing'

local M = {}
local sbp, Placement = PL.sbp, PL.Placement
local is_tensor = T.is_tensor
local methods = T.methods

local G = {}              -- methods of global tensors
local GT = A.value_type({})             -- their metatable
M.methods, M.metatable = G, GT

local function is_global(x) return type(x) == 'table' and getmetatable(x) == GT end
--- x:is_global(): true for a global (distributed, placement + SBP) tensor.
-- @function flow.is_global
M.is_global = is_global

local function sbp_str(s)
  local parts = {}
  for i, v in ipairs(s) do parts[i] = tostring(v) end
  return '(' .. table.concat(parts, ', ') .. ')'
end
M.sbp_str = sbp_str

------------------------------------------------------------------ construction
-- While nn.Graph traces build(), every global tensor made tells the tracer
-- its shard's placement and SBP (shown by graph:debug).
local C_ = require('oneflow._C').C
local function note(loc, P, nd_sbp)
  if C_.of_tracing() == 0 or not T.is_tensor(loc) then return end
  local parts = {}
  for k, v in ipairs(nd_sbp) do parts[k] = v.kind == 'S' and ('S(' .. v.dim .. ')') or v.kind end
  local r = {}
  for i, q in ipairs(P.ranks) do r[i] = q end
  local grid = #P.hierarchy == 2 and (' grid ' .. P.hierarchy[1] .. 'x' .. P.hierarchy[2]) or ''
  C_.of_trace_note(loc.p, ('sbp=(%s) placement=%s:%s%s'):format(table.concat(parts, ', '),
                   P.type, table.concat(r, ','), grid))
end
M.note = note

local function new(loc, shape, P, nd_sbp, dtype)
  note(loc, P, nd_sbp)
  return setmetatable({_local = loc, _shape = shape, placement = P, _sbp = nd_sbp,
                       _dtype = dtype}, GT)
end
--- A global tensor over this rank's shard `loc` (no communication; the
-- caller vouches for shape, placement and sbp). nn.Graph rebuilds its
-- global results with it.
M.new = new

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
              :format(op, v.dim, #shape, A.shape_str(shape, ', ')), level)
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

-- The logical shape from the shards' shapes (shapes[i]: that of the i-th
-- rank of P): a split dim adds up over the ranks at coordinate 0 on the
-- axes that do not split it (nested splits of one dim add up too).
local function coord_at(P, i)
  if #P.hierarchy == 1 then return {i - 1} end
  return {math.floor((i - 1) / P.hierarchy[2]), (i - 1) % P.hierarchy[2]}
end

local function combine_shapes(op, shapes, P, s, level)
  local res = {}
  for i = 1, #shapes[1] do res[i] = shapes[1][i] end
  local by_dim = {}
  for k, v in ipairs(s) do
    if v.kind == 'S' then
      by_dim[v.dim] = by_dim[v.dim] or {}
      by_dim[v.dim][k] = true
    end
  end
  for d, axes in pairs(by_dim) do
    local total = 0
    for i, sh in ipairs(shapes) do
      local c, first = coord_at(P, i), true
      for k = 1, #P.hierarchy do
        if not axes[k] and c[k] ~= 0 then first = false end
      end
      if first then total = total + (sh[d] or 0) end
    end
    res[d] = total
  end
  -- every shard must be the one the split gives (boxing relies on it)
  for i, sh in ipairs(shapes) do
    local want = B.shard(res, P.hierarchy, s, coord_at(P, i))
    local ok = #sh == #want
    for d = 1, #want do if sh[d] ~= want[d] then ok = false end end
    if not ok then
      error(('%s: the shards do not fit together: rank %d gives %s, but the logical shape %s '
             .. 'split as %s gives it %s (only split dims may differ, and the first size %% n '
             .. 'ranks get one more)'):format(op, P.ranks[i], A.shape_str(sh, ', '), A.shape_str(res, ', '),
             sbp_str(s), A.shape_str(want, ', ')), level + 1)
    end
  end
  return res
end

-- Each world rank's shape and dtype code (one small all-gather).
local function gather_meta(x)
  local ffi = require 'ffi'
  local buf = ffi.new('int64_t[10]')
  buf[0], buf[1] = x:dim(), require('oneflow._C').C.of_tensor_dtype(x.p)
  for i = 1, math.min(x:dim(), 8) do buf[i + 1] = x:size(i) end
  local info = T.flow.from_blob(buf, {10}, {dtype = 'int64'})
  local all = comm.all_gather_flat(info, nil, {group = comm.world()})
  local p = ffi.cast('int64_t*', all:data_ptr())
  local res = {}
  for r = 0, comm.env.get_world_size() - 1 do
    local sh = {}
    for i = 1, tonumber(p[r * 10]) do sh[i] = tonumber(p[r * 10 + i + 1]) end
    res[r + 1] = {shape = sh, dtype = types.dtypes[tonumber(p[r * 10 + 1])]}
  end
  return res
end
------------------------------------------------------------------ debug checks
-- flow.env.set_debug(true) (or OF_DIST_DEBUG=1): every global op, boxing
-- and backward first checks over the world that every rank is at the same
-- op (name and sequence number), and local op failures are reported on
-- every rank, so an op called on some ranks but not others fails with both
-- names instead of pairing up mismatched collectives.
-- The name of the global op this rank is in goes with every collective it
-- makes, so errors and timeout reports say "all_gather (in conv2d)".
local set_label = require('oneflow._C').C.of_dist_set_label
M.set_label = set_label

local debug_on = os.getenv('OF_DIST_DEBUG') == '1'
local debug_seq = 0
function comm.env.set_debug(on) debug_on = on and true or false end
function comm.env.get_debug() return debug_on end

local NAME_BYTES = 48
local function gather_text(text)
  local w = comm.world()
  local buf = T.flow.zeros({NAME_BYTES + 8}, {dtype = 'uint8'})
  local ffi = require 'ffi'
  local p = ffi.cast('uint8_t*', buf:data_ptr())
  local str = text:sub(1, NAME_BYTES)
  ffi.copy(p + 8, str, #str)
  local seq = debug_seq
  for i = 0, 7 do p[i] = math.floor(seq / 2 ^ (8 * i)) % 256 end
  local flat = comm.all_gather_flat(buf, nil, {group = w})
  local q = ffi.cast('uint8_t*', flat:data_ptr())
  local res = {}
  for r = 0, w.size - 1 do
    local base = r * (NAME_BYTES + 8)
    local v = 0
    for i = 7, 0, -1 do v = v * 256 + q[base + i] end
    local s = ffi.string(q + base + 8, NAME_BYTES):gsub('%z+$', '')
    res[r + 1] = {seq = v, text = s}
  end
  return res
end

local function debug_enter(what, level)
  if not debug_on or comm.env.get_world_size() == 1 then return end
  debug_seq = debug_seq + 1
  local all = gather_text(what)
  local me = all[comm.env.get_rank() + 1]
  for r, v in ipairs(all) do
    if v.seq ~= me.seq or v.text ~= me.text then
      local parts = {}
      for q, u in ipairs(all) do
        parts[q] = ('rank %d is at %s (global op #%d)'):format(q - 1, u.text, u.seq)
      end
      error(('global op mismatch (flow.env debug check): %s. Every rank must run the same '
             .. 'global ops in the same order, also ranks outside the placement; first '
             .. 'difference: rank %d'):format(table.concat(parts, '; '), r - 1), level + 1)
    end
  end
end
M.debug_enter = debug_enter

-- In debug mode a local failure is shared: every rank raises, naming it.
local function debug_run(name, fn)
  if not debug_on or comm.env.get_world_size() == 1 then return fn() end
  local res = {pcall(fn)}
  local msg = res[1] and '' or ('!' .. tostring(res[2]))
  local all = gather_text(msg)
  for r, v in ipairs(all) do
    if v.text ~= '' then
      if not res[1] then error(res[2], 0) end
      error(('%s: failed on rank %d: %s'):format(name, r - 1, v.text:sub(2)), 0)
    end
  end
  return unpack(res, 2, table.maxn(res))
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

-- Differentiable placement changes whose target leaves this rank out: the
-- loss's backward never reaches them here, yet their backward is a
-- collective the target's ranks join. G.backward runs them (newest first,
-- the order the engine runs nodes in) on every rank.
local pending = {}

local function box_local(x, shape, P1, s1, P2, s2, dtype)
  if x.requires_grad and require('oneflow.autograd').is_grad_enabled() then
    local y = Boxing.apply(x, {shape = shape, P1 = P1, s1 = s1, P2 = P2, s2 = s2, dtype = dtype})
    if P1 ~= P2 and not P2:has_me() then pending[#pending + 1] = y end
    return y
  end
  return B.box(x, shape, P1, s1, P2, s2, dtype)
end

--- g:to_global(P2, sbp2): re-placement and re-SBP (differentiable).
local function global_to_global(g, P2, s2)
  check_placement('to_global', P2, 3)
  set_label('to_global')
  debug_enter('to_global', 3)
  s2 = check_sbp('to_global', P2, s2, g._shape, 3)
  local src = g._local
  if P2.type ~= g.placement.type then src = on_placement(src, P2) end
  local loc = box_local(src, g._shape, g.placement, g._sbp, P2, s2, g._dtype)
  set_label(nil)
  return new(loc, g._shape, P2, s2, g._dtype)
end

--- x:to_global(P, sbp) for a local x: x is this rank's shard. Broadcast
-- assumes every rank holds the same x; split shards may differ in size
-- (the logical shape is gathered). Every rank calls it; ranks outside P
-- get an empty shard, and the logical shape and dtype from P's ranks (one
-- small all-gather over the world when P is not all of it).
local function local_to_global(x, P, s)
  check_placement('to_global', P, 3)
  M.install()
  x = on_placement(x, P)
  set_label('to_global')
  debug_enter('to_global', 3)
  if #P.ranks < comm.env.get_world_size() then
    local meta = gather_meta(x)
    local shapes = {}
    for i, r in ipairs(P.ranks) do shapes[i] = meta[r + 1].shape end
    local dtype = meta[P.ranks[1] + 1].dtype
    s = check_sbp('to_global', P, s, shapes[1], 3)
    local shape = combine_shapes('to_global', shapes, P, s, 3)
    if not P:has_me() then
      return new(T.flow.empty({0}, {dtype = dtype, device = P:device()}), shape, P, s, dtype)
    end
    return new(x, shape, P, s, x.dtype)
  end
  s = check_sbp('to_global', P, s, x:size():totable(), 3)
  local any = false
  for _, v in ipairs(s) do if v.kind == 'S' then any = true end end
  if not any then return new(x, x:size():totable(), P, s, x.dtype) end
  local shapes = comm.gather_shapes(x:contiguous(), P:group())
  return new(x, combine_shapes('to_global', shapes, P, s, 3), P, s, x.dtype)
end

--- x:to_global({placement =, sbp =}): a global tensor with that placement and SBP (communicates as needed).
function methods.to_global(x, P, s)
  if P == nil and s == nil then error('to_global: expected a placement and an sbp', 2) end
  local g = local_to_global(x, P, s)
  set_label(nil)
  return g
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
  set_label('backward')
  debug_enter('backward', 2)
  local list = pending
  pending = {}
  local function run_pending()
    for i = #list, 1, -1 do
      local y = list[i]
      methods.backward(y, y:detach():zero_(), opts)
    end
  end
  if not g.placement:has_me() then
    run_pending()
    set_label(nil)
    return
  end
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
  run_pending()
  set_label(nil)
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

local function plain(a) return type(a) == 'table' and getmetatable(a) == nil end

local function key_order(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return ta == 'number' end
  return a < b
end

local MIX = 'cannot mix local and global tensors in one op; convert the local one with '
            .. ':to_global(placement, sbp)'

-- Global inputs of a call, in order; tensors inside list arguments (cat)
-- and option tables ({weight =, bias =}: keys in sorted order) count too.
-- where[j] = {i} or {i, key}; roles[j] = i, or the option's name.
local function collect(name, args, n)
  local list, where, roles = {}, {}, {}
  for i = 1, n do
    local a = args[i]
    if is_global(a) then
      list[#list + 1] = a
      where[#where + 1] = {i}
      roles[#roles + 1] = i
    elseif plain(a) then
      local keys = {}
      for k, v in pairs(a) do
        if is_global(v) then keys[#keys + 1] = k
        elseif is_tensor(v) then error(name .. ': ' .. MIX .. ' (argument ' .. i .. ')', 4) end
      end
      table.sort(keys, key_order)
      for _, k in ipairs(keys) do
        list[#list + 1] = a[k]
        where[#where + 1] = {i, k}
        roles[#roles + 1] = type(k) == 'string' and k or i
      end
    elseif is_tensor(a) then
      error(name .. ': ' .. MIX .. ' (argument ' .. i .. ')', 4)
    end
  end
  return list, where, roles
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

-- The ranks of P along the grid axes where pred(chosen sbp of that axis)
-- holds (other coordinates fixed): the group a rule's own collective runs
-- in. nil when no axis qualifies or this rank is outside P.
local function axes_group(P, chosen, pred)
  if not P:has_me() then return nil end
  local on = {}
  for k = 1, #P.hierarchy do on[k] = pred(chosen[k]) and true or false end
  if #P.hierarchy == 1 then return on[1] and P:group() or nil end
  if on[1] and on[2] then return P:group() end
  if on[1] then return P:axis_group(1) end
  if on[2] then return P:axis_group(2) end
  return nil
end
M.axes_group = axes_group

-- The group spanning the grid axes where the chosen signature splits the
-- first input on a dim other than `except` (the ranks holding different
-- samples: batch statistics and loss means sum over it), or nil.
function M.sample_group(P, chosen, except)
  return axes_group(P, chosen, function(sg)
    local v = sg.ins[1]
    return v.kind == 'S' and v.dim ~= except
  end)
end

-- t summed in place over group g (nothing when g is nil); returns t.
function M.all_reduce_in(t, g)
  if g then require('oneflow.distributed.comm').all_reduce(t, {group = g}) end
  return t
end

local function dispatch(name, rule, orig, ...)
  local n = select('#', ...)
  local args = {...}
  local ins, where, roles = collect(name, args, n)
  set_label(name)
  debug_enter(name, 3)
  local P = ins[1].placement
  for i = 2, #ins do
    if ins[i].placement ~= P then
      error(('%s: inputs are on different placements: %s and %s; move one with :to_global')
            :format(name, tostring(P), tostring(ins[i].placement)), 3)
    end
  end
  local shapes = {}
  for i, g in ipairs(ins) do shapes[i] = g._shape end
  local ctx = {name = name, shapes = shapes, args = args, n = n, ins = ins, where = where,
               roles = roles, P = P}
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
  ctx.in_sbps = in_sbps
  local inside = P:has_me()
  local autograd = require 'oneflow.autograd'
  local wants_grad = false
  if autograd.is_grad_enabled() then
    for _, g in ipairs(ins) do if g._local.requires_grad then wants_grad = true end end
  end
  local locals = {}
  for i, g in ipairs(ins) do
    if inside then
      locals[i] = box_local(g._local, g._shape, P, g._sbp, P, in_sbps[i], g._dtype)
    else
      locals[i] = fake_shard(g, in_sbps[i])
    end
  end
  ctx.locals = locals
  local largs = copy_args(args, n)
  for i, w in ipairs(where) do
    if #w == 1 then largs[w[1]] = locals[i] else largs[w[1]][w[2]] = locals[i] end
  end
  -- the first axis whose signature brings its own call runs it (a call
  -- sees every axis's choice)
  local call, out_shape
  for k = 1, #P.hierarchy do
    call = call or chosen[k].call
    out_shape = out_shape or chosen[k].out_shape
  end
  local outs
  local function run()
    if call then return {call(orig, largs, ctx, chosen, P)} end
    return {orig(unpack(largs, 1, n))}
  end
  if inside then outs = debug_run(name, function() return run() end)
  else outs = autograd.no_grad(run) end
  local res = {}
  for o, out in ipairs(outs) do
    if is_tensor(out) then
      local s = {}
      for k = 1, #P.hierarchy do s[k] = chosen[k].out[o] or chosen[k].out[1] end
      local shape = out_shape and out_shape[o] or infer_shape(out, s, ins, in_sbps, locals)
      local loc = out
      if not inside then
        -- an empty stand-in; it takes part in autograd (as a leaf) so that
        -- a later placement change back to this rank records its backward
        loc = B.empty(out)
        if wants_grad and out:is_floating_point() then loc:requires_grad_(true) end
      end
      res[o] = new(loc, shape, P, s, out.dtype)
    else
      res[o] = out
    end
  end
  set_label(nil)
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
    -- the method and flow.<name> may differ (x:where(c, y) vs
    -- flow.where(c, x, y)): each wrapper falls back to its own function
    local function wrap(orig)
      return function(...)
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
    end
    local orig = fm or ff
    if orig then G[name] = function(...) return dispatch(name, rule, orig, ...) end end
    if fm then methods[name] = wrap(fm) end
    if ff then
      local w = wrap(ff)
      if T.flow[name] == ff then T.flow[name] = w end
      flow_table[name] = w
    end
  end
  -- nn.functional ops declared with T.sbp_fn
  T.global_call = function(name, rule, fn, ...)
    for i = 1, select('#', ...) do
      local a = select(i, ...)
      if type(a) == 'table' then
        local mt = getmetatable(a)
        if mt == GT then return dispatch(name, rule, fn, ...) end
        if mt == nil then
          for _, v in pairs(a) do
            if getmetatable(v) == GT then return dispatch(name, rule, fn, ...) end
          end
        end
      end
    end
    return fn(...)
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
