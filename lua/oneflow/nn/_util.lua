-- oneflow.nn._util: what the nn files share beyond oneflow._args (errors,
-- shapes and argument parsing): n-tuples, Python-style reprs and a small
-- insertion-ordered dictionary.
local A = require 'oneflow._args'

local U = {}

------------------------------------------------------------------ arguments
-- Errors, shapes and argument parsing are oneflow._args's (one parser for
-- the whole package); they are reachable here as well for brevity.
U.fail, U.shape_str, U.is_options = A.fail, A.shape_str, A.is_options
U.REQUIRED, U.parse, U.check_options = A.REQUIRED, A.parse, A.check_options

--- Options table of a functional call: opts or {} with unknown keys rejected.
function U.options(name, opts, allowed) return A.check_options(name, opts, allowed) end
local fail = A.fail

--- v -> a list of n numbers ({v, v, ...} for a number).
function U.ntuple(v, n, name, what)
  if type(v) == 'number' then
    local r = {}
    for i = 1, n do r[i] = v end
    return r
  end
  if type(v) ~= 'table' or #v ~= n then
    fail(('%s: %s must be a number or a list of %d numbers, got %s'):format(
      name, what, n, type(v) == 'table' and ('a list of ' .. #v) or tostring(v)))
  end
  return v
end

--- '(3, 3)' like Python's tuple repr.
function U.tuple_str(t)
  if type(t) ~= 'table' then return tostring(t) end
  if #t == 1 then return '(' .. tostring(t[1]) .. ',)' end
  local s = {}
  for i, v in ipairs(t) do s[i] = tostring(v) end
  return '(' .. table.concat(s, ', ') .. ')'
end

--- Python-style value repr for extra_repr.
function U.pyrepr(v)
  if v == true then return 'True' elseif v == false then return 'False'
  elseif v == nil then return 'None'
  elseif type(v) == 'string' then return "'" .. v .. "'"
  elseif type(v) == 'table' then return U.tuple_str(v) end
  return tostring(v)
end

------------------------------------------------------------------ ordered dict
-- names (insertion order) and values; a name may be present with a nil
-- value (PyTorch's `bias = None` parameters).
local OD = {}
OD.__index = OD
U.OD = OD

function OD.new() return setmetatable({names = {}, pos = {}, vals = {}}, OD) end
function OD:has(k) return self.pos[k] ~= nil end
function OD:get(k) return self.vals[k] end
function OD:len() return #self.names end

function OD:set(k, v)
  if not self.pos[k] then
    self.names[#self.names + 1] = k
    self.pos[k] = #self.names
  end
  self.vals[k] = v
end

function OD:remove(k)
  local p = self.pos[k]
  if not p then return end
  table.remove(self.names, p)
  self.pos[k], self.vals[k] = nil, nil
  for i = p, #self.names do self.pos[self.names[i]] = i end
end

--- Iterator over (name, value), skipping nil values.
function OD:items()
  local i, names, vals = 0, self.names, self.vals
  return function()
    while true do
      i = i + 1
      local k = names[i]
      if k == nil then return nil end
      local v = vals[k]
      if v ~= nil then return k, v end
    end
  end
end

return U
