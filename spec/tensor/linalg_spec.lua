local flow = require 'oneflow'
local H = require 'spec.helpers'

-- Plain Lua reference product of two nested tables (m x k) and (k x n).
local function ref_mm(a, b)
  local res = {}
  for i = 1, #a do
    res[i] = {}
    for j = 1, #b[1] do
      local s = 0
      for p = 1, #b do s = s + a[i][p] * b[p][j] end
      res[i][j] = s
    end
  end
  return res
end

-- Deterministic small values (-3..3) of a given shape.
local function seq(shape, dtype, mod)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return (flow.arange(n) % (mod or 7) - 3):to(dtype or flow.float64):view(shape)
end

local A = {{1, 2, 3}, {4, 5, 6}}
local B = {{7, 8}, {9, 10}, {11, 12}}
local AB = {{58, 64}, {139, 154}}   -- by hand: 1*7+2*9+3*11 = 58, ...

describe('matmul', function()
  it('multiplies 2-D matrices in float64, float32 and integer dtypes', function()
    for _, dt in ipairs({flow.float64, flow.float32, flow.int64, flow.int32, flow.uint8}) do
      local c = flow.tensor(A, {dtype = dt}):matmul(flow.tensor(B, {dtype = dt}))
      assert.are.equal(dt, c.dtype)
      assert.are.same({2, 2}, H.shape(c))
      assert.are.same(AB, c:totable())
    end
    assert.are.same(AB, flow.matmul(flow.tensor(A), flow.tensor(B)):totable())
    -- int8 wraps around like PyTorch: 139 - 256, 154 - 256
    local c8 = flow.tensor(A, {dtype = flow.int8}):matmul(flow.tensor(B, {dtype = flow.int8}))
    assert.are.same({{58, 64}, {-117, -102}}, c8:totable())
  end)

  it('computes float16 and bfloat16 through float32', function()
    for _, dt in ipairs({flow.float16, flow.bfloat16}) do
      local c = flow.tensor(A, {dtype = dt}):matmul(flow.tensor(B, {dtype = dt}))
      assert.are.equal(dt, c.dtype)
      assert.are.same(AB, c:totable())
    end
  end)

  it('takes transposed and other non-contiguous operands', function()
    local a = flow.tensor(A, {dtype = flow.float64})
    local at = flow.tensor({{1, 4}, {2, 5}, {3, 6}}, {dtype = flow.float64}):t()
    assert.is_false(at:is_contiguous())
    local b = flow.tensor(B, {dtype = flow.float64})
    local bt = flow.tensor({{7, 9, 11}, {8, 10, 12}}, {dtype = flow.float64}):t()
    assert.are.same(AB, at:matmul(b):totable())
    assert.are.same(AB, a:matmul(bt):totable())
    assert.are.same(AB, at:matmul(bt):totable())
    -- a^T a, by hand
    assert.are.same({{17, 22, 27}, {22, 29, 36}, {27, 36, 45}}, a:t():matmul(a):totable())
    -- a column slice keeps a row stride larger than its width
    local wide = flow.tensor({{1, 2, 3, 0}, {4, 5, 6, 0}}, {dtype = flow.float32}):narrow(2, 1, 3)
    assert.is_false(wide:is_contiguous())
    assert.are.same(AB, wide:matmul(flow.tensor(B)):totable())
    -- broadcast rows (stride 0) are made contiguous
    local rows = flow.tensor({{1, 2, 3}}, {dtype = flow.float64}):expand(2, 3)
    assert.are.same({{58, 64}, {58, 64}}, rows:matmul(b):totable())
    -- integers, transposed
    local ai = flow.tensor({{1, 4}, {2, 5}, {3, 6}}, {dtype = flow.int64}):t()
    local bi = flow.tensor({{7, 9, 11}, {8, 10, 12}}, {dtype = flow.int64}):t()
    assert.are.same(AB, ai:matmul(bi):totable())
  end)

  it('handles 1-D operands like PyTorch', function()
    local v = flow.tensor({1, 2, 3}, {dtype = flow.float64})
    local d = v:matmul(flow.tensor({4, 5, 6}, {dtype = flow.float64}))
    assert.are.equal(0, d:dim())
    assert.are.equal(32, d:item())
    local a, b = flow.tensor(A, {dtype = flow.float64}), flow.tensor(B, {dtype = flow.float64})
    local mv = a:matmul(v)
    assert.are.same({2}, H.shape(mv))
    assert.are.same({14, 32}, mv:totable())
    local vm = v:matmul(b)
    assert.are.same({2}, H.shape(vm))
    assert.are.same({58, 64}, vm:totable())
    -- 1-D with a batched operand: the vector broadcasts over the batch
    local x = seq({2, 2, 3})
    local r = x:matmul(v)
    assert.are.same({2, 2}, H.shape(r))
    local xt = x:totable()
    for bi = 1, 2 do
      for i = 1, 2 do
        local s = 0
        for p = 1, 3 do s = s + xt[bi][i][p] * ({1, 2, 3})[p] end
        assert.are.equal(s, r:totable()[bi][i])
      end
    end
    local l = flow.tensor({1, 1}, {dtype = flow.float64}):matmul(x)
    assert.are.same({2, 3}, H.shape(l))
    H.close(l, {{xt[1][1][1] + xt[1][2][1], xt[1][1][2] + xt[1][2][2], xt[1][1][3] + xt[1][2][3]},
                {xt[2][1][1] + xt[2][2][1], xt[2][1][2] + xt[2][2][2], xt[2][1][3] + xt[2][2][3]}})
    -- strided vectors
    local sv = flow.tensor({{1, 0}, {2, 0}, {3, 0}}, {dtype = flow.float64}):select(2, 1)
    assert.are.equal(32, sv:matmul(flow.tensor({4, 5, 6}, {dtype = flow.float64})):item())
    assert.are.same({14, 32}, a:matmul(sv):totable())
  end)

  it('broadcasts batch dims', function()
    local x = seq({2, 1, 2, 3})          -- batch [2,1]
    local y = seq({3, 3, 2}, nil, 5)     -- batch [3]
    local z = x:matmul(y)
    assert.are.same({2, 3, 2, 2}, H.shape(z))
    local xt, yt, zt = x:totable(), y:totable(), z:totable()
    for i = 1, 2 do
      for j = 1, 3 do
        assert.are.same(ref_mm(xt[i][1], yt[j]), zt[i][j])
      end
    end
    -- (b, m, k) @ (k, n): one folded gemm
    local w = seq({3, 4}, nil, 5)
    local f = seq({4, 2, 3}):matmul(w)
    assert.are.same({4, 2, 4}, H.shape(f))
    local ft, st = f:totable(), seq({4, 2, 3}):totable()
    for b = 1, 4 do assert.are.same(ref_mm(st[b], w:totable()), ft[b]) end
    -- permuted batch (not foldable) and integer batches
    local p = seq({2, 4, 3}):permute(2, 1, 3)   -- (4, 2, 3), batch stride 3
    local pt = p:totable()
    local pf = p:matmul(w)
    for b = 1, 4 do assert.are.same(ref_mm(pt[b], w:totable()), pf:totable()[b]) end
    local xi, yi = seq({2, 1, 2, 3}, flow.int64), seq({3, 3, 2}, flow.int64, 5)
    assert.are.same(zt, xi:matmul(yi):totable())
  end)

  it('runs many small matrices of a batch side by side', function()
    local x, y = seq({16, 5, 4}, flow.float32), seq({16, 4, 6}, flow.float32, 5)
    local z = flow.bmm(x, y)
    local xt, yt, zt = x:totable(), y:totable(), z:totable()
    for b = 1, 16 do assert.are.same(ref_mm(xt[b], yt[b]), zt[b]) end
  end)

  it('splits large products over the threads, in every layout', function()
    -- integer-valued operands: every sum is exact, so splits must agree bit for bit
    local nt = flow.get_num_threads()
    flow.set_num_threads(2)
    for _, dt in ipairs({flow.float32, flow.float64}) do
      for _, mn in ipairs({{40, 50}, {90, 20}}) do
        local m, n, k = mn[1], mn[2], 300
        local a, b = seq({m, k}, dt), seq({k, n}, dt, 5)
        local ref = ref_mm(a:totable(), b:totable())
        assert.are.same(ref, a:matmul(b):totable())
        assert.are.same(ref, a:t():contiguous():t():matmul(b):totable())          -- A^T layout
        assert.are.same(ref, a:matmul(b:t():contiguous():t()):totable())          -- B^T layout
        local ab = flow.bmm(flow.stack({a, a * 2}), flow.stack({b, b}))
        assert.are.same(ref, ab[1]:totable())
        local twice = {}
        for i, row in ipairs(ref) do
          twice[i] = {}
          for j, v in ipairs(row) do twice[i][j] = 2 * v end
        end
        assert.are.same(twice, ab[2]:totable())
        local c = flow.ones(m, n, {dtype = dt})
        local r = flow.addmm(c, a, b, {beta = 3, alpha = 2})
        for i, row in ipairs(r:totable()) do
          for j, v in ipairs(row) do assert.equals(3 + 2 * ref[i][j], v) end
        end
      end
    end
    flow.set_num_threads(nt)
  end)

  it('gives zeros for an empty inner dim and empty results for empty outer dims', function()
    local z = flow.zeros(2, 0):matmul(flow.zeros(0, 3))
    assert.are.same({{0, 0, 0}, {0, 0, 0}}, z:totable())
    local zi = flow.zeros(2, 0, {dtype = flow.int64}):matmul(flow.zeros(0, 3, {dtype = flow.int64}))
    assert.are.same({{0, 0, 0}, {0, 0, 0}}, zi:totable())
    assert.are.same({0, 3}, H.shape(flow.zeros(0, 2):matmul(flow.zeros(2, 3))))
    assert.are.equal(0, flow.zeros(0):matmul(flow.zeros(0)):item())
  end)

  it('reports shape, dtype and rank errors naming the op', function()
    local err = H.raises(function() flow.zeros(2, 3):matmul(flow.zeros(4, 5)) end)
    assert.truthy(err:find('matmul: shapes [2,3] and [4,5] do not match (3 vs 4)', 1, true))
    H.raises(function() flow.zeros(3):matmul(flow.zeros(4)) end,
             'matmul: shapes [3] and [4] do not match (3 vs 4)')
    H.raises(function() flow.zeros(2, 3):matmul(flow.zeros(3, 2, {dtype = flow.float64})) end,
             'matmul', 'same dtype', 'float32', 'float64', '[2,3]', '[3,2]')
    H.raises(function() flow.zeros(2, 3, {dtype = flow.bool}):matmul(flow.zeros(3, 2, {dtype = flow.bool})) end,
             'matmul', 'bool')
    H.raises(function() flow.zeros(2, 2, 3):matmul(flow.zeros(3, 3, 2)) end,
             'matmul', 'batch dims', '[2,2,3]', '[3,3,2]', '2 vs 3')
    H.raises(function() flow.tensor(1):matmul(flow.zeros(2)) end, 'matmul', 'at least 1 dim')
    H.raises(function() flow.matmul(flow.zeros(2), 3) end, 'matmul', 'expected two tensors')
  end)
end)

