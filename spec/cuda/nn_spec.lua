-- cuDNN convolutions and batch norm, pooling, group/instance norm, losses,
-- interpolate, pad, dropout, channels-last and CUDA graphs on the GPU,
-- forward and backward, against the CPU. Without a GPU the file is one
-- pending line.
local flow = require 'oneflow'
local ffi = require 'ffi'
local H = require 'spec.helpers'
local F = flow.nn.functional

if not flow.cuda.is_available() then
  describe('CUDA nn ops', function()
    pending('skipped: no usable GPU (' .. flow.cuda.why_unavailable() .. ')')
  end)
  return
end

-- f on CPU inputs and on CUDA copies: values, and grads of the floating
-- inputs (through a random weighting of the outputs), within tol.
local function check(name, f, inputs, tol, grad)
  tol = tol or 1e-5
  local cpu_in, gpu_in = {}, {}
  for i, x in ipairs(inputs) do
    local g = grad and x.dtype.is_floating_point
    cpu_in[i] = g and x:clone():requires_grad_(true) or x
    gpu_in[i] = g and x:cuda():detach():requires_grad_(true) or x:cuda()
  end
  local rc, rg = f(unpack(cpu_in)), f(unpack(gpu_in))
  assert.are.equal('cuda', rg.device.type, name .. ': result not on the GPU')
  assert.are.same(rc:size():totable(), rg:size():totable(), name .. ': shape')
  H.close(rg:cpu():double(), rc:double(), tol, name)
  if grad then
    local w = flow.randn(rc:size():totable(), {dtype = rc.dtype})
    ;(rc * w):sum():backward()
    ;(rg * w:cuda()):sum():backward()
    for i, x in ipairs(cpu_in) do
      if x.requires_grad then
        assert.are.equal('cuda', gpu_in[i].grad.device.type)
        H.close(gpu_in[i].grad:cpu():double(), x.grad:double(), tol * 10, name .. ' grad ' .. i)
      end
    end
  end
  return rc, rg
end

describe('cuDNN', function()
  it('is loaded on first use and reports its version', function()
    assert.are.equal('', flow.backends.cudnn.why_unavailable())
    assert.is_true(flow.backends.cudnn.version() >= 90000)
    assert.is_true(flow.backends.cudnn.is_available())
  end)
end)

