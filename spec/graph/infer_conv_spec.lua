-- Convolutions, pools, resampling, losses, attention and the quantized ops of
-- a loaded graph are re-inferred before anything runs (core/ops/conv.c:
-- infer_conv_kind; pool.c: infer_pool_kind; resample.c: interp_geometry and
-- pad_geometry; loss.c: loss_plan; attention.c: check_inputs and sdpa_result;
-- quant.c: the q*_geometry functions -- the functions the ops check and
-- allocate with): a one-node graph written from scratch
-- (spec/graph/ir_build.lua) whose record or recorded shapes disagree is
-- refused at load, naming the node; one that agrees runs as the eager op.
local flow = require 'oneflow'
local B = require 'spec.graph.ir_build'

describe('saved graphs: convolutions and pools re-inferred at load', function()
  local path = os.tmpname()
  teardown(function() os.remove(path) end)
  local load = B.loader('.', path)
  local refused = B.refuser(load)
  local X = {{2, 3, 8, 8}}

  it('re-infers conv results: channels, groups, padding, stride, dilation, bias', function()
    assert.is_true((load('conv', {nsp = 2, groups = 1}, {X, {{5, 3, 3, 3}}, false}, {{{2, 5, 6, 6}}})))
    assert.is_true((load('conv', {nsp = 2, groups = 1, has = 1 + 2, stride = {2, 2}, padding = {1, 1}},
                         {X, {{4, 3, 3, 3}}, {{4}}}, {{{2, 4, 4, 4}}})))
    assert.is_true((load('conv', {nsp = 2, groups = 3}, {X, {{6, 1, 3, 3}}, false}, {{{2, 6, 6, 6}}})))
    refused('node 1 (conv): result %2 is recorded as [2,5,8,8] float32, its inputs give [2,5,6,6] float32',
            'conv', {nsp = 2, groups = 1}, {X, {{5, 3, 3, 3}}, false}, {{{2, 5, 8, 8}}})
    -- an edited padding of 11 M (the fuzzer's 3 GB of columns) is refused before any run
    refused('its inputs give [2,5,22000006,22000006] float32', 'conv',
            {nsp = 2, groups = 1, has = 2, padding = {11000000, 11000000}}, {X, {{5, 3, 3, 3}}, false},
            {{{2, 5, 6, 6}}})
    refused('node 1 (conv): the recorded inputs do not fit: conv2d: input has 3 channels but weight expects 4',
            'conv', {nsp = 2, groups = 1}, {X, {{5, 4, 3, 3}}, false}, {{{2, 5, 6, 6}}})
    refused('conv2d: expected bias of shape [5], got [4]', 'conv', {nsp = 2, groups = 1},
            {X, {{5, 3, 3, 3}}, {{4}}}, {{{2, 5, 6, 6}}})
    refused('conv2d: input and weight must have the same dtype, got float32 and float64', 'conv',
            {nsp = 2, groups = 1}, {X, {{5, 3, 3, 3}, 'float64'}, false}, {{{2, 5, 6, 6}}})
    refused('conv2d: expected a floating-point input, got int64', 'conv', {nsp = 2, groups = 1},
            {{{2, 3, 8, 8}, 'int64'}, {{5, 3, 3, 3}, 'int64'}, false}, {{{2, 5, 6, 6}, 'int64'}})
    refused('is larger than the padded input', 'conv', {nsp = 2, groups = 1},
            {X, {{5, 3, 9, 9}}, false}, {{{2, 5, 1, 1}}})
    refused('conv2d: expected input with 4 dims [N, C, H, W], got [3,8,8]', 'conv', {nsp = 2, groups = 1},
            {{{3, 8, 8}}, {{5, 3, 3, 3}}, false}, {{{2, 5, 6, 6}}})
  end)

  it('re-infers transposed convolutions with output_padding, and weight grads with their kernel size', function()
    assert.is_true((load('conv_transpose', {nsp = 2, groups = 1, has = 1 + 8, stride = {2, 2}, extra = {1, 1}},
                         {X, {{3, 4, 3, 3}}, false}, {{{2, 4, 18, 18}}})))
    refused('node 1 (conv_transpose): result %2 is recorded as [2,4,17,17] float32, its inputs give [2,4,18,18]',
            'conv_transpose', {nsp = 2, groups = 1, has = 1 + 8, stride = {2, 2}, extra = {1, 1}},
            {X, {{3, 4, 3, 3}}, false}, {{{2, 4, 17, 17}}})
    refused('conv_transpose2d: output_padding [2,2] must be non-negative and smaller than stride [2,2]',
            'conv_transpose', {nsp = 2, groups = 1, has = 1 + 8, stride = {2, 2}, extra = {2, 2}},
            {X, {{3, 4, 3, 3}}, false}, {{{2, 4, 19, 19}}})
    -- x [2,3,8,8], grad_output [2,5,6,6]: a 3x3 kernel
    assert.is_true((load('conv_weight_grad', {nsp = 2, groups = 1, has = 8, extra = {3, 3}},
                         {X, {{2, 5, 6, 6}}, false}, {{{5, 3, 3, 3}}})))
    refused('node 1 (conv_weight_grad): result %2 is recorded as [5,3,2,2] float32, its inputs give [5,3,3,3]',
            'conv_weight_grad', {nsp = 2, groups = 1, has = 8, extra = {3, 3}}, {X, {{2, 5, 6, 6}}, false},
            {{{5, 3, 2, 2}}})
    refused('conv_weight_grad2d: output size [6,6] does not fit input size [8,8] with kernel [4,4]',
            'conv_weight_grad', {nsp = 2, groups = 1, has = 8, extra = {4, 4}}, {X, {{2, 5, 6, 6}}, false},
            {{{5, 3, 4, 4}}})
    refused('conv_weight_grad2d: kernel_size is required', 'conv_weight_grad', {nsp = 2, groups = 1},
            {X, {{2, 5, 6, 6}}, false}, {{{5, 3, 3, 3}}})
  end)

  it('re-infers max, average and adaptive pools: windows, ceil mode, indices, dtypes', function()
    local P = {nsp = 2, has = 1, kernel = {2, 2}}
    assert.is_true((load('max_pool', P, {X}, {{{2, 3, 4, 4}}, {{2, 3, 4, 4}, 'int64'}})))
    assert.is_true((load('avg_pool', {nsp = 2, has = 1 + 2 + 4, kernel = {3, 3}, stride = {2, 2}, padding = {1, 1},
                                      ceil_mode = 1}, {X}, {{{2, 3, 5, 5}}})))
    assert.is_true((load('adaptive_avg_pool', {nsp = 2, has = 1, kernel = {1, 1}}, {{{2, 3, 8, 8}, 'float64'}},
                         {{{2, 3, 1, 1}, 'float64'}})))
    assert.is_true((load('adaptive_max_pool', {nsp = 2, has = 1, kernel = {3, 5}}, {{{3, 8, 8}}},
                         {{{3, 3, 5}}, {{3, 3, 5}, 'int64'}})))
    refused('node 1 (max_pool): result %1 is recorded as [2,3,3,3] float32, its inputs give [2,3,4,4] float32',
            'max_pool', P, {X}, {{{2, 3, 3, 3}}, {{2, 3, 4, 4}, 'int64'}})
    refused('node 1 (max_pool): result %2 is recorded as [2,3,4,4] float32, its inputs give [2,3,4,4] int64',
            'max_pool', P, {X}, {{{2, 3, 4, 4}}, {{2, 3, 4, 4}}})
    refused('node 1 (avg_pool): the recorded inputs do not fit: avg_pool2d: expected a floating-point input, got int64',
            'avg_pool', P, {{{2, 3, 8, 8}, 'int64'}}, {{{2, 3, 4, 4}, 'int64'}})
    refused('max_pool2d: expected input with 3 or 4 dims', 'max_pool', P, {{{8, 8}}}, {{{4, 4}}, {{4, 4}, 'int64'}})
    refused('max_pool2d: output size [0,0] is too small', 'max_pool', {nsp = 2, has = 1, kernel = {9, 9}}, {X},
            {{{2, 3, 1, 1}}, {{2, 3, 1, 1}, 'int64'}})
    refused('adaptive_avg_pool2d: expected non-empty spatial dims', 'adaptive_avg_pool',
            {nsp = 2, has = 1, kernel = {1, 1}}, {{{2, 3, 0, 8}}}, {{{2, 3, 1, 1}}})
  end)

  it('re-infers interpolate and pad results: sizes, modes, dtypes', function()
    assert.is_true((load('interpolate', {nsp = 2, size = {16, 12}}, {X}, {{{2, 3, 16, 12}}})))
    assert.is_true((load('interpolate', {nsp = 1, mode = 1, size = {5}}, {{{2, 3, 8}, 'float64'}},
                         {{{2, 3, 5}, 'float64'}})))
    refused('node 1 (interpolate): result %1 is recorded as [2,3,8,8] float32, its inputs give [2,3,16,12] float32',
            'interpolate', {nsp = 2, size = {16, 12}}, {X}, {{{2, 3, 8, 8}}})
    refused('node 1 (interpolate): the recorded inputs do not fit: interpolate: expected an input [N, C, *spatial] '
            .. 'with 1 to 3 spatial dims and 2 output sizes, got input [3,8,8] (float32)',
            'interpolate', {nsp = 2, size = {16, 12}}, {{{3, 8, 8}}}, {{{3, 16, 12}}})
    refused('interpolate: linear modes need a floating point input, got int64', 'interpolate',
            {nsp = 2, mode = 1, size = {16, 16}}, {{{2, 3, 8, 8}, 'int64'}}, {{{2, 3, 16, 16}, 'int64'}})
    assert.is_true((load('pad', {npad = 1, pad = {1, 2}}, {X}, {{{2, 3, 8, 11}}})))
    assert.is_true((load('pad', {npad = 2, pad = {1, 1, -2, 0}}, {{{2, 3, 8, 8}, 'int64'}},
                         {{{2, 3, 6, 10}, 'int64'}})))
    assert.is_true((load('pad', {npad = 2, mode = 1, pad = {3, 3, 2, 2}}, {X}, {{{2, 3, 12, 14}}})))
    refused('node 1 (pad): result %1 is recorded as [2,3,8,10] float32, its inputs give [2,3,8,11] float32',
            'pad', {npad = 1, pad = {1, 2}}, {X}, {{{2, 3, 8, 10}}})
    refused('node 1 (pad): the recorded inputs do not fit: pad: padding (-5, -5) makes dim 4 of input [2,3,8,8] '
            .. 'negative (-2)', 'pad', {npad = 1, pad = {-5, -5}}, {X}, {{{2, 3, 8, 1}}})
    refused('pad: padding (8, 8) should be less than the size 8 of dim 4 in reflect mode', 'pad',
            {npad = 1, mode = 1, pad = {8, 8}}, {X}, {{{2, 3, 8, 24}}})
    refused('pad: 2 (left, right) pairs given for a 1-d input [8] (float32); expected 1..1', 'pad',
            {npad = 2, pad = {1, 1, 1, 1}}, {{{8}}}, {{{10}}})
  end)

  it('re-infers cross_entropy and nll_loss: reductions, class indices and probabilities, weights', function()
    local L, T = {{2, 3}}, {{2}, 'int64'}
    assert.is_true((load('cross_entropy', {reduction = 1}, {L, T, false}, {{{}}})))
    assert.is_true((load('cross_entropy', {reduction = 0}, {L, T, {{3}}}, {{{2}}})))
    assert.is_true((load('cross_entropy', {reduction = 2, smoothing = 0.1}, {L, {{2, 3}}, false}, {{{}}})))
    assert.is_true((load('cross_entropy', {reduction = 0}, {{{3}, 'float64'}, {{}, 'int64'}, false},
                         {{{}, 'float64'}})))
    assert.is_true((load('nll_loss', {reduction = 0}, {{{2, 3, 4, 4}}, {{2, 4, 4}, 'int64'}, false},
                         {{{2, 4, 4}}})))
    refused('node 1 (cross_entropy): result %2 is recorded as [] float32, its inputs give [2] float32',
            'cross_entropy', {reduction = 0}, {L, T, false}, {{{}}})
    refused('node 1 (nll_loss): result %2 is recorded as [2] float32, its inputs give [] float32',
            'nll_loss', {reduction = 2}, {L, T, false}, {{{2}}})
    refused('node 1 (cross_entropy): the recorded inputs do not fit: cross_entropy: expected target of shape [2] '
            .. 'for input [2,3] (class indices), got [3]', 'cross_entropy', {reduction = 1}, {L, {{3}, 'int64'}, false},
            {{{}}})
    refused('cross_entropy: a floating target holds class probabilities and must have the input\'s shape [2,3], '
            .. 'got [2] (float32)', 'cross_entropy', {reduction = 1}, {L, {{2}}, false}, {{{}}})
    refused('cross_entropy: weight of shape [4] should be [3], one per class of the input [2,3]',
            'cross_entropy', {reduction = 1}, {L, T, {{4}}}, {{{}}})
    refused('nll_loss: target must hold integer class indices (int64), got float32 (shape [2])',
            'nll_loss', {reduction = 1}, {L, {{2}}, false}, {{{}}})
    refused('nll_loss: expected floating point input, got int64 (shape [2,3])', 'nll_loss', {reduction = 1},
            {{{2, 3}, 'int64'}, T, false}, {{{}, 'int64'}})
  end)

  it('re-infers scaled_dot_product_attention: value dims, grouped heads, masks', function()
    -- an additive float mask, a bool mask, or none (the mask is the record's one optional input)
    local Q, K, V, M = {{2, 4, 5, 8}}, {{2, 4, 6, 8}}, {{2, 4, 6, 7}}, {{1, 6}}
    assert.is_true((load('scaled_dot_product_attention', {}, {Q, K, V, M}, {{{2, 4, 5, 7}}})))
    assert.is_true((load('scaled_dot_product_attention', {causal = 1}, {Q, K, V, false}, {{{2, 4, 5, 7}}})))
    refused('node 1 (scaled_dot_product_attention): result %3 is recorded as [2,4,5,8] float32, its inputs give '
            .. '[2,4,5,7] float32', 'scaled_dot_product_attention', {}, {Q, K, V, false}, {{{2, 4, 5, 8}}})
    assert.is_true((load('scaled_dot_product_attention', {gqa = 1}, {Q, {{2, 2, 6, 8}}, {{2, 2, 6, 8}}, M},
                         {{{2, 4, 5, 8}}})))
    assert.is_true((load('scaled_dot_product_attention', {}, {Q, K, V, {{5, 6}, 'bool'}}, {{{2, 4, 5, 7}}})))
    refused('node 1 (scaled_dot_product_attention): result %4 is recorded as [2,4,5,8] float32, its inputs give '
            .. '[2,4,5,7] float32', 'scaled_dot_product_attention', {}, {Q, K, V, M}, {{{2, 4, 5, 8}}})
    refused('node 1 (scaled_dot_product_attention): the recorded inputs do not fit: scaled_dot_product_attention: '
            .. 'query [2,4,5,8] and key [2,4,6,9] differ in the last dim', 'scaled_dot_product_attention', {},
            {Q, {{2, 4, 6, 9}}, V, M}, {{{2, 4, 5, 7}}})
    refused('scaled_dot_product_attention: give attn_mask or is_causal, not both', 'scaled_dot_product_attention',
            {causal = 1}, {Q, K, V, {{5, 6}, 'bool'}}, {{{2, 4, 5, 7}}})
    refused('scaled_dot_product_attention: attn_mask [5,5] does not broadcast to the scores\' shape [2,4,5,6]',
            'scaled_dot_product_attention', {}, {Q, K, V, {{5, 5}, 'bool'}}, {{{2, 4, 5, 7}}})
    refused('scaled_dot_product_attention: query, key and value must have one dtype, got float32, float64 and float32',
            'scaled_dot_product_attention', {}, {Q, {{2, 4, 6, 8}, 'float64'}, V, M}, {{{2, 4, 5, 7}}})
    -- a traced graph without a mask (plain and causal) saves, loads and gives the eager result
    local F = flow.nn.functional
    local A = flow.nn.Graph:subclass('SdpaNoMask')
    function A.build(_, q, k, v)
      return F.scaled_dot_product_attention(q, k, v) + F.scaled_dot_product_attention(q, k, v, {is_causal = true})
    end
    local q, k, v = flow.randn(1, 2, 4, 8), flow.randn(1, 2, 4, 8), flow.randn(1, 2, 4, 8)
    local g = A()
    local want = g(q, k, v)
    g:save(path)
    assert.are.same(want:totable(), flow.nn.Graph.load(path)(q, k, v):totable())
  end)

  it('re-infers the quantized ops: linear, conv2d, max_pool2d, quantize_per_tensor', function()
    local f32, u8 = flow.float32.id, flow.uint8.id
    -- the weight's zero points and the bias may be absent (a layer without bias)
    local QX, Z5, Z1 = {{4, 3}, 'uint8'}, {{5}, 'int64'}, {{1}, 'int64'}
    assert.is_true((load('quantized_linear', {out_dtype = f32, x_scale = 1, out_scale = 1},
                         {QX, {{5, 3}, 'int8'}, {{5}}, Z5, {{5}}}, {{{4, 5}}})))
    assert.is_true((load('quantized_linear', {out_dtype = f32, x_scale = 1, out_scale = 1},
                         {QX, {{5, 3}, 'int8'}, {{5}}, false, false}, {{{4, 5}}})))
    assert.is_true((load('quantized_linear', {out_dtype = u8, x_scale = 1, out_scale = 0.5, out_zp = 3},
                         {QX, {{5, 3}, 'int8'}, {{1}}, Z1, {{5}}}, {{{4, 5}, 'uint8'}})))
    refused('node 1 (quantized_linear): result %5 is recorded as [4,5] float32, its inputs give [4,5] uint8',
            'quantized_linear', {out_dtype = u8, x_scale = 1, out_scale = 0.5}, {QX, {{5, 3}, 'int8'}, {{5}}, Z5,
            {{5}}}, {{{4, 5}}})
    refused('node 1 (quantized_linear): the recorded inputs do not fit: quantized_linear: input [4,3] and weight '
            .. '[5,4] do not fit', 'quantized_linear', {out_dtype = f32, x_scale = 1, out_scale = 1},
            {QX, {{5, 4}, 'int8'}, {{5}}, Z5, {{5}}}, {{{4, 5}}})
    refused('quantized_linear: weight must be int8 (qint8), got float32', 'quantized_linear',
            {out_dtype = f32, x_scale = 1, out_scale = 1}, {QX, {{5, 3}}, {{5}}, Z5, {{5}}}, {{{4, 5}}})
    refused('quantized_linear: weight scales must be float32 with 1 or 5 values, got float32 [3]', 'quantized_linear',
            {out_dtype = f32, x_scale = 1, out_scale = 1}, {QX, {{5, 3}, 'int8'}, {{3}}, {{3}, 'int64'}, {{5}}},
            {{{4, 5}}})
    local C = {out_dtype = f32, x_scale = 1, out_scale = 1, groups = 1, stride = {2, 2}, padding = {1, 1},
               dilation = {1, 1}}
    assert.is_true((load('quantized_conv2d', C, {{{1, 3, 8, 8}, 'uint8'}, {{4, 3, 3, 3}, 'int8'}, {{4}}, {{4}, 'int64'},
                                                 {{4}}}, {{{1, 4, 4, 4}}})))
    refused('node 1 (quantized_conv2d): result %5 is recorded as [1,4,8,8] float32, its inputs give [1,4,4,4] float32',
            'quantized_conv2d', C, {{{1, 3, 8, 8}, 'uint8'}, {{4, 3, 3, 3}, 'int8'}, {{4}}, {{4}, 'int64'}, {{4}}},
            {{{1, 4, 8, 8}}})
    refused('quantized_conv2d: input [1,3,8,8] and weight [4,2,3,3] do not fit', 'quantized_conv2d', C,
            {{{1, 3, 8, 8}, 'uint8'}, {{4, 2, 3, 3}, 'int8'}, {{4}}, {{4}, 'int64'}, {{4}}}, {{{1, 4, 4, 4}}})
    refused('quantized_conv2d: bias must be float32 [4], got float32 [3]', 'quantized_conv2d', C,
            {{{1, 3, 8, 8}, 'uint8'}, {{4, 3, 3, 3}, 'int8'}, {{4}}, {{4}, 'int64'}, {{3}}}, {{{1, 4, 4, 4}}})
    local P = {groups = 2 * 65536 + 2, stride = {2, 2}, dilation = {1, 1}}
    assert.is_true((load('quantized_max_pool2d', P, {{{1, 3, 8, 8}, 'int8'}}, {{{1, 3, 4, 4}, 'int8'}})))
    refused('node 1 (quantized_max_pool2d): result %1 is recorded as [1,3,8,8] int8, its inputs give [1,3,4,4] int8',
            'quantized_max_pool2d', P, {{{1, 3, 8, 8}, 'int8'}}, {{{1, 3, 8, 8}, 'int8'}})
    refused('quantized_max_pool2d: input must be uint8/int8 [N, C, H, W], got float32 [1,3,8,8]',
            'quantized_max_pool2d', P, {{{1, 3, 8, 8}}}, {{{1, 3, 4, 4}}})
    local QP = {out_dtype = u8, x_scale = 0.5, x_zp = 3}
    assert.is_true((load('quantize_per_tensor', QP, {X}, {{{2, 3, 8, 8}, 'uint8'}})))
    refused('node 1 (quantize_per_tensor): result %1 is recorded as [2,3,8,8] float32, its inputs give [2,3,8,8] uint8',
            'quantize_per_tensor', QP, {X}, {{{2, 3, 8, 8}}})
    refused('quantize_per_tensor: input must be float32, got float64', 'quantize_per_tensor', QP,
            {{{2, 3, 8, 8}, 'float64'}}, {{{2, 3, 8, 8}, 'uint8'}})
  end)

  it('runs loaded pad, interpolate and cross_entropy nodes as the eager ops', function()
    local x = flow.randn(2, 3, 8, 8)
    assert.is_true((load('pad', {npad = 2, mode = 1, pad = {3, 3, 2, 2}}, {X}, {{{2, 3, 12, 14}}})))
    local want = flow.nn.functional.pad(x, {3, 3, 2, 2}, {mode = 'reflect'})
    assert.is_true(flow.equal(flow.nn.Graph.load(path)(x), want))
    assert.is_true((load('interpolate', {nsp = 2, size = {16, 12}}, {X}, {{{2, 3, 16, 12}}})))
    want = flow.nn.functional.interpolate(x, {size = {16, 12}})
    assert.is_true(flow.equal(flow.nn.Graph.load(path)(x), want))
    local l, t = flow.randn(4, 5), flow.tensor({1, 5, 3, 2}, {dtype = flow.int64})
    assert.is_true((load('cross_entropy', {reduction = 0, ignore = -100, base = 1}, {{{4, 5}}, {{4}, 'int64'}, false},
                         {{{4}}})))
    want = flow.nn.functional.cross_entropy(l, t, {reduction = 'none'})
    assert.is_true(flow.allclose(flow.nn.Graph.load(path)(l, t), want, {rtol = 1e-6, atol = 1e-6}))
  end)

  it('runs a loaded convolution as the eager op', function()
    assert.is_true((load('conv', {nsp = 2, groups = 1, has = 2, padding = {1, 1}}, {X, {{4, 3, 3, 3}}, {{4}}},
                         {{{2, 4, 8, 8}}})))
    local g = flow.nn.Graph.load(path)
    local x, w, b = flow.randn(2, 3, 8, 8), flow.randn(4, 3, 3, 3), flow.randn(4)
    local want = flow.nn.functional.conv2d(x, w, b, {padding = 1})
    assert.is_true(flow.allclose(g(x, w, b), want, {rtol = 1e-5, atol = 1e-5}))
  end)
end)
