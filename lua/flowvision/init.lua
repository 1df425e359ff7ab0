-- flowvision: `local vision = require 'flowvision'`.
-- Each part (vision.models, .transforms, .datasets, .io, .utils, .data,
-- .layers) loads on first use: loaded code is heap that every full
-- collection of Lua's GC walks again (oneflow/init.lua, "lazy").
local parts = {datasets = true, io = true, utils = true, transforms = true, data = true,
               layers = true, models = true}
return setmetatable({}, {__index = function(vision, k)
  if not parts[k] then return nil end
  local m = require('flowvision.' .. k)
  rawset(vision, k, m)
  return m
end})
