/* norm.c -- batch, layer, rms, group and instance normalisation: fused forward
 * and backward kernels, recorded in autograd.
 *
 * Two layouts cover the four ops:
 *   - channels (batch_norm): x as [N, C, S], one statistic per channel over
 *     N * S elements. Partial sums per (n, c) run in parallel and are
 *     combined in a fixed order, so results do not depend on the thread count.
 *   - rows (layer_norm, group_norm, instance_norm): x as [R, M], one
 *     statistic per row over M contiguous elements. The affine parameter of
 *     element j of row r is p = (r % G) * Cg + j / S  (layer_norm: G = 1,
 *     Cg = M, S = 1; group_norm: G groups of Cg = C / G channels of S).
 * Statistics are two-pass in double (the mean, then squared deviations);
 * float16/bfloat16 run through float32.
 *
 * Backward rules are the closed forms, fused into one or two passes. Under
 * create_graph, when the incoming grad or a saved input carries history, the
 * rule is composed from public ops instead (norm_composite), so double
 * backward is exact rather than silently zero. */
#include "../autograd.h"
#include "../device.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "family.h"
#include "rowk.h"
#include "simd.h"

enum { PBLOCK = 64 };   /* parameters per task in the weight/bias grad pass */

static int32_t nthreads(int64_t work) {
  int32_t nt = of_threads();
  if (nt <= 1 || work < OF_PARALLEL_GRAIN) return 1;
  int64_t cap = work / (OF_PARALLEL_GRAIN / 4);
  return cap < nt ? (int32_t)cap : nt;
}

/* ------------------------------------------------------------ kernels */

/* Row helpers of the channel kernels, compiled per instruction set (the
 * kernels' OpenMP bodies are outlined before target_clones could reach them,
 * so they ran on SSE2). Sums keep eight partial sums, lane i taking the
 * elements i mod 8, combined in a fixed order, with no contraction into
 * FMAs, so results do not depend on the instruction set either. The eight
 * lanes are two 4-double vectors (one ymm each on AVX2 and AVX-512, two
 * xmm on SSE2): one 8-double vector is no register on AVX2, and GCC's AVX2
 * clone kept it on the stack, a store and reload an element group (batch
 * norm's statistics at 11% of the triad on a Zen 3, bench/kernels.lua). */
typedef float v4f_t __attribute__((vector_size(16)));
typedef double v4d_t __attribute__((vector_size(32)));
/* 8 elements at p as doubles into the v4d_t lvalues lo and hi (macros:
 * vector arguments and results would depend on the instruction set's ABI) */
#define LOAD8_float(lo, hi, p)                                                            \
  do {                                                                                    \
    v4f_t f0_, f1_;                                                                       \
    memcpy(&f0_, (p), sizeof f0_);                                                        \
    memcpy(&f1_, (p) + 4, sizeof f1_);                                                    \
    (lo) = __builtin_convertvector(f0_, v4d_t);                                           \
    (hi) = __builtin_convertvector(f1_, v4d_t);                                           \
  } while (0)
#define LOAD8_double(lo, hi, p)                                                           \
  do {                                                                                    \
    memcpy(&(lo), (p), sizeof(v4d_t));                                                    \
    memcpy(&(hi), (p) + 4, sizeof(v4d_t));                                                \
  } while (0)
#define HSUM8(a, b) ((((a)[0] + (a)[1]) + ((a)[2] + (a)[3])) + (((b)[0] + (b)[1]) + ((b)[2] + (b)[3])))

/* the clamp of_batch_norm_eval applies after the affine (of_clamp's rule; the
 * bounds rounded to the data's type, as clamp's float32 loop does) */
typedef struct {
  double lo, hi;
  bool lo_on, hi_on;
} bn_clamp;

#define CH_ROWS(T)                                                                        \
  /* sum of x, or of (x - m)^2 when sq */                                                 \
  __attribute__((target_clones("avx512f", "avx2", "default"), OF_GCC_OPTIMIZE("fp-contract=off"))) \
  static double chrow_sum_##T(const T *p, int64_t n, double m, int sq) {                  \
    v4d_t a0 = {0, 0, 0, 0}, a1 = a0;                                                    \
    double t = 0;                                                                         \
    int64_t i = 0;                                                                        \
    if (sq) {                                                                             \
      for (; i + 8 <= n; i += 8) {                                                        \
        v4d_t d0, d1;                                                                     \
        LOAD8_##T(d0, d1, p + i);                                                         \
        d0 -= m, d1 -= m;                                                                 \
        a0 += d0 * d0, a1 += d1 * d1;                                                     \
      }                                                                                   \
      for (; i < n; i++) t += ((double)p[i] - m) * ((double)p[i] - m);                    \
    } else {                                                                              \
      for (; i + 8 <= n; i += 8) {                                                        \
        v4d_t v0, v1;                                                                     \
        LOAD8_##T(v0, v1, p + i);                                                         \
        a0 += v0, a1 += v1;                                                               \
      }                                                                                   \
      for (; i < n; i++) t += (double)p[i];                                               \
    }                                                                                     \
    return HSUM8(a0, a1) + t;                                                             \
  }                                                                                       \
  /* *sg = sum g, *sgx = sum g * (x - m) */                                               \
  __attribute__((target_clones("avx512f", "avx2", "default"), OF_GCC_OPTIMIZE("fp-contract=off"))) \
  static void chrow_grad_sums_##T(const T *x, const T *g, int64_t n, double m, double *sg, \
                                  double *sgx) {                                          \
    v4d_t a0 = {0, 0, 0, 0}, a1 = a0, b0 = a0, b1 = a0;                                  \
    double ta = 0, tb = 0;                                                                \
    int64_t i = 0;                                                                        \
    for (; i + 8 <= n; i += 8) {                                                          \
      v4d_t g0, g1, x0, x1;                                                               \
      LOAD8_##T(g0, g1, g + i);                                                           \
      LOAD8_##T(x0, x1, x + i);                                                           \
      a0 += g0, a1 += g1;                                                                 \
      b0 += g0 * (x0 - m), b1 += g1 * (x1 - m);                                           \
    }                                                                                     \
    for (; i < n; i++) {                                                                  \
      ta += (double)g[i];                                                                 \
      tb += (double)g[i] * ((double)x[i] - m);                                            \
    }                                                                                     \
    *sg = HSUM8(a0, a1) + ta;                                                             \
    *sgx = HSUM8(b0, b1) + tb;                                                            \
  }                                                                                       \
  /* y = x * a + b in T (a product and a sum, each rounded: PyTorch's float              \
   * arithmetic, without its FMA so that every instruction set agrees), then clamped     \
   * as k says (NULL: not); y may be x (of_batch_norm_eval in place) */                   \
  __attribute__((target_clones("avx512f", "avx2", "default"), OF_GCC_OPTIMIZE("fp-contract=off"))) \
  static void chrow_affine_##T(const T *x, T *y, int64_t n, double a, double b,           \
                               const bn_clamp *k) {                                       \
    T at = (T)a, bt = (T)b;                                                               \
    if (!k) {                                                                             \
      for (int64_t i = 0; i < n; i++) y[i] = x[i] * at + bt;                              \
      return;                                                                             \
    }                                                                                     \
    T lo = (T)k->lo, hi = (T)k->hi;                                                       \
    const bool lo_on = k->lo_on, hi_on = k->hi_on;                                        \
    for (int64_t i = 0; i < n; i++) {                                                     \
      T v = x[i] * at + bt, w = lo_on && v < lo ? lo : v;                                 \
      w = hi_on && w > hi ? hi : w;                                                       \
      y[i] = v != v ? v : w;   /* clamp's rule: a NaN stays NaN */                        \
    }                                                                                     \
  }                                                                                       \
  /* gx = g * a + (x - m) * b + k */                                                      \
  __attribute__((target_clones("avx512f", "avx2", "default"), OF_GCC_OPTIMIZE("fp-contract=off"))) \
  static void chrow_grad_input_##T(const T *restrict x, const T *restrict g, T *restrict gx, \
                                 int64_t n, double m, double a, double b, double k) {     \
    for (int64_t i = 0; i < n; i++)                                                       \
      gx[i] = (T)((double)g[i] * a + ((double)x[i] - m) * b + k);                         \
  }
CH_ROWS(float)
CH_ROWS(double)

/* bfloat16 y = x * a + b in one pass (eval batch_norm): the same numbers as
 * converting x to float32, the float32 kernel and rounding back (x widens
 * exactly; the result rounds to nearest even, NaN stays NaN), without the
 * two float32 tensors. */
__attribute__((target_clones("avx512f", "avx2", "default"), OF_GCC_OPTIMIZE("fp-contract=off")))
static void chrow_affine_bf16_gen(const uint16_t *restrict x, uint16_t *restrict y, int64_t n,
                                  double a, double b) {
  float af = (float)a, bf = (float)b;
  for (int64_t i = 0; i < n; i++) y[i] = of_f32_to_bf16(of_bf16_to_f32(x[i]) * af + bf);
}

#if defined(__x86_64__) || defined(__i386__)
/* AVX-512 spelled out: GCC's vectorised form of the loop above (with the
 * arithmetic in double until 2026-12-06) ran a [64, 64, 32, 32] eval
 * batch_norm at 3.3x PyTorch's time. The same operations in the same
 * order: a float32 product and sum (no FMA, as fp-contract=off above),
 * then bfloat16 by simd.h's stores. */
#define AFFINE_BF16_16(NAME, ATTR, ST)                                                          \
  ATTR __attribute__((OF_GCC_OPTIMIZE("fp-contract=off"))) static void NAME(                    \
      const uint16_t *restrict x, uint16_t *restrict y, int64_t n, double a, double b) {        \
    __m512 va = _mm512_set1_ps((float)a), vb = _mm512_set1_ps((float)b);                        \
    int64_t i = 0;                                                                              \
    for (; i + 16 <= n; i += 16) {                                                              \
      __m512 xf = (__m512)BF16_LD_16(x + i);                                                    \
      ST(y + i, (vf16)_mm512_add_ps(_mm512_mul_ps(xf, va), vb));                                \
    }                                                                                           \
    if (i < n) chrow_affine_bf16_gen(x + i, y + i, n - i, a, b);                                \
  }
AFFINE_BF16_16(chrow_affine_bf16_avx512, VATTR_16, st_bf16_16)
AFFINE_BF16_16(chrow_affine_bf16_bf16n, VATTR_16B, st_bf16n_16)
#endif

static void chrow_affine_bf16(const uint16_t *restrict x, uint16_t *restrict y, int64_t n,
                              double a, double b) {
#if defined(__x86_64__) || defined(__i386__)
  if (of_cpu_isa() == OF_ISA_AVX512) {
    if (of_cpu_bf16_native()) chrow_affine_bf16_bf16n(x, y, n, a, b);
    else chrow_affine_bf16_avx512(x, y, n, a, b);
    return;
  }
#endif
  chrow_affine_bf16_gen(x, y, n, a, b);
}

/* channels: x [N, C, S]; q = n * C + c indexes one run of S elements */
#define CHANNEL_KERNELS(T)                                                                \
  /* part[q] = sum_s x, or sum_s (x - mu[c])^2 when mu is given */                        \
  static void ch_sums_##T(const T *x, int64_t N, int64_t C, int64_t S, const double *mu,  \
                          double *part) {                                                 \
    int32_t nt = nthreads(N * C * S);                                                     \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t q = 0; q < N * C; q++)                                                   \
      part[q] = chrow_sum_##T(x + q * S, S, mu ? mu[q % C] : 0, mu != NULL);              \
  }                                                                                       \
  /* y = x * a[c] + b[c] */                                                               \
  static void ch_affine_##T(const T *x, T *y, int64_t N, int64_t C, int64_t S,            \
                            const double *a, const double *b, const bn_clamp *k) {        \
    int32_t nt = nthreads(N * C * S);                                                     \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t q = 0; q < N * C; q++)                                                   \
      chrow_affine_##T(x + q * S, y + q * S, S, a[q % C], b[q % C], k);                   \
  }                                                                                       \
  /* pg[q] = sum_s g, pgx[q] = sum_s g * (x - mu[c]) */                                   \
  static void ch_grad_sums_##T(const T *x, const T *g, int64_t N, int64_t C, int64_t S,   \
                               const double *mu, double *pg, double *pgx) {               \
    int32_t nt = nthreads(N * C * S);                                                     \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t q = 0; q < N * C; q++)                                                   \
      chrow_grad_sums_##T(x + q * S, g + q * S, S, mu[q % C], &pg[q], &pgx[q]);           \
  }                                                                                       \
  /* gx = g * a[c] + (x - mu[c]) * b[c] + k[c] */                                         \
  static void ch_grad_input_##T(const T *x, const T *g, T *gx, int64_t N, int64_t C,      \
                                int64_t S, const double *mu, const double *a,             \
                                const double *b, const double *k) {                       \
    int32_t nt = nthreads(N * C * S);                                                     \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t q = 0; q < N * C; q++) {                                                 \
      int64_t c = q % C;                                                                  \
      chrow_grad_input_##T(x + q * S, g + q * S, gx + q * S, S, mu[c], a[c], b[c], k[c]); \
    }                                                                                     \
  }

