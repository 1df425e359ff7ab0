-- flowvision.layers attention blocks, with timm's parameter names:
--   SEModule / SqueezeExcite (fc1, fc2), EcaModule (conv), CbamModule
--   (channel.fc1/fc2, spatial.conv.conv/bn), NonLocalAttn (t, p, g, z, norm),
--   and BAM (Park et al. 2018; channel_att.gate_c.*, spatial_att.gate_s.*).
-- Inputs are [B, C, H, W]; outputs have the input's shape.
local A = require 'oneflow._args'
local flow = require 'oneflow'
local B = require 'flowvision.layers.basic'

local nn = flow.nn
local F = nn.functional
local L = {}

local function check4(op, x)
  if not flow.is_tensor(x) or x:dim() ~= 4 then
    error(op .. ': expected input [B, C, H, W], got ' .. (flow.is_tensor(x) and x:dim() .. '-d tensor' or type(x)), 4)
  end
end

------------------------------------------------------------------ SE
local SEModule = nn.Module:subclass('SEModule')
L.SEModule, L.SqueezeExcite, L.SE = SEModule, SEModule, SEModule
--- SEModule(channels, {rd_ratio = 1/16, rd_channels =, rd_divisor = 8, add_maxpool = false,
--           bias = true, act_layer = 'relu', norm_layer = nil, gate_layer = 'sigmoid'})
function SEModule:__init(channels, opts)
  nn.Module.__init(self)
  opts = A.check_options('SEModule', opts, {
    act_layer = true, add_maxpool = true, bias = true, gate_layer = true, norm_layer = true,
    rd_channels = true, rd_divisor = true, rd_ratio = true})
  local rd = opts.rd_channels or B.make_divisible(channels * (opts.rd_ratio or 1 / 16), opts.rd_divisor or 8, nil, 0)
  self.add_maxpool = opts.add_maxpool or false
  local bias = opts.bias ~= false
  self.fc1 = nn.Conv2d(channels, rd, 1, {bias = bias})
  self.bn = opts.norm_layer and opts.norm_layer(rd) or nn.Identity()
  self.act = B.create_act_layer(opts.act_layer or 'relu')
  self.fc2 = nn.Conv2d(rd, channels, 1, {bias = bias})
  self.gate = B.create_act_layer(opts.gate_layer or 'sigmoid')
end
function SEModule:forward(x)
  check4('SEModule', x)
  local s = x:mean({3, 4}, true)
  if self.add_maxpool then s = s * 0.5 + x:amax({3, 4}, true) * 0.5 end
  s = self.fc2(self.act(self.bn(self.fc1(s))))
  return x * self.gate(s)
end

------------------------------------------------------------------ ECA
local EcaModule = nn.Module:subclass('EcaModule')
L.EcaModule, L.ECA = EcaModule, EcaModule
--- EcaModule(channels, {kernel_size = 3, gamma = 2, beta = 1, gate_layer = 'sigmoid'}):
-- with channels given, kernel_size = max(odd(|log2(C) + beta| / gamma), 3).
function EcaModule:__init(channels, opts)
  nn.Module.__init(self)
  opts = A.check_options('EcaModule', opts, {
    beta = true, gamma = true, gate_layer = true, kernel_size = true})
  local k = opts.kernel_size or 3
  if channels then
    local t = math.floor(math.abs(math.log(channels) / math.log(2) + (opts.beta or 1)) / (opts.gamma or 2))
    k = math.max(t % 2 == 1 and t or t + 1, 3)
  end
  self.kernel_size = k
  self.conv = nn.Conv1d(1, 1, k, {padding = math.floor((k - 1) / 2), bias = false})
  self.gate = B.create_act_layer(opts.gate_layer or 'sigmoid')
end
function EcaModule:forward(x)
  check4('EcaModule', x)
  local b = x:size(1)
  local y = x:mean({3, 4}):view(b, 1, -1)
  y = self.gate(self.conv(y)):view(b, -1, 1, 1)
  return x * y:expand_as(x)
end

