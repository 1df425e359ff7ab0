-- Every op with a CUDA kernel, forward and backward, against the CPU: the
-- inputs are made on the CPU, copied to the GPU, and the results and grads
-- copied back and compared. Without a GPU the whole file is one pending line.
local flow = require 'oneflow'
local H = require 'spec.helpers'

if not flow.cuda.is_available() then
  describe('CUDA ops', function()
    pending('skipped: no usable GPU (' .. flow.cuda.why_unavailable() .. ')')
  end)
  return
end

local function randn(...)
  return flow.randn(...)
end

-- f on CPU tensors and on their CUDA copies; results (and grads of float
-- inputs when `grad`) must agree within tol.
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
  assert.are.same(rc:size():totable(), rg:size():totable())
  assert.are.equal(rc.dtype, rg.dtype, name .. ': dtype')
  H.close(rg:cpu(), rc, tol, name)
  if grad then
    local w = flow.randn(rc:size():totable(), {dtype = rc.dtype})
    local lc, lg = (rc * w):sum(), (rg * w:cuda()):sum()
    lc:backward()
    lg:backward()
    for i, x in ipairs(cpu_in) do
      if x.requires_grad then
        assert.are.equal('cuda', gpu_in[i].grad.device.type)
        H.close(gpu_in[i].grad:cpu(), x.grad, tol * 10, name .. ' grad ' .. i)
      end
    end
  end
end

describe('CUDA elementwise', function()
  flow.manual_seed(1)
  local a, b = randn(4, 5), randn(5)
  local pos = randn(4, 5):abs() + 0.5
  it('binary ops with broadcasting, all float dtypes', function()
    for _, dt in ipairs({'float32', 'float64'}) do
      local x, y = a:to(dt), b:to(dt)
      check('add ' .. dt, function(p, q) return p + q end, {x, y}, 1e-6, true)
      check('sub', function(p, q) return p - q end, {x, y}, 1e-6, true)
      check('mul', function(p, q) return p * q end, {x, y}, 1e-6, true)
      check('div', function(p, q) return p / q end, {x, pos:to(dt)}, 1e-5, true)
      check('pow', function(p, q) return p:abs() ^ q end, {x, y}, 1e-5, true)
      check('maximum', flow.maximum, {x, y}, 0, true)
      check('atan2', flow.atan2, {x, y}, 1e-5, true)
      check('gt', function(p, q) return p:gt(q) end, {x, y}, 0)
    end
  end)
  it('float16 and bfloat16 computed in float32', function()
    for _, dt in ipairs({'float16', 'bfloat16'}) do
      check('add ' .. dt, function(p, q) return p * q + p end, {a:to(dt), b:to(dt)}, 1e-2)
    end
  end)
  it('integer and bool ops', function()
    local i, j = flow.randint(-9, 9, {4, 5}), flow.randint(1, 9, {5})
    check('int add', function(p, q) return p + q end, {i, j}, 0)
    check('floor_divide', flow.floor_divide, {i, j}, 0)
    check('remainder', flow.remainder, {i, j}, 0)
    check('bitwise_and', flow.bitwise_and, {i, j}, 0)
    check('logical_xor', flow.logical_xor, {i:gt(0), j:gt(4)}, 0)
  end)
  it('integer division by zero is reported at the next synchronising call', function()
    local i = flow.tensor({1, 2}, {dtype = 'int64'}):cuda()
    local z = flow.zeros(2, {dtype = 'int64'}):cuda()
    local r = flow.floor_divide(i, z)
    H.raises(function() r:cpu() end, 'division by zero')
  end)
  it('unary ops', function()
    for _, name in ipairs({'exp', 'log', 'sqrt', 'sin', 'cos', 'tanh', 'sigmoid', 'relu',
                           'gelu', 'silu', 'abs', 'neg', 'floor', 'erf', 'softplus', 'mish'}) do
      local x = (name == 'log' or name == 'sqrt') and pos or a
      check(name, function(p) return flow[name](p) end, {x}, 1e-5, true)
    end
    check('clamp', function(p) return p:clamp(-0.5, 0.5) end, {a}, 0, true)
    check('clamp min above max', function(p) return p:clamp(0.5, -0.5) end, {a}, 0, false)
    check('leaky_relu', function(p) return flow.nn.functional.leaky_relu(p, 0.1) end, {a}, 0, true)
    check('where', function(p, q) return flow.where(p:gt(0), p, q) end, {a, b}, 0, true)
    check('masked_fill', function(p) return p:masked_fill(p:lt(0), 2) end, {a}, 0, true)
  end)
  it('non-contiguous inputs and copies between devices', function()
    local t = randn(6, 4):t()
    check('transpose exp', function(p) return p:exp() end, {t}, 1e-6, true)
    check('contiguous', function(p) return p:contiguous() end, {t}, 0, true)
    check('cast', function(p) return p:to('float64') end, {t}, 0, true)
    check('cast to int', function(p) return (p * 10):to('int32') end, {t}, 0)
    check('cat', function(p, q) return flow.cat({p, q}, 1) end, {a, a}, 0, true)
  end)
end)

