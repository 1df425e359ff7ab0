-- Convolutions (lua/oneflow/ops/nn_conv.lua, core/ops/conv.c): values against
-- hand-computed results and a naive reference, every option, the 1x1 path,
-- autograd (gradcheck in float64, double backward) and error messages.
local flow = require 'oneflow'
local F = require 'oneflow.ops.nn_conv'
local H = require 'spec.helpers'

local f64 = {dtype = flow.float64}

local function randn(shape, grad)
  local t = flow.randn(shape, f64)
  if grad then t:requires_grad_(true) end
  return t
end

-- Naive 2-D convolution on nested tables: x [N][C][H][W], w [CO][CI/G][KH][KW].
local function naive_conv2d(x, w, b, o)
  o = o or {}
  local s, p, d, G = o.stride or {1, 1}, o.padding or {0, 0}, o.dilation or {1, 1}, o.groups or 1
  local N, Hh, W = #x, #x[1][1], #x[1][1][1]
  local CO, CIG, KH, KW = #w, #w[1], #w[1][1], #w[1][1][1]
  local OH = math.floor((Hh + 2 * p[1] - d[1] * (KH - 1) - 1) / s[1]) + 1
  local OW = math.floor((W + 2 * p[2] - d[2] * (KW - 1) - 1) / s[2]) + 1
  local COG = CO / G
  local y = {}
  for n = 1, N do
    y[n] = {}
    for co = 1, CO do
      local g = math.floor((co - 1) / COG)
      y[n][co] = {}
      for oh = 1, OH do
        y[n][co][oh] = {}
        for ow = 1, OW do
          local acc = b and b[co] or 0
          for ci = 1, CIG do
            for kh = 1, KH do
              for kw = 1, KW do
                local ih = (oh - 1) * s[1] - p[1] + (kh - 1) * d[1]
                local iw = (ow - 1) * s[2] - p[2] + (kw - 1) * d[2]
                if ih >= 0 and ih < Hh and iw >= 0 and iw < W then
                  acc = acc + x[n][g * CIG + ci][ih + 1][iw + 1] * w[co][ci][kh][kw]
                end
              end
            end
          end
          y[n][co][oh][ow] = acc
        end
      end
    end
  end
  return y
end

-- Naive transposed 2-D convolution: x [N][CI][H][W], w [CI][CO/G][KH][KW].
local function naive_conv_transpose2d(x, w, b, o)
  local s, p, op, d, G = o.stride, o.padding, o.output_padding, o.dilation, o.groups
  local N, CI, Hh, W = #x, #x[1], #x[1][1], #x[1][1][1]
  local COG, KH, KW = #w[1], #w[1][1], #w[1][1][1]
  local CIG = CI / G
  local OH = (Hh - 1) * s[1] - 2 * p[1] + d[1] * (KH - 1) + 1 + op[1]
  local OW = (W - 1) * s[2] - 2 * p[2] + d[2] * (KW - 1) + 1 + op[2]
  local y = {}
  for n = 1, N do
    y[n] = {}
    for co = 1, COG * G do
      y[n][co] = {}
      for oh = 1, OH do
        y[n][co][oh] = {}
        for ow = 1, OW do y[n][co][oh][ow] = b and b[co] or 0 end
      end
    end
    for ci = 1, CI do
      local g = math.floor((ci - 1) / CIG)
      for ih = 1, Hh do
        for iw = 1, W do
          for c = 1, COG do
            for kh = 1, KH do
              for kw = 1, KW do
                local oh = (ih - 1) * s[1] - p[1] + (kh - 1) * d[1]
                local ow = (iw - 1) * s[2] - p[2] + (kw - 1) * d[2]
                if oh >= 0 and oh < OH and ow >= 0 and ow < OW then
                  local row = y[n][g * COG + c][oh + 1]
                  row[ow + 1] = row[ow + 1] + x[n][ci][ih][iw] * w[ci][c][kh][kw]
                end
              end
            end
          end
        end
      end
    end
  end
  return y
end

