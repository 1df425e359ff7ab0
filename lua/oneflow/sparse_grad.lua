-- oneflow.sparse_grad: the sparse gradient of an embedding weight.
-- flow has no sparse COO tensors, so `nn.Embedding(n, d, {sparse = true})`
-- leaves on `weight.grad` this small object instead of a dense [n, d]
-- tensor: the 1-based row ids the batch used (`indices`, int64 [nnz], in
-- lookup order, duplicates kept, as PyTorch's uncoalesced grad) and one
-- gradient row per id (`values` [nnz, d]). Rows of duplicate ids sum.
-- optim.SGD (momentum = 0) and optim.SparseAdam take it and touch only those
-- rows; the other optimizers reject it naming the parameter.
local class = require 'oneflow.class'
-- flow itself is loaded by the time a gradient exists (this module sits below it)
local function F() return require 'oneflow' end

local SparseGrad = class('SparseGrad')
SparseGrad.is_sparse = true

--- SparseGrad(indices, values, size): size is {rows, dim} of the dense grad.
function SparseGrad:__init(indices, values, size)
  self.indices, self.values, self._size = indices, values, size
end

--- the dense shape as a Lua list {rows, dim}
function SparseGrad:size() return {self._size[1], self._size[2]} end
--- number of stored rows (duplicates counted)
function SparseGrad:_nnz() return self.indices:size(1) end

--- the same gradient with one row per distinct id (ascending), duplicates summed.
-- Tensor ops only (a stable sort, a first-of-run mask and its running sum as
-- the row slot), no loop over the ids in Lua: the optimizers call it every step.
function SparseGrad:coalesce()
  local flow = F()
  local n, dev = self:_nnz(), self.values.device
  if n == 0 then
    return SparseGrad(flow.zeros(0, {dtype = flow.int64, device = dev}),
                      flow.zeros({0, self._size[2]}, {dtype = self.values.dtype, device = dev}), self._size)
  end
  local sorted, perm = self.indices:sort(1, {stable = true})
  local first = flow.ones(n, {dtype = flow.bool, device = dev})
  if n > 1 then first:narrow(1, 2, n - 1):copy_(sorted:narrow(1, 2, n - 1):ne(sorted:narrow(1, 1, n - 1))) end
  local slot = first:to(flow.int64):cumsum(1)        -- 1-based row of each sorted entry
  local uniq = sorted:masked_select(first)
  local vals = flow.zeros({uniq:size(1), self._size[2]}, {dtype = self.values.dtype, device = dev})
  vals:index_add_(1, slot, self.values:index_select(1, perm))
  return SparseGrad(uniq, vals, self._size)
end

--- the dense [rows, dim] gradient (for inspection)
function SparseGrad:to_dense()
  local flow = F()
  local d = flow.zeros(self._size, {dtype = self.values.dtype, device = self.values.device})
  if self:_nnz() > 0 then d:index_add_(1, self.indices, self.values) end
  return d
end

--- this gradient plus another sparse one: the rows of both, as PyTorch's sparse add
function SparseGrad:add(other)
  local flow = F()
  return SparseGrad(flow.cat({self.indices, other.indices}), flow.cat({self.values, other.values}),
                    self._size)
end

function SparseGrad:__tostring()
  return ('SparseGrad(rows=%d, dim=%d, nnz=%d)'):format(self._size[1], self._size[2], self:_nnz())
end

return SparseGrad
