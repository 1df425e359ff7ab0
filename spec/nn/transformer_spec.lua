local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional

local f64 = {dtype = flow.float64}

local function keys_of(t)
  local r = {}
  for k in pairs(t) do r[#r + 1] = k end
  table.sort(r)
  return r
end

-- attention for one batch element, head by head: q [L, E], k/v [S, E];
-- mask [L, S] bool (true = blocked) or nil
local function ref_attention(m, q, k, v, mask)
  local e, h = m.embed_dim, m.num_heads
  local hd = e / h
  local w, b = m.in_proj_weight, m.in_proj_bias
  local qp = q:matmul(w:narrow(1, 1, e):t()) + b:narrow(1, 1, e)
  local kp = k:matmul(w:narrow(1, e + 1, e):t()) + b:narrow(1, e + 1, e)
  local vp = v:matmul(w:narrow(1, 2 * e + 1, e):t()) + b:narrow(1, 2 * e + 1, e)
  local heads, weights = {}, nil
  for i = 1, h do
    local qi, ki, vi = qp:narrow(2, (i - 1) * hd + 1, hd), kp:narrow(2, (i - 1) * hd + 1, hd),
                       vp:narrow(2, (i - 1) * hd + 1, hd)
    local s = qi:matmul(ki:t()) / math.sqrt(hd)
    if mask then s = s:masked_fill(mask, -math.huge) end
    local a = F.softmax(s, 2)
    weights = weights and weights + a or a
    heads[i] = a:matmul(vi)
  end
  local out = flow.cat(heads, 2):matmul(m.out_proj.weight:t()) + m.out_proj.bias
  return out, weights / h
end

describe('nn.MultiheadAttention', function()
  it('has PyTorch parameter names and init', function()
    local m = nn.MultiheadAttention(8, 2)
    assert.same({'in_proj_bias', 'in_proj_weight', 'out_proj.bias', 'out_proj.weight'}, keys_of(m:state_dict()))
    assert.same({24, 8}, H.shape(m.in_proj_weight))
    assert.equals(0, m.in_proj_bias:abs():sum():item())
    assert.equals(0, m.out_proj.bias:abs():sum():item())
    local bound = math.sqrt(6 / (24 + 8))
    assert.is_true(m.in_proj_weight:abs():max():item() <= bound)
    local kv = nn.MultiheadAttention(8, 2, {kdim = 3, vdim = 5})
    assert.same({'in_proj_bias', 'k_proj_weight', 'out_proj.bias', 'out_proj.weight', 'q_proj_weight',
                 'v_proj_weight'}, keys_of(kv:state_dict()))
    assert.same({8, 5}, H.shape(kv.v_proj_weight))
    H.raises(function() nn.MultiheadAttention(8, 3) end, 'embed_dim must be divisible by num_heads')
  end)

  it('matches a head-by-head reference, with averaged weights', function()
    local m = nn.MultiheadAttention(6, 3, {dtype = flow.float64})
    flow.no_grad(function() m.in_proj_bias:normal_(); m.out_proj.bias:normal_() end)
    local q, k, v = flow.randn(4, 2, 6, f64), flow.randn(5, 2, 6, f64), flow.randn(5, 2, 6, f64)
    local out, w = m(q, k, v)
    assert.same({4, 2, 6}, H.shape(out))
    assert.same({2, 4, 5}, H.shape(w))
    for n = 1, 2 do
      local ro, rw = ref_attention(m, q:select(2, n), k:select(2, n), v:select(2, n))
      H.close(out:select(2, n), ro:totable(), 1e-10)
      H.close(w[n], rw:totable(), 1e-10)
    end
    local _, all = m(q, k, v, {average_attn_weights = false})
    assert.same({2, 3, 4, 5}, H.shape(all))
    local _, none = m(q, k, v, {need_weights = false})
    assert.is_nil(none)
  end)

  it('applies attn_mask, is_causal and key_padding_mask', function()
    local m = nn.MultiheadAttention(4, 2, {dtype = flow.float64, batch_first = true})
    local x = flow.randn(2, 3, 4, f64)
    local causal = flow.ones(3, 3, {dtype = flow.bool}):triu(1)
    local out, w = m(x, x, x, {attn_mask = causal})
    H.close(w[1]:triu(1), flow.zeros(3, 3):totable())
    local ro, rw = ref_attention(m, x[2], x[2], x[2], causal)
    H.close(out[2], ro:totable(), 1e-10)
    H.close(w[2], rw:totable(), 1e-10)
    local out2 = m(x, x, x, {is_causal = true})
    H.close(out2, out:totable(), 1e-12)
    local kpm = flow.tensor({{false, false, true}, {false, true, true}})
    local _, wk = m(x, x, x, {key_padding_mask = kpm})
    H.close(wk:select(3, 3), flow.zeros(2, 3):totable())
    H.close(wk[2]:select(2, 2), {0, 0, 0})
    H.close(wk:sum(3), flow.ones(2, 3):totable(), 1e-12)
    local float_mask = flow.zeros(3, 3, f64):masked_fill(causal, -math.huge)
    H.close(m(x, x, x, {attn_mask = float_mask}), out:totable(), 1e-12)
  end)

  it('batch_first and unbatched inputs give the same results', function()
    local m = nn.MultiheadAttention(4, 2, {dtype = flow.float64})
    local mb = nn.MultiheadAttention(4, 2, {dtype = flow.float64, batch_first = true})
    mb:load_state_dict(m:state_dict())
    local x = flow.randn(3, 2, 4, f64)
    local y = m(x, x, x)
    H.close(mb(x:transpose(1, 2), x:transpose(1, 2), x:transpose(1, 2)):transpose(1, 2), y:totable(), 1e-12)
    local x1 = x:select(2, 1)
    H.close(m(x1, x1, x1), y:select(2, 1):totable(), 1e-12)
  end)
end)

describe('nn.TransformerEncoderLayer and nn.TransformerEncoder', function()
  it('have PyTorch state-dict keys', function()
    local layer = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16})
    assert.same({'linear1.bias', 'linear1.weight', 'linear2.bias', 'linear2.weight', 'norm1.bias',
                 'norm1.weight', 'norm2.bias', 'norm2.weight', 'self_attn.in_proj_bias',
                 'self_attn.in_proj_weight', 'self_attn.out_proj.bias', 'self_attn.out_proj.weight'},
                keys_of(layer:state_dict()))
    local enc = nn.TransformerEncoder(layer, 2, {norm = nn.LayerNorm(8)})
    local sd = enc:state_dict()
    assert.is_not_nil(sd['layers.0.self_attn.in_proj_weight'])
    assert.is_not_nil(sd['layers.1.linear2.bias'])
    assert.is_not_nil(sd['norm.weight'])
    assert.are_not.equal(enc.layers[1].linear1.weight, enc.layers[2].linear1.weight)
    H.close(enc.layers[1].linear1.weight, enc.layers[2].linear1.weight:totable())
  end)

  it('computes the post-norm and pre-norm blocks', function()
    for _, norm_first in ipairs({false, true}) do
      local layer = nn.TransformerEncoderLayer(4, 2, {dim_feedforward = 8, dropout = 0, dtype = flow.float64,
                                                       norm_first = norm_first, activation = 'gelu'})
      local x = flow.randn(3, 2, 4, f64)
      local function sa(z) return (layer.self_attn(z, z, z)) end
      local function ff(z) return layer.linear2(F.gelu(layer.linear1(z))) end
      local want
      if norm_first then
        local y = x + sa(layer.norm1(x))
        want = y + ff(layer.norm2(y))
      else
        local y = layer.norm1(x + sa(x))
        want = layer.norm2(y + ff(y))
      end
      H.close(layer(x), want:totable(), 1e-10)
    end
  end)

  it('runs a stack with masks in eval mode deterministically', function()
    local layer = nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, batch_first = true})
    local enc = nn.TransformerEncoder(layer, 2)
    enc:eval()
    local x = flow.randn(2, 5, 8)
    local kpm = flow.tensor({{false, false, false, true, true}, {false, false, false, false, false}})
    local y = enc(x, {src_key_padding_mask = kpm, is_causal = true,
                      mask = flow.ones(5, 5, {dtype = flow.bool}):triu(1)})
    assert.same({2, 5, 8}, H.shape(y))
    H.close(enc(x, {src_key_padding_mask = kpm, mask = flow.ones(5, 5, {dtype = flow.bool}):triu(1)}),
            y:totable(), 1e-6)
    enc:train()
    assert.is_true(enc.layers[2].dropout.training)
  end)
