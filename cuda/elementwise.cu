// elementwise.cu -- copy/cast, fill, the unary and binary families, clamp,
// leaky_relu, flow.special (special_eval.h as device code) and where.
//
// One kernel per (dtype, arity); the op is a uniform switch inside it, which
// costs a few instructions per element of a memory-bound loop and keeps the
// build small (2 architectures x 7 dtypes instead of x 65 ops). Inputs of a
// dense, unbroadcast op are read with vector loads (16 bytes a thread).
#include "common.cuh"
#include "kernels.cuh"
#include "../core/ops/special_eval.h"
#include <type_traits>

namespace ofc {

template <typename T> constexpr bool is_f() { return std::is_floating_point<T>::value; }
template <typename T> constexpr bool is_b() { return std::is_same<T, bool>::value; }

struct EwArgs {
  int32_t kind, op;
  double p0, p1;
  int *flag;
};

__device__ __forceinline__ void raise_flag(int *flag, int code) {
  if (flag) atomicCAS(flag, 0, code);
}

// ---- unary ----
template <typename T>
__device__ __forceinline__ T unary_f(int op, T a) {
  const T one = (T)1, zero = (T)0;
  switch (op) {
    case OF_NEG: return -a;
    case OF_ABS: return fabs(a);
    case OF_EXP: return exp(a);
    case OF_LOG: return log(a);
    case OF_SQRT: return sqrt(a);
    case OF_RSQRT: return one / sqrt(a);
    case OF_SIN: return sin(a);
    case OF_COS: return cos(a);
    case OF_TAN: return tan(a);
    case OF_TANH: return tanh(a);
    case OF_SIGMOID: return one / (one + exp(-a));
    case OF_RELU: return a > zero ? a : zero;
    case OF_GELU: return (T)0.5 * a * (one + erf(a * (T)0.70710678118654752440));
    case OF_GELU_TANH: {
      T c = (T)0.79788456080286535588;   // sqrt(2 / pi)
      return (T)0.5 * a * (one + tanh(c * (a + (T)0.044715 * a * a * a)));
    }
    case OF_SILU: return a / (one + exp(-a));
    case OF_FLOOR: return floor(a);
    case OF_CEIL: return ceil(a);
    case OF_ROUND: return rint(a);
    case OF_TRUNC: return trunc(a);
    case OF_SIGN: return (T)((a > zero) - (a < zero));
    case OF_RECIPROCAL: return one / a;
    case OF_SQUARE: return a * a;
    case OF_LOG2: return log2(a);
    case OF_LOG10: return log10(a);
    case OF_LOG1P: return log1p(a);
    case OF_EXPM1: return expm1(a);
    case OF_ASIN: return asin(a);
    case OF_ACOS: return acos(a);
    case OF_ATAN: return atan(a);
    case OF_SINH: return sinh(a);
    case OF_COSH: return cosh(a);
    case OF_ERF: return erf(a);
    case OF_ERFC: return erfc(a);
    case OF_SOFTPLUS: return a > (T)20 ? a : log1p(exp(a));
    case OF_MISH: return a * tanh(a > (T)20 ? a : log1p(exp(a)));
    case OF_HARDSWISH: return a * fmin(fmax(a + (T)3, zero), (T)6) / (T)6;
    case OF_HARDSIGMOID: return fmin(fmax(a + (T)3, zero), (T)6) / (T)6;
    case OF_LOGICAL_NOT: return (T)!(a != zero);
    case OF_ISNAN: return (T)(a != a);
    case OF_ISINF: return (T)(isinf(a) != 0);
    case OF_ISFINITE: return (T)(isfinite(a) != 0);
    default: return a;
  }
}

template <typename T>
__device__ __forceinline__ T unary_i(int op, T a) {
  switch (op) {
    case OF_NEG: return (T)-a;
    case OF_ABS:
      if constexpr (std::is_signed<T>::value) return a < (T)0 ? (T)-a : a;
      else return a;
    case OF_RELU: return a > (T)0 ? a : (T)0;
    case OF_SIGN:
      if constexpr (std::is_signed<T>::value) return (T)((a > (T)0) - (a < (T)0));
      else return (T)(a > (T)0);
    case OF_SQUARE: return (T)(a * a);
    case OF_LOGICAL_NOT: return (T)!a;
    case OF_BITWISE_NOT: return (T)~a;
    case OF_ISNAN: case OF_ISINF: return (T)0;
    case OF_ISFINITE: return (T)1;
    default: return a;   // floor, ceil, round, trunc of integers
  }
}

__device__ __forceinline__ bool unary_b(int op, bool a) {
  switch (op) {
    case OF_LOGICAL_NOT: case OF_BITWISE_NOT: return !a;
    case OF_ISNAN: case OF_ISINF: return false;
    case OF_ISFINITE: return true;
    default: return a;   // abs, relu, sign
  }
}

// ---- binary ----
template <typename T>
__device__ __forceinline__ T fmax_nan(T a, T b) { return (a != a || a > b) ? a : b; }
template <typename T>
__device__ __forceinline__ T fmin_nan(T a, T b) { return (a != a || a < b) ? a : b; }

template <typename T>
__device__ __forceinline__ T binary_f(int op, T a, T b) {
  switch (op) {
    case OF_ADD: return a + b;
    case OF_SUB: return a - b;
    case OF_MUL: return a * b;
    case OF_DIV: return a / b;
    case OF_POW: return pow(a, b);
    case OF_MAXIMUM: return fmax_nan(a, b);
    case OF_MINIMUM: return fmin_nan(a, b);
    case OF_FLOOR_DIVIDE: return floor(a / b);
    case OF_REMAINDER: {
      T r = fmod(a, b);
      return (r != (T)0 && ((r < (T)0) != (b < (T)0))) ? r + b : r;
    }
    case OF_FMOD: return fmod(a, b);
    case OF_ATAN2: return atan2(a, b);
    case OF_EQ: return (T)(a == b);
    case OF_NE: return (T)(a != b);
    case OF_LT: return (T)(a < b);
    case OF_LE: return (T)(a <= b);
    case OF_GT: return (T)(a > b);
    case OF_GE: return (T)(a >= b);
    case OF_LOGICAL_AND: return (T)((a != (T)0) && (b != (T)0));
    case OF_LOGICAL_OR: return (T)((a != (T)0) || (b != (T)0));
    case OF_LOGICAL_XOR: return (T)((a != (T)0) != (b != (T)0));
    default: return a;
  }
}

template <typename T>
__device__ __forceinline__ T binary_i(int op, T a, T b, int *flag) {
  switch (op) {
    case OF_ADD: return (T)(a + b);
    case OF_SUB: return (T)(a - b);
    case OF_MUL: return (T)(a * b);
    case OF_POW: {
      int64_t x = a, e = b, r = 1;
      if (e < 0) {
        if (x == 1) return 1;
        if (x == -1) return (T)((e & 1) ? -1 : 1);
        raise_flag(flag, 2);
        return 0;
      }
      while (e) {
        if (e & 1) r *= x;
        x *= x;
        e >>= 1;
      }
      return (T)r;
    }
    case OF_MAXIMUM: return a > b ? a : b;
    case OF_MINIMUM: return a < b ? a : b;
    case OF_FLOOR_DIVIDE: case OF_REMAINDER: case OF_FMOD: {
      if (b == 0) {
        raise_flag(flag, 1);
        return 0;
      }
      int64_t x = a, y = b, q = x / y, r = x % y;
      if (op == OF_FMOD) return (T)r;
      if (op == OF_FLOOR_DIVIDE) return (T)((r != 0 && ((x < 0) != (y < 0))) ? q - 1 : q);
      return (T)((r != 0 && ((r < 0) != (y < 0))) ? r + y : r);
    }
    case OF_EQ: return (T)(a == b);
    case OF_NE: return (T)(a != b);
    case OF_LT: return (T)(a < b);
    case OF_LE: return (T)(a <= b);
    case OF_GT: return (T)(a > b);
    case OF_GE: return (T)(a >= b);
    case OF_LOGICAL_AND: return (T)((a != 0) && (b != 0));
    case OF_LOGICAL_OR: return (T)((a != 0) || (b != 0));
    case OF_LOGICAL_XOR: return (T)((a != 0) != (b != 0));
    case OF_BITWISE_AND: return (T)(a & b);
    case OF_BITWISE_OR: return (T)(a | b);
    case OF_BITWISE_XOR: return (T)(a ^ b);
    default: return a;
  }
}

__device__ __forceinline__ bool binary_b(int op, bool a, bool b) {
  switch (op) {
    case OF_ADD: case OF_MAXIMUM: case OF_LOGICAL_OR: case OF_BITWISE_OR: return a || b;
    case OF_MUL: case OF_MINIMUM: case OF_LOGICAL_AND: case OF_BITWISE_AND: return a && b;
    case OF_EQ: return a == b;
    case OF_NE: case OF_LOGICAL_XOR: case OF_BITWISE_XOR: return a != b;
    case OF_LT: return a < b;
    case OF_LE: return a <= b;
    case OF_GT: return a > b;
    case OF_GE: return a >= b;
    default: return a;
  }
}

template <typename T>
struct Fn {
  EwArgs g;
  __device__ __forceinline__ T operator()(T a) const {
    if (g.kind == OF_EWK_CLAMP) {   // NaN bounds are absent bounds, as on the CPU
      if constexpr (is_f<T>()) {
        if (a != a) return a;
      }
      double x = (double)a;
      if (g.p0 == g.p0 && x < g.p0) x = g.p0;   // min(max(a, lo), hi): lo > hi gives hi
      if (g.p1 == g.p1 && x > g.p1) return (T)g.p1;
      return x == (double)a ? a : (T)x;
    }
    if (g.kind == OF_EWK_LEAKY) return a > (T)0 ? a : (T)((double)a * g.p0);
    if constexpr (std::is_same<T, double>::value) {   // special's operands are float64
      if (g.kind == OF_EWK_SPECIAL1) return of_special1(g.op, a, g.p0);
    }
    if constexpr (is_b<T>()) return unary_b(g.op, a);
    else if constexpr (is_f<T>()) return unary_f(g.op, a);
    else return unary_i(g.op, a);
  }
  __device__ __forceinline__ T operator()(T a, T b) const {
    if constexpr (std::is_same<T, double>::value) {
      if (g.kind == OF_EWK_SPECIAL2) return of_special2(g.op, a, b);
    }
    if constexpr (is_b<T>()) return binary_b(g.op, a, b);
    else if constexpr (is_f<T>()) return binary_f(g.op, a, b);
    else return binary_i(g.op, a, b, g.flag);
  }
};

template <typename T, int V> struct alignas(sizeof(T) * V) Vec { T v[V]; };

template <typename T> constexpr int vec_width() {
  return sizeof(T) >= 8 ? 2 : 4;
}

// dense operands of the output's layout: V elements a thread
template <typename T, typename TO, int NIN, int V>
__global__ void ew_linear(int64_t n, TO *out, const T *a, const T *b, Fn<T> f) {
  int64_t nv = n / V;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv;
       i += (int64_t)gridDim.x * blockDim.x) {
    Vec<T, V> va = reinterpret_cast<const Vec<T, V> *>(a)[i], vb;
    if (NIN == 2) vb = reinterpret_cast<const Vec<T, V> *>(b)[i];
    Vec<TO, V> r;
#pragma unroll
    for (int k = 0; k < V; k++)
      r.v[k] = Cvt<TO, T>::go(NIN == 2 ? f(va.v[k], vb.v[k]) : f(va.v[k]));
    reinterpret_cast<Vec<TO, V> *>(out)[i] = r;
  }
  // the tail
  for (int64_t i = nv * V + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = Cvt<TO, T>::go(NIN == 2 ? f(a[i], b[i]) : f(a[i]));
}

template <typename T, typename TO, int NIN>
__global__ void ew_strided(int64_t n, Offsets<NIN + 1> o, TO *out, const T *a, const T *b,
                           Fn<T> f) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[NIN + 1];
    o.get(i, off);
    T r = NIN == 2 ? f(a[off[1]], b[off[2]]) : f(a[off[1]]);
    out[off[0]] = Cvt<TO, T>::go(r);
  }
}

