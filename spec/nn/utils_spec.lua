local flow = require 'oneflow'
local H = require 'spec.helpers'
local nn = flow.nn
local utils, prune = nn.utils, nn.utils.prune

local function with_grads(gs)
  local ps = {}
  for i, g in ipairs(gs) do
    ps[i] = nn.Parameter(flow.zeros(#g))
    ps[i].grad = flow.tensor(g)
  end
  return ps
end

describe('nn.utils gradient clipping', function()
  it('clip_grad_norm_ scales all grads by max_norm / total', function()
    local ps = with_grads({{3, 0}, {0, 4}})     -- total 2-norm 5
    local total = utils.clip_grad_norm_(ps, 1)
    H.close(total, 5, 1e-6)
    local c = 1 / (5 + 1e-6)
    H.close(ps[1].grad, {3 * c, 0}, 1e-6)
    H.close(ps[2].grad, {0, 4 * c}, 1e-6)
    local same = with_grads({{0.3, 0.4}})
    utils.clip_grad_norm_(same, 1)
    H.close(same[1].grad, {0.3, 0.4}, 1e-7)
  end)

  it('supports other norms, iterators and non-finite checks', function()
    local ps = with_grads({{1, -2}, {3}})
    H.close(utils.clip_grad_norm_(ps, 100, {norm_type = 1}), 6, 1e-6)
    H.close(utils.clip_grad_norm_(ps, 100, {norm_type = math.huge}), 3, 1e-6)
    local lin = nn.Linear(2, 2)
    lin.weight.grad = flow.ones(2, 2)
    H.close(utils.clip_grad_norm_(lin:named_parameters(), 10), 2, 1e-6)
    local bad = with_grads({{0 / 0, 1}})
    H.raises(function() utils.clip_grad_norm_(bad, 1, {error_if_nonfinite = true}) end, 'non-finite')
  end)

  it('clip_grad_value_ clamps grads', function()
    local ps = with_grads({{-3, 0.5, 2}})
    utils.clip_grad_value_(ps, 1)
    H.close(ps[1].grad, {-1, 0.5, 1})
  end)
end)

describe('nn.utils parameter vectors', function()
  it('round-trips parameters through a vector', function()
    local lin = nn.Linear(3, 2)
    local v = utils.parameters_to_vector(lin:parameters())
    assert.same({8}, H.shape(v))
    H.close(v:narrow(1, 1, 6), lin.weight:reshape(-1):totable())
    utils.vector_to_parameters(flow.arange(8):float(), lin:parameters())
    H.close(lin.weight, {{0, 1, 2}, {3, 4, 5}})
    H.close(lin.bias, {6, 7})
    H.raises(function() utils.vector_to_parameters(flow.zeros(3), lin:parameters()) end,
             'vec has 3 elements, parameters need 8')
  end)

  it('takes an iterator over named parameters and refuses one that yields no tensor', function()
    local lin = nn.Linear(3, 2)
    assert.same({8}, H.shape(utils.parameters_to_vector(lin:named_parameters())))
    -- an endless iterator of numbers stops at its first value
    H.raises(function() utils.parameters_to_vector(function() return 1 end) end,
             'parameters_to_vector: params iterator yielded number, nil; expected a tensor')
  end)
end)

describe('nn.utils.prune', function()
  it('l1_unstructured adds weight_orig and weight_mask like PyTorch', function()
    local lin = nn.Linear(3, 2)
    flow.no_grad(function() lin.weight:copy_(flow.tensor({{0.1, -0.5, 0.2}, {-0.05, 0.9, 0.3}})) end)
    prune.l1_unstructured(lin, 'weight', 0.5)         -- round(0.5 * 6) = 3 smallest |w|
    H.close(lin.weight_mask, {{0, 1, 0}, {0, 1, 1}})
    H.close(lin.weight, {{0, -0.5, 0}, {0, 0.9, 0.3}}, 1e-7)
    local keys = {}
    for k in pairs(lin:state_dict()) do keys[#keys + 1] = k end
    table.sort(keys)
    assert.same({'bias', 'weight_mask', 'weight_orig'}, keys)
    assert.is_true(prune.is_pruned(lin))
    -- the forward uses the pruned weight; grads reach weight_orig
    local y = lin(flow.ones(1, 3))
    H.close(y, {{-0.5 + lin.bias[1]:item(), 1.2 + lin.bias[2]:item()}}, 1e-6)
    y:sum():backward()
    H.close(lin.weight_orig.grad, {{0, 1, 0}, {0, 1, 1}})
  end)

  it('prunes again among the kept entries, then remove makes it permanent', function()
    local lin = nn.Linear(4, 1, false)
    flow.no_grad(function() lin.weight:copy_(flow.tensor({{1, 2, 3, 4}})) end)
    prune.l1_unstructured(lin, 'weight', 1)
    prune.l1_unstructured(lin, 'weight', 2)            -- 2 more of the 3 kept
    H.close(lin.weight_mask, {{0, 0, 0, 1}})
    local orig = lin.weight_orig
    prune.remove(lin, 'weight')
    assert.equals(orig, lin.weight)
    assert.is_true(nn.is_parameter(lin.weight))
    H.close(lin.weight, {{0, 0, 0, 4}})
    assert.is_false(prune.is_pruned(lin))
    assert.is_nil(lin.weight_mask)
    H.raises(function() prune.remove(lin, 'weight') end, 'has to be pruned before pruning can be removed')
  end)

  it('random_unstructured, ln_structured and global_unstructured', function()
    local lin = nn.Linear(5, 4)
    prune.random_unstructured(lin, 'weight', 0.25)
    assert.equals(5, lin.weight_mask:eq(0):sum():item())
    prune.random_unstructured(lin, 'bias', 1)
    assert.equals(1, lin.bias_mask:eq(0):sum():item())
    local conv = nn.Linear(2, 3, false)
    flow.no_grad(function() conv.weight:copy_(flow.tensor({{1, 1}, {0.1, 0.1}, {3, 3}})) end)
    prune.ln_structured(conv, 'weight', 1, 2, 1)       -- drop the row with the smallest L2 norm
    H.close(conv.weight_mask, {{1, 1}, {0, 0}, {1, 1}})
    local a, b = nn.Linear(2, 1, false), nn.Linear(2, 1, false)
    flow.no_grad(function()
      a.weight:copy_(flow.tensor({{1, 5}}))
      b.weight:copy_(flow.tensor({{2, 0.5}}))
    end)
    prune.global_unstructured({{a, 'weight'}, {b, 'weight'}}, {pruning_method = 'l1', amount = 2})
    H.close(a.weight_mask, {{0, 1}})
    H.close(b.weight_mask, {{1, 0}})
    H.raises(function() prune.l1_unstructured(nn.Linear(2, 2), 'weight', 9) end,
             'amount=9 should be smaller than the number of parameters to prune=4')
  end)
end)