describe('mm, bmm, addmm', function()
  it('mm multiplies 2-D matrices and can write into an output', function()
    local a, b = flow.tensor(A), flow.tensor(B)
    assert.are.same(AB, flow.mm(a, b):totable())
    assert.are.same(AB, a:mm(b):totable())
    local out = flow.zeros(2, 2)
    local r = flow.mm(a, b, {out = out})
    assert.are.equal(out, r)
    assert.are.same(AB, out:totable())
    local tout = flow.zeros(2, 2, {dtype = flow.float64}):t()   -- non-contiguous, other dtype
    flow.mm(a, b, {out = tout})
    assert.are.same(AB, tout:totable())
    H.raises(function() flow.mm(a, b, {out = flow.zeros(3, 2)}) end, 'mm', 'output has shape [3,2]')
  end)

  it('mm writes into an operand without corrupting it', function()
    local a = flow.tensor({{1, 2}, {3, 4}}, {dtype = flow.float64})
    flow.mm(a, a, {out = a})
    assert.are.same({{7, 10}, {15, 22}}, a:totable())
  end)

  it('mm and bmm check ranks and sizes', function()
    H.raises(function() flow.mm(flow.zeros(2, 3), flow.zeros(4, 5)) end,
             'mm: shapes [2,3] and [4,5] do not match (3 vs 4)')
    H.raises(function() flow.mm(flow.zeros(2, 3, 1), flow.zeros(4, 5)) end, 'mm', '2-D', '[2,3,1]')
    H.raises(function() flow.bmm(flow.zeros(2, 3), flow.zeros(2, 3, 3)) end, 'bmm', '3-D', '[2,3]')
    H.raises(function() flow.bmm(flow.zeros(2, 2, 3), flow.zeros(3, 3, 2)) end,
             'bmm', 'batch sizes', '[2,2,3]', '[3,3,2]', '2 vs 3')
    H.raises(function() flow.bmm(flow.zeros(2, 2, 3), flow.zeros(2, 4, 2)) end,
             'bmm: shapes [2,2,3] and [2,4,2] do not match (3 vs 4)')
    H.raises(function() flow.mm(flow.zeros(2, 2, {dtype = flow.int32}), flow.zeros(2, 2)) end,
             'mm', 'int32', 'float32', 'same dtype')
  end)

  it('bmm multiplies batches', function()
    local a = flow.tensor({A, A}, {dtype = flow.float64})
    local b = flow.tensor({B, B}, {dtype = flow.float64}) * flow.tensor({1, 2}, {dtype = flow.float64}):view(2, 1, 1)
    local c = a:bmm(b)
    assert.are.same({2, 2, 2}, H.shape(c))
    assert.are.same({AB, {{116, 128}, {278, 308}}}, c:totable())
  end)

  it('addmm is beta * c + alpha * a @ b with c broadcast', function()
    local a, b = flow.tensor(A, {dtype = flow.float64}), flow.tensor(B, {dtype = flow.float64})
    local c = flow.tensor({{1, 1}, {1, 1}}, {dtype = flow.float64})
    assert.are.same({{59, 65}, {140, 155}}, flow.addmm(c, a, b):totable())
    local bias = flow.tensor({1, 2}, {dtype = flow.float64})
    assert.are.same({{2 + 580, 4 + 640}, {2 + 1390, 4 + 1540}},
                    flow.addmm(bias, a, b, {beta = 2, alpha = 10}):totable())
    assert.are.same({{59, 66}, {140, 156}}, bias:addmm(a, b):totable())
    -- beta = 0: c is not read (NaN does not leak)
    local nan = flow.full({2, 2}, 0 / 0, {dtype = flow.float64})
    assert.are.same(AB, flow.addmm(nan, a, b, {beta = 0}):totable())
    -- integers and float32
    local ai, bi = flow.tensor(A, {dtype = flow.int64}), flow.tensor(B, {dtype = flow.int64})
    assert.are.same({{117, 129}, {279, 309}},
                    flow.addmm(flow.tensor({1}, {dtype = flow.int64}), ai, bi, {alpha = 2}):totable())
    H.close(flow.addmm(flow.tensor({0.5, 0.5}), flow.tensor(A), flow.tensor(B), {alpha = 0.5}),
            {{29.5, 32.5}, {70, 77.5}})
    -- k = 0: only beta * c
    assert.are.same({{3, 6}, {3, 6}},
                    flow.addmm(flow.tensor({1, 2}), flow.zeros(2, 0), flow.zeros(0, 2), {beta = 3}):totable())
  end)

  it('addmm adds a bias row inside each threaded gemm part, a column or full c by copy', function()
    -- large enough that the product is split over the threads (by rows when
    -- m > n, by columns when n > m); c as [n], [1, n], a column [m, 1] of a
    -- square product, a full [m, n], and a scalar for n = 1
    local nt = flow.get_num_threads()
    for _, dt in ipairs({flow.float32, flow.float64}) do
      local tol = dt == flow.float64 and 1e-10 or 1e-3
      for _, mn in ipairs({{300, 150}, {150, 300}, {200, 200}, {257, 1}}) do
        local m, n = mn[1], mn[2]
        local a, b = flow.randn(m, 120, {dtype = dt}), flow.randn(n, 120, {dtype = dt}):t()
        local p = a:to(flow.float64):matmul(b:to(flow.float64))
        local cs = {flow.randn(n, {dtype = dt}), flow.randn(1, n, {dtype = dt}), flow.randn(m, n, {dtype = dt})}
        if m == n then cs[#cs + 1] = flow.randn(m, 1, {dtype = dt}) end
        if n == 1 then cs[#cs + 1] = flow.tensor(2.5, {dtype = dt}) end
        for _, c in ipairs(cs) do
          for _, t in ipairs({1, 2}) do
            flow.set_num_threads(t)
            local got = flow.addmm(c, a, b, {beta = 0.5, alpha = 2})
            H.close(got:to(flow.float64), c:to(flow.float64) * 0.5 + p * 2, tol)
          end
        end
      end
    end
    flow.set_num_threads(nt)
  end)

  it('addmm checks its input', function()
    local a, b = flow.zeros(2, 3), flow.zeros(3, 4)
    H.raises(function() flow.addmm(flow.zeros(3), a, b) end,
             'addmm', 'input of shape [3]', 'product', '[2,4]')
    H.raises(function() flow.addmm(flow.zeros(2, 2, 4), a, b) end, 'addmm', '[2,2,4]')
    H.raises(function() flow.addmm(flow.zeros(4), a, flow.zeros(4, 4)) end,
             'addmm: shapes [2,3] and [4,4] do not match (3 vs 4)')
    H.raises(function() flow.addmm(flow.zeros(4, {dtype = flow.float64}), a, b) end,
             'addmm', 'float64', 'float32')
    local ai, bi = flow.zeros(2, 3, {dtype = flow.int64}), flow.zeros(3, 4, {dtype = flow.int64})
    H.raises(function() flow.addmm(flow.zeros(4, {dtype = flow.int64}), ai, bi, {alpha = 0.5}) end,
             'addmm', 'integers', 'int64')
  end)
end)

describe('dot, mv, outer', function()
  it('dot gives a 0-d tensor', function()
    local d = flow.dot(flow.tensor({1, 2, 3}), flow.tensor({4, 5, 6}))
    assert.are.equal(0, d:dim())
    assert.are.equal(32, d:item())
    assert.are.equal(32, flow.tensor({1, 2, 3}, {dtype = flow.int64})
                         :dot(flow.tensor({4, 5, 6}, {dtype = flow.int64})):item())
    H.raises(function() flow.dot(flow.zeros(3), flow.zeros(4)) end,
             'dot: shapes [3] and [4] do not match (3 vs 4)')
    H.raises(function() flow.dot(flow.zeros(3, 1), flow.zeros(3)) end, 'dot', '1-D', '[3,1]')
  end)

  it('mv multiplies a matrix by a vector', function()
    local r = flow.tensor(A):mv(flow.tensor({1, 0, -1}))
    assert.are.same({-2, -2}, r:totable())
    H.raises(function() flow.zeros(2, 3):mv(flow.zeros(4)) end,
             'mv: shapes [2,3] and [4] do not match (3 vs 4)')
    H.raises(function() flow.zeros(2, 3):mv(flow.zeros(3, 1)) end, 'mv', '[3,1]')
  end)

  it('outer builds the (n, m) product table', function()
    assert.are.same({{1, 2, 3}, {2, 4, 6}}, flow.outer(flow.tensor({1, 2}), flow.tensor({1, 2, 3})):totable())
    assert.are.same({{3}, {6}}, flow.tensor({1, 2}):outer(flow.tensor({3})):totable())
    H.raises(function() flow.outer(flow.zeros(2, 2), flow.zeros(2)) end, 'outer', '1-D')
  end)
end)

describe('matmul gradients', function()
  local function leaf(shape, mod)
    return seq(shape, flow.float64, mod):mul(0.25):add(0.1):requires_grad_(true)
  end
  local check, checkgg = flow.autograd.gradcheck, flow.autograd.gradgradcheck

  it('mm: ga = g @ b^T, gb = a^T @ g (by hand)', function()
    local a = flow.tensor(A, {dtype = flow.float64, requires_grad = true})
    local b = flow.tensor(B, {dtype = flow.float64, requires_grad = true})
    flow.mm(a, b):sum():backward()
    -- g is all ones: ga[i][p] = sum_j b[p][j], gb[p][j] = sum_i a[i][p]
    assert.are.same({{15, 19, 23}, {15, 19, 23}}, a.grad:totable())
    assert.are.same({{5, 5}, {7, 7}, {9, 9}}, b.grad:totable())
  end)

  it('gradcheck over every matmul case, batch broadcasting and 1-D operands', function()
    local cases = {
      {{2, 3}, {3, 4}}, {{3}, {3}}, {{2, 3}, {3}}, {{3}, {3, 2}}, {{2, 2, 3}, {3, 2}},
      {{2, 1, 2, 3}, {3, 3, 2}}, {{3}, {2, 3, 2}}, {{2, 2, 3}, {3}},
    }
    for _, c in ipairs(cases) do
      local x, y = leaf(c[1]), leaf(c[2], 5)
      assert.is_true(check(function(p, q) return p:matmul(q) end, {x, y}))
    end
    local x, y = leaf({3, 2}), leaf({4, 3}, 5)
    assert.is_true(check(function(p, q) return p:t():matmul(q:t()) end, {x, y}))
    assert.is_true(check(function(p, q) return flow.bmm(p, q) end, {leaf({2, 2, 3}), leaf({2, 3, 2}, 5)}))
  end)

  it('addmm gradients scale by alpha and beta; double backward works', function()
    local c, a, b = leaf({4}), leaf({2, 3}, 5), leaf({3, 4})
    assert.is_true(check(function(p, q, r) return flow.addmm(p, q, r, {beta = 0.5, alpha = 2}) end,
                         {c, a, b}))
    assert.is_true(check(function(p, q, r) return flow.addmm(p, q, r, {beta = 0}) end, {c, a, b}))
    assert.is_true(checkgg(function(p, q) return p:matmul(q):pow(2) end, {leaf({2, 3}), leaf({3, 2}, 5)}))
    local y = flow.addmm(c, a, b)
    assert.are.equal('AddmmBackward', y.grad_fn:name())
  end)

  it('mm into an output under autograd takes the result history; leaves are refused', function()
    local a, b = leaf({2, 3}), leaf({3, 2}, 5)
    local out = flow.zeros(2, 2, {dtype = flow.float64})
    flow.mm(a, b, {out = out})
    assert.is_true(out.requires_grad)
    out:sum():backward()
    H.close(a.grad, flow.ones(2, 2, {dtype = flow.float64}):matmul(b:detach():t()))
    H.raises(function() flow.mm(a:detach(), b:detach(), {out = a}) end, 'mm', 'leaf')
  end)
end)
