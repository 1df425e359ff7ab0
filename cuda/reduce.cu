// reduce.cu -- rows reductions: sum/mean/prod/amax/amin/all/any/logsumexp/
// norm, max/min with indices, var/std, softmax/log_softmax, layer_norm and rms_norm
// forward and backward. The core hands over dense rows [outer, n].
//
// Floating reductions accumulate in double (as the CPU does), except the
// softmax and layer_norm paths, which accumulate float32 inputs in float.
// Short rows (n <= 32) take a thread per row, longer ones a block per row.
#include "common.cuh"
#include "kernels.cuh"
#include <float.h>
#include <type_traits>

namespace ofc {

constexpr int kRowThreads = 256;

// A block per row: the grid is capped (gridDim.x < 2^31, and a cast of a
// larger row count would wrap), and each block walks rows r, r + gridDim.x, ...
inline unsigned row_blocks(int64_t outer) {
  return (unsigned)(outer < (1 << 24) ? (outer < 1 ? 1 : outer) : (1 << 24));
}
#define OFC_FOR_ROWS(r, outer) for (int64_t r = blockIdx.x; r < (outer); r += gridDim.x)

template <typename A, typename F>
__device__ __forceinline__ A block_reduce(A v, F combine, A *sh) {
  for (int o = 16; o > 0; o >>= 1) v = combine(v, __shfl_down_sync(0xffffffffu, v, o));
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  if (lane == 0) sh[w] = v;
  __syncthreads();
  int nw = (blockDim.x + 31) >> 5;
  if (w == 0) {
    v = lane < nw ? sh[lane] : sh[0];
    for (int o = 16; o > 0; o >>= 1) {
      A u = __shfl_down_sync(0xffffffffu, v, o);
      if (lane + o < nw) v = combine(v, u);
    }
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  A r = sh[0];
  __syncthreads();
  return r;
}

template <typename T> struct RAcc {
  typedef typename std::conditional<std::is_floating_point<T>::value ||
                                        std::is_same<T, half_t>::value ||
                                        std::is_same<T, bf16_t>::value,
                                    double, int64_t>::type type;
};

// per-op element map, combine and identity, in the accumulator type A
template <typename A>
struct RedOp {
  int op;
  double p;
  __device__ __forceinline__ A ident() const {
    switch (op) {
      case OF_RED_PROD: case OF_RED_ALL: return (A)1;
      case OF_RED_AMAX:
        if constexpr (std::is_floating_point<A>::value) return (A)-INFINITY;
        else return (A)INT64_MIN;
      case OF_RED_AMIN:
        if constexpr (std::is_floating_point<A>::value) return (A)INFINITY;
        else return (A)INT64_MAX;
      case OF_RED_NORM:
        if constexpr (std::is_floating_point<A>::value) return p == -INFINITY ? (A)INFINITY : (A)0;
        else return (A)0;
      default: return (A)0;
    }
  }
  __device__ __forceinline__ A map(A x, A shift) const {
    switch (op) {
      case OF_RED_ALL: case OF_RED_ANY: return (A)(x != (A)0);
      case OF_RED_LOGSUMEXP: return (A)exp((double)(x - shift));
      case OF_RED_NORM: {
        double a = fabs((double)x);
        if (p == 0) return (A)(a != 0);
        if (p == 1 || isinf(p)) return (A)a;
        if (p == 2) return (A)(a * a);
        return (A)pow(a, p);
      }
      default: return x;
    }
  }
  __device__ __forceinline__ A combine(A a, A b) const {
    switch (op) {
      case OF_RED_PROD: return a * b;
      case OF_RED_AMAX: return (a != a || a > b) ? a : b;
      case OF_RED_AMIN: return (a != a || a < b) ? a : b;
      case OF_RED_ALL: return (A)(a != (A)0 && b != (A)0);
      case OF_RED_ANY: return (A)(a != (A)0 || b != (A)0);
      case OF_RED_NORM:
        if (p == INFINITY) return (a != a || a > b) ? a : b;
        if (p == -INFINITY) return (a != a || a < b) ? a : b;
        return a + b;
      default: return a + b;
    }
  }
  __device__ __forceinline__ A finish(A v, int64_t n, A shift) const {
    switch (op) {
      case OF_RED_MEAN: return (A)((double)v / (double)n);
      case OF_RED_LOGSUMEXP: return (A)(log((double)v) + (double)shift);
      case OF_RED_NORM:
        if (p == 0 || p == 1 || isinf(p)) return v;
        if (p == 2) return (A)sqrt((double)v);
        return (A)pow((double)v, 1.0 / p);
      default: return v;
    }
  }
};

template <typename T>
__device__ __forceinline__ typename RAcc<T>::type load_acc(const T *x, int64_t i) {
  typedef typename RAcc<T>::type A;
  if constexpr (std::is_same<A, double>::value) return (double)to_f(x[i]);
  else return (A)x[i];
}
template <> __device__ __forceinline__ double load_acc<double>(const double *x, int64_t i) {
  return x[i];
}

template <typename T, typename TO>
__global__ void reduce_block(RedOp<typename RAcc<T>::type> r, const T *x, int64_t outer, int64_t n,
                             TO *out) {
  typedef typename RAcc<T>::type A;
  __shared__ A sh[32];
  OFC_FOR_ROWS(o, outer) {
  const T *row = x + o * n;
  A shift = 0;
  if (r.op == OF_RED_LOGSUMEXP) {
    RedOp<A> mx{OF_RED_AMAX, 0};
    A m = mx.ident();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = mx.combine(m, load_acc(row, i));
    m = block_reduce(m, [&](A a, A b) { return mx.combine(a, b); }, sh);
    shift = isfinite((double)m) ? m : (A)0;
  }
  A v = r.ident();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) v = r.combine(v, r.map(load_acc(row, i), shift));
  v = block_reduce(v, [&](A a, A b) { return r.combine(a, b); }, sh);
  if (threadIdx.x == 0) out[o] = Cvt<TO, A>::go(r.finish(v, n, shift));
  }
}

template <typename T, typename TO>
__global__ void reduce_thread(RedOp<typename RAcc<T>::type> r, const T *x, int64_t outer,
                              int64_t n, TO *out) {
  typedef typename RAcc<T>::type A;
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < outer;
       o += (int64_t)gridDim.x * blockDim.x) {
    const T *row = x + o * n;
    A shift = 0;
    if (r.op == OF_RED_LOGSUMEXP) {
      RedOp<A> mx{OF_RED_AMAX, 0};
      A m = mx.ident();
      for (int64_t i = 0; i < n; i++) m = mx.combine(m, load_acc(row, i));
      shift = isfinite((double)m) ? m : (A)0;
    }
    A v = r.ident();
    for (int64_t i = 0; i < n; i++) v = r.combine(v, r.map(load_acc(row, i), shift));
    out[o] = Cvt<TO, A>::go(r.finish(v, n, shift));
  }
}

