-- flow.fft's real helpers (issue 23): fftfreq, rfftfreq, fftshift,
-- ifftshift against torch.fft 1.13, options, gradients, errors.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local fft = flow.fft

local f64 = {dtype = flow.float64}
local function flat(x) return x:reshape(-1):totable() end

describe('flow.fft helpers', function()
  local check = H.torch_ok() and it or pending
  check('match torch.fft', function()
    local ref = H.torch_rows([==[
def out(x): print(" ".join(repr(float(v)) for v in x.reshape(-1).tolist()) if x.numel() else "")
for n in [1, 2, 5, 8, 11]:
    out(torch.fft.fftfreq(n)); out(torch.fft.fftfreq(n, 0.25))
    out(torch.fft.rfftfreq(n)); out(torch.fft.rfftfreq(n, 3.0))
out(torch.fft.fftfreq(7, dtype=torch.float32))
x = torch.arange(60.).reshape(3, 4, 5)
out(torch.fft.fftshift(x)); out(torch.fft.ifftshift(x)); out(torch.fft.fftshift(x, dim=1))
out(torch.fft.ifftshift(x, dim=(0, -1)))
out(torch.fft.fftshift(torch.arange(7.))); out(torch.fft.ifftshift(torch.arange(7.)))
]==])
    local r = 0
    local function same(name, x, tol)
      r = r + 1
      H.close(flat(x), ref[r], tol or 1e-15, name .. ' (torch row ' .. r .. ')')
    end
    for _, n in ipairs({1, 2, 5, 8, 11}) do
      same('fftfreq ' .. n, fft.fftfreq(n, f64))
      same('fftfreq d ' .. n, fft.fftfreq(n, 0.25, f64))
      same('rfftfreq ' .. n, fft.rfftfreq(n, f64))
      same('rfftfreq d ' .. n, fft.rfftfreq(n, 3.0, f64))
    end
    local f32 = fft.fftfreq(7)
    assert.are.equal(flow.float32, f32.dtype)
    same('fftfreq float32', f32, 1e-7)
    local x = flow.arange(0, 60, f64):reshape(3, 4, 5)
    same('fftshift', fft.fftshift(x))
    same('ifftshift', fft.ifftshift(x))
    same('fftshift dim 2', fft.fftshift(x, 2))
    same('ifftshift dims {1, -1}', fft.ifftshift(x, {1, -1}))
    same('fftshift odd', fft.fftshift(flow.arange(0, 7, f64)))
    same('ifftshift odd', fft.ifftshift(flow.arange(0, 7, f64)))
    assert.are.equal(#ref, r)
  end)

  it('ifftshift inverts fftshift; options; gradients flow through the shifts', function()
    local x = flow.randn(4, 7, 6, f64)
    H.close(fft.ifftshift(fft.fftshift(x)), x, 0)
    H.close(fft.ifftshift(fft.fftshift(x, {dim = {2, 3}}), {dim = {2, 3}}), x, 0)
    assert.are.same({0}, fft.fftfreq(0):size():totable())
    assert.is_true(fft.rfftfreq(4, {requires_grad = true}).requires_grad)
    H.close(fft.fftfreq(4, {d = 0.5, dtype = flow.float64}), {0, 0.5, -1, -0.5}, 0)
    local y = flow.randn(5, 3, {dtype = flow.float64, requires_grad = true})
    assert.is_true(flow.autograd.gradcheck(function(v) return fft.fftshift(v, 1) end, {y}))
    -- integer tensors shift too (as torch)
    H.close(fft.fftshift(flow.tensor({1, 2, 3, 4})), {3, 4, 1, 2}, 0)
  end)

  it('bad arguments give clear errors', function()
    H.raises(function() fft.fftfreq(-1) end, 'fft.fftfreq', 'non-negative integer')
    H.raises(function() fft.rfftfreq(2.5) end, 'fft.rfftfreq', 'non-negative integer')
    H.raises(function() fft.fftfreq(4, 'a') end, 'fft.fftfreq', 'd must be a number')
    H.raises(function() fft.fftfreq(4, {dtype = flow.int64}) end, 'fft.fftfreq', 'floating point', 'int64')
    H.raises(function() fft.fftfreq(4, {bogus = 1}) end, 'fftfreq', 'bogus')
    H.raises(function() fft.fftshift(flow.zeros(2, 3), 3) end, 'fft.fftshift', 'dim 3 is out of range', '2-D')
    H.raises(function() fft.ifftshift(flow.zeros(2, 3), {0}) end, 'fft.ifftshift', 'dim 0')
    H.raises(function() fft.fftshift({1, 2}) end, 'fft.fftshift')
  end)
end)
