// nn.cu -- pooling, losses, interpolation and padding kernels. Each follows
// its CPU kernel's arithmetic (core/ops/pool.c, loss.c, resample.c): the
// same windows, the same order of the per-sample sums, double accumulation
// where the CPU uses double. Backward passes that scatter (average pool,
// max pool, interpolate, pad) add with atomics, so float32 sums may differ
// from the CPU's in the last bits.
#include "common.cuh"
#include "kernels.cuh"
#include <string.h>
#include <type_traits>

namespace ofc {

// atomicAdd for the float types only: the kernels below are instantiated for
// integer bit copies too, whose backward branches never run.
template <typename T>
__device__ __forceinline__ void add_to(T *p, T v) {
  if constexpr (std::is_same<T, float>::value || std::is_same<T, double>::value) atomicAdd(p, v);
}

// The core converts float16/bfloat16 operands to float32 for these kernels.
template <typename F>
static of_status dispatch_fd(of_dtype dt, const char *op, F &&f) {
  if (dt == OF_FLOAT32) return f((float)0);
  if (dt == OF_FLOAT64) return f((double)0);
  return of_fail(OF_ERR_DTYPE, "%s: expected float32 or float64 from the core, got %s", op,
                 of_dtype_name(dt));
}

// ---- pooling ----

struct PoolGeo {
  int adaptive, cip;
  int64_t divisor, in[3], out[3], k[3], s[3], p[3], d[3];
};

static PoolGeo pool_geo(const of_pool_desc *d) {
  PoolGeo g;
  g.adaptive = d->adaptive, g.cip = d->cip, g.divisor = d->divisor;
  for (int i = 0; i < 3; i++) {
    g.in[i] = d->in[i], g.out[i] = d->out[i], g.k[i] = d->k[i];
    g.s[i] = d->s[i], g.p[i] = d->p[i], g.d[i] = d->d[i];
  }
  return g;
}

// The window of output position o along dim i (core/ops/pool.c, pgeom_init).
__device__ __forceinline__ void pool_window(const PoolGeo &g, int i, int64_t o, int64_t *first,
                                            int64_t *cnt, int64_t *step, int64_t *dv) {
  int64_t in = g.in[i], n = g.out[i];
  if (g.adaptive) {
    int64_t st = (o * in) / n, en = ((o + 1) * in + n - 1) / n;
    *first = st, *cnt = en - st, *step = 1, *dv = en - st;
    return;
  }
  int64_t k = g.k[i], s = g.s[i], p = g.p[i], dil = g.d[i];
  int64_t start = o * s - p;
  int64_t lo = start >= 0 ? 0 : (-start + dil - 1) / dil;
  int64_t hi = in - 1 - start < 0 ? 0 : (in - 1 - start) / dil + 1;
  if (hi > k) hi = k;
  if (lo > hi) lo = hi;
  *first = start + lo * dil;
  *cnt = hi - lo;
  *step = dil;
  int64_t pend = start + k < in + p ? start + k : in + p;
  *dv = g.cip ? pend - start : hi - lo;
}

template <typename T>
__global__ void max_pool_k(PoolGeo g, int64_t total, const T *x, T *y, int64_t *idx,
                           int64_t base) {
  int64_t in_sz = g.in[0] * g.in[1] * g.in[2];
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t ow = e % g.out[2], r = e / g.out[2], oh = r % g.out[1];
    r /= g.out[1];
    int64_t od = r % g.out[0], plane = r / g.out[0];
    int64_t f[3], c[3], st[3], dv;
    pool_window(g, 0, od, &f[0], &c[0], &st[0], &dv);
    pool_window(g, 1, oh, &f[1], &c[1], &st[1], &dv);
    pool_window(g, 2, ow, &f[2], &c[2], &st[2], &dv);
    const T *xp = x + plane * in_sz;
    T m = T(0);
    int64_t best = -1;
    for (int64_t a = 0; a < c[0]; a++)
      for (int64_t b = 0; b < c[1]; b++)
        for (int64_t q = 0; q < c[2]; q++) {
          int64_t pos = ((f[0] + a * st[0]) * g.in[1] + f[1] + b * st[1]) * g.in[2] + f[2] +
                        q * st[2];
          T v = xp[pos];
          // NaN wins; ties keep the first position
          if (best < 0 || v > m || (v != v && m == m)) m = v, best = pos;
        }
    y[e] = m;
    idx[e] = best + base;
  }
}