------------------------------------------------------------------ CBAM
local ChannelAttn = nn.Module:subclass('ChannelAttn')
L.ChannelAttn = ChannelAttn
function ChannelAttn:__init(channels, opts)
  nn.Module.__init(self)
  opts = A.check_options('ChannelAttn', opts, {
    act_layer = true, gate_layer = true, mlp_bias = true, rd_channels = true, rd_divisor = true, rd_ratio = true})
  local rd = opts.rd_channels or B.make_divisible(channels * (opts.rd_ratio or 1 / 16), opts.rd_divisor or 1, nil, 0)
  local bias = opts.mlp_bias or false
  self.fc1 = nn.Conv2d(channels, rd, 1, {bias = bias})
  self.act = B.create_act_layer(opts.act_layer or 'relu')
  self.fc2 = nn.Conv2d(rd, channels, 1, {bias = bias})
  self.gate = B.create_act_layer(opts.gate_layer or 'sigmoid')
end
function ChannelAttn:forward(x)
  local a = self.fc2(self.act(self.fc1(x:mean({3, 4}, true))))
  local m = self.fc2(self.act(self.fc1(x:amax({3, 4}, true))))
  return x * self.gate(a + m)
end

local SpatialAttn = nn.Module:subclass('SpatialAttn')
L.SpatialAttn = SpatialAttn
function SpatialAttn:__init(kernel_size, opts)
  nn.Module.__init(self)
  opts = A.check_options('SpatialAttn', opts, {gate_layer = true})
  self.conv = B.ConvNormAct(2, 1, kernel_size or 7, {apply_act = false})
  self.gate = B.create_act_layer(opts.gate_layer or 'sigmoid')
end
function SpatialAttn:forward(x)
  local a = flow.cat({x:mean(2, true), x:amax(2, true)}, 2)
  return x * self.gate(self.conv(a))
end

local CbamModule = nn.Module:subclass('CbamModule')
L.CbamModule, L.CBAM = CbamModule, CbamModule
--- CbamModule(channels, {rd_ratio = 1/16, rd_channels =, rd_divisor = 1, spatial_kernel_size = 7,
--             act_layer = 'relu', gate_layer = 'sigmoid', mlp_bias = false})
function CbamModule:__init(channels, opts)
  nn.Module.__init(self)
  opts = A.check_options('CbamModule', opts, {
    act_layer = true, gate_layer = true, mlp_bias = true, rd_channels = true, rd_divisor = true,
    rd_ratio = true, spatial_kernel_size = true})
  -- each half gets only the keys it knows
  local channel = {}
  for k, v in pairs(opts) do if k ~= 'spatial_kernel_size' then channel[k] = v end end
  self.channel = ChannelAttn(channels, channel)
  self.spatial = SpatialAttn(opts.spatial_kernel_size or 7, {gate_layer = opts.gate_layer})
end
function CbamModule:forward(x)
  check4('CbamModule', x)
  return self.spatial(self.channel(x))
end

