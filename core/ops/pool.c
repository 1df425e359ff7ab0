/* pool.c -- max, average and adaptive pooling over 1, 2 or 3 spatial dims,
 * on CPU, with autograd.
 *
 * Input [N, C, *spatial] or [C, *spatial]: every leading (N, C) pair is one
 * plane, pooled on its own. All pools are computed as 3-D (leading spatial
 * dims of size 1) from per-dim window tables: for output position o along a
 * dim, the first input position of the window, the number of valid
 * positions, and (average pools) that dim's share of the divisor. The tables
 * make the pools separable, so the inner loops carry no bounds checks.
 *
 * Windows (PyTorch's rules):
 *   max/avg   start = o*stride - padding; max steps by dilation; out-of-range
 *             positions are skipped. Average: the window is clipped to the
 *             padded input; divisor = clipped-to-padded size
 *             (count_include_pad), the in-range size, or divisor_override.
 *   adaptive  [floor(o*in/out), ceil((o+1)*in/out)).
 * Max pools return int64 indices into each flattened input plane (plus
 * index_base); NaN wins, ties keep the first position.
 *
 * Autograd: every pool is linear in its input once the indices are known.
 *   max:  gx = scatter(gy, idx)   whose grad is  gather(ggx, idx)  and back
 *   avg:  gx = avg_grad(gy)       whose grad is  avg(ggx)          and back
 * so grads of any order work. */
#include "../autograd.h"
#include "../device.h"
#include <math.h>
#include <stdint.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include "family.h"

static void pool_pack(a_pool *a, const int64_t *kernel, const int64_t *stride,
                      const int64_t *padding, const int64_t *dilation, int32_t nsp);

typedef enum { POOL_MAX, POOL_AVG } pool_kind;

/* A pool's arguments, read from its attribute record (a_pool, ops.def):
 * the record is what autograd nodes keep, and the backward rules rebuild
 * these from it (args_of). */
typedef struct {
  char op[40];
  int32_t kind;              /* OPK_MAX_POOL, OPK_AVG_POOL, OPK_ADAPTIVE_... */
  a_pool rec;                /* the op's record, as the body normalized it */
  int32_t nsp;
  bool adaptive;
  bool cip;                  /* count_include_pad */
  int64_t divisor;           /* > 0: divisor_override */
  int64_t k[3], s[3], p[3], d[3];   /* [nsp] used */
} pool_args;

/* One pool as 3-D over `planes` planes. */
typedef struct {
  int64_t planes;
  int64_t in[3], out[3];
  int64_t in_sz, out_sz;
  int64_t step[3];           /* input step within a window (dilation) */
  int64_t k[3], s[3], p[3];  /* fixed windows (max/avg, not adaptive) */
  int64_t *first[3], *count[3], *dv[3];   /* per-dim tables [out[d]] */
  int64_t *mem;
} pgeom;

static void pgeom_free(pgeom *g) { free(g->mem); }

/* Tables for the pool of `a` from input sizes `in` to `out` (nsp each). */
static of_status pgeom_init(pgeom *g, const pool_args *a, int64_t planes, const int64_t *in,
                            const int64_t *out) {
  int32_t lead = 3 - a->nsp;
  g->planes = planes;
  int64_t total = 0;
  for (int32_t d = 0; d < 3; d++) {
    g->in[d] = d >= lead ? in[d - lead] : 1;
    g->out[d] = d >= lead ? out[d - lead] : 1;
    total += g->out[d];
  }
  g->in_sz = g->in[0] * g->in[1] * g->in[2];
  g->out_sz = g->out[0] * g->out[1] * g->out[2];
  g->mem = malloc(sizeof(int64_t) * (size_t)(3 * total + 1));
  if (!g->mem) return of_fail(OF_ERR_OOM, "%s: out of memory", a->op);
  int64_t *m = g->mem;
  for (int32_t d = 0; d < 3; d++) {
    int64_t n = g->out[d], in_d = g->in[d];
    g->first[d] = m, m += n;
    g->count[d] = m, m += n;
    g->dv[d] = m, m += n;
    bool real = d >= lead;
    int32_t j = d - lead;
    int64_t k = real ? a->k[j] : 1, s = real ? a->s[j] : 1, p = real ? a->p[j] : 0;
    int64_t dil = real ? a->d[j] : 1;
    g->step[d] = a->adaptive ? 1 : dil;
    g->k[d] = k, g->s[d] = s, g->p[d] = p;
    for (int64_t o = 0; o < n; o++) {
      int64_t first, cnt, dv;
      if (a->adaptive || !real) {
        int64_t st = real ? (o * in_d) / n : 0;
        int64_t en = real ? ((o + 1) * in_d + n - 1) / n : 1;
        first = st, cnt = en - st, dv = cnt;
      } else {
        int64_t start = o * s - p;
        /* valid kernel taps: 0 <= start + t*dil < in_d */
        int64_t lo = start >= 0 ? 0 : (-start + dil - 1) / dil;
        int64_t hi = in_d - 1 - start < 0 ? 0 : (in_d - 1 - start) / dil + 1;
        if (hi > k) hi = k;
        if (lo > hi) lo = hi;
        first = start + lo * dil;
        cnt = hi - lo;
        /* average: window clipped to the padded input */
        int64_t pend = start + k < in_d + p ? start + k : in_d + p;
        dv = a->cip ? pend - start : cnt;
      }
      g->first[d][o] = first;
      g->count[d][o] = cnt;
      g->dv[d][o] = dv;
    }
  }
  return OF_OK;
}

/* int32s per thread in the max pool's scratch: whole cache lines apart */
static int64_t scratch_stride(int64_t ow) { return (ow + 15) / 16 * 16 + 16; }

static int pool_threads(int64_t units, int64_t work) {
  int nt = of_threads();
  if (work < OF_PARALLEL_GRAIN || units < 2) return 1;
  return units < nt ? (int)units : nt;
}

/* ---- kernels for float and double ---- */

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

/* m[o] = max(m[o], xr[o*sw]) for o in [lo, hi), recording `tap` where the
 * new value wins (NaN always wins). Vectorised per instruction set. */
#define MAX_UPDATE(T)                                                                       \
  __attribute__((target_clones("avx512f", "avx2", "default")))                             \
  static void max_update_##T(const T *xr, int64_t sw, int64_t lo, int64_t hi, T *m,          \
                             int32_t *tp, int32_t tap) {                                   \
    if (sw == 1) {                                                                         \
      for (int64_t o = lo; o < hi; o++) {                                                  \
        T v = xr[o], cur = m[o];                                                           \
        bool take = (v > cur) | (v != v);                                                  \
        m[o] = take ? v : cur;                                                             \
        tp[o] = take ? tap : tp[o];                                                        \
      }                                                                                    \
    } else if (sw == 2) {                                                                  \
      for (int64_t o = lo; o < hi; o++) {                                                  \
        T v = xr[2 * o], cur = m[o];                                                       \
        bool take = (v > cur) | (v != v);                                                  \
        m[o] = take ? v : cur;                                                             \
        tp[o] = take ? tap : tp[o];                                                        \
      }                                                                                    \
    } else {                                                                               \
      for (int64_t o = lo; o < hi; o++) {                                                  \
        T v = xr[o * sw], cur = m[o];                                                      \
        bool take = (v > cur) | (v != v);                                                  \
        m[o] = take ? v : cur;                                                             \
        tp[o] = take ? tap : tp[o];                                                        \
      }                                                                                    \
    }                                                                                      \
  }
MAX_UPDATE(float)
MAX_UPDATE(double)

/* Max over one small plane from a table of input offsets: tab[r, j] is the
 * input position of tap r of output j, or -1 (outside). Taps in (d, h, w)
 * order, so ties keep the first and the last NaN wins, as in max_fwd; t[j]
 * gets the winning position, or -1 when no tap won (all -inf, or no valid
 * tap). One vector pass per tap over the whole plane: rows of 7 or 14
 * outputs left max_update's vector loop unused (its scalar remainder
 * branched per element). */
#define MAX_PLANE(T)                                                                       \
  __attribute__((target_clones("avx512f", "avx2", "default")))                             \
  static void max_plane_##T(const T *restrict xp, T *restrict y, int32_t *restrict t,      \
                            const int32_t *restrict tab, int64_t K, int64_t L) {           \
    for (int64_t j = 0; j < L; j++) {                                                      \
      y[j] = (T)-INFINITY;                                                                 \
      t[j] = -1;                                                                           \
    }                                                                                      \
    for (int64_t r = 0; r < K; r++) {                                                      \
      const int32_t *restrict ix = tab + r * L;                                            \
      _Pragma("omp simd")                                                                  \
      for (int64_t j = 0; j < L; j++) {                                                    \
        int32_t k = ix[j];   /* a load for every lane (masked gathers did not vectorise) */ \
        T v = xp[k & ~(k >> 31)], cur = y[j];   /* (position 0 for -1) */                  \
        bool take = ((v > cur) | (v != v)) & (k >= 0);                                     \
        y[j] = take ? v : cur;                                                             \
        t[j] = take ? k : t[j];                                                            \
      }                                                                                    \
    }                                                                                      \
  }
MAX_PLANE(float)
MAX_PLANE(double)

/* y[i] += x[i*sx] and x[i*sx] += y[i], per instruction set */
#define ROW_ADD(T)                                                                          \
  __attribute__((target_clones("avx512f", "avx2", "default")))                             \
  static void row_add_##T(T *restrict y, const T *restrict x, int64_t sx, int64_t n) {      \
    if (sx == 1)                                                                           \
      for (int64_t i = 0; i < n; i++) y[i] += x[i];                                        \
    else if (sx == 2)                                                                      \
      for (int64_t i = 0; i < n; i++) y[i] += x[2 * i];                                    \
    else                                                                                   \
      for (int64_t i = 0; i < n; i++) y[i] += x[i * sx];                                   \
  }                                                                                        \
  __attribute__((target_clones("avx512f", "avx2", "default")))                             \
  static void row_add_to_##T(T *restrict x, int64_t sx, const T *restrict y, int64_t n) {   \
    if (sx == 1)                                                                           \
      for (int64_t i = 0; i < n; i++) x[i] += y[i];                                        \
    else                                                                                   \
      for (int64_t i = 0; i < n; i++) x[i * sx] += y[i];                                   \
  }
ROW_ADD(float)
ROW_ADD(double)

