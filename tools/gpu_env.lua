-- tools/gpu_env.lua [JSON_OUT] -- the environment report that opens
-- tools/device_check.sh: is CUDA usable and, if not, why (flow.cuda's
-- why_unavailable), the CUDA runtime of liboneflow_cuda against the driver,
-- cuBLAS, cuDNN (and the CUDA runtime cuDNN was built for, which must have
-- the same major version), NCCL, and the file each library was loaded from.
-- Prints one "key: value" line each; with JSON_OUT also writes them as JSON.
local ffi = require 'ffi'
local flow = require 'oneflow'

local out_path = arg and arg[1]
local rows, keys = {}, {}
local function put(k, v)
  if rows[k] == nil then keys[#keys + 1] = k end
  rows[k] = v
  print(('%-22s %s'):format(k .. ':', tostring(v)))
end

local function ver(v)   -- 13000 -> "13.0"
  if not v or v == 0 then return 'none' end
  return ('%d.%d'):format(math.floor(v / 1000), math.floor(v % 1000 / 10))
end

-- the file a loaded library came from (/proc/self/maps)
local function loaded_from(name)
  local f = io.open('/proc/self/maps')
  if not f then return nil end
  for line in f:lines() do
    local path = line:match('(/%S*' .. name:gsub('%.', '%%.') .. '[%w.]*)$')
    if path then
      f:close()
      return path
    end
  end
  f:close()
  return nil
end

ffi.cdef [[
void of_cuda_versions(int32_t *out);
int cuDriverGetVersion(int *v);
int cublasGetProperty(int type, int *value);
size_t cudnnGetVersion(void);
size_t cudnnGetCudartVersion(void);
int ncclGetVersion(int *v);
]]

put('cuda built', flow.cuda.is_built())
local avail = flow.cuda.is_available()
put('cuda available', avail)
put('why unavailable', avail and '' or flow.cuda.why_unavailable())
put('devices', avail and flow.cuda.device_count() or 0)
put('kit torch libs', os.getenv('OF_KIT_TORCH_LIBS') or '')

local okd, cu = pcall(ffi.load, 'libcuda.so.1')
if okd then
  local v = ffi.new('int[1]')
  put('driver cuda version', cu.cuDriverGetVersion(v) == 0 and ver(v[0]) or 'error')
  put('libcuda', loaded_from('libcuda.so') or 'loaded')
else
  put('driver cuda version', 'none')
  put('libcuda', 'cannot load: ' .. tostring(cu))
end

-- the loaded one, else the one next to liboneflow (a failed initialisation
-- unloads it; its runtime version is still worth printing)
local function beside_liboneflow()
  local lib = os.getenv('OF_LIBRARY') or loaded_from('liboneflow.so')
  local path = lib and lib:gsub('[^/]*$', '') .. 'liboneflow_cuda.so'
  local f = path and io.open(path)
  if f then f:close() end
  return f and path or nil
end
local cudalib = flow.cuda.is_built() and (loaded_from('liboneflow_cuda.so') or beside_liboneflow())
put('liboneflow_cuda', cudalib or 'not built')
if cudalib then
  local ok, L = pcall(ffi.load, cudalib)
  local v = ffi.new('int32_t[3]')
  if ok then ok = pcall(function() L.of_cuda_versions(v) end) end
  if not ok then
    put('runtime built for', 'unknown (a liboneflow_cuda without of_cuda_versions)')
  else
    put('runtime built for', ver(v[0]))
    put('runtime version', ver(v[1]))
    put('driver (runtime)', ver(v[2]))
    if v[2] ~= 0 and v[2] < v[0] then
      put('problem', ('the driver supports CUDA %s, liboneflow_cuda needs %s: update the driver'):
          format(ver(v[2]), ver(v[0])))
    end
  end
end

local function try_lib(key, soname, fn)
  local ok, lib = pcall(ffi.load, soname)
  if not ok then
    put(key, 'cannot load ' .. soname .. ': ' .. tostring(lib))
    return
  end
  fn(lib)
  put(key .. ' file', loaded_from(soname) or soname)
end

try_lib('cublas', 'libcublas.so.13', function(B)
  local a, b, c = ffi.new('int[1]'), ffi.new('int[1]'), ffi.new('int[1]')
  B.cublasGetProperty(0, a)
  B.cublasGetProperty(1, b)
  B.cublasGetProperty(2, c)
  put('cublas', ('%d.%d.%d'):format(a[0], b[0], c[0]))
end)

-- cuDNN through our library first (the checks of cuda/dnn.cu), then its own
-- versions
put('cudnn (flow)', avail and flow.backends.cudnn.version() or 0)
put('cudnn why unavailable', avail and flow.backends.cudnn.why_unavailable() or 'no GPU')
try_lib('cudnn', 'libcudnn.so.9', function(D)
  local v, rt = tonumber(D.cudnnGetVersion()), tonumber(D.cudnnGetCudartVersion())
  put('cudnn', ('%d.%d.%d'):format(math.floor(v / 10000), math.floor(v / 100) % 100, v % 100))
  put('cudnn built for cuda', ver(rt))
  local built = tostring(rows['runtime built for'] or ''):match('^(%d+)%.')
  if built and math.floor(rt / 1000) ~= tonumber(built) then
    put('problem', ('cuDNN was built for CUDA %s, liboneflow_cuda for %s'):format(ver(rt),
        rows['runtime built for']))
  end
end)

try_lib('nccl', 'libnccl.so.2', function(N)
  local v = ffi.new('int[1]')
  N.ncclGetVersion(v)
  put('nccl', ('%d.%d.%d'):format(math.floor(v[0] / 10000), math.floor(v[0] / 100) % 100, v[0] % 100))
end)

if avail then
  local ok, err = pcall(function()
    local x = flow.ones(1024, {device = 'cuda'})
    put('smoke (sum of 1024 ones on cuda)', (x * 2):sum():item())
  end)
  if not ok then put('smoke', 'failed: ' .. tostring(err)) end
end

local function json_str(v)
  return '"' .. v:gsub('[%c"\\]', function(c)
    return c == '"' and '\\"' or c == '\\' and '\\\\' or ('\\u%04x'):format(c:byte())
  end) .. '"'
end

if out_path then
  local parts = {}
  for _, k in ipairs(keys) do
    local v = rows[k]
    parts[#parts + 1] = json_str(k) .. ': ' .. (type(v) == 'string' and json_str(v) or tostring(v))
  end
  local f = assert(io.open(out_path .. '.tmp', 'w'))
  f:write('{', table.concat(parts, ', '), '}\n')
  f:close()
  assert(os.rename(out_path .. '.tmp', out_path))
end
