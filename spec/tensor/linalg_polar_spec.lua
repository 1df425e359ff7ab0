-- flow.linalg.matrix_sqrth and flow.linalg.polar (torch 2.x names, issue 23):
-- values and gradients against spec/fixtures/linalg_reference.json (written
-- with PyTorch 2.x by tools/linalg_reference.py), identities, gradcheck, errors.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local json = require 'oneflow.utils.json'
local L = flow.linalg

local f = assert(io.open('spec/fixtures/linalg_reference.json'))
local REF = json.decode(f:read('*a'))
f:close()

local f64 = {dtype = flow.float64}
local function t(v) return flow.tensor(v, f64) end
local function flat(x) return x:reshape(-1):totable() end

-- sum over outputs of sum(y * sin(1..numel)), as the reference's weighted()
local function weighted(...)
  local s = 0
  for i = 1, select('#', ...) do
    local y = select(i, ...)
    s = s + (y * flow.arange(1, y:numel() + 1, f64):sin():reshape(y:size())):sum()
  end
  return s
end

describe('flow.linalg.matrix_sqrth / polar', function()
  it('values and gradients match torch 2.x', function()
    for i, c in ipairs(REF.matrix_sqrth) do
      local x = t(c.A):requires_grad_()
      local X = L.matrix_sqrth(x)
      H.close(flat(X), c.X, 1e-12, 'matrix_sqrth ' .. i)
      if c.grad then   -- absent where torch's is infinite (a clamped, zero root)
        weighted(X):backward()
        H.close(flat(x.grad), c.grad, 1e-10, 'matrix_sqrth grad ' .. i)
      end
    end
    for i, c in ipairs(REF.polar) do
      local x = t(c.A):requires_grad_()
      local U, Hm = L.polar(x)
      H.close(flat(U), c.U, 1e-12, 'polar U ' .. i)
      H.close(flat(Hm), c.H, 1e-12, 'polar H ' .. i)
      weighted(U, Hm):backward()
      H.close(flat(x.grad), c.grad, 1e-10, 'polar grad ' .. i)
    end
  end)

  it('identities, float32, gradcheck', function()
    local A = t(REF.matrix_sqrth[2].A)
    local X = L.matrix_sqrth(A)
    H.close(X:matmul(X), A, 1e-13, 'X X = A')
    H.close(X, X:transpose(-2, -1), 1e-14, 'X symmetric')
    local B = flow.randn(2, 6, 4, f64)
    local U, P = L.polar(B)
    H.close(U:matmul(P), B, 1e-13, 'U H = A')
    H.close(U:transpose(-2, -1):matmul(U), flow.eye(4, f64):expand(2, 4, 4), 1e-13, 'U^T U = I')
    assert.is_true(L.eigvalsh(P):ge(0):all():item())
    local X32 = L.matrix_sqrth(A:float())
    assert.are.equal(flow.float32, X32.dtype)
    H.close(X32, X, 1e-6)
    local gc = flow.autograd.gradcheck
    -- matrix_sqrth reads A's lower triangle: check it on symmetric perturbations (as torch's eigh)
    assert.is_true(gc(function(a) return L.matrix_sqrth((a + a:transpose(-2, -1)) * 0.5) end,
      {A:clone():requires_grad_()}))
    assert.is_true(gc(function(a)
      local u, h = L.polar(a)
      return flow.cat({u:reshape(-1), h:reshape(-1)})
    end, {B:clone():requires_grad_()}))
    local x = A:clone():requires_grad_()
    local Y = L.matrix_sqrth(x)
    H.raises(function() flow.autograd.grad((Y * Y):sum(), {x}, nil, {create_graph = true}) end,
      'linalg.matrix_sqrth', 'create_graph')
  end)

  it('bad input gives clear errors', function()
    H.raises(function() L.polar(flow.zeros(2, 3, f64)) end, 'linalg.polar',
      'at least as many rows as columns', '2 by 3')
    H.raises(function() L.matrix_sqrth(flow.zeros(2, 3, f64)) end, 'linalg.matrix_sqrth', 'square', '2 by 3')
    H.raises(function() L.polar(flow.ones(3, 3, {dtype = flow.int64})) end, 'linalg.polar', 'floating point',
      'int64')
    H.raises(function() L.matrix_sqrth(flow.ones(3, f64)) end, 'linalg.matrix_sqrth', 'at least 2 dims')
    H.raises(function() L.polar('x') end, 'linalg.polar')
  end)
end)