#define POOL_KERNELS(T)                                                                     \
  /* Average over windows of a fixed kernel (no dilation), tap by tap per output row. */   \
  static void avg_fixed_fwd_##T(const pgeom *g, const T *x, T *y, int64_t divisor) {        \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2];                          \
    const int64_t H = g->in[1], W = g->in[2];                                              \
    const int64_t KW = g->k[2], SW = g->s[2], PW = g->p[2];                                \
    int64_t rows = g->planes * OD * OH;                                                    \
    int nt = pool_threads(rows, g->planes * g->out_sz * 8);                                \
    _Pragma("omp parallel for num_threads(nt) if (nt > 1) schedule(static)")              \
    for (int64_t r = 0; r < rows; r++) {                                                   \
      int64_t oh = r % OH, od = (r / OH) % OD, pl = r / (OH * OD);                         \
      const T *xp = x + pl * g->in_sz;                                                     \
      T *yp = y + r * OW;                                                                  \
      int64_t fd = g->first[0][od], nd = g->count[0][od];                                  \
      int64_t fh = g->first[1][oh], nh = g->count[1][oh];                                  \
      for (int64_t ow = 0; ow < OW; ow++) yp[ow] = 0;                                      \
      for (int64_t a = 0; a < nd; a++)                                                     \
        for (int64_t b = 0; b < nh; b++) {                                                 \
          const T *xr = xp + ((fd + a) * H + fh + b) * W;                                  \
          for (int64_t c = 0; c < KW; c++) {                                               \
            int64_t off = c - PW, lo, hi;                                                  \
            valid_range(off, SW, W, OW, &lo, &hi);                                         \
            row_add_##T(yp + lo, xr + off + lo * SW, SW, hi - lo);                         \
          }                                                                                \
        }                                                                                  \
      int64_t dvdh = g->dv[0][od] * g->dv[1][oh];                                          \
      for (int64_t ow = 0; ow < OW; ow++) {                                                \
        int64_t dv = divisor > 0 ? divisor : dvdh * g->dv[2][ow];                          \
        yp[ow] = nd * nh * g->count[2][ow] == 0 ? 0 : yp[ow] / (T)dv;                      \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
                                                                                           \
  /* gx (zeroed here) += gy / divisor over each window; planes in parallel;               \
   * scratch: OW per thread */                                                             \
  static void avg_fixed_bwd_##T(const pgeom *g, const T *gy, T *gx, int64_t divisor,        \
                                T *scratch, int nt) {                                      \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2];                          \
    const int64_t H = g->in[1], W = g->in[2];                                              \
    const int64_t KW = g->k[2], SW = g->s[2], PW = g->p[2];                                \
    _Pragma("omp parallel num_threads(nt) if (nt > 1)")                                   \
    {                                                                                      \
      T *tmp = scratch + (int64_t)omp_get_thread_num() * scratch_stride(OW);               \
      _Pragma("omp for schedule(static)")                                                  \
      for (int64_t pl = 0; pl < g->planes; pl++) {                                         \
        T *xp = gx + pl * g->in_sz;                                                        \
        memset(xp, 0, sizeof(T) * (size_t)g->in_sz);                                       \
        const T *yp = gy + pl * g->out_sz;                                                 \
        for (int64_t od = 0; od < OD; od++)                                                \
          for (int64_t oh = 0; oh < OH; oh++, yp += OW) {                                  \
            int64_t fd = g->first[0][od], nd = g->count[0][od];                            \
            int64_t fh = g->first[1][oh], nh = g->count[1][oh];                            \
            int64_t dvdh = g->dv[0][od] * g->dv[1][oh];                                    \
            for (int64_t ow = 0; ow < OW; ow++) {                                          \
              int64_t dv = divisor > 0 ? divisor : dvdh * g->dv[2][ow];                    \
              tmp[ow] = nd * nh * g->count[2][ow] == 0 ? 0 : yp[ow] / (T)dv;               \
            }                                                                              \
            for (int64_t a = 0; a < nd; a++)                                               \
              for (int64_t b = 0; b < nh; b++) {                                           \
                T *xr = xp + ((fd + a) * H + fh + b) * W;                                  \
                for (int64_t c = 0; c < KW; c++) {                                         \
                  int64_t off = c - PW, lo, hi;                                            \
                  valid_range(off, SW, W, OW, &lo, &hi);                                   \
                  row_add_to_##T(xr + off + lo * SW, SW, tmp + lo, hi - lo);               \
                }                                                                          \
              }                                                                            \
          }                                                                                \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
                                                                                           \
  /* Max over windows of a fixed kernel: per output row, each kernel tap updates the       \
   * whole row (no per-element bounds checks), remembering the winning tap; the tap        \
   * becomes an index at the end. Taps go in (d, h, w) order, so ties keep the first       \
   * position and the last NaN wins, as PyTorch. scratch: OW int32 per thread; planes      \
   * must have fewer than 2^31 elements (else max_table_fwd). */                           \
  static void max_fwd_##T(const pgeom *g, const T *x, T *y, int64_t *idx, int64_t base,     \
                          int32_t *scratch, int nt) {                                      \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2];                          \
    const int64_t H = g->in[1], W = g->in[2];                                              \
    const int64_t sd = g->step[0], sh = g->step[1], dw = g->step[2];                       \
    const int64_t KW = g->k[2], SW = g->s[2], PW = g->p[2];                                \
    int64_t rows = g->planes * OD * OH;                                                    \
    _Pragma("omp parallel num_threads(nt) if (nt > 1)")                                   \
    {                                                                                      \
      int32_t *tp = scratch + (int64_t)omp_get_thread_num() * scratch_stride(OW);          \
      _Pragma("omp for schedule(static)")                                                  \
      for (int64_t r = 0; r < rows; r++) {                                                 \
        int64_t oh = r % OH, od = (r / OH) % OD, pl = r / (OH * OD);                       \
        const T *xp = x + pl * g->in_sz;                                                   \
        T *yp = y + r * OW;                                                                \
        int64_t *ip = idx + r * OW;                                                        \
        int64_t fd = g->first[0][od], nd = g->count[0][od];                                \
        int64_t fh = g->first[1][oh], nh = g->count[1][oh];                                \
        for (int64_t ow = 0; ow < OW; ow++) {                                              \
          yp[ow] = (T)-INFINITY;                                                           \
          tp[ow] = INT32_MIN;                                                              \
        }                                                                                  \
        for (int64_t a = 0; a < nd; a++)                                                   \
          for (int64_t b = 0; b < nh; b++) {                                               \
            const T *xr = xp + ((fd + a * sd) * H + fh + b * sh) * W;                      \
            for (int64_t c = 0; c < KW; c++) {                                             \
              int64_t off = c * dw - PW, lo, hi;                                           \
              valid_range(off, SW, W, OW, &lo, &hi);                                       \
              /* the tap as an offset: position = tap + ow * SW */                         \
              max_update_##T(xr + off, SW, lo, hi, yp, tp, (int32_t)(xr - xp + off));      \
            }                                                                              \
          }                                                                                \
        for (int64_t ow = 0; ow < OW; ow++) {                                              \
          int64_t pos = (int64_t)tp[ow] + ow * SW;                                         \
          if (tp[ow] == INT32_MIN) {   /* all -inf (or an empty window): the first one */  \
            pos = (fd * H + fh) * W + g->first[2][ow];                                     \
            if (nd * nh * g->count[2][ow] == 0) yp[ow] = 0, pos = 0;                       \
          }                                                                                \
          ip[ow] = pos + base;                                                             \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
                                                                                           \
  /* Max over the windows of the tables, one output at a time (adaptive pools, huge      \
   * planes). */                                                                           \
  static void max_table_fwd_##T(const pgeom *g, const T *x, T *y, int64_t *idx,            \
                                int64_t base) {                                            \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2];                          \
    const int64_t H = g->in[1], W = g->in[2];                                              \
    const int64_t sd = g->step[0], sh = g->step[1], sw = g->step[2];                       \
    int64_t rows = g->planes * OD * OH;                                                    \
    int nt = pool_threads(rows, g->planes * g->out_sz * 8);                                \
    _Pragma("omp parallel for num_threads(nt) if (nt > 1) schedule(static)")              \
    for (int64_t r = 0; r < rows; r++) {                                                   \
      int64_t oh = r % OH, od = (r / OH) % OD, pl = r / (OH * OD);                         \
      const T *xp = x + pl * g->in_sz;                                                     \
      T *yp = y + r * OW;                                                                  \
      int64_t *ip = idx + r * OW;                                                          \
      int64_t fd = g->first[0][od], nd = g->count[0][od];                                  \
      int64_t fh = g->first[1][oh], nh = g->count[1][oh];                                  \
      for (int64_t ow = 0; ow < OW; ow++) {                                                \
        int64_t fw = g->first[2][ow], nw = g->count[2][ow];                                \
        T best = (T)-INFINITY;                                                             \
        int64_t bi = ((fd * H) + fh) * W + fw;                                             \
        for (int64_t a = 0; a < nd; a++)                                                   \
          for (int64_t b = 0; b < nh; b++) {                                               \
            int64_t row = ((fd + a * sd) * H + fh + b * sh) * W + fw;                      \
            const T *xr = xp + row;                                                        \
            for (int64_t c = 0; c < nw; c++) {                                             \
              T v = xr[c * sw];                                                            \
              if (v > best || v != v) {                                                    \
                best = v;                                                                  \
                bi = row + c * sw;                                                         \
              }                                                                            \
            }                                                                              \
          }                                                                                \
        if (nd * nh * nw == 0) best = 0, bi = 0;                                           \
        yp[ow] = best;                                                                     \
        ip[ow] = bi + base;                                                                \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
                                                                                           \
  static void avg_fwd_##T(const pgeom *g, const T *x, T *y, int64_t divisor) {              \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2];                          \
    const int64_t H = g->in[1], W = g->in[2];                                              \
    int64_t rows = g->planes * OD * OH;                                                    \
    int nt = pool_threads(rows, g->planes * g->out_sz * 8);                                \
    _Pragma("omp parallel for num_threads(nt) if (nt > 1) schedule(static)")              \
    for (int64_t r = 0; r < rows; r++) {                                                   \
      int64_t oh = r % OH, od = (r / OH) % OD, pl = r / (OH * OD);                         \
      const T *xp = x + pl * g->in_sz;                                                     \
      T *yp = y + r * OW;                                                                  \
      int64_t fd = g->first[0][od], nd = g->count[0][od];                                  \
      int64_t fh = g->first[1][oh], nh = g->count[1][oh];                                  \
      int64_t dvdh = g->dv[0][od] * g->dv[1][oh];                                          \
      for (int64_t ow = 0; ow < OW; ow++) {                                                \
        int64_t fw = g->first[2][ow], nw = g->count[2][ow];                                \
        T acc = 0;                                                                         \
        for (int64_t a = 0; a < nd; a++)                                                   \
          for (int64_t b = 0; b < nh; b++) {                                               \
            const T *xr = xp + ((fd + a) * H + fh + b) * W + fw;                           \
            for (int64_t c = 0; c < nw; c++) acc += xr[c];                                 \
          }                                                                                \
        int64_t dv = divisor > 0 ? divisor : dvdh * g->dv[2][ow];                          \
        yp[ow] = nd * nh * nw == 0 ? 0 : acc / (T)dv;                                      \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
                                                                                           \
  /* gx (zeroed here) += gy / divisor over each window; planes in parallel */              \
  static void avg_bwd_##T(const pgeom *g, const T *gy, T *gx, int64_t divisor) {            \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2];                          \
    const int64_t H = g->in[1], W = g->in[2];                                              \
    int nt = pool_threads(g->planes, g->planes * g->out_sz * 8);                           \
    _Pragma("omp parallel for num_threads(nt) if (nt > 1) schedule(static)")              \
    for (int64_t pl = 0; pl < g->planes; pl++) {                                           \
      T *xp = gx + pl * g->in_sz;                                                          \
      memset(xp, 0, sizeof(T) * (size_t)g->in_sz);                                         \
      const T *yp = gy + pl * g->out_sz;                                                   \
      for (int64_t od = 0; od < OD; od++)                                                  \
        for (int64_t oh = 0; oh < OH; oh++, yp += OW) {                                    \
          int64_t fd = g->first[0][od], nd = g->count[0][od];                              \
          int64_t fh = g->first[1][oh], nh = g->count[1][oh];                              \
          int64_t dvdh = g->dv[0][od] * g->dv[1][oh];                                      \
          for (int64_t ow = 0; ow < OW; ow++) {                                            \
            int64_t fw = g->first[2][ow], nw = g->count[2][ow];                            \
            if (nd * nh * nw == 0) continue;                                               \
            int64_t dv = divisor > 0 ? divisor : dvdh * g->dv[2][ow];                      \
            T v = yp[ow] / (T)dv;                                                          \
            for (int64_t a = 0; a < nd; a++)                                               \
              for (int64_t b = 0; b < nh; b++) {                                           \
                T *xr = xp + ((fd + a) * H + fh + b) * W + fw;                             \
                for (int64_t c = 0; c < nw; c++) xr[c] += v;                               \
              }                                                                            \
          }                                                                                \
        }                                                                                  \
    }                                                                                      \
  }                                                                                        \
                                                                                           \
  /* gx (zeroed here)[pl, idx[pl, j]] += gy[pl, j] */                                      \
  static void scatter_##T(int64_t planes, int64_t in_sz, int64_t out_sz, const T *gy,       \
                          const int64_t *idx, int64_t base, T *gx) {                       \
    int nt = pool_threads(planes, planes * out_sz * 4);                                    \
    _Pragma("omp parallel for num_threads(nt) if (nt > 1) schedule(static)")              \
    for (int64_t pl = 0; pl < planes; pl++) {                                              \
      T *xp = gx + pl * in_sz;                                                             \
      memset(xp, 0, sizeof(T) * (size_t)in_sz);                                            \
      const T *yp = gy + pl * out_sz;                                                      \
      const int64_t *ip = idx + pl * out_sz;                                               \
      for (int64_t j = 0; j < out_sz; j++) {                                               \
        int64_t i = ip[j] - base;                                                          \
        if (i >= 0 && i < in_sz) xp[i] += yp[j];                                           \
      }                                                                                    \
    }                                                                                      \
  }                                                                                        \
                                                                                           \
  /* y[pl, j] = x[pl, idx[pl, j]] */                                                       \
  static void gather_##T(int64_t planes, int64_t in_sz, int64_t out_sz, const T *x,         \
                         const int64_t *idx, int64_t base, T *y) {                         \
    int nt = pool_threads(planes, planes * out_sz * 4);                                    \
    _Pragma("omp parallel for num_threads(nt) if (nt > 1) schedule(static)")              \
    for (int64_t pl = 0; pl < planes; pl++) {                                              \
      const T *xp = x + pl * in_sz;                                                        \
      for (int64_t j = 0; j < out_sz; j++) {                                               \
        int64_t i = idx[pl * out_sz + j] - base;                                           \
        y[pl * out_sz + j] = i >= 0 && i < in_sz ? xp[i] : 0;                              \
      }                                                                                    \
    }                                                                                      \
  }

POOL_KERNELS(float)
POOL_KERNELS(double)

/* Channels-last max pool (x dense [N, D, H, W, C]): each output pixel takes
 * the max of its window's taps, a vector over C per tap (max_cl_tap), taps
 * in (d, h, w) order with the plane kernels' rule (ties keep the first
 * position, the last NaN wins, an all -inf window its first position, an
 * empty one 0). y and the plane positions in idx are channels-last too. */
#define MAX_CL(T)                                                                          \
  __attribute__((target_clones("avx512f", "avx2", "default")))                             \
  static void max_cl_tap_##T(const T *restrict xp, int64_t C, T *restrict y,               \
                             int32_t *restrict t, int32_t pos) {                           \
    for (int64_t c = 0; c < C; c++) {                                                      \
      T v = xp[c], cur = y[c];                                                             \
      bool take = (v > cur) | (v != v);                                                    \
      y[c] = take ? v : cur;                                                               \
      t[c] = take ? pos : t[c];                                                            \
    }                                                                                      \
  }                                                                                        \
  static void max_cl_fwd_##T(const pgeom *g, int64_t N, int64_t C, const T *x, T *y,        \
                             int64_t *idx, int64_t base, int32_t *scratch, int nt) {       \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2];                          \
    const int64_t H = g->in[1], W = g->in[2];                                              \
    int64_t rows = N * OD * OH;                                                            \
    _Pragma("omp parallel num_threads(nt) if (nt > 1)")                                   \
    {                                                                                      \
      int32_t *t = scratch + (int64_t)omp_get_thread_num() * C;                            \
      _Pragma("omp for schedule(static)")                                                  \
      for (int64_t r = 0; r < rows; r++) {                                                 \
        int64_t oh = r % OH, od = (r / OH) % OD, n = r / (OH * OD);                        \
        const T *xn = x + n * g->in_sz * C;                                                \
        int64_t fd = g->first[0][od], nd = g->count[0][od];                                \
        int64_t fh = g->first[1][oh], nh = g->count[1][oh];                                \
        for (int64_t ow = 0; ow < OW; ow++) {                                              \
          T *yp = y + (r * OW + ow) * C;                                                   \
          int64_t *ip = idx + (r * OW + ow) * C;                                           \
          int64_t fw = g->first[2][ow], nw = g->count[2][ow];                              \
          for (int64_t c = 0; c < C; c++) yp[c] = (T)-INFINITY, t[c] = INT32_MIN;          \
          for (int64_t a = 0; a < nd; a++)                                                 \
            for (int64_t b = 0; b < nh; b++)                                               \
              for (int64_t e = 0; e < nw; e++) {                                           \
                int64_t pos = ((fd + a * g->step[0]) * H + fh + b * g->step[1]) * W + fw + \
                              e * g->step[2];                                              \
                max_cl_tap_##T(xn + pos * C, C, yp, t, (int32_t)pos);                      \
              }                                                                            \
          int64_t first = (fd * H + fh) * W + fw;                                          \
          bool empty = nd * nh * nw == 0;                                                  \
          for (int64_t c = 0; c < C; c++) {                                                \
            if (empty) yp[c] = 0;                                                          \
            ip[c] = (empty ? 0 : t[c] == INT32_MIN ? first : t[c]) + base;                 \
          }                                                                                \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }
MAX_CL(float)
MAX_CL(double)

/* ---- max pool over small planes (max_plane) ---- */

enum { PLANE_MAX_TABLE = 1 << 16 };   /* taps x outputs */

/* Entries of the plane tables for g, 0 where the row kernels are used
 * (outputs rows of 32 and more vectorise there). */
static int64_t plane_entries(const pgeom *g) {
  int64_t K = g->k[0] * g->k[1] * g->k[2];
  if (g->out[2] >= 32 || g->in_sz >= INT32_MAX || K * g->out_sz > PLANE_MAX_TABLE) return 0;
  return K * g->out_sz;
}

/* tab [K, out_sz]: input positions of the taps (-1 outside); first[j]: the
 * first valid one of output j (-1: none) */
static void plane_tables(const pgeom *g, int32_t *tab, int32_t *first) {
  int64_t L = g->out_sz, r = 0;
  for (int64_t j = 0; j < L; j++) first[j] = -1;
  for (int64_t a = 0; a < g->k[0]; a++)
    for (int64_t b = 0; b < g->k[1]; b++)
      for (int64_t c = 0; c < g->k[2]; c++, r++) {
        int64_t j = 0;
        for (int64_t od = 0; od < g->out[0]; od++)
          for (int64_t oh = 0; oh < g->out[1]; oh++)
            for (int64_t ow = 0; ow < g->out[2]; ow++, j++) {
              int64_t id = od * g->s[0] - g->p[0] + a * g->step[0];
              int64_t ih = oh * g->s[1] - g->p[1] + b * g->step[1];
              int64_t iw = ow * g->s[2] - g->p[2] + c * g->step[2];
              bool in = id >= 0 && id < g->in[0] && ih >= 0 && ih < g->in[1] && iw >= 0 &&
                        iw < g->in[2];
              int32_t pos = in ? (int32_t)((id * g->in[1] + ih) * g->in[2] + iw) : -1;
              tab[r * L + j] = pos;
              if (in && first[j] < 0) first[j] = pos;
            }
      }
}

#define PLANE_FWD(T)                                                                       \
  static void max_planes_fwd_##T(const pgeom *g, const T *x, T *y, int64_t *idx,           \
                                 int64_t base, const int32_t *tab, const int32_t *first,   \
                                 int32_t *scratch, int nt) {                               \
    int64_t K = g->k[0] * g->k[1] * g->k[2], L = g->out_sz;                                \
    _Pragma("omp parallel num_threads(nt) if (nt > 1)")                                    \
    {                                                                                      \
      int32_t *t = scratch + (int64_t)omp_get_thread_num() * (L + 16);                     \
      _Pragma("omp for schedule(static)")                                                  \
      for (int64_t pl = 0; pl < g->planes; pl++) {                                         \
        T *yp = y + pl * L;                                                                \
        int64_t *ip = idx + pl * L;                                                        \
        max_plane_##T(x + pl * g->in_sz, yp, t, tab, K, L);                                \
        for (int64_t j = 0; j < L; j++) {                                                  \
          int64_t pos = t[j];                                                              \
          if (pos < 0) {   /* all -inf: the first position; no valid tap: 0 */             \
            pos = first[j] < 0 ? 0 : first[j];                                             \
            if (first[j] < 0) yp[j] = 0;                                                   \
          }                                                                                \
          ip[j] = pos + base;                                                              \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }
PLANE_FWD(float)
PLANE_FWD(double)

/* ---- helpers ---- */

static bool is_float(of_dtype dt) {
  return dt == OF_FLOAT16 || dt == OF_BFLOAT16 || dt == OF_FLOAT32 || dt == OF_FLOAT64;
}
static of_dtype compute_dtype(of_dtype dt) { return dt == OF_FLOAT64 ? OF_FLOAT64 : OF_FLOAT32; }

static of_status operand(of_tensor *t, of_dtype dt, of_tensor **out) {
  if (t->dtype == dt && of_tensor_is_contiguous(t)) {
    of_tensor_retain(t);
    *out = t;
    return OF_OK;
  }
  if (t->dtype == dt) return of_clone_data(t, out);
  return of_cast_data(t, dt, out);
}

#define LIST(v, n) of_shape_str((v), (n), (char[64]){0}, 64)

static const char *dims_name(int32_t nsp, bool batched) {
  static const char *names[2][4] = {{"", "[C, L]", "[C, H, W]", "[C, D, H, W]"},
                                    {"", "[N, C, L]", "[N, C, H, W]", "[N, C, D, H, W]"}};
  return names[batched][nsp];
}

/* Input checks common to all pools; *planes = product of the leading dims. */
static of_status check_input(const pool_args *a, const of_meta *x, int64_t *planes) {
  int32_t nsp = a->nsp;
  if (x->ndim != nsp + 1 && x->ndim != nsp + 2)
    return of_fail(OF_ERR_SHAPE, "%s: expected input with %d or %d dims (%s or %s), got %s",
                   a->op, nsp + 1, nsp + 2, dims_name(nsp, false), dims_name(nsp, true),
                   OF_SHAPE_STR(x));
  if (!is_float(x->dtype))
    return of_fail(OF_ERR_DTYPE, "%s: expected a floating-point input, got %s (input %s)",
                   a->op, OF_DT(x), OF_SHAPE_STR(x));
  int64_t pl = 1;
  for (int32_t i = 0; i < x->ndim - nsp; i++) pl *= x->shape[i];
  *planes = pl;
  return OF_OK;
}

static bool is_adaptive(int32_t op) {
  return op == OPK_ADAPTIVE_AVG_POOL || op == OPK_ADAPTIVE_MAX_POOL;
}

/* The arguments of the pool `op` from its record: windows default as the
 * entry points document (stride: the kernel, padding 0, dilation 1);
 * adaptive pools (record's kernel: the output size) have unit windows. */
static void args_of(pool_args *a, int32_t op, const a_pool *r) {
  memset(a, 0, sizeof *a);
  a->kind = op;
  a->rec = *r;
  a->nsp = r->nsp;
  a->adaptive = is_adaptive(op);
  a->cip = r->cip != 0;
  a->divisor = r->divisor > 0 ? r->divisor : 0;
  for (int32_t i = 0; i < 3; i++) a->k[i] = a->s[i] = a->d[i] = 1;
  if (a->adaptive) return;
  for (int32_t i = 0; i < r->nsp && i < 3; i++) {
    a->k[i] = r->kernel[i];
    a->s[i] = (r->has & 2) ? r->stride[i] : r->kernel[i];
    a->p[i] = (r->has & 4) ? r->padding[i] : 0;
    a->d[i] = (r->has & 8) ? r->dilation[i] : 1;
  }
}

/* The body's arguments: `kind` names the op in messages. */
static of_status init_args(pool_args *a, const char *kind, int32_t op, const a_pool *r) {
  if (r->nsp < 1 || r->nsp > 3)
    return of_fail(OF_ERR_ARG, "%s: expected 1, 2 or 3 spatial dims, got %d", kind, (int)r->nsp);
  args_of(a, op, r);
  snprintf(a->op, sizeof a->op, "%s%dd", kind, (int)a->nsp);
  return OF_OK;
}

/* A backward rule's arguments: the record its node kept. */
static void args_of_node(const of_node *n, pool_args *a) {
  args_of(a, n->attr_op, OF_NODE_ATTRS(a_pool, n));
  snprintf(a->op, sizeof a->op, "%spool%dd_backward", a->adaptive ? "adaptive_" : "",
           (int)a->nsp);
}

/* kernel/stride/padding/dilation checks and the output size. */
static of_status windowed_out(const pool_args *a, const of_meta *x, int64_t *out) {
  int32_t nsp = a->nsp, ceil_mode = a->rec.ceil_mode;
  if (!(a->rec.has & 1)) return of_fail(OF_ERR_ARG, "%s: kernel_size is required", a->op);
  for (int32_t i = 0; i < nsp; i++) {
    if (a->k[i] < 1)
      return of_fail(OF_ERR_ARG, "%s: kernel_size must be positive, got %s", a->op,
                     LIST(a->k, nsp));
    if (a->s[i] < 1)
      return of_fail(OF_ERR_ARG, "%s: stride must be positive, got %s", a->op, LIST(a->s, nsp));
    if (a->d[i] < 1)
      return of_fail(OF_ERR_ARG, "%s: dilation must be positive, got %s", a->op,
                     LIST(a->d, nsp));
    if (a->p[i] < 0 || a->p[i] > a->k[i] / 2)
      return of_fail(OF_ERR_ARG, "%s: padding %s must be non-negative and at most half the "
                     "kernel size %s", a->op, LIST(a->p, nsp), LIST(a->k, nsp));
  }
  const int64_t *in = x->shape + x->ndim - nsp;
  bool bad = false;
  for (int32_t i = 0; i < nsp; i++) {
    int64_t num = in[i] + 2 * a->p[i] - a->d[i] * (a->k[i] - 1) - 1 + (ceil_mode ? a->s[i] - 1 : 0);
    int64_t o = (num >= 0 ? num / a->s[i] : -((-num + a->s[i] - 1) / a->s[i])) + 1;
    if (ceil_mode && o > 0 && (o - 1) * a->s[i] >= in[i] + a->p[i]) o--;
    out[i] = o;
    if (o < 1) bad = true;
  }
  if (bad)
    return of_fail(OF_ERR_SHAPE, "%s: output size %s is too small (input %s, kernel %s, "
                   "stride %s, padding %s, dilation %s)", a->op, LIST(out, nsp),
                   OF_SHAPE_STR(x), LIST(a->k, nsp), LIST(a->s, nsp), LIST(a->p, nsp),
                   LIST(a->d, nsp));
  return OF_OK;
}

static void result_shape(const of_tensor *x, int32_t nsp, const int64_t *osz, int64_t *shape) {
  int32_t lead = x->ndim - nsp;
  for (int32_t i = 0; i < lead; i++) shape[i] = x->shape[i];
  for (int32_t i = 0; i < nsp; i++) shape[lead + i] = osz[i];
}

static of_status adaptive_sizes(const pool_args *a, const of_meta *x, int64_t *osz);
/* The result's spatial sizes osz (and *planes, the product of the leading
 * dims): every check a pool makes before it allocates, on the input's shape
 * and dtype, and what a loaded graph's node is re-inferred with (infer_pool) */
static of_status pool_geometry(const pool_args *a, const of_meta *x, int64_t *planes,
                               int64_t *osz) {
  OF_CHECK(check_input(a, x, planes));
  return a->adaptive ? adaptive_sizes(a, x, osz) : windowed_out(a, x, osz);
}

/* ---- device kernels (cuda/nn.cu): the pool as 3-D, leading dims of 1 ---- */

static of_pool_desc pool_desc(const pool_args *a, int64_t planes, const int64_t *in,
                              const int64_t *out) {
  of_pool_desc d = {.adaptive = a->adaptive, .cip = a->cip, .divisor = a->divisor,
                    .planes = planes};
  int32_t lead = 3 - a->nsp;
  for (int32_t i = 0; i < 3; i++) {
    bool real = i >= lead;
    int32_t j = i - lead;
    d.in[i] = real ? in[j] : 1;
    d.out[i] = real ? out[j] : 1;
    d.k[i] = real ? a->k[j] : 1;
    d.s[i] = real ? a->s[j] : 1;
    d.p[i] = real ? a->p[j] : 0;
    d.d[i] = real ? a->d[j] : 1;
  }
  return d;
}

static const of_device_ops *pool_ops(const char *op, of_tensor *t) {
  const of_device_ops *o = of_device_ops_for(op, of_dev(t));
  if (o) of_device_last_op = op;
  return o;
}

/* A channels-last input gives a channels-last result (t is consumed). */
static of_status keep_format(of_tensor *x, of_tensor **t) {
  if (!*t || !of_prefers_channels_last(x) || (*t)->ndim != x->ndim) return OF_OK;
  of_tensor *h = NULL;
  of_status st = of_dense_format(*t, true, (*t)->dtype, &h);
  of_tensor_release(*t);
  *t = h;
  return st;
}

/* ---- index scatter / gather (max pools' backward), with autograd ---- */

/* The nodes of these ops keep the max pool's record (kind `op`): its
 * index base and spatial dims are theirs. */
static of_status idx_scatter(of_tensor *gy, of_tensor *idx, int32_t op, const a_pool *r,
                             const of_meta *in, of_tensor **out);
static of_status idx_gather(of_tensor *x, of_tensor *idx, int32_t op, const a_pool *r,
                            of_tensor **out);

/* scatter's grad: gather the grad at the indices (saved idx slot 0) */
static of_status scatter_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_tensor *idx;
  OF_CHECK(of_node_saved(n, 0, &idx));
  of_status st = idx_gather(g[0], idx, n->attr_op, OF_NODE_ATTRS(a_pool, n), &gi[0]);
  of_tensor_release(idx);
  return st;
}
static const of_grad_def scatter_grad = {"MaxPoolGradBackward", scatter_backward};

static of_status gather_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_tensor *idx;
  OF_CHECK(of_node_saved(n, 0, &idx));
  of_status st = idx_scatter(g[0], idx, n->attr_op, OF_NODE_ATTRS(a_pool, n), &n->in_meta[0],
                             &gi[0]);
  of_tensor_release(idx);
  return st;
}
static const of_grad_def gather_grad = {"MaxPoolGatherBackward", gather_backward};

static of_status record_idx(const of_grad_def *def, of_tensor *in, of_tensor *idx, int32_t op,
                            const a_pool *r, of_tensor **out) {
  if (!of_grad_needed(&in, 1)) return OF_OK;
  of_node *n;
  of_status st = of_record(def, &in, 1, out, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    *out = NULL;
    return st;
  }
  OF_NODE_KEEP(n, op, *r);
  of_node_save(n, 0, idx);
  return OF_OK;
}

static int64_t tail_numel(const int64_t *shape, int32_t ndim, int32_t nsp) {
  int64_t s = 1;
  for (int32_t i = ndim - nsp; i < ndim; i++) s *= shape[i];
  return s;
}

/* Index-op operands: gy/x in compute dtype, idx int64 contiguous. */
static of_status idx_operands(of_tensor *t, of_tensor *idx, of_dtype cd, of_tensor **ct,
                              of_tensor **ci) {
  *ct = *ci = NULL;
  if (idx->dtype != OF_INT64 || t->numel != idx->numel)
    return of_fail(OF_ERR_SHAPE, "max_pool_backward: indices %s (%s) do not match the grad %s",
                   OF_SHAPE_STR(idx), OF_DT(idx), OF_SHAPE_STR(t));
  of_status st = operand(t, cd, ct);
  if (st == OF_OK) st = operand(idx, OF_INT64, ci);
  if (st != OF_OK) {
    of_tensor_release(*ct);
    *ct = NULL;
  }
  return st;
}

static of_status idx_scatter(of_tensor *gy, of_tensor *idx, int32_t op, const a_pool *r,
                             const of_meta *in, of_tensor **out) {
  int64_t base = r->base;
  int32_t nsp = r->nsp;
  of_dtype dt = gy->dtype, cd = compute_dtype(dt);
  of_tensor *cg, *ci, *res = NULL;
  OF_CHECK(idx_operands(gy, idx, cd, &cg, &ci));
  int64_t in_sz = tail_numel(in->shape, in->ndim, nsp);
  int64_t out_sz = tail_numel(gy->shape, gy->ndim, nsp);
  int64_t planes = out_sz ? gy->numel / out_sz : 0;
  of_status st = of_tensor_new(in->shape, in->ndim, cd, of_dev(gy), &res);
  if (st == OF_OK && res->numel > 0) {
    const of_device_ops *o = NULL;
    if (planes * in_sz != res->numel) {
      char b[96];
      st = of_fail(OF_ERR_SHAPE, "max_pool_backward: grad %s does not fit input %s",
                   OF_SHAPE_STR(gy), of_shape_str(in->shape, in->ndim, b, 96));
    } else if (of_dev(gy) != OF_CPU) {
      o = pool_ops("max_pool_backward", gy);
      st = !o ? OF_ERR_DEVICE : !o->pool_index
                ? of_device_unsupported("max_pool_backward", of_dev(gy))
                : o->pool_index(1, planes, in_sz, out_sz, cg, ci, base, res);
    } else if (cd == OF_FLOAT32) {
      scatter_float(planes, in_sz, out_sz, (const float *)of_ptr(cg),
                    (const int64_t *)of_ptr(ci), base, (float *)of_ptr(res));
    } else {
      scatter_double(planes, in_sz, out_sz, (const double *)of_ptr(cg),
                     (const int64_t *)of_ptr(ci), base, (double *)of_ptr(res));
    }
  }
  of_tensor_release(cg);
  of_tensor_release(ci);
  if (st == OF_OK && cd != dt) {
    of_tensor *h = NULL;
    st = of_cast_data(res, dt, &h);
    of_tensor_release(res);
    res = h;
  }
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return record_idx(&scatter_grad, gy, idx, op, r, out);
}

static of_status idx_gather(of_tensor *x, of_tensor *idx, int32_t op, const a_pool *r,
                            of_tensor **out) {
  int64_t base = r->base;
  int32_t nsp = r->nsp;
  of_dtype dt = x->dtype, cd = compute_dtype(dt);
  of_tensor *cx = NULL, *ci = NULL, *res = NULL;
  if (idx->dtype != OF_INT64)
    return of_fail(OF_ERR_DTYPE, "max_pool_backward: indices must be int64, got %s",
                   OF_DT(idx));
  of_status st = operand(x, cd, &cx);
  if (st == OF_OK) st = operand(idx, OF_INT64, &ci);
  if (st == OF_OK) st = of_tensor_new(idx->shape, idx->ndim, cd, of_dev(x), &res);
  int64_t in_sz = tail_numel(x->shape, x->ndim, nsp);
  int64_t out_sz = tail_numel(idx->shape, idx->ndim, nsp);
  int64_t planes = out_sz ? idx->numel / out_sz : 0;
  if (st == OF_OK && res->numel > 0) {
    if (planes * in_sz != x->numel) {
      st = of_fail(OF_ERR_SHAPE, "max_pool_backward: grad %s does not fit indices %s",
                   OF_SHAPE_STR(x), OF_SHAPE_STR(idx));
    } else if (of_dev(x) != OF_CPU) {
      const of_device_ops *o = pool_ops("max_pool_backward", x);
      st = !o ? OF_ERR_DEVICE : !o->pool_index
                ? of_device_unsupported("max_pool_backward", of_dev(x))
                : o->pool_index(0, planes, in_sz, out_sz, cx, ci, base, res);
    } else if (cd == OF_FLOAT32) {
      gather_float(planes, in_sz, out_sz, (const float *)of_ptr(cx),
                   (const int64_t *)of_ptr(ci), base, (float *)of_ptr(res));
    } else {
      gather_double(planes, in_sz, out_sz, (const double *)of_ptr(cx),
                    (const int64_t *)of_ptr(ci), base, (double *)of_ptr(res));
    }
  }
  of_tensor_release(cx);
  of_tensor_release(ci);
  if (st == OF_OK && cd != dt) {
    of_tensor *h = NULL;
    st = of_cast_data(res, dt, &h);
    of_tensor_release(res);
    res = h;
  }
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return record_idx(&gather_grad, x, idx, op, r, out);
}

/* ---- max pools ---- */

static of_status max_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_tensor *idx;
  OF_CHECK(of_node_saved(n, 0, &idx));
  of_status st = idx_scatter(g[0], idx, n->attr_op, OF_NODE_ATTRS(a_pool, n), &n->in_meta[0],
                             &gi[0]);
  of_tensor_release(idx);
  return st;
}
static const of_grad_def max_pool_grad = {"MaxPoolBackward", max_backward};
static const of_grad_def adaptive_max_grad = {"AdaptiveMaxPoolBackward", max_backward};

/* ---- 3x3, stride 2, padding 1 over float32 NCHW planes (ResNet's stem pool) ----
 * The general row kernel (max_fwd) calls max_update per tap and output row,
 * whose stride-2 reads did not vectorise: a [1, 64, 112, 112] pool took 0.58
 * ms inside a ResNet-50 forward. Here 16 outputs at a time take their
 * three taps of a row as the even lanes of two loads at columns 2 ow - 1,
 * 2 ow and 2 ow + 1. The taps go in (h, w) order with max_fwd's rule (a larger
 * value or a NaN takes the place: ties keep the first, the last NaN wins);
 * a padding -inf never wins, and an output whose window holds only -inf
 * gets the window's first position, as max_fwd gives it. */
#if defined(__x86_64__)
#include <immintrin.h>
#define MAX3_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
/* lanes j of 16 whose column c0 + j lies in [0, W) */
static inline uint32_t max3_cols(int64_t c0, int64_t W) {
  int64_t lo = c0 < 0 ? -c0 : 0, hi = W - c0 < 16 ? W - c0 : 16;
  if (hi <= lo) return 0;
  return (uint32_t)(((1u << hi) - 1) & ~((1u << lo) - 1)) & 0xffffu;
}
/* One output row: rows[a] is input row ih0 + a, or NULL outside the plane;
 * fh the window's first valid row. Taps are read straight from the rows,
 * columns outside [0, W) masked to -inf (masked lanes never fault, so the
 * loads may start before a row or run past its end); the 16 maxima and
 * their positions stay in registers over the nine taps. */
MAX3_ATTR static void max3s2_row(const float *const rows[3], int64_t ih0, int64_t fh, int64_t W,
                                 int64_t OW, float *y, int64_t *idx, int64_t base) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i none = _mm512_set1_epi32(INT32_MIN);
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  for (int64_t o = 0; o < OW; o += 16) {
    __mmask16 live = OW - o >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (OW - o)) - 1);
    __m512 cur = ninf;
    __m512i cp = none;
    __m512i col = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(2 * o - 1)), ev);   /* 2 ow - 1 */
    __mmask16 mlo[3], mhi[3];
    for (int b = 0; b < 3; b++) {
      mlo[b] = (__mmask16)max3_cols(2 * o - 1 + b, W);
      mhi[b] = (__mmask16)max3_cols(2 * o - 1 + b + 16, W);
    }
    for (int a = 0; a < 3; a++) {
      if (!rows[a]) continue;
      __m512i p0 = _mm512_add_epi32(col, _mm512_set1_epi32((int32_t)((ih0 + a) * W)));
      for (int b = 0; b < 3; b++) {
        const float *q = rows[a] + 2 * o - 1 + b;
        __m512 v = _mm512_permutex2var_ps(_mm512_mask_loadu_ps(ninf, mlo[b], q), ev,
                                          _mm512_mask_loadu_ps(ninf, mhi[b], q + 16));
        __mmask16 take = _mm512_cmp_ps_mask(v, cur, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        cur = _mm512_mask_mov_ps(cur, take, v);
        cp = _mm512_mask_mov_epi32(cp, take, _mm512_add_epi32(p0, _mm512_set1_epi32(b)));
      }
    }
    /* only -inf in the window: its first position, (fh, max(2 ow - 1, 0)) */
    __mmask16 lost = _mm512_cmpeq_epi32_mask(cp, none);
    __m512i first = _mm512_add_epi32(_mm512_max_epi32(col, _mm512_setzero_si512()),
                                     _mm512_set1_epi32((int32_t)(fh * W)));
    cp = _mm512_mask_mov_epi32(cp, lost, first);
    _mm512_mask_storeu_ps(y + o, live, cur);
    __m512i lo = _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(cp)), _mm512_set1_epi64(base));
    __m512i hi = _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(cp, 1)),
                                  _mm512_set1_epi64(base));
    _mm512_mask_storeu_epi64(idx + o, (__mmask8)live, lo);
    _mm512_mask_storeu_epi64(idx + o + 8, (__mmask8)(live >> 8), hi);
  }
}
/* AVX2: the same, 8 outputs at a time. The even lanes of the two 8-wide
 * loads come out of a shuffle (lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6) and a
 * 64-bit permute that puts the pairs in order; masked loads do not fault
 * either, and their zeros are replaced by -inf. Before it an AVX2 CPU ran
 * the row kernel: [1, 64, 112, 112] 2.19 -> 1.41 ms, [8, 64, 112, 112]
 * 13.5 -> 5.1 ms on a Zen 3, 2 threads (PyTorch 1.13: 3.1 and 24.8 ms). */
