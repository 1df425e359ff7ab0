-- oneflow.fft (flow.fft): torch.fft's helpers that need no complex dtype.
--   flow.fft.fftfreq(n, d = 1, {dtype =, device =, requires_grad =})
--   flow.fft.rfftfreq(n, d = 1, {...})
--   flow.fft.fftshift(x, dim = all), flow.fft.ifftshift(x, dim = all)
-- Dims are 1-based (negative from the end), as everywhere in flow. The
-- transforms themselves (fft, ifft, rfft, ...) return complex tensors, which
-- flow does not have yet (doc/numerics.md, "Not done").
local flow = require 'oneflow'
local A = require 'oneflow._args'

local M = {}

local function freq_args(op, n, d, o)
  if type(d) == 'table' and o == nil then o, d = d, nil end
  o = A.check_options('fft.' .. op, o, {dtype = true, device = true, requires_grad = true, d = true})
  if d == nil then d = o.d or 1 end
  if type(n) ~= 'number' or n % 1 ~= 0 or n < 0 then
    error(('fft.%s: n must be a non-negative integer, got %s'):format(op, tostring(n)), 3)
  end
  if type(d) ~= 'number' then error(('fft.%s: d must be a number, got %s'):format(op, type(d)), 3) end
  local dtype = o.dtype or flow.get_default_dtype()
  if not dtype.is_floating_point then
    error(('fft.%s: dtype must be a floating point type, got %s'):format(op, tostring(dtype)), 3)
  end
  return n, d, {dtype = dtype, device = o.device}, o.requires_grad
end

local function finish(t, rg)
  if rg then t:requires_grad_(true) end
  return t
end

--- fft.fftfreq(n, d = 1, {dtype =, device =, requires_grad =}): the sample
-- frequencies of an n-point DFT with sample spacing d:
-- {0, 1, ..., ceil(n/2) - 1, -floor(n/2), ..., -1} / (d n), torch's order.
function M.fftfreq(n, d, o)
  local opts, rg
  n, d, opts, rg = freq_args('fftfreq', n, d, o)
  if n == 0 then return finish(flow.zeros(0, opts), rg) end
  local pos = math.floor((n + 1) / 2)
  local idx = flow.cat({flow.arange(0, pos, opts), flow.arange(-math.floor(n / 2), 0, opts)})
  return finish(idx * (1 / (n * d)), rg)
end

--- fft.rfftfreq(n, d = 1, {...}): the non-negative frequencies of rfft:
-- {0, 1, ..., floor(n/2)} / (d n).
function M.rfftfreq(n, d, o)
  local opts, rg
  n, d, opts, rg = freq_args('rfftfreq', n, d, o)
  if n == 0 then return finish(flow.zeros(0, opts), rg) end
  return finish(flow.arange(0, math.floor(n / 2) + 1, opts) * (1 / (n * d)), rg)
end

local function shift(op, x, dim, inverse)
  A.check_tensor('fft.' .. op, x, 'input')
  if type(dim) == 'table' and dim.dim ~= nil then dim = dim.dim end
  local nd = x:dim()
  local dims = {}
  if dim == nil then
    for i = 1, nd do dims[i] = i end
  else
    if type(dim) == 'number' then dim = {dim} end
    if type(dim) ~= 'table' then
      error(('fft.%s: dim must be a number or a list of numbers, got %s'):format(op, type(dim)), 3)
    end
    for i, v in ipairs(dim) do
      if type(v) ~= 'number' or v % 1 ~= 0 or v == 0 or v > nd or v < -nd then
        error(('fft.%s: dim %s is out of range for a %d-D tensor (1..%d or -%d..-1)'):format(
          op, tostring(v), nd, nd, nd), 3)
      end
      dims[i] = v < 0 and v + nd + 1 or v
    end
  end
  if #dims == 0 then return x:clone() end
  local shifts = {}
  for i, dd in ipairs(dims) do
    local n = x:size(dd)
    shifts[i] = inverse and math.floor((n + 1) / 2) or math.floor(n / 2)
  end
  return x:roll(shifts, dims)
end

--- fft.fftshift(x, dim = all dims): the zero-frequency entry moved to the
-- centre (a roll by floor(n / 2) along each dim; dim a number or a list).
function M.fftshift(x, dim) return shift('fftshift', x, dim, false) end

--- fft.ifftshift(x, dim = all dims): the inverse of fftshift (a roll by
-- ceil(n / 2)).
function M.ifftshift(x, dim) return shift('ifftshift', x, dim, true) end

return M
