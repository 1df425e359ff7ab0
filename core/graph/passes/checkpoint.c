/* checkpoint.c -- activation checkpointing by recomputation.
 *
 * Forward nodes traced inside a checkpointed module call carry that call's
 * segment id (node->scope, see of_trace_set_scope). A backward node that
 * reads a value made inside a segment -- an activation, or the autograd
 * handle of an opaque backward -- reads a recomputed copy instead: the
 * chain of segment nodes that makes it is cloned right before that
 * backward node, from the segment's inputs, parameters and whatever cannot
 * be recomputed. The originals then die at the end of the forward pass (the
 * memory plan frees them after their last forward reader), so a segment's
 * activations live only while its backward runs.
 *
 * Not recomputed (their results are kept, as without checkpointing): random
 * ops (a dropout mask must be the same), ops that write into a tensor, and
 * ops whose inputs are written between the forward and the recomputation.
 * Training-mode batch/instance norm is recomputed without its running
 * statistics (which it would update twice); the output and the autograd
 * node are the same, as both come from the batch statistics. */
#include "../ops.h"
#include <stdlib.h>

typedef struct {
  of_graph *g;
  int32_t *clone;      /* value -> its recomputed copy, -1 */
  int8_t *ok;          /* node: 0 unknown, 1 recompute, 2 keep */
  int32_t at;          /* node index the copies go before */
  int32_t *made;       /* new node ids, in creation order */
  int32_t *made_at;    /* the node each was made for */
  int32_t nmade, cap;
  int32_t added;
} ck;

static bool norm_stats(const of_gnode *n) {
  return (n->op == OPK_BATCH_NORM || n->op == OPK_INSTANCE_NORM) && n->nmut == 2 &&
         n->nin == 5;
}

static bool recomputable(ck *c, int32_t ni) {
  if (c->ok[ni]) return c->ok[ni] == 1;
  of_graph *g = c->g;
  const of_gnode *n = &g->nodes[ni];
  const of_opdef *d = of_op_def(n->op);
  bool yes = n->scope > 0 && !(n->flags & OF_GN_BACKWARD) && !n->dead && d &&
             !(d->flags & (OF_OPF_RANDOM | OF_OPF_EMPTY)) && n->op != OF_OPK_BACKWARD &&
             (n->nmut == 0 || norm_stats(n));
  for (int32_t k = 0; yes && k < n->nin; k++) {
    int32_t v = n->in[k];
    if (v < 0 || (norm_stats(n) && (k == 1 || k == 2))) continue;
    if (g->vals[v].kind == OF_GV_HANDLE) { yes = false; break; }
    if (of_graph_written_between(g, g->vals[v].root, ni, c->at)) yes = false;
  }
  c->ok[ni] = yes ? 1 : 2;
  return yes;
}

static int32_t copy_value(of_graph *g, int32_t v) {
  int32_t id = of_graph_add_value(g, OF_GV_INTERNAL, NULL);
  if (id < 0) return -1;
  of_gval *dst = &g->vals[id];
  const of_gval *src = &g->vals[v];
  int8_t kind = src->kind;
  *dst = *src;
  dst->kind = kind;
  dst->name = NULL;
  dst->note = NULL;
  dst->ext = NULL;
  dst->sid = 0;
  dst->root = dst->same = id;
  dst->producer = -1;   /* set again when the graph is compacted */
  return id;
}

/* The recomputed copy of value v (v itself when it is not recomputed).
 * Only nodes of segment seg are recomputed: the values a segment gets from
 * outside, other segments included, are its checkpoints and are kept. */
