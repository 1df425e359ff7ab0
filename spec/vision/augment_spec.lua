-- vision.data: timm's Mixup/CutMix, RandomErasing, AutoAugment, RandAugment,
-- AugMix and the soft-target losses -- closed forms, config parsing and
-- reproducibility with manual_seed.
local flow = require 'oneflow'
local vision = require 'flowvision'
local H = require 'spec.helpers'

local D = vision.data
local TF = vision.transforms.functional
local F = flow.nn.functional

local function same(a, b) return a:eq(b):all():item() end

local function ramp_image(c, h, w)
  return (flow.arange(c * h * w):float():view(c, h, w) * 7):remainder(256):byte()
end

describe('data: Mixup and CutMix', function()
  local x0 = flow.rand(4, 3, 8, 8)
  local y = flow.tensor({1, 3, 2, 5}, {dtype = flow.int64})

  it('mixup_target and one_hot (1-based labels, label smoothing)', function()
    H.close(D.one_hot(flow.tensor({2, 1}, {dtype = flow.int64}), 3), {{0, 1, 0}, {1, 0, 0}})
    local t = D.mixup_target(flow.tensor({1, 2}, {dtype = flow.int64}), 4, 0.7, 0.2)
    -- on = 1 - 0.2 + 0.05, off = 0.05; row 1 pairs label 1 with label 2
    H.close(t, {{0.7 * 0.85 + 0.3 * 0.05, 0.7 * 0.05 + 0.3 * 0.85, 0.05, 0.05},
                {0.7 * 0.05 + 0.3 * 0.85, 0.7 * 0.85 + 0.3 * 0.05, 0.05, 0.05}}, 1e-6)
    H.raises(function() D.one_hot(flow.tensor({0, 1}, {dtype = flow.int64}), 3) end,
             'class indices in 1..3 (1-based)', 'got 0..1')
  end)

  it("'batch' mixup mixes with the flipped batch by the lambda of the targets", function()
    flow.manual_seed(0)
    local m = D.Mixup{mixup_alpha = 0.8, cutmix_alpha = 0, num_classes = 5, label_smoothing = 0}
    local x, t = m(x0:clone(), y)
    local lam = t[1][1]:item()   -- row 1 is lam * onehot(1) + (1 - lam) * onehot(5)
    H.close(t[1][5], 1 - lam, 1e-6)
    H.close(x, x0 * lam + x0:flip(1) * (1 - lam), 1e-5)
    H.close(t:sum(2), {1, 1, 1, 1}, 1e-6)
  end)

  it("'batch' cutmix pastes a box; lambda is the kept area", function()
    flow.manual_seed(1)
    local m = D.Mixup{mixup_alpha = 0, cutmix_alpha = 1.0, num_classes = 5, label_smoothing = 0}
    local x, t = m(x0:clone(), y)
    local lam = t[1][1]:item()
    local from_flip = x:eq(x0:flip(1)):logical_and(x:ne(x0))[1][1]:float():sum():item()
    H.close(from_flip / 64, 1 - lam, 1e-6)
    local same_px = x:eq(x0):logical_or(x:eq(x0:flip(1))):all():item()
    assert.is_true(same_px)
    local b, l = D.cutmix_bbox_and_lam({8, 8}, 0.75, {0.25, 0.5})
    assert.is_true(b[2] - b[1] >= 2 and b[2] - b[1] < 4)
    H.close(l, 1 - (b[2] - b[1]) * (b[4] - b[3]) / 64)
  end)

  it("'pair' and 'elem' modes give per-sample lambdas; switch_prob picks cutmix", function()
    for _, mode in ipairs({'pair', 'elem'}) do
      flow.manual_seed(2)
      local m = D.Mixup{mixup_alpha = 0.8, cutmix_alpha = 1.0, num_classes = 5, mode = mode, label_smoothing = 0.1}
      local x, t = m(x0:clone(), y)
      assert.are.same({4, 3, 8, 8}, H.shape(x))
      assert.are.same({4, 5}, H.shape(t))
      H.close(t:sum(2), {1, 1, 1, 1}, 1e-5)
      if mode == 'pair' then   -- pairs (1, 4), (2, 3) share lambda
        H.close(t[1][1], t[4][5], 1e-6)
        H.close(t[2][3], t[3][2], 1e-6)
      end
      flow.manual_seed(2)
      local x2, t2 = m(x0:clone(), y)
      assert.is_true(same(x, x2) and same(t, t2))
    end
    local off = D.Mixup{mixup_alpha = 1, prob = 0, num_classes = 5, label_smoothing = 0.1}
    local x, t = off(x0:clone(), y)
    assert.is_true(same(x, x0))
    H.close(t[2], {0.02, 0.02, 0.92, 0.02, 0.02}, 1e-6)
    local cm = D.CutMix{num_classes = 5}
    assert.are.equal(0, cm.mixup_alpha)
  end)

  it('rejects bad input clearly', function()
    local m = D.Mixup{num_classes = 5}
    H.raises(function() m(flow.rand(3, 3, 4, 4), flow.tensor({1, 2, 3}, {dtype = flow.int64})) end,
             'batch size should be even, got 3')
    H.raises(function() m(flow.rand(2, 4, 4), y) end, 'Mixup: expected images [N, C, H, W]')
    H.raises(function() D.Mixup{mixup_alpha = 0, cutmix_alpha = 0} end, 'one of mixup_alpha > 0')
    H.raises(function() D.Mixup{mode = 'all'} end, "mode must be 'batch', 'pair' or 'elem'")
  end)

  it('draws Beta and Dirichlet variates with the right means', function()
    flow.manual_seed(4)
    local s, n = 0, 2000
    for _ = 1, n do s = s + D.random.beta(2, 6) end
    H.close(s / n, 0.25, 0.03)
    local g = 0
    for _ = 1, n do g = g + D.random.gamma(0.5) end
    H.close(g / n, 0.5, 0.08)
    local w = D.random.dirichlet({1, 1, 1})
    H.close(w[1] + w[2] + w[3], 1, 1e-12)
  end)
end)

