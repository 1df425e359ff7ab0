-- oneflow.nn.transformer: MultiheadAttention, TransformerEncoderLayer and
-- TransformerEncoder with PyTorch's parameter names (in_proj_weight,
-- in_proj_bias, out_proj.weight, linear1, norm1, ...), composed from
-- matmul, softmax and masking ops.
--   local attn = nn.MultiheadAttention(64, 8, {batch_first = true})
--   local out, weights = attn(q, k, v, {key_padding_mask = pad, attn_mask = causal})
local check_options = require('oneflow._args').check_options
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local init = require 'oneflow.nn.initialization'
local F = require 'oneflow.nn.functional'
local linear = require 'oneflow.nn.linear'
local container = require 'oneflow.nn.container'
local dropout = require 'oneflow.nn.dropout'
local normalization = require 'oneflow.nn.normalization'

local Module, Parameter = module.Module, module.Parameter
local frees, free, step, residual = module.frees, module.free, module.step, module.residual
local parse, fail, shape_str = U.parse, U.fail, U.shape_str
local M = {}

------------------------------------------------------------------ MultiheadAttention
local MHA = Module:subclass('MultiheadAttention')
M.MultiheadAttention = MHA

local mha_spec = {{'embed_dim', U.REQUIRED}, {'num_heads', U.REQUIRED}, {'dropout', 0}, {'bias', true},
                  {'add_bias_kv', false}, {'add_zero_attn', false}, {'kdim', nil}, {'vdim', nil},
                  {'batch_first', false}, {'device', nil}, {'dtype', nil}}

--- nn.MultiheadAttention(embed_dim, num_heads, {dropout = 0, bias = true,
-- kdim =, vdim =, batch_first = false})
function MHA:__init(...)
  Module.__init(self)
  local a = parse('MultiheadAttention', mha_spec, ...)
  if a.add_bias_kv or a.add_zero_attn then
    fail('MultiheadAttention: add_bias_kv and add_zero_attn are not supported')
  end
  local e, o = a.embed_dim, {dtype = a.dtype}
  self.embed_dim, self.num_heads, self.dropout, self.batch_first = e, a.num_heads, a.dropout, a.batch_first
  self.kdim, self.vdim = a.kdim or e, a.vdim or e
  self.head_dim = math.floor(e / a.num_heads)
  if self.head_dim * a.num_heads ~= e then fail('MultiheadAttention: embed_dim must be divisible by num_heads') end
  self._qkv_same_embed_dim = self.kdim == e and self.vdim == e
  if self._qkv_same_embed_dim then
    self.in_proj_weight = Parameter(flow.empty({3 * e, e}, o))
  else
    self.q_proj_weight = Parameter(flow.empty({e, e}, o))
    self.k_proj_weight = Parameter(flow.empty({e, self.kdim}, o))
    self.v_proj_weight = Parameter(flow.empty({e, self.vdim}, o))
  end
  if a.bias then self.in_proj_bias = Parameter(flow.empty({3 * e}, o))
  else self:register_parameter('in_proj_bias', nil) end
  -- quantize_dynamic leaves it float, as PyTorch's: forward reads its weight
  self.out_proj = linear.NonDynamicallyQuantizableLinear(e, e, a.bias, {dtype = a.dtype})
  self:reset_parameters()
end

function MHA:reset_parameters()
  if self._qkv_same_embed_dim then init.xavier_uniform_(self.in_proj_weight)
  else
    init.xavier_uniform_(self.q_proj_weight)
    init.xavier_uniform_(self.k_proj_weight)
    init.xavier_uniform_(self.v_proj_weight)
  end
  if self.in_proj_bias ~= nil then
    init.zeros_(self.in_proj_bias)
    init.zeros_(self.out_proj.bias)
  end
end

-- inputs -> [L, N, E] layout, and whether the batch dim was added
local function mha_layout(self, q, k, v)
  local unbatched = q:dim() == 2
  if q:dim() ~= 2 and q:dim() ~= 3 then
    fail(('MultiheadAttention: expected query of 2 or 3 dims, got %s'):format(shape_str(q)))
  end
  if q:size(-1) ~= self.embed_dim then
    fail(('MultiheadAttention: expected query with last dim %d (embed_dim), got %s'):format(
      self.embed_dim, shape_str(q)))
  end
  if unbatched then return q:unsqueeze(2), k:unsqueeze(2), v:unsqueeze(2), true end
  if self.batch_first then return q:transpose(1, 2), k:transpose(1, 2), v:transpose(1, 2), false end
  return q, k, v, false
