-- oneflow.fft (flow.fft): torch.fft's helpers that need no complex dtype.
--   flow.fft.fftfreq(n, d = 1, {dtype =, device =, requires_grad =})
--   flow.fft.rfftfreq(n, d = 1, {...})
--   flow.fft.fftshift(x, dim = all), flow.fft.ifftshift(x, dim = all)
--   flow.fft.fft(x, n, dim, norm) / ifft / rfft / irfft / hfft / ihfft,
--   flow.fft.fft2(x, s, dim, norm) / ifft2 / rfft2 / irfft2,
--   flow.fft.fftn(x, s, dim, norm) / ifftn / rfftn / irfftn
--   (or the same names in a trailing options table: {n =, dim =, norm =})
-- Dims are 1-based (negative from the end), as everywhere in flow. The
-- transforms run core/ops/fft.c (our own mixed-radix + Bluestein FFT on
-- the CPU, cuFFT on CUDA) and are differentiable.
local flow = require 'oneflow'
local A = require 'oneflow._args'
local ffi = require 'ffi'
local core = require 'oneflow._C'
local T = require 'oneflow.tensor'
local C, out1 = core.C, core.out1

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

------------------------------------------------------------------ transforms

-- PyTorch's norm_from_string: 0 none, 1 1/sqrt(n), 2 1/n
local function norm_mode(op, norm, forward)
  if norm == nil or norm == 'backward' then return forward and 0 or 2 end
  if norm == 'forward' then return forward and 2 or 0 end
  if norm == 'ortho' then return 1 end
  error(("fft.%s: invalid norm %s (expected 'backward', 'forward' or 'ortho')"):format(
    op, type(norm) == 'string' and ("'" .. norm .. "'") or tostring(norm)), 4)
end

local function complex_dtype(dt)
  return dt.name == 'float64' and flow.complex128 or flow.complex64
end
local function real_dtype(dt)
  if dt.name == 'float64' or dt.name == 'float32' then return dt end
  return dt.is_floating_point and flow.float32 or flow.get_default_dtype()
end

-- x as complex (real promoted: float64 -> complex128, else complex64)
local function to_complex(x)
  if x.dtype.is_complex then return x end
  return x:to(complex_dtype(real_dtype(x.dtype)))
end
local function to_real(op, x)
  if x.dtype.is_complex then
    error(('fft.%s: expects a real input tensor, got %s (shape %s)'):format(
      op, x.dtype.name, A.shape_str(x)), 4)
  end
  local dt = real_dtype(x.dtype)
  return x.dtype == dt and x or x:to(dt)
end

-- x resized along the 1-based dim d to n entries: trimmed or zero-padded
local function resize(x, d, n)
  local have = x:size(d)
  if n == have then return x end
  -- complex: through the (re, im) view, whose narrow and cat have gradients
  local cx = x.dtype.is_complex
  local r = cx and flow.view_as_real(x) or x
  if n < have then
    r = r:narrow(d, 1, n)
  else
    local shape = r:size():totable()
    shape[d] = n - have
    r = flow.cat({r, flow.zeros(shape, {dtype = r.dtype, device = r.device})}, d)
  end
  if not cx then return r end
  return flow.view_as_complex(r:contiguous())
end

-- the options: positional (n or s, dim, norm) or a trailing table
local function args(op, x, multi, a, b, c, o)
  A.check_tensor('fft.' .. op, x, 'input', 1)
  local key = multi and 's' or 'n'
  if type(c) == 'table' and o == nil and A.is_options(c) then o, c = c, nil end
  if type(b) == 'table' and o == nil and c == nil and A.is_options(b) then o, b = b, nil end
  if type(a) == 'table' and o == nil and b == nil and c == nil and A.is_options(a) then o, a = a, nil end
  o = A.check_options('fft.' .. op, o, {[key] = true, dim = true, norm = true})
  local size, dim, norm = a, b, c
  for k, v in pairs({size = o[key], dim = o.dim, norm = o.norm}) do
    local cur = ({size = size, dim = dim, norm = norm})[k]
    if cur ~= nil then
      error(('fft.%s: %s given both as an argument and as an option'):format(op, k == 'size' and key or k), 3)
    end
    if k == 'size' then size = v elseif k == 'dim' then dim = v else norm = v end
  end
  return size, dim, norm
end

-- 1-based dims (numbers or a list) -> sorted-as-given list of 1-based positives
local function norm_dims(op, x, dim, default)
  local nd = x:dim()
  if dim == nil then dim = default end
  if type(dim) == 'number' then dim = {dim} end
  if type(dim) ~= 'table' then
    error(('fft.%s: dim must be a number or a list of numbers, got %s'):format(op, type(dim)), 4)
  end
  local out, seen = {}, {}
  for i, v in ipairs(dim) do
    if type(v) ~= 'number' or v % 1 ~= 0 or v == 0 or v > nd or v < -nd then
      error(('fft.%s: dim %s is out of range for a %d-D tensor of shape %s (1..%d or -%d..-1)')
        :format(op, tostring(v), nd, A.shape_str(x), nd, nd), 4)
    end
    local d = v < 0 and v + nd + 1 or v
    if seen[d] then error(('fft.%s: dim %d repeated'):format(op, d), 4) end
    seen[d], out[i] = true, d
  end
  return out
end

