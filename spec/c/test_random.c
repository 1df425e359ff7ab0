/* C API tests for the Philox generator: known answer, reproducibility,
 * state save/restore, layout and thread independence, errors, no leaks. */
#include <oneflow/oneflow.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
      failures++;                                                                \
    }                                                                            \
  } while (0)

static of_tensor *new_tensor(int64_t n, of_dtype dt) {
  of_tensor *t = NULL;
  if (of_empty(&n, 1, dt, OF_CPU, &t) != OF_OK) {
    fprintf(stderr, "empty failed: %s\n", of_last_error());
    exit(1);
  }
  return t;
}

static int same_bytes(of_tensor *a, of_tensor *b) {
  int64_t n = of_tensor_numel(a) * of_dtype_size(of_tensor_dtype(a));
  return of_tensor_numel(a) == of_tensor_numel(b) &&
         memcmp(of_tensor_data(a), of_tensor_data(b), (size_t)n) == 0;
}

/* Philox4x32-10 of counter 0 and key 0 is 6627e8d5 e169c58d bc57ac4c 9b00dbd8
 * (Random123's known-answer vectors). randint_ over [0, 2^32) returns the high
 * 32 bits of the first 64-bit word, and uniform_ float64 its top 53 bits. */
static void test_known_answer(void) {
  of_manual_seed(0);
  CHECK(of_initial_seed() == 0);
  of_tensor *t = new_tensor(1, OF_INT64);
  CHECK(of_randint_(t, 0, (int64_t)1 << 32) == OF_OK);
  CHECK(((int64_t *)of_tensor_data(t))[0] == 0xe169c58dll);
  of_tensor_release(t);
  of_manual_seed(0);
  t = new_tensor(1, OF_FLOAT64);
  CHECK(of_uniform_(t, 0, 1) == OF_OK);
  CHECK(((double *)of_tensor_data(t))[0] == (double)(0xe169c58d6627e8d5ull >> 11) * 0x1p-53);
  of_tensor_release(t);
}

static void test_reproducible(void) {
  of_dtype dts[4] = {OF_FLOAT32, OF_FLOAT64, OF_FLOAT16, OF_BFLOAT16};
  for (int k = 0; k < 4; k++) {
    of_tensor *a = new_tensor(1001, dts[k]), *b = new_tensor(1001, dts[k]);
    of_manual_seed(42);
    CHECK(of_uniform_(a, -2, 3) == OF_OK);
    of_manual_seed(42);
    CHECK(of_uniform_(b, -2, 3) == OF_OK);
    CHECK(same_bytes(a, b));
    CHECK(of_normal_(a, 1, 2) == OF_OK);   /* the state moved on */
    CHECK(of_normal_(b, 1, 2) == OF_OK);
    CHECK(!same_bytes(a, b));
    of_tensor_release(a);
    of_tensor_release(b);
  }
  /* save / restore replays */
  uint64_t seed, offset;
  of_manual_seed(7);
  of_tensor *a = new_tensor(77, OF_INT32), *b = new_tensor(77, OF_INT32);
  CHECK(of_randint_(a, -5, 5) == OF_OK);
  of_rng_get_state(&seed, &offset);
  CHECK(seed == 7 && offset == 77);   /* one block per randint element */
  CHECK(of_randint_(a, -5, 5) == OF_OK);
  of_rng_set_state(seed, offset);
  CHECK(of_randint_(b, -5, 5) == OF_OK);
  CHECK(same_bytes(a, b));
  of_tensor_release(a);
  of_tensor_release(b);
  /* different seeds differ */
  a = new_tensor(64, OF_FLOAT32);
  b = new_tensor(64, OF_FLOAT32);
  of_manual_seed(1);
  of_uniform_(a, 0, 1);
  of_manual_seed(2);
  of_uniform_(b, 0, 1);
  CHECK(!same_bytes(a, b));
  of_tensor_release(a);
  of_tensor_release(b);
}

