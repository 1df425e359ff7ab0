/* linalg_ext.c -- kernels of flow.linalg: inv, det, slogdet, solve, cholesky,
 * svdvals, eigh, qr, svd, eig.
 *
 * Inputs are float32 or float64 CPU tensors of shape (..., n, n) (solve's B:
 * (..., n, k) with the same batch dims; the Lua side broadcasts them first).
 * Each matrix is copied into a column-major float64 buffer (so LAPACK sees A
 * itself, as torch's LAPACK calls do, and pivots and error indices agree with
 * torch), factored with OpenBLAS's LAPACK (dgetrf, dgetri, dgetrs, dpotrf,
 * dgesdd, dsyevd, dgeqrf, dorgqr, dgeev),
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
#include "../dispatch/dispatch.h"
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
  char what[48];
  snprintf(what, sizeof what, "linalg.%s", op);
  OF_CHECK(of_dispatch_untraceable(what));
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

/* Hands a kernel's two results to the caller (b may be NULL: not wanted),
 * or releases both when st is an error. */
static of_status give_pair(of_status st, of_tensor *res[2], of_tensor **a, of_tensor **b) {
  if (st != OF_OK) {
    for (int32_t j = 0; j < 2; j++) of_tensor_release(res[j]);
    return st;
  }
  *a = res[0];
  if (b) *b = res[1];
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
static of_status svd_kernel_full(const char *op, of_tensor *a, int32_t full, of_tensor **sv,
                                 of_tensor **u, of_tensor **vh) {
  OF_CHECK(check_input(op, "A", a));
  mats m;
  OF_CHECK(load(a, &m));
  int64_t r = m.rows, c = m.cols, k = r < c ? r : c, nb = a->ndim - 2;
  int64_t uc = full ? r : k, vr = full ? c : k;   /* U (r, uc), Vh (vr, c) */
  int64_t shape[OF_MAX_DIMS];
  memcpy(shape, a->shape, sizeof(int64_t) * (size_t)nb);
  of_tensor *res[3] = {NULL, NULL, NULL};
  double *buf = NULL, *work = NULL;
  int *iwork = NULL;
  shape[nb] = k;
  of_status st = of_tensor_new(shape, nb + 1, a->dtype, OF_CPU, &res[0]);
  if (u && st == OF_OK) {
    shape[nb] = r, shape[nb + 1] = uc;
    st = of_tensor_new(shape, nb + 2, a->dtype, OF_CPU, &res[1]);
    shape[nb] = vr, shape[nb + 1] = c;
    if (st == OF_OK) st = of_tensor_new(shape, nb + 2, a->dtype, OF_CPU, &res[2]);
  }
  const char *jobz = full ? "A" : "S";
  int mi = (int)r, ni = (int)c, info = 0, lwork = -1;
  int ldu = mi > 0 ? mi : 1, lda = ldu, ldvt = (int)(vr > 0 ? vr : 1);
  double q = 0;
  if (st == OF_OK && k > 0) {
    buf = malloc(sizeof(double) * (size_t)(r * c + k + r * uc + vr * c));
    iwork = malloc(sizeof(int) * (size_t)(8 * k));
    if (buf && iwork) {   /* workspace query */
      double *sb = buf + r * c, *ub = sb + k, *vb = ub + r * uc;
      dgesdd_(jobz, &mi, &ni, buf, &lda, sb, ub, &ldu, vb, &ldvt, &q, &lwork, iwork, &info, 1);
      lwork = (int)q + 1;
      work = malloc(sizeof(double) * (size_t)lwork);
    }
    if (!buf || !work || !iwork)
      st = of_fail(OF_ERR_OOM, "linalg.%s: out of memory for the SVD of %s", op,
                   OF_SHAPE_STR(a));
  }
  for (int64_t b = 0; b < m.batch && st == OF_OK; b++) {
    if (k == 0) {   /* full U / Vh of an empty matrix: identities */
      for (int64_t i = 0; u && i < r * uc; i++) put(res[1], b * r * uc + i, i / uc == i % uc);
      for (int64_t i = 0; u && i < vr * c; i++) put(res[2], b * vr * c + i, i / c == i % c);
      continue;
    }
    double *ab = buf, *sb = buf + r * c, *ub = sb + k, *vb = ub + r * uc;
    to_colmajor(m.data + b * r * c, r, c, ab);
    dgesdd_(jobz, &mi, &ni, ab, &lda, sb, ub, &ldu, vb, &ldvt, work, &lwork, iwork, &info, 1);
    if (info != 0) {
      char pre[48];
      st = of_fail(OF_ERR_ARG, info == -4 ? "linalg.%s: %sThe algorithm failed to converge "
                   "because the input matrix contained non-finite values (LAPACK dgesdd info %d)."
                   : "linalg.%s: %sthe SVD did not converge (LAPACK dgesdd info %d)",
                   op, batch_prefix(a, b, pre, sizeof pre), info);
      break;
    }
    for (int64_t i = 0; i < k; i++) put(res[0], b * k + i, sb[i]);
    if (!u) continue;
    for (int64_t i = 0; i < r; i++)   /* u: (r, uc), column-major ld r */
      for (int64_t j = 0; j < uc; j++) put(res[1], b * r * uc + i * uc + j, ub[j * r + i]);
    for (int64_t i = 0; i < vr; i++)   /* vt: (vr, c), column-major ld vr */
      for (int64_t j = 0; j < c; j++) put(res[2], b * vr * c + i * c + j, vb[j * vr + i]);
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

static of_status svd_kernel(of_tensor *a, of_tensor **sv, of_tensor **u, of_tensor **vh) {
  return svd_kernel_full("svdvals", a, 0, sv, u, vh);
}

/* ---- autograd ---- */
/* The attribute records of the nodes that need one. These ops are not graph
 * ops (no ops.def line, no op.h record), so their records live here, kept
 * with OF_NODE_KEEP(n, -1, rec) and read with OF_NODE_ATTRS. */
typedef struct { int32_t upper, pad_; } la_cholesky;
typedef struct { int32_t mode, pad_; } la_qr;    /* 0 reduced, 1 complete, 2 'r' */
typedef struct { int32_t full, pad_; } la_svd;   /* full_matrices */

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
  if (OF_NODE_ATTRS(la_cholesky, n)->upper) {   /* upper: L = U^T, gL = gU^T */
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
    la_cholesky rec = {upper != 0, 0};
    OF_NODE_KEEP(n, -1, rec);
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

/* ==== decompositions: eigh, qr, svd (dsyevd, dgeqrf + dorgqr, dgesdd) ====
 * Autograd (torch 1.13's rules, real case):
 *   eigh: gA = V (skew(V^T gV) / E + diag(gL)) V^T, skew(X) = (X - X^T) / 2,
 *         E_ij = L_j - L_i off the diagonal, 1 on it
 *   qr (reduced, m >= n): M = R gR^T - gQ^T Q,
 *         gA = (gQ + Q copyltu(M)) R^-T, copyltu(M) = tril(M) + tril(M, -1)^T;
 *         m < n: A = [X | Y], R = [U | V]: gX = the same rule with gQ + Y gV^T,
 *         gU, Q, U; gY = Q gV
 *   svd: torch's svd_backward, with E_jk = S_k^2 - S_j^2:
 *         gA = U [(skew(U^T gU) S + S skew(V^T gV)) / E + diag(gS)] V^T
 *              + (I - U U^T) gU S^-1 V^T + U S^-1 gV^T (I - V V^T),
 *         skew(X) = X - X^T; full_matrices: U, Vh, gU, gVh narrowed to k.
 * All are written with public ops, so double backward works. */
void dsyevd_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda,
             double *w, double *work, const int *lwork, int *iwork, const int *liwork,
             int *info, size_t jobz_len, size_t uplo_len);
void dgeqrf_(const int *m, const int *n, double *a, const int *lda, double *tau, double *work,
             const int *lwork, int *info);
void dorgqr_(const int *m, const int *n, const int *k, double *a, const int *lda,
             const double *tau, double *work, const int *lwork, int *info);

static int64_t batch_shape(const of_tensor *a, int64_t *shape) {
  int64_t nb = a->ndim - 2;
  memcpy(shape, a->shape, sizeof(int64_t) * (size_t)nb);
  return nb;
}

/* ---- eigh: A (..., n, n) symmetric -> L (..., n) ascending, V (..., n, n)
 * (columns the eigenvectors) when v; reads the triangle uplo names ---- */
static of_status eigh_kernel(const char *op, of_tensor *a, int32_t upper, of_tensor **l,
                            of_tensor **v) {
  OF_CHECK(check_square(op, a));
  mats m;
  OF_CHECK(load(a, &m));
  int64_t n = m.rows, shape[OF_MAX_DIMS], nb = batch_shape(a, shape);
  of_tensor *res[2] = {NULL, NULL};
  shape[nb] = n;
  of_status st = of_tensor_new(shape, (int32_t)nb + 1, a->dtype, OF_CPU, &res[0]);
  if (v && st == OF_OK) st = of_tensor_new(a->shape, a->ndim, a->dtype, OF_CPU, &res[1]);
  int ni = (int)n, lda = ni > 0 ? ni : 1, info = 0, lwork = -1, liwork = -1, qi = 0;
  double q = 0, *buf = NULL, *work = NULL;
  int *iwork = NULL;
  const char *jobz = v ? "V" : "N", *uplo = upper ? "U" : "L";
  if (st == OF_OK && n > 0) {
    buf = malloc(sizeof(double) * (size_t)(n * n + n));
    if (buf) {   /* workspace query */
      dsyevd_(jobz, uplo, &ni, buf, &lda, buf + n * n, &q, &lwork, &qi, &liwork, &info, 1, 1);
      lwork = (int)q + 1;
      liwork = qi + 1;
      work = malloc(sizeof(double) * (size_t)lwork);
      iwork = malloc(sizeof(int) * (size_t)liwork);
    }
    if (!buf || !work || !iwork)
      st = of_fail(OF_ERR_OOM, "linalg.%s: out of memory for %s", op, OF_SHAPE_STR(a));
  }
  for (int64_t b = 0; b < m.batch && st == OF_OK && n > 0; b++) {
    double *w = buf + n * n;
    to_colmajor(m.data + b * n * n, n, n, buf);
    dsyevd_(jobz, uplo, &ni, buf, &lda, w, work, &lwork, iwork, &liwork, &info, 1, 1);
    if (info != 0) {
      char pre[48];
      st = of_fail(OF_ERR_ARG, info > 0 ? "linalg.%s: %sThe algorithm failed to converge "
                   "because the input matrix is ill-conditioned or has too many repeated "
                   "eigenvalues (LAPACK dsyevd info %d)."
                   : "linalg.%s: %sLAPACK dsyevd failed (info %d)",
                   op, batch_prefix(a, b, pre, sizeof pre), info);
      break;
    }
    for (int64_t i = 0; i < n; i++) put(res[0], b * n + i, w[i]);
    if (!v) continue;
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < n; j++) put(res[1], b * n * n + i * n + j, buf[j * n + i]);
  }
  free(buf);
  free(work);
  free(iwork);
  of_tensor_release(m.dense);
  return give_pair(st, res, l, v);
}

/* ---- qr: A (..., m, n) -> Q (..., m, c), R (..., c, n); mode 0 reduced
 * (c = min(m, n)), 1 complete (c = m), 2 r (Q not computed) ---- */
static of_status qr_kernel(of_tensor *a, int32_t mode, of_tensor **q, of_tensor **r) {
  OF_CHECK(check_input("qr", "A", a));
  mats m;
  OF_CHECK(load(a, &m));
  int64_t rows = m.rows, cols = m.cols, k = rows < cols ? rows : cols;
  int64_t c = mode == 1 ? rows : k, wide = rows > cols ? rows : cols;
  int64_t shape[OF_MAX_DIMS], nb = batch_shape(a, shape);
  of_tensor *res[2] = {NULL, NULL};
  shape[nb] = c, shape[nb + 1] = cols;
  of_status st = of_tensor_new(shape, (int32_t)nb + 2, a->dtype, OF_CPU, &res[1]);
  shape[nb] = rows, shape[nb + 1] = c;
  if (mode != 2 && st == OF_OK)
    st = of_tensor_new(shape, (int32_t)nb + 2, a->dtype, OF_CPU, &res[0]);
  int mi = (int)rows, ni = (int)cols, ki = (int)k, ci = (int)c, lda = mi > 0 ? mi : 1;
  int lwork = (int)(64 * (wide + 1)), info = 0;
  double *buf = NULL, *work = NULL;
  if (st == OF_OK && rows > 0 && cols > 0) {
    buf = malloc(sizeof(double) * (size_t)(rows * wide + k + 1));
    work = malloc(sizeof(double) * (size_t)lwork);
    if (!buf || !work)
      st = of_fail(OF_ERR_OOM, "linalg.qr: out of memory for %s", OF_SHAPE_STR(a));
  }
  int64_t rsz = c * cols, qsz = rows * c;
  for (int64_t b = 0; b < m.batch && st == OF_OK; b++) {
    if (rows == 0 || cols == 0) {   /* Q: the first c columns of I; R: zeros */
      for (int64_t i = 0; i < rsz; i++) put(res[1], b * rsz + i, 0);
      for (int64_t i = 0; res[0] && i < qsz; i++) put(res[0], b * qsz + i, i / c == i % c);
      continue;
    }
    double *tau = buf + rows * wide;
    to_colmajor(m.data + b * rows * cols, rows, cols, buf);
    dgeqrf_(&mi, &ni, buf, &lda, tau, work, &lwork, &info);
    if (info == 0) {
      for (int64_t i = 0; i < c; i++)   /* R: upper triangle of the first c rows */
        for (int64_t j = 0; j < cols; j++)
          put(res[1], b * rsz + i * cols + j, j >= i ? buf[j * rows + i] : 0);
      if (res[0]) dorgqr_(&mi, &ci, &ki, buf, &lda, tau, work, &lwork, &info);
    }
    if (info != 0) {
      char pre[48];
      st = of_fail(OF_ERR_ARG, "linalg.qr: %sLAPACK failed (info %d)",
                   batch_prefix(a, b, pre, sizeof pre), info);
      break;
    }
    for (int64_t i = 0; res[0] && i < rows; i++)
      for (int64_t j = 0; j < c; j++) put(res[0], b * qsz + i * c + j, buf[j * rows + i]);
  }
  free(buf);
  free(work);
  of_tensor_release(m.dense);
  return give_pair(st, res, q, r);
}

/* ---- backward helpers ---- */
/* identity (n, n) in dtype dt, no history */
static of_tensor *s_eye(of_scope *s, int64_t n, of_dtype dt) {
  if (s->st != OF_OK) return NULL;
  int64_t shape[2] = {n, n};
  of_tensor *r = NULL;
  of_status st = of_zeros(shape, 2, dt, OF_CPU, &r);
  if (st == OF_OK)
    for (int64_t i = 0; i < n; i++) put(r, i * n + i, 1);
  return of_s_keep(s, st, r);
}
static of_tensor *s_narrow_at(of_scope *s, of_tensor *x, int32_t dim, int64_t start,
                              int64_t len) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  S_CALL(s, of_narrow(x, dim, start, len, &r));
}
static of_tensor *s_narrow(of_scope *s, of_tensor *x, int32_t dim, int64_t len) {
  return s_narrow_at(s, x, dim, 0, len);
}
static of_tensor *s_add(of_scope *s, of_tensor *x, of_tensor *y) {   /* NULL: zero */
  if (!x) return y;
  if (!y) return x;
  return of_s_bin(s, OF_ADD, x, y);
}
/* E_ij = d_j - d_i, with the diagonal set to 1: (..., n, n) from d (..., n) */
static of_tensor *s_gaps(of_scope *s, of_tensor *d, int64_t n) {
  of_tensor *e = of_s_bin(s, OF_SUB, s_unsqueeze_at(s, d, -2), s_unsqueeze(s, d));
  return of_s_bin(s, OF_ADD, e, s_eye(s, n, d ? d->dtype : OF_FLOAT64));
}

static of_status eigh_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!n->needs[0] || (!g[0] && !g[1])) return OF_OK;
  of_scope s = {0};
  of_tensor *l = of_s_saved(&s, n, 0), *v = of_s_saved(&s, n, 1), *vt = of_s_mT(&s, v);
  int64_t dim = n->in_meta[0].shape[n->in_meta[0].ndim - 1];
  of_tensor *inner = NULL;
  if (g[1]) {
    of_tensor *x = of_s_matmul(&s, vt, g[1]);
    x = of_s_bins(&s, OF_MUL, of_s_bin(&s, OF_SUB, x, of_s_mT(&s, x)), 0.5);
    inner = of_s_bin(&s, OF_DIV, x, s_gaps(&s, l, dim));
  }
  if (g[0])
    inner = s_add(&s, inner, of_s_bin(&s, OF_MUL, s_unsqueeze(&s, g[0]),
                                      s_eye(&s, dim, l ? l->dtype : OF_FLOAT64)));
  return of_s_end(&s, of_s_matmul(&s, of_s_matmul(&s, v, inner), vt), &gi[0]);
}