describe('conv2d forward', function()
  local x = flow.arange(0, 16, f64):view(1, 1, 4, 4)
  local ones3 = flow.ones(1, 1, 3, 3, f64)

  it('computes a plain 3x3 convolution', function()
    H.close(F.conv2d(x, ones3), {{{{45, 54}, {81, 90}}}})
  end)

  it('pads with zeros', function()
    H.close(F.conv2d(x, ones3, nil, {padding = 1}),
            {{{{10, 18, 24, 18}, {27, 45, 54, 39}, {51, 81, 90, 63}, {42, 66, 72, 50}}}})
  end)

  it('takes stride, padding and dilation per dim', function()
    H.close(F.conv2d(x, ones3, nil, {stride = 2, padding = 1}), {{{{10, 24}, {51, 90}}}})
    -- dilation 2 on a 5x5 input: taps at 0, 2, 4
    local x5 = flow.arange(0, 25, f64):view(1, 1, 5, 5)
    H.close(F.conv2d(x5, ones3, nil, {dilation = 2}), {{{{108}}}})
    H.close(F.conv2d(x5, flow.ones(1, 1, 1, 2, f64), nil, {stride = {2, 3}}),
            {{{{1, 7}, {21, 27}, {41, 47}}}})
  end)

  it('accepts positional arguments in PyTorch order', function()
    local b = flow.tensor({1}, f64)
    H.close(F.conv2d(x, ones3, b, 2, 1), {{{{11, 25}, {52, 91}}}})
    H.close(F.conv2d(x, ones3, b, 1, 0, 1, 1), {{{{46, 55}, {82, 91}}}})
  end)

  it('adds the bias per output channel', function()
    local w = flow.cat({ones3, ones3 * 2}, 1)
    H.close(F.conv2d(x, w, flow.tensor({1, -1}, f64)),
            {{{{46, 55}, {82, 91}}, {{89, 107}, {161, 179}}}})
  end)

  it("supports padding = 'same' and 'valid'", function()
    H.close(F.conv2d(x, ones3, nil, {padding = 'same'}), F.conv2d(x, ones3, nil, {padding = 1}))
    H.close(F.conv2d(x, ones3, nil, {padding = 'valid'}), {{{{45, 54}, {81, 90}}}})
    -- even kernel: PyTorch pads one less on the left
    local y = F.conv2d(x, flow.ones(1, 1, 2, 2, f64), nil, {padding = 'same'})
    H.close(y, {{{{10, 14, 18, 10}, {26, 30, 34, 18}, {42, 46, 50, 26}, {25, 27, 29, 15}}}})
    -- dilated 'same' keeps the size
    assert.same({1, 1, 4, 4}, H.shape(F.conv2d(x, ones3, nil, {padding = 'same', dilation = 2})))
  end)

  it('splits channels into groups, including depthwise', function()
    local xx = flow.cat({x, x * 10}, 2)   -- [1, 2, 4, 4]
    local w = flow.cat({ones3, ones3 * 2}, 1)   -- [2, 1, 3, 3]
    H.close(F.conv2d(xx, w, nil, {groups = 2}),
            {{{{45, 54}, {81, 90}}, {{900, 1080}, {1620, 1800}}}})
    -- channel multiplier 2: 4 outputs from 2 channels
    local w4 = flow.cat({ones3, ones3 * 2, ones3 * 3, ones3 * 4}, 1)
    H.close(F.conv2d(xx, w4, nil, {groups = 2}),
            {{{{45, 54}, {81, 90}}, {{90, 108}, {162, 180}},
              {{1350, 1620}, {2430, 2700}}, {{1800, 2160}, {3240, 3600}}}})
  end)

  it('matches a naive reference for random inputs and every option', function()
    flow.manual_seed(1)
    local cases = {
      {x = {2, 4, 7, 6}, w = {6, 2, 3, 2}, o = {stride = {2, 1}, padding = {1, 0}, dilation = {1, 2}, groups = 2}},
      {x = {3, 3, 5, 5}, w = {4, 3, 3, 3}, o = {padding = {2, 1}}},
      {x = {1, 6, 6, 7}, w = {6, 1, 3, 3}, o = {stride = 2, padding = 1, groups = 6}},
      {x = {5, 3, 4, 4}, w = {2, 3, 2, 2}, o = {stride = 3}},
    }
    for _, c in ipairs(cases) do
      local xx, w, b = randn(c.x), randn(c.w), randn({c.w[1]})
      local o = {}
      for k, v in pairs(c.o) do
        o[k] = type(v) == 'number' and k ~= 'groups' and {v, v} or v
      end
      local want = naive_conv2d(xx:totable(), w:totable(), b:totable(), o)
      H.close(F.conv2d(xx, w, b, c.o), want, 1e-9)
      H.close(F.conv2d(xx:float(), w:float(), b:float(), c.o), want, 1e-4)
    end
  end)

  it('3x3 depthwise rows (one pass per row): borders, strides, paddings, narrow maps', function()
    -- float32 2-D 3x3 depthwise convolutions take a row kernel where all
    -- three input rows are in range; columns past the row's ends skip taps
    flow.manual_seed(4)
    local cases = {
      {x = {2, 3, 9, 13}, o = {padding = 1}},
      {x = {1, 2, 8, 17}, o = {stride = 2, padding = 1}},
      {x = {1, 2, 7, 11}, o = {stride = 3, padding = 2}},
      {x = {1, 2, 6, 9}, o = {padding = {1, 0}}},
      {x = {1, 2, 5, 8}, o = {stride = {1, 2}, padding = {2, 2}}},
      {x = {1, 2, 5, 1}, o = {padding = 1}},
      {x = {1, 2, 4, 2}, o = {padding = 1}},
      {x = {1, 2, 4, 3}, o = {stride = 2, padding = 0}},
      {x = {2, 2, 6, 6}, o = {padding = 1}, mult = 2},
    }
    for _, c in ipairs(cases) do
      local C = c.x[2]
      local xx, w, b = randn(c.x), randn({C * (c.mult or 1), 1, 3, 3}), randn({C * (c.mult or 1)})
      local o = {groups = C}
      for k, v in pairs(c.o) do o[k] = type(v) == 'number' and {v, v} or v end
      local want = naive_conv2d(xx:totable(), w:totable(), b:totable(), o)
      local kw = {groups = C}
      for k, v in pairs(c.o) do kw[k] = v end
      H.close(F.conv2d(xx:float(), w:float(), b:float(), kw), want, 1e-5)
    end
  end)

  it('3x3 depthwise planes (padded copy, whole-vector rows): MobileNet sizes, odd maps, strides', function()
    -- float32 2-D 3x3 depthwise convolutions with equal strides (1 or 2) and
    -- paddings (0-2) run through a padded copy of each plane on AVX2 and
    -- AVX-512; against float64 and against the row kernel they replaced
    -- (OF_CONV_DW_PLANE=0)
    local ffi = require 'ffi'
    pcall(ffi.cdef, 'int setenv(const char *, const char *, int); int unsetenv(const char *);')
    flow.manual_seed(5)
    local n = 0
    for _, hw in ipairs({{1, 1}, {2, 3}, {3, 3}, {5, 40}, {7, 7}, {13, 17}, {14, 14}, {28, 28}, {33, 31},
                         {56, 56}, {112, 112}}) do
      for _, st in ipairs({1, 2}) do
        for _, pd in ipairs({0, 1, 2}) do
          if hw[1] + 2 * pd >= 3 and hw[2] + 2 * pd >= 3 then
            n = n + 1
            local C, mult = 3, n % 3 == 0 and 2 or 1
            local N = hw[1] >= 56 and 1 or 2
            local xin = flow.randn(N, C, hw[1], hw[2])
            if n % 4 == 0 then xin = flow.randn(N, C, hw[2], hw[1]):transpose(3, 4) end
            local w = flow.randn(C * mult, 1, 3, 3)
            local b = n % 2 == 0 and flow.randn(C * mult) or nil
            local o = {stride = st, padding = pd, groups = C}
            local y = F.conv2d(xin, w, b, o)
            local want = F.conv2d(xin:double(), w:double(), b and b:double(), o)
            H.close(y, want, 1e-5)
            ffi.C.setenv('OF_CONV_DW_PLANE', '0', 1)
            local rows = F.conv2d(xin, w, b, o)
            ffi.C.unsetenv('OF_CONV_DW_PLANE')
            H.close(y, rows, 1e-5)
          end
        end
      end
    end
    assert.is_true(n >= 50)
  end)

  it('gives the same result on the 1x1 fast path as on the general path', function()
    flow.manual_seed(2)
    local xx, w = randn({3, 8, 5, 6}), randn({4, 8, 1, 1})
    local direct = F.conv2d(xx, w)
    -- a 3x3 kernel that is zero but for its centre takes the im2col path
    local w3 = flow.zeros(4, 8, 3, 3, f64)
    w3:narrow(3, 2, 1):narrow(4, 2, 1):copy_(w)
    H.close(direct, F.conv2d(xx, w3, nil, {padding = 1}), 1e-12)
    -- and equals a matmul over channels
    local mm = w:view(4, 8):matmul(xx:permute(2, 1, 3, 4):reshape(8, -1))
    H.close(direct, mm:view(4, 3, 5, 6):permute(2, 1, 3, 4):contiguous(), 1e-12)
    -- grouped 1x1
    local wg = randn({6, 4, 1, 1})
    local yg = F.conv2d(xx, wg, nil, {groups = 2})
    local w3g = flow.zeros(6, 4, 3, 3, f64)
    w3g:narrow(3, 2, 1):narrow(4, 2, 1):copy_(wg)
    H.close(yg, F.conv2d(xx, w3g, nil, {padding = 1, groups = 2}), 1e-12)
  end)

  it('gives the same result whatever the thread count', function()
    flow.manual_seed(3)
    local xx, w, b = randn({5, 4, 9, 9}), randn({6, 4, 3, 3}), randn({6})
    local n = flow.get_num_threads()
    flow.set_num_threads(1)
    local ref = F.conv2d(xx, w, b, {padding = 1})
    for _, t in ipairs({2, 3, 8}) do
      flow.set_num_threads(t)
      H.close(F.conv2d(xx, w, b, {padding = 1}), ref, 1e-12)
    end
    flow.set_num_threads(n)
  end)

  it('reads non-contiguous inputs', function()
    flow.manual_seed(4)
    local xx, w = randn({2, 3, 6, 5}), randn({2, 3, 3, 3})
    local xt = xx:transpose(3, 4):contiguous():transpose(3, 4)
    assert.is_false(xt:is_contiguous())
    H.close(F.conv2d(xt, w), F.conv2d(xx, w), 1e-12)
  end)

  it('computes float16 and bfloat16 through float32', function()
    flow.manual_seed(5)
    local xx, w = flow.randn(1, 2, 5, 5), flow.randn(3, 2, 3, 3)
    local ref = F.conv2d(xx, w)
    for _, dt in ipairs({flow.float16, flow.bfloat16}) do
      local y = F.conv2d(xx:to(dt), w:to(dt))
      assert.equal(dt, y.dtype)
      H.close(y:float(), ref, 0.1)
    end
  end)
end)

