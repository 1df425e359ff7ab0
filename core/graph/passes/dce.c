/* dce.c -- dead-code elimination.
 *
 * Walks the nodes last to first. A node stays when a kept node (or the
 * graph's outputs) reads one of its results, when it writes into an input's
 * or an external's storage (parameter and optimizer updates, running
 * statistics: side effects), when it writes into a storage that a later
 * kept node reads, or when it draws random numbers (so the generator
 * advances as in eager mode). */
#include "../ops.h"
#include <stdlib.h>

of_status of_pass_dce(of_graph *g, int32_t *removed) {
  int32_t nv = g->nvals ? g->nvals : 1;
  bool *need = calloc((size_t)nv, sizeof *need);
  bool *read_root = calloc((size_t)nv, sizeof *read_root);
  if (!need || !read_root) {
    free(need);
    free(read_root);
    return of_fail(OF_ERR_OOM, "nn.Graph: dce: out of memory");
  }
  for (int32_t o = 0; o < g->noutputs; o++) {
    need[g->outputs[o]] = true;
    read_root[g->vals[g->outputs[o]].root] = true;
  }
  int32_t roots[16], count = 0;
  for (int32_t i = g->nnodes - 1; i >= 0; i--) {
    of_gnode *n = &g->nodes[i];
    if (n->dead) continue;
    const of_opdef *d = of_op_def(n->op);
    bool keep = d && (d->flags & OF_OPF_RANDOM);
    for (int32_t j = 0; j < n->nout && !keep; j++)
      if (n->out[j] >= 0 && need[n->out[j]]) keep = true;
    int32_t c = of_node_writes(g, n, roots, 16);
    for (int32_t k = 0; k < c && !keep; k++) {
      int8_t kind = g->vals[roots[k]].kind;
      if (kind == OF_GV_INPUT || kind == OF_GV_EXTERNAL || read_root[roots[k]]) keep = true;
    }
    if (!keep) {
      n->dead = true;
      count++;
      continue;
    }
    for (int32_t k = 0; k < n->nin; k++) {
      int32_t v = n->in[k];
      if (v < 0) continue;
      need[v] = true;
      read_root[g->vals[v].root] = true;
    }
  }
  free(need);
  free(read_root);
  *removed = count;
  return OF_OK;
}
