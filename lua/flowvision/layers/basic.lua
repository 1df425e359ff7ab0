-- flowvision.layers basics (timm/layers): helpers, ConvNormAct/ConvBnAct,
-- PatchEmbed, SelectAdaptivePool2d (Pooler). Parameter names are timm's.
local A = require 'oneflow._args'
local flow = require 'oneflow'

local nn = flow.nn
local F = nn.functional
local L = {}

local function fail(op, msg) error(op .. ': ' .. msg, 3) end

--- make_divisible(v, divisor = 8, min_value = divisor, round_limit = 0.9)
function L.make_divisible(v, divisor, min_value, round_limit)
  divisor = divisor or 8
  min_value = min_value or divisor
  round_limit = round_limit or 0.9
  local new_v = math.max(min_value, math.floor((v + divisor / 2) / divisor) * divisor)
  if new_v < round_limit * v then new_v = new_v + divisor end
  return new_v
end

function L.to_2tuple(v)
  if type(v) == 'table' then return {v[1], v[2] or v[1]} end
  return {v, v}
end

--- Symmetric padding of a conv: ((stride - 1) + dilation * (k - 1)) // 2.
function L.get_padding(kernel_size, stride, dilation)
  stride, dilation = stride or 1, dilation or 1
  return math.floor(((stride - 1) + dilation * (kernel_size - 1)) / 2)
end

local acts = {
  relu = function() return nn.ReLU() end, relu6 = function() return nn.ReLU6() end,
  silu = function() return nn.SiLU() end, swish = function() return nn.SiLU() end,
  gelu = function() return nn.GELU() end, sigmoid = function() return nn.Sigmoid() end,
  tanh = function() return nn.Tanh() end, hard_sigmoid = function() return nn.Hardsigmoid() end,
  hardsigmoid = function() return nn.Hardsigmoid() end, hard_swish = function() return nn.Hardswish() end,
  hardswish = function() return nn.Hardswish() end, mish = function() return nn.Mish() end,
  identity = function() return nn.Identity() end,
}

--- create_act_layer(name | class | module | nil) -> module (Identity for nil/false)
function L.create_act_layer(act)
  if act == nil or act == false or act == '' then return nn.Identity() end
  if type(act) == 'string' then
    local f = acts[act:lower()]
    if not f then fail('create_act_layer', ("unknown activation '%s'"):format(act)) end
    return f()
  end
  if nn.is_module(act) then return act end
  if type(act) == 'table' or type(act) == 'function' then return act() end
  fail('create_act_layer', 'expected a name, a module class or a module, got ' .. type(act))
end

------------------------------------------------------------------ ConvNormAct
local ConvNormAct = nn.Module:subclass('ConvNormAct')
L.ConvNormAct = ConvNormAct
--- ConvNormAct(in, out, kernel_size = 1, {stride = 1, padding = 'same-size', dilation = 1,
--             groups = 1, bias = false, apply_act = true, norm_layer = nn.BatchNorm2d,
--             act_layer = 'relu'}): conv -> bn -> act (timm names: conv, bn).
function ConvNormAct:__init(in_channels, out_channels, kernel_size, opts)
  nn.Module.__init(self)
  if type(kernel_size) == 'table' and #kernel_size == 0 then opts, kernel_size = kernel_size, nil end
  opts = A.check_options('ConvNormAct', opts, {
    act_layer = true, apply_act = true, bias = true, dilation = true, groups = true,
    norm_layer = true, padding = true, stride = true})
  kernel_size = kernel_size or 1
  local stride, dilation = opts.stride or 1, opts.dilation or 1
  local k = type(kernel_size) == 'table' and kernel_size[1] or kernel_size
  local padding = opts.padding
  if padding == nil or padding == '' then padding = L.get_padding(k, stride, dilation) end
  self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, {stride = stride, padding = padding,
    dilation = dilation, groups = opts.groups or 1, bias = opts.bias or false})
  local norm_layer = opts.norm_layer
  if norm_layer == nil then norm_layer = nn.BatchNorm2d end
  self.bn = norm_layer and norm_layer(out_channels) or nn.Identity()
  local apply_act = opts.apply_act ~= false
  self.act = apply_act and L.create_act_layer(opts.act_layer or 'relu') or nn.Identity()
end
function ConvNormAct:forward(x) return self.act(self.bn(self.conv(x))) end
L.ConvBnAct = ConvNormAct