/* the m >= n rule: (gQ + Q copyltu(R gR^T - gQ^T Q)) R^-T; gq or gr NULL: zero */
static of_tensor *qr_tall_grad(of_scope *s, of_tensor *gq, of_tensor *gr, of_tensor *q,
                               of_tensor *r) {
  of_tensor *mm = NULL;
  if (gr) mm = of_s_matmul(s, r, of_s_mT(s, gr));
  if (gq) {
    of_tensor *t = of_s_matmul(s, of_s_mT(s, gq), q);
    mm = mm ? of_s_bin(s, OF_SUB, mm, t) : of_s_unary(s, OF_NEG, t);
  }
  of_tensor *sym = of_s_bin(s, OF_ADD, s_tril(s, mm, 0), of_s_mT(s, s_tril(s, mm, -1)));
  of_tensor *bq = s_add(s, gq, of_s_matmul(s, q, sym));
  return of_s_mT(s, s_solve(s, r, of_s_mT(s, bq)));   /* b R^-T = (R^-1 b^T)^T */
}

static of_status qr_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!n->needs[0] || (!g[0] && !g[1])) return OF_OK;
  const of_meta *a = &n->in_meta[0];
  int64_t rows = a->shape[a->ndim - 2], cols = a->shape[a->ndim - 1];
  int32_t mode = OF_NODE_ATTRS(la_qr, n)->mode;
  if (mode == 2)
    return of_fail(OF_ERR_STATE, "linalg.qr: the derivative of linalg.qr depends on Q, which "
                   "is not computed when mode = 'r'; use mode = 'reduced'");
  if (mode == 1 && rows > cols)
    return of_fail(OF_ERR_STATE, "linalg.qr: the QR decomposition is not differentiable when "
                   "mode = 'complete' and nrows > ncols (A has %lld rows, %lld columns)",
                   (long long)rows, (long long)cols);
  of_scope s = {0};
  of_tensor *q = of_s_saved(&s, n, 0), *r = of_s_saved(&s, n, 1);
  if (rows >= cols) return of_s_end(&s, qr_tall_grad(&s, g[0], g[1], q, r), &gi[0]);
  /* m < n (torch): A = [X | Y], R = [U | V], X = Q U, Y = Q V;
   * gX = tall rule (gQ + Y gV^T, gU, Q, U), gY = Q gV */
  of_tensor *u = s_narrow_at(&s, r, -1, 0, rows), *v = s_narrow_at(&s, r, -1, rows, cols - rows);
  of_tensor *gu = NULL, *gv = NULL, *gq = g[0], *gy = NULL;
  if (g[1]) {
    gu = s_narrow_at(&s, g[1], -1, 0, rows);
    gv = s_narrow_at(&s, g[1], -1, rows, cols - rows);
    gq = s_add(&s, gq, of_s_matmul(&s, of_s_matmul(&s, q, v), of_s_mT(&s, gv)));
    gy = of_s_matmul(&s, q, gv);
  } else if (s.st == OF_OK) {
    of_tensor *z = NULL;
    of_status st = of_zeros(v->shape, v->ndim, v->dtype, OF_CPU, &z);
    gy = of_s_keep(&s, st, z);
  }
  of_tensor *gx = qr_tall_grad(&s, gq, gu, q, u), *ga = NULL;
  if (s.st == OF_OK) {
    of_tensor *parts[2] = {gx, gy};
    of_status st = of_cat(parts, 2, gx->ndim - 1, &ga);
    ga = of_s_keep(&s, st, ga);
  }
  return of_s_end(&s, ga, &gi[0]);
}

