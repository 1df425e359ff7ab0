/* vmath.c -- float32 unary math on AVX2 / AVX-512 vectors, picked at run
 * time (of_cpu_isa): the loops of the unary family's float32 kernels
 * (unary.c) for exp, log, sin, cos, tan, tanh, sigmoid, erf, ... and the
 * arithmetic ones (neg, abs, relu, sqrt, rsqrt, reciprocal, square).
 *
 * Why: the generic loops are compiled for the build's baseline (SSE2) and
 * call libm's scalar functions one element at a time; on an AMD EPYC
 * (Zen 4), one thread, 128K floats in cache, exp took 2.6-3.9x PyTorch
 * 2.x's time, tanh 6.2x, sigmoid 5.8-9.0x, erf 8.1x; now 0.43x, 0.17x,
 * 1.03x, 0.48x (doc/benchmarks.md, "Unary math").
 *
 * The transcendental functions come from glibc's libmvec (the vector
 * variants of libm's functions that GCC's -ffast-math vectoriser calls:
 * _ZGVeN16v_expf takes and returns one zmm register, _ZGVdN8v_expf one ymm;
 * at most 4 ulp from the exact result, with libm's special values: inf, NaN,
 * signed zeros, subnormals). CMake looks for it (OF_HAVE_LIBMVEC); without
 * it, or below AVX2, those ops keep the scalar libm loops. Each element's
 * result depends only on that element, so a tensor's values do not depend
 * on its layout, on how the threads split it, or on its length (tails run
 * the same vector function on a padded vector; strided runs are gathered). */
#include "rowk.h"
#include "simd.h"
#include <math.h>

#if defined(__x86_64__)
#define VMATH_X86 1
#else
#define VMATH_X86 0
#endif

typedef void (*vm_fn)(const float *, float *, int64_t);

#if VMATH_X86
/* the libmvec entry points: enum member, libm name */
#ifdef OF_HAVE_LIBMVEC
#define MVEC_OPS(X)                                                                             \
  X(EXP, exp) X(LOG, log) X(SIN, sin) X(COS, cos) X(TAN, tan) X(TANH, tanh) X(LOG2, log2)     \
  X(LOG10, log10) X(LOG1P, log1p) X(EXPM1, expm1) X(ASIN, asin) X(ACOS, acos) X(ATAN, atan)   \
  X(SINH, sinh) X(COSH, cosh) X(ERF, erf) X(ERFC, erfc)
#define DECL(OP, fn)                                                                             \
  VATTR_16 vf16 _ZGVeN16v_##fn##f(vf16);                                                         \
  VATTR_8 vf8 _ZGVdN8v_##fn##f(vf8);
MVEC_OPS(DECL)
#else
#define MVEC_OPS(X)
#endif

/* one loop per op and width: whole vectors, then the tail padded with 1
 * (in every function's domain) and stored partially */
#define VLOOP(NAME, W, EXPR)                                                                    \
  VATTR_##W static void NAME##_##W(const float *x, float *y, int64_t n) {                      \
    int64_t i = 0;                                                                              \
    for (; i + W <= n; i += W) {                                                                \
      vf##W a = ld_f32_##W(x + i);                                                              \
      st_f32_##W(y + i, EXPR);                                                                  \
    }                                                                                           \
    if (i < n) {                                                                                \
      vf##W a = ldn_f32_##W(x + i, n - i, 1.0f);                                                \
      stn_f32_##W(y + i, EXPR, n - i);                                                          \
    }                                                                                           \
  }

#define VSQRT_8(a) ((vf8)_mm256_sqrt_ps((__m256)(a)))
#define VSQRT_16(a) ((vf16)_mm512_sqrt_ps((__m512)(a)))
#define MV_8(fn, a) _ZGVdN8v_##fn##f(a)
#define MV_16(fn, a) _ZGVeN16v_##fn##f(a)

/* the arithmetic ops, as the scalar loops compute them (relu: a > 0 ? a : 0,
 * so NaN gives 0; rsqrt: 1 / sqrt(a), two roundings) */
#define ARITH_OPS(X, W)                                                                         \
  X(NEG, W, -a)                                                                                 \
  X(ABS, W, (vf##W)((vi##W)a & 0x7fffffff))                                                     \
  X(RELU, W, (vf##W)((a > 0.0f) & (vi##W)a))                                                    \
  X(SQRT, W, VSQRT_##W(a))                                                                      \
  X(RSQRT, W, 1.0f / VSQRT_##W(a))                                                              \
  X(RECIPROCAL, W, 1.0f / a)                                                                    \
  X(SQUARE, W, a * a)
#define ARITH_LOOP(OP, W, EXPR) VLOOP(vm_##OP, W, EXPR)
#define MVEC_LOOP_W(OP, f, W) VLOOP(vm_##OP, W, MV_##W(f, a))
#define MVEC_LOOP(OP, f) MVEC_LOOP_W(OP, f, 8) MVEC_LOOP_W(OP, f, 16)
ARITH_OPS(ARITH_LOOP, 8)
ARITH_OPS(ARITH_LOOP, 16)
MVEC_OPS(MVEC_LOOP)
#ifdef OF_HAVE_LIBMVEC
/* sigmoid as the scalar loop: 1 / (1 + exp(-a)) */
VLOOP(vm_SIGMOID, 8, 1.0f / (1.0f + MV_8(exp, -a)))
VLOOP(vm_SIGMOID, 16, 1.0f / (1.0f + MV_16(exp, -a)))
#endif

#define ROW(OP, ...) [OF_##OP] = {vm_##OP##_8, vm_##OP##_16},
#define MROW(OP, f) ROW(OP)
static const vm_fn vm_tab[OF_NUM_UNARY][2] = {
    ARITH_OPS(ROW, 0) MVEC_OPS(MROW)
#ifdef OF_HAVE_LIBMVEC
    ROW(SIGMOID)
#endif
};
#endif

static vm_fn vm_pick(int32_t op) {
#if VMATH_X86
  int32_t isa = of_cpu_isa();
  if (op < 0 || op >= OF_NUM_UNARY || isa < OF_ISA_AVX2) return NULL;
  return vm_tab[op][isa == OF_ISA_AVX512];
#else
  (void)op;
  return NULL;
#endif
}

/* GELU and SiLU have their loops in rowk.c (float32 and bfloat16, every
 * instruction set) */
bool of_vmath_has(int32_t op) { return op == OF_GELU || op == OF_SILU || vm_pick(op) != NULL; }

bool of_vmath_unary(int32_t op, const float *x, float *y, int64_t n) {
  if (op == OF_GELU || op == OF_SILU) return of_rowk_unary(op, OF_FLOAT32, x, y, n);
  vm_fn f = vm_pick(op);
  if (!f) return false;
  if (n > 0) f(x, y, n);
  return true;
}
