-- oneflow.nn.packed (nn.utils.rnn): padded <-> packed variable-length batches,
-- PyTorch 1.13's PackedSequence. Index values are 1-based.
--   local packed = rnn_utils.pack_padded_sequence(x, {3, 2}, {batch_first = true})
--   local out, h = gru(packed)                         -- out: a PackedSequence
--   local y, lengths = rnn_utils.pad_packed_sequence(out, {batch_first = true})
-- A PackedSequence holds data [sum(lengths), *] (the time steps one after the
-- other, each with the sequences still running, longest first), batch_sizes
-- (int64, one per step), sorted_indices / unsorted_indices (int64 or nil).
local flow = require 'oneflow'   -- the table being built (used at call time)
local T = require 'oneflow.tensor'
local U = require 'oneflow.nn._util'

local fail, is_tensor = U.fail, T.is_tensor
local M = {}

local PackedSequence = require('oneflow._args').value_type({})
PackedSequence.__index = PackedSequence
PackedSequence.__name = 'PackedSequence'

--- PackedSequence(data, batch_sizes, sorted_indices, unsorted_indices)
function M.PackedSequence(data, batch_sizes, sorted_indices, unsorted_indices)
  if sorted_indices ~= nil and unsorted_indices == nil then
    unsorted_indices = flow.argsort(sorted_indices, 1)
  end
  return setmetatable({data = data, batch_sizes = batch_sizes, sorted_indices = sorted_indices,
                       unsorted_indices = unsorted_indices}, PackedSequence)
end

function M.is_packed(v) return getmetatable(v) == PackedSequence end

function PackedSequence:__tostring()
  return ('PackedSequence(data=%s, batch_sizes=%s)'):format(U.shape_str(self.data),
    table.concat(self.batch_sizes:totable(), ','))
end

local function lengths_list(lengths, op)
  if is_tensor(lengths) then lengths = lengths:totable() end
  if type(lengths) ~= 'table' then fail(op .. ': expected lengths to be a tensor or a list of numbers') end
  return lengths
end

local function sizes_of(packed) return packed.batch_sizes:totable() end

-- sorted-order padded [L, N, *] (zeros past each length) -> data [sum, *]
function M._pack_sorted(x, batch_sizes)
  local pieces = {}
  for t, bs in ipairs(batch_sizes) do
    local step = x:select(1, t)
    pieces[t] = bs == step:size(1) and step or step:narrow(1, 1, bs)
  end
  return flow.cat(pieces, 1)
end