static of_status svd_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!n->needs[0] || (!g[0] && !g[1] && !g[2])) return OF_OK;
  bool full = OF_NODE_ATTRS(la_svd, n)->full != 0;
  of_scope s = {0};
  of_tensor *u = of_s_saved(&s, n, 0), *sv = of_s_saved(&s, n, 1), *vh = of_s_saved(&s, n, 2);
  const of_meta *a = &n->in_meta[0];
  int64_t rows = a->shape[a->ndim - 2], cols = a->shape[a->ndim - 1];
  int64_t k = rows < cols ? rows : cols;
  of_tensor *gu = g[0], *gs = g[1], *gvh = g[2];
  if (full) {
    u = s_narrow(&s, u, -1, k);
    vh = s_narrow(&s, vh, -2, k);
    if (gu) gu = s_narrow(&s, gu, -1, k);
    if (gvh) gvh = s_narrow(&s, gvh, -2, k);
  }
  of_tensor *srow = s_unsqueeze_at(&s, sv, -2), *scol = s_unsqueeze(&s, sv), *ga = NULL;
  if (!gu && !gvh) {   /* U diag(gS) Vh */
    of_tensor *us = of_s_bin(&s, OF_MUL, u, s_unsqueeze_at(&s, gs, -2));
    return of_s_end(&s, of_s_matmul(&s, us, vh), &gi[0]);
  }
  of_tensor *e = s_gaps(&s, of_s_bin(&s, OF_MUL, sv, sv), k), *v = of_s_mT(&s, vh);
  if (gu) {
    of_tensor *x = of_s_matmul(&s, of_s_mT(&s, u), gu);
    ga = of_s_bin(&s, OF_MUL, of_s_bin(&s, OF_SUB, x, of_s_mT(&s, x)), srow);
  }
  if (gvh) {
    of_tensor *x = of_s_matmul(&s, vh, of_s_mT(&s, gvh));
    ga = s_add(&s, ga, of_s_bin(&s, OF_MUL, scol, of_s_bin(&s, OF_SUB, x, of_s_mT(&s, x))));
  }
  ga = of_s_bin(&s, OF_DIV, ga, e);
  if (gs)
    ga = of_s_bin(&s, OF_ADD, ga, of_s_bin(&s, OF_MUL, s_unsqueeze(&s, gs),
                                           s_eye(&s, k, sv ? sv->dtype : OF_FLOAT64)));
  if (rows > k && gu) {   /* [U gA + (I - U U^T) gU S^-1] Vh */
    of_tensor *gus = of_s_bin(&s, OF_DIV, gu, srow);
    ga = of_s_matmul(&s, u, ga);
    ga = of_s_bin(&s, OF_SUB, of_s_bin(&s, OF_ADD, ga, gus),
                  of_s_matmul(&s, u, of_s_matmul(&s, of_s_mT(&s, u), gus)));
    ga = of_s_matmul(&s, ga, vh);
  } else if (cols > k && gvh) {   /* U [gA Vh + S^-1 gVh (I - V Vh)] */
    of_tensor *sgv = of_s_bin(&s, OF_DIV, gvh, scol);
    ga = of_s_matmul(&s, ga, vh);
    ga = of_s_bin(&s, OF_SUB, of_s_bin(&s, OF_ADD, ga, sgv),
                  of_s_matmul(&s, of_s_matmul(&s, sgv, v), vh));
    ga = of_s_matmul(&s, u, ga);
  } else {
    ga = of_s_matmul(&s, u, of_s_matmul(&s, ga, vh));
  }
  return of_s_end(&s, ga, &gi[0]);
}

