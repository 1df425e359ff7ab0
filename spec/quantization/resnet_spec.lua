-- flowvision.models.quantization: the quantizable ResNets (torchvision's
-- torchvision.models.quantization API): float parity with models.resnet*,
-- fuse_model, post-training quantization end to end (also in nn.Graph, as
-- a saved graph, and that graph run by the C host without Lua), the
-- quantize = true builder, bad input, and the int8 ResNet-18 against
-- torchvision's quantized one on the same weights.
local flow = require 'oneflow'
local ffi = require 'ffi'
local H = require 'spec.helpers'
local R = require 'spec.quantization.torch_ref'
local vision = require 'flowvision'

local nn, Qz = flow.nn, flow.quantization
local models = vision.models
local q = models.quantization

-- a CIFAR-style stem (3x3 stride 1, no max pooling) at 1 input channel:
-- what examples/quantization/resnet.lua trains on Fashion-MNIST
local function small(m, cin)
  m.conv1 = nn.Conv2d(cin or 1, 64, 3, {padding = 1, bias = false})
  m.maxpool = nn.Identity()
  return m
end

-- BatchNorm statistics that are not the identity, so folding matters
local function randomise_bn(m)
  flow.no_grad(function()
    for _, mod in m:named_modules() do
      if getmetatable(mod) and mod.running_var ~= nil and mod.running_mean ~= nil then
        local c = mod.running_mean:numel()
        mod.running_mean:copy_(flow.randn(c) * 0.1)
        mod.running_var:copy_(flow.rand(c) + 0.5)
        mod.weight:copy_(flow.rand(c) + 0.5)
        mod.bias:copy_(flow.randn(c) * 0.1)
      end
    end
  end)
end

-- the small-stem float model, eval mode, BatchNorm statistics randomised
local function float_model(name, seed)
  flow.manual_seed(seed)
  local m = small(q[name]({num_classes = 10}))
  randomise_bn(m)
  m:eval()
  return m
end

local function ptq(m, batches)
  m:eval()
  m:fuse_model()
  m.qconfig = Qz.get_default_qconfig('x86')
  local p = Qz.prepare(m)
  Qz.calibrate(p, batches)
  return Qz.convert(p)
end