describe('conv1d and conv3d', function()
  it('computes a 1-D convolution', function()
    local x = flow.tensor({{{1, 2, 3, 4, 5}}}, f64)
    local w = flow.tensor({{{1, 0, -1}}}, f64)
    H.close(F.conv1d(x, w), {{{-2, -2, -2}}})
    H.close(F.conv1d(x, w, flow.tensor({10}, f64), {stride = 2, padding = 1}), {{{8, 8, 14}}})
    H.close(F.conv1d(x, w, nil, {padding = 'same'}), {{{-2, -2, -2, -2, 4}}})
  end)

  it('computes a 3-D convolution', function()
    local x = flow.arange(0, 27, f64):view(1, 1, 3, 3, 3)
    local y = F.conv3d(x, flow.ones(1, 1, 2, 2, 2, f64))
    -- window at the origin: 0+1+3+4+9+10+12+13
    H.close(y, {{{{{52, 60}, {76, 84}}, {{124, 132}, {148, 156}}}}})
    assert.same({1, 1, 2, 2, 2}, H.shape(F.conv3d(x, flow.ones(1, 1, 2, 2, 2, f64), nil,
                                                  {stride = 2, padding = 1})))
  end)

  it('agrees with conv2d on inputs with a unit dim', function()
    flow.manual_seed(6)
    local x, w = randn({2, 3, 1, 7}), randn({4, 3, 1, 3})
    H.close(F.conv1d(x:squeeze(3), w:squeeze(3), nil, {stride = 2, padding = 1}),
            F.conv2d(x, w, nil, {stride = {1, 2}, padding = {0, 1}}):squeeze(3), 1e-12)
    H.close(F.conv3d(x:unsqueeze(3), w:unsqueeze(3), nil, {padding = {0, 0, 1}}),
            F.conv2d(x, w, nil, {padding = {0, 1}}):unsqueeze(3), 1e-12)
  end)
end)

