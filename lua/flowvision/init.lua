-- flowvision: `local vision = require 'flowvision'`.
-- Each part loads on first use (oneflow/lazy.lua: less heap for Lua's
-- collector to walk).
local parts = {}
for _, k in ipairs({'datasets', 'io', 'utils', 'transforms', 'data', 'layers', 'models'}) do
  parts[k] = 'flowvision.' .. k
end
return require('oneflow.lazy').fields({}, parts)
