local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn = flow.nn
local gradcheck = flow.autograd.gradcheck

local f64 = {dtype = flow.float64}

------------------------------------------------------------------ plain Lua reference
local function sigmoid(v) return 1 / (1 + math.exp(-v)) end

-- W [G, K] * v [K] + b [G]
local function affine(w, v, b)
  local r = {}
  for g = 1, #w do
    local s = b and b[g] or 0
    for k = 1, #v do s = s + w[g][k] * v[k] end
    r[g] = s
  end
  return r
end

local function lstm_step(p, x, h, c)
  local gi, gh = affine(p.w_ih, x, p.b_ih), affine(p.w_hh, h, p.b_hh)
  local n = #h
  local h1, c1 = {}, {}
  for j = 1, n do
    local i = sigmoid(gi[j] + gh[j])
    local f = sigmoid(gi[n + j] + gh[n + j])
    local g = math.tanh(gi[2 * n + j] + gh[2 * n + j])
    local o = sigmoid(gi[3 * n + j] + gh[3 * n + j])
    c1[j] = f * c[j] + i * g
    h1[j] = o * math.tanh(c1[j])
  end
  return h1, c1
end

local function gru_step(p, x, h)
  local gi, gh = affine(p.w_ih, x, p.b_ih), affine(p.w_hh, h, p.b_hh)
  local n, h1 = #h, {}
  for j = 1, n do
    local r = sigmoid(gi[j] + gh[j])
    local z = sigmoid(gi[n + j] + gh[n + j])
    local nn_ = math.tanh(gi[2 * n + j] + r * gh[2 * n + j])
    h1[j] = (1 - z) * nn_ + z * h[j]
  end
  return h1
end

local function params(m, sfx)
  return {w_ih = m['weight_ih' .. sfx]:totable(), w_hh = m['weight_hh' .. sfx]:totable(),
          b_ih = m['bias_ih' .. sfx]:totable(), b_hh = m['bias_hh' .. sfx]:totable()}
end

local function zeros(n)
  local r = {}
  for i = 1, n do r[i] = 0 end
  return r
end

