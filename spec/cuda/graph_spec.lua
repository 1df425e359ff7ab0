-- nn.Graph on CUDA: a graph on the GPU against eager GPU code and the CPU
-- graph, CUDA graph capture and replay of a compiled step against plain
-- runs, AMP graphs (float16 with loss scaling on the device), saving and
-- loading across devices, GradScaler's device kernels, channels-last
-- elementwise results. Without a GPU the file is one pending line; the
-- parts that run anywhere are in spec/graph/device_spec.lua.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional

if not flow.cuda.is_available() then
  describe('nn.Graph on CUDA', function()
    pending('skipped: no usable GPU (' .. flow.cuda.why_unavailable() .. ')')
  end)
  return
end

local function mlp(seed, dropout)
  flow.manual_seed(seed)
  local layers = {nn.Linear(6, 32), nn.ReLU()}
  if dropout then layers[#layers + 1] = nn.Dropout(0.3) end
  layers[#layers + 1] = nn.Linear(32, 32)
  layers[#layers + 1] = nn.Tanh()
  layers[#layers + 1] = nn.Linear(32, 4)
  return nn.Sequential(unpack(layers))
end

local function copy_of(m, seed, device, dropout)
  local c = mlp(seed, dropout)
  c:load_state_dict(m:state_dict())
  return device and c:to(device) or c
end

local Train = nn.Graph:subclass('CudaTrain')
function Train:__init(m, opt, opts)
  nn.Graph.__init(self)
  self.m = m
  self.loss = opts and opts.loss or 'ce'
  self:add_optimizer(opt)
  if opts and opts.cuda_graph then self.config:enable_cuda_graph(true, opts.cg_opts) end
  if opts and opts.amp then self.config:enable_amp(true) end
end
function Train:build(x, y)
  local out = self.m(x)
  local loss = self.loss == 'ce' and F.cross_entropy(out, y) or F.mse_loss(out, y)
  loss:backward()
  return loss
end

local Eval = nn.Graph:subclass('CudaEval')
function Eval:__init(m) nn.Graph.__init(self); self.m = m end
function Eval:build(x) return F.softmax(self.m(x), 2) end

local function max_diff(a, b)
  local pa, pb, d = a:parameters(), b:parameters(), 0
  for i = 1, #pa do d = math.max(d, (pa[i]:cpu():double() - pb[i]:cpu():double()):abs():max():item()) end
  return d
end

local function batches(n, regression)
  flow.manual_seed(11)
  local list = {}
  for i = 1, n do
    list[i] = {flow.randn(16, 6), regression and flow.randn(16, 4) or flow.randint(1, 5, {16})}
  end
  return list
end

describe('nn.Graph on CUDA', function()
  it('trains like eager CUDA code and like the CPU graph', function()
    local ref = mlp(1)
    local g_model, e_model, c_model = copy_of(ref, 1, 'cuda'), copy_of(ref, 1, 'cuda'), copy_of(ref, 1)
    local g = Train(g_model, flow.optim.Adam(g_model:parameters(), {lr = 1e-2}))
    local c = Train(c_model, flow.optim.Adam(c_model:parameters(), {lr = 1e-2}))
    local eopt = flow.optim.Adam(e_model:parameters(), {lr = 1e-2})
    for _, b in ipairs(batches(5)) do
      local x, y = b[1]:cuda(), b[2]:cuda()
      local lg = g(x, y)
      assert.are.equal('cuda', lg.device.type)
      c(b[1], b[2])
      eopt:zero_grad()
      local le = F.cross_entropy(e_model(x), y)
      le:backward()
      eopt:step()
      H.close(lg:cpu(), le:cpu(), 1e-5, 'loss')
    end
    assert.are.equal('cuda', tostring(g:device()):sub(1, 4))
    assert.is_true(max_diff(g_model, e_model) < 1e-5)
    assert.is_true(max_diff(g_model, c_model) < 1e-4)
    for _, p in ipairs(g_model:parameters()) do assert.are.equal('cuda', p.device.type) end
  end)

  it('refuses inputs on another device than the module, naming both', function()
    local m = mlp(2):cuda()
    local g = Eval(m)
    H.raises(function() g(flow.randn(3, 6)) end, 'input 1 is on cpu', 'cuda:0', 'one device')
    local G = nn.Graph:subclass('Mover')
    function G:__init() nn.Graph.__init(self); self.m = m end
    function G:build(x) return self.m(x:cuda()) end
    H.raises(function() G()(flow.randn(3, 6):cuda():cpu()) end, 'one device')
    -- a graph compiled for the GPU given a CPU tensor of the same shape
    local loaded_dir = os.tmpname()
    os.remove(loaded_dir)
    g(flow.randn(3, 6):cuda())
    g:save(loaded_dir)
    local l = nn.Graph.load(loaded_dir)
    H.raises(function() l(flow.randn(3, 6)) end, 'input 1', 'on cpu', 'compiled for', 'cuda:0')
    os.remove(loaded_dir)
  end)

  it('keeps constants, buffers and batch norm statistics on the device', function()
    flow.manual_seed(3)
    local m = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU()):cuda()
    local e = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU())
    e:load_state_dict(m:state_dict())
    e = e:cuda()
    local G = nn.Graph:subclass('Consts')
    function G:__init() nn.Graph.__init(self); self.m = m end
    function G:build(x) return self.m(x) * flow.tensor({1, 2, 3, 4, 5, 6, 7, 8}):cuda() + 0.5 end
    local ok = pcall(function() G()(flow.randn(4, 6):cuda()) end)
    assert.is_false(ok)   -- x:cuda() of a constant inside build is a device move: refused
    function G:build(x) return self.m(x) * 2 + 0.5 end
    local g = G()
    for _ = 1, 3 do
      local x = flow.randn(4, 6):cuda()
      H.close(g(x):cpu(), (e(x) * 2 + 0.5):cpu(), 1e-5)
    end
    H.close(m[2].running_mean:cpu(), e[2].running_mean:cpu(), 1e-6)
    assert.are.equal('cuda', m[2].running_mean.device.type)
  end)

  it('captures the step into a CUDA graph and replays it like plain runs', function()
    local ref = mlp(4)
    local a, b = copy_of(ref, 4, 'cuda'), copy_of(ref, 4, 'cuda')
    local sch_a = flow.optim.Adam(a:parameters(), {lr = 1e-2})
    local sch_b = flow.optim.Adam(b:parameters(), {lr = 1e-2})
    local ga = Train(a, sch_a, {loss = 'mse', cuda_graph = true})
    local gb = Train(b, sch_b, {loss = 'mse'})
    local data = batches(6, true)
    for i, bt in ipairs(data) do
      local x, y = bt[1]:cuda(), bt[2]:cuda()
      if i == 4 then for _, grp in ipairs(sch_a.param_groups) do grp.lr = 5e-3 end end
      if i == 4 then for _, grp in ipairs(sch_b.param_groups) do grp.lr = 5e-3 end end
      local la, lb = ga(x, y), gb(x, y)
      H.close(la:cpu(), lb:cpu(), 1e-6, 'loss ' .. i)
    end
    assert.are.equal('captured', ga:cuda_graph_status())
    assert.are.equal('off', gb:cuda_graph_status())
    assert.is_true(max_diff(a, b) < 1e-6)
    -- Adam's step count advanced on the device at every replay
    assert.are.equal(sch_a.state[a:parameters()[1]].step, 6)
  end)

  it('returns the static outputs when asked', function()
    local m = mlp(5):cuda()
    local g = Eval(m)
    g.config:enable_cuda_graph(true, {static_outputs = true})
    local x1, x2 = flow.randn(3, 6):cuda(), flow.randn(3, 6):cuda()
    g(x1); g(x1)
    local r1 = g(x1)
    local v1 = r1:cpu()
    local r2 = g(x2)
    assert.are.equal('captured', g:cuda_graph_status())
    H.close(r1:cpu(), r2:cpu(), 0)   -- the same static tensor, overwritten
    H.close(v1, F.softmax(m(x1), 2):cpu(), 1e-6)
  end)

  it('falls back with a reason when a node cannot be captured', function()
    local m = mlp(6, true):cuda()
    local g = Train(m, flow.optim.SGD(m:parameters(), {lr = 0.1}), {cuda_graph = true})
    for _, bt in ipairs(batches(3)) do g(bt[1]:cuda(), bt[2]:cuda()) end
    assert.truthy(g:cuda_graph_status():find('random op', 1, true))
  end)

  it('captures a step with cross_entropy and replays it like plain runs', function()
    local ref = mlp(7)
    local a, b = copy_of(ref, 7, 'cuda'), copy_of(ref, 7, 'cuda')
    local ga = Train(a, flow.optim.SGD(a:parameters(), {lr = 0.1, momentum = 0.9}),
                     {cuda_graph = true})
    local gb = Train(b, flow.optim.SGD(b:parameters(), {lr = 0.1, momentum = 0.9}))
    for i, bt in ipairs(batches(5)) do
      local x, y = bt[1]:cuda(), bt[2]:cuda()
      H.close(ga(x, y):cpu(), gb(x, y):cpu(), 1e-6, 'loss ' .. i)
    end
    -- the targets are checked in the kernel and the 'mean' weight sum stays
    -- on the device: nothing is read back, so the step is captured
    assert.are.equal('captured', ga:cuda_graph_status())
    assert.is_true(max_diff(a, b) < 1e-6)
    -- a bad target in a replay is reported at the next synchronising call
    local x = flow.randn(16, 6):cuda()
    local yv = {}
    for i = 1, 16 do yv[i] = i % 4 + 1 end
    yv[3] = 7
    local y = flow.tensor(yv, {dtype = 'int64'})
    H.raises(function()
      ga(x, y:cuda())
      flow.cuda.synchronize()
    end, 'cross_entropy', 'index out of range')
  end)

  it('runs AMP graphs in float16 with loss scaling on the device', function()
    local ref = mlp(8)
    local a, e = copy_of(ref, 8, 'cuda'), copy_of(ref, 8, 'cuda')
    local g = Train(a, flow.optim.SGD(a:parameters(), {lr = 0.1}), {amp = true, loss = 'mse'})
    local eopt = flow.optim.SGD(e:parameters(), {lr = 0.1})
    local scaler = flow.amp.GradScaler()
    for _, bt in ipairs(batches(4, true)) do
      local x, y = bt[1]:cuda(), bt[2]:cuda()
      local lg = g(x, y)
      eopt:zero_grad()
      local le = flow.amp.autocast('cuda', function() return F.mse_loss(e(x), y) end)
      scaler:scale(le):backward()
      scaler:step(eopt)
      scaler:update()
      H.close(lg:cpu():float(), le:cpu():float(), 1e-3)
    end
    assert.truthy(g:ir():find('f16', 1, true))
    assert.are.equal('cuda', g._grad_scaler._scale.device.type)
    assert.are.equal(g._grad_scaler:get_scale(), scaler:get_scale())
    assert.is_true(max_diff(a, e) < 1e-3)
  end)

  it('saves weights from the device and loads them to the saved or a given device', function()
    local m = mlp(9):cuda()
    local g = Eval(m)
    local x = flow.randn(5, 6)
    local want = g(x:cuda()):cpu()
    local path = os.tmpname()
    g:save(path)
    local l = nn.Graph.load(path)
    assert.are.equal('cuda', l:device().type)
    H.close(l(x:cuda()):cpu(), want, 1e-6)
    local lc = nn.Graph.load(path, {device = 'cpu'})
    assert.are.equal('cpu', lc:device().type)
    H.close(lc(x), want, 1e-5)
    lc:to('cuda')
    H.close(lc(x:cuda()):cpu(), want, 1e-6)
    l:enable_cuda_graph(true)
    for _ = 1, 3 do H.close(l(x:cuda()):cpu(), want, 1e-6) end
    assert.are.equal('captured', l:cuda_graph_status())
    os.remove(path)
  end)
end)

describe('GradScaler on CUDA', function()
  it('unscales and updates the scale with device kernels, as on the CPU', function()
    local g = flow.tensor({1.0, 2.0, 4.0})
    for _, dev in ipairs({'cpu', 'cuda'}) do
      local s = flow.amp.GradScaler({init_scale = 4, growth_interval = 1, device = dev})
      local w = flow.tensor({1.0, 1.0, 1.0}, {device = dev, requires_grad = true})
      local opt = flow.optim.SGD({w}, {lr = 1})
      s:scale((w * g:to(dev)):sum()):backward()
      s:unscale_(opt)
      H.close(w.grad:cpu(), {1, 2, 4}, 0)
      s:step(opt)
      s:update()
      assert.are.equal(8, s:get_scale())
      opt:zero_grad()
      s:scale((w * flow.tensor({math.huge, 1, 1}):to(dev)):sum()):backward()
      assert.is_nil(s:step(opt))
      s:update()
      assert.are.equal(4, s:get_scale())
    end
  end)

  it('follows the device of the first scaled output', function()
    local s = flow.amp.GradScaler()
    local l = s:scale(flow.tensor(2.0):cuda())
    assert.are.equal('cuda', s._scale.device.type)
    assert.are.equal(2 * 65536, l:item())
  end)
end)

describe('autocast on CUDA', function()
  it('casts CUDA ops to float16 by default and leaves CPU ops alone', function()
    local a, b = flow.randn(4, 4), flow.randn(4, 4)
    local rg, rc = flow.amp.autocast('cuda', function() return flow.matmul(a:cuda(), b:cuda()), flow.matmul(a, b) end)
    assert.are.equal(flow.float16, rg.dtype)
    assert.are.equal(flow.float32, rc.dtype)
    H.close(rg:cpu():float(), rc, 1e-2)
  end)
end)

describe('channels-last on CUDA', function()
  it('keeps the layout through elementwise ops', function()
    local x = flow.randn(2, 3, 4, 5):to({memory_format = flow.channels_last}):cuda()
    local b = flow.randn(1, 3, 1, 1):cuda()
    for _, r in ipairs({x:relu(), x + b, x * 2, flow.sigmoid(x), x:half()}) do
      assert.is_true(r:is_contiguous({memory_format = flow.channels_last}))
      assert.is_false(r:is_contiguous())
    end
    H.close((x + b):cpu(), x:cpu():contiguous() + b:cpu(), 1e-6)
  end)
end)
