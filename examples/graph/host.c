/* A C host running a graph saved by examples/graph/train.lua, with no Lua
 * state: of_graph_load reads the IR and the weights, of_graph_run runs the
 * plan on a batch built in C. The script also wrote <graph>.check (a batch
 * and the Lua run's outputs); the host checks it gets the same numbers.
 * Usage: graph_host graph.ofg [graph.ofg.check] */
#include <oneflow/oneflow.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what) {
  fprintf(stderr, "graph_host: %s: %s\n", what, of_last_error());
  return 1;
}

/* int64 count, then count float32 values */
static float *read_block(FILE *f, int64_t *n) {
  if (fread(n, sizeof *n, 1, f) != 1 || *n <= 0 || *n > (1 << 28)) return NULL;
  float *p = malloc(sizeof *p * (size_t)*n);
  if (p && fread(p, sizeof *p, (size_t)*n, f) != (size_t)*n) {
    free(p);
    return NULL;
  }
  return p;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: graph_host graph.ofg [graph.ofg.check]\n");
    return 2;
  }
  int64_t start_bytes = of_memory_stats_get(OF_CPU)->current_bytes;
  of_graph *g;
  if (of_graph_load(argv[1], &g) != OF_OK) return fail("load");
  printf("%s", of_graph_dump(g, 0));
  if (of_graph_num_inputs(g) != 1 || of_graph_num_outputs(g) != 1) {
    fprintf(stderr, "graph_host: expected one input and one output\n");
    return 1;
  }

  char check_path[4096];
  snprintf(check_path, sizeof check_path, "%s.check", argv[1]);
  FILE *f = fopen(argc > 2 ? argv[2] : check_path, "rb");
  if (!f) {
    fprintf(stderr, "graph_host: cannot open the check file\n");
    return 1;
  }
  int64_t nx, ny;
  float *xs = read_block(f, &nx), *want = xs ? read_block(f, &ny) : NULL;
  fclose(f);
  if (!xs || !want) {
    fprintf(stderr, "graph_host: bad check file\n");
    return 1;
  }
  /* the batch: [nx / 784, 1, 28, 28] */
  int64_t shape[4] = {nx / (28 * 28), 1, 28, 28};
  of_tensor *x, *y;
  if (of_from_buffer(xs, shape, 4, OF_FLOAT32, &x) != OF_OK) return fail("input");
  if (of_graph_run(g, &x, 1, &y, 1) != OF_OK) return fail("run");
  if (of_tensor_numel(y) != ny) {
    fprintf(stderr, "graph_host: %lld outputs, expected %lld\n", (long long)of_tensor_numel(y),
            (long long)ny);
    return 1;
  }
  const float *got = of_tensor_data(y);
  double maxdiff = 0;
  int64_t classes = of_tensor_size(y, 1), agree = 0;
  for (int64_t i = 0; i < ny; i++) maxdiff = fmax(maxdiff, fabs((double)got[i] - want[i]));
  for (int64_t r = 0; r < shape[0]; r++) {   /* argmax per row, both runs */
    int64_t a = 0, b = 0;
    for (int64_t c = 1; c < classes; c++) {
      if (got[r * classes + c] > got[r * classes + a]) a = c;
      if (want[r * classes + c] > want[r * classes + b]) b = c;
    }
    agree += a == b;
  }
  printf("graph_host: ran %lld images, class probabilities %lldx%lld, max difference from the "
         "Lua run %g, same predicted class for %lld/%lld\n", (long long)shape[0],
         (long long)shape[0], (long long)classes, maxdiff, (long long)agree, (long long)shape[0]);

  /* a second run with different data works on the same plan */
  of_tensor *y2;
  if (of_graph_run(g, &y, 1, &y2, 1) == OF_OK) {
    fprintf(stderr, "graph_host: expected a shape error for a wrong input\n");
    return 1;
  }
  printf("graph_host: wrong input rejected: %s\n", of_last_error());

  of_tensor_release(y);
  of_tensor_release(x);
  of_graph_release(g);
  free(xs);
  free(want);
  int64_t leaked = of_memory_stats_get(OF_CPU)->current_bytes - start_bytes;
  if (leaked != 0) {
    fprintf(stderr, "graph_host: %lld bytes still allocated\n", (long long)leaked);
    return 1;
  }
  return maxdiff == 0 ? 0 : 1;
}
