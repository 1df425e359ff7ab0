/* quant.c -- int8 linear and 2-D convolution with int32 accumulation and
 * fused requantisation (+ ReLU): the kernels behind flow.quantization's
 * quantized modules (lua/oneflow/quantization/).
 *
 *   acc[m, n] = sum_k (x[m, k] - x_zp) * (w[n, k] - w_zp[n])        exact, int32
 *   float out:     y = acc * (x_scale * w_scale[n]) + bias[n]     (dynamic quantization)
 *   quantized out: q = clamp(rint((acc + bias[n] / s_n) * (s_n / out_scale)) + out_zp)
 *                  with s_n = x_scale * w_scale[n] in float32 -- fbgemm's
 *                  requantisation (ReQuantizeOutput with a float bias), so the
 *                  values agree with PyTorch's where its definitions apply.
 * ReLU clamps at 0 (float) or at out_zp (quantized). Results outside the
 * output dtype saturate (documented in doc/quantization.md).
 *
 * The kernel: both operands are widened once to int16 with their zero points
 * subtracted (values in [-255, 255]), K padded to 16 with zeros, and the
 * dot products run with pmaddwd (AVX2: _mm256_madd_epi16, 16 products per
 * instruction, exact: two products of at most 255^2 sum in int32) in 2x4
 * register blocks; a scalar loop where the CPU has no AVX2 (of_cpu_isa).
 * K is limited to 33025 so that no sum can overflow int32 (255^2 * K).
 * u8 x s8 pmaddubsw would do twice the products per instruction but
 * saturates in int16 unless activations are 7-bit (fbgemm's reduce_range);
 * the int16 path is exact for every input. Measured against oneDNN 2.6's
 * int8 matmul: doc/benchmarks.md "Model optimisation".
 *
 * A convolution is im2col (per sample, int16, padding = the zero point, i.e.
 * 0 after the shift) + the same gemm per group, written straight into the
 * NCHW result. Rows of the gemm are split over threads.
 *
 * That int16 kernel is the fallback. Where it applies, the byte kernel runs
 * first (vnni_job below: no columns, requantisation in registers,
 * channels-last results): vpdpbusd on AVX-512 VNNI, and on AVX2 pmaddubsw
 * for 7-bit activations (u7_tile: the default x86 qconfig's reduce_range
 * and dynamic quantization give them; a convolution's rare bytes above 127
 * are added afterwards, u7_add_excess). */
#include "../device.h"
#include "../device/dnnl.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include "family.h"

enum { QK_ALIGN = 32, QK_MAX = 33025 };   /* K padded to 32: one AVX-512 vector of int16 */

/* ---- the int16 dot-product gemm: C[m, n] = A[m, :] . B[n, :] over kp ---- */
static void gemm_ref(int64_t m0, int64_t m1, int64_t N, int64_t kp, const int16_t *A,
                     const int16_t *B, int32_t *C, int64_t cm, int64_t cn) {
  for (int64_t m = m0; m < m1; m++)
    for (int64_t n = 0; n < N; n++) {
      const int16_t *a = A + m * kp, *b = B + n * kp;
      int32_t s = 0;
      for (int64_t k = 0; k < kp; k++) s += (int32_t)a[k] * b[k];
      C[m * cm + n * cn] = s;
    }
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static inline int32_t hsum8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

__attribute__((target("avx2"))) static void gemm_avx2(int64_t m0, int64_t m1, int64_t N,
                                                      int64_t kp, const int16_t *A,
                                                      const int16_t *B, int32_t *C,
                                                      int64_t cm, int64_t cn) {
  int64_t m = m0;
  for (; m + 2 <= m1; m += 2) {
    const int16_t *a0 = A + m * kp, *a1 = a0 + kp;
    int64_t n = 0;
    for (; n + 4 <= N; n += 4) {
      const int16_t *b0 = B + n * kp, *b1 = b0 + kp, *b2 = b1 + kp, *b3 = b2 + kp;
      __m256i c00 = _mm256_setzero_si256(), c01 = c00, c02 = c00, c03 = c00;
      __m256i c10 = c00, c11 = c00, c12 = c00, c13 = c00;
      for (int64_t k = 0; k < kp; k += 16) {
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(a0 + k));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(a1 + k));
        __m256i w = _mm256_loadu_si256((const __m256i *)(b0 + k));
        c00 = _mm256_add_epi32(c00, _mm256_madd_epi16(x0, w));
        c10 = _mm256_add_epi32(c10, _mm256_madd_epi16(x1, w));
        w = _mm256_loadu_si256((const __m256i *)(b1 + k));
        c01 = _mm256_add_epi32(c01, _mm256_madd_epi16(x0, w));
        c11 = _mm256_add_epi32(c11, _mm256_madd_epi16(x1, w));
        w = _mm256_loadu_si256((const __m256i *)(b2 + k));
        c02 = _mm256_add_epi32(c02, _mm256_madd_epi16(x0, w));
        c12 = _mm256_add_epi32(c12, _mm256_madd_epi16(x1, w));
        w = _mm256_loadu_si256((const __m256i *)(b3 + k));
        c03 = _mm256_add_epi32(c03, _mm256_madd_epi16(x0, w));
        c13 = _mm256_add_epi32(c13, _mm256_madd_epi16(x1, w));
      }
      int32_t *r0 = C + m * cm + n * cn, *r1 = r0 + cm;
      r0[0] = hsum8(c00), r0[cn] = hsum8(c01), r0[2 * cn] = hsum8(c02), r0[3 * cn] = hsum8(c03);
      r1[0] = hsum8(c10), r1[cn] = hsum8(c11), r1[2 * cn] = hsum8(c12), r1[3 * cn] = hsum8(c13);
    }
    for (; n < N; n++) {
      const int16_t *b0 = B + n * kp;
      __m256i c0 = _mm256_setzero_si256(), c1 = c0;
      for (int64_t k = 0; k < kp; k += 16) {
        __m256i w = _mm256_loadu_si256((const __m256i *)(b0 + k));
        c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(a0 + k)), w));
        c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(a1 + k)), w));
      }
      C[m * cm + n * cn] = hsum8(c0), C[(m + 1) * cm + n * cn] = hsum8(c1);
    }
  }
  for (; m < m1; m++) {
    const int16_t *a0 = A + m * kp;
    for (int64_t n = 0; n < N; n++) {
      const int16_t *b0 = B + n * kp;
      __m256i c0 = _mm256_setzero_si256();
      for (int64_t k = 0; k < kp; k += 16)
        c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(a0 + k)),
                                                    _mm256_loadu_si256((const __m256i *)(b0 + k))));
      C[m * cm + n * cn] = hsum8(c0);
    }
  }
}
#endif

#if defined(__x86_64__)
/* AVX-512 VNNI: vpdpwssd does the multiply and the add of pmaddwd +
 * paddd in one instruction, on 32 int16 at a time. Picked where the CPU
 * has it (of_cpu_isa() at AVX512 and avx512vnni); the kernel spec runs
 * every instruction set the machine has. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void gemm_vnni(
    int64_t m0, int64_t m1, int64_t N, int64_t kp, const int16_t *A, const int16_t *B, int32_t *C,
    int64_t cm, int64_t cn) {
  int64_t m = m0;
  for (; m + 2 <= m1; m += 2) {
    const int16_t *a0 = A + m * kp, *a1 = a0 + kp;
    int64_t n = 0;
    for (; n + 4 <= N; n += 4) {
      const int16_t *b0 = B + n * kp, *b1 = b0 + kp, *b2 = b1 + kp, *b3 = b2 + kp;
      __m512i c00 = _mm512_setzero_si512(), c01 = c00, c02 = c00, c03 = c00;
      __m512i c10 = c00, c11 = c00, c12 = c00, c13 = c00;
      for (int64_t k = 0; k < kp; k += 32) {
        __m512i x0 = _mm512_loadu_si512(a0 + k), x1 = _mm512_loadu_si512(a1 + k);
        __m512i w = _mm512_loadu_si512(b0 + k);
        c00 = _mm512_dpwssd_epi32(c00, x0, w), c10 = _mm512_dpwssd_epi32(c10, x1, w);
        w = _mm512_loadu_si512(b1 + k);
        c01 = _mm512_dpwssd_epi32(c01, x0, w), c11 = _mm512_dpwssd_epi32(c11, x1, w);
        w = _mm512_loadu_si512(b2 + k);
        c02 = _mm512_dpwssd_epi32(c02, x0, w), c12 = _mm512_dpwssd_epi32(c12, x1, w);
        w = _mm512_loadu_si512(b3 + k);
        c03 = _mm512_dpwssd_epi32(c03, x0, w), c13 = _mm512_dpwssd_epi32(c13, x1, w);
      }
      int32_t *r0 = C + m * cm + n * cn, *r1 = r0 + cm;
      r0[0] = _mm512_reduce_add_epi32(c00), r0[cn] = _mm512_reduce_add_epi32(c01);
      r0[2 * cn] = _mm512_reduce_add_epi32(c02), r0[3 * cn] = _mm512_reduce_add_epi32(c03);
      r1[0] = _mm512_reduce_add_epi32(c10), r1[cn] = _mm512_reduce_add_epi32(c11);
      r1[2 * cn] = _mm512_reduce_add_epi32(c12), r1[3 * cn] = _mm512_reduce_add_epi32(c13);
    }
    for (; n < N; n++) {
      const int16_t *b0 = B + n * kp;
      __m512i c0 = _mm512_setzero_si512(), c1 = c0;
      for (int64_t k = 0; k < kp; k += 32) {
        __m512i w = _mm512_loadu_si512(b0 + k);
        c0 = _mm512_dpwssd_epi32(c0, _mm512_loadu_si512(a0 + k), w);
        c1 = _mm512_dpwssd_epi32(c1, _mm512_loadu_si512(a1 + k), w);
      }
      C[m * cm + n * cn] = _mm512_reduce_add_epi32(c0);
      C[(m + 1) * cm + n * cn] = _mm512_reduce_add_epi32(c1);
    }
  }
  for (; m < m1; m++) {
    const int16_t *a0 = A + m * kp;
    for (int64_t n = 0; n < N; n++) {
      const int16_t *b0 = B + n * kp;
      __m512i c0 = _mm512_setzero_si512();
      for (int64_t k = 0; k < kp; k += 32)
        c0 = _mm512_dpwssd_epi32(c0, _mm512_loadu_si512(a0 + k), _mm512_loadu_si512(b0 + k));
      C[m * cm + n * cn] = _mm512_reduce_add_epi32(c0);
    }
  }
}
#endif

typedef void (*gemm_fn)(int64_t, int64_t, int64_t, int64_t, const int16_t *, const int16_t *,
                        int32_t *, int64_t, int64_t);
static gemm_fn pick_gemm(void) {
#if defined(__x86_64__)
  if (of_cpu_isa() >= OF_ISA_AVX512 && __builtin_cpu_supports("avx512vnni")) return gemm_vnni;
  if (of_cpu_isa() >= OF_ISA_AVX2) return gemm_avx2;
#endif
  return gemm_ref;
}

/* ---- requantisation of one block of accumulators ----
 * Per output channel, computed once per call: s_n = x_scale * w_scale[n],
 * mult[n] = s_n / out_scale and braw[n] = bias[n] / s_n (float32, as
 * fbgemm). Rounding to nearest even by the 1.5 * 2^23 trick (exact for
 * |v| < 2^22; larger values saturate anyway, so they are clamped first). */
typedef struct {
  const float *scale, *bias;   /* per channel: s_n and bias (float out), or mult and braw */
  int32_t ozp, relu, odt, lo, hi;
} rq;

static inline float round_even(float v) {
  const float big = 12582912.0f;   /* 1.5 * 2^23 */
  v = v < -4194304.0f ? -4194304.0f : v > 4194304.0f ? 4194304.0f : v;
  float t = v + big;   /* no -ffast-math: the compiler keeps both roundings */
  return t - big;
}

/* the per-channel factors of channels [0, N) into f (2 * N floats) */
static void requant_factors(const float *ws, int64_t ws_n, const float *bias, float xs, float os,
                            int32_t odt, int64_t ch0, int64_t N, float *f) {
  for (int64_t n = 0; n < N; n++) {
    const float s = xs * ws[ws_n == 1 ? 0 : ch0 + n];
    const float b = bias ? bias[ch0 + n] : 0.f;
    if (odt == OF_FLOAT32) f[n] = s, f[N + n] = b;
    else f[n] = s / os, f[N + n] = bias ? b / s : 0.f;
  }
}

/* One contiguous run of n results: q = clamp(rint((acc + g) * f) + zp, lo, hi)
 * with f, g per element (fs = 1) or one value (fs = 0). AVX2: 8 at a time,
 * cvtps2dq rounding half to even (the default MXCSR mode), the float
 * clamped first so that it never overflows the conversion. */
static void requant_run_ref(const int32_t *acc, const float *f, const float *g, int fs, int64_t n,
                            int32_t zp, int32_t lo, int32_t hi, bool u8, void *out) {
  for (int64_t i = 0; i < n; i++) {
    int32_t q = (int32_t)round_even(((float)acc[i] + g[fs ? i : 0]) * f[fs ? i : 0]) + zp;
    q = q < lo ? lo : q > hi ? hi : q;
    if (u8) ((uint8_t *)out)[i] = (uint8_t)q;
    else ((int8_t *)out)[i] = (int8_t)q;
  }
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) static void requant_run_avx2(const int32_t *acc, const float *f,
                                                             const float *g, int fs, int64_t n,
                                                             int32_t zp, int32_t lo, int32_t hi,
                                                             bool u8, void *out) {
  const __m256 big = _mm256_set1_ps(4194304.0f), nbig = _mm256_set1_ps(-4194304.0f);
  const __m256i vzp = _mm256_set1_epi32(zp), vlo = _mm256_set1_epi32(lo), vhi = _mm256_set1_epi32(hi);
  __m256 vf = _mm256_set1_ps(f[0]), vg = _mm256_set1_ps(g[0]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (fs) vf = _mm256_loadu_ps(f + i), vg = _mm256_loadu_ps(g + i);
    __m256 v = _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(acc + i)));
    v = _mm256_mul_ps(_mm256_add_ps(v, vg), vf);
    v = _mm256_min_ps(_mm256_max_ps(v, nbig), big);
    __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(v), vzp);
    q = _mm256_min_epi32(_mm256_max_epi32(q, vlo), vhi);
    int32_t t[8];
    _mm256_storeu_si256((__m256i *)t, q);
    if (u8) for (int k = 0; k < 8; k++) ((uint8_t *)out)[i + k] = (uint8_t)t[k];
    else for (int k = 0; k < 8; k++) ((int8_t *)out)[i + k] = (int8_t)t[k];
  }
  if (i < n)
    requant_run_ref(acc + i, fs ? f + i : f, fs ? g + i : g, fs, n - i, zp, lo, hi, u8,
                    (char *)out + i);
}
#endif

#if defined(__x86_64__)
/* AVX-512: 16 at a time, the clamped int32 narrowed to bytes by vpmovdb
 * (exact: the values are in the byte range already) */
__attribute__((target("avx512f,avx512bw"))) static void requant_run_avx512(
    const int32_t *acc, const float *f, const float *g, int fs, int64_t n, int32_t zp, int32_t lo,
    int32_t hi, bool u8, void *out) {
  const __m512 big = _mm512_set1_ps(4194304.0f), nbig = _mm512_set1_ps(-4194304.0f);
  const __m512i vzp = _mm512_set1_epi32(zp), vlo = _mm512_set1_epi32(lo), vhi = _mm512_set1_epi32(hi);
  __m512 vf = _mm512_set1_ps(f[0]), vg = _mm512_set1_ps(g[0]);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (fs) vf = _mm512_loadu_ps(f + i), vg = _mm512_loadu_ps(g + i);
    __m512 v = _mm512_cvtepi32_ps(_mm512_loadu_si512(acc + i));
    v = _mm512_mul_ps(_mm512_add_ps(v, vg), vf);
    v = _mm512_min_ps(_mm512_max_ps(v, nbig), big);
    __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), vzp);
    q = _mm512_min_epi32(_mm512_max_epi32(q, vlo), vhi);
    _mm_storeu_si128((__m128i *)((char *)out + i), _mm512_cvtepi32_epi8(q));
  }
  (void)u8;
  if (i < n)
    requant_run_ref(acc + i, fs ? f + i : f, fs ? g + i : g, fs, n - i, zp, lo, hi, u8,
                    (char *)out + i);
}
#endif

static void requant_run(const int32_t *acc, const float *f, const float *g, int fs, int64_t n,
                        int32_t zp, int32_t lo, int32_t hi, bool u8, void *out) {
#if defined(__x86_64__)
  if (of_cpu_isa() >= OF_ISA_AVX512) {
    requant_run_avx512(acc, f, g, fs, n, zp, lo, hi, u8, out);
    return;
  }
  if (of_cpu_isa() >= OF_ISA_AVX2) {
    requant_run_avx2(acc, f, g, fs, n, zp, lo, hi, u8, out);
    return;
  }
#endif
  requant_run_ref(acc, f, g, fs, n, zp, lo, hi, u8, out);
}

/* acc[m * am + n * an] -> out[m * sm + n * sn]; the caller lays both out
 * alike (linear: rows of channels, conv: planes), so the inner loop runs
 * along memory (i: the inner index, o: the outer) and vectorises */
