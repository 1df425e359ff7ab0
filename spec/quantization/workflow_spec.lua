-- flow.quantization against float references and against
-- torch.ao.quantization (Debian's python3-torch): observers' qparams, the
-- PTQ pipeline's scales and outputs, dynamic quantization; bad input.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local R = require 'spec.quantization.torch_ref'

local nn, Qz = flow.nn, flow.quantization

local Net = nn.Module:subclass('QNet')
function Net:__init()
  nn.Module.__init(self)
  self.quant = Qz.QuantStub()
  self.conv1 = nn.Conv2d(2, 6, 3, {padding = 1})
  self.bn1 = nn.BatchNorm2d(6)
  self.relu1 = nn.ReLU()
  self.pool = nn.MaxPool2d(2)
  self.conv2 = nn.Conv2d(6, 4, 3, {stride = 2})
  self.fc = nn.Linear(4 * 1 * 1 * 4, 5)
  self.skip = Qz.FloatFunctional()
  self.dequant = Qz.DeQuantStub()
end
function Net:forward(x)
  x = self.pool(self.relu1(self.bn1(self.conv1(self.quant(x)))))
  local y = self.conv2(x)
  y = self.skip:add(y, y)
  return self.dequant(self.fc(y:flatten(2)))
end

local function make_net()
  flow.manual_seed(7)
  local m = Net()
  flow.no_grad(function()
    m.bn1.running_mean:copy_(flow.randn(6) * 0.1)
    m.bn1.running_var:copy_(flow.rand(6) + 0.5)
    m.bn1.weight:copy_(flow.rand(6) + 0.5)
    m.bn1.bias:copy_(flow.randn(6) * 0.1)
  end)
  m:eval()
  return m
end

local minmax_qconfig = Qz.QConfig({
  activation = Qz.MinMaxObserver:with_args({dtype = flow.quint8}),
  weight = Qz.PerChannelMinMaxObserver:with_args({dtype = flow.qint8, qscheme = 'per_channel_symmetric'})})

local function ptq(m, batches, qconfig)
  local f = Qz.fuse_modules(m, {{'conv1', 'bn1', 'relu1'}})
  f.qconfig = qconfig or minmax_qconfig
  local p = Qz.prepare(f)
  Qz.calibrate(p, batches)
  return Qz.convert(p), p, f
end

describe('post-training static quantization', function()
  it('fuses Conv+BN+ReLU with the same float outputs', function()
    local m = make_net()
    local x = flow.randn(3, 2, 10, 10)
    local f = Qz.fuse_modules(m, {{'conv1', 'bn1', 'relu1'}})
    H.close(f(x), m(x), 1e-5)
    assert.are.equal('ConvReLU2d', f.conv1.__name)
    assert.are.equal('Identity', f.bn1.__name)
    -- the original is untouched (not inplace)
    assert.are.equal('BatchNorm2d', m.bn1.__name)
  end)

  it('int8 model tracks the float model within a few quantization steps', function()
    local m = make_net()
    flow.manual_seed(1)
    local batches = {}
    for i = 1, 4 do batches[i] = flow.randn(8, 2, 10, 10) end
    local q = ptq(m, batches)
    local x = batches[1]
    local ref, y = m(x), q(x)
    local step = q.fc.scale
    assert.is_true((y - ref):abs():max():item() < 4 * step + 0.02 * ref:abs():max():item())
    assert.are.equal('QuantizedConvReLU2d', q.conv1.__name)
    assert.are.equal('QuantizedLinear', q.fc.__name)
    assert.are.equal('QFunctional', q.skip.__name)
    assert.are.equal(flow.qint8, q.conv1:weight().dtype)
    assert.are.equal('per_channel_affine', q.conv1:weight():qscheme())
  end)

  it('state dict round trip through safetensors; mismatched scales are refused', function()
    local m = make_net()
    local x = flow.randn(4, 2, 10, 10)
    local q, p = ptq(m, {x})
    local dir = H.tmpdir()
    flow.save(q:state_dict(), dir .. '/q.safetensors')
    local sd = flow.load(dir .. '/q.safetensors')
    local q2 = Qz.convert(p)
    q2.conv1._weight = nil
    q2 = Qz.convert(p)
    q2:load_state_dict(sd)
    H.close(q2(x), q(x), 0)
    -- a wrong per-channel scale count, a negative scale, a float weight
    local bad = flow.load(dir .. '/q.safetensors')
    local w = bad['conv1.weight']
    bad['conv1.weight'] = flow.quantize_per_channel(w:dequantize():narrow(1, 1, 3),
      flow.tensor({0.1, 0.1, 0.1}), flow.tensor({0, 0, 0}), 1, flow.qint8)
    H.raises(function() q2:load_state_dict(bad) end, 'size mismatch for conv1.weight')
    bad = flow.load(dir .. '/q.safetensors')
    bad['fc.scale'] = flow.tensor(-1.0, {dtype = flow.float64})
    H.raises(function() q2:load_state_dict(bad) end, 'fc.scale = -1 is not a positive finite number')
    bad = flow.load(dir .. '/q.safetensors')
    bad['fc.weight'] = bad['fc.weight']:dequantize()
    H.raises(function() q2:load_state_dict(bad) end, 'fc.weight must be a quantized tensor')
    bad = flow.load(dir .. '/q.safetensors')
    bad['quant.zero_point'] = flow.tensor(999)
    H.raises(function() q2:load_state_dict(bad) end, 'quant.zero_point = 999 is not an integer in [0, 255]')
    H.remove_tmpdirs()
  end)

  it('the int8 model runs in nn.Graph and as a saved graph, equal to eager', function()
    local m = make_net()
    local x = flow.randn(4, 2, 10, 10)
    local q = ptq(m, {x})
    local G = flow.nn.Graph:subclass('Int8Graph')
    function G:__init(mm) flow.nn.Graph.__init(self); self.mm = mm end
    function G:build(a) return self.mm(a) end
    local g = G(q)
    local x2 = flow.randn(4, 2, 10, 10)
    H.close(g(x), q(x), 0)
    H.close(g(x2), q(x2), 0)   -- replayed: quantized_conv2d / linear / max_pool2d nodes
    local dir = H.tmpdir()
    g:save(dir .. '/int8.ofg')
    H.close(flow.nn.Graph.load(dir .. '/int8.ofg')(x2), q(x2), 0)
    H.remove_tmpdirs()
  end)

  it('bad input: no calibration batches, unsupported layers, no qconfig', function()
    local m = make_net()
    local f = Qz.fuse_modules(m, {{'conv1', 'bn1', 'relu1'}})
    f.qconfig = minmax_qconfig
    local p = Qz.prepare(f)
    H.raises(function() Qz.calibrate(p, {}) end, 'calibrate: no batches')
    H.raises(function() Qz.convert(p) end, 'convert: quant: the observer has seen no data')
    -- a layer without a quantized version
    local u = make_net()
    u.relu1 = nn.Sigmoid()
    u.qconfig = minmax_qconfig
    H.raises(function() Qz.prepare(u) end, 'prepare: relu1 (Sigmoid) has no quantized version')
    -- ... unless it is kept float
    u.relu1.qconfig = false
    assert.truthy(Qz.prepare(u))
    H.raises(function() Qz.prepare(make_net()) end, 'prepare: no qconfig set')
    H.raises(function() Qz.fuse_modules(make_net(), {{'conv1', 'pool'}}) end,
      'fuse_modules: no fusion for (Conv2d, MaxPool2d)')
    local t = make_net()
    t:train()
    H.raises(function() Qz.fuse_modules(t, {{'conv1', 'bn1'}}) end, 'needs eval mode')
    H.raises(function() Qz.quantize_dynamic(make_net(), {nn.RNN}) end, 'spec[1] must be one of nn.Linear, nn.LSTM')
  end)

  it('quantize_dynamic: int8 Linear weights, float in and out', function()
    flow.manual_seed(5)
    local m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    local d = Qz.quantize_dynamic(m, {nn.Linear}, {dtype = flow.qint8})
    assert.are.equal('DynamicQuantizedLinear', d[1].__name)
    assert.are.equal('Linear', m[1].__name)
    local x = flow.randn(10, 16)
    local ref, y = m(x), d(x)
    assert.are.equal(flow.float32, y.dtype)
    assert.is_true((y - ref):abs():max():item() < 0.05 * ref:abs():max():item())
  end)
end)

describe('against torch.ao.quantization', function()
  it('observers, quantize_per_tensor, PTQ scales and outputs, dynamic Linear', function()
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    local m = make_net()
    flow.manual_seed(2)
    local b1, b2 = flow.randn(6, 2, 10, 10), flow.randn(6, 2, 10, 10) * 1.5 + 0.2
    -- PyTorch 1.13's HistogramObserver truncates the histogram's range to
    -- integers (int(min_val)); data with integral extremes compares the search
    local v = (flow.randn(1000) * 3 + 0.7):clamp(-9, 10)
    v[1], v[2] = -9, 10
    local q, p = ptq(m, {b1, b2})
    local y = q(b1)
    -- our observers on the same data
    local mm = Qz.MinMaxObserver({dtype = flow.quint8})
    mm(v)
    local sym = Qz.MinMaxObserver({dtype = flow.qint8, qscheme = 'per_tensor_symmetric'})
    sym(v)
    local ma = Qz.MovingAverageMinMaxObserver({averaging_constant = 0.1})
    ma(v); ma(v * 2 - 1)
    local pc = Qz.PerChannelMinMaxObserver({dtype = flow.qint8, qscheme = 'per_channel_symmetric'})
    pc(m.conv1.weight)
    local hist = Qz.HistogramObserver({reduce_range = true})
    hist(v)
    local sd = m:state_dict()
    local function w(k) return R.list(sd[k]) end
    local lin = nn.Linear(8, 3)
    local xl = flow.randn(5, 8) * 2
    local dyn = Qz.quantize_dynamic(lin, {nn.Linear})
    local script = ([==[
import torch, torch.nn as nn
import torch.ao.quantization as tq
torch.backends.quantized.engine = 'qnnpack' if 'fbgemm' not in torch.backends.quantized.supported_engines else 'fbgemm'
def T(l, *shape): return torch.tensor(l, dtype=torch.float32).reshape(*shape)
def out(k, t):
    t = torch.as_tensor(t).flatten().tolist()
    print(k, ' '.join(repr(float(x)) for x in t))
v = T(%s, 1000)
def qp(o, k):
    s, z = o.calculate_qparams(); out(k + '_s', s); out(k + '_z', z)
o = tq.MinMaxObserver(dtype=torch.quint8); o(v); qp(o, 'minmax')
o = tq.MinMaxObserver(dtype=torch.qint8, qscheme=torch.per_tensor_symmetric); o(v); qp(o, 'sym')
o = tq.MovingAverageMinMaxObserver(averaging_constant=0.1); o(v); o(v * 2 - 1); qp(o, 'ma')
o = tq.PerChannelMinMaxObserver(dtype=torch.qint8, qscheme=torch.per_channel_symmetric)
o(T(%s, 6, 2, 3, 3)); qp(o, 'pc')
o = tq.HistogramObserver(reduce_range=True); o(v); qp(o, 'hist')
q = torch.quantize_per_tensor(v, 0.0371, 17, torch.quint8); out('qpt', q.int_repr())
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = tq.QuantStub(); self.conv1 = nn.Conv2d(2, 6, 3, padding=1); self.bn1 = nn.BatchNorm2d(6)
        self.relu1 = nn.ReLU(); self.pool = nn.MaxPool2d(2); self.conv2 = nn.Conv2d(6, 4, 3, stride=2)
        self.fc = nn.Linear(16, 5); self.skip = torch.ao.nn.quantized.FloatFunctional(); self.dequant = tq.DeQuantStub()
    def forward(self, x):
        x = self.pool(self.relu1(self.bn1(self.conv1(self.quant(x)))))
        y = self.conv2(x); y = self.skip.add(y, y)
        return self.dequant(self.fc(y.flatten(1)))
m = Net()
sd = {'conv1.weight': T(%s, 6, 2, 3, 3), 'conv1.bias': T(%s, 6), 'bn1.weight': T(%s, 6), 'bn1.bias': T(%s, 6),
      'bn1.running_mean': T(%s, 6), 'bn1.running_var': T(%s, 6), 'conv2.weight': T(%s, 4, 6, 3, 3),
      'conv2.bias': T(%s, 4), 'fc.weight': T(%s, 5, 16), 'fc.bias': T(%s, 5)}
m.load_state_dict(sd, strict=False); m.eval()
f = tq.fuse_modules(m, [['conv1', 'bn1', 'relu1']])
f.qconfig = tq.QConfig(activation=tq.MinMaxObserver.with_args(dtype=torch.quint8),
    weight=tq.PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric))
p = tq.prepare(f)
b1, b2 = T(%s, 6, 2, 10, 10), T(%s, 6, 2, 10, 10)
with torch.no_grad():
    p(b1); p(b2)
    qm = tq.convert(p)
    for k in ['conv1', 'conv2', 'fc', 'skip']:
        mod = getattr(qm, k); out(k + '_scale', mod.scale); out(k + '_zp', mod.zero_point)
    out('quant_scale', qm.quant.scale); out('quant_zp', qm.quant.zero_point)
    out('y', qm(b1))
    out('w1', qm.conv1.weight().int_repr())
    lin = nn.Linear(8, 3); lin.load_state_dict({'weight': T(%s, 3, 8), 'bias': T(%s, 3)})
    d = tq.quantize_dynamic(nn.Sequential(lin), {nn.Linear}, dtype=torch.qint8)
    out('dyn', d(T(%s, 5, 8)))
print('done')
]==]):format(R.list(v), w('conv1.weight'), w('conv1.weight'), w('conv1.bias'), w('bn1.weight'), w('bn1.bias'),
           w('bn1.running_mean'), w('bn1.running_var'), w('conv2.weight'), w('conv2.bias'), w('fc.weight'),
           w('fc.bias'), R.list(b1), R.list(b2), R.list(lin.weight), R.list(lin.bias), R.list(xl))
    local t = R.run(script)
    local function same_qp(name, o)
      local s, z = o:calculate_qparams()
      H.close(flow.is_tensor(s) and s or {s}, t[name .. '_s'], 1e-7, name .. ' scale')
      H.close(flow.is_tensor(z) and z or {z}, t[name .. '_z'], 0, name .. ' zero point')
    end
    same_qp('minmax', mm)
    same_qp('sym', sym)
    same_qp('ma', ma)
    same_qp('pc', pc)
    same_qp('hist', hist)
    H.close(flow.quantize_per_tensor(v, 0.0371, 17, flow.quint8):int_repr(), t.qpt, 0, 'quantize_per_tensor')
    -- the PTQ model: the same scales and zero points, weights, outputs within one step
    for _, k in ipairs({'conv1', 'conv2', 'fc', 'skip'}) do
      H.close({q[k].scale}, t[k .. '_scale'], 1e-6, k .. ' scale')
      H.close({q[k].zero_point}, t[k .. '_zp'], 0, k .. ' zero point')
    end
    H.close({q.quant.scale}, t.quant_scale, 1e-6)
    H.close({q.quant.zero_point}, t.quant_zp, 0)
    H.close(q.conv1:weight():int_repr(), t.w1, 0, 'conv1 int8 weight')
    local ty = flow.tensor(t.y):view(y:size():totable())
    assert.is_true((y - ty):abs():max():item() <= q.fc.scale * 1.01, 'output within one step of PyTorch')
    local td = flow.tensor(t.dyn):view(5, 3)
    H.close(dyn(xl), td, 0.02, 'dynamic Linear')
    local _ = p
  end)
end)