#define MAX3_ATTR2 __attribute__((target("avx2,fma")))
MAX3_ATTR2 static inline __m256 max3_load8(const float *q, __m256i col, int64_t W, __m256 ninf) {
  /* lanes whose column lies in [0, W) */
  __m256i in = _mm256_and_si256(_mm256_cmpgt_epi32(col, _mm256_set1_epi32(-1)),
                                _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)W), col));
  return _mm256_blendv_ps(ninf, _mm256_maskload_ps(q, in), _mm256_castsi256_ps(in));
}
MAX3_ATTR2 static void max3s2_row8(const float *const rows[3], int64_t ih0, int64_t fh, int64_t W,
                                   int64_t OW, float *y, int64_t *idx, int64_t base) {
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i ev = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i none = _mm256_set1_epi32(INT32_MIN);
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  for (int64_t o = 0; o < OW; o += 8) {
    int64_t nl = OW - o < 8 ? OW - o : 8;
    __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)nl), iota);
    __m256 cur = ninf;
    __m256i cp = none;
    __m256i col = _mm256_add_epi32(_mm256_set1_epi32((int32_t)(2 * o - 1)), ev);   /* 2 ow - 1 */
    for (int a = 0; a < 3; a++) {
      if (!rows[a]) continue;
      __m256i p0 = _mm256_add_epi32(col, _mm256_set1_epi32((int32_t)((ih0 + a) * W)));
      for (int b = 0; b < 3; b++) {
        int64_t c0 = 2 * o - 1 + b;
        const float *q = rows[a] + c0;
        __m256i cl = _mm256_add_epi32(_mm256_set1_epi32((int32_t)c0), iota);
        __m256 lo = max3_load8(q, cl, W, ninf);
        __m256 hi = max3_load8(q + 8, _mm256_add_epi32(cl, _mm256_set1_epi32(8)), W, ninf);
        __m256 v = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
        v = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), _MM_SHUFFLE(3, 1, 2, 0)));
        __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, cur, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        cur = _mm256_blendv_ps(cur, v, take);
        __m256i at = _mm256_add_epi32(p0, _mm256_set1_epi32(b));
        cp = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(cp), _mm256_castsi256_ps(at), take));
      }
    }
    /* only -inf in the window: its first position, (fh, max(2 ow - 1, 0)) */
    __m256i lost = _mm256_cmpeq_epi32(cp, none);
    __m256i first = _mm256_add_epi32(_mm256_max_epi32(col, _mm256_setzero_si256()),
                                     _mm256_set1_epi32((int32_t)(fh * W)));
    cp = _mm256_blendv_epi8(cp, first, lost);
    _mm256_maskstore_ps(y + o, live, cur);
    __m256i b64 = _mm256_set1_epi64x(base);
    __m256i lo = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(cp)), b64);
    __m256i hi = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(cp, 1)), b64);
    _mm256_maskstore_epi64((long long *)(idx + o), _mm256_cvtepi32_epi64(_mm256_castsi256_si128(live)), lo);
    _mm256_maskstore_epi64((long long *)(idx + o + 4), _mm256_cvtepi32_epi64(_mm256_extracti128_si256(live, 1)),
                           hi);
  }
}
static bool max3s2_isa(void) { return of_cpu_isa() >= OF_ISA_AVX2; }
#else
static void max3s2_row(const float *const rows[3], int64_t ih0, int64_t fh, int64_t W,
                       int64_t OW, float *y, int64_t *idx, int64_t base) {
  (void)rows, (void)ih0, (void)fh, (void)W, (void)OW, (void)y, (void)idx, (void)base;
}
#define max3s2_row8 max3s2_row
static bool max3s2_isa(void) { return false; }
#endif

