-- oneflow.nn.transformer_decoder: TransformerDecoderLayer, TransformerDecoder
-- and Transformer, with PyTorch's parameter names (self_attn, multihead_attn,
-- linear1, linear2, norm1..3; encoder.layers.0..., encoder.norm,
-- decoder.layers.0..., decoder.norm), so weights load from torch checkpoints.
--   local model = nn.Transformer({d_model = 64, nhead = 4, batch_first = true})
--   local mask = nn.Transformer.generate_square_subsequent_mask(tgt:size(2))
--   local out = model(src, tgt, {tgt_mask = mask, src_key_padding_mask = pad})
local check_options = require('oneflow._args').check_options
local DECODER_OPTS = {'tgt_mask', 'memory_mask', 'tgt_key_padding_mask', 'memory_key_padding_mask',
                      'tgt_is_causal', 'memory_is_causal'}
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local init = require 'oneflow.nn.initialization'
local normalization = require 'oneflow.nn.normalization'
local transformer = require 'oneflow.nn.transformer'

local Module, parse, fail, shape_str = module.Module, U.parse, U.fail, U.shape_str
local MHA = transformer.MultiheadAttention
local M = {}

local parts = transformer._parts
local attend, feed_forward = parts.attend, parts.feed_forward
-- values freed once read where oneflow.nn.module's rules allow (doc/nn.md,
-- "Values a forward frees"); memory, the encoder's output, is never freed here
local frees, free, step, residual = module.frees, module.free, module.step, module.residual

------------------------------------------------------------------ TransformerDecoderLayer
local Layer = Module:subclass('TransformerDecoderLayer')
M.TransformerDecoderLayer = Layer

--- nn.TransformerDecoderLayer(d_model, nhead, {dim_feedforward = 2048,
-- dropout = 0.1, activation = 'relu' | 'gelu' | fn | module, layer_norm_eps =
-- 1e-5, batch_first = false, norm_first = false, bias = true}): self-attention,
-- attention over the encoder output (memory), feed-forward.
function Layer:__init(...)
  Module.__init(self)
  local a = parse('TransformerDecoderLayer', parts.layer_spec, ...)
  local attn_opts = {dropout = a.dropout, bias = a.bias, batch_first = a.batch_first, dtype = a.dtype}
  self.self_attn = MHA(a.d_model, a.nhead, attn_opts)
  self.multihead_attn = MHA(a.d_model, a.nhead, attn_opts)
  parts.feed_forward_parts(self, 'TransformerDecoderLayer', a, 3)
end

local function check_memory(name, tgt, memory)
  if not flow.is_tensor(memory) then
    fail(('%s: expected memory (the encoder output) as second argument, got %s'):format(name, type(memory)))
  end
  if memory:dim() ~= tgt:dim() or memory:size(-1) ~= tgt:size(-1) then
    fail(('%s: memory %s does not match tgt %s (same number of dims and last dim d_model expected)')
         :format(name, shape_str(memory), shape_str(tgt)))
  end
end

--- forward(tgt, memory, {tgt_mask =, memory_mask =, tgt_key_padding_mask =,
-- memory_key_padding_mask =, tgt_is_causal =, memory_is_causal =})
function Layer:forward(tgt, memory, opts)
  opts = check_options('TransformerDecoderLayer', opts, DECODER_OPTS)
  check_memory('TransformerDecoderLayer', tgt, memory)
  local tm, tk, tc = opts.tgt_mask, opts.tgt_key_padding_mask, opts.tgt_is_causal
  local mm, mk, mc = opts.memory_mask, opts.memory_key_padding_mask, opts.memory_is_causal
  local f = frees(self, tgt)
  local x, x2, out
  if self.norm_first then
    local h = self.norm1(tgt)
    local a = attend(self.self_attn, self.dropout1, h, h, tm, tk, tc)
    free(h, f, a)
    x = residual(tgt, a, f)
    local n2 = self.norm2(x)
    local c = attend(self.multihead_attn, self.dropout2, n2, memory, mm, mk, mc)
    if not rawequal(n2, x) then free(n2, f, c) end
    x2 = residual(x, c, f)
    local n3 = self.norm3(x2)
    local b = feed_forward(self, n3, self.dropout3, f)
    if not rawequal(n3, x2) then free(n3, f, b) end
    out = residual(x2, b, f)
  else
    x = step(self.norm1, residual(tgt, attend(self.self_attn, self.dropout1, tgt, tgt, tm, tk, tc), f), f)
    x2 = step(self.norm2, residual(x, attend(self.multihead_attn, self.dropout2, x, memory, mm, mk, mc), f), f)
    out = step(self.norm3, residual(x2, feed_forward(self, x2, self.dropout3, f), f), f)
  end
  free(x, f, x2)
  free(x2, f, out)
  return out