template <typename T>
__global__ void avg_pool_k(PoolGeo g, int64_t total, int backward, const T *x, T *y) {
  int64_t in_sz = g.in[0] * g.in[1] * g.in[2];
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t ow = e % g.out[2], r = e / g.out[2], oh = r % g.out[1];
    r /= g.out[1];
    int64_t od = r % g.out[0], plane = r / g.out[0];
    int64_t f[3], c[3], st[3], dv[3];
    pool_window(g, 0, od, &f[0], &c[0], &st[0], &dv[0]);
    pool_window(g, 1, oh, &f[1], &c[1], &st[1], &dv[1]);
    pool_window(g, 2, ow, &f[2], &c[2], &st[2], &dv[2]);
    double div = g.divisor > 0 ? (double)g.divisor : (double)(dv[0] * dv[1] * dv[2]);
    typedef typename Acc<T>::type A;
    A scale = (A)(1.0 / div);
    if (backward) {
      T gv = (T)((A)x[e] * scale);
      T *yp = y + plane * in_sz;
      for (int64_t a = 0; a < c[0]; a++)
        for (int64_t b = 0; b < c[1]; b++)
          for (int64_t q = 0; q < c[2]; q++)
            add_to(yp + ((f[0] + a) * g.in[1] + f[1] + b) * g.in[2] + f[2] + q, gv);
    } else {
      const T *xp = x + plane * in_sz;
      A s = 0;
      for (int64_t a = 0; a < c[0]; a++)
        for (int64_t b = 0; b < c[1]; b++)
          for (int64_t q = 0; q < c[2]; q++)
            s += (A)xp[((f[0] + a) * g.in[1] + f[1] + b) * g.in[2] + f[2] + q];
      y[e] = (T)(s * scale);
    }
  }
}

static of_status max_pool(const of_pool_desc *d, of_tensor *x, of_tensor *y, of_tensor *idx,
                          int64_t base) {
  int dev = use_device(of_dev(y));
  PoolGeo g = pool_geo(d);
  int64_t total = y->numel;
  if (total == 0) return OF_OK;
  return dispatch_fd(y->dtype, "max_pool", [&](auto z) -> of_status {
    typedef decltype(z) T;
    max_pool_k<T><<<blocks_for(total), kThreads, 0, current_stream(dev)>>>(
        g, total, (const T *)ptr(x), (T *)ptr(y), (int64_t *)ptr(idx), base);
    return launched("max_pool");
  });
}

static of_status avg_pool(const of_pool_desc *d, int32_t backward, of_tensor *x, of_tensor *y) {
  int dev = use_device(of_dev(y));
  PoolGeo g = pool_geo(d);
  cudaStream_t s = current_stream(dev);
  if (backward) OFC_TRY(cudaMemsetAsync(ptr(y), 0, y->numel * of_dtype_size(y->dtype), s),
                        "avg_pool_backward");
  int64_t total = backward ? x->numel : y->numel;
  if (total == 0) return OF_OK;
  return dispatch_fd(y->dtype, "avg_pool", [&](auto z) -> of_status {
    typedef decltype(z) T;
    avg_pool_k<T><<<blocks_for(total), kThreads, 0, s>>>(g, total, backward, (const T *)ptr(x),
                                                        (T *)ptr(y));
    return launched(backward ? "avg_pool_backward" : "avg_pool");
  });
}

template <typename T>
__global__ void pool_index_k(int scatter, int64_t total, int64_t in_sz, int64_t out_sz,
                             const T *src, const int64_t *idx, int64_t base, T *dst) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t plane = e / out_sz, j = idx[e] - base;
    if (j < 0 || j >= in_sz) continue;   // an empty window
    if (scatter) add_to(dst + plane * in_sz + j, src[e]);
    else dst[e] = src[plane * in_sz + j];
  }
}

