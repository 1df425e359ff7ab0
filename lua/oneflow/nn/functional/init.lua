-- oneflow.nn.functional (usually `F`): activations, dropout, linear,
-- embedding, distances and losses written here, plus the kernel-backed
-- functions of oneflow.ops.nn_conv (convolution, pooling) and
-- oneflow.ops.nn_norm (normalization, interpolate, pad, cross_entropy,
-- nll_loss), which take precedence over same-named composed versions.
-- Required before oneflow itself: load oneflow, which loads this module.
if package.loaded.oneflow == nil then
  package.loaded['oneflow.nn.functional'] = nil
  return require('oneflow').nn.functional
end
local F = {}

for _, part in ipairs({'activation', 'dropout', 'linear', 'loss', 'attention', 'extras', 'sampling'}) do
  for k, v in pairs(require('oneflow.nn.functional.' .. part)) do F[k] = v end
end

for _, name in ipairs({'oneflow.ops.nn_conv', 'oneflow.ops.nn_norm'}) do
  for k, v in pairs(require(name)) do
    if type(v) == 'function' then F[k] = v end
  end
end
F.upsample = F.upsample or F.interpolate

return F