// Few long rows (a whole-tensor sum): a block per row would use one SM of
// the device. Each row is split into chunks, a block each (grid.y: the row),
// that write their combined (mapped) values to a scratch buffer; a second
// kernel combines a row's chunks and finishes. Not for logsumexp, whose map
// needs the row's max first.
template <typename T>
__global__ void reduce_chunks(RedOp<typename RAcc<T>::type> r, const T *x, int64_t n,
                              int64_t chunk, typename RAcc<T>::type *part) {
  typedef typename RAcc<T>::type A;
  __shared__ A sh[32];
  const T *row = x + (int64_t)blockIdx.y * n;
  int64_t lo = (int64_t)blockIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
  A v = r.ident();
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) v = r.combine(v, r.map(load_acc(row, i), (A)0));
  v = block_reduce(v, [&](A a, A b) { return r.combine(a, b); }, sh);
  if (threadIdx.x == 0) part[(int64_t)blockIdx.y * gridDim.x + blockIdx.x] = v;
}

template <typename A, typename TO>
__global__ void reduce_chunks_final(RedOp<A> r, const A *part, int64_t chunks, int64_t n, TO *out) {
  __shared__ A sh[32];
  const A *row = part + (int64_t)blockIdx.x * chunks;
  A v = r.ident();
  for (int64_t i = threadIdx.x; i < chunks; i += blockDim.x) v = r.combine(v, row[i]);
  v = block_reduce(v, [&](A a, A b) { return r.combine(a, b); }, sh);
  if (threadIdx.x == 0) out[blockIdx.x] = Cvt<TO, A>::go(r.finish(v, n, (A)0));
}

