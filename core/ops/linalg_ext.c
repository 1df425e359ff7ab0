/* linalg_ext.c -- kernels of flow.linalg: inv, det, slogdet, solve, cholesky,
 * svdvals.
 *
 * Inputs are float32 or float64 CPU tensors of shape (..., n, n) (solve's B:
 * (..., n, k) with the same batch dims; the Lua side broadcasts them first).
 * Each matrix is copied into a column-major float64 buffer (so LAPACK sees A
 * itself, as torch's LAPACK calls do, and pivots and error indices agree with
 * torch), factored with OpenBLAS's LAPACK (dgetrf, dgetri, dgetrs, dpotrf,
 * dgesdd),
 * and the result is written back row-major in the input's dtype. float32 is
 * computed in float64.
 * Errors name the op and, for batches, the batch element (as torch).
 * Autograd: each op records one backward rule, written with public ops
 * (these five included), so double backward works:
 *   inv:      gA = -Y^T g Y^T                     (Y = A^-1)
 *   det:      gA = g det(A) A^-T
 *   slogdet:  gA = g_logabsdet A^-T                (sign: no grad)
 *   solve:    gB = A^-T g, gA = -gB X^T            (X = A^-1 B)
 *   cholesky: torch's rule: P = tril(L^T gL), P = (P + tril(P, -1)^T) / 2,
 *             gA = L^-T P L^-1                     (upper: L = U^T, gL = gU^T)
 *   svdvals:  gA = U diag(gS) V^T (U, V from the forward's SVD, saved without
 *             history: its double backward is refused with an error) */
#include "../autograd.h"
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* LAPACK (Fortran calling convention: everything by pointer, column-major;
 * the trailing size_t is the hidden length of a CHARACTER argument). */
void dgetrf_(const int *m, const int *n, double *a, const int *lda, int *ipiv, int *info);
void dgetri_(const int *n, double *a, const int *lda, const int *ipiv, double *work,
             const int *lwork, int *info);
void dgetrs_(const char *trans, const int *n, const int *nrhs, const double *a, const int *lda,
             const int *ipiv, double *b, const int *ldb, int *info, size_t trans_len);
void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info,
             size_t uplo_len);
void dgesdd_(const char *jobz, const int *m, const int *n, double *a, const int *lda, double *s,
             double *u, const int *ldu, double *vt, const int *ldvt, double *work,
             const int *lwork, int *iwork, int *info, size_t jobz_len);

/* A batch of (rows, cols) matrices: a dense float64 copy of the input. */
typedef struct {
  of_tensor *dense;        /* contiguous float64, no history (owned) */
  const double *data;
  int64_t batch, rows, cols;
} mats;

static of_status check_input(const char *op, const char *name, of_tensor *t) {
  if (of_tracing())
    return of_fail(OF_ERR_STATE, "linalg.%s: not supported while tracing an nn.Graph", op);
  if (t->storage->device != OF_CPU)
    return of_fail(OF_ERR_DEVICE, "linalg.%s: not implemented on cuda (%s of shape %s is a "
                   "CUDA tensor; the kernels use the CPU's LAPACK: move it with :cpu())", op, name,
                   OF_SHAPE_STR(t));
  if (t->dtype != OF_FLOAT32 && t->dtype != OF_FLOAT64)
    return of_fail(OF_ERR_DTYPE, "linalg.%s: expected a float32 or float64 tensor as %s, got "
                   "%s (shape %s)", op, name, OF_DT(t), OF_SHAPE_STR(t));
  if (t->ndim < 2)
    return of_fail(OF_ERR_SHAPE, "linalg.%s: %s must have at least 2 dims, got shape %s", op,
                   name, OF_SHAPE_STR(t));
  if (t->shape[t->ndim - 1] > INT_MAX || t->shape[t->ndim - 2] > INT_MAX)
    return of_fail(OF_ERR_SHAPE, "linalg.%s: %s of shape %s is too large for LAPACK", op, name,
                   OF_SHAPE_STR(t));
  return OF_OK;
}

