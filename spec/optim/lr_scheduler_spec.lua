-- flow.optim.lr_scheduler: learning rates over epochs against values worked
-- out by hand or from the closed forms of PyTorch's documentation.
local flow = require 'oneflow'
local H = require 'spec.helpers'

local optim = flow.optim
local S = optim.lr_scheduler

local function make_opt(lr, Class, extra)
  local p = flow.zeros(2, {requires_grad = true})
  local opts = {lr = lr or 1}
  for k, v in pairs(extra or {}) do opts[k] = v end
  return (Class or optim.SGD)({p}, opts)
end

-- lrs of group 1 for epochs 0..n-1 (epoch 0 is the value after construction)
local function trace(sched, opt, n)
  local res = {opt.param_groups[1].lr}
  for e = 2, n do
    sched:step()
    res[e] = opt.param_groups[1].lr
  end
  return res
end

describe('lr_scheduler', function()
  it('StepLR decays every step_size epochs', function()
    local opt = make_opt(1)
    local s = S.StepLR(opt, 3, {gamma = 0.5})
    H.close(trace(s, opt, 10), {1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125}, 1e-15)
    H.close(s:get_last_lr(), {0.125}, 1e-15)
    assert.equals(9, s.last_epoch)
  end)

  it('StepLR takes step_size positionally or as an option', function()
    local a, b = make_opt(1), make_opt(1)
    local sa = S.StepLR(a, 2)
    local sb = S.StepLR(b, {step_size = 2})
    assert.same(trace(sa, a, 6), trace(sb, b, 6))
    H.raises(function() S.StepLR(make_opt(1), {gamma = 0.5}) end, 'StepLR: missing required argument step_size')
    H.raises(function() S.StepLR(make_opt(1), 3, {gama = 0.5}) end, "StepLR: unknown option 'gama'")
  end)

  it('MultiStepLR decays at each milestone, twice for a repeated one', function()
    local opt = make_opt(1)
    local s = S.MultiStepLR(opt, {5, 2, 5}, {gamma = 0.1})
    H.close(trace(s, opt, 7), {1, 1, 0.1, 0.1, 0.1, 0.001, 0.001}, 1e-12)
    local opt2 = make_opt(1)
    local s2 = S.MultiStepLR(opt2, {milestones = {1}})
    H.close(trace(s2, opt2, 3), {1, 0.1, 0.1}, 1e-15)
  end)

  it('ExponentialLR multiplies by gamma every epoch', function()
    local opt = make_opt(2)
    local s = S.ExponentialLR(opt, 0.9)
    local want = {}
    for e = 0, 9 do want[e + 1] = 2 * 0.9 ^ e end
    H.close(trace(s, opt, 10), want, 1e-12)
  end)

  it('CosineAnnealingLR: the recursive form follows the closed form, past T_max too', function()
    local base, eta, T = 1, 0.1, 10
    local opt = make_opt(base)
    local s = S.CosineAnnealingLR(opt, {T_max = T, eta_min = eta})
    local want = {}
    for e = 0, 3 * T do want[e + 1] = eta + (base - eta) * (1 + math.cos(math.pi * e / T)) / 2 end
    H.close(trace(s, opt, 3 * T + 1), want, 1e-12)
  end)

  it('CosineAnnealingLR is chainable: a change to the lr carries on', function()
    local opt = make_opt(1)
    local s = S.CosineAnnealingLR(opt, 10)
    s:step(); s:step()
    opt.param_groups[1].lr = opt.param_groups[1].lr / 2
    local before = opt.param_groups[1].lr
    s:step()
    -- lr_3 = (1 + cos(3 pi / 10)) / (1 + cos(2 pi / 10)) * lr_2
    H.close({opt.param_groups[1].lr},
            {(1 + math.cos(3 * math.pi / 10)) / (1 + math.cos(2 * math.pi / 10)) * before}, 1e-14)
    -- step(epoch) jumps with the closed form from base_lr
    s:step(5)
    H.close({opt.param_groups[1].lr}, {(1 + math.cos(math.pi / 2)) / 2}, 1e-14)
  end)

  it('LinearLR warms up linearly', function()
    local opt = make_opt(1)
    local s = S.LinearLR(opt, {start_factor = 0.25, total_iters = 4})
    H.close(trace(s, opt, 7), {0.25, 0.4375, 0.625, 0.8125, 1, 1, 1}, 1e-12)
    local opt2 = make_opt(0.3)
    local s2 = S.LinearLR(opt2)   -- 1/3 -> 1 over 5 epochs
    local want = {}
    for e = 0, 6 do want[e + 1] = 0.3 * (1 / 3 + (1 - 1 / 3) * math.min(5, e) / 5) end
    H.close(trace(s2, opt2, 7), want, 1e-12)
    H.raises(function() S.LinearLR(make_opt(1), {start_factor = 0}) end, 'starting multiplicative factor')
  end)

  it('ConstantLR and PolynomialLR', function()
    local opt = make_opt(1)
    H.close(trace(S.ConstantLR(opt, {factor = 0.5, total_iters = 3}), opt, 5), {0.5, 0.5, 0.5, 1, 1}, 1e-15)
    local opt2 = make_opt(1)
    local want = {}
    for e = 0, 6 do want[e + 1] = (1 - math.min(4, e) / 4) ^ 2 end
    H.close(trace(S.PolynomialLR(opt2, {total_iters = 4, power = 2}), opt2, 7), want, 1e-12)
  end)

  it('LambdaLR and MultiplicativeLR', function()
    local opt = make_opt(2)
    local s = S.LambdaLR(opt, function(e) return 1 / (e + 1) end)
    H.close(trace(s, opt, 4), {2, 1, 2 / 3, 0.5}, 1e-14)
    local opt2 = make_opt(1)
    local s2 = S.MultiplicativeLR(opt2, function() return 0.5 end)
    H.close(trace(s2, opt2, 4), {1, 0.5, 0.25, 0.125}, 1e-15)
  end)

  it('CosineAnnealingWarmRestarts restarts after T_0, T_0 * T_mult, ...', function()
    local opt = make_opt(1)
    local s = S.CosineAnnealingWarmRestarts(opt, 2, {T_mult = 2})
    -- cycles of 2, 4, 8 epochs
    local tcur = {0, 1, 0, 1, 2, 3, 0, 1}
    local ti = {2, 2, 4, 4, 4, 4, 8, 8}
    local want = {}
    for i = 1, 8 do want[i] = (1 + math.cos(math.pi * tcur[i] / ti[i])) / 2 end
    H.close(trace(s, opt, 8), want, 1e-12)
    s:step(6.5)   -- fractional epochs: cycle 3 (starts at 6), T_cur = 0.5
    H.close({opt.param_groups[1].lr}, {(1 + math.cos(math.pi * 0.5 / 8)) / 2}, 1e-12)
  end)

  it('OneCycleLR: cosine up to max_lr, then down to max_lr / div / final_div, momentum inverse', function()
    local opt = make_opt(0.5, optim.SGD, {momentum = 0.9})
    local s = S.OneCycleLR(opt, 1, {total_steps = 10})
    local function cos_anneal(a, b, pct) return b + (a - b) / 2 * (math.cos(math.pi * pct) + 1) end
    local init, max, min = 1 / 25, 1, 1 / 25 / 1e4
    local p1 = 0.3 * 10 - 1
    local lrs, moms = {}, {}
    for t = 0, 9 do
      if t <= p1 then
        lrs[t + 1] = cos_anneal(init, max, t / p1)
        moms[t + 1] = cos_anneal(0.95, 0.85, t / p1)
      else
        lrs[t + 1] = cos_anneal(max, min, (t - p1) / (9 - p1))
        moms[t + 1] = cos_anneal(0.85, 0.95, (t - p1) / (9 - p1))
      end
    end
    local got_lr, got_m = {}, {}
    for t = 0, 9 do
      if t > 0 then s:step() end
      got_lr[t + 1] = opt.param_groups[1].lr
      got_m[t + 1] = opt.param_groups[1].momentum
    end
    H.close(got_lr, lrs, 1e-12)
    H.close(got_m, moms, 1e-12)
    H.close({got_lr[1], got_lr[3], got_lr[10]}, {0.04, 1, 4e-6}, 1e-12)
    s:step()   -- step 10 == total_steps is allowed (PyTorch), step 11 is not
    H.raises(function() s:step() end, 'tried to step 11 times')
  end)

  it('OneCycleLR: linear, three-phase, epochs * steps_per_epoch, and beta1 cycling for Adam', function()
    local opt = make_opt(1, optim.Adam)
    local s = S.OneCycleLR(opt, 0.1, {epochs = 2, steps_per_epoch = 5, anneal_strategy = 'linear',
                                      three_phase = true, pct_start = 0.2})
    assert.equals(10, s.total_steps)
    -- phases end at steps 1, 2, 9: 0.004 -> 0.1 -> 0.004 -> 4e-7
    local want = {0.004, 0.1, 0.004}
    for t = 3, 9 do want[t + 1] = (4e-7 - 0.004) * (t - 2) / 7 + 0.004 end
    local got, b1 = {opt.param_groups[1].lr}, {opt.param_groups[1].betas[1]}
    for t = 1, 9 do
      s:step()
      got[t + 1] = opt.param_groups[1].lr
      b1[t + 1] = opt.param_groups[1].betas[1]
    end
    H.close(got, want, 1e-12)
    H.close({b1[1], b1[2], b1[3], b1[10]}, {0.95, 0.85, 0.95, 0.95}, 1e-12)
    assert.equals(0.999, opt.param_groups[1].betas[2])
    H.raises(function() S.OneCycleLR(make_opt(1, optim.Adagrad), 1, {total_steps = 5}) end,
             'optimizer must support momentum or beta1')
    H.raises(function() S.OneCycleLR(make_opt(1), 1) end, 'you must define either total_steps')
  end)

  it('ReduceLROnPlateau', function()
    local opt = make_opt(1)
    local s = S.ReduceLROnPlateau(opt, {factor = 0.5, patience = 1, cooldown = 1, threshold = 0.1, min_lr = 0.2})
    local metrics = {10, 9.5, 9.2, 8, 8.5, 8.4, 8.3, 7, 7.5, 7.4, 7.3, 7.2}
    -- best 10; 9.5, 9.2 are not 10% better: 2 bad > patience 1 -> 0.5, cooldown 1;
    -- 8 improves (and ends the cooldown); 8.5, 8.4 bad -> 0.25, cooldown; 8.3 bad
    -- but eaten by the cooldown; 7 improves; 7.5, 7.4 bad -> max(0.125, min_lr 0.2);
    -- 7.3 eaten by the cooldown; 7.2 bad (1 <= patience).
    local want = {1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.2, 0.2, 0.2}
    local got = {}
    for i, m in ipairs(metrics) do
      s:step(i % 2 == 0 and flow.tensor(m) or m)
      got[i] = opt.param_groups[1].lr
    end
    H.close(got, want, 1e-6)
    local opt2 = make_opt(1)
    local s2 = S.ReduceLROnPlateau(opt2, 'max', {patience = 0, threshold_mode = 'abs', threshold = 1})
    for _, m in ipairs({1, 1.5, 3}) do s2:step(m) end
    H.close(s2:get_last_lr(), {0.1}, 1e-15)   -- 1.5 is not > 1 + 1: reduced at once
    H.raises(function() S.ReduceLROnPlateau(make_opt(1), {mode = 'avg'}) end, 'mode avg is unknown')
    H.raises(function() S.ReduceLROnPlateau(make_opt(1), {factor = 1}) end, 'factor should be < 1.0')
  end)

  it('SequentialLR switches schedulers at the milestones', function()
    local opt = make_opt(1)
    local warm = S.LinearLR(opt, {start_factor = 0.1, total_iters = 3})
    local decay = S.ExponentialLR(opt, {gamma = 0.5})
    local s = S.SequentialLR(opt, {warm, decay}, {milestones = {3}})
    H.close(trace(s, opt, 7), {0.1, 0.4, 0.7, 1, 0.5, 0.25, 0.125}, 1e-12)
    H.raises(function() S.SequentialLR(opt, {warm, decay}, {milestones = {}}) end,
             'one more than the number of milestones')
    H.raises(function() S.SequentialLR(opt, {warm, S.ReduceLROnPlateau(opt)}, {milestones = {2}}) end,
             'does not support ReduceLROnPlateau')
  end)

  it('ChainedScheduler steps every scheduler', function()
    local opt = make_opt(1)
    local s = S.ChainedScheduler({S.ConstantLR(opt, {factor = 0.1, total_iters = 2}),
                                  S.ExponentialLR(opt, {gamma = 0.9})})
    H.close(trace(s, opt, 4), {0.1, 0.09, 0.81, 0.729}, 1e-12)
  end)

  it('param groups get their own base_lrs', function()
    local a, b = flow.zeros(1, {requires_grad = true}), flow.zeros(1, {requires_grad = true})
    local opt = optim.SGD({{params = {a}, lr = 1}, {params = {b}, lr = 0.1}})
    local s = S.StepLR(opt, {step_size = 1, gamma = 0.5})
    s:step()
    H.close(s:get_last_lr(), {0.5, 0.05}, 1e-15)
    H.close(s.base_lrs, {1, 0.1})
    assert.equals(1, opt.param_groups[1].initial_lr)
  end)

  it('state_dict round-trips and resumes the schedule', function()
    local opt = make_opt(1)
    local s = S.CosineAnnealingLR(opt, {T_max = 8})
    for _ = 1, 3 do s:step() end
    local sd = s:state_dict()
    assert.is_nil(sd.optimizer)
    assert.equals(3, sd.last_epoch)
    -- resume as in PyTorch: build both, then load the optimizer, then the scheduler
    local opt2 = make_opt(1)
    local s2 = S.CosineAnnealingLR(opt2, {T_max = 8})
    opt2:load_state_dict(opt:state_dict())
    s2:load_state_dict(sd)
    for _ = 1, 4 do
      s:step()
      s2:step()
      H.close(s2:get_last_lr(), s:get_last_lr(), 1e-15)
    end
  end)

  it('resuming with last_epoch needs initial_lr in the groups', function()
    H.raises(function() S.StepLR(make_opt(1), 3, {last_epoch = 4}) end, "param 'initial_lr' is not specified")
  end)

  it('SequentialLR state_dict carries the inner schedulers', function()
    local opt = make_opt(1)
    local s = S.SequentialLR(opt, {S.LinearLR(opt, {start_factor = 0.5, total_iters = 2}),
                                   S.StepLR(opt, {step_size = 2})}, {milestones = {2}})
    for _ = 1, 3 do s:step() end
    local sd = s:state_dict()
    assert.equals(2, #sd._schedulers)
    local opt2 = make_opt(1)
    local s2 = S.SequentialLR(opt2, {S.LinearLR(opt2, {start_factor = 0.5, total_iters = 2}),
                                     S.StepLR(opt2, {step_size = 2})}, {milestones = {2}})
    opt2:load_state_dict(opt:state_dict())   -- after building the scheduler, which resets the lr
    s2:load_state_dict(sd)
    for _ = 1, 4 do
      s:step()
      s2:step()
      H.close(s2:get_last_lr(), s:get_last_lr(), 1e-15)
    end
  end)
end)
