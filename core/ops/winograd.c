/* winograd.c -- float32 3x3 convolutions with stride 1 by Winograd's
 * minimal filtering F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for
 * Convolutional Neural Networks", 2016): each 2x2 output tile is
 * A^T [(G g G^T) .* (B^T d B)] A for the 4x4 input tile d, so the products
 * per output fall from 9 to 4 (16 per 2x2 tile), and the sums over input
 * channels become 16 GEMMs: M[e] (K x T) = U[e] (K x C) V[e] (C x T),
 * e = 4 a + b one of the 16 points, T tiles.
 *
 *   U = G g G^T     G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
 *   V = B^T d B     B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *   Y = A^T M A     A^T = [1 1 1 0; 0 1 -1 -1]
 *
 * The transforms add and subtract (G also halves), so F(2x2, 3x3) stays
 * within a few float32 roundings of the direct sum (measured: 1.3e-7 to
 * 5.4e-7 of the largest output against float64, the direct paths 1.2e-7 to
 * 7.9e-7). Larger tiles (F(4x4, 3x3): 2.25x fewer products again) take
 * points up to +-2, transforms that multiply by up to 8, and lose more
 * accuracy; they are not used.
 *
 * Work is split over blocks of whole tile rows (of one or more samples):
 * a thread transforms a block's input into V, runs the 16 GEMMs (OpenBLAS
 * on the calling thread) into M and transforms M into the output rows, so
 * V and M stay in the thread's caches. conv.c decides where this runs
 * (conv.h: of_conv_winograd). */
#include "../internal.h"
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "conv.h"

/* tiles a block aims at (at most: two blocks a thread at least); 96 and
 * 384 ran up to 1.4x slower on ResNet-50's 28x28 and 14x14 layers */
enum { WINO_TILES = 192 };

/* U[e][k][c] = (G g G^T)[e] for g = w[k][c] (3x3) */
static void weights_u(const float *w, int64_t K, int64_t C, float *u) {
  const int64_t kc = K * C;
  const int nt = of_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && kc >= 4096)
  for (int64_t i = 0; i < kc; i++) {
    const float *g = w + i * 9;
    float t[4][3];
    for (int c = 0; c < 3; c++) {
      t[0][c] = g[c];
      t[1][c] = 0.5f * (g[c] + g[3 + c] + g[6 + c]);
      t[2][c] = 0.5f * (g[c] - g[3 + c] + g[6 + c]);
      t[3][c] = g[6 + c];
    }
    for (int r = 0; r < 4; r++) {
      u[(4 * r + 0) * kc + i] = t[r][0];
      u[(4 * r + 1) * kc + i] = 0.5f * (t[r][0] + t[r][1] + t[r][2]);
      u[(4 * r + 2) * kc + i] = 0.5f * (t[r][0] - t[r][1] + t[r][2]);
      u[(4 * r + 3) * kc + i] = t[r][2];
    }
  }
}

typedef struct {
  int64_t N, C, H, W, K, ph, pw, OH, OW, th, tw;
} wgeom;

/* Input row yr of one channel, columns -pw ... -pw + 2 tw + 1 (zeros
 * outside the map), split by parity: e[j] = column 2 j, o[j] = 2 j + 1,
 * j <= tw. The parity split makes every later access unit-stride. */
static inline void load_row(const wgeom *q, const float *xc, int64_t yr, float *restrict e,
                            float *restrict o) {
  const int64_t n = q->tw + 1;
  if (yr < 0 || yr >= q->H) {
    memset(e, 0, (size_t)n * sizeof(float));
    memset(o, 0, (size_t)n * sizeof(float));
    return;
  }
  const float *s = xc + yr * q->W - q->pw;   /* s[j]: column j of the padded row */
  /* interior [j0, j1): columns 2 j and 2 j + 1 both inside [pw, pw + W);
   * the few pairs on either side are checked one by one */
  int64_t j0 = (q->pw + 1) / 2, j1 = (q->pw + q->W - 1) / 2;
  if (j1 > n) j1 = n;
  if (j0 > j1) j0 = j1;
#define EDGE(j)                                                  \
  do {                                                           \
    const int64_t c_ = 2 * (j) - q->pw;                          \
    e[j] = c_ >= 0 && c_ < q->W ? s[2 * (j)] : 0.0f;             \
    o[j] = c_ + 1 >= 0 && c_ + 1 < q->W ? s[2 * (j) + 1] : 0.0f; \
  } while (0)
  for (int64_t j = 0; j < j0; j++) EDGE(j);
  for (int64_t j = j0; j < j1; j++) e[j] = s[2 * j], o[j] = s[2 * j + 1];
  for (int64_t j = j1; j < n; j++) EDGE(j);
#undef EDGE
}

