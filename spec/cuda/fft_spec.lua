-- flow.fft on CUDA (cuFFT, cuda/fft.cu) against the CPU kernel: every
-- primitive (c2c both signs, r2c, c2r), several dims, the norm modes,
-- float32 and float64, odd and prime sizes, gradients, complex views.
-- Without a usable GPU the whole file is one pending line.
local flow = require 'oneflow'
local H = require 'spec.helpers'

if not flow.cuda.is_available() then
  describe('CUDA flow.fft', function()
    pending('skipped: no usable GPU (' .. flow.cuda.why_unavailable() .. ')')
  end)
  return
end

local fft = flow.fft
local function rv(x) return x.dtype.is_complex and flow.view_as_real(x) or x end
local function same(name, f, x, tol)
  local want = rv(f(x)):reshape(-1):totable()
  local got = rv(f(x:cuda())):cpu():reshape(-1):totable()
  H.close(got, want, tol, name)
end

describe('CUDA flow.fft', function()
  it('matches the CPU for every transform, norm, dtype and size', function()
    for _, dt in ipairs({flow.float32, flow.float64}) do
      local tol = dt == flow.float64 and 1e-10 or 1e-4
      for _, n in ipairs({1, 8, 12, 17, 1000}) do
        local x = flow.randn(3, n, {dtype = dt})
        local z = flow.complex(flow.randn(3, n, {dtype = dt}), flow.randn(3, n, {dtype = dt}))
        for _, norm in ipairs({'backward', 'ortho', 'forward'}) do
          same('fft ' .. n, function(t) return fft.fft(t, nil, nil, norm) end, z, tol)
          same('ifft ' .. n, function(t) return fft.ifft(t, nil, nil, norm) end, z, tol)
          same('rfft ' .. n, function(t) return fft.rfft(t, nil, nil, norm) end, x, tol)
          same('irfft ' .. n, function(t) return fft.irfft(t, n, nil, norm) end, z, tol)
          same('hfft ' .. n, function(t) return fft.hfft(t, n, nil, norm) end, z, tol)
        end
      end
      local img = flow.randn(4, 6, 5, {dtype = dt})
      same('rfftn', function(t) return fft.rfftn(t) end, img, tol)
      same('fft2 dim 1,3', function(t) return fft.fft2(t, nil, {1, 3}) end, img, tol)
      same('irfft2', function(t) return fft.irfft2(fft.rfft2(t), {6, 5}) end, img, tol)
    end
  end)
  it('gradients on the device equal the CPU ones', function()
    local x = flow.randn(5, 9, {dtype = flow.float64})
    local function grad(t)
      t = t:detach():requires_grad_(true)
      fft.rfft2(t):abs():sum():backward()
      return t.grad:cpu():reshape(-1):totable()
    end
    H.close(grad(x:cuda()), grad(x), 1e-10)
  end)
end)
