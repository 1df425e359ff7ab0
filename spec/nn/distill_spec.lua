-- F.distillation_loss / nn.DistillationLoss against the formula in PyTorch.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local R = require 'spec.quantization.torch_ref'

local F, nn = flow.nn.functional, flow.nn

describe('distillation loss', function()
  it('alpha = 0 is cross entropy; alpha = 1 is the scaled soft term; checks its options', function()
    flow.manual_seed(4)
    local s, t = flow.randn(5, 4), flow.randn(5, 4)
    local y = flow.tensor({1, 2, 3, 4, 1}, {dtype = flow.int64})
    H.close(F.distillation_loss(s, t, y, {alpha = 0}), F.cross_entropy(s, y), 1e-6)
    local soft = F.kl_div(F.log_softmax(s / 3, 2), F.softmax(t / 3, 2), {reduction = 'batchmean'}) * 9
    H.close(F.distillation_loss(s, t, y, {alpha = 1, temperature = 3}), soft, 1e-6)
    H.close(F.distillation_loss(t, t, y, {alpha = 1}), 0, 1e-6)
    H.raises(function() F.distillation_loss(s, t, y, {temperature = 0}) end, 'temperature must be a positive')
    H.raises(function() F.distillation_loss(s, t, y, {alpha = 2}) end, 'alpha must be in [0, 1]')
    H.raises(function() F.distillation_loss(s, t:narrow(2, 1, 3), y) end, 'must both be [N, C]')
    H.raises(function() F.distillation_loss(s, t, y, {temprature = 2}) end, "unknown option 'temprature'")
  end)

  it('value and student gradient match PyTorch', function()
    if not R.available() then pending('PyTorch not installed for /usr/bin/python3') return end
    flow.manual_seed(5)
    local s, t = flow.randn(6, 5), flow.randn(6, 5) * 2
    local y = flow.tensor({1, 5, 2, 2, 4, 3}, {dtype = flow.int64})
    local sg = s:clone():requires_grad_(true)
    local l = nn.DistillationLoss({temperature = 2.5, alpha = 0.6})(sg, t, y)
    l:backward()
    local r = R.run(([==[
import torch, torch.nn.functional as F
s = torch.tensor(%s).reshape(6, 5).float().requires_grad_(); t = torch.tensor(%s).reshape(6, 5).float()
y = torch.tensor([0, 4, 1, 1, 3, 2])
T, a = 2.5, 0.6
soft = F.kl_div(F.log_softmax(s / T, 1), F.softmax(t / T, 1), reduction='batchmean')
l = a * T * T * soft + (1 - a) * F.cross_entropy(s, y)
l.backward()
print('l', repr(l.item())); print('g', ' '.join(repr(v) for v in s.grad.flatten().tolist())); print('done')
]==]):format(R.list(s), R.list(t)))
    H.close(l, r.l, 1e-5)
    H.close(sg.grad, r.g, 1e-5)
  end)
end)