end

--- forward(query, key, value, {key_padding_mask =, need_weights = true,
-- attn_mask =, average_attn_weights = true, is_causal = false}) -> output,
-- weights ([N, L, S] averaged over heads, or [N, H, L, S]; nil without need_weights).
-- Boolean masks are true where attention is not allowed; float masks are added.
function MHA:forward(query, key, value, opts)
  opts = check_options('MultiheadAttention', opts, {'key_padding_mask', 'need_weights', 'attn_mask',
                                                    'average_attn_weights', 'is_causal'})
  key, value = key or query, value or key or query
  local q, k, v, unbatched = mha_layout(self, query, key, value)
  local kpm = opts.key_padding_mask
  if unbatched and kpm ~= nil then kpm = kpm:unsqueeze(1) end
  local out, w = F.multi_head_attention_forward(q, k, v, self.embed_dim, self.num_heads,
    self.in_proj_weight, self.in_proj_bias, nil, nil, false, self.dropout, self.out_proj.weight,
    self.out_proj.bias, {training = self.training, key_padding_mask = kpm,
    need_weights = opts.need_weights ~= false, attn_mask = opts.attn_mask,
    use_separate_proj_weight = not self._qkv_same_embed_dim, q_proj_weight = self.q_proj_weight,
    k_proj_weight = self.k_proj_weight, v_proj_weight = self.v_proj_weight,
    average_attn_weights = opts.average_attn_weights ~= false, is_causal = opts.is_causal})
  local raw = out
  if unbatched then
    out = out:squeeze(2)
    if w ~= nil then w = w:squeeze(1) end
  elseif self.batch_first then out = out:transpose(1, 2) end
  -- the function's result handle goes now (its storage stays with out's view)
  free(raw, frees(self, query), out)
  return out, w
end

function MHA.extra_repr() return '' end
module.keeps_no_tensors(MHA)   -- (doc/nn.md, "Values a forward frees")

------------------------------------------------------------------ TransformerEncoderLayer
local Layer = Module:subclass('TransformerEncoderLayer')
M.TransformerEncoderLayer = Layer

local layer_spec = {{'d_model', U.REQUIRED}, {'nhead', U.REQUIRED}, {'dim_feedforward', 2048},
                    {'dropout', 0.1}, {'activation', 'relu'}, {'layer_norm_eps', 1e-5},
                    {'batch_first', false}, {'norm_first', false}, {'bias', true},
                    {'device', nil}, {'dtype', nil}}

local activations = {relu = F.relu, gelu = F.gelu}

-- the layer's activation: 'relu', 'gelu', a function or a module
local function activation_fn(name, act)
  if type(act) ~= 'string' then return act end
  if not activations[act] then
    fail(("%s: activation should be 'relu' or 'gelu', not '%s'"):format(name, act))
  end
  return activations[act]
end

-- the feed-forward part and the n layer norms of an encoder or decoder layer
-- (parsed options a), as PyTorch names them: linear1, dropout, linear2,
-- norm1..n, dropout1..n, activation
local function feed_forward_parts(self, name, a, n)
  local o = {dtype = a.dtype}
  self.linear1 = linear.Linear(a.d_model, a.dim_feedforward, a.bias, o)
  self.dropout = dropout.Dropout(a.dropout)
  self.linear2 = linear.Linear(a.dim_feedforward, a.d_model, a.bias, o)
  self.norm_first = a.norm_first
  local norm_opts = {eps = a.layer_norm_eps, bias = a.bias, dtype = a.dtype}
  for i = 1, n do
    self['norm' .. i] = normalization.LayerNorm(a.d_model, norm_opts)
    self['dropout' .. i] = dropout.Dropout(a.dropout)
  end
  self.activation = activation_fn(name, a.activation)
end

-- attention of x over kv through mha, then the given dropout module
local function attend(mha, drop, x, kv, mask, kpm, is_causal)
  return drop(mha(x, kv, kv, {attn_mask = mask, key_padding_mask = kpm, need_weights = false,
                              is_causal = is_causal}))
end