/* Same values whatever the thread count and memory layout. */
static void test_layout_and_threads(void) {
  int32_t threads = of_get_num_threads();
  int64_t n = 300000;
  of_tensor *a = new_tensor(n, OF_FLOAT32), *b = new_tensor(n, OF_FLOAT32);
  of_set_num_threads(1);
  of_manual_seed(3);
  CHECK(of_normal_(a, 0, 1) == OF_OK);
  of_set_num_threads(4);
  of_manual_seed(3);
  CHECK(of_normal_(b, 0, 1) == OF_OK);
  CHECK(same_bytes(a, b));
  of_set_num_threads(threads);
  of_tensor_release(a);
  of_tensor_release(b);

  /* fill a transposed [300, 500] view; its logical values must equal a
   * contiguous fill with the same state */
  int64_t shape[2] = {500, 300};
  of_tensor *base, *tr, *c, *ref;
  CHECK(of_zeros(shape, 2, OF_FLOAT64, OF_CPU, &base) == OF_OK);
  CHECK(of_transpose(base, 0, 1, &tr) == OF_OK);
  CHECK(!of_tensor_is_contiguous(tr));
  int64_t tshape[2] = {300, 500};
  CHECK(of_empty(tshape, 2, OF_FLOAT64, OF_CPU, &ref) == OF_OK);
  of_manual_seed(11);
  CHECK(of_uniform_(tr, 0, 1) == OF_OK);
  of_manual_seed(11);
  CHECK(of_uniform_(ref, 0, 1) == OF_OK);
  CHECK(of_contiguous(tr, &c) == OF_OK);
  CHECK(same_bytes(c, ref));
  of_manual_seed(12);
  CHECK(of_randint_(tr, 0, 1000) == OF_OK);
  of_manual_seed(12);
  CHECK(of_randint_(ref, 0, 1000) == OF_OK);
  of_tensor_release(c);
  CHECK(of_contiguous(tr, &c) == OF_OK);
  CHECK(same_bytes(c, ref));
  of_tensor_release(c);
  of_tensor_release(ref);
  of_tensor_release(tr);
  of_tensor_release(base);
}

static void test_values(void) {
  /* float32 never reaches hi even when rounding would give it */
  of_tensor *t = new_tensor(100000, OF_FLOAT32);
  CHECK(of_uniform_(t, 1.0, 1.0000001) == OF_OK);
  const float *f = of_tensor_data(t);
  int ok = 1;
  for (int64_t i = 0; i < 100000; i++) ok &= f[i] >= 1.0f && (double)f[i] < 1.0000001;
  CHECK(ok);
  CHECK(of_uniform_(t, 0, 1) == OF_OK);
  double s = 0, mx = 0;
  for (int64_t i = 0; i < 100000; i++) {
    s += f[i];
    if (f[i] > mx) mx = f[i];
  }
  CHECK(mx < 1 && fabs(s / 100000 - 0.5) < 0.01);
  of_tensor_release(t);

  /* float16: 1 - 2^-11 rounds up to 1; must be clamped below */
  t = new_tensor(100000, OF_FLOAT16);
  CHECK(of_uniform_(t, 0, 1) == OF_OK);
  const uint16_t *h = of_tensor_data(t);
  ok = 1;
  for (int64_t i = 0; i < 100000; i++) ok &= h[i] < 0x3c00u;   /* 1.0 */
  CHECK(ok);
  of_tensor_release(t);

  /* randint covers exactly [lo, hi) on small ranges */
  t = new_tensor(10000, OF_INT8);
  CHECK(of_randint_(t, -3, 4) == OF_OK);
  int seen[7] = {0};
  const int8_t *q = of_tensor_data(t);
  ok = 1;
  for (int64_t i = 0; i < 10000; i++) {
    ok &= q[i] >= -3 && q[i] < 4;
    if (q[i] >= -3 && q[i] < 4) seen[q[i] + 3]++;
  }
  CHECK(ok);
  for (int k = 0; k < 7; k++) CHECK(seen[k] > 1000);
  of_tensor_release(t);

  /* full int64 range works */
  t = new_tensor(100, OF_INT64);
  CHECK(of_randint_(t, INT64_MIN, INT64_MAX) == OF_OK);
  of_tensor_release(t);

  /* randperm is a permutation, in several dtypes */
  of_dtype dts[3] = {OF_INT64, OF_INT32, OF_FLOAT16};
  for (int k = 0; k < 3; k++) {
    of_tensor *p;
    CHECK(of_randperm(2000, 1, dts[k], &p) == OF_OK);
    CHECK(of_tensor_dtype(p) == dts[k] && of_tensor_numel(p) == 2000);
    char *hit = calloc(2001, 1);
    ok = 1;
    for (int64_t i = 0; i < 2000; i++) {
      double v;
      of_tensor_get_flat(p, i, &v);
      int64_t iv = (int64_t)v;
      ok &= v == (double)iv && iv >= 1 && iv <= 2000 && !hit[iv];
      if (iv >= 1 && iv <= 2000) hit[iv] = 1;
    }
    CHECK(ok);
    free(hit);
    of_tensor_release(p);
  }

  /* bernoulli: same shape and dtype as p; p = 0 and 1 are exact */
  int64_t shape[2] = {2, 50000};
  of_tensor *p, *r;
  CHECK(of_full(shape, 2, 0.25, OF_FLOAT64, OF_CPU, &p) == OF_OK);
  CHECK(of_bernoulli(p, &r) == OF_OK);
  CHECK(of_tensor_dtype(r) == OF_FLOAT64 && of_tensor_ndim(r) == 2 &&
        of_tensor_size(r, 1) == 50000);
  const double *d = of_tensor_data(r);
  s = 0;
  ok = 1;
  for (int64_t i = 0; i < 100000; i++) {
    s += d[i];
    ok &= d[i] == 0 || d[i] == 1;
  }
  CHECK(ok && fabs(s / 100000 - 0.25) < 0.01);
  of_tensor_release(r);
  of_tensor_release(p);
  t = new_tensor(1000, OF_BOOL);
  CHECK(of_bernoulli_(t, 1) == OF_OK);
  const uint8_t *bb = of_tensor_data(t);
  ok = 1;
  for (int i = 0; i < 1000; i++) ok &= bb[i] == 1;
  CHECK(of_bernoulli_(t, 0) == OF_OK);
  for (int i = 0; i < 1000; i++) ok &= bb[i] == 0;
  CHECK(ok);
  of_tensor_release(t);

  /* of_rand / of_randn */
  int64_t s3[3] = {2, 3, 4};
  CHECK(of_rand(s3, 3, OF_FLOAT32, OF_CPU, &t) == OF_OK);
  CHECK(of_tensor_numel(t) == 24);
  of_tensor_release(t);
  CHECK(of_randn(s3, 3, OF_BFLOAT16, OF_CPU, &t) == OF_OK);
  of_tensor_release(t);
  CHECK(of_rand(s3, 3, OF_INT32, OF_CPU, &t) == OF_ERR_DTYPE);
  CHECK(strstr(of_last_error(), "rand") && strstr(of_last_error(), "int32"));
}

