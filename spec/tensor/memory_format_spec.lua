-- Channels-last memory format on the CPU: flow.channels_last and friends,
-- x:to{memory_format =}, x:contiguous{memory_format =},
-- x:is_contiguous{memory_format =}, Module:to{memory_format =}, and ops that
-- keep the layout (convolution, pooling) with the same values as NCHW.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local F = flow.nn.functional
local nn = flow.nn

describe('memory formats', function()
  flow.manual_seed(21)

  it('are named values of flow', function()
    assert.are.equal('oneflow.channels_last', tostring(flow.channels_last))
    assert.are.equal('oneflow.contiguous_format', tostring(flow.contiguous_format))
    assert.are.equal('oneflow.channels_last_3d', tostring(flow.channels_last_3d))
    assert.are.equal('oneflow.preserve_format', tostring(flow.preserve_format))
  end)

  it('x:to{memory_format = flow.channels_last} lays out NHWC with the same shape and values',
     function()
    local x = flow.randn(2, 3, 4, 5)
    local y = x:to({memory_format = flow.channels_last})
    assert.are.same({2, 3, 4, 5}, H.shape(y))
    assert.are.same({60, 1, 15, 3}, y:stride())
    assert.is_false(y:is_contiguous())
    assert.is_true(y:is_contiguous({memory_format = flow.channels_last}))
    assert.is_true(y:is_contiguous(flow.channels_last))
    assert.is_false(x:is_contiguous({memory_format = flow.channels_last}))
    H.close(y, x, 0)
    -- a second conversion is the same tensor; back to contiguous copies
    assert.are.equal(y, y:to(flow.channels_last))
    local z = y:contiguous()
    assert.is_true(z:is_contiguous())
    assert.are.same({60, 20, 5, 1}, z:stride())
    H.close(z, x, 0)
    local w = x:contiguous({memory_format = flow.channels_last})
    assert.are.same(y:stride(), w:stride())
    -- together with dtype and device
    local h = x:to({dtype = 'float64', memory_format = flow.channels_last})
    assert.are.equal('float64', h.dtype.name)
    assert.is_true(h:is_contiguous({memory_format = flow.channels_last}))
  end)

  it('channels_last_3d for 5-d tensors; size-1 dims do not matter', function()
    local x = flow.randn(2, 3, 2, 4, 5)
    local y = x:to({memory_format = flow.channels_last_3d})
    assert.are.same({120, 1, 60, 15, 3}, y:stride())
    assert.is_true(y:is_contiguous({memory_format = flow.channels_last_3d}))
    H.close(y, x, 0)
    local one = flow.randn(2, 1, 3, 3)   -- one channel: both layouts at once
    assert.is_true(one:is_contiguous({memory_format = flow.channels_last}))
  end)

  it('reports wrong ranks and unknown formats clearly', function()
    H.raises(function() flow.randn(2, 3, 4):to({memory_format = flow.channels_last}) end,
             'to', 'channels_last needs a 4-d tensor', '[2,3,4]')
    H.raises(function() flow.randn(2, 3, 4, 5):to({memory_format = flow.channels_last_3d}) end,
             'channels_last_3d needs a 5-d tensor')
    H.raises(function() flow.randn(2, 3, 4, 5):contiguous({memory_format = 'nhwc'}) end,
             'memory_format must be')
  end)

  it('the conversion is recorded by autograd', function()
    local x = flow.randn(2, 3, 4, 4):requires_grad_(true)
    local w = flow.randn(2, 3, 4, 4)
    ;(x:to({memory_format = flow.channels_last}) * w):sum():backward()
    H.close(x.grad, w, 0)
  end)

  it('copies keep the layout', function()
    local y = flow.randn(2, 3, 4, 5):to({memory_format = flow.channels_last})
    local c = y:clone()
    H.close(c, y, 0)
    assert.are.same(H.shape(y), H.shape(c))
  end)

  -- NCHW <-> NHWC of one dtype is a tiled transpose per sample (8 x 8
  -- byte blocks in registers for 1-byte dtypes): sizes around the blocks,
  -- both directions, every element size
  it('converts between NCHW and channels-last exactly: every element size, odd sizes', function()
    local CL = {memory_format = flow.channels_last}
    flow.manual_seed(4)
    for _, sh in ipairs({{8, 64, 7, 7}, {3, 13, 5, 9}, {2, 8, 8, 8}, {1, 17, 1, 19}, {2, 3, 4, 5}, {1, 1, 3, 3}}) do
      for _, dt in ipairs({flow.uint8, flow.int8, flow.int16, flow.float32, flow.float64}) do
        local x = (flow.rand(unpack(sh)) * 100):to(dt)
        local y = x:contiguous(CL)
        assert.is_true(y:is_contiguous(CL))
        H.close(y:to(flow.float64), x:to(flow.float64), 0, table.concat(sh, 'x') .. ' ' .. dt.name)
        local back = y:contiguous()
        assert.is_true(back:is_contiguous())
        H.close(back:to(flow.float64), x:to(flow.float64), 0, table.concat(sh, 'x') .. ' ' .. dt.name .. ' back')
        local into = flow.empty(sh, {dtype = dt}):contiguous(CL)
        into:copy_(x)
        H.close(into:to(flow.float64), x:to(flow.float64), 0, 'copy_ into channels-last')
      end
    end
  end)
end)