static bool aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

template <typename T, typename TO, int NIN>
static of_status launch_ew(const char *name, of_tensor **ops, Fn<T> f) {
  of_tensor *out = ops[0];
  int64_t n = out->numel;
  if (n == 0) return OF_OK;
  int dev = use_device(of_dev(out));
  cudaStream_t s = current_stream(dev);
  f.g.flag = error_flag(dev);
  const of_tensor *all[NIN + 1];
  for (int k = 0; k <= NIN; k++) all[k] = ops[k];
  Offsets<NIN + 1> o = make_offsets<NIN + 1>(out, all, true);
  TO *po = (TO *)ptr(out);
  const T *pa = (const T *)ptr(ops[1]), *pb = NIN == 2 ? (const T *)ptr(ops[2]) : nullptr;
  constexpr int V = vec_width<T>();
  if (all_linear(o) && aligned(po, sizeof(TO) * V) && aligned(pa, sizeof(T) * V) &&
      (NIN == 1 || aligned(pb, sizeof(T) * V))) {
    ew_linear<T, TO, NIN, V><<<blocks_for((n + V - 1) / V), kThreads, 0, s>>>(n, po, pa, pb, f);
  } else {
    ew_strided<T, TO, NIN><<<blocks_for(n), kThreads, 0, s>>>(n, o, po, pa, pb, f);
  }
  return launched(name);
}

