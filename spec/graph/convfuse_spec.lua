-- The convfuse pass (core/graph/passes/convfuse.c): in eval graphs a
-- convolution (BatchNorm folded into it), an optional residual add and an
-- optional relu / clamp become one conv_fused node, run through oneDNN's
-- sum and eltwise post-ops where conv's routing takes oneDNN and as the
-- same conv, add and activation ops elsewhere.
local flow = require 'oneflow'
local ffi = require 'ffi'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional
local C = flow.C

ffi.cdef [[
int setenv(const char *name, const char *value, int overwrite);
int unsetenv(const char *name);
]]

local function with_backend(be, fn)
  local prev = os.getenv('OF_CONV_BACKEND')
  if be then ffi.C.setenv('OF_CONV_BACKEND', be, 1) else ffi.C.unsetenv('OF_CONV_BACKEND') end
  local ok, err = pcall(fn)
  if prev then ffi.C.setenv('OF_CONV_BACKEND', prev, 1) else ffi.C.unsetenv('OF_CONV_BACKEND') end
  if not ok then error(err, 0) end
end

local function graph_of(build, opts)
  local G = nn.Graph:subclass('CF')
  function G:__init() nn.Graph.__init(self) end
  G.build = build
  local g = G()
  if opts and opts.memory_format then g.config:set_memory_format(opts.memory_format) end
  if opts and opts.fusion == false then g.config:enable_fusion(false) end
  return g
end

local function count(g, op) return C.of_graph_count_op(g:_graph(), op) end

local function cbr(ci, co, stride, act)
  local conv = nn.Conv2d(ci, co, 3, {stride = stride or 1, padding = 1, bias = false})
  if act == false then return nn.Sequential(conv, nn.BatchNorm2d(co)) end
  return nn.Sequential(conv, nn.BatchNorm2d(co), act or nn.ReLU())
end

