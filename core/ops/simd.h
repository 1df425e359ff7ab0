/* simd.h -- the vector helpers of the run-time dispatched kernels
 * (core/ops/rowk.c, core/ops/attention.c): GCC vectors of float32 of one
 * instruction set's own width W (4: the SSE2 baseline, 8: AVX2, 16:
 * AVX-512), each width's helpers carrying its target attribute, so a
 * kernel compiled for that instruction set inlines them. Included by
 * family files only; each includer builds with -Wno-psabi. */
#ifndef ONEFLOW_SIMD_H
#define ONEFLOW_SIMD_H
#include <stdint.h>
#include <string.h>

/* vector arguments of inlined helpers: no ABI crosses a call */
#pragma GCC diagnostic ignored "-Wpsabi"

#define AI static inline __attribute__((always_inline))

/* Vectors of W float32 lanes, W the instruction set's own width (16 for
 * AVX-512, 8 for AVX2, 4 for the SSE2 baseline): GCC splits a wider vector's
 * arithmetic into native halves but scalarises its comparisons. */
#define VEC_HELPERS(W)                                                                          \
  typedef float vf##W __attribute__((vector_size(4 * W)));                                      \
  typedef int32_t vi##W __attribute__((vector_size(4 * W)));                                    \
  typedef uint32_t vu##W __attribute__((vector_size(4 * W)));                                   \
  typedef uint16_t vh##W __attribute__((vector_size(2 * W)));                                   \
  AI VATTR_##W vf##W vsplat##W(float a) { return (vf##W){0} + a; }                                        \
  AI VATTR_##W vf##W vsel##W(vi##W m, vf##W a, vf##W b) {                                                 \
    return (vf##W)((m & (vi##W)a) | (~m & (vi##W)b));                                           \
  }                                                                                             \
  /* max(a, b); a NaN in either sticks */                                                       \
  AI VATTR_##W vf##W vmax##W(vf##W a, vf##W b) { return vsel##W((b > a) | (b != b), b, a); }              \
  /* lanes [0, n) kept, the rest zero */                                                        \
  AI VATTR_##W vf##W vfirst##W(vf##W v, int64_t n) {                                                      \
    vi##W iota;                                                                                 \
    for (int i = 0; i < W; i++) iota[i] = i;                                                    \
    return vsel##W(iota < (int32_t)n, v, vsplat##W(0));                                         \
  }                                                                                             \
  /* exp of x already clamped to [-87.33, 88.3]: Cephes' range reduction (n = round(x /     \
   * ln 2), r = x - n ln 2 in two steps), then a degree-6 polynomial fitted to exp on          \
   * [-ln2/2, ln2/2] (minimax relative error 2e-9) in Horner form: six FMAs where Cephes'     \
   * form takes nine operations, with the same accuracy (about 1 ulp against the exact exp    \
   * on 4M points); the arithmetic of softmax's exp pass is its time (doc/benchmarks.md,      \
   * "Memory-bound kernels") */                                                               \
  /* exp(r) for |r| <= ln2/2: the polynomial (also SDPA's exp512) */                            \
  AI VATTR_##W vf##W vexp_poly##W(vf##W r) {                                                    \
    vf##W p = r * 1.3843653723597527e-3f + 8.37415549904108e-3f;                                \
    p = p * r + 4.166800156235695e-2f;                                                          \
    p = p * r + 1.6666431725025177e-1f;                                                         \
    p = p * r + 4.999999403953552e-1f;                                                          \
    p = p * r + 1.0f;                                                                           \
    return p * r + 1.0f;                                                                        \
  }                                                                                             \
  AI VATTR_##W vf##W vexp_core##W(vf##W xc) {                                                   \
    vf##W t = xc * 1.44269504088896341f + 12582912.0f; /* 1.5 * 2^23: rounds to an integer */   \
    vf##W n = t - 12582912.0f;                                                                  \
    vf##W r = xc - n * 0.693359375f;                                                            \
    r = r + n * 2.12194440e-4f;                                                                 \
    vu##W eb = ((vu##W)t - 0x4B400000u + 127u) << 23; /* 2^n */                                 \
    return vexp_poly##W(r) * (vf##W)eb;                                                         \
  }                                                                                             \
  /* exp(x), float32: below -87.33 the result is 0, above 88.3 it saturates;                    \
   * NaN stays NaN. */                                                                          \
  AI VATTR_##W vf##W vexp##W(vf##W x) {                                                         \
    vf##W xc = VMINPS_##W(vsplat##W(88.3f), VMAXPS_##W(vsplat##W(-87.33f), x));                \
    return (vf##W)(~(x < -87.33f) & (vi##W)vexp_core##W(xc));                                   \
  }                                                                                             \
  /* exp(x) for x <= 0 (softmax's x - max), one clamp fewer; NaN stays NaN (the clamp is     \
   * one max instruction that passes a NaN x through, the zeroing one and-not) */               \
  AI VATTR_##W vf##W vexpn##W(vf##W x) {                                                        \
    vi##W lo = x < -87.33f;                                                                     \
    return (vf##W)(~lo & (vi##W)vexp_core##W(VMAXPS_##W(vsplat##W(-87.33f), x)));              \
  }                                                                                             \
  /* max(a, b) without NaN handling (b when a NaN, a when b NaN): for maxima                    \
   * that only shift an exp, whose NaN input reaches the result anyway */                       \
  AI VATTR_##W vf##W vmaxq##W(vf##W a, vf##W b) { return VMAXPS_##W(b, a); }                   \
  /* erf(z) as the rational function of Eigen's and XLA's float erf (odd degree-13 over         \
   * even degree-8 polynomial in z, z clamped to +-3.8325, where erf is 1 in float): about      \
   * 1e-7 absolute error, the accuracy of PyTorch's vectorised erf, with no exp and half        \
   * the arithmetic of erfc by Abramowitz-Stegun; NaN stays NaN */                              \
  AI VATTR_##W vf##W verf##W(vf##W z) {                                                         \
    vf##W zc = vsel##W(z > 3.832506856900711f, vsplat##W(3.832506856900711f), z);               \
    zc = vsel##W(zc < -3.832506856900711f, vsplat##W(-3.832506856900711f), zc);                 \
    vf##W z2 = zc * zc;                                                                         \
    vf##W p = z2 * -2.72614225801306e-10f + 2.77068142495902e-08f;                              \
    p = p * z2 - 2.10102402082508e-06f;                                                         \
    p = p * z2 - 5.69250639462346e-05f;                                                         \
    p = p * z2 - 7.34990630326855e-04f;                                                         \
    p = p * z2 - 2.95459980854025e-03f;                                                         \
    p = p * z2 - 1.60960333262415e-02f;                                                         \
    vf##W q = z2 * -1.45660718464996e-05f - 2.13374055278905e-04f;                              \
    q = q * z2 - 1.68282697438203e-03f;                                                         \
    q = q * z2 - 7.37332916720468e-03f;                                                         \
    q = q * z2 - 1.42647390514189e-02f;                                                         \
    /* at the clamp the quotient rounds to 1 - 2^-24, not to 1: so gelu(-88) is 0, not -2.6e-6 */\
    vf##W e = zc * p / q;                                                                       \
    e = vsel##W(z >= 3.832506856900711f, vsplat##W(1.0f), e);                                   \
    return vsel##W(z <= -3.832506856900711f, vsplat##W(-1.0f), e);                              \
  }                                                                                             \
  /* gelu(x) = x / 2 (1 + erf(x / sqrt 2)); inf gives inf and -inf NaN (-inf * 0, as the        \
   * float64 kernel) */                                                                         \
  AI VATTR_##W vf##W vgelu##W(vf##W v) {                                                        \
    vf##W hv = 0.5f * v;                                                                        \
    return hv + hv * verf##W(v * 0.70710678118654752f);                                         \
  }                                                                                             \
  /* gelu'(x) = (1 + erf(x / sqrt 2)) / 2 + x exp(-x^2 / 2) / sqrt(2 pi) */                     \
  AI VATTR_##W vf##W vgelu_d##W(vf##W v) {                                                      \
    vf##W e = vexp##W(-0.5f * v * v);                                                           \
    return 0.5f + 0.5f * verf##W(v * 0.70710678118654752f) + v * (e * 0.3989422804014327f);     \
  }                                                                                             \
  /* half a vector, and its lanes as doubles (one register of each width) */                   \
  typedef float vfh##W __attribute__((vector_size(2 * W)));                                     \
  typedef double vdh##W __attribute__((vector_size(4 * W)));                                    \
  AI VATTR_##W vdh##W vlo_d##W(vf##W v) {                                                       \
    vfh##W h;                                                                                   \
    memcpy(&h, &v, sizeof h);                                                                   \
    return __builtin_convertvector(h, vdh##W);                                                  \
  }                                                                                             \
  AI VATTR_##W vdh##W vhi_d##W(vf##W v) {                                                       \
    vfh##W h;                                                                                   \
    memcpy(&h, (const char *)&v + sizeof h, sizeof h);                                          \
    return __builtin_convertvector(h, vdh##W);                                                  \
  }                                                                                             \
  /* lanes summed in double as a tree (lane i with lane i + W/2, then halves                    \
   * again): a fixed order, log2(W) dependent adds instead of W */                              \
  AI VATTR_##W double hsum##W(vf##W v) {                                                        \
    vdh##W s = vlo_d##W(v) + vhi_d##W(v);                                                       \
    double t[W / 2];                                                                            \
    memcpy(t, &s, sizeof t);                                                                    \
    for (int n = W / 4; n >= 1; n /= 2)                                                         \
      for (int i = 0; i < n; i++) t[i] += t[i + n];                                             \
    return t[0];                                                                                \
  }                                                                                             \
  AI VATTR_##W float hmax##W(vf##W v) {                                                                   \
    float m = v[0];                                                                             \
    for (int i = 1; i < W; i++)                                                                 \
      if (v[i] > m || v[i] != v[i]) m = v[i];                                                   \
    return m;                                                                                   \
  }                                                                                             \
  /* loads and stores: float32, and bfloat16 (as uint16_t) widened exactly and                  \
   * rounded to nearest even (a NaN stays a quiet NaN) */                                       \
  AI VATTR_##W vf##W ld_f32_##W(const float *p) {                                                         \
    vf##W v;                                                                                    \
    memcpy(&v, p, sizeof v);                                                                    \
    return v;                                                                                   \
  }                                                                                             \
  AI VATTR_##W void st_f32_##W(float *p, vf##W v) { memcpy(p, &v, sizeof v); }                            \
  AI VATTR_##W vf##W ld_bf16_##W(const uint16_t *p) {                                                     \
    vh##W h;                                                                                    \
    memcpy(&h, p, sizeof h);                                                                    \
    return (vf##W)(__builtin_convertvector(h, vu##W) << 16);                                    \
  }                                                                                             \
  AI VATTR_##W void st_bf16_##W(uint16_t *p, vf##W v) {                                                   \
    vu##W u = (vu##W)v;                                                                         \
    vu##W r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;                                           \
    vi##W nan = v != v;   /* one float compare, not an unsigned one */                          \
    r = (vu##W)((nan & (vi##W)((u >> 16) | 0x40u)) | (~nan & (vi##W)r));                        \
    vh##W h = __builtin_convertvector(r, vh##W);                                                \
    memcpy(p, &h, sizeof h);                                                                    \
  }                                                                                             \
  /* n < W elements; the other lanes hold pad */                                                \
  AI VATTR_##W vf##W ldn_f32_##W(const float *p, int64_t n, float pad) {                                  \
    float b[W];                                                                                 \
    for (int i = 0; i < W; i++) b[i] = pad;                                                     \
    memcpy(b, p, sizeof(float) * (size_t)n);                                                    \
    return ld_f32_##W(b);                                                                       \
  }                                                                                             \
  AI VATTR_##W vf##W ldn_bf16_##W(const uint16_t *p, int64_t n, float pad) {                              \
    uint16_t h[W] = {0};                                                                        \
    memcpy(h, p, sizeof(uint16_t) * (size_t)n);                                                 \
    vf##W v = ld_bf16_##W(h);                                                                   \
    for (int i = (int)n; i < W; i++) v[i] = pad;                                                \
    return v;                                                                                   \
  }                                                                                             \
  AI VATTR_##W void stn_f32_##W(float *p, vf##W v, int64_t n) {                                           \
    memcpy(p, &v, sizeof(float) * (size_t)n);                                                   \
  }                                                                                             \
  AI VATTR_##W void stn_bf16_##W(uint16_t *p, vf##W v, int64_t n) {                                       \
    uint16_t h[W];                                                                              \
    st_bf16_##W(h, v);                                                                          \
    memcpy(p, h, sizeof(uint16_t) * (size_t)n);                                                 \
  }

