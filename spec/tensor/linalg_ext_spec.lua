-- flow.linalg (lua/oneflow/ops/linalg_ext.lua, core/ops/linalg_ext.c).
-- Reference values are from torch 1.13 (torch.linalg.* on the same inputs, float64).
local flow = require 'oneflow'
local H = require 'spec.helpers'

local L = flow.linalg
local gradcheck = flow.autograd.gradcheck
local INF = math.huge
local f64 = flow.float64

local X = {{1, -2, 0}, {3, 0.5, 4}}
local A = {{{1, -2, 3}, {4, 5, -6}, {0.5, 8, 9}}, {{2, 0, 1}, {-1, 3, 2}, {1, 1, -4}}}
local function t64(v, rg) return flow.tensor(v, {dtype = f64, requires_grad = rg}) end

describe('linalg.vector_norm', function()
  it('matches torch.linalg.vector_norm for every kind of ord', function()
    -- torch.linalg.vector_norm(x, ord) and (x, ord, dim=1)
    local want = {
      {2, 5.5, {2.23606797749979, 5.024937810560445}},
      {1, 10.5, {3.0, 7.5}},
      {3, 4.643522023687861, {2.080083823051904, 4.5}},
      {0.5, 46.96869613512066, {5.82842712474619, 19.706120097804877}},
      {0, 5.0, {2.0, 3.0}},
      {INF, 4.0, {2.0, 4.0}},
      {-INF, 0.0, {0.0, 0.5}},
      {-1, 0.0, {0.0, 0.3870967741935484}},
    }
    local x = t64(X)
    for _, w in ipairs(want) do
      H.close(L.vector_norm(x, w[1]), w[2], 1e-12, 'ord ' .. w[1])
      H.close(L.vector_norm(x, w[1], 2), w[3], 1e-12, 'ord ' .. w[1] .. ' dim 2')
      H.close(L.vector_norm(x, w[1], -1), w[3], 1e-12, 'ord ' .. w[1] .. ' dim -1')
      assert.are.same({1, 1}, H.shape(L.vector_norm(x, w[1], {1, 2}, true)))
      assert.are.same({1, 1}, H.shape(L.vector_norm(x, w[1], nil, {keepdim = true})))
    end
    H.close(L.vector_norm(x), 5.5, 1e-12)
    H.close(L.vector_norm(x, {ord = 1, dim = 1}), {4, 2.5, 4}, 1e-12)
    assert.are.same({2, 1}, H.shape(L.vector_norm(x, 2, 2, true)))
    assert.are.equal(f64, L.vector_norm(flow.tensor(X), 2, nil, {dtype = f64}).dtype)
  end)
  it('has correct gradients', function()
    local x = t64({{1, -2, 0.3}, {3, 0.5, 4}}, true)
    for _, ord in ipairs({2, 1, 3, 0.5, INF, -INF, -1}) do
      assert.is_true(gradcheck(function(a) return L.vector_norm(a, ord, 2) end, {x}))
      assert.is_true(gradcheck(function(a) return L.vector_norm(a, ord) end, {x}))
    end
  end)
  it('raises clear errors', function()
    H.raises(function() L.vector_norm(t64(X), 'fro') end, 'linalg.vector_norm', 'ord')
    H.raises(function() L.vector_norm(t64(X), 2, 3) end, 'linalg.vector_norm', 'dim 3')
    H.raises(function() L.vector_norm(flow.tensor({1, 2}, {dtype = flow.int64})) end,
      'linalg.vector_norm', 'floating point')
  end)
end)