static int32_t need(ck *c, int32_t v, int32_t seg) {
  if (v < 0) return v;
  if (c->clone[v] >= 0) return c->clone[v];
  of_graph *g = c->g;
  int32_t p = g->vals[v].producer;
  if (p < 0 || g->vals[v].same != v || !recomputable(c, p)) return v;
  if (seg == 0) seg = g->nodes[p].scope;
  if (g->nodes[p].scope != seg) return v;
  const of_gnode *n = &g->nodes[p];
  int32_t nin = n->nin, ins[64];
  int32_t *in = nin <= 64 ? ins : malloc(sizeof *in * (size_t)nin);
  if (!in) return -2;
  bool stats = norm_stats(n);
  for (int32_t k = 0; k < nin; k++) {
    int32_t u = g->nodes[p].in[k];
    in[k] = (stats && (k == 1 || k == 2)) ? -1 : need(c, u, seg);
    if (in[k] == -2) { if (in != ins) free(in); return -2; }
  }
  n = &g->nodes[p];
  int32_t ni = of_graph_add_node(g, n->op, n->attrs, n->attr_size, in, nin, n->nreal,
                                 stats ? 0 : n->nmut);
  if (in != ins) free(in);
  if (ni < 0) return -2;
  n = &g->nodes[p];
  of_gnode *m = &g->nodes[ni];
  m->flags = (n->flags & OF_GN_CAPTURE) | OF_GN_RECOMPUTE;
  m->needs = n->needs;
  m->keep_in = n->keep_in;
  m->keep_out = n->keep_out;
  m->handle_nr = n->handle_nr;
  for (int32_t j = 0; j < n->nreal; j++) {
    int32_t o = g->nodes[p].out[j];
    if (o < 0) continue;
    int32_t cv = copy_value(g, o);
    if (cv < 0) return -2;
    g->nodes[ni].out[j] = cv;
    c->clone[o] = cv;
  }
  n = &g->nodes[p];
  if (n->flags & OF_GN_CAPTURE) {
    int32_t h = n->out[n->nout - 1];
    int32_t ch = h >= 0 ? copy_value(g, h) : -1;
    if (h >= 0 && ch < 0) return -2;
    m = &g->nodes[ni];
    m->out[m->nout++] = ch;
    if (h >= 0) c->clone[h] = ch;
  }
  /* views keep pointing at their (recomputed) base */
  n = &g->nodes[p];
  for (int32_t j = 0; j < n->nreal; j++) {
    int32_t o = n->out[j];
    if (o < 0) continue;
    int32_t r = g->vals[o].root;
    if (r != o) g->vals[c->clone[o]].root = c->clone[r] >= 0 ? c->clone[r] : r;
  }
  if (c->nmade == c->cap) {
    int32_t cap = c->cap ? c->cap * 2 : 64;
    int32_t *a = realloc(c->made, sizeof *a * (size_t)cap);
    int32_t *b = a ? realloc(c->made_at, sizeof *b * (size_t)cap) : NULL;
    if (a) c->made = a;
    if (!b) return -2;
    c->made_at = b;
    c->cap = cap;
  }
  c->made[c->nmade] = ni;
  c->made_at[c->nmade++] = c->at;
  c->added++;
  return c->clone[v];
}

of_status of_pass_checkpoint(of_graph *g, int32_t *removed) {
  *removed = 0;
  int32_t nn = g->nnodes;
  bool any = false;
  for (int32_t i = 0; i < nn && !any; i++) any = g->nodes[i].scope > 0 && !g->nodes[i].dead;
  if (!any) return OF_OK;
  ck c;
  memset(&c, 0, sizeof c);
  c.g = g;
  int32_t cap_vals = g->nvals * 2 + 64;
  c.clone = malloc(sizeof *c.clone * (size_t)cap_vals);
  c.ok = calloc((size_t)nn + 1, 1);
  if (!c.clone || !c.ok) {
    free(c.clone); free(c.ok);
    return of_fail(OF_ERR_OOM, "nn.Graph: checkpoint: out of memory");
  }
  for (int32_t v = 0; v < cap_vals; v++) c.clone[v] = -1;
  of_status st = OF_OK;
  for (int32_t i = 0; i < nn && st == OF_OK; i++) {
    if (g->nodes[i].dead || !(g->nodes[i].flags & OF_GN_BACKWARD)) continue;
    c.at = i;
    for (int32_t k = 0; k < g->nodes[i].nin && st == OF_OK; k++) {
      int32_t v = g->nodes[i].in[k];
      if (v < 0 || g->vals[v].producer < 0) continue;
      if (g->nvals + 4 * nn >= cap_vals) {   /* room for the copies of one chain */
        int32_t ncap = cap_vals * 2 + 4 * nn;
        int32_t *nc = realloc(c.clone, sizeof *nc * (size_t)ncap);
        if (!nc) { st = of_fail(OF_ERR_OOM, "nn.Graph: checkpoint: out of memory"); break; }
        for (int32_t x = cap_vals; x < ncap; x++) nc[x] = -1;
        c.clone = nc;
        cap_vals = ncap;
      }
      int32_t nv = need(&c, v, 0);
      if (nv == -2) { st = of_fail(OF_ERR_OOM, "nn.Graph: checkpoint: out of memory"); break; }
      g->nodes[i].in[k] = nv;
    }
  }
  if (st == OF_OK && c.nmade) {
    /* the copies go right before the backward node they were made for */
    int32_t total = g->nnodes;
    of_gnode *nodes = malloc(sizeof *nodes * (size_t)total);
    if (!nodes) {
      st = of_fail(OF_ERR_OOM, "nn.Graph: checkpoint: out of memory");
    } else {
      int32_t k = 0, m = 0;
      for (int32_t i = 0; i < nn; i++) {
        while (m < c.nmade && c.made_at[m] == i) nodes[k++] = g->nodes[c.made[m++]];
        nodes[k++] = g->nodes[i];
      }
      memcpy(g->nodes, nodes, sizeof *nodes * (size_t)total);
      free(nodes);
    }
  }
  *removed = c.added;   /* reported as nodes recomputed */
  free(c.clone); free(c.ok); free(c.made); free(c.made_at);
  return st;
}
