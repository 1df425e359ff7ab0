/* fold.c -- constant folding.
 *
 * A value is constant when it is a captured constant (host data turned
 * into a tensor inside build) or the result of a pure, non-random node whose
 * inputs are all constant (creation ops have none), and nothing writes into
 * its storage. The constant nodes run once here; the constants that
 * non-constant nodes read become externals and the constant nodes go.
 * Values over FOLD_MAX bytes are left to be computed at run time: keeping
 * them would hold their memory for the graph's whole life. */
#include "../ops.h"
#include <stdlib.h>

enum { FOLD_MAX = 256 * 1024, MAX_IN = 64 };

of_status of_pass_fold(of_graph *g, int32_t *removed) {
  int32_t nv = g->nvals ? g->nvals : 1;
  bool *cst = calloc((size_t)nv, sizeof *cst);
  bool *owned = calloc((size_t)nv, sizeof *owned);
  bool *cnode = calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *cnode);
  bool *written = of_graph_written_roots(g);
  int32_t *uses_nc = calloc((size_t)nv, sizeof *uses_nc);   /* reads by non-constant nodes */
  void **slot = calloc((size_t)nv, sizeof *slot);
  *removed = 0;
  if (!cst || !owned || !cnode || !written || !uses_nc || !slot) {
    free(cst); free(owned); free(cnode); free(written); free(uses_nc); free(slot);
    return of_fail(OF_ERR_OOM, "nn.Graph: fold: out of memory");
  }
  for (int32_t v = 0; v < g->nvals; v++)
    if (g->vals[v].kind == OF_GV_EXTERNAL && g->vals[v].is_const && !written[g->vals[v].root])
      cst[v] = true;
  int32_t nconst = 0;
  for (int32_t i = 0; i < g->nnodes; i++) {
    of_gnode *n = &g->nodes[i];
    if (n->dead || !of_node_pure(g, n) || n->nreal < 1 || n->nin > MAX_IN || n->nout > 8)
      continue;
    bool all = true;
    for (int32_t k = 0; k < n->nin && all; k++)
      if (n->in[k] >= 0 && !cst[n->in[k]]) all = false;
    for (int32_t j = 0; j < n->nreal && all; j++) {
      int32_t v = n->out[j];
      if (v >= 0 && (written[g->vals[v].root] || of_gval_bytes(&g->vals[v]) > FOLD_MAX))
        all = false;
    }
    if (!all) continue;
    cnode[i] = true;
    nconst++;
    for (int32_t j = 0; j < n->nreal; j++)
      if (n->out[j] >= 0) cst[n->out[j]] = true;
  }
  of_status st = OF_OK;
  if (nconst > 0) {
    for (int32_t i = 0; i < g->nnodes; i++) {
      of_gnode *n = &g->nodes[i];
      if (n->dead || cnode[i]) continue;
      for (int32_t k = 0; k < n->nin; k++)
        if (n->in[k] >= 0) uses_nc[n->in[k]]++;
    }
    for (int32_t o = 0; o < g->noutputs; o++) uses_nc[g->outputs[o]]++;
    for (int32_t v = 0; v < g->nvals; v++)
      if (g->vals[v].kind == OF_GV_EXTERNAL) slot[v] = g->vals[v].ext;
    int32_t was = of_is_grad_enabled();
    of_set_grad_enabled(0);
    of_tensor *ins[MAX_IN];
    void *outs[8];
    for (int32_t i = 0; i < g->nnodes && st == OF_OK; i++) {
      of_gnode *n = &g->nodes[i];
      if (!cnode[i]) continue;
      for (int32_t k = 0; k < n->nin; k++) ins[k] = n->in[k] >= 0 ? slot[n->in[k]] : NULL;
      st = of_graph_invoke(g, n, ins, outs);
      for (int32_t j = 0; st == OF_OK && j < n->nreal; j++) {
        if (n->out[j] >= 0) { slot[n->out[j]] = outs[j]; owned[n->out[j]] = true; }
        else of_tensor_release(outs[j]);
      }
    }
    of_set_grad_enabled(was);
    if (st == OF_OK) {
      for (int32_t v = 0; v < g->nvals; v++) {
        of_gval *x = &g->vals[v];
        if (!owned[v] || uses_nc[v] == 0) continue;
        x->kind = OF_GV_EXTERNAL;   /* takes over the evaluation's reference */
        x->is_const = true;
        x->ext = slot[v];
        x->producer = -1;
        x->root = x->same = v;
        owned[v] = false;
      }
      for (int32_t i = 0; i < g->nnodes; i++)
        if (cnode[i]) { g->nodes[i].dead = true; (*removed)++; }
    }
    for (int32_t v = 0; v < g->nvals; v++)
      if (owned[v]) of_tensor_release(slot[v]);
  }
  free(cst); free(owned); free(cnode); free(written); free(uses_nc); free(slot);
  return st;
}
