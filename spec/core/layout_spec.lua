-- The Lua layout rules (doc/internals.md, "Lua layout"): files by topic, one
-- class helper, one argument parser, no proxy modules, no swallowed
-- missing modules.
local flow = require 'oneflow'

local function lua_files()
  local list = {}
  local p = assert(io.popen('find lua -name "*.lua" | sort'))
  for line in p:lines() do list[#list + 1] = line end
  p:close()
  assert(#list > 50, 'run the specs from the repository root')
  return list
end

local function read(path)
  local f = assert(io.open(path))
  local s = f:read('*a')
  f:close()
  return s
end

describe('Lua layout', function()
  local files = lua_files()

  it('has no extras grab-bags and no proxy module', function()
    for _, f in ipairs(files) do
      assert.is_nil(f:match('extras[^/]*%.lua$'), f)
      assert.is_nil(f:match('_flow%.lua$'), f)
    end
  end)

  it('keeps one copy of is_options, shape_str and check_tensor (oneflow._args)', function()
    for _, f in ipairs(files) do
      if f ~= 'lua/oneflow/_args.lua' then
        local s = read(f)
        for _, name in ipairs({'is_options', 'shape_str', 'check_tensor'}) do
          assert.is_nil(s:match('local function ' .. name .. '%f[^%w_]'), f .. ' defines ' .. name)
          assert.is_nil(s:match('function [%w_]+%.' .. name .. '%f[^%w_]'), f .. ' defines ' .. name)
        end
      end
    end
  end)

  it('never swallows a missing module', function()
    for _, f in ipairs(files) do
      assert.is_nil(read(f):match('pcall%(%s*require'), f)
    end
  end)

  it('makes every class with oneflow.class', function()
    for _, f in ipairs(files) do
      if f ~= 'lua/oneflow/class.lua' then
        -- a hand-made subclass machinery defines subclass() itself
        assert.is_nil(read(f):match('\nfunction [%w_]+:subclass%('), f .. ' defines subclass')
      end
    end
  end)

  it('a missing op module is a load error', function()
    local ok, err = pcall(require, 'oneflow.ops.no_such_family')
    assert.is_false(ok)
    assert.truthy(tostring(err):find("module 'oneflow.ops.no_such_family' not found", 1, true))
    assert.is_table(flow.nn.functional)
  end)
end)
