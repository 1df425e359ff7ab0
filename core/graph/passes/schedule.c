/* schedule.c -- early updates.
 *
 * The optimizer's update nodes (and any other node that only writes
 * externals in place) move up to just after the last node they depend on:
 * the producers of their inputs, and every earlier reader or writer of the
 * storages they write -- counting the backward nodes of forward nodes that
 * keep those storages in their autograd node. A parameter is then updated
 * as soon as its grad is final, and the grad's buffer is freed while the
 * rest of the backward pass still runs, which lowers the step's peak
 * memory. Results are unchanged: every read of a parameter still happens
 * before its update. */
#include "../ops.h"
#include <stdlib.h>

static bool update_like(const of_graph *g, const of_gnode *n) {
  if (n->dead || n->nmut == 0 || n->nreal != 0 || (n->flags & OF_GN_CAPTURE)) return false;
  for (int32_t m = 0; m < n->nmut; m++) {
    int32_t v = n->in[n->mut[m]];
    if (v < 0 || g->vals[g->vals[v].root].kind != OF_GV_EXTERNAL) return false;
  }
  const of_opdef *d = of_op_def(n->op);
  return d && !(d->flags & OF_OPF_RANDOM);
}

of_status of_pass_schedule(of_graph *g, int32_t *removed) {
  *removed = 0;
  int32_t nn = g->nnodes;
  /* producer position per value, recomputed as nodes move */
  int32_t *order = malloc(sizeof *order * (size_t)(nn ? nn : 1));   /* new order of node ids */
  int32_t *pos = malloc(sizeof *pos * (size_t)(nn ? nn : 1));       /* node id -> position */
  int32_t *handle_node = malloc(sizeof *handle_node * (size_t)(g->nvals ? g->nvals : 1));
  if (!order || !pos || !handle_node) {
    free(order); free(pos); free(handle_node);
    return of_fail(OF_ERR_OOM, "nn.Graph: schedule: out of memory");
  }
  for (int32_t i = 0; i < nn; i++) order[i] = pos[i] = i;
  for (int32_t v = 0; v < g->nvals; v++) handle_node[v] = -1;
  for (int32_t i = 0; i < nn; i++) {
    const of_gnode *n = &g->nodes[i];
    if (!n->dead && (n->flags & OF_GN_CAPTURE) && n->out[n->nout - 1] >= 0)
      handle_node[n->out[n->nout - 1]] = i;
  }
  int32_t moved = 0, roots[16];
  for (int32_t i = 0; i < nn; i++) {
    const of_gnode *n = &g->nodes[i];
    if (!update_like(g, n)) continue;
    int32_t nw = of_node_writes(g, n, roots, 16);
    int32_t earliest = -1;   /* position the node must come after */
    for (int32_t k = 0; k < n->nin; k++) {
      int32_t v = n->in[k];
      if (v >= 0 && g->vals[v].producer >= 0 && pos[g->vals[v].producer] > earliest)
        earliest = pos[g->vals[v].producer];
    }
    for (int32_t p = pos[i] - 1; p > earliest; p--) {
      const of_gnode *m = &g->nodes[order[p]];
      if (m->dead) continue;
      bool touches = false;
      for (int32_t k = 0; k < m->nin && !touches; k++) {
        int32_t v = m->in[k];
        if (v < 0) continue;
        int32_t r = g->vals[v].kind == OF_GV_HANDLE ? -1 : g->vals[v].root;
        for (int32_t w = 0; w < nw; w++) touches = touches || r == roots[w];
        /* an opaque backward node reads what its forward node's autograd node kept */
        int32_t f = g->vals[v].kind == OF_GV_HANDLE ? handle_node[v] : -1;
        if (f >= 0) {
          const of_gnode *fn = &g->nodes[f];
          for (int32_t q = 0; q < fn->nin && !touches; q++) {
            if (fn->in[q] < 0) continue;
            bool kept = q >= 32 || ((fn->keep_in >> q) & 1);
            for (int32_t w = 0; w < nw && kept; w++) touches = touches || g->vals[fn->in[q]].root == roots[w];
          }
        }
      }
      int32_t mr[16], mc = of_node_writes(g, m, mr, 16);
      for (int32_t a = 0; a < mc && !touches; a++)
        for (int32_t w = 0; w < nw; w++) touches = touches || mr[a] == roots[w];
      if (touches) { earliest = p; break; }
    }
    int32_t to = earliest + 1;
    if (to >= pos[i]) continue;
    for (int32_t p = pos[i]; p > to; p--) {   /* shift [to, pos[i]) one down */
      order[p] = order[p - 1];
      pos[order[p]] = p;
    }
    order[to] = i;
    pos[i] = to;
    moved++;
  }
  if (moved) {
    of_gnode *nodes = malloc(sizeof *nodes * (size_t)(nn ? nn : 1));
    if (!nodes) {
      free(order); free(pos); free(handle_node);
      return of_fail(OF_ERR_OOM, "nn.Graph: schedule: out of memory");
    }
    for (int32_t p = 0; p < nn; p++) nodes[p] = g->nodes[order[p]];
    memcpy(g->nodes, nodes, sizeof *nodes * (size_t)nn);
    free(nodes);
  }
  free(order); free(pos); free(handle_node);
  *removed = moved;   /* reported as nodes moved */
  return OF_OK;
}
