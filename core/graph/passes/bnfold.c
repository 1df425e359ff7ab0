/* bnfold.c -- conv + BatchNorm folding for eval graphs.
 *
 * conv(x, W, b) followed by an eval-mode batch_norm(running_mean,
 * running_var, gamma, beta, eps) whose only input is the conv's result
 * becomes conv(x, W * s, (b - mean) * s + beta) with s = gamma / sqrt(var +
 * eps) per output channel. The folded weights are computed by small nodes
 * at every run (from the live parameters and buffers, so training between
 * calls is seen), and the pass over the activations that batch_norm made
 * is gone. Numbers change within float rounding (~1e-6 relative). */
#include "../ops.h"
#include <stdlib.h>
#include <string.h>

static int32_t new_value(of_graph *g, of_dtype dt, const int64_t *shape, int32_t ndim) {
  int32_t v = of_graph_add_value(g, OF_GV_INTERNAL, NULL);
  if (v < 0) return -1;
  of_gval *x = &g->vals[v];
  x->dtype = dt;
  x->ndim = ndim;
  for (int32_t i = 0; i < ndim; i++) x->shape[i] = shape[i];
  of_contiguous_strides(x->shape, ndim, x->strides);
  return v;
}

/* appends node op(ins) -> a fresh value of (dt, shape); -1 on OOM */
static int32_t emit(of_graph *g, int32_t op, const void *attrs, int32_t asz, const int32_t *ins,
                    int32_t nin, of_dtype dt, const int64_t *shape, int32_t ndim) {
  int32_t v = new_value(g, dt, shape, ndim);
  if (v < 0) return -1;
  int32_t ni = of_graph_add_node(g, op, attrs, asz, ins, nin, 1, 0);
  if (ni < 0) return -1;
  g->nodes[ni].out[0] = v;
  g->vals[v].producer = ni;
  return v;
}

static int32_t bin(of_graph *g, int32_t op, int32_t a, int32_t b, of_dtype dt,
                   const int64_t *shape, int32_t nd) {
  a_binary at = {op, 0};
  int32_t ins[2] = {a, b};
  return emit(g, OPK_BINARY, &at, sizeof at, ins, 2, dt, shape, nd);
}

static bool is_ext(const of_graph *g, int32_t v, of_dtype dt, int64_t C) {
  if (v < 0) return true;   /* absent: fine */
  const of_gval *x = &g->vals[v];
  return x->kind == OF_GV_EXTERNAL && x->dtype == dt && x->ndim == 1 && x->shape[0] == C;
}

