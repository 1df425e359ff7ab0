// dnn.cu -- convolution and batch norm through cuDNN 9.
//
// libcudnn is opened with dlopen on the first convolution or batch norm, not
// linked: without it every other CUDA op still works, and the error of a
// convolution (and flow.backends.cudnn.why_unavailable()) names the dlopen
// failure. OF_CUDNN_LIBRARY overrides the library's path.
//
// Algorithms: per (kind, dtype, layout, shapes, geometry, math mode,
// device) the choice is made once and cached: cudnnFind*AlgorithmEx (every
// algorithm timed on the real buffers) when flow.backends.cudnn.benchmark is
// set, else the heuristics of cudnnGet*Algorithm_v7; with
// flow.backends.cudnn.deterministic only deterministic algorithms are taken.
// Workspaces come from the caching allocator (of_alloc on the current
// stream); an algorithm whose workspace cannot be allocated is skipped for
// the next one. float16/bfloat16 convolutions compute in float32 on tensor
// cores; float32 ones use TF32 only when flow.backends.cudnn.allow_tf32
// (default true, as in PyTorch).
#include "common.cuh"
#include "kernels.cuh"
#include <cudnn.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <map>
#include <mutex>
#include <vector>

namespace ofc {

// shapes and devices for messages (the core's macros use C compound literals)
struct Str {
  char b[96];
  explicit Str(const of_tensor *t) { of_shape_str(t->shape, t->ndim, b, sizeof b); }
  explicit Str(of_device d) { of_device_str(d, b); }
};


#define OFC_DNN_FUNCS(X)                                                        \
  X(cudnnGetVersion) X(cudnnGetCudartVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnSetStream)    \
  X(cudnnCreateTensorDescriptor) X(cudnnSetTensorNdDescriptor)                  \
  X(cudnnDestroyTensorDescriptor) X(cudnnCreateFilterDescriptor)                \
  X(cudnnSetFilterNdDescriptor) X(cudnnDestroyFilterDescriptor)                 \
  X(cudnnCreateConvolutionDescriptor) X(cudnnSetConvolutionNdDescriptor)        \
  X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType)               \
  X(cudnnDestroyConvolutionDescriptor)                                          \
  X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnFindConvolutionForwardAlgorithmEx) \
  X(cudnnConvolutionForward)                                                    \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                                \
  X(cudnnFindConvolutionBackwardDataAlgorithmEx) X(cudnnConvolutionBackwardData) \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)                              \
  X(cudnnFindConvolutionBackwardFilterAlgorithmEx)                              \
  X(cudnnConvolutionBackwardFilter) X(cudnnAddTensor)                           \
  X(cudnnDeriveBNTensorDescriptor) X(cudnnBatchNormalizationForwardTraining)    \
  X(cudnnBatchNormalizationForwardInference) X(cudnnBatchNormalizationBackward)

#define OFC_DNN_PTR(f) static decltype(&::f) p_##f;
OFC_DNN_FUNCS(OFC_DNN_PTR)
#undef OFC_DNN_PTR

static std::mutex g_dnn_lock;
static int g_dnn_state = 0;          // 0 not tried, 1 loaded, -1 unavailable
static char g_dnn_why[768];
static cudnnHandle_t g_dnn[64];
static int g_benchmark = 0, g_deterministic = 0, g_tf32 = 1;

static bool dnn_load() {
  std::lock_guard<std::mutex> g(g_dnn_lock);
  if (g_dnn_state) return g_dnn_state == 1;
  g_dnn_state = -1;
  const char *env = getenv("OF_CUDNN_LIBRARY");
  const char *names[] = {env && *env ? env : "libcudnn.so.9", "libcudnn.so"};
  void *h = nullptr;
  for (int i = 0; i < 2 && !h; i++) {
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h && i == 0) snprintf(g_dnn_why, sizeof g_dnn_why, "cannot load cuDNN: %s", dlerror());
    if (env && *env) break;   // an explicit path: no fallback
  }
  if (!h) return false;
