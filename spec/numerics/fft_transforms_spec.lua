-- flow.fft's transforms and complex tensors (issue 23): every transform,
-- norm mode, n / s trimming and padding and dims option against torch.fft
-- (spec/fixtures/fft_reference.json, written by tools/fft_reference.py
-- with torch 1.13), values and gradients in float64 / complex128; float32
-- inputs; large and prime sizes against a direct DFT; complex arithmetic
-- and its gradients; errors.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local json = require 'oneflow.utils.json'
local fft = flow.fft

local f = assert(io.open('spec/fixtures/fft_reference.json'))
local REF = json.decode(f:read('*a'))
f:close()

local f64 = {dtype = flow.float64}
local function flat(x) return x:reshape(-1):totable() end
local function rv(x) return x.dtype.is_complex and flow.view_as_real(x) or x end

local function input(c)
  local x
  if c.complex then
    local shape = {}
    for i, v in ipairs(c.shape) do shape[i] = v end
    shape[#shape + 1] = 2
    x = flow.view_as_complex(flow.tensor(c.x, f64):reshape(shape))
  else
    x = flow.tensor(c.x, f64):reshape(c.shape)
  end
  return x:detach():requires_grad_(true)
end

describe('flow.fft transforms', function()
  it('match torch.fft: values and gradients of ' .. #REF.cases .. ' cases', function()
    for k, c in ipairs(REF.cases) do
      local x = input(c)
      local opts = {dim = c.dim, norm = c.norm}
      if c.n then opts.n = c.n end
      if c.s then opts.s = c.s end
      local y = fft[c.op](x, opts)
      local name = ('case %d: %s shape {%s} n=%s s=%s dim=%s norm=%s'):format(k, c.op,
        table.concat(c.shape, ','), tostring(c.n), c.s and table.concat(c.s, ',') or 'nil',
        type(c.dim) == 'table' and table.concat(c.dim, ',') or tostring(c.dim), tostring(c.norm))
      local yr = rv(y)
      assert.are.same(c.out_shape, yr:size():totable(), name)
      H.close(flat(yr), c.out, 1e-9, name)
      local w = flow.tensor(c.w, f64):reshape(c.out_shape)
      local loss = (yr * w):sum()
      loss:backward()
      H.close(flat(rv(x.grad)), c.grad, 1e-9, name .. ' (gradient)')
    end
  end)

  it('float32 input gives complex64 / float32 and agrees with float64', function()
    local x = flow.randn(4, 12)
    local y = fft.rfft(x)
    assert.are.equal(flow.complex64, y.dtype)
    H.close(flat(flow.view_as_real(y)), flat(flow.view_as_real(fft.rfft(x:double()))), 1e-5)
    local z = fft.irfft(y, 12)
    assert.are.equal(flow.float32, z.dtype)
    H.close(flat(z), flat(x), 1e-5)
    assert.are.equal(flow.complex64, fft.fft(flow.arange(0, 6)).dtype)   -- integers promote
  end)

  it('large, prime and power-of-two sizes against a direct DFT', function()
    for _, n in ipairs({64, 97, 243, 625, 1000, 1021, 4096}) do
      local x = flow.randn(n, f64)
      local y = flow.view_as_real(fft.fft(x))
      -- direct DFT at a few frequencies
      local xs = x:totable()
      for _, k in ipairs({0, 1, math.floor(n / 3), n - 1}) do
        local re, im = 0, 0
        for j = 0, n - 1 do
          local a = -2 * math.pi * ((j * k) % n) / n
          re, im = re + xs[j + 1] * math.cos(a), im + xs[j + 1] * math.sin(a)
        end
        H.close(y[k + 1]:totable(), {re, im}, 1e-10, ('n=%d k=%d'):format(n, k))
      end
      H.close(flat(fft.ifft(fft.fft(x)):real()), flat(x), 1e-12, 'roundtrip ' .. n)
      H.close(flat(fft.irfft(fft.rfft(x), n)), flat(x), 1e-12, 'real roundtrip ' .. n)
    end
  end)

  it('complex tensors: arithmetic, parts, reductions and their gradients', function()
    local z = flow.complex(flow.tensor({1, -2, 0.5}, f64), flow.tensor({3, 4, -1}, f64))
    assert.are.equal(flow.complex128, z.dtype)
    assert.are.equal(flow.cdouble, z.dtype)
    assert.is_true(flow.is_complex(z))
    H.close(flat(flow.view_as_real(z * z)), {-8, 6, -12, -16, -0.75, -1})
    H.close(flat(flow.view_as_real(z / z)), {1, 0, 1, 0, 1, 0}, 1e-15)
    H.close(flat(flow.view_as_real(z + 1)), {2, 3, -1, 4, 1.5, -1})
    H.close(flat(flow.view_as_real(2 - z)), {1, -3, 4, -4, 1.5, 1})
    H.close(flat(flow.view_as_real(-z:conj())), {-1, 3, 2, 4, -0.5, -1})
    H.close(flat(z:abs()), {math.sqrt(10), math.sqrt(20), math.sqrt(1.25)}, 1e-15)
    H.close(flat(z:angle()), {math.atan2(3, 1), math.atan2(4, -2), math.atan2(-1, 0.5)}, 1e-15)
    H.close(flat(z:real()), {1, -2, 0.5})
    H.close(flat(z:imag()), {3, 4, -1})
    H.close(flow.view_as_real(z:sum()):totable(), {-0.5, 6})
    H.close(flow.view_as_real(z:mean()):totable(), {-0.5 / 3, 2}, 1e-15)
    H.close(flat(flow.view_as_real(z:to(flow.complex64))), {1, 3, -2, 4, 0.5, -1})
    H.close(flat(flow.view_as_real(z:clone())), {1, 3, -2, 4, 0.5, -1})
    H.close(flat(flow.view_as_real(flow.tensor({1, 2}, f64):to(flow.cdouble))), {1, 0, 2, 0})
    assert.is_true(z:eq(z:clone()):all():item())
    -- fill_ / zeros / full write both parts of each element (complex128: 16 bytes)
    for _, dt in ipairs({flow.complex128, flow.complex64}) do
      local zf = z:to(dt):clone()
      zf:fill_(2)
      H.close(flat(flow.view_as_real(zf)), {2, 0, 2, 0, 2, 0})
      H.close(flat(flow.view_as_real(flow.full({2}, -1, {dtype = dt}))), {-1, 0, -1, 0})
      H.close(flat(flow.view_as_real(flow.zeros(2, {dtype = dt}))), {0, 0, 0, 0})
    end
    assert.is_true(tostring(z):find('1.0000+3.0000j', 1, true) ~= nil)
    -- gradient of |z w|^2 w.r.t. z: PyTorch's dL/dre + i dL/dim = 2 z |w|^2
    local zz = z:detach():requires_grad_(true)
    local w = flow.complex(flow.tensor({0.5, 1, 2}, f64), flow.tensor({1, 0, -1}, f64))
    local l2 = ((zz * w):abs() ^ 2):sum()
    l2:backward()
    local want = flat(flow.view_as_real(z * (w:abs() ^ 2) * 2))
    H.close(flat(flow.view_as_real(zz.grad)), want, 1e-12)
    -- a complex leaf used twice: the engine sums complex gradients
    local u = z:detach():requires_grad_(true)
    flow.view_as_real(u + u):sum():backward()
    H.close(flat(flow.view_as_real(u.grad)), {2, 2, 2, 2, 2, 2})
  end)

  it('gradcheck through the transforms (float64)', function()
    local gc = flow.autograd.gradcheck
    local function c(t) return flow.view_as_complex(t) end
    assert.is_true(gc(function(t) return flow.view_as_real(fft.fft(c(t), 7)) end,
      {flow.randn(5, 2, {dtype = flow.float64, requires_grad = true})}))
    assert.is_true(gc(function(t) return fft.hfft(c(t), 6, nil, 'ortho') end,
      {flow.randn(4, 2, {dtype = flow.float64, requires_grad = true})}))
    assert.is_true(gc(function(t) return flow.view_as_real(fft.ihfft(t)) end,
      {flow.randn(9, {dtype = flow.float64, requires_grad = true})}))
    assert.is_true(gc(function(t) return fft.irfftn(c(t), {4, 6}) end,
      {flow.randn(4, 4, 2, {dtype = flow.float64, requires_grad = true})}))
  end)

  it('errors name the op, the argument, shapes and dtypes', function()
    local z = flow.complex(flow.randn(3), flow.randn(3))
    H.raises(function() return fft.rfft(z) end, 'fft.rfft', 'real input', 'complex64')
    H.raises(function() return fft.ihfft(z) end, 'fft.ihfft', 'complex64')
    H.raises(function() return fft.fft(flow.randn(3), {dim = 2}) end, 'fft.fft', 'dim 2', '[3]')
    H.raises(function() return fft.fft(flow.randn(3), {n = 0}) end, 'fft.fft', 'data points (0)')
    H.raises(function() return fft.fft(flow.randn(3), nil, nil, 'bogus') end, "invalid norm 'bogus'")
    H.raises(function() return fft.fft(flow.randn(3), {nn = 3}) end, 'fft.fft', "'nn'", "'n'")
    H.raises(function() return fft.fft2(flow.randn(3, 4), {s = {2}}) end, 's and dim', '1 and 2')
    H.raises(function() return fft.fftn(flow.randn(3, 4), {dim = {1, 1}}) end, 'repeated')
    H.raises(function() return z:exp() end, 'exp: complex64 is not supported', '[3]')
    H.raises(function() return z:max() end, 'max: complex64 is not supported')
    H.raises(function() return z:imag():imag() end, 'imag', 'expected a complex tensor', 'float32')
    H.raises(function() return flow.view_as_complex(flow.randn(3, 3)) end, 'view_as_complex', 'size 2', '[3,3]')
    H.raises(function() return flow.view_as_real(flow.randn(3)) end, 'view_as_real', 'float32')
    H.raises(function() return flow.complex(flow.randn(3), flow.randn(3, f64)) end,
      'complex', 'float32 and float64')
  end)
end)