static of_status check_square(const char *op, of_tensor *a) {
  OF_CHECK(check_input(op, "A", a));
  int64_t n = a->shape[a->ndim - 1], m = a->shape[a->ndim - 2];
  if (n != m)
    return of_fail(OF_ERR_SHAPE, "linalg.%s: A must be batches of square matrices, but they "
                   "are %lld by %lld matrices (shape %s)", op, (long long)m, (long long)n,
                   OF_SHAPE_STR(a));
  return OF_OK;
}

static of_status load(of_tensor *t, mats *m) {
  OF_CHECK(of_dense(t, OF_FLOAT64, &m->dense));
  m->data = (const double *)of_ptr(m->dense);
  m->rows = t->shape[t->ndim - 2];
  m->cols = t->shape[t->ndim - 1];
  m->batch = of_shape_numel(t->shape, t->ndim - 2);
  return OF_OK;
}

/* row-major (rows, cols) src -> column-major dst */
static void to_colmajor(const double *src, int64_t rows, int64_t cols, double *dst) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) dst[j * rows + i] = src[i * cols + j];
}

/* Element k of a new contiguous float32/float64 result. */
static void put(of_tensor *out, int64_t k, double v) {
  if (out->dtype == OF_FLOAT32)
    ((float *)of_ptr(out))[k] = (float)v;
  else
    ((double *)of_ptr(out))[k] = v;
}

/* "(Batch element 3): " for batches (as torch), "" for one matrix. */
static const char *batch_prefix(const of_tensor *t, int64_t b, char *buf, size_t cap) {
  if (t->ndim <= 2) return "";
  snprintf(buf, cap, "(Batch element %lld): ", (long long)b);
  return buf;
}

/* Scratch: an n*n column-major matrix, n pivots and a work array. */
typedef struct {
  double *a, *work;
  int *ipiv;
  int lwork;
} scratch;

static of_status scratch_new(const char *op, int64_t n, int64_t extra, scratch *s) {
  s->lwork = (int)(n > 0 ? n * 64 : 1);
  s->a = malloc(sizeof(double) * (size_t)(n * n + extra + 1));
  s->work = malloc(sizeof(double) * (size_t)s->lwork);
  s->ipiv = malloc(sizeof(int) * (size_t)(n + 1));
  if (!s->a || !s->work || !s->ipiv) {
    free(s->a);
    free(s->work);
    free(s->ipiv);
    return of_fail(OF_ERR_OOM, "linalg.%s: out of memory for %lld x %lld scratch", op,
                   (long long)n, (long long)n);
  }
  return OF_OK;
}

static void scratch_free(scratch *s) {
  free(s->a);
  free(s->work);
  free(s->ipiv);
}

/* ---- inv: A (..., n, n) -> A^-1 (..., n, n) ---- */
static of_status inv_kernel(of_tensor *a, of_tensor **out) {
  OF_CHECK(check_square("inv", a));
  mats m;
  OF_CHECK(load(a, &m));
  int64_t n = m.rows;
  scratch s;
  of_tensor *res = NULL;
  of_status st = scratch_new("inv", n, 0, &s);
  if (st != OF_OK) goto done_m;
  st = of_tensor_new(a->shape, a->ndim, a->dtype, OF_CPU, &res);
  if (st != OF_OK) goto done;
  int ni = (int)n, info = 0;
  for (int64_t b = 0; b < m.batch && n > 0; b++) {
    to_colmajor(m.data + b * n * n, n, n, s.a);
    dgetrf_(&ni, &ni, s.a, &ni, s.ipiv, &info);
    if (info == 0) dgetri_(&ni, s.a, &ni, s.ipiv, s.work, &s.lwork, &info);
    if (info != 0) {
      char buf[48];
      st = of_fail(OF_ERR_ARG, info > 0 ? "linalg.inv: %sThe diagonal element %d is zero, the "
                   "inversion could not be completed because the input matrix is singular."
                   : "linalg.inv: %sLAPACK failed (info %d)",
                   batch_prefix(a, b, buf, sizeof buf), info);
      goto done;
    }
    /* column-major A^-1 -> row-major */
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < n; j++) put(res, b * n * n + i * n + j, s.a[j * n + i]);
  }