static void requant_rows(const rq *r, const int32_t *acc, int64_t m0, int64_t m1, int64_t N,
                         char *out, int64_t sm, int64_t sn, int64_t am, int64_t an) {
  const float *f = r->scale, *g = r->bias;
  const int32_t lo = r->relu && r->ozp > r->lo ? r->ozp : r->lo, hi = r->hi, zp = r->ozp;
  const bool n_outer = sn != 1;
  for (int64_t o_ = n_outer ? 0 : m0; o_ < (n_outer ? N : m1); o_++) {
    const int64_t i0 = n_outer ? m0 : 0, i1 = n_outer ? m1 : N;
    const int64_t ob = n_outer ? o_ * sn : o_ * sm, ab = n_outer ? o_ * an : o_ * am;
    const int64_t is = n_outer ? sm : sn, ia = n_outer ? am : an;
    if (r->odt == OF_FLOAT32) {
      float *y = (float *)out + ob;
      for (int64_t i = i0; i < i1; i++) {
        const int64_t n = n_outer ? o_ : i;
        float v = (float)acc[ab + i * ia] * f[n] + g[n];
        y[i * is] = r->relu && v < 0.f ? 0.f : v;
      }
      continue;
    }
    if (is == 1 && ia == 1) {   /* contiguous in both: a vector run */
      const int32_t *ac = acc + ab + i0;
      char *y = out + (ob + i0);
      if (n_outer) requant_run(ac, f + o_, g + o_, 0, i1 - i0, zp, lo, hi, r->odt == OF_UINT8, y);
      else requant_run(ac, f + i0, g + i0, 1, i1 - i0, zp, lo, hi, r->odt == OF_UINT8, y);
      continue;
    }
    if (n_outer) {   /* one channel: constant factors, contiguous runs */
      const float fn = f[o_], gn = g[o_];
      const int32_t *ac = acc + ab;
      if (r->odt == OF_UINT8) {
        uint8_t *y = (uint8_t *)out + ob;
        for (int64_t i = i0; i < i1; i++) {
          int32_t q = (int32_t)round_even(((float)ac[i * ia] + gn) * fn) + zp;
          y[i * is] = (uint8_t)(q < lo ? lo : q > hi ? hi : q);
        }
      } else {
        int8_t *y = (int8_t *)out + ob;
        for (int64_t i = i0; i < i1; i++) {
          int32_t q = (int32_t)round_even(((float)ac[i * ia] + gn) * fn) + zp;
          y[i * is] = (int8_t)(q < lo ? lo : q > hi ? hi : q);
        }
      }
    } else {
      for (int64_t i = i0; i < i1; i++) {
        int32_t q = (int32_t)round_even(((float)acc[ab + i * ia] + g[i]) * f[i]) + zp;
        q = q < lo ? lo : q > hi ? hi : q;
        if (r->odt == OF_UINT8) ((uint8_t *)out)[ob + i * is] = (uint8_t)q;
        else ((int8_t *)out)[ob + i * is] = (int8_t)q;
      }
    }
  }
}

/* ---- argument checks shared by both ops ---- */
static bool is_q8(of_dtype d) { return d == OF_UINT8 || d == OF_INT8; }
static int32_t qlo(of_dtype d) { return d == OF_UINT8 ? 0 : -128; }
static int32_t qhi(of_dtype d) { return d == OF_UINT8 ? 255 : 127; }

/* the element count of a recorded input (0 when absent) */
static int64_t meta_numel(const of_meta *m) {
  return m->ndim < 0 ? 0 : of_shape_numel(m->shape, m->ndim);
}

/* On the inputs' metas (ndim -1: absent): what the ops' parameters must be */
static of_status check_params(const char *op, const of_meta *x, const of_meta *w,
                              const of_meta *ws, const of_meta *wzp, const of_meta *bias,
                              int64_t O, double xs, int64_t xzp, double os, int64_t ozp,
                              int32_t odt) {
  const int64_t wsn = meta_numel(ws);
  if (!is_q8(x->dtype))
    return of_fail(OF_ERR_DTYPE, "%s: input must hold uint8 or int8 values (a quantized tensor's "
                   "int_repr), got %s", op, OF_DT(x));
  if (w->dtype != OF_INT8)
    return of_fail(OF_ERR_DTYPE, "%s: weight must be int8 (qint8), got %s", op, OF_DT(w));
  if (ws->dtype != OF_FLOAT32 || (wsn != O && wsn != 1))
    return of_fail(OF_ERR_ARG, "%s: weight scales must be float32 with 1 or %lld values, got %s %s",
                   op, (long long)O, OF_DT(ws), OF_SHAPE_STR(ws));
  if (wzp->ndim >= 0 && (wzp->dtype != OF_INT64 || meta_numel(wzp) != wsn))
    return of_fail(OF_ERR_ARG, "%s: weight zero points must be int64 like the scales (%lld), got %s %s",
                   op, (long long)wsn, OF_DT(wzp), OF_SHAPE_STR(wzp));
  if (bias->ndim >= 0 && (bias->dtype != OF_FLOAT32 || meta_numel(bias) != O))
    return of_fail(OF_ERR_ARG, "%s: bias must be float32 [%lld], got %s %s", op, (long long)O,
                   OF_DT(bias), OF_SHAPE_STR(bias));
  if (!(xs > 0) || !isfinite(xs))
    return of_fail(OF_ERR_ARG, "%s: input scale must be positive and finite, got %g", op, xs);
  if (xzp < qlo(x->dtype) || xzp > qhi(x->dtype))
    return of_fail(OF_ERR_ARG, "%s: input zero point %lld is outside %s's range", op,
                   (long long)xzp, OF_DT(x));
  if (odt != OF_FLOAT32) {
    if (!is_q8((of_dtype)odt))
      return of_fail(OF_ERR_DTYPE, "%s: output dtype must be uint8, int8 or float32, got %s", op,
                     of_dtype_name(odt));
    if (!(os > 0) || !isfinite(os))
      return of_fail(OF_ERR_ARG, "%s: output scale must be positive and finite, got %g", op, os);
    if (ozp < qlo((of_dtype)odt) || ozp > qhi((of_dtype)odt))
      return of_fail(OF_ERR_ARG, "%s: output zero point %lld is outside %s's range", op,
                     (long long)ozp, of_dtype_name(odt));
  }
  return OF_OK;
}

/* the kernels are the CPU's: checked after the shapes (a loaded graph's
 * re-inference knows no devices) */
static of_status cpu_only(const char *op, of_tensor **ts, int32_t n) {
  of_device dev;
  OF_CHECK(of_common_device(op, ts, n, &dev));
  if (dev != OF_CPU) return of_fail(OF_ERR_DEVICE, "%s: quantized kernels run on the CPU only", op);
  return OF_OK;
}

/* weight [O, K] -> int16 [O, kp] minus its zero points */
static of_status pack_weight(const char *op, of_tensor *w, of_tensor *wzp, int64_t O, int64_t K,
                             int64_t kp, int16_t **out) {
  of_tensor *wc, *zc = NULL;
  OF_CHECK(of_dense(w, OF_INT8, &wc));
  of_status st = wzp ? of_dense(wzp, OF_INT64, &zc) : OF_OK;
  int16_t *B = st == OF_OK ? calloc((size_t)(O * kp), sizeof *B) : NULL;
  if (st == OF_OK && !B) st = of_fail(OF_ERR_OOM, "%s: out of memory packing the weight", op);
  if (st == OF_OK) {
    const int8_t *wp = (const int8_t *)of_ptr(wc);
    const int64_t *zp = zc ? (const int64_t *)of_ptr(zc) : NULL;
    for (int64_t o = 0; o < O && st == OF_OK; o++) {
      const int64_t z = zp ? zp[zc->numel == 1 ? 0 : o] : 0;
      if (z < -128 || z > 127)
        st = of_fail(OF_ERR_ARG, "%s: weight zero point %lld is outside int8's range", op, (long long)z);
      for (int64_t k = 0; k < K; k++) B[o * kp + k] = (int16_t)(wp[o * K + k] - z);
    }
  }
  of_tensor_release(wc);
  if (zc) of_tensor_release(zc);
  if (st != OF_OK) free(B), B = NULL;
  *out = B;
  return st;
}

static void split_rows(int64_t M, int nt, int t, int64_t *m0, int64_t *m1) {
  int64_t per = (M + nt - 1) / nt;
  per += per & 1;   /* even blocks for the 2-row kernel */
  *m0 = per * t < M ? per * t : M;
  *m1 = *m0 + per < M ? *m0 + per : M;
}

/* ---- AVX-512 VNNI, u8 x s8: vpdpbusd ----
 * vpdpbusd multiplies 4 unsigned bytes by 4 signed bytes and adds the four
 * products to an int32 lane without an int16 intermediate, so it is exact
 * (unlike pmaddubsw, which saturates): 64 products per instruction, twice
 * the int16 kernel's, from operands half the size. The activations stay
 * bytes (int8 ones shifted by 128 to uint8, their zero point with them),
 * the weights minus their zero points must be int8 (always so for the
 * symmetric weights of the default qconfigs; otherwise the int16 kernel
 * runs), and the input zero point comes off afterwards:
 *   sum_k (x - xz)(w - wz) = sum_k x (w - wz) - xz * sum_k (w - wz)
 * (|sum| <= 255 * 128 * QK_MAX < 2^31).
 *
 * The kernel, vnni_tile: up to 4 rows of activations (4 bytes broadcast)
 * times up to 4 vectors of 16 output channels (weights packed
 * [channel / 16][k / 4][16][4]), so that results are rows of channels. A
 * row's K bytes are read as taps: segments at fixed offsets from the row's
 * base. A linear layer has one tap, its input rows; a convolution reads
 * its input as channels-last bytes inside a border of the zero point, a
 * row per output position and a tap per kernel row (kw * C bytes lie
 * together without dilation along W) or, with it, per kernel element
 * (channels padded to 4): no column matrix is built, the weights' K runs
 * (kh, kw, c). */
#if defined(__x86_64__)
static bool have_vnni(void) {
  return of_cpu_isa() >= OF_ISA_AVX512 && __builtin_cpu_supports("avx512vnni");
}

static inline int32_t ld32(const uint8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}

typedef struct {
  const uint8_t *S;               /* activation bytes */
  const int64_t *roff, *toff;     /* per row: its base in S; per tap: offset from the base */
  int64_t ntap, k4t;              /* taps, 4-byte groups per tap */
  const int8_t *V;                /* packed weights, vb bytes per 16 channels */
  int64_t vb;
  int32_t *C;                     /* results: row i at C + i * ci */
  int64_t ci, nvalid;             /* valid channels (the last vector is masked) */
  const int32_t *corr;            /* per channel, subtracted (padded to 16) */
  /* set (8-bit outputs): the results requantised in registers, row i's
   * bytes at O + i * oi (C unused) */
  const rq *q;
  char *O;
  int64_t oi;
} vnni_job;

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), always_inline)) static inline void
vnni_tile(const vnni_job *j, const int mr, const int nv, int64_t i, int64_t v0) {
  __m512i c[4][4];
  const uint8_t *s[4];
  for (int r = 0; r < mr; r++) {
    s[r] = j->S + j->roff[i + r];
    for (int v = 0; v < nv; v++) c[r][v] = _mm512_setzero_si512();
  }
  const int8_t *V = j->V + v0 * j->vb;
  for (int64_t t = 0; t < j->ntap; t++) {
    const int64_t off = j->toff[t];
    const int8_t *Vt = V + t * j->k4t * 64;
    for (int64_t k = 0; k < j->k4t; k++) {
      __m512i b[4];
      for (int v = 0; v < nv; v++) b[v] = _mm512_loadu_si512(Vt + v * j->vb + k * 64);
      for (int r = 0; r < mr; r++) {
        const __m512i a = _mm512_set1_epi32(ld32(s[r] + off + 4 * k));
        for (int v = 0; v < nv; v++) c[r][v] = _mm512_dpbusd_epi32(c[r][v], a, b[v]);
      }
    }
  }
  if (j->q && j->q->odt == OF_FLOAT32) {
    /* float results (dynamic quantization's): requant_rows' s_n * acc +
     * bias on the registers, multiply and add unfused as there */
    const rq *q = j->q;
    const __m512 zero = _mm512_setzero_ps();
    for (int v = 0; v < nv; v++) {
      const int64_t n0 = (v0 + v) * 16, left = j->nvalid - n0;
      const __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
      const __m512i corr = _mm512_loadu_si512(j->corr + n0);
      const __m512 f = _mm512_maskz_loadu_ps(m, q->scale + n0), g = _mm512_maskz_loadu_ps(m, q->bias + n0);
      for (int r = 0; r < mr; r++) {
        __m512 x = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(c[r][v], corr)), f), g);
        if (q->relu) x = _mm512_max_ps(x, zero);
        _mm512_mask_storeu_ps((float *)(j->O + (i + r) * j->oi) + n0, m, x);
      }
    }
    return;
  }
  if (j->q) {
    /* requant_run_avx512's steps on the registers: no int32 round trip
     * through memory (a ResNet-18 stage-1 layer wrote and read 1.6 MB of
     * them at batch 8) */
    const rq *q = j->q;
    const int32_t lo = q->relu && q->ozp > q->lo ? q->ozp : q->lo;
    const __m512 big = _mm512_set1_ps(4194304.0f), nbig = _mm512_set1_ps(-4194304.0f);
    const __m512i vzp = _mm512_set1_epi32(q->ozp), vlo = _mm512_set1_epi32(lo), vhi = _mm512_set1_epi32(q->hi);
    for (int v = 0; v < nv; v++) {
      const int64_t n0 = (v0 + v) * 16, left = j->nvalid - n0;
      const __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
      const __m512i corr = _mm512_loadu_si512(j->corr + n0);
      const __m512 f = _mm512_maskz_loadu_ps(m, q->scale + n0), g = _mm512_maskz_loadu_ps(m, q->bias + n0);
      for (int r = 0; r < mr; r++) {
        __m512 x = _mm512_cvtepi32_ps(_mm512_sub_epi32(c[r][v], corr));
        x = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_add_ps(x, g), f), nbig), big);
        __m512i y = _mm512_add_epi32(_mm512_cvtps_epi32(x), vzp);
        y = _mm512_min_epi32(_mm512_max_epi32(y, vlo), vhi);
        _mm_mask_storeu_epi8(j->O + (i + r) * j->oi + n0, m, _mm512_cvtepi32_epi8(y));
      }
    }
    return;
  }
  for (int r = 0; r < mr; r++)
    for (int v = 0; v < nv; v++) {
      const int64_t n0 = (v0 + v) * 16, left = j->nvalid - n0;
      const __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
      const __m512i x = _mm512_sub_epi32(c[r][v], _mm512_loadu_si512(j->corr + n0));
      _mm512_mask_storeu_epi32(j->C + (i + r) * j->ci + n0, m, x);
    }
}

/* rows [i0, i1) against channel vectors [v0, v1): all rows against 64
 * channels at a time, so that those channels' packed weights (64 * K
 * bytes: 295 KB for a 3x3 conv of 512 inputs) stay in L2 while the rows
 * pass, instead of every 4 rows streaming the whole weight (2.4 MB there)
 * from L3 */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), OF_GCC_OPTIMIZE("fp-contract=off"))) static void
vnni_gemm(const vnni_job *j, int64_t i0, int64_t i1, int64_t v0, int64_t v1) {
  for (int64_t v = v0; v < v1; v += 4) {
    const int nv = v1 - v < 4 ? (int)(v1 - v) : 4;
    for (int64_t i = i0; i < i1; i += 4) {
      const int mr = i1 - i < 4 ? (int)(i1 - i) : 4;
#define VT(R, N) \
  case R * 8 + N: vnni_tile(j, R, N, i, v); break;
      switch (mr * 8 + nv) {
        VT(1, 1) VT(1, 2) VT(1, 3) VT(1, 4) VT(2, 1) VT(2, 2) VT(2, 3) VT(2, 4)
        VT(3, 1) VT(3, 2) VT(3, 3) VT(3, 4) VT(4, 1) VT(4, 2) VT(4, 3) VT(4, 4)
        default: break;
      }
#undef VT
    }
  }
}

/* ---- AVX2, u8 x s8 with 7-bit activations: pmaddubsw ----
 * Without VNNI the byte multiply is pmaddubsw: 32 u8 x s8 products summed
 * in pairs into int16 lanes, which saturate unless the activations are
 * 7-bit (2 * 127 * 128 = 32512 fits; 2 * 255 * 128 does not) -- the reason
 * for fbgemm's reduce_range, which the default x86/fbgemm qconfigs and
 * dynamic quantization use, so their activations are bytes in [0, 127]. A
 * pmaddwd by ones then sums the pairs into int32 lanes, exactly as
 * vpdpbusd would. This kernel runs vnni_job's layouts (the same packed
 * weights, taps and fused requantisation) for uint8 inputs whose zero
 * point is below 128; their few bytes above 127 (counted per call, one
 * pass) are handled by u7_add_excess, and with many of them (or other
 * inputs) the exact int16 kernel runs. On a
 * Zen 3 (doc/benchmarks.md "Model optimisation") the 4-row block ran a
 * ResNet-18's 3x3 layers at about 90 GMAC/s a thread where the int16
 * kernel (im2col, a dot product per output) ran at 16-39, and a block of
 * the same loop with pmaddwd on int16 pairs instead reached about 68. */
static bool have_u7(void) { return of_cpu_isa() >= OF_ISA_AVX2; }

/* the bytes above 127 among n: their count, and their offsets (ascending)
 * into at where given */
__attribute__((target("avx2"))) static int64_t high_bytes(const uint8_t *p, int64_t n, int64_t *at) {
  int64_t cnt = 0, i = 0;
  for (; i + 32 <= n; i += 32) {
    uint32_t m = (uint32_t)_mm256_movemask_epi8(_mm256_loadu_si256((const __m256i *)(p + i)));
    if (!at) cnt += __builtin_popcount(m);
    else
      for (; m; m &= m - 1) at[cnt++] = i + __builtin_ctz(m);
  }
  for (; i < n; i++)
    if (p[i] > 127) {
      if (at) at[cnt] = i;
      cnt++;
    }
  return cnt;
}

/* n bytes copied, those above 127 as 127 */
__attribute__((target("avx2"))) static void copy_min127(uint8_t *d, const uint8_t *s, int64_t n) {
  const __m256i m = _mm256_set1_epi8(127);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    _mm256_storeu_si256((__m256i *)(d + i), _mm256_min_epu8(_mm256_loadu_si256((const __m256i *)(s + i)), m));
  for (; i < n; i++) d[i] = s[i] > 127 ? 127 : s[i];
}

/* the bytes above 127 among n: their count, with their offsets in *at
 * (malloc'd, NULL when there are none or more than n / 32: the callers run
 * the int16 kernel then); -1 when out of memory */
static int64_t high_offsets(const uint8_t *p, int64_t n, int64_t **at) {
  const int64_t cnt = high_bytes(p, n, NULL);
  *at = NULL;
  if (cnt == 0 || cnt > n / 32) return cnt;
  if (!(*at = malloc((size_t)cnt * sizeof **at))) return -1;
  high_bytes(p, n, *at);
  return cnt;
}

/* lanes [0, left) set */
__attribute__((target("avx2"), always_inline)) static inline __m256i lanes_upto(int64_t left) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(left > 8 ? 8 : (int32_t)left), idx);
}

