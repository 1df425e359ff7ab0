/* creation.c -- factories: empty, zeros, full, eye, arange, linspace, from
 * doubles / buffers / blobs, and fill_. */
#include "../device.h"
#include <math.h>
#include <stdlib.h>
#include "family.h"

/* the value's bits: 16 bytes, for complex128 (re, im) */
typedef struct { uint64_t bits[2]; } fill_ctx;

#define FILL_LOOP(T)                                                          \
  static void fill_##T(char **p, const int64_t *s, int64_t n, void *c) {      \
    T v;                                                                      \
    memcpy(&v, ((fill_ctx *)c)->bits, sizeof v);                              \
    if (s[0] == sizeof(T)) {                                                  \
      T *d = (T *)p[0];                                                       \
      for (int64_t i = 0; i < n; i++) d[i] = v;                               \
    } else {                                                                  \
      for (int64_t i = 0; i < n; i++) *(T *)(p[0] + i * s[0]) = v;            \
    }                                                                         \
  }
FILL_LOOP(uint8_t)
FILL_LOOP(uint16_t)
FILL_LOOP(uint32_t)
FILL_LOOP(uint64_t)
static void fill_bits128(char **p, const int64_t *s, int64_t n, void *c) {   /* complex128 */
  const uint64_t *v = ((fill_ctx *)c)->bits;
  for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], v, 2 * sizeof *v);
}

static of_status fill__body(of_tensor *t, double value) {
  OF_CHECK(of_check_inplace("fill_", t));
  OF_ROUTE("fill_", dev, ops, fill, t);
  if (ops) {
    OF_CHECK(ops->fill(t, value));
    of_bump_version(t);
    return OF_OK;
  }
  fill_ctx ctx = {0};
  of_store_double(ctx.bits, t->dtype, value);
  of_iter it;
  OF_CHECK(of_iter_init(&it, &t, 1, t->shape, t->ndim));
  switch (of_dtype_size(t->dtype)) {
    case 1: of_iter_run(&it, fill_uint8_t, &ctx, true); break;
    case 2: of_iter_run(&it, fill_uint16_t, &ctx, true); break;
    case 4: of_iter_run(&it, fill_uint32_t, &ctx, true); break;
    case 8: of_iter_run(&it, fill_uint64_t, &ctx, true); break;
    default: of_iter_run(&it, fill_bits128, &ctx, true); break;
  }
  of_bump_version(t);
  return OF_OK;
}

/* ---- the results' shapes and dtypes ----
 * What each body allocates, from its arguments alone. The bodies call these
 * before they allocate; the infer hooks (end of file) call them on a loaded
 * record, so the graph loader re-infers a creation node by the op's own
 * arithmetic before anything runs. */

/* a record's double that the op takes as an int64 (eye's sizes, linspace's
 * steps, randint_'s bounds: traced from int64 values): a fractional or
 * out-of-range one is refused, never cast (that cast is undefined) */
of_status of_record_int(const char *op, const char *what, double v, int64_t *out) {
  if (!(v >= -0x1p63 && v < 0x1p63) || v != floor(v))
    return of_fail(OF_ERR_ARG, "%s: %s %g is not an integer in the int64 range", op, what, v);
  *out = (int64_t)v;
  return OF_OK;
}

/* empty, zeros, full, rand, randn: the record's shape and dtype, as
 * of_tensor_new_as checks them */
of_status of_create_meta(const char *op, const a_create *a, of_meta *out) {
  OF_CHECK(of_tensor_check_new(op, a->shape, a->ndim, a->dtype, NULL));
  out->ndim = a->ndim;
  out->dtype = a->dtype;
  memcpy(out->shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
  return OF_OK;
}

/* eye(n, m): [n, m] (m < 0: n) */
static of_status eye_shape(int64_t n, int64_t m, of_dtype dt, int64_t shape[2]) {
  if (m < 0) m = n;
  if (n < 0) return of_fail(OF_ERR_SHAPE, "eye: negative size %lld", (long long)n);
  shape[0] = n;
  shape[1] = m;
  return of_tensor_check_new("eye", shape, 2, dt, NULL);
}

/* arange(start, end, step): ceil((end - start) / step) elements */
static of_status arange_count(double start, double end, double step, of_dtype dt, int64_t *n) {
  if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step))
    return of_fail(OF_ERR_ARG, "arange: invalid range start=%g end=%g step=%g", start, end, step);
  if ((end - start) / step < 0)
    return of_fail(OF_ERR_ARG, "arange: upper bound and step have inconsistent signs "
                   "(start=%g end=%g step=%g)", start, end, step);
  double count = ceil((end - start) / step);
  if (!(count <= (double)OF_MAX_NUMEL))   /* before the cast: out of range is undefined */
    return of_fail(OF_ERR_SHAPE, "arange: start=%g end=%g step=%g gives %g elements, more than a "
                   "tensor can hold (at most 2^60)", start, end, step, count);
  *n = (int64_t)count;
  return of_tensor_check_new("arange", n, 1, dt, NULL);
}

