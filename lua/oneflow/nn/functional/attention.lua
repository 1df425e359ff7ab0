-- oneflow.nn.functional.attention: scaled_dot_product_attention, one fused C
-- op (core/ops/attention.c: blocked, online softmax, forward and backward);
-- multi_head_attention_forward, which uses it when no weights are asked for.
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local A = require 'oneflow._args'
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'
local dropout = require 'oneflow.nn.functional.dropout'
local linear = require 'oneflow.nn.functional.linear'

local C, out1 = core.C, core.out1
local parse, fail, shape_str = U.parse, U.fail, U.shape_str
local F = {}

local spec = {{'attn_mask', nil}, {'dropout_p', 0}, {'is_causal', false}, {'scale', nil},
              {'enable_gqa', false}}
local OP = 'scaled_dot_product_attention'

--- F.scaled_dot_product_attention(q [*, L, E], k [*, S, E], v [*, S, Ev],
-- {attn_mask =, dropout_p = 0, is_causal = false, scale = 1 / sqrt(E),
-- enable_gqa = false}) -> [*, L, Ev]: softmax(q k^T * scale + mask) v.
-- A boolean attn_mask is true where attention is allowed (PyTorch's
-- convention here); a floating mask is added; either broadcasts to
-- [*, L, S]. is_causal lets query i see keys 1..i. With enable_gqa, the
-- heads (dim -3) of q may be a multiple of those of k and v: each key/value
-- head serves consecutive query heads. dropout_p drops attention weights
-- (scaling the rest by 1 / (1 - p)) with the global generator.
function F.scaled_dot_product_attention(q, k, v, ...)
  local a = A.parse(OP, spec, ...)
  A.check_tensor(OP, q, 'query', 1)
  A.check_tensor(OP, k, 'key', 2)
  A.check_tensor(OP, v, 'value', 3)
  local mask = A.handle(OP, a.attn_mask, 'attn_mask')
  local scale = a.scale or 1 / math.sqrt(q:size(-1))
  return T.call1(C.of_scaled_dot_product_attention, q.p, k.p, v.p, mask, a.dropout_p,
                 a.is_causal and 1 or 0, scale, a.enable_gqa and 1 or 0, out1)
end

