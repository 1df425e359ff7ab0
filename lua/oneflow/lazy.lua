-- oneflow.lazy: fields of a table that load their module on first use.
-- Loaded code is heap that every full collection of Lua's GC walks again,
-- and eager programs run one every 64 MiB of tensors (oneflow/_C.lua): a
-- MobileNetV2 forward at batch 8 ran 9, at ~0.8 ms per MiB of heap. So the
-- rarely used parts (flow.onnx, flow.distributions, flow.utils.*,
-- flowvision's parts ...) wait until they are asked for.
--
--   lazy.fields(t, {onnx = 'oneflow.onnx', ...})   -- t.onnx requires it once
--
-- The metatable's __lazy lists the names (or is a function returning
-- them), so the REPL completes them before they are loaded.
local M = {}

--- Gives t the fields of `modules` (name -> module path), each loaded by
-- `require` on first read and then stored in t. Returns t.
function M.fields(t, modules)
  local names = {}
  for k in pairs(modules) do names[#names + 1] = k end
  table.sort(names)
  return setmetatable(t, {
    __lazy = names,
    __index = function(tb, k)
      local path = modules[k]
      if not path then return nil end
      local m = require(path)
      rawset(tb, k, m)
      return m
    end,
  })
end

--- The names the metatable of t promises but t does not hold yet ({} if none).
function M.names(t)
  local mt = getmetatable(t)
  local l = type(mt) == 'table' and rawget(mt, '__lazy') or nil
  if type(l) == 'function' then l = l() end
  return type(l) == 'table' and l or {}
end

return M
