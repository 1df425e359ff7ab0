/* conv.c -- convolution (1-, 2- and 3-D), transposed convolution and the
 * weight gradient, on CPU, with autograd.
 *
 * Every convolution is computed as a 3-D one (leading spatial dims of size 1)
 * through vol2col + gemm:
 *   forward      y[n] = W @ col(x[n])                    (per group)
 *   input grad   x[n] = col2vol(W^T @ gy[n])             = conv_transpose
 *   weight grad  gW  += gy[n] @ col(x[n])^T              (summed over n)
 * A 1x1 convolution with stride 1 and no padding needs no columns: the input
 * is its own column matrix. Depthwise convolutions (one input channel per
 * group) skip the columns too: direct per-row kernels. Large float32 3x3
 * stride-1 forwards on AVX2 CPUs take Winograd's F(2x2, 3x3) instead
 * (winograd.c; wino_pick below), others may go to oneDNN (dnnl_auto).
 *
 * Small maps (L = out_sz < 64 outputs per sample, i.e. ResNet's later stages:
 * 4x4 and 2x2 at 64x64 input) take the wide path instead: a chunk of samples
 * at once, columns [C_in/G * k, n * L], ONE gemm per group and chunk, then
 * the result transposed to [N, C, L] (the input grad's and weight grad's
 * grad_output transposed to [C_out, n * L] first). Per sample, a [512 x 4608]
 * x [4608 x 4] gemm spent its time packing the weight. Chunks keep columns
 * plus transposed operand under WIDE_MAX_BYTES. Measured at 2 threads, N 16
 * (forward + input grad + weight grad): [512,512,3x3] on 2x2 15.3 -> 3.9 ms,
 * [256,256,3x3] on 4x4 5.3 -> 3.2 ms; [128,128,3x3] on 8x8 (L = 64) was 3.4
 * per sample vs 4.2 wide, hence the threshold.
 *
 * vol2col/col2vol use gathers (gather_tab): whole-row copies from a
 * zero-bordered plane for rows of ROW_MIN outputs and more, and an offset
 * table per tap for shorter rows; the bounds per output row otherwise cost
 * more than the copies for small maps (ResNet-18 at 64x64: 18% less CPU in
 * the convolutions at 1 thread).
 *
 * Threads (OpenBLAS always on the calling thread inside our OpenMP regions:
 * its own pool competing with OpenMP's spinning threads made a conv 4-7x
 * slower on 2 cores):
 *   batch  samples split evenly over threads, each with its own column
 *          buffer; the weight grad sums per-thread partial results.
 *   team   fewer samples than threads, or an uneven split: all threads on one
 *          sample at a time -- vol2col/col2vol split over channels, each gemm
 *          split along the longer side of its result, barriers in between.
 * Measured for x [16,64,56,56], w [64,64,3,3] at 2 threads: batch 17 + 15 +
 * 16 ms (forward, input grad, weight grad), team 17 + 16 + 16 ms; the sgemm
 * alone takes ~14.7 ms per pass. The wide path splits samples or works as a
 * team (wide_split). Its gemms split by hand beat OpenBLAS's own threads
 * (2 threads; M x N x K, row-major): 512x64x4608 0.97 vs 1.25 ms,
 * 4608x64x512 (A^T) 0.98 vs 2.3 ms, 512x4608x64 (B^T) 0.97 vs 1.03 ms.
 *
 * Autograd: the three ops record nodes whose backward rules are the other two
 * ops (and a sum for the bias), so grads of grads work:
 *   conv:            gx = conv_transpose(gy, W), gW = weight_grad(x, gy)
 *   conv_transpose:  gx = conv(gy, W),           gW = weight_grad(gy, x)
 *   weight_grad:     gx = conv_transpose(gy, G), ggy = conv(x, G)
 * The internal entry points take explicit spatial sizes for their results,
 * which is how output_padding and truncated outputs are expressed. */
#include "../autograd.h"
#include "../device.h"
#include "../device/dnnl.h"
#include "simd.h"
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include "family.h"
#include "conv.h"

/* ---- arguments and geometry ---- */

typedef struct {
  char op[32];              /* "conv2d", "conv_transpose2d", ... for messages */
  int32_t nsp;              /* spatial dims: 1, 2 or 3 */
  int64_t groups;
  int64_t stride[3], pad[3], dil[3];
} conv_args;

/* One convolution seen as 3-D: leading spatial dims padded with 1. In the
 * terms of the forward conv: input [N, CI, in], weight [CO, CI/G, k],
 * output [N, CO, out]. */
typedef struct {
  int64_t N, CI, CO, G;
  int64_t in[3], out[3], k[3], s[3], p[3], d[3];
  int64_t in_sz, out_sz, k_sz;
  bool direct;              /* 1x1, stride 1, no padding: no columns */
  int parts;                /* gemm parts of a team (see gemm_groups); 1 outside one */
  const struct gather_tab *tab;   /* set by conv_run: the gather path, or NULL */
} geom;

/* The gather paths of vol2col/col2vol (per-row bounds cost a call or a
 * branch per output row, which dominated for small maps):
 *   rows   (output rows of >= ROW_MIN): a channel's input is copied into a
 *          zero-bordered plane (padded by p on every side; the input itself
 *          when p is 0); the columns of tap r and output row j are then one
 *          plain (strided) row copy from plane[tap[r] + pos[j * OW]], and
 *          col2vol adds rows back into a zeroed plane.
 *   table  (short rows): idx[r, l] is the input offset that column (r, l)
 *          reads, or -1 (padding): one gather per tap; col2vol
 *          scatters back the same way (no conflicts within a tap). With unit
 *          strides col2vol uses the inverse, idx[r, i] = the column of tap r
 *          that reads input i, or -1, and gathers (AVX-512 scatters are
 *          slower); with strides most of the inverse would be -1. Sums run
 *          in tap order either way. */
typedef struct gather_tab {
  bool rows;
  int64_t Hp, Wp, plane;    /* rows: padded height, width; elements of a plane */
  bool padded;              /* rows: false when the input is its own plane */
  int32_t *pos, *tap;       /* rows: [out_sz], [k_sz] */
  char *pads;               /* rows: one plane per thread (when padded) */
  int32_t *idx;             /* table: [k_sz, out_sz], or [k_sz, in_sz] when inv */
  bool inv;                 /* table: the inverse (col2vol with unit strides) */
} gather_tab;

static void geom_init(geom *g, const conv_args *a, int64_t N, int64_t CI, int64_t CO,
                      const int64_t *in, const int64_t *k, const int64_t *out) {
  g->N = N, g->CI = CI, g->CO = CO, g->G = a->groups;
  int32_t lead = 3 - a->nsp;
  g->direct = true;
  for (int32_t d = 0; d < 3; d++) {
    bool real = d >= lead;
    int32_t j = d - lead;
    g->in[d] = real ? in[j] : 1;
    g->out[d] = real ? out[j] : 1;
    g->k[d] = real ? k[j] : 1;
    g->s[d] = real ? a->stride[j] : 1;
    g->p[d] = real ? a->pad[j] : 0;
    g->d[d] = real ? a->dil[j] : 1;
    if (g->k[d] != 1 || g->s[d] != 1 || g->p[d] != 0) g->direct = false;
  }
  g->tab = NULL;
  g->parts = 1;
  g->in_sz = g->in[0] * g->in[1] * g->in[2];
  g->out_sz = g->out[0] * g->out[1] * g->out[2];
  g->k_sz = g->k[0] * g->k[1] * g->k[2];
  if (g->direct && g->out_sz != g->in_sz) g->direct = false;
}

/* ---- openblas threads ---- */

/* OpenBLAS (pthreads build) runs every call on its own thread pool; inside
 * our batch-parallel regions each call must stay on the calling thread. */
int of_blas_single_begin(void) {
  int prev = openblas_get_num_threads();
  if (prev != 1) openblas_set_num_threads(1);
  return prev;
}
void of_blas_single_end(int prev) {
  if (prev != 1) openblas_set_num_threads(prev);
}

/* ---- kernels, instantiated for float and double ---- */

/* Range [lo, hi) of output positions o whose input position o*s + off lies
 * in [0, n). */