#define OFC_DNN_SYM(f)                                                                 \
  p_##f = (decltype(p_##f))dlsym(h, #f);                                               \
  if (!p_##f) {                                                                        \
    snprintf(g_dnn_why, sizeof g_dnn_why, "the loaded cuDNN has no %s (cuDNN 9 needed)", #f); \
    return false;                                                                      \
  }
  OFC_DNN_FUNCS(OFC_DNN_SYM)
#undef OFC_DNN_SYM
  size_t v = p_cudnnGetVersion();
  if (v / 10000 != CUDNN_MAJOR) {
    snprintf(g_dnn_why, sizeof g_dnn_why, "cuDNN %zu.%zu found, this build needs cuDNN %d",
             v / 10000, v / 100 % 100, CUDNN_MAJOR);
    return false;
  }
  // cuDNN is built per CUDA major version: a cuDNN for CUDA 12 next to this
  // library's CUDA 13 runtime loads, then fails inside its first call.
  size_t rt = p_cudnnGetCudartVersion();
  if (rt / 1000 != CUDART_VERSION / 1000) {
    snprintf(g_dnn_why, sizeof g_dnn_why, "cuDNN %zu.%zu was built for CUDA %zu.%zu, this "
             "library for CUDA %d.%d: install the cuDNN for CUDA %d (or set OF_CUDNN_LIBRARY)",
             v / 10000, v / 100 % 100, rt / 1000, rt / 10 % 100, CUDART_VERSION / 1000,
             CUDART_VERSION / 10 % 100, CUDART_VERSION / 1000);
    return false;
  }
  g_dnn_why[0] = 0;
  g_dnn_state = 1;
  return true;
}

static const char *dnn_why_unavailable() { return dnn_load() ? "" : g_dnn_why; }
static int32_t dnn_version() { return dnn_load() ? (int32_t)p_cudnnGetVersion() : 0; }
static void set_dnn_flags(int32_t benchmark, int32_t deterministic, int32_t allow_tf32) {
  g_benchmark = benchmark != 0;
  g_deterministic = deterministic != 0;
  g_tf32 = allow_tf32 != 0;
}

#define DNN_TRY(call, op)                                                               \
  do {                                                                                  \
    cudnnStatus_t s_ = (call);                                                          \
    if (s_ != CUDNN_STATUS_SUCCESS)                                                     \
      return of_fail(OF_ERR_DEVICE, "%s: cuDNN error: %s (%s)", op,                     \
                     p_cudnnGetErrorString(s_), #call);                                 \
  } while (0)

// The device's handle, on the current stream.
static of_status handle(const char *op, of_device dv, cudnnHandle_t *out) {
  if (!dnn_load())
    return of_fail(OF_ERR_DEVICE, "%s: cuDNN is not available on %s: %s", op, Str(dv).b,
                   g_dnn_why);
  int d = use_device(dv);
  {
    std::lock_guard<std::mutex> g(g_dnn_lock);
    if (!g_dnn[d]) DNN_TRY(p_cudnnCreate(&g_dnn[d]), op);
  }
  DNN_TRY(p_cudnnSetStream(g_dnn[d], current_stream(d)), op);
  *out = g_dnn[d];
  return OF_OK;
}

static of_status dnn_dtype(const char *op, of_dtype dt, cudnnDataType_t *out) {
  switch (dt) {
    case OF_FLOAT16: *out = CUDNN_DATA_HALF; return OF_OK;
    case OF_BFLOAT16: *out = CUDNN_DATA_BFLOAT16; return OF_OK;
    case OF_FLOAT32: *out = CUDNN_DATA_FLOAT; return OF_OK;
    case OF_FLOAT64: *out = CUDNN_DATA_DOUBLE; return OF_OK;
    default:
      return of_fail(OF_ERR_DTYPE, "%s: dtype %s is not supported by cuDNN", op,
                     of_dtype_name(dt));
  }
}

// RAII holders of the descriptors of one call.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  ~TensorDesc() { if (d) p_cudnnDestroyTensorDescriptor(d); }
};
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  ~FilterDesc() { if (d) p_cudnnDestroyFilterDescriptor(d); }
};
struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ~ConvDesc() { if (d) p_cudnnDestroyConvolutionDescriptor(d); }
};

// dims/strides of t as cuDNN wants them: at least 4 dims, 1-D convolutions
// as 2-D with a height of 1 (inserted before the last dim).
static int dnn_dims(const of_tensor *t, int nsp_conv, int *dims, int *strides) {
  int n = 0;
  for (int i = 0; i < t->ndim; i++) {
    if (nsp_conv == 1 && i == t->ndim - 1) {   // the inserted height
      dims[n] = 1;
      strides[n++] = (int)(t->strides[i] * t->shape[i]);
    }
    dims[n] = (int)t->shape[i];
    strides[n++] = (int)t->strides[i];
  }
  while (n < 4) dims[n] = 1, strides[n++] = 1;
  return n;
}