describe('CUDA reductions', function()
  flow.manual_seed(2)
  local x = randn(7, 33, 5)
  it('sum/mean/prod/amax/amin/logsumexp/norm over dims', function()
    check('sum', function(p) return p:sum(2) end, {x}, 1e-5, true)
    check('sum all', function(p) return p:sum() end, {x}, 1e-5, true)
    check('mean', function(p) return p:mean({1, 3}) end, {x}, 1e-5, true)
    check('prod', function(p) return (p * 0.1 + 1):prod(3) end, {x}, 1e-5, true)
    check('amax', function(p) return p:amax(2) end, {x}, 0, true)
    check('amin', function(p) return p:amin(1) end, {x}, 0, true)
    check('logsumexp', function(p) return p:logsumexp(2) end, {x}, 1e-5, true)
    check('norm', function(p) return p:norm() end, {x}, 1e-5, true)
    check('var', function(p) return p:var(2) end, {x}, 1e-5, true)
    check('std', function(p) return p:std(1) end, {x}, 1e-5, true)
    check('int sum', function(p) return p:sum(2) end, {flow.randint(0, 5, {3, 40})}, 0)
    check('any', function(p) return p:gt(2):any(2) end, {x}, 0)
  end)
  it('max/argmax', function()
    check('argmax', function(p) return p:argmax(2) end, {x}, 0)
    check('max values', function(p) return (p:max(3)) end, {x}, 0, true)
  end)
  it('softmax, log_softmax, layer_norm and rms_norm forward and backward', function()
    check('softmax', function(p) return p:softmax(2) end, {x}, 1e-5, true)
    check('softmax last', function(p) return p:softmax(3) end, {x}, 1e-5, true)
    check('log_softmax', function(p) return p:log_softmax(3) end, {x}, 1e-5, true)
    local w, b = randn(33, 5), randn(33, 5)
    check('layer_norm', function(p, q, r) return flow.nn.functional.layer_norm(p, {33, 5}, q, r) end,
          {x, w, b}, 1e-4, true)
    local y = randn(64, 1024)
    check('layer_norm wide', function(p) return flow.nn.functional.layer_norm(p, {1024}) end,
          {y}, 1e-4, true)
    check('rms_norm', function(p, q) return flow.nn.functional.rms_norm(p, {33, 5}, q, 1e-5) end,
          {x, w}, 1e-4, true)
    check('rms_norm wide', function(p) return flow.nn.functional.rms_norm(p, {1024}) end,
          {y}, 1e-4, true)
  end)
end)

describe('CUDA matmul', function()
  flow.manual_seed(3)
  it('mm, bmm, broadcast matmul and addmm against the CPU', function()
    check('mm', flow.matmul, {randn(17, 33), randn(33, 9)}, 1e-4, true)
    check('mv', flow.matmul, {randn(17, 33), randn(33)}, 1e-4, true)
    check('bmm', flow.bmm, {randn(3, 17, 33), randn(3, 33, 9)}, 1e-4, true)
    check('broadcast', flow.matmul, {randn(2, 3, 17, 33), randn(33, 9)}, 1e-4, true)
    check('broadcast b', flow.matmul, {randn(17, 33), randn(4, 33, 9)}, 1e-4, true)
    check('float64', flow.matmul, {randn(8, 8):double(), randn(8, 8):double()}, 1e-12, true)
    check('addmm', function(c, p, q) return flow.addmm(c, p, q, {beta = 0.5, alpha = 2}) end,
          {randn(9), randn(17, 33), randn(33, 9)}, 1e-4, true)
    check('half', flow.matmul, {randn(16, 32):half(), randn(32, 8):half()}, 2e-2)
  end)
  it('keeps TF32 off unless allowed', function()
    local p, q = randn(256, 256), randn(256, 256)
    local exact = flow.matmul(p:double(), q:double())
    local err = (flow.matmul(p:cuda(), q:cuda()):cpu():double() - exact):abs():max():item()
    assert.is_true(err < 1e-3, 'float32 error ' .. err)
  end)
end)

