/* rules.c -- helpers shared by the backward rules of the op families:
 * summing a broadcast grad down to an input's shape, in-place results under
 * autograd, and the expression scope (of_s_*) rules are written with. */
#include "../autograd.h"
#include <stdlib.h>


of_status of_sum_to(of_tensor *g, const of_meta *m, of_tensor **out) {
  int32_t dims[OF_MAX_DIMS], nd = 0, lead = g->ndim - m->ndim;
  if (lead < 0) {
    char b[96];
    return of_fail(OF_ERR_SHAPE, "sum_to: grad %s has fewer dims than %s", OF_SHAPE_STR(g),
                   of_shape_str(m->shape, m->ndim, b, 96));
  }
  for (int32_t d = 0; d < g->ndim; d++)
    if (d < lead || (m->shape[d - lead] == 1 && g->shape[d] != 1)) dims[nd++] = d;
  of_tensor *s;
  if (nd == 0) {
    of_tensor_retain(g);
    s = g;
  } else {
    OF_CHECK(of_reduce(OF_RED_SUM, g, dims, nd, 1, 0, -1, &s));
  }
  of_tensor *r = s;
  of_status st = OF_OK;
  if (s->ndim != m->ndim) {
    st = of_reshape(s, m->shape, m->ndim, &r);
    of_tensor_release(s);
    if (st != OF_OK) return st;
  }
  if (r->dtype != m->dtype && of_dtype_is_floating(m->dtype)) {
    st = of_to_dtype(r, m->dtype, out);
    of_tensor_release(r);
    return st;
  }
  *out = r;
  return OF_OK;
}

of_status of_check_inplace(const char *op, of_tensor *into) {
  OF_CHECK(of_check_overlap(op, into));
  if (!of_is_grad_enabled() || of_inplace_leaf_ok()) return OF_OK;
  if (into->requires_grad && !into->grad_fn)
    return of_fail(OF_ERR_STATE, "%s: a leaf tensor that requires grad (shape %s) is being used "
                   "in an in-place operation; wrap it in flow.no_grad or use an out-of-place op",
                   op, OF_SHAPE_STR(into));
  const of_tensor *base = into->view_base;
  while (base && base->view_base) base = base->view_base;
  if (base && base->requires_grad && !base->grad_fn)
    return of_fail(OF_ERR_STATE, "%s: a view (shape %s) of a leaf tensor that requires grad "
                   "(shape %s) is being used in an in-place operation; wrap it in flow.no_grad "
                   "or use an out-of-place op", op, OF_SHAPE_STR(into), OF_SHAPE_STR(base));
  if (into->view_base && (into->requires_grad || into->view_base->requires_grad))
    return of_fail(OF_ERR_STATE, "%s: in-place operation on a view (shape %s) of a tensor that "
                   "requires grad is not supported; clone() the view or use an out-of-place "
                   "op", op, OF_SHAPE_STR(into));
  return OF_OK;
}

of_status of_assign_result(of_tensor *into, of_tensor *result) {
  OF_CHECK(of_copy_data(into, result));
  if (into->grad_fn) of_node_release(into->grad_fn);
  into->grad_fn = result->grad_fn;
  into->output_nr = result->output_nr;
  into->requires_grad = result->requires_grad;
  if (into->grad_fn) __atomic_add_fetch(&into->grad_fn->refcount, 1, __ATOMIC_RELAXED);
  return OF_OK;
}

/* ---- expression scope for backward rules ---- */

of_tensor *of_s_keep(of_scope *s, of_status st, of_tensor *t) {
  if (st != OF_OK) {
    if (s->st == OF_OK) s->st = st;
    return NULL;
  }
  if (s->n == OF_SCOPE_MAX) {
    of_tensor_release(t);
    s->st = of_fail(OF_ERR_STATE, "backward rule: scope overflow");
    return NULL;
  }
  s->t[s->n++] = t;
  return t;
}

of_tensor *of_s_unary(of_scope *s, of_unary_op op, of_tensor *x) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_unary(op, x, NULL, &r);
  return of_s_keep(s, st, r);
}

of_tensor *of_s_bin(of_scope *s, of_binary_op op, of_tensor *x, of_tensor *y) {
  if (s->st != OF_OK || !x || !y) return NULL;
  of_tensor *r = NULL;
  of_status st = of_binary(op, x, y, NULL, &r);
  return of_s_keep(s, st, r);
}

of_tensor *of_s_bins(of_scope *s, of_binary_op op, of_tensor *x, double v) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_binary_scalar(op, x, v, 0, NULL, &r);
  return of_s_keep(s, st, r);
}

of_tensor *of_s_sbin(of_scope *s, of_binary_op op, double v, of_tensor *x) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_binary_scalar(op, x, v, 1, NULL, &r);
  return of_s_keep(s, st, r);
}

of_tensor *of_s_matmul(of_scope *s, of_tensor *x, of_tensor *y) {
  if (s->st != OF_OK || !x || !y) return NULL;
  of_tensor *r = NULL;
  of_status st = of_matmul(x, y, &r);
  return of_s_keep(s, st, r);
}

of_tensor *of_s_mT(of_scope *s, of_tensor *x) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_transpose(x, -1, -2, &r);
  return of_s_keep(s, st, r);
}

of_tensor *of_s_saved(of_scope *s, of_node *n, int32_t slot) {
  if (s->st != OF_OK) return NULL;
  of_tensor *r = NULL;
  of_status st = of_node_saved(n, slot, &r);
  return of_s_keep(s, st, r);
}

of_status of_s_end(of_scope *s, of_tensor *result, of_tensor **out) {
  if (s->st == OF_OK && result) {
    of_tensor_retain(result);
    *out = result;
  }
  for (int32_t i = 0; i < s->n; i++) of_tensor_release(s->t[i]);
  s->n = 0;
  return s->st;
}