end)

describe('F.scaled_dot_product_attention', function()
  it('computes softmax(q k^T / sqrt(E) + mask) v', function()
    local q, k, v = flow.randn(2, 3, 4, f64), flow.randn(2, 5, 4, f64), flow.randn(2, 5, 6, f64)
    local s = q:matmul(k:transpose(2, 3)) / 2
    H.close(F.scaled_dot_product_attention(q, k, v), F.softmax(s, -1):matmul(v):totable(), 1e-12)
    local allowed = flow.rand(3, 5):gt(0.3)
    allowed[{{}, 1}] = true
    local want = F.softmax(s:masked_fill(allowed:logical_not(), -math.huge), -1):matmul(v)
    H.close(F.scaled_dot_product_attention(q, k, v, {attn_mask = allowed}), want:totable(), 1e-12)
    local qc = flow.randn(2, 5, 4, f64)
    local causal = flow.ones(5, 5, {dtype = flow.bool}):tril()
    H.close(F.scaled_dot_product_attention(qc, k, v, {is_causal = true}),
            F.scaled_dot_product_attention(qc, k, v, {attn_mask = causal}):totable(), 1e-12)
    H.close(F.scaled_dot_product_attention(q, k, v, {scale = 1}),
            F.softmax(q:matmul(k:transpose(2, 3)), -1):matmul(v):totable(), 1e-12)
  end)
end)
