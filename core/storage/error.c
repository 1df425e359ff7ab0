/* error.c -- thread-local status messages; the library never aborts. */
#include "../internal.h"
#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[1024];
static _Thread_local of_status last_code;

const char *of_last_error(void) { return last_error; }

void of_set_error(of_status code, const char *msg) {
  last_code = code;
  snprintf(last_error, sizeof last_error, "%s", msg ? msg : "");
}

void of_clear_error(void) {
  last_code = OF_OK;
  last_error[0] = 0;
}

of_status of_fail(of_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  last_code = code;
  return code;
}

const char *of_shape_str(const int64_t *shape, int32_t ndim, char *buf, size_t cap) {
  size_t n = 0;
  n += (size_t)snprintf(buf + n, cap - n, "[");
  for (int32_t i = 0; i < ndim && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, i ? ",%lld" : "%lld", (long long)shape[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

of_status of_check_shape(const char *op, const int64_t *shape, int32_t ndim, int64_t *numel) {
  if (ndim < 0 || ndim > OF_MAX_DIMS)
    return of_fail(OF_ERR_SHAPE, "%s: %d dims given, at most %d supported", op, (int)ndim,
                   OF_MAX_DIMS);
  char b[200];
  /* the count over max(size, 1) bounds the contiguous strides too, so a
   * shape with a 0 is refused as well when its other sizes overflow them */
  int64_t n = 1, span = 1;
  bool over = false;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return of_fail(OF_ERR_SHAPE, "%s: negative size %lld in shape %s", op, (long long)shape[i],
                     of_shape_str(shape, ndim, b, sizeof b));
    if (!of_mul_ok(span, shape[i] > 1 ? shape[i] : 1, &span) || span > OF_MAX_NUMEL) over = true;
    n = over ? 0 : n * shape[i];   /* <= span: cannot overflow */
  }
  if (over)
    return of_fail(OF_ERR_SHAPE, "%s: shape %s has more elements than a tensor can hold "
                   "(at most 2^60)", op, of_shape_str(shape, ndim, b, sizeof b));
  if (numel) *numel = n;
  return OF_OK;
}

of_status of_check_view(const char *op, const int64_t *shape, const int64_t *strides,
                        int32_t ndim, int64_t offset, int64_t cap) {
  int64_t n;
  OF_CHECK(of_check_shape(op, shape, ndim, &n));
  if (n == 0) return OF_OK;
  int64_t lo = offset, hi = offset, ext;
  bool ok = true;
  for (int32_t i = 0; ok && i < ndim; i++) {
    ok = of_mul_ok(shape[i] - 1, strides[i], &ext) &&
         (ext >= 0 ? of_add_ok(hi, ext, &hi) : of_add_ok(lo, ext, &lo));
  }
  if (!ok || lo < 0 || hi >= cap) {
    char b[200], c[200];
    return of_fail(OF_ERR_INDEX, "%s: a view of shape %s, strides %s and offset %lld reaches "
                   "outside a storage of %lld elements", op, of_shape_str(shape, ndim, b, sizeof b),
                   of_shape_str(strides, ndim, c, sizeof c), (long long)offset, (long long)cap);
  }
  return OF_OK;
}

of_status of_check_window(const char *op, const int64_t *in, const int64_t *k,
                          const int64_t *stride, const int64_t *pad, const int64_t *dil,
                          int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    int64_t eff, padded, span;
    bool ok = of_mul_ok(dil[i], k[i] - 1, &eff) && of_add_ok(eff, 1, &eff) &&
              of_mul_ok(pad[i], 2, &padded) && of_add_ok(in[i], padded, &padded) &&
              of_mul_ok(in[i] > 0 ? in[i] - 1 : 0, stride[i], &span) && eff <= OF_MAX_NUMEL &&
              padded <= OF_MAX_NUMEL && span <= OF_MAX_NUMEL;
    if (!ok) {
      char b[4][100];
      return of_fail(OF_ERR_SHAPE, "%s: input size %s, kernel %s, stride %s, padding %s and "
                     "dilation %s: the window arithmetic overflows (dim %d)", op,
                     of_shape_str(in, n, b[0], 100), of_shape_str(k, n, b[1], 100),
                     of_shape_str(stride, n, b[2], 100), of_shape_str(pad, n, b[3], 100),
                     of_shape_str(dil, n, (char[100]){0}, 100), (int)i + 1);
    }
  }
  return OF_OK;
}

int32_t of_version(void) { return OF_VERSION; }
