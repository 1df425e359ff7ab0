-- interpolate (nearest, linear, bilinear, trilinear) and pad (constant,
-- reflect, replicate, circular) against plain-Lua references, gradients.
local flow = require 'oneflow'
local F = require('oneflow').nn.functional
local H = require 'spec.helpers'

local gradcheck, gradgradcheck = flow.autograd.gradcheck, flow.autograd.gradgradcheck
local f64 = flow.float64
local function randn(shape) return flow.randn(shape, {dtype = f64, requires_grad = true}) end

-- a [H][W] Lua image of distinct values
local function image(h, w)
  local t = {}
  for i = 1, h do
    t[i] = {}
    for j = 1, w do t[i][j] = i * 10 + j + (i * j) % 3 * 0.25 end
  end
  return t
end

-- PyTorch's nearest source index (0-based): floor(dst * in / out), or the
-- given scale factor's reciprocal
local function nearest_src(o, n_in, n_out, sf)
  local scale = sf and 1 / sf or n_in / n_out
  return math.min(math.floor(o * scale), n_in - 1)
end

-- source coordinate and the two taps with weights for linear modes
local function linear_taps(o, n_in, n_out, align)
  local src
  if align then
    src = n_out > 1 and o * (n_in - 1) / (n_out - 1) or 0
  else
    src = math.max((o + 0.5) * n_in / n_out - 0.5, 0)
  end
  local i0 = math.floor(src)
  local i1 = math.min(i0 + 1, n_in - 1)
  local l1 = src - i0
  return i0, i1, 1 - l1, l1
end

local function bilinear_ref(img, oh, ow, align)
  local ih, iw = #img, #img[1]
  local out = {}
  for y = 0, oh - 1 do
    out[y + 1] = {}
    local y0, y1, wy0, wy1 = linear_taps(y, ih, oh, align)
    for x = 0, ow - 1 do
      local x0, x1, wx0, wx1 = linear_taps(x, iw, ow, align)
      out[y + 1][x + 1] = wy0 * (wx0 * img[y0 + 1][x0 + 1] + wx1 * img[y0 + 1][x1 + 1]) +
                          wy1 * (wx0 * img[y1 + 1][x0 + 1] + wx1 * img[y1 + 1][x1 + 1])
    end
  end
  return out
end

