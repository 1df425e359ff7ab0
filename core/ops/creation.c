/* creation.c -- factories: empty, zeros, full, eye, arange, linspace, from
 * doubles / buffers / blobs, and fill_. */
#include "../device.h"
#include <math.h>
#include <stdlib.h>

typedef struct { uint64_t bits; } fill_ctx;

#define FILL_LOOP(T)                                                          \
  static void fill_##T(char **p, const int64_t *s, int64_t n, void *c) {      \
    T v;                                                                      \
    memcpy(&v, &((fill_ctx *)c)->bits, sizeof v);                             \
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

of_status of_impl_fill_(of_tensor *t, double value) {
  OF_ROUTE("fill_", dev, ops, fill, t);
  if (ops) {
    OF_CHECK(ops->fill(t, value));
    of_bump_version(t);
    return OF_OK;
  }
  fill_ctx ctx = {0};
  of_store_double(&ctx.bits, t->dtype, value);
  of_iter it;
  OF_CHECK(of_iter_init(&it, &t, 1, t->shape, t->ndim));
  switch (of_dtype_size(t->dtype)) {
    case 1: of_iter_run(&it, fill_uint8_t, &ctx, true); break;
    case 2: of_iter_run(&it, fill_uint16_t, &ctx, true); break;
    case 4: of_iter_run(&it, fill_uint32_t, &ctx, true); break;
    default: of_iter_run(&it, fill_uint64_t, &ctx, true); break;
  }
  of_bump_version(t);
  return OF_OK;
}

of_status of_impl_empty(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                        of_tensor **out) {
  return of_tensor_new(shape, ndim, dt, dev, out);
}

of_status of_impl_full(const int64_t *shape, int32_t ndim, double value, of_dtype dt,
                       of_device dev, of_tensor **out) {
  of_tensor *t;
  OF_CHECK(of_tensor_new(shape, ndim, dt, dev, &t));
  of_fill_(t, value);
  t->storage->version = 0;
  *out = t;
  return OF_OK;
}

of_status of_impl_zeros(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                        of_tensor **out) {
  return of_full(shape, ndim, 0.0, dt, dev, out);
}

/* Factories with values computed on the host build them on the CPU and move
 * them: they are small and rarely on a hot path. */
static of_status moved(of_tensor *t, of_device dev, of_tensor **out) {
  of_status st = of_to_device(t, dev, 0, out);
  of_tensor_release(t);
  return st;
}

of_status of_impl_eye(int64_t n, int64_t m, of_dtype dt, of_device dev, of_tensor **out) {
  if (dev != OF_CPU) {
    of_tensor *t = NULL;
    OF_CHECK(of_impl_eye(n, m, dt, OF_CPU, &t));
    return moved(t, dev, out);
  }
  if (m < 0) m = n;
  if (n < 0) return of_fail(OF_ERR_SHAPE, "eye: negative size %lld", (long long)n);
  int64_t shape[2] = {n, m};
  of_tensor *t;
  OF_CHECK(of_zeros(shape, 2, dt, dev, &t));
  int64_t k = n < m ? n : m, es = of_dtype_size(dt);
  char *p = of_ptr(t);
  for (int64_t i = 0; i < k; i++) of_store_double(p + (i * m + i) * es, dt, 1.0);
  *out = t;
  return OF_OK;
}

of_status of_impl_arange(double start, double end, double step, of_dtype dt, of_device dev,
                         of_tensor **out) {
  const of_device_ops *dops = dev != OF_CPU ? of_device_ops_for("arange", dev) : NULL;
  if (dev != OF_CPU && !dops) return OF_ERR_DEVICE;
  if (dops && !dops->iota) {
    of_tensor *t = NULL;
    OF_CHECK(of_impl_arange(start, end, step, dt, OF_CPU, &t));
    return moved(t, dev, out);
  }
  if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step))
    return of_fail(OF_ERR_ARG, "arange: invalid range start=%g end=%g step=%g", start, end, step);
  if ((end - start) / step < 0)
    return of_fail(OF_ERR_ARG, "arange: upper bound and step have inconsistent signs "
                   "(start=%g end=%g step=%g)", start, end, step);
  int64_t n = (int64_t)ceil((end - start) / step);
  of_tensor *t;
  OF_CHECK(of_tensor_new(&n, 1, dt, dev, &t));
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