describe('nn.LSTM / nn.GRU / nn.RNN', function()
  it('have PyTorch parameter names, shapes and init', function()
    local lstm = nn.LSTM(3, 4, {num_layers = 2, bidirectional = true})
    local names = {}
    for name, p in lstm:named_parameters() do names[#names + 1] = name .. H.shape(p)[1] end
    assert.same({'weight_ih_l016', 'weight_hh_l016', 'bias_ih_l016', 'bias_hh_l016',
                 'weight_ih_l0_reverse16', 'weight_hh_l0_reverse16', 'bias_ih_l0_reverse16',
                 'bias_hh_l0_reverse16', 'weight_ih_l116', 'weight_hh_l116', 'bias_ih_l116',
                 'bias_hh_l116', 'weight_ih_l1_reverse16', 'weight_hh_l1_reverse16',
                 'bias_ih_l1_reverse16', 'bias_hh_l1_reverse16'}, names)
    assert.same({16, 8}, H.shape(lstm.weight_ih_l1))
    for _, p in ipairs(lstm:parameters()) do assert.is_true(p:abs():max():item() <= 0.5) end
    assert.same({9, 5}, H.shape(nn.GRU(5, 3).weight_ih_l0))
    assert.equals(2, #nn.RNN(5, 3, {bias = false}):parameters())
    assert.equals('LSTM(3, 4, num_layers=2, bidirectional=True)', tostring(lstm))
  end)

  it('LSTM matches a step-by-step reference (gate order i, f, g, o)', function()
    local lstm = nn.LSTM(3, 2, {dtype = flow.float64})
    local x = flow.randn(4, 1, 3, f64)
    local out, state = lstm(x)
    local p, h, c = params(lstm, '_l0'), zeros(2), zeros(2)
    local want = {}
    for t = 1, 4 do
      h, c = lstm_step(p, x[t][1]:totable(), h, c)
      want[t] = {h}
    end
    H.close(out, want, 1e-12)
    H.close(state[1], {{h}}, 1e-12)
    H.close(state[2], {{c}}, 1e-12)
  end)

  it('GRU matches a step-by-step reference (gate order r, z, n), in both directions', function()
    local gru = nn.GRU(2, 3, {bidirectional = true, batch_first = true, dtype = flow.float64})
    local x = flow.randn(1, 3, 2, f64)
    local h0 = flow.randn(2, 1, 3, f64)
    local out, hn = gru(x, h0)
    assert.same({1, 3, 6}, H.shape(out))
    local pf, pb = params(gru, '_l0'), params(gru, '_l0_reverse')
    local hf, hb = h0[1][1]:totable(), h0[2][1]:totable()
    local fwd, bwd = {}, {}
    for t = 1, 3 do
      hf = gru_step(pf, x[1][t]:totable(), hf)
      fwd[t] = hf
    end
    for t = 3, 1, -1 do
      hb = gru_step(pb, x[1][t]:totable(), hb)
      bwd[t] = hb
    end
    for t = 1, 3 do
      H.close(out[1][t]:narrow(1, 1, 3), fwd[t], 1e-12)
      H.close(out[1][t]:narrow(1, 4, 3), bwd[t], 1e-12)
    end
    H.close(hn, {{hf}, {hb}}, 1e-12)
  end)

  it('handles stacking, batch_first, unbatched input and dropout', function()
    local rnn = nn.RNN(3, 5, {num_layers = 3, nonlinearity = 'relu', batch_first = true, dropout = 0.5})
    local out, hn = rnn(flow.randn(2, 7, 3))
    assert.same({2, 7, 5}, H.shape(out))
    assert.same({3, 2, 5}, H.shape(hn))
    H.close(hn[3], out:select(2, 7):totable(), 1e-6)
    rnn:eval()
    local o1 = rnn(flow.ones(2, 7, 3))
    H.close(o1, rnn(flow.ones(2, 7, 3)):totable())
    local lstm = nn.LSTM(3, 4)
    local uo, us = lstm(flow.randn(6, 3))
    assert.same({6, 4}, H.shape(uo))
    assert.same({1, 4}, H.shape(us[1]))
    H.raises(function() lstm(flow.randn(6, 2, 5)) end, 'LSTM: expected input with last dim 3 (input_size), got [6,2,5]')
    H.raises(function() lstm(flow.randn(6, 2, 3), {flow.zeros(1, 3, 4), flow.zeros(1, 2, 4)}) end,
             'LSTM: expected h_0 of size [1,2,4], got [1,3,4]')
    H.raises(function() nn.RNN(3, 4, {nonlinearity = 'gelu'}) end, "unknown nonlinearity 'gelu'")
  end)
end)

describe('RNN cells', function()
  it('LSTMCell and GRUCell match the references', function()
    local cell = nn.LSTMCell(3, 2, {dtype = flow.float64})
    local x, h, c = flow.randn(1, 3, f64), flow.randn(1, 2, f64), flow.randn(1, 2, f64)
    local h1, c1 = cell(x, {h, c})
    local p = {w_ih = cell.weight_ih:totable(), w_hh = cell.weight_hh:totable(),
               b_ih = cell.bias_ih:totable(), b_hh = cell.bias_hh:totable()}
    local rh, rc = lstm_step(p, x[1]:totable(), h[1]:totable(), c[1]:totable())
    H.close(h1, {rh}, 1e-12)
    H.close(c1, {rc}, 1e-12)
    local g = nn.GRUCell(3, 2, {dtype = flow.float64})
    local q = {w_ih = g.weight_ih:totable(), w_hh = g.weight_hh:totable(),
               b_ih = g.bias_ih:totable(), b_hh = g.bias_hh:totable()}
    H.close(g(x[1]), gru_step(q, x[1]:totable(), zeros(2)), 1e-12)
    assert.same({4, 2}, H.shape(nn.RNNCell(3, 2)(flow.randn(4, 3))))
  end)

  it('have correct gradients (gradcheck)', function()
    local cell = nn.LSTMCell(2, 2, {dtype = flow.float64})
    local x = flow.randn(2, 2, {dtype = flow.float64, requires_grad = true})
    local h = flow.randn(2, 2, {dtype = flow.float64, requires_grad = true})
    local c = flow.randn(2, 2, {dtype = flow.float64, requires_grad = true})
    assert.is_true(gradcheck(function(a, b, d, w)
      local _ = w
      local h1, c1 = cell(a, {b, d})
      return h1 + c1 * 2
    end, {x, h, c, cell.weight_hh}))
    local gcell = nn.GRUCell(2, 3, {dtype = flow.float64})
    assert.is_true(gradcheck(function(a, b) return gcell(a, b) end,
                             {x, flow.randn(2, 3, {dtype = flow.float64, requires_grad = true})}))
    local gru = nn.GRU(2, 2, {dtype = flow.float64})
    assert.is_true(gradcheck(function(a) return (gru(a)) end,
                             {flow.randn(3, 1, 2, {dtype = flow.float64, requires_grad = true})}))
  end)
end)