done:
  scratch_free(&s);
done_m:
  of_tensor_release(m.dense);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* ---- det and slogdet through one LU per matrix ---- */
/* sign and log|det| of one matrix (sign 0, logabs -inf when singular); *det
 * the determinant itself (the product, which can overflow where log does
 * not). */
static void lu_det(scratch *s, int64_t n, double *sign, double *logabs, double *det) {
  int ni = (int)n, info = 0;
  double sg = 1, la = 0, d = 1;
  if (n > 0) dgetrf_(&ni, &ni, s->a, &ni, s->ipiv, &info);
  for (int64_t i = 0; i < n; i++) {
    double u = s->a[i * n + i];
    if (s->ipiv[i] != i + 1) sg = -sg;
    d *= u;
    if (u < 0) sg = -sg;
    la += log(fabs(u));
  }
  for (int64_t i = 0; i < n; i++) {
    if (s->ipiv[i] != i + 1) d = -d;
  }
  if (info > 0) {   /* an exact zero pivot */
    sg = 0;
    la = -INFINITY;
    d = 0;
  }
  *sign = sg;
  *logabs = la;
  *det = d;
}

/* det: A (..., n, n) -> (...); slogdet: A -> sign (...), logabsdet (...). */
static of_status dets(const char *op, of_tensor *a, of_tensor **det, of_tensor **sign,
                      of_tensor **logabs) {
  OF_CHECK(check_square(op, a));
  mats m;
  OF_CHECK(load(a, &m));
  int64_t n = m.rows;
  scratch s;
  of_tensor *r[3] = {NULL, NULL, NULL};
  of_status st = scratch_new(op, n, 0, &s);
  if (st != OF_OK) goto done_m;
  for (int32_t k = 0; k < 3 && st == OF_OK; k++)
    st = of_tensor_new(a->shape, a->ndim - 2, a->dtype, OF_CPU, &r[k]);
  for (int64_t b = 0; b < m.batch && st == OF_OK; b++) {
    double sg, la, d;
    to_colmajor(m.data + b * n * n, n, n, s.a);
    lu_det(&s, n, &sg, &la, &d);
    put(r[0], b, d);
    put(r[1], b, sg);
    put(r[2], b, la);
  }
  scratch_free(&s);
done_m:
  of_tensor_release(m.dense);
  if (st != OF_OK) {
    for (int32_t k = 0; k < 3; k++) of_tensor_release(r[k]);
    return st;
  }
  of_tensor **dst[3] = {det, sign, logabs};
  for (int32_t k = 0; k < 3; k++) {
    if (dst[k])
      *dst[k] = r[k];
    else
      of_tensor_release(r[k]);
  }
  return OF_OK;
}


