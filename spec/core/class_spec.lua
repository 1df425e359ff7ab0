-- oneflow.class: the one class helper behind nn.Module, nn.Graph, the
-- optimizers, utils.data, autograd.Function and flowvision's transforms.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local class = require 'oneflow.class'

describe('oneflow.class', function()
  it('is flow.class; makes classes, subclasses and instances', function()
    assert.equals(class, flow.class)
    local Base = class('Base')
    function Base:__init(a) self.a = a end
    function Base:get() return self.a end
    Base.__tostring = function(self) return 'Base(' .. tostring(self.a) .. ')' end
    local Sub = Base:subclass('Sub')
    function Sub:__init(a, b) Base.__init(self, a); self.b = b end
    local s = Sub(1, 2)
    assert.equals(1, s:get())
    assert.equals(2, s.b)
    assert.equals(Base, Sub.super)
    assert.equals('Sub', s.__name)
    assert.equals('Base(1)', tostring(s))           -- metamethods are inherited
    assert.equals('Sub', tostring(Sub))
    assert.is_true(class.isinstance(s, Base))
    assert.is_true(class.isinstance(s, Sub))
    assert.is_false(class.isinstance(Base(1), Sub))
    assert.is_false(class.isinstance({}, Base))
    assert.equals(Sub, class.of(s))
    local Other = class('Other', Base)                -- class(name, base) == base:subclass(name)
    assert.equals(Base, Other.super)
    assert.is_true(class.is_class(Other))
    H.raises(function() class('X', {}) end, 'class: base of X must be a class made by oneflow.class')
  end)

  it('hooks: __alloc, __setup (with subclass arguments) and __label', function()
    local seen = {}
    local Root = class('Root')
    Root.__label = 'lib.'
    function Root.__alloc(cls) return setmetatable({born = true}, cls) end
    function Root.__setup(cls, base, extra) seen[#seen + 1] = {cls.__name, base, extra} end
    local A = Root:subclass('A', 'x')
    local B = A:subclass('B')
    assert.are.same({{'A', Root, 'x'}, {'B', A, nil}}, seen)
    assert.is_true(B().born)
    assert.equals('lib.B', tostring(B))
  end)

  it('is what nn.Module, nn.Graph, optimizers, datasets, Function and transforms are made with', function()
    local nn = flow.nn
    local Net = nn.Module:subclass('Net')
    function Net:__init() nn.Module.__init(self); self.fc = nn.Linear(2, 2) end
    local net = Net()
    assert.is_true(class.isinstance(net, nn.Module))
    assert.equals('nn.Net', tostring(Net))
    assert.is_true(class.is_class(nn.Linear))

    local opt = flow.optim.SGD(net:parameters(), 0.1)
    assert.is_true(class.isinstance(opt, require('oneflow.optim.optimizer')))

    local G = nn.Graph:subclass('G')
    assert.equals('nn.Graph G', tostring(G))
    assert.is_true(class.is_class(G))

    local data = flow.utils.data
    local ds = data.TensorDataset(flow.ones(3, 2))
    assert.is_true(class.isinstance(ds, data.Dataset))   -- a userdata proxy
    assert.equals(3, #ds)

    local Sq = flow.autograd.Function:subclass('Sq')
    function Sq.forward(ctx, x) ctx:save_for_backward(x); return x * x end
    function Sq.backward(ctx, g) return 2 * ctx.saved_tensors[1] * g end
    assert.equals('Sq', Sq.name)
    local x = flow.tensor({3.0}, {requires_grad = true})
    Sq.apply(x):sum():backward()
    H.close(x.grad, {6})

    local T = require('flowvision.transforms')
    assert.is_true(class.is_class(T.Transform))
    assert.equals('transforms.Normalize', tostring(T.Normalize))
  end)
end)