describe('flowvision.models.quantization', function()
  it('resnet18/34/50: the float model is models.resnet*: same keys, same outputs', function()
    for _, name in ipairs({'resnet18', 'resnet50'}) do
      flow.manual_seed(1)
      local ref = models[name]({num_classes = 7})
      randomise_bn(ref)
      ref:eval()
      local m = q[name]({num_classes = 7})
      m:load_state_dict(ref:state_dict())   -- strict: the same names and shapes
      m:eval()
      local x = flow.randn(2, 3, 64, 64)
      H.close(m(x), ref(x), 1e-5, name)
    end
    local keys = {}
    for k in pairs(q.resnet34():state_dict()) do keys[#keys + 1] = k end
    local want = {}
    for k in pairs(models.resnet34():state_dict()) do want[#want + 1] = k end
    table.sort(keys); table.sort(want)
    assert.are.same(want, keys)
  end)

  it('fuse_model folds every Conv+BN(+ReLU) with the float outputs kept', function()
    for _, name in ipairs({'resnet18', 'resnet50'}) do
      local m = float_model(name, 2)
      local x = flow.randn(3, 1, 28, 28)
      local before = m(x)
      m:fuse_model()
      for _, mod in m:named_modules() do
        assert.is_not.equal('BatchNorm2d', mod.__name, name .. ': a BatchNorm was left')
      end
      H.close(m(x), before, 1e-4, name)
    end
  end)

  it('fuse_model(true) keeps BatchNorm for QAT; prepare_qat trains it, convert folds it', function()
    local m = float_model('resnet18', 2)
    m:train()
    local x = flow.randn(4, 1, 12, 12)
    m:fuse_model(true)
    assert.are.equal('ConvBnReLU2d', m.conv1.__name)
    assert.are.equal('ConvBn2d', m.layer1[1].conv2.__name)
    assert.are.equal('ConvBn2d', m.layer2[1].downsample[1].__name)
    -- min/max ranges (not moving averages), so that the ranges seen in
    -- training and in the eval pass below cover what the int8 model meets
    local FQ = Qz.FakeQuantize
    m.qconfig = Qz.QConfig({
      activation = FQ:with_args({observer = Qz.MinMaxObserver, reduce_range = true}),
      weight = FQ:with_args({observer = Qz.PerChannelMinMaxObserver, dtype = flow.qint8,
                             qscheme = 'per_channel_symmetric'})})
    local p = Qz.prepare_qat(m)
    assert.are.equal('QATConvBnReLU2d', p.conv1.__name)
    local rv = p.layer2[1].conv1.bn.running_var:clone()
    local opt = flow.optim.SGD(p:parameters(), {lr = 0.01})
    local y = flow.randint(1, 11, {4})
    local loss = nn.functional.cross_entropy(p(x), y)
    opt:zero_grad(); loss:backward(); opt:step()
    assert.is_true((p.layer2[1].conv1.bn.running_var - rv):abs():max():item() > 0, 'statistics train')
    p:apply(Qz.nn.qat.freeze_bn_stats)
    p:eval()
    p(x)                                  -- the observers see the frozen, folded weights once
    p:apply(Qz.disable_observer)
    local qm = Qz.convert(p)
    assert.are.equal('QuantizedConvReLU2d', qm.conv1.__name)
    for _, mod in qm:named_modules() do
      assert.is_not.equal('BatchNorm2d', mod.__name, 'a BatchNorm was left')
    end
    local fq, qo = p(x), qm(x)
    local d = (qo - fq):abs():max():item()
    assert.is_true(d <= 0.1 * fq:abs():max():item(), ("int8 vs fake-quantized: %g of %g"):format(d,
      fq:abs():max():item()))
  end)

  it('post-training quantization: int8 ResNets track the float ones, in eager, nn.Graph and a saved graph', function()
    for _, name in ipairs({'resnet18', 'resnet50'}) do
      local m = float_model(name, 3)
      local x = flow.randn(4, 1, 28, 28)
      local ref = m(x)
      local qm = ptq(m, {flow.randn(16, 1, 28, 28), x})
      assert.are.equal('QFunctional', qm.layer1[1].__name == 'QuantizableBasicBlock'
        and qm.layer1[1].add_relu.__name or qm.layer1[1].skip_add_relu.__name)
      local y = qm(x)
      local err = (y - ref):abs():max():item() / ref:abs():max():item()
      assert.is_true(err < 0.1, ('%s: int8 off by %.3f of the output range'):format(name, err))
      if name == 'resnet18' then
        local G = flow.nn.Graph:subclass('QResNetGraph')
        function G:__init(mm) flow.nn.Graph.__init(self); self.mm = mm end
        function G:build(a) return self.mm(a) end
        local g = G(qm)
        H.close(g(x), y, 0)
        local x2 = flow.randn(4, 1, 28, 28)
        H.close(g(x2), qm(x2), 0)
        local dir = H.tmpdir()
        g:save(dir .. '/qresnet18.ofg')
        local y2 = qm(x2)
        H.close(flow.nn.Graph.load(dir .. '/qresnet18.ofg')(x2), y2, 0)
        -- and from C with no Lua (examples/graph/host.c): the same numbers
        local host = (os.getenv('OF_BUILD_DIR') or 'build') .. '/graph_host'
        local hf = io.open(host)
        if hf then
          hf:close()
          local f = assert(io.open(dir .. '/qresnet18.ofg.check', 'wb'))
          for _, t in ipairs({x2:contiguous(), y2:contiguous()}) do
            f:write(ffi.string(ffi.new('int64_t[1]', t:numel()), 8), ffi.string(t:data_ptr(), t:numel() * 4))
          end
          f:close()
          local p = io.popen(host .. ' ' .. dir .. '/qresnet18.ofg 2>&1; echo "rc=$?"')
          local out = p:read('*a')
          p:close()
          assert.is_truthy(out:find('max difference from the Lua run 0,', 1, true), out)
          assert.is_truthy(out:find('rc=0', 1, true), out)
        end
        H.remove_tmpdirs()
      end
    end
  end)

  it('quantize = true: fused, calibrated on the given batches (or one random batch) and converted', function()
    flow.manual_seed(4)
    local float = models.resnet18({num_classes = 5})
    randomise_bn(float)
    local dir = H.tmpdir()
    flow.save(float:state_dict(), dir .. '/r18.safetensors')
    float:eval()
    local x = flow.rand(2, 3, 64, 64)
    local m = q.resnet18({num_classes = 5, quantize = true, pretrained = dir .. '/r18.safetensors',
                          calibration_data = {flow.rand(8, 3, 64, 64), x}})
    assert.is_true(m.conv1.__name:find('Quantized') ~= nil, m.conv1.__name)
    local ref = float(x)
    local err = (m(x) - ref):abs():max():item() / ref:abs():max():item()
    assert.is_true(err < 0.1, ('int8 off by %.3f of the output range'):format(err))
    -- torchvision's default: one random 224 x 224 batch
    local r = q.resnet18({num_classes = 5, quantize = true})
    assert.are.same({1, 5}, r(flow.rand(1, 3, 64, 64)):size():totable())
    H.remove_tmpdirs()
  end)

  it('bad input: unknown options, empty calibration data, fusing in training mode', function()
    H.raises(function() q.resnet18({bogus = 1}) end, "flowvision.models.quantization.resnet18: unknown option 'bogus'")
    H.raises(function() q.resnet18({quantize = true, calibration_data = {}}) end,
      'calibration_data must be a non-empty list')
    H.raises(function() q.resnet18():fuse_model() end, 'needs eval mode')
    H.raises(function() q.resnet18():fuse_model('yes') end, 'is_qat must be a boolean or nil')
    H.raises(function() q.resnet18({pretrained = '/nonexistent/w.safetensors'}) end, 'not found')
  end)
end)

describe('the int8 ResNet-18 against torchvision.models.quantization', function()
  it('same weights, qconfig and calibration: the same scales, outputs within a few steps', function()
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    if os.execute('/usr/bin/python3 -c "import torchvision" >/dev/null 2>&1') ~= 0 then
      pending('torchvision not installed for /usr/bin/python3')
      return
    end
    local m = float_model('resnet18', 5)
    local dir = H.tmpdir()
    flow.save_torch(m:state_dict(), dir .. '/w.pt')
    local cal, x = flow.randn(16, 1, 28, 28), flow.randn(4, 1, 28, 28)
    flow.save_torch({cal = cal, x = x}, dir .. '/data.pt')
    m:fuse_model()
    m.qconfig = Qz.QConfig({
      activation = Qz.MinMaxObserver:with_args({dtype = flow.quint8}),
      weight = Qz.PerChannelMinMaxObserver:with_args({dtype = flow.qint8, qscheme = 'per_channel_symmetric'})})
    local p = Qz.prepare(m)
    Qz.calibrate(p, {cal})
    local qm = Qz.convert(p)
    local y = qm(x)
    local t = R.run(([==[
import torch, torch.nn as nn
import torch.ao.quantization as tq
import torchvision.models.quantization as qv
torch.backends.quantized.engine = 'qnnpack' if 'fbgemm' not in torch.backends.quantized.supported_engines else 'fbgemm'
def out(k, t):
    print(k, ' '.join(repr(float(v)) for v in torch.as_tensor(t).flatten().tolist()))
m = qv.resnet18(num_classes=10)
m.conv1 = nn.Conv2d(1, 64, 3, 1, 1, bias=False); m.maxpool = nn.Identity()
m.load_state_dict(torch.load('%s/w.pt')); m.eval()
d = torch.load('%s/data.pt')
m.fuse_model()
m.qconfig = tq.QConfig(activation=tq.MinMaxObserver.with_args(dtype=torch.quint8),
    weight=tq.PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric))
p = tq.prepare(m)
with torch.no_grad():
    p(d['cal'])
    qm = tq.convert(p)
    out('s1', qm.layer1[0].add_relu.scale); out('s4', qm.layer4[1].add_relu.scale)
    out('fc', qm.fc.scale)
    out('y', qm(d['x']))
print('done')
]==]):format(dir, dir))
    H.close({qm.layer1[1].add_relu.scale}, t.s1, 1e-6, 'layer1.0 add scale')
    H.close({qm.layer4[2].add_relu.scale}, t.s4, 1e-6, 'layer4.1 add scale')
    H.close({qm.fc.scale}, t.fc, 1e-6, 'fc scale')
    -- 20 layers of integer arithmetic: where the two requantisations round
    -- a tie differently (PyTorch dequantizes with an FMA, the conv scales
    -- fold in another order) an output moves one step, and such steps add
    -- up by the logits: measured 0-2 steps, at most 4 (40 logits)
    local steps = (y - flow.tensor(t.y):view(4, 10)):abs() / qm.fc.scale
    assert.is_true(steps:max():item() <= 6.01, ('int8 logits differ by %.1f steps'):format(steps:max():item()))
    assert.is_true(steps:mean():item() <= 2, ('int8 logits differ by %.2f steps on average'):format(
      steps:mean():item()))
    H.remove_tmpdirs()
  end)
end)
