/* Collectives inside nn.Graph, from C, in a world of one process: tracing
 * records them as nodes, no pass drops them (even with an unused result),
 * the graph runs them again on new inputs, and a graph holding one cannot
 * be serialized. */
#include <oneflow/oneflow.h>
#include <stdio.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: CHECK failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
              of_last_error());                                       \
      failures++;                                                     \
    }                                                                 \
  } while (0)

int main(void) {
  of_comm *w;
  CHECK(of_comm_world(&w) == OF_OK);
  int64_t shape[1] = {3};
  double vals[3] = {1, -2, 3};
  of_tensor *x;
  CHECK(of_from_doubles(vals, shape, 1, OF_FLOAT32, &x) == OF_OK);

  CHECK(of_trace_begin(&x, 1) == OF_OK);
  of_tensor *gathered, *twice, *unused, *scattered;
  CHECK(of_comm_all_gather(w, x, NULL, &gathered) == OF_OK);
  CHECK(of_trace_note(gathered, "sbp=(B) placement=cpu:0") == OF_OK);
  CHECK(of_binary_scalar(OF_MUL, gathered, 2, 0, NULL, &twice) == OF_OK);
  CHECK(of_comm_all_reduce(w, twice, OF_COMM_SUM) == OF_OK);          /* in place */
  CHECK(of_comm_all_to_all(w, x, NULL, NULL, &unused) == OF_OK);      /* result unused */
  CHECK(of_comm_reduce_scatter(w, twice, NULL, OF_COMM_SUM, &scattered) == OF_OK);
  of_graph *g = NULL;
  CHECK(of_trace_end(&scattered, 1, &g) == OF_OK);
  if (g) {
    CHECK(of_graph_optimize(g, NULL) == OF_OK);
    CHECK(of_graph_count_op(g, "all_gather") == 1);
    CHECK(of_graph_count_op(g, "all_reduce") == 1);
    CHECK(of_graph_count_op(g, "all_to_all") == 1);   /* kept: every rank must run it */
    CHECK(of_graph_count_op(g, "reduce_scatter") == 1);
    const char *ir = of_graph_dump(g, 1);
    CHECK(strstr(ir, "all_gather(%0) {comm #") != NULL);
    CHECK(strstr(ir, "<sbp=(B) placement=cpu:0>") != NULL);

    double v2[3] = {5, 6, -7};
    of_tensor *x2, *y = NULL;
    CHECK(of_from_doubles(v2, shape, 1, OF_FLOAT32, &x2) == OF_OK);
    CHECK(of_graph_run(g, &x2, 1, &y, 1) == OF_OK);
    double d;
    for (int i = 0; i < 3 && y; i++) CHECK(of_tensor_get_flat(y, i, &d) == OF_OK && d == 2 * v2[i]);

    of_tensor *blob = NULL;
    CHECK(of_graph_serialize(g, &blob) == OF_ERR_STATE);
    CHECK(strstr(of_last_error(), "collective") != NULL);
    CHECK(blob == NULL);
    if (y) of_tensor_release(y);
    of_tensor_release(x2);
    of_graph_release(g);
  }
  of_tensor *ts[] = {x, gathered, twice, unused, scattered};
  for (int i = 0; i < 5; i++) of_tensor_release(ts[i]);
  CHECK(of_trace_note(x, "not tracing: ignored") == OF_OK);
  CHECK(of_memory_stats_get(OF_CPU)->current_bytes == 0);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures != 0;
}
