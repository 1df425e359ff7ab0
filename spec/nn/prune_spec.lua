-- nn.utils.prune against PyTorch's torch.nn.utils.prune (masks, state-dict
-- names, remove), the options-table forms, and structured channel pruning
-- that shrinks the layers.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local R = require 'spec.quantization.torch_ref'

local nn, prune = flow.nn, flow.nn.utils.prune

describe('prune vs torch.nn.utils.prune', function()
  it('l1_unstructured, ln_structured, global_unstructured masks and state dicts', function()
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    flow.manual_seed(21)
    local a, b, c = nn.Linear(7, 5), nn.Linear(5, 3), nn.Conv2d(3, 6, 3)
    local wa, wb, wc = a.weight:clone(), b.weight:clone(), c.weight:clone()
    prune.l1_unstructured(a, 'weight', {amount = 0.4})
    prune.l1_unstructured(a, 'weight', {amount = 3})
    prune.ln_structured(c, 'weight', {amount = 0.5, n = 2, dim = 1})
    prune.ln_structured(c, 'weight', {amount = 1, n = 1, dim = 2})
    prune.global_unstructured({{b, 'weight'}, {a, 'bias'}}, {pruning_method = prune.L1Unstructured, amount = 0.3})
    local t = R.run(([==[
import torch, torch.nn as nn, torch.nn.utils.prune as prune
def T(l, *s): return torch.tensor(l, dtype=torch.float32).reshape(*s)
a, b, c = nn.Linear(7, 5), nn.Linear(5, 3), nn.Conv2d(3, 6, 3)
with torch.no_grad():
    a.weight.copy_(T(%s, 5, 7)); a.bias.copy_(T(%s, 5)); b.weight.copy_(T(%s, 3, 5)); c.weight.copy_(T(%s, 6, 3, 3, 3))
prune.l1_unstructured(a, 'weight', amount=0.4)
prune.l1_unstructured(a, 'weight', amount=3)
prune.ln_structured(c, 'weight', amount=0.5, n=2, dim=0)
prune.ln_structured(c, 'weight', amount=1, n=1, dim=1)
prune.global_unstructured([(b, 'weight'), (a, 'bias')], pruning_method=prune.L1Unstructured, amount=0.3)
def out(k, t): print(k, ' '.join(repr(float(v)) for v in t.flatten().tolist()))
out('a', a.weight_mask); out('c', c.weight_mask); out('b', b.weight_mask); out('ab', a.bias_mask)
print('keys', ' '.join(str(len(k)) for k in sorted(a.state_dict().keys())))
print('done')
]==]):format(R.list(wa), R.list(a.bias_orig), R.list(wb), R.list(wc)))
    H.close(a.weight_mask, t.a, 0, 'l1_unstructured twice')
    H.close(c.weight_mask, t.c, 0, 'ln_structured on two dims')
    H.close(b.weight_mask, t.b, 0, 'global_unstructured')
    H.close(a.bias_mask, t.ab, 0, 'global_unstructured bias')
    local keys = {}
    for k in pairs(a:state_dict()) do keys[#keys + 1] = k end
    table.sort(keys)
    assert.are.same({'bias_mask', 'bias_orig', 'weight_mask', 'weight_orig'}, keys)
    -- the forward pre-hook recomputes weight = weight_orig * weight_mask
    H.close(a.weight, a.weight_orig * a.weight_mask, 0)
    prune.remove(a, 'weight')
    H.close(a.weight, wa * flow.tensor(t.a):view(5, 7), 0)
    assert.is_true(a._parameters:has("weight"))
  end)

  it('options tables are checked', function()
    H.raises(function() prune.l1_unstructured(nn.Linear(2, 2), 'weight', {amont = 1}) end,
      "unknown option 'amont'")
    H.raises(function() prune.ln_structured(nn.Linear(2, 2), 'weight', {amount = 1, n = 2}) end,
      'amount, n and dim are required')
  end)
end)

describe('prune methods: classes, containers, user methods', function()
  -- a user method: every other entry of what it is given (PyTorch's tutorial
  -- FooBarPruningMethod), and a structured one that drops the first slice
  local Every2nd = prune.BasePruningMethod:subclass('Every2nd')
  Every2nd.PRUNING_TYPE = 'unstructured'
  function Every2nd.compute_mask(_, _, default_mask)
    local mask = default_mask:clone()
    local flat = mask:view(-1)
    for i = 1, flat:numel(), 2 do flat[i] = 0 end
    return mask
  end
  local FirstSlice = prune.BasePruningMethod:subclass('FirstSlice')
  FirstSlice.PRUNING_TYPE = 'structured'
  function FirstSlice:__init(dim) self.dim = dim end
  function FirstSlice:compute_mask(_, default_mask)
    local mask = default_mask:clone()
    mask:select(self.dim, 1):fill_(0)
    return mask
  end

  it('a user method prunes among what is kept, in a PruningContainer, as torch.nn.utils.prune', function()
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    flow.manual_seed(5)
    local a, c = nn.Linear(6, 4), nn.Conv2d(3, 5, 2)
    local wa, wc = a.weight:clone(), c.weight:clone()
    prune.l1_unstructured(a, 'weight', 0.5)
    local meth = Every2nd.apply(a, 'weight')
    assert.are.equal('PruningContainer', meth.__name)
    assert.are.equal(2, #meth:methods())
    assert.are.equal(meth, prune.method_of(a, 'weight'))
    prune.ln_structured(c, 'weight', 2, 2, 1)
    FirstSlice:apply(c, 'weight', 1)          -- the colon form too
    prune.l1_unstructured(c, 'weight', 0.25)
    local g1, g2 = nn.Linear(4, 3), nn.Linear(3, 2)
    local w1, w2 = g1.weight:clone(), g2.weight:clone()
    prune.global_unstructured({{g1, 'weight'}, {g2, 'weight'}}, {pruning_method = Every2nd})
    local t = R.run(([==[
import torch, torch.nn as nn, torch.nn.utils.prune as prune
def T(l, *s): return torch.tensor(l, dtype=torch.float32).reshape(*s)
class Every2nd(prune.BasePruningMethod):
    PRUNING_TYPE = 'unstructured'
    def compute_mask(self, t, default_mask):
        mask = default_mask.clone(); mask.view(-1)[::2] = 0; return mask
class FirstSlice(prune.BasePruningMethod):
    PRUNING_TYPE = 'structured'
    def __init__(self, dim): self.dim = dim
    def compute_mask(self, t, default_mask):
        mask = default_mask.clone(); mask.select(self.dim, 0).fill_(0); return mask
a, c = nn.Linear(6, 4), nn.Conv2d(3, 5, 2)
g1, g2 = nn.Linear(4, 3), nn.Linear(3, 2)
with torch.no_grad():
    a.weight.copy_(T(%s, 4, 6)); c.weight.copy_(T(%s, 5, 3, 2, 2))
    g1.weight.copy_(T(%s, 3, 4)); g2.weight.copy_(T(%s, 2, 3))
prune.l1_unstructured(a, 'weight', 0.5)
Every2nd.apply(a, 'weight')
prune.ln_structured(c, 'weight', 2, 2, 0)
FirstSlice.apply(c, 'weight', 0)
prune.l1_unstructured(c, 'weight', 0.25)
prune.global_unstructured([(g1, 'weight'), (g2, 'weight')], pruning_method=Every2nd)
def out(k, t): print(k, ' '.join(repr(float(v)) for v in t.flatten().tolist()))
out('a', a.weight_mask); out('c', c.weight_mask); out('g1', g1.weight_mask); out('g2', g2.weight_mask)
print('done')
]==]):format(R.list(wa), R.list(wc), R.list(w1), R.list(w2)))
    H.close(a.weight_mask, t.a, 0, 'unstructured user method after l1')
    H.close(c.weight_mask, t.c, 0, 'structured user method between ln_structured and l1')
    H.close(g1.weight_mask, t.g1, 0, 'global_unstructured with a user method')
    H.close(g2.weight_mask, t.g2, 0, 'global_unstructured with a user method (second)')
  end)

  it('random_structured drops whole kept slices; the classes prune as the functions do', function()
    flow.manual_seed(8)
    local c = nn.Conv2d(4, 10, 3)
    prune.random_structured(c, 'weight', 0.3, 1)
    local per = c.weight_mask:sum({2, 3, 4})
    assert.are.equal(3, per:eq(0):sum():item())
    assert.are.equal(7, per:eq(36):sum():item())
    prune.random_structured(c, 'weight', {amount = 2, dim = 1})   -- among the 7 kept
    per = c.weight_mask:sum({2, 3, 4})
    assert.are.equal(5, per:eq(0):sum():item())
    prune.random_structured(c, 'weight', 1, -1)                  -- the last dim: one of 3 columns
    assert.are.equal(5 * 4 * 3 * 2, c.weight_mask:sum():item())
    local l1, l2 = nn.Linear(5, 5), nn.Linear(5, 5)
    flow.no_grad(function() l2.weight:copy_(l1.weight) end)
    prune.l1_unstructured(l1, 'weight', 0.4)
    prune.L1Unstructured.apply(l2, 'weight', 0.4)
    H.close(l2.weight_mask, l1.weight_mask, 0)
    assert.are.equal('L1Unstructured', prune.method_of(l2, 'weight').__name)
    assert.are.equal('unstructured', prune.LnStructured.PRUNING_TYPE == 'structured' and 'unstructured')
    local m = prune.LnStructured({amount = 1, n = 2, dim = 1})
    local w = flow.tensor({{1.0, 1.0}, {0.1, 0.1}, {2.0, 0.0}})
    H.close(m:prune(w), {{1, 1}, {0, 0}, {2, 0}}, 0, 'method:prune')
    prune.remove(l2, 'weight')
    assert.is_nil(prune.method_of(l2, 'weight'))
  end)

  it('bad input: amounts, dims, shapes, methods', function()
    H.raises(function() prune.random_structured(nn.Linear(3, 3), 'weight', 0.5, 3) end,
      'prune.RandomStructured: dim is 1-based (or negative from the end) for a 2-d tensor, got 3')
    H.raises(function() prune.random_structured(nn.Linear(3, 3), 'weight', 4, 1) end,
      'amount=4 should be smaller than the number of parameters to prune=3')
    H.raises(function() prune.L1Unstructured(1.5) end, 'amount must be a fraction in [0, 1] or a whole number')
    H.raises(function() prune.custom_from_mask(nn.Linear(3, 2), 'weight', flow.ones(3, 2)) end,
      'prune.CustomFromMask: mask of shape')
    H.raises(function() prune.l1_unstructured(nn.Linear(3, 2), 'weight', 0.5,
      {importance_scores = flow.ones(3)}) end, 'importance_scores of shape')
    local Bare = prune.BasePruningMethod:subclass('Bare')
    Bare.PRUNING_TYPE = 'unstructured'
    H.raises(function() Bare.apply(nn.Linear(2, 2), 'weight') end,
      'prune.Bare: compute_mask(t, default_mask) is not defined')
    H.raises(function() prune.global_unstructured({{nn.Linear(2, 2), 'weight'}},
      {pruning_method = prune.LnStructured, amount = 1}) end, "only 'unstructured' methods prune globally")
    local lin = nn.Linear(2, 2)
    H.raises(function() Bare.apply(lin, 'weight') end, 'compute_mask')
    assert.is_true(lin._parameters:has('weight'), 'a failed pruning leaves the parameter as it was')
  end)
end)

describe('prune.prune_channels', function()
  local function net()
    flow.manual_seed(3)
    local m = nn.Sequential(nn.Conv2d(1, 8, 3, {padding = 1}), nn.BatchNorm2d(8), nn.ReLU(),
      nn.Conv2d(8, 6, 3, {padding = 1}), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 5 * 5, 4))
    flow.no_grad(function()
      m[2].running_mean:copy_(flow.randn(8) * 0.1)
      m[2].running_var:copy_(flow.rand(8) + 0.5)
    end)
    m:eval()
    return m
  end
  local function nparams(m)
    local n = 0
    for _, p in ipairs(m:parameters()) do n = n + p:numel() end
    return n
  end

  it('shrinks conv, batchnorm and the next conv/linear; same outputs as zeroing the dropped channels', function()
    local m = net()
    local x = flow.randn(3, 1, 5, 5)
    local s, kept = prune.prune_channels(m, {{'0', '1', '3'}, {'3', '6'}}, {amount = 0.5, n = 1})
    assert.are.same({4, 1, 3, 3}, H.shape(s[1].weight))
    assert.are.same({4}, H.shape(s[2].running_mean))
    assert.are.same({3, 4, 3, 3}, H.shape(s[4].weight))
    assert.are.same({4, 75}, H.shape(s[7].weight))
    assert.are.equal(75, s[7].in_features)
    assert.is_true(nparams(s) < 0.55 * nparams(m))
    -- the kept filters are those with the largest L1 norms
    local norms = m[1].weight:reshape(8, -1):abs():sum(2)
    local _, top = norms:topk(4)
    H.close(kept[1], top:sort(1), 0)
    flow.no_grad(function()
      local k1, k2 = {}, {}
      for _, v in ipairs(kept[1]:totable()) do k1[v] = true end
      for _, v in ipairs(kept[2]:totable()) do k2[v] = true end
      for ch = 1, 8 do if not k1[ch] then m[4].weight:select(2, ch):zero_() end end
      for ch = 1, 6 do if not k2[ch] then m[7].weight:narrow(2, (ch - 1) * 25 + 1, 25):zero_() end end
    end)
    H.close(s(x), m(x), 1e-5)
  end)

  -- BatchNorms with statistics (and biases) other than their initial ones
  local function random_stats(m, biases)
    flow.no_grad(function()
      for _, mod in ipairs(m:modules()) do
        if mod.running_mean ~= nil then
          mod.running_mean:copy_(flow.randn(mod.num_features) * 0.1)
          mod.running_var:copy_(flow.rand(mod.num_features) + 0.5)
          if biases then mod.bias:copy_(flow.randn(mod.num_features) * 0.1) end
        end
      end
    end)
  end

  it("a ResNet's block-internal chains (flowvision ResNet:prunable_chains): same outputs as zeroing", function()
    local R_ = require('flowvision.models.resnet')
    for _, block in ipairs({R_.BasicBlock, R_.Bottleneck}) do
      flow.manual_seed(5)
      local m = R_.ResNet(block, {1, 2, 1, 1}, {num_classes = 5})
      random_stats(m)
      m:eval()
      local chains = m:prunable_chains()
      local per = block == R_.Bottleneck and 2 or 1
      assert.equals(5 * per, #chains)
      local s, kept = prune.prune_channels(m, chains, {amount = 0.5})
      local b0 = s.layer2[1]
      assert.equals(b0.conv1.out_channels, b0.conv2.in_channels)
      assert.equals(64, b0.conv1.out_channels)   -- 128 inner channels, half kept
      -- the residual stream keeps its channels: the block's last BatchNorm
      local last = per == 2 and b0.bn3 or b0.bn2
      assert.equals(128 * block.expansion, last.num_features)
      if per == 2 then assert.equals(64, b0.bn2.num_features) end
      assert.is_true(nparams(s) < 0.6 * nparams(m), nparams(s) .. ' of ' .. nparams(m))
      -- the original with the dropped channels' inputs zeroed in each consumer
      flow.no_grad(function()
        for ci, chain in ipairs(chains) do
          local cons = m
          for part in chain[#chain]:gmatch('[^.]+') do cons = cons[tonumber(part) and tonumber(part) + 1 or part] end
          local keep = {}
          for _, v in ipairs(kept[ci]:totable()) do keep[v] = true end
          for ch = 1, cons.weight:size(2) do if not keep[ch] then cons.weight:select(2, ch):zero_() end end
        end
      end)
      local x = flow.randn(2, 3, 32, 32)
      H.close(s(x), m(x), 1e-4, tostring(block))
    end
    local rx = require('flowvision').models.resnext50_32x4d({num_classes = 3})
    H.raises(function() rx:prunable_chains() end, 'prunable_chains', 'grouped conv2', 'groups = 32')
  end)

  it("a ResNet's residual streams as groups (prunable_chains{residual = true}): same outputs as zeroing",
     function()
    local R_ = require('flowvision.models.resnet')
    local function get(m, path)
      for part in path:gmatch('[^.]+') do m = m[tonumber(part) and tonumber(part) + 1 or part] end
      return m
    end
    for _, block in ipairs({R_.BasicBlock, R_.Bottleneck}) do
      flow.manual_seed(6)
      local m = R_.ResNet(block, {2, 1, 2, 1}, {num_classes = 5})
      random_stats(m, true)
      m:eval()
      local chains = m:prunable_chains({residual = true})
      local groups = 0
      for _, c in ipairs(chains) do if c.producers then groups = groups + 1 end end
      -- BasicBlock: layer1 has no downsample, so the stem's stream is layer1's
      assert.equals(block == R_.Bottleneck and 5 or 4, groups)
      local s, kept = prune.prune_channels(m, chains, {amount = 0.5})
      assert.equals(32, s.conv1.out_channels)
      assert.equals(256 * block.expansion, s.fc.in_features)
      assert.is_true(nparams(s) < 0.3 * nparams(m), nparams(s) .. ' of ' .. nparams(m))
      -- the original with every dropped channel zeroed where it is made and read
      flow.no_grad(function()
        for ci, c in ipairs(chains) do
          local keep = {}
          for _, v in ipairs(kept[ci]:totable()) do keep[v] = true end
          local prods = c.producers or {c[1]}
          local norms = c.norms or {}
          if not c.producers then for i = 2, #c - 1 do norms[#norms + 1] = c[i] end end
          local conss = c.consumers or {c[#c]}
          local O = get(m, prods[1]).weight:size(1)
          for ch = 1, O do
            if not keep[ch] then
              for _, p in ipairs(prods) do get(m, p).weight:select(1, ch):zero_() end
              for _, p in ipairs(norms) do
                get(m, p).weight:narrow(1, ch, 1):zero_()
                get(m, p).bias:narrow(1, ch, 1):zero_()
              end
              for _, p in ipairs(conss) do get(m, p).weight:select(2, ch):zero_() end
            end
          end
        end
      end)
      local x = flow.randn(2, 3, 32, 32)
      H.close(s(x), m(x), 1e-4, tostring(block))
    end
    H.raises(function() flow.nn.utils.prune.prune_channels(R_.ResNet(R_.BasicBlock, {1, 1, 1, 1}),
      {{producers = {'conv1'}, consumers = {'layer3.0.conv1'}}}, {amount = 0.5}) end,
      'layer3.0.conv1 takes 128 channels', 'producers make 64')
    H.raises(function() R_.ResNet(R_.BasicBlock, {1, 1, 1, 1}):prunable_chains({resid = true}) end,
      'prunable_chains', 'resid')
  end)

  it('refuses chains it cannot shrink', function()
    H.raises(function() prune.prune_channels(net(), {{'0', '2', '3'}}, {amount = 0.5}) end,
      'must be a BatchNorm')
    H.raises(function() prune.prune_channels(net(), {{'0', '9'}}, {amount = 0.5}) end, 'no submodule 9')
    H.raises(function() prune.prune_channels(net(), {{'0', '3'}}, {amount = 8}) end, 'leaves none')
    H.raises(function() prune.prune_channels(net(), {{'3', '1'}}, {amount = 1}) end,
      'must be a Conv2d with groups 1 or a Linear')
  end)
end)