static bool max3s2_fits(const pgeom *g) {
  return max3s2_isa() && g->in[0] == 1 && g->out[0] == 1 && g->k[1] == 3 && g->k[2] == 3 &&
         g->s[1] == 2 && g->s[2] == 2 && g->p[1] == 1 && g->p[2] == 1 && g->step[1] == 1 &&
         g->step[2] == 1 && g->in_sz < INT32_MAX &&
         g->out[1] == (g->in[1] - 1) / 2 + 1 && g->out[2] == (g->in[2] - 1) / 2 + 1;
}

static void max3s2_fwd_float(const pgeom *g, const float *x, float *y, int64_t *idx,
                             int64_t base, int nt) {
  const int64_t H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
  int64_t rows = g->planes * OH;
  const bool v512 = of_cpu_isa() >= OF_ISA_AVX512;
  _Pragma("omp parallel for num_threads(nt) if (nt > 1) schedule(static)")
  for (int64_t r = 0; r < rows; r++) {
    int64_t oh = r % OH, pl = r / OH, ih0 = 2 * oh - 1;
    const float *xp = x + pl * g->in_sz, *rp[3];
    for (int a = 0; a < 3; a++) rp[a] = ih0 + a >= 0 && ih0 + a < H ? xp + (ih0 + a) * W : NULL;
    if (v512) max3s2_row(rp, ih0, ih0 < 0 ? 0 : ih0, W, OW, y + r * OW, idx + r * OW, base);
    else max3s2_row8(rp, ih0, ih0 < 0 ? 0 : ih0, W, OW, y + r * OW, idx + r * OW, base);
  }
}

