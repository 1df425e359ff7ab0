/* winograd.c -- float32 3x3 convolutions with stride 1 by Winograd's
 * minimal filtering (Lavin and Gray, "Fast Algorithms for Convolutional
 * Neural Networks", 2016). Each m x m output tile is
 * A^T [(G g G^T) .* (B^T d B)] A for the (m+2) x (m+2) input tile d, so the
 * sums over input channels become (m+2)^2 GEMMs, one a point e:
 * M[e] (K x T) = U[e] (K x C) V[e] (C x T), T tiles. Two tile sizes:
 *
 * F(2x2, 3x3): 16 products per 4 outputs (the direct sum: 36).
 *   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *   A^T = [1 1 1 0; 0 1 -1 -1]
 * F(4x4, 3x3): 36 products per 16 outputs (the direct sum: 144), with the
 * points 0, 1, -1, 1/2, -2 (and infinity) rather than Lavin's 0, +-1, +-2:
 * Barabasz et al. ("Error analysis and improving the accuracy of Winograd
 * convolution for deep neural networks", 2019) found them among the most
 * accurate. Measured here, max error over the largest output against
 * float64, normal inputs: a float32 simulation (128 channels) 2.8e-6
 * against Lavin's points' 9.9e-6; this code 1.7e-6 to 4.6e-6 on ResNet-50's
 * layers, F(2x2, 3x3) 2.4e-7 to 4.7e-7, oneDNN's direct kernel 3.4e-7 to
 * 1.7e-6 (spec/nn/conv_winograd_spec.lua holds all to 1e-5).
 *   G   = [1 0 0; 1/3 1/3 1/3; -1/3 1/3 -1/3; -16/15 -8/15 -4/15;
 *          1/15 -2/15 4/15; 0 0 1]
 *   B^T = [1 -3/2 -2 3/2 1 0; 0 -1 1/2 5/2 1 0; 0 1 -5/2 1/2 1 0;
 *          0 -2 -1 2 1 0; 0 1/2 -1 -1/2 1 0; 0 1 -3/2 -2 3/2 1]
 *   A^T = [1 1 1 1 1 0; 0 1 -1 1/2 -2 0; 0 1 1 1/4 4 0;
 *          0 1 -1 1/8 -8 1]
 *
 * Work is split over blocks of whole tile rows (of one or more samples): a
 * thread transforms a block's input into V, runs the GEMMs (OpenBLAS on the
 * calling thread) into M and transforms M into the output rows, so V and M
 * stay in the thread's caches. The transforms run over all of a block's
 * tiles at once (a tile row alone has as few as 2-14 tiles, too few for
 * vectors: the F(4x4) transforms ran scalar and took half the time). The
 * output transform adds the bias, and for the graph's fused convolution a
 * residual and a clamp (ReLU). U, 16 or 36 floats per 9 weights, is kept
 * for the next call when the caller names the weight (inference with a
 * parameter or a graph's folded weight, as oneDNN's reordered weights in
 * device/dnnl.c). A channels-last (NHWC) input runs its own block
 * functions (input_block_cl, output_block_cl): every pixel is a row of
 * channels, so the transforms run along the channels and the GEMMs are
 * transposed; the result is channels-last, nothing is reordered. conv.c
 * decides where this runs (wino_pick). */
#include "../internal.h"
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "conv.h"

/* tiles a block aims at (at most: two blocks a thread at least); F(2x2):
 * 96 and 384 ran up to 1.4x slower on ResNet-50's 28x28 and 14x14 layers;
 * F(4x4) on its 56x56 and 28x28 layers at batch 8: 96 0.98-1.09x, 384
 * 0.97-1.13x the time of 192 */
enum { WINO_TILES = 192 };

typedef struct {
  int64_t N, C, H, W, K, ph, pw, OH, OW, th, tw;
  int mt, al;   /* tile side m, input tile side m + 2 */
} wgeom;

/* ---- the one-dimensional transforms, over n tiles at once ---- */

