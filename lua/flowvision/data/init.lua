-- flowvision.data (vision.data): timm-style augmentation and losses.
--   Mixup, CutMix, mixup_target, one_hot, rand_bbox, cutmix_bbox_and_lam   (data/mixup.lua)
--   RandomErasing                                                         (data/random_erasing.lua)
--   AutoAugment, RandAugment, AugMix, AugmentOp, *_transform builders       (data/auto_augment.lua)
--   SoftTargetCrossEntropy, LabelSmoothingCrossEntropy                     (data/loss.lua)
local D = {}
for _, name in ipairs({'flowvision.data.mixup', 'flowvision.data.auto_augment', 'flowvision.data.loss'}) do
  for k, v in pairs(require(name)) do D[k] = v end
end
D.RandomErasing = require 'flowvision.data.random_erasing'
D.random = require 'flowvision.data.random'
D.AugMixAugment = D.AugMix
return D
