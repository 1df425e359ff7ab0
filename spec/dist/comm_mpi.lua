-- flow.comm collectives under mpirun (-np 2 and -np 4), checked against
-- values every rank can compute on its own.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local r, n = flow.env.get_rank(), flow.env.get_world_size()

describe('flow.comm under mpirun', function()
  it('knows its rank', function()
    assert.equal('mpi', flow.env.backend())
    assert.is_true(r >= 0 and r < n)
    assert.is_true(flow.env.get_local_rank() >= 0)
    flow.env.barrier()
  end)

  it('all_reduce sum, max, min in several dtypes', function()
    for _, dt in ipairs({'float32', 'float64', 'int32', 'int64', 'float16', 'bfloat16'}) do
      local t = flow.tensor({r + 1, -(r + 1), 2}, {dtype = dt})
      flow.comm.all_reduce(t)
      H.close(t, {n * (n + 1) / 2, -n * (n + 1) / 2, 2 * n}, 1e-3, dt)
      local m = flow.tensor({r, -r}, {dtype = dt})
      flow.comm.all_reduce(m, {op = 'max'})
      H.close(m, {n - 1, 0}, 0, dt)
      local k = flow.tensor({r, -r}, {dtype = dt})
      flow.comm.all_reduce(k, {op = 'min'})
      H.close(k, {0, -(n - 1)}, 0, dt)
    end
  end)

  it('all_reduce of a non-contiguous tensor writes through the view', function()
    local base = flow.zeros(3, 2)
    local col = base:select(2, 2)
    col:fill_(r + 1)
    flow.comm.all_reduce(col)
    H.close(base, {{0, n * (n + 1) / 2}, {0, n * (n + 1) / 2}, {0, n * (n + 1) / 2}})
  end)

  it('all_gather with a different shape on each rank', function()
    local mine = flow.full({r + 1, 2}, r)
    local all = flow.comm.all_gather(mine)
    assert.equal(n, #all)
    for i = 1, n do
      assert.same({i, 2}, all[i]:size():totable())
      H.close(all[i]:sum(), (i - 1) * i * 2)
    end
  end)

  it('reduce_scatter splits unevenly: the first size % n ranks get one more', function()
    local len = 2 * n + 1
    local x = flow.arange(len * 3):view(len, 3):float() * (r + 1)
    local part = flow.comm.reduce_scatter(x)
    local rows = math.floor(len / n) + (r < len % n and 1 or 0)
    local start = r * math.floor(len / n) + math.min(r, len % n)
    assert.same({rows, 3}, part:size():totable())
    local want = flow.arange(len * 3):view(len, 3):float():narrow(1, start + 1, rows) * (n * (n + 1) / 2)
    H.close(part, want)
    local cols = flow.comm.reduce_scatter(flow.ones(2, n) * (r + 1), {dim = 2, op = 'max'})
    H.close(cols, {{n}, {n}})
  end)

  it('all_to_all exchanges one tensor per rank', function()
    local send = {}
    for i = 1, n do send[i] = flow.full({i, r + 1}, 100 * r + i) end
    local got = flow.comm.all_to_all(send)
    for i = 1, n do
      assert.same({r + 1, i}, got[i]:size():totable())
      H.close(got[i]:max(), 100 * (i - 1) + r + 1)
    end
  end)

  it('broadcast from the last rank', function()
    local t = flow.full({2, 2}, r, {dtype = 'int64'})
    flow.comm.broadcast(t, n - 1)
    H.close(t, {{n - 1, n - 1}, {n - 1, n - 1}})
  end)

  it('send and recv around a ring', function()
    local to, from = (r + 1) % n, (r - 1) % n
    local got = flow.zeros(3)
    if r % 2 == 0 then
      flow.comm.send(flow.full({3}, r), to)
      flow.comm.recv(got, from)
    else
      flow.comm.recv(got, from)
      flow.comm.send(flow.full({3}, r), to)
    end
    H.close(got, {from, from, from})
  end)

  it('groups of some ranks run collectives among themselves', function()
    if n < 2 then return end
    local evens, odds = {}, {}
    for i = 0, n - 1 do
      if i % 2 == 0 then evens[#evens + 1] = i else odds[#odds + 1] = i end
    end
    local mine = r % 2 == 0 and evens or odds
    local g = flow.comm.new_group(mine)
    assert.equal(#mine, g.size)
    local t = flow.tensor({r})
    flow.comm.all_reduce(t, {group = g})
    local want = 0
    for _, q in ipairs(mine) do want = want + q end
    H.close(t, {want})
    assert.equal(g, flow.comm.new_group(mine))
    H.raises(function() flow.comm.new_group({(r + 1) % n == r and 0 or (r + 1) % n}) end,
             'new_group', 'not in the group')
  end)
end)
