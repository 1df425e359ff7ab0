-- flowvision.models.regnet: RegNetX / RegNetY with torchvision's
-- configuration mechanism (BlockParams.from_init_params), names
-- (stem, trunk_output.block1.block1-0.f.a, ...) and initialisation.
local A = require 'oneflow._args'
local flow = require 'oneflow'
local ops = require 'flowvision.models._ops'

local nn = flow.nn
local CNA = ops.Conv2dNormActivation
local M = {}

------------------------------------------------------------------ BlockParams
-- torch.round: halves to even
local function round_even(x)
  local f = math.floor(x)
  local d = x - f
  if d > 0.5 or (d == 0.5 and f % 2 == 1) then return f + 1 end
  return f
end

-- Python's round() on the values RegNet uses (also halves to even)
local py_round = round_even

local function adjust_widths_groups(stage_widths, bottleneck_ratios, group_widths)
  local widths, gmin = {}, {}
  for i, w in ipairs(stage_widths) do
    local wb = math.floor(w * bottleneck_ratios[i])
    gmin[i] = math.min(group_widths[i], wb)
    widths[i] = math.floor(ops.make_divisible(wb, gmin[i]) / bottleneck_ratios[i])
  end
  return widths, gmin
end

local BlockParams = {}
M.BlockParams = BlockParams