describe('CUDA convolution (cuDNN)', function()
  -- float32 results compared with the CPU's: no TF32
  setup(function() flow.backends.cudnn.allow_tf32 = false end)
  teardown(function() flow.backends.cudnn.allow_tf32 = true end)
  flow.manual_seed(3)
  local f64 = {dtype = 'float64'}
  it('conv1d/2d/3d with stride, padding, dilation and groups, forward and grads', function()
    check('conv1d', function(x, w, b) return F.conv1d(x, w, b, {stride = 2, padding = 1}) end,
          {flow.randn({2, 4, 9}, f64), flow.randn({6, 2, 3}, f64), flow.randn({6}, f64)}, 1e-9,
          true)
    local x, w = flow.randn({2, 4, 7, 6}, f64), flow.randn({6, 2, 3, 3}, f64)
    check('conv2d groups', function(a, b) return F.conv2d(a, b, nil, {padding = 1, groups = 2,
          dilation = {1, 2}, stride = {2, 1}}) end, {x, w}, 1e-9, true)
    check('conv2d depthwise', function(a, b) return F.conv2d(a, b, nil, {padding = 1,
          groups = 4}) end, {x, flow.randn({8, 1, 3, 3}, f64)}, 1e-9, true)
    check('conv3d', function(a, b, c) return F.conv3d(a, b, c, {padding = 1, stride = 2}) end,
          {flow.randn({1, 3, 5, 6, 5}, f64), flow.randn({4, 3, 3, 3, 3}, f64),
           flow.randn({4}, f64)}, 1e-9, true)
    check('conv2d float32', function(a, b) return F.conv2d(a, b, nil, {padding = 1}) end,
          {flow.randn(4, 8, 10, 10), flow.randn(16, 8, 3, 3)}, 1e-3, true)
  end)
  it('conv_transpose2d with output_padding and groups', function()
    check('conv_transpose2d', function(a, b, c)
      return F.conv_transpose2d(a, b, c, {stride = 2, padding = 1, output_padding = 1,
                                          groups = 2})
    end, {flow.randn({2, 4, 5, 5}, f64), flow.randn({4, 3, 3, 3}, f64), flow.randn({6}, f64)},
    1e-9, true)
  end)
  it('float16 and bfloat16 accumulate in float32', function()
    local x, w = flow.randn(2, 16, 12, 12), flow.randn(32, 16, 3, 3) * 0.1
    local ref = F.conv2d(x, w, nil, {padding = 1})
    for _, dt in ipairs({'float16', 'bfloat16'}) do
      local y = F.conv2d(x:to('cuda', dt), w:to('cuda', dt), nil, {padding = 1})
      assert.are.equal(dt, y.dtype.name)
      H.close(y:float():cpu(), ref, dt == 'float16' and 2e-2 or 1e-1, 'conv ' .. dt)
    end
  end)
  it('benchmark and deterministic algorithm choices agree with the default', function()
    local x, w = flow.randn(2, 8, 9, 9), flow.randn(8, 8, 3, 3)
    local ref = F.conv2d(x, w, nil, {padding = 1})
    for _, k in ipairs({'benchmark', 'deterministic'}) do
      flow.backends.cudnn[k] = true
      local ok, y = pcall(F.conv2d, x:cuda(), w:cuda(), nil, {padding = 1})
      flow.backends.cudnn[k] = false
      assert.is_true(ok, tostring(y))
      H.close(y:cpu(), ref, 1e-3, k)
    end
    assert.has_error(function() flow.backends.cudnn.benchmark = 1 end)
  end)
  it('channels-last inputs run NHWC and give channels-last results', function()
    local x, w = flow.randn(2, 8, 6, 6), flow.randn(4, 8, 3, 3)
    local ref = F.conv2d(x, w, nil, {padding = 1})
    local xc = x:cuda():to({memory_format = flow.channels_last}):requires_grad_(true)
    local y = F.conv2d(xc, w:cuda(), nil, {padding = 1})
    assert.is_true(y:is_contiguous({memory_format = flow.channels_last}))
    H.close(y:cpu(), ref, 1e-3, 'nhwc conv')
    y:sum():backward()
    local xr = x:clone():requires_grad_(true)
    F.conv2d(xr, w, nil, {padding = 1}):sum():backward()
    H.close(xc.grad:cpu(), xr.grad, 1e-3, 'nhwc conv grad')
  end)
  it('ONEFLOW_ENABLE_NHWC=1 computes NCHW tensors through NHWC', function()
    ffi.cdef [[int setenv(const char *name, const char *value, int overwrite);
               int unsetenv(const char *name);]]
    local x, w = flow.randn(2, 8, 6, 6), flow.randn(4, 8, 3, 3)
    ffi.C.setenv('ONEFLOW_ENABLE_NHWC', '1', 1)
    local ok, y = pcall(F.conv2d, x:cuda(), w:cuda(), nil, {padding = 1})
    ffi.C.unsetenv('ONEFLOW_ENABLE_NHWC')
    assert.is_true(ok, tostring(y))
    assert.is_true(y:is_contiguous())
    H.close(y:cpu(), F.conv2d(x, w, nil, {padding = 1}), 1e-3, 'NHWC env')
  end)
end)

