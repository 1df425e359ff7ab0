-- The indexing family on the GPU against the CPU: gather/scatter,
-- index_select/index_add, sort/argsort/topk, cumsum/cumprod, flip/roll/
-- repeat/tile/tril/triu, masked_select/nonzero, one_hot, x[idx] get/set,
-- embedding, arange/linspace; values and grads. Index values out of range
-- are reported at the next synchronising call, naming the op. Without a GPU
-- the whole file is one pending line.
local flow = require 'oneflow'
local H = require 'spec.helpers'

if not flow.cuda.is_available() then
  describe('CUDA indexing ops', function()
    pending('skipped: no usable GPU (' .. flow.cuda.why_unavailable() .. ')')
  end)
  return
end

-- f on CPU inputs and on their GPU copies; every result (f may return
-- several) and, with `grad`, the grads of float inputs must agree.
local function check(name, f, inputs, tol, grad)
  tol = tol or 0
  local cpu_in, gpu_in = {}, {}
  for i, x in ipairs(inputs) do
    local g = grad and flow.is_tensor(x) and x.dtype.is_floating_point
    if flow.is_tensor(x) then
      cpu_in[i] = g and x:clone():requires_grad_(true) or x
      gpu_in[i] = g and x:cuda():detach():requires_grad_(true) or x:cuda()
    else
      cpu_in[i], gpu_in[i] = x, x
    end
  end
  local rc, rg = {f(unpack(cpu_in))}, {f(unpack(gpu_in))}
  assert.are.equal(#rc, #rg)
  for k = 1, #rc do
    assert.are.equal('cuda', rg[k].device.type, name .. ': result not on the GPU')
    assert.are.same(rc[k]:size():totable(), rg[k]:size():totable(), name .. ': shape')
    assert.are.equal(rc[k].dtype, rg[k].dtype, name .. ': dtype')
    H.close(rg[k]:cpu(), rc[k], tol, name)
  end
  if grad then
    local w = flow.randn(rc[1]:size():totable(), {dtype = rc[1].dtype})
    ;(rc[1] * w):sum():backward()
    ;(rg[1] * w:cuda()):sum():backward()
    for i, x in ipairs(cpu_in) do
      if flow.is_tensor(x) and x.requires_grad then
        assert.are.equal('cuda', gpu_in[i].grad.device.type)
        H.close(gpu_in[i].grad:cpu(), x.grad, math.max(tol, 1e-5), name .. ' grad ' .. i)
      end
    end
  end
end

local function long(t) return flow.tensor(t, {dtype = 'int64'}) end

describe('CUDA gather and scatter', function()
  flow.manual_seed(3)
  local x = flow.randn(4, 6)
  local idx = flow.randint(1, 5, {4, 3})
  it('gather along each dim, int64 and int32 indices, grads', function()
    check('gather dim 2', function(a, i) return a:gather(2, i) end, {x, idx}, 0, true)
    check('gather dim 1', function(a, i) return a:gather(1, i) end,
          {x, flow.randint(1, 5, {2, 6})}, 0, true)
    check('gather int32', function(a, i) return a:gather(2, i) end, {x, idx:int()}, 0, true)
    check('gather strided', function(a, i) return a:t():gather(1, i) end,
          {x, flow.randint(1, 5, {3, 4})}, 0, true)
    check('gather float16', function(a, i) return a:gather(2, i) end, {x:half(), idx})
  end)
  it('scatter keeps the last of repeated indices, as the CPU does', function()
    local rep = long({{1, 1, 1}, {2, 2, 3}, {6, 6, 6}, {1, 2, 1}})
    check('scatter', function(a, i, s) return a:scatter(2, i, s) end,
          {x, rep, flow.randn(4, 3)}, 0, true)
    check('scatter value', function(a, i) return a:scatter(2, i, 2.5) end, {x, rep}, 0, true)
    check('scatter int', function(a, i, s) return a:scatter(1, i, s) end,
          {flow.randint(0, 9, {5, 3}), long({{1, 5, 2}}), flow.randint(0, 9, {1, 3})})
  end)
  it('scatter_add with few and many lines, grads', function()
    check('scatter_add', function(a, i, s) return a:scatter_add(2, i, s) end,
          {x, idx, flow.randn(4, 3)}, 1e-6, true)
    -- one long line: the atomic path
    local big = flow.randint(1, 9, {1, 5000})
    check('scatter_add long', function(a, i, s) return a:scatter_add(2, i, s) end,
          {flow.zeros(1, 8), big, flow.randn(1, 5000)}, 1e-4, true)
    check('scatter_add int', function(a, i, s) return a:scatter_add(2, i, s) end,
          {flow.zeros(1, 8, {dtype = 'int64'}), big, flow.ones(1, 5000, {dtype = 'int64'})})
    local y = x:cuda()
    y:scatter_(2, idx:cuda(), 0)
    H.close(y:cpu(), x:clone():scatter_(2, idx, 0), 0, 'scatter_ in place')
  end)
end)

describe('CUDA index_select, index_add, embedding and x[idx]', function()
  flow.manual_seed(4)
  local x = flow.randn(5, 4, 3)
  local idx = long({5, 1, 1, 3})
  it('index_select along each dim and grads', function()
    for d = 1, 3 do
      local i = flow.randint(1, x:size(d) + 1, {7})
      check('index_select ' .. d, function(a, j) return a:index_select(d, j) end, {x, i}, 0, true)
    end
    check('index_select bool', function(a, j) return a:index_select(1, j) end,
          {x:gt(0), idx})
    local g = x:cuda()
    H.close(g:index_select(1, {5, 1}):cpu(), x:index_select(1, {5, 1}), 0, 'Lua list index')
  end)
  it('index_add with alpha, repeated indices and grads', function()
    check('index_add', function(a, j, s) return a:index_add(1, j, s, {alpha = 2}) end,
          {x, idx, flow.randn(4, 4, 3)}, 1e-6, true)
    check('index_add dim 3', function(a, j, s) return a:index_add(3, j, s) end,
          {x, long({3, 3}), flow.randn(5, 4, 2)}, 1e-6, true)
    local many = flow.randint(1, 6, {3000})
    check('index_add many', function(a, j, s) return a:index_add(1, j, s) end,
          {flow.zeros(5, 2), many, flow.randn(3000, 2)}, 1e-4, true)
  end)
  it('embedding forward and backward, padding_idx', function()
    local w = flow.randn(10, 4)
    local ids = long({{1, 3, 3}, {10, 2, 1}})
    local F = flow.nn.functional
    check('embedding', function(i, ww) return F.embedding(i, ww) end, {ids, w}, 1e-6, true)
    check('embedding pad', function(i, ww) return F.embedding(i, ww, {padding_idx = 3}) end,
          {ids, w}, 1e-6, true)
  end)
  it('x[idx], x[mask] and x[mask] = v', function()
    check('x[idx]', function(a, i) return a[i] end, {x, idx}, 0, true)
    check('x[mask]', function(a, m) return a[m] end, {x, x:gt(0.3)}, 0, true)
    local g = x:cuda()
    g[g:lt(0)] = 0
    local c = x:clone()
    c[c:lt(0)] = 0
    H.close(g:cpu(), c, 0, 'masked assignment')
  end)
end)

describe('CUDA sort, argsort and topk', function()
  flow.manual_seed(5)
  it('matches the stable CPU sort with ties, NaN and -0.0, both directions', function()
    local v = flow.tensor({{3, 1, 0 / 0, 1, -0.0, 0.0, -2, 3}, {5, 5, 5, 1, 2, 0 / 0, -1, 0}})
    for _, desc in ipairs({false, true}) do
      check('sort ' .. tostring(desc), function(a) return a:sort(2, {descending = desc}) end, {v})
      check('sort dim 1', function(a) return a:sort(1, {descending = desc}) end, {v})
    end
    check('argsort', function(a) return a:argsort(2) end, {v})
  end)
  it('every dtype, long rows, many rows, grads', function()
    local x = flow.randn(37, 300)
    check('sort grads', function(a) return (a:sort(2)) end, {x}, 0, true)
    check('sort rows dim 1', function(a) return a:sort(1, {descending = true}) end, {x}, 0)
    check('sort long', function(a) return a:sort() end, {flow.randn(100000)})
    for _, dt in ipairs({'float64', 'float16', 'bfloat16', 'int32', 'int8', 'uint8', 'bool'}) do
      check('sort ' .. dt, function(a) return a:sort(2) end,
            {flow.randint(-5, 5, {3, 40}):to(dt)})
    end
    local big = flow.tensor({2 ^ 53 + 1, 2 ^ 53, -3, 2 ^ 62}, {dtype = 'int64'})
    check('sort int64 beyond 2^53', function(a) return a:sort() end, {big})
  end)
  it('topk largest and smallest, k = 0 and k = n, grads', function()
    local x = flow.randn(6, 50)
    check('topk', function(a) return a:topk(5, 2) end, {x}, 0, true)
    check('topk smallest', function(a) return a:topk(3, 1, {largest = false}) end, {x}, 0, true)
    check('topk all', function(a) return a:topk(50) end, {x})
    check('topk 0', function(a) return a:topk(0) end, {x})
  end)
end)

describe('CUDA cumsum/cumprod and shape ops', function()
  flow.manual_seed(6)
  local x = flow.randn(4, 5, 3)
  it('cumsum and cumprod along each dim, ints, grads', function()
    for d = 1, 3 do
      check('cumsum ' .. d, function(a) return a:cumsum(d) end, {x}, 1e-6, true)
      check('cumprod ' .. d, function(a) return a:cumprod(d) end, {x}, 1e-6, true)
    end
    check('cumsum int', function(a) return a:cumsum(2) end, {flow.randint(-9, 9, {3, 7})})
    check('cumsum bool', function(a) return a:cumsum(1) end, {x:gt(0)})
    check('cumsum long line', function(a) return a:cumsum(1) end, {flow.randn(20000)}, 1e-6)
  end)
  it('flip, roll, repeat, tile, tril, triu with grads', function()
    check('flip', function(a) return a:flip({1, 3}) end, {x}, 0, true)
    check('roll', function(a) return a:roll({1, -2}, {1, 2}) end, {x}, 0, true)
    check('roll flat', function(a) return a:roll(4) end, {x}, 0, true)
    check('repeat', function(a) return a['repeat'](a, 2, 1, 1, 3) end, {x}, 1e-6, true)
    check('tile', function(a) return a:tile(2, 2) end, {x:transpose(1, 3)}, 1e-6, true)
    for _, k in ipairs({-1, 0, 2}) do
      check('tril ' .. k, function(a) return a:tril(k) end, {x}, 0, true)
      check('triu ' .. k, function(a) return a:triu(k) end, {x:transpose(1, 2)}, 0, true)
    end
  end)
end)

describe('CUDA masked_select, nonzero, one_hot, arange and linspace', function()
  flow.manual_seed(7)
  local x = flow.randn(6, 7)
  it('masked_select with a broadcast mask and grads; nonzero and argwhere', function()
    check('masked_select', function(a, m) return a:masked_select(m) end,
          {x, flow.randn(7):gt(0)}, 0, true)
    check('masked_select none', function(a, m) return a:masked_select(m) end, {x, x:gt(99)})
    check('nonzero', function(a) return a:nonzero() end, {x:gt(0.5)})
    check('nonzero float', function(a) return a:nonzero() end, {flow.tensor({0, -0.0, 1, 0 / 0})})
    check('argwhere 3-d', function(a) return a:argwhere() end, {flow.randn(3, 4, 5):gt(0)})
  end)
  it('one_hot with and without num_classes', function()
    local i = flow.randint(1, 6, {4, 3})
    check('one_hot', function(a) return flow.one_hot(a, 7) end, {i})
    check('one_hot inferred', function(a) return flow.one_hot(a) end, {i})
  end)
  it('arange and linspace made on the device give the CPU values', function()
    for _, dt in ipairs({'float32', 'float64', 'int64', 'float16'}) do
      local a = flow.arange(-3, 7.5, 0.25, {dtype = dt, device = 'cuda'})
      H.close(a:cpu(), flow.arange(-3, 7.5, 0.25, {dtype = dt}), 0, 'arange ' .. dt)
      local l = flow.linspace(-1, 2, 37, {dtype = dt, device = 'cuda'})
      H.close(l:cpu(), flow.linspace(-1, 2, 37, {dtype = dt}), 0, 'linspace ' .. dt)
    end
  end)
end)

describe('CUDA composed index ops', function()
  flow.manual_seed(8)
  local x = flow.randn(5, 6)
  it('index_fill, index_copy, take, put, masked_scatter, kthvalue with grads', function()
    check('index_fill', function(a, i) return a:index_fill(2, i, -1) end, {x, long({6, 1})}, 0,
          true)
    check('index_copy', function(a, i, s) return a:index_copy(1, i, s) end,
          {x, long({4, 2}), flow.randn(2, 6)}, 0, true)
    check('take', function(a, i) return a:take(i) end, {x, flow.randint(1, 31, {3, 4})}, 0, true)
    check('put', function(a, i, s) return a:put(i, s) end, {x, long({30, 2}), flow.randn(2)}, 0,
          true)
    check('put accumulate', function(a, i, s) return a:put(i, s, {accumulate = true}) end,
          {x, long({3, 3}), flow.randn(2)}, 1e-6, true)
    check('masked_scatter', function(a, m, s) return a:masked_scatter(m, s) end,
          {x, x:gt(0), flow.randn(30)}, 0, true)
    check('kthvalue', function(a) return a:kthvalue(3, 2) end, {x}, 0, true)
  end)
end)

describe('CUDA index errors', function()
  it('an index out of range is reported at the next synchronising call with the op', function()
    local x = flow.randn(4, 3):cuda()
    local bad = long({1, 9}):cuda()
    local y = x:index_select(1, bad)
    H.raises(function() flow.cuda.synchronize() end, 'index_select', 'index out of range')
    -- the flag is cleared: later work runs
    H.close(x:index_select(1, long({2}):cuda()):cpu(), x:cpu():index_select(1, long({2})), 0)
    x:gather(2, long({{0, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}):cuda())
    H.raises(function() return x:sum():item() end, 'gather', 'index out of range')
    assert.is_not_nil(y)
  end)
  it('a CPU index list tensor with a CUDA input is a mixed-device error', function()
    local x = flow.randn(4, 3):cuda()
    H.raises(function() return x:index_select(1, long({1, 2})) end, 'index_select', 'cuda:0',
             'cpu')
  end)
end)
