-- The op schema: core/ops/ops.def is the one list of C ops. The library's
-- schema (flow._C.op_schema(), generated from it) must match the file line
-- by line, every public op's family file must hold its table row, its
-- attribute record must be a struct of core/ops/op.h, and doc/internals.md
-- must list every op with its family (so the docs cannot go stale).
local flow = require 'oneflow'

local function read(path)
  local f = assert(io.open(path, 'r'))
  local s = f:read('*a')
  f:close()
  return s
end

-- the OF_OP / OF_GRAPH_OP lines of ops.def, in order
local function def_lines()
  local rows = {}
  for macro, args in read('core/ops/ops.def'):gmatch('\n(OF_[%u_]*OP)(%b())') do
    local a = {}
    for part in args:sub(2, -2):gmatch('[^,]+') do a[#a + 1] = part:match('^%s*(.-)%s*$') end
    rows[#rows + 1] = {graph_only = macro == 'OF_GRAPH_OP', kind = a[1], name = a[2]:match('"(.*)"'),
                       attrs = a[3], min_inputs = tonumber(a[4]), max_inputs = tonumber(a[5]),
                       outputs = tonumber(a[6]), flags = a[7], family = a[8]}
  end
  return rows
end

describe('op schema (core/ops/ops.def)', function()
  local schema, lines = flow._C.op_schema(), def_lines()

  it('is what ops.def says, line by line', function()
    assert.is_true(#lines > 80)
    assert.are.equal(#lines, #schema)
    local seen = {}
    for i, l in ipairs(lines) do
      local s = schema[i]
      assert.are.equal(i - 1, s.kind)
      assert.are.same({l.name, l.attrs, l.family, l.min_inputs, l.max_inputs, l.outputs, l.graph_only},
                      {s.name, s.attrs, s.family, s.min_inputs, s.max_inputs, s.outputs, s.graph_only})
      assert.is_nil(seen[s.name], 'two ops named ' .. s.name)
      seen[s.name] = true
    end
  end)

  it('has each public op row in its family file and its record in op.h', function()
    local op_h = read('core/ops/op.h')
    for i, l in ipairs(lines) do
      local s = schema[i]
      if l.graph_only then
        assert.is_truthy(read('core/graph/ops.c'):find('OPK_' .. l.kind, 1, true), l.kind)
      else
        local src = read('core/ops/' .. l.family .. '.c')
        -- OF_OP_IMPL_INFER: a row whose results a loaded graph re-infers
        assert.is_truthy(src:find('OF_OP_IMPL(' .. l.kind .. ',', 1, true)
                         or src:find('OF_OP_IMPL_INFER(' .. l.kind .. ',', 1, true),
                         'core/ops/' .. l.family .. '.c has no row for ' .. l.kind)
        assert.is_truthy(op_h:find('} ' .. l.attrs .. ';', 1, true), l.attrs .. ' not in op.h')
        if s.flags.varattr then assert.are.equal(-1, s.attr_size)
        else assert.is_true(s.attr_size > 0) end
      end
    end
  end)

  it('carries the flags the graph passes rely on', function()
    local by = {}
    for _, s in ipairs(schema) do by[s.name] = s end
    assert.is_true(by.view.flags.view and by.transpose.flags.view)
    assert.is_nil(by.reshape.flags.view)   -- may copy
    assert.is_true(by.uniform_.flags.random and by.randn.flags.create)
    assert.is_true(by.binary.flags.elementwise and by.binary.flags.into)
    assert.is_true(by.all_reduce.flags.collective and by.all_reduce.flags.random)
    assert.is_true(by.cat.flags.varin)
    assert.is_true(by.alias.graph_only and by.fused_elementwise.graph_only)
  end)

  it('is listed whole in doc/internals.md', function()
    local doc = read('doc/internals.md')
    for _, s in ipairs(schema) do
      assert.is_truthy(doc:find('| `' .. s.name .. '` | ' .. s.family .. ' |', 1, true),
                       'doc/internals.md does not list op ' .. s.name .. ' (' .. s.family .. ')')
    end
  end)

  it('refuses a kind out of range', function()
    local info = flow._C.ffi.new('of_op_info')
    assert.are_not.equal(0, flow.C.of_op_schema(#schema, info))
    assert.are_not.equal(0, flow.C.of_op_schema(-1, info))
  end)
end)
