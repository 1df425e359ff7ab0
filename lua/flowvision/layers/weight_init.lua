-- flowvision.layers weight init (timm/layers/weight_init.py):
--   trunc_normal_(t, {mean = 0, std = 1, a = -2, b = 2})  -- a, b in absolute units
--   trunc_normal_tf_(t, {mean = 0, std = 1, a = -2, b = 2})  -- a, b in std units (TF style)
--   variance_scaling_(t, {scale = 1, mode = 'fan_in', distribution = 'normal'})
--   lecun_normal_(t)   -- variance_scaling_(fan_in, truncated_normal)
local flow = require 'oneflow'

local init = flow.nn.init
local L = {}

--- trunc_normal_(t, {mean, std, a, b}) or trunc_normal_(t, mean, std, a, b)
function L.trunc_normal_(t, o, ...)
  if type(o) ~= 'table' then
    local std, a, b = ...
    o = {mean = o, std = std, a = a, b = b}
  end
  return init.trunc_normal_(t, {mean = o.mean or 0, std = o.std or 1, a = o.a or -2, b = o.b or 2})
end

--- truncated standard normal on [a, b], then scaled by std and shifted by mean
function L.trunc_normal_tf_(t, o)
  o = o or {}
  local mean, std = o.mean or 0, o.std or 1
  init.trunc_normal_(t, {mean = 0, std = 1, a = o.a or -2, b = o.b or 2})
  flow.no_grad(function() t:mul_(std):add_(mean) end)
  return t
end

function L.variance_scaling_(t, o)
  o = o or {}
  local scale, mode, dist = o.scale or 1, o.mode or 'fan_in', o.distribution or 'normal'
  local fan_in, fan_out = init._calculate_fan_in_and_fan_out(t)
  local denom
  if mode == 'fan_in' then denom = fan_in
  elseif mode == 'fan_out' then denom = fan_out
  elseif mode == 'fan_avg' then denom = (fan_in + fan_out) / 2
  else error(("variance_scaling_: mode must be fan_in, fan_out or fan_avg, got '%s'"):format(tostring(mode)), 2) end
  local variance = scale / denom
  if dist == 'truncated_normal' then
    -- 0.8796... is the std of a standard normal truncated to (-2, 2)
    return L.trunc_normal_tf_(t, {std = math.sqrt(variance) / 0.87962566103423978})
  elseif dist == 'normal' then
    return init.normal_(t, 0, math.sqrt(variance))
  elseif dist == 'uniform' then
    local bound = math.sqrt(3 * variance)
    return init.uniform_(t, -bound, bound)
  end
  error(("variance_scaling_: distribution must be normal, truncated_normal or uniform, got '%s'")
        :format(tostring(dist)), 2)
end

function L.lecun_normal_(t)
  return L.variance_scaling_(t, {mode = 'fan_in', distribution = 'truncated_normal'})
end

return L
