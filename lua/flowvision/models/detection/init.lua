-- flowvision.models.detection: SSD300-VGG16, SSDLite320-MobileNetV3,
-- RetinaNet-ResNet50-FPN and Faster R-CNN-ResNet50-FPN (inference), plus
-- the box operations (detection.ops: nms, batched_nms, box_iou, roi_align,
-- ...) and the shared pieces (detection._utils: anchors, transform, FPN).
-- Labels in the outputs are 1-based (torchvision's label + 1).
local M = {models = {}, classes = {}}
M.ops = require 'flowvision.models.detection.ops'
M.utils = require 'flowvision.models.detection._utils'

for _, f in ipairs({'faster_rcnn', 'retinanet', 'ssd'}) do
  local mod = require('flowvision.models.detection.' .. f)
  for k, v in pairs(mod.models) do M.models[k] = v end
  for k, v in pairs(mod.classes) do M.classes[k] = v end
end

return M
