-- PyTorch's positional arguments beside the options table: every form of a
-- call gives the same values as the options-table form; options tables are
-- recognised by what they are not (a table a JSON decoder gave a metatable
-- still works); unknown keys, duplicated and extra arguments are errors that
-- name the op and the argument.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local A = require 'oneflow._args'

local nn, F, optim = flow.nn, flow.nn.functional, flow.optim
local f64 = {dtype = flow.float64}

local function r64(...) return flow.randn({...}, f64) end
local function same(a, b, msg) H.close(a, b:totable(), 1e-12, msg) end

-- What JSON decoders hand back: a table with a metatable of the decoder's
-- (dkjson marks objects {__jsontype = 'object'}; others give __index).
local function json_like(t) return setmetatable(t, {__jsontype = 'object', __index = function() end}) end

describe('options tables by exclusion', function()
  it('values are never options; plain and decoder tables are', function()
    local values = {
      flow.ones(2), flow.float32, flow.device('cpu'), flow.Size({2, 3}), nn.Linear(2, 2),
      optim.SGD({nn.Parameter(flow.ones(1))}, 0.1), flow.distributed.placement('cpu', {0}),
      flow.sbp.broadcast, require('oneflow.utils.json').null, A.REQUIRED, {1, 2}, 'x', 3, true,
      flow.contiguous_format,
    }
    for i, v in ipairs(values) do assert.is_false(A.is_options(v), 'value ' .. i) end
    assert.is_true(A.is_options({}))
    assert.is_true(A.is_options({lr = 0.1}))
    assert.is_true(A.is_options(json_like({lr = 0.1})))
    assert.is_true(A.is_options(require('oneflow.utils.json').decode('{"lr": 0.1}')))
  end)

  it('check_options names the op and the unknown key', function()
    H.raises(function() A.check_options('op', {a = 1, bogus = 2}, {'a'}) end, "op: unknown option 'bogus'")
    H.raises(function() A.check_options('op', 3, {'a'}) end, 'op: expected an options table, got number')
    assert.equals(1, A.check_options('op', json_like({a = 1}), {a = true}).a)
  end)
end)