/* rows: x [R, M]; parameter p = (r % G) * Cg + j / S */
#define ROW_KERNELS(T)                                                                    \
  /* mean and biased variance of each row */                                              \
  static void row_stats_##T(const T *x, int64_t R, int64_t M, double *mean, double *var) { \
    int32_t nt = nthreads(R * M);                                                         \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t r = 0; r < R; r++) {                                                     \
      const T *p = x + r * M;                                                             \
      double s1 = 0, s2 = 0;                                                              \
      _Pragma("omp simd reduction(+ : s1)")                                               \
      for (int64_t j = 0; j < M; j++) s1 += (double)p[j];                                 \
      double m = s1 / (double)M;                                                          \
      _Pragma("omp simd reduction(+ : s2)")                                               \
      for (int64_t j = 0; j < M; j++) s2 += ((double)p[j] - m) * ((double)p[j] - m);      \
      mean[r] = m;                                                                        \
      var[r] = s2 / (double)M;                                                            \
    }                                                                                     \
  }                                                                                       \
  /* y = (x - mean) * rstd * w[p] + b[p] */                                               \
  static void row_apply_##T(const T *x, T *y, int64_t R, int64_t M, int64_t G,            \
                            int64_t Cg, int64_t S, const double *mean, const double *rstd, \
                            const T *w, const T *b) {                                     \
    int32_t nt = nthreads(R * M);                                                         \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t r = 0; r < R; r++) {                                                     \
      const T *px = x + r * M;                                                            \
      T *py = y + r * M;                                                                  \
      double m = mean[r], rs = rstd[r];                                                   \
      int64_t p0 = (r % G) * Cg;                                                          \
      if (S == 1) {                                                                       \
        for (int64_t j = 0; j < M; j++) {                                                 \
          double v = ((double)px[j] - m) * rs;                                            \
          if (w) v *= (double)w[p0 + j];                                                  \
          if (b) v += (double)b[p0 + j];                                                  \
          py[j] = (T)v;                                                                   \
        }                                                                                 \
        continue;                                                                         \
      }                                                                                   \
      for (int64_t cg = 0; cg < Cg; cg++) {                                               \
        double sc = rs * (w ? (double)w[p0 + cg] : 1.0);                                  \
        double sh = (b ? (double)b[p0 + cg] : 0.0) - m * sc;                              \
        const T *qx = px + cg * S;                                                        \
        T *qy = py + cg * S;                                                              \
        for (int64_t s = 0; s < S; s++) qy[s] = (T)((double)qx[s] * sc + sh);             \
      }                                                                                   \
    }                                                                                     \
  }                                                                                       \
  /* gx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = g * w[p] */               \
  static void row_grad_input_##T(const T *x, const T *g, T *gx, int64_t R, int64_t M,     \
                                 int64_t G, int64_t Cg, int64_t S, const double *mean,    \
                                 const double *rstd, const T *w) {                        \
    int32_t nt = nthreads(R * M);                                                         \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t r = 0; r < R; r++) {                                                     \
      const T *px = x + r * M, *pg = g + r * M;                                           \
      T *po = gx + r * M;                                                                 \
      const T *wr = w ? w + (r % G) * Cg : NULL;                                          \
      double m = mean[r], rs = rstd[r], s1 = 0, s2 = 0;                                   \
      if (S == 1) {   /* layer_norm: one parameter per element */                         \
        _Pragma("omp simd reduction(+ : s1, s2)")                                         \
        for (int64_t j = 0; j < M; j++) {                                                 \
          double gw = (double)pg[j] * (wr ? (double)wr[j] : 1.0);                         \
          s1 += gw;                                                                       \
          s2 += gw * ((double)px[j] - m);                                                 \
        }                                                                                 \
      } else {                                                                            \
        for (int64_t cg = 0; cg < Cg; cg++) {                                             \
          const T *qx = px + cg * S, *qg = pg + cg * S;                                   \
          double wv = wr ? (double)wr[cg] : 1.0, a = 0, b = 0;                            \
          _Pragma("omp simd reduction(+ : a, b)")                                         \
          for (int64_t s = 0; s < S; s++) {                                               \
            a += (double)qg[s];                                                           \
            b += (double)qg[s] * ((double)qx[s] - m);                                     \
          }                                                                               \
          s1 += wv * a;                                                                   \
          s2 += wv * b;                                                                   \
        }                                                                                 \
      }                                                                                   \
      double c1 = s1 / (double)M, c2 = rs * rs * s2 / (double)M;                          \
      if (S == 1) {                                                                       \
        for (int64_t j = 0; j < M; j++)                                                   \
          po[j] = (T)(rs * ((double)pg[j] * (wr ? (double)wr[j] : 1.0) - c1 -             \
                          ((double)px[j] - m) * c2));                                     \
        continue;                                                                         \
      }                                                                                   \
      for (int64_t cg = 0; cg < Cg; cg++) {                                               \
        const T *qx = px + cg * S, *qg = pg + cg * S;                                     \
        T *qo = po + cg * S;                                                              \
        double wv = wr ? (double)wr[cg] : 1.0;                                            \
        for (int64_t s = 0; s < S; s++)                                                   \
          qo[s] = (T)(rs * ((double)qg[s] * wv - c1 - ((double)qx[s] - m) * c2));         \
      }                                                                                   \
    }                                                                                     \
  }                                                                                       \
  /* gw[p] = sum g * xhat, gb[p] = sum g over the rows and elements of parameter p.       \
   * Tasks are blocks of PBLOCK channels of one group, so each row's statistics are       \
   * read once per block and, for S == 1 (layer_norm), the inner loop is contiguous. */   \
  static void row_grad_params_##T(const T *x, const T *g, int64_t R, int64_t M, int64_t G, \
                                  int64_t Cg, int64_t S, const double *mean,              \
                                  const double *rstd, double *gw, double *gb) {           \
    int64_t per = (Cg + PBLOCK - 1) / PBLOCK, nblk = G * per, NB = R / G;                 \
    int32_t nt = nthreads(R * M);                                                         \
    if (nt > nblk) nt = (int32_t)(nblk > 0 ? nblk : 1);                                   \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t blk = 0; blk < nblk; blk++) {                                            \
      int64_t gi = blk / per, c0 = (blk % per) * PBLOCK;                                  \
      int64_t c1 = c0 + PBLOCK < Cg ? c0 + PBLOCK : Cg;                                   \
      double aw[PBLOCK] = {0}, ab[PBLOCK] = {0};                                          \
      for (int64_t n = 0; n < NB; n++) {                                                  \
        int64_t r = n * G + gi;                                                           \
        double m = mean[r], rs = rstd[r];                                                 \
        const T *xr = x + r * M, *gr = g + r * M;                                         \
        if (S == 1) {                                                                     \
          for (int64_t c = c0; c < c1; c++) {                                             \
            double gv = (double)gr[c];                                                    \
            ab[c - c0] += gv;                                                             \
            aw[c - c0] += gv * ((double)xr[c] - m) * rs;                                  \
          }                                                                               \
          continue;                                                                       \
        }                                                                                 \
        for (int64_t c = c0; c < c1; c++) {                                               \
          const T *qx = xr + c * S, *qg = gr + c * S;                                     \
          double sw = 0, sb = 0;                                                          \
          _Pragma("omp simd reduction(+ : sw, sb)")                                       \
          for (int64_t s = 0; s < S; s++) {                                               \
            sb += (double)qg[s];                                                          \
            sw += (double)qg[s] * ((double)qx[s] - m);                                    \
          }                                                                               \
          aw[c - c0] += sw * rs;                                                          \
          ab[c - c0] += sb;                                                               \
        }                                                                                 \
      }                                                                                   \
      for (int64_t c = c0; c < c1; c++) {                                                 \
        if (gw) gw[gi * Cg + c] = aw[c - c0];                                             \
        if (gb) gb[gi * Cg + c] = ab[c - c0];                                             \
      }                                                                                   \
    }                                                                                     \
  }

CHANNEL_KERNELS(float)
CHANNEL_KERNELS(double)

/* Channels-last (dense [N, spatial..., C]): x as [R, C] rows, R = N * S.
 * Per-channel sums run over chunks of CL_ROWS rows (vectors along C) and
 * the chunks' partials are combined in chunk order, so results do not
 * depend on the thread count; the per-element formulas are the channel
 * kernels' own (the eval affine gives the same bits as on a contiguous
 * input). */
enum { CL_ROWS = 64 };
#define CL_ROWS_T(T)                                                                      \
  /* acc[c] += x[c], or (x[c] - m[c])^2 when m is given */                                \
  __attribute__((target_clones("avx512f", "avx2", "default"), OF_GCC_OPTIMIZE("fp-contract=off"))) \
  static void clrow_sum_##T(const T *restrict x, int64_t C, const double *restrict m,      \
                            double *restrict acc) {                                       \
    if (m)                                                                                \
      for (int64_t c = 0; c < C; c++) {                                                   \
        double d = (double)x[c] - m[c];                                                   \
        acc[c] += d * d;                                                                  \
      }                                                                                   \
    else                                                                                  \
      for (int64_t c = 0; c < C; c++) acc[c] += (double)x[c];                             \
  }                                                                                       \
  __attribute__((target_clones("avx512f", "avx2", "default"), OF_GCC_OPTIMIZE("fp-contract=off"))) \
  static void clrow_grad_sums_##T(const T *restrict x, const T *restrict g, int64_t C,      \
                                  const double *restrict m, double *restrict sg,          \
                                  double *restrict sgx) {                                 \
    for (int64_t c = 0; c < C; c++) {                                                     \
      sg[c] += (double)g[c];                                                              \
      sgx[c] += (double)g[c] * ((double)x[c] - m[c]);                                     \
    }                                                                                     \
  }                                                                                       \
  __attribute__((target_clones("avx512f", "avx2", "default"), OF_GCC_OPTIMIZE("fp-contract=off"))) \
  static void clrow_affine_##T(const T *restrict x, T *restrict y, int64_t C,              \
                               const double *restrict a, const double *restrict b) {      \
    for (int64_t c = 0; c < C; c++) y[c] = x[c] * (T)a[c] + (T)b[c];   /* as chrow_affine */ \
  }                                                                                       \
  __attribute__((target_clones("avx512f", "avx2", "default"), OF_GCC_OPTIMIZE("fp-contract=off"))) \
  static void clrow_grad_input_##T(const T *restrict x, const T *restrict g, T *restrict gx, \
                                   int64_t C, const double *restrict m,                   \
                                   const double *restrict a, const double *restrict b,    \
                                   const double *restrict k) {                            \
    for (int64_t c = 0; c < C; c++)                                                       \
      gx[c] = (T)((double)g[c] * a[c] + ((double)x[c] - m[c]) * b[c] + k[c]);             \
  }                                                                                       \
  /* part[chunk * C + c]: the chunk's sums (of x, or (x - mu)^2 when mu is given) */      \
  static void cl_sums_##T(const T *x, int64_t R, int64_t C, const double *mu, double *part) { \
    int64_t nch = (R + CL_ROWS - 1) / CL_ROWS;                                            \
    int32_t nt = nthreads(R * C);                                                         \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t k = 0; k < nch; k++) {                                                   \
      double *acc = part + k * C;                                                         \
      memset(acc, 0, sizeof(double) * (size_t)C);                                         \
      int64_t r1 = (k + 1) * CL_ROWS < R ? (k + 1) * CL_ROWS : R;                         \
      for (int64_t r = k * CL_ROWS; r < r1; r++) clrow_sum_##T(x + r * C, C, mu, acc);    \
    }                                                                                     \
  }                                                                                       \
  static void cl_affine_##T(const T *x, T *y, int64_t R, int64_t C, const double *a,      \
                            const double *b) {                                            \
    int32_t nt = nthreads(R * C);                                                         \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t r = 0; r < R; r++) clrow_affine_##T(x + r * C, y + r * C, C, a, b);      \
  }                                                                                       \
  static void cl_grad_sums_##T(const T *x, const T *g, int64_t R, int64_t C,              \
                               const double *mu, double *pg, double *pgx) {               \
    int64_t nch = (R + CL_ROWS - 1) / CL_ROWS;                                            \
    int32_t nt = nthreads(R * C);                                                         \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t k = 0; k < nch; k++) {                                                   \
      double *sg = pg + k * C, *sgx = pgx + k * C;                                        \
      memset(sg, 0, sizeof(double) * (size_t)C);                                          \
      memset(sgx, 0, sizeof(double) * (size_t)C);                                         \
      int64_t r1 = (k + 1) * CL_ROWS < R ? (k + 1) * CL_ROWS : R;                         \
      for (int64_t r = k * CL_ROWS; r < r1; r++)                                          \
        clrow_grad_sums_##T(x + r * C, g + r * C, C, mu, sg, sgx);                        \
    }                                                                                     \
  }                                                                                       \
  static void cl_grad_input_##T(const T *x, const T *g, T *gx, int64_t R, int64_t C,      \
                                const double *mu, const double *a, const double *b,       \
                                const double *k) {                                        \
    int32_t nt = nthreads(R * C);                                                         \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                          \
    for (int64_t r = 0; r < R; r++)                                                       \
      clrow_grad_input_##T(x + r * C, g + r * C, gx + r * C, C, mu, a, b, k);             \
  }
CL_ROWS_T(float)
CL_ROWS_T(double)

static void ch_affine_bf16(const uint16_t *x, uint16_t *y, int64_t N, int64_t C, int64_t S,
                           const double *a, const double *b) {
  int32_t nt = nthreads(N * C * S);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t q = 0; q < N * C; q++)
    chrow_affine_bf16(x + q * S, y + q * S, S, a[q % C], b[q % C]);
}
ROW_KERNELS(float)
ROW_KERNELS(double)

/* ------------------------------------------------------------ helpers */

/* the input's and the per-channel tensors' checks work on shapes and
 * dtypes (of_meta), so the graph loader's re-inference (infer_norm) runs
 * the bodies' own checks on a loaded node's recorded values */
