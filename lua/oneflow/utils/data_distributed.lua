-- oneflow.utils.data_distributed: DistributedSampler (PyTorch semantics),
-- each rank's share of a dataset for data-parallel training.
--
--   local s = data.DistributedSampler(ds, {shuffle = true, seed = 0})
--   local loader = data.DataLoader(ds, {batch_size = 32, sampler = s})
--   for epoch = 1, E do s:set_epoch(epoch) ... end
--
-- The order is a permutation seeded by seed + epoch (the same on every
-- rank), padded by repeating its start to a multiple of num_replicas (or
-- cut, with drop_last); rank r takes positions r+1, r+1+n, r+1+2n, ...
-- Shuffling does not touch the global random generator's state.
local T = require 'oneflow.tensor'

return function(data)
  --- DistributedSampler(dataset, {num_replicas =, rank =, shuffle = true, seed = 0, drop_last = false}): this
  -- rank's share of the indices; call :set_epoch(e) each epoch.
  -- @function utils.data.DistributedSampler
  local DistributedSampler = data.Sampler:subclass('DistributedSampler')

  local function int_opt(name, v, min)
    if type(v) ~= 'number' or v ~= math.floor(v) or v < min then
      error(('DistributedSampler: %s must be an integer >= %d, got %s'):format(name, min,
            tostring(v)), 4)
    end
    return v
  end

  --- DistributedSampler(dataset[, {num_replicas = world size, rank = this
  -- rank, shuffle = true, seed = 0, drop_last = false}])
  function DistributedSampler:init(ds, opts)
    opts = require('oneflow._args').check_options('DistributedSampler', opts,
        {'drop_last', 'num_replicas', 'rank', 'seed', 'shuffle'})
    local ok, len = pcall(function() return ds:len() end)
    if not ok or type(len) ~= 'number' then
      error('DistributedSampler: expected a dataset with len()', 3)
    end
    local env = require('oneflow.distributed.comm').env
    self.dataset = ds
    self.num_replicas = int_opt('num_replicas', opts.num_replicas or env.get_world_size(), 1)
    self.rank = int_opt('rank', opts.rank or env.get_rank(), 0)
    if self.rank >= self.num_replicas then
      error(('DistributedSampler: invalid rank %d, rank should be in the interval [0, %d]')
            :format(self.rank, self.num_replicas - 1), 3)
    end
    self.shuffle = opts.shuffle ~= false
    self.seed = int_opt('seed', opts.seed or 0, 0)
    self.drop_last = opts.drop_last == true
    self.epoch = 0
    local n = self.num_replicas
    if self.drop_last and len % n ~= 0 then
      self.num_samples = math.ceil((len - n) / n)
    else
      self.num_samples = math.ceil(len / n)
    end
    self.total_size = self.num_samples * n
  end

  function DistributedSampler:len() return self.num_samples end

  --- Makes the next iter() shuffle differently (call it every epoch).
  function DistributedSampler:set_epoch(epoch)
    self.epoch = int_opt('epoch', epoch, 0)
  end

  function DistributedSampler:iter()
    local len = self.dataset:len()
    local idx = {}
    if self.shuffle and len > 0 then
      local flow = T.flow
      local saved = flow.get_rng_state()
      flow.manual_seed(self.seed + self.epoch)
      idx = flow.randperm(len):totable()
      flow.set_rng_state(saved)
    else
      for i = 1, len do idx[i] = i end
    end
    if not self.drop_last then
      local k = 1
      while #idx < self.total_size and len > 0 do
        idx[#idx + 1] = idx[k]
        k = k + 1
      end
    end
    local mine = {}
    for i = self.rank + 1, self.total_size, self.num_replicas do mine[#mine + 1] = idx[i] end
    local i = 0
    return function()
      i = i + 1
      return mine[i]
    end
  end

  return DistributedSampler
end
