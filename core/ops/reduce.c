/* reduce.c -- the reduction family: sum, mean, prod, amax/amin, all/any,
 * logsumexp and norm over any set of dims; max/min with indices and argmax;
 * var/std; softmax/log_softmax; cumsum/cumprod.
 *
 * One engine serves of_reduce and of_var. It drops size-1 dims, orders the
 * input's dims by stride (outermost first) and merges the ones contiguous in
 * both the input and the result. The innermost kept dim (k) and the innermost
 * reduced dim (r) form 2-D blocks handed to a kernel:
 *   - "rows": r is innermost in memory, so each result element reduces a
 *     contiguous run (8 independent lanes, pairwise above PW_BLOCK elements:
 *     vectorised and accurate);
 *   - "cols": k is innermost, so whole input rows are added into a block of
 *     accumulators (walks memory contiguously, vectorised across k).
 * Accumulators are double for floating inputs and int64 for the others
 * (float16/bfloat16 are converted to float32 first). Work is split over
 * blocks of result elements when there are enough of them, else over the
 * reduced elements with one partial buffer per thread, combined in order.
 * NaN-aware max/min and exp (softmax, logsumexp) are written with GCC vector
 * extensions, since without -ffast-math the auto-vectoriser leaves them scalar. */
#include "../autograd.h"
#include "../device.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include "family.h"
#include "rowk.h"

enum { PW_BLOCK = 1024, COLS_BLOCK = 1024, SM_BLOCK = 1024, CUM_BLOCK = 1024 };
#define ISNAN(v) ((v) != (v))

/* ------------------------------------------------------------ helpers */

/* Re-raise the pending error with the input's shape and dtype appended. */
static of_status with_input_meta(of_status st, const int64_t *shape, int32_t ndim, of_dtype dt) {
  char msg[900], b[96];
  snprintf(msg, sizeof msg, "%s", of_last_error());
  return of_fail(st, "%s (input %s, %s)", msg, of_shape_str(shape, ndim, b, 96), of_dtype_name(dt));
}

static int32_t choose_threads(int64_t work) {
  int32_t nt = of_threads();
  if (nt <= 1 || work < OF_PARALLEL_GRAIN) return 1;
  int64_t cap = work / (OF_PARALLEL_GRAIN / 4);
  return cap < nt ? (int32_t)cap : nt;
}

/* dims[0..ndims) -> mask of reduced dims (ndims == 0: all). */
static of_status parse_dims_meta(const char *op, const int64_t *xs, int32_t xn, of_dtype xdt,
                                 const int32_t *dims, int32_t ndims, bool *red) {
  char b[96];
  for (int32_t d = 0; d < OF_MAX_DIMS; d++) red[d] = false;
  if (ndims < 0 || ndims > OF_MAX_DIMS)
    return of_fail(OF_ERR_ARG, "%s: expected at most %d dims, got %d (input %s, %s)", op,
                   (int)OF_MAX_DIMS, (int)ndims, of_shape_str(xs, xn, b, 96), of_dtype_name(xdt));
  if (ndims == 0 || !dims) {
    for (int32_t d = 0; d < xn; d++) red[d] = true;
    return OF_OK;
  }
  for (int32_t i = 0; i < ndims; i++) {
    int32_t d;
    of_status st = of_norm_dim(op, dims[i], xn, &d);
    if (st != OF_OK) return with_input_meta(st, xs, xn, xdt);
    if (xn == 0) continue;   /* a 0-d tensor reduces over "dim 1" trivially */
    if (red[d])
      return of_fail(OF_ERR_ARG, "%s: dim %d appears more than once in the list of dims "
                     "(input %s, %s)", op, (int)d + 1, of_shape_str(xs, xn, b, 96), of_dtype_name(xdt));
    red[d] = true;
  }
  return OF_OK;
}

static void result_shape_of(const int64_t *xs, int32_t xn, const bool *red, int32_t keepdim,
                            int64_t *shape, int32_t *nd, int64_t *out_n, int64_t *red_n) {
  int32_t n = 0;
  *out_n = 1;
  *red_n = 1;
  for (int32_t d = 0; d < xn; d++) {
    if (red[d]) {
      *red_n *= xs[d];
      if (keepdim) shape[n++] = 1;
    } else {
      *out_n *= xs[d];
      shape[n++] = xs[d];
    }
  }
  *nd = n;
}

static of_status fail_empty_of(const char *op, const of_meta *x, int32_t dim1) {
  return of_fail(OF_ERR_SHAPE, "%s: expected reduction dim %d to have non-zero size; the "
                 "operation has no identity (input %s, %s)", op, (int)dim1, OF_SHAPE_STR(x),
                 OF_DT(x));
}

/* ---- 16-byte vectors (GCC/Clang vector extensions) for the compare-and-select
 * loops that the auto-vectoriser leaves scalar without -ffast-math. */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef uint32_t v4u __attribute__((vector_size(16)));

static inline v4f vsel4(v4i m, v4f a, v4f b) { return (v4f)((m & (v4i)a) | (~m & (v4i)b)); }

/* exp(x) for float x <= 88.3, four at a time: Cephes' range reduction and
 * polynomial, about 1.3 ulp; results below FLT_MIN flush to 0, NaN stays NaN.
 * Softmax and logsumexp only pass x - max <= 0. */
static inline v4f exp_v4(v4f x) {
  const v4f zero = {0, 0, 0, 0};
  v4f xc = vsel4(x < -87.33f, zero - 87.33f, x);
  xc = vsel4(xc > 88.3f, zero + 88.3f, xc);
  v4f t = xc * 1.44269504088896341f + 12582912.0f;   /* 1.5 * 2^23: rounds to int */
  v4f n = t - 12582912.0f;
  v4f r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  v4f p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  v4f y = p * r * r + r + 1.0f;
  v4u eb = ((v4u)t - 0x4B400000u + 127u) << 23;       /* 2^n */
  y = y * (v4f)eb;
  return vsel4(x < -87.33f, zero, y);
}

static inline float exp_f32(float x) {
  v4f v = {x, x, x, x};
  return exp_v4(v)[0];
}

/* o[i] = exp(x[i] - m) */
static void exp_shifted_f32(float *restrict o, const float *restrict x, int64_t n, float m) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    v4f v;
    memcpy(&v, x + i, 16);
    v = exp_v4(v - m);
    memcpy(o + i, &v, 16);
  }
  for (; i < n; i++) o[i] = exp_f32(x[i] - m);
}
static void exp_shifted_f64(double *restrict o, const double *restrict x, int64_t n, double m) {
  for (int64_t i = 0; i < n; i++) o[i] = exp(x[i] - m);
}
/* o[j] = exp(x[j] - m[j]) */
static void exp_sub_f32(float *restrict o, const float *restrict x, const float *restrict m,
                        int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    v4f v, w;
    memcpy(&v, x + i, 16);
    memcpy(&w, m + i, 16);
    v = exp_v4(v - w);
    memcpy(o + i, &v, 16);
  }
  for (; i < n; i++) o[i] = exp_f32(x[i] - m[i]);
}
static void exp_sub_f64(double *restrict o, const double *restrict x, const double *restrict m,
                        int64_t n) {
  for (int64_t i = 0; i < n; i++) o[i] = exp(x[i] - m[i]);
}

/* m[j] = max(m[j], x[j]), a NaN sticks */
static void max_upd_f32(float *restrict m, const float *restrict x, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    v4f v, w;
    memcpy(&v, x + i, 16);
    memcpy(&w, m + i, 16);
    w = vsel4((v > w) | (v != v), v, w);
    memcpy(m + i, &w, 16);
  }
  for (; i < n; i++) m[i] = (x[i] > m[i] || ISNAN(x[i])) ? x[i] : m[i];
}
static void max_upd_f64(double *restrict m, const double *restrict x, int64_t n) {
  for (int64_t i = 0; i < n; i++) m[i] = (x[i] > m[i] || ISNAN(x[i])) ? x[i] : m[i];
}

/* ------------------------------------------------------------ plan
 * The input's dims, ordered by stride and merged, split into the innermost
 * kept dim (k), the innermost reduced dim (r) and odometers over the rest. */
typedef struct {
  int32_t n;
  int64_t size[OF_MAX_DIMS], xs[OF_MAX_DIMS], as[OF_MAX_DIMS];
} dimset;

typedef struct {
  dimset ko, ro;                 /* outer kept / outer reduced dims */
  int64_t k_size, k_xs, k_as;    /* innermost kept dim (xs in bytes, as in elements) */
  int64_t r_size, r_xs;          /* innermost reduced dim */
  int64_t n_ko, n_ro;            /* positions of the odometers */
  int64_t out_n;
  bool rows;                     /* r is innermost in memory */
} plan_t;

static void make_plan(const of_tensor *x, const bool *red, plan_t *pl) {
  int64_t es = of_dtype_size(x->dtype), astr[OF_MAX_DIMS], s = 1;
  for (int32_t d = x->ndim - 1; d >= 0; d--) {
    astr[d] = red[d] ? 0 : s;
    if (!red[d]) s *= x->shape[d];
  }
  pl->out_n = s;
  struct { int64_t size, xs, as; bool red; } v[OF_MAX_DIMS], t;
  int32_t n = 0;
  for (int32_t d = 0; d < x->ndim; d++) {
    if (x->shape[d] == 1) continue;
    v[n].size = x->shape[d];
    v[n].xs = x->strides[d] * es;
    v[n].as = astr[d];
    v[n].red = red[d];
    n++;
  }
  for (int32_t i = 1; i < n; i++) {   /* stable sort, largest stride first */
    t = v[i];
    int32_t j = i;
    for (; j > 0 && v[j - 1].xs < t.xs; j--) v[j] = v[j - 1];
    v[j] = t;
  }
  int32_t m = 0;
  for (int32_t i = 0; i < n; i++) {
    if (m > 0 && v[m - 1].red == v[i].red && v[m - 1].xs == v[i].xs * v[i].size &&
        v[m - 1].as == v[i].as * v[i].size) {
      v[m - 1].size *= v[i].size;
      v[m - 1].xs = v[i].xs;
      v[m - 1].as = v[i].as;
    } else {
      v[m++] = v[i];
    }
  }
  pl->rows = m == 0 || v[m - 1].red;
  int32_t lk = -1, lr = -1;
  for (int32_t i = 0; i < m; i++) {
    if (v[i].red) lr = i;
    else lk = i;
  }
  pl->k_size = 1, pl->k_xs = 0, pl->k_as = 0;
  pl->r_size = 1, pl->r_xs = 0;
  if (lk >= 0) pl->k_size = v[lk].size, pl->k_xs = v[lk].xs, pl->k_as = v[lk].as;
  if (lr >= 0) pl->r_size = v[lr].size, pl->r_xs = v[lr].xs;
  pl->ko.n = pl->ro.n = 0;
  pl->n_ko = pl->n_ro = 1;
  for (int32_t i = 0; i < m; i++) {
    if (i == lk || i == lr) continue;
    dimset *ds = v[i].red ? &pl->ro : &pl->ko;
    ds->size[ds->n] = v[i].size;
    ds->xs[ds->n] = v[i].xs;
    ds->as[ds->n] = v[i].as;
    ds->n++;
    if (v[i].red) pl->n_ro *= v[i].size;
    else pl->n_ko *= v[i].size;
  }
}

/* Offsets (input bytes, result elements) of position q of a dimset. */
static void dimset_offset(const dimset *ds, int64_t q, int64_t *xoff, int64_t *aoff) {
  int64_t x = 0, a = 0;
  for (int32_t d = ds->n - 1; d >= 0; d--) {
    int64_t i = q % ds->size[d];
    q /= ds->size[d];
    x += i * ds->xs[d];
    a += i * ds->as[d];
  }
  *xoff = x;
  *aoff = a;
}

typedef struct {
  int64_t idx[OF_MAX_DIMS], xoff;
} odometer;

static void odo_set(const dimset *ds, odometer *o, int64_t q) {
  o->xoff = 0;
  for (int32_t d = ds->n - 1; d >= 0; d--) {
    o->idx[d] = q % ds->size[d];
    q /= ds->size[d];
    o->xoff += o->idx[d] * ds->xs[d];
  }
}

static void odo_next(const dimset *ds, odometer *o) {
  for (int32_t d = ds->n - 1; d >= 0; d--) {
    o->xoff += ds->xs[d];
    if (++o->idx[d] < ds->size[d]) return;
    o->xoff -= ds->xs[d] * ds->size[d];
    o->idx[d] = 0;
  }
}

/* ------------------------------------------------------------ kernels */
typedef enum {
  K_SUM, K_PROD, K_MAX, K_MIN, K_ALL, K_ANY,
  K_ABSSUM, K_SQSUM, K_POWSUM, K_NZSUM, K_ABSMAX, K_ABSMIN, K_SQDEV, K_EXPSUM,
  K_NUM
} kind_t;

typedef struct { double p; } kctx;

/* acc[m * as] <op>= reduce over n < N of map(x[m * xk + n * xr]) for m < M;
 * aux (same indexing as acc) holds a per-result shift (mean, max). */
typedef void (*red_fn)(void *acc, const double *aux, int64_t as, const char *x, int64_t xk,
                       int64_t M, int64_t xr, int64_t N, const kctx *c);

