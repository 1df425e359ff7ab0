-- quantize_dynamic(model, {nn.LSTM}): the int8 LSTM against its float
-- model, its layouts (batch_first, unbatched, bidirectional, 2 layers,
-- given state), state dict round trip, bad input, and against PyTorch
-- 1.13's torch.ao.quantization.quantize_dynamic LSTM (same weights, same
-- input: the same outputs up to float rounding).
local flow = require 'oneflow'
local H = require 'spec.helpers'
local R = require 'spec.quantization.torch_ref'

local nn, Qz = flow.nn, flow.quantization

local Model = nn.Module:subclass('QLstmNet')
function Model:__init(opts)
  nn.Module.__init(self)
  self.lstm = nn.LSTM(6, 5, opts)
  self.fc = nn.Linear(opts.bidirectional and 10 or 5, 3)
end
function Model:forward(x, hx)
  local y, s = self.lstm(x, hx)
  return self.fc(y), s
end

local function maxdiff(a, b) return (a - b):abs():max():item() end

-- the lines every PyTorch reference script starts with: fbgemm's dynamic
-- kernels (reduce_range; Debian's build has onednn's, which follow them,
-- where qnnpack's do not reduce the range), T(list, shape...), out(key, tensor)
local PY_HEAD = [==[
import torch, torch.nn as nn
import torch.ao.quantization as tq
torch.backends.quantized.engine = [e for e in ('fbgemm', 'x86', 'onednn')
                                   if e in torch.backends.quantized.supported_engines][0]
def T(l, *shape): return torch.tensor(l, dtype=torch.float32).reshape(*shape)
def out(k, t): print(k, ' '.join(repr(float(v)) for v in torch.as_tensor(t).flatten().tolist()))
]==]

-- Python lines filling a dict sd with m's state dict (sorted keys)
local function state_lines(m)
  local sd, names, lines = m:state_dict(), {}, {}
  for k in pairs(sd) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do
    lines[#lines + 1] = ("sd['%s'] = T(%s, %s)"):format(k, R.list(sd[k]), table.concat(sd[k]:size():totable(), ','))
  end
  return table.concat(lines, '\n')
end

describe('quantize_dynamic LSTM', function()
  it('swaps nn.LSTM (and nn.Linear) for the dynamic versions; the float model is kept', function()
    flow.manual_seed(3)
    local m = Model({num_layers = 2})
    local q = Qz.quantize_dynamic(m, {nn.Linear, nn.LSTM}, {dtype = flow.qint8})
    assert.are.equal('DynamicQuantizedLSTM', q.lstm.__name)
    assert.are.equal('DynamicQuantizedLinear', q.fc.__name)
    assert.are.equal('LSTM', m.lstm.__name)
    assert.is_truthy(tostring(q):find('DynamicQuantizedLSTM(6, 5, num_layers=2)', 1, true), tostring(q))
    local w = q.lstm:get_weight()
    assert.are.equal(flow.qint8, w.weight_hh_l1.dtype)
    assert.are.same({20, 6}, w.weight_ih_l0:size():totable())
    -- the int8 weight is the float one rounded per tensor (symmetric)
    local wf = m.lstm.weight_ih_l1
    local s = wf:abs():max():item() / 127.5
    H.close(w.weight_ih_l1:int_repr():to(flow.float32), (wf / s):round():clamp(-128, 127), 1, 'weight')
    -- only LSTM asked for: the Linear stays float
    local only = Qz.quantize_dynamic(m, {nn.LSTM})
    assert.are.equal('Linear', only.fc.__name)
    -- an LSTM given alone is replaced itself
    assert.are.equal('DynamicQuantizedLSTM', Qz.quantize_dynamic(m.lstm, {nn.LSTM}).__name)
  end)

  it('tracks the float LSTM in every layout', function()
    local layouts = {{}, {batch_first = true}, {bidirectional = true}, {num_layers = 2, bias = false}}
    for i, o in ipairs(layouts) do
      flow.manual_seed(11)
      local m = Model(o)
      local q = Qz.quantize_dynamic(m, {nn.LSTM})
      local x = flow.randn(7, 4, 6)
      local y, s = m(x)
      local qy, qs = q(x)
      local what = 'layout ' .. i
      assert.are.same(y:size():totable(), qy:size():totable())
      assert.is_true(maxdiff(y, qy) < 0.03, 'output ' .. what .. ' ' .. maxdiff(y, qy))
      assert.is_true(maxdiff(s[1], qs[1]) < 0.03, 'h_n ' .. what)
      assert.is_true(maxdiff(s[2], qs[2]) < 0.05, 'c_n ' .. what)
      -- a quantized run is not the float run (the weights really are int8)
      assert.is_true(maxdiff(y, qy) > 0)
    end
    -- unbatched input and a given state
    flow.manual_seed(12)
    local lstm = nn.LSTM(6, 5)
    local q = Qz.quantize_dynamic(lstm, {nn.LSTM})
    local x, h0, c0 = flow.randn(4, 6), flow.randn(1, 5) * 0.5, flow.randn(1, 5) * 0.5
    local y, s = lstm(x, {h0, c0})
    local qy, qs = q(x, {h0, c0})
    assert.are.same({4, 5}, qy:size():totable())
    assert.are.same({1, 5}, qs[2]:size():totable())
    assert.is_true(maxdiff(y, qy) < 0.03 and maxdiff(s[2], qs[2]) < 0.05)
  end)

  it('state dict round trip; mismatched entries and bad input are refused', function()
    flow.manual_seed(4)
    local q = Qz.quantize_dynamic(Model({bidirectional = true}), {nn.LSTM})
    local sd = q:state_dict()
    assert.are.equal(flow.qint8, sd['lstm.weight_ih_l0_reverse'].dtype)
    assert.are.equal(flow.float32, sd['lstm.bias_hh_l0'].dtype)
    local path = os.tmpname()
    flow.save(sd, path)
    flow.manual_seed(5)
    local q2 = Qz.quantize_dynamic(Model({bidirectional = true}), {nn.LSTM})
    local x = flow.randn(3, 2, 6)
    assert.is_true(maxdiff(q(x), q2(x)) > 0)
    q2:load_state_dict(flow.load(path))
    os.remove(path)
    H.close(q2(x), q(x), 0, 'after loading')
    local bad = q:state_dict()
    bad['lstm.weight_hh_l0'] = bad['lstm.weight_hh_l0']:dequantize()
    H.raises(function() q2:load_state_dict(bad) end, 'lstm.weight_hh_l0 must be a qint8 per-tensor quantized tensor')
    bad = q:state_dict()
    bad['lstm.weight_hh_l0'] = flow.quantize_per_tensor(flow.randn(20, 4), 0.1, 0, flow.qint8)
    H.raises(function() q2:load_state_dict(bad) end, 'size mismatch for lstm.weight_hh_l0')
    -- bad input: named by the module
    H.raises(function() q.lstm(flow.randn(3, 2, 7)) end, 'expected input with last dim 6')
    local nan = flow.randn(3, 2, 6)
    nan[1][1][1] = 0 / 0
    H.raises(function() q.lstm(nan) end,
             'DynamicQuantizedLSTM: dynamic_quantized_linear: input has NaN or infinite values')
    H.raises(function() Qz.quantize_dynamic(q, {nn.RNN}) end,
      'quantize_dynamic: spec[1] must be one of nn.Linear, nn.LSTM, nn.GRU')
  end)

  it('a PackedSequence: each step\'s active rows quantized alone, as torch.ao.quantization\'s LSTM and GRU',
     function()
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    flow.manual_seed(31)
    local lstm = nn.LSTM(6, 5, {num_layers = 2, bidirectional = true})
    local gru = nn.GRU(6, 4)
    local x = flow.randn(5, 3, 6) * 2                   -- [L, N, in], lengths 5, 3, 2 (unsorted below)
    local lengths = {3, 5, 2}
    local ql = Qz.quantize_dynamic(nn.Sequential(lstm), {nn.LSTM})[1]
    local qg = Qz.quantize_dynamic(nn.Sequential(gru), {nn.GRU})[1]
    local P = nn.utils.rnn
    local pk = P.pack_padded_sequence(x, lengths, {enforce_sorted = false})
    local lo, ls = ql(pk)
    local go, gh = qg(pk)
    local ly = P.pad_packed_sequence(lo)
    local gy = P.pad_packed_sequence(go)
    local t = R.run(PY_HEAD .. ([==[
sd = {}
%s
lstm, gru = nn.LSTM(6, 5, num_layers=2, bidirectional=True), nn.GRU(6, 4)
lstm.load_state_dict({k[2:]: v for k, v in sd.items() if k.startswith('l.')})
gru.load_state_dict({k[2:]: v for k, v in sd.items() if k.startswith('g.')})
ql = tq.quantize_dynamic(nn.Sequential(lstm), {nn.LSTM}, dtype=torch.qint8)[0]
qg = tq.quantize_dynamic(nn.Sequential(gru), {nn.GRU}, dtype=torch.qint8)[0]
P = nn.utils.rnn
pk = P.pack_padded_sequence(T(%s, 5, 3, 6), torch.tensor([3, 5, 2]), enforce_sorted=False)
with torch.no_grad():
    lo, (h, c) = ql(pk)
    go, gh = qg(pk)
    out('ly', P.pad_packed_sequence(lo)[0]); out('h', h); out('c', c)
    out('gy', P.pad_packed_sequence(go)[0]); out('gh', gh)
print('done')
]==]):format(state_lines(nn.Sequential(lstm)):gsub("sd%['0%.", "sd['l.") .. '\n'
               .. state_lines(nn.Sequential(gru)):gsub("sd%['0%.", "sd['g."), R.list(x)))
    local want = flow.tensor(t.ly):view(5, 3, 10)
    assert.is_true(maxdiff(ly, want) < 2e-4, 'LSTM output ' .. maxdiff(ly, want))
    assert.is_true(maxdiff(ls[1], flow.tensor(t.h):view(4, 3, 5)) < 2e-4, 'h_n')
    assert.is_true(maxdiff(ls[2], flow.tensor(t.c):view(4, 3, 5)) < 2e-4, 'c_n')
    assert.is_true(maxdiff(gy, flow.tensor(t.gy):view(5, 3, 4)) < 2e-4, 'GRU output')
    assert.is_true(maxdiff(gh, flow.tensor(t.gh):view(1, 3, 4)) < 2e-4, 'GRU h_n')
  end)

  it('a TransformerEncoderLayer: the feed-forward quantized, MultiheadAttention\'s out_proj kept float, '
     .. 'as torch.ao.quantization', function()
    flow.manual_seed(41)
    local layer = nn.TransformerEncoderLayer(16, 4, {dim_feedforward = 32})
    layer:eval()
    local q = Qz.quantize_dynamic(layer)
    assert.are.equal('NonDynamicallyQuantizableLinear', q.self_attn.out_proj.__name)
    assert.are.equal('DynamicQuantizedLinear', q.linear1.__name)
    local x = flow.randn(5, 2, 16)
    local y = q(x)   -- the attention reads out_proj.weight: it must still be a tensor
    assert.is_true(maxdiff(y, layer(x)) < 0.05)
    layer.qconfig = Qz.get_default_qconfig('x86')
    H.raises(function() Qz.prepare(layer) end, "MultiheadAttention's output projection, which has no quantized")
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    local t = R.run(PY_HEAD .. ([==[
sd = {}
%s
m = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32)
m.load_state_dict(sd); m.eval()
q = tq.quantize_dynamic(m, {nn.Linear}, dtype=torch.qint8)
with torch.no_grad():
    out('y', q(T(%s, 5, 2, 16)))
print('done')
]==]):format(state_lines(layer), R.list(x)))
    local want = flow.tensor(t.y):view(5, 2, 16)
    assert.is_true(maxdiff(y, want) < 2e-4, 'vs PyTorch ' .. maxdiff(y, want))
  end)

  it('matches torch.ao.quantization.quantize_dynamic LSTM (1.13, fbgemm / onednn engine)', function()
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    flow.manual_seed(21)
    local m = nn.LSTM(6, 5, {num_layers = 2, bidirectional = true, batch_first = true})
    local x = flow.randn(3, 7, 6) * 1.5
    local h0, c0 = flow.randn(4, 3, 5) * 0.3, flow.randn(4, 3, 5) * 0.3
    local q = Qz.quantize_dynamic(m, {nn.LSTM})
    local y, s = q(x, {h0, c0})
    local fy = m(x, {h0, c0})
    local script = PY_HEAD .. ([==[
sd = {}
%s
m = nn.LSTM(6, 5, num_layers=2, bidirectional=True, batch_first=True)
m.load_state_dict(sd); m.eval()
q = tq.quantize_dynamic(nn.Sequential(m), {nn.LSTM}, dtype=torch.qint8)[0]
with torch.no_grad():
    y, (h, c) = q(T(%s, 3, 7, 6), (T(%s, 4, 3, 5), T(%s, 4, 3, 5)))
    out('y', y); out('h', h); out('c', c)
    out('w', q.get_weight()['weight_hh_l1_reverse'].int_repr())
print('done')
]==]):format(state_lines(m), R.list(x), R.list(h0), R.list(c0))
    local t = R.run(script)
    -- the same int8 weights (layer 1 reverse, weight_hh) ...
    H.close(q:get_weight().weight_hh_l1_reverse:int_repr(), flow.tensor(t.w):view(20, 5), 0, 'int8 weight')
    -- ... and the same outputs up to float rounding (a quantization step is ~1e-2)
    local ty = flow.tensor(t.y):view(3, 7, 10)
    assert.is_true(maxdiff(y, ty) < 2e-4, 'output vs PyTorch ' .. maxdiff(y, ty))
    assert.is_true(maxdiff(s[1], flow.tensor(t.h):view(4, 3, 5)) < 2e-4, 'h_n vs PyTorch')
    assert.is_true(maxdiff(s[2], flow.tensor(t.c):view(4, 3, 5)) < 2e-4, 'c_n vs PyTorch')
    -- and PyTorch's int8 LSTM is not its float one: the check can tell
    assert.is_true(maxdiff(fy, ty) > 1e-3)
  end)

  it('GRU, the LSTM/GRU/RNN cells and per-channel Linear weights match torch.ao.quantization.quantize_dynamic',
     function()
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    flow.manual_seed(23)
    local M = nn.Module:subclass('DynAll')
    function M:__init()
      nn.Module.__init(self)
      self.gru = nn.GRU(6, 5, {num_layers = 2, bidirectional = true})
      self.lc, self.gc, self.rc = nn.LSTMCell(6, 4), nn.GRUCell(6, 4), nn.RNNCell(6, 4, {nonlinearity = 'relu'})
      self.fc = nn.Linear(6, 3)
    end
    local m = M()
    local x = flow.randn(7, 3, 6) * 1.5
    local h0 = flow.randn(4, 3, 5) * 0.3
    local hc, cc = flow.randn(3, 4) * 0.5, flow.randn(3, 4) * 0.5
    local q = Qz.quantize_dynamic(m, {[nn.Linear] = Qz.per_channel_dynamic_qconfig, nn.GRU, nn.LSTMCell,
                                      nn.GRUCell, nn.RNNCell})
    assert.are.equal('DynamicQuantizedGRU', q.gru.__name)
    assert.are.equal('DynamicQuantizedRNNCell', q.rc.__name)
    assert.are.equal('per_channel_affine', q.fc:weight():qscheme())
    local gy, gh = q.gru(x, h0)
    local lh, lc = q.lc(x[1], {hc, cc})
    local gch, rch = q.gc(x[1], hc), q.rc(x[1], hc)
    local fy = q.fc(x[1])
    local t = R.run(PY_HEAD .. ([==[
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(6, 5, num_layers=2, bidirectional=True)
        self.lc, self.gc, self.rc = nn.LSTMCell(6, 4), nn.GRUCell(6, 4), nn.RNNCell(6, 4, nonlinearity='relu')
        self.fc = nn.Linear(6, 3)
sd = {}
%s
m = M(); m.load_state_dict(sd); m.eval()
q = tq.quantize_dynamic(m, {nn.Linear: tq.per_channel_dynamic_qconfig, nn.GRU: tq.default_dynamic_qconfig,
                            nn.LSTMCell: tq.default_dynamic_qconfig, nn.GRUCell: tq.default_dynamic_qconfig,
                            nn.RNNCell: tq.default_dynamic_qconfig}, dtype=torch.qint8)
x, h0, hc, cc = T(%s, 7, 3, 6), T(%s, 4, 3, 5), T(%s, 3, 4), T(%s, 3, 4)
with torch.no_grad():
    y, h = q.gru(x, h0); out('gy', y); out('gh', h)
    h1, c1 = q.lc(x[0], (hc, cc)); out('lh', h1); out('lc', c1)
    out('gch', q.gc(x[0], hc)); out('rch', q.rc(x[0], hc)); out('fy', q.fc(x[0]))
    out('fw', q.fc.weight().int_repr()); out('fs', q.fc.weight().q_per_channel_scales())
print('done')
]==]):format(state_lines(m), R.list(x), R.list(h0), R.list(hc), R.list(cc)))
    H.close(q.fc:weight():int_repr(), flow.tensor(t.fw):view(3, 6), 0, 'per-channel int8 weight')
    H.close(q.fc:weight():q_per_channel_scales(), t.fs, 1e-6, 'per-channel scales')
    local function near(a, b, what) assert.is_true(maxdiff(a, b) < 2e-4, what .. ' vs PyTorch ' .. maxdiff(a, b)) end
    near(gy, flow.tensor(t.gy):view(7, 3, 10), 'GRU output')
    near(gh, flow.tensor(t.gh):view(4, 3, 5), 'GRU h_n')
    near(lh, flow.tensor(t.lh):view(3, 4), 'LSTMCell h')
    near(lc, flow.tensor(t.lc):view(3, 4), 'LSTMCell c')
    near(gch, flow.tensor(t.gch):view(3, 4), 'GRUCell')
    near(rch, flow.tensor(t.rch):view(3, 4), 'RNNCell')
    near(fy, flow.tensor(t.fy):view(3, 3), 'per-channel Linear')
    assert.is_true(maxdiff(m.gru(x, h0), gy) > 1e-3, 'the int8 GRU is not the float one')
    -- state dicts round trip, per-channel weights included
    local q2 = Qz.quantize_dynamic(M(), {[nn.Linear] = Qz.per_channel_dynamic_qconfig, nn.GRU, nn.LSTMCell,
                                         nn.GRUCell, nn.RNNCell})
    q2:load_state_dict(q:state_dict())
    H.close(q2.gru(x, h0), gy, 0, 'GRU after loading')
    H.close(q2.fc(x[1]), fy, 0, 'per-channel Linear after loading')
    H.close(q2.rc(x[1], hc), rch, 0, 'RNNCell after loading')
  end)

  it('spec by module path, false keeps a module float; bad specs are refused', function()
    local m = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.GRUCell(4, 4)), nn.Linear(4, 2))
    local q = Qz.quantize_dynamic(m, {['1'] = Qz.per_channel_dynamic_qconfig, ['2'] = false, nn.Linear})
    assert.are.equal('DynamicQuantizedLinear', q[1].__name)
    assert.are.equal('Linear', q[3].__name, 'false keeps it float')
    assert.are.equal('per_channel_affine', q[2][1]:weight():qscheme(), 'a path covers what is inside it')
    assert.are.equal('DynamicQuantizedGRUCell', q[2][2].__name, "the path's qconfig over the class list")
    assert.are.equal('per_tensor_affine', q[1]:weight():qscheme())
    H.raises(function() Qz.quantize_dynamic(m, {[nn.Conv2d] = Qz.default_dynamic_qconfig}) end,
      'quantize_dynamic: spec keys must be module paths or one of nn.Linear')
    H.raises(function() Qz.quantize_dynamic(m, {[nn.Linear] = 'x86'}) end, 'must be a QConfig')
    H.raises(function() Qz.quantize_dynamic(m, {['0'] = 1}) end, "spec['0'] must be a QConfig or false")
    H.raises(function() Qz.quantize_dynamic(m, {[nn.Linear] = Qz.QConfig({
      activation = Qz.PlaceholderObserver, weight = Qz.MinMaxObserver})}) end,
      'the qconfig must observe weights as qint8')
  end)
end)
