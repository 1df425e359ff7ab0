/* plan.c -- liveness-based memory plan.
 *
 * Each value is released right after its last reader (the graph's outputs
 * are kept to the end), so a buffer goes back to the allocator's cache as
 * soon as it is dead and the next op reuses it; nothing waits for Lua's
 * garbage collector as eager tensors do. The pass also works out the peak
 * of live internal bytes that this order gives (storages live from their
 * first value's producer to their last value's last reader). */
#include "../ops.h"
#include <stdlib.h>

of_status of_pass_plan(of_graph *g, int32_t *removed) {
  *removed = 0;
  int32_t nv = g->nvals ? g->nvals : 1, nn = g->nnodes;
  int32_t *last = malloc(sizeof *last * (size_t)nv);
  int32_t *start = calloc((size_t)nn + 2, sizeof *start);
  int32_t *root_end = malloc(sizeof *root_end * (size_t)nv);
  int64_t *delta = calloc((size_t)nn + 2, sizeof *delta);
  if (!last || !start || !root_end || !delta) {
    free(last); free(start); free(root_end); free(delta);
    return of_fail(OF_ERR_OOM, "nn.Graph: plan: out of memory");
  }
  for (int32_t v = 0; v < nv; v++) last[v] = root_end[v] = -1;
  for (int32_t i = 0; i < nn; i++) {
    const of_gnode *n = &g->nodes[i];
    if (n->dead) continue;
    for (int32_t j = 0; j < n->nout; j++)
      if (n->out[j] >= 0) last[n->out[j]] = i;   /* unread results go right away */
    for (int32_t k = 0; k < n->nin; k++)
      if (n->in[k] >= 0) last[n->in[k]] = i;
  }
  for (int32_t o = 0; o < g->noutputs; o++) last[g->outputs[o]] = nn;   /* kept */
  int32_t nfree = 0;
  for (int32_t v = 0; v < g->nvals; v++) {
    int8_t kind = g->vals[v].kind;
    if ((kind == OF_GV_INTERNAL || kind == OF_GV_HANDLE || kind == OF_GV_INPUT) && last[v] >= 0 &&
        last[v] < nn) {
      start[last[v] + 1]++;
      nfree++;
    }
  }
  for (int32_t i = 0; i < nn; i++) start[i + 1] += start[i];
  int32_t *idx = malloc(sizeof *idx * (size_t)(nfree ? nfree : 1));
  int32_t *fill = calloc((size_t)nn + 1, sizeof *fill);
  if (!idx || !fill) {
    free(last); free(start); free(root_end); free(delta); free(idx); free(fill);
    return of_fail(OF_ERR_OOM, "nn.Graph: plan: out of memory");
  }
  for (int32_t v = 0; v < g->nvals; v++) {
    int8_t kind = g->vals[v].kind;
    if ((kind == OF_GV_INTERNAL || kind == OF_GV_HANDLE || kind == OF_GV_INPUT) && last[v] >= 0 &&
        last[v] < nn)
      idx[start[last[v]] + fill[last[v]]++] = v;
  }
  free(fill);
  free(g->free_idx);
  free(g->free_start);
  g->free_idx = idx;
  g->free_start = start;
  g->planned = true;
  /* peak estimate over storages owned by internal values */
  int64_t total = 0;
  for (int32_t v = 0; v < g->nvals; v++) {
    const of_gval *x = &g->vals[v];
    if (x->kind != OF_GV_INTERNAL || last[v] < 0) continue;
    int32_t r = x->root;
    if (g->vals[r].kind != OF_GV_INTERNAL) continue;
    if (last[v] > root_end[r]) root_end[r] = last[v];
  }
  for (int32_t r = 0; r < g->nvals; r++) {
    const of_gval *x = &g->vals[r];
    if (x->kind != OF_GV_INTERNAL || x->root != r || x->producer < 0 || root_end[r] < 0) continue;
    int64_t b = of_gval_bytes(x);
    total += b;
    delta[x->producer] += b;
    delta[root_end[r] + 1 <= nn ? root_end[r] + 1 : nn] -= b;
  }
  int64_t live = 0, peak = 0;
  for (int32_t i = 0; i <= nn; i++) {
    live += delta[i];
    if (live > peak) peak = live;
  }
  g->planned_peak = peak;
  g->eager_bytes = total;
  free(last); free(root_end); free(delta);
  return OF_OK;
}
