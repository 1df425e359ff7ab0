-- Convolutions and pools of a loaded graph are re-inferred before anything
-- runs (core/ops/conv.c: infer_conv_kind; core/ops/pool.c: infer_pool_kind;
-- by the geometry functions the ops check and allocate with): a one-node graph written from scratch
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

  it('runs a loaded convolution as the eager op', function()
    assert.is_true((load('conv', {nsp = 2, groups = 1, has = 2, padding = {1, 1}}, {X, {{4, 3, 3, 3}}, {{4}}},
                         {{{2, 4, 8, 8}}})))
    local g = flow.nn.Graph.load(path)
    local x, w, b = flow.randn(2, 3, 8, 8), flow.randn(4, 3, 3, 3), flow.randn(4)
    local want = flow.nn.functional.conv2d(x, w, b, {padding = 1})
    assert.is_true(flow.allclose(g(x, w, b), want, {rtol = 1e-5, atol = 1e-5}))
  end)
end)
