/* ops.c -- the graph op table and the public entry points of the ops.
 *
 * For each public op `of_X` of oneflow.h this file has
 *   - the entry point: calls the op body `of_impl_X` (in the op's own file)
 *     and, while tracing, records a node (OF_TRACED: one thread-local load
 *     on the eager path);
 *   - `rec_X`: packs the attributes into the op's record (ops.h);
 *   - `inv_X`: runs the op again from the record, for the executor;
 *   - one row of the table: name, record size, inputs, outputs, flags,
 *     which inputs it writes, and how to print the record.
 * Invokers re-check counts read from a record (a loaded file may lie); the
 * ops themselves check everything else, as for any caller. */
#include "ops.h"
#include "fused.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define REC(OP, A, INS, NIN, OUTS, NREAL) \
  of_trace_record(OP, &(A), (int32_t)sizeof(A), INS, NIN, OUTS, NREAL)
#define ATTRS(T) const T *a = (const T *)n->attrs
#define ZERO(a) memset(&(a), 0, sizeof(a))

/* Autocast (amp.c): the outermost call casts its inputs by the op's class
 * and calls the entry point again with autocast off, so the casts are
 * ordinary to_dtype ops (recorded while tracing, with their backward). */
#define AMP(CLASS, CALL, ...)                                                    \
  do {                                                                           \
    if (__builtin_expect(of_amp_tls != 0, 0)) {                                  \
      of_tensor *amp_in_[] = {__VA_ARGS__};                                      \
      enum { AMP_N_ = sizeof amp_in_ / sizeof *amp_in_ };                        \
      of_tensor *A_[AMP_N_];                                                     \
      int32_t amp_saved_;                                                        \
      of_status amp_st_ = of_amp_begin(CLASS, amp_in_, A_, AMP_N_, &amp_saved_); \
      if (amp_st_ != OF_OK) return amp_st_;                                      \
      amp_st_ = (CALL);                                                          \
      of_amp_end(amp_in_, A_, AMP_N_, amp_saved_);                               \
      return amp_st_;                                                            \
    }                                                                            \
  } while (0)

static of_status bad_record(const of_gnode *n, const char *what) {
  const of_opdef *d = of_op_def(n->op);
  return of_fail(OF_ERR_ARG, "nn.Graph: %s node has a bad %s in its record", d ? d->name : "?",
                 what);
}
#define NEED(cond, what) do { if (!(cond)) return bad_record(n, what); } while (0)
#define NDIM_OK(x) ((x) >= 0 && (x) <= OF_MAX_DIMS)

/* one-result call: outs[0] = result */
#define RUN1(CALL)                    \
  do {                                \
    of_tensor *r_ = NULL;             \
    of_status st_ = (CALL);           \
    if (st_ == OF_OK) outs[0] = r_;   \
    return st_;                       \
  } while (0)
#define R (&r_)

static void copy_i64(int64_t *dst, const int64_t *src, int32_t n) {
  for (int32_t i = 0; i < n; i++) dst[i] = src ? src[i] : 0;
}
static void copy_i32(int32_t *dst, const int32_t *src, int32_t n) {
  for (int32_t i = 0; i < n; i++) dst[i] = src ? src[i] : 0;
}

static size_t catf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static size_t catf(char *buf, size_t cap, const char *fmt, ...) {
  size_t len = strlen(buf);
  if (len >= cap) return len;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + len, cap - len, fmt, ap);
  va_end(ap);
  return strlen(buf);
}
static void cat_list(char *buf, size_t cap, const char *name, const int64_t *v, int32_t n) {
  catf(buf, cap, "%s%s=", buf[0] ? " " : "", name);
  for (int32_t i = 0; i < n; i++) catf(buf, cap, "%s%lld", i ? "," : "", (long long)v[i]);
}

/* ====================================================================== views */
static of_status rec_shape(int32_t op, of_tensor *t, const int64_t *shape, int32_t ndim,
                           of_tensor **out) {
  a_shape a;
  ZERO(a);
  a.ndim = ndim;
  copy_i64(a.shape, shape, ndim);
  return REC(op, a, &t, 1, out, 1);
}
static void d_shape(const void *p, char *b, size_t c) {
  const a_shape *a = p;
  cat_list(b, c, "shape", a->shape, NDIM_OK(a->ndim) ? a->ndim : 0);
}

of_status of_view(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out) {
  OF_TRACED(of_impl_view(t, shape, ndim, out), rec_shape(OPK_VIEW, t, shape, ndim, out));
}
static of_status inv_view(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_shape);
  NEED(NDIM_OK(a->ndim), "ndim");
  RUN1(of_view(ins[0], a->shape, a->ndim, R));
}

of_status of_reshape(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out) {
  OF_TRACED(of_impl_reshape(t, shape, ndim, out), rec_shape(OPK_RESHAPE, t, shape, ndim, out));
}
static of_status inv_reshape(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_shape);
  NEED(NDIM_OK(a->ndim), "ndim");
  RUN1(of_reshape(ins[0], a->shape, a->ndim, R));
}

of_status of_expand(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out) {
  OF_TRACED(of_impl_expand(t, shape, ndim, out), rec_shape(OPK_EXPAND, t, shape, ndim, out));
}
static of_status inv_expand(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_shape);
  NEED(NDIM_OK(a->ndim), "ndim");
  RUN1(of_expand(ins[0], a->shape, a->ndim, R));
}

static of_status rec_as_strided(of_tensor *t, const int64_t *shape, const int64_t *strides,
                                int32_t ndim, int64_t offset, of_tensor **out) {
  a_strided a;
  ZERO(a);
  a.ndim = ndim;
  copy_i64(a.shape, shape, ndim);
  copy_i64(a.strides, strides, ndim);
  a.offset = offset;
  return REC(OPK_AS_STRIDED, a, &t, 1, out, 1);
}
of_status of_as_strided(of_tensor *t, const int64_t *shape, const int64_t *strides,
                        int32_t ndim, int64_t offset, of_tensor **out) {
  OF_TRACED(of_impl_as_strided(t, shape, strides, ndim, offset, out),
            rec_as_strided(t, shape, strides, ndim, offset, out));
}
static of_status inv_as_strided(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_strided);
  NEED(NDIM_OK(a->ndim), "ndim");
  RUN1(of_as_strided(ins[0], a->shape, a->strides, a->ndim, a->offset, R));
}
static void d_strided(const void *p, char *b, size_t c) {
  const a_strided *a = p;
  int32_t nd = NDIM_OK(a->ndim) ? a->ndim : 0;
  cat_list(b, c, "shape", a->shape, nd);
  cat_list(b, c, "strides", a->strides, nd);
  catf(b, c, " offset=%lld", (long long)a->offset);
}

static of_status rec_i2(int32_t op, of_tensor *t, int32_t x, int32_t y, of_tensor **out) {
  a_i2 a = {x, y};
  return REC(op, a, &t, 1, out, 1);
}
static void d_i2(const void *p, char *b, size_t c) {
  const a_i2 *a = p;
  catf(b, c, "%d,%d", (int)a->a, (int)a->b);
}
of_status of_transpose(of_tensor *t, int32_t d0, int32_t d1, of_tensor **out) {
  OF_TRACED(of_impl_transpose(t, d0, d1, out), rec_i2(OPK_TRANSPOSE, t, d0, d1, out));
}
static of_status inv_transpose(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_i2);
  RUN1(of_transpose(ins[0], a->a, a->b, R));
}
of_status of_flatten(of_tensor *t, int32_t start, int32_t end, of_tensor **out) {
  OF_TRACED(of_impl_flatten(t, start, end, out), rec_i2(OPK_FLATTEN, t, start, end, out));
}
static of_status inv_flatten(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_i2);
  RUN1(of_flatten(ins[0], a->a, a->b, R));
}

static of_status rec_permute(of_tensor *t, const int32_t *dims, int32_t ndim, of_tensor **out) {
  a_dims a;
  ZERO(a);
  a.n = ndim;
  copy_i32(a.dims, dims, ndim);
  return REC(OPK_PERMUTE, a, &t, 1, out, 1);
}
of_status of_permute(of_tensor *t, const int32_t *dims, int32_t ndim, of_tensor **out) {
  OF_TRACED(of_impl_permute(t, dims, ndim, out), rec_permute(t, dims, ndim, out));
}
static of_status inv_permute(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_dims);
  NEED(NDIM_OK(a->n), "ndim");
  RUN1(of_permute(ins[0], a->dims, a->n, R));
}
static void d_dims(const void *p, char *b, size_t c) {
  const a_dims *a = p;
  catf(b, c, "dims=");
  for (int32_t i = 0; i < (NDIM_OK(a->n) ? a->n : 0); i++) catf(b, c, "%s%d", i ? "," : "", a->dims[i]);
}

static of_status rec_dim3(int32_t op, of_tensor *t, int32_t dim, int64_t x, int64_t y,
                          int64_t z, of_tensor **out) {
  a_dim3 a;
  ZERO(a);
  a.dim = dim;
  a.a = x;
  a.b = y;
  a.c = z;
  return REC(op, a, &t, 1, out, 1);
}
static void d_dim3(const void *p, char *b, size_t c) {
  const a_dim3 *a = p;
  catf(b, c, "dim=%d %lld,%lld,%lld", (int)a->dim, (long long)a->a, (long long)a->b,
       (long long)a->c);
}
of_status of_narrow(of_tensor *t, int32_t dim, int64_t start, int64_t length, of_tensor **out) {
  OF_TRACED(of_impl_narrow(t, dim, start, length, out),
            rec_dim3(OPK_NARROW, t, dim, start, length, 0, out));
}
static of_status inv_narrow(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_dim3);
  RUN1(of_narrow(ins[0], a->dim, a->a, a->b, R));
}
of_status of_slice(of_tensor *t, int32_t dim, int64_t start, int64_t end, int64_t step,
                   of_tensor **out) {
  OF_TRACED(of_impl_slice(t, dim, start, end, step, out),
            rec_dim3(OPK_SLICE, t, dim, start, end, step, out));
}
static of_status inv_slice(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_dim3);
  RUN1(of_slice(ins[0], a->dim, a->a, a->b, a->c, R));
}
of_status of_select(of_tensor *t, int32_t dim, int64_t index, of_tensor **out) {
  OF_TRACED(of_impl_select(t, dim, index, out), rec_dim3(OPK_SELECT, t, dim, index, 0, 0, out));
}
static of_status inv_select(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_dim3);
  RUN1(of_select(ins[0], a->dim, a->a, R));
}

static of_status rec_i1(int32_t op, of_tensor *t, int32_t v, of_tensor **out) {
  a_i1 a = {v, 0};
  return REC(op, a, &t, 1, out, 1);
}
static void d_i1(const void *p, char *b, size_t c) { catf(b, c, "%d", (int)((const a_i1 *)p)->v); }
static void d_dtype(const void *p, char *b, size_t c) {
  catf(b, c, "%s", of_dtype_name(((const a_i1 *)p)->v));
}
of_status of_unsqueeze(of_tensor *t, int32_t dim, of_tensor **out) {
  OF_TRACED(of_impl_unsqueeze(t, dim, out), rec_i1(OPK_UNSQUEEZE, t, dim, out));
}
static of_status inv_unsqueeze(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_i1);
  RUN1(of_unsqueeze(ins[0], a->v, R));
}
of_status of_squeeze(of_tensor *t, int32_t dim, of_tensor **out) {
  OF_TRACED(of_impl_squeeze(t, dim, out), rec_i1(OPK_SQUEEZE, t, dim, out));
}
static of_status inv_squeeze(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_i1);
  RUN1(of_squeeze(ins[0], a->v, R));
}
of_status of_to_dtype(of_tensor *t, of_dtype dt, of_tensor **out) {
  OF_TRACED(of_impl_to_dtype(t, dt, out), rec_i1(OPK_TO_DTYPE, t, dt, out));
}
static of_status inv_to_dtype(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_i1);
  RUN1(of_to_dtype(ins[0], a->v, R));
}

