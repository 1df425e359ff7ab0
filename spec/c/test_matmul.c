/* C API tests for core/ops/matmul.c: gemm results against a naive loop,
 * transposed operands reaching BLAS without a copy, errors, backward through
 * mm, and no leaked temporaries (current_bytes back to where it started). */
#include <oneflow/oneflow.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
      failures++;                                                               \
    }                                                                           \
  } while (0)

static int64_t current(void) { return of_memory_stats_get(OF_CPU)->current_bytes; }

/* (rows, cols) float64 tensor with values from a small LCG. */
static of_tensor *filled(int64_t rows, int64_t cols, of_dtype dt, unsigned seed) {
  int64_t shape[2] = {rows, cols};
  double *v = malloc(sizeof(double) * (size_t)(rows * cols + 1));
  for (int64_t i = 0; i < rows * cols; i++) {
    seed = seed * 1103515245u + 12345u;
    v[i] = (double)((seed >> 16) % 13) - 6;
  }
  of_tensor *t = NULL;
  CHECK(of_from_doubles(v, shape, 2, dt, &t) == OF_OK);
  free(v);
  return t;
}

/* max |got - a @ b| with a naive triple loop (reads through strides). */
static double max_err(of_tensor *got, of_tensor *a, of_tensor *b) {
  int64_t m = of_tensor_size(a, 0), k = of_tensor_size(a, 1), n = of_tensor_size(b, 1);
  double *va = malloc(sizeof(double) * (size_t)(m * k + 1));
  double *vb = malloc(sizeof(double) * (size_t)(k * n + 1));
  double *vc = malloc(sizeof(double) * (size_t)(m * n + 1));
  of_tensor_to_doubles(a, va, m * k);
  of_tensor_to_doubles(b, vb, k * n);
  of_tensor_to_doubles(got, vc, m * n);
  double err = 0;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0;
      for (int64_t p = 0; p < k; p++) s += va[i * k + p] * vb[p * n + j];
      err = fmax(err, fabs(s - vc[i * n + j]));
    }
  free(va);
  free(vb);
  free(vc);
  return err;
}

static void test_gemm_values(void) {
  of_dtype dts[3] = {OF_FLOAT32, OF_FLOAT64, OF_INT64};
  for (int d = 0; d < 3; d++) {
    of_tensor *a = filled(37, 53, dts[d], 1), *b = filled(53, 29, dts[d], 2), *c = NULL;
    CHECK(of_mm(a, b, NULL, &c) == OF_OK);
    CHECK(of_tensor_dtype(c) == dts[d]);
    CHECK(of_tensor_size(c, 0) == 37 && of_tensor_size(c, 1) == 29);
    CHECK(max_err(c, a, b) == 0);   /* small integers: exact in every dtype */
    of_tensor_release(c);
    of_tensor_release(a);
    of_tensor_release(b);
  }
}

/* a^T @ b^T with both operands transposed views: no copy, so the only new
 * memory is the result. */
static void test_transposed_no_copy(void) {
  of_tensor *a0 = filled(256, 128, OF_FLOAT32, 3), *b0 = filled(64, 256, OF_FLOAT32, 4);
  of_tensor *a, *b, *c = NULL;
  CHECK(of_transpose(a0, 0, 1, &a) == OF_OK);   /* (128, 256) */
  CHECK(of_transpose(b0, 0, 1, &b) == OF_OK);   /* (256, 64) */
  CHECK(!of_tensor_is_contiguous(a) && !of_tensor_is_contiguous(b));
  int64_t before = current();
  of_memory_reset_peak(OF_CPU);
  CHECK(of_matmul(a, b, &c) == OF_OK);
  int64_t result_bytes = 128 * 64 * 4;
  CHECK(of_memory_stats_get(OF_CPU)->peak_bytes - before <= result_bytes + result_bytes / 4);
  CHECK(max_err(c, a, b) == 0);
  of_tensor_release(c);
  of_tensor_release(a);
  of_tensor_release(b);
  of_tensor_release(a0);
  of_tensor_release(b0);
}

