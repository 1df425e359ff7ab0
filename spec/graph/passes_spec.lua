-- nn.Graph passes, each on its own (config:set_passes) on small graphs:
-- dead-code elimination, common subexpressions, constant folding,
-- elementwise fusion, in-place rewriting and its inverse (functionalize),
-- and the memory plan.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional
local C = flow.C

local function graph_of(build, passes)
  local G = nn.Graph:subclass('P')
  function G:__init() nn.Graph.__init(self) end
  G.build = build
  local g = G()
  if passes then g.config:set_passes(passes) end
  return g
end

local function count(g, op) return C.of_graph_count_op(g:_graph(), op) end
local function nodes(g) return C.of_graph_num_nodes(g:_graph()) end

describe('nn.Graph passes', function()
  it('dce removes an unused branch', function()
    local function build(_, x)
      local _ = x:exp():sum()   -- unused
      return x * 2
    end
    local none, dce = graph_of(build, ''), graph_of(build, 'dce')
    local x = flow.randn(3, 4)
    H.close(none(x), x * 2)
    H.close(dce(x), x * 2)
    assert.are.equal(1, count(none, 'unary'))
    assert.are.equal(0, count(dce, 'unary'))
    assert.are.equal(0, count(dce, 'reduce'))
    assert.are.equal(1, nodes(dce))
    H.close(dce(x), x * 2)
  end)

  it('dce keeps side effects (in-place writes into buffers)', function()
    local buf = flow.zeros(3)
    local function build(_, x)
      buf:add_(x)      -- writes an external: kept although nothing reads it
      return x + 1
    end
    local g = graph_of(build, 'dce')
    local x = flow.ones(3)
    g(x)
    g(x)
    H.close(buf, {2, 2, 2})
  end)

  it('cse merges duplicate subexpressions', function()
    local function build(_, x)
      local a = x:exp() + 1
      local b = x:exp() + 1
      return a * b
    end
    local none, cse = graph_of(build, ''), graph_of(build, 'cse,dce')
    local x = flow.randn(4)
    local want = (x:exp() + 1) * (x:exp() + 1)
    H.close(none(x), want, 1e-6)
    H.close(cse(x), want, 1e-6)
    assert.are.equal(2, count(none, 'unary'))
    assert.are.equal(1, count(cse, 'unary'))
    assert.are.equal(1, count(cse, 'binary_scalar'))
    H.close(cse(x), want, 1e-6)
  end)

  it('cse does not merge across an in-place write or random ops', function()
    local function build(_, x)
      local y = x * 1
      local a = y:exp()
      y:add_(1)
      local b = y:exp()
      local r1, r2 = flow.rand(3), flow.rand(3)
      return a + b, r1 - r2
    end
    local g = graph_of(build, 'cse,dce')
    local x = flow.zeros(3)
    for _ = 1, 2 do
      local s, d = g(x)
      H.close(s, flow.full({3}, 1 + math.exp(1)), 1e-6)
      assert.is_true(d:abs():max():item() > 0)
    end
    assert.are.equal(2, count(g, 'unary'))
  end)

  it('fold computes constants once', function()
    local function build(_, x) return x + flow.ones(4) * 2 + flow.arange(0, 4):float() end
    local none, fold = graph_of(build, ''), graph_of(build, 'fold,dce')
    local x = flow.zeros(4)
    H.close(none(x), {2, 3, 4, 5})
    H.close(fold(x), {2, 3, 4, 5})
    assert.are.equal(1, count(none, 'full'))
    assert.are.equal(0, count(fold, 'full'))
    assert.are.equal(0, count(fold, 'arange'))
    assert.are.equal(2, count(fold, 'binary'))
    H.close(fold(flow.ones(4)), {3, 4, 5, 6})
  end)

  it('fuse turns a 5-op elementwise chain into one node with identical numbers', function()
    local function build(_, x, b)
      return ((x * 1.5 + b):tanh() - 0.25):sigmoid():mul(x)
    end
    for _, dt in ipairs({flow.float32, flow.float64}) do
      local none, fuse = graph_of(build, ''), graph_of(build, 'fuse')
      local x, b = flow.randn(37, 129):to(dt), flow.randn(129):to(dt)
      local eager = build(nil, x, b)
      assert.are.equal(0, (none(x, b) - eager):abs():max():item())
      assert.are.equal(0, (fuse(x, b) - eager):abs():max():item())
      assert.are.equal(6, nodes(none))
      assert.are.equal(1, nodes(fuse))
      assert.are.equal(1, count(fuse, 'fused_elementwise'))
      -- big enough to run on several threads, with a broadcast row
      local xb, bb = flow.randn(300, 1000):to(dt), flow.randn(1000):to(dt)
      local fb = graph_of(build, 'fuse')
      assert.are.equal(0, (fb(xb, bb) - build(nil, xb, bb)):abs():max():item())
    end
  end)

  it('fuse runs GELU and SiLU with the eager ops\' vectorised loops: the same bits as eager', function()
    -- a bias add + GELU / SiLU as after a transformer's MLP matmul; the fused
    -- node once ran libm's scalar erf and expf instead (other bits, 15x slower)
    for _, act in ipairs({F.gelu, F.silu}) do
      local function build(_, x, b) return act(x + b) end
      local g = graph_of(build, 'fuse')
      for _, n in ipairs({7, 300}) do   -- short rows; several blocks and threads
        local x, b = flow.randn(n, 1536), flow.randn(1536)
        g(x, b)   -- a new shape traces (eager ops); the next call runs the graph
        assert.are.equal(0, (g(x, b) - build(nil, x, b)):abs():max():item())
      end
      assert.are.equal(1, count(g, 'fused_elementwise'))
    end
  end)

  it('an eval graph traces nn.Linear as eager inference runs it (one addmm): the same bits', function()
    -- a training graph records matmul + add (its backward, and the bias add
    -- fused into the activation after it); an eval graph has no backward of
    -- its own, and the addmm (the bias as the gemm's C) saves the zeroing
    -- and bias passes over the result (ViT-S/16's graph 4.5% of its time)
    local l1, l2 = nn.Linear(24, 64), nn.Linear(64, 10)
    local function build(_, x) return l2(F.gelu(l1(x))) end
    local g = graph_of(build)
    for _, shape in ipairs({{5, 24}, {3, 7, 24}}) do
      local x = flow.randn(shape)
      g(x)
      local want = flow.no_grad(function() return build(nil, x) end)
      assert.are.equal(0, (g(x) - want):abs():max():item())
      assert.are.equal(2, count(g, 'addmm'))
      assert.are.equal(0, count(g, 'matmul'))
    end
    -- its gradient, where the build asks for one
    local G2 = nn.Graph:subclass('EvalGrad')
    function G2:__init() nn.Graph.__init(self) end
    function G2.build(_, x)
      local y = l1(x):sum()
      return flow.autograd.grad(y, {l1.weight})[1]
    end
    local x = flow.randn(5, 24)
    local gw = G2()(x)
    H.close(gw, flow.ones(64, 1) * x:sum(1):view(1, 24), 1e-5)
    -- a training graph keeps matmul + add
    local T = nn.Graph:subclass('TrainLinear')
    function T:__init()
      nn.Graph.__init(self)
      self.l1 = l1
      self:add_optimizer(flow.optim.SGD(l1:parameters(), {lr = 0.1}))
    end
    function T:build(z) local loss = self.l1(z):sum(); loss:backward(); return loss end
    local t = T()
    t(x)
    assert.are.equal(0, count(t, 'addmm'))
    assert.is_true(count(t, 'matmul') >= 1)
  end)

  it('fuse reads a bias repeating within its blocks once per thread, any period', function()
    -- biases whose length divides the node's block (2048 elements) are gathered
    -- once per thread; the others, and channel vectors, block by block
    local function build(_, x, b) return F.gelu(x * 0.5 + b) end
    local g = graph_of(build, 'fuse')
    for _, shapes in ipairs({{{300, 1024}, {1024}}, {{5000, 64}, {64}}, {{70, 2048}, {2048}},
                             {{9, 512}, {512}}, {{300, 1000}, {1000}}, {{3, 4096}, {4096}},
                             {{40, 16, 7, 9}, {16, 1, 1}}, {{40, 16, 7, 8}, {7, 8}}}) do
      local x, b = flow.randn(unpack(shapes[1])), flow.randn(unpack(shapes[2]))
      g(x, b)   -- a new shape traces (eager ops); the next call runs the graph
      assert.are.equal(0, (g(x, b) - build(nil, x, b)):abs():max():item(),
                       table.concat(shapes[1], 'x') .. ' + ' .. table.concat(shapes[2], 'x'))
    end
    assert.are.equal(1, count(g, 'fused_elementwise'))
  end)

  it('fuse leaves results with other readers materialised', function()
    local function build(_, x)
      local t = x:exp()
      return (t + 1):relu(), t * 2
    end
    local g = graph_of(build, 'fuse')
    local x = flow.randn(8)
    local a, b = g(x)
    H.close(a, (x:exp() + 1):relu())
    H.close(b, x:exp() * 2)
    assert.are.equal(1, count(g, 'unary'))
  end)

  it('inplace writes a dying operand\'s buffer (bias add + activation after matmul)', function()
    -- (an eval graph's nn.Linear traces one addmm: the product and bias add
    -- here are written out, as a training graph's linear records them)
    local lin = nn.Linear(8, 16)
    local function f(x) return F.relu(x:matmul(lin.weight:t()) + lin.bias) end
    local function build(_, x) return f(x) end
    local g = graph_of(build, 'fuse,inplace')
    local x = flow.randn(4, 8)
    H.close(g(x), f(x), 1e-6)
    assert.is_truthy(flow.C.of_graph_passes(g:_graph()) ~= nil)
    local passes = require('ffi').string(flow.C.of_graph_passes(g:_graph()))
    assert.is_truthy(passes:find('inplace(1)', 1, true))
    assert.is_truthy(g:ir():find('into=0', 1, true))
    H.close(g(x), f(x), 1e-6)
  end)

  it('inplace leaves inputs, outputs and shared buffers alone', function()
    local function build(_, x)
      local y = x:exp()
      return y:relu(), y   -- y is an output: relu may not overwrite it
    end
    local g = graph_of(build, 'inplace')
    local x = flow.randn(6)
    for _ = 1, 2 do
      local a, b = g(x)
      H.close(b, x:exp())
      H.close(a, x:exp():relu())
    end
    local xin = flow.randn(6)
    local keep = xin:clone()
    graph_of(function(_, z) return z:neg() end, 'inplace')(xin)
    H.close(xin, keep)
  end)

  it('inplace turns a clone of a dying value into an alias, and keeps clones that protect', function()
    -- the weight grads of a train graph: autograd clones each first grad
    local lin = nn.Linear(8, 4)
    local T = nn.Graph:subclass('CloneAlias')
    function T:__init(o) nn.Graph.__init(self); self:add_optimizer(o) end
    function T.build(_, x)
      local l = lin(x):pow(2):mean()
      l:backward()
      return l
    end
    local ref = nn.Linear(8, 4)
    ref:load_state_dict(lin:state_dict())
    local ro = flow.optim.Adam(ref:parameters(), {lr = 0.1})
    local g = T(flow.optim.Adam(lin:parameters(), {lr = 0.1}))
    local x = flow.randn(5, 8)
    for _ = 1, 3 do
      g(x)
      ro:zero_grad()
      ref(x):pow(2):mean():backward()
      ro:step()
    end
    H.close(lin.weight, ref.weight, 1e-6)
    H.close(lin.bias, ref.bias, 1e-6)
    local ir = g:ir()
    assert.are.equal(0, count(g, 'clone'), ir)
    assert.is_truthy(ir:find('= alias(', 1, true), ir)
    -- a clone whose source is read or written later keeps its copy
    local builds = {
      function(_, z)   -- the source read after the copy was written
        local y = z * 2
        local c = y:clone()
        c:add_(1)
        return c:sum(), y * 3
      end,
      function(_, z)   -- the source written after the copy
        local y = z * 2
        local c = y:clone()
        y:add_(1)
        return c * 3, y:sum()
      end,
    }
    for b, build in ipairs(builds) do
      local h = graph_of(build, 'inplace')
      local z = flow.randn(4)
      for _ = 1, 2 do
        local a1, a2 = h(z)
        local w1, w2 = build(nil, z)
        H.close(a1, w1, 0)
        H.close(a2, w2, 0)
      end
      assert.are.equal(1, count(h, 'clone'), b)
    end
    local k = graph_of(function(_, w) return w:clone() end, 'inplace')   -- an input: copied
    local w = flow.randn(3)
    local out = k(w)
    out:fill_(7)
    assert.is_true(w:abs():max():item() < 7)
    assert.are.equal(1, count(k, 'clone'))
  end)

  it('the memory plan keeps peak memory below eager mode for a training step', function()
    local function make()
      flow.manual_seed(1)
      return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                           nn.Linear(512, 10))
    end
    local x, y = flow.randn(64, 256), flow.randint(1, 11, {64})
    local function peak(step)
      step()
      flow.collect()
      flow.reset_peak_memory_stats()
      for _ = 1, 3 do step() end
      return flow.memory_stats().peak_bytes
    end
    local m1 = make()
    local o1 = flow.optim.Adam(m1:parameters(), {lr = 1e-3})
    local eager = peak(function()
      local l = F.cross_entropy(m1(x), y)
      o1:zero_grad()
      l:backward()
      o1:step()
    end)
    m1, o1 = nil, nil
    flow.collect()
    local T = nn.Graph:subclass('MemTrain')
    function T:__init(m, o) nn.Graph.__init(self); self.m = m; self:add_optimizer(o) end
    function T:build(a, b) local l = F.cross_entropy(self.m(a), b); l:backward(); return l end
    local m2 = make()
    local g = T(m2, flow.optim.Adam(m2:parameters(), {lr = 1e-3}))
    local graph = peak(function() g(x, y) end)
    assert.is_true(graph < eager, ('graph peak %d, eager peak %d'):format(graph, eager))
    local planned = tonumber(C.of_graph_stat(g:_graph(), C.OF_GRAPH_PLANNED_PEAK))
    local unplanned = tonumber(C.of_graph_stat(g:_graph(), C.OF_GRAPH_UNPLANNED_BYTES))
    assert.is_true(planned > 0 and planned < unplanned)
  end)

  it('bnfold folds eval-mode BatchNorm into the convolution before it', function()
    flow.manual_seed(3)
    local m = nn.Sequential(nn.Conv2d(3, 8, 3, {padding = 1}), nn.BatchNorm2d(8), nn.ReLU(),
                            nn.Conv2d(8, 4, 3, {bias = false}), nn.BatchNorm2d(4, {affine = false}))
    for _ = 1, 3 do m(flow.randn(4, 3, 8, 8)) end   -- running statistics away from 0 and 1
    m:eval()
    local g = graph_of(function(_, x) return m(x) end)
    local x = flow.randn(2, 3, 8, 8)
    H.close(g(x), m(x), 1e-5)
    H.close(g(x), m(x), 1e-5)
    assert.are.equal(0, count(g, 'batch_norm'))
    -- the first conv and its relu are one conv_fused node (convfuse_spec.lua)
    assert.are.equal(1, count(g, 'conv'))
    assert.are.equal(1, count(g, 'conv_fused'))
    -- later changes to the parameters and statistics are seen
    flow.no_grad(function() m[2].weight:mul_(2); m[2].running_mean:add_(0.5) end)
    H.close(g(x), m(x), 1e-5)
    -- training mode is not folded
    m:train()
    local t = graph_of(function(_, z) return m(z) end)
    t(x)
    assert.are.equal(2, count(t, 'batch_norm'))
  end)

  it('a channels-last eval graph folds, fuses and writes in place in that layout', function()
    -- a ResNet basic block after a stem, all NHWC: bnfold, fuse and inplace
    -- must keep the values' recorded layouts (this graph once failed with
    -- "fused_elementwise: cannot write into input 1")
    flow.manual_seed(4)
    local cl = {memory_format = flow.channels_last}
    local stem = nn.Sequential(nn.Conv2d(3, 16, 3, {padding = 1, bias = false}), nn.BatchNorm2d(16),
                               nn.ReLU(), nn.MaxPool2d(3, {stride = 2, padding = 1}))
    local body = nn.Sequential(nn.Conv2d(16, 16, 3, {padding = 1, bias = false}), nn.BatchNorm2d(16),
                               nn.ReLU(), nn.Conv2d(16, 16, 3, {padding = 1, bias = false}),
                               nn.BatchNorm2d(16))
    local function fwd(x)
      local h = stem(x)
      return F.relu(body(h) + h) * 0.5 - 1
    end
    for _ = 1, 2 do fwd(flow.randn(4, 3, 12, 12)) end   -- running statistics
    stem:eval(); body:eval()
    stem:to(cl); body:to(cl)
    local x = flow.randn(2, 3, 12, 12):to(cl)
    local ref = fwd(x)
    assert.is_true(ref:is_contiguous(cl))
    local g = graph_of(function(_, z) return fwd(z) end)
    local y = g(x)
    H.close(y, ref, 1e-5)
    H.close(g(x), ref, 1e-5)
    assert.is_true(y:is_contiguous(cl))
    assert.are.equal(0, count(g, 'batch_norm'))
    assert.is_true(count(g, 'fused_elementwise') >= 1)
  end)

  it('poolmask moves the relu-backward mask before the max-pool backward', function()
    local ffi = require 'ffi'
    -- relu -> max_pool, and a compare on the pool's input (y > 0.3) likewise;
    -- overlapping windows (kernel 3, stride 2) scatter twice into some elements
    local cases = {
      {function(y) return F.max_pool2d(F.relu(y), 2) end, 1},
      {function(y) return F.max_pool2d(F.relu(y), 3, 2) end, 1},
      {function(y) return F.max_pool2d(y * y:gt(0.3):to(y.dtype), 2) end, 0},
    }
    local T = nn.Graph:subclass('PoolMask')
    function T:__init(m) nn.Graph.__init(self); self.m = m end
    for _, case in ipairs(cases) do
      for _, dt in ipairs({flow.float32, flow.float64}) do
        local m = nn.Conv2d(3, 3, 3, {padding = 1}):to(dt)
        local c = flow.randn(case[1](flow.randn(2, 3, 8, 8):to(dt)).shape):to(dt)
        local function build(self, x)
          local l = (case[1](self.m(x)) * c):sum()
          l:backward()
          return l, self.m.weight.grad
        end
        local x = flow.randn(2, 3, 8, 8):to(dt)
        x = x * x:gt(-0.3):to(dt)   -- zeros: some pooled values are 0, masked out
        local _, want = build({m = m}, x)
        want = want:clone()
        for _, passes in ipairs({'', 'poolmask', 'poolmask,fuse,inplace'}) do
          T.build = build
          local g = T(m)
          g.config:set_passes(passes)
          for _ = 1, 3 do   -- compiling, then plain runs
            m.weight.grad = nil
            local _, gw = g(x)
            assert.are.equal(0, (gw - want):abs():max():item(), passes)
          end
          if passes ~= '' then
            local done = ffi.string(C.of_graph_passes(g:_graph()))
            assert.is_truthy(done:find('poolmask(' .. case[2] .. ')', 1, true), done)
          end
        end
      end
    end
    -- the mask of the pool's input is computed on the pooled shape
    function T.build(self, x)
      local l = F.max_pool2d(F.relu(self.m(x)), 2):sum()
      l:backward()
      return l
    end
    local g = T(nn.Conv2d(3, 3, 3, {padding = 1}))
    g.config:set_passes('poolmask')
    g(flow.randn(2, 3, 8, 8))
    assert.is_truthy(g:ir():find('to(%', 1, true))
    local ir = g:ir()
    local mask_line = ir:match('[^\n]*to%(%%[^\n]*')
    assert.is_truthy(mask_line:find('[2,3,4,4]', 1, true), ir)
  end)

  it('relupool runs relu + max_pool2d and its backward as two fused nodes, same numbers as eager', function()
    local ffi = require 'ffi'
    -- {input H, W, pool args, fused?}: the 2x2 vector path with rows of
    -- >= 8 windows (the last vector overlapping), 4..7, fewer than 4, odd
    -- sizes (a row and a column outside every window), other windows, and
    -- pools whose windows overlap or are padded (left alone)
    local cases = {
      {20, 20, {2}, true}, {12, 18, {2}, true}, {6, 6, {2}, true}, {9, 11, {2}, true},
      {9, 8, {3}, true}, {8, 9, {{2, 3}}, true}, {8, 8, {3, 2}, false},
      {8, 8, {2, {padding = 1}}, false}, {8, 8, {2, {ceil_mode = true}}, false},
    }
    local T = nn.Graph:subclass('ReluPool')
    function T:__init(m) nn.Graph.__init(self); self.m = m end
    for _, case in ipairs(cases) do
      for _, dt in ipairs({flow.float32, flow.float64}) do
        local m = nn.Conv2d(3, 4, 3, {padding = 1}):to(dt)
        local pool = function(y) return F.max_pool2d(F.relu(y), unpack(case[3])) end
        -- ties and zeros in the pool's input: inputs and weights on a coarse
        -- grid (conv outputs repeat within windows), many windows all <= 0
        flow.no_grad(function()
          m.weight:copy_((m.weight * 4):round() / 4)
          m.bias:copy_((m.bias * 4):round() / 4)
        end)
        local x = (flow.randn(2, 3, case[1], case[2]):to(dt) * 2):round() / 2
        local c = flow.randn(pool(m(x)).shape):to(dt)
        local function build(self, z)
          local l = (pool(self.m(z)) * c):sum()
          l:backward()
          return l, self.m.weight.grad, self.m.bias.grad
        end
        local wl, wgw, wgb = build({m = m}, x)
        wgw, wgb = wgw:clone(), wgb:clone()
        T.build = build
        local g = T(m)
        for _ = 1, 3 do   -- compiling, then plain runs
          m.weight.grad, m.bias.grad = nil, nil
          local l, gw, gb = g(x)
          assert.are.equal(0, (l - wl):abs():item())
          assert.are.equal(0, (gw - wgw):abs():max():item())
          assert.are.equal(0, (gb - wgb):abs():max():item())
        end
        local done = ffi.string(C.of_graph_passes(g:_graph()))
        local ir = g:ir()
        if case[4] then
          assert.is_truthy(done:find('relupool(4)', 1, true), done)
          assert.are.equal(1, count(g, 'relu_max_pool'))
          assert.are.equal(1, count(g, 'relu_max_pool_backward'))
          assert.are.equal(0, count(g, 'max_pool'))
          assert.is_falsy(ir:find('MaxPoolBackward', 1, true), ir)
        else
          assert.are.equal(0, count(g, 'relu_max_pool'), ir)
        end
      end
    end
    -- eval graphs (no backward): the forward node alone
    for _, hw in ipairs({{12, 16}, {7, 9}}) do
      local m = nn.Conv2d(3, 4, 3, {padding = 1})
      local E = nn.Graph:subclass('ReluPoolEval')
      function E:__init() nn.Graph.__init(self); self.m = m end
      function E.build(self, z) return F.max_pool2d(F.relu(self.m(z)), 2) end
      local g = E()
      local x = flow.randn(2, 3, hw[1], hw[2])
      local want = flow.no_grad(function() return F.max_pool2d(F.relu(m(x)), 2) end)
      for _ = 1, 2 do assert.are.equal(0, (g(x) - want):abs():max():item()) end
      assert.are.equal(1, count(g, 'relu_max_pool'))
      assert.are.equal(0, count(g, 'unary'))
      local done = ffi.string(C.of_graph_passes(g:_graph()))
      assert.is_truthy(done:find('relupool(1)', 1, true), done)
    end
    -- the pool's indices used by the caller, a relu read elsewhere: left alone
    local keep = {
      function(y) local p, i = F.max_pool2d(F.relu(y), 2, {return_indices = true}); return p:sum() + i:sum() end,
      function(y) local r = F.relu(y); return F.max_pool2d(r, 2):sum() + r:sum() end,
    }
    for _, f in ipairs(keep) do
      local m = nn.Conv2d(3, 4, 3, {padding = 1})
      local G = nn.Graph:subclass('ReluPoolKeep')
      function G:__init() nn.Graph.__init(self); self.m = m end
      function G.build(self, z) local l = f(self.m(z)); l:backward(); return l end
      local g = G()
      local x = flow.randn(2, 3, 8, 8)
      g(x)
      H.close(g(x), f(m(x)), 1e-5)
      assert.are.equal(0, count(g, 'relu_max_pool'))
    end
  end)

  it('schedule moves optimizer updates up to right after their grads', function()
    local lin1, lin2 = nn.Linear(4, 8), nn.Linear(8, 2)
    local params = {}
    for _, p in ipairs(lin1:parameters()) do params[#params + 1] = p end
    for _, p in ipairs(lin2:parameters()) do params[#params + 1] = p end
    local T = nn.Graph:subclass('Sched')
    function T:__init(o) nn.Graph.__init(self); self:add_optimizer(o) end
    function T.build(_, x)
      local l = lin2(F.relu(lin1(x))):pow(2):mean()
      l:backward()
      return l
    end
    local g = T(flow.optim.SGD(params, {lr = 0.1}))
    g(flow.randn(3, 4))
    local ir = g:ir()
    local first_update = ir:find('sgd_update', 1, true)
    local last_matmul
    for p in ir:gmatch('()matmul') do last_matmul = p end
    assert.is_true(first_update < last_matmul)   -- lin2 is updated before lin1's grads exist
    assert.is_truthy(require('ffi').string(C.of_graph_passes(g:_graph())):find('schedule(', 1, true))
  end)

  it('checkpoint recomputes a checkpointed module\'s activations right before backward', function()
    flow.manual_seed(4)
    local inner = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    local m = nn.Sequential(nn.Linear(3, 4), inner, nn.Linear(4, 2))
    local T = nn.Graph:subclass('CkPass')
    function T:__init(on)
      nn.Graph.__init(self)
      self.m = m
      self:add_optimizer(flow.optim.SGD(m:parameters(), {lr = 0}))
      self.config:set_passes('checkpoint')
      if on then self.m[2].config.activation_checkpointing = true end
    end
    function T.build(g, x) local l = g.m(x):sum(); l:backward(); return l end
    local x = flow.randn(5, 3)
    local plain = T(false)
    local want = {plain(x), plain(x)}   -- compiled before the module is marked
    local ck = T(true)
    H.close(ck(x), want[1], 0)
    H.close(ck(x), want[2], 0)
    -- the segment's matmul and tanh run again in backward: two more nodes of each
    assert.are.equal(count(plain, 'matmul') + 1, count(ck, 'matmul'))
    assert.are.equal(count(plain, 'unary') + 1, count(ck, 'unary'))
    local ir = ck:ir()
    local first_bwd = ir:find('backward', 1, true) or ir:find('sgd_update', 1, true)
    local last_tanh
    for p in ir:gmatch('()unary') do last_tanh = p end
    assert.is_true(last_tanh > ir:find('sum dims', 1, true))   -- the copy comes after the loss
    assert.is_truthy(first_bwd)
    m[2].config.activation_checkpointing = nil
  end)

  it('the arena holds a run\'s buffers in one block laid out from the first run', function()
    local ffi = require 'ffi'
    pcall(ffi.cdef, 'int setenv(const char *, const char *, int); int unsetenv(const char *);')
    local function make()
      flow.manual_seed(6)
      return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.Tanh(),
                           nn.Linear(256, 10))
    end
    local T = nn.Graph:subclass('Arena')
    function T:__init(m) nn.Graph.__init(self); self.m = m
      self:add_optimizer(flow.optim.SGD(m:parameters(), {lr = 0.1, momentum = 0.9})) end
    function T:build(a, b) local l = F.cross_entropy(self.m(a), b); l:backward(); return l end
    flow.manual_seed(2)
    local data = {}
    for i = 1, 5 do data[i] = {flow.randn(128, 64), flow.randint(1, 11, {128})} end
    local function train(arena)
      if not arena then ffi.C.setenv('OF_GRAPH_ARENA', '0', 1) end
      local m = make()
      local g = T(m)
      local losses = {}
      for i, xy in ipairs(data) do losses[i] = g(xy[1], xy[2]):item() end
      ffi.C.unsetenv('OF_GRAPH_ARENA')
      local bytes = tonumber(C.of_graph_stat(g:_graph(), C.OF_GRAPH_ARENA_BYTES))
      flow.collect()
      flow.reset_peak_memory_stats()
      for _ = 1, 3 do g(data[1][1], data[1][2]) end
      local p = flow.memory_stats().peak_bytes
      assert.are.equal(bytes, tonumber(C.of_graph_stat(g:_graph(), C.OF_GRAPH_ARENA_BYTES)))
      return m, losses, bytes, p
    end
    local m1, l1, b1, p1 = train(true)
    local m2, l2, b2, p2 = train(false)
    assert.are.same(l2, l1)
    local q1, q2 = m1:parameters(), m2:parameters()
    for i = 1, #q1 do H.close(q1[i], q2[i], 0) end
    assert.is_true(b1 > 0 and b2 == 0, ('arena %d / %d bytes'):format(b1, b2))
    assert.is_true(p1 <= p2, ('peak with the arena %d, without %d'):format(p1, p2))
  end)

  it('rejects unknown passes', function()
    local g = graph_of(function(_, x) return x end, 'dce,frobnicate')
    H.raises(function() g(flow.ones(1)) end, "unknown pass 'frobnicate'")
  end)

  it('graph:debug(1) and OF_DEBUG_PASS=1 print the IR before and after every pass', function()
    local script = os.tmpname()
    local f = assert(io.open(script, 'w'))
    f:write([[
local flow = require 'oneflow'
local nn, F = flow.nn, flow.nn.functional
local G = nn.Graph:subclass('Dbg')
function G:__init() nn.Graph.__init(self); self.m = nn.Linear(3, 2)
  self:add_optimizer(flow.optim.SGD(self.m:parameters(), {lr = 0.1}))
  if arg[1] == 'debug' then self:debug(1) end end
function G:build(x) local l = F.relu(self.m(x)):sum(); l:backward(); return l end
local g = G()
g(flow.ones(4, 3))
print('SUMMARY ' .. tostring(g))
]])
    f:close()
    local env = "LUA_PATH='lua/?.lua;lua/?/init.lua;;' "
    local function run(prefix, a)
      local p = io.popen(prefix .. env .. 'luajit ' .. script .. ' ' .. a .. ' 2>&1')
      local out = p:read('*a')
      p:close()
      return out
    end
    for _, out in ipairs({run('', 'debug'), run('OF_DEBUG_PASS=1 ', '')}) do
      for _, pass in ipairs({'dce', 'cse', 'fold', 'checkpoint', 'fuse', 'inplace', 'schedule'}) do
        assert.is_truthy(out:find('---- before ' .. pass .. ' ----', 1, true), pass .. ':\n' .. out)
        assert.is_truthy(out:find('---- after ' .. pass .. ' ----', 1, true), pass)
      end
      -- ops with shapes, and memory, in every printed IR
      local _, nmem = out:gsub('memory: planned peak', '')
      local _, nbefore = out:gsub('%-%-%-%- before ', '')
      assert.is_true(nmem >= nbefore and nbefore >= 9, out)
      assert.is_truthy(out:find('matmul(%', 1, true) and out:find(': f32[4,2]', 1, true))
      assert.is_truthy(out:find('SUMMARY Dbg%(1 compiled, %d+ nodes, %d+ values, %d+ externals, planned peak'))
    end
    assert.is_falsy(run('', ''):find('---- before', 1, true))
    os.remove(script)
  end)

  it('graph:debug prints the IR', function()
    local g = graph_of(function(_, x) return (x + 1):relu() end)
    g(flow.ones(2))
    local parts = {}
    g:debug(1, {write = function(_, s) parts[#parts + 1] = s end})
    local text = table.concat(parts)
    assert.is_truthy(text:find('fused_elementwise', 1, true))
  end)
end)

-- functionalize: in-place elementwise ops (relu_, add_, clamp_, mul_) become
-- out-of-place nodes where nothing reads the overwritten value afterwards.
-- ResNet's basic block written both ways: torchvision's in place
-- (ReLU(inplace = true), out += identity) and out of place
local function blocks(inplace)
  flow.manual_seed(5)
  local stem = nn.Sequential(nn.Conv2d(3, 8, 3, {padding = 1, bias = false}), nn.BatchNorm2d(8),
                             nn.ReLU({inplace = inplace}))
  local c1 = nn.Sequential(nn.Conv2d(8, 8, 3, {padding = 1, bias = false}), nn.BatchNorm2d(8),
                           nn.ReLU({inplace = inplace}))
  local c2 = nn.Sequential(nn.Conv2d(8, 8, 3, {padding = 1, bias = false}), nn.BatchNorm2d(8))
  local six = nn.ReLU6({inplace = inplace})
  local mods = {stem, c1, c2}
  local function fwd(x)
    local h = stem(x)
    local out = c2(c1(h))
    out = inplace and out:add_(h) or out + h
    out = inplace and F.relu(out, true) or F.relu(out)
    out = inplace and out:mul_(0.5) or out * 0.5
    return six(out)
  end
  for _ = 1, 2 do fwd(flow.randn(2, 3, 8, 8)) end
  for _, m in ipairs(mods) do m:eval() end
  return fwd
end

describe('nn.Graph functionalize', function()
  it("gives in-place model code the out-of-place graph's fusions and eager's numbers", function()
    local x = flow.randn(2, 3, 8, 8)
    local graphs = {}
    for _, inplace in ipairs({false, true}) do
      local fwd = blocks(inplace)
      local ref = flow.no_grad(function() return fwd(x:clone()) end)
      local g = graph_of(function(_, z) return fwd(z) end)
      g(x)
      local got = g(x)
      H.close(got, ref, 1e-5, inplace and 'in place' or 'out of place')
      graphs[inplace] = g
    end
    for _, op in ipairs({'conv', 'conv_fused', 'batch_norm', 'unary', 'binary', 'binary_scalar',
                         'clamp', 'fused_elementwise'}) do
      assert.equal(count(graphs[false], op), count(graphs[true], op), op)
    end
    assert.is_true(count(graphs[true], 'conv_fused') >= 1)
    assert.equal(0, count(graphs[true], 'batch_norm'))
    -- without the pass the in-place graph keeps its unfused nodes
    local fwd = blocks(true)
    local g = graph_of(function(_, z) return fwd(z) end,
                       'dce,cse,bnfold,fold,dce,checkpoint,poolmask,relupool,convfuse,fuse,inplace,schedule')
    g(x)
    H.close(g(x), flow.no_grad(function() return fwd(x:clone()) end), 1e-5, 'without the pass')
    assert.is_true(count(g, 'conv_fused') < count(graphs[true], 'conv_fused'))
  end)

  it('trains in-place model code (torchvision-style ResNet blocks) to eager\'s numbers', function()
    -- relu_ and add_ in a training graph: their backward rules read the
    -- written tensor, which the trace knows as the op's new version
    local vision = require 'flowvision'
    local function make()
      flow.manual_seed(3)
      local m = vision.models.resnet18({num_classes = 5})
      return m, flow.optim.SGD(m:parameters(), {lr = 0.05, momentum = 0.9})
    end
    local T = nn.Graph:subclass('InplaceTrain')
    function T:__init(m, o) nn.Graph.__init(self); self.m = m; self:add_optimizer(o) end
    function T:build(a, b) local l = F.cross_entropy(self.m(a), b); l:backward(); return l end
    local m1, o1 = make()
    local m2, o2 = make()
    local g = T(m2, o2)
    flow.manual_seed(9)
    for step = 1, 3 do
      local x, y = flow.randn(2, 3, 32, 32), flow.randint(1, 6, {2})
      local l = F.cross_entropy(m1(x), y)
      o1:zero_grad()
      l:backward()
      o1:step()
      H.close(g(x, y), l, 1e-5, 'loss of step ' .. step)
    end
    H.close(m2.layer1[1].conv1.weight, m1.layer1[1].conv1.weight, 1e-5, 'weights after 3 steps')
  end)

  it('trains in-place ops whose backward keeps a copy (mul_, clamp_, div_) to eager\'s numbers', function()
    -- their rules read a clone the trace cannot see: the forward node runs
    -- with autograd on at run time (a captured node) and writes its input,
    -- which requires grad only for that call
    local function make(inplace)
      flow.manual_seed(4)
      local l1, l2 = nn.Linear(4, 8), nn.Linear(8, 2)
      local m = nn.Sequential(l1, l2)
      local function fwd(x)
        local h = l1(x)
        if inplace then h:add_(1):mul_(1.5):clamp_(-1, 2) else h = ((h + 1) * 1.5):clamp(-1, 2) end
        local z = l2(h)
        if inplace then z:div_(2):sigmoid_() else z = (z / 2):sigmoid() end
        return z:pow(2):sum()
      end
      return m, fwd, flow.optim.SGD(m:parameters(), {lr = 0.1, momentum = 0.9})
    end
    local T = nn.Graph:subclass('InplaceCopyTrain')
    function T:__init(m, f, o) nn.Graph.__init(self); self.m, self.f = m, f; self:add_optimizer(o) end
    function T:build(a) local l = self.f(a); l:backward(); return l end
    local m1, f1, o1 = make(false)
    local m2, f2, o2 = make(true)
    local g = T(m2, f2, o2)
    flow.manual_seed(8)
    for step = 1, 4 do
      local x = flow.randn(5, 4)
      local l = f1(x)
      o1:zero_grad()
      l:backward()
      o1:step()
      H.close(g(x), l, 1e-6, 'loss of step ' .. step)
    end
    H.close(m2[1].weight, m1[1].weight, 1e-6, 'weights after 4 steps')
  end)

  it('leaves an in-place op in place when an earlier view of its storage is read later', function()
    local function build(_, z)
      local h = z * 2
      local v = h:view(-1)        -- a view made before the write ...
      h:relu_()
      local w = h + 1
      return v * 3 + w:view(-1)   -- ... read after it: it sees the relu
    end
    local x = flow.randn(3, 5)
    local g = graph_of(build)
    g(x)
    H.close(g(x), build(nil, x), 0, 'view read after relu_')
    -- and the same without the view: functionalized, same numbers
    local function plain(_, z)
      local h = z * 2
      h:relu_()
      return h + 1
    end
    local g2 = graph_of(plain)
    g2(x)
    H.close(g2(x), plain(nil, x), 0, 'relu_ alone')
    assert.equal(0, count(g2, 'unary'))   -- relu became part of a fused chain
  end)
end)