static of_status ew(const char *name, int32_t kind, int32_t op, double p0, double p1,
                    int32_t flags, of_tensor **ops, int32_t nops) {
  (void)flags;
  of_dtype cdt = ops[1]->dtype;
  bool to_bool = ops[0]->dtype == OF_BOOL && cdt != OF_BOOL;
  if (nops != 2 && nops != 3) return of_fail(OF_ERR_ARG, "%s: %d operands on CUDA", name, (int)nops);
  return dispatch_compute(cdt, [&](auto z) -> of_status {
    typedef decltype(z) T;
    Fn<T> f{{kind, op, p0, p1, nullptr}};
    if (nops == 2)
      return to_bool ? launch_ew<T, bool, 1>(name, ops, f) : launch_ew<T, T, 1>(name, ops, f);
    return to_bool ? launch_ew<T, bool, 2>(name, ops, f) : launch_ew<T, T, 2>(name, ops, f);
  });
}

// ---- copy with cast and broadcast ----
template <typename TO, typename TI>
__global__ void copy_strided(int64_t n, Offsets<2> o, TO *out, const TI *in) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[2];
    o.get(i, off);
    out[off[0]] = Cvt<TO, TI>::go(in[off[1]]);
  }
}
template <typename TO, typename TI>
__global__ void copy_linear(int64_t n, TO *out, const TI *in) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = Cvt<TO, TI>::go(in[i]);
}

