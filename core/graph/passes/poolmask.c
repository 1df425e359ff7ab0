/* poolmask.c -- masks applied after a max-pool backward move before it.
 *
 * relu (or any compare with a scalar) before max_pool gives, in backward,
 *   gr = MaxPoolBackward(gp)          -- scatter into the full-size input
 *   gc = gr * to(cmp(y, s))           -- y: the pool's input
 * gr is zero except at each window's argmax, where y equals the pooled
 * value p, so the mask there is cmp(p, s). The pass rewrites this to
 *   m  = gp * to(cmp(p, s))           -- on the pooled shape (4x smaller)
 *   gc = MaxPoolBackward(m)
 * which drops a full-size compare, cast and multiply from each step. Every
 * element gets the same value as before (masked zeros stay zeros: a
 * multiply by 0 or 1), so graph results still equal eager ones. */
#include "../ops.h"
#include <stdlib.h>
#include <string.h>

/* v, seen through same-shape aliases (a saved tensor bound as a view) */
static int32_t unalias(const of_graph *g, int32_t v) {
  while (v >= 0 && g->vals[v].producer >= 0) {
    const of_gnode *a = &g->nodes[g->vals[v].producer];
    if (a->op != OF_OPK_ALIAS || a->nin < 1 || a->in[0] < 0) break;
    const of_gval *x = &g->vals[v], *s = &g->vals[a->in[0]];
    if (x->ndim != s->ndim || x->offset != s->offset || x->dtype != s->dtype) break;
    bool same = true;
    for (int32_t d = 0; d < x->ndim && same; d++)
      same = x->shape[d] == s->shape[d] && x->strides[d] == s->strides[d];
    if (!same) break;
    v = a->in[0];
  }
  return v;
}

static bool same_shape(const of_gval *a, const of_gval *b) {
  if (a->ndim != b->ndim) return false;
  for (int32_t d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return false;
  return true;
}

static bool rewrite(of_graph *g, const int32_t *uses, int32_t xi) {
  of_gnode *X = &g->nodes[xi];
  if (X->dead || X->op != OPK_BINARY || X->nin != 2 || X->nreal != 1 || X->nmut ||
      X->nout != 1 || ((const a_binary *)X->attrs)->op != OF_MUL)
    return false;
  for (int32_t side = 0; side < 2; side++) {
    int32_t gr = X->in[side], fm = X->in[1 - side];
    if (gr < 0 || fm < 0 || uses[gr] != 1 || g->vals[gr].producer < 0) continue;
    int32_t bi = g->vals[gr].producer;
    of_gnode *B = &g->nodes[bi];
    if (B->dead || B->op != OF_OPK_BACKWARD || B->nreal != 1 || B->nout != 1 || B->nin < 2)
      continue;
    const a_backward *ba = B->attrs;
    if (strcmp(ba->name, "MaxPoolBackward") != 0 && strcmp(ba->name, "AdaptiveMaxPoolBackward") != 0)
      continue;
    int32_t gp = B->in[1];
    bool others = false;
    for (int32_t k = 2; k < B->nin; k++) others |= B->in[k] >= 0;
    if (gp < 0 || others || B->in[0] < 0 || g->vals[B->in[0]].producer < 0) continue;
    const of_gnode *M = &g->nodes[g->vals[B->in[0]].producer];
    if (M->op != OPK_MAX_POOL && M->op != OPK_ADAPTIVE_MAX_POOL) continue;
    if (M->nin < 1 || M->in[0] < 0 || M->nreal < 1 || M->out[0] < 0) continue;
    int32_t p = M->out[0];
    const of_gval *grx = &g->vals[gr];
    if (grx->kind != OF_GV_INTERNAL || grx->root != gr || grx->same != gr) continue;
    of_gnode *T = of_graph_sole(g, uses, fm, OPK_TO_DTYPE);
    if (!T || T->nin != 1) continue;
    int32_t bm = T->in[0];
    of_gnode *G = of_graph_sole(g, uses, bm, OPK_BINARY_SCALAR);
    if (!G || G->nin != 1 || G->in[0] < 0) continue;
    int32_t cop = ((const a_binary_scalar *)G->attrs)->op;
    if (cop < OF_EQ || cop > OF_GE) continue;
    if (unalias(g, G->in[0]) != unalias(g, M->in[0])) continue;
    const of_gval *pv = &g->vals[p], *gpv = &g->vals[gp], *yv = &g->vals[G->in[0]];
    const of_gval *grv = &g->vals[gr], *out = &g->vals[X->out[0]];
    if (!same_shape(pv, gpv) || pv->dtype != yv->dtype || gpv->dtype != grv->dtype ||
        !same_shape(grv, out) || !same_shape(&g->vals[fm], out) || out->dtype != grv->dtype)
      continue;
    int32_t gti = g->vals[bm].producer, ti = g->vals[fm].producer;
    if (gti <= bi || ti <= bi || gti >= xi || ti >= xi) continue;
    if (of_graph_written_between(g, g->vals[p].root, g->vals[p].producer, gti)) continue;
    /* mask on the pooled value, multiply the pooled grad, then scatter */
    int32_t gc = X->out[0];
    G->in[0] = p;
    of_gval_set_contiguous(&g->vals[bm], pv);
    of_gval_set_contiguous(&g->vals[fm], pv);
    of_gval_set_contiguous(&g->vals[gr], pv);
    X->in[side] = gp;
    X->out[0] = gr;
    B->in[1] = gr;
    B->out[0] = gc;
    /* B now reads X's result: run it right after X (nothing in between
     * reads B's old result, which only X read) */
    of_gnode moved = g->nodes[bi];
    memmove(&g->nodes[bi], &g->nodes[bi + 1], sizeof *g->nodes * (size_t)(xi - bi));
    g->nodes[xi] = moved;
    for (int32_t i = bi; i <= xi; i++)
      for (int32_t j = 0; j < g->nodes[i].nout; j++)
        if (g->nodes[i].out[j] >= 0) g->vals[g->nodes[i].out[j]].producer = i;
    return true;
  }
  return false;
}

of_status of_pass_poolmask(of_graph *g, int32_t *removed) {
  *removed = 0;
  int32_t *uses = of_graph_use_counts(g);
  if (!uses) return of_fail(OF_ERR_OOM, "nn.Graph: poolmask: out of memory");
  /* use counts do not change: each rewrite swaps readers one for one */
  for (int32_t i = 0; i < g->nnodes; i++)
    if (rewrite(g, uses, i)) (*removed)++;
  free(uses);
  return OF_OK;
}