/* V[e][c][t0 + j] for the tiles j of one tile row (sample n, row i) */
__attribute__((target_clones("avx2", "default")))
static void input_row(const wgeom *q, const float *x, int64_t n, int64_t i, float *v, int64_t ldv,
                      int64_t t0, float *scratch) {
  const int64_t m = q->tw + 1, tw = q->tw, estride = q->C * ldv;
  float *E[4], *O[4];
  for (int r = 0; r < 4; r++) E[r] = scratch + 2 * r * m, O[r] = E[r] + m;
  float *te = scratch + 8 * m, *to = te + m;
  for (int64_t c = 0; c < q->C; c++) {
    const float *xc = x + (n * q->C + c) * q->H * q->W;
    const int64_t y0 = 2 * i - q->ph;
    for (int r = 0; r < 4; r++) load_row(q, xc, y0 + r, E[r], O[r]);
    /* row a of B^T d is row L[a] + S[a] * row R[a] (r0 - r2, r1 + r2,
     * r2 - r1, r1 - r3; the sign product is exact), even and odd columns */
    static const int L[4] = {0, 1, 2, 1}, R[4] = {2, 2, 1, 3};
    static const float S[4] = {-1.0f, 1.0f, -1.0f, -1.0f};
    for (int a = 0; a < 4; a++) {   /* then its columns times B */
      const float *el = E[L[a]], *er = E[R[a]], *ol = O[L[a]], *orr = O[R[a]], sg = S[a];
      for (int64_t j = 0; j < m; j++) te[j] = el[j] + sg * er[j], to[j] = ol[j] + sg * orr[j];
      float *restrict v0 = v + (4 * a) * estride + c * ldv + t0, *restrict v1 = v0 + estride;
      float *restrict v2 = v1 + estride, *restrict v3 = v2 + estride;
      for (int64_t j = 0; j < tw; j++) {   /* columns 2 j ... 2 j + 3 = te[j], to[j], te[j+1], to[j+1] */
        v0[j] = te[j] - te[j + 1];
        v1[j] = to[j] + te[j + 1];
        v2[j] = te[j + 1] - to[j];
        v3[j] = to[j] - to[j + 1];
      }
    }
  }
}

