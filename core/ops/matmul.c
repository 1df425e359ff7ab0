/* matmul.c -- matmul, mm, bmm, addmm.
 *
 * One driver (gemm_run) computes  out[b] = beta * out[b] + alpha * A[b] @ B[b]
 * for a batch of matrices, where A[b] is (m, k), B[b] is (k, n) and out is a
 * new contiguous (batch..., m, n) tensor. Operands are described by a base
 * pointer, batch strides and row/column strides, so transposed views and
 * broadcast batch dims (stride 0) reach BLAS without a copy:
 *   - float32/float64: cblas_sgemm/cblas_dgemm. A matrix whose rows or whose
 *     columns are contiguous with a valid leading dimension goes as it is
 *     (NoTrans or Trans); anything else is made contiguous first.
 *   - float16/bfloat16: converted to float32, computed, converted back.
 *   - uint8/int8/int32/int64: an i-k-j loop with int64 accumulation
 *     (wrapping on overflow, as PyTorch).
 * Small matrices in a batch are spread over OpenMP threads; large ones are
 * computed one after the other, each split over the OpenMP threads along
 * the longer side of its result (OpenBLAS itself stays single-threaded:
 * its own thread pool spinning next to OpenMP's made every op around a
 * matmul slower on 2 cores).
 * Autograd: one backward rule for all four ops (ga = g @ b^T, gb = a^T @ g,
 * summed over broadcast batch dims), written with the public ops so that
 * double backward works. */
#include "../autograd.h"
#include "../device.h"
#include "../device/dnnl.h"
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include "family.h"

enum { MAX_BATCH = OF_MAX_DIMS };
/* OpenBLAS computes m*n*k <= 4 * 65536 on one thread: such gemms are run
 * side by side over the batch instead. */
#define SMALL_GEMM ((int64_t)262144)

/* One operand seen as a batch of (rows, cols) matrices. Strides in elements. */
typedef struct {
  of_tensor *t;            /* owns the memory (retained) */
  char *base;
  int64_t bstride[MAX_BATCH];   /* over the result's batch dims; 0 = broadcast */
  int64_t rows, cols, rs, cs;
} operand;

/* ---- shapes for messages ---- */
#define SHAPES(a, b) OF_SHAPE_STR(a), OF_SHAPE_STR(b)

/* Describe the last two dims of t (viewed with `nd` dims of `shape`/`strides`)
 * and its batch strides against the result's batch shape (nbatch dims). */
static void describe(operand *o, of_tensor *t, const int64_t *shape, const int64_t *strides,
                     int32_t nd, int32_t nbatch) {
  o->t = t;
  o->base = of_ptr(t);
  o->rows = shape[nd - 2];
  o->cols = shape[nd - 1];
  o->rs = strides[nd - 2];
  o->cs = strides[nd - 1];
  int32_t own = nd - 2;   /* this operand's batch dims, right-aligned */
  for (int32_t i = 0; i < nbatch; i++) {
    int32_t d = i - (nbatch - own);
    o->bstride[i] = d < 0 || shape[d] == 1 ? 0 : strides[d];
  }
}

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

/* BLAS layout of a (rows, cols) matrix: NoTrans with ld = row stride when
 * rows are contiguous, Trans with ld = column stride when columns are. */
static bool blas_layout(const operand *o, CBLAS_TRANSPOSE *tr, int64_t *ld) {
  int64_t r = o->rows, c = o->cols;
  if ((o->cs == 1 || c <= 1) && (r <= 1 || o->rs >= max1(c))) {
    *tr = CblasNoTrans;
    *ld = r <= 1 ? max1(c) : o->rs;
  } else if ((o->rs == 1 || r <= 1) && (c <= 1 || o->cs >= max1(r))) {
    *tr = CblasTrans;
    *ld = c <= 1 ? max1(r) : o->cs;
  } else {
    return false;
  }
  return *ld <= INT_MAX;
}

/* Batch index -> element offset of each operand. */
static void batch_offsets(int64_t b, const int64_t *bshape, int32_t nbatch,
                          const operand *A, const operand *B, int64_t *oa, int64_t *ob) {
  int64_t a = 0, bb = 0;
  for (int32_t d = nbatch - 1; d >= 0; d--) {
    int64_t i = b % bshape[d];
    b /= bshape[d];
    a += i * A->bstride[d];
    bb += i * B->bstride[d];
  }
  *oa = a;
  *ob = bb;
}

typedef struct {
  const operand *A, *B;
  char *out;                      /* contiguous (batch, m, n) */
  int64_t nbatch_total, m, n, k;
  const int64_t *bshape;
  int32_t nbatch;
  double alpha, beta;
  of_dtype dt;
  const void *crow;               /* addmm's c as one row [n] of dt (else NULL): each part
                                   * fills its own rows with beta * crow before its gemm */
} gemm_job;

/* ---- floating point: BLAS ---- */
/* Part `part` of `nparts` of batch b's product: the result split along its
 * longer side (OpenBLAS runs single-threaded, see threads.c; our OpenMP
 * threads each take a part). */