static of_status copy(of_tensor *dst, of_tensor *src) {
  int64_t n = dst->numel;
  if (n == 0) return OF_OK;
  int dev = use_device(of_dev(dst));
  cudaStream_t s = current_stream(dev);
  const of_tensor *all[2] = {dst, src};
  Offsets<2> o = make_offsets<2>(dst, all, true);
  if (dst->dtype == src->dtype && all_linear(o)) {
    OFC_TRY(cudaMemcpyAsync(ptr(dst), ptr(src), (size_t)(n * of_dtype_size(dst->dtype)),
                            cudaMemcpyDeviceToDevice, s), "copy_");
    note_launch("copy_");
    return OF_OK;
  }
  bool lin = all_linear(o);
  return dispatch_all(dst->dtype, [&](auto zo) -> of_status {
    typedef decltype(zo) TO;
    return dispatch_all(src->dtype, [&](auto zi) -> of_status {
      typedef decltype(zi) TI;
      if (lin)
        copy_linear<TO, TI><<<blocks_for(n), kThreads, 0, s>>>(n, (TO *)ptr(dst),
                                                               (const TI *)ptr(src));
      else
        copy_strided<TO, TI><<<blocks_for(n), kThreads, 0, s>>>(n, o, (TO *)ptr(dst),
                                                                (const TI *)ptr(src));
      return launched("copy_");
    });
  });
}

