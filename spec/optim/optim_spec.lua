-- flow.optim: update rules against PyTorch's algorithms, param groups,
-- state dicts, zero_grad, closures and argument errors.
--
-- PyTorch is not installed where these specs were written, so the
-- reference trajectories come from `ref` below: PyTorch's documented
-- algorithms (torch.optim docs; timm's Lamb for LAMB) written as scalar
-- loops over plain Lua numbers -- a separate code path from the tensor
-- implementation. A few first steps are also checked against values
-- worked out by hand.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local optim = flow.optim
local f64 = {dtype = flow.float64}
local TOL = 1e-9   -- relative; the requirement is 1e-6

------------------------------------------------------------------ objective
-- f(w, b) = sum over the pairs (x, y) of w of (1 - x)^2 + 10 (y - x^2)^2
--         + sum_i i (b_i - i)^2, with its gradient written out by hand.
local W0 = {-0.5, 0.8, 1.2, 0.7}
local B0 = {0.3, -0.2, 0.9}

local function grad_of(w, b)
  local gw, gb = {}, {}
  for k = 0, #w / 2 - 1 do
    local x, y = w[2 * k + 1], w[2 * k + 2]
    gw[2 * k + 1] = -2 * (1 - x) - 40 * x * (y - x * x)
    gw[2 * k + 2] = 20 * (y - x * x)
  end
  for i = 1, #b do gb[i] = 2 * i * (b[i] - i) end
  return gw, gb
end

local function copy(t)
  local r = {}
  for i, v in ipairs(t) do r[i] = v end
  return r
end

local function zeros(n, v)
  local r = {}
  for i = 1, n do r[i] = v or 0 end
  return r
end

------------------------------------------------------------------ scalar references
-- Each ref.X(h, P, G, S, t) updates the arrays in P (one per parameter)
-- from the gradients G at step t (1-based); S[k] is the state of param k.
local ref = {}

function ref.sgd(h, P, G, S)
  for k, p in ipairs(P) do
    local s = S[k]
    for i = 1, #p do
      local g = G[k][i]
      if h.maximize then g = -g end
      g = g + (h.weight_decay or 0) * p[i]
      local mom = h.momentum or 0
      if mom ~= 0 then
        if s.buf == nil then s.buf = {} end
        if s.buf[i] == nil then
          s.buf[i] = g
        else
          s.buf[i] = mom * s.buf[i] + (1 - (h.dampening or 0)) * g
        end
        if h.nesterov then g = g + mom * s.buf[i] else g = s.buf[i] end
      end
      p[i] = p[i] - h.lr * g
    end
  end
end

local function adam_like(decoupled)
  return function(h, P, G, S, t)
    local b1, b2 = h.betas[1], h.betas[2]
    local wd = h.weight_decay or 0
    for k, p in ipairs(P) do
      local s = S[k]
      s.m = s.m or zeros(#p)
      s.v = s.v or zeros(#p)
      s.vmax = s.vmax or zeros(#p)
      for i = 1, #p do
        local g = G[k][i]
        if h.maximize then g = -g end
        if decoupled then
          p[i] = p[i] * (1 - h.lr * wd)
        else
          g = g + wd * p[i]
        end
        s.m[i] = b1 * s.m[i] + (1 - b1) * g
        s.v[i] = b2 * s.v[i] + (1 - b2) * g * g
        local mhat = s.m[i] / (1 - b1 ^ t)
        local v = s.v[i]
        if h.amsgrad then
          s.vmax[i] = math.max(s.vmax[i], v)
          v = s.vmax[i]
        end
        local vhat = v / (1 - b2 ^ t)
        p[i] = p[i] - h.lr * mhat / (math.sqrt(vhat) + h.eps)
      end
    end
  end
end
ref.adam = adam_like(false)
ref.adamw = adam_like(true)

function ref.rmsprop(h, P, G, S)
  local a, mu, wd = h.alpha, h.momentum or 0, h.weight_decay or 0
  for k, p in ipairs(P) do
    local s = S[k]
    s.v = s.v or zeros(#p)
    s.ga = s.ga or zeros(#p)
    s.b = s.b or zeros(#p)
    for i = 1, #p do
      local g = G[k][i] + wd * p[i]
      s.v[i] = a * s.v[i] + (1 - a) * g * g
      local vt = s.v[i]
      if h.centered then
        s.ga[i] = a * s.ga[i] + (1 - a) * g
        vt = vt - s.ga[i] * s.ga[i]
      end
      if mu > 0 then
        s.b[i] = mu * s.b[i] + g / (math.sqrt(vt) + h.eps)
        p[i] = p[i] - h.lr * s.b[i]
      else
        p[i] = p[i] - h.lr * g / (math.sqrt(vt) + h.eps)
      end
    end
  end
end

function ref.adagrad(h, P, G, S, t)
  local wd = h.weight_decay or 0
  local clr = h.lr / (1 + (t - 1) * (h.lr_decay or 0))
  for k, p in ipairs(P) do
    local s = S[k]
    s.sum = s.sum or zeros(#p, h.initial_accumulator_value or 0)
    for i = 1, #p do
      local g = G[k][i] + wd * p[i]
      s.sum[i] = s.sum[i] + g * g
      p[i] = p[i] - clr * g / (math.sqrt(s.sum[i]) + h.eps)
    end
  end
end

local function norm(v)
  local s = 0
  for i = 1, #v do s = s + v[i] * v[i] end
  return math.sqrt(s)
end

-- timm's Lamb (step counted per group, global grad-norm clipping optional)
function ref.lamb(h, P, G, S, t)
  local b1, b2 = h.betas[1], h.betas[2]
  local wd = h.weight_decay
  local clip = 1
  if h.max_grad_norm then
    local sq = 0
    for k = 1, #G do sq = sq + norm(G[k]) ^ 2 end
    clip = math.max(math.sqrt(sq) / h.max_grad_norm, 1)
  end
  local bc1, bc2 = 1 - b1 ^ t, 1 - b2 ^ t
  for k, p in ipairs(P) do
    local s = S[k]
    s.m = s.m or zeros(#p)
    s.v = s.v or zeros(#p)
    local u = {}
    for i = 1, #p do
      local g = G[k][i] / clip
      if not h.adam_w_mode then g = g + wd * p[i] end
      s.m[i] = b1 * s.m[i] + (1 - b1) * g
      s.v[i] = b2 * s.v[i] + (1 - b2) * g * g
      u[i] = (s.m[i] / bc1) / (math.sqrt(s.v[i] / bc2) + h.eps)
      if h.adam_w_mode then u[i] = u[i] + wd * p[i] end
    end
    local ratio = 1
    if wd ~= 0 or h.always_adapt then
      local wn, un = norm(p), norm(u)
      if wn > 0 and un > 0 then ratio = wn / un end
      if h.trust_clip then ratio = math.min(ratio, 1) end
    end
    for i = 1, #p do p[i] = p[i] - h.lr * ratio * u[i] end
  end
end

------------------------------------------------------------------ harness
local function new_params()
  return flow.tensor(W0, {dtype = flow.float64, requires_grad = true}),
         flow.tensor(B0, {dtype = flow.float64, requires_grad = true})
end

local function set_grads(w, b, sign)
  local gw, gb = grad_of(w:totable(), b:totable())
  for i = 1, #gw do gw[i] = gw[i] * sign end
  for i = 1, #gb do gb[i] = gb[i] * sign end
  w.grad = flow.tensor(gw, f64)
  b.grad = flow.tensor(gb, f64)
end

-- Runs `steps` steps of Class(params, opts) and of the scalar reference
-- with hyper-parameters h (the optimizer's defaults filled in), comparing
-- after every step.
local function check_trajectory(Class, opts, reference, h, steps)
  local w, b = new_params()
  local opt = Class({w, b}, opts)
  local P, S = {copy(W0), copy(B0)}, {{}, {}}
  local sign = h.maximize and -1 or 1
  for t = 1, steps do
    set_grads(w, b, sign)
    opt:step()
    local gw, gb = grad_of(P[1], P[2])
    for i = 1, #gw do gw[i] = gw[i] * sign end
    for i = 1, #gb do gb[i] = gb[i] * sign end
    reference(h, P, {gw, gb}, S, t)
    H.close(w, P[1], TOL, ('step %d, w'):format(t))
    H.close(b, P[2], TOL, ('step %d, b'):format(t))
  end
  return w, b, opt
end

local function with_defaults(Class, opts)
  local w = flow.zeros(1, {dtype = flow.float64, requires_grad = true})
  local g = Class({w}, opts).param_groups[1]
  g.params = nil
  return g
end

local function case(Class, reference, opts, steps)
  return function()
    check_trajectory(Class, opts, reference, with_defaults(Class, opts), steps or 30)
  end
end

------------------------------------------------------------------ trajectories
describe('optim trajectories match the PyTorch algorithms (float64)', function()
  it('SGD', case(optim.SGD, ref.sgd, {lr = 1e-2}))
  it('SGD with momentum, dampening and weight decay',
     case(optim.SGD, ref.sgd, {lr = 1e-2, momentum = 0.9, dampening = 0.1, weight_decay = 1e-2}))
  it('SGD with Nesterov momentum', case(optim.SGD, ref.sgd, {lr = 1e-2, momentum = 0.8, nesterov = true,
                                                             weight_decay = 1e-3}))
  it('SGD maximize', case(optim.SGD, ref.sgd, {lr = 1e-2, momentum = 0.5, maximize = true}))
  it('Adam', case(optim.Adam, ref.adam, {lr = 1e-2}))
  it('Adam with L2 weight decay and amsgrad',
     case(optim.Adam, ref.adam, {lr = 2e-2, betas = {0.8, 0.99}, weight_decay = 1e-2, amsgrad = true}))
  it('Adam maximize', case(optim.Adam, ref.adam, {lr = 1e-2, maximize = true, eps = 1e-6}))
  it('AdamW', case(optim.AdamW, ref.adamw, {lr = 1e-2, weight_decay = 0.1}))
  it('AdamW with amsgrad', case(optim.AdamW, ref.adamw, {lr = 1e-2, amsgrad = true}))
  it('RMSprop', case(optim.RMSprop, ref.rmsprop, {lr = 1e-3}))
  it('RMSprop centered, with momentum and weight decay',
     case(optim.RMSprop, ref.rmsprop, {lr = 1e-3, alpha = 0.9, centered = true, momentum = 0.5,
                                       weight_decay = 1e-2}))
  it('RMSprop with momentum', case(optim.RMSprop, ref.rmsprop, {lr = 1e-3, momentum = 0.9}))
  it('Adagrad', case(optim.Adagrad, ref.adagrad, {lr = 0.1}))
  it('Adagrad with lr_decay, weight decay and an initial accumulator',
     case(optim.Adagrad, ref.adagrad, {lr = 0.1, lr_decay = 0.01, weight_decay = 1e-2,
                                       initial_accumulator_value = 0.1}))
  it('LAMB', case(optim.LAMB, ref.lamb, {lr = 1e-2}))
  it('LAMB with L2 decay (adam_w_mode = false)',
     case(optim.LAMB, ref.lamb, {lr = 1e-2, adam_w_mode = false, weight_decay = 0.05}))
  it('LAMB with grad clipping and trust clipping',
     case(optim.LAMB, ref.lamb, {lr = 1e-2, max_grad_norm = 1.0, trust_clip = true}))
  it('LAMB without weight decay adapts only with always_adapt', function()
    case(optim.LAMB, ref.lamb, {lr = 1e-2, weight_decay = 0})()
    case(optim.LAMB, ref.lamb, {lr = 1e-2, weight_decay = 0, always_adapt = true})()
  end)
end)

describe('fused updates (SGD, Adam, AdamW)', function()
  local U = require 'oneflow.optim._util'
  -- Dense float parameters step through one C kernel; a strided one takes
  -- the op-by-op path. Both must give the same bits, in float32 too, over
  -- sizes that split across threads and end in a partial chunk.
  local function pair(m)
    local a = flow.randn(2, m)
    local b = a:t():contiguous():t():detach()
    a:requires_grad_()
    b:requires_grad_()
    return a, b
  end
  local function same_bits(name, opts, m)
    local keys = {}
    for k, v in pairs(opts) do keys[#keys + 1] = k .. '=' .. tostring(type(v) == 'table' and v[1] or v) end
    table.sort(keys)
    it(('%s {%s}, %d elements'):format(name, table.concat(keys, ', '), 2 * m), function()
      flow.manual_seed(7)
      local a, b = pair(m)
      assert.is_false(b:is_contiguous())
      local oa, ob = optim[name]({a}, opts), optim[name]({b}, opts)
      for _ = 1, 4 do
        local g = flow.randn(2, m)
        a.grad, b.grad = g, g:clone()
        assert.is_not_nil(U.fused_grad(a, a.grad))
        assert.is_nil(U.fused_grad(b, b.grad))
        oa:step()
        ob:step()
        assert.equals(0, (a:detach() - b:detach()):abs():max():item())
        assert.equals(oa.state[a] == nil, ob.state[b] == nil)
        for k, v in pairs(oa.state[a] or {}) do
          if flow.is_tensor(v) then
            assert.equals(0, (v - ob.state[b][k]):abs():max():item(), k)
          else
            assert.equals(v, ob.state[b][k], k)
          end
        end
      end
    end)
  end
  for _, m in ipairs({5, 40001}) do
    same_bits('SGD', {lr = 0.1}, m)
    same_bits('SGD', {lr = 0.1, weight_decay = 0.01}, m)
    same_bits('SGD', {lr = 0.1, momentum = 0.9}, m)
    same_bits('SGD', {lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.1}, m)
    same_bits('SGD', {lr = 0.1, momentum = 0.8, dampening = 0.3, maximize = true}, m)
    same_bits('Adam', {lr = 0.01}, m)
    same_bits('Adam', {lr = 0.01, weight_decay = 0.1, amsgrad = true}, m)
    same_bits('Adam', {lr = 0.01, betas = {0.3, 0.9}, maximize = true}, m)
    same_bits('AdamW', {lr = 0.01, weight_decay = 0.1}, m)
    same_bits('AdamW', {lr = 0.01, amsgrad = true}, m)
  end

  it('keeps the op-by-op update while nn.Graph traces', function()
    local G = flow.nn.Graph:subclass('FusedProbe')
    local seen, ran
    function G.build(_, x)
      local w = x * 1
      seen, ran = U.fused_grad(x, w), true
      return w
    end
    local x = flow.randn(4)
    assert.is_not_nil(U.fused_grad(x, x * 1))
    G()(x)
    assert.is_true(ran)
    assert.is_nil(seen)
  end)

  it('float64 parameters and non-contiguous grads use the kernel too', function()
    local p = flow.randn(3, 4, {dtype = flow.float64}):requires_grad_()
    local g = flow.randn(4, 3, {dtype = flow.float64}):t()
    assert.is_not_nil(U.fused_grad(p, g))
    assert.is_nil(U.fused_grad(p, flow.randn(3, 4)))              -- float32 grad
    assert.is_nil(U.fused_grad(p, flow.randn(12, {dtype = flow.float64})))  -- other shape
    local opt = optim.SGD({p}, {lr = 0.5})
    local before = p:detach():clone()
    p.grad = g
    opt:step()
    H.close(p, (before - g * 0.5):totable(), 1e-15)
  end)
end)

describe('optim first steps worked by hand', function()
  it('SGD: p - lr * g; momentum buffer starts at g', function()
    local p = flow.tensor({1, 2}, {dtype = flow.float64, requires_grad = true})
    local opt = optim.SGD({p}, {lr = 0.1, momentum = 0.9})
    p.grad = flow.tensor({1, -1}, f64)
    opt:step()
    H.close(p, {0.9, 2.1}, 1e-15)
    opt:step()   -- buf = 0.9 * g + g
    H.close(p, {0.9 - 0.19, 2.1 + 0.19}, 1e-15)
    H.close(opt.state[p].momentum_buffer, {1.9, -1.9}, 1e-15)
  end)

  it('Adam: the first step moves each weight by lr * g / (|g| + eps)', function()
    local p = flow.tensor({1, 2, 3}, {dtype = flow.float64, requires_grad = true})
    local opt = optim.Adam({p}, {lr = 0.1})
    p.grad = flow.tensor({2, -0.5, 1e-3}, f64)
    opt:step()
    H.close(p, {1 - 0.1 * 2 / (2 + 1e-8), 2 + 0.1 * 0.5 / (0.5 + 1e-8), 3 - 0.1 * 1e-3 / (1e-3 + 1e-8)}, 1e-14)
    assert.equals(1, opt.state[p].step)
  end)

  it('AdamW: decay is applied before the Adam step', function()
    local p = flow.tensor({1}, {dtype = flow.float64, requires_grad = true})
    local opt = optim.AdamW({p}, {lr = 0.1, weight_decay = 0.5})
    p.grad = flow.tensor({4}, f64)
    opt:step()
    H.close(p, {1 * (1 - 0.05) - 0.1 * 4 / (4 + 1e-8)}, 1e-14)
  end)

  it('Adagrad: p - lr * g / (sqrt(acc + g^2) + eps)', function()
    local p = flow.tensor({1}, {dtype = flow.float64, requires_grad = true})
    local opt = optim.Adagrad({p}, {lr = 0.5, initial_accumulator_value = 5})
    p.grad = flow.tensor({2}, f64)
    opt:step()
    H.close(p, {1 - 0.5 * 2 / (3 + 1e-10)}, 1e-14)
  end)

  it('RMSprop: p - lr * g / (sqrt((1 - alpha) g^2) + eps)', function()
    local p = flow.tensor({1}, {dtype = flow.float64, requires_grad = true})
    local opt = optim.RMSprop({p}, {lr = 0.01, alpha = 0.75})
    p.grad = flow.tensor({4}, f64)
    opt:step()
    H.close(p, {1 - 0.01 * 4 / (2 + 1e-8)}, 1e-14)
  end)

  it('LAMB: a zero weight norm gives trust ratio 1', function()
    local p = flow.zeros(3, {dtype = flow.float64, requires_grad = true})
    local opt = optim.LAMB({p}, {lr = 0.1, weight_decay = 0.01})
    p.grad = flow.tensor({1, -2, 0}, f64)
    opt:step()
    -- first step: u = g / (|g| + eps) (+ wd * 0), trust 1
    H.close(p, {-0.1 / (1 + 1e-6), 0.1 * 2 / (2 + 1e-6), 0}, 1e-14)
    assert.equals(1, opt.param_groups[1].step)
  end)

  it('LAMB: trust ratio ||w|| / ||u|| scales the step', function()
    local p = flow.tensor({3, 4}, {dtype = flow.float64, requires_grad = true})
    local opt = optim.LAMB({p}, {lr = 0.1, weight_decay = 0.5})
    p.grad = flow.tensor({1, 1}, f64)
    opt:step()
    local u1, u2 = 1 / (1 + 1e-6) + 1.5, 1 / (1 + 1e-6) + 2
    local trust = 5 / math.sqrt(u1 * u1 + u2 * u2)
    H.close(p, {3 - 0.1 * trust * u1, 4 - 0.1 * trust * u2}, 1e-14)
  end)
end)

------------------------------------------------------------------ behaviour
describe('Optimizer', function()
  it('param groups keep their own hyper-parameters', function()
    local a = flow.tensor({1, 1}, {dtype = flow.float64, requires_grad = true})
    local b = flow.tensor({1}, {dtype = flow.float64, requires_grad = true})
    local opt = optim.SGD({{params = {a}}, {params = {b}, lr = 0.01, momentum = 0.5}}, {lr = 0.1})
    assert.equals(2, #opt.param_groups)
    assert.equals(0.1, opt.param_groups[1].lr)
    assert.equals(0, opt.param_groups[1].momentum)
    assert.equals(0.01, opt.param_groups[2].lr)
    assert.equals(0.5, opt.param_groups[2].momentum)
    a.grad = flow.tensor({1, 2}, f64)
    b.grad = flow.tensor({3}, f64)
    opt:step()
    H.close(a, {0.9, 0.8}, 1e-15)
    H.close(b, {0.97}, 1e-15)
    -- changing a group's lr takes effect on the next step
    opt.param_groups[1].lr = 1
    opt:step()
    H.close(a, {-0.1, -1.2}, 1e-14)
  end)

  it('add_param_group fills in the defaults and rejects duplicates', function()
    local a = flow.ones(2, {requires_grad = true})
    local b = flow.ones(2, {requires_grad = true})
    local opt = optim.Adam({a}, {lr = 0.5, betas = {0.8, 0.9}})
    opt:add_param_group({params = b, eps = 1e-3})
    local g = opt.param_groups[2]
    assert.equals(0.5, g.lr)
    assert.equals(1e-3, g.eps)
    assert.same({0.8, 0.9}, g.betas)
    assert.is_not.equal(opt.param_groups[1].betas, g.betas)   -- copied, not shared
    H.raises(function() opt:add_param_group({params = {a}}) end,
             'some parameters appear in more than one parameter group')
  end)

  it('skips parameters without a grad', function()
    local a = flow.tensor({1, 2}, {dtype = flow.float64, requires_grad = true})
    local b = flow.tensor({3}, {dtype = flow.float64, requires_grad = true})
    local opt = optim.Adam({a, b}, {lr = 0.1})
    a.grad = flow.tensor({1, 1}, f64)
    opt:step()
    H.close(b, {3})
    assert.is_nil(opt.state[b])
    assert.is_not_nil(opt.state[a])
  end)

  it('zero_grad sets grads to nil by default, or zeroes them', function()
    local a = flow.ones(3, {requires_grad = true})
    local opt = optim.SGD({a}, {lr = 0.1})
    a.grad = flow.ones(3)
    opt:zero_grad()
    assert.is_nil(a.grad)
    a.grad = flow.ones(3)
    opt:zero_grad({set_to_none = false})
    H.close(a.grad, {0, 0, 0})
    opt:zero_grad(false)
    H.close(a.grad, {0, 0, 0})
  end)

  it('accepts a single tensor and a positional lr', function()
    local a = flow.ones(2, {requires_grad = true})
    local opt = optim.SGD(a, 0.5, {momentum = 0.9})
    assert.equals(0.5, opt.param_groups[1].lr)
    assert.equals(0.9, opt.param_groups[1].momentum)
  end)

  it('prints its groups like PyTorch', function()
    local opt = optim.SGD({flow.ones(1, {requires_grad = true})}, {lr = 0.1})
    local s = tostring(opt)
    assert.truthy(s:find('SGD (', 1, true))
    assert.truthy(s:find('Parameter Group 1', 1, true))
    assert.truthy(s:find('lr: 0.1', 1, true))
  end)

  it('step(closure) evaluates the loss with grad enabled and returns it', function()
    local w = flow.tensor({1, -2}, {dtype = flow.float64, requires_grad = true})
    local opt = optim.SGD({w}, {lr = 0.1})
    local calls = 0
    local function closure()
      calls = calls + 1
      assert.is_true(flow.is_grad_enabled())
      opt:zero_grad()
      local loss = (w * w):sum()
      loss:backward()
      return loss
    end
    local loss = flow.no_grad(function() return opt:step(closure) end)
    assert.equals(1, calls)
    assert.near(5, loss:item(), 1e-12)
    H.close(w, {0.8, -1.6}, 1e-14)
  end)

  it('trains with real autograd (loss:backward)', function()
    -- loss = sum(c * (w - t)^2 + 0.1 * w^3), gradient 2 c (w - t) + 0.3 w^2
    local c = {1, 2, 0.5}
    local tgt = {2, -3, 1}
    local ct, tt = flow.tensor(c, f64), flow.tensor(tgt, f64)
    local w = flow.tensor({0.5, 0.5, -0.5}, {dtype = flow.float64, requires_grad = true})
    local opt = optim.Adam({w}, {lr = 0.1})
    local P, S = {{0.5, 0.5, -0.5}}, {{}}
    local h = with_defaults(optim.Adam, {lr = 0.1})
    for t = 1, 20 do
      opt:zero_grad()
      local loss = (ct * (w - tt) ^ 2 + w ^ 3 * 0.1):sum()
      loss:backward()
      opt:step()
      local g = {}
      for i = 1, 3 do g[i] = 2 * c[i] * (P[1][i] - tgt[i]) + 0.3 * P[1][i] ^ 2 end
      ref.adam(h, P, {g}, S, t)
      H.close(w, P[1], TOL, 'step ' .. t)
    end
  end)

  it('state_dict uses PyTorch layout and round-trips', function()
    local w, b = new_params()
    local opt = optim.Adam({{params = {w}}, {params = {b}, lr = 0.02}}, {lr = 0.01, amsgrad = true})
    for _ = 1, 5 do
      set_grads(w, b, 1)
      opt:step()
    end
    local sd = opt:state_dict()
    assert.same({0}, sd.param_groups[1].params)
    assert.same({1}, sd.param_groups[2].params)
    assert.equals(0.02, sd.param_groups[2].lr)
    assert.equals(5, sd.state[0].step)
    assert.equals(5, sd.state[1].step)
    assert.is_true(flow.is_tensor(sd.state[1].exp_avg_sq))
    assert.is_true(flow.is_tensor(sd.state[0].max_exp_avg_sq))
    assert.is_nil(sd.state[2])

    -- a fresh optimizer on copies of the parameters continues identically
    local w2 = flow.tensor(w:totable(), {dtype = flow.float64, requires_grad = true})
    local b2 = flow.tensor(b:totable(), {dtype = flow.float64, requires_grad = true})
    local opt2 = optim.Adam({w2, b2}, {lr = 0.5})
    H.raises(function() opt2:load_state_dict(sd) end, 'different number of parameter groups')
    opt2 = optim.Adam({{params = {w2}}, {params = {b2}}}, {lr = 0.5})
    opt2:load_state_dict(sd)
    assert.equals(0.01, opt2.param_groups[1].lr)
    assert.equals(0.02, opt2.param_groups[2].lr)
    assert.is_true(opt2.param_groups[1].amsgrad)
    -- loaded state is a copy: the two optimizers do not share tensors
    assert.are_not.equal(opt.state[w].exp_avg, opt2.state[w2].exp_avg)
    for _ = 1, 5 do
      set_grads(w, b, 1)
      opt:step()
      set_grads(w2, b2, 1)
      opt2:step()
      H.close(w2, w:totable(), 1e-15)
      H.close(b2, b:totable(), 1e-15)
    end
    assert.equals(10, opt2.state[w2].step)
  end)

  it('state_dict round-trips SGD momentum and LAMB group steps', function()
    for _, spec in ipairs({{optim.SGD, {lr = 1e-2, momentum = 0.9}}, {optim.LAMB, {lr = 1e-2}},
                           {optim.RMSprop, {lr = 1e-3, centered = true, momentum = 0.5}},
                           {optim.Adagrad, {lr = 0.1}}}) do
      local Class, opts = spec[1], spec[2]
      local w, b = new_params()
      local opt = Class({w, b}, opts)
      for _ = 1, 3 do set_grads(w, b, 1); opt:step() end
      local w2 = flow.tensor(w:totable(), {dtype = flow.float64, requires_grad = true})
      local b2 = flow.tensor(b:totable(), {dtype = flow.float64, requires_grad = true})
      local opt2 = Class({w2, b2}, opts)
      opt2:load_state_dict(opt:state_dict())
      for _ = 1, 3 do
        set_grads(w, b, 1); opt:step()
        set_grads(w2, b2, 1); opt2:step()
      end
      H.close(w2, w:totable(), 1e-15, Class.__name)
      H.close(b2, b:totable(), 1e-15, Class.__name)
    end
  end)

  it('Adagrad creates its state up front, as PyTorch does', function()
    local a = flow.ones(2, {dtype = flow.float64, requires_grad = true})
    local opt = optim.Adagrad({a}, {initial_accumulator_value = 0.5})
    local sd = opt:state_dict()
    assert.equals(0, sd.state[0].step)
    H.close(sd.state[0].sum, {0.5, 0.5})
  end)

  it('load_state_dict casts state to the parameter dtype', function()
    local a = flow.ones(2, {dtype = flow.float64, requires_grad = true})
    local opt = optim.Adam({a})
    opt:load_state_dict({state = {[0] = {step = flow.tensor(3), exp_avg = flow.tensor({1, 2}),
                                          exp_avg_sq = flow.tensor({1, 1})}},
                         param_groups = {{params = {0}, lr = 0.1, betas = {0.9, 0.999}, eps = 1e-8,
                                          weight_decay = 0, amsgrad = false, maximize = false}}})
    assert.equals(3, opt.state[a].step)
    assert.equals(flow.float64, opt.state[a].exp_avg.dtype)
    assert.equals(0.1, opt.param_groups[1].lr)
    H.raises(function()
      opt:load_state_dict({state = {}, param_groups = {{params = {0, 1}, lr = 0.1}}})
    end, "doesn't match the size")
  end)
end)

describe('optim argument errors', function()
  local p = flow.ones(2, {requires_grad = true})
  it('validates hyper-parameters', function()
    H.raises(function() optim.SGD({p}, {lr = -1}) end, 'SGD: invalid learning rate -1')
    H.raises(function() optim.SGD({p}, {momentum = -0.5}) end, 'SGD: invalid momentum value -0.5')
    H.raises(function() optim.SGD({p}, {weight_decay = -1}) end, 'SGD: invalid weight_decay value -1')
    H.raises(function() optim.SGD({p}, {nesterov = true}) end, 'nesterov momentum requires a momentum')
    H.raises(function() optim.SGD({p}, {lr = 'fast'}) end, 'SGD: learning rate must be a number')
    H.raises(function() optim.Adam({p}, {betas = {1.5, 0.9}}) end,
             'Adam: invalid beta parameter at index 1: 1.5')
    H.raises(function() optim.AdamW({p}, {betas = {0.9, -0.1}}) end,
             'AdamW: invalid beta parameter at index 2: -0.1')
    H.raises(function() optim.Adam({p}, {eps = -1}) end, 'Adam: invalid epsilon value -1')
    H.raises(function() optim.RMSprop({p}, {alpha = -1}) end, 'RMSprop: invalid alpha value -1')
    H.raises(function() optim.Adagrad({p}, {lr_decay = -1}) end, 'Adagrad: invalid lr_decay value -1')
    H.raises(function() optim.LAMB({p}, {lr = 0 / 0}) end, 'LAMB: invalid learning rate')
    H.raises(function() optim.SGD({{params = {p}, lr = -2}}) end, 'SGD: invalid learning rate -2')
  end)

  it('rejects unknown options, empty and bad parameter lists', function()
    H.raises(function() optim.SGD({p}, {lr = 0.1, momentun = 0.9}) end, "SGD: unknown option 'momentun'")
    H.raises(function() optim.Adam({}) end, 'Adam: optimizer got an empty parameter list')
    H.raises(function() optim.SGD({p, 3}) end, 'optimize tensors', 'params[2]')
    H.raises(function() optim.SGD({p, p}) end, 'params[2] appears twice')
    H.raises(function() optim.SGD({p * 2}) end, "can't optimize a non-leaf tensor")
    H.raises(function() optim.SGD({weight = p}) end, 'must be an array')
    H.raises(function() optim.SGD(42) end, 'params must be a tensor')
    -- an iterator that yields no tensor (and would never end) is refused at once
    H.raises(function() optim.SGD(function() return 1 end, {lr = 0.1}) end,
             'SGD: params iterator yielded number, nil; expected a tensor')
    local m = flow.nn.Linear(2, 2)
    assert.equal(2, #optim.SGD(m:named_parameters(), {lr = 0.1}).param_groups[1].params)
  end)

  it('accepts and ignores foreach / fused / capturable / differentiable', function()
    local opt = optim.Adam({p}, {foreach = false, fused = false})
    assert.is_nil(opt.param_groups[1].foreach)
  end)
end)
