-- flow.linalg's factorizations (issue 23): lu, lu_factor(_ex), lu_solve,
-- ldl_factor(_ex), ldl_solve, householder_product against torch 1.13
-- (values, pivots and gradients), gradchecks in float64, errors.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local L = flow.linalg

local f64 = {dtype = flow.float64}
local function t(v) return flow.tensor(v, f64) end
local function flat(x) return x:reshape(-1):totable() end

local M = t({{0.1, 2.0, 1.0, -0.3}, {3.0, -1.0, 0.5, 0.2}, {1.0, 1.0, 4.0, -2.0}, {0.7, -0.4, 1.1, 0.9}})
local B3 = flow.stack({M, M:flip(1) + flow.eye(4, f64), M:t() - flow.eye(4, f64) * 2})
local tall, wide = M:narrow(2, 1, 3):contiguous(), M:narrow(1, 1, 3):contiguous()
local R = t({{1.0, 2.0}, {0.5, -1.0}, {3.0, 0.0}, {-1.0, 1.5}})
local S = t({{0.0, 2.0, 1.0, 0.5}, {2.0, 0.0, 3.0, -1.0}, {1.0, 3.0, 1.0, 0.2}, {0.5, -1.0, 0.2, -2.0}})
local SB = flow.stack({S, S + flow.eye(4, f64) * 5})
local tau = t({0.5, 1.2, -0.3})

-- the torch side of the same computations, one line per result
local script = [==[
L = torch.linalg
def out(x): print(" ".join(repr(float(v)) for v in x.reshape(-1).tolist()))
M = torch.tensor([[0.1, 2.0, 1.0, -0.3], [3.0, -1.0, 0.5, 0.2], [1.0, 1.0, 4.0, -2.0], [0.7, -0.4, 1.1, 0.9]])
B3 = torch.stack([M, M.flip(0) + torch.eye(4), M.T - 2 * torch.eye(4)])
tall, wide = M[:, :3].clone(), M[:3, :].clone()
for A in [M, B3, tall, wide]:
    LU, piv = L.lu_factor(A); out(LU); out(piv)
    P, Lm, U = L.lu(A); out(P); out(Lm); out(U)
R = torch.tensor([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0], [-1.0, 1.5]])
LUM, pivM = L.lu_factor(M)
out(L.lu_solve(LUM, pivM, R)); out(L.lu_solve(LUM, pivM, R, adjoint=True))
out(L.lu_solve(LUM, pivM, R.T, left=False)); out(L.lu_solve(LUM, pivM, R.T, left=False, adjoint=True))
S = torch.tensor([[0.0, 2.0, 1.0, 0.5], [2.0, 0.0, 3.0, -1.0], [1.0, 3.0, 1.0, 0.2], [0.5, -1.0, 0.2, -2.0]])
SB = torch.stack([S, S + 5 * torch.eye(4)])
for A in [S, SB]:
    LD, piv = L.ldl_factor(A); out(LD); out(piv)
    out(L.ldl_solve(LD, piv, R.expand(A.shape[:-2] + R.shape).contiguous()))
tau = torch.tensor([0.5, 1.2, -0.3])
out(L.householder_product(tall, tau)); out(L.householder_product(M, torch.tensor([1.1, 0.2, 0.7, 0.0])))
out(L.householder_product(tall, tau[:2]))
def grad(f, *xs):
    xs = [x.clone().requires_grad_() for x in xs]
    y = f(*xs)
    ys = y if isinstance(y, tuple) else (y,)
    s = sum((yy * torch.arange(1, yy.numel() + 1).reshape(yy.shape).sin()).sum() for yy in ys)
    for g in torch.autograd.grad(s, xs): out(g)
for A in [M, tall, wide]:
    grad(lambda x: L.lu(x)[1:], A)
    grad(lambda x: L.lu_factor(x)[0], A)
grad(lambda a, b: L.lu_solve(a, pivM, b), LUM, R)
grad(lambda a, t: L.householder_product(a, t), tall, tau)
]==]

-- sum over outputs of sum(y * sin(1..numel)), as the script's grad()
local function weighted(...)
  local s = 0
  for i = 1, select('#', ...) do
    local y = select(i, ...)
    s = s + (y * flow.arange(1, y:numel() + 1, f64):sin():reshape(y:size())):sum()
  end
  return s
end
local function grads(f, ...)
  local xs = {}
  for i = 1, select('#', ...) do xs[i] = select(i, ...):clone():requires_grad_() end
  return flow.autograd.grad(weighted(f(unpack(xs))), xs)
end

