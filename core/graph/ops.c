/* ops.c -- the graph compiler's op table: the rows of the op families
 * (core/ops, generated from ops.def) and the graph-only ops (alias,
 * backward, fused elementwise, relu_max_pool, conv_fused). A public op's run function
 * takes the node's record (of_oprec); graph-only ops take the node. */
#include "ops.h"
#include "fused.h"
#include "../ops/family.h"
#include <pthread.h>
#include <stdlib.h>

/* ---- graph-only ops ---- */
static of_status inv_alias(of_gnode *n, of_tensor **ins, void **outs) {
  const a_alias *a = (const a_alias *)n->attrs;
  OF_NEED(NDIM_OK(a->ndim), "ndim");
  of_tensor *b = ins[0];
  int64_t off = b->offset + a->rel_offset, hi = off, lo = off;
  for (int32_t i = 0; i < a->ndim; i++) {
    OF_NEED(a->shape[i] >= 0, "shape");
    if (a->shape[i] == 0) { hi = lo = off; break; }
    /* a loaded record's numbers may be anything: overflow is an error */
    int64_t ext;
    bool over = __builtin_mul_overflow(a->shape[i] - 1, a->strides[i], &ext) ||
                (ext > 0 ? __builtin_add_overflow(hi, ext, &hi) : __builtin_add_overflow(lo, ext, &lo));
    OF_NEED(!over, "shape and strides");
  }
  int64_t cap = b->storage->nbytes / of_dtype_size(b->dtype);
  if (lo < 0 || (of_shape_numel(a->shape, a->ndim) > 0 && hi >= cap))
    return of_fail(OF_ERR_INDEX, "nn.Graph: alias reaches outside its storage (%lld..%lld of "
                   "%lld elements)", (long long)lo, (long long)hi, (long long)cap);
  of_tensor *t = of_tensor_alias(b, a->shape, a->strides, a->ndim, off);
  if (!t) return OF_ERR_OOM;
  outs[0] = t;
  return OF_OK;
}
static void d_alias(const void *p, char *b, size_t c) {
  const a_alias *a = p;
  int32_t nd = NDIM_OK(a->ndim) ? a->ndim : 0;
  of_cat_list(b, c, "shape", a->shape, nd);
  of_cat_list(b, c, "strides", a->strides, nd);
  of_catf(b, c, " +%lld", (long long)a->rel_offset);
}
static void d_backward(const void *p, char *b, size_t c) {
  const a_backward *a = p;
  char name[49];
  memcpy(name, a->name, 48);
  name[48] = 0;
  of_catf(b, c, "%s", name);
}

/* A public op's node: its family's run function on the node's record. */
static of_status invoke_public(of_gnode *n, of_tensor **ins, void **outs) {
  const of_oprec r = {n->op, n->nin, n->attrs, n->attr_size};
  return of_op_schema_row(n->op)->impl->run(&r, ins, outs);
}

static const struct {
  int32_t attr_size;
  of_invoke_fn invoke;
  of_status (*check)(const void *attrs, int32_t size, int32_t nin);
  void (*describe)(const void *attrs, char *buf, size_t cap);
  /* the results from the recorded inputs, as of_opimpl.infer; NULL: none */
  of_status (*infer)(const void *attrs, int32_t nin, const of_meta *ins, of_meta *outs);
} graph_rows[OPK_COUNT] = {
  [OF_OPK_ALIAS] = {sizeof(a_alias), inv_alias, NULL, d_alias, NULL},
  [OF_OPK_BACKWARD] = {sizeof(a_backward), of_backward_invoke, NULL, d_backward, NULL},
  [OF_OPK_FUSED] = {sizeof(fused_prog), of_fused_invoke, of_fused_check, of_fused_describe, NULL},
  [OPK_RELU_MAX_POOL] = {sizeof(a_relu_pool), of_relu_pool_invoke, of_relu_pool_check, of_relu_pool_describe,
                         of_relu_pool_infer},
  [OPK_RELU_MAX_POOL_BACKWARD] = {sizeof(a_relu_pool), of_relu_pool_invoke, of_relu_pool_check,
                                  of_relu_pool_describe, of_relu_pool_backward_infer},
  [OPK_CONV_FUSED] = {sizeof(a_conv_fused), of_conv_fused_invoke, of_conv_fused_check,
                      of_conv_fused_describe, of_conv_fused_infer},
};

static of_opdef op_table[OPK_COUNT];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_table(void) {
  for (int32_t op = 0; op < OPK_COUNT; op++) {
    const of_opschema_row *s = of_op_schema_row(op);
    of_opdef *d = &op_table[op];
    d->name = s->name;
    d->attr_size = s->flags & OF_OPF_VARATTR ? -1 : s->attr_size;
    d->min_in = s->min_in;
    d->max_in = s->max_in;
    d->nreal = s->nreal;
    d->flags = s->flags;
    if (s->impl) {
      d->invoke = invoke_public;
      d->mutates = s->impl->mutates;
      d->check = s->impl->check;
      d->describe = s->impl->describe;
      d->infer = s->impl->infer;
    } else {
      d->attr_size = graph_rows[op].attr_size;
      d->invoke = graph_rows[op].invoke;
      d->check = graph_rows[op].check;
      d->describe = graph_rows[op].describe;
      d->infer = graph_rows[op].infer;
    }
  }
}

const of_opdef *of_op_def(int32_t op) {
  if (op < 0 || op >= OPK_COUNT) return NULL;
  pthread_once(&table_once, build_table);
  return op_table[op].name ? &op_table[op] : NULL;
}
int32_t of_op_count(void) { return OPK_COUNT; }
int32_t of_op_find(const char *name) {
  for (int32_t i = 0; i < OPK_COUNT; i++) {
    const of_opdef *d = of_op_def(i);
    if (d && strcmp(d->name, name) == 0) return i;
  }
  return -1;
}

bool of_node_pure(const of_graph *g, const of_gnode *n) {
  const of_opdef *d = of_op_def(n->op);
  if (!d || (d->flags & (OF_OPF_RANDOM | OF_OPF_OPAQUE | OF_OPF_EMPTY))) return false;
  if (n->nmut || (n->flags & OF_GN_CAPTURE)) return false;
  for (int32_t j = 0; j < n->nreal; j++)
    if (n->out[j] >= 0 && g->vals[n->out[j]].same != n->out[j]) return false;   /* in place */
  return true;
}
