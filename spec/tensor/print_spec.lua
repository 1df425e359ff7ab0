local flow = require 'oneflow'

describe('tostring', function()
  it('prints like PyTorch', function()
    assert.are.equal('tensor([[1., 2.],\n        [3., 4.]])', tostring(flow.tensor({{1, 2}, {3, 4}})))
    assert.are.equal('tensor([1.5000, 2.2500])', tostring(flow.tensor({1.5, 2.25})))
    assert.are.equal('tensor(3.)', tostring(flow.tensor(3)))
    assert.are.equal('tensor([0, 1, 2])', tostring(flow.arange(3)))
    assert.are.equal('tensor([ True, False])', tostring(flow.tensor({true, false})))
    assert.are.equal('tensor([1., 2.], dtype=oneflow.float64)',
                     tostring(flow.tensor({1, 2}, {dtype = flow.float64})))
    assert.are.equal('tensor([1, 2], dtype=oneflow.int32)',
                     tostring(flow.tensor({1, 2}, {dtype = flow.int32})))
    assert.are.equal('tensor([1.0000e-05, 1.0000e+00, 1.0000e+02])',
                     tostring(flow.tensor({1e-5, 1, 100})))
    assert.are.equal('tensor([[[0., 0.],\n         [0., 0.]],\n\n        [[0., 0.],\n         [0., 0.]]])',
                     tostring(flow.zeros(2, 2, 2)))
    assert.are.equal('tensor([nan, inf, -inf, 1.])',
                     tostring(flow.tensor({0 / 0, math.huge, -math.huge, 1})))
  end)

  it('summarises large tensors and shows empty ones', function()
    local s = tostring(flow.arange(0, 2000))
    assert.are.equal('tensor([   0,    1,    2,  ..., 1997, 1998, 1999])', s)
    assert.are.equal('tensor([])', tostring(flow.zeros(0)))
    assert.are.equal('tensor([], size=(0, 3))', tostring(flow.zeros(0, 3)))
  end)

  it('wraps long rows at 80 columns', function()
    local s = tostring(flow.arange(0, 30, {dtype = flow.float32}) / 7)
    for line in s:gmatch('[^\n]+') do assert.is_true(#line <= 80, line) end
    assert.is_true(select(2, s:gsub('\n', '')) >= 2)
  end)
end)