static void blas_part(const gemm_job *j, int64_t b, int part, int nparts) {
  int64_t oa, ob;
  batch_offsets(b, j->bshape, j->nbatch, j->A, j->B, &oa, &ob);
  CBLAS_TRANSPOSE ta = CblasNoTrans, tb = CblasNoTrans;
  int64_t lda = 1, ldb = 1;   /* checked by the caller: both layouts are valid */
  blas_layout(j->A, &ta, &lda);
  blas_layout(j->B, &tb, &ldb);
  int64_t m = j->m, n = j->n, ldc = n > 0 ? n : 1, co = b * j->m * j->n;
  if (nparts > 1) {
    int64_t len = n >= m ? n : m, lo = len * part / nparts, hi = len * (part + 1) / nparts;
    if (n >= m) {
      ob += tb == CblasNoTrans ? lo : lo * ldb;
      co += lo;
      n = hi - lo;
    } else {
      oa += ta == CblasNoTrans ? lo * lda : lo;
      co += lo * ldc;
      m = hi - lo;
    }
    if (m <= 0 || n <= 0) return;
  }
  int64_t c0 = co % ldc;   /* the first column of this part */
  if (j->dt == OF_FLOAT32) {
    const float *a = (const float *)j->A->base + oa, *bp = (const float *)j->B->base + ob;
    float beta = (float)j->beta, *c = (float *)j->out + co;
    if (j->crow) {   /* the bias rows, written here while they are about to be read */
      const float *r = (const float *)j->crow + c0;
      for (int64_t i = 0; i < m; i++)
        for (int64_t q = 0; q < n; q++) c[i * ldc + q] = beta * r[q];
      beta = 1;
    }
    cblas_sgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)j->k, (float)j->alpha, a, (int)lda,
                bp, (int)ldb, beta, c, (int)ldc);
  } else {
    const double *a = (const double *)j->A->base + oa, *bp = (const double *)j->B->base + ob;
    double beta = j->beta, *c = (double *)j->out + co;
    if (j->crow) {
      const double *r = (const double *)j->crow + c0;
      for (int64_t i = 0; i < m; i++)
        for (int64_t q = 0; q < n; q++) c[i * ldc + q] = beta * r[q];
      beta = 1;
    }
    cblas_dgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)j->k, j->alpha, a, (int)lda, bp,
                (int)ldb, beta, c, (int)ldc);
  }
}
static void blas_one(const gemm_job *j, int64_t b) { blas_part(j, b, 0, 1); }

/* ---- integers: i-k-j with int64 accumulation (unsigned: wraps, no UB) ---- */
#define INT_KERNEL(T)                                                              \
  static void int_rows_##T(const gemm_job *j, int64_t b, int64_t i0, int64_t i1,    \
                           uint64_t *acc) {                                        \
    int64_t oa, ob;                                                                \
    batch_offsets(b, j->bshape, j->nbatch, j->A, j->B, &oa, &ob);                  \
    const T *a = (const T *)j->A->base + oa, *bm = (const T *)j->B->base + ob;     \
    T *c = (T *)j->out + b * j->m * j->n;                                          \
    int64_t n = j->n, ars = j->A->rs, acs = j->A->cs, brs = j->B->rs;              \
    uint64_t alpha = (uint64_t)(int64_t)j->alpha, beta = (uint64_t)(int64_t)j->beta; \
    for (int64_t i = i0; i < i1; i++) {                                            \
      for (int64_t q = 0; q < n; q++) acc[q] = 0;                                  \
      for (int64_t p = 0; p < j->k; p++) {                                         \
        uint64_t s = (uint64_t)(int64_t)a[i * ars + p * acs];                      \
        const T *brow = bm + p * brs;                                              \
        for (int64_t q = 0; q < n; q++) acc[q] += s * (uint64_t)(int64_t)brow[q];  \
      }                                                                            \
      T *crow = c + i * n;                                                         \
      if (j->beta == 0)                                                            \
        for (int64_t q = 0; q < n; q++) crow[q] = (T)(alpha * acc[q]);             \
      else                                                                         \
        for (int64_t q = 0; q < n; q++)                                            \
          crow[q] = (T)(beta * (uint64_t)(int64_t)crow[q] + alpha * acc[q]);       \
    }                                                                              \
  }
INT_KERNEL(uint8_t)
INT_KERNEL(int8_t)
INT_KERNEL(int32_t)
INT_KERNEL(int64_t)
INT_KERNEL(int16_t)
INT_KERNEL(uint16_t)
INT_KERNEL(uint32_t)
INT_KERNEL(uint64_t)

static void int_rows(const gemm_job *j, int64_t b, int64_t i0, int64_t i1, uint64_t *acc) {
  switch (j->dt) {
    case OF_UINT8: int_rows_uint8_t(j, b, i0, i1, acc); break;
    case OF_INT8: int_rows_int8_t(j, b, i0, i1, acc); break;
    case OF_INT32: int_rows_int32_t(j, b, i0, i1, acc); break;
    case OF_INT16: int_rows_int16_t(j, b, i0, i1, acc); break;
    case OF_UINT16: int_rows_uint16_t(j, b, i0, i1, acc); break;
    case OF_UINT32: int_rows_uint32_t(j, b, i0, i1, acc); break;
    case OF_UINT64: int_rows_uint64_t(j, b, i0, i1, acc); break;
    default: int_rows_int64_t(j, b, i0, i1, acc); break;
  }
}

static of_status int_gemm(const char *op, const gemm_job *j) {
  int64_t rows = j->nbatch_total * j->m;
  int64_t work = rows * j->n * j->k;
  int nt = work >= OF_PARALLEL_GRAIN && rows > 1 ? of_threads() : 1;
  int failed = 0;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    uint64_t *acc = malloc(sizeof(uint64_t) * (size_t)max1(j->n));
    if (!acc) {
#pragma omp atomic write
      failed = 1;
    }
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; r++)
      if (acc) int_rows(j, r / j->m, r % j->m, r % j->m + 1, acc);
    free(acc);
  }
  if (failed) return of_fail(OF_ERR_OOM, "%s: out of memory for the accumulator", op);
  return OF_OK;
}

/* out *= beta (k == 0: no product to add). */
static void scale_out(const gemm_job *j, int64_t total) {
  double beta = j->beta;
  switch (j->dt) {
#define SCALE(E, T)                                                      \
    case E: {                                                            \
      T *p = (T *)j->out;                                                \
      for (int64_t i = 0; i < total; i++) p[i] = beta == 0 ? 0 : (T)(p[i] * beta); \
      break;                                                             \
    }
    SCALE(OF_UINT8, uint8_t) SCALE(OF_INT8, int8_t) SCALE(OF_INT32, int32_t)
    SCALE(OF_INT64, int64_t) SCALE(OF_FLOAT32, float) SCALE(OF_FLOAT64, double)
    SCALE(OF_INT16, int16_t) SCALE(OF_UINT16, uint16_t) SCALE(OF_UINT32, uint32_t)
    SCALE(OF_UINT64, uint64_t)
#undef SCALE
    default: break;
  }
}