// ---- fill ----
template <typename T>
__global__ void fill_strided(int64_t n, Offsets<1> o, T *out, T v) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[1];
    o.get(i, off);
    out[off[0]] = v;
  }
}

struct Bits128 { uint64_t lo, hi; };   // complex128 (re, im); 8-byte aligned like its views

static of_status fill(of_tensor *t, double value) {
  int64_t n = t->numel;
  if (n == 0) return OF_OK;
  int dev = use_device(of_dev(t));
  const of_tensor *all[1] = {t};
  Offsets<1> o = make_offsets<1>(t, all, true);
  // the value in the tensor's dtype, converted by the core's rules, as bits
  uint64_t b2[2] = {0, 0};   // 16 bytes: of_store_double writes both parts of a complex128
  of_store_double(b2, t->dtype, value);
  uint64_t bits = b2[0];
  cudaStream_t s = current_stream(dev);
  switch (of_dtype_size(t->dtype)) {
    case 1: fill_strided<uint8_t><<<blocks_for(n), kThreads, 0, s>>>(n, o, (uint8_t *)ptr(t), (uint8_t)bits); break;
    case 2: fill_strided<uint16_t><<<blocks_for(n), kThreads, 0, s>>>(n, o, (uint16_t *)ptr(t), (uint16_t)bits); break;
    case 4: fill_strided<uint32_t><<<blocks_for(n), kThreads, 0, s>>>(n, o, (uint32_t *)ptr(t), (uint32_t)bits); break;
    case 8: fill_strided<uint64_t><<<blocks_for(n), kThreads, 0, s>>>(n, o, (uint64_t *)ptr(t), bits); break;
    default: fill_strided<Bits128><<<blocks_for(n), kThreads, 0, s>>>(n, o, (Bits128 *)ptr(t), Bits128{b2[0], b2[1]}); break;
  }
  return launched("fill_");
}

// ---- where: out = cond ? a : b (moved as bits of a's size) ----
template <typename T>
__global__ void where_kernel(int64_t n, Offsets<4> o, T *out, const bool *c, const T *a,
                             const T *b) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[4];
    o.get(i, off);
    out[off[0]] = c[off[1]] ? a[off[2]] : b[off[3]];
  }
}

static of_status where(of_tensor *out, of_tensor *cond, of_tensor *a, of_tensor *b) {
  int64_t n = out->numel;
  if (n == 0) return OF_OK;
  int dev = use_device(of_dev(out));
  cudaStream_t s = current_stream(dev);
  const of_tensor *all[4] = {out, cond, a, b};
  Offsets<4> o = make_offsets<4>(out, all, true);
  const bool *c = (const bool *)ptr(cond);
  switch (of_dtype_size(out->dtype)) {
#define W(T) where_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(n, o, (T *)ptr(out), c, \
                 (const T *)ptr(a), (const T *)ptr(b))
    case 1: W(uint8_t); break;
    case 2: W(uint16_t); break;
    case 4: W(uint32_t); break;
    default: W(uint64_t); break;
#undef W
  }
  return launched("where");
}

void register_elementwise(of_device_ops *ops) {
  ops->copy = copy;
  ops->fill = fill;
  ops->ew = ew;
  ops->where = where;
}

}  // namespace ofc