/* ---- solve: A (..., n, n), B (..., n, k) with equal batch dims -> X ---- */
static of_status solve_kernel(of_tensor *a, of_tensor *bm, of_tensor **out) {
  OF_CHECK(check_square("solve", a));
  OF_CHECK(check_input("solve", "B", bm));
  int64_t n = a->shape[a->ndim - 1], k = bm->shape[bm->ndim - 1];
  bool same = a->ndim == bm->ndim && bm->shape[bm->ndim - 2] == n;
  for (int32_t d = 0; same && d < a->ndim - 2; d++) same = a->shape[d] == bm->shape[d];
  if (!same)
    return of_fail(OF_ERR_SHAPE, "linalg.solve: incompatible shapes of A and B for the "
                   "equation AX = B (%s and %s)", OF_SHAPE_STR(a), OF_SHAPE_STR(bm));
  if (a->dtype != bm->dtype)
    return of_fail(OF_ERR_DTYPE, "linalg.solve: A and B must have the same dtype, got %s and "
                   "%s", OF_DT(a), OF_DT(bm));
  mats m, mb = {0};
  OF_CHECK(load(a, &m));
  of_status st = load(bm, &mb);
  of_tensor *res = NULL;
  scratch s;
  if (st != OF_OK) goto done_m;
  st = scratch_new("solve", n, n * k, &s);
  if (st != OF_OK) goto done_m;
  st = of_tensor_new(bm->shape, bm->ndim, bm->dtype, OF_CPU, &res);
  int ni = (int)n, ki = (int)k, info = 0;
  double *x = s.a + n * n;   /* (n, k) column-major */
  for (int64_t b = 0; b < m.batch && st == OF_OK && n > 0 && k > 0; b++) {
    to_colmajor(m.data + b * n * n, n, n, s.a);
    to_colmajor(mb.data + b * n * k, n, k, x);
    dgetrf_(&ni, &ni, s.a, &ni, s.ipiv, &info);
    if (info == 0) dgetrs_("N", &ni, &ki, s.a, &ni, s.ipiv, x, &ni, &info, 1);
    if (info != 0) {
      char buf[48];
      st = of_fail(OF_ERR_ARG, info > 0 ? "linalg.solve: %sThe solver failed because the input "
                   "matrix is singular (the diagonal element %d of its LU factor is zero)."
                   : "linalg.solve: %sLAPACK failed (info %d)",
                   batch_prefix(a, b, buf, sizeof buf), info);
      break;
    }
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < k; j++) put(res, b * n * k + i * k + j, x[j * n + i]);
  }
  scratch_free(&s);
done_m:
  of_tensor_release(m.dense);
  of_tensor_release(mb.dense);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* ---- cholesky: A (..., n, n) symmetric positive-definite -> L (lower) with
 * A = L L^T, or U = L^T (upper != 0). Only A's lower triangle is read. ---- */
static of_status cholesky_kernel(of_tensor *a, int32_t upper, of_tensor **out) {
  OF_CHECK(check_square("cholesky", a));
  mats m;
  OF_CHECK(load(a, &m));
  int64_t n = m.rows;
  scratch s;
  of_tensor *res = NULL;
  of_status st = scratch_new("cholesky", n, 0, &s);
  if (st != OF_OK) goto done_m;
  st = of_tensor_new(a->shape, a->ndim, a->dtype, OF_CPU, &res);
  int ni = (int)n, info = 0;
  for (int64_t b = 0; b < m.batch && st == OF_OK && n > 0; b++) {
    to_colmajor(m.data + b * n * n, n, n, s.a);
    dpotrf_("L", &ni, s.a, &ni, &info, 1);
    if (info != 0) {
      char buf[48];
      st = of_fail(OF_ERR_ARG, info > 0 ? "linalg.cholesky: %sThe factorization could not be "
                   "completed because the input is not positive-definite (the leading minor "
                   "of order %d is not positive-definite)."
                   : "linalg.cholesky: %sLAPACK failed (info %d)",
                   batch_prefix(a, b, buf, sizeof buf), info);
      break;
    }
    /* L[i][j] = s.a[j * n + i] for j <= i */
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < n; j++) {
        double v = upper ? (i <= j ? s.a[i * n + j] : 0) : (j <= i ? s.a[j * n + i] : 0);
        put(res, b * n * n + i * n + j, v);
      }
  }
  scratch_free(&s);
done_m:
  of_tensor_release(m.dense);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* ---- svdvals: A (..., m, n) -> S (..., k), k = min(m, n), descending; with
 * u (..., m, k) and vh (..., k, n) of the thin SVD when asked (for the
 * backward rule) ---- */