describe('interpolate', function()
  it('nearest follows floor(dst * in / out) for sizes and scale factors', function()
    local img = image(3, 5)
    local x = flow.tensor({{img}}, {dtype = f64})
    for _, case in ipairs({{size = {4, 7}}, {size = {2, 3}}, {scale_factor = 1.7}, {scale_factor = {2, 0.5}}}) do
      local y = F.interpolate(x, case)
      local sf = case.scale_factor
      local sfh, sfw = sf, sf
      if type(sf) == 'table' then sfh, sfw = sf[1], sf[2] end
      local oh = case.size and case.size[1] or math.floor(3 * sfh)
      local ow = case.size and case.size[2] or math.floor(5 * sfw)
      local want = {}
      for i = 0, oh - 1 do
        want[i + 1] = {}
        for j = 0, ow - 1 do
          want[i + 1][j + 1] = img[nearest_src(i, 3, oh, sfh) + 1][nearest_src(j, 5, ow, sfw) + 1]
        end
      end
      assert.are.same({1, 1, oh, ow}, H.shape(y))
      H.close(y, {{want}}, 0)
    end
  end)

  it('nearest keeps integer dtypes', function()
    local x = flow.tensor({{{1, 2}}}, {dtype = flow.uint8})
    local y = F.interpolate(x, {scale_factor = 2})
    assert.are.equal(flow.uint8, y.dtype)
    H.close(y, {{{1, 1, 2, 2}}}, 0)
  end)

  it('bilinear matches the reference with and without align_corners', function()
    local img = image(3, 4)
    local x = flow.tensor({{img, img}}, {dtype = f64})
    for _, align in ipairs({false, true}) do
      for _, sz in ipairs({{5, 7}, {2, 3}, {6, 8}, {1, 1}}) do
        local y = F.interpolate(x, {size = sz, mode = 'bilinear', align_corners = align})
        local r = bilinear_ref(img, sz[1], sz[2], align)
        H.close(y, {{r, r}}, 1e-12)
      end
    end
    -- the classic 2x2 -> 4x4 example
    local y = F.interpolate(flow.tensor({{{{1, 2}, {3, 4}}}}), {scale_factor = 2, mode = 'bilinear'})
    H.close(y[{1, 1, 1}], {1, 1.25, 1.75, 2})
    H.close(y[{1, 1, 2}], {1.5, 1.75, 2.25, 2.5})
  end)

  it('linear (3-d) and trilinear (5-d) are separable blends', function()
    local y = F.interpolate(flow.tensor({{{1, 3, 7}}}, {dtype = f64}), {size = 5, mode = 'linear',
                                                                       align_corners = true})
    H.close(y, {{{1, 2, 3, 5, 7}}}, 1e-12)
    -- trilinear of a function linear in each coordinate reproduces it (align_corners)
    local v = {}
    for d = 1, 2 do
      v[d] = {}
      for h = 1, 3 do
        v[d][h] = {}
        for w = 1, 2 do v[d][h][w] = d + 2 * h + 3 * w end
      end
    end
    local z = F.interpolate(flow.tensor({{v}}, {dtype = f64}), {size = {3, 5, 3}, mode = 'trilinear',
                                                                  align_corners = true})
    local want = {}
    for d = 1, 3 do
      want[d] = {}
      for h = 1, 5 do
        want[d][h] = {}
        for w = 1, 3 do want[d][h][w] = (1 + (d - 1) / 2) + 2 * (1 + (h - 1) / 2) + 3 * (1 + (w - 1) / 2) end
      end
    end
    H.close(z, {{want}}, 1e-12)
  end)

  it('has gradients (and is linear, so exact second derivatives)', function()
    local x = randn({2, 2, 3, 4})
    assert.is_true(gradcheck(function(a) return F.interpolate(a, {size = {5, 7}, mode = 'bilinear'}) end, {x}))
    assert.is_true(gradcheck(function(a)
      return F.interpolate(a, {size = {2, 6}, mode = 'bilinear', align_corners = true})
    end, {x}))
    assert.is_true(gradcheck(function(a) return F.interpolate(a, {scale_factor = 1.5}) end, {x}))
    assert.is_true(gradcheck(function(a) return F.interpolate(a, {size = 2}) end, {x}))
    assert.is_true(gradcheck(function(a) return F.interpolate(a, {size = 7, mode = 'linear'}) end,
                             {randn({1, 2, 3})}))
    assert.is_true(gradcheck(function(a)
      return F.interpolate(a, {size = {3, 2, 5}, mode = 'trilinear'})
    end, {randn({1, 1, 2, 3, 3})}))
    assert.is_true(gradgradcheck(function(a)
      return F.interpolate(a, {size = {3, 5}, mode = 'bilinear'}) * a:sum()
    end, {randn({1, 1, 2, 3})}))
    assert.are.equal('UpsampleLinearBackward',
                     F.interpolate(x, {size = {3, 3}, mode = 'bilinear'}).grad_fn:name())
  end)

  it('reports bad arguments', function()
    local x = flow.randn({1, 1, 2, 2})
    H.raises(function() F.interpolate(x, {size = 3, mode = 'linear'}) end, "mode 'linear'", '3-d')
    H.raises(function() F.interpolate(x, {size = 3, mode = 'bicubic'}) end, 'unsupported mode')
    H.raises(function() F.interpolate(x, {}) end, 'exactly one of size and scale_factor')
    H.raises(function() F.interpolate(x, {size = 3, align_corners = true}) end, 'align_corners')
    H.raises(function() F.interpolate(x, {size = {3, 0}}) end, 'interpolate', 'greater than 0')
    H.raises(function() F.interpolate(flow.randn({2, 2}), {size = 3}) end, '3-d, 4-d or 5-d')
    H.raises(function() F.interpolate(flow.ones({1, 1, 2}, {dtype = flow.int64}),
                                      {size = 3, mode = 'linear'}) end, 'floating point', 'int64')
  end)
end)

-- source index (0-based) of output o for pad mode, or nil (constant)
local function pad_src(o, n, left, mode)
  local i = o - left
  if mode == 'reflect' then
    if i < 0 then i = -i end
    if i >= n then i = 2 * (n - 1) - i end
  elseif mode == 'replicate' then
    i = math.max(0, math.min(n - 1, i))
  elseif mode == 'circular' then
    i = i % n
  elseif i < 0 or i >= n then
    return nil
  end
  return i
