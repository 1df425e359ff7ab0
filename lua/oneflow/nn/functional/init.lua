-- oneflow.nn.functional (usually `F`): activations, dropout, linear,
-- embedding, distances and losses written here, plus the kernel-backed
-- functions of oneflow.ops.nn_conv (convolution, pooling), nn_norm
-- (normalization), nn_loss (cross_entropy, nll_loss), nn_pad (pad) and
-- nn_resample (interpolate), which take precedence over same-named composed
-- versions. Every function takes PyTorch's positional arguments and/or an
-- options table with the same names.
-- Required before oneflow itself: load oneflow, which loads this module.
if package.loaded.oneflow == nil then
  package.loaded['oneflow.nn.functional'] = nil
  return require('oneflow').nn.functional
end
local F = {}

for _, part in ipairs({'activation', 'dropout', 'linear', 'normalization', 'distance', 'loss', 'attention',
                       'fold', 'shuffle', 'sampling'}) do
  for k, v in pairs(require('oneflow.nn.functional.' .. part)) do F[k] = v end
end

for _, name in ipairs({'oneflow.ops.nn_conv', 'oneflow.ops.nn_norm', 'oneflow.ops.nn_loss',
                       'oneflow.ops.nn_pad', 'oneflow.ops.nn_resample'}) do
  for k, v in pairs(require(name)) do
    if type(v) == 'function' then F[k] = v end
  end
end
F.upsample = F.upsample or F.interpolate

-- Every public function checks its tensor arguments first, so a nil or a
-- wrong type says "relu: argument 1 (input) must be a tensor, got nil" at the
-- user's line rather than failing inside. FIRST names the first argument
-- where it is not `input` (false: not a tensor); SECOND lists the functions
-- whose second argument is a tensor too.
local A = require 'oneflow._args'
local FIRST = {
  _reduce = false, legacy_reduction = false,
  cosine_similarity = 'x1', pairwise_distance = 'x1', margin_ranking_loss = 'input1',
  cosine_embedding_loss = 'input1', triplet_margin_loss = 'anchor',
  scaled_dot_product_attention = 'query', affine_grid = 'theta', ctc_loss = 'log_probs',
  bilinear = 'input1', multi_head_attention_forward = 'query',
  distillation_loss = 'student_logits',
}
local SECOND = {
  linear = 'weight', bilinear = 'input2', cosine_similarity = 'x2', pairwise_distance = 'x2',
  margin_ranking_loss = 'input2', cosine_embedding_loss = 'input2', triplet_margin_loss = 'positive',
  scaled_dot_product_attention = 'key', grid_sample = 'grid', multi_head_attention_forward = 'key',
  mse_loss = 'target', l1_loss = 'target', smooth_l1_loss = 'target', huber_loss = 'target',
  binary_cross_entropy = 'target', binary_cross_entropy_with_logits = 'target', kl_div = 'target',
  soft_margin_loss = 'target', cross_entropy = 'target', nll_loss = 'target',
  hinge_embedding_loss = 'target', multilabel_soft_margin_loss = 'target',
  poisson_nll_loss = 'target', gaussian_nll_loss = 'target', multi_margin_loss = 'target',
  multilabel_margin_loss = 'target', distillation_loss = 'teacher_logits',
}
local is_tensor, describe, fail = A.is_tensor, A.describe, A.fail
local function arg_error(name, i, what, v)
  if A.quantized_describe and A.quantized_describe(v) then
    fail(('%s: argument %d (%s) is %s, which this op does not support; dequantize() it first or use '
      .. 'the quantized module (flow.quantization.convert)'):format(name, i, what, describe(v)))
  end
  fail(('%s: argument %d (%s) must be a tensor, got %s'):format(name, i, what, describe(v)))
end
local function checked(name, f, first, second)
  if second then
    return function(x, y, ...)
      if not is_tensor(x) and describe(x) ~= 'a global tensor' then arg_error(name, 1, first, x) end
      if not is_tensor(y) and describe(y) ~= 'a global tensor' then arg_error(name, 2, second, y) end
      return f(x, y, ...)
    end
  end
  return function(x, ...)
    if not is_tensor(x) and describe(x) ~= 'a global tensor' then arg_error(name, 1, first, x) end
    return f(x, ...)
  end
