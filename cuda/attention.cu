// attention.cu -- scaled_dot_product_attention on the device, with the CPU
// kernel's rule (core/ops/attention.c): no [L, S] score matrix; the forward
// keeps the rows' logsumexp, the backward recomputes the scores from it.
// One warp per query row: a first pass over the keys (32 at a time, a key
// per lane) finds the row's maximum and sum with an online softmax; a second
// pass recomputes each chunk's weights into shared memory and the lanes add
// them times v over the value columns. The backward walks the keys the same
// way; dk and dv rows are shared by every query, so they are added with
// atomics (float32 sums may differ from the CPU's in the last bits).
// Dropout draws the CPU's numbers: element (bh * L + i) * S + j of the
// stream (seed, offset), four float32 uniforms per Philox block.
#include "common.cuh"
#include "kernels.cuh"

namespace ofc {

constexpr int kWarps = 4;   // query rows per thread block
constexpr int kMaxDim = 512;   // E and Ev held in shared memory

struct SdpaArgs {
  int64_t BH, L, S, E, Ev, group, msl, mss;
  double scale, p;
  uint32_t k0, k1;
  uint64_t offset;
  int causal, mkind;
  const void *mask;
  const int64_t *moff;
};

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename T>
__device__ __forceinline__ T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) {
    T w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v || w != w ? w : v;
  }
  return v;
}

// the scaled, masked score of (bh, i, j); -inf where masked
template <typename T>
__device__ T score(const SdpaArgs &a, int64_t bh, int64_t i, int64_t j, const T *qs,
                   const T *K) {
  if (a.causal && j > i) return -INFINITY;
  T s = 0;
  const T *kr = K + j * a.E;
  for (int64_t e = 0; e < a.E; e++) s += qs[e] * kr[e];
  if (a.mkind == 1) {
    if (!((const uint8_t *)a.mask)[a.moff[bh] + i * a.msl + j * a.mss]) return -INFINITY;
  } else if (a.mkind == 2) {
    s += ((const T *)a.mask)[a.moff[bh] + i * a.msl + j * a.mss];
  }
  return s;
}

// the dropout factor of (bh, i, j): 0 or 1 / (1 - p)
__device__ __forceinline__ double keep(const SdpaArgs &a, int64_t bh, int64_t i, int64_t j) {
  if (a.p <= 0) return 1;
  uint64_t e = (uint64_t)((bh * a.L + i) * a.S + j);
  uint32_t w[4];
  philox(a.offset + e / 4, a.k0, a.k1, w);
  float u = (float)((double)(w[e % 4] >> 8) * 0x1p-24);
  return u >= (float)a.p ? 1.0 / (1.0 - a.p) : 0.0;
}

template <typename T>
__global__ void sdpa_fwd_k(SdpaArgs a, const T *q, const T *k, const T *v, T *o, T *lse) {
  __shared__ T qsh[kWarps][kMaxDim];
  __shared__ T psh[kWarps][32];
  int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t row = (int64_t)blockIdx.x * kWarps + w;
  if (row >= a.BH * a.L) return;
  int64_t bh = row / a.L, i = row % a.L, kv = bh / a.group;
  const T *K = k + kv * a.S * a.E, *V = v + kv * a.S * a.Ev;
  T *qs = qsh[w];
  for (int64_t e = lane; e < a.E; e += 32) qs[e] = q[row * a.E + e] * (T)a.scale;
  __syncwarp();
  int64_t S = a.causal ? min(a.S, i + 1) : a.S;
  T m = -INFINITY, l = 0;
  for (int64_t j = lane; j < S; j += 32) {
    T s = score(a, bh, i, j, qs, K);
    T mn = s > m || s != s ? s : m;
    if (mn != -INFINITY) l = l * exp(m - mn) + exp(s - mn);
    m = mn;
  }
  T M = warp_max(m);
  T part = M == -INFINITY || m == -INFINITY ? (T)0 : l * exp(m - M);
  T Lsum = warp_sum(part);
  T ls = M + log(Lsum);
  if (lane == 0) lse[row] = ls;
  // out = sum_j p_j v_j, p_j = exp(s_j - lse) (NaN rows: every key masked)
  for (int64_t c0 = 0; c0 < a.Ev; c0 += 32 * 8) {
    T acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j0 = 0; j0 < S; j0 += 32) {
      int64_t j = j0 + lane;
      T p = 0;
      if (j < S) {
        T s = score(a, bh, i, j, qs, K);
        p = s == -INFINITY ? (T)0 : exp(s - ls) * (T)keep(a, bh, i, j);
      }
      psh[w][lane] = p;
      __syncwarp();
      int64_t n = min((int64_t)32, S - j0);
      for (int t = 0; t < n; t++) {
        T pt = psh[w][t];
        const T *vr = V + (j0 + t) * a.Ev;
        for (int r = 0; r < 8; r++) {
          int64_t c = c0 + r * 32 + lane;
          if (c < a.Ev) acc[r] += pt * vr[c];
        }
      }
      __syncwarp();
    }
    for (int r = 0; r < 8; r++) {
      int64_t c = c0 + r * 32 + lane;
      if (c < a.Ev) o[row * a.Ev + c] = Lsum == 0 ? (T)NAN : acc[r];
    }
  }
}

