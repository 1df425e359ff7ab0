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

describe('nn.TransformerDecoderLayer, nn.TransformerDecoder and nn.Transformer', function()
  -- Weights set the same way in torch: the i-th state_dict key in sorted order
  -- (i from 1) gets 0.3 * sin(0.7 * arange(numel) + i), reshaped.
  local function fill(m)
    local sd = m:state_dict()
    local keys = {}
    for k in pairs(sd) do keys[#keys + 1] = k end
    table.sort(keys)
    local new = {}
    for i, k in ipairs(keys) do
      local t = sd[k]
      new[k] = (flow.arange(0, t:numel(), 1, f64) * 0.7 + i):sin():mul(0.3):reshape(t:size())
    end
    m:load_state_dict(new)
    return m
  end
  -- f(a * arange(numel)).reshape(shape), f = sin or cos
  local function wave(shape, a, f)
    local n = 1
    for _, d in ipairs(shape) do n = n * d end
    local t = flow.arange(0, n, 1, f64) * a
    return (f == 'cos' and t:cos() or t:sin()):reshape(shape)
  end
  -- sum, sum of squares, first three and last element of y
  local function summary(y)
    local fl = y:reshape(-1):totable()
    return {y:sum():item(), (y * y):sum():item(), fl[1], fl[2], fl[3], fl[#fl]}
  end

  it('has torch state_dict keys', function()
    local m = nn.Transformer({d_model = 8, nhead = 2, num_encoder_layers = 1, num_decoder_layers = 1,
                              dim_feedforward = 16})
    local keys = {}
    for k in pairs(m:state_dict()) do keys[#keys + 1] = k end
    table.sort(keys)
    local want = {}
    for _, p in ipairs({'linear1.bias', 'linear1.weight', 'linear2.bias', 'linear2.weight',
                        'multihead_attn.in_proj_bias', 'multihead_attn.in_proj_weight',
                        'multihead_attn.out_proj.bias', 'multihead_attn.out_proj.weight',
                        'norm1.bias', 'norm1.weight', 'norm2.bias', 'norm2.weight', 'norm3.bias', 'norm3.weight',
                        'self_attn.in_proj_bias', 'self_attn.in_proj_weight', 'self_attn.out_proj.bias',
                        'self_attn.out_proj.weight'}) do
      want[#want + 1] = 'decoder.layers.0.' .. p
    end
    want[#want + 1] = 'decoder.norm.bias'
    want[#want + 1] = 'decoder.norm.weight'
    for _, p in ipairs({'linear1.bias', 'linear1.weight', 'linear2.bias', 'linear2.weight',
                        'norm1.bias', 'norm1.weight', 'norm2.bias', 'norm2.weight',
                        'self_attn.in_proj_bias', 'self_attn.in_proj_weight', 'self_attn.out_proj.bias',
                        'self_attn.out_proj.weight'}) do
      want[#want + 1] = 'encoder.layers.0.' .. p
    end
    want[#want + 1] = 'encoder.norm.bias'
    want[#want + 1] = 'encoder.norm.weight'
    -- torch: sorted(nn.Transformer(8, 2, 1, 1, 16).state_dict().keys())
    assert.same(want, keys)
    -- xavier_uniform_ on every matrix: |w| <= sqrt(6 / (16 + 8)) for linear1
    assert.is_true(m.encoder.layers[1].linear1.weight:abs():max():item() <= 0.5)
    H.close(m.decoder.layers[1].norm3.weight, flow.ones(8))
  end)

  it('generate_square_subsequent_mask', function()
    local inf = -math.huge
    H.close(nn.Transformer.generate_square_subsequent_mask(3), {{0, inf, inf}, {0, 0, inf}, {0, 0, 0}})
    local m = nn.Transformer({d_model = 4, nhead = 1, num_encoder_layers = 1, num_decoder_layers = 1})
    assert.equal(flow.float64, m:generate_square_subsequent_mask(2, {dtype = flow.float64}).dtype)
  end)

  it('matches torch in eval mode with every mask (post-norm, sequence first)', function()
    local m = fill(nn.Transformer({d_model = 8, nhead = 2, num_encoder_layers = 1, num_decoder_layers = 2,
                                   dim_feedforward = 16}):double())
    m:eval()
    local src, tgt = wave({5, 2, 8}, 0.3), wave({4, 2, 8}, 0.2, 'cos')
    local tm = nn.Transformer.generate_square_subsequent_mask(4, {dtype = flow.float64})
    local mm = flow.zeros(4, 5, {dtype = flow.bool})
    mm[1][2] = true; mm[3][1] = true; mm[4][5] = true
    local tk = flow.tensor({{false, false, false, false}, {false, false, false, true}})
    local mk = flow.tensor({{false, false, false, false, false}, {false, false, false, true, true}})
    local opts = {tgt_mask = tm, memory_mask = mm, tgt_key_padding_mask = tk, memory_key_padding_mask = mk,
                  src_key_padding_mask = mk}
    local y = m(src, tgt, opts)
    assert.same({4, 2, 8}, H.shape(y))
    -- torch 1.13, same weights (fill) and inputs, float64:
    -- m(src, tgt, tgt_mask=tm, memory_mask=mm, tgt_key_padding_mask=tk, memory_key_padding_mask=mk,
    --   src_key_padding_mask=mk)
    H.close(summary(y), {8.807812437359111, 5.454374591201633, -0.2237462330350831, -0.17710769565420018,
                         0.3625210185346227, 0.22841800725597833}, 1e-10)
    -- float32 within 1e-5
    local y32 = m:float()(src:float(), tgt:float(), {tgt_mask = tm:float(), memory_mask = mm,
      tgt_key_padding_mask = tk, memory_key_padding_mask = mk, src_key_padding_mask = mk})
    H.close(y32, y, 1e-5)
  end)

  it('matches torch with norm_first, batch_first, gelu, and unbatched', function()
    local m = fill(nn.Transformer({d_model = 8, nhead = 4, num_encoder_layers = 2, num_decoder_layers = 1,
                                   dim_feedforward = 12, activation = 'gelu', batch_first = true,
                                   norm_first = true, layer_norm_eps = 1e-6}):double())
    m:eval()
    local y = m(wave({2, 5, 8}, 0.3), wave({2, 3, 8}, 0.2, 'cos'),
                {tgt_mask = nn.Transformer.generate_square_subsequent_mask(3, {dtype = flow.float64})})
    assert.same({2, 3, 8}, H.shape(y))
    -- torch 1.13: same model (batch_first=True, norm_first=True, activation='gelu', layer_norm_eps=1e-6)
    H.close(summary(y), {3.0104879928479074, 3.922972258849316, 0.057715047434407, 0.6083999491662638,
                         0.26831288578636464, -0.38407719290471476}, 1e-10)
    local yu = m(wave({5, 8}, 0.3), wave({3, 8}, 0.2, 'cos'))
    assert.same({3, 8}, H.shape(yu))
    H.close(summary(yu), {1.5331253101912878, 1.968631922788754, 0.09177509809371061, 0.6262497478864948,
                          0.27562950872953546, -0.4330814536796431}, 1e-10)
  end)

  it('TransformerDecoder alone matches torch', function()
    local layer = nn.TransformerDecoderLayer(8, 2, {dim_feedforward = 16}):double()
    local d = fill(nn.TransformerDecoder(layer, 2, {norm = nn.LayerNorm(8)}):double())
    d:eval()
    local y = d(wave({4, 2, 8}, 0.2, 'cos'), wave({5, 2, 8}, 0.3),
                {tgt_mask = nn.Transformer.generate_square_subsequent_mask(4, {dtype = flow.float64})})
    -- torch 1.13: nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16), 2, norm=nn.LayerNorm(8))
    H.close(summary(y), {8.644762278466207, 5.2213316875987505, -0.25011790185300264, -0.11120854827448737,
                         0.3737043824423649, 0.24667056346737287}, 1e-10)
  end)

  it('takes custom_encoder and custom_decoder', function()
    local m = nn.Transformer({d_model = 4, nhead = 2, num_decoder_layers = 1, dim_feedforward = 6,
                              custom_encoder = nn.Identity()})
    m:eval()
    local n = 0
    for _ in pairs(m.encoder:state_dict()) do n = n + 1 end
    assert.equal(0, n)
    local src, tgt = flow.randn(5, 2, 4), flow.randn(3, 2, 4)
    H.close(m(src, tgt), m.decoder(tgt, src), 1e-6)
    local dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(4, 2, {dim_feedforward = 6}), 1)
    local m2 = nn.Transformer({d_model = 4, nhead = 2, num_encoder_layers = 1, custom_decoder = dec})
    assert.equal(dec, m2.decoder)
  end)

  it('has correct gradients and trains every parameter', function()
    local layer = nn.TransformerDecoderLayer(4, 2, {dim_feedforward = 6, dropout = 0, dtype = flow.float64})
    local tgt = wave({3, 2, 4}, 0.4):requires_grad_()
    local mem = wave({2, 2, 4}, 0.3, 'cos'):requires_grad_()
    local tm = nn.Transformer.generate_square_subsequent_mask(3, {dtype = flow.float64})
    assert.is_true(gradcheck(function(t, mm) return layer(t, mm, {tgt_mask = tm}) end, {tgt, mem}))
    local nf = nn.TransformerDecoderLayer(4, 2, {dim_feedforward = 6, dropout = 0, norm_first = true,
                                                 dtype = flow.float64})
    assert.is_true(gradcheck(function(t, mm) return nf(t, mm) end, {tgt, mem}))
    local m = nn.Transformer({d_model = 4, nhead = 2, num_encoder_layers = 1, num_decoder_layers = 1,
                              dim_feedforward = 6})
    m(flow.randn(5, 2, 4), flow.randn(3, 2, 4)):pow(2):sum():backward()
    for name, p in m:named_parameters() do
      assert(p.grad ~= nil and p.grad:abs():sum():item() > 0, name .. ' has no gradient')
    end
  end)

  it('raises errors naming the module and the shapes', function()
    local m = nn.Transformer({d_model = 4, nhead = 2, num_encoder_layers = 1, num_decoder_layers = 1,
                              dim_feedforward = 6})
    H.raises(function() m(flow.zeros(5, 2, 4), flow.zeros(3, 3, 4)) end, 'Transformer', 'batch', '[5,2,4]', '[3,3,4]')
    H.raises(function() m(flow.zeros(5, 2, 4), flow.zeros(3, 2, 6)) end, 'Transformer', 'd_model 4', '[3,2,6]')
    local layer = nn.TransformerDecoderLayer(4, 2)
    H.raises(function() layer(flow.zeros(3, 2, 4), flow.zeros(3, 4)) end, 'TransformerDecoderLayer', 'memory',
             '[3,4]', '[3,2,4]')
    H.raises(function() layer(flow.zeros(3, 2, 4)) end, 'TransformerDecoderLayer', 'memory')
    H.raises(function() nn.TransformerDecoderLayer(4, 2, {activation = 'tanh'}) end, 'TransformerDecoderLayer',
             'tanh')
    H.raises(function() nn.TransformerDecoder(layer, 0) end, 'TransformerDecoder', 'num_layers')
    H.raises(function() nn.Transformer({d_model = 6, nhead = 4}) end, 'divisible')
  end)
end)
