-- of_dynamic_quantized_linear, the op behind quantize_dynamic's Linear (and
-- the LSTM / GRU / cells' affine maps): its range, scale and zero point
-- equal the op-by-op chain (observer.lua's choose_qparams, which the
-- workflow spec checks against PyTorch, quantize_per_tensor,
-- quantized_linear) to the bit, in every regime of fbgemm's parameter
-- choice; it runs as one node in nn.Graph, choosing the parameters at each
-- run (it used to be refused there: its range was read with item()), and
-- from a saved graph; and float16 dynamic quantization (float16 weights).
local flow = require 'oneflow'
local H = require 'spec.helpers'
local ffi = require 'ffi'

local core = require 'oneflow._C'
local C = core.C
local O = require 'oneflow.quantization.observer'
local Q = require 'oneflow.quantization.qtensor'
local nn, Qz = flow.nn, flow.quantization

-- the chain the op replaces, from its parts
local function chain(x, w, ws, wz, b, reduce_range)
  local lo, hi = 0, 0
  if x:numel() > 0 then lo, hi = x:min():item(), x:max():item() end
  local s, z = O.choose_qparams(lo, hi, 0, 255, reduce_range)
  local lead = x:size():totable()
  local xq = Q.quantize_per_tensor(x:reshape({-1, lead[#lead]}), s, z, Q.quint8)
  assert(C.of_quantized_linear(xq._int.p, w.p, ws.p, wz and wz.p or nil, b and b.p or nil, s, z, 1, 0,
                               flow.float32.id, 0, core.out1) == 0)
  lead[#lead] = w:size(1)
  return core.wrap(core.out1[0]):reshape(lead)
end

local function op(x, w, ws, wz, b, reduce_range)
  if C.of_dynamic_quantized_linear(x.p, w.p, ws.p, wz and wz.p or nil, b and b.p or nil,
                                   reduce_range and 1 or 0, core.out1) ~= 0 then
    error(ffi.string(C.of_last_error()), 2)
  end
  return core.wrap(core.out1[0])
end

describe('dynamic_quantized_linear', function()
  it('equals range -> choose_qparams -> quantize -> quantized_linear to the bit', function()
    flow.manual_seed(21)
    local cases = {
      {flow.randn(7, 12) * 3},                      -- K a multiple of 4: read in place
      {flow.randn(2, 5, 37)},                       -- 3-D, K = 37: copied and padded
      {flow.rand(64, 300) * 5},                     -- all positive: zero point 0
      {-flow.rand(9, 16) * 2},                      -- all negative: zero point at the top
      {flow.randn(6, 20) * 1e-6},                   -- a scale below 6.1e-5: the range widened
      {flow.rand(6, 20) * 1e-7},                    -- tiny and one-signed
      {flow.zeros(3, 8)},                           -- no range: scale 0.1
      {flow.randn(5, 8):t():contiguous():t()},      -- not contiguous
      {flow.full({4, 8}, 7.25)},
    }
    for i, c in ipairs(cases) do
      local x = c[1]
      local K = x:size(x:dim())
      for _, N in ipairs({1, 17, 64}) do
        local w = flow.randint(-127, 128, {N, K}):to(flow.int8)
        local ws = flow.rand(N) * 0.02 + 0.001
        local b = flow.randn(N)
        for _, rr in ipairs({true, false}) do
          local got, want = op(x, w, ws, nil, b, rr), chain(x, w, ws, nil, b, rr)
          assert.are.same(want:size():totable(), got:size():totable())
          H.close(got, want, 0, ('case %d, N %d, reduce_range %s'):format(i, N, tostring(rr)))
        end
        -- per-tensor scale, zero points given, no bias
        local ws1, wz = flow.tensor({0.01}), flow.tensor({0}, {dtype = flow.int64})
        H.close(op(x, w, ws1, wz, nil, true), chain(x, w, ws1, wz, nil, true), 0, 'case ' .. i)
      end
    end
    -- empty input: an empty result of the right shape
    local w = flow.randint(-127, 128, {3, 4}):to(flow.int8)
    assert.are.same({0, 3}, op(flow.zeros(0, 4), w, flow.rand(3), nil, nil, true):size():totable())
    -- no input features: the bias in every row (a float Linear's answer), also
    -- through the static op's float and 8-bit outputs
    local b = flow.tensor({1.0, -2.0, 3.5})
    local w0, ws0 = flow.zeros(3, 0):to(flow.int8), flow.rand(3)
    H.close(op(flow.zeros(2, 0), w0, ws0, nil, b, true), b:view(1, 3):expand(2, 3), 0)
    H.close(op(flow.zeros(2, 0), w0, ws0, nil, nil, true), flow.zeros(2, 3), 0)
    local xq = flow.zeros(2, 0):to(flow.uint8)
    assert(C.of_quantized_linear(xq.p, w0.p, ws0.p, nil, b.p, 0.1, 0, 0.5, 10, flow.uint8.id, 0, core.out1) == 0)
    H.close(core.wrap(core.out1[0]):to(flow.float32), flow.tensor({{12, 6, 17}, {12, 6, 17}}), 0, 'requantised bias')
  end)

  it('refuses bad input with the op named', function()
    local w = flow.randint(-127, 128, {3, 4}):to(flow.int8)
    local ws = flow.rand(3)
    H.raises(function() op(flow.randn(2, 5), w, ws) end, 'dynamic_quantized_linear: input [2,5] and weight [3,4]')
    H.raises(function() op(flow.randn(2, 4):double(), w, ws) end,
             'dynamic_quantized_linear: input must be float32, got float64')
    H.raises(function() op(flow.randn(2, 4), w:to(flow.float32), ws) end,
             'dynamic_quantized_linear: weight must be int8')
    H.raises(function() op(flow.randn(2, 4), w, flow.rand(2)) end, 'weight scales must be float32 with 1 or 3 values')
    local nan = flow.randn(2, 4)
    nan[2][3] = 0 / 0
    H.raises(function() op(nan, w, ws) end, 'dynamic_quantized_linear: input has NaN or infinite values')
    local inf = flow.randn(2, 4)
    inf[1][1] = 1 / 0
    H.raises(function() op(inf, w, ws) end, 'input has NaN or infinite values')
    -- quant_range: one pass, NaN for both when a NaN is there
    local r = ffi.new('double[2]')
    assert.are.equal(0, C.of_quant_range(flow.tensor({3.0, -2.5, 7.0}).p, r, r + 1))
    assert.are.same({-2.5, 7}, {r[0], r[1]})
    assert.are.equal(0, C.of_quant_range(nan.p, r, r + 1))
    assert.is_true(r[0] ~= r[0] and r[1] ~= r[1])
    assert.are_not.equal(0, C.of_quant_range(flow.tensor({1}, {dtype = flow.int32}).p, r, r + 1))
    assert.is_truthy(ffi.string(C.of_last_error()):find('quant_range: input must be float32, got int32', 1, true))
    -- every instruction set's loop (vectors of 16 and 8 and their tails):
    -- extremes and a NaN in the vector part and in the tail
    local best = flow.backends.cpu.get_cpu_capability()
    for _, isa in ipairs(best == 'DEFAULT' and {'DEFAULT'} or {'DEFAULT', 'AVX2', best}) do
      flow.backends.cpu.set_cpu_capability(isa)
      for _, n in ipairs({7, 37, 1000}) do
        for _, at in ipairs({1, n}) do
          local x = flow.randn(n)
          x[at] = 50
          x[n + 1 - at] = -60
          assert.are.equal(0, C.of_quant_range(x.p, r, r + 1))
          assert.are.same({-60, 50}, {r[0], r[1]}, isa .. ' n=' .. n)
          x[at] = 0 / 0
          assert.are.equal(0, C.of_quant_range(x.p, r, r + 1))
          assert.is_true(r[0] ~= r[0] and r[1] ~= r[1], isa .. ' NaN at ' .. at .. ' of ' .. n)
        end
      end
    end
    flow.backends.cpu.set_cpu_capability(best)
  end)

  it('float16 dynamic quantization: float16 weights, float products, saturation, state dicts', function()
    -- PyTorch's quantize_dynamic(..., dtype=torch.float16) computes x @ fp16(w)^T + b in
    -- float32 (PyTorch 2.15 with fbgemm: within 1.2e-7 of that, measured 2026-12-07;
    -- Debian's 1.13 runs onednn, which has no float16 linear)
    flow.manual_seed(8)
    local m = nn.Sequential(nn.Linear(16, 8), nn.LSTM(8, 5, {batch_first = true}), nn.GRUCell(5, 3))
    local q = Qz.quantize_dynamic(m, {nn.Linear, nn.LSTM, nn.GRUCell}, {dtype = flow.float16})
    assert.is_truthy(tostring(q[1]):find('dtype=float16', 1, true))
    assert.are.equal(flow.float16, q[1]:weight().dtype)
    assert.are.equal(flow.float16, q[2]:get_weight().weight_hh_l0.dtype)
    local x = flow.randn(2, 3, 16)
    local w16 = m[1].weight:detach():half():float()
    H.close(q[1](x), x:matmul(w16:t()) + m[1].bias:detach(), 0, 'x @ fp16(w) + b')
    -- the LSTM and the cell: the float modules with float16-rounded weights
    local ref = m:clone()
    flow.no_grad(function()
      for _, p in ipairs(ref:parameters()) do
        if p:dim() == 2 then p:copy_(p:half():float()) end
      end
    end)
    local y = q[1](x)
    local o = q[2](y)
    H.close(o, ref[2](y), 1e-6, 'LSTM')
    H.close(q[3](o[1]), ref[3](o[1]), 1e-6, 'GRUCell')
    -- beyond float16's range the weights saturate at 65504 (fbgemm's packing), not inf
    local big = nn.Linear(2, 2)
    flow.no_grad(function() big.weight:copy_(flow.tensor({{1e6, 1.0}, {-1e6, 2.0}})) end)
    local qb = Qz.quantize_dynamic(nn.Sequential(big), nil, {dtype = flow.float16})[1]
    H.close(qb(flow.tensor({{1.0, 1.0}})) - big.bias:detach(), flow.tensor({{65505, -65502}}), 0)
    -- state dicts: float16 weights, checked on load
    local q2 = Qz.quantize_dynamic(m:clone(), {nn.Linear, nn.LSTM, nn.GRUCell}, {dtype = flow.float16})
    local sd = q:state_dict()
    assert.are.equal(flow.float16, sd['0.weight'].dtype)
    flow.no_grad(function() q2[1]:weight():zero_() end)
    q2:load_state_dict(sd)
    H.close(q2[1](x), q[1](x), 0)
    sd['0.weight'] = flow.quantize_per_tensor(flow.randn(8, 16), 0.1, 0, flow.qint8)
    H.raises(function() q2:load_state_dict(sd) end, '0.weight must be a float16 tensor')
    H.raises(function() Qz.quantize_dynamic(m, nil, {dtype = flow.bfloat16}) end,
             'dtype must be flow.qint8 (int8 weights) or flow.float16')
  end)

  it('a dynamically quantized model in nn.Graph chooses the range at every run, and saved', function()
    flow.manual_seed(4)
    local m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    local q = Qz.quantize_dynamic(m)
    local G = nn.Graph:subclass('DynQGraph')
    function G:__init(mm) nn.Graph.__init(self); self.mm = mm end
    function G:build(a) return self.mm(a) end
    local g = G(q)
    local x1, x2 = flow.randn(5, 8), flow.randn(5, 8) * 10   -- different ranges, different scales
    H.close(g(x1), q(x1), 0)
    H.close(g(x2), q(x2), 0)
    assert.is_true((q(x2) - m(x2)):abs():max():item() < 0.5, 'close to the float model')
    local dir = H.tmpdir()
    g:save(dir .. '/dyn.ofg')
    local loaded = nn.Graph.load(dir .. '/dyn.ofg')
    H.close(loaded(x2), q(x2), 0)
    H.close(loaded(x1 * 100), q(x1 * 100), 0)
    H.remove_tmpdirs()
    -- reading values while tracing is refused, not baked into the graph
    local R = nn.Graph:subclass('RangeGraph')
    local Qm = require 'oneflow.quantization.modules'
    function R.build(_, a)
      local lo = Qm.dynamic_range('RangeGraph', a)
      return a + lo
    end
    H.raises(function() R()(x1) end, 'data-dependent control flow on tensor values is not supported while tracing')
  end)
end)