/* VMAXPS_W(a, b): a > b ? a : b in one instruction (x86's maxps: b when
 * either is NaN), VMINPS_W a < b ? a : b; GCC's generic vectors have no select it would emit as one */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define VMAXPS_4(a, b) ((vf4)_mm_max_ps((__m128)(a), (__m128)(b)))
#define VMAXPS_8(a, b) ((vf8)_mm256_max_ps((__m256)(a), (__m256)(b)))
#define VMAXPS_16(a, b) ((vf16)_mm512_max_ps((__m512)(a), (__m512)(b)))
#define VMINPS_4(a, b) ((vf4)_mm_min_ps((__m128)(a), (__m128)(b)))
#define VMINPS_8(a, b) ((vf8)_mm256_min_ps((__m256)(a), (__m256)(b)))
#define VMINPS_16(a, b) ((vf16)_mm512_min_ps((__m512)(a), (__m512)(b)))
#else
#define VMAXPS_4(a, b) vsel4((a) > (b), (a), (b))
#define VMAXPS_8(a, b) vsel8((a) > (b), (a), (b))
#define VMAXPS_16(a, b) vsel16((a) > (b), (a), (b))
#define VMINPS_4(a, b) vsel4((a) < (b), (a), (b))
#define VMINPS_8(a, b) vsel8((a) < (b), (a), (b))
#define VMINPS_16(a, b) vsel16((a) < (b), (a), (b))
#endif

/* each width's helpers carry its instruction set: clang refuses 8- and
 * 16-lane vector arguments in a function built for the baseline (the AVX
 * ABI), even one always inlined */
#define VATTR_4
#if defined(__x86_64__) || defined(__i386__)
#define VATTR_8 __attribute__((target("avx2,fma,f16c")))
#define VATTR_16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#else
#define VATTR_8
#define VATTR_16
#endif
VEC_HELPERS(4)
VEC_HELPERS(8)
VEC_HELPERS(16)
#endif