static of_status max_run(const pool_args *a, of_tensor *x, int64_t planes, const int64_t *osz,
                         of_tensor **values, of_tensor **indices) {
  int32_t nsp = a->nsp;
  int64_t base = a->rec.base;
  int64_t shape[OF_MAX_DIMS];
  result_shape(x, nsp, osz, shape);
  of_dtype dt = x->dtype, cd = compute_dtype(dt);
  of_tensor *cx = NULL, *val = NULL, *idx = NULL;
  pgeom g = {0};
  of_device dev = of_dev(x);
  /* a channels-last input on the CPU pools in place of the layout (max_cl_fwd) */
  bool cl = dev == OF_CPU && !a->adaptive && of_prefers_channels_last(x);
  of_status st = cl ? of_tensor_new_channels_last(shape, x->ndim, cd, dev, &val)
                    : of_tensor_new(shape, x->ndim, cd, dev, &val);
  if (st == OF_OK)
    st = cl ? of_tensor_new_channels_last(shape, x->ndim, OF_INT64, dev, &idx)
            : of_tensor_new(shape, x->ndim, OF_INT64, dev, &idx);
  if (st == OF_OK && val->numel > 0 && cl) {
    int64_t C = x->shape[1], N = x->shape[0];
    st = of_dense_format(x, true, cd, &cx);
    if (st == OF_OK) st = pgeom_init(&g, a, planes, x->shape + x->ndim - nsp, osz);
    if (st == OF_OK && g.in_sz >= INT32_MAX)
      st = of_fail(OF_ERR_SHAPE, "%s: a channels-last plane of %lld elements is too large",
                   a->op, (long long)g.in_sz);
    int nt = pool_threads(N * g.out[0] * g.out[1], g.planes * g.out_sz * 8);
    int64_t sbytes = (int64_t)sizeof(int32_t) * nt * (C + 16);
    int32_t *scratch = st == OF_OK ? of_alloc(OF_CPU, sbytes) : NULL;
    if (st == OF_OK && !scratch) st = of_fail(OF_ERR_OOM, "%s: out of memory", a->op);
    if (st == OF_OK && cd == OF_FLOAT32)
      max_cl_fwd_float(&g, N, C, (const float *)of_ptr(cx), (float *)of_ptr(val),
                       (int64_t *)of_ptr(idx), base, scratch, nt);
    else if (st == OF_OK)
      max_cl_fwd_double(&g, N, C, (const double *)of_ptr(cx), (double *)of_ptr(val),
                        (int64_t *)of_ptr(idx), base, scratch, nt);
    if (scratch) of_free(OF_CPU, scratch, sbytes);
  } else if (st == OF_OK && val->numel > 0) {
    st = operand(x, cd, &cx);
    if (st == OF_OK && dev != OF_CPU) {
      of_pool_desc pd = pool_desc(a, planes, x->shape + x->ndim - nsp, osz);
      const of_device_ops *o = pool_ops(a->op, x);
      st = o ? o->max_pool(&pd, cx, val, idx, base) : OF_ERR_DEVICE;
    } else if (st == OF_OK) {
      st = pgeom_init(&g, a, planes, x->shape + x->ndim - nsp, osz);
    }
    if (st == OF_OK && dev == OF_CPU) {
      float *yf = (float *)of_ptr(val);
      double *yd = (double *)of_ptr(val);
      int64_t *ip = (int64_t *)of_ptr(idx);
      int64_t rows = g.planes * g.out[0] * g.out[1];
      int nt = pool_threads(rows, g.planes * g.out_sz * 8);
      int64_t sbytes = (int64_t)sizeof(int32_t) * nt * scratch_stride(g.out[2]);
      bool table = a->adaptive || g.in_sz >= INT32_MAX;
      bool max3 = cd == OF_FLOAT32 && !table && max3s2_fits(&g);
      int64_t pe = table || max3 ? 0 : plane_entries(&g);
      if (pe) {   /* tables, then per thread the winners of one plane */
        int nt2 = pool_threads(g.planes, g.planes * g.out_sz * 8);
        sbytes = (int64_t)sizeof(int32_t) * (pe + g.out_sz + nt2 * (g.out_sz + 16));
        nt = nt2;
      }
      int32_t *scratch = table ? NULL : of_alloc(OF_CPU, sbytes);
      if (!table && !scratch) {
        st = of_fail(OF_ERR_OOM, "%s: out of memory", a->op);
      } else if (pe) {
        int32_t *tab = scratch, *first = tab + pe, *per = first + g.out_sz;
        plane_tables(&g, tab, first);
        if (cd == OF_FLOAT32)
          max_planes_fwd_float(&g, (const float *)of_ptr(cx), yf, ip, base, tab, first, per,
                               nt);
        else
          max_planes_fwd_double(&g, (const double *)of_ptr(cx), yd, ip, base, tab, first, per,
                                nt);
      } else if (max3) {
        max3s2_fwd_float(&g, (const float *)of_ptr(cx), yf, ip, base, nt);
      } else if (cd == OF_FLOAT32 && table) {
        max_table_fwd_float(&g, (const float *)of_ptr(cx), yf, ip, base);
      } else if (cd == OF_FLOAT32) {
        max_fwd_float(&g, (const float *)of_ptr(cx), yf, ip, base, scratch, nt);
      } else if (table) {
        max_table_fwd_double(&g, (const double *)of_ptr(cx), yd, ip, base);
      } else {
        max_fwd_double(&g, (const double *)of_ptr(cx), yd, ip, base, scratch, nt);
      }
      if (scratch) of_free(OF_CPU, scratch, sbytes);
    }
  }
  pgeom_free(&g);
  of_tensor_release(cx);
  if (st == OF_OK && cd != dt) {
    of_tensor *h = NULL;
    st = of_cast_data(val, dt, &h);
    of_tensor_release(val);
    val = h;
  }
  if (st == OF_OK) st = keep_format(x, &val);
  if (st == OF_OK && of_grad_needed(&x, 1)) {
    of_tensor *outs[2] = {val, idx};
    of_node *n;
    st = of_record(a->adaptive ? &adaptive_max_grad : &max_pool_grad, &x, 1, outs, 2, &n);
    if (st == OF_OK) {
      OF_NODE_KEEP(n, a->kind, a->rec);
      of_node_save(n, 0, idx);
    }
  }
  if (st != OF_OK) {
    of_tensor_release(val);
    of_tensor_release(idx);
    return st;
  }
  *values = val;
  if (indices) *indices = idx;
  else of_tensor_release(idx);
  return OF_OK;
}

