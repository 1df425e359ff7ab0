local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn, F = flow.nn, flow.nn.functional
local composed = require 'oneflow.nn.functional.loss'
local gradcheck = flow.autograd.gradcheck

local f64 = {dtype = flow.float64}
local function t64(v, rg) return flow.tensor(v, {dtype = flow.float64, requires_grad = rg}) end
local function long(v) return flow.tensor(v, {dtype = flow.int64}) end

local x = {0.5, -1, 2, 0.1}
local y = {1, 0.5, -1, 0.1}

local function mean(t)
  local s = 0
  for _, v in ipairs(t) do s = s + v end
  return s / #t
end
local function elementwise(f)
  local r = {}
  for i = 1, #x do r[i] = f(x[i], y[i]) end
  return r
end

describe('regression losses', function()
  it('mse, l1, smooth_l1 and huber match their formulas with every reduction', function()
    local cases = {
      {F.mse_loss, {}, function(a, b) return (a - b) ^ 2 end},
      {F.l1_loss, {}, function(a, b) return math.abs(a - b) end},
      {F.smooth_l1_loss, {beta = 1.5}, function(a, b)
        local d = math.abs(a - b)
        return d < 1.5 and 0.5 * d * d / 1.5 or d - 0.75 end},
      {F.huber_loss, {delta = 1.5}, function(a, b)
        local d = math.abs(a - b)
        return d < 1.5 and 0.5 * d * d or 1.5 * (d - 0.75) end},
    }
    for i, c in ipairs(cases) do
      local ref = elementwise(c[3])
      local o = {}
      for k, v in pairs(c[2]) do o[k] = v end
      H.close(c[1](t64(x), t64(y), o), mean(ref), 1e-12, 'mean ' .. i)
      o.reduction = 'none'
      H.close(c[1](t64(x), t64(y), o), ref, 1e-12, 'none ' .. i)
      o.reduction = 'sum'
      H.close(c[1](t64(x), t64(y), o), mean(ref) * 4, 1e-12, 'sum ' .. i)
    end
    H.close(F.smooth_l1_loss(t64(x), t64(y), {beta = 0}), F.l1_loss(t64(x), t64(y)):item(), 1e-12)
    H.raises(function() F.mse_loss(t64(x), t64(y), {reduction = 'avg'}) end,
             "mse_loss: reduction must be 'none', 'mean' or 'sum', got avg")
  end)

  it('have correct gradients', function()
    for _, f in ipairs({F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.huber_loss}) do
      assert.is_true(gradcheck(function(a, b) return f(a, b, {reduction = 'none'}) end,
                               {t64(x, true), t64(y, true)}))
    end
  end)
end)

describe('binary cross entropy', function()
  local p = {0.9, 0.2, 0.5, 1e-50}
  local t = {1, 0, 0.3, 1}
  it('binary_cross_entropy clamps the log at -100 and takes weights', function()
    local ref = {}
    for i = 1, 4 do
      local lp = math.max(math.log(p[i]), -100)
      local lq = math.max(math.log(1 - p[i]), -100)
      ref[i] = -(t[i] * lp + (1 - t[i]) * lq)
    end
    H.close(F.binary_cross_entropy(t64(p), t64(t), {reduction = 'none'}), ref, 1e-12)
    local w = t64({1, 2, 3, 4})
    H.close(F.binary_cross_entropy(t64(p), t64(t), {weight = w, reduction = 'sum'}),
            ref[1] + 2 * ref[2] + 3 * ref[3] + 4 * ref[4], 1e-12)
    H.raises(function() F.binary_cross_entropy(t64({1.5}), t64({1})) end, 'between 0 and 1')
    H.raises(function() F.binary_cross_entropy(t64({0.5, 0.5}), t64({1})) end,
             'target size [1] must be the same as input size [2]')
    assert.is_true(gradcheck(function(a) return F.binary_cross_entropy(a, t64(t), {reduction = 'none'}) end,
                             {t64({0.9, 0.2, 0.5, 0.7}, true)}))
  end)

  it('binary_cross_entropy_with_logits is stable and supports pos_weight', function()
    local logits = {3, -2, 0.5, 800, -800}
    local tt = {1, 0, 0.3, 1, 0}
    local ref = {}
    for i = 1, 3 do
      local s = 1 / (1 + math.exp(-logits[i]))
      ref[i] = -(tt[i] * math.log(s) + (1 - tt[i]) * math.log(1 - s))
    end
    ref[4], ref[5] = 0, 0
    H.close(F.binary_cross_entropy_with_logits(t64(logits), t64(tt), {reduction = 'none'}), ref, 1e-9)
    local pw = t64({2})
    local want = {}
    for i = 1, 3 do
      local s = 1 / (1 + math.exp(-logits[i]))
      want[i] = -(2 * tt[i] * math.log(s) + (1 - tt[i]) * math.log(1 - s))
    end
    local got = F.binary_cross_entropy_with_logits(t64({3, -2, 0.5}), t64({1, 0, 0.3}),
                                                   {pos_weight = pw, reduction = 'none'})
    H.close(got, want, 1e-9)
    assert.is_true(gradcheck(function(a, b)
      return F.binary_cross_entropy_with_logits(a, b, {pos_weight = pw, weight = t64({1, 2, 3})})
    end, {t64({3, -2, 0.5}, true), t64({1, 0, 0.3}, true)}))
  end)
end)