local function dims_c(dims)
  local a = ffi.new('int32_t[?]', #dims)
  for i, d in ipairs(dims) do a[i - 1] = d - 1 end
  return a
end

-- the dims and sizes of an n-D transform (torch's canonicalize_fft_shape_and_dim_args)
local function plan_nd(op, x, s, dim, two)
  local dims
  if two and dim == nil then dim = {-2, -1} end
  if s ~= nil and type(s) ~= 'table' then
    error(('fft.%s: s must be a list of sizes, got %s'):format(op, type(s)), 4)
  end
  if dim == nil then
    if s then
      dims = {}
      for i = 1, #s do dims[i] = x:dim() - #s + i end
      if #s > x:dim() then
        error(('fft.%s: s has %d sizes for a %d-D input'):format(op, #s, x:dim()), 4)
      end
    else
      dims = {}
      for i = 1, x:dim() do dims[i] = i end
    end
  else
    dims = norm_dims(op, x, dim)
  end
  if s and #s ~= #dims then
    error(('fft.%s: s and dim must have the same length, got %d and %d'):format(op, #s, #dims), 4)
  end
  if #dims == 0 then error(('fft.%s: no dims to transform (input shape %s)'):format(op, A.shape_str(x)), 4) end
  local sizes = {}
  for i = 1, #dims do
    local v = s and s[i] or -1
    if type(v) ~= 'number' or v % 1 ~= 0 or (v < 1 and v ~= -1) then
      error(('fft.%s: invalid number of data points (%s) specified'):format(op, tostring(v)), 4)
    end
    if v ~= -1 then sizes[i] = v end
  end
  return dims, sizes
end

local function check_n(op, n)
  if n ~= nil and (type(n) ~= 'number' or n % 1 ~= 0 or n < 1) then
    error(('fft.%s: invalid number of data points (%s) specified'):format(op, tostring(n)), 4)
  end
end

local function c2c(op, x, dims, sizes, norm, forward)
  x = to_complex(x)
  for i, d in ipairs(dims) do if sizes[i] then x = resize(x, d, sizes[i]) end end
  return T.call1(C.of_fft_c2c, x.p, dims_c(dims), #dims, forward and 1 or 0,
                 norm_mode(op, norm, forward), out1)
end
local function r2c(op, x, dims, sizes, mode)
  x = to_real(op, x)
  for i, d in ipairs(dims) do if sizes[i] then x = resize(x, d, sizes[i]) end end
  return T.call1(C.of_fft_r2c, x.p, dims_c(dims), #dims, mode, out1)
end
local function c2r(op, x, dims, sizes, mode, conj)
  x = to_complex(x)
  if conj then x = x:conj() end
  local last = dims[#dims]
  local n = sizes[#dims] or 2 * (x:size(last) - 1)
  if n < 1 then
    error(('fft.%s: invalid number of data points (%d) specified'):format(op, n), 3)
  end
  for i, d in ipairs(dims) do
    if i < #dims and sizes[i] then x = resize(x, d, sizes[i]) end
  end
  x = resize(x, last, math.floor(n / 2) + 1)
  return T.call1(C.of_fft_c2r, x.p, dims_c(dims), #dims, mode, n, out1)
end

local one_d = {
  fft = function(x, d, n, norm) return c2c('fft', x, {d}, {n}, norm, true) end,
  ifft = function(x, d, n, norm) return c2c('ifft', x, {d}, {n}, norm, false) end,
  rfft = function(x, d, n, norm) return r2c('rfft', x, {d}, {n}, norm_mode('rfft', norm, true)) end,
  irfft = function(x, d, n, norm) return c2r('irfft', x, {d}, {n}, norm_mode('irfft', norm, false)) end,
  hfft = function(x, d, n, norm) return c2r('hfft', x, {d}, {n}, norm_mode('hfft', norm, true), true) end,
  ihfft = function(x, d, n, norm)
    return r2c('ihfft', x, {d}, {n}, norm_mode('ihfft', norm, false)):conj()
  end,
}
for name, fn in pairs(one_d) do
  M[name] = function(x, n, dim, norm, o)
    n, dim, norm = args(name, x, false, n, dim, norm, o)
    check_n(name, n)
    if type(dim) == 'table' then
      error(('fft.%s: dim must be one dim (a number), got a table; use fft.%sn for several')
        :format(name, name), 2)
    end
    local d = norm_dims(name, x, dim or -1)[1]
    return fn(x, d, n, norm)
  end
end

local n_d = {
  fftn = function(x, dims, sizes, norm) return c2c('fftn', x, dims, sizes, norm, true) end,
  ifftn = function(x, dims, sizes, norm) return c2c('ifftn', x, dims, sizes, norm, false) end,
  rfftn = function(x, dims, sizes, norm)
    return r2c('rfftn', x, dims, sizes, norm_mode('rfftn', norm, true))
  end,
  irfftn = function(x, dims, sizes, norm)
    return c2r('irfftn', x, dims, sizes, norm_mode('irfftn', norm, false))
  end,
}
for name, fn in pairs(n_d) do
  local two = name:sub(1, -2) .. '2'
  M[name] = function(x, s, dim, norm, o)
    s, dim, norm = args(name, x, true, s, dim, norm, o)
    local dims, sizes = plan_nd(name, x, s, dim, false)
    return fn(x, dims, sizes, norm)
  end
  M[two] = function(x, s, dim, norm, o)
    s, dim, norm = args(two, x, true, s, dim, norm, o)
    local dims, sizes = plan_nd(two, x, s, dim, true)
    return fn(x, dims, sizes, norm)
  end
end

return M
