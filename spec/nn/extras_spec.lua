local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional

local gradcheck = flow.autograd.gradcheck
local f64 = {dtype = flow.float64}

-- sin(0), sin(1), ... in the given shape (float64): torch.arange(n).reshape(shape).sin()
local function sinx(...)
  local shape = {...}
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return flow.arange(0, n, 1, f64):reshape(shape):sin()
end

local function sum_sq(t) return t:sum():item(), (t * t):sum():item() end

describe('F.unfold / F.fold', function()
  it('unfold takes the sliding blocks as columns', function()
    local x = flow.arange(1, 17, 1, f64):reshape(1, 1, 4, 4)
    -- torch: F.unfold(torch.arange(1, 17.).reshape(1, 1, 4, 4), 2, stride=2)
    H.close(F.unfold(x, 2, {stride = 2}), {{{1, 3, 9, 11}, {2, 4, 10, 12}, {5, 7, 13, 15}, {6, 8, 14, 16}}})
    H.close(nn.Unfold(2, {stride = 2})(x), F.unfold(x, {2, 2}, 1, 0, 2))
  end)

  it('matches torch with dilation, padding and stride, batched and unbatched', function()
    local x = sinx(2, 3, 5, 6)
    x.requires_grad = true
    local u = F.unfold(x, {2, 3}, {dilation = {1, 2}, padding = {1, 0}, stride = {2, 1}})
    assert.same({2, 18, 6}, H.shape(u))
    -- torch: u = F.unfold(x, (2, 3), dilation=(1, 2), padding=(1, 0), stride=(2, 1)): u.sum(), (u*u).sum(), u[0][4][2]
    local s, ss = sum_sq(u)
    H.close({s, ss, u[1][5][3]:item()}, {1.8635570828959382, 89.52514905080146, 0.9906073556948704}, 1e-12)
    local w = flow.arange(0, u:numel(), 1, f64):reshape(u:size()):cos()
    ;(u * w):sum():backward()
    -- torch: (u * arange(u.numel()).reshape(u.shape).cos()).sum().backward(); x.grad.sum(), (x.grad**2).sum()
    H.close({sum_sq(x.grad)}, {-2.488546850129244, 89.87139077159947}, 1e-12)

    local xu = sinx(3, 5, 5)
    local uu = F.unfold(xu, {3, 2}, {dilation = {2, 1}, padding = 1, stride = {1, 2}})
    assert.same({18, 9}, H.shape(uu))
    H.close({sum_sq(uu)}, {-1.0937295887322547, 52.05848851973269}, 1e-12)
    local fu = F.fold(uu, {5, 5}, {3, 2}, {dilation = {2, 1}, padding = 1, stride = {1, 2}})
    assert.same({3, 5, 5}, H.shape(fu))
    -- torch: F.fold(uu, (5, 5), (3, 2), dilation=(2, 1), padding=1, stride=(1, 2))
    H.close({sum_sq(fu)}, {-1.0937295887322525, 81.0963317175737}, 1e-12)
  end)

  it('fold adds overlapping blocks: fold(unfold(x)) = x * overlap count', function()
    local count = F.fold(F.unfold(flow.ones(1, 1, 4, 4, f64), 3, {padding = 1}), {4, 4}, 3, {padding = 1})
    -- torch: F.fold(F.unfold(torch.ones(1, 1, 4, 4), 3, padding=1), (4, 4), 3, padding=1)
    H.close(count, {{{{4, 6, 6, 4}, {6, 9, 9, 6}, {6, 9, 9, 6}, {4, 6, 6, 4}}}})
    local x = sinx(2, 3, 6, 7)
    local opts = {dilation = {2, 1}, padding = {1, 2}, stride = 1}
    local back = nn.Fold({6, 7}, {2, 3}, opts)(nn.Unfold({2, 3}, opts)(x))
    local n = F.fold(F.unfold(flow.ones(1, 1, 6, 7, f64), {2, 3}, opts), {6, 7}, {2, 3}, opts)
    H.close(back, x * n, 1e-12)
  end)

  it('fold is the adjoint of unfold: <unfold(x), y> = <x, fold(y)>', function()
    local x, opts = sinx(1, 2, 5, 4), {dilation = 2, padding = 1, stride = {1, 2}}
    local u = F.unfold(x, 2, opts)
    local y = flow.arange(0, u:numel(), 1, f64):reshape(u:size()):cos()
    H.close((u * y):sum(), (x * F.fold(y, {5, 4}, 2, opts)):sum(), 1e-12)
  end)

  it('has correct gradients', function()
    local x = sinx(2, 2, 4, 5):requires_grad_()
    assert.is_true(gradcheck(function(a) return F.unfold(a, {2, 3}, {padding = 1, stride = {2, 1}}) end, {x}))
    local c = sinx(2, 2 * 4, 15):requires_grad_()
    assert.is_true(gradcheck(function(a) return F.fold(a, {4, 5}, 2, {padding = 1, stride = {1, 2}}) end, {c}))
    local cu = sinx(4, 20):requires_grad_()
    assert.is_true(gradcheck(function(a) return F.fold(a, {5, 6}, 2) end, {cu}))
  end)

  it('raises errors naming the op and the shapes', function()
    H.raises(function() F.unfold(flow.zeros(2, 3), 2) end, 'unfold', '[2,3]')
    H.raises(function() F.unfold(flow.zeros(1, 1, 2, 2), 3) end, 'unfold', 'too small')
    H.raises(function() F.unfold(flow.zeros(1, 1, 4, 4), {2, 2, 2}) end, 'unfold', 'kernel_size')
    H.raises(function() F.fold(flow.zeros(1, 5, 9), {4, 4}, 2) end, 'fold', 'divisible', '5')
    H.raises(function() F.fold(flow.zeros(1, 4, 8), {4, 4}, 2) end, 'fold', '3 * 3 = 9', '[1,4,8]')
    H.raises(function() F.fold(flow.zeros(4), {4, 4}, 2) end, 'fold', '[4]')
    H.raises(function() nn.Unfold() end, 'Unfold', 'kernel_size')
  end)
end)

