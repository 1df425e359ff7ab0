local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional
local gradcheck = flow.autograd.gradcheck

local xs = {-3, -1.5, -0.25, 0.5, 2, 4}
local function x64(rg) return flow.tensor(xs, {dtype = flow.float64, requires_grad = rg}) end
local function map(f)
  local r = {}
  for i, v in ipairs(xs) do r[i] = f(v) end
  return r
end
local function sigmoid(v) return 1 / (1 + math.exp(-v)) end
local function softplus(v) return math.log(1 + math.exp(v)) end

describe('nn.functional activations', function()
  it('match their formulas', function()
    local x = x64()
    local a, sa = 1.6732632423543772, 1.0507009873554805
    local cases = {
      {F.relu(x), function(v) return math.max(v, 0) end},
      {F.relu6(x * 2), function(v) return math.min(math.max(2 * v, 0), 6) end},
      {F.elu(x), function(v) return v > 0 and v or math.exp(v) - 1 end},
      {F.elu(x, 0.5), function(v) return v > 0 and v or 0.5 * (math.exp(v) - 1) end},
      {F.selu(x), function(v) return sa * (v > 0 and v or a * (math.exp(v) - 1)) end},
      {F.celu(x, {alpha = 2}), function(v) return v > 0 and v or 2 * (math.exp(v / 2) - 1) end},
      {F.silu(x), function(v) return v * sigmoid(v) end},
      {F.mish(x), function(v) return v * math.tanh(softplus(v)) end},
      {F.sigmoid(x), sigmoid},
      {F.tanh(x), math.tanh},
      {F.softplus(x), softplus},
      {F.softplus(x, {beta = 2, threshold = 3}), function(v)
        return 2 * v > 3 and v or math.log(1 + math.exp(2 * v)) / 2 end},
      {F.leaky_relu(x, 0.2), function(v) return v > 0 and v or 0.2 * v end},
      {F.leaky_relu(x), function(v) return v > 0 and v or 0.01 * v end},
      {F.hardswish(x), function(v) return v * math.min(math.max(v + 3, 0), 6) / 6 end},
      {F.hardsigmoid(x), function(v) return math.min(math.max(v / 6 + 0.5, 0), 1) end},
      {F.hardtanh(x, -2, 1), function(v) return math.min(math.max(v, -2), 1) end},
      {F.logsigmoid(x), function(v) return math.log(sigmoid(v)) end},
      {F.softsign(x), function(v) return v / (1 + math.abs(v)) end},
      {F.tanhshrink(x), function(v) return v - math.tanh(v) end},
      {F.hardshrink(x, 1), function(v) return math.abs(v) > 1 and v or 0 end},
      {F.softshrink(x, 1), function(v) return v > 1 and v - 1 or (v < -1 and v + 1 or 0) end},
      {F.threshold(x, 0.5, -7), function(v) return v > 0.5 and v or -7 end},
    }
    for i, c in ipairs(cases) do H.close(c[1], map(c[2]), 1e-9, 'case ' .. i) end
  end)

  it('gelu has the exact and tanh forms', function()
    local x = x64()
    local erf_ref = {}
    for i, v in ipairs(xs) do
      erf_ref[i] = flow.tensor(v / math.sqrt(2), {dtype = flow.float64}):erf():item()
    end
    local exact = {}
    for i, v in ipairs(xs) do exact[i] = 0.5 * v * (1 + erf_ref[i]) end
    H.close(F.gelu(x), exact, 1e-9)
    H.close(F.gelu(x, {approximate = 'tanh'}), map(function(v)
      return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ^ 3))) end), 1e-9)
    H.raises(function() F.gelu(x, {approximate = 'fast'}) end, "approximate must be 'none' or 'tanh'")
  end)

  it('prelu uses one slope per channel (dim 2)', function()
    local x = flow.tensor({{{-1, 2}, {-3, 4}}}, {dtype = flow.float64})   -- [1, 2, 2]
    local w = flow.tensor({0.1, 0.5}, {dtype = flow.float64})
    H.close(F.prelu(x, w), {{{-0.1, 2}, {-1.5, 4}}}, 1e-12)
    H.raises(function() F.prelu(x, flow.ones(3)) end, 'prelu: weight has 3 elements but input [1,2,2] has 2 channels')
  end)

  it('softmax, log_softmax, softmin and glu', function()
    local x = flow.tensor({{1, 2, 3}, {1, 1, 1}}, {dtype = flow.float64})
    local e = {math.exp(1), math.exp(2), math.exp(3)}
    local s = e[1] + e[2] + e[3]
    H.close(F.softmax(x, 2), {{e[1] / s, e[2] / s, e[3] / s}, {1 / 3, 1 / 3, 1 / 3}}, 1e-12)
    H.close(F.log_softmax(x, -1)[1], {math.log(e[1] / s), math.log(e[2] / s), math.log(e[3] / s)}, 1e-12)
    H.close(F.softmin(x, 2)[1], {e[3] / s, e[2] / s, e[1] / s}, 1e-12)
    H.raises(function() F.softmax(x) end, 'softmax: dim is required')
    local g = flow.tensor({{1, 2, 0, 3}}, {dtype = flow.float64})
    H.close(F.glu(g), {{1 * sigmoid(0), 2 * sigmoid(3)}}, 1e-12)
  end)

  it('have correct gradients (gradcheck, float64)', function()
    local fns = {
      F.elu, F.selu, function(x) return F.celu(x, 0.7) end, F.logsigmoid, F.softsign,
      F.tanhshrink, function(x) return F.softplus(x, {beta = 2, threshold = 3}) end,
      function(x) return F.hardshrink(x, 1) end, function(x) return F.softshrink(x, 1) end,
      function(x) return F.hardtanh(x, -2, 1) end, function(x) return F.relu6(x * 2) end,
      function(x) return F.leaky_relu(x, 0.3) end, function(x) return F.softmin(x:view(2, 3), 2) end,
      function(x) return F.glu(x:view(3, 2)) end, function(x) return F.gelu(x, {approximate = 'tanh'}) end,
    }
    for _, f in ipairs(fns) do assert.is_true(gradcheck(f, {x64(true)})) end
    local w = flow.tensor({0.1, 0.5}, {dtype = flow.float64, requires_grad = true})
    assert.is_true(gradcheck(function(x, ww) return F.prelu(x:view(3, 2), ww) end, {x64(true), w}))
  end)

  it('inplace variants change the input', function()
    local x = flow.tensor({-1, 2})
    F.relu(x, {inplace = true})
    H.close(x, {0, 2})
    local y = flow.tensor({-1, 8})
    nn.ReLU6(true)(y)
    H.close(y, {0, 6})
  end)
