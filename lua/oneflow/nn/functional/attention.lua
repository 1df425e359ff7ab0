-- oneflow.nn.functional.attention: scaled_dot_product_attention, composed
-- from matmul, softmax and masking (PyTorch semantics).
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'
local dropout = require 'oneflow.nn.functional.dropout'

local parse, fail, shape_str = U.parse, U.fail, U.shape_str
local F = {}

local spec = {{'attn_mask', nil}, {'dropout_p', 0}, {'is_causal', false}, {'scale', nil}}

--- F.scaled_dot_product_attention(q [*, L, E], k [*, S, E], v [*, S, Ev],
-- {attn_mask =, dropout_p = 0, is_causal = false, scale = 1 / sqrt(E)}):
-- softmax(q k^T * scale + mask) v. A boolean attn_mask is true where
-- attention is allowed (PyTorch's convention here); a float mask is added.
function F.scaled_dot_product_attention(q, k, v, ...)
  local a = parse('scaled_dot_product_attention', spec, ...)
  local e = q:size(-1)
  if k:size(-1) ~= e then
    fail(('scaled_dot_product_attention: query %s and key %s differ in the last dim'):format(
      shape_str(q), shape_str(k)))
  end
  if a.is_causal and a.attn_mask ~= nil then
    fail('scaled_dot_product_attention: give attn_mask or is_causal, not both')
  end
  local scores = q:matmul(k:transpose(-2, -1)) * (a.scale or 1 / math.sqrt(e))
  local mask = a.attn_mask
  if a.is_causal then
    mask = flow.ones(q:size(-2), k:size(-2), {dtype = flow.bool}):tril()
  end
  if mask ~= nil then
    if mask.dtype.name == 'bool' then scores = scores:masked_fill(mask:logical_not(), -math.huge)
    else scores = scores + mask end
  end
  local attn = flow.softmax(scores, -1)
  if a.dropout_p > 0 then attn = dropout.dropout(attn, a.dropout_p, true) end
  return attn:matmul(v)
end

return F
