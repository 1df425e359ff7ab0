-- Backward rules of the shape and index ops (core/ops/shape.c, index.c),
-- checked against central differences in float64.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local gradcheck = flow.autograd.gradcheck

-- gradgradcheck's finite differences evaluate the first-grad function under
-- no_grad, where autograd.grad can't run; grad is enabled inside fn so the
-- check holds either way.
local function gradgradcheck(fn, inputs, opts)
  return flow.autograd.gradgradcheck(function(...) return flow.enable_grad(fn, ...) end,
                                     inputs, opts)
end

-- Deterministic float64 leaves with distinct, well separated values (sort
-- and topk must not reorder under the finite-difference step).
local seed = 0
local function leaf(...)
  local shape = {...}
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local v = {}
  for i = 1, n do
    seed = seed + 1
    v[i] = math.sin(seed * 1.7 + 0.3) * 2 + (i % 7) * 0.01
  end
  local t = flow.tensor(v, {dtype = flow.float64})
  if #shape == 0 then t = t:reshape({}) else t = t:reshape(shape) end
  return t:requires_grad_()
end

local function long(v) return flow.tensor(v, {dtype = 'int64'}) end

describe('autograd of shape ops', function()
  it('cat of three tensors along dims 1 and -1', function()
    local a, b, c = leaf(2, 3), leaf(1, 3), leaf(3, 3)
    assert.is_true(gradcheck(function(x, y, z) return flow.cat({x, y, z}, 1) end, {a, b, c}))
    local d, e, f = leaf(2, 1), leaf(2, 4), leaf(2, 2)
    assert.is_true(gradcheck(function(x, y, z) return flow.cat({x, y, z}, -1) end, {d, e, f}))
    assert.are.equal('CatBackward', flow.cat({d, e}, 2).grad_fn:name())
  end)

  it('cat gives each input its grad in its own dtype; int inputs get none', function()
    local a = flow.tensor({{1, 2}}, {dtype = flow.float32, requires_grad = true})
    local b = flow.tensor({{3, 4}}, {dtype = flow.float64, requires_grad = true})
    local i = flow.tensor({{5, 6}}, {dtype = 'int64'})
    local y = flow.cat({a, i, b}, 1)
    assert.are.equal(flow.float64, y.dtype)
    y:backward(flow.tensor({{1, 2}, {3, 4}, {5, 6}}, {dtype = flow.float64}))
    assert.are.equal(flow.float32, a.grad.dtype)
    H.close(a.grad, {{1, 2}})
    H.close(b.grad, {{5, 6}})
  end)

  it('stack along a new first and last dim', function()
    local a, b, c = leaf(2, 3), leaf(2, 3), leaf(2, 3)
    assert.is_true(gradcheck(function(x, y, z) return flow.stack({x, y, z}, 1) end, {a, b, c}))
    assert.is_true(gradcheck(function(x, y) return flow.stack({x, y}, -1) end, {a, b}))
  end)

  it('tril / triu with a diagonal offset', function()
    local x = leaf(2, 3, 4)
    assert.is_true(gradcheck(function(t) return t:tril(1) end, {x}))
    assert.is_true(gradcheck(function(t) return t:triu(-1) end, {x}))
    assert.are.equal('TriuBackward', x:triu().grad_fn:name())
  end)

  it('flip and roll', function()
    local x = leaf(2, 3, 4)
    assert.is_true(gradcheck(function(t) return t:flip({1, 3}) end, {x}))
    assert.is_true(gradcheck(function(t) return t:flip(-1) end, {x}))
    assert.is_true(gradcheck(function(t) return t:roll({1, -5}, {2, 3}) end, {x}))
    assert.is_true(gradcheck(function(t) return t:roll({2, 1}, {3, 3}) end, {x}))
    assert.is_true(gradcheck(function(t) return t:roll(7) end, {x}))   -- flattened
  end)

  it('repeat, with extra leading dims, and tile', function()
    local x = leaf(3, 2)
    assert.is_true(gradcheck(function(t) return t['repeat'](t, 2, 1, 3) end, {x}))
    assert.is_true(gradcheck(function(t) return t['repeat'](t, 2, 2, 2, 1, 2) end, {x}))
    assert.is_true(gradcheck(function(t) return t:tile(2) end, {x}))
    local s = leaf()   -- 0-d
    assert.is_true(gradcheck(function(t) return t['repeat'](t, 3, 2) end, {s}))
  end)
end)