static of_status pool_index(int32_t scatter, int64_t planes, int64_t in_sz, int64_t out_sz,
                            of_tensor *src, of_tensor *idx, int64_t base, of_tensor *dst) {
  int dev = use_device(of_dev(dst));
  cudaStream_t s = current_stream(dev);
  const char *op = scatter ? "max_pool_backward" : "max_pool_backward_backward";
  if (scatter) OFC_TRY(cudaMemsetAsync(ptr(dst), 0, dst->numel * of_dtype_size(dst->dtype), s), op);
  int64_t total = planes * out_sz;
  if (total == 0) return OF_OK;
  return dispatch_fd(dst->dtype, op, [&](auto z) -> of_status {
    typedef decltype(z) T;
    pool_index_k<T><<<blocks_for(total), kThreads, 0, s>>>(
        scatter, total, in_sz, out_sz, (const T *)ptr(src), (const int64_t *)ptr(idx), base,
        (T *)ptr(dst));
    return launched(op);
  });
}

// ---- cross entropy and nll ----

// Class targets are range-checked here, not on the host, so that the loss
// can be captured in a CUDA graph: a target that is neither a class nor
// ignore_index raises the device's bad-input flag (named by `code`, see
// flag_code) and counts as ignored.
struct LossArgs {
  int64_t N, C, S, ignore, base;
  double eps, wsum;   // wsum: 0 with class weights, summed by the kernel
  const int64_t *t;
  const double *w;
  int *flag;
  int code;
};

// The target of sample i as a class, or -1 (ignored or out of range; the
// forward kernels flag the latter).
__device__ __forceinline__ int64_t class_of(const LossArgs &a, int64_t i, bool report) {
  int64_t t = a.t[i];
  if (t == a.ignore) return -1;
  int64_t c = t - a.base;
  if ((uint64_t)c < (uint64_t)a.C) return c;
  if (report && a.flag) atomicCAS(a.flag, 0, a.code);
  return -1;
}

template <typename T> __device__ __forceinline__ double dexp(double v);
template <> __device__ __forceinline__ double dexp<float>(double v) { return (double)expf((float)v); }
template <> __device__ __forceinline__ double dexp<double>(double v) { return exp(v); }

template <typename T>
__global__ void ce_fwd_k(LossArgs a, const T *x, const T *q, double *lse, double *loss,
                         double *wt) {
  int64_t C = a.C, S = a.S, ns = a.N * S;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < ns;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t b = (i / S) * C * S + i % S;
    const T *xi = x + b;
    double m = -INFINITY, se = 0;
    for (int64_t c = 0; c < C; c++) m = fmax(m, (double)xi[c * S]);
    if (m == -INFINITY) m = 0;
    for (int64_t c = 0; c < C; c++) se += dexp<T>((double)xi[c * S] - m);
    double l = m + log(se), v = 0;
    int64_t ct;
    lse[i] = l;
    if (q) {
      const T *qi = q + b;
      for (int64_t c = 0; c < C; c++)
        v -= (a.w ? a.w[c] : 1.0) * ((1 - a.eps) * (double)qi[c * S] + a.eps / C) *
             ((double)xi[c * S] - l);
      wt[i] = 1;
    } else if ((ct = class_of(a, i, true)) < 0) {
      wt[i] = 0;
    } else {
      double wc = a.w ? a.w[ct] : 1.0;
      v = -(1 - a.eps) * wc * ((double)xi[ct * S] - l);
      if (a.eps > 0) {
        double sm = 0;
        for (int64_t c = 0; c < C; c++) sm += (a.w ? a.w[c] : 1.0) * ((double)xi[c * S] - l);
        v -= a.eps / C * sm;
      }
      wt[i] = wc;
    }
    loss[i] = v;
  }
}