describe('CUDA pooling', function()
  flow.manual_seed(4)
  local x = flow.randn({2, 3, 9, 8}, {dtype = 'float64'})
  it('max pools with indices, stride, padding, dilation, ceil_mode', function()
    check('max_pool2d', function(a) return F.max_pool2d(a, 3, {stride = 2, padding = 1,
          dilation = 1, ceil_mode = true}) end, {x}, 0, true)
    check('max_pool2d dilation', function(a) return F.max_pool2d(a, 2, {dilation = 2}) end,
          {x}, 0, true)
    local _, ig = F.max_pool2d(x:cuda(), 2, {return_indices = true})
    local _, ic = F.max_pool2d(x, 2, {return_indices = true})
    H.close(ig:cpu(), ic, 0, 'indices')
    check('max_pool1d', function(a) return F.max_pool1d(a, 3) end,
          {flow.randn({2, 3, 10}, {dtype = 'float64'})}, 0, true)
    check('adaptive_max_pool2d', function(a) return F.adaptive_max_pool2d(a, {4, 3}) end, {x}, 0,
          true)
  end)
  it('average pools, count_include_pad, divisor_override, adaptive, 3-d', function()
    check('avg_pool2d', function(a) return F.avg_pool2d(a, 3, {stride = 2, padding = 1}) end,
          {x}, 1e-12, true)
    check('avg_pool2d no pad count', function(a)
      return F.avg_pool2d(a, 3, {stride = 2, padding = 1, count_include_pad = false,
                                 ceil_mode = true})
    end, {x}, 1e-12, true)
    check('avg_pool2d divisor', function(a) return F.avg_pool2d(a, 2, {divisor_override = 3})
    end, {x}, 1e-12, true)
    check('adaptive_avg_pool2d', function(a) return F.adaptive_avg_pool2d(a, {1, 1}) end, {x},
          1e-12, true)
    check('adaptive_avg_pool2d 5x3', function(a) return F.adaptive_avg_pool2d(a, {5, 3}) end,
          {x}, 1e-12, true)
    check('avg_pool3d', function(a) return F.avg_pool3d(a, 2) end,
          {flow.randn({1, 2, 4, 4, 6}, {dtype = 'float64'})}, 1e-12, true)
    check('avg_pool float16', function(a) return F.avg_pool2d(a, 2) end, {x:half()}, 1e-2)
  end)
end)

describe('CUDA normalisation', function()
  flow.manual_seed(5)
  it('batch_norm training updates the running statistics like the CPU', function()
    for _, dt in ipairs({'float32', 'float64'}) do
      local x = flow.randn({4, 3, 5, 5}, {dtype = dt}) * 2 + 1
      local w, b = flow.randn({3}, {dtype = dt}), flow.randn({3}, {dtype = dt})
      local rm, rv = flow.zeros(3, {dtype = dt}), flow.ones(3, {dtype = dt})
      local rmg, rvg = rm:cuda(), rv:cuda()
      local tol = dt == 'float64' and 1e-9 or 1e-4
      check('batch_norm ' .. dt, function(a, p, q)
        local cpu = a.device.type == 'cpu'
        return F.batch_norm(a, cpu and rm or rmg, cpu and rv or rvg,
                            {weight = p, bias = q, training = true, momentum = 0.3})
      end, {x, w, b}, tol, true)
      -- check() ran the op once on each device, from the same start
      H.close(rmg:cpu(), rm, tol, 'running_mean')
      H.close(rvg:cpu(), rv, tol, 'running_var')
    end
  end)
  it('batch_norm eval, 2-d and 3-d inputs, no affine, float16', function()
    local rm, rv = flow.randn(6), flow.rand(6) + 0.5
    check('batch_norm eval', function(a)
      local dev = a.device
      return F.batch_norm(a, rm:to(dev), rv:to(dev), {training = false})
    end, {flow.randn(4, 6, 3)}, 1e-5, true)
    check('batch_norm 2-d', function(a) return F.batch_norm(a, nil, nil, {training = true}) end,
          {flow.randn(8, 6)}, 1e-4, true)
    check('batch_norm half', function(a) return F.batch_norm(a, nil, nil, {training = true}) end,
          {flow.randn(4, 6, 3, 3):half()}, 2e-2)
  end)
  it('batch_norm on channels-last input keeps the layout', function()
    local x = flow.randn(2, 4, 3, 3)
    local y = F.batch_norm(x:cuda():to({memory_format = flow.channels_last}), nil, nil,
                           {training = true})
    assert.is_true(y:is_contiguous({memory_format = flow.channels_last}))
    H.close(y:cpu(), F.batch_norm(x, nil, nil, {training = true}), 1e-4, 'nhwc bn')
  end)
  it('group_norm and instance_norm (with running statistics)', function()
    local x = flow.randn({2, 6, 4, 5}, {dtype = 'float64'})
    local w, b = flow.randn({6}, {dtype = 'float64'}), flow.randn({6}, {dtype = 'float64'})
    check('group_norm', function(a, p, q) return F.group_norm(a, 3, {weight = p, bias = q}) end,
          {x, w, b}, 1e-9, true)
    local rm, rv = flow.zeros(6, {dtype = 'float64'}), flow.ones(6, {dtype = 'float64'})
    local rmg, rvg = rm:cuda(), rv:cuda()
    check('instance_norm', function(a)
      local cpu = a.device.type == 'cpu'
      return F.instance_norm(a, {running_mean = cpu and rm or rmg, running_var = cpu and rv or rvg})
    end, {x}, 1e-9, true)
    H.close(rmg:cpu(), rm, 1e-9, 'instance running_mean')
    H.close(rvg:cpu(), rv, 1e-9, 'instance running_var')
  end)
end)