describe('data: RandomErasing (timm)', function()
  it("'const' erases one box to zero; 'pixel' draws noise; num_splits keeps a clean part", function()
    flow.manual_seed(0)
    local x = flow.ones(3, 16, 16)
    D.RandomErasing{probability = 1, mode = 'const'}(x)
    local zeros = x:eq(0):float():sum():item()
    assert.is_true(zeros > 0 and zeros % 3 == 0)
    local mask = x[1]:eq(0):float()
    local rows, cols = mask:sum(2):gt(0):float():sum():item(), mask:sum(1):gt(0):float():sum():item()
    H.close(mask:sum():item(), rows * cols)   -- one rectangle
    local b = flow.ones(4, 3, 8, 8)
    flow.manual_seed(1)
    D.RandomErasing{probability = 1, mode = 'pixel', num_splits = 2, max_count = 3}(b)
    assert.is_true(same(b:narrow(1, 1, 2), flow.ones(2, 3, 8, 8)))
    assert.is_false(same(b:narrow(1, 3, 2), flow.ones(2, 3, 8, 8)))
    local c = flow.ones(3, 8, 8)
    D.RandomErasing{probability = 0}(c)
    assert.is_true(same(c, flow.ones(3, 8, 8)))
    H.raises(function() D.RandomErasing{mode = 'noise'} end, "mode must be 'const', 'rand' or 'pixel'")
    H.raises(function() D.RandomErasing{}(flow.ones(3, 4, 4, {dtype = flow.uint8})) end, 'expected a float')
  end)
end)

