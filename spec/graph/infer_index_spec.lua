-- Index ops of a loaded graph are re-inferred before anything runs
-- (core/ops/index.c: gather_plan, index_select_plan, scatter_plan,
-- index_add_plan, sort_plan, one_hot_check / one_hot_result -- the very
-- functions the eager bodies check and allocate with): a one-node graph
-- written from scratch (spec/graph/ir_build.lua) whose recorded shapes
-- disagree is refused at load, naming the node; one that agrees runs as the
-- eager op.
local flow = require 'oneflow'
local B = require 'spec.graph.ir_build'

describe('saved graphs: index ops re-inferred at load', function()
  local path = os.tmpname()
  teardown(function() os.remove(path) end)
  local load = B.loader('.', path)
  local refused = B.refuser(load)
  local X = {{2, 3, 4}}
  local L = function(shape) return {shape, 'int64'} end

  it('re-infers gather: the index\'s shape, the input\'s dtype', function()
    assert.is_true((load('gather', {dim = 1}, {X, L{2, 5, 4}}, {{{2, 5, 4}}})))
    assert.is_true((load('gather', {dim = 0}, {{{3}, 'float64'}, {{2}, 'int32'}}, {{{2}, 'float64'}})))
    refused('node 1 (gather): result %2 is recorded as [2,3,4] float32, its inputs give [2,5,4] float32',
            'gather', {dim = 1}, {X, L{2, 5, 4}}, {X})
    refused('result %2 is recorded as [2,5,4] int64, its inputs give [2,5,4] float32',
            'gather', {dim = 1}, {X, L{2, 5, 4}}, {L{2, 5, 4}})
    refused('node 1 (gather): the recorded inputs do not fit: gather: index [2,5] must have as many '
            .. 'dims as the input [2,3,4] (float32)', 'gather', {dim = 1}, {X, L{2, 5}}, {{{2, 5}}})
    refused('node 1 (gather): the recorded inputs do not fit: gather: index [2,3,5] is larger than '
            .. 'the input [2,3,4] in dim 3 (5 > 4); only dim 2 may be larger',
            'gather', {dim = 1}, {X, L{2, 3, 5}}, {{{2, 3, 5}}})
    refused('the recorded inputs do not fit: gather: index must be an int64 (or int32) tensor, got float32',
            'gather', {dim = 1}, {X, X}, {X})
  end)

  it('re-infers index_select: dim sized by the index\'s count', function()
    assert.is_true((load('index_select', {dim = 2}, {X, L{5}}, {{{2, 3, 5}}})))
    assert.is_true((load('index_select', {dim = 0}, {X, L{}}, {{{1, 3, 4}}})))
    refused('node 1 (index_select): result %2 is recorded as [2,3,4] float32, its inputs give '
            .. '[2,3,5] float32', 'index_select', {dim = 2}, {X, L{5}}, {X})
    refused('node 1 (index_select): the recorded inputs do not fit: index_select: index must be '
            .. '0-d or 1-d, got shape [2,2]', 'index_select', {dim = 0}, {X, L{2, 2}}, {X})
  end)

  it('re-infers scatter and index_add: the input\'s shape and dtype', function()
    local I = L{2, 2, 4}
    assert.is_true((load('scatter', {dim = 1, has_src = 1}, {X, I, X}, {X})))
    assert.is_true((load('scatter', {dim = 1, use_value = 1, value = 2}, {X, I, false}, {X})))
    refused('node 1 (scatter): result %3 is recorded as [2,2,4] float32, its inputs give [2,3,4] float32',
            'scatter', {dim = 1, has_src = 1}, {X, I, X}, {{{2, 2, 4}}})
    refused('node 1 (scatter): the recorded inputs do not fit: scatter: src [2,4] must have '
            .. 'as many dims as the index [2,2,4]', 'scatter', {dim = 1, has_src = 1}, {X, I, {{2, 4}}}, {X})
    refused('scatter: index [2,2,4] is larger than src [2,1,4] in dim 2 (2 > 1)',
            'scatter', {dim = 1, has_src = 1}, {X, I, {{2, 1, 4}}}, {X})
    refused('scatter_add: index [3,2,4] is larger than the input [2,3,4] in dim 1',
            'scatter', {dim = 1, has_src = 1, reduce = 1}, {X, L{3, 2, 4}, X}, {X})
    refused('scatter: src tensor or value required', 'scatter', {dim = 1}, {X, I, false}, {X})

    assert.is_true((load('index_add', {dim = 1, alpha = 1}, {X, L{2}, {{2, 2, 4}}}, {X})))
    refused('node 1 (index_add): result %3 is recorded as [2,2,4] float32, its inputs give [2,3,4] float32',
            'index_add', {dim = 1, alpha = 1}, {X, L{2}, {{2, 2, 4}}}, {{{2, 2, 4}}})
    refused('node 1 (index_add): the recorded inputs do not fit: index_add: source [2,3,4] must match '
            .. 'the input [2,3,4] except in dim 2, whose size must be the number of indices (2)',
            'index_add', {dim = 1, alpha = 1}, {X, L{2}, X}, {X})
    refused('index_add: alpha 0.5 must be an integer for an input of dtype int64',
            'index_add', {dim = 0, alpha = 0.5}, {L{2}, L{2}, L{2}}, {L{2}})
  end)

  it('re-infers sort and topk: values in the input\'s dtype, int64 indices', function()
    assert.is_true((load('sort', {dim = -1}, {X}, {X, L{2, 3, 4}})))
    assert.is_true((load('topk', {k = 2, dim = 1}, {X}, {{{2, 2, 4}}, L{2, 2, 4}})))
    refused('node 1 (sort): result %2 is recorded as [2,3,4] float32, its inputs give [2,3,4] int64',
            'sort', {dim = -1}, {X}, {X, X})
    refused('node 1 (topk): result %1 is recorded as [2,3,4] float32, its inputs give [2,2,4] float32',
            'topk', {k = 2, dim = 1}, {X}, {X, L{2, 2, 4}})
    -- a k past the dim's size is refused by the record's range check first
    refused('node 1 (topk): attrs.k: 5 is out of range for a dim of size 3',
            'topk', {k = 5, dim = 1}, {X}, {{{2, 5, 4}}, L{2, 5, 4}})
  end)

  it('re-infers one_hot with a class count; -1 (from the data) is checked as it runs', function()
    assert.is_true((load('one_hot', {n = 3}, {L{4}}, {L{4, 3}})))
    assert.is_true((load('one_hot', {n = -1}, {L{4}}, {L{4, 7}})))   -- data-dependent: rank, dtype
    refused('node 1 (one_hot): result %1 is recorded as [4,5] int64, its inputs give [4,3] int64',
            'one_hot', {n = 3}, {L{4}}, {L{4, 5}})
    refused('node 1 (one_hot): the recorded inputs do not fit: one_hot: index must be an int64 '
            .. '(or int32) tensor, got float32', 'one_hot', {n = 3}, {{{4}}}, {L{4, 3}})
  end)

  it('re-infers max / min, argmax and var: the reduced shape, their dtypes', function()
    assert.is_true((load('max_dim', {dim = 1, is_max = 1}, {X}, {{{2, 4}}, L{2, 4}})))
    assert.is_true((load('max_dim', {dim = -1, keepdim = 1}, {X}, {{{2, 3, 1}}, L{2, 3, 1}})))
    refused('node 1 (max_dim): result %2 is recorded as [2,4] float32, its inputs give [2,4] int64',
            'max_dim', {dim = 1, is_max = 1}, {X}, {{{2, 4}}, {{2, 4}}})
    refused('node 1 (max_dim): the recorded inputs do not fit: max: expected reduction dim 2 to have '
            .. 'non-zero size', 'max_dim', {dim = 1, is_max = 1}, {{{2, 0, 4}}}, {{{2, 4}}, L{2, 4}})
    assert.is_true((load('argmax', {dim = 2, is_max = 1}, {X}, {L{2, 3}})))
    assert.is_true((load('argmax', {dim = -100, is_max = 1}, {X}, {L{}})))           -- all dims
    assert.is_true((load('argmax', {dim = -100, keepdim = 1, is_max = 1}, {X}, {L{1, 1, 1}})))
    refused('node 1 (argmax): result %1 is recorded as [] int64, its inputs give [1,1,1] int64',
            'argmax', {dim = -100, keepdim = 1, is_max = 1}, {X}, {L{}})
    refused('node 1 (argmax): the recorded inputs do not fit: argmax: cannot take the maximum of an '
            .. 'empty tensor', 'argmax', {dim = -100, is_max = 1}, {{{2, 0}}}, {L{}})
    assert.is_true((load('var', {ndims = 1, dims = {1}, correction = 1}, {X}, {{{2, 4}}})))
    assert.is_true((load('var', {correction = 1, keepdim = 1}, {X}, {{{1, 1, 1}}})))
    refused('node 1 (var): result %1 is recorded as [2,4] float32, its inputs give [2,3] float32',
            'var', {ndims = 1, dims = {2}, correction = 1}, {X}, {{{2, 4}}})
    refused('node 1 (var): the recorded inputs do not fit: var: expected a floating point input, got '
            .. 'integral dtype int64', 'var', {correction = 1}, {L{2}}, {L{}})
  end)

  it('re-infers cat and stack: the summed or new dim, the promoted dtype', function()
    assert.is_true((load('cat', {v = 1}, {X, {{2, 5, 4}}}, {{{2, 8, 4}}})))
    assert.is_true((load('cat', {v = 0}, {X, {{2, 3, 4}, 'float64'}}, {{{4, 3, 4}, 'float64'}})))
    refused('node 1 (cat): result %2 is recorded as [2,3,4] float32, its inputs give [2,8,4] float32',
            'cat', {v = 1}, {X, {{2, 5, 4}}}, {X})
    refused('node 1 (cat): the recorded inputs do not fit: cat: sizes must match except in dim 2: '
            .. 'tensor 1 has shape [2,3,4], tensor 2 has shape [2,5,5] (dim 3: 4 vs 5)',
            'cat', {v = 1}, {X, {{2, 5, 5}}}, {{{2, 8, 4}}})
    assert.is_true((load('stack', {v = 1}, {X, X, X}, {{{2, 3, 3, 4}}})))
    refused('node 1 (stack): result %2 is recorded as [2,3,4] float32, its inputs give [2,2,3,4] float32',
            'stack', {v = 1}, {X, X}, {X})
    refused('node 1 (stack): the recorded inputs do not fit: stack: expects each tensor to be equal '
            .. 'size, but got [2,3,4] at entry 1 and [2,3] at entry 2', 'stack', {v = 0}, {X, {{2, 3}}},
            {{{2, 2, 3, 4}}})
  end)

  it('re-infers as_strided: the record\'s shape, a view that reaches before the storage refused', function()
    assert.is_true((load('as_strided', {ndim = 2, shape = {3, 2}, strides = {2, 1}}, {X}, {{{3, 2}}})))
    refused('node 1 (as_strided): result %1 is recorded as [6] float32, its inputs give [3,2] float32',
            'as_strided', {ndim = 2, shape = {3, 2}, strides = {2, 1}}, {X}, {{{6}}})
    refused('node 1 (as_strided): the recorded inputs do not fit: as_strided: a view of shape [3,2], '
            .. 'strides [-2,1] and offset 0 reaches outside', 'as_strided',
            {ndim = 2, shape = {3, 2}, strides = {-2, 1}}, {X}, {{{3, 2}}})
  end)

  it('runs a loaded gather, index_select, topk and one_hot as the eager ops', function()
    local x = flow.randn(2, 3, 4)
    local idx = flow.tensor({{{1, 3, 2, 1}, {3, 3, 1, 2}}, {{2, 1, 1, 3}, {1, 2, 3, 3}}}, {dtype = flow.int64})
    assert.is_true((load('gather', {dim = 1, base = 1}, {X, L{2, 2, 4}}, {{{2, 2, 4}}})))
    assert.are.same(x:gather(2, idx):totable(), flow.nn.Graph.load(path)(x, idx):totable())
    local sel = flow.tensor({3, 1}, {dtype = flow.int64})
    assert.is_true((load('index_select', {dim = 2, base = 1}, {X, L{2}}, {{{2, 3, 2}}})))
    assert.are.same(x:index_select(3, sel):totable(), flow.nn.Graph.load(path)(x, sel):totable())
    assert.is_true((load('topk', {k = 2, dim = 1, flag1 = 1, flag2 = 1, base = 1}, {X},
                         {{{2, 2, 4}}, L{2, 2, 4}})))
    local v, i = flow.nn.Graph.load(path)(x)
    local ev, ei = x:topk(2, 2)
    assert.are.same(ev:totable(), v:totable())
    assert.are.same(ei:totable(), i:totable())
    local ids = flow.tensor({1, 3, 2}, {dtype = flow.int64})
    assert.is_true((load('one_hot', {n = 4, base = 1}, {L{3}}, {L{3, 4}})))
    assert.are.same(flow.one_hot(ids, 4):totable(), flow.nn.Graph.load(path)(ids):totable())
  end)
end)