/* the output rows 2 i, 2 i + 1 of sample n from M[e][k][t0 + j] */
__attribute__((target_clones("avx2", "default")))
static void output_row(const wgeom *q, const float *m, int64_t ldm, int64_t t0, int64_t n, int64_t i,
                       const float *bias, float *y, float *scratch) {
  const int64_t estride = q->K * ldm, tw = q->tw, OW = q->OW, full = OW / 2;
  const bool two = 2 * i + 1 < q->OH;
  float *restrict a0 = scratch, *restrict a1 = a0 + tw, *restrict b0 = a1 + tw, *restrict b1 = b0 + tw;
  for (int64_t k = 0; k < q->K; k++) {
    const float b = bias ? bias[k] : 0.0f;
    const float *mk = m + k * ldm + t0;
    const float *m0 = mk, *m1 = mk + estride, *m2 = mk + 2 * estride, *m3 = mk + 3 * estride;
    const float *m4 = mk + 4 * estride, *m5 = mk + 5 * estride, *m6 = mk + 6 * estride;
    const float *m7 = mk + 7 * estride, *m8 = mk + 8 * estride, *m9 = mk + 9 * estride;
    const float *m10 = mk + 10 * estride, *m11 = mk + 11 * estride, *m12 = mk + 12 * estride;
    const float *m13 = mk + 13 * estride, *m14 = mk + 14 * estride, *m15 = mk + 15 * estride;
    for (int64_t j = 0; j < tw; j++) {   /* A^T: rows, then columns */
      const float s00 = m0[j] + m4[j] + m8[j], s01 = m1[j] + m5[j] + m9[j];
      const float s02 = m2[j] + m6[j] + m10[j], s03 = m3[j] + m7[j] + m11[j];
      const float s10 = m4[j] - m8[j] - m12[j], s11 = m5[j] - m9[j] - m13[j];
      const float s12 = m6[j] - m10[j] - m14[j], s13 = m7[j] - m11[j] - m15[j];
      a0[j] = s00 + s01 + s02 + b;
      a1[j] = s01 - s02 - s03 + b;
      b0[j] = s10 + s11 + s12 + b;
      b1[j] = s11 - s12 - s13 + b;
    }
    float *ya = y + ((n * q->K + k) * q->OH + 2 * i) * OW, *yb = ya + OW;
    for (int64_t j = 0; j < full; j++) ya[2 * j] = a0[j], ya[2 * j + 1] = a1[j];
    if (OW & 1) ya[2 * full] = a0[full];
    if (two) {
      for (int64_t j = 0; j < full; j++) yb[2 * j] = b0[j], yb[2 * j + 1] = b1[j];
      if (OW & 1) yb[2 * full] = b0[full];
    }
  }
}

of_status of_conv_winograd(const char *op, int64_t N, int64_t C, int64_t H, int64_t W, int64_t K,
                           int64_t ph, int64_t pw, int64_t OH, int64_t OW, const float *x,
                           const float *w, const float *bias, float *y) {
  wgeom q = {N, C, H, W, K, ph, pw, OH, OW, (OH + 1) / 2, (OW + 1) / 2};
  const int64_t rows = N * q.th;                       /* tile rows, all samples */
  int nt = of_threads();
  int64_t rb = WINO_TILES / q.tw;                      /* tile rows a block */
  if (rb > (rows + 2 * nt - 1) / (2 * nt)) rb = (rows + 2 * nt - 1) / (2 * nt);   /* two a thread */
  if (rb < 1) rb = 1;
  const int64_t nblk = (rows + rb - 1) / rb, tb = rb * q.tw;
  if (nt > nblk) nt = (int)nblk;
  const int64_t ubytes = 16 * K * C * (int64_t)sizeof(float);
  const int64_t per = (16 * (C + K) * tb + 10 * (q.tw + 1)) * (int64_t)sizeof(float);
  float *u = of_alloc(OF_CPU, ubytes);
  char *bufs = of_alloc(OF_CPU, per * nt);
  if (!u || !bufs) {
    if (u) of_free(OF_CPU, u, ubytes);
    if (bufs) of_free(OF_CPU, bufs, per * nt);
    return of_fail(OF_ERR_OOM, "%s: out of memory for the Winograd buffers (%lld bytes)", op,
                   (long long)(ubytes + per * nt));
  }
  weights_u(w, K, C, u);
  const int prev = of_blas_single_begin();
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int t = omp_get_thread_num();
    float *v = (float *)(bufs + per * t), *m = v + 16 * C * tb, *scratch = m + 16 * K * tb;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bk = 0; bk < nblk; bk++) {
      const int64_t r0 = bk * rb, r1 = r0 + rb < rows ? r0 + rb : rows, ntile = (r1 - r0) * q.tw;
      for (int64_t r = r0; r < r1; r++)
        input_row(&q, x, r / q.th, r % q.th, v, tb, (r - r0) * q.tw, scratch);
      for (int e = 0; e < 16; e++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)K, (int)ntile, (int)C, 1.0f,
                    u + e * K * C, (int)C, v + e * C * tb, (int)tb, 0.0f, m + e * K * tb, (int)tb);
      for (int64_t r = r0; r < r1; r++)
        output_row(&q, m, tb, (r - r0) * q.tw, r / q.th, r % q.th, bias, y, scratch);
    }
  }
  of_blas_single_end(prev);
  of_free(OF_CPU, bufs, per * nt);
  of_free(OF_CPU, u, ubytes);
  return OF_OK;
}