describe('linalg.matrix_norm', function()
  it('matches torch.linalg.matrix_norm', function()
    -- torch.linalg.matrix_norm(A, ord) and (A, ord, dim=(0, 2))
    local want = {
      {'fro', {15.370426148939398, 6.082762530298219}, {4.358898943540674, 9.539392014169456, 12.776932339180638}},
      {INF, {17.5, 6.0}, {6.0, 15.0, 17.5}},
      {-INF, {6.0, 3.0}, {3.0, 6.0, 6.0}},
      {1, {18.0, 7.0}, {4.0, 8.0, 13.0}},
      {-1, {5.5, 4.0}, {2.0, 5.0, 1.5}},
    }
    local a = t64(A)
    for _, w in ipairs(want) do
      H.close(L.matrix_norm(a, w[1]), w[2], 1e-12, tostring(w[1]))
      H.close(L.matrix_norm(a, w[1], {1, 3}), w[3], 1e-12, tostring(w[1]) .. ' dims 1, 3')
      assert.are.same({2, 1, 1}, H.shape(L.matrix_norm(a, w[1], nil, true)))
      assert.are.same({2, 1, 1}, H.shape(L.matrix_norm(a, w[1], {keepdim = true})))
    end
    H.close(L.matrix_norm(a), {15.370426148939398, 6.082762530298219}, 1e-12)
  end)
  it('has correct gradients', function()
    local a = t64(A, true)
    for _, ord in ipairs({'fro', INF, -INF, 1, -1}) do
      assert.is_true(gradcheck(function(x) return L.matrix_norm(x, ord) end, {a}))
    end
  end)
  it('raises clear errors', function()
    H.raises(function() L.matrix_norm(t64(A), 3) end, 'linalg.matrix_norm', 'ord 3')
    H.raises(function() L.matrix_norm(t64({1, 2})) end, 'linalg.matrix_norm', 'shape [2]')
    H.raises(function() L.matrix_norm(t64(A), 'fro', {1, 1}) end, 'linalg.matrix_norm', 'different')
  end)
end)

describe('linalg.norm', function()
  it('dispatches like torch.linalg.norm', function()
    local x, a = t64(X), t64(A)
    H.close(L.norm(x), 5.5, 1e-12)                       -- flattened 2-norm
    H.close(L.norm(x, INF), 7.5, 1e-12)                  -- 2-D: matrix inf-norm
    H.close(L.norm(x[1], 3), 2.080083823051904, 1e-12)   -- 1-D: vector norm
    H.close(L.norm(a, nil, {2, 3}), {15.370426148939398, 6.082762530298219}, 1e-12)
    H.close(L.norm(x, 1, 2), {3.0, 7.5}, 1e-12)          -- dim a number: vector norm
    H.close(L.norm(x, 1, {2}), {3.0, 7.5}, 1e-12)
    H.close(L.norm(a), math.sqrt(15.370426148939398 ^ 2 + 6.082762530298219 ^ 2), 1e-12)
    assert.are.same({1, 1, 1}, H.shape(L.norm(a, nil, nil, true)))
  end)
  it('raises like torch for the cases it refuses', function()
    H.raises(function() L.norm(t64(A), 2) end, 'linalg.norm', '1-D or 2-D', '[2,3,3]')
    H.raises(function() L.norm(t64(X), 'fro', 1) end, 'linalg.norm', 'fro')
    H.raises(function() L.norm(t64({1, 2}), 'fro') end, 'linalg.norm', '2-D')
  end)
end)

describe('linalg.multi_dot', function()
  it('multiplies a chain with vector ends', function()
    local x, a = t64(X), t64(A)
    -- torch.linalg.multi_dot([x[0], A[0], A[1], x[1]]) and ([A[0], A[1], x[1]])
    H.close(L.multi_dot({x[1], a[1], a[2], x[2]}), -335.5, 1e-12)
    assert.are.same({}, H.shape(L.multi_dot({x[1], a[1], a[2], x[2]})))
    H.close(L.multi_dot({a[1], a[2], x[2]}), {-40.5, 147.5, -55.5}, 1e-12)
    H.close(L.multi_dot({a[1], a[2]}), a[1]:matmul(a[2]), 1e-12)
    H.close(L.multi_dot({x[1], a[1]}), x[1]:matmul(a[1]), 1e-12)
  end)
  it('has correct gradients', function()
    local p, q, r = t64(X, true), t64(A[1], true), t64({1, 2, -1}, true)
    assert.is_true(gradcheck(function(a, b, c) return L.multi_dot({a, b, c}) end, {p, q, r}))
  end)
  it('raises clear errors', function()
    H.raises(function() L.multi_dot({t64(X)}) end, 'linalg.multi_dot', 'at least 2')
    H.raises(function() L.multi_dot({t64(X), t64(X)}) end, 'linalg.multi_dot', '[2,3] and [2,3]')
    H.raises(function() L.multi_dot({t64(X), t64({1, 2, 3}), t64(X)}) end, 'tensor 2 must be 2-D')
    H.raises(function() L.multi_dot({t64(X), flow.tensor(A[1])}) end, 'same dtype')
  end)
end)