static inline void valid_range(int64_t off, int64_t s, int64_t n, int64_t nout, int64_t *lo,
                               int64_t *hi) {
  int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
  int64_t h = n - 1 - off < 0 ? 0 : (n - 1 - off) / s + 1;
  if (h > nout) h = nout;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

/* A thread's share [lo, hi) of n items. */
static inline void share(int64_t n, int tid, int nth, int64_t *lo, int64_t *hi) {
  *lo = n * tid / nth;
  *hi = n * (tid + 1) / nth;
}

static inline void team_barrier(int nth) {
  if (nth > 1) {
#pragma omp barrier
  }
}

/* Gather-path kernels over channels [c0, c1), compiled per instruction set
 * (vector gathers: AVX2, AVX-512); no library call per row (loop
 * distribution off). Columns of channel c start at col + c * K * ld. */
enum { ROW_MIN = 8 };
/* rows mode for one stride: NAME_g gathers rows (GET, from sr into dr),
 * NAME_s adds them back (PUT); for a fixed tap the targets are distinct */
#define ROWS_LOOPS(T, NAME, GET, PUT)                                                      \
  __attribute__((target_clones("avx512f", "avx2", "default"),                              \
                 OF_GCC_OPTIMIZE("no-tree-loop-distribute-patterns")))                            \
  static void NAME##_g(T *restrict col, int64_t ld, const T *restrict pl,                  \
                       const gather_tab *t, int64_t K, int64_t L, int64_t OW, int64_t sw) { \
    (void)sw;                                                                              \
    for (int64_t r = 0; r < K; r++) {                                                      \
      const T *restrict src = pl + t->tap[r];                                              \
      for (int64_t j = 0; j < L; j += OW) {                                                \
        const T *restrict sr = src + t->pos[j];                                            \
        T *restrict dr = col + r * ld + j;                                                 \
        _Pragma("omp simd")                                                                \
        for (int64_t o = 0; o < OW; o++) GET;                                              \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
  __attribute__((target_clones("avx512f", "avx2", "default"),                              \
                 OF_GCC_OPTIMIZE("no-tree-loop-distribute-patterns")))                            \
  static void NAME##_s(T *restrict pl, const T *restrict col, int64_t ld,                  \
                       const gather_tab *t, int64_t K, int64_t L, int64_t OW, int64_t sw) { \
    (void)sw;                                                                              \
    for (int64_t r = 0; r < K; r++) {                                                      \
      T *restrict dst = pl + t->tap[r];                                                    \
      for (int64_t j = 0; j < L; j += OW) {                                                \
        T *restrict dr = dst + t->pos[j];                                                  \
        const T *restrict sr = col + r * ld + j;                                           \
        _Pragma("omp simd")                                                                \
        for (int64_t o = 0; o < OW; o++) PUT;                                              \
      }                                                                                    \
    }                                                                                      \
  }
#define GATHER_KERNELS(T)                                                                  \
  /* the input channel x (in_sz elements) into the interior of the thread's plane */       \
  static const T *fill_plane_##T(const geom *g, const T *x) {                              \
    const gather_tab *t = g->tab;                                                          \
    if (!t->padded) return x;                                                              \
    T *pl = (T *)t->pads + (int64_t)omp_get_thread_num() * t->plane;                       \
    const int64_t H = g->in[1], W = g->in[2];                                              \
    for (int64_t id = 0; id < g->in[0]; id++)                                              \
      for (int64_t ih = 0; ih < H; ih++) {                                                 \
        T *d = pl + ((id + g->p[0]) * t->Hp + ih + g->p[1]) * t->Wp + g->p[2];             \
        const T *sx = x + (id * H + ih) * W;                                               \
        for (int64_t iw = 0; iw < W; iw++) d[iw] = sx[iw];                                 \
      }                                                                                    \
    return pl;                                                                             \
  }                                                                                        \
  /* rows: col[r, j*OW + o] = pl[tap[r] + pos[j*OW] + o*sw] and back, per stride */        \
  ROWS_LOOPS(T, rows_s1_##T, dr[o] = sr[o], dr[o] += sr[o])                                \
  ROWS_LOOPS(T, rows_s2_##T, dr[o] = sr[2 * o], dr[2 * o] += sr[o])                        \
  ROWS_LOOPS(T, rows_sn_##T, dr[o] = sr[o * sw], dr[o * sw] += sr[o])                      \
  static void rows_gather_##T(T *col, int64_t ld, const T *pl, const gather_tab *t,        \
                              int64_t K, int64_t L, int64_t OW, int64_t sw) {              \
    if (sw == 1) rows_s1_##T##_g(col, ld, pl, t, K, L, OW, sw);                            \
    else if (sw == 2) rows_s2_##T##_g(col, ld, pl, t, K, L, OW, sw);                       \
    else rows_sn_##T##_g(col, ld, pl, t, K, L, OW, sw);                                    \
  }                                                                                        \
  static void rows_scatter_##T(T *pl, const T *col, int64_t ld, const gather_tab *t,       \
                               int64_t K, int64_t L, int64_t OW, int64_t sw) {             \
    if (sw == 1) rows_s1_##T##_s(pl, col, ld, t, K, L, OW, sw);                            \
    else if (sw == 2) rows_s2_##T##_s(pl, col, ld, t, K, L, OW, sw);                       \
    else rows_sn_##T##_s(pl, col, ld, t, K, L, OW, sw);                                    \
  }                                                                                        \
  /* table: col[c, r, l] = x[c, idx[r, l]] (0 where -1) */                                 \
  __attribute__((target_clones("avx512f", "avx2", "default")))                             \
  static void table_gather_##T(T *restrict col, int64_t ld, const T *restrict x,           \
                               int64_t in_sz, int64_t c0, int64_t c1,                      \
                               const int32_t *restrict idx, int64_t K, int64_t L) {        \
    for (int64_t c = c0; c < c1; c++) {                                                    \
      const T *restrict xc = x + c * in_sz;                                                \
      for (int64_t r = 0; r < K; r++) {                                                    \
        T *restrict dst = col + (c * K + r) * ld;                                          \
        const int32_t *restrict ix = idx + r * L;                                          \
        _Pragma("omp simd") /* (every lane loads, -1 clamped to 0, then a select:          \
                               masked gathers did not vectorise) */                        \
        for (int64_t l = 0; l < L; l++) {                                                  \
          int32_t k = ix[l];                                                               \
          T v = xc[k & ~(k >> 31)]; /* 0 for -1 */                                         \
          dst[l] = k < 0 ? (T)0 : v;                                                       \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
  /* table: x[c, idx[r, l]] += col[c, r, l] (where not -1), x zeroed first */              \
  __attribute__((target_clones("avx512f", "avx2", "default")))                             \
  static void table_scatter_##T(T *restrict x, int64_t in_sz, const T *restrict col,       \
                                int64_t ld, int64_t c0, int64_t c1,                        \
                                const int32_t *restrict idx, int64_t K, int64_t L) {       \
    for (int64_t c = c0; c < c1; c++) {                                                    \
      T *restrict xc = x + c * in_sz;                                                      \
      for (int64_t i = 0; i < in_sz; i++) xc[i] = 0;                                       \
      for (int64_t r = 0; r < K; r++) {                                                    \
        const T *restrict src = col + (c * K + r) * ld;                                    \
        const int32_t *restrict ix = idx + r * L;                                          \
        _Pragma("omp simd")                                                                \
        for (int64_t l = 0; l < L; l++)                                                    \
          if (ix[l] >= 0) xc[ix[l]] += src[l];                                             \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
  /* table: x[c, i] = sum over taps r of col[c, r, idx[r, i]] (where not -1) */            \
  __attribute__((target_clones("avx512f", "avx2", "default")))                             \
  static void table_col2vol_##T(T *restrict x, int64_t in_sz, const T *restrict col,       \
                                int64_t ld, int64_t c0, int64_t c1,                        \
                                const int32_t *restrict idx, int64_t K) {                  \
    for (int64_t c = c0; c < c1; c++) {                                                    \
      T *restrict xc = x + c * in_sz;                                                      \
      for (int64_t i = 0; i < in_sz; i++) xc[i] = 0;                                       \
      for (int64_t r = 0; r < K; r++) {                                                    \
        const T *restrict src = col + (c * K + r) * ld;                                    \
        const int32_t *restrict ix = idx + r * in_sz;                                      \
        _Pragma("omp simd")                                                                \
        for (int64_t i = 0; i < in_sz; i++) {                                              \
          int32_t k = ix[i];                                                               \
          T v = src[k & ~(k >> 31)];                                                       \
          xc[i] += k < 0 ? (T)0 : v;                                                       \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }
GATHER_KERNELS(float)
GATHER_KERNELS(double)

/* Kernels work on a thread's share: `tid` of `nth` threads working on the
 * same sample (nth == 1: the whole sample). */
#define CONV_KERNELS(T, GEMM)                                                               \
  /* col[(c, kd, kh, kw), (od, oh, ow)] = x[c, od*s + kd*d - p, ...] (0 outside),          \
   * channels [c0, c1); rows `ld` apart */                                                 \
  static void vol2col_##T(const geom *g, const T *x, T *col, int64_t ld, int64_t c0,       \
                          int64_t c1) {                                                    \
    if (g->tab && !g->tab->rows) {                                                         \
      table_gather_##T(col, ld, x, g->in_sz, c0, c1, g->tab->idx, g->k_sz, g->out_sz);     \
      return;                                                                              \
    }                                                                                      \
    if (g->tab) {                                                                          \
      for (int64_t c = c0; c < c1; c++) {                                                  \
        const T *pl = fill_plane_##T(g, x + c * g->in_sz);                                 \
        rows_gather_##T(col + c * g->k_sz * ld, ld, pl, g->tab, g->k_sz, g->out_sz,        \
                        g->out[2], g->s[2]);                                               \
      }                                                                                    \
      return;                                                                              \
    }                                                                                      \
    const int64_t D = g->in[0], H = g->in[1], W = g->in[2];                                \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2];                          \
    const int64_t KD = g->k[0], KH = g->k[1], KW = g->k[2];                                \
    const int64_t sw = g->s[2];                                                            \
    for (int64_t c = c0; c < c1; c++) {                                                    \
      for (int64_t kd = 0; kd < KD; kd++)                                                  \
        for (int64_t kh = 0; kh < KH; kh++)                                                \
          for (int64_t kw = 0; kw < KW; kw++) {                                            \
            T *dst = col + (((c * KD + kd) * KH + kh) * KW + kw) * ld;                     \
            int64_t offw = kw * g->d[2] - g->p[2], lo, hi;                                 \
            valid_range(offw, sw, W, OW, &lo, &hi);                                        \
            for (int64_t od = 0; od < OD; od++) {                                          \
              int64_t id = od * g->s[0] + kd * g->d[0] - g->p[0];                          \
              if (id < 0 || id >= D) {                                                     \
                memset(dst, 0, sizeof(T) * (size_t)(OH * OW));                             \
                dst += OH * OW;                                                            \
                continue;                                                                  \
              }                                                                            \
              for (int64_t oh = 0; oh < OH; oh++, dst += OW) {                             \
                int64_t ih = oh * g->s[1] + kh * g->d[1] - g->p[1];                        \
                if (ih < 0 || ih >= H) {                                                   \
                  memset(dst, 0, sizeof(T) * (size_t)OW);                                  \
                  continue;                                                                \
                }                                                                          \
                const T *src = x + ((c * D + id) * H + ih) * W + offw;                     \
                for (int64_t ow = 0; ow < lo; ow++) dst[ow] = 0;                           \
                if (sw == 1 && hi - lo >= 16)                                              \
                  memcpy(dst + lo, src + lo, sizeof(T) * (size_t)(hi - lo));               \
                else /* short rows: a call per row would cost more than the copy */        \
                  for (int64_t ow = lo; ow < hi; ow++) dst[ow] = src[ow * sw];             \
                for (int64_t ow = hi; ow < OW; ow++) dst[ow] = 0;                          \
              }                                                                            \
            }                                                                              \
          }                                                                                \
    }                                                                                      \
  }                                                                                        \
                                                                                           \
  /* x[c, ...] = sum of the columns that read it, channels [c0, c1) (overwritten); rows    \
   * `ld` apart */                                                                         \
  static void col2vol_##T(const geom *g, const T *col, T *x, int64_t ld, int64_t c0,       \
                          int64_t c1) {                                                    \
    if (g->tab && !g->tab->rows) {                                                         \
      if (g->tab->inv)                                                                     \
        table_col2vol_##T(x, g->in_sz, col, ld, c0, c1, g->tab->idx, g->k_sz);             \
      else                                                                                 \
        table_scatter_##T(x, g->in_sz, col, ld, c0, c1, g->tab->idx, g->k_sz, g->out_sz);  \
      return;                                                                              \
    }                                                                                      \
    if (g->tab) {                                                                          \
      const gather_tab *t = g->tab;                                                        \
      for (int64_t c = c0; c < c1; c++) {                                                  \
        T *xc = x + c * g->in_sz;                                                          \
        T *pl = t->padded ? (T *)t->pads + (int64_t)omp_get_thread_num() * t->plane : xc;  \
        memset(pl, 0, sizeof(T) * (size_t)t->plane);                                       \
        rows_scatter_##T(pl, col + c * g->k_sz * ld, ld, t, g->k_sz, g->out_sz, g->out[2], \
                         g->s[2]);                                                         \
        if (!t->padded) continue;                                                          \
        const int64_t H = g->in[1], W = g->in[2];                                          \
        for (int64_t id = 0; id < g->in[0]; id++)                                          \
          for (int64_t ih = 0; ih < H; ih++) {                                             \
            const T *sp = pl + ((id + g->p[0]) * t->Hp + ih + g->p[1]) * t->Wp + g->p[2];  \
            T *d = xc + (id * H + ih) * W;                                                 \
            for (int64_t iw = 0; iw < W; iw++) d[iw] = sp[iw];                             \
          }                                                                                \
      }                                                                                    \
      return;                                                                              \
    }                                                                                      \
    const int64_t D = g->in[0], H = g->in[1], W = g->in[2];                                \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2];                          \
    const int64_t KD = g->k[0], KH = g->k[1], KW = g->k[2];                                \
    const int64_t sw = g->s[2];                                                            \
    for (int64_t c = c0; c < c1; c++) {                                                    \
      memset(x + c * g->in_sz, 0, sizeof(T) * (size_t)g->in_sz);                           \
      for (int64_t kd = 0; kd < KD; kd++)                                                  \
        for (int64_t kh = 0; kh < KH; kh++)                                                \
          for (int64_t kw = 0; kw < KW; kw++) {                                            \
            const T *src = col + (((c * KD + kd) * KH + kh) * KW + kw) * ld;               \
            int64_t offw = kw * g->d[2] - g->p[2], lo, hi;                                 \
            valid_range(offw, sw, W, OW, &lo, &hi);                                        \
            for (int64_t od = 0; od < OD; od++) {                                          \
              int64_t id = od * g->s[0] + kd * g->d[0] - g->p[0];                          \
              if (id < 0 || id >= D) {                                                     \
                src += OH * OW;                                                            \
                continue;                                                                  \
              }                                                                            \
              for (int64_t oh = 0; oh < OH; oh++, src += OW) {                             \
                int64_t ih = oh * g->s[1] + kh * g->d[1] - g->p[1];                        \
                if (ih < 0 || ih >= H) continue;                                           \
                T *dst = x + ((c * D + id) * H + ih) * W + offw;                           \
                if (sw == 1)                                                               \
                  for (int64_t ow = lo; ow < hi; ow++) dst[ow] += src[ow];                 \
                else                                                                       \
                  for (int64_t ow = lo; ow < hi; ow++) dst[ow * sw] += src[ow];            \
              }                                                                            \
            }                                                                              \
          }                                                                                \
    }                                                                                      \
  }                                                                                        \
                                                                                           \
  /* C = op(A) @ op(B) + beta C, part `part` of `nparts` (split along the longer            \
   * side of C) */                                                                         \
  static void gemm_part_##T(int part, int nparts, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb,   \
                            int64_t M, int64_t N, int64_t K, const T *A, int64_t lda,      \
                            const T *B, int64_t ldb, T beta, T *Cm, int64_t ldc) {         \
    int64_t lo = 0, hi = 0;                                                                \
    if (nparts > 1 && N >= M) {                                                            \
      share(N, part, nparts, &lo, &hi);                                                    \
      B += tb == CblasNoTrans ? lo : lo * ldb;                                             \
      Cm += lo;                                                                            \
      N = hi - lo;                                                                         \
    } else if (nparts > 1) {                                                               \
      share(M, part, nparts, &lo, &hi);                                                    \
      A += ta == CblasNoTrans ? lo * lda : lo;                                             \
      Cm += lo * ldc;                                                                      \
      M = hi - lo;                                                                         \
    }                                                                                      \
    if (M <= 0 || N <= 0) return;                                                          \
    if (K == 0) {                                                                          \
      for (int64_t i = 0; i < M; i++)                                                      \
        for (int64_t j = 0; j < N; j++) Cm[i * ldc + j] = beta == 0 ? 0 : Cm[i * ldc + j] * beta; \
      return;                                                                              \
    }                                                                                      \
    GEMM(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, 1, A, (int)lda, B, (int)ldb, beta,  \
         Cm, (int)ldc);                                                                    \
  }                                                                                        \
                                                                                           \
  /* the G group gemms: whole groups per thread when there are enough, else each          \
   * split into `parts` (the team's size as of_threads() planned it); the threads          \
   * actually running (nth, 1 on a worker of the graph scheduler, where OpenMP does        \
   * not nest) take parts tid, tid + nth, ... A gemm's bits depend on how its result        \
   * is split (OpenBLAS's edge tiles sum differently), never on who runs a part. */        \
  static void gemm_groups_##T(int tid, int nth, int parts, int64_t G, CBLAS_TRANSPOSE ta,   \
                              CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K,         \
                              const T *A, int64_t lda, int64_t ag, const T *B, int64_t ldb, \
                              int64_t bg, T beta, T *Cm, int64_t ldc, int64_t cg) {        \
    if (G >= parts) {                                                                      \
      int64_t lo, hi;                                                                      \
      share(G, tid, nth, &lo, &hi);                                                        \
      for (int64_t grp = lo; grp < hi; grp++)                                              \
        gemm_part_##T(0, 1, ta, tb, M, N, K, A + grp * ag, lda, B + grp * bg, ldb, beta,    \
                      Cm + grp * cg, ldc);                                                 \
    } else {                                                                               \
      for (int64_t grp = 0; grp < G; grp++)                                                \
        for (int part = tid; part < parts; part += nth)                                    \
          gemm_part_##T(part, parts, ta, tb, M, N, K, A + grp * ag, lda, B + grp * bg, ldb, \
                        beta, Cm + grp * cg, ldc);                                         \
    }                                                                                      \
  }                                                                                        \
                                                                                           \
  /* y[n] = W @ col(x[n]) + b */                                                           \
  static void fwd_sample_##T(const geom *g, const T *x, const T *w, const T *b, T *y,       \
                             T *col, int tid, int nth) {                                   \
    const int64_t M = g->CO / g->G, K = g->CI / g->G * g->k_sz, L = g->out_sz;             \
    int64_t lo, hi;                                                                        \
    const T *src = x;                                                                      \
    if (!g->direct) {                                                                      \
      share(g->CI, tid, nth, &lo, &hi);                                                    \
      vol2col_##T(g, x, col, L, lo, hi);                                                   \
      src = col;                                                                           \
    }                                                                                      \
    if (b) {                                                                               \
      share(g->CO, tid, nth, &lo, &hi);                                                    \
      for (int64_t c = lo; c < hi; c++)                                                    \
        for (int64_t i = 0; i < L; i++) y[c * L + i] = b[c];                               \
    }                                                                                      \
    if (b || !g->direct) team_barrier(nth);                                                \
    gemm_groups_##T(tid, nth, g->parts, g->G, CblasNoTrans, CblasNoTrans, M, L, K, w, K,   \
                    M * K, src, L, K * L, b ? 1 : 0, y, L, M * L);                         \
    team_barrier(nth);                                                                     \
  }                                                                                        \
                                                                                           \
  /* gx[n] = col2vol(W^T @ gy[n]) + b */                                                   \
  static void bwd_input_sample_##T(const geom *g, const T *gy, const T *w, const T *b,      \
                                   T *gx, T *col, int tid, int nth) {                      \
    const int64_t M = g->CO / g->G, K = g->CI / g->G * g->k_sz, L = g->out_sz;             \
    T *dst = g->direct ? gx : col;                                                         \
    gemm_groups_##T(tid, nth, g->parts, g->G, CblasTrans, CblasNoTrans, K, L, M, w, K,     \
                    M * K, gy, L, M * L, 0, dst, L, K * L);                                \
    if (g->direct && !b) {                                                                 \
      team_barrier(nth);                                                                   \
      return;                                                                              \
    }                                                                                      \
    team_barrier(nth);                                                                     \
    int64_t lo, hi;                                                                        \
    share(g->CI, tid, nth, &lo, &hi);                                                      \
    if (!g->direct) col2vol_##T(g, col, gx, L, lo, hi);                                    \
    if (b)                                                                                 \
      for (int64_t c = lo; c < hi; c++)                                                    \
        for (int64_t i = 0; i < g->in_sz; i++) gx[c * g->in_sz + i] += b[c];               \
    team_barrier(nth);                                                                     \
  }                                                                                        \
                                                                                           \
  /* gw += gy[n] @ col(x[n])^T */                                                          \
  static void bwd_weight_sample_##T(const geom *g, const T *x, const T *gy, T *gw, T *col,  \
                                    int tid, int nth) {                                    \
    const int64_t M = g->CO / g->G, K = g->CI / g->G * g->k_sz, L = g->out_sz;             \
    const T *src = x;                                                                      \
    if (!g->direct) {                                                                      \
      int64_t lo, hi;                                                                      \
      share(g->CI, tid, nth, &lo, &hi);                                                    \
      vol2col_##T(g, x, col, L, lo, hi);                                                   \
      src = col;                                                                           \
      team_barrier(nth);                                                                   \
    }                                                                                      \
    gemm_groups_##T(tid, nth, g->parts, g->G, CblasNoTrans, CblasTrans, M, K, L, gy, L,    \
                    M * L, src, L, K * L, 1, gw, K, M * K);                                \
    team_barrier(nth);                                                                     \
    }                                                                                      \
                                                                                           \
  /* Wide kernels: a chunk of nb samples at once, one gemm per group. Columns              \
   * [C_in * k, nb * L]: sample n's L columns at n * L. The thread's share of the          \
   * (sample, channel) pairs [lo, hi) of nb x C is walked as runs within one sample. */    \
  static void to_cols_##T(const geom *g, int64_t nb, const T *x, T *col, int tid, int nth) { \
    const int64_t C = g->CI, L = g->out_sz, NL = nb * L;                                   \
    int64_t lo, hi;                                                                        \
    if (g->tab && !g->tab->rows && nb > 1 && nb * C * g->in_sz <= INT32_MAX) {              \
      /* the table over the chunk's samples, idx2[r, n * L + l] = n * C * in_sz +          \
       * idx[r, l]: one gather of nb * L per (channel, tap) instead of nb of L (the         \
       * maps here are tiny: L = 4 for 2x2) */                                             \
      const int64_t K = g->k_sz;                                                           \
      int32_t *ix2 = malloc(sizeof(int32_t) * (size_t)(K * NL));                           \
      if (ix2) {                                                                           \
        for (int64_t r = 0; r < K; r++)                                                    \
          for (int64_t n = 0; n < nb; n++)                                                 \
            for (int64_t l = 0; l < L; l++) {                                              \
              int32_t k = g->tab->idx[r * L + l];                                          \
              ix2[r * NL + n * L + l] = k < 0 ? -1 : (int32_t)(n * C * g->in_sz + k);      \
            }                                                                              \
        share(C, tid, nth, &lo, &hi);                                                      \
        table_gather_##T(col, NL, x, g->in_sz, lo, hi, ix2, K, NL);                        \
        free(ix2);                                                                         \
        return;                                                                            \
      }                                                                                    \
    }                                                                                      \
    share(nb * C, tid, nth, &lo, &hi);                                                     \
    while (lo < hi) {                                                                      \
      int64_t n = lo / C, c0 = lo % C, c1 = c0 + (hi - lo) < C ? c0 + (hi - lo) : C;       \
      const T *xn = x + n * C * g->in_sz;                                                  \
      if (g->direct)                                                                       \
        for (int64_t c = c0; c < c1; c++)                                                  \
          memcpy(col + c * NL + n * L, xn + c * L, sizeof(T) * (size_t)L);                 \
      else                                                                                 \
        vol2col_##T(g, xn, col + n * L, NL, c0, c1);                                       \
      lo += c1 - c0;                                                                       \
    }                                                                                      \
  }                                                                                        \
                                                                                           \
  /* t[c, n * L + l] = y[n, c, l] (dir 0) or back (dir 1, plus bias[c] when given), for C  \
   * channels of planes of L */                                                            \
  static void transpose_nc_##T(int64_t nb, int64_t C, int64_t L, T *y, T *t, const T *bias, \
                               int dir, int tid, int nth) {                                \
    int64_t lo, hi, NL = nb * L;                                                           \
    share(nb * C, tid, nth, &lo, &hi);                                                     \
    for (int64_t i = lo; i < hi; i++) {                                                    \
      int64_t n = i / C, c = i % C;                                                        \
      T *yp = y + i * L, *tp = t + c * NL + n * L;                                         \
      if (dir == 0)                                                                        \
        memcpy(tp, yp, sizeof(T) * (size_t)L);                                             \
      else if (!bias)                                                                      \
        memcpy(yp, tp, sizeof(T) * (size_t)L);                                             \
      else                                                                                 \
        for (int64_t l = 0; l < L; l++) yp[l] = tp[l] + bias[c];                           \
    }                                                                                      \
  }                                                                                        \
                                                                                           \
  /* y[n] = W @ col(x[n]) + b for nb samples; ybuf [C_out, nb * L] */                      \
  static void wide_fwd_##T(const geom *g, int64_t nb, const T *x, const T *w, const T *b,  \
                           T *y, T *col, T *ybuf, int tid, int nth) {                      \
    const int64_t M = g->CO / g->G, K = g->CI / g->G * g->k_sz, NL = nb * g->out_sz;       \
    to_cols_##T(g, nb, x, col, tid, nth);                                                  \
    team_barrier(nth);                                                                     \
    gemm_groups_##T(tid, nth, g->parts, g->G, CblasNoTrans, CblasNoTrans, M, NL, K, w, K,  \
                    M * K, col, NL, K * NL, 0, ybuf, NL, M * NL);                          \
    team_barrier(nth);                                                                     \
    transpose_nc_##T(nb, g->CO, g->out_sz, y, ybuf, b, 1, tid, nth);                       \
  }                                                                                        \
                                                                                           \
  /* gx[n] = col2vol(W^T @ gy[n]) + b for nb samples; gybuf [C_out, nb * L] */             \
  static void wide_bwd_input_##T(const geom *g, int64_t nb, const T *gy, const T *w,       \
                                 const T *b, T *gx, T *col, T *gybuf, int tid, int nth) {  \
    const int64_t M = g->CO / g->G, K = g->CI / g->G * g->k_sz, L = g->out_sz, NL = nb * L; \
    transpose_nc_##T(nb, g->CO, L, (T *)gy, gybuf, NULL, 0, tid, nth);                     \
    team_barrier(nth);                                                                     \
    gemm_groups_##T(tid, nth, g->parts, g->G, CblasTrans, CblasNoTrans, K, NL, M, w, K,    \
                    M * K, gybuf, NL, M * NL, 0, col, NL, K * NL);                         \
    team_barrier(nth);                                                                     \
    if (g->direct) {                                                                       \
      transpose_nc_##T(nb, g->CI, L, gx, col, b, 1, tid, nth);                             \
      return;                                                                              \
    }                                                                                      \
    const int64_t C = g->CI;                                                               \
    int64_t lo, hi;                                                                        \
    if (g->tab && !g->tab->rows && g->tab->inv && nb > 1 && NL <= INT32_MAX) {              \
      /* as to_cols: the inverse table over the chunk, idx2[r, n * S + i] = n * L +        \
       * idx[r, i]; a channel's sums for all nb samples in one pass per tap, then          \
       * copied out per sample */                                                          \
      const int64_t Kt = g->k_sz, S = g->in_sz, NS = nb * S;                               \
      int32_t *ix2 = malloc(sizeof(int32_t) * (size_t)(Kt * NS));                          \
      T *acc = malloc(sizeof(T) * (size_t)NS);                                             \
      if (ix2 && acc) {                                                                    \
        for (int64_t r = 0; r < Kt; r++)                                                   \
          for (int64_t n = 0; n < nb; n++)                                                 \
            for (int64_t i = 0; i < S; i++) {                                              \
              int32_t k = g->tab->idx[r * S + i];                                          \
              ix2[r * NS + n * S + i] = k < 0 ? -1 : (int32_t)(n * L + k);                 \
            }                                                                              \
        share(C, tid, nth, &lo, &hi);                                                      \
        for (int64_t c = lo; c < hi; c++) {                                                \
          table_col2vol_##T(acc, NS, col + c * Kt * NL, NL, 0, 1, ix2, Kt);                \
          for (int64_t n = 0; n < nb; n++) {                                               \
            T *dst = gx + (n * C + c) * S;                                                 \
            const T *src = acc + n * S;                                                    \
            if (b)                                                                         \
              for (int64_t i = 0; i < S; i++) dst[i] = src[i] + b[c];                      \
            else                                                                           \
              for (int64_t i = 0; i < S; i++) dst[i] = src[i];                             \
          }                                                                                \
        }                                                                                  \
        free(ix2);                                                                         \
        free(acc);                                                                         \
        return;                                                                            \
      }                                                                                    \
      free(ix2);                                                                           \
      free(acc);                                                                           \
    }                                                                                      \
    share(nb * C, tid, nth, &lo, &hi);                                                     \
    while (lo < hi) {                                                                      \
      int64_t n = lo / C, c0 = lo % C, c1 = c0 + (hi - lo) < C ? c0 + (hi - lo) : C;       \
      T *xn = gx + n * C * g->in_sz;                                                       \
      col2vol_##T(g, col + n * L, xn, NL, c0, c1);                                         \
      if (b)                                                                               \
        for (int64_t c = c0; c < c1; c++)                                                  \
          for (int64_t i = 0; i < g->in_sz; i++) xn[c * g->in_sz + i] += b[c];             \
      lo += c1 - c0;                                                                       \
    }                                                                                      \
  }                                                                                        \
                                                                                           \
  /* gw (+)= gy @ col(x)^T over nb samples (beta 0: overwrite) */                          \
  static void wide_bwd_weight_##T(const geom *g, int64_t nb, const T *x, const T *gy,      \
                                  T *gw, T beta, T *col, T *gybuf, int tid, int nth) {     \
    const int64_t M = g->CO / g->G, K = g->CI / g->G * g->k_sz, NL = nb * g->out_sz;       \
    to_cols_##T(g, nb, x, col, tid, nth);                                                  \
    transpose_nc_##T(nb, g->CO, g->out_sz, (T *)gy, gybuf, NULL, 0, tid, nth);             \
    team_barrier(nth);                                                                     \
    gemm_groups_##T(tid, nth, g->parts, g->G, CblasNoTrans, CblasTrans, M, K, NL, gybuf,   \
                    NL, M * NL, col, NL, K * NL, beta, gw, K, M * K);                      \
    team_barrier(nth);                                                                     \
  }

