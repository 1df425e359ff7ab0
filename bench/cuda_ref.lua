-- bench/cuda_ref.lua -- the reference side of bench/cuda.lua: cuDNN and
-- cuBLAS called directly through the LuaJIT FFI on tensors made by flow
-- (their device pointers), so our convolution and gemm can be timed side by
-- side with the libraries' own best calls on the same buffers and stream.
local ffi = require 'ffi'
local flow = require 'oneflow'

local C = require('oneflow._C').C
local M = {}

ffi.cdef [[
typedef struct cudnnContext *cudnnHandle_t;
int cudnnCreate(cudnnHandle_t *h);
int cudnnCreateTensorDescriptor(void **d);
int cudnnSetTensor4dDescriptor(void *d, int format, int dtype, int n, int c, int h, int w);
int cudnnCreateFilterDescriptor(void **d);
int cudnnSetFilter4dDescriptor(void *d, int dtype, int format, int k, int c, int h, int w);
int cudnnCreateConvolutionDescriptor(void **d);
int cudnnSetConvolution2dDescriptor(void *d, int ph, int pw, int u, int v, int dh, int dw,
                                    int mode, int compute);
int cudnnSetConvolutionMathType(void *d, int math);
typedef struct { int algo; int status; float time; size_t memory; int determinism;
                 int mathType; int reserved[3]; } ofb_fwd_perf;
int cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t h, void *xd, void *wd, void *cd,
                                         void *yd, int req, int *ret, ofb_fwd_perf *perf);
int cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, void *xd, const void *x,
                            void *wd, const void *w, void *cd, int algo, void *ws,
                            size_t wsn, const void *beta, void *yd, void *y);
const char *cudnnGetErrorString(int s);
typedef struct cublasContext *cublasHandle_t;
int cublasCreate_v2(cublasHandle_t *h);
int cublasGemmEx(cublasHandle_t h, int ta, int tb, int m, int n, int k, const void *alpha,
                 const void *A, int at, int lda, const void *B, int bt, int ldb,
                 const void *beta, void *Cp, int ct, int ldc, int compute, int algo);
]]

local dnn_dt = {float32 = 0, float16 = 2, bfloat16 = 9}
local blas_dt = {float32 = 0, float16 = 2, bfloat16 = 14}

local function ptr(t) return C.of_tensor_data(t.p) end

local dnn, blas, why
local function open()
  if dnn ~= nil or why then return not why end
  local ok, lib = pcall(ffi.load, 'libcudnn.so.9')
  if not ok then why = 'libcudnn: ' .. tostring(lib) return false end
  local ok2, lib2 = pcall(ffi.load, 'libcublas.so.13')
  if not ok2 then why = 'libcublas: ' .. tostring(lib2) return false end
  dnn, blas = lib, lib2
  return true
end

function M.why_unavailable()
  open()
  return why or ''
end

local function ck(s, what)
  if s ~= 0 then error(('%s: cuDNN status %d (%s)'):format(what, s, ffi.string(dnn.cudnnGetErrorString(s))), 2) end
end

local dnn_handle
--- A function running cudnnConvolutionForward with cuDNN's fastest
-- algorithm (cudnnFind) for y = conv2d(x, w) (x, w, y flow tensors, all
-- contiguous or all channels-last), plus the algorithm's index.
function M.conv2d(x, w, y, pad, stride)
  assert(open(), why)
  if not dnn_handle then
    local h = ffi.new('cudnnHandle_t[1]')
    ck(dnn.cudnnCreate(h), 'cudnnCreate')
    dnn_handle = h[0]
  end
  local dt = dnn_dt[x.dtype.name]
  local nhwc = not x:is_contiguous()
  local fmt = nhwc and 1 or 0
  local d = ffi.new('void*[4]')
  local xs, ws, ys = x:size(), w:size(), y:size()
  ck(dnn.cudnnCreateTensorDescriptor(d + 0), 'desc')
  ck(dnn.cudnnSetTensor4dDescriptor(d[0], fmt, dt, xs[1], xs[2], xs[3], xs[4]), 'x desc')
  ck(dnn.cudnnCreateFilterDescriptor(d + 1), 'desc')
  ck(dnn.cudnnSetFilter4dDescriptor(d[1], dt, fmt, ws[1], ws[2], ws[3], ws[4]), 'w desc')
  ck(dnn.cudnnCreateTensorDescriptor(d + 2), 'desc')
  ck(dnn.cudnnSetTensor4dDescriptor(d[2], fmt, dt, ys[1], ys[2], ys[3], ys[4]), 'y desc')
  ck(dnn.cudnnCreateConvolutionDescriptor(d + 3), 'desc')
  ck(dnn.cudnnSetConvolution2dDescriptor(d[3], pad, pad, stride, stride, 1, 1, 1, 0), 'conv desc')
  ck(dnn.cudnnSetConvolutionMathType(d[3], dt == 0 and 0 or 1), 'math')
  local perf, n = ffi.new('ofb_fwd_perf[8]'), ffi.new('int[1]')
  ck(dnn.cudnnFindConvolutionForwardAlgorithm(dnn_handle, d[0], d[1], d[3], d[2], 8, n, perf),
     'cudnnFind')
  local best = perf[0]
  local wsbuf = flow.empty({math.max(tonumber(best.memory), 1)}, {dtype = "uint8", device = "cuda"})
  local one, zero = ffi.new('float[1]', 1), ffi.new('float[1]', 0)
  local px, pw, py, pws = ptr(x), ptr(w), ptr(y), ptr(wsbuf)
  local wsn = best.memory
  return function()
    ck(dnn.cudnnConvolutionForward(dnn_handle, one, d[0], px, d[1], pw, d[3], best.algo, pws,
                                   wsn, zero, d[2], py), 'cudnnConvolutionForward')
  end, best.algo
end

local blas_handle
--- A function running cublasGemmEx for row-major c = a @ b ([m,k] @ [k,n]).
function M.gemm(a, b, c, tf32)
  assert(open(), why)
  if not blas_handle then
    local h = ffi.new('cublasHandle_t[1]')
    assert(blas.cublasCreate_v2(h) == 0, 'cublasCreate failed')
    blas_handle = h[0]
  end
  local m, k, n = a:size(1), a:size(2), b:size(2)
  local dt = blas_dt[a.dtype.name]
  local compute = (a.dtype.name == 'float32' and tf32) and 77 or 68
  local one, zero = ffi.new('float[1]', 1), ffi.new('float[1]', 0)
  local pa, pb, pc = ptr(a), ptr(b), ptr(c)
  return function()
    -- column-major C^T = B^T A^T
    local s = blas.cublasGemmEx(blas_handle, 0, 0, n, m, k, one, pb, dt, n, pa, dt, k, zero, pc,
                                dt, n, compute, -1)
    if s ~= 0 then error('cublasGemmEx: status ' .. s) end
  end
end

return M