describe('F: positional arguments equal the options form', function()
  it('conv1d/2d/3d and conv_transpose1d/2d/3d', function()
    for nsp = 1, 3 do
      local sp = {}
      for i = 1, nsp do sp[i] = 5 end
      local x = r64(1, 2, unpack(sp))
      local k = {}
      for i = 1, nsp do k[i] = 3 end
      local w, b = r64(4, 2, unpack(k)), r64(4)
      local conv = F['conv' .. nsp .. 'd']
      local ref = conv(x, w, {bias = b, stride = 2, padding = 1, dilation = 1, groups = 1})
      same(conv(x, w, b, 2, 1, 1, 1), ref, 'conv positional ' .. nsp)
      same(conv(x, w, b, 2, {padding = 1}), ref, 'conv mixed ' .. nsp)
      same(conv(x, w, b, json_like({stride = 2, padding = 1})), ref, 'conv json ' .. nsp)
      same(conv(x, w, nil, 2, 1), conv(x, w, {stride = 2, padding = 1}), 'conv nil bias ' .. nsp)
      local wt = r64(2, 3, unpack(k))
      local convt = F['conv_transpose' .. nsp .. 'd']
      local reft = convt(x, wt, {bias = r64(3):zero_(), stride = 2, padding = 1, output_padding = 1})
      same(convt(x, wt, r64(3):zero_(), 2, 1, 1, 1, 1), reft, 'conv_transpose ' .. nsp)
    end
  end)

  it('max/avg pools and adaptive max pool', function()
    for nsp = 1, 3 do
      local sp = {}
      for i = 1, nsp do sp[i] = 6 end
      local x = r64(1, 2, unpack(sp))
      local maxp, avgp = F['max_pool' .. nsp .. 'd'], F['avg_pool' .. nsp .. 'd']
      same(maxp(x, 3, 2, 1), maxp(x, 3, {stride = 2, padding = 1}), 'max_pool ' .. nsp)
      local v1, i1 = maxp(x, 2, 2, 0, 1, false, true)
      local v2, i2 = maxp(x, 2, {return_indices = true})
      same(v1, v2, 'max_pool values ' .. nsp)
      same(i1, i2, 'max_pool indices ' .. nsp)
      same(avgp(x, 3, 2, 1, true, false), avgp(x, 3, {stride = 2, padding = 1, ceil_mode = true,
                                                       count_include_pad = false}), 'avg_pool ' .. nsp)
      local _, ai = F['adaptive_max_pool' .. nsp .. 'd'](x, 2, true)
      local _, bi = F['adaptive_max_pool' .. nsp .. 'd'](x, 2, {return_indices = true})
      same(ai, bi, 'adaptive_max_pool ' .. nsp)
    end
  end)

  it('linear', function()
    local x, w, b = r64(3, 4), r64(2, 4), r64(2)
    local ref = x:matmul(w:t()) + b
    same(F.linear(x, w, b), ref)
    same(F.linear(x, w, {bias = b}), ref)
    same(F.linear(x, w), x:matmul(w:t()))
  end)

  it('layer_norm, group_norm, batch_norm, instance_norm', function()
    local x = r64(2, 4, 3, 3)
    local w, b = r64(9), r64(9)
    local ref = F.layer_norm(x, {3, 3}, {weight = w:view(3, 3), bias = b:view(3, 3), eps = 1e-3})
    same(F.layer_norm(x, {3, 3}, w:view(3, 3), b:view(3, 3), 1e-3), ref, 'layer_norm')
    same(F.layer_norm(x, flow.Size({3, 3}), w:view(3, 3), {bias = b:view(3, 3), eps = 1e-3}), ref, 'layer_norm Size')
    same(F.layer_norm(x, {3, 3}, json_like({weight = w:view(3, 3), bias = b:view(3, 3), eps = 1e-3})), ref,
         'layer_norm json')

    local gw, gb = r64(4), r64(4)
    same(F.group_norm(x, 2, gw, gb, 1e-4), F.group_norm(x, 2, {weight = gw, bias = gb, eps = 1e-4}), 'group_norm')

    local rm1, rv1 = flow.zeros(4, f64), flow.ones(4, f64)
    local rm2, rv2 = rm1:clone(), rv1:clone()
    local y1 = F.batch_norm(x, rm1, rv1, gw, gb, true, 0.3, 1e-4)
    local y2 = F.batch_norm(x, rm2, rv2, {weight = gw, bias = gb, training = true, momentum = 0.3, eps = 1e-4})
    same(y1, y2, 'batch_norm training')
    same(rm1, rm2, 'batch_norm running_mean')
    same(rv1, rv2, 'batch_norm running_var')
    same(F.batch_norm(x, rm1, rv1, gw, gb), F.batch_norm(x, rm1, rv1, {weight = gw, bias = gb}), 'batch_norm eval')

    local im1, iv1 = flow.zeros(4, f64), flow.ones(4, f64)
    local im2, iv2 = im1:clone(), iv1:clone()
    same(F.instance_norm(x, im1, iv1, gw, gb, true, 0.2, 1e-4),
         F.instance_norm(x, {running_mean = im2, running_var = iv2, weight = gw, bias = gb,
                             use_input_stats = true, momentum = 0.2, eps = 1e-4}), 'instance_norm')
    same(im1, im2, 'instance_norm running_mean')
  end)

  it('dropout', function()
    local x = r64(4, 5)
    same(F.dropout(x, 0.5, false), x, 'dropout eval')
    flow.manual_seed(7)
    local a = F.dropout(x, 0.3, true)
    flow.manual_seed(7)
    same(a, F.dropout(x, {p = 0.3, training = true}), 'dropout training')
  end)

  it('interpolate and pad', function()
    local x = r64(1, 2, 3, 4)
    local ref = F.interpolate(x, {scale_factor = 2, mode = 'bilinear', align_corners = true})
    same(F.interpolate(x, nil, 2, 'bilinear', true), ref, 'interpolate scale')
    same(F.interpolate(x, {6, 8}, nil, 'nearest'), F.interpolate(x, {size = {6, 8}}), 'interpolate size')
    same(F.interpolate(x, nil, 2, {mode = 'bilinear', align_corners = true}), ref, 'interpolate mixed')
    same(F.pad(x, {1, 1, 2, 0}, 'constant', 3), F.pad(x, {1, 1, 2, 0}, {value = 3}), 'pad value')
    same(F.pad(x, {1, 1}, 'reflect'), F.pad(x, {1, 1}, {mode = 'reflect'}), 'pad reflect')
  end)

  it('embedding', function()
    local w = r64(5, 3)
    local ids = flow.tensor({{1, 2, 5}, {2, 2, 4}}, {dtype = flow.int64})
    same(F.embedding(ids, w, 2), F.embedding(ids, w, {padding_idx = 2}), 'embedding')
  end)

  it('cross_entropy, nll_loss and the composed losses, with legacy size_average / reduce', function()
    local x = r64(4, 3)
    local t = flow.tensor({1, 3, 2, 2}, {dtype = flow.int64})
    local w = flow.tensor({0.2, 1, 3}, f64)
    local ref = F.cross_entropy(x, t, {weight = w, ignore_index = 2, reduction = 'sum', label_smoothing = 0.1})
    same(F.cross_entropy(x, t, w, nil, 2, nil, 'sum', 0.1), ref, 'cross_entropy')
    same(F.cross_entropy(x, t, w, nil, 2, nil, {reduction = 'sum', label_smoothing = 0.1}), ref, 'ce mixed')
    same(F.cross_entropy(x, t, nil, nil, -100, false), F.cross_entropy(x, t, {reduction = 'none'}), 'reduce=false')
    same(F.cross_entropy(x, t, nil, false), F.cross_entropy(x, t, {reduction = 'sum'}), 'size_average=false')
    local lp = F.log_softmax(x, 2)
    same(F.nll_loss(lp, t, w, nil, 3, nil, 'mean'), F.nll_loss(lp, t, {weight = w, ignore_index = 3}), 'nll_loss')

    local y = r64(4, 3)
    same(F.mse_loss(x, y, nil, nil, 'sum'), F.mse_loss(x, y, {reduction = 'sum'}), 'mse_loss')
    same(F.mse_loss(x, y, false), F.mse_loss(x, y, {reduction = 'sum'}), 'mse_loss size_average')
    same(F.l1_loss(x, y, nil, false), F.l1_loss(x, y, {reduction = 'none'}), 'l1_loss reduce')
    same(F.smooth_l1_loss(x, y, nil, nil, 'mean', 0.5), F.smooth_l1_loss(x, y, {beta = 0.5}), 'smooth_l1')
    same(F.huber_loss(x, y, 'sum', 0.5), F.huber_loss(x, y, {reduction = 'sum', delta = 0.5}), 'huber')
    local p, q = flow.rand({4, 3}, f64), flow.rand({4, 3}, f64)
    same(F.binary_cross_entropy(p, q, w), F.binary_cross_entropy(p, q, {weight = w}), 'bce')
    same(F.binary_cross_entropy_with_logits(x, q, nil, nil, nil, 'sum', w),
         F.binary_cross_entropy_with_logits(x, q, {reduction = 'sum', pos_weight = w}), 'bce logits')
    same(F.kl_div(lp, F.softmax(y, 2), nil, nil, 'batchmean'),
         F.kl_div(lp, F.softmax(y, 2), {reduction = 'batchmean'}), 'kl_div')
    local s = flow.tensor({1, -1, 1, -1}, f64)
    same(F.margin_ranking_loss(x:select(2, 1), y:select(2, 1), s, 0.5),
         F.margin_ranking_loss(x:select(2, 1), y:select(2, 1), s, {margin = 0.5}), 'margin_ranking')
    same(F.multi_margin_loss(x, t, 2, 0.5), F.multi_margin_loss(x, t, {p = 2, margin = 0.5}), 'multi_margin')
  end)
end)

