-- cross_entropy and nll_loss against plain-Lua references: weights,
-- ignore_index, label smoothing, probability targets, reductions, spatial
-- inputs, gradients and range errors. Class labels are 1-based.
local flow = require 'oneflow'
local F = require('oneflow').nn.functional
local H = require 'spec.helpers'

local gradcheck, gradgradcheck = flow.autograd.gradcheck, flow.autograd.gradgradcheck
local f64 = flow.float64
local function randn(shape) return flow.randn(shape, {dtype = f64, requires_grad = true}) end
local function labels(t) return flow.tensor(t, {dtype = flow.int64}) end

local function log_softmax(row)
  local m = -math.huge
  for i = 1, #row do m = math.max(m, row[i]) end
  local s = 0
  for i = 1, #row do s = s + math.exp(row[i] - m) end
  local r = {}
  for i = 1, #row do r[i] = row[i] - m - math.log(s) end
  return r
end

-- PyTorch's cross_entropy for rows of logits and 1-based class targets.
local function ce_ref(logits, target, o)
  o = o or {}
  local eps, w, ign = o.label_smoothing or 0, o.weight, o.ignore_index or -100
  local C = #logits[1]
  local losses, total, wsum = {}, 0, 0
  for i = 1, #logits do
    local lp, t = log_softmax(logits[i]), target[i]
    local l = 0
    if t ~= ign then
      local wt = w and w[t] or 1
      l = -(1 - eps) * wt * lp[t]
      for c = 1, C do l = l - eps / C * (w and w[c] or 1) * lp[c] end
      wsum = wsum + wt
    end
    losses[i] = l
    total = total + l
  end
  if o.reduction == 'none' then return losses end
  if o.reduction == 'sum' then return total end
  return total / wsum
end

-- ... and with class-probability targets (mean over samples)
local function ce_prob_ref(logits, q, o)
  o = o or {}
  local eps, w = o.label_smoothing or 0, o.weight
  local C, total, losses = #logits[1], 0, {}
  for i = 1, #logits do
    local lp, l = log_softmax(logits[i]), 0
    for c = 1, C do l = l - (w and w[c] or 1) * ((1 - eps) * q[i][c] + eps / C) * lp[c] end
    losses[i] = l
    total = total + l
  end
  if o.reduction == 'none' then return losses end
  if o.reduction == 'sum' then return total end
  return total / #logits
end

local LOGITS = {{1, 2, 3, 0.5}, {-1, 0.5, 2, 2}, {0, 0, 0, 4}, {3, -2, 1, 1}, {0.3, 0.1, -0.4, 2}}
local TARGET = {3, 1, 4, 4, 2}
local W = {0.5, 2, 1, 1.5}

