-- Runs a Python script with Debian's PyTorch (/usr/bin/python3) and reads
-- back its lines "key v1 v2 ..." as {key = {numbers}}; nil when PyTorch is
-- not installed. Tensors go in as flat lists (the shapes are in the script).
local R = {}

function R.available()
  if R._has == nil then
    R._has = os.execute('/usr/bin/python3 -c "import torch" >/dev/null 2>&1') == 0
  end
  return R._has
end

function R.list(t)
  local v = t:detach():to(require('oneflow').float64):flatten():totable()
  for i, x in ipairs(v) do v[i] = ('%.17g'):format(x) end
  return '[' .. table.concat(v, ',') .. ']'
end

function R.run(script)
  local path = os.tmpname()
  local f = assert(io.open(path, 'w'))
  f:write(script)
  f:close()
  local p = io.popen('/usr/bin/python3 ' .. path .. ' 2>&1')
  local out, all = {}, {}
  for line in p:lines() do
    all[#all + 1] = line
    local key, rest = line:match('^(%S+)%s*(.*)$')
    if key then
      local v = {}
      for s in rest:gmatch('%S+') do v[#v + 1] = tonumber(s) end
      out[key] = v
    end
  end
  p:close()
  os.remove(path)
  if not out.done then error('python failed:\n' .. table.concat(all, '\n')) end
  return out
end

return R
