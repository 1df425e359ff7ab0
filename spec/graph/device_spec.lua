-- nn.Graph and devices, the parts that run without a GPU: the graph's
-- device, the CUDA graph flag on a CPU graph (a reasoned fallback, same
-- results), refused device moves inside build, loading onto a given device,
-- the device-aware optimizer updates on the CPU, per-device autocast state.
-- The GPU half is spec/cuda/graph_spec.lua.
local flow = require 'oneflow'
local ffi = require 'ffi'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional
local C = flow.C

local function mlp(seed)
  flow.manual_seed(seed)
  return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
end

local Train = nn.Graph:subclass('DevTrain')
function Train:__init(m, opt, cuda_graph)
  nn.Graph.__init(self)
  self.m = m
  self:add_optimizer(opt)
  if cuda_graph ~= nil then self.config:enable_cuda_graph(cuda_graph) end
end
function Train:build(x, y)
  local loss = F.cross_entropy(self.m(x), y)
  loss:backward()
  return loss
end

local function batches(n)
  flow.manual_seed(5)
  local list = {}
  for i = 1, n do list[i] = {flow.randn(8, 6), flow.randint(1, 4, {8})} end
  return list
end

local function tmpfile()
  local p = os.tmpname()
  os.remove(p)
  return p
end

describe('nn.Graph devices', function()
  it('compiles for the device of its inputs and says so', function()
    local m = mlp(1)
    local G = nn.Graph:subclass('DevEval')
    function G:__init() nn.Graph.__init(self); self.m = m end
    function G:build(x) return self.m(x) end
    local g = G()
    assert.is_nil(g:device())
    g(flow.randn(2, 6))
    assert.are.equal('cpu', g:device().type)
    assert.are.equal(C.OF_CPU, C.of_graph_device(g:_graph()))
  end)

  it('refuses device moves inside build with a clear error', function()
    local m = mlp(2)
    local G = nn.Graph:subclass('Mover')
    function G:__init() nn.Graph.__init(self); self.m = m end
    function G:build(x) return self.m(x:to('cuda')) end
    H.raises(function() G()(flow.randn(2, 6)) end, 'nn.Graph', 'to(cuda:0)', 'one device',
             'before calling the graph')
    function G:build(x) return self.m(x):cpu() end   -- a no-op move is fine
    H.close(G()(flow.randn(2, 6)):size():totable(), {2, 3}, 0)
  end)

  it('runs a CPU graph with enable_cuda_graph as usual and says why it is not captured', function()
    local ref = mlp(3)
    local a, b = mlp(3), mlp(3)
    a:load_state_dict(ref:state_dict())
    b:load_state_dict(ref:state_dict())
    local ga = Train(a, flow.optim.Adam(a:parameters(), {lr = 1e-2}), true)
    local gb = Train(b, flow.optim.Adam(b:parameters(), {lr = 1e-2}))
    assert.are.equal('off', ga:cuda_graph_status())
    for _, bt in ipairs(batches(4)) do
      H.close(ga(bt[1], bt[2]), gb(bt[1], bt[2]), 0)
    end
    assert.are.equal('the graph does not run on a CUDA device', ga:cuda_graph_status())
    assert.are.equal('off', gb:cuda_graph_status())
    local pa, pb = a:parameters(), b:parameters()
    for i = 1, #pa do H.close(pa[i], pb[i], 0) end
    -- switching it off (and on) later applies to the compiled graph
    ga.config:enable_cuda_graph(false)
    ga(batches(1)[1][1], batches(1)[1][2])
    assert.are.equal('off', ga:cuda_graph_status())
  end)

  it('checks enable_cuda_graph arguments (also by its OneFlow name)', function()
    local g = Train(mlp(4), flow.optim.SGD(mlp(4):parameters(), {lr = 0.1}))
    H.raises(function() g.config:enable_cuda_graph('yes') end, 'enable_cuda_graph: expected a boolean')
    H.raises(function() g.config:enable_cuda_graph(true, 3) end, 'expected an options table')
    g.config:enable_cudagraph(true)
    assert.are.equal(1, g.config.cuda_graph)
    g.config:enable_cuda_graph(true, {static_outputs = true})
    assert.are.equal(2, g.config.cuda_graph)
    g.config:enable_cuda_graph(false)
    assert.are.equal(0, g.config.cuda_graph)
  end)

  it('loads a saved graph onto a given device, and says why a device is unusable', function()
    local m = mlp(5)
    m:eval()
    local G = nn.Graph:subclass('SaveEval')
    function G:__init() nn.Graph.__init(self); self.m = m end
    function G:build(x) return F.softmax(self.m(x), 2) end
    local g = G()
    local x = flow.randn(4, 6)
    local want = g(x)
    local path = tmpfile()
    g:save(path)
    local l = nn.Graph.load(path, {device = 'cpu'})
    assert.are.equal('cpu', l:device().type)
    H.close(l(x), want, 0)
    H.close(nn.Graph.load(path)(x), want, 0)
    l:to('cpu')
    H.close(l(x), want, 0)
    H.raises(function() nn.Graph.load(path, 3) end, 'expected an options table')
    if not flow.cuda.is_available() then
      H.raises(function() nn.Graph.load(path, {device = 'cuda'}) end, 'nn.Graph.load', path,
               'not available')
      H.raises(function() l:to('cuda') end, 'not available')
      H.close(l(x), want, 0)   -- a failed move leaves the graph as it was
    end
    os.remove(path)
  end)

  it('refuses to move fused CPU nodes to a device', function()
    if not flow.cuda.is_available() then
      pending('needs a GPU to reach the fused-node check (the device check comes first)')
      return
    end
    local m = mlp(6)
    local G = nn.Graph:subclass('Fused')
    function G:__init() nn.Graph.__init(self); self.m = m end
    function G:build(x) return (self.m(x) * 2 + 1):relu() end
    local g = G()
    g(flow.randn(2, 6))
    local path = tmpfile()
    g:save(path)
    H.raises(function() nn.Graph.load(path, {device = 'cuda'}) end, 'fused elementwise')
    os.remove(path)
  end)
end)