--- BlockParams.from_init_params{depth, w_0, w_a, w_m, group_width,
-- bottleneck_multiplier = 1, se_ratio}: the per-stage depths, widths,
-- group widths, bottleneck multipliers and strides of a RegNet.
function BlockParams.from_init_params(p)
  local QUANT, STRIDE = 8, 2
  local w_0, w_a, w_m = p.w_0, p.w_a, p.w_m
  if w_a < 0 or w_0 <= 0 or w_m <= 1 or w_0 % 8 ~= 0 then error('RegNet: invalid RegNet settings', 2) end
  local widths, distinct, nstages = {}, {}, 0
  for i = 0, p.depth - 1 do
    local cap = round_even(math.log((i * w_a + w_0) / w_0) / math.log(w_m))
    local w = round_even(w_0 * w_m ^ cap / QUANT) * QUANT
    widths[#widths + 1] = w
    if not distinct[w] then distinct[w], nstages = true, nstages + 1 end
  end
  local stage_widths, stage_depths, start = {}, {}, 0
  for i = 1, #widths + 1 do
    if widths[i] ~= (widths[i - 1] or 0) then   -- a split before block i
      if i > 1 then stage_depths[#stage_depths + 1] = (i - 1) - start end
      if widths[i] then stage_widths[#stage_widths + 1] = widths[i] end
      start = i - 1
    end
  end
  local strides, bms, gws = {}, {}, {}
  for i = 1, nstages do strides[i], bms[i], gws[i] = STRIDE, p.bottleneck_multiplier or 1, p.group_width end
  stage_widths, gws = adjust_widths_groups(stage_widths, bms, gws)
  return {depths = stage_depths, widths = stage_widths, group_widths = gws, bottleneck_multipliers = bms,
          strides = strides, se_ratio = p.se_ratio}
end

------------------------------------------------------------------ blocks
local function bottleneck_transform(win, wout, stride, norm, act, group_width, bm, se_ratio)
  local wb = py_round(wout * bm)
  local g = math.floor(wb / group_width)
  local layers = {{'a', CNA(win, wb, {kernel_size = 1, norm_layer = norm, activation_layer = act})},
                  {'b', CNA(wb, wb, {kernel_size = 3, stride = stride, groups = g, norm_layer = norm,
                                     activation_layer = act})}}
  if se_ratio and se_ratio ~= 0 then
    layers[#layers + 1] = {'se', ops.SqueezeExcitation(wb, py_round(se_ratio * win), {activation = act})}
  end
  layers[#layers + 1] = {'c', CNA(wb, wout, {kernel_size = 1, norm_layer = norm, activation_layer = false})}
  return nn.Sequential(layers)
end

local ResBottleneckBlock = nn.Module:subclass('ResBottleneckBlock')
M.ResBottleneckBlock = ResBottleneckBlock

function ResBottleneckBlock:__init(win, wout, stride, norm, act, group_width, bm, se_ratio)
  nn.Module.__init(self)
  if win ~= wout or stride ~= 1 then
    self.proj = CNA(win, wout, {kernel_size = 1, stride = stride, norm_layer = norm, activation_layer = false})
  end
  self.f = bottleneck_transform(win, wout, stride, norm, act, group_width or 1, bm or 1, se_ratio)
  self.activation = act()
end

function ResBottleneckBlock:forward(x)
  if self.proj then return self.activation(self.proj(x) + self.f(x)) end
  return self.activation(x + self.f(x))
end
ops.keeps_no_tensors(ResBottleneckBlock)

local function any_stage(win, wout, stride, depth, norm, act, gw, bm, se_ratio, index)
  local blocks = {}
  for i = 0, depth - 1 do
    blocks[#blocks + 1] = {('block%d-%d'):format(index, i),
      ResBottleneckBlock(i == 0 and win or wout, wout, i == 0 and stride or 1, norm, act, gw, bm, se_ratio)}
  end
  return nn.Sequential(blocks)
end

------------------------------------------------------------------ RegNet
local RegNet = nn.Module:subclass('RegNet')
M.RegNet = RegNet

local function init_weights(self)
  local init = nn.init
  for _, m in self:named_modules() do
    if ops.is_a(m, nn.Conv2d) then
      local fan_out = m.kernel_size[1] * m.kernel_size[2] * m.out_channels
      init.normal_(m.weight, 0, math.sqrt(2 / fan_out))
    elseif ops.is_a(m, nn.BatchNorm2d) then
      init.ones_(m.weight)
      init.zeros_(m.bias)
    elseif ops.is_a(m, nn.Linear) then
      init.normal_(m.weight, 0, 0.01)
      init.zeros_(m.bias)
    end
  end
end

--- RegNet(block_params, {num_classes = 1000, stem_width = 32, norm_layer, activation = ReLU factory})
function RegNet:__init(bp, opts)
  nn.Module.__init(self)
  opts = A.check_options('RegNet', opts, {
    activation = true, norm_layer = true, num_classes = true, stem_width = true})
  local norm, act = opts.norm_layer or ops.batch_norm(), opts.activation or ops.act(nn.ReLU)
  local width = opts.stem_width or 32
  self.stem = CNA(3, width, {kernel_size = 3, stride = 2, norm_layer = norm, activation_layer = act})
  local stages = {}
  for i, wout in ipairs(bp.widths) do
    stages[i] = {'block' .. i, any_stage(width, wout, bp.strides[i], bp.depths[i], norm, act, bp.group_widths[i],
                                         bp.bottleneck_multipliers[i], bp.se_ratio, i)}
    width = wout
  end
  self.trunk_output = nn.Sequential(stages)
  self.avgpool = nn.AdaptiveAvgPool2d({1, 1})
  self.fc = nn.Linear(width, opts.num_classes or 1000)
  init_weights(self)
end

function RegNet:forward(x)
  x = self.avgpool(self.trunk_output(self.stem(x)))
  return self.fc(x:flatten(2))
end

------------------------------------------------------------------ builders
local configs = {
  regnet_y_400mf = {16, 48, 27.89, 2.09, 8, 0.25}, regnet_y_800mf = {14, 56, 38.84, 2.4, 16, 0.25},
  regnet_y_1_6gf = {27, 48, 20.71, 2.65, 24, 0.25}, regnet_y_3_2gf = {21, 80, 42.63, 2.66, 24, 0.25},
  regnet_y_8gf = {17, 192, 76.82, 2.19, 56, 0.25}, regnet_y_16gf = {18, 200, 106.23, 2.48, 112, 0.25},
  regnet_y_32gf = {20, 232, 115.89, 2.53, 232, 0.25}, regnet_y_128gf = {27, 456, 160.83, 2.52, 264, 0.25},
  regnet_x_400mf = {22, 24, 24.48, 2.54, 16}, regnet_x_800mf = {16, 56, 35.73, 2.28, 16},
  regnet_x_1_6gf = {18, 80, 34.01, 2.25, 24}, regnet_x_3_2gf = {25, 88, 26.31, 2.25, 48},
  regnet_x_8gf = {23, 80, 49.56, 2.88, 120}, regnet_x_16gf = {22, 216, 55.59, 2.1, 128},
  regnet_x_32gf = {23, 320, 69.86, 2.0, 168},
}
M.configs = configs

M.models = {}
for name, c in pairs(configs) do
  M.models[name] = function(opts)
    local bp = BlockParams.from_init_params({depth = c[1], w_0 = c[2], w_a = c[3], w_m = c[4], group_width = c[5],
                                             se_ratio = c[6]})
    return RegNet(bp, opts)
  end
end
M.classes = {RegNet = RegNet}

return M
