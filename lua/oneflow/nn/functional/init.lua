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

return F