static of_status max_pool_body(of_tensor *x, const int64_t *kernel, const int64_t *stride,
                           const int64_t *padding, const int64_t *dilation, int32_t nsp,
                           int32_t ceil_mode, int64_t index_base, of_tensor **values,
                           of_tensor **indices) {
  OF_ROUTE("max_pool", dev, ops, max_pool, x);
  (void)ops;
  a_pool r;
  pool_pack(&r, kernel, stride, padding, dilation, nsp);
  r.ceil_mode = ceil_mode;
  r.base = index_base;
  if (indices) r.has |= 16;
  pool_args a;
  int64_t planes, osz[3];
  OF_CHECK(init_args(&a, "max_pool", OPK_MAX_POOL, &r));
  of_meta xm = of_meta_of(x);
  OF_CHECK(pool_geometry(&a, &xm, &planes, osz));
  return max_run(&a, x, planes, osz, values, indices);
}

/* the output size (the record's kernel) */
static of_status adaptive_sizes(const pool_args *a, const of_meta *x, int64_t *osz) {
  int32_t nsp = a->nsp;
  const int64_t *output_size = a->rec.kernel;
  if (!(a->rec.has & 1)) return of_fail(OF_ERR_ARG, "%s: output_size is required", a->op);
  for (int32_t i = 0; i < nsp; i++) {
    osz[i] = output_size[i];
    if (osz[i] < 0)
      return of_fail(OF_ERR_ARG, "%s: output_size must be non-negative, got %s", a->op,
                     LIST(output_size, nsp));
    if (x->shape[x->ndim - nsp + i] < 1)
      return of_fail(OF_ERR_SHAPE, "%s: expected non-empty spatial dims, got input %s", a->op,
                     OF_SHAPE_STR(x));
  }
  return OF_OK;
}

