-- flow.amp: autocast op classes and GradScaler maths (eager).
local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional
local amp = flow.amp

local bf16, f16, f32, f64 = flow.bfloat16, flow.float16, flow.float32, flow.float64

describe('flow.amp.autocast', function()
  before_each(function() flow.manual_seed(1) end)

  it('runs matmul, linear and convolutions in the low dtype', function()
    local x, w = flow.randn(3, 4), flow.randn(4, 5)
    for _, dt in ipairs({bf16, f16}) do
      amp.autocast({dtype = dt}, function()
        assert.equal(dt, flow.matmul(x, w).dtype)
        assert.equal(dt, flow.mm(x, w).dtype)
        assert.equal(dt, flow.bmm(x:unsqueeze(1), w:unsqueeze(1)).dtype)
        assert.equal(dt, nn.Linear(4, 2)(x).dtype)
        assert.equal(dt, nn.Conv2d(2, 3, 3)(flow.randn(1, 2, 5, 5)).dtype)
        assert.equal(dt, F.conv_transpose2d(flow.randn(1, 2, 4, 4), flow.randn(2, 3, 3, 3)).dtype)
      end)
    end
    -- the values are those of the op on inputs rounded to the low dtype
    local got = amp.autocast({dtype = bf16}, function() return flow.matmul(x, w) end)
    H.close(got:float(), flow.matmul(x:to(bf16), w:to(bf16)):float(), 0)
  end)

  it('runs reductions, softmax, losses and norms in float32', function()
    local x = flow.randn(4, 6):to(bf16)
    amp.autocast({dtype = bf16}, function()
      assert.equal(f32, x:sum().dtype)
      assert.equal(f32, x:mean(2).dtype)
      assert.equal(f32, x:var(1).dtype)
      assert.equal(f32, x:cumsum(2).dtype)
      assert.equal(f32, F.softmax(x, 2).dtype)
      assert.equal(f32, F.log_softmax(x, 2).dtype)
      assert.equal(f32, F.cross_entropy(x, flow.tensor({1, 2, 3, 4}, {dtype = flow.int64})).dtype)
      assert.equal(f32, nn.LayerNorm(6)(x).dtype)
      assert.equal(f32, nn.BatchNorm1d(6)(x).dtype)
      assert.equal(f32, nn.GroupNorm(2, 6)(x).dtype)
      -- amax and argmax are not in the float32 list: they follow the input
      assert.equal(bf16, x:amax(2).dtype)
    end)
  end)

  it('leaves other ops to follow their inputs, and float64 alone', function()
    local h = flow.randn(3, 4):to(bf16)
    local d, w = flow.randn(3, 4, {dtype = f64}), flow.randn(4, 2, {dtype = f64})
    amp.autocast({dtype = bf16}, function()
      assert.equal(bf16, F.relu(h).dtype)
      assert.equal(bf16, (h * 2).dtype)
      assert.equal(f32, (h + flow.randn(3, 4)).dtype)   -- type promotion
      assert.equal(f64, flow.matmul(d, w).dtype)
    end)
  end)

  it('gives float32 leaves float32 grads (backward runs in the forward dtypes)', function()
    local w = flow.randn(4, 5, {requires_grad = true})
    local x = flow.randn(3, 4)
    local loss = amp.autocast({dtype = bf16}, function()
      local loss = flow.matmul(x, w):sum()
      loss:backward()   -- backward inside autocast: rules are not autocast
      return loss
    end)
    assert.equal(f32, loss.dtype)
    assert.equal(f32, w.grad.dtype)
    -- d sum(x @ w) / dw = x^T @ ones, computed from the bf16 copy of x
    local want = flow.matmul(x:to(bf16):float():t(), flow.ones(3, 5))
    H.close(w.grad, want, 1e-2)
  end)

  it('nests, restores the state on error and has a with-style form', function()
    assert.is_false(amp.is_autocast_enabled())
    local ac = amp.autocast({dtype = f16})
    ac:enter()
    assert.is_true(amp.is_autocast_enabled())
    assert.equal(f16, amp.get_autocast_dtype())
    amp.autocast({enabled = false}, function()
      assert.is_false(amp.is_autocast_enabled())
      assert.equal(f32, flow.matmul(flow.randn(2, 2), flow.randn(2, 2)).dtype)
    end)
    assert.is_true(amp.is_autocast_enabled())
    ac:exit()
    assert.is_false(amp.is_autocast_enabled())
    H.raises(function() amp.autocast({dtype = bf16}, function() error('boom') end) end, 'boom')
    assert.is_false(amp.is_autocast_enabled())
    H.raises(function() ac:exit() end, 'exit() without enter()')
  end)

  it('keeps parameters\' low-precision copies for inference, and sees updates', function()
    -- no_grad autocast keeps each parameter's bfloat16 copy between calls
    -- (core/ops/amp.c); the numbers must be those of a fresh cast every time
    local lin = nn.Linear(6, 5)
    local x = flow.randn(4, 6)
    local function fresh()   -- grad recorded: nothing kept, a new cast
      return amp.autocast({dtype = bf16}, function() return lin(x) end):float()
    end
    local function kept()
      return flow.no_grad(function()
        return amp.autocast({dtype = bf16}, function() return lin(x) end)
      end):float()
    end
    H.close(kept(), fresh():detach(), 0)
    H.close(kept(), fresh():detach(), 0)   -- the kept copy
    flow.no_grad(function() lin.weight:mul_(3) end)
    H.close(kept(), fresh():detach(), 0)
    -- a convolution's weight (kept as it is; linear keeps weight.t()'s copy)
    local conv, xi = nn.Conv2d(3, 4, 3), flow.randn(1, 3, 6, 6)
    local function ckept()
      return flow.no_grad(function()
        return amp.autocast({dtype = bf16}, function() return conv(xi) end)
      end):float()
    end
    local function cfresh()
      return amp.autocast({dtype = bf16}, function() return conv(xi) end):float():detach()
    end
    H.close(ckept(), cfresh(), 0)
    flow.no_grad(function() conv.weight:neg_() end)
    H.close(ckept(), cfresh(), 0)
    flow.no_grad(function() lin.weight:sub_(1) end)
    H.close(kept(), fresh():detach(), 0)
    lin:load_state_dict(nn.Linear(6, 5):state_dict())
    H.close(kept(), fresh():detach(), 0)
    local opt = flow.optim.SGD(lin:parameters(), {lr = 0.3})
    fresh():sum():backward()
    opt:step()
    H.close(kept(), fresh():detach(), 0)
    -- float16 and bfloat16 copies of one parameter are kept apart
    local h = flow.no_grad(function()
      return amp.autocast({dtype = f16}, function() return lin(x) end)
    end)
    assert.equal(f16, h.dtype)
    H.close(h:float(), amp.autocast({dtype = f16}, function() return lin(x) end):float():detach(), 0)
    -- a traced graph casts at every run: training between runs is seen
    local G = nn.Graph:subclass('KeptCastGraph')
    function G:__init() nn.Graph.__init(self); self.lin = lin; self.config:enable_amp(true) end
    function G:build(t) return self.lin(t) end
    local g = G()
    flow.no_grad(function() g(x) end)
    flow.no_grad(function() lin.weight:add_(1) end)
    H.close(flow.no_grad(function() return g(x) end):float(), fresh():detach(), 0)
    flow.empty_cache()
    H.close(kept(), fresh():detach(), 0)
  end)

  it('rejects bad options', function()
    H.raises(function() amp.autocast({dtype = flow.float32}) end, 'float16 or flow.bfloat16')
    H.raises(function() amp.autocast('tpu', {}) end, "device_type must be 'cpu' or 'cuda', got 'tpu'")
    H.raises(function() amp.is_autocast_enabled('xla') end, "device_type must be 'cpu' or 'cuda'")
  end)
