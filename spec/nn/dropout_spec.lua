local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional

describe('dropout', function()
  it('zeroes about p of the values and scales the rest by 1 / (1 - p)', function()
    flow.manual_seed(3)
    local x = flow.ones(200, 100)
    local y = F.dropout(x, 0.3, true)
    local vals = y:reshape(-1):totable()
    local zeros = 0
    for _, v in ipairs(vals) do
      if v == 0 then zeros = zeros + 1
      else assert.is_true(math.abs(v - 1 / 0.7) < 1e-6) end
    end
    assert.is_true(math.abs(zeros / #vals - 0.3) < 0.02, 'zero fraction ' .. zeros / #vals)
    assert.is_true(math.abs(y:mean():item() - 1) < 0.03)
  end)

  it('is the identity in eval mode and for p = 0; p = 1 gives zeros', function()
    local x = flow.randn(4, 5)
    assert.equals(x, F.dropout(x, 0.5, false))
    assert.equals(x, F.dropout(x, {p = 0}))
    H.close(F.dropout(x, 1), flow.zeros(4, 5):totable())
    local m = nn.Dropout(0.5)
    m:eval()
    assert.equals(x, m(x))
    m:train()
    assert.is_true(m(flow.ones(100)):eq(0):any():item())
    H.raises(function() nn.Dropout(1.5) end, 'dropout probability has to be between 0 and 1, but got 1.5')
  end)

  it('passes gradients through the kept values only', function()
    local x = flow.ones(50, {requires_grad = true})
    local y = F.dropout(x, 0.5)
    y:sum():backward()
    H.close(x.grad, y:detach():totable())
  end)

  it('dropout2d drops whole channels', function()
    flow.manual_seed(1)
    local y = F.dropout2d(flow.ones(4, 8, 3, 3), 0.5)
    local per_channel = y:sum({3, 4}):reshape(-1):totable()
    for _, s in ipairs(per_channel) do assert.is_true(s == 0 or math.abs(s - 18) < 1e-5) end
    assert.same({4, 8, 3, 3}, H.shape(nn.Dropout2d(0.2)(flow.ones(4, 8, 3, 3))))
    assert.same({8, 3, 3}, H.shape(F.dropout2d(flow.ones(8, 3, 3), 0.2)))
    H.raises(function() F.dropout2d(flow.ones(3, 3), 0.5) end, 'dropout2d: expected a 3D or 4D input')
  end)

  it('alpha_dropout keeps mean and variance of a standard normal input', function()
    flow.manual_seed(5)
    local x = flow.randn(100000, {dtype = flow.float64})
    local y = F.alpha_dropout(x, 0.2, true)
    assert.is_true(math.abs(y:mean():item()) < 0.02)
    assert.is_true(math.abs(y:std():item() - 1) < 0.02)
    assert.equals(x, nn.AlphaDropout(0.2):eval()(x))
  end)
end)
