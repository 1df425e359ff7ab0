-- ONNX export of converted int8 models in QDQ form (oneflow.onnx.quantized,
-- doc/quantization.md): the file's structure, our own importer running it,
-- and onnxruntime (H.onnx_python; pending without it) running it as written
-- (the same integers, exactly) and with its optimisations, which fuse the
-- pattern into QLinearConv / QGemm (within one output step).
local flow = require 'oneflow'
local H = require 'spec.helpers'
local reader = require 'oneflow.onnx.reader'

local nn, Qz = flow.nn, flow.quantization

local Net = nn.Module:subclass('QdqNet')
function Net:__init()
  nn.Module.__init(self)
  self.quant = Qz.QuantStub()
  self.conv1 = nn.Conv2d(1, 8, 3, {padding = 1})
  self.bn1 = nn.BatchNorm2d(8)
  self.relu1 = nn.ReLU()
  self.pool = nn.MaxPool2d(2)
  self.conv2 = nn.Conv2d(8, 8, 3, {padding = 1})
  self.relu2 = nn.ReLU()
  self.skip = Qz.FloatFunctional()
  self.apool = nn.AvgPool2d(2)
  self.fc = nn.Linear(8 * 2 * 2, 10)
  self.dequant = Qz.DeQuantStub()
end
function Net:forward(x)
  x = self.pool(self.relu1(self.bn1(self.conv1(self.quant(x)))))
  x = self.skip:add(self.relu2(self.conv2(x)), x)
  x = self.apool(x)
  return self.dequant(self.fc(x:flatten(2)))
end

local function converted(backend, seed)
  flow.manual_seed(seed)
  local model = Net()
  model:eval()
  local fused = Qz.fuse_modules(model, {{'conv1', 'bn1', 'relu1'}})
  fused.qconfig = Qz.get_default_qconfig(backend)
  local prepared = Qz.prepare(fused)
  local batches = {}
  for i = 1, 4 do batches[i] = flow.randn(16, 1, 8, 8) end
  Qz.calibrate(prepared, batches)
  return Qz.convert(prepared), batches[1]
end

local function count(list, v)
  local n = 0
  for _, e in ipairs(list) do if e == v then n = n + 1 end end
  return n
end

-- onnxruntime's outputs for x, optimisations off then all on, as flat lists,
-- plus the op types of the optimised model
local ORT = [[
import sys, json, struct, numpy as np, onnx, onnxruntime as ort
path, inp = sys.argv[1], sys.argv[2]
d = open(inp, 'rb').read(); n = struct.unpack('<Q', d[:8])[0]; h = json.loads(d[8:8 + n])
b, e = h['input']['data_offsets']
x = np.frombuffer(d[8 + n + b:8 + n + e], dtype=np.float32).reshape(h['input']['shape'])
onnx.checker.check_model(onnx.load(path), full_check=True)
for lvl in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
    so = ort.SessionOptions(); so.graph_optimization_level = lvl; so.log_severity_level = 3
    so.optimized_model_filepath = path + '.opt'
    s = ort.InferenceSession(path, so, providers=['CPUExecutionProvider'])
    y = s.run(None, {s.get_inputs()[0].name: x})[0]
    print(' '.join(repr(float(v)) for v in y.ravel()))
print(' '.join(sorted(set(n.op_type for n in onnx.load(path + '.opt').graph.node))))
]]