describe('conv_transpose2d', function()
  it('scatters every input through the kernel', function()
    local x = flow.tensor({{{{1, 2}, {3, 4}}}}, f64)
    H.close(F.conv_transpose2d(x, flow.ones(1, 1, 2, 2, f64)),
            {{{{1, 3, 2}, {4, 10, 6}, {3, 7, 4}}}})
    H.close(F.conv_transpose2d(x, flow.ones(1, 1, 2, 2, f64), nil, {stride = 2}),
            {{{{1, 1, 2, 2}, {1, 1, 2, 2}, {3, 3, 4, 4}, {3, 3, 4, 4}}}})
  end)

  it('matches a naive reference with every option', function()
    flow.manual_seed(7)
    local cases = {
      {x = {2, 4, 3, 4}, w = {4, 3, 3, 2}, o = {stride = {2, 1}, padding = {1, 0}, output_padding = {1, 0},
                                              dilation = {1, 1}, groups = 2}},
      {x = {1, 2, 4, 3}, w = {2, 3, 2, 3}, o = {stride = {1, 2}, padding = {0, 1}, output_padding = {1, 1},
                                              dilation = {2, 1}, groups = 1}},
      {x = {2, 3, 3, 3}, w = {3, 1, 3, 3}, o = {stride = {3, 3}, padding = {1, 1}, output_padding = {2, 0},
                                              dilation = {1, 1}, groups = 3}},
    }
    for _, c in ipairs(cases) do
      local x, w, b = randn(c.x), randn(c.w), randn({c.w[2] * c.o.groups})
      local want = naive_conv_transpose2d(x:totable(), w:totable(), b:totable(), c.o)
      H.close(F.conv_transpose2d(x, w, b, c.o), want, 1e-9)
      -- positional: bias, stride, padding, output_padding, groups, dilation
      H.close(F.conv_transpose2d(x, w, b, c.o.stride, c.o.padding, c.o.output_padding,
                                 c.o.groups, c.o.dilation), want, 1e-9)
    end
  end)

  it('is the adjoint of conv2d', function()
    flow.manual_seed(8)
    local x, w = randn({2, 4, 7, 6}), randn({6, 2, 3, 3})
    local o = {stride = 2, padding = 1, groups = 2}
    local y = F.conv2d(x, w, nil, o)
    local gy = randn(H.shape(y))
    local gx = F.conv_transpose2d(gy, w, nil, {stride = 2, padding = 1, groups = 2, output_padding = {0, 1}})
    assert.same(H.shape(x), H.shape(gx))
    assert.is_true(math.abs((y * gy):sum():item() - (x * gx):sum():item()) < 1e-9)
    local gw = F.conv_weight_grad(x, gy, {3, 3}, o)
    assert.is_true(math.abs((y * gy):sum():item() - (w * gw):sum():item()) < 1e-9)
  end)
end)

