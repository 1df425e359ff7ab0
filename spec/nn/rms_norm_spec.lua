-- F.rms_norm and nn.RMSNorm (PyTorch 2.4's names and semantics): values
-- against the float64 closed form, the default eps, bfloat16, gradients
-- (gradcheck and PyTorch's autograd), the module and bad input.
local flow = require 'oneflow'
local F, nn = flow.nn.functional, flow.nn
local H = require 'spec.helpers'

-- the closed form in float64: x / sqrt(mean(x^2 over the last k dims) + eps) * w
local function ref(x, k, w, eps)
  local xd = x:double()
  local s = xd:size():totable()
  local rows, m = 1, 1
  for i = 1, #s - k do rows = rows * s[i] end
  for i = #s - k + 1, #s do m = m * s[i] end
  local r = xd:reshape(rows, m)
  local y = r / ((r * r):sum(2, {keepdim = true}) / m + eps):sqrt()
  if w ~= nil then y = y * w:double():reshape(1, m) end
  return y:reshape(s)
end

describe('F.rms_norm', function()
  it('normalises the last dims by their root mean square, with and without weight', function()
    flow.manual_seed(3)
    local x = flow.randn(2, 3, 5) * 3 + 1
    local w = flow.randn(5)
    H.close(F.rms_norm(x, {5}, w, 1e-6):double(), ref(x, 1, w, 1e-6), 1e-6, 'weight')
    H.close(F.rms_norm(x, 5, {weight = w, eps = 1e-6}):double(), ref(x, 1, w, 1e-6), 1e-6, 'options')
    H.close(F.rms_norm(x, {3, 5}, nil, 1e-3):double(), ref(x, 2, nil, 1e-3), 1e-6, 'two dims')
    local xt = flow.randn(5, 4):t()   -- non-contiguous
    H.close(F.rms_norm(xt, {5}, nil, 1e-5):double(), ref(xt, 1, nil, 1e-5), 1e-6, 'strided')
    assert.same({0, 5}, F.rms_norm(flow.randn(0, 5), {5}):size():totable())
  end)

  it('defaults eps to the machine epsilon of the compute type', function()
    local x = flow.tensor({{1e-4, -2e-4, 3e-4}})
    H.close(F.rms_norm(x, 3):double(), ref(x, 1, nil, 1.1920928955078125e-07), 1e-6, 'float32')
    local xd = x:double()
    H.close(F.rms_norm(xd, 3), ref(xd, 1, nil, 2.220446049250313e-16), 1e-12, 'float64')
    -- zeros stay finite: eps keeps the denominator above 0
    assert.same({0, 0, 0}, F.rms_norm(flow.zeros(1, 3), 3):reshape(3):totable())
  end)

  it('computes bfloat16 and float16 in float32 and keeps the dtype', function()
    local x, w = flow.randn(4, 8), flow.randn(8)
    for _, dt in ipairs({flow.bfloat16, flow.float16}) do
      local y = F.rms_norm(x:to(dt), 8, w:to(dt), 1e-5)
      assert.equal(dt, y.dtype)
      H.close(y:double(), ref(x:to(dt), 1, w:to(dt), 1e-5), 2e-2, tostring(dt))
    end
  end)

  it('has the gradients of the closed form (gradcheck, float64)', function()
    local x = (flow.randn(3, 4, {dtype = flow.float64}) + 0.5):requires_grad_()
    local w = flow.randn(4, {dtype = flow.float64}):requires_grad_()
    assert.is_true(flow.autograd.gradcheck(function(a, b) return F.rms_norm(a, {4}, b, 1e-5) end,
                                           {x, w}))
  end)

  it('has exact second derivatives (create_graph: the closed form from public ops)', function()
    local x = (flow.randn(3, 4, {dtype = flow.float64}) + 0.5):requires_grad_()
    local w = flow.randn(4, {dtype = flow.float64}):requires_grad_()
    assert.is_true(flow.autograd.gradgradcheck(function(a, b) return F.rms_norm(a, {4}, b, 1e-5) end,
                                               {x, w}))
    assert.is_true(flow.autograd.gradgradcheck(function(a) return F.rms_norm(a, {2, 2}, nil, 1e-3) end,
                                               {x:detach():reshape(3, 2, 2):transpose(2, 3):requires_grad_()}))
  end)

  it('names the op, the shapes and the dtype on bad input', function()
    local x = flow.randn(2, 5)
    H.raises(function() F.rms_norm(x, {4}) end, 'rms_norm', 'normalized_shape [4]', '[2, 5]')
    H.raises(function() F.rms_norm(x, {5}, nil, -1) end, 'rms_norm', 'eps', '-1')
    H.raises(function() F.rms_norm(x, {5}, flow.ones(5, {dtype = flow.int64})) end,
             'rms_norm', 'weight', 'floating point')
    H.raises(function() F.rms_norm(x, {5}, flow.ones(4)) end, 'rms_norm', 'weight', '[4]')
    H.raises(function() F.rms_norm(flow.ones(2, 5, {dtype = flow.int64}), 5) end,
             'rms_norm', 'floating point', 'int64')
    H.raises(function() F.rms_norm(x, 5, {epss = 1}) end, 'eps')
  end)
end)

describe('nn.RMSNorm', function()
  it('holds a weight of ones, trains it and prints as PyTorch', function()
    local m = nn.RMSNorm({3, 4}, {eps = 1e-6})
    assert.same({3, 4}, m.weight:size():totable())
    assert.equal(1, m.weight:min():item())
    assert.equal('RMSNorm((3, 4), eps=1e-06, elementwise_affine=True)', tostring(m):gsub('%s+$', ''))
    local x = flow.randn(2, 3, 4)
    H.close(m(x):double(), ref(x, 2, m.weight, 1e-6), 1e-6, 'forward')
    m(x):sum():backward()
    assert.same({3, 4}, m.weight.grad:size():totable())
    local plain = nn.RMSNorm(4, {elementwise_affine = false})
    assert.is_nil(plain.weight)
    assert.equal(0, #plain:parameters())
    assert.equal('RMSNorm((4,), eps=None, elementwise_affine=False)', tostring(plain):gsub('%s+$', ''))
  end)
end)

describe('rms_norm in nn.Graph', function()
  it('traces to one op with the same values as eager mode, on the first call and after', function()
    local m = nn.RMSNorm(6, {eps = 1e-5})
    local G = nn.Graph:subclass('RMSGraph')
    function G:__init() nn.Graph.__init(self); self.m = m end
    function G:build(x) return self.m(x) end
    local g = G()
    local x = flow.randn(4, 6)
    H.close(g(x), m(x), 1e-6, 'graph forward')
    H.close(g(x), m(x), 1e-6, 'graph forward, second call')
    -- one op in the IR, with its eps (not the public ops it was once composed of)
    local ir = g:ir()
    assert.truthy(ir:find('rms_norm(', 1, true), ir)
    assert.truthy(ir:find('eps=1e-05', 1, true), ir)
    assert.falsy(ir:find('rsqrt', 1, true), ir)
  end)
end)

-- PyTorch's own F.rms_norm (2.4 and later) where the python has it, else the
-- closed form written in torch; either way torch's autograd gives the grads
local check = H.torch_ok() and it or pending
describe('rms_norm against PyTorch', function()
  check('gives torch\'s values and gradients', function()
    local R, M = 3, 37
    local script = ([[
import torch
R, M = %d, %d
i = torch.arange(R * M, dtype=torch.float64)
x = (torch.sin(i * 0.37) * 3 + 0.5).reshape(R, M).float().requires_grad_()
g = torch.cos(i * 0.11).reshape(R, M).float()
w = torch.linspace(0.5, 1.5, M).requires_grad_()
fn = getattr(torch.nn.functional, 'rms_norm', None)
if fn is None:
    eps = torch.finfo(torch.float32).eps
    fn = lambda x, s, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
y = fn(x, (M,), w); (y * g).sum().backward()
x2 = x.detach().double().requires_grad_()
y2 = x2 * torch.rsqrt(x2.pow(2).mean(-1, keepdim=True) + 1e-5)
(y2 * g.double()).sum().backward()
xb, wb = x.detach().bfloat16().float(), w.detach().bfloat16().float()
yb = (xb * torch.rsqrt(xb.pow(2).mean(-1, keepdim=True) + 1e-5) * wb).bfloat16()
for t in (y, x.grad, w.grad, y2, x2.grad, yb.float()):
    print(' '.join('%%.9g' %% v for v in t.detach().reshape(-1).tolist()))
]]):format(R, M)
    local lines = H.python_lines(script)
    assert.equal(6, #lines)
    local function nums(l)
      local r = {}
      for v in l:gmatch('%S+') do r[#r + 1] = tonumber(v) end
      return r
    end
    local i = flow.arange(0, R * M, {dtype = flow.float64})
    local x = ((i * 0.37):sin() * 3 + 0.5):reshape(R, M):float():requires_grad_()
    local g = (i * 0.11):cos():reshape(R, M):float()
    local w = flow.linspace(0.5, 1.5, M):requires_grad_()
    local y = F.rms_norm(x, {M}, w)
    local loss = (y * g):sum()
    loss:backward()
    H.close(y, nums(lines[1]), 1e-5, 'rms_norm')
    H.close(x.grad, nums(lines[2]), 1e-4, 'grad x')
    H.close(w.grad, nums(lines[3]), 1e-4, 'grad w')
    -- float64, no weight, eps given
    local x2 = x:detach():double():requires_grad_()
    local y2 = F.rms_norm(x2, M, {eps = 1e-5})
    local loss2 = (y2 * g:double()):sum()
    loss2:backward()
    H.close(y2, nums(lines[4]), 1e-8, 'float64 rms_norm')
    H.close(x2.grad, nums(lines[5]), 1e-8, 'float64 grad x')
    -- bfloat16 in and out, within bfloat16 rounding (one rounding here, two in torch 2.4)
    local yb = F.rms_norm(x:detach():bfloat16(), {M}, w:detach():bfloat16(), 1e-5)
    assert.equal(flow.bfloat16, yb.dtype)
    H.close(yb:float(), nums(lines[6]), 1.6e-2, 'bfloat16 rms_norm')
  end)
end)
