-- Global tensors under mpirun (-np 2 and -np 4): every boxing path, 1-D and
-- 2-D, uneven splits, across placements, and op rules forward and backward,
-- each checked against the same computation on the full tensors (which every
-- rank can do by itself: the data come from a fixed seed).
local flow = require 'oneflow'
local H = require 'spec.helpers'

local r, n = flow.env.get_rank(), flow.env.get_world_size()
local all = {}
for i = 0, n - 1 do all[i + 1] = i end
local P = flow.placement('cpu', all)
local S, Bc, Ps = flow.sbp.split, flow.sbp.broadcast, flow.sbp.partial_sum
local grid = n == 4 and {{0, 1}, {2, 3}} or {{0, 1}}
local P2 = n >= 2 and flow.placement('cpu', grid) or nil

local D = require 'spec.dist.helpers'
local shard = D.shard

local function coord_of(Pl) return D.coord_of(Pl, r) end

-- the global value g must equal `full`: shards checked where split or
-- broadcast, partial shards summed
local function check(g, full, msg)
  assert.same(full:size():totable(), g.shape:totable(), msg)
  local c = coord_of(g.placement)
  if not c then
    assert.equal(0, g:to_local():numel(), msg)
    return
  end
  local has_p = false
  for _, v in ipairs(g.sbp) do if v.kind == 'P' then has_p = true end end
  if not has_p then
    H.close(g:to_local(), shard(full, g.placement.hierarchy, g.sbp, c), 1e-5, msg)
  end
  H.close(g:full_local(), full, 1e-5, msg)
end

local sbps = {S(1), S(2), Bc, Ps}

