-- Sparse embedding gradients (oneflow.sparse_grad) with optim.SGD and
-- optim.SparseAdam, against torch.optim where PyTorch is installed.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local N, D = 10, 4
-- the batches of 1-based ids, one per step: duplicates, and rows 7..10 never used
local batches = {{{1, 3, 3}, {5, 1, 2}}, {{3, 3, 3}, {6, 2, 5}}, {{2, 4, 1}, {1, 6, 6}}, {{5, 5, 4}, {3, 1, 2}}}

local function weight0()
  local i = flow.arange(0, N * D, {dtype = flow.float64})
  return (flow.sin(i * 0.37) * 0.8):reshape(N, D):float()
end

-- loss = sum(emb(ids) * cos(k * 0.3 + j * 0.11)) for the k-th output element j
local function targets(n)
  local j = flow.arange(0, n * D, {dtype = flow.float64})
  return flow.cos(j * 0.11 + 0.3):reshape(2, 3, D):float()
end

local function train(make_opt, opts)
  local e = flow.nn.Embedding(N, D, {sparse = true, _weight = weight0():clone(), padding_idx = opts.padding_idx})
  local opt = make_opt(e:parameters())
  local grads = {}
  for k, b in ipairs(batches) do
    opt:zero_grad()
    local y = e(flow.tensor(b, {dtype = flow.int64}))
    ;(y * targets(6) * k):sum():backward()
    grads[k] = e.weight.grad:to_dense()
    opt:step()
  end
  return e.weight:detach(), grads
end

describe('sparse embedding gradients', function()
  it('hold the used ids and rows; duplicates sum; padding rows are left out', function()
    local e = flow.nn.Embedding(N, D, {sparse = true, padding_idx = 2})
    e(flow.tensor({{1, 3, 3}, {2, 5, 1}}, {dtype = flow.int64})):sum():backward()
    local g = e.weight.grad
    assert.is_true(g.is_sparse)
    assert.same({1, 3, 3, 5, 1}, g.indices:totable())
    assert.same({N, D}, g:size())
    local c = g:coalesce()
    assert.same({1, 3, 5}, c.indices:totable())
    assert.same({2, 2, 2, 2}, c.values[1]:totable())
    local dense = g:to_dense()
    assert.same({0, 0, 0, 0}, dense[2]:totable())
    assert.same({1, 1, 1, 1}, dense[5]:totable())
    -- the same lookup without sparse gives the same dense gradient
    local d = flow.nn.Embedding(N, D, {padding_idx = 2, _weight = e.weight:detach():clone()})
    d(flow.tensor({{1, 3, 3}, {2, 5, 1}}, {dtype = flow.int64})):sum():backward()
    assert.same(d.weight.grad:totable(), dense:totable())
  end)

  it('accumulate over two backward passes and clear with zero_grad', function()
    local e = flow.nn.Embedding(N, D, {sparse = true})
    local opt = flow.optim.SGD(e:parameters(), {lr = 0.1})
    e(flow.tensor({1, 2}, {dtype = flow.int64})):sum():backward()
    flow.nn.functional.embedding(flow.tensor({2}, {dtype = flow.int64}), e.weight, {sparse = true}):sum():backward()
    assert.same({1, 2, 2}, e.weight.grad.indices:totable())
    opt:zero_grad()
    assert.is_nil(e.weight.grad)
  end)

  it('SGD and SparseAdam leave unused rows bitwise unchanged', function()
    for _, mk in ipairs({function(p) return flow.optim.SGD(p, {lr = 0.1}) end,
                         function(p) return flow.optim.SparseAdam(p, {lr = 0.05}) end}) do
      local w = train(mk, {})
      local w0 = weight0()
      for r = 7, N do assert.same(w0[r]:totable(), w[r]:totable()) end
      assert.is_true((w[1] - w0[1]):abs():max():item() > 1e-3)
    end
  end)

  it('an optimizer that cannot take the gradient names itself and the parameter', function()
    local e = flow.nn.Embedding(N, D, {sparse = true})
    local adam = flow.optim.Adam(e:parameters())
    e(flow.tensor({1, 2}, {dtype = flow.int64})):sum():backward()
    local ok, err = pcall(adam.step, adam)
    assert.is_false(ok)
    assert.matches('Adam: parameter 1 of param group 1 %(shape %[10, 4%]%) has a sparse gradient', err)
    local sgd = flow.optim.SGD(e:parameters(), {lr = 0.1, momentum = 0.9})
    ok, err = pcall(sgd.step, sgd)
    assert.is_false(ok)
    assert.matches('SGD: parameter 1 has a sparse gradient; sparse gradients take momentum = 0', err)
    local d = flow.nn.Embedding(N, D)
    local sa = flow.optim.SparseAdam(d:parameters())
    d(flow.tensor({1, 2}, {dtype = flow.int64})):sum():backward()
    ok, err = pcall(sa.step, sa)
    assert.is_false(ok)
    assert.matches('SparseAdam: parameter 1 of param group 1 %(shape %[10, 4%]%) has a dense gradient', err)
  end)
end)