static inline double cadd_d(double a, double b) { return a + b; }
static inline double cmul_d(double a, double b) { return a * b; }
static inline double cmax_d(double a, double b) { return (ISNAN(b) || b > a) ? b : a; }
static inline double cmin_d(double a, double b) { return (ISNAN(b) || b < a) ? b : a; }
static inline int64_t cadd_i(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t cmul_i(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static inline int64_t cmax_i(int64_t a, int64_t b) { return b > a ? b : a; }
static inline int64_t cmin_i(int64_t a, int64_t b) { return b < a ? b : a; }
static inline int64_t cand_i(int64_t a, int64_t b) { return a & b; }
static inline int64_t cor_i(int64_t a, int64_t b) { return a | b; }

#define NOAUX(i) 0.0
#define AUX(i) aux[i]

#define DEF_CONTIG(NAME, T, A, INIT, MAP, COMB)                                         \
  static A NAME##_contig(const T *restrict x, int64_t n, double mu, const kctx *c) {      \
    if (n > PW_BLOCK) {                                                                   \
      int64_t h = (n / 2 + 7) & ~(int64_t)7;                                              \
      A a_ = NAME##_contig(x, h, mu, c);                                                  \
      A b_ = NAME##_contig(x + h, n - h, mu, c);                                          \
      return COMB(a_, b_);                                                                \
    }                                                                                     \
    A l[8];                                                                               \
    for (int k = 0; k < 8; k++) l[k] = INIT;                                              \
    int64_t i = 0;                                                                        \
    for (; i + 8 <= n; i += 8)                                                            \
      for (int k = 0; k < 8; k++) {                                                       \
        T v = x[i + k];                                                                   \
        l[k] = COMB(l[k], (A)(MAP));                                                      \
      }                                                                                   \
    for (int k = 0; i < n; i++, k++) {                                                    \
      T v = x[i];                                                                         \
      l[k] = COMB(l[k], (A)(MAP));                                                        \
    }                                                                                     \
    return COMB(COMB(COMB(l[0], l[1]), COMB(l[2], l[3])),                                 \
                COMB(COMB(l[4], l[5]), COMB(l[6], l[7])));                                \
  }

#define DEF_ROWSCOLS(NAME, T, A, INIT, MAP, COMB, AUXL)                                   \
  static void NAME##_rows(void *acc_, const double *aux, int64_t as, const char *x,       \
                          int64_t xk, int64_t M, int64_t xr, int64_t N, const kctx *c) {  \
    A *acc = acc_;                                                                        \
    (void)aux;                                                                            \
    for (int64_t m = 0; m < M; m++) {                                                     \
      const char *xm = x + m * xk;                                                        \
      double mu = AUXL(m * as);                                                           \
      A r;                                                                                \
      if (xr == (int64_t)sizeof(T) && N >= 16) {                                          \
        r = NAME##_contig((const T *)xm, N, mu, c);                                       \
      } else {                                                                            \
        r = INIT;                                                                         \
        for (int64_t n = 0; n < N; n++) {                                                 \
          T v = *(const T *)(xm + n * xr);                                                \
          r = COMB(r, (A)(MAP));                                                          \
        }                                                                                 \
      }                                                                                   \
      acc[m * as] = COMB(acc[m * as], r);                                                 \
    }                                                                                     \
  }                                                                                       \
  static void NAME##_cols(void *acc_, const double *aux, int64_t as, const char *x,       \
                          int64_t xk, int64_t M, int64_t xr, int64_t N, const kctx *c) {  \
    A *restrict acc = acc_;                                                               \
    (void)aux;                                                                            \
    if (as == 1 && xk == (int64_t)sizeof(T)) {                                            \
      for (int64_t n = 0; n < N; n++) {                                                   \
        const T *restrict xn = (const T *)(x + n * xr);                                   \
        for (int64_t m = 0; m < M; m++) {                                                 \
          double mu = AUXL(m);                                                            \
          T v = xn[m];                                                                    \
          (void)mu;                                                                       \
          acc[m] = COMB(acc[m], (A)(MAP));                                                \
        }                                                                                 \
      }                                                                                   \
    } else {                                                                              \
      for (int64_t n = 0; n < N; n++)                                                     \
        for (int64_t m = 0; m < M; m++) {                                                 \
          double mu = AUXL(m * as);                                                       \
          T v = *(const T *)(x + n * xr + m * xk);                                        \
          (void)mu;                                                                       \
          acc[m * as] = COMB(acc[m * as], (A)(MAP));                                      \
        }                                                                                 \
    }                                                                                     \
  }

#define DEF_KERNEL(NAME, T, A, INIT, MAP, COMB, AUXL) \
  DEF_CONTIG(NAME, T, A, INIT, MAP, COMB)                 \
  DEF_ROWSCOLS(NAME, T, A, INIT, MAP, COMB, AUXL)

/* max/min of a contiguous run in the input's own type (NaN if any is NaN),
 * four 16-byte vectors of compare-and-select per step plus a NaN mask. */
