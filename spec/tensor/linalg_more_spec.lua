-- flow.linalg's composed functions (issue 23): matrix_exp, cond,
-- solve_triangular, vander, vecdot, tensorinv, tensorsolve, matmul and the
-- *_ex forms, against PyTorch where it imports, gradcheck, errors.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local L = flow.linalg

local f64 = {dtype = flow.float64}
local function t(v) return flow.tensor(v, f64) end
local M = {{1.2, -0.7, 0.3}, {0.4, 2.0, -1.1}, {-0.5, 0.9, 1.5}}
local function rows(x) return x:reshape(-1):totable() end

describe('flow.linalg (composed)', function()
  local check = H.torch_ok() and it or pending
  check('matrix_exp, cond, solve_triangular, vander, tensorinv, tensorsolve match torch', function()
    local ref = H.torch_rows(([==[
L = torch.linalg
M = torch.tensor(%s)
def out(x): print(" ".join(repr(v) for v in x.reshape(-1).tolist()))
out(L.matrix_exp(M)); out(L.matrix_exp(M * 6))
for p in [None, -2, 'fro', 'nuc', 1, -1, float('inf')]: out(L.cond(M, p))
B = torch.tensor([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0]])
out(L.solve_triangular(M, B, upper=True)); out(L.solve_triangular(M, B, upper=False, unitriangular=True))
out(L.solve_triangular(M, B.T, upper=False, left=False))
out(L.vander(torch.tensor([0.5, 2.0, -1.0]), N=4)); out(L.vecdot(M, M[0]))
out(L.tensorinv(torch.kron(M, M).reshape(3, 3, 3, 3), ind=2))
out(L.tensorsolve(torch.kron(M, M).reshape(3, 3, 3, 3), M))
]==]):format(('[' .. ('%s, '):rep(3) .. ']'):format(H.pylist(M[1]), H.pylist(M[2]), H.pylist(M[3]))))
    local A = t(M)
    local function same(name, x, r, tol)
      H.close(t(rows(x)), r, tol or 1e-10, name)
    end
    same('matrix_exp', L.matrix_exp(A), ref[1])
    H.close(t(rows(L.matrix_exp(A * 6))), ref[2], 1e-8 * math.abs(ref[2][1]) + 1e-8)
    local ps = {nil, -2, 'fro', 'nuc', 1, -1, math.huge}
    for i = 1, 7 do same('cond ' .. tostring(ps[i]), L.cond(A, {p = ps[i]}), ref[2 + i]) end
    local B = t({{1, 2}, {0.5, -1}, {3, 0}})
    same('solve_triangular upper', L.solve_triangular(A, B, {upper = true}), ref[10])
    same('solve_triangular unit', L.solve_triangular(A, B, {upper = false, unitriangular = true}), ref[11])
    same('solve_triangular right', L.solve_triangular(A, B:t(), {upper = false, left = false}), ref[12])
    same('vander', L.vander(t({0.5, 2, -1}), {N = 4}), ref[13])
    same('vecdot', L.vecdot(A, A[1]), ref[14])
    local K = flow.zeros(9, 9, f64)
    for i = 1, 3 do for j = 1, 3 do
      K:narrow(1, (i - 1) * 3 + 1, 3):narrow(2, (j - 1) * 3 + 1, 3):copy_(A * M[i][j])
    end end
    same('tensorinv', L.tensorinv(K:reshape(3, 3, 3, 3), {ind = 2}), ref[15])
    same('tensorsolve', L.tensorsolve(K:reshape(3, 3, 3, 3), A), ref[16])
  end)

  it('matrix_exp: closed forms, batches, gradcheck', function()
    H.close(L.matrix_exp(t({{0, 1}, {-1, 0}})), {{math.cos(1), math.sin(1)}, {-math.sin(1), math.cos(1)}}, 1e-14)
    H.close(L.matrix_exp(flow.zeros(2, 3, 3, f64)), flow.eye(3, f64):expand(2, 3, 3):totable(), 0)
    local X = flow.tensor({{0.3, -0.2}, {0.5, 0.1}}, {dtype = flow.float64, requires_grad = true})
    assert.is_true(flow.autograd.gradcheck(L.matrix_exp, {X}))
  end)

  it('inv_ex / cholesky_ex / solve_ex report failures in info; check_errors raises', function()
    local A = t({{{4, 1}, {1, 3}}, {{1, 2}, {2, 4}}})
    local inv, info = L.inv_ex(A)
    H.close(info, {0, 1}, 0)
    H.close(inv[1], L.inv(A[1]):totable(), 1e-14)
    assert.is_true(inv[2][1][1]:item() ~= inv[2][1][1]:item())
    local _, cinfo = L.cholesky_ex(A)
    H.close(cinfo, {0, 1}, 0)
    local x, sinfo = L.solve_ex(A, flow.ones(2, 2, 1, f64))
    H.close(sinfo, {0, 1}, 0)
    H.close(x[1], L.solve(A[1], flow.ones(2, 1, f64)):totable(), 1e-14)
    H.raises(function() L.inv_ex(A, {check_errors = true}) end, 'inv_ex')
    assert.are.equal(0, select(2, L.inv_ex(A[1])):item())
  end)

  it('matmul alias, errors', function()
    H.close(L.matmul(t(M), t(M)), flow.matmul(t(M), t(M)):totable(), 0)
    H.raises(function() L.solve_triangular(t(M), t(M)) end, 'upper')
    H.raises(function() L.tensorinv(flow.zeros(2, 3, f64), {ind = 1}) end, 'prod')
    H.raises(function() L.vander(flow.tensor(1.0)) end, 'at least 1 dim')
  end)
end)
