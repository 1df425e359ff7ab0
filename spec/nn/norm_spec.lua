-- Normalisation: batch_norm, layer_norm, group_norm, instance_norm against
-- plain-Lua references, running statistics, gradients and errors.
local flow = require 'oneflow'
local F = require('oneflow').nn.functional
local H = require 'spec.helpers'

local gradcheck, gradgradcheck = flow.autograd.gradcheck, flow.autograd.gradgradcheck
local f64 = flow.float64

local function leaf(v) return flow.tensor(v, {dtype = f64, requires_grad = true}) end
local function randn(shape) return flow.randn(shape, {dtype = f64, requires_grad = true}) end

-- mean and biased variance of a Lua list
local function stats(v)
  local m, s = 0, 0
  for i = 1, #v do m = m + v[i] end
  m = m / #v
  for i = 1, #v do s = s + (v[i] - m) ^ 2 end
  return m, s / #v
end

-- normalise the list v with its own statistics
local function normalise(v, eps)
  local m, var = stats(v)
  local r = {}
  for i = 1, #v do r[i] = (v[i] - m) / math.sqrt(var + eps) end
  return r
end

-- x [N][C][L] (nested tables): the values of channel c, and per-channel mean/var
local function channel(x, c)
  local v = {}
  for n = 1, #x do for l = 1, #x[n][c] do v[#v + 1] = x[n][c][l] end end
  return v
end

local X3 = {{{1, 2, 4}, {0.5, -1, 3}}, {{-2, 0, 1}, {2, 2.5, -0.5}}}   -- [2, 2, 3]

