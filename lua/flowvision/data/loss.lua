-- flowvision.data losses (timm/loss/cross_entropy.py):
--   vision.data.SoftTargetCrossEntropy()(logits, soft_targets)   -- mean over the batch
--   vision.data.LabelSmoothingCrossEntropy({smoothing = 0.1})(logits, labels)  -- labels 1-based
local flow = require 'oneflow'

local nn = flow.nn
local F = nn.functional
local M = {}

local function check(op, x, target)
  if not flow.is_tensor(x) or x:dim() ~= 2 then
    error(op .. ': expected logits [N, C], got ' .. (flow.is_tensor(x) and x:dim() .. '-d' or type(x)), 4)
  end
  if not flow.is_tensor(target) then
    error(op .. ': expected a target tensor, got ' .. type(target), 4)
  end
end

local SoftTargetCrossEntropy = nn.Module:subclass('SoftTargetCrossEntropy')
M.SoftTargetCrossEntropy = SoftTargetCrossEntropy
function SoftTargetCrossEntropy:__init() nn.Module.__init(self) end
--- sum(-target * log_softmax(x), -1), averaged over the batch.
function SoftTargetCrossEntropy.forward(_, x, target)
  check('SoftTargetCrossEntropy', x, target)
  if target:size(1) ~= x:size(1) or target:size(2) ~= x:size(2) then
    error(('SoftTargetCrossEntropy: target shape [%s] does not match the logits [%s]')
          :format(table.concat(target:size():totable(), ', '), table.concat(x:size():totable(), ', ')), 3)
  end
  local loss = (target * F.log_softmax(x, -1)):sum(-1) * -1
  return loss:mean()
end

local LabelSmoothingCrossEntropy = nn.Module:subclass('LabelSmoothingCrossEntropy')
M.LabelSmoothingCrossEntropy = LabelSmoothingCrossEntropy
--- LabelSmoothingCrossEntropy({smoothing = 0.1}) or (0.1)
function LabelSmoothingCrossEntropy:__init(smoothing)
  nn.Module.__init(self)
  if type(smoothing) == 'table' then smoothing = smoothing.smoothing end
  smoothing = smoothing or 0.1
  if smoothing < 0 or smoothing >= 1 then
    error('LabelSmoothingCrossEntropy: smoothing must be in [0, 1), got ' .. tostring(smoothing), 3)
  end
  self.smoothing, self.confidence = smoothing, 1 - smoothing
end
function LabelSmoothingCrossEntropy:forward(x, target)
  check('LabelSmoothingCrossEntropy', x, target)
  local logprobs = F.log_softmax(x, -1)
  local nll = logprobs:gather(2, target:long():view(-1, 1)):squeeze(2) * -1
  local smooth = logprobs:mean(-1) * -1
  return (nll * self.confidence + smooth * self.smoothing):mean()
end
function LabelSmoothingCrossEntropy:extra_repr() return ('smoothing=%g'):format(self.smoothing) end

return M