------------------------------------------------------------------ PatchEmbed
local PatchEmbed = nn.Module:subclass('PatchEmbed')
L.PatchEmbed = PatchEmbed
--- PatchEmbed{img_size = 224, patch_size = 16, in_chans = 3, embed_dim = 768,
--             norm_layer = nil, flatten = true, bias = true, strict_img_size = true}
-- [B, C, H, W] -> [B, num_patches, embed_dim] (or [B, D, H/p, W/p] unflattened).
function PatchEmbed:__init(opts)
  nn.Module.__init(self)
  opts = A.check_options('PatchEmbed', opts, {
    bias = true, embed_dim = true, flatten = true, img_size = true, in_chans = true,
    norm_layer = true, patch_size = true, strict_img_size = true})
  self.img_size = L.to_2tuple(opts.img_size or 224)
  self.patch_size = L.to_2tuple(opts.patch_size or 16)
  self.grid_size = {math.floor(self.img_size[1] / self.patch_size[1]),
                    math.floor(self.img_size[2] / self.patch_size[2])}
  self.num_patches = self.grid_size[1] * self.grid_size[2]
  self.flatten = opts.flatten ~= false
  self.strict_img_size = opts.strict_img_size ~= false
  local embed_dim = opts.embed_dim or 768
  self.proj = nn.Conv2d(opts.in_chans or 3, embed_dim, self.patch_size,
                        {stride = self.patch_size, bias = opts.bias ~= false})
  self.norm = opts.norm_layer and opts.norm_layer(embed_dim) or nn.Identity()
end
function PatchEmbed:forward(x)
  if x:dim() ~= 4 then fail('PatchEmbed', 'expected input [B, C, H, W], got a ' .. x:dim() .. '-d tensor') end
  local h, w = x:size(3), x:size(4)
  if self.strict_img_size and (h ~= self.img_size[1] or w ~= self.img_size[2]) then
    fail('PatchEmbed', ('input image size (%dx%d) doesn\'t match model (%dx%d)')
         :format(h, w, self.img_size[1], self.img_size[2]))
  end
  x = self.proj(x)
  if self.flatten then x = x:flatten(3):transpose(2, 3) end
  return self.norm(x)
end

------------------------------------------------------------------ pooling
function L.adaptive_avgmax_pool2d(x, output_size)
  output_size = output_size or 1
  return (F.adaptive_avg_pool2d(x, output_size) + F.adaptive_max_pool2d(x, output_size)) * 0.5
end
function L.adaptive_catavgmax_pool2d(x, output_size)
  output_size = output_size or 1
  return flow.cat({F.adaptive_avg_pool2d(x, output_size), F.adaptive_max_pool2d(x, output_size)}, 2)
end

local pool_types = {[''] = true, avg = true, max = true, avgmax = true, catavgmax = true, fast = true}

local SelectAdaptivePool2d = nn.Module:subclass('SelectAdaptivePool2d')
L.SelectAdaptivePool2d = SelectAdaptivePool2d
L.Pooler = SelectAdaptivePool2d
--- SelectAdaptivePool2d{output_size = 1, pool_type = 'avg' | 'max' | 'avgmax' |
--                       'catavgmax' | 'fast' | '', flatten = false}
function SelectAdaptivePool2d:__init(opts)
  nn.Module.__init(self)
  opts = A.check_options('SelectAdaptivePool2d', opts, {flatten = true, output_size = true, pool_type = true})
  self.pool_type = opts.pool_type or 'avg'
  if not pool_types[self.pool_type] then
    fail('SelectAdaptivePool2d', ("pool_type must be '', 'avg', 'max', 'avgmax', 'catavgmax' or 'fast', got '%s'")
         :format(tostring(self.pool_type)))
  end
  self.output_size = opts.output_size or 1
  self.flatten_output = opts.flatten or false
  if self.pool_type == 'fast' and self.output_size ~= 1 then
    fail('SelectAdaptivePool2d', "pool_type 'fast' needs output_size 1")
  end
  self.flatten = self.flatten_output and nn.Flatten(2) or nn.Identity()
end
function SelectAdaptivePool2d:is_identity() return self.pool_type == '' end
function SelectAdaptivePool2d:feat_mult() return self.pool_type == 'catavgmax' and 2 or 1 end
function SelectAdaptivePool2d:forward(x)
  local t = self.pool_type
  if t == 'avg' then x = F.adaptive_avg_pool2d(x, self.output_size)
  elseif t == 'max' then x = F.adaptive_max_pool2d(x, self.output_size)
  elseif t == 'avgmax' then x = L.adaptive_avgmax_pool2d(x, self.output_size)
  elseif t == 'catavgmax' then x = L.adaptive_catavgmax_pool2d(x, self.output_size)
  elseif t == 'fast' then x = x:mean({3, 4}, true) end
  return self.flatten(x)
end
function SelectAdaptivePool2d:extra_repr()
  return ("pool_type=%s, flatten=%s"):format(self.pool_type, tostring(self.flatten_output))
end

return L