describe('F: errors name the op and the argument', function()
  local x = flow.ones(2, 4)
  it('unknown, duplicated and extra arguments', function()
    H.raises(function() F.conv2d(flow.ones(1, 1, 4, 4), flow.ones(1, 1, 3, 3), {strid = 1}) end,
             "conv2d: unknown option 'strid'")
    H.raises(function() F.max_pool2d(flow.ones(1, 1, 4, 4), 2, json_like({paddin = 1})) end,
             "max_pool2d: unknown option 'paddin'")
    H.raises(function() F.layer_norm(x, {4}, json_like({epsilon = 1})) end, "layer_norm: unknown option 'epsilon'")
    H.raises(function() F.cross_entropy(x, flow.tensor({1, 2}), {weigth = 1}) end,
             "cross_entropy: unknown option 'weigth'")
    H.raises(function() F.layer_norm(x, {4}, flow.ones(4), {weight = flow.ones(4)}) end,
             'layer_norm', 'weight given twice')
    H.raises(function() F.group_norm(flow.ones(2, 4, 2), 2, nil, nil, 1e-5, 'extra') end,
             'group_norm: expected at most 4 positional arguments, got 5')
    H.raises(function() F.layer_norm(x) end, 'layer_norm: missing required argument normalized_shape')
  end)
  it('wrong types', function()
    H.raises(function() F.linear(x, 'w') end, 'linear: argument 2 (weight) must be a tensor, got string')
    H.raises(function() F.linear('x', flow.ones(2, 4)) end, 'linear: argument 1 (input) must be a tensor, got string')
    H.raises(function() F.layer_norm(x, {4}, 'w') end, 'layer_norm: weight must be a tensor or nil, got string')
    H.raises(function() F.batch_norm(flow.ones(2, 4), 'rm', nil) end, 'batch_norm', 'running_mean')
    H.raises(function() F.conv1d(flow.ones(1, 1, 4), 7) end, 'conv1d: argument 2 (weight) must be a tensor, got number')
    H.raises(function() F.pad(x, 1) end, 'pad:')
  end)
end)