static of_status svd_kernel(of_tensor *a, of_tensor **sv, of_tensor **u, of_tensor **vh) {
  OF_CHECK(check_input("svdvals", "A", a));
  mats m;
  OF_CHECK(load(a, &m));
  int64_t r = m.rows, c = m.cols, k = r < c ? r : c, nb = a->ndim - 2;
  int64_t shape[OF_MAX_DIMS];
  memcpy(shape, a->shape, sizeof(int64_t) * (size_t)nb);
  of_tensor *res[3] = {NULL, NULL, NULL};
  double *buf = NULL, *work = NULL;
  int *iwork = NULL;
  shape[nb] = k;
  of_status st = of_tensor_new(shape, nb + 1, a->dtype, OF_CPU, &res[0]);
  if (u && st == OF_OK) {
    shape[nb] = r, shape[nb + 1] = k;
    st = of_tensor_new(shape, nb + 2, a->dtype, OF_CPU, &res[1]);
    shape[nb] = k, shape[nb + 1] = c;
    if (st == OF_OK) st = of_tensor_new(shape, nb + 2, a->dtype, OF_CPU, &res[2]);
  }
  int mi = (int)r, ni = (int)c, ki = (int)(k > 0 ? k : 1), info = 0, lwork = -1;
  int ldu = mi > 0 ? mi : 1, lda = ldu;
  double q = 0;
  if (st == OF_OK && k > 0) {
    buf = malloc(sizeof(double) * (size_t)(r * c + k + r * k + k * c));
    iwork = malloc(sizeof(int) * (size_t)(8 * k));
    if (buf && iwork) {   /* workspace query */
      double *sb = buf + r * c, *ub = sb + k, *vb = ub + r * k;
      dgesdd_("S", &mi, &ni, buf, &lda, sb, ub, &ldu, vb, &ki, &q, &lwork, iwork, &info, 1);
      lwork = (int)q + 1;
      work = malloc(sizeof(double) * (size_t)lwork);
    }
    if (!buf || !work || !iwork)
      st = of_fail(OF_ERR_OOM, "linalg.svdvals: out of memory for the SVD of %s",
                   OF_SHAPE_STR(a));
  }
  for (int64_t b = 0; b < m.batch && st == OF_OK && k > 0; b++) {
    double *ab = buf, *sb = buf + r * c, *ub = sb + k, *vb = ub + r * k;
    to_colmajor(m.data + b * r * c, r, c, ab);
    dgesdd_("S", &mi, &ni, ab, &lda, sb, ub, &ldu, vb, &ki, work, &lwork, iwork, &info, 1);
    if (info != 0) {
      char pre[48];
      st = of_fail(OF_ERR_ARG, "linalg.svdvals: %sthe SVD did not converge (LAPACK info %d)",
                   batch_prefix(a, b, pre, sizeof pre), info);
      break;
    }
    for (int64_t i = 0; i < k; i++) put(res[0], b * k + i, sb[i]);
    if (!u) continue;
    for (int64_t i = 0; i < r; i++)   /* u: (r, k), column-major ld r */
      for (int64_t j = 0; j < k; j++) put(res[1], b * r * k + i * k + j, ub[j * r + i]);
    for (int64_t i = 0; i < k; i++)   /* vt: (k, c), column-major ld k */
      for (int64_t j = 0; j < c; j++) put(res[2], b * k * c + i * c + j, vb[j * k + i]);
  }
  free(buf);
  free(work);
  free(iwork);
  of_tensor_release(m.dense);
  if (st != OF_OK) {
    for (int32_t j = 0; j < 3; j++) of_tensor_release(res[j]);
    return st;
  }
  *sv = res[0];
  if (u) {
    *u = res[1];
    *vh = res[2];
  }
  return OF_OK;
}

/* ---- autograd ---- */
/* The call is sequenced before r is read. */
#define S_CALL(s, call)            \
  do {                             \
    of_status st_ = (call);        \
    return of_s_keep(s, st_, r);   \
  } while (0)
