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
    /* min / max instructions: a NaN z is their second operand, so it passes */                 \
    vf##W zc = VMAXPS_##W(vsplat##W(-3.832506856900711f), z);                                   \
    zc = VMINPS_##W(vsplat##W(3.832506856900711f), zc);                                         \
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
    e = VSET_GE_##W(z, 3.832506856900711f, 1.0f, e);                                            \
    return VSET_LE_##W(z, -3.832506856900711f, -1.0f, e);                                       \
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
  /* lanes summed in float, as a tree: for a value whose rounding does not                     \
   * matter (a shift that is corrected afterwards) */                                           \
  AI VATTR_##W float hsumf##W(vf##W v) {                                                        \
    vfh##W a, b;                                                                                \
    memcpy(&a, &v, sizeof a);                                                                   \
    memcpy(&b, (const char *)&v + sizeof a, sizeof b);                                          \
    a += b;                                                                                     \
    float t[W / 2];                                                                             \
    memcpy(t, &a, sizeof t);                                                                    \
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
  AI VATTR_##W vf##W ld_bf16_##W(const uint16_t *p) { return BF16_LD_##W(p); }                \
  AI VATTR_##W void st_bf16_##W(uint16_t *p, vf##W v) { BF16_ST_##W(p, v); }                   \
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

/* bfloat16 loads (widened exactly) and stores (rounded to nearest even, a
 * NaN kept quiet: internal.h's of_f32_to_bf16, lane by lane). The generic
 * form serves the baseline; GCC 12 splits the 16-lane widening into two
 * 8-lane halves and narrows with a permute, so AVX2 and AVX-512 spell the
 * one-instruction forms (vpmovzxwd, vpmovdw) out. */
#define BF16_LD_GENERIC(W, p)                                                                   \
  ({                                                                                            \
    vh##W h_;                                                                                   \
    memcpy(&h_, (p), sizeof h_);                                                                \
    (vf##W)(__builtin_convertvector(h_, vu##W) << 16);                                          \
  })
#define BF16_ST_GENERIC(W, p, v)                                                                \
  do {                                                                                          \
    vf##W v_ = (v);                                                                             \
    vu##W u_ = (vu##W)v_;                                                                       \
    vu##W r_ = (u_ + 0x7fffu + ((u_ >> 16) & 1u)) >> 16;                                        \
    vi##W nan_ = v_ != v_; /* one float compare, not an unsigned one */                         \
    r_ = (vu##W)((nan_ & (vi##W)((u_ >> 16) | 0x40u)) | (~nan_ & (vi##W)r_));                   \
    vh##W h_ = __builtin_convertvector(r_, vh##W);                                              \
    memcpy((p), &h_, sizeof h_);                                                                \
  } while (0)
#define BF16_LD_4(p) BF16_LD_GENERIC(4, p)
#define BF16_ST_4(p, v) BF16_ST_GENERIC(4, p, v)
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BF16_LD_8(p)                                                                            \
  ((vf8)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define BF16_ST_8(p, v) BF16_ST_GENERIC(8, p, v)
#define BF16_LD_16(p)                                                                           \
  ((vf16)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define BF16_ST_16(p, v)                                                                        \
  do {                                                                                          \
    __m512i u_ = (__m512i)(v);                                                                  \
    __m512i hi_ = _mm512_srli_epi32(u_, 16);                                                    \
    __m512i r_ = _mm512_add_epi32(u_, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),               \
                                                       _mm512_and_si512(hi_, _mm512_set1_epi32(1)))); \
    r_ = _mm512_srli_epi32(r_, 16);                                                             \
    __mmask16 nan_ = _mm512_cmp_ps_mask((__m512)u_, (__m512)u_, _CMP_UNORD_Q);                  \
    r_ = _mm512_mask_mov_epi32(r_, nan_, _mm512_or_si512(hi_, _mm512_set1_epi32(0x40)));         \
    _mm256_storeu_si256((__m256i *)(p), _mm512_cvtepi32_epi16(r_));                             \
  } while (0)
#else
#define BF16_LD_8(p) BF16_LD_GENERIC(8, p)
#define BF16_ST_8(p, v) BF16_ST_GENERIC(8, p, v)
#define BF16_LD_16(p) BF16_LD_GENERIC(16, p)
#define BF16_ST_16(p, v) BF16_ST_GENERIC(16, p, v)
#endif

/* VSET_GE_W(z, c, val, e): val in the lanes where z >= c, e in the others
 * (VSET_LE_W: z <= c); AVX-512 writes val under a compare's mask, one
 * instruction where the generic select takes two */
#if defined(__x86_64__) || defined(__i386__)
#define VSET_CMP_16(z, cmp, c, val, e)                                                          \
  ((vf16)_mm512_mask_mov_ps((__m512)(e), _mm512_cmp_ps_mask((__m512)(z), _mm512_set1_ps(c), cmp), \
                            _mm512_set1_ps(val)))
#define VSET_GE_16(z, c, val, e) VSET_CMP_16(z, _CMP_GE_OQ, c, val, e)
#define VSET_LE_16(z, c, val, e) VSET_CMP_16(z, _CMP_LE_OQ, c, val, e)
#else
#define VSET_GE_16(z, c, val, e) vsel16((z) >= (c), vsplat16(val), (e))
#define VSET_LE_16(z, c, val, e) vsel16((z) <= (c), vsplat16(val), (e))
#endif
#define VSET_GE_8(z, c, val, e) vsel8((z) >= (c), vsplat8(val), (e))
#define VSET_LE_8(z, c, val, e) vsel8((z) <= (c), vsplat8(val), (e))
#define VSET_GE_4(z, c, val, e) vsel4((z) >= (c), vsplat4(val), (e))
#define VSET_LE_4(z, c, val, e) vsel4((z) <= (c), vsplat4(val), (e))

/* VMAXPS_W(a, b): a > b ? a : b in one instruction (x86's maxps: b when
 * either is NaN), VMINPS_W a < b ? a : b; GCC's generic vectors have no select it would emit as one */
#if defined(__x86_64__) || defined(__i386__)
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

#if defined(__x86_64__) || defined(__i386__)
/* "bf16n": bfloat16 stores through AVX512-BF16's vcvtneps2bf16 (one
 * instruction for the nine of BF16_ST_16) where the CPU has it. It rounds
 * to nearest even and keeps a NaN quiet as of_f32_to_bf16 does, but reads
 * a denormal input as zero (checked against the integer rounding over all
 * 2^32 float32 patterns: the denormals are the only difference), so a
 * vector holding one is stored by the integer rounding: the same bits on
 * every instruction set. */
#define VATTR_16B                                                                               \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))
AI VATTR_16B vf16 ld_bf16n_16(const uint16_t *p) { return BF16_LD_16(p); }
AI VATTR_16B void st_bf16n_16(uint16_t *p, vf16 v) {
  __mmask16 den = _mm512_fpclass_ps_mask((__m512)v, 0x20);   /* denormal lanes */
  if (__builtin_expect(den != 0, 0)) {
    BF16_ST_16(p, v);
    return;
  }
  _mm256_storeu_si256((__m256i *)p, (__m256i)_mm512_cvtneps_pbh((__m512)v));
}
AI VATTR_16B vf16 ldn_bf16n_16(const uint16_t *p, int64_t n, float pad) {
  return ldn_bf16_16(p, n, pad);
}
AI VATTR_16B void stn_bf16n_16(uint16_t *p, vf16 v, int64_t n) { stn_bf16_16(p, v, n); }
#endif
#endif