/* t[0..al) = G (g0, g1, g2): in double, as F(4x4)'s thirds and fifteenths
 * are not floats */
static inline void g_col(int mt, double g0, double g1, double g2, double *t) {
  if (mt == 2) {
    t[0] = g0, t[1] = 0.5 * (g0 + g1 + g2), t[2] = 0.5 * (g0 - g1 + g2), t[3] = g2;
    return;
  }
  const double third = 1.0 / 3.0, fifteenth = 1.0 / 15.0;
  t[0] = g0;
  t[1] = (g0 + g1 + g2) * third;
  t[2] = (g1 - g0 - g2) * third;
  t[3] = (-16.0 * g0 - 8.0 * g1 - 4.0 * g2) * fifteenth;
  t[4] = (g0 - 2.0 * g1 + 4.0 * g2) * fifteenth;
  t[5] = g2;
}

/* U[e][k][c] = (G g G^T)[e], e = al a + b, for g = w[k][c] (3x3); a chunk
 * of UCHUNK (k, c) pairs at a time into a local buffer, then one row a
 * plane (writing each pair's points into the planes directly, 16 or 36
 * lines apart, ran at ~550 cycles a pair) */
enum { UCHUNK = 64 };
static void weights_u(int mt, const float *w, int64_t K, int64_t C, bool ck, float *u) {
  const int64_t kc = K * C, nch = (kc + UCHUNK - 1) / UCHUNK;
  const int al = mt + 2, nt = of_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && kc >= 4096)
  for (int64_t ch = 0; ch < nch; ch++) {
    const int64_t i0 = ch * UCHUNK, n = kc - i0 < UCHUNK ? kc - i0 : UCHUNK;
    float buf[36][UCHUNK];
    for (int64_t i = 0; i < n; i++) {
      const float *g = w + (i0 + i) * 9;
      double t[3][6], o[6];   /* t[c]: G times column c of the kernel */
      for (int c = 0; c < 3; c++) g_col(mt, g[c], g[3 + c], g[6 + c], t[c]);
      for (int r = 0; r < al; r++) {   /* row r of G g, times G^T */
        g_col(mt, t[0][r], t[1][r], t[2][r], o);
        for (int b = 0; b < al; b++) buf[al * r + b][i] = (float)o[b];
      }
    }
    if (!ck) {
      for (int e = 0; e < al * al; e++) memcpy(u + e * kc + i0, buf[e], (size_t)n * sizeof(float));
      continue;
    }
    /* ck (channels-last's GEMM operand): U[e][c][k] for pair i0 + i = k C + c */
    for (int e = 0; e < al * al; e++)
      for (int64_t i = 0; i < n; i++) {
        const int64_t k = (i0 + i) / C, c = (i0 + i) % C;
        u[e * kc + c * K + k] = buf[e][i];
      }
  }
}

/* d[0..al) = B^T (s[0..al)): rows of n values, strides ss and ds */
static inline void bt(int mt, const float *restrict s, int64_t ss, float *restrict d, int64_t ds,
                      int64_t n) {
  const float *s0 = s, *s1 = s + ss, *s2 = s1 + ss, *s3 = s2 + ss;
  float *d0 = d, *d1 = d + ds, *d2 = d1 + ds, *d3 = d2 + ds;
  if (mt == 2) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++) {
      const float x0 = s0[j], x1 = s1[j], x2 = s2[j], x3 = s3[j];
      d0[j] = x0 - x2, d1[j] = x1 + x2, d2[j] = x2 - x1, d3[j] = x1 - x3;
    }
    return;
  }
  const float *s4 = s3 + ss, *s5 = s4 + ss;
  float *d4 = d3 + ds, *d5 = d4 + ds;