of_status of_pass_bnfold(of_graph *g, int32_t *removed) {
  *removed = 0;
  int32_t nn0 = g->nnodes;
  int32_t *uses = of_graph_use_counts(g);
  int32_t *before = malloc(sizeof *before * (size_t)(nn0 + 1));   /* new node -> insert point */
  int32_t nbefore = 0, cap_before = nn0 + 1;
  if (!uses || !before) {
    free(uses);
    free(before);
    return of_fail(OF_ERR_OOM, "nn.Graph: bnfold: out of memory");
  }
  int32_t *rename = NULL, *from = malloc(sizeof *from * (size_t)(nn0 + 1));
  int32_t *to = malloc(sizeof *to * (size_t)(nn0 + 1)), nren = 0;
  of_status st = from && to ? OF_OK : of_fail(OF_ERR_OOM, "nn.Graph: bnfold: out of memory");
  for (int32_t i = 0; i < nn0 && st == OF_OK; i++) {
    of_gnode *bn = &g->nodes[i];
    if (bn->dead || bn->op != OPK_BATCH_NORM || bn->nin != 5 || bn->nmut || bn->out[0] < 0 ||
        (bn->flags & OF_GN_CAPTURE))
      continue;
    const a_norm *na = bn->attrs;
    if (na->flag) continue;   /* training: batch statistics */
    int32_t y = bn->in[0];
    if (y < 0 || uses[y] != 1 || g->vals[y].producer < 0) continue;
    int32_t ci = g->vals[y].producer;
    of_gnode *cv = &g->nodes[ci];
    if (cv->dead || cv->op != OPK_CONV || cv->out[0] != y || (cv->flags & OF_GN_CAPTURE) ||
        g->vals[y].root != y)
      continue;
    /* the conv's result replaces the batch_norm's for its readers, whose
     * recorded values (layouts) follow from the batch_norm's: the two must
     * have one layout (a channels-last conv feeding a batch_norm that
     * returned a contiguous result is left alone) */
    const of_gval *yv = &g->vals[y], *bv = &g->vals[bn->out[0]];
    if (yv->ndim != bv->ndim || memcmp(yv->strides, bv->strides, sizeof(int64_t) * (size_t)yv->ndim))
      continue;
    of_dtype dt = g->vals[y].dtype;
    int32_t W = cv->in[1];
    if (W < 0 || g->vals[W].kind != OF_GV_EXTERNAL || g->vals[W].dtype != dt) continue;
    int64_t C = g->vals[W].shape[0];
    int32_t rm = bn->in[1], rv = bn->in[2], gamma = bn->in[3], beta = bn->in[4], b = cv->in[2];
    if (rm < 0 || rv < 0 || !is_ext(g, rm, dt, C) || !is_ext(g, rv, dt, C) ||
        !is_ext(g, gamma, dt, C) || !is_ext(g, beta, dt, C) || !is_ext(g, b, dt, C) ||
        (dt != OF_FLOAT32 && dt != OF_FLOAT64))
      continue;
    /* the readers of the externals must not be reordered past writes: eval
     * graphs don't write them, check anyway */
    bool written = false;
    int32_t chk[5] = {W, rm, rv, gamma, beta};
    for (int32_t k = 0; k < 5; k++)
      if (chk[k] >= 0 && of_graph_written_between(g, g->vals[chk[k]].root, -1, nn0)) written = true;
    if (written) continue;
    int32_t first = g->nnodes;
    int64_t cs[1] = {C};
    const of_gval *wv = &g->vals[W];
    int64_t wshape[OF_MAX_DIMS];
    int32_t wnd = wv->ndim;
    memcpy(wshape, wv->shape, sizeof wshape);
    a_binary_scalar ae;
    memset(&ae, 0, sizeof ae);
    ae.op = OF_ADD;
    ae.s = na->eps;
    a_unary ar = {OF_RSQRT, 0};
    int32_t t = emit(g, OPK_BINARY_SCALAR, &ae, sizeof ae, &rv, 1, dt, cs, 1);
    if (t >= 0) t = emit(g, OPK_UNARY, &ar, sizeof ar, &t, 1, dt, cs, 1);
    int32_t s = t;
    if (s >= 0 && gamma >= 0) s = bin(g, OF_MUL, t, gamma, dt, cs, 1);
    a_shape av;
    memset(&av, 0, sizeof av);
    av.ndim = wnd;
    av.shape[0] = C;
    for (int32_t d = 1; d < wnd; d++) av.shape[d] = 1;
    int32_t sv = s >= 0 ? emit(g, OPK_VIEW, &av, sizeof av, &s, 1, dt, av.shape, wnd) : -1;
    if (sv >= 0) g->vals[sv].root = s;
    int32_t W2 = sv >= 0 ? bin(g, OF_MUL, W, sv, dt, wshape, wnd) : -1;
    int32_t bb = -1;
    if (W2 >= 0) {
      if (b >= 0) {
        bb = bin(g, OF_SUB, b, rm, dt, cs, 1);
      } else {
        a_unary an = {OF_NEG, 0};
        bb = emit(g, OPK_UNARY, &an, sizeof an, &rm, 1, dt, cs, 1);
      }
    }
    int32_t b2 = bb >= 0 ? bin(g, OF_MUL, bb, s, dt, cs, 1) : -1;
    if (b2 >= 0 && beta >= 0) b2 = bin(g, OF_ADD, b2, beta, dt, cs, 1);
    if (b2 < 0) { st = of_fail(OF_ERR_OOM, "nn.Graph: bnfold: out of memory"); break; }
    cv = &g->nodes[ci];   /* the node array may have moved */
    bn = &g->nodes[i];
    cv->in[1] = W2;
    cv->in[2] = b2;
    from[nren] = bn->out[0];
    to[nren++] = y;
    bn->dead = true;
    for (int32_t k = first; k < g->nnodes; k++) {
      if (nbefore == cap_before) {
        cap_before *= 2;
        int32_t *nb = realloc(before, sizeof *nb * (size_t)cap_before);
        if (!nb) { st = of_fail(OF_ERR_OOM, "nn.Graph: bnfold: out of memory"); break; }
        before = nb;
      }
      before[nbefore++] = ci;
    }
    (*removed)++;
  }
  if (st == OF_OK && *removed) {
    rename = malloc(sizeof *rename * (size_t)g->nvals);
    if (!rename) st = of_fail(OF_ERR_OOM, "nn.Graph: bnfold: out of memory");
  }
  if (st == OF_OK && *removed) {
    for (int32_t v = 0; v < g->nvals; v++) rename[v] = v;
    for (int32_t r = 0; r < nren; r++) rename[from[r]] = to[r];
    /* readers of a folded batch_norm read the conv now */
    for (int32_t i = 0; i < g->nnodes; i++)
      for (int32_t k = 0; k < g->nodes[i].nin; k++) {
        int32_t v = g->nodes[i].in[k];
        if (v >= 0) g->nodes[i].in[k] = rename[v];
      }
    for (int32_t o = 0; o < g->noutputs; o++) g->outputs[o] = rename[g->outputs[o]];
    /* new nodes go right before their conv */
    of_gnode *nodes = malloc(sizeof *nodes * (size_t)g->nnodes);
    if (!nodes) {
      st = of_fail(OF_ERR_OOM, "nn.Graph: bnfold: out of memory");
    } else {
      int32_t k = 0;
      for (int32_t i = 0; i < nn0; i++) {
        for (int32_t j = 0; j < nbefore; j++)
          if (before[j] == i) nodes[k++] = g->nodes[nn0 + j];
        nodes[k++] = g->nodes[i];
      }
      memcpy(g->nodes, nodes, sizeof *nodes * (size_t)k);
      free(nodes);
    }
  }
  free(rename);
  free(from);
  free(to);
  free(before);
  free(uses);
  return st;
}