static of_status check_input_meta(const char *op, const of_meta *x, int32_t min_ndim) {
  char b[96];
  if (!of_dtype_is_floating(x->dtype))
    return of_fail(OF_ERR_DTYPE, "%s: expected a floating point input, got %s (shape %s)", op,
                   of_dtype_name(x->dtype), of_shape_str(x->shape, x->ndim, b, 96));
  if (x->ndim < min_ndim)
    return of_fail(OF_ERR_SHAPE, "%s: expected an input with at least %d dims, got %s (%s)", op,
                   (int)min_ndim, of_shape_str(x->shape, x->ndim, b, 96), of_dtype_name(x->dtype));
  return OF_OK;
}
static of_status check_input(const char *op, of_tensor *x, int32_t min_ndim) {
  if (!x) return of_fail(OF_ERR_ARG, "%s: input is NULL", op);
  of_meta m;
  m.ndim = x->ndim;
  m.dtype = x->dtype;
  memcpy(m.shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  return check_input_meta(op, &m, min_ndim);
}

/* An optional per-channel tensor (t NULL or ndim < 0: absent): floating, C elements. */
static of_status check_param_meta(const char *op, const char *what, const of_meta *t, int64_t C,
                                  const of_meta *x) {
  if (!t || t->ndim < 0) return OF_OK;
  char b[96], c[96];
  if (!of_dtype_is_floating(t->dtype))
    return of_fail(OF_ERR_DTYPE, "%s: %s must be floating point, got %s (shape %s)", op, what,
                   of_dtype_name(t->dtype), of_shape_str(t->shape, t->ndim, c, 96));
  if (of_shape_numel(t->shape, t->ndim) != C)
    return of_fail(OF_ERR_SHAPE, "%s: %s of shape %s should have %lld elements, one per "
                   "channel of the input %s (%s)", op, what, of_shape_str(t->shape, t->ndim, c, 96),
                   (long long)C, of_shape_str(x->shape, x->ndim, b, 96), of_dtype_name(x->dtype));
  return OF_OK;
}
static of_status check_param(const char *op, const char *what, of_tensor *t, int64_t C,
                             const of_tensor *x) {
  if (!t) return OF_OK;
  of_meta tm, xm;
  tm.ndim = t->ndim;
  tm.dtype = t->dtype;
  memcpy(tm.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  xm.ndim = x->ndim;
  xm.dtype = x->dtype;
  memcpy(xm.shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  return check_param_meta(op, what, &tm, C, &xm);
}

/* Element i of a 1-D (possibly strided) tensor as double, and back. */
static double get1(const of_tensor *t, int64_t i) {
  int64_t st = t->ndim ? t->strides[t->ndim - 1] : 1;
  if (t->ndim > 1) st = 1;   /* [1, C] and similar: contiguous in practice */
  return of_load_double(of_ptr(t) + i * st * of_dtype_size(t->dtype), t->dtype);
}
/* v[c] = t[c] for c < C, or dflt when t is NULL: get1's values, a float32
 * or float64 vector read directly (get1 per channel took ~12 of the 41 us
 * of a [1, 1024, 14, 14] eval batch_norm inside a ResNet-50 forward) */
static void get_all(const of_tensor *t, int64_t C, double dflt, double *v) {
  if (!t) {
    for (int64_t c = 0; c < C; c++) v[c] = dflt;
    return;
  }
  int64_t st = t->ndim ? t->strides[t->ndim - 1] : 1;
  if (t->ndim > 1) st = 1;
  if (t->dtype == OF_FLOAT32) {
    const float *p = (const float *)of_ptr(t);
    for (int64_t c = 0; c < C; c++) v[c] = p[c * st];
  } else if (t->dtype == OF_FLOAT64) {
    const double *p = (const double *)of_ptr(t);
    for (int64_t c = 0; c < C; c++) v[c] = p[c * st];
  } else {
    for (int64_t c = 0; c < C; c++) v[c] = get1(t, c);
  }
}
static void set1(of_tensor *t, int64_t i, double v) {
  int64_t st = t->ndim ? t->strides[t->ndim - 1] : 1;
  if (t->ndim > 1) st = 1;
  of_store_double(of_ptr(t) + i * st * of_dtype_size(t->dtype), t->dtype, v);
}

static of_status check_stat(const char *op, const char *what, of_tensor *t, int64_t C,
                            const of_tensor *x) {
  OF_CHECK(check_param(op, what, t, C, x));
  if (t && t->ndim > 1 && !of_tensor_is_contiguous(t))
    return of_fail(OF_ERR_ARG, "%s: %s must be contiguous (shape %s)", op, what,
                   OF_SHAPE_STR(t));
  return OF_OK;
}

/* running = (1 - m) * running + m * v[c], c < C (no autograd: a buffer). */
static void update_running(of_tensor *t, const double *v, int64_t C, double momentum) {
  if (!t) return;
  for (int64_t c = 0; c < C; c++) set1(t, c, (1 - momentum) * get1(t, c) + momentum * v[c]);
  of_bump_version(t);
}

/* A grad computed in doubles, shaped and typed like input k of node n. */
static of_status grad_from_doubles(of_node *n, int32_t k, const double *v, of_tensor **out) {
  const of_meta *m = &n->in_meta[k];
  return of_from_doubles(v, m->shape, m->ndim, m->dtype, out);
}

static of_status new_doubles(int64_t n, of_tensor **out) {
  return of_tensor_new(&n, 1, OF_FLOAT64, OF_CPU, out);
}

static void release_all(of_tensor **ts, int32_t n) {
  for (int32_t i = 0; i < n; i++) of_tensor_release(ts[i]);
}

/* ------------------------------------------------------------ composite backward
 * Used under create_graph: the closed form written with public ops, so the
 * backward pass is itself recorded. x is viewed as vshape for the
 * statistics, which reduce over rdims of that view; weight/bias grads sum
 * over pdims of x. mean/rstd given (eval mode): constants broadcastable to
 * the view; else they are recomputed from x (with history). */
typedef struct {
  int64_t vshape[OF_MAX_DIMS];
  int32_t vnd;
  int32_t rdims[OF_MAX_DIMS], nr;
  int32_t pdims[OF_MAX_DIMS], np;
  of_tensor *wb;              /* weight broadcastable to x, or NULL */
  of_tensor *mean, *rstd;     /* eval-mode constants, or NULL */
  double eps;
} composite_t;

static of_tensor *s_red(of_scope *s, of_reduce_op op, of_tensor *x, const int32_t *dims,
                        int32_t nd, int32_t keep) {
  if (s->st != OF_OK || !x) return NULL;
  if (nd == 0) {   /* nothing to reduce (of_reduce would read 0 dims as all) */
    of_tensor_retain(x);
    return of_s_keep(s, OF_OK, x);
  }
  of_tensor *r = NULL;
  of_status st = of_reduce(op, x, dims, nd, keep, 0, -1, &r);
  return of_s_keep(s, st, r);
}

static of_tensor *s_reshape(of_scope *s, of_tensor *x, const int64_t *shape, int32_t nd) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_reshape(x, shape, nd, &r);
  return of_s_keep(s, st, r);
}

static of_tensor *s_cast(of_scope *s, of_tensor *x, of_dtype dt) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_to_dtype(x, dt, &r);
  return of_s_keep(s, st, r);
}

/* hands t (owned by the scope) out as a new reference */
static void s_give(of_scope *s, of_tensor *t, of_tensor **out) {
  if (s->st == OF_OK && t) {
    of_tensor_retain(t);
    *out = t;
  }
}

#define MUL(a, b) of_s_bin(&s, OF_MUL, a, b)
#define SUB(a, b) of_s_bin(&s, OF_SUB, a, b)

static of_status norm_composite(of_node *n, const composite_t *c, of_tensor *g, of_tensor *x,
                                of_tensor **gi) {
  of_scope s = {0};
  const of_meta *xm = &n->in_meta[0];
  of_tensor *xv = s_reshape(&s, x, c->vshape, c->vnd), *mu = c->mean, *rs = c->rstd;
  if (!mu) mu = s_red(&s, OF_RED_MEAN, xv, c->rdims, c->nr, 1);
  of_tensor *xc = SUB(xv, mu);
  if (!c->rstd) {
    of_tensor *var = s_red(&s, OF_RED_MEAN, MUL(xc, xc), c->rdims, c->nr, 1);
    rs = of_s_unary(&s, OF_RSQRT, of_s_bins(&s, OF_ADD, var, c->eps));
  }
  of_tensor *xh = MUL(xc, rs);   /* view shape */
  if (n->needs[0]) {
    of_tensor *gv = s_reshape(&s, c->wb ? MUL(g, c->wb) : g, c->vshape, c->vnd), *gxv;
    if (c->mean) {
      gxv = MUL(gv, rs);
    } else {
      of_tensor *m1 = s_red(&s, OF_RED_MEAN, gv, c->rdims, c->nr, 1);
      of_tensor *m2 = s_red(&s, OF_RED_MEAN, MUL(gv, xh), c->rdims, c->nr, 1);
      gxv = MUL(rs, SUB(SUB(gv, m1), MUL(xh, m2)));
    }
    s_give(&s, s_reshape(&s, gxv, xm->shape, xm->ndim), &gi[0]);
  }
  for (int32_t k = 1; k <= 2; k++) {
    if (!n->needs[k]) continue;
    of_tensor *t = k == 1 ? MUL(g, s_reshape(&s, xh, xm->shape, xm->ndim)) : g;
    t = s_red(&s, OF_RED_SUM, t, c->pdims, c->np, 0);
    t = s_reshape(&s, t, n->in_meta[k].shape, n->in_meta[k].ndim);
    s_give(&s, s_cast(&s, t, n->in_meta[k].dtype), &gi[k]);
  }
  return of_s_end(&s, NULL, &gi[0]);
}

/* Under create_graph with history to follow, the fused kernels would drop it. */
static bool wants_composite(of_tensor *g, of_tensor *x, of_tensor *w) {
  return of_is_grad_enabled() && (g->requires_grad || x->requires_grad ||
                                  (w && w->requires_grad));
}

/* Per-channel constants [C] (double) as a [1, C, 1, ...] tensor of dtype dt. */
static of_status channel_view(of_tensor *v, int32_t ndim, of_dtype dt, of_tensor **out) {
  int64_t shape[OF_MAX_DIMS];
  for (int32_t d = 0; d < ndim; d++) shape[d] = 1;
  shape[1] = v->numel;
  of_tensor *c;
  OF_CHECK(of_cast_data(v, dt, &c));
  of_status st = of_reshape(c, shape, ndim, out);
  of_tensor_release(c);
  return st;
}

/* ------------------------------------------------------------ batch_norm */

typedef struct {
  int64_t N, C, S;
} nc_shape;

static nc_shape nc_of(const of_meta *m) {
  nc_shape r = {m->shape[0], m->shape[1], 1};
  for (int32_t d = 2; d < m->ndim; d++) r.S *= m->shape[d];
  return r;
}

static of_meta meta_of_tensor(const of_tensor *t) {
  of_meta m;
  m.ndim = t->ndim;
  m.dtype = t->dtype;
  memcpy(m.shape, t->shape, sizeof m.shape);
  return m;
}

/* Norm nodes keep their op's record (a_norm): eps, flag (batch_norm:
 * training; instance_norm: use_input_stats), momentum, and groups
 * (layer_norm: the normalized dims; group_norm: the groups). Whether there
 * was a weight is whether one was saved (slot 1). */
static void keep_norm(of_node *n, int32_t op, int32_t flag, double momentum, double eps,
                      int64_t groups) {
  a_norm a;
  OF_ZERO(a);
  a.flag = flag;
  a.momentum = momentum;
  a.eps = eps;
  a.groups = groups;
  OF_NODE_KEEP(n, op, a);
}
static bool saved_weight(const of_node *n) { return n->saved[1].t != NULL; }

static of_status bn_backward(of_node *n, of_tensor **g, of_tensor **gi);
static const of_grad_def bn_grad = {"BatchNormBackward", bn_backward};

static of_status bn_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  /* saved: 0 x, 1 weight (if any), 2 mean [C], 3 invstd [C] (double) */
  of_tensor *sv[4] = {NULL, NULL, NULL, NULL}, *tmp[3] = {NULL, NULL, NULL};
  of_status st = OF_OK;
  const a_norm *an = OF_NODE_ATTRS(a_norm, n);
  bool training = an->flag != 0;
  for (int32_t k = 0; k < 4 && st == OF_OK; k++)
    if (k != 1 || saved_weight(n)) st = of_node_saved(n, k, &sv[k]);
  if (st != OF_OK) goto done;
  of_tensor *x = sv[0], *w = sv[1];
  /* a loaded graph's node records the input's shape; the kernels below
   * index x, the gradient and the per-channel tensors by it, so they must
   * agree (a crafted file read out of bounds here) */
  {
    const of_meta *m = &n->in_meta[0];
    bool ok = x && x->ndim >= 2 && m->ndim == x->ndim && g[0]->ndim == x->ndim;
    for (int32_t k = 0; ok && k < x->ndim; k++)
      ok = m->shape[k] == x->shape[k] && g[0]->shape[k] == x->shape[k];
    const int64_t C = ok ? x->shape[1] : 0;
    ok = ok && sv[2] && sv[3] && sv[2]->numel == C && sv[3]->numel == C && (!w || w->numel == C);
    if (!ok) {
      char a[96], b[96], c[96];
      st = of_fail(OF_ERR_SHAPE, "batch_norm backward: saved input %s and gradient %s do not match "
                   "the recorded input %s (or the per-channel statistics)",
                   x ? of_shape_str(x->shape, x->ndim, a, 96) : "none",
                   of_shape_str(g[0]->shape, g[0]->ndim, b, 96),
                   of_shape_str(m->shape, m->ndim, c, 96));
      goto done;
    }
  }
  nc_shape d = nc_of(&n->in_meta[0]);
  if (wants_composite(g[0], x, w)) {
    composite_t c = {.vnd = x->ndim, .eps = an->eps};
    memcpy(c.vshape, x->shape, sizeof c.vshape);
    for (int32_t k = 0; k < x->ndim; k++)
      if (k != 1) c.rdims[c.nr++] = k, c.pdims[c.np++] = k;
    if (w) st = channel_view(w, x->ndim, w->dtype, &tmp[0]);
    if (st == OF_OK && !training) st = channel_view(sv[2], x->ndim, g[0]->dtype, &tmp[1]);
    if (st == OF_OK && !training) st = channel_view(sv[3], x->ndim, g[0]->dtype, &tmp[2]);
    c.wb = tmp[0];
    if (!training) c.mean = tmp[1], c.rstd = tmp[2];
    if (st == OF_OK) st = norm_composite(n, &c, g[0], x, gi);
    goto done;
  }
  of_dtype cd = of_compute_dtype(x->dtype);
  of_tensor *xc = NULL, *gc = NULL, *gx = NULL;
  /* a channels-last input: the sums and the input grad run as [N * S, C]
   * rows (cl_*), the grad channels-last */
  bool cl = of_prefers_channels_last(x);
  int64_t NC = d.N * d.C, M = d.N * d.S;
  if (cl) NC = (M + CL_ROWS - 1) / CL_ROWS * d.C;   /* partials: chunks x channels */
  st = of_dense_format(x, cl, cd, &xc);
  if (st == OF_OK) st = of_dense_format(g[0], cl, cd, &gc);
  double *buf = st == OF_OK ? malloc(sizeof(double) * (size_t)(2 * NC + 5 * d.C + 1)) : NULL;
  if (st == OF_OK && !buf) st = of_fail(OF_ERR_OOM, "batch_norm backward: out of memory");
  if (st == OF_OK) {
    double *pg = buf, *pgx = buf + NC, *sg = pgx + NC, *sgx = sg + d.C, *a = sgx + d.C;
    double *b = a + d.C, *k = b + d.C;
    if (sv[2]->dtype != OF_FLOAT64 || sv[3]->dtype != OF_FLOAT64) {
      free(buf);
      of_tensor_release(xc);
      of_tensor_release(gc);
      st = of_fail(OF_ERR_DTYPE, "batch_norm backward: the saved statistics must be float64, got %s "
                   "and %s", of_dtype_name(sv[2]->dtype), of_dtype_name(sv[3]->dtype));
      goto done;
    }
    const double *mu = of_tensor_data(sv[2]), *is = of_tensor_data(sv[3]);
    if (cl && cd == OF_FLOAT64)
      cl_grad_sums_double(of_tensor_data(xc), of_tensor_data(gc), M, d.C, mu, pg, pgx);
    else if (cl)
      cl_grad_sums_float(of_tensor_data(xc), of_tensor_data(gc), M, d.C, mu, pg, pgx);
    else if (cd == OF_FLOAT64)
      ch_grad_sums_double(of_tensor_data(xc), of_tensor_data(gc), d.N, d.C, d.S, mu, pg, pgx);
    else
      ch_grad_sums_float(of_tensor_data(xc), of_tensor_data(gc), d.N, d.C, d.S, mu, pg, pgx);
    for (int64_t c = 0; c < d.C; c++) {
      double s1 = 0, s2 = 0;
      for (int64_t q = c; q < NC; q += d.C) s1 += pg[q], s2 += pgx[q];
      sg[c] = s1;
      sgx[c] = s2;
      a[c] = is[c] * (w ? get1(w, c) : 1.0);
      b[c] = training ? -a[c] * is[c] * is[c] * s2 / (double)M : 0;
      k[c] = training ? -a[c] * s1 / (double)M : 0;
    }
    if (n->needs[0]) {
      st = cl ? of_tensor_new_channels_last(x->shape, x->ndim, cd, OF_CPU, &gx)
              : of_tensor_new(x->shape, x->ndim, cd, OF_CPU, &gx);
      if (st == OF_OK) {
        if (cl && cd == OF_FLOAT64)
          cl_grad_input_double(of_tensor_data(xc), of_tensor_data(gc), of_tensor_data(gx), M,
                               d.C, mu, a, b, k);
        else if (cl)
          cl_grad_input_float(of_tensor_data(xc), of_tensor_data(gc), of_tensor_data(gx), M,
                              d.C, mu, a, b, k);
        else if (cd == OF_FLOAT64)
          ch_grad_input_double(of_tensor_data(xc), of_tensor_data(gc), of_tensor_data(gx),
                               d.N, d.C, d.S, mu, a, b, k);
        else
          ch_grad_input_float(of_tensor_data(xc), of_tensor_data(gc), of_tensor_data(gx),
                              d.N, d.C, d.S, mu, a, b, k);
        st = of_finish_dtype(gx, n->in_meta[0].dtype, &gi[0]);
      }
    }
    if (st == OF_OK && n->needs[1]) {
      for (int64_t c = 0; c < d.C; c++) sgx[c] *= is[c];   /* sum g * xhat */
      st = grad_from_doubles(n, 1, sgx, &gi[1]);
    }
    if (st == OF_OK && n->needs[2]) st = grad_from_doubles(n, 2, sg, &gi[2]);
  }
  free(buf);
  of_tensor_release(xc);
  of_tensor_release(gc);
done:
  release_all(sv, 4);
  release_all(tmp, 3);
  return st;
}