static const of_grad_def eigh_grad = {"LinalgEighBackward", eigh_backward};
static const of_grad_def qr_grad = {"LinalgQrBackward", qr_backward};
static const of_grad_def svd_grad = {"LinalgSvdBackward", svd_backward};

of_status of_linalg_eigh(of_tensor *a, int32_t upper, of_tensor **l, of_tensor **v) {
  bool grad = of_grad_needed(&a, 1);
  of_tensor *outs[2] = {NULL, NULL};
  OF_CHECK(eigh_kernel(v ? "eigh" : "eigvalsh", a, upper, &outs[0],
                       (v || grad) ? &outs[1] : NULL));
  of_node *n;
  /* eigvalsh under autograd: V is still an output of the node (then dropped),
   * so its backward V diag(gL) V^T is differentiable again */
  OF_CHECK(record(&eigh_grad, &a, 1, outs, grad ? 2 : 1, &n));
  if (n) {
    of_node_save(n, 0, outs[0]);
    of_node_save(n, 1, outs[1]);
  }
  *l = outs[0];
  if (v)
    *v = outs[1];
  else
    of_tensor_release(outs[1]);
  return OF_OK;
}

of_status of_linalg_qr(of_tensor *a, int32_t mode, of_tensor **q, of_tensor **r) {
  if (mode < 0 || mode > 2)
    return of_fail(OF_ERR_ARG, "linalg.qr: mode must be 'reduced', 'complete' or 'r'");
  bool grad = of_grad_needed(&a, 1);
  of_tensor *outs[2] = {NULL, NULL};
  OF_CHECK(qr_kernel(a, mode, &outs[0], &outs[1]));
  if (mode == 2) {   /* Q: an empty tensor, as torch */
    int64_t zero = 0;
    of_status st = of_tensor_new(&zero, 1, a->dtype, OF_CPU, &outs[0]);
    if (st != OF_OK) {
      of_tensor_release(outs[1]);
      return st;
    }
  }
  of_node *n = NULL;
  if (grad) {
    of_tensor *rec[1] = {outs[1]};
    of_status st = mode == 2 ? record(&qr_grad, &a, 1, rec, 1, &n)
                             : record(&qr_grad, &a, 1, outs, 2, &n);
    if (st != OF_OK) {
      if (mode == 2) of_tensor_release(outs[0]);
      return st;
    }
  }
  if (n) {
    la_qr rec = {mode, 0};
    OF_NODE_KEEP(n, -1, rec);
    if (mode != 2) of_node_save(n, 0, outs[0]);
    of_node_save(n, 1, outs[1]);
  }
  *q = outs[0];
  *r = outs[1];
  return OF_OK;
}

