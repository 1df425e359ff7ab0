// common.cuh -- what the CUDA kernel files share: the core's headers, error
// reporting, the current stream, dtype dispatch and strided indexing.
#pragma once
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>
extern "C" {
#include "device.h"
}

namespace ofc {

// ---- errors (runtime.cu) ----
// Fails with the CUDA error text and the op; returns the status to return.
of_status cuda_fail(cudaError_t e, const char *op, const char *what);
#define OFC_TRY(call, op)                                          \
  do {                                                             \
    cudaError_t e_ = (call);                                       \
    if (e_ != cudaSuccess) return ::ofc::cuda_fail(e_, op, #call); \
  } while (0)
// After a launch: a launch error is reported now, with the op.
of_status launched(const char *op);
// The op of the latest launch, for asynchronous error reports.
void note_launch(const char *op);
// Device-side flag for bad input met inside kernels (integer division by
// zero, ...), reported at the next synchronising call.
int *error_flag(int dev);
// The value a kernel stores in the flag for `reason` (1 division by zero,
// 2 negative power, 3 index out of range) so that the report names `op`
// (a string that lives as long as the library), whatever ran after it.
int flag_code(const char *op, int reason);

// ---- streams (runtime.cu) ----
cudaStream_t current_stream(int dev);
// Replaces this thread's current stream of a device (CUDA graph capture).
void set_current_stream(int dev, cudaStream_t s);
// Makes the tensor's device current for this thread (initialising it on
// first use); returns its index. A failure is reported by the next
// launched() (the op that needed the device).
int use_device(of_device d);
// CUDA graph capture on device d began / ended (graph.cu): frees of memory
// allocated before it are held back until its end, then queued on `prev`.
void capture_began(int d);
void capture_ended(int d, cudaStream_t prev);

// ---- launch shapes ----
constexpr int kThreads = 256;
inline int blocks_for(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b > 65535LL * 32) b = 65535LL * 32;   // grid-stride loops cover the rest
  return b < 1 ? 1 : (int)b;
}

// ---- strided indexing: up to OF_MAX_DIMS dims, up to 4 operands ----
template <int N>
struct Offsets {
  int32_t ndim;
  int64_t shape[OF_MAX_DIMS];
  int64_t strides[N][OF_MAX_DIMS];   // elements; 0 on broadcast dims
  __device__ __forceinline__ void get(int64_t i, int64_t *off) const {
#pragma unroll
    for (int k = 0; k < N; k++) off[k] = 0;
    for (int d = ndim - 1; d >= 0; d--) {
      int64_t s = shape[d], q = i / s, r = i - q * s;
      i = q;
#pragma unroll
      for (int k = 0; k < N; k++) off[k] += r * strides[k][d];
    }
  }
};

// Operand k broadcast to shape `out` (right-aligned, stride 0 on size-1 dims);
// dims of size 1 in the output are dropped and contiguous runs merged.
// by_layout: walk the dims in operand 0's memory order (largest stride
// first), so that operands sharing a permuted dense layout (channels-last)
// merge into one linear run; only for elementwise work, where the order of
// visiting does not matter (random fills keep the logical order).
template <int N>
inline Offsets<N> make_offsets(const of_tensor *out, const of_tensor *const *ops,
                               bool by_layout = false) {
  Offsets<N> o;
  int32_t nd = out->ndim, k = 0;
  for (int32_t d = 0; d < nd; d++) {
    if (out->shape[d] == 1) continue;
    o.shape[k] = out->shape[d];
    for (int j = 0; j < N; j++) {
      const of_tensor *t = ops[j];
      int32_t td = d - (nd - t->ndim);
      o.strides[j][k] = td >= 0 && t->shape[td] != 1 ? t->strides[td] : 0;
    }
    k++;
  }
  for (int32_t i = 1; by_layout && i < k; i++)
    for (int32_t j = i; j > 0 && o.strides[0][j - 1] < o.strides[0][j]; j--) {
      int64_t t = o.shape[j]; o.shape[j] = o.shape[j - 1]; o.shape[j - 1] = t;
      for (int q = 0; q < N; q++) {
        int64_t u = o.strides[q][j]; o.strides[q][j] = o.strides[q][j - 1]; o.strides[q][j - 1] = u;
      }
    }
  // merge dim k-1 into k when every operand is contiguous across them
  int32_t m = 0;
  for (int32_t d = 0; d < k; d++) {
    if (m > 0) {
      bool ok = true;
      for (int j = 0; j < N && ok; j++)
        ok = o.strides[j][m - 1] == o.strides[j][d] * o.shape[d];
      if (ok) {
        o.shape[m - 1] *= o.shape[d];
        for (int j = 0; j < N; j++) o.strides[j][m - 1] = o.strides[j][d];
        continue;
      }
    }
    o.shape[m] = o.shape[d];
    for (int j = 0; j < N; j++) o.strides[j][m] = o.strides[j][d];
    m++;
  }
  o.ndim = m;
  return o;
}

// True when every operand is laid out densely like the output (no broadcast).
template <int N>
inline bool all_linear(const Offsets<N> &o) {
  if (o.ndim > 1) return false;
  for (int j = 0; j < N; j++)
    if (o.ndim == 1 && o.strides[j][0] != 1) return false;
  return true;
}

inline char *ptr(const of_tensor *t) { return of_ptr(t); }

// ---- dtypes ----
typedef __half half_t;
typedef __nv_bfloat16 bf16_t;

template <typename T> __device__ __forceinline__ float to_f(T v) { return (float)v; }
template <> __device__ __forceinline__ float to_f<half_t>(half_t v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<bf16_t>(bf16_t v) { return __bfloat162float(v); }

// Conversion with the CPU's rules: float -> int saturates (NaN -> 0), any
// value -> bool is `!= 0`, halves round to nearest even.
template <typename TO, typename TI> struct Cvt {
  __device__ __forceinline__ static TO go(TI v) { return (TO)v; }
};
template <typename TI> struct Cvt<bool, TI> {
  __device__ __forceinline__ static bool go(TI v) { return v != (TI)0; }
};
template <> struct Cvt<bool, half_t> {
  __device__ __forceinline__ static bool go(half_t v) { return __half2float(v) != 0.f; }
};
template <> struct Cvt<bool, bf16_t> {
  __device__ __forceinline__ static bool go(bf16_t v) { return __bfloat162float(v) != 0.f; }
};
template <typename TI> struct Cvt<half_t, TI> {
  __device__ __forceinline__ static half_t go(TI v) { return __float2half_rn((float)v); }
};
template <> struct Cvt<half_t, double> {
  __device__ __forceinline__ static half_t go(double v) { return __double2half(v); }
};
template <typename TI> struct Cvt<bf16_t, TI> {
  __device__ __forceinline__ static bf16_t go(TI v) { return __float2bfloat16_rn((float)v); }
};
template <> struct Cvt<bf16_t, double> {
  __device__ __forceinline__ static bf16_t go(double v) { return __double2bfloat16(v); }
};
template <> struct Cvt<half_t, half_t> {
  __device__ __forceinline__ static half_t go(half_t v) { return v; }
};
template <> struct Cvt<bf16_t, bf16_t> {
  __device__ __forceinline__ static bf16_t go(bf16_t v) { return v; }
};
template <> struct Cvt<half_t, bf16_t> {
  __device__ __forceinline__ static half_t go(bf16_t v) { return __float2half_rn(__bfloat162float(v)); }
};
template <> struct Cvt<bf16_t, half_t> {
  __device__ __forceinline__ static bf16_t go(half_t v) { return __float2bfloat16_rn(__half2float(v)); }
};
// from halves to non-half types: through float
#define OFC_FROM_HALF(TO)                                                          \
  template <> struct Cvt<TO, half_t> {                                             \
    __device__ __forceinline__ static TO go(half_t v) { return Cvt<TO, float>::go(__half2float(v)); } \
  };                                                                               \
  template <> struct Cvt<TO, bf16_t> {                                             \
    __device__ __forceinline__ static TO go(bf16_t v) { return Cvt<TO, float>::go(__bfloat162float(v)); } \
  };
// float -> int: saturate, NaN -> 0 (the CPU's to_i64 then a narrowing cast)
template <typename TO, typename TF>
__device__ __forceinline__ TO sat_int(TF v) {
  if (v != v) return 0;
  if (v >= (TF)9.2233720368547758e18) return (TO)INT64_MAX;
  if (v <= (TF)-9.2233720368547758e18) return (TO)INT64_MIN;
  return (TO)(int64_t)v;
}
#define OFC_FLOAT_TO_INT(TO)                                                        \
  template <> struct Cvt<TO, float> {                                               \
    __device__ __forceinline__ static TO go(float v) { return sat_int<TO>(v); }     \
  };                                                                                \
  template <> struct Cvt<TO, double> {                                              \
    __device__ __forceinline__ static TO go(double v) { return sat_int<TO>(v); }    \
  };
OFC_FLOAT_TO_INT(uint8_t)
OFC_FLOAT_TO_INT(int8_t)
OFC_FLOAT_TO_INT(int32_t)
OFC_FLOAT_TO_INT(int64_t)
OFC_FROM_HALF(uint8_t)
OFC_FROM_HALF(int8_t)
OFC_FROM_HALF(int32_t)
OFC_FROM_HALF(int64_t)
OFC_FROM_HALF(float)
OFC_FROM_HALF(double)

// Calls F.template operator()<T>() for the C type of a dtype.
template <typename F>
inline of_status dispatch_all(of_dtype dt, F &&f) {
  switch (dt) {
    case OF_BOOL: return f((bool)0);
    case OF_UINT8: return f((uint8_t)0);
    case OF_INT8: return f((int8_t)0);
    case OF_INT32: return f((int32_t)0);
    case OF_INT64: return f((int64_t)0);
    case OF_FLOAT16: return f(half_t());
    case OF_BFLOAT16: return f(bf16_t());
    case OF_FLOAT32: return f((float)0);
    case OF_FLOAT64: return f((double)0);
    // int16, uint16, uint32, uint64 have CPU kernels only (doc/cuda.md)
    default: return of_fail(OF_ERR_DTYPE, "cuda: dtype %s is not supported on CUDA devices",
                            of_dtype_name(dt));
  }
}
// The compute dtypes (halves are converted to float by the core).
template <typename F>
inline of_status dispatch_compute(of_dtype dt, F &&f) {
  switch (dt) {
    case OF_BOOL: return f((bool)0);
    case OF_UINT8: return f((uint8_t)0);
    case OF_INT8: return f((int8_t)0);
    case OF_INT32: return f((int32_t)0);
    case OF_INT64: return f((int64_t)0);
    case OF_FLOAT32: return f((float)0);
    case OF_FLOAT64: return f((double)0);
    default: return of_fail(OF_ERR_DTYPE, "cuda: dtype %s is not a compute dtype", of_dtype_name(dt));
  }
}
template <typename F>
inline of_status dispatch_float(of_dtype dt, const char *op, F &&f) {
  switch (dt) {
    case OF_FLOAT16: return f(half_t());
    case OF_BFLOAT16: return f(bf16_t());
    case OF_FLOAT32: return f((float)0);
    case OF_FLOAT64: return f((double)0);
    default: return of_fail(OF_ERR_DTYPE, "%s: expected a floating dtype on CUDA, got %s", op,
                            of_dtype_name(dt));
  }
}

// Accumulation type: double for double, float for the rest of the floats.
template <typename T> struct Acc { typedef float type; };
template <> struct Acc<double> { typedef double type; };

// Philox4x32-10, substream 0 of counter block `block` (core/ops/random.c's
// stream; random.cu's fills and attention.cu's dropout)
__device__ __forceinline__ void philox(uint64_t block, uint32_t k0, uint32_t k1, uint32_t o[4]) {
  uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = 0, c3 = 0;
#pragma unroll
  for (int r = 0; r < 10; r++) {
    uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  o[0] = c0, o[1] = c1, o[2] = c2, o[3] = c3;
}

}  // namespace ofc