describe('linalg.matrix_power', function()
  it('matches torch.linalg.matrix_power', function()
    local a = t64(A)
    -- torch.linalg.matrix_power(A, 5)
    H.close(L.matrix_power(a, 5), {
      {{18909.25, 20279.5, -16649.25}, {-30231.5, -21994.0, 36052.5}, {4110.125, -44627.5, -42012.75}},
      {{-13.0, 3.0, 268.0}, {-283.0, 279.0, 539.0}, {265.0, 271.0, -1615.0}}}, 1e-12)
    H.close(L.matrix_power(a, 1), a, 0)
    H.close(L.matrix_power(a, 0), flow.eye(3, {dtype = f64}):expand(2, 3, 3), 0)
    H.close(L.matrix_power(a, 4), a:matmul(a):matmul(a):matmul(a), 1e-12)
  end)
  it('has correct gradients', function()
    local a = t64(A[1], true)
    assert.is_true(gradcheck(function(x) return L.matrix_power(x, 3) end, {a:div(4):detach():requires_grad_()}))
  end)
  it('raises clear errors', function()
    H.raises(function() L.matrix_power(t64(X), 2) end, 'linalg.matrix_power', 'square', '[2,3]')
    H.raises(function() L.matrix_power(t64(A), 1.5) end, 'linalg.matrix_power', 'integer')
  end)
end)

describe('linalg.cross', function()
  it('computes cross products with broadcasting', function()
    local a, b = t64({{1, 2, 3}, {4, 5, 6}}), t64({{-1, 0.5, 2}})
    -- torch.linalg.cross(a, b)
    H.close(L.cross(a, b), {{2.5, -5.0, 2.5}, {7.0, -14.0, 7.0}}, 1e-12)
    H.close(L.cross(a:t(), b:t(), {dim = 1}), flow.tensor({{2.5, -5.0, 2.5}, {7.0, -14.0, 7.0}}):t(), 1e-12)
    H.close(L.cross(a:t(), b:t(), 1), flow.tensor({{2.5, -5.0, 2.5}, {7.0, -14.0, 7.0}}):t(), 1e-12)
  end)
  it('has correct gradients', function()
    assert.is_true(gradcheck(L.cross, {t64({{1, 2, 3}, {4, 5, 6}}, true), t64({{-1, 0.5, 2}}, true)}))
  end)
  it('raises clear errors', function()
    H.raises(function() L.cross(t64(X), t64(X):t()) end, 'linalg.cross', 'size 3')
    H.raises(function() L.cross(t64(X), t64(X), {dim = 1}) end, 'linalg.cross', 'size 3', '[2,3]')
  end)
end)

