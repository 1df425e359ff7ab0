/* rowk.c -- row kernels of the memory-bound ops: layer_norm, rms_norm,
 * softmax and log_softmax, forward and backward, for float32 and bfloat16
 * rows.
 *
 * Each row is read from memory once: it is worked in chunks of CH elements
 * (8 KiB of float32, so every re-read of a chunk hits L1), and the chunks'
 * partial results are combined in double (layer_norm: Chan's pairwise
 * merge of chunk means and squared deviations, each chunk's own two passes
 * running in L1; softmax: the running maximum and rescaled sum of an online
 * softmax). A row of at most CH elements -- the common case -- costs one
 * read of the input and one write of the output.
 *
 * The arithmetic is float32 in 16-lane GCC vectors (one zmm, two ymm or
 * four xmm registers); bfloat16 is widened on load and rounded to nearest
 * even on store (with AVX512-BF16 by its conversion instruction: simd.h's
 * "bf16n" helpers, the same bits), and the norms widen a one-chunk row
 * once into an L1 buffer that their later passes read. Every lane order
 * is fixed, so the three instruction sets give the same sums in the same
 * order (they may differ in the last bit where AVX2/AVX-512 contract a
 * multiply-add into an FMA).
 *
 * The kernels are compiled three times from one body: for AVX-512
 * (F/BW/VL/DQ), for AVX2 + FMA and for the build's baseline, and a table
 * picks one per call from of_cpu_isa() (core/tensor/cpu.c: the CPU's
 * features, capped by OF_CPU_ISA). OpenMP loops stay outside the target
 * functions (an outlined parallel body would lose the target attribute)
 * and hand each thread a contiguous range of rows. */
#include "rowk.h"
#include "simd.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

enum { CH = 2048, PRB = 64 };   /* chunk, rows per param-grad block */

/* one element, widened (bfloat16 exactly) */
static inline float ld1_f32(const float *p) { return *p; }
static inline float ld1_bf16(const uint16_t *p) { return of_bf16_to_f32(*p); }
#define ld1_bf16n ld1_bf16


/* W elements of a row at i, as floats: from fx (the row itself, or its
 * widened copy) when as_f32, else widened from px; as_f32 is loop-invariant
 * (constant for float32), so the loop is unswitched, not branched */
#define ROWK_LD(TS, W, as_f32, fx, px, i) ((as_f32) ? ld_f32_##W((fx) + (i)) : ld_##TS##_##W((px) + (i)))

/* One instantiation: TS the data type's suffix (f32, bf16), T its C type,
 * ISA the instruction set's suffix, ATTR its target attribute. */
