-- oneflow.distributed.boxing: moving a global tensor's data between SBPs and
-- placements. Works on local shards (no autograd: global.lua wraps it in a
-- Function whose backward is the reverse boxing in the dual SBP).
--
-- Splits follow OneFlow and PyTorch: a dim of length L over n parts gives the
-- first L % n parts one more element. On a 2-D grid the axes nest: axis 1
-- splits the logical tensor, axis 2 splits each axis-1 part again.
local flow_T = require 'oneflow.tensor'
local comm = require 'oneflow.distributed.comm'
local PL = require 'oneflow.distributed.placement'

local M = {}
local sbp = PL.sbp

local function part(len, n, i)   -- i 0-based -> start (0-based), size
  local base, extra = math.floor(len / n), len % n
  local size = base + (i < extra and 1 or 0)
  return i * base + math.min(i, extra), size
end
M.part = part

local function norm_dim(d, nd)
  if d < 0 then return d + nd + 1 end
  return d
end
M.norm_dim = norm_dim

--- Shape of the shard at `coord` (0-based per axis) after applying the
-- axes of `nd_sbp` to `shape` (all but axis `skip`, if given); also the
-- start offsets.
function M.shard(shape, hierarchy, nd_sbp, coord, skip)
  local s, start = {}, {}
  for i = 1, #shape do s[i], start[i] = shape[i], 0 end
  for k = 1, #hierarchy do
    local v = nd_sbp[k]
    if v.kind == 'S' and k ~= skip then
      local d = norm_dim(v.dim, #shape)
      local off, size = part(s[d], hierarchy[k], coord[k])
      start[d] = start[d] + off
      s[d] = size
    end
  end
  return s, start
end

local function numel(s)
  local n = 1
  for i = 1, #s do n = n * s[i] end
  return n
end

------------------------------------------------------------------ 1-D steps
-- Each step works inside one group of n ranks (one grid axis), on `x`, this
-- rank's piece of a tensor whose shape at this level is `lshape`.

local function to_b_from_s(x, lshape, d, g)
  local n, counts, shapes = g.size, {}, {}
  for i = 0, n - 1 do
    local s = {}
    for k = 1, #lshape do s[k] = lshape[k] end
    local _, size = part(lshape[d], n, i)
    s[d] = size
    shapes[i + 1], counts[i + 1] = s, numel(s)
  end
  local flat = comm.all_gather_flat(x:contiguous(), counts, {group = g})
  -- along dim 1 the pieces already lie in order: the gathered buffer is the result
  if d == 1 then return flat:view(lshape) end
  local parts, off = {}, 0
  for i = 1, n do
    parts[i] = flat:narrow(1, off + 1, counts[i]):view(shapes[i])
    off = off + counts[i]
  end
  return flow_T.flow.cat(parts, d)
end

local function slice(x, lshape, d, n, i)
  local off, size = part(lshape[d], n, i)
  return x:narrow(d, off + 1, size):contiguous()
end

local function step(x, lshape, from, to, g, i)
  local n = g.size
  if from == to then return x end
  if to.kind == 'B' then
    if from.kind == 'S' then return to_b_from_s(x, lshape, norm_dim(from.dim, #lshape), g) end
    return comm.all_reduced(x, {group = g})   -- P -> B
  end
  if to.kind == 'S' then
    local d = norm_dim(to.dim, #lshape)
    if from.kind == 'B' then
      -- a piece that is not contiguous is copied by contiguous() already;
      -- only a contiguous view (an alias of x) needs its own copy
      local off, size = part(lshape[d], n, i)
      local piece = x:narrow(d, off + 1, size)
      if piece:is_contiguous() then return piece:clone() end
      return piece:contiguous()
    end
    if from.kind == 'P' then return comm.reduce_scatter(x, {dim = d, group = g}) end
    -- S(a) -> S(d): everyone cuts its piece along d and swaps
    local a = norm_dim(from.dim, #lshape)
    local sends, recv_shapes = {}, {}
    local mine = x:size():totable()
    for j = 0, n - 1 do
      sends[j + 1] = slice(x, mine, d, n, j):view(-1)
      local s = {}
      for k = 1, #lshape do s[k] = lshape[k] end
      local _, sa = part(lshape[a], n, j)
      local _, sd = part(lshape[d], n, i)
      s[a], s[d] = sa, sd
      recv_shapes[j + 1] = s
    end
    local send_counts, recv_counts = {}, {}
    for j = 1, n do send_counts[j], recv_counts[j] = sends[j]:numel(), numel(recv_shapes[j]) end
    local flat = comm.all_to_all_flat(flow_T.flow.cat(sends, 1), send_counts, recv_counts,
                                      {group = g})
    local parts, off = {}, 0
    for j = 1, n do
      parts[j] = flat:narrow(1, off + 1, recv_counts[j]):view(recv_shapes[j])
      off = off + recv_counts[j]
    end
    return flow_T.flow.cat(parts, a)
  end
  -- to P
  if from.kind == 'B' then
    if i == 0 then return x:clone() end
    return flow_T.flow.zeros(x:size():totable(), {dtype = x.dtype, device = x.device})
  end
  -- S -> P: the piece in place, zeros elsewhere
  local d = norm_dim(from.dim, #lshape)
  local z = flow_T.flow.zeros(lshape, {dtype = x.dtype, device = x.device})
  local off, size = part(lshape[d], n, i)
  if size > 0 then z:narrow(d, off + 1, size):copy_(x) end
  return z
end

------------------------------------------------------------------ n-D, one placement
-- May axis k change from a to b directly, given the sbp of the inner axes?
-- Only if no inner axis splits a dim that a or b splits.
local function direct_ok(cur, k, a, b, nd)
  for m = k + 1, #cur do
    local v = cur[m]
    if v.kind == 'S' then
      local dv = norm_dim(v.dim, nd)
      if (a.kind == 'S' and norm_dim(a.dim, nd) == dv) or (b.kind == 'S' and norm_dim(b.dim, nd) == dv) then
        return false
      end
    end
  end
  return true
end

local function same_placement(x, shape, P, from, to)
  local cur = {}
  for k = 1, #from do cur[k] = from[k] end
  local nd = #shape
  local function apply(k, b)
    -- this rank's piece before axis k cuts it: the other axes never split
    -- the dims axis k moves (direct_ok), so their order does not matter
    local lshape = M.shard(shape, P.hierarchy, cur, P.coord, k)
    x = step(x, lshape, cur[k], b, P:axis_group(k), P.coord[k])
    cur[k] = b
  end
  -- direct steps, inner axes first, while any applies
  local progress = true
  while progress do
    progress = false
    for k = #cur, 1, -1 do
      if cur[k] ~= to[k] and direct_ok(cur, k, cur[k], to[k], nd) then
        apply(k, to[k])
        progress = true
      end
    end
  end
  local done = true
  for k = 1, #cur do if cur[k] ~= to[k] then done = false end end
  if done then return x end
  -- otherwise through broadcast: gather inner axes first, then cut outer first
  for k = #cur, 1, -1 do if cur[k] ~= sbp.broadcast then apply(k, sbp.broadcast) end end
  for k = 1, #cur do if to[k] ~= sbp.broadcast then apply(k, to[k]) end end
  return x
end

local function all_b(n)
  local t = {}
  for k = 1, n do t[k] = sbp.broadcast end
  return t
end

local function empty_like(x, dtype)
  return flow_T.flow.empty({0}, {dtype = dtype or x.dtype, device = x.device})
end
M.empty = empty_like

local function union_ranks(P1, P2)
  local seen, list = {}, {}
  for _, r in ipairs(P1.ranks) do if not seen[r] then seen[r] = true; list[#list + 1] = r end end
  for _, r in ipairs(P2.ranks) do if not seen[r] then seen[r] = true; list[#list + 1] = r end end
  table.sort(list)
  return list
end

local function same_layout(P1, s1, P2, s2)
  if #P1.hierarchy ~= #P2.hierarchy then return false end
  for k = 1, #P1.hierarchy do
    if P1.hierarchy[k] ~= P2.hierarchy[k] or s1[k] ~= s2[k] then return false end
  end
  return true
end

-- Every rank of P2 receives from one rank of P1 through one all-to-all over
-- the union of both placements (no send/recv cycles to deadlock on).
local function move(x, P1, P2, pairing, dtype)
  local ranks = union_ranks(P1, P2)
  local g = comm.new_group(ranks)
  local pos = {}
  for i, r in ipairs(ranks) do pos[r] = i end
  local me = comm.env.get_rank()
  local sends, send_counts, recv_counts = {}, {}, {}
  for i = 1, #ranks do send_counts[i], recv_counts[i] = 0, 0 end
  local src_for_me, my_shape
  for j, q in ipairs(P2.ranks) do
    local src, s = pairing(j)
    if q == me then src_for_me, my_shape = src, s end
    if src == me and q ~= me then
      sends[#sends + 1] = {pos[q], x:contiguous():view(-1)}
    end
  end
  table.sort(sends, function(a, b) return a[1] < b[1] end)
  local list = {}
  for _, s in ipairs(sends) do
    send_counts[s[1]] = s[2]:numel()
    list[#list + 1] = s[2]
  end
  if src_for_me and src_for_me ~= me then recv_counts[pos[src_for_me]] = numel(my_shape) end
  local packed = #list > 0 and flow_T.flow.cat(list, 1) or empty_like(x, dtype)
  local got = comm.all_to_all_flat(packed, send_counts, recv_counts, {group = g})
  if not src_for_me then return empty_like(x, dtype) end
  if src_for_me == me then return x:clone() end
  return got:view(my_shape)
end

--- Re-lay this rank's shard `x` of a tensor of logical `shape` from (P1, s1)
-- to (P2, s2). Every rank of P1 and P2 must call it; others need not.
function M.box(x, shape, P1, s1, P2, s2, dtype)
  if P1 == P2 then
    if not P1:has_me() then return x end
    local same = true
    for k = 1, #s1 do if s1[k] ~= s2[k] then same = false end end
    if same then return x end
    return same_placement(x, shape, P1, s1, s2)
  end
  if same_layout(P1, s1, P2, s2) then
    -- shard j moves from the j-th rank of P1 to the j-th rank of P2
    return move(x, P1, P2, function(j)
      local c = P2.hierarchy[2] and {math.floor((j - 1) / P2.hierarchy[2]), (j - 1) % P2.hierarchy[2]}
                or {j - 1}
      return P1.ranks[j], (M.shard(shape, P2.hierarchy, s2, c))
    end, dtype)
  end
  -- general: broadcast on P1, copy to every rank of P2, cut there
  local b1, b2 = all_b(#P1.hierarchy), all_b(#P2.hierarchy)
  if P1:has_me() then x = same_placement(x, shape, P1, s1, b1) end
  x = move(x, P1, P2, function(j) return P1.ranks[(j - 1) % #P1.ranks + 1], shape end, dtype)
  if P2:has_me() then return same_placement(x, shape, P2, b2, s2) end
  return x
end

return M
