-- flow.linalg decompositions: eigh, eigvalsh, qr, svd, pinv, matrix_rank, lstsq
-- (lua/oneflow/ops/linalg_ext.lua, core/ops/linalg_ext.c).
-- Reference values are from torch 1.13 (torch.linalg.* on the same inputs,
-- float64). Eigen- and singular vectors are compared sign-invariantly (|V|,
-- reconstructions, gradients of sign-invariant functions).
local flow = require 'oneflow'
local H = require 'spec.helpers'

local L = flow.linalg
local gradcheck = flow.autograd.gradcheck
local f64 = flow.float64

local S = {{{4, 1, 2}, {1, 5, 3}, {2, 3, 6}}, {{2, -1, 0}, {-1, 2, -1}, {0, -1, 2}}}
local A = {{{1, -2, 3}, {4, 5, -6}, {0.5, 8, 9}}, {{2, 0, 1}, {-1, 3, 2}, {1, 1, -4}}}
local X = {{1, -2, 0}, {3, 0.5, 4}}      -- 2 x 3
local Y = {{1, 3}, {-2, 0.5}, {0, 4}}    -- X^T, 3 x 2
local R3 = {{1, 2, 3}, {2, 4, 6}, {1, 0, 1}}   -- rank 2
local Wq = {{1, 2}, {-1, 0.5}, {0.3, -0.7}}
local Wr = {{0.2, -1}, {0.4, 1.5}}
local function t64(v, rg) return flow.tensor(v, {dtype = f64, requires_grad = rg}) end
local function mT(x) return x:transpose(-2, -1) end
local function sym(x) return x + mT(x) end

describe('linalg.eigh and eigvalsh', function()
  it('match torch (sign-invariantly) and reconstruct A', function()
    local s = t64(S)
    local l, v = L.eigh(s)
    -- torch.linalg.eigh(S)
    H.close(l, {{2.194397167422409, 3.3867701566075485, 9.418832675970037},
      {0.5857864376269051, 1.9999999999999998, 3.414213562373095}}, 1e-12)
    H.close(v:abs(), {{{0.44122469687346505, 0.8155834192895001, 0.3743587224160361},
      {0.5773502691896252, 0.5773502691896263, 0.5773502691896256},
      {0.6870134158337713, 0.03860508835262344, 0.725618504186394}},
      {{0.5, 0.7071067811865476, 0.5}, {0.7071067811865474, 0, 0.7071067811865474},
      {0.5, 0.7071067811865472, 0.5}}}, 1e-10)
    H.close(v:matmul(l:unsqueeze(-1) * mT(v)), S, 1e-12)
    H.close(mT(v):matmul(v), {{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}}, 1e-12)
    H.close(L.eigvalsh(s), l, 1e-12)
    -- float32 is computed in float64 and rounded
    H.close(L.eigvalsh(flow.tensor(S[1])), {2.194397167422409, 3.3867701566075485, 9.418832675970037}, 1e-5)
    assert.are.equal(flow.float32, L.eigvalsh(flow.tensor(S[1])).dtype)
    assert.are.same({0}, H.shape(L.eigvalsh(flow.zeros(0, 0, {dtype = f64}))))
  end)
  it('reads the triangle UPLO names', function()
    local a = t64(A)
    -- torch.linalg.eigvalsh(A, UPLO='U') and (A)
    local up = {{-3.1925213089007434e-16, 0.6992647456322759, 14.30073525436772},
      {-4.671318186589758, 2.095098017871689, 3.5762201687180695}}
    local lo = {{-3.3277915818798895, 2.5128871812193214, 15.814904400660568},
      {-4.344101953856734, 1.710524750585473, 3.633577203271261}}
    H.close(L.eigvalsh(a, 'U'), up, 1e-12)
    H.close(L.eigvalsh(a, {UPLO = 'U'}), up, 1e-12)
    H.close(L.eigvalsh(a), lo, 1e-12)
    H.close((L.eigh(a, {UPLO = 'L'})), lo, 1e-12)
  end)
  it('has torch gradients', function()
    -- torch: l, v = eigh(S[0]); ((l * w).sum() + (v * v * W).sum()).backward()
    local w = t64({1, -2, 0.5})
    local W = t64({{1, 2, 3}, {-1, 0.5, 2}, {0.3, -0.7, 1}})
    local s = t64(S[1], true)
    local l, v = L.eigh(s)
    local loss = (l * w):sum() + (v * v * W):sum()
    loss:backward()
    H.close(s.grad, {{-1.1041936999548405, 1.3417234763941845, -0.18473372267530136},
      {1.3417234763941845, 0.0036761156289751218, -0.16982502569592298},
      {-0.1847337226753014, -0.169825025695923, 0.6005175843258647}}, 1e-10)
    local b = t64(A, true)
    assert.is_true(gradcheck(function(x) return L.eigvalsh(sym(x)) end, {b}))
    assert.is_true(gradcheck(function(x)
      local _, vv = L.eigh(sym(x), 'U')
      return vv * vv
    end, {b}))
    assert.is_true(gradcheck(function(x)
      local ll, vv = L.eigh(sym(x))
      return vv:matmul(ll:exp():unsqueeze(-1) * mT(vv))   -- matrix exponential
    end, {b}))
  end)
  it('raises clear errors', function()
    H.raises(function() L.eigh(t64(X)) end, 'linalg.eigh', 'square', '2,3')
    H.raises(function() L.eigh(t64(S), 'X') end, 'linalg.eigh', "UPLO must be 'L' or 'U'")
    H.raises(function() L.eigvalsh(flow.tensor({{1}}, {dtype = flow.int64})) end,
      'linalg.eigvalsh', 'int64')
    -- torch: linalg.eigh of a NaN matrix fails to converge (error code 2)
    H.raises(function() L.eigh(flow.full({3, 3}, 0 / 0, {dtype = f64})) end, 'linalg.eigh',
      'failed to converge', 'info 2')
  end)
end)

