-- oneflow.nn.parallel_global: training modules whose parameters are global
-- tensors -- data parallel (batch split, parameters broadcast), tensor model
-- parallel (Linear weights split by rows or columns) and 2-D hybrids, all
-- from the SBP of the parameters and of the input.
--
--   net:to_global(P, flow.sbp.broadcast)                       -- every parameter
--   net:to_global(P, function(name, p) ... return sbp end)     -- per parameter
--   flow.nn.parallel.linear_sbp('column' | 'row' | 'data')     -- common choices
--
-- Optimizers take the global parameters (oneflow.optim.optimizer): each
-- rank updates its shard with the gradient boxed to the parameter's SBP.
local T = require 'oneflow.tensor'
local autograd = require 'oneflow.autograd'
local module = require 'oneflow.nn.module'
local U = require 'oneflow.nn._util'

local fail = U.fail
local M = {}

local function G() return require 'oneflow.distributed.global' end
local function PL() return require 'oneflow.distributed.placement' end

------------------------------------------------------------------ SBP rules
-- transpose / t: a split dim follows the swap. Registered here unless the
-- op already declares one (oneflow.ops.views may, later).
local function swap_rule(ctx)
  local S = PL().sbp.split
  local Bc, Ps = PL().sbp.broadcast, PL().sbp.partial_sum
  local nd = #ctx.shapes[1]
  local d0, d1
  if ctx.name == 't' then
    if nd < 2 then return {{ins = {Bc}, out = {Bc}}, {ins = {Ps}, out = {Ps}},
                           {ins = {S(1)}, out = {S(1)}}} end
    d0, d1 = 1, 2
  else
    d0, d1 = ctx.args[2], ctx.args[3]
    if type(d0) ~= 'number' or type(d1) ~= 'number' then return 'expected two dims' end
    if d0 < 0 then d0 = d0 + nd + 1 end
    if d1 < 0 then d1 = d1 + nd + 1 end
  end
  local sigs = {{ins = {Bc}, out = {Bc}}, {ins = {Ps}, out = {Ps}}}
  for d = 1, nd do
    local e = d == d0 and d1 or (d == d1 and d0 or d)
    sigs[#sigs + 1] = {ins = {S(d)}, out = {S(e)}}
  end
  return sigs
end
for _, name in ipairs({'t', 'transpose'}) do
  if not T.sbp_rules[name] then T.sbp(name, swap_rule) end
end

------------------------------------------------------------------ modules
-- sbp spec -> function(name, p) -> sbp list or value
local function sbp_fn(spec)
  if type(spec) == 'function' then return spec end
  if type(spec) == 'table' and getmetatable(spec) == nil and spec[1] == nil then
    return function(name) return spec[name] end
  end
  return function() return spec end
end

local function broadcast_all(P)
  local s = {}
  for k = 1, #P.hierarchy do s[k] = PL().sbp.broadcast end
  return s
end

--- module:to_global(placement, sbp): every parameter and buffer becomes a
-- global tensor on `placement`. sbp is one sbp (or a list for a 2-D
-- placement) for all parameters, a table {['fc1.weight'] = sbp, ...}
-- (missing names: broadcast), or a function(name, p) returning one (nil:
-- broadcast). Values come from the first rank of the placement, so ranks
-- need not agree beforehand. Buffers are broadcast. Returns the module.
function M.to_global(mod, P, spec)
  if not module.is_module(mod) then fail('to_global: expected an nn.Module') end
  if getmetatable(P) ~= PL().Placement then
    fail('to_global: expected a placement from flow.placement, got ' .. type(P))
  end
  local pick = sbp_fn(spec)
  local comm = require 'oneflow.distributed.comm'
  local root = P.ranks[1]
  local group = P:has_me() and P:group() or nil
  local function make(name, p)
    if type(p) ~= 'cdata' then return p end   -- already global
    local full = p:detach():contiguous():clone()
    if group and group.size > 1 then
      local idx = 0
      for i, q in ipairs(P.ranks) do if q == root then idx = i - 1 end end
      comm.broadcast(full, idx, {group = group})
    end
    local s = pick(name, p) or broadcast_all(P)
    local ok, g = pcall(G().from_full, full, P, s)
    if not ok then fail(('to_global: parameter %s: %s'):format(name, tostring(g))) end
    local loc = g:to_local()
    if p.requires_grad then loc:requires_grad_(true) end
    rawset(g, '_local', loc)
    return g
  end
  autograd.no_grad(function()
    for mname, m in mod:named_modules() do
      local reg = module.registry(m, '_parameters')
      for _, name in ipairs({unpack(reg.names)}) do
        local p = reg:get(name)
        if p ~= nil then
          reg:set(name, make(mname == '' and name or (mname .. '.' .. name), p))
        end
      end
      local bufs = module.registry(m, '_buffers')
      for _, name in ipairs({unpack(bufs.names)}) do
        local b = bufs:get(name)
        if b ~= nil and type(b) == 'cdata' then
          bufs:set(name, G().from_full(b, P, broadcast_all(P)))
        end
      end
    end
  end)
  return mod
end

--- SBP for nn.Linear parameters in the usual parallel layouts (1-D):
-- 'column' splits the output features (weight rows, bias): the output is
-- split on its last dim; 'row' splits the input features (weight columns):
-- the output is a partial sum; 'data' broadcasts.
function M.linear_sbp(kind)
  local S, Bc = PL().sbp.split, PL().sbp.broadcast
  if kind == 'column' then
    return function() return S(1) end
  elseif kind == 'row' then
    return function(name) return name:match('weight$') and S(2) or Bc end
  elseif kind == 'data' then
    return function() return Bc end
  end
  fail(("linear_sbp: kind must be 'column', 'row' or 'data', got %s"):format(tostring(kind)))
end

return M