describe('batch_norm', function()
  it('normalises with the batch statistics when training', function()
    local w, b = {1.5, -0.5}, {0.1, 2}
    local y = F.batch_norm(flow.tensor(X3, {dtype = f64}), nil, nil,
                           {weight = flow.tensor(w, {dtype = f64}), bias = flow.tensor(b, {dtype = f64}),
                            training = true, eps = 1e-5})
    local want = {{{}, {}}, {{}, {}}}
    for c = 1, 2 do
      local m, var = stats(channel(X3, c))
      for n = 1, 2 do
        for l = 1, 3 do
          want[n][c][l] = (X3[n][c][l] - m) / math.sqrt(var + 1e-5) * w[c] + b[c]
        end
      end
    end
    H.close(y, want, 1e-12)
  end)

  it('updates running stats with momentum and the unbiased variance', function()
    local rm, rv = flow.zeros(2, {dtype = f64}), flow.ones(2, {dtype = f64})
    local x = flow.tensor(X3, {dtype = f64})
    F.batch_norm(x, rm, rv, {training = true, momentum = 0.1})
    local em, ev = {}, {}
    for c = 1, 2 do
      local v = channel(X3, c)
      local m, var = stats(v)
      em[c] = 0.9 * 0 + 0.1 * m
      ev[c] = 0.9 * 1 + 0.1 * var * #v / (#v - 1)
    end
    H.close(rm, em, 1e-12)
    H.close(rv, ev, 1e-12)
    -- a second step folds in again; the default momentum is 0.1
    F.batch_norm(x, rm, rv, {training = true})
    for c = 1, 2 do
      local v = channel(X3, c)
      local m, var = stats(v)
      em[c] = 0.9 * em[c] + 0.1 * m
      ev[c] = 0.9 * ev[c] + 0.1 * var * #v / (#v - 1)
    end
    H.close(rm, em, 1e-12)
    H.close(rv, ev, 1e-12)
  end)

  it('updates running stats under no_grad, and float32 buffers too', function()
    local rm, rv = flow.zeros(2), flow.ones(2)
    flow.no_grad(function() F.batch_norm(flow.tensor(X3), rm, rv, {training = true, momentum = 1}) end)
    local m1, m2 = stats(channel(X3, 1)), stats(channel(X3, 2))
    H.close(rm, {m1, m2}, 1e-6)
  end)

  it('uses the running stats in eval mode and leaves them alone', function()
    local rm, rv = flow.tensor({0.5, -1}, {dtype = f64}), flow.tensor({4, 0.25}, {dtype = f64})
    local y = F.batch_norm(flow.tensor(X3, {dtype = f64}), rm, rv, {eps = 0})
    local want = {}
    for n = 1, 2 do
      want[n] = {}
      for c = 1, 2 do
        want[n][c] = {}
        local m, v = ({0.5, -1})[c], ({4, 0.25})[c]
        for l = 1, 3 do want[n][c][l] = (X3[n][c][l] - m) / math.sqrt(v) end
      end
    end
    H.close(y, want, 1e-12)
    H.close(rm, {0.5, -1})
    H.close(rv, {4, 0.25})
  end)

  it('takes [N, C] and 4-d inputs', function()
    local x = flow.tensor({{1, 10}, {3, 20}}, {dtype = f64})
    local r = 1 / math.sqrt(1 + 1e-5)
    local q = 5 / math.sqrt(25 + 1e-5)
    H.close(F.batch_norm(x, nil, nil, {training = true}), {{-r, -q}, {r, q}}, 1e-12)
    local y = F.batch_norm(flow.randn({2, 3, 4, 5}), nil, nil, {training = true})
    H.close(y:mean({1, 3, 4}), {0, 0, 0}, 1e-5)
    H.close(y:var({1, 3, 4}, {unbiased = false}), {1, 1, 1}, 1e-3)
  end)

  it('has gradients (train and eval)', function()
    local x, w, b = randn({4, 3, 2}), randn({3}), randn({3})
    assert.is_true(gradcheck(function(a, c, d)
      return F.batch_norm(a, nil, nil, {weight = c, bias = d, training = true})
    end, {x, w, b}))
    local rm, rv = flow.randn({3}, {dtype = f64}), flow.rand({3}, {dtype = f64}) + 0.5
    assert.is_true(gradcheck(function(a, c, d)
      return F.batch_norm(a, rm, rv, {weight = c, bias = d})
    end, {x, w, b}))
    assert.are.equal('BatchNormBackward', F.batch_norm(x, rm, rv).grad_fn:name())
  end)

  it('float32 training on 1 or 8 threads: the same bits, float64\'s values', function()
    -- per-row partial sums combined in a fixed order: the thread count does
    -- not change a bit of the output, the running stats or the grads
    flow.manual_seed(3)
    local x0, g = flow.randn(5, 8, 7, 9) * 2 + 0.5, flow.randn(5, 8, 7, 9)
    local w0, b0 = flow.randn(8), flow.randn(8)
    local function run(threads, dt)
      local before = flow.get_num_threads()
      flow.set_num_threads(threads)
      -- fresh leaves (`to` of the same dtype would return x0 itself)
      local x, w, b = x0:clone():to(dt):requires_grad_(), w0:clone():to(dt):requires_grad_(),
                      b0:clone():to(dt):requires_grad_()
      local rm, rv = flow.zeros(8, {dtype = dt}), flow.ones(8, {dtype = dt})
      local y = F.batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5)
      y:backward(g:to(dt))
      flow.set_num_threads(before)
      return {y:detach(), rm, rv, x.grad, w.grad, b.grad}
    end
    local one, eight, ref = run(1, flow.float32), run(8, flow.float32), run(1, f64)
    for i, name in ipairs({'output', 'running_mean', 'running_var', 'x grad', 'weight grad', 'bias grad'}) do
      assert.is_true(flow.equal(one[i], eight[i]), name)
      H.close(one[i]:double(), ref[i], 1e-4, name)
    end
  end)

  it('has second derivatives under create_graph', function()
    local x, w = randn({3, 2, 2}), randn({2})
    assert.is_true(gradgradcheck(function(a, c)
      return F.batch_norm(a, nil, nil, {weight = c, training = true})
    end, {x, w}))
  end)

  it('eval on bfloat16: one bfloat16 pass, the numbers of the float32 kernel rounded', function()
    -- dense bfloat16 input, no grad: read and written as bfloat16 (norm.c,
    -- ch_affine_bf16); must equal float32 batch_norm on the same values
    -- rounded once, bit for bit, for odd spatial sizes, NaN and infinities
    flow.manual_seed(2)
    local C = 5
    local rm, rv = flow.randn(C), flow.rand(C) + 0.5
    local w, b = flow.randn(C), flow.randn(C)
    local function same(x, what)
      local got = F.batch_norm(x, rm, rv, w, b, false, 0.1, 1e-5)
      assert.are.equal(flow.bfloat16, got.dtype, what)
      local want = F.batch_norm(x:float(), rm, rv, w, b, false, 0.1, 1e-5):bfloat16()
      local g, e = got:float():flatten():totable(), want:float():flatten():totable()
      for i = 1, #e do
        if e[i] ~= e[i] then assert(g[i] ~= g[i], what .. ': NaN expected at ' .. i)
        else assert(g[i] == e[i], ('%s: element %d is %g, expected %g'):format(what, i, g[i], e[i])) end
      end
    end
    same(flow.randn(3, C, 7, 9):bfloat16(), 'odd spatial sizes')
    same(flow.randn(2, C, 33):bfloat16(), '3-d input')
    same(flow.randn(4, C):bfloat16(), '[N, C]')
    local x = flow.randn(2, C, 4, 4)
    x[1][2][1][1] = 0 / 0
    x[2][3][2][2] = 1 / 0
    x[2][1][4][4] = -1 / 0
    same(x:bfloat16(), 'NaN and infinities')
    same(flow.randn(2, 4, 4, C):bfloat16():permute(1, 4, 2, 3), 'channels-last (float32 path)')
    local xg = flow.randn(2, C, 3, 3):bfloat16():requires_grad_(true)
    local y = F.batch_norm(xg, rm, rv, w, b, false, 0.1, 1e-5)
    y:float():sum():backward()
    assert.are.equal(flow.bfloat16, xg.grad.dtype)
  end)

  it('reports bad arguments', function()
    local x = flow.randn({2, 3})
    H.raises(function() F.batch_norm(x, flow.zeros(2), flow.ones(2), {training = true}) end,
             'batch_norm', 'running_mean', '[2]', '[2,3]')
    H.raises(function() F.batch_norm(x, nil, nil) end, 'batch_norm', 'running_mean and running_var')
    H.raises(function() F.batch_norm(flow.randn({1, 3}), nil, nil, {training = true}) end,
             'expected more than 1 value per channel when training', '[1,3]')
    H.raises(function() F.batch_norm(flow.ones({2, 3}, {dtype = flow.int64}), nil, nil,
                                     {training = true}) end, 'batch_norm', 'int64')
    H.raises(function() F.batch_norm(x, nil, nil, {training = true, weight = flow.ones(4)}) end,
             'weight', '[4]')
  end)