describe("torch.ao.quantization's named defaults and one-call forms", function()
  it('default observers and fake quantizers give torch.ao.quantization qparams', function()
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    flow.manual_seed(12)
    -- integral extremes: PyTorch 1.13's HistogramObserver truncates its range to integers
    local v = (flow.randn(500) * 2 + 0.3):clamp(-7, 8)
    v[1], v[2] = -7, 8
    local w = flow.randn(4, 3, 3) * 0.2
    local got = {}
    local function run(name, o, x)
      o(x)
      local s, z = o:calculate_qparams()
      got[name] = {s, z}
      return o
    end
    run('obs', Qz.default_observer(), v)
    run('hist', Qz.default_histogram_observer(), v)
    run('wobs', Qz.default_weight_observer(), w)
    run('pcw', Qz.default_per_channel_weight_observer(), w)
    local fq = run('fq', Qz.default_fake_quant(), v)
    local wfq = run('wfq', Qz.default_weight_fake_quant(), w)
    local pcfq = run('pcfq', Qz.default_per_channel_weight_fake_quant(), w)
    local fq_out = fq(v)
    local t = R.run(([==[
import torch
import torch.ao.quantization as tq
def T(l, *shape): return torch.tensor(l, dtype=torch.float32).reshape(*shape)
def out(k, t): print(k, ' '.join(repr(float(x)) for x in torch.as_tensor(t).flatten().tolist()))
v, w = T(%s, 500), T(%s, 4, 3, 3)
for name, ctor, x in [('obs', tq.default_observer, v), ('hist', tq.default_histogram_observer, v),
                      ('wobs', tq.default_weight_observer, w), ('pcw', tq.default_per_channel_weight_observer, w),
                      ('fq', tq.default_fake_quant, v), ('wfq', tq.default_weight_fake_quant, w),
                      ('pcfq', tq.default_per_channel_weight_fake_quant, w)]:
    o = ctor(); o(x); s, z = o.calculate_qparams(); out(name + '_s', s); out(name + '_z', z)
    if name == 'fq': out('fq_out', o(v).detach())
    out(name + '_range', [o.quant_min, o.quant_max])
print('done')
]==]):format(R.list(v), R.list(w)))
    for _, name in ipairs({'obs', 'hist', 'wobs', 'pcw', 'fq', 'wfq', 'pcfq'}) do
      local s, z = got[name][1], got[name][2]
      H.close(flow.is_tensor(s) and s or {s}, t[name .. '_s'], 1e-6, name .. ' scale')
      H.close(flow.is_tensor(z) and z or {z}, t[name .. '_z'], 0, name .. ' zero point')
    end
    H.close({fq.quant_min, fq.quant_max}, t.fq_range, 0, 'default_fake_quant range (reduce_range halves 0..255)')
    H.close({wfq.quant_min, wfq.quant_max}, t.wfq_range, 0)
    H.close({pcfq.quant_min, pcfq.quant_max}, t.pcfq_range, 0)
    H.close(fq_out, t.fq_out, 1e-6, 'default_fake_quant output')
  end)

  it('quantize and quantize_qat in one call equal the steps they stand for', function()
    local m = Qz.fuse_modules(make_net(), {{'conv1', 'bn1', 'relu1'}})
    m.qconfig = minmax_qconfig
    flow.manual_seed(4)
    local b1, b2 = flow.randn(4, 2, 10, 10), flow.randn(4, 2, 10, 10)
    local seen = 0
    local function calibrate(model, a, b)
      model(a); model(b)
      seen = seen + 2
    end
    local q1 = Qz.quantize(m, calibrate, {b1, b2})
    assert.are.equal(2, seen)
    assert.is_nil(rawget(m.conv1, 'activation_post_process'), 'the model itself is left as it was')
    local p = Qz.prepare(m)
    p(b1); p(b2)
    local q2 = Qz.convert(p)
    H.close(q1(b1), q2(b1), 0, 'quantize = prepare, run_fn, convert')
    -- quantize_qat: run_fn trains the QAT model; one argument that is not a list passes as is
    local trained = 0
    local qat = Qz.fuse_modules(make_net(), {{'conv1', 'bn1', 'relu1'}})
    qat.qconfig = Qz.get_default_qat_qconfig('x86')
    local q3 = Qz.quantize_qat(qat, function(model, x)
      assert.is_true(model.training)
      assert.are.equal('QATConvReLU2d', model.conv1.__name)
      local opt = flow.optim.SGD(model:parameters(), {lr = 0.01})
      for _ = 1, 2 do
        local loss = model(x):pow(2):mean()
        opt:zero_grad(); loss:backward(); opt:step()
        trained = trained + 1
      end
    end, b1)
    assert.are.equal(2, trained)
    assert.are.equal('QuantizedConvReLU2d', q3.conv1.__name)
    assert.is_false(q3.training)
    H.raises(function() Qz.quantize(m, 'calibrate', {}) end, 'quantize: argument 2 (run_fn) must be a function')
    H.raises(function() Qz.quantize(m, calibrate, {b1, b2}, {mapping = {}}) end, "unknown option 'mapping'")
  end)

  it('QuantWrapper, propagate_qconfig_ and add_quant_dequant make the modules and keys PyTorch makes', function()
    local m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 3)))
    local qc = Qz.get_default_qconfig('x86')
    m.qconfig = qc
    Qz.propagate_qconfig_(m, {['2.0'] = Qz.default_qconfig})
    assert.are.equal(qc, rawget(m[1], 'qconfig'))
    assert.are.equal(Qz.default_qconfig, rawget(m[3][1], 'qconfig'))
    local keyed = nn.Sequential(nn.Linear(2, 2), nn.Conv2d(1, 1, 1))
    Qz.propagate_qconfig_(keyed, {[nn.Conv2d] = qc})
    assert.is_nil(rawget(keyed[1], 'qconfig'))
    assert.are.equal(qc, rawget(keyed[2], 'qconfig'))
    Qz.add_quant_dequant(m)
    assert.are.equal('QuantWrapper', m[1].__name)
    assert.are.equal('QuantWrapper', m[3][1].__name)
    local keys = {}
    for k in pairs(m:state_dict()) do keys[#keys + 1] = k end
    table.sort(keys)
    assert.are.same({'0.module.bias', '0.module.weight', '2.0.module.bias', '2.0.module.weight'}, keys)
    -- the wrapped model quantizes: each Linear between its own Quantize / DeQuantize
    local p = Qz.prepare(m)
    local x = flow.randn(6, 4)
    p(x)
    local q = Qz.convert(p)
    assert.are.equal('Quantize', q[1].quant.__name)
    assert.are.equal('QuantizedLinear', q[1].module.__name)
    local d = (q(x) - m(x)):abs():max():item()
    assert.is_true(d < 0.1 * m(x):abs():max():item(), 'wrapped int8 model tracks the float one: ' .. d)
    H.raises(function() Qz.propagate_qconfig_(m, {['0'] = 'x86'}) end,
      "propagate_qconfig_: qconfig_dict[0] must be a QConfig or false")
    H.raises(function() Qz.QuantWrapper(3) end, 'QuantWrapper')
  end)

  it('a BatchNorm2d nothing was fused into converts to a quantized BatchNorm2d, as nnq.BatchNorm2d', function()
    flow.manual_seed(17)
    local function net()
      local m = nn.Sequential(Qz.QuantStub(), nn.Conv2d(2, 4, 3, {padding = 1}), nn.ReLU(), nn.BatchNorm2d(4),
                              Qz.DeQuantStub())
      flow.no_grad(function()
        m[4].running_mean:copy_(flow.tensor({0.2, -0.1, 0.5, 0.0}))
        m[4].running_var:copy_(flow.tensor({0.7, 1.3, 0.9, 2.0}))
        m[4].weight:copy_(flow.tensor({1.2, 0.8, -0.5, 1.0}))
        m[4].bias:copy_(flow.tensor({0.1, -0.2, 0.3, 0.0}))
      end)
      return m:eval()
    end
    local m = net()
    m.qconfig = minmax_qconfig
    local p = Qz.prepare(m)
    local x = flow.randn(6, 2, 5, 5)
    p(x)
    local q = Qz.convert(p)
    assert.are.equal('QuantizedBatchNorm2d', q[4].__name)
    local y = q(x)
    assert.is_true((y - m(x)):abs():max():item() <= 3 * q[4].scale, 'int8 tracks float')
    -- the state dict: the float BatchNorm's entries plus scale and zero point; it round trips
    local sd = q:state_dict()
    assert.is_truthy(sd['3.running_var'] and sd['3.scale'] and sd['3.zero_point'])
    local m2 = net()
    m2.qconfig = minmax_qconfig
    local p2 = Qz.prepare(m2)
    p2(x * 2)
    local q2 = Qz.convert(p2)
    q2:load_state_dict(sd)
    H.close(q2(x), y, 0, 'after loading')
    local path = os.tmpname()
    flow.onnx.export(q, {x}, path)
    H.close(flow.onnx.load(path)(x), y, 0, 'ONNX: DequantizeLinear, BatchNormalization, QuantizeLinear')
    os.remove(path)
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    local w = m:state_dict()
    -- qnnpack before onednn: where PyTorch has no fbgemm (Debian's 1.13 on an
    -- AVX2-only Zen 3), its onednn conv with full-range (8-bit) activations
    -- saturates the int16 pair sums of AVX2's u8 x s8 multiply (0.38 off
    -- here; with reduce_range it equals qnnpack), while ours sums exactly
    local t = R.run(([==[
import torch, torch.nn as nn
import torch.ao.quantization as tq
torch.backends.quantized.engine = [e for e in ('x86', 'fbgemm', 'qnnpack', 'onednn')
                                   if e in torch.backends.quantized.supported_engines][0]
def T(l, *s): return torch.tensor(l, dtype=torch.float32).reshape(*s)
def out(k, t): print(k, ' '.join(repr(float(v)) for v in torch.as_tensor(t).flatten().tolist()))
m = nn.Sequential(tq.QuantStub(), nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.BatchNorm2d(4), tq.DeQuantStub())
m.load_state_dict({'1.weight': T(%s, 4, 2, 3, 3), '1.bias': T(%s, 4), '3.weight': T(%s, 4), '3.bias': T(%s, 4),
                   '3.running_mean': T(%s, 4), '3.running_var': T(%s, 4)}, strict=False)
m.eval()
m.qconfig = tq.QConfig(activation=tq.MinMaxObserver.with_args(dtype=torch.quint8),
    weight=tq.PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric))
p = tq.prepare(m)
x = T(%s, 6, 2, 5, 5)
with torch.no_grad():
    p(x)
    q = tq.convert(p)
    print('kind', 1 if type(q[3]).__name__ == 'BatchNorm2d' else 0)
    out('s', [q[3].scale, q[3].zero_point])
    out('y', q(x))
print('done')
]==]):format(R.list(w['1.weight']), R.list(w['1.bias']), R.list(w['3.weight']), R.list(w['3.bias']),
             R.list(w['3.running_mean']), R.list(w['3.running_var']), R.list(x)))
    H.close({q[4].scale, q[4].zero_point}, t.s, 1e-6, 'output scale and zero point')
    local d = (y - flow.tensor(t.y):view(6, 4, 5, 5)):abs():max():item()
    assert.is_true(d <= q[4].scale * 1.001, 'vs nnq.BatchNorm2d: ' .. d)
  end)

  it('nn.utils.fuse_conv_bn_weights / fuse_linear_bn_weights give torch.nn.utils.fusion bits', function()
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    flow.manual_seed(6)
    local cw, cb = flow.randn(5, 3, 3, 3), flow.randn(5)
    local lw, lb = flow.randn(5, 7), flow.randn(5)
    local rm, rv, g, beta = flow.randn(5) * 0.3, flow.rand(5) + 0.2, flow.rand(5) + 0.5, flow.randn(5)
    local U = flow.nn.utils
    local fcw, fcb = U.fuse_conv_bn_weights(cw, cb, rm, rv, 1e-5, g, beta)
    local fcw0, fcb0 = U.fuse_conv_bn_weights(cw, nil, rm, rv, 1e-3, nil, nil)
    local flw, flb = U.fuse_linear_bn_weights(lw, lb, rm, rv, 1e-5, g, beta)
    assert.is_true(fcw.requires_grad, 'parameters, as PyTorch returns')
    local t = R.run(([==[
import torch
from torch.nn.utils.fusion import fuse_conv_bn_weights, fuse_linear_bn_weights
def T(l, *shape): return torch.tensor(l, dtype=torch.float32).reshape(*shape)
def out(k, t): print(k, ' '.join(repr(float(x)) for x in t.detach().flatten().tolist()))
cw, cb, lw, lb = T(%s, 5, 3, 3, 3), T(%s, 5), T(%s, 5, 7), T(%s, 5)
rm, rv, g, b = T(%s, 5), T(%s, 5), T(%s, 5), T(%s, 5)
w, bb = fuse_conv_bn_weights(cw, cb, rm, rv, 1e-5, g, b); out('cw', w); out('cb', bb)
w, bb = fuse_conv_bn_weights(cw, None, rm, rv, 1e-3, None, None); out('cw0', w); out('cb0', bb)
w, bb = fuse_linear_bn_weights(lw, lb, rm, rv, 1e-5, g, b); out('lw', w); out('lb', bb)
print('done')
]==]):format(R.list(cw), R.list(cb), R.list(lw), R.list(lb), R.list(rm), R.list(rv), R.list(g), R.list(beta)))
    H.close(fcw, t.cw, 0, 'conv weight'); H.close(fcb, t.cb, 0, 'conv bias')
    H.close(fcw0, t.cw0, 0, 'conv weight, no bias or affine'); H.close(fcb0, t.cb0, 0, 'conv bias, no bias or affine')
    H.close(flw, t.lw, 0, 'linear weight'); H.close(flb, t.lb, 0, 'linear bias')
  end)

  it('quantize_per_tensor_dynamic, list forms and reset_min_max_vals as torch', function()
    flow.manual_seed(13)
    local xs = {flow.randn(50) * 3 + 1, flow.rand(40) * 0.01, flow.randn(3, 7) - 2, flow.zeros(5)}
    local got = {}
    for i, x in ipairs(xs) do
      for _, c in ipairs({{flow.quint8, false}, {flow.quint8, true}, {flow.qint8, false}, {flow.qint8, true}}) do
        local q = flow.quantize_per_tensor_dynamic(x, c[1], c[2])
        got[#got + 1] = {i, q}
      end
    end
    H.raises(function() flow.quantize_per_tensor_dynamic(xs[1], flow.qint32) end,
      'quantize_per_tensor_dynamic: dtype must be flow.quint8 or flow.qint8')
    local nan = flow.tensor({1, 0 / 0})
    H.raises(function() flow.quantize_per_tensor_dynamic(nan, flow.quint8) end, 'NaN')
    -- lists, as torch.quantize_per_tensor / torch.dequantize take them
    local l = flow.quantize_per_tensor({xs[1], xs[2]}, {0.1, 0.01}, {3, 0}, flow.quint8)
    assert.are.equal(2, #l)
    H.close(flow.dequantize(l)[2], l[2]:dequantize(), 0)
    H.raises(function() flow.quantize_per_tensor({xs[1]}, {0.1, 0.2}, {1}, flow.quint8) end,
      'a list of 1 tensors needs as many scales and zero points')
    local o = Qz.MinMaxObserver()
    o(xs[1]); o:reset_min_max_vals(); o(xs[2])
    H.close({o.min_val:item(), o.max_val:item()}, {xs[2]:min():item(), xs[2]:max():item()}, 0, 'reset')
    local pc = Qz.PerChannelMinMaxObserver()
    pc(xs[3]); pc:reset_min_max_vals()
    assert.are.equal(0, pc.min_val:numel())
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    local t = R.run(([==[
import torch
def T(l, *s): return torch.tensor(l, dtype=torch.float32).reshape(*s)
xs = [T(%s, 50), T(%s, 40), T(%s, 3, 7), T(%s, 5)]
cases = [(torch.quint8, False), (torch.quint8, True), (torch.qint8, False), (torch.qint8, True)]
for i, x in enumerate(xs):
    for j, (dt, rr) in enumerate(cases):
        q = torch.quantize_per_tensor_dynamic(x, dt, rr)
        ints = ' '.join(str(int(v)) for v in q.int_repr().flatten())
        print('q%%d_%%d' %% (i, j), q.q_scale(), q.q_zero_point(), ints)
print('done')
]==]):format(R.list(xs[1]), R.list(xs[2]), R.list(xs[3]), R.list(xs[4])))
    for k, e in ipairs(got) do
      local want = t[('q%d_%d'):format(e[1] - 1, (k - 1) % 4)]
      local q = e[2]
      assert.are.equal(want[1], q:q_scale(), 'scale ' .. k)
      assert.are.equal(want[2], q:q_zero_point(), 'zero point ' .. k)
      H.close(q:int_repr():to(flow.float64):view(-1), {unpack(want, 3)}, 0, 'integers ' .. k)
    end
  end)

  it('torch-style names: flow.fake_quantize_*, qschemes, flow.nn.quantized / intrinsic / qat, flow.ao', function()
    local x = flow.tensor({-1.0, 0.26, 3.0})
    H.close(flow.fake_quantize_per_tensor_affine(x, 0.1, 3, 0, 40),
            Qz.fake_quantize_per_tensor_affine(x, 0.1, 3, 0, 40), 0)
    H.close(flow.fake_quantize_per_channel_affine(x:view(3, 1), flow.tensor({0.1, 0.2, 0.5}), flow.zeros(3), 1, -8, 7),
            {{-0.8}, {0.2}, {3.0}}, 1e-6)
    local q = flow.quantize_per_tensor(x, 0.1, 3, flow.quint8)
    assert.are.equal(flow.per_tensor_affine, q:qscheme())
    assert.are.equal(flow.per_channel_affine,
      flow.quantize_per_channel(x:view(3, 1), flow.tensor({0.1, 0.2, 0.5}), flow.zeros(3, {dtype = flow.int64}), 1,
                                flow.qint8):qscheme())
    assert.are.equal(Qz.nn.quantized.Linear, flow.nn.quantized.Linear)
    assert.are.equal(Qz.nn.quantized.dynamic.LSTM, flow.nn.quantized.dynamic.LSTM)
    assert.are.equal(Qz.nn.qat.ConvBn2d, flow.nn.intrinsic.qat.ConvBn2d)
    assert.are.equal(Qz.nn.intrinsic.ConvBnReLU2d, flow.nn.intrinsic.ConvBnReLU2d)
    assert.are.equal(Qz, flow.ao.quantization)
    local fused = Qz.FusedMovingAvgObsFakeQuantize:with_args({quant_min = 0, quant_max = 255, reduce_range = true})()
    local plain = Qz.default_fake_quant()
    H.close(fused(x), plain(x), 0, 'FusedMovingAvgObsFakeQuantize is FakeQuantize with a moving average')
    assert.are.equal(flow.nn.qat.Linear, flow.ao.nn.qat.Linear)
  end)
end)
