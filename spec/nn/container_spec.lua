local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn = flow.nn

local function keys_of(t)
  local r = {}
  for k in pairs(t) do r[#r + 1] = k end
  table.sort(r)
  return r
end

describe('nn.Sequential', function()
  it('runs its children in order and indexes from 1', function()
    local a, b = nn.Linear(2, 3), nn.ReLU()
    local seq = nn.Sequential(a, b)
    assert.equals(2, #seq)
    assert.equals(a, seq[1])
    assert.equals(b, seq[2])
    assert.equals(b, seq[-1])
    local x = flow.randn(4, 2)
    H.close(seq(x), a(x):relu():totable())
    local n = 0
    for i, m in ipairs(seq) do n = n + i; assert.equals(seq[i], m) end
    assert.equals(3, n)
  end)

  it('rejects out-of-range indices with 1-based ranges', function()
    local seq = nn.Sequential(nn.ReLU())
    H.raises(function() return seq[0] end, 'index 0 is out of range (1..1; indices are 1-based)')
    H.raises(function() return seq[3] end, 'out of range')
  end)

  it('takes named children in order', function()
    local seq = nn.Sequential({{'fc', nn.Linear(2, 2)}, {'act', nn.Tanh()}})
    assert.same({'fc.bias', 'fc.weight'}, keys_of(seq:state_dict()))
    assert.equals('Tanh', seq[2].__name)
    assert.equals(seq.fc, seq[1])
  end)

  it('append, insert, pop, slice and replacement keep names in step', function()
    local seq = nn.Sequential(nn.Linear(1, 1))
    seq:append(nn.ReLU()):append(nn.Linear(1, 2))
    assert.same({'0.bias', '0.weight', '2.bias', '2.weight'}, keys_of(seq:state_dict()))
    seq:insert(1, nn.Tanh())
    assert.equals('Tanh', seq[1].__name)
    assert.same({'1.bias', '1.weight', '3.bias', '3.weight'}, keys_of(seq:state_dict()))
    local popped = seq:pop(1)
    assert.equals('Tanh', popped.__name)
    seq[2] = nn.Linear(1, 1)          -- a raw store is picked up
    assert.same({'0.bias', '0.weight', '1.bias', '1.weight', '2.bias', '2.weight'},
                keys_of(seq:state_dict()))
    local part = seq:slice(2, 3)
    assert.equals(2, #part)
    assert.equals(seq[3], part[2])
    seq[4] = nn.Sigmoid()             -- one past the end appends
    assert.equals(4, #seq)
    H.raises(function() seq.extra = nn.ReLU() end, "Sequential: cannot add 'extra' by name")
    H.raises(function() seq[7] = nn.ReLU() end, 'Sequential: cannot assign to index 7 (size 4)')
  end)
end)

describe('nn.ModuleList', function()
  it('holds modules with 1-based indexing, append, extend and #', function()
    local ml = nn.ModuleList({nn.Linear(2, 2), nn.Linear(2, 2)})
    ml:append(nn.ReLU())
    ml:extend({nn.Tanh(), nn.Sigmoid()})
    assert.equals(5, #ml)
    assert.equals('Sigmoid', ml[-1].__name)
    assert.equals(4, #ml:parameters())
    local holder = nn.Module()
    holder.layers = ml
    assert.same({'layers.0.bias', 'layers.0.weight', 'layers.1.bias', 'layers.1.weight'},
                keys_of(holder:state_dict()))
    H.raises(function() ml(flow.zeros(1)) end, 'ModuleList: has no forward')
    H.raises(function() ml:append(5) end, 'expected an nn.Module, got number')
  end)
end)

describe('nn.ModuleDict', function()
  it('holds named modules', function()
    local md = nn.ModuleDict({act = nn.ReLU(), fc = nn.Linear(2, 2)})
    assert.same({'act', 'fc'}, md:keys())
    assert.equals(md.fc, md:get('fc'))
    md.out = nn.Linear(2, 1)
    assert.is_true(md:contains('out'))
    assert.equals(3, md:len())
    assert.same({'fc.bias', 'fc.weight', 'out.bias', 'out.weight'}, keys_of(md:state_dict()))
    local seen = {}
    for name in md:items() do seen[#seen + 1] = name end
    assert.same({'act', 'fc', 'out'}, seen)
    md:pop('act')
    assert.equals(2, md:len())
  end)
end)

describe('nn.ParameterList and nn.ParameterDict', function()
  it('ParameterList registers parameters under 0, 1, ...', function()
    local pl = nn.ParameterList({flow.zeros(2), nn.Parameter(flow.ones(3))})
    pl:append(flow.zeros(1))
    assert.equals(3, #pl)
    assert.is_true(nn.is_parameter(pl[1]))
    assert.is_true(pl[1].requires_grad)
    assert.same({'0', '1', '2'}, keys_of(pl:state_dict()))
    pl:double()
    assert.equals(flow.float64, pl[2].dtype)
    assert.equals(pl[2], pl:parameters()[2])
  end)

  it('ParameterDict registers named parameters', function()
    local pd = nn.ParameterDict({a = flow.zeros(2)})
    pd.b = flow.ones(1)
    assert.is_true(nn.is_parameter(pd.b))
    assert.same({'a', 'b'}, pd:keys())
    assert.same({'a', 'b'}, keys_of(pd:state_dict()))
    assert.equals(2, #pd:parameters())
  end)

  it('add_module on a Sequential after construction appends a named child', function()
    local s = nn.Sequential(nn.Linear(2, 2))
    s:add_module('extra', nn.Linear(2, 3))
    assert.are.equal(2, #s)
    assert.is_truthy(s:state_dict()['extra.weight'])
    assert.are.same({1, 3}, s(flow.randn(1, 2)):size():totable())
    s:add_module('extra', nn.Linear(2, 4))   -- same name: replaced in place
    assert.are.equal(2, #s)
    assert.are.same({1, 4}, s(flow.randn(1, 2)):size():totable())
  end)
end)
