-- oneflow.ops.einsum: flow.einsum, contracted pairwise with matmul-shaped
-- products (differentiable through them).
local T = require 'oneflow.tensor'

local def, is_tensor, flow = T.def, T.is_tensor, T.flow

-- One operand's labels: a list of one-character strings; '...' becomes the
-- pseudo-labels \1 .. \8 aligned from the right (they sort before letters).
local function parse_term(term, ndim, n_ell, where)
  local labels, ell_at = {}, nil
  local i = 1
  while i <= #term do
    local ch = term:sub(i, i)
    if term:sub(i, i + 2) == '...' then
      if ell_at then error('einsum: more than one ellipsis in ' .. where, 4) end
      ell_at = #labels + 1
      i = i + 3
    elseif ch:match('%a') then
      labels[#labels + 1] = ch
      i = i + 1
    else
      error(('einsum: invalid character %q in %s'):format(ch, where), 4)
    end
  end
  if ell_at then
    local k = ndim and (ndim - #labels) or n_ell
    if k < 0 then
      error(('einsum: %s has %d labels but the operand has %d dims'):format(where, #labels, ndim), 4)
    end
    local ell = {}
    for j = 1, k do ell[j] = string.char(n_ell - k + j) end
    for j = #ell, 1, -1 do table.insert(labels, ell_at, ell[j]) end
    return labels, k
  end
  return labels, 0
end

-- Collapses repeated labels of one operand to their diagonal.
local function take_diagonals(t, labels)
  local j = 1
  while j <= #labels do
    local k = nil
    for m = j + 1, #labels do if labels[m] == labels[j] then k = m; break end end
    if k then
      t = flow.diagonal(t, 0, j, k)
      local l = labels[j]
      table.remove(labels, k); table.remove(labels, j)
      labels[#labels + 1] = l
    else
      j = j + 1
    end
  end
  return t, labels
end

local function index_of(list, v)
  for i = 1, #list do if list[i] == v then return i end end
end

-- Sums the dims of t whose labels are not in keep.
local function sum_unkept(t, labels, keep)
  local dims, rest = {}, {}
  for i, l in ipairs(labels) do
    if keep[l] then rest[#rest + 1] = l else dims[#dims + 1] = i end
  end
  if #dims > 0 then t = t:sum(dims) end
  return t, rest
end

-- a (labels la) times b (labels lb), summing labels not in keep.
local function contract(a, la, b, lb, keep, sizes)
  local batch, left, right, red = {}, {}, {}, {}
  for _, l in ipairs(la) do
    if index_of(lb, l) then
      if keep[l] then batch[#batch + 1] = l else red[#red + 1] = l end
    else
      left[#left + 1] = l
    end
  end
  for _, l in ipairs(lb) do if not index_of(la, l) then right[#right + 1] = l end end
  local function prod(ls)
    local p = 1
    for _, l in ipairs(ls) do p = p * sizes[l] end
    return p
  end
  local function arrange(t, ls, groups)
    local perm = {}
    for _, g in ipairs(groups) do
      for _, l in ipairs(g) do perm[#perm + 1] = index_of(ls, l) end
    end
    if #perm > 1 then t = t:permute(unpack(perm)) end
    return t:reshape(prod(groups[1]), prod(groups[2]), prod(groups[3]))
  end
  local am = arrange(a, la, {batch, left, red})                 -- (B, L, K)
  local bm = arrange(b, lb, {batch, red, right})                -- (B, K, R)
  local res = flow.bmm(am, bm)
  local out_labels, shape = {}, {}
  for _, g in ipairs({batch, left, right}) do
    for _, l in ipairs(g) do out_labels[#out_labels + 1] = l; shape[#shape + 1] = sizes[l] end
  end
  return res:reshape(shape), out_labels
end

--- flow.einsum(equation, a, b, ...) (or flow.einsum(equation, {a, b, ...})):
-- Einstein summation with explicit ('ij,jk->ik') or implicit ('ij,jk')
-- output, repeated labels (diagonals, 'ii->i'), '...' and size-1
-- broadcasting; built on permute/reshape/bmm/sum, so differentiable.
def('einsum', function(eq, ...)
  if type(eq) ~= 'string' then error('einsum: the equation must be a string, got ' .. type(eq), 2) end
  local ops = {...}
  if #ops == 1 and type(ops[1]) == 'table' and not is_tensor(ops[1]) then ops = ops[1] end
  for i = 1, #ops do
    if not is_tensor(ops[i]) then
      error(('einsum: operand %d is not a tensor (%s)'):format(i, type(ops[i])), 2)
    end
    if ops[i].dtype ~= ops[1].dtype then
      error(('einsum: operands must have the same dtype, got %s and %s'):format(
        tostring(ops[1].dtype), tostring(ops[i].dtype)), 2)
    end
  end
  eq = eq:gsub('%s', '')
  local lhs, rhs = eq:match('^(.-)%->(.*)$')
  if not lhs then lhs = eq end
  local terms = {}
  for term in (lhs .. ','):gmatch('([^,]*),') do terms[#terms + 1] = term end
  if #terms ~= #ops then
    error(('einsum: the equation has %d operands but %d tensors were given'):format(#terms, #ops), 2)
  end
  -- how many dims '...' stands for: the most over the operands
  local n_ell = 0
  for i, term in ipairs(terms) do
    local letters = select(2, term:gsub('%a', ''))
    if term:find('...', 1, true) then n_ell = math.max(n_ell, ops[i]:dim() - letters) end
  end
  if n_ell > 8 then error('einsum: ... stands for too many dims', 2) end
  local labels, sizes, count = {}, {}, {}
  local ts = {}
  for i, term in ipairs(terms) do
    local ls = parse_term(term, ops[i]:dim(), n_ell, 'operand ' .. i)
    if #ls ~= ops[i]:dim() then
      error(('einsum: operand %d has %d dims but the equation gives it %d labels (%s)'):format(
        i, ops[i]:dim(), #ls, term), 2)
    end
    for j, l in ipairs(ls) do
      local s = ops[i]:size(j)
      if sizes[l] == nil or sizes[l] == 1 then
        sizes[l] = s
      elseif s ~= 1 and s ~= sizes[l] then
        error(('einsum: label %s has size %d in operand %d but %d elsewhere'):format(
          l:byte() < 32 and '...' or l, s, i, sizes[l]), 2)
      end
    end
    labels[i], ts[i] = ls, ops[i]
  end
  for i, ls in ipairs(labels) do
    local seen = {}
    for _, l in ipairs(ls) do
      if not seen[l] then count[l] = (count[l] or 0) + 1; seen[l] = true end
    end
    -- size-1 dims broadcast against the other operands
    local shape, grow = {}, false
    for j, l in ipairs(ls) do
      shape[j] = sizes[l]
      if ts[i]:size(j) ~= sizes[l] then grow = true end
    end
    if grow then ts[i] = ts[i]:expand(unpack(shape)) end
  end
  local out = {}
  if rhs then
    out = parse_term(rhs, nil, n_ell, 'the output')
    local seen = {}
    for _, l in ipairs(out) do
      if seen[l] then error('einsum: output label ' .. l .. ' appears twice', 2) end
      if not sizes[l] then error('einsum: output label ' .. l .. ' is not in any operand', 2) end
      seen[l] = true
    end
  else
    for j = 1, n_ell do out[j] = string.char(j) end
    local once = {}
    for l, c in pairs(count) do
      if c == 1 and l:byte() >= 32 then once[#once + 1] = l end
    end
    -- a label repeated inside one operand counts once there; torch leaves it out
    for _, ls in ipairs(labels) do
      local k = {}
      for _, l in ipairs(ls) do k[l] = (k[l] or 0) + 1 end
      for l, c in pairs(k) do
        if c > 1 then
          local pos = index_of(once, l)
          if pos then table.remove(once, pos) end
        end
      end
    end
    table.sort(once)
    for _, l in ipairs(once) do out[#out + 1] = l end
  end
  local in_out = {}
  for _, l in ipairs(out) do in_out[l] = true end
  -- keep[l] for operand i: l is in the output or in a later operand
  local function keep_after(i)
    local keep = {}
    for l in pairs(in_out) do keep[l] = true end
    for j = i + 1, #ts do for _, l in ipairs(labels[j]) do keep[l] = true end end
    return keep
  end
  local cur, cl
  for i = 1, #ts do
    local t, ls = take_diagonals(ts[i], {unpack(labels[i])})
    local keep = keep_after(i)
    if cur then for _, l in ipairs(cl) do keep[l] = true end end
    t, ls = sum_unkept(t, ls, keep)
    if cur == nil then
      cur, cl = t, ls
    else
      cur, cl = contract(cur, cl, t, ls, keep_after(i), sizes)
    end
  end
  cur, cl = sum_unkept(cur, cl, in_out)
  local perm = {}
  for j, l in ipairs(out) do perm[j] = index_of(cl, l) end
  if #perm > 1 then cur = cur:permute(unpack(perm)) end
  return cur
end, 'func')

return {}