#define DEF_BEST(NAME, T, MT, GT, NANV, ISN, NANVAL)                                      \
  typedef T NAME##_vt __attribute__((vector_size(16)));                                   \
  typedef MT NAME##_mt __attribute__((vector_size(16)));                                  \
  static T NAME(const T *restrict x, int64_t n) {                                         \
    enum { L = 16 / sizeof(T) };                                                          \
    T b = x[0];                                                                           \
    int nb = 0;                                                                           \
    int64_t i = 0;                                                                        \
    if (n >= 4 * L) {                                                                     \
      NAME##_vt l0, l1, l2, l3;                                                           \
      NAME##_mt bad = {0};                                                                \
      memcpy(&l0, x, 16);                                                                 \
      l1 = l2 = l3 = l0;                                                                  \
      for (; i + 4 * L <= n; i += 4 * L) {                                                \
        NAME##_vt v0, v1, v2, v3;                                                         \
        memcpy(&v0, x + i, 16);                                                           \
        memcpy(&v1, x + i + L, 16);                                                       \
        memcpy(&v2, x + i + 2 * L, 16);                                                   \
        memcpy(&v3, x + i + 3 * L, 16);                                                   \
        NAME##_mt g0 = GT(v0, l0), g1 = GT(v1, l1), g2 = GT(v2, l2), g3 = GT(v3, l3);     \
        l0 = (NAME##_vt)((g0 & (NAME##_mt)v0) | (~g0 & (NAME##_mt)l0));                   \
        l1 = (NAME##_vt)((g1 & (NAME##_mt)v1) | (~g1 & (NAME##_mt)l1));                   \
        l2 = (NAME##_vt)((g2 & (NAME##_mt)v2) | (~g2 & (NAME##_mt)l2));                   \
        l3 = (NAME##_vt)((g3 & (NAME##_mt)v3) | (~g3 & (NAME##_mt)l3));                   \
        bad |= NANV(v0) | NANV(v1) | NANV(v2) | NANV(v3);                                 \
      }                                                                                   \
      for (int j = 0; j < L; j++) {                                                       \
        b = GT(l0[j], b) ? l0[j] : b;                                                     \
        b = GT(l1[j], b) ? l1[j] : b;                                                     \
        b = GT(l2[j], b) ? l2[j] : b;                                                     \
        b = GT(l3[j], b) ? l3[j] : b;                                                     \
        nb |= bad[j] != 0;                                                                \
      }                                                                                   \
    }                                                                                     \
    for (; i < n; i++) {                                                                  \
      T v = x[i];                                                                         \
      b = GT(v, b) ? v : b;                                                               \
      nb |= ISN(v);                                                                       \
    }                                                                                     \
    return nb ? NANVAL : b;                                                               \
  }
#define GT_MAX(a, b) ((a) > (b))
#define GT_MIN(a, b) ((a) < (b))
#define F_NANV(v) ((v) != (v))
#define I_NANV(v) 0
#define F_ISN(v) ISNAN(v)
#define I_ISN(v) 0

/* max/min kinds: contiguous runs through DEF_BEST; ST is the storage type
 * the vectors use (bool is read as uint8_t). */
#define DEF_MINMAX(NAME, T, ST, A, INIT, COMB)                                            \
  static A NAME##_contig(const T *restrict x, int64_t n, double mu, const kctx *c) {      \
    return (A)NAME##_best((const ST *)x, n);                                              \
  }                                                                                       \
  DEF_ROWSCOLS(NAME, T, A, INIT, v, COMB, NOAUX)

#define BESTS(S, T, MT, K)                                                                \
  DEF_BEST(k_MAX_##S##_best, T, MT, GT_MAX, K##_NANV, K##_ISN, K##_NANVAL)                \
  DEF_BEST(k_MIN_##S##_best, T, MT, GT_MIN, K##_NANV, K##_ISN, K##_NANVAL)
#define F_NANVAL NAN
#define I_NANVAL b
BESTS(f32, float, int32_t, F)
BESTS(f64, double, int64_t, F)
BESTS(u8, uint8_t, int8_t, I)
BESTS(i8, int8_t, int8_t, I)
BESTS(i32, int32_t, int32_t, I)
BESTS(i64, int64_t, int64_t, I)
#define k_MAX_b8_best k_MAX_u8_best
#define k_MIN_b8_best k_MIN_u8_best

#define FLOAT_KERNELS(T, S)                                                               \
  DEF_KERNEL(k_PROD_##S, T, double, 1.0, v, cmul_d, NOAUX)                                \
  DEF_MINMAX(k_MAX_##S, T, T, double, -INFINITY, cmax_d)                                  \
  DEF_MINMAX(k_MIN_##S, T, T, double, INFINITY, cmin_d)                                   \
  DEF_KERNEL(k_ALL_##S, T, int64_t, 1, v != 0, cand_i, NOAUX)                             \
  DEF_KERNEL(k_ANY_##S, T, int64_t, 0, v != 0, cor_i, NOAUX)                              \
  DEF_KERNEL(k_SQSUM_##S, T, double, 0.0, (double)v * (double)v, cadd_d, NOAUX)           \
  DEF_KERNEL(k_POWSUM_##S, T, double, 0.0, pow(fabs((double)v), c->p), cadd_d, NOAUX)     \
  DEF_KERNEL(k_NZSUM_##S, T, double, 0.0, v != 0, cadd_d, NOAUX)                          \
  DEF_KERNEL(k_ABSMAX_##S, T, double, -INFINITY, fabs((double)v), cmax_d, NOAUX)          \
  DEF_KERNEL(k_ABSMIN_##S, T, double, INFINITY, fabs((double)v), cmin_d, NOAUX)           \
  DEF_KERNEL(k_SQDEV_##S, T, double, 0.0, ((double)v - mu) * ((double)v - mu), cadd_d, AUX)

#define INT_KERNELS(T, S, ST)                                                             \
  DEF_KERNEL(k_SUM_##S, T, int64_t, 0, v, cadd_i, NOAUX)                                  \
  DEF_KERNEL(k_PROD_##S, T, int64_t, 1, v, cmul_i, NOAUX)                                 \
  DEF_MINMAX(k_MAX_##S, T, ST, int64_t, INT64_MIN, cmax_i)                                \
  DEF_MINMAX(k_MIN_##S, T, ST, int64_t, INT64_MAX, cmin_i)                                \
  DEF_KERNEL(k_ALL_##S, T, int64_t, 1, v != 0, cand_i, NOAUX)                             \
  DEF_KERNEL(k_ANY_##S, T, int64_t, 0, v != 0, cor_i, NOAUX)

FLOAT_KERNELS(float, f32)
FLOAT_KERNELS(double, f64)
DEF_KERNEL(k_SUM_f64, double, double, 0.0, v, cadd_d, NOAUX)
DEF_KERNEL(k_ABSSUM_f64, double, double, 0.0, fabs(v), cadd_d, NOAUX)

/* float32 sums and sums of |x|: rowk's vector kernels (float32 partials of
 * 16 elements, then double; run-time AVX2 / AVX-512), where the
 * auto-vectoriser's double lanes ran at half PyTorch's speed. The cols
 * kernel takes them when the kept dim is contiguous in both. */
#define F32_SUM(NAME, AB, MAP)                                                                 \
  static double NAME##_contig(const float *restrict x, int64_t n, double mu, const kctx *c) {  \
    (void)mu, (void)c;                                                                         \
    return of_rowk_sum_row(OF_FLOAT32, x, n, AB);                                              \
  }                                                                                            \
  static void NAME##_rows(void *acc_, const double *aux, int64_t as, const char *x, int64_t xk, \
                          int64_t M, int64_t xr, int64_t N, const kctx *c) {                   \
    double *acc = acc_;                                                                        \
    (void)aux;                                                                                 \
    for (int64_t m = 0; m < M; m++) {                                                          \
      const char *xm = x + m * xk;                                                             \
      double r = 0;                                                                            \
      if (xr == 4) {                                                                           \
        r = NAME##_contig((const float *)xm, N, 0, c);                                         \
      } else {                                                                                 \
        for (int64_t n = 0; n < N; n++) {                                                      \
          float v = *(const float *)(xm + n * xr);                                             \
          r += MAP;                                                                            \
        }                                                                                      \
      }                                                                                        \
      acc[m * as] += r;                                                                        \
    }                                                                                          \
  }                                                                                            \
  static void NAME##_cols(void *acc_, const double *aux, int64_t as, const char *x, int64_t xk, \
                          int64_t M, int64_t xr, int64_t N, const kctx *c) {                   \
    double *restrict acc = acc_;                                                               \
    (void)aux, (void)c;                                                                        \
    if (!AB && as == 1 && xk == 4 && xr % 4 == 0) {                                            \
      of_rowk_sum_cols(OF_FLOAT32, acc, x, xr / 4, M, N);                                      \
      return;                                                                                  \
    }                                                                                          \
    for (int64_t n = 0; n < N; n++)                                                            \
      for (int64_t m = 0; m < M; m++) {                                                        \
        float v = *(const float *)(x + n * xr + m * xk);                                       \
        acc[m * as] += MAP;                                                                    \
      }                                                                                        \
  }
F32_SUM(k_SUM_f32, 0, (double)v)
F32_SUM(k_ABSSUM_f32, 1, fabs((double)v))
INT_KERNELS(bool, b8, uint8_t)
INT_KERNELS(uint8_t, u8, uint8_t)
INT_KERNELS(int8_t, i8, int8_t)
INT_KERNELS(int32_t, i32, int32_t)
INT_KERNELS(int64_t, i64, int64_t)

/* exp(x - max) summed: float32 through the vector exp, a block at a time */
static double k_EXPSUM_f32_contig(const float *restrict x, int64_t n, double mu, const kctx *c) {
  float buf[256];
  double s = 0;
  for (int64_t i = 0; i < n; i += 256) {
    int64_t len = n - i < 256 ? n - i : 256;
    exp_shifted_f32(buf, x + i, len, (float)mu);
    s += k_SUM_f32_contig(buf, len, 0, c);
  }
  return s;
}
DEF_ROWSCOLS(k_EXPSUM_f32, float, double, 0.0, (double)exp_f32(v - (float)mu), cadd_d, AUX)
DEF_KERNEL(k_EXPSUM_f64, double, double, 0.0, exp(v - mu), cadd_d, AUX)

typedef struct { red_fn rows, cols; } kern_t;

/* native dtype -> column of the kernel table (-1: not native) */
static int native_index(of_dtype t) {
  switch (t) {
    case OF_BOOL: return 0; case OF_UINT8: return 1; case OF_INT8: return 2;
    case OF_INT32: return 3; case OF_INT64: return 4; case OF_FLOAT32: return 5;
    case OF_FLOAT64: return 6; default: return -1;
  }
}

#define ENT(K, S) {k_##K##_##S##_rows, k_##K##_##S##_cols}
#define ALL_TYPES(K) \
  [K_##K] = {ENT(K, b8), ENT(K, u8), ENT(K, i8), ENT(K, i32), ENT(K, i64), ENT(K, f32), ENT(K, f64)}
#define FLOAT_TYPES(K) [K_##K] = {[5] = ENT(K, f32), [6] = ENT(K, f64)}

static const kern_t kernels[K_NUM][7] = {
    ALL_TYPES(SUM), ALL_TYPES(PROD), ALL_TYPES(MAX), ALL_TYPES(MIN), ALL_TYPES(ALL),
    ALL_TYPES(ANY), FLOAT_TYPES(ABSSUM), FLOAT_TYPES(SQSUM), FLOAT_TYPES(POWSUM),
    FLOAT_TYPES(NZSUM), FLOAT_TYPES(ABSMAX), FLOAT_TYPES(ABSMIN), FLOAT_TYPES(SQDEV),
    FLOAT_TYPES(EXPSUM),
};

typedef enum { C_ADD, C_MUL, C_MAX, C_MIN, C_AND, C_OR } comb_t;

static comb_t comb_of(kind_t k) {
  switch (k) {
    case K_PROD: return C_MUL;
    case K_MAX: case K_ABSMAX: return C_MAX;
    case K_MIN: case K_ABSMIN: return C_MIN;
    case K_ALL: return C_AND;
    case K_ANY: return C_OR;
    default: return C_ADD;
  }
}

static void fill_init(kind_t k, bool acc_d, void *buf, int64_t n) {
  comb_t c = comb_of(k);
  if (acc_d) {
    double v = c == C_MUL ? 1.0 : c == C_MAX ? -INFINITY : c == C_MIN ? INFINITY : 0.0;
    double *b = buf;
    for (int64_t i = 0; i < n; i++) b[i] = v;
  } else {
    int64_t v = c == C_MUL || c == C_AND ? 1 : c == C_MAX ? INT64_MIN : c == C_MIN ? INT64_MAX : 0;
    int64_t *b = buf;
    for (int64_t i = 0; i < n; i++) b[i] = v;
  }
}

static void combine_into(kind_t k, bool acc_d, void *dst, const void *src, int64_t n) {
  comb_t c = comb_of(k);
  if (acc_d) {
    double *d = dst;
    const double *s = src;
    for (int64_t i = 0; i < n; i++)
      d[i] = c == C_MUL ? cmul_d(d[i], s[i]) : c == C_MAX ? cmax_d(d[i], s[i])
           : c == C_MIN ? cmin_d(d[i], s[i]) : cadd_d(d[i], s[i]);
  } else {
    int64_t *d = dst;
    const int64_t *s = src;
    for (int64_t i = 0; i < n; i++)
      d[i] = c == C_MUL ? cmul_i(d[i], s[i]) : c == C_MAX ? cmax_i(d[i], s[i])
           : c == C_MIN ? cmin_i(d[i], s[i]) : c == C_AND ? cand_i(d[i], s[i])
           : c == C_OR ? cor_i(d[i], s[i]) : cadd_i(d[i], s[i]);
  }
}

/* ------------------------------------------------------------ engine */
typedef struct {
  red_fn fn;
  const plan_t *pl;
  const char *x;
  const double *aux;
  kctx kc;
  int64_t B, nb;          /* block of the kept dim, blocks per odometer position */
  int64_t C, chunk;       /* pieces of the reduced dim, their length */
} job_t;

/* Output unit u (kept position, block) over reduce units [wb, we) into acc. */
static void run_unit(const job_t *j, int64_t u, int64_t wb, int64_t we, char *acc) {
  const plan_t *pl = j->pl;
  int64_t q = u / j->nb, b = u % j->nb, xoff, aoff;
  dimset_offset(&pl->ko, q, &xoff, &aoff);
  int64_t kb = b * j->B, kl = pl->k_size - kb < j->B ? pl->k_size - kb : j->B;
  xoff += kb * pl->k_xs;
  aoff += kb * pl->k_as;
  char *a = acc + aoff * 8;
  const double *aux = j->aux ? j->aux + aoff : NULL;
  odometer o;
  int64_t w = wb;
  odo_set(&pl->ro, &o, w / j->C);
  while (w < we) {
    int64_t c = w % j->C, n0 = c * j->chunk;
    int64_t nl = pl->r_size - n0 < j->chunk ? pl->r_size - n0 : j->chunk;
    j->fn(a, aux, pl->k_as, j->x + xoff + o.xoff + n0 * pl->r_xs, pl->k_xs, kl, pl->r_xs, nl,
          &j->kc);
    w++;
    if (c == j->C - 1 && w < we) odo_next(&pl->ro, &o);
  }
}

/* acc: out_n 8-byte accumulators (double if acc_d, else int64), initialised here. */
static of_status reduce_run(kind_t kind, const of_tensor *x, const bool *red, void *acc,
                            const double *aux, double p) {
  int ni = native_index(x->dtype);
  bool acc_d = of_dtype_is_floating(x->dtype) && kind != K_ALL && kind != K_ANY;
  const kern_t *kern = ni >= 0 ? &kernels[kind][ni] : NULL;
  if (!kern || !kern->rows)
    return of_fail(OF_ERR_DTYPE, "reduce: no kernel for dtype %s", OF_DT(x));
  plan_t pl;
  make_plan(x, red, &pl);
  fill_init(kind, acc_d, acc, pl.out_n);
  if (x->numel == 0) return OF_OK;
  job_t j = {.fn = pl.rows ? kern->rows : kern->cols, .pl = &pl, .x = of_ptr(x), .aux = aux,
             .kc = {p}, .C = 1, .chunk = pl.r_size};
  int32_t nt = choose_threads(x->numel);
  /* blocks of the kept dim: cache-sized for cols, and enough of them to share */
  int64_t B = pl.rows ? pl.k_size : (pl.k_size < COLS_BLOCK ? pl.k_size : COLS_BLOCK);
  int64_t minb = pl.rows ? 1 : 16;
  while (nt > 1 && B > minb && pl.n_ko * ((pl.k_size + B - 1) / B) < 4 * nt)
    B = (B + 1) / 2 > minb ? (B + 1) / 2 : minb;
  j.B = B;
  j.nb = (pl.k_size + B - 1) / B;
  int64_t units = pl.n_ko * j.nb, rtotal = pl.n_ro * pl.r_size;
  if (nt <= 1) {
    for (int64_t u = 0; u < units; u++) run_unit(&j, u, 0, pl.n_ro, acc);
    return OF_OK;
  }
  if (units >= 2 * nt || rtotal < 2 * nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t u = 0; u < units; u++) run_unit(&j, u, 0, pl.n_ro, acc);
    return OF_OK;
  }
  /* few results, much to reduce: split the reduced elements, one partial per thread */
  j.C = pl.n_ro >= 4 * nt ? 1 : (4 * nt + pl.n_ro - 1) / pl.n_ro;
  if (j.C > pl.r_size) j.C = pl.r_size;
  j.chunk = (pl.r_size + j.C - 1) / j.C;
  j.C = (pl.r_size + j.chunk - 1) / j.chunk;
  /* nt partials, fixed by nt alone: the threads that actually run (1 on a
   * worker of the graph scheduler, where OpenMP does not nest) take partials
   * t, t + nth, ..., so the sums never depend on who runs them */
  int64_t W = pl.n_ro * j.C, bytes = (int64_t)(nt - 1) * pl.out_n * 8;
  char *part = of_alloc(OF_CPU, bytes);
  if (!part) return OF_ERR_OOM;
#pragma omp parallel num_threads(nt)
  {
    int32_t tid = omp_get_thread_num(), nth = omp_get_num_threads();
    for (int32_t t = tid; t < nt; t += nth) {
      char *buf = t == 0 ? (char *)acc : part + (int64_t)(t - 1) * pl.out_n * 8;
      if (t > 0) fill_init(kind, acc_d, buf, pl.out_n);
      int64_t wb = W * t / nt, we = W * (t + 1) / nt;
      if (wb < we)
        for (int64_t u = 0; u < units; u++) run_unit(&j, u, wb, we, buf);
    }
  }
  for (int32_t t = 1; t < nt; t++)
    combine_into(kind, acc_d, acc, part + (int64_t)(t - 1) * pl.out_n * 8, pl.out_n);
  of_free(OF_CPU, part, bytes);
  return OF_OK;
}

/* ------------------------------------------------------------ results */
static void store_d(of_tensor *res, const double *v, int64_t n) {
  void *o = of_ptr(res);
  if (o == (const void *)v) return;
  int32_t nt = choose_threads(n);
  switch (res->dtype) {
    case OF_FLOAT32: {
      float *f = o;
#pragma omp parallel for num_threads(nt) if (nt > 1)
      for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
      break;
    }
    case OF_FLOAT64: memcpy(o, v, (size_t)n * sizeof(double)); break;
    case OF_FLOAT16: {
      uint16_t *h = o;
      for (int64_t i = 0; i < n; i++) h[i] = of_f32_to_f16((float)v[i]);
      break;
    }
    case OF_BFLOAT16: {
      uint16_t *h = o;
      for (int64_t i = 0; i < n; i++) h[i] = of_f32_to_bf16((float)v[i]);
      break;
    }
    default: {
      char *b = o;
      int32_t es = of_dtype_size(res->dtype);
      for (int64_t i = 0; i < n; i++) of_store_double(b + i * es, res->dtype, v[i]);
    }
  }
}

static void store_i(of_tensor *res, const int64_t *v, int64_t n) {
  void *o = of_ptr(res);
  if (o == (const void *)v) return;
  switch (res->dtype) {
#define STORE_INT(E, T)                                    \
  case E: {                                                \
    T *d = o;                                              \
    for (int64_t i = 0; i < n; i++) d[i] = (T)v[i];        \
    break;                                                 \
  }
    STORE_INT(OF_UINT8, uint8_t)
    STORE_INT(OF_INT8, int8_t)
    STORE_INT(OF_INT32, int32_t)
    STORE_INT(OF_INT64, int64_t)
#undef STORE_INT
    case OF_BOOL: {
      bool *d = o;
      for (int64_t i = 0; i < n; i++) d[i] = v[i] != 0;
      break;
    }
    default: {
      char *b = o;
      int32_t es = of_dtype_size(res->dtype);
      for (int64_t i = 0; i < n; i++) of_store_double(b + i * es, res->dtype, (double)v[i]);
    }
  }
}

/* An accumulator buffer: the result's own memory when it has the type. */
static void *acc_for(of_tensor *res, bool acc_d, int64_t n, int64_t *bytes) {
  *bytes = 0;
  if ((acc_d && res->dtype == OF_FLOAT64) || (!acc_d && res->dtype == OF_INT64)) return of_ptr(res);
  *bytes = n > 0 ? n * 8 : 8;
  return of_alloc(OF_CPU, *bytes);
}

/* x converted to dt, then halves to float32 for the kernels. */
/* The dtype the kernels read: halves as float32, and the integer dtypes
 * without kernels of their own (int16, uint16, uint32, uint64) as int64 --
 * exact, and for uint64 sums and products the same bits modulo 2^64. */
static of_dtype red_dtype(of_dtype dt) {
  if (dt == OF_INT16 || dt == OF_UINT16 || dt == OF_UINT32 || dt == OF_UINT64) return OF_INT64;
  return of_compute_dtype(dt);
}
/* uint64 beyond 2^63 would compare as negative int64: no ordering reductions */
static of_status no_uint64_order_of(const char *op, const of_meta *x) {
  if (x->dtype != OF_UINT64) return OF_OK;
  return of_fail(OF_ERR_DTYPE, "%s: not supported for dtype uint64 (input %s)", op,
                 OF_SHAPE_STR(x));
}

static of_status to_compute(of_tensor *x, of_dtype dt, of_tensor **out) {
  of_tensor *a;
  OF_CHECK(of_cast_data(x, dt, &a));
  of_dtype c = red_dtype(dt);
  if (c == dt) {
    *out = a;
    return OF_OK;
  }
  of_status st = of_cast_data(a, c, out);
  of_tensor_release(a);
  return st;
}

/* ------------------------------------------------------------ device path
 * A device reduces rows: the kept dims go first, the reduced dims last, the
 * view is made dense in the compute dtype (one copy when the reduced dims
 * are not already innermost) and seen as [outer, n]. */
static of_status device_rows(of_tensor *x, const bool *red, of_dtype cdt, of_tensor **rows,
                             int64_t *outer, int64_t *n) {
  int64_t shape[OF_MAX_DIMS], strides[OF_MAX_DIMS];
  int32_t k = 0;
  *outer = *n = 1;
  for (int pass = 0; pass < 2; pass++)
    for (int32_t d = 0; d < x->ndim; d++) {
      if (red[d] != (pass == 1)) continue;
      shape[k] = x->shape[d];
      strides[k++] = x->strides[d];
      *(pass ? n : outer) *= x->shape[d];
    }
  of_tensor *v = of_tensor_alias(x, shape, strides, x->ndim, x->offset);
  if (!v) return OF_ERR_OOM;
  of_status st = of_dense(v, cdt, rows);
  of_tensor_release(v);
  return st;
}

static of_status device_reduce(const char *name, of_reduce_op op, of_tensor *x, const bool *red,
                               double p, of_dtype in_dt, of_dtype out_dt, const int64_t *shape,
                               int32_t nd, of_tensor **out) {
  OF_ROUTE(name, dev, o, reduce_rows, x);
  of_tensor *rows = NULL, *res = NULL;
  int64_t outer, n;
  of_status st = device_rows(x, red, red_dtype(in_dt), &rows, &outer, &n);
  if (st == OF_OK) st = of_tensor_new(shape, nd, out_dt, dev, &res);
  if (st == OF_OK) st = o->reduce_rows(op, p, rows, outer, n, res);
  of_tensor_release(rows);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* ------------------------------------------------------------ of_reduce */
static const char *const reduce_names[OF_NUM_REDUCE] = {
    "sum", "mean", "prod", "amax", "amin", "all", "any", "logsumexp", "norm"};
_Static_assert(OF_NUM_REDUCE == 9, "reduce op table out of step with oneflow.h");

const char *of_reduce_name(of_reduce_op op) {
  return op >= 0 && op < OF_NUM_REDUCE ? reduce_names[op] : "invalid";
}

static kind_t norm_kind(double p) {
  if (p == 2) return K_SQSUM;
  if (p == 1) return K_ABSSUM;
  if (p == 0) return K_NZSUM;
  if (p == INFINITY) return K_ABSMAX;
  if (p == -INFINITY) return K_ABSMIN;
  return K_POWSUM;
}

static of_status not_floating_meta(const char *op, const int64_t *shape, int32_t ndim, of_dtype dt) {
  char b[96];
  return of_fail(OF_ERR_DTYPE, "%s: expected a floating point input, got %s dtype %s (input %s); "
                 "convert it first, e.g. x:float()", op,
                 dt == OF_BOOL ? "bool" : "integral", of_dtype_name(dt), of_shape_str(shape, ndim, b, 96));
}

/* a reduction's plan from the input's shape and dtype: the reduced dims,
 * the result's shape and dtype, the compute dtype and the kernel kind --
 * what reduce_compute runs and what a loaded node is re-inferred with
 * (infer_reduce) */
typedef struct {
  bool red[OF_MAX_DIMS];
  int64_t shape[OF_MAX_DIMS], out_n, red_n;
  int32_t nd;
  of_dtype in_dt, out_dt;
  kind_t kind;
} reduce_plan_t;
static of_status reduce_plan(of_reduce_op op, const int64_t *xs, int32_t xn, of_dtype xdt,
                             const int32_t *dims, int32_t ndims, int32_t keepdim, double p,
                             of_dtype dt, reduce_plan_t *r) {
  char b[96];
  if (op < 0 || op >= OF_NUM_REDUCE) return of_fail(OF_ERR_ARG, "reduce: unknown op %d", (int)op);
  const char *name = reduce_names[op];
  if (dt >= OF_NUM_DTYPES)
    return of_fail(OF_ERR_DTYPE, "%s: unknown dtype %d (input %s, %s)", name, (int)dt,
                   of_shape_str(xs, xn, b, 96), of_dtype_name(xdt));
  OF_CHECK(parse_dims_meta(name, xs, xn, xdt, dims, ndims, r->red));
  result_shape_of(xs, xn, r->red, keepdim, r->shape, &r->nd, &r->out_n, &r->red_n);

  of_dtype in_dt = dt >= 0 ? dt : xdt, out_dt = in_dt;
  bool fl = of_dtype_is_floating(in_dt);
  kind_t kind = K_SUM;
  switch (op) {
    case OF_RED_SUM: case OF_RED_PROD:
      kind = op == OF_RED_SUM ? K_SUM : K_PROD;
      if (dt < 0 && !fl) out_dt = OF_INT64;
      break;
    case OF_RED_MEAN:
      if (!fl)
        return of_fail(OF_ERR_DTYPE, "mean(): could not infer output dtype. Input dtype must be "
                       "either a floating point or complex dtype. Got: %s dtype %s (input %s); "
                       "pass a floating dtype or convert the input",
                       in_dt == OF_BOOL ? "bool" : "integral", of_dtype_name(in_dt),
                       of_shape_str(xs, xn, b, 96));
      break;
    case OF_RED_AMAX: kind = K_MAX; break;
    case OF_RED_AMIN: kind = K_MIN; break;
    case OF_RED_ALL: case OF_RED_ANY:
      kind = op == OF_RED_ALL ? K_ALL : K_ANY;
      in_dt = xdt;
      out_dt = OF_BOOL;
      break;
    case OF_RED_LOGSUMEXP:
      if (!fl) {
        if (dt >= 0) return not_floating_meta(name, xs, xn, dt);
        in_dt = out_dt = OF_FLOAT32;
      }
      break;
    case OF_RED_NORM:
      if (!fl) return not_floating_meta(name, xs, xn, in_dt);
      if (ISNAN(p)) return of_fail(OF_ERR_ARG, "norm: order p is NaN (input %s, %s)",
                                   of_shape_str(xs, xn, b, 96), of_dtype_name(xdt));
      kind = norm_kind(p);
      break;
    default: break;
  }
  if (r->red_n == 0 && (kind == K_MAX || kind == K_MIN || kind == K_ABSMAX || kind == K_ABSMIN)) {
    int32_t e = 0;
    for (int32_t d = 0; d < xn && !e; d++)
      if (r->red[d] && xs[d] == 0) e = d + 1;
    return of_fail(OF_ERR_SHAPE, "%s: expected reduction dim %d to have non-zero size; the "
                   "operation has no identity (input %s, %s)", name, (int)e,
                   of_shape_str(xs, xn, b, 96), of_dtype_name(xdt));
  }
  if ((kind == K_MAX || kind == K_MIN) && xdt == OF_UINT64)
    return of_fail(OF_ERR_DTYPE, "%s: not supported for dtype uint64 (input %s)", name,
                   of_shape_str(xs, xn, b, 96));
  r->in_dt = in_dt;
  r->out_dt = out_dt;
  r->kind = kind;
  return OF_OK;
}

/* logsumexp over trailing dims of a contiguous float32/bfloat16 tensor: the
 * rows' one-pass vector kernel (rowk.c; the max and the exps of a chunk
 * while it is in cache), one row a task -- the general path below takes a
 * max pass and a pass of double exps (5x the time at 4096x1024). Returns
 * false where it does not apply. */
static bool lse_rows(of_tensor *xc, const bool *red, int64_t out_n, int64_t red_n, double *acc) {
  if (!of_rowk_dtype(xc->dtype) || !of_tensor_is_contiguous(xc) || red_n == 0) return false;
  int32_t d = xc->ndim;
  while (d > 0 && (red[d - 1] || xc->shape[d - 1] == 1)) d--;   /* the reduced suffix */
  for (int32_t k = 0; k < d; k++)
    if (red[k] && xc->shape[k] != 1) return false;
  const char *x = of_tensor_data(xc);
  int64_t es = of_dtype_size(xc->dtype);
  int32_t nt = of_threads();
  if (out_n * red_n < OF_PARALLEL_GRAIN || out_n < 2) nt = 1;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t i = 0; i < out_n; i++) {
    const char *row = x + i * red_n * es;
    acc[i] = of_rowk_logsumexp_row(xc->dtype, row, red_n, i + 1 < out_n ? row + red_n * es : NULL);
    if (acc[i] != acc[i]) {   /* +inf in the row (inf - inf), or a NaN: as the path below */
      double m = -INFINITY, se = 0;
      for (int64_t k = 0; k < red_n; k++) m = fmax(m, of_load_double(row + k * es, xc->dtype));
      if (!isfinite(m)) m = 0;
      for (int64_t k = 0; k < red_n; k++) se += exp(of_load_double(row + k * es, xc->dtype) - m);
      acc[i] = log(se) + m;
    }
  }
  return true;
}

static of_status reduce_compute(of_reduce_op op, of_tensor *x, const int32_t *dims, int32_t ndims,
                               int32_t keepdim, double p, of_dtype dt, of_tensor **out) {
  if (op < 0 || op >= OF_NUM_REDUCE) return of_fail(OF_ERR_ARG, "reduce: unknown op %d", (int)op);
  const char *name = reduce_names[op];
  if (!x || !out) return of_fail(OF_ERR_ARG, "%s: NULL tensor argument", name);
  reduce_plan_t r;
  OF_CHECK(reduce_plan(op, x->shape, x->ndim, x->dtype, dims, ndims, keepdim, p, dt, &r));
  const bool *red = r.red;
  const int64_t *shape = r.shape;
  int32_t nd = r.nd;
  int64_t out_n = r.out_n, red_n = r.red_n;
  of_dtype in_dt = r.in_dt, out_dt = r.out_dt;
  kind_t kind = r.kind;
  if (of_dev(x) != OF_CPU) return device_reduce(name, op, x, red, p, in_dt, out_dt, shape, nd, out);

  of_tensor *xc = NULL, *res = NULL;
  void *acc = NULL;
  double *shift = NULL;
  int64_t acc_bytes = 0, shift_bytes = 0;
  of_status st = to_compute(x, in_dt, &xc);
  if (st != OF_OK) return st;
  st = of_tensor_new(shape, nd, out_dt, OF_CPU, &res);
  if (st != OF_OK) goto done;
  bool acc_d = of_dtype_is_floating(xc->dtype) && kind != K_ALL && kind != K_ANY;
  acc = acc_for(res, acc_d, out_n, &acc_bytes);
  if (!acc) { st = OF_ERR_OOM; goto done; }
  if (op == OF_RED_LOGSUMEXP && acc_d && lse_rows(xc, red, out_n, red_n, acc)) {
    store_d(res, acc, out_n);
    goto done;
  }
  if (op == OF_RED_LOGSUMEXP) {
    shift_bytes = out_n > 0 ? out_n * 8 : 8;
    shift = of_alloc(OF_CPU, shift_bytes);
    if (!shift) { st = OF_ERR_OOM; goto done; }
    if ((st = reduce_run(K_MAX, xc, red, shift, NULL, 0)) != OF_OK) goto done;
    for (int64_t i = 0; i < out_n; i++) if (!isfinite(shift[i])) shift[i] = 0;
    kind = K_EXPSUM;
  }
  if ((st = reduce_run(kind, xc, red, acc, shift, p)) != OF_OK) goto done;
  if (acc_d) {
    double *a = acc;
    if (op == OF_RED_MEAN) {
      for (int64_t i = 0; i < out_n; i++) a[i] /= (double)red_n;
    } else if (op == OF_RED_LOGSUMEXP) {
      for (int64_t i = 0; i < out_n; i++) a[i] = log(a[i]) + shift[i];
    } else if (op == OF_RED_NORM) {
      if (kind == K_SQSUM) for (int64_t i = 0; i < out_n; i++) a[i] = sqrt(a[i]);
      else if (kind == K_POWSUM) for (int64_t i = 0; i < out_n; i++) a[i] = pow(a[i], 1.0 / p);
    }
    store_d(res, a, out_n);
  } else {
    store_i(res, acc, out_n);
  }
done:
  if (acc_bytes) of_free(OF_CPU, acc, acc_bytes);
  if (shift) of_free(OF_CPU, shift, shift_bytes);
  of_tensor_release(xc);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* ------------------------------------------------------------ var / std */
/* var's / std's checks on the input's shape and dtype and its result (the
 * reduced shape, the input's dtype): var_compute and infer_var */
static of_status var_plan(const char *name, const of_meta *x, const int32_t *dims, int32_t ndims,
                          int32_t keepdim, bool *red, of_meta *res, int64_t *out_n,
                          int64_t *red_n) {
  OF_CHECK(parse_dims_meta(name, x->shape, x->ndim, x->dtype, dims, ndims, red));
  if (!of_dtype_is_floating(x->dtype)) return not_floating_meta(name, x->shape, x->ndim, x->dtype);
  result_shape_of(x->shape, x->ndim, red, keepdim, res->shape, &res->ndim, out_n, red_n);
  res->dtype = x->dtype;
  return OF_OK;
}

static of_status var_compute(of_tensor *x, const int32_t *dims, int32_t ndims, double correction,
                            int32_t keepdim, int32_t is_std, of_tensor **out) {
  const char *name = is_std ? "std" : "var";
  if (!x || !out) return of_fail(OF_ERR_ARG, "%s: NULL tensor argument", name);
  bool red[OF_MAX_DIMS];
  of_meta xm = of_meta_of(x), rm;
  int64_t out_n = 0, red_n = 0;
  OF_CHECK(var_plan(name, &xm, dims, ndims, keepdim, red, &rm, &out_n, &red_n));
  int64_t *shape = rm.shape;
  int32_t nd = rm.ndim;
  if (of_dev(x) != OF_CPU) {
    OF_ROUTE(name, dev, o, var_rows, x);
    of_tensor *rows = NULL, *r = NULL;
    int64_t outer, n;
    of_status st = device_rows(x, red, of_compute_dtype(x->dtype), &rows, &outer, &n);
    if (st == OF_OK) st = of_tensor_new(shape, nd, x->dtype, dev, &r);
    if (st == OF_OK) st = o->var_rows(rows, outer, n, correction, is_std, r);
    of_tensor_release(rows);
    if (st != OF_OK) of_tensor_release(r);
    else *out = r;
    return st;
  }
  of_tensor *xc = NULL, *res = NULL;
  double *mean = NULL, *acc = NULL;
  int64_t mean_bytes = out_n > 0 ? out_n * 8 : 8, acc_bytes = 0;
  of_status st = to_compute(x, x->dtype, &xc);
  if (st != OF_OK) return st;
  if ((st = of_tensor_new(shape, nd, x->dtype, OF_CPU, &res)) != OF_OK) goto done;
  mean = of_alloc(OF_CPU, mean_bytes);
  acc = acc_for(res, true, out_n, &acc_bytes);
  if (!mean || !acc) { st = OF_ERR_OOM; goto done; }
  if ((st = reduce_run(K_SUM, xc, red, mean, NULL, 0)) != OF_OK) goto done;
  for (int64_t i = 0; i < out_n; i++) mean[i] /= (double)red_n;
  if ((st = reduce_run(K_SQDEV, xc, red, acc, mean, 0)) != OF_OK) goto done;
  double denom = (double)red_n - correction;
  if (denom < 0) denom = 0;
  for (int64_t i = 0; i < out_n; i++) {
    acc[i] /= denom;
    if (is_std) acc[i] = sqrt(acc[i]);
  }
  store_d(res, acc, out_n);
done:
  if (mean) of_free(OF_CPU, mean, mean_bytes);
  if (acc_bytes && acc) of_free(OF_CPU, acc, acc_bytes);
  of_tensor_release(xc);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* ------------------------------------------------------------ max/min along a dim
 * Values keep the dtype; the first extreme wins ties; a NaN wins (the first one). */
typedef void (*md_fn)(char *vals, int64_t *idx, int64_t as, const char *x, int64_t xk,
                      int64_t M, int64_t xr, int64_t N, int64_t base);
typedef void (*md_part_fn)(const char *x, int64_t xr, int64_t n0, int64_t n1, char *val,
                           int64_t *idx);
typedef bool (*md_better_fn)(const char *a, const char *b);

#define FBETTER_MAX(v, b) ((v) > (b) || (ISNAN(v) && !ISNAN(b)))
#define FBETTER_MIN(v, b) ((v) < (b) || (ISNAN(v) && !ISNAN(b)))
#define IBETTER_MAX(v, b) ((v) > (b))
#define IBETTER_MIN(v, b) ((v) < (b))

#define DEF_MAXDIM(S, T, BETTER, BESTFN, ISN)                                             \
  static void md_rows_##S(char *vals_, int64_t *idx, int64_t as, const char *x, int64_t xk, \
                          int64_t M, int64_t xr, int64_t N, int64_t base) {               \
    T *vals = (T *)vals_;                                                                 \
    for (int64_t m = 0; m < M; m++) {                                                     \
      const char *xm = x + m * xk;                                                        \
      int64_t bi = 0;                                                                     \
      if (xr == (int64_t)sizeof(T) && N >= 32) {                                          \
        /* vectorised extreme, then the first position holding it */                     \
        const T *xc = (const T *)xm;                                                      \
        T best = BESTFN((const void *)xc, N);                                                        \
        if (ISN(best)) { while (bi < N - 1 && !ISN(xc[bi])) bi++; }                       \
        else { while (bi < N - 1 && xc[bi] != best) bi++; }                               \
      } else {                                                                            \
        T best = *(const T *)xm;                                                          \
        for (int64_t n = 1; n < N; n++) {                                                 \
          T v = *(const T *)(xm + n * xr);                                                \
          if (BETTER(v, best)) { best = v; bi = n; }                                      \
        }                                                                                 \
      }                                                                                   \
      vals[m * as] = *(const T *)(xm + bi * xr);                                          \
      idx[m * as] = bi + base;                                                            \
    }                                                                                     \
  }                                                                                       \
  static void md_cols_##S(char *vals_, int64_t *idx, int64_t as, const char *x, int64_t xk, \
                          int64_t M, int64_t xr, int64_t N, int64_t base) {               \
    T *vals = (T *)vals_;                                                                 \
    for (int64_t m = 0; m < M; m++) {                                                     \
      vals[m * as] = *(const T *)(x + m * xk);                                            \
      idx[m * as] = base;                                                                 \
    }                                                                                     \
    for (int64_t n = 1; n < N; n++) {                                                     \
      const char *xn = x + n * xr;                                                        \
      for (int64_t m = 0; m < M; m++) {                                                   \
        T v = *(const T *)(xn + m * xk);                                                  \
        if (BETTER(v, vals[m * as])) { vals[m * as] = v; idx[m * as] = n + base; }        \
      }                                                                                   \
    }                                                                                     \
  }                                                                                       \
  static void md_part_##S(const char *x, int64_t xr, int64_t n0, int64_t n1, char *val,   \
                          int64_t *idx) {                                                 \
    int64_t bi = 0;                                                                       \
    md_rows_##S(val, &bi, 0, x + n0 * xr, 0, 1, xr, n1 - n0, 0);                          \
    *idx = bi + n0;                                                                       \
  }                                                                                       \
  static bool md_better_##S(const char *a, const char *b) {                               \
    T v = *(const T *)a, w = *(const T *)b;                                               \
    return BETTER(v, w);                                                                  \
  }

#define MAXDIM_TYPES(X) \
  X(b8, bool, I) X(u8, uint8_t, I) X(i8, int8_t, I) X(i32, int32_t, I) X(i64, int64_t, I) \
  X(f32, float, F) X(f64, double, F)
#define DEF_MD2(S, T, K)                                                 \
  DEF_MAXDIM(max_##S, T, K##BETTER_MAX, k_MAX_##S##_best, K##_ISN)       \
  DEF_MAXDIM(min_##S, T, K##BETTER_MIN, k_MIN_##S##_best, K##_ISN)
MAXDIM_TYPES(DEF_MD2)

typedef struct { md_fn rows, cols; md_part_fn part; md_better_fn better; } md_kern;
#define MD_ENT(S, T, K) \
  {{md_rows_min_##S, md_cols_min_##S, md_part_min_##S, md_better_min_##S}, \
   {md_rows_max_##S, md_cols_max_##S, md_part_max_##S, md_better_max_##S}},
static const md_kern md_kernels[7][2] = {MAXDIM_TYPES(MD_ENT)};

/* max/min/argmax's checks along one dim of x (orig: the input as given,
 * x flattened for argmax over all dims, flat) and its results' shape
 * (values in x's dtype, int64 indices): max_dim_impl and the loader's
 * infer_max_dim / infer_argmax */
static of_status max_dim_plan(const char *name, const of_meta *x, int32_t dim, int32_t keepdim,
                              int32_t is_max, const of_meta *orig, bool flat, int32_t *dout,
                              bool *red, of_meta *vals, of_meta *idx, int64_t *out_n) {
  int32_t d;
  of_status st = of_norm_dim(name, dim, x->ndim, &d);
  if (st != OF_OK) return with_input_meta(st, orig->shape, orig->ndim, orig->dtype);
  for (int32_t k = 0; k < OF_MAX_DIMS; k++) red[k] = false;
  if (x->ndim > 0) red[d] = true;
  int64_t red_n;
  result_shape_of(x->shape, x->ndim, red, keepdim, vals->shape, &vals->ndim, out_n, &red_n);
  if (red_n == 0) {
    if (x->ndim == 1 || flat)
      return of_fail(OF_ERR_SHAPE, "%s: cannot take the %s of an empty tensor; the operation "
                     "has no identity (input %s, %s)", name, is_max ? "maximum" : "minimum",
                     OF_SHAPE_STR(orig), OF_DT(orig));
    return fail_empty_of(name, x, d + 1);
  }
  OF_CHECK(no_uint64_order_of(name, orig));
  vals->dtype = x->dtype;
  *idx = *vals;
  idx->dtype = OF_INT64;
  *dout = d;
  return OF_OK;
}

static of_status max_dim_impl(const char *name, of_tensor *x, int32_t dim, int32_t keepdim,
                              int32_t is_max, int64_t index_base, const of_tensor *orig,
                              of_tensor **values, of_tensor **indices) {
  int32_t d = 0;
  of_status st;
  bool red[OF_MAX_DIMS];
  of_meta xm = of_meta_of(x), om = of_meta_of(orig), vm, im;
  int64_t out_n = 0;
  OF_CHECK(max_dim_plan(name, &xm, dim, keepdim, is_max, &om, orig != x, &d, red, &vm, &im,
                        &out_n));
  const int64_t *shape = vm.shape;
  const int32_t nd = vm.ndim;
  of_dtype cdt = red_dtype(x->dtype);
  of_tensor *xc = NULL, *vals = NULL, *idx = NULL;
  if (of_dev(x) != OF_CPU) {
    OF_ROUTE(name, dev, o, argreduce_rows, x);
    int64_t outer, n;
    if ((st = device_rows(x, red, cdt, &xc, &outer, &n)) != OF_OK) return st;
    if ((st = of_tensor_new(shape, nd, cdt, dev, &vals)) != OF_OK) goto done;
    if ((st = of_tensor_new(shape, nd, OF_INT64, dev, &idx)) != OF_OK) goto done;
    if ((st = o->argreduce_rows(is_max, xc, outer, n, index_base, vals, idx)) != OF_OK) goto done;
  } else {
  if ((st = of_cast_data(x, cdt, &xc)) != OF_OK) return st;
  if ((st = of_tensor_new(shape, nd, cdt, OF_CPU, &vals)) != OF_OK) goto done;
  if ((st = of_tensor_new(shape, nd, OF_INT64, OF_CPU, &idx)) != OF_OK) goto done;
  }
  if (out_n > 0 && of_dev(x) == OF_CPU) {
    const md_kern *k = &md_kernels[native_index(cdt)][is_max ? 1 : 0];
    plan_t pl;
    make_plan(xc, red, &pl);
    const char *xp = of_ptr(xc);
    char *vp = of_ptr(vals);
    int64_t *ip = of_tensor_data(idx), es = of_dtype_size(cdt);
    int32_t nt = choose_threads(xc->numel);
    if (out_n == 1 && nt > 1) {
      /* one result: split the row, combine the partial winners in order */
      double pvbuf[64];   /* one 8-byte slot per thread, any dtype */
      char *pv = (char *)pvbuf;
      int64_t pi[64];
      if (nt > 64) nt = 64;
      int32_t used = 1;
#pragma omp parallel num_threads(nt)
      {
        int32_t t = omp_get_thread_num(), nth = omp_get_num_threads();
        if (t == 0) used = nth;
        int64_t n0 = pl.r_size * t / nth, n1 = pl.r_size * (t + 1) / nth;
        if (n0 < n1) k->part(xp, pl.r_xs, n0, n1, pv + 8 * t, &pi[t]);
        else pi[t] = -1;
      }
      int32_t best = -1;
      for (int32_t t = 0; t < used; t++)
        if (pi[t] >= 0 && (best < 0 || k->better(pv + 8 * t, pv + 8 * best))) best = t;
      memcpy(vp, pv + 8 * best, (size_t)es);
      ip[0] = pi[best] + index_base;
    } else {
      md_fn fn = pl.rows ? k->rows : k->cols;
      int64_t B = pl.rows ? pl.k_size : (pl.k_size < COLS_BLOCK ? pl.k_size : COLS_BLOCK);
      while (nt > 1 && B > 1 && pl.n_ko * ((pl.k_size + B - 1) / B) < 4 * nt) B = (B + 1) / 2;
      int64_t nb = (pl.k_size + B - 1) / B, units = pl.n_ko * nb;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
      for (int64_t u = 0; u < units; u++) {
        int64_t xoff, aoff, b = u % nb, kb = b * B;
        dimset_offset(&pl.ko, u / nb, &xoff, &aoff);
        int64_t kl = pl.k_size - kb < B ? pl.k_size - kb : B;
        xoff += kb * pl.k_xs;
        aoff += kb * pl.k_as;
        fn(vp + aoff * es, ip + aoff, pl.k_as, xp + xoff, pl.k_xs, kl, pl.r_xs, pl.r_size,
           index_base);
      }
    }
  }
  if (cdt != x->dtype) {
    of_tensor *v2;
    if ((st = of_cast_data(vals, x->dtype, &v2)) != OF_OK) goto done;
    of_tensor_release(vals);
    vals = v2;
  }
done:
  of_tensor_release(xc);
  if (st != OF_OK) {
    of_tensor_release(vals);
    of_tensor_release(idx);
    return st;
  }
  if (values) *values = vals;
  else of_tensor_release(vals);
  *indices = idx;
  return OF_OK;
}

static of_status max_dim_compute(of_tensor *x, int32_t dim, int32_t keepdim, int32_t is_max,
                                int64_t index_base, of_tensor **values, of_tensor **indices) {
  const char *name = is_max ? "max" : "min";
  if (!x || !values || !indices) return of_fail(OF_ERR_ARG, "%s: NULL tensor argument", name);
  return max_dim_impl(name, x, dim, keepdim, is_max, index_base, x, values, indices);
}

/* argmax's / argmin's result: max_dim_plan's indices along dim, or over all
 * dims of x seen flat ([] or, with keepdim, x's rank of ones): argmax_body
 * and infer_argmax */
static of_status argmax_plan(const char *name, const of_meta *x, int32_t dim, int32_t keepdim,
                             int32_t is_max, of_meta *res) {
  int32_t d;
  bool red[OF_MAX_DIMS];
  int64_t out_n;
  of_meta vm;
  if (dim != OF_ALL_DIMS)
    return max_dim_plan(name, x, dim, keepdim, is_max, x, false, &d, red, &vm, res, &out_n);
  of_meta flat = *x;
  flat.ndim = 1;
  flat.shape[0] = of_shape_numel(x->shape, x->ndim);
  OF_CHECK(max_dim_plan(name, &flat, 0, 0, is_max, x, true, &d, red, &vm, res, &out_n));
  if (keepdim && x->ndim > 0) {
    res->ndim = x->ndim;
    for (int32_t i = 0; i < x->ndim; i++) res->shape[i] = 1;
  }
  return OF_OK;
}

static of_status argmax_body(of_tensor *x, int32_t dim, int32_t keepdim, int32_t is_max,
                         int64_t index_base, of_tensor **out) {
  const char *name = is_max ? "argmax" : "argmin";
  if (!x || !out) return of_fail(OF_ERR_ARG, "%s: NULL tensor argument", name);
  if (dim != OF_ALL_DIMS)
    return max_dim_impl(name, x, dim, keepdim, is_max, index_base, x, NULL, out);
  of_meta xm = of_meta_of(x), rm;
  OF_CHECK(argmax_plan(name, &xm, dim, keepdim, is_max, &rm));
  of_tensor *flat, *idx;
  int64_t n = x->numel;
  OF_CHECK(of_reshape(x, &n, 1, &flat));
  of_status st = max_dim_impl(name, flat, 0, 0, is_max, index_base, x, NULL, &idx);
  of_tensor_release(flat);
  if (st != OF_OK) return st;
  if (idx->ndim == rm.ndim) {
    *out = idx;
    return OF_OK;
  }
  st = of_reshape(idx, rm.shape, rm.ndim, out);
  of_tensor_release(idx);
  return st;
}

/* ------------------------------------------------------------ softmax
 * The input is made contiguous and seen as [outer, n, inner]. */
static void split3(const of_tensor *x, int32_t d, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = *inner = 1;
  *n = x->ndim > 0 ? x->shape[d] : 1;
  for (int32_t i = 0; i < d; i++) *outer *= x->shape[i];
  for (int32_t i = d + 1; i < x->ndim; i++) *inner *= x->shape[i];
}

/* The driver shared by softmax and cumsum/cumprod: a contiguous tensor seen
 * as [outer, n, inner] is worked along n, row by row when inner == 1, else in
 * column blocks of BLOCK (walking memory contiguously), over OpenMP threads. */
#define ALONG_DIM_RUN(NAME, S, T, BLOCK, FLAG)                                             \
  static void NAME##_run_##S(T *o, const T *x, int64_t outer, int64_t n, int64_t inner,   \
                             int FLAG) {                                                  \
    int32_t nt = choose_threads(outer * n * inner);                                       \
    if (inner == 1) {                                                                     \
      _Pragma("omp parallel for num_threads(nt) schedule(static) if (nt > 1)")            \
      for (int64_t r = 0; r < outer; r++) NAME##_row_##S(o + r * n, x + r * n, n, FLAG);  \
      return;                                                                             \
    }                                                                                     \
    int64_t nb = (inner + BLOCK - 1) / BLOCK, units = outer * nb;                         \
    _Pragma("omp parallel for num_threads(nt) schedule(static) if (nt > 1)")              \
    for (int64_t u = 0; u < units; u++) {                                                 \
      int64_t r = u / nb, j0 = (u % nb) * BLOCK;                                          \
      int64_t B = inner - j0 < BLOCK ? inner - j0 : BLOCK;                                \
      int64_t off = r * n * inner + j0;                                                   \
      NAME##_cols_##S(o + off, x + off, n, inner, B, FLAG);                               \
    }                                                                                     \
  }

#define DEF_SOFTMAX(S, T)                                                                \
  static void sm_row_##S(T *restrict o, const T *restrict x, int64_t n, int lg) {        \
    T m = k_MAX_##S##_best(x, n);                                                        \
    exp_shifted_##S(o, x, n, m);                                                         \
    double s = k_SUM_##S##_contig(o, n, 0, NULL);                                        \
    if (lg) {                                                                            \
      T ls = (T)log(s);                                                                  \
      for (int64_t i = 0; i < n; i++) o[i] = (x[i] - m) - ls;                            \
    } else {                                                                             \
      T inv = (T)(1.0 / s);                                                              \
      for (int64_t i = 0; i < n; i++) o[i] *= inv;                                       \
    }                                                                                    \
  }                                                                                      \
  static void sm_cols_##S(T *restrict o, const T *restrict x, int64_t n, int64_t stride, \
                          int64_t B, int lg) {                                           \
    T m[SM_BLOCK], f[SM_BLOCK];                                                          \
    double s[SM_BLOCK];                                                                  \
    for (int64_t j = 0; j < B; j++) m[j] = x[j], s[j] = 0;                               \
    for (int64_t r = 1; r < n; r++) {                                                    \
      const T *xr = x + r * stride;                                                      \
      max_upd_##S(m, xr, B);                                                             \
    }                                                                                    \
    for (int64_t r = 0; r < n; r++) {                                                    \
      const T *xr = x + r * stride;                                                      \
      T *orow = o + r * stride;                                                          \
      exp_sub_##S(orow, xr, m, B);                                                       \
      for (int64_t j = 0; j < B; j++) s[j] += orow[j];                                   \
    }                                                                                    \
    for (int64_t j = 0; j < B; j++) f[j] = lg ? (T)log(s[j]) : (T)(1.0 / s[j]);          \
    for (int64_t r = 0; r < n; r++) {                                                    \
      const T *xr = x + r * stride;                                                      \
      T *orow = o + r * stride;                                                          \
      if (lg) for (int64_t j = 0; j < B; j++) orow[j] = (xr[j] - m[j]) - f[j];           \
      else for (int64_t j = 0; j < B; j++) orow[j] *= f[j];                              \
    }                                                                                    \
  }                                                                                      \
  ALONG_DIM_RUN(sm, S, T, SM_BLOCK, lg)

DEF_SOFTMAX(f32, float)
DEF_SOFTMAX(f64, double)

/* softmax on a device: rows along dim d (moved last, then moved back) */
static of_status device_softmax(const char *name, of_tensor *x, int32_t d, int32_t log_,
                                of_dtype cdt, of_tensor **out) {
  OF_ROUTE(name, dev, o, softmax_rows, x);
  bool red[OF_MAX_DIMS] = {false};
  if (x->ndim > 0) red[d] = true;
  of_tensor *rows = NULL, *y = NULL, *res = NULL;
  int64_t outer, n;
  of_status st = device_rows(x, red, cdt, &rows, &outer, &n);
  if (st == OF_OK) st = of_tensor_new(rows->shape, rows->ndim, cdt, dev, &y);
  if (st == OF_OK) st = o->softmax_rows(rows, outer, n, log_, y);
  if (st == OF_OK && x->ndim > 0 && d != x->ndim - 1) {   /* y's last dim back to d */
    int64_t shape[OF_MAX_DIMS], strides[OF_MAX_DIMS];
    for (int32_t i = 0, k = 0; i < x->ndim; i++) {
      int32_t src = i == d ? x->ndim - 1 : k++;
      shape[i] = y->shape[src];
      strides[i] = y->strides[src];
    }
    of_tensor *v = of_tensor_alias(y, shape, strides, x->ndim, 0);
    if (!v) st = OF_ERR_OOM;
    else st = of_dense(v, x->dtype, &res);
    of_tensor_release(v);
  } else if (st == OF_OK) {
    st = of_cast_data(y, x->dtype, &res);
  }
  of_tensor_release(rows);
  of_tensor_release(y);
  if (st != OF_OK) return st;
  if (res->ndim != x->ndim) {   /* 0-d input: rows were [1] */
    st = of_reshape(res, x->shape, x->ndim, out);
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* softmax's and cumsum/cumprod's checks on the input's shape and dtype, and
 * the result's dtype (its shape is the input's): what the ops run with and
 * what a loaded graph's node is checked with (infer_softmax) */
static of_status softmax_plan(int32_t log_, int32_t dim, const int64_t *shape, int32_t ndim,
                              of_dtype dt, int32_t *d) {
  const char *name = log_ ? "log_softmax" : "softmax";
  of_status st = of_norm_dim(name, dim, ndim, d);
  if (st != OF_OK) return with_input_meta(st, shape, ndim, dt);
  if (!of_dtype_is_floating(dt)) return not_floating_meta(name, shape, ndim, dt);
  return OF_OK;
}
static of_status cumulative_plan(int32_t is_prod, int32_t dim, const int64_t *shape, int32_t ndim,
                                 of_dtype dt, int32_t *d, of_dtype *out_dt) {
  of_status st = of_norm_dim(is_prod ? "cumprod" : "cumsum", dim, ndim, d);
  if (st != OF_OK) return with_input_meta(st, shape, ndim, dt);
  *out_dt = of_dtype_is_floating(dt) ? dt : OF_INT64;
  return OF_OK;
}

static of_status softmax_compute(of_tensor *x, int32_t dim, int32_t log_, of_tensor **out) {
  const char *name = log_ ? "log_softmax" : "softmax";
  if (!x || !out) return of_fail(OF_ERR_ARG, "%s: NULL tensor argument", name);
  int32_t d;
  of_status st;
  OF_CHECK(softmax_plan(log_, dim, x->shape, x->ndim, x->dtype, &d));
  of_dtype cdt = of_compute_dtype(x->dtype);
  of_tensor *a = NULL, *xc = NULL, *res = NULL;
  if (of_dev(x) != OF_CPU) return device_softmax(name, x, d, log_, cdt, out);
  int64_t outer, n, inner;
  split3(x, d, &outer, &n, &inner);
  if (inner == 1 && of_rowk_dtype(x->dtype)) {
    /* rows along the last dim, float32/bfloat16: the one-pass row kernels (rowk.c) */
    if ((st = of_dense(x, x->dtype, &xc)) != OF_OK) return st;
    st = of_tensor_new(x->shape, x->ndim, x->dtype, OF_CPU, &res);
    if (st == OF_OK) of_rowk_softmax(x->dtype, of_tensor_data(xc), of_tensor_data(res), outer, n, log_);
    goto done;
  }
  if ((st = of_cast_data(x, cdt, &a)) != OF_OK) return st;
  st = of_contiguous_data(a, &xc);
  of_tensor_release(a);
  if (st != OF_OK) return st;
  if ((st = of_tensor_new(xc->shape, xc->ndim, cdt, OF_CPU, &res)) != OF_OK) goto done;
  if (xc->numel > 0) {
    if (cdt == OF_FLOAT32) sm_run_f32(of_tensor_data(res), of_tensor_data(xc), outer, n, inner, log_);
    else sm_run_f64(of_tensor_data(res), of_tensor_data(xc), outer, n, inner, log_);
  }
  if (cdt != x->dtype) {
    of_tensor *r2;
    if ((st = of_cast_data(res, x->dtype, &r2)) != OF_OK) goto done;
    of_tensor_release(res);
    res = r2;
  }
done:
  of_tensor_release(xc);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* ------------------------------------------------------------ cumsum / cumprod
 * Integers and bool accumulate in int64 (wrapping), floats in double. */
#define DEF_CUM(S, T, A, OPS, OPP)                                                       \
  static void cum_row_##S(T *restrict o, const T *restrict x, int64_t n, int prod) {     \
    A a = prod ? (A)1 : (A)0;                                                            \
    if (prod) for (int64_t i = 0; i < n; i++) { a = OPP(a, (A)x[i]); o[i] = (T)a; }      \
    else for (int64_t i = 0; i < n; i++) { a = OPS(a, (A)x[i]); o[i] = (T)a; }           \
  }                                                                                      \
  static void cum_cols_##S(T *restrict o, const T *restrict x, int64_t n, int64_t stride, \
                           int64_t B, int prod) {                                        \
    A a[CUM_BLOCK];                                                                      \
    for (int64_t j = 0; j < B; j++) a[j] = prod ? (A)1 : (A)0;                           \
    for (int64_t r = 0; r < n; r++) {                                                    \
      const T *xr = x + r * stride;                                                      \
      T *orow = o + r * stride;                                                          \
      if (prod) for (int64_t j = 0; j < B; j++) { a[j] = OPP(a[j], (A)xr[j]); orow[j] = (T)a[j]; } \
      else for (int64_t j = 0; j < B; j++) { a[j] = OPS(a[j], (A)xr[j]); orow[j] = (T)a[j]; } \
    }                                                                                    \
  }                                                                                      \
  ALONG_DIM_RUN(cum, S, T, CUM_BLOCK, prod)

DEF_CUM(f32, float, double, cadd_d, cmul_d)
DEF_CUM(f64, double, double, cadd_d, cmul_d)
DEF_CUM(i64, int64_t, int64_t, cadd_i, cmul_i)

static of_status cumulative_compute(of_tensor *x, int32_t dim, int32_t is_prod, of_tensor **out) {
  const char *name = is_prod ? "cumprod" : "cumsum";
  if (!x || !out) return of_fail(OF_ERR_ARG, "%s: NULL tensor argument", name);
  OF_ROUTE(name, dev, dops, scan, x);
  int32_t d;
  of_status st;
  of_dtype out_dt = OF_INT64;
  OF_CHECK(cumulative_plan(is_prod, dim, x->shape, x->ndim, x->dtype, &d, &out_dt));
  of_dtype cdt = of_compute_dtype(out_dt);
  of_tensor *a = NULL, *xc = NULL, *res = NULL;
  if ((st = of_cast_data(x, cdt, &a)) != OF_OK) return st;
  st = of_contiguous_data(a, &xc);
  of_tensor_release(a);
  if (st != OF_OK) return st;
  if ((st = of_tensor_new(xc->shape, xc->ndim, cdt, dev, &res)) != OF_OK) goto done;
  int64_t outer, n, inner;
  split3(xc, d, &outer, &n, &inner);
  if (dops) {
    if ((st = dops->scan(xc, outer, n, inner, is_prod, res)) != OF_OK) goto done;
  } else if (xc->numel > 0) {
    void *o = of_tensor_data(res);
    const void *i = of_tensor_data(xc);
    if (cdt == OF_FLOAT32) cum_run_f32(o, i, outer, n, inner, is_prod);
    else if (cdt == OF_FLOAT64) cum_run_f64(o, i, outer, n, inner, is_prod);
    else cum_run_i64(o, i, outer, n, inner, is_prod);
  }
  if (cdt != out_dt) {
    of_tensor *r2;
    if ((st = of_cast_data(res, out_dt, &r2)) != OF_OK) goto done;
    of_tensor_release(res);
    res = r2;
  }
done:
  of_tensor_release(xc);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* ------------------------------------------------------------ autograd
 * Rules are compositions of public ops (through of_scope), so create_graph
 * gives double backward. Nodes keep the op's record (a_reduce, a_var,
 * a_max_dim, a_softmax) with its dims made non-negative; grads are
 * broadcast back through a keepdim-shaped view. */

#define MUL(a, b) of_s_bin(&s, OF_MUL, a, b)
#define DIV(a, b) of_s_bin(&s, OF_DIV, a, b)
#define SUB(a, b) of_s_bin(&s, OF_SUB, a, b)
#define MULS(a, v) of_s_bins(&s, OF_MUL, a, v)

/* A reduce or var node's record dims (ndims 0: all) as a bit mask of the
 * reduced dims of the input. */
static int64_t red_mask(const of_node *n) {
  const int32_t *dims;
  int32_t nd, ndim = n->in_meta[0].ndim;
  if (n->attr_op == OPK_VAR) {
    dims = OF_NODE_ATTRS(a_var, n)->dims;
    nd = OF_NODE_ATTRS(a_var, n)->ndims;
  } else {
    dims = OF_NODE_ATTRS(a_reduce, n)->dims;
    nd = OF_NODE_ATTRS(a_reduce, n)->ndims;
  }
  if (nd == 0) return ((int64_t)1 << ndim) - 1;
  int64_t m = 0;
  for (int32_t i = 0; i < nd; i++)
    if (dims[i] >= 0 && dims[i] < ndim) m |= (int64_t)1 << dims[i];
  return m;
}

static bool red_keepdim(const of_node *n) {
  return n->attr_op == OPK_VAR ? OF_NODE_ATTRS(a_var, n)->keepdim != 0
                               : OF_NODE_ATTRS(a_reduce, n)->keepdim != 0;
}

/* The body's dims for the node's record: non-negative (ndims 0: all). */
static int32_t red_dims(const of_tensor *x, const int32_t *dims, int32_t ndims, int32_t *out) {
  if (!dims) return 0;
  for (int32_t i = 0; i < ndims; i++) out[i] = dims[i] < 0 ? dims[i] + x->ndim : dims[i];
  return ndims;
}

/* g reshaped to the keepdim shape of the reduction (no-op when keepdim). */
static of_tensor *keep_shape(of_scope *sc, of_node *n, of_tensor *g) {
  if (sc->st != OF_OK || !g) return NULL;
  const of_meta *m = &n->in_meta[0];
  if (red_keepdim(n)) return g;
  int64_t shape[OF_MAX_DIMS], mask = red_mask(n);
  for (int32_t d = 0; d < m->ndim; d++) shape[d] = (mask >> d) & 1 ? 1 : m->shape[d];
  of_tensor *r = NULL;
  of_status st_ = of_reshape(g, shape, m->ndim, &r);
  return of_s_keep(sc, st_, r);
}

static of_tensor *expand_in(of_scope *sc, of_node *n, of_tensor *g) {
  if (sc->st != OF_OK || !g) return NULL;
  of_tensor *r = NULL;
  of_status st_ = of_expand(g, n->in_meta[0].shape, n->in_meta[0].ndim, &r);
  return of_s_keep(sc, st_, r);
}

static of_tensor *reduce_like(of_scope *sc, of_node *n, of_reduce_op op, of_tensor *x) {
  if (sc->st != OF_OK || !x) return NULL;
  int32_t dims[OF_MAX_DIMS], nd = 0;
  int64_t mask = red_mask(n);
  for (int32_t d = 0; d < n->in_meta[0].ndim; d++) if ((mask >> d) & 1) dims[nd++] = d;
  of_tensor *r = NULL;
  if (nd == 0) { of_tensor_retain(x); return of_s_keep(sc, OF_OK, x); }
  of_status st_ = of_reduce(op, x, dims, nd, 1, 0, -1, &r);
  return of_s_keep(sc, st_, r);
}

static of_tensor *s_where(of_scope *sc, of_tensor *c, of_tensor *a, of_tensor *b) {
  if (sc->st != OF_OK || !c || !a || !b) return NULL;
  of_tensor *r = NULL;
  of_status st_ = of_where(c, a, b, &r);
  return of_s_keep(sc, st_, r);
}

static of_tensor *s_zeros_like(of_scope *sc, of_tensor *x) {
  if (sc->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st_ = of_zeros(NULL, 0, x->dtype, OF_CPU, &r);
  return of_s_keep(sc, st_, r);
}

static of_tensor *s_cast(of_scope *sc, of_tensor *x, of_dtype dt) {
  if (sc->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st_ = of_to_dtype(x, dt, &r);
  return of_s_keep(sc, st_, r);
}

static int64_t reduced_count(of_node *n) {
  int64_t c = 1, mask = red_mask(n);
  for (int32_t d = 0; d < n->in_meta[0].ndim; d++)
    if ((mask >> d) & 1) c *= n->in_meta[0].shape[d];
  return c;
}

/* Ties share the grad evenly, as PyTorch does for amax/amin/norm(inf). */
static of_tensor *spread_to_extremes(of_scope *sc, of_node *n, of_tensor *ge, of_tensor *x,
                                     of_tensor *ye) {
  of_scope s = *sc;
  of_tensor *mask = s_cast(&s, of_s_bin(&s, OF_EQ, x, ye), x ? x->dtype : OF_FLOAT32);
  of_tensor *r = DIV(MUL(ge, mask), expand_in(&s, n, reduce_like(&s, n, OF_RED_SUM, mask)));
  *sc = s;
  return r;
}

static of_status reduce_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_scope s = {0};
  const a_reduce *a = OF_NODE_ATTRS(a_reduce, n);
  of_reduce_op op = (of_reduce_op)a->op;
  double p = a->p;
  of_tensor *ge = expand_in(&s, n, keep_shape(&s, n, g[0])), *r = NULL, *x, *y;
  switch (op) {
    case OF_RED_SUM: r = ge; break;
    case OF_RED_MEAN: r = MULS(ge, 1.0 / (double)reduced_count(n)); break;
    case OF_RED_PROD: {   /* d/dx_i = prod of the others; exact with zeros */
      x = of_s_saved(&s, n, 0);
      y = expand_in(&s, n, keep_shape(&s, n, of_s_saved(&s, n, 1)));
      of_tensor *zero = of_s_bins(&s, OF_EQ, x, 0);
      of_tensor *one = of_s_bins(&s, OF_ADD, s_zeros_like(&s, x), 1);
      of_tensor *x1 = s_where(&s, zero, one, x);
      of_tensor *others = expand_in(&s, n, reduce_like(&s, n, OF_RED_PROD, x1));
      of_tensor *nz = expand_in(&s, n, reduce_like(&s, n, OF_RED_SUM, s_cast(&s, zero, x ? x->dtype : OF_FLOAT32)));
      of_tensor *only = of_s_bins(&s, OF_EQ, nz, 1);
      of_tensor *at_zero = s_where(&s, only, others, s_zeros_like(&s, x));
      r = MUL(ge, s_where(&s, zero, at_zero, DIV(y, s_where(&s, zero, one, x))));
      break;
    }
    case OF_RED_AMAX:
    case OF_RED_AMIN:
      x = of_s_saved(&s, n, 0);
      y = expand_in(&s, n, keep_shape(&s, n, of_s_saved(&s, n, 1)));
      r = spread_to_extremes(&s, n, ge, x, y);
      break;
    case OF_RED_LOGSUMEXP:
      x = of_s_saved(&s, n, 0);
      y = expand_in(&s, n, keep_shape(&s, n, of_s_saved(&s, n, 1)));
      r = MUL(ge, of_s_unary(&s, OF_EXP, SUB(x, y)));
      break;
    case OF_RED_NORM:
      x = of_s_saved(&s, n, 0);
      y = expand_in(&s, n, keep_shape(&s, n, of_s_saved(&s, n, 1)));
      if (p == 0) {
        r = NULL;
      } else if (p == 1) {
        r = MUL(ge, of_s_unary(&s, OF_SIGN, x));
      } else if (isinf(p)) {
        r = MUL(spread_to_extremes(&s, n, ge, of_s_unary(&s, OF_ABS, x), y),
                of_s_unary(&s, OF_SIGN, x));
      } else {   /* x |x|^(p-2) / ||x||^(p-1), 0 where the norm is 0 */
        of_tensor *ax = of_s_unary(&s, OF_ABS, x);
        of_tensor *num = MUL(x, of_s_bins(&s, OF_POW, ax, p - 2));
        of_tensor *den = of_s_bins(&s, OF_POW, y, p - 1);
        of_tensor *zero = of_s_bins(&s, OF_EQ, y, 0);
        of_tensor *safe = s_where(&s, zero, of_s_bins(&s, OF_ADD, s_zeros_like(&s, y), 1), den);
        r = s_where(&s, zero, s_zeros_like(&s, x), MUL(ge, DIV(num, safe)));
      }
      break;
    default: break;
  }
  if (r && s.st == OF_OK && r->dtype != n->in_meta[0].dtype)
    r = s_cast(&s, r, n->in_meta[0].dtype);
  return of_s_end(&s, r, &gi[0]);
}
static const of_grad_def reduce_grad = {"ReduceBackward", reduce_backward};
static const of_grad_def reduce_grads[OF_NUM_REDUCE] = {
    {"SumBackward", reduce_backward}, {"MeanBackward", reduce_backward},
    {"ProdBackward", reduce_backward}, {"AmaxBackward", reduce_backward},
    {"AminBackward", reduce_backward}, {NULL, NULL}, {NULL, NULL},
    {"LogsumexpBackward", reduce_backward}, {"NormBackward", reduce_backward}};

static of_status reduce_body(of_reduce_op op, of_tensor *x, const int32_t *dims, int32_t ndims,
                         int32_t keepdim, double p, of_dtype dt, of_tensor **out) {
  OF_CHECK(reduce_compute(op, x, dims, ndims, keepdim, p, dt, out));
  const of_grad_def *gd = reduce_grads[op].name ? &reduce_grads[op] : NULL;
  if (!gd || !of_grad_needed(&x, 1) || !of_dtype_is_floating((*out)->dtype)) return OF_OK;
  of_node *n;
  of_status st = of_record(gd, &x, 1, out, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    return st;
  }
  a_reduce a;
  OF_ZERO(a);
  a.op = op;
  a.ndims = red_dims(x, dims, ndims, a.dims);
  a.keepdim = keepdim;
  a.p = p;
  a.dtype = dt;
  OF_NODE_KEEP(n, OPK_REDUCE, a);
  if (op != OF_RED_SUM && op != OF_RED_MEAN) {
    of_node_save(n, 0, x);
    of_node_save(n, 1, *out);
  }
  (void)reduce_grad;
  return OF_OK;
}

/* var: 2 (x - mean) / (N - correction); std: (x - mean) / ((N - c) std) */
static of_status var_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_scope s = {0};
  of_tensor *x = of_s_saved(&s, n, 0);
  of_tensor *mean = expand_in(&s, n, reduce_like(&s, n, OF_RED_MEAN, x));
  const a_var *a = OF_NODE_ATTRS(a_var, n);
  double denom = (double)reduced_count(n) - a->correction;
  of_tensor *ge = expand_in(&s, n, keep_shape(&s, n, g[0]));
  of_tensor *dev = SUB(x, mean), *r;
  if (a->is_std) {
    of_tensor *sd = expand_in(&s, n, keep_shape(&s, n, of_s_saved(&s, n, 1)));
    r = DIV(MUL(ge, dev), MULS(sd, denom));
  } else {
    r = MUL(ge, MULS(dev, 2.0 / denom));
  }
  return of_s_end(&s, r, &gi[0]);
}
static const of_grad_def var_grad = {"VarBackward", var_backward};
static const of_grad_def std_grad = {"StdBackward", var_backward};

static of_status var_body(of_tensor *x, const int32_t *dims, int32_t ndims, double correction,
                      int32_t keepdim, int32_t is_std, of_tensor **out) {
  OF_CHECK(var_compute(x, dims, ndims, correction, keepdim, is_std, out));
  if (!of_grad_needed(&x, 1)) return OF_OK;
  of_node *n;
  of_status st = of_record(is_std ? &std_grad : &var_grad, &x, 1, out, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    return st;
  }
  a_var a;
  OF_ZERO(a);
  a.ndims = red_dims(x, dims, ndims, a.dims);
  a.correction = correction;
  a.keepdim = keepdim;
  a.is_std = is_std;
  OF_NODE_KEEP(n, OPK_VAR, a);
  of_node_save(n, 0, x);
  if (is_std) of_node_save(n, 1, *out);
  return OF_OK;
}

/* max/min along a dim: the grad goes to the position of the chosen element */
static of_status max_dim_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_scope s = {0};
  const a_max_dim *a = OF_NODE_ATTRS(a_max_dim, n);
  int32_t dim = a->dim;
  of_tensor *idx = of_s_saved(&s, n, 0), *gv = g[0];
  if (!a->keepdim && s.st == OF_OK) {   /* put the reduced dim back */
    of_tensor *ui = NULL, *ug = NULL;
    s.st = of_unsqueeze(idx, dim, &ui);
    idx = of_s_keep(&s, s.st, ui);
    if (s.st == OF_OK) s.st = of_unsqueeze(gv, dim, &ug);
    gv = of_s_keep(&s, s.st, ug);
  }
  of_tensor *z = NULL, *r = NULL;
  if (s.st == OF_OK && of_dev(gv) != OF_CPU) {
    /* on a device: where(position == index, g, 0) with covered kernels */
    const of_meta *m = &n->in_meta[0];
    int64_t shape[OF_MAX_DIMS];
    for (int32_t d = 0; d < m->ndim; d++) shape[d] = d == dim ? m->shape[d] : 1;
    of_tensor *ar = NULL, *pos = NULL, *eq = NULL, *zero = NULL;
    s.st = of_arange((double)a->base, (double)(a->base + m->shape[dim]), 1, OF_INT64,
                     of_dev(gv), &ar);
    ar = of_s_keep(&s, s.st, ar);
    if (s.st == OF_OK) s.st = of_reshape(ar, shape, m->ndim, &pos);
    pos = of_s_keep(&s, s.st, pos);
    eq = of_s_bin(&s, OF_EQ, pos, idx);
    if (s.st == OF_OK) s.st = of_zeros(NULL, 0, gv->dtype, of_dev(gv), &zero);
    zero = of_s_keep(&s, s.st, zero);
    if (s.st == OF_OK) s.st = of_where(eq, gv, zero, &r);
    r = of_s_keep(&s, s.st, r);
    if (s.st == OF_OK && r->ndim == m->ndim) {   /* broadcast may leave it right already */
      bool same = true;
      for (int32_t d = 0; d < m->ndim; d++) same = same && r->shape[d] == m->shape[d];
      if (!same) s.st = of_fail(OF_ERR_SHAPE, "max backward: shape mismatch on device");
    }
    return of_s_end(&s, r, &gi[0]);
  }
  if (s.st == OF_OK) s.st = of_zeros(n->in_meta[0].shape, n->in_meta[0].ndim, gv->dtype, of_dev(gv), &z);
  z = of_s_keep(&s, s.st, z);
  if (s.st == OF_OK)
    s.st = of_scatter(z, dim, idx, gv, 0, 0, 0, a->base, NULL, &r);
  r = of_s_keep(&s, s.st, r);
  return of_s_end(&s, r, &gi[0]);
}
static const of_grad_def max_grad = {"MaxBackward", max_dim_backward};
static const of_grad_def min_grad = {"MinBackward", max_dim_backward};

static of_status max_dim_body(of_tensor *x, int32_t dim, int32_t keepdim, int32_t is_max,
                          int64_t index_base, of_tensor **values, of_tensor **indices) {
  OF_CHECK(max_dim_compute(x, dim, keepdim, is_max, index_base, values, indices));
  if (!of_grad_needed(&x, 1) || !of_dtype_is_floating((*values)->dtype)) return OF_OK;
  of_node *n;
  of_status st = of_record(is_max ? &max_grad : &min_grad, &x, 1, values, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*values);
    of_tensor_release(*indices);
    return st;
  }
  a_max_dim a;
  OF_ZERO(a);
  a.dim = dim < 0 ? dim + x->ndim : dim;
  a.keepdim = keepdim;
  a.is_max = is_max;
  a.base = index_base;
  OF_NODE_KEEP(n, OPK_MAX_DIM, a);
  of_node_save(n, 0, *indices);
  return OF_OK;
}

/* softmax: y (g - sum(g y)); log_softmax: g - exp(y) sum(g) */
static of_status softmax_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_scope s = {0};
  const a_softmax *a = OF_NODE_ATTRS(a_softmax, n);   /* flag: log_softmax */
  int32_t dim = a->dim;
  of_tensor *y = of_s_saved(&s, n, 0), *t = NULL, *r;
  /* Without create_graph (grad mode off in backward): the fused kernel. While
   * nn.Graph traces, its result makes the rule opaque, so a graph replays the
   * same kernel as eager mode and gives the same bits. */
  if (s.st == OF_OK && !of_is_grad_enabled() && of_rowk_dtype(y->dtype) &&
      of_dev(y) == OF_CPU && of_dev(g[0]) == OF_CPU) {
    int64_t outer, len, inner;
    split3(y, dim, &outer, &len, &inner);
    if (inner == 1) {   /* rows along the last dim: one fused pass (rowk.c) */
      of_tensor *gc = NULL, *gx = NULL;
      s.st = of_dense(g[0], y->dtype, &gc);
      if (s.st == OF_OK) s.st = of_tensor_new(y->shape, y->ndim, y->dtype, OF_CPU, &gx);
      if (s.st == OF_OK)
        of_rowk_softmax_backward(y->dtype, of_tensor_data(y), of_tensor_data(gc),
                                 of_tensor_data(gx), outer, len, a->flag);
      of_tensor_release(gc);
      return of_s_end(&s, of_s_keep(&s, s.st, gx), &gi[0]);
    }
  }
  of_tensor *in = a->flag ? g[0] : MUL(g[0], y);
  if (s.st == OF_OK) s.st = of_reduce(OF_RED_SUM, in, &dim, 1, 1, 0, -1, &t);
  t = of_s_keep(&s, s.st, t);
  if (a->flag) r = SUB(g[0], MUL(of_s_unary(&s, OF_EXP, y), t));
  else r = MUL(y, SUB(g[0], t));
  return of_s_end(&s, r, &gi[0]);
}
static const of_grad_def softmax_grad = {"SoftmaxBackward", softmax_backward};
static const of_grad_def log_softmax_grad = {"LogSoftmaxBackward", softmax_backward};

static of_status softmax_body(of_tensor *x, int32_t dim, int32_t log_, of_tensor **out) {
  OF_CHECK(softmax_compute(x, dim, log_, out));
  if (!of_grad_needed(&x, 1)) return OF_OK;
  of_node *n;
  of_status st = of_record(log_ ? &log_softmax_grad : &softmax_grad, &x, 1, out, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    return st;
  }
  a_softmax a = {dim < 0 ? dim + x->ndim : dim, log_};
  OF_NODE_KEEP(n, OPK_SOFTMAX, a);
  of_node_save(n, 0, *out);
  return OF_OK;
}

/* cumsum: reversed cumsum of g. cumprod: revcumsum(g * y) / x (inputs with
 * zeros take an exact, slower path: not supported yet -> clear error) */
static of_tensor *rev_cumsum(of_scope *sc, of_tensor *g, int32_t dim) {
  if (sc->st != OF_OK || !g) return NULL;
  of_tensor *f = NULL, *c = NULL, *r = NULL;
  sc->st = of_flip(g, &dim, 1, &f);
  f = of_s_keep(sc, sc->st, f);
  if (sc->st == OF_OK) sc->st = of_cumulative(f, dim, 0, &c);
  c = of_s_keep(sc, sc->st, c);
  if (sc->st == OF_OK) sc->st = of_flip(c, &dim, 1, &r);
  return of_s_keep(sc, sc->st, r);
}

static of_status cumulative_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_scope s = {0};
  const a_softmax *a = OF_NODE_ATTRS(a_softmax, n);   /* flag: cumprod */
  int32_t dim = a->dim;
  if (!a->flag) return of_s_end(&s, rev_cumsum(&s, g[0], dim), &gi[0]);
  of_tensor *x = of_s_saved(&s, n, 0), *y = of_s_saved(&s, n, 1), *z = NULL;
  if (s.st == OF_OK) {
    s.st = of_reduce(OF_RED_ANY, of_s_bins(&s, OF_EQ, x, 0), NULL, 0, 0, 0, -1, &z);
    z = of_s_keep(&s, s.st, z);
    if (s.st == OF_OK && of_dev(z) != OF_CPU) {   /* read the flag on the host */
      of_tensor *h = NULL;
      s.st = of_to_device(z, OF_CPU, 0, &h);
      z = of_s_keep(&s, s.st, h);
    }
    if (s.st == OF_OK && *(bool *)of_tensor_data(z))
      s.st = of_fail(OF_ERR_ARG, "cumprod: backward through an input containing zeros is not "
                     "supported yet (input %s)", OF_SHAPE_STR(x));
  }
  return of_s_end(&s, DIV(rev_cumsum(&s, MUL(g[0], y), dim), x), &gi[0]);
}
static const of_grad_def cumsum_grad = {"CumsumBackward", cumulative_backward};
static const of_grad_def cumprod_grad = {"CumprodBackward", cumulative_backward};

static of_status cumulative_body(of_tensor *x, int32_t dim, int32_t is_prod, of_tensor **out) {
  OF_CHECK(cumulative_compute(x, dim, is_prod, out));
  if (!of_grad_needed(&x, 1) || !of_dtype_is_floating((*out)->dtype)) return OF_OK;
  of_node *n;
  of_status st = of_record(is_prod ? &cumprod_grad : &cumsum_grad, &x, 1, out, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    return st;
  }
  a_softmax a = {dim < 0 ? dim + x->ndim : dim, is_prod};
  OF_NODE_KEEP(n, OPK_CUMULATIVE, a);
  if (is_prod) {
    of_node_save(n, 0, x);
    of_node_save(n, 1, *out);
  }
  return OF_OK;
}

/* ---- entry points (dispatch), run functions and table rows ---- */
static of_status pack_reduce(of_reduce_op op, of_tensor *x, const int32_t *dims, int32_t ndims,
                            int32_t keepdim, double p, of_dtype dt, of_tensor **out) {
  a_reduce a;
  OF_ZERO(a);
  a.op = op;
  a.ndims = ndims;
  of_copy_i32(a.dims, dims, ndims);
  a.keepdim = keepdim;
  a.p = p;
  a.dtype = dt;
  return OF_RECORD(OPK_REDUCE, a, &x, 1, out, 1);
}
of_status of_reduce(of_reduce_op op, of_tensor *x, const int32_t *dims, int32_t ndims,
                    int32_t keepdim, double p, of_dtype dt, of_tensor **out) {
  if (dt < 0 && (op == OF_RED_SUM || op == OF_RED_MEAN || op == OF_RED_PROD ||
                 op == OF_RED_LOGSUMEXP || op == OF_RED_NORM))
    AMP(OF_AMP_F32, of_reduce(op, A_[0], dims, ndims, keepdim, p, dt, out), x);
  OF_DISPATCH(reduce_body(op, x, dims, ndims, keepdim, p, dt, out),
            pack_reduce(op, x, dims, ndims, keepdim, p, dt, out));
}
static of_status run_reduce(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_reduce);
  OF_NEED(NDIM_OK(a->ndims), "ndims");
  OF_RUN1(of_reduce(a->op, ins[0], a->dims, a->ndims, a->keepdim, a->p, a->dtype, OF_R));
}
static void describe_reduce(const void *p, char *b, size_t c) {
  const a_reduce *a = p;
  of_catf(b, c, "%s dims=", of_reduce_name(a->op));
  if (a->ndims == 0) of_catf(b, c, "all");
  for (int32_t i = 0; i < (NDIM_OK(a->ndims) ? a->ndims : 0); i++)
    of_catf(b, c, "%s%d", i ? "," : "", a->dims[i]);
  if (a->keepdim) of_catf(b, c, " keepdim");
}

static of_status pack_max_dim(of_tensor *x, int32_t dim, int32_t keepdim, int32_t is_max,
                             int64_t base, of_tensor **values, of_tensor **indices) {
  a_max_dim a;
  OF_ZERO(a);
  a.dim = dim;
  a.keepdim = keepdim;
  a.is_max = is_max;
  a.base = base;
  of_tensor *outs[2] = {*values, *indices};
  of_status st = OF_RECORD(OPK_MAX_DIM, a, &x, 1, outs, 2);
  return st;
}
of_status of_max_dim(of_tensor *x, int32_t dim, int32_t keepdim, int32_t is_max,
                     int64_t index_base, of_tensor **values, of_tensor **indices) {
  OF_DISPATCH(max_dim_body(x, dim, keepdim, is_max, index_base, values, indices),
            pack_max_dim(x, dim, keepdim, is_max, index_base, values, indices));
}
static of_status run_max_dim(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_max_dim);
  of_tensor *v = NULL, *i = NULL;
  of_status st = of_max_dim(ins[0], a->dim, a->keepdim, a->is_max, a->base, &v, &i);
  if (st == OF_OK) { outs[0] = v; outs[1] = i; }
  return st;
}

static of_status pack_argmax(of_tensor *x, int32_t dim, int32_t keepdim, int32_t is_max,
                            int64_t base, of_tensor **out) {
  a_max_dim a;
  OF_ZERO(a);
  a.dim = dim;
  a.keepdim = keepdim;
  a.is_max = is_max;
  a.base = base;
  return OF_RECORD(OPK_ARGMAX, a, &x, 1, out, 1);
}
of_status of_argmax(of_tensor *x, int32_t dim, int32_t keepdim, int32_t is_max,
                    int64_t index_base, of_tensor **out) {
  OF_DISPATCH(argmax_body(x, dim, keepdim, is_max, index_base, out),
            pack_argmax(x, dim, keepdim, is_max, index_base, out));
}
static of_status run_argmax(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_max_dim);
  OF_RUN1(of_argmax(ins[0], a->dim, a->keepdim, a->is_max, a->base, OF_R));
}
static void describe_max_dim(const void *p, char *b, size_t c) {
  const a_max_dim *a = p;
  of_catf(b, c, "%s dim=%d%s", a->is_max ? "max" : "min", (int)a->dim, a->keepdim ? " keepdim" : "");
}

static of_status pack_var(of_tensor *x, const int32_t *dims, int32_t ndims, double corr,
                         int32_t keepdim, int32_t is_std, of_tensor **out) {
  a_var a;
  OF_ZERO(a);
  a.ndims = ndims;
  of_copy_i32(a.dims, dims, ndims);
  a.correction = corr;
  a.keepdim = keepdim;
  a.is_std = is_std;
  return OF_RECORD(OPK_VAR, a, &x, 1, out, 1);
}
of_status of_var(of_tensor *x, const int32_t *dims, int32_t ndims, double correction,
                 int32_t keepdim, int32_t is_std, of_tensor **out) {
  AMP(OF_AMP_F32, of_var(A_[0], dims, ndims, correction, keepdim, is_std, out), x);
  OF_DISPATCH(var_body(x, dims, ndims, correction, keepdim, is_std, out),
            pack_var(x, dims, ndims, correction, keepdim, is_std, out));
}
static of_status run_var(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_var);
  OF_NEED(NDIM_OK(a->ndims), "ndims");
  OF_RUN1(of_var(ins[0], a->dims, a->ndims, a->correction, a->keepdim, a->is_std, OF_R));
}

static of_status pack_softmax(int32_t op, of_tensor *x, int32_t dim, int32_t flag,
                             of_tensor **out) {
  a_softmax a = {dim, flag};
  return OF_RECORD(op, a, &x, 1, out, 1);
}
of_status of_softmax(of_tensor *x, int32_t dim, int32_t log, of_tensor **out) {
  AMP(OF_AMP_F32, of_softmax(A_[0], dim, log, out), x);
  OF_DISPATCH(softmax_body(x, dim, log, out), pack_softmax(OPK_SOFTMAX, x, dim, log, out));
}
static of_status run_softmax(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_softmax);
  OF_RUN1(of_softmax(ins[0], a->dim, a->flag, OF_R));
}
of_status of_cumulative(of_tensor *x, int32_t dim, int32_t is_prod, of_tensor **out) {
  AMP(OF_AMP_F32, of_cumulative(A_[0], dim, is_prod, out), x);
  OF_DISPATCH(cumulative_body(x, dim, is_prod, out),
            pack_softmax(OPK_CUMULATIVE, x, dim, is_prod, out));
}
static of_status run_cumulative(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_softmax);
  OF_RUN1(of_cumulative(ins[0], a->dim, a->flag, OF_R));
}
static void describe_softmax(const void *p, char *b, size_t c) {
  const a_softmax *a = p;
  of_catf(b, c, "dim=%d flag=%d", (int)a->dim, (int)a->flag);
}

/* a loaded reduce node's result: reduce_plan on the recorded input */
static of_status infer_reduce(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_reduce *a = p;
  reduce_plan_t r;
  (void)nin;
  OF_CHECK(reduce_plan(a->op, ins[0].shape, ins[0].ndim, ins[0].dtype, a->dims, a->ndims, a->keepdim,
                       a->p, a->dtype, &r));
  memcpy(outs[0].shape, r.shape, sizeof(int64_t) * (size_t)r.nd);
  outs[0].ndim = r.nd;
  outs[0].dtype = r.out_dt;
  return OF_OK;
}

OF_OP_IMPL_INFER(REDUCE, run_reduce, NULL, NULL, describe_reduce, infer_reduce);
/* a loaded max / min (values, indices) or argmax node's results, by the
 * bodies' max_dim_plan and argmax_plan */
static of_status infer_max_dim(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_max_dim *a = p;
  int32_t d;
  bool red[OF_MAX_DIMS];
  int64_t out_n;
  (void)nin;
  return max_dim_plan(a->is_max ? "max" : "min", &ins[0], a->dim, a->keepdim, a->is_max, &ins[0],
                      false, &d, red, &outs[0], &outs[1], &out_n);
}
static of_status infer_argmax(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_max_dim *a = p;
  (void)nin;
  return argmax_plan(a->is_max ? "argmax" : "argmin", &ins[0], a->dim, a->keepdim, a->is_max,
                     &outs[0]);
}
OF_OP_IMPL_INFER(MAX_DIM, run_max_dim, NULL, NULL, describe_max_dim, infer_max_dim);
OF_OP_IMPL_INFER(ARGMAX, run_argmax, NULL, NULL, describe_max_dim, infer_argmax);
/* a loaded var / std node's result, by var_compute's var_plan */
static of_status infer_var(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_var *a = p;
  bool red[OF_MAX_DIMS];
  int64_t out_n, red_n;
  (void)nin;
  return var_plan(a->is_std ? "std" : "var", &ins[0], a->dims, a->ndims, a->keepdim, red, &outs[0],
                  &out_n, &red_n);
}
OF_OP_IMPL_INFER(VAR, run_var, NULL, NULL, NULL, infer_var);
/* a loaded softmax / cumulative node's result: the input's shape, the plan's dtype */
static of_status infer_softmax_op(bool cum, const void *p, const of_meta *ins, of_meta *outs) {
  const a_softmax *a = p;
  int32_t d;
  of_dtype dt = ins[0].dtype;
  if (cum) OF_CHECK(cumulative_plan(a->flag, a->dim, ins[0].shape, ins[0].ndim, ins[0].dtype, &d, &dt));
  else OF_CHECK(softmax_plan(a->flag, a->dim, ins[0].shape, ins[0].ndim, ins[0].dtype, &d));
  outs[0].ndim = ins[0].ndim;
  memcpy(outs[0].shape, ins[0].shape, sizeof(int64_t) * (size_t)ins[0].ndim);
  outs[0].dtype = dt;
  return OF_OK;
}
static of_status infer_softmax(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)nin;
  return infer_softmax_op(false, p, ins, outs);
}
static of_status infer_cumulative(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)nin;
  return infer_softmax_op(true, p, ins, outs);
}

OF_OP_IMPL_INFER(SOFTMAX, run_softmax, NULL, NULL, describe_softmax, infer_softmax);
OF_OP_IMPL_INFER(CUMULATIVE, run_cumulative, NULL, NULL, describe_softmax, infer_cumulative);