static of_status reduce_rows(int32_t op, double p, of_tensor *x, int64_t outer, int64_t n,
                             of_tensor *out) {
  if (outer == 0) return OF_OK;
  int dev = use_device(of_dev(x));
  cudaStream_t s = current_stream(dev);
  return dispatch_compute(x->dtype, [&](auto zi) -> of_status {
    typedef decltype(zi) T;
    typedef typename RAcc<T>::type A;
    RedOp<A> r{op, p};
    return dispatch_all(out->dtype, [&](auto zo) -> of_status {
      typedef decltype(zo) TO;
      int64_t chunks = (n + 8 * kRowThreads - 1) / (8 * kRowThreads);   // >= 2048 elements each
      int64_t most = 1024 / outer;                                      // ~1024 blocks in all
      if (chunks > most) chunks = most;
      if (chunks > 1024) chunks = 1024;
      if (op != OF_RED_LOGSUMEXP && outer <= 256 && chunks >= 4) {
        int64_t chunk = (n + chunks - 1) / chunks;
        chunks = (n + chunk - 1) / chunk;
        A *part = NULL;
        OFC_TRY(cudaMallocAsync((void **)&part, (size_t)(outer * chunks) * sizeof(A), s), "reduce");
        reduce_chunks<T><<<dim3((unsigned)chunks, (unsigned)outer), kRowThreads, 0, s>>>(
            r, (const T *)ptr(x), n, chunk, part);
        reduce_chunks_final<A, TO><<<(unsigned)outer, kRowThreads, 0, s>>>(r, part, chunks, n,
                                                                          (TO *)ptr(out));
        of_status st = launched("reduce");
        cudaError_t e = cudaFreeAsync(part, s);
        if (st == OF_OK && e != cudaSuccess) return cuda_fail(e, "reduce", "cudaFreeAsync");
        return st;
      }
      if (n <= 32 || outer >= 65536 * 4)
        reduce_thread<T, TO><<<blocks_for(outer), kThreads, 0, s>>>(r, (const T *)ptr(x), outer,
                                                                   n, (TO *)ptr(out));
      else
        reduce_block<T, TO><<<row_blocks(outer), kRowThreads, 0, s>>>(r, (const T *)ptr(x), outer, n,
                                                                   (TO *)ptr(out));
      return launched("reduce");
    });
  });
}

// ---- max/min with indices: NaN wins, then the first position ----
template <typename A>
__device__ __forceinline__ bool better(A a, int64_t ia, A b, int64_t ib, bool is_max) {
  bool an = a != a, bn = b != b;
  if (an || bn) return an && (!bn || ia < ib);
  if (a == b) return ia < ib;
  return is_max ? a > b : a < b;
}

template <typename T>
__global__ void argreduce_kernel(const T *x, int64_t outer, int64_t n, int is_max, int64_t base,
                                 T *vals, int64_t *idx) {
  typedef typename RAcc<T>::type A;
  __shared__ A shv[kRowThreads];
  __shared__ int64_t shi[kRowThreads];
  OFC_FOR_ROWS(r, outer) {
  const T *row = x + r * n;
  A bv = 0;
  int64_t bi = -1;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    A v = load_acc(row, i);
    if (bi < 0 || better(v, i, bv, bi, is_max)) bv = v, bi = i;
  }
  shv[threadIdx.x] = bv;
  shi[threadIdx.x] = bi;
  __syncthreads();
  for (int st = blockDim.x / 2; st > 0; st >>= 1) {
    if (threadIdx.x < st) {
      A v = shv[threadIdx.x + st];
      int64_t i = shi[threadIdx.x + st];
      if (i >= 0 && (shi[threadIdx.x] < 0 || better(v, i, shv[threadIdx.x], shi[threadIdx.x], is_max))) {
        shv[threadIdx.x] = v;
        shi[threadIdx.x] = i;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    // an empty row (n == 0; the core rejects it first) has no element to read
    int64_t i = shi[0];
    if (vals && i >= 0) vals[r] = row[i];
    idx[r] = (i < 0 ? 0 : i) + base;
  }
  __syncthreads();   // shv/shi are reused by the next row
  }
}

static of_status argreduce_rows(int32_t is_max, of_tensor *x, int64_t outer, int64_t n,
                                int64_t base, of_tensor *values, of_tensor *indices) {
  if (outer == 0) return OF_OK;
  if (n == 0)
    return of_fail(OF_ERR_SHAPE, "%s: cannot take the %s of an empty dimension",
                   is_max ? "max" : "min", is_max ? "max" : "min");
  int dev = use_device(of_dev(x));
  cudaStream_t s = current_stream(dev);
  return dispatch_compute(x->dtype, [&](auto z) -> of_status {
    typedef decltype(z) T;
    argreduce_kernel<T><<<row_blocks(outer), kRowThreads, 0, s>>>(
        (const T *)ptr(x), outer, n, is_max, base, values ? (T *)ptr(values) : nullptr,
        (int64_t *)ptr(indices));
    return launched(is_max ? "max" : "min");
  });
}

// ---- var / std ----
template <typename T>
__global__ void var_kernel(const T *x, int64_t outer, int64_t n, double corr, int is_std, T *out) {
  __shared__ double sh[32];
  OFC_FOR_ROWS(r, outer) {
  const T *row = x + r * n;
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += (double)row[i];
  s = block_reduce(s, [](double a, double b) { return a + b; }, sh);
  double mean = s / (double)n, q = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    double d = (double)row[i] - mean;
    q += d * d;
  }
  q = block_reduce(q, [](double a, double b) { return a + b; }, sh);
  if (threadIdx.x == 0) {
    double den = (double)n - corr;
    if (den < 0) den = 0;
    double v = q / den;
    out[r] = (T)(is_std ? sqrt(v) : v);
  }
  }
}

