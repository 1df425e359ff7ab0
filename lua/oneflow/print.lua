-- oneflow.print: PyTorch-style tensor printing (4 decimals or scientific,
-- "1." for integral floats, edge items with "..." beyond 1000 elements,
-- rows wrapped at 80 columns).
local ffi = require 'ffi'
local core = require 'oneflow._C'

local C = core.C
local M = {}
M.options = {precision = 4, threshold = 1000, edgeitems = 3, linewidth = 80}

local dbl = ffi.new('double[1]')

-- Visits the indices shown, calling fn(flat_index) in order.
local function shown_indices(shape, summarize, fn)
  local nd, edge = #shape, M.options.edgeitems
  local strides, s = {}, 1
  for d = nd, 1, -1 do strides[d] = s; s = s * shape[d] end
  local function rec(d, base)
    if d > nd then fn(base) return end
    local n = shape[d]
    for i = 0, n - 1 do
      if summarize and n > 2 * edge and i == edge then i = n - edge end
      if not (summarize and n > 2 * edge and i >= edge and i < n - edge) then
        rec(d + 1, base + i * strides[d])
      end
    end
  end
  rec(1, 0)
  return strides
end

local function fmt_float_factory(values, precision)
  local finite = {}
  for _, v in ipairs(values) do
    if v == v and v ~= math.huge and v ~= -math.huge then finite[#finite + 1] = math.abs(v) end
  end
  local int_mode = true
  for _, v in ipairs(finite) do if v ~= math.ceil(v) then int_mode = false break end end
  local nz = {}
  for _, v in ipairs(finite) do if v ~= 0 then nz[#nz + 1] = v end end
  local mx, mn = 0, math.huge
  for _, v in ipairs(nz) do mx = math.max(mx, v); mn = math.min(mn, v) end
  local sci = false
  if #nz > 0 then
    if int_mode then sci = mx > 1e8
    else sci = mx / mn > 1000 or mx > 1e8 or mn < 1e-4 end
  end
  return function(v)
    if v ~= v then return 'nan' end
    if v == math.huge then return 'inf' end
    if v == -math.huge then return '-inf' end
    if sci then return (('%.' .. precision .. 'e'):format(v)):gsub('e([+-])(%d)$', 'e%10%2') end
    if int_mode then return ('%.0f.'):format(v) end
    return ('%.' .. precision .. 'f'):format(v)
  end
end

local default_hidden = {float32 = true, int64 = true, bool = true}

function M.tostring(t)
  if C.of_tracing() ~= 0 then require('oneflow.tensor').no_data_access(t, 'tostring()', 2) end
  local shape = t:size():totable()
  local numel = t:numel()
  local dt = t.dtype
  local suffix = ''
  if not default_hidden[dt.name] then suffix = ', dtype=oneflow.' .. dt.name end
  local grad_fn = t.requires_grad and t.grad_fn
  if grad_fn then suffix = suffix .. ', grad_fn=<' .. grad_fn:name() .. '>'
  elseif t.requires_grad then suffix = suffix .. ', requires_grad=True' end
  local dev = t.device
  if dev.type ~= 'cpu' then suffix = (", device='%s'"):format(tostring(dev)) .. suffix end
  if numel == 0 then
    if #shape > 1 then suffix = ', size=(' .. table.concat(shape, ', ') .. ')' .. suffix end
    return 'tensor([]' .. suffix .. ')'
  end
  local summarize = numel > M.options.threshold
  local values, order = {}, {}
  -- uint64 beyond 2^53 does not fit a double: its digits come from the bits
  -- (held in `dense` so the copy outlives the pointer)
  local dense = dt.name == 'uint64' and t:contiguous():cpu()
  local u64 = dense and ffi.cast('const uint64_t *', C.of_tensor_data(dense.p))
  -- complex: (re, im) pairs from a dense copy of the float view
  local cdense = dt.is_complex and require('oneflow').view_as_real(t):detach():contiguous():cpu()
  local cp = cdense and ffi.cast(dt.name == 'complex128' and 'const double *' or 'const float *',
                                 C.of_tensor_data(cdense.p))
  shown_indices(shape, summarize, function(flat)
    local v
    if cp then
      v = {cp[2 * flat], cp[2 * flat + 1]}
    elseif u64 then
      v = tostring(u64[flat]):gsub('ULL$', '')
    else
      C.of_tensor_get_flat(t.p, flat, dbl)
      v = dbl[0]
    end
    values[flat] = v
    order[#order + 1] = v
  end)
  local fmt
  if cp then   -- PyTorch's 1.0000+3.0000j
    local parts = {}
    for _, v in ipairs(order) do parts[#parts + 1] = v[1]; parts[#parts + 1] = math.abs(v[2]) end
    local ff = fmt_float_factory(parts, M.options.precision)
    fmt = function(v)
      return ff(v[1]) .. ((v[2] < 0 or 1 / v[2] < 0) and '-' or '+') .. ff(math.abs(v[2])) .. 'j'
    end
  elseif dt.is_floating_point then
    fmt = fmt_float_factory(order, M.options.precision)
  elseif dt.name == 'bool' then
    fmt = function(v) return v ~= 0 and 'True' or 'False' end
  elseif u64 then
    fmt = function(v) return v end
  else
    fmt = function(v) return ('%d'):format(v) end
  end
  local width = 0
  for _, v in ipairs(order) do
    -- as PyTorch: nan and inf do not widen the columns
    if not dt.is_floating_point or (v == v and v ~= math.huge and v ~= -math.huge) then
      width = math.max(width, #fmt(v))
    end
  end
  local function cell(v) local s = fmt(v) return (' '):rep(width - #s) .. s end

  local nd, edge, indent0 = #shape, M.options.edgeitems, 7
  if nd == 0 then return 'tensor(' .. fmt(values[0]) .. suffix .. ')' end
  local strides, s = {}, 1
  for d = nd, 1, -1 do strides[d] = s; s = s * shape[d] end
  local function rec(d, base, indent)
    local n, parts = shape[d], {}
    local skip = summarize and n > 2 * edge
    for i = 0, n - 1 do
      if skip and i == edge then parts[#parts + 1] = d == nd and ' ...' or '...' end
      if not (skip and i >= edge and i < n - edge) then
        if d == nd then parts[#parts + 1] = cell(values[base + i])
        else parts[#parts + 1] = rec(d + 1, base + i * strides[d], indent + 1) end
      end
    end
    if d == nd then
      local per_line = math.max(1, math.floor((M.options.linewidth - indent) / (width + 2)))
      local lines = {}
      for i = 1, #parts, per_line do
        lines[#lines + 1] = table.concat(parts, ', ', i, math.min(i + per_line - 1, #parts))
      end
      return '[' .. table.concat(lines, ',\n' .. (' '):rep(indent + 1)) .. ']'
    end
    local sep = ',' .. ('\n'):rep(nd - d) .. (' '):rep(indent + 1)
    return '[' .. table.concat(parts, sep) .. ']'
  end
  return 'tensor(' .. rec(1, 0, indent0) .. suffix .. ')'
end

return M
