local flow = require 'oneflow'
local H = require 'spec.helpers'

local function leaf(v, dt)
  return flow.tensor(v, {dtype = dt or flow.float64, requires_grad = true})
end

describe('autograd engine', function()
  it('accumulates grads into leaves, through broadcasting', function()
    local x = leaf({1, 2, 3})
    local b = leaf({10})
    local y = (x * x + x:exp() * b):sum()
    y:backward()
    H.close(x.grad, {2 + 10 * math.exp(1), 4 + 10 * math.exp(2), 6 + 10 * math.exp(3)}, 1e-12)
    H.close(b.grad, {math.exp(1) + math.exp(2) + math.exp(3)}, 1e-12)
    -- a second backward adds to the grads
    local y2 = (x * 2):sum()
    y2:backward()
    H.close(x.grad, {4 + 10 * math.exp(1), 6 + 10 * math.exp(2), 8 + 10 * math.exp(3)}, 1e-12)
  end)

  it('records grad_fn, is_leaf and requires_grad', function()
    local x = leaf({1, 2})
    local y = x * 2
    assert.is_true(x.is_leaf)
    assert.is_false(y.is_leaf)
    assert.is_true(y.requires_grad)
    assert.are.equal('MulBackward', y.grad_fn:name())
    assert.are.equal('AccumulateGrad', y.grad_fn:next_functions()[1]:name())
    assert.is_nil(x.grad_fn)
    assert.is_false((x:detach() * 2).requires_grad)
    assert.is_truthy(tostring(y):find('grad_fn=<MulBackward>', 1, true))
  end)

  it('no_grad and enable_grad', function()
    local x = leaf({1})
    local y = flow.no_grad(function() return x * 2 end)
    assert.is_false(y.requires_grad)
    flow.no_grad(function()
      local z = flow.enable_grad(function() return x * 2 end)
      assert.is_true(z.requires_grad)
    end)
    assert.is_true(flow.is_grad_enabled())
    -- errors inside no_grad restore the mode
    pcall(flow.no_grad, function() error('boom') end)
    assert.is_true(flow.is_grad_enabled())
  end)

  it('retain_graph allows a second backward; without it the error is clear', function()
    local x = leaf({2})
    local y = (x * x):sum()
    y:backward({retain_graph = true})
    y:backward()
    H.close(x.grad, {8})
    H.raises(function() y:backward() end, 'second time', 'retain_graph')
  end)

  it('autograd.grad with create_graph gives higher derivatives', function()
    local x = leaf({2})
    local y = (x ^ 3):sum()
    local g = flow.autograd.grad(y, x, nil, {create_graph = true})
    H.close(g, {12})
    local g2 = flow.autograd.grad(g:sum(), x, nil, {create_graph = true})
    H.close(g2, {12})
    local g3 = flow.autograd.grad(g2:sum(), x)
    H.close(g3, {6})
    assert.is_nil(x.grad)   -- autograd.grad does not touch .grad
  end)

  it('autograd.grad over several inputs and allow_unused', function()
    local a, b, c = leaf({1, 2}), leaf({3, 4}), leaf({5})
    local gs = flow.autograd.grad((a * b):sum(), {a, b})
    H.close(gs[1], {3, 4})
    H.close(gs[2], {1, 2})
    H.raises(function() flow.autograd.grad((a * b):sum(), {a, c}) end, 'not used', 'allow_unused')
    local gu = flow.autograd.grad((a * b):sum(), {a, c}, nil, {allow_unused = true})
    assert.is_nil(gu[2])
  end)

  it('a non-scalar output needs an explicit grad', function()
    local x = leaf({1, 2})
    H.raises(function() local y = x * 2; y:backward() end, 'scalar', '[2]')
    local y = x * 2
    y:backward(flow.tensor({1, 10}, {dtype = flow.float64}))
    H.close(x.grad, {2, 20})
  end)

  it('hooks see and may replace grads', function()
    local x = leaf({1, 2})
    local seen
    x:register_hook(function(g) seen = g:totable() return g * 10 end)
    local y = x * 3
    y:register_hook(function(g) return g + 1 end)
    y:sum():backward()
    assert.are.same({2, 2}, {seen[1] / 3, seen[2] / 3})
    H.close(x.grad, {60, 60})
    H.raises(function() flow.tensor({1}):register_hook(function() end) end, 'register_hook')
  end)

  it('custom Functions', function()
    local Cube = flow.autograd.Function:subclass('Cube')
    function Cube.forward(ctx, x, k)
      ctx:save_for_backward(x)
      ctx.k = k
      return x ^ 3 * k
    end
    function Cube.backward(ctx, g)
      local x = ctx.saved_tensors[1]
      return g * 3 * x * x * ctx.k
    end
    local x = leaf({1, 2})
    local y = Cube.apply(x, 2)
    assert.are.equal('CubeBackward', y.grad_fn:name())
    y:sum():backward()
    H.close(x.grad, {6, 24})
    -- an error in backward is a Lua error, not a crash
    local Bad = flow.autograd.Function:subclass('Bad')
    function Bad.forward(_, a) return a * 1 end
    function Bad.backward() error('bad backward') end
    H.raises(function() Bad.apply(leaf({1})):sum():backward() end, 'bad backward')
  end)

  it('in-place changes to saved tensors are detected', function()
    local x = leaf({1, 2})
    local a = x * 1
    local y = a * a          -- saves a
    a:add_(1)
    H.raises(function() y:sum():backward() end, 'MulBackward', 'modified by an in-place operation')
    H.raises(function() x:add_(1) end, 'leaf', 'in-place')
    flow.no_grad(function() x:add_(1) end)
    H.close(x, {2, 3})
  end)

  it('in-place ops on non-leaves keep the history', function()
    local x = leaf({1, 2})
    local y = x * 2
    y:mul_(x)                -- y = 2x * x
    y:sum():backward()
    H.close(x.grad, {4, 8})
    local z = leaf({-1, 1})
    local r = z * 1
    r:relu_()
    r:sum():backward()
    H.close(z.grad, {0, 1})
  end)

  it('relu_, sigmoid_, add_ and sub_ under autograd write in place, as PyTorch does', function()
    -- their derivatives read only the result (or nothing): no clone and no
    -- copy back, the tensor keeps its storage, grads equal the out-of-place ops'
    local v = {{-1, 2, -3}, {4, -5, 6}}
    local x1, x2 = leaf(v), leaf(v)
    local b = flow.tensor({0.5, -1, 2}, {dtype = flow.float64})
    local r = x1 * 3
    local ptr = r:data_ptr()
    r:add_(b):sub_(1):relu_()
    local s1 = (r * 2):sigmoid_()
    assert.equal(ptr, r:data_ptr())
    local y = (x2 * 3 + b - 1):relu()
    local s2 = (y * 2):sigmoid()
    H.close(r, y, 1e-15)
    H.close(s1, s2, 1e-15)
    r, y = r + s1, y + s2
    local w = flow.tensor({{1, 2, 3}, {4, 5, 6}}, {dtype = flow.float64})
    local lr, ly = (r * w):sum(), (y * w):sum()
    lr:backward()
    ly:backward()
    H.close(x1.grad, x2.grad, 1e-15)
    -- no block allocated for the in-place steps (float32: the one product)
    local z = flow.randn(256, 256, {requires_grad = true})
    local t = z * 2
    flow.reset_peak_memory_stats()
    local before = flow.memory_stats().peak_bytes
    t:relu_():add_(z)
    assert.equal(before, flow.memory_stats().peak_bytes)
    -- a later write to the result a node saved is caught, as in PyTorch
    local u = leaf({-1, 2}) * 1
    u:relu_()
    u:add_(1)
    H.raises(function() u:sum():backward() end, 'ReluBackward', 'modified by an in-place operation')
    -- the input of the relu is not saved: writing it earlier is fine
    local q = leaf({-1, 2})
    local p = q * 1
    p:add_(1):relu_()
    p:sum():backward()
    H.close(q.grad, {0, 1})
  end)

  it('clamp_ under autograd writes in place and keeps a byte mask: torch.clamp\'s values and grads', function()
    -- special values and the bounds themselves (inclusive: grad 1 there)
    local v = {-1, 0, 0.5, 6, 7, -0.0, 1 / 0, -1 / 0, 0 / 0, 5.999, 6.001, -1e-30}
    for _, b in ipairs({{0, 6}, {-0.5, nil}, {nil, 2}, {3, 1}}) do   -- min > max: max everywhere
      local x1 = flow.tensor(v, {dtype = flow.float32, requires_grad = true})
      local x2 = flow.tensor(v, {dtype = flow.float32, requires_grad = true})
      local r = x1 * 1
      r:clamp_(b[1], b[2])
      local y = (x2 * 1):clamp(b[1], b[2])
      -- the same values: NaN where NaN, zeros of the same sign
      local rl, yl = r:tolist(), y:tolist()
      for i = 1, #v do
        local a, c = rl[i], yl[i]
        assert.is_true((a ~= a and c ~= c) or (a == c and 1 / a == 1 / c), ('element %d: %s vs %s'):format(i, a, c))
      end
      local w = flow.arange(1, 13, {dtype = flow.float32})
      local lr, ly = (r * w):sum(), (y * w):sum()
      lr:backward()
      ly:backward()
      assert.are.same(x2.grad:tolist(), x1.grad:tolist())
    end
    -- one byte per element kept, not a float32 clone and a result
    local z = flow.randn(512, 512, {requires_grad = true})
    local t = z * 2
    collectgarbage()
    flow.reset_peak_memory_stats()
    local before = flow.memory_stats().peak_bytes
    t:clamp_(-1, 1)
    assert.is_true(flow.memory_stats().peak_bytes - before <= 512 * 512 + 4096)
    assert.equal('ClampBackward', t.grad_fn:name())
  end)

  it('requires_grad only on floating leaves', function()
    H.raises(function() flow.tensor({1}, {dtype = flow.int64}):requires_grad_() end, 'floating')
    local y = leaf({1}) * 2
    H.raises(function() y:requires_grad_(false) end, 'leaf')
    local t = flow.tensor({1})
    t.requires_grad = true
    assert.is_true(t.requires_grad)
  end)

  it('grads flow through views and in-place copies', function()
    local x = leaf({{1, 2}, {3, 4}})
    local y = (x:t()[1] * 10):sum() + (x:view(4):narrow(1, 2, 2)):sum()
    y:backward()
    H.close(x.grad, {{10, 1}, {11, 0}})
    local dst = flow.zeros(2, {dtype = flow.float64})
    local src = leaf({5, 6})
    dst:copy_(src)
    local loss = (dst * dst):sum()
    loss:backward()
    H.close(src.grad, {10, 12})
  end)

  it('double backward through views (narrow, select, transpose, expand)', function()
    local x = leaf({{1, 2, 3}, {4, 5, 6}})
    assert.is_true(flow.autograd.gradgradcheck(function(a) return a:narrow(2, 2, 2) ^ 3 end, {x}))
    assert.is_true(flow.autograd.gradgradcheck(function(a) return a:select(1, 2) ^ 3 end, {x}))
    assert.is_true(flow.autograd.gradgradcheck(function(a) return a:t():expand(2, 3, 2) ^ 3 end, {x}))
    assert.is_true(flow.autograd.gradgradcheck(function(a) return a[{{}, {1, 3, 2}}] ^ 3 end, {x}))
  end)

  it('gradcheck covers elementwise and reduction rules in float64', function()
    local x = leaf({{0.3, -0.7, 1.2}, {0.5, 2.0, -1.1}})
    local y = leaf({{1.1, 0.4, -0.3}, {0.9, 1.3, 0.2}})
    local pos = leaf({{0.3, 0.7, 1.2}, {0.5, 2.0, 1.1}})
    local check = flow.autograd.gradcheck
    for _, f in ipairs({
      function(a, b) return a * b + a / (b + 3) - b end,
      function(a, b) return a:maximum(b) + a:minimum(b) + a:atan2(b) end,
      function(a) return a:exp() + a:sin() + a:cos() + a:tanh() + a:sigmoid() + a:silu() end,
      function(a) return a:gelu() + a:gelu_tanh() + a:softplus() + a:mish() + a:erf() end,
      function(a) return a:abs() + a:relu() + a:square() + a:atan() + a:sinh() + a:clamp(-0.6, 0.6) end,
      function(a) return a:sum(2) + a:mean(1):sum() + a:prod(2) + a:amax(1):sum() end,
      function(a) return a:logsumexp(2) + a:norm() + a:var(1):sum() + a:std(2):sum() end,
      function(a) return a:softmax(2) + a:log_softmax(1) + a:cumsum(2) end,
      function(a) return (a:max(2)) + (a:min(1)):sum() end,
      function(a) return flow.where(a:gt(0), a, a * 3) + a:masked_fill(a:lt(0), 0) end,
    }) do
      assert.is_true(check(f, {x, y}))
    end
    assert.is_true(check(function(a) return a:log() + a:sqrt() + a:rsqrt() + a:reciprocal() + a:pow(2.5) end, {pos}))
    assert.is_true(check(function(a, b) return a:pow(b) end, {pos, y}))
    assert.is_true(check(function(a) return a:cumprod(2) end, {pos}))
    assert.is_true(flow.autograd.gradgradcheck(function(a, b) return a * b:exp() + a:sin() * b end, {x, y}))
    assert.is_true(flow.autograd.gradgradcheck(function(a) return a:softmax(2) * a end, {x}))
  end)

  it('relu backward: one pass without create_graph, the same values as the recorded rule', function()
    for _, dt in ipairs({flow.float32, flow.float64}) do
      local v = {{-1.5, 0, 2}, {3, -0.25, 0.5}}
      local gv = flow.tensor({{1, 2, 3}, {4, 5, 6}}, {dtype = dt})
      -- fast path (engine-owned grad, written in place) and the expression rule
      local a, b = leaf(v, dt), leaf(v, dt)
      local ya = (a * 1):relu() * gv
      ya:sum():backward()
      local gb = flow.autograd.grad(((b * 1):relu() * gv):sum(), {b}, {create_graph = true})[1]
      H.close(a.grad, {{0, 0, 3}, {4, 0, 6}}, 0)
      H.close(gb, a.grad:totable(), 0)
      -- a grad given by the caller is read, never overwritten
      local c = leaf(v, dt)
      local y = (c * 1):relu()
      local gy = gv:clone()
      y:backward(gy)
      H.close(gy, gv:totable(), 0)
      H.close(c.grad, {{0, 0, 3}, {4, 0, 6}}, 0)
    end
    -- as PyTorch's threshold_backward: a dead unit passes 0 even for an inf grad
    local d = leaf({-1, 1})
    d:relu():backward(flow.tensor({math.huge, 2}, {dtype = flow.float64}))
    H.close(d.grad, {0, 2}, 0)
    assert.is_true(flow.autograd.gradgradcheck(function(x) return (x * x):relu() * x end,
                                               {leaf({0.3, -0.7, 1.2})}))
  end)

  it('sums grads of a reused tensor in place only when no one else holds them', function()
    local x = leaf({1, -2, 3})
    local h = x * 2
    local seen
    h:register_hook(function(g) seen = g:clone() end)
    -- h feeds three branches: relu (private grads) and an add that passes
    -- the same grad on twice
    local out = h:relu() * 3 + (h + h) * 5
    out:sum():backward()
    H.close(seen, {13, 10, 13}, 0)
    H.close(x.grad, {26, 20, 26}, 0)
    -- a leaf used twice: the first grad is the caller's, kept intact
    local w = leaf({1, 2})
    local gy = flow.tensor({1, 1}, {dtype = flow.float64})
    local y = w * w
    y:backward(gy)
    H.close(gy, {1, 1}, 0)
    H.close(w.grad, {2, 4}, 0)
  end)

  it('a long chain does not overflow the stack when released', function()
    local x = leaf({1})
    local y = x
    for _ = 1, 20000 do y = y * 1 end
    y:sum():backward()
    H.close(x.grad, {1})
    flow.collect()
  end)
end)
