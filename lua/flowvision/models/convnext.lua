-- flowvision.models.convnext: ConvNeXt tiny/small/base/large with
-- torchvision's names (features.N.M.block.K, layer_scale, classifier) and
-- initialisation (trunc_normal std 0.02).
local A = require 'oneflow._args'
local flow = require 'oneflow'
local ops = require 'flowvision.models._ops'

local nn = flow.nn
local M = {}

local function layer_norm2d(c) return ops.LayerNorm2d(c, {eps = 1e-6}) end

local CNBlock = nn.Module:subclass('CNBlock')
M.CNBlock = CNBlock

--- CNBlock(dim, layer_scale, stochastic_depth_prob)
function CNBlock:__init(dim, layer_scale, sd_prob)
  nn.Module.__init(self)
  self.block = nn.Sequential(nn.Conv2d(dim, dim, 7, {padding = 3, groups = dim}), ops.Permute({1, 3, 4, 2}),
    nn.LayerNorm(dim, {eps = 1e-6}), nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim),
    ops.Permute({1, 4, 2, 3}))
  self.layer_scale = nn.Parameter(flow.ones(dim, 1, 1) * layer_scale)
  self.stochastic_depth = ops.StochasticDepth(sd_prob, 'row')
end

function CNBlock:forward(x)
  local f = ops.frees(self, x)
  local b = self.block(x)
  local y = self.layer_scale * b
  ops.free(b, f, y)
  return ops.residual(x, ops.step(self.stochastic_depth, y, f), f)
end
ops.keeps_no_tensors(CNBlock)

--- A stage setting: {input_channels, out_channels (nil for the last), num_layers}.
function M.block_conf(cin, cout, n) return {input_channels = cin, out_channels = cout, num_layers = n} end

local ConvNeXt = nn.Module:subclass('ConvNeXt')
M.ConvNeXt = ConvNeXt

local function init_weights(self)
  for _, m in self:named_modules() do
    if ops.is_a(m, nn.Conv2d) or ops.is_a(m, nn.Linear) then
      nn.init.trunc_normal_(m.weight, {std = 0.02})
      if m.bias ~= nil then nn.init.zeros_(m.bias) end
    end
  end
end

local function stages(setting, sd, layer_scale)
  local total, id, layers = 0, 0, {}
  for _, c in ipairs(setting) do total = total + c.num_layers end
  for _, c in ipairs(setting) do
    local stage = {}
    for i = 1, c.num_layers do
      stage[i] = CNBlock(c.input_channels, layer_scale, sd * id / (total - 1))
      id = id + 1
    end
    layers[#layers + 1] = nn.Sequential(unpack(stage))
    if c.out_channels then
      layers[#layers + 1] = nn.Sequential(layer_norm2d(c.input_channels),
                                          nn.Conv2d(c.input_channels, c.out_channels, 2, {stride = 2}))
    end
  end
  return layers
end

--- ConvNeXt(block_setting, {stochastic_depth_prob = 0, layer_scale = 1e-6, num_classes = 1000})
function ConvNeXt:__init(setting, opts)
  nn.Module.__init(self)
  opts = A.check_options('ConvNeXt', opts, {
    layer_scale = true, num_classes = true, stochastic_depth_prob = true})
  if #setting == 0 then error('ConvNeXt: the block_setting should not be empty', 2) end
  local layers = {ops.Conv2dNormActivation(3, setting[1].input_channels, {kernel_size = 4, stride = 4, padding = 0,
    norm_layer = layer_norm2d, activation_layer = false, bias = true})}
  for _, s in ipairs(stages(setting, opts.stochastic_depth_prob or 0, opts.layer_scale or 1e-6)) do
    layers[#layers + 1] = s
  end
  self.features = nn.Sequential(unpack(layers))
  self.avgpool = nn.AdaptiveAvgPool2d(1)
  local last = setting[#setting]
  local cout = last.out_channels or last.input_channels
  self.classifier = nn.Sequential(layer_norm2d(cout), nn.Flatten(2), nn.Linear(cout, opts.num_classes or 1000))
  init_weights(self)
end

function ConvNeXt:forward(x)
  return self.classifier(self.avgpool(self.features(x)))
end

local c = M.block_conf
local settings = {
  convnext_tiny = {{c(96, 192, 3), c(192, 384, 3), c(384, 768, 9), c(768, nil, 3)}, 0.1},
  convnext_small = {{c(96, 192, 3), c(192, 384, 3), c(384, 768, 27), c(768, nil, 3)}, 0.4},
  convnext_base = {{c(128, 256, 3), c(256, 512, 3), c(512, 1024, 27), c(1024, nil, 3)}, 0.5},
  convnext_large = {{c(192, 384, 3), c(384, 768, 3), c(768, 1536, 27), c(1536, nil, 3)}, 0.5},
}

M.models = {}
for name, s in pairs(settings) do
  M.models[name] = function(opts)
    local o = {stochastic_depth_prob = s[2]}
    for k, v in pairs(opts or {}) do o[k] = v end
    return ConvNeXt(s[1], o)
  end
end
M.classes = {ConvNeXt = ConvNeXt, CNBlock = CNBlock}

return M
