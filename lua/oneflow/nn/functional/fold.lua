-- oneflow.nn.functional.fold: unfold / fold (im2col / col2im), composed from
-- pad, index_select, index_add and reshape (differentiable).
--   local cols = F.unfold(x, {2, 3}, {stride = 2})      -- [N, C*2*3, L]
--   local y = F.fold(cols, {8, 8}, {2, 3}, {stride = 2}) -- [N, C, 8, 8]
local flow = require 'oneflow'   -- the table being built (used at call time)
local U = require 'oneflow.nn._util'

local parse, fail, shape_str, ntuple = U.parse, U.fail, U.shape_str, U.ntuple
local F = {}

------------------------------------------------------------------ unfold / fold
-- Sliding-block geometry shared by unfold and fold: h, w are the (unpadded)
-- spatial sizes. Returns the padded sizes, the block counts and the index
-- tensor idx [kh*kw*L] (1-based, into the padded plane flattened to Hp*Wp),
-- ordered kernel row, kernel column, block row, block column.
local function blocks(op, h, w, a, like)
  local k = ntuple(a.kernel_size, 2, op, 'kernel_size')
  local d = ntuple(a.dilation, 2, op, 'dilation')
  local p = ntuple(a.padding, 2, op, 'padding')
  local s = ntuple(a.stride, 2, op, 'stride')
  for i = 1, 2 do
    if k[i] < 1 or d[i] < 1 or s[i] < 1 or p[i] < 0 then
      fail(('%s: kernel_size, dilation and stride must be positive and padding non-negative, got '
            .. 'kernel_size=%s, dilation=%s, padding=%s, stride=%s'):format(
        op, U.tuple_str(k), U.tuple_str(d), U.tuple_str(p), U.tuple_str(s)))
    end
  end
  local hp, wp = h + 2 * p[1], w + 2 * p[2]
  local bh = math.floor((hp - d[1] * (k[1] - 1) - 1) / s[1]) + 1
  local bw = math.floor((wp - d[2] * (k[2] - 1) - 1) / s[2]) + 1
  if bh < 1 or bw < 1 then
    fail(('%s: spatial size (%d, %d) with padding=%s is too small for kernel_size=%s, dilation=%s '
          .. '(no sliding block fits)'):format(op, h, w, U.tuple_str(p), U.tuple_str(k), U.tuple_str(d)))
  end
  local list, n = {}, 0
  for ki = 0, k[1] - 1 do
    for kj = 0, k[2] - 1 do
      for oi = 0, bh - 1 do
        local row = (oi * s[1] + ki * d[1]) * wp
        for oj = 0, bw - 1 do
          n = n + 1
          list[n] = row + oj * s[2] + kj * d[2] + 1
        end
      end
    end
  end
  local idx = flow.tensor(list, {dtype = flow.int64})
  if like.is_cuda then idx = idx:to(like.device) end
  return {k = k, p = p, hp = hp, wp = wp, bh = bh, bw = bw, idx = idx}
end

local unfold_spec = {{'kernel_size', U.REQUIRED}, {'dilation', 1}, {'padding', 0}, {'stride', 1}}

--- F.unfold(x, kernel_size, {dilation = 1, padding = 0, stride = 1}):
-- [N, C, H, W] -> [N, C*kh*kw, L] (or [C, H, W] -> [C*kh*kw, L]), the sliding
-- blocks of x as columns (im2col); L is the number of blocks.
function F.unfold(x, ...)
  local a = parse('unfold', unfold_spec, ...)
  if not flow.is_tensor(x) or (x:dim() ~= 3 and x:dim() ~= 4) then
    fail(('unfold: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got %s'):format(
      flow.is_tensor(x) and shape_str(x) or type(x)))
  end
  local batched = x:dim() == 4
  if not batched then x = x:unsqueeze(1) end
  local n, c, h, w = x:size(1), x:size(2), x:size(3), x:size(4)
  local b = blocks('unfold', h, w, a, x)
  if b.p[1] > 0 or b.p[2] > 0 then
    x = flow.nn.functional.pad(x, {b.p[2], b.p[2], b.p[1], b.p[1]})
  end
  local kk, l = b.k[1] * b.k[2], b.bh * b.bw
  local out = x:reshape(n, c, b.hp * b.wp):index_select(3, b.idx):reshape(n, c * kk, l)
  if not batched then out = out:squeeze(1) end
  return out
end

local fold_spec = {{'output_size', U.REQUIRED}, {'kernel_size', U.REQUIRED}, {'dilation', 1},
                   {'padding', 0}, {'stride', 1}}

--- F.fold(x, output_size, kernel_size, {dilation = 1, padding = 0, stride = 1}):
-- [N, C*kh*kw, L] -> [N, C, H, W] (or [C*kh*kw, L] -> [C, H, W]), the adjoint
-- of unfold (col2im): values of overlapping blocks are summed.
function F.fold(x, ...)
  local a = parse('fold', fold_spec, ...)
  if not flow.is_tensor(x) or (x:dim() ~= 2 and x:dim() ~= 3) then
    fail(('fold: expected a 2-D [C*kh*kw, L] or 3-D [N, C*kh*kw, L] input, got %s'):format(
      flow.is_tensor(x) and shape_str(x) or type(x)))
  end
  local batched = x:dim() == 3
  if not batched then x = x:unsqueeze(1) end
  local o = ntuple(a.output_size, 2, 'fold', 'output_size')
  local b = blocks('fold', o[1], o[2], a, x)
  local n, ckk, l = x:size(1), x:size(2), x:size(3)
  local kk = b.k[1] * b.k[2]
  if ckk % kk ~= 0 then
    fail(('fold: expected size of input dim %d (%d) to be divisible by the product of kernel_size '
          .. '%s = %d'):format(batched and 2 or 1, ckk, U.tuple_str(b.k), kk))
  end
  if l ~= b.bh * b.bw then
    fail(('fold: output_size=%s, kernel_size=%s give %d * %d = %d sliding blocks, but the input %s has '
          .. '%d in its last dim'):format(U.tuple_str(o), U.tuple_str(b.k), b.bh, b.bw, b.bh * b.bw,
                                          shape_str(x), l))
  end
  local c = ckk / kk
  local plane = flow.zeros({n, c, b.hp * b.wp}, {dtype = x.dtype, device = x.device})
  local out = plane:index_add(3, b.idx, x:reshape(n, c, kk * l)):reshape(n, c, b.hp, b.wp)
  if b.p[1] > 0 then out = out:narrow(3, b.p[1] + 1, o[1]) end
  if b.p[2] > 0 then out = out:narrow(4, b.p[2] + 1, o[2]) end
  if not batched then out = out:squeeze(1) end
  return out
end

return F