/* full_matrices: U (..., m, m), Vh (..., n, n); else the thin SVD */
of_status of_linalg_svd(of_tensor *a, int32_t full, of_tensor **u, of_tensor **sv,
                        of_tensor **vh) {
  of_tensor *outs[3];
  OF_CHECK(svd_kernel_full("svd", a, full, &outs[1], &outs[0], &outs[2]));
  of_node *n;
  OF_CHECK(record(&svd_grad, &a, 1, outs, 3, &n));
  if (n) {
    la_svd rec = {full != 0, 0};
    OF_NODE_KEEP(n, -1, rec);
    for (int32_t j = 0; j < 3; j++) of_node_save(n, j, outs[j]);
  }
  *u = outs[0];
  *sv = outs[1];
  *vh = outs[2];
  return OF_OK;
}

/* ---- eig: general real A (..., n, n) -> L (..., n), V (..., n, n) complex
 * (complex64 for float32 A, complex128 for float64) through LAPACK's dgeev.
 * L in dgeev's order (a conjugate pair with its positive imaginary part
 * first, as torch); V's columns the right eigenvectors, each of unit 2-norm
 * with its largest component real (dgeev's normalisation), a pair's built
 * from two VR columns: v_j = vr_j + i vr_j+1, v_j+1 = conj(v_j). v NULL:
 * eigenvalues only (eigvals). No autograd here: flow.linalg.eig records
 * torch's rule in Lua (it needs complex products). */