------------------------------------------------------------------ BAM
local ChannelGate = nn.Module:subclass('ChannelGate')
function ChannelGate:__init(gate_channel, reduction_ratio, num_layers)
  nn.Module.__init(self)
  reduction_ratio, num_layers = reduction_ratio or 16, num_layers or 1
  local chans = {gate_channel}
  for _ = 1, num_layers do chans[#chans + 1] = math.floor(gate_channel / reduction_ratio) end
  chans[#chans + 1] = gate_channel
  local seq = {{'flatten', nn.Flatten()}}
  for i = 1, #chans - 2 do
    seq[#seq + 1] = {('gate_c_fc_%d'):format(i - 1), nn.Linear(chans[i], chans[i + 1])}
    seq[#seq + 1] = {('gate_c_bn_%d'):format(i), nn.BatchNorm1d(chans[i + 1])}
    seq[#seq + 1] = {('gate_c_relu_%d'):format(i), nn.ReLU()}
  end
  seq[#seq + 1] = {'gate_c_fc_final', nn.Linear(chans[#chans - 1], chans[#chans])}
  self.gate_c = nn.Sequential(seq)
end
function ChannelGate:forward(x)
  local pooled = F.avg_pool2d(x, {x:size(3), x:size(4)})
  return self.gate_c(pooled):unsqueeze(3):unsqueeze(4):expand_as(x)
end

local SpatialGate = nn.Module:subclass('SpatialGate')
function SpatialGate:__init(gate_channel, reduction_ratio, dilation_conv_num, dilation_val)
  nn.Module.__init(self)
  reduction_ratio, dilation_conv_num, dilation_val = reduction_ratio or 16, dilation_conv_num or 2, dilation_val or 4
  local rd = math.floor(gate_channel / reduction_ratio)
  local seq = {{'gate_s_conv_reduce0', nn.Conv2d(gate_channel, rd, 1)},
               {'gate_s_bn_reduce0', nn.BatchNorm2d(rd)}, {'gate_s_relu_reduce0', nn.ReLU()}}
  for i = 0, dilation_conv_num - 1 do
    seq[#seq + 1] = {('gate_s_conv_di_%d'):format(i),
                     nn.Conv2d(rd, rd, 3, {padding = dilation_val, dilation = dilation_val})}
    seq[#seq + 1] = {('gate_s_bn_di_%d'):format(i), nn.BatchNorm2d(rd)}
    seq[#seq + 1] = {('gate_s_relu_di_%d'):format(i), nn.ReLU()}
  end
  seq[#seq + 1] = {'gate_s_conv_final', nn.Conv2d(rd, 1, 1)}
  self.gate_s = nn.Sequential(seq)
end
function SpatialGate:forward(x) return self.gate_s(x):expand_as(x) end

local BAM = nn.Module:subclass('BAM')
L.BAM = BAM
--- BAM(gate_channel, {reduction_ratio = 16, num_layers = 1, dilation_conv_num = 2, dilation_val = 4}):
-- x * (1 + sigmoid(channel_gate(x) * spatial_gate(x))).
function BAM:__init(gate_channel, opts)
  nn.Module.__init(self)
  opts = A.check_options('BAM', opts, {
    dilation_conv_num = true, dilation_val = true, num_layers = true, reduction_ratio = true})
  if math.floor(gate_channel / (opts.reduction_ratio or 16)) < 1 then
    error(('BAM: gate_channel %d is smaller than reduction_ratio %d'):format(gate_channel,
          opts.reduction_ratio or 16), 3)
  end
  self.channel_att = ChannelGate(gate_channel, opts.reduction_ratio, opts.num_layers)
  self.spatial_att = SpatialGate(gate_channel, opts.reduction_ratio, opts.dilation_conv_num, opts.dilation_val)
end
function BAM:forward(x)
  check4('BAM', x)
  local att = (self.channel_att(x) * self.spatial_att(x)):sigmoid() + 1
  return att * x
end

------------------------------------------------------------------ Non-local
local NonLocalAttn = nn.Module:subclass('NonLocalAttn')
L.NonLocalAttn, L.NonLocal = NonLocalAttn, NonLocalAttn
--- NonLocalAttn(in_channels, {use_scale = true, rd_ratio = 1/8, rd_channels =, rd_divisor = 8}):
-- embedded-Gaussian non-local block with a residual; norm starts at zero
-- (the block is the identity at init), as timm.
function NonLocalAttn:__init(in_channels, opts)
  nn.Module.__init(self)
  opts = A.check_options('NonLocalAttn', opts, {
    rd_channels = true, rd_divisor = true, rd_ratio = true, use_scale = true})
  local rd = opts.rd_channels or B.make_divisible(in_channels * (opts.rd_ratio or 1 / 8), opts.rd_divisor or 8)
  self.scale = opts.use_scale == false and 1.0 or in_channels ^ -0.5
  self.t = nn.Conv2d(in_channels, rd, 1)
  self.p = nn.Conv2d(in_channels, rd, 1)
  self.g = nn.Conv2d(in_channels, rd, 1)
  self.z = nn.Conv2d(rd, in_channels, 1)
  self.norm = nn.BatchNorm2d(in_channels)
  self:reset_parameters()
end
function NonLocalAttn:reset_parameters()
  local init = nn.init
  for _, m in ipairs({self.t, self.p, self.g, self.z}) do
    init.kaiming_normal_(m.weight, {mode = 'fan_out', nonlinearity = 'relu'})
    init.constant_(m.bias, 0)
  end
  init.constant_(self.norm.weight, 0)
  init.constant_(self.norm.bias, 0)
end
function NonLocalAttn:forward(x)
  check4('NonLocalAttn', x)
  local shortcut = x
  local t, p, g = self.t(x), self.p(x), self.g(x)
  local b, c, h, w = t:size(1), t:size(2), t:size(3), t:size(4)
  t = t:reshape(b, c, h * w):permute(1, 3, 2)
  p = p:reshape(b, c, h * w)
  g = g:reshape(b, c, h * w):permute(1, 3, 2)
  local att = F.softmax(flow.bmm(t, p) * self.scale, 3)
  local y = flow.bmm(att, g):permute(1, 3, 2):reshape(b, c, h, w)
  return self.norm(self.z(y)) + shortcut
end

return L
