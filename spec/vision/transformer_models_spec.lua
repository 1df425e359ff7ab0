-- flowvision transformer and MLP models (vit, deit, swin, pvt, mlp_mixer,
-- resmlp, gmlp): timm's parameter counts and state-dict sizes (hard-coded),
-- forward/backward at small sizes, the Swin window helpers against
-- hand-computed values, and -- when $FLOWVISION_PYTHON (default
-- /usr/bin/python3) can import torch and timm -- names, shapes and eval
-- outputs against timm (tools/export_timm.py writes them into a temporary
-- directory; pending otherwise).
local flow = require 'oneflow'
local models = require 'flowvision.models'
local H = require 'spec.helpers'

-- {family module, name, options, input size, {timm's parameter count,
-- timm's state-dict size}} -- the configurations of tools/export_timm.py
local CASES = {
  {'vit', 'vit_tiny_patch16_224', {img_size = 32, num_classes = 10}, 32, {5489482, 152}},
  {'vit', 'vit_small_patch16_224', {img_size = 32, num_classes = 10, depth = 4}, 32, {7400074, 56}},
  {'vit', 'vit_base_patch16_224', {img_size = 32, num_classes = 10, depth = 2}, 32, {14780170, 32}},
  {'deit', 'deit_tiny_patch16_224', {img_size = 32, num_classes = 10}, 32, {5489482, 152}},
  {'deit', 'deit_tiny_distilled_patch16_224', {img_size = 32, num_classes = 10}, 32, {5491796, 155}},
  {'deit', 'deit_small_distilled_patch16_224', {img_size = 32, num_classes = 10, depth = 2}, 32, {3855764, 35}},
  {'swin', 'swin_tiny_patch4_window7_224', {img_size = 32, num_classes = 10}, 32, {27506020, 173}},
  {'pvt', 'pvt_v2_b0', {num_classes = 10}, 64, {3412330, 178}},
  {'mlp_mixer', 'mixer_s16_224', {img_size = 32, num_classes = 10}, 32, {17232426, 102}},
  {'mlp_mixer', 'mixer_b16_224', {img_size = 32, num_classes = 10, num_blocks = 2}, 32, {10057746, 30}},
  {'resmlp', 'resmlp_12_224', {img_size = 32, num_classes = 10}, 32, {14506618, 150}},
  {'gmlp', 'gmlp_s16_224', {img_size = 32, num_classes = 10}, 32, {18010466, 306}},
}

local function build(c) return require('flowvision.models.' .. c[1]).models[c[2]](c[3]) end

-- the models built by the structure tests, reused by the parity tests
local built = {}

local function count(m)
  local n = 0
  for _, p in m:named_parameters() do n = n + p:numel() end
  return n
end

local function nkeys(sd)
  local n = 0
  for _ in pairs(sd) do n = n + 1 end
  return n
end

local function rel_err(y, ref)
  return (y - ref):abs():max():item() / ref:abs():max():item()
end

------------------------------------------------------------------ timm export (background)
local PY = os.getenv('FLOWVISION_PYTHON') or '/usr/bin/python3'
local TIMM = os.execute(PY .. ' -c "import torch, timm" >/dev/null 2>&1') == 0
local export = H.background_export(TIMM, function(dir)
  local names = {}
  for i, c in ipairs(CASES) do names[i] = c[2] end
  return ('%s tools/export_timm.py %s %s'):format(PY, dir, table.concat(names, ' '))
end)
local exported = export.wait

describe('flowvision transformer / MLP models', function()
  teardown(export.remove)   -- the exported weights: about 500 MB
  it('are in the registry', function()
    local have = {}
    for _, n in ipairs(models.list()) do have[n] = true end
    for _, c in ipairs(CASES) do assert.is_true(have[c[2]], c[2]) end
    for _, n in ipairs({'vit_base_patch16_224', 'deit_base_distilled_patch16_224', 'swin_t', 'pvt_v2_b2',
                        'mlp_mixer_b16_224', 'resmlp_24_224', 'gmlp_ti16_224'}) do
      assert.is_true(have[n], n)
    end
    local m = models.create('vit_tiny_patch16_224', {img_size = 32, num_classes = 3, depth = 1})
    assert.same({2, 3}, H.shape(m(flow.randn(2, 3, 32, 32))))
  end)

  for _, c in ipairs(CASES) do
    it(c[2] .. ': timm parameter count and state-dict size, forward and backward', function()
      flow.manual_seed(0)
      local m = build(c)
      assert.equal(c[5][1], count(m))
      assert.equal(c[5][2], nkeys(m:state_dict()))
      m:train()
      local x = flow.randn(2, 3, c[4], c[4])
      local y = m(x)
      assert.same({2, 10}, H.shape(y))
      flow.nn.functional.cross_entropy(y, flow.tensor({1, 7}, {dtype = flow.int64})):backward()
      local first = m:parameters()[1]
      assert.is_not_nil(first.grad)
      local g = 0
      for _, p in ipairs(m:parameters()) do if p.grad then g = g + p.grad:abs():sum():item() end end
      assert.is_true(g > 0)
      m:eval()
      local y1, y2 = m(x), m(x)
      H.close(y1, y2, 0)
      m:zero_grad()
      built[c[2]] = m
    end)
  end

  it('ViT names follow timm (patch_embed.proj, cls_token, pos_embed, blocks.N.attn.qkv, head)', function()
    local sd = build(CASES[1]):state_dict()
    for _, k in ipairs({'cls_token', 'pos_embed', 'patch_embed.proj.weight', 'blocks.0.norm1.weight',
                        'blocks.0.attn.qkv.weight', 'blocks.0.attn.proj.bias', 'blocks.11.mlp.fc1.weight',
                        'blocks.11.mlp.fc2.bias', 'norm.weight', 'head.weight'}) do
      assert.is_not_nil(sd[k], k)
    end
    assert.same({1, 5, 192}, H.shape(sd.pos_embed))
  end)

  it('DeiT distilled: dist_token, head_dist, mean of both heads in eval, both in distilled training', function()
    local m = build(CASES[5])
    local sd = m:state_dict()
    assert.same({1, 1, 192}, H.shape(sd.dist_token))
    assert.same({1, 6, 192}, H.shape(sd.pos_embed))
    assert.same({10, 192}, H.shape(sd['head_dist.weight']))
    m:eval()
    local x = flow.randn(1, 3, 32, 32)
    local feats = m:forward_features(x)
    local want = (m.head(feats:select(2, 1)) + m.head_dist(feats:select(2, 2))) / 2
    H.close(m(x), want, 1e-6)
    m:train()
    m.distilled_training = true
    local a, b = m(x)
    assert.same({1, 10}, H.shape(a))
    assert.same({1, 10}, H.shape(b))
  end)

  it('Swin: relative position index and shifted-window mask equal hand-computed values', function()
    local swin = require('flowvision.models.swin').classes
    local attn = swin.WindowAttention(8, {window_size = {2, 2}, num_heads = 2})
    H.close(attn.relative_position_index, {{4, 3, 1, 0}, {5, 4, 2, 1}, {7, 6, 4, 3}, {8, 7, 5, 4}})
    assert.same({9, 2}, H.shape(attn.relative_position_bias_table))
    -- a 4x4 map, 2x2 windows shifted by 1: regions (0 | 1 | 2) per axis are
    -- rows/cols {0,1}, {2}, {3}; window 1 (top-left) is one region, window 2
    -- (top-right) mixes columns 2 and 3, window 4 mixes all four regions
    local blk = swin.SwinTransformerBlock(8, {input_resolution = {4, 4}, num_heads = 2, window_size = 2,
                                             shift_size = 1})
    local m = blk.attn_mask
    assert.same({4, 4, 4}, H.shape(m))
    H.close(m[1], {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}})
    H.close(m[2], {{0, -100, 0, -100}, {-100, 0, -100, 0}, {0, -100, 0, -100}, {-100, 0, -100, 0}})
    H.close(m[4], {{0, -100, -100, -100}, {-100, 0, -100, -100}, {-100, -100, 0, -100}, {-100, -100, -100, 0}})
    -- buffers that timm keeps out of the state dict
    local sd = blk:state_dict()
    assert.is_nil(sd.attn_mask)
    assert.is_nil(sd['attn.relative_position_index'])
    -- windows larger than the map shrink to it and do not shift
    local small = swin.SwinTransformerBlock(8, {input_resolution = {3, 3}, num_heads = 2, window_size = 7,
                                               shift_size = 3})
    assert.same({3, 3}, small.window_size)
    assert.same({0, 0}, small.shift_size)
    assert.is_nil(small.attn_mask)
  end)

  it('Swin: a block equals windowed attention computed by hand without shift', function()
    local swin = require('flowvision.models.swin').classes
    flow.manual_seed(1)
    local blk = swin.SwinTransformerBlock(4, {input_resolution = {2, 4}, num_heads = 1, window_size = 2})
    blk:eval()
    local x = flow.randn(1, 2, 4, 4)
    -- the two 2x2 windows are independent: running each half alone gives the same result
    local y = blk(x)
    local left = blk:_attn(blk.norm1(x:narrow(3, 1, 2):contiguous()))
    local full = blk:_attn(blk.norm1(x))
    H.close(full:narrow(3, 1, 2), left, 1e-5)
    assert.same({1, 2, 4, 4}, H.shape(y))
  end)

  it('DropPath drops whole samples in training and is the identity in eval', function()
    local L = require 'flowvision.models.transformer_layers'
    local dp = L.DropPath(0.5)
    local x = flow.ones(64, 3)
    local y = dp(x):sum(2)
    for _, v in ipairs(y:totable()) do assert.is_true(v == 0 or math.abs(v - 6) < 1e-5) end
    dp:eval()
    H.close(dp(x), x, 0)
  end)

  it('PatchEmbed rejects an input of the wrong size', function()
    local m = build(CASES[1])
    H.raises(function() m(flow.randn(1, 3, 48, 48)) end, 'img_size', '32')
  end)

  for _, c in ipairs(CASES) do
    local check = TIMM and it or pending
    check(c[2] .. ' matches timm (names, shapes, eval output 1e-4)', function()
      local dir = exported()
      assert(export.ok, 'export_timm.py failed:\n' .. tostring(export.log))
      local sd = flow.load(dir .. '/' .. c[2] .. '.safetensors')
      local io = flow.load(dir .. '/' .. c[2] .. '.io.safetensors')
      local m = built[c[2]] or build(c)
      built[c[2]] = nil
      local mine = m:state_dict()
      for k, v in pairs(sd) do
        assert.is_not_nil(mine[k], 'missing ' .. k)
        assert.same(H.shape(v), H.shape(mine[k]), k)
      end
      assert.equal(nkeys(sd), nkeys(mine))
      m:load_state_dict(sd)
      m:eval()
      local err = rel_err(m(io.input), io.output)
      assert.is_true(err < 1e-4, ('%s: max relative error %g'):format(c[2], err))
    end)
  end
end)
