-- oneflow.nn._flow: the `flow` table, resolved lazily. oneflow/init.lua
-- requires oneflow.nn while it is still being built, so the nn files cannot
-- `require 'oneflow'` at load time; they read flow.<name> through this proxy
-- when they run.
return setmetatable({}, {
  __index = function(_, k)
    local flow = package.loaded.oneflow
    if type(flow) ~= 'table' then
      error("oneflow.nn: require 'oneflow' before using flow." .. tostring(k), 2)
    end
    return flow[k]
  end,
})