template <typename T>
__global__ void sdpa_bwd_k(SdpaArgs a, const T *q, const T *k, const T *v, const T *o,
                           const T *go, const T *lse, T *gq, T *gk, T *gv) {
  __shared__ T qsh[kWarps][kMaxDim];
  __shared__ T gsh[kWarps][kMaxDim];
  __shared__ T dsh[kWarps][32];
  int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t row = (int64_t)blockIdx.x * kWarps + w;
  if (row >= a.BH * a.L) return;
  int64_t bh = row / a.L, i = row % a.L, kv = bh / a.group;
  const T *K = k + kv * a.S * a.E, *V = v + kv * a.S * a.Ev;
  T *qs = qsh[w], *g = gsh[w];
  for (int64_t e = lane; e < a.E; e += 32) qs[e] = q[row * a.E + e] * (T)a.scale;
  T dd = 0;
  for (int64_t e = lane; e < a.Ev; e += 32) {
    g[e] = go[row * a.Ev + e];
    dd += g[e] * o[row * a.Ev + e];
  }
  T D = warp_sum(dd), ls = lse[row];
  __syncwarp();
  int64_t S = a.causal ? min(a.S, i + 1) : a.S;
  for (int64_t e = lane; e < a.E; e += 32) gq[row * a.E + e] = 0;
  if (ls == -INFINITY) return;   // no key: no grad
  for (int64_t j0 = 0; j0 < S; j0 += 32) {
    int64_t j = j0 + lane;
    T ds = 0;
    if (j < S) {
      T s = score(a, bh, i, j, qs, K);
      T p = s == -INFINITY ? (T)0 : exp(s - ls);
      T kf = (T)keep(a, bh, i, j);
      T dp = 0;
      const T *vr = V + j * a.Ev;
      for (int64_t c = 0; c < a.Ev; c++) dp += g[c] * vr[c];
      ds = p * (dp * kf - D);
      T pd = p * kf;
      T *gvr = gv + (kv * a.S + j) * a.Ev;
      if (pd != 0)
        for (int64_t c = 0; c < a.Ev; c++) atomicAdd(gvr + c, pd * g[c]);
      T *gkr = gk + (kv * a.S + j) * a.E;
      if (ds != 0)
        for (int64_t e = 0; e < a.E; e++) atomicAdd(gkr + e, ds * qs[e]);
    }
    dsh[w][lane] = ds;
    __syncwarp();
    int64_t n = min((int64_t)32, S - j0);
    for (int64_t e = lane; e < a.E; e += 32) {
      T acc = 0;
      for (int t = 0; t < n; t++) acc += dsh[w][t] * K[(j0 + t) * a.E + e];
      gq[row * a.E + e] += acc * (T)a.scale;
    }
    __syncwarp();
  }
}

