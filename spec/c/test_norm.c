/* C API tests for the norm, resampling and loss kernels: a forward value,
 * running-stat updates, a backward pass, an error message, and that every
 * temporary is released (current_bytes back to its start). */
#include <math.h>
#include <oneflow/oneflow.h>
#include <stdio.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
      failures++;                                                                \
    }                                                                            \
  } while (0)
#define CLOSE(a, b) CHECK(fabs((double)(a) - (double)(b)) < 1e-9 * (1 + fabs((double)(b))))

static of_tensor *from(const double *v, const int64_t *shape, int32_t nd, of_dtype dt) {
  of_tensor *t = NULL;
  if (of_from_doubles(v, shape, nd, dt, &t) != OF_OK) {
    fprintf(stderr, "from_doubles failed: %s\n", of_last_error());
    failures++;
  }
  return t;
}

/* layer_norm of [[1, 2, 3], [2, 4, 8]] over the last dim, eps 0 */
static void test_layer_norm_forward(void) {
  int64_t s[2] = {2, 3};
  double xv[6] = {1, 2, 3, 2, 4, 8};
  of_tensor *x = from(xv, s, 2, OF_FLOAT64), *y = NULL;
  CHECK(of_layer_norm(x, 1, NULL, NULL, 0, &y) == OF_OK);
  const double *p = y ? of_tensor_data(y) : NULL;
  if (p) {
    double r = sqrt(1.5);   /* row 1: mean 2, var 2/3 */
    CLOSE(p[0], -r);
    CLOSE(p[1], 0);
    CLOSE(p[2], r);
    double m = 14.0 / 3, v = ((2 - m) * (2 - m) + (4 - m) * (4 - m) + (8 - m) * (8 - m)) / 3;
    CLOSE(p[5], (8 - m) / sqrt(v));
  }
  of_tensor_release(y);
  of_tensor_release(x);
}

/* batch_norm in training: running stats (unbiased var), then backward */
static void test_batch_norm_train_and_backward(void) {
  int64_t s[2] = {2, 2}, c = 2;
  double xv[4] = {1, 10, 3, 30}, zero[2] = {0, 0}, one[2] = {1, 1};
  of_tensor *x = from(xv, s, 2, OF_FLOAT64), *rm = from(zero, &c, 1, OF_FLOAT32);
  of_tensor *rv = from(one, &c, 1, OF_FLOAT32), *w = from(one, &c, 1, OF_FLOAT64), *y = NULL;
  CHECK(of_tensor_set_requires_grad(x, 1) == OF_OK);
  CHECK(of_tensor_set_requires_grad(w, 1) == OF_OK);
  CHECK(of_batch_norm(x, rm, rv, w, NULL, 1, 0.5, 0, &y) == OF_OK);
  const float *m = of_tensor_data(rm), *v = of_tensor_data(rv);
  CHECK(fabsf(m[0] - 1.0f) < 1e-6f && fabsf(m[1] - 10.0f) < 1e-6f);   /* 0.5 * mean */
  CHECK(fabsf(v[0] - 1.5f) < 1e-6f && fabsf(v[1] - 100.5f) < 1e-4f);  /* 0.5 + 0.5 * unbiased */
  const double *p = of_tensor_data(y);
  CLOSE(p[0], -1);
  CLOSE(p[3], 1);
  CHECK(strcmp(of_node_name(of_tensor_grad_fn(y)), "BatchNormBackward") == 0);
  double gv[4] = {1, 0, 0, 0};
  of_tensor *g = from(gv, s, 2, OF_FLOAT64);
  CHECK(of_backward(&y, &g, 1, 0, 0) == OF_OK);
  /* y[0][0] = (x00 - x10) / |x00 - x10| is flat in x: zero grad; w gets xhat */
  const double *gx = of_tensor_data(of_tensor_grad(x)), *gw = of_tensor_data(of_tensor_grad(w));
  CLOSE(gx[0], 0);
  CLOSE(gw[0], -1);
  CLOSE(gw[1], 0);
  of_tensor *ts[6] = {g, y, w, rv, rm, x};
  of_tensor_release_many(ts, 6);
}

static void test_losses_and_errors(void) {
  int64_t s[2] = {2, 3}, n = 2;
  double xv[6] = {1, 2, 3, 0, 0, 0}, tv[2] = {3, 11};
  of_tensor *x = from(xv, s, 2, OF_FLOAT32), *t = from(tv, &n, 1, OF_INT64), *y = NULL;
  CHECK(of_cross_entropy(x, t, NULL, OF_LOSS_MEAN, -100, 0, 1, &y) == OF_ERR_INDEX);
  CHECK(strstr(of_last_error(), "target 11 out of range for 3 classes (1-based: expected 1..3)"));
  CHECK(y == NULL);
  double t2[2] = {3, 1};
  of_tensor *t1 = from(t2, &n, 1, OF_INT64);
  CHECK(of_cross_entropy(x, t1, NULL, OF_LOSS_NONE, -100, 0, 1, &y) == OF_OK);
  const float *l = of_tensor_data(y);
  CHECK(fabs(l[0] - (log(exp(1) + exp(2) + exp(3)) - 3)) < 1e-6);
  CHECK(fabs(l[1] - log(3.0)) < 1e-6);
  of_tensor_release(y);
  int64_t pad[2] = {1, 1};
  CHECK(of_pad(x, pad, 1, OF_PAD_REFLECT, 0, &y) == OF_OK);
  CHECK(of_tensor_size(y, 1) == 5 && ((const float *)of_tensor_data(y))[0] == 2);
  of_tensor_release(y);
  int64_t big[2] = {3, 0};
  CHECK(of_pad(x, big, 1, OF_PAD_REFLECT, 0, &y) == OF_ERR_ARG);
  CHECK(strstr(of_last_error(), "reflect") != NULL);
  of_tensor *ts[3] = {t1, t, x};
  of_tensor_release_many(ts, 3);
}

int main(void) {
  int64_t start = of_memory_stats_get(OF_CPU)->current_bytes;
  test_layer_norm_forward();
  test_batch_norm_train_and_backward();
  test_losses_and_errors();
  int64_t end = of_memory_stats_get(OF_CPU)->current_bytes;
  if (end != start) {
    fprintf(stderr, "leak: current_bytes %lld at start, %lld at end\n", (long long)start,
            (long long)end);
    failures++;
  }
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  else printf("test_norm: ok\n");
  return failures != 0;
}