describe('optim: lr and the next arguments positionally, JSON-like options', function()
  -- name, positional arguments after params, the same as options
  local cases = {
    {'SGD', {0.1, 0.9, 0, 0.01, true}, {lr = 0.1, momentum = 0.9, dampening = 0, weight_decay = 0.01, nesterov = true}},
    {'Adam', {0.01, {0.8, 0.9}, 1e-6, 0.01, true}, {lr = 0.01, betas = {0.8, 0.9}, eps = 1e-6, weight_decay = 0.01,
                                                    amsgrad = true}},
    {'AdamW', {0.01, {0.8, 0.9}, 1e-6, 0.1}, {lr = 0.01, betas = {0.8, 0.9}, eps = 1e-6, weight_decay = 0.1}},
    {'Adagrad', {0.1, 0.01, 0.001, 0.1, 1e-9}, {lr = 0.1, lr_decay = 0.01, weight_decay = 0.001,
                                                initial_accumulator_value = 0.1, eps = 1e-9}},
    {'Adadelta', {0.5, 0.8, 1e-5, 0.01}, {lr = 0.5, rho = 0.8, eps = 1e-5, weight_decay = 0.01}},
    {'Adamax', {0.01, {0.8, 0.9}, 1e-6, 0.01}, {lr = 0.01, betas = {0.8, 0.9}, eps = 1e-6, weight_decay = 0.01}},
    {'ASGD', {0.01, 1e-3, 0.5, 10, 0.01}, {lr = 0.01, lambd = 1e-3, alpha = 0.5, t0 = 10, weight_decay = 0.01}},
    {'NAdam', {0.01, {0.8, 0.9}, 1e-6, 0.01, 1e-3}, {lr = 0.01, betas = {0.8, 0.9}, eps = 1e-6,
                                                     weight_decay = 0.01, momentum_decay = 1e-3}},
    {'RAdam', {0.01, {0.8, 0.9}, 1e-6, 0.01}, {lr = 0.01, betas = {0.8, 0.9}, eps = 1e-6, weight_decay = 0.01}},
    {'RMSprop', {0.01, 0.9, 1e-6, 0.01, 0.5, true}, {lr = 0.01, alpha = 0.9, eps = 1e-6, weight_decay = 0.01,
                                                     momentum = 0.5, centered = true}},
    {'Rprop', {0.01, {0.4, 1.1}, {1e-5, 10}}, {lr = 0.01, etas = {0.4, 1.1}, step_sizes = {1e-5, 10}}},
    {'LAMB', {0.01, {0.8, 0.9}, 1e-6, 0.01}, {lr = 0.01, betas = {0.8, 0.9}, eps = 1e-6, weight_decay = 0.01}},
  }

  local function run(name, ...)
    local p = nn.Parameter(flow.tensor({0.5, -1.5, 2.0}, f64))
    local opt = optim[name]({p}, ...)
    for _ = 1, 3 do
      opt:zero_grad()
      local loss = (p * p * p):sum() + (p * 2):sum()
      loss:backward()
      opt:step()
    end
    return p, opt.param_groups[1]
  end

  for _, c in ipairs(cases) do
    it(c[1] .. ' takes PyTorch positional arguments', function()
      local p1, g1 = run(c[1], unpack(c[2]))
      local p2, g2 = run(c[1], c[3])
      local p3, g3 = run(c[1], json_like(c[3]))
      same(p1, p2, c[1] .. ' positional')
      same(p3, p2, c[1] .. ' json-like options')
      for k, v in pairs(c[3]) do
        assert.are.same(v, g1[k], c[1] .. ' ' .. k)
        assert.are.same(v, g2[k], c[1] .. ' options ' .. k)
        assert.are.same(v, g3[k], c[1] .. ' json ' .. k)
      end
      local p4 = run(c[1], c[2][1], {})
      same(p4, run(c[1], {lr = c[2][1]}), c[1] .. ' lr only')
    end)
  end

  it('a decoded JSON options table works; unknown keys still raise', function()
    local ps = {nn.Parameter(flow.ones(2))}
    local o = optim.SGD(ps, json_like({lr = 0.1, momentum = 0.9}))
    assert.equals(0.1, o.param_groups[1].lr)
    assert.equals(0.9, o.param_groups[1].momentum)
    o = optim.SGD(ps, require('oneflow.utils.json').decode('{"lr": 0.25}'))
    assert.equals(0.25, o.param_groups[1].lr)
    H.raises(function() optim.SGD(ps, json_like({lr = 0.1, momentun = 0.9})) end, "SGD: unknown option 'momentun'")
    H.raises(function() optim.Adam(ps, 0.1, {lr = 0.2}) end, 'Adam', 'lr given twice')
    H.raises(function() optim.SGD(ps, 0.1, 0.9, 0, 0, false, true) end, 'SGD: expected at most 5 positional')
    H.raises(function() optim.SGD(ps, 'fast') end, 'SGD', 'learning rate must be a number, got string')
  end)
end)