describe('linalg.qr', function()
  it('matches torch in every mode', function()
    local q, r = L.qr(t64(A))
    -- torch.linalg.qr(A)
    H.close(q, {{{-0.24077170617153842, 0.40643998046854307, 0.8813827362638648},
      {-0.9630868246861536, 0.012588848952565517, -0.26889642801270436},
      {-0.1203858530857692, -0.91359075255761, 0.3884059515739061}},
      {{-0.816496580927726, -0.21821789023599245, -0.5345224838248487},
      {0.408248290463863, -0.8728715609439696, -0.2672612419124244},
      {-0.408248290463863, -0.4364357804719848, 0.8017837257372731}}}, 1e-12)
    H.close(r, {{{-4.153311931459037, -5.296977535773845, 3.9727331518303832},
      {0, -8.058661736635136, -7.0785299253282545}, {0, 0, 7.753180341032976}},
      {{-2.449489742783178, 0.816496580927726, 1.632993161855452},
      {0, -3.055050463303893, -0.21821789023599214}, {0, 0, -4.27617987059879}}}, 1e-12)
    -- torch.linalg.qr(Y, mode='complete')
    q, r = L.qr(t64(Y), {mode = 'complete'})
    H.close(q, {{-0.44721359549995787, -0.525816144281356, -0.7235450106338153},
      {0.8944271909999157, -0.26290807214067813, -0.3617725053169077},
      {0, -0.8089479142790096, 0.587880321139975}}, 1e-12)
    H.close(r, {{-2.23606797749979, -0.8944271909999157}, {0, -4.944694126030447}, {0, 0}}, 1e-12)
    q, r = L.qr(t64(Y))
    assert.are.same({3, 2}, H.shape(q))
    H.close(r, {{-2.23606797749979, -0.8944271909999157}, {0, -4.944694126030447}}, 1e-12)
    -- torch.linalg.qr(X) (wide)
    q, r = L.qr(t64(X), 'reduced')
    H.close(q, {{-0.316227766016838, -0.9486832980505138}, {-0.9486832980505138, 0.31622776601683805}}, 1e-12)
    H.close(r, {{-3.1622776601683795, 0.158113883008419, -3.794733192202055},
      {0, 2.0554804791094465, 1.2649110640673522}}, 1e-12)
    q, r = L.qr(t64(Y), {mode = 'r'})
    assert.are.same({0}, H.shape(q))
    H.close(r, {{-2.23606797749979, -0.8944271909999157}, {0, -4.944694126030447}}, 1e-12)
    q, r = L.qr(flow.tensor(Y))
    assert.are.equal(flow.float32, q.dtype)
    H.close(q:matmul(r), Y, 1e-5)
  end)
  it('has torch gradients', function()
    -- torch: q, r = qr(Y); ((q * Wq).sum() + (r * Wr).sum()).backward()
    local y = t64(Y, true)
    local q, r = L.qr(y)
    local loss = (q * t64(Wq)):sum() + (r * t64(Wr)):sum()
    loss:backward()
    H.close(y.grad, {{1.4344536882130847, -0.6399445753922874},
      {0.9408336418565219, -1.4380062764460386}, {2.2048575995702335, -0.9709442834114677}}, 1e-10)
    assert.is_true(gradcheck(function(x) return (L.qr(x)) end, {t64(A, true)}))
    assert.is_true(gradcheck(function(x) local _, rr = L.qr(x) return rr end, {t64(Y, true)}))
    assert.is_true(gradcheck(function(x) return (L.qr(x, {mode = 'complete'})) end, {t64(S[1], true)}))
    -- wide (m < n): torch: q, r = qr(X); ((q * Wr).sum() + (r * W3).sum()).backward(), and r alone
    local W3 = t64({{1, 2, 3}, {-1, 0.5, 2}})
    local x = t64(X, true)
    q, r = L.qr(x)
    loss = (q * t64(Wr)):sum() + (r * W3):sum()
    loss:backward()
    H.close(x.grad, {{4.621668800336087, -1.106797181058933, -2.8460498941515415},
      {-2.594648820168156, -1.7392527130926085, -2.213594362117865}}, 1e-10)
    x = t64(X, true)
    r = select(2, L.qr(x, {mode = 'complete'}))
    loss = (r * W3):sum()
    loss:backward()
    H.close(x.grad, {{4.308603311979417, -1.106797181058933, -2.8460498941515415},
      {-2.4902936573825993, -1.7392527130926085, -2.213594362117865}}, 1e-10)
    assert.is_true(gradcheck(function(v) return (L.qr(v)) end, {t64(X, true)}))
    assert.is_true(gradcheck(function(v) local _, rr = L.qr(v) return rr end, {t64({X, X}, true)}))
  end)
  it('raises clear errors', function()
    H.raises(function() L.qr(t64({1, 2})) end, 'linalg.qr', 'at least 2 dims')
    H.raises(function() L.qr(t64(Y), {mode = 'full'}) end, 'linalg.qr', "mode must be")
    local y = t64(Y, true)
    local _, r = L.qr(y, {mode = 'r'})
    H.raises(function() r:sum():backward() end, 'linalg.qr', "mode = 'r'")
    local q = L.qr(y, {mode = 'complete'})
    H.raises(function() q:sum():backward() end, 'linalg.qr', "mode = 'complete'")
  end)
end)