/* mr rows against the 16 channels of vector v: two 8-lane halves */
__attribute__((target("avx2"), always_inline)) static inline void u7_tile(const vnni_job *j, const int mr,
                                                                          int64_t i, int64_t v) {
  __m256i c[4][2];
  const uint8_t *s[4];
  const __m256i one = _mm256_set1_epi16(1);
  for (int r = 0; r < mr; r++) {
    s[r] = j->S + j->roff[i + r];
    c[r][0] = c[r][1] = _mm256_setzero_si256();
  }
  const int8_t *V = j->V + v * j->vb;
  for (int64_t t = 0; mr == 4 && t < j->ntap; t++) {
    /* four rows: written out, as GCC's schedule of the intrinsics below
     * spilled an accumulator and copied seven registers a step (eight
     * accumulators, two weight vectors, the ones and the temporaries
     * leave no slack in 16 registers); the shared temporaries are renamed
     * by the CPU. Weights in ymm10/11, ones in ymm15. */
    const int64_t off = j->toff[t], ke = 4 * j->k4t;
    const uint8_t *p0 = s[0] + off, *p1 = s[1] + off, *p2 = s[2] + off, *p3 = s[3] + off;
    const int8_t *vt = V + t * j->k4t * 64;
    int64_t k = 0;
#define U7ROW(P, A, B)                         \
  "vpbroadcastd (%[" P "],%[k]), %%ymm12\n\t" \
  "vpmaddubsw %%ymm10, %%ymm12, %%ymm13\n\t"  \
  "vpmaddubsw %%ymm11, %%ymm12, %%ymm12\n\t"  \
  "vpmaddwd %%ymm15, %%ymm13, %%ymm13\n\t"    \
  "vpmaddwd %%ymm15, %%ymm12, %%ymm12\n\t"    \
  "vpaddd %%ymm13, %[" A "], %[" A "]\n\t"    \
  "vpaddd %%ymm12, %[" B "], %[" B "]\n\t"
    __asm__("vpcmpeqw %%ymm15, %%ymm15, %%ymm15\n\t"
            "vpsrlw $15, %%ymm15, %%ymm15\n\t"
            "1:\n\t"
            "vmovdqu (%[v]), %%ymm10\n\t"
            "vmovdqu 32(%[v]), %%ymm11\n\t"
            U7ROW("p0", "c00", "c01") U7ROW("p1", "c10", "c11") U7ROW("p2", "c20", "c21")
            U7ROW("p3", "c30", "c31")
            "add $64, %[v]\n\t"
            "add $4, %[k]\n\t"
            "cmp %[ke], %[k]\n\t"
            "jl 1b\n\t"
            : [c00] "+x"(c[0][0]), [c01] "+x"(c[0][1]), [c10] "+x"(c[1][0]), [c11] "+x"(c[1][1]),
              [c20] "+x"(c[2][0]), [c21] "+x"(c[2][1]), [c30] "+x"(c[3][0]), [c31] "+x"(c[3][1]),
              [v] "+r"(vt), [k] "+r"(k)
            : [p0] "r"(p0), [p1] "r"(p1), [p2] "r"(p2), [p3] "r"(p3), [ke] "r"(ke)
            : "xmm10", "xmm11", "xmm12", "xmm13", "xmm15", "memory", "cc");
#undef U7ROW
  }
  for (int64_t t = 0; mr < 4 && t < j->ntap; t++) {
    const int64_t off = j->toff[t];
    const int8_t *Vt = V + t * j->k4t * 64;
    for (int64_t k = 0; k < j->k4t; k++) {
      const __m256i b0 = _mm256_loadu_si256((const __m256i *)(Vt + k * 64));
      const __m256i b1 = _mm256_loadu_si256((const __m256i *)(Vt + k * 64 + 32));
      for (int r = 0; r < mr; r++) {
        const __m256i a = _mm256_set1_epi32(ld32(s[r] + off + 4 * k));
        c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b0), one));
        c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b1), one));
      }
    }
  }
  const int64_t n0 = v * 16, left = j->nvalid - n0;
  const __m256i m0 = lanes_upto(left), m1 = lanes_upto(left - 8);
  const __m256i corr0 = _mm256_loadu_si256((const __m256i *)(j->corr + n0));
  const __m256i corr1 = _mm256_loadu_si256((const __m256i *)(j->corr + n0 + 8));
  const rq *q = j->q;
  if (q && q->odt == OF_FLOAT32) {
    /* as vnni_tile: s_n * acc + bias, unfused */
    const __m256 f0 = _mm256_maskload_ps(q->scale + n0, m0), g0 = _mm256_maskload_ps(q->bias + n0, m0);
    const __m256 f1 = _mm256_maskload_ps(q->scale + n0 + 8, m1), g1 = _mm256_maskload_ps(q->bias + n0 + 8, m1);
    const __m256 zero = _mm256_setzero_ps();
    for (int r = 0; r < mr; r++) {
      __m256 x0 = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(c[r][0], corr0)), f0), g0);
      __m256 x1 = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(c[r][1], corr1)), f1), g1);
      if (q->relu) x0 = _mm256_max_ps(x0, zero), x1 = _mm256_max_ps(x1, zero);
      float *o = (float *)(j->O + (i + r) * j->oi) + n0;
      _mm256_maskstore_ps(o, m0, x0);
      _mm256_maskstore_ps(o + 8, m1, x1);
    }
    return;
  }
  if (q) {
    /* requant_run's steps on the registers, then 16 bytes a row */
    const int32_t lo = q->relu && q->ozp > q->lo ? q->ozp : q->lo;
    const __m256 big = _mm256_set1_ps(4194304.0f), nbig = _mm256_set1_ps(-4194304.0f);
    const __m256i vzp = _mm256_set1_epi32(q->ozp), vlo = _mm256_set1_epi32(lo), vhi = _mm256_set1_epi32(q->hi);
    const __m256 f0 = _mm256_maskload_ps(q->scale + n0, m0), g0 = _mm256_maskload_ps(q->bias + n0, m0);
    const __m256 f1 = _mm256_maskload_ps(q->scale + n0 + 8, m1), g1 = _mm256_maskload_ps(q->bias + n0 + 8, m1);
    for (int r = 0; r < mr; r++) {
      __m256 x0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(c[r][0], corr0));
      __m256 x1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(c[r][1], corr1));
      x0 = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_add_ps(x0, g0), f0), nbig), big);
      x1 = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_add_ps(x1, g1), f1), nbig), big);
      __m256i y0 = _mm256_add_epi32(_mm256_cvtps_epi32(x0), vzp), y1 = _mm256_add_epi32(_mm256_cvtps_epi32(x1), vzp);
      y0 = _mm256_min_epi32(_mm256_max_epi32(y0, vlo), vhi), y1 = _mm256_min_epi32(_mm256_max_epi32(y1, vlo), vhi);
      /* in range already, so the saturating packs only narrow: int16 in
       * lane order (0-3, 8-11, 4-7, 12-15), put back in order, then bytes */
      const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(y0, y1), 0xd8);
      const __m128i lo16 = _mm256_castsi256_si128(w16), hi16 = _mm256_extracti128_si256(w16, 1);
      const __m128i b = q->odt == OF_UINT8 ? _mm_packus_epi16(lo16, hi16) : _mm_packs_epi16(lo16, hi16);
      char *o = j->O + (i + r) * j->oi + n0;
      if (left >= 16) {
        _mm_storeu_si128((__m128i *)o, b);
      } else {
        char tmp[16];
        _mm_storeu_si128((__m128i *)tmp, b);
        memcpy(o, tmp, (size_t)left);
      }
    }
    return;
  }
  for (int r = 0; r < mr; r++) {
    int32_t *o = j->C + (i + r) * j->ci + n0;
    _mm256_maskstore_epi32(o, m0, _mm256_sub_epi32(c[r][0], corr0));
    _mm256_maskstore_epi32(o + 8, m1, _mm256_sub_epi32(c[r][1], corr1));
  }
}

/* vnni_gemm's walk: 64 channels' weights at a time against all rows */
__attribute__((target("avx2"), OF_GCC_OPTIMIZE("fp-contract=off"))) static void
u7_gemm(const vnni_job *j, int64_t i0, int64_t i1, int64_t v0, int64_t v1) {
  for (int64_t v = v0; v < v1; v += 4) {
    const int64_t ve = v + 4 < v1 ? v + 4 : v1;
    for (int64_t i = i0; i < i1; i += 4) {
      const int mr = i1 - i < 4 ? (int)(i1 - i) : 4;
      for (int64_t vv = v; vv < ve; vv++) switch (mr) {
          case 1: u7_tile(j, 1, i, vv); break;
          case 2: u7_tile(j, 2, i, vv); break;
          case 3: u7_tile(j, 3, i, vv); break;
          default: u7_tile(j, 4, i, vv); break;
        }
    }
  }
}

typedef void (*job_gemm_fn)(const vnni_job *, int64_t, int64_t, int64_t, int64_t);

/* the byte kernel for inputs of zero point xz (int8 ones shifted to uint8
 * with it): VNNI's where the CPU has it, else on AVX2 pmaddubsw's for
 * uint8 inputs with xz below 128; NULL where neither applies */
static job_gemm_fn byte_gemm(bool u8, int32_t xz) {
  if (have_vnni()) return vnni_gemm;
  return have_u7() && u8 && xz < 128 ? u7_gemm : NULL;
}

/* A weight [O, Cg, kh, kw] (per group of Og channels) minus its zero
 * points as int8 in qconv_vnni's tap order (row taps: i, then (j, c) in a
 * tap of tapl bytes; else taps (i, j), then c in tapl bytes), packed
 * [group][Og / 16][K' / 4][16][4], and each channel's sum; a linear
 * layer's weight is Cg = K, kh = kw = 1. fits:
 * false where some w - wz leaves int8 (the int16 kernel runs then).
 * Packed weights are kept (a kept table, storage/kept.c), as PyTorch's
 * prepacked ones: a quantized model packs each weight once. The key is the
 * weight's and zero points' storages (unique ids) with their version
 * counters, which every in-place write bumps, and the layout. 256 entries, as
 * oneDNN's reordered weights (dnnl.c): a ResNet-18 has 21 weights, a
 * ResNet-50 54, and a cyclic walk over more weights than entries misses
 * every time (16 entries repacked ResNet-18's at every forward: 3.3 ms a
 * convolution instead of 0.3). of_release_kernel_caches empties it. */
typedef struct {
  of_kept k;   /* first: the kept table's entry */
  int8_t *B;
  int32_t *rowsum;   /* per group, padded to a multiple of 16 */
  bool fits;
} packed_w;
static of_kept *wcache_slots[256];
static of_kept_table wcache = OF_KEPT_TABLE(wcache_slots, INT64_MAX);

static void packed_free(of_kept *k) {
  packed_w *e = (packed_w *)k;
  free(e->B), free(e->rowsum), free(e);
}

static void packed_release(packed_w *e) {
  if (e) of_kept_release(&wcache, &e->k);
}

static of_status pack_weight_s8(const char *op, of_tensor *w, of_tensor *wzp, int64_t O, int64_t G,
                                int64_t Cg, int64_t kh, int64_t kw, int64_t tapl, bool rowtaps,
                                packed_w **out) {
  const int64_t key[OF_KEPT_KEY] = {w->storage->id, w->storage->version, w->offset, O, G, Cg, kh, kw, tapl,
                           rowtaps, w->strides[0], w->strides[1], w->ndim > 2 ? w->strides[2] : 0,
                           wzp ? wzp->storage->id : -1, wzp ? wzp->storage->version : 0,
                           wzp ? wzp->offset : 0};
  *out = (packed_w *)of_kept_find(&wcache, key);
  if (*out) return OF_OK;

  const int64_t Og = O / G, Ogp = (Og + 15) / 16 * 16, khw = kh * kw, K = Cg * khw;
  const int64_t kq = (rowtaps ? kh : khw) * tapl;
  of_tensor *wc, *zc = NULL;
  OF_CHECK(of_dense(w, OF_INT8, &wc));
  of_status st = wzp ? of_dense(wzp, OF_INT64, &zc) : OF_OK;
  packed_w *e = st == OF_OK ? calloc(1, sizeof *e) : NULL;
  if (e) {
    e->k.refs = 1, e->k.free = packed_free, e->fits = true;
    memcpy(e->k.key, key, sizeof key);
    e->B = calloc((size_t)(G * Ogp * kq), 1);
    e->rowsum = calloc((size_t)(G * Ogp), sizeof *e->rowsum);
  }
  if (st == OF_OK && (!e || !e->B || !e->rowsum))
    st = of_fail(OF_ERR_OOM, "%s: out of memory packing the weight", op);
  const int8_t *wp = st == OF_OK ? (const int8_t *)of_ptr(wc) : NULL;
  const int64_t *zp = zc ? (const int64_t *)of_ptr(zc) : NULL;
  for (int64_t o = 0; st == OF_OK && e->fits && o < O; o++) {
    const int64_t z = zp ? zp[zc->numel == 1 ? 0 : o] : 0;
    if (z < -128 || z > 127) {
      st = of_fail(OF_ERR_ARG, "%s: weight zero point %lld is outside int8's range", op, (long long)z);
      break;
    }
    const int64_t g = o / Og, og = o % Og;
    int8_t *col = e->B + (g * Ogp + og / 16 * 16) * kq + (og % 16) * 4;
    int32_t sum = 0;
    for (int64_t k = 0; k < K; k++) {
      const int64_t v = wp[o * K + k] - z;
      if (v < -128 || v > 127) {
        e->fits = false;
        break;
      }
      sum += (int32_t)v;
      /* (c, i, j) -> row taps: (i, j, c); else taps (i, j), c */
      const int64_t c = k / khw, i = k % khw / kw, j_ = k % kw;
      const int64_t kn = rowtaps ? i * tapl + j_ * Cg + c : (i * kw + j_) * tapl + c;
      col[(kn >> 2) * 64 + (kn & 3)] = (int8_t)v;
    }
    e->rowsum[g * Ogp + og] = sum;
  }
  of_tensor_release(wc);
  if (zc) of_tensor_release(zc);
  if (st != OF_OK) {
    if (e) packed_free(&e->k);
    return st;
  }
  if (!e->fits) free(e->B), free(e->rowsum), e->B = NULL, e->rowsum = NULL;
  e->k.bytes = e->fits ? G * Ogp * (kq + (int64_t)sizeof *e->rowsum) : 0;
  of_kept_put(&wcache, &e->k);
  *out = e;
  return OF_OK;
}

void of_quant_release_cached(void) { of_kept_forget(&wcache, 0, true); }

void of_quant_forget_weight(int64_t sid) { of_kept_forget(&wcache, sid, false); }

/* xz times each channel's sum: the input zero point's share of the sums */
static int32_t *zp_terms(const packed_w *e, int64_t n, int32_t xz) {
  int32_t *c = malloc((size_t)n * sizeof *c);
  for (int64_t i = 0; c && i < n; i++) c[i] = xz * e->rowsum[i];
  return c;
}
#endif

#if defined(__x86_64__)
/* The AVX2 byte kernel's bytes above 127. A calibrated model's activations
 * are 7-bit by reduce_range, but the histogram observer clips its ranges,
 * so some bytes up to 255 still come (0.001-0.005% of each convolution's
 * input in the Fashion-MNIST ResNet-18 of examples/quantization, at most
 * 189). Those are multiplied as 127 and their excess (x - 127) times their
 * weights is added to the int32 sums afterwards, here, so every result
 * stays exact; inputs with many of them take the int16 kernel instead. */
typedef struct {
  const uint8_t *x;        /* the input's channels-last bytes */
  const int64_t *at;       /* offsets of the bytes above 127, ascending */
  int64_t n;
  int64_t H, W, C, Cg, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, Og, Ogp, kq, tapl;
  bool rowtaps;
  const int8_t *B;         /* pack_weight_s8's weights, kq bytes a channel */
} u7_excess;

/* acc (row (s - s0) * L + l, Og channels a row) += the excess of the bytes
 * of samples [s0, s0 + sc) in group g, for the positions l in [l0, l1) */
static void u7_add_excess(const u7_excess *e, int64_t g, int64_t s0, int64_t sc, int64_t l0, int64_t l1,
                          int32_t *acc) {
  const int64_t HWC = e->H * e->W * e->C, L = e->OH * e->OW;
  int64_t q = 0, hi = e->n;
  while (q < hi) {   /* the first at or past sample s0 */
    const int64_t mid = q + (hi - q) / 2;
    if (e->at[mid] < s0 * HWC) q = mid + 1;
    else hi = mid;
  }
  const int8_t *Bg = e->B + g * e->Ogp * e->kq;
  for (; q < e->n && e->at[q] < (s0 + sc) * HWC; q++) {
    const int64_t idx = e->at[q], s = idx / HWC, rem = idx % HWC;
    const int64_t h = rem / (e->W * e->C), w = rem / e->C % e->W, c = rem % e->C - g * e->Cg;
    if (c < 0 || c >= e->Cg) continue;
    const int32_t ex = (int32_t)e->x[idx] - 127;
    for (int64_t i = 0; i < e->kh; i++) {
      const int64_t t = h + e->ph - i * e->dh;
      if (t < 0 || t % e->sh || t / e->sh >= e->OH) continue;
      for (int64_t j = 0; j < e->kw; j++) {
        const int64_t u = w + e->pw - j * e->dw;
        if (u < 0 || u % e->sw || u / e->sw >= e->OW) continue;
        const int64_t l = t / e->sh * e->OW + u / e->sw;
        if (l < l0 || l >= l1) continue;
        const int64_t kn = e->rowtaps ? i * e->tapl + j * e->Cg + c : (i * e->kw + j) * e->tapl + c;
        const int8_t *wk = Bg + (kn >> 2) * 64 + (kn & 3);
        int32_t *a = acc + ((s - s0) * L + l) * e->Og;
        for (int64_t o = 0; o < e->Og; o++) a[o] += ex * wk[(o >> 4) * e->kq * 16 + (o & 15) * 4];
      }
    }
  }
}
#endif

/* quantized_linear through vnni_gemm (u7_gemm on AVX2): *done false where
 * it does not apply (neither, int8 or full-range inputs without VNNI, or
 * weights minus zero points outside int8) */
