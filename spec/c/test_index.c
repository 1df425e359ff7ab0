/* C API tests for the shape and index ops: results, out-of-range rejection
 * (nothing written), error messages, and that every temporary is released. */
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

static of_tensor *from(const double *v, const int64_t *shape, int32_t nd, of_dtype dt) {
  of_tensor *t = NULL;
  if (of_from_doubles(v, shape, nd, dt, &t) != OF_OK) {
    fprintf(stderr, "from_doubles failed: %s\n", of_last_error());
    failures++;
  }
  return t;
}

static void test_gather_and_range_checks(void) {
  int64_t s22[2] = {2, 2};
  double xv[4] = {1, 2, 3, 4}, iv[4] = {0, 0, 1, 0};
  of_tensor *x = from(xv, s22, 2, OF_FLOAT32), *idx = from(iv, s22, 2, OF_INT64), *g;
  CHECK(of_gather(x, 1, idx, 0, &g) == OF_OK);   /* 0-based from C */
  const float *p = of_tensor_data(g);
  CHECK(p[0] == 1 && p[1] == 1 && p[2] == 4 && p[3] == 3);
  of_tensor_release(g);
  /* the same indices read as 1-based: 0 is out of range */
  CHECK(of_gather(x, 1, idx, 1, &g) == OF_ERR_INDEX);
  CHECK(strstr(of_last_error(), "gather: index 0 out of range for dim 2 of size 2") != NULL);
  CHECK(strstr(of_last_error(), "1-based: expected 1..2") != NULL);
  /* float index: a dtype error naming op and dtype */
  CHECK(of_gather(x, 1, x, 0, &g) == OF_ERR_DTYPE);
  CHECK(strstr(of_last_error(), "gather") && strstr(of_last_error(), "float32"));
  of_tensor_release(idx);
  of_tensor_release(x);
}

static void test_scatter_rejects_before_writing(void) {
  int64_t n3 = 3;
  double zero[3] = {0, 0, 0}, iv[3] = {1, 2, 3}, sv[3] = {5, 6, 7};
  of_tensor *x = from(zero, &n3, 1, OF_FLOAT64), *idx = from(iv, &n3, 1, OF_INT32);
  of_tensor *src = from(sv, &n3, 1, OF_FLOAT64), *r;
  /* 1-based: 3 is valid, then index 4 (0-based 3) is not */
  CHECK(of_scatter(x, 0, idx, src, 0, 0, 0, 0, x, &r) == OF_ERR_INDEX);
  CHECK(strstr(of_last_error(), "index 3 out of range") != NULL);
  const double *p = of_tensor_data(x);
  CHECK(p[0] == 0 && p[1] == 0 && p[2] == 0);   /* nothing written */
  CHECK(of_scatter(x, 0, idx, src, 0, 0, 1, 1, x, &r) == OF_OK);   /* add, in place */
  CHECK(r == x && p[0] == 5 && p[1] == 6 && p[2] == 7);
  of_tensor_release(r);
  of_tensor_release(src);
  of_tensor_release(idx);
  of_tensor_release(x);
}