static of_status gemm_exec(const char *op, gemm_job *j) {
  int64_t total = j->nbatch_total * j->m * j->n;
  if (total == 0) return OF_OK;
  if (j->k == 0) {
    scale_out(j, total);
    return OF_OK;
  }
  if (j->dt != OF_FLOAT32 && j->dt != OF_FLOAT64) return int_gemm(op, j);
  int64_t per = j->m * j->n * j->k;
  int nt = of_threads();
  if (j->nbatch_total > 1 && per <= SMALL_GEMM && nt > 1) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int64_t b = 0; b < j->nbatch_total; b++) blas_one(j, b);
  } else if (per > SMALL_GEMM && nt > 1 && (j->m > 1 || j->n > 1)) {
    /* each product split into nt parts (disjoint: no barrier between
     * products). A gemm's bits depend on how its result is split (OpenBLAS's
     * edge tiles sum differently), so the split is fixed by nt alone: the
     * threads that actually run (1 on a worker of the graph scheduler, where
     * OpenMP does not nest) take parts tid, tid + nth, ... */
#pragma omp parallel num_threads(nt)
    {
      int tid = omp_get_thread_num(), nth = omp_get_num_threads();
      for (int64_t b = 0; b < j->nbatch_total; b++)
        for (int part = tid; part < nt; part += nth) blas_part(j, b, part, nt);
    }
  } else {
    for (int64_t b = 0; b < j->nbatch_total; b++) blas_one(j, b);
  }
  return OF_OK;
}

/* Fold the batch dims of A into its rows when B is the same matrix for every
 * batch and A's batches follow each other at row stride: one large gemm
 * instead of many small ones ((b, m, k) @ (k, n) -> (b*m, k) @ (k, n)). */
static void fold_batches(gemm_job *j, operand *A, const int64_t *bshape) {
  if (j->nbatch == 0 || j->nbatch_total <= 1 || A->cs != 1) return;
  int64_t rs = A->rs;
  if (A->rows == 1)   /* one row: its stride is the innermost batch stride */
    for (int32_t d = j->nbatch - 1; d >= 0; d--)
      if (bshape[d] != 1) { rs = A->bstride[d]; break; }
  int64_t expect = rs * A->rows;
  for (int32_t d = j->nbatch - 1; d >= 0; d--) {
    if (j->B->bstride[d] != 0) return;
    if (bshape[d] != 1 && A->bstride[d] != expect) return;
    expect *= bshape[d];
  }
  operand f = *A;
  f.rows = A->rows * j->nbatch_total;
  f.rs = rs;
  CBLAS_TRANSPOSE tr;
  int64_t ld;
  if (!blas_layout(&f, &tr, &ld) || f.rows > INT_MAX) return;
  *A = f;
  j->m = f.rows;
  j->nbatch_total = 1;
  j->nbatch = 0;
}

/* ---- the driver ---- */
typedef struct {
  const char *op;
  of_tensor *a, *b;      /* user operands */
  bool a_vec, b_vec;     /* 1-D promoted: a to (1, k), b to (k, 1) */
  of_tensor *c;          /* addmm input (broadcast to the result) or NULL */
  double alpha, beta;
  of_tensor *into;       /* mm's output or NULL */
} mm_args;

static of_status check_dtypes(const mm_args *x) {
  of_tensor *a = x->a, *b = x->b;
  if (a->dtype != b->dtype)
    return of_fail(OF_ERR_DTYPE, "%s: expected both operands to have the same dtype, "
                   "got %s and %s (shapes %s and %s)", x->op, OF_DT(a), OF_DT(b), SHAPES(a, b));
  if (x->c && x->c->dtype != a->dtype)
    return of_fail(OF_ERR_DTYPE, "%s: expected input and operands to have the same dtype, "
                   "got %s and %s (shapes %s and %s)", x->op, OF_DT(x->c), OF_DT(a),
                   SHAPES(x->c, a));
  if (a->dtype == OF_BOOL || a->dtype < 0 || a->dtype >= OF_NUM_DTYPES)
    return of_fail(OF_ERR_DTYPE, "%s: not supported for dtype %s (shapes %s and %s)", x->op,
                   OF_DT(a), SHAPES(a, b));
  of_device dev;
  OF_CHECK(of_common_device(x->op, (of_tensor *[]){a, b, x->c, x->into}, 4, &dev));
  if (!of_dtype_is_floating(a->dtype) &&
      (x->alpha != floor(x->alpha) || (x->c && x->beta != floor(x->beta))))
    return of_fail(OF_ERR_ARG, "%s: alpha and beta must be integers for dtype %s "
                   "(got alpha %g, beta %g)", x->op, OF_DT(a), x->alpha, x->beta);
  return OF_OK;
}