end
local names = {}
for k, v in pairs(F) do
  if type(v) == 'function' and FIRST[k] ~= false and k:sub(1, 1) ~= '_' then names[#names + 1] = k end
end
for _, k in ipairs(names) do F[k] = checked(k, F[k], FIRST[k] or 'input', SECOND[k]) end


-- Doc comments of the functions made in loops above (help() and LDoc read them).

--- F.adaptive_avg_pool1d(x, output_size): average pooling to a fixed output length.
-- @function F.adaptive_avg_pool1d

--- F.adaptive_avg_pool2d(x, output_size): average pooling to a fixed output size.
-- @function F.adaptive_avg_pool2d

--- F.adaptive_avg_pool3d(x, output_size): average pooling to a fixed output size.
-- @function F.adaptive_avg_pool3d

--- F.adaptive_max_pool1d(x, output_size, {return_indices = false}): max pooling to a fixed output length.
-- @function F.adaptive_max_pool1d

--- F.adaptive_max_pool2d(x, output_size, {return_indices = false}): max pooling to a fixed output size.
-- @function F.adaptive_max_pool2d

--- F.adaptive_max_pool3d(x, output_size, {return_indices = false}): max pooling to a fixed output size.
-- @function F.adaptive_max_pool3d

--- F.avg_pool1d(x, kernel_size, {stride =, padding = 0, ceil_mode = false, count_include_pad = true}): 1-d
-- average pooling.
-- @function F.avg_pool1d

--- F.avg_pool2d(x, kernel_size, {stride =, padding = 0, ceil_mode = false, count_include_pad = true,
-- divisor_override =}): 2-d average pooling.
-- @function F.avg_pool2d

--- F.avg_pool3d(x, kernel_size, {stride =, padding = 0, ceil_mode = false, count_include_pad = true}): 3-d
-- average pooling.
-- @function F.avg_pool3d

--- F.conv1d(x, weight, bias?, {stride = 1, padding = 0, dilation = 1, groups = 1}): 1-d convolution.
-- @function F.conv1d

--- F.conv2d(x, weight, bias?, {stride = 1, padding = 0, dilation = 1, groups = 1}): 2-d convolution; padding may
-- be 'same' or 'valid'.
-- @function F.conv2d

--- F.conv3d(x, weight, bias?, {stride = 1, padding = 0, dilation = 1, groups = 1}): 3-d convolution.
-- @function F.conv3d

--- F.conv_transpose1d(x, weight, bias?, {stride = 1, padding = 0, output_padding = 0, groups = 1, dilation = 1}):
-- 1-d transposed convolution.
-- @function F.conv_transpose1d

--- F.conv_transpose2d(x, weight, bias?, {stride = 1, padding = 0, output_padding = 0, groups = 1, dilation = 1}):
-- 2-d transposed convolution.
-- @function F.conv_transpose2d

--- F.conv_transpose3d(x, weight, bias?, {stride = 1, padding = 0, output_padding = 0, groups = 1, dilation = 1}):
-- 3-d transposed convolution.
-- @function F.conv_transpose3d

--- F.hardsigmoid(x, inplace = false): relu6(x + 3) / 6.
-- @function F.hardsigmoid

--- F.hardswish(x, inplace = false): x * relu6(x + 3) / 6.
-- @function F.hardswish

--- F.max_pool1d(x, kernel_size, {stride =, padding = 0, dilation = 1, return_indices = false, ceil_mode =
-- false}): 1-d max pooling.
-- @function F.max_pool1d

--- F.max_pool2d(x, kernel_size, {stride =, padding = 0, dilation = 1, return_indices = false, ceil_mode =
-- false}): 2-d max pooling.
-- @function F.max_pool2d

--- F.max_pool3d(x, kernel_size, {stride =, padding = 0, dilation = 1, return_indices = false, ceil_mode =
-- false}): 3-d max pooling.
-- @function F.max_pool3d

--- F.mish(x, inplace = false): x * tanh(softplus(x)).
-- @function F.mish

--- F.silu(x, inplace = false): x * sigmoid(x).
-- @function F.silu

--- F.sigmoid(x): 1 / (1 + exp(-x)).
-- @function F.sigmoid

--- F.tanh(x): hyperbolic tangent.
-- @function F.tanh

--- F.upsample(x, {size =, scale_factor =, mode = 'nearest', align_corners =}): the old name of F.interpolate.
-- @function F.upsample

return F
