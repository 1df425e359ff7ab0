local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn = flow.nn

-- A ResNet-like nesting: Net{conv1, bn1, layer1 = Sequential{Block{conv1, bn1}}, fc}
local Block = nn.Module:subclass('Block')
function Block:__init(c)
  nn.Module.__init(self)
  self.conv1 = nn.Linear(c, c)
  self.bn1 = nn.BatchNorm1d(c)
end
function Block:forward(x) return self.bn1(self.conv1(x)):relu() end

local Net = nn.Module:subclass('Net')
function Net:__init()
  nn.Module.__init(self)
  self.conv1 = nn.Linear(4, 3)
  self.bn1 = nn.BatchNorm1d(3)
  self.layer1 = nn.Sequential(Block(3), Block(3))
  self.fc = nn.Linear(3, 2)
end
function Net:forward(x) return self.fc(self.layer1(self.bn1(self.conv1(x)))) end

local function keys_of(t)
  local r = {}
  for k in pairs(t) do r[#r + 1] = k end
  table.sort(r)
  return r
end

describe('nn.Parameter', function()
  it('is a leaf that requires grad, shares storage and is marked', function()
    local t = flow.zeros(2, 3)
    local p = nn.Parameter(t)
    assert.is_true(p.requires_grad and p.is_leaf)
    assert.is_true(nn.is_parameter(p))
    assert.is_false(nn.is_parameter(t))
    flow.no_grad(function() p:fill_(2) end)
    H.close(t, {{2, 2, 2}, {2, 2, 2}})
    assert.is_false(nn.Parameter(flow.ones(2), false).requires_grad)
    assert.is_false(nn.Parameter(flow.ones(2), {requires_grad = false}).requires_grad)
  end)
end)

describe('nn.Module registration', function()
  it('registers parameters and modules by assignment, in order', function()
    local m = nn.Module()
    m.b = nn.Parameter(flow.zeros(1))
    m.a = nn.Parameter(flow.zeros(2))
    m.sub = nn.Linear(2, 2)
    m.plain = 5
    local names = {}
    for name, p in m:named_parameters() do names[#names + 1] = name .. ':' .. p:numel() end
    assert.same({'b:1', 'a:2', 'sub.weight:4', 'sub.bias:2'}, names)
    assert.equals(4, #m:parameters())
    assert.equals(5, rawget(m, 'plain'))
    assert.equals(m.sub, m:children()[1])
  end)

  it('registers buffers, with non-persistent ones left out of the state dict', function()
    local m = nn.Module()
    m:register_buffer('keep', flow.ones(2))
    m:register_buffer('tmp', flow.ones(3), {persistent = false})
    local names = {}
    for name in m:named_buffers() do names[#names + 1] = name end
    assert.same({'keep', 'tmp'}, names)
    assert.same({'keep'}, keys_of(m:state_dict()))
    m.keep = flow.zeros(2)   -- assignment updates the buffer
    H.close(m:state_dict().keep, {0, 0})
  end)

  it('rejects a plain tensor for a parameter slot and bad names', function()
    local lin = nn.Linear(2, 2)
    H.raises(function() lin.weight = flow.zeros(2, 2) end, "parameter 'weight'", 'nn.Parameter or nil')
    lin.bias = nil
    assert.is_nil(lin.bias)
    assert.equals(1, #lin:parameters())
    H.raises(function() lin:register_parameter('a.b', nil) end, "can't be empty or contain '.'")
    H.raises(function() lin:register_buffer('weight', flow.zeros(1)) end, "attribute 'weight' already exists")
  end)

  it('lists modules and children with PyTorch names', function()
    local net = Net()
    local names = {}
    for name in net:named_modules() do names[#names + 1] = name end
    assert.same({'', 'conv1', 'bn1', 'layer1', 'layer1.0', 'layer1.0.conv1', 'layer1.0.bn1',
                 'layer1.1', 'layer1.1.conv1', 'layer1.1.bn1', 'fc'}, names)
    local kids = {}
    for name, m in net:named_children() do kids[#kids + 1] = name .. '=' .. m.__name end
    assert.same({'conv1=Linear', 'bn1=BatchNorm1d', 'layer1=Sequential', 'fc=Linear'}, kids)
    assert.equals(11, #net:modules())
    assert.equals(net.layer1[2].bn1, net:get_submodule('layer1.1.bn1'))
    assert.equals(net.fc.bias, net:get_parameter('fc.bias'))
  end)

  it('counts a shared parameter once', function()
    local a = nn.Linear(2, 2)
    local seq = nn.Sequential(a, a)
    assert.equals(2, #seq:parameters())
    assert.equals(4, #keys_of(seq:state_dict()))   -- state_dict keeps both paths, as PyTorch
  end)
end)

describe('nn.Module modes and grads', function()
  it('train/eval set the flag recursively', function()
    local net = Net()
    assert.is_true(net.training)
    net:eval()
    for _, m in ipairs(net:modules()) do assert.is_false(m.training) end
    net:train()
    assert.is_true(net.layer1[1].bn1.training)
  end)

  it('apply visits children first, then self', function()
    local order = {}
    nn.Sequential(nn.ReLU(), nn.Tanh()):apply(function(m) order[#order + 1] = m.__name end)
    assert.same({'ReLU', 'Tanh', 'Sequential'}, order)
  end)

  it('zero_grad clears or zeroes grads; requires_grad_ toggles', function()
    local lin = nn.Linear(3, 2)
    lin.weight.grad = flow.ones(2, 3)
    assert.is_not_nil(lin.weight.grad)
    lin:zero_grad({set_to_none = false})
    H.close(lin.weight.grad, {{0, 0, 0}, {0, 0, 0}})
    lin:zero_grad()
    assert.is_nil(lin.weight.grad)
    lin:requires_grad_(false)
    assert.is_false(lin.weight.requires_grad)
  end)
end)

describe('nn.Module state dicts', function()
  it('uses PyTorch key names for nested modules and buffers', function()
    local sd = Net():state_dict()
    local keys = keys_of(sd)
    for _, k in ipairs({'conv1.weight', 'bn1.running_mean', 'bn1.running_var', 'bn1.num_batches_tracked',
                        'layer1.0.conv1.weight', 'layer1.1.bn1.bias', 'fc.bias'}) do
      assert.is_not_nil(sd[k], k)
    end
    assert.equals(2 + 5 + 2 * 7 + 2, #keys)
    assert.equals(flow.int64, sd['bn1.num_batches_tracked'].dtype)
    local _, ordered = Net():state_dict()
    assert.same({'conv1.weight', 'conv1.bias', 'bn1.weight'}, {ordered[1], ordered[2], ordered[3]})
  end)

  it('Sequential children are named 0, 1, ...', function()
    local seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert.same({'0.bias', '0.weight', '2.bias', '2.weight'}, keys_of(seq:state_dict()))
  end)

  it('load_state_dict copies values into the existing tensors', function()
    local a, b = Net(), Net()
    local w = b.fc.weight
    b:load_state_dict(a:state_dict())
    assert.equals(w, b.fc.weight)
    H.close(b.fc.weight, a.fc.weight:totable())
    H.close(b.layer1[2].bn1.running_var, a.layer1[2].bn1.running_var:totable())
    assert.is_true(b.fc.weight.requires_grad)
  end)

  it('strict loading names missing and unexpected keys', function()
    local sd = Net():state_dict()
    sd['fc.bias'] = nil
    sd['extra.weight'] = flow.zeros(1)
    local err = H.raises(function() Net():load_state_dict(sd) end,
                         'missing keys in state_dict: fc.bias', 'unexpected keys in state_dict: extra.weight')
    assert.truthy(err:find('module_spec.lua', 1, true))
    local res = Net():load_state_dict(sd, {strict = false})
    assert.same({'fc.bias'}, res.missing_keys)
    assert.same({'extra.weight'}, res.unexpected_keys)
  end)

  it('reports size mismatches even when not strict', function()
    local sd = nn.Linear(84, 10):state_dict()
    H.raises(function() nn.Linear(120, 10):load_state_dict(sd, {strict = false}) end,
             'load_state_dict: size mismatch for weight: checkpoint [10,84], model [10,120]')
  end)
end)

describe('nn.Module conversion', function()
  it('double() converts parameters and floating buffers, keeping marks and grads', function()
    local bn = nn.BatchNorm1d(3)
    local lin = nn.Linear(2, 3)
    local seq = nn.Sequential(lin, bn)
    lin.weight.grad = flow.ones(3, 2)
    seq:double()
    assert.equals(flow.float64, seq[1].weight.dtype)
    assert.is_true(nn.is_parameter(seq[1].weight))
    assert.is_true(seq[1].weight.requires_grad)
    assert.equals(flow.float64, seq[1].weight.grad.dtype)
    assert.equals(flow.float64, seq[2].running_mean.dtype)
    assert.equals(flow.int64, seq[2].num_batches_tracked.dtype)
    local y = seq(flow.randn(4, 2, {dtype = flow.float64}))
    assert.equals(flow.float64, y.dtype)
    seq:to(flow.float32)
    assert.equals(flow.float32, seq[2].weight.dtype)
  end)

  it('clone makes a deep copy with new parameters', function()
    local lin = nn.Linear(2, 2)
    local c = lin:clone()
    assert.are_not.equal(lin.weight, c.weight)
    H.close(c.weight, lin.weight:totable())
    assert.is_true(nn.is_parameter(c.weight))
    flow.no_grad(function() c.weight:fill_(0) end)
    assert.is_true(lin.weight:abs():sum():item() > 0)
  end)
end)

describe('nn.Module repr', function()
  it('prints nested modules like PyTorch', function()
    local s = tostring(nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU()), nn.Dropout(0.2)))
    assert.equals([[Sequential(
  (0): Linear(in_features=2, out_features=3, bias=True)
  (1): Sequential(
    (0): ReLU()
  )
  (2): Dropout(p=0.2, inplace=False)
)]], s)
    assert.equals('Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))',
                  tostring(nn.Conv2d(1, 32, 3, 1, 1)))
  end)
end)

describe('nn.Module calls', function()
  it('module(x) calls forward; hooks can see and replace values', function()
    local lin = nn.Linear(2, 2)
    local seen
    local h = lin:register_forward_hook(function(_, input, out) seen = {input[1], out} end)
    local x = flow.randn(1, 2)
    local y = lin(x)
    assert.equals(x, seen[1])
    assert.equals(y, seen[2])
    h.remove()
    local pre = lin:register_forward_pre_hook(function() return flow.zeros(1, 2) end)
    H.close(lin(x), lin.bias:view(1, 2):totable())
    pre.remove()
  end)

  it('adds the module path to errors (Torch7 style)', function()
    local seq = nn.Sequential(nn.Linear(4, 3), nn.Linear(5, 2))
    H.raises(function() seq(flow.randn(2, 4)) end,
             'In 2 module of nn.Sequential: ', 'Linear: expected input with last dim 5 (in_features), got [2,3]')
    local nested = nn.Sequential(nn.ReLU(), nn.Sequential(nn.Tanh(), nn.Linear(3, 1)))
    H.raises(function() nested(flow.randn(2, 4)) end,
             'In 2 module of nn.Sequential: In 2 module of nn.Sequential: ', 'last dim 3')
    local net = Net()
    net.layer1[1].conv1 = nn.Linear(7, 3)
    H.raises(function() net(flow.randn(2, 4)) end, 'in layer1.0.conv1 (Linear): ',
             'expected input with last dim 7')
  end)

  it('a missing forward is an error naming the class', function()
    local Empty = nn.Module:subclass('Empty')
    H.raises(function() Empty()(flow.zeros(1)) end, 'Empty: forward is not implemented')
  end)
end)