describe('linalg.diagonal', function()
  it('takes diagonals with offsets and dims', function()
    local a = t64(A)
    -- torch.linalg.diagonal(A, offset=1), (A, offset=-1, dim1=0, dim2=2)
    H.close(L.diagonal(a, {offset = 1}), {{-2.0, -6.0}, {0.0, 2.0}}, 0)
    H.close(L.diagonal(a, {offset = -1, dim1 = 1, dim2 = 3}), {{2.0}, {-1.0}, {1.0}}, 0)
    H.close(L.diagonal(a), {{1, 5, 9}, {2, 3, -4}}, 0)
    assert.are.same({2, 0}, H.shape(L.diagonal(a, {offset = 3})))
    H.close(L.diagonal(t64(X), {offset = 1}), {-2, 4}, 0)
  end)
  it('has correct gradients', function()
    assert.is_true(gradcheck(function(x) return L.diagonal(x, {offset = 1}) end, {t64(A, true)}))
  end)
  it('raises clear errors', function()
    H.raises(function() L.diagonal(t64({1, 2})) end, 'linalg.diagonal', 'at least 2 dims')
    H.raises(function() L.diagonal(t64(A), {dim1 = 2, dim2 = -2}) end, 'linalg.diagonal', 'differ')
  end)
end)

------------------------------------------------------------------ kernels (LAPACK)
local SPD = {{4, 1, 2}, {1, 5, 3}, {2, 3, 6}}
local NS = {{2, -1, 0.5}, {1, 3, -2}, {0, 1, -1}}
local SING = {{1, 2, 3}, {2, 4, 6}, {1, 0, 1}}
local BM = {{1, 2}, {3, 4}, {5, 6}}