describe('fused optimizer updates with a device-aware hyper tensor', function()
  it('advance the step on the CPU and skip when found_inf is set', function()
    local w = flow.tensor({1.0, 2.0})
    local g = flow.tensor({0.5, 0.5})
    local hyper = flow.tensor({0.1, 0.0}, {dtype = flow.float64})
    local found = flow.zeros(1)
    assert.are.equal(0, C.of_optim_sgd_(w.p, g.p, nil, hyper.p, 0, 0, 0, 0, 0, found.p))
    H.close(w, {0.95, 1.95}, 1e-7)
    H.close(hyper, {0.1, 1}, 0)
    found:fill_(1)
    assert.are.equal(0, C.of_optim_sgd_(w.p, g.p, nil, hyper.p, 0, 0, 0, 0, 0, found.p))
    H.close(w, {0.95, 1.95}, 1e-7)
    H.close(hyper, {0.1, 1}, 0)
    local bad = flow.zeros(2)
    assert.are_not.equal(0, C.of_optim_sgd_(w.p, g.p, nil, hyper.p, 0, 0, 0, 0, 0, bad.p))
    assert.truthy(ffi.string(C.of_last_error()):find('found_inf must be a float32 tensor with one element', 1, true))
  end)
end)

describe('autocast per device type', function()
  it('keeps separate CPU and CUDA states; CPU ops ignore the CUDA one', function()
    local amp = flow.amp
    assert.is_false(amp.is_autocast_enabled('cuda'))
    assert.are.equal(flow.float16, amp.get_autocast_dtype('cuda'))
    assert.are.equal(flow.bfloat16, amp.get_autocast_dtype('cpu'))
    local a, b = flow.randn(3, 3), flow.randn(3, 3)
    local r, on_cuda, on_cpu = amp.autocast('cuda', function()
      return flow.matmul(a, b), amp.is_autocast_enabled('cuda'), amp.is_autocast_enabled()
    end)
    assert.is_true(on_cuda)
    assert.is_false(on_cpu)
    assert.are.equal(flow.float32, r.dtype)
    assert.is_false(amp.is_autocast_enabled('cuda'))
    local r2, cuda_dt = amp.autocast({device_type = 'cpu', dtype = flow.bfloat16}, function()
      return amp.autocast('cuda', {dtype = flow.bfloat16}, function()
        return flow.matmul(a, b), amp.get_autocast_dtype('cuda')
      end)
    end)
    assert.are.equal(flow.bfloat16, r2.dtype)
    assert.are.equal(flow.bfloat16, cuda_dt)
    assert.is_false(amp.is_autocast_enabled())
  end)

  it('GradScaler stays on the CPU for CPU work and moves with :to', function()
    local s = flow.amp.GradScaler()
    s:scale(flow.tensor(1.0))
    assert.are.equal('cpu', s._scale.device.type)
    assert.are.equal(s, s:to('cpu'))
    if not flow.cuda.is_available() then
      H.raises(function() flow.amp.GradScaler({device = 'cuda'}) end, 'not available')
    end
  end)
end)
