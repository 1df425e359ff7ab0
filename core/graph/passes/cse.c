/* cse.c -- common-subexpression elimination.
 *
 * Two nodes with the same op, the same attribute record and the same input
 * values compute the same thing when nothing wrote into their inputs'
 * storage in between. The later one is dropped and its readers use the
 * earlier results. Views merge freely (they read nothing); ops with fresh
 * results merge only when neither result is written in place later, since
 * the two buffers become one. Random ops, in-place ops, uninitialised
 * results and nodes that keep autograd state never merge. */
#include "../ops.h"
#include <stdlib.h>

static uint64_t node_hash(const of_gnode *n) {
  uint64_t h = 1469598103934665603ULL;
#define MIX(x) do { h ^= (uint64_t)(x); h *= 1099511628211ULL; } while (0)
  MIX(n->op);
  MIX(n->nin);
  for (int32_t k = 0; k < n->nin; k++) MIX((uint32_t)n->in[k]);
  const unsigned char *a = n->attrs;
  for (int32_t i = 0; i < n->attr_size; i++) MIX(a[i]);
#undef MIX
  return h;
}

static bool same_node(const of_gnode *a, const of_gnode *b) {
  if (a->op != b->op || a->nin != b->nin || a->nreal != b->nreal || a->attr_size != b->attr_size)
    return false;
  for (int32_t k = 0; k < a->nin; k++)
    if (a->in[k] != b->in[k]) return false;
  return memcmp(a->attrs, b->attrs, (size_t)a->attr_size) == 0;
}

of_status of_pass_cse(of_graph *g, int32_t *removed) {
  int32_t nv = g->nvals ? g->nvals : 1;
  int32_t *rename = malloc(sizeof *rename * (size_t)nv);
  bool *written = of_graph_written_roots(g);
  int64_t cap = 16;
  while (cap < 4 * (int64_t)(g->nnodes + 1)) cap *= 2;
  int32_t *table = malloc(sizeof *table * (size_t)cap);
  if (!rename || !written || !table) {
    free(rename);
    free(written);
    free(table);
    return of_fail(OF_ERR_OOM, "nn.Graph: cse: out of memory");
  }
  for (int32_t v = 0; v < nv; v++) rename[v] = v;
  for (int64_t i = 0; i < cap; i++) table[i] = -1;
  int32_t count = 0;
  for (int32_t i = 0; i < g->nnodes; i++) {
    of_gnode *n = &g->nodes[i];
    if (n->dead) continue;
    for (int32_t k = 0; k < n->nin; k++)
      if (n->in[k] >= 0) n->in[k] = rename[n->in[k]];
    const of_opdef *d = of_op_def(n->op);
    if (!d || !of_node_pure(g, n) || n->nreal < 1 || (d->flags & OF_OPF_CREATE)) continue;
    bool view = (d->flags & OF_OPF_VIEW) != 0;
    bool ok = true;
    for (int32_t j = 0; j < n->nreal && ok && !view; j++)
      if (n->out[j] >= 0 && written[g->vals[n->out[j]].root]) ok = false;
    if (!ok) continue;
    uint64_t h = node_hash(n);
    int64_t slot = (int64_t)(h & (uint64_t)(cap - 1));
    int32_t match = -1;
    for (; table[slot] >= 0; slot = (slot + 1) & (cap - 1)) {
      of_gnode *m = &g->nodes[table[slot]];
      if (m->dead || !same_node(m, n)) continue;
      bool safe = true;
      for (int32_t k = 0; k < n->nin && safe && !view; k++)
        if (n->in[k] >= 0 && of_graph_written_between(g, g->vals[n->in[k]].root, table[slot], i))
          safe = false;
      if (safe) { match = table[slot]; break; }
    }
    if (match < 0) {
      table[slot] = i;
      continue;
    }
    of_gnode *m = &g->nodes[match];
    bool covered = true;
    for (int32_t j = 0; j < n->nreal; j++)
      if (n->out[j] >= 0 && m->out[j] < 0) covered = false;
    if (!covered) continue;
    for (int32_t j = 0; j < n->nreal; j++)
      if (n->out[j] >= 0 && m->out[j] >= 0) rename[n->out[j]] = m->out[j];
    n->dead = true;
    count++;
  }
  for (int32_t o = 0; o < g->noutputs; o++) g->outputs[o] = rename[g->outputs[o]];
  free(rename);
  free(written);
  free(table);
  *removed = count;
  return OF_OK;
}