describe('CUDA losses', function()
  flow.manual_seed(6)
  local f64 = {dtype = 'float64'}
  local x = flow.randn({6, 5}, f64)
  local t = flow.tensor({1, 5, 2, 3, 3, 4}, {dtype = 'int64'})
  local w = flow.rand({5}, f64) + 0.5
  it('cross_entropy: weights, ignore_index, label smoothing, probabilities, reductions', function()
    for _, red in ipairs({'mean', 'sum', 'none'}) do
      check('ce ' .. red, function(a) return F.cross_entropy(a, t, {reduction = red}) end, {x},
            1e-9, true)
    end
    check('ce weight', function(a, q) return F.cross_entropy(a, t, {weight = q}) end,
          {x, w}, 1e-9, true)
    local ti = flow.tensor({1, 5, -100, 3, -100, 4}, {dtype = 'int64'})
    check('ce ignore', function(a) return F.cross_entropy(a, ti, {label_smoothing = 0.2}) end,
          {x}, 1e-9, true)
    local p = F.softmax(flow.randn({6, 5}, f64), 2)
    check('ce probs', function(a, q) return F.cross_entropy(a, q, {label_smoothing = 0.1}) end,
          {x, p}, 1e-9, true)
    local x4 = flow.randn({2, 5, 3, 2}, f64)
    local t4 = flow.randint(1, 6, {2, 3, 2})
    check('ce spatial', function(a) return F.cross_entropy(a, t4) end, {x4}, 1e-9, true)
    check('ce float32', function(a) return F.cross_entropy(a, t) end, {x:float()}, 1e-5, true)
    local wg = w:cuda()
    check('ce weight smoothing', function(a) return F.cross_entropy(a, ti, {
      weight = a.device.type == 'cpu' and w or wg, label_smoothing = 0.3}) end, {x}, 1e-9, true)
  end)
  it('checks class targets in the kernels, reported at the next synchronising call', function()
    -- no host copy of the targets (capture-safe): the kernel flags a bad one
    local bad = flow.tensor({1, 9, 2, 3, 3, 4}, {dtype = 'int64'}):cuda()
    H.raises(function()
      F.cross_entropy(x:cuda(), bad)
      flow.cuda.synchronize()
    end, 'cross_entropy', 'index out of range')
    H.raises(function() return F.nll_loss(F.log_softmax(x, 2):cuda(), bad):item() end,
             'nll_loss', 'index out of range')
    -- ignore_index is not out of range, and the flag was cleared
    local ti = flow.tensor({1, -100, 2, 3, 3, 4}, {dtype = 'int64'})
    H.close(F.cross_entropy(x:cuda(), ti:cuda()):cpu(), F.cross_entropy(x, ti), 1e-9)
    -- shapes and dtypes are still checked when the op is called
    H.raises(function() F.cross_entropy(x:cuda(), flow.tensor({1, 2}):cuda()) end,
             'cross_entropy', 'expected target of shape')
  end)
  it('nll_loss with weights and ignore_index', function()
    local lp = F.log_softmax(x, 2)
    check('nll', function(a) return F.nll_loss(a, t) end, {lp}, 1e-9, true)
    check('nll weight none', function(a, q) return F.nll_loss(a, t, {weight = q,
          reduction = 'none'}) end, {lp, w}, 1e-9, true)
    local ti = flow.tensor({1, -100, 2, 3, 3, 4}, {dtype = 'int64'})
    check('nll ignore', function(a) return F.nll_loss(a, ti, {ignore_index = -100}) end, {lp},
          1e-9, true)
  end)
  it('mse, l1, smooth_l1, bce, bce_with_logits, kl_div (composed of device kernels)', function()
    local a, b = flow.randn({4, 3}, f64), flow.randn({4, 3}, f64)
    local p, y = flow.rand({4, 3}, f64) * 0.8 + 0.1, flow.rand({4, 3}, f64)
    check('mse', F.mse_loss, {a, b}, 1e-9, true)
    check('l1', F.l1_loss, {a, b}, 1e-9, true)
    check('smooth_l1', function(u, v) return F.smooth_l1_loss(u, v, {beta = 0.5}) end, {a, b},
          1e-9, true)
    check('bce', F.binary_cross_entropy, {p, y}, 1e-9, true)
    check('bce logits', function(u, v) return F.binary_cross_entropy_with_logits(u, v,
          {pos_weight = flow.tensor({1, 2, 3}, f64):to(u.device)}) end, {a, y}, 1e-9, true)
    check('kl_div', function(u, v) return F.kl_div(u, v, {reduction = 'batchmean'}) end,
          {F.log_softmax(a, 2), F.softmax(b, 2)}, 1e-9, true)
  end)
end)

