-- Weight-only quantized embeddings (float_qparams_weight_only_qconfig and
-- its _4bit form): quint8 or quint4x2 rows with a float scale and zero point each
-- (per_channel_affine_float_qparams), against PyTorch 1.13's
-- torch.ao.quantization on the same table (the same integers, scales, zero
-- points and lookups), through quantize_dynamic and prepare / convert; the
-- scheme's tensors print, save and load; bad specs and ids are refused.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local R = require 'spec.quantization.torch_ref'

local nn, Qz = flow.nn, flow.quantization

local function ids(t) return flow.tensor(t, {dtype = flow.int64}) end
local function maxdiff(a, b) return (a - b):abs():max():item() end

describe('weight-only quantized embeddings', function()
  it('quantize_dynamic with float_qparams_weight_only_qconfig: quint8 rows, lookups near the float ones', function()
    flow.manual_seed(3)
    local m = nn.Sequential(nn.Embedding(50, 37, {padding_idx = 4}), nn.EmbeddingBag(50, 37, {mode = 'mean'}))
    local spec = {[nn.Embedding] = Qz.float_qparams_weight_only_qconfig,
                  [nn.EmbeddingBag] = Qz.float_qparams_weight_only_qconfig}
    local q = Qz.quantize_dynamic(m, spec)
    assert.are.equal('QuantizedEmbedding', q[1].__name)
    assert.are.equal('QuantizedEmbeddingBag', q[2].__name)
    assert.are.equal('Embedding', m[1].__name)   -- a copy
    local w = q[1]:weight()
    assert.are.equal(flow.per_channel_affine_float_qparams, w:qscheme())
    assert.are.equal(flow.quint8, w.dtype)
    assert.are.equal(flow.float32, w:q_per_channel_zero_points().dtype)
    assert.are.equal(1, w:q_per_channel_axis())
    -- each row spans 0..255 from its min to its max: half a step of error at most
    local step = w:q_per_channel_scales():max():item()
    local i = ids({{1, 2, 3}, {50, 49, 4}})
    assert.is_true(maxdiff(q[1](i), m[1](i)) <= step / 2 + 1e-6)
    assert.are.same({2, 3, 37}, q[1](i):size():totable())
    H.close(q[1](ids({4})), flow.zeros(1, 37), 0)   -- the zero padding row stays zero
    local x, off = ids({2, 3, 5, 6, 5, 4, 3, 10}), ids({1, 5})
    assert.is_true(maxdiff(q[2](x, off), m[2](x, off)) <= step / 2 + 1e-6, 'mean bags')
    -- the table is 4x smaller (plus two floats a row)
    assert.are.equal(50 * 37, w:int_repr():numel())
    assert.are.equal(1, w:element_size())
  end)

  it('the bag modes, padding and per-sample weights equal the float bag on the dequantized table', function()
    flow.manual_seed(5)
    for _, mode in ipairs({'sum', 'mean', 'max'}) do
      local bag = nn.EmbeddingBag(20, 8, {mode = mode, padding_idx = 2, include_last_offset = mode == 'sum'})
      local q = Qz.quantize_dynamic(nn.Sequential(bag), {[nn.EmbeddingBag] = Qz.float_qparams_weight_only_qconfig})[1]
      local ref = nn.EmbeddingBag.from_pretrained(q:weight():dequantize(), {mode = mode, padding_idx = 2,
                                                  include_last_offset = mode == 'sum'})
      local x = ids({3, 2, 7, 20, 2, 1, 9, 9})
      local off = mode == 'sum' and ids({1, 3, 6, 9}) or ids({1, 3, 6})
      H.close(q(x, off), ref(x, off), 1e-6, mode)
      local x2 = ids({{1, 2, 3}, {4, 2, 2}})   -- 2-d input: one bag a row
      if mode ~= 'sum' then H.close(q(x2), ref(x2), 1e-6, mode .. ' 2-d') end
      if mode == 'sum' then
        local psw = flow.rand(8)
        H.close(q(x, off, psw), ref(x, off, psw), 1e-6, 'per_sample_weights')
      end
    end
  end)

  it('matches torch.ao.quantization on the same table: integers, qparams and lookups', function()
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    flow.manual_seed(11)
    local wt = flow.randn(30, 13) * 2
    wt[5]:fill_(0.25)                    -- a constant row: scale 1 (below eps), zero point -0.25
    local emb = nn.Embedding.from_pretrained(wt)
    local bag = nn.EmbeddingBag.from_pretrained(wt, {mode = 'sum'})
    local spec = {[nn.Embedding] = Qz.float_qparams_weight_only_qconfig,
                  [nn.EmbeddingBag] = Qz.float_qparams_weight_only_qconfig}
    local q = Qz.quantize_dynamic(nn.Sequential(emb, bag), spec)
    local x, off = ids({1, 5, 30, 7, 7, 2, 11}), ids({1, 3, 4})
    local t = R.run(([==[
import torch, warnings
warnings.simplefilter('ignore')
import torch.nn as nn
import torch.ao.quantization as tq
def out(k, t): print(k, ' '.join(repr(float(v)) for v in torch.as_tensor(t).flatten().tolist()))
w = torch.tensor(%s, dtype=torch.float32).reshape(30, 13)
m = nn.Sequential(nn.Embedding.from_pretrained(w), nn.EmbeddingBag.from_pretrained(w, mode='sum'))
q = tq.quantize_dynamic(m, {nn.Embedding: tq.float_qparams_weight_only_qconfig,
                            nn.EmbeddingBag: tq.float_qparams_weight_only_qconfig})
qw = q[0].weight()
out('int', qw.int_repr()); out('scale', qw.q_per_channel_scales()); out('zp', qw.q_per_channel_zero_points())
x = torch.tensor(%s) - 1
out('emb', q[0](x)); out('bag', q[1](x, torch.tensor([0, 2, 3])))
print('done')
]==]):format(R.list(wt), R.list(x)))
    local w = q[1]:weight()
    H.close(w:int_repr():to(flow.float32), flow.tensor(t.int):view(30, 13), 0, 'integers')
    H.close(w:q_per_channel_scales(), flow.tensor(t.scale), 0, 'scales')
    H.close(w:q_per_channel_zero_points(), flow.tensor(t.zp), 0, 'zero points')
    -- fbgemm dequantizes with one fused multiply-add, ours in two steps: an ulp apart
    H.close(q[1](x), flow.tensor(t.emb):view(7, 13), 1e-6, 'lookups')
    H.close(q[2](x, off), flow.tensor(t.bag):view(3, 13), 1e-5, 'sum bags')
  end)

  it('4-bit tables (quint4x2) match torch.ao.quantization: packed integers, qparams, lookups', function()
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    flow.manual_seed(12)
    local wt = flow.randn(40, 14) * 3
    wt[9]:fill_(-1.5)                    -- a constant row: scale 1, zero point 1.5
    local qc = Qz.float_qparams_weight_only_qconfig_4bit
    local q = Qz.quantize_dynamic(nn.Sequential(nn.Embedding.from_pretrained(wt),
                                                nn.EmbeddingBag.from_pretrained(wt, {mode = 'sum'})),
                                  {[nn.Embedding] = qc, [nn.EmbeddingBag] = qc})
    local x, off = ids({1, 9, 40, 7, 7, 2, 11, 33}), ids({1, 3, 4})
    local psw = flow.tensor({0.5, -1, 2, 1, 0.25, 3, -0.5, 1.5})
    local t = R.run(([==[
import torch, warnings
warnings.simplefilter('ignore')
import torch.nn as nn
import torch.ao.quantization as tq
def out(k, t): print(k, ' '.join(repr(float(v)) for v in torch.as_tensor(t).flatten().tolist()))
w = torch.tensor(%s, dtype=torch.float32).reshape(40, 14)
qc = tq.float_qparams_weight_only_qconfig_4bit
m = nn.Sequential(nn.Embedding.from_pretrained(w), nn.EmbeddingBag.from_pretrained(w, mode='sum'))
q = tq.quantize_dynamic(m, {nn.Embedding: qc, nn.EmbeddingBag: qc})
qw = q[1].weight()
assert qw.dtype == torch.quint4x2
out('int', qw.int_repr()); out('scale', qw.q_per_channel_scales()); out('zp', qw.q_per_channel_zero_points())
x = torch.tensor(%s) - 1
# PyTorch's 4-bit nn.Embedding runs its 8-bit lookup on the packed rows
# (1.13 and 2.15: [8, 3] for ids [8]); its one-id bags are the lookups
out('emb', q[1](x, torch.arange(len(x)))); out('bag', q[1](x, torch.tensor([0, 2, 3])))
out('wbag', q[1](x, torch.tensor([0, 2, 3]), per_sample_weights=torch.tensor(%s)))
p = torch.quantize_per_channel(w[:3, :5], torch.tensor([0.1, 0.2, 0.3]), torch.tensor([-0.5, 0.0, 7.25]), 0,
                               torch.quint4x2)
out('pint', p.int_repr()); out('pdq', p.dequantize())
t = torch.quantize_per_tensor(w[:2, :7], 0.5, 6, torch.quint4x2)
out('tint', t.int_repr()); out('tdq', t.dequantize())
print('done')
]==]):format(R.list(wt), R.list(x), R.list(psw)))
    local w = q[2]:weight()
    assert.are.equal(flow.quint4x2, w.dtype)
    assert.are.same({40, 14}, w:size():totable())
    -- int_repr: two values a byte, row-major, the first in the low nibble
    H.close(w:int_repr():to(flow.float32), flow.tensor(t.int), 0, 'packed integers')
    H.close(w:q_per_channel_scales(), flow.tensor(t.scale), 0, 'scales')
    H.close(w:q_per_channel_zero_points(), flow.tensor(t.zp), 0, 'zero points')
    -- lookups read float16 scales and biases, as fbgemm's 4-bit rows: the
    -- same numbers; the float32 qparams would be 1e-3 off (the spec sees it)
    H.close(q[1](x), flow.tensor(t.emb):view(8, 14), 1e-6, 'lookups')
    H.close(q[2](x, off), flow.tensor(t.bag):view(3, 14), 1e-5, 'sum bags')
    H.close(q[2](x, off, psw), flow.tensor(t.wbag):view(3, 14), 1e-5, 'weighted bags')
    assert.is_true(maxdiff(q[1](x), w:dequantize():index_select(1, x)) > 1e-4)
    local p = flow.quantize_per_channel(wt:narrow(1, 1, 3):narrow(2, 1, 5), flow.tensor({0.1, 0.2, 0.3}),
                                        flow.tensor({-0.5, 0.0, 7.25}), 1, flow.quint4x2)
    H.close(p:int_repr():to(flow.float32), flow.tensor(t.pint), 0, 'per-channel packed')
    H.close(p:dequantize(), flow.tensor(t.pdq):view(3, 5), 1e-7, 'per-channel values')
    local pt = flow.quantize_per_tensor(wt:narrow(1, 1, 2):narrow(2, 1, 7), 0.5, 6, flow.quint4x2)
    H.close(pt:int_repr():to(flow.float32), flow.tensor(t.tint), 0, 'per-tensor packed (odd count)')
    H.close(pt:dequantize(), flow.tensor(t.tdq):view(2, 7), 0, 'per-tensor values')
  end)

  it('4-bit tables: packed in the module and on disk, odd dims, graphs, and refusals', function()
    flow.manual_seed(13)
    local wt = flow.randn(500, 33)   -- an odd embedding_dim: rows padded to 17 bytes
    local qc = Qz.float_qparams_weight_only_qconfig_4bit
    local m = nn.Sequential(nn.EmbeddingBag.from_pretrained(wt, {mode = 'mean'}))
    local q = Qz.quantize_dynamic(m, {[nn.EmbeddingBag] = qc})
    assert.is_truthy(tostring(q):find('dtype=quint4x2', 1, true), tostring(q))
    assert.are.same({500, 17}, rawget(q[1], '_packed'):size():totable())
    assert.is_nil(rawget(q[1], '_weight'))
    local x, off = ids({3, 500, 1, 42, 42, 7}), ids({1, 4})
    local y = q[1](x, off)
    assert.are.same({2, 33}, y:size():totable())
    -- the bag of the table's values read as the module does (float16 qparams)
    local w = q[1]:weight()
    local s16 = w:q_per_channel_scales():to(flow.float16):to(flow.float32)
    local b16 = (-(w:q_per_channel_zero_points() * w:q_per_channel_scales())):to(flow.float16):to(flow.float32)
    local rows = w._int:to(flow.float32) * s16:view(-1, 1) + b16:view(-1, 1)
    local function bag(a, k) return rows:index_select(1, x:narrow(1, a, k)):mean(1) end
    local want = flow.stack({bag(1, 3), bag(4, 3)})
    H.close(y, want, 1e-6, 'mean bags, odd dim')
    -- within half a step of the float table
    assert.is_true(maxdiff(rows, wt) <= (w:q_per_channel_scales():max():item() / 2) * 1.01 + 1e-3)
    -- the state dict: packed on disk (about 1 / 8 of float32), loads into a fresh model
    local dir = H.tmpdir()
    flow.save(m:state_dict(), dir .. '/f32.bin')
    flow.save(q:state_dict(), dir .. '/q4.bin')
    local f32, q4 = #H.read_file(dir .. '/f32.bin'), #H.read_file(dir .. '/q4.bin')
    -- half a byte a value plus a float32 scale and zero point a row, and the header
    assert.is_true(q4 < 500 * (17 + 8) + 2048, ('%d bytes against %d'):format(q4, f32))
    assert.is_true(q4 < f32 / 5)
    local fresh = Qz.quantize_dynamic(nn.Sequential(nn.EmbeddingBag(500, 33, {mode = 'mean'})),
                                      {[nn.EmbeddingBag] = qc})
    fresh:load_state_dict(flow.load(dir .. '/q4.bin'))
    H.close(fresh[1](x, off), y, 0, 'reloaded')
    -- a file whose shape does not fit its packed bytes is refused on load
    local bytes = H.read_file(dir .. '/q4.bin')
    local at = bytes:find('[500,33]', 1, true)
    assert.is_truthy(at)
    H.write_file(dir .. '/bad.bin', bytes:sub(1, at - 1) .. '[500,35]' .. bytes:sub(at + 8))
    H.raises(function() flow.load(dir .. '/bad.bin') end, 'qtensor quint4x2: 8250 bytes for 17500 values')
    local back = flow.load(dir .. '/q4.bin')['0.weight']
    assert.are.equal(flow.quint4x2, back.dtype)
    H.close(back:int_repr():to(flow.float32), w:int_repr():to(flow.float32), 0, 'saved integers')
    -- a quint8 checkpoint does not load into the 4-bit module
    local q8 = Qz.quantize_dynamic(nn.Sequential(nn.EmbeddingBag.from_pretrained(wt, {mode = 'mean'})),
                                   {[nn.EmbeddingBag] = Qz.float_qparams_weight_only_qconfig})
    H.raises(function() fresh:load_state_dict(q8:state_dict()) end, 'is quint8 per_channel_affine_float_qparams, '
             .. 'the module has quint4x2')
    -- a table quantized per tensor is refused
    local per_tensor = flow.quantize_per_tensor(wt, 0.1, 3, flow.quint4x2)
    H.raises(function() Qz.nn.quantized.EmbeddingBag({weight = per_tensor}) end, 'quantized per row')
    -- a 4-bit nn.Embedding (odd dim) in an nn.Graph, equal to eager
    local qe = Qz.quantize_dynamic(nn.Sequential(nn.Embedding.from_pretrained(wt)), {[nn.Embedding] = qc})
    local G = nn.Graph:subclass('Q4Emb')
    function G:__init() nn.Graph.__init(self); self.q = qe end
    function G:build(a) return self.q(a) end
    local xi = ids({{3, 500}, {1, 42}})
    local ye = qe(xi)
    assert.are.same({2, 2, 33}, ye:size():totable())
    H.close(ye:view(4, 33), rows:index_select(1, xi:view(-1)), 1e-6, 'lookups, odd dim')
    H.close(G()(xi), ye, 0, 'graph')
  end)

  it('prepare / convert with the qconfig on the embedding only, and a state dict round trip', function()
    flow.manual_seed(7)
    local Net = nn.Module:subclass('EmbNet')
    function Net:__init()
      nn.Module.__init(self)
      self.emb = nn.Embedding(40, 16)
      self.quant, self.fc, self.dequant = Qz.QuantStub(), nn.Linear(16, 4), Qz.DeQuantStub()
    end
    function Net:forward(i) return self.dequant(self.fc(self.quant(self.emb(i)))) end
    local m = Net()
    m.qconfig = Qz.get_default_qconfig('x86')
    m.emb.qconfig = Qz.float_qparams_weight_only_qconfig
    local p = Qz.prepare(m)
    local batch = flow.randint(1, 41, {8, 5}):to(flow.int64)
    p(batch)
    local c = Qz.convert(p)
    assert.are.equal('QuantizedEmbedding', c.emb.__name)
    assert.are.equal('QuantizedLinear', c.fc.__name)
    assert.is_true(maxdiff(c(batch), m(batch)) < 0.1)
    -- the state dict holds the quint8 table; it loads into another converted model
    local sd = c:state_dict()
    assert.are.equal(flow.quint8, sd['emb.weight'].dtype)
    local dir = H.tmpdir()
    flow.save(sd, dir .. '/q.safetensors')
    local back = flow.load(dir .. '/q.safetensors')
    assert.are.equal(flow.per_channel_affine_float_qparams, back['emb.weight']:qscheme())
    local m2 = Net()
    m2.qconfig = Qz.get_default_qconfig('x86')
    m2.emb.qconfig = Qz.float_qparams_weight_only_qconfig
    local p2 = Qz.prepare(m2)
    p2(batch)
    local c2 = Qz.convert(p2)
    c2:load_state_dict(back)
    H.close(c2(batch), c(batch), 0)
    H.remove_tmpdirs()
    -- the scheme prints by name
    assert.is_truthy(tostring(back['emb.weight']):find('per_channel_affine_float_qparams', 1, true))
  end)

  it('runs in nn.Graph and from a saved graph, equal to eager; a bad id there is index_select\'s error', function()
    flow.manual_seed(2)
    local m = nn.Sequential(nn.Embedding(20, 8), nn.Linear(8, 3))
    local q = Qz.quantize_dynamic(m, {[nn.Embedding] = Qz.float_qparams_weight_only_qconfig,
                                      [nn.Linear] = Qz.default_dynamic_qconfig})
    local G = nn.Graph:subclass('QEmbGraph')
    function G:__init(mm) nn.Graph.__init(self); self.mm = mm end
    function G:build(i) return self.mm(i) end
    local g = G(q)
    local i1, i2 = ids({{1, 2, 3}, {20, 5, 6}}), ids({{7, 7, 19}, {2, 4, 8}})
    H.close(g(i1), q(i1), 0)
    H.close(g(i2), q(i2), 0)
    local dir = H.tmpdir()
    g:save(dir .. '/emb.ofg')
    H.close(nn.Graph.load(dir .. '/emb.ofg')(i2), q(i2), 0)
    H.raises(function() g(ids({{1, 2, 21}, {1, 1, 1}})) end, 'index_select: index 21 out of range')
    H.remove_tmpdirs()
  end)

  it('refuses other qconfigs for embeddings, float-qparams weights for Linear, bad ids and tables', function()
    local m = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 2))
    H.raises(function() Qz.quantize_dynamic(m, {nn.Embedding}) end,
             'nn.Embedding quantization is only supported with float_qparams_weight_only_qconfig')
    H.raises(function() Qz.quantize_dynamic(m, {[nn.EmbeddingBag] = Qz.default_dynamic_qconfig}) end,
             'nn.EmbeddingBag quantization is only supported with float_qparams_weight_only_qconfig')
    H.raises(function() Qz.quantize_dynamic(m, {['0'] = Qz.default_dynamic_qconfig}) end,
             'embeddings are quantized only with float_qparams_weight_only_qconfig')
    H.raises(function() Qz.quantize_dynamic(m, {['1'] = Qz.float_qparams_weight_only_qconfig}) end,
             'must observe weights as qint8')
    H.raises(function() Qz.quantize_dynamic(nn.Sequential(nn.Embedding(10, 4, {max_norm = 1})),
                                            {[nn.Embedding] = Qz.float_qparams_weight_only_qconfig}) end,
             'max_norm')
    local s = Qz.get_default_qconfig('x86')
    m.qconfig = s
    H.raises(function() Qz.prepare(m) end, 'embedding quantization is only supported with float_qparams')
    local q = Qz.quantize_dynamic(m, {[nn.Embedding] = Qz.float_qparams_weight_only_qconfig})[1]
    H.raises(function() q(ids({0, 3})) end, 'QuantizedEmbedding: id 0 is outside 1..10')
    H.raises(function() q(ids({11})) end, 'QuantizedEmbedding: id 11 is outside 1..10')
    H.raises(function() q(flow.tensor({1.0})) end, 'QuantizedEmbedding: input must hold integer ids, got float32')
    H.raises(function() Qz.nn.quantized.Embedding({weight = flow.quantize_per_tensor(flow.randn(3, 2), 0.1, 0,
      flow.quint8)}) end, 'weight must be a 2-d quint8 or quint4x2 tensor quantized per row')
    -- float zero points need quint8; whole ones in range are integer zero points
    H.raises(function() flow.quantize_per_channel(flow.randn(3, 2), flow.ones(3), flow.full({3}, 0.5), 1,
                                                  flow.qint8) end,
             'float zero points (per_channel_affine_float_qparams) need flow.quint8')
    assert.are.equal('per_channel_affine',
                     flow.quantize_per_channel(flow.randn(3, 2), flow.ones(3), flow.zeros(3), 1, flow.qint8):qscheme())
    local fq = flow.quantize_per_channel(flow.randn(3, 2), flow.ones(3), flow.tensor({0.5, 3, -2}), 1, flow.quint8)
    assert.are.equal('per_channel_affine_float_qparams', fq:qscheme())
  end)
end)