describe('kl_div', function()
  it('follows PyTorch for each reduction and log_target', function()
    local logp = t64({{math.log(0.2), math.log(0.8)}, {math.log(0.5), math.log(0.5)}})
    local tgt = t64({{0.4, 0.6}, {0, 1}})
    local ref = {{0.4 * (math.log(0.4) - math.log(0.2)), 0.6 * (math.log(0.6) - math.log(0.8))},
                 {0, 1 * (0 - math.log(0.5))}}
    local total = ref[1][1] + ref[1][2] + ref[2][2]
    H.close(F.kl_div(logp, tgt, {reduction = 'none'}), ref, 1e-12)
    H.close(F.kl_div(logp, tgt, {reduction = 'sum'}), total, 1e-12)
    H.close(F.kl_div(logp, tgt), total / 4, 1e-12)
    H.close(F.kl_div(logp, tgt, {reduction = 'batchmean'}), total / 2, 1e-12)
    local lt = t64({{math.log(0.4), math.log(0.6)}, {math.log(0.3), math.log(0.7)}})
    local want = 0.4 * (math.log(0.4) - math.log(0.2)) + 0.6 * (math.log(0.6) - math.log(0.8))
                 + 0.3 * (math.log(0.3) - math.log(0.5)) + 0.7 * (math.log(0.7) - math.log(0.5))
    H.close(F.kl_div(logp, lt, {reduction = 'sum', log_target = true}), want, 1e-12)
    assert.is_true(gradcheck(function(a, b) return F.kl_div(a, b, {reduction = 'none'}) end,
                             {logp:detach():requires_grad_(), t64({{0.4, 0.6}, {0.1, 0.9}}, true)}))
  end)
end)

describe('nll_loss and cross_entropy', function()
  local logits = {{1, 2, 0.5}, {0.1, -1, 3}, {2, 2, 2}, {0, 1, -1}}
  local target = {2, 3, 1, 3}

  local function ref_ce(w, smoothing, ignore)
    local num, den = 0, 0
    for n = 1, 4 do
      local row = logits[n]
      local m = math.log(math.exp(row[1]) + math.exp(row[2]) + math.exp(row[3]))
      if target[n] ~= ignore then
        local wt = w and w[target[n]] or 1
        local smooth = 0
        for c = 1, 3 do smooth = smooth - (w and w[c] or 1) * (row[c] - m) end
        num = num + (1 - smoothing) * wt * -(row[target[n]] - m) + smoothing / 3 * smooth
        den = den + wt
      end
    end
    return num / den
  end

  it('cross_entropy matches the reference, with weight, ignore_index and label_smoothing', function()
    local w = {0.2, 1, 3}
    for _, impl in ipairs({F, composed}) do
      H.close(impl.cross_entropy(t64(logits), long(target)), ref_ce(nil, 0), 1e-9)
      H.close(impl.cross_entropy(t64(logits), long(target), {weight = t64(w)}), ref_ce(w, 0), 1e-9)
      H.close(impl.cross_entropy(t64(logits), long(target), {ignore_index = 3}), ref_ce(nil, 0, 3), 1e-9)
      H.close(impl.cross_entropy(t64(logits), long(target), {label_smoothing = 0.1}), ref_ce(nil, 0.1), 1e-9)
      H.close(impl.cross_entropy(t64(logits), long(target), {label_smoothing = 0.2, weight = t64(w)}),
              ref_ce(w, 0.2), 1e-9)
    end
  end)

  it('composed and kernel versions agree on the other forms', function()
    local z = flow.randn(3, 4, 2, f64)
    local t = long({{1, 4}, {2, 2}, {3, 1}})
    local probs = F.softmax(flow.randn(3, 4, 2, f64), 2)
    local opts = {{}, {reduction = 'none'}, {reduction = 'sum', weight = t64({1, 2, 3, 4})},
                  {ignore_index = 2, reduction = 'none'}}
    for i, o in ipairs(opts) do
      H.close(composed.cross_entropy(z, t, o), F.cross_entropy(z, t, o):totable(), 1e-9, 'ce ' .. i)
      H.close(composed.nll_loss(z, t, o), F.nll_loss(z, t, o):totable(), 1e-9, 'nll ' .. i)
    end
    H.close(composed.cross_entropy(z, probs), F.cross_entropy(z, probs):totable(), 1e-9, 'probs')
    H.close(composed.cross_entropy(z[1]:t(), long({1, 3})), F.cross_entropy(z[1]:t(), long({1, 3})):item(), 1e-9)
  end)

  it('composed versions have correct gradients', function()
    local t = long({2, 3, 1})
    assert.is_true(gradcheck(function(a)
      return composed.cross_entropy(a, t, {label_smoothing = 0.1, weight = t64({1, 2, 3})})
    end, {flow.randn(3, 3, {dtype = flow.float64, requires_grad = true})}))
  end)
end)