describe('CUDA interpolate and pad', function()
  flow.manual_seed(7)
  local x = flow.randn({2, 3, 4, 5}, {dtype = 'float64'})
  it('interpolate nearest and bilinear, forward and backward', function()
    check('nearest', function(a) return F.interpolate(a, {scale_factor = 2}) end, {x}, 0, true)
    check('nearest size', function(a) return F.interpolate(a, {size = {3, 7}}) end, {x}, 0, true)
    for _, ac in ipairs({false, true}) do
      check('bilinear', function(a) return F.interpolate(a, {size = {7, 9}, mode = 'bilinear',
            align_corners = ac}) end, {x}, 1e-12, true)
    end
    check('linear', function(a) return F.interpolate(a, {size = 9, mode = 'linear'}) end,
          {flow.randn({2, 3, 5}, {dtype = 'float64'})}, 1e-12, true)
    check('nearest int', function(a) return F.interpolate(a, {scale_factor = 2}) end,
          {flow.randint(0, 9, {1, 2, 3, 3})}, 0)
  end)
  it('pad constant, reflect, replicate (and negative constant padding)', function()
    check('pad constant', function(a) return F.pad(a, {1, 2, 0, 3}, {value = -7}) end, {x}, 0,
          true)
    check('pad negative', function(a) return F.pad(a, {-1, 2}) end, {x}, 0, true)
    check('pad reflect', function(a) return F.pad(a, {2, 1, 1, 2}, 'reflect') end, {x}, 1e-12,
          true)
    check('pad replicate', function(a) return F.pad(a, {3, 1, 2, 2}, 'replicate') end, {x},
          1e-12, true)
    check('pad int', function(a) return F.pad(a, {1, 1}, {value = 4}) end,
          {flow.randint(0, 9, {2, 3})}, 0)
  end)
end)

describe('CUDA dropout', function()
  it('draws the same Philox mask as the CPU', function()
    local x = flow.randn(64, 33)
    flow.manual_seed(11)
    local c = F.dropout(x, 0.3)
    flow.manual_seed(11)
    local g = F.dropout(x:cuda(), 0.3)
    assert.are.equal('cuda', g.device.type)
    H.close(g:cpu(), c, 1e-6, 'dropout')
  end)
end)

describe('CUDA graphs', function()
  it('capture records without running, replay reruns with new inputs', function()
    local inp = flow.zeros(1000):cuda()
    local w = flow.randn(1000):cuda()
    local g = flow.cuda.CUDAGraph()
    local out = g:capture(function() return (inp * w + 1):relu() end)
    inp:copy_(flow.ones(1000):cuda())
    g:replay()
    H.close(out:cpu(), (w + 1):relu():cpu(), 1e-6, 'replay 1')
    inp:copy_(flow.full({1000}, 2):cuda())
    g:replay()
    H.close(out:cpu(), (w * 2 + 1):relu():cpu(), 1e-6, 'replay 2')
  end)
  it('errors: replay before capture, capture twice, a host sync inside', function()
    local g = flow.cuda.graphs.CUDAGraph()
    H.raises(function() g:replay() end, 'nothing captured')
    local x = flow.ones(3):cuda()
    assert.has_error(function() g:capture(function() return x:sum():item() end) end)
    assert.are.equal(3, (x + 2):sum():item() - 6 + 3)   -- the stream works after it
    local g2 = flow.cuda.CUDAGraph()
    g2:capture(function() return x + 1 end)
    H.raises(function() g2:capture_begin() end, 'already captured')
  end)
end)