#pragma omp simd
  for (int64_t j = 0; j < n; j++) {
    const float x0 = s0[j], x1 = s1[j], x2 = s2[j], x3 = s3[j], x4 = s4[j], x5 = s5[j];
    const float a = x4 - x2, b = x3 - x1;
    d0[j] = (x0 + x4) - 2.0f * x2 + 1.5f * b;
    d1[j] = (x4 - x1) + 0.5f * x2 + 2.5f * x3;
    d2[j] = (x4 + x1) - 2.5f * x2 + 0.5f * x3;
    d3[j] = a + 2.0f * b;
    d4[j] = a - 0.5f * b;
    d5[j] = (x5 + x1) - 2.0f * x3 + 1.5f * a;
  }
}

/* d[0..mt) = A^T (s[0..al)) + b */
static inline void at(int mt, const float *restrict s, int64_t ss, float *restrict d, int64_t ds,
                      int64_t n, float b) {
  const float *s0 = s, *s1 = s + ss, *s2 = s1 + ss, *s3 = s2 + ss;
  float *d0 = d, *d1 = d + ds;
  if (mt == 2) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++) {
      d0[j] = s0[j] + s1[j] + s2[j] + b;
      d1[j] = s1[j] - s2[j] - s3[j] + b;
    }
    return;
  }
  const float *s4 = s3 + ss, *s5 = s4 + ss;
  float *d2 = d1 + ds, *d3 = d2 + ds;
#pragma omp simd
  for (int64_t j = 0; j < n; j++) {
    const float p12 = s1[j] + s2[j], m12 = s1[j] - s2[j];
    d0[j] = s0[j] + p12 + (s3[j] + s4[j]) + b;
    d1[j] = m12 + 0.5f * s3[j] - 2.0f * s4[j] + b;
    d2[j] = p12 + 0.25f * s3[j] + 4.0f * s4[j] + b;
    d3[j] = m12 + 0.125f * s3[j] - 8.0f * s4[j] + s5[j] + b;
  }
}

/* ---- input: V[e][c][t] for the tiles of tile rows r0 ... r1 - 1 ---- */

/* Input row yr of one channel split by phase: p[k][j] = column
 * mt j + k - pw (zero outside the map), k < mt, j <= tw, so column k of
 * tile j is p[k % mt][j + k / mt]. */
static inline void load_row(const wgeom *q, const float *xc, int64_t yr, float *restrict p) {
  const int64_t n = q->tw + 1, mt = q->mt;
  if (yr < 0 || yr >= q->H) {
    memset(p, 0, (size_t)(mt * n) * sizeof(float));
    return;
  }
  const float *s = xc + yr * q->W - q->pw;   /* s[c]: column c of the padded row */
  /* interior [j0, j1): columns mt j ... mt j + mt - 1 all inside
   * [pw, pw + W); the few on either side are checked one by one */
  int64_t j0 = (q->pw + mt - 1) / mt, j1 = (q->pw + q->W - mt + 1) / mt;
  if (j1 > n) j1 = n;
  if (j0 > j1) j0 = j1;
  if (mt == 2)
    for (int64_t j = j0; j < j1; j++) p[j] = s[2 * j], p[n + j] = s[2 * j + 1];
  else
    for (int64_t j = j0; j < j1; j++)
      p[j] = s[4 * j], p[n + j] = s[4 * j + 1], p[2 * n + j] = s[4 * j + 2],
      p[3 * n + j] = s[4 * j + 3];
  for (int64_t j = 0; j < n; j++) {
    if (j == j0) j = j1;
    if (j >= n) break;
    for (int64_t k = 0; k < mt; k++) {
      const int64_t c = mt * j + k - q->pw;
      p[k * n + j] = c >= 0 && c < q->W ? s[mt * j + k] : 0.0f;
    }
  }
}

/* Per channel, the input tiles are first copied out as D[al r + k][t] (row
 * r, column k of tile t), then H = D B (columns) and V = B^T H (rows). */
