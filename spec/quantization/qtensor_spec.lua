-- Quantized tensors: quantize/dequantize, parameters, printing, saving,
-- refusal by ops without quantized support, and the int8 kernels against
-- float references (every instruction set the CPU has).
local flow = require 'oneflow'
local H = require 'spec.helpers'
local ffi = require 'ffi'

local C = require('oneflow._C').C
local Qz = flow.quantization
local Q = require 'oneflow.quantization.qtensor'

describe('quantized tensors', function()
  it('quantize_per_tensor rounds half to even and saturates', function()
    local x = flow.tensor({-1.0, -0.125, 0.025, 0.075, 0.1, 1.0, 100.0})
    local q = flow.quantize_per_tensor(x, 0.05, 3, flow.quint8)
    -- x / 0.05 = -20, -2.5, 0.5, 1.5, 2, 20, 2000; rint: -20, -2, 0, 2, 2, 20; + 3; clamp [0, 255]
    H.close(q:int_repr(), {0, 1, 3, 5, 5, 23, 255})
    assert.are.equal(flow.quint8, q.dtype)
    assert.are.equal(0.05, q:q_scale())
    assert.are.equal(3, q:q_zero_point())
    assert.are.equal('per_tensor_affine', q:qscheme())
    H.close(q:dequantize(), {-0.15, -0.1, 0, 0.1, 0.1, 1.0, 12.6}, 1e-6)
    local s = flow.quantize_per_tensor(x, 0.05, 0, flow.qint8)
    H.close(s:int_repr(), {-20, -2, 0, 2, 2, 20, 127})
    assert.are.equal(flow.int8, s:int_repr().dtype)
    local i32 = flow.quantize_per_tensor(x, 0.05, 0, flow.qint32)
    H.close(i32:int_repr(), {-20, -2, 0, 2, 2, 20, 2000})
  end)

  it('quantize_per_tensor: the one-pass C kernel equals the tensor-op formula, every instruction set', function()
    -- float32 inputs take of_quantize_per_tensor (one pass: scalar, AVX2 or
    -- AVX-512 by the CPU); float64 the tensor ops (x * inv):round() + zp,
    -- clamp: every kernel must give the same integers
    flow.manual_seed(9)
    local big = flow.randn(3, 70001) * 40   -- > the parallel grain: the threaded loop
    local odd = flow.randn(37) * 50          -- two full vectors and a masked tail
    odd[3], odd[20], odd[37] = 1 / 0, -1 / 0, 1e30
    local cases = {
      {flow.tensor({0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, -128.5, 1e9, -1e9}), 1, 0},
      {flow.randn(5, 7) * 3, 0.0371, 17},
      {(flow.randn(6, 4) * 3):t(), 0.02, 200},         -- not contiguous
      {flow.randn(2, 3, 4, 5):permute(1, 3, 4, 2), 0.05, 128},
      {big, 0.3, 100},
      {odd, 0.7, 60},
      {flow.arange(-40, 40):to(flow.float32) * 0.25 + 0.125, 0.25, 7},   -- every value a tie
      {flow.zeros(0, 3), 0.1, 5},
    }
    local best = flow.backends.cpu.get_cpu_capability()
    finally(function() flow.backends.cpu.set_cpu_capability(best) end)
    local caps = {'DEFAULT'}
    for _, c in ipairs({'AVX2', 'AVX512'}) do
      if c == best or (c == 'AVX2' and best == 'AVX512') then caps[#caps + 1] = c end
    end
    for _, cap in ipairs(caps) do
      flow.backends.cpu.set_cpu_capability(cap)
      for i, c in ipairs(cases) do
        local x, sc, zp = c[1], c[2], c[3]
        for _, dt in ipairs({flow.quint8, flow.qint8}) do
          local z = dt == flow.qint8 and zp - 128 or zp
          local q = flow.quantize_per_tensor(x, sc, z, dt)
          local ref = flow.quantize_per_tensor(x:to(flow.float64), sc, z, dt)
          assert.are.same(x:size():totable(), q:size():totable())
          assert.are.equal(dt.storage, q:int_repr().dtype)
          if x:numel() > 0 then
            local d = (q:int_repr():to(flow.int32) - ref:int_repr():to(flow.int32)):abs():max():item()
            assert.are.equal(0, d, 'case ' .. i .. ' ' .. dt.name .. ' ' .. cap)
          end
        end
      end
      -- NaN quantizes to the zero point in every lane, the tail's too
      local nan = flow.full({19}, 0 / 0)
      nan[2] = 1.0
      local q = flow.quantize_per_tensor(nan, 0.5, 7, flow.quint8):int_repr()
      assert.are.equal(9, q[2]:item(), cap)
      assert.are.equal(7 * 18 + 9, q:to(flow.int32):sum():item(), cap)
    end
    -- ties to even and saturation, spelled out
    H.close(flow.quantize_per_tensor(cases[1][1], 1, 0, flow.qint8):int_repr(),
            {0, 2, 2, 0, -2, -2, 126, 127, -128, 127, -128})
    H.close(flow.quantize_per_tensor(cases[1][1], 1, 3, flow.quint8):int_repr(),
            {3, 5, 5, 3, 1, 1, 129, 131, 0, 255, 0})
    -- NaN quantizes to the zero point (documented), never garbage
    local nan = flow.tensor({0 / 0, 1.0})
    H.close(flow.quantize_per_tensor(nan, 0.5, 7, flow.quint8):int_repr(), {7, 9})
    -- the C entry point checks its own arguments
    local core = require 'oneflow._C'
    assert.are_not.equal(0, C.of_quantize_per_tensor(flow.tensor({1.0}).p, 0, 0, flow.uint8.id, core.out1))
    assert.is_truthy(ffi.string(C.of_last_error()):find('quantize_per_tensor: scale 0 must be positive', 1, true))
    assert.are_not.equal(0, C.of_quantize_per_tensor(flow.tensor({1.0}, {dtype = flow.float64}).p, 1, 0,
                                                     flow.uint8.id, core.out1))
    local msg = ffi.string(C.of_last_error())
    assert.is_truthy(msg:find('quantize_per_tensor: input must be float32, got float64', 1, true), msg)
  end)

  it('quantize_per_channel along a 1-based axis', function()
    local w = flow.tensor({{1.0, -1.0}, {0.5, 0.25}, {-2.0, 3.0}})
    local q = flow.quantize_per_channel(w, flow.tensor({0.1, 0.05, 0.5}, {dtype = flow.float64}),
      flow.tensor({0, 1, -2}), 1, flow.qint8)
    H.close(q:int_repr(), {{10, -10}, {11, 6}, {-6, 4}})
    H.close(q:q_per_channel_scales(), {0.1, 0.05, 0.5})
    H.close(q:q_per_channel_zero_points(), {0, 1, -2})
    assert.are.equal(1, q:q_per_channel_axis())
    H.close(q:dequantize(), {{1, -1}, {0.5, 0.25}, {-2, 3}}, 1e-6)
    local q2 = flow.quantize_per_channel(w, flow.tensor({0.1, 0.2}), flow.tensor({0, 0}), 2, flow.qint8)
    H.close(q2:int_repr(), {{10, -5}, {5, 1}, {-20, 15}})
    H.raises(function() q:q_scale() end, 'per_channel_affine')
    H.raises(function() flow.quantize_per_channel(w, flow.tensor({0.1}), flow.tensor({0}), 1, flow.qint8) end,
      '1 scales and 1 zero points for 3 channels')
    H.raises(function() flow.quantize_per_channel(w, flow.tensor({0.1, 0, 1}), flow.tensor({0, 0, 0}), 1,
      flow.qint8) end, 'positive')
  end)

  it('refuses bad parameters naming the op and argument', function()
    local x = flow.randn(3)
    H.raises(function() flow.quantize_per_tensor(x, 0, 0, flow.quint8) end, 'quantize_per_tensor: scale')
    H.raises(function() flow.quantize_per_tensor(x, 0.1, 300, flow.quint8) end,
      'zero_point must be an integer in [0, 255]')
    H.raises(function() flow.quantize_per_tensor(x, 0.1, 0, flow.float32) end, 'dtype must be flow.qint8')
    H.raises(function() flow.quantize_per_tensor(flow.tensor({1, 2}, {dtype = flow.int64}), 0.1, 0, flow.quint8) end,
      'floating point')
  end)

  it('prints like PyTorch with the parameters', function()
    local q = flow.quantize_per_tensor(flow.tensor({0.1, -0.2}), 0.05, 3, flow.quint8)
    local s = tostring(q)
    assert.truthy(s:find('dtype=oneflow.quint8', 1, true), s)
    assert.truthy(s:find('quantization_scheme=per_tensor_affine, scale=0.05, zero_point=3', 1, true), s)
    assert.truthy(s:find('size=(2)', 1, true), s)
    local c = flow.quantize_per_channel(flow.ones(2, 2), flow.tensor({0.5, 0.25}), flow.tensor({0, 1}), 1,
      flow.qint8)
    assert.truthy(tostring(c):find('per_channel_affine', 1, true))
    assert.truthy(tostring(c):find('axis=1', 1, true))
  end)

  it('views keep per-tensor parameters', function()
    local q = flow.quantize_per_tensor(flow.randn(2, 3, 4), 0.1, 128, flow.quint8)
    local f = q:flatten(2)
    assert.are.same({2, 12}, f:size():totable())
    assert.are.equal(0.1, f:q_scale())
    H.close(f:int_repr(), q:int_repr():flatten(2))
    H.close(flow.flatten(q, 2):int_repr(), q:int_repr():flatten(2))
    H.close(q:reshape(6, 4):dequantize(), q:dequantize():reshape(6, 4))
  end)

  it('ops without quantized support refuse, naming the op', function()
    local q = flow.quantize_per_tensor(flow.randn(2, 3), 0.1, 0, flow.qint8)
    H.raises(function() return q:exp() end, 'exp: quantized tensors (qint8) are not supported')
    H.raises(function() return q + q end, 'add: quantized tensors')
    H.raises(function() return q * 2 end, 'mul: quantized tensors')
    H.raises(function() return flow.nn.functional.conv2d(q, flow.randn(1, 1, 1, 1)) end,
      'conv2d: argument 1 (input) is a quantized tensor (qint8)')
    H.raises(function() return flow.nn.functional.gelu(q) end, 'gelu: argument 1')
    H.raises(function() return flow.nn.Linear(3, 2)(q) end, 'linear: argument 1')
    H.raises(function() return flow.dequantize(flow.randn(2)) end, 'dequantize: expected a quantized tensor')
  end)

  it('functional relu and pooling run on the integers', function()
    local F = flow.nn.functional
    local x = flow.randn(2, 3, 6, 6)
    local q = flow.quantize_per_tensor(x, 0.02, 100, flow.quint8)
    local r = F.relu(q)
    H.close(r:int_repr(), q:int_repr():clamp(100))
    assert.are.equal(100, r:q_zero_point())
    local m = F.max_pool2d(q, 2)
    H.close(m:int_repr(), F.max_pool2d(q:int_repr():to(flow.float32), 2))
    local a = F.avg_pool2d(q, 3)
    H.close(a:dequantize(), F.avg_pool2d(q:dequantize(), 3), 0.0101)
    local ad = F.adaptive_avg_pool2d(q, 1)
    H.close(ad:dequantize(), F.adaptive_avg_pool2d(q:dequantize(), 1), 0.0101)
  end)

  it('saves and loads with its parameters (safetensors)', function()
    local dir = H.tmpdir()
    local q = flow.quantize_per_tensor(flow.randn(3, 4), 0.07, 5, flow.quint8)
    local c = flow.quantize_per_channel(flow.randn(3, 4), flow.tensor({0.1, 0.2, 0.3}), flow.tensor({0, 0, 0}), 1,
      flow.qint8)
    flow.save({a = q, b = c, plain = flow.ones(2)}, dir .. '/q.safetensors')
    local r = flow.load(dir .. '/q.safetensors')
    assert.truthy(flow.is_quantized(r.a))
    assert.are.equal(flow.quint8, r.a.dtype)
    assert.are.equal(0.07, r.a:q_scale())
    assert.are.equal(5, r.a:q_zero_point())
    H.close(r.a:int_repr(), q:int_repr())
    assert.are.equal(flow.qint8, r.b.dtype)
    H.close(r.b:q_per_channel_scales(), {0.1, 0.2, 0.3}, 1e-7)
    H.close(r.b:int_repr(), c:int_repr())
    H.close(r.plain, {1, 1})
    -- a file whose parameters lie is refused before anything is built
    local _, meta = flow.safetensors.load_file(dir .. '/q.safetensors')
    local tensors = flow.safetensors.load_file(dir .. '/q.safetensors')
    local key = 'oneflow.structure'
    local bad = meta[key]:gsub('"scale":0.07', '"scale":-1')
    assert.are_not.equal(bad, meta[key])
    flow.safetensors.save_file(tensors, dir .. '/bad.safetensors', {[key] = bad})
    H.raises(function() flow.load(dir .. '/bad.safetensors') end, 'qtensor scale/zero_point out of range')
    H.remove_tmpdirs()
  end)
end)

------------------------------------------------------------------ kernels
-- float reference of the int8 kernels: integers -> floats, float conv/linear
-- (exact: small integers), then the same requantisation in float32
local function f32(v) return tonumber(ffi.new('float', v)) end
local function fref(acc, xs, ws, bias, os, ozp, relu, lo, hi)
  local n = acc:size(2)
  local s = (ws:to(flow.float32) * f32(xs)):view(1, n, 1, 1)
  if acc:dim() == 2 then s = s:view(1, n) end
  local bb = bias:view(s:size():totable())
  local q = ((acc + bb / s) * (s / f32(os))):round() + ozp
  if relu then q = q:clamp(ozp) end
  return q:clamp(lo, hi)
end

local best = flow.backends.cpu.get_cpu_capability()
local isas = {'DEFAULT'}
-- AVX2 also where the CPU has more: its kernels (pmaddubsw for 7-bit
-- activations) run on AVX2-only CPUs, which the developers' machines may not be
if best ~= 'DEFAULT' then isas[#isas + 1] = 'AVX2' end
if best ~= 'DEFAULT' and best ~= 'AVX2' then isas[#isas + 1] = best end

describe('int8 kernels', function()
  local F = flow.nn.functional
  after_each(function() flow.backends.cpu.set_cpu_capability(best) end)

  -- every kernel: the own ones per instruction set, then oneDNN's where built
  local variants = {}
  for _, isa in ipairs(isas) do variants[#variants + 1] = {isa, 1, isa .. ' (own kernel)'} end
  variants[#variants + 1] = {best, 2, 'oneDNN int8 matmul where built'}
  after_each(function() C.of_quantized_backend(0) end)
  for _, v in ipairs(variants) do
    local isa = v[3]
    it('quantized_linear: exact int32 accumulation, requantisation, relu, ' .. isa, function()
      flow.backends.cpu.set_cpu_capability(v[1])
      C.of_quantized_backend(v[2])
      flow.manual_seed(3)
      -- the 4th entry: 7-bit inputs (one oneDNN matmul instead of two)
      for _, shape in ipairs({{5, 37, 7}, {64, 300, 33}, {1, 16, 1}, {3, 1, 2}, {9, 70, 5, true}}) do
        local M_, K, N = shape[1], shape[2], shape[3]
        local xi = flow.randint(0, shape[4] and 128 or 256, {M_, K}):to(flow.uint8)
        local wi = flow.randint(-128, 128, {N, K}):to(flow.int8)
        local ws = flow.rand(N) * 0.01 + 0.001
        local bias = flow.randn(N)
        local xs, xzp = 0.02, 120
        local acc = (xi:to(flow.float64) - xzp):matmul(wi:to(flow.float64):t())
        for _, relu in ipairs({false, true}) do
          -- float output (dynamic): acc * xs * ws + bias
          local p = ffi.new('of_tensor*[1]')
          assert.are.equal(0, C.of_quantized_linear(xi.p, wi.p, ws.p, nil, bias.p, xs, xzp, 1, 0,
            flow.float32.id, relu and 1 or 0, p))
          local yf = require('oneflow._C').wrap(p[0])
          local want = acc:to(flow.float32) * (ws * f32(xs)):view(1, N) + bias:view(1, N)
          if relu then want = want:clamp(0) end
          H.close(yf, want, 1e-5, 'float out ' .. M_)
          -- quantized output
          local os_, ozp = 0.05, 10
          assert.are.equal(0, C.of_quantized_linear(xi.p, wi.p, ws.p, nil, bias.p, xs, xzp, os_, ozp,
            flow.uint8.id, relu and 1 or 0, p))
          local yq = require('oneflow._C').wrap(p[0])
          local wantq = fref(acc:to(flow.float32), xs, ws, bias, os_, ozp, relu, 0, 255)
          local d = (yq:to(flow.float32) - wantq):abs()
          assert.is_true(d:max():item() <= 1, 'requantised within one step')
          assert.is_true(d:gt(0):sum():item() <= math.max(1, yq:numel() / 100), 'almost all exact')
        end
      end
    end)

    it('quantized_conv2d matches a float conv of the integers, ' .. isa, function()
      flow.backends.cpu.set_cpu_capability(v[1])
      C.of_quantized_backend(v[2])
      flow.manual_seed(4)
      local cases = {
        {x = {2, 4, 9, 8}, w = {6, 4, 3, 3}, stride = {1, 1}, pad = {1, 1}, dil = {1, 1}, g = 1},
        {x = {1, 6, 11, 7}, w = {4, 3, 3, 2}, stride = {2, 1}, pad = {1, 2}, dil = {1, 2}, g = 2},
        {x = {3, 1, 5, 5}, w = {5, 1, 1, 1}, stride = {1, 1}, pad = {0, 0}, dil = {1, 1}, g = 1},
      }
      for ci, c in ipairs(cases) do
        local xi = flow.randint(-128, 128, c.x):to(flow.int8)
        local wi = flow.randint(-128, 128, c.w):to(flow.int8)
        local wz = flow.randint(-3, 4, {c.w[1]})
        local ws = flow.rand(c.w[1]) * 0.01 + 0.001
        local bias = flow.randn(c.w[1])
        local xs, xzp = 0.03, -7
        local acc = F.conv2d(xi:to(flow.float64) - xzp, wi:to(flow.float64) - wz:to(flow.float64):view(-1, 1, 1, 1),
          nil, {stride = c.stride, padding = c.pad, dilation = c.dil, groups = c.g})
        local buf = function(t) return ffi.new('int64_t[2]', t) end
        local p = ffi.new('of_tensor*[1]')
        assert.are.equal(0, C.of_quantized_conv2d(xi.p, wi.p, ws.p, wz.p, bias.p, buf(c.stride), buf(c.pad),
          buf(c.dil), c.g, xs, xzp, 0.04, -5, flow.int8.id, 1, p), ffi.string(C.of_last_error()))
        local y = require('oneflow._C').wrap(p[0])
        assert.are.same(acc:size():totable(), y:size():totable())
        local want = fref(acc:to(flow.float32), xs, ws, bias, 0.04, -5, true, -128, 127)
        local d = (y:to(flow.float32) - want):abs()
        assert.is_true(d:max():item() <= 1, 'case ' .. ci)
        assert.is_true(d:gt(0):sum():item() <= math.max(1, y:numel() / 100), 'case ' .. ci .. ' exact')
      end
    end)
  end

  -- Shapes for the VNNI u8 x s8 kernel (weights minus zero points within
  -- int8): output channels not a multiple of 16 and more than 4 vectors,
  -- positions past a 16-block, input channels not a multiple of 4, groups,
  -- strides, dilation, int8 and uint8 inputs, 1 and 2 threads (samples or
  -- positions over threads; small maps: several samples' rows a gemm).
  -- Where the CPU has no VNNI these run the int16 kernel: the same integers.
  -- uint8 inputs come four ways: full-range bytes with a zero point of 131;
  -- with a zero point of 61, 7-bit bytes (reduce_range's), 7-bit bytes but
  -- for about 1% (AVX2: pmaddubsw in the VNNI kernel's layout, channels-last
  -- results, the excess of the high bytes added), and full-range bytes
  -- (over 1/32 high: the int16 kernel on AVX2).
  for _, isa in ipairs(isas) do
    it('quantized_conv2d / linear with int8-range weights, every layout, ' .. isa, function()
      flow.backends.cpu.set_cpu_capability(isa)
      C.of_quantized_backend(1)
      local threads = flow.get_num_threads()
      flow.manual_seed(5)
      local cases = {
        {x = {3, 5, 11, 13}, w = {70, 5, 3, 3}, stride = {1, 1}, pad = {1, 1}, dil = {1, 1}, g = 1, u8 = true},
        {x = {1, 8, 9, 10}, w = {20, 4, 3, 2}, stride = {2, 1}, pad = {1, 0}, dil = {1, 2}, g = 2, u8 = false},
        {x = {2, 1, 28, 28}, w = {32, 1, 3, 3}, stride = {1, 1}, pad = {1, 1}, dil = {1, 1}, g = 1, u8 = true},
        {x = {1, 3, 6, 6}, w = {16, 3, 1, 1}, stride = {1, 1}, pad = {0, 0}, dil = {1, 1}, g = 1, u8 = true},
        -- small maps, several samples a thread: samples' rows in one gemm
        -- (3 a gemm; then 2 and a last one alone, with groups)
        {x = {6, 16, 5, 5}, w = {20, 16, 3, 3}, stride = {1, 1}, pad = {1, 1}, dil = {1, 1}, g = 1, u8 = true},
        {x = {5, 32, 6, 6}, w = {64, 16, 3, 3}, stride = {2, 2}, pad = {1, 1}, dil = {1, 1}, g = 2, u8 = false},
        -- 1x1 (a ResNet's downsample): stride 2 with samples grouped,
        -- stride 1 with positions over threads
        {x = {4, 64, 9, 9}, w = {48, 64, 1, 1}, stride = {2, 2}, pad = {0, 0}, dil = {1, 1}, g = 1, u8 = true},
        {x = {1, 16, 10, 12}, w = {32, 16, 1, 1}, stride = {1, 1}, pad = {0, 0}, dil = {1, 1}, g = 1, u8 = true},
      }
      for _, nt in ipairs({1, 2}) do
        flow.set_num_threads(nt)
        for ci, c in ipairs(cases) do for _, kind in ipairs(c.u8 and {'full', 'seven', 'sparse', 'many'} or {'int8'}) do
          local low_zp = kind == 'seven' or kind == 'sparse' or kind == 'many'
          local xi = c.u8 and flow.randint(0, kind == 'seven' and 128 or 256, c.x):to(flow.uint8)
                     or flow.randint(-128, 128, c.x):to(flow.int8)
          if kind == 'sparse' then
            xi = flow.where(flow.rand(unpack(c.x)):lt(0.01), xi, xi % 128)
          end
          local wi = flow.randint(-120, 121, c.w):to(flow.int8)
          local wz = flow.randint(-7, 8, {c.w[1]})
          local ws = flow.rand(c.w[1]) * 0.001 + 0.0005
          local bias = flow.randn(c.w[1])
          local xs, xzp = 0.03, low_zp and 61 or c.u8 and 131 or -9
          local acc = F.conv2d(xi:to(flow.float64) - xzp, wi:to(flow.float64) - wz:to(flow.float64):view(-1, 1, 1, 1),
            nil, {stride = c.stride, padding = c.pad, dilation = c.dil, groups = c.g})
          local buf = function(t) return ffi.new('int64_t[2]', t) end
          local p = ffi.new('of_tensor*[1]')
          assert.are.equal(0, C.of_quantized_conv2d(xi.p, wi.p, ws.p, wz.p, bias.p, buf(c.stride), buf(c.pad),
            buf(c.dil), c.g, xs, xzp, 0.5, 3, flow.uint8.id, 0, p), ffi.string(C.of_last_error()))
          local y = require('oneflow._C').wrap(p[0])
          assert.are.same(acc:size():totable(), y:size():totable())
          local want = fref(acc:to(flow.float32), xs, ws, bias, 0.5, 3, false, 0, 255)
          local d = (y:to(flow.float32) - want):abs()
          assert.is_true(d:max():item() <= 1, 'case ' .. ci .. ', threads ' .. nt)
          assert.is_true(d:gt(0):sum():item() <= math.max(1, y:numel() / 100), 'case ' .. ci .. ' exact')
          if (kind == 'seven' or kind == 'sparse') and isa ~= 'DEFAULT' then
            assert.is_true(y:is_contiguous({memory_format = flow.channels_last}), 'the byte kernel, case ' .. ci)
          end
          -- float32 out: the int32 rows path (8-bit outputs requantise in registers)
          assert.are.equal(0, C.of_quantized_conv2d(xi.p, wi.p, ws.p, wz.p, bias.p, buf(c.stride), buf(c.pad),
            buf(c.dil), c.g, xs, xzp, 1, 0, flow.float32.id, 0, p), ffi.string(C.of_last_error()))
          local sc = (ws * f32(xs)):view(1, -1, 1, 1)
          H.close(require('oneflow._C').wrap(p[0]), acc:to(flow.float32) * sc + bias:view(1, -1, 1, 1), 1e-5,
            'float out, case ' .. ci .. ', threads ' .. nt)
        end end
        for _, shape in ipairs({{8, 37, 33}, {1, 300, 10}, {2, 16, 100}, {33, 64, 17}}) do
          local M_, K, N = shape[1], shape[2], shape[3]
          local wi = flow.randint(-128, 128, {N, K}):to(flow.int8)
          local ws, bias = flow.rand(N) * 0.01 + 0.001, flow.randn(N)
          -- int8 inputs, then uint8 ones with zero point 70: 7-bit, and
          -- 7-bit but for about 1% (AVX2: the byte kernel, the excess added)
          for _, kind in ipairs({'int8', 'seven', 'sparse'}) do
            local u7 = kind ~= 'int8'
            local xi = u7 and flow.randint(0, 128, {M_, K}):to(flow.uint8)
                       or flow.randint(-128, 128, {M_, K}):to(flow.int8)
            if kind == 'sparse' then
              xi = flow.where(flow.rand(M_, K):lt(0.01), xi + 128, xi)
              xi[1][K] = 255   -- at least one
            end
            local xzp = u7 and 70 or -5
            local acc = (xi:to(flow.float64) - xzp):matmul(wi:to(flow.float64):t())
            local p = ffi.new('of_tensor*[1]')
            assert.are.equal(0, C.of_quantized_linear(xi.p, wi.p, ws.p, nil, bias.p, 0.02, xzp, 1, 0,
              flow.float32.id, 0, p))
            local want = acc:to(flow.float32) * (ws * f32(0.02)):view(1, N) + bias:view(1, N)
            H.close(require('oneflow._C').wrap(p[0]), want, 1e-5, 'linear ' .. M_ .. 'x' .. K .. 'x' .. N)
            assert.are.equal(0, C.of_quantized_linear(xi.p, wi.p, ws.p, nil, bias.p, 0.02, xzp, 0.3, -4,
              flow.int8.id, 1, p))
            local yq = require('oneflow._C').wrap(p[0])
            local d = (yq:to(flow.float32) - fref(acc:to(flow.float32), 0.02, ws, bias, 0.3, -4, true, -128, 127)):abs()
            assert.is_true(d:max():item() <= 1 and d:gt(0):sum():item() <= math.max(1, yq:numel() / 100),
              'int8 out, linear ' .. M_ .. 'x' .. K .. 'x' .. N)
          end
        end
      end
      flow.set_num_threads(threads)
    end)
  end

  it('a weight written in place is packed again (the packed-weight cache follows versions)', function()
    flow.backends.cpu.set_cpu_capability(best)
    C.of_quantized_backend(1)
    local xi = flow.randint(0, 256, {2, 3, 5, 5}):to(flow.uint8)
    local wi = flow.randint(-100, 101, {18, 3, 3, 3}):to(flow.int8)
    local ws, p = flow.full({18}, 0.01), ffi.new('of_tensor*[1]')
    local buf = function(t) return ffi.new('int64_t[2]', t) end
    local function run(w)
      assert.are.equal(0, C.of_quantized_conv2d(xi.p, w.p, ws.p, nil, nil, buf{1, 1}, buf{1, 1}, buf{1, 1}, 1,
        0.02, 7, 1, 0, flow.float32.id, 0, p), ffi.string(C.of_last_error()))
      return require('oneflow._C').wrap(p[0])
    end
    local function want(w)
      local y = F.conv2d(xi:to(flow.float64) - 7, w:to(flow.float64), nil, {padding = 1})
      return y:to(flow.float32) * f32(0.02 * 0.01)
    end
    H.close(run(wi), want(wi), 1e-5)
    wi:narrow(1, 4, 2):add_(3)         -- in place, through a view
    H.close(run(wi), want(wi), 1e-5, 'after add_')
    wi:copy_(flow.randint(-100, 101, {18, 3, 3, 3}):to(flow.int8))
    H.close(run(wi), want(wi), 1e-5, 'after copy_')
    local other = flow.randint(-100, 101, {18, 3, 3, 3}):to(flow.int8)
    H.close(run(other), want(other), 1e-5, 'another weight')
  end)

  it('kernels refuse bad input naming the op', function()
    local p = ffi.new('of_tensor*[1]')
    local function err() return ffi.string(C.of_last_error()) end
    local xi, wi, ws = flow.zeros(2, 3, {dtype = flow.uint8}), flow.zeros(4, 3, {dtype = flow.int8}), flow.ones(4)
    assert.are_not.equal(0, C.of_quantized_linear(flow.zeros(2, 3).p, wi.p, ws.p, nil, nil, 1, 0, 1, 0,
      flow.uint8.id, 0, p))
    assert.truthy(err():find('quantized_linear: input must hold uint8 or int8', 1, true))
    assert.are_not.equal(0, C.of_quantized_linear(xi.p, flow.zeros(4, 5, {dtype = flow.int8}).p, ws.p, nil, nil,
      1, 0, 1, 0, flow.uint8.id, 0, p))
    assert.truthy(err():find('do not fit', 1, true))
    assert.are_not.equal(0, C.of_quantized_linear(xi.p, wi.p, flow.ones(3).p, nil, nil, 1, 0, 1, 0,
      flow.uint8.id, 0, p))
    assert.truthy(err():find('weight scales', 1, true))
    assert.are_not.equal(0, C.of_quantized_linear(xi.p, wi.p, ws.p, nil, nil, 1, 300, 1, 0, flow.uint8.id, 0, p))
    assert.truthy(err():find('input zero point 300', 1, true))
    assert.are_not.equal(0, C.of_quantized_linear(xi.p, wi.p, ws.p, nil, nil, 1, 0, 0, 0, flow.uint8.id, 0, p))
    assert.truthy(err():find('output scale', 1, true))
    local big = flow.zeros(1, 40000, {dtype = flow.uint8})
    assert.are_not.equal(0, C.of_quantized_linear(big.p, flow.zeros(1, 40000, {dtype = flow.int8}).p,
      flow.ones(1).p, nil, nil, 1, 0, 1, 0, flow.uint8.id, 0, p))
    assert.truthy(err():find('safe limit', 1, true))
  end)

  it('saturates at the output range (documented), never wraps', function()
    -- 255 * 127 * 16 = 518160 accumulated; any small output scale saturates
    local xi = flow.full({1, 16}, 255):to(flow.uint8)
    local wi = flow.full({2, 16}, 127):to(flow.int8)
    wi[2]:fill_(-128)
    local p = ffi.new('of_tensor*[1]')
    assert.are.equal(0, C.of_quantized_linear(xi.p, wi.p, flow.ones(1).p, nil, nil, 1, 0, 1, 0, flow.int8.id, 0, p))
    H.close(require('oneflow._C').wrap(p[0]), {{127, -128}})
    assert.are.equal(0, C.of_quantized_linear(xi.p, wi.p, flow.ones(1).p, nil, nil, 1, 0, 1, 0, flow.float32.id,
      0, p))
    H.close(require('oneflow._C').wrap(p[0]), {{255 * 127 * 16, -255 * 128 * 16}})
  end)
end)

describe('quantized max pooling', function()
  it('equals a float max pool of the integers: strides, padding, dilation', function()
    local F = flow.nn.functional
    flow.manual_seed(8)
    local q = flow.quantize_per_tensor(flow.randn(2, 3, 9, 8), 0.03, -4, flow.qint8)
    -- the first two and {2, 1} take the row loops (no padding, no dilation)
    for _, o in ipairs({{2, {}}, {3, {stride = 2}}, {{2, 3}, {stride = 1}}, {3, {stride = 2, padding = 1}},
                        {{3, 2}, {stride = {1, 2}, dilation = {2, 1}}}}) do
      local got = F.max_pool2d(q, o[1], o[2])
      local want = F.max_pool2d(q:int_repr():to(flow.float32), o[1], o[2])
      H.close(got:int_repr(), want, 0)
      assert.are.equal(q:q_scale(), got:q_scale())
      local qu = flow.quantize_per_tensor(flow.randn(2, 3, 9, 8), 0.03, 128, flow.quint8)
      H.close(F.max_pool2d(qu, o[1], o[2]):int_repr(), F.max_pool2d(qu:int_repr():to(flow.float32), o[1], o[2]), 0)
    end
    H.raises(function() F.max_pool2d(q, 2, {return_indices = true}) end, 'max_pool2d (return_indices)')
  end)

  it('2x2 stride-2 windows (the vector row kernel): odd widths, rows over 64 bytes, both byte types', function()
    local F = flow.nn.functional
    flow.manual_seed(9)
    for _, shape in ipairs({{2, 3, 10, 9}, {1, 2, 6, 150}, {3, 1, 5, 129}, {1, 1, 2, 2}}) do
      local x = flow.randn(unpack(shape)) * 3
      for _, q in ipairs({flow.quantize_per_tensor(x, 0.02, -3, flow.qint8),
                          flow.quantize_per_tensor(x, 0.02, 128, flow.quint8)}) do
        local got = F.max_pool2d(q, 2)
        H.close(got:int_repr(), F.max_pool2d(q:int_repr():to(flow.float32), 2), 0, table.concat(shape, 'x'))
      end
    end
  end)
end)

describe('channels-last quantized activations', function()
  local F = flow.nn.functional
  local CL = {memory_format = flow.channels_last}
  after_each(function() flow.backends.cpu.set_cpu_capability(best) end)

  -- a quantized conv's output fed on, against the same integers contiguous
  -- (the VNNI kernel reads channels-last rows, the others NCHW planes)
  for _, isa in ipairs(isas) do
    it('a convolution takes NCHW, channels-last and strided inputs alike, ' .. isa, function()
      flow.backends.cpu.set_cpu_capability(isa)
      flow.manual_seed(21)
      local conv = function(cin, cout, o)
        local w = flow.randn(cout, cin / (o.groups or 1), 3, 3) * 0.1
        local m = Qz.nn.quantized.Conv2d({weight = flow.quantize_per_channel(w,
                                  flow.rand(cout):to(flow.float64) * 0.002 + 0.001, flow.zeros(cout):to(flow.int64), 1,
                                  flow.qint8),
                                bias = flow.randn(cout), stride = o.stride or 1, padding = o.padding or 1,
                                dilation = o.dilation or 1, groups = o.groups or 1, scale = 0.05, zero_point = 7,
                                dtype = flow.quint8})
        return m
      end
      local x = flow.quantize_per_tensor(flow.randn(3, 8, 11, 9), 0.04, 120, flow.quint8)
      local c1, c2 = conv(8, 16, {}), conv(16, 12, {stride = 2, groups = 2, dilation = {1, 2}, padding = {1, 2}})
      local y1 = c1(x)
      -- the VNNI kernel answers channels-last (the int16 one NCHW)
      local f = io.open('/proc/cpuinfo')
      local vnni = f and f:read('*a'):find('avx512_vnni', 1, true) ~= nil
      if f then f:close() end
      if isa:find('AVX512') and vnni and C.of_quantized_backend(-1) == 0 then
        assert.is_true(y1:int_repr():is_contiguous(CL), 'channels-last out')
      end
      local ycl = c2(y1)
      local yc = c2(Q.from_int_repr(y1:int_repr():contiguous(), y1:q_scale(), y1:q_zero_point()))
      H.close(ycl:int_repr(), yc:int_repr(), 0)
      -- a transposed view (neither layout) reads the same integers
      local xt = Q.from_int_repr(x:int_repr():transpose(3, 4):contiguous():transpose(3, 4), 0.04, 120)
      H.close(c1(xt):int_repr(), y1:int_repr(), 0)
    end)
  end

  it('quantized add / add_relu: one pass equal to the float chain to the bit, layouts kept', function()
    flow.manual_seed(22)
    local function chain(a, b, s, z, dt, relu)
      local y = a:dequantize() + b:dequantize()
      if relu then y = F.relu(y) end
      return flow.quantize_per_tensor(y, s, z, dt)
    end
    -- every instruction set's vector loop (AVX-512, AVX2) and the scalar one
    for _, isa in ipairs(isas) do
      flow.backends.cpu.set_cpu_capability(isa)
      for _, shape in ipairs({{2, 5, 7, 3}, {1, 40, 17, 23}, {300}, {4, 6}}) do
        for _, dts in ipairs({{flow.quint8, flow.quint8, flow.quint8}, {flow.qint8, flow.quint8, flow.qint8},
                              {flow.quint8, flow.qint8, flow.quint8}}) do
          local a = flow.quantize_per_tensor(flow.randn(unpack(shape)) * 2, 0.021,
                                             dts[1] == flow.quint8 and 130 or -3, dts[1])
          local b = flow.quantize_per_tensor(flow.randn(unpack(shape)), 0.013, dts[2] == flow.quint8 and 99 or 5,
                                             dts[2])
          for _, relu in ipairs({false, true}) do
            local f = Qz.QFunctional(0.03, dts[3] == flow.quint8 and 64 or -10, dts[3])
            local got = relu and f:add_relu(a, b) or f:add(a, b)
            local want = chain(a, b, 0.03, dts[3] == flow.quint8 and 64 or -10, dts[3], relu)
            H.close(got:int_repr(), want:int_repr(), 0, table.concat(shape, 'x'))
            assert.are.equal(dts[3], got.dtype)
            if #shape == 4 then
              -- channels-last operands stay channels-last; mixed layouts agree
              local acl = Q.from_int_repr(a:int_repr():contiguous(CL), a:q_scale(), a:q_zero_point(), a.dtype)
              local bcl = Q.from_int_repr(b:int_repr():contiguous(CL), b:q_scale(), b:q_zero_point(), b.dtype)
              local g2 = relu and f:add_relu(acl, bcl) or f:add(acl, bcl)
              if shape[2] > 1 and shape[3] * shape[4] > 1 then
                assert.is_true(g2:int_repr():is_contiguous(CL), 'channels-last kept')
              end
              H.close(g2:int_repr(), want:int_repr(), 0)
              H.close((relu and f:add_relu(acl, b) or f:add(acl, b)):int_repr(), want:int_repr(), 0)
            end
          end
        end
      end
    end
    flow.backends.cpu.set_cpu_capability(best)
    -- broadcasting operands take the float chain (as before)
    local a = flow.quantize_per_tensor(flow.randn(2, 3, 4), 0.02, 128, flow.quint8)
    local b = flow.quantize_per_tensor(flow.randn(1, 3, 1), 0.02, 128, flow.quint8)
    local f = Qz.QFunctional(0.03, 100, flow.quint8)
    H.close(f:add(a, b):int_repr(), chain(a, b, 0.03, 100, flow.quint8, false):int_repr(), 0)
    -- the C entry point refuses what it does not take, naming itself
    local p = ffi.new('of_tensor*[1]')
    local ai = flow.zeros(2, 3):to(flow.uint8)
    assert.are_not.equal(0, C.of_quantized_add(ai.p, flow.zeros(3, 2):to(flow.uint8).p, 0.1, 0, 0.1, 0, 0.1, 0,
      flow.uint8.id, 0, p))
    assert.matches('quantized_add: operands must have one shape', ffi.string(C.of_last_error()))
    assert.are_not.equal(0, C.of_quantized_add(ai.p, flow.zeros(2, 3).p, 0.1, 0, 0.1, 0, 0.1, 0, flow.uint8.id, 0, p))
    assert.matches('quantized_add: operands must be uint8 or int8', ffi.string(C.of_last_error()))
    assert.are_not.equal(0, C.of_quantized_add(ai.p, ai.p, 0.1, 0, -1, 0, 0.1, 0, flow.uint8.id, 0, p))
    assert.matches('quantized_add: scales must be positive', ffi.string(C.of_last_error()))
    assert.are_not.equal(0, C.of_quantized_add(ai.p, ai.p, 0.1, 300, 0.1, 0, 0.1, 0, flow.uint8.id, 0, p))
  end)

  it('max pooling of channels-last integers equals the NCHW path and stays channels-last', function()
    flow.manual_seed(23)
    for _, o in ipairs({{2, {}}, {3, {stride = 2, padding = 1}}, {{3, 2}, {stride = {1, 2}, dilation = {2, 1}}},
                        {{2, 3}, {stride = 1}}}) do
      for _, q in ipairs({flow.quantize_per_tensor(flow.randn(2, 5, 9, 8), 0.03, -4, flow.qint8),
                          flow.quantize_per_tensor(flow.randn(1, 67, 7, 6), 0.03, 128, flow.quint8)}) do
        local qcl = Q.from_int_repr(q:int_repr():contiguous(CL), q:q_scale(), q:q_zero_point(), q.dtype)
        local got = F.max_pool2d(qcl, o[1], o[2])
        assert.is_true(got:int_repr():is_contiguous(CL))
        H.close(got:int_repr(), F.max_pool2d(q, o[1], o[2]):int_repr(), 0)
      end
    end
  end)
end)

describe('flow.quantization.set_backend', function()
  it('switches the int8 gemm and checks its argument', function()
    local prev = flow.quantization.set_backend('own')
    assert.are.equal('own', flow.quantization.set_backend('onednn'))
    flow.quantization.set_backend(prev)
    H.raises(function() flow.quantization.set_backend('fast') end, "expected 'auto', 'own' or 'onednn'")
  end)
end)