CONV_KERNELS(float, cblas_sgemm)
CONV_KERNELS(double, cblas_dgemm)

typedef enum { RUN_FWD, RUN_BWD_INPUT, RUN_BWD_WEIGHT } run_kind;

/* ---- depthwise (every group one input channel): direct kernels ----
 * Output channel co reads input channel co / mult. Per output row, each
 * kernel tap updates the whole row (a 2-D 3x3 forward adds all nine in one
 * pass over the row: dw3_row); the column matrix would be k_sz times the
 * input for a gemm with a single row. */

/* Range of kernel taps t with 0 <= o*s + t*d - p < n, for an output o. */
static inline void tap_range(int64_t o, int64_t s, int64_t d, int64_t p, int64_t k, int64_t n,
                             int64_t *lo, int64_t *hi) {
  int64_t start = o * s - p;
  int64_t l = start >= 0 ? 0 : (-start + d - 1) / d;
  int64_t h = n - 1 - start < 0 ? 0 : (n - 1 - start) / d + 1;
  if (h > k) h = k;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

/* Row helpers for the depthwise kernels, compiled per instruction set. */
#define DW_ROWS(T)                                                                          \
  /* y[i] += a * x[i*sx] */                                                                \
  __attribute__((target_clones("avx512f", "avx2", "default")))                             \
  static void axpy_##T(T *restrict y, const T *restrict x, int64_t sx, T a, int64_t n) {    \
    if (sx == 1)                                                                           \
      for (int64_t i = 0; i < n; i++) y[i] += a * x[i];                                    \
    else if (sx == 2)                                                                      \
      for (int64_t i = 0; i < n; i++) y[i] += a * x[2 * i];                                \
    else                                                                                   \
      for (int64_t i = 0; i < n; i++) y[i] += a * x[i * sx];                               \
  }                                                                                        \
  /* x[i*sx] += a * y[i] */                                                                \
  __attribute__((target_clones("avx512f", "avx2", "default")))                             \
  static void axpy_to_##T(T *restrict x, int64_t sx, const T *restrict y, T a, int64_t n) { \
    if (sx == 1)                                                                           \
      for (int64_t i = 0; i < n; i++) x[i] += a * y[i];                                    \
    else                                                                                   \
      for (int64_t i = 0; i < n; i++) x[i * sx] += a * y[i];                               \
  }                                                                                        \
  /* sum y[i] * x[i*sx], eight partial sums so that it vectorises */                      \
  __attribute__((target_clones("avx512f", "avx2", "default")))                             \
  static T dot_##T(const T *y, const T *x, int64_t sx, int64_t n) {                        \
    T acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                   \
    int64_t i = 0;                                                                         \
    if (sx == 1)                                                                           \
      for (; i + 8 <= n; i += 8)                                                           \
        for (int j = 0; j < 8; j++) acc[j] += y[i + j] * x[i + j];                         \
    else                                                                                   \
      for (; i + 8 <= n; i += 8)                                                           \
        for (int j = 0; j < 8; j++) acc[j] += y[i + j] * x[(i + j) * sx];                  \
    T s = 0;                                                                               \
    for (; i < n; i++) s += y[i] * x[i * sx];                                              \
    for (int j = 0; j < 8; j++) s += acc[j];                                               \
    return s;                                                                              \
  }                                                                                        \
  /* columns [ilo, ihi) of dw3_row, every tap in range: a, b, c are the three              \
   * input rows, p the padding */                                                          \
  static inline __attribute__((always_inline)) void dw3_span_##T(                          \
      T *restrict y, const T *restrict a, const T *restrict b, const T *restrict c,         \
      const T *w, int64_t ilo, int64_t ihi, int64_t s, int64_t p) {                        \
    const T w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6],    \
            w7 = w[7], w8 = w[8];                                                          \
    for (int64_t i = ilo; i < ihi; i++) {                                                  \
      int64_t j = i * s - p;                                                               \
      T acc = y[i];                                                                        \
      acc += w0 * a[j], acc += w1 * a[j + 1], acc += w2 * a[j + 2];                        \
      acc += w3 * b[j], acc += w4 * b[j + 1], acc += w5 * b[j + 2];                        \
      acc += w6 * c[j], acc += w7 * c[j + 1], acc += w8 * c[j + 2];                        \
      y[i] = acc;                                                                          \
    }                                                                                      \
  }                                                                                        \
  /* One output row of a 3x3 depthwise tap set, all three input rows x0..x2 in              \
   * range: y[i] += the nine taps, added in the generic path's order (row-major             \
   * taps; only where a multiply-add contracts may the last bit differ from                 \
   * nine axpy passes), reading and writing the row once instead of nine                   \
   * times. Columns whose taps reach past the row's ends skip those taps. */               \
  __attribute__((target_clones("avx512f", "avx2", "default")))                             \
  static void dw3_row_##T(T *restrict y, const T *restrict x0, const T *restrict x1,        \
                          const T *restrict x2, const T *w, int64_t s, int64_t p,          \
                          int64_t W, int64_t OW) {                                         \
    /* interior columns: 0 <= i*s - p and i*s - p + 2 <= W - 1 */                          \
    int64_t ilo = (p + s - 1) / s, ihi = W - 3 + p < 0 ? 0 : (W - 3 + p) / s + 1;         \
    if (ihi > OW) ihi = OW;                                                                \
    if (ilo > ihi) ilo = ihi;                                                              \
    const T *rows[3] = {x0, x1, x2};                                                       \
    for (int64_t i = 0; i < OW; i++) {                                                     \
      if (i == ilo) i = ihi;                                                               \
      if (i >= OW) break;                                                                  \
      T acc = y[i];                                                                        \
      for (int kh = 0; kh < 3; kh++)                                                       \
        for (int kw = 0; kw < 3; kw++) {                                                   \
          int64_t c = i * s - p + kw;                                                      \
          if (c >= 0 && c < W) acc += w[kh * 3 + kw] * rows[kh][c];                        \
        }                                                                                  \
      y[i] = acc;                                                                          \
    }                                                                                      \
    /* s == 1 inlined with the constant: contiguous loads the loop vectorises */            \
    if (s == 1) dw3_span_##T(y, x0, x1, x2, w, ilo, ihi, 1, p);                            \
    else dw3_span_##T(y, x0, x1, x2, w, ilo, ihi, s, p);                                   \
  }
DW_ROWS(float)
DW_ROWS(double)

#define DW_KERNELS(T)                                                                       \
  /* y[n, co] = sum_taps w[co, tap] * x[n, co / mult] (+ b[co]) */                          \
  static void dw_fwd_##T(const geom *g, const T *x, const T *w, const T *b, T *y) {         \
    const int64_t D = g->in[0], H = g->in[1], W = g->in[2];                                \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2];                          \
    const int64_t KD = g->k[0], KH = g->k[1], KW = g->k[2], mult = g->CO / g->CI;          \
    int64_t planes = g->N * g->CO;                                                         \
    /* 2-D 3x3, dilation 1, padding up to 2 (MobileNet's layers; what the spec               \
     * covers): rows with all three taps in range go through dw3_row */                    \
    const bool dw3 = KD == 1 && KH == 3 && KW == 3 && g->d[1] == 1 && g->d[2] == 1 &&      \
                     g->p[2] <= 2;                                                         \
    int nt = planes > 1 && planes * g->out_sz * g->k_sz >= OF_PARALLEL_GRAIN ? of_threads() : 1; \
    _Pragma("omp parallel for num_threads(nt) if (nt > 1) schedule(static)")              \
    for (int64_t pl = 0; pl < planes; pl++) {                                              \
      int64_t n = pl / g->CO, co = pl % g->CO;                                             \
      const T *xp = x + (n * g->CI + co / mult) * g->in_sz;                                \
      const T *wp = w + co * g->k_sz;                                                      \
      T *yp = y + pl * g->out_sz;                                                          \
      T bias = b ? b[co] : 0;                                                              \
      for (int64_t i = 0; i < g->out_sz; i++) yp[i] = bias;                                \
      for (int64_t od = 0; od < OD; od++) {                                                \
        int64_t kd0, kd1;                                                                  \
        tap_range(od, g->s[0], g->d[0], g->p[0], KD, D, &kd0, &kd1);                       \
        for (int64_t oh = 0; oh < OH; oh++) {                                              \
          int64_t kh0, kh1;                                                                \
          tap_range(oh, g->s[1], g->d[1], g->p[1], KH, H, &kh0, &kh1);                     \
          T *yr = yp + (od * OH + oh) * OW;                                                \
          if (dw3 && kh1 - kh0 == 3) {                                                     \
            const T *xr = xp + (oh * g->s[1] - g->p[1]) * W;                               \
            dw3_row_##T(yr, xr, xr + W, xr + 2 * W, wp, g->s[2], g->p[2], W, OW);          \
            continue;                                                                      \
          }                                                                                \
          for (int64_t kd = kd0; kd < kd1; kd++)                                           \
            for (int64_t kh = kh0; kh < kh1; kh++) {                                       \
              int64_t id = od * g->s[0] + kd * g->d[0] - g->p[0];                          \
              int64_t ih = oh * g->s[1] + kh * g->d[1] - g->p[1];                          \
              const T *xr = xp + (id * H + ih) * W;                                        \
              for (int64_t kw = 0; kw < KW; kw++) {                                        \
                int64_t off = kw * g->d[2] - g->p[2], lo, hi;                              \
                valid_range(off, g->s[2], W, OW, &lo, &hi);                                \
                T wv = wp[(kd * KH + kh) * KW + kw];                                       \
                axpy_##T(yr + lo, xr + off + lo * g->s[2], g->s[2], wv, hi - lo);          \
              }                                                                            \
            }                                                                              \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
                                                                                           \
  /* gx[n, ci] = sum over its mult output channels of the taps scattered back */           \
  static void dw_bwd_input_##T(const geom *g, const T *gy, const T *w, const T *b, T *gx) { \
    const int64_t D = g->in[0], H = g->in[1], W = g->in[2];                                \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2];                          \
    const int64_t KD = g->k[0], KH = g->k[1], KW = g->k[2], mult = g->CO / g->CI;          \
    int64_t planes = g->N * g->CI;                                                         \
    int nt = planes > 1 && planes * g->out_sz * g->k_sz >= OF_PARALLEL_GRAIN ? of_threads() : 1; \
    _Pragma("omp parallel for num_threads(nt) if (nt > 1) schedule(static)")              \
    for (int64_t pl = 0; pl < planes; pl++) {                                              \
      int64_t n = pl / g->CI, ci = pl % g->CI;                                             \
      T *xp = gx + pl * g->in_sz;                                                          \
      T bias = b ? b[ci] : 0;                                                              \
      for (int64_t i = 0; i < g->in_sz; i++) xp[i] = bias;                                 \
      for (int64_t m = 0; m < mult; m++) {                                                 \
        int64_t co = ci * mult + m;                                                        \
        const T *yp = gy + (n * g->CO + co) * g->out_sz;                                   \
        const T *wp = w + co * g->k_sz;                                                    \
        for (int64_t od = 0; od < OD; od++) {                                              \
          int64_t kd0, kd1;                                                                \
          tap_range(od, g->s[0], g->d[0], g->p[0], KD, D, &kd0, &kd1);                     \
          for (int64_t oh = 0; oh < OH; oh++) {                                            \
            int64_t kh0, kh1;                                                              \
            tap_range(oh, g->s[1], g->d[1], g->p[1], KH, H, &kh0, &kh1);                   \
            const T *yr = yp + (od * OH + oh) * OW;                                        \
            for (int64_t kd = kd0; kd < kd1; kd++)                                         \
              for (int64_t kh = kh0; kh < kh1; kh++) {                                     \
                int64_t id = od * g->s[0] + kd * g->d[0] - g->p[0];                        \
                int64_t ih = oh * g->s[1] + kh * g->d[1] - g->p[1];                        \
                T *xr = xp + (id * H + ih) * W;                                            \
                for (int64_t kw = 0; kw < KW; kw++) {                                      \
                  int64_t off = kw * g->d[2] - g->p[2], lo, hi;                            \
                  valid_range(off, g->s[2], W, OW, &lo, &hi);                              \
                  T wv = wp[(kd * KH + kh) * KW + kw];                                     \
                  axpy_to_##T(xr + off + lo * g->s[2], g->s[2], yr + lo, wv, hi - lo);     \
                }                                                                          \
              }                                                                            \
          }                                                                                \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
                                                                                           \
  /* gw[co, tap] = sum over samples and outputs of gy * the input the tap read */          \
  static void dw_bwd_weight_##T(const geom *g, const T *x, const T *gy, T *gw) {            \
    const int64_t D = g->in[0], H = g->in[1], W = g->in[2];                                \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2];                          \
    const int64_t KD = g->k[0], KH = g->k[1], KW = g->k[2], mult = g->CO / g->CI;          \
    int64_t CO = g->CO;                                                                    \
    int nt = CO > 1 && g->N * CO * g->out_sz * g->k_sz >= OF_PARALLEL_GRAIN ? of_threads() : 1; \
    _Pragma("omp parallel for num_threads(nt) if (nt > 1) schedule(static)")              \
    for (int64_t co = 0; co < CO; co++) {                                                  \
      T *wp = gw + co * g->k_sz;                                                           \
      for (int64_t t = 0; t < g->k_sz; t++) wp[t] = 0;                                     \
      for (int64_t n = 0; n < g->N; n++) {                                                 \
        const T *xp = x + (n * g->CI + co / mult) * g->in_sz;                              \
        const T *yp = gy + (n * CO + co) * g->out_sz;                                      \
        for (int64_t od = 0; od < OD; od++) {                                              \
          int64_t kd0, kd1;                                                                \
          tap_range(od, g->s[0], g->d[0], g->p[0], KD, D, &kd0, &kd1);                     \
          for (int64_t oh = 0; oh < OH; oh++) {                                            \
            int64_t kh0, kh1;                                                              \
            tap_range(oh, g->s[1], g->d[1], g->p[1], KH, H, &kh0, &kh1);                   \
            const T *yr = yp + (od * OH + oh) * OW;                                        \
            for (int64_t kd = kd0; kd < kd1; kd++)                                         \
              for (int64_t kh = kh0; kh < kh1; kh++) {                                     \
                int64_t id = od * g->s[0] + kd * g->d[0] - g->p[0];                        \
                int64_t ih = oh * g->s[1] + kh * g->d[1] - g->p[1];                        \
                const T *xr = xp + (id * H + ih) * W;                                      \
                for (int64_t kw = 0; kw < KW; kw++) {                                      \
                  int64_t off = kw * g->d[2] - g->p[2], lo, hi;                            \
                  valid_range(off, g->s[2], W, OW, &lo, &hi);                              \
                  wp[(kd * KH + kh) * KW + kw] +=                                          \
                      dot_##T(yr + lo, xr + off + lo * g->s[2], g->s[2], hi - lo);         \
                }                                                                          \
              }                                                                            \
          }                                                                                \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }

DW_KERNELS(float)
DW_KERNELS(double)

/* 3x3 float depthwise planes, stride 1 or 2 (MobileNet's layers), through a
 * zero-padded copy of the input plane in the thread's buffer: every tap of
 * every output is then a load from the buffer, so a row is W outputs a
 * vector (a masked store for its tail) where dw3_row took rows of 7-28
 * columns mostly scalar, one call per row. Stride 2 keeps each padded row
 * as its even and odd columns (E, O): tap kw of output column c reads E[c],
 * O[c] and E[c + 1], all contiguous. Four output rows are in flight (nine
 * dependent multiply-adds each). The taps are added in dw3_row's order,
 * from the bias (a tap past the input adds w * 0). Measured on MobileNetV2's
 * layers at batch 8 (doc/benchmarks.md "Models"). */
enum { DW3P_SLACK = 32 };   /* floats past a row that a vector may read */

typedef struct {
  int64_t H, W, OH, OW, s, p;
  int64_t rows;    /* padded rows: H + 2p */
  int64_t pitch;   /* floats per padded row in the buffer */
  int64_t half;    /* stride 2: O's offset in a row */
} dw3p_geom;

static bool dw3p_setup(const geom *g, dw3p_geom *q) {
  if (g->in[0] != 1 || g->k[0] != 1) return false;   /* 2-D */
  int64_t s = g->s[2], p = g->p[2];
  if (g->s[1] != s || g->p[1] != p || (s != 1 && s != 2) || p > 2) return false;
  q->H = g->in[1], q->W = g->in[2], q->OH = g->out[1], q->OW = g->out[2], q->s = s, q->p = p;
  q->rows = q->H + 2 * p;
  int64_t pw = q->W + 2 * p;
  q->half = s == 1 ? 0 : (pw + 1) / 2 + DW3P_SLACK;
  q->pitch = s == 1 ? pw + DW3P_SLACK : 2 * q->half;
  return q->rows * q->pitch <= (1 << 18);   /* a buffer of at most 1 MiB a thread */
}

/* The taps of output rows oh..oh+3 (S: the stride) at column chunk c, kh-major as
 * dw3_row adds them; kw = 0, 1, 2 read at 0, E1 and E2 past the chunk
 * (stride 1: 0, 1, 2; stride 2: E[c], O[c], E[c + 1]) */
#define DW3P_TAPS4(VW, S)                                                                   \
  for (int kh = 0; kh < 3; kh++) {                                                          \
    const float *q0 = r + (0 * S + kh) * P + c, *q1 = r + (1 * S + kh) * P + c;             \
    const float *q2 = r + (2 * S + kh) * P + c, *q3 = r + (3 * S + kh) * P + c;             \
    a0 += wv[kh * 3] * ld_f32_##VW(q0), a1 += wv[kh * 3] * ld_f32_##VW(q1);                 \
    a2 += wv[kh * 3] * ld_f32_##VW(q2), a3 += wv[kh * 3] * ld_f32_##VW(q3);                 \
    a0 += wv[kh * 3 + 1] * ld_f32_##VW(q0 + E1), a1 += wv[kh * 3 + 1] * ld_f32_##VW(q1 + E1); \
    a2 += wv[kh * 3 + 1] * ld_f32_##VW(q2 + E1), a3 += wv[kh * 3 + 1] * ld_f32_##VW(q3 + E1); \
    a0 += wv[kh * 3 + 2] * ld_f32_##VW(q0 + E2), a1 += wv[kh * 3 + 2] * ld_f32_##VW(q1 + E2); \
    a2 += wv[kh * 3 + 2] * ld_f32_##VW(q2 + E2), a3 += wv[kh * 3 + 2] * ld_f32_##VW(q3 + E2); \
  }

/* E[c] = t[2c], O[c] = t[2c + 1] for c < n (t readable to 2 * n + 32) */
#if defined(__x86_64__) || defined(__i386__)
AI VATTR_16 void dw3p_split16(float *e, float *o, const float *t, int64_t n) {
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
  for (int64_t c = 0; c < n; c += 16) {
    __m512 lo = _mm512_loadu_ps(t + 2 * c), hi = _mm512_loadu_ps(t + 2 * c + 16);
    _mm512_storeu_ps(e + c, _mm512_permutex2var_ps(lo, ie, hi));
    _mm512_storeu_ps(o + c, _mm512_permutex2var_ps(lo, io, hi));
  }
}
#endif
AI VATTR_8 void dw3p_split8(float *e, float *o, const float *t, int64_t n) {
  for (int64_t c = 0; c < n; c++) e[c] = t[2 * c], o[c] = t[2 * c + 1];
}
#define DW3P_SPLIT_16 dw3p_split16
#define DW3P_SPLIT_8 dw3p_split8

/* One plane: the padded copy of x (row r: input row r - p, zeros around;
 * stride 2: each row's even columns, then its odd ones at `half`) in buf,
 * then the outputs. S is a constant in each instance. */
#define DW3P_PLANE(VW, VT, STN, S)                                                          \
  VATTR_##VW static void dw3p_plane_##VW##_s##S(const dw3p_geom *q, const float *x,         \
                                                float *buf, float *tmp, const float *w,     \
                                                float bias, float *y) {                     \
    const int64_t OH = q->OH, OW = q->OW, P = q->pitch, half = q->half;                     \
    /* only what valid outputs read is written: padded columns [0, W + 2p) */            \
    const int64_t pw = q->W + 2 * q->p, ew = (pw + 1) / 2;                                  \
    for (int64_t rr = 0; rr < q->rows; rr++) {                                              \
      float *row = buf + rr * P, *t = S == 1 ? row : tmp;                                   \
      int64_t ir = rr - q->p;                                                               \
      if (ir < 0 || ir >= q->H) {                                                           \
        memset(row, 0, sizeof(float) * (size_t)(S == 1 ? pw : ew));                        \
        if (S == 2) memset(row + half, 0, sizeof(float) * (size_t)ew);                      \
        continue;                                                                           \
      }                                                                                     \
      for (int64_t c = 0; c < q->p; c++) t[c] = 0, t[q->p + q->W + c] = 0;                  \
      memcpy(t + q->p, x + ir * q->W, sizeof(float) * (size_t)q->W);                       \
      if (S == 2) DW3P_SPLIT_##VW(row, row + half, t, ew);                                  \
    }                                                                                       \
    const int64_t E1 = S == 1 ? 1 : half, E2 = S == 1 ? 2 : 1;                              \
    VT wv[9], vb = vsplat##VW(bias);                                                        \
    for (int t = 0; t < 9; t++) wv[t] = vsplat##VW(w[t]);                                  \
    int64_t oh = 0;                                                                         \
    for (; oh + 4 <= OH; oh += 4) {                                                         \
      const float *r = buf + oh * S * P;                                                    \
      for (int64_t c = 0; c < OW; c += VW) {                                                \
        VT a0 = vb, a1 = vb, a2 = vb, a3 = vb;                                              \
        DW3P_TAPS4(VW, S)                                                                   \
        int64_t n = OW - c < VW ? OW - c : VW;                                              \
        float *o = y + oh * OW + c;                                                         \
        STN(o, a0, n), STN(o + OW, a1, n), STN(o + 2 * OW, a2, n), STN(o + 3 * OW, a3, n);  \
      }                                                                                     \
    }                                                                                       \
    for (; oh < OH; oh++) {                                                                 \
      const float *r = buf + oh * S * P;                                                    \
      for (int64_t c = 0; c < OW; c += VW) {                                                \
        VT a0 = vb;                                                                         \
        for (int kh = 0; kh < 3; kh++) {                                                    \
          const float *q0 = r + kh * P + c;                                                 \
          a0 += wv[kh * 3] * ld_f32_##VW(q0);                                               \
          a0 += wv[kh * 3 + 1] * ld_f32_##VW(q0 + E1);                                      \
          a0 += wv[kh * 3 + 2] * ld_f32_##VW(q0 + E2);                                      \
        }                                                                                   \
        STN(y + oh * OW + c, a0, OW - c < VW ? OW - c : VW);                                \
      }                                                                                     \
    }                                                                                       \
  }

#if defined(__x86_64__) || defined(__i386__)
/* n <= W floats of v at p: a plain store when all, else a masked one */
AI VATTR_16 void dw3p_st16(float *p, vf16 v, int64_t n) {
  if (n == 16) st_f32_16(p, v);
  else _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), (__m512)v);
}
AI VATTR_8 void dw3p_st8(float *p, vf8 v, int64_t n) {
  __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  if (n == 8) st_f32_8(p, v);
  else _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx), (__m256)v);
}
DW3P_PLANE(16, vf16, dw3p_st16, 1)
DW3P_PLANE(16, vf16, dw3p_st16, 2)
DW3P_PLANE(8, vf8, dw3p_st8, 1)
DW3P_PLANE(8, vf8, dw3p_st8, 2)
#endif

/* y planes of a 3x3 float depthwise forward; false where dw3p does not
 * apply (then dw_fwd_float runs). */
static bool dw3p_fwd(const geom *g, const float *x, const float *w, const float *b, float *y) {
#if defined(__x86_64__) || defined(__i386__)
  dw3p_geom q;
  int isa = of_cpu_isa();
  const char *e = getenv("OF_CONV_DW_PLANE");   /* =0: dw_fwd_float's rows (measurements) */
  if ((e && e[0] == '0') || isa < OF_ISA_AVX2 || g->k[1] != 3 || g->k[2] != 3 || g->d[1] != 1 || g->d[2] != 1 ||
      !dw3p_setup(g, &q))
    return false;
  const int64_t mult = g->CO / g->CI, planes = g->N * g->CO;
  int nt = planes > 1 && planes * g->out_sz * 9 >= OF_PARALLEL_GRAIN ? of_threads() : 1;
  /* one buffer a thread, from the caches (a malloc per thread and call let
   * glibc trim and fault the pages in again: 9% of the time at 112x112) */
  int64_t per = q.rows * q.pitch + 2 * q.half + DW3P_SLACK;
  per = (per + 15) / 16 * 16;
  float *bufs = of_alloc(OF_CPU, (int64_t)sizeof(float) * per * nt);
  if (!bufs) {
    of_clear_error();
    return false;
  }
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    float *buf = bufs + per * omp_get_thread_num(), *tmp = buf + q.rows * q.pitch;
#pragma omp for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
      int64_t n = pl / g->CO, co = pl % g->CO;
      const float *xp = x + (n * g->CI + co / mult) * g->in_sz, *wp = w + co * 9;
      float bias = b ? b[co] : 0, *yp = y + pl * g->out_sz;
      if (isa >= OF_ISA_AVX512 && q.s == 1) dw3p_plane_16_s1(&q, xp, buf, tmp, wp, bias, yp);
      else if (isa >= OF_ISA_AVX512) dw3p_plane_16_s2(&q, xp, buf, tmp, wp, bias, yp);
      else if (q.s == 1) dw3p_plane_8_s1(&q, xp, buf, tmp, wp, bias, yp);
      else dw3p_plane_8_s2(&q, xp, buf, tmp, wp, bias, yp);
    }
  }
  of_free(OF_CPU, bufs, (int64_t)sizeof(float) * per * nt);
  return true;
