-- oneflow.class: the one class helper. nn.Module, nn.Graph, the optimizers
-- and LR schedulers, utils.data's datasets/samplers/loaders,
-- autograd.Function and flowvision's transforms are all made with it.
--
--   local class = require 'oneflow.class'       -- also flow.class
--   local Base = class('Base')                  -- a root class
--   local Foo = Base:subclass('Foo')            -- or class('Foo', Base)
--   function Foo:__init(a) self.a = a end       -- the constructor
--   local f = Foo(1)                            -- an instance; calls __init
--   class.isinstance(f, Base)                   --> true
--   Foo.super                                   --> Base
--
-- Metamethods (keys starting with `__`) are looked up raw by Lua, so a new
-- class copies its base's down (except __index, __name and __init). A root
-- class may set hooks, which its subclasses inherit:
--   cls.__alloc(cls) -> a fresh, not yet initialised instance
--                       (default: setmetatable({}, cls))
--   cls.__setup(cls, base, ...) runs when a subclass is made, with the
--                       arguments given to subclass() after the name
--   cls.__label  prefix of tostring(cls) (tostring(nn.Linear) == 'nn.Linear')
local M = {}

local classes = setmetatable({}, {__mode = 'k'})
local NOT_COPIED = {__index = true, __name = true, __init = true}

local function new(cls, ...)
  local alloc = cls.__alloc
  local obj = alloc and alloc(cls) or setmetatable({}, cls)
  obj:__init(...)
  return obj
end

local function noop() end

--- class(name[, base, ...]): a new class; with a base, a subclass of it.
local function make(name, base, ...)
  if name ~= nil and type(name) ~= 'string' then
    error(('class: name must be a string, got %s'):format(type(name)), 3)
  end
  if base ~= nil and not classes[base] then
    error(('class: base of %s must be a class made by oneflow.class, got %s')
          :format(tostring(name), type(base)), 3)
  end
  local cls = {}
  if base then
    for k, v in pairs(base) do
      if type(k) == 'string' and k:sub(1, 2) == '__' and not NOT_COPIED[k] then cls[k] = v end
    end
  else
    cls.__init = noop
  end
  name = name or 'anonymous'
  cls.__name, cls.__index, cls.super = name, cls, base
  classes[cls] = true
  setmetatable(cls, {__index = base, __call = new,
                     __tostring = function(c) return (rawget(c, '__label') or c.__label or '') .. name end})
  local setup = cls.__setup
  if setup then setup(cls, base, ...) end
  return cls
end

--- Cls:subclass(name, ...): a subclass of Cls (the extra arguments go to
-- Cls's __setup hook).
local function subclass(base, name, ...) return make(name, base, ...) end

--- Whether v is a class made by oneflow.class.
function M.is_class(v) return classes[v] == true end

--- The class of obj (a table instance, or a userdata proxy whose metatable
-- names it in __class), or nil.
function M.of(obj)
  local mt
  if type(obj) == 'table' then
    mt = getmetatable(obj)
  elseif type(obj) == 'userdata' then
    mt = getmetatable(obj)
    mt = type(mt) == 'table' and rawget(mt, '__class') or nil
  end
  if mt ~= nil and classes[mt] then return mt end
  return nil
end

--- Whether class c is cls or one of its subclasses (false for what is not a class).
function M.issubclass(c, cls)
  if not M.is_class(c) then return false end
  while c ~= nil do
    if c == cls then return true end
    c = rawget(c, 'super')
  end
  return false
end

--- Whether obj is an instance of cls or of one of its subclasses.
function M.isinstance(obj, cls) return M.issubclass(M.of(obj), cls) end

M.new = make
M.subclass = subclass

return setmetatable(M, {__call = function(_, name, base, ...)
  local cls = make(name, base, ...)
  if base == nil then rawset(cls, 'subclass', subclass) end
  return cls
end})