#define ROW_KERNELS(TS, T, ISA, ATTR, W)                                                        \
  ATTR static void ln_fwd_##TS##_##ISA(const void *x_, void *y_, int64_t r0, int64_t r1,        \
                                       int64_t M,                                               \
                                       const float *w, const float *b, double eps,              \
                                       double *mean, double *rstd) {                            \
    const T *x = x_;                                                                            \
    T *y = y_;                                                                                  \
    /* bfloat16 chunks are widened once into buf: the second pass, and the                      \
     * output pass of a one-chunk row, read floats from L1 instead of                           \
     * converting again (float32 rows are read in place: wide is 0) */                          \
    enum { wide = sizeof(T) != sizeof(float) };                                                 \
    float buf[wide ? CH : 1] __attribute__((aligned(64)));                                      \
    const float invm = 1.0f / (float)M;                                                         \
    const double invmd = 1.0 / (double)M;                                                       \
    for (int64_t r = r0; r < r1; r++) {                                                         \
      const T *px = x + r * M;                                                                  \
      T *py = y + r * M;                                                                        \
      double na = 0, mua = 0, m2a = 0;                                                          \
      for (int64_t c0 = 0; c0 < M; c0 += CH) {                                                  \
        int64_t nc = M - c0 < CH ? M - c0 : CH, i = 0;                                          \
        const T *pc = px + c0;                                                                  \
        const float *fc = wide ? buf : (const float *)(const void *)pc;                         \
        /* four independent sums (eight below) keep the adders busy: one chain                  \
         * would wait out each add's latency */                                                 \
        vf##W s0 = vsplat##W(0), s1 = vsplat##W(0), s2 = vsplat##W(0), s3 = vsplat##W(0);       \
        for (; i + 4 * W <= nc; i += 4 * W) {                                                   \
          vf##W a0 = ld_##TS##_##W(pc + i), a1 = ld_##TS##_##W(pc + i + W);                     \
          vf##W a2 = ld_##TS##_##W(pc + i + 2 * W), a3 = ld_##TS##_##W(pc + i + 3 * W);         \
          if (wide) {                                                                           \
            st_f32_##W(buf + i, a0);                                                            \
            st_f32_##W(buf + i + W, a1);                                                        \
            st_f32_##W(buf + i + 2 * W, a2);                                                    \
            st_f32_##W(buf + i + 3 * W, a3);                                                    \
          }                                                                                     \
          s0 += a0;                                                                             \
          s1 += a1;                                                                             \
          s2 += a2;                                                                             \
          s3 += a3;                                                                             \
        }                                                                                       \
        for (; i + W <= nc; i += W) {                                                           \
          vf##W a = ld_##TS##_##W(pc + i);                                                      \
          if (wide) st_f32_##W(buf + i, a);                                                     \
          s0 += a;                                                                              \
        }                                                                                       \
        if (i < nc) {                                                                           \
          vf##W a = ldn_##TS##_##W(pc + i, nc - i, 0.0f);                                       \
          if (wide) stn_f32_##W(buf + i, a, nc - i);                                            \
          s1 += a;                                                                              \
        }                                                                                       \
        /* cm only shifts the second pass (whose sums correct it), so a float sum               \
         * and an inexact quotient do: their latency is the row's critical path;                \
         * the lanes are scaled first, so the sum stays in range where they do */               \
        float cm = hsumf##W(((s0 + s1) + (s2 + s3)) * (nc == M ? invm : 1.0f / (float)nc));     \
        /* around cm (in L1): sum of d = x - cm and of d^2 */                                   \
        vf##W d0 = vsplat##W(0), d1 = vsplat##W(0), q0 = vsplat##W(0), q1 = vsplat##W(0);       \
        vf##W q2 = vsplat##W(0), q3 = vsplat##W(0);                                             \
        for (i = 0; i + 4 * W <= nc; i += 4 * W) {                                              \
          vf##W da = ld_f32_##W(fc + i) - cm, db = ld_f32_##W(fc + i + W) - cm;                 \
          vf##W dc = ld_f32_##W(fc + i + 2 * W) - cm, dd = ld_f32_##W(fc + i + 3 * W) - cm;     \
          d0 += da + db;                                                                        \
          d1 += dc + dd;                                                                        \
          q0 += da * da;                                                                        \
          q1 += db * db;                                                                        \
          q2 += dc * dc;                                                                        \
          q3 += dd * dd;                                                                        \
        }                                                                                       \
        d0 += d1;                                                                               \
        q0 += q2;                                                                               \
        q1 += q3;                                                                               \
        for (; i + W <= nc; i += W) {                                                           \
          vf##W d = ld_f32_##W(fc + i) - cm;                                                    \
          d0 += d;                                                                              \
          q0 += d * d;                                                                          \
        }                                                                                       \
        if (i < nc) {                                                                           \
          vf##W d = ldn_f32_##W(fc + i, nc - i, cm) - cm;                                       \
          d0 += d;                                                                              \
          q1 += d * d;                                                                          \
        }                                                                                       \
        double sd = hsum##W(d0), nb = (double)nc, rb = nc == M ? invmd : 1.0 / nb;              \
        double mub = (double)cm + sd * rb, m2b = hsum##W(q0 + q1) - sd * sd * rb;               \
        if (m2b < 0) m2b = 0;                                                                   \
        if (c0 == 0) {   /* the first chunk: no merge (and no divisions) */                     \
          mua = mub;                                                                            \
          m2a = m2b;                                                                            \
        } else {                                                                                \
          double n = na + nb, delta = mub - mua;                                                \
          mua += delta * nb / n;                                                                \
          m2a += m2b + delta * delta * na * nb / n;                                             \
        }                                                                                       \
        na += nb;                                                                               \
      }                                                                                         \
      double rs = 1.0 / sqrt(m2a * invmd + eps);                                                \
      mean[r] = mua;                                                                            \
      rstd[r] = rs;                                                                             \
      /* the mean as hi + lo: x - hi is exact near the mean, so a mean far from 0               \
       * (large against the spread) keeps the deviations' digits */                             \
      float mf = (float)mua, ml = (float)(mua - (double)mf), rf = (float)rs;                    \
      int64_t i = 0;                                                                            \
      /* the row as floats (in place, or a one-chunk row in buf), else widened again */     \
      const bool as_f32 = !wide || M <= CH;                                                     \
      const float *fx = wide ? buf : (const float *)(const void *)px;                           \
      for (; i + W <= M; i += W) {                                                              \
        vf##W v = ((ROWK_LD(TS, W, as_f32, fx, px, i) - mf) - ml) * rf;                         \
        if (w) v *= ld_f32_##W(w + i);                                                          \
        if (b) v += ld_f32_##W(b + i);                                                          \
        st_##TS##_##W(py + i, v);                                                               \
      }                                                                                         \
      if (i < M) {                                                                              \
        int64_t k = M - i;                                                                      \
        vf##W v = ((ldn_##TS##_##W(px + i, k, 0.0f) - mf) - ml) * rf;                           \
        if (w) v *= ldn_f32_##W(w + i, k, 0.0f);                                                \
        if (b) v += ldn_f32_##W(b + i, k, 0.0f);                                                \
        stn_##TS##_##W(py + i, v, k);                                                           \
      }                                                                                         \
    }                                                                                           \
  }                                                                                             \
  /* rms_norm: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps); the squares                  \
   * are summed per chunk in float lanes and the chunks in double */                            \
  ATTR static void rms_fwd_##TS##_##ISA(const void *x_, void *y_, int64_t r0, int64_t r1,       \
                                        int64_t M, const float *w, const float *b, double eps,  \
                                        double *mean, double *rstd) {                           \
    const T *x = x_;                                                                            \
    T *y = y_;                                                                                  \
    (void)b;                                                                                    \
    (void)mean;                                                                                 \
    /* a one-chunk bfloat16 row is widened once into buf (as in ln_fwd) */                      \
    enum { wide = sizeof(T) != sizeof(float) };                                                 \
    float buf[wide ? CH : 1] __attribute__((aligned(64)));                                      \
    const double invmd = 1.0 / (double)M;                                                       \
    for (int64_t r = r0; r < r1; r++) {                                                         \
      const T *px = x + r * M;                                                                  \
      T *py = y + r * M;                                                                        \
      double ss = 0;                                                                            \
      for (int64_t c0 = 0; c0 < M; c0 += CH) {                                                  \
        int64_t nc = M - c0 < CH ? M - c0 : CH, i = 0;                                          \
        const T *pc = px + c0;                                                                  \
        vf##W q0 = vsplat##W(0), q1 = vsplat##W(0);                                             \
        for (; i + 2 * W <= nc; i += 2 * W) {                                                   \
          vf##W a = ld_##TS##_##W(pc + i), c = ld_##TS##_##W(pc + i + W);                       \
          if (wide) {                                                                           \
            st_f32_##W(buf + i, a);                                                             \
            st_f32_##W(buf + i + W, c);                                                         \
          }                                                                                     \
          q0 += a * a;                                                                          \
          q1 += c * c;                                                                          \
        }                                                                                       \
        for (; i + W <= nc; i += W) {                                                           \
          vf##W a = ld_##TS##_##W(pc + i);                                                      \
          if (wide) st_f32_##W(buf + i, a);                                                     \
          q0 += a * a;                                                                          \
        }                                                                                       \
        if (i < nc) {                                                                           \
          vf##W a = ldn_##TS##_##W(pc + i, nc - i, 0.0f);                                       \
          q1 += a * a;                                                                          \
        }                                                                                       \
        ss += hsum##W(q0 + q1);                                                                 \
      }                                                                                         \
      double rs = 1.0 / sqrt(ss * invmd + eps);                                                 \
      rstd[r] = rs;                                                                             \
      float rf = (float)rs;                                                                     \
      int64_t i = 0;                                                                            \
      const bool as_f32 = !wide || M <= CH;   /* as in ln_fwd */                                \
      const float *fx = wide ? buf : (const float *)(const void *)px;                           \
      for (; i + W <= M; i += W) {                                                              \
        vf##W v = ROWK_LD(TS, W, as_f32, fx, px, i) * rf;                                       \
        if (w) v *= ld_f32_##W(w + i);                                                          \
        st_##TS##_##W(py + i, v);                                                               \
      }                                                                                         \
      if (i < M) {                                                                              \
        int64_t k = M - i;                                                                      \
        vf##W v = ldn_##TS##_##W(px + i, k, 0.0f) * rf;                                         \
        if (w) v *= ldn_f32_##W(w + i, k, 0.0f);                                                \
        stn_##TS##_##W(py + i, v, k);                                                           \
      }                                                                                         \
    }                                                                                           \
  }                                                                                             \
  /* rows [r0, r1): gx (or NULL); pw/pb (or NULL): [M] float sums over these rows */            \
  ATTR static void ln_bwd_##TS##_##ISA(const void *x_, const void *g_, void *gx_, int64_t r0,   \
                                       int64_t r1,                                              \
                                       int64_t M, const float *w, const double *mean,           \
                                       const double *rstd, float *pw, float *pb) {              \
    const T *x = x_, *g = g_;                                                                   \
    T *gx = gx_;                                                                                \
    for (int64_t r = r0; r < r1; r++) {                                                         \
      const T *px = x + r * M, *pg = g + r * M;                                                 \
      /* mean NULL: rms_norm (no centring, no mean(gw) term) */                                 \
      float mf = mean ? (float)mean[r] : 0.0f;                                                  \
      float ml = mean ? (float)(mean[r] - (double)mf) : 0.0f, rf = (float)rstd[r];              \
      float c1f = 0, c2f = 0;                                                                   \
      if (gx) {                                                                                 \
        double sa = 0, sb = 0;                                                                  \
        for (int64_t c0 = 0; c0 < M; c0 += CH) {                                                \
          int64_t nc = M - c0 < CH ? M - c0 : CH, i = 0;                                        \
          /* two chains of each sum: one would wait out each add's latency */                   \
          vf##W a0 = vsplat##W(0), b0 = vsplat##W(0), a1 = a0, b1 = b0;                         \
          for (; i + 2 * W <= nc; i += 2 * W) {                                                 \
            vf##W gv = ld_##TS##_##W(pg + c0 + i), gu = ld_##TS##_##W(pg + c0 + i + W);         \
            if (w) {                                                                            \
              gv *= ld_f32_##W(w + c0 + i);                                                     \
              gu *= ld_f32_##W(w + c0 + i + W);                                                 \
            }                                                                                   \
            a0 += gv;                                                                           \
            a1 += gu;                                                                           \
            b0 += gv * ((ld_##TS##_##W(px + c0 + i) - mf) - ml);                                \
            b1 += gu * ((ld_##TS##_##W(px + c0 + i + W) - mf) - ml);                            \
          }                                                                                     \
          a0 += a1;                                                                             \
          b0 += b1;                                                                             \
          for (; i + W <= nc; i += W) {                                                         \
            vf##W gv = ld_##TS##_##W(pg + c0 + i);                                              \
            if (w) gv *= ld_f32_##W(w + c0 + i);                                                \
            a0 += gv;                                                                           \
            b0 += gv * ((ld_##TS##_##W(px + c0 + i) - mf) - ml);                                \
          }                                                                                     \
          if (i < nc) {                                                                         \
            vf##W gv = ldn_##TS##_##W(pg + c0 + i, nc - i, 0.0f);                               \
            if (w) gv *= ldn_f32_##W(w + c0 + i, nc - i, 0.0f);                                 \
            a0 += gv;                                                                           \
            b0 += gv * ((ldn_##TS##_##W(px + c0 + i, nc - i, mf) - mf) - ml);                   \
          }                                                                                     \
          sa += hsum##W(a0);                                                                    \
          sb += hsum##W(b0);                                                                    \
        }                                                                                       \
        double rs = rstd[r];                                                                    \
        c1f = mean ? (float)(sa / (double)M) : 0.0f;                                            \
        c2f = (float)(rs * rs * sb / (double)M);                                                \
      }                                                                                         \
      T *po = gx ? gx + r * M : NULL;                                                           \
      int64_t i = 0;                                                                            \
      for (; i < M; i += W) {                                                                   \
        int64_t k = M - i < W ? M - i : W;                                                      \
        vf##W gv = k == W ? ld_##TS##_##W(pg + i) : ldn_##TS##_##W(pg + i, k, 0.0f);            \
        vf##W d = ((k == W ? ld_##TS##_##W(px + i) : ldn_##TS##_##W(px + i, k, mf)) - mf) - ml; \
        if (po) {                                                                               \
          vf##W gw = gv;                                                                        \
          if (w) gw *= k == W ? ld_f32_##W(w + i) : ldn_f32_##W(w + i, k, 0.0f);                \
          vf##W o = (gw - c1f - d * c2f) * rf;                                                  \
          if (k == W) st_##TS##_##W(po + i, o);                                                 \
          else stn_##TS##_##W(po + i, o, k);                                                    \
        }                                                                                       \
        if (pw) {                                                                               \
          vf##W a = (k == W ? ld_f32_##W(pw + i) : ldn_f32_##W(pw + i, k, 0.0f)) + gv * d * rf; \
          if (k == W) st_f32_##W(pw + i, a);                                                    \
          else stn_f32_##W(pw + i, a, k);                                                       \
        }                                                                                       \
        if (pb) {                                                                               \
          vf##W a = (k == W ? ld_f32_##W(pb + i) : ldn_f32_##W(pb + i, k, 0.0f)) + gv;          \
          if (k == W) st_f32_##W(pb + i, a);                                                    \
          else stn_f32_##W(pb + i, a, k);                                                       \
        }                                                                                       \
      }                                                                                         \
    }                                                                                           \
  }                                                                                             \
  ATTR static void sm_fwd_##TS##_##ISA(const void *x_, void *y_, int64_t r0, int64_t r1,        \
                                       int64_t M,                                               \
                                       int32_t lg) {                                            \
    const T *x = x_;                                                                            \
    T *y = y_;                                                                                  \
    float buf[CH] __attribute__((aligned(64)));                                                 \
    for (int64_t r = r0; r < r1; r++) {                                                         \
      const T *px = x + r * M;                                                                  \
      T *py = y + r * M;                                                                        \
      float mx;                                                                                 \
      double s;                                                                                 \
      bool one = M <= CH;   /* one chunk: its exps stay in buf */                               \
      if (one) {                                                                                \
        vf##W m0 = vsplat##W(-INFINITY), m1 = m0;                                               \
        int64_t i = 0;                                                                          \
        for (; i + 2 * W <= M; i += 2 * W) {                                                    \
          m0 = vmaxq##W(m0, ld_##TS##_##W(px + i));                                              \
          m1 = vmaxq##W(m1, ld_##TS##_##W(px + i + W));                                          \
        }                                                                                       \
        for (; i + W <= M; i += W) m0 = vmaxq##W(m0, ld_##TS##_##W(px + i));                     \
        if (i < M) m1 = vmaxq##W(m1, ldn_##TS##_##W(px + i, M - i, -INFINITY));                  \
        mx = hmax##W(vmax##W(m0, m1));                                                          \
        vf##W e0 = vsplat##W(0), e1 = e0;                                                       \
        /* the next row's lines are asked for while this one's exps run: its                   \
         * reads and the result's ownership then overlap the arithmetic */                      \
        const char *nx = r + 1 < r1 ? (const char *)(px + M) : NULL;                            \
        char *ny = (char *)(py + M);                                                            \
        for (i = 0; i + 2 * W <= M; i += 2 * W) {   /* two exps in flight */                    \
          if (nx) {                                                                             \
            for (int64_t o = i * (int64_t)sizeof(T); o < (i + 2 * W) * (int64_t)sizeof(T); o += 64) { \
              __builtin_prefetch(nx + o, 0, 3);                                                 \
              __builtin_prefetch(ny + o, 1, 3);                                                 \
            }                                                                                   \
          }                                                                                     \
          vf##W ea = vexpn##W(ld_##TS##_##W(px + i) - mx);                                       \
          vf##W eb = vexpn##W(ld_##TS##_##W(px + i + W) - mx);                                   \
          if (!lg) {                                                                            \
            st_f32_##W(buf + i, ea);                                                            \
            st_f32_##W(buf + i + W, eb);                                                        \
          }                                                                                     \
          e0 += ea;                                                                             \
          e1 += eb;                                                                             \
        }                                                                                       \
        for (; i + W <= M; i += W) {                                                            \
          vf##W e = vexpn##W(ld_##TS##_##W(px + i) - mx);                                        \
          if (!lg) st_f32_##W(buf + i, e);                                                      \
          e0 += e;                                                                              \
        }                                                                                       \
        if (i < M) {                                                                            \
          vf##W e = vfirst##W(vexpn##W(ldn_##TS##_##W(px + i, M - i, 0.0f) - mx), M - i);        \
          if (!lg) st_f32_##W(buf + i, e);                                                      \
          e1 += e;                                                                              \
        }                                                                                       \
        s = hsum##W(e0 + e1);                                                                   \
      } else {   /* online: running max and the sum rescaled to it */                           \
        mx = -INFINITY;                                                                         \
        s = 0;                                                                                  \
        for (int64_t c0 = 0; c0 < M; c0 += CH) {                                                \
          int64_t nc = M - c0 < CH ? M - c0 : CH, i = 0;                                        \
          const T *pc = px + c0;                                                                \
          vf##W m0 = vsplat##W(-INFINITY);                                                      \
          for (; i + W <= nc; i += W) m0 = vmax##W(m0, ld_##TS##_##W(pc + i));                  \
          if (i < nc) m0 = vmax##W(m0, ldn_##TS##_##W(pc + i, nc - i, -INFINITY));              \
          float cm = hmax##W(m0);                                                               \
          if (cm == -INFINITY) continue;   /* adds nothing */                                   \
          vf##W e0 = vsplat##W(0);                                                              \
          for (i = 0; i + W <= nc; i += W) e0 += vexpn##W(ld_##TS##_##W(pc + i) - cm);           \
          if (i < nc) e0 += vfirst##W(vexpn##W(ldn_##TS##_##W(pc + i, nc - i, 0.0f) - cm), nc - i); \
          double cs = hsum##W(e0);                                                              \
          if (cm > mx || cm != cm) {                                                            \
            s = s * exp((double)mx - (double)cm) + cs;                                          \
            mx = cm;                                                                            \
          } else {                                                                              \
            s += cs * exp((double)cm - (double)mx);                                             \
          }                                                                                     \
        }                                                                                       \
      }                                                                                         \
      if (lg) {                                                                                 \
        /* (x - max) - log(sum): x - max is exact near the max, so large x keep their digits */ \
        float ls = (float)log(s);                                                               \
        int64_t i = 0;                                                                          \
        for (; i + W <= M; i += W) st_##TS##_##W(py + i, (ld_##TS##_##W(px + i) - mx) - ls);    \
        if (i < M)                                                                              \
          stn_##TS##_##W(py + i, (ldn_##TS##_##W(px + i, M - i, 0.0f) - mx) - ls, M - i);       \
      } else {                                                                                  \
        float inv = (float)(1.0 / s);                                                           \
        int64_t i = 0;                                                                          \
        if (one) {                                                                              \
          for (; i + W <= M; i += W) st_##TS##_##W(py + i, ld_f32_##W(buf + i) * inv);          \
          if (i < M) stn_##TS##_##W(py + i, ld_f32_##W(buf + i) * inv, M - i);                  \
        } else {                                                                                \
          for (; i + W <= M; i += W)                                                            \
            st_##TS##_##W(py + i, vexpn##W(ld_##TS##_##W(px + i) - mx) * inv);                   \
          if (i < M)                                                                            \
            stn_##TS##_##W(py + i, vexpn##W(ldn_##TS##_##W(px + i, M - i, 0.0f) - mx) * inv,     \
                           M - i);                                                              \
        }                                                                                       \
      }                                                                                         \
    }                                                                                           \
  }                                                                                             \
  ATTR static void sm_bwd_##TS##_##ISA(const void *y_, const void *g_, void *gx_, int64_t r0,   \
                                       int64_t r1,                                              \
                                       int64_t M, int32_t lg) {                                 \
    const T *y = y_, *g = g_;                                                                   \
    T *gx = gx_;                                                                                \
    for (int64_t r = r0; r < r1; r++) {                                                         \
      const T *py = y + r * M, *pg = g + r * M;                                                 \
      T *po = gx + r * M;                                                                       \
      double s = 0;                                                                             \
      for (int64_t c0 = 0; c0 < M; c0 += CH) {                                                  \
        int64_t nc = M - c0 < CH ? M - c0 : CH, i = 0;                                          \
        vf##W a0 = vsplat##W(0), a1 = a0;                                                       \
        for (; i + W <= nc; i += W) {                                                           \
          vf##W gv = ld_##TS##_##W(pg + c0 + i);                                                \
          if (lg) a0 += gv;                                                                     \
          else if ((i / W) & 1) a1 += gv * ld_##TS##_##W(py + c0 + i);                          \
          else a0 += gv * ld_##TS##_##W(py + c0 + i);                                           \
        }                                                                                       \
        if (i < nc) {                                                                           \
          vf##W gv = ldn_##TS##_##W(pg + c0 + i, nc - i, 0.0f);                                 \
          a1 += lg ? gv : gv * ldn_##TS##_##W(py + c0 + i, nc - i, 0.0f);                       \
        }                                                                                       \
        s += hsum##W(a0 + a1);                                                                  \
      }                                                                                         \
      float sf = (float)s;                                                                      \
      for (int64_t i = 0; i < M; i += W) {                                                      \
        int64_t k = M - i < W ? M - i : W;                                                      \
        vf##W gv = k == W ? ld_##TS##_##W(pg + i) : ldn_##TS##_##W(pg + i, k, 0.0f);            \
        vf##W yv = k == W ? ld_##TS##_##W(py + i) : ldn_##TS##_##W(py + i, k, 0.0f);            \
        vf##W o = lg ? gv - vexpn##W(yv) * sf : yv * (gv - sf);                                  \
        if (k == W) st_##TS##_##W(po + i, o);                                                   \
        else stn_##TS##_##W(po + i, o, k);                                                      \
      }                                                                                         \
    }                                                                                           \
  }                                                                                             \
  /* y = gelu(x) (erf form) or silu(x), float32 */                                              \
  ATTR static void ew_##TS##_##ISA(int32_t op, const void *x_, void *y_, int64_t n) {           \
    const T *x = x_;                                                                            \
    T *y = y_;                                                                                  \
    int64_t i = 0;                                                                              \
    if (op == OF_SILU) {                                                                        \
      for (; i + 4 * W <= n; i += 4 * W) {   /* four exps in flight, as GELU's erfs below */    \
        vf##W v[4];                                                                             \
        for (int u = 0; u < 4; u++) v[u] = ld_##TS##_##W(x + i + u * W);                        \
        for (int u = 0; u < 4; u++) {                                                           \
          vf##W o = v[u] / (1.0f + vexp##W(-v[u]));                                             \
          o = vsel##W(v[u] == -INFINITY, vsplat##W(NAN), o);                                    \
          st_##TS##_##W(y + i + u * W, o);                                                      \
        }                                                                                       \
      }                                                                                         \
      for (; i < n; i += W) {                                                                   \
        int64_t k = n - i < W ? n - i : W;                                                      \
        vf##W v = k == W ? ld_##TS##_##W(x + i) : ldn_##TS##_##W(x + i, k, 0.0f);               \
        vf##W o = v / (1.0f + vexp##W(-v));                                                     \
        o = vsel##W(v == -INFINITY, vsplat##W(NAN), o);   /* -inf * sigmoid(-inf), as torch */  \
        if (k == W) st_##TS##_##W(y + i, o);                                                    \
        else stn_##TS##_##W(y + i, o, k);                                                       \
      }                                                                                         \
      return;                                                                                   \
    }                                                                                           \
    /* four vectors per step: the erf's two polynomials and its division are a long            \
     * dependency chain, and more in flight keep both FMA pipes busy (4M bfloat16 on            \
     * one Zen 5 thread: two 0.85, four 0.82 ms) */                                             \
    for (; i + 4 * W <= n; i += 4 * W) {                                                        \
      vf##W a = ld_##TS##_##W(x + i), b = ld_##TS##_##W(x + i + W);                             \
      vf##W c = ld_##TS##_##W(x + i + 2 * W), d = ld_##TS##_##W(x + i + 3 * W);                 \
      st_##TS##_##W(y + i, vgelu##W(a));                                                        \
      st_##TS##_##W(y + i + W, vgelu##W(b));                                                    \
      st_##TS##_##W(y + i + 2 * W, vgelu##W(c));                                                \
      st_##TS##_##W(y + i + 3 * W, vgelu##W(d));                                                \
    }                                                                                           \
    for (; i < n; i += W) {                                                                     \
      int64_t k = n - i < W ? n - i : W;                                                        \
      vf##W o = vgelu##W(k == W ? ld_##TS##_##W(x + i) : ldn_##TS##_##W(x + i, k, 0.0f));       \
      if (k == W) st_##TS##_##W(y + i, o);                                                      \
      else stn_##TS##_##W(y + i, o, k);                                                         \
    }                                                                                           \
  }                                                                                             \
  /* sum (ab 0) or sum of |x| (ab 1) of n contiguous elements: four float32                   \
   * vectors take four elements each, are added and go into double lanes, so                   \
   * every float32 partial is a sum of 16 elements (a few ulp of it; the                        \
   * sums of partials are double), at float32 vector speed */                                   \
  ATTR static double rsum_##TS##_##ISA(const void *x_, int64_t n, int32_t ab) {                 \
    const T *x = x_;                                                                            \
    vdh##W d0 = {0}, d1 = {0};                                                                  \
    vi##W mask = (vi##W){0} + (ab ? 0x7fffffff : -1);                                           \
    int64_t i = 0;                                                                              \
    for (; i + 16 * W <= n; i += 16 * W) {                                                      \
      vf##W s0 = vsplat##W(0), s1 = s0, s2 = s0, s3 = s0;                                       \
      for (int k = 0; k < 16 * W; k += 4 * W) {                                                 \
        s0 += (vf##W)((vi##W)ld_##TS##_##W(x + i + k) & mask);                                  \
        s1 += (vf##W)((vi##W)ld_##TS##_##W(x + i + k + W) & mask);                              \
        s2 += (vf##W)((vi##W)ld_##TS##_##W(x + i + k + 2 * W) & mask);                          \
        s3 += (vf##W)((vi##W)ld_##TS##_##W(x + i + k + 3 * W) & mask);                          \
      }                                                                                         \
      vf##W s = (s0 + s1) + (s2 + s3);                                                          \
      d0 += vlo_d##W(s);                                                                        \
      d1 += vhi_d##W(s);                                                                        \
    }                                                                                           \
    vdh##W d = d0 + d1;                                                                         \
    double r = 0;                                                                               \
    for (int k = 0; k < W / 2; k++) r += d[k];                                                  \
    for (; i < n; i++) {                                                                        \
      double v = (double)ld1_##TS(x + i);                                                       \
      r += ab ? fabs(v) : v;                                                                    \
    }                                                                                           \
    return r;                                                                                   \
  }                                                                                             \
  /* acc[m] += sum over N rows (rs elements apart) of x[row][m], m < M: blocks                 \
   * of 4W columns in float32 vectors, eight rows at a time, then into acc */                   \
  ATTR static void csum_##TS##_##ISA(double *acc, const void *x_, int64_t rs, int64_t M,         \
                                     int64_t N) {                                               \
    const T *x = x_;                                                                            \
    int64_t mv = M / (4 * W) * (4 * W);                                                         \
    for (int64_t r0 = 0; r0 < N; r0 += 8) {   /* eight rows, walked along together */          \
      int64_t r1 = N - r0 < 8 ? N : r0 + 8;                                                     \
      for (int64_t m = 0; m < mv; m += 4 * W) {                                                 \
        vf##W s[4] = {vsplat##W(0), vsplat##W(0), vsplat##W(0), vsplat##W(0)};                  \
        for (int64_t r = r0; r < r1; r++) {                                                     \
          const T *p = x + r * rs + m;                                                          \
          s[0] += ld_##TS##_##W(p);                                                             \
          s[1] += ld_##TS##_##W(p + W);                                                         \
          s[2] += ld_##TS##_##W(p + 2 * W);                                                     \
          s[3] += ld_##TS##_##W(p + 3 * W);                                                     \
        }                                                                                       \
        for (int k = 0; k < 4; k++) {                                                           \
          vdh##W a;                                                                             \
          double *q = acc + m + k * W;                                                          \
          memcpy(&a, q, sizeof a);                                                              \
          a += vlo_d##W(s[k]);                                                                  \
          memcpy(q, &a, sizeof a);                                                              \
          memcpy(&a, q + W / 2, sizeof a);                                                      \
          a += vhi_d##W(s[k]);                                                                  \
          memcpy(q + W / 2, &a, sizeof a);                                                      \
        }                                                                                       \
      }                                                                                         \
    }                                                                                           \
    for (int64_t r = 0; r < N; r++)                                                             \
      for (int64_t j = mv; j < M; j++) acc[j] += (double)ld1_##TS(x + r * rs + j);              \
  }                                                                                             \
  /* one row: log(sum(exp(x))) (online over chunks); the lines of `next` (the next row, or   \
   * NULL) are asked for while the exps run, as softmax's rows do */                           \
  ATTR static double lse_##TS##_##ISA(const void *x_, int64_t M, const void *next) {            \
    const T *x = x_;                                                                            \
    const char *nx = next;                                                                      \
    float mx = -INFINITY;                                                                       \
    double s = 0;                                                                               \
    for (int64_t c0 = 0; c0 < M; c0 += CH) {                                                    \
      int64_t nc = M - c0 < CH ? M - c0 : CH, i = 0;                                            \
      const T *pc = x + c0;                                                                     \
      /* four chains of the quiet max and of the sums: a NaN in the row still reaches    \
       * the sum through its exp, as in softmax's rows; a chunk whose quiet max is -inf is \
       * rescanned with the NaN-keeping max (all -inf, or -inf and NaN) */                 \
      vf##W m0 = vsplat##W(-INFINITY), m1 = m0, m2 = m0, m3 = m0;                               \
      for (; i + 4 * W <= nc; i += 4 * W) {                                                     \
        m0 = vmaxq##W(m0, ld_##TS##_##W(pc + i));                                               \
        m1 = vmaxq##W(m1, ld_##TS##_##W(pc + i + W));                                           \
        m2 = vmaxq##W(m2, ld_##TS##_##W(pc + i + 2 * W));                                       \
        m3 = vmaxq##W(m3, ld_##TS##_##W(pc + i + 3 * W));                                       \
      }                                                                                         \
      for (; i + W <= nc; i += W) m0 = vmaxq##W(m0, ld_##TS##_##W(pc + i));                     \
      if (i < nc) m1 = vmaxq##W(m1, ldn_##TS##_##W(pc + i, nc - i, -INFINITY));                 \
      float cm = hmax##W(vmax##W(vmax##W(m0, m1), vmax##W(m2, m3)));                            \
      if (cm == -INFINITY) {                                                                    \
        for (i = 0; i + W <= nc; i += W) m0 = vmax##W(m0, ld_##TS##_##W(pc + i));               \
        if (i < nc) m0 = vmax##W(m0, ldn_##TS##_##W(pc + i, nc - i, -INFINITY));                \
        cm = hmax##W(m0);                                                                       \
        if (cm == -INFINITY) continue;                                                          \
        mx = cm;   /* NaN */                                                                    \
        break;                                                                                  \
      }                                                                                         \
      vf##W e0 = vsplat##W(0), e1 = e0, e2 = e0, e3 = e0;                                       \
      for (i = 0; i + 4 * W <= nc; i += 4 * W) {                                                \
        if (nx)                                                                                 \
          for (int64_t o = (c0 + i) * (int64_t)sizeof(T); o < (c0 + i + 4 * W) * (int64_t)sizeof(T); \
               o += 64)                                                                         \
            __builtin_prefetch(nx + o, 0, 3);                                                   \
        e0 += vexpn##W(ld_##TS##_##W(pc + i) - cm);                                              \
        e1 += vexpn##W(ld_##TS##_##W(pc + i + W) - cm);                                          \
        e2 += vexpn##W(ld_##TS##_##W(pc + i + 2 * W) - cm);                                      \
        e3 += vexpn##W(ld_##TS##_##W(pc + i + 3 * W) - cm);                                      \
      }                                                                                         \
      for (; i + W <= nc; i += W) e0 += vexpn##W(ld_##TS##_##W(pc + i) - cm);                    \
      if (i < nc) e1 += vfirst##W(vexpn##W(ldn_##TS##_##W(pc + i, nc - i, 0.0f) - cm), nc - i);  \
      e0 += e2;                                                                                 \
      e1 += e3;                                                                                 \
      double cs = hsum##W(e0 + e1);                                                             \
      if (cm > mx || cm != cm) {                                                                \
        s = s * exp((double)mx - (double)cm) + cs;                                              \
        mx = cm;                                                                                \
      } else {                                                                                  \
        s += cs * exp((double)cm - (double)mx);                                                 \
      }                                                                                         \
    }                                                                                           \
    return (double)mx + log(s);                                                                 \
  }                                                                                             \
  /* one row: gx = a * exp(x - l) - b */                                                        \
  ATTR static void expaff_##TS##_##ISA(const void *x_, void *gx_, int64_t M, double l, double a, \
                                       double b) {                                              \
    const T *x = x_;                                                                            \
    T *gx = gx_;                                                                                \
    float lf = (float)l, af = (float)a, bf = (float)b;                                          \
    for (int64_t i = 0; i < M; i += W) {                                                        \
      int64_t k = M - i < W ? M - i : W;                                                        \
      vf##W v = k == W ? ld_##TS##_##W(x + i) : ldn_##TS##_##W(x + i, k, 0.0f);                 \
      vf##W o = af * vexpn##W(v - lf) - bf;                                                      \
      if (k == W) st_##TS##_##W(gx + i, o);                                                     \
      else stn_##TS##_##W(gx + i, o, k);                                                        \
    }                                                                                           \
  }                                                                                             \
  /* gx = g * gelu'(x) (erf form) or g * silu'(x) */                                            \
  ATTR static void ewg_##TS##_##ISA(int32_t op, const void *x_, const void *g_, void *gx_,      \
                                    int64_t n) {                                                \
    const T *x = x_, *g = g_;                                                                   \
    T *gx = gx_;                                                                                \
    int64_t i = 0;                                                                              \
    if (op == OF_GELU) /* two vectors in flight, as ew_ */                                      \
      for (; i + 2 * W <= n; i += 2 * W) {                                                      \
        vf##W a = ld_##TS##_##W(x + i), b = ld_##TS##_##W(x + i + W);                           \
        st_##TS##_##W(gx + i, ld_##TS##_##W(g + i) * vgelu_d##W(a));                            \
        st_##TS##_##W(gx + i + W, ld_##TS##_##W(g + i + W) * vgelu_d##W(b));                    \
      }                                                                                         \
    for (; i < n; i += W) {                                                                     \
      int64_t k = n - i < W ? n - i : W;                                                        \
      vf##W v = k == W ? ld_##TS##_##W(x + i) : ldn_##TS##_##W(x + i, k, 0.0f), d;              \
      vf##W gv = k == W ? ld_##TS##_##W(g + i) : ldn_##TS##_##W(g + i, k, 0.0f);                \
      if (op == OF_SILU) {                                                                      \
        vf##W sg = 1.0f / (1.0f + vexp##W(-v));                                                 \
        d = sg * (1.0f + v * (1.0f - sg));                                                      \
      } else {                                                                                  \
        d = vgelu_d##W(v);                                                                      \
      }                                                                                         \
      vf##W o = gv * d;                                                                         \
      if (k == W) st_##TS##_##W(gx + i, o);                                                     \
      else stn_##TS##_##W(gx + i, o, k);                                                        \
    }                                                                                           \
  }

#define NO_ATTR
ROW_KERNELS(f32, float, def, NO_ATTR, 4)
ROW_KERNELS(bf16, uint16_t, def, NO_ATTR, 4)
#if defined(__x86_64__) || defined(__i386__)
ROW_KERNELS(f32, float, avx2, VATTR_8, 8)
ROW_KERNELS(bf16, uint16_t, avx2, VATTR_8, 8)
ROW_KERNELS(f32, float, avx512, VATTR_16, 16)
ROW_KERNELS(bf16, uint16_t, avx512, VATTR_16, 16)
ROW_KERNELS(bf16n, uint16_t, avx512, VATTR_16B, 16)
#define ISA_TABLE(NAME, TS) {NAME##_##TS##_def, NAME##_##TS##_avx2, NAME##_##TS##_avx512}
/* bfloat16 with AVX512-BF16 stores: the emulated kernels below AVX-512 */
#define BF16N_TABLE(NAME) {NAME##_bf16_def, NAME##_bf16_avx2, NAME##_bf16n_avx512}
#else
#define ISA_TABLE(NAME, TS) {NAME##_##TS##_def, NAME##_##TS##_def, NAME##_##TS##_def}
#define BF16N_TABLE(NAME) ISA_TABLE(NAME, bf16)
#endif
#define DT_TABLES(NAME) {ISA_TABLE(NAME, f32), ISA_TABLE(NAME, bf16), BF16N_TABLE(NAME)}

/* [dtype: tix()][of_cpu_isa()] */
typedef void (*ln_fwd_fn)(const void *, void *, int64_t, int64_t, int64_t, const float *,
                          const float *, double, double *, double *);
typedef void (*ln_bwd_fn)(const void *, const void *, void *, int64_t, int64_t, int64_t,
                          const float *, const double *, const double *, float *, float *);
typedef void (*sm_fwd_fn)(const void *, void *, int64_t, int64_t, int64_t, int32_t);
typedef void (*sm_bwd_fn)(const void *, const void *, void *, int64_t, int64_t, int64_t,
                          int32_t);
static const ln_fwd_fn ln_fwd_tab[3][3] = DT_TABLES(ln_fwd);
static const ln_fwd_fn rms_fwd_tab[3][3] = DT_TABLES(rms_fwd);
static const ln_bwd_fn ln_bwd_tab[3][3] = DT_TABLES(ln_bwd);
static const sm_fwd_fn sm_fwd_tab[3][3] = DT_TABLES(sm_fwd);
static const sm_bwd_fn sm_bwd_tab[3][3] = DT_TABLES(sm_bwd);
typedef void (*ew_fn)(int32_t, const void *, void *, int64_t);
static const ew_fn ew_tab[3][3] = DT_TABLES(ew);
typedef void (*ewg_fn)(int32_t, const void *, const void *, void *, int64_t);
static const ewg_fn ewg_tab[3][3] = DT_TABLES(ewg);
typedef double (*lse_fn)(const void *, int64_t, const void *);
static const lse_fn lse_tab[3][3] = DT_TABLES(lse);
typedef double (*rsum_fn)(const void *, int64_t, int32_t);
static const rsum_fn rsum_tab[3][3] = DT_TABLES(rsum);
typedef void (*csum_fn)(double *, const void *, int64_t, int64_t, int64_t);
static const csum_fn csum_tab[3][3] = DT_TABLES(csum);
typedef void (*expaff_fn)(const void *, void *, int64_t, double, double, double);
static const expaff_fn expaff_tab[3][3] = DT_TABLES(expaff);

/* the tables' row: float32, bfloat16, bfloat16 on a CPU with AVX512-BF16 */
static int tix(of_dtype dt) { return dt != OF_BFLOAT16 ? 0 : of_cpu_bf16_native() ? 2 : 1; }

/* threads for R rows of M elements: one per OF_PARALLEL_GRAIN / 4
 * elements at most, as the other kernels, and never more than rows */
static int32_t row_threads(int64_t R, int64_t M) {
  int32_t nt = of_threads();
  int64_t work = R * M;
  if (nt <= 1 || work < OF_PARALLEL_GRAIN) return 1;
  int64_t cap = work / (OF_PARALLEL_GRAIN / 4);
  if (cap < nt) nt = (int32_t)cap;
  if (R < nt) nt = (int32_t)R;
  return nt > 0 ? nt : 1;
}

/* thread t of nt: rows [*r0, *r1) */
static void row_range(int64_t R, int32_t t, int32_t nt, int64_t *r0, int64_t *r1) {
  *r0 = R * t / nt;
  *r1 = R * (t + 1) / nt;
}

/* layer_norm's and rms_norm's forward: rows split between the threads */
static void norm_rows(ln_fwd_fn fn, const void *x, void *y, int64_t R, int64_t M,
                      const float *w, const float *b, double eps, double *mean, double *rstd) {
  int32_t nt = row_threads(R, M);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t r0, r1;
    row_range(R, omp_get_thread_num(), omp_get_num_threads(), &r0, &r1);
    fn(x, y, r0, r1, M, w, b, eps, mean, rstd);
  }
}

void of_rowk_layer_norm(of_dtype dt, const void *x, void *y, int64_t R, int64_t M,
                        const float *w, const float *b, double eps, double *mean, double *rstd) {
  if (R > 0 && M > 0)
    norm_rows(ln_fwd_tab[tix(dt)][of_cpu_isa()], x, y, R, M, w, b, eps, mean, rstd);
}

void of_rowk_rms_norm(of_dtype dt, const void *x, void *y, int64_t R, int64_t M, const float *w,
                      double eps, double *rstd) {
  if (R > 0 && M > 0)
    norm_rows(rms_fwd_tab[tix(dt)][of_cpu_isa()], x, y, R, M, w, NULL, eps, NULL, rstd);
}

of_status of_rowk_layer_norm_backward(of_dtype dt, const void *x, const void *g, void *gx,
                                      int64_t R, int64_t M, const float *w, const double *mean,
                                      const double *rstd, double *gwt, double *gbt) {
  if (M <= 0) return OF_OK;
  if (gwt) memset(gwt, 0, sizeof(double) * (size_t)M);
  if (gbt) memset(gbt, 0, sizeof(double) * (size_t)M);
  if (R <= 0) return OF_OK;
  ln_bwd_fn fn = ln_bwd_tab[tix(dt)][of_cpu_isa()];
  int32_t nt = row_threads(R, M);
  if (!gwt && !gbt) {
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      int64_t r0, r1;
      row_range(R, omp_get_thread_num(), omp_get_num_threads(), &r0, &r1);
      fn(x, g, gx, r0, r1, M, w, mean, rstd, NULL, NULL);
    }
    return OF_OK;
  }
  /* Parameter grads: float partial sums over fixed blocks of PRB rows (the
   * same blocks for any thread count), then added in block order in double. */
  int64_t nblk = (R + PRB - 1) / PRB, nacc = (gwt != NULL) + (gbt != NULL);
  float *part = calloc((size_t)(nblk * nacc), sizeof(float) * (size_t)M);
  if (!part)
    return of_fail(OF_ERR_OOM, "%s backward: out of memory", mean ? "layer_norm" : "rms_norm");
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t k = 0; k < nblk; k++) {
    int64_t r0 = k * PRB, r1 = r0 + PRB < R ? r0 + PRB : R;
    float *pw = gwt ? part + (k * nacc) * M : NULL;
    float *pb = gbt ? part + (k * nacc + (gwt != NULL)) * M : NULL;
    fn(x, g, gx, r0, r1, M, w, mean, rstd, pw, pb);
  }
  /* the combine runs over column tiles with the blocks outside: contiguous
   * rows of the partials, vectorised, each column still summed in block order */
  enum { JT = 512 };
  int64_t ntile = (M + JT - 1) / JT;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && ntile > 1)
  for (int64_t t = 0; t < ntile; t++) {
    int64_t j0 = t * JT, j1 = j0 + JT < M ? j0 + JT : M;
    for (int64_t k = 0; k < nblk; k++) {
      const float *pk = part + (k * nacc) * M;
      if (gwt)
        for (int64_t j = j0; j < j1; j++) gwt[j] += (double)pk[j];
      if (gbt) {
        const float *pb = pk + (gwt != NULL) * M;
        for (int64_t j = j0; j < j1; j++) gbt[j] += (double)pb[j];
      }
    }
  }
  free(part);
  return OF_OK;
}