end)

describe('layer_norm', function()
  it('normalises over the trailing dims with weight and bias', function()
    local x = {{1, 2, 3, 5}, {-1, 0, 4, 9}}
    local w, b = {1, 2, 0.5, -1}, {0, 0.5, 1, -2}
    local y = F.layer_norm(flow.tensor(x, {dtype = f64}), 4, {weight = flow.tensor(w, {dtype = f64}),
                                                              bias = flow.tensor(b, {dtype = f64})})
    local want = {}
    for r = 1, 2 do
      local z = normalise(x[r], 1e-5)
      want[r] = {}
      for j = 1, 4 do want[r][j] = z[j] * w[j] + b[j] end
    end
    H.close(y, want, 1e-12)
    -- over two dims: each [2, 2] block separately
    local x3 = {{{1, 2}, {3, 4}}, {{0, 0}, {1, 7}}}
    local y3 = F.layer_norm(flow.tensor(x3, {dtype = f64}), {2, 2}, {eps = 0})
    local z1, z2 = normalise({1, 2, 3, 4}, 0), normalise({0, 0, 1, 7}, 0)
    H.close(y3, {{{z1[1], z1[2]}, {z1[3], z1[4]}}, {{z2[1], z2[2]}, {z2[3], z2[4]}}}, 1e-12)
  end)

  it('is accurate in float32 for rows with a large mean (two-pass statistics)', function()
    local y = F.layer_norm(flow.tensor({{10000 + 1, 10000 + 2, 10000 + 3, 10000 + 4}}), 4, {eps = 0})
    local z = normalise({1, 2, 3, 4}, 0)
    H.close(y, {z}, 1e-4)
  end)

  it('reads non-contiguous inputs', function()
    local x = flow.randn({4, 3}, {dtype = f64})
    H.close(F.layer_norm(x:t(), 4), F.layer_norm(x:t():contiguous(), 4), 1e-12)
    local y = flow.randn({3, 2, 4}, {dtype = f64}):transpose(1, 2)
    H.close(F.batch_norm(y, nil, nil, {training = true}),
            F.batch_norm(y:contiguous(), nil, nil, {training = true}), 1e-12)
  end)

  it('keeps float16 and bfloat16 inputs in their dtype', function()
    for _, dt in ipairs({flow.float16, flow.bfloat16}) do
      local y = F.layer_norm(flow.tensor({{1, 2, 3}}, {dtype = dt}), 3)
      assert.are.equal(dt, y.dtype)
      H.close(y, {normalise({1, 2, 3}, 1e-5)}, 1e-2)
    end
  end)

  it('has gradients and second derivatives', function()
    local x, w, b = randn({3, 4}), randn({4}), randn({4})
    assert.is_true(gradcheck(function(a, c, d) return F.layer_norm(a, 4, {weight = c, bias = d}) end,
                             {x, w, b}))
    local x3, w2 = randn({2, 2, 3}), randn({2, 3})
    assert.is_true(gradcheck(function(a, c) return F.layer_norm(a, {2, 3}, {weight = c}) end, {x3, w2}))
    assert.is_true(gradgradcheck(function(a, c) return F.layer_norm(a, 4, {weight = c}) end,
                                 {randn({2, 4}), randn({4})}))
    assert.are.equal('LayerNormBackward', F.layer_norm(x, 4).grad_fn:name())
  end)

  it('reports shape mismatches', function()
    local x = flow.randn({2, 3})
    H.raises(function() F.layer_norm(x, 4) end, 'layer_norm', 'normalized_shape [4]', '[2, 3]')
    H.raises(function() F.layer_norm(x, 3, {weight = flow.ones(4)}) end,
             'layer_norm', 'weight', '[4]', '[3]')
  end)
end)

