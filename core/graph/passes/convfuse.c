/* convfuse.c -- convolution + residual add + activation as one node in
 * eval graphs, and that node's op (conv_fused).
 *
 * After bnfold an eval ResNet holds, per block,
 *   y = conv(x, W, b)            (BatchNorm folded into W, b)
 *   a = binary(y, r) {add}       r: the block's input or its downsample
 *   z = unary(a) {relu}          (or clamp for ReLU6, or no activation)
 * and every other layer conv -> relu. The add and the activation each make
 * one more pass over the activations (the fused elementwise node reads y
 * and r and writes z). This pass rewrites such a chain into
 *   z = conv_fused(x, W, b[, r])
 * which runs the convolution through oneDNN with a sum post-op (the
 * residual, in the buffer the inplace pass hands it: r dies at the add) and
 * an eltwise post-op (clip: relu is clip(0, inf), ReLU6 clip(0, 6)), so the
 * result is written once. Where conv's routing would not take oneDNN (the
 * im2col path, another dtype, no oneDNN in the build) or the residual's
 * buffer cannot be written, the node runs the same conv, add and activation
 * ops the graph had: the same numbers as before the pass. Through oneDNN
 * the sum and activation are computed in float32 on the accumulated result,
 * as the separate ops did (within float rounding: the tests compare with
 * eager to 1e-5).
 *
 * A chain is taken when its values are internal, read once, float32 on the
 * CPU, of one shape and one dense layout (the conv's result layout is the
 * chain's), nothing writes x, W or b between the conv and the last node,
 * and no node of it keeps an autograd node (train graphs keep the conv's
 * result for the backward: never fused). The fused node sits where the
 * chain's last node was (a residual computed after the conv -- ResNet's
 * downsample -- is ready there). */
#include "../ops.h"
#include "../../ops/conv.h"
#include "../../device/dnnl.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ACT_NONE = 0, ACT_RELU = 1, ACT_CLAMP = 2 };
enum { IN_X = 0, IN_W = 1, IN_B = 2, IN_RES = 3, IN_INTO = 4 };

static bool same_layout(const of_gval *a, const of_gval *b) {
  return a->dtype == b->dtype && a->ndim == b->ndim &&
         !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) &&
         !memcmp(a->strides, b->strides, sizeof(int64_t) * (size_t)a->ndim);
}

/* the activation of node n on value v (relu or clamp, out of place): its
 * kind and bounds; false when n is neither */
static bool activation(const of_gnode *n, int32_t v, a_conv_fused *f) {
  if (n->nin != 1 || n->in[0] != v) return false;
  if (n->op == OPK_UNARY && ((const a_unary *)n->attrs)->op == OF_RELU) {
    f->act = ACT_RELU;
    return true;
  }
  if (n->op != OPK_CLAMP) return false;
  const a_clamp *c = n->attrs;
  if (!c->has_lo && !c->has_hi) return false;
  if ((c->has_lo && isnan(c->lo)) || (c->has_hi && isnan(c->hi))) return false;
  f->act = ACT_CLAMP;
  f->has_lo = c->has_lo, f->has_hi = c->has_hi;
  f->lo = c->has_lo ? c->lo : 0, f->hi = c->has_hi ? c->hi : 0;
  return true;
}

static bool float32_cpu(const of_gval *v) { return v->dtype == OF_FLOAT32 && v->device == OF_CPU; }

/* The chain ending at node li with the conv C (index ci): rewrite node li
 * into conv_fused. res: the residual value or -1. */
static int rewrite(of_graph *g, int32_t li, int32_t ci, int32_t res, const a_conv_fused *f0,
                   of_gnode **dead, int32_t ndead) {
  of_gnode *L = &g->nodes[li];
  const of_gnode *C = &g->nodes[ci];
  if (C->nin != 3 || C->in[IN_X] < 0 || C->in[IN_W] < 0) return 0;
  int32_t y = C->out[0], z = L->out[0];
  const of_gval *yv = &g->vals[y], *zv = &g->vals[z];
  if (!float32_cpu(yv) || yv->ndim < 3 || !same_layout(yv, zv)) return 0;
  if (res >= 0 && !same_layout(&g->vals[res], yv)) return 0;
  for (int32_t k = 0; k < 3; k++) {
    int32_t v = C->in[k];
    if (v >= 0 && of_graph_written_between(g, g->vals[v].root, ci, li)) return 0;
  }
  const a_conv *ca = C->attrs;
  a_conv_fused f = *f0;
  f.nsp = ca->nsp;
  f.has = ca->has & 7;
  f.groups = ca->groups;
  memcpy(f.stride, ca->stride, sizeof f.stride);
  memcpy(f.padding, ca->padding, sizeof f.padding);
  memcpy(f.dilation, ca->dilation, sizeof f.dilation);
  int32_t nin = res >= 0 ? 4 : 3;
  int32_t *in = malloc(sizeof *in * (size_t)nin);
  void *attrs = malloc(sizeof f);
  if (!in || !attrs) {
    free(in);
    free(attrs);
    return -1;
  }
  memcpy(in, C->in, sizeof *in * 3);
  if (res >= 0) in[IN_RES] = res;
  memcpy(attrs, &f, sizeof f);
  free(L->in);
  free(L->attrs);
  L->in = in;
  L->nin = nin;
  L->attrs = attrs;
  L->attr_size = (int32_t)sizeof f;
  L->op = OPK_CONV_FUSED;
  g->vals[z].producer = li;
  for (int32_t k = 0; k < ndead; k++) dead[k]->dead = true;
  return ndead;
}

