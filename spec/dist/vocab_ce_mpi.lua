-- Vocabulary-parallel cross_entropy under mpirun (-np 2 and -np 4): logits
-- split over the classes give the loss and the gradient of one process on
-- the whole logits, moving only per-row values (no all-gather or
-- all-to-all of the logits).
local flow = require 'oneflow'
local ffi = require 'ffi'
local C = require('oneflow._C').C

local F = flow.nn.functional
local D = require 'spec.dist.helpers'
local P = D.world_or_pending('vocabulary-parallel cross_entropy')
if not P then return end
local r, n = flow.env.get_rank(), flow.env.get_world_size()
local S, Bc = flow.sbp.split, flow.sbp.broadcast

-- the global tensor whose logical value is `full` (each rank passes its shard)
local function global_of(full, Pl, sbp)
  local list = sbp.kind and {sbp} or sbp
  return D.shard(full, Pl.hierarchy, list, D.coord_of(Pl, r)):contiguous():to_global(Pl, sbp)
end
local function full_of(g, Pl)
  return g:to_global(Pl, #Pl.hierarchy == 1 and Bc or {Bc, Bc}):to_local()
end

-- the names of the collectives f() runs (C op profiler)
local function collectives(f)
  local names = {}
  local info = ffi.new('of_op_info')
  assert(C.of_profiler_start(0) == 0)
  local ok, err = pcall(f)
  C.of_profiler_stop()
  assert(ok, err)
  local ev = C.of_profiler_events()
  for i = 0, tonumber(C.of_profiler_num_events()) - 1 do
    if C.of_op_schema(ev[i].op, info) == 0 then
      local name = ffi.string(info.name)
      if name:match('^all_') or name == 'reduce_scatter' or name == 'broadcast' then
        names[name] = (names[name] or 0) + 1
      end
    end
  end
  return names
end

-- loss and logits gradient: vocab-parallel (global, `sbp` on placement Pl)
-- against one process on the full tensors
local function check(Pl, sbp, tsbp, N, Cn, opts)
  flow.manual_seed(3)
  local full = flow.randn(N, Cn)
  local y = flow.randint(1, Cn + 1, {N})
  if opts and opts.ignore_index then y[1] = opts.ignore_index end
  local ref = full:clone():requires_grad_(true)
  local rl = F.cross_entropy(ref, y, opts)
  local red = opts and opts.reduction or 'mean'
  if red == 'none' then rl:sum():backward() else rl:backward() end
  local x = global_of(full, Pl, sbp):requires_grad_(true)
  local gy = global_of(y, Pl, tsbp)
  local loss
  local comms = collectives(function()
    loss = F.cross_entropy(x, gy, opts)
    if red == 'none' then loss:sum():backward() else loss:backward() end
  end)
  assert.is_nil(comms.all_gather, 'the logits were gathered')
  assert.is_nil(comms.all_to_all, 'the logits went through an all-to-all')
  local lv = full_of(loss, Pl)
  local d = (lv - rl:detach()):abs():max():item()
  assert.is_true(d < 1e-5, ('loss differs by %g'):format(d))
  local g = full_of(x.grad, Pl)
  local dg = (g - ref.grad):abs():max():item()
  assert.is_true(dg < 1e-5, ('gradient differs by %g'):format(dg))
end

describe('vocabulary-parallel cross_entropy (logits split over classes)', function()
  it('equals one process: mean, sum, none, ignore_index', function()
    check(P, S(2), Bc, 6, 10)
    check(P, S(2), Bc, 6, 10, {reduction = 'sum'})
    check(P, S(2), Bc, 5, 9, {reduction = 'none'})
    check(P, S(2), Bc, 6, 10, {ignore_index = 4})
  end)

  it('handles uneven class shards and, on 4 ranks, fewer classes than ranks', function()
    check(P, S(2), Bc, 4, n + 1)
    if n == 4 then check(P, S(2), Bc, 4, 3) end   -- the last rank holds no class
  end)

  if n == 4 then
    it('on a 2x2 grid: batch split on one axis, classes on the other', function()
      local P2 = flow.placement('cpu', {{0, 1}, {2, 3}})
      check(P2, {S(1), S(2)}, {S(1), Bc}, 6, 10)
      check(P2, {S(1), S(2)}, {S(1), Bc}, 6, 7, {reduction = 'sum'})
    end)
  end

  it('leaves label smoothing to the general path (still right)', function()
    flow.manual_seed(4)
    local full, y = flow.randn(6, 8), flow.randint(1, 9, {6})
    local rl = F.cross_entropy(full, y, {label_smoothing = 0.1})
    local l = F.cross_entropy(global_of(full, P, S(2)), global_of(y, P, Bc), {label_smoothing = 0.1})
    assert.is_true(math.abs(full_of(l, P):item() - rl:item()) < 1e-5)
  end)
end)
