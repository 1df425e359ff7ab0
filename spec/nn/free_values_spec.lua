-- Values a forward makes and passes on are freed once read (oneflow.nn.module's
-- keeps_none / may_free / free, _C.release), where nothing else can hold them.
local flow = require 'oneflow'
local core = require 'oneflow._C'
local module = require 'oneflow.nn.module'
local vision = require 'flowvision'
local H = require 'spec.helpers'
local nn = flow.nn

local MiB = 1024 * 1024

-- bytes the allocator holds after fn() less before, with Lua's collector
-- stopped (so only what the forward itself frees is freed), and fn's result
local function held_by(fn)
  flow.collect()
  collectgarbage('stop')
  local before = flow.memory_stats().current_bytes
  local ok, y = pcall(fn)
  local after = flow.memory_stats().current_bytes
  collectgarbage('restart')
  assert(ok, y)
  return after - before, y
end

-- run() after a first call, freeing and with every value held: the bytes
-- held after each, and each result
local function freeing_and_not(run)
  run()
  local held, y = held_by(run)
  module.hold_values(1)
  local kept, want = held_by(run)
  module.hold_values(-1)
  return held, kept, y, want
end

-- four Linear layers of 256 features: every value at batch 4096 is 4 MiB
local function mlp()
  return nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.Tanh(),
                       nn.Linear(256, 256), nn.Linear(256, 256)):eval()
end

