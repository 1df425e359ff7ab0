-- oneflow.types: dtype and device objects and flow.Size.
local ffi = require 'ffi'
local C = require('oneflow._C').C

local M = {}

------------------------------------------------------------------ dtypes
local DType = require('oneflow._args').value_type({})
DType.__index = DType
DType.__tostring = function(d) return 'oneflow.' .. d.name end

M.dtypes = {}      -- by C id
M.by_name = {}
for id = 0, C.OF_NUM_DTYPES - 1 do
  local name = ffi.string(C.of_dtype_name(id))
  local d = setmetatable({
    id = id, name = name, itemsize = C.of_dtype_size(id),
    is_floating_point = C.of_dtype_is_floating(id) ~= 0,
    ctype = ({bool = 'bool', uint8 = 'uint8_t', int8 = 'int8_t', int32 = 'int32_t',
              int64 = 'int64_t', float16 = 'uint16_t', bfloat16 = 'uint16_t',
              float32 = 'float', float64 = 'double', int16 = 'int16_t', uint16 = 'uint16_t',
              uint32 = 'uint32_t', uint64 = 'uint64_t', complex64 = 'float', complex128 = 'double'})[name],
    is_complex = C.of_dtype_is_complex(id) ~= 0,
  }, DType)
  M.dtypes[id] = d
  M.by_name[name] = d
end
local aliases = {float = 'float32', double = 'float64', half = 'float16', long = 'int64',
                 int = 'int32', char = 'int8', byte = 'uint8', short = 'int16',
                 cfloat = 'complex64', cdouble = 'complex128'}
for alias, name in pairs(aliases) do M.by_name[alias] = M.by_name[name] end

--- A dtype from a dtype object or its name ('float32', 'float', ...).
function M.dtype(d, level)
  if getmetatable(d) == DType then return d end
  local r = type(d) == 'string' and M.by_name[d:gsub('^oneflow%.', '')]
  if not r then error('unknown dtype ' .. tostring(d), (type(level) == 'number' and level or 1) + 1) end
  return r
end
M.DType = DType

------------------------------------------------------------------ devices
local Device = require('oneflow._args').value_type({})
Device.__index = Device
Device.__tostring = function(d)
  return d.index and (d.type .. ':' .. d.index) or d.type
end
Device.__eq = function(a, b) return a.type == b.type and (a.index or 0) == (b.index or 0) end
local device_cache = {}

--- flow.device('cpu'), flow.device('cuda:1'), flow.device('cuda', 1).
function M.device(spec, index)
  if getmetatable(spec) == Device then return spec end
  if type(spec) ~= 'string' then error('device: expected a string like "cpu" or "cuda:0", got '
    .. tostring(spec), 2) end
  local typ, idx = spec:match('^(%a+):?(%d*)$')
  if typ ~= 'cpu' and typ ~= 'cuda' then error('device: unknown device "' .. spec .. '"', 2) end
  idx = tonumber(idx) or index
  local key = typ .. ':' .. tostring(idx)
  local d = device_cache[key]
  if not d then
    d = setmetatable({type = typ, index = idx}, Device)
    device_cache[key] = d
  end
  return d
end
M.Device = Device

-- 'cuda' without an index is the current CUDA device (asking loads the
-- CUDA library; -1 without CUDA becomes 0 and the op says why).
function M.device_code(d)
  if d.type == 'cpu' then return C.OF_CPU end
  local idx = d.index
  if idx == nil then idx = math.max(C.of_cuda_current_device(), 0) end
  return C.OF_CUDA + idx * 256
end

function M.device_of_code(code)
  if code == 0 then return M.device('cpu') end
  return M.device('cuda', math.floor(code / 256))
end

------------------------------------------------------------------ Size
local Size = require('oneflow._args').value_type({})
Size.__index = Size
Size.__tostring = function(s)
  return 'flow.Size([' .. table.concat(s, ', ') .. '])'
end
Size.__eq = function(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end
function Size:numel()
  local n = 1
  for i = 1, #self do n = n * self[i] end
  return n
end
function Size:totable()
  local t = {}
  for i = 1, #self do t[i] = self[i] end
  return t
end
M.Size = setmetatable(Size, {__call = function(_, t)
  t = require('oneflow._args').arg('Size', 1, 'sizes', t or {}, 'table')
  local s = {}
  for i = 1, #t do s[i] = t[i] end
  return setmetatable(s, Size)
end})
function M.is_size(s) return getmetatable(s) == Size end

return M