/* Shape of t as a matrix operand: 1-D promoted (row vector for a, column for b). */
static void promoted(const of_tensor *t, bool vec, bool is_a, int64_t *shape, int64_t *strides,
                     int32_t *nd) {
  if (!vec) {
    *nd = t->ndim;
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    memcpy(strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
    return;
  }
  *nd = 2;
  if (is_a) {
    shape[0] = 1, strides[0] = t->shape[0] * t->strides[0];
    shape[1] = t->shape[0], strides[1] = t->strides[0];
  } else {
    shape[0] = t->shape[0], strides[0] = t->strides[0];
    shape[1] = 1, strides[1] = 1;
  }
}

/* One operand's dims and strides for oneDNN: its batch dims right-aligned
 * to the result's (missing or size 1: 1, broadcast), then (rows, cols).
 * Size-1 dims get an outer stride; false when a dim of size > 1 has a
 * stride < 1 or neither the rows nor the columns are contiguous. */
static bool mm_operand(const int64_t *sh, const int64_t *st, int32_t n, int32_t nbatch,
                       int64_t *dims, int64_t *strides) {
  int32_t own = n - 2, nd = nbatch + 2;
  int64_t outer = 1;
  for (int32_t i = 0; i < nd; i++) {
    int32_t j = i < nbatch ? i - (nbatch - own) : own + (i - nbatch);
    dims[i] = j < 0 ? 1 : sh[j];
    strides[i] = j < 0 ? 0 : st[j];
    if (dims[i] > 1) {
      if (strides[i] < 1) return false;
      if (strides[i] * dims[i] > outer) outer = strides[i] * dims[i];
    }
  }
  int64_t r = dims[nd - 2], c = dims[nd - 1];
  if (!(c <= 1 || strides[nd - 1] == 1) && !(r <= 1 || strides[nd - 2] == 1)) return false;
  for (int32_t i = 0; i < nd; i++)
    if (dims[i] <= 1) strides[i] = outer;
  return true;
}

/* bfloat16 operands through oneDNN's bfloat16 matmul (AVX512-BF16/AMX), no
 * float32 copies: *done false when it does not take the problem. */
static of_status bf16_dnnl(const int64_t *sa, const int64_t *ta, int32_t na, const int64_t *sb,
                           const int64_t *tb, int32_t nb, const int64_t *bshape, int32_t nbatch,
                           int64_t m, int64_t n, int64_t k, const int64_t *rshape, int32_t rnd,
                           of_tensor *a, of_tensor *b, of_tensor **out, bool *done) {
  *done = false;
  if (m < 1 || n < 1 || k < 1 || nbatch + 2 > OF_DNNL_MM_DIMS) return OF_OK;
  for (int32_t i = 0; i < nbatch; i++)
    if (bshape[i] < 1) return OF_OK;
  of_dnnl_mm_desc d;
  memset(&d, 0, sizeof d);
  d.nd = nbatch + 2;
  if (!mm_operand(sa, ta, na, nbatch, d.ad, d.as) || !mm_operand(sb, tb, nb, nbatch, d.bd, d.bs))
    return OF_OK;
  for (int32_t i = 0; i < nbatch; i++) d.cd[i] = bshape[i];
  d.cd[nbatch] = m, d.cd[nbatch + 1] = n;
  of_contiguous_strides(d.cd, d.nd, d.cs);
  of_tensor *res = NULL;
  OF_CHECK(of_tensor_new(rshape, rnd, OF_BFLOAT16, OF_CPU, &res));
  of_status st = of_dnnl_matmul_bf16(&d, of_ptr(a), of_ptr(b), of_ptr(res), done);
  if (st != OF_OK || !*done) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* The product's geometry from the operands' shapes alone (c: addmm's input
 * or NULL): the promoted shapes, m, k, n, the broadcast batch dims and the
 * result's shape, with the checks that decide them. run() computes with it;
 * a loaded graph's node is checked with it before anything runs (infer_mm). */
typedef struct {
  int64_t sa[OF_MAX_DIMS], sb[OF_MAX_DIMS], bshape[OF_MAX_DIMS], rshape[OF_MAX_DIMS];
  int32_t na, nb, nbatch, rnd;
  int64_t m, k, n;
} mm_geom;

static void promoted_shape(const of_meta *t, bool vec, bool is_a, int64_t *shape, int32_t *nd) {
  if (!vec) {
    *nd = t->ndim;
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  } else {
    *nd = 2;
    shape[is_a ? 0 : 1] = 1;
    shape[is_a ? 1 : 0] = t->shape[0];
  }
}

static of_status mm_geometry(const char *op, const of_meta *a, const of_meta *b, const of_meta *c,
                             bool a_vec, bool b_vec, mm_geom *g) {
  char s1[96], s2[96];
#define MSHAPES of_shape_str(a->shape, a->ndim, s1, 96), of_shape_str(b->shape, b->ndim, s2, 96)
  promoted_shape(a, a_vec, true, g->sa, &g->na);
  promoted_shape(b, b_vec, false, g->sb, &g->nb);
  if (g->na < 2 || g->nb < 2)
    return of_fail(OF_ERR_SHAPE, "%s: shapes %s and %s are not matrices", op, MSHAPES);
  int64_t m = g->sa[g->na - 2], k = g->sa[g->na - 1], n = g->sb[g->nb - 1];
  g->m = m, g->k = k, g->n = n;
  if (g->sb[g->nb - 2] != k)
    return of_fail(OF_ERR_SHAPE, "%s: shapes %s and %s do not match (%lld vs %lld)", op, MSHAPES,
                   (long long)k, (long long)g->sb[g->nb - 2]);
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return of_fail(OF_ERR_SHAPE, "%s: shapes %s and %s have a dim beyond BLAS's 2^31-1", op,
                   MSHAPES);
  /* batch dims broadcast */
  int32_t ba = g->na - 2, bb = g->nb - 2;
  g->nbatch = ba > bb ? ba : bb;
  for (int32_t i = 0; i < g->nbatch; i++) {
    int64_t da = i < g->nbatch - ba ? 1 : g->sa[i - (g->nbatch - ba)];
    int64_t db = i < g->nbatch - bb ? 1 : g->sb[i - (g->nbatch - bb)];
    if (da != db && da != 1 && db != 1)
      return of_fail(OF_ERR_SHAPE, "%s: batch dims of shapes %s and %s do not broadcast "
                     "(%lld vs %lld)", op, MSHAPES, (long long)da, (long long)db);
    g->bshape[i] = da == 1 ? db : da;
  }
  /* result shape: batch..., m, n without the promoted dims */
  g->rnd = 0;
  for (int32_t i = 0; i < g->nbatch; i++) g->rshape[g->rnd++] = g->bshape[i];
  if (!a_vec) g->rshape[g->rnd++] = m;
  if (!b_vec) g->rshape[g->rnd++] = n;
  /* addmm's input must broadcast to the product */
  if (c) {
    int64_t bs[OF_MAX_DIMS];
    int32_t bn;
    bool fits = of_broadcast_shapes(op, c->shape, c->ndim, g->rshape, g->rnd, bs, &bn) == OF_OK &&
                bn == g->rnd && of_shape_numel(bs, bn) == of_shape_numel(g->rshape, g->rnd);
    if (!fits) {
      char s[96], sc[96];
      return of_fail(OF_ERR_SHAPE, "%s: input of shape %s does not broadcast to the "
                     "product's shape %s (operands %s and %s)", op,
                     of_shape_str(c->shape, c->ndim, sc, 96),
                     of_shape_str(g->rshape, g->rnd, s, 96), MSHAPES);
    }
  }
#undef MSHAPES
  return OF_OK;
}

static void mm_meta(const of_tensor *t, of_meta *m) {
  m->ndim = t->ndim;
  m->dtype = t->dtype;
  memcpy(m->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
}

static of_status run(const mm_args *x, of_tensor **out) {
  OF_CHECK(check_dtypes(x));
  of_tensor *a = x->a, *b = x->b;
  of_meta ma, mb, mc;
  mm_meta(a, &ma);
  mm_meta(b, &mb);
  if (x->c) mm_meta(x->c, &mc);
  mm_geom g;
  OF_CHECK(mm_geometry(x->op, &ma, &mb, x->c ? &mc : NULL, x->a_vec, x->b_vec, &g));
  int64_t *sa = g.sa, *sb = g.sb, *bshape = g.bshape, *rshape = g.rshape;
  int64_t ta[OF_MAX_DIMS], tb[OF_MAX_DIMS];
  int32_t na = g.na, nb = g.nb, nbatch = g.nbatch, rnd = g.rnd;
  int64_t m = g.m, k = g.k, n = g.n;
  if (of_dev(a) != OF_CPU || of_dev(b) != OF_CPU)
    return of_device_matmul(x->op, a, b, x->c, x->beta, x->alpha, x->a_vec, x->b_vec, x->into,
                            out);
  if (a->dtype == OF_BFLOAT16 && !x->c && !x->into && of_dnnl_native_bf16()) {
    bool done = false;
    /* the operands' strides (the geometry has their shapes only) */
    promoted(a, x->a_vec, true, sa, ta, &na);
    promoted(b, x->b_vec, false, sb, tb, &nb);
    OF_CHECK(bf16_dnnl(sa, ta, na, sb, tb, nb, bshape, nbatch, m, n, k, rshape, rnd, a, b,
                       out, &done));
    if (done) return OF_OK;
  }
  of_tensor *dest = NULL;
  if (x->into) OF_CHECK(of_prepare_out(x->op, x->into, rshape, rnd, a->dtype, &dest));

  of_dtype dt = a->dtype;
  of_dtype compute = (dt == OF_FLOAT16 || dt == OF_BFLOAT16) ? OF_FLOAT32 : dt;
  bool blas = compute == OF_FLOAT32 || compute == OF_FLOAT64;
  of_status st = OF_OK;
  of_tensor *ca = NULL, *cb = NULL, *res = NULL, *half_res = NULL;
  operand A, B;

  /* operands in the compute dtype, in a layout the kernel takes */
  of_tensor *srcs[2] = {a, b}, **dst[2] = {&ca, &cb};
  for (int i = 0; i < 2; i++) {
    st = of_cast_data(srcs[i], compute, dst[i]);
    if (st != OF_OK) goto done;
  }
  for (int i = 0; i < 2; i++) {
    of_tensor *t = *dst[i];
    bool is_a = i == 0, vec = is_a ? x->a_vec : x->b_vec;
    int64_t *sh = is_a ? sa : sb, *strd = is_a ? ta : tb;
    int32_t nd = is_a ? na : nb;
    operand *o = is_a ? &A : &B;
    promoted(t, vec, is_a, sh, strd, &nd);
    describe(o, t, sh, strd, nd, nbatch);
    CBLAS_TRANSPOSE tr;
    int64_t ld;
    /* BLAS takes row- or column-major; the integer loop walks B's rows */
    bool ok = blas ? blas_layout(o, &tr, &ld) : (is_a || o->cs == 1 || o->cols <= 1);
    if (!ok) {
      of_tensor *c2;
      st = of_clone_data(t, &c2);   /* not contiguous, else its layout would do */
      if (st != OF_OK) goto done;
      of_tensor_release(t);
      *dst[i] = t = c2;
      promoted(t, vec, is_a, sh, strd, &nd);
      describe(o, t, sh, strd, nd, nbatch);
    }
  }

  /* the result (mm's `into` itself when BLAS can write there), holding
   * beta * c when there is a c */
  if (dest && dest->dtype == compute && of_tensor_is_contiguous(dest) &&
      dest->storage != ca->storage && dest->storage != cb->storage) {
    res = dest;
    of_tensor_retain(res);
  } else {
    st = of_tensor_new(rshape, rnd, compute, OF_CPU, &res);
    if (st != OF_OK) goto done;
  }
  /* c, when it is one contiguous row of the compute dtype (a bias) and there
   * is a product, goes in per gemm part (in parallel, each part's rows as it
   * starts); otherwise it is copied to the result first */
  of_tensor *c = x->c;
  bool row = blas && c && x->beta != 0 && k > 0 && c->dtype == compute &&
             of_shape_numel(c->shape, c->ndim) == n && (c->ndim == 0 || c->shape[c->ndim - 1] == n) &&
             of_tensor_is_contiguous(c);
  if (c && x->beta != 0 && !row) {
    st = of_copy_data(res, c);
    if (st != OF_OK) goto done;
  }
  gemm_job j = {.A = &A, .B = &B, .out = of_ptr(res), .m = m, .n = n, .k = k,
                .bshape = bshape, .nbatch = nbatch, .alpha = x->alpha,
                .beta = c ? x->beta : 0, .dt = compute, .crow = row ? of_ptr(c) : NULL};
  j.nbatch_total = of_shape_numel(bshape, nbatch);
  if (blas) fold_batches(&j, &A, bshape);
  st = gemm_exec(x->op, &j);
  if (st != OF_OK) goto done;
  if (compute != dt && res != dest) {
    st = of_cast_data(res, dt, &half_res);
    if (st != OF_OK) goto done;
    of_tensor_release(res);
    res = half_res;
  }
  if (dest && res != dest) {
    st = of_copy_data(dest, res);
    if (st != OF_OK) goto done;
    of_tensor_release(res);
    res = dest;
    of_tensor_retain(res);
  } else if (res == dest) {
    of_bump_version(res);
  }
done:
  of_tensor_release(ca);
  of_tensor_release(cb);
  of_tensor_release(dest);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* ---- autograd ----
 * Inputs are (a, b), or (c, a, b) for addmm: a's index is nin - 2, and a 1-D
 * operand shows in in_meta. Nodes keep the op's record: a_i1 for matmul, mm
 * and bmm (v: b_t), a_addmm for addmm (beta, alpha, b_t); b_t says b was a
 * transposed matrix (b_transposed).
 * Saved: slot 0 = a (needed for b's grad), slot 1 = b (for a's grad). */
/* The call is sequenced before r is read (as two arguments of one call it
 * would not be). */
#define S_CALL(s, call)            \
  do {                             \
    of_status st_ = (call);        \
    return of_s_keep(s, st_, r);   \
  } while (0)
static of_tensor *s_reshape(of_scope *s, of_tensor *x, const int64_t *shape, int32_t nd) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  S_CALL(s, of_reshape(x, shape, nd, &r));
}
static of_tensor *s_squeeze(of_scope *s, of_tensor *x, int32_t dim) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  S_CALL(s, of_squeeze(x, dim, &r));
}
static of_tensor *s_sum_to(of_scope *s, of_tensor *x, const of_meta *m) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  S_CALL(s, of_sum_to(x, m, &r));
}
static of_tensor *s_scale(of_scope *s, of_tensor *x, double v) {
  return v == 1 ? x : of_s_bins(s, OF_MUL, x, v);
}
/* A 1-D operand as a matrix: a (k) -> (1, k), b (k) -> (k, 1). */
static of_tensor *s_as_matrix(of_scope *s, of_tensor *x, bool vec, bool is_a) {
  if (!vec || !x) return x;
  int64_t shape[2] = {is_a ? 1 : x->shape[0], is_a ? x->shape[0] : 1};
  return s_reshape(s, x, shape, 2);
}

/* b a transposed (column-major) matrix, as linear's weight.t() */
static int32_t b_transposed(const of_tensor *b) {
  return b->ndim == 2 && b->shape[0] > 1 && b->shape[1] > 1 && b->strides[0] == 1 &&
         b->strides[1] == b->shape[0];
}

static of_status matmul_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  int32_t ia = n->nin - 2, ib = ia + 1;
  bool a_vec = n->in_meta[ia].ndim == 1, b_vec = n->in_meta[ib].ndim == 1;
  double alpha = 1, beta = 0;
  int32_t b_t;
  if (n->attr_op == OPK_ADDMM) {
    const a_addmm *r = OF_NODE_ATTRS(a_addmm, n);
    alpha = r->alpha;
    beta = r->beta;   /* read only with c (ia == 1) */
    b_t = r->b_t;
  } else {
    b_t = OF_NODE_ATTRS(a_i1, n)->v;
  }
  of_scope s = {0};
  /* the output grad with the dims that 1-D operands dropped put back */
  int64_t shape[OF_MAX_DIMS];
  int32_t nd = g[0]->ndim;
  memcpy(shape, g[0]->shape, sizeof(int64_t) * (size_t)nd);
  if (a_vec) {
    shape[nd] = nd > 0 && !b_vec ? shape[nd - 1] : 1;
    if (nd > 0 && !b_vec) shape[nd - 1] = 1;
    nd++;
  }
  if (b_vec) shape[nd++] = 1;
  of_tensor *gm = s_reshape(&s, g[0], shape, nd);
  of_tensor *ga = NULL, *gb = NULL, *gc = NULL;
  if (n->needs[ia]) {
    of_tensor *b = s_as_matrix(&s, of_s_saved(&s, n, 1), b_vec, false);
    ga = of_s_matmul(&s, gm, of_s_mT(&s, b));                 /* (..., m, k) */
    if (a_vec) ga = s_squeeze(&s, ga, -2);
    ga = s_sum_to(&s, s_scale(&s, ga, alpha), &n->in_meta[ia]);
  }
  if (n->needs[ib]) {
    of_tensor *a = s_as_matrix(&s, of_s_saved(&s, n, 0), a_vec, true);
    if (b_t && !a_vec && a && a->ndim == 2)
      /* b is a transposed matrix (linear's weight.t()): its grad as the
       * transpose of a contiguous product, so the transpose's own backward
       * hands the weight a contiguous grad (no copy into the leaf) */
      gb = of_s_mT(&s, of_s_matmul(&s, of_s_mT(&s, gm), a));
    else
      gb = of_s_matmul(&s, of_s_mT(&s, a), gm);                 /* (..., k, n) */
    if (b_vec) gb = s_squeeze(&s, gb, -1);
    gb = s_sum_to(&s, s_scale(&s, gb, alpha), &n->in_meta[ib]);
  }
  if (ia == 1 && n->needs[0] && beta != 0)   /* addmm's input; beta 0: zero grad */
    gc = s_sum_to(&s, s_scale(&s, g[0], beta), &n->in_meta[0]);
  if (s.st == OF_OK) {
    of_tensor *res[3] = {gc, ga, gb};
    for (int32_t k = 0; k < ia + 2; k++) {
      of_tensor *r = res[k + (ia == 0 ? 1 : 0)];
      if (r) of_tensor_retain(r);
      gi[k] = r;
    }
  }
  return of_s_end(&s, NULL, NULL);
}

