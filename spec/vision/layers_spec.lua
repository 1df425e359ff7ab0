-- vision.layers: timm's parameter names, forward shapes, closed forms,
-- train/eval behaviour of the drop layers, and gradchecks in float64.
local flow = require 'oneflow'
local vision = require 'flowvision'
local H = require 'spec.helpers'

local L = vision.layers
local nn = flow.nn
local gradcheck = flow.autograd.gradcheck

local function keys(m)
  local r = {}
  for k in pairs(m:state_dict()) do r[#r + 1] = k end
  table.sort(r)
  return r
end

describe('layers: attention blocks', function()
  local x = flow.randn(2, 32, 5, 6)

  it('SEModule: timm names, make_divisible, gate of zero weights is one half', function()
    local se = L.SEModule(32)
    assert.are.same({'fc1.bias', 'fc1.weight', 'fc2.bias', 'fc2.weight'}, keys(se))
    assert.are.same({8, 32, 1, 1}, H.shape(se.fc1.weight))   -- make_divisible(2, 8) = 8
    assert.are.same({4, 32, 1, 1}, H.shape(L.SEModule(32, {rd_ratio = 1 / 8, rd_divisor = 4}).fc1.weight))
    flow.no_grad(function() se.fc2.weight:zero_(); se.fc2.bias:zero_() end)
    H.close(se(x), x * 0.5, 1e-6)
    assert.are.equal(L.SqueezeExcite, L.SEModule)
  end)

  it('EcaModule: adaptive kernel size, shape', function()
    assert.are.equal(3, L.EcaModule(64).kernel_size)    -- int(|6 + 1| / 2) = 3
    assert.are.equal(5, L.EcaModule(256).kernel_size)   -- int(9 / 2) = 4 -> 5
    local eca = L.EcaModule(32)
    assert.are.same({'conv.weight'}, keys(eca))
    assert.are.same({2, 32, 5, 6}, H.shape(eca(x)))
  end)

  it('CbamModule and BAM: names and shapes', function()
    local cbam = L.CbamModule(32)
    assert.are.same({'channel.fc1.weight', 'channel.fc2.weight', 'spatial.conv.bn.bias',
                     'spatial.conv.bn.num_batches_tracked', 'spatial.conv.bn.running_mean',
                     'spatial.conv.bn.running_var', 'spatial.conv.bn.weight', 'spatial.conv.conv.weight'},
                    keys(cbam))
    assert.are.same({1, 2, 7, 7}, H.shape(cbam.spatial.conv.conv.weight))
    assert.are.same({2, 32, 5, 6}, H.shape(cbam(x)))
    local bam = L.BAM(32)
    local k = keys(bam)
    assert.are.equal('channel_att.gate_c.gate_c_bn_1.bias', k[1])
    assert.are.same({2, 32}, H.shape(bam.channel_att.gate_c.gate_c_fc_0.weight))
    assert.are.same({2, 32, 5, 6}, H.shape(bam(x)))
    H.raises(function() L.BAM(8) end, 'BAM: gate_channel 8 is smaller than reduction_ratio 16')
    H.raises(function() cbam(flow.randn(32, 5)) end, 'CbamModule: expected input [B, C, H, W]')
  end)

  it('NonLocalAttn is the identity at init (zero norm), attends otherwise', function()
    local nl = L.NonLocalAttn(32)
    assert.are.same({8, 32, 1, 1}, H.shape(nl.t.weight))
    nl:eval()
    H.close(nl(x), x, 1e-6)
    flow.no_grad(function() nl.norm.weight:fill_(1) end)
    assert.is_false(nl(x):eq(x):all():item())
  end)

  it('gradcheck SEModule, EcaModule and CbamModule in float64', function()
    flow.manual_seed(0)
    local xi = flow.randn(2, 8, 3, 3, {dtype = flow.float64, requires_grad = true})
    for _, m in ipairs({L.SEModule(8, {rd_channels = 2}), L.EcaModule(8),
                        L.CbamModule(8, {rd_channels = 2, spatial_kernel_size = 3})}) do
      m:double():eval()
      assert.is_true(gradcheck(function(t) return m(t) end, {xi}))
    end
  end)
end)

describe('layers: DropPath and DropBlock2d', function()
  it('DropPath: identity in eval or at p = 0, else whole samples zeroed or scaled', function()
    local x = flow.ones(200, 3, 2)
    local dp = L.DropPath(0.5)
    dp:eval()
    assert.are.equal(x, dp(x))
    dp:train()
    assert.are.equal(x, L.DropPath(0)(x))
    flow.manual_seed(0)
    local y = dp(x)
    local per = y:sum({2, 3}) / 6
    assert.is_true(per:eq(0):logical_or(per:eq(2)):all():item())
    local kept = per:eq(2):float():mean():item()
    assert.is_true(kept > 0.35 and kept < 0.65)
    local raw = L.DropPath(0.5, {scale_by_keep = false})(x):sum({2, 3}) / 6
    assert.is_true(raw:eq(0):logical_or(raw:eq(1)):all():item())
    local g = flow.ones(4, 2, {dtype = flow.float64, requires_grad = true})
    flow.manual_seed(1)
    local out = L.drop_path(g, 0.5, true)
    out:sum():backward()
    flow.manual_seed(1)
    H.close(g.grad, L.drop_path(flow.ones(4, 2, {dtype = flow.float64}), 0.5, true))
  end)

  it('DropBlock2d: timm gamma, identity in eval, blocks of zeros in training', function()
    -- gamma = p * H * W / b^2 / ((W - b + 1) (H - b + 1))
    H.close(L.drop_block_gamma(0.1, 3, 8, 8), 0.1 * 64 / 9 / 36, 1e-12)
    local db = L.DropBlock2d(0.2, 3)
    local x = flow.ones(2, 4, 8, 8)
    db:eval()
    assert.are.equal(x, db(x))
    db:train()
    flow.manual_seed(0)
    local y = db(x)
    local zero = y:eq(0)
    local scale = y:max():item()
    assert.is_true(zero:any():item())
    H.close(scale, 128 * 4 / (128 * 4 - zero:float():sum():item()), 1e-5)
    assert.is_true(zero:logical_or(y:eq(scale)):all():item())
    flow.manual_seed(0)
    local exact = L.DropBlock2d{drop_prob = 0.2, block_size = 3, fast = false}(x)
    assert.are.same({2, 4, 8, 8}, H.shape(exact))
    assert.are.equal(x, L.DropBlock2d(0, 3)(x))
  end)
end)

describe('layers: ConvBnAct, PatchEmbed, pooling, init', function()
  it('ConvNormAct: timm names, same padding, stride', function()
    local c = L.ConvBnAct(3, 8, 3, {stride = 2})
    assert.are.same({'bn.bias', 'bn.num_batches_tracked', 'bn.running_mean', 'bn.running_var', 'bn.weight',
                     'conv.weight'}, keys(c))
    assert.are.same({2, 8, 4, 5}, H.shape(c(flow.randn(2, 3, 8, 9))))
    local y = L.ConvNormAct(3, 8, 1)(flow.randn(2, 3, 4, 4))
    assert.is_true(y:min():item() >= 0)   -- ReLU by default
    local lin = L.ConvNormAct(3, 8, 1, {apply_act = false, norm_layer = false, bias = true})
    assert.are.same({'conv.bias', 'conv.weight'}, keys(lin))
  end)

  it('PatchEmbed: timm names and the token layout', function()
    local pe = L.PatchEmbed{img_size = 32, patch_size = 8, in_chans = 3, embed_dim = 24, norm_layer = nn.LayerNorm}
    assert.are.same({'norm.bias', 'norm.weight', 'proj.bias', 'proj.weight'}, keys(pe))
    assert.are.equal(16, pe.num_patches)
    local x = flow.randn(2, 3, 32, 32)
    assert.are.same({2, 16, 24}, H.shape(pe(x)))
    local raw = L.PatchEmbed{img_size = 32, patch_size = 8, embed_dim = 24, flatten = false}
    assert.are.same({2, 24, 4, 4}, H.shape(raw(x)))
    H.raises(function() pe(flow.randn(1, 3, 16, 16)) end, "input image size (16x16) doesn't match model (32x32)")
  end)

  it('SelectAdaptivePool2d: avg, max, avgmax, catavgmax', function()
    local x = flow.tensor({{{{1, 2}, {3, 6}}}})
    H.close(L.SelectAdaptivePool2d{pool_type = 'avg', flatten = true}(x), {{3}})
    H.close(L.SelectAdaptivePool2d{pool_type = 'max', flatten = true}(x), {{6}})
    H.close(L.SelectAdaptivePool2d{pool_type = 'avgmax', flatten = true}(x), {{4.5}})
    H.close(L.Pooler{pool_type = 'catavgmax', flatten = true}(x), {{3, 6}})
    H.close(L.SelectAdaptivePool2d{pool_type = 'fast'}(x), {{{{3}}}})
    assert.are.equal(2, L.Pooler{pool_type = 'catavgmax'}:feat_mult())
    assert.is_true(L.Pooler{pool_type = ''}:is_identity())
    H.raises(function() L.Pooler{pool_type = 'min'} end, "pool_type must be")
  end)

  it('weight init helpers and make_divisible', function()
    flow.manual_seed(0)
    local w = flow.empty(256, 64)
    L.lecun_normal_(w)
    H.close(w:std():item(), math.sqrt(1 / 64), 0.05)
    L.trunc_normal_(w, {std = 0.02, a = -0.04, b = 0.04})   -- timm: a, b in absolute units
    assert.is_true(w:abs():max():item() <= 0.04 + 1e-6)
    H.close(w:std():item(), 0.02 * 0.8796, 0.05)
    L.trunc_normal_tf_(w, {mean = 1, std = 0.5})
    assert.is_true(w:min():item() >= 0 - 1e-6 and w:max():item() <= 2 + 1e-6)
    L.variance_scaling_(w, {mode = 'fan_avg', distribution = 'uniform'})
    assert.is_true(w:abs():max():item() <= math.sqrt(3 / 160) + 1e-6)
    assert.are.equal(8, L.make_divisible(2, 8, nil, 0))
    assert.are.equal(32, L.make_divisible(30, 8))
    assert.are.equal(24, L.make_divisible(20, 8))   -- 16 < 0.9 * 20, so one more step
  end)
end)