static of_status var_rows(of_tensor *x, int64_t outer, int64_t n, double corr, int32_t is_std,
                          of_tensor *out) {
  if (outer == 0) return OF_OK;
  int dev = use_device(of_dev(x));
  cudaStream_t s = current_stream(dev);
  of_tensor *o2 = out;
  if (out->dtype != x->dtype) return of_fail(OF_ERR_DTYPE, "var: dtype mismatch on CUDA");
  switch (x->dtype) {
    case OF_FLOAT32:
      var_kernel<float><<<row_blocks(outer), kRowThreads, 0, s>>>((const float *)ptr(x), outer, n, corr,
                                                               is_std, (float *)ptr(o2));
      break;
    case OF_FLOAT64:
      var_kernel<double><<<row_blocks(outer), kRowThreads, 0, s>>>((const double *)ptr(x), outer, n, corr,
                                                                is_std, (double *)ptr(o2));
      break;
    default: return of_fail(OF_ERR_DTYPE, "var: dtype %s on CUDA", of_dtype_name(x->dtype));
  }
  return launched(is_std ? "std" : "var");
}

// ---- softmax ----
template <typename T>
__global__ void softmax_kernel(const T *x, int64_t outer, int64_t n, int log_, T *y) {
  typedef typename Acc<T>::type A;
  __shared__ A sh[32];
  OFC_FOR_ROWS(r, outer) {
  const T *row = x + r * n;
  T *out = y + r * n;
  A m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    A v = (A)row[i];
    m = (v != v || v > m) ? v : m;
  }
  m = block_reduce(m, [](A a, A b) { return (a != a || a > b) ? a : b; }, sh);
  A shift = isinf(m) ? (A)0 : m;
  A s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += exp((A)row[i] - shift);
  s = block_reduce(s, [](A a, A b) { return a + b; }, sh);
  if (log_) {
    A ls = log(s) + shift;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = (T)((A)row[i] - ls);
  } else {
    A inv = (A)1 / s;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = (T)(exp((A)row[i] - shift) * inv);
  }
  }
}

static of_status softmax_rows(of_tensor *x, int64_t outer, int64_t n, int32_t log_, of_tensor *y) {
  if (outer == 0 || n == 0) return OF_OK;
  int dev = use_device(of_dev(x));
  cudaStream_t s = current_stream(dev);
  int th = n >= 1024 ? 1024 : n >= 256 ? 256 : 64;
  if (x->dtype == OF_FLOAT32)
    softmax_kernel<float><<<row_blocks(outer), th, 0, s>>>((const float *)ptr(x), outer, n, log_,
                                                        (float *)ptr(y));
  else if (x->dtype == OF_FLOAT64)
    softmax_kernel<double><<<row_blocks(outer), th, 0, s>>>((const double *)ptr(x), outer, n, log_,
                                                         (double *)ptr(y));
  else
    return of_fail(OF_ERR_DTYPE, "softmax: dtype %s on CUDA", of_dtype_name(x->dtype));
  return launched(log_ ? "log_softmax" : "softmax");
}

