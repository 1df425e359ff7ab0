-- oneflow.distributed.rules: building blocks for the SBP signatures ops
-- declare beside their bindings (T.sbp(name, rule) in lua/oneflow/ops/).
--
-- A rule gets ctx = {name, shapes (logical shapes of the global inputs, in
-- argument order), args, n} and returns a list of signatures
-- {ins = {sbp per global input}, out = {sbp per output}[, out_shape =,
-- call = fn(orig, local_args, ctx, chosen, placement)]}, or a string (an
-- error: the op cannot run on these global inputs). Signatures are 1-D; on
-- a 2-D placement each axis picks one. Every rule offers all-broadcast.
local PL = require 'oneflow.distributed.placement'
local is_options = require('oneflow._args').is_options

local R = {}
local S, Bc, Ps = PL.sbp.split, PL.sbp.broadcast, PL.sbp.partial_sum

local function fill(n, v)
  local t = {}
  for i = 1, n do t[i] = v end
  return t
end
R.fill = fill
R.S, R.B, R.P = S, Bc, Ps

local function all_b(ctx, nout)
  return {ins = fill(#ctx.shapes, Bc), out = fill(nout or 1, Bc)}
end

local function pos(d, nd)   -- 1-based or negative dim -> 1-based
  if d < 0 then return d + nd + 1 end
  return d
end
R.pos = pos

--- Elementwise with broadcasting. partial: 'add' (all partial -> partial),
-- 'mul' (one partial, others broadcast -> partial), 'div' (the first
-- partial, the rest broadcast), nil (no partial signature).
function R.elementwise(partial, nout)
  return function(ctx)
    local shapes, sigs = ctx.shapes, {}
    local nd = 0
    for _, s in ipairs(shapes) do nd = math.max(nd, #s) end
    local out = {}
    for d = 1, nd do
      out[d] = 1
      for _, s in ipairs(shapes) do
        local e = d - (nd - #s)
        if e >= 1 and s[e] ~= 1 then out[d] = s[e] end
      end
    end
    for d = 1, nd do
      local ins = {}
      for i, s in ipairs(shapes) do
        local e = d - (nd - #s)
        ins[i] = (e >= 1 and s[e] == out[d] and s[e] ~= 1) and S(e) or Bc
      end
      sigs[#sigs + 1] = {ins = ins, out = fill(nout or 1, S(d))}
    end
    sigs[#sigs + 1] = all_b(ctx, nout)
    if partial == 'add' then
      sigs[#sigs + 1] = {ins = fill(#shapes, Ps), out = fill(nout or 1, Ps)}
    elseif partial == 'mul' or partial == 'div' then
      local last = partial == 'div' and 1 or #shapes
      for p = 1, last do
        local ins = fill(#shapes, Bc)
        ins[p] = Ps
        sigs[#sigs + 1] = {ins = ins, out = fill(nout or 1, Ps)}
      end
    end
    return sigs
  end
end

-- (dim?, keepdim?, opts?) as the reductions take them -> set of 1-based
-- reduced dims (nil: all), keepdim
local function reduce_dims(ctx)
  local nd = #ctx.shapes[1]
  local d, a, b = ctx.args[2], ctx.args[3], ctx.args[4]
  local keep = false
  local opts
  if type(d) == 'table' and d[1] == nil then opts, d = d, d.dim end
  if type(a) == 'boolean' then keep = a elseif type(a) == 'table' then opts = a end
  if type(b) == 'table' then opts = b end
  if opts and opts.keepdim ~= nil then keep = opts.keepdim end
  if opts and d == nil then d = opts.dim end
  if d == nil then return nil, keep end
  if type(d) == 'number' then d = {d} end
  local set = {}
  for _, v in ipairs(d) do set[pos(v, nd)] = true end
  return set, keep
end

--- Reductions over dims. linear: a split reduced dim gives partial sums
-- (sum), and partial inputs stay partial (sum, mean).
function R.reduce(linear, nout)
  return function(ctx)
    local nd = #ctx.shapes[1]
    local set, keep = reduce_dims(ctx)
    local sigs = {all_b(ctx, nout)}
    for d = 1, nd do
      local reduced = set == nil or set[d]
      if not reduced then
        local od = d
        if not keep and set then
          for e = 1, d - 1 do if set[e] then od = od - 1 end end
        end
        sigs[#sigs + 1] = {ins = {S(d)}, out = fill(nout or 1, S(od))}
      elseif linear == 'sum' then
        sigs[#sigs + 1] = {ins = {S(d)}, out = fill(nout or 1, Ps)}
      end
    end
    if linear then sigs[#sigs + 1] = {ins = {Ps}, out = fill(nout or 1, Ps)} end
    return sigs
  end
end

--- Along one dim (softmax, log_softmax, cumsum): other dims may be split.
function R.along_dim(argpos)
  return function(ctx)
    local nd = #ctx.shapes[1]
    local d = ctx.args[argpos or 2]
    if type(d) == 'table' then d = d.dim end
    local sigs = {all_b(ctx)}
    if type(d) ~= 'number' then return sigs end
    d = pos(d, nd)
    for e = 1, nd do
      if e ~= d then sigs[#sigs + 1] = {ins = {S(e)}, out = {S(e)}} end
    end
    return sigs
  end
end

--- matmul / mm / bmm: data parallel (rows of a), column parallel (columns
-- of b), row parallel (the contracted dim: partial sums), batch dims.
function R.matmul(ctx)
  local a, b = ctx.shapes[1], ctx.shapes[2]
  if #a < 1 or #b < 1 then return 'expected tensors of at least 1 dim' end
  local sigs = {all_b(ctx)}
  local na, nb = #a, #b
  local nout = math.max(na, nb)
  if na >= 2 then   -- rows of a
    sigs[#sigs + 1] = {ins = {S(na - 1), Bc}, out = {S(nout - 1)}}
  end
  if nb >= 2 then   -- columns of b
    sigs[#sigs + 1] = {ins = {Bc, S(nb)}, out = {S(na >= 2 and nout or nout - 1)}}
  end
  -- contracted dim: partial sums
  sigs[#sigs + 1] = {ins = {S(na), S(nb >= 2 and nb - 1 or 1)}, out = {Ps}}
  sigs[#sigs + 1] = {ins = {Ps, Bc}, out = {Ps}}
  sigs[#sigs + 1] = {ins = {Bc, Ps}, out = {Ps}}
  -- batch dims shared by both (same rank, leading dims)
  if na >= 3 and nb >= 3 then
    for d = 1, math.min(na, nb) - 2 do
      if a[d] == b[d] and na == nb then
        sigs[#sigs + 1] = {ins = {S(d), S(d)}, out = {S(d)}}
      end
    end
  elseif na >= 3 then
    for d = 1, na - 2 do sigs[#sigs + 1] = {ins = {S(d), Bc}, out = {S(d)}} end
  end
  return sigs
end

--- reshape/view: a split dim survives when the dims before it keep their
-- product and the dim itself keeps its size.
function R.reshape(ctx)
  local shape = ctx.shapes[1]
  local target = {}
  for i = 2, ctx.n do
    local a = ctx.args[i]
    if type(a) == 'table' and getmetatable(a) == nil then
      for _, v in ipairs(a) do target[#target + 1] = v end
    elseif type(a) == 'table' then
      for _, v in ipairs(a:totable()) do target[#target + 1] = v end
    elseif type(a) == 'number' then
      target[#target + 1] = a
    end
  end
  local total, known, infer = 1, 1, nil
  for _, v in ipairs(shape) do total = total * v end
  for i, v in ipairs(target) do
    if v == -1 then infer = i else known = known * v end
  end
  if infer then target[infer] = known > 0 and total / known or 0 end
  local function call(orig, largs, _, chosen, P)
    local B = require 'oneflow.distributed.boxing'
    local s = {}
    for k = 1, #chosen do s[k] = chosen[k].out[1] end
    local c = P.coord or {}
    for k = 1, #P.hierarchy do c[k] = c[k] or 0 end
    local lshape = B.shard(target, P.hierarchy, s, c)
    return orig(largs[1], lshape)
  end
  local sigs = {{ins = {Bc}, out = {Bc}, out_shape = {target}, call = call},
                {ins = {Ps}, out = {Ps}, out_shape = {target}, call = call}}
  local pre_in = 1
  for d = 1, #shape do
    local pre_out = 1
    for e = 1, #target do
      if pre_out == pre_in and target[e] == shape[d] then
        sigs[#sigs + 1] = {ins = {S(d)}, out = {S(e)}, out_shape = {target}, call = call}
        break
      end
      pre_out = pre_out * target[e]
      if pre_out > pre_in then break end
    end
    pre_in = pre_in * shape[d]
  end
  return sigs
end

--- cat(list, dim): every input split the same way on a dim other than `dim`.
function R.cat(ctx)
  local nd = #ctx.shapes[1]
  local d = ctx.args[2] or 1
  d = pos(d, nd)
  local n = #ctx.shapes
  local sigs = {all_b(ctx), {ins = fill(n, Ps), out = {Ps}}}
  for e = 1, nd do
    if e ~= d then sigs[#sigs + 1] = {ins = fill(n, S(e)), out = {S(e)}} end
  end
  return sigs
end

--- narrow/slice-like ops along dim argument `argpos`: other dims may split.
R.slice = R.along_dim

------------------------------------------------------------------ by role
-- Functional ops (T.sbp_fn) take tensors positionally and in option
-- tables; ctx.roles names each global input by position or option key.

--- signer(ctx, {'input', 'weight', 'bias'}) -> sig(map, out[, extra]):
-- map gives the sbp of named inputs (positions named by the list, options
-- by their key); inputs not named are broadcast. out: an sbp or a list.
function R.signer(ctx, positional)
  local names = {}
  for j, role in ipairs(ctx.roles) do
    names[j] = type(role) == 'number' and (positional[role] or role) or role
  end
  local has = {}
  for _, nm in ipairs(names) do has[nm] = true end
  return function(map, out, extra)
    local ins = {}
    for j, nm in ipairs(names) do ins[j] = map[nm] or Bc end
    local sig = {ins = ins, out = PL.is_sbp(out) and {out} or out}
    for k, v in pairs(extra or {}) do sig[k] = v end
    return sig
  end, has
end

-- the value of option `key`: from a trailing options table or position i
function R.opt(ctx, i, key)
  local v = ctx.args[i]
  if v ~= nil and not is_options(v) then return v end
  for j = ctx.n, 1, -1 do
    local a = ctx.args[j]
    if is_options(a) and a[key] ~= nil then return a[key] end
  end
  return nil
end

--- Ops that treat dims 1 (batch) and 2 (channels) independently
-- (pooling, interpolate, group/instance norm on batch): split on those
-- dims stays split. nout outputs share the sbp. channels = false: batch only.
function R.per_sample(channels, nout)
  return function(ctx)
    local sigs = {all_b(ctx, nout)}
    local nd = #ctx.shapes[1]
    if nd < 2 then return sigs end
    local sig = R.signer(ctx, {'input'})
    sigs[#sigs + 1] = sig({input = S(1)}, fill(nout or 1, S(1)))
    if channels ~= false then sigs[#sigs + 1] = sig({input = S(2)}, fill(nout or 1, S(2))) end
    return sigs
  end
end

--- conv1d/2d/3d (input [N, C, *], weight [O, C / groups, *k], bias [O]):
-- batch split with the weight broadcast (data parallel: the weight's
-- gradient comes out partial and is summed when read); for groups = 1 also
-- output channels (weight and bias split on dim 1) and input channels
-- (input on dim 2, weight on dim 2: partial sums, the bias added once).
function R.conv(nsp)
  return function(ctx)
    local sig, has = R.signer(ctx, {'input', 'weight', 'bias'})
    local sigs = {all_b(ctx)}
    local x = ctx.shapes[1]
    if #x ~= nsp + 2 then return sigs end   -- unbatched: only broadcast
    sigs[#sigs + 1] = sig({input = S(1)}, S(1))
    local groups = R.opt(ctx, 7, 'groups') or 1
    if groups == 1 and has.weight then
      sigs[#sigs + 1] = sig({weight = S(1), bias = S(1)}, S(2))
      sigs[#sigs + 1] = sig({input = S(2), weight = S(2), bias = Ps}, Ps)
    end
    return sigs
  end
end

--- linear(x [*, in], weight [out, in], bias [out]): as matmul with weight^T:
-- rows of x (any leading dim), output features (weight and bias split on
-- dim 1), input features (x on its last dim, weight on dim 2: partial
-- sums, the bias added once), and partial x with the bias added once.
function R.linear(ctx)
  local sig = R.signer(ctx, {'input', 'weight', 'bias'})
  local nd = #ctx.shapes[1]
  local sigs = {all_b(ctx)}
  if nd < 1 then return sigs end
  for d = 1, nd - 1 do sigs[#sigs + 1] = sig({input = S(d)}, S(d)) end
  sigs[#sigs + 1] = sig({weight = S(1), bias = S(1)}, S(nd))
  sigs[#sigs + 1] = sig({input = S(nd), weight = S(2), bias = Ps}, Ps)
  sigs[#sigs + 1] = sig({input = Ps, bias = Ps}, Ps)
  return sigs
end

--- Losses over class scores (input [N, C, *], target [N, *]): the batch
-- and the extra dims may split (target on the same dim, one less). With
-- reduction 'none' the output splits the same way; 'sum' gives partial
-- sums; 'mean' gives partial sums over the global denominator, computed by
-- `mean_call` (the op's own: it knows the denominator).
function R.class_loss(mean_call)
  return function(ctx)
    local sig = R.signer(ctx, {'input', 'target'})
    local sigs = {all_b(ctx)}
    local x = ctx.shapes[1]
    if #x < 2 then return sigs end
    local red = R.opt(ctx, 3, 'reduction') or 'mean'
    local prob = ctx.shapes[2] and #ctx.shapes[2] == #x
    for d = 1, #x do
      if d ~= 2 then
        local td = (prob or d == 1) and d or d - 1
        local out, extra = S(red == 'none' and (d == 1 and 1 or d - 1) or 1), nil
        if red == 'sum' then out = Ps end
        if red == 'mean' then out, extra = Ps, {call = mean_call} end
        sigs[#sigs + 1] = sig({input = S(d), target = S(td)}, out, extra)
      end
    end
    return sigs
  end
end

--- Views that move dims around: a split dim follows its dim (map(d) ->
-- the output dim, or nil where the op cannot keep it split).
function R.dim_map(map_of)
  return function(ctx)
    local sigs = {all_b(ctx), {ins = {Ps}, out = {Ps}}}
    local map = map_of(ctx)
    if not map then return sigs end
    for d = 1, #ctx.shapes[1] do
      local e = map(d)
      if e then sigs[#sigs + 1] = {ins = {S(d)}, out = {S(e)}} end
    end
    return sigs
  end
end

--- Ops linear in their first input whose other arguments are not global
-- tensors (dropout with its mask drawn per call): any sbp stays.
function R.same_sbp(ctx)
  local sigs = {all_b(ctx), {ins = {Ps}, out = {Ps}}}
  for d = 1, #ctx.shapes[1] do sigs[#sigs + 1] = {ins = {S(d)}, out = {S(d)}} end
  return sigs
end

--- Ops that only work on the full tensor (all broadcast).
function R.broadcast_only(nout)
  return function(ctx) return {all_b(ctx, nout)} end
end

return R