template <typename T>
__global__ void ce_bwd_k(LossArgs a, const T *x, const T *q, const double *lse, const double *s,
                         T *gx, T *gq) {
  int64_t C = a.C, S = a.S, ns = a.N * S;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < ns;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t b = (i / S) * C * S + i % S;
    const T *xi = x + b;
    double l = lse[i], si = s[i];
    if (q) {
      const T *qi = q + b;
      double A = 0;
      for (int64_t c = 0; c < C; c++)
        A += (a.w ? a.w[c] : 1.0) * ((1 - a.eps) * (double)qi[c * S] + a.eps / C);
      for (int64_t c = 0; c < C; c++) {
        double wc = a.w ? a.w[c] : 1.0, lp = (double)xi[c * S] - l;
        double ac = wc * ((1 - a.eps) * (double)qi[c * S] + a.eps / C);
        if (gx) gx[b + c * S] = (T)(si * (A * dexp<T>(lp) - ac));
        if (gq) gq[b + c * S] = (T)(-si * (1 - a.eps) * wc * lp);
      }
      continue;
    }
    int64_t ct = class_of(a, i, false);
    if (ct < 0) {
      for (int64_t c = 0; c < C; c++) gx[b + c * S] = 0;
      continue;
    }
    double w_t = a.w ? a.w[ct] : 1.0, wsum = a.wsum;
    if (a.w && a.eps > 0)
      for (int64_t c = 0; c < C; c++) wsum += a.w[c];
    double A = (1 - a.eps) * w_t + a.eps / C * wsum;
    for (int64_t c = 0; c < C; c++) {
      double ac = a.eps / C * (a.w ? a.w[c] : 1.0) + (c == ct ? (1 - a.eps) * w_t : 0);
      gx[b + c * S] = (T)(si * (A * dexp<T>((double)xi[c * S] - l) - ac));
    }
  }
}

// A warp per sample where the classes are contiguous (S == 1) and many:
// the thread-per-sample kernels above read a whole row each, serially
// (vocabulary-sized rows). Same double arithmetic, summed as a warp tree.
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_fmax(double v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <typename T>
__global__ void ce_fwd_warp(LossArgs a, const T *x, const T *q, double *lse, double *loss,
                            double *wt) {
  const int lane = threadIdx.x & 31;
  const int64_t C = a.C, nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; i < a.N; i += nw) {
    const T *xi = x + i * C;
    double m = -INFINITY, se = 0, v = 0, wi = 1;
    for (int64_t c = lane; c < C; c += 32) m = fmax(m, (double)xi[c]);
    m = warp_fmax(m);
    if (m == -INFINITY) m = 0;
    for (int64_t c = lane; c < C; c += 32) se += dexp<T>((double)xi[c] - m);
    double l = m + log(warp_sum(se));
    if (q) {
      const T *qi = q + i * C;
      for (int64_t c = lane; c < C; c += 32)
        v -= (a.w ? a.w[c] : 1.0) * ((1 - a.eps) * (double)qi[c] + a.eps / C) * ((double)xi[c] - l);
      v = warp_sum(v);
    } else {
      int64_t ct = class_of(a, i, lane == 0);
      if (ct < 0) {
        wi = 0;
      } else {
        wi = a.w ? a.w[ct] : 1.0;
        v = -(1 - a.eps) * wi * ((double)xi[ct] - l);
        if (a.eps > 0) {
          double sm = 0;
          for (int64_t c = lane; c < C; c += 32) sm += (a.w ? a.w[c] : 1.0) * ((double)xi[c] - l);
          v -= a.eps / C * warp_sum(sm);
        }
      }
    }
    if (lane == 0) {
      lse[i] = l;
      loss[i] = v;
      wt[i] = wi;
    }
  }
}

