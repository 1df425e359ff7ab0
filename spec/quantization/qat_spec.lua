-- Quantization-aware training: fake quantization with straight-through
-- gradients (vs PyTorch), prepare_qat, training eagerly and in nn.Graph,
-- convert to the int8 model.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local R = require 'spec.quantization.torch_ref'

local nn, F, Qz = flow.nn, flow.nn.functional, flow.quantization

local function qat_model()
  flow.manual_seed(0)
  local m = nn.Sequential(Qz.QuantStub(), nn.Conv2d(1, 4, 3, {padding = 1}), nn.ReLU(), nn.Flatten(),
    nn.Linear(4 * 36, 3), Qz.DeQuantStub())
  m:eval()
  local f = Qz.fuse_modules(m, {{'1', '2'}})
  f:train()
  f.qconfig = Qz.get_default_qat_qconfig('x86')
  return Qz.prepare_qat(f)
end

describe('fake quantization', function()
  it('values are quantize-dequantize; the gradient passes inside the range only', function()
    local x = flow.tensor({-1.0, -0.26, 0.0, 0.33, 1.2, 5.0}, {requires_grad = true})
    local y = Qz.fake_quantize_per_tensor_affine(x, 0.1, 3, 0, 40)
    H.close(y, {-0.3, -0.3, 0.0, 0.3, 1.2, 3.7}, 1e-6)
    y:sum():backward()
    H.close(x.grad, {0, 1, 1, 1, 1, 0})
    local w = flow.tensor({{1.0, -2.0}, {0.5, 0.26}}, {requires_grad = true})
    local z = Qz.fake_quantize_per_channel_affine(w, flow.tensor({0.5, 0.1}), flow.tensor({0, 0}), 1, -2, 2)
    H.close(z, {{1.0, -1.0}, {0.2, 0.2}}, 1e-6)
    z:sum():backward()
    H.close(w.grad, {{1, 0}, {0, 0}})
  end)

  it('agrees with torch.fake_quantize_per_tensor_affine (values and grads)', function()
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    flow.manual_seed(9)
    local x = flow.randn(200) * 2
    local xg = x:clone():requires_grad_(true)
    local y = Qz.fake_quantize_per_tensor_affine(xg, 0.037, 11, 0, 127)
    ;(y * y):sum():backward()
    local t = R.run(([==[
import torch
x = torch.tensor(%s, dtype=torch.float32).requires_grad_()
y = torch.fake_quantize_per_tensor_affine(x, 0.037, 11, 0, 127)
(y * y).sum().backward()
print('y', ' '.join(repr(v) for v in y.tolist()))
print('g', ' '.join(repr(v) for v in x.grad.tolist()))
print('done')
]==]):format(R.list(x)))
    H.close(y, t.y, 1e-6, 'values')
    H.close(xg.grad, t.g, 1e-5, 'grads')
  end)
end)

describe('prepare_qat', function()
  it('trains eagerly and in nn.Graph, then converts to the int8 model', function()
    local p = qat_model()
    assert.are.equal('QATConvReLU2d', p[2].__name)
    assert.are.equal('QATLinear', p[5].__name)
    local opt = flow.optim.SGD(p:parameters(), {lr = 0.05})
    flow.manual_seed(1)
    local x, y = flow.randn(16, 1, 6, 6), flow.randint(1, 4, {16})
    local first
    for _ = 1, 3 do
      local loss = F.cross_entropy(p(x), y)
      first = first or loss:item()
      opt:zero_grad(); loss:backward(); opt:step()
    end
    local obs = p[5].activation_post_process.activation_post_process
    local before = obs.max_val:item()
    local G = flow.nn.Graph:subclass('QATStep')
    function G:__init(model, o) flow.nn.Graph.__init(self); self.model = model; self:add_optimizer(o) end
    function G:build(a, b) local l = F.cross_entropy(self.model(a), b); l:backward(); return l end
    local g = G(p, opt)
    local last
    for _ = 1, 4 do last = g(x, y):item() end
    assert.is_true(last < first, 'the loss goes down')
    assert.are_not.equal(before, obs.max_val:item(), 'the graph updates the observers')
    p:eval()
    p:apply(Qz.disable_observer)
    local q = Qz.convert(p)
    assert.are.equal('QuantizedConvReLU2d', q[2].__name)
    -- the int8 conv computes, within one output step, the float conv of the
    -- quantized input and weights
    local xin = q[1](x)
    local ref = F.relu(F.conv2d(xin:dequantize(), q[2]:weight():dequantize(), q[2]:bias(), 1, 1))
    local d = (q[2](xin):dequantize() - ref):abs():max():item()
    assert.is_true(d <= q[2].scale * 1.01, 'int8 conv vs float: ' .. d)
    -- and the whole model what the fake-quantized one simulated, up to the
    -- saturation that differs: fake quantization clamps at quant_max (127
    -- with reduce_range), int8 kernels at the dtype's 255 (as PyTorch's)
    local pd = (q(x) - p(x)):abs():max():item()
    local px = p(x):abs():max():item()
    assert.is_true(pd <= 0.2 * px, ('int8 vs fake-quant: %g of %g'):format(pd, px))
  end)
end)