of_status of_impl_linspace(double start, double end, int64_t steps, of_dtype dt, of_device dev,
                           of_tensor **out) {
  const of_device_ops *dops = dev != OF_CPU ? of_device_ops_for("linspace", dev) : NULL;
  if (dev != OF_CPU && !dops) return OF_ERR_DEVICE;
  if (dops && !dops->iota) {
    of_tensor *t = NULL;
    OF_CHECK(of_impl_linspace(start, end, steps, dt, OF_CPU, &t));
    return moved(t, dev, out);
  }
  if (steps < 0) return of_fail(OF_ERR_ARG, "linspace: number of steps must be >= 0, got %lld", (long long)steps);
  of_tensor *t;
  OF_CHECK(of_tensor_new(&steps, 1, dt, dev, &t));
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

of_status of_impl_from_doubles(const double *values, const int64_t *shape, int32_t ndim,
                               of_dtype dt, of_tensor **out) {
  of_tensor *t;
  OF_CHECK(of_tensor_new(shape, ndim, dt, OF_CPU, &t));
  int64_t es = of_dtype_size(dt);
  char *p = of_ptr(t);
  for (int64_t i = 0; i < t->numel; i++) of_store_double(p + i * es, dt, values[i]);
  *out = t;
  return OF_OK;
}

of_status of_impl_from_buffer(const void *data, const int64_t *shape, int32_t ndim, of_dtype dt,
                              of_tensor **out) {
  of_tensor *t;
  OF_CHECK(of_tensor_new(shape, ndim, dt, OF_CPU, &t));
  if (t->numel) memcpy(of_ptr(t), data, (size_t)(t->numel * of_dtype_size(dt)));
  *out = t;
  return OF_OK;
}

static void no_delete(void *data, void *ctx) { (void)data; (void)ctx; }

of_status of_impl_from_blob(void *data, const int64_t *shape, const int64_t *strides, int32_t ndim,
                            of_dtype dt, of_deleter deleter, void *ctx, of_tensor **out) {
  if (!data) return of_fail(OF_ERR_ARG, "from_blob: data pointer is NULL");
  if (dt < 0 || dt >= OF_NUM_DTYPES) return of_fail(OF_ERR_DTYPE, "from_blob: unknown dtype %d", (int)dt);
  if (ndim < 0 || ndim > OF_MAX_DIMS) return of_fail(OF_ERR_SHAPE, "from_blob: bad ndim %d", (int)ndim);
  int64_t cs[OF_MAX_DIMS], hi = 0;
  if (!strides) {
    of_contiguous_strides(shape, ndim, cs);
    strides = cs;
  }
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] < 0 || strides[i] < 0)
      return of_fail(OF_ERR_SHAPE, "from_blob: negative size or stride at dim %d", (int)i + 1);
    if (shape[i] > 0) hi += (shape[i] - 1) * strides[i];
  }
  of_storage *s = malloc(sizeof *s);
  of_tensor *t = malloc(sizeof *t);
  if (!s || !t) {
    free(s);
    free(t);
    return of_fail(OF_ERR_OOM, "from_blob: out of memory");
  }
  static int64_t blob_ids = -1;   /* negative ids: never equal to allocator storages */
  *s = (of_storage){.refcount = 1, .data = data, .nbytes = (hi + 1) * of_dtype_size(dt),
                    .device = OF_CPU, .id = __atomic_sub_fetch(&blob_ids, 1, __ATOMIC_RELAXED),
                    .deleter = deleter ? deleter : no_delete, .deleter_ctx = ctx};
  t->refcount = 1;
  of_tensor_clear_autograd(t);
  t->storage = s;
  t->offset = 0;
  t->ndim = ndim;
  t->dtype = dt;
  for (int32_t i = 0; i < ndim; i++) {
    t->shape[i] = shape[i];
    t->strides[i] = strides[i];
  }
  t->numel = of_shape_numel(shape, ndim);
  *out = t;
  return OF_OK;
}

of_status of_impl_tensor_get_flat(const of_tensor *t, int64_t i, double *out) {
  if (of_dev(t) != OF_CPU) {   /* one element through the host */
    if (i < 0 || i >= t->numel)
      return of_fail(OF_ERR_INDEX, "item: flat index %lld out of range for %lld elements",
                     (long long)i, (long long)t->numel);
    of_tensor *c;
    OF_CHECK(of_to_device((of_tensor *)t, OF_CPU, 0, &c));
    of_status st = of_impl_tensor_get_flat(c, i, out);
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
  *out = of_load_double(of_ptr(t) + off * of_dtype_size(t->dtype), t->dtype);
  return OF_OK;
}

of_status of_impl_tensor_to_doubles(const of_tensor *t, double *buf, int64_t n) {
  if (of_dev(t) != OF_CPU) {
    of_tensor *c;
    OF_CHECK(of_to_device((of_tensor *)t, OF_CPU, 0, &c));
    of_status st = of_impl_tensor_to_doubles(c, buf, n);
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
    buf[k] = of_load_double(base + off * es, t->dtype);
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
      if (++idx[d] < t->shape[d]) break;
      idx[d] = 0;
    }
  }
  return OF_OK;
}