static const of_grad_def matmul_grad = {"MatmulBackward", matmul_backward};
static const of_grad_def mm_grad = {"MmBackward", matmul_backward};
static const of_grad_def bmm_grad = {"BmmBackward", matmul_backward};
static const of_grad_def addmm_grad = {"AddmmBackward", matmul_backward};

/* Records the node for a result computed by run() (which records nothing). */
static of_status record(int32_t op, const of_grad_def *gd, const mm_args *x, of_tensor **out) {
  of_tensor *ins[3] = {x->c, x->a, x->b};
  of_tensor **in = x->c ? ins : ins + 1;
  int32_t nin = x->c ? 3 : 2, ia = nin - 2;
  if (!of_grad_needed(in, nin) || !of_dtype_is_floating((*out)->dtype)) return OF_OK;
  of_node *n;
  of_status st = of_record(gd, in, nin, out, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    return st;
  }
  if (op == OPK_ADDMM) {
    a_addmm a;
    OF_ZERO(a);
    a.beta = x->beta;
    a.alpha = x->alpha;
    a.b_t = b_transposed(x->b);
    OF_NODE_KEEP(n, OPK_ADDMM, a);
  } else {
    a_i1 a = {b_transposed(x->b), 0};
    OF_NODE_KEEP(n, op, a);
  }
  if (n->needs[ia + 1]) of_node_save(n, 0, x->a);
  if (n->needs[ia]) of_node_save(n, 1, x->b);
  return OF_OK;
}