static of_status adaptive_max_pool_body(of_tensor *x, const int64_t *output_size, int32_t nsp,
                                    int64_t index_base, of_tensor **values, of_tensor **indices) {
  OF_ROUTE("adaptive_max_pool", dev, ops, max_pool, x);
  (void)ops;
  a_pool r;
  pool_pack(&r, output_size, NULL, NULL, NULL, nsp);
  r.base = index_base;
  if (indices) r.has |= 16;
  pool_args a;
  int64_t planes, osz[3];
  OF_CHECK(init_args(&a, "adaptive_max_pool", OPK_ADAPTIVE_MAX_POOL, &r));
  of_meta xm = of_meta_of(x);
  OF_CHECK(pool_geometry(&a, &xm, &planes, osz));
  return max_run(&a, x, planes, osz, values, indices);
}

/* ---- average pools ---- */

static of_status avg_op(const pool_args *a, of_tensor *x, const int64_t *osz, bool backward,
                        const int64_t *in_shape, int32_t in_ndim, of_tensor **out);

/* forward's grad: avg_grad (saved nothing: the pool is linear) */
static of_status avg_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  pool_args a;
  args_of_node(n, &a);
  const of_meta *m = &n->in_meta[0];
  return avg_op(&a, g[0], m->shape + m->ndim - a.nsp, true, m->shape, m->ndim, &gi[0]);
}
static const of_grad_def avg_pool_grad = {"AvgPoolBackward", avg_backward};
static const of_grad_def adaptive_avg_grad = {"AdaptiveAvgPoolBackward", avg_backward};

/* avg_grad's grad: the forward pool of the incoming grad */
static of_status avg_grad_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  pool_args a;
  args_of_node(n, &a);
  const of_meta *m = &n->in_meta[0];
  return avg_op(&a, g[0], m->shape + m->ndim - a.nsp, false, m->shape, m->ndim, &gi[0]);
}
static const of_grad_def avg_pool_grad_grad = {"AvgPoolGradBackward", avg_grad_backward};

/* Forward (backward = false): x [..., in] -> [..., osz] where the result has
 * the leading dims of x. Backward: x is the grad [..., out]; osz are the
 * input's spatial sizes, and the result has shape in_shape. */
