/* inplace.c -- in-place rewriting, and its inverse.
 *
 * An elementwise node (or fused chain, or a conv_fused node's residual)
 * whose operand dies at that node writes its result into the operand's
 * buffer instead of a fresh one:
 * same shape, dtype and dense layout (contiguous or channels-last), an
 * internal value that owns its storage, nothing else views that storage, it
 * is not a graph output, and no autograd node kept for an opaque backward
 * (CAPTURE) holds it. A clone whose operand's storage nobody reads
 * afterwards becomes an alias. */

/* functionalize (of_pass_functionalize, the first pass): in-place
 * elementwise ops the model wrote (relu_, add_, mul_, clamp_:
 * `nn.ReLU({inplace = true})`, `out:add_(identity)`, as torchvision's ResNet
 * does) become out-of-place nodes when nothing reads the overwritten value
 * afterwards, so the passes that follow see the chains they match: bnfold,
 * convfuse and fuse look for values that own their storage, and an in-place
 * result shares its operand's. The `inplace` pass at the end writes results
 * into dying operands again where it may.
 *
 * Why: eager code is faster in place (no new buffer: fewer bytes for Lua's
 * collector to wait on; a ResNet-50 inference forward at batch 8 ran 18 full
 * collections and 11 with torchvision's in-place ReLU and add, 0.88x the
 * time), but traced into an eval graph the same model lost its conv + add +
 * relu fusion (ResNet-18: 17 conv_fused nodes, 1 with the in-place ops; 17
 * again with this pass). flowvision's ResNets and MobileNetV2 are written
 * in place since training graphs record in-place ops too (a captured node
 * keeps its op in place: it is skipped here).
 *
 * A node qualifies when it is an elementwise op written into its first
 * operand x (the `into` input), x is an internal value that owns its storage
 * (not a view, offset 0, dense contiguous or channels-last), every operand
 * shares x's shape, dtype and dense layout (the out-of-place result then has
 * x's layout, as in eager), no value on x's storage made before the node is
 * read after it or is a graph output, and no autograd node kept for an
 * opaque backward holds one. The node drops its `into` input and its result
 * becomes its own storage's root, and so do the later values on that
 * storage (further versions and views of the result). */
#include "../ops.h"
#include "../fused.h"
#include <stdlib.h>