static of_status run_recorded(int32_t op, const of_grad_def *gd, const mm_args *x,
                              of_tensor **out) {
  OF_CHECK(run(x, out));
  return record(op, gd, x, out);
}

/* ---- entry points ---- */
/* The operands' ranks each op takes (and bmm's batch): its body checks them,
 * and so does a loaded graph's node (infer_mm). */
static of_status mm_ranks(int32_t opk, const of_meta *a, const of_meta *b) {
  char s1[96], s2[96];
#define MSHAPES of_shape_str(a->shape, a->ndim, s1, 96), of_shape_str(b->shape, b->ndim, s2, 96)
  if (opk == OPK_MATMUL && (a->ndim == 0 || b->ndim == 0))
    return of_fail(OF_ERR_SHAPE, "matmul: both arguments need at least 1 dim, got shapes "
                   "%s and %s", MSHAPES);
  if ((opk == OPK_MM || opk == OPK_ADDMM) && (a->ndim != 2 || b->ndim != 2))
    return of_fail(OF_ERR_SHAPE, "%s: expected 2-D tensors, got shapes %s and %s",
                   opk == OPK_MM ? "mm" : "addmm", MSHAPES);
  if (opk == OPK_BMM && (a->ndim != 3 || b->ndim != 3))
    return of_fail(OF_ERR_SHAPE, "bmm: expected 3-D tensors, got shapes %s and %s", MSHAPES);
  if (opk == OPK_BMM && a->shape[0] != b->shape[0])
    return of_fail(OF_ERR_SHAPE, "bmm: batch sizes of shapes %s and %s do not match "
                   "(%lld vs %lld)", MSHAPES, (long long)a->shape[0], (long long)b->shape[0]);
#undef MSHAPES
  return OF_OK;
}
static of_status check_ranks(int32_t opk, const of_tensor *a, const of_tensor *b) {
  of_meta ma, mb;
  mm_meta(a, &ma);
  mm_meta(b, &mb);
  return mm_ranks(opk, &ma, &mb);
}