/* linspace(start, end, steps): steps elements */
static of_status linspace_count(int64_t steps, of_dtype dt) {
  if (steps < 0) return of_fail(OF_ERR_ARG, "linspace: number of steps must be >= 0, got %lld", (long long)steps);
  return of_tensor_check_new("linspace", &steps, 1, dt, NULL);
}

static of_status empty_body(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                        of_tensor **out) {
  return of_tensor_new_as("empty", shape, ndim, dt, dev, out);
}

static of_status full_as(const char *op, const int64_t *shape, int32_t ndim, double value,
                         of_dtype dt, of_device dev, of_tensor **out) {
  of_tensor *t;
  OF_CHECK(of_tensor_new_as(op, shape, ndim, dt, dev, &t));
  of_fill_(t, value);
  t->storage->version = 0;
  *out = t;
  return OF_OK;
}

static of_status full_body(const int64_t *shape, int32_t ndim, double value, of_dtype dt,
                       of_device dev, of_tensor **out) {
  return full_as("full", shape, ndim, value, dt, dev, out);
}

static of_status zeros_body(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                        of_tensor **out) {
  return full_as("zeros", shape, ndim, 0.0, dt, dev, out);
}

/* Factories with values computed on the host build them on the CPU and move
 * them: they are small and rarely on a hot path. */
static of_status moved(of_tensor *t, of_device dev, of_tensor **out) {
  of_status st = of_to_device(t, dev, 0, out);
  of_tensor_release(t);
  return st;
}

static of_status eye_body(int64_t n, int64_t m, of_dtype dt, of_device dev, of_tensor **out) {
  if (dev != OF_CPU) {
    of_tensor *t = NULL;
    OF_CHECK(eye_body(n, m, dt, OF_CPU, &t));
    return moved(t, dev, out);
  }
  int64_t shape[2];
  OF_CHECK(eye_shape(n, m, dt, shape));
  m = shape[1];
  of_tensor *t;
  OF_CHECK(full_as("eye", shape, 2, 0.0, dt, dev, &t));
  int64_t k = n < m ? n : m, es = of_dtype_size(dt);
  char *p = of_ptr(t);
  for (int64_t i = 0; i < k; i++) of_store_double(p + (i * m + i) * es, dt, 1.0);
  *out = t;
  return OF_OK;
}

static of_status arange_body(double start, double end, double step, of_dtype dt, of_device dev,
                         of_tensor **out) {
  const of_device_ops *dops = dev != OF_CPU ? of_device_ops_for("arange", dev) : NULL;
  if (dev != OF_CPU && !dops) return OF_ERR_DEVICE;
  if (dops && !dops->iota) {
    of_tensor *t = NULL;
    OF_CHECK(arange_body(start, end, step, dt, OF_CPU, &t));
    return moved(t, dev, out);
  }
  int64_t n;
  OF_CHECK(arange_count(start, end, step, dt, &n));
  of_tensor *t;
  OF_CHECK(of_tensor_new_as("arange", &n, 1, dt, dev, &t));
  if (dops) {   /* the same double arithmetic and conversion, on the device */
    of_status st = dops->iota(t, start, step, end, 0);
    if (st != OF_OK) of_tensor_release(t);
    else *out = t;
    return st;
  }
  int64_t es = of_dtype_size(dt);
  char *p = of_ptr(t);
  for (int64_t i = 0; i < n; i++) of_store_double(p + i * es, dt, start + (double)i * step);
  *out = t;
  return OF_OK;
}

