/* nn.Graph through the C API: trace eager calls, optimize, run on new data,
 * a training step with backward and the fused SGD update, error paths, and
 * no memory left behind. */
#include <oneflow/oneflow.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
              of_last_error());                                                 \
      failures++;                                                               \
    }                                                                           \
  } while (0)

/* f(x) = relu(2x + 1) * x, plus a dead exp */
static of_graph *trace_forward(void) {
  int64_t shape[2] = {3, 4};
  of_tensor *x, *a, *b, *c, *d, *dead;
  CHECK(of_randn(shape, 2, OF_FLOAT32, OF_CPU, &x) == OF_OK);
  CHECK(of_trace_begin(&x, 1) == OF_OK);
  CHECK(of_tracing() == 1);
  CHECK(of_binary_scalar(OF_MUL, x, 2, 0, NULL, &a) == OF_OK);
  CHECK(of_binary_scalar(OF_ADD, a, 1, 0, NULL, &b) == OF_OK);
  CHECK(of_unary(OF_RELU, b, NULL, &c) == OF_OK);
  CHECK(of_binary(OF_MUL, c, x, NULL, &d) == OF_OK);
  CHECK(of_unary(OF_EXP, x, NULL, &dead) == OF_OK);
  of_graph *g = NULL;
  CHECK(of_trace_end(&d, 1, &g) == OF_OK);
  CHECK(of_tracing() == 0);
  of_tensor *ts[] = {x, a, b, c, d, dead};
  for (int i = 0; i < 6; i++) of_tensor_release(ts[i]);
  return g;
}

static void test_forward(void) {
  of_graph *g = trace_forward();
  CHECK(g != NULL);
  if (!g) return;
  CHECK(of_graph_num_nodes(g) == 5);
  CHECK(of_graph_optimize(g, "dce") == OF_OK);
  CHECK(of_graph_num_nodes(g) == 4);
  CHECK(of_graph_count_op(g, "unary") == 1);
  CHECK(of_graph_optimize(g, "fuse,inplace") == OF_OK);
  CHECK(of_graph_num_nodes(g) == 1);
  CHECK(of_graph_count_op(g, "fused_elementwise") == 1);
  CHECK(strstr(of_graph_dump(g, 1), "fused_elementwise") != NULL);
  double vals[12];
  for (int i = 0; i < 12; i++) vals[i] = i - 5.5;
  int64_t shape[2] = {3, 4};
  of_tensor *x, *y = NULL;
  CHECK(of_from_doubles(vals, shape, 2, OF_FLOAT32, &x) == OF_OK);
  for (int run = 0; run < 2; run++) {
    CHECK(of_graph_run(g, &x, 1, &y, 1) == OF_OK);
    if (!y) continue;
    const float *p = of_tensor_data(y);
    for (int i = 0; i < 12; i++) {
      float xv = (float)vals[i], r = 2 * xv + 1;
      CHECK(p[i] == (r > 0 ? r : 0) * xv);
    }
    of_tensor_release(y);
    y = NULL;
  }
  /* wrong inputs */
  of_tensor *bad;
  int64_t other[1] = {5};
  CHECK(of_zeros(other, 1, OF_FLOAT32, OF_CPU, &bad) == OF_OK);
  CHECK(of_graph_run(g, &bad, 1, &y, 1) != OF_OK);
  CHECK(strstr(of_last_error(), "compiled for [3,4]") != NULL);
  CHECK(of_graph_run(g, &x, 0, &y, 1) != OF_OK);
  of_tensor_release(bad);
  of_tensor_release(x);
  of_graph_release(g);
}

