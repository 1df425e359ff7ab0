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
    H.raises(function() q.lstm(nan) end, 'DynamicQuantizedLSTM: input has NaN or infinite values')
    local packed = nn.utils.rnn.pack_padded_sequence(flow.randn(3, 2, 6), {3, 2})
    H.raises(function() q.lstm(packed) end, 'DynamicQuantizedLSTM: a PackedSequence input is not supported')
    H.raises(function() Qz.quantize_dynamic(q, {nn.GRU}) end, 'only nn.Linear and nn.LSTM')
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
    local names, sd = {}, m:state_dict()
    for k in pairs(sd) do names[#names + 1] = k end
    table.sort(names)
    local lines = {}
    for _, k in ipairs(names) do
      lines[#lines + 1] = ("sd['%s'] = T(%s, %s)"):format(k, R.list(sd[k]), table.concat(sd[k]:size():totable(), ','))
    end
    local script = ([==[
import torch, torch.nn as nn
import torch.ao.quantization as tq
# fbgemm's dynamic kernels (reduce_range); Debian's build has onednn's, which
# follow them (qnnpack's do not reduce the range)
torch.backends.quantized.engine = [e for e in ('fbgemm', 'x86', 'onednn')
                                   if e in torch.backends.quantized.supported_engines][0]
def T(l, *shape): return torch.tensor(l, dtype=torch.float32).reshape(*shape)
def out(k, t):
    t = torch.as_tensor(t).flatten().tolist()
    print(k, ' '.join(repr(float(x)) for x in t))
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
]==]):format(table.concat(lines, '\n'), R.list(x), R.list(h0), R.list(c0))
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
end)