describe('global tensors', function()
  flow.manual_seed(7)
  local full = flow.randn(2 * n + 1, n + 1)

  it('are made from local shards, factories and tables', function()
    local g = flow.tensor(full:totable(), {placement = P, sbp = S(1)})
    check(g, full, 'tensor')
    assert.equal(S(1), g.sbp[1])
    assert.equal(P, g.placement)
    local l = g:to_local()
    local g2 = l:to_global(P, S(1))
    check(g2, full, 'to_global of local shards')
    local z = flow.zeros(3, 5, {placement = P, sbp = S(2)})
    check(z, flow.zeros(3, 5), 'zeros')
    local rn = flow.randn(4, 3, {placement = P, sbp = Bc})
    local all_same = rn:to_local():clone()
    flow.comm.all_reduce(all_same, {op = 'max'})
    H.close(all_same, rn:to_local(), 0, 'randn is the same on every rank')
    local s = tostring(g)
    assert(s:find('placement=oneflow.placement(type="cpu"', 1, true), s)
    assert(s:find('sbp=(oneflow.sbp.split(dim=1))', 1, true), s)
  end)

  it('box between every pair of 1-D sbp (uneven sizes)', function()
    for _, a in ipairs(sbps) do
      local g = flow.tensor(full:totable(), {placement = P, sbp = a})
      check(g, full, 'from ' .. tostring(a))
      for _, b in ipairs(sbps) do
        check(g:to_global(P, b), full, tostring(a) .. ' -> ' .. tostring(b))
      end
    end
  end)

  it('P -> B boxing in a loop reuses the block of the collected previous result', function()
    -- 4 MiB shards: such blocks are mmap'ed, a fresh one per step would
    -- fault in its pages on every step
    local bytes = 4 * 1024 * 1024
    local g = flow.ones(bytes / 4):to_global(P, Ps)
    require('oneflow._C').collect()   -- release every dead tensor now
    local base = flow.memory_stats().current_bytes
    flow.reset_peak_memory_stats()
    for _ = 1, 3 do
      collectgarbage()   -- the previous result dies; its block may be reused
      local b = g:to_global(P, Bc)
      H.close(b:to_local()[{{1, 3}}], {n, n, n}, 0)
    end
    -- one result's block at a time beyond the start, not two
    local grew = flow.memory_stats().peak_bytes - base
    assert.is_true(grew < bytes * 1.5, 'peak grew by ' .. grew .. ' bytes')
  end)

  it('box a dim smaller than the number of ranks (empty shards)', function()
    local small = flow.randn(1, 3)
    local g = flow.tensor(small:totable(), {placement = P, sbp = S(1)})
    check(g, small, 'small')
    check(g:to_global(P, S(2)), small, 'small S1->S2')
    check(g:to_global(P, Bc), small, 'small S1->B')
  end)

  it('box between every pair of 2-D sbp', function()
    for _, a1 in ipairs(sbps) do
      for _, a2 in ipairs(sbps) do
        local g = flow.tensor(full:totable(), {placement = P2, sbp = {a1, a2}})
        check(g, full, 'from 2-D')
        for _, b1 in ipairs(sbps) do
          for _, b2 in ipairs(sbps) do
            local msg = ('(%s, %s) -> (%s, %s)'):format(tostring(a1), tostring(a2), tostring(b1), tostring(b2))
            check(g:to_global(P2, {b1, b2}), full, msg)
          end
        end
      end
    end
  end)

  it('move across placements', function()
    local rev = {}
    for i = 1, n do rev[i] = all[n - i + 1] end
    local Prev = flow.placement('cpu', rev)
    local Pone = flow.placement('cpu', {n - 1})
    for _, a in ipairs(sbps) do
      local g = flow.tensor(full:totable(), {placement = P, sbp = a})
      for _, b in ipairs(sbps) do
        check(g:to_global(Prev, b), full, 'to reversed ' .. tostring(a) .. tostring(b))
        check(g:to_global(Pone, b), full, 'to one rank ' .. tostring(a) .. tostring(b))
        check(g:to_global(P2, {b, S(2)}), full, 'to grid ' .. tostring(a) .. tostring(b))
      end
      local one = g:to_global(Pone, a)
      check(one:to_global(P, Bc), full, 'from one rank')
    end
  end)

  it('rejects bad sbp, placements and mixes', function()
    local g = flow.tensor(full:totable(), {placement = P, sbp = S(1)})
    H.raises(function() g:to_global(P, S(3)) end, 'split dim 3 out of range', '2-d')
    H.raises(function() g:to_global(P2, S(1)) end, '1 sbp given for a 2-D placement')
    H.raises(function() flow.placement('cpu', {0, n}) end, 'rank ' .. n, 'not one of')
    H.raises(function() flow.placement('cpu', {0, 0}) end, 'listed twice')
    H.raises(function() flow.placement('cpu', {{0, 1}, {0}}) end, 'rows must be equal')
    H.raises(function() flow.sbp.split(0) end, 'sbp.split', '1-based')
    H.raises(function() return g + flow.ones(1) end, 'mix local and global')
    local other = flow.tensor(full:totable(), {placement = flow.placement('cpu', {0}), sbp = Bc})
    H.raises(function() return g + other end, 'different placements')
    H.raises(function() flow.randn(2, 2, {placement = P}) end, 'sbp is required')
  end)
end)

