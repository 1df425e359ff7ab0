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

describe('QAT with BatchNorm kept (fuse_modules_qat)', function()
  local function float_model()
    flow.manual_seed(3)
    local m = nn.Sequential(Qz.QuantStub(), nn.Conv2d(2, 4, 3, {padding = 1}), nn.BatchNorm2d(4), nn.ReLU(),
      nn.Flatten(), nn.Linear(4 * 25, 6), nn.BatchNorm1d(6), Qz.DeQuantStub())
    flow.no_grad(function()   -- BatchNorm affine parameters away from 1 and 0
      m[3].weight:copy_(flow.rand(4) + 0.5); m[3].bias:copy_(flow.randn(4) * 0.1)
      m[7].weight:copy_(flow.rand(6) + 0.5); m[7].bias:copy_(flow.randn(6) * 0.1)
    end)
    m:train()
    return m
  end
  local function prepared(m)
    local f = Qz.fuse_modules_qat(m, {{'1', '2', '3'}, {'5', '6'}})
    f.qconfig = Qz.get_default_qat_qconfig('x86')
    return Qz.prepare_qat(f)
  end

  it('keeps BatchNorm, trains its statistics, freezes them, and convert folds it', function()
    local p = prepared(float_model())
    assert.are.equal('QATConvBnReLU2d', p[2].__name)
    assert.are.equal('QATLinearBn1d', p[6].__name)
    assert.are.equal('Identity', p[3].__name)
    flow.manual_seed(4)
    local x, y = flow.randn(8, 2, 5, 5), flow.randint(1, 7, {8})
    local rm0 = p[2].bn.running_mean:clone()
    local opt = flow.optim.SGD(p:parameters(), {lr = 0.1})
    for _ = 1, 2 do
      local l = F.cross_entropy(p(x), y)
      opt:zero_grad(); l:backward(); opt:step()
    end
    assert.is_true((p[2].bn.running_mean - rm0):abs():max():item() > 0, 'training updates the statistics')
    assert.is_true(p[2].bn.weight.grad:abs():max():item() > 0, 'gamma learns')
    -- the same step compiled: BatchNorm's statistics and the observers update in the graph too
    local G = flow.nn.Graph:subclass('QATBnStep')
    function G:__init(model, o) flow.nn.Graph.__init(self); self.model = model; self:add_optimizer(o) end
    function G:build(a, t) local l = F.cross_entropy(self.model(a), t); l:backward(); return l end
    local g = G(p, opt)
    local rm_g = p[2].bn.running_mean:clone()
    local l1, l2 = g(x, y):item(), g(x, y):item()
    assert.is_true(l2 < l1, 'the graph trains')
    assert.is_true((p[2].bn.running_mean - rm_g):abs():max():item() > 0, 'the graph updates the statistics')
    p:apply(Qz.nn.qat.freeze_bn_stats)
    p:train()
    assert.is_false(p[2].bn.training, 'frozen BatchNorm stays in eval mode')
    local rm1 = p[2].bn.running_mean:clone()
    p(x)
    H.close(p[2].bn.running_mean, rm1, 0, 'frozen statistics')
    p[2]:update_bn_stats()
    assert.is_true(p[2].bn.training)
    p[2]:freeze_bn_stats()
    p:eval(); p:apply(Qz.disable_observer)
    local ws, wz = p[2].weight_fake_quant:calculate_qparams()
    local q = Qz.convert(p)
    assert.are.equal('QuantizedConvReLU2d', q[2].__name)
    assert.are.equal('QuantizedLinear', q[6].__name)
    -- the int8 conv's weight is the BatchNorm-folded weight, quantized
    -- with the ranges its fake quantizer learnt in training
    local bn = p[2].bn
    local fw, fb = Qz.fuse_conv_bn_weights(p[2].weight, p[2].bias, bn.running_mean, bn.running_var, bn.eps,
                                           bn.weight, bn.bias)
    local want = flow.quantize_per_channel(fw, ws:to(flow.float64), wz, 1, flow.qint8)
    H.close(q[2]:weight():int_repr(), want:int_repr(), 0, 'folded int8 weight')
    H.close(q[2]:bias(), fb, 1e-6, 'folded bias')
    local fq, qo = p(x), q(x)
    assert.is_true((qo - fq):abs():max():item() <= 4 * q[6].scale, 'int8 vs the fake-quantized model')
  end)

  it('refuses post-training prepare on a module kept for QAT, and mixed modes', function()
    local f = Qz.fuse_modules_qat(float_model(), {{'1', '2', '3'}})
    f.qconfig = Qz.get_default_qconfig('x86')
    H.raises(function() Qz.prepare(f) end, 'prepare: 1 (ConvBnReLU2d)', 'fuse_modules_qat', 'prepare_qat')
    local m = float_model()
    m[3]:eval()
    H.raises(function() Qz.fuse_modules_qat(m, {{'1', '2'}}) end, 'fuse_modules_qat: 1',
             'must both be in training or both in eval mode')
    H.raises(function() Qz.fuse_modules_qat(float_model(), {{'1', '4'}}) end, 'no fusion for (Conv2d, Flatten)')
  end)

  it('trains, freezes and converts as torch.ao.quantization does (same weights and data)', function()
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    local m = float_model()
    local sd = {}
    for k, v in pairs(m:state_dict()) do sd[k] = v:clone() end
    flow.manual_seed(4)
    local x, y = flow.randn(8, 2, 5, 5), flow.randint(1, 7, {8})
    local p = prepared(m)
    local opt = flow.optim.SGD(p:parameters(), {lr = 0.1})
    local losses = {}
    for i = 1, 3 do
      local l = F.cross_entropy(p(x), y)
      losses[i] = l:item()
      opt:zero_grad(); l:backward(); opt:step()
    end
    p:apply(Qz.nn.qat.freeze_bn_stats)
    p:eval(); p:apply(Qz.disable_observer)
    local fq = p(x)
    local q = Qz.convert(p)
    local qo = q(x)
    local t = R.run(([==[
import torch, torch.nn as nn, torch.nn.functional as F
import torch.ao.quantization as Q
import torch.nn.intrinsic.qat as nniqat
torch.backends.quantized.engine = [e for e in ('x86', 'fbgemm', 'onednn')
                                   if e in torch.backends.quantized.supported_engines][0]
m = nn.Sequential(Q.QuantStub(), nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                  nn.Flatten(), nn.Linear(100, 6), nn.BatchNorm1d(6), Q.DeQuantStub())
sd = {'1.weight': (%s, (4, 2, 3, 3)), '1.bias': (%s, (4,)), '2.weight': (%s, (4,)), '2.bias': (%s, (4,)),
      '5.weight': (%s, (6, 100)), '5.bias': (%s, (6,)), '6.weight': (%s, (6,)), '6.bias': (%s, (6,))}
with torch.no_grad():
    for k, (v, s) in sd.items():
        dict(m.named_parameters())[k].copy_(torch.tensor(v, dtype=torch.float32).view(s))
m.train()
f = Q.fuse_modules_qat(m, [['1', '2', '3'], ['5', '6']])
f.qconfig = Q.get_default_qat_qconfig('x86', 0)   # FakeQuantize + observer modules, as ours
p = Q.prepare_qat(f)
x = torch.tensor(%s, dtype=torch.float32).view(8, 2, 5, 5)
y = torch.tensor(%s).long() - 1
opt = torch.optim.SGD(p.parameters(), lr=0.1)
losses = []
for i in range(3):
    l = F.cross_entropy(p(x), y)
    losses.append(l.item())
    opt.zero_grad(); l.backward(); opt.step()
p.apply(nniqat.freeze_bn_stats)
p.eval(); p.apply(Q.disable_observer)
fq = p(x)
q = Q.convert(p)
qo = q(x)
print('losses', ' '.join(repr(v) for v in losses))
print('fq', ' '.join(repr(v) for v in fq.detach().flatten().tolist()))
print('qo', ' '.join(repr(v) for v in qo.flatten().tolist()))
print('rm', ' '.join(repr(v) for v in p[1].bn.running_mean.tolist()))
print('scale', q[1].scale, q[5].scale)
print('done')
]==]):format(R.list(sd['1.weight']), R.list(sd['1.bias']), R.list(sd['2.weight']), R.list(sd['2.bias']),
             R.list(sd['5.weight']), R.list(sd['5.bias']), R.list(sd['6.weight']), R.list(sd['6.bias']),
             R.list(x), R.list(y)))
    H.close(losses, t.losses, 1e-6, 'losses')
    H.close(p[2].bn.running_mean, t.rm, 1e-4, 'running mean')
    H.close({q[2].scale, q[6].scale}, t.scale, 1e-3, 'output scales')
    H.close(fq, t.fq, 1e-5, 'fake-quantized outputs')
    local step = q[6].scale
    local d = (qo - flow.tensor(t.qo):view(8, 6)):abs():max():item()
    assert.is_true(d <= 2 * step + 1e-6, ('int8 outputs differ by %g (step %g)'):format(d, step))
  end)
end)