template <typename T>
__global__ void ce_bwd_warp(LossArgs a, const T *x, const T *q, const double *lse, const double *s,
                            T *gx, T *gq) {
  const int lane = threadIdx.x & 31;
  const int64_t C = a.C, nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; i < a.N; i += nw) {
    const T *xi = x + i * C;
    double l = lse[i], si = s[i];
    if (q) {
      const T *qi = q + i * C;
      double A = 0;
      for (int64_t c = lane; c < C; c += 32)
        A += (a.w ? a.w[c] : 1.0) * ((1 - a.eps) * (double)qi[c] + a.eps / C);
      A = warp_sum(A);
      for (int64_t c = lane; c < C; c += 32) {
        double wc = a.w ? a.w[c] : 1.0, lp = (double)xi[c] - l;
        double ac = wc * ((1 - a.eps) * (double)qi[c] + a.eps / C);
        if (gx) gx[i * C + c] = (T)(si * (A * dexp<T>(lp) - ac));
        if (gq) gq[i * C + c] = (T)(-si * (1 - a.eps) * wc * lp);
      }
      continue;
    }
    int64_t ct = class_of(a, i, false);
    if (ct < 0) {
      for (int64_t c = lane; c < C; c += 32) gx[i * C + c] = 0;
      continue;
    }
    double w_t = a.w ? a.w[ct] : 1.0, wsum = 0;
    if (a.w && a.eps > 0)
      for (int64_t c = lane; c < C; c += 32) wsum += a.w[c];
    wsum = a.wsum + warp_sum(wsum);
    double A = (1 - a.eps) * w_t + a.eps / C * wsum;
    for (int64_t c = lane; c < C; c += 32) {
      double ac = a.eps / C * (a.w ? a.w[c] : 1.0) + (c == ct ? (1 - a.eps) * w_t : 0);
      gx[i * C + c] = (T)(si * (A * dexp<T>((double)xi[c] - l) - ac));
    }
  }
}

// the warp kernels: contiguous classes, and enough of them to fill a warp
static bool ce_by_warp(const of_loss_desc *d) { return d->S == 1 && d->C >= 32; }

static LossArgs loss_args(const of_loss_desc *d, of_tensor *t, of_tensor *w, int dev,
                          const char *op) {
  return LossArgs{d->N, d->C, d->S, d->ignore, d->base, d->eps, d->wsum,
                  t ? (const int64_t *)ptr(t) : nullptr, w ? (const double *)ptr(w) : nullptr,
                  error_flag(dev), flag_code(op, 3)};
}


static of_status cross_entropy(const of_loss_desc *d, of_tensor *x, of_tensor *t, of_tensor *q,
                               of_tensor *w, of_tensor *lse, of_tensor *loss, of_tensor *wt) {
  int dev = use_device(of_dev(x));
  int64_t ns = d->N * d->S;
  if (ns == 0) return OF_OK;
  LossArgs a = loss_args(d, t, w, dev, "cross_entropy");
  return dispatch_fd(x->dtype, "cross_entropy", [&](auto z) -> of_status {
    typedef decltype(z) T;
    if (ce_by_warp(d))
      ce_fwd_warp<T><<<blocks_for(ns * 32), kThreads, 0, current_stream(dev)>>>(
          a, (const T *)ptr(x), q ? (const T *)ptr(q) : nullptr, (double *)ptr(lse),
          (double *)ptr(loss), (double *)ptr(wt));
    else
      ce_fwd_k<T><<<blocks_for(ns), kThreads, 0, current_stream(dev)>>>(
          a, (const T *)ptr(x), q ? (const T *)ptr(q) : nullptr, (double *)ptr(lse),
          (double *)ptr(loss), (double *)ptr(wt));
    return launched("cross_entropy");
  });
}