describe('cross_entropy', function()
  local x = flow.tensor(LOGITS, {dtype = f64})
  local t = labels(TARGET)
  local w = flow.tensor(W, {dtype = f64})

  it('matches the reference for each reduction', function()
    for _, red in ipairs({'mean', 'sum', 'none'}) do
      H.close(F.cross_entropy(x, t, {reduction = red}), ce_ref(LOGITS, TARGET, {reduction = red}), 1e-12)
    end
  end)

  it('uses weights, ignore_index and label smoothing like PyTorch', function()
    local cases = {
      {weight = W}, {ignore_index = 4}, {label_smoothing = 0.2},
      {weight = W, ignore_index = 1, label_smoothing = 0.3},
      {weight = W, ignore_index = 4, label_smoothing = 0.1, reduction = 'none'},
      {weight = W, label_smoothing = 0.15, reduction = 'sum'},
    }
    for _, o in ipairs(cases) do
      local opts = {ignore_index = o.ignore_index, label_smoothing = o.label_smoothing,
                    reduction = o.reduction, weight = o.weight and w}
      H.close(F.cross_entropy(x, t, opts), ce_ref(LOGITS, TARGET, o), 1e-12)
    end
    -- the weighted mean divides by the weights of the targets kept: 3, 4, 4, 2 here
    local sum = ce_ref(LOGITS, TARGET, {weight = W, ignore_index = 1, reduction = 'sum'})
    H.close(F.cross_entropy(x, t, {weight = w, ignore_index = 1}), sum / (1 + 1.5 + 1.5 + 2), 1e-12)
  end)

  it('takes class probabilities as the target', function()
    local q = {}
    for i = 1, #LOGITS do
      local z, s = {}, 0
      for c = 1, 4 do z[c] = (i * c) % 5 + 0.5; s = s + z[c] end
      for c = 1, 4 do z[c] = z[c] / s end
      q[i] = z
    end
    local qt = flow.tensor(q, {dtype = f64})
    for _, o in ipairs({{}, {weight = W, label_smoothing = 0.2}, {reduction = 'none'}, {reduction = 'sum'}}) do
      local opts = {weight = o.weight and w, label_smoothing = o.label_smoothing, reduction = o.reduction}
      H.close(F.cross_entropy(x, qt, opts), ce_prob_ref(LOGITS, q, o), 1e-12)
    end
    -- one-hot probabilities give the class-index loss
    H.close(F.cross_entropy(x, flow.one_hot(t, 4):to(f64)), ce_ref(LOGITS, TARGET), 1e-12)
  end)

  it('handles [N, C, d] inputs and unbatched [C] inputs', function()
    -- [2, 4, 3]: sample (n, s) is the column s of x[n]
    local x3 = flow.randn({2, 4, 3}, {dtype = f64})
    local t3 = {{1, 4, 2}, {3, 3, 1}}
    local xt, rows, tg = x3:totable(), {}, {}
    for n = 1, 2 do
      for s = 1, 3 do
        local r = {}
        for c = 1, 4 do r[c] = xt[n][c][s] end
        rows[#rows + 1], tg[#tg + 1] = r, t3[n][s]
      end
    end
    H.close(F.cross_entropy(x3, labels(t3), {weight = w, label_smoothing = 0.1}),
            ce_ref(rows, tg, {weight = W, label_smoothing = 0.1}), 1e-12)
    local none = F.cross_entropy(x3, labels(t3), {reduction = 'none'})
    assert.are.same({2, 3}, H.shape(none))
    H.close(none:view(-1), ce_ref(rows, tg, {reduction = 'none'}), 1e-12)
    local one = F.cross_entropy(flow.tensor(LOGITS[1], {dtype = f64}), labels(3))
    assert.are.same({}, H.shape(one))
    H.close(one, ce_ref({LOGITS[1]}, {3}), 1e-12)
  end)

  it('reads non-contiguous logits and targets', function()
    local xt = flow.tensor(LOGITS, {dtype = f64}):t():contiguous():t()
    local tt = labels({TARGET, TARGET}):t()[{{}, 2}]
    H.close(F.cross_entropy(xt, tt, {label_smoothing = 0.1}),
            ce_ref(LOGITS, TARGET, {label_smoothing = 0.1}), 1e-12)
  end)

  it('is stable for large logits in float32', function()
    local y = F.cross_entropy(flow.tensor({{1000, 0}, {-1000, 1000}}), labels({1, 1}))
    H.close(y, (0 + 2000) / 2, 1e-6)
  end)

  it('has the gradient softmax - onehot (mean)', function()
    local xl = flow.tensor(LOGITS, {dtype = f64, requires_grad = true})
    F.cross_entropy(xl, t):backward()
    local want = {}
    for i = 1, #LOGITS do
      local lp = log_softmax(LOGITS[i])
      want[i] = {}
      for c = 1, 4 do want[i][c] = (math.exp(lp[c]) - (c == TARGET[i] and 1 or 0)) / #LOGITS end
    end
    H.close(xl.grad, want, 1e-12)
  end)

  it('passes gradcheck in every configuration', function()
    local a = randn({5, 4})
    for _, o in ipairs({{}, {weight = w, ignore_index = 4, label_smoothing = 0.2},
                        {weight = w, reduction = 'none', label_smoothing = 0.1}, {reduction = 'sum'}}) do
      assert.is_true(gradcheck(function(z) return F.cross_entropy(z, t, o) end, {a}))
    end
    assert.is_true(gradcheck(function(z) return F.cross_entropy(z, labels({{1, 3}, {2, 2}}), {weight = w}) end,
                             {randn({2, 4, 2})}))
    -- probabilities: grads reach the target too
    local q = flow.softmax(flow.randn({5, 4}, {dtype = f64}), 2):requires_grad_()
    assert.is_true(gradcheck(function(z, p)
      return F.cross_entropy(z, p, {weight = w, label_smoothing = 0.25})
    end, {a, q}))
    assert.are.equal('CrossEntropyBackward', F.cross_entropy(a, t).grad_fn:name())
  end)

  it('has second derivatives under create_graph', function()
    assert.is_true(gradgradcheck(function(z) return F.cross_entropy(z, labels({2, 1, 3}),
                                                                    {label_smoothing = 0.1}) end,
                                 {randn({3, 4})}))
  end)

  it('rejects out-of-range labels before computing anything', function()
    local err = H.raises(function() F.cross_entropy(flow.randn({2, 10}), labels({11, 1})) end)
    assert.truthy(err:find('cross_entropy: target 11 out of range for 10 classes (1-based: expected 1..10)',
                           1, true))
    H.raises(function() F.cross_entropy(x, labels({0, 1, 1, 1, 1})) end, 'target 0 out of range')
    -- ignore_index may lie outside the classes
    H.close(F.cross_entropy(x, labels({0, 1, 1, 1, 1}), {ignore_index = 0}),
            ce_ref(LOGITS, {0, 1, 1, 1, 1}, {ignore_index = 0}), 1e-12)
  end)

  it('reports bad arguments', function()
    H.raises(function() F.cross_entropy(x, labels({1, 2})) end, 'expected target of shape [5]', 'got [2]')
    H.raises(function() F.cross_entropy(x, flow.ones({5, 3}, {dtype = f64})) end,
             'class probabilities', '[5,4]')
    H.raises(function() F.cross_entropy(x, t, {weight = flow.ones(3)}) end, 'weight', '[4]')
    H.raises(function() F.cross_entropy(x, t, {reduction = 'avg'}) end, "'none', 'mean' or 'sum'")
    H.raises(function() F.cross_entropy(x, t, {label_smoothing = 1.5}) end, 'label_smoothing')
    H.raises(function() F.cross_entropy(x, flow.ones(5, {dtype = flow.bool})) end, 'integer class indices')
    local wl = flow.ones(4, {dtype = f64, requires_grad = true})
    local y = F.cross_entropy(randn({5, 4}), t, {weight = wl})
    H.raises(function() y:backward() end, "derivative for 'weight' is not implemented")
  end)
end)

describe('nll_loss', function()
  local lp = {}
  for i = 1, #LOGITS do lp[i] = log_softmax(LOGITS[i]) end
  local x = flow.tensor(lp, {dtype = f64})
  local t = labels(TARGET)
  local w = flow.tensor(W, {dtype = f64})

  it('equals cross_entropy on log-probabilities', function()
    for _, o in ipairs({{}, {weight = W}, {weight = W, ignore_index = 4}, {reduction = 'none'},
                        {reduction = 'sum', ignore_index = 3}}) do
      local opts = {weight = o.weight and w, ignore_index = o.ignore_index, reduction = o.reduction}
      H.close(F.nll_loss(x, t, opts), ce_ref(LOGITS, TARGET, o), 1e-12)
    end
    -- it does not normalise: -x[t] of raw scores
    H.close(F.nll_loss(flow.tensor({{1, 2}, {3, 4}}, {dtype = f64}), labels({2, 1})), -(2 + 3) / 2, 1e-12)
  end)

  it('has gradients', function()
    local a = randn({5, 4})
    assert.is_true(gradcheck(function(z) return F.nll_loss(z, t, {weight = w, ignore_index = 2}) end, {a}))
    assert.is_true(gradcheck(function(z) return F.nll_loss(z, t, {reduction = 'none'}) end, {a}))
    assert.is_true(gradcheck(function(z) return F.nll_loss(z, labels({{1, 2}}), {reduction = 'sum'}) end,
                             {randn({1, 3, 2})}))
    local xl = flow.tensor(lp, {dtype = f64, requires_grad = true})
    F.nll_loss(xl, t, {reduction = 'sum'}):backward()
    H.close(xl.grad[{1}], {0, 0, -1, 0})
  end)

  it('rejects out-of-range labels', function()
    H.raises(function() F.nll_loss(x, labels({1, 2, 3, 4, 5})) end,
             'nll_loss: target 5 out of range for 4 classes (1-based: expected 1..4)')
  end)
end)