describe('linalg.inv', function()
  it('matches torch.linalg.inv, batched, in float64 and float32', function()
    -- torch.linalg.inv(torch.stack([SPD, NS]))
    local want = {{{0.3, 0.0, -0.1}, {0.0, 0.2857142857142857, -0.14285714285714285},
                   {-0.1, -0.14285714285714285, 0.2714285714285714}},
                  {{0.4, 0.2, -0.2}, {-0.4, 0.8, -1.8}, {-0.4, 0.8, -2.8}}}
    H.close(L.inv(t64({SPD, NS})), want, 1e-12)
    local y = L.inv(flow.tensor({SPD, NS}, {dtype = flow.float32}))
    assert.are.equal(flow.float32, y.dtype)
    H.close(y, want, 1e-5)
    H.close(L.inv(t64(NS):t()), t64(want[2]):t(), 1e-12)   -- strided input
    assert.are.same({2, 0, 0}, H.shape(L.inv(flow.zeros(2, 0, 0, {dtype = f64}))))
  end)
  it('has correct gradients', function()
    assert.is_true(gradcheck(L.inv, {t64({SPD, NS}, true)}))
  end)
  it('raises clear errors', function()
    -- our LU is of A itself (as torch's batched path): its 3rd pivot is zero
    H.raises(function() L.inv(t64(SING)) end, 'linalg.inv: The diagonal element 3 is zero, '
      .. 'the inversion could not be completed because the input matrix is singular.')
    H.raises(function() L.inv(t64({NS, SING})) end, 'linalg.inv: (Batch element 1): The diagonal element 3')
    H.raises(function() L.inv(t64(X)) end, 'linalg.inv', 'square', '[2,3]')
    H.raises(function() L.inv(flow.tensor({{1, 2}, {3, 4}}, {dtype = flow.int64})) end,
      'linalg.inv', 'float32 or float64', 'int64')
    H.raises(function() L.inv(t64({1, 2})) end, 'linalg.inv', '[2]')
    H.raises(function() L.inv({{1}}) end, 'linalg.inv', 'expected a tensor')
  end)
end)

describe('linalg.det and linalg.slogdet', function()
  it('match torch', function()
    local a = t64({SPD, NS})
    H.close(L.det(a), {70.0, -2.5}, 1e-12)                -- torch.linalg.det
    local sign, logabs = L.slogdet(a)                      -- torch.linalg.slogdet
    H.close(sign, {1, -1}, 0)
    H.close(logabs, {4.2484952420493585, 0.9162907318741553}, 1e-12)
    H.close(L.det(t64(SING)), 0, 0)
    sign, logabs = L.slogdet(t64(SING))
    H.close(sign, 0, 0)
    assert.are.equal(-INF, logabs:item())
    H.close(L.det(flow.zeros(0, 0, {dtype = f64})), 1, 0)
    sign, logabs = L.slogdet(t64({{-2}}))
    H.close(sign, -1, 0)
    H.close(logabs, math.log(2), 1e-15)
    H.close(L.det(flow.tensor({SPD, NS}, {dtype = flow.float32})), {70.0, -2.5}, 1e-5)
    assert.are.same({}, H.shape(L.det(t64(SPD))))
  end)
  it('have correct gradients', function()
    local a = t64({SPD, NS}, true)
    assert.is_true(gradcheck(L.det, {a}))
    assert.is_true(gradcheck(function(x) local _, l = L.slogdet(x) return l end, {a}))
  end)
  it('raise clear errors', function()
    H.raises(function() L.det(t64(X)) end, 'linalg.det', 'square', '[2,3]')
    H.raises(function() L.slogdet(flow.tensor({{1}}, {dtype = flow.int32})) end, 'linalg.slogdet', 'int32')
  end)
end)

describe('linalg.solve', function()
  it('matches torch.linalg.solve with matrices, vectors and broadcasting', function()
    local a = t64({SPD, NS})
    -- torch.linalg.solve(A, B) with B (3, 2) broadcast over A's batch
    H.close(L.solve(a, t64(BM)), {{{-0.2, 0}, {0.14285714285714302, 0.2857142857142857},
      {0.8285714285714284, 0.8571428571428571}}, {{0, 0.4}, {-7, -8.4}, {-12, -14.4}}}, 1e-12)
    -- B 1-D: a vector broadcast over the batch
    H.close(L.solve(a, t64({1, 2, 3})), {{0.0, 0.14285714285714282, 0.4285714285714286},
      {0.2, -4.2, -7.2}}, 1e-12)
    -- B (2, 3) = A's shape without the last dim: a batch of vectors
    H.close(L.solve(a, t64({{1, 2, 3}, {0, 1, 0}})), {{0.0, 0.14285714285714282, 0.4285714285714286},
      {0.2, 0.8, 0.8}}, 1e-12)
    -- torch.linalg.solve(SPD, BM.T, left=False)
    H.close(L.solve(t64(SPD), t64(BM):t(), {left = false}), {{-0.2, 0.1428571428571429, 0.8285714285714285},
      {0, 0.2857142857142857, 0.8571428571428571}}, 1e-12)
    H.close(t64(NS):matmul(L.solve(t64(NS), t64(BM))), BM, 1e-12)
    H.close(L.solve(flow.tensor(SPD), flow.tensor(BM)), L.solve(t64(SPD), t64(BM)), 1e-5)
  end)
  it('has correct gradients, broadcast batch dims included', function()
    assert.is_true(gradcheck(L.solve, {t64({SPD, NS}, true), t64(BM, true)}))
    assert.is_true(gradcheck(L.solve, {t64(NS, true), t64({1, 2, 3}, true)}))
    assert.is_true(gradcheck(function(a, b) return L.solve(a, b, {left = false}) end,
      {t64(NS, true), t64({{1, 2, 3}, {0, 1, -1}}, true)}))
  end)
  it('raises clear errors', function()
    H.raises(function() L.solve(t64(SING), t64(BM)) end, 'linalg.solve', 'singular')
    H.raises(function() L.solve(t64(SPD), t64({{1, 2}, {3, 4}})) end, 'linalg.solve',
      'incompatible shapes', '[3,3] and [2,2]')
    H.raises(function() L.solve(t64({SPD, NS}), t64({BM, BM, BM})) end, 'linalg.solve', 'do not broadcast')
    H.raises(function() L.solve(t64(SPD), flow.tensor(BM)) end, 'linalg.solve', 'same dtype')
  end)
end)

describe('linalg.cholesky', function()
  it('matches torch.linalg.cholesky', function()
    local want = {{2.0, 0.0, 0.0}, {0.5, 2.179449471770337, 0.0},
                  {1.0, 1.1470786693528088, 1.9194297398747862}}   -- torch.linalg.cholesky(SPD)
    H.close(L.cholesky(t64(SPD)), want, 1e-12)
    H.close(L.cholesky(t64(SPD), {upper = true}), t64(want):t(), 1e-12)
    H.close(L.cholesky(flow.tensor(SPD)), want, 1e-6)
    local two = L.cholesky(t64({SPD, {{1, 0, 0}, {0, 4, 0}, {0, 0, 9}}}))
    H.close(two[2], {{1, 0, 0}, {0, 2, 0}, {0, 0, 3}}, 1e-15)
    -- only the lower triangle is read
    H.close(L.cholesky(t64({{4, 100, 100}, {1, 5, 100}, {2, 3, 6}})), want, 1e-12)
  end)
  it('has torch gradients and passes finite differences', function()
    local g = t64({{1, -2, 0.5}, {0.3, 1, 2}, {-1, 0.7, 1.5}})
    local a = t64(SPD, true)
    L.cholesky(a):mul(g):sum():backward()
    -- torch: (torch.linalg.cholesky(A) * g).sum().backward(); A.grad
    H.close(a.grad, {{0.45849051205035807, 0.03424791963448257, -0.4341049839179573},
      {0.034247919634482565, 0.2531326668735946, -0.04506217270576243},
      {-0.43410498391795727, -0.04506217270576244, 0.3907410541887958}}, 1e-12)
    a = t64(SPD, true)
    L.cholesky(a, {upper = true}):mul(g):sum():backward()
    H.close(a.grad, {{0.4794900843072468, -0.6506301423772076, -0.13366509742588986},
      {-0.6506301423772076, 0.09616400685689452, 0.25317828132596787},
      {-0.13366509742588986, 0.25317828132596787, 0.3907410541887958}}, 1e-12)
    -- through a symmetric input, so finite differences see the same function
    local I = flow.eye(3, {dtype = f64})
    for _, upper in ipairs({false, true}) do
      assert.is_true(gradcheck(function(x)
        return L.cholesky(x:matmul(x:t()) + I, {upper = upper})
      end, {t64(NS, true)}))
    end
  end)
  it('raises clear errors', function()
    H.raises(function() L.cholesky(t64({{1, 2}, {2, 1}})) end, 'linalg.cholesky: The factorization '
      .. 'could not be completed because the input is not positive-definite (the leading minor '
      .. 'of order 2 is not positive-definite).')
    H.raises(function() L.cholesky(t64({SPD, SING})) end, 'linalg.cholesky: (Batch element 1)')
    H.raises(function() L.cholesky(t64(X)) end, 'linalg.cholesky', 'square')
  end)
end)

describe('linalg.matrix_power with negative n', function()
  it('uses the inverse', function()
    -- torch.linalg.matrix_power(NS, -2)
    H.close(L.matrix_power(t64(NS), -2), {{0.16, 0.08, 0.12}, {0.24, -0.88, 3.68},
      {0.64, -1.68, 6.48}}, 1e-12)
    assert.is_true(gradcheck(function(x) return L.matrix_power(x, -3) end, {t64(SPD, true)}))
    H.raises(function() L.matrix_power(t64(SING), -1) end, 'linalg.inv', 'singular')
  end)
end)

describe('linalg kernels under create_graph', function()
  -- h(A) = sum(V * d/dA sum(W * f(A))): its gradient by double backward
  -- against central finite differences of h.
  local W = t64({{1, 2, 3}, {-1, 0.5, 2}, {0.3, 0.2, -1}})
  local V = t64({{0.5, -1, 2}, {1, 0.25, -0.5}, {2, 1, 1}})
  local function h(f, a)
    local y = f(a)
    local g = flow.autograd.grad({(y * (y:dim() == 0 and 1 or W)):sum()}, {a}, nil,
      {create_graph = true})[1]
    return (g * V):sum()
  end
  local I = flow.eye(3, {dtype = f64})
  local fs = {
    inv = L.inv, det = L.det, solve = function(x) return L.solve(x, W) end,
    slogdet = function(x) local _, l = L.slogdet(x) return l end,
    cholesky = function(x) return L.cholesky(x:matmul(x:t()) + I) end,
  }
  for name, f in pairs(fs) do
    it(name .. ' has correct second derivatives', function()
      local a = t64(NS, true)
      local gg = flow.autograd.grad({h(f, a)}, {a})[1]
      local eps = 1e-6
      for i = 1, 3 do
        for j = 1, 3 do
          local p, m = t64(NS), t64(NS)
          p[i][j] = NS[i][j] + eps
          m[i][j] = NS[i][j] - eps
          local fd = (h(f, p:requires_grad_()):item() - h(f, m:requires_grad_()):item()) / (2 * eps)
          H.close(gg[i][j], fd, 1e-6, name .. (' [%d][%d]'):format(i, j))
        end
      end
    end)
  end
end)

describe('linalg.svdvals and the singular-value matrix norms', function()
  it('match torch', function()
    local a, x = t64(A), t64(X)
    -- torch.linalg.svdvals(A), (X), (X.T)
    H.close(L.svdvals(a), {{12.212042887313794, 9.032227093501053, 2.3526330461493856},
      {4.740897958188272, 3.1529054546192077, 2.1408114686442414}}, 1e-12)
    H.close(L.svdvals(x), {5.044367227535482, 2.191884867817193}, 1e-12)
    H.close(L.svdvals(x:t()), {5.044367227535482, 2.191884867817193}, 1e-12)
    H.close(L.svdvals(flow.tensor(X)), {5.044367227535482, 2.191884867817193}, 1e-6)
    assert.are.same({2, 0}, H.shape(L.svdvals(flow.zeros(2, 0, 3, {dtype = f64}))))
    -- torch.linalg.matrix_norm(A, ord) and (A, ord, dim=(0, 2)); torch.linalg.norm(X, ord)
    local want = {
      {'nuc', {23.596903026964235, 10.034614881451722},
        {5.6935408899031135, 12.515404760761346, 15.79445623974318}, 7.236252095352675},
      {2, {12.212042887313794, 4.740897958188272},
        {4.028251732890691, 8.775868562064888, 12.28571168742763}, 5.044367227535482},
      {-2, {2.3526330461493856, 2.1408114686442414},
        {1.6652891570124224, 3.7395361986964577, 3.5087445523155503}, 2.191884867817193},
    }
    for _, w in ipairs(want) do
      H.close(L.matrix_norm(a, w[1]), w[2], 1e-12, tostring(w[1]))
      H.close(L.matrix_norm(a, w[1], {1, 3}), w[3], 1e-12, tostring(w[1]) .. ' dims 1, 3')
      H.close(L.norm(x, w[1]), w[4], 1e-12, 'norm ' .. tostring(w[1]))
      assert.are.same({1, 3, 1}, H.shape(L.matrix_norm(a, w[1], {1, 3}, true)))
    end
  end)
  it('have correct gradients', function()
    assert.is_true(gradcheck(L.svdvals, {t64(A, true)}))
    assert.is_true(gradcheck(L.svdvals, {t64(X, true)}))
    for _, ord in ipairs({'nuc', 2, -2}) do
      assert.is_true(gradcheck(function(v) return L.matrix_norm(v, ord) end, {t64(A, true)}))
    end
  end)
  it('raise clear errors', function()
    H.raises(function() L.svdvals(t64({1, 2})) end, 'linalg.svdvals', 'at least 2 dims')
    H.raises(function() L.svdvals(flow.tensor({{1}}, {dtype = flow.int64})) end, 'linalg.svdvals', 'int64')
    local a = t64(A, true)
    H.raises(function() flow.autograd.grad({L.svdvals(a):sum()}, {a}, nil, {create_graph = true}) end,
      'linalg.svdvals: double backward (create_graph = true) is not supported')
  end)
end)