describe('CUDA random', function()
  it('gives the CPU numbers for the same seed', function()
    for _, dt in ipairs({'float32', 'float64', 'float16'}) do
      flow.manual_seed(7)
      local c = flow.rand(1000, {dtype = dt})
      flow.manual_seed(7)
      local g = flow.rand(1000, {dtype = dt, device = 'cuda'})
      H.close(g:cpu(), c, 0, 'rand ' .. dt)
    end
    flow.manual_seed(8)
    local c = flow.randn(3, 333)
    flow.manual_seed(8)
    H.close(flow.randn(3, 333, {device = 'cuda'}):cpu(), c, 1e-12, 'randn')
    flow.manual_seed(9)
    local bc = flow.empty(1001):bernoulli_(0.3)
    flow.manual_seed(9)
    H.close(flow.empty(1001, {device = 'cuda'}):bernoulli_(0.3):cpu(), bc, 0, 'bernoulli')
  end)
end)

describe('CUDA optimizers, memory and errors', function()
  it('SGD and Adam steps match the CPU', function()
    for _, make in ipairs({function(p) return flow.optim.SGD(p, {lr = 0.1, momentum = 0.9}) end,
                           function(p) return flow.optim.Adam(p, {lr = 0.01}) end}) do
      flow.manual_seed(4)
      local lc = flow.nn.Linear(8, 4)
      local lg = flow.nn.Linear(8, 4)
      lg:load_state_dict(lc:state_dict())
      lg:to('cuda')
      local oc, og = make(lc:parameters()), make(lg:parameters())
      local x = randn(16, 8)
      for _ = 1, 3 do
        oc:zero_grad(); og:zero_grad()
        lc(x):pow(2):mean():backward()
        lg(x:cuda()):pow(2):mean():backward()
        oc:step(); og:step()
      end
      H.close(lg.weight:cpu(), lc.weight, 1e-5, 'weights after 3 steps')
    end
  end)
  it('mixed devices and ops without a CUDA kernel give clear errors', function()
    local g, c = randn(3):cuda(), randn(3)
    H.raises(function() return g + c end, 'add', 'cuda:0', 'cpu')
    H.raises(function() return g:index_select(1, flow.tensor({1}, {dtype = 'int64'})) end,
             'index_select', 'cuda:0', 'cpu')
  end)
  it('counts memory and says what it held when out of memory', function()
    flow.cuda.synchronize()
    local before = flow.cuda.memory_stats().current_bytes
    local t = flow.empty(1024, 1024, {device = 'cuda'})
    assert.is_true(flow.cuda.memory_stats().current_bytes >= before + 4 * 1024 * 1024)
    assert.is_true(flow.cuda.max_memory_allocated() >= 4 * 1024 * 1024)
    assert.are.equal(1024 * 1024, t:numel())
    H.raises(function() flow.empty(2 ^ 46, {dtype = 'uint8', device = 'cuda'}) end,
             'out of memory', 'tried to allocate', 'held by tensors')
    flow.cuda.empty_cache()
  end)
  it('pinned memory, non-blocking copies, streams and events', function()
    local x = randn(1000)
    local p = x:pin_memory()
    assert.is_true(p:is_pinned())
    local s = flow.cuda.Stream()
    local e0, e1 = flow.cuda.Event({enable_timing = true}), flow.cuda.Event({enable_timing = true})
    local y
    flow.cuda.stream(s, function()
      e0:record()
      y = p:to('cuda', {non_blocking = true}) * 2
      e1:record()
    end)
    s:synchronize()
    assert.is_true(e1:query())
    assert.is_true(e0:elapsed_time(e1) >= 0)
    H.close(y:cpu(), x * 2, 1e-6)
  end)
end)