end)

describe('activation modules', function()
  it('wrap the functions with their options', function()
    local x = x64()
    H.close(nn.LeakyReLU(0.2)(x), F.leaky_relu(x, 0.2):totable())
    H.close(nn.ELU({alpha = 0.5})(x), F.elu(x, 0.5):totable())
    H.close(nn.Softplus(2, 3)(x), F.softplus(x, 2, 3):totable())
    H.close(nn.GELU('tanh')(x), F.gelu(x, {approximate = 'tanh'}):totable())
    H.close(nn.Softmax(1)(x), F.softmax(x, 1):totable())
    H.close(nn.Hardtanh(-1, 1)(x), x:clamp(-1, 1):totable())
    for _, name in ipairs({'ReLU', 'SiLU', 'Sigmoid', 'Tanh', 'Mish', 'Hardswish', 'Hardsigmoid',
                           'SELU', 'LogSigmoid', 'Softsign', 'Tanhshrink'}) do
      assert.equals(x:numel(), nn[name]()(x):numel())
    end
  end)

  it('Softmax without dim uses the legacy choice', function()
    local x = flow.randn(2, 3)
    H.close(nn.Softmax()(x):sum(2), {1, 1}, 1e-6)
  end)

  it('PReLU has a learnable weight initialised to init', function()
    local m = nn.PReLU(3, 0.1)
    H.close(m.weight, {0.1, 0.1, 0.1}, 1e-7)
    assert.is_true(nn.is_parameter(m.weight))
    local x = flow.tensor({{-1, -2, 3}})
    H.close(m(x), {{-0.1, -0.2, 3}}, 1e-6)
    m(x):sum():backward()
    H.close(m.weight.grad, {-1, -2, 0}, 1e-6)
    assert.equals('PReLU(num_parameters=3)', tostring(m))
  end)

  it('reprs follow PyTorch', function()
    assert.equals('ReLU()', tostring(nn.ReLU()))
    assert.equals('ReLU(inplace=True)', tostring(nn.ReLU(true)))
    assert.equals('LeakyReLU(negative_slope=0.2)', tostring(nn.LeakyReLU(0.2)))
    assert.equals("GELU(approximate='none')", tostring(nn.GELU()))
    assert.equals('Softmax(dim=-1)', tostring(nn.Softmax(-1)))
  end)
end)