// ---- layer_norm ----
// mean and rstd are saved in the accumulation type: float64 for float64
// input (the core allocates them so), float32 for the other floats.
template <typename A> constexpr of_dtype stat_dtype() {
  return std::is_same<A, double>::value ? OF_FLOAT64 : OF_FLOAT32;
}
template <typename T>
__global__ void ln_fwd(const T *x, const T *w, const T *b, int64_t outer, int64_t n, double eps,
                       T *y, typename Acc<T>::type *mean, typename Acc<T>::type *rstd) {
  typedef typename Acc<T>::type A;
  __shared__ A sh[32];
  OFC_FOR_ROWS(r, outer) {
  const T *row = x + r * n;
  T *out = y + r * n;
  A s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += (A)to_f(row[i]);
  A mu = block_reduce(s, [](A p, A q) { return p + q; }, sh) / (A)n;
  A q = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    A d = (A)to_f(row[i]) - mu;
    q += d * d;
  }
  A var = block_reduce(q, [](A p, A u) { return p + u; }, sh) / (A)n;
  A rs = (A)1 / sqrt(var + (A)eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    A v = ((A)to_f(row[i]) - mu) * rs;
    if (w) v = v * (A)to_f(w[i]);
    if (b) v = v + (A)to_f(b[i]);
    out[i] = Cvt<T, A>::go(v);
  }
  if (threadIdx.x == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
  }
}

// gx = rstd * (g w - mean(g w) - xhat mean(g w xhat))
template <typename T>
__global__ void ln_bwd_x(const T *g, const T *x, const T *w, const typename Acc<T>::type *mean,
                         const typename Acc<T>::type *rstd, int64_t outer, int64_t n, T *gx) {
  typedef typename Acc<T>::type A;
  __shared__ A sh[32];
  OFC_FOR_ROWS(r, outer) {
  const T *gr = g + r * n, *xr = x + r * n;
  A mu = mean[r], rs = rstd[r], s1 = 0, s2 = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    A gw = (A)to_f(gr[i]) * (w ? (A)to_f(w[i]) : (A)1);
    s1 += gw;
    s2 += gw * ((A)to_f(xr[i]) - mu) * rs;
  }
  s1 = block_reduce(s1, [](A p, A q) { return p + q; }, sh) / (A)n;
  s2 = block_reduce(s2, [](A p, A q) { return p + q; }, sh) / (A)n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    A gw = (A)to_f(gr[i]) * (w ? (A)to_f(w[i]) : (A)1);
    A xh = ((A)to_f(xr[i]) - mu) * rs;
    gx[r * n + i] = Cvt<T, A>::go(rs * (gw - s1 - xh * s2));
  }
  }
}

// gw[j] = sum_r g xhat, gb[j] = sum_r g: a block per 32 columns, its
// kLnRows thread rows walking the rows (reads of a warp are coalesced along
// the columns), summed in shared memory; the same order on every run.
constexpr int kLnRows = 16;
template <typename T, typename TW>
__global__ void ln_bwd_wb(const T *g, const T *x, const typename Acc<T>::type *mean,
                          const typename Acc<T>::type *rstd, int64_t rows, int64_t n, TW *gw,
                          TW *gb) {
  typedef typename Acc<T>::type A;
  __shared__ A shw[kLnRows][33], shb[kLnRows][33];
  int64_t j = (int64_t)blockIdx.x * 32 + threadIdx.x;
  A sw = 0, sb = 0;
  if (j < n)
    for (int64_t r = threadIdx.y; r < rows; r += kLnRows) {
      A gv = (A)to_f(g[r * n + j]);
      sb += gv;
      sw += gv * ((A)to_f(x[r * n + j]) - (mean ? (A)mean[r] : (A)0)) * (A)rstd[r];
    }
  shw[threadIdx.y][threadIdx.x] = sw;
  shb[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
    for (int k = 1; k < kLnRows; k++) {
      sw += shw[k][threadIdx.x];
      sb += shb[k][threadIdx.x];
    }
    if (gw) gw[j] = Cvt<TW, A>::go(sw);
    if (gb) gb[j] = Cvt<TW, A>::go(sb);
  }
}