/* one SGD step on w for loss = sum(w * w * x): grad = 2 w x */
static void test_train_step(void) {
  int64_t shape[1] = {4}, two[1] = {2};
  double wv[4] = {1, -2, 3, 0.5}, xv[4] = {0.5, 1, -1, 2};
  of_tensor *w, *x, *hyper;
  CHECK(of_from_doubles(wv, shape, 1, OF_FLOAT64, &w) == OF_OK);
  CHECK(of_from_doubles(xv, shape, 1, OF_FLOAT64, &x) == OF_OK);
  CHECK(of_zeros(two, 1, OF_FLOAT64, OF_CPU, &hyper) == OF_OK);
  ((double *)of_tensor_data(hyper))[0] = 0.1;   /* lr */
  CHECK(of_tensor_set_requires_grad(w, 1) == OF_OK);
  CHECK(of_trace_begin(&x, 1) == OF_OK);
  of_tensor *a, *b, *loss;
  CHECK(of_binary(OF_MUL, w, w, NULL, &a) == OF_OK);
  CHECK(of_binary(OF_MUL, a, x, NULL, &b) == OF_OK);
  CHECK(of_reduce(OF_RED_SUM, b, NULL, 0, 0, 0, -1, &loss) == OF_OK);
  CHECK(of_backward(&loss, NULL, 1, 0, 0) == OF_OK);
  of_set_grad_enabled(0);
  CHECK(of_optim_sgd_(w, of_tensor_grad(w), NULL, hyper, 0, 0, 0, 0, 0, NULL) == OF_OK);
  of_set_grad_enabled(1);
  CHECK(of_tensor_set_grad(w, NULL) == OF_OK);
  of_graph *g = NULL;
  CHECK(of_trace_end(&loss, 1, &g) == OF_OK);
  of_tensor_release(a);
  of_tensor_release(b);
  of_tensor_release(loss);
  if (!g) return;
  CHECK(of_graph_optimize(g, NULL) == OF_OK);
  CHECK(of_graph_count_op(g, "sgd_update") == 1);
  /* the traced call took step 1; two more runs */
  double want[4];
  for (int i = 0; i < 4; i++) want[i] = wv[i] - 0.1 * 2 * wv[i] * xv[i];
  for (int run = 0; run < 2; run++) {
    double lw = 0;
    for (int i = 0; i < 4; i++) lw += want[i] * want[i] * xv[i];
    of_tensor *l = NULL;
    CHECK(of_graph_run(g, &x, 1, &l, 1) == OF_OK);
    if (l) CHECK(fabs(*(double *)of_tensor_data(l) - lw) < 1e-12);
    of_tensor_release(l);
    for (int i = 0; i < 4; i++) want[i] -= 0.1 * 2 * want[i] * xv[i];
  }
  const double *pw = of_tensor_data(w);
  for (int i = 0; i < 4; i++) CHECK(fabs(pw[i] - want[i]) < 1e-12);
  CHECK(((double *)of_tensor_data(hyper))[1] == 3);   /* steps taken */
  CHECK(of_tensor_grad(w) == NULL);
  of_graph_release(g);
  of_tensor_release(hyper);
  of_tensor_release(x);
  of_tensor_release(w);
}

static void test_errors(void) {
  of_graph *g;
  of_tensor *out;
  CHECK(of_trace_end(&out, 0, &g) != OF_OK);   /* not tracing */
  int64_t shape[1] = {2};
  of_tensor *x;
  CHECK(of_zeros(shape, 1, OF_FLOAT32, OF_CPU, &x) == OF_OK);
  CHECK(of_trace_begin(&x, 1) == OF_OK);
  CHECK(of_trace_begin(&x, 1) != OF_OK);   /* nested */
  CHECK(strstr(of_last_error(), "already tracing") != NULL);
  double v;
  CHECK(of_tensor_get_flat(x, 0, &v) != OF_OK);   /* reading values while tracing */
  CHECK(strstr(of_last_error(), "data-dependent") != NULL);
  of_trace_abort();
  CHECK(of_tracing() == 0);
  CHECK(of_tensor_get_flat(x, 0, &v) == OF_OK);
  CHECK(of_graph_load("/nonexistent/graph.ofg", &g) != OF_OK);
  CHECK(strstr(of_last_error(), "nn.Graph.load") != NULL);
  FILE *f = fopen("test_graph_garbage.ofg", "wb");
  if (f) {
    fputs("\x10\0\0\0\0\0\0\0{\"a\":1}        ", f);
    fclose(f);
    CHECK(of_graph_load("test_graph_garbage.ofg", &g) != OF_OK);
    remove("test_graph_garbage.ofg");
  }
  of_tensor_release(x);
}

/* A saved graph whose record was edited by hand -- a required input set to
 * absent, the checksum recomputed as a crafted file would -- fails to load
 * through the C host API with an error naming the node, never a crash. */