void of_rowk_softmax(of_dtype dt, const void *x, void *y, int64_t R, int64_t M, int32_t lg) {
  if (R <= 0 || M <= 0) return;
  sm_fwd_fn fn = sm_fwd_tab[tix(dt)][of_cpu_isa()];
  int32_t nt = row_threads(R, M);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t r0, r1;
    row_range(R, omp_get_thread_num(), omp_get_num_threads(), &r0, &r1);
    fn(x, y, r0, r1, M, lg);
  }
}

void of_rowk_softmax_backward(of_dtype dt, const void *y, const void *g, void *gx, int64_t R,
                              int64_t M, int32_t lg) {
  if (R <= 0 || M <= 0) return;
  sm_bwd_fn fn = sm_bwd_tab[tix(dt)][of_cpu_isa()];
  int32_t nt = row_threads(R, M);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t r0, r1;
    row_range(R, omp_get_thread_num(), omp_get_num_threads(), &r0, &r1);
    fn(y, g, gx, r0, r1, M, lg);
  }
}

bool of_rowk_unary(int32_t op, of_dtype dt, const void *x, void *y, int64_t n) {
  if ((op != OF_GELU && op != OF_SILU) || !of_rowk_dtype(dt)) return false;
  if (n > 0) ew_tab[tix(dt)][of_cpu_isa()](op, x, y, n);
  return true;
}