/* ---- batch_norm on a device (cuDNN) ----
 * x stays in its layout (channels-last or contiguous; anything else is made
 * contiguous, and more than 5 dims folded to [N, C, S]); the parameters and
 * statistics go to cuDNN in float32 (float64 for float64 x). Saved for the
 * backward: x, weight, the batch mean and invstd (training) or the running
 * mean and 1/sqrt(var + eps) (eval). */
static of_status bn_dev_backward(of_node *n, of_tensor **g, of_tensor **gi);
static const of_grad_def bn_dev_grad = {"CudnnBatchNormBackward", bn_dev_backward};

/* x's operand for cuDNN and the shape cuDNN sees */
static of_status bn_dev_operand(of_tensor *x, bool cl, of_tensor **out) {
  of_tensor *d = NULL;
  OF_CHECK(of_dense_format(x, cl, x->dtype, &d));
  if (d->ndim <= 5) {
    *out = d;
    return OF_OK;
  }
  int64_t shape[3] = {d->shape[0], d->shape[1], d->numel / (d->shape[0] * d->shape[1])};
  of_status st = of_reshape(d, shape, 3, out);
  of_tensor_release(d);
  return st;
}

/* a [C] parameter in dtype pdt, or a constant when absent */
static of_status bn_dev_param(of_tensor *t, int64_t C, double fill, of_dtype pdt, of_device dev,
                              of_tensor **out) {
  if (!t) return of_full(&C, 1, fill, pdt, dev, out);
  of_tensor *d = NULL;
  OF_CHECK(of_dense(t, pdt, &d));
  of_status st = d->ndim == 1 ? (of_tensor_retain(d), *out = d, OF_OK) : of_reshape(d, &C, 1, out);
  of_tensor_release(d);
  return st;
}

static of_status bn_device(of_device dev, of_tensor *x, of_tensor *rm, of_tensor *rv,
                           of_tensor *weight, of_tensor *bias, int32_t training, double momentum,
                           double eps, of_tensor **out) {
  const of_device_ops *o = of_device_ops_for("batch_norm", dev);
  if (!o) return OF_ERR_DEVICE;
  if (!o->batch_norm) return of_device_unsupported("batch_norm", dev);
  of_device_last_op = "batch_norm";
  int64_t C = x->shape[1];
  of_dtype pdt = x->dtype == OF_FLOAT64 ? OF_FLOAT64 : OF_FLOAT32;
  bool cl = of_prefers_channels_last(x);
  of_tensor *xc = NULL, *w = NULL, *b = NULL, *m = NULL, *v = NULL, *y = NULL;
  of_tensor *sm = NULL, *si = NULL, *res = NULL;
  of_status st = bn_dev_operand(x, cl, &xc);
  if (st == OF_OK) st = bn_dev_param(weight, C, 1, pdt, dev, &w);
  if (st == OF_OK) st = bn_dev_param(bias, C, 0, pdt, dev, &b);
  /* cuDNN updates the running statistics in place: a temp when the dtype
   * or layout differs, copied back after */
  if (st == OF_OK && rm) st = bn_dev_param(rm, C, 0, pdt, dev, &m);
  if (st == OF_OK && rv) st = bn_dev_param(rv, C, 1, pdt, dev, &v);
  if (st == OF_OK && training && (m == NULL) != (v == NULL))   /* cuDNN wants both or none */
    st = m ? of_full(&C, 1, 1, pdt, dev, &v) : of_zeros(&C, 1, pdt, dev, &m);
  if (st == OF_OK) st = of_empty(&C, 1, pdt, dev, &sm);
  if (st == OF_OK) st = of_empty(&C, 1, pdt, dev, &si);
  if (st == OF_OK)
    st = cl ? of_tensor_new_channels_last(xc->shape, xc->ndim, x->dtype, dev, &y)
            : of_tensor_new(xc->shape, xc->ndim, x->dtype, dev, &y);
  if (st != OF_OK) goto done;
  if (y->numel > 0)
    st = o->batch_norm(xc, w, b, m, v, training, momentum, eps, y, sm, si);
  if (st == OF_OK && training) {
    if (rm && m != rm) st = of_copy_data(rm, m);
    if (st == OF_OK && rv && v != rv) st = of_copy_data(rv, v);
    if (rm) of_bump_version(rm);
    if (rv) of_bump_version(rv);
  } else if (st == OF_OK) {   /* eval: save the constants the backward needs */
    of_tensor_release(sm);
    sm = m;
    of_tensor_retain(sm);
    of_tensor *t = NULL;
    of_tensor_release(si);
    si = NULL;
    st = of_binary_scalar(OF_ADD, v, eps, 0, NULL, &t);
    if (st == OF_OK) st = of_unary(OF_RSQRT, t, NULL, &si);
    of_tensor_release(t);
  }
  if (st != OF_OK) goto done;
  if (y->ndim != x->ndim) {
    st = of_reshape(y, x->shape, x->ndim, &res);
  } else {
    res = y;
    y = NULL;
  }
  of_tensor *ins[3] = {x, weight, bias};
  if (st == OF_OK && of_grad_needed(ins, 3)) {
    of_node *n;
    st = of_record(&bn_dev_grad, ins, 3, &res, 1, &n);
    if (st == OF_OK) {
      keep_norm(n, OPK_BATCH_NORM, training != 0, momentum, eps, 0);
      of_node_save(n, 0, x);
      of_node_save(n, 1, weight);
      of_node_save(n, 2, sm);
      of_node_save(n, 3, si);
    }
  }
  if (st == OF_OK) {
    *out = res;
    res = NULL;
  }
done:;
  of_tensor *rel[9] = {xc, w, b, m, v, y, sm, si, res};
  release_all(rel, 9);
  return st;
}

static of_status bn_dev_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_tensor *sv[4] = {NULL, NULL, NULL, NULL}, *tmp[8] = {NULL};
  of_status st = OF_OK;
  const a_norm *an = OF_NODE_ATTRS(a_norm, n);
  bool training = an->flag != 0;
  for (int32_t k = 0; k < 4 && st == OF_OK; k++)
    if (k != 1 || saved_weight(n)) st = of_node_saved(n, k, &sv[k]);
  if (st != OF_OK) goto done;
  of_tensor *x = sv[0], *w = sv[1];
  if (!training || wants_composite(g[0], x, w)) {
    /* the closed form from public ops (eval mode: constant statistics) */
    composite_t c = {.vnd = x->ndim, .eps = an->eps};
    memcpy(c.vshape, x->shape, sizeof c.vshape);
    for (int32_t k = 0; k < x->ndim; k++)
      if (k != 1) c.rdims[c.nr++] = k, c.pdims[c.np++] = k;
    if (w) st = channel_view(w, x->ndim, w->dtype, &tmp[0]);
    if (st == OF_OK && !training) st = channel_view(sv[2], x->ndim, g[0]->dtype, &tmp[1]);
    if (st == OF_OK && !training) st = channel_view(sv[3], x->ndim, g[0]->dtype, &tmp[2]);
    c.wb = tmp[0];
    if (!training) c.mean = tmp[1], c.rstd = tmp[2];
    if (st == OF_OK) st = norm_composite(n, &c, g[0], x, gi);
    goto done;
  }
  const of_device_ops *o = of_device_ops_for("batch_norm_backward", of_dev(x));
  if (!o) {
    st = OF_ERR_DEVICE;
    goto done;
  }
  of_device dev = of_dev(x);
  int64_t C = x->shape[1];
  of_dtype pdt = sv[2]->dtype;
  bool cl = of_prefers_channels_last(x);
  of_tensor **xc = &tmp[0], **gc = &tmp[1], **wc = &tmp[2], **dx = &tmp[3], **dw = &tmp[4];
  of_tensor **db = &tmp[5];
  st = bn_dev_operand(x, cl, xc);
  if (st == OF_OK) st = bn_dev_operand(g[0], cl, gc);
  if (st == OF_OK && (*gc)->dtype != (*xc)->dtype) {
    of_tensor *h = NULL;
    st = of_cast_data(*gc, (*xc)->dtype, &h);
    of_tensor_release(*gc);
    *gc = h;
  }
  if (st == OF_OK) st = bn_dev_param(w, C, 1, pdt, dev, wc);
  if (st == OF_OK)
    st = cl ? of_tensor_new_channels_last((*xc)->shape, (*xc)->ndim, x->dtype, dev, dx)
            : of_tensor_new((*xc)->shape, (*xc)->ndim, x->dtype, dev, dx);
  if (st == OF_OK) st = of_empty(&C, 1, pdt, dev, dw);
  if (st == OF_OK) st = of_empty(&C, 1, pdt, dev, db);
  if (st == OF_OK && (*xc)->numel > 0)
    st = o->batch_norm_back(*xc, *gc, *wc, sv[2], sv[3], an->eps, *dx, *dw, *db);
  if (st == OF_OK && n->needs[0]) {
    if ((*dx)->ndim != x->ndim) st = of_reshape(*dx, x->shape, x->ndim, &gi[0]);
    else of_tensor_retain(*dx), gi[0] = *dx;
  }
  for (int32_t k = 1; k <= 2 && st == OF_OK; k++) {
    if (!n->needs[k]) continue;
    of_tensor *src = k == 1 ? *dw : *db;
    const of_meta *m = &n->in_meta[k];
    of_tensor *h = NULL;
    st = of_dense(src, m->dtype, &h);
    if (st == OF_OK) st = of_reshape(h, m->shape, m->ndim, &gi[k]);
    of_tensor_release(h);
  }