static of_status rec_none(int32_t op, of_tensor *t, of_tensor **out) {
  a_i1 a = {0, 0};
  return REC(op, a, &t, 1, out, 1);
}
of_status of_contiguous(of_tensor *t, of_tensor **out) {
  OF_TRACED(of_impl_contiguous(t, out), rec_none(OPK_CONTIGUOUS, t, out));
}
static of_status inv_contiguous(of_gnode *n, of_tensor **ins, void **outs) {
  (void)n;
  RUN1(of_contiguous(ins[0], R));
}
of_status of_clone(of_tensor *t, of_tensor **out) {
  OF_TRACED(of_impl_clone(t, out), rec_none(OPK_CLONE, t, out));
}
static of_status inv_clone(of_gnode *n, of_tensor **ins, void **outs) {
  (void)n;
  RUN1(of_clone(ins[0], R));
}
of_status of_detach(of_tensor *t, of_tensor **out) {
  OF_TRACED(of_impl_detach(t, out), rec_none(OPK_DETACH, t, out));
}
static of_status inv_detach(of_gnode *n, of_tensor **ins, void **outs) {
  (void)n;
  RUN1(of_detach(ins[0], R));
}

static int32_t mut_first(const void *a, int32_t nin, int32_t *idx) {
  (void)a;
  (void)nin;
  idx[0] = 0;
  return 1;
}
static of_status rec_copy_(of_tensor *dst, of_tensor *src) {
  a_i1 a = {0, 0};
  of_tensor *ins[2] = {dst, src};
  return REC(OPK_COPY_, a, ins, 2, NULL, 0);
}
of_status of_copy_(of_tensor *dst, of_tensor *src) {
  OF_TRACED(of_impl_copy_(dst, src), rec_copy_(dst, src));
}
static of_status inv_copy_(of_gnode *n, of_tensor **ins, void **outs) {
  (void)n;
  (void)outs;
  return of_copy_(ins[0], ins[1]);
}

static of_status rec_fill_(of_tensor *t, double v) {
  a_d1 a = {v};
  return REC(OPK_FILL_, a, &t, 1, NULL, 0);
}
of_status of_fill_(of_tensor *t, double value) {
  OF_TRACED(of_impl_fill_(t, value), rec_fill_(t, value));
}
static of_status inv_fill_(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_d1);
  (void)outs;
  return of_fill_(ins[0], a->v);
}
static void d_d1(const void *p, char *b, size_t c) { catf(b, c, "%g", ((const a_d1 *)p)->v); }

/* ================================================================== creation */
static of_status rec_create(int32_t op, const int64_t *shape, int32_t ndim, double v,
                            of_dtype dt, of_device dev, of_tensor **out) {
  a_create a;
  ZERO(a);
  a.ndim = ndim;
  copy_i64(a.shape, shape, ndim);
  a.value = v;
  a.dtype = dt;
  a.device = dev;
  return REC(op, a, NULL, 0, out, 1);
}
static void d_create(const void *p, char *b, size_t c) {
  const a_create *a = p;
  cat_list(b, c, "shape", a->shape, NDIM_OK(a->ndim) ? a->ndim : 0);
  catf(b, c, " value=%g %s", a->value, of_dtype_name(a->dtype));
}
of_status of_empty(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                   of_tensor **out) {
  OF_TRACED(of_impl_empty(shape, ndim, dt, dev, out),
            rec_create(OPK_EMPTY, shape, ndim, 0, dt, dev, out));
}
of_status of_zeros(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                   of_tensor **out) {
  OF_TRACED(of_impl_zeros(shape, ndim, dt, dev, out),
            rec_create(OPK_ZEROS, shape, ndim, 0, dt, dev, out));
}
of_status of_full(const int64_t *shape, int32_t ndim, double value, of_dtype dt,
                  of_device dev, of_tensor **out) {
  OF_TRACED(of_impl_full(shape, ndim, value, dt, dev, out),
            rec_create(OPK_FULL, shape, ndim, value, dt, dev, out));
}
of_status of_rand(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                  of_tensor **out) {
  OF_TRACED(of_impl_rand(shape, ndim, dt, dev, out),
            rec_create(OPK_RAND, shape, ndim, 0, dt, dev, out));
}
of_status of_randn(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                   of_tensor **out) {
  OF_TRACED(of_impl_randn(shape, ndim, dt, dev, out),
            rec_create(OPK_RANDN, shape, ndim, 0, dt, dev, out));
}
static of_status inv_create(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_create);
  (void)ins;
  NEED(NDIM_OK(a->ndim), "ndim");
  of_tensor *r_ = NULL;
  of_status st;
  switch (n->op) {
    case OPK_EMPTY: st = of_empty(a->shape, a->ndim, a->dtype, a->device, &r_); break;
    case OPK_ZEROS: st = of_zeros(a->shape, a->ndim, a->dtype, a->device, &r_); break;
    case OPK_FULL: st = of_full(a->shape, a->ndim, a->value, a->dtype, a->device, &r_); break;
    case OPK_RAND: st = of_rand(a->shape, a->ndim, a->dtype, a->device, &r_); break;
    default: st = of_randn(a->shape, a->ndim, a->dtype, a->device, &r_); break;
  }
  if (st == OF_OK) outs[0] = r_;
  return st;
}

static of_status rec_range(int32_t op, double x, double y, double z, of_dtype dt,
                           of_device dev, of_tensor **out) {
  a_range a;
  ZERO(a);
  a.a = x;
  a.b = y;
  a.c = z;
  a.dtype = dt;
  a.device = dev;
  return REC(op, a, NULL, 0, out, 1);
}
static void d_range(const void *p, char *b, size_t c) {
  const a_range *a = p;
  catf(b, c, "%g,%g,%g %s", a->a, a->b, a->c, of_dtype_name(a->dtype));
}
of_status of_eye(int64_t n, int64_t m, of_dtype dt, of_device dev, of_tensor **out) {
  OF_TRACED(of_impl_eye(n, m, dt, dev, out),
            rec_range(OPK_EYE, (double)n, (double)m, 0, dt, dev, out));
}
of_status of_arange(double start, double end, double step, of_dtype dt, of_device dev,
                    of_tensor **out) {
  OF_TRACED(of_impl_arange(start, end, step, dt, dev, out),
            rec_range(OPK_ARANGE, start, end, step, dt, dev, out));
}
of_status of_linspace(double start, double end, int64_t steps, of_dtype dt, of_device dev,
                      of_tensor **out) {
  OF_TRACED(of_impl_linspace(start, end, steps, dt, dev, out),
            rec_range(OPK_LINSPACE, start, end, (double)steps, dt, dev, out));
}
static of_status inv_range(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_range);
  (void)ins;
  of_tensor *r_ = NULL;
  of_status st;
  if (n->op == OPK_EYE) st = of_eye((int64_t)a->a, (int64_t)a->b, a->dtype, a->device, &r_);
  else if (n->op == OPK_ARANGE) st = of_arange(a->a, a->b, a->c, a->dtype, a->device, &r_);
  else st = of_linspace(a->a, a->b, (int64_t)a->c, a->dtype, a->device, &r_);
  if (st == OF_OK) outs[0] = r_;
  return st;
}

/* Host data: the result is bound as a constant, not replayed. */
#define CONSTANT(CALL)                                                  \
  do {                                                                  \
    of_status st_ = CALL;                                               \
    if (st_ != OF_OK || !of_trace_tls || of_trace_depth > 0) return st_; \
    return of_trace_constant(*out);                                     \
  } while (0)
of_status of_from_doubles(const double *values, const int64_t *shape, int32_t ndim,
                          of_dtype dt, of_tensor **out) {
  CONSTANT(of_impl_from_doubles(values, shape, ndim, dt, out));
}
of_status of_from_buffer(const void *data, const int64_t *shape, int32_t ndim, of_dtype dt,
                         of_tensor **out) {
  CONSTANT(of_impl_from_buffer(data, shape, ndim, dt, out));
}
of_status of_from_blob(void *data, const int64_t *shape, const int64_t *strides, int32_t ndim,
                       of_dtype dt, of_deleter deleter, void *ctx, of_tensor **out) {
  CONSTANT(of_impl_from_blob(data, shape, strides, ndim, dt, deleter, ctx, out));
}

/* Reading values: an op reading its own inputs is fine (depth > 0). */
of_status of_tensor_get_flat(const of_tensor *t, int64_t i, double *out) {
  if (__builtin_expect(of_trace_tls != NULL, 0) && of_trace_depth == 0)
    OF_CHECK(of_trace_data_read(t));
  return of_impl_tensor_get_flat(t, i, out);
}
of_status of_tensor_to_doubles(const of_tensor *t, double *buf, int64_t n) {
  if (__builtin_expect(of_trace_tls != NULL, 0) && of_trace_depth == 0)
    OF_CHECK(of_trace_data_read(t));
  return of_impl_tensor_to_doubles(t, buf, n);
}

/* ================================================================ elementwise */
static of_status rec_binary(of_binary_op op, of_tensor *x, of_tensor *y, of_tensor *into,
                            of_tensor **out) {
  a_binary a = {op, 0};
  of_tensor *ins[3] = {x, y, into};
  return REC(OPK_BINARY, a, ins, into ? 3 : 2, out, 1);
}
of_status of_binary(of_binary_op op, of_tensor *a, of_tensor *b, of_tensor *into,
                    of_tensor **out) {
  OF_TRACED(of_impl_binary(op, a, b, into, out), rec_binary(op, a, b, into, out));
}
static of_status inv_binary(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_binary);
  RUN1(of_binary(a->op, ins[0], ins[1], n->nin > 2 ? ins[2] : NULL, R));
}
static void d_binary(const void *p, char *b, size_t c) {
  catf(b, c, "%s", of_binary_name(((const a_binary *)p)->op));
}

static of_status rec_binary_scalar(of_binary_op op, of_tensor *x, double s, int32_t reverse,
                                   of_tensor *into, of_tensor **out) {
  a_binary_scalar a;
  ZERO(a);
  a.op = op;
  a.s = s;
  a.reverse = reverse;
  of_tensor *ins[2] = {x, into};
  return REC(OPK_BINARY_SCALAR, a, ins, into ? 2 : 1, out, 1);
}
of_status of_binary_scalar(of_binary_op op, of_tensor *a, double s, int32_t reverse,
                           of_tensor *into, of_tensor **out) {
  OF_TRACED(of_impl_binary_scalar(op, a, s, reverse, into, out),
            rec_binary_scalar(op, a, s, reverse, into, out));
}
static of_status inv_binary_scalar(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_binary_scalar);
  RUN1(of_binary_scalar(a->op, ins[0], a->s, a->reverse, n->nin > 1 ? ins[1] : NULL, R));
}
static void d_binary_scalar(const void *p, char *b, size_t c) {
  const a_binary_scalar *a = p;
  if (a->reverse) catf(b, c, "%g %s x", a->s, of_binary_name(a->op));
  else catf(b, c, "x %s %g", of_binary_name(a->op), a->s);
}