describe('ops on channels-last tensors (CPU)', function()
  flow.manual_seed(22)
  local cl = {memory_format = flow.channels_last}

  it('conv2d gives the NCHW values, a channels-last result and the same grads', function()
    local x, w, b = flow.randn(2, 4, 7, 6), flow.randn(6, 2, 3, 3), flow.randn(6)
    local ref = F.conv2d(x, w, b, {padding = 1, stride = {2, 1}, groups = 2})
    local xc = x:to(cl):requires_grad_(true)
    local y = F.conv2d(xc, w, b, {padding = 1, stride = {2, 1}, groups = 2})
    assert.is_true(y:is_contiguous(cl))
    H.close(y, ref, 1e-5)
    local g = flow.randn(H.shape(y))
    ;(y * g):sum():backward()
    local xr = x:clone():requires_grad_(true)
    ;(F.conv2d(xr, w, b, {padding = 1, stride = {2, 1}, groups = 2}) * g):sum():backward()
    H.close(xc.grad, xr.grad, 1e-5)
  end)

  it('conv_transpose2d, pools and batch_norm accept channels-last input', function()
    local x = flow.randn(2, 4, 6, 6)
    local xc = x:to(cl)
    local w = flow.randn(4, 3, 3, 3)
    H.close(F.conv_transpose2d(xc, w, nil, {stride = 2}), F.conv_transpose2d(x, w, nil,
            {stride = 2}), 1e-5)
    local mp = F.max_pool2d(xc, 2)
    assert.is_true(mp:is_contiguous(cl))
    H.close(mp, F.max_pool2d(x, 2), 0)
    local ap = F.avg_pool2d(xc, 3, {stride = 1, padding = 1})
    assert.is_true(ap:is_contiguous(cl))
    H.close(ap, F.avg_pool2d(x, 3, {stride = 1, padding = 1}), 1e-6)
    H.close(F.adaptive_avg_pool2d(xc, {1, 1}), F.adaptive_avg_pool2d(x, {1, 1}), 1e-6)
    H.close(F.batch_norm(xc, nil, nil, {training = true}),
            F.batch_norm(x, nil, nil, {training = true}), 1e-5)
    H.close(F.relu(xc) + 1, F.relu(x) + 1, 0)
  end)

  it('batch_norm keeps channels-last, train and eval, forward and grads equal to NCHW', function()
    for _, dt in ipairs({flow.float32, flow.float64, flow.bfloat16}) do
      for _, training in ipairs({false, true}) do
        for _, shape in ipairs({{2, 5, 3, 4}, {3, 70, 9, 11}, {2, 4, 3, 2, 5}}) do
          local fmt = #shape == 5 and {memory_format = flow.channels_last_3d} or cl
          local x, C = flow.randn(unpack(shape)):to(dt), shape[2]
          local w, b = flow.randn(C):to(dt):requires_grad_(), flow.randn(C):to(dt):requires_grad_()
          local stats = {}
          local function run(inp)
            local rm, rv = flow.linspace(-1, 1, C):to(dt), flow.linspace(0.5, 2, C):to(dt)
            local y = F.batch_norm(inp, rm, rv, {weight = w, bias = b, training = training})
            stats[#stats + 1] = {rm, rv}
            return y
          end
          local xa, xb = x:clone():requires_grad_(), x:to(fmt):detach():requires_grad_()
          local ya, yb = run(xa), run(xb)
          assert.is_true(yb:is_contiguous(fmt))
          local g = flow.randn(unpack(shape)):to(dt)
          local ga = flow.autograd.grad({ya}, {xa, w, b}, {g})
          local gb = flow.autograd.grad({yb}, {xb, w, b}, {g:to(fmt)})
          assert.is_true(gb[1]:is_contiguous(fmt))
          -- the per-element formulas are the NCHW kernels'; sums in double
          -- (float64: their order shows in the last bits)
          local tol = dt == flow.float64 and 1e-12 or 0
          H.close(yb, ya, tol)
          for k = 1, 3 do H.close(gb[k], ga[k], tol) end
          H.close(stats[2][1], stats[1][1], tol)
          H.close(stats[2][2], stats[1][2], tol)
        end
      end
    end
  end)

  it('max_pool keeps channels-last: values, indices and grads equal to NCHW', function()
    for _, dt in ipairs({flow.float32, flow.float64}) do
      for _, c in ipairs({{shape = {2, 5, 9, 8}, k = 3, o = {stride = 2, padding = 1}},
                          {shape = {1, 3, 7, 6}, k = 2, o = {ceil_mode = true}},
                          {shape = {2, 4, 9, 9}, k = 3, o = {stride = 1, padding = 1, dilation = 2}},
                          {shape = {2, 17, 5, 5}, k = {2, 3}, o = {stride = {1, 2}, padding = {1, 0}}},
                          {shape = {2, 3, 4, 5, 6}, k = 2, o = {stride = 2, padding = 1}}}) do
        local five = #c.shape == 5
        local fmt = five and {memory_format = flow.channels_last_3d} or cl
        local x = flow.randn(unpack(c.shape)):to(dt)
        x[{1, 2, 1, 1}] = 0 / 0                          -- NaN wins its windows
        if not five then x[{1, 1}] = -math.huge end       -- all -inf: the first tap
        x[{1, 3, 1}] = 0                                  -- ties keep the first tap
        local f = five and F.max_pool3d or F.max_pool2d
        c.o.return_indices = true
        local xa, xb = x:clone():requires_grad_(), x:to(fmt):detach():requires_grad_()
        local ya, ia = f(xa, c.k, c.o)
        local yb, ib = f(xb, c.k, c.o)
        assert.is_true(yb:is_contiguous(fmt) and ib:is_contiguous(fmt))
        assert.is_true(flow.equal(ya:isnan(), yb:isnan()))
        H.close(yb:nan_to_num(0), ya:nan_to_num(0), 0)
        assert.is_true(flow.equal(ia, ib))
        local g = flow.randn(unpack(H.shape(ya))):to(dt)
        ya:backward(g)
        yb:backward(g)
        H.close(xb.grad, xa.grad, 0)
      end
    end
  end)

  it('Module:to{memory_format =} lays out the 4-d parameters NHWC', function()
    local m = nn.Sequential(nn.Conv2d(3, 8, 3, {padding = 1}), nn.BatchNorm2d(8), nn.ReLU())
    local x = flow.randn(2, 3, 5, 5)
    m:eval()
    local ref = m(x)
    m:to({memory_format = flow.channels_last})
    local wt = m[1].weight
    assert.is_true(wt:is_contiguous(cl))
    assert.is_true(wt.requires_grad)
    assert.is_true(m[1].bias:is_contiguous())
    local y = m(x:to(cl))
    H.close(y, ref, 1e-5)
    m:train()
    m(x:to(cl)):sum():backward()
    assert.are.same({8, 3, 3, 3}, H.shape(wt.grad))
  end)
end)

describe('memory-format propagation of elementwise ops', function()
  local mf = flow.channels_last
  local function is_cl(t) return t:is_contiguous({memory_format = mf}) and not t:is_contiguous() end

  it('keeps channels-last through unary, binary, scalar, clamp, leaky_relu and casts', function()
    flow.manual_seed(1)
    local x = flow.randn(2, 3, 4, 5)
    local xc = x:to({memory_format = mf})
    local b = flow.randn(1, 3, 1, 1)
    local y = flow.randn(2, 3, 4, 5)
    local cases = {
      {xc:relu(), x:relu()}, {flow.sigmoid(xc), flow.sigmoid(x)}, {xc * 2 + 1, x * 2 + 1},
      {xc + b, x + b}, {b + xc, b + x}, {xc - y, x - y}, {xc:clamp(-0.5, 0.5), x:clamp(-0.5, 0.5)},
      {F.leaky_relu(xc, 0.1), F.leaky_relu(x, 0.1)}, {xc:double(), x:double()},
      {xc:to('float16'), x:to('float16')}, {xc:double() * xc, x:double() * x},
      {xc:gt(0), x:gt(0)},
    }
    for i, c in ipairs(cases) do
      assert.is_true(is_cl(c[1]), 'case ' .. i .. ' lost the layout')
      H.close(c[1], c[2], 0, 'case ' .. i)
    end
    -- 5-d: channels_last_3d
    local v = flow.randn(2, 3, 2, 3, 4)
    local vc = v:to({memory_format = flow.channels_last_3d})
    local r = vc:exp()
    assert.is_true(r:is_contiguous({memory_format = flow.channels_last_3d}))
    H.close(r, v:exp(), 0)
  end)

  it('follows the first full-size operand, as PyTorch does', function()
    local x = flow.randn(2, 3, 4, 5)
    local xc = x:to({memory_format = mf})
    assert.is_true((x + xc):is_contiguous())          -- contiguous first: contiguous
    assert.is_true(is_cl(xc + x))                      -- channels-last first
    -- ambiguous operands (C == 1) and broadcast ones do not decide
    local one = flow.randn(2, 1, 4, 5)
    assert.is_true((one:to({memory_format = mf}) + one):is_contiguous())
    -- an `out`/in-place result keeps its own layout
    local z = flow.zeros(2, 3, 4, 5)
    z:add_(xc)
    assert.is_true(z:is_contiguous())
    H.close(z, x, 0)
    xc:mul_(2)
    assert.is_true(is_cl(xc))
    H.close(xc, x * 2, 0)
  end)

  it('keeps the layout through a conv -> relu -> add block and its grads', function()
    flow.manual_seed(2)
    local conv = nn.Conv2d(3, 4, 3, {padding = 1})
    local x = flow.randn(2, 3, 6, 6)
    local function block(inp) local h = F.relu(conv(inp)); return h + h * 0.5 end
    local ref = block(x)
    conv:to({memory_format = mf})
    local xc = x:to({memory_format = mf}):requires_grad_(true)
    local out = block(xc)
    assert.is_true(is_cl(out))
    H.close(out, ref, 1e-5)
    out:sum():backward()
    assert.are.same({2, 3, 6, 6}, H.shape(xc.grad))
  end)
end)