static void test_errors(void) {
  of_tensor *t = new_tensor(4, OF_INT64), *r;
  CHECK(of_randint_(t, 5, 5) == OF_ERR_ARG);
  CHECK(strstr(of_last_error(), "randint_") && strstr(of_last_error(), "[4]") &&
        strstr(of_last_error(), "int64"));
  CHECK(of_uniform_(t, 0, 1) == OF_ERR_DTYPE);
  CHECK(strstr(of_last_error(), "uniform_") && strstr(of_last_error(), "int64"));
  CHECK(of_normal_(t, 0, 1) == OF_ERR_DTYPE);
  of_tensor_release(t);
  t = new_tensor(4, OF_UINT8);
  CHECK(of_randint_(t, 0, 300) == OF_ERR_ARG);
  CHECK(strstr(of_last_error(), "uint8") != NULL);
  of_tensor_release(t);
  t = new_tensor(4, OF_FLOAT32);
  CHECK(of_normal_(t, 0, -1) == OF_ERR_ARG);
  CHECK(of_uniform_(t, 2, 1) == OF_ERR_ARG);
  CHECK(of_uniform_(t, 0, INFINITY) == OF_ERR_ARG);
  CHECK(of_bernoulli_(t, 1.5) == OF_ERR_ARG);
  CHECK(strstr(of_last_error(), "bernoulli_") != NULL);
  of_tensor_release(t);
  double vals[3] = {0.5, 1.2, 0};
  int64_t n3 = 3;
  CHECK(of_from_doubles(vals, &n3, 1, OF_FLOAT32, &t) == OF_OK);
  CHECK(of_bernoulli(t, &r) == OF_ERR_ARG);
  CHECK(strstr(of_last_error(), "bernoulli") && strstr(of_last_error(), "[3]"));
  of_tensor_release(t);
  CHECK(of_randperm(-1, 0, OF_INT64, &r) == OF_ERR_ARG);
  CHECK(of_randperm(300, 0, OF_UINT8, &r) == OF_ERR_ARG);
  CHECK(of_randperm(256, 0, OF_UINT8, &r) == OF_OK);
  of_tensor_release(r);
  /* expanded tensors cannot be filled in place */
  of_tensor *e;
  int64_t es[2] = {5, 3};
  t = new_tensor(3, OF_FLOAT32);
  CHECK(of_expand(t, es, 2, &e) == OF_OK);
  CHECK(of_uniform_(e, 0, 1) == OF_ERR_ARG);
  CHECK(strstr(of_last_error(), "single memory location") != NULL);
  of_tensor_release(e);
  of_tensor_release(t);
  /* failures consume no random numbers */
  uint64_t s0, o0, s1, o1;
  of_rng_get_state(&s0, &o0);
  t = new_tensor(4, OF_INT64);
  of_randint_(t, 3, 1);
  of_rng_get_state(&s1, &o1);
  CHECK(s0 == s1 && o0 == o1);
  of_tensor_release(t);
}

int main(void) {
  CHECK(of_initial_seed() == 67280421310721ull);   /* fixed default seed */
  int64_t start = of_memory_stats_get(OF_CPU)->current_bytes;
  test_known_answer();
  test_reproducible();
  test_layout_and_threads();
  test_values();
  test_errors();
  CHECK(of_memory_stats_get(OF_CPU)->current_bytes == start);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("test_random: all checks passed\n");
  return 0;
}