static of_status rec_unary(of_unary_op op, of_tensor *x, of_tensor *into, of_tensor **out) {
  a_unary a = {op, 0};
  of_tensor *ins[2] = {x, into};
  return REC(OPK_UNARY, a, ins, into ? 2 : 1, out, 1);
}
of_status of_unary(of_unary_op op, of_tensor *x, of_tensor *into, of_tensor **out) {
  OF_TRACED(of_impl_unary(op, x, into, out), rec_unary(op, x, into, out));
}
static of_status inv_unary(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_unary);
  RUN1(of_unary(a->op, ins[0], n->nin > 1 ? ins[1] : NULL, R));
}
static void d_unary(const void *p, char *b, size_t c) {
  catf(b, c, "%s", of_unary_name(((const a_unary *)p)->op));
}

static of_status rec_clamp(of_tensor *x, double lo, double hi, int32_t has_lo, int32_t has_hi,
                           of_tensor *into, of_tensor **out) {
  a_clamp a;
  ZERO(a);
  a.lo = lo;
  a.hi = hi;
  a.has_lo = has_lo;
  a.has_hi = has_hi;
  of_tensor *ins[2] = {x, into};
  return REC(OPK_CLAMP, a, ins, into ? 2 : 1, out, 1);
}
of_status of_clamp(of_tensor *x, double lo, double hi, int32_t has_lo, int32_t has_hi,
                   of_tensor *into, of_tensor **out) {
  OF_TRACED(of_impl_clamp(x, lo, hi, has_lo, has_hi, into, out),
            rec_clamp(x, lo, hi, has_lo, has_hi, into, out));
}
static of_status inv_clamp(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_clamp);
  RUN1(of_clamp(ins[0], a->lo, a->hi, a->has_lo, a->has_hi, n->nin > 1 ? ins[1] : NULL, R));
}
static void d_clamp(const void *p, char *b, size_t c) {
  const a_clamp *a = p;
  if (a->has_lo) catf(b, c, "min=%g", a->lo);
  if (a->has_hi) catf(b, c, "%smax=%g", a->has_lo ? " " : "", a->hi);
}

static of_status rec_leaky(of_tensor *x, double slope, of_tensor *into, of_tensor **out) {
  a_leaky a = {slope};
  of_tensor *ins[2] = {x, into};
  return REC(OPK_LEAKY_RELU, a, ins, into ? 2 : 1, out, 1);
}
of_status of_leaky_relu(of_tensor *x, double slope, of_tensor *into, of_tensor **out) {
  OF_TRACED(of_impl_leaky_relu(x, slope, into, out), rec_leaky(x, slope, into, out));
}
static of_status inv_leaky(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_leaky);
  RUN1(of_leaky_relu(ins[0], a->slope, n->nin > 1 ? ins[1] : NULL, R));
}

static of_status rec_where(of_tensor *c, of_tensor *x, of_tensor *y, of_tensor **out) {
  a_i1 a = {0, 0};
  of_tensor *ins[3] = {c, x, y};
  return REC(OPK_WHERE, a, ins, 3, out, 1);
}
of_status of_where(of_tensor *cond, of_tensor *a, of_tensor *b, of_tensor **out) {
  OF_TRACED(of_impl_where(cond, a, b, out), rec_where(cond, a, b, out));
}
static of_status inv_where(of_gnode *n, of_tensor **ins, void **outs) {
  (void)n;
  RUN1(of_where(ins[0], ins[1], ins[2], R));
}

static of_status rec_masked_fill(of_tensor *x, of_tensor *mask, double v, of_tensor *into,
                                 of_tensor **out) {
  a_masked_fill a = {v};
  of_tensor *ins[3] = {x, mask, into};
  return REC(OPK_MASKED_FILL, a, ins, into ? 3 : 2, out, 1);
}
of_status of_masked_fill(of_tensor *x, of_tensor *mask, double value, of_tensor *into,
                         of_tensor **out) {
  OF_TRACED(of_impl_masked_fill(x, mask, value, into, out),
            rec_masked_fill(x, mask, value, into, out));
}
static of_status inv_masked_fill(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_masked_fill);
  RUN1(of_masked_fill(ins[0], ins[1], a->value, n->nin > 2 ? ins[2] : NULL, R));
}

/* ================================================================ reductions */
static of_status rec_reduce(of_reduce_op op, of_tensor *x, const int32_t *dims, int32_t ndims,
                            int32_t keepdim, double p, of_dtype dt, of_tensor **out) {
  a_reduce a;
  ZERO(a);
  a.op = op;
  a.ndims = ndims;
  copy_i32(a.dims, dims, ndims);
  a.keepdim = keepdim;
  a.p = p;
  a.dtype = dt;
  return REC(OPK_REDUCE, a, &x, 1, out, 1);
}
of_status of_reduce(of_reduce_op op, of_tensor *x, const int32_t *dims, int32_t ndims,
                    int32_t keepdim, double p, of_dtype dt, of_tensor **out) {
  if (dt < 0 && (op == OF_RED_SUM || op == OF_RED_MEAN || op == OF_RED_PROD ||
                 op == OF_RED_LOGSUMEXP || op == OF_RED_NORM))
    AMP(OF_AMP_F32, of_reduce(op, A_[0], dims, ndims, keepdim, p, dt, out), x);
  OF_TRACED(of_impl_reduce(op, x, dims, ndims, keepdim, p, dt, out),
            rec_reduce(op, x, dims, ndims, keepdim, p, dt, out));
}
static of_status inv_reduce(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_reduce);
  NEED(NDIM_OK(a->ndims), "ndims");
  RUN1(of_reduce(a->op, ins[0], a->dims, a->ndims, a->keepdim, a->p, a->dtype, R));
}
static void d_reduce(const void *p, char *b, size_t c) {
  const a_reduce *a = p;
  catf(b, c, "%s dims=", of_reduce_name(a->op));
  if (a->ndims == 0) catf(b, c, "all");
  for (int32_t i = 0; i < (NDIM_OK(a->ndims) ? a->ndims : 0); i++)
    catf(b, c, "%s%d", i ? "," : "", a->dims[i]);
  if (a->keepdim) catf(b, c, " keepdim");
}

static of_status rec_max_dim(of_tensor *x, int32_t dim, int32_t keepdim, int32_t is_max,
                             int64_t base, of_tensor **values, of_tensor **indices) {
  a_max_dim a;
  ZERO(a);
  a.dim = dim;
  a.keepdim = keepdim;
  a.is_max = is_max;
  a.base = base;
  of_tensor *outs[2] = {*values, *indices};
  of_status st = REC(OPK_MAX_DIM, a, &x, 1, outs, 2);
  return st;
}
of_status of_max_dim(of_tensor *x, int32_t dim, int32_t keepdim, int32_t is_max,
                     int64_t index_base, of_tensor **values, of_tensor **indices) {
  OF_TRACED(of_impl_max_dim(x, dim, keepdim, is_max, index_base, values, indices),
            rec_max_dim(x, dim, keepdim, is_max, index_base, values, indices));
}
static of_status inv_max_dim(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_max_dim);
  of_tensor *v = NULL, *i = NULL;
  of_status st = of_max_dim(ins[0], a->dim, a->keepdim, a->is_max, a->base, &v, &i);
  if (st == OF_OK) { outs[0] = v; outs[1] = i; }
  return st;
}

static of_status rec_argmax(of_tensor *x, int32_t dim, int32_t keepdim, int32_t is_max,
                            int64_t base, of_tensor **out) {
  a_max_dim a;
  ZERO(a);
  a.dim = dim;
  a.keepdim = keepdim;
  a.is_max = is_max;
  a.base = base;
  return REC(OPK_ARGMAX, a, &x, 1, out, 1);
}
of_status of_argmax(of_tensor *x, int32_t dim, int32_t keepdim, int32_t is_max,
                    int64_t index_base, of_tensor **out) {
  OF_TRACED(of_impl_argmax(x, dim, keepdim, is_max, index_base, out),
            rec_argmax(x, dim, keepdim, is_max, index_base, out));
}
static of_status inv_argmax(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_max_dim);
  RUN1(of_argmax(ins[0], a->dim, a->keepdim, a->is_max, a->base, R));
}
static void d_max_dim(const void *p, char *b, size_t c) {
  const a_max_dim *a = p;
  catf(b, c, "%s dim=%d%s", a->is_max ? "max" : "min", (int)a->dim, a->keepdim ? " keepdim" : "");
}

static of_status rec_var(of_tensor *x, const int32_t *dims, int32_t ndims, double corr,
                         int32_t keepdim, int32_t is_std, of_tensor **out) {
  a_var a;
  ZERO(a);
  a.ndims = ndims;
  copy_i32(a.dims, dims, ndims);
  a.correction = corr;
  a.keepdim = keepdim;
  a.is_std = is_std;
  return REC(OPK_VAR, a, &x, 1, out, 1);
}
of_status of_var(of_tensor *x, const int32_t *dims, int32_t ndims, double correction,
                 int32_t keepdim, int32_t is_std, of_tensor **out) {
  AMP(OF_AMP_F32, of_var(A_[0], dims, ndims, correction, keepdim, is_std, out), x);
  OF_TRACED(of_impl_var(x, dims, ndims, correction, keepdim, is_std, out),
            rec_var(x, dims, ndims, correction, keepdim, is_std, out));
}
static of_status inv_var(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_var);
  NEED(NDIM_OK(a->ndims), "ndims");
  RUN1(of_var(ins[0], a->dims, a->ndims, a->correction, a->keepdim, a->is_std, R));
}

static of_status rec_softmax(int32_t op, of_tensor *x, int32_t dim, int32_t flag,
                             of_tensor **out) {
  a_softmax a = {dim, flag};
  return REC(op, a, &x, 1, out, 1);
}
of_status of_softmax(of_tensor *x, int32_t dim, int32_t log, of_tensor **out) {
  AMP(OF_AMP_F32, of_softmax(A_[0], dim, log, out), x);
  OF_TRACED(of_impl_softmax(x, dim, log, out), rec_softmax(OPK_SOFTMAX, x, dim, log, out));
}
static of_status inv_softmax(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_softmax);
  RUN1(of_softmax(ins[0], a->dim, a->flag, R));
}
of_status of_cumulative(of_tensor *x, int32_t dim, int32_t is_prod, of_tensor **out) {
  AMP(OF_AMP_F32, of_cumulative(A_[0], dim, is_prod, out), x);
  OF_TRACED(of_impl_cumulative(x, dim, is_prod, out),
            rec_softmax(OPK_CUMULATIVE, x, dim, is_prod, out));
}
static of_status inv_cumulative(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_softmax);
  RUN1(of_cumulative(ins[0], a->dim, a->flag, R));
}
static void d_softmax(const void *p, char *b, size_t c) {
  const a_softmax *a = p;
  catf(b, c, "dim=%d flag=%d", (int)a->dim, (int)a->flag);
}