describe('flow.linalg LU / LDL / Householder', function()
  local check = H.torch_ok() and it or pending
  check('values, pivots and gradients match torch 1.13', function()
    local ref = H.torch_rows(script)
    local r = 0
    local function same(name, x, tol)
      r = r + 1
      H.close(flat(x), ref[r], tol or 1e-12, name .. ' (torch row ' .. r .. ')')
    end
    for _, c in ipairs({{'square', M}, {'batch', B3}, {'tall', tall}, {'wide', wide}}) do
      local LU, piv = L.lu_factor(c[2])
      same('lu_factor LU ' .. c[1], LU)
      same('lu_factor pivots ' .. c[1], piv, 0)
      assert.are.equal(flow.int32, piv.dtype)
      local P, Lm, U = L.lu(c[2])
      same('lu P ' .. c[1], P, 0)
      same('lu L ' .. c[1], Lm)
      same('lu U ' .. c[1], U)
    end
    local LU, piv = L.lu_factor(M)
    same('lu_solve', L.lu_solve(LU, piv, R))
    same('lu_solve adjoint', L.lu_solve(LU, piv, R, {adjoint = true}))
    same('lu_solve right', L.lu_solve(LU, piv, R:t(), {left = false}))
    same('lu_solve right adjoint', L.lu_solve(LU, piv, R:t(), {left = false, adjoint = true}))
    for _, A in ipairs({S, SB}) do
      local LD, p = L.ldl_factor(A)
      same('ldl_factor LD', LD)
      same('ldl_factor pivots', p, 0)
      local sh = A:size():totable()
      sh[#sh] = 2
      same('ldl_solve', L.ldl_solve(LD, p, R:expand(sh):contiguous()), 1e-11)
    end
    same('householder_product', L.householder_product(tall, tau))
    same('householder_product square', L.householder_product(M, t({1.1, 0.2, 0.7, 0.0})))
    same('householder_product k < n', L.householder_product(tall, tau:narrow(1, 1, 2)))
    for _, c in ipairs({{'square', M}, {'tall', tall}, {'wide', wide}}) do
      same('lu grad ' .. c[1], grads(function(x) local _, l, u = L.lu(x); return l, u end, c[2])[1], 1e-10)
      same('lu_factor grad ' .. c[1], grads(function(x) return (L.lu_factor(x)) end, c[2])[1], 1e-10)
    end
    local g = grads(function(a, b) return L.lu_solve(a, piv, b) end, LU, R)
    same('lu_solve grad LU', g[1], 1e-10)
    same('lu_solve grad B', g[2], 1e-10)
    g = grads(function(a, b) return L.householder_product(a, b) end, tall, tau)
    same('householder_product grad A', g[1], 1e-10)
    same('householder_product grad tau', g[2], 1e-10)
    assert.are.equal(#ref, r)
  end)

  it('factors reconstruct A; batches agree with single matrices', function()
    for _, A in ipairs({M, B3, tall, wide, flow.randn(2, 3, 5, 5, f64)}) do
      local P, Lm, U = L.lu(A)
      H.close(P:matmul(Lm):matmul(U), A, 1e-13, 'P L U')
    end
    local LU, piv = L.lu_factor(B3)
    local LU2, piv2 = L.lu_factor(B3[2])
    H.close(LU[2], LU2, 0)
    H.close(piv[2], piv2, 0)
    -- ldl_solve solves; info is 0 for these
    local LD, p, info = L.ldl_factor_ex(SB)
    H.close(info, {0, 0}, 0)
    local X = L.ldl_solve(LD, p, flow.stack({R, R}))
    H.close(SB:matmul(X), flow.stack({R, R}), 1e-12, 'S X = R')
    -- householder_product of geqrf-like reflectors is orthogonal
    local Q = L.householder_product(tall, t({2 / (1 + 3 ^ 2 + 1 + 0.7 ^ 2), 0, 0}))
    H.close(Q:t():matmul(Q), flow.eye(3, f64), 1e-13, 'Q^T Q')
    -- float32 goes through float64 and is rounded back
    local P32, L32, U32 = L.lu(M:float())
    assert.are.equal(flow.float32, L32.dtype)
    H.close(P32:matmul(L32):matmul(U32), M:float(), 1e-6)
  end)

  it('gradcheck: lu (square, tall, wide, batched), lu_factor, lu_solve, householder_product', function()
    local gc = flow.autograd.gradcheck
    for _, A in ipairs({M, tall, wide, B3}) do
      -- gradcheck checks one output: L and U flattened into one
      assert.is_true(gc(function(x)
        local _, l, u = L.lu(x)
        return flow.cat({l:reshape(-1), u:reshape(-1)})
      end, {A:clone():requires_grad_()}))
      assert.is_true(gc(function(x) return (L.lu_factor(x)) end, {A:clone():requires_grad_()}))
    end
    local LU, piv = L.lu_factor(M)
    for _, o in ipairs({{}, {adjoint = true}, {left = false}, {left = false, adjoint = true}}) do
      local B = o.left == false and R:t() or R
      assert.is_true(gc(function(a, b) return L.lu_solve(a, piv, b, o) end,
        {LU:clone():requires_grad_(), B:clone():requires_grad_()}))
    end
    assert.is_true(gc(function(a, b) return L.householder_product(a, b) end,
      {tall:clone():requires_grad_(), tau:clone():requires_grad_()}))
    -- second derivatives through lu are refused (the rule treats P, L, U as constants)
    local x = M:clone():requires_grad_()
    local _, l, u = L.lu(x)
    H.raises(function() flow.autograd.grad((l * l):sum() + (u * u):sum(), {x}, nil, {create_graph = true}) end,
      'linalg.lu', 'create_graph')
  end)

  it('singular matrices: info, check_errors, lu_factor raises', function()
    local Z = flow.stack({M, flow.zeros(4, 4, f64)})
    local _, _, info = L.lu_factor_ex(Z)
    H.close(info, {0, 1}, 0)
    H.raises(function() L.lu_factor_ex(Z, {check_errors = true}) end,
      'linalg.lu_factor_ex', '(Batch element 2)', 'U[1,1] is zero')
    H.raises(function() L.lu_factor(flow.zeros(3, 3, f64)) end, 'linalg.lu_factor', 'U[1,1] is zero',
      'division by zero', 'shape [3,3]')
    local P, Lm, U = L.lu(flow.zeros(2, 2, f64))   -- lu itself does not raise (as torch)
    H.close(P:matmul(Lm):matmul(U), flow.zeros(2, 2, f64), 0)
    local _, _, linfo = L.ldl_factor_ex(flow.zeros(2, 2, f64))
    assert.are.equal(1, linfo:item())
    H.raises(function() L.ldl_factor_ex(flow.zeros(2, 2, f64), {check_errors = true}) end,
      'linalg.ldl_factor_ex', 'D[1,1] is zero')
  end)

  it('bad input gives clear errors', function()
    H.raises(function() L.lu_factor(flow.ones(3, 3, {dtype = flow.int64})) end, 'linalg.lu_factor',
      'float32 or float64', 'int64')
    H.raises(function() L.lu(flow.ones(3, f64)) end, 'linalg.lu', 'at least 2 dims')
    H.raises(function() L.lu(M, {pivot = false}) end, 'linalg.lu', 'pivot = false')
    H.raises(function() L.ldl_factor(tall) end, 'linalg.ldl_factor', 'square', '4 by 3')
    local LU, piv = L.lu_factor(M)
    H.raises(function() L.lu_solve(LU, piv:narrow(1, 1, 3), R) end, 'linalg.lu_solve', 'pivots of shape [3]')
    H.raises(function() L.lu_solve(LU, piv, R:t()) end, 'linalg.lu_solve', 'incompatible shapes', '[2,4]')
    H.raises(function() L.lu_solve(LU, piv, R:float()) end, 'linalg.lu_solve', 'same dtype')
    H.raises(function() L.lu_solve(LU, piv * 0, R) end, 'linalg.lu_solve', 'out of range')
    H.raises(function() L.lu_solve(tall, piv, R) end, 'linalg.lu_solve', 'square')
    local LD, p = L.ldl_factor(S)
    H.raises(function() L.ldl_solve(LD, p, R:narrow(1, 1, 3)) end, 'linalg.ldl_solve', 'incompatible shapes')
    H.raises(function() L.ldl_solve(LD, p:long(), R) end, 'linalg.ldl_solve', 'int32')
    H.raises(function() L.ldl_solve(LD, p * 0, R) end, 'linalg.ldl_solve', 'out of range')
    H.raises(function() L.householder_product(wide, tau) end, 'linalg.householder_product', 'rows >= columns')
    H.raises(function() L.householder_product(tall, t({1, 2, 3, 4})) end, 'linalg.householder_product',
      'tau of shape [4]')
    H.raises(function() L.householder_product(tall, tau:float()) end, 'linalg.householder_product', 'same dtype')
  end)

  it('ldl_factor / ldl_solve: the backward raises, as torch', function()
    local A = S:clone():requires_grad_()
    local LD, p = L.ldl_factor(A)
    assert.is_true(LD.requires_grad)
    H.raises(function() LD:sum():backward() end, 'linalg.ldl_factor', 'not implemented')
    local B = R:clone():requires_grad_()
    local X = L.ldl_solve(LD:detach(), p, B)
    H.raises(function() X:sum():backward() end, 'linalg.ldl_solve', 'not implemented')
    -- without grad nothing is recorded
    assert.is_false(L.ldl_solve(LD:detach(), p, R).requires_grad)
  end)
end)