static of_status qlinear_vnni(const char *op, of_tensor *xc, of_tensor *w, of_tensor *wzp, int64_t M,
                              int64_t K, int64_t O, int32_t xzp, const rq *r, char *outp, bool *done) {
  *done = false;
#if defined(__x86_64__)
  const bool u8 = xc->dtype == OF_UINT8;
  const int32_t xz = xzp + (u8 ? 0 : 128);
  const job_gemm_fn gemm = byte_gemm(u8, xz);
  if (!gemm) return OF_OK;
  /* pmaddubsw: bytes above 127 as in qconv_vnni (u7_add_excess) */
  const uint8_t *xp = (const uint8_t *)of_ptr(xc);
  int64_t *hi_at = NULL;
  const int64_t nhi = gemm == u7_gemm ? high_offsets(xp, M * K, &hi_at) : 0;
  if (nhi > M * K / 32) return OF_OK;
  const int64_t kq = (K + 3) / 4 * 4, nvec = (O + 15) / 16;
  packed_w *pk;
  OF_CHECK(pack_weight_s8(op, w, wzp, O, 1, K, 1, 1, kq, true, &pk));
  if (!pk->fits) {
    packed_release(pk);
    return OF_OK;
  }
  /* uint8 rows of a multiple of 4 bytes are read where they are; else
   * copied (int8 shifted to uint8, rows padded to 4 bytes, bytes above 127
   * as 127) */
  const bool direct = u8 && kq == K && nhi == 0;
  const int64_t xbytes = direct ? 0 : M * kq, abytes = nhi ? M * O * (int64_t)sizeof(int32_t) : 0;
  uint8_t *A = direct ? NULL : of_alloc(OF_CPU, xbytes);
  int32_t *corr = zp_terms(pk, nvec * 16, xz), *acc = nhi ? of_alloc(OF_CPU, abytes) : NULL;
  int64_t *roff = malloc((size_t)M * sizeof *roff), toff = 0;
  of_status st = (A || direct) && corr && roff && nhi >= 0 && (!nhi || acc)
                 ? OF_OK
                 : of_fail(OF_ERR_OOM, "%s: out of memory (%lld x %lld)", op, (long long)M, (long long)kq);
  if (st == OF_OK) {
    const uint8_t shift = u8 ? 0 : 128;
    for (int64_t m = 0; m < M; m++) {
      roff[m] = m * kq;
      if (direct) continue;
      uint8_t *a = A + m * kq;
      for (int64_t k = 0; k < K; k++) {
        const uint8_t v = (uint8_t)(xp[m * K + k] + shift);
        a[k] = nhi && v > 127 ? 127 : v;
      }
      for (int64_t k = K; k < kq; k++) a[k] = 0;
    }
    /* results requantised (or scaled to float) in registers, straight
     * into the output rows; with an excess to add, int32 rows first */
    const int64_t esz = r->odt == OF_FLOAT32 ? 4 : 1;
    const vnni_job j = {direct ? xp : A, roff, &toff, 1, kq / 4, pk->B, kq * 16, acc, O, O, corr,
                        nhi ? NULL : r, outp, O * esz};
    const int nt = M * O * K >= OF_PARALLEL_GRAIN ? of_threads() : 1;
    /* rows over threads when there are enough, else the channels */
    const bool by_rows = M >= 4 * nt;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      const int t = omp_get_thread_num(), n = omp_get_num_threads();
      const int64_t R = by_rows ? M : nvec, per = (R + n - 1) / n;
      const int64_t a0 = per * t < R ? per * t : R, a1 = a0 + per < R ? a0 + per : R;
      if (a1 > a0) {
        if (by_rows) gemm(&j, a0, a1, 0, nvec);
        else gemm(&j, 0, M, a0, a1);
      }
    }
    if (nhi) {
      /* a linear layer as a 1x1 convolution of M samples of K channels */
      const u7_excess ex = {xp, hi_at, nhi, 1, 1, K, K, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, O, nvec * 16, kq, kq, true,
                            pk->B};
      u7_add_excess(&ex, 0, 0, M, 0, 1, acc);
#pragma omp parallel num_threads(nt) if (nt > 1)
      {
        int64_t m0, m1;
        split_rows(M, omp_get_num_threads(), omp_get_thread_num(), &m0, &m1);
        if (m1 > m0) requant_rows(r, acc, m0, m1, O, outp, O, 1, O, 1);
      }
    }
    *done = true;
  }
  if (A) of_free(OF_CPU, A, xbytes);
  if (acc) of_free(OF_CPU, acc, abytes);
  free(corr), free(roff), free(hi_at);
  packed_release(pk);
  return st;
#else
  (void)op, (void)xc, (void)w, (void)wzp, (void)M, (void)K, (void)O, (void)xzp, (void)r, (void)outp;
  return OF_OK;
#endif
}

/* quantized_conv2d through vnni_gemm (*done as qlinear_vnni), channels-last
 * in and out as PyTorch's quantized convolutions: per sample and group,
 * the input's channels-last bytes copied row by row into a plane inside a
 * border of the zero point, rows = output positions, taps = kernel
 * elements; each row's results (the group's channels) requantised straight
 * into the output's channels-last row. An NCHW input is made channels-last
 * first (one copy; a converted model's convolutions feed each other
 * channels-last, so only the first one pays it). Before, the input bytes
 * were scattered from NCHW and the int32 results transposed back to NCHW
 * planes at every layer. fac holds each group's requantisation factors
 * (2 * Og floats a group); *out is the channels-last result. */
static of_status qconv_vnni(const char *op, of_tensor *x, of_tensor *w, of_tensor *wzp, const a_quant *p,
                            const float *fac, const of_meta *ym, of_tensor **out, bool *done) {
  *done = false;
#if defined(__x86_64__)
  const bool u8 = x->dtype == OF_UINT8;
  const int32_t xz = (int32_t)p->x_zp + (u8 ? 0 : 128);
  const job_gemm_fn gemm = byte_gemm(u8, xz);
  if (!gemm) return OF_OK;
  const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
  const int64_t O = w->shape[0], Cg = w->shape[1], kh = w->shape[2], kw = w->shape[3];
  const int64_t G = p->groups, Og = O / G, Ogp = (Og + 15) / 16 * 16, nvec = Ogp / 16;
  /* without dilation along W a kernel row's kw * Cg bytes lie together:
   * one tap a row (its length rounded up to 4: the extra bytes meet zero
   * weights); else a tap an element, channels padded to 4 */
  const bool rowtaps = p->dilation[1] == 1;
  const int64_t cp = rowtaps ? Cg : (Cg + 3) / 4 * 4, K = Cg * kh * kw;
  const int64_t ntap = rowtaps ? kh : kh * kw, tapl = rowtaps ? (kw * Cg + 3) / 4 * 4 : cp;
  const int64_t sh = p->stride[0], sw = p->stride[1], ph = p->padding[0], pw = p->padding[1];
  const int64_t dh = p->dilation[0], dw = p->dilation[1];
  const int64_t OH = ym->shape[2], OW = ym->shape[3];
  const int64_t L = OH * OW, Hp = H + 2 * ph, Wp = W + 2 * pw, plane = Hp * Wp * cp + 4;
  const int64_t esz = of_dtype_size((of_dtype)p->out_dtype);
  packed_w *pk;
  OF_CHECK(pack_weight_s8(op, w, wzp, O, G, Cg, kh, kw, tapl, rowtaps, &pk));
  if (!pk->fits) {
    packed_release(pk);
    return OF_OK;
  }
  const int nth = L * O * K >= OF_PARALLEL_GRAIN ? of_threads() : 1;
  const bool by_sample = nth > 1 && N >= nth;
  /* small maps: S samples' planes side by side, their rows one gemm of at
   * least 64 rows, so that each 64 channels' weights, read once from L3,
   * meet that many rows (ResNet's last stage has 16 positions a sample;
   * a sample at a time read its 2.4 MB weights again for each sample) */
  const int64_t S = by_sample && L < 64 ? ((64 + L - 1) / L < N / nth ? (64 + L - 1) / L : N / nth) : 1;
  const int nbuf = by_sample ? nth : 1;
  of_tensor *xl = NULL;
  of_status st = of_dense_format(x, true, x->dtype, &xl);
  /* AVX2: bytes above 127 go into the planes as 127, their offsets kept
   * for u7_add_excess; over 1/32 of the input, the int16 kernel runs */
  const int64_t xn = N * C * H * W;
  const uint8_t *xraw = st == OF_OK ? (const uint8_t *)of_ptr(xl) : NULL;
  int64_t *hi_at = NULL;
  int64_t nhi = st == OF_OK && gemm == u7_gemm ? high_offsets(xraw, xn, &hi_at) : 0;
  if (nhi > xn / 32) {
    of_tensor_release(xl);
    packed_release(pk);
    return OF_OK;
  }
  if (nhi < 0) st = of_fail(OF_ERR_OOM, "%s: out of memory", op), nhi = 0;
  const u7_excess ex = {xraw, hi_at, nhi, H, W, C, Cg, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, Og, Ogp,
                        ntap * tapl, tapl, rowtaps, pk->B};
  /* scratch from the caching allocator: fresh pages from malloc (mmap
   * above its threshold) cost more to fault in than the convolution */
  /* 8-bit outputs are requantised in the gemm's registers (fused); a
   * float32 output, or sums that take an excess, go through int32 rows (acc) */
  const bool fused = p->out_dtype != OF_FLOAT32 && nhi == 0;
  const int64_t pbytes = nbuf * S * plane;
  const int64_t abytes = fused ? 0 : nbuf * S * L * Og * (int64_t)sizeof(int32_t);
  if (st == OF_OK) st = of_tensor_new_channels_last(ym->shape, 4, ym->dtype, OF_CPU, out);
  uint8_t *P = st == OF_OK ? of_alloc(OF_CPU, pbytes) : NULL;
  int32_t *acc = st == OF_OK && !fused ? of_alloc(OF_CPU, abytes) : NULL;
  int32_t *corr = zp_terms(pk, G * Ogp, xz);
  int64_t *roff = malloc((size_t)(S * L) * sizeof *roff), *toff = malloc((size_t)ntap * sizeof *toff);
  if (st == OF_OK && !(P && (acc || fused) && corr && roff && toff))
    st = of_fail(OF_ERR_OOM, "%s: out of memory for the input planes", op);
  for (int64_t l = 0; st == OF_OK && l < S * L; l++)
    roff[l] = l / L * plane + ((l % L / OW) * sh * Wp + (l % L % OW) * sw) * cp;
  for (int64_t t = 0; st == OF_OK && t < ntap; t++)
    toff[t] = rowtaps ? t * dh * Wp * cp : ((t / kw) * dh * Wp + (t % kw) * dw) * cp;
  /* the border (and padding channels, which meet zero weights) holds the
   * zero point once for all samples: the copies below write the interior */
  if (st == OF_OK) memset(P, xz, (size_t)pbytes);
  const uint8_t *xb = xraw;
  char *obase = st == OF_OK ? of_ptr(*out) : NULL;
  const uint8_t shift = u8 ? 0 : 128;
  /* sample s, group g's channels-last bytes into the plane pl's interior */
#define VPLANE(pl, s, g)                                                                 \
  do {                                                                                   \
    for (int64_t h = 0; h < H; h++) {                                                    \
      const uint8_t *src = xb + (((s) * H + h) * W * C) + (g) * Cg;                      \
      uint8_t *d = (pl) + ((h + ph) * Wp + pw) * cp;                                     \
      if (Cg == C && cp == C && !shift) {                                                \
        if (nhi) copy_min127(d, src, W * C);                                             \
        else memcpy(d, src, (size_t)(W * C));                                           \
      } else {                                                                           \
        for (int64_t w_ = 0; w_ < W; w_++)                                               \
          for (int64_t c = 0; c < Cg; c++) {                                             \
            const uint8_t v_ = (uint8_t)(src[w_ * C + c] + shift);                       \
            d[w_ * cp + c] = nhi && v_ > 127 ? 127 : v_;                                 \
          }                                                                              \
      }                                                                                  \
    }                                                                                    \
  } while (0)
  /* fused: q requantises into the output rows ob; else int32 rows ac */
#define VJOB(pl, ac, g, q, ob) \
  {(pl), roff, toff, ntap, tapl / 4, pk->B + (g) * Ogp * ntap * tapl, ntap * tapl * 16, (ac), Og, Og, \
   corr + (g) * Ogp, fused ? (q) : NULL, (ob), O * esz}
#define VRQ(g)                                                                           \
  {fac + 2 * (g) * Og, fac + 2 * (g) * Og + Og, (int32_t)p->out_zp, p->relu, p->out_dtype, \
   qlo((of_dtype)p->out_dtype), qhi((of_dtype)p->out_dtype)}
  /* sample s, group g's results: row l at (s * L + l) * O + g * Og */
#define VOUT(s, g) (obase + ((s) * L * O + (g) * Og) * esz)
  if (st == OF_OK && by_sample) {
    /* each thread a contiguous run of samples, S at a time: consecutive
     * samples' output rows follow each other (row stride O) */
#pragma omp parallel num_threads(nth)
    {
      const int t = omp_get_thread_num(), n = omp_get_num_threads();
      const int64_t per = (N + n - 1) / n, s0 = per * t < N ? per * t : N, s1 = s0 + per < N ? s0 + per : N;
      uint8_t *pl = P + t * S * plane;
      int32_t *ac = acc ? acc + t * S * L * Og : NULL;
      for (int64_t s_ = s0; s_ < s1; s_ += S) {
        const int64_t sc = s1 - s_ < S ? s1 - s_ : S;
        for (int64_t g = 0; g < G; g++) {
          const rq r = VRQ(g);
          for (int64_t k = 0; k < sc; k++) VPLANE(pl + k * plane, s_ + k, g);
          const vnni_job j = VJOB(pl, ac, g, &r, VOUT(s_, g));
          gemm(&j, 0, sc * L, 0, nvec);
          if (nhi) u7_add_excess(&ex, g, s_, sc, 0, L, ac);
          if (!fused) requant_rows(&r, ac, 0, sc * L, Og, VOUT(s_, g), O, 1, Og, 1);
        }
      }
    }
  } else if (st == OF_OK) {
    for (int64_t s_ = 0; s_ < N; s_++)
      for (int64_t g = 0; g < G; g++) {
        const rq r = VRQ(g);
        char *ob = VOUT(s_, g);
        VPLANE(P, s_, g);
        const vnni_job j = VJOB(P, acc, g, &r, ob);
#pragma omp parallel num_threads(nth) if (nth > 1)
        {
          const int t = omp_get_thread_num(), n = omp_get_num_threads();
          const int64_t per = (L + n - 1) / n, l0 = per * t < L ? per * t : L;
          const int64_t l1 = l0 + per < L ? l0 + per : L;
          if (l1 > l0) {
            gemm(&j, l0, l1, 0, nvec);
            if (nhi) u7_add_excess(&ex, g, s_, 1, l0, l1, acc);
            if (!fused) requant_rows(&r, acc, l0, l1, Og, ob, O, 1, Og, 1);
          }
        }
      }
  }
#undef VOUT
#undef VRQ
#undef VJOB
#undef VPLANE
  if (st == OF_OK) *done = true;
  else if (*out) of_tensor_release(*out), *out = NULL;
  if (xl) of_tensor_release(xl);
  free(hi_at);
  if (P) of_free(OF_CPU, P, pbytes);
  if (acc) of_free(OF_CPU, acc, abytes);
  free(corr), free(roff), free(toff);
  packed_release(pk);
  return st;
#else
  (void)op, (void)x, (void)w, (void)wzp, (void)p, (void)fac, (void)ym, (void)out;
  return OF_OK;
#endif
}

/* ---- the oneDNN path ----
 * oneDNN's int8 matmul (u8/s8 x s8 -> s32, its JIT kernels) computes the
 * raw products sum x * w; the zero points are corrected afterwards, as
 * fbgemm does: sum (x - xz)(w - wz) = sum xw - xz sum w - wz sum x + K xz wz.
 * Measured on this AVX2 EPYC (doc/benchmarks.md "Model optimisation"):
 * oneDNN's int8 matmul alone beats the own gemm 2-5x on the LeNet's
 * shapes, but the whole quantized model ran 2.3x slower through it (the
 * 7-bit split below doubles the matmuls, plus byte columns, transposes and
 * zero-point passes) than through the own kernels, which fuse all of that.
 * So 'auto' is the own kernels; of_quantized_backend(2) opts into oneDNN
 * (worth re-measuring on VNNI CPUs, where oneDNN needs no split). */
static int32_t backend = 0;   /* 0 auto (= own), 1 own, 2 oneDNN */
int32_t of_quantized_backend(int32_t set) {
  if (set >= 0 && set <= 2) backend = set;
  return backend;
}

/* acc (M x N, element [m, n] at m * am + n * an) -= the zero-point terms */
static void zp_correct(int32_t *acc, int64_t M, int64_t N, int64_t K, int64_t am, int64_t an,
                       const void *a, bool u8, int32_t xz, const int8_t *b, const int64_t *wz,
                       int64_t wz_n) {
  bool any_wz = false;
  for (int64_t i = 0; wz && i < wz_n; i++) any_wz |= wz[i] != 0;
  int32_t *rs = NULL;
  if (any_wz) {
    rs = malloc((size_t)M * sizeof *rs);
    if (!rs) return;
    for (int64_t m = 0; m < M; m++) {
      int32_t t = 0;
      for (int64_t k = 0; k < K; k++)
        t += u8 ? ((const uint8_t *)a)[m * K + k] : ((const int8_t *)a)[m * K + k];
      rs[m] = t;
    }
  }
  for (int64_t n = 0; n < N; n++) {
    int32_t cs = 0;
    for (int64_t k = 0; k < K; k++) cs += b[n * K + k];
    const int32_t z = any_wz ? (int32_t)wz[wz_n == 1 ? 0 : n] : 0;
    const int32_t cst = xz * cs - (int32_t)K * xz * z;
    int32_t *col = acc + n * an;
    for (int64_t m = 0; m < M; m++) col[m * am] -= cst + (rs ? z * rs[m] : 0);
  }
  free(rs);
}

static bool use_dnnl(void) { return backend == 2 && of_dnnl_usable(); }

/* oneDNN multiplies u8 x s8 with vpmaddubsw on CPUs without VNNI, which
 * saturates a pair of products in int16 unless the u8 values are 7-bit.
 * So a = lo + 128 * hi (lo = a & 127, hi = a >> 7, both 7-bit) and
 * A B^T = lo B^T + 128 hi B^T: exact on every CPU, one matmul when a is
 * already 7-bit (the default x86 qconfig's activations mostly are), two
 * otherwise. a is uint8 here (int8 inputs are shifted by 128 first). */
static of_status dnnl_gemm_exact(int64_t M, int64_t K, int64_t N, const uint8_t *a,
                                 const int8_t *b, int32_t *c, bool c_t, bool *done) {
  uint8_t hi_any = 0;
  for (int64_t i = 0; i < M * K; i++) hi_any |= a[i];
  if (hi_any < 128) return of_dnnl_gemm_s8(M, K, N, a, true, b, c, c_t, done);
  uint8_t *lo = malloc((size_t)(M * K)), *hi = malloc((size_t)(M * K));
  int32_t *c2 = malloc((size_t)(M * N) * sizeof *c2);
  of_status st = OF_OK;
  *done = false;
  if (!lo || !hi || !c2) st = of_fail(OF_ERR_OOM, "quantized: out of memory splitting the input");
  if (st == OF_OK) {
    for (int64_t i = 0; i < M * K; i++) lo[i] = a[i] & 127, hi[i] = a[i] >> 7;
    bool d1 = false, d2 = false;
    st = of_dnnl_gemm_s8(M, K, N, lo, true, b, c, c_t, &d1);
    if (st == OF_OK && d1) st = of_dnnl_gemm_s8(M, K, N, hi, true, b, c2, c_t, &d2);
    if (st == OF_OK && d1 && d2) {
      for (int64_t i = 0; i < M * N; i++) c[i] += 128 * c2[i];
      *done = true;
    }
  }
  free(lo), free(hi), free(c2);
  return st;
}