static uint64_t fnv1a(const uint8_t *p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}
static int write_graph_file(const char *path, const uint8_t *ir, size_t n) {
  char header[256];
  int hl = snprintf(header, sizeof header,
                    "{\"__metadata__\":{\"format\":\"oneflow-graph\",\"version\":\"1\"},"
                    "\"__graph__\":{\"dtype\":\"U8\",\"shape\":[%zu],\"data_offsets\":[0,%zu]}}",
                    n, n);
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  uint64_t hlen = (uint64_t)hl;
  fwrite(&hlen, 8, 1, f);
  fwrite(header, 1, (size_t)hl, f);
  fwrite(ir, 1, n, f);
  fclose(f);
  return 1;
}
static void test_edited_record(void) {
  of_graph *g = trace_forward(), *h = NULL;
  of_tensor *blob = NULL;
  CHECK(of_graph_serialize(g, &blob) == OF_OK);
  if (!blob) { of_graph_release(g); return; }
  size_t n = (size_t)of_tensor_numel(blob);
  uint8_t *ir = malloc(n);
  memcpy(ir, of_tensor_data(blob), n);
  const char *path = "test_graph_edited.ofg";
  CHECK(write_graph_file(path, ir, n));
  CHECK(of_graph_load(path, &h) == OF_OK);   /* as saved: loads */
  of_graph_release(h);
  h = NULL;
  /* the binary node (u16 length 6, "binary"): in[2] := -1 */
  size_t at = 0;
  for (size_t i = 32; i + 8 <= n && !at; i++)
    if (ir[i] == 6 && ir[i + 1] == 0 && memcmp(ir + i + 2, "binary", 6) == 0) at = i + 8;
  CHECK(at != 0);
  if (at) {
    int32_t asz, absent = -1;
    memcpy(&asz, ir + at, 4);
    size_t in1 = at + 4 + (size_t)asz + 36 + 4;
    CHECK(in1 + 4 <= n);
    memcpy(ir + in1, &absent, 4);
    uint64_t sum = fnv1a(ir + 32, n - 32);
    memcpy(ir + 24, &sum, 8);
    CHECK(write_graph_file(path, ir, n));
    CHECK(of_graph_load(path, &h) != OF_OK);
    CHECK(strstr(of_last_error(), "(binary): in[2]: a required input is absent") != NULL);
    CHECK(h == NULL);
  }
  remove(path);
  free(ir);
  of_tensor_release(blob);
  of_graph_release(g);
}

/* the graph's device, moving it, and the CUDA graph flag on a CPU graph */
static void test_devices(void) {
  of_graph *g = trace_forward();
  CHECK(g != NULL);
  if (!g) return;
  CHECK(of_graph_optimize(g, NULL) == OF_OK);
  CHECK(of_graph_device(g) == OF_CPU);
  CHECK(of_graph_to(g, OF_CPU) == OF_OK);
  CHECK(strcmp(of_graph_cuda_graph_status(g), "off") == 0);
  of_graph_set_cuda_graph(g, 1);
  CHECK(strcmp(of_graph_cuda_graph_status(g), "") == 0);
  int64_t shape[2] = {3, 4};
  of_tensor *x, *y = NULL;
  CHECK(of_randn(shape, 2, OF_FLOAT32, OF_CPU, &x) == OF_OK);
  CHECK(of_graph_run(g, &x, 1, &y, 1) == OF_OK);   /* runs as usual, says why */
  CHECK(strstr(of_graph_cuda_graph_status(g), "not run on a CUDA device") != NULL);
  of_tensor_release(y);
  if (of_cuda_device_count() == 0) {
    CHECK(of_graph_to(g, OF_CUDA) != OF_OK);
    CHECK(strstr(of_last_error(), "not available") != NULL);
    CHECK(of_graph_device(g) == OF_CPU);
    CHECK(of_graph_run(g, &x, 1, &y, 1) == OF_OK);   /* untouched by the failed move */
    of_tensor_release(y);
  }
  of_tensor_release(x);
  of_graph_set_cuda_graph(g, 0);
  CHECK(strcmp(of_graph_cuda_graph_status(g), "off") == 0);
  of_graph_release(g);
}

int main(void) {
  int64_t start = of_memory_stats_get(OF_CPU)->current_bytes;
  test_forward();
  test_train_step();
  test_errors();
  test_devices();
  test_edited_record();
  int64_t left = of_memory_stats_get(OF_CPU)->current_bytes - start;
  if (left != 0) {
    fprintf(stderr, "test_graph: %lld bytes still allocated\n", (long long)left);
    failures++;
  }
  if (failures) fprintf(stderr, "test_graph: %d failures\n", failures);
  else printf("test_graph: all passed\n");
  return failures != 0;
}