static void test_cat_sort_topk(void) {
  int64_t s23[2] = {2, 3}, s13[2] = {1, 3}, s14[2] = {1, 4};
  double av[6] = {3, 1, 2, 6, 5, 4}, bv[4] = {7, 8, 9, 10};
  of_tensor *a = from(av, s23, 2, OF_FLOAT32), *b = from(bv, s13, 2, OF_INT32);
  of_tensor *c = from(bv, s14, 2, OF_FLOAT32), *ts[2] = {a, b}, *r, *v, *i;
  CHECK(of_cat(ts, 2, 0, &r) == OF_OK);
  CHECK(of_tensor_size(r, 0) == 3 && of_tensor_dtype(r) == OF_FLOAT32);
  CHECK(((const float *)of_tensor_data(r))[7] == 8);
  of_tensor_release(r);
  ts[1] = c;
  CHECK(of_cat(ts, 2, 0, &r) == OF_ERR_SHAPE);
  CHECK(strstr(of_last_error(), "cat") && strstr(of_last_error(), "[2,3]") &&
        strstr(of_last_error(), "[1,4]"));
  CHECK(of_sort(a, -1, 0, 1, 1, &v, &i) == OF_OK);
  const float *vp = of_tensor_data(v);
  const int64_t *ip = of_tensor_data(i);
  CHECK(vp[0] == 1 && vp[1] == 2 && vp[2] == 3 && ip[0] == 2 && ip[1] == 3 && ip[2] == 1);
  CHECK(vp[3] == 4 && ip[3] == 3);
  of_tensor_release(v);
  of_tensor_release(i);
  CHECK(of_topk(a, 4, 1, 1, 1, 0, &v, &i) == OF_ERR_INDEX);
  CHECK(strstr(of_last_error(), "topk") && strstr(of_last_error(), "k 4"));
  CHECK(of_topk(a, 1, 1, 1, 1, 0, &v, &i) == OF_OK);
  CHECK(((const float *)of_tensor_data(v))[1] == 6 && ((const int64_t *)of_tensor_data(i))[1] == 0);  /* row maxima */
  of_tensor_release(v);
  of_tensor_release(i);
  of_tensor_release(a);
  of_tensor_release(b);
  of_tensor_release(c);
}

static void test_misc(void) {
  int64_t s23[2] = {2, 3};
  double av[6] = {0, 1, 0, 2, 0, 3};
  of_tensor *a = from(av, s23, 2, OF_INT64), *r;
  CHECK(of_nonzero(a, 1, &r) == OF_OK);
  CHECK(of_tensor_size(r, 0) == 3 && of_tensor_size(r, 1) == 2);
  const int64_t *p = of_tensor_data(r);
  CHECK(p[0] == 1 && p[1] == 2 && p[2] == 2 && p[3] == 1 && p[4] == 2 && p[5] == 3);
  of_tensor_release(r);
  CHECK(of_one_hot(a, 2, 0, &r) == OF_ERR_INDEX);   /* value 3 >= 2 classes */
  CHECK(of_one_hot(a, -1, 0, &r) == OF_OK);
  CHECK(of_tensor_size(r, 2) == 4 && ((const int64_t *)of_tensor_data(r))[4 + 1] == 1);
  of_tensor_release(r);
  int64_t reps[3] = {2, 1, 2}, shifts[1] = {1};
  int32_t dims[2] = {0, 1};
  CHECK(of_repeat(a, reps, 3, &r) == OF_OK);
  CHECK(of_tensor_numel(r) == 24);
  of_tensor_release(r);
  CHECK(of_repeat(a, reps, 1, &r) == OF_ERR_SHAPE);
  CHECK(of_roll(a, shifts, NULL, 0, &r) == OF_OK);
  CHECK(((const int64_t *)of_tensor_data(r))[0] == 3);
  of_tensor_release(r);
  CHECK(of_flip(a, dims, 2, &r) == OF_OK);
  CHECK(((const int64_t *)of_tensor_data(r))[0] == 3);
  of_tensor_release(r);
  CHECK(of_tri(a, 0, 1, &r) == OF_OK);
  CHECK(((const int64_t *)of_tensor_data(r))[3] == 0);
  of_tensor_release(r);
  of_tensor *mask;
  CHECK(of_binary_scalar(OF_GT, a, 0, 0, NULL, &mask) == OF_OK);
  CHECK(of_masked_select(a, mask, &r) == OF_OK);
  CHECK(of_tensor_numel(r) == 3 && ((const int64_t *)of_tensor_data(r))[2] == 3);
  of_tensor_release(r);
  CHECK(of_masked_select(a, a, &r) == OF_ERR_DTYPE);
  of_tensor_release(mask);
  of_tensor_release(a);
}

int main(void) {
  int64_t start = of_memory_stats_get(OF_CPU)->current_bytes;
  test_gather_and_range_checks();
  test_scatter_rejects_before_writing();
  test_cat_sort_topk();
  test_misc();
  CHECK(of_memory_stats_get(OF_CPU)->current_bytes == start);   /* everything released */
  if (failures) fprintf(stderr, "%d checks failed\n", failures);
  return failures != 0;
}