/* ---- quantized_linear ---- */
/* Every check quantized_linear makes before it allocates, on the metas of
 * x, w, w_scale, w_zero_point and bias (ndim -1: absent), and its result y:
 * x's shape with the last dim O, in the output dtype. What the body runs
 * first and a loaded graph's node is re-inferred with (infer_QUANTIZED_LINEAR). */
static of_status qlinear_geometry_of(const char *op, const of_meta *m, double xs, int64_t xzp,
                                     double os, int64_t ozp, int32_t odt, of_meta *y) {
  const of_meta *x = &m[0], *w = &m[1];
  if (x->ndim < 0 || w->ndim < 0 || m[2].ndim < 0)
    return of_fail(OF_ERR_ARG, "%s: input, weight and scales are required", op);
  if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
    return of_fail(OF_ERR_SHAPE, "%s: input %s and weight %s do not fit (weight [out, in], input "
                   "[..., in])", op, OF_SHAPE_STR(x), OF_SHAPE_STR(w));
  const int64_t O = w->shape[0], K = w->shape[1];
  OF_CHECK(check_params(op, x, w, &m[2], &m[3], &m[4], O, xs, xzp, os, ozp, odt));
  if (K > QK_MAX)
    return of_fail(OF_ERR_SHAPE, "%s: %lld input features exceed the int32 accumulator's safe "
                   "limit of %d", op, (long long)K, QK_MAX);
  *y = *x;
  y->shape[x->ndim - 1] = O;
  y->dtype = (of_dtype)odt;
  return OF_OK;
}
static of_status qlinear_geometry(const of_meta *m, double xs, int64_t xzp, double os, int64_t ozp,
                                  int32_t odt, of_meta *y) {
  return qlinear_geometry_of("quantized_linear", m, xs, xzp, os, ozp, odt, y);
}

static of_status qlinear_body(of_tensor *x, of_tensor *w, of_tensor *ws, of_tensor *wzp,
                              of_tensor *bias, double xs, int64_t xzp, double os, int64_t ozp,
                              int32_t odt, int32_t relu, of_tensor **out) {
  static const char op[] = "quantized_linear";
  of_meta ym, m[5] = {of_meta_of(x), of_meta_of(w), of_meta_of(ws), of_meta_of(wzp),
                      of_meta_of(bias)};
  OF_CHECK(qlinear_geometry(m, xs, xzp, os, ozp, odt, &ym));
  of_tensor *ts[2] = {x, w};
  OF_CHECK(cpu_only(op, ts, 2));
  const int64_t O = w->shape[0], K = w->shape[1], M = K ? x->numel / K : 0;
  OF_CHECK(of_tensor_new_as(op, ym.shape, ym.ndim, ym.dtype, OF_CPU, out));
  const int64_t kp = (K + QK_ALIGN - 1) / QK_ALIGN * QK_ALIGN;
  int16_t *B = NULL, *A = NULL;
  int32_t *acc = NULL;
  of_tensor *xc = NULL, *wsc = NULL, *bc = NULL;
  /* with oneDNN the weight is packed up front for its zero points' check */
  of_status st = wzp && use_dnnl() ? pack_weight(op, w, wzp, O, K, kp, &B) : OF_OK;
  if (st == OF_OK) st = of_dense(x, x->dtype, &xc);
  if (st == OF_OK) st = of_dense(ws, OF_FLOAT32, &wsc);
  if (st == OF_OK && bias) st = of_dense(bias, OF_FLOAT32, &bc);
  float *fac = NULL;
  if (st == OF_OK && M > 0) {
    A = malloc((size_t)(M * kp) * sizeof *A);
    acc = malloc((size_t)(M * O) * sizeof *acc);
    fac = malloc((size_t)(2 * O) * sizeof *fac);
    if (!A || !acc || !fac) st = of_fail(OF_ERR_OOM, "%s: out of memory (%lld x %lld)", op,
                                         (long long)M, (long long)kp);
  }
  /* no input features: each output row is the bias alone (requantised for
   * 8-bit outputs), as a float Linear with in_features 0 gives */
  const int64_t rows = K || !O ? 0 : of_tensor_numel(*out) / O;
  if (st == OF_OK && rows > 0) {
    int32_t *zero = calloc((size_t)(rows * O), sizeof *zero);
    float *f = malloc((size_t)(2 * O) * sizeof *f);
    if (!zero || !f) {
      st = of_fail(OF_ERR_OOM, "%s: out of memory (%lld x %lld)", op, (long long)rows, (long long)O);
    } else {
      requant_factors((const float *)of_ptr(wsc), wsc->numel, bc ? (const float *)of_ptr(bc) : NULL,
                      (float)xs, (float)os, odt, 0, O, f);
      const rq r = {f, f + O, (int32_t)ozp, relu, odt, qlo((of_dtype)odt), qhi((of_dtype)odt)};
      requant_rows(&r, zero, 0, rows, O, of_ptr(*out), O, 1, O, 1);
    }
    free(zero), free(f);
  }
  bool done = false;
  if (st == OF_OK && M > 0 && use_dnnl()) {
    of_tensor *wc = NULL, *zc = NULL;
    const bool u8 = x->dtype == OF_UINT8;
    /* int8 input: shifted by 128 to uint8, with its zero point */
    uint8_t *xu = u8 ? (uint8_t *)of_ptr(xc) : malloc((size_t)(M * K));
    const int32_t xz = (int32_t)xzp + (u8 ? 0 : 128);
    if (!xu) st = of_fail(OF_ERR_OOM, "%s: out of memory", op);
    if (st == OF_OK && !u8)
      for (int64_t i = 0; i < M * K; i++) xu[i] = (uint8_t)(((const int8_t *)of_ptr(xc))[i] + 128);
    if (st == OF_OK) st = of_dense(w, OF_INT8, &wc);
    if (st == OF_OK && wzp) st = of_dense(wzp, OF_INT64, &zc);
    if (st == OF_OK) st = dnnl_gemm_exact(M, K, O, xu, (const int8_t *)of_ptr(wc), acc, false, &done);
    if (st == OF_OK && done) {
      zp_correct(acc, M, O, K, O, 1, xu, true, xz, (const int8_t *)of_ptr(wc),
                 zc ? (const int64_t *)of_ptr(zc) : NULL, zc ? zc->numel : 0);
      requant_factors((const float *)of_ptr(wsc), wsc->numel, bc ? (const float *)of_ptr(bc) : NULL,
                      (float)xs, (float)os, odt, 0, O, fac);
      rq r = {fac, fac + O, (int32_t)ozp, relu, odt, qlo((of_dtype)odt), qhi((of_dtype)odt)};
      requant_rows(&r, acc, 0, M, O, of_ptr(*out), O, 1, O, 1);
    }
    if (!u8) free(xu);
    if (wc) of_tensor_release(wc);
    if (zc) of_tensor_release(zc);
  }
  if (st == OF_OK && M > 0 && !done && !use_dnnl()) {
    requant_factors((const float *)of_ptr(wsc), wsc->numel, bc ? (const float *)of_ptr(bc) : NULL,
                    (float)xs, (float)os, odt, 0, O, fac);
    const rq r = {fac, fac + O, (int32_t)ozp, relu, odt, qlo((of_dtype)odt), qhi((of_dtype)odt)};
    st = qlinear_vnni(op, xc, w, wzp, M, K, O, (int32_t)xzp, &r, of_ptr(*out), &done);
  }
  if (st == OF_OK && M > 0 && !done && (B || (st = pack_weight(op, w, wzp, O, K, kp, &B)) == OF_OK)) {
    const bool u8 = x->dtype == OF_UINT8;
    const char *xp = of_ptr(xc);
    requant_factors((const float *)of_ptr(wsc), wsc->numel, bc ? (const float *)of_ptr(bc) : NULL,
                    (float)xs, (float)os, odt, 0, O, fac);
    rq r = {fac, fac + O, (int32_t)ozp, relu, odt, qlo((of_dtype)odt), qhi((of_dtype)odt)};
    gemm_fn gemm = pick_gemm();
    char *op_ = of_ptr(*out);
    int nt = M * O * K >= OF_PARALLEL_GRAIN && M >= 4 ? of_threads() : 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      int t = omp_get_thread_num(), n = omp_get_num_threads();
      int64_t m0, m1;
      split_rows(M, n, t, &m0, &m1);
      for (int64_t m = m0; m < m1; m++) {
        int16_t *a = A + m * kp;
        if (u8) {
          const uint8_t *xr = (const uint8_t *)xp + m * K;
          for (int64_t k = 0; k < K; k++) a[k] = (int16_t)((int32_t)xr[k] - xzp);
        } else {
          const int8_t *xr = (const int8_t *)xp + m * K;
          for (int64_t k = 0; k < K; k++) a[k] = (int16_t)((int32_t)xr[k] - xzp);
        }
        for (int64_t k = K; k < kp; k++) a[k] = 0;
      }
      if (m1 > m0) {
        gemm(m0, m1, O, kp, A, B, acc, O, 1);
        requant_rows(&r, acc, m0, m1, O, op_, O, 1, O, 1);
      }
    }
  }
  free(fac);
  free(A), free(B), free(acc);
  if (xc) of_tensor_release(xc);
  if (wsc) of_tensor_release(wsc);
  if (bc) of_tensor_release(bc);
  if (st != OF_OK) of_tensor_release(*out), *out = NULL;
  return st;
}

/* ---- quantized_conv2d ---- */
/* Every check quantized_conv2d makes before it allocates, on the metas of
 * x, w, w_scale, w_zero_point and bias (ndim -1: absent), and its result y
 * [N, O, oh, ow] in the output dtype. What the body runs first and a loaded
 * graph's node is re-inferred with (infer_QUANTIZED_CONV2D). */
static of_status qconv_geometry(const of_meta *m, const a_quant *p, of_meta *y) {
  static const char op[] = "quantized_conv2d";
  const of_meta *x = &m[0], *w = &m[1];
  if (x->ndim < 0 || w->ndim < 0 || m[2].ndim < 0)
    return of_fail(OF_ERR_ARG, "%s: input, weight and scales are required", op);
  const int64_t G = p->groups;
  if (x->ndim != 4 || w->ndim != 4 || G < 1 || x->shape[1] % G || w->shape[0] % G ||
      x->shape[1] / G != w->shape[1])
    return of_fail(OF_ERR_SHAPE, "%s: input %s and weight %s do not fit (input [N, C, H, W], weight "
                   "[O, C/groups, kh, kw], groups %lld)", op, OF_SHAPE_STR(x), OF_SHAPE_STR(w),
                   (long long)G);
  const int64_t O = w->shape[0], Cg = w->shape[1], kh = w->shape[2], kw = w->shape[3];
  OF_CHECK(check_params(op, x, w, &m[2], &m[3], &m[4], O, p->x_scale, p->x_zp, p->out_scale,
                        p->out_zp, p->out_dtype));
  for (int i = 0; i < 2; i++)
    if (p->stride[i] < 1 || p->padding[i] < 0 || p->dilation[i] < 1)
      return of_fail(OF_ERR_ARG, "%s: stride and dilation must be >= 1 and padding >= 0", op);
  const int64_t in[2] = {x->shape[2], x->shape[3]}, k[2] = {kh, kw};
  OF_CHECK(of_check_window(op, in, k, p->stride, p->padding, p->dilation, 2));
  int64_t osz[2];
  for (int i = 0; i < 2; i++) {
    osz[i] = (in[i] + 2 * p->padding[i] - p->dilation[i] * (k[i] - 1) - 1) / p->stride[i] + 1;
    if (osz[i] < 1)
      return of_fail(OF_ERR_SHAPE, "%s: input %s is smaller than the dilated kernel %s", op,
                     OF_SHAPE_STR(x), OF_SHAPE_STR(w));
  }
  const int64_t K = Cg * kh * kw;
  if (K > QK_MAX)
    return of_fail(OF_ERR_SHAPE, "%s: %lld products per output exceed the int32 accumulator's "
                   "safe limit of %d", op, (long long)K, QK_MAX);
  y->ndim = 4;
  y->shape[0] = x->shape[0];
  y->shape[1] = O;
  y->shape[2] = osz[0];
  y->shape[3] = osz[1];
  y->dtype = (of_dtype)p->out_dtype;
  return OF_OK;
}