static of_status layer_norm_rows(of_tensor *x, of_tensor *w, of_tensor *b, int64_t outer,
                                 int64_t n, double eps, of_tensor *y, of_tensor *mean,
                                 of_tensor *rstd) {
  if (outer == 0) return OF_OK;
  int dev = use_device(of_dev(x));
  cudaStream_t s = current_stream(dev);
  int th = n >= 1024 ? 1024 : n >= 256 ? 256 : 64;
  return dispatch_float(x->dtype, "layer_norm", [&](auto z) -> of_status {
    typedef decltype(z) T;
    typedef typename Acc<T>::type A;
    if (mean->dtype != stat_dtype<A>() || rstd->dtype != stat_dtype<A>())
      return of_fail(OF_ERR_DTYPE, "layer_norm: saved mean/rstd must be %s for %s input on CUDA",
                     of_dtype_name(stat_dtype<A>()), of_dtype_name(x->dtype));
    ln_fwd<T><<<row_blocks(outer), th, 0, s>>>((const T *)ptr(x), w ? (const T *)ptr(w) : nullptr,
                                            b ? (const T *)ptr(b) : nullptr, outer, n, eps,
                                            (T *)ptr(y), (A *)ptr(mean), (A *)ptr(rstd));
    return launched("layer_norm");
  });
}

static of_status layer_norm_back_rows(of_tensor *g, of_tensor *x, of_tensor *w, of_tensor *mean,
                                      of_tensor *rstd, int64_t outer, int64_t n, of_tensor *gx,
                                      of_tensor *gw, of_tensor *gb) {
  int dev = use_device(of_dev(x));
  cudaStream_t s = current_stream(dev);
  int th = n >= 1024 ? 1024 : n >= 256 ? 256 : 64;
  of_dtype wdt = gw ? gw->dtype : gb ? gb->dtype : x->dtype;
  if (gw && gb && gw->dtype != gb->dtype)
    return of_fail(OF_ERR_DTYPE, "layer_norm_backward: weight %s and bias %s dtypes differ on "
                   "CUDA", of_dtype_name(gw->dtype), of_dtype_name(gb->dtype));
  return dispatch_float(x->dtype, "layer_norm_backward", [&](auto z) -> of_status {
    typedef decltype(z) T;
    const T *pg = (const T *)ptr(g), *px = (const T *)ptr(x);
    typedef typename Acc<T>::type A;
    if (mean->dtype != stat_dtype<A>() || rstd->dtype != stat_dtype<A>())
      return of_fail(OF_ERR_DTYPE, "layer_norm_backward: saved mean/rstd must be %s for %s "
                     "input on CUDA", of_dtype_name(stat_dtype<A>()), of_dtype_name(x->dtype));
    const A *pm = (const A *)ptr(mean), *pr = (const A *)ptr(rstd);
    if (gx && outer > 0)
      ln_bwd_x<T><<<row_blocks(outer), th, 0, s>>>(pg, px, w ? (const T *)ptr(w) : nullptr, pm, pr,
                                                outer, n, (T *)ptr(gx));
    if ((gw || gb) && n > 0) {
      of_status st = dispatch_float(wdt, "layer_norm_backward", [&](auto zw) -> of_status {
        typedef decltype(zw) TW;
        ln_bwd_wb<T, TW><<<(unsigned)((n + 31) / 32), dim3(32, kLnRows), 0, s>>>(pg, px, pm, pr,
                                                                               outer, n,
                                                           gw ? (TW *)ptr(gw) : nullptr,
                                                           gb ? (TW *)ptr(gb) : nullptr);
        return OF_OK;
      });
      if (st != OF_OK) return st;
    }
    return launched("layer_norm_backward");
  });
}

// ---- rms_norm ----
// y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps); rstd saved as
// layer_norm's statistics (float64 for float64 input, else float32).
template <typename T>
__global__ void rms_fwd(const T *x, const T *w, int64_t outer, int64_t n, double eps, T *y,
                        typename Acc<T>::type *rstd) {
  typedef typename Acc<T>::type A;
  __shared__ A sh[32];
  OFC_FOR_ROWS(r, outer) {
  const T *row = x + r * n;
  T *out = y + r * n;
  A q = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    A v = (A)to_f(row[i]);
    q += v * v;
  }
  A rs = (A)1 / sqrt(block_reduce(q, [](A p, A u) { return p + u; }, sh) / (A)n + (A)eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    A v = (A)to_f(row[i]) * rs;
    if (w) v = v * (A)to_f(w[i]);
    out[i] = Cvt<T, A>::go(v);
  }
  if (threadIdx.x == 0) rstd[r] = rs;
  }
}

