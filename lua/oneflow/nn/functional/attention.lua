-- oneflow.nn.functional.attention: scaled_dot_product_attention, one fused C
-- op (core/ops/attention.c: blocked, online softmax, forward and backward).
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local A = require 'oneflow._args'

local C, out1 = core.C, core.out1
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

return F