-- data [sum, *] -> sorted-order padded [L, N, *] with padding_value past each length
function M._pad_sorted(data, batch_sizes, padding_value, total_length)
  local n, steps, pos = batch_sizes[1], {}, 1
  local tail = data:size():totable()
  table.remove(tail, 1)
  local function filler(rows)
    local s = {rows}
    for _, d in ipairs(tail) do s[#s + 1] = d end
    return flow.full(s, padding_value or 0, {dtype = data.dtype})
  end
  for t, bs in ipairs(batch_sizes) do
    local piece = data:narrow(1, pos, bs)
    pos = pos + bs
    steps[t] = bs < n and flow.cat({piece, filler(n - bs)}, 1) or piece
  end
  for t = #batch_sizes + 1, total_length or #batch_sizes do steps[t] = filler(n) end
  return flow.stack(steps, 1)
end

--- pack_padded_sequence(input, lengths, {batch_first = false, enforce_sorted = true}):
-- input [L, N, *] ([N, L, *] if batch_first), lengths a list or a 1-D tensor.
-- enforce_sorted: lengths must be decreasing; otherwise the batch is sorted and
-- the permutation kept in sorted_indices.
function M.pack_padded_sequence(input, lengths, opts)
  opts = require('oneflow._args').check_options('pack_padded_sequence', opts, {'batch_first', 'enforce_sorted'})
  local enforce = opts.enforce_sorted ~= false
  local lens = lengths_list(lengths, 'pack_padded_sequence')
  if opts.batch_first then input = input:transpose(1, 2) end
  local n = input:size(2)
  if #lens ~= n then
    fail(('pack_padded_sequence: expected %d lengths for a batch of %d, got %d'):format(n, n, #lens))
  end
  local sorted_indices
  if enforce then
    for i = 2, n do
      if lens[i] > lens[i - 1] then
        fail('pack_padded_sequence: `lengths` array must be sorted in decreasing order when '
             .. '`enforce_sorted` is true. You can pass `enforce_sorted = false` to pack_padded_sequence '
             .. 'and/or pack_sequence to sidestep this requirement if you do not need ONNX exportability.')
      end
    end
  else
    local _, idx = flow.tensor(lens, {dtype = flow.int64}):sort(1, {descending = true, stable = true})
    sorted_indices = idx
    local s = {}
    for i, k in ipairs(idx:totable()) do s[i] = lens[k] end
    lens = s
    input = input:index_select(2, idx)
  end
  for _, l in ipairs(lens) do
    if l <= 0 then fail('pack_padded_sequence: length of all samples has to be greater than 0') end
  end
  if lens[1] > input:size(1) then
    fail(('pack_padded_sequence: a length %d exceeds the padded length %d'):format(lens[1], input:size(1)))
  end
  local batch_sizes = {}
  for t = 1, lens[1] do
    local c = 0
    for _, l in ipairs(lens) do if l >= t then c = c + 1 end end
    batch_sizes[t] = c
  end
  return M.PackedSequence(M._pack_sorted(input, batch_sizes), flow.tensor(batch_sizes, {dtype = flow.int64}),
                          sorted_indices)
end

--- pad_packed_sequence(packed, {batch_first = false, padding_value = 0, total_length}):
-- padded [L, N, *] ([N, L, *]) in the original batch order, and the lengths (int64).
function M.pad_packed_sequence(packed, opts)
  opts = require('oneflow._args').check_options('pad_packed_sequence', opts,
      {'batch_first', 'padding_value', 'total_length'})
  if not M.is_packed(packed) then fail('pad_packed_sequence: expected a PackedSequence') end
  local bsz = sizes_of(packed)
  local total = opts.total_length
  if total and total < #bsz then
    fail(('pad_packed_sequence: expected total_length to be at least the length of the longest sequence '
          .. '(%d), but got total_length=%d'):format(#bsz, total))
  end
  local out = M._pad_sorted(packed.data, bsz, opts.padding_value or 0, total)
  local lens = {}
  for i = 1, bsz[1] do
    local l = 0
    for _, b in ipairs(bsz) do if b >= i then l = l + 1 end end
    lens[i] = l
  end
  local lengths = flow.tensor(lens, {dtype = flow.int64})
  if packed.unsorted_indices ~= nil then
    out = out:index_select(2, packed.unsorted_indices)
    lengths = lengths:index_select(1, packed.unsorted_indices)
  end
  if opts.batch_first then out = out:transpose(1, 2) end
  return out, lengths
end

--- pad_sequence(list, {batch_first = false, padding_value = 0}): tensors [L_i, *]
-- -> [max L, N, *] ([N, max L, *] if batch_first).
function M.pad_sequence(list, opts)
  opts = require('oneflow._args').check_options('pad_sequence', opts, {'batch_first', 'padding_value'})
  if type(list) ~= 'table' or #list == 0 then fail('pad_sequence: expected a non-empty list of tensors') end
  local maxlen = 0
  for _, s in ipairs(list) do maxlen = math.max(maxlen, s:size(1)) end
  local cols = {}
  for i, s in ipairs(list) do
    local l = s:size(1)
    if l < maxlen then
      local shape = s:size():totable()
      shape[1] = maxlen - l
      s = flow.cat({s, flow.full(shape, opts.padding_value or 0, {dtype = s.dtype})}, 1)
    end
    cols[i] = s
  end
  return flow.stack(cols, opts.batch_first and 1 or 2)
end

--- pack_sequence(list, {enforce_sorted = true}): tensors [L_i, *] -> a PackedSequence.
function M.pack_sequence(list, opts)
  opts = require('oneflow._args').check_options('pack_sequence', opts, {'enforce_sorted'})
  local lens = {}
  for i, s in ipairs(list) do lens[i] = s:size(1) end
  return M.pack_padded_sequence(M.pad_sequence(list), lens, {enforce_sorted = opts.enforce_sorted})
end

return M