/* ==================================================================== matmul */
static of_status rec_mm(int32_t op, of_tensor *x, of_tensor *y, of_tensor *into,
                        of_tensor **out) {
  a_i1 a = {0, 0};
  of_tensor *ins[3] = {x, y, into};
  return REC(op, a, ins, into ? 3 : 2, out, 1);
}
of_status of_matmul(of_tensor *a, of_tensor *b, of_tensor **out) {
  AMP(OF_AMP_LOW, of_matmul(A_[0], A_[1], out), a, b);
  OF_TRACED(of_impl_matmul(a, b, out), rec_mm(OPK_MATMUL, a, b, NULL, out));
}
of_status of_mm(of_tensor *a, of_tensor *b, of_tensor *into, of_tensor **out) {
  if (!into) AMP(OF_AMP_LOW, of_mm(A_[0], A_[1], NULL, out), a, b);
  OF_TRACED(of_impl_mm(a, b, into, out), rec_mm(OPK_MM, a, b, into, out));
}
of_status of_bmm(of_tensor *a, of_tensor *b, of_tensor **out) {
  AMP(OF_AMP_LOW, of_bmm(A_[0], A_[1], out), a, b);
  OF_TRACED(of_impl_bmm(a, b, out), rec_mm(OPK_BMM, a, b, NULL, out));
}
static of_status inv_mm(of_gnode *n, of_tensor **ins, void **outs) {
  of_tensor *r_ = NULL;
  of_status st;
  if (n->op == OPK_MATMUL) st = of_matmul(ins[0], ins[1], &r_);
  else if (n->op == OPK_BMM) st = of_bmm(ins[0], ins[1], &r_);
  else st = of_mm(ins[0], ins[1], n->nin > 2 ? ins[2] : NULL, &r_);
  if (st == OF_OK) outs[0] = r_;
  return st;
}
static of_status rec_addmm(of_tensor *c, of_tensor *x, of_tensor *y, double beta, double alpha,
                           of_tensor **out) {
  a_addmm a = {beta, alpha};
  of_tensor *ins[3] = {c, x, y};
  return REC(OPK_ADDMM, a, ins, 3, out, 1);
}
of_status of_addmm(of_tensor *c, of_tensor *a, of_tensor *b, double beta, double alpha,
                   of_tensor **out) {
  AMP(OF_AMP_LOW, of_addmm(A_[0], A_[1], A_[2], beta, alpha, out), c, a, b);
  OF_TRACED(of_impl_addmm(c, a, b, beta, alpha, out), rec_addmm(c, a, b, beta, alpha, out));
}
static of_status inv_addmm(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_addmm);
  RUN1(of_addmm(ins[0], ins[1], ins[2], a->beta, a->alpha, R));
}

/* ============================================================ shape / index */
static of_status rec_cat(int32_t op, of_tensor **ts, int32_t n, int32_t dim, of_tensor **out) {
  a_i1 a = {dim, 0};
  return REC(op, a, ts, n, out, 1);
}
of_status of_cat(of_tensor **ts, int32_t n, int32_t dim, of_tensor **out) {
  OF_TRACED(of_impl_cat(ts, n, dim, out), rec_cat(OPK_CAT, ts, n, dim, out));
}
of_status of_stack(of_tensor **ts, int32_t n, int32_t dim, of_tensor **out) {
  OF_TRACED(of_impl_stack(ts, n, dim, out), rec_cat(OPK_STACK, ts, n, dim, out));
}
static of_status inv_cat(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_i1);
  for (int32_t k = 0; k < n->nin; k++) NEED(ins[k], "input");
  if (n->op == OPK_CAT) RUN1(of_cat(ins, n->nin, a->v, R));
  RUN1(of_stack(ins, n->nin, a->v, R));
}

static of_status rec_gather(int32_t op, of_tensor *x, int32_t dim, of_tensor *idx, int64_t base,
                            of_tensor **out) {
  a_gather a;
  ZERO(a);
  a.dim = dim;
  a.base = base;
  of_tensor *ins[2] = {x, idx};
  return REC(op, a, ins, 2, out, 1);
}
of_status of_gather(of_tensor *x, int32_t dim, of_tensor *index, int64_t index_base,
                    of_tensor **out) {
  OF_TRACED(of_impl_gather(x, dim, index, index_base, out),
            rec_gather(OPK_GATHER, x, dim, index, index_base, out));
}
of_status of_index_select(of_tensor *x, int32_t dim, of_tensor *index, int64_t index_base,
                          of_tensor **out) {
  OF_TRACED(of_impl_index_select(x, dim, index, index_base, out),
            rec_gather(OPK_INDEX_SELECT, x, dim, index, index_base, out));
}
static of_status inv_gather(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_gather);
  if (n->op == OPK_GATHER) RUN1(of_gather(ins[0], a->dim, ins[1], a->base, R));
  RUN1(of_index_select(ins[0], a->dim, ins[1], a->base, R));
}
static void d_gather(const void *p, char *b, size_t c) {
  catf(b, c, "dim=%d", (int)((const a_gather *)p)->dim);
}

static of_status rec_scatter(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src,
                             double value, int32_t use_value, int32_t reduce, int64_t base,
                             of_tensor *into, of_tensor **out) {
  a_scatter a;
  ZERO(a);
  a.dim = dim;
  a.value = value;
  a.use_value = use_value;
  a.reduce = reduce;
  a.base = base;
  a.has_src = src != NULL;
  of_tensor *ins[4] = {x, index, src, into};
  return REC(OPK_SCATTER, a, ins, into ? 4 : 3, out, 1);
}
of_status of_scatter(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src, double value,
                     int32_t use_value, int32_t reduce, int64_t index_base, of_tensor *into,
                     of_tensor **out) {
  OF_TRACED(of_impl_scatter(x, dim, index, src, value, use_value, reduce, index_base, into, out),
            rec_scatter(x, dim, index, src, value, use_value, reduce, index_base, into, out));
}
static of_status inv_scatter(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_scatter);
  RUN1(of_scatter(ins[0], a->dim, ins[1], ins[2], a->value, a->use_value, a->reduce, a->base,
                  n->nin > 3 ? ins[3] : NULL, R));
}

static of_status rec_index_add(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src,
                               double alpha, int64_t base, of_tensor *into, of_tensor **out) {
  a_index_add a;
  ZERO(a);
  a.dim = dim;
  a.alpha = alpha;
  a.base = base;
  of_tensor *ins[4] = {x, index, src, into};
  return REC(OPK_INDEX_ADD, a, ins, into ? 4 : 3, out, 1);
}
of_status of_index_add(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src, double alpha,
                       int64_t index_base, of_tensor *into, of_tensor **out) {
  OF_TRACED(of_impl_index_add(x, dim, index, src, alpha, index_base, into, out),
            rec_index_add(x, dim, index, src, alpha, index_base, into, out));
}
static of_status inv_index_add(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_index_add);
  RUN1(of_index_add(ins[0], a->dim, ins[1], ins[2], a->alpha, a->base,
                    n->nin > 3 ? ins[3] : NULL, R));
}

static of_status rec_sort(int32_t op, of_tensor *x, int64_t k, int32_t dim, int32_t f1,
                          int32_t f2, int64_t base, of_tensor **values, of_tensor **indices) {
  a_sort a;
  ZERO(a);
  a.k = k;
  a.dim = dim;
  a.flag1 = f1;
  a.flag2 = f2;
  a.base = base;
  of_tensor *outs[2] = {*values, *indices};
  return REC(op, a, &x, 1, outs, 2);
}
of_status of_sort(of_tensor *x, int32_t dim, int32_t descending, int32_t stable,
                  int64_t index_base, of_tensor **values, of_tensor **indices) {
  OF_TRACED(of_impl_sort(x, dim, descending, stable, index_base, values, indices),
            rec_sort(OPK_SORT, x, 0, dim, descending, stable, index_base, values, indices));
}
of_status of_topk(of_tensor *x, int64_t k, int32_t dim, int32_t largest, int32_t sorted,
                  int64_t index_base, of_tensor **values, of_tensor **indices) {
  OF_TRACED(of_impl_topk(x, k, dim, largest, sorted, index_base, values, indices),
            rec_sort(OPK_TOPK, x, k, dim, largest, sorted, index_base, values, indices));
}
static of_status inv_sort(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_sort);
  of_tensor *v = NULL, *i = NULL;
  of_status st = n->op == OPK_SORT
                     ? of_sort(ins[0], a->dim, a->flag1, a->flag2, a->base, &v, &i)
                     : of_topk(ins[0], a->k, a->dim, a->flag1, a->flag2, a->base, &v, &i);
  if (st == OF_OK) { outs[0] = v; outs[1] = i; }
  return st;
}

static of_status rec_tri(of_tensor *x, int64_t k, int32_t upper, of_tensor **out) {
  a_tri a;
  ZERO(a);
  a.k = k;
  a.upper = upper;
  return REC(OPK_TRI, a, &x, 1, out, 1);
}
of_status of_tri(of_tensor *x, int64_t k, int32_t upper, of_tensor **out) {
  OF_TRACED(of_impl_tri(x, k, upper, out), rec_tri(x, k, upper, out));
}
static of_status inv_tri(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_tri);
  RUN1(of_tri(ins[0], a->k, a->upper, R));
}

static of_status rec_flip(of_tensor *x, const int32_t *dims, int32_t ndims, of_tensor **out) {
  a_dims a;
  ZERO(a);
  a.n = ndims;
  copy_i32(a.dims, dims, ndims);
  return REC(OPK_FLIP, a, &x, 1, out, 1);
}
of_status of_flip(of_tensor *x, const int32_t *dims, int32_t ndims, of_tensor **out) {
  OF_TRACED(of_impl_flip(x, dims, ndims, out), rec_flip(x, dims, ndims, out));
}
static of_status inv_flip(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_dims);
  NEED(NDIM_OK(a->n), "ndims");
  RUN1(of_flip(ins[0], a->dims, a->n, R));
}

static of_status rec_roll(int32_t op, of_tensor *x, const int64_t *shifts, const int32_t *dims,
                          int32_t n, of_tensor **out) {
  a_roll a;
  ZERO(a);
  a.n = n;
  copy_i64(a.shifts, shifts, n);
  copy_i32(a.dims, dims, dims ? n : 0);
  return REC(op, a, &x, 1, out, 1);
}
of_status of_roll(of_tensor *x, const int64_t *shifts, const int32_t *dims, int32_t n,
                  of_tensor **out) {
  OF_TRACED(of_impl_roll(x, shifts, dims, n, out), rec_roll(OPK_ROLL, x, shifts, dims, n, out));
}
of_status of_repeat(of_tensor *x, const int64_t *repeats, int32_t n, of_tensor **out) {
  OF_TRACED(of_impl_repeat(x, repeats, n, out), rec_roll(OPK_REPEAT, x, repeats, NULL, n, out));
}
static of_status inv_roll(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_roll);
  NEED(NDIM_OK(a->n), "count");
  if (n->op == OPK_REPEAT) RUN1(of_repeat(ins[0], a->shifts, a->n, R));
  RUN1(of_roll(ins[0], a->shifts, a->dims, a->n, R));
}