static of_status tensor_desc(const char *op, const of_tensor *t, int nsp_conv, TensorDesc &td) {
  cudnnDataType_t dt = CUDNN_DATA_FLOAT;
  OF_CHECK(dnn_dtype(op, t->dtype, &dt));
  int dims[8], strides[8];
  int n = dnn_dims(t, nsp_conv, dims, strides);
  DNN_TRY(p_cudnnCreateTensorDescriptor(&td.d), op);
  DNN_TRY(p_cudnnSetTensorNdDescriptor(td.d, dt, n, dims, strides), op);
  return OF_OK;
}

static bool fits_int(const of_tensor *t) {
  if (t->numel > INT32_MAX) return false;
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] > INT32_MAX || t->strides[i] > INT32_MAX) return false;
  return true;
}

// ---- algorithm choice ----

struct Algo {
  int algo;
  size_t ws;
  cudnnMathType_t math;
};
static std::map<std::vector<int64_t>, Algo> g_algos;

template <typename Perf>
static void keep_usable(const Perf *perf, int n, std::vector<Algo> &out) {
  for (int i = 0; i < n; i++) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (g_deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
    out.push_back(Algo{(int)perf[i].algo, perf[i].memory, perf[i].mathType});
  }
}

// Workspace from the caching allocator; freed in stream order after the call.
struct Workspace {
  of_device dev;
  void *p = nullptr;
  size_t n = 0;
  ~Workspace() { if (p) of_free(dev, p, (int64_t)n); }
  bool get(size_t bytes) {
    if (bytes == 0) return true;
    p = of_alloc(dev, (int64_t)bytes);
    if (!p) { of_clear_error(); return false; }
    n = bytes;
    return true;
  }
};

struct ConvCall {
  int kind;
  cudnnHandle_t h;
  TensorDesc xd, yd;
  FilterDesc wd;
  ConvDesc cd;
  of_tensor *x, *w, *y;   // x input/dy, w filter or dy, y output
};

// Candidates in preference order (timed by Find when benchmarking).
static of_status candidates(const char *op, ConvCall &c, of_device dev, std::vector<Algo> &out) {
  enum { kMax = 16 };
  int n = 0;
  if (g_benchmark) {
    // Find times each algorithm with a workspace of up to a quarter of the
    // free memory (at most 1 GiB); y is overwritten, as the call will anyway
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    size_t lim = fr / 4 < ((size_t)1 << 30) ? fr / 4 : ((size_t)1 << 30);
    Workspace ws{dev};
    while (lim > 0 && !ws.get(lim)) lim /= 2;
    if (c.kind == 0) {
      cudnnConvolutionFwdAlgoPerf_t perf[kMax];
      DNN_TRY(p_cudnnFindConvolutionForwardAlgorithmEx(c.h, c.xd.d, ptr(c.x), c.wd.d, ptr(c.w),
              c.cd.d, c.yd.d, ptr(c.y), kMax, &n, perf, ws.p, ws.n), op);
      keep_usable(perf, n, out);
    } else if (c.kind == 1) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
      DNN_TRY(p_cudnnFindConvolutionBackwardDataAlgorithmEx(c.h, c.wd.d, ptr(c.w), c.xd.d,
              ptr(c.x), c.cd.d, c.yd.d, ptr(c.y), kMax, &n, perf, ws.p, ws.n), op);
      keep_usable(perf, n, out);
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
      DNN_TRY(p_cudnnFindConvolutionBackwardFilterAlgorithmEx(c.h, c.xd.d, ptr(c.x), c.yd.d,
              ptr(c.w), c.cd.d, c.wd.d, ptr(c.y), kMax, &n, perf, ws.p, ws.n), op);
      keep_usable(perf, n, out);
    }
  } else if (c.kind == 0) {
    cudnnConvolutionFwdAlgoPerf_t perf[kMax];
    DNN_TRY(p_cudnnGetConvolutionForwardAlgorithm_v7(c.h, c.xd.d, c.wd.d, c.cd.d, c.yd.d, kMax,
                                                     &n, perf), op);
    keep_usable(perf, n, out);
  } else if (c.kind == 1) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
    DNN_TRY(p_cudnnGetConvolutionBackwardDataAlgorithm_v7(c.h, c.wd.d, c.xd.d, c.cd.d, c.yd.d,
                                                          kMax, &n, perf), op);
    keep_usable(perf, n, out);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
    DNN_TRY(p_cudnnGetConvolutionBackwardFilterAlgorithm_v7(c.h, c.xd.d, c.yd.d, c.cd.d,
                                                            c.wd.d, kMax, &n, perf), op);
    keep_usable(perf, n, out);
  }
  if (out.empty())
    return of_fail(OF_ERR_DEVICE, "%s: cuDNN has no %salgorithm for this convolution (input %s, "
                   "%s %s)", op, g_deterministic ? "deterministic " : "", Str(c.x).b,
                   c.kind == 2 ? "grad_output" : "weight", Str(c.w).b);
  return OF_OK;
}

