-- Creation ops, random fills, AMP loss scaling, FFTs and flow.special of a
-- loaded graph are re-inferred before anything runs, by the functions their
-- eager bodies use (their infer hooks): a one-node graph written from
-- scratch (spec/graph/ir_build.lua) whose record or recorded shapes
-- disagree is refused at load, naming the node; one that agrees runs as the
-- eager op.
local flow = require 'oneflow'
local B = require 'spec.graph.ir_build'

describe('saved graphs: creation, random, amp, fft and special ops re-inferred at load', function()
  local path = os.tmpname()
  teardown(function() os.remove(path) end)
  local load = B.loader('.', path)
  local refused = B.refuser(load)
  local F32, F64, I64 = 7, 8, 4
  local S = {{}}

  it('re-infers empty, zeros, full, rand and randn from their records', function()
    for _, op in ipairs({'empty', 'zeros', 'full', 'rand', 'randn'}) do
      assert.is_true((load(op, {ndim = 2, shape = {2, 3}, dtype = F32}, {}, {{{2, 3}}})))
      refused(('node 1 (%s): result %%0 is recorded as [2,4] float32, its record gives [2,3] float32'):format(op),
              op, {ndim = 2, shape = {2, 3}, dtype = F32}, {}, {{{2, 4}}})
      refused(('node 1 (%s): result %%0 is recorded as [2,3] float32, its record gives [2,3] float64'):format(op),
              op, {ndim = 2, shape = {2, 3}, dtype = F64}, {}, {{{2, 3}}})
    end
    refused('node 1 (zeros): the record does not fit: zeros: shape [1073741824,1073741824,1073741824] has more '
            .. 'elements than a tensor can hold', 'zeros', {ndim = 3, shape = {2 ^ 30, 2 ^ 30, 2 ^ 30}, dtype = F32},
            {}, {{{2, 3}}})
    refused('node 1 (rand): the record does not fit: rand: dtype must be floating point, got int64',
            'rand', {ndim = 1, shape = {3}, dtype = I64}, {}, {{{3}, 'int64'}})
    assert.is_true((load('zeros', {ndim = 1, shape = {3}, dtype = I64}, {}, {{{3}, 'int64'}})))
    assert.is_true((load('full', {ndim = 1, shape = {3}, value = 2.5, dtype = F32}, {}, {{{3}}})))
    assert.are.same({2.5, 2.5, 2.5}, flow.nn.Graph.load(path)():totable())
  end)

  it('re-infers eye, arange and linspace: their element counts and refusals', function()
    assert.is_true((load('eye', {a = 2, b = 3, dtype = F32}, {}, {{{2, 3}}})))
    assert.is_true((load('eye', {a = 2, b = -1, dtype = F32}, {}, {{{2, 2}}})))
    refused('node 1 (eye): result %0 is recorded as [3,2] float32, its record gives [2,3] float32',
            'eye', {a = 2, b = 3, dtype = F32}, {}, {{{3, 2}}})
    refused('node 1 (eye): the record does not fit: eye: n 2.5 is not an integer', 'eye',
            {a = 2.5, b = 2, dtype = F32}, {}, {{{2, 2}}})
    assert.is_true((load('arange', {a = 0, b = 3, c = 0.5, dtype = F32}, {}, {{{6}}})))
    assert.is_true((load('arange', {a = 1, b = 10, c = 3, dtype = I64}, {}, {{{3}, 'int64'}})))
    refused('node 1 (arange): result %0 is recorded as [3] float32, its record gives [4] float32',
            'arange', {a = 0, b = 3.5, c = 1, dtype = F32}, {}, {{{3}}})
    refused('node 1 (arange): the record does not fit: arange: upper bound and step have inconsistent signs',
            'arange', {a = 0, b = -0.5, c = 1, dtype = F32}, {}, {{{0}}})
    assert.is_true((load('linspace', {a = 0, b = 1, c = 5, dtype = F64}, {}, {{{5}, 'float64'}})))
    refused('node 1 (linspace): the record does not fit: linspace: steps 2.5 is not an integer',
            'linspace', {a = 0, b = 1, c = 2.5, dtype = F32}, {}, {{{2}}})
    refused('node 1 (linspace): result %0 is recorded as [5] float32, its record gives [4] float32',
            'linspace', {a = 0, b = 1, c = 4, dtype = F32}, {}, {{{5}}})
    -- what loads computes the eager result
    assert.is_true((load('arange', {a = 1, b = 10, c = 3, dtype = I64}, {}, {{{3}, 'int64'}})))
    assert.are.same(flow.arange(1, 10, 3):totable(), flow.nn.Graph.load(path)():totable())
    assert.is_true((load('linspace', {a = 0, b = 1, c = 5, dtype = F64}, {}, {{{5}, 'float64'}})))
    assert.are.same(flow.linspace(0, 1, 5, {dtype = flow.float64}):totable(), flow.nn.Graph.load(path)():totable())
  end)

  it('re-infers randperm: [n] in a dtype that holds n - 1', function()
    assert.is_true((load('randperm', {n = 5, dtype = I64}, {}, {{{5}, 'int64'}})))
    refused('node 1 (randperm): result %0 is recorded as [4] int64, its record gives [5] int64',
            'randperm', {n = 5, dtype = I64}, {}, {{{4}, 'int64'}})
    refused('node 1 (randperm): the record does not fit: randperm: values 0..299 do not fit dtype int8',
            'randperm', {n = 300, dtype = 2}, {}, {{{300}, 'int8'}})
    assert.is_true((load('randperm', {n = 5, dtype = I64}, {}, {{{5}, 'int64'}})))
    local got = flow.nn.Graph.load(path)():totable()
    table.sort(got)
    assert.are.same({0, 1, 2, 3, 4}, got)
  end)

  it('checks the fills\' tensors and bernoulli\'s result', function()
    local X = {{2, 3}}
    assert.is_true((load('fill_', {v = 1}, {{{2}, 'int64'}}, {})))
    assert.is_true((load('uniform_', {a = 0, b = 1}, {X}, {})))
    assert.is_true((load('normal_', {a = 0, b = 1}, {{{2}, 'float64'}}, {})))
    assert.is_true((load('randint_', {a = 0, b = 10}, {{{4}, 'int64'}}, {})))
    assert.is_true((load('bernoulli_', {a = 0.5}, {{{4}, 'int64'}}, {})))
    refused('node 1 (uniform_): the recorded inputs do not fit: uniform_: expected a floating dtype, got int64 '
            .. '(tensor [4])', 'uniform_', {a = 0, b = 1}, {{{4}, 'int64'}}, {})
    refused('node 1 (normal_): the recorded inputs do not fit: normal_: expected a floating dtype, got int32',
            'normal_', {a = 0, b = 1}, {{{4}, 'int32'}}, {})
    refused('node 1 (randint_): the recorded inputs do not fit: randint_: range [0, 300) does not fit dtype int8',
            'randint_', {a = 0, b = 300}, {{{4}, 'int8'}}, {})
    refused('node 1 (randint_): the recorded inputs do not fit: randint_: low 0.5 is not an integer',
            'randint_', {a = 0.5, b = 3}, {{{4}, 'int64'}}, {})
    assert.is_true((load('bernoulli', {}, {{{2, 3}, 'float64'}}, {{{2, 3}, 'float64'}})))
    refused('node 1 (bernoulli): result %1 is recorded as [2,3] float32, its inputs give [2,3] float64',
            'bernoulli', {}, {{{2, 3}, 'float64'}}, {X})
    refused('node 1 (bernoulli): result %1 is recorded as [3,2] float32, its inputs give [2,3] float32',
            'bernoulli', {}, {X}, {{{3, 2}}})
    assert.is_true((load('bernoulli', {}, {X}, {X})))
    local g = flow.nn.Graph.load(path)
    assert.are.same({{1, 0, 1}, {0, 1, 0}}, g(flow.tensor({{1, 0, 1}, {0, 1, 0}})):totable())
  end)

  it('checks amp_unscale_ and amp_update_scale_ operands', function()
    local X, I32 = {{2, 3}}, {{}, 'int32'}
    assert.is_true((load('amp_unscale_', {}, {X, S, S}, {})))
    assert.is_true((load('amp_unscale_', {}, {{{4}, 'float64'}, {{1}}, S}, {})))
    refused('node 1 (amp_unscale_): the recorded inputs do not fit: amp_unscale_: scale must be a float32 tensor '
            .. 'with one element, got [2] float32', 'amp_unscale_', {}, {X, {{2}}, S}, {})
    refused('amp_unscale_: found_inf must be a float32 tensor with one element, got [] float64',
            'amp_unscale_', {}, {X, S, {{}, 'float64'}}, {})
    refused('amp_unscale_: the grad must be a contiguous float32 or float64 tensor, got int64',
            'amp_unscale_', {}, {{{2}, 'int64'}, S, S}, {})
    local ok = {growth = 2, backoff = 0.5, interval = 1}
    assert.is_true((load('amp_update_scale_', ok, {S, I32, S}, {})))
    refused('node 1 (amp_update_scale_): the recorded inputs do not fit: amp_update_scale_: growth_tracker must be '
            .. 'a int32 tensor with one element, got [] int64', 'amp_update_scale_', ok, {S, {{}, 'int64'}, S}, {})
    refused('amp_update_scale_: scale must be a float32 tensor with one element, got [3] float32',
            'amp_update_scale_', ok, {{{3}}, I32, S}, {})
  end)

  it('re-infers fft_c2c, fft_r2c, fft_c2r, view_as_real and view_as_complex', function()
    local C = {{2, 3}, 'complex64'}
    assert.is_true((load('fft_c2c', {ndims = 1, dims = {1}, kind = 0, forward = 1}, {C}, {C})))
    assert.is_true((load('fft_r2c', {ndims = 2, dims = {0, 1}, kind = 1, forward = 1}, {{{4, 6}, 'float64'}},
                         {{{4, 4}, 'complex128'}})))
    assert.is_true((load('fft_c2r', {ndims = 1, dims = {1}, kind = 2, last_size = 4}, {C}, {{{2, 4}}})))
    refused('node 1 (fft_r2c): result %1 is recorded as [2,4] complex64, its inputs give [2,3] complex64',
            'fft_r2c', {ndims = 1, dims = {1}, kind = 1, forward = 1}, {{{2, 4}}}, {{{2, 4}, 'complex64'}})
    refused('node 1 (fft_c2c): result %1 is recorded as [2,3] complex128, its inputs give [2,3] complex64',
            'fft_c2c', {ndims = 1, dims = {1}, kind = 0, forward = 1}, {C}, {{{2, 3}, 'complex128'}})
    refused('node 1 (fft_c2c): the recorded inputs do not fit: fft_c2c: input must be complex64 or complex128, '
            .. 'got float32', 'fft_c2c', {ndims = 1, dims = {1}, kind = 0, forward = 1}, {{{2, 3}}}, {C})
    refused('node 1 (fft_c2r): the recorded inputs do not fit: fft_c2r: output size 8 along dim 2 needs 5 input '
            .. 'entries, got 3', 'fft_c2r', {ndims = 1, dims = {1}, kind = 2, last_size = 8}, {C}, {{{2, 8}}})
    refused('fft_c2c: dim 2 repeated', 'fft_c2c', {ndims = 2, dims = {1, 1}, kind = 0, forward = 1}, {C}, {C})
    assert.is_true((load('view_as_real', {}, {C}, {{{2, 3, 2}}})))
    assert.is_true((load('view_as_complex', {}, {{{2, 3, 2}, 'float64'}}, {{{2, 3}, 'complex128'}})))
    refused('node 1 (view_as_real): result %1 is recorded as [2,3] float32, its inputs give [2,3,2] float32',
            'view_as_real', {}, {C}, {{{2, 3}}})
    refused('node 1 (view_as_complex): the recorded inputs do not fit: view_as_complex: the last dim must have '
            .. 'size 2', 'view_as_complex', {}, {{{2, 3}}}, {{{2}, 'complex64'}})
    refused('view_as_real: input must be complex64 or complex128, got float32', 'view_as_real', {},
            {{{2, 3}}}, {{{2, 3, 2}}})
    -- what loads computes the eager transform
    assert.is_true((load('fft_r2c', {ndims = 1, dims = {0}, kind = 1, forward = 1}, {{{8}}}, {{{5}, 'complex64'}})))
    local x = flow.randn(8)
    local want = flow.view_as_real(flow.fft.rfft(x)):totable()
    local got = flow.view_as_real(flow.nn.Graph.load(path)(x)):totable()
    for i = 1, 5 do
      for j = 1, 2 do assert.is_true(math.abs(want[i][j] - got[i][j]) < 1e-5) end
    end
  end)

  it('re-infers special results: arity, bool inputs, the floating dtype, the broadcast', function()
    local C = flow._C.C
    local ERFINV, ZETA, POLY = C.OF_SP_ERFINV, C.OF_SP_ZETA, C.OF_SP_POLYGAMMA
    assert.is_true((load('special', {fn = ERFINV}, {{{3}}}, {{{3}}})))
    assert.is_true((load('special', {fn = ERFINV}, {{{3}, 'int64'}}, {{{3}}})))         -- integers: float32
    assert.is_true((load('special', {fn = ZETA}, {{{3, 1}}, {{4}, 'float64'}}, {{{3, 4}, 'float64'}})))
    refused('node 1 (special): result %2 is recorded as [3,4] float32, its inputs give [3,4] float64',
            'special', {fn = ZETA}, {{{3, 1}}, {{4}, 'float64'}}, {{{3, 4}}})
    refused('node 1 (special): result %1 is recorded as [3] int64, its inputs give [3] float32',
            'special', {fn = ERFINV}, {{{3}, 'int64'}}, {{{3}, 'int64'}})
    refused('node 1 (special): the recorded inputs do not fit: special.zeta: expected 2 tensor inputs, got 1',
            'special', {fn = ZETA}, {{{3}}}, {{{3}}})
    refused('node 1 (special): the recorded inputs do not fit: special.erfinv: not supported for bool tensors',
            'special', {fn = ERFINV}, {{{3}, 'bool'}}, {{{3}}})
    refused('special.polygamma: n must be a non-negative integer, got 0.5', 'special', {fn = POLY, p = 0.5},
            {{{3}}}, {{{3}}})
    refused('node 1 (special): the recorded inputs do not fit: zeta: shapes [3] and [4] cannot be broadcast',
            'special', {fn = ZETA}, {{{3}}, {{4}}}, {{{3}}})
    assert.is_true((load('special', {fn = ERFINV}, {{{3}}}, {{{3}}})))
    local x = flow.tensor({-0.5, 0, 0.5})
    assert.are.same(flow.special.erfinv(x):totable(), flow.nn.Graph.load(path)(x):totable())
  end)

  it('re-infers the graph-only relu_max_pool and its backward', function()
    local X, P, K = {{2, 3, 4, 6}}, {{2, 3, 2, 3}}, {kernel = {2, 2}, ['in'] = {4, 6}}
    local CODE = {{2, 3, 2, 3}, 'int32'}
    assert.is_true((load('relu_max_pool', K, {X}, {P, CODE})))
    assert.is_true((load('relu_max_pool_backward', K, {P, CODE}, {X})))
    refused('node 1 (relu_max_pool): result %2 is recorded as [2,3,2,3] uint8, its inputs give [2,3,2,3] int32',
            'relu_max_pool', K, {X}, {P, {{2, 3, 2, 3}, 'uint8'}})
    refused('node 1 (relu_max_pool): result %1 is recorded as [2,3,2,2] float32, its inputs give [2,3,2,3] float32',
            'relu_max_pool', K, {X}, {{{2, 3, 2, 2}}, CODE})
    refused('node 1 (relu_max_pool): the recorded inputs do not fit: relu_max_pool: input [2,3,4,4] float32 does '
            .. 'not match the record', 'relu_max_pool', K, {{{2, 3, 4, 4}}}, {P, CODE})
    refused('node 1 (relu_max_pool_backward): the recorded inputs do not fit: relu_max_pool_backward: grad '
            .. '[2,3,2,3] float32 and code [2,3,2,3] int64 do not match', 'relu_max_pool_backward', K,
            {P, {{2, 3, 2, 3}, 'int64'}}, {X})
    refused('node 1 (relu_max_pool_backward): result %2 is recorded as [2,3,4,4] float32, its inputs give '
            .. '[2,3,4,6] float32', 'relu_max_pool_backward', K, {P, CODE}, {{{2, 3, 4, 4}}})
  end)

  it('re-infers the graph-only conv_fused as conv, and checks its residual and record', function()
    local X, W, Y = {{2, 3, 6, 6}}, {{4, 3, 3, 3}}, {{2, 4, 6, 6}}
    local K = {nsp = 2, has = 7, groups = 1, stride = {1, 1}, padding = {1, 1}, dilation = {1, 1}, act = 1}
    assert.is_true((load('conv_fused', K, {X, W, {{4}}, Y}, {Y})))
    local x, w, b, r = flow.randn(2, 3, 6, 6), flow.randn(4, 3, 3, 3), flow.randn(4), flow.randn(2, 4, 6, 6)
    local want = flow.nn.functional.relu(flow.nn.functional.conv2d(x, w, b, {padding = 1}) + r)
    local got = flow.nn.Graph.load(path)(x, w, b, r)
    assert.is_true((got - want):abs():max():item() < 1e-5)
    refused('node 1 (conv_fused): result %4 is recorded as [2,4,5,5] float32, its inputs give [2,4,6,6] float32',
            'conv_fused', K, {X, W, {{4}}, Y}, {{{2, 4, 5, 5}}})
    refused('node 1 (conv_fused): the recorded inputs do not fit: conv_fused: the residual [2,4,5,5] float32 does '
            .. 'not match the result [2,4,6,6] float32', 'conv_fused', K, {X, W, {{4}}, {{2, 4, 5, 5}}}, {Y})
    refused('conv_fused: bad record (attrs.act and its bounds)', 'conv_fused',
            {nsp = 2, has = 7, groups = 1, stride = {1, 1}, padding = {1, 1}, dilation = {1, 1}, act = 2},
            {X, W, {{4}}, Y}, {Y})
    refused('conv_fused: bad record (attrs.stride, padding or dilation)', 'conv_fused',
            {nsp = 2, has = 7, groups = 1, stride = {0, 1}, padding = {1, 1}, dilation = {1, 1}},
            {X, W, {{4}}}, {Y})
  end)
end)
