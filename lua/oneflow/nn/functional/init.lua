-- oneflow.nn.functional (usually `F`): activations, dropout, linear,
-- embedding, distances and losses written here, plus the kernel-backed
-- functions of oneflow.ops.nn_conv (convolution, pooling) and
-- oneflow.ops.nn_norm (normalization, interpolate, pad, cross_entropy,
-- nll_loss), which take precedence over same-named composed versions.
local F = {}

for _, part in ipairs({'activation', 'dropout', 'linear', 'loss', 'attention', 'extras', 'sampling'}) do
  for k, v in pairs(require('oneflow.nn.functional.' .. part)) do F[k] = v end
end

-- A kernel module not written yet is skipped; any other load error is real.
local function optional(name)
  local ok, mod = pcall(require, name)
  if ok then return type(mod) == 'table' and mod or {} end
  if tostring(mod):find("module '" .. name .. "' not found", 1, true) then return {} end
  error(mod, 0)
end

for _, name in ipairs({'oneflow.ops.nn_conv', 'oneflow.ops.nn_norm'}) do
  for k, v in pairs(optional(name)) do
    if type(v) == 'function' then F[k] = v end
  end
end
F.upsample = F.upsample or F.interpolate

return F