static of_status run_algo(const char *op, ConvCall &c, const Algo &a, void *ws, size_t wsn,
                          const void *one, const void *zero) {
  DNN_TRY(p_cudnnSetConvolutionMathType(c.cd.d, a.math), op);
  if (c.kind == 0)
    DNN_TRY(p_cudnnConvolutionForward(c.h, one, c.xd.d, ptr(c.x), c.wd.d, ptr(c.w), c.cd.d,
                                      (cudnnConvolutionFwdAlgo_t)a.algo, ws, wsn, zero, c.yd.d,
                                      ptr(c.y)), op);
  else if (c.kind == 1)
    DNN_TRY(p_cudnnConvolutionBackwardData(c.h, one, c.wd.d, ptr(c.w), c.xd.d, ptr(c.x), c.cd.d,
                                           (cudnnConvolutionBwdDataAlgo_t)a.algo, ws, wsn, zero,
                                           c.yd.d, ptr(c.y)), op);
  else
    DNN_TRY(p_cudnnConvolutionBackwardFilter(c.h, one, c.xd.d, ptr(c.x), c.yd.d, ptr(c.w),
                                             c.cd.d, (cudnnConvolutionBwdFilterAlgo_t)a.algo, ws,
                                             wsn, zero, c.wd.d, ptr(c.y)), op);
  return OF_OK;
}