static of_status qconv_body(of_tensor *x, of_tensor *w, of_tensor *ws, of_tensor *wzp,
                            of_tensor *bias, const a_quant *p, of_tensor **out) {
  static const char op[] = "quantized_conv2d";
  of_meta ym, m[5] = {of_meta_of(x), of_meta_of(w), of_meta_of(ws), of_meta_of(wzp),
                      of_meta_of(bias)};
  OF_CHECK(qconv_geometry(m, p, &ym));
  of_tensor *ts[2] = {x, w};
  OF_CHECK(cpu_only(op, ts, 2));
  const int64_t G = p->groups;
  const int64_t O = w->shape[0], Cg = w->shape[1], kh = w->shape[2], kw = w->shape[3];
  const int64_t in[2] = {x->shape[2], x->shape[3]}, osz[2] = {ym.shape[2], ym.shape[3]};
  const int64_t K = Cg * kh * kw, L = osz[0] * osz[1], Og = O / G, N = x->shape[0];
  *out = NULL;
  const int64_t kp = (K + QK_ALIGN - 1) / QK_ALIGN * QK_ALIGN;
  int16_t *B = NULL, *A = NULL;
  int32_t *acc = NULL;
  of_tensor *xc = NULL, *wsc = NULL, *bc = NULL;
  /* with oneDNN the weight is packed up front for its zero points' check */
  of_status st = use_dnnl() ? pack_weight(op, w, wzp, O, K, kp, &B) : OF_OK;
  if (st == OF_OK) st = of_dense(ws, OF_FLOAT32, &wsc);
  if (st == OF_OK && bias) st = of_dense(bias, OF_FLOAT32, &bc);
  /* the VNNI kernel first: channels-last in and out (its own result) */
  bool done = false;
  if (st == OF_OK && N * L > 0 && !use_dnnl()) {
    float *fv = malloc((size_t)(2 * O) * sizeof *fv);
    if (!fv) st = of_fail(OF_ERR_OOM, "%s: out of memory", op);
    for (int64_t g = 0; fv && g < G; g++)
      requant_factors((const float *)of_ptr(wsc), wsc->numel, bc ? (const float *)of_ptr(bc) : NULL,
                      (float)p->x_scale, (float)p->out_scale, p->out_dtype, g * Og, Og, fv + 2 * g * Og);
    if (fv) st = qconv_vnni(op, x, w, wzp, p, fv, &ym, out, &done);
    free(fv);
  }
  /* the other kernels: NCHW in and out */
  if (st == OF_OK && !done) st = of_dense(x, x->dtype, &xc);
  if (st == OF_OK && !done) st = of_tensor_new_as(op, ym.shape, 4, ym.dtype, OF_CPU, out);
  /* oneDNN: the columns of all samples as bytes (padding = the zero point)
   * and one int8 matmul per group, [Og, N * L] transposed for requantising */
  if (st == OF_OK && N * L > 0 && use_dnnl()) {
    const bool u8 = x->dtype == OF_UINT8;
    const int64_t C = x->shape[1], H = in[0], W = in[1], OW = osz[1], NL = N * L;
    const int64_t sh = p->stride[0], sw = p->stride[1], ph = p->padding[0], pw = p->padding[1];
    const int64_t dh = p->dilation[0], dw = p->dilation[1];
    const int64_t esz = of_dtype_size((of_dtype)p->out_dtype);
    /* bytes as uint8: int8 inputs and their zero point shifted by 128 */
    const int32_t odt = p->out_dtype, xzp = (int32_t)p->x_zp + (u8 ? 0 : 128);
    const uint8_t pad = (uint8_t)xzp, shift = u8 ? 0 : 128;
    uint8_t *cols = malloc((size_t)(NL * K));
    int32_t *ac = malloc((size_t)(NL * Og) * sizeof *ac), *at = malloc((size_t)(NL * Og) * sizeof *at);
    float *fc = malloc((size_t)(2 * O) * sizeof *fc);
    of_tensor *wc = NULL, *zc = NULL;
    if (!cols || !ac || !at || !fc) st = of_fail(OF_ERR_OOM, "%s: out of memory for the columns", op);
    if (st == OF_OK) st = of_dense(w, OF_INT8, &wc);
    if (st == OF_OK && wzp) st = of_dense(wzp, OF_INT64, &zc);
    const uint8_t *xb = (const uint8_t *)of_ptr(xc);
    for (int64_t g = 0; st == OF_OK && g < G; g++) {
      const int nt = NL * K >= OF_PARALLEL_GRAIN ? of_threads() : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
      for (int64_t row = 0; row < NL; row++) {
        const int64_t s_ = row / L, l = row % L, oh = l / OW, ow = l % OW;
        uint8_t *cr = cols + row * K;
        for (int64_t c = 0; c < Cg; c++)
          for (int64_t i = 0; i < kh; i++) {
            const int64_t ih = oh * sh - ph + i * dh;
            const uint8_t *xr = xb + ((s_ * C + g * Cg + c) * H + ih) * W;
            const bool rin = ih >= 0 && ih < H;
            for (int64_t j = 0; j < kw; j++) {
              const int64_t iw = ow * sw - pw + j * dw;
              *cr++ = rin && iw >= 0 && iw < W ? (uint8_t)(xr[iw] + shift) : pad;
            }
          }
      }
      const int8_t *wg = (const int8_t *)of_ptr(wc) + g * Og * K;
      /* row-major result (a transposed one sends oneDNN to its reference
       * matmul, a thousand times slower), transposed here for requantising */
      st = dnnl_gemm_exact(NL, K, Og, cols, wg, at, false, &done);
      if (st != OF_OK || !done) break;
      for (int64_t m0 = 0; m0 < NL; m0 += 64)
        for (int64_t n = 0; n < Og; n++)
          for (int64_t m = m0; m < m0 + 64 && m < NL; m++) ac[n * NL + m] = at[m * Og + n];
      zp_correct(ac, NL, Og, K, 1, NL, cols, true, xzp, wg,
                 zc ? (const int64_t *)of_ptr(zc) + (zc->numel == 1 ? 0 : g * Og) : NULL,
                 zc ? (zc->numel == 1 ? 1 : Og) : 0);
      requant_factors((const float *)of_ptr(wsc), wsc->numel, bc ? (const float *)of_ptr(bc) : NULL,
                      (float)p->x_scale, (float)p->out_scale, odt, g * Og, Og, fc);
      rq r = {fc, fc + Og, (int32_t)p->out_zp, p->relu, odt, qlo((of_dtype)odt), qhi((of_dtype)odt)};
      char *obase = of_ptr(*out);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
      for (int64_t s_ = 0; s_ < N; s_++)
        requant_rows(&r, ac + s_ * L, 0, L, Og, obase + ((s_ * O + g * Og) * L) * esz, 1, L, 1, NL);
    }
    free(cols), free(ac), free(at), free(fc);
    if (wc) of_tensor_release(wc);
    if (zc) of_tensor_release(zc);
  }
  /* samples split over threads when there are enough of them (each thread
   * its own columns), else all threads on one sample's rows */
  const int nth = L * O * K >= OF_PARALLEL_GRAIN ? of_threads() : 1;
  const bool by_sample = nth > 1 && N >= nth;
  const int nbuf = by_sample ? nth : 1;
  float *fac = NULL;
  int16_t *P = NULL;
  if (st == OF_OK && N * L > 0 && !done) {
    A = malloc((size_t)(nbuf * L * kp) * sizeof *A);
    acc = malloc((size_t)(nbuf * L * Og) * sizeof *acc);
    fac = malloc((size_t)(2 * O) * sizeof *fac);
    P = malloc((size_t)(nbuf * Cg * (in[0] + 2 * p->padding[0]) * (in[1] + 2 * p->padding[1])) *
               sizeof *P);
    if (!A || !acc || !fac || !P) st = of_fail(OF_ERR_OOM, "%s: out of memory for the columns", op);
    if (st == OF_OK && !B) st = pack_weight(op, w, wzp, O, K, kp, &B);
  }
  if (st == OF_OK && N * L > 0 && !done) {
    const bool u8 = x->dtype == OF_UINT8;
    const int64_t C = x->shape[1], H = in[0], W = in[1], OW = osz[1];
    const int64_t sh = p->stride[0], sw = p->stride[1], ph = p->padding[0], pw = p->padding[1];
    const int64_t dh = p->dilation[0], dw = p->dilation[1];
    const int32_t xzp = (int32_t)p->x_zp;
    const int64_t esz = of_dtype_size((of_dtype)p->out_dtype);
    const int32_t odt = p->out_dtype;
    gemm_fn gemm = pick_gemm();
    for (int64_t g = 0; g < G; g++) {
      requant_factors((const float *)of_ptr(wsc), wsc->numel, bc ? (const float *)of_ptr(bc) : NULL,
                      (float)p->x_scale, (float)p->out_scale, odt, g * Og, Og, fac + 2 * g * Og);
    }
    const char *xbase = of_ptr(xc);
    char *obase = of_ptr(*out);
    /* The group's input planes are first widened to int16 minus the zero
     * point inside a zero border of the padding (pl, one per buffer), so
     * the columns are plain copies without bounds checks. */
    const int64_t Hp = H + 2 * ph, Wp = W + 2 * pw, plane = Cg * Hp * Wp;
#define QPLANE(pl, s, g)                                                                 \
    do {                                                                                 \
      memset((pl), 0, (size_t)plane * sizeof(int16_t));                                  \
      for (int64_t c = 0; c < Cg; c++)                                                   \
        for (int64_t h = 0; h < H; h++) {                                                \
          int16_t *d = (pl) + (c * Hp + h + ph) * Wp + pw;                               \
          const int64_t e = (((s) * C + (g) * Cg + c) * H + h) * W;                      \
          if (u8) {                                                                      \
            const uint8_t *r = (const uint8_t *)xbase + e;                               \
            for (int64_t w_ = 0; w_ < W; w_++) d[w_] = (int16_t)((int32_t)r[w_] - xzp);  \
          } else {                                                                       \
            const int8_t *r = (const int8_t *)xbase + e;                                 \
            for (int64_t w_ = 0; w_ < W; w_++) d[w_] = (int16_t)((int32_t)r[w_] - xzp);  \
          }                                                                              \
        }                                                                                \
    } while (0)
    /* columns of rows [m0, m1) from the padded planes pl into a */
#define QCOLS(a, pl, m0, m1)                                                             \
    do {                                                                                 \
      for (int64_t l = (m0); l < (m1); l++) {                                            \
        const int64_t oh = l / OW, ow = l % OW;                                          \
        int16_t *ar = (a) + l * kp;                                                      \
        const int16_t *base = (pl) + oh * sh * Wp + ow * sw;                             \
        for (int64_t c = 0; c < Cg; c++)                                                 \
          for (int64_t i = 0; i < kh; i++) {                                             \
            const int16_t *src = base + (c * Hp + i * dh) * Wp;                          \
            for (int64_t j = 0; j < kw; j++) *ar++ = src[j * dw];                        \
          }                                                                              \
        for (int64_t kk = K; kk < kp; kk++) (a)[l * kp + kk] = 0;                        \
      }                                                                                  \
    } while (0)
    if (by_sample) {
#pragma omp parallel for num_threads(nth) schedule(static)
      for (int64_t s_ = 0; s_ < N; s_++) {
        const int t = omp_get_thread_num();
        int16_t *a = A + t * L * kp, *pl = P + t * plane;
        int32_t *ac = acc + t * L * Og;
        for (int64_t g = 0; g < G; g++) {
          rq r = {fac + 2 * g * Og, fac + 2 * g * Og + Og, (int32_t)p->out_zp, p->relu, odt,
                  qlo((of_dtype)odt), qhi((of_dtype)odt)};
          QPLANE(pl, s_, g);
          QCOLS(a, pl, 0, L);
          gemm(0, L, Og, kp, a, B + g * Og * kp, ac, 1, L);
          requant_rows(&r, ac, 0, L, Og, obase + ((s_ * O + g * Og) * L) * esz, 1, L, 1, L);
        }
      }
    } else {
      const int nt = nth > 1 && L >= 4 ? nth : 1;
      for (int64_t s_ = 0; s_ < N; s_++)
        for (int64_t g = 0; g < G; g++) {
          rq r = {fac + 2 * g * Og, fac + 2 * g * Og + Og, (int32_t)p->out_zp, p->relu, odt,
                  qlo((of_dtype)odt), qhi((of_dtype)odt)};
          char *ob = obase + ((s_ * O + g * Og) * L) * esz;
          QPLANE(P, s_, g);
#pragma omp parallel num_threads(nt) if (nt > 1)
          {
            int t = omp_get_thread_num(), n = omp_get_num_threads();
            int64_t m0, m1;
            split_rows(L, n, t, &m0, &m1);
            if (m1 > m0) {
              QCOLS(A, P, m0, m1);
              gemm(m0, m1, Og, kp, A, B + g * Og * kp, acc, 1, L);
              requant_rows(&r, acc, m0, m1, Og, ob, 1, L, 1, L);
            }
          }
        }
    }
#undef QCOLS
#undef QPLANE
  }
  free(fac), free(P);
  free(A), free(B), free(acc);
  if (xc) of_tensor_release(xc);
  if (wsc) of_tensor_release(wsc);
  if (bc) of_tensor_release(bc);
  if (st != OF_OK) of_tensor_release(*out), *out = NULL;
  return st;
}

/* ---- quantized_max_pool2d: max pooling of the integers (exact; the
 * scale and zero point are the input's, kept by the caller) ---- */
/* Every check quantized_max_pool2d makes before it allocates, on x's meta,
 * and its result y [N, C, oh, ow] in x's dtype; the window is the record's
 * groups field (kh << 16 | kw). What the body runs first and a loaded graph's
 * node is re-inferred with (infer_QUANTIZED_MAX_POOL2D). */
static of_status qmaxpool_geometry(const of_meta *x, const a_quant *p, of_meta *y) {
  static const char op[] = "quantized_max_pool2d";
  if (x->ndim != 4 || !is_q8(x->dtype))
    return of_fail(OF_ERR_ARG, "%s: input must be uint8/int8 [N, C, H, W], got %s %s", op,
                   x->ndim >= 0 ? OF_DT(x) : "none", x->ndim >= 0 ? OF_SHAPE_STR(x) : "");
  const int64_t kh = p->groups >> 16, kw = p->groups & 0xffff;
  for (int i = 0; i < 2; i++)
    if (p->stride[i] < 1 || p->padding[i] < 0 || p->dilation[i] < 1)
      return of_fail(OF_ERR_ARG, "%s: stride and dilation must be >= 1 and padding >= 0", op);
  if (kh < 1 || kw < 1 || 2 * p->padding[0] > kh || 2 * p->padding[1] > kw)
    return of_fail(OF_ERR_ARG, "%s: kernel (%lld, %lld) must be >= 1 and padding at most half of it",
                   op, (long long)kh, (long long)kw);
  const int64_t in[2] = {x->shape[2], x->shape[3]}, kk[2] = {kh, kw};
  OF_CHECK(of_check_window(op, in, kk, p->stride, p->padding, p->dilation, 2));
  *y = *x;
  for (int i = 0; i < 2; i++) {
    y->shape[2 + i] =
        (in[i] + 2 * p->padding[i] - p->dilation[i] * (kk[i] - 1) - 1) / p->stride[i] + 1;
    if (y->shape[2 + i] < 1)
      return of_fail(OF_ERR_SHAPE, "%s: input %s is smaller than the window", op, OF_SHAPE_STR(x));
  }
  return OF_OK;
}

#if defined(__x86_64__)
/* One output row of a 2x2 stride-2 pool of bytes on AVX-512 (BW, VL): the
 * two input rows' maximum, then each even byte's with its odd neighbour
 * (shifted down within 16-bit lanes) and the even bytes packed. A LeNet
 * pool's rows are 14-28 bytes: the scalar loop's per-output work was 14% of
 * an int8 LeNet forward (38 of 277 us at batch 8, one Zen 5 thread). */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void qpool22_row_avx512(
    const uint8_t *r0, const uint8_t *r1, uint8_t *y, int64_t W, int64_t OW, bool u8) {
  for (int64_t c0 = 0; c0 < W; c0 += 64) {
    const int64_t n = W - c0 < 64 ? W - c0 : 64, no = OW - c0 / 2 < 32 ? OW - c0 / 2 : 32;
    if (no <= 0) break;
    const __mmask64 m = n == 64 ? ~(__mmask64)0 : (((__mmask64)1 << n) - 1);
    const __m512i a = _mm512_maskz_loadu_epi8(m, r0 + c0), b = _mm512_maskz_loadu_epi8(m, r1 + c0);
    /* the odd byte of each 16-bit lane moved to its low byte (what lands
     * in the high byte is not stored) */
    __m512i v = u8 ? _mm512_max_epu8(a, b) : _mm512_max_epi8(a, b);
    const __m512i odd = _mm512_srli_epi16(v, 8);
    v = u8 ? _mm512_max_epu8(v, odd) : _mm512_max_epi8(v, odd);
    const __mmask32 mo = no == 32 ? ~(__mmask32)0 : (((__mmask32)1 << no) - 1);
    _mm256_mask_storeu_epi8(y + c0 / 2, mo, _mm512_cvtepi16_epi8(v));
  }
}
#endif

static of_status qmaxpool_body(of_tensor *x, const a_quant *p, of_tensor **out) {
  static const char op[] = "quantized_max_pool2d";
  of_meta ym, xm = of_meta_of(x);
  OF_CHECK(qmaxpool_geometry(&xm, p, &ym));
  OF_CHECK(cpu_only(op, &x, 1));
  const int64_t kh = p->groups >> 16, kw = p->groups & 0xffff;
  const int64_t in[2] = {x->shape[2], x->shape[3]}, osz[2] = {ym.shape[2], ym.shape[3]};
  const int64_t NC = x->shape[0] * x->shape[1], H = in[0], W = in[1], OH = osz[0], OW = osz[1];
  of_tensor *xc;
  /* channels-last in (a quantized convolution's output), channels-last
   * out: each window's rows of C bytes, maximum element by element (loops
   * the compiler vectorises over the channels) */
  if (of_prefers_channels_last(x)) {
    const int64_t N = x->shape[0], C = x->shape[1];
    const int64_t sh = p->stride[0], sw = p->stride[1], ph = p->padding[0], pw = p->padding[1];
    const int64_t dh = p->dilation[0], dw = p->dilation[1];
    OF_CHECK(of_dense_format(x, true, x->dtype, &xc));
    of_status st = of_tensor_new_channels_last(ym.shape, 4, ym.dtype, OF_CPU, out);
    const int nt = NC * OH * OW * kh * kw >= OF_PARALLEL_GRAIN ? of_threads() : 1;
    /* the 2 x 2 stride-2 window without padding (LeNet's) takes the four
     * neighbours' channel rows at once, with no bounds checks */
    const bool w22 = kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && dh == 1 && dw == 1;
#define QPOOL_CL(T, TMIN)                                                                \
  do {                                                                                   \
    const T *xt = (const T *)of_ptr(xc);                                                 \
    T *yt = (T *)of_ptr(*out);                                                           \
    _Pragma("omp parallel for num_threads(nt) if (nt > 1) schedule(static)")             \
    for (int64_t r = 0; r < N * OH; r++) {                                               \
      const int64_t n = r / OH, oh = r % OH;                                             \
      if (w22) {                                                                         \
        const T *r0 = xt + (n * H + 2 * oh) * W * C, *r1 = r0 + W * C;                   \
        T *y = yt + r * OW * C;                                                          \
        for (int64_t ow = 0; ow < OW; ow++, y += C, r0 += 2 * C, r1 += 2 * C)            \
          for (int64_t c = 0; c < C; c++) {                                              \
            const T a = r0[c] > r0[C + c] ? r0[c] : r0[C + c];                           \
            const T b = r1[c] > r1[C + c] ? r1[c] : r1[C + c];                           \
            y[c] = a > b ? a : b;                                                        \
          }                                                                              \
        continue;                                                                        \
      }                                                                                  \
      for (int64_t ow = 0; ow < OW; ow++) {                                              \
        T *y = yt + ((n * OH + oh) * OW + ow) * C;                                       \
        bool first = true;                                                               \
        for (int64_t i = 0; i < kh; i++) {                                               \
          const int64_t ih = oh * sh - ph + i * dh;                                      \
          if (ih < 0 || ih >= H) continue;                                               \
          for (int64_t j = 0; j < kw; j++) {                                             \
            const int64_t iw = ow * sw - pw + j * dw;                                    \
            if (iw < 0 || iw >= W) continue;                                             \
            const T *v = xt + ((n * H + ih) * W + iw) * C;                               \
            if (first) {                                                                 \
              memcpy(y, v, (size_t)C * sizeof(T));                                       \
              first = false;                                                             \
            } else {                                                                     \
              for (int64_t c = 0; c < C; c++) y[c] = v[c] > y[c] ? v[c] : y[c];          \
            }                                                                            \
          }                                                                              \
        }                                                                                \
        if (first)                                                                       \
          for (int64_t c = 0; c < C; c++) y[c] = TMIN;                                   \
      }                                                                                  \
    }                                                                                    \
  } while (0)
    if (st == OF_OK && x->dtype == OF_UINT8) QPOOL_CL(uint8_t, 0);
    else if (st == OF_OK) QPOOL_CL(int8_t, INT8_MIN);
#undef QPOOL_CL
    of_tensor_release(xc);
    return st;
  }
  OF_CHECK(of_dense(x, x->dtype, &xc));
  of_status st = of_tensor_new_as(op, ym.shape, 4, ym.dtype, OF_CPU, out);
  if (st == OF_OK) {
    const bool u8 = x->dtype == OF_UINT8;
    const char *xp = of_ptr(xc);
    char *yp = of_ptr(*out);
    const int64_t sh = p->stride[0], sw = p->stride[1], ph = p->padding[0], pw = p->padding[1];
    const int64_t dh = p->dilation[0], dw = p->dilation[1];
    int nt = NC * OH * OW * kh * kw >= OF_PARALLEL_GRAIN ? of_threads() : 1;
    /* without padding every window lies inside: no bounds checks (the
     * common 2x2 / 3x3 pools) */
    const bool inside = ph == 0 && pw == 0;
    /* and without dilation, rows of outputs: the maximum of the window's
     * rows, element by element (loops the compiler vectorises; the 2 x 2
     * stride-2 window, LeNet's, in one pass) */
#if defined(__x86_64__)
    if (inside && dh == 1 && dw == 1 && kh == 2 && kw == 2 && sh == 2 && sw == 2 &&
        of_cpu_isa() >= OF_ISA_AVX512) {
      _Pragma("omp parallel for num_threads(nt) if (nt > 1) schedule(static)")
      for (int64_t c = 0; c < NC; c++)
        for (int64_t oh = 0; oh < OH; oh++) {
          const uint8_t *r0 = (const uint8_t *)xp + (c * H + oh * 2) * W;
          qpool22_row_avx512(r0, r0 + W, (uint8_t *)yp + (c * OH + oh) * OW, W, OW, u8);
        }
      of_tensor_release(xc);
      return OF_OK;
    }
#endif
    if (inside && dh == 1 && dw == 1) {
#define QPOOL_ROWS(T)                                                                  \
  do {                                                                                 \
    const T *xt = (const T *)xp;                                                       \
    T *yt = (T *)yp;                                                                   \
    _Pragma("omp parallel for num_threads(nt) if (nt > 1) schedule(static)")           \
    for (int64_t c = 0; c < NC; c++)                                                   \
      for (int64_t oh = 0; oh < OH; oh++) {                                            \
        T *y = yt + (c * OH + oh) * OW;                                                \
        const T *r0 = xt + (c * H + oh * sh) * W;                                      \
        if (kh == 2 && kw == 2 && sw == 2) {                                           \
          const T *r1 = r0 + W;                                                        \
          for (int64_t ow = 0; ow < OW; ow++) {                                        \
            const T a = r0[2 * ow] > r0[2 * ow + 1] ? r0[2 * ow] : r0[2 * ow + 1];     \
            const T b = r1[2 * ow] > r1[2 * ow + 1] ? r1[2 * ow] : r1[2 * ow + 1];     \
            y[ow] = a > b ? a : b;                                                     \
          }                                                                            \
          continue;                                                                    \
        }                                                                              \
        for (int64_t ow = 0; ow < OW; ow++) y[ow] = r0[ow * sw];                       \
        for (int64_t i = 0; i < kh; i++) {                                             \
          const T *r = r0 + i * W;                                                     \
          for (int64_t j = 0; j < kw; j++)                                             \
            for (int64_t ow = 0; ow < OW; ow++)                                        \
              y[ow] = r[ow * sw + j] > y[ow] ? r[ow * sw + j] : y[ow];                 \
        }                                                                              \
      }                                                                                \
  } while (0)
      if (u8) QPOOL_ROWS(uint8_t);
      else QPOOL_ROWS(int8_t);
#undef QPOOL_ROWS
      of_tensor_release(xc);
      return OF_OK;
    }
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t c = 0; c < NC; c++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          int32_t best = INT32_MIN;
          if (inside) {
            const int64_t e0 = (c * H + oh * sh) * W + ow * sw;
            for (int64_t i = 0; i < kh; i++)
              for (int64_t j = 0; j < kw; j++) {
                const int64_t e = e0 + i * dh * W + j * dw;
                const int32_t v = u8 ? ((const uint8_t *)xp)[e] : ((const int8_t *)xp)[e];
                best = v > best ? v : best;
              }
            const int64_t o = (c * OH + oh) * OW + ow;
            if (u8) ((uint8_t *)yp)[o] = (uint8_t)best;
            else ((int8_t *)yp)[o] = (int8_t)best;
            continue;
          }
          for (int64_t i = 0; i < kh; i++) {
            const int64_t ih = oh * sh - ph + i * dh;
            if (ih < 0 || ih >= H) continue;
            for (int64_t j = 0; j < kw; j++) {
              const int64_t iw = ow * sw - pw + j * dw;
              if (iw < 0 || iw >= W) continue;
              const int64_t e = (c * H + ih) * W + iw;
              const int32_t v = u8 ? ((const uint8_t *)xp)[e] : ((const int8_t *)xp)[e];
              if (v > best) best = v;
            }
          }
          const int64_t o = (c * OH + oh) * OW + ow;
          if (u8) ((uint8_t *)yp)[o] = (uint8_t)best;
          else ((int8_t *)yp)[o] = (int8_t)best;
        }
  }
  of_tensor_release(xc);
  return st;
}