static of_status cross_entropy_back(const of_loss_desc *d, of_tensor *x, of_tensor *t,
                                    of_tensor *q, of_tensor *w, of_tensor *lse, of_tensor *sc,
                                    of_tensor *gx, of_tensor *gq) {
  int dev = use_device(of_dev(x));
  int64_t ns = d->N * d->S;
  if (ns == 0) return OF_OK;
  LossArgs a = loss_args(d, t, w, dev, "cross_entropy");
  return dispatch_fd(x->dtype, "cross_entropy_backward", [&](auto z) -> of_status {
    typedef decltype(z) T;
    if (ce_by_warp(d))
      ce_bwd_warp<T><<<blocks_for(ns * 32), kThreads, 0, current_stream(dev)>>>(
          a, (const T *)ptr(x), q ? (const T *)ptr(q) : nullptr, (const double *)ptr(lse),
          (const double *)ptr(sc), gx ? (T *)ptr(gx) : nullptr, gq ? (T *)ptr(gq) : nullptr);
    else
      ce_bwd_k<T><<<blocks_for(ns), kThreads, 0, current_stream(dev)>>>(
          a, (const T *)ptr(x), q ? (const T *)ptr(q) : nullptr, (const double *)ptr(lse),
          (const double *)ptr(sc), gx ? (T *)ptr(gx) : nullptr, gq ? (T *)ptr(gq) : nullptr);
    return launched("cross_entropy_backward");
  });
}

template <typename T>
__global__ void nll_fwd_k(LossArgs a, const T *x, double *loss, double *wt) {
  int64_t C = a.C, S = a.S, ns = a.N * S;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < ns;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t ct = class_of(a, i, true);
    if (ct < 0) {
      loss[i] = wt[i] = 0;
      continue;
    }
    wt[i] = a.w ? a.w[ct] : 1.0;
    loss[i] = -wt[i] * (double)x[(i / S) * C * S + ct * S + i % S];
  }
}

template <typename T>
__global__ void nll_bwd_k(LossArgs a, const double *s, T *gx) {
  int64_t C = a.C, S = a.S, ns = a.N * S;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < ns;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t ct = class_of(a, i, false);
    if (ct < 0) continue;
    gx[(i / S) * C * S + ct * S + i % S] = (T)(-(a.w ? a.w[ct] : 1.0) * s[i]);
  }
}

static of_status nll_loss(const of_loss_desc *d, of_tensor *x, of_tensor *t, of_tensor *w,
                          of_tensor *loss, of_tensor *wt) {
  int dev = use_device(of_dev(x));
  int64_t ns = d->N * d->S;
  if (ns == 0) return OF_OK;
  LossArgs a = loss_args(d, t, w, dev, "nll_loss");
  return dispatch_fd(x->dtype, "nll_loss", [&](auto z) -> of_status {
    typedef decltype(z) T;
    nll_fwd_k<T><<<blocks_for(ns), kThreads, 0, current_stream(dev)>>>(
        a, (const T *)ptr(x), (double *)ptr(loss), (double *)ptr(wt));
    return launched("nll_loss");
  });
}

static of_status nll_loss_back(const of_loss_desc *d, of_tensor *t, of_tensor *w, of_tensor *sc,
                               of_tensor *gx) {
  int dev = use_device(of_dev(gx));
  cudaStream_t s = current_stream(dev);
  OFC_TRY(cudaMemsetAsync(ptr(gx), 0, gx->numel * of_dtype_size(gx->dtype), s),
          "nll_loss_backward");
  int64_t ns = d->N * d->S;
  if (ns == 0) return OF_OK;
  LossArgs a = loss_args(d, t, w, dev, "nll_loss");
  return dispatch_fd(gx->dtype, "nll_loss_backward", [&](auto z) -> of_status {
    typedef decltype(z) T;
    nll_bwd_k<T><<<blocks_for(ns), kThreads, 0, s>>>(a, (const double *)ptr(sc), (T *)ptr(gx));
    return launched("nll_loss_backward");
  });
}

// ---- interpolate ----

struct InterpGeo {
  int64_t in[3], out[3];
  const int64_t *i0[3], *i1[3];
  const double *l0[3], *l1[3];
};

static InterpGeo interp_geo(const int64_t *in, const int64_t *out, of_tensor *tab,
                            of_tensor *wts) {
  InterpGeo g;
  const int64_t *ti = (const int64_t *)ptr(tab);
  const double *tw = (const double *)ptr(wts);
  for (int d = 0; d < 3; d++) {
    g.in[d] = in[d], g.out[d] = out[d];
    g.i0[d] = ti, g.i1[d] = ti + out[d];
    g.l0[d] = tw, g.l1[d] = tw + out[d];
    ti += 2 * out[d];
    tw += 2 * out[d];
  }
  return g;
}