end
module.keeps_no_tensors(Layer)

------------------------------------------------------------------ TransformerDecoder
local Decoder = Module:subclass('TransformerDecoder')
M.TransformerDecoder = Decoder

--- nn.TransformerDecoder(decoder_layer, num_layers, {norm =}): num_layers
-- deep copies of decoder_layer (layers.0, layers.1, ...), then norm.
function Decoder:__init(layer, num_layers, opts)
  Module.__init(self)
  parts.stack_layers(self, 'TransformerDecoder', layer, num_layers, opts)
end

--- forward(tgt, memory, {tgt_mask =, memory_mask =, tgt_key_padding_mask =,
-- memory_key_padding_mask =, tgt_is_causal =, memory_is_causal =})
function Decoder:forward(tgt, memory, opts)
  opts = check_options('TransformerDecoder', opts, DECODER_OPTS)
  local layer_opts = {tgt_mask = opts.tgt_mask, memory_mask = opts.memory_mask,
                      tgt_key_padding_mask = opts.tgt_key_padding_mask,
                      memory_key_padding_mask = opts.memory_key_padding_mask,
                      tgt_is_causal = opts.tgt_is_causal, memory_is_causal = opts.memory_is_causal}
  local f = frees(self, tgt)
  local x = tgt
  for _, layer in ipairs(self.layers) do
    local y = layer(x, memory, layer_opts)
    free(x, f, y)
    x = y
  end
  if self.norm ~= nil then x = step(self.norm, x, f) end
  return x
end
module.keeps_no_tensors(Decoder)

------------------------------------------------------------------ Transformer
local Transformer = Module:subclass('Transformer')
M.Transformer = Transformer

local spec = {{'d_model', 512}, {'nhead', 8}, {'num_encoder_layers', 6}, {'num_decoder_layers', 6},
              {'dim_feedforward', 2048}, {'dropout', 0.1}, {'activation', 'relu'},
              {'custom_encoder', nil}, {'custom_decoder', nil}, {'layer_norm_eps', 1e-5},
              {'batch_first', false}, {'norm_first', false}, {'bias', true},
              {'device', nil}, {'dtype', nil}}

--- nn.Transformer({d_model = 512, nhead = 8, num_encoder_layers = 6,
-- num_decoder_layers = 6, dim_feedforward = 2048, dropout = 0.1, activation =
-- 'relu', custom_encoder =, custom_decoder =, layer_norm_eps = 1e-5,
-- batch_first = false, norm_first = false, bias = true}): an encoder (with a
-- final LayerNorm) and a decoder (with a final LayerNorm); matrices start
-- xavier-uniform as in PyTorch.
function Transformer:__init(...)
  Module.__init(self)
  local a = parse('Transformer', spec, ...)
  local layer_opts = {dim_feedforward = a.dim_feedforward, dropout = a.dropout,
                      activation = parts.activation_fn('Transformer', a.activation),
                      layer_norm_eps = a.layer_norm_eps, batch_first = a.batch_first,
                      norm_first = a.norm_first, bias = a.bias, dtype = a.dtype}
  local norm_opts = {eps = a.layer_norm_eps, bias = a.bias, dtype = a.dtype}
  if a.custom_encoder ~= nil then self.encoder = a.custom_encoder
  else
    local layer = transformer.TransformerEncoderLayer(a.d_model, a.nhead, layer_opts)
    self.encoder = transformer.TransformerEncoder(layer, a.num_encoder_layers,
                                                  {norm = normalization.LayerNorm(a.d_model, norm_opts)})
  end
  if a.custom_decoder ~= nil then self.decoder = a.custom_decoder
  else
    local layer = Layer(a.d_model, a.nhead, layer_opts)
    self.decoder = Decoder(layer, a.num_decoder_layers, {norm = normalization.LayerNorm(a.d_model, norm_opts)})
  end
  self.d_model, self.nhead, self.batch_first = a.d_model, a.nhead, a.batch_first
  for _, p in ipairs(self:parameters()) do
    if p:dim() > 1 then init.xavier_uniform_(p) end
  end