template <typename T>
__global__ void zero_k(T *p, int64_t n) {
  int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (x < n) p[x] = 0;
}

static of_status sdpa_args(const of_sdpa_desc *d, of_tensor *mask, of_tensor *moff,
                           SdpaArgs *a) {
  if (d->E > kMaxDim || d->Ev > kMaxDim)
    return of_fail(OF_ERR_SHAPE, "scaled_dot_product_attention: on CUDA the head dims must be "
                   "at most %d, got E = %lld, Ev = %lld", kMaxDim, (long long)d->E,
                   (long long)d->Ev);
  *a = SdpaArgs{d->BH, d->L, d->S, d->E, d->Ev, d->group, d->msl, d->mss, d->scale, d->p,
                (uint32_t)d->seed, (uint32_t)(d->seed >> 32), d->offset, d->causal, d->mkind,
                mask ? (const void *)ptr(mask) : nullptr,
                moff ? (const int64_t *)ptr(moff) : nullptr};
  return OF_OK;
}

template <typename F>
static of_status dispatch_fd(of_dtype dt, F &&f) {
  if (dt == OF_FLOAT32) return f((float)0);
  if (dt == OF_FLOAT64) return f((double)0);
  return of_fail(OF_ERR_DTYPE, "scaled_dot_product_attention: expected float32 or float64 "
                 "from the core, got %s", of_dtype_name(dt));
}

static of_status sdpa(const of_sdpa_desc *d, of_tensor *q, of_tensor *k, of_tensor *v,
                      of_tensor *mask, of_tensor *moff, of_tensor *o, of_tensor *lse) {
  int dev = use_device(of_dev(q));
  SdpaArgs a;
  OF_CHECK(sdpa_args(d, mask, moff, &a));
  int64_t rows = d->BH * d->L;
  if (rows == 0) return OF_OK;
  return dispatch_fd(q->dtype, [&](auto z) -> of_status {
    typedef decltype(z) T;
    sdpa_fwd_k<T><<<(unsigned)((rows + kWarps - 1) / kWarps), 32 * kWarps, 0,
                    current_stream(dev)>>>(a, (const T *)ptr(q), (const T *)ptr(k),
                                           (const T *)ptr(v), (T *)ptr(o), (T *)ptr(lse));
    return launched("scaled_dot_product_attention");
  });
}

static of_status sdpa_back(const of_sdpa_desc *d, of_tensor *q, of_tensor *k, of_tensor *v,
                           of_tensor *mask, of_tensor *moff, of_tensor *o, of_tensor *go,
                           of_tensor *lse, of_tensor *gq, of_tensor *gk, of_tensor *gv) {
  int dev = use_device(of_dev(q));
  SdpaArgs a;
  OF_CHECK(sdpa_args(d, mask, moff, &a));
  int64_t rows = d->BH * d->L;
  cudaStream_t s = current_stream(dev);
  return dispatch_fd(q->dtype, [&](auto z) -> of_status {
    typedef decltype(z) T;
    if (gk->numel) zero_k<T><<<blocks_for(gk->numel), kThreads, 0, s>>>((T *)ptr(gk), gk->numel);
    if (gv->numel) zero_k<T><<<blocks_for(gv->numel), kThreads, 0, s>>>((T *)ptr(gv), gv->numel);
    if (rows)
      sdpa_bwd_k<T><<<(unsigned)((rows + kWarps - 1) / kWarps), 32 * kWarps, 0, s>>>(
          a, (const T *)ptr(q), (const T *)ptr(k), (const T *)ptr(v), (const T *)ptr(o),
          (const T *)ptr(go), (const T *)ptr(lse), (T *)ptr(gq), (T *)ptr(gk), (T *)ptr(gv));
    return launched("scaled_dot_product_attention_backward");
  });
}

void register_attention(of_device_ops *ops) {
  ops->sdpa = sdpa;
  ops->sdpa_back = sdpa_back;
}

}  // namespace ofc