__attribute__((target_clones("avx2", "default")))
static void input_block(const wgeom *q, const float *x, int64_t r0, int64_t r1, float *v,
                        int64_t ldv, float *scratch) {
  const int mt = q->mt, al = q->al;
  const int64_t m = q->tw + 1, tw = q->tw, nt = (r1 - r0) * tw, estride = q->C * ldv;
  float *ph = scratch, *d = ph + 4 * m, *h = d + 36 * ldv;
  const size_t row = (size_t)tw * sizeof(float);
  for (int64_t c = 0; c < q->C; c++) {
    for (int64_t r = r0; r < r1; r++) {
      const int64_t n = r / q->th, i = r % q->th, t0 = (r - r0) * tw;
      const float *xc = x + (n * q->C + c) * q->H * q->W;
      for (int rr = 0; rr < al; rr++) {
        load_row(q, xc, mt * i - q->ph + rr, ph);
        float *dr = d + al * rr * ldv + t0;
        for (int k = 0; k < al; k++) memcpy(dr + k * ldv, ph + (k % mt) * m + k / mt, row);
      }
    }
    for (int rr = 0; rr < al; rr++) bt(mt, d + al * rr * ldv, ldv, h + al * rr * ldv, ldv, nt);
    for (int b = 0; b < al; b++)
      bt(mt, h + b * ldv, al * ldv, v + b * estride + c * ldv, al * estride, nt);
  }
}

/* ---- output: the rows of tile rows r0 ... r1 - 1 from M[e][k][t] ---- */

typedef struct {
  const float *bias;
  bool acc;        /* y holds a residual: add to it */
  float lo, hi;    /* then clamp (-inf, inf: none) */
} wpost;

/* y = clamp(r + y) (acc) or clamp(r) over n floats: the post-ops of both
 * layouts' output stores, one loop each so that it vectorises (comparisons,
 * not fminf/fmaxf: a NaN stays NaN, as through relu; no clamp is -inf,
 * inf) */
static inline void post_store(float *restrict y, const float *restrict r, int64_t n, bool acc,
                              float lo, float hi) {
  if (acc) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
      const float s = r[i] + y[i];
      y[i] = s < lo ? lo : s > hi ? hi : s;
    }
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
      const float s = r[i];
      y[i] = s < lo ? lo : s > hi ? hi : s;
    }
  }
}

/* one output row's mt column phases o[c][j] (stride ld) into yr; with
 * post-ops through row (OW floats), so that the sum and clamp run over
 * whole rows */
static inline void store_row(const wgeom *q, const float *o, int64_t ld, float *restrict yr,
                             const wpost *p, float *restrict row) {
  const int64_t OW = q->OW, mt = q->mt, full = OW / mt;
  const bool clamp = p->lo > -INFINITY || p->hi < INFINITY, post = p->acc || clamp;
  float *restrict d = post ? row : yr;
  if (mt == 2)
    for (int64_t j = 0; j < full; j++) d[2 * j] = o[j], d[2 * j + 1] = o[ld + j];
  else
    for (int64_t j = 0; j < full; j++)
      d[4 * j] = o[j], d[4 * j + 1] = o[ld + j], d[4 * j + 2] = o[2 * ld + j],
      d[4 * j + 3] = o[3 * ld + j];
  for (int64_t c = mt * full; c < OW; c++) d[c] = o[(c % mt) * ld + full];
  if (post) post_store(yr, row, OW, p->acc, p->lo, p->hi);
}

/* per output channel S = A^T M (rows), O = S A (columns) over the block's
 * tiles, then O[mt a + c][t] to row mt i + a, column mt j + c */