static bool same_meta(const of_gval *a, const of_gval *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (int32_t i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

/* 0: contiguous, 1: dense channels-last, -1: neither. A result written into
 * an operand takes the operand's layout, so the two must share one. */
static int32_t dense_layout(const of_gval *v) {
  if (of_gval_contiguous(v)) return 0;
  return of_strides_channels_last(v->shape, v->strides, v->ndim) ? 1 : -1;
}

/* number of operand inputs (before an `into`) the op takes */
static int32_t operands(const of_gnode *n) {
  switch (n->op) {
    case OPK_BINARY: return 2;
    case OPK_BINARY_SCALAR: case OPK_UNARY: case OPK_CLAMP: case OPK_LEAKY_RELU: return 1;
    case OF_OPK_FUSED: return n->nin;
    case OPK_CONV_FUSED: return 4;   /* x, W, b, residual: only the residual */
    default: return -1;
  }
}

/* A clone whose operand's storage is read by nothing after it becomes an
 * alias of the operand: the copy had nobody to protect. (Autograd clones
 * the first grad it accumulates; in a train graph that copy sat between
 * each weight grad's matmul and its optimizer update.) */
static bool clone_as_alias(of_graph *g, int32_t i, const int32_t *last, const bool *pinned) {
  of_gnode *n = &g->nodes[i];
  if (n->dead || n->op != OPK_CLONE || n->nin != 1 || n->nreal != 1 || n->nmut ||
      n->in[0] < 0 || n->out[0] < 0 || (n->flags & OF_GN_CAPTURE))
    return false;
  int32_t x = n->in[0], o = n->out[0], r = g->vals[x].root;
  const of_gval *xv = &g->vals[x];
  of_gval *ov = &g->vals[o];
  if (xv->kind != OF_GV_INTERNAL || g->vals[r].kind != OF_GV_INTERNAL || pinned[r] ||
      pinned[o] || ov->kind != OF_GV_INTERNAL || ov->root != o || ov->same != o ||
      !of_gval_contiguous(xv) || !of_gval_contiguous(ov) || !same_meta(xv, ov))
    return false;
  for (int32_t v = 0; v < g->nvals; v++)   /* the storage's views: none read later */
    if (g->vals[v].root == r && last[v] > i) return false;
  a_alias a;
  memset(&a, 0, sizeof a);
  a.ndim = ov->ndim;
  memcpy(a.shape, ov->shape, sizeof a.shape);
  memcpy(a.strides, ov->strides, sizeof a.strides);
  void *p = realloc(n->attrs, sizeof a);
  if (!p) return false;
  memcpy(p, &a, sizeof a);
  n->attrs = p;
  n->attr_size = (int32_t)sizeof a;
  n->op = OF_OPK_ALIAS;
  ov->root = r;
  return true;
}

/* whether conv_fused node n's convolution reads x's storage: a residual
 * that is also its input cannot take the result (the convolution would
 * read what it already wrote) */
static bool conv_reads(const of_graph *g, const of_gnode *n, int32_t x) {
  for (int32_t k = 0; k < 3; k++)
    if (n->in[k] >= 0 && g->vals[n->in[k]].root == g->vals[x].root) return true;
  return false;
}

/* A conv_fused residual x that is itself an in-place result (the previous
 * block's output, written into its residual): x is the runtime tensor of
 * its root's storage, which nothing reads after node i and nothing keeps.
 * (ResNet's blocks chain this way: without it every other block's sum
 * could not be written in place.) */
static bool in_place_version(const of_graph *g, const of_gnode *n, int32_t x, int32_t i,
                             const int32_t *last, const bool *pinned) {
  const of_gval *xv = &g->vals[x];
  int32_t r = xv->root;
  if (n->op != OPK_CONV_FUSED || r == x || xv->same != g->vals[r].same || g->vals[r].same != r ||
      g->vals[r].kind != OF_GV_INTERNAL || g->vals[r].root != r || pinned[r] ||
      g->vals[r].offset != 0)
    return false;
  for (int32_t v = 0; v < g->nvals; v++)
    if (g->vals[v].root == r && (last[v] > i || pinned[v])) return false;
  return true;
}

/* last[v]: the last node reading value v (nnodes for graph outputs, -1
 * none); pinned[r]: storage root r is held by an autograd node kept for an
 * opaque backward (CAPTURE) until the backward runs, or (with outputs) is a
 * graph output's */
static void uses(const of_graph *g, int32_t *last, bool *pinned, bool outputs) {
  for (int32_t v = 0; v < g->nvals; v++) last[v] = -1;
  for (int32_t i = 0; i < g->nnodes; i++) {
    const of_gnode *n = &g->nodes[i];
    if (n->dead) continue;
    for (int32_t k = 0; k < n->nin; k++)
      if (n->in[k] >= 0) last[n->in[k]] = i;
    if (n->flags & OF_GN_CAPTURE) {
      for (int32_t k = 0; k < n->nin; k++)
        if (n->in[k] >= 0 && (k >= 32 || ((n->keep_in >> k) & 1)))
          pinned[g->vals[n->in[k]].root] = true;
      for (int32_t j = 0; j < n->nreal; j++)
        if (n->out[j] >= 0 && (j >= 32 || ((n->keep_out >> j) & 1)))
          pinned[g->vals[n->out[j]].root] = true;
    }
  }
  for (int32_t o = 0; o < g->noutputs; o++) {
    last[g->outputs[o]] = g->nnodes;
    if (outputs) pinned[g->vals[g->outputs[o]].root] = true;
  }
}

of_status of_pass_inplace(of_graph *g, int32_t *removed) {
  *removed = 0;
  int32_t nv = g->nvals ? g->nvals : 1;
  int32_t *last = malloc(sizeof *last * (size_t)nv);
  int32_t *sharers = calloc((size_t)nv, sizeof *sharers);   /* values on each root */
  bool *pinned = calloc((size_t)nv, sizeof *pinned);
  if (!last || !sharers || !pinned) {
    free(last); free(sharers); free(pinned);
    return of_fail(OF_ERR_OOM, "nn.Graph: inplace: out of memory");
  }
  uses(g, last, pinned, true);
  for (int32_t v = 0; v < g->nvals; v++) sharers[g->vals[v].root]++;
  int32_t count = 0;
  for (int32_t i = 0; i < g->nnodes; i++) {
    of_gnode *n = &g->nodes[i];
    int32_t nops = operands(n);
    if (n->dead || nops < 0 || n->nreal != 1 || n->out[0] < 0) continue;
    if (n->op == OF_OPK_FUSED ? of_fused_into(n) >= 0 : n->nin != nops) continue;
    int32_t o = n->out[0];
    of_gval *ov = &g->vals[o];
    if (ov->kind != OF_GV_INTERNAL || ov->same != o || ov->root != o) continue;
    for (int32_t k = 0; k < nops; k++) {
      int32_t x = n->in[k];
      if (x < 0 || (n->op == OPK_CONV_FUSED && (k != 3 || conv_reads(g, n, x)))) continue;
      const of_gval *xv = &g->vals[x];
      int32_t r = in_place_version(g, n, x, i, last, pinned) ? xv->root : x;
      if (xv->kind != OF_GV_INTERNAL || (r == x && (xv->root != x || xv->same != x ||
                                                    sharers[x] != 1)) ||
          pinned[x] || last[x] != i || xv->offset != 0 || dense_layout(xv) < 0 ||
          dense_layout(xv) != dense_layout(ov) || !same_meta(xv, ov))
        continue;
      if (n->op == OF_OPK_FUSED) {
        of_fused_set_into(n, k);
      } else {
        int32_t *in = realloc(n->in, sizeof *in * (size_t)(n->nin + 1));
        if (!in) break;
        n->in = in;
        n->in[n->nin++] = x;
      }
      ov->same = g->vals[x].same;
      ov->root = r;
      sharers[r]++;
      count++;
      break;
    }
  }
  for (int32_t i = 0; i < g->nnodes; i++)
    if (clone_as_alias(g, i, last, pinned)) count++;
  free(last); free(sharers); free(pinned);
  *removed = count;   /* reported as rewrites */
  return OF_OK;
}

of_status of_pass_functionalize(of_graph *g, int32_t *removed) {
  *removed = 0;
  int32_t nv = g->nvals ? g->nvals : 1;
  int32_t *last = malloc(sizeof *last * (size_t)nv);
  bool *pinned = calloc((size_t)nv, sizeof *pinned);   /* roots held (uses) */
  if (!last || !pinned) {
    free(last);
    free(pinned);
    return of_fail(OF_ERR_OOM, "nn.Graph: functionalize: out of memory");
  }
  uses(g, last, pinned, false);
  int32_t count = 0;
  for (int32_t i = 0; i < g->nnodes; i++) {
    of_gnode *n = &g->nodes[i];
    int32_t nops = n->op == OF_OPK_FUSED || n->op == OPK_CONV_FUSED ? -1 : operands(n);
    if (n->dead || nops < 0 || n->nin != nops + 1 || n->nreal != 1 || n->nmut != 0 ||
        n->out[0] < 0 || (n->flags & OF_GN_CAPTURE))
      continue;
    int32_t x = n->in[nops], o = n->out[0];
    if (x < 0 || x != n->in[0]) continue;   /* written into its first operand */
    const of_gval *xv = &g->vals[x];
    const of_gval *ov = &g->vals[o];
    if (xv->kind != OF_GV_INTERNAL || xv->root != x || xv->same != x || xv->offset != 0 ||
        ov->kind != OF_GV_INTERNAL || ov->root != x || dense_layout(xv) < 0 ||
        !same_meta(xv, ov) || dense_layout(ov) != dense_layout(xv))
      continue;
    bool ok = true;
    for (int32_t k = 1; k < nops && ok; k++) {   /* the other operand: the result's layout */
      int32_t y = n->in[k];
      ok = y >= 0 && same_meta(&g->vals[y], xv) && dense_layout(&g->vals[y]) == dense_layout(xv);
    }
    /* the storage's values made before the node: none read after it, none kept */
    for (int32_t v = 0; v < g->nvals && ok; v++) {
      const of_gval *vv = &g->vals[v];
      if (vv->root != x || v == o) continue;
      bool before = vv->producer < i;   /* x itself, its views, earlier versions */
      if (before && last[v] > i) ok = false;
    }
    if (!ok || pinned[x]) continue;
    n->nin--;   /* no `into`: the kernel makes a fresh result */
    for (int32_t v = 0; v < g->nvals; v++) {
      of_gval *vv = &g->vals[v];
      if (vv->root != x || vv->producer < i) continue;
      vv->root = o;   /* the result and what is made on it afterwards */
      if (vv->same == xv->same) vv->same = o;
    }
    g->vals[o].same = o;
    count++;
  }
  free(last);
  free(pinned);
  *removed = count;   /* reported as rewrites */
  return OF_OK;
}
