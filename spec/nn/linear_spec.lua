local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional
local gradcheck = flow.autograd.gradcheck

local f64 = {dtype = flow.float64}
local function rg64(...) return flow.randn({...}, {dtype = flow.float64, requires_grad = true}) end

-- x [n, k] times w[o, k]^T plus b, in plain Lua
local function ref_linear(x, w, b)
  local r = {}
  for i = 1, #x do
    r[i] = {}
    for o = 1, #w do
      local s = b and b[o] or 0
      for k = 1, #x[1] do s = s + x[i][k] * w[o][k] end
      r[i][o] = s
    end
  end
  return r
end

describe('nn.Linear', function()
  it('computes x W^T + b over the last dim', function()
    local lin = nn.Linear(3, 2, {dtype = flow.float64})
    local x = flow.randn(4, 3, f64)
    H.close(lin(x), ref_linear(x:totable(), lin.weight:totable(), lin.bias:totable()), 1e-12)
    local x3 = flow.randn(2, 5, 3, f64)
    H.close(lin(x3)[2], ref_linear(x3[2]:totable(), lin.weight:totable(), lin.bias:totable()), 1e-12)
    local nob = nn.Linear(3, 2, false)
    assert.is_nil(nob.bias)
    assert.equals(1, #nob:parameters())
    assert.equals('Linear(in_features=3, out_features=2, bias=False)', tostring(nob))
  end)

  it('says what input it expected', function()
    H.raises(function() nn.Linear(120, 10)(flow.zeros(64, 84)) end,
             'Linear: expected input with last dim 120 (in_features), got [64,84]')
    H.raises(function() F.linear(flow.zeros(2, 3), flow.zeros(4, 5)) end,
             'linear: input [2,3] and weight [4,5] do not match')
    H.raises(function() nn.Linear(3) end, 'Linear: missing required argument out_features')
    H.raises(function() nn.Linear(3, 2, {bogus = 1}) end, "Linear: unknown option 'bogus'")
  end)

  it('initialises like PyTorch: U(-1/sqrt(fan_in), 1/sqrt(fan_in))', function()
    local lin = nn.Linear(400, 300)
    local bound = 1 / math.sqrt(400)
    local w = lin.weight
    assert.is_true(w:abs():max():item() <= bound)
    assert.is_true(w:abs():max():item() > 0.95 * bound)
    local var = w:var():item()
    assert.is_true(math.abs(var - bound * bound / 3) < 0.05 * bound * bound / 3, 'var ' .. var)
    assert.is_true(math.abs(w:mean():item()) < 0.02 * bound)
    assert.is_true(lin.bias:abs():max():item() <= bound)
  end)

  it('has correct gradients (gradcheck)', function()
    assert.is_true(gradcheck(F.linear, {rg64(4, 3), rg64(2, 3), rg64(2)}))
    assert.is_true(gradcheck(function(x, w) return F.linear(x, w) end, {rg64(2, 2, 3), rg64(5, 3)}))
  end)
end)

describe('linear weight grads', function()
  it('reach the weight contiguous, equal to g^T x, with or without an input grad', function()
    for _, x_grad in ipairs({false, true}) do
      local w = rg64(4, 3)
      local x = flow.randn(5, 3, f64)
      if x_grad then x:requires_grad_() end
      local g = flow.randn(5, 4, f64)
      F.linear(x, w):backward(g)
      assert.is_true(w.grad:is_contiguous())
      H.close(w.grad, g:t():matmul(x):totable(), 1e-12)
      if x_grad then H.close(x.grad, g:matmul(w:detach()):totable(), 1e-12) end
    end
    -- second order through the transposed product
    assert.is_true(flow.autograd.gradgradcheck(function(x, w) return F.linear(x, w) end,
                                               {rg64(3, 2), rg64(4, 2)}))
  end)
end)

describe('F.linear in inference', function()
  local function op_names(fn)
    local prof = flow.profiler.profile(fn)
    local seen = {}
    for _, e in ipairs(prof:events()) do seen[e.name] = (seen[e.name] or 0) + 1 end
    return seen
  end

  it('is one addmm (the bias as the gemm\'s C) without grads, matmul + add with them', function()
    local w, b = flow.randn(7, 5), flow.randn(7)
    for _, shape in ipairs({{6, 5}, {2, 3, 5}, {2, 1, 4, 5}}) do
      local x = flow.randn(shape)
      local want = x:matmul(w:t()) + b
      local got
      local seen = op_names(function() got = flow.no_grad(function() return F.linear(x, w, b) end) end)
      assert.are.same(want:size():totable(), got:size():totable())
      H.close(got, want, 1e-6)
      assert.are.equal(1, seen.addmm)
      assert.is_nil(seen.matmul)
      assert.is_nil(seen['binary.add'])
    end
    -- float64 too; a non-contiguous input, or a weight that needs a grad,
    -- keeps matmul + add
    local x64, w64, b64 = flow.randn(4, 3, f64), flow.randn(2, 3, f64), flow.randn(2, f64)
    H.close(F.linear(x64, w64, b64), x64:matmul(w64:t()) + b64, 1e-14)
    local xt = flow.randn(5, 6):t()
    local seen = op_names(function() F.linear(xt, w, b) end)
    assert.is_nil(seen.addmm)
    H.close(F.linear(xt, w, b), xt:matmul(w:t()) + b, 1e-6)
    local lin = nn.Linear(5, 7)
    seen = op_names(function() lin(flow.randn(3, 5)) end)
    assert.is_nil(seen.addmm)
    assert.are.equal(1, seen.matmul)
    seen = op_names(function() flow.no_grad(function() lin(flow.randn(3, 5)) end) end)
    assert.are.equal(1, seen.addmm)
  end)
end)

describe('nn.Bilinear', function()
  it('computes x1^T W_k x2 + b_k', function()
    local m = nn.Bilinear(2, 3, 4, {dtype = flow.float64})
    local x1, x2 = flow.randn(5, 2, f64), flow.randn(5, 3, f64)
    local w, b = m.weight:totable(), m.bias:totable()
    local a, c = x1:totable(), x2:totable()
    local want = {}
    for n = 1, 5 do
      want[n] = {}
      for k = 1, 4 do
        local s = b[k]
        for i = 1, 2 do for j = 1, 3 do s = s + a[n][i] * w[k][i][j] * c[n][j] end end
        want[n][k] = s
      end
    end
    H.close(m(x1, x2), want, 1e-12)
    assert.same({5, 4}, H.shape(m(x1, x2)))
    assert.equals('Bilinear(in1_features=2, in2_features=3, out_features=4, bias=True)', tostring(m))
  end)

  it('has correct gradients (gradcheck)', function()
    assert.is_true(gradcheck(F.bilinear, {rg64(3, 2), rg64(3, 3), rg64(2, 2, 3), rg64(2)}))
  end)
end)

describe('nn.Identity, nn.Flatten, nn.Unflatten', function()
  it('reshape as PyTorch with 1-based dims', function()
    local x = flow.randn(2, 3, 4, 5)
    assert.equals(x, nn.Identity(54, {unused = true})(x))
    assert.same({2, 60}, H.shape(nn.Flatten()(x)))
    assert.same({2, 12, 5}, H.shape(nn.Flatten(2, 3)(x)))
    assert.same({2, 3, 2, 2, 5}, H.shape(nn.Unflatten(3, {2, 2})(x)))
    assert.same({2, 3, 4, 5, 1}, H.shape(nn.Unflatten(-1, {5, 1})(x)))
    assert.equals('Flatten(start_dim=2, end_dim=-1)', tostring(nn.Flatten()))
  end)
end)

describe('nn.Embedding', function()
  it('looks up rows with 1-based ids', function()
    local emb = nn.Embedding(4, 3)
    local ids = flow.tensor({{1, 4}, {2, 2}}, {dtype = flow.int64})
    local out = emb(ids)
    assert.same({2, 2, 3}, H.shape(out))
    H.close(out[1][2], emb.weight[4]:totable())
    H.close(out[2][1], emb.weight[2]:totable())
    H.raises(function() emb(flow.tensor({1.5})) end, 'embedding: ids must be an integer tensor')
    local err = H.raises(function() emb(flow.tensor({0, 2}, {dtype = flow.int64})) end,
                         'embedding: index 0 out of range', 'expected 1..4')
    assert.truthy(err:find('linear_spec.lua', 1, true))
  end)

  it('zeroes the padding_idx row and gives it no gradient', function()
    local emb = nn.Embedding(5, 2, {padding_idx = 3})
    H.close(emb.weight[3], {0, 0})
    local ids = flow.tensor({3, 1, 3, 1}, {dtype = flow.int64})
    emb(ids):sum():backward()
    H.close(emb.weight.grad, {{2, 2}, {0, 0}, {0, 0}, {0, 0}, {0, 0}})
    H.raises(function() nn.Embedding(5, 2, {padding_idx = 6}) end, 'padding_idx must be within 1..5')
    assert.equals(5, nn.Embedding(5, 2, {padding_idx = -1}).padding_idx)
  end)

  it('renormalises referenced rows with max_norm', function()
    local w = flow.tensor({{3, 4}, {0.3, 0.4}, {6, 8}})
    local emb = nn.Embedding.from_pretrained(w, {max_norm = 1})
    emb(flow.tensor({1, 2}, {dtype = flow.int64}))
    H.close(emb.weight, {{0.6, 0.8}, {0.3, 0.4}, {6, 8}}, 1e-5)
    assert.is_false(emb.weight.requires_grad)
  end)

  it('has correct gradients (gradcheck)', function()
    local ids = flow.tensor({{1, 3}, {3, 2}}, {dtype = flow.int64})
    assert.is_true(gradcheck(function(w) return F.embedding(ids, w) end, {rg64(3, 2)}))
  end)
end)

describe('distance functions', function()
  it('normalize, cosine_similarity and pairwise_distance', function()
    local a = flow.tensor({{3, 4}, {1, 0}}, f64)
    local b = flow.tensor({{4, 3}, {0, 2}}, f64)
    H.close(F.normalize(a), {{0.6, 0.8}, {1, 0}}, 1e-12)
    H.close(F.normalize(a, {p = 1}), {{3 / 7, 4 / 7}, {1, 0}}, 1e-12)
    H.close(F.cosine_similarity(a, b), {24 / 25, 0}, 1e-12)
    local d = math.sqrt((3 - 4 + 1e-6) ^ 2 + (4 - 3 + 1e-6) ^ 2)
    H.close(F.pairwise_distance(a, b), {d, math.sqrt((1 + 1e-6) ^ 2 + (-2 + 1e-6) ^ 2)}, 1e-12)
    assert.is_true(gradcheck(function(x, y) return F.cosine_similarity(x, y) end, {rg64(3, 4), rg64(3, 4)}))
    assert.is_true(gradcheck(function(x) return F.normalize(x, {dim = 1}) end, {rg64(3, 2)}))
  end)
end)
