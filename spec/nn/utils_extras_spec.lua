-- nn.utils.weight_norm / spectral_norm and nn.utils.rnn (packed sequences).
-- Reference values from torch 1.13 (float64), weights made by
--   W(*s) = torch.arange(n).reshape(*s) * 0.37 % 1.3 - 0.6
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn = flow.nn
local utils = nn.utils

local f64 = {dtype = flow.float64}
local function W(...)
  local s = {...}
  local n = 1
  for _, d in ipairs(s) do n = n * d end
  return (flow.arange(0, n, 1, f64):reshape(s) * 0.37):fmod(1.3) - 0.6
end

local function set(p, t) flow.no_grad(function() p:copy_(t) end) end

local function keys(m)
  local ks = {}
  for k in pairs(m:state_dict()) do ks[#ks + 1] = k end
  table.sort(ks)
  return table.concat(ks, ',')
end

describe('nn.utils.weight_norm', function()
  it('matches torch on a Linear (default dim = 1): g, values and grads', function()
    local lin = nn.Linear(3, 2, f64)
    set(lin.weight, W(2, 3)); set(lin.bias, flow.tensor({0.1, -0.2}):double())   -- torch's float32 bias
    utils.weight_norm(lin)
    assert.are.equal('bias,weight_g,weight_v', keys(lin))
    H.close(lin.weight_g, {{0.6576473218982952}, {0.6625707509390978}}, 1e-10)
    local y = lin(W(4, 3) * 1.5 + 0.2)
    H.close(y:sum(), -1.5734000059604643, 1e-10)
    ;(y * y):sum():backward()
    H.close(lin.weight_g.grad, {{3.4517283821953475}, {1.8108590188076503}}, 1e-9)
    H.close(lin.weight_v.grad, {{0.4285785956297288, -0.969614768407942, 0.2438268617429332},
                                {-0.5616769240860517, -0.7153853139853835, 0.2801320117994903}}, 1e-9)
  end)

  it('matches torch on a Conv2d with dim = false (whole norm) and dim = 2', function()
    local x = W(1, 2, 3, 3) + 0.1
    local conv = nn.Conv2d(2, 3, 2, f64)
    set(conv.weight, W(3, 2, 2, 2)); set(conv.bias, flow.zeros(3, f64))
    utils.weight_norm(conv, {dim = false})
    H.close(conv.weight_g, 1.9119623427253993, 1e-10)
    local y = conv(x)
    H.close((y * y):sum(), 1.941974159999996, 1e-10)
    ;(y * y):sum():backward()
    H.close(conv.weight_g.grad, 2.0313937326106712, 1e-9)
    H.close(conv.weight_v.grad:reshape(-1):narrow(1, 1, 4),
            {0.0791912077907867, 0.24249502965313458, 1.0511348515154821, -0.5312013266221679}, 1e-9)

    local c1 = nn.Conv2d(2, 3, 2, f64)
    set(c1.weight, W(3, 2, 2, 2)); set(c1.bias, flow.zeros(3, f64))
    utils.weight_norm(c1, {dim = 2})
    assert.are.same({1, 2, 1, 1}, H.shape(c1.weight_g))
    H.close(c1.weight_g:reshape(-1), {1.2864680330268607, 1.4144256784999338}, 1e-10)
    local y1 = c1(x)
    ;(y1 * y1):sum():backward()
    H.close(c1.weight_g.grad:reshape(-1), {1.5898450233448558, 1.299936467464295}, 1e-9)
    H.close(c1.weight_v.grad:reshape(-1):narrow(1, 21, 4),
            {0.24913118704388676, -0.07767154893531958, 0.5201465712286301, 0.6545838352494244}, 1e-9)
  end)

  it('recomputes the weight before each forward and can be removed', function()
    local lin = nn.Linear(3, 2, f64)
    set(lin.weight, W(2, 3))
    utils.weight_norm(lin)
    H.close(lin.weight, W(2, 3), 1e-12)
    set(lin.weight_g, lin.weight_g * 2)
    lin(flow.ones(1, 3, f64))
    H.close(lin.weight, W(2, 3) * 2, 1e-12)
    H.raises(function() utils.weight_norm(lin) end, 'two weight_norm')
    utils.remove_weight_norm(lin)
    assert.are.equal('bias,weight', keys(lin))
    assert.is_true(nn.is_parameter(lin.weight))
    H.close(lin.weight, W(2, 3) * 2, 1e-12)
    H.raises(function() utils.remove_weight_norm(lin) end, 'not found')
    H.raises(function() utils.weight_norm(lin, {name = 'nope'}) end, 'no parameter')
  end)
end)

describe('nn.utils.spectral_norm', function()
  it('matches torch on a Conv2d in train and eval mode with fixed u, v', function()
    local conv = nn.Conv2d(2, 3, 2, f64)
    set(conv.weight, W(3, 2, 2, 2)); set(conv.bias, flow.zeros(3, f64))
    utils.spectral_norm(conv)
    assert.are.equal('bias,weight_orig,weight_u,weight_v', keys(conv))
    set(conv.weight_u, flow.tensor({0.6, 0, -0.8}, f64))
    set(conv.weight_v, flow.ones(8, f64) / math.sqrt(8))
    local x = W(1, 2, 3, 3) + 0.1
    local y = conv(x)
    H.close((y * y):sum(), 1.1359467733039028, 1e-10)
    H.close(conv.weight_u, {0.7343063244890973, 0.08808999258174903, -0.6730782829821951}, 1e-10)
    y = conv(x)
    H.close((y * y):sum(), 1.1054338401279664, 1e-10)
    H.close(conv.weight_u, {0.782223046671934, 0.13057007443600835, -0.6091621794867543}, 1e-10)
    H.close(conv.weight_v:narrow(1, 1, 3), {-0.41098067689531853, -0.3691264020952521, 0.3356076414134122}, 1e-10)
    y = conv(x)
    ;(y * y):sum():backward()
    H.close((y * y):sum(), 1.099958610170729, 1e-10)
    H.close(conv.weight_orig.grad:reshape(-1):narrow(1, 1, 5), {0.2556859556941409, 0.45886826794069985,
      0.23823719670885884, -0.3781429457756708, 1.1608849381786706}, 1e-9)
    conv:eval()
    for _ = 1, 2 do
      y = conv(x)
      H.close((y * y):sum(), 1.099958610170729, 1e-10)
      H.close(conv.weight_u, {0.7993318796358303, 0.15118082623743817, -0.5815607483109706}, 1e-10)
    end
    utils.remove_spectral_norm(conv)
    assert.are.equal('bias,weight', keys(conv))
    H.close(conv.weight:reshape(-1):narrow(1, 1, 4), {-0.4515623232176298, -0.1730988905667581,
      0.10536454208411364, 0.38382797473498526}, 1e-10)
  end)

  it('matches torch on a Linear with dim = 2 and 3 power iterations', function()
    local lin = nn.Linear(3, 4, f64)
    set(lin.weight, W(4, 3)); set(lin.bias, flow.zeros(4, f64))
    utils.spectral_norm(lin, {n_power_iterations = 3, dim = 2})
    assert.are.same({3}, H.shape(lin.weight_u))
    set(lin.weight_u, flow.tensor({1, 0, 0}, f64))
    set(lin.weight_v, flow.tensor({0.5, 0.5, 0.5, 0.5}, f64))
    local y = lin(W(2, 3) + 0.3)
    H.close(y, {{0.20235914433934327, -0.1834244306118038, -0.13756832295885288, -0.17337377687965014},
                {-0.37995060626730787, 0.4047182886786865, 0.10445500843059641, -0.05581702340535327}}, 1e-10)
    H.close(lin.weight_u, {0.6274317955901315, 0.6662017566038909, -0.40311854507133926}, 1e-10)
    H.close(lin.weight_v, {-0.5765463761333139, 0.16949858498650955, 0.6383917859079162, 0.4809578292744753}, 1e-10)
    H.raises(function() utils.spectral_norm(nn.Linear(2, 2), {n_power_iterations = 0}) end, 'positive')
    H.raises(function() utils.remove_spectral_norm(nn.Linear(2, 2)) end, 'not found')
  end)

  it('gives sigma(w) ~ 1 after enough iterations (gradient check on w_orig)', function()
    local lin = nn.Linear(4, 3, f64)
    utils.spectral_norm(lin, {n_power_iterations = 50})
    lin(flow.ones(1, 4, f64))
    local s = flow.linalg.svdvals and flow.linalg.svdvals(lin.weight:detach()) or nil
    if s then H.close(s[1], 1, 1e-6) end
    lin:eval()
    local x = W(2, 4)
    local f = function(w)
      set(lin.weight_orig, w)
      return lin(x):pow(2):sum()
    end
    local w0 = lin.weight_orig:detach():clone()
    lin.weight_orig.grad = nil
    f(w0):backward()
    local g = lin.weight_orig.grad:clone()
    local h = 1e-6
    for _, ij in ipairs({{1, 1}, {2, 3}, {3, 4}}) do
      local wp, wm = w0:clone(), w0:clone()
      wp[ij[1]][ij[2]]:add_(h); wm[ij[1]][ij[2]]:add_(-h)
      local fd = flow.no_grad(function() return (f(wp):item() - f(wm):item()) / (2 * h) end)
      H.close(g[ij[1]][ij[2]], fd, 1e-5)
    end
  end)
end)