done:
  release_all(sv, 4);
  release_all(tmp, 8);
  return st;
}

/* eval mode's statistics: mu = running_mean, is = 1 / sqrt(running_var + eps) */
static void eval_stats(of_tensor *running_mean, of_tensor *running_var, int64_t C, double eps,
                       double *mu, double *is) {
  get_all(running_mean, C, 0.0, mu);
  get_all(running_var, C, 0.0, is);
  for (int64_t c = 0; c < C; c++) is[c] = 1.0 / sqrt(is[c] + eps);
}
/* y = x * a + b per channel: a = weight * is, b = bias - mu * a (in double) */
static void affine_coeffs(of_tensor *weight, of_tensor *bias, int64_t C, const double *mu,
                          const double *is, double *a, double *b) {
  get_all(weight, C, 1.0, a);
  get_all(bias, C, 0.0, b);
  for (int64_t c = 0; c < C; c++) {
    a[c] *= is[c];
    b[c] -= mu[c] * a[c];
  }
}

/* batch_norm's inputs: x [N, C, *], the per-channel tensors of C elements;
 * the running statistics required when need_stats (eval); *d x's N, C, S */
static of_status bn_check(const char *op, of_tensor *x, of_tensor *running_mean,
                          of_tensor *running_var, of_tensor *weight, of_tensor *bias,
                          bool need_stats, nc_shape *d) {
  OF_CHECK(check_input(op, x, 2));
  of_meta xm = meta_of_tensor(x);
  *d = nc_of(&xm);
  OF_CHECK(check_stat(op, "running_mean", running_mean, d->C, x));
  OF_CHECK(check_stat(op, "running_var", running_var, d->C, x));
  OF_CHECK(check_param(op, "weight", weight, d->C, x));
  OF_CHECK(check_param(op, "bias", bias, d->C, x));
  if (need_stats && (!running_mean || !running_var))
    return of_fail(OF_ERR_ARG, "%s: running_mean and running_var are needed when not "
                   "training (input %s, %s)", op, OF_SHAPE_STR(x), OF_DT(x));
  return OF_OK;
}

static of_status batch_norm_body(of_tensor *x, of_tensor *running_mean, of_tensor *running_var,
                             of_tensor *weight, of_tensor *bias, int32_t training, double momentum,
                             double eps, of_tensor **out) {
  const char *op = "batch_norm";
  of_device dev;
  OF_CHECK(of_common_device(op, (of_tensor *[]){x, running_mean, running_var, weight, bias}, 5,
                            &dev));
  nc_shape d;
  OF_CHECK(bn_check(op, x, running_mean, running_var, weight, bias, !training, &d));
  int64_t M = d.N * d.S, NC = d.N * d.C;
  if (training && M <= 1)
    return of_fail(OF_ERR_SHAPE, "%s: expected more than 1 value per channel when training, "
                   "got input %s (%s)", op, OF_SHAPE_STR(x), OF_DT(x));
  if (dev != OF_CPU)
    return bn_device(dev, x, running_mean, running_var, weight, bias, training, momentum, eps,
                     out);
  of_tensor *ins[3] = {x, weight, bias};
  /* eval on a dense bfloat16 input with no grad to record: one pass,
   * bfloat16 in and out (ch_affine_bf16) */
  bool bf_direct = !training && x->dtype == OF_BFLOAT16 && of_tensor_is_contiguous(x) &&
                   !of_grad_needed(ins, 3);
  of_dtype cd = bf_direct ? OF_BFLOAT16 : of_compute_dtype(x->dtype);
  of_tensor *xc = NULL, *mean = NULL, *invstd = NULL, *y = NULL;
  double *buf = NULL;
  /* a channels-last input stays so: [N * S, C] rows, result channels-last */
  bool cl = !bf_direct && of_prefers_channels_last(x);
  int64_t R = d.N * d.S, nparts = cl ? (R + CL_ROWS - 1) / CL_ROWS * d.C : NC;
  of_status st = of_dense_format(x, cl, cd, &xc);
  if (st == OF_OK) st = new_doubles(d.C, &mean);
  if (st == OF_OK) st = new_doubles(d.C, &invstd);
  if (st == OF_OK)
    st = cl ? of_tensor_new_channels_last(x->shape, x->ndim, cd, OF_CPU, &y)
            : of_tensor_new(x->shape, x->ndim, cd, OF_CPU, &y);
  if (st == OF_OK && !(buf = malloc(sizeof(double) * (size_t)(nparts + 3 * d.C + 1))))
    st = of_fail(OF_ERR_OOM, "%s: out of memory", op);
  if (st != OF_OK) goto done;
  double *part = buf, *var = buf + nparts, *a = var + d.C, *b = a + d.C;
  double *mu = of_tensor_data(mean), *is = of_tensor_data(invstd);
  const void *xp = of_tensor_data(xc);
  if (training) {
    for (int32_t pass = 0; pass < 2; pass++) {
      if (cl && cd == OF_FLOAT64) cl_sums_double(xp, R, d.C, pass ? mu : NULL, part);
      else if (cl) cl_sums_float(xp, R, d.C, pass ? mu : NULL, part);
      else if (cd == OF_FLOAT64) ch_sums_double(xp, d.N, d.C, d.S, pass ? mu : NULL, part);
      else ch_sums_float(xp, d.N, d.C, d.S, pass ? mu : NULL, part);
      for (int64_t c = 0; c < d.C; c++) {
        double acc = 0;
        for (int64_t q = c; q < nparts; q += d.C) acc += part[q];
        (pass ? var : mu)[c] = acc / (double)M;
      }
    }
    for (int64_t c = 0; c < d.C; c++) is[c] = 1.0 / sqrt(var[c] + eps);
    update_running(running_mean, mu, d.C, momentum);
    for (int64_t c = 0; c < d.C; c++) var[c] *= (double)M / (double)(M - 1);   /* unbiased */
    update_running(running_var, var, d.C, momentum);
  } else {
    eval_stats(running_mean, running_var, d.C, eps, mu, is);
  }
  affine_coeffs(weight, bias, d.C, mu, is, a, b);
  if (cl && cd == OF_FLOAT64) cl_affine_double(xp, of_tensor_data(y), R, d.C, a, b);
  else if (cl) cl_affine_float(xp, of_tensor_data(y), R, d.C, a, b);
  else if (cd == OF_FLOAT64) ch_affine_double(xp, of_tensor_data(y), d.N, d.C, d.S, a, b, NULL);
  else if (cd == OF_BFLOAT16) ch_affine_bf16(xp, of_tensor_data(y), d.N, d.C, d.S, a, b);
  else ch_affine_float(xp, of_tensor_data(y), d.N, d.C, d.S, a, b, NULL);
  st = of_finish_dtype(y, x->dtype, out);
  y = NULL;
  if (st == OF_OK && of_grad_needed(ins, 3)) {
    of_node *n;
    st = of_record(&bn_grad, ins, 3, out, 1, &n);
    if (st != OF_OK) {
      of_tensor_release(*out);
      *out = NULL;
    } else {
      keep_norm(n, OPK_BATCH_NORM, training != 0, momentum, eps, 0);
      of_node_save(n, 0, x);
      of_node_save(n, 1, weight);
      of_node_save(n, 2, mean);
      of_node_save(n, 3, invstd);
    }
  }
done:
  free(buf);
  of_tensor *rel[4] = {xc, mean, invstd, y};
  release_all(rel, 4);
  return st;
}

/* ------------------------------------------------------------ layer/group/instance norm */

enum { K_LAYER = 0, K_GROUP = 1, K_INSTANCE = 2 };

typedef struct {
  int64_t R, M, G, Cg, S;
} rows_shape;

static of_status rows_backward(of_node *n, of_tensor **g, of_tensor **gi);
static const of_grad_def rows_grads[3] = {{"LayerNormBackward", rows_backward},
                                          {"GroupNormBackward", rows_backward},
                                          {"InstanceNormBackward", rows_backward}};

/* the op kinds of K_LAYER, K_GROUP, K_INSTANCE */
static const int32_t rows_op[3] = {OPK_LAYER_NORM, OPK_GROUP_NORM, OPK_INSTANCE_NORM};

/* The rows of a node's input, as the body laid them out (layer_norm_body,
 * group_shape): from the input's shape and the kept record. */
static rows_shape rows_of(const of_node *n) {
  const a_norm *a = OF_NODE_ATTRS(a_norm, n);
  const of_meta *m = &n->in_meta[0];
  rows_shape r = {0};
  if (n->attr_op == OPK_LAYER_NORM) {
    int32_t k = (int32_t)a->groups;
    r.M = of_shape_numel(m->shape + (m->ndim - k), k);
    r.G = 1;
    r.Cg = r.M;
    r.S = 1;
  } else {   /* group norm; instance norm: a group per channel */
    int64_t C = m->shape[1], S = 1;
    for (int32_t d = 2; d < m->ndim; d++) S *= m->shape[d];
    r.G = n->attr_op == OPK_GROUP_NORM ? a->groups : C > 0 ? C : 1;
    r.Cg = C / r.G;
    r.S = S;
    r.M = r.Cg * S;
  }
  int64_t numel = of_shape_numel(m->shape, m->ndim);
  r.R = r.M ? numel / r.M : 0;
  return r;
}

static of_status rows_composite(of_node *n, of_tensor *g, of_tensor *x, of_tensor *w,
                                of_tensor **gi) {
  const a_norm *a = OF_NODE_ATTRS(a_norm, n);
  composite_t c = {.eps = a->eps};
  of_tensor *wb = NULL;
  int32_t nd = x->ndim;
  if (n->attr_op == OPK_LAYER_NORM) {
    int32_t k = (int32_t)a->groups;
    c.vnd = nd;
    memcpy(c.vshape, x->shape, sizeof c.vshape);
    for (int32_t d = nd - k; d < nd; d++) c.rdims[c.nr++] = d;
    for (int32_t d = 0; d < nd - k; d++) c.pdims[c.np++] = d;
    c.wb = w;
  } else {
    rows_shape r = rows_of(n);
    c.vnd = 3;
    c.vshape[0] = x->shape[0];
    c.vshape[1] = r.G;
    c.vshape[2] = r.M;
    c.rdims[c.nr++] = 2;
    for (int32_t d = 0; d < nd; d++)
      if (d != 1) c.pdims[c.np++] = d;
    if (w) OF_CHECK(channel_view(w, nd, w->dtype, &wb));
    c.wb = wb;
  }
  of_status st = norm_composite(n, &c, g, x, gi);
  of_tensor_release(wb);
  return st;
}

static of_status rows_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  /* saved: 0 x, 1 weight (if any), 2 mean [R], 3 rstd [R] (double) */
  of_tensor *sv[4] = {NULL, NULL, NULL, NULL};
  of_status st = OF_OK;
  for (int32_t k = 0; k < 4 && st == OF_OK; k++)
    if (k != 1 || saved_weight(n)) st = of_node_saved(n, k, &sv[k]);
  if (st != OF_OK) {
    release_all(sv, 4);
    return st;
  }
  of_tensor *x = sv[0], *w = sv[1];
  if (wants_composite(g[0], x, w)) {
    st = rows_composite(n, g[0], x, w, gi);
    release_all(sv, 4);
    return st;
  }
  rows_shape r = rows_of(n);
  /* layer_norm on float32/bfloat16 rows: the fused row kernels (rowk.c),
   * reading the data in its own dtype and writing all grads in one pass */
  bool fast = n->attr_op == OPK_LAYER_NORM && of_rowk_dtype(x->dtype) && r.M > 0;
  of_dtype cd = fast ? x->dtype : of_compute_dtype(x->dtype);
  of_tensor *xc = NULL, *gc = NULL, *wc = NULL, *gx = NULL;
  double *buf = NULL;
  int64_t P = r.G * r.Cg;
  st = of_dense(x, cd, &xc);
  if (st == OF_OK) st = of_dense(g[0], cd, &gc);
  if (st == OF_OK) st = of_dense(w, fast ? OF_FLOAT32 : cd, &wc);
  const double *mu = of_tensor_data(sv[2]), *rs = of_tensor_data(sv[3]);
  if (st == OF_OK && fast) {
    if (n->needs[0]) st = of_tensor_new(x->shape, x->ndim, cd, OF_CPU, &gx);
    if (st == OF_OK && (n->needs[1] || n->needs[2]) &&
        !(buf = malloc(sizeof(double) * (size_t)(2 * P + 1))))
      st = of_fail(OF_ERR_OOM, "%s: out of memory", n->def->name);
    double *gw = buf && n->needs[1] ? buf : NULL, *gb = buf && n->needs[2] ? buf + P : NULL;
    if (st == OF_OK)
      st = of_rowk_layer_norm_backward(cd, of_tensor_data(xc), of_tensor_data(gc),
                                       gx ? of_tensor_data(gx) : NULL, r.R, r.M,
                                       wc ? of_tensor_data(wc) : NULL, mu, rs, gw, gb);
    if (st == OF_OK && gx) {
      st = of_finish_dtype(gx, n->in_meta[0].dtype, &gi[0]);
      gx = NULL;
    }
    if (st == OF_OK && gw) st = grad_from_doubles(n, 1, gw, &gi[1]);
    if (st == OF_OK && gb) st = grad_from_doubles(n, 2, gb, &gi[2]);
    free(buf);
    of_tensor *rel[4] = {xc, gc, wc, gx};
    release_all(rel, 4);
    release_all(sv, 4);
    return st;
  }
  if (st == OF_OK && n->needs[0]) {
    st = of_tensor_new(x->shape, x->ndim, cd, OF_CPU, &gx);
    if (st == OF_OK) {
      if (cd == OF_FLOAT64)
        row_grad_input_double(of_tensor_data(xc), of_tensor_data(gc), of_tensor_data(gx), r.R,
                              r.M, r.G, r.Cg, r.S, mu, rs, wc ? of_tensor_data(wc) : NULL);
      else
        row_grad_input_float(of_tensor_data(xc), of_tensor_data(gc), of_tensor_data(gx), r.R,
                             r.M, r.G, r.Cg, r.S, mu, rs, wc ? of_tensor_data(wc) : NULL);
      st = of_finish_dtype(gx, n->in_meta[0].dtype, &gi[0]);
    }
  }
  if (st == OF_OK && (n->needs[1] || n->needs[2])) {
    if (!(buf = malloc(sizeof(double) * (size_t)(2 * P + 1))))
      st = of_fail(OF_ERR_OOM, "%s: out of memory", n->def->name);
  }
  if (st == OF_OK && buf) {
    double *gw = n->needs[1] ? buf : NULL, *gb = n->needs[2] ? buf + P : NULL;
    if (cd == OF_FLOAT64)
      row_grad_params_double(of_tensor_data(xc), of_tensor_data(gc), r.R, r.M, r.G, r.Cg, r.S,
                             mu, rs, gw, gb);
    else
      row_grad_params_float(of_tensor_data(xc), of_tensor_data(gc), r.R, r.M, r.G, r.Cg, r.S,
                            mu, rs, gw, gb);
    if (gw) st = grad_from_doubles(n, 1, gw, &gi[1]);
    if (st == OF_OK && gb) st = grad_from_doubles(n, 2, gb, &gi[2]);
  }
  free(buf);
  of_tensor *rel[3] = {xc, gc, wc};
  release_all(rel, 3);
  release_all(sv, 4);
  return st;
}

