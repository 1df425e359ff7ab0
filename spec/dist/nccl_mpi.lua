-- NCCL under mpirun (-np 2 and -np 4): collectives on CUDA tensors and
-- global tensors on flow.placement('cuda', ranks), each checked against
-- values every rank computes by itself (or against the same boxing on a
-- "cpu" placement). NCCL needs one GPU per process: with fewer GPUs than
-- processes (or none) the file is one pending line.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local r, n = flow.env.get_rank(), flow.env.get_world_size()
local gpus = flow.cuda.is_available() and flow.cuda.device_count() or 0

if gpus < n then
  describe('NCCL under mpirun', function()
    pending(('skipped: %d processes need as many GPUs, this host has %d%s'):format(
      n, gpus, gpus == 0 and ' (' .. flow.cuda.why_unavailable() .. ')' or ''))
  end)
  return
end

flow.cuda.set_device(flow.env.get_local_rank() % gpus)
local all = {}
for i = 0, n - 1 do all[i + 1] = i end
local PC, PG = flow.placement('cpu', all), flow.placement('cuda', all)
local S, Bc, Ps = flow.sbp.split, flow.sbp.broadcast, flow.sbp.partial_sum

local function dev(t) return t:cuda() end

describe('NCCL collectives on CUDA tensors', function()
  it('all_reduce sum, max, min in several dtypes', function()
    for _, dt in ipairs({'float32', 'float64', 'int32', 'int64', 'float16', 'bfloat16'}) do
      local t = dev(flow.tensor({r + 1, -(r + 1), 2}, {dtype = dt}))
      flow.comm.all_reduce(t)
      assert.are.equal('cuda', t.device.type)
      H.close(t:cpu(), {n * (n + 1) / 2, -n * (n + 1) / 2, 2 * n}, 1e-3, dt)
      local m = dev(flow.tensor({r, -r}, {dtype = dt}))
      flow.comm.all_reduce(m, {op = 'max'})
      H.close(m:cpu(), {n - 1, 0}, 0, dt)
    end
    assert.is_true(flow.comm.nccl_loaded())
  end)
  it('all_gather with a different shape on each rank (grouped broadcasts)', function()
    local t = dev(flow.full({r + 1, 2}, r))
    local l = flow.comm.all_gather(t)
    for q = 0, n - 1 do H.close(l[q + 1]:cpu(), flow.full({q + 1, 2}, q), 0, 'rank ' .. q) end
  end)
  it('reduce_scatter even and uneven', function()
    local mine = flow.comm.reduce_scatter(dev(flow.ones(2 * n, 3) * (r + 1)))
    H.close(mine:cpu(), flow.full({2, 3}, n * (n + 1) / 2), 0, 'even')
    local rows = 2 * n + 1
    local u = flow.comm.reduce_scatter(dev(flow.ones(rows, 2)))
    H.close(u:cpu(), flow.full({r == 0 and 3 or 2, 2}, n), 0, 'uneven')
  end)
  it('all_to_all, broadcast and send/recv around a ring', function()
    local parts = {}
    for q = 0, n - 1 do parts[q + 1] = dev(flow.full({q + 1}, r * 10 + q)) end
    local got = flow.comm.all_to_all(parts)
    for q = 0, n - 1 do H.close(got[q + 1]:cpu(), flow.full({r + 1}, q * 10 + r), 0) end
    local b = dev(flow.full({3}, r))
    flow.comm.broadcast(b, n - 1)
    H.close(b:cpu(), flow.full({3}, n - 1), 0, 'broadcast')
    local to, from = (r + 1) % n, (r - 1 + n) % n
    local recv = dev(flow.zeros(4))
    if r % 2 == 0 then
      flow.comm.send(dev(flow.full({4}, r)), to)
      flow.comm.recv(recv, from)
    else
      flow.comm.recv(recv, from)
      flow.comm.send(dev(flow.full({4}, r)), to)
    end
    H.close(recv:cpu(), flow.full({4}, from), 0, 'ring')
  end)
end)

describe('global tensors on a cuda placement', function()
  flow.manual_seed(11)
  local full = flow.randn(2 * n + 1, 5)
  local function global(t, Pl, s) return flow.tensor(t:totable(), {placement = Pl, sbp = s}) end
  it('every 1-D boxing gives what the cpu placement gives', function()
    local kinds = {S(1), S(2), Bc, Ps}
    for _, a in ipairs(kinds) do
      for _, b in ipairs(kinds) do
        local gc = global(full, PC, a):to_global(PC, b)
        local gg = global(full, PG, a):to_global(PG, b)
        assert.are.equal('cuda', gg:to_local().device.type)
        H.close(gg:to_local():cpu(), gc:to_local(), 1e-6, tostring(a) .. ' -> ' .. tostring(b))
      end
    end
  end)
  it('cpu to cuda placement and back', function()
    local g = global(full, PC, S(1)):to_global(PG, Bc)
    assert.are.equal('cuda', g:to_local().device.type)
    H.close(g:to_local():cpu(), full, 1e-6, 'cpu S -> cuda B')
    local back = g:to_global(PC, S(2))
    assert.are.equal('cpu', back:to_local().device.type)
    H.close(back:to_global(PC, Bc):to_local(), full, 1e-6, 'cuda B -> cpu S -> cpu B')
  end)
  it('a data-parallel step: gradients of a broadcast weight are all-reduced', function()
    local w0 = flow.randn(5, 1)
    local W = global(w0, PG, Bc):requires_grad_(true)
    local X = global(full, PG, S(1))
    local loss = (X:matmul(W) ^ 2):sum()
    loss:backward()
    local wl = w0:clone():requires_grad_(true)
    ;(full:matmul(wl) ^ 2):sum():backward()
    assert.are.equal('cuda', W.grad:to_local().device.type)
    H.close(W.grad:to_local():cpu(), wl.grad, 1e-4, 'grad')
  end)
end)