static of_status linspace_body(double start, double end, int64_t steps, of_dtype dt, of_device dev,
                           of_tensor **out) {
  const of_device_ops *dops = dev != OF_CPU ? of_device_ops_for("linspace", dev) : NULL;
  if (dev != OF_CPU && !dops) return OF_ERR_DEVICE;
  if (dops && !dops->iota) {
    of_tensor *t = NULL;
    OF_CHECK(linspace_body(start, end, steps, dt, OF_CPU, &t));
    return moved(t, dev, out);
  }
  OF_CHECK(linspace_count(steps, dt));
  of_tensor *t;
  OF_CHECK(of_tensor_new_as("linspace", &steps, 1, dt, dev, &t));
  int64_t es = of_dtype_size(dt);
  char *p = of_ptr(t);
  double step = steps > 1 ? (end - start) / (double)(steps - 1) : 0;
  if (dops) {
    of_status st = dops->iota(t, start, step, end, 1);
    if (st != OF_OK) of_tensor_release(t);
    else *out = t;
    return st;
  }
  /* PyTorch fills the second half backwards from `end` so both ends are exact */
  int64_t half = steps / 2;
  for (int64_t i = 0; i < steps; i++) {
    double v = steps == 1 ? start
               : i < half ? start + step * (double)i : end - step * (double)(steps - 1 - i);
    of_store_double(p + i * es, dt, v);
  }
  *out = t;
  return OF_OK;
}

static of_status from_doubles_body(const double *values, const int64_t *shape, int32_t ndim,
                               of_dtype dt, of_tensor **out) {
  of_tensor *t;
  OF_CHECK(of_tensor_new(shape, ndim, dt, OF_CPU, &t));
  int64_t es = of_dtype_size(dt);
  char *p = of_ptr(t);
  for (int64_t i = 0; i < t->numel; i++) of_store_double(p + i * es, dt, values[i]);
  *out = t;
  return OF_OK;
}

static of_status from_buffer_body(const void *data, const int64_t *shape, int32_t ndim, of_dtype dt,
                              of_tensor **out) {
  of_tensor *t;
  OF_CHECK(of_tensor_new(shape, ndim, dt, OF_CPU, &t));
  if (t->numel) memcpy(of_ptr(t), data, (size_t)(t->numel * of_dtype_size(dt)));
  *out = t;
  return OF_OK;
}



/* LuaJIT does not canonicalise NaNs it reads from FFI memory: a NaN whose sign and payload
 * bits look like one of its type tags (a float32 0xffa03039 widens to 0xfffc0607...) would
 * become a bogus GC object in Lua.  Every value handed to Lua goes through here. */
static inline double lua_safe(double v) { return v == v ? v : __builtin_nan(""); }

static of_status tensor_get_flat_body(const of_tensor *t, int64_t i, double *out) {
  if (of_dev(t) != OF_CPU) {   /* one element through the host */
    if (i < 0 || i >= t->numel)
      return of_fail(OF_ERR_INDEX, "item: flat index %lld out of range for %lld elements",
                     (long long)i, (long long)t->numel);
    of_tensor *c;
    OF_CHECK(of_to_device((of_tensor *)t, OF_CPU, 0, &c));
    of_status st = tensor_get_flat_body(c, i, out);
    of_tensor_release(c);
    return st;
  }
  if (i < 0 || i >= t->numel)
    return of_fail(OF_ERR_INDEX, "item: flat index %lld out of range for %lld elements",
                   (long long)i, (long long)t->numel);
  int64_t off = 0;
  for (int32_t d = t->ndim - 1; d >= 0; d--) {
    off += (i % t->shape[d]) * t->strides[d];
    i /= t->shape[d];
  }
  *out = lua_safe(of_load_double(of_ptr(t) + off * of_dtype_size(t->dtype), t->dtype));
  return OF_OK;
}

static of_status tensor_to_doubles_body(const of_tensor *t, double *buf, int64_t n) {
  if (of_dev(t) != OF_CPU) {
    of_tensor *c;
    OF_CHECK(of_to_device((of_tensor *)t, OF_CPU, 0, &c));
    of_status st = tensor_to_doubles_body(c, buf, n);
    of_tensor_release(c);
    return st;
  }
  if (n < t->numel)
    return of_fail(OF_ERR_ARG, "totable: buffer of %lld for %lld elements", (long long)n,
                   (long long)t->numel);
  int64_t idx[OF_MAX_DIMS] = {0}, es = of_dtype_size(t->dtype);
  const char *base = of_ptr(t);
  for (int64_t k = 0; k < t->numel; k++) {
    int64_t off = 0;
    for (int32_t d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
    buf[k] = lua_safe(of_load_double(base + off * es, t->dtype));
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
      if (++idx[d] < t->shape[d]) break;
      idx[d] = 0;
    }
  }
  return OF_OK;
}

