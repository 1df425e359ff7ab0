-- More op kinds of a loaded graph re-inferred before anything runs, each by
-- the plan function its eager body checks and allocates with (cat_plan and
-- stack_plan in core/ops/shape.c, of_copy_fits in core/tensor/layout.c): a
-- one-node graph written from scratch (spec/graph/ir_build.lua) whose
-- recorded shapes or dtypes disagree is refused at load, naming the node;
-- one that agrees runs as the eager op.
local flow = require 'oneflow'
local B = require 'spec.graph.ir_build'

describe('saved graphs: op results re-inferred at load', function()
  local path = os.tmpname()
  teardown(function() os.remove(path) end)
  local load = B.loader('.', path)
  local refused = B.refuser(load)

  it('re-infers cat and stack: the joined sizes, promotion, legacy empty inputs', function()
    local A, C = {{2, 3}}, {{4, 3}}
    assert.is_true((load('cat', {v = 0}, {A, C}, {{{6, 3}}})))
    assert.is_true((load('cat', {v = -1}, {A, {{2, 5}, 'float64'}}, {{{2, 8}, 'float64'}})))
    assert.is_true((load('cat', {v = 0}, {A, {{0}}, A}, {{{4, 3}}})))          -- a legacy empty [0] is skipped
    assert.is_true((load('stack', {v = 1}, {A, A, A}, {{{2, 3, 3}}})))
    refused('node 1 (cat): result %2 is recorded as [5,3] float32, its inputs give [6,3] float32',
            'cat', {v = 0}, {A, C}, {{{5, 3}}})
    refused('node 1 (cat): the recorded inputs do not fit: cat: sizes must match except in dim 1: '
            .. 'tensor 1 has shape [2,3], tensor 2 has shape [4,4] (dim 2: 3 vs 4)', 'cat', {v = 0}, {A, {{4, 4}}},
            {{{6, 3}}})
    refused('cat: zero-dimensional tensor (at position 2) cannot be concatenated', 'cat', {v = 0}, {A, {{}}},
            {{{3, 3}}})
    refused('result %2 is recorded as [4,3] float32, its inputs give [4,3] float64', 'cat', {v = 0},
            {A, {{2, 3}, 'float64'}}, {{{4, 3}}})
    refused('node 1 (stack): the recorded inputs do not fit: stack: expects each tensor to be equal size, '
            .. 'but got [2,3] at entry 1 and [4,3] at entry 2', 'stack', {v = 0}, {A, C}, {{{2, 2, 3}}})
    refused('node 1 (stack): result %2 is recorded as [2,3,2] float32, its inputs give [2,2,3] float32',
            'stack', {v = 1}, {A, A}, {{{2, 3, 2}}})
    assert.is_true((load('cat', {v = 1}, {A, A}, {{{2, 6}}})))
    local g = flow.nn.Graph.load(path)
    local a, b = flow.randn(2, 3), flow.randn(2, 3)
    assert.are.same(flow.cat({a, b}, 2):totable(), g(a, b):totable())
  end)

  it('checks copy_ (no results): the source broadcasts to the destination', function()
    assert.is_true((load('copy_', {}, {{{2, 3}}, {{3}, 'float64'}}, {})))
    assert.is_true((load('copy_', {}, {{{2, 3}}, {{1, 3}, 'int64'}}, {})))
    refused('copy_: source [1,1,3] does not broadcast to destination [2,3]', 'copy_', {}, {{{2, 3}}, {{1, 1, 3}}}, {})
    refused('node 1 (copy_): the recorded inputs do not fit: copy_: shapes [2,3] and [4] cannot be '
            .. 'broadcast (dim 2: 3 vs 4)', 'copy_', {}, {{{2, 3}}, {{4}}}, {})
    refused('copy_: shapes [2,3] and [3,3] cannot be broadcast (dim 1: 2 vs 3)', 'copy_', {}, {{{2, 3}}, {{3, 3}}}, {})
    refused('copy_: source [2,2,3] does not broadcast to destination [2,3]', 'copy_', {}, {{{2, 3}}, {{2, 2, 3}}}, {})
  end)
end)