// gx = rstd * (g w - xhat mean(g w xhat)), xhat = x rstd
template <typename T>
__global__ void rms_bwd_x(const T *g, const T *x, const T *w, const typename Acc<T>::type *rstd,
                          int64_t outer, int64_t n, T *gx) {
  typedef typename Acc<T>::type A;
  __shared__ A sh[32];
  OFC_FOR_ROWS(r, outer) {
  const T *gr = g + r * n, *xr = x + r * n;
  A rs = rstd[r], s2 = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    s2 += (A)to_f(gr[i]) * (w ? (A)to_f(w[i]) : (A)1) * (A)to_f(xr[i]) * rs;
  s2 = block_reduce(s2, [](A p, A q) { return p + q; }, sh) / (A)n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    A gw = (A)to_f(gr[i]) * (w ? (A)to_f(w[i]) : (A)1);
    gx[r * n + i] = Cvt<T, A>::go(rs * (gw - (A)to_f(xr[i]) * rs * s2));
  }
  }
}

static of_status rms_norm_rows(of_tensor *x, of_tensor *w, int64_t outer, int64_t n, double eps,
                               of_tensor *y, of_tensor *rstd) {
  if (outer == 0) return OF_OK;
  int dev = use_device(of_dev(x));
  cudaStream_t s = current_stream(dev);
  int th = n >= 1024 ? 1024 : n >= 256 ? 256 : 64;
  return dispatch_float(x->dtype, "rms_norm", [&](auto z) -> of_status {
    typedef decltype(z) T;
    typedef typename Acc<T>::type A;
    if (rstd->dtype != stat_dtype<A>())
      return of_fail(OF_ERR_DTYPE, "rms_norm: saved rstd must be %s for %s input on CUDA",
                     of_dtype_name(stat_dtype<A>()), of_dtype_name(x->dtype));
    rms_fwd<T><<<row_blocks(outer), th, 0, s>>>((const T *)ptr(x), w ? (const T *)ptr(w) : nullptr,
                                             outer, n, eps, (T *)ptr(y), (A *)ptr(rstd));
    return launched("rms_norm");
  });
}

// the weight grad is layer_norm's ln_bwd_wb without a mean (its bias sums unused)
static of_status rms_norm_back_rows(of_tensor *g, of_tensor *x, of_tensor *w, of_tensor *rstd,
                                    int64_t outer, int64_t n, of_tensor *gx, of_tensor *gw) {
  int dev = use_device(of_dev(x));
  cudaStream_t s = current_stream(dev);
  int th = n >= 1024 ? 1024 : n >= 256 ? 256 : 64;
  return dispatch_float(x->dtype, "rms_norm_backward", [&](auto z) -> of_status {
    typedef decltype(z) T;
    typedef typename Acc<T>::type A;
    if (rstd->dtype != stat_dtype<A>())
      return of_fail(OF_ERR_DTYPE, "rms_norm_backward: saved rstd must be %s for %s input on "
                     "CUDA", of_dtype_name(stat_dtype<A>()), of_dtype_name(x->dtype));
    const T *pg = (const T *)ptr(g), *px = (const T *)ptr(x);
    const A *pr = (const A *)ptr(rstd);
    if (gx && outer > 0)
      rms_bwd_x<T><<<row_blocks(outer), th, 0, s>>>(pg, px, w ? (const T *)ptr(w) : nullptr, pr,
                                                 outer, n, (T *)ptr(gx));
    if (gw && n > 0) {
      of_status st = dispatch_float(gw->dtype, "rms_norm_backward", [&](auto zw) -> of_status {
        typedef decltype(zw) TW;
        ln_bwd_wb<T, TW><<<(unsigned)((n + 31) / 32), dim3(32, kLnRows), 0, s>>>(
            pg, px, nullptr, pr, outer, n, (TW *)ptr(gw), (TW *)nullptr);
        return OF_OK;
      });
      if (st != OF_OK) return st;
    }
    return launched("rms_norm_backward");
  });
}

void register_reduce(of_device_ops *ops) {
  ops->reduce_rows = reduce_rows;
  ops->argreduce_rows = argreduce_rows;
  ops->var_rows = var_rows;
  ops->softmax_rows = softmax_rows;
  ops->layer_norm_rows = layer_norm_rows;
  ops->layer_norm_back_rows = layer_norm_back_rows;
  ops->rms_norm_rows = rms_norm_rows;
  ops->rms_norm_back_rows = rms_norm_back_rows;
}

}  // namespace ofc