void dgeev_(const char *jobvl, const char *jobvr, const int *n, double *a, const int *lda,
            double *wr, double *wi, double *vl, const int *ldvl, double *vr, const int *ldvr,
            double *work, const int *lwork, int *info, size_t jobvl_len, size_t jobvr_len);

/* element k of a new contiguous complex64/complex128 result (re, im pairs) */
static void put_c(of_tensor *out, int64_t k, double re, double im) {
  if (out->dtype == OF_COMPLEX64) {
    float *p = (float *)of_ptr(out) + 2 * k;
    p[0] = (float)re;
    p[1] = (float)im;
  } else {
    double *p = (double *)of_ptr(out) + 2 * k;
    p[0] = re;
    p[1] = im;
  }
}

static of_status eig_kernel(const char *op, of_tensor *a, of_tensor **l, of_tensor **v) {
  OF_CHECK(check_square(op, a));
  mats m;
  OF_CHECK(load(a, &m));
  int64_t n = m.rows, shape[OF_MAX_DIMS], nb = batch_shape(a, shape);
  of_dtype cdt = a->dtype == OF_FLOAT32 ? OF_COMPLEX64 : OF_COMPLEX128;
  of_tensor *res[2] = {NULL, NULL};
  of_status st = OF_OK;
  for (int64_t i = 0; i < m.batch * n * n; i++)
    if (!isfinite(m.data[i])) {   /* dgeev would loop or return garbage; torch checks too */
      st = of_fail(OF_ERR_ARG, "linalg.%s: input tensor should not contain infs or NaNs (A of "
                   "shape %s, %s)", op, OF_SHAPE_STR(a), OF_DT(a));
      break;
    }
  shape[nb] = n;
  if (st == OF_OK) st = of_tensor_new(shape, (int32_t)nb + 1, cdt, OF_CPU, &res[0]);
  if (v && st == OF_OK) st = of_tensor_new(a->shape, a->ndim, cdt, OF_CPU, &res[1]);
  int ni = (int)n, lda = ni > 0 ? ni : 1, ldvr = v ? lda : 1, one = 1, info = 0, lwork = -1;
  double q = 0, dummy = 0, *buf = NULL, *work = NULL;
  const char *jobvr = v ? "V" : "N";
  if (st == OF_OK && n > 0) {
    /* A (n * n), wr, wi (n each), VR (n * n when vectors) */
    buf = malloc(sizeof(double) * (size_t)(n * n + 2 * n + (v ? n * n : 1)));
    if (buf) {   /* workspace query */
      dgeev_("N", jobvr, &ni, buf, &lda, buf + n * n, buf + n * n + n, &dummy, &one,
             buf + n * n + 2 * n, &ldvr, &q, &lwork, &info, 1, 1);
      lwork = (int)q > 4 * ni ? (int)q : 4 * ni;
      work = malloc(sizeof(double) * (size_t)lwork);
    }
    if (!buf || !work)
      st = of_fail(OF_ERR_OOM, "linalg.%s: out of memory for %s", op, OF_SHAPE_STR(a));
  }
  for (int64_t b = 0; b < m.batch && st == OF_OK && n > 0; b++) {
    double *wr = buf + n * n, *wi = wr + n, *vr = wi + n;
    to_colmajor(m.data + b * n * n, n, n, buf);
    dgeev_("N", jobvr, &ni, buf, &lda, wr, wi, &dummy, &one, vr, &ldvr, work, &lwork, &info, 1,
           1);
    if (info != 0) {
      char pre[48];
      st = of_fail(OF_ERR_ARG, info > 0 ? "linalg.%s: %sThe QR algorithm failed to compute all "
                   "the eigenvalues (LAPACK dgeev info %d; A of shape %s, %s)"
                   : "linalg.%s: %sLAPACK dgeev failed (info %d; A of shape %s, %s)",
                   op, batch_prefix(a, b, pre, sizeof pre), info, OF_SHAPE_STR(a), OF_DT(a));
      break;
    }
    for (int64_t i = 0; i < n; i++) put_c(res[0], b * n + i, wr[i], wi[i]);
    if (!v) continue;
    of_tensor *out = res[1];
    for (int64_t j = 0; j < n; j++) {
      if (wi[j] == 0 || j + 1 == n) {   /* a real eigenvalue: a real column */
        for (int64_t i = 0; i < n; i++) put_c(out, b * n * n + i * n + j, vr[j * n + i], 0);
        continue;
      }
      for (int64_t i = 0; i < n; i++) {   /* a pair: vr_j +- i vr_j+1 */
        double re = vr[j * n + i], im = vr[(j + 1) * n + i];
        put_c(out, b * n * n + i * n + j, re, im);
        put_c(out, b * n * n + i * n + j + 1, re, -im);
      }
      j++;
    }
  }
  free(buf);
  free(work);
  of_tensor_release(m.dense);
  return give_pair(st, res, l, v);
}

