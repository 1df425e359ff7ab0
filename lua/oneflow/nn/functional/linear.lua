-- oneflow.nn.functional.linear: linear, bilinear, embedding and one_hot,
-- composed from matmul, index_select and reductions (all differentiable).
local flow = require 'oneflow'   -- the table being built (used at call time)
local autograd = require 'oneflow.autograd'
local U = require 'oneflow.nn._util'
local A = require 'oneflow._args'
local core = require 'oneflow._C'
local C, release, may_release = core.C, core.release, core.may_release
local T = require 'oneflow.tensor'
local B = require 'oneflow.distributed.boxing'
local tracer = require 'oneflow.onnx.tracer'

local parse, fail, shape_str = U.parse, U.fail, U.shape_str
local F = {}

--- F.linear(x, weight[, bias]): x [*, in] @ weight[out, in]^T + bias [out].
local linear_spec = {{'bias'}}
function F.linear(x, w, b, ...)
  if b ~= nil and not flow.is_tensor(b) or select('#', ...) > 0 then b = parse('linear', linear_spec, b, ...).bias end
  A.check_tensor('linear', x)
  A.check_tensor('linear', w, 'weight', 2)
  if b ~= nil then A.check_tensor('linear', b, 'bias', 3) end
  local in_f = w:size(w:dim())
  if x:dim() == 0 or x:size(-1) ~= in_f then
    fail(('linear: input %s and weight %s do not match (last dim of input must be %d)'):format(
      shape_str(x), shape_str(w), in_f))
  end
  -- inference with a bias: one addmm (the bias is the gemm's C, beta = 1)
  -- instead of a product and a broadcast add over the whole result -- on the
  -- CPU, for contiguous float32/float64 input, when no gradient is recorded
  -- (training keeps matmul + add: same bits as a training nn.Graph, whose
  -- fuse pass folds the bias add into the activation after it), also while
  -- an eval graph traces (autograd._eval_trace, nn/graph.lua: the bits of
  -- eager inference, and no separate zeroing and bias passes over the
  -- result; addmm records its gradient where one is asked for), outside
  -- autocast and ONNX export (which records linear as MatMul + Add with
  -- dynamic axes)
  if b ~= nil and x:dim() >= 2 and b:dim() == 1 and not x.is_cuda and not w.is_cuda
      and x.dtype == w.dtype and b.dtype == w.dtype and (w.dtype == flow.float32 or w.dtype == flow.float64)
      and x:numel() > 0 and x:is_contiguous() and C.of_autocast_enabled() == 0
      and not tracer.active()
      and (autograd._eval_trace or not (autograd.is_grad_enabled()
           and (x.requires_grad or w.requires_grad or b.requires_grad))) then
    -- the views and the 2-d product never leave here: released at once
    -- (not while a graph traces them), so that the result's storage goes
    -- with the result (a forward that frees its values, doc/nn.md) and x's
    -- is not held by a dead view
    local free = may_release()
    local wt = w:t()
    if x:dim() == 2 then
      local y = flow.addmm(b, x, wt)
      if free then release(wt) end
      return y
    end
    local shape = x:size():totable()
    shape[#shape] = w:size(1)
    local x2 = x:view(-1, in_f)
    local y2 = flow.addmm(b, x2, wt)
    local y = y2:view(shape)
    if free then
      release(wt)
      release(x2)
      release(y2)
    end
    return y
  end
  local wt = w:t()
  local y = x:matmul(wt)
  -- with no gradient recorded and nothing tracing, the transposed view and
  -- the product go at once, as in the addmm path above
  local free = may_release()
  if free then release(wt) end
  if b ~= nil then
    -- under autocast linear runs in the low dtype as a whole, bias included
    if b.dtype ~= y.dtype and C.of_autocast_enabled() ~= 0 then b = b:to(y.dtype) end
    local sum = y + b
    if free and not rawequal(y, x) then release(y) end
    y = sum
  end
  return y
end

--- F.bilinear(x1, x2, weight[, bias]): y_k = x1^T W_k x2 + b_k with
-- x1 [*, in1], x2 [*, in2], weight [out, in1, in2].
function F.bilinear(x1, x2, w, b)
  A.check_tensor('bilinear', x1, 'input1', 1)
  A.check_tensor('bilinear', x2, 'input2', 2)
  A.check_tensor('bilinear', w, 'weight', 3)
  A.handle('bilinear', b, 'bias')
  local out_f, in1, in2 = w:size(1), w:size(2), w:size(3)
  if x1:size(-1) ~= in1 or x2:size(-1) ~= in2 then
    fail(('bilinear: inputs %s and %s do not match weight %s'):format(
      shape_str(x1), shape_str(x2), shape_str(w)))
  end
  local lead = x1:size():totable()
  lead[#lead] = nil
  local a = x1:reshape(-1, in1)
  local c = x2:reshape(-1, in2)
  -- (N, in1) @ (in1, out * in2) -> (N, out, in2), then dot with x2 over in2
  local wm = w:permute(2, 1, 3):reshape(in1, out_f * in2)
  local t = a:matmul(wm):view(-1, out_f, in2)
  local y = (t * c:unsqueeze(2)):sum(3)
  if b ~= nil then y = y + b end
  lead[#lead + 1] = out_f
  return y:view(lead)
end

------------------------------------------------------------------ embedding
-- rows of weight referenced by ids with norm > max_norm are rescaled in place
local function renorm(ids, weight, max_norm, p)
  autograd.no_grad(function()
    local seen = {}
    for _, i in ipairs(ids:reshape(-1):totable()) do
      if not seen[i] then
        seen[i] = true
        local row = weight[i]
        local n = row:norm(p):item()
        if n > max_norm then row:mul_(max_norm / (n + 1e-7)) end
      end
    end
  end)
end

-- sparse = true: the lookup's backward leaves a oneflow.sparse_grad (the
-- used row ids and their gradient rows) on weight.grad instead of a dense
-- [num, dim] tensor; padding rows are left out, as PyTorch's sparse backward.
local SparseLookup = autograd.Function:subclass('EmbeddingSparse')
function SparseLookup.forward(ctx, weight, flat, pad)
  ctx.weight, ctx.flat, ctx.pad = weight, flat, pad
  return weight:index_select(1, flat)
end
function SparseLookup.backward(ctx, g)
  local idx, rows = ctx.flat, g
  if ctx.pad then
    local keep = idx:ne(ctx.pad):nonzero():reshape(-1)
    idx, rows = idx:index_select(1, keep), rows:index_select(1, keep)
  end
  local SG = require 'oneflow.sparse_grad'
  local w = ctx.weight
  autograd._accumulate_sparse(w, SG(idx:to(flow.int64):clone(), rows:detach():clone(),
                                    {w:size(1), w:size(2)}))
  return nil
end

local emb_spec = {{'padding_idx', nil}, {'max_norm', nil}, {'norm_type', 2},
                  {'scale_grad_by_freq', false}, {'sparse', false}}

--- F.embedding(ids, weight, {padding_idx =, max_norm =, norm_type = 2, sparse = false}):
-- rows of weight [num, dim] at the 1-based ids; the padding_idx row gets
-- no gradient.
function F.embedding(ids, weight, ...)
  local a = parse('embedding', emb_spec, ...)
  if ids.dtype.is_floating_point then
    fail(('embedding: ids must be an integer tensor, got %s'):format(ids.dtype.name))
  end
  local num, dim = weight:size(1), weight:size(2)
  local pad = a.padding_idx
  if pad ~= nil then
    -- 1-based like the ids; negative counts from the end (-1 = the last row),
    -- as PyTorch's -num..-1. Out of range is an error, not a padding that
    -- silently never matches.
    A.integer('embedding', pad, nil, 'padding_idx')
    if pad == 0 or pad > num or pad < -num then
      fail(('embedding: padding_idx must be within 1..%d (or -%d..-1) for a weight of %d rows, got %d')
        :format(num, num, num, pad))
    end
    if pad < 0 then pad = num + pad + 1 end
  end
  if a.max_norm then renorm(ids, weight, a.max_norm, a.norm_type) end
  local flat = ids:reshape(-1)
  local ok, out = pcall(weight.index_select, weight, 1, flat)
  if not ok then fail('embedding: ' .. tostring(out):gsub('^.-index_select: ', '')) end
  local made = {out}   -- the tensors made here that do not leave
  if a.sparse and weight.requires_grad and autograd.is_grad_enabled() then
    if weight:dim() ~= 2 then fail('embedding: sparse gradients need a 2-D weight') end
    out = SparseLookup.apply(weight, flat, pad)   -- its backward keeps flat
    made = {}
  elseif pad then
    local keep = flat:ne(pad):unsqueeze(2)
    local detached = out:detach()
    out = flow.where(keep, out, detached)
    made[2], made[3], made[4] = keep, detached, out
  end
  local shape = ids:size():totable()
  shape[#shape + 1] = dim
  local y = out:view(shape)
  -- released at once (as F.linear's), so that the result's storage goes
  -- with the result, where _C.may_release allows
  if may_release() then
    if #made > 0 and not rawequal(flat, ids) then release(flat) end
    for _, t in ipairs(made) do
      if not rawequal(t, y) then release(t) end
    end
  end
  return y
end

--- F.one_hot(x, num_classes = -1): int64 one-hot vectors of the 1-based class ids in x.
function F.one_hot(ids, num_classes) return flow.one_hot(ids, num_classes) end

------------------------------------------------------------------ global tensors
local R = require 'oneflow.distributed.rules'
local S, Bc, Ps = R.S, R.B, R.P

--- linear follows matmul (rows, output features, input features -> partial).
F.linear = T.sbp_fn('linear', R.linear, F.linear)

-- Vocab-parallel lookup: this rank holds rows lo+1 .. lo+rows of the
-- weight; ids outside them give zeros here and the partial sums over the
-- ranks give every row once.
local function vocab_parallel(orig, largs, ctx, _, P)
  local ids, weight = largs[1], largs[2]
  local coord = P.coord or {0, 0}
  local _, start = B.shard(ctx.shapes[2], P.hierarchy, ctx.in_sbps[2], coord)
  local lo, rows = start[1], weight:size(1)
  local out_shape = ids:size():totable()
  out_shape[#out_shape + 1] = weight:size(2)
  if rows == 0 then
    -- still a function of the (empty) shard, so every rank has its gradient
    return flow.zeros(out_shape, {dtype = weight.dtype}) + weight:sum() * 0
  end
  local keep = ids:gt(lo):logical_and(ids:le(lo + rows))
  local a = parse('embedding', emb_spec, unpack(largs, 3, ctx.n))
  local opts = {}
  local pad = a.padding_idx
  if pad and pad < 0 then pad = ctx.shapes[2][1] + pad + 1 end
  if pad and pad > lo and pad <= lo + rows then opts.padding_idx = pad - lo end
  local out = orig(flow.where(keep, ids - lo, 1), weight, opts)
  return out * keep:unsqueeze(-1):to(out.dtype)
end

--- embedding: ids split with the weight broadcast (data parallel), the
-- weight split on rows (vocab parallel, masked lookup -> partial sums) or
-- on columns (the embedding dim).
F.embedding = T.sbp_fn('embedding', function(ctx)
  if ctx.roles[1] ~= 1 or ctx.roles[2] ~= 2 then
    return 'ids and weight must both be global tensors'
  end
  if R.opt(ctx, 4, 'max_norm') ~= nil then
    return 'max_norm (renormalising rows in place) is not supported on global tensors'
  end
  local sig = R.signer(ctx, {'input', 'weight'})
  local nd = #ctx.shapes[1]
  local sigs = {sig({}, Bc)}
  for d = 1, nd do sigs[#sigs + 1] = sig({input = S(d)}, S(d)) end
  sigs[#sigs + 1] = sig({weight = S(1)}, Ps, {call = vocab_parallel})
  sigs[#sigs + 1] = sig({weight = S(2)}, S(nd + 1))
  return sigs
end, F.embedding)

return F