// one output element per thread: nearest copies, linear blends 8 corners
// (weights of 0 skipped); backward adds the weighted grad to the corners
template <typename T>
__global__ void interp_k(InterpGeo g, int64_t total, int linear, int backward, const T *x,
                         T *y) {
  int64_t in_sz = g.in[0] * g.in[1] * g.in[2];
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t ow = e % g.out[2], r = e / g.out[2], oh = r % g.out[1];
    r /= g.out[1];
    int64_t od = r % g.out[0], plane = r / g.out[0];
    int64_t o[3] = {od, oh, ow};
    if (!linear) {
      int64_t src = (g.i0[0][od] * g.in[1] + g.i0[1][oh]) * g.in[2] + g.i0[2][ow];
      if (backward) add_to(y + plane * in_sz + src, x[e]);
      else y[e] = x[plane * in_sz + src];
      continue;
    }
    typedef typename Acc<T>::type A;
    A acc = 0, gv = backward ? (A)x[e] : (A)0;
    for (int c = 0; c < 8; c++) {
      double wgt = 1;
      int64_t idx[3];
      for (int d = 0; d < 3; d++) {
        bool hi = (c >> (2 - d)) & 1;
        wgt *= hi ? g.l1[d][o[d]] : g.l0[d][o[d]];
        idx[d] = hi ? g.i1[d][o[d]] : g.i0[d][o[d]];
      }
      if (wgt == 0) continue;
      int64_t src = plane * in_sz + (idx[0] * g.in[1] + idx[1]) * g.in[2] + idx[2];
      if (backward) add_to(y + src, (T)(gv * (A)wgt));
      else acc += (A)wgt * (A)x[src];
    }
    if (!backward) y[e] = (T)acc;
  }
}

static of_status interpolate(int32_t backward, int32_t linear, int64_t NC, const int64_t *in,
                             const int64_t *out, of_tensor *tab, of_tensor *wts, of_tensor *x,
                             of_tensor *y) {
  int dev = use_device(of_dev(y));
  cudaStream_t s = current_stream(dev);
  const char *op = backward ? "interpolate_backward" : "interpolate";
  if (backward) OFC_TRY(cudaMemsetAsync(ptr(y), 0, y->numel * of_dtype_size(y->dtype), s), op);
  InterpGeo g = interp_geo(in, out, tab, wts);
  int64_t total = NC * out[0] * out[1] * out[2];
  if (total == 0) return OF_OK;
  if (!linear && !backward) {   // nearest forward: any dtype, a bit copy
    switch (of_dtype_size(y->dtype)) {
      case 1: interp_k<uint8_t><<<blocks_for(total), kThreads, 0, s>>>(
                  g, total, 0, 0, (const uint8_t *)ptr(x), (uint8_t *)ptr(y)); break;
      case 2: interp_k<uint16_t><<<blocks_for(total), kThreads, 0, s>>>(
                  g, total, 0, 0, (const uint16_t *)ptr(x), (uint16_t *)ptr(y)); break;
      case 4: interp_k<uint32_t><<<blocks_for(total), kThreads, 0, s>>>(
                  g, total, 0, 0, (const uint32_t *)ptr(x), (uint32_t *)ptr(y)); break;
      default: interp_k<uint64_t><<<blocks_for(total), kThreads, 0, s>>>(
                  g, total, 0, 0, (const uint64_t *)ptr(x), (uint64_t *)ptr(y)); break;
    }
    return launched(op);
  }
  return dispatch_fd(y->dtype, op, [&](auto z) -> of_status {
    typedef decltype(z) T;
    interp_k<T><<<blocks_for(total), kThreads, 0, s>>>(g, total, linear, backward,
                                                       (const T *)ptr(x), (T *)ptr(y));
    return launched(op);
  });
}