__attribute__((target_clones("avx2", "default")))
static void output_block(const wgeom *q, const float *mm, int64_t ldm, int64_t r0, int64_t r1,
                         const wpost *p, float *y, float *scratch) {
  const int mt = q->mt, al = q->al;
  const int64_t estride = q->K * ldm, tw = q->tw, nt = (r1 - r0) * tw;
  float *sb = scratch, *o = sb + 24 * ldm, *row = o + 16 * ldm;
  for (int64_t k = 0; k < q->K; k++) {
    const float *mk = mm + k * ldm;
    for (int b = 0; b < al; b++) at(mt, mk + b * estride, al * estride, sb + b * ldm, al * ldm, nt, 0);
    const float bk = p->bias ? p->bias[k] : 0.0f;
    for (int a = 0; a < mt; a++) at(mt, sb + al * a * ldm, ldm, o + mt * a * ldm, ldm, nt, bk);
    for (int64_t r = r0; r < r1; r++) {
      const int64_t n = r / q->th, i = r % q->th, t0 = (r - r0) * tw;
      for (int a = 0; a < mt && mt * i + a < q->OH; a++)
        store_row(q, o + mt * a * ldm + t0, ldm, y + ((n * q->K + k) * q->OH + mt * i + a) * q->OW,
                  p, row);
    }
  }
}

/* ---- channels-last (NHWC): the transforms run along the channels ----
 * A tile's al x al input pixels are C contiguous floats each, so B^T d B is
 * computed on whole channel rows (the same bt / at over n = C or K values):
 * V[e][t][c] and M[e][t][k], and the GEMMs are M[e] (T x K) = V[e] (T x C)
 * U[e] (C x K). No reorder of the input or the result: an eval graph's
 * layout (doc/graph.md "Layouts") runs through as it is. */

/* the input tiles of tile rows r0 ... r1 - 1 into v (V[e] ldv floats
 * apart, tile tt at tt C); scratch: a border tile's zero-padded copy, then
 * the column transforms */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void input_block_cl(const wgeom *q, const float *x, int64_t r0, int64_t r1, float *v,
                           int64_t ldv, float *scratch) {
  const int mt = q->mt, al = q->al;
  const int64_t C = q->C, W = q->W, H = q->H, rs = W * C, ps = al * C;
  float *patch = scratch, *tmp = patch + al * ps;
  for (int64_t r = r0; r < r1; r++) {
    const int64_t n = r / q->th, i = r % q->th, y0 = mt * i - q->ph;
    for (int64_t j = 0; j < q->tw; j++) {
      const int64_t x0 = mt * j - q->pw, tt = (r - r0) * q->tw + j;
      const float *base;
      int64_t bs;   /* row stride of base */
      if (y0 >= 0 && y0 + al <= H && x0 >= 0 && x0 + al <= W) {
        base = x + ((n * H + y0) * W + x0) * C, bs = rs;
      } else {   /* zeros outside the map */
        for (int a = 0; a < al; a++)
          for (int b = 0; b < al; b++) {
            const int64_t yy = y0 + a, xx = x0 + b;
            float *d = patch + a * ps + b * C;
            if (yy >= 0 && yy < H && xx >= 0 && xx < W)
              memcpy(d, x + ((n * H + yy) * W + xx) * C, (size_t)C * sizeof(float));
            else
              memset(d, 0, (size_t)C * sizeof(float));
          }
        base = patch, bs = ps;
      }
      /* columns: tmp[a][b] = (B^T d)[a][b]; rows: V[al a + b'] = (tmp B)[a][b'] */
      for (int b = 0; b < al; b++) bt(mt, base + b * C, bs, tmp + b * C, ps, C);
      for (int a = 0; a < al; a++) bt(mt, tmp + a * ps, C, v + al * a * ldv + tt * C, ldv, C);
    }
  }
}