/* node li as a chain's last node: conv -> act, conv -> add -> act, or
 * (acts_only false) conv -> add */
static int try_chain(of_graph *g, const int32_t *uses, int32_t li, bool acts_only) {
  of_gnode *L = &g->nodes[li];
  if (L->dead || L->nreal != 1 || L->nout != 1 || L->nmut || (L->flags & OF_GN_CAPTURE) ||
      L->out[0] < 0)
    return 0;
  a_conv_fused f;
  memset(&f, 0, sizeof f);
  int32_t a = L->nin >= 1 ? L->in[0] : -1;
  of_gnode *A = NULL;
  if (acts_only) {
    if (a < 0 || !activation(L, a, &f)) return 0;
    A = of_graph_sole(g, uses, a, OPK_BINARY);
    if (!A) {
      of_gnode *C = of_graph_sole(g, uses, a, OPK_CONV);
      if (!C) return 0;
      of_gnode *dead[1] = {C};
      return rewrite(g, li, (int32_t)(C - g->nodes), -1, &f, dead, 1);
    }
  } else {
    if (L->op != OPK_BINARY) return 0;
    A = L;
  }
  if (A->nin != 2 || ((const a_binary *)A->attrs)->op != OF_ADD || A->nmut) return 0;
  for (int32_t side = 0; side < 2; side++) {
    int32_t y = A->in[side], r = A->in[1 - side];
    if (y < 0 || r < 0 || y == r) continue;
    of_gnode *C = of_graph_sole(g, uses, y, OPK_CONV);
    if (!C) continue;
    /* the add's result keeps the chain's layout (checked against the conv's
     * in rewrite through the last value; here the add's own) */
    if (A != L && !same_layout(&g->vals[A->out[0]], &g->vals[y])) return 0;
    of_gnode *dead[2] = {C, A};
    return rewrite(g, li, (int32_t)(C - g->nodes), r, &f, dead, A != L ? 2 : 1);
  }
  return 0;
}

of_status of_pass_convfuse(of_graph *g, int32_t *removed) {
  *removed = 0;
  if (g->device != OF_CPU) return OF_OK;
  /* each rewrite drops readers only of values it drops too, so the counts
   * of the values left stay right; activations first, so conv -> add ->
   * relu is taken whole before conv -> add alone */
  for (int pass = 0; pass < 2; pass++) {
    int32_t *uses = of_graph_use_counts(g);
    if (!uses) return of_fail(OF_ERR_OOM, "nn.Graph: convfuse: out of memory");
    for (int32_t i = 0; i < g->nnodes; i++) {
      int r = try_chain(g, uses, i, pass == 0);
      if (r < 0) {
        free(uses);
        return of_fail(OF_ERR_OOM, "nn.Graph: convfuse: out of memory");
      }
      *removed += r;
    }
    free(uses);
  }
  return OF_OK;
}

/* ---- the conv_fused op ---- */

of_status of_conv_fused_check(const void *attrs, int32_t size, int32_t nin) {
  const a_conv_fused *a = attrs;
  if (size != (int32_t)sizeof *a || nin < 3 || nin > 5)
    return of_fail(OF_ERR_ARG, "conv_fused: bad record");
  if (a->nsp < 1 || a->nsp > 3 || a->groups < 1 || (a->has & ~7))
    return of_fail(OF_ERR_ARG, "conv_fused: bad record (attrs.nsp, groups or has)");
  for (int32_t d = 0; d < a->nsp; d++)
    if (a->stride[d] < 1 || a->padding[d] < 0 || a->dilation[d] < 1)
      return of_fail(OF_ERR_ARG, "conv_fused: bad record (attrs.stride, padding or dilation)");
  if (a->act < ACT_NONE || a->act > ACT_CLAMP || a->has_lo < 0 || a->has_lo > 1 ||
      a->has_hi < 0 || a->has_hi > 1 || (a->act == ACT_CLAMP && !a->has_lo && !a->has_hi) ||
      isnan(a->lo) || isnan(a->hi))
    return of_fail(OF_ERR_ARG, "conv_fused: bad record (attrs.act and its bounds)");
  return OF_OK;
}

void of_conv_fused_describe(const void *attrs, char *b, size_t c) {
  const a_conv_fused *a = attrs;
  int32_t nd = a->nsp >= 1 && a->nsp <= 3 ? a->nsp : 0;
  of_catf(b, c, "nsp=%d", (int)a->nsp);
  of_cat_list(b, c, "stride", a->stride, nd);
  of_cat_list(b, c, "padding", a->padding, nd);
  if (a->groups != 1) of_catf(b, c, " groups=%lld", (long long)a->groups);
  if (a->act == ACT_RELU) of_catf(b, c, " relu");
  if (a->act == ACT_CLAMP) {
    of_catf(b, c, " clamp");
    if (a->has_lo) of_catf(b, c, " min=%g", a->lo);
    if (a->has_hi) of_catf(b, c, " max=%g", a->hi);
  }
}