describe('values a forward makes', function()
  it('_C.release frees a tensor at once, once', function()
    local t = flow.empty(1024, 1024)
    local n, bytes = core.live_handles(), flow.memory_stats().current_bytes
    assert.is_true(core.release(t))
    assert.equals(n - 1, core.live_handles())
    assert.is_true(flow.memory_stats().current_bytes <= bytes - 4 * MiB)
    assert.is_true(t.p == nil)
    assert.is_false(core.release(t))
    local other = flow.ones(3)   -- may take the freed slot; t stays released
    assert.is_false(core.release(t))
    assert.same({1, 1, 1}, other:totable())
  end)

  it('nn.Sequential frees each value once the next element read it (no_grad)', function()
    local net, x = mlp(), flow.randn(4096, 256)
    local held, y = held_by(function() return flow.no_grad(function() return net(x) end) end)
    assert.is_true(held <= 5 * MiB, ('held %.1f MiB, the output is 4'):format(held / MiB))
    local want = flow.enable_grad(function() return net(x) end)   -- recorded
    assert.is_true(flow.equal(y, want))
    assert.equals(256, x:size(2))   -- the input is never freed
  end)

  it('frees the values no autograd node saved while gradients are recorded, and backward runs', function()
    -- saved: ReLU's and Tanh's results (by themselves), the third Linear's
    -- (by the fourth, its input) and the output: 4 x 4 MiB; the first and
    -- second Linear's results are read by ReLU and Tanh only, which save
    -- their own results, so they go (until 2026-12-07 all six stayed)
    local net, x = mlp(), flow.randn(4096, 256)
    local held, y = held_by(function() return net(x) end)
    assert.is_true(held >= 16 * MiB and held < 17 * MiB, ('held %.1f MiB'):format(held / MiB))
    y:sum():backward()
    local grads = {}
    for i, p in ipairs(net:parameters()) do grads[i], p.grad = p.grad, nil end
    module.hold_values(1)   -- every value kept: the same gradients
    net(x):sum():backward()
    module.hold_values(-1)
    for i, p in ipairs(net:parameters()) do assert.is_true(flow.equal(grads[i], p.grad)) end
  end)

  it('never frees what a hook, a module of the user or an own forward can hold', function()
    local Keep = nn.Module:subclass('Keep')
    function Keep:forward(v) self.seen = v; return v * 2 end
    local Sub = nn.Linear:subclass('KeepLinear')   -- a subclass says keeps_none again, or not
    function Sub:forward(v) self.seen = v; return nn.Linear.forward(self, v) end
    local x = flow.randn(64, 8)
    local cases = {
      function()
        local s = nn.Sequential(nn.Linear(8, 8), Keep(), nn.ReLU())
        return s, function() return s[2].seen end
      end,
      function()
        local s = nn.Sequential(nn.Linear(8, 8), Sub(8, 8), nn.ReLU())
        return s, function() return s[2].seen end
      end,
      function()
        local s, seen = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)), nil
        s[1]:register_forward_hook(function(_, _, out) seen = out end)
        return s, function() return seen end
      end,
      function()
        local s, seen = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)), nil
        s[2]:register_forward_pre_hook(function(_, inp) seen = inp[1] end)
        return s, function() return seen end
      end,
      function()
        local s, seen = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)), nil
        local relu = s[2]
        relu.forward = function(_, v) seen = v; return v:relu() end
        return s, function() return seen end
      end,
      function()   -- a forward put on the class after it was vouched for
        local s, seen = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8)), nil
        local orig = nn.Tanh.forward
        nn.Tanh.forward = function(self, v) seen = v; return orig(self, v) end
        return s, function() return seen end, function() nn.Tanh.forward = orig end
      end,
    }
    for i, make in ipairs(cases) do
      local s, seen, restore = make()
      flow.no_grad(function() return s(x) end)
      if restore then restore() end
      local kept = seen()
      assert.is_true(kept.p ~= nil, 'case ' .. i .. ': the kept value was freed')
      H.close(kept, s[1](x), 1e-6, 'case ' .. i)
    end
  end)

  it('random chains of layers, in place or not, views, user modules and hooks: the same values, nothing kept lost',
     function()
    flow.manual_seed(0)
    math.randomseed(7)
    local Keep = nn.Module:subclass('KeepInput')
    function Keep:forward(v) self.seen = v; return v:tanh() end
    local makers = {
      function() return nn.Linear(6, 6) end,
      function() return nn.ReLU() end,
      function() return nn.ReLU({inplace = true}) end,
      function() return nn.Identity() end,
      function() return nn.Dropout(0.5) end,
      function() return nn.Sequential(nn.Flatten(1), nn.Unflatten(1, {3, 6})) end,
      function() return Keep() end,
      function()
        local m = nn.Tanh()
        m:register_forward_hook(function(mod, _, out) mod.hooked = out end)
        return m
      end,
      function() return nn.Sequential(nn.Linear(6, 6), nn.Sigmoid()) end,
    }
    for _ = 1, 60 do
      local mods = {}
      for i = 1, math.random(1, 7) do mods[i] = makers[math.random(#makers)]() end
      local seq = nn.Sequential(unpack(mods)):eval()
      local x = flow.randn(3, 6)
      local x0 = x:clone()
      local y = flow.no_grad(function() return seq(x) end)
      for _, m in ipairs(mods) do   -- what a user module or a hook kept is still there
        if m.seen then assert.is_true(m.seen.p ~= nil); m.seen:sum() end
        if m.hooked then assert.is_true(m.hooked.p ~= nil); m.hooked:sum() end
      end
      assert.is_true(x.p ~= nil and y.p ~= nil)
      module.hold_values(1)
      local want = flow.no_grad(function() return seq(x0:clone()) end)
      module.hold_values(-1)
      assert.is_true(flow.equal(y, want))
    end
  end)

  it('an in-place first element returns the input, which stays the caller\'s', function()
    local s = nn.Sequential(nn.ReLU({inplace = true}), nn.Linear(4, 4), nn.Identity(), nn.ReLU({inplace = true}))
    local x = flow.randn(3, 4)
    local y = flow.no_grad(function() return s(x) end)
    assert.is_true(x.p ~= nil and y.p ~= nil)
    H.close(y, s[2](x):relu(), 1e-6)
  end)

  it('keeps_none: plain instances of classes that say so, with such children', function()
    assert.is_true(module.keeps_none(nn.Sequential(nn.Conv2d(1, 1, 1), nn.BatchNorm2d(1), nn.ReLU6())))
    assert.is_false(module.keeps_none(nn.Module()))
    assert.is_false(module.keeps_none(nn.Sequential(nn.Linear(1, 1), nn.Module())))
    local l = nn.Linear(1, 1)
    l:register_forward_hook(function() end)
    assert.is_false(module.keeps_none(nn.Sequential(l)))
    assert.is_true(flow.no_grad(module.may_free))
    assert.is_true(flow.enable_grad(module.may_free))
    module.hold_values(1)
    assert.is_false(module.may_free())
    module.hold_values(-1)
  end)

  it('flowvision ResNet and MobileNetV2 free their values: the same bits, the output held', function()
    flow.manual_seed(0)
    for _, case in ipairs({{'resnet18', {2, 3, 64, 64}}, {'resnet50', {1, 3, 64, 64}},
                           {'mobilenet_v2', {2, 3, 64, 64}}}) do
      local net = vision.models[case[1]]({num_classes = 10}):eval()
      local x = flow.randn(unpack(case[2]))
      flow.no_grad(function() return net(x) end)   -- the convolutions' first-call state
      local held, y = held_by(function() return flow.no_grad(function() return net(x) end) end)
      assert.is_true(held < 64 * 1024, ('%s held %d bytes'):format(case[1], held))
      for _, p in ipairs(net:parameters()) do p:requires_grad_(false) end
      local want = flow.enable_grad(function() return net(x) end)   -- nothing freed when recording
      assert.is_true(flow.equal(y, want), case[1])
    end
  end)

  it('flowvision ViT / DeiT blocks free their values: the same bits, the output held', function()
    flow.manual_seed(0)
    for _, name in ipairs({'vit_tiny_patch16_224', 'deit_tiny_patch16_224'}) do
      local net = vision.models[name]({img_size = 32, depth = 3, num_classes = 10}):eval()
      local x = flow.randn(2, 3, 32, 32)
      flow.no_grad(function() return net(x) end)
      local held, y = held_by(function() return flow.no_grad(function() return net(x) end) end)
      -- the patch embedding, the token sequence and its norm (3 x 2 x 5 x 192
      -- floats) are not freed by the model's own forward; every block's are
      assert.is_true(held < 64 * 1024, ('%s held %d bytes'):format(name, held))
      for _, p in ipairs(net:parameters()) do p:requires_grad_(false) end
      local want = flow.enable_grad(function() return net(x) end)
      assert.is_true(flow.equal(y, want), name)
    end
  end)

  it('EfficientNet, ConvNeXt, MobileNetV3, RegNet, DenseNet blocks free their values: the same bits, less held',
     function()
    flow.manual_seed(0)
    local names = {'efficientnet_b0', 'convnext_tiny', 'mobilenet_v3_small', 'regnet_y_400mf', 'densenet121'}
    for _, name in ipairs(names) do
      local net = vision.models[name]({num_classes = 10}):eval()
      local x = flow.randn(2, 3, 64, 64)
      local held, kept, y, want = freeing_and_not(function() return flow.no_grad(function() return net(x) end) end)
      assert.is_true(flow.equal(y, want), name)
      assert.is_true(x.p ~= nil, name)
      assert.is_true(held * 2 < kept, ('%s held %d bytes, %d without freeing'):format(name, held, kept))
    end
  end)

  it('a block whose layers give back their input never frees it', function()
    local L = require 'flowvision.models.transformer_layers'
    local block = L.Block(8, {num_heads = 2, norm_layer = function() return nn.Identity() end}):eval()
    local x = flow.randn(2, 3, 8)
    local y = flow.no_grad(function() return block(x) end)
    assert.is_true(x.p ~= nil)
    local want = flow.enable_grad(function() return block(x) end)
    assert.is_true(flow.equal(y, want))
  end)

  it('flowtext BERT frees its values: the same bits, the caller\'s ids and the output held', function()
    local text = require 'flowtext'
    flow.manual_seed(0)
    local bert = text.BertModel({vocab_size = 50, hidden_size = 64, num_hidden_layers = 2, num_attention_heads = 4,
                                 intermediate_size = 256, max_position_embeddings = 40}):eval()
    assert.is_true(module.keeps_none(bert))
    local ids = flow.randint(1, 51, {4, 32})
    local types = flow.zeros(4, 32, {dtype = flow.int64}):add_(1)
    local mask = flow.ones(4, 32, {dtype = flow.int64})
    local function run() return bert(ids, {attention_mask = mask, token_type_ids = types}).last_hidden_state end
    flow.no_grad(run)
    local held, y = held_by(function() return flow.no_grad(run) end)
    assert.is_true(held < 64 * 1024, ('held %d bytes'):format(held))
    assert.is_true(ids.p ~= nil and types.p ~= nil and mask.p ~= nil)
    module.hold_values(1)
    local want = flow.no_grad(run)
    module.hold_values(-1)
    assert.is_true(flow.equal(y, want))
  end)

  it('nn.TransformerEncoder and MultiheadAttention free their values: the same bits, less held', function()
    flow.manual_seed(0)
    for _, norm_first in ipairs({false, true}) do
      local layer = nn.TransformerEncoderLayer(64, 4, {dim_feedforward = 256, dropout = 0, batch_first = true,
                                                       norm_first = norm_first, activation = 'gelu'})
      local enc = nn.TransformerEncoder(layer, 3, {norm = nn.LayerNorm(64)}):eval()
      local x = flow.randn(8, 32, 64)
      local mask = flow.ones(32, 32, {dtype = flow.bool}):triu(1)
      local held, kept, y, want = freeing_and_not(function()
        return flow.no_grad(function() return enc(x, {mask = mask}) end)
      end)
      assert.is_true(flow.equal(y, want))
      assert.is_true(x.p ~= nil and mask.p ~= nil)
      assert.is_true(held * 4 < kept, ('held %d bytes, %d without freeing'):format(held, kept))
    end
    for _, norm_first in ipairs({false, true}) do   -- and the decoder, in nn.Transformer
      local t = nn.Transformer({d_model = 32, nhead = 4, num_encoder_layers = 2, num_decoder_layers = 2,
                                dim_feedforward = 64, dropout = 0, batch_first = true, norm_first = norm_first}):eval()
      local src, tgt = flow.randn(4, 12, 32), flow.randn(4, 7, 32)
      local tmask = flow.ones(7, 7, {dtype = flow.bool}):triu(1)
      local held, kept, y, want = freeing_and_not(function()
        return flow.no_grad(function() return t(src, tgt, {tgt_mask = tmask}) end)
      end)
      assert.is_true(flow.equal(y, want))
      assert.is_true(src.p ~= nil and tgt.p ~= nil and tmask.p ~= nil)
      assert.is_true(held * 4 < kept, ('Transformer held %d bytes, %d without freeing'):format(held, kept))
    end
    -- an activation function of the user may keep what it is given: not freed
    local seen
    local layer = nn.TransformerEncoderLayer(16, 2, {dim_feedforward = 32, dropout = 0,
                                                     activation = function(v) seen = v; return v:relu() end}):eval()
    local x = flow.randn(5, 3, 16)
    flow.no_grad(function() return layer(x) end)
    assert.is_true(seen.p ~= nil)
    assert.equals(32, seen:size(3))
  end)

  it('F.linear on a batch of sequences leaves nothing but its result', function()
    local x, w, b = flow.randn(8, 64, 256), flow.randn(512, 256), flow.randn(512)
    flow.collect()
    local handles = core.live_handles()
    local linear = flow.nn.functional.linear
    local held, y = held_by(function() return flow.no_grad(function() return linear(x, w, b) end) end)
    assert.equals(handles + 1, core.live_handles())
    assert.is_true(held <= y:numel() * 4 + 4096, ('held %d bytes for a %d-byte result'):format(held, y:numel() * 4))
    H.close(y, x:matmul(w:t()) + b, 1e-4)
  end)

  it('max_pool2d without return_indices leaves no indices tensor behind', function()
    local x = flow.randn(2, 16, 64, 64)
    local held, y = held_by(function() return flow.no_grad(function() return nn.functional.max_pool2d(x, 2) end) end)
    assert.is_true(held <= y:numel() * 4 + 4096, ('held %d bytes for a %d-byte output'):format(held, y:numel() * 4))
    local v, i = nn.functional.max_pool2d(x, 2, {return_indices = true})
    assert.is_true(flow.equal(v, y))
    assert.equals('oneflow.int64', tostring(i.dtype))
  end)
end)

describe('values while the ONNX exporter traces', function()
  it('are all held (it keys them by their C address)', function()
    local Probe = nn.Module:subclass('Probe')
    local seen
    function Probe.forward(_, v) seen = module.may_free(); return v end
    local net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), Probe(), nn.Linear(4, 2))
    local path = os.tmpname()
    flow.onnx.export(net, flow.randn(2, 4), path)
    os.remove(path)
    assert.is_false(seen)
    assert.is_true(flow.no_grad(module.may_free))   -- and freed again after
  end)
end)
