-- oneflow.nn._util: what the nn files share -- errors that point at user
-- code, shape strings, PyTorch-style argument parsing, n-tuples and a small
-- insertion-ordered dictionary.
local T = require 'oneflow.tensor'

local is_tensor = T.is_tensor
local U = {}

------------------------------------------------------------------ errors
--- Raises msg at the first caller outside oneflow/nn (the user's line).
function U.fail(msg)
  local level = 2
  while true do
    local info = debug.getinfo(level, 'S')
    if not info then level = 0; break end
    local src = info.source
    if src ~= '=[C]' and not src:find('oneflow/nn/', 1, true) then break end
    level = level + 1
  end
  error(msg, level)
end
local fail = U.fail

--- '[2,3]' for a tensor or a list of sizes.
function U.shape_str(x)
  if is_tensor(x) then x = x:size():totable() end
  return '[' .. table.concat(x, ',') .. ']'
end

------------------------------------------------------------------ arguments
U.REQUIRED = setmetatable({}, {__tostring = function() return '<required>' end})

-- A trailing plain table without an array part is an options table
-- ({3, 3} is a positional list, a module or tensor is a value).
local function is_options(v)
  return type(v) == 'table' and getmetatable(v) == nil and #v == 0
end
U.is_options = is_options

--- Parses `name(pos1, pos2, ..., {opt = v})` against spec, a list of
-- {key, default} in PyTorch's positional order. Returns a table of every key.
function U.parse(name, spec, ...)
  local n = select('#', ...)
  local args = {...}
  local opts = {}
  if n > 0 and is_options(args[n]) then
    opts = args[n]
    n = n - 1
  end
  if n > #spec then
    fail(('%s: expected at most %d positional arguments, got %d'):format(name, #spec, n))
  end
  local res, known = {}, {}
  for i, s in ipairs(spec) do
    local key, default = s[1], s[2]
    known[key] = true
    local v = args[i]
    if i <= n and v ~= nil and opts[key] ~= nil then
      fail(('%s: argument %s given twice (positionally and as an option)'):format(name, key))
    end
    if v == nil or i > n then v = opts[key] end
    if v == nil then v = default end
    if v == U.REQUIRED then fail(('%s: missing required argument %s'):format(name, key)) end
    res[key] = v
  end
  for k in pairs(opts) do
    if not known[k] then fail(('%s: unknown option %s'):format(name, tostring(k))) end
  end
  return res
end

--- Options table of a functional call: opts or {} with unknown keys rejected.
function U.options(name, opts, allowed)
  if opts == nil then return {} end
  if type(opts) ~= 'table' then
    fail(('%s: expected an options table, got %s'):format(name, type(opts)))
  end
  for k in pairs(opts) do
    if not allowed[k] then fail(('%s: unknown option %s'):format(name, tostring(k))) end
  end
  return opts
end

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
