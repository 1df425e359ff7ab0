/* C API tests for the reductions (core/ops/reduce.c), through oneflow.h only. */
#include <oneflow/oneflow.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                     \
    }                                                                 \
  } while (0)

static double at(of_tensor *t, int64_t i) {
  double v = NAN;
  of_tensor_get_flat(t, i, &v);
  return v;
}

/* [[1,2,3],[4,5,6]] as float32 */
static of_tensor *matrix(of_dtype dt) {
  int64_t shape[2] = {2, 3};
  double vals[6] = {1, 2, 3, 4, 5, 6};
  of_tensor *x = NULL;
  CHECK(of_from_doubles(vals, shape, 2, dt, &x) == OF_OK);
  return x;
}

static void test_sum_mean(void) {
  of_tensor *x = matrix(OF_FLOAT32), *r;
  int32_t d1 = 1, dneg = -2, both[2] = {0, 1};
  CHECK(of_reduce(OF_RED_SUM, x, NULL, 0, 0, 0, -1, &r) == OF_OK);
  CHECK(of_tensor_ndim(r) == 0 && at(r, 0) == 21 && of_tensor_dtype(r) == OF_FLOAT32);
  of_tensor_release(r);
  CHECK(of_reduce(OF_RED_SUM, x, &d1, 1, 0, 0, -1, &r) == OF_OK);
  CHECK(of_tensor_ndim(r) == 1 && at(r, 0) == 6 && at(r, 1) == 15);
  of_tensor_release(r);
  CHECK(of_reduce(OF_RED_MEAN, x, &dneg, 1, 1, 0, -1, &r) == OF_OK);   /* keepdim */
  CHECK(of_tensor_ndim(r) == 2 && of_tensor_size(r, 0) == 1 && at(r, 2) == 4.5);
  of_tensor_release(r);
  CHECK(of_reduce(OF_RED_PROD, x, both, 2, 0, 0, -1, &r) == OF_OK);
  CHECK(at(r, 0) == 720);
  of_tensor_release(r);
  /* transposed: a column sum walks strided memory */
  of_tensor *t;
  CHECK(of_transpose(x, 0, 1, &t) == OF_OK);
  CHECK(of_reduce(OF_RED_SUM, t, &d1, 1, 0, 0, -1, &r) == OF_OK);
  CHECK(of_tensor_size(r, 0) == 3 && at(r, 0) == 5 && at(r, 2) == 9);
  of_tensor_release(r);
  of_tensor_release(t);
  of_tensor_release(x);

  /* ints: sum -> int64; mean -> error naming op, dtype, shape */
  of_tensor *i = matrix(OF_INT32);
  CHECK(of_reduce(OF_RED_SUM, i, NULL, 0, 0, 0, -1, &r) == OF_OK);
  CHECK(of_tensor_dtype(r) == OF_INT64 && at(r, 0) == 21);
  of_tensor_release(r);
  CHECK(of_reduce(OF_RED_MEAN, i, NULL, 0, 0, 0, -1, &r) == OF_ERR_DTYPE);
  CHECK(strstr(of_last_error(), "mean") && strstr(of_last_error(), "int32") &&
        strstr(of_last_error(), "[2,3]"));
  CHECK(of_reduce(OF_RED_MEAN, i, NULL, 0, 0, 0, OF_FLOAT64, &r) == OF_OK);
  CHECK(of_tensor_dtype(r) == OF_FLOAT64 && at(r, 0) == 3.5);
  of_tensor_release(r);
  of_tensor_release(i);
}

static void test_big_sum(void) {
  int64_t n = 16777216;
  of_tensor *o, *r;
  CHECK(of_full(&n, 1, 1.0, OF_FLOAT32, OF_CPU, &o) == OF_OK);
  for (int32_t threads = 1; threads <= 4; threads *= 2) {
    of_set_num_threads(threads);
    CHECK(of_reduce(OF_RED_SUM, o, NULL, 0, 0, 0, -1, &r) == OF_OK);
    CHECK(at(r, 0) == 16777216.0);
    of_tensor_release(r);
  }
  of_tensor_release(o);
}

