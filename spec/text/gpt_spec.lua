-- flowtext.gpt (examples/gpt's model): forward, loss, gradients and one
-- AdamW step equal a PyTorch nanoGPT with the same weights (Debian's torch
-- 1.13, float64 reference); generation with the key/value cache equals
-- generation without it; bad input names the shape; ONNX export agrees
-- with onnxruntime (spec/onnx/setup_onnxruntime.sh's venv; pending without).
local flow = require 'oneflow'
local gpt = require 'flowtext.gpt'
local H = require 'spec.helpers'

local CFG = {vocab_size = 11, block_size = 12, n_layer = 2, n_head = 2, n_embd = 8}

local TORCH_GPT = [[
import math, torch, torch.nn as nn, torch.nn.functional as F
torch.set_default_dtype(torch.float64)
class Attn(nn.Module):
    def __init__(s, c):
        super().__init__(); s.h = c['n_head']; s.e = c['n_embd']
        s.c_attn = nn.Linear(s.e, 3 * s.e); s.c_proj = nn.Linear(s.e, s.e)
    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.c_attn(x).split(s.e, dim=2)
        q, k, v = [t.view(B, T, s.h, C // s.h).transpose(1, 2) for t in (q, k, v)]
        a = (q @ k.transpose(-2, -1)) / math.sqrt(C // s.h)
        a = a.masked_fill(torch.ones(T, T).tril() == 0, float('-inf')).softmax(-1)
        return s.c_proj((a @ v).transpose(1, 2).reshape(B, T, C))
class MLP(nn.Module):
    def __init__(s, c):
        super().__init__(); e = c['n_embd']
        s.c_fc = nn.Linear(e, 4 * e); s.c_proj = nn.Linear(4 * e, e)
    def forward(s, x): return s.c_proj(F.gelu(s.c_fc(x)))
class Block(nn.Module):
    def __init__(s, c):
        super().__init__(); e = c['n_embd']
        s.ln_1 = nn.LayerNorm(e); s.attn = Attn(c); s.ln_2 = nn.LayerNorm(e); s.mlp = MLP(c)
    def forward(s, x):
        x = x + s.attn(s.ln_1(x)); return x + s.mlp(s.ln_2(x))
class GPT(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.transformer = nn.ModuleDict(dict(wte=nn.Embedding(c['vocab_size'], c['n_embd']),
            wpe=nn.Embedding(c['block_size'], c['n_embd']),
            h=nn.ModuleList([Block(c) for _ in range(c['n_layer'])]), ln_f=nn.LayerNorm(c['n_embd'])))
        s.lm_head = nn.Linear(c['n_embd'], c['vocab_size'], bias=False)
    def forward(s, idx, targets):
        T = idx.shape[1]
        x = s.transformer.wte(idx) + s.transformer.wpe(torch.arange(T))
        for b in s.transformer.h: x = b(x)
        logits = s.lm_head(s.transformer.ln_f(x))
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
]]

local function pyrepr(t)   -- nested Lua lists as a Python literal
  if type(t) ~= 'table' then return ('%.17g'):format(t) end
  local parts = {}
  for i, v in ipairs(t) do parts[i] = pyrepr(v) end
  return '[' .. table.concat(parts, ',') .. ']'
end

local function named(model)
  local t = {}
  for name, p in model:named_parameters() do t[name] = p end
  return t
end

local function sorted_names(model)
  local names = {}
  for name in pairs(named(model)) do names[#names + 1] = name end
  table.sort(names)
  return names
end

describe('flowtext.gpt', function()
  teardown(H.remove_tmpdirs)
  local torch_it = H.torch_ok() and it or pending

  torch_it('forward, loss, gradients and one AdamW step equal PyTorch nanoGPT (1e-5)', function()
    flow.manual_seed(3)
    local model = gpt.GPT(CFG)
    local params = named(model)
    local names = sorted_names(model)
    local idx = flow.randint(1, CFG.vocab_size + 1, {3, 10})
    local tgt = flow.randint(1, CFG.vocab_size + 1, {3, 10})
    local lines = {TORCH_GPT, ('c = dict(vocab_size=%d, block_size=%d, n_layer=%d, n_head=%d, n_embd=%d)'):format(
      CFG.vocab_size, CFG.block_size, CFG.n_layer, CFG.n_head, CFG.n_embd), 'm = GPT(c)', 'sd = {}'}
    for _, n in ipairs(names) do
      lines[#lines + 1] = ('sd[%q] = torch.tensor(%s)'):format(n, pyrepr(params[n]:double():totable()))
    end
    lines[#lines + 1] = 'm.load_state_dict(sd, strict=True)'
    lines[#lines + 1] = ('idx = torch.tensor(%s) - 1; tgt = torch.tensor(%s) - 1'):format(
      pyrepr(idx:totable()), pyrepr(tgt:totable()))
    lines[#lines + 1] = [[
opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1)
logits, loss = m(idx, tgt)
opt.zero_grad(); loss.backward()
print(' '.join(repr(v) for v in logits.flatten().tolist()))
print(repr(loss.item()))
names = sorted(dict(m.named_parameters()))
P = dict(m.named_parameters())
for n in names: print(' '.join(repr(v) for v in P[n].grad.flatten().tolist()))
opt.step()
print(repr(m(idx, tgt)[1].item()))
for n in names: print(' '.join(repr(v) for v in P[n].detach().flatten().tolist()))
]]
    local out = H.python_lines(table.concat(lines, '\n'))
    assert.is_true(#out == 3 + 2 * #names, table.concat(out, '\n'))

    local opt = flow.optim.AdamW(model:parameters(), {lr = 1e-3, weight_decay = 0.1})
    local logits, loss = model(idx, tgt)
    opt:zero_grad()
    loss:backward()
    H.close(logits:reshape(-1), H.numbers(out[1]), 1e-5, 'logits')
    H.close({loss:item()}, H.numbers(out[2]), 1e-5, 'loss')
    for i, n in ipairs(names) do
      H.close(params[n].grad:reshape(-1), H.numbers(out[2 + i]), 1e-5, 'grad of ' .. n)
    end
    opt:step()
    local _, loss2 = model(idx, tgt)
    H.close({loss2:item()}, H.numbers(out[3 + #names]), 1e-5, 'loss after the step')
    for i, n in ipairs(names) do
      H.close(params[n]:reshape(-1), H.numbers(out[3 + #names + i]), 1e-5, n .. ' after the step')
    end
  end)

  it('the cached forward equals the full forward, position by position', function()
    flow.manual_seed(5)
    local model = gpt.GPT(CFG)
    model:eval()
    local idx = flow.randint(1, CFG.vocab_size + 1, {2, 9})
    local full = model(idx)
    local cache = model:new_cache()
    local a = model(idx:narrow(2, 1, 4), nil, cache)      -- a prompt of 4, then 2 + 3 more
    local b = model(idx:narrow(2, 5, 2), nil, cache)
    local c = model(idx:narrow(2, 7, 3), nil, cache)
    assert.equal(9, cache.len)
    H.close(flow.cat({a, b, c}, 2), full, 1e-5, 'cached logits')
  end)

  it('greedy generation with the key/value cache equals generation without it, token for token', function()
    flow.manual_seed(7)
    local model = gpt.GPT(CFG)
    local idx = flow.randint(1, CFG.vocab_size + 1, {2, 3})
    -- 20 new tokens: past block_size 12, so the sliding window is covered too
    local with = model:generate(idx, 20, {temperature = 0})
    local without = model:generate(idx, 20, {temperature = 0, use_cache = false})
    assert.same({2, 23}, H.shape(with))
    assert.same(without:totable(), with:totable())
    assert.same(idx:totable(), with:narrow(2, 1, 3):totable())
    -- sampling draws from the global generator: the same seed, the same ids
    flow.manual_seed(1)
    local s1 = model:generate(idx, 10, {temperature = 0.9, top_k = 5, top_p = 0.9})
    flow.manual_seed(1)
    local s2 = model:generate(idx, 10, {temperature = 0.9, top_k = 5, top_p = 0.9, use_cache = false})
    assert.same(s1:totable(), s2:totable())
    -- top_k = 1 is greedy
    assert.same(with:narrow(2, 1, 13):totable(), model:generate(idx, 10, {top_k = 1}):totable())
    -- a tiny top_p keeps only the most likely id: greedy again
    assert.same(with:narrow(2, 1, 13):totable(), model:generate(idx, 10, {top_p = 1e-9}):totable())
  end)

  it('generation edge cases behave as documented', function()
    local model = gpt.GPT(CFG)
    local idx = flow.tensor({{1, 2}}, {dtype = flow.int64})
    local same = model:generate(idx, 0)
    assert.same({{1, 2}}, same:totable())
    H.raises(function() model:generate(flow.zeros({1, 0}, {dtype = flow.int64}), 5) end,
      'at least one token', '[1, 0]')
    H.raises(function() model:generate(idx, -1) end, 'max_new_tokens must be >= 0')
    H.raises(function() model:generate(idx, 3, {top_p = 0}) end, 'top_p')
    H.raises(function() model:generate(idx, 3, {topk = 3}) end, "unknown option 'topk'", 'top_k')
  end)

  it('bad input names the shape', function()
    local model = gpt.GPT(CFG)
    H.raises(function() model(flow.tensor({{1, 12, 3}}, {dtype = flow.int64})) end,
      'GPT: idx [1, 3] holds id 12, outside the vocabulary 1..11')
    H.raises(function() model(flow.tensor({{0, 1}}, {dtype = flow.int64})) end, '[1, 2]', 'id 0')
    H.raises(function() model(flow.ones({2, 13}, {dtype = flow.int64})) end,
      'GPT: idx [2, 13] is past the position table (block_size 12)')
    local cache = model:new_cache()
    model(flow.ones({1, 10}, {dtype = flow.int64}), nil, cache)
    H.raises(function() model(flow.ones({1, 3}, {dtype = flow.int64}), nil, cache) end,
      'idx [1, 3] after 10 cached positions is past the position table (block_size 12)')
    H.raises(function() model(flow.ones({2, 3})) end, 'integer ids', '[2, 3]')
    H.raises(function() model(flow.ones({6}, {dtype = flow.int64})) end, '[batch, time]', '[6]')
    H.raises(function() gpt.GPT({n_embd = 10, n_head = 4}) end, 'n_embd 10 is not a multiple of n_head 4')
    H.raises(function() gpt.GPT({n_layers = 2}) end, "unknown option 'n_layers'", 'n_layer')
  end)

  local onnx_py = H.onnx_python()
  local onnx_it = onnx_py and it or pending
  onnx_it('exported to ONNX (dynamic batch and sequence) it agrees with onnxruntime'
    .. (onnx_py and '' or ' (no onnxruntime: sh spec/onnx/setup_onnxruntime.sh)'), function()
    flow.manual_seed(9)
    local model = gpt.GPT(CFG)
    model:eval()
    local d = H.tmpdir()
    local function fwd(idx) return model(idx) end
    local batches = {flow.randint(1, CFG.vocab_size + 1, {2, 7}), flow.randint(1, CFG.vocab_size + 1, {3, 12}),
                     flow.randint(1, CFG.vocab_size + 1, {1, 1})}
    flow.onnx.export(fwd, {batches[1]}, d .. '/gpt.onnx', {input_names = {'idx'}, output_names = {'logits'},
      dynamic_axes = {idx = {[1] = 'batch', [2] = 'seq'}, logits = {[1] = 'batch', [2] = 'seq'}}})
    local manifest = assert(io.open(d .. '/manifest.txt', 'w'))
    for i, idx in ipairs(batches) do
      flow.save({idx = idx}, ('%s/in%d.safetensors'):format(d, i))
      flow.save({logits = flow.no_grad(function() return fwd(idx) end)}, ('%s/out%d.safetensors'):format(d, i))
      manifest:write(('batch%d\t%s/gpt.onnx\t%s/in%d.safetensors\t%s/out%d.safetensors\t1e-5\n'):format(
        i, d, d, i, d, i))
    end
    manifest:close()
    local out = H.capture(('%s spec/onnx/check_onnx.py %s/manifest.txt 2>&1'):format(onnx_py, d))
    local ok = 0
    for line in out:gmatch('[^\n]+') do
      assert.truthy(line:match('^batch%d+\tok\t'), out)
      ok = ok + 1
    end
    assert.equal(3, ok, out)
  end)
end)