static of_status conv(int32_t kind, const of_conv_desc *d, of_tensor *x, of_tensor *w,
                      of_tensor *b, of_tensor *y) {
  const char *op = kind == 0 ? "conv" : kind == 1 ? "conv_backward_data" : "conv_backward_filter";
  of_device dev = of_dev(y);
  ConvCall c;
  c.kind = kind, c.x = x, c.w = w, c.y = y;
  OF_CHECK(handle(op, dev, &c.h));
  if (!fits_int(x) || !fits_int(w) || !fits_int(y))
    return of_fail(OF_ERR_SHAPE, "%s: a size beyond cuDNN's 2^31-1 (input %s, output %s)", op,
                   Str(x).b, Str(y).b);
  cudnnDataType_t dt = CUDNN_DATA_FLOAT;
  OF_CHECK(dnn_dtype(op, y->dtype, &dt));
  int nsp = d->nsp;
  // the filter is the weight (kinds 0 and 1) or the result (kind 2)
  of_tensor *f = kind == 2 ? y : w, *dy = kind == 2 ? w : nullptr;
  OF_CHECK(tensor_desc(op, x, nsp, c.xd));
  OF_CHECK(tensor_desc(op, kind == 2 ? dy : y, nsp, c.yd));
  int fd[8], fs[8];
  int nf = dnn_dims(f, nsp, fd, fs);
  DNN_TRY(p_cudnnCreateFilterDescriptor(&c.wd.d), op);
  DNN_TRY(p_cudnnSetFilterNdDescriptor(c.wd.d, dt, d->channels_last ? CUDNN_TENSOR_NHWC
                                                                    : CUDNN_TENSOR_NCHW,
                                       nf, fd), op);
  int pad[3], str[3], dil[3], nc = nsp < 2 ? 2 : nsp;
  for (int i = 0; i < nc; i++) {
    int j = nsp == 1 ? i - 1 : i;   // 1-D: the inserted height first
    pad[i] = j < 0 ? 0 : (int)d->pad[j];
    str[i] = j < 0 ? 1 : (int)d->stride[j];
    dil[i] = j < 0 ? 1 : (int)d->dil[j];
  }
  cudnnDataType_t acc = dt == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  DNN_TRY(p_cudnnCreateConvolutionDescriptor(&c.cd.d), op);
  DNN_TRY(p_cudnnSetConvolutionNdDescriptor(c.cd.d, nc, pad, str, dil, CUDNN_CROSS_CORRELATION,
                                            acc), op);
  DNN_TRY(p_cudnnSetConvolutionGroupCount(c.cd.d, (int)d->groups), op);
  cudnnMathType_t math = dt == CUDNN_DATA_HALF || dt == CUDNN_DATA_BFLOAT16
                             ? CUDNN_TENSOR_OP_MATH
                         : dt == CUDNN_DATA_FLOAT && !g_tf32 ? CUDNN_FMA_MATH
                                                             : CUDNN_DEFAULT_MATH;
  DNN_TRY(p_cudnnSetConvolutionMathType(c.cd.d, math), op);

  // cache key: everything the choice depends on
  std::vector<int64_t> key = {kind, (int64_t)dt, d->channels_last, nsp, d->groups, math,
                              g_deterministic, of_device_index(dev)};
  for (const of_tensor *t : {x, w, y})
    for (int i = 0; i < t->ndim; i++) key.push_back(t->shape[i]), key.push_back(t->strides[i]);
  for (int i = 0; i < nsp; i++) {
    key.push_back(d->stride[i]);
    key.push_back(d->pad[i]);
    key.push_back(d->dil[i]);
  }
  double one_d = 1, zero_d = 0;
  float one_f = 1, zero_f = 0;
  const void *one = dt == CUDNN_DATA_DOUBLE ? (const void *)&one_d : (const void *)&one_f;
  const void *zero = dt == CUDNN_DATA_DOUBLE ? (const void *)&zero_d : (const void *)&zero_f;

  Algo chosen{};
  bool cached = false;
  {
    std::lock_guard<std::mutex> g(g_dnn_lock);
    auto it = g_algos.find(key);
    if (it != g_algos.end()) chosen = it->second, cached = true;
  }
  Workspace ws{dev};
  if (cached && !ws.get(chosen.ws)) cached = false;   // memory is short now: choose again
  if (!cached) {
    std::vector<Algo> cand;
    OF_CHECK(candidates(op, c, dev, cand));
    size_t i = 0;
    for (; i < cand.size(); i++)
      if (ws.get(cand[i].ws)) break;
    if (i == cand.size())
      return of_fail(OF_ERR_OOM, "%s: CUDA out of memory for the workspace of every cuDNN "
                     "algorithm (the smallest needs %.2f MiB; input %s)", op,
                     cand.back().ws / 1048576.0, Str(x).b);
    chosen = cand[i];
    // the heuristics may offer TF32 math for float32 when it is not allowed
    if (dt == CUDNN_DATA_FLOAT && !g_tf32) chosen.math = CUDNN_FMA_MATH;
    std::lock_guard<std::mutex> g(g_dnn_lock);
    g_algos[key] = chosen;
  }
  OF_CHECK(run_algo(op, c, chosen, ws.p, ws.n, one, zero));
  if (b && kind != 2) {   // bias [C] broadcast over [1, C, 1, ...]
    TensorDesc bd;
    int bdims[8], bstr[8], n = 0;
    int ny = y->ndim + (nsp == 1 ? 1 : 0);
    if (ny < 4) ny = 4;
    for (int i = 0; i < ny; i++) bdims[i] = i == 1 ? (int)b->shape[0] : 1, bstr[i] = 1;
    n = ny;
    cudnnDataType_t bt = CUDNN_DATA_FLOAT;
    OF_CHECK(dnn_dtype(op, b->dtype, &bt));
    DNN_TRY(p_cudnnCreateTensorDescriptor(&bd.d), op);
    DNN_TRY(p_cudnnSetTensorNdDescriptor(bd.d, bt, n, bdims, bstr), op);
    DNN_TRY(p_cudnnAddTensor(c.h, one, bd.d, ptr(b), one, c.yd.d, ptr(y)), op);
  }
  return launched(op);
}

// ---- batch norm ----