static of_tensor *s_unsqueeze(of_scope *s, of_tensor *x) {   /* (...) -> (..., 1) */
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  S_CALL(s, of_unsqueeze(x, x->ndim, &r));
}
static of_tensor *s_tril(of_scope *s, of_tensor *x, int64_t k) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  S_CALL(s, of_tri(x, k, 0, &r));
}
static of_tensor *s_inv(of_scope *s, of_tensor *x) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  S_CALL(s, of_linalg_inv(x, &r));
}
static of_tensor *s_solve(of_scope *s, of_tensor *a, of_tensor *b) {
  if (s->st != OF_OK || !a || !b) return NULL;
  of_tensor *r = NULL;
  S_CALL(s, of_linalg_solve(a, b, &r));
}
/* g (...) times A^-T (..., n, n) */
static of_tensor *s_scaled_inv_t(of_scope *s, of_tensor *g, of_tensor *a) {
  of_tensor *g2 = s_unsqueeze(s, s_unsqueeze(s, g));
  return of_s_bin(s, OF_MUL, g2, of_s_mT(s, s_inv(s, a)));
}

static of_status inv_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0] || !n->needs[0]) return OF_OK;
  of_scope s = {0};
  of_tensor *yt = of_s_mT(&s, of_s_saved(&s, n, 0));
  return of_s_end(&s, of_s_unary(&s, OF_NEG, of_s_matmul(&s, of_s_matmul(&s, yt, g[0]), yt)), &gi[0]);
}

static of_status det_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0] || !n->needs[0]) return OF_OK;
  of_scope s = {0};
  of_tensor *gd = of_s_bin(&s, OF_MUL, g[0], of_s_saved(&s, n, 1));
  return of_s_end(&s, s_scaled_inv_t(&s, gd, of_s_saved(&s, n, 0)), &gi[0]);
}

static of_status slogdet_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[1] || !n->needs[0]) return OF_OK;   /* the sign has no grad */
  of_scope s = {0};
  return of_s_end(&s, s_scaled_inv_t(&s, g[1], of_s_saved(&s, n, 0)), &gi[0]);
}

static of_status solve_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_scope s = {0};
  of_tensor *gb = s_solve(&s, of_s_mT(&s, of_s_saved(&s, n, 0)), g[0]);
  of_tensor *ga = NULL;
  if (n->needs[0])
    ga = of_s_unary(&s, OF_NEG, of_s_matmul(&s, gb, of_s_mT(&s, of_s_saved(&s, n, 1))));
  if (s.st == OF_OK) {
    of_tensor *res[2] = {ga, n->needs[1] ? gb : NULL};
    for (int32_t k = 0; k < 2; k++) {
      if (res[k]) of_tensor_retain(res[k]);
      gi[k] = res[k];
    }
  }
  return of_s_end(&s, NULL, NULL);
}

static of_status cholesky_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0] || !n->needs[0]) return OF_OK;
  of_scope s = {0};
  of_tensor *l = of_s_saved(&s, n, 0), *gl = g[0];
  if (n->i[0]) {   /* upper: L = U^T, gL = gU^T */
    l = of_s_mT(&s, l);
    gl = of_s_mT(&s, gl);
  }
  of_tensor *lt = of_s_mT(&s, l);
  of_tensor *p = s_tril(&s, of_s_matmul(&s, lt, gl), 0);
  p = of_s_bins(&s, OF_MUL, of_s_bin(&s, OF_ADD, p, of_s_mT(&s, s_tril(&s, p, -1))), 0.5);
  of_tensor *w = s_solve(&s, lt, p);                               /* L^-T P */
  return of_s_end(&s, of_s_mT(&s, s_solve(&s, lt, of_s_mT(&s, w))), &gi[0]);   /* W L^-1 */
}

static of_tensor *s_unsqueeze_at(of_scope *s, of_tensor *x, int32_t dim) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  S_CALL(s, of_unsqueeze(x, dim, &r));
}

static of_status svdvals_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0] || !n->needs[0]) return OF_OK;
  if (of_is_grad_enabled())
    return of_fail(OF_ERR_STATE, "linalg.svdvals: double backward (create_graph = true) is "
                   "not supported");
  of_scope s = {0};
  /* (U * gS[..., None, :]) @ Vh */
  of_tensor *us = of_s_bin(&s, OF_MUL, of_s_saved(&s, n, 0), s_unsqueeze_at(&s, g[0], -2));
  return of_s_end(&s, of_s_matmul(&s, us, of_s_saved(&s, n, 1)), &gi[0]);
}

