-- flow.linalg.eig and flow.linalg.eigvals (issue 23): complex eigenvalues
-- and eigenvectors of real matrices (LAPACK dgeev), against torch 1.13
-- (spec/fixtures/linalg_eig_reference.json, written by
-- tools/linalg_eig_reference.py). Eigenvectors are unique only up to a
-- complex phase and the eigenvalues' order is LAPACK's, so the comparisons
-- are of invariants: eigenvalues matched to torch's, |V| of matched columns,
-- A V = V diag(L), unit columns, and gradients of phase-invariant losses.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local json = require 'oneflow.utils.json'
local L = flow.linalg

local f = assert(io.open('spec/fixtures/linalg_eig_reference.json'))
local REF = json.decode(f:read('*a'))
f:close()

local function t(v, dt) return flow.tensor(v, {dtype = dt or flow.float64}) end
local function flat(x) return x:contiguous():reshape(-1):totable() end
local function parts(z)
  local r = flow.view_as_real(z)
  return r:select(-1, 1), r:select(-1, 2)
end

-- the generator's losses: sum(L.real^2 + L.imag^2 L.real), sum(w |V|^4)
local function loss_l(l)
  local r, i = parts(l)
  return (r * r + i * i * r):sum()
end
local function loss_v(v)
  local r, i = parts(v)
  local n, w = v:size(-1), {}
  for k = 1, n do w[k] = {1 + math.sin(k) / 2} end
  local m = r * r + i * i
  return (t(w, r.dtype) * m * m):sum()
end