static of_status matmul_body(of_tensor *a, of_tensor *b, of_tensor **out) {
  OF_CHECK(check_ranks(OPK_MATMUL, a, b));
  mm_args x = {.op = "matmul", .a = a, .b = b, .a_vec = a->ndim == 1, .b_vec = b->ndim == 1,
               .alpha = 1};
  return run_recorded(OPK_MATMUL, &matmul_grad, &x, out);
}

static of_status mm_body(of_tensor *a, of_tensor *b, of_tensor *into, of_tensor **out) {
  OF_CHECK(check_ranks(OPK_MM, a, b));
  of_tensor *ins[2] = {a, b};
  if (into && (of_grad_needed(ins, 2) || (into->requires_grad && of_is_grad_enabled()))) {
    /* under autograd: compute out of place, then `into` takes the result's
     * data and history */
    OF_CHECK(of_check_inplace("mm", into));
    of_tensor *r;
    OF_CHECK(of_mm(a, b, NULL, &r));
    of_status st = of_assign_result(into, r);
    of_tensor_release(r);
    if (st != OF_OK) return st;
    of_tensor_retain(into);
    *out = into;
    return OF_OK;
  }
  mm_args x = {.op = "mm", .a = a, .b = b, .alpha = 1, .into = into};
  if (into) return run(&x, out);
  return run_recorded(OPK_MM, &mm_grad, &x, out);
}

static of_status bmm_body(of_tensor *a, of_tensor *b, of_tensor **out) {
  OF_CHECK(check_ranks(OPK_BMM, a, b));
  mm_args x = {.op = "bmm", .a = a, .b = b, .alpha = 1};
  return run_recorded(OPK_BMM, &bmm_grad, &x, out);
}

