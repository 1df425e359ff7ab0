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

int32_t of_version(void) { return OF_VERSION; }