describe('conv autograd', function()
  local gradcheck = flow.autograd.gradcheck

  it('gradchecks conv2d for input, weight and bias', function()
    flow.manual_seed(10)
    local x, w, b = randn({2, 4, 5, 6}, true), randn({6, 2, 3, 2}, true), randn({6}, true)
    assert.is_true(gradcheck(function(a, c, d)
      return F.conv2d(a, c, d, {stride = {2, 1}, padding = {1, 0}, dilation = {1, 2}, groups = 2})
    end, {x, w, b}))
    assert.is_true(gradcheck(function(a, c) return F.conv2d(a, c) end,
                             {randn({2, 3, 3, 4}, true), randn({5, 3, 1, 1}, true)}))
    assert.is_true(gradcheck(function(a, c)
      return F.conv2d(a, c, nil, {padding = 'same'})
    end, {randn({1, 2, 4, 4}, true), randn({2, 2, 2, 2}, true)}))
  end)

  it('gradchecks depthwise convolutions', function()
    flow.manual_seed(14)
    assert.is_true(gradcheck(function(a, c, d)
      return F.conv2d(a, c, d, {stride = {2, 1}, padding = 1, dilation = {1, 2}, groups = 3})
    end, {randn({2, 3, 5, 6}, true), randn({6, 1, 3, 2}, true), randn({6}, true)}))
    assert.is_true(gradcheck(function(a, c)
      return F.conv3d(a, c, nil, {stride = {1, 1, 2}, padding = {0, 1, 1}, groups = 2})
    end, {randn({1, 2, 3, 4, 5}, true), randn({2, 1, 2, 2, 3}, true)}))
    assert.is_true(gradcheck(function(a, c, d)
      return F.conv_transpose2d(a, c, d, {stride = 2, padding = 1, output_padding = 1, groups = 3})
    end, {randn({2, 3, 3, 4}, true), randn({3, 1, 3, 3}, true), randn({3}, true)}))
  end)

  it('gradchecks conv1d and conv3d', function()
    flow.manual_seed(11)
    assert.is_true(gradcheck(function(a, c, d) return F.conv1d(a, c, d, {stride = 2, padding = 1}) end,
                             {randn({2, 3, 7}, true), randn({4, 3, 3}, true), randn({4}, true)}))
    assert.is_true(gradcheck(function(a, c, d)
      return F.conv3d(a, c, d, {stride = {1, 2, 1}, padding = {1, 0, 1}, dilation = {2, 1, 1}})
    end, {randn({2, 2, 4, 5, 3}, true), randn({3, 2, 2, 2, 2}, true), randn({3}, true)}))
  end)

  it('gradchecks conv_transpose2d', function()
    flow.manual_seed(12)
    assert.is_true(gradcheck(function(a, c, d)
      return F.conv_transpose2d(a, c, d, {stride = {2, 1}, padding = {1, 0}, output_padding = {1, 0}, groups = 2})
    end, {randn({2, 4, 3, 4}, true), randn({4, 3, 3, 2}, true), randn({6}, true)}))
    assert.is_true(gradcheck(function(a, c)
      return F.conv_transpose2d(a, c, nil, {stride = {1, 2}, output_padding = {1, 0}, dilation = {2, 1}})
    end, {randn({1, 2, 3, 3}, true), randn({2, 2, 2, 2}, true)}))
  end)

  -- d/d(inputs) of autograd.grad(y, inputs, y) with create_graph: the
  -- backward rules (conv_transpose, conv_weight_grad, conv) differentiated
  local function grad_of(fn, k)
    return function(a, c)
      return flow.enable_grad(function()
        local y = fn(a, c)
        return flow.autograd.grad({y}, {a, c}, {y}, {create_graph = true})[k]
      end)
    end
  end

  it('differentiates twice (grads of grads)', function()
    flow.manual_seed(13)
    local x, w = randn({2, 4, 5, 5}, true), randn({4, 2, 3, 3}, true)
    local conv = function(a, c) return F.conv2d(a, c, nil, {stride = 2, padding = 1, groups = 2}) end
    local convt = function(a, c)
      return F.conv_transpose2d(a, c, nil, {stride = 2, padding = 1, output_padding = 1, groups = 2})
    end
    for k = 1, 2 do
      assert.is_true(gradcheck(grad_of(conv, k), {x, w}))
      assert.is_true(gradcheck(grad_of(convt, k), {x, w}))
    end
    assert.is_true(flow.autograd.gradgradcheck(conv, {x, w}))
    local b = randn({6}, true)
    assert.is_true(flow.autograd.gradgradcheck(function(a, c, d)
      return F.conv2d(a, c, d, {padding = 1, groups = 3})
    end, {randn({1, 3, 4, 4}, true), randn({6, 1, 3, 3}, true), b}))
  end)

  it('records a ConvolutionBackward node and fills .grad', function()
    local x = flow.ones(1, 1, 3, 3, {requires_grad = true})
    local w = flow.ones(2, 1, 2, 2, {requires_grad = true})
    local b = flow.zeros(2, {requires_grad = true})
    local y = F.conv2d(x, w, b)
    assert.equal('ConvolutionBackward', y.grad_fn:name())
    y:backward(flow.ones(1, 2, 2, 2))
    H.close(x.grad, {{{{2, 4, 2}, {4, 8, 4}, {2, 4, 2}}}})
    H.close(w.grad, {{{{4, 4}, {4, 4}}}, {{{4, 4}, {4, 4}}}})
    H.close(b.grad, {4, 4})
  end)
end)