describe('autograd of index ops', function()
  it('gather with repeated indices, along each dim', function()
    local x = leaf(3, 4)
    local idx = long({{1, 1, 4}, {2, 2, 2}})
    assert.is_true(gradcheck(function(t) return t:gather(2, idx) end, {x}))
    assert.is_true(gradcheck(function(t) return t:gather(1, long({{3, 1}, {3, 3}})) end, {x}))
    assert.are.equal('GatherBackward', x:gather(2, idx).grad_fn:name())
  end)

  it('scatter (replace) with repeated indices: the last write gets the grad', function()
    local x, src = leaf(2, 4), leaf(2, 3)
    local idx = long({{1, 1, 3}, {2, 2, 2}})
    assert.is_true(gradcheck(function(a, b) return a:scatter(2, idx, b) end, {x, src}))
    -- src larger than the index in every dim
    local big = leaf(3, 5)
    assert.is_true(gradcheck(function(a, b) return a:scatter(2, idx, b) end, {x, big}))
    -- the scalar-value form: only x
    assert.is_true(gradcheck(function(a) return a:scatter(2, idx, 2.5) end, {x}))
  end)

  it('scatter_add and scatter with reduce = add', function()
    local x, src = leaf(2, 4), leaf(3, 5)
    local idx = long({{1, 1, 3}, {2, 2, 2}})
    assert.is_true(gradcheck(function(a, b) return a:scatter_add(2, idx, b) end, {x, src}))
    assert.is_true(gradcheck(function(a, b) return a:scatter(1, idx, b, {reduce = 'add'}) end,
                             {leaf(3, 4), src}))
    assert.is_true(gradcheck(function(a) return a:scatter(2, idx, 2.5, {reduce = 'add'}) end, {x}))
    assert.are.equal('ScatterAddBackward', x:scatter_add(2, idx, src).grad_fn:name())
  end)

  it('in-place scatter_ / scatter_add_ keep history on non-leaf tensors', function()
    local x, src = leaf(2, 4), leaf(2, 3)
    local idx = long({{1, 1, 3}, {2, 2, 2}})
    assert.is_true(gradcheck(function(a, b)
      local y = a * 1
      y:scatter_(2, idx, b)
      return y
    end, {x, src}))
    assert.is_true(gradcheck(function(a, b)
      local y = a * 2
      y:scatter_add_(2, idx, b)
      return y
    end, {x, src}))
    H.raises(function() x:scatter_(2, idx, src) end, 'leaf tensor that requires grad')
  end)

  it('index_select with duplicates', function()
    local x = leaf(3, 4)
    assert.is_true(gradcheck(function(t) return t:index_select(1, {3, 1, 3, 3}) end, {x}))
    assert.is_true(gradcheck(function(t) return t:index_select(2, long({4, 4, 2})) end, {x}))
  end)

  it('index_add and index_add_ with alpha and duplicates', function()
    local x, src = leaf(3, 2), leaf(4, 2)
    local idx = long({3, 1, 3, 2})
    assert.is_true(gradcheck(function(a, b) return a:index_add(1, idx, b) end, {x, src}))
    assert.is_true(gradcheck(function(a, b) return a:index_add(1, idx, b, {alpha = -1.5}) end,
                             {x, src}))
    assert.is_true(gradcheck(function(a, b)
      local y = a * 1
      y:index_add_(2, long({2, 2}), b, {alpha = 2})
      return y
    end, {x, leaf(3, 2)}))
  end)

  it('sort and topk: values carry the grad, indices none', function()
    local x = leaf(3, 5)
    assert.is_true(gradcheck(function(t) return (t:sort(2)) end, {x}))
    assert.is_true(gradcheck(function(t) return (t:sort(1, {descending = true})) end, {x}))
    assert.is_true(gradcheck(function(t) return (t:topk(2, 2)) end, {x}))
    assert.is_true(gradcheck(function(t) return (t:topk(2, 1, {largest = false})) end, {x}))
    local v, i = x:sort(2)
    assert.are.equal('SortBackward', v.grad_fn:name())
    assert.is_false(i.requires_grad)
    assert.is_false(x:argsort(2).requires_grad)
  end)

  it('masked_select, with the input broadcast against the mask', function()
    local mask = flow.tensor({{true, false, true}, {false, false, true}})
    assert.is_true(gradcheck(function(t) return t:masked_select(mask) end, {leaf(2, 3)}))
    assert.is_true(gradcheck(function(t) return t:masked_select(mask) end, {leaf(1, 3)}))
    assert.is_true(gradcheck(function(t) return t:masked_select(mask) end, {leaf(2, 2, 3)}))
  end)

  it('integer-valued ops record nothing', function()
    local x = leaf(2, 3)
    assert.is_false(x:gt(0):nonzero().requires_grad)
    assert.is_nil(flow.one_hot(long({1, 3}), 3).grad_fn)
  end)
end)