/* ---- entry points (dispatch), run functions and table rows ---- */
static of_status pack_fill_(of_tensor *t, double v) {
  a_d1 a = {v};
  return OF_RECORD(OPK_FILL_, a, &t, 1, NULL, 0);
}
of_status of_fill_(of_tensor *t, double value) {
  OF_DISPATCH(fill__body(t, value), pack_fill_(t, value));
}
static of_status run_fill_(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_d1);
  (void)outs;
  return of_fill_(ins[0], a->v);
}

of_status of_record_create(int32_t op, const int64_t *shape, int32_t ndim, double v,
                            of_dtype dt, of_device dev, of_tensor **out) {
  a_create a;
  OF_ZERO(a);
  a.ndim = ndim;
  of_copy_i64(a.shape, shape, ndim);
  a.value = v;
  a.dtype = dt;
  a.device = dev;
  return OF_RECORD(op, a, NULL, 0, out, 1);
}
void of_describe_create(const void *p, char *b, size_t c) {
  const a_create *a = p;
  of_cat_list(b, c, "shape", a->shape, NDIM_OK(a->ndim) ? a->ndim : 0);
  of_catf(b, c, " value=%g %s", a->value, of_dtype_name(a->dtype));
}
of_status of_empty(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                   of_tensor **out) {
  OF_DISPATCH(empty_body(shape, ndim, dt, dev, out),
            of_record_create(OPK_EMPTY, shape, ndim, 0, dt, dev, out));
}
of_status of_zeros(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                   of_tensor **out) {
  OF_DISPATCH(zeros_body(shape, ndim, dt, dev, out),
            of_record_create(OPK_ZEROS, shape, ndim, 0, dt, dev, out));
}
of_status of_full(const int64_t *shape, int32_t ndim, double value, of_dtype dt,
                  of_device dev, of_tensor **out) {
  OF_DISPATCH(full_body(shape, ndim, value, dt, dev, out),
            of_record_create(OPK_FULL, shape, ndim, value, dt, dev, out));
}
of_status of_run_create(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_create);
  (void)ins;
  OF_NEED(NDIM_OK(a->ndim), "ndim");
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

static of_status pack_range(int32_t op, double x, double y, double z, of_dtype dt,
                           of_device dev, of_tensor **out) {
  a_range a;
  OF_ZERO(a);
  a.a = x;
  a.b = y;
  a.c = z;
  a.dtype = dt;
  a.device = dev;
  return OF_RECORD(op, a, NULL, 0, out, 1);
}
static void describe_range(const void *p, char *b, size_t c) {
  const a_range *a = p;
  of_catf(b, c, "%g,%g,%g %s", a->a, a->b, a->c, of_dtype_name(a->dtype));
}
of_status of_eye(int64_t n, int64_t m, of_dtype dt, of_device dev, of_tensor **out) {
  OF_DISPATCH(eye_body(n, m, dt, dev, out),
            pack_range(OPK_EYE, (double)n, (double)m, 0, dt, dev, out));
}
of_status of_arange(double start, double end, double step, of_dtype dt, of_device dev,
                    of_tensor **out) {
  OF_DISPATCH(arange_body(start, end, step, dt, dev, out),
            pack_range(OPK_ARANGE, start, end, step, dt, dev, out));
}
of_status of_linspace(double start, double end, int64_t steps, of_dtype dt, of_device dev,
                      of_tensor **out) {
  OF_DISPATCH(linspace_body(start, end, steps, dt, dev, out),
            pack_range(OPK_LINSPACE, start, end, (double)steps, dt, dev, out));
}
static of_status run_range(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_range);
  (void)ins;
  of_tensor *r_ = NULL;
  of_status st;
  int64_t x = 0, y = 0;
  if (n->op == OPK_EYE) {
    OF_CHECK(of_record_int("eye", "n", a->a, &x));
    OF_CHECK(of_record_int("eye", "m", a->b, &y));
    st = of_eye(x, y, a->dtype, a->device, &r_);
  } else if (n->op == OPK_ARANGE) {
    st = of_arange(a->a, a->b, a->c, a->dtype, a->device, &r_);
  } else {
    OF_CHECK(of_record_int("linspace", "steps", a->c, &x));
    st = of_linspace(a->a, a->b, x, a->dtype, a->device, &r_);
  }
  if (st == OF_OK) outs[0] = r_;
  return st;
}

/* Host data: the result is bound as a constant, not replayed. */
#define CONSTANT(CALL)                                                  \
  do {                                                                  \
    of_status st_ = CALL;                                               \
    if (st_ != OF_OK || !of_dispatch_tls || of_dispatch_depth > 0) return st_; \
    return of_dispatch_constant(*out);                                     \
  } while (0)