/* Normalises rows of x [R, M] (see the top of the file). stats, when
 * given, receives the mean [R] then the biased variance [R] of each row.
 * k: layer norm's normalized dims; momentum: instance norm's (for the
 * node's record). */
static of_status rows_norm(const char *op, int32_t kind, of_tensor *x, rows_shape r,
                           int32_t k, of_tensor *w, of_tensor *b, double eps, double momentum,
                           double *stats, of_tensor **out) {
  /* layer_norm on float32/bfloat16 rows: the one-pass row kernels (rowk.c),
   * on the data in its own dtype (float32 parameters) */
  bool fast = kind == K_LAYER && of_rowk_dtype(x->dtype) && !stats;
  of_dtype cd = fast ? x->dtype : of_compute_dtype(x->dtype);
  of_tensor *xc = NULL, *wc = NULL, *bc = NULL, *mean = NULL, *rstd = NULL, *y = NULL;
  double *var = NULL;
  of_status st = of_dense(x, cd, &xc);
  if (st == OF_OK) st = of_dense(w, fast ? OF_FLOAT32 : cd, &wc);
  if (st == OF_OK) st = of_dense(b, fast ? OF_FLOAT32 : cd, &bc);
  if (st == OF_OK) st = new_doubles(r.R, &mean);
  if (st == OF_OK) st = new_doubles(r.R, &rstd);
  if (st == OF_OK) st = of_tensor_new(x->shape, x->ndim, cd, OF_CPU, &y);
  if (st == OF_OK && !(var = malloc(sizeof(double) * (size_t)(r.R + 1))))
    st = of_fail(OF_ERR_OOM, "%s: out of memory", op);
  if (st != OF_OK) goto done;
  double *mu = of_tensor_data(mean), *rs = of_tensor_data(rstd);
  if (fast) {
    of_rowk_layer_norm(cd, of_tensor_data(xc), of_tensor_data(y), r.R, r.M,
                       wc ? of_tensor_data(wc) : NULL, bc ? of_tensor_data(bc) : NULL, eps, mu,
                       rs);
  } else if (r.M > 0) {
    if (cd == OF_FLOAT64) row_stats_double(of_tensor_data(xc), r.R, r.M, mu, var);
    else row_stats_float(of_tensor_data(xc), r.R, r.M, mu, var);
  }
  for (int64_t i = 0; !fast && i < r.R; i++) rs[i] = 1.0 / sqrt(var[i] + eps);
  if (stats) {
    memcpy(stats, mu, sizeof(double) * (size_t)r.R);
    memcpy(stats + r.R, var, sizeof(double) * (size_t)r.R);
  }
  if (!fast && r.M > 0) {
    if (cd == OF_FLOAT64)
      row_apply_double(of_tensor_data(xc), of_tensor_data(y), r.R, r.M, r.G, r.Cg, r.S, mu, rs,
                       wc ? of_tensor_data(wc) : NULL, bc ? of_tensor_data(bc) : NULL);
    else
      row_apply_float(of_tensor_data(xc), of_tensor_data(y), r.R, r.M, r.G, r.Cg, r.S, mu, rs,
                      wc ? of_tensor_data(wc) : NULL, bc ? of_tensor_data(bc) : NULL);
  }
  st = of_finish_dtype(y, x->dtype, out);
  y = NULL;
  of_tensor *ins[3] = {x, w, b};
  if (st == OF_OK && of_grad_needed(ins, 3)) {
    of_node *n;
    st = of_record(&rows_grads[kind], ins, 3, out, 1, &n);
    if (st != OF_OK) {
      of_tensor_release(*out);
      *out = NULL;
    } else {
      /* instance norm comes here with use_input_stats */
      keep_norm(n, rows_op[kind], kind == K_INSTANCE, momentum, eps,
                kind == K_LAYER ? k : kind == K_GROUP ? r.G : 0);
      of_node_save(n, 0, x);
      of_node_save(n, 1, w);
      of_node_save(n, 2, mean);
      of_node_save(n, 3, rstd);
    }
  }
done:
  free(var);
  of_tensor *rel[6] = {xc, wc, bc, mean, rstd, y};
  release_all(rel, 6);
  return st;
}

/* layer_norm's and rms_norm's normalized dims: k of them, 1 <= k <= ndim */
static of_status check_normalized_dims(const char *op, of_tensor *x, int32_t k) {
  if (k < 1 || k > x->ndim)
    return of_fail(OF_ERR_ARG, "%s: normalized_shape has %d dims; expected 1..%d for the input "
                   "%s (%s)", op, (int)k, (int)x->ndim, OF_SHAPE_STR(x), OF_DT(x));
  return OF_OK;
}

/* A weight or bias of layer_norm / rms_norm (or NULL): floating, shaped as
 * the last k dims of x. */
static of_status check_normalized_param(const char *op, const char *what, of_tensor *p,
                                        of_tensor *x, int32_t k) {
  if (!p) return OF_OK;
  const int64_t *tail = x->shape + (x->ndim - k);
  bool same = p->ndim == k;
  for (int32_t d = 0; same && d < k; d++) same = p->shape[d] == tail[d];
  char b1[96], b2[96];
  if (!same)
    return of_fail(OF_ERR_SHAPE, "%s: %s of shape %s should have the normalized shape %s "
                   "(the last %d dims of the input %s, %s)", op, what, OF_SHAPE_STR(p),
                   of_shape_str(tail, k, b1, 96), (int)k, of_shape_str(x->shape, x->ndim,
                   b2, 96), OF_DT(x));
  if (!of_dtype_is_floating(p->dtype))
    return of_fail(OF_ERR_DTYPE, "%s: %s must be floating point, got %s (shape %s)", op,
                   what, OF_DT(p), OF_SHAPE_STR(p));
  return OF_OK;
}

static of_status layer_norm_body(of_tensor *x, int32_t normalized_ndim, of_tensor *weight,
                             of_tensor *bias, double eps, of_tensor **out) {
  const char *op = "layer_norm";
  OF_CHECK(check_input(op, x, 1));
  int32_t k = normalized_ndim;
  OF_CHECK(check_normalized_dims(op, x, k));
  const int64_t *tail = x->shape + (x->ndim - k);
  OF_CHECK(check_normalized_param(op, "weight", weight, x, k));
  OF_CHECK(check_normalized_param(op, "bias", bias, x, k));
  of_device dev;
  OF_CHECK(of_common_device(op, (of_tensor *[]){x, weight, bias}, 3, &dev));
  if (dev != OF_CPU) return of_device_layer_norm(x, k, weight, bias, eps, out);
  rows_shape r = {0, of_shape_numel(tail, k), 1, 0, 1};
  r.Cg = r.M;
  r.R = r.M ? x->numel / r.M : 0;
  return rows_norm(op, K_LAYER, x, r, k, weight, bias, eps, 0, NULL, out);
}

/* ------------------------------------------------------------ rms_norm
 * y = x * rstd * w over the last k dims, rstd = 1 / sqrt(mean(x^2) + eps)
 * (PyTorch 2.4's F.rms_norm; eps is given: the Lua side picks PyTorch's
 * default). float32/bfloat16/float16 run the row kernels of rowk.c in
 * float32 (float16 through a float32 copy), float64 the loops below.
 * Saved: 0 x, 1 weight (if any), 2 rstd [R] (double); the node keeps an
 * a_norm (groups: k). */
static of_status rms_backward(of_node *n, of_tensor **g, of_tensor **gi);
static const of_grad_def rms_grad = {"RmsNormBackward", rms_backward};

static of_dtype rms_dtype(of_dtype dt) {
  return dt == OF_FLOAT64 ? OF_FLOAT64 : of_rowk_dtype(dt) ? dt : OF_FLOAT32;
}

static void rms_fwd_double(const double *x, double *y, int64_t R, int64_t M, const double *w,
                           double eps, double *rstd) {
  int32_t nt = nthreads(R * M);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t r = 0; r < R; r++) {
    const double *px = x + r * M;
    double *py = y + r * M, ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < M; j++) ss += px[j] * px[j];
    double rs = 1.0 / sqrt(ss / (double)M + eps);
    rstd[r] = rs;
    for (int64_t j = 0; j < M; j++) py[j] = px[j] * rs * (w ? w[j] : 1.0);
  }
}

/* gx (or NULL) = rs * gw - x * rs^3 * mean(gw * x), gw = g * w;
 * gwt[j] (or NULL) = sum_r g * x * rs, over column tiles (rows in order) */
static void rms_bwd_double(const double *x, const double *g, double *gx, int64_t R, int64_t M,
                           const double *w, const double *rstd, double *gwt) {
  int32_t nt = nthreads(R * M);
  if (gx) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < R; r++) {
      const double *px = x + r * M, *pg = g + r * M;
      double *po = gx + r * M, rs = rstd[r], s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < M; j++) s += pg[j] * (w ? w[j] : 1.0) * px[j];
      double c = rs * rs * rs * s / (double)M;
      for (int64_t j = 0; j < M; j++) po[j] = rs * pg[j] * (w ? w[j] : 1.0) - px[j] * c;
    }
  }
  if (!gwt) return;
  enum { JT = 64 };
  int64_t ntile = (M + JT - 1) / JT;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t t = 0; t < ntile; t++) {
    int64_t j0 = t * JT, j1 = j0 + JT < M ? j0 + JT : M;
    for (int64_t j = j0; j < j1; j++) gwt[j] = 0;
    for (int64_t r = 0; r < R; r++)
      for (int64_t j = j0; j < j1; j++) gwt[j] += g[r * M + j] * x[r * M + j] * rstd[r];
  }
}

/* under create_graph: the closed form from public ops (recorded) */
static of_status rms_composite(of_node *n, of_tensor *g, of_tensor *x, of_tensor *w,
                               of_tensor **gi) {
  const a_norm *a = OF_NODE_ATTRS(a_norm, n);
  int32_t k = (int32_t)a->groups, nd = x->ndim, rd[OF_MAX_DIMS], pd[OF_MAX_DIMS], np = 0;
  for (int32_t d = 0; d < k; d++) rd[d] = nd - k + d;
  for (int32_t d = 0; d < nd - k; d++) pd[np++] = d;
  of_scope s = {0};
  of_tensor *ms = s_red(&s, OF_RED_MEAN, MUL(x, x), rd, k, 1);
  of_tensor *rs = of_s_unary(&s, OF_RSQRT, of_s_bins(&s, OF_ADD, ms, a->eps));
  of_tensor *xh = MUL(x, rs);
  if (n->needs[0]) {
    of_tensor *gw = w ? MUL(g, w) : g;
    of_tensor *m2 = s_red(&s, OF_RED_MEAN, MUL(gw, xh), rd, k, 1);
    s_give(&s, MUL(rs, SUB(gw, MUL(xh, m2))), &gi[0]);
  }
  if (n->needs[1] && w) {
    of_tensor *t = s_red(&s, OF_RED_SUM, MUL(g, xh), pd, np, 0);
    t = s_reshape(&s, t, n->in_meta[1].shape, n->in_meta[1].ndim);
    s_give(&s, s_cast(&s, t, n->in_meta[1].dtype), &gi[1]);
  }
  return of_s_end(&s, NULL, &gi[0]);
}