describe('linalg.svd', function()
  it('matches torch (sign-invariantly)', function()
    local u, s, vh = L.svd(t64(Y))
    assert.are.same({3, 3}, H.shape(u))
    assert.are.same({2, 2}, H.shape(vh))
    -- torch.linalg.svd(Y)
    H.close(s, {5.044367227535483, 2.1918848678171927}, 1e-12)
    H.close(u:abs(), {{0.6111975003598664, 0.3208118344774129, 0.7235450106338153},
      {0.0600498432872151, 0.9303304094341477, 0.3617725053169077},
      {0.789196827081199, 0.17766568644881356, 0.587880321139975}}, 1e-10)
    H.close(vh:abs(), {{0.09735568241437713, 0.9952496526508465},
      {0.9952496526508465, 0.09735568241437713}}, 1e-10)
    H.close(u:matmul(mT(u)), {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, 1e-12)
    u, s, vh = L.svd(t64(A), {full_matrices = false})
    H.close((u * s:unsqueeze(-2)):matmul(vh), A, 1e-12)
    H.close(s, L.svdvals(t64(A)), 1e-12)
    u, s, vh = L.svd(t64(X), false)
    assert.are.same({2, 2}, H.shape(u))
    assert.are.same({2, 3}, H.shape(vh))
    H.close((u * s:unsqueeze(-2)):matmul(vh), X, 1e-12)
    u, s, vh = L.svd(flow.zeros(2, 0, {dtype = f64}))
    assert.are.same({{2, 2}, {0}, {0, 0}}, {H.shape(u), H.shape(s), H.shape(vh)})
  end)
  it('has torch gradients', function()
    -- torch: u, s, vh = svd(Y, full_matrices=False);
    -- ((u*u*Wq).sum() + (s*[1, 3]).sum() + (vh*vh*Wr).sum()).backward()
    local y = t64(Y, true)
    local u, s, vh = L.svd(y, {full_matrices = false})
    local loss = (u * u * t64(Wq)):sum() + (s * t64({1, 3})):sum() + (vh * vh * t64(Wr)):sum()
    loss:backward()
    H.close(y.grad, {{1.2029116453275273, 0.5530092712793604},
      {-2.68454983953435, 0.4346016480081539}, {-0.5342363197656186, 0.7929204671871682}}, 1e-10)
    -- torch: svd(X, full_matrices=False); ((u*u*Wr).sum() + (vh*vh*Wq.T).sum()).backward()
    local x = t64(X, true)
    local u2, _, vh2 = L.svd(x, {full_matrices = false})
    loss = (u2 * u2 * t64(Wr)):sum() + (vh2 * vh2 * mT(t64(Wq))):sum()
    loss:backward()
    H.close(x.grad, {{0.1855444951002525, 0.08733701751311237, -0.08060397724690237},
      {0.03841373656160794, 0.1031182066908904, -0.04441769327607412}}, 1e-10)
    -- sign-invariant functions of the full SVD (narrowed to k as torch)
    for _, m in ipairs({A, X, Y}) do
      assert.is_true(gradcheck(function(a)
        local uu, ss, vv = L.svd(a)
        local k = ss:size(-1)
        local rr = (uu:narrow(-1, 1, k) * ss:unsqueeze(-2)):matmul(vv:narrow(-2, 1, k))
        return rr * rr
      end, {t64(m, true)}))
      assert.is_true(gradcheck(function(a)
        local uu, _, vv = L.svd(a, {full_matrices = false})
        return uu:matmul(vv)   -- the polar factor
      end, {t64(m, true)}))
    end
  end)
  it('raises clear errors', function()
    H.raises(function() L.svd(t64({1, 2})) end, 'linalg.svd', 'at least 2 dims')
    H.raises(function() L.svd(flow.tensor({{1}}, {dtype = flow.int64})) end, 'linalg.svd', 'int64')
    -- torch: linalg.svd of a NaN matrix fails to converge (dgesdd's info -4)
    local nan = flow.full({2, 3, 3}, 0 / 0, {dtype = f64})
    H.raises(function() L.svd(nan) end, 'linalg.svd', '(Batch element 0)', 'non-finite', 'info -4')
  end)
end)

describe('linalg.pinv, matrix_rank, lstsq', function()
  it('pinv matches torch', function()
    -- torch.linalg.pinv(A), (X), (R3), (S[0], hermitian=True)
    H.close(L.pinv(t64(A)), {{{0.35838150289017345, 0.161849710982659, -0.011560693641618505},
      {-0.1502890173410405, 0.028901734104046242, 0.06936416184971099},
      {0.1136801541425819, -0.0346820809248555, 0.05009633911368016}},
      {{0.4375, -0.03125, 0.09375}, {0.0625, 0.28125, 0.15625}, {0.125, 0.0625, -0.1875}}}, 1e-12)
    H.close(L.pinv(t64(X)), {{0.15746421267893657, 0.10633946830265846},
      {-0.4212678936605316, 0.053169734151329216}, {-0.065439672801636, 0.16359918200409}}, 1e-12)
    H.close(L.pinv(t64(R3)), {{-0.03333333333333333, -0.06666666666666667, 0.8333333333333334},
      {0.06666666666666667, 0.13333333333333333, -0.6666666666666666},
      {0.03333333333333333, 0.06666666666666667, 0.16666666666666667}}, 1e-10)
    H.close(L.pinv(t64(S[1]), {hermitian = true}), {{0.3, 0, -0.1},
      {0, 0.2857142857142857, -0.14285714285714285}, {-0.1, -0.14285714285714285, 0.2714285714285714}}, 1e-12)
    assert.is_true(gradcheck(L.pinv, {t64(X, true)}))
    assert.is_true(gradcheck(L.pinv, {t64(A, true)}))
    assert.is_true(gradcheck(function(a) return L.pinv(sym(a), {hermitian = true}) end, {t64(A, true)}))
  end)
  it('matrix_rank matches torch', function()
    -- torch.linalg.matrix_rank(R3), (A), (A, atol=3.0), (A, rtol=0.3), (S[1], hermitian=True, atol=1.0)
    assert.are.equal(2, L.matrix_rank(t64(R3)):item())
    assert.are.same({3, 3}, L.matrix_rank(t64(A)):totable())
    assert.are.same({2, 2}, L.matrix_rank(t64(A), {atol = 3.0}):totable())
    assert.are.same({2, 3}, L.matrix_rank(t64(A), {rtol = 0.3}):totable())
    assert.are.same({2, 2}, L.matrix_rank(t64(A), {tol = 3.0}):totable())
    assert.are.equal(2, L.matrix_rank(t64(S[2]), {hermitian = true, atol = 1.0}):item())
    assert.are.equal(flow.int64, L.matrix_rank(t64(R3)).dtype)
  end)
  it('lstsq matches torch for every driver', function()
    local B = {{1, 2}, {0, -1}, {3, 1}}
    local sol = {{-0.0388548057259713, 0.6707566462167689}, {0.5971370143149283, 0.3231083844580775}}
    local res = {1.0817995910020455, 0.24744376278118554}
    -- torch.linalg.lstsq(Y, B, driver=...)
    local x, r, rank, sv = L.lstsq(t64(Y), t64(B), {driver = 'gelsd'})
    H.close(x, sol, 1e-12)
    H.close(r, res, 1e-12)
    assert.are.equal(2, rank:item())
    H.close(sv, {5.044367227535483, 2.1918848678171927}, 1e-12)
    x, r, rank, sv = L.lstsq(t64(Y), t64(B))   -- gelsy: no residuals nor singular values
    H.close(x, sol, 1e-12)
    assert.are.same({{0}, 2, {0}}, {H.shape(r), rank:item(), H.shape(sv)})
    x, r, rank, sv = L.lstsq(t64(Y), t64(B), {driver = 'gels'})   -- gels: no rank
    H.close(r, res, 1e-12)
    H.close(x, sol, 1e-12)
    assert.are.same({{0}, {0}}, {H.shape(rank), H.shape(sv)})
    assert.are.equal(flow.int64, rank.dtype)
    x, r = L.lstsq(t64(Y), t64(B), {driver = 'gelss'})
    H.close(r, res, 1e-12)
    H.close(x, sol, 1e-12)
    -- torch.linalg.lstsq(R3, B, driver='gelsd'): rank-deficient, minimum norm, no residuals
    x, r, rank, sv = L.lstsq(t64(R3), t64(B), {driver = 'gelsd'})
    H.close(x, {{2.4666666666666667, 0.8333333333333333}, {-1.9333333333333333, -0.6666666666666667},
      {0.5333333333333333, 0.16666666666666667}}, 1e-10)
    assert.are.same({0}, H.shape(r))
    assert.are.equal(2, rank:item())
    H.close(sv, {8.4354, 0.91826, 0}, 1e-4)
    x = L.lstsq(t64(Y), t64({1, 0, 3}))
    H.close(x, {-0.0388548057259713, 0.5971370143149283}, 1e-12)
    assert.is_true(gradcheck(function(a, b) return (L.lstsq(a, b)) end, {t64(Y, true), t64(B, true)}))
    assert.is_true(gradcheck(function(a, b)
      local _, rr = L.lstsq(a, b, {driver = 'gelsd'})
      return rr
    end, {t64(Y, true), t64(B, true)}))
  end)
  it('raise clear errors', function()
    H.raises(function() L.pinv(t64({1, 2})) end, 'linalg.pinv', 'at least 2 dims')
    H.raises(function() L.lstsq(t64(Y), t64({{1, 2}})) end, 'linalg.lstsq', 'incompatible shapes')
    H.raises(function() L.lstsq(t64(Y), flow.tensor({{1}, {2}, {3}})) end, 'linalg.lstsq', 'same dtype')
    H.raises(function() L.matrix_rank(t64(A), {atol = 'x'}) end, 'linalg.matrix_rank', 'numbers')
    H.raises(function() L.lstsq(t64(Y), t64(Y), {driver = 'foo'}) end, 'linalg.lstsq', 'driver', 'foo')
  end)
end)

describe('linalg decompositions inside nn.Graph', function()
  it('are refused while tracing, naming the op', function()
    local nn = flow.nn
    for _, op in ipairs({'eigh', 'qr', 'svd'}) do
      local G = nn.Graph:subclass('Decomp_' .. op)
      function G:__init() nn.Graph.__init(self) end
      function G.build(_, x) return (L[op](x)) end
      H.raises(function() G()(t64(S[1])) end, 'linalg.' .. op, 'tracing')
    end
  end)
end)

describe('linalg decompositions: double backward', function()
  it('passes gradgradcheck', function()
    local gg = flow.autograd.gradgradcheck
    local a, y = t64(A[1], true), t64(Y, true)
    assert.is_true(gg(function(x) return L.eigvalsh(sym(x)) end, {a}))
    assert.is_true(gg(function(x) local _, v = L.eigh(sym(x)) return v * v end, {a}))
    assert.is_true(gg(function(x) return (L.qr(x)) end, {y}))
    assert.is_true(gg(function(x) local u, _, vh = L.svd(x, false) return u:matmul(vh) end, {y}))
    assert.is_true(gg(function(x)
      local u, s, vh = L.svd(x)   -- full_matrices: U narrowed to its first 2 columns
      return (u:narrow(2, 1, 2) * s:unsqueeze(1)):matmul(vh):pow(2)
    end, {y}))
    assert.is_true(gg(L.pinv, {y}))
  end)
end)