end)

describe('flow.amp.GradScaler', function()
  local function setup(scale, interval)
    local w = flow.tensor({1.0, 2.0}, {requires_grad = true})
    local opt = flow.optim.SGD({w}, {lr = 0.5})
    local scaler = amp.GradScaler({init_scale = scale, growth_interval = interval})
    return w, opt, scaler
  end

  it('scales the loss, unscales the grads and steps', function()
    local w, opt, scaler = setup(8, 2)
    local loss = (w * w):sum()               -- grad 2w = {2, 4}
    local scaled = scaler:scale(loss)
    H.close(scaled, {8 * 5})
    scaled:backward()
    H.close(w.grad, {16, 32})                -- scaled grads
    scaler:unscale_(opt)
    H.close(w.grad, {2, 4})
    H.raises(function() scaler:unscale_(opt) end, 'already been called')
    scaler:step(opt)
    H.close(w, {1 - 0.5 * 2, 2 - 0.5 * 4})
    H.raises(function() scaler:step(opt) end, 'already been called')
    scaler:update()
    assert.equal(8, scaler:get_scale())      -- one good step of two
    assert.equal(1, scaler:_get_growth_tracker())
  end)

  it('skips the step on inf/nan and backs off, grows after growth_interval good steps', function()
    local w, opt, scaler = setup(8, 2)
    local function step(value)
      opt:zero_grad()
      scaler:scale((w * value):sum()):backward()
      scaler:step(opt)
      scaler:update()
    end
    step(math.huge)                          -- grad inf: skipped, 8 * 0.5
    H.close(w, {1, 2})
    assert.equal(4, scaler:get_scale())
    assert.equal(0, scaler:_get_growth_tracker())
    step(0 / 0)                              -- nan too
    H.close(w, {1, 2})
    assert.equal(2, scaler:get_scale())
    step(1)                                  -- grads {1, 1}: w - 0.5
    H.close(w, {0.5, 1.5})
    assert.equal(2, scaler:get_scale())
    step(1)                                  -- second good step: scale * 2
    H.close(w, {0, 1})
    assert.equal(4, scaler:get_scale())
    assert.equal(0, scaler:_get_growth_tracker())
  end)

  it('unscales with float(1 / scale) as PyTorch does', function()
    local w = flow.tensor({3.0}, {requires_grad = true})
    local opt = flow.optim.SGD({w}, {lr = 1})
    local scaler = amp.GradScaler({init_scale = 3})
    scaler:scale(w:sum()):backward()         -- grad 3 (float32)
    scaler:unscale_(opt)
    local inv = flow.tensor({1 / 3}, {dtype = flow.float32})
    H.close(w.grad, (flow.tensor({3.0}) * inv), 0)
  end)

  it('round-trips its state and does nothing when disabled', function()
    local _, _, scaler = setup(16, 5)
    scaler:update(32)
    local sd = scaler:state_dict()
    assert.same({scale = 32, growth_factor = 2, backoff_factor = 0.5, growth_interval = 5,
                 _growth_tracker = 0}, sd)
    local other = amp.GradScaler()
    other:load_state_dict(sd)
    assert.equal(32, other:get_scale())
    assert.equal(5, other:get_growth_interval())
    local off = amp.GradScaler({enabled = false})
    local x = flow.tensor({2.0})
    assert.equal(x, off:scale(x))
    assert.equal(1, off:get_scale())
    assert.same({}, off:state_dict())
    H.raises(function() amp.GradScaler({backoff_factor = 2}) end, 'backoff_factor')
  end)

  it('trains a float16 autocast model like float32', function()
    flow.manual_seed(3)
    local function run(use_amp)
      flow.manual_seed(4)
      local m = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
      local opt = flow.optim.SGD(m:parameters(), {lr = 0.5})
      local scaler = amp.GradScaler({enabled = use_amp})
      local x, y = flow.randn(32, 6), flow.randint(1, 4, {32})
      local loss
      for _ = 1, 30 do
        opt:zero_grad()
        loss = amp.autocast({dtype = f16, enabled = use_amp}, function()
          return F.cross_entropy(m(x), y)
        end)
        scaler:scale(loss):backward()
        scaler:step(opt)
        scaler:update()
      end
      return loss:item()
    end
    local l32, l16 = run(false), run(true)
    assert.is_true(l16 < 0.8, 'amp loss ' .. l16)   -- from 1.1
    assert.is_true(math.abs(l16 - l32) < 0.05, ('%g vs %g'):format(l16, l32))
  end)
end)