static of_status rec_one_hot(int32_t op, of_tensor *x, int64_t v, int64_t base, of_tensor **out) {
  a_one_hot a = {v, base};
  return REC(op, a, &x, 1, out, 1);
}
of_status of_one_hot(of_tensor *index, int64_t num_classes, int64_t index_base,
                     of_tensor **out) {
  OF_TRACED(of_impl_one_hot(index, num_classes, index_base, out),
            rec_one_hot(OPK_ONE_HOT, index, num_classes, index_base, out));
}
of_status of_nonzero(of_tensor *x, int64_t index_base, of_tensor **out) {
  OF_TRACED(of_impl_nonzero(x, index_base, out), rec_one_hot(OPK_NONZERO, x, 0, index_base, out));
}
static of_status inv_one_hot(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_one_hot);
  if (n->op == OPK_ONE_HOT) RUN1(of_one_hot(ins[0], a->n, a->base, R));
  RUN1(of_nonzero(ins[0], a->base, R));
}

static of_status rec_masked_select(of_tensor *x, of_tensor *mask, of_tensor **out) {
  a_i1 a = {0, 0};
  of_tensor *ins[2] = {x, mask};
  return REC(OPK_MASKED_SELECT, a, ins, 2, out, 1);
}
of_status of_masked_select(of_tensor *x, of_tensor *mask, of_tensor **out) {
  OF_TRACED(of_impl_masked_select(x, mask, out), rec_masked_select(x, mask, out));
}
static of_status inv_masked_select(of_gnode *n, of_tensor **ins, void **outs) {
  (void)n;
  RUN1(of_masked_select(ins[0], ins[1], R));
}

/* ==================================================================== random */
static of_status rec_rand_(int32_t op, of_tensor *t, double x, double y) {
  a_rand2 a = {x, y};
  return REC(op, a, &t, 1, NULL, 0);
}
of_status of_uniform_(of_tensor *t, double lo, double hi) {
  OF_TRACED(of_impl_uniform_(t, lo, hi), rec_rand_(OPK_UNIFORM_, t, lo, hi));
}
of_status of_normal_(of_tensor *t, double mean, double std) {
  OF_TRACED(of_impl_normal_(t, mean, std), rec_rand_(OPK_NORMAL_, t, mean, std));
}
of_status of_randint_(of_tensor *t, int64_t lo, int64_t hi) {
  OF_TRACED(of_impl_randint_(t, lo, hi), rec_rand_(OPK_RANDINT_, t, (double)lo, (double)hi));
}
of_status of_bernoulli_(of_tensor *t, double p) {
  OF_TRACED(of_impl_bernoulli_(t, p), rec_rand_(OPK_BERNOULLI_, t, p, 0));
}
static of_status inv_rand_(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_rand2);
  (void)outs;
  switch (n->op) {
    case OPK_UNIFORM_: return of_uniform_(ins[0], a->a, a->b);
    case OPK_NORMAL_: return of_normal_(ins[0], a->a, a->b);
    case OPK_RANDINT_: return of_randint_(ins[0], (int64_t)a->a, (int64_t)a->b);
    default: return of_bernoulli_(ins[0], a->a);
  }
}
static void d_rand2(const void *p, char *b, size_t c) {
  const a_rand2 *a = p;
  catf(b, c, "%g,%g", a->a, a->b);
}
static of_status rec_bernoulli(of_tensor *p, of_tensor **out) {
  a_i1 a = {0, 0};
  return REC(OPK_BERNOULLI, a, &p, 1, out, 1);
}
of_status of_bernoulli(of_tensor *p, of_tensor **out) {
  OF_TRACED(of_impl_bernoulli(p, out), rec_bernoulli(p, out));
}
static of_status inv_bernoulli(of_gnode *n, of_tensor **ins, void **outs) {
  (void)n;
  RUN1(of_bernoulli(ins[0], R));
}
static of_status rec_randperm(int64_t n, int64_t base, of_dtype dt, of_tensor **out) {
  a_randperm a;
  ZERO(a);
  a.n = n;
  a.base = base;
  a.dtype = dt;
  return REC(OPK_RANDPERM, a, NULL, 0, out, 1);
}
of_status of_randperm(int64_t n, int64_t index_base, of_dtype dt, of_tensor **out) {
  OF_TRACED(of_impl_randperm(n, index_base, dt, out), rec_randperm(n, index_base, dt, out));
}
static of_status inv_randperm(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_randperm);
  (void)ins;
  RUN1(of_randperm(a->n, a->base, a->dtype, R));
}

/* ====================================================================== conv */
static void conv_pack(a_conv *a, const int64_t *stride, const int64_t *padding,
                      const int64_t *dilation, const int64_t *extra, int32_t nsp, int64_t groups) {
  memset(a, 0, sizeof *a);
  int32_t k = nsp >= 0 && nsp <= 3 ? nsp : 0;
  a->nsp = nsp;
  a->groups = groups;
  if (stride) { a->has |= 1; copy_i64(a->stride, stride, k); }
  if (padding) { a->has |= 2; copy_i64(a->padding, padding, k); }
  if (dilation) { a->has |= 4; copy_i64(a->dilation, dilation, k); }
  if (extra) { a->has |= 8; copy_i64(a->extra, extra, k); }
}
#define OPT(bit, arr) ((a->has & (bit)) ? a->arr : NULL)
static void d_conv(const void *p, char *b, size_t c) {
  const a_conv *a = p;
  int32_t k = a->nsp >= 0 && a->nsp <= 3 ? a->nsp : 0;
  catf(b, c, "nsp=%d", (int)a->nsp);
  if (a->has & 1) cat_list(b, c, "stride", a->stride, k);
  if (a->has & 2) cat_list(b, c, "padding", a->padding, k);
  if (a->has & 4) cat_list(b, c, "dilation", a->dilation, k);
  if (a->groups != 1) catf(b, c, " groups=%lld", (long long)a->groups);
}
static of_status rec_conv(int32_t op, of_tensor *x, of_tensor *w, of_tensor *bias,
                          const int64_t *stride, const int64_t *padding, const int64_t *dilation,
                          const int64_t *extra, int32_t nsp, int64_t groups, of_tensor **out) {
  a_conv a;
  conv_pack(&a, stride, padding, dilation, extra, nsp, groups);
  of_tensor *ins[3] = {x, w, bias};
  return REC(op, a, ins, 3, out, 1);
}
of_status of_conv(of_tensor *x, of_tensor *w, of_tensor *b, const int64_t *stride,
                  const int64_t *padding, const int64_t *dilation, int32_t nsp, int64_t groups,
                  of_tensor **out) {
  AMP(OF_AMP_LOW, of_conv(A_[0], A_[1], A_[2], stride, padding, dilation, nsp, groups, out), x,
      w, b);
  OF_TRACED(of_impl_conv(x, w, b, stride, padding, dilation, nsp, groups, out),
            rec_conv(OPK_CONV, x, w, b, stride, padding, dilation, NULL, nsp, groups, out));
}
of_status of_conv_transpose(of_tensor *x, of_tensor *w, of_tensor *b, const int64_t *stride,
                            const int64_t *padding, const int64_t *output_padding,
                            const int64_t *dilation, int32_t nsp, int64_t groups,
                            of_tensor **out) {
  AMP(OF_AMP_LOW, of_conv_transpose(A_[0], A_[1], A_[2], stride, padding, output_padding, dilation,
                                    nsp, groups, out),
      x, w, b);
  OF_TRACED(of_impl_conv_transpose(x, w, b, stride, padding, output_padding, dilation, nsp,
                                   groups, out),
            rec_conv(OPK_CONV_TRANSPOSE, x, w, b, stride, padding, dilation, output_padding, nsp,
                     groups, out));
}
of_status of_conv_weight_grad(of_tensor *x, of_tensor *grad_out, const int64_t *kernel_size,
                              const int64_t *stride, const int64_t *padding,
                              const int64_t *dilation, int32_t nsp, int64_t groups,
                              of_tensor **out) {
  OF_TRACED(of_impl_conv_weight_grad(x, grad_out, kernel_size, stride, padding, dilation, nsp,
                                     groups, out),
            rec_conv(OPK_CONV_WEIGHT_GRAD, x, grad_out, NULL, stride, padding, dilation,
                     kernel_size, nsp, groups, out));
}
static of_status inv_conv(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_conv);
  NEED(a->nsp >= 1 && a->nsp <= 3, "nsp");
  of_tensor *r_ = NULL;
  of_status st;
  if (n->op == OPK_CONV)
    st = of_conv(ins[0], ins[1], ins[2], OPT(1, stride), OPT(2, padding), OPT(4, dilation),
                 a->nsp, a->groups, &r_);
  else if (n->op == OPK_CONV_TRANSPOSE)
    st = of_conv_transpose(ins[0], ins[1], ins[2], OPT(1, stride), OPT(2, padding),
                           OPT(8, extra), OPT(4, dilation), a->nsp, a->groups, &r_);
  else
    st = of_conv_weight_grad(ins[0], ins[1], OPT(8, extra), OPT(1, stride), OPT(2, padding),
                             OPT(4, dilation), a->nsp, a->groups, &r_);
  if (st == OF_OK) outs[0] = r_;
  return st;
}

/* ====================================================================== pool */
static void pool_pack(a_pool *a, const int64_t *kernel, const int64_t *stride,
                      const int64_t *padding, const int64_t *dilation, int32_t nsp) {
  memset(a, 0, sizeof *a);
  int32_t k = nsp >= 0 && nsp <= 3 ? nsp : 0;
  a->nsp = nsp;
  if (kernel) { a->has |= 1; copy_i64(a->kernel, kernel, k); }
  if (stride) { a->has |= 2; copy_i64(a->stride, stride, k); }
  if (padding) { a->has |= 4; copy_i64(a->padding, padding, k); }
  if (dilation) { a->has |= 8; copy_i64(a->dilation, dilation, k); }
}
static void d_pool(const void *p, char *b, size_t c) {
  const a_pool *a = p;
  int32_t k = a->nsp >= 0 && a->nsp <= 3 ? a->nsp : 0;
  catf(b, c, "nsp=%d", (int)a->nsp);
  if (a->has & 1) cat_list(b, c, "kernel", a->kernel, k);
  if (a->has & 2) cat_list(b, c, "stride", a->stride, k);
  if (a->has & 4) cat_list(b, c, "padding", a->padding, k);
}
/* The indices are recorded even when the caller doesn't want them: the
 * autograd node keeps them for its backward. On failure the record releases
 * both results. */