static void test_batched_and_errors(void) {
  /* (4, 3, 2) @ (2, 5): broadcast of a 2-D operand over the batch */
  int64_t s3[3] = {4, 3, 2}, s2[2] = {2, 5};
  of_tensor *x, *w, *y = NULL;
  CHECK(of_full(s3, 3, 1.0, OF_FLOAT64, OF_CPU, &x) == OF_OK);
  CHECK(of_full(s2, 2, 2.0, OF_FLOAT64, OF_CPU, &w) == OF_OK);
  CHECK(of_matmul(x, w, &y) == OF_OK);
  CHECK(of_tensor_ndim(y) == 3 && of_tensor_size(y, 0) == 4 && of_tensor_size(y, 2) == 5);
  const double *p = of_tensor_data(y);
  int ok = 1;
  for (int i = 0; i < 60; i++) ok &= p[i] == 4.0;
  CHECK(ok);
  of_tensor_release(y);

  of_tensor *a = filled(2, 3, OF_FLOAT32, 5), *b = filled(4, 5, OF_FLOAT32, 6), *c = NULL;
  CHECK(of_matmul(a, b, &c) == OF_ERR_SHAPE);
  CHECK(strcmp(of_last_error(), "matmul: shapes [2,3] and [4,5] do not match (3 vs 4)") == 0);
  CHECK(of_mm(a, b, NULL, &c) == OF_ERR_SHAPE);
  CHECK(strcmp(of_last_error(), "mm: shapes [2,3] and [4,5] do not match (3 vs 4)") == 0);
  CHECK(of_matmul(a, x, &c) == OF_ERR_DTYPE);
  CHECK(strstr(of_last_error(), "float32") && strstr(of_last_error(), "float64") &&
        strstr(of_last_error(), "matmul"));
  CHECK(of_bmm(x, x, &c) == OF_ERR_SHAPE);
  CHECK(strstr(of_last_error(), "bmm: shapes [4,3,2] and [4,3,2]") != NULL);
  of_tensor *bias;
  int64_t n7 = 7;
  CHECK(of_zeros(&n7, 1, OF_FLOAT32, OF_CPU, &bias) == OF_OK);
  of_tensor *b35 = filled(3, 5, OF_FLOAT32, 7);
  CHECK(of_addmm(bias, a, b35, 1, 1, &c) == OF_ERR_SHAPE);
  CHECK(strstr(of_last_error(), "addmm") && strstr(of_last_error(), "[7]"));
  of_tensor_release(b35);
  of_tensor_release(bias);
  of_tensor_release(a);
  of_tensor_release(b);
  of_tensor_release(x);
  of_tensor_release(w);
}

static void test_addmm_half(void) {
  of_tensor *a = filled(5, 7, OF_FLOAT16, 8), *b = filled(7, 3, OF_FLOAT16, 9), *c, *r = NULL;
  int64_t n3 = 3;
  CHECK(of_full(&n3, 1, 1.0, OF_FLOAT16, OF_CPU, &c) == OF_OK);
  CHECK(of_addmm(c, a, b, 2.0, 1.0, &r) == OF_OK);
  CHECK(of_tensor_dtype(r) == OF_FLOAT16);
  of_tensor *mmr = NULL;
  CHECK(of_mm(a, b, NULL, &mmr) == OF_OK);
  double vr[15], vm[15];
  of_tensor_to_doubles(r, vr, 15);
  of_tensor_to_doubles(mmr, vm, 15);
  int ok = 1;
  for (int i = 0; i < 15; i++) ok &= vr[i] == vm[i] + 2;
  CHECK(ok);
  of_tensor_release(mmr);
  of_tensor_release(r);
  of_tensor_release(c);
  of_tensor_release(a);
  of_tensor_release(b);
}

/* Backward through mm: with g = ones, grad a = ones @ b^T (row sums of b). */
static void test_backward(void) {
  of_tensor *a = filled(3, 4, OF_FLOAT64, 10), *b = filled(4, 2, OF_FLOAT64, 11), *y = NULL, *s = NULL;
  CHECK(of_tensor_set_requires_grad(a, 1) == OF_OK);
  CHECK(of_mm(a, b, NULL, &y) == OF_OK);
  CHECK(of_tensor_grad_fn(y) && strcmp(of_node_name(of_tensor_grad_fn(y)), "MmBackward") == 0);
  CHECK(of_reduce(OF_RED_SUM, y, NULL, 0, 0, 0, -1, &s) == OF_OK);
  CHECK(of_backward(&s, NULL, 1, 0, 0) == OF_OK);
  of_tensor *g = of_tensor_grad(a);
  CHECK(g != NULL);
  if (g) {
    double vb[8], vg[12];
    of_tensor_to_doubles(b, vb, 8);
    of_tensor_to_doubles(g, vg, 12);
    int ok = 1;
    for (int i = 0; i < 3; i++)
      for (int p = 0; p < 4; p++) ok &= vg[i * 4 + p] == vb[p * 2] + vb[p * 2 + 1];
    CHECK(ok);
  }
  of_tensor_release(s);
  of_tensor_release(y);
  of_tensor_release(a);
  of_tensor_release(b);
}

int main(void) {
  int64_t start = current();
  test_gemm_values();
  test_transposed_no_copy();
  test_batched_and_errors();
  test_addmm_half();
  test_backward();
  if (current() != start) {
    fprintf(stderr, "leak: current_bytes %lld, expected %lld\n", (long long)current(),
            (long long)start);
    failures++;
  }
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("test_matmul: all checks passed\n");
  return 0;
}