double of_rowk_logsumexp_row(of_dtype dt, const void *x, int64_t M, const void *next) {
  return lse_tab[tix(dt)][of_cpu_isa()](x, M, next);
}

double of_rowk_sum_row(of_dtype dt, const void *x, int64_t n, int32_t ab) {
  return rsum_tab[tix(dt)][of_cpu_isa()](x, n, ab);
}

void of_rowk_sum_cols(of_dtype dt, double *acc, const void *x, int64_t rs, int64_t M, int64_t N) {
  csum_tab[tix(dt)][of_cpu_isa()](acc, x, rs, M, N);
}

void of_rowk_exp_affine_row(of_dtype dt, const void *x, void *y, int64_t M, double l, double a,
                            double b) {
  expaff_tab[tix(dt)][of_cpu_isa()](x, y, M, l, a, b);
}

bool of_rowk_unary_grad(int32_t op, of_dtype dt, const void *x, const void *g, void *gx,
                        int64_t n) {
  if ((op != OF_GELU && op != OF_SILU) || !of_rowk_dtype(dt)) return false;
  if (n <= 0) return true;
  ewg_fn fn = ewg_tab[tix(dt)][of_cpu_isa()];
  size_t es = dt == OF_BFLOAT16 ? 2 : 4;
  int32_t nt = row_threads(n, 1);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    /* 64-element boundaries keep each thread's vectors whole */
    int64_t t = omp_get_thread_num(), k = omp_get_num_threads();
    int64_t chunk = ((n + k - 1) / k + 63) / 64 * 64, b = t * chunk;
    int64_t e = b + chunk < n ? b + chunk : n;
    if (b < e)
      fn(op, (const char *)x + b * es, (const char *)g + b * es, (char *)gx + b * es, e - b);
  }
  return true;
}