static of_status pool_max_record(int32_t op, a_pool *a, of_tensor *x, of_tensor **values,
                                 of_tensor **indices, of_tensor *idx_local) {
  of_tensor *outs[2] = {*values, indices ? *indices : idx_local};
  return REC(op, *a, &x, 1, outs, 2);
}
of_status of_max_pool(of_tensor *x, const int64_t *kernel, const int64_t *stride,
                      const int64_t *padding, const int64_t *dilation, int32_t nsp,
                      int32_t ceil_mode, int64_t index_base, of_tensor **values,
                      of_tensor **indices) {
  if (__builtin_expect(of_trace_tls == NULL, 1) || of_trace_depth > 0)
    return of_impl_max_pool(x, kernel, stride, padding, dilation, nsp, ceil_mode, index_base,
                            values, indices);
  of_tensor *idx = NULL;
  of_trace_depth++;
  of_status st = of_impl_max_pool(x, kernel, stride, padding, dilation, nsp, ceil_mode,
                                  index_base, values, indices ? indices : &idx);
  of_trace_depth--;
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
  if (__builtin_expect(of_trace_tls == NULL, 1) || of_trace_depth > 0)
    return of_impl_adaptive_max_pool(x, output_size, nsp, index_base, values, indices);
  of_tensor *idx = NULL;
  of_trace_depth++;
  of_status st = of_impl_adaptive_max_pool(x, output_size, nsp, index_base, values,
                                           indices ? indices : &idx);
  of_trace_depth--;
  if (st != OF_OK) return st;
  a_pool a;
  pool_pack(&a, output_size, NULL, NULL, NULL, nsp);
  a.base = index_base;
  if (indices) a.has |= 16;
  st = pool_max_record(OPK_ADAPTIVE_MAX_POOL, &a, x, values, indices, idx);
  if (st == OF_OK && !indices) of_tensor_release(idx);
  return st;
}
static of_status inv_max_pool(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_pool);
  NEED(a->nsp >= 1 && a->nsp <= 3, "nsp");
  of_tensor *v = NULL, *i = NULL;
  of_status st = n->op == OPK_MAX_POOL
                     ? of_max_pool(ins[0], OPT(1, kernel), OPT(2, stride), OPT(4, padding),
                                   OPT(8, dilation), a->nsp, a->ceil_mode, a->base, &v, &i)
                     : of_adaptive_max_pool(ins[0], a->kernel, a->nsp, a->base, &v, &i);
  if (st == OF_OK) { outs[0] = v; outs[1] = i; }
  return st;
}
static of_status rec_avg_pool(of_tensor *x, const int64_t *kernel, const int64_t *stride,
                              const int64_t *padding, int32_t nsp, int32_t ceil_mode,
                              int32_t cip, int64_t divisor, of_tensor **out) {
  a_pool a;
  pool_pack(&a, kernel, stride, padding, NULL, nsp);
  a.ceil_mode = ceil_mode;
  a.cip = cip;
  a.divisor = divisor;
  return REC(OPK_AVG_POOL, a, &x, 1, out, 1);
}
of_status of_avg_pool(of_tensor *x, const int64_t *kernel, const int64_t *stride,
                      const int64_t *padding, int32_t nsp, int32_t ceil_mode,
                      int32_t count_include_pad, int64_t divisor_override, of_tensor **out) {
  OF_TRACED(of_impl_avg_pool(x, kernel, stride, padding, nsp, ceil_mode, count_include_pad,
                             divisor_override, out),
            rec_avg_pool(x, kernel, stride, padding, nsp, ceil_mode, count_include_pad,
                         divisor_override, out));
}
static of_status rec_adaptive_avg(of_tensor *x, const int64_t *size, int32_t nsp,
                                  of_tensor **out) {
  a_pool a;
  pool_pack(&a, size, NULL, NULL, NULL, nsp);
  return REC(OPK_ADAPTIVE_AVG_POOL, a, &x, 1, out, 1);
}
of_status of_adaptive_avg_pool(of_tensor *x, const int64_t *output_size, int32_t nsp,
                               of_tensor **out) {
  OF_TRACED(of_impl_adaptive_avg_pool(x, output_size, nsp, out),
            rec_adaptive_avg(x, output_size, nsp, out));
}
static of_status inv_avg_pool(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_pool);
  NEED(a->nsp >= 1 && a->nsp <= 3, "nsp");
  if (n->op == OPK_AVG_POOL)
    RUN1(of_avg_pool(ins[0], OPT(1, kernel), OPT(2, stride), OPT(4, padding), a->nsp,
                     a->ceil_mode, a->cip, a->divisor, R));
  RUN1(of_adaptive_avg_pool(ins[0], OPT(1, kernel), a->nsp, R));
}

/* ===================================================================== norms */
static of_status rec_norm(int32_t op, of_tensor *x, of_tensor *rm, of_tensor *rv, of_tensor *w,
                          of_tensor *b, int32_t flag, double momentum, double eps,
                          int64_t groups, of_tensor **out) {
  a_norm a;
  ZERO(a);
  a.flag = flag;
  a.momentum = momentum;
  a.eps = eps;
  a.groups = groups;
  of_tensor *ins[5] = {x, rm, rv, w, b};
  return REC(op, a, ins, 5, out, 1);
}
static int32_t mut_norm(const void *p, int32_t nin, int32_t *idx) {
  const a_norm *a = p;
  (void)nin;
  if (!a->flag) return 0;   /* training / use_input_stats: running stats are updated */
  idx[0] = 1;
  idx[1] = 2;
  return 2;
}
static int32_t mut_none(const void *p, int32_t nin, int32_t *idx) {
  (void)p; (void)nin; (void)idx;
  return 0;
}
of_status of_batch_norm(of_tensor *x, of_tensor *running_mean, of_tensor *running_var,
                        of_tensor *weight, of_tensor *bias, int32_t training, double momentum,
                        double eps, of_tensor **out) {
  AMP(OF_AMP_F32, of_batch_norm(A_[0], running_mean, running_var, A_[1], A_[2], training, momentum,
                                eps, out),
      x, weight, bias);
  OF_TRACED(of_impl_batch_norm(x, running_mean, running_var, weight, bias, training, momentum,
                               eps, out),
            rec_norm(OPK_BATCH_NORM, x, running_mean, running_var, weight, bias, training,
                     momentum, eps, 0, out));
}
of_status of_instance_norm(of_tensor *x, of_tensor *running_mean, of_tensor *running_var,
                           of_tensor *weight, of_tensor *bias, int32_t use_input_stats,
                           double momentum, double eps, of_tensor **out) {
  AMP(OF_AMP_F32, of_instance_norm(A_[0], running_mean, running_var, A_[1], A_[2], use_input_stats,
                                   momentum, eps, out),
      x, weight, bias);
  OF_TRACED(of_impl_instance_norm(x, running_mean, running_var, weight, bias, use_input_stats,
                                  momentum, eps, out),
            rec_norm(OPK_INSTANCE_NORM, x, running_mean, running_var, weight, bias,
                     use_input_stats, momentum, eps, 0, out));
}
of_status of_layer_norm(of_tensor *x, int32_t normalized_ndim, of_tensor *weight,
                        of_tensor *bias, double eps, of_tensor **out) {
  AMP(OF_AMP_F32, of_layer_norm(A_[0], normalized_ndim, A_[1], A_[2], eps, out), x, weight, bias);
  OF_TRACED(of_impl_layer_norm(x, normalized_ndim, weight, bias, eps, out),
            rec_norm(OPK_LAYER_NORM, x, NULL, NULL, weight, bias, 0, 0, eps, normalized_ndim,
                     out));
}
of_status of_group_norm(of_tensor *x, int64_t groups, of_tensor *weight, of_tensor *bias,
                        double eps, of_tensor **out) {
  AMP(OF_AMP_F32, of_group_norm(A_[0], groups, A_[1], A_[2], eps, out), x, weight, bias);
  OF_TRACED(of_impl_group_norm(x, groups, weight, bias, eps, out),
            rec_norm(OPK_GROUP_NORM, x, NULL, NULL, weight, bias, 0, 0, eps, groups, out));
}
static of_status inv_norm(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_norm);
  NEED(n->nin == 5, "inputs");
  switch (n->op) {
    case OPK_BATCH_NORM:
      RUN1(of_batch_norm(ins[0], ins[1], ins[2], ins[3], ins[4], a->flag, a->momentum, a->eps, R));
    case OPK_INSTANCE_NORM:
      RUN1(of_instance_norm(ins[0], ins[1], ins[2], ins[3], ins[4], a->flag, a->momentum, a->eps,
                            R));
    case OPK_LAYER_NORM:
      RUN1(of_layer_norm(ins[0], (int32_t)a->groups, ins[3], ins[4], a->eps, R));
    default:
      RUN1(of_group_norm(ins[0], a->groups, ins[3], ins[4], a->eps, R));
  }
}
static void d_norm(const void *p, char *b, size_t c) {
  const a_norm *a = p;
  catf(b, c, "eps=%g%s", a->eps, a->flag ? " training" : "");
}

/* ================================================================ resampling */
static of_status rec_interp(of_tensor *x, const int64_t *size, const double *scales,
                            int32_t nsp, of_interp_mode mode, int32_t align, of_tensor **out) {
  a_interp a;
  ZERO(a);
  int32_t k = nsp >= 0 && nsp <= 3 ? nsp : 0;
  a.nsp = nsp;
  a.mode = mode;
  a.align = align;
  copy_i64(a.size, size, k);
  if (scales) {
    a.has = 1;
    for (int32_t i = 0; i < k; i++) a.scales[i] = scales[i];
  }
  return REC(OPK_INTERPOLATE, a, &x, 1, out, 1);
}
of_status of_interpolate(of_tensor *x, const int64_t *size, const double *scales, int32_t nsp,
                         of_interp_mode mode, int32_t align_corners, of_tensor **out) {
  OF_TRACED(of_impl_interpolate(x, size, scales, nsp, mode, align_corners, out),
            rec_interp(x, size, scales, nsp, mode, align_corners, out));
}
static of_status inv_interp(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_interp);
  NEED(a->nsp >= 1 && a->nsp <= 3, "nsp");
  RUN1(of_interpolate(ins[0], a->size, a->has ? a->scales : NULL, a->nsp, a->mode, a->align, R));
}
static of_status rec_pad(of_tensor *x, const int64_t *pad, int32_t npad, of_pad_mode mode,
                         double value, of_tensor **out) {
  a_pad a;
  ZERO(a);
  a.npad = npad;
  copy_i64(a.pad, pad, 2 * npad);
  a.mode = mode;
  a.value = value;
  return REC(OPK_PAD, a, &x, 1, out, 1);
}
of_status of_pad(of_tensor *x, const int64_t *pad, int32_t npad, of_pad_mode mode, double value,
                 of_tensor **out) {
  OF_TRACED(of_impl_pad(x, pad, npad, mode, value, out), rec_pad(x, pad, npad, mode, value, out));
}
static of_status inv_pad(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_pad);
  NEED(NDIM_OK(a->npad), "npad");
  RUN1(of_pad(ins[0], a->pad, a->npad, a->mode, a->value, R));
}

