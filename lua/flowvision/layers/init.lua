-- flowvision.layers (vision.layers): timm-style building blocks as nn.Modules.
--   SEModule/SqueezeExcite/SE, EcaModule/ECA, CbamModule/CBAM, BAM, NonLocalAttn/NonLocal
--   DropPath, DropBlock2d (+ drop_path, drop_block_2d, drop_block_fast_2d)
--   ConvNormAct/ConvBnAct, PatchEmbed, SelectAdaptivePool2d/Pooler
--   trunc_normal_, trunc_normal_tf_, variance_scaling_, lecun_normal_
--   make_divisible, to_2tuple, get_padding, create_act_layer
local L = {}
for _, name in ipairs({'basic', 'drop', 'attention', 'weight_init'}) do
  for k, v in pairs(require('flowvision.layers.' .. name)) do L[k] = v end
end
return L
