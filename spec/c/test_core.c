/* C API tests: creation, views, errors, elementwise, through oneflow.h only. */
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

static void test_create_and_view(void) {
  int64_t shape[2] = {2, 3};
  of_tensor *x, *t, *c;
  double vals[6] = {1, 2, 3, 4, 5, 6};
  CHECK(of_from_doubles(vals, shape, 2, OF_FLOAT32, &x) == OF_OK);
  CHECK(of_tensor_numel(x) == 6 && of_tensor_ndim(x) == 2);
  CHECK(of_transpose(x, 0, 1, &t) == OF_OK);
  CHECK(!of_tensor_is_contiguous(t));
  CHECK(of_tensor_storage_id(t) == of_tensor_storage_id(x));
  CHECK(of_contiguous(t, &c) == OF_OK);
  const float *p = of_tensor_data(c);
  CHECK(p[0] == 1 && p[1] == 4 && p[2] == 2 && p[5] == 6);
  of_tensor *v;
  int64_t flat = 6;
  CHECK(of_view(t, &flat, 1, &v) != OF_OK);   /* non-contiguous view */
  CHECK(strstr(of_last_error(), "view") != NULL);
  of_tensor_release(c);
  of_tensor_release(t);
  of_tensor_release(x);
}

static void test_binary_and_errors(void) {
  int64_t s1[2] = {2, 1}, s2[1] = {3};
  of_tensor *a, *b, *c;
  CHECK(of_full(s1, 2, 2.0, OF_FLOAT64, OF_CPU, &a) == OF_OK);
  CHECK(of_arange(0, 3, 1, OF_INT64, OF_CPU, &b) == OF_OK);
  CHECK(of_binary(OF_MUL, a, b, NULL, &c) == OF_OK);   /* broadcast to [2,3] */
  CHECK(of_tensor_dtype(c) == OF_FLOAT64 && of_tensor_size(c, 1) == 3);
  const double *p = of_tensor_data(c);
  CHECK(p[0] == 0 && p[1] == 2 && p[5] == 4);
  of_tensor_release(c);
  of_tensor *d;
  CHECK(of_full(s2, 1, 1.0, OF_FLOAT32, OF_CPU, &d) == OF_OK);
  of_tensor *e;
  int64_t s3[1] = {4};
  CHECK(of_zeros(s3, 1, OF_FLOAT32, OF_CPU, &e) == OF_OK);
  CHECK(of_binary(OF_ADD, d, e, NULL, &c) == OF_ERR_SHAPE);
  CHECK(strstr(of_last_error(), "add") && strstr(of_last_error(), "[3]") &&
        strstr(of_last_error(), "[4]"));
  CHECK(of_binary_scalar(OF_FLOOR_DIVIDE, b, 0, 0, NULL, &c) != OF_OK);
  CHECK(strstr(of_last_error(), "division by zero") != NULL);
  int64_t neg[1] = {-2};
  CHECK(of_zeros(neg, 1, OF_FLOAT32, OF_CPU, &c) == OF_ERR_SHAPE);
  of_tensor_release(a);
  of_tensor_release(b);
  of_tensor_release(d);
  of_tensor_release(e);
}

static void test_half(void) {
  int64_t n = 3;
  double vals[3] = {0.5, -2, 65504};
  of_tensor *h, *f;
  CHECK(of_from_doubles(vals, &n, 1, OF_FLOAT16, &h) == OF_OK);
  CHECK(of_unary(OF_NEG, h, NULL, &f) == OF_OK);
  CHECK(of_tensor_dtype(f) == OF_FLOAT16);
  double out[3];
  CHECK(of_tensor_to_doubles(f, out, 3) == OF_OK);
  CHECK(out[0] == -0.5 && out[1] == 2 && out[2] == -65504);
  of_tensor_release(f);
  of_tensor_release(h);
}

static void test_cdef_embedded(void) {
  const char *cdef = of_cdef();
  CHECK(strstr(cdef, "of_binary") != NULL);
  CHECK(strstr(cdef, "#include") == NULL);
  CHECK(of_version() == OF_VERSION);
}

/* doc/reliability.md: sizes never wrap, huge requests fail up front, writes
 * through expanded views are refused, the thread count is checked. */
static void test_reliability(void) {
  of_tensor *t = NULL, *e = NULL;
  int64_t huge[2] = {(int64_t)1 << 32, (int64_t)1 << 32};
  CHECK(of_zeros(huge, 2, OF_FLOAT32, OF_CPU, &t) == OF_ERR_SHAPE);
  CHECK(strstr(of_last_error(), "zeros: shape [4294967296,4294967296]") != NULL);
  CHECK(of_eye((int64_t)1 << 32, -1, OF_FLOAT32, OF_CPU, &t) == OF_ERR_SHAPE);
  int64_t big[1] = {(int64_t)1 << 40};
  CHECK(of_zeros(big, 1, OF_FLOAT32, OF_CPU, &t) == OF_ERR_OOM);
  CHECK(strstr(of_last_error(), "4398046511104 bytes") != NULL);
  CHECK(strstr(of_last_error(), "available") != NULL);
  int64_t one[2] = {1, 4}, three[2] = {3, 4};
  CHECK(of_zeros(one, 2, OF_FLOAT32, OF_CPU, &t) == OF_OK);
  CHECK(of_expand(t, huge, 2, &e) == OF_ERR_SHAPE);
  CHECK(strstr(of_last_error(), "expand:") != NULL);
  CHECK(of_expand(t, three, 2, &e) == OF_OK);
  CHECK(of_fill_(e, 1) == OF_ERR_ARG);
  CHECK(strstr(of_last_error(), "single memory location") != NULL);
  of_tensor_release(e);
  of_tensor_release(t);
  int32_t nt = of_get_num_threads();
  CHECK(of_set_num_threads(0) == OF_ERR_ARG);
  CHECK(of_set_num_threads(100000) == OF_ERR_ARG);
  CHECK(of_get_num_threads() == nt);
  CHECK(of_set_num_threads(nt) == OF_OK);
}

int main(void) {
  test_reliability();
  test_create_and_view();
  test_binary_and_errors();
  test_half();
  test_cdef_embedded();
  const of_memory_stats *s = of_memory_stats_get(OF_CPU);
  CHECK(s->current_bytes == 0);   /* everything released */
  if (failures) fprintf(stderr, "%d checks failed\n", failures);
  return failures != 0;
}