describe('group_norm and instance_norm', function()
  -- x [N][C][L]: groups of C / G channels
  local function group_ref(x, G, w, b, eps)
    local N, Cn, L = #x, #x[1], #x[1][1]
    local per = Cn / G
    local out = {}
    for n = 1, N do
      out[n] = {}
      for g = 0, G - 1 do
        local v = {}
        for c = g * per + 1, (g + 1) * per do for l = 1, L do v[#v + 1] = x[n][c][l] end end
        local m, var = stats(v)
        for c = g * per + 1, (g + 1) * per do
          out[n][c] = {}
          for l = 1, L do
            out[n][c][l] = (x[n][c][l] - m) / math.sqrt(var + eps) * (w and w[c] or 1) + (b and b[c] or 0)
          end
        end
      end
    end
    return out
  end
  local X = {{{1, 2}, {3, 5}, {0, -1}, {2, 2.5}}, {{-1, 0}, {4, 1}, {3, 3.5}, {7, -2}}}   -- [2, 4, 2]

  it('group_norm matches the reference', function()
    local w, b = {1, 2, 3, 4}, {0.5, 0, -0.5, 1}
    local y = F.group_norm(flow.tensor(X, {dtype = f64}), 2, {weight = flow.tensor(w, {dtype = f64}),
                                                              bias = flow.tensor(b, {dtype = f64})})
    H.close(y, group_ref(X, 2, w, b, 1e-5), 1e-12)
    H.close(F.group_norm(flow.tensor(X, {dtype = f64}), 1), group_ref(X, 1, nil, nil, 1e-5), 1e-12)
  end)

  it('instance_norm normalises each (sample, channel) and averages the running stats', function()
    local rm, rv = flow.zeros(4, {dtype = f64}), flow.ones(4, {dtype = f64})
    local y = F.instance_norm(flow.tensor(X, {dtype = f64}), {running_mean = rm, running_var = rv,
                                                              momentum = 0.5})
    H.close(y, group_ref(X, 4, nil, nil, 1e-5), 1e-12)
    local em, ev = {}, {}
    for c = 1, 4 do
      local sm, sv = 0, 0
      for n = 1, 2 do
        local m, var = stats(X[n][c])
        sm, sv = sm + m / 2, sv + var * 2 / (2 - 1) / 2
      end
      em[c], ev[c] = 0.5 * sm, 0.5 + 0.5 * sv
    end
    H.close(rm, em, 1e-12)
    H.close(rv, ev, 1e-12)
    -- use_input_stats = false: the running ones
    local z = F.instance_norm(flow.tensor(X, {dtype = f64}), {running_mean = rm, running_var = rv,
                                                              use_input_stats = false, eps = 0})
    H.close(z[{2, 3, 1}], (X[2][3][1] - em[3]) / math.sqrt(ev[3]), 1e-12)
  end)

  it('have gradients and second derivatives', function()
    local x, w, b = randn({2, 4, 3}), randn({4}), randn({4})
    assert.is_true(gradcheck(function(a, c, d) return F.group_norm(a, 2, {weight = c, bias = d}) end,
                             {x, w, b}))
    assert.is_true(gradcheck(function(a, c, d) return F.instance_norm(a, {weight = c, bias = d}) end,
                             {x, w, b}))
    assert.is_true(gradgradcheck(function(a, c) return F.group_norm(a, 2, {weight = c}) end,
                                 {randn({2, 4, 2}), randn({4})}))
    assert.are.equal('GroupNormBackward', F.group_norm(x, 2).grad_fn:name())
  end)

  it('report bad arguments', function()
    H.raises(function() F.group_norm(flow.randn({2, 6, 3}), 4) end,
             'group_norm', 'number of channels 6', 'num_groups 4')
    H.raises(function() F.instance_norm(flow.randn({2, 3, 1})) end,
             'instance_norm', 'more than 1 spatial element')
    H.raises(function() F.instance_norm(flow.randn({2, 3, 4}), {use_input_stats = false}) end,
             'instance_norm', 'running_mean and running_var')
  end)
end)

describe('norms under autograd', function()
  it('sends grads to the input, weight and bias', function()
    local x, w, b = leaf({{1, 2, 3}, {2, 0, 1}}), leaf({1, 1, 1}), leaf({0, 0, 0})
    local y = F.layer_norm(x, 3, {weight = w, bias = b})
    y:backward(flow.ones({2, 3}, {dtype = f64}))
    H.close(b.grad, {2, 2, 2}, 1e-12)
    H.close(x.grad, {{0, 0, 0}, {0, 0, 0}}, 1e-9)   -- a constant grad has no effect on x
  end)
end)

describe('eval batch norm written into a conv output (nn.Sequential, flowvision blocks)', function()
  local nn = flow.nn

  -- a conv + norm with statistics and affine parameters of their own
  local function pair(cin, cout)
    local conv, bn = nn.Conv2d(cin, cout, 3, {padding = 1}), nn.BatchNorm2d(cout)
    flow.no_grad(function()
      bn.running_mean:copy_(flow.randn(cout) * 0.5)
      bn.running_var:copy_(flow.rand(cout) + 0.5)
      bn.weight:copy_(flow.randn(cout))
      bn.bias:copy_(flow.randn(cout))
    end)
    return conv, bn
  end

  local function same_bits(a, b, what)
    assert.are.same(a:size(), b:size())
    assert(flow.equal(a, b), what .. ': not the same bits, max diff ' .. (a - b):abs():max():item())
  end

  -- the ops a call runs, by name
  local function ops_of(fn)
    local names = {}
    local prof = flow.profiler.profile({}, fn)
    for _, e in ipairs(prof:events()) do names[e.name] = (names[e.name] or 0) + 1 end
    return names
  end

  it('gives the bits of conv then batch_norm, without a batch_norm call', function()
    flow.manual_seed(11)
    local conv, bn = pair(3, 5)
    local seq = nn.Sequential(conv, bn, nn.ReLU()):eval()
    local x = flow.randn(2, 3, 9, 7)
    local want = flow.no_grad(function() return F.relu(bn(conv(x))) end)
    local got
    local names = ops_of(function() got = flow.no_grad(function() return seq(x) end) end)
    same_bits(got, want, 'Sequential')
    assert.is_nil(names.batch_norm)
    -- the same without no_grad when nothing needs a gradient
    for _, p in ipairs(seq:parameters()) do p.requires_grad = false end
    same_bits(seq(x), want, 'no parameter requires grad')
    -- no bias, no affine
    local conv2 = nn.Conv2d(3, 4, 1, {bias = false})
    local bn2 = nn.BatchNorm2d(4, {affine = false})
    flow.no_grad(function() bn2.running_mean:copy_(flow.randn(4)); bn2.running_var:copy_(flow.rand(4) + 1) end)
    local s2 = nn.Sequential(conv2, bn2):eval()
    same_bits(flow.no_grad(function() return s2(x) end),
              flow.no_grad(function() return bn2(conv2(x)) end), 'affine = false')
  end)

  it('folds a ReLU6 after the norm into the same pass (the bits of clamp)', function()
    flow.manual_seed(15)
    for _, inplace in ipairs({true, false}) do
      local conv, bn = pair(3, 6)
      local seq = nn.Sequential(conv, bn, nn.ReLU6({inplace = inplace}), nn.Conv2d(6, 2, 1)):eval()
      local x = flow.randn(2, 3, 8, 8) * 3
      local want = flow.no_grad(function() return seq[4](F.relu6(bn(conv(x)))) end)
      local got
      local names = ops_of(function() got = flow.no_grad(function() return seq(x) end) end)
      same_bits(got, want, 'ReLU6 inplace=' .. tostring(inplace))
      assert.is_nil(names.batch_norm)
      assert.is_nil(names.clamp)
      assert.are.equal(1, names.batch_norm_eval)
    end
  end)

  it('of_batch_norm_eval: batch_norm\'s bits, the clamp, in place, gradients, errors', function()
    local core = require 'oneflow._C'
    local C = core.C
    -- bn_eval(x, {rm, rv, w, b}, lo, hi, into)
    local function bn_eval(x, t, lo, hi, into)
      local st = C.of_batch_norm_eval(x.p, t[1] and t[1].p, t[2] and t[2].p, t[3] and t[3].p,
                                      t[4] and t[4].p, 1e-5, lo or 0, hi or 0, lo and 1 or 0,
                                      hi and 1 or 0, into and into.p, core.out1)
      if st ~= 0 then return nil, core.ffi.string(C.of_last_error()) end
      return core.wrap(core.out1[0])
    end
    local function bn_stats(c, dt)
      return {flow.randn(c, {dtype = dt}), flow.rand(c, {dtype = dt}) + 0.5, flow.randn(c, {dtype = dt}),
              flow.randn(c, {dtype = dt})}
    end
    local function bn(x, t) return F.batch_norm(x, t[1], t[2], {weight = t[3], bias = t[4]}) end
    flow.manual_seed(16)
    local x, t = flow.randn(2, 3, 4, 5, {dtype = f64}), bn_stats(3, f64)
    same_bits(bn_eval(x, t, -0.5, 0.5), bn(x, t):clamp(-0.5, 0.5), 'float64')
    -- no weight, no bias
    same_bits(bn_eval(x, {t[1], t[2]}), bn(x, {t[1], t[2]}), 'no affine')
    -- non-contiguous input: batch_norm and clamp, the same values
    local xt = x:transpose(3, 4)
    same_bits(bn_eval(xt, t), bn(xt, t), 'transposed')
    -- a NaN stays NaN through the clamp, as clamp keeps it
    local xf, tf = flow.randn(1, 2, 3, 3), bn_stats(2, flow.float32)
    xf[{1, 1, 1, 1}] = 0 / 0
    local y = bn_eval(xf, tf, 0, 6)
    assert.is_true(y[{1, 1, 1, 1}]:item() ~= y[{1, 1, 1, 1}]:item())
    same_bits(y[{{}, {}, {2, 3}}], bn(xf, tf):clamp(0, 6)[{{}, {}, {2, 3}}], 'float32 clamp')
    -- into x itself
    local x0 = flow.randn(1, 2, 3, 3)
    local xi = x0:clone()
    local r = bn_eval(xi, tf, nil, nil, xi)
    assert.are.equal(C.of_tensor_storage_id(xi.p), C.of_tensor_storage_id(r.p))
    same_bits(xi, bn(x0, tf), 'in place')
    -- into a view of x's own storage that is not x: batch_norm, then copy_
    local xs = flow.randn(2, 4, 3, 3)
    local want = bn(xs:narrow(2, 1, 2), tf)
    local r2, e = bn_eval(xs:narrow(2, 1, 2), tf, nil, nil, xs:narrow(2, 3, 2))
    assert(r2, e)
    same_bits(xs:narrow(2, 3, 2), want, 'into another part of the storage')
    -- parameters needing a gradient: recorded through batch_norm
    local wg = flow.randn(3, {dtype = f64, requires_grad = true})
    bn_eval(x, {t[1], t[2], wg, t[4]}):sum():backward()
    local wg2 = wg:detach():clone():requires_grad_(true)
    bn(x, {t[1], t[2], wg2, t[4]}):sum():backward()
    H.close(wg.grad, wg2.grad, 1e-12)
    -- errors name the op, the argument, shapes and dtypes
    local _, e1 = bn_eval(x, {nil, t[2]})
    assert.matches('batch_norm_eval: running_mean and running_var are needed when not training '
                   .. '%(input %[2,3,4,5%], float64%)', e1)
    local _, e2 = bn_eval(x, {flow.randn(4, {dtype = f64}), t[2]})
    assert.matches('batch_norm_eval', e2)
    assert.matches('running_mean', e2)
  end)

  it('follows changed statistics and parameters (in-place writes, load_state_dict)', function()
    flow.manual_seed(12)
    local conv, bn = pair(2, 3)
    local seq = nn.Sequential(conv, bn):eval()
    local x = flow.randn(1, 2, 5, 5)
    local first = flow.no_grad(function() return seq(x) end)
    flow.no_grad(function() bn.running_mean:add_(1); bn.weight:mul_(2) end)
    local want = flow.no_grad(function() return bn(conv(x)) end)
    local got = flow.no_grad(function() return seq(x) end)
    same_bits(got, want, 'after in-place writes')
    assert.is_false(flow.equal(got, first))
    local function as_plain(what)
      same_bits(flow.no_grad(function() return seq(x) end),
                flow.no_grad(function() return bn(conv(x)) end), what)
    end
    local other = nn.BatchNorm2d(3)
    flow.no_grad(function() other.running_var:fill_(4) end)
    bn:load_state_dict(other:state_dict())
    as_plain('after load_state_dict')
    bn.eps = 0.5
    as_plain('after a new eps')
  end)

  it('leaves hooks, training, gradients and other dtypes to the plain calls', function()
    flow.manual_seed(13)
    local conv, bn = pair(3, 4)
    local seq = nn.Sequential(conv, bn):eval()
    local x = flow.randn(2, 3, 6, 6)
    -- a hook that keeps the conv's output sees it unchanged
    local kept
    local h = conv:register_forward_hook(function(_, _, out) kept = out end)
    local y = flow.no_grad(function() return seq(x) end)
    h:remove()
    same_bits(kept, flow.no_grad(function() return conv(x) end), 'the hooked output')
    same_bits(y, flow.no_grad(function() return bn(conv(x)) end), 'with a hook')
    -- parameters that need gradients get them, as from the plain calls
    local g = seq(x):sum()
    g:backward()
    assert.is_not_nil(bn.weight.grad)
    assert.is_not_nil(conv.weight.grad)
    -- training mode updates the running statistics
    local rm = bn.running_mean:clone()
    seq:train()
    flow.no_grad(function() return seq(x) end)
    assert.is_false(flow.equal(rm, bn.running_mean))
    -- float64: the plain calls
    local s64 = nn.Sequential(nn.Conv2d(3, 2, 1), nn.BatchNorm2d(2)):double():eval()
    local x64 = x:double()
    local names = ops_of(function() flow.no_grad(function() return s64(x64) end) end)
    assert.are.equal(1, names.batch_norm)
  end)

  it('flowvision blocks: a ResNet in eval mode gives the bits of its plain modules', function()
    flow.manual_seed(14)
    local vision = require 'flowvision'
    local m = vision.models.resnet18({num_classes = 10}):eval()
    for _, mod in ipairs(m:modules()) do
      if mod.running_var then
        flow.no_grad(function() mod.running_var:copy_(flow.rand(mod.num_features) + 0.5) end)
      end
    end
    local x = flow.randn(1, 3, 32, 32)
    local got = flow.no_grad(function() return m(x) end)
    -- a hook on every BatchNorm2d turns the in-place path off
    local hs = {}
    for _, mod in ipairs(m:modules()) do
      if mod.running_var then hs[#hs + 1] = mod:register_forward_hook(function() end) end
    end
    local want = flow.no_grad(function() return m(x) end)
    for _, h in ipairs(hs) do h:remove() end
    same_bits(got, want, 'resnet18')
  end)
end)
