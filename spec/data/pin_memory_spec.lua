-- DataLoader pin_memory and device prefetch: pinned batches (or a no-op
-- with a note where CUDA is unavailable), and batches copied to the GPU one
-- ahead on a side stream, equal to the CPU batches.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local data = flow.utils.data

local has_gpu = flow.cuda.is_available()

local Pairs = data.Dataset:subclass('PinPairs')
function Pairs:init(n) self.n = n end
function Pairs:len() return self.n end
function Pairs.get(_, i)
  return flow.full({3}, i), {label = i, w = flow.full({2, 2}, -i)}
end

local function batches(loader)
  local res = {}
  for x, y in loader:iter() do res[#res + 1] = {x = x, y = y} end
  return res
end

local function same(got, want, on)
  assert.are.equal(#want, #got)
  for k = 1, #want do
    assert.are.equal(on, got[k].x.device.type)
    H.close(got[k].x:cpu(), want[k].x, 0, 'x ' .. k)
    H.close(got[k].y.w:cpu(), want[k].y.w, 0, 'w ' .. k)
    H.close(got[k].y.label:cpu(), want[k].y.label, 0, 'label ' .. k)
  end
end

describe('DataLoader pin_memory', function()
  local plain = batches(data.DataLoader(Pairs(10), {batch_size = 4}))

  it('gives the same batches, pinned where CUDA is available', function()
    for _, nw in ipairs({0, 2}) do
      local loader = data.DataLoader(Pairs(10), {batch_size = 4, pin_memory = true,
                                                 num_workers = nw})
      local got = batches(loader)
      same(got, plain, 'cpu')
      if has_gpu then
        assert.is_true(loader.pin_memory)
        for _, b in ipairs(got) do
          assert.is_true(b.x:is_pinned())
          assert.is_true(b.y.w:is_pinned())
        end
      else
        assert.is_false(loader.pin_memory)
        assert.truthy(loader.pin_memory_note:find('CUDA is not available', 1, true))
        assert.is_false(got[1].x:is_pinned())
      end
    end
  end)

  if not has_gpu then
    it('refuses a device batches cannot reach, saying why', function()
      H.raises(function() data.DataLoader(Pairs(4), {device = 'cuda'}) end,
               'DataLoader: device cuda is not available')
    end)
    pending('device prefetch skipped: no usable GPU (' .. flow.cuda.why_unavailable() .. ')')
    return
  end

  it('device = cuda: batches arrive on the GPU, copied one ahead on a side stream', function()
    for _, nw in ipairs({0, 2}) do
      local loader = data.DataLoader(Pairs(10), {batch_size = 4, device = 'cuda',
                                                 num_workers = nw})
      assert.is_true(loader.pin_memory)
      local got, acc = {}, flow.zeros(3, {device = 'cuda'})
      for x, y in loader:iter() do
        -- work on the current stream between batches; the next copy overlaps it
        acc = acc + (x:matmul(flow.ones(3, 3, {device = 'cuda'}))):sum(1)
        got[#got + 1] = {x = x, y = y}
      end
      same(got, plain, 'cuda')
      local want = flow.zeros(3)
      for _, b in ipairs(plain) do want = want + b.x:matmul(flow.ones(3, 3)):sum(1) end
      H.close(acc:cpu(), want, 1e-4, 'sum over the epoch')
    end
  end)
end)