end

local function pad2d_ref(img, p, mode, value)
  local h, w = #img, #img[1]
  local out = {}
  for y = 0, h + p[3] + p[4] - 1 do
    out[y + 1] = {}
    for x = 0, w + p[1] + p[2] - 1 do
      local sy, sx = pad_src(y, h, p[3], mode), pad_src(x, w, p[1], mode)
      out[y + 1][x + 1] = (sy and sx) and img[sy + 1][sx + 1] or value
    end
  end
  return out
end

describe('pad', function()
  local img = image(3, 4)
  local x = flow.tensor({{img}}, {dtype = f64})

  it('pads the last two dims in each mode (last dim first)', function()
    for _, case in ipairs({{'constant', {1, 2, 0, 1}}, {'constant', {-1, 1, 2, -1}},
                           {'reflect', {3, 1, 2, 2}}, {'replicate', {2, 0, 1, 3}},
                           {'circular', {4, 1, 3, 2}}}) do
      local mode, p = case[1], case[2]
      local y = F.pad(x, p, mode == 'constant' and {value = -7} or {mode = mode})
      H.close(y, {{pad2d_ref(img, p, mode, -7)}}, 0)
    end
  end)

  it('pads one or three dims, any dtype for constant', function()
    H.close(F.pad(flow.tensor({{1, 2, 3}}), {2, 1}, 'reflect'), {{3, 2, 1, 2, 3, 2}})
    H.close(F.pad(flow.tensor({{1, 2, 3}}), {1, 2}, 'replicate'), {{1, 1, 2, 3, 3, 3}})
    local b = F.pad(flow.tensor({true, false}), {1, 0})
    assert.are.equal(flow.bool, b.dtype)
    H.close(b, {false, true, false})
    local v = F.pad(flow.ones({1, 1, 1, 2}, {dtype = flow.int32}), {0, 1, 1, 0, 0, 1}, {value = 5})
    assert.are.same({1, 2, 2, 3}, H.shape(v))
    H.close(v, {{{{5, 5, 5}, {1, 1, 5}}, {{5, 5, 5}, {5, 5, 5}}}})
    local r = F.pad(flow.randn({1, 2, 2, 3}), {1, 1, 1, 1, 1, 1}, 'replicate')
    assert.are.same({1, 4, 4, 5}, H.shape(r))
  end)

  it('has gradients that sum the reflected and replicated contributions', function()
    local a = randn({2, 1, 3, 4})
    for _, mode in ipairs({'reflect', 'replicate', 'circular'}) do
      assert.is_true(gradcheck(function(t) return F.pad(t, {2, 1, 2, 1}, mode) end, {a}))
    end
    assert.is_true(gradcheck(function(t) return F.pad(t, {1, -1, 0, 2}, {value = 3}) end, {a}))
    assert.is_true(gradcheck(function(t) return F.pad(t, {1, 1, 1, 0, 1, 1}, 'reflect') end,
                             {randn({1, 2, 2, 3})}))
    -- replicate: the edge element collects every copy of itself
    local e = flow.tensor({{1, 2}}, {dtype = f64, requires_grad = true})
    F.pad(e, {3, 0}, 'replicate'):backward(flow.ones({1, 5}, {dtype = f64}))
    H.close(e.grad, {{4, 1}})
    assert.is_true(gradgradcheck(function(t) return F.pad(t, {1, 2}, 'reflect') * t:sum() end,
                                 {randn({1, 4})}))
    assert.are.equal('ReflectionPadBackward', F.pad(a, {1, 1}, 'reflect').grad_fn:name())
  end)

  it('reports bad arguments', function()
    H.raises(function() F.pad(x, {4, 0}, 'reflect') end, 'pad', 'less than the size 4', 'reflect')
    H.raises(function() F.pad(x, {1, 1}, 'wrap') end, "unknown mode 'wrap'")
    H.raises(function() F.pad(x, {1, 1, 1}) end, 'pairs')
    H.raises(function() F.pad(x, {-1, 0}, 'replicate') end, 'negative padding', 'constant mode')
    H.raises(function() F.pad(x, {-3, -2}) end, 'negative')
    H.raises(function() F.pad(x, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}) end, '5 (left, right) pairs', '4-d')
    H.raises(function() F.pad(x, {1, 1}, {mode = 'reflect', value = 2}) end, 'value only applies')
  end)
end)