of_status of_from_doubles(const double *values, const int64_t *shape, int32_t ndim,
                          of_dtype dt, of_tensor **out) {
  CONSTANT(from_doubles_body(values, shape, ndim, dt, out));
}
of_status of_from_buffer(const void *data, const int64_t *shape, int32_t ndim, of_dtype dt,
                         of_tensor **out) {
  CONSTANT(from_buffer_body(data, shape, ndim, dt, out));
}
of_status of_from_blob(void *data, const int64_t *shape, const int64_t *strides, int32_t ndim,
                       of_dtype dt, of_deleter deleter, void *ctx, of_tensor **out) {
  CONSTANT(of_tensor_wrap_blob(data, shape, strides, ndim, dt, deleter, ctx, out));
}

/* Reading values: an op reading its own inputs is fine (depth > 0). */
of_status of_tensor_get_flat(const of_tensor *t, int64_t i, double *out) {
  if (__builtin_expect(of_dispatch_tls != NULL, 0) && of_dispatch_depth == 0)
    OF_CHECK(of_dispatch_data_read(t));
  return tensor_get_flat_body(t, i, out);
}
of_status of_tensor_to_doubles(const of_tensor *t, double *buf, int64_t n) {
  if (__builtin_expect(of_dispatch_tls != NULL, 0) && of_dispatch_depth == 0)
    OF_CHECK(of_dispatch_data_read(t));
  return tensor_to_doubles_body(t, buf, n);
}

/* ---- infer hooks: a loaded record's result, by the functions above ---- */
/* fill_ writes any value into any dtype and shape: nothing to decide from
 * shapes (its in-place checks -- expanded dims, a leaf that requires grad --
 * need the real tensor and are made when it runs) */
static of_status infer_fill_(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)p;
  (void)outs;
  if (nin < 1 || ins[0].ndim < 0) return of_fail(OF_ERR_ARG, "fill_: tensor is NULL");
  return OF_OK;
}
#define INFER_CREATE(NAME, OP)                                                                \
  static of_status infer_##NAME(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) { \
    (void)nin;                                                                                \
    (void)ins;                                                                                \
    return of_create_meta(OP, p, &outs[0]);                                                   \
  }
INFER_CREATE(empty, "empty")
INFER_CREATE(zeros, "zeros")
INFER_CREATE(full, "full")
#undef INFER_CREATE
/* eye, arange, linspace: run_range's conversions, then the bodies' counts */
static of_status infer_range(int32_t op, const a_range *a, of_meta *out) {
  int64_t x = 0, y = 0;
  out->ndim = 1;
  out->dtype = a->dtype;
  if (op == OPK_EYE) {
    OF_CHECK(of_record_int("eye", "n", a->a, &x));
    OF_CHECK(of_record_int("eye", "m", a->b, &y));
    out->ndim = 2;
    return eye_shape(x, y, a->dtype, out->shape);
  }
  if (op == OPK_ARANGE) return arange_count(a->a, a->b, a->c, a->dtype, &out->shape[0]);
  OF_CHECK(of_record_int("linspace", "steps", a->c, &x));
  OF_CHECK(linspace_count(x, a->dtype));
  out->shape[0] = x;
  return OF_OK;
}
static of_status infer_eye(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)nin;
  (void)ins;
  return infer_range(OPK_EYE, p, &outs[0]);
}
static of_status infer_arange(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)nin;
  (void)ins;
  return infer_range(OPK_ARANGE, p, &outs[0]);
}
static of_status infer_linspace(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)nin;
  (void)ins;
  return infer_range(OPK_LINSPACE, p, &outs[0]);
}

OF_OP_IMPL_INFER(FILL_, run_fill_, of_mutates_first, NULL, of_describe_d1, infer_fill_);
OF_OP_IMPL_INFER(EMPTY, of_run_create, NULL, NULL, of_describe_create, infer_empty);
OF_OP_IMPL_INFER(ZEROS, of_run_create, NULL, NULL, of_describe_create, infer_zeros);
OF_OP_IMPL_INFER(FULL, of_run_create, NULL, NULL, of_describe_create, infer_full);
OF_OP_IMPL_INFER(EYE, run_range, NULL, NULL, describe_range, infer_eye);
OF_OP_IMPL_INFER(ARANGE, run_range, NULL, NULL, describe_range, infer_arange);
OF_OP_IMPL_INFER(LINSPACE, run_range, NULL, NULL, describe_range, infer_linspace);