static void conv_record(const a_conv_fused *f, a_conv *r) {
  memset(r, 0, sizeof *r);
  r->nsp = f->nsp;
  r->has = f->has;
  r->groups = f->groups;
  memcpy(r->stride, f->stride, sizeof r->stride);
  memcpy(r->padding, f->padding, sizeof r->padding);
  memcpy(r->dilation, f->dilation, sizeof r->dilation);
}

of_status of_conv_fused_infer(const void *attrs, int32_t nin, const of_meta *ins, of_meta *outs) {
  OF_CHECK(of_conv_fused_check(attrs, (int32_t)sizeof(a_conv_fused), nin));
  a_conv r;
  conv_record(attrs, &r);
  OF_CHECK(of_op_def(OPK_CONV)->infer(&r, 3, ins, outs));
  for (int32_t k = IN_RES; k < nin; k++) {
    const of_meta *m = &ins[k];
    if (m->ndim != outs[0].ndim || m->dtype != outs[0].dtype ||
        memcmp(m->shape, outs[0].shape, sizeof(int64_t) * (size_t)(m->ndim > 0 ? m->ndim : 0)))
      return of_fail(OF_ERR_SHAPE, "conv_fused: the %s %s %s does not match the result %s %s",
                     k == IN_RES ? "residual" : "output buffer", OF_SHAPE_STR(m), OF_DT(m),
                     OF_SHAPE_STR(&outs[0]), OF_DT(&outs[0]));
  }
  return OF_OK;
}

/* the record's stride, padding and dilation as conv takes them (NULL: not given) */
#define CONV_OPTS(a) ((a)->has & 1) ? (a)->stride : NULL, ((a)->has & 2) ? (a)->padding : NULL, \
                     ((a)->has & 4) ? (a)->dilation : NULL

/* the unfused ops, as the graph had them: conv, add (into the residual's
 * buffer when given), then the activation in place */
static of_status unfused(const a_conv_fused *a, of_tensor **ins, int32_t nin, of_tensor **out) {
  of_tensor *y = NULL, *z = NULL;
  OF_CHECK(of_conv(ins[IN_X], ins[IN_W], ins[IN_B], CONV_OPTS(a), a->nsp, a->groups, &y));
  of_status s = OF_OK;
  if (nin > IN_RES) {
    s = of_binary(OF_ADD, y, ins[IN_RES], nin > IN_INTO ? ins[IN_INTO] : NULL, &z);
    of_tensor_release(y);
    if (s != OF_OK) return s;
    y = z;
  }
  if (a->act != ACT_NONE) {
    z = NULL;
    s = a->act == ACT_RELU ? of_unary(OF_RELU, y, y, &z)
                           : of_clamp(y, a->lo, a->hi, a->has_lo, a->has_hi, y, &z);
    of_tensor_release(y);
    if (s != OF_OK) return s;
    y = z;
  }
  *out = y;
  return OF_OK;
}

of_status of_conv_fused_invoke(of_gnode *n, of_tensor **ins, void **outs) {
  OF_CHECK(of_conv_fused_check(n->attrs, n->attr_size, n->nin));
  const a_conv_fused *a = n->attrs;
  if (!ins[IN_X] || !ins[IN_W] || (n->nin > IN_RES && !ins[IN_RES]))
    return of_fail(OF_ERR_ARG, "conv_fused: the input, the weight and the residual are required");
  if (n->nin > IN_INTO && ins[IN_INTO] != ins[IN_RES])
    return of_fail(OF_ERR_ARG, "conv_fused: the output buffer must be the residual");
  of_tensor *r = NULL;
  bool done = false;
  /* a residual is summed into its own buffer only (the inplace pass gave
   * it): oneDNN's sum post-op reads the result buffer */
  if (n->nin == IN_RES || n->nin > IN_INTO) {
    of_conv_post post = {n->nin > IN_INTO ? ins[IN_INTO] : NULL, OF_DNNL_ACT_NONE, 0, 0};
    if (a->act == ACT_RELU) post.act = OF_DNNL_ACT_CLIP, post.lo = 0, post.hi = INFINITY;
    if (a->act == ACT_CLAMP) {
      post.act = OF_DNNL_ACT_CLIP;
      post.lo = a->has_lo ? (float)a->lo : -INFINITY;
      post.hi = a->has_hi ? (float)a->hi : INFINITY;
    }
    OF_CHECK(of_conv_with_post(ins[IN_X], ins[IN_W], ins[IN_B], CONV_OPTS(a), a->nsp, a->groups,
                               &post, &r, &done));
  }
  if (!done) OF_CHECK(unfused(a, ins, n->nin, &r));
  outs[0] = r;
  return OF_OK;
}