describe('conv errors', function()
  it('names the op, the shapes and the dtypes', function()
    H.raises(function() F.conv2d(flow.ones(3, 32, 32), flow.ones(6, 1, 5, 5)) end,
             'conv2d: expected input with 4 dims [N, C, H, W], got [3,32,32]')
    H.raises(function() F.conv2d(flow.ones(1, 3, 32, 32), flow.ones(6, 1, 5, 5)) end,
             'conv2d: input has 3 channels but weight expects 1 (groups 1, weight [6,1,5,5])')
    H.raises(function() F.conv2d(flow.ones(1, 1, 2, 2), flow.ones(6, 1, 5, 5), nil, {padding = 1}) end,
             'conv2d: kernel size [5,5]', 'larger than the padded input [4,4]')
    H.raises(function() F.conv2d(flow.ones(1, 1, 4, 4), flow.ones(1, 1, 1, 1), nil, {stride = 0}) end,
             'conv2d: stride must be positive')
    H.raises(function() F.conv2d(flow.ones(1, 1, 4, 4), flow.ones(1, 1, 1, 1), nil, {padding = -1}) end,
             'conv2d: padding must be non-negative')
    H.raises(function() F.conv2d(flow.ones(1, 4, 4, 4), flow.ones(3, 2, 1, 1), nil, {groups = 2}) end,
             'conv2d: weight [3,2,1,1] has 3 output channels', 'groups 2')
    H.raises(function() F.conv2d(flow.ones(1, 1, 4, 4), flow.ones(2, 1, 1, 1), flow.ones(3)) end,
             'conv2d: expected bias of shape [2], got [3]')
    H.raises(function()
      F.conv2d(flow.ones(1, 1, 4, 4, {dtype = flow.int64}), flow.ones(1, 1, 1, 1, {dtype = flow.int64}))
    end, 'conv2d: expected a floating-point input, got int64')
    H.raises(function() F.conv2d(flow.ones(1, 1, 4, 4), flow.ones(1, 1, 1, 1, f64)) end,
             'conv2d: input and weight must have the same dtype, got float32 and float64')
    H.raises(function() F.conv1d(flow.ones(1, 1, 4, 4), flow.ones(1, 1, 1)) end,
             'conv1d: expected input with 3 dims [N, C, L], got [1,1,4,4]')
    H.raises(function() F.conv2d(flow.ones(1, 1, 4, 4), flow.ones(1, 1, 3, 3), nil, {padding = 'full'}) end,
             "conv2d: padding must be a number, a table, 'same' or 'valid'")
    H.raises(function()
      F.conv2d(flow.ones(1, 1, 4, 4), flow.ones(1, 1, 3, 3), nil, {padding = 'same', stride = 2})
    end, "padding='same' is not supported for strided convolutions")
    H.raises(function() F.conv2d(flow.ones(1, 1, 4, 4), flow.ones(1, 1, 3, 3), nil, {stride = {1, 2, 3}}) end,
             'conv2d: stride must be a number or a table of 2 numbers')
    H.raises(function() F.conv2d('x', flow.ones(1, 1, 3, 3)) end,
             'conv2d: argument 1 (input) must be a tensor, got string')
  end)

  it('checks conv_transpose arguments', function()
    H.raises(function()
      F.conv_transpose2d(flow.ones(1, 3, 4, 4), flow.ones(4, 2, 3, 3))
    end, 'conv_transpose2d: input has 3 channels but weight expects 4')
    H.raises(function()
      F.conv_transpose2d(flow.ones(1, 1, 4, 4), flow.ones(1, 1, 3, 3), nil, {stride = 2, output_padding = 2})
    end, 'conv_transpose2d: output_padding [2,2] must be non-negative and smaller than stride [2,2] or dilation [1,1]')
    H.raises(function()
      F.conv_transpose2d(flow.ones(1, 1, 1, 1), flow.ones(1, 1, 1, 1), nil, {padding = 1})
    end, 'conv_transpose2d: output size [-1,-1] is too small')
  end)
end)