static void test_norm_var(void) {
  int64_t shape[1] = {4};
  double vals[4] = {3, -4, 0, 0};
  of_tensor *x, *r;
  CHECK(of_from_doubles(vals, shape, 1, OF_FLOAT64, &x) == OF_OK);
  CHECK(of_reduce(OF_RED_NORM, x, NULL, 0, 0, 2, -1, &r) == OF_OK && at(r, 0) == 5);
  of_tensor_release(r);
  CHECK(of_reduce(OF_RED_NORM, x, NULL, 0, 0, 1, -1, &r) == OF_OK && at(r, 0) == 7);
  of_tensor_release(r);
  CHECK(of_reduce(OF_RED_NORM, x, NULL, 0, 0, HUGE_VAL, -1, &r) == OF_OK && at(r, 0) == 4);
  of_tensor_release(r);
  CHECK(of_reduce(OF_RED_NORM, x, NULL, 0, 0, 0, -1, &r) == OF_OK && at(r, 0) == 2);
  of_tensor_release(r);
  /* mean -0.25, squared deviations 10.5625 + 14.0625 + 0.0625 * 2 = 24.75 */
  CHECK(of_var(x, NULL, 0, 1, 0, 0, &r) == OF_OK && fabs(at(r, 0) - 8.25) < 1e-12);
  of_tensor_release(r);
  CHECK(of_var(x, NULL, 0, 0, 0, 1, &r) == OF_OK && fabs(at(r, 0) - sqrt(24.75 / 4)) < 1e-12);
  of_tensor_release(r);
  of_tensor_release(x);
}

static void test_max_argmax(void) {
  of_tensor *x = matrix(OF_FLOAT32), *v, *i;
  CHECK(of_max_dim(x, 1, 0, 1, 1, &v, &i) == OF_OK);   /* 1-based indices */
  CHECK(at(v, 0) == 3 && at(v, 1) == 6 && at(i, 0) == 3 && at(i, 1) == 3);
  CHECK(of_tensor_dtype(i) == OF_INT64);
  of_tensor_release(v);
  of_tensor_release(i);
  CHECK(of_max_dim(x, 0, 1, 0, 0, &v, &i) == OF_OK);   /* min, keepdim, 0-based */
  CHECK(of_tensor_ndim(v) == 2 && at(v, 0) == 1 && at(i, 2) == 0);
  of_tensor_release(v);
  of_tensor_release(i);
  CHECK(of_argmax(x, -100, 0, 1, 1, &i) == OF_OK);
  CHECK(of_tensor_ndim(i) == 0 && at(i, 0) == 6);
  of_tensor_release(i);
  CHECK(of_max_dim(x, 2, 0, 1, 1, &v, &i) == OF_ERR_INDEX);
  CHECK(strstr(of_last_error(), "max") && strstr(of_last_error(), "dim 3"));
  of_tensor_release(x);

  int64_t empty[2] = {0, 3};
  of_tensor *e, *r;
  CHECK(of_zeros(empty, 2, OF_FLOAT32, OF_CPU, &e) == OF_OK);
  CHECK(of_max_dim(e, 0, 0, 1, 1, &v, &i) == OF_ERR_SHAPE);
  CHECK(strstr(of_last_error(), "non-zero size") && strstr(of_last_error(), "[0,3]"));
  CHECK(of_reduce(OF_RED_AMAX, e, NULL, 0, 0, 0, -1, &r) == OF_ERR_SHAPE);
  CHECK(of_reduce(OF_RED_SUM, e, NULL, 0, 0, 0, -1, &r) == OF_OK && at(r, 0) == 0);
  of_tensor_release(r);
  of_tensor_release(e);
}

static void test_softmax_cumsum(void) {
  int64_t shape[2] = {2, 3};
  double vals[6] = {1000, 1001, 1002, 1, 1, 1};
  of_tensor *x, *r;
  CHECK(of_from_doubles(vals, shape, 2, OF_FLOAT32, &x) == OF_OK);
  CHECK(of_softmax(x, -1, 0, &r) == OF_OK);
  double s = at(r, 0) + at(r, 1) + at(r, 2);
  CHECK(fabs(s - 1) < 1e-6 && fabs(at(r, 4) - 1.0 / 3) < 1e-6);
  of_tensor_release(r);
  CHECK(of_softmax(x, 1, 1, &r) == OF_OK);
  double l = log(1 + exp(1) + exp(2));
  CHECK(fabs(at(r, 2) - (2 - l)) < 1e-5 && isfinite(at(r, 0)));
  of_tensor_release(r);
  CHECK(of_cumulative(x, 0, 0, &r) == OF_OK && at(r, 3) == 1001 && at(r, 5) == 1003);
  of_tensor_release(r);
  CHECK(of_softmax(x, 5, 0, &r) == OF_ERR_INDEX);
  of_tensor_release(x);
  CHECK(strcmp(of_reduce_name(OF_RED_LOGSUMEXP), "logsumexp") == 0);
}

int main(void) {
  test_sum_mean();
  test_big_sum();
  test_norm_var();
  test_max_argmax();
  test_softmax_cumsum();
  of_empty_cache(OF_CPU);
  const of_memory_stats *s = of_memory_stats_get(OF_CPU);
  CHECK(s->current_bytes == 0);   /* every temporary released */
  if (failures) fprintf(stderr, "%d checks failed\n", failures);
  return failures != 0;
}