describe('pixel_unshuffle, channel_shuffle, local_response_norm, Softmax2d, distances', function()
  local x = sinx(2, 8, 4, 6)

  it('PixelUnshuffle inverts PixelShuffle', function()
    local pu = nn.PixelUnshuffle(2)(x)
    assert.same({2, 32, 2, 3}, H.shape(pu))
    -- torch: nn.PixelUnshuffle(2)(x)[0][5].reshape(-1)[4]
    H.close(pu[1][6]:reshape(-1)[5], 0.9637953862840878, 1e-12)
    H.close(nn.PixelShuffle(2)(pu), x)
    assert.same({4, 3, 2}, H.shape(F.pixel_unshuffle(sinx(1, 6, 4), 2)))
    assert.is_true(gradcheck(function(a) return F.pixel_unshuffle(a, 3) end, {sinx(2, 6, 3):requires_grad_()}))
    H.raises(function() F.pixel_unshuffle(sinx(1, 5, 4), 2) end, 'pixel_unshuffle', '[1,5,4]', '2')
    assert.equal('PixelUnshuffle(downscale_factor=3)', tostring(nn.PixelUnshuffle(3)))
  end)

  it('ChannelShuffle', function()
    local y = nn.ChannelShuffle(4)(x)
    -- torch: nn.ChannelShuffle(4)(x)[1][2][1][3]
    H.close(y[2][3][2][4], 0.992869055025318, 1e-12)
    -- channels [0..5] in 2 groups -> 0, 3, 1, 4, 2, 5
    H.close(F.channel_shuffle(flow.arange(0, 6, 1, f64):reshape(1, 6, 1), 2):reshape(-1), {0, 3, 1, 4, 2, 5})
    assert.is_true(gradcheck(function(a) return F.channel_shuffle(a, 3) end, {sinx(2, 6, 2):requires_grad_()}))
    H.raises(function() F.channel_shuffle(x, 3) end, 'channel_shuffle', '8', '3')
    H.raises(function() F.channel_shuffle(sinx(2, 4), 2) end, 'channel_shuffle', '[2,4]')
  end)

  it('LocalResponseNorm matches torch', function()
    local l = nn.LocalResponseNorm(3, {alpha = 0.1, beta = 0.8, k = 2})(x * 3)
    -- torch: nn.LocalResponseNorm(3, alpha=0.1, beta=0.8, k=2)(x * 3): sum, sum of squares
    H.close({sum_sq(l)}, {-0.14782206552014687, 424.94072382765694}, 1e-12)
    local l3 = F.local_response_norm(x:select(4, 1) * 3, 4, {alpha = 0.3})
    -- torch: F.local_response_norm(x[..., 0] * 3, 4, alpha=0.3)
    H.close({sum_sq(l3)}, {-2.3355020810532094, 95.55566381346418}, 1e-12)
    assert.is_true(gradcheck(function(a) return F.local_response_norm(a, 3, {alpha = 0.5}) end,
                             {sinx(2, 5, 3):requires_grad_()}))
    H.raises(function() F.local_response_norm(sinx(2, 4), 2) end, 'local_response_norm', '[2,4]')
    assert.equal('LocalResponseNorm(2, alpha=0.0001, beta=0.75, k=1)', tostring(nn.LocalResponseNorm(2)))
  end)

  it('Softmax2d is a softmax over channels', function()
    -- torch: nn.Softmax2d()(x)[0][1][2][3]
    H.close(nn.Softmax2d()(x)[1][2][3][4], 0.21377973641706713, 1e-12)
    H.close(nn.Softmax2d()(x[1]), F.softmax(x[1], 1))
    H.raises(function() nn.Softmax2d()(sinx(2, 3)) end, 'Softmax2d', '[2,3]')
  end)

  it('CosineSimilarity and PairwiseDistance', function()
    local y = x:cos()
    -- torch: nn.CosineSimilarity()(x, y)[1][2][3], nn.PairwiseDistance()(x, y)[0][4][1]
    H.close(nn.CosineSimilarity()(x, y)[2][3][4], -0.25345179470510626, 1e-12)
    H.close(nn.PairwiseDistance()(x, y)[1][5][2], 2.649543005535958, 1e-12)
    assert.same({2, 4, 6}, H.shape(nn.CosineSimilarity({dim = 2})(x, y)))
    assert.same({2, 8, 4, 1}, H.shape(nn.PairwiseDistance({keepdim = true})(x, y)))
    local a, b = sinx(3, 4):requires_grad_(), sinx(3, 4):cos():requires_grad_()
    assert.is_true(gradcheck(function(p, q) return nn.CosineSimilarity({dim = 2})(p, q) end, {a, b}))
    assert.is_true(gradcheck(function(p, q) return nn.PairwiseDistance({p = 3})(p, q) end, {a, b}))
  end)
end)
