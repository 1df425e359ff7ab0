-- oneflow.nn.container: Sequential, ModuleList, ModuleDict, ParameterList,
-- ParameterDict. Lua indexes them from 1 (seq[1], ml[-1]); the registered
-- names stay PyTorch's ('0', '1', ...) so state-dict keys interchange.
local T = require 'oneflow.tensor'
local U = require 'oneflow.nn._util'
local module = require 'oneflow.nn.module'
local norm = require 'oneflow.nn.normalization'

local Module, is_module, is_parameter = module.Module, module.is_module, module.is_parameter
local keeps_none_of, free = module.keeps_none, module.free
local is_tensor, fail = T.is_tensor, U.fail
local M = {}

local function values_of(od)
  local r = {}
  for _, v in od:items() do r[#r + 1] = v end
  return r
end

local function check_module(m, op)
  if not is_module(m) then fail(('%s: expected an nn.Module, got %s'):format(op, type(m))) end
  return m
end

local function as_param(p, op)
  if not is_tensor(p) then fail(('%s: expected a tensor, got %s'):format(op, type(p))) end
  if is_parameter(p) then return p end
  return module.Parameter(p)
end

------------------------------------------------------------------ list behaviour
-- Sequential, ModuleList and ParameterList keep their elements in the
-- array part of the object (so #seq, seq[i] and ipairs(seq) are plain Lua)
-- and in the registry `reg` under '0', '1', ... (or given names). __sync
-- brings the registry up to date after a raw store seq[i] = m; __unsync
-- goes the other way after parameters were replaced (m:double()).
local function list_class(cls, reg, check)
  local op = cls.__name
  cls.__sync = function(self)
    local od, n = rawget(self, reg), #self
    local names, vals = od.names, od.vals
    local same = #names == n
    for i = 1, same and n or 0 do
      if vals[names[i]] ~= rawget(self, i) then same = false; break end
    end
    if same then return end
    local new = U.OD.new()
    for i = 1, n do
      local v = check(rawget(self, i), op)
      rawset(self, i, v)
      new:set(names[i] or tostring(i - 1), v)
    end
    rawset(self, reg, new)
  end
  cls.__unsync = function(self)
    local od = rawget(self, reg)
    for i, k in ipairs(od.names) do rawset(self, i, od.vals[k]) end
  end
  -- only reached for indices not in the array part
  cls.__getitem = function(self, i)
    local n = #self
    if i < 0 and i >= -n then return rawget(self, n + i + 1) end
    fail(('%s: index %s is out of range (1..%d; indices are 1-based)'):format(op, tostring(i), n))
  end
  cls.__setitem = function(self, i, v)
    local n = #self
    if i < 0 and i >= -n then i = n + i + 1 end
    if i < 1 or i > n + 1 or i ~= math.floor(i) then
      fail(('%s: cannot assign to index %s (size %d)'):format(op, tostring(i), n))
    end
    rawset(self, i, check(v, op))
    cls.__sync(self)
  end
  -- named stores of modules or parameters would bypass the element list
  cls.__setattr = function(self, k, v)
    if is_module(v) or (is_tensor(v) and is_parameter(v)) then
      fail(("%s: cannot add '%s' by name; use append, insert or [i] ="):format(op, tostring(k)))
    end
    if self._buffers:has(k) then self._buffers:set(k, v) else rawset(self, k, v) end
  end
  cls.__container_index = function(self, child)
    for i = 1, #self do if rawget(self, i) == child then return i end end
  end
  function cls:append(v)
    rawset(self, #self + 1, check(v, op .. ':append'))
    cls.__sync(self)
    return self
  end
  --- add_module(name, v): as in PyTorch, a new name appends the element
  -- under that name; an existing name replaces the element in place.
  function cls:add_module(name, v)
    v = check(v, op .. ':add_module')
    local od = rawget(self, reg)
    for i, k in ipairs(od.names) do
      if k == name then
        rawset(self, i, v)
        od:set(name, v)
        return
      end
    end
    rawset(self, #self + 1, v)
    od:set(name, v)
  end
  function cls:extend(list)
    if is_module(list) then list = list:children() end
    require('oneflow._args').arg(op, 1, 'list', list, 'table')
    for _, v in ipairs(list) do self:append(v) end
    return self
  end
  --- insert(i, v): v becomes element i (1-based).
  function cls:insert(i, v)
    local n = #self
    if i < 0 then i = n + i + 2 end
    if i < 1 or i > n + 1 then fail(('%s:insert: index %d out of range (size %d)'):format(op, i, n)) end
    table.insert(self, i, check(v, op .. ':insert'))
    rawset(self, reg, U.OD.new())
    cls.__sync(self)
    return self
  end
  --- pop(i = -1): removes and returns element i.
  function cls:pop(i)
    local n = #self
    i = i or -1
    if i < 0 then i = n + i + 1 end
    if i < 1 or i > n then fail(('%s:pop: index %d out of range (size %d)'):format(op, i, n)) end
    local v = table.remove(self, i)
    rawset(self, reg, U.OD.new())
    cls.__sync(self)
    return v
  end
  function cls:len() return #self end
end

local function pairs_in_order(t, op)
  local A = require('oneflow._args')
  A.arg(op, 1, 'entries', t, 'table')
  if #t > 0 then
    -- a list of {name, value} pairs
    for i = 1, #t do
      if type(t[i]) ~= 'table' or type(t[i][1]) ~= 'string' then
        A.fail(('%s: entries[%d] must be a {name, value} pair, got %s'):format(op, i, A.describe(t[i])))
      end
    end
    return t
  end
  local names, r = {}, {}
  for k in pairs(t) do names[#names + 1] = k end
  table.sort(names)
  for i, k in ipairs(names) do r[i] = {k, t[k]} end
  return r
end

------------------------------------------------------------------ Sequential
local Sequential = Module:subclass('Sequential')
M.Sequential = Sequential
list_class(Sequential, '_modules', check_module)

--- A chain of modules, each called on the previous one's output:
-- `nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))`. Children are
-- `seq[1]`, `seq[2]`, ... in Lua; their state-dict keys are PyTorch's `0.weight`, ...
-- @function nn.Sequential
-- @param ... the modules; or one list `{{'conv', m1}, {'relu', m2}}` (named, in
-- order); or one table `{conv = m1, relu = m2}` (named, sorted by name)
-- @treturn Module
function Sequential:__init(...)
  Module.__init(self)
  local first = ...
  if select('#', ...) == 1 and type(first) == 'table' and not is_module(first) then
    for i, e in ipairs(pairs_in_order(first)) do
      self:add_module(e[1], check_module(e[2], 'Sequential'))
      rawset(self, i, e[2])
    end
    return
  end
  for i = 1, select('#', ...) do self:append((select(i, ...))) end
end

-- A Conv2d followed by an eval BatchNorm2d (and a ReLU6): the norm (and
-- the clamp) are written into the conv's fresh output where
-- normalization.conv_bn_into allows (the same numbers, one pass, one tensor
-- less for Lua's collector to find). A value made here is freed once the
-- next element has read it, where nn.module's rules allow (the elements
-- keep nothing, no gradient, no tracing); the input and the result never.
function Sequential:forward(x, ...)
  local n = #self
  local may_free = module.may_free()
  local made = false   -- x was made here, by an element that keeps no reference to it
  local i = 1
  while i <= n do
    local m = self[i]
    local keeps_none = may_free and keeps_none_of(m)
    local y = m(x, ...)
    if rawequal(y, x) then   -- in place: still x, still ours if it was
      made = made and keeps_none
    else
      if made and keeps_none then free(x, true) end
      made = keeps_none
    end
    x = y
    if i < n then i = i + norm.conv_bn_into(m, self[i + 1], x, i + 1 < n and self[i + 2] or nil) end
    i = i + 1
  end
  return x
end
module.keeps_no_tensors(Sequential)

--- seq:slice(i, j): a Sequential of elements i..j (PyTorch's seq[i:j]).
function Sequential:slice(i, j)
  local n = #self
  i, j = i or 1, j or n
  if i < 0 then i = n + i + 1 end
  if j < 0 then j = n + j + 1 end
  local res = Sequential()
  for k = math.max(i, 1), math.min(j, n) do res:append(self[k]) end
  return res
end

------------------------------------------------------------------ ModuleList
local ModuleList = Module:subclass('ModuleList')
--- nn.ModuleList(modules): a list of modules, registered as children 1, 2, ...
-- @function nn.ModuleList
M.ModuleList = ModuleList
list_class(ModuleList, '_modules', check_module)

function ModuleList:__init(modules)
  Module.__init(self)
  if modules then self:extend(modules) end
end

function ModuleList.forward()
  fail('ModuleList: has no forward; iterate over it in the parent module')
end
module.keeps_no_tensors(ModuleList)   -- (it has none): its elements decide

------------------------------------------------------------------ ModuleDict
local ModuleDict = Module:subclass('ModuleDict')
M.ModuleDict = ModuleDict

--- nn.ModuleDict({conv = m1, act = m2}) (sorted) or {{'conv', m1}, ...} (in order).
function ModuleDict:__init(modules)
  Module.__init(self)
  if modules then self:update(modules) end
end

function ModuleDict:update(modules)
  for _, e in ipairs(pairs_in_order(modules, 'ModuleDict')) do
    self:add_module(e[1], check_module(e[2], 'ModuleDict'))
  end
  return self
end
function ModuleDict:len() return #self._modules.names end
function ModuleDict:get(k) return self._modules:get(k) end
function ModuleDict:set(k, m) self:add_module(k, check_module(m, 'ModuleDict')) end
function ModuleDict:keys() return {unpack(self._modules.names)} end
function ModuleDict:values() return values_of(self._modules) end
function ModuleDict:contains(k) return self._modules:has(k) end
--- for name, m in md:items() do ... end
function ModuleDict:items() return self._modules:items() end
function ModuleDict:pop(k)
  local m = self._modules:get(k)
  self._modules:remove(k)
  return m
end
function ModuleDict.forward() fail('ModuleDict: has no forward') end

------------------------------------------------------------------ ParameterList / ParameterDict
local ParameterList = Module:subclass('ParameterList')
--- nn.ParameterList(params): a list of parameters, registered as 1, 2, ...
-- @function nn.ParameterList
M.ParameterList = ParameterList
list_class(ParameterList, '_parameters', as_param)

function ParameterList:__init(params)
  Module.__init(self)
  require('oneflow._args').arg('ParameterList', 1, 'parameters', params, 'table|nil')
  for _, p in ipairs(params or {}) do self:append(p) end
end
function ParameterList:extra_repr()
  local lines = {}
  for i, p in ipairs(self) do
    lines[i] = ('(%d): Parameter containing: [%s of size %s]'):format(
      i - 1, p:type(), table.concat(p:size():totable(), 'x'))
  end
  return table.concat(lines, '\n')
end

local ParameterDict = Module:subclass('ParameterDict')
--- nn.ParameterDict(params): a table of named parameters, registered on the module.
-- @function nn.ParameterDict
M.ParameterDict = ParameterDict

function ParameterDict:__init(params)
  Module.__init(self)
  if params then self:update(params) end
end
function ParameterDict:update(params)
  for _, e in ipairs(pairs_in_order(params, 'ParameterDict')) do
    self:register_parameter(e[1], as_param(e[2], 'ParameterDict'))
  end
  return self
end
function ParameterDict:len() return #self._parameters.names end
--- pd.name = t registers t (made a Parameter if it is not one).
ParameterDict.__setattr = function(self, k, v)
  if v == nil then self._parameters:remove(k) else self._parameters:set(k, as_param(v, 'ParameterDict')) end
end
function ParameterDict:get(k) return self._parameters:get(k) end
function ParameterDict:set(k, p) self._parameters:set(k, as_param(p, 'ParameterDict')) end
function ParameterDict:keys() return {unpack(self._parameters.names)} end
function ParameterDict:values() return values_of(self._parameters) end
function ParameterDict:items() return self._parameters:items() end
function ParameterDict:contains(k) return self._parameters:has(k) end

return M
