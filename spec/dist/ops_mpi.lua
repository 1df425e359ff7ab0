-- nn.functional on global tensors under mpirun (-np 2 and 4): each op rule
-- forward and backward against the same call on the full tensors (every
-- rank can compute it: the data come from a fixed seed), SyncBatchNorm
-- statistics, the global mean of losses, vocab-parallel embedding, dropout
-- masks, data-parallel training of a conv net with BatchNorm, placement
-- changes under autograd, and the errors.
local flow = require 'oneflow'
local H = require 'spec.helpers'
local F = flow.nn.functional

local r, n = flow.env.get_rank(), flow.env.get_world_size()
local all = {}
for i = 0, n - 1 do all[i + 1] = i end
local P = flow.placement('cpu', all)
local S, Bc, Ps = flow.sbp.split, flow.sbp.broadcast, flow.sbp.partial_sum
local P2 = flow.placement('cpu', n == 4 and {{0, 1}, {2, 3}} or {{0, 1}})

local D = require 'spec.dist.helpers'
local shard = D.shard

local function coord_of(Pl) return D.coord_of(Pl, r) end

local function has_partial(g)
  for _, v in ipairs(g.sbp) do if v.kind == 'P' then return true end end
  return false
end

-- the global g must equal the local `full` (a collective over g's placement)
local function check(g, full, msg, tol)
  assert(flow.is_global(g), msg .. ': expected a global tensor')
  assert.same(full:size():totable(), g.shape:totable(), msg .. ' (shape)')
  local c = coord_of(g.placement)
  if c and not has_partial(g) then
    H.close(g:to_local(), shard(full, g.placement.hierarchy, g.sbp, c), tol or 1e-5, msg .. ' (shard)')
  end
  local f = g:full_local()
  if c then H.close(f, full, tol or 1e-5, msg) end
end

local function glob(t, sbp, Pl)
  return flow.tensor(t:totable(), {placement = Pl or P, sbp = sbp, dtype = t.dtype})
end

-- fn(list of tensors) on local and on global inputs {tensor, sbp[, no_grad]};
-- outputs and the gradients of sum(out * w) compared.
local function check_op(name, fn, inputs, Pl)
  -- SPEC_TRACE=1: progress on stderr (a hung job loses busted's report)
  if os.getenv('SPEC_TRACE') then io.stderr:write(r, ' ', name, '\n') end
  Pl = Pl or P
  local locals, globals = {}, {}
  for i, inp in ipairs(inputs) do
    local grad = inp[3] ~= false and inp[1]:is_floating_point()
    locals[i] = inp[1]:clone()
    globals[i] = glob(inp[1], inp[2], Pl)
    if grad then
      locals[i]:requires_grad_(true)
      globals[i]:requires_grad_(true)
    end
  end
  local want = fn(locals)
  local got = fn(globals)
  check(got, want, name .. ' forward')
  local w = flow.randn(want:size():totable(), {dtype = want.dtype})
  local bsbp = #Pl.hierarchy == 1 and Bc or {Bc, Bc}
  ;(want * w):sum():backward()
  ;(got * glob(w, bsbp, Pl)):sum():backward()
  for i, inp in ipairs(inputs) do
    if inp[3] ~= false and inp[1]:is_floating_point() then
      local g = globals[i].grad
      assert.equal(tostring(globals[i].sbp), tostring(g.sbp), name .. ' grad sbp')
      check(g, locals[i].grad, name .. ' grad ' .. i)
    end
  end
  return got
end

describe('nn.functional op rules on global tensors', function()
  flow.manual_seed(3)

  it('conv2d: batch, output-channel and input-channel splits, uneven and empty shards', function()
    local x, w, b = flow.randn(n + 1, 3, 6, 6), flow.randn(4, 3, 3, 3), flow.randn(4)
    local conv = function(t) return F.conv2d(t[1], t[2], t[3], 1, 1) end
    check_op('conv batch', conv, {{x, S(1)}, {w, Bc}, {b, Bc}})
    check_op('conv out-channels', conv, {{x, Bc}, {w, S(1)}, {b, S(1)}})
    check_op('conv in-channels', conv, {{x, S(2)}, {w, S(2)}, {b, Bc}})
    check_op('conv batch of 1 (empty shards)', conv, {{x:narrow(1, 1, 1), S(1)}, {w, Bc}, {b, Bc}})
    check_op('conv stride 2, opts, groups', function(t)
      return F.conv2d(t[1], t[2], {bias = t[3], stride = 2, groups = 3})
    end, {{x, S(1)}, {flow.randn(6, 1, 3, 3), Bc}, {flow.randn(6), Bc}})
    check_op('conv hybrid 2-D', conv, {{x, {S(1), Bc}}, {w, {Bc, S(1)}}, {b, {Bc, S(1)}}}, P2)
    check_op('conv1d', function(t) return F.conv1d(t[1], t[2]) end,
             {{flow.randn(n + 1, 2, 7), S(1)}, {flow.randn(3, 2, 2), Bc}})
    check_op('conv_transpose2d', function(t) return F.conv_transpose2d(t[1], t[2], nil, 2) end,
             {{x, S(1)}, {flow.randn(3, 2, 2, 2), Bc}})
  end)

  it('pools on batch and channel splits', function()
    local x = flow.randn(n + 1, n + 1, 6, 6)
    for _, s in ipairs({S(1), S(2)}) do
      local tag = ' ' .. tostring(s)
      check_op('max_pool2d' .. tag, function(t) return F.max_pool2d(t[1], 2) end, {{x, s}})
      check_op('max_pool2d padded' .. tag, function(t) return F.max_pool2d(t[1], 3, 2, 1) end, {{x, s}})
      check_op('avg_pool2d' .. tag, function(t) return F.avg_pool2d(t[1], 2) end, {{x, s}})
      check_op('adaptive_avg_pool2d' .. tag, function(t) return F.adaptive_avg_pool2d(t[1], 1) end, {{x, s}})
      check_op('adaptive_max_pool2d' .. tag, function(t) return F.adaptive_max_pool2d(t[1], {2, 3}) end,
               {{x, s}})
    end
    local g = glob(x, S(1))
    local v, i = F.max_pool2d(g, 2, {return_indices = true})
    local lv, li = F.max_pool2d(x, 2, {return_indices = true})
    check(v, lv, 'max_pool values')
    check(i, li, 'max_pool indices')
  end)

  it('batch_norm synchronises statistics over the split batch (SyncBatchNorm)', function()
    for _, case in ipairs({{n + 1, S(1)}, {1, S(1)}, {2 * n + 1, S(3)}, {3, S(2)}}) do
      local N, s = case[1], case[2]
      local tag = (' N=%d %s'):format(N, tostring(s))
      local x = flow.randn(N, 3, 4, 4) * 2 + 1
      local wt, bs = flow.randn(3), flow.randn(3)
      local rm, rv = flow.randn(3), flow.rand(3) + 0.5
      local stat = s == S(2) and S(1) or Bc
      local lrm, lrv = rm:clone(), rv:clone()
      local grm, grv = glob(rm, stat), glob(rv, stat)
      check_op('batch_norm' .. tag, function(t)
        local mean, var = lrm, lrv
        if flow.is_global(t[1]) then mean, var = grm, grv end
        return F.batch_norm(t[1], mean, var, {weight = t[2], bias = t[3], training = true,
                                              momentum = 0.3})
      end, {{x, s}, {wt, stat}, {bs, stat}})
      check(grm, lrm, 'running_mean' .. tag)
      check(grv, lrv, 'running_var' .. tag)
      -- eval: the running statistics, no communication needed
      check_op('batch_norm eval' .. tag, function(t)
        local mean, var = lrm, lrv
        if flow.is_global(t[1]) then mean, var = grm, grv end
        return F.batch_norm(t[1], mean, var, {weight = t[2], training = false})
      end, {{x, s}, {wt, stat}})
    end
    check_op('batch_norm 1-d, no affine, no running stats', function(t)
      return F.batch_norm(t[1], nil, nil, {training = true})
    end, {{flow.randn(2 * n + 1, 5), S(1)}})
    check_op('batch_norm hybrid 2-D', function(t)
      return F.batch_norm(t[1], nil, nil, {weight = t[2], bias = t[3], training = true})
    end, {{flow.randn(n + 2, 4, 3, 3), {S(1), S(2)}}, {flow.randn(4), {Bc, S(1)}},
          {flow.randn(4), {Bc, S(1)}}}, P2)
  end)

  it('layer_norm, group_norm, interpolate and pad on splits', function()
    local x = flow.randn(2 * n + 1, 3, 5)
    check_op('layer_norm', function(t)
      return F.layer_norm(t[1], {5}, {weight = t[2], bias = t[3]})
    end, {{x, S(1)}, {flow.randn(5), Bc}, {flow.randn(5), Bc}})
    check_op('layer_norm dim 2', function(t) return F.layer_norm(t[1], 5) end, {{x, S(2)}})
    check_op('layer_norm two dims', function(t) return F.layer_norm(t[1], {3, 5}) end, {{x, S(1)}})
    check_op('group_norm', function(t)
      return F.group_norm(t[1], 2, {weight = t[2], bias = t[3]})
    end, {{flow.randn(n + 1, 4, 3, 3), S(1)}, {flow.randn(4), Bc}, {flow.randn(4), Bc}})
    check_op('interpolate', function(t) return F.interpolate(t[1], {scale_factor = 2, mode = 'bilinear'}) end,
             {{flow.randn(n + 1, 2, 3, 3), S(1)}})
    check_op('pad', function(t) return F.pad(t[1], {1, 2}) end, {{x, S(2)}})
  end)

  it('linear follows matmul: rows, output features, input features, bias', function()
    local x, w, b = flow.randn(2 * n + 1, 5), flow.randn(n + 2, 5), flow.randn(n + 2)
    local lin = function(t) return F.linear(t[1], t[2], t[3]) end
    check_op('linear data parallel', lin, {{x, S(1)}, {w, Bc}, {b, Bc}})
    check_op('linear column parallel', lin, {{x, Bc}, {w, S(1)}, {b, S(1)}})
    check_op('linear row parallel', lin, {{x, S(2)}, {w, S(2)}, {b, Bc}})
    check_op('linear no bias, 3-d input split on dim 2', function(t) return F.linear(t[1], t[2]) end,
             {{flow.randn(2, 2 * n + 1, 5), S(2)}, {w, Bc}})
    check_op('linear hybrid 2-D', lin, {{x, {S(1), Bc}}, {w, {Bc, S(1)}}, {b, {Bc, S(1)}}}, P2)
    local mod = flow.nn.Linear(5, 3)
    check_op('nn.Linear weights as globals', function(t)
      return F.linear(t[1], t[2], t[3])
    end, {{x, S(1)}, {mod.weight:detach(), Bc}, {mod.bias:detach(), Bc}})
  end)

  it('embedding: split ids, vocab-parallel rows (masked lookup), split columns', function()
    local vocab = 2 * n + 1
    local ids = flow.randint(1, vocab + 1, {n + 1, 3})
    local w = flow.randn(vocab, 4)
    local emb = function(t) return F.embedding(t[1], t[2]) end
    check_op('embedding ids split', emb, {{ids, S(1)}, {w, Bc}})
    local g = check_op('embedding vocab parallel', emb, {{ids, Bc}, {w, S(1)}})
    assert.equal(Ps, g.sbp[1])
    check_op('embedding column split', emb, {{ids, Bc}, {w, S(2)}})
    check_op('embedding vocab parallel, padding_idx', function(t)
      return F.embedding(t[1], t[2], {padding_idx = 2})
    end, {{ids, Bc}, {w, S(1)}})
    check_op('embedding vocab smaller than ranks', emb,
             {{flow.tensor({{1, 1}, {1, 1}}, {dtype = 'int64'}), Bc}, {flow.randn(1, 3), S(1)}})
    check_op('embedding hybrid 2-D', emb, {{ids, {S(1), Bc}}, {w, {Bc, S(1)}}}, P2)
  end)

  it('cross_entropy and nll_loss: mean over the global batch', function()
    local N, C = 2 * n + 1, 5
    local x = flow.randn(N, C)
    local t = flow.randint(1, C + 1, {N})
    t[1] = 3
    local weight = flow.rand(C) + 0.5
    for _, red in ipairs({'mean', 'sum', 'none'}) do
      check_op('cross_entropy ' .. red, function(a)
        return F.cross_entropy(a[1], a[2], {reduction = red})
      end, {{x, S(1)}, {t, S(1)}})
    end
    check_op('cross_entropy weight, ignore_index, label_smoothing', function(a)
      return F.cross_entropy(a[1], a[2], {weight = a[3], ignore_index = 3, label_smoothing = 0.1})
    end, {{x, S(1)}, {t, S(1)}, {weight, Bc, false}})
    check_op('nll_loss of log_softmax', function(a)
      return F.nll_loss(F.log_softmax(a[1], 2), a[2], {weight = a[3]})
    end, {{x, S(1)}, {t, S(1)}, {weight, Bc, false}})
    check_op('cross_entropy probabilities', function(a)
      return F.cross_entropy(a[1], a[2])
    end, {{x, S(1)}, {flow.softmax(flow.randn(N, C), 2), S(1), false}})
    check_op('cross_entropy spatial, split on dim 3', function(a)
      return F.cross_entropy(a[1], a[2])
    end, {{flow.randn(2, C, N), S(3)}, {flow.randint(1, C + 1, {2, N}), S(2)}})
    check_op('cross_entropy batch of 1', function(a)
      return F.cross_entropy(a[1], a[2])
    end, {{x:narrow(1, 1, 1), S(1)}, {t:narrow(1, 1, 1), S(1)}})
    check_op('cross_entropy hybrid 2-D', function(a)
      return F.cross_entropy(a[1], a[2])
    end, {{x, {S(1), Bc}}, {t, {S(1), Bc}}}, P2)
  end)

  it('dropout draws the mask one process would draw, any sbp', function()
    local x = flow.randn(2 * n + 1, n + 2, 3)
    for _, case in ipairs({{'dropout', S(1)}, {'dropout', S(2)}, {'dropout', Bc}, {'dropout2d', S(1)},
                           {'dropout2d', S(2)}, {'dropout1d', S(1)}}) do
      local name, s = case[1], case[2]
      local tag = name .. ' ' .. tostring(s)
      local input = name == 'dropout2d' and x:unsqueeze(4) or x
      check_op(tag, function(t)
        flow.manual_seed(100)
        return F[name](t[1], 0.4, true)
      end, {{input, s}})
    end
    local g = glob(x, S(1))
    check(F.dropout(g, 0.4, false), x, 'dropout in eval')
    check(F.dropout(g, 1, true), x * 0, 'dropout p = 1')
  end)

  it('activations and views from nn.functional keep splits', function()
    local x = flow.randn(2 * n + 1, 4, 3)
    for _, name in ipairs({'relu', 'gelu', 'silu', 'sigmoid', 'tanh', 'elu', 'leaky_relu', 'softplus',
                           'hardtanh', 'relu6', 'logsigmoid', 'softsign', 'selu', 'hardswish'}) do
      check_op(name, function(t) return F[name](t[1]) end, {{x, S(1)}})
    end
    check_op('softmax over a split dim', function(t) return F.softmax(t[1], 1) end, {{x, S(1)}})
    check_op('flatten', function(t) return t[1]:flatten(2) end, {{x, S(1)}})
    check_op('flatten of the split dim', function(t) return t[1]:flatten(1, 2) end, {{x, S(1)}})
    check_op('transpose', function(t) return t[1]:transpose(1, 3) end, {{x, S(1)}})
    check_op('permute', function(t) return t[1]:permute(3, 1, 2) end, {{x, S(2)}})
    check_op('unsqueeze, squeeze', function(t) return t[1]:unsqueeze(2):squeeze(2) * 2 end, {{x, S(3)}})
    check_op('t', function(t) return t[1]:t() end, {{x:select(3, 1), S(1)}})
    local g = (glob(x, S(1)):flatten(2))
    assert.equal(S(1), g.sbp[1])
  end)
end)

-- LeNet-like: conv-BN-relu-pool twice, then two linear layers.
local function lenet_params(dtype)
  flow.manual_seed(21)
  local p = {
    c1 = flow.randn(4, 1, 3, 3, {dtype = dtype}) * 0.4, b1 = flow.zeros(4, {dtype = dtype}),
    g1 = flow.ones(4, {dtype = dtype}), h1 = flow.zeros(4, {dtype = dtype}),
    c2 = flow.randn(6, 4, 3, 3, {dtype = dtype}) * 0.2, b2 = flow.zeros(6, {dtype = dtype}),
    g2 = flow.ones(6, {dtype = dtype}), h2 = flow.zeros(6, {dtype = dtype}),
    f1 = flow.randn(16, 36, {dtype = dtype}) * 0.2, e1 = flow.zeros(16, {dtype = dtype}),
    f2 = flow.randn(10, 16, {dtype = dtype}) * 0.2, e2 = flow.zeros(10, {dtype = dtype}),
  }
  local stats = {m1 = flow.zeros(4, {dtype = dtype}), v1 = flow.ones(4, {dtype = dtype}),
                 m2 = flow.zeros(6, {dtype = dtype}), v2 = flow.ones(6, {dtype = dtype})}
  return p, stats
end

local function lenet(p, st, x)
  local h = F.conv2d(x, p.c1, p.b1, 1, 1)
  h = F.batch_norm(h, st.m1, st.v1, {weight = p.g1, bias = p.h1, training = true})
  h = F.max_pool2d(F.relu(h), 2)
  h = F.conv2d(h, p.c2, p.b2, 1, 1)
  h = F.batch_norm(h, st.m2, st.v2, {weight = p.g2, bias = p.h2, training = true})
  h = F.max_pool2d(F.relu(h), 2)
  h = F.relu(F.linear(h:flatten(2), p.f1, p.e1))
  return F.linear(h, p.f2, p.e2)
end

local param_names = {'c1', 'b1', 'g1', 'h1', 'c2', 'b2', 'g2', 'h2', 'f1', 'e1', 'f2', 'e2'}

describe('data-parallel training through global tensors', function()
  it('a LeNet-like net with BatchNorm: 3 SGD steps equal one process on the global batch', function()
    local N = 3 * n + 1
    flow.manual_seed(5)
    local X, Y = flow.randn(N, 1, 8, 12), flow.randint(1, 11, {N})
    local lp, ls = lenet_params()
    local gp, gs = {}, {}
    for k, v in pairs(lp) do
      lp[k] = v:requires_grad_(true)
      gp[k] = glob(v:detach(), Bc):requires_grad_(true)
    end
    for k, v in pairs(ls) do gs[k] = glob(v, Bc) end
    local GX, GY = glob(X, S(1)), glob(Y, S(1))
    for step = 1, 3 do
      local l1 = F.cross_entropy(lenet(lp, ls, X), Y)
      l1:backward()
      local l2 = F.cross_entropy(lenet(gp, gs, GX), GY)
      assert.equal(Ps, l2.sbp[1])
      l2:backward()
      check(l2, l1:detach(), 'loss at step ' .. step)
      flow.no_grad(function()
        for _, k in ipairs(param_names) do
          local g = gp[k].grad
          assert.equal(Bc, g.sbp[1])
          check(g, lp[k].grad, ('grad of %s at step %d'):format(k, step))
          lp[k]:sub_(lp[k].grad * 0.1)
          gp[k]:to_local():sub_(g:to_local() * 0.1)
          lp[k].grad, gp[k].grad = nil, nil
        end
      end)
    end
    for _, k in ipairs(param_names) do check(gp[k], lp[k]:detach(), k .. ' after 3 steps') end
    for k, v in pairs(ls) do check(gs[k], v, 'running stat ' .. k .. ' after 3 steps') end
  end)
end)

describe('placement changes under autograd', function()
  it('backward reaches ranks outside the loss placement', function()
    local half = math.max(1, math.floor(n / 2))
    local A, Bp = {}, {}
    for i = 0, n - 1 do
      if i < half then A[#A + 1] = i else Bp[#Bp + 1] = i end
    end
    local PA, PB = flow.placement('cpu', A), flow.placement('cpu', Bp)
    flow.manual_seed(9)
    local x0, w0 = flow.randn(2 * n + 1, 3), flow.randn(3, 2)
    local x = glob(x0, S(1), PA):requires_grad_(true)
    local w = glob(w0, Bc, PB):requires_grad_(true)
    local y = x:to_global(PB, S(1))                 -- stage 1 (PA) -> stage 2 (PB)
    local loss = ((y:matmul(w)):relu() ^ 2):sum()   -- lives on PB only
    loss:backward()
    local lx, lw = x0:clone():requires_grad_(true), w0:clone():requires_grad_(true)
    local ll = ((lx:matmul(lw)):relu() ^ 2):sum()
    ll:backward()
    check(loss:to_global(PB, Bc), ll:detach(), 'loss on PB')
    check(x.grad, lx.grad, 'grad on PA')
    if PB:has_me() then check(w.grad, lw.grad, 'grad on PB') end
  end)

  it('there and back: PA -> PB -> PA with the loss on PA', function()
    local half = math.max(1, math.floor(n / 2))
    local A, Bp = {}, {}
    for i = 0, n - 1 do
      if i < half then A[#A + 1] = i else Bp[#Bp + 1] = i end
    end
    local PA, PB = flow.placement('cpu', A), flow.placement('cpu', Bp)
    local x0, w0 = flow.randn(n + 1, 3), flow.randn(3, 3)
    local x = glob(x0, S(1), PA):requires_grad_(true)
    local w = glob(w0, Bc, PB):requires_grad_(true)
    local z = x:to_global(PB, Bc):matmul(w):tanh():to_global(PA, S(2))
    local loss = (z * z):sum()
    loss:backward()
    local lx, lw = x0:clone():requires_grad_(true), w0:clone():requires_grad_(true)
    local lz = lx:matmul(lw):tanh()
    ;(lz * lz):sum():backward()
    check(x.grad, lx.grad, 'grad on PA')
    if PB:has_me() then check(w.grad, lw.grad, 'grad on PB') end
  end)

  it('to_global outside a split placement takes the logical shape from the placement', function()
    local inner = {}
    for i = 0, n - 2 do inner[#inner + 1] = i end
    local Pin = flow.placement('cpu', inner)
    -- ranks of Pin give their rows of a balanced split of 2 (n - 1) + 1
    -- rows; the rank outside gives something else
    local rows = 2 * (n - 1) + 1
    local mine = Pin:has_me() and flow.ones(r == 0 and 3 or 2, 3) * r or flow.zeros(7)
    local g = mine:to_global(Pin, S(1))
    assert.same({rows, 3}, g.shape:totable())
    assert.equal('float32', g.dtype.name)
    if not Pin:has_me() then assert.equal(0, g:to_local():numel()) end
    local b = g:to_global(P, Bc)
    assert.same({rows, 3}, b:to_local():size():totable())
    H.close(b:to_local():select(2, 1):narrow(1, 1, 3), {0, 0, 0}, 0, 'rows of rank 0')
    -- nested splits of one dim on a grid add up
    local full = flow.randn(2 * n + 3, 2)
    local sb = {S(1), S(1)}
    local nested = shard(full, P2.hierarchy, sb, coord_of(P2) or {0, 0})
    if not P2:has_me() then nested = flow.zeros(0) end
    check(nested:to_global(P2, sb), full, 'nested split from local shards')
    H.raises(function()
      return flow.ones(2, 2 + r):to_global(P, S(1))
    end, 'to_global', 'do not fit together', 'only split dims may differ')
    H.raises(function()
      return flow.ones(r == n - 1 and 3 or 1, 2):to_global(P, S(1))
    end, 'to_global', 'do not fit together', 'first size % n ranks get one more')
  end)
end)

describe('errors on global ops', function()
  it('name the op and the cause, on every rank', function()
    H.raises(function()
      F.batch_norm(glob(flow.randn(1, 3), S(1)), nil, nil, {training = true})
    end, 'batch_norm', 'more than 1 value per channel', '[1, 3]')
    local ids, w = glob(flow.tensor({1, 2}), Bc), glob(flow.randn(3, 2), S(1))
    H.raises(function() F.embedding(ids, w, {max_norm = 1}) end, 'embedding', 'max_norm')
    H.raises(function() F.cross_entropy(glob(flow.randn(2, 3), S(1)), flow.tensor({1, 2})) end,
             'cross_entropy', 'mix local and global')
    H.raises(function() F.conv2d(glob(flow.randn(2, 1, 3, 3), S(1)), flow.randn(1, 1, 1, 1)) end,
             'conv2d', 'mix local and global', 'argument 2')
    local rm = glob(flow.zeros(3), S(1))
    H.raises(function()
      F.batch_norm(glob(flow.randn(8, 3), S(1)), rm, nil, {training = true})
    end, 'batch_norm', 'running_mean must be broadcast')
  end)

  it('in debug mode, an op skipped on one rank is named on every rank', function()
    flow.env.set_debug(true)
    local x = glob(flow.randn(4, 3), S(1))
    local ok, err = pcall(function()
      if r ~= n - 1 then x = F.relu(x) end
      return x * 2
    end)
    flow.env.set_debug(false)
    assert.is_false(ok)
    err = tostring(err)
    assert(err:find('global op mismatch', 1, true), err)
    assert(err:find('rank 0 is at relu', 1, true), err)
    assert(err:find(('rank %d is at mul'):format(n - 1), 1, true), err)
  end)

  it('in debug mode, a local failure on one rank is raised on every rank', function()
    flow.env.set_debug(true)
    local x = glob(flow.randn(2 * n, 3), S(1))
    local ok, err = pcall(function()
      return F.relu(x) + (r == 0 and 'bad' or 1)
    end)
    flow.env.set_debug(false)
    assert.is_false(ok)
    assert(tostring(err):find('failed on rank 0', 1, true) or r == 0, tostring(err))
  end)
end)