static of_status avg_op(const pool_args *a, of_tensor *x, const int64_t *osz, bool backward,
                        const int64_t *in_shape, int32_t in_ndim, of_tensor **out) {
  int32_t nsp = a->nsp;
  int64_t shape[OF_MAX_DIMS];
  int32_t nd = x->ndim;
  if (backward) {
    memcpy(shape, in_shape, sizeof(int64_t) * (size_t)in_ndim);
    nd = in_ndim;
  } else {
    result_shape(x, nsp, osz, shape);
  }
  const int64_t *xsp = x->shape + x->ndim - nsp;
  /* window tables run from the pool's input sizes to its output sizes */
  const int64_t *pin = backward ? osz : xsp, *pout = backward ? xsp : osz;
  of_dtype dt = x->dtype, cd = compute_dtype(dt);
  of_tensor *cx = NULL, *res = NULL;
  pgeom g = {0};
  of_status st = of_tensor_new(shape, nd, cd, of_dev(x), &res);
  if (st == OF_OK && res->numel > 0 && of_dev(x) != OF_CPU) {
    int64_t planes = 1;
    for (int32_t i = 0; i < nd - nsp; i++) planes *= shape[i];
    st = operand(x, cd, &cx);
    of_pool_desc pd = pool_desc(a, planes, pin, pout);
    const of_device_ops *o = st == OF_OK ? pool_ops(a->op, x) : NULL;
    if (st == OF_OK) st = o ? o->avg_pool(&pd, backward, cx, res) : OF_ERR_DEVICE;
  } else if (st == OF_OK && res->numel > 0) {
    int64_t planes = 1;
    for (int32_t i = 0; i < nd - nsp; i++) planes *= shape[i];
    st = operand(x, cd, &cx);
    if (st == OF_OK) st = pgeom_init(&g, a, planes, pin, pout);
    if (st == OF_OK && planes * (backward ? g.out_sz : g.in_sz) != cx->numel)
      st = of_fail(OF_ERR_SHAPE, "%s: grad %s does not fit the pool", a->op, OF_SHAPE_STR(x));
    /* fixed windows go tap by tap (the backward with a scaled row per thread);
     * adaptive ones window by window */
    bool fixed = !a->adaptive;
    int nt = backward ? pool_threads(g.planes, g.planes * g.out_sz * 8) : 1;
    int64_t sbytes = 0;
    if (backward && fixed) sbytes = (int64_t)of_dtype_size(cd) * nt * scratch_stride(g.out[2]);
    void *scratch = sbytes ? of_alloc(OF_CPU, sbytes) : NULL;
    if (st == OF_OK && sbytes && !scratch) st = of_fail(OF_ERR_OOM, "%s: out of memory", a->op);
    if (st == OF_OK) {
      const char *src = of_ptr(cx);
      char *dst = of_ptr(res);
      int64_t dv = a->divisor;
      if (cd == OF_FLOAT32) {
        if (backward && fixed)
          avg_fixed_bwd_float(&g, (const float *)src, (float *)dst, dv, scratch, nt);
        else if (backward) avg_bwd_float(&g, (const float *)src, (float *)dst, dv);
        else if (fixed) avg_fixed_fwd_float(&g, (const float *)src, (float *)dst, dv);
        else avg_fwd_float(&g, (const float *)src, (float *)dst, dv);
      } else {
        if (backward && fixed)
          avg_fixed_bwd_double(&g, (const double *)src, (double *)dst, dv, scratch, nt);
        else if (backward) avg_bwd_double(&g, (const double *)src, (double *)dst, dv);
        else if (fixed) avg_fixed_fwd_double(&g, (const double *)src, (double *)dst, dv);
        else avg_fwd_double(&g, (const double *)src, (double *)dst, dv);
      }
    }
    if (scratch) of_free(OF_CPU, scratch, sbytes);
  }
  pgeom_free(&g);
  of_tensor_release(cx);
  if (st == OF_OK && cd != dt) {
    of_tensor *h = NULL;
    st = of_cast_data(res, dt, &h);
    of_tensor_release(res);
    res = h;
  }
  if (st == OF_OK && !backward) st = keep_format(x, &res);
  if (st == OF_OK && of_grad_needed(&x, 1)) {
    const of_grad_def *def = backward ? &avg_pool_grad_grad
                             : a->adaptive ? &adaptive_avg_grad : &avg_pool_grad;
    of_node *n;
    st = of_record(def, &x, 1, &res, 1, &n);
    if (st == OF_OK) OF_NODE_KEEP(n, a->kind, a->rec);   /* avg_grad too: the pool's record */
  }
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

static of_status avg_pool_body(of_tensor *x, const int64_t *kernel, const int64_t *stride,
                           const int64_t *padding, int32_t nsp, int32_t ceil_mode,
                           int32_t count_include_pad, int64_t divisor_override, of_tensor **out) {
  OF_ROUTE("avg_pool", dev, ops, avg_pool, x);
  (void)ops;
  a_pool r;
  pool_pack(&r, kernel, stride, padding, NULL, nsp);
  r.ceil_mode = ceil_mode;
  r.cip = count_include_pad != 0;
  r.divisor = divisor_override > 0 ? divisor_override : 0;
  pool_args a;
  int64_t planes, osz[3];
  OF_CHECK(init_args(&a, "avg_pool", OPK_AVG_POOL, &r));
  of_meta xm = of_meta_of(x);
  OF_CHECK(pool_geometry(&a, &xm, &planes, osz));
  return avg_op(&a, x, osz, false, NULL, 0, out);
}

static of_status adaptive_avg_pool_body(of_tensor *x, const int64_t *output_size, int32_t nsp,
                                    of_tensor **out) {
  OF_ROUTE("adaptive_avg_pool", dev, ops, avg_pool, x);
  (void)ops;
  a_pool r;
  pool_pack(&r, output_size, NULL, NULL, NULL, nsp);
  pool_args a;
  int64_t planes, osz[3];
  OF_CHECK(init_args(&a, "adaptive_avg_pool", OPK_ADAPTIVE_AVG_POOL, &r));
  of_meta xm = of_meta_of(x);
  OF_CHECK(pool_geometry(&a, &xm, &planes, osz));
  return avg_op(&a, x, osz, false, NULL, 0, out);
}

/* ---- entry points (dispatch), run functions and table rows ---- */
static void pool_pack(a_pool *a, const int64_t *kernel, const int64_t *stride,
                      const int64_t *padding, const int64_t *dilation, int32_t nsp) {
  memset(a, 0, sizeof *a);
  int32_t k = nsp >= 0 && nsp <= 3 ? nsp : 0;
  a->nsp = nsp;
  if (kernel) { a->has |= 1; of_copy_i64(a->kernel, kernel, k); }
  if (stride) { a->has |= 2; of_copy_i64(a->stride, stride, k); }
  if (padding) { a->has |= 4; of_copy_i64(a->padding, padding, k); }
  if (dilation) { a->has |= 8; of_copy_i64(a->dilation, dilation, k); }
}
static void describe_pool(const void *p, char *b, size_t c) {
  const a_pool *a = p;
  int32_t k = a->nsp >= 0 && a->nsp <= 3 ? a->nsp : 0;
  of_catf(b, c, "nsp=%d", (int)a->nsp);
  if (a->has & 1) of_cat_list(b, c, "kernel", a->kernel, k);
  if (a->has & 2) of_cat_list(b, c, "stride", a->stride, k);
  if (a->has & 4) of_cat_list(b, c, "padding", a->padding, k);
}
/* The indices are recorded even when the caller doesn't want them: the
 * autograd node keeps them for its backward. On failure the record releases
 * both results. */
static of_status pool_max_record(int32_t op, a_pool *a, of_tensor *x, of_tensor **values,
                                 of_tensor **indices, of_tensor *idx_local) {
  of_tensor *outs[2] = {*values, indices ? *indices : idx_local};
  return OF_RECORD(op, *a, &x, 1, outs, 2);
}
of_status of_max_pool(of_tensor *x, const int64_t *kernel, const int64_t *stride,
                      const int64_t *padding, const int64_t *dilation, int32_t nsp,
                      int32_t ceil_mode, int64_t index_base, of_tensor **values,
                      of_tensor **indices) {
  if (__builtin_expect(of_dispatch_slow == 0, 1) || (of_dispatch_depth > 0 && !of_dispatch_prof))
    return max_pool_body(x, kernel, stride, padding, dilation, nsp, ceil_mode, index_base,
                            values, indices);
  of_tensor *idx = NULL;
  of_dispatch_enter();
  of_status st = max_pool_body(x, kernel, stride, padding, dilation, nsp, ceil_mode,
                                  index_base, values, indices ? indices : &idx);
  of_dispatch_depth--;
  if (st != OF_OK) return st;
  a_pool a;
  pool_pack(&a, kernel, stride, padding, dilation, nsp);
  a.ceil_mode = ceil_mode;
  a.base = index_base;
  if (indices) a.has |= 16;
  st = pool_max_record(OPK_MAX_POOL, &a, x, values, indices, idx);
  if (st == OF_OK && !indices) of_tensor_release(idx);   /* the caller didn't ask */
  return st;
}
of_status of_adaptive_max_pool(of_tensor *x, const int64_t *output_size, int32_t nsp,
                               int64_t index_base, of_tensor **values, of_tensor **indices) {
  if (__builtin_expect(of_dispatch_slow == 0, 1) || (of_dispatch_depth > 0 && !of_dispatch_prof))
    return adaptive_max_pool_body(x, output_size, nsp, index_base, values, indices);
  of_tensor *idx = NULL;
  of_dispatch_enter();
  of_status st = adaptive_max_pool_body(x, output_size, nsp, index_base, values,
                                           indices ? indices : &idx);
  of_dispatch_depth--;
  if (st != OF_OK) return st;
  a_pool a;
  pool_pack(&a, output_size, NULL, NULL, NULL, nsp);
  a.base = index_base;
  if (indices) a.has |= 16;
  st = pool_max_record(OPK_ADAPTIVE_MAX_POOL, &a, x, values, indices, idx);
  if (st == OF_OK && !indices) of_tensor_release(idx);
  return st;
}
static of_status run_max_pool(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_pool);
  OF_NEED(a->nsp >= 1 && a->nsp <= 3, "nsp");
  of_tensor *v = NULL, *i = NULL;
  of_status st = n->op == OPK_MAX_POOL
                     ? of_max_pool(ins[0], OF_OPT(1, kernel), OF_OPT(2, stride), OF_OPT(4, padding),
                                   OF_OPT(8, dilation), a->nsp, a->ceil_mode, a->base, &v, &i)
                     : of_adaptive_max_pool(ins[0], a->kernel, a->nsp, a->base, &v, &i);
  if (st == OF_OK) { outs[0] = v; outs[1] = i; }
  return st;
}
static of_status pack_avg_pool(of_tensor *x, const int64_t *kernel, const int64_t *stride,
                              const int64_t *padding, int32_t nsp, int32_t ceil_mode,
                              int32_t cip, int64_t divisor, of_tensor **out) {
  a_pool a;
  pool_pack(&a, kernel, stride, padding, NULL, nsp);
  a.ceil_mode = ceil_mode;
  a.cip = cip;
  a.divisor = divisor;
  return OF_RECORD(OPK_AVG_POOL, a, &x, 1, out, 1);
}
of_status of_avg_pool(of_tensor *x, const int64_t *kernel, const int64_t *stride,
                      const int64_t *padding, int32_t nsp, int32_t ceil_mode,
                      int32_t count_include_pad, int64_t divisor_override, of_tensor **out) {
  OF_DISPATCH(avg_pool_body(x, kernel, stride, padding, nsp, ceil_mode, count_include_pad,
                             divisor_override, out),
            pack_avg_pool(x, kernel, stride, padding, nsp, ceil_mode, count_include_pad,
                         divisor_override, out));
}
static of_status pack_adaptive_avg(of_tensor *x, const int64_t *size, int32_t nsp,
                                  of_tensor **out) {
  a_pool a;
  pool_pack(&a, size, NULL, NULL, NULL, nsp);
  return OF_RECORD(OPK_ADAPTIVE_AVG_POOL, a, &x, 1, out, 1);
}
of_status of_adaptive_avg_pool(of_tensor *x, const int64_t *output_size, int32_t nsp,
                               of_tensor **out) {
  OF_DISPATCH(adaptive_avg_pool_body(x, output_size, nsp, out),
            pack_adaptive_avg(x, output_size, nsp, out));
}
static of_status run_avg_pool(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_pool);
  OF_NEED(a->nsp >= 1 && a->nsp <= 3, "nsp");
  if (n->op == OPK_AVG_POOL)
    OF_RUN1(of_avg_pool(ins[0], OF_OPT(1, kernel), OF_OPT(2, stride), OF_OPT(4, padding), a->nsp,
                     a->ceil_mode, a->cip, a->divisor, OF_R));
  OF_RUN1(of_adaptive_avg_pool(ins[0], OF_OPT(1, kernel), a->nsp, OF_R));
}

/* A loaded node's results from its record and the recorded input, by
 * pool_geometry: the values in the input's dtype, max pools' indices int64 */
static of_status infer_pool_kind(int32_t op, const char *kind, const void *p, const of_meta *ins,
                                 of_meta *outs) {
  pool_args a;
  int64_t planes, osz[3];
  OF_CHECK(init_args(&a, kind, op, p));
  OF_CHECK(pool_geometry(&a, &ins[0], &planes, osz));
  int32_t lead = ins[0].ndim - a.nsp;
  outs[0] = ins[0];
  for (int32_t i = 0; i < a.nsp; i++) outs[0].shape[lead + i] = osz[i];
  if (op == OPK_MAX_POOL || op == OPK_ADAPTIVE_MAX_POOL) {
    outs[1] = outs[0];
    outs[1].dtype = OF_INT64;
  }
  return OF_OK;
}
#define POOL_INFER(K, NAME)                                                             \
  static of_status infer_##K(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) { \
    (void)nin;                                                                          \
    return infer_pool_kind(OPK_##K, NAME, p, ins, outs);                                \
  }
POOL_INFER(MAX_POOL, "max_pool")
POOL_INFER(AVG_POOL, "avg_pool")
POOL_INFER(ADAPTIVE_AVG_POOL, "adaptive_avg_pool")
POOL_INFER(ADAPTIVE_MAX_POOL, "adaptive_max_pool")

OF_OP_IMPL_INFER(MAX_POOL, run_max_pool, NULL, NULL, describe_pool, infer_MAX_POOL);
OF_OP_IMPL_INFER(AVG_POOL, run_avg_pool, NULL, NULL, describe_pool, infer_AVG_POOL);
OF_OP_IMPL_INFER(ADAPTIVE_AVG_POOL, run_avg_pool, NULL, NULL, describe_pool, infer_ADAPTIVE_AVG_POOL);
OF_OP_IMPL_INFER(ADAPTIVE_MAX_POOL, run_max_pool, NULL, NULL, describe_pool, infer_ADAPTIVE_MAX_POOL);