static of_status addmm_body(of_tensor *c, of_tensor *a, of_tensor *b, double beta, double alpha,
                        of_tensor **out) {
  OF_CHECK(check_ranks(OPK_ADDMM, a, b));
  mm_args x = {.op = "addmm", .a = a, .b = b, .c = c, .alpha = alpha, .beta = beta};
  return run_recorded(OPK_ADDMM, &addmm_grad, &x, out);
}

/* ---- entry points (dispatch), run functions and table rows ---- */
static of_status pack_mm(int32_t op, of_tensor *x, of_tensor *y, of_tensor *into,
                        of_tensor **out) {
  a_i1 a = {b_transposed(y), 0};   /* v: b_t, as the autograd node keeps it */
  of_tensor *ins[3] = {x, y, into};
  return OF_RECORD(op, a, ins, into ? 3 : 2, out, 1);
}
of_status of_matmul(of_tensor *a, of_tensor *b, of_tensor **out) {
  AMP(OF_AMP_LOW, of_matmul(A_[0], A_[1], out), a, b);
  OF_DISPATCH(matmul_body(a, b, out), pack_mm(OPK_MATMUL, a, b, NULL, out));
}
of_status of_mm(of_tensor *a, of_tensor *b, of_tensor *into, of_tensor **out) {
  if (!into) AMP(OF_AMP_LOW, of_mm(A_[0], A_[1], NULL, out), a, b);
  OF_DISPATCH(mm_body(a, b, into, out), pack_mm(OPK_MM, a, b, into, out));
}
of_status of_bmm(of_tensor *a, of_tensor *b, of_tensor **out) {
  AMP(OF_AMP_LOW, of_bmm(A_[0], A_[1], out), a, b);
  OF_DISPATCH(bmm_body(a, b, out), pack_mm(OPK_BMM, a, b, NULL, out));
}
static of_status run_mm(const of_oprec *n, of_tensor **ins, void **outs) {
  of_tensor *r_ = NULL;
  of_status st;
  if (n->op == OPK_MATMUL) st = of_matmul(ins[0], ins[1], &r_);
  else if (n->op == OPK_BMM) st = of_bmm(ins[0], ins[1], &r_);
  else st = of_mm(ins[0], ins[1], n->nin > 2 ? ins[2] : NULL, &r_);
  if (st == OF_OK) outs[0] = r_;
  return st;
}
static of_status pack_addmm(of_tensor *c, of_tensor *x, of_tensor *y, double beta, double alpha,
                           of_tensor **out) {
  a_addmm a;
  OF_ZERO(a);
  a.beta = beta;
  a.alpha = alpha;
  a.b_t = b_transposed(y);
  of_tensor *ins[3] = {c, x, y};
  return OF_RECORD(OPK_ADDMM, a, ins, 3, out, 1);
}
of_status of_addmm(of_tensor *c, of_tensor *a, of_tensor *b, double beta, double alpha,
                   of_tensor **out) {
  AMP(OF_AMP_LOW, of_addmm(A_[0], A_[1], A_[2], beta, alpha, out), c, a, b);
  OF_DISPATCH(addmm_body(c, a, b, beta, alpha, out), pack_addmm(c, a, b, beta, alpha, out));
}
static of_status run_addmm(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_addmm);
  OF_RUN1(of_addmm(ins[0], ins[1], ins[2], a->beta, a->alpha, OF_R));
}

/* A loaded node's result: the ranks its op takes, the dtypes check_dtypes
 * wants (one dtype, not bool), mm_geometry's shape; mm's output tensor keeps
 * its own dtype (of_prepare_out casts). */
static of_status infer_mm_op(int32_t opk, int32_t nin, const of_meta *ins, of_meta *outs) {
  const char *name = opk == OPK_MATMUL ? "matmul" : opk == OPK_MM ? "mm" : opk == OPK_BMM ? "bmm"
                                                                                          : "addmm";
  const of_meta *c = opk == OPK_ADDMM ? &ins[0] : NULL;
  const of_meta *a = &ins[c ? 1 : 0], *b = &ins[c ? 2 : 1];
  OF_CHECK(mm_ranks(opk, a, b));
  if (a->dtype != b->dtype || (c && c->dtype != a->dtype) || a->dtype == OF_BOOL)
    return of_fail(OF_ERR_DTYPE, "%s: operands of dtypes %s and %s%s%s (one dtype, not bool)",
                   name, of_dtype_name(a->dtype), of_dtype_name(b->dtype), c ? " and input " : "",
                   c ? of_dtype_name(c->dtype) : "");
  bool vec = opk == OPK_MATMUL;
  mm_geom g;
  OF_CHECK(mm_geometry(name, a, b, c, vec && a->ndim == 1, vec && b->ndim == 1, &g));
  outs[0].ndim = g.rnd;
  memcpy(outs[0].shape, g.rshape, sizeof(int64_t) * (size_t)g.rnd);
  outs[0].dtype = a->dtype;
  if (opk == OPK_MM && nin > 2 && ins[2].ndim >= 0) outs[0].dtype = ins[2].dtype;
  return OF_OK;
}
#define INFER_MM(K) \
  static of_status infer_##K(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) { \
    (void)p; \
    return infer_mm_op(OPK_##K, nin, ins, outs); \
  }
INFER_MM(MATMUL)
INFER_MM(MM)
INFER_MM(BMM)
INFER_MM(ADDMM)

OF_OP_IMPL_INFER(MATMUL, run_mm, NULL, NULL, NULL, infer_MATMUL);
OF_OP_IMPL_INFER(MM, run_mm, NULL, NULL, NULL, infer_MM);
OF_OP_IMPL_INFER(BMM, run_mm, NULL, NULL, NULL, infer_BMM);
OF_OP_IMPL_INFER(ADDMM, run_addmm, NULL, NULL, NULL, infer_ADDMM);
