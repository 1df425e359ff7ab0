-- PyTorch common names added for issue 23: baddbmm, tensordot, flow.numel,
-- new_empty, unfold, retain_grad, F.gumbel_softmax,
-- F.multi_head_attention_forward (against PyTorch where it imports).
local flow = require 'oneflow'
local F = flow.nn.functional
local H = require 'spec.helpers'

local f64 = {dtype = flow.float64}

describe('common names', function()
  it('baddbmm: beta * c + alpha * bmm, c broadcast, beta = 0 ignores NaN', function()
    flow.manual_seed(1)
    local a, b, c = flow.randn(2, 3, 4, f64), flow.randn(2, 4, 5, f64), flow.randn(3, 5, f64)
    local r = flow.baddbmm(c, a, b, {beta = 0.5, alpha = 2})
    H.close(r, (c * 0.5 + flow.bmm(a, b) * 2):totable(), 1e-12)
    local nan = flow.full({2, 3, 5}, 0 / 0, f64)
    H.close(nan:baddbmm(a, b, {beta = 0}), flow.bmm(a, b):totable(), 1e-12)
    H.raises(function() flow.baddbmm(c, a, b, {gamma = 1}) end, 'baddbmm')
  end)

  it('tensordot: a count or dim lists, same as einsum, differentiable', function()
    flow.manual_seed(2)
    local a = flow.randn(3, 4, 5, {dtype = flow.float64, requires_grad = true})
    local b = flow.randn(4, 5, 6, f64)
    H.close(flow.tensordot(a, b), flow.einsum('ijk,jkl->il', a, b):totable(), 1e-12)
    local c = flow.randn(5, 3, f64)
    H.close(flow.tensordot(a, c, {{1, 3}, {2, 1}}), flow.einsum('ijk,ki->j', a, c):totable(), 1e-12)
    assert.are.same({3, 4, 5, 5, 3}, H.shape(flow.tensordot(a, c, 0)))
    flow.tensordot(a, b, 2):sum():backward()
    H.close(a.grad, b:sum(3):unsqueeze(1):expand(3, 4, 5):totable(), 1e-12)
    H.raises(function() flow.tensordot(a, c, {{1}, {1}}) end, 'does not match')
    H.raises(function() flow.tensordot(a, b, 4) end, 'dims must be')
  end)

  it('flow.numel and new_empty', function()
    local x = flow.zeros(2, 3, {dtype = flow.int32})
    assert.are.equal(6, flow.numel(x))
    local e = x:new_empty(4, 5)
    assert.are.same({4, 5}, H.shape(e))
    assert.are.equal('int32', e.dtype.name)
    assert.are.equal('float64', x:new_empty({2}, f64).dtype.name)
  end)

  it('unfold: windows along a dim as a new last dim (view or differentiable copy)', function()
    local x = flow.arange(1, 25, f64):view(4, 6)
    local u = x:unfold(2, 3, 2)
    assert.are.same({4, 2, 3}, H.shape(u))
    H.close(u[2], {{7, 8, 9}, {9, 10, 11}}, 0)
    x[2][7 - 6] = 100   -- a view: writes show through
    assert.are.equal(100, u[2][1][1]:item())
    local y = flow.arange(1, 8, f64):requires_grad_()
    local w = y:unfold(1, 3, 2)
    H.close(w, {{1, 2, 3}, {3, 4, 5}, {5, 6, 7}}, 0)
    w:sum():backward()
    H.close(y.grad, {1, 1, 2, 1, 2, 1, 1}, 0)
    H.raises(function() y:unfold(1, 9, 1) end, 'exceeds')
    H.raises(function() y:unfold(1, 2, 0) end, 'step must be positive')
    -- an 8-d tensor would unfold to 9 dims (it wrote past the shape buffer)
    H.raises(function() flow.zeros(1, 1, 1, 1, 1, 1, 1, 2):unfold(8, 1, 1) end,
             'unfold: at most 8 dims are supported, got 9')
  end)

  it('retain_grad keeps (and accumulates) a non-leaf gradient', function()
    local x = flow.tensor({1, 2, 3}, {dtype = flow.float64, requires_grad = true})
    local y = x * 2
    y:retain_grad()
    assert.is_true(y.retains_grad)
    local loss = (y * y):sum()
    loss:backward({retain_graph = true})
    H.close(y.grad, {4, 8, 12}, 0)
    loss:backward()
    H.close(y.grad, {8, 16, 24}, 0)
    H.close(x.grad, {16, 32, 48}, 0)
    H.raises(function() flow.zeros(2):retain_grad() end, 'does not require grad')
  end)

  it('gumbel_softmax: soft rows sum to 1, hard is one-hot with soft gradients, seeded', function()
    flow.manual_seed(7)
    local logits = flow.randn(1000, 4, {dtype = flow.float64, requires_grad = true})
    local y = F.gumbel_softmax(logits, {tau = 0.5})
    H.close(y:sum(2), flow.ones(1000, f64):totable(), 1e-12)
    local h = F.gumbel_softmax(logits, {hard = true})
    H.close(h:sum(2), flow.ones(1000, f64):totable(), 0)
    assert.are.equal(1000, h:eq(1):sum():item())
    h:select(2, 1):sum():backward()
    assert.is_true(logits.grad:abs():sum():item() > 0)
    flow.manual_seed(3)
    local p1 = F.gumbel_softmax(logits:detach())
    flow.manual_seed(3)
    H.close(F.gumbel_softmax(logits:detach()), p1:totable(), 0)
    -- the argmax of logits + Gumbel noise is a sample of softmax(logits)
    flow.manual_seed(4)
    local l = flow.tensor({{0, 1, 2}}, f64):expand(20000, 3)
    local freq = F.gumbel_softmax(l, {hard = true}):mean(1)
    H.close(freq, flow.softmax(flow.tensor({0, 1, 2}, f64), 1):totable(), 0.015)
    H.raises(function() F.gumbel_softmax(logits, {tau = 0}) end, 'tau must be positive')
  end)

  describe('multi_head_attention_forward', function()
    local check = H.torch_ok() and it or pending
    check('matches torch with bias_k/bias_v, add_zero_attn and a key padding mask', function()
      flow.manual_seed(5)
      local L, S, N, E, Hh = 3, 4, 2, 6, 2
      local q, k, v = flow.randn(L, N, E, f64), flow.randn(S, N, E, f64), flow.randn(S, N, E, f64)
      local wi, bi = flow.randn(3 * E, E, f64), flow.randn(3 * E, f64)
      local bk, bv = flow.randn(1, 1, E, f64), flow.randn(1, 1, E, f64)
      local wo, bo = flow.randn(E, E, f64), flow.randn(E, f64)
      local kpm = flow.tensor({{false, false, true, false}, {false, false, false, true}})
      local out, w = F.multi_head_attention_forward(q, k, v, E, Hh, wi, bi, bk, bv, true, 0, wo, bo,
        {key_padding_mask = kpm})
      local function lit(t) return 'torch.tensor(' .. H.pylist(t:reshape(-1):totable()) .. ').reshape('
        .. table.concat(t:size():totable(), ',') .. ')' end
      local ref = H.torch_rows(([==[
import torch.nn.functional as F
q, k, v = %s, %s, %s
out, w = F.multi_head_attention_forward(q, k, v, %d, %d, %s, %s, %s, %s, True, 0.0, %s, %s,
    key_padding_mask=torch.tensor([[False, False, True, False], [False, False, False, True]]))
print(' '.join(repr(x) for x in out.reshape(-1).tolist()))
print(' '.join(repr(x) for x in w.reshape(-1).tolist()))
]==]):format(lit(q), lit(k), lit(v), E, Hh, lit(wi), lit(bi), lit(bk), lit(bv), lit(wo), lit(bo)))
      H.close(out:reshape(-1), ref[1], 1e-10)
      H.close(w:reshape(-1), ref[2], 1e-10)
    end)

    it('agrees with nn.MultiheadAttention and checks embed_dim_to_check', function()
      flow.manual_seed(6)
      local mha = flow.nn.MultiheadAttention(8, 2, {dtype = flow.float64})
      local x = flow.randn(5, 3, 8, f64)
      local o1, w1 = mha:forward(x, x, x)
      local o2, w2 = F.multi_head_attention_forward(x, x, x, 8, 2, mha.in_proj_weight, mha.in_proj_bias,
        nil, nil, false, 0, mha.out_proj.weight, mha.out_proj.bias)
      H.close(o1, o2:totable(), 1e-12)
      H.close(w1, w2:totable(), 1e-12)
      H.raises(function()
        F.multi_head_attention_forward(x, x, x, 6, 2, mha.in_proj_weight, nil, nil, nil, false, 0,
          mha.out_proj.weight)
      end, 'embed_dim_to_check')
    end)
  end)
end)
