-- oneflow.quantization.qtensor: quantized tensors (flow.qint8, flow.quint8,
-- flow.qint32, flow.quint4x2), as PyTorch's:
--   q = flow.quantize_per_tensor(x, scale, zero_point, flow.quint8)
--   q = flow.quantize_per_channel(x, scales, zero_points, axis, flow.qint8)
--   q:dequantize(), q:int_repr(), q:q_scale(), q:q_zero_point(),
--   q:q_per_channel_scales(), q:q_per_channel_zero_points(),
--   q:q_per_channel_axis() (1-based), q:qscheme(), q.dtype, q:size() ...
-- A quantized tensor holds its integers in a plain tensor (uint8, int8 or
-- int32: int_repr) plus the parameters: value = (int - zero_point) * scale.
-- Quantizing rounds half to even and saturates at the dtype's range:
--   q = clamp(rint(x * (1 / scale)) + zero_point, qmin, qmax)
-- (PyTorch's quantize_val, with the reciprocal taken in float32).
-- Views that keep the per-tensor parameters (view, reshape, flatten,
-- contiguous, clone, squeeze/unsqueeze, narrow/select along other dims) work
-- on the integers; any other op refuses a quantized tensor with an error
-- naming the op. flow.save/flow.load keep the parameters (safetensors: the
-- integers are an entry, the parameters the structure metadata).
local ffi = require 'ffi'
local flow = require 'oneflow'
local A = require 'oneflow._args'
local core = require 'oneflow._C'
local class = require 'oneflow.class'
local T = require 'oneflow.tensor'

local M = {}

------------------------------------------------------------------ dtypes
local QDType = A.value_type({})
QDType.__index = QDType
QDType.__tostring = function(d) return 'oneflow.' .. d.name end
local function qdtype(name, storage, lo, hi, bits)
  return setmetatable({name = name, storage = storage, qmin = lo, qmax = hi, is_quantized = true,
                       is_floating_point = false, itemsize = storage.itemsize, bits = bits}, QDType)
end
M.qint8 = qdtype('qint8', flow.int8, -128, 127, 8)
M.quint8 = qdtype('quint8', flow.uint8, 0, 255, 8)
M.qint32 = qdtype('qint32', flow.int32, -2147483648, 2147483647, 32)
-- two 4-bit values a byte where stored (int_repr, files, embedding tables);
-- a quint4x2 tensor in memory holds its values one a byte (0..15) so that
-- views and dequantize() are quint8's
M.quint4x2 = qdtype('quint4x2', flow.uint8, 0, 15, 4)
M.by_name = {qint8 = M.qint8, quint8 = M.quint8, qint32 = M.qint32, quint4x2 = M.quint4x2}
function M.is_qdtype(d) return getmetatable(d) == QDType end

--- The quantized dtype of d (a qdtype or its name), or an error naming op.
function M.qdtype(op, d)
  if M.is_qdtype(d) then return d end
  local r = type(d) == 'string' and M.by_name[d:gsub('^oneflow%.', '')]
  if not r then
    A.fail(('%s: dtype must be flow.qint8, flow.quint8, flow.qint32 or flow.quint4x2, got %s'):format(
      op, tostring(d)))
  end
  return r
end
-- the quantized dtype whose integers are stored as dt
local of_storage = {int8 = M.qint8, uint8 = M.quint8, int32 = M.qint32}

------------------------------------------------------------------ the class
local QTensor = class('QTensor')
M.QTensor = QTensor
local methods = {}

local function f32(v) return tonumber(ffi.new('float', v)) end

-- validated per-tensor parameters
local function check_scalar_params(op, scale, zp, dt)
  if type(scale) ~= 'number' or scale ~= scale or scale <= 0 or scale == math.huge then
    A.fail(('%s: scale must be a positive finite number, got %s'):format(op, tostring(scale)))
  end
  if type(zp) ~= 'number' or zp ~= math.floor(zp) or zp < dt.qmin or zp > dt.qmax then
    A.fail(('%s: zero_point must be an integer in [%d, %d] for %s, got %s'):format(
      op, dt.qmin, dt.qmax, dt.name, tostring(zp)))
  end
end

local function new(int, dt, params)
  local q = setmetatable({_int = int, dtype = dt}, QTensor)
  for k, v in pairs(params) do q[k] = v end
  return q
end

--- A quantized tensor from its integers and per-tensor parameters (no rounding).
function M.from_int_repr(int, scale, zero_point, dt)
  dt = dt or of_storage[int.dtype.name]
  if not dt or dt.storage ~= int.dtype then
    A.fail(('_make_per_tensor_quantized_tensor: integers must be int8, uint8 or int32 and match '
      .. 'the dtype, got %s'):format(int.dtype.name))
  end
  check_scalar_params('_make_per_tensor_quantized_tensor', scale, zero_point, dt)
  return new(int, dt, {_qscheme = 'per_tensor_affine', _scale = scale, _zp = zero_point})
end

--- The per-channel counterpart (scales float64 [C], zero_points int64 [C], axis 1-based).
function M.from_int_repr_per_channel(int, scales, zero_points, axis, dt)
  dt = dt or of_storage[int.dtype.name]
  return new(int, dt, {_qscheme = 'per_channel_affine', _scales = scales:to(flow.float64),
                       _zps = zero_points:to(flow.int64), _axis = axis})
end

-- x's values rounded and clamped into dt's integers; inv and zp broadcast
local function quantize_values(x, inv, zp, dt)
  local y = (x:to(flow.float32) * inv):round() + zp
  return y:clamp(dt.qmin, dt.qmax):to(dt.storage)
end

--- flow.quantize_per_tensor(x, scale, zero_point, dtype)
function M.quantize_per_tensor(x, scale, zero_point, dtype)
  local op = 'quantize_per_tensor'
  A.check_tensor(op, x)
  if x.dtype ~= flow.float32 and x.dtype ~= flow.float64 and x.dtype ~= flow.float16
     and x.dtype ~= flow.bfloat16 then
    A.fail(('%s: input must be floating point, got %s'):format(op, x.dtype.name))
  end
  local dt = M.qdtype(op, dtype)
  if flow.is_tensor(scale) then scale = scale:item() end
  if flow.is_tensor(zero_point) then zero_point = zero_point:item() end
  check_scalar_params(op, scale, zero_point, dt)
  local int
  -- (the ONNX tracer records tensor ops: while it runs, the op by op form)
  local tracer = package.loaded['oneflow.onnx.tracer']
  if x.dtype == flow.float32 and dt.bits == 8 and not x.is_cuda and not (tracer and tracer.active()) then
    -- one pass in C (core/ops/quant.c), the same values as quantize_values
    if core.C.of_quantize_per_tensor(x.p, scale, zero_point, dt.storage.id, core.out1) ~= 0 then A.raise_c() end
    int = core.wrap(core.out1[0])
  else
    int = quantize_values(x, f32(1 / f32(scale)), zero_point, dt)
  end
  return new(int, dt, {_qscheme = 'per_tensor_affine', _scale = scale, _zp = zero_point})
end

-- shape that puts C values along axis (1-based) of an nd-tensor
local function along(nd, axis, c)
  local s = {}
  for d = 1, nd do s[d] = d == axis and c or 1 end
  return s
end

-- per_channel_affine_float_qparams (PyTorch's scheme for embedding tables):
-- float32 scales and float zero points, q = clamp(rint(x * (1 / scale) +
-- zero_point)), value = (q - zero_point) * scale, all in float32 as ATen's
local function quantize_float_qparams(op, x, scales, zero_points, axis, dt)
  if dt ~= M.quint8 and dt ~= M.quint4x2 then
    A.fail(('%s: float zero points (per_channel_affine_float_qparams) need flow.quint8 or flow.quint4x2, '
      .. 'got %s'):format(op, dt.name))
  end
  local z = zero_points:to(flow.float32)
  if not z:isfinite():all():item() then A.fail(op .. ': zero_points must be finite') end
  local sh = along(x:dim(), axis, scales:numel())
  local s = scales:to(flow.float32)
  local y = (x:to(flow.float32) * (1 / s):view(sh) + z:view(sh)):round()
  return new(y:clamp(dt.qmin, dt.qmax):to(dt.storage), dt, {_qscheme = 'per_channel_affine_float_qparams',
                                                          _scales = s, _zps = z, _axis = axis})
end

M.quantize_float_qparams = quantize_float_qparams
--- A float-qparams quantized tensor from its integers (no rounding): scales
-- and zero points float32 [C] along axis (1-based).
function M.quantize_float_qparams_from_int(int, dt, scales, zero_points, axis)
  return new(int, dt, {_qscheme = 'per_channel_affine_float_qparams', _scales = scales, _zps = zero_points,
                       _axis = axis})
end

--- flow.quantize_per_channel(x, scales, zero_points, axis, dtype); axis 1-based.
-- Integer zero points give per_channel_affine; zero points that are not
-- integers in the dtype's range (float ones, with flow.quint8) give
-- per_channel_affine_float_qparams, as PyTorch's float zero points do. (A
-- Lua list of whole numbers makes a float32 tensor: those stay integers.)
function M.quantize_per_channel(x, scales, zero_points, axis, dtype)
  local op = 'quantize_per_channel'
  A.check_tensor(op, x)
  A.check_tensor(op, scales, 'scales', 2)
  A.check_tensor(op, zero_points, 'zero_points', 3)
  local dt = M.qdtype(op, dtype)
  local nd = x:dim()
  if type(axis) ~= 'number' or axis == 0 or axis > nd or axis < -nd then
    A.fail(('%s: axis must be a dim of the %d-d input (1-based), got %s'):format(op, nd, tostring(axis)))
  end
  if axis < 0 then axis = nd + axis + 1 end
  local c = x:size(axis)
  if scales:numel() ~= c or zero_points:numel() ~= c then
    A.fail(('%s: %d scales and %d zero points for %d channels along axis %d'):format(
      op, scales:numel(), zero_points:numel(), c, axis))
  end
  if scales:le(0):any():item() or not scales:isfinite():all():item() then
    A.fail(op .. ': scales must be positive and finite')
  end
  if zero_points.dtype.is_floating_point and zero_points:numel() > 0
     and (zero_points:ne(zero_points:round()):any():item() or zero_points:lt(dt.qmin):any():item()
          or zero_points:gt(dt.qmax):any():item()) then
    return quantize_float_qparams(op, x, scales, zero_points, axis, dt)
  end
  local z = zero_points:to(flow.int64)
  if z:lt(dt.qmin):any():item() or z:gt(dt.qmax):any():item() then
    A.fail(('%s: zero_points must lie in [%d, %d] for %s'):format(op, dt.qmin, dt.qmax, dt.name))
  end
  local sh = along(nd, axis, c)
  local inv = (1 / scales:to(flow.float32)):view(sh)
  local int = quantize_values(x, inv, z:to(flow.float32):view(sh), dt)
  return new(int, dt, {_qscheme = 'per_channel_affine', _scales = scales:to(flow.float64),
                       _zps = z, _axis = axis})
end

--- q:dequantize() -> float32 tensor: (int - zero_point) * scale.
function methods.dequantize(q)
  if q._qscheme == 'per_tensor_affine' then
    return (q._int:to(flow.float32) - q._zp) * f32(q._scale)
  end
  local sh = along(q._int:dim(), q._axis, q._scales:numel())
  return (q._int:to(flow.float32) - q._zps:to(flow.float32):view(sh))
         * q._scales:to(flow.float32):view(sh)
end
local PER_CHANNEL = {per_channel_affine = true, per_channel_affine_float_qparams = true}

--- The values of a quint4x2 tensor (uint8, 0..15) packed two a byte in
-- row-major order, the first in the low nibble (PyTorch's int_repr): a flat
-- uint8 tensor of ceil(numel / 2) bytes.
function M.pack4(int)
  local v = int:contiguous():view(-1)
  if v:numel() % 2 == 1 then v = flow.cat({v, flow.zeros(1, {dtype = flow.uint8})}) end
  local pairs2 = v:view(-1, 2)
  return pairs2:select(2, 1) + pairs2:select(2, 2) * 16
end
--- pack4's inverse: bytes (uint8, ceil(n / 2) of them, any shape) -> the
-- first n values as uint8 0..15 in shape
function M.unpack4(bytes, shape)
  local b = bytes:contiguous():view(-1)
  local lo, hi = flow.bitwise_and(b, 15), b:div(16, {rounding_mode = 'floor'})
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return flow.stack({lo, hi}, 2):view(-1):narrow(1, 1, n):view(shape)
end

-- a copy in the integers' layout, as PyTorch's (a quantized convolution's
-- channels-last output gives channels-last integers; quint4x2 packed)
function methods.int_repr(q)
  local r = q._int
  if q.dtype == M.quint4x2 then return M.pack4(r) end
  if r:dim() == 4 and not r:is_contiguous() and r:is_contiguous({memory_format = flow.channels_last}) then
    return r:permute(1, 3, 4, 2):clone():permute(1, 4, 2, 3)
  end
  return r:clone()
end
function methods.qscheme(q) return q._qscheme end
--- x:is_quantized(): true for a quantized tensor (flow.quantize_per_tensor / per_channel).
function methods.is_quantized() return true end

local function per_tensor_only(q, op)
  if q._qscheme ~= 'per_tensor_affine' then
    A.fail(('%s: the tensor is quantized %s; use q_per_channel_scales/zero_points'):format(op, q._qscheme))
  end
end
local function per_channel_only(q, op)
  if not PER_CHANNEL[q._qscheme] then
    A.fail(('%s: the tensor is quantized %s, not per channel'):format(op, q._qscheme))
  end
end
function methods.q_scale(q) per_tensor_only(q, 'q_scale'); return q._scale end
function methods.q_zero_point(q) per_tensor_only(q, 'q_zero_point'); return q._zp end
function methods.q_per_channel_scales(q) per_channel_only(q, 'q_per_channel_scales'); return q._scales:clone() end
function methods.q_per_channel_zero_points(q)
  per_channel_only(q, 'q_per_channel_zero_points'); return q._zps:clone()
end
function methods.q_per_channel_axis(q) per_channel_only(q, 'q_per_channel_axis'); return q._axis end

function methods.size(q, d) return q._int:size(d) end
function methods.dim(q) return q._int:dim() end
function methods.numel(q) return q._int:numel() end
function methods.element_size(q) return q._int:element_size() end
function methods.is_contiguous(q) return q._int:is_contiguous() end

-- q with new integers and the same parameters
local function same_params(q, int)
  return new(int, q.dtype, {_qscheme = q._qscheme, _scale = q._scale, _zp = q._zp,
                            _scales = q._scales, _zps = q._zps, _axis = q._axis})
end
function methods.clone(q) return same_params(q, q._int:clone()) end
function methods.contiguous(q) return same_params(q, q._int:contiguous()) end
function methods.detach(q) return q end
-- shape ops that move elements between channels need per-tensor parameters
for _, name in ipairs({'view', 'reshape', 'flatten', 'squeeze', 'unsqueeze', 'permute', 'transpose',
                       'narrow', 'select', 'expand', 't'}) do
  methods[name] = function(q, ...)
    per_tensor_only(q, name)
    return same_params(q, q._int[name](q._int, ...))
  end
end
function methods.to(q, what)
  if what == 'cpu' or (type(what) == 'table' and tostring(what) == 'cpu') then return q end
  A.fail('to: quantized tensors live on the CPU; dequantize() first to change dtype or device')
end

local getters = {
  shape = function(q) return q._int:size() end,
  ndim = function(q) return q._int:dim() end,
  device = function(q) return q._int.device end,
  is_quantized = function() return true end,
  requires_grad = function() return false end,
  grad = function() return nil end,
}

-- The op a quantized tensor was handed to, from the caller's call site.
local function refuse(op, q)
  A.fail(('%s: quantized tensors (%s) are not supported by this op; dequantize() first or use '
    .. 'the quantized module (flow.quantization.convert)'):format(op or 'this op', q.dtype.name))
end
M.refuse = refuse

-- ONNX export traces a quantized tensor as its integers (oneflow.onnx.quantized)
QTensor.__onnx_tensor = function(q) return q._int end

function QTensor.__index(q, k)
  local m = methods[k]
  if m then return m end
  local g = getters[k]
  if g then return g(q) end
  if k == 'p' then
    -- a C binding reached for the handle: name the function the user called
    local info = debug.getinfo(2, 'n')
    refuse(info and info.name, q)
  end
  if type(k) == 'string' and T.methods[k] then
    return function() refuse(k, q) end
  end
  return nil
end

for mm, op in pairs({__add = 'add', __sub = 'sub', __mul = 'mul', __div = 'div', __pow = 'pow',
                     __unm = 'neg', __mod = 'fmod', __lt = 'lt', __le = 'le'}) do
  QTensor[mm] = function(a, b) refuse(op, getmetatable(a) == QTensor and a or b) end
end

function QTensor.__tostring(q)
  local s = tostring(q:dequantize()):gsub('%)%s*$', '')
  local head = s:find(', dtype=') or (#s + 1)
  s = s:sub(1, head - 1)
  local extra
  if q._qscheme == 'per_tensor_affine' then
    extra = ('quantization_scheme=per_tensor_affine, scale=%.10g, zero_point=%d'):format(q._scale, q._zp)
  else
    extra = ('quantization_scheme=%s,\n       scale=%s,\n       zero_point=%s, axis=%d')
      :format(q._qscheme, tostring(q._scales):gsub('\n%s*', ' '), tostring(q._zps):gsub('\n%s*', ' '), q._axis)
  end
  return ('%s, size=(%s), dtype=%s,\n       %s)'):format(s, table.concat(q._int:size():totable(), ', '),
                                                       tostring(q.dtype), extra)
end

function M.is_quantized(v) return getmetatable(v) == QTensor end
A.quantized_describe = function(v)
  if getmetatable(v) == QTensor then return 'a quantized tensor (' .. v.dtype.name .. ')' end
end

------------------------------------------------------------------ saving
-- flow.save writes a quantized tensor as its integers (a safetensors entry)
-- plus a structure node {"qtensor": {...}} with its parameters; flow.load
-- checks them (dtype, scheme, scale > 0, zero points in range, per-channel
-- lengths) before rebuilding.
local serialization = require 'oneflow.serialization'
serialization.codecs.qtensor = {
  is = M.is_quantized,
  encode = function(q, tensor_node)
    -- quint4x2: packed two a byte, with the shape they unpack to
    local four = q.dtype == M.quint4x2
    local n = {dtype = q.dtype.name, qscheme = q._qscheme,
               int = tensor_node(four and M.pack4(q._int) or q._int, 'int_repr'),
               shape = four and q._int:size():totable() or nil}
    if q._qscheme == 'per_tensor_affine' then
      n.scale, n.zero_point = q._scale, q._zp
    else
      n.scales, n.zero_points, n.axis = tensor_node(q._scales, 'scales'),
        tensor_node(q._zps, 'zero_points'), q._axis
    end
    return n
  end,
  decode = function(n, tensor_of, bad)
    local dt = M.by_name[n.dtype]
    if not dt then bad('qtensor dtype ' .. tostring(n.dtype)) end
    local int = tensor_of(n.int)
    if int.dtype ~= dt.storage then bad(('qtensor integers are %s, not %s'):format(int.dtype.name, dt.storage.name)) end
    if dt == M.quint4x2 then
      local shape, count = n.shape, 1
      if type(shape) ~= 'table' or #shape > 8 then bad('qtensor quint4x2 needs its shape') end
      for i = 1, #shape do
        local d = shape[i]
        if type(d) ~= 'number' or d ~= math.floor(d) or d < 0 or d > 2 ^ 40 then bad('qtensor quint4x2 shape') end
        count = count * d
      end
      if int:dim() ~= 1 or int:numel() ~= math.ceil(count / 2) then
        bad(('qtensor quint4x2: %d bytes for %d values'):format(int:numel(), count))
      end
      int = M.unpack4(int, shape)
    end
    if n.qscheme == 'per_tensor_affine' then
      if type(n.scale) ~= 'number' or n.scale ~= n.scale or n.scale <= 0 or n.scale == math.huge
         or type(n.zero_point) ~= 'number' or n.zero_point ~= math.floor(n.zero_point)
         or n.zero_point < dt.qmin or n.zero_point > dt.qmax then
        bad('qtensor scale/zero_point out of range')
      end
      return new(int, dt, {_qscheme = 'per_tensor_affine', _scale = n.scale, _zp = n.zero_point})
    elseif n.qscheme == 'per_channel_affine' then
      local s, z, axis = tensor_of(n.scales), tensor_of(n.zero_points), n.axis
      if type(axis) ~= 'number' or axis ~= math.floor(axis) or axis < 1 or axis > int:dim()
         or s:numel() ~= int:size(axis) or z:numel() ~= int:size(axis)
         or s.dtype ~= flow.float64 or z.dtype ~= flow.int64 then
        bad('qtensor per-channel parameters do not fit the integers')
      end
      if s:le(0):any():item() or not s:isfinite():all():item()
         or z:lt(dt.qmin):any():item() or z:gt(dt.qmax):any():item() then
        bad('qtensor per-channel scales/zero_points out of range')
      end
      return new(int, dt, {_qscheme = 'per_channel_affine', _scales = s, _zps = z, _axis = axis})
    elseif n.qscheme == 'per_channel_affine_float_qparams' then
      local s, z, axis = tensor_of(n.scales), tensor_of(n.zero_points), n.axis
      if (dt ~= M.quint8 and dt ~= M.quint4x2) or type(axis) ~= 'number' or axis ~= math.floor(axis)
         or axis < 1 or axis > int:dim()
         or s:numel() ~= int:size(axis) or z:numel() ~= int:size(axis)
         or s.dtype ~= flow.float32 or z.dtype ~= flow.float32 then
        bad('qtensor float-qparams parameters do not fit the integers')
      end
      if s:le(0):any():item() or not s:isfinite():all():item() or not z:isfinite():all():item() then
        bad('qtensor per-channel scales/zero_points out of range')
      end
      return new(int, dt, {_qscheme = n.qscheme, _scales = s, _zps = z, _axis = axis})
    end
    bad('qtensor scheme ' .. tostring(n.qscheme))
  end,
}

return M