/* ==================================================================== losses */
static of_status rec_loss(int32_t op, of_tensor *x, of_tensor *t, of_tensor *w,
                          of_loss_reduction red, int64_t ignore, double smoothing, int64_t base,
                          of_tensor **out) {
  a_loss a;
  ZERO(a);
  a.reduction = red;
  a.ignore = ignore;
  a.smoothing = smoothing;
  a.base = base;
  of_tensor *ins[3] = {x, t, w};
  return REC(op, a, ins, 3, out, 1);
}
of_status of_cross_entropy(of_tensor *logits, of_tensor *target, of_tensor *weight,
                           of_loss_reduction reduction, int64_t ignore_index,
                           double label_smoothing, int64_t index_base, of_tensor **out) {
  AMP(OF_AMP_F32, of_cross_entropy(A_[0], A_[1], A_[2], reduction, ignore_index, label_smoothing,
                                   index_base, out),
      logits, target, weight);
  OF_TRACED(of_impl_cross_entropy(logits, target, weight, reduction, ignore_index,
                                  label_smoothing, index_base, out),
            rec_loss(OPK_CROSS_ENTROPY, logits, target, weight, reduction, ignore_index,
                     label_smoothing, index_base, out));
}
of_status of_nll_loss(of_tensor *log_probs, of_tensor *target, of_tensor *weight,
                      of_loss_reduction reduction, int64_t ignore_index, int64_t index_base,
                      of_tensor **out) {
  AMP(OF_AMP_F32, of_nll_loss(A_[0], A_[1], A_[2], reduction, ignore_index, index_base, out),
      log_probs, target, weight);
  OF_TRACED(of_impl_nll_loss(log_probs, target, weight, reduction, ignore_index, index_base, out),
            rec_loss(OPK_NLL_LOSS, log_probs, target, weight, reduction, ignore_index, 0,
                     index_base, out));
}
static of_status inv_loss(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_loss);
  if (n->op == OPK_CROSS_ENTROPY)
    RUN1(of_cross_entropy(ins[0], ins[1], ins[2], a->reduction, a->ignore, a->smoothing, a->base,
                          R));
  RUN1(of_nll_loss(ins[0], ins[1], ins[2], a->reduction, a->ignore, a->base, R));
}

/* ============================================================ graph-only ops */
static of_status inv_alias(of_gnode *n, of_tensor **ins, void **outs) {
  ATTRS(a_alias);
  NEED(NDIM_OK(a->ndim), "ndim");
  of_tensor *b = ins[0];
  int64_t off = b->offset + a->rel_offset, hi = off, lo = off;
  for (int32_t i = 0; i < a->ndim; i++) {
    NEED(a->shape[i] >= 0, "shape");
    if (a->shape[i] == 0) { hi = lo = off; break; }
    int64_t ext = (a->shape[i] - 1) * a->strides[i];
    if (ext > 0) hi += ext; else lo += ext;
  }
  int64_t cap = b->storage->nbytes / of_dtype_size(b->dtype);
  if (lo < 0 || (of_shape_numel(a->shape, a->ndim) > 0 && hi >= cap))
    return of_fail(OF_ERR_INDEX, "nn.Graph: alias reaches outside its storage (%lld..%lld of "
                   "%lld elements)", (long long)lo, (long long)hi, (long long)cap);
  of_tensor *t = of_tensor_alias(b, a->shape, a->strides, a->ndim, off);
  if (!t) return OF_ERR_OOM;
  outs[0] = t;
  return OF_OK;
}
static void d_alias(const void *p, char *b, size_t c) {
  const a_alias *a = p;
  int32_t nd = NDIM_OK(a->ndim) ? a->ndim : 0;
  cat_list(b, c, "shape", a->shape, nd);
  cat_list(b, c, "strides", a->strides, nd);
  catf(b, c, " +%lld", (long long)a->rel_offset);
}
static void d_backward(const void *p, char *b, size_t c) {
  const a_backward *a = p;
  char name[49];
  memcpy(name, a->name, 48);
  name[48] = 0;
  catf(b, c, "%s", name);
}
static void d_sgd(const void *p, char *b, size_t c) {
  const a_sgd *a = p;
  catf(b, c, "momentum=%g wd=%g%s", a->momentum, a->weight_decay, a->nesterov ? " nesterov" : "");
}
static void d_adam(const void *p, char *b, size_t c) {
  const a_adam *a = p;
  catf(b, c, "betas=%g,%g eps=%g wd=%g%s%s", a->beta1, a->beta2, a->eps, a->weight_decay,
       a->amsgrad ? " amsgrad" : "", a->decoupled ? " decoupled" : "");
}
static int32_t mut_sgd(const void *p, int32_t nin, int32_t *idx) {
  (void)p; (void)nin;
  idx[0] = 0;   /* param */
  idx[1] = 2;   /* momentum buffer */
  idx[2] = 3;   /* hyper (step) */
  return 3;
}
static int32_t mut_unscale(const void *p, int32_t nin, int32_t *idx) {
  (void)p; (void)nin;
  idx[0] = 0;   /* grad, found_inf */
  idx[1] = 2;
  return 2;
}
static int32_t mut_update_scale(const void *p, int32_t nin, int32_t *idx) {
  (void)p; (void)nin;
  idx[0] = 0;   /* scale, growth_tracker */
  idx[1] = 1;
  return 2;
}
static int32_t mut_adam(const void *p, int32_t nin, int32_t *idx) {
  (void)p; (void)nin;
  idx[0] = 0;   /* param, exp_avg, exp_avg_sq, max_exp_avg_sq, hyper */
  idx[1] = 2;
  idx[2] = 3;
  idx[3] = 4;
  idx[4] = 5;
  return 5;
}