static const of_grad_def inv_grad = {"LinalgInvBackward", inv_backward};
static const of_grad_def det_grad = {"LinalgDetBackward", det_backward};
static const of_grad_def slogdet_grad = {"LinalgSlogdetBackward", slogdet_backward};
static const of_grad_def solve_grad = {"LinalgSolveBackward", solve_backward};
static const of_grad_def cholesky_grad = {"LinalgCholeskyBackward", cholesky_backward};
static const of_grad_def svdvals_grad = {"LinalgSvdvalsBackward", svdvals_backward};

/* Records gd for outs (released on failure); *n NULL when no grad is needed. */
static of_status record(const of_grad_def *gd, of_tensor **ins, int32_t nin, of_tensor **outs,
                        int32_t nout, of_node **n) {
  *n = NULL;
  if (!of_grad_needed(ins, nin)) return OF_OK;
  of_status st = of_record(gd, ins, nin, outs, nout, n);
  if (st != OF_OK) {
    for (int32_t k = 0; k < nout; k++) of_tensor_release(outs[k]);
    *n = NULL;
  }
  return st;
}

/* ---- entry points ---- */
of_status of_linalg_inv(of_tensor *a, of_tensor **out) {
  OF_CHECK(inv_kernel(a, out));
  of_node *n;
  OF_CHECK(record(&inv_grad, &a, 1, out, 1, &n));
  if (n) of_node_save(n, 0, *out);
  return OF_OK;
}

of_status of_linalg_det(of_tensor *a, of_tensor **out) {
  OF_CHECK(dets("det", a, out, NULL, NULL));
  of_node *n;
  OF_CHECK(record(&det_grad, &a, 1, out, 1, &n));
  if (n) {
    of_node_save(n, 0, a);
    of_node_save(n, 1, *out);
  }
  return OF_OK;
}

of_status of_linalg_slogdet(of_tensor *a, of_tensor **sign, of_tensor **logabsdet) {
  of_tensor *outs[2];
  OF_CHECK(dets("slogdet", a, NULL, &outs[0], &outs[1]));
  of_node *n;
  OF_CHECK(record(&slogdet_grad, &a, 1, outs, 2, &n));
  if (n) of_node_save(n, 0, a);
  *sign = outs[0];
  *logabsdet = outs[1];
  return OF_OK;
}

of_status of_linalg_solve(of_tensor *a, of_tensor *b, of_tensor **out) {
  OF_CHECK(solve_kernel(a, b, out));
  of_tensor *ins[2] = {a, b};
  of_node *n;
  OF_CHECK(record(&solve_grad, ins, 2, out, 1, &n));
  if (n) {
    of_node_save(n, 0, a);
    if (n->needs[0]) of_node_save(n, 1, *out);
  }
  return OF_OK;
}

of_status of_linalg_cholesky(of_tensor *a, int32_t upper, of_tensor **out) {
  OF_CHECK(cholesky_kernel(a, upper, out));
  of_node *n;
  OF_CHECK(record(&cholesky_grad, &a, 1, out, 1, &n));
  if (n) {
    n->i[0] = upper != 0;
    of_node_save(n, 0, *out);
  }
  return OF_OK;
}

of_status of_linalg_svdvals(of_tensor *a, of_tensor **out) {
  bool grad = of_grad_needed(&a, 1);
  of_tensor *u = NULL, *vh = NULL;
  OF_CHECK(svd_kernel(a, out, grad ? &u : NULL, grad ? &vh : NULL));
  of_node *n;
  of_status st = record(&svdvals_grad, &a, 1, out, 1, &n);
  if (n) {
    of_node_save(n, 0, u);
    of_node_save(n, 1, vh);
  }
  of_tensor_release(u);
  of_tensor_release(vh);
  return st;
}