-- Global tensors: all broadcast; without a mask or GQA also q, k, v split
-- on the batch (dim 1) or on the heads (dim -3) -- attention is independent
-- per (batch, head), so each rank runs the kernel on its shard and the
-- output keeps the split (data or head-parallel attention).
local R = require 'oneflow.distributed.rules'
F.scaled_dot_product_attention = T.sbp_fn(OP, function(ctx)
  local sig, has = R.signer(ctx, {'query', 'key', 'value'})
  local sigs = {sig({}, R.B)}
  local nd = #ctx.shapes[1]
  if has.attn_mask or R.opt(ctx, 99, 'enable_gqa') or nd < 3 then return sigs end
  for _, d in ipairs(nd >= 4 and {1, nd - 2} or {nd - 2}) do
    sigs[#sigs + 1] = sig({query = R.S(d), key = R.S(d), value = R.S(d)}, R.S(d))
  end
  return sigs
end, F.scaled_dot_product_attention)

local mha_spec = {{'query', U.REQUIRED}, {'key', U.REQUIRED}, {'value', U.REQUIRED},
  {'embed_dim_to_check', U.REQUIRED}, {'num_heads', U.REQUIRED}, {'in_proj_weight', nil},
  {'in_proj_bias', nil}, {'bias_k', nil}, {'bias_v', nil}, {'add_zero_attn', false},
  {'dropout_p', 0}, {'out_proj_weight', U.REQUIRED}, {'out_proj_bias', nil}, {'training', true},
  {'key_padding_mask', nil}, {'need_weights', true}, {'attn_mask', nil},
  {'use_separate_proj_weight', false}, {'q_proj_weight', nil}, {'k_proj_weight', nil},
  {'v_proj_weight', nil}, {'static_k', nil}, {'static_v', nil}, {'average_attn_weights', true},
  {'is_causal', false}}

-- a mask as an additive float mask (bool: true = not allowed -> -inf)
local function additive(m, like)
  if m.dtype.name == 'bool' then
    return flow.zeros(m:size():totable(), {dtype = like.dtype}):masked_fill(m, -math.huge)
  end
  return m
end

-- attn_mask ([L, S] or [N * H, L, S]) and key_padding_mask ([N, S]), each
-- true or -inf where attention is not allowed, as one mask for the fused
-- kernel (true = allowed): a lone boolean mask is negated, anything else
-- becomes one additive mask
local function sdpa_mask(attn_mask, kpm, n, h, l, s, like)
  local ms = {}
  if attn_mask ~= nil then
    ms[1] = attn_mask:dim() == 3 and attn_mask:view(n, h, l, s) or attn_mask
  end
  if kpm ~= nil then ms[#ms + 1] = kpm:view(n, 1, 1, s) end
  if #ms == 0 then return nil end
  if #ms == 1 and ms[1].dtype.name == 'bool' then return ms[1]:logical_not() end
  local sum
  for _, m in ipairs(ms) do
    m = additive(m, like)
    sum = sum and sum + m or m
  end
  return sum
end

-- heads [N * H, L, hd] -> [L, N, E] through out_proj (unbatched: [L, E]);
-- mk(t) notes a tensor made here that does not leave, and returns it
local function finish(out, a, l, n, e, unbatched, mk)
  out = mk(mk(mk(out:transpose(1, 2)):contiguous()):view(l, n, e))
  out = linear.linear(out, a.out_proj_weight, a.out_proj_bias)
  if unbatched then out = mk(out):squeeze(2) end
  return out
end

local function same(t) return t end

-- Without weights to return, the tensors made on the way (projections,
-- head views, copies, the kernel's output) are released as soon as the
-- result is made, where no gradient is recorded and nothing traces (which
-- key values by address): their storage goes at once, not when Lua's
-- collector runs (doc/nn.md, "Values a forward frees"). Never a tensor
-- given (`given`: the inputs, masks and weights) nor the result.
local function release_made(made, result, given)
  for _, t in ipairs(made) do
    local keep = rawequal(t, result)
    for i = 1, given.n do keep = keep or rawequal(t, given[i]) end
    if not keep then core.release(t) end
  end
end

-- x [S, N*H or N, ...] with one more step along dim 1 holding `row`
local function append_row(x, row) return flow.cat({x, row}, 1) end
local function pad_last(m)
  if m == nil then return nil end
  local shape = m:size():totable()
  shape[#shape] = 1
  return flow.cat({m, flow.zeros(shape, {dtype = m.dtype})}, -1)
end

--- F.multi_head_attention_forward(query [L, N, E], key [S, N, Ek], value
-- [S, N, Ev], embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
-- bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
-- {training = true, key_padding_mask =, need_weights = true, attn_mask =,
-- use_separate_proj_weight = false, q_proj_weight =, k_proj_weight =,
-- v_proj_weight =, static_k =, static_v =, average_attn_weights = true,
-- is_causal = false}) -> output [L, N, E], weights ([N, L, S] averaged over
-- heads or [N, H, L, S]; nil without need_weights). PyTorch's function
-- (sequence-first; 2-D inputs are one unbatched sequence). Boolean masks are
-- true where attention is not allowed; float masks are added.
function F.multi_head_attention_forward(...)
  local a = parse('multi_head_attention_forward', mha_spec, ...)
  local q, k, v = a.query, a.key, a.value
  local given = {n = 14, q, k, v, a.key_padding_mask, a.attn_mask, a.static_k, a.static_v, a.in_proj_weight,
                 a.in_proj_bias, a.q_proj_weight, a.k_proj_weight, a.v_proj_weight, a.bias_k, a.bias_v}
  local made, mk = {}, same
  if not a.need_weights and core.may_release() then
    mk = function(t)
      if t ~= nil then made[#made + 1] = t end
      return t
    end
  end
  local unbatched = q:dim() == 2
  if q:dim() ~= 2 and q:dim() ~= 3 then
    fail(('multi_head_attention_forward: expected query of 2 or 3 dims, got %s'):format(shape_str(q)))
  end
  if unbatched then
    q, k, v = mk(q:unsqueeze(2)), mk(k:unsqueeze(2)), mk(v:unsqueeze(2))
    if a.key_padding_mask ~= nil then a.key_padding_mask = mk(a.key_padding_mask:unsqueeze(1)) end
  end
  local l, n, e = q:size(1), q:size(2), q:size(3)
  local h = a.num_heads
  if e ~= a.embed_dim_to_check then
    fail(('multi_head_attention_forward: query has embed dim %d, expected %d (embed_dim_to_check)'):format(
      e, a.embed_dim_to_check))
  end
  local hd = math.floor(e / h)
  if hd * h ~= e then
    fail(('multi_head_attention_forward: embed dim %d is not divisible by num_heads %d'):format(e, h))
  end
  local wq, wk, wv
  if a.use_separate_proj_weight then
    wq, wk, wv = a.q_proj_weight, a.k_proj_weight, a.v_proj_weight
    if wq == nil or wk == nil or wv == nil then
      fail('multi_head_attention_forward: use_separate_proj_weight needs q_proj_weight, '
        .. 'k_proj_weight and v_proj_weight')
    end
  else
    if a.in_proj_weight == nil then
      fail('multi_head_attention_forward: in_proj_weight is required without use_separate_proj_weight')
    end
    wq, wk, wv = unpack(a.in_proj_weight:chunk(3, 1))
    mk(wq); mk(wk); mk(wv)
  end
  local bq, bk, bv
  if a.in_proj_bias ~= nil then
    bq, bk, bv = unpack(a.in_proj_bias:chunk(3, 1))
    mk(bq); mk(bk); mk(bv)
  end
  q = mk(linear.linear(q, wq, bq))
  if a.static_k == nil then k = mk(linear.linear(k, wk, bk)) end
  if a.static_v == nil then v = mk(linear.linear(v, wv, bv)) end
  local attn_mask, kpm = a.attn_mask, a.key_padding_mask
  if attn_mask == nil and a.is_causal then
    attn_mask = mk(mk(flow.ones(l, k:size(1), {dtype = flow.bool})):triu(1))
  end
  if (a.bias_k == nil) ~= (a.bias_v == nil) then
    fail('multi_head_attention_forward: give both bias_k and bias_v or neither')
  end
  if a.bias_k ~= nil then
    if a.static_k ~= nil or a.static_v ~= nil then
      fail('multi_head_attention_forward: bias_k/bias_v cannot be combined with static_k/static_v')
    end
    k = append_row(k, a.bias_k:reshape(1, 1, e):expand(1, n, e))
    v = append_row(v, a.bias_v:reshape(1, 1, e):expand(1, n, e))
    attn_mask, kpm = pad_last(attn_mask), pad_last(kpm)
  end
  -- [L, N, E] -> [N * H, L, hd]
  q = mk(mk(q:reshape(l, n * h, hd)):transpose(1, 2))
  k = a.static_k or mk(mk(k:reshape(k:size(1), n * h, hd)):transpose(1, 2))
  v = a.static_v or mk(mk(v:reshape(v:size(1), n * h, hd)):transpose(1, 2))
  if a.add_zero_attn then
    k = flow.cat({k, flow.zeros({n * h, 1, hd}, {dtype = k.dtype})}, 2)
    v = flow.cat({v, flow.zeros({n * h, 1, v:size(3)}, {dtype = v.dtype})}, 2)
    attn_mask, kpm = pad_last(attn_mask), pad_last(kpm)
  end
  local s = k:size(2)
  if kpm ~= nil and (kpm:dim() ~= 2 or kpm:size(1) ~= n or kpm:size(2) ~= s) then
    fail(('multi_head_attention_forward: expected key_padding_mask of size [%d,%d], got %s'):format(
      n, s, shape_str(kpm)))
  end
  if not a.need_weights then
    -- no weights to return: the fused kernel, which never forms [L, S]
    local out = mk(F.scaled_dot_product_attention(mk(mk(q:contiguous()):view(n, h, l, hd)),
      mk(mk(k:contiguous()):view(n, h, s, hd)), mk(mk(v:contiguous()):view(n, h, s, v:size(3))),
      {attn_mask = mk(sdpa_mask(attn_mask, kpm, n, h, l, s, q)),
       dropout_p = a.training and a.dropout_p or 0, scale = 1 / math.sqrt(hd)}))
    local result = finish(mk(out:view(n * h, l, v:size(3))), a, l, n, e, unbatched, mk)
    release_made(made, result, given)
    return result, nil
  end
  local scores = flow.bmm(q * (1 / math.sqrt(hd)), k:transpose(2, 3)):view(n, h, l, s)
  if attn_mask ~= nil then
    local m = additive(attn_mask, scores)
    if m:dim() == 3 then m = m:view(n, h, l, s) end
    scores = scores + m
  end
  if kpm ~= nil then
    scores = scores + additive(kpm, scores):view(n, 1, 1, s)
  end
  local attn = flow.softmax(scores, -1)
  if a.dropout_p > 0 and a.training then attn = dropout.dropout(attn, a.dropout_p, true) end
  local out = finish(flow.bmm(attn:reshape(n * h, l, s), v), a, l, n, e, unbatched, same)
  local w = attn
  if a.average_attn_weights then w = w:mean(2) end
  if unbatched then w = w:squeeze(1) end
  return out, w
end

return F