/* ---- quantize_per_tensor: float32 -> uint8/int8 in one pass,
 * q = clamp(zp + rint(x * inv), qmin, qmax) with inv = (float)(1 / scale)
 * (PyTorch's quantize_val: nearbyint, ties to even; the Lua fallback
 * (x * inv):round() + zp, clamp computes the same). NaN gives the zero
 * point. The int tensor has x's shape, contiguous. */
/* Every check quantize_per_tensor makes before it allocates, on x's meta,
 * and its result y: x's shape in the 8-bit dtype. What the body runs first
 * and a loaded graph's node is re-inferred with (infer_QUANTIZE_PER_TENSOR). */
static of_status qquant_geometry(const of_meta *x, const a_quant *p, of_meta *y) {
  static const char op[] = "quantize_per_tensor";
  if (x->ndim < 0 || x->dtype != OF_FLOAT32)
    return of_fail(OF_ERR_ARG, "%s: input must be float32, got %s", op,
                   x->ndim >= 0 ? OF_DT(x) : "none");
  if (p->out_dtype != OF_UINT8 && p->out_dtype != OF_INT8)
    return of_fail(OF_ERR_ARG, "%s: dtype must be uint8 or int8 (quint8/qint8)", op);
  const bool u8 = p->out_dtype == OF_UINT8;
  const int64_t qmin = u8 ? 0 : -128, qmax = u8 ? 255 : 127;
  if (!(p->x_scale > 0 && p->x_scale < INFINITY) || p->x_zp < qmin || p->x_zp > qmax)
    return of_fail(OF_ERR_ARG, "%s: scale %g must be positive and finite, zero_point %lld in [%lld, %lld]",
                   op, p->x_scale, (long long)p->x_zp, (long long)qmin, (long long)qmax);
  *y = *x;
  y->dtype = (of_dtype)p->out_dtype;
  return OF_OK;
}

/* this OpenMP thread's part [*i0, *i1) of n elements, in runs of 64 */
static inline void thread_part(int64_t n, int64_t *i0, int64_t *i1) {
  const int t = omp_get_thread_num(), m = omp_get_num_threads();
  const int64_t per = (n + m - 1) / m / 64 * 64 + 64;
  *i0 = per * t < n ? per * t : n;
  *i1 = *i0 + per < n ? *i0 + per : n;
}

/* x[i0, i1) quantized: rint(x * inv) + zp clamped to [lo, hi]; NaN -> zp */
static inline __attribute__((always_inline)) void qquant_run_ref(const float *xp, float inv, float zp,
                                                                 float lo, float hi, bool u8, void *y,
                                                                 int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; i++) {
    float v = rintf(xp[i] * inv) + zp;
    v = v > lo ? v : lo; /* NaN -> lo, then */
    v = v < hi ? v : hi;
    v = xp[i] == xp[i] ? v : zp;
    if (u8) ((uint8_t *)y)[i] = (uint8_t)v;
    else ((int8_t *)y)[i] = (int8_t)v;
  }
}

#if defined(__x86_64__)
/* the scalar loop where SSE4.1's round makes rintf one instruction */
__attribute__((target("avx2"))) static void qquant_run_avx2(const float *xp, float inv, float zp, float lo,
                                                           float hi, bool u8, void *y, int64_t i0, int64_t i1) {
  qquant_run_ref(xp, inv, zp, lo, hi, u8, y, i0, i1);
}

/* 16 at a time, the same values: roundscale is rintf (nearest, ties to
 * even), max / min take lo for a NaN, which the ordered mask then replaces
 * by zp, and the clamped float converts exactly; the store keeps each
 * lane's low byte. rintf is a libm call in the scalar loop (the baseline
 * has no SSE4.1 round): the vector form took a dynamic Linear's 640 x 384
 * activation from 0.26 to 0.02 ms (doc/benchmarks.md, "Sentence
 * embeddings"). */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void qquant_run_avx512(
    const float *xp, float inv_, float zp_, float lo_, float hi_, void *y, int64_t i0, int64_t i1) {
  const __m512 inv = _mm512_set1_ps(inv_), zp = _mm512_set1_ps(zp_);
  const __m512 lo = _mm512_set1_ps(lo_), hi = _mm512_set1_ps(hi_);
  for (int64_t i = i0; i < i1; i += 16) {
    const __mmask16 m = i + 16 <= i1 ? (__mmask16)0xffff : (__mmask16)((1u << (i1 - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(m, xp + i);
    __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(x, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, zp), lo), hi);
    v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_ORD_Q), zp, v);
    _mm512_mask_cvtepi32_storeu_epi8((char *)y + i, m, _mm512_cvttps_epi32(v));
  }
}
#endif

static of_status qquant_body(of_tensor *x, const a_quant *p, of_tensor **out) {
  static const char op[] = "quantize_per_tensor";
  of_meta ym, xm = of_meta_of(x);
  OF_CHECK(qquant_geometry(&xm, p, &ym));
  OF_CHECK(cpu_only(op, &x, 1));
  const bool u8 = p->out_dtype == OF_UINT8;
  of_tensor *xc;
  OF_CHECK(of_dense(x, x->dtype, &xc));
  of_status st = of_tensor_new_as(op, ym.shape, ym.ndim, ym.dtype, OF_CPU, out);
  if (st == OF_OK) {
    const float *xp = (const float *)of_ptr(xc);
    void *yp = of_ptr(*out);
    const int64_t n = of_tensor_numel(xc);
    const float inv = (float)(1.0 / (double)(float)p->x_scale), zp = (float)p->x_zp;
    const float lo = u8 ? 0.0f : -128.0f, hi = u8 ? 255.0f : 127.0f;
    const int nt = n >= 16 * OF_PARALLEL_GRAIN ? of_threads() : 1;
#if defined(__x86_64__)
    const bool v512 = of_cpu_isa() >= OF_ISA_AVX512, v256 = of_cpu_isa() >= OF_ISA_AVX2;
#else
    const bool v512 = false;
#endif
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      int64_t i0, i1;
      thread_part(n, &i0, &i1);
#if defined(__x86_64__)
      if (v512) qquant_run_avx512(xp, inv, zp, lo, hi, yp, i0, i1);
      else if (v256) qquant_run_avx2(xp, inv, zp, lo, hi, u8, yp, i0, i1);
      else qquant_run_ref(xp, inv, zp, lo, hi, u8, yp, i0, i1);
#else
      (void)v512;
      qquant_run_ref(xp, inv, zp, lo, hi, u8, yp, i0, i1);
#endif
    }
  }
  of_tensor_release(xc);
  return st;
}

/* ---- quant_range: min and max in one pass (dynamic quantization's range;
 * two reductions and two item() round trips took 55 us a MiniLM linear
 * layer, 2 of its 23 ms) ---- */
