-- F.embedding_bag / nn.EmbeddingBag with sparse = true (values and dense
-- gradients vs torch are in sampling_spec.lua): the weight's grad is a
-- oneflow.sparse_grad equal to torch 1.13's sparse grad (densified), the
-- padding id left out; SparseAdam steps on it equal torch.optim.SparseAdam.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional

local W = {}
for i = 1, 7 do
  W[i] = {}
  for j = 1, 3 do W[i][j] = math.sin(i * 3 + j) end
end
local IDS = {3, 1, 7, 3, 5, 2, 2, 6}
local OFFS = {1, 4, 4, 6}          -- bags {3,1,7}, {}, {3,5}, {2,2,6}
local GOUT = {}                     -- a fixed upstream gradient [4, 3]
for i = 1, 4 do GOUT[i] = {i * 0.1, -i * 0.2, 0.3} end

local function ours(mode, pad, sparse)
  local w = flow.tensor(W, {dtype = flow.float64, requires_grad = true})
  local o = F.embedding_bag(flow.tensor(IDS, {dtype = flow.int64}), w, flow.tensor(OFFS, {dtype = flow.int64}),
                            {mode = mode, padding_idx = pad, sparse = sparse})
  o:backward(flow.tensor(GOUT, {dtype = flow.float64}))
  return o, w
end

describe('F.embedding_bag with sparse = true', function()
  local torch_it = H.torch_ok() and it or pending

  -- torch 1.13 has no sparse gradient for mode 'max' (ours: below)
  torch_it('leaves a sparse_grad equal to torch\'s sparse gradient, padding left out', function()
    for _, mode in ipairs({'sum', 'mean'}) do
      local rows = H.torch_rows(([[
import torch.nn.functional as F
w = torch.tensor(%s).view(7, 3).requires_grad_()
o = F.embedding_bag(torch.tensor(%s) - 1, w, torch.tensor(%s) - 1, mode='%s', padding_idx=4, sparse=True)
o.backward(torch.tensor(%s).view(4, 3))
assert w.grad.is_sparse
print(' '.join(repr(v) for v in o.flatten().tolist()))
print(' '.join(repr(v) for v in w.grad.to_dense().flatten().tolist()))
]]):format(H.pylist(H.flat(W)), H.pylist(IDS), H.pylist(OFFS), mode, H.pylist(H.flat(GOUT))))
      local o, w = ours(mode, 5, true)
      H.close(o:reshape(-1), rows[1], 1e-12, mode .. ' values')
      assert.is_true(w.grad.is_sparse, mode)
      H.close(w.grad:to_dense():reshape(-1), rows[2], 1e-12, mode .. ' sparse grad')
      for _, i in ipairs(w.grad.indices:totable()) do assert.are_not.equal(5, i) end
      -- the same as the dense gradient
      local _, wd = ours(mode, 5, false)
      H.close(w.grad:to_dense(), wd.grad, 1e-12, mode .. ' dense grad')
    end
  end)

  torch_it('nn.EmbeddingBag + SparseAdam: three steps equal torch.optim.SparseAdam, other rows untouched', function()
    local rows = H.torch_rows(([[
import torch.nn as nn
bag = nn.EmbeddingBag.from_pretrained(torch.tensor(%s).view(7, 3), freeze=False, mode='sum', sparse=True)
opt = torch.optim.SparseAdam(bag.parameters(), lr=0.1)
ids, offs = torch.tensor(%s) - 1, torch.tensor(%s) - 1
for step in range(3):
    opt.zero_grad()
    (bag(ids, offs) * torch.tensor(%s).view(4, 3)).sum().mul(step + 1).backward()
    opt.step()
print(' '.join(repr(v) for v in bag.weight.detach().flatten().tolist()))
]]):format(H.pylist(H.flat(W)), H.pylist(IDS), H.pylist(OFFS), H.pylist(H.flat(GOUT))))
    local bag = nn.EmbeddingBag.from_pretrained(flow.tensor(W, {dtype = flow.float64}),
                                                {freeze = false, mode = 'sum', sparse = true})
    assert.truthy(tostring(bag):find('sparse=true', 1, true))
    local opt = flow.optim.SparseAdam(bag:parameters(), {lr = 0.1})
    local ids, offs = flow.tensor(IDS, {dtype = flow.int64}), flow.tensor(OFFS, {dtype = flow.int64})
    local g = flow.tensor(GOUT, {dtype = flow.float64})
    for step = 1, 3 do
      opt:zero_grad()
      local loss = (bag(ids, offs) * g):sum() * step
      loss:backward()
      opt:step()
    end
    H.close(bag.weight:reshape(-1), rows[1], 1e-12, 'weight after three steps')
    -- row 4 is in no bag: unchanged
    H.close(bag.weight[4], W[4], 0, 'row 4')
  end)

  it('sparse = true in every mode (max too): the dense form equals the dense gradient', function()
    for _, mode in ipairs({'sum', 'mean', 'max'}) do
      local _, ws = ours(mode, nil, true)
      local _, wd = ours(mode, nil, false)
      assert.is_true(ws.grad.is_sparse)
      H.close(ws.grad:to_dense(), wd.grad, 1e-12, mode)
      assert.equal(#IDS, ws.grad.indices:size(1))
      local _, wp = ours(mode, 5, true)    -- the padding id (5) is left out
      assert.equal(#IDS - 1, wp.grad.indices:size(1))
    end
  end)
end)