-- for each of torch's eigenvalues (flat, batch-major), the flat index of
-- the nearest of ours in the same matrix; asserts they agree within tol
local function match(l, c, tol, what)
  local lr, li = parts(l)
  lr, li = flat(lr), flat(li)
  local n = c.shape[#c.shape]
  local perm, used = {}, {}
  for k = 1, #c.L_re do
    local base = math.floor((k - 1) / n) * n
    local best, bd = nil, math.huge
    for j = base + 1, base + n do
      local d = math.abs(lr[j] - c.L_re[k]) + math.abs(li[j] - c.L_im[k])
      if not used[j] and d < bd then best, bd = j, d end
    end
    assert(bd <= tol * (1 + math.abs(c.L_re[k]) + math.abs(c.L_im[k])),
      ('%s: eigenvalue %d (%g%+gi) has no match (nearest off by %g)'):format(what, k, c.L_re[k],
        c.L_im[k], bd))
    used[best], perm[k] = true, best
  end
  return perm
end

-- max |A V - V diag(L)| and max | |column| - 1 |
local function residuals(A, l, v)
  local vr, vi = parts(v)
  local lr, li = parts(l)
  lr, li = lr:unsqueeze(-2), li:unsqueeze(-2)
  local rr = A:matmul(vr) - (vr * lr - vi * li)
  local ri = A:matmul(vi) - (vr * li + vi * lr)
  local res = math.max(rr:abs():max():item(), ri:abs():max():item())
  local norms = (vr * vr + vi * vi):sum(-2):sqrt()
  return res, (norms - 1):abs():max():item()
end

describe('flow.linalg.eig / eigvals', function()
  it('match torch 1.13: eigenvalues, |V|, A V = V diag(L), unit columns (float64)', function()
    for _, c in ipairs(REF.cases) do
      local A = t(c.A)
      local l, v = L.eig(A)
      assert.are.equal(flow.cdouble, l.dtype)
      assert.are.equal(flow.cdouble, v.dtype)
      local vs = {unpack(c.shape)}
      vs[#vs] = nil
      assert.are.same(vs, H.shape(l), c.name)
      assert.are.same(c.shape, H.shape(v), c.name)
      local perm = match(l, c, 1e-12, c.name)
      -- |V| of the matched columns
      local n = c.shape[#c.shape]
      local av = flat(flow.view_as_real(v):pow(2):sum(-1):sqrt())
      for k = 1, #perm do
        local b, i = math.floor((k - 1) / n), (perm[k] - 1) % n
        local rk = (k - 1) % n
        for row = 0, n - 1 do
          local got, want = av[b * n * n + row * n + i + 1], c.V_abs[b * n * n + row * n + rk + 1]
          assert(math.abs(got - want) <= 1e-10, ('%s: |V[%d, %d]| is %.12g, torch %.12g'):format(
            c.name, row + 1, rk + 1, got, want))
        end
      end
      local res, unit = residuals(A, l, v)
      assert(res <= 1e-10, c.name .. ': A V - V diag(L) = ' .. res)
      assert(unit <= 1e-12, c.name .. ': column norm off by ' .. unit)
      -- eigvals: the same eigenvalues, complex128
      H.close(flow.view_as_real(L.eigvals(A)), flow.view_as_real(l), 1e-14, c.name .. ' eigvals')
    end
  end)

  it('conjugate pairs: positive imaginary part first, conjugate columns', function()
    local l, v = L.eig(t(REF.cases[2].A))
    local lr, li = parts(l)
    H.close(lr:narrow(1, 1, 1), lr:narrow(1, 2, 1), 0)
    assert.is_true(li[1]:item() > 0)
    H.close(li:narrow(1, 1, 1), -li:narrow(1, 2, 1), 0)
    H.close(li[3], 0, 0)
    local vr, vi = parts(v)
    H.close(vr:narrow(-1, 1, 1), vr:narrow(-1, 2, 1), 0)
    H.close(vi:narrow(-1, 1, 1), -vi:narrow(-1, 2, 1), 0)
    H.close(vi:narrow(-1, 3, 1), {0, 0, 0}, 0)
  end)

  it('gradients match torch 1.13 (phase-invariant losses, float64)', function()
    for _, c in ipairs(REF.cases) do
      local x = t(c.A):requires_grad_()
      local l = L.eig(x)
      loss_l(l):backward()
      H.close(flat(x.grad), c.grad_l, 1e-9, c.name .. ' grad through L')
      x = t(c.A):requires_grad_()
      local l2, v2 = L.eig(x)
      local g = flow.autograd.grad(loss_l(l2) + loss_v(v2), {x})[1]
      H.close(flat(g), c.grad_lv, 1e-9, c.name .. ' grad through L and V')
      x = t(c.A):requires_grad_()
      loss_l(L.eigvals(x)):backward()
      H.close(flat(x.grad), c.grad_eigvals, 1e-9, c.name .. ' eigvals grad')
      assert.are.equal(flow.float64, x.grad.dtype)
    end
  end)

  it('float32: complex64 results, values and gradients close to torch', function()
    for _, c in ipairs(REF.cases) do
      local x = t(c.A, flow.float32):requires_grad_()
      local l, v = L.eig(x)
      assert.are.equal(flow.cfloat, l.dtype)
      assert.are.equal(flow.cfloat, v.dtype)
      match(l, c, 1e-5, c.name .. ' (float32)')
      local res, unit = residuals(x:detach(), l, v)
      assert(res <= 1e-5 and unit <= 1e-5, c.name .. ' (float32) residuals ' .. res .. ' ' .. unit)
      local g = flow.autograd.grad(loss_l(l) + loss_v(v), {x})[1]
      assert.are.equal(flow.float32, g.dtype)
      H.close(flat(g), c.grad_lv, 1e-3, c.name .. ' (float32) grad')
      assert.are.equal(flow.cfloat, L.eigvals(x:detach()).dtype)
    end
  end)

  it('batched input: each matrix as its own; broadcast batch dims (2, 3, n, n)', function()
    local c = REF.cases[4]
    local A = t(c.A)
    local lb = L.eigvals(A)
    for b = 1, 2 do
      H.close(flow.view_as_real(L.eigvals(A[b])), flow.view_as_real(lb[b]), 0, 'batch ' .. b)
    end
    local big = flow.randn(2, 3, 5, 5, {dtype = flow.float64})
    local l, v = L.eig(big)
    assert.are.same({2, 3, 5}, H.shape(l))
    assert.are.same({2, 3, 5, 5}, H.shape(v))
    local res, unit = residuals(big, l, v)
    assert(res <= 1e-10 and unit <= 1e-12, 'residuals ' .. res .. ' ' .. unit)
    -- a non-contiguous input (a transpose) is read as the matrix it shows
    local lt = L.eigvals(big:transpose(-2, -1))
    local rt = parts(lt)
    H.close(rt:sum(-1), flow.diagonal(big, 0, -2, -1):sum(-1), 1e-10, 'trace')
  end)

  it('1x1 and 0x0 matrices', function()
    local l, v = L.eig(t({{-3}}))
    H.close(flow.view_as_real(l), {{-3, 0}}, 0)
    H.close(flow.view_as_real(v), {{{1, 0}}}, 0)
    local l0, v0 = L.eig(flow.zeros(0, 0, {dtype = flow.float64}))
    assert.are.same({0}, H.shape(l0))
    assert.are.same({0, 0}, H.shape(v0))
    assert.are.equal(flow.cdouble, l0.dtype)
    local lb, vb = L.eig(flow.zeros(3, 0, 0))
    assert.are.same({3, 0}, H.shape(lb))
    assert.are.same({3, 0, 0}, H.shape(vb))
    assert.are.equal(flow.cfloat, vb.dtype)
    -- gradients of empty and 1x1 inputs
    local x = t({{2}}):requires_grad_()
    local l1, v1 = L.eig(x)
    flow.autograd.backward(loss_l(l1) + loss_v(v1))
    H.close(x.grad, {{4}}, 1e-14)
    local e = flow.zeros(0, 0, {dtype = flow.float64, requires_grad = true})
    loss_l(L.eigvals(e)):backward()
    assert.are.same({0, 0}, H.shape(e.grad))
  end)

  it('gradcheck of phase-invariant functions; no history without requires_grad', function()
    local A = t(REF.cases[3].A)
    assert.is_true(flow.autograd.gradcheck(function(x)
      local l, v = L.eig(x)
      local lr, li = parts(l)
      local vr, vi = parts(v)
      return flow.cat({lr, li * li, (vr * vr + vi * vi):reshape(-1)})
    end, {A:clone():requires_grad_()}))
    assert.is_true(flow.autograd.gradcheck(function(x)
      local lr, li = parts(L.eigvals(x))
      return flow.cat({lr, li})
    end, {t(REF.cases[4].A):requires_grad_()}))
    local l, v = L.eig(A)
    assert.is_nil(l.grad_fn)
    assert.is_nil(v.grad_fn)
  end)

  it('refuses phase-dependent losses and second derivatives (as torch / lu)', function()
    local x = t(REF.cases[2].A):requires_grad_()
    local _, v = L.eig(x)
    local _, vi = parts(v)
    H.raises(function() vi:sum():backward() end, 'linalg_eig_backward',
      'specified up to multiplication by e^{i phi}')
    x = t(REF.cases[1].A):requires_grad_()
    local l = L.eig(x)
    H.raises(function() flow.autograd.grad(loss_l(l), {x}, nil, {create_graph = true}) end,
      'linalg.eig', 'create_graph (second derivatives) is not supported')
    x = t(REF.cases[1].A):requires_grad_()
    H.raises(function()
      flow.autograd.grad(loss_l(L.eigvals(x)), {x}, nil, {create_graph = true})
    end, 'linalg.eigvals', 'create_graph')
  end)

  it('errors: non-square, integer dtype, NaN/inf, options, CUDA', function()
    H.raises(function() L.eig(flow.zeros(2, 3, {dtype = flow.float64})) end, 'linalg.eig',
      'square', '[2,3]')
    H.raises(function() L.eigvals(flow.zeros(3)) end, 'linalg.eigvals', 'square')
    H.raises(function() L.eig(flow.ones(3, 3, {dtype = flow.int64})) end, 'linalg.eig',
      'float32 or float64', 'int64')
    H.raises(function() L.eig(t({{1, 0 / 0}, {0, 1}})) end, 'linalg.eig',
      'should not contain infs or NaNs', 'float64')
    H.raises(function() L.eigvals(flow.full({2, 2, 2}, math.huge)) end, 'linalg.eigvals',
      'should not contain infs or NaNs', 'float32')
    H.raises(function() L.eig(t({{1}}), {UPLO = 'L'}) end, 'linalg.eig', 'UPLO')
    H.raises(function() L.eig(t({{1}}), 3) end, 'linalg.eig', 'options table')
    H.raises(function() L.eig({{1}}) end, 'linalg.eig')
    if flow.cuda.is_available() then
      H.raises(function() L.eig(flow.eye(3):cuda()) end, 'linalg.eig', 'not implemented on cuda')
    end
  end)
end)