-- A stem and three residual blocks (the second's residual is the first's
-- in-place result, the third has a strided downsample), a ReLU6 layer and
-- a residual add with no activation after it (MobileNetV2's form).
local function resnetish()
  flow.manual_seed(11)
  local m = {
    stem = cbr(3, 16),
    b1 = nn.Sequential(cbr(16, 16), cbr(16, 16, 1, false)),
    b2 = nn.Sequential(cbr(16, 16), cbr(16, 16, 1, false)),
    b3 = nn.Sequential(cbr(16, 32, 2), cbr(32, 32, 1, false)),
    down = nn.Sequential(nn.Conv2d(16, 32, 1, {stride = 2, bias = false}), nn.BatchNorm2d(32)),
    six = cbr(32, 32, 1, nn.ReLU6()),
    lin = cbr(32, 32, 1, false),
  }
  local list = {}
  for _, k in ipairs({'stem', 'b1', 'b2', 'b3', 'down', 'six', 'lin'}) do list[#list + 1] = m[k] end
  local function fwd(x)
    local h = m.stem(x)
    h = F.relu(m.b1(h) + h)
    h = F.relu(m.b2(h) + h)
    h = F.relu(m.b3(h) + m.down(h))
    h = m.six(h)
    return m.lin(h) + h
  end
  for _ = 1, 2 do fwd(flow.randn(4, 3, 12, 12)) end   -- running statistics away from 0 and 1
  for _, s in ipairs(list) do s:eval() end
  return fwd, list
end

-- A script that runs an eval graph of conv + BatchNorm + relu, then conv +
-- residual + relu6 (two conv_fused nodes) in the memory format fmt (Lua
-- source), twice, prints 'graph done' on stderr, and then the largest
-- difference from eager's direct convolutions over the largest value.
local function post_ops_script(fmt)
  return ([[
local flow = require 'oneflow'
local nn, F = flow.nn, flow.nn.functional
flow.manual_seed(3)
local c1 = nn.Sequential(nn.Conv2d(8, 8, 3, {padding = 1, bias = false}), nn.BatchNorm2d(8))
local c2 = nn.Conv2d(8, 8, 3, {padding = 1})
c1(flow.randn(2, 8, 16, 16))   -- running statistics away from 0 and 1
c1:eval(); c2:eval()
local G = nn.Graph:subclass('G')
function G:__init()
  nn.Graph.__init(self); self.c1 = c1; self.c2 = c2
  self.config:set_memory_format(%s)
end
function G:build(x) local h = F.relu(self.c1(x)) return F.relu6(self.c2(h) + x * 2) end
local x = flow.randn(2, 8, 16, 16)
local g = G()
local y = g(x)   -- the first call traces (eager ops), the second runs the graph
y = g(x)
io.stderr:write('graph done\n')
local ffi = require 'ffi'
ffi.cdef 'int setenv(const char *name, const char *value, int overwrite);'
ffi.C.setenv('OF_CONV_WINO', '0', 1)
local ref = flow.no_grad(function() return F.relu6(c2(F.relu(c1(x))) + x * 2) end)
print((y - ref):abs():max():item() / ref:abs():max():item())
]]):format(fmt)
end

describe('nn.Graph convfuse', function()
  it('fuses conv + BatchNorm + add + relu / clamp in eval graphs, same numbers as eager', function()
    local fwd = resnetish()
    for _, be in ipairs({false, 'dnnl', 'ref'}) do
      with_backend(be or nil, function()
        for _, mf in ipairs({'auto', flow.channels_last, flow.contiguous_format}) do
          for _, n in ipairs({1, 3}) do
            local x = flow.randn(n, 3, 12, 12)
            local ref = flow.no_grad(function() return fwd(x) end)
            local g = graph_of(function(_, z) return fwd(z) end, {memory_format = mf})
            local what = ('backend %s, %s, batch %d'):format(be or 'auto', tostring(mf), n)
            H.close(g(x), ref, 1e-5, what)
            H.close(g(x), ref, 1e-5, what)
            -- every conv but the downsample (the other operand of its add)
            assert.are.equal(9, count(g, 'conv_fused'), what)
            assert.are.equal(1, count(g, 'conv'), what)
            assert.are.equal(0, count(g, 'batch_norm'), what)
          end
        end
      end)
    end
  end)

  it('sums each residual in its own buffer, also when it is the block before\'s in-place result', function()
    local fwd = resnetish()
    local g = graph_of(function(_, z) return fwd(z) end)
    g(flow.randn(2, 3, 12, 12))
    local ir = g:ir(1)
    local into = 0
    for a, b in ir:gmatch('conv_fused%(%%%d+, %%%d+, %%%d+, (%%%d+), (%%%d+)%)') do
      assert.are.equal(a, b)
      into = into + 1
    end
    -- b1, b2 (whose residual is b1's result, written into the stem's
    -- buffer) and b3; not the last add, whose residual is its conv's own
    -- input (the convolution would read what it writes)
    assert.are.equal(3, into, ir)
    assert.truthy(ir:find('conv_fused%((%%%d+), %%%d+, %%%d+, %1%)'), ir)
  end)

  it('leaves train graphs, values read twice and enable_fusion(false) alone', function()
    local fwd, list = resnetish()
    local x = flow.randn(2, 3, 12, 12)
    local off = graph_of(function(_, z) return fwd(z) end, {fusion = false})
    H.close(off(x), flow.no_grad(function() return fwd(x) end), 1e-5)
    assert.are.equal(0, count(off, 'conv_fused'))
    -- a conv result that is also returned keeps its own node
    local conv = list[1][1]
    local both = graph_of(function(_, z)
      local y = conv(z)
      return F.relu(y), y
    end)
    local r, y = both(x)
    H.close(r, F.relu(conv(x)), 1e-5)
    H.close(y, conv(x), 1e-5)
    assert.are.equal(0, count(both, 'conv_fused'))
    -- training: the conv results are kept for the backward
    for _, s in ipairs(list) do s:train() end
    local params = {}
    for _, s in ipairs(list) do
      for _, p in ipairs(s:parameters()) do params[#params + 1] = p end
    end
    local T = nn.Graph:subclass('CFT')
    function T:__init() nn.Graph.__init(self); self:add_optimizer(flow.optim.SGD(params, {lr = 0.01})) end
    T.build = function(_, z)
      local loss = fwd(z):sum()
      loss:backward()
      return loss
    end
    local t = T()
    t(x)
    assert.are.equal(0, count(t, 'conv_fused'))
  end)

  it('runs the sum and the activation as oneDNN post-ops when oneDNN is built in', function()
    if not flow.backends.mkldnn.is_available() then
      pending('built without oneDNN (OF_WITH_DNNL=OFF)')
      return
    end
    -- channels-last on every CPU: oneDNN's own layout, so the sum post-op
    -- adds into the result buffer itself ('auto' picks channels-last on
    -- AVX-512 only; an NCHW graph on AVX2 gets blocked results, where the
    -- add stays unfused)
    local out = H.run_lua(post_ops_script('flow.channels_last'),
      'OF_CONV_BACKEND=dnnl DNNL_VERBOSE=1')
    assert.truthy(out:find('post-ops:eltwise_clip:0:inf', 1, true), out)
    assert.truthy(out:find('post-ops:sum+eltwise_clip:0:6', 1, true), out)
    assert.is_true(tonumber(out:match('([%d%.e%-]+)%s*$')) < 1e-5, out)
  end)

  it('adds the residual and clamps in Winograd\'s output transform where conv takes Winograd', function()
    -- NCHW tiles, and NHWC tiles in a channels-last graph (no reorder between layers)
    for _, v in ipairs({'4', '1', '4cl', '1cl'}) do
      local src = post_ops_script(v:find('cl') and 'flow.channels_last' or 'flow.contiguous_format')
      v = v:sub(1, 1)
      local out = H.run_lua(src, 'OF_CONV_WINO=' .. v .. ' OF_CONV_VERBOSE=1')
      local graph = out:match('^(.-)graph done') or ''
      local path = v == '4' and 'winograd_f4' or 'winograd_f2'
      -- the graph's run: relu fused into the first, sum and relu6 into the second
      assert.truthy(graph:find(path .. ' N=2 C=8 K=8 in=16x16 out=16x16 k=3x3 clamp=0:inf\n', 1, true), out)
      assert.truthy(graph:find(path .. ' N=2 C=8 K=8 in=16x16 out=16x16 k=3x3 sum clamp=0:6\n', 1, true), out)
      assert.is_true(tonumber(out:match('([%d%.e%-]+)%s*$')) < 1e-5, out)
    end
  end)

  it('a saved graph with fused convolutions loads and runs the same', function()
    local fwd = resnetish()
    local g = graph_of(function(_, z) return fwd(z) end)
    local x = flow.randn(2, 3, 12, 12)
    local y = g(x)
    local path = os.tmpname()
    g:save(path)
    local g2 = nn.Graph.load(path)
    os.remove(path)
    H.close(g2(x), y, 1e-6)
    H.close(g2(x), y, 1e-6)
    local n = 0
    for _ in g2:ir(1):gmatch('= conv_fused%(') do n = n + 1 end
    assert.are.equal(9, n)
  end)
end)