describe('data: AutoAugment, RandAugment, AugMix', function()
  local u8 = ramp_image(3, 16, 16)

  it('parses timm config strings', function()
    local ra = D.RandAugment('rand-m9-mstd0.5')
    assert.are.equal(2, ra.num_layers)
    assert.are.equal(15, #ra.ops)
    assert.are.equal(9, ra.ops[1].magnitude)
    assert.are.equal(0.5, ra.ops[1].magnitude_std)
    assert.are.equal(0.5, ra.ops[1].prob)
    local inc = D.RandAugment('rand-m7-n3-mstd101-mmax12-inc1-w0')
    assert.are.equal(3, inc.num_layers)
    assert.are.equal('PosterizeIncreasing', inc.ops[5].name)
    assert.are.equal(math.huge, inc.ops[1].magnitude_std)
    assert.are.equal(12, inc.ops[1].magnitude_max)
    H.close(inc.choice_weights[4], 0.3 / 1.0, 1e-9)   -- Rotate: 0.3 of a total of 1
    assert.are.equal('Posterize', D.RandAugment('rand-m9-inc0').ops[5].name)
    local am = D.AugMix('augmix-m5-w4-d-1-a0.5')
    assert.are.equal(4, am.width)
    assert.are.equal(-1, am.depth)
    assert.are.equal(0.5, am.alpha)
    assert.are.equal(math.huge, am.ops[1].magnitude_std)
    assert.are.equal(1.0, am.ops[1].prob)
    local aa = D.AutoAugment('original-mstd0.5')
    assert.are.equal(25, #aa.policy)
    assert.are.equal('PosterizeOriginal', aa.policy[1][1].name)
    assert.are.equal('PosterizeIncreasing', D.AutoAugment('originalr').policy[1][1].name)
    H.raises(function() D.RandAugment('rand-x9') end, "unknown config section 'x9'")
    H.raises(function() D.RandAugment('auto-m9') end, "config must start with 'rand'")
    H.raises(function() D.AutoAugment('v9') end, "unknown policy 'v9'")
    H.raises(function() D.AugmentOp('Blur') end, "unknown op 'Blur'")
  end)

  it('ops follow timm levels: closed forms', function()
    local hp = {interpolation = 'nearest', img_mean = {0, 0, 0}}
    H.close(D.AugmentOp('Invert', 1, 5, hp)(u8), TF.invert(u8))
    -- Solarize at m = 5: threshold int(5 / 10 * 256) = 128
    H.close(D.AugmentOp('Solarize', 1, 5, hp)(u8), TF.solarize(u8, 128))
    -- SolarizeAdd at m = 10: +110 below 128
    local sa = D.AugmentOp('SolarizeAdd', 1, 10, hp)(u8):int()
    local want = flow.where(u8:lt(128), (u8:int() + 110):clamp(0, 255), u8:int())
    assert.is_true(same(sa, want))
    -- PosterizeOriginal at m = 8: int(8 / 10 * 4) + 4 = 7 bits
    H.close(D.AugmentOp('PosterizeOriginal', 1, 8, hp)(u8), TF.posterize(u8, 7))
    -- TranslateX at m = 10 with translate_const 2: +-2 pixels, nearest, zero fill
    flow.manual_seed(3)
    local tx = D.AugmentOp('TranslateX', 1, 10, {translate_const = 2, interpolation = 'nearest',
                                                 img_mean = {0, 0, 0}})(u8)
    local left = flow.cat({u8:narrow(3, 3, 14), flow.zeros(3, 16, 2, {dtype = flow.uint8})}, 3)
    local right = flow.cat({flow.zeros(3, 16, 2, {dtype = flow.uint8}), u8:narrow(3, 1, 14)}, 3)
    assert.is_true(same(tx, left) or same(tx, right))
    -- Rotate at m = 5 is +-15 degrees
    flow.manual_seed(3)
    local rot = D.AugmentOp('Rotate', 1, 5, hp)
    local deg = rot:level_args()
    H.close(math.abs(deg), 15)
    -- ColorIncreasing at m = 10: factor 1 +- 0.9
    local f = D.AugmentOp('ColorIncreasing', 1, 10, hp):level_args()
    assert.is_true(math.abs(f - 1.9) < 1e-12 or math.abs(f - 0.1) < 1e-12)
    -- magnitude noise is clipped to [0, magnitude_max]
    local noisy = D.AugmentOp('Color', 1, 10, {magnitude_std = 100})
    for _ = 1, 20 do
      local v = noisy:level_args()
      assert.is_true(v >= 0.1 - 1e-12 and v <= 1.9 + 1e-12)
    end
  end)

  it('keep dtype and shape on uint8 and float images, reproducibly', function()
    local fl = u8:float() / 255
    for _, aug in ipairs({D.RandAugment('rand-m9-mstd0.5-inc1'), D.AutoAugment('original'),
                          D.AugMix('augmix-m3-w3-d2')}) do
      for _ = 1, 4 do
        local a, b = aug(u8), aug(fl)
        assert.are.equal(flow.uint8, a.dtype)
        assert.are.equal(flow.float32, b.dtype)
        assert.are.same({3, 16, 16}, H.shape(a))
        assert.is_true(b:min():item() >= 0 and b:max():item() <= 1)
      end
      flow.manual_seed(12)
      local r1 = aug(u8)
      flow.manual_seed(12)
      assert.is_true(same(r1, aug(u8)))
    end
    for name in pairs(D.NAMES) do
      local op = D.AugmentOp(name, 1.0, 9)
      assert.are.equal(flow.uint8, op(u8).dtype, name)
      assert.are.equal(flow.float32, op(fl).dtype, name)
    end
  end)
end)

describe('data: losses', function()
  it('SoftTargetCrossEntropy and LabelSmoothingCrossEntropy match cross_entropy', function()
    flow.manual_seed(0)
    local x = flow.randn(4, 5, {requires_grad = true})
    local y = flow.tensor({1, 5, 2, 2}, {dtype = flow.int64})
    local soft = D.SoftTargetCrossEntropy()(x, D.one_hot(y, 5))
    H.close(soft, F.cross_entropy(x, y), 1e-5)
    local ls = D.LabelSmoothingCrossEntropy({smoothing = 0.1})(x, y)
    H.close(ls, F.cross_entropy(x, y, {label_smoothing = 0.1}), 1e-5)
    local _, t = D.Mixup{mixup_alpha = 1, num_classes = 5}(flow.rand(4, 3, 2, 2), y)
    local loss = D.SoftTargetCrossEntropy()(x, t)
    loss:backward()
    assert.are.same({4, 5}, H.shape(x.grad))
    H.raises(function() D.SoftTargetCrossEntropy()(x, flow.zeros(4, 3)) end, 'does not match the logits')
  end)
end)