local function torch_available()
  return os.execute('/usr/bin/python3 -c "import torch" >/dev/null 2>&1') == 0
end
local check = torch_available() and it or pending
describe('sparse embedding training against PyTorch', function()
  local function lua_list(t)
    local r = {}
    for _, b in ipairs(t) do r[#r + 1] = '[' .. table.concat(b, ',') .. ']' end
    return '[' .. table.concat(r, ',') .. ']'
  end
  local function reference(opt_py, pad)
    local bs = {}
    for _, b in ipairs(batches) do bs[#bs + 1] = lua_list(b) end
    local script = ([[
import torch
N, D = %d, %d
batches = [%s]
pad = %s
i = torch.arange(N * D, dtype=torch.float64)
w0 = (torch.sin(i * 0.37) * 0.8).reshape(N, D).float()
j = torch.arange(6 * D, dtype=torch.float64)
tgt = torch.cos(j * 0.11 + 0.3).reshape(2, 3, D).float()
e = torch.nn.Embedding(N, D, sparse=True, padding_idx=pad, _weight=w0.clone())
opt = %s
for k, b in enumerate(batches, 1):
    opt.zero_grad()
    y = e(torch.tensor(b) - 1)
    (y * tgt * k).sum().backward()
    print(' '.join('%%.9g' %% v for v in e.weight.grad.to_dense().reshape(-1).tolist()))
    opt.step()
print(' '.join('%%.9g' %% v for v in e.weight.detach().reshape(-1).tolist()))
]]):format(N, D, table.concat(bs, ','), pad and tostring(pad - 1) or 'None', opt_py)
    return H.python_lines(script)
  end
  local function compare(lines, w, grads)
    assert.equal(#batches + 1, #lines)
    for k, g in ipairs(grads) do
      H.close(flow.tensor(H.numbers(lines[k])):reshape(N, D), g, 1e-6, 'grad of step ' .. k)
    end
    H.close(flow.tensor(H.numbers(lines[#lines])):reshape(N, D), w, 1e-6, 'weight')
  end
  check('SparseAdam gives torch.optim.SparseAdam\'s weights to 1e-6', function()
    local w, g = train(function(p) return flow.optim.SparseAdam(p, {lr = 0.05, betas = {0.8, 0.95}}) end, {})
    compare(reference('torch.optim.SparseAdam(e.parameters(), lr=0.05, betas=(0.8, 0.95))'), w, g)
  end)
  check('SparseAdam with padding_idx gives torch\'s weights to 1e-6', function()
    local w, g = train(function(p) return flow.optim.SparseAdam(p, {lr = 0.05}) end, {padding_idx = 3})
    compare(reference('torch.optim.SparseAdam(e.parameters(), lr=0.05)', 3), w, g)
  end)
  check('SGD gives torch.optim.SGD\'s weights to 1e-6', function()
    local w, g = train(function(p) return flow.optim.SGD(p, {lr = 0.1}) end, {})
    compare(reference('torch.optim.SGD(e.parameters(), lr=0.1)'), w, g)
  end)
end)