/* the output pixels of tile rows r0 ... r1 - 1 from mm (M[e] ldm floats
 * apart, tile tt at tt K), with the bias, residual and clamp; scratch: the
 * row transforms, the mt x mt outputs, K zeros */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void output_block_cl(const wgeom *q, const float *mm, int64_t ldm, int64_t r0, int64_t r1,
                            const wpost *p, float *y, float *scratch) {
  const int mt = q->mt, al = q->al;
  const int64_t K = q->K;
  float *sb = scratch, *o = sb + mt * al * K, *zero = o + mt * mt * K;
  const bool clamp = p->lo > -INFINITY || p->hi < INFINITY;
  const float *restrict bias = p->bias;
  if (!bias) {   /* + 0, as the NCHW transform adds its bias term */
    memset(zero, 0, (size_t)K * sizeof(float));
    bias = zero;
  }
  for (int64_t r = r0; r < r1; r++) {
    const int64_t n = r / q->th, i = r % q->th;
    for (int64_t j = 0; j < q->tw; j++) {
      const int64_t tt = (r - r0) * q->tw + j;
      /* sb[a][b] = (A^T M)[a][b], then o[a][c] = (sb A)[a][c] */
      for (int b = 0; b < al; b++) at(mt, mm + b * ldm + tt * K, al * ldm, sb + b * K, al * K, K, 0);
      for (int a = 0; a < mt; a++) at(mt, sb + a * al * K, K, o + a * mt * K, K, K, 0);
      for (int a = 0; a < mt && mt * i + a < q->OH; a++)
        for (int c = 0; c < mt && mt * j + c < q->OW; c++) {
          float *restrict src = o + (a * mt + c) * K;
          float *restrict dst = y + ((n * q->OH + mt * i + a) * q->OW + mt * j + c) * K;
          /* loops without tests inside, so that they vectorise (one that
           * tested the post-ops per element ran scalar: a fifth of a
           * ResNet-18 graph's time) */
#pragma omp simd
          for (int64_t k = 0; k < K; k++) src[k] += bias[k];
          if (p->acc || clamp) post_store(dst, src, K, p->acc, p->lo, p->hi);
          else memcpy(dst, src, (size_t)K * sizeof(float));
        }
    }
  }
}

/* ---- kept transforms of weights ----
 * A kept table (storage/kept.c) keyed by (weight storage id, version,
 * offset, K, C, tile, layout), at most 64 entries and 256 MiB (ResNet-50's
 * Winograd layers keep ~30 MB). of_release_kernel_caches (amp.c) empties
 * it, and a graph's dropped folded weight goes with of_forget_kept_weight
 * (amp.c). */
typedef struct {
  of_kept k;   /* first: the table's entry */
  float *u;
} kept_u;
static of_kept *kept_slots[64];
static of_kept_table kept = OF_KEPT_TABLE(kept_slots, 256ll << 20);

static void kept_free(of_kept *k) {
  free(((kept_u *)k)->u);
  free(k);
}

void of_wino_release_cached(void) { of_kept_forget(&kept, 0, true); }

void of_wino_forget_weight(int64_t sid) { of_kept_forget(&kept, sid, false); }

/* The kept transform of w under key (a reference for the caller), made and
 * taken into the table on a miss; NULL (no error set) when it is larger
 * than the table holds or there is no memory for it: the caller transforms
 * into scratch instead. Plain heap
 * memory, not of_alloc, as oneDNN's kept weights (dnnl.c): one made while
 * a compiled graph runs must not come from (or shift) the graph's arena
 * plan. */
static kept_u *kept_get(const int64_t *key, int mt, const float *w, int64_t K, int64_t C, bool ck,
                        int64_t bytes) {
  kept_u *e = (kept_u *)of_kept_find(&kept, key);
  if (e || bytes > kept.max_bytes) return e;   /* too large to keep: scratch */
  e = calloc(1, sizeof *e);
  float *u = e ? aligned_alloc(64, (size_t)((bytes + 63) / 64 * 64)) : NULL;
  if (!u) {
    free(e);
    return NULL;
  }
  weights_u(mt, w, K, C, ck, u);
  memcpy(e->k.key, key, sizeof e->k.key);
  e->k.bytes = bytes, e->k.refs = 1, e->k.free = kept_free, e->u = u;
  of_kept_put(&kept, &e->k);
  return e;
}

/* ---- the driver ---- */

