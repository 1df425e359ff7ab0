-- Coverage of the public ops on CUDA.
--
-- Everywhere: the table "Public ops by device" of doc/cuda.md must name
-- every op of oneflow.h that takes tensors, and only device-table entries
-- that core/device.h declares and cuda/*.cu fills, and every kernel entry the
-- CUDA library fills must be in it (so the doc cannot go stale).
--
-- On a GPU: one call of each public op (through its Lua API) on CPU tensors
-- and on their CUDA copies, values and grads compared. Without a GPU that
-- part is one pending line. OF_COVERAGE_DEVICE=cpu runs it CPU against CPU
-- (to check the case list itself on a machine without a GPU).
local flow = require 'oneflow'
local H = require 'spec.helpers'

local function read(path)
  local f = assert(io.open(path, 'r'))
  local s = f:read('*a')
  f:close()
  return s
end

-- of_status functions of the public header whose parameters take tensors
local function public_tensor_ops()
  local hdr = read('core/include/oneflow/oneflow.h')
  local ops = {}
  for name, params in hdr:gmatch('of_status%s+(of_[%w_]+)%s*(%b())') do
    if params:find('of_tensor', 1, true) then ops[name] = true end
  end
  return ops
end

-- fields of of_device_ops from the kernel families on (after the runtime's)
local function kernel_fields()
  local h = read('core/device.h')
  local body = h:match('typedef struct of_device_ops {(.-)} of_device_ops;')
  local from = body:find('%(%*copy%)')
  local fields = {}
  for f in body:sub(from):gmatch('%(%*([%w_]+)%)') do fields[f] = true end
  return fields
end

local function filled_by_cuda()
  local filled = {}
  for _, f in ipairs({'runtime', 'elementwise', 'reduce', 'random', 'blas', 'optim', 'dnn',
                      'nn', 'graph', 'index', 'nccl', 'attention', 'fft'}) do
    local ok, s = pcall(read, 'cuda/' .. f .. '.cu')
    if ok then for e in s:gmatch('ops%->([%w_]+)%s*=') do filled[e] = true end end
  end
  return filled
end

-- rows of the table under "## Public ops by device": {ops, entries, status}
local function doc_rows()
  local doc = read('doc/cuda.md')
  local sec = doc:match('\n## Public ops by device\n(.-)\n## ')
  assert(sec, 'doc/cuda.md has no "## Public ops by device" section')
  local rows = {}
  for line in sec:gmatch('[^\n]+') do
    local a, b, c = line:match('^|([^|]*)|([^|]*)|([^|]*)|')
    if a and a:find('of_', 1, true) then
      local r = {ops = {}, entries = {}, status = c:match('^%s*(%S+)')}
      for o in a:gmatch('`(of_[%w_]+)`') do r.ops[#r.ops + 1] = o end
      for e in b:gmatch('`([%w_]+)`') do r.entries[#r.entries + 1] = e end
      rows[#rows + 1] = r
    end
  end
  return rows, doc
end

describe('doc/cuda.md op table', function()
  local rows, doc = doc_rows()
  it('names every public op that takes tensors, once', function()
    local seen = {}
    for _, r in ipairs(rows) do
      for _, o in ipairs(r.ops) do
        assert(not seen[o], 'doc/cuda.md: ' .. o .. ' is in two rows')
        seen[o] = true
      end
    end
    local missing = {}
    for o in pairs(public_tensor_ops()) do
      if not seen[o] then missing[#missing + 1] = o end
    end
    table.sort(missing)
    assert(#missing == 0, 'doc/cuda.md "Public ops by device" lacks ' .. table.concat(missing, ', '))
    for o in pairs(seen) do
      assert(read('core/include/oneflow/oneflow.h'):find(o .. '(', 1, true),
             'doc/cuda.md names ' .. o .. ', which oneflow.h does not declare')
    end
  end)
  it('names only entries the CUDA library fills, and all of them', function()
    local fields, filled, used = kernel_fields(), filled_by_cuda(), {}
    for _, r in ipairs(rows) do
      for _, e in ipairs(r.entries) do
        assert(fields[e], 'doc/cuda.md names `' .. e .. '`, not a kernel entry of of_device_ops')
        if r.status == 'yes' then
          assert(filled[e], 'doc/cuda.md says yes with `' .. e .. '`, which cuda/*.cu never fills')
        end
        used[e] = true
      end
    end
    local missing = {}
    for f in pairs(fields) do
      if filled[f] and not used[f] then missing[#missing + 1] = f end
    end
    table.sort(missing)
    assert(#missing == 0, 'doc/cuda.md "Public ops by device" lacks the entries '
           .. table.concat(missing, ', '))
  end)
  it('has a known status in each row, and lists the refused ops under "Not done"', function()
    local notdone = doc:match('\n## Not done\n(.*)$')
    assert(notdone, 'doc/cuda.md has no "## Not done" section')
    for _, r in ipairs(rows) do
      assert(r.status == 'yes' or r.status == 'host' or r.status == 'error',
             'doc/cuda.md: bad status ' .. tostring(r.status) .. ' for ' .. r.ops[1])
      if r.status == 'error' then
        for _, o in ipairs(r.ops) do
          assert(notdone:find(o, 1, true), o .. ' is refused on CUDA but not under "Not done"')
        end
      end
    end
  end)
end)

local target = os.getenv('OF_COVERAGE_DEVICE') or 'cuda'
if target == 'cuda' and not flow.cuda.is_available() then
  describe('CUDA coverage', function()
    pending('skipped: no usable GPU (' .. flow.cuda.why_unavailable() .. ')')
  end)
  return
end

local F = flow.nn.functional
local function on(x) return x:to(target) end

-- f(CPU inputs) against f(inputs on target); grads of the float inputs
-- that `grad` asks for (true: all)
local function check(name, f, inputs, tol, grad)
  tol = tol or 1e-5
  local cin, din = {}, {}
  for i, x in ipairs(inputs) do
    local g = grad and flow.is_tensor(x) and x.dtype.is_floating_point
    if flow.is_tensor(x) then
      cin[i] = g and x:clone():requires_grad_(true) or x
      din[i] = g and on(x):detach():requires_grad_(true) or on(x)
    else
      cin[i], din[i] = x, x
    end
  end
  local rc, rd = f(unpack(cin)), f(unpack(din))
  if not flow.is_tensor(rc) then rc, rd = rc[1], rd[1] end
  assert.are.equal(target, rd.device.type, name .. ': result not on ' .. target)
  assert.are.same(rc:size():totable(), rd:size():totable(), name .. ': shape')
  assert.are.equal(rc.dtype, rd.dtype, name .. ': dtype')
  H.close(rd:cpu(), rc, tol, name)
  if grad and rc.dtype.is_floating_point then
    local w = flow.randn(rc:size():totable(), {dtype = rc.dtype})
    ;(rc * w):sum():backward()
    ;(rd * on(w)):sum():backward()
    for i, x in ipairs(cin) do
      if flow.is_tensor(x) and x.requires_grad then
        H.close(din[i].grad:cpu(), x.grad, tol * 10, name .. ' grad ' .. i)
      end
    end
  end
end

describe('CUDA coverage of the public ops', function()
  flow.manual_seed(3)
  local a, b = flow.randn(4, 6), flow.randn(6)
  local img = flow.randn(2, 3, 8, 8)
  local idx = flow.tensor({3, 1, 2, 3}, {dtype = flow.int64})
  it('creation, copies, views and shape ops', function()
    for _, fn in ipairs({'zeros', 'ones', 'empty'}) do
      local t = flow[fn](2, 3, {device = target})
      assert.are.equal(target, t.device.type)
    end
    H.close(flow.eye(3, 4, {device = target}):cpu(), flow.eye(3, 4), 0, 'eye')
    H.close(flow.arange(1, 10, 0.5, {device = target}):cpu(), flow.arange(1, 10, 0.5), 0, 'arange')
    H.close(flow.linspace(-1, 1, 7, {device = target}):cpu(), flow.linspace(-1, 1, 7), 0, 'linspace')
    H.close(flow.full({2, 2}, 7, {device = target}):cpu(), flow.full({2, 2}, 7), 0, 'full')
    check('view/reshape', function(x) return x:reshape(3, 8):view(8, 3) end, {a}, 0, true)
    check('transpose/permute', function(x) return x:transpose(1, 2):permute(2, 1):t() end, {a}, 0, true)
    check('narrow/select/slice', function(x) return x:narrow(2, 2, 3):select(1, 2) + x[{2, {1, 3}}] end,
          {a}, 0, true)
    check('squeeze/unsqueeze/expand/flatten', function(x)
      return x:unsqueeze(1):expand(2, 4, 6):flatten():reshape(2, 24):squeeze() end, {a}, 0, true)
    check('contiguous/clone/to', function(x) return x:t():contiguous():clone():to(flow.float64) end,
          {a}, 0, true)
    check('copy_/fill_', function(x)
      local y = flow.zeros_like(x):fill_(2)
      y:copy_(x * 3)
      return y
    end, {a}, 0, true)
    check('cat/stack', function(x, y) return flow.cat({x, x}, 1) + flow.stack({y, y}, 1):sum() end,
          {a, b}, 1e-6, true)
    check('flip/roll/tril/repeat', function(x)
      local t = x:flip(1):roll(2, 2):tril()
      return t['repeat'](t, 2, 1)   -- `repeat` is a Lua keyword
    end, {a}, 0, true)
  end)
  it('elementwise, reductions, softmax, matmul', function()
    check('binary/unary/clamp/leaky_relu', function(x, y)
      return F.leaky_relu((x * y + 1):exp():clamp(0.5, 3) - y, 0.1) end, {a, b}, 1e-5, true)
    check('where/masked_fill', function(x, y)
      return flow.where(x:gt(0), x, y):masked_fill(x:lt(-1), 0) end, {a, b}, 0, true)
    check('reduce', function(x) return x:sum(2) + x:mean(2) + x:amax(2) + x:logsumexp(2) end,
          {a}, 1e-5, true)
    check('max_dim', function(x) return x:max(2) end, {a}, 0, true)
    check('argmax', function(x) return x:argmax(2) end, {a}, 0)
    check('var/std', function(x) return x:var(2) + x:std(1):sum() end, {a}, 1e-5, true)
    check('softmax/log_softmax', function(x) return F.softmax(x, 2) + F.log_softmax(x, 1) end,
          {a}, 1e-5, true)
    check('cumsum/cumprod', function(x) return x:cumsum(2) + x:cumprod(1) end, {a}, 1e-5, true)
    check('matmul/mm/bmm/addmm', function(x, y)
      local m = x:t()
      return flow.matmul(x, y) + flow.mm(x, m):sum(2) + flow.bmm(x:unsqueeze(1), m:unsqueeze(1)):sum(3):reshape(4)
        + flow.addmm(y:narrow(1, 1, 4), x, m):sum(1)
    end, {a, b}, 1e-4, true)
  end)
  it('indexing, sorting and masks', function()
    check('gather/scatter', function(x)
      local i = flow.tensor({{1, 2}, {3, 1}, {2, 2}, {6, 5}}, {dtype = flow.int64}):to(x.device)
      return x:gather(2, i) + flow.zeros(4, 6, {device = x.device}):scatter_add(2, i, x:narrow(2, 1, 2))
        :narrow(2, 1, 2)
    end, {a}, 1e-6, true)
    check('index_select/index_add', function(x, i)
      return x:index_select(1, i) + flow.zeros(4, 6, {device = x.device}):index_add(1, i, x)
    end, {a, idx}, 1e-6, true)
    check('sort/topk', function(x) return x:sort(2) + x:topk(6, 2) end, {a}, 0, true)
    check('one_hot', function(i) return F.one_hot(i, 4) end, {idx}, 0)
    check('masked_select/nonzero', function(x) return x:masked_select(x:gt(0)) end, {a}, 0, true)
    check('nonzero', function(x) return x:gt(0):nonzero() end, {a}, 0)
  end)
  it('random numbers are the CPU ones for the same seed', function()
    local function same(name, f)
      flow.manual_seed(11)
      local c = f('cpu')
      flow.manual_seed(11)
      local d = f(target)
      assert.are.equal(target, d.device.type)
      H.close(d:cpu(), c, 1e-6, name)
    end
    same('rand/randn', function(dev) return flow.rand(5, {device = dev}) + flow.randn(5, {device = dev}) end)
    same('uniform_/normal_', function(dev)
      return flow.empty(6, {device = dev}):uniform_(-2, 2) + flow.empty(6, {device = dev}):normal_(1, 2)
    end)
    same('randint_', function(dev) return flow.randint(0, 9, {7}, {device = dev}) end)
    same('bernoulli_', function(dev) return flow.empty(9, {device = dev}):bernoulli_(0.3) end)
    same('bernoulli(p)', function(dev) return flow.bernoulli(flow.rand(3, 5):to(dev)) end)
    H.raises(function() flow.bernoulli(flow.full({3}, 2):to(target)) end, 'bernoulli', '[0, 1]')
  end)
  it('nn ops: conv, pools, norms, resampling, losses', function()
    local w = flow.randn(4, 3, 3, 3) * 0.2
    check('conv2d', function(x, k) return F.conv2d(x, k, nil, {padding = 1}) end, {img, w}, 1e-4, true)
    check('conv_transpose2d', function(x, k) return F.conv_transpose2d(x, k:transpose(1, 2), nil,
          {stride = 2}) end, {img, w}, 1e-4, true)
    check('max_pool2d/avg_pool2d', function(x) return F.max_pool2d(x, 2) + F.avg_pool2d(x, 2) end,
          {img}, 1e-5, true)
    check('adaptive pools', function(x)
      return F.adaptive_avg_pool2d(x, 3) + F.adaptive_max_pool2d(x, 3) end, {img}, 1e-5, true)
    check('batch_norm', function(x) return F.batch_norm(x, nil, nil, {training = true}) end,
          {img}, 1e-4, true)
    local core = require 'oneflow._C'
    local rm, rv = flow.randn(3), flow.rand(3) + 0.5   -- running stats: no gradient of their own
    check('batch_norm_eval', function(x)
      local m, v = rm:to(x.device.type), rv:to(x.device.type)
      if core.C.of_batch_norm_eval(x.p, m.p, v.p, nil, nil, 1e-5, 0, 6, 1, 1, nil, core.out1) ~= 0 then
        core.raise(1)
      end
      return core.wrap(core.out1[0])
    end, {img}, 1e-4, true)
    check('layer/group/instance norm', function(x)
      return F.layer_norm(x, {8}) + F.group_norm(x, 1) + F.instance_norm(x) end, {img}, 1e-4, true)
    check('interpolate/pad', function(x)
      return F.interpolate(F.pad(x, {1, 1, 1, 1}, 'reflect'), {size = {5, 5}, mode = 'bilinear'}) end,
          {img}, 1e-5, true)
    local y = flow.tensor({1, 3, 2, 4}, {dtype = flow.int64})
    check('cross_entropy', function(x, t) return F.cross_entropy(x, t) end, {a, y}, 1e-5, true)
    check('nll_loss', function(x, t) return F.nll_loss(F.log_softmax(x, 2), t) end, {a, y}, 1e-5, true)
    local q, kk, vv = flow.randn(2, 4, 9, 8), flow.randn(2, 2, 13, 8), flow.randn(2, 2, 13, 5)
    local am = flow.rand(9, 13):gt(0.2)
    am[{{}, 1}] = true
    check('scaled_dot_product_attention', function(x, k, v)
      return F.scaled_dot_product_attention(x, k, v, {attn_mask = am:to(x.device), enable_gqa = true})
        + F.scaled_dot_product_attention(x, k, v, {is_causal = true, enable_gqa = true})
    end, {q, kk, vv}, 1e-4, true)
    local function dropped(dev)   -- the same draws on both devices
      flow.manual_seed(11)
      return F.scaled_dot_product_attention(q:to(dev), kk:to(dev), vv:to(dev),
                                            {dropout_p = 0.5, enable_gqa = true})
    end
    H.close(dropped(target):cpu(), dropped('cpu'), 1e-4, 'scaled_dot_product_attention dropout')
  end)
  it('flow.special: every function on the device against the CPU, values and grads', function()
    local S = flow.special
    local x = flow.tensor({0.05, 0.3, 0.7, 1.5, 4.0, 12.5}, {dtype = flow.float64})
    local u = flow.tensor({0.01, 0.2, 0.45, 0.6, 0.9, 0.99}, {dtype = flow.float64})
    local one = {'erfcx', 'gammaln', 'digamma', 'i0', 'i0e', 'i1', 'i1e', 'log_ndtr', 'bessel_j0',
      'bessel_j1', 'bessel_y0', 'bessel_y1', 'modified_bessel_i0', 'modified_bessel_i1',
      'modified_bessel_k0', 'modified_bessel_k1', 'scaled_modified_bessel_k0',
      'scaled_modified_bessel_k1', 'spherical_bessel_j0', 'airy_ai'}
    local has_grad = {erfcx = true, gammaln = true, digamma = true, i0 = true, i0e = true, i1 = true,
      i1e = true, log_ndtr = true}   -- the others have no derivative (as in PyTorch)
    for _, name in ipairs(one) do
      check('special.' .. name, function(v) return S[name](v) end, {x}, 1e-12, has_grad[name])
    end
    check('special.erfinv/ndtri', function(v) return S.erfinv(v) + S.ndtri(v) end, {u}, 1e-12, true)
    check('special.polygamma', function(v) return S.polygamma(2, v) end, {x}, 1e-12, true)
    check('special.zeta', function(v, q) return S.zeta(v + 1.5, q) end, {x:detach(), x}, 1e-12)
    check('special.gammainc/gammaincc', function(v) return S.gammainc(v, v * 2) + S.gammaincc(v, 3) end,
          {x}, 1e-12)
    for _, name in ipairs({'chebyshev_polynomial_t', 'chebyshev_polynomial_u', 'chebyshev_polynomial_v',
      'chebyshev_polynomial_w', 'shifted_chebyshev_polynomial_t', 'shifted_chebyshev_polynomial_u',
      'shifted_chebyshev_polynomial_v', 'shifted_chebyshev_polynomial_w', 'hermite_polynomial_h',
      'hermite_polynomial_he', 'laguerre_polynomial_l', 'legendre_polynomial_p'}) do
      check('special.' .. name, function(v) return S[name](v, 5) end, {u}, 1e-12)
    end
    check('special float32', function(v) return S.i0e(v) end, {x:float()}, 1e-6, true)
  end)
  it('flow.linalg: the LAPACK kernels refuse device tensors; householder_product and fft helpers run there', function()
    local A = flow.randn(4, 3, {dtype = flow.float64})
    local tau = flow.randn(2, {dtype = flow.float64})
    check('linalg.householder_product', function(x, t) return flow.linalg.householder_product(x, t) end,
          {A, tau}, 1e-10, true)
    check('fft.fftshift/ifftshift', function(x) return flow.fft.fftshift(x) + flow.fft.ifftshift(x, 2) end,
          {a}, 0, true)
    H.close(flow.fft.fftfreq(7, {device = target}):cpu(), flow.fft.fftfreq(7), 0, 'fftfreq')
    if target ~= 'cuda' then return end
    local S = on(A:t():matmul(A))
    local LU, piv = flow.linalg.lu_factor(A:narrow(1, 1, 3))
    for name, f in pairs({
      lu_factor = function() return flow.linalg.lu_factor(S) end,
      lu = function() return flow.linalg.lu(S) end,
      ldl_factor = function() return flow.linalg.ldl_factor(S) end,
      ldl_solve = function() return flow.linalg.ldl_solve(on(LU), piv, S) end,
      lu_solve = function() return flow.linalg.lu_solve(on(LU), on(piv), S) end,
      inv = function() return flow.linalg.inv(S) end,
      matrix_sqrth = function() return flow.linalg.matrix_sqrth(S) end,
      polar = function() return flow.linalg.polar(S) end,
    }) do
      H.raises(f, 'linalg.' .. name, 'not implemented on cuda')
    end
  end)
  it('optimizer updates and loss scaling', function()
    for _, make in ipairs({function(p) return flow.optim.SGD(p, {lr = 0.1, momentum = 0.9}) end,
                           function(p) return flow.optim.Adam(p, {lr = 0.01}) end}) do
      local wc = flow.randn(5):requires_grad_(true)
      local wd = on(wc:detach()):requires_grad_(true)
      local oc, od = make({wc}), make({wd})
      for _ = 1, 2 do
        oc:zero_grad(); od:zero_grad()
        ;(wc * wc):sum():backward()
        ;(wd * wd):sum():backward()
        oc:step(); od:step()
      end
      H.close(wd:detach():cpu(), wc:detach(), 1e-5, 'optimizer')
    end
  end)
  it('host-side helpers take device tensors', function()
    local vio = require 'flowvision.io'
    local TF = require 'flowvision.transforms.functional'
    local ops = require 'flowvision.models.detection.ops'
    local u8 = flow.randint(0, 256, {3, 5, 7}):to(flow.uint8)
    H.close(vio.encode_png(on(u8)), vio.encode_png(u8), 0, 'encode_png')
    local e = TF.equalize(on(u8))
    assert.are.equal(target, e.device.type)
    H.close(e:cpu(), TF.equalize(u8), 0, 'equalize')
    local boxes = flow.tensor({{0, 0, 1, 1}, {0, 0, 1, 1.1}, {2, 2, 3, 3}})
    local scores = flow.tensor({0.9, 0.8, 0.7})
    local k = ops.nms(on(boxes), on(scores), 0.5)
    assert.are.equal(target, k.device.type)
    H.close(k:cpu(), ops.nms(boxes, scores, 0.5), 0, 'nms')
    flow.set_rng_state(on(flow.get_rng_state()))
  end)
end)