#else
  (void)g, (void)x, (void)w, (void)b, (void)y;
  return false;
#endif
}

static bool is_depthwise(const geom *g) { return g->G > 1 && g->G == g->CI; }

static void dw_run(run_kind kind, const geom *g, of_dtype dt, const char *a, const char *b,
                   const char *bias, char *res) {
  if (dt == OF_FLOAT32) {
    if (kind == RUN_FWD && dw3p_fwd(g, (const float *)a, (const float *)b, (const float *)bias,
                                    (float *)res))
      return;
    if (kind == RUN_FWD)
      dw_fwd_float(g, (const float *)a, (const float *)b, (const float *)bias, (float *)res);
    else if (kind == RUN_BWD_INPUT)
      dw_bwd_input_float(g, (const float *)a, (const float *)b, (const float *)bias,
                         (float *)res);
    else
      dw_bwd_weight_float(g, (const float *)a, (const float *)b, (float *)res);
  } else {
    if (kind == RUN_FWD)
      dw_fwd_double(g, (const double *)a, (const double *)b, (const double *)bias,
                    (double *)res);
    else if (kind == RUN_BWD_INPUT)
      dw_bwd_input_double(g, (const double *)a, (const double *)b, (const double *)bias,
                          (double *)res);
    else
      dw_bwd_weight_double(g, (const double *)a, (const double *)b, (double *)res);
  }
}

/* ---- drivers over the batch ---- */

/* Samples split over threads, or all threads on one sample at a time. The
 * first needs no synchronisation; the second keeps every thread busy when
 * there are fewer samples than threads (or an uneven split would idle some).
 * OF_CONV_MODE=team or =batch forces one (for measurements). */
static bool batch_parallel(const geom *g, int nt) {
  const char *e = getenv("OF_CONV_MODE");
  if (e && e[0] == 't') return false;
  if (e && e[0] == 'b') return nt > 1 && g->N > 1;
  if (nt <= 1 || g->N < nt) return false;
  return g->N % nt == 0 || g->N >= 4 * nt;
}

/* ---- wide driver: chunks of samples, one gemm per group and chunk ---- */

enum { WIDE_MAX_BYTES = 64 << 20 };   /* scratch cap: columns + transposed operand */

/* Samples per chunk for the wide path, 0 where the per-sample path is used.
 * For measurements and tests: OF_CONV_WIDE=0 or =1 forces the choice,
 * OF_CONV_WIDE_COLS=n caps a chunk at n columns (at least one sample). */
static int64_t wide_chunk(const geom *g, int64_t es) {
  int64_t L = g->out_sz;
  int64_t per = es * (g->CI * g->k_sz + g->CO) * L;   /* scratch bytes per sample */
  if (g->N < 2 || per <= 0 || per > WIDE_MAX_BYTES) return 0;
  const char *e = getenv("OF_CONV_WIDE");
  if (e && e[0] == '0') return 0;
  if (!(e && e[0] == '1') && L >= 64) return 0;
  int64_t nb = WIDE_MAX_BYTES / per;
  const char *ec = getenv("OF_CONV_WIDE_COLS");
  if (ec && atoll(ec) > 0 && nb * L > atoll(ec)) nb = atoll(ec) / L;
  if (nb < 1) nb = 1;
  if (nb > g->N) nb = g->N;
  return nb;
}

/* Threads on the wide path: split the samples (each thread its own chunks,
 * columns and weight-grad partial; no barriers) or all on each chunk
 * (team: the gemm split between them, barriers around it). Split packs the
 * weight once per thread and needs >= 64 columns per thread to pay; the
 * weight grad's partials cost more than the team's barriers. Measured at 2
 * threads, N = 16 (fwd, input grad, weight grad in ms):
 *   [256,256,3x3] on 4x4:  team 1.26 1.63 1.13, split 1.10 1.51 1.18
 *   [512,512,3x3] on 2x2:  team 1.29 1.21 1.29, split 1.34 1.27 1.65
 * OF_CONV_WIDE_MODE=team or =split forces one. */
static bool wide_split(const geom *g, run_kind kind, int nt) {
  const char *e = getenv("OF_CONV_WIDE_MODE");
  if (nt <= 1 || g->N < nt) return false;
  if (e && e[0] == 't') return false;
  if (e && e[0] == 's') return true;
  return kind != RUN_BWD_WEIGHT && g->N / nt * g->out_sz >= 64;
}

static of_status wide_run(const char *op, run_kind kind, const geom *g, of_dtype dt,
                          int64_t nb, const char *a, const char *b, const char *bias,
                          char *res) {
  int nt = of_threads();
  bool split = wide_split(g, kind, nt);
  if (split) {   /* nt buffers within the same cap */
    nb = nb / nt > 1 ? nb / nt : 1;
    if (nb > (g->N + nt - 1) / nt) nb = (g->N + nt - 1) / nt;
  }
  int64_t es = of_dtype_size(dt), L = g->out_sz;
  int64_t colsz = g->CI * g->k_sz * nb * L, tsz = g->CO * nb * L;
  int64_t wsize = kind == RUN_BWD_WEIGHT && split ? g->CO * (g->CI / g->G) * g->k_sz : 0;
  int64_t per = colsz + tsz + wsize, bytes = es * per * (split ? nt : 1);
  char *buf = of_alloc(OF_CPU, bytes);
  if (!buf)
    return of_fail(OF_ERR_OOM, "%s: out of memory for %lld bytes of columns", op,
                   (long long)bytes);
  int64_t xs = g->CI * g->in_sz, ys = g->CO * g->out_sz;
  /* The nt parts (split: samples, team: each gemm) are fixed by nt alone; the
   * threads that actually run (fewer on a worker of the graph scheduler) take
   * parts tid, tid + nth, ..., so the bits never depend on who runs. */
  geom gp = *g;
  gp.parts = split ? 1 : nt;
  g = &gp;
  int prev = nt > 1 ? of_blas_single_begin() : 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int tid = omp_get_thread_num(), nth = omp_get_num_threads();
    int ktid = tid, knth = nth;   /* the kernels' team */
    int p0 = split ? tid : 0, pstep = split ? nth : 1, pend = split ? nt : 1;
    if (split) ktid = 0, knth = 1;
    for (int part = p0; part < pend; part += pstep) {
      int64_t lo = 0, hi = g->N;
      char *col = buf, *gw = res;
      if (split) {
        share(g->N, part, nt, &lo, &hi);
        col = buf + es * per * part;
        if (wsize && part > 0) gw = col + es * (colsz + tsz);
      }
      char *tb = col + es * colsz;
      for (int64_t n0 = lo; n0 < hi; n0 += nb) {
        int64_t m = hi - n0 < nb ? hi - n0 : nb;
#define WIDE(T)                                                                            \
  do {                                                                                     \
    if (kind == RUN_FWD)                                                                   \
      wide_fwd_##T(g, m, (const T *)a + n0 * xs, (const T *)b, (const T *)bias,            \
                   (T *)res + n0 * ys, (T *)col, (T *)tb, ktid, knth);                     \
    else if (kind == RUN_BWD_INPUT)                                                        \
      wide_bwd_input_##T(g, m, (const T *)a + n0 * ys, (const T *)b, (const T *)bias,      \
                         (T *)res + n0 * xs, (T *)col, (T *)tb, ktid, knth);               \
    else                                                                                   \
      wide_bwd_weight_##T(g, m, (const T *)a + n0 * xs, (const T *)b + n0 * ys, (T *)gw,   \
                          n0 == lo ? 0 : 1, (T *)col, (T *)tb, ktid, knth);                \
  } while (0)
        if (dt == OF_FLOAT32) WIDE(float);
        else WIDE(double);
#undef WIDE
      }
    }
    if (wsize) {   /* sum the partials into res, in part order: every part ran a chunk */
#pragma omp barrier
      int64_t w0, w1;
      share(wsize, tid, nth, &w0, &w1);
      for (int t = 1; t < nt; t++) {
        const char *src = buf + es * (per * t + colsz + tsz);
        if (dt == OF_FLOAT32) {
          float *d = (float *)res;
          const float *p = (const float *)src;
          for (int64_t i = w0; i < w1; i++) d[i] += p[i];
        } else {
          double *d = (double *)res;
          const double *p = (const double *)src;
          for (int64_t i = w0; i < w1; i++) d[i] += p[i];
        }
      }
    }
  }
  if (nt > 1) of_blas_single_end(prev);
  of_free(OF_CPU, buf, bytes);
  return OF_OK;
}

/* ---- gather tables ---- */

enum {
  GATHER_MAX_PLANE = 1 << 20,   /* rows: elements of a padded plane */
  GATHER_MAX_TABLE = 1 << 18,   /* table: entries */
};

static int64_t round64(int64_t b) { return (b + 63) / 64 * 64; }

/* Bytes of tables (and per-thread planes) for the gather path of `kind` with
 * nt threads; 0 where the row copies with bounds are used (1x1 direct, huge
 * planes or tables; OF_CONV_GATHER=0 forces them, for measurements). */
static int64_t gather_bytes(const geom *g, run_kind kind, int64_t es, int nt) {
  const char *e = getenv("OF_CONV_GATHER");
  if (g->direct || (e && e[0] == '0')) return 0;
  if (g->out[2] < ROW_MIN) {
    bool inv = kind == RUN_BWD_INPUT && g->s[0] == 1 && g->s[1] == 1 && g->s[2] == 1;
    int64_t n = g->k_sz * (inv ? g->in_sz : g->out_sz);
    return n <= GATHER_MAX_TABLE ? round64(4 * n) : 0;
  }
  int64_t plane = 1;
  bool padded = false;
  for (int d = 0; d < 3; d++) {
    plane *= g->in[d] + 2 * g->p[d];
    padded |= g->p[d] != 0;
  }
  if (plane > GATHER_MAX_PLANE) return 0;
  int64_t b = round64(4 * (g->out_sz + g->k_sz));
  return padded ? b + es * plane * nt : b;
}