-- linear2(dropout(activation(linear1(x)))), then the given dropout module;
-- with f (the layer's frees(self, x)) each value made here is freed once
-- read, when the activation is one of ours or a module (a function of the
-- user might keep what it was given)
local builtin_activation = {[F.relu] = true, [F.gelu] = true}
local function feed_forward(self, x, drop, f)
  if f and not (builtin_activation[self.activation] or module.is_module(self.activation)) then f = false end
  local h = self.linear1(x)
  local a = self.activation(h)
  if not rawequal(h, x) then free(h, f, a) end
  return step(drop, step(self.linear2, step(self.dropout, a, f), f), f)
end

--- nn.TransformerEncoderLayer(d_model, nhead, {dim_feedforward = 2048,
-- dropout = 0.1, activation = 'relu' | 'gelu' | fn | module, layer_norm_eps =,
-- batch_first = false, norm_first = false, bias = true})
function Layer:__init(...)
  Module.__init(self)
  local a = parse('TransformerEncoderLayer', layer_spec, ...)
  self.self_attn = MHA(a.d_model, a.nhead, {dropout = a.dropout, bias = a.bias,
                                            batch_first = a.batch_first, dtype = a.dtype})
  feed_forward_parts(self, 'TransformerEncoderLayer', a, 2)
end

--- forward(src, {src_mask =, src_key_padding_mask =, is_causal =})
-- where oneflow.nn.module's rules allow (frees), the values made here are
-- freed once read and the residuals added into the branch's value (the
-- same bits as x + branch)
function Layer:forward(src, opts)
  opts = check_options('TransformerEncoderLayer', opts, {'src_mask', 'src_key_padding_mask', 'is_causal'})
  local f = frees(self, src)
  local mask, kpm, causal = opts.src_mask, opts.src_key_padding_mask, opts.is_causal
  local x, out
  if self.norm_first then
    local h = self.norm1(src)
    local a = attend(self.self_attn, self.dropout1, h, h, mask, kpm, causal)
    free(h, f, a)
    x = residual(src, a, f)
    local n2 = self.norm2(x)
    local b = feed_forward(self, n2, self.dropout2, f)
    if not rawequal(n2, x) then free(n2, f, b) end
    out = residual(x, b, f)
  else
    x = step(self.norm1, residual(src, attend(self.self_attn, self.dropout1, src, src, mask, kpm, causal), f), f)
    out = step(self.norm2, residual(x, feed_forward(self, x, self.dropout2, f), f), f)
  end
  free(x, f, out)
  return out
end
module.keeps_no_tensors(Layer)

------------------------------------------------------------------ TransformerEncoder
local Encoder = Module:subclass('TransformerEncoder')
--- nn.TransformerEncoder(encoder_layer, num_layers, {norm =}): num_layers copies of encoder_layer.
-- @function nn.TransformerEncoder
M.TransformerEncoder = Encoder

--- nn.TransformerEncoder(encoder_layer, num_layers, {norm =}): num_layers
-- deep copies of encoder_layer (layers.0, layers.1, ...), then norm.
-- self.layers = num_layers deep copies of layer, self.norm = opts.norm
local function stack_layers(self, name, layer, num_layers, opts)
  if not module.is_module(layer) then fail(name .. ': expected a layer module as first argument') end
  if type(num_layers) ~= 'number' or num_layers < 1 then
    fail(('%s: num_layers must be a positive number, got %s'):format(name, tostring(num_layers)))
  end
  opts = require('oneflow._args').check_options(name, opts, {'norm'})
  local layers = {}
  for i = 1, num_layers do layers[i] = layer:clone() end
  self.layers = container.ModuleList(layers)
  self.num_layers = num_layers
  if opts.norm then self.norm = opts.norm end
end

function Encoder:__init(layer, num_layers, opts)
  Module.__init(self)
  stack_layers(self, 'TransformerEncoder', layer, num_layers, opts)
end

--- forward(src, {mask =, src_key_padding_mask =, is_causal =})
function Encoder:forward(src, opts)
  opts = check_options('TransformerEncoder', opts, {'mask', 'src_key_padding_mask', 'is_causal'})
  local layer_opts = {src_mask = opts.mask, src_key_padding_mask = opts.src_key_padding_mask,
                      is_causal = opts.is_causal}
  local f = frees(self, src)
  local x = src
  for _, layer in ipairs(self.layers) do
    local y = layer(x, layer_opts)
    free(x, f, y)
    x = y
  end
  if self.norm ~= nil then x = step(self.norm, x, f) end
  return x
end
module.keeps_no_tensors(Encoder)

-- for the decoder (transformer_decoder.lua): the parts both layers share
M._parts = {layer_spec = layer_spec, feed_forward_parts = feed_forward_parts, attend = attend,
            feed_forward = feed_forward, stack_layers = stack_layers, activation_fn = activation_fn}
return M