describe('other losses', function()
  it('margin, hinge, soft margin, cosine embedding and triplet losses', function()
    local a, b = t64({1, 2, 3}), t64({2, 2, 1})
    local yy = t64({1, -1, 1})
    -- max(0, -y (a - b) + 0.5): 1.5, 0.5, 0
    H.close(F.margin_ranking_loss(a, b, yy, {margin = 0.5, reduction = 'none'}), {1.5, 0.5, 0}, 1e-12)
    -- y = 1: x; y = -1: max(0, 1 - x)
    H.close(F.hinge_embedding_loss(t64({0.3, 0.3, 2}), t64({1, -1, -1}), {reduction = 'none'}), {0.3, 0.7, 0}, 1e-12)
    H.close(F.soft_margin_loss(a, yy, {reduction = 'sum'}),
            math.log(1 + math.exp(-1)) + math.log(1 + math.exp(2)) + math.log(1 + math.exp(-3)), 1e-12)
    local u, v = t64({{1, 0}, {1, 1}}), t64({{0, 1}, {1, 1}})
    H.close(F.cosine_embedding_loss(u, v, t64({1, -1}), {reduction = 'none'}), {1, 1}, 1e-9)
    local an, po, ne = t64({{0, 0}}), t64({{3, 4}}), t64({{0, 1}})
    local dp = math.sqrt((-3 + 1e-6) ^ 2 + (-4 + 1e-6) ^ 2)
    local dn = math.sqrt((1e-6) ^ 2 + (-1 + 1e-6) ^ 2)
    H.close(F.triplet_margin_loss(an, po, ne), dp - dn + 1, 1e-9)
  end)

  it('poisson and gaussian nll, multilabel soft margin', function()
    local inp, tgt = t64({0.5, 1}), t64({2, 0})
    H.close(F.poisson_nll_loss(inp, tgt, {reduction = 'none'}), {math.exp(0.5) - 1, math.exp(1)}, 1e-12)
    local var = t64({0.5, 2})
    H.close(F.gaussian_nll_loss(inp, tgt, var, {reduction = 'none'}),
            {0.5 * (math.log(0.5) + 2.25 / 0.5), 0.5 * (math.log(2) + 0.5)}, 1e-12)
    local lg = t64({{1, -1}})
    local ls = function(v) return math.log(1 / (1 + math.exp(-v))) end
    H.close(F.multilabel_soft_margin_loss(lg, t64({{1, 0}})), -(ls(1) + ls(1)) / 2, 1e-12)
  end)
end)

describe('loss modules', function()
  it('pass their options to the functions', function()
    local a, b = t64(x), t64(y)
    H.close(nn.MSELoss()(a, b), F.mse_loss(a, b):item(), 1e-12)
    H.close(nn.L1Loss({reduction = 'sum'})(a, b), F.l1_loss(a, b, {reduction = 'sum'}):item(), 1e-12)
    H.close(nn.SmoothL1Loss({beta = 0.5})(a, b), F.smooth_l1_loss(a, b, {beta = 0.5}):item(), 1e-12)
    H.close(nn.HuberLoss('none', 0.5)(a, b), F.huber_loss(a, b, {delta = 0.5, reduction = 'none'}):totable(), 1e-12)
    local logits, t = flow.randn(5, 3, f64), long({1, 2, 3, 1, 2})
    local w = t64({1, 2, 0.5})
    local ce = nn.CrossEntropyLoss({weight = w, label_smoothing = 0.1})
    H.close(ce(logits, t), F.cross_entropy(logits, t, {weight = w, label_smoothing = 0.1}):item(), 1e-12)
    assert.same({'weight'}, (function()
      local r = {}
      for k in pairs(ce:state_dict()) do r[#r + 1] = k end
      return r
    end)())
    local lp = F.log_softmax(logits, 2)
    H.close(nn.NLLLoss({ignore_index = 2})(lp, t), F.nll_loss(lp, t, {ignore_index = 2}):item(), 1e-12)
    local p = flow.rand(4, f64)
    local bt = t64({1, 0, 1, 0})
    H.close(nn.BCELoss()(p, bt), F.binary_cross_entropy(p, bt):item(), 1e-12)
    H.close(nn.BCEWithLogitsLoss({pos_weight = t64({3})})(p, bt),
            F.binary_cross_entropy_with_logits(p, bt, {pos_weight = t64({3})}):item(), 1e-12)
    H.close(nn.KLDivLoss({reduction = 'batchmean'})(lp, F.softmax(logits, 2)),
            F.kl_div(lp, F.softmax(logits, 2), {reduction = 'batchmean'}):item(), 1e-12)
  end)
end)