of_status of_conv_winograd(const char *op, const of_wino_args *a) {
  const int mt = a->tile == 4 ? 4 : 2, al = mt + 2;
  const int64_t np = al * al, C = a->C, K = a->K;
  wgeom q = {a->N, C, a->H, a->W, K, a->ph, a->pw, a->OH, a->OW,
             (a->OH + mt - 1) / mt, (a->OW + mt - 1) / mt, mt, al};
  const wpost post = {a->bias, a->acc, a->lo, a->hi};
  const int64_t rows = q.N * q.th;                     /* tile rows, all samples */
  int nt = of_threads();
  int64_t rb = WINO_TILES / q.tw;                      /* tile rows a block */
  if (rb > (rows + 2 * nt - 1) / (2 * nt)) rb = (rows + 2 * nt - 1) / (2 * nt);   /* two a thread */
  if (rb < 1) rb = 1;
  const int64_t nblk = (rows + rb - 1) / rb, tb = rb * q.tw;
  if (nt > nblk) nt = (int)nblk;
  const int64_t ubytes = np * K * C * (int64_t)sizeof(float);
  /* scratch: the phases of a row, then D and H (input), or S, O and an
   * output row (output; OW <= mt tw <= 4 tb); channels-last: a padded
   * tile and its column transforms (input), or S and O (output) */
  const int64_t scr = a->cl ? (2 * np * C > (mt * al + mt * mt + 1) * K
                                   ? 2 * np * C : (mt * al + mt * mt + 1) * K)
                            : 4 * (q.tw + 1) + 72 * tb;
  const int64_t per = (np * (C + K) * tb + scr) * (int64_t)sizeof(float);
  kept_u *ke = NULL;
  if (a->wkey) {   /* the transform's layout follows the input's */
    const int64_t key[OF_KEPT_KEY] = {a->wkey[0], a->wkey[1], a->wkey[2], K, C, mt, a->cl};
    ke = kept_get(key, mt, a->w, K, C, a->cl, ubytes);
  }
  float *u = ke ? ke->u : of_alloc(OF_CPU, ubytes);
  char *bufs = u ? of_alloc(OF_CPU, per * nt) : NULL;
  if (!bufs) {
    if (u && !ke) of_free(OF_CPU, u, ubytes);
    if (ke) of_kept_release(&kept, &ke->k);
    return of_fail(OF_ERR_OOM, "%s: out of memory for the Winograd buffers (%lld bytes)", op,
                   (long long)(ubytes + per * nt));
  }
  if (!ke) weights_u(mt, a->w, K, C, a->cl, u);
  const int prev = of_blas_single_begin();
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int t = omp_get_thread_num();
    float *v = (float *)(bufs + per * t), *m = v + np * C * tb, *scratch = m + np * K * tb;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bk = 0; bk < nblk; bk++) {
      const int64_t r0 = bk * rb, r1 = r0 + rb < rows ? r0 + rb : rows, ntile = (r1 - r0) * q.tw;
      if (a->cl) {
        input_block_cl(&q, a->x, r0, r1, v, C * tb, scratch);
        for (int64_t e = 0; e < np; e++)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)ntile, (int)K, (int)C, 1.0f,
                      v + e * C * tb, (int)C, u + e * K * C, (int)K, 0.0f, m + e * K * tb, (int)K);
        output_block_cl(&q, m, K * tb, r0, r1, &post, a->y, scratch);
        continue;
      }
      input_block(&q, a->x, r0, r1, v, tb, scratch);
      for (int64_t e = 0; e < np; e++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)K, (int)ntile, (int)C, 1.0f,
                    u + e * K * C, (int)C, v + e * C * tb, (int)tb, 0.0f, m + e * K * tb, (int)tb);
      output_block(&q, m, tb, r0, r1, &post, a->y, scratch);
    }
  }
  of_blas_single_end(prev);
  of_free(OF_CPU, bufs, per * nt);
  if (ke) of_kept_release(&kept, &ke->k);
  else of_free(OF_CPU, u, ubytes);
  return OF_OK;
}
