-- nn.Graph layouts (config:set_memory_format): 'auto' computes eval graphs
-- with convolutions channels-last on AVX-512 CPUs with oneDNN, converting
-- the 4-d inputs as the first nodes and 4-d results back as the last;
-- results equal the NCHW graph's within float rounding.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn = flow.nn
local C = flow.C

local function count(g, op) return C.of_graph_count_op(g:_graph(), op) end

local function net()
  flow.manual_seed(5)
  local m = nn.Sequential(
    nn.Conv2d(3, 16, 3, {padding = 1, bias = false}), nn.BatchNorm2d(16), nn.ReLU(),
    nn.MaxPool2d(3, {stride = 2, padding = 1}),
    nn.Conv2d(16, 16, 3, {padding = 1, groups = 16}), nn.BatchNorm2d(16), nn.ReLU6(),
    nn.Conv2d(16, 32, 1), nn.BatchNorm2d(32), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 5))
  for _ = 1, 2 do m(flow.randn(4, 3, 16, 16)) end   -- running statistics
  m:eval()
  return m
end

local function graph(m, fmt, features)
  local G = nn.Graph:subclass('Layout')
  function G:__init()
    nn.Graph.__init(self)
    self.m = m
    if fmt ~= nil then self.config:set_memory_format(fmt) end
  end
  function G.build(self, x)
    if features then return self.m[1](x), {self.m[2](self.m[1](x))} end
    return self.m(x)
  end
  return G()
end

local auto_cl = flow.backends.mkldnn.is_available()
                and flow.backends.cpu.get_cpu_capability() == 'AVX512'

describe('nn.Graph memory formats', function()
  it("'auto' runs an eval conv graph channels-last where oneDNN and AVX-512 are there", function()
    local m = net()
    local x = flow.randn(3, 3, 16, 16)
    local plain, auto = graph(m, flow.contiguous_format), graph(m)
    local want = plain(x)
    for _ = 1, 2 do H.close(auto(x), want, 1e-5) end
    assert.are.equal(0, count(plain, 'contiguous'))
    -- the input's conversion: permute, contiguous, permute
    assert.are.equal(auto_cl and 1 or 0, count(auto, 'contiguous'))
    H.close(auto(x), flow.no_grad(function() return m(x) end), 1e-5)
  end)

  it('gives 4-d results back contiguous, also inside tables', function()
    local m = net()
    local x = flow.randn(2, 3, 16, 16)
    local y, t = graph(m, flow.channels_last, true)(x)
    local ry, rt = graph(m, flow.contiguous_format, true)(x)
    assert.is_true(y:is_contiguous())
    assert.is_true(t[1]:is_contiguous())
    H.close(y, ry, 1e-5)
    H.close(t[1], rt[1], 1e-5)
  end)

  it('flow.channels_last forces it, flow.contiguous_format turns it off', function()
    local m = net()
    local x = flow.randn(2, 3, 16, 16)
    local g = graph(m, flow.channels_last)
    H.close(g(x), graph(m, flow.contiguous_format)(x), 1e-5)
    assert.are.equal(1, count(g, 'contiguous'))
    -- changing the setting compiles again
    g.config:set_memory_format(flow.contiguous_format)
    g(x)
    assert.are.equal(0, count(g, 'contiguous'))
  end)

  it("'auto' leaves graphs with modules in training mode alone", function()
    local m = net()
    m:train()
    local g = graph(m)
    g(flow.randn(2, 3, 16, 16))
    assert.are.equal(0, count(g, 'contiguous'))
  end)

  it('refuses other settings, naming them', function()
    local g = graph(net())
    local ok, err = pcall(function() g.config:set_memory_format('nhwc') end)
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("set_memory_format: expected 'auto', flow.channels_last or "
                                        .. 'flow.contiguous_format, got nhwc', 1, true), err)
  end)
end)