/* Tables in mem (gather_bytes of it); planes zeroed: only their interiors
 * are written later, so the borders stay 0. */
static void gather_init(gather_tab *t, const geom *g, run_kind kind, int64_t es, int nt,
                        char *mem) {
  memset(t, 0, sizeof *t);
  t->rows = g->out[2] >= ROW_MIN;
  if (!t->rows) {
    /* input offset of column (r, l), or -1; col2vol: its inverse per tap */
    bool inv = kind == RUN_BWD_INPUT && g->s[0] == 1 && g->s[1] == 1 && g->s[2] == 1;
    t->inv = inv;
    t->idx = (int32_t *)mem;
    if (inv)
      for (int64_t i = 0; i < g->k_sz * g->in_sz; i++) t->idx[i] = -1;
    int64_t r = 0;
    for (int64_t kd = 0; kd < g->k[0]; kd++)
      for (int64_t kh = 0; kh < g->k[1]; kh++)
        for (int64_t kw = 0; kw < g->k[2]; kw++, r++) {
          int64_t l = 0;
          for (int64_t od = 0; od < g->out[0]; od++)
            for (int64_t oh = 0; oh < g->out[1]; oh++)
              for (int64_t ow = 0; ow < g->out[2]; ow++, l++) {
                int64_t id = od * g->s[0] + kd * g->d[0] - g->p[0];
                int64_t ih = oh * g->s[1] + kh * g->d[1] - g->p[1];
                int64_t iw = ow * g->s[2] + kw * g->d[2] - g->p[2];
                bool in = id >= 0 && id < g->in[0] && ih >= 0 && ih < g->in[1] && iw >= 0 &&
                          iw < g->in[2];
                int64_t off = (id * g->in[1] + ih) * g->in[2] + iw;
                if (!inv) t->idx[r * g->out_sz + l] = in ? (int32_t)off : -1;
                else if (in) t->idx[r * g->in_sz + off] = (int32_t)l;
              }
        }
    return;
  }
  t->Hp = g->in[1] + 2 * g->p[1];
  t->Wp = g->in[2] + 2 * g->p[2];
  t->plane = (g->in[0] + 2 * g->p[0]) * t->Hp * t->Wp;
  t->padded = g->p[0] || g->p[1] || g->p[2];
  t->pos = (int32_t *)mem;
  t->tap = t->pos + g->out_sz;
  t->pads = mem + round64(4 * (g->out_sz + g->k_sz));
  if (t->padded) memset(t->pads, 0, (size_t)(es * t->plane * nt));
  int64_t i = 0;
  for (int64_t od = 0; od < g->out[0]; od++)
    for (int64_t oh = 0; oh < g->out[1]; oh++)
      for (int64_t ow = 0; ow < g->out[2]; ow++)
        t->pos[i++] = (int32_t)(((od * g->s[0]) * t->Hp + oh * g->s[1]) * t->Wp + ow * g->s[2]);
  i = 0;
  for (int64_t kd = 0; kd < g->k[0]; kd++)
    for (int64_t kh = 0; kh < g->k[1]; kh++)
      for (int64_t kw = 0; kw < g->k[2]; kw++)
        t->tap[i++] = (int32_t)(((kd * g->d[0]) * t->Hp + kh * g->d[1]) * t->Wp + kw * g->d[2]);
}

/* a, b: the two operands (fwd: x, w; bwd_input: gy, w; bwd_weight: x, gy);
 * bias for the forward and bwd_input; res: the contiguous result. All in
 * dtype dt (float32 or float64), contiguous. */
static of_status conv_run_cols(const char *op, run_kind kind, const geom *g, of_dtype dt,
                               const char *a, const char *b, const char *bias, char *res);

static of_status conv_run(const char *op, run_kind kind, const geom *g, of_dtype dt,
                          const char *a, const char *b, const char *bias, char *res) {
  if (is_depthwise(g)) {
    dw_run(kind, g, dt, a, b, bias, res);
    return OF_OK;
  }
  int64_t es = of_dtype_size(dt);
  int nt = of_threads();
  int64_t tb = gather_bytes(g, kind, es, nt);
  if (tb == 0) return conv_run_cols(op, kind, g, dt, a, b, bias, res);
  char *mem = of_alloc(OF_CPU, tb);
  if (!mem)
    return of_fail(OF_ERR_OOM, "%s: out of memory for %lld bytes of gather tables", op,
                   (long long)tb);
  gather_tab tab;
  gather_init(&tab, g, kind, es, nt, mem);
  geom gt = *g;
  gt.tab = &tab;
  of_status st = conv_run_cols(op, kind, &gt, dt, a, b, bias, res);
  of_free(OF_CPU, mem, tb);
  return st;
}

/* conv_run past the depthwise case: columns and gemms */
static of_status conv_run_cols(const char *op, run_kind kind, const geom *g, of_dtype dt,
                               const char *a, const char *b, const char *bias, char *res) {
  int64_t es = of_dtype_size(dt);
  int64_t nb = wide_chunk(g, es);
  if (nb > 0) return wide_run(op, kind, g, dt, nb, a, b, bias, res);
  int64_t a_step, r_step = 0, b_step = 0;
  if (kind == RUN_FWD) a_step = g->CI * g->in_sz, r_step = g->CO * g->out_sz;
  else if (kind == RUN_BWD_INPUT) a_step = g->CO * g->out_sz, r_step = g->CI * g->in_sz;
  else a_step = g->CI * g->in_sz, b_step = g->CO * g->out_sz;
  int64_t wsize = g->CO * (g->CI / g->G) * g->k_sz;
  int64_t colsz = g->direct ? 0 : g->CI * g->k_sz * g->out_sz;
  int nt = of_threads();
  bool batch = batch_parallel(g, nt);
  if (batch && nt > g->N) nt = (int)g->N;
  int64_t nbuf = batch ? nt : 1;
  /* per-part columns; in batch mode per-part weight-grad partials
   * (part 0 accumulates into the result itself) */
  int64_t partial = kind == RUN_BWD_WEIGHT && batch ? wsize : 0;
  int64_t per = colsz + partial;
  int64_t bytes = es * per * nbuf;
  char *buf = NULL;
  if (bytes > 0) {
    buf = of_alloc(OF_CPU, bytes);
    if (!buf) return of_fail(OF_ERR_OOM, "%s: out of memory for %lld bytes of columns", op,
                             (long long)bytes);
  }
  if (kind == RUN_BWD_WEIGHT) memset(res, 0, (size_t)(es * wsize));

#define SAMPLE(T, n, col, gw, tid, nth)                                                     \
  do {                                                                                     \
    const T *a_ = (const T *)(a + (n) * a_step * es);                                      \
    if (kind == RUN_FWD)                                                                   \
      fwd_sample_##T(g, a_, (const T *)b, (const T *)bias, (T *)(res + (n) * r_step * es),  \
                     (T *)(col), tid, nth);                                                \
    else if (kind == RUN_BWD_INPUT)                                                        \
      bwd_input_sample_##T(g, a_, (const T *)b, (const T *)bias,                           \
                           (T *)(res + (n) * r_step * es), (T *)(col), tid, nth);          \
    else                                                                                   \
      bwd_weight_sample_##T(g, a_, (const T *)(b + (n) * b_step * es), (T *)(gw),           \
                            (T *)(col), tid, nth);                                         \
  } while (0)

  if (nt <= 1) {
    for (int64_t n = 0; n < g->N; n++) {
      if (dt == OF_FLOAT32) SAMPLE(float, n, buf, res, 0, 1);
      else SAMPLE(double, n, buf, res, 0, 1);
    }
  } else {
    /* The nt parts (batch: samples and their weight-grad partials, team: each
     * gemm) are fixed by nt alone; the threads that actually run (fewer on a
     * worker of the graph scheduler, where OpenMP does not nest) take parts
     * tid, tid + nth, ..., so the bits never depend on who runs. */
    geom gp = *g;
    gp.parts = batch ? 1 : nt;
    g = &gp;
    /* OpenBLAS stays on the calling thread inside the region */
    int prev = of_blas_single_begin();
#pragma omp parallel num_threads(nt)
    {
      int tid = omp_get_thread_num(), nth = omp_get_num_threads();
      if (batch) {
        for (int part = tid; part < nt; part += nth) {
          char *col = buf ? buf + es * per * part : NULL;
          char *gw = res;
          if (partial && part > 0) {
            gw = col + es * colsz;
            memset(gw, 0, (size_t)(es * wsize));
          }
          int64_t n0, n1;
          share(g->N, part, nt, &n0, &n1);
          for (int64_t n = n0; n < n1; n++) {
            if (dt == OF_FLOAT32) SAMPLE(float, n, col, gw, 0, 1);
            else SAMPLE(double, n, col, gw, 0, 1);
          }
        }
        if (partial) {   /* the parts' partials, summed in part order */
#pragma omp barrier
          int64_t lo, hi;
          share(wsize, tid, nth, &lo, &hi);
          for (int t = 1; t < nt; t++) {
            const char *src = buf + es * (per * t + colsz);
            if (dt == OF_FLOAT32) {
              float *d = (float *)res;
              const float *s = (const float *)src;
              for (int64_t i = lo; i < hi; i++) d[i] += s[i];
            } else {
              double *d = (double *)res;
              const double *s = (const double *)src;
              for (int64_t i = lo; i < hi; i++) d[i] += s[i];
            }
          }
        }
      } else {
        for (int64_t n = 0; n < g->N; n++) {
          if (dt == OF_FLOAT32) SAMPLE(float, n, buf, res, tid, nth);
          else SAMPLE(double, n, buf, res, tid, nth);
        }
      }
    }
    of_blas_single_end(prev);
  }
#undef SAMPLE
  if (buf) of_free(OF_CPU, buf, bytes);
  return OF_OK;
}

/* ---- operand helpers ---- */

static of_dtype compute_dtype(of_dtype dt) { return dt == OF_FLOAT64 ? OF_FLOAT64 : OF_FLOAT32; }

/* t as a contiguous tensor of dtype dt (t itself, retained, when it is). */
static of_status operand(of_tensor *t, of_dtype dt, of_tensor **out) {
  if (t->dtype == dt && of_tensor_is_contiguous(t)) {
    of_tensor_retain(t);
    *out = t;
    return OF_OK;
  }
  if (t->dtype == dt) return of_clone_data(t, out);
  return of_cast_data(t, dt, out);
}

static bool is_float(of_dtype dt) {
  return dt == OF_FLOAT16 || dt == OF_BFLOAT16 || dt == OF_FLOAT32 || dt == OF_FLOAT64;
}

/* "[1,2]" from n int64s */
static const char *list_str(const int64_t *v, int32_t n, char *buf, size_t cap) {
  return of_shape_str(v, n, buf, cap);
}
#define LIST(v, n) list_str((v), (n), (char[64]){0}, 64)

static const char *input_dims_name(int32_t nsp) {
  return nsp == 1 ? "[N, C, L]" : nsp == 2 ? "[N, C, H, W]" : "[N, C, D, H, W]";
}

/* Dtype and argument checks shared by the ops, on shapes and dtypes alone
 * (b NULL: no bias), so that a loaded graph's node is checked by them too.
 * `what` names the second operand in messages ("weight", "grad_output"). */
static of_status check_args(const conv_args *a, const of_meta *x, const of_meta *w,
                            const of_meta *b, const char *what) {
  const char *op = a->op;
  if (!is_float(x->dtype))
    return of_fail(OF_ERR_DTYPE, "%s: expected a floating-point input, got %s (input %s, %s %s)",
                   op, OF_DT(x), OF_SHAPE_STR(x), what, OF_SHAPE_STR(w));
  if (w->dtype != x->dtype)
    return of_fail(OF_ERR_DTYPE, "%s: input and %s must have the same dtype, got %s and %s "
                   "(input %s, %s %s)", op, what, OF_DT(x), OF_DT(w), OF_SHAPE_STR(x), what,
                   OF_SHAPE_STR(w));
  if (b && b->dtype != x->dtype)
    return of_fail(OF_ERR_DTYPE, "%s: input and bias must have the same dtype, got %s and %s "
                   "(input %s, bias %s)", op, OF_DT(x), OF_DT(b), OF_SHAPE_STR(x),
                   OF_SHAPE_STR(b));
  int32_t nsp = a->nsp;
  if (a->groups < 1)
    return of_fail(OF_ERR_ARG, "%s: groups must be positive, got %lld", op,
                   (long long)a->groups);
  for (int32_t i = 0; i < nsp; i++) {
    if (a->stride[i] < 1)
      return of_fail(OF_ERR_ARG, "%s: stride must be positive, got %s", op,
                     LIST(a->stride, nsp));
    if (a->dil[i] < 1)
      return of_fail(OF_ERR_ARG, "%s: dilation must be positive, got %s", op,
                     LIST(a->dil, nsp));
    if (a->pad[i] < 0)
      return of_fail(OF_ERR_ARG, "%s: padding must be non-negative, got %s", op,
                     LIST(a->pad, nsp));
  }
  return OF_OK;
}

/* The operands' device: one for all, with a conv kernel. */
static of_status check_device(const conv_args *a, of_tensor *x, of_tensor *w, of_tensor *b) {
  of_device dev;
  OF_CHECK(of_common_device(a->op, (of_tensor *[]){x, w, b}, 3, &dev));
  if (dev != OF_CPU) {
    const of_device_ops *o = of_device_ops_for(a->op, dev);
    if (!o) return OF_ERR_DEVICE;
    if (!o->conv) return of_device_unsupported(a->op, dev);
  }
  return OF_OK;
}

static of_status init_args(conv_args *a, const char *kind, const int64_t *stride,
                           const int64_t *padding, const int64_t *dilation, int32_t nsp,
                           int64_t groups) {
  if (nsp < 1 || nsp > 3)
    return of_fail(OF_ERR_ARG, "%s: expected 1, 2 or 3 spatial dims, got %d", kind, (int)nsp);
  snprintf(a->op, sizeof a->op, "%s%dd", kind, (int)nsp);
  a->nsp = nsp;
  a->groups = groups;
  for (int32_t i = 0; i < 3; i++) {
    a->stride[i] = i < nsp ? (stride ? stride[i] : 1) : 1;
    a->pad[i] = i < nsp ? (padding ? padding[i] : 0) : 0;
    a->dil[i] = i < nsp ? (dilation ? dilation[i] : 1) : 1;
  }
  return OF_OK;
}

/* BLAS takes int sizes. */
static of_status check_blas_sizes(const conv_args *a, const geom *g) {
  int64_t K = g->CI / g->G * g->k_sz, L = g->out_sz, M = g->CO / g->G;
  if (K > INT_MAX || L > INT_MAX || M > INT_MAX || g->in_sz > INT_MAX)
    return of_fail(OF_ERR_SHAPE, "%s: the problem is too large for BLAS (columns %lld x %lld)",
                   a->op, (long long)K, (long long)L);
  return OF_OK;
}

/* ---- autograd plumbing ---- */

/* A node keeps its op's record (a_conv, ops.def): the normalized stride,
 * padding and dilation, and in `extra` what the op's trace record holds
 * there (conv_transpose: output_padding; conv_weight_grad: kernel size). */
static void record_of_args(a_conv *r, const conv_args *a, const int64_t *extra) {
  memset(r, 0, sizeof *r);
  r->nsp = a->nsp;
  r->groups = a->groups;
  r->has = 1 | 2 | 4 | (extra ? 8 : 0);
  for (int32_t d = 0; d < a->nsp; d++) {
    r->stride[d] = a->stride[d];
    r->padding[d] = a->pad[d];
    r->dilation[d] = a->dil[d];
    if (extra) r->extra[d] = extra[d];
  }
}

/* The backward's arguments from the record a node kept. */
static void args_of_node(const of_node *n, conv_args *a) {
  const a_conv *r = OF_NODE_ATTRS(a_conv, n);
  a->nsp = r->nsp;
  a->groups = r->groups;
  for (int32_t d = 0; d < 3; d++) {
    bool real = d < r->nsp;
    a->stride[d] = real ? r->stride[d] : 1;
    a->pad[d] = real ? r->padding[d] : 0;
    a->dil[d] = real ? r->dilation[d] : 1;
  }
  snprintf(a->op, sizeof a->op, "%s%dd_backward",
           n->attr_op == OPK_CONV_TRANSPOSE ? "conv_transpose" : "conv", (int)a->nsp);
}

static of_status conv_fwd_op(of_tensor *x, of_tensor *w, of_tensor *b, const conv_args *a,
                             const int64_t *out_sizes, of_tensor **out);
static of_status conv_input_grad_op(of_tensor *gy, of_tensor *w, of_tensor *b,
                                    const conv_args *a, const int64_t *in_sizes,
                                    of_tensor **out);
static of_status conv_weight_grad_op(of_tensor *x, of_tensor *gy, const conv_args *a,
                                     const int64_t *k_sizes, of_tensor **out);

static of_status bias_grad(of_tensor *g, int32_t nsp, of_tensor **out) {
  int32_t dims[4] = {0, 2, 3, 4};
  return of_reduce(OF_RED_SUM, g, dims, nsp + 1, 0, 0, -1, out);
}

/* y = conv(x, w, b): saved x (slot 0), w (slot 1) */
static of_status conv_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  conv_args a;
  args_of_node(n, &a);
  of_tensor *t = NULL;
  if (n->needs[0]) {
    OF_CHECK(of_node_saved(n, 1, &t));
    of_status st = conv_input_grad_op(g[0], t, NULL, &a, n->in_meta[0].shape + 2, &gi[0]);
    of_tensor_release(t);
    OF_CHECK(st);
  }
  if (n->needs[1]) {
    OF_CHECK(of_node_saved(n, 0, &t));
    of_status st = conv_weight_grad_op(t, g[0], &a, n->in_meta[1].shape + 2, &gi[1]);
    of_tensor_release(t);
    OF_CHECK(st);
  }
  if (n->needs[2]) OF_CHECK(bias_grad(g[0], a.nsp, &gi[2]));
  return OF_OK;
}
static const of_grad_def conv_grad = {"ConvolutionBackward", conv_backward};

/* y = conv_transpose(x, w, b): saved x (slot 0), w (slot 1) */
static of_status conv_transpose_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  conv_args a;
  args_of_node(n, &a);
  of_tensor *t = NULL;
  if (n->needs[0]) {
    OF_CHECK(of_node_saved(n, 1, &t));
    of_status st = conv_fwd_op(g[0], t, NULL, &a, n->in_meta[0].shape + 2, &gi[0]);
    of_tensor_release(t);
    OF_CHECK(st);
  }
  if (n->needs[1]) {
    OF_CHECK(of_node_saved(n, 0, &t));
    of_status st = conv_weight_grad_op(g[0], t, &a, n->in_meta[1].shape + 2, &gi[1]);
    of_tensor_release(t);
    OF_CHECK(st);
  }
  if (n->needs[2]) OF_CHECK(bias_grad(g[0], a.nsp, &gi[2]));
  return OF_OK;
}
static const of_grad_def conv_transpose_grad = {"ConvTransposeBackward",
                                                conv_transpose_backward};