// x as cuDNN sees it: [N, C, S..] with 4 or 5 dims
static of_status bn_desc(const char *op, const of_tensor *t, TensorDesc &td) {
  if (t->ndim > 5 || !fits_int(t))
    return of_fail(OF_ERR_SHAPE, "batch_norm: input %s has more dims or elements than cuDNN "
                   "takes", Str(t).b);
  return tensor_desc(op, t, 0, td);
}

static of_status batch_norm(of_tensor *x, of_tensor *w, of_tensor *b, of_tensor *rmean,
                            of_tensor *rvar, int32_t training, double momentum, double eps,
                            of_tensor *y, of_tensor *smean, of_tensor *sinvstd) {
  const char *op = "batch_norm";
  cudnnHandle_t h;
  OF_CHECK(handle(op, of_dev(x), &h));
  TensorDesc xd, yd, pd;
  OF_CHECK(bn_desc(op, x, xd));
  OF_CHECK(bn_desc(op, y, yd));
  DNN_TRY(p_cudnnCreateTensorDescriptor(&pd.d), op);
  DNN_TRY(p_cudnnDeriveBNTensorDescriptor(pd.d, xd.d, CUDNN_BATCHNORM_SPATIAL), op);
  double one_d = 1, zero_d = 0;
  float one_f = 1, zero_f = 0;
  bool dbl = x->dtype == OF_FLOAT64;
  const void *one = dbl ? (const void *)&one_d : (const void *)&one_f;
  const void *zero = dbl ? (const void *)&zero_d : (const void *)&zero_f;
  if (training) {
    DNN_TRY(p_cudnnBatchNormalizationForwardTraining(
                h, CUDNN_BATCHNORM_SPATIAL, one, zero, xd.d, ptr(x), yd.d, ptr(y), pd.d, ptr(w),
                ptr(b), momentum, rmean ? ptr(rmean) : nullptr, rvar ? ptr(rvar) : nullptr, eps,
                ptr(smean), ptr(sinvstd)), op);
  } else {
    DNN_TRY(p_cudnnBatchNormalizationForwardInference(
                h, CUDNN_BATCHNORM_SPATIAL, one, zero, xd.d, ptr(x), yd.d, ptr(y), pd.d, ptr(w),
                ptr(b), ptr(rmean), ptr(rvar), eps), op);
  }
  return launched(op);
}

static of_status batch_norm_back(of_tensor *x, of_tensor *dy, of_tensor *w, of_tensor *smean,
                                 of_tensor *sinvstd, double eps, of_tensor *dx, of_tensor *dw,
                                 of_tensor *db) {
  const char *op = "batch_norm_backward";
  cudnnHandle_t h;
  OF_CHECK(handle(op, of_dev(x), &h));
  TensorDesc xd, dyd, dxd, pd;
  OF_CHECK(bn_desc(op, x, xd));
  OF_CHECK(bn_desc(op, dy, dyd));
  OF_CHECK(bn_desc(op, dx, dxd));
  DNN_TRY(p_cudnnCreateTensorDescriptor(&pd.d), op);
  DNN_TRY(p_cudnnDeriveBNTensorDescriptor(pd.d, xd.d, CUDNN_BATCHNORM_SPATIAL), op);
  double one_d = 1, zero_d = 0;
  float one_f = 1, zero_f = 0;
  bool dbl = x->dtype == OF_FLOAT64;
  const void *one = dbl ? (const void *)&one_d : (const void *)&one_f;
  const void *zero = dbl ? (const void *)&zero_d : (const void *)&zero_f;
  DNN_TRY(p_cudnnBatchNormalizationBackward(h, CUDNN_BATCHNORM_SPATIAL, one, zero, one, zero,
                                            xd.d, ptr(x), dyd.d, ptr(dy), dxd.d, ptr(dx), pd.d,
                                            ptr(w), ptr(dw), ptr(db), eps, ptr(smean),
                                            ptr(sinvstd)), op);
  return launched(op);
}

void register_dnn(of_device_ops *ops) {
  ops->dnn_why_unavailable = dnn_why_unavailable;
  ops->dnn_version = dnn_version;
  ops->set_dnn_flags = set_dnn_flags;
  ops->conv = conv;
  ops->batch_norm = batch_norm;
  ops->batch_norm_back = batch_norm_back;
}

}  // namespace ofc