static void qrange_run_ref(const float *x, int64_t i0, int64_t i1, float *lo, float *hi, bool *nan) {
  float mn = INFINITY, mx = -INFINITY;
  bool bad = false;
  for (int64_t i = i0; i < i1; i++) {
    const float v = x[i];
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
    bad |= v != v;
  }
  *lo = mn, *hi = mx, *nan = bad;
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static void qrange_run_avx512(const float *x, int64_t i0, int64_t i1,
                                                                 float *lo, float *hi, bool *nan) {
  __m512 mn = _mm512_set1_ps(INFINITY), mx = _mm512_set1_ps(-INFINITY);
  __mmask16 bad = 0;
  for (int64_t i = i0; i < i1; i += 16) {
    const __mmask16 m = i + 16 <= i1 ? (__mmask16)0xffff : (__mmask16)((1u << (i1 - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    mn = _mm512_mask_min_ps(mn, m, mn, v);
    mx = _mm512_mask_max_ps(mx, m, mx, v);
    bad |= _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q);
  }
  *lo = _mm512_reduce_min_ps(mn), *hi = _mm512_reduce_max_ps(mx), *nan = bad != 0;
}

/* 8 at a time (AVX2 CPUs ran the scalar loop: 7% of a dynamically
 * quantized MiniLM's encode on a Zen 3); the tail by the scalar loop */
__attribute__((target("avx2"))) static void qrange_run_avx2(const float *x, int64_t i0, int64_t i1, float *lo,
                                                           float *hi, bool *nan) {
  __m256 mn = _mm256_set1_ps(INFINITY), mx = _mm256_set1_ps(-INFINITY), bad = _mm256_setzero_ps();
  int64_t i = i0;
  for (; i + 8 <= i1; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    mn = _mm256_min_ps(mn, v), mx = _mm256_max_ps(mx, v);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  float a[8], b[8], tl, th;
  bool tn;
  _mm256_storeu_ps(a, mn), _mm256_storeu_ps(b, mx);
  qrange_run_ref(x, i, i1, &tl, &th, &tn);
  for (int k = 0; k < 8; k++) tl = a[k] < tl ? a[k] : tl, th = b[k] > th ? b[k] : th;
  *lo = tl, *hi = th, *nan = tn || _mm256_movemask_ps(bad) != 0;
}
#endif

static of_status qrange_body(const char *op, of_tensor *x, double *min, double *max) {
  if (x->dtype != OF_FLOAT32)
    return of_fail(OF_ERR_DTYPE, "%s: input must be float32, got %s", op, of_dtype_name(x->dtype));
  OF_CHECK(cpu_only(op, &x, 1));
  *min = 0, *max = 0;
  const int64_t n = of_tensor_numel(x);
  if (n == 0) return OF_OK;
  of_tensor *xc;
  OF_CHECK(of_dense(x, OF_FLOAT32, &xc));
  const float *xp = (const float *)of_ptr(xc);
  enum { T = 64 };
  float lo[T], hi[T];
  bool nan[T];
  int nt = n >= 16 * OF_PARALLEL_GRAIN ? of_threads() : 1;
  nt = nt > T ? T : nt;
#if defined(__x86_64__)
  const bool v512 = of_cpu_isa() >= OF_ISA_AVX512, v256 = of_cpu_isa() >= OF_ISA_AVX2;
#else
  const bool v512 = false, v256 = false;
#endif
  int used = 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int t = omp_get_thread_num();
    if (t == 0) used = omp_get_num_threads();
    int64_t i0, i1;
    thread_part(n, &i0, &i1);
#if defined(__x86_64__)
    if (v512) qrange_run_avx512(xp, i0, i1, &lo[t], &hi[t], &nan[t]);
    else if (v256) qrange_run_avx2(xp, i0, i1, &lo[t], &hi[t], &nan[t]);
    else qrange_run_ref(xp, i0, i1, &lo[t], &hi[t], &nan[t]);
#else
    (void)v512, (void)v256;
    qrange_run_ref(xp, i0, i1, &lo[t], &hi[t], &nan[t]);
#endif
  }
  float mn = INFINITY, mx = -INFINITY;
  bool bad = false;
  for (int t = 0; t < used; t++) {
    mn = lo[t] < mn ? lo[t] : mn;
    mx = hi[t] > mx ? hi[t] : mx;
    bad |= nan[t];
  }
  of_tensor_release(xc);
  *min = bad ? NAN : (double)mn, *max = bad ? NAN : (double)mx;
  return OF_OK;
}

of_status of_quant_range(of_tensor *x, double *min, double *max) {
  if (!x || !min || !max) return of_fail(OF_ERR_ARG, "quant_range: x, min and max must not be NULL");
  OF_CHECK(of_dispatch_data_read(x));   /* values: refused while a graph is traced */
  return qrange_body("quant_range", x, min, max);
}

/* ---- dynamic_quantized_linear: float in, float out, int8 weights; the
 * input's uint8 parameters chosen from its range at every call (PyTorch's
 * quantized::linear_dynamic) ----
 * fbgemm's ChooseQuantizationParams with ATen's float constants (as
 * observer.lua's choose_qparams, which PyTorch's specs check): the range
 * widened to hold 0, a scale in double rounded to float at the end, the
 * zero point nudged into [qmin, qmax] and rounded half to even. */
static void choose_qparams(double lo, double hi, int32_t qmin, int32_t qmax, bool reduce_range,
                           double *scale_out, int64_t *zp_out) {
  lo = (float)lo < 0 ? (double)(float)lo : 0.0;
  hi = (float)hi > 0 ? (double)(float)hi : 0.0;
  if (reduce_range) qmin /= 2, qmax /= 2;   /* C's division, toward zero */
  double scale = (hi - lo) / (double)(qmax - qmin);
  if ((float)scale == 0.0f || isinf(1.0f / (float)scale)) scale = 0.1;
  const double small = (double)6.1e-5f;
  if (scale < small) {
    const float org = (float)scale;
    scale = small;
    if (lo == 0) hi = (double)(float)(small * (qmax - qmin));
    else if (hi == 0) lo = (double)(float)(-small * (qmax - qmin));
    else {
      const double amp = (double)(float)(small / (double)org);
      lo = (double)(float)(lo * amp), hi = (double)(float)(hi * amp);
    }
  }
  const double zfm = qmin - lo / scale, zfx = qmax - hi / scale;
  const double efm = fabs((double)qmin) - fabs(lo / scale), efx = fabs((double)qmax) - fabs(hi / scale);
  const double z0 = efm < efx ? zfm : zfx;
  *zp_out = z0 < qmin ? qmin : z0 > qmax ? qmax : (int64_t)nearbyint(z0);
  *scale_out = (double)(float)scale;
}

static of_status dqlinear_geometry(const of_meta *m, of_meta *y) {
  static const char op[] = "dynamic_quantized_linear";
  if (m[0].ndim >= 0 && m[0].dtype != OF_FLOAT32)
    return of_fail(OF_ERR_DTYPE, "%s: input must be float32, got %s", op, of_dtype_name(m[0].dtype));
  of_meta q[5] = {m[0], m[1], m[2], m[3], m[4]};
  q[0].dtype = OF_UINT8;   /* what the body multiplies */
  OF_CHECK(qlinear_geometry_of(op, q, 1, 0, 1, 0, OF_FLOAT32, y));
  y->dtype = OF_FLOAT32;
  return OF_OK;
}

static of_status dqlinear_body(of_tensor *x, of_tensor *w, of_tensor *ws, of_tensor *wzp,
                               of_tensor *bias, int32_t reduce_range, of_tensor **out) {
  static const char op[] = "dynamic_quantized_linear";
  of_meta ym, m[5] = {of_meta_of(x), of_meta_of(w), of_meta_of(ws), of_meta_of(wzp),
                      of_meta_of(bias)};
  OF_CHECK(dqlinear_geometry(m, &ym));
  of_tensor *ts[2] = {x, w};
  OF_CHECK(cpu_only(op, ts, 2));
  double lo, hi, scale;
  int64_t zp;
  OF_CHECK(qrange_body(op, x, &lo, &hi));
  if (!isfinite(lo) || !isfinite(hi))
    return of_fail(OF_ERR_ARG, "%s: input has NaN or infinite values, which cannot be quantized", op);
  choose_qparams(lo, hi, 0, 255, reduce_range != 0, &scale, &zp);
  a_quant qa;
  OF_ZERO(qa);
  qa.x_scale = scale, qa.x_zp = zp, qa.out_dtype = OF_UINT8, qa.out_scale = 1;
  of_tensor *xq;
  OF_CHECK(qquant_body(x, &qa, &xq));
  const of_status st = qlinear_body(xq, w, ws, wzp, bias, scale, zp, 1, 0, OF_FLOAT32, 0, out);
  of_tensor_release(xq);
  return st;
}


/* ---- quantized_add: two quantized tensors of one shape summed (and
 * ReLU'd) into the output's integers. Each step is the float32 one that
 * dequantize ((q - zp) * scale), add, relu and quantize_per_tensor (rint of
 * y * (1 / scale), + zp, clamped) compute, so the one pass equals that
 * chain to the bit; it replaces five tensor ops and four float32
 * temporaries per residual sum of a quantized ResNet. */
static bool q_params_ok(double s, int64_t zp, int32_t dt) {
  return s > 0 && s < INFINITY && zp >= qlo((of_dtype)dt) && zp <= qhi((of_dtype)dt);
}

static of_status qadd_geometry(const of_meta *a, const of_meta *b, const a_qadd *p, of_meta *y) {
  static const char op[] = "quantized_add";
  if (a->ndim < 0 || b->ndim < 0 || !is_q8(a->dtype) || !is_q8(b->dtype))
    return of_fail(OF_ERR_ARG, "%s: operands must be uint8 or int8 integers, got %s and %s", op,
                   a->ndim >= 0 ? OF_DT(a) : "none", b->ndim >= 0 ? OF_DT(b) : "none");
  bool same = a->ndim == b->ndim;
  for (int32_t i = 0; same && i < a->ndim; i++) same = a->shape[i] == b->shape[i];
  if (!same) {
    char sa[96], sb[96];
    of_shape_str(a->shape, a->ndim, sa, sizeof sa);
    of_shape_str(b->shape, b->ndim, sb, sizeof sb);
    return of_fail(OF_ERR_SHAPE, "%s: operands must have one shape, got %s and %s", op, sa, sb);
  }
  if (p->out_dtype != OF_UINT8 && p->out_dtype != OF_INT8)
    return of_fail(OF_ERR_ARG, "%s: out_dtype must be uint8 or int8", op);
  if (!q_params_ok(p->a_scale, p->a_zp, a->dtype) || !q_params_ok(p->b_scale, p->b_zp, b->dtype) ||
      !q_params_ok(p->out_scale, p->out_zp, p->out_dtype))
    return of_fail(OF_ERR_ARG,
                   "%s: scales must be positive and finite and zero points in their dtype's range, "
                   "got a %g/%lld, b %g/%lld, out %g/%lld", op, p->a_scale, (long long)p->a_zp,
                   p->b_scale, (long long)p->b_zp, p->out_scale, (long long)p->out_zp);
  *y = *a;
  y->dtype = (of_dtype)p->out_dtype;
  return OF_OK;
}

typedef struct {
  float sa, za, sb, zb, inv, zo, lo, hi;
  bool ua, ub, uo, relu;
} qadd_k;

/* no FMA contraction: the sum rounds its two products as the add op does */
__attribute__((OF_GCC_OPTIMIZE("fp-contract=off"))) static inline float qadd_one(const qadd_k *k, const void *a,
                                                                                 const void *b, int64_t i) {
  const float fa = k->ua ? (float)((const uint8_t *)a)[i] : (float)((const int8_t *)a)[i];
  const float fb = k->ub ? (float)((const uint8_t *)b)[i] : (float)((const int8_t *)b)[i];
  float y = (fa - k->za) * k->sa + (fb - k->zb) * k->sb;
  if (k->relu) y = y > 0.f ? y : 0.f;
  float v = rintf(y * k->inv) + k->zo;
  v = v > k->lo ? v : k->lo;
  return v < k->hi ? v : k->hi;
}

__attribute__((OF_GCC_OPTIMIZE("fp-contract=off"))) static void qadd_run_ref(const qadd_k *k, const void *a,
                                                                             const void *b, void *y, int64_t i0,
                                                                             int64_t i1) {
  for (int64_t i = i0; i < i1; i++) {
    const float v = qadd_one(k, a, b, i);
    if (k->uo) ((uint8_t *)y)[i] = (uint8_t)v;
    else ((int8_t *)y)[i] = (int8_t)v;
  }
}

#if defined(__x86_64__)
/* qadd_one's steps W at a time, one body for both widths (W = 512: 16
 * lanes, 256: 8): the loads widen bytes to float, the rounding is rintf's
 * (nearest, ties to even), and the clamped float converts exactly to the
 * output bytes. AVX2 CPUs ran the scalar loop before (0.7 ms of a quantized
 * ResNet-18's residual sum at batch 8 on a Zen 3). */
#define QADD_RUN(W, TARGET)                                                                          \
  __attribute__((target(TARGET), OF_GCC_OPTIMIZE("fp-contract=off"))) static void qadd_run_##W(      \
      const qadd_k *k, const void *a, const void *b, void *y, int64_t i0, int64_t i1) {              \
    const __m##W sa = _mm##W##_set1_ps(k->sa), za = _mm##W##_set1_ps(k->za);                         \
    const __m##W sb = _mm##W##_set1_ps(k->sb), zb = _mm##W##_set1_ps(k->zb);                         \
    const __m##W inv = _mm##W##_set1_ps(k->inv), zo = _mm##W##_set1_ps(k->zo);                       \
    const __m##W lo = _mm##W##_set1_ps(k->lo), hi = _mm##W##_set1_ps(k->hi), zero = _mm##W##_setzero_ps(); \
    const int64_t n = W / 32;                                                                        \
    int64_t i = i0;                                                                                  \
    for (; i + n <= i1; i += n) {                                                                    \
      __m##W v = _mm##W##_add_ps(_mm##W##_mul_ps(_mm##W##_sub_ps(qadd_load##W(a, k->ua, i), za), sa), \
                                 _mm##W##_mul_ps(_mm##W##_sub_ps(qadd_load##W(b, k->ub, i), zb), sb)); \
      if (k->relu) v = _mm##W##_max_ps(v, zero);                                                     \
      v = qadd_rint##W(_mm##W##_mul_ps(v, inv));                                                     \
      qadd_store##W((char *)y + i, _mm##W##_min_ps(_mm##W##_max_ps(_mm##W##_add_ps(v, zo), lo), hi), k->uo); \
    }                                                                                                \
    qadd_run_ref(k, a, b, y, i, i1);                                                                 \
  }

__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline __m512 qadd_load512(const void *p, bool u8,
                                                                                       int64_t i) {
  const __m128i v = _mm_loadu_si128((const __m128i *)((const char *)p + i));
  return _mm512_cvtepi32_ps(u8 ? _mm512_cvtepu8_epi32(v) : _mm512_cvtepi8_epi32(v));
}
__attribute__((target("avx512f"))) static inline __m512 qadd_rint512(__m512 v) {
  return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline void qadd_store512(char *y, __m512 v, bool u8) {
  (void)u8;   /* in range: the truncating narrowing is exact for both byte types */
  _mm_storeu_si128((__m128i *)y, _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)));
}
QADD_RUN(512, "avx512f,avx512bw,avx512vl")

__attribute__((target("avx2"))) static inline __m256 qadd_load256(const void *p, bool u8, int64_t i) {
  const __m128i v = _mm_loadl_epi64((const __m128i *)((const char *)p + i));
  return _mm256_cvtepi32_ps(u8 ? _mm256_cvtepu8_epi32(v) : _mm256_cvtepi8_epi32(v));
}
__attribute__((target("avx2"))) static inline __m256 qadd_rint256(__m256 v) {
  return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
__attribute__((target("avx2"))) static inline void qadd_store256(char *y, __m256 v, bool u8) {
  /* in range: the saturating packs only narrow */
  const __m256i q = _mm256_cvttps_epi32(v);
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  _mm_storel_epi64((__m128i *)y, u8 ? _mm_packus_epi16(w, w) : _mm_packs_epi16(w, w));
}
QADD_RUN(256, "avx2")
#undef QADD_RUN
#endif

static of_status qadd_body(of_tensor *a, of_tensor *b, const a_qadd *p, of_tensor **out) {
  static const char op[] = "quantized_add";
  of_meta ym, am = of_meta_of(a), bm = of_meta_of(b);
  OF_CHECK(qadd_geometry(&am, &bm, p, &ym));
  of_tensor *ts[2] = {a, b};
  OF_CHECK(cpu_only(op, ts, 2));
  /* elementwise over memory in a's layout: channels-last operands (a
   * quantized convolution's) stay channels-last */
  const bool cl = of_prefers_channels_last(a);
  of_tensor *ac = NULL, *bc = NULL;
  of_status st = of_dense_format(a, cl, a->dtype, &ac);
  if (st == OF_OK) st = of_dense_format(b, cl, b->dtype, &bc);
  if (st == OF_OK)
    st = cl ? of_tensor_new_channels_last(ym.shape, ym.ndim, ym.dtype, OF_CPU, out)
            : of_tensor_new_as(op, ym.shape, ym.ndim, ym.dtype, OF_CPU, out);
  if (st == OF_OK) {
    const qadd_k k = {(float)p->a_scale, (float)p->a_zp, (float)p->b_scale, (float)p->b_zp,
                      (float)(1.0 / (double)(float)p->out_scale), (float)p->out_zp,
                      (float)qlo((of_dtype)p->out_dtype), (float)qhi((of_dtype)p->out_dtype),
                      a->dtype == OF_UINT8, b->dtype == OF_UINT8, p->out_dtype == OF_UINT8, p->relu != 0};
    const void *ap = of_ptr(ac), *bp = of_ptr(bc);
    void *yp = of_ptr(*out);
    const int64_t n = of_tensor_numel(ac);
    const int nt = n >= 8 * OF_PARALLEL_GRAIN ? of_threads() : 1;
#if defined(__x86_64__)
    const bool v512 = of_cpu_isa() >= OF_ISA_AVX512, v256 = of_cpu_isa() >= OF_ISA_AVX2;
#else
    const bool v512 = false, v256 = false;
#endif
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      int64_t i0, i1;
      thread_part(n, &i0, &i1);
#if defined(__x86_64__)
      if (v512) qadd_run_512(&k, ap, bp, yp, i0, i1);
      else if (v256) qadd_run_256(&k, ap, bp, yp, i0, i1);
      else qadd_run_ref(&k, ap, bp, yp, i0, i1);
#else
      (void)v512, (void)v256;
      qadd_run_ref(&k, ap, bp, yp, i0, i1);
#endif
    }
  }
  if (ac) of_tensor_release(ac);
  if (bc) of_tensor_release(bc);
  return st;
}

/* ---- entry points, run functions, table rows ---- */
static of_status pack_quant(int32_t op, of_tensor *x, of_tensor *w, of_tensor *ws, of_tensor *wzp,
                            of_tensor *bias, const a_quant *a, of_tensor **out) {
  of_tensor *ins[5] = {x, w, ws, wzp, bias};
  return OF_RECORD(op, *a, ins, 5, out, 1);
}

of_status of_quantized_linear(of_tensor *x, of_tensor *w, of_tensor *w_scale, of_tensor *w_zero_point,
                              of_tensor *bias, double x_scale, int64_t x_zero_point,
                              double out_scale, int64_t out_zero_point, of_dtype out_dtype,
                              int32_t relu, of_tensor **out) {
  a_quant a;
  OF_ZERO(a);
  a.x_scale = x_scale, a.out_scale = out_scale, a.x_zp = x_zero_point, a.out_zp = out_zero_point;
  a.out_dtype = (int32_t)out_dtype, a.relu = relu != 0;
  OF_DISPATCH(qlinear_body(x, w, w_scale, w_zero_point, bias, x_scale, x_zero_point, out_scale,
                           out_zero_point, (int32_t)out_dtype, relu != 0, out),
              pack_quant(OPK_QUANTIZED_LINEAR, x, w, w_scale, w_zero_point, bias, &a, out));
}

of_status of_quantized_conv2d(of_tensor *x, of_tensor *w, of_tensor *w_scale,
                              of_tensor *w_zero_point, of_tensor *bias, const int64_t *stride,
                              const int64_t *padding, const int64_t *dilation, int64_t groups,
                              double x_scale, int64_t x_zero_point, double out_scale,
                              int64_t out_zero_point, of_dtype out_dtype, int32_t relu,
                              of_tensor **out) {
  a_quant a;
  OF_ZERO(a);
  a.x_scale = x_scale, a.out_scale = out_scale, a.x_zp = x_zero_point, a.out_zp = out_zero_point;
  a.out_dtype = (int32_t)out_dtype, a.relu = relu != 0, a.groups = groups;
  for (int i = 0; i < 2; i++) {
    a.stride[i] = stride ? stride[i] : 1;
    a.padding[i] = padding ? padding[i] : 0;
    a.dilation[i] = dilation ? dilation[i] : 1;
  }
  OF_DISPATCH(qconv_body(x, w, w_scale, w_zero_point, bias, &a, out),
              pack_quant(OPK_QUANTIZED_CONV2D, x, w, w_scale, w_zero_point, bias, &a, out));
}

of_status of_quantized_max_pool2d(of_tensor *x, const int64_t *kernel, const int64_t *stride,
                                  const int64_t *padding, const int64_t *dilation, of_tensor **out) {
  a_quant a;
  OF_ZERO(a);
  if (!kernel || kernel[0] < 1 || kernel[1] < 1 || kernel[0] > 0xffff || kernel[1] > 0xffff)
    return of_fail(OF_ERR_ARG, "quantized_max_pool2d: kernel sizes must be in 1..65535");
  a.groups = (kernel[0] << 16) | kernel[1];   /* the record's spare field holds the window */
  for (int i = 0; i < 2; i++) {
    a.stride[i] = stride ? stride[i] : kernel[i];
    a.padding[i] = padding ? padding[i] : 0;
    a.dilation[i] = dilation ? dilation[i] : 1;
  }
  of_tensor *ins[5] = {x, NULL, NULL, NULL, NULL};
  OF_DISPATCH(qmaxpool_body(x, &a, out), OF_RECORD(OPK_QUANTIZED_MAX_POOL2D, a, ins, 1, out, 1));
}

of_status of_quantize_per_tensor(of_tensor *x, double scale, int64_t zero_point, of_dtype dtype,
                                 of_tensor **out) {
  a_quant a;
  OF_ZERO(a);
  a.x_scale = scale, a.x_zp = zero_point, a.out_dtype = (int32_t)dtype, a.out_scale = 1;
  of_tensor *ins[5] = {x, NULL, NULL, NULL, NULL};
  OF_DISPATCH(qquant_body(x, &a, out), OF_RECORD(OPK_QUANTIZE_PER_TENSOR, a, ins, 1, out, 1));
}

of_status of_dynamic_quantized_linear(of_tensor *x, of_tensor *w, of_tensor *w_scale,
                                      of_tensor *w_zero_point, of_tensor *bias, int32_t reduce_range,
                                      of_tensor **out) {
  a_i1 a;
  OF_ZERO(a);
  a.v = reduce_range != 0;
  of_tensor *ins[5] = {x, w, w_scale, w_zero_point, bias};
  OF_DISPATCH(dqlinear_body(x, w, w_scale, w_zero_point, bias, a.v, out),
              OF_RECORD(OPK_DYNAMIC_QUANTIZED_LINEAR, a, ins, 5, out, 1));
}

of_status of_quantized_add(of_tensor *a, of_tensor *b, double a_scale, int64_t a_zero_point,
                           double b_scale, int64_t b_zero_point, double out_scale,
                           int64_t out_zero_point, of_dtype out_dtype, int32_t relu, of_tensor **out) {
  a_qadd p;
  OF_ZERO(p);
  p.a_scale = a_scale, p.b_scale = b_scale, p.out_scale = out_scale;
  p.a_zp = a_zero_point, p.b_zp = b_zero_point, p.out_zp = out_zero_point;
  p.out_dtype = (int32_t)out_dtype, p.relu = relu != 0;
  of_tensor *ins[2] = {a, b};
  OF_DISPATCH(qadd_body(a, b, &p, out), OF_RECORD(OPK_QUANTIZED_ADD, p, ins, 2, out, 1));
}

static of_status run_quant(const of_oprec *n, of_tensor **ins, void **outs) {
  if (n->op == OPK_QUANTIZED_ADD) {
    const a_qadd *q = (const a_qadd *)n->attrs;
    OF_RUN1(of_quantized_add(ins[0], ins[1], q->a_scale, q->a_zp, q->b_scale, q->b_zp, q->out_scale,
                             q->out_zp, (of_dtype)q->out_dtype, q->relu, OF_R));
  }
  if (n->op == OPK_DYNAMIC_QUANTIZED_LINEAR) {
    const a_i1 *d = (const a_i1 *)n->attrs;
    OF_NEED(d->v == 0 || d->v == 1, "reduce_range");
    OF_RUN1(of_dynamic_quantized_linear(ins[0], ins[1], ins[2], ins[3], ins[4], d->v, OF_R));
  }
  OF_ATTRS(a_quant);
  if (n->op == OPK_QUANTIZED_MAX_POOL2D) {
    const int64_t k[2] = {a->groups >> 16, a->groups & 0xffff};
    OF_RUN1(of_quantized_max_pool2d(ins[0], k, a->stride, a->padding, a->dilation, OF_R));
  }
  if (n->op == OPK_QUANTIZE_PER_TENSOR)
    OF_RUN1(of_quantize_per_tensor(ins[0], a->x_scale, a->x_zp, (of_dtype)a->out_dtype, OF_R));
  OF_NEED(a->out_dtype == OF_FLOAT32 || a->out_dtype == OF_UINT8 || a->out_dtype == OF_INT8,
          "out_dtype");
  if (n->op == OPK_QUANTIZED_LINEAR)
    OF_RUN1(of_quantized_linear(ins[0], ins[1], ins[2], ins[3], ins[4], a->x_scale, a->x_zp,
                                a->out_scale, a->out_zp, (of_dtype)a->out_dtype, a->relu, OF_R));
  OF_RUN1(of_quantized_conv2d(ins[0], ins[1], ins[2], ins[3], ins[4], a->stride, a->padding,
                              a->dilation, a->groups, a->x_scale, a->x_zp, a->out_scale, a->out_zp,
                              (of_dtype)a->out_dtype, a->relu, OF_R));
}
/* A loaded node's result from its record and recorded inputs, by the
 * geometry functions the bodies check and allocate with */
static of_status infer_QUANTIZED_LINEAR(const void *p, int32_t nin, const of_meta *ins,
                                        of_meta *outs) {
  (void)nin;
  const a_quant *a = p;
  return qlinear_geometry(ins, a->x_scale, a->x_zp, a->out_scale, a->out_zp, a->out_dtype,
                          &outs[0]);
}
static of_status infer_QUANTIZED_CONV2D(const void *p, int32_t nin, const of_meta *ins,
                                        of_meta *outs) {
  (void)nin;
  return qconv_geometry(ins, p, &outs[0]);
}
static of_status infer_QUANTIZED_MAX_POOL2D(const void *p, int32_t nin, const of_meta *ins,
                                            of_meta *outs) {
  (void)nin;
  return qmaxpool_geometry(&ins[0], p, &outs[0]);
}
static of_status infer_QUANTIZE_PER_TENSOR(const void *p, int32_t nin, const of_meta *ins,
                                           of_meta *outs) {
  (void)nin;
  return qquant_geometry(&ins[0], p, &outs[0]);
}
static of_status infer_DYNAMIC_QUANTIZED_LINEAR(const void *p, int32_t nin, const of_meta *ins,
                                                of_meta *outs) {
  (void)p, (void)nin;
  return dqlinear_geometry(ins, &outs[0]);
}
static of_status infer_QUANTIZED_ADD(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)nin;
  return qadd_geometry(&ins[0], &ins[1], p, &outs[0]);
}
OF_OP_IMPL_INFER(QUANTIZED_LINEAR, run_quant, NULL, NULL, NULL, infer_QUANTIZED_LINEAR);
OF_OP_IMPL_INFER(QUANTIZED_CONV2D, run_quant, NULL, NULL, NULL, infer_QUANTIZED_CONV2D);
OF_OP_IMPL_INFER(QUANTIZED_MAX_POOL2D, run_quant, NULL, NULL, NULL, infer_QUANTIZED_MAX_POOL2D);
OF_OP_IMPL_INFER(QUANTIZE_PER_TENSOR, run_quant, NULL, NULL, NULL, infer_QUANTIZE_PER_TENSOR);
OF_OP_IMPL_INFER(QUANTIZED_ADD, run_quant, NULL, NULL, NULL, infer_QUANTIZED_ADD);
OF_OP_IMPL_INFER(DYNAMIC_QUANTIZED_LINEAR, run_quant, NULL, NULL, NULL, infer_DYNAMIC_QUANTIZED_LINEAR);