// ---- pad ----

struct PadGeo {
  int k;
  int64_t in[OF_MAX_DIMS], out[OF_MAX_DIMS];
  const int64_t *map[OF_MAX_DIMS];
};

// one output element per thread; backward adds it to its source
template <typename T>
__global__ void pad_k(PadGeo g, int64_t total, int backward, T value, const T *x, T *y) {
  int64_t in_blk = 1, out_blk = 1;
  for (int j = 0; j < g.k; j++) in_blk *= g.in[j], out_blk *= g.out[j];
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t rem = e % out_blk, b = e / out_blk, src = 0, stride = 1;
    bool inside = true;
    for (int j = g.k - 1; j >= 0; j--) {
      int64_t o = rem % g.out[j], m = g.map[j][o];
      rem /= g.out[j];
      if (m < 0) inside = false;
      src += m * stride;
      stride *= g.in[j];
    }
    if (backward) {
      if (inside) add_to(y + b * in_blk + src, x[e]);
    } else {
      y[e] = inside ? x[b * in_blk + src] : value;
    }
  }
}

static of_status pad(int32_t backward, int32_t k, int64_t B, const int64_t *in,
                     const int64_t *out, of_tensor *map, double value, of_tensor *x,
                     of_tensor *y) {
  int dev = use_device(of_dev(y));
  cudaStream_t s = current_stream(dev);
  const char *op = backward ? "pad_backward" : "pad";
  if (k < 1 || k > OF_MAX_DIMS) return of_fail(OF_ERR_ARG, "%s: %d padded dims", op, (int)k);
  if (backward) OFC_TRY(cudaMemsetAsync(ptr(y), 0, y->numel * of_dtype_size(y->dtype), s), op);
  PadGeo g;
  g.k = k;
  const int64_t *m = (const int64_t *)ptr(map);
  int64_t total = B;
  for (int j = 0; j < k; j++) {
    g.in[j] = in[j], g.out[j] = out[j], g.map[j] = m;
    m += out[j];
    total *= out[j];
  }
  if (total == 0) return OF_OK;
  if (backward)
    return dispatch_fd(y->dtype, op, [&](auto z) -> of_status {
      typedef decltype(z) T;
      pad_k<T><<<blocks_for(total), kThreads, 0, s>>>(g, total, 1, T(0), (const T *)ptr(x),
                                                      (T *)ptr(y));
      return launched(op);
    });
  // forward: a bit copy by element size; the fill value in the dtype's bits
  uint64_t bits = 0;
  of_store_double(&bits, y->dtype, value);
  switch (of_dtype_size(y->dtype)) {
    case 1: pad_k<uint8_t><<<blocks_for(total), kThreads, 0, s>>>(
                g, total, 0, (uint8_t)bits, (const uint8_t *)ptr(x), (uint8_t *)ptr(y)); break;
    case 2: pad_k<uint16_t><<<blocks_for(total), kThreads, 0, s>>>(
                g, total, 0, (uint16_t)bits, (const uint16_t *)ptr(x), (uint16_t *)ptr(y)); break;
    case 4: pad_k<uint32_t><<<blocks_for(total), kThreads, 0, s>>>(
                g, total, 0, (uint32_t)bits, (const uint32_t *)ptr(x), (uint32_t *)ptr(y)); break;
    default: pad_k<uint64_t><<<blocks_for(total), kThreads, 0, s>>>(
                g, total, 0, bits, (const uint64_t *)ptr(x), (uint64_t *)ptr(y)); break;
  }
  return launched(op);
}

void register_nn(of_device_ops *ops) {
  ops->max_pool = max_pool;
  ops->avg_pool = avg_pool;
  ops->pool_index = pool_index;
  ops->cross_entropy = cross_entropy;
  ops->cross_entropy_back = cross_entropy_back;
  ops->nll_loss = nll_loss;
  ops->nll_loss_back = nll_loss_back;
  ops->interpolate = interpolate;
  ops->pad = pad;
}

}  // namespace ofc
