-- DistributedSampler with explicit num_replicas and rank (PyTorch semantics);
-- under mpirun the defaults come from flow.env (spec/dist/parallel_mpi.lua).
local flow = require 'oneflow'
local H = require 'spec.helpers'
local data = flow.utils.data

local function list(s)
  local t = {}
  for i in s:iter() do t[#t + 1] = i end
  return t
end

describe('DistributedSampler', function()
  local ds = data.TensorDataset(flow.arange(1, 11))   -- 10 items

  it('gives rank r every n-th index, padded by repeating the start', function()
    local got = {}
    for r = 0, 2 do
      local s = data.DistributedSampler(ds, {num_replicas = 3, rank = r, shuffle = false})
      assert.equal(4, s:len())
      got[r + 1] = list(s)
    end
    -- torch.utils.data.DistributedSampler(range 10, 3, r, shuffle=False)
    assert.same({{1, 4, 7, 10}, {2, 5, 8, 1}, {3, 6, 9, 2}}, got)
  end)

  it('drop_last cuts the tail instead', function()
    local got = {}
    for r = 0, 2 do
      local s = data.DistributedSampler(ds, {num_replicas = 3, rank = r, shuffle = false,
                                             drop_last = true})
      assert.equal(3, s:len())
      got[r + 1] = list(s)
    end
    assert.same({{1, 4, 7}, {2, 5, 8}, {3, 6, 9}}, got)
  end)

  it('shuffles by seed + epoch, the same permutation on every rank', function()
    local function all(epoch, seed)
      local seen, parts = {}, {}
      for r = 0, 1 do
        local s = data.DistributedSampler(ds, {num_replicas = 2, rank = r, seed = seed})
        s:set_epoch(epoch)
        parts[r + 1] = list(s)
        for _, i in ipairs(parts[r + 1]) do
          assert.is_nil(seen[i], 'index given twice')
          seen[i] = true
        end
      end
      for i = 1, 10 do assert.is_true(seen[i], 'index ' .. i .. ' missing') end
      return parts
    end
    local state = flow.get_rng_state()
    local e0, again, e1 = all(0, 0), all(0, 0), all(1, 0)
    assert.same(e0, again)
    assert.are_not.same(e0, e1)
    assert.are_not.same(e0, all(0, 5))
    H.close(flow.get_rng_state(), state, 0, 'global generator untouched')
  end)

  it('feeds a DataLoader', function()
    local s = data.DistributedSampler(ds, {num_replicas = 2, rank = 1, shuffle = false})
    local loader = data.DataLoader(ds, {batch_size = 2, sampler = s})
    local seen = {}
    for b in loader:iter() do
      for _, v in ipairs(b:totable()) do seen[#seen + 1] = v end
    end
    assert.same({2, 4, 6, 8, 10}, seen)
  end)

  it('rejects bad options', function()
    H.raises(function() data.DistributedSampler(ds, {num_replicas = 2, rank = 2}) end,
             'DistributedSampler', 'invalid rank 2')
    H.raises(function() data.DistributedSampler(ds, {num_replicas = 0}) end, 'num_replicas')
    H.raises(function() data.DistributedSampler({}) end, 'dataset')
  end)
end)