of_status of_linalg_eig(of_tensor *a, of_tensor **l, of_tensor **v) {
  return eig_kernel(v ? "eig" : "eigvals", a, l, v);
}

/* ---- lu_factor (dgetrf) and ldl_factor / ldl_solve (dsytrf / dsytrs) ----
 * No autograd here: flow.linalg builds lu, lu_solve and householder_product
 * from differentiable ops on these factors (lua/oneflow/ops/linalg_ext.lua).
 * Pivots are LAPACK's, 1-based (torch returns the same numbers); info is
 * LAPACK's per matrix (0, or the 1-based index of a zero pivot). */
void dsytrf_(const char *uplo, const int *n, double *a, const int *lda, int *ipiv, double *work,
             const int *lwork, int *info, size_t uplo_len);
void dsytrs_(const char *uplo, const int *n, const int *nrhs, const double *a, const int *lda,
             const int *ipiv, double *b, const int *ldb, int *info, size_t uplo_len);

/* a new (batch dims of t..., last) tensor of dtype dt */
static of_status batch_tensor(const of_tensor *t, int32_t drop, const int64_t *last, int32_t nlast,
                              of_dtype dt, of_tensor **out) {
  int64_t shape[OF_MAX_DIMS];
  int32_t nd = 0;
  for (int32_t d = 0; d < t->ndim - drop; d++) shape[nd++] = t->shape[d];
  for (int32_t d = 0; d < nlast; d++) shape[nd++] = last[d];
  return of_tensor_new(shape, nd, dt, OF_CPU, out);
}

of_status of_linalg_lu_factor(of_tensor *a, of_tensor **lu, of_tensor **pivots,
                              of_tensor **info_out) {
  OF_CHECK(check_input("lu_factor", "A", a));
  mats m;
  OF_CHECK(load(a, &m));
  int64_t rows = m.rows, cols = m.cols, k = rows < cols ? rows : cols;
  of_tensor *res = NULL, *piv = NULL, *inf = NULL;
  double *buf = malloc(sizeof(double) * (size_t)(rows * cols + 1));
  int *ipiv = malloc(sizeof(int) * (size_t)(k + 1));
  of_status st = (buf && ipiv) ? OF_OK
    : of_fail(OF_ERR_OOM, "linalg.lu_factor: out of memory for a %lld x %lld matrix",
              (long long)rows, (long long)cols);
  if (st == OF_OK) st = of_tensor_new(a->shape, a->ndim, a->dtype, OF_CPU, &res);
  if (st == OF_OK) st = batch_tensor(a, 2, &k, 1, OF_INT32, &piv);
  if (st == OF_OK) st = batch_tensor(a, 2, NULL, 0, OF_INT32, &inf);
  int mi = (int)rows, ni = (int)cols, lda = rows > 0 ? (int)rows : 1;
  for (int64_t b = 0; b < m.batch && st == OF_OK; b++) {
    int info = 0;
    if (rows > 0 && cols > 0) {
      to_colmajor(m.data + b * rows * cols, rows, cols, buf);
      dgetrf_(&mi, &ni, buf, &lda, ipiv, &info);
      if (info < 0) {
        st = of_fail(OF_ERR_ARG, "linalg.lu_factor: LAPACK failed (info %d)", info);
        break;
      }
    }
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++) put(res, (b * rows + i) * cols + j, buf[j * rows + i]);
    for (int64_t i = 0; i < k; i++) ((int32_t *)of_ptr(piv))[b * k + i] = ipiv[i];
    ((int32_t *)of_ptr(inf))[b] = info;
  }
  free(buf);
  free(ipiv);
  of_tensor_release(m.dense);
  if (st != OF_OK) {
    of_tensor_release(res);
    of_tensor_release(piv);
    of_tensor_release(inf);
    return st;
  }
  *lu = res;
  *pivots = piv;
  *info_out = inf;
  return OF_OK;
}