-- op: fn on global or local tensors; inputs: {full, sbp}; compare outputs
-- and the gradients of sum(out * weights).
local function check_op(name, fn, inputs, Pl)
  Pl = Pl or P
  local locals, globals = {}, {}
  for i, inp in ipairs(inputs) do
    locals[i] = inp[1]:clone():requires_grad_(true)
    local g = flow.tensor(inp[1]:totable(), {placement = Pl, sbp = inp[2]})
    globals[i] = g:requires_grad_(true)
  end
  local want = fn(unpack(locals))
  local got = fn(unpack(globals))
  check(got, want, name .. ' forward')
  local w = flow.randn(want:size():totable())
  local gw = flow.tensor(w:totable(), {placement = Pl, sbp = #Pl.hierarchy == 1 and Bc or {Bc, Bc}})
  ;(want * w):sum():backward()
  ;(got * gw):sum():backward()
  for i = 1, #inputs do
    local g = globals[i].grad
    assert.equal(tostring(globals[i].sbp), tostring(g.sbp), name .. ' grad sbp')
    check(g, locals[i].grad, name .. ' grad ' .. i)
  end
end

describe('op SBP rules, forward and backward', function()
  flow.manual_seed(11)
  local m, k, c = 2 * n + 1, 5, n + 2
  local x, w, b = flow.randn(m, k), flow.randn(k, c), flow.randn(c)

  it('matmul: data, column and row parallel, and 2-D hybrid', function()
    check_op('matmul S(1)xB', flow.matmul, {{x, S(1)}, {w, Bc}})
    check_op('matmul BxS(2)', flow.matmul, {{x, Bc}, {w, S(2)}})
    check_op('matmul S(2)xS(1)', flow.matmul, {{x, S(2)}, {w, S(1)}})
    check_op('mm hybrid', flow.mm, {{x, {S(1), Bc}}, {w, {Bc, S(2)}}}, P2)
    local bx, bw = flow.randn(n + 1, 3, 4), flow.randn(n + 1, 4, 2)
    check_op('bmm batch split', flow.bmm, {{bx, S(1)}, {bw, S(1)}})
  end)

  it('elementwise with broadcasting and reductions', function()
    check_op('add bias', function(a, bb) return (a + bb):relu() * 2 end, {{x:matmul(w), S(1)}, {b, Bc}})
    check_op('mul, div, exp', function(a, bb) return (a * bb):exp() / (bb * bb + 1) end,
             {{x:matmul(w), S(2)}, {b, S(1)}})
    check_op('sum over split dim', function(a) return a:sum(1) end, {{x, S(1)}})
    check_op('sum keep other split', function(a) return a:sum(2) end, {{x, S(1)}})
    check_op('mean', function(a) return a:mean(1, true) end, {{x, S(2)}})
    check_op('amax', function(a) return a:amax(2) end, {{x, S(1)}})
  end)

  it('softmax, log_softmax, reshape and cat', function()
    check_op('softmax', function(a) return flow.softmax(a, 2) end, {{x, S(1)}})
    check_op('log_softmax over split dim', function(a) return flow.log_softmax(a, 1) end, {{x, S(1)}})
    check_op('reshape', function(a) return a:reshape(m, k, 1) * 3 end, {{x, S(1)}})
    check_op('cat', function(a, bb) return flow.cat({a, bb}, 2) end, {{x, S(1)}, {x * 2, S(1)}})
  end)

  it('data-parallel linear regression steps equal single-process steps', function()
    local X, Y = flow.randn(4 * n, 3), flow.randn(4 * n, 1)
    local W0 = flow.randn(3, 1)
    local Wl = W0:clone():requires_grad_(true)
    local Wg = flow.tensor(W0:totable(), {placement = P, sbp = Bc}):requires_grad_(true)
    local Xg = flow.tensor(X:totable(), {placement = P, sbp = S(1)})
    local Yg = flow.tensor(Y:totable(), {placement = P, sbp = S(1)})
    for _ = 1, 3 do
      local l1 = ((X:matmul(Wl) - Y) ^ 2):sum()
      l1:backward()
      local l2 = ((Xg:matmul(Wg) - Yg) ^ 2):sum()
      l2:backward()
      H.close(l2:to_global(P, Bc):to_local(), l1, 1e-5, 'loss')
      local gl, gg = Wl.grad, Wg.grad
      flow.no_grad(function()
        Wl:sub_(gl * 0.01)
        Wg:to_local():sub_(gg:to_local() * 0.01)
      end)
      Wl.grad, Wg.grad = nil, nil
    end
    H.close(Wg:to_local(), Wl, 1e-5, 'weights after 3 steps')
  end)
end)