/* ===================================================================== table */
#define VIEWF OF_OPF_VIEW
#define EWF (OF_OPF_EW | OF_OPF_INTO)
static const of_opdef op_table[OPK_COUNT] = {
  [OF_OPK_ALIAS] = {"alias", sizeof(a_alias), 1, 1, 1, VIEWF, inv_alias, NULL, NULL, d_alias},
  [OF_OPK_BACKWARD] = {"backward", sizeof(a_backward), 1, 65, -1, OF_OPF_OPAQUE,
                       of_backward_invoke, NULL, NULL, d_backward},
  [OF_OPK_FUSED] = {"fused_elementwise", sizeof(fused_prog), 1, 64, 1, OF_OPF_INTO, of_fused_invoke, NULL,
                    of_fused_check, of_fused_describe},
  [OPK_VIEW] = {"view", sizeof(a_shape), 1, 1, 1, VIEWF, inv_view, NULL, NULL, d_shape},
  [OPK_RESHAPE] = {"reshape", sizeof(a_shape), 1, 1, 1, 0, inv_reshape, NULL, NULL, d_shape},
  [OPK_AS_STRIDED] = {"as_strided", sizeof(a_strided), 1, 1, 1, VIEWF, inv_as_strided, NULL, NULL,
                      d_strided},
  [OPK_TRANSPOSE] = {"transpose", sizeof(a_i2), 1, 1, 1, VIEWF, inv_transpose, NULL, NULL, d_i2},
  [OPK_PERMUTE] = {"permute", sizeof(a_dims), 1, 1, 1, VIEWF, inv_permute, NULL, NULL, d_dims},
  [OPK_NARROW] = {"narrow", sizeof(a_dim3), 1, 1, 1, VIEWF, inv_narrow, NULL, NULL, d_dim3},
  [OPK_SLICE] = {"slice", sizeof(a_dim3), 1, 1, 1, VIEWF, inv_slice, NULL, NULL, d_dim3},
  [OPK_SELECT] = {"select", sizeof(a_dim3), 1, 1, 1, VIEWF, inv_select, NULL, NULL, d_dim3},
  [OPK_UNSQUEEZE] = {"unsqueeze", sizeof(a_i1), 1, 1, 1, VIEWF, inv_unsqueeze, NULL, NULL, d_i1},
  [OPK_SQUEEZE] = {"squeeze", sizeof(a_i1), 1, 1, 1, VIEWF, inv_squeeze, NULL, NULL, d_i1},
  [OPK_EXPAND] = {"expand", sizeof(a_shape), 1, 1, 1, VIEWF, inv_expand, NULL, NULL, d_shape},
  [OPK_FLATTEN] = {"flatten", sizeof(a_i2), 1, 1, 1, 0, inv_flatten, NULL, NULL, d_i2},
  [OPK_CONTIGUOUS] = {"contiguous", sizeof(a_i1), 1, 1, 1, 0, inv_contiguous, NULL, NULL, NULL},
  [OPK_CLONE] = {"clone", sizeof(a_i1), 1, 1, 1, 0, inv_clone, NULL, NULL, NULL},
  [OPK_TO_DTYPE] = {"to", sizeof(a_i1), 1, 1, 1, 0, inv_to_dtype, NULL, NULL, d_dtype},
  [OPK_COPY_] = {"copy_", sizeof(a_i1), 2, 2, 0, 0, inv_copy_, mut_first, NULL, NULL},
  [OPK_DETACH] = {"detach", sizeof(a_i1), 1, 1, 1, VIEWF, inv_detach, NULL, NULL, NULL},
  [OPK_FILL_] = {"fill_", sizeof(a_d1), 1, 1, 0, 0, inv_fill_, mut_first, NULL, d_d1},
  [OPK_EMPTY] = {"empty", sizeof(a_create), 0, 0, 1, OF_OPF_CREATE | OF_OPF_EMPTY, inv_create,
                 NULL, NULL, d_create},
  [OPK_ZEROS] = {"zeros", sizeof(a_create), 0, 0, 1, OF_OPF_CREATE, inv_create, NULL, NULL,
                 d_create},
  [OPK_FULL] = {"full", sizeof(a_create), 0, 0, 1, OF_OPF_CREATE, inv_create, NULL, NULL,
                d_create},
  [OPK_EYE] = {"eye", sizeof(a_range), 0, 0, 1, OF_OPF_CREATE, inv_range, NULL, NULL, d_range},
  [OPK_ARANGE] = {"arange", sizeof(a_range), 0, 0, 1, OF_OPF_CREATE, inv_range, NULL, NULL,
                  d_range},
  [OPK_LINSPACE] = {"linspace", sizeof(a_range), 0, 0, 1, OF_OPF_CREATE, inv_range, NULL, NULL,
                    d_range},
  [OPK_BINARY] = {"binary", sizeof(a_binary), 2, 3, 1, EWF, inv_binary, NULL, NULL, d_binary},
  [OPK_BINARY_SCALAR] = {"binary_scalar", sizeof(a_binary_scalar), 1, 2, 1, EWF,
                         inv_binary_scalar, NULL, NULL, d_binary_scalar},
  [OPK_UNARY] = {"unary", sizeof(a_unary), 1, 2, 1, EWF, inv_unary, NULL, NULL, d_unary},
  [OPK_CLAMP] = {"clamp", sizeof(a_clamp), 1, 2, 1, EWF, inv_clamp, NULL, NULL, d_clamp},
  [OPK_LEAKY_RELU] = {"leaky_relu", sizeof(a_leaky), 1, 2, 1, EWF, inv_leaky, NULL, NULL, d_d1},
  [OPK_WHERE] = {"where", sizeof(a_i1), 3, 3, 1, 0, inv_where, NULL, NULL, NULL},
  [OPK_MASKED_FILL] = {"masked_fill", sizeof(a_masked_fill), 2, 3, 1, OF_OPF_INTO,
                       inv_masked_fill, NULL, NULL, d_d1},
  [OPK_REDUCE] = {"reduce", sizeof(a_reduce), 1, 1, 1, 0, inv_reduce, NULL, NULL, d_reduce},
  [OPK_MAX_DIM] = {"max_dim", sizeof(a_max_dim), 1, 1, 2, 0, inv_max_dim, NULL, NULL, d_max_dim},
  [OPK_ARGMAX] = {"argmax", sizeof(a_max_dim), 1, 1, 1, 0, inv_argmax, NULL, NULL, d_max_dim},
  [OPK_VAR] = {"var", sizeof(a_var), 1, 1, 1, 0, inv_var, NULL, NULL, NULL},
  [OPK_SOFTMAX] = {"softmax", sizeof(a_softmax), 1, 1, 1, 0, inv_softmax, NULL, NULL, d_softmax},
  [OPK_CUMULATIVE] = {"cumulative", sizeof(a_softmax), 1, 1, 1, 0, inv_cumulative, NULL, NULL,
                      d_softmax},
  [OPK_MATMUL] = {"matmul", sizeof(a_i1), 2, 2, 1, 0, inv_mm, NULL, NULL, NULL},
  [OPK_MM] = {"mm", sizeof(a_i1), 2, 3, 1, OF_OPF_INTO, inv_mm, NULL, NULL, NULL},
  [OPK_BMM] = {"bmm", sizeof(a_i1), 2, 2, 1, 0, inv_mm, NULL, NULL, NULL},
  [OPK_ADDMM] = {"addmm", sizeof(a_addmm), 3, 3, 1, 0, inv_addmm, NULL, NULL, NULL},
  [OPK_CAT] = {"cat", sizeof(a_i1), 1, 4096, 1, OF_OPF_VARIN, inv_cat, NULL, NULL, d_i1},
  [OPK_STACK] = {"stack", sizeof(a_i1), 1, 4096, 1, OF_OPF_VARIN, inv_cat, NULL, NULL, d_i1},
  [OPK_GATHER] = {"gather", sizeof(a_gather), 2, 2, 1, 0, inv_gather, NULL, NULL, d_gather},
  [OPK_SCATTER] = {"scatter", sizeof(a_scatter), 3, 4, 1, OF_OPF_INTO, inv_scatter, NULL, NULL,
                   NULL},
  [OPK_INDEX_SELECT] = {"index_select", sizeof(a_gather), 2, 2, 1, 0, inv_gather, NULL, NULL,
                        d_gather},
  [OPK_INDEX_ADD] = {"index_add", sizeof(a_index_add), 3, 4, 1, OF_OPF_INTO, inv_index_add,
                     NULL, NULL, NULL},
  [OPK_SORT] = {"sort", sizeof(a_sort), 1, 1, 2, 0, inv_sort, NULL, NULL, NULL},
  [OPK_TOPK] = {"topk", sizeof(a_sort), 1, 1, 2, 0, inv_sort, NULL, NULL, NULL},
  [OPK_TRI] = {"tri", sizeof(a_tri), 1, 1, 1, 0, inv_tri, NULL, NULL, NULL},
  [OPK_FLIP] = {"flip", sizeof(a_dims), 1, 1, 1, 0, inv_flip, NULL, NULL, d_dims},
  [OPK_ROLL] = {"roll", sizeof(a_roll), 1, 1, 1, 0, inv_roll, NULL, NULL, NULL},
  [OPK_REPEAT] = {"repeat", sizeof(a_roll), 1, 1, 1, 0, inv_roll, NULL, NULL, NULL},
  [OPK_ONE_HOT] = {"one_hot", sizeof(a_one_hot), 1, 1, 1, 0, inv_one_hot, NULL, NULL, NULL},
  [OPK_MASKED_SELECT] = {"masked_select", sizeof(a_i1), 2, 2, 1, 0, inv_masked_select, NULL,
                         NULL, NULL},
  [OPK_NONZERO] = {"nonzero", sizeof(a_one_hot), 1, 1, 1, 0, inv_one_hot, NULL, NULL, NULL},
  [OPK_UNIFORM_] = {"uniform_", sizeof(a_rand2), 1, 1, 0, OF_OPF_RANDOM, inv_rand_, mut_first,
                    NULL, d_rand2},
  [OPK_NORMAL_] = {"normal_", sizeof(a_rand2), 1, 1, 0, OF_OPF_RANDOM, inv_rand_, mut_first,
                   NULL, d_rand2},
  [OPK_RANDINT_] = {"randint_", sizeof(a_rand2), 1, 1, 0, OF_OPF_RANDOM, inv_rand_, mut_first,
                    NULL, d_rand2},
  [OPK_BERNOULLI] = {"bernoulli", sizeof(a_i1), 1, 1, 1, OF_OPF_RANDOM, inv_bernoulli, NULL,
                     NULL, NULL},
  [OPK_BERNOULLI_] = {"bernoulli_", sizeof(a_rand2), 1, 1, 0, OF_OPF_RANDOM, inv_rand_,
                      mut_first, NULL, d_rand2},
  [OPK_RANDPERM] = {"randperm", sizeof(a_randperm), 0, 0, 1, OF_OPF_CREATE | OF_OPF_RANDOM,
                    inv_randperm, NULL, NULL, NULL},
  [OPK_RAND] = {"rand", sizeof(a_create), 0, 0, 1, OF_OPF_CREATE | OF_OPF_RANDOM, inv_create,
                NULL, NULL, d_create},
  [OPK_RANDN] = {"randn", sizeof(a_create), 0, 0, 1, OF_OPF_CREATE | OF_OPF_RANDOM, inv_create,
                 NULL, NULL, d_create},
  [OPK_CONV] = {"conv", sizeof(a_conv), 3, 3, 1, 0, inv_conv, NULL, NULL, d_conv},
  [OPK_CONV_TRANSPOSE] = {"conv_transpose", sizeof(a_conv), 3, 3, 1, 0, inv_conv, NULL, NULL,
                          d_conv},
  [OPK_CONV_WEIGHT_GRAD] = {"conv_weight_grad", sizeof(a_conv), 3, 3, 1, 0, inv_conv, NULL, NULL,
                            d_conv},
  [OPK_MAX_POOL] = {"max_pool", sizeof(a_pool), 1, 1, 2, 0, inv_max_pool, NULL, NULL, d_pool},
  [OPK_AVG_POOL] = {"avg_pool", sizeof(a_pool), 1, 1, 1, 0, inv_avg_pool, NULL, NULL, d_pool},
  [OPK_ADAPTIVE_AVG_POOL] = {"adaptive_avg_pool", sizeof(a_pool), 1, 1, 1, 0, inv_avg_pool, NULL,
                             NULL, d_pool},
  [OPK_ADAPTIVE_MAX_POOL] = {"adaptive_max_pool", sizeof(a_pool), 1, 1, 2, 0, inv_max_pool, NULL,
                             NULL, d_pool},
  [OPK_BATCH_NORM] = {"batch_norm", sizeof(a_norm), 5, 5, 1, 0, inv_norm, mut_norm, NULL, d_norm},
  [OPK_LAYER_NORM] = {"layer_norm", sizeof(a_norm), 5, 5, 1, 0, inv_norm, mut_none, NULL, d_norm},
  [OPK_GROUP_NORM] = {"group_norm", sizeof(a_norm), 5, 5, 1, 0, inv_norm, mut_none, NULL, d_norm},
  [OPK_INSTANCE_NORM] = {"instance_norm", sizeof(a_norm), 5, 5, 1, 0, inv_norm, mut_norm, NULL,
                         d_norm},
  [OPK_INTERPOLATE] = {"interpolate", sizeof(a_interp), 1, 1, 1, 0, inv_interp, NULL, NULL, NULL},
  [OPK_PAD] = {"pad", sizeof(a_pad), 1, 1, 1, 0, inv_pad, NULL, NULL, NULL},
  [OPK_CROSS_ENTROPY] = {"cross_entropy", sizeof(a_loss), 3, 3, 1, 0, inv_loss, NULL, NULL, NULL},
  [OPK_NLL_LOSS] = {"nll_loss", sizeof(a_loss), 3, 3, 1, 0, inv_loss, NULL, NULL, NULL},
  [OPK_OPTIM_SGD] = {"sgd_update", sizeof(a_sgd), 4, 5, 0, 0, of_optim_sgd_invoke, mut_sgd, NULL,
                     d_sgd},
  [OPK_OPTIM_ADAM] = {"adam_update", sizeof(a_adam), 6, 7, 0, 0, of_optim_adam_invoke, mut_adam,
                      NULL, d_adam},
  [OPK_AMP_UNSCALE] = {"amp_unscale_", sizeof(a_i1), 3, 3, 0, 0, of_amp_unscale_invoke,
                       mut_unscale, NULL, NULL},
  [OPK_AMP_UPDATE] = {"amp_update_scale_", sizeof(a_amp_update), 3, 3, 0, 0,
                      of_amp_update_scale_invoke, mut_update_scale, NULL, NULL},
#define COMMF (OF_OPF_COLLECTIVE | OF_OPF_RANDOM)
  [OPK_COMM_ALL_REDUCE] = {"all_reduce", -1, 1, 1, 0, COMMF, of_comm_node_invoke, mut_first,
                           of_comm_node_check, of_comm_node_describe},
  [OPK_COMM_ALL_REDUCE_TO] = {"all_reduce_to", -1, 1, 1, 1, COMMF, of_comm_node_invoke, NULL,
                              of_comm_node_check, of_comm_node_describe},
  [OPK_COMM_BROADCAST] = {"broadcast", -1, 1, 1, 0, COMMF, of_comm_node_invoke, mut_first,
                          of_comm_node_check, of_comm_node_describe},
  [OPK_COMM_ALL_GATHER] = {"all_gather", -1, 1, 1, 1, COMMF, of_comm_node_invoke, NULL,
                           of_comm_node_check, of_comm_node_describe},
  [OPK_COMM_REDUCE_SCATTER] = {"reduce_scatter", -1, 1, 1, 1, COMMF, of_comm_node_invoke, NULL,
                               of_comm_node_check, of_comm_node_describe},
  [OPK_COMM_ALL_TO_ALL] = {"all_to_all", -1, 1, 1, 1, COMMF, of_comm_node_invoke, NULL,
                           of_comm_node_check, of_comm_node_describe},
  [OPK_RELU_MAX_POOL] = {"relu_max_pool", sizeof(a_relu_pool), 1, 1, 2, 0, of_relu_pool_invoke,
                         NULL, of_relu_pool_check, of_relu_pool_describe},
  [OPK_RELU_MAX_POOL_BACKWARD] = {"relu_max_pool_backward", sizeof(a_relu_pool), 2, 2, 1, 0,
                                  of_relu_pool_invoke, NULL, of_relu_pool_check,
                                  of_relu_pool_describe},
};

const of_opdef *of_op_def(int32_t op) {
  if (op < 0 || op >= OPK_COUNT || !op_table[op].name) return NULL;
  return &op_table[op];
}
int32_t of_op_count(void) { return OPK_COUNT; }
int32_t of_op_find(const char *name) {
  for (int32_t i = 0; i < OPK_COUNT; i++)
    if (op_table[i].name && strcmp(op_table[i].name, name) == 0) return i;
  return -1;
}

bool of_node_pure(const of_graph *g, const of_gnode *n) {
  const of_opdef *d = of_op_def(n->op);
  if (!d || (d->flags & (OF_OPF_RANDOM | OF_OPF_OPAQUE | OF_OPF_EMPTY))) return false;
  if (n->nmut || (n->flags & OF_GN_CAPTURE)) return false;
  for (int32_t j = 0; j < n->nreal; j++)
    if (n->out[j] >= 0 && g->vals[n->out[j]].same != n->out[j]) return false;   /* in place */
  return true;
}
