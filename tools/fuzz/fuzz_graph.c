/* fuzz_graph.c -- libFuzzer harness for saved graphs (core/graph/io.c):
 * the safetensors header, the tensor table, the IR record and the
 * attribute records, through the public loader of_graph_load.
 *
 * A checksum is no defence against a crafted file, so the harness plays the
 * attacker: when the input holds a graph record ("OFGRAPH\0") whose declared
 * payload lies inside the input, it rewrites the record's FNV-1a checksum
 * to match the (mutated) payload before loading, so that mutations reach
 * the IR parser and the validation behind it. A graph that loads is run
 * once on inputs of ones of its recorded shapes (when they are small), so the
 * executor and the op run functions see the loaded records too. */
#include "oneflow/oneflow.h"
#include "graph/graph.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t fnv1a(const uint8_t *p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

static void fix_checksum(uint8_t *d, size_t n) {
  static const char magic[8] = {'O', 'F', 'G', 'R', 'A', 'P', 'H', 0};
  for (size_t at = 0; at + 32 <= n; at++) {
    if (memcmp(d + at, magic, 8) != 0) continue;
    uint64_t plen;
    memcpy(&plen, d + at + 16, 8);
    if (plen <= n - at - 32) {
      uint64_t sum = fnv1a(d + at + 32, (size_t)plen);
      memcpy(d + at + 24, &sum, 8);
    }
    return;
  }
}

static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  snprintf(path, sizeof path, "/tmp/fuzz_graph.%d.ofg", (int)getpid());
  setenv("OMP_NUM_THREADS", "1", 1);
  return 0;
}

static void run_once(of_graph *g) {
  int32_t nin = of_graph_num_inputs(g), nout = of_graph_num_outputs(g);
  if (nin > 16 || nout > 64) return;
  of_tensor *ins[16] = {0}, *outs[64] = {0};
  int64_t total = 0;
  for (int32_t i = 0; i < nin; i++) {
    const of_gval *v = &g->vals[g->inputs[i]];
    total += of_gval_bytes(v);
  }
  /* the recorded values' sizes bound what a faithful run allocates */
  for (int32_t v = 0; v < g->nvals; v++)
    if (of_gval_bytes(&g->vals[v]) > (64 << 20)) return;
  if (total > (16 << 20)) return;
  of_status st = OF_OK;
  for (int32_t i = 0; i < nin && st == OF_OK; i++) {
    const of_gval *v = &g->vals[g->inputs[i]];
    st = of_full(v->shape, v->ndim, 1, v->dtype, OF_CPU, &ins[i]);   /* 1: a valid 1-based class index too */
  }
  if (st == OF_OK) st = of_graph_run(g, ins, nin, outs, nout);
  if (getenv("FUZZ_GRAPH_DEBUG")) fprintf(stderr, "run: %s\n", st == OF_OK ? "ok" : of_last_error());
  if (st == OF_OK)
    for (int32_t o = 0; o < nout; o++) of_tensor_release(outs[o]);
  for (int32_t i = 0; i < nin; i++) of_tensor_release(ins[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *d = malloc(size ? size : 1);
  if (!d) return 0;
  memcpy(d, data, size);
  fix_checksum(d, size);
  FILE *f = fopen(path, "wb");
  if (!f) { free(d); return 0; }
  fwrite(d, 1, size, f);
  fclose(f);
  free(d);
  of_graph *g = NULL;
  of_status st = of_graph_load(path, &g);
  if (getenv("FUZZ_GRAPH_DEBUG")) fprintf(stderr, "load: %s\n", st == OF_OK ? "ok" : of_last_error());
  if (st == OF_OK) {
    run_once(g);
    of_graph_release(g);
  }
  return 0;
}