end

--- forward(src, tgt, {src_mask =, tgt_mask =, memory_mask =,
-- src_key_padding_mask =, tgt_key_padding_mask =, memory_key_padding_mask =,
-- src_is_causal =, tgt_is_causal =, memory_is_causal =}): src [S, N, E],
-- tgt [T, N, E] ([N, S, E], [N, T, E] with batch_first; [S, E], [T, E]
-- unbatched) -> [T, N, E].
function Transformer:forward(src, tgt, opts)
  opts = check_options('Transformer', opts, {'src_mask', 'src_key_padding_mask', 'src_is_causal', 'tgt_mask',
                                             'memory_mask', 'tgt_key_padding_mask', 'memory_key_padding_mask',
                                             'tgt_is_causal', 'memory_is_causal'})
  if not flow.is_tensor(src) or not flow.is_tensor(tgt) then
    fail('Transformer: expected src and tgt tensors')
  end
  local batched = src:dim() == 3
  local bdim = self.batch_first and 1 or 2
  if batched and (tgt:dim() ~= 3 or src:size(bdim) ~= tgt:size(bdim)) then
    fail(('Transformer: the batch number of src %s and tgt %s must be equal (dim %d%s)'):format(
      shape_str(src), shape_str(tgt), bdim, self.batch_first and ', batch_first' or ''))
  end
  if src:size(-1) ~= self.d_model or tgt:size(-1) ~= self.d_model then
    fail(('Transformer: the feature number of src %s and tgt %s must be equal to d_model %d'):format(
      shape_str(src), shape_str(tgt), self.d_model))
  end
  local memory = self.encoder(src, {mask = opts.src_mask, src_key_padding_mask = opts.src_key_padding_mask,
                                    is_causal = opts.src_is_causal})
  local out = self.decoder(tgt, memory, {tgt_mask = opts.tgt_mask, memory_mask = opts.memory_mask,
                                         tgt_key_padding_mask = opts.tgt_key_padding_mask,
                                         memory_key_padding_mask = opts.memory_key_padding_mask,
                                         tgt_is_causal = opts.tgt_is_causal,
                                         memory_is_causal = opts.memory_is_causal})
  if not rawequal(memory, tgt) then free(memory, frees(self, src), out) end
  return out
end
module.keeps_no_tensors(Transformer)

--- nn.Transformer.generate_square_subsequent_mask(sz, {device =, dtype =}):
-- [sz, sz] float mask, -inf above the diagonal and 0 elsewhere (also callable
-- as model:generate_square_subsequent_mask(sz)).
function Transformer.generate_square_subsequent_mask(sz, opts, extra)
  if module.is_module(sz) then sz, opts = opts, extra end
  if type(sz) ~= 'number' or sz < 0 or sz ~= math.floor(sz) then
    fail(('Transformer.generate_square_subsequent_mask: sz must be a non-negative integer, got %s')
         :format(tostring(sz)))
  end
  opts = check_options('generate_square_subsequent_mask', opts, {device = true, dtype = true})
  local blocked = flow.ones(sz, sz, {dtype = flow.bool, device = opts.device}):triu(1)
  return flow.zeros(sz, sz, {dtype = opts.dtype, device = opts.device}):masked_fill(blocked, -math.huge)
end

return M