describe('double backward of index ops', function()
  it('gather', function()
    local idx = long({{1, 1, 4}, {2, 2, 2}})
    assert.is_true(gradgradcheck(function(t)
      local g = t:gather(2, idx)
      return g * g
    end, {leaf(2, 4)}))
  end)

  it('cat', function()
    assert.is_true(gradgradcheck(function(a, b)
      return flow.cat({a * a, a * b, b}, 2)
    end, {leaf(2, 2), leaf(2, 2)}))
  end)

  it('index_select', function()
    assert.is_true(gradgradcheck(function(t)
      local y = t:index_select(1, {3, 1, 3})
      return y * y
    end, {leaf(3, 2)}))
  end)

  it('scatter and index_add through src', function()
    local idx = long({{1, 1, 3}, {2, 2, 2}})
    assert.is_true(gradgradcheck(function(a, b)
      return a:scatter(2, idx, b * b) * a
    end, {leaf(2, 4), leaf(2, 3)}))
    assert.is_true(gradgradcheck(function(a, b)
      return a:index_add(1, long({3, 1, 3}), b * b, {alpha = 2}) * a
    end, {leaf(3, 2), leaf(3, 2)}))
  end)
end)

describe('double backward of shape ops', function()
  it('repeat, sort, masked_select, roll, flip and tril', function()
    assert.is_true(gradgradcheck(function(t)
      local y = t['repeat'](t, 2, 1, 3)
      return y * y
    end, {leaf(3, 2)}))
    assert.is_true(gradgradcheck(function(t)
      local v = t:sort(2)
      return v * v
    end, {leaf(3, 4)}))
    assert.is_true(gradgradcheck(function(t)
      local v = t:masked_select(t:gt(0))
      return v * v
    end, {leaf(3, 4)}))
    assert.is_true(gradgradcheck(function(t)
      return t:roll({1, 2}, {1, 2}):flip(1):tril() * t
    end, {leaf(3, 3)}))
  end)
end)

describe('index grads and memory', function()
  it('release every temporary', function()
    flow.collect()
    flow.collect()
    local before = flow.memory_stats().current_bytes
    do
      local x, s = leaf(3, 4), leaf(3, 4)
      local idx = long({{1, 1, 2, 4}, {3, 3, 3, 3}, {2, 1, 4, 3}})
      local y = flow.cat({x:gather(2, idx), x:scatter(2, idx, s), x:index_select(1, {2, 2}),
                          (x:sort(2)), x:flip(1), x:roll(1, 2), x:tril()}, 1)
      local z = flow.cat({y:reshape(-1), x:masked_select(x:gt(0)), x['repeat'](x, 2, 1):reshape(-1)}, 1)
      local go = flow.ones(z:numel(), {dtype = flow.float64}):requires_grad_()
      local g = flow.autograd.grad({z}, {x, s}, {go}, {create_graph = true})
      assert.is_true(g[1].requires_grad)
    end
    flow.collect()
    flow.collect()
    assert.are.equal(before, flow.memory_stats().current_bytes)
  end)
end)