/* gw = weight_grad(x, gy): saved x (slot 0), gy (slot 1) */
static of_status weight_grad_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  conv_args a;
  args_of_node(n, &a);
  of_tensor *t = NULL;
  if (n->needs[0]) {
    OF_CHECK(of_node_saved(n, 1, &t));
    of_status st = conv_input_grad_op(t, g[0], NULL, &a, n->in_meta[0].shape + 2, &gi[0]);
    of_tensor_release(t);
    OF_CHECK(st);
  }
  if (n->needs[1]) {
    OF_CHECK(of_node_saved(n, 0, &t));
    of_status st = conv_fwd_op(t, g[0], NULL, &a, n->in_meta[1].shape + 2, &gi[1]);
    of_tensor_release(t);
    OF_CHECK(st);
  }
  return OF_OK;
}
static const of_grad_def weight_grad_grad = {"ConvWeightGradBackward", weight_grad_backward};

/* Record `def` (the backward of op kind `op`) on out with inputs (p, q, r);
 * saves p and q where the rule needs them and keeps the op's record (extra:
 * see record_of_args). */
static of_status record(const of_grad_def *def, int32_t op, const conv_args *a,
                        const int64_t *extra, of_tensor *p, of_tensor *q, of_tensor *r,
                        int32_t nin, of_tensor **out) {
  of_tensor *ins[3] = {p, q, r};
  if (!of_grad_needed(ins, nin)) return OF_OK;
  of_node *n;
  of_status st = of_record(def, ins, nin, out, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    *out = NULL;
    return st;
  }
  a_conv rec;
  record_of_args(&rec, a, extra);
  OF_NODE_KEEP(n, op, rec);
  /* conv/conv_transpose: grad of input 0 needs input 1 and vice versa;
   * weight_grad likewise */
  if (n->needs[1]) of_node_save(n, 0, p);
  if (n->needs[0]) of_node_save(n, 1, q);
  return OF_OK;
}

/* ---- the three ops ---- */

/* Runs `kind` with operands converted to the compute dtype; the result (of
 * shape rshape, dtype dt) goes to *out. */
/* On a device: cuDNN with the operands dense in one layout -- channels-last
 * when the first operand is (or ONEFLOW_ENABLE_NHWC=1), else contiguous;
 * the result keeps the first operand's layout. float16/bfloat16 stay as
 * they are (cuDNN accumulates in float32). */