static of_status rms_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_tensor *sv[3] = {NULL, NULL, NULL}, *xc = NULL, *gc = NULL, *wc = NULL, *gx = NULL;
  of_status st = OF_OK;
  for (int32_t k = 0; k < 3 && st == OF_OK; k++)
    if (k != 1 || saved_weight(n)) st = of_node_saved(n, k, &sv[k]);
  of_tensor *x = sv[0], *w = sv[1];
  double *gw = NULL;
  if (st != OF_OK) goto done;
  if (wants_composite(g[0], x, w)) {
    st = rms_composite(n, g[0], x, w, gi);
    goto done;
  }
  int32_t k = (int32_t)OF_NODE_ATTRS(a_norm, n)->groups;
  int64_t M = of_shape_numel(x->shape + (x->ndim - k), k), R = M ? x->numel / M : 0;
  of_dtype cd = rms_dtype(x->dtype);
  bool f64 = cd == OF_FLOAT64;
  st = of_dense(x, cd, &xc);
  if (st == OF_OK) st = of_dense(g[0], cd, &gc);
  if (st == OF_OK) st = of_dense(w, f64 ? OF_FLOAT64 : OF_FLOAT32, &wc);
  if (st == OF_OK && n->needs[0]) st = of_tensor_new(x->shape, x->ndim, cd, OF_CPU, &gx);
  if (st == OF_OK && n->needs[1] && w && !(gw = malloc(sizeof(double) * (size_t)(M + 1))))
    st = of_fail(OF_ERR_OOM, "rms_norm backward: out of memory");
  if (st != OF_OK) goto done;
  const double *rs = of_tensor_data(sv[2]);
  void *pgx = gx ? of_tensor_data(gx) : NULL;
  const void *pw = wc ? of_tensor_data(wc) : NULL;
  if (f64)
    rms_bwd_double(of_tensor_data(xc), of_tensor_data(gc), pgx, R, M, pw, rs, gw);
  else
    st = of_rowk_layer_norm_backward(cd, of_tensor_data(xc), of_tensor_data(gc), pgx, R, M, pw,
                                     NULL, rs, gw, NULL);
  if (st == OF_OK && gx) {
    st = of_finish_dtype(gx, n->in_meta[0].dtype, &gi[0]);
    gx = NULL;
  }
  if (st == OF_OK && gw) st = grad_from_doubles(n, 1, gw, &gi[1]);
done:
  free(gw);
  of_tensor *rel[4] = {xc, gc, wc, gx};
  release_all(rel, 4);
  release_all(sv, 3);
  return st;
}

static of_status rms_norm_body(of_tensor *x, int32_t normalized_ndim, of_tensor *weight,
                               double eps, of_tensor **out) {
  const char *op = "rms_norm";
  OF_CHECK(check_input(op, x, 1));
  int32_t k = normalized_ndim;
  OF_CHECK(check_normalized_dims(op, x, k));
  OF_CHECK(check_normalized_param(op, "weight", weight, x, k));
  if (!(eps >= 0))
    return of_fail(OF_ERR_ARG, "rms_norm: eps must be >= 0, got %g (input %s, %s)", eps,
                   OF_SHAPE_STR(x), OF_DT(x));
  of_device dev;
  OF_CHECK(of_common_device(op, (of_tensor *[]){x, weight}, 2, &dev));
  if (dev != OF_CPU) return of_device_rms_norm(x, k, weight, eps, out);
  int64_t M = of_shape_numel(x->shape + (x->ndim - k), k), R = M ? x->numel / M : 0;
  of_dtype cd = rms_dtype(x->dtype);
  bool f64 = cd == OF_FLOAT64;
  of_tensor *xc = NULL, *wc = NULL, *rstd = NULL, *y = NULL;
  of_status st = of_dense(x, cd, &xc);
  if (st == OF_OK) st = of_dense(weight, f64 ? OF_FLOAT64 : OF_FLOAT32, &wc);
  if (st == OF_OK) st = new_doubles(R, &rstd);
  if (st == OF_OK) st = of_tensor_new(x->shape, x->ndim, cd, OF_CPU, &y);
  if (st != OF_OK) goto done;
  const void *pw = wc ? of_tensor_data(wc) : NULL;
  if (f64)
    rms_fwd_double(of_tensor_data(xc), of_tensor_data(y), R, M, pw, eps, of_tensor_data(rstd));
  else
    of_rowk_rms_norm(cd, of_tensor_data(xc), of_tensor_data(y), R, M, pw, eps,
                     of_tensor_data(rstd));
  st = of_finish_dtype(y, x->dtype, out);
  y = NULL;
  of_tensor *ins[2] = {x, weight};
  if (st == OF_OK && of_grad_needed(ins, 2)) {
    of_node *n;
    st = of_record(&rms_grad, ins, 2, out, 1, &n);
    if (st != OF_OK) {
      of_tensor_release(*out);
      *out = NULL;
    } else {
      keep_norm(n, OPK_RMS_NORM, 0, 0, eps, k);
      of_node_save(n, 0, x);
      of_node_save(n, 1, weight);
      of_node_save(n, 2, rstd);
    }
  }
done:;
  of_tensor *rel[4] = {xc, wc, rstd, y};
  release_all(rel, 4);
  return st;
}

static of_status group_shape(const char *op, of_tensor *x, int64_t groups, rows_shape *r) {
  int64_t N = x->shape[0], C = x->shape[1], S = 1;
  for (int32_t d = 2; d < x->ndim; d++) S *= x->shape[d];
  if (groups < 1 || C % groups != 0)
    return of_fail(OF_ERR_ARG, "%s: expected the number of channels %lld to be divisible by "
                   "num_groups %lld (input %s, %s)", op, (long long)C, (long long)groups,
                   OF_SHAPE_STR(x), OF_DT(x));
  r->G = groups;
  r->Cg = C / groups;
  r->S = S;
  r->M = r->Cg * S;
  r->R = N * groups;
  return OF_OK;
}

/* group norm on a device: the fused layer norm over [N, G, C/G * S], then
 * the per-channel affine, all public ops (so autograd follows them) */
static of_status group_norm_device(of_tensor *x, int64_t G, of_tensor *w, of_tensor *b,
                                   double eps, of_tensor **out) {
  of_scope s = {0};
  int64_t N = x->shape[0], C = x->shape[1];
  int64_t vshape[3] = {N, G, x->numel / (N * C > 0 ? N * C : 1) * (C / G)};
  int64_t pshape[OF_MAX_DIMS];
  for (int32_t d = 0; d < x->ndim; d++) pshape[d] = d == 1 ? C : 1;
  of_tensor *y = NULL, *xv = s_reshape(&s, x, vshape, 3);
  if (s.st == OF_OK) {
    of_tensor *t = NULL;
    of_status st = of_layer_norm(xv, 1, NULL, NULL, eps, &t);
    y = of_s_keep(&s, st, t);
  }
  y = s_reshape(&s, y, x->shape, x->ndim);
  if (w) y = MUL(y, s_reshape(&s, w, pshape, x->ndim));
  if (b) y = of_s_bin(&s, OF_ADD, y, s_reshape(&s, b, pshape, x->ndim));
  return of_s_end(&s, y, out);
}

static of_status group_norm_body(of_tensor *x, int64_t groups, of_tensor *weight, of_tensor *bias,
                             double eps, of_tensor **out) {
  const char *op = "group_norm";
  of_device dev;
  OF_CHECK(of_common_device(op, (of_tensor *[]){x, weight, bias}, 3, &dev));
  OF_CHECK(check_input(op, x, 2));
  rows_shape r;
  OF_CHECK(group_shape(op, x, groups, &r));
  OF_CHECK(check_param(op, "weight", weight, x->shape[1], x));
  OF_CHECK(check_param(op, "bias", bias, x->shape[1], x));
  if (dev != OF_CPU) return group_norm_device(x, groups, weight, bias, eps, out);
  return rows_norm(op, K_GROUP, x, r, 0, weight, bias, eps, 0, NULL, out);
}

static of_status instance_norm_body(of_tensor *x, of_tensor *running_mean, of_tensor *running_var,
                                of_tensor *weight, of_tensor *bias, int32_t use_input_stats,
                                double momentum, double eps, of_tensor **out) {
  const char *op = "instance_norm";
  of_device dev;
  OF_CHECK(of_common_device(op, (of_tensor *[]){x, running_mean, running_var, weight, bias}, 5,
                            &dev));
  OF_CHECK(check_input(op, x, 2));
  int64_t N = x->shape[0], C = x->shape[1];
  OF_CHECK(check_stat(op, "running_mean", running_mean, C, x));
  OF_CHECK(check_stat(op, "running_var", running_var, C, x));
  OF_CHECK(check_param(op, "weight", weight, C, x));
  OF_CHECK(check_param(op, "bias", bias, C, x));
  if ((running_mean == NULL) != (running_var == NULL))
    return of_fail(OF_ERR_ARG, "%s: give both running_mean and running_var, or neither "
                   "(input %s, %s)", op, OF_SHAPE_STR(x), OF_DT(x));
  if (!use_input_stats) {
    if (!running_mean)
      return of_fail(OF_ERR_ARG, "%s: running_mean and running_var are needed when "
                     "use_input_stats is false (input %s, %s)", op, OF_SHAPE_STR(x), OF_DT(x));
    return of_batch_norm(x, running_mean, running_var, weight, bias, 0, momentum, eps, out);
  }
  rows_shape r;
  OF_CHECK(group_shape(op, x, C > 0 ? C : 1, &r));
  if (r.S <= 1)
    return of_fail(OF_ERR_SHAPE, "%s: expected more than 1 spatial element when training, "
                   "got input %s (%s)", op, OF_SHAPE_STR(x), OF_DT(x));
  if (dev != OF_CPU) {
    OF_CHECK(group_norm_device(x, C, weight, bias, eps, out));
    if (!running_mean) return OF_OK;
    /* the per-instance statistics averaged over the batch (unbiased var) */
    int32_t grad_was = of_is_grad_enabled();   /* buffers: no history */
    of_set_grad_enabled(0);
    of_scope s = {0};
    int64_t vshape[3] = {N, C, r.S};
    int32_t sp = 2, b0 = 0;
    of_tensor *xv = s_reshape(&s, x, vshape, 3), *var = NULL;
    of_tensor *mu = s_red(&s, OF_RED_MEAN, s_red(&s, OF_RED_MEAN, xv, &sp, 1, 0), &b0, 1, 0);
    if (s.st == OF_OK) {
      of_tensor *t = NULL;
      of_status st = of_var(xv, &sp, 1, 1, 0, 0, &t);
      var = s_red(&s, OF_RED_MEAN, of_s_keep(&s, st, t), &b0, 1, 0);
    }
    of_tensor *stats[2] = {mu, var}, *run[2] = {running_mean, running_var};
    for (int32_t k = 0; k < 2 && s.st == OF_OK; k++) {
      of_tensor *old = of_s_bins(&s, OF_MUL, run[k], 1 - momentum);
      of_tensor *nw = of_s_bin(&s, OF_ADD, old, of_s_bins(&s, OF_MUL, stats[k], momentum));
      if (s.st == OF_OK) s.st = of_copy_data(run[k], nw);
    }
    of_status st = of_s_end(&s, NULL, NULL);
    of_set_grad_enabled(grad_was);
    if (st != OF_OK) {
      of_tensor_release(*out);
      *out = NULL;
    }
    return st;
  }
  double *stats = running_mean ? malloc(sizeof(double) * (size_t)(2 * r.R + 2 * C + 1)) : NULL;
  if (running_mean && !stats) return of_fail(OF_ERR_OOM, "%s: out of memory", op);
  of_status st = rows_norm(op, K_INSTANCE, x, r, 0, weight, bias, eps, momentum, stats, out);
  if (st == OF_OK && running_mean) {
    /* the per-instance statistics averaged over the batch (unbiased variance) */
    const double *mu = stats, *var = stats + r.R;
    double *mm = stats + 2 * r.R, *vv = mm + C;
    for (int64_t c = 0; c < C; c++) mm[c] = vv[c] = 0;
    for (int64_t q = 0; q < r.R; q++) {
      mm[q % C] += mu[q] / (double)N;
      vv[q % C] += var[q] * (double)r.S / (double)(r.S - 1) / (double)N;
    }
    update_running(running_mean, mm, C, momentum);
    update_running(running_var, vv, C, momentum);
  }
  free(stats);
  return st;
}

/* ---- entry points (dispatch), run functions and table rows ---- */
static of_status pack_norm(int32_t op, of_tensor *x, of_tensor *rm, of_tensor *rv, of_tensor *w,
                          of_tensor *b, int32_t flag, double momentum, double eps,
                          int64_t groups, of_tensor **out) {
  a_norm a;
  OF_ZERO(a);
  a.flag = flag;
  a.momentum = momentum;
  a.eps = eps;
  a.groups = groups;
  of_tensor *ins[5] = {x, rm, rv, w, b};
  return OF_RECORD(op, a, ins, 5, out, 1);
}
static int32_t mutates_norm(const void *p, int32_t nin, int32_t *idx) {
  const a_norm *a = p;
  (void)nin;
  if (!a->flag) return 0;   /* training / use_input_stats: running stats are updated */
  idx[0] = 1;
  idx[1] = 2;
  return 2;
}
/* ---- batch_norm_eval: eval batch_norm (+ a clamp) into a given tensor ----
 * For nn.Sequential's conv + eval BatchNorm2d (+ ReLU6) runs and flowvision's
 * blocks (lua/oneflow/nn/normalization.lua), which write it into the conv's
 * fresh output: no new tensor, and one pass where the norm and a clamp_ made
 * two. The numbers are batch_norm_body's eval ones (eval_stats,
 * affine_coeffs, ch_affine) and then of_clamp's. Other devices, dtypes,
 * layouts, an `into` sharing x's storage, and anything needing a gradient
 * run as of_batch_norm then of_clamp (and copy_ into `into`). */