describe('onnx export of int8 models (QDQ)', function()
  local dir
  setup(function() dir = H.tmpdir() end)
  teardown(H.remove_tmpdirs)

  -- onnxruntime's three lines for the model at path and input x (ORT above),
  -- nil (the test pending) without onnxruntime
  local function run_ort(path, x)
    local py = H.onnx_python()
    if not py then
      pending('python with onnx and onnxruntime not found (run spec/onnx/setup_onnxruntime.sh)')
      return nil
    end
    flow.save({input = x}, dir .. '/in.safetensors')
    H.write_file(dir .. '/ort.py', ORT)
    local lines = {}
    local p = io.popen(("'%s' %s/ort.py %s %s/in.safetensors 2>&1"):format(py, dir, path, dir))
    for line in p:lines() do lines[#lines + 1] = line end
    p:close()
    assert(#lines == 3, table.concat(lines, '\n'))
    return lines
  end

  for _, backend in ipairs({'x86', 'qnnpack'}) do   -- per-channel and per-tensor int8 weights
    it(backend .. ': writes QuantizeLinear/DequantizeLinear around float ops, int8 weights; '
       .. 'our importer and onnxruntime give the same integers', function()
      local q, x = converted(backend, 3)
      local path = dir .. '/' .. backend .. '.onnx'
      flow.onnx.export(q, {x}, path)
      local y = q(x)
      local m = reader.read(path)
      local ops = reader.op_types(m.graph)
      assert.are.equal(5, count(ops, 'QuantizeLinear'))   -- the input, conv1, conv2, the skip add, fc
      assert.are.equal(1, count(ops, 'Add'))
      assert.are.equal(2, count(ops, 'Conv'))
      assert.are.equal(1, count(ops, 'Gemm'))
      assert.are.equal(1, count(ops, 'MaxPool'))
      local int8 = 0
      for _, init in ipairs(m.graph.initializers) do
        if init.name:find('weight_quantized', 1, true) then
          assert.are.equal(3, init.data_type)   -- INT8
          int8 = int8 + 1
        end
      end
      assert.are.equal(3, int8)
      -- read back by flow.onnx: the same floats, bit for bit
      local back = flow.onnx.load(path)
      assert.are.equal(0, (back(x) - y):abs():max():item())

      local lines = run_ort(path, x)
      if not lines then return end
      local want = y:view(-1):totable()
      local plain, fused = H.numbers(lines[1]), H.numbers(lines[2])
      assert.are.equal(#want, #plain)
      for i = 1, #want do assert.are.equal(flow.tensor(want[i]):float():item(), plain[i]) end
      -- fused integer kernels: within one step of fc's output scale. Only
      -- with x86's reduce_range: without it onnxruntime's AVX2 u8s8 kernels
      -- (vpmaddubsw) saturate 16-bit pair sums, as its docs warn, and the
      -- qnnpack model is off by up to 16 steps there
      assert.is_truthy(lines[3]:find('QLinearConv', 1, true), lines[3])
      if backend == 'x86' then
        local step, off = q.fc.scale, 0
        for i = 1, #want do
          local d = math.abs(fused[i] - want[i])
          assert(d <= step * 1.001, ('output %d: %g vs %g (step %g)'):format(i, fused[i], want[i], step))
          if d > 0 then off = off + 1 end
        end
        assert(off <= #want * 0.05, off .. ' of ' .. #want .. ' outputs off by a step')
      end
    end)
  end

  it('a quantized ResNet-18 (residual add_relu): our importer and onnxruntime within a few steps', function()
    flow.manual_seed(6)
    local m = require('flowvision').models.quantization.resnet18({num_classes = 10})
    m.conv1 = nn.Conv2d(1, 64, 3, {padding = 1, bias = false})
    m.maxpool = nn.Identity()
    m:eval()
    m:fuse_model()
    m.qconfig = Qz.get_default_qconfig('x86')
    local p = Qz.prepare(m)
    local x = flow.randn(4, 1, 28, 28)
    Qz.calibrate(p, {flow.randn(16, 1, 28, 28), x})
    local q = Qz.convert(p)
    local path = dir .. '/qresnet18.onnx'
    flow.onnx.export(q, {x}, path)
    local ops = reader.op_types(reader.read(path).graph)
    assert.are.equal(8, count(ops, 'Add'))   -- one per block
    assert.are.equal(20, count(ops, 'Conv'))
    -- run as written the file computes each conv in float32 (K up to
    -- 4608 products) where the int8 model accumulates exactly: a sum that
    -- lands beside a rounding boundary moves an output a step
    local y = q(x)
    -- (measured: 6 steps at most on these 40 logits)
    local steps = (flow.onnx.load(path)(x) - y):abs() / q.fc.scale
    assert(steps:max():item() <= 12.01, ('our importer: logits off by %.1f steps'):format(steps:max():item()))
    local lines = run_ort(path, x)
    if not lines then return end
    -- as written: float convolutions again (measured: 4 steps at most);
    -- fused into integer kernels (QLinearConv, QLinearAdd), what a
    -- deployment runs: our integers (measured: all equal)
    assert.is_truthy(lines[3]:find('QLinearAdd', 1, true), lines[3])
    local want = y:view(-1):totable()
    for li = 1, 2 do
      local got = H.numbers(lines[li])
      assert.are.equal(#want, #got)
      local worst = 0
      for i = 1, #want do worst = math.max(worst, math.abs(got[i] - want[i]) / q.fc.scale) end
      local bound = li == 1 and 12.01 or 1.01
      assert(worst <= bound, ('onnxruntime (%s): logits off by %.1f steps'):format(li == 1 and 'plain' or 'fused',
        worst))
    end
  end)

  it('QFunctional.add of a quantized tensor and a number: DequantizeLinear, Add, QuantizeLinear', function()
    local N = nn.Module:subclass('QdqAddScalar')
    function N:__init()
      nn.Module.__init(self)
      self.quant, self.add, self.dequant = Qz.QuantStub(), Qz.FloatFunctional(), Qz.DeQuantStub()
    end
    function N:forward(x) return self.dequant(self.add:add(self.quant(x), 0.5)) end
    local m = N()
    m:eval()
    m.qconfig = Qz.get_default_qconfig('x86')
    local p = Qz.prepare(m)
    local x = flow.randn(4, 8)
    Qz.calibrate(p, {x})
    local q = Qz.convert(p)
    local path = dir .. '/add_scalar.onnx'
    flow.onnx.export(q, {x}, path)
    assert.are.equal(1, count(reader.op_types(reader.read(path).graph), 'Add'))
    assert.are.equal(0, (flow.onnx.load(path)(x) - q(x)):abs():max():item())
  end)

  it('a QAT model (fake quantization, BatchNorm kept) exports as QuantizeLinear/Clip/DequantizeLinear pairs',
     function()
    flow.manual_seed(11)
    local m = nn.Sequential(Qz.QuantStub(), nn.Conv2d(1, 4, 3, {padding = 1}), nn.BatchNorm2d(4), nn.ReLU(),
      nn.Flatten(), nn.Linear(4 * 36, 3), Qz.DeQuantStub())
    m:train()
    local f = Qz.fuse_modules_qat(m, {{'1', '2', '3'}})
    f.qconfig = Qz.get_default_qat_qconfig('x86')
    local p = Qz.prepare_qat(f)
    local x = flow.randn(8, 1, 6, 6)
    local opt = flow.optim.SGD(p:parameters(), {lr = 0.05})
    for _ = 1, 3 do
      local l = p(x):pow(2):mean()
      opt:zero_grad(); l:backward(); opt:step()
    end
    p:eval(); p:apply(Qz.disable_observer)
    local y = p(x)
    local path = dir .. '/qat.onnx'
    flow.onnx.export(p, {x}, path)
    local g = reader.read(path).graph
    local ops = reader.op_types(g)
    -- activations (the input, the conv block, the Linear: 7-bit, so a Clip
    -- to 0..127 each) and the two weights (int8, full range: no Clip)
    assert.are.equal(5, count(ops, 'QuantizeLinear'))
    assert.are.equal(5, count(ops, 'DequantizeLinear'))
    assert.are.equal(3, count(ops, 'Clip'))
    assert.are.equal(1, count(ops, 'BatchNormalization'))
    local per_channel = 0
    for _, n in ipairs(g.nodes) do
      if n.op_type == 'QuantizeLinear' and n.attrs.axis then per_channel = per_channel + 1 end
    end
    assert.are.equal(2, per_channel, 'the weights per channel (axis 0)')
    assert.are.equal(0, (flow.onnx.load(path)(x) - y):abs():max():item(), 'our importer: the same values')
    -- fake quantization off: the values pass through, no pair written
    p:apply(Qz.disable_fake_quant)
    flow.onnx.export(p, {x}, dir .. '/qat_off.onnx')
    assert.are.equal(0, count(reader.op_types(reader.read(dir .. '/qat_off.onnx').graph), 'QuantizeLinear'))
    p:apply(Qz.enable_fake_quant)
    local lines = run_ort(path, x)
    if not lines then return end
    -- onnxruntime divides by the scale where fake quantization multiplies by
    -- its reciprocal: a value on a rounding tie may land one step apart
    local want, got = y:view(-1):totable(), H.numbers(lines[1])
    local step = p[6].activation_post_process.scale:item()
    assert.are.equal(#want, #got)
    for i = 1, #want do
      assert(math.abs(got[i] - want[i]) <= step * 1.001, ('output %d: %g vs %g'):format(i, got[i], want[i]))
    end
  end)

  it('dynamically quantized Linear layers: the input\'s 7-bit parameters computed in the graph', function()
    flow.manual_seed(12)
    local m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    local q = Qz.quantize_dynamic(m)
    local x = flow.randn(5, 8) * 3
    local path = dir .. '/dyn.onnx'
    flow.onnx.export(q, {x}, path)
    local ops = reader.op_types(reader.read(path).graph)
    assert.are.equal(2, count(ops, 'QuantizeLinear'))    -- the inputs' (the weights are int8 initializers)
    assert.are.equal(4, count(ops, 'DequantizeLinear'))
    assert.are.equal(2, count(ops, 'ReduceMin'))
    local y = q(x)
    H.close(flow.onnx.load(path)(x), y, 1e-6, 'our importer')
    -- another input: another range, computed by the file (not the example's)
    local x2 = flow.randn(5, 8) * 40
    H.close(flow.onnx.load(path)(x2), q(x2), 1e-5, 'our importer, another range')
    -- float16 weights: a Cast of the float16 initializer
    local q16 = Qz.quantize_dynamic(m, nil, {dtype = flow.float16})
    flow.onnx.export(q16, {x}, dir .. '/dyn16.onnx')
    H.close(flow.onnx.load(dir .. '/dyn16.onnx')(x), q16(x), 0, 'float16 weights')
    local lines = run_ort(path, x)
    if not lines then return end
    -- the same scales and zero points, the same integers: only the float
    -- sums' order differs (4.8e-7 measured, both optimisation levels)
    for i = 1, 2 do
      local got = flow.tensor(H.numbers(lines[i])):view(5, 4)
      assert.is_true((got - y):abs():max():item() <= 1e-5, ('onnxruntime %d: %g'):format(i,
        (got - y):abs():max():item()))
    end
  end)

  it('a 4-bit embedding table exports as Gather of its values with the float16-rounded row parameters', function()
    flow.manual_seed(14)
    local m = nn.Sequential(nn.Embedding(50, 9))
    local q = Qz.quantize_dynamic(m, {[nn.Embedding] = Qz.float_qparams_weight_only_qconfig_4bit})
    local ids = flow.tensor({{1, 50, 7}, {7, 3, 2}}, {dtype = flow.int64})
    local path = dir .. '/emb4.onnx'
    flow.onnx.export(q, {ids}, path)
    local ops = reader.op_types(reader.read(path).graph)
    assert.are.equal(3, count(ops, 'Gather'))   -- the values, the scales, the biases
    H.close(flow.onnx.load(path)(ids), q(ids), 0, 'our importer')
  end)

  it('refuses what has no QDQ form, naming it', function()
    local dyn = Qz.quantize_dynamic(nn.Sequential(nn.LSTM(4, 3)))
    local ok, err = pcall(flow.onnx.export, dyn, {flow.randn(2, 1, 4)}, dir .. '/dyn.onnx')
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find('DynamicQuantizedLSTM: dynamically quantized recurrent modules', 1, true),
                     err)
    local bag = Qz.quantize_dynamic(nn.Sequential(nn.EmbeddingBag(10, 4)),
                                    {[nn.EmbeddingBag] = Qz.float_qparams_weight_only_qconfig})
    ok, err = pcall(flow.onnx.export, bag, {flow.tensor({{1, 2}, {3, 4}}, {dtype = flow.int64})}, dir .. '/bag.onnx')
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find('QuantizedEmbeddingBag: embedding bags have no ONNX form here', 1, true), err)
  end)
end)
