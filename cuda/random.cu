// random.cu -- Philox4x32-10 fills with core/ops/random.c's stream: element i
// (logical row-major order) of a fill that reserved blocks from `offset`
// takes its bits from block offset + i / per_block, exactly as on the CPU,
// so a seed gives the same numbers on both devices (normal_ up to the last
// bits of the device's double log/sin/cos).
#include "common.cuh"
#include "kernels.cuh"

namespace ofc {

__device__ __forceinline__ uint64_t word64(const uint32_t *w, int lane) {
  return (uint64_t)w[2 * lane] | (uint64_t)w[2 * lane + 1] << 32;
}
__device__ __forceinline__ double u24(uint32_t x) { return (double)(x >> 8) * 0x1p-24; }
__device__ __forceinline__ double u53(uint64_t x) { return (double)(x >> 11) * 0x1p-53; }

struct RandArgs {
  int dist;
  double p0, p1, p2;
  uint32_t k0, k1;
  uint64_t offset;
  of_dtype dt;
};

// the value of logical element i, in double, rounded like the CPU's generator
__device__ __forceinline__ double rand_value(const RandArgs &a, int64_t i) {
  uint32_t w[4];
  if (a.dist == 0) {   // uniform
    double span = a.p1 - a.p0, v;
    if (a.dt == OF_FLOAT64) {
      philox(a.offset + (uint64_t)(i >> 1), a.k0, a.k1, w);
      v = a.p0 + u53(word64(w, (int)(i & 1))) * span;
    } else {
      philox(a.offset + (uint64_t)(i >> 2), a.k0, a.k1, w);
      float f = (float)(a.p0 + u24(w[i & 3]) * span);
      if (a.dt == OF_FLOAT16) f = __half2float(__float2half_rn(f));
      else if (a.dt == OF_BFLOAT16) f = __bfloat162float(__float2bfloat16_rn(f));
      v = f;
    }
    return v >= a.p1 ? a.p2 : v;
  }
  if (a.dist == 1) {   // normal: block i / 2 gives elements 2p, 2p + 1
    philox(a.offset + (uint64_t)(i >> 1), a.k0, a.k1, w);
    double u1 = (double)((word64(w, 0) >> 11) + 1) * 0x1p-53, u2 = u53(word64(w, 1));
    double r = sqrt(-2.0 * log(u1)), th = 6.283185307179586476925 * u2;
    return a.p0 + a.p1 * ((i & 1) ? r * sin(th) : r * cos(th));
  }
  philox(a.offset + (uint64_t)(i >> 1), a.k0, a.k1, w);   // bernoulli
  return u53(word64(w, (int)(i & 1))) < a.p0 ? 1.0 : 0.0;
}

template <typename T>
__global__ void rand_kernel(RandArgs a, int64_t n, Offsets<1> o, T *out) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[1];
    o.get(i, off);
    out[off[0]] = Cvt<T, double>::go(rand_value(a, i));
  }
}

static of_status random(of_tensor *t, int32_t dist, const double *p, uint64_t seed,
                        uint64_t offset) {
  int64_t n = t->numel;
  if (n == 0) return OF_OK;
  int dev = use_device(of_dev(t));
  cudaStream_t s = current_stream(dev);
  const of_tensor *all[1] = {t};
  Offsets<1> o = make_offsets<1>(t, all);
  // make_offsets drops size-1 dims and merges runs: logical order is kept
  RandArgs a{dist, p[0], p[1], p[2], (uint32_t)seed, (uint32_t)(seed >> 32), offset, t->dtype};
  return dispatch_all(t->dtype, [&](auto z) -> of_status {
    typedef decltype(z) T;
    rand_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(a, n, o, (T *)ptr(t));
    return launched("random");
  });
}

// dropout: element i keeps when word i % 4 of block offset + i / 4 is >= thr
// (core/ops/random.c's dropout, the CPU's masks); each thread draws one block.
// Kept values: x * scale in float (double for double), as the CPU rounds them.
template <typename T> struct DropMul {
  __device__ static T go(T x, double s) { return Cvt<T, float>::go(Cvt<float, T>::go(x) * (float)s); }
};
template <> struct DropMul<double> {
  __device__ static double go(double x, double s) { return x * s; }
};
template <typename T>
__global__ void dropout_kernel(const T *x, T *y, bool *mask, int64_t n, uint32_t k0,
                               uint32_t k1, uint64_t offset, uint64_t thr, double s) {
  for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; 4 * b < n;
       b += (int64_t)gridDim.x * blockDim.x) {
    uint32_t w[4];
    philox(offset + (uint64_t)b, k0, k1, w);
    for (int q = 0; q < 4 && 4 * b + q < n; q++) {
      int64_t i = 4 * b + q;
      bool keep = (uint64_t)w[q] >= thr;
      mask[i] = keep;
      y[i] = keep ? DropMul<T>::go(x[i], s) : Cvt<T, float>::go(0.0f);
    }
  }
}

static of_status dropout(of_tensor *x, double p, uint64_t seed, uint64_t offset, of_tensor *y,
                         of_tensor *mask) {
  int64_t n = x->numel;
  if (n == 0) return OF_OK;
  int dev = use_device(of_dev(x));
  cudaStream_t st = current_stream(dev);
  uint64_t thr = of_dropout_threshold(p);
  double s = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  int64_t blocks = (n + 3) / 4;
  return dispatch_float(x->dtype, "dropout", [&](auto z) -> of_status {
    typedef decltype(z) T;
    dropout_kernel<T><<<blocks_for(blocks), kThreads, 0, st>>>(
        (const T *)ptr(x), (T *)ptr(y), (bool *)ptr(mask), n, k0, k1, offset, thr, s);
    return launched("dropout");
  });
}

void register_random(of_device_ops *ops) {
  ops->random = random;
  ops->dropout = dropout;
}

}  // namespace ofc