of_status of_linalg_ldl_factor(of_tensor *a, of_tensor **ld, of_tensor **pivots,
                               of_tensor **info_out) {
  OF_CHECK(check_square("ldl_factor", a));
  mats m;
  OF_CHECK(load(a, &m));
  int64_t n = m.rows;
  of_tensor *res = NULL, *piv = NULL, *inf = NULL;
  scratch s;
  of_status st = scratch_new("ldl_factor", n, 0, &s);
  if (st != OF_OK) {
    of_tensor_release(m.dense);
    return st;
  }
  st = of_tensor_new(a->shape, a->ndim, a->dtype, OF_CPU, &res);
  if (st == OF_OK) st = batch_tensor(a, 2, &n, 1, OF_INT32, &piv);
  if (st == OF_OK) st = batch_tensor(a, 2, NULL, 0, OF_INT32, &inf);
  int ni = (int)n, lda = n > 0 ? (int)n : 1;
  for (int64_t b = 0; b < m.batch && st == OF_OK; b++) {
    int info = 0;
    if (n > 0) {
      to_colmajor(m.data + b * n * n, n, n, s.a);
      dsytrf_("L", &ni, s.a, &lda, s.ipiv, s.work, &s.lwork, &info, 1);
      if (info < 0) {
        st = of_fail(OF_ERR_ARG, "linalg.ldl_factor: LAPACK failed (info %d)", info);
        break;
      }
    }
    /* the factor is in the lower triangle; the upper one is zeroed (as torch) */
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < n; j++) put(res, (b * n + i) * n + j, j <= i ? s.a[j * n + i] : 0.0);
    for (int64_t i = 0; i < n; i++) ((int32_t *)of_ptr(piv))[b * n + i] = s.ipiv[i];
    ((int32_t *)of_ptr(inf))[b] = info;
  }
  scratch_free(&s);
  of_tensor_release(m.dense);
  if (st != OF_OK) {
    of_tensor_release(res);
    of_tensor_release(piv);
    of_tensor_release(inf);
    return st;
  }
  *ld = res;
  *pivots = piv;
  *info_out = inf;
  return OF_OK;
}

of_status of_linalg_ldl_solve(of_tensor *ld, of_tensor *pivots, of_tensor *bm, of_tensor **out) {
  OF_CHECK(check_input("ldl_solve", "LD", ld));
  OF_CHECK(check_input("ldl_solve", "B", bm));
  int64_t n = ld->shape[ld->ndim - 1], k = bm->shape[bm->ndim - 1];
  if (ld->shape[ld->ndim - 2] != n)
    return of_fail(OF_ERR_SHAPE, "linalg.ldl_solve: LD must be batches of square matrices, got "
                   "shape %s", OF_SHAPE_STR(ld));
  if (pivots->storage->device != OF_CPU)
    return of_fail(OF_ERR_DEVICE, "linalg.ldl_solve: not implemented on cuda (pivots of shape %s "
                   "is a CUDA tensor; move it with :cpu())", OF_SHAPE_STR(pivots));
  bool same = ld->ndim == bm->ndim && bm->shape[bm->ndim - 2] == n && pivots->ndim == ld->ndim - 1;
  for (int32_t d = 0; same && d < ld->ndim - 2; d++)
    same = ld->shape[d] == bm->shape[d] && pivots->shape[d] == ld->shape[d];
  if (!same || pivots->shape[pivots->ndim - 1] != n)
    return of_fail(OF_ERR_SHAPE, "linalg.ldl_solve: incompatible shapes of LD, pivots and B "
                   "(%s, %s and %s)", OF_SHAPE_STR(ld), OF_SHAPE_STR(pivots), OF_SHAPE_STR(bm));
  if (ld->dtype != bm->dtype)
    return of_fail(OF_ERR_DTYPE, "linalg.ldl_solve: LD and B must have the same dtype, got %s "
                   "and %s", OF_DT(ld), OF_DT(bm));
  if (pivots->dtype != OF_INT32)
    return of_fail(OF_ERR_DTYPE, "linalg.ldl_solve: pivots must be int32 (from ldl_factor), "
                   "got %s", OF_DT(pivots));
  of_tensor *pd = NULL;
  OF_CHECK(of_dense(pivots, OF_INT32, &pd));
  const int32_t *pv = (const int32_t *)of_ptr(pd);
  mats m, mb = {0};
  of_status st = load(ld, &m);
  if (st != OF_OK) {
    of_tensor_release(pd);
    return st;
  }
  st = load(bm, &mb);
  of_tensor *res = NULL;
  scratch s = {0};
  if (st == OF_OK) st = scratch_new("ldl_solve", n, n * k, &s);
  if (st == OF_OK) st = of_tensor_new(bm->shape, bm->ndim, bm->dtype, OF_CPU, &res);
  int ni = (int)n, ki = (int)k, lda = n > 0 ? (int)n : 1, info = 0;
  double *x = s.a ? s.a + n * n : NULL;
  for (int64_t b = 0; b < m.batch && st == OF_OK && n > 0 && k > 0; b++) {
    for (int64_t i = 0; i < n; i++) {
      int p = pv[b * n + i];
      if (p == 0 || p > n || p < -n) {
        st = of_fail(OF_ERR_ARG, "linalg.ldl_solve: pivots[%lld] = %d is out of range for "
                     "%lld x %lld matrices (pivots come from ldl_factor)", (long long)(i + 1), p,
                     (long long)n, (long long)n);
        break;
      }
      s.ipiv[i] = p;
    }
    if (st != OF_OK) break;
    to_colmajor(m.data + b * n * n, n, n, s.a);
    to_colmajor(mb.data + b * n * k, n, k, x);
    dsytrs_("L", &ni, &ki, s.a, &lda, s.ipiv, x, &lda, &info, 1);
    if (info != 0) {
      st = of_fail(OF_ERR_ARG, "linalg.ldl_solve: LAPACK failed (info %d)", info);
      break;
    }
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < k; j++) put(res, b * n * k + i * k + j, x[j * n + i]);
  }
  if (s.a) scratch_free(&s);
  of_tensor_release(pd);
  of_tensor_release(m.dense);
  of_tensor_release(mb.dense);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}