static of_status bn_eval_composite(of_tensor *x, of_tensor *running_mean,
                                   of_tensor *running_var, of_tensor *weight, of_tensor *bias,
                                   double eps, const bn_clamp *k, of_tensor *into,
                                   of_tensor **out) {
  of_tensor *y = NULL, *t = NULL;
  of_status st = of_batch_norm(x, running_mean, running_var, weight, bias, 0, 0.0, eps, &y);
  if (st == OF_OK && k) {   /* y is new: clamped in place */
    st = of_clamp(y, k->lo, k->hi, k->lo_on, k->hi_on, y, &t);
    of_tensor_release(t);
  }
  if (st == OF_OK && into) st = of_copy_(into, y);
  if (st != OF_OK) {
    of_tensor_release(y);
    return st;
  }
  if (into) {
    of_tensor_release(y);
    of_tensor_retain(into);
    y = into;
  }
  *out = y;
  return OF_OK;
}

static of_status bn_eval_body(of_tensor *x, of_tensor *running_mean, of_tensor *running_var,
                              of_tensor *weight, of_tensor *bias, double eps, double lo,
                              double hi, int32_t has_lo, int32_t has_hi, of_tensor *into,
                              of_tensor **out) {
  const char *op = "batch_norm_eval";
  of_device dev;
  OF_CHECK(of_common_device(op, (of_tensor *[]){x, running_mean, running_var, weight, bias, into},
                            6, &dev));
  nc_shape d;
  OF_CHECK(bn_check(op, x, running_mean, running_var, weight, bias, true, &d));
  bn_clamp kc = {lo, hi, has_lo != 0, has_hi != 0};
  const bn_clamp *k = has_lo || has_hi ? &kc : NULL;
  of_tensor *ins[3] = {x, weight, bias};
  bool direct = dev == OF_CPU && (x->dtype == OF_FLOAT32 || x->dtype == OF_FLOAT64) &&
                !of_grad_needed(ins, 3) && !(into && of_grad_needed(&into, 1)) &&
                of_tensor_is_contiguous(x) &&
                (!into || into == x || (of_tensor_is_contiguous(into) && into->dtype == x->dtype &&
                                        into->storage != x->storage));   /* no partial overlap */
  if (!direct)
    return bn_eval_composite(x, running_mean, running_var, weight, bias, eps, k, into, out);
  double *buf = malloc(sizeof(double) * (size_t)(4 * d.C + 1));
  if (!buf) return of_fail(OF_ERR_OOM, "%s: out of memory", op);
  double *mu = buf, *is = mu + d.C, *a = is + d.C, *b = a + d.C;
  of_status st = of_prepare_out(op, into, x->shape, x->ndim, x->dtype, out);
  if (st == OF_OK) {
    eval_stats(running_mean, running_var, d.C, eps, mu, is);
    affine_coeffs(weight, bias, d.C, mu, is, a, b);
    if (x->dtype == OF_FLOAT32)
      ch_affine_float((const float *)of_ptr(x), (float *)of_ptr(*out), d.N, d.C, d.S, a, b, k);
    else
      ch_affine_double((const double *)of_ptr(x), (double *)of_ptr(*out), d.N, d.C, d.S, a, b, k);
    if (into) of_bump_version(*out);
  }
  free(buf);
  return st;
}

static int32_t mutates_none(const void *p, int32_t nin, int32_t *idx) {
  (void)p; (void)nin; (void)idx;
  return 0;
}
of_status of_batch_norm(of_tensor *x, of_tensor *running_mean, of_tensor *running_var,
                        of_tensor *weight, of_tensor *bias, int32_t training, double momentum,
                        double eps, of_tensor **out) {
  AMP(OF_AMP_F32, of_batch_norm(A_[0], running_mean, running_var, A_[1], A_[2], training, momentum,
                                eps, out),
      x, weight, bias);
  OF_DISPATCH(batch_norm_body(x, running_mean, running_var, weight, bias, training, momentum,
                               eps, out),
            pack_norm(OPK_BATCH_NORM, x, running_mean, running_var, weight, bias, training,
                     momentum, eps, 0, out));
}
of_status of_instance_norm(of_tensor *x, of_tensor *running_mean, of_tensor *running_var,
                           of_tensor *weight, of_tensor *bias, int32_t use_input_stats,
                           double momentum, double eps, of_tensor **out) {
  AMP(OF_AMP_F32, of_instance_norm(A_[0], running_mean, running_var, A_[1], A_[2], use_input_stats,
                                   momentum, eps, out),
      x, weight, bias);
  OF_DISPATCH(instance_norm_body(x, running_mean, running_var, weight, bias, use_input_stats,
                                  momentum, eps, out),
            pack_norm(OPK_INSTANCE_NORM, x, running_mean, running_var, weight, bias,
                     use_input_stats, momentum, eps, 0, out));
}
of_status of_layer_norm(of_tensor *x, int32_t normalized_ndim, of_tensor *weight,
                        of_tensor *bias, double eps, of_tensor **out) {
  AMP(OF_AMP_F32, of_layer_norm(A_[0], normalized_ndim, A_[1], A_[2], eps, out), x, weight, bias);
  OF_DISPATCH(layer_norm_body(x, normalized_ndim, weight, bias, eps, out),
            pack_norm(OPK_LAYER_NORM, x, NULL, NULL, weight, bias, 0, 0, eps, normalized_ndim,
                     out));
}
of_status of_group_norm(of_tensor *x, int64_t groups, of_tensor *weight, of_tensor *bias,
                        double eps, of_tensor **out) {
  AMP(OF_AMP_F32, of_group_norm(A_[0], groups, A_[1], A_[2], eps, out), x, weight, bias);
  OF_DISPATCH(group_norm_body(x, groups, weight, bias, eps, out),
            pack_norm(OPK_GROUP_NORM, x, NULL, NULL, weight, bias, 0, 0, eps, groups, out));
}
of_status of_rms_norm(of_tensor *x, int32_t normalized_ndim, of_tensor *weight, double eps,
                      of_tensor **out) {
  AMP(OF_AMP_F32, of_rms_norm(A_[0], normalized_ndim, A_[1], eps, out), x, weight);
  OF_DISPATCH(rms_norm_body(x, normalized_ndim, weight, eps, out),
              pack_norm(OPK_RMS_NORM, x, NULL, NULL, weight, NULL, 0, 0, eps, normalized_ndim,
                        out));
}
static of_status pack_bn_eval(of_tensor *x, of_tensor *running_mean, of_tensor *running_var,
                              of_tensor *weight, of_tensor *bias, double eps, double lo, double hi,
                              int32_t has_lo, int32_t has_hi, of_tensor *into, of_tensor **out) {
  a_bn_eval a;
  OF_ZERO(a);
  a.eps = eps;
  a.lo = lo;
  a.hi = hi;
  a.has_lo = has_lo;
  a.has_hi = has_hi;
  of_tensor *ins[6] = {x, running_mean, running_var, weight, bias, into};
  return OF_RECORD(OPK_BATCH_NORM_EVAL, a, ins, into ? 6 : 5, out, 1);
}
of_status of_batch_norm_eval(of_tensor *x, of_tensor *running_mean, of_tensor *running_var,
                             of_tensor *weight, of_tensor *bias, double eps, double lo, double hi,
                             int32_t has_lo, int32_t has_hi, of_tensor *into, of_tensor **out) {
  OF_DISPATCH(bn_eval_body(x, running_mean, running_var, weight, bias, eps, lo, hi, has_lo, has_hi,
                           into, out),
              pack_bn_eval(x, running_mean, running_var, weight, bias, eps, lo, hi, has_lo, has_hi,
                           into, out));
}
static of_status run_bn_eval(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_bn_eval);
  OF_RUN1(of_batch_norm_eval(ins[0], ins[1], ins[2], ins[3], ins[4], a->eps, a->lo, a->hi,
                             a->has_lo, a->has_hi, n->nin > 5 ? ins[5] : NULL, OF_R));
}
static of_status infer_bn_eval(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)p;
  const char *op = "batch_norm_eval";
  OF_CHECK(check_input_meta(op, &ins[0], 2));
  int64_t C = ins[0].shape[1];
  OF_CHECK(check_param_meta(op, "running_mean", &ins[1], C, &ins[0]));
  OF_CHECK(check_param_meta(op, "running_var", &ins[2], C, &ins[0]));
  OF_CHECK(check_param_meta(op, "weight", &ins[3], C, &ins[0]));
  OF_CHECK(check_param_meta(op, "bias", &ins[4], C, &ins[0]));
  outs[0] = ins[0];
  if (nin > 5 && ins[5].ndim >= 0) outs[0].dtype = ins[5].dtype;
  return OF_OK;
}
static of_status run_norm(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_norm);
  OF_NEED(n->nin == 5, "inputs");
  switch (n->op) {
    case OPK_BATCH_NORM:
      OF_RUN1(of_batch_norm(ins[0], ins[1], ins[2], ins[3], ins[4], a->flag, a->momentum, a->eps, OF_R));
    case OPK_INSTANCE_NORM:
      OF_RUN1(of_instance_norm(ins[0], ins[1], ins[2], ins[3], ins[4], a->flag, a->momentum, a->eps,
                            OF_R));
    case OPK_LAYER_NORM:
      OF_RUN1(of_layer_norm(ins[0], (int32_t)a->groups, ins[3], ins[4], a->eps, OF_R));
    case OPK_RMS_NORM:
      OF_RUN1(of_rms_norm(ins[0], (int32_t)a->groups, ins[3], a->eps, OF_R));
    default:
      OF_RUN1(of_group_norm(ins[0], a->groups, ins[3], ins[4], a->eps, OF_R));
  }
}
static void describe_norm(const void *p, char *b, size_t c) {
  const a_norm *a = p;
  of_catf(b, c, "eps=%g%s", a->eps, a->flag ? " training" : "");
}

/* a loaded norm node: the bodies' checks of the input and of the per-channel
 * tensors (batch / instance / group norm: C elements each; layer / rms norm:
 * the normalized dims), on the recorded shapes and dtypes; the result has
 * the input's shape and dtype (of_finish_dtype) */
static of_status infer_norm_op(int32_t opk, const a_norm *a, const of_meta *ins, of_meta *outs) {
  static const char *names[] = {"batch_norm", "instance_norm", "group_norm", "layer_norm", "rms_norm"};
  int32_t which = opk == OPK_BATCH_NORM ? 0 : opk == OPK_INSTANCE_NORM ? 1 : opk == OPK_GROUP_NORM ? 2
                : opk == OPK_LAYER_NORM ? 3 : 4;
  const char *op = names[which];
  const of_meta *x = &ins[0];
  OF_CHECK(check_input_meta(op, x, which <= 2 ? 2 : 1));
  if (which <= 2) {
    int64_t C = x->shape[1];
    if (which <= 1) {
      OF_CHECK(check_param_meta(op, "running_mean", &ins[1], C, x));
      OF_CHECK(check_param_meta(op, "running_var", &ins[2], C, x));
    }
    OF_CHECK(check_param_meta(op, "weight", &ins[3], C, x));
    OF_CHECK(check_param_meta(op, "bias", &ins[4], C, x));
    if (which == 0 && !a->flag && (ins[1].ndim < 0 || ins[2].ndim < 0))
      return of_fail(OF_ERR_ARG, "%s: running_mean and running_var are needed when not training", op);
  } else {
    int32_t k = (int32_t)a->groups;
    char b1[96], b2[96];
    if (k < 1 || k > x->ndim)
      return of_fail(OF_ERR_ARG, "%s: normalized_shape has %d dims; expected 1..%d for the input "
                     "%s (%s)", op, (int)k, (int)x->ndim, of_shape_str(x->shape, x->ndim, b1, 96),
                     of_dtype_name(x->dtype));
    for (int32_t j = 3; j < (which == 3 ? 5 : 4); j++) {
      const of_meta *p = &ins[j];
      if (p->ndim < 0) continue;
      bool same = p->ndim == k;
      for (int32_t d = 0; same && d < k; d++) same = p->shape[d] == x->shape[x->ndim - k + d];
      if (!same || !of_dtype_is_floating(p->dtype))
        return of_fail(OF_ERR_SHAPE, "%s: %s of shape %s (%s) should be floating point with the "
                       "normalized shape (the last %d dims of the input %s)", op,
                       j == 3 ? "weight" : "bias", of_shape_str(p->shape, p->ndim, b1, 96),
                       of_dtype_name(p->dtype), (int)k, of_shape_str(x->shape, x->ndim, b2, 96));
    }
  }
  outs[0] = *x;
  return OF_OK;
}
#define INFER_NORM(K) \
  static of_status infer_##K(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) { \
    if (nin != 5) return of_fail(OF_ERR_ARG, "norm: %d inputs, expected 5", (int)nin); \
    return infer_norm_op(OPK_##K, p, ins, outs); \
  }
INFER_NORM(BATCH_NORM)
INFER_NORM(LAYER_NORM)
INFER_NORM(RMS_NORM)
INFER_NORM(GROUP_NORM)
INFER_NORM(INSTANCE_NORM)

OF_OP_IMPL_INFER(BATCH_NORM, run_norm, mutates_norm, NULL, describe_norm, infer_BATCH_NORM);
OF_OP_IMPL_INFER(LAYER_NORM, run_norm, mutates_none, NULL, describe_norm, infer_LAYER_NORM);
OF_OP_IMPL_INFER(RMS_NORM, run_norm, mutates_none, NULL, describe_norm, infer_RMS_NORM);
OF_OP_IMPL_INFER(GROUP_NORM, run_norm, mutates_none, NULL, describe_norm, infer_GROUP_NORM);
OF_OP_IMPL_INFER(INSTANCE_NORM, run_norm, mutates_norm, NULL, describe_norm, infer_INSTANCE_NORM);
OF_OP_IMPL_INFER(BATCH_NORM_EVAL, run_bn_eval, NULL, NULL, NULL, infer_bn_eval);