static of_status device_run_op(const conv_args *a, run_kind kind, of_tensor *p, of_tensor *q,
                               of_tensor *bias, const int64_t *rshape, int32_t rnd,
                               of_tensor **out) {
  of_device dev = of_dev(p);
  const of_device_ops *o = of_device_ops_for(a->op, dev);
  if (!o) return OF_ERR_DEVICE;
  of_device_last_op = a->op;
  bool keep_cl = a->nsp >= 2 && of_prefers_channels_last(p);
  bool cl = a->nsp >= 2 && (keep_cl || of_nhwc_enabled());
  of_conv_desc d = {.nsp = a->nsp, .channels_last = cl, .groups = a->groups};
  for (int32_t i = 0; i < 3; i++) {
    d.stride[i] = a->stride[i];
    d.pad[i] = a->pad[i];
    d.dil[i] = a->dil[i];
  }
  of_dtype dt = p->dtype;
  of_tensor *cp = NULL, *cq = NULL, *cb = NULL, *res = NULL, *fin = NULL;
  of_status st = cl ? of_tensor_new_channels_last(rshape, rnd, dt, dev, &res)
                    : of_tensor_new(rshape, rnd, dt, dev, &res);
  if (st == OF_OK && res->numel > 0) {
    st = of_dense_format(p, cl, dt, &cp);
    if (st == OF_OK) st = of_dense_format(q, cl, dt, &cq);
    if (st == OF_OK && bias) st = of_dense(bias, dt, &cb);
    int32_t k = kind == RUN_FWD ? 0 : kind == RUN_BWD_INPUT ? 1 : 2;
    if (st == OF_OK) st = o->conv(k, &d, cp, cq, cb, res);
  } else if (st == OF_OK && kind == RUN_BWD_WEIGHT) {
    st = o->fill(res, 0);   /* no samples: a zero grad */
  }
  if (st == OF_OK && cl && !keep_cl && kind != RUN_BWD_WEIGHT) {
    st = of_dense(res, dt, &fin);   /* ONEFLOW_ENABLE_NHWC: back to the caller's layout */
    of_tensor_release(res);
    res = fin;
  }
  of_tensor_release(cp);
  of_tensor_release(cq);
  of_tensor_release(cb);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* ---- the oneDNN provider (core/device/dnnl.c) ----
 * OF_CONV_BACKEND picks the CPU kernels: "ref" (im2col + OpenBLAS here),
 * "dnnl" (oneDNN whenever it has a kernel) or unset/"auto": oneDNN where it
 * measured faster (doc/benchmarks.md, "Models: oneDNN convolutions"):
 *   - bfloat16 when oneDNN has a bfloat16 kernel on this CPU (AVX-512 /
 *     AMX): no conversions to float32 at all;
 *   - convolutions with at most 4 input channels (a stem: oneDNN reads the
 *     contiguous input as it is, no reorder): [16,3,112,112] * [64,3,7,7]
 *     stride 2 took 0.79-0.80x the im2col time for the weight grad and
 *     0.86-0.87x for the input grad in two runs (forward 0.89x and 1.37x).
 * Elsewhere, on the AVX2 machine measured (2 threads, bench/conv_layers.lua),
 * oneDNN's reorders to and from its blocked layouts cost more than its
 * kernels save: mostly 1.0-2.5x the im2col time for ResNet-18's 3x3 and 1x1
 * layers at batch 16 (a few input grads 0.85x, not in both runs).
 * Read on every call, so tests can switch it. */
static int conv_backend(void) {
  const char *e = getenv("OF_CONV_BACKEND");
  if (!e || !*e) return 1;
  if (!strcmp(e, "ref")) return 0;
  if (!strcmp(e, "dnnl")) return 2;
  return 1;
}

/* auto for float32: which problems go to oneDNN (bfloat16: see
 * dnnl_run_op). For measurements, OF_CONV_DNNL_KINDS=m sends the kinds of
 * the bit mask m (1 forward, 2 input grad, 4 weight grad) instead. */
static bool dnnl_auto(run_kind kind, const geom *g, bool cl) {
  const char *e = getenv("OF_CONV_DNNL_KINDS");
  if (e && *e) {
    int bit = kind == RUN_FWD ? 1 : kind == RUN_BWD_INPUT ? 2 : 4;
    return (atoi(e) & bit) != 0;
  }
  /* On AVX-512 CPUs, oneDNN's float32 kernels win where im2col has to
   * gather columns (doc/benchmarks.md, "Models", sixth pass): convolutions
   * with a kernel larger than 1x1, no groups, and at least 196 output
   * pixels over the batch (ResNet's 3x3 layers; at 7x7 and below, batch 1,
   * its fixed costs lose: 1.5-2.7x the im2col time). 1x1 convolutions are
   * one GEMM without columns, and grouped (depthwise) ones ran slower
   * through oneDNN (MobileNetV2 b8 1.1x); both stay on im2col, as does the
   * input grad of a stem (<= 4 input channels: 1.5-2.6x). */
  if (of_cpu_isa() < OF_ISA_AVX2) return false;
  if (of_cpu_isa() == OF_ISA_AVX2) {
    /* AVX2 (oneDNN's jit:avx2, nChw8c): only forwards with a kernel larger
     * than 1x1, no groups and maps of at least 28x28 a sample win there
     * (doc/benchmarks.md "Models", fifteenth pass; a Zen 3, 2 threads,
     * against im2col: ResNet-50's 7x7 stem at 224 0.24-0.82x at batch 1-16,
     * 3x3 layers on 56x56 and 28x28 maps 0.62-1.05x, mostly 0.75-0.92x;
     * on 14x14 maps 0.80-1.11x, 7x7 1.01-1.37x, 1x1 1.24-1.68x). Gradients
     * stay on im2col: weight grads ran 1.2-1.5x through oneDNN, input
     * grads 0.8-0.87x in one run only. A channels-last input (a layout
     * asked for: 'auto' graphs stay NCHW on AVX2) follows the rules below,
     * as im2col would copy it to NCHW and back. */
    if (!cl) return kind == RUN_FWD && g->k_sz > 1 && g->G == 1 && g->out_sz >= 784;
  }
  /* A channels-last input is oneDNN's own layout: no reorders in or out,
   * and im2col would copy it to NCHW and back. 1x1 and grouped
   * (depthwise) convolutions then win through oneDNN too (graphs at b1/b8,
   * doc/benchmarks.md "Models", seventh pass): MobileNetV2 b8 73 -> 28 ms,
   * ResNet-18's 1x1 layers at b1 0.13 -> 0.06 ms; 3x3 layers keep the pixel
   * rule below (7x7 maps at b1: 2.6 ms through oneDNN, 1.7 on im2col). */
  if (cl && kind == RUN_FWD && (g->k_sz == 1 || g->G != 1)) return true;
  if (g->k_sz == 1 || g->G != 1) return false;
  if (kind == RUN_BWD_INPUT && g->CI <= 4) return false;
  /* Maps under 7x7 per sample stay on im2col at any batch: oneDNN blocks
   * its kernels along output rows, and 4-wide rows waste them. ResNet-18's
   * 512-channel 3x3 layers at 112x112 input (4x4 maps), batch 16, 2
   * threads: forward 4.91 ms through oneDNN, 3.44 on im2col, weight grad
   * 4.39 / 3.23 (an AMD EPYC Zen 5, `luajit bench/conv_layers.lua 16 2`);
   * the Xeon that chose the pixel rule measured 1.3-2.7x on 4x4 maps too. */
  if (g->out_sz < 49) return false;
  return g->N * g->out_sz >= 196;
}

/* canonical element strides of a dense [N, C, sp...] in the layout */
static void dense_strides(const int64_t *shape, int32_t nd, bool cl, int64_t *st) {
  int64_t s = 1;
  if (!cl) {
    for (int32_t i = nd - 1; i >= 0; i--) st[i] = s, s *= shape[i];
    return;
  }
  st[1] = 1, s = shape[1];
  for (int32_t i = nd - 1; i >= 2; i--) st[i] = s, s *= shape[i];
  st[0] = s;
}

/* Whether a forward's weight q (its operand: cq) may have its reordered or
 * transformed form kept for later calls: inference (no grad recorded) with
 * a parameter's own numbers, or a frozen storage (the copy of a parameter
 * that autocast keeps, a weight a graph keeps across runs such as bnfold's
 * folded weight). The keys are the storage's id and version, which every
 * write bumps. */
static bool keep_weight(const of_tensor *q, const of_tensor *cq) {
  return !of_is_grad_enabled() && (q->storage->frozen || (q->requires_grad && !q->grad_fn)) &&
         q->dtype == cq->dtype && cq->storage == q->storage && of_tensor_is_contiguous(q);
}

/* run_op through oneDNN: *done false (nothing made) when it is not chosen
 * or has no kernel for the problem. Activations go in as they are when
 * contiguous or channels-last (a channels-last input gives a channels-last
 * result), in the operands' own dtype: bfloat16 stays bfloat16. */
static of_status dnnl_run_op(const conv_args *a, run_kind kind, const geom *g, of_tensor *p,
                             of_tensor *q, of_tensor *bias, const int64_t *rshape, int32_t rnd,
                             const of_conv_post *post, of_tensor **out, bool *done) {
  *done = false;
  of_dtype dt = p->dtype;
  int be = conv_backend();
  if (!of_dnnl_usable() || be == 0 || (dt != OF_FLOAT32 && dt != OF_BFLOAT16) ||
      p->numel == 0 || q->numel == 0 || of_shape_numel(rshape, rnd) == 0)
    return OF_OK;   /* empty operands: the im2col path's zeros */
  /* auto: bfloat16 always asks (and runs only where oneDNN computes in
   * bfloat16), float32 where dnnl_auto says */
  int32_t nsp = a->nsp, lead = 3 - nsp;
  bool cl = nsp >= 2 && of_prefers_channels_last(p);
  bool pick = dnnl_auto(kind, g, cl);
  bool native_bf16 = be == 1 && dt == OF_BFLOAT16 && !pick;
  if (be == 1 && dt == OF_FLOAT32 && !pick) return OF_OK;
  if (kind == RUN_BWD_INPUT && bias) return OF_OK;   /* oneDNN's backward data has no bias */
  of_tensor *cp = NULL, *cq = NULL, *cb = NULL, *res = NULL;
  of_status st = of_dense_format(p, cl, dt, &cp);
  if (st == OF_OK)
    st = kind == RUN_BWD_WEIGHT ? of_dense_format(q, cl, dt, &cq) : of_dense(q, dt, &cq);
  if (st == OF_OK && bias) st = of_dense(bias, dt, &cb);
  bool rcl = cl && kind != RUN_BWD_WEIGHT;
  if (st == OF_OK && post && post->acc) {
    /* the residual's buffer is the result: dense in the result's layout */
    of_tensor *acc = post->acc;
    int64_t want[5];
    dense_strides(rshape, rnd, rcl, want);
    bool fits = of_dev(acc) == OF_CPU && acc->dtype == dt && acc->ndim == rnd &&
                !memcmp(acc->shape, rshape, sizeof(int64_t) * (size_t)rnd) &&
                !memcmp(acc->strides, want, sizeof(int64_t) * (size_t)rnd);
    if (!fits) {   /* not taken: the caller's unfused ops run */
      of_tensor_release(cp);
      of_tensor_release(cq);
      of_tensor_release(cb);
      return OF_OK;
    }
    of_tensor_retain(acc);
    res = acc;
  } else if (st == OF_OK) {
    st = rcl ? of_tensor_new_channels_last(rshape, rnd, dt, OF_CPU, &res)
             : of_tensor_new(rshape, rnd, dt, OF_CPU, &res);
  }
  if (st == OF_OK) {
    of_dnnl_conv_desc d;
    memset(&d, 0, sizeof d);
    d.kind = kind == RUN_FWD ? OF_DNNL_FWD : kind == RUN_BWD_INPUT ? OF_DNNL_BWD_DATA
                                                                   : OF_DNNL_BWD_WEIGHTS;
    d.nsp = nsp, d.dt = dt, d.has_bias = cb != NULL;
    if (post) {
      d.post_sum = post->acc != NULL;
      d.post_act = post->act;
      d.act_lo = post->lo, d.act_hi = post->hi;
    }
    d.N = g->N, d.CI = g->CI, d.CO = g->CO, d.groups = g->G;
    for (int32_t i = 0; i < nsp; i++) {
      d.in[i] = g->in[lead + i], d.out[i] = g->out[lead + i], d.k[i] = g->k[lead + i];
      d.stride[i] = g->s[lead + i], d.pad[i] = g->p[lead + i], d.dil[i] = g->d[lead + i];
    }
    dense_strides(cp->shape, cp->ndim, cl, d.ps);
    dense_strides(cq->shape, cq->ndim, kind == RUN_BWD_WEIGHT && cl, d.qs);
    dense_strides(res->shape, res->ndim, rcl, d.rs);
    /* the reordered weight is kept for the next call (the weight-reorder
     * cache, dnnl.c) */
    of_dnnl_wkey wk = {q->storage->id, q->storage->version, q->offset};
    bool keep = kind == RUN_FWD && keep_weight(q, cq);
    st = of_dnnl_conv(&d, of_ptr(cp), of_ptr(cq), cb ? of_ptr(cb) : NULL, of_ptr(res),
                      native_bf16, keep ? &wk : NULL, done);
  }
  of_tensor_release(cp);
  of_tensor_release(cq);
  of_tensor_release(cb);
  if (st != OF_OK || !*done) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* Winograd for float32 forwards (winograd.c): 3x3 kernels, stride 1, no
 * dilation, one group, NCHW or channels-last; the tile side (4: F(4x4,
 * 3x3), 2: F(2x2, 3x3)) or 0. OF_CONV_WINO=4 / =1 (F(2x2)) / =0 forces
 * the choice on every such convolution (measurements, tests). */
static int wino_pick(const conv_args *a, run_kind kind, const geom *g, const of_tensor *p,
                     const of_tensor *q, bool *keep) {
  *keep = false;
  if (kind != RUN_FWD || a->nsp != 2 || p->dtype != OF_FLOAT32 ||
      g->k[1] != 3 || g->k[2] != 3 || g->s[1] != 1 || g->s[2] != 1 || g->d[1] != 1 || g->d[2] != 1 ||
      g->G != 1 || g->N * g->out_sz == 0 || g->CI * g->CO == 0)
    return 0;
  /* AVX2 and AVX-512 (oneDNN's kernels there are direct convolutions).
   * F(4x4) on maps of 28x28 and more (its 4x4 tiles
   * cover them) with 96 tiles or more over the batch; F(2x2) on maps of
   * 10x10 and more with 128 channels each way and 192 tiles or more where
   * the weight's transform is kept (inference), 384 where it is made at
   * every call (16 or 36 K C values: few tiles do not pay for it). Single
   * layers on a Zen 3 against the direct paths (`luajit
   * bench/conv_wino.lua`): F(4x4) 0.56-0.82x on ResNet's 56x56 and 28x28
   * layers from 96 tiles, 0.58-0.94x made at every call; F(2x2) 0.67-0.72x
   * on 14x14 and 28x28 layers from 196 tiles kept, 0.92x-1.29x made at every
   * call below 384; 7x7 maps (8x8 outputs computed for 49) 0.88-1.48x.
   * A Zen 5 against oneDNN's AVX-512 NCHW kernel: F(4x4) 0.58-0.72x on
   * 56x56 and 28x28 layers kept, 0.63-0.85x made at every call; F(2x2)
   * 0.84-1.46x on 14x14 layers, so not there. doc/benchmarks.md,
   * "Models", sixteenth to eighteenth passes. */
  const char *e = getenv("OF_CONV_WINO");
  const int isa = of_cpu_isa();
  const bool cl = of_prefers_channels_last(p);
  int tile = e && *e ? (*e == '4' ? 4 : *e == '1' ? 2 : 0)   /* forced */
             : cl ? (isa == OF_ISA_AVX512 ? -1 : 0)
             : isa == OF_ISA_AVX2 || isa == OF_ISA_AVX512 ? -1 : 0;   /* -1: chosen below */
  const int64_t t4 = g->N * ((g->out[1] + 3) / 4) * ((g->out[2] + 3) / 4);
  if (tile < 0 && cl) {
    /* Channels-last (the eval graphs on AVX-512; NHWC tiles, winograd.c)
     * against oneDNN's NHWC kernel on a Zen 5 (`LAYOUT=channels_last luajit
     * bench/conv_wino.lua`): F(4x4) 0.39-0.61x on 56x56 and 28x28 layers
     * at any batch (64 channels or more), on 14x14 maps 0.59-0.80x from 8
     * samples (128 tiles), 0.67-1.12x below; 7x7 maps 1.3-3.3x; F(2x2)
     * 0.70-1.6x, behind F(4x4) but for one 14x14 layer. */
    const bool big = g->out[1] >= 28 && g->out[2] >= 28;
    const bool mid = g->out[1] >= 14 && g->out[2] >= 14 && t4 >= 128;
    tile = g->CI >= 64 && g->CO >= 64 && (big || mid) ? 4 : 0;
  }
  if (tile < 0 && g->out[1] >= 28 && g->out[2] >= 28 && t4 >= 96 && g->CI >= 64 && g->CO >= 64)
    tile = 4;
  /* F(2x2) on AVX2 only: against oneDNN's AVX-512 kernels it ran 0.84-1.46x */
  if (tile == 0 || (tile < 0 && (isa != OF_ISA_AVX2 || g->out[1] < 10 || g->out[2] < 10 ||
                                 g->CI < 128 || g->CO < 128)))
    return 0;
  /* as wino_run keys it: its operand of a float32 weight is the weight */
  *keep = q->dtype == OF_FLOAT32 && keep_weight(q, q);
  const int64_t t2 = g->N * ((g->out[1] + 1) / 2) * ((g->out[2] + 1) / 2);
  return tile > 0 ? tile : t2 >= (*keep ? 192 : 384) ? 2 : 0;
}

/* OF_CONV_VERBOSE=1: a line on stderr for each CPU convolution, naming the
 * path that ran it and its post-ops (for tuning the routing, and for the
 * specs that check it), as DNNL_VERBOSE does for oneDNN's primitives. */
static void conv_verbose(const char *path, run_kind kind, const geom *g, const of_conv_post *post) {
  const char *e = getenv("OF_CONV_VERBOSE");
  if (!e || e[0] != '1') return;
  char extra[64] = "";
  if (post && post->act == OF_DNNL_ACT_CLIP)
    snprintf(extra, sizeof extra, " clamp=%g:%g", (double)post->lo, (double)post->hi);
  fprintf(stderr, "oneflow conv: %s %s N=%lld C=%lld K=%lld in=%lldx%lld out=%lldx%lld k=%lldx%lld%s%s\n",
          kind == RUN_FWD ? "forward" : kind == RUN_BWD_INPUT ? "input_grad" : "weight_grad", path,
          (long long)g->N, (long long)g->CI, (long long)g->CO, (long long)g->in[1],
          (long long)g->in[2], (long long)g->out[1], (long long)g->out[2], (long long)g->k[1],
          (long long)g->k[2], post && post->acc ? " sum" : "", extra);
}

/* The forward through Winograd with tile side `tile`, into a fresh result
 * or (post->acc) added to the residual in post->acc, which must be dense
 * NCHW float32 of the result's shape (else *done stays false); keep: the
 * weight's transform is kept (wino_pick). */
static of_status wino_run(const conv_args *a, const geom *g, int tile, bool keep, of_tensor *p,
                          of_tensor *q, of_tensor *bias, const int64_t *rshape, int32_t rnd,
                          const of_conv_post *post, of_tensor **out, bool *done) {
  *done = false;
  of_tensor *res = NULL;
  /* a channels-last input keeps its layout: NHWC tiles, an NHWC result */
  const bool cl = of_prefers_channels_last(p);
  if (post && post->acc) {
    of_tensor *acc = post->acc;
    int64_t want[5];
    dense_strides(rshape, rnd, cl, want);
    if (of_dev(acc) != OF_CPU || acc->dtype != OF_FLOAT32 || acc->ndim != rnd ||
        memcmp(acc->shape, rshape, sizeof(int64_t) * (size_t)rnd) ||
        (cl ? memcmp(acc->strides, want, sizeof(int64_t) * (size_t)rnd) != 0
            : !of_tensor_is_contiguous(acc)))
      return OF_OK;   /* not taken: the caller's unfused ops run */
    of_tensor_retain(acc);
    res = acc;
  } else {
    OF_CHECK(cl ? of_tensor_new_channels_last(rshape, rnd, OF_FLOAT32, OF_CPU, &res)
                : of_tensor_new(rshape, rnd, OF_FLOAT32, OF_CPU, &res));
  }
  of_tensor *cp = NULL, *cq = NULL, *cb = NULL;
  of_status st = cl ? of_dense_format(p, true, OF_FLOAT32, &cp) : operand(p, OF_FLOAT32, &cp);
  if (st == OF_OK) st = operand(q, OF_FLOAT32, &cq);
  if (st == OF_OK && bias) st = operand(bias, OF_FLOAT32, &cb);
  if (st == OF_OK) {
    const int64_t wkey[3] = {q->storage->id, q->storage->version, q->offset};
    of_wino_args w = {g->N, g->CI, g->in[1], g->in[2], g->CO, g->p[1], g->p[2], g->out[1],
                      g->out[2], tile, (const float *)of_ptr(cp), (const float *)of_ptr(cq),
                      cb ? (const float *)of_ptr(cb) : NULL, (float *)of_ptr(res),
                      post && post->acc, -INFINITY, INFINITY, keep ? wkey : NULL, cl};
    if (post && post->act == OF_DNNL_ACT_CLIP) w.lo = post->lo, w.hi = post->hi;
    st = of_conv_winograd(a->op, &w);
  }
  of_tensor_release(cp);
  of_tensor_release(cq);
  of_tensor_release(cb);
  if (st == OF_OK) *out = res, *done = true;
  else of_tensor_release(res);
  return st;
}

/* The input grad of a 3x3 stride-1 convolution is a forward one: dx =
 * conv(gy, W') with W'[c][k] = W[k][c] turned by 180 degrees and padding
 * 2 - p. Winograd runs it where wino_pick would take that forward, on
 * AVX-512 (or where OF_CONV_WINO forces it) on maps of 56x56 and more,
 * or 28x28 and more with 128 channels each way: against oneDNN's
 * backward-data kernel on a Zen 5 (`PASS=input_grad luajit
 * bench/conv_wino.lua`), [16, 64, 56, 56] 0.57-0.63x, [16, 128, 28, 28]
 * 0.56x, [16, 64, 28, 28] 0.83-0.85x alone but a slower training step,
 * [16, 256, 14, 14] 0.71-0.77x (14x14 not taken, as for forwards:
 * doc/benchmarks.md "Models", eighteenth pass). W' is made at every call
 * and never kept (it is not the weight the kept table's key would name).
 * *tile: the tile side that ran, 0 when *done stays false. */
static of_status wino_input_grad(const conv_args *a, const geom *g, of_tensor *gy, of_tensor *w,
                                 of_tensor *bias, const int64_t *rshape, int32_t rnd, int *tile,
                                 of_tensor **out, bool *done) {
  *done = false, *tile = 0;
  const char *e = getenv("OF_CONV_WINO");
  const bool forced = e && *e;
  /* (wino_pick checks the rest on the forward's geometry: dtype, 3x3,
   * stride, dilation, groups, empty operands) */
  if ((!forced && of_cpu_isa() != OF_ISA_AVX512) || a->nsp != 2 || w->dtype != OF_FLOAT32 ||
      g->p[1] > 2 || g->p[2] > 2)
    return OF_OK;
  const int64_t C = g->CI, K = g->CO;
  /* a ResNet-18 training step at 112x112 (batch 16) ran 4-12% slower with
   * its 28x28 64-channel layers here: maps of 56x56, or 128 channels */
  if (!forced && !(g->in[1] >= 56 && g->in[2] >= 56) && (C < 128 || K < 128)) return OF_OK;
  conv_args a2 = *a;
  a2.pad[0] = 2 - a->pad[0], a2.pad[1] = 2 - a->pad[1];
  const int64_t k[2] = {g->k[1], g->k[2]}, gin[2] = {g->out[1], g->out[2]},
                gout[2] = {g->in[1], g->in[2]};
  geom g2;
  geom_init(&g2, &a2, g->N, K, C, gin, k, gout);
  bool keep;   /* (not used: W' below is made at every call) */
  const int t = wino_pick(&a2, RUN_FWD, &g2, gy, w, &keep);
  if (!t) return OF_OK;
  /* W' [C, K, 3, 3], written in order */
  const int64_t wshape[4] = {C, K, 3, 3};
  of_tensor *cw = NULL, *wt = NULL;
  OF_CHECK(operand(w, OF_FLOAT32, &cw));
  of_status st = of_tensor_new(wshape, 4, OF_FLOAT32, OF_CPU, &wt);
  if (st == OF_OK) {
    const float *src = (const float *)of_ptr(cw);
    float *dst = (float *)of_ptr(wt);
    for (int64_t c = 0; c < C; c++)
      for (int64_t kk = 0; kk < K; kk++, dst += 9) {
        const float *s9 = src + (kk * C + c) * 9;
        for (int i = 0; i < 9; i++) dst[i] = s9[8 - i];
      }
    st = wino_run(&a2, &g2, t, false, gy, wt, bias, rshape, rnd, NULL, out, done);
    if (*done) *tile = t;
  }
  of_tensor_release(cw);
  of_tensor_release(wt);
  return st;
}

static of_status run_op(const conv_args *a, run_kind kind, const geom *g, of_tensor *p,
                        of_tensor *q, of_tensor *bias, const int64_t *rshape, int32_t rnd,
                        of_tensor **out) {
  if (of_dev(p) != OF_CPU) return device_run_op(a, kind, p, q, bias, rshape, rnd, out);
  bool done = false;
  bool keep;
  int tile = wino_pick(a, kind, g, p, q, &keep);
  if (tile) OF_CHECK(wino_run(a, g, tile, keep, p, q, bias, rshape, rnd, NULL, out, &done));
  else if (kind == RUN_BWD_INPUT)
    OF_CHECK(wino_input_grad(a, g, p, q, bias, rshape, rnd, &tile, out, &done));
  if (!tile) OF_CHECK(dnnl_run_op(a, kind, g, p, q, bias, rshape, rnd, NULL, out, &done));
  conv_verbose(!done ? "gemm" : tile == 4 ? "winograd_f4" : tile ? "winograd_f2" : "onednn", kind,
               g, NULL);
  if (done) return OF_OK;
  OF_CHECK(check_blas_sizes(a, g));
  of_dtype dt = p->dtype, cd = compute_dtype(dt);
  of_tensor *cp = NULL, *cq = NULL, *cb = NULL, *res = NULL;
  of_status st = of_tensor_new(rshape, rnd, cd, OF_CPU, &res);
  if (st == OF_OK && res->numel > 0) {
    st = operand(p, cd, &cp);
    if (st == OF_OK) st = operand(q, cd, &cq);
    if (st == OF_OK && bias) st = operand(bias, cd, &cb);
    if (st == OF_OK)
      st = conv_run(a->op, kind, g, cd, of_ptr(cp), of_ptr(cq), cb ? of_ptr(cb) : NULL,
                    of_ptr(res));
  }
  of_tensor_release(cp);
  of_tensor_release(cq);
  of_tensor_release(cb);
  if (st == OF_OK && cd != dt) {
    of_tensor *h = NULL;
    st = of_cast_data(res, dt, &h);
    of_tensor_release(res);
    res = h;
  }
  /* a channels-last input gives a channels-last result, as on CUDA */
  if (st == OF_OK && kind != RUN_BWD_WEIGHT && a->nsp >= 2 && of_prefers_channels_last(p)) {
    of_tensor *h = NULL;
    st = of_dense_format(res, true, res->dtype, &h);
    of_tensor_release(res);
    res = h;
  }
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* Result must not need more input than there is: (out-1)*s + eff <= in + 2p */
static of_status check_fit(const conv_args *a, const int64_t *in, const int64_t *k,
                           const int64_t *out) {
  for (int32_t i = 0; i < a->nsp; i++) {
    int64_t eff = a->dil[i] * (k[i] - 1) + 1;
    if (out[i] < 0 || (out[i] > 0 && (out[i] - 1) * a->stride[i] + eff > in[i] + 2 * a->pad[i]))
      return of_fail(OF_ERR_SHAPE, "%s: output size %s does not fit input size %s with kernel "
                     "%s, stride %s, padding %s, dilation %s", a->op, LIST(out, a->nsp),
                     LIST(in, a->nsp), LIST(k, a->nsp), LIST(a->stride, a->nsp),
                     LIST(a->pad, a->nsp), LIST(a->dil, a->nsp));
  }
  return OF_OK;
}

/* conv's result shape rshape [N, CO, out...] from the shapes and dtypes of
 * x [N, CI, in], w [CO, CI/G, k] and b ([CO] or NULL), with the output's
 * spatial sizes given (NULL: the natural ones): every check the op makes
 * before it allocates, and what a loaded graph's node is re-inferred with
 * (infer_conv). */
static of_status fwd_geometry(const conv_args *a, const of_meta *x, const of_meta *w,
                              const of_meta *b, const int64_t *out_sizes, int64_t *rshape) {
  const char *op = a->op;
  int32_t nsp = a->nsp;
  if (x->ndim != nsp + 2)
    return of_fail(OF_ERR_SHAPE, "%s: expected input with %d dims %s, got %s", op, nsp + 2,
                   input_dims_name(nsp), OF_SHAPE_STR(x));
  if (w->ndim != nsp + 2)
    return of_fail(OF_ERR_SHAPE, "%s: expected weight with %d dims [C_out, C_in/groups, "
                   "kernel...], got %s", op, nsp + 2, OF_SHAPE_STR(w));
  OF_CHECK(check_args(a, x, w, b, "weight"));
  OF_CHECK(of_check_window(op, x->shape + 2, w->shape + 2, a->stride, a->pad, a->dil, nsp));
  int64_t G = a->groups, CO = w->shape[0], CI = x->shape[1];
  if (CI != w->shape[1] * G)
    return of_fail(OF_ERR_SHAPE, "%s: input has %lld channels but weight expects %lld "
                   "(groups %lld, weight %s)", op, (long long)CI,
                   (long long)(w->shape[1] * G), (long long)G, OF_SHAPE_STR(w));
  if (CO % G != 0)
    return of_fail(OF_ERR_SHAPE, "%s: weight %s has %lld output channels, which groups %lld "
                   "does not divide", op, OF_SHAPE_STR(w), (long long)CO, (long long)G);
  if (b && (b->ndim != 1 || b->shape[0] != CO))
    return of_fail(OF_ERR_SHAPE, "%s: expected bias of shape [%lld], got %s (weight %s)", op,
                   (long long)CO, OF_SHAPE_STR(b), OF_SHAPE_STR(w));
  const int64_t *in = x->shape + 2, *k = w->shape + 2;
  int64_t osz[3];
  for (int32_t i = 0; i < nsp; i++) {
    if (k[i] < 1)
      return of_fail(OF_ERR_SHAPE, "%s: weight %s has an empty kernel", op, OF_SHAPE_STR(w));
    int64_t eff = a->dil[i] * (k[i] - 1) + 1, padded = in[i] + 2 * a->pad[i];
    if (eff > padded) {
      int64_t effs[3], pads[3];
      for (int32_t j = 0; j < nsp; j++) {
        effs[j] = a->dil[j] * (k[j] - 1) + 1;
        pads[j] = in[j] + 2 * a->pad[j];
      }
      return of_fail(OF_ERR_SHAPE, "%s: kernel size %s (dilated %s) is larger than the padded "
                     "input %s (input %s, padding %s)", op, LIST(k, nsp), LIST(effs, nsp),
                     LIST(pads, nsp), OF_SHAPE_STR(x), LIST(a->pad, nsp));
    }
    osz[i] = out_sizes ? out_sizes[i] : (padded - eff) / a->stride[i] + 1;
  }
  if (out_sizes) OF_CHECK(check_fit(a, in, k, osz));
  rshape[0] = x->shape[0];
  rshape[1] = CO;
  for (int32_t i = 0; i < nsp; i++) rshape[2 + i] = osz[i];
  return OF_OK;
}

/* conv(x, w, b) with the output's spatial sizes given (NULL: the natural
 * ones). x [N, CI, in], w [CO, CI/G, k]. */
/* the forward's checks, result shape rshape and geometry g (conv_fwd_op
 * and the graph's fused convolution, of_conv_post_dnnl) */
static of_status fwd_setup(const conv_args *a, of_tensor *x, of_tensor *w, of_tensor *b,
                           const int64_t *out_sizes, int64_t *rshape, geom *g) {
  of_meta xm = of_meta_of(x), wm = of_meta_of(w), bm = b ? of_meta_of(b) : xm;
  OF_CHECK(fwd_geometry(a, &xm, &wm, b ? &bm : NULL, out_sizes, rshape));
  OF_CHECK(check_device(a, x, w, b));
  geom_init(g, a, x->shape[0], x->shape[1], w->shape[0], x->shape + 2, w->shape + 2, rshape + 2);
  return OF_OK;
}

static of_status conv_fwd_op(of_tensor *x, of_tensor *w, of_tensor *b, const conv_args *a,
                             const int64_t *out_sizes, of_tensor **out) {
  int64_t rshape[5];
  geom g;
  OF_CHECK(fwd_setup(a, x, w, b, out_sizes, rshape, &g));
  OF_CHECK(run_op(a, RUN_FWD, &g, x, w, b, rshape, a->nsp + 2, out));
  return record(&conv_grad, OPK_CONV, a, NULL, x, w, b, 3, out);
}

/* conv_transpose(gy, w, b) = the input grad of conv: the result's shape
 * rshape [N, CI, in...] from gy [N, CO, out], w [CO, CI/G, k], b ([CI] or
 * NULL) and the result's spatial sizes in_sizes (the checks before it
 * allocates; a loaded node's re-inference) */
static of_status input_grad_geometry(const conv_args *a, const of_meta *gy, const of_meta *w,
                                     const of_meta *b, const int64_t *in_sizes,
                                     int64_t *rshape) {
  const char *op = a->op;
  int32_t nsp = a->nsp;
  if (gy->ndim != nsp + 2)
    return of_fail(OF_ERR_SHAPE, "%s: expected input with %d dims %s, got %s", op, nsp + 2,
                   input_dims_name(nsp), OF_SHAPE_STR(gy));
  if (w->ndim != nsp + 2)
    return of_fail(OF_ERR_SHAPE, "%s: expected weight with %d dims [C_in, C_out/groups, "
                   "kernel...], got %s", op, nsp + 2, OF_SHAPE_STR(w));
  OF_CHECK(check_args(a, gy, w, b, "weight"));
  int64_t G = a->groups, CO = gy->shape[1];
  if (w->shape[0] != CO)
    return of_fail(OF_ERR_SHAPE, "%s: input has %lld channels but weight expects %lld "
                   "(groups %lld, weight %s)", op, (long long)CO, (long long)w->shape[0],
                   (long long)G, OF_SHAPE_STR(w));
  if (CO % G != 0)
    return of_fail(OF_ERR_SHAPE, "%s: input has %lld channels, which groups %lld does not "
                   "divide (weight %s)", op, (long long)CO, (long long)G, OF_SHAPE_STR(w));
  int64_t CI = w->shape[1] * G;
  if (b && (b->ndim != 1 || b->shape[0] != CI))
    return of_fail(OF_ERR_SHAPE, "%s: expected bias of shape [%lld], got %s (weight %s)", op,
                   (long long)CI, OF_SHAPE_STR(b), OF_SHAPE_STR(w));
  const int64_t *k = w->shape + 2;
  for (int32_t i = 0; i < nsp; i++)
    if (k[i] < 1)
      return of_fail(OF_ERR_SHAPE, "%s: weight %s has an empty kernel", op, OF_SHAPE_STR(w));
  OF_CHECK(check_fit(a, in_sizes, k, gy->shape + 2));
  rshape[0] = gy->shape[0];
  rshape[1] = CI;
  for (int32_t i = 0; i < nsp; i++) rshape[2 + i] = in_sizes[i];
  return OF_OK;
}

static of_status conv_input_grad_op(of_tensor *gy, of_tensor *w, of_tensor *b,
                                    const conv_args *a, const int64_t *in_sizes,
                                    of_tensor **out) {
  int32_t nsp = a->nsp;
  of_meta gm = of_meta_of(gy), wm = of_meta_of(w), bm = b ? of_meta_of(b) : gm;
  int64_t rshape[5];
  OF_CHECK(input_grad_geometry(a, &gm, &wm, b ? &bm : NULL, in_sizes, rshape));
  OF_CHECK(check_device(a, gy, w, b));
  const int64_t *k = w->shape + 2;
  geom g;
  geom_init(&g, a, gy->shape[0], rshape[1], gy->shape[1], in_sizes, k, gy->shape + 2);
  OF_CHECK(run_op(a, RUN_BWD_INPUT, &g, gy, w, b, rshape, nsp + 2, out));
  /* output_padding: what the result has beyond the natural size */
  int64_t opad[3] = {0, 0, 0};
  for (int32_t i = 0; i < nsp; i++)
    opad[i] = in_sizes[i] - ((gy->shape[2 + i] - 1) * a->stride[i] - 2 * a->pad[i] +
                             a->dil[i] * (k[i] - 1) + 1);
  return record(&conv_transpose_grad, OPK_CONV_TRANSPOSE, a, opad, gy, w, b, 3, out);
}

/* grad of conv w.r.t. its weight: x [N, CI, in], gy [N, CO, out] ->
 * rshape [CO, CI/G, k] (the checks; a loaded node's re-inference) */
static of_status weight_grad_geometry(const conv_args *a, const of_meta *x, const of_meta *gy,
                                      const int64_t *k_sizes, int64_t *rshape) {
  const char *op = a->op;
  int32_t nsp = a->nsp;
  if (x->ndim != nsp + 2)
    return of_fail(OF_ERR_SHAPE, "%s: expected input with %d dims %s, got %s", op, nsp + 2,
                   input_dims_name(nsp), OF_SHAPE_STR(x));
  if (gy->ndim != nsp + 2 || gy->shape[0] != x->shape[0])
    return of_fail(OF_ERR_SHAPE, "%s: expected grad_output with %d dims and %lld samples, got "
                   "%s (input %s)", op, nsp + 2, (long long)x->shape[0], OF_SHAPE_STR(gy),
                   OF_SHAPE_STR(x));
  OF_CHECK(check_args(a, x, gy, NULL, "grad_output"));
  int64_t G = a->groups, CI = x->shape[1], CO = gy->shape[1];
  if (CI % G != 0 || CO % G != 0)
    return of_fail(OF_ERR_SHAPE, "%s: groups %lld must divide the input's %lld channels and "
                   "grad_output's %lld channels", op, (long long)G, (long long)CI,
                   (long long)CO);
  for (int32_t i = 0; i < nsp; i++)
    if (k_sizes[i] < 1)
      return of_fail(OF_ERR_ARG, "%s: kernel size must be positive, got %s", op,
                     LIST(k_sizes, nsp));
  OF_CHECK(check_fit(a, x->shape + 2, k_sizes, gy->shape + 2));
  rshape[0] = CO;
  rshape[1] = CI / G;
  for (int32_t i = 0; i < nsp; i++) rshape[2 + i] = k_sizes[i];
  return OF_OK;
}

static of_status conv_weight_grad_op(of_tensor *x, of_tensor *gy, const conv_args *a,
                                     const int64_t *k_sizes, of_tensor **out) {
  of_meta xm = of_meta_of(x), gm = of_meta_of(gy);
  int64_t rshape[5];
  OF_CHECK(weight_grad_geometry(a, &xm, &gm, k_sizes, rshape));
  OF_CHECK(check_device(a, x, gy, NULL));
  geom g;
  geom_init(&g, a, x->shape[0], x->shape[1], gy->shape[1], x->shape + 2, k_sizes, gy->shape + 2);
  OF_CHECK(run_op(a, RUN_BWD_WEIGHT, &g, x, gy, NULL, rshape, a->nsp + 2, out));
  return record(&weight_grad_grad, OPK_CONV_WEIGHT_GRAD, a, k_sizes, x, gy, NULL, 2, out);
}

/* ---- public entry points ---- */

static of_status conv_body(of_tensor *x, of_tensor *w, of_tensor *b, const int64_t *stride,
                       const int64_t *padding, const int64_t *dilation, int32_t nsp, int64_t groups,
                       of_tensor **out) {
  conv_args a;
  OF_CHECK(init_args(&a, "conv", stride, padding, dilation, nsp, groups));
  return conv_fwd_op(x, w, b, &a, NULL, out);
}

/* The graph's fused convolution (core/graph/passes/convfuse.c): the forward
 * through Winograd or oneDNN, as the routing picks (wino_pick, dnnl_auto),
 * with post->acc's residual summed in place and the activation applied in
 * the same kernel. *done false (nothing written): not float32 on the CPU, a
 * problem the im2col path would take, or acc not dense in the result's
 * layout; the caller then runs conv and the elementwise ops. */
of_status of_conv_with_post(of_tensor *x, of_tensor *w, of_tensor *b, const int64_t *stride,
                            const int64_t *padding, const int64_t *dilation, int32_t nsp,
                            int64_t groups, const of_conv_post *post, of_tensor **out,
                            bool *done) {
  *done = false;
  if (!x || !w || of_dev(x) != OF_CPU || x->dtype != OF_FLOAT32 || w->dtype != OF_FLOAT32 ||
      (b && b->dtype != OF_FLOAT32))
    return OF_OK;
  conv_args a;
  OF_CHECK(init_args(&a, "conv", stride, padding, dilation, nsp, groups));
  int64_t rshape[5];
  geom g;
  OF_CHECK(fwd_setup(&a, x, w, b, NULL, rshape, &g));
  bool keep;
  const int tile = wino_pick(&a, RUN_FWD, &g, x, w, &keep);
  if (tile) OF_CHECK(wino_run(&a, &g, tile, keep, x, w, b, rshape, nsp + 2, post, out, done));
  else OF_CHECK(dnnl_run_op(&a, RUN_FWD, &g, x, w, b, rshape, nsp + 2, post, out, done));
  if (*done) conv_verbose(tile == 4 ? "winograd_f4" : tile ? "winograd_f2" : "onednn", RUN_FWD, &g,
                          post);
  return OF_OK;
}

/* conv_transpose's result spatial sizes osz from x, w and output_padding
 * (opad, NULL: zeros), then the input-grad geometry: the body's checks and
 * a loaded node's re-inference (infer_conv_transpose) */
static of_status transpose_geometry(const conv_args *a, const of_meta *x, const of_meta *w,
                                    const of_meta *b, const int64_t *output_padding,
                                    int64_t *osz, int64_t *rshape) {
  const char *op = a->op;
  int32_t nsp = a->nsp;
  if (x->ndim != nsp + 2)
    return of_fail(OF_ERR_SHAPE, "%s: expected input with %d dims %s, got %s", op, nsp + 2,
                   input_dims_name(nsp), OF_SHAPE_STR(x));
  if (w->ndim != nsp + 2)
    return of_fail(OF_ERR_SHAPE, "%s: expected weight with %d dims [C_in, C_out/groups, "
                   "kernel...], got %s", op, nsp + 2, OF_SHAPE_STR(w));
  OF_CHECK(check_args(a, x, w, b, "weight"));
  OF_CHECK(of_check_window(op, x->shape + 2, w->shape + 2, a->stride, a->pad, a->dil, nsp));
  int64_t opad[3] = {0, 0, 0};
  for (int32_t i = 0; i < nsp; i++) opad[i] = output_padding ? output_padding[i] : 0;
  for (int32_t i = 0; i < nsp; i++) {
    int64_t lim = a->stride[i] > a->dil[i] ? a->stride[i] : a->dil[i];
    if (opad[i] < 0 || opad[i] >= lim)
      return of_fail(OF_ERR_ARG, "%s: output_padding %s must be non-negative and smaller than "
                     "stride %s or dilation %s", op, LIST(opad, nsp), LIST(a->stride, nsp),
                     LIST(a->dil, nsp));
    int64_t k = w->shape[2 + i];
    osz[i] = (x->shape[2 + i] - 1) * a->stride[i] - 2 * a->pad[i] + a->dil[i] * (k - 1) + 1 +
             opad[i];
  }
  for (int32_t i = 0; i < nsp; i++)
    if (osz[i] < 1)
      return of_fail(OF_ERR_SHAPE, "%s: output size %s is too small (input %s, weight %s, "
                     "stride %s, padding %s, dilation %s)", op, LIST(osz, nsp),
                     OF_SHAPE_STR(x), OF_SHAPE_STR(w), LIST(a->stride, nsp), LIST(a->pad, nsp),
                     LIST(a->dil, nsp));
  OF_CHECK(of_check_shape(op, osz, nsp, NULL));   /* the spatial product must fit too */
  return input_grad_geometry(a, x, w, b, osz, rshape);
}

static of_status conv_transpose_body(of_tensor *x, of_tensor *w, of_tensor *b, const int64_t *stride,
                                 const int64_t *padding, const int64_t *output_padding,
                                 const int64_t *dilation, int32_t nsp, int64_t groups,
                                 of_tensor **out) {
  conv_args a;
  OF_CHECK(init_args(&a, "conv_transpose", stride, padding, dilation, nsp, groups));
  of_meta xm = of_meta_of(x), wm = of_meta_of(w), bm = b ? of_meta_of(b) : xm;
  int64_t osz[3], rshape[5];
  OF_CHECK(transpose_geometry(&a, &xm, &wm, b ? &bm : NULL, output_padding, osz, rshape));
  return conv_input_grad_op(x, w, b, &a, osz, out);
}

static of_status conv_weight_grad_body(of_tensor *x, of_tensor *grad_out, const int64_t *kernel_size,
                                   const int64_t *stride, const int64_t *padding,
                                   const int64_t *dilation, int32_t nsp, int64_t groups,
                                   of_tensor **out) {
  conv_args a;
  OF_CHECK(init_args(&a, "conv_weight_grad", stride, padding, dilation, nsp, groups));
  if (!kernel_size) return of_fail(OF_ERR_ARG, "%s: kernel_size is required", a.op);
  return conv_weight_grad_op(x, grad_out, &a, kernel_size, out);
}

/* ---- entry points (dispatch), run functions and table rows ---- */
static void conv_pack(a_conv *a, const int64_t *stride, const int64_t *padding,
                      const int64_t *dilation, const int64_t *extra, int32_t nsp, int64_t groups) {
  memset(a, 0, sizeof *a);
  int32_t k = nsp >= 0 && nsp <= 3 ? nsp : 0;
  a->nsp = nsp;
  a->groups = groups;
  if (stride) { a->has |= 1; of_copy_i64(a->stride, stride, k); }
  if (padding) { a->has |= 2; of_copy_i64(a->padding, padding, k); }
  if (dilation) { a->has |= 4; of_copy_i64(a->dilation, dilation, k); }
  if (extra) { a->has |= 8; of_copy_i64(a->extra, extra, k); }
}
static void describe_conv(const void *p, char *b, size_t c) {
  const a_conv *a = p;
  int32_t k = a->nsp >= 0 && a->nsp <= 3 ? a->nsp : 0;
  of_catf(b, c, "nsp=%d", (int)a->nsp);
  if (a->has & 1) of_cat_list(b, c, "stride", a->stride, k);
  if (a->has & 2) of_cat_list(b, c, "padding", a->padding, k);
  if (a->has & 4) of_cat_list(b, c, "dilation", a->dilation, k);
  if (a->groups != 1) of_catf(b, c, " groups=%lld", (long long)a->groups);
}
static of_status pack_conv(int32_t op, of_tensor *x, of_tensor *w, of_tensor *bias,
                          const int64_t *stride, const int64_t *padding, const int64_t *dilation,
                          const int64_t *extra, int32_t nsp, int64_t groups, of_tensor **out) {
  a_conv a;
  conv_pack(&a, stride, padding, dilation, extra, nsp, groups);
  of_tensor *ins[3] = {x, w, bias};
  return OF_RECORD(op, a, ins, 3, out, 1);
}
of_status of_conv(of_tensor *x, of_tensor *w, of_tensor *b, const int64_t *stride,
                  const int64_t *padding, const int64_t *dilation, int32_t nsp, int64_t groups,
                  of_tensor **out) {
  AMP(OF_AMP_LOW, of_conv(A_[0], A_[1], A_[2], stride, padding, dilation, nsp, groups, out), x,
      w, b);
  OF_DISPATCH(conv_body(x, w, b, stride, padding, dilation, nsp, groups, out),
            pack_conv(OPK_CONV, x, w, b, stride, padding, dilation, NULL, nsp, groups, out));
}
of_status of_conv_transpose(of_tensor *x, of_tensor *w, of_tensor *b, const int64_t *stride,
                            const int64_t *padding, const int64_t *output_padding,
                            const int64_t *dilation, int32_t nsp, int64_t groups,
                            of_tensor **out) {
  AMP(OF_AMP_LOW, of_conv_transpose(A_[0], A_[1], A_[2], stride, padding, output_padding, dilation,
                                    nsp, groups, out),
      x, w, b);
  OF_DISPATCH(conv_transpose_body(x, w, b, stride, padding, output_padding, dilation, nsp,
                                   groups, out),
            pack_conv(OPK_CONV_TRANSPOSE, x, w, b, stride, padding, dilation, output_padding, nsp,
                     groups, out));
}
of_status of_conv_weight_grad(of_tensor *x, of_tensor *grad_out, const int64_t *kernel_size,
                              const int64_t *stride, const int64_t *padding,
                              const int64_t *dilation, int32_t nsp, int64_t groups,
                              of_tensor **out) {
  OF_DISPATCH(conv_weight_grad_body(x, grad_out, kernel_size, stride, padding, dilation, nsp,
                                     groups, out),
            pack_conv(OPK_CONV_WEIGHT_GRAD, x, grad_out, NULL, stride, padding, dilation,
                     kernel_size, nsp, groups, out));
}
static of_status run_conv(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_conv);
  OF_NEED(a->nsp >= 1 && a->nsp <= 3, "nsp");
  of_tensor *r_ = NULL;
  of_status st;
  if (n->op == OPK_CONV)
    st = of_conv(ins[0], ins[1], ins[2], OF_OPT(1, stride), OF_OPT(2, padding), OF_OPT(4, dilation),
                 a->nsp, a->groups, &r_);
  else if (n->op == OPK_CONV_TRANSPOSE)
    st = of_conv_transpose(ins[0], ins[1], ins[2], OF_OPT(1, stride), OF_OPT(2, padding),
                           OF_OPT(8, extra), OF_OPT(4, dilation), a->nsp, a->groups, &r_);
  else
    st = of_conv_weight_grad(ins[0], ins[1], OF_OPT(8, extra), OF_OPT(1, stride), OF_OPT(2, padding),
                             OF_OPT(4, dilation), a->nsp, a->groups, &r_);
  if (st == OF_OK) outs[0] = r_;
  return st;
}

/* A loaded node's result from its record and the recorded operands, by the
 * geometry functions the ops check and allocate with: an edited padding
 * or kernel cannot make the first run allocate what the file never
 * described (doc/reliability.md, "Shapes re-inferred"). */
static of_status infer_conv_kind(int32_t op, const void *p, int32_t nin, const of_meta *ins,
                                 of_meta *outs) {
  const a_conv *r = p;
  static const char *const kinds[] = {"conv", "conv_transpose", "conv_weight_grad"};
  int32_t kind = op == OPK_CONV ? 0 : op == OPK_CONV_TRANSPOSE ? 1 : 2;
  conv_args a;
  OF_CHECK(init_args(&a, kinds[kind], (r->has & 1) ? r->stride : NULL,
                     (r->has & 2) ? r->padding : NULL, (r->has & 4) ? r->dilation : NULL, r->nsp,
                     r->groups));
  if (nin < 2 || ins[0].ndim < 0 || ins[1].ndim < 0)
    return of_fail(OF_ERR_ARG, "%s: the input and the %s are required", a.op,
                   kind == 2 ? "grad_output" : "weight");
  const of_meta *b = nin > 2 && ins[2].ndim >= 0 ? &ins[2] : NULL;
  const int64_t *extra = (r->has & 8) ? r->extra : NULL;
  int64_t osz[3];
  if (kind == 0) OF_CHECK(fwd_geometry(&a, &ins[0], &ins[1], b, NULL, outs[0].shape));
  else if (kind == 1) OF_CHECK(transpose_geometry(&a, &ins[0], &ins[1], b, extra, osz, outs[0].shape));
  else {
    if (!extra) return of_fail(OF_ERR_ARG, "%s: kernel_size is required", a.op);
    OF_CHECK(weight_grad_geometry(&a, &ins[0], &ins[1], extra, outs[0].shape));
  }
  outs[0].ndim = a.nsp + 2;
  outs[0].dtype = ins[0].dtype;
  return OF_OK;
}
#define CONV_INFER(K)                                                                   \
  static of_status infer_##K(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) { \
    return infer_conv_kind(OPK_##K, p, nin, ins, outs);                                 \
  }
CONV_INFER(CONV)
CONV_INFER(CONV_TRANSPOSE)
CONV_INFER(CONV_WEIGHT_GRAD)

OF_OP_IMPL_INFER(CONV, run_conv, NULL, NULL, describe_conv, infer_CONV);
OF_OP_IMPL_INFER(CONV_TRANSPOSE, run_conv, NULL, NULL, describe_conv, infer_CONV_TRANSPOSE);
OF_OP_IMPL_INFER(CONV_WEIGHT_GRAD, run_conv, NULL, NULL, describe_conv, infer_CONV_WEIGHT_GRAD);
