/* device_ops.c -- the device side of op families whose CPU runners are too
 * specialised to share (matmul's operand layouts, layer_norm's fused rows):
 * shapes are checked by the CPU runner, which calls in here for device
 * tensors; the kernels come from the device-ops table. */
#include "../autograd.h"
#include "../device.h"
#include "op.h"

/* ---- matmul ---------------------------------------------------------------
 * Operands are made dense [batch, rows, cols] in their dtype; a batch dim
 * that broadcasts gets stride 0 when the whole operand is shared, else the
 * broadcast is materialised. [B, m, k] @ [k, n] folds into one gemm. */

/* t seen with the matmul shape (a 1-D a is [1, k], a 1-D b is [k, 1]) */
static void promoted(const of_tensor *t, bool vec, bool is_a, int64_t *shape, int64_t *strides,
                     int32_t *nd) {
  if (!vec) {
    *nd = t->ndim;
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    memcpy(strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
    return;
  }
  *nd = 2;
  if (is_a) {
    shape[0] = 1, strides[0] = t->shape[0] * t->strides[0];
    shape[1] = t->shape[0], strides[1] = t->strides[0];
  } else {
    shape[0] = t->shape[0], strides[0] = t->strides[0];
    shape[1] = 1, strides[1] = 1;
  }
}

/* Dense [nbt, r, c] operand (stride 0 between batches when shared), or,
 * for a shared matrix laid out column-major (a transposed view such as
 * w:t(), strides (1, ld)), the matrix itself with *trans = 1 and its
 * leading dim: the gemm reads it transposed (CUBLAS_OP_T) instead of a copy. */
static of_status operand(of_tensor *t, bool vec, bool is_a, const int64_t *bshape,
                         int32_t nbatch, of_tensor **out, int64_t *bstride, int32_t *trans,
                         int64_t *ld) {
  int64_t sh[OF_MAX_DIMS], st[OF_MAX_DIMS], esh[OF_MAX_DIMS], est[OF_MAX_DIMS];
  int32_t nd;
  promoted(t, vec, is_a, sh, st, &nd);
  int32_t own = nd - 2;
  bool shared = true;
  for (int32_t i = 0; i < nbatch; i++) {
    int32_t j = i - (nbatch - own);
    esh[i] = bshape[i];
    est[i] = j >= 0 && sh[j] == bshape[i] ? st[j] : 0;
    if (est[i] != 0 && bshape[i] > 1) shared = false;
  }
  esh[nbatch] = sh[nd - 2], est[nbatch] = st[nd - 2];
  esh[nbatch + 1] = sh[nd - 1], est[nbatch + 1] = st[nd - 1];
  *trans = 0;
  *ld = esh[nbatch + 1];
  if (shared && esh[nbatch] > 1 && esh[nbatch + 1] > 1 && est[nbatch] == 1 &&
      est[nbatch + 1] >= esh[nbatch]) {
    of_tensor *v = of_tensor_alias(t, esh + nbatch, est + nbatch, 2, t->offset);
    if (!v) return OF_ERR_OOM;
    *out = v;
    *bstride = 0;
    *trans = 1;
    *ld = est[nbatch + 1];
    return OF_OK;
  }
  of_tensor *v = shared ? of_tensor_alias(t, esh + nbatch, est + nbatch, 2, t->offset)
                        : of_tensor_alias(t, esh, est, nbatch + 2, t->offset);
  if (!v) return OF_ERR_OOM;
  of_status s = of_dense(v, t->dtype, out);
  of_tensor_release(v);
  *bstride = shared ? 0 : esh[nbatch] * esh[nbatch + 1];
  return s;
}

of_status of_device_matmul(const char *op, of_tensor *a, of_tensor *b, of_tensor *c,
                           double beta, double alpha, int32_t a_vec, int32_t b_vec,
                           of_tensor *into, of_tensor **out) {
  OF_ROUTE(op, dev, o, gemm, a, b, c, into);
  if (!of_dtype_is_floating(a->dtype))
    return of_fail(OF_ERR_DTYPE, "%s: only floating dtypes are implemented on %s, got %s", op,
                   OF_DEV_STR(dev), OF_DT(a));
  int64_t sa[OF_MAX_DIMS], ta[OF_MAX_DIMS], sb[OF_MAX_DIMS], tb[OF_MAX_DIMS];
  int32_t na, nb;
  promoted(a, a_vec, true, sa, ta, &na);
  promoted(b, b_vec, false, sb, tb, &nb);
  int64_t m = sa[na - 2], k = sa[na - 1], n = sb[nb - 1];
  int32_t ba = na - 2, bbn = nb - 2, nbatch = ba > bbn ? ba : bbn;
  int64_t bshape[OF_MAX_DIMS], rshape[OF_MAX_DIMS + 2];
  for (int32_t i = 0; i < nbatch; i++) {
    int64_t da = i < nbatch - ba ? 1 : sa[i - (nbatch - ba)];
    int64_t db = i < nbatch - bbn ? 1 : sb[i - (nbatch - bbn)];
    bshape[i] = da == 1 ? db : da;
  }
  int32_t rnd = 0;
  for (int32_t i = 0; i < nbatch; i++) rshape[rnd++] = bshape[i];
  if (!a_vec) rshape[rnd++] = m;
  if (!b_vec) rshape[rnd++] = n;
  int64_t nbt = of_shape_numel(bshape, nbatch);

  of_tensor *A = NULL, *B = NULL, *res = NULL, *view = NULL, *dest = NULL;
  int64_t strA = 0, strB = 0, lda = k, ldb = n;
  int32_t transA = 0, transB = 0;
  of_status st = operand(a, a_vec, true, bshape, nbatch, &A, &strA, &transA, &lda);
  if (st == OF_OK) st = operand(b, b_vec, false, bshape, nbatch, &B, &strB, &transB, &ldb);
  if (st == OF_OK && into) st = of_prepare_out_on(op, into, rshape, rnd, a->dtype, dev, &dest);
  if (st == OF_OK) st = of_tensor_new(rshape, rnd, a->dtype, dev, &res);
  if (st != OF_OK) goto done;
  if (c && beta != 0) {
    if ((st = of_copy_data(res, c)) != OF_OK) goto done;
  }
  int64_t M = m, batch = nbt;
  if (strB == 0 && strA != 0) {   /* [B, m, k] @ shared [k, n]: one tall gemm */
    M = m * nbt;
    batch = 1;
  }
  if (res->numel > 0) {
    if (k == 0) {
      if (!(c && beta != 0)) st = o->fill(res, 0);
      else if (beta != 1) {
        of_tensor *r2;
        st = of_binary_scalar(OF_MUL, res, beta, 0, res, &r2);
        if (st == OF_OK) of_tensor_release(r2);
      }
    } else {
      st = o->gemm(transA, transB, M, n, k, alpha, A, lda, strA, B, ldb, strB, c ? beta : 0,
                   res, n, m * n, batch);
    }
    if (st != OF_OK) goto done;
  }
  if (dest) {
    st = of_copy_data(dest, res);
    if (st != OF_OK) goto done;
    view = dest;
    of_tensor_retain(view);
  } else {
    view = res;
    of_tensor_retain(view);
  }
done:
  of_tensor_release(A);
  of_tensor_release(B);
  of_tensor_release(res);
  of_tensor_release(dest);
  if (st != OF_OK) return st;
  *out = view;
  return OF_OK;
}

/* ---- layer_norm and rms_norm ---------------------------------------------
 * Rows [R, M] (the normalized dims are the last ones); mean (layer_norm
 * only) and rstd [R] are saved for the fused backward, in the kernels'
 * accumulation dtype (float64 for float64 input, else float32: a float64
 * norm keeps its precision). The node keeps the op's a_norm (groups: the
 * number of normalized dims, >= 1, so a weight's meta has ndim >= 1 and an
 * absent weight's is zeroed). Saved: x, weight, [mean,] rstd. */
static of_status norm_dev_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const a_norm *a = OF_NODE_ATTRS(a_norm, n);
  const bool rms = n->attr_op == OPK_RMS_NORM;
  const char *op = rms ? "rms_norm_backward" : "layer_norm_backward";
  const of_meta *xm = &n->in_meta[0];
  const int32_t k_norm = (int32_t)a->groups, nsv = rms ? 3 : 4;
  const bool has_w = n->in_meta[1].ndim > 0;
  of_tensor *sv[4] = {NULL, NULL, NULL, NULL}, *gd = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
  of_status st = OF_OK;
  for (int32_t k = 0; k < nsv && st == OF_OK; k++)
    if (k != 1 || has_w) st = of_node_saved(n, k, &sv[k]);
  of_tensor *x = sv[0], *w = sv[1];
  int64_t M = of_shape_numel(xm->shape + (xm->ndim - k_norm), k_norm);
  int64_t R = M && x ? x->numel / M : 0;
  of_device dev = of_dev(x);
  const of_device_ops *o = st == OF_OK ? of_device_ops_for(op, dev) : NULL;
  if (st == OF_OK && !o) st = OF_ERR_DEVICE;
  if (st == OF_OK) st = of_dense(g[0], x->dtype, &gd);
  if (st == OF_OK && n->needs[0]) st = of_tensor_new(x->shape, x->ndim, x->dtype, dev, &gx);
  if (st == OF_OK && n->needs[1] && w)
    st = of_tensor_new(n->in_meta[1].shape, n->in_meta[1].ndim, n->in_meta[1].dtype, dev, &gw);
  if (st == OF_OK && !rms && n->needs[2])
    st = of_tensor_new(n->in_meta[2].shape, n->in_meta[2].ndim, n->in_meta[2].dtype, dev, &gb);
  if (st == OF_OK) {
    of_device_last_op = op;
    st = rms ? o->rms_norm_back_rows(gd, x, w, sv[2], R, M, gx, gw)
             : o->layer_norm_back_rows(gd, x, w, sv[2], sv[3], R, M, gx, gw, gb);
  }
  if (st == OF_OK) {
    gi[0] = gx, gi[1] = gw;
    if (!rms) gi[2] = gb;
    gx = gw = gb = NULL;
  }
  of_tensor *rel[8] = {sv[0], sv[1], sv[2], sv[3], gd, gx, gw, gb};
  for (int i = 0; i < 8; i++) of_tensor_release(rel[i]);
  return st;
}
static const of_grad_def ln_grad = {"NativeLayerNormBackward", norm_dev_backward};
static const of_grad_def rms_dev_grad = {"RmsNormBackward", norm_dev_backward};

/* b NULL and rms: rms_norm's rows, else layer_norm's */
static of_status device_norm(const of_device_ops *o, of_device dev, bool rms, of_tensor *x,
                             int32_t k, of_tensor *w, of_tensor *b, double eps, of_tensor **out) {
  int64_t M = of_shape_numel(x->shape + (x->ndim - k), k), R = M ? x->numel / M : 0;
  of_tensor *xd = NULL, *wd = NULL, *bd = NULL, *y = NULL, *mean = NULL, *rstd = NULL;
  /* weight and bias are used in x's dtype (as the CPU's compute dtype) */
  of_status st = of_dense(x, x->dtype, &xd);
  if (st == OF_OK) st = of_dense(w, x->dtype, &wd);
  if (st == OF_OK) st = of_dense(b, x->dtype, &bd);
  if (st == OF_OK) st = of_tensor_new(x->shape, x->ndim, x->dtype, dev, &y);
  const of_dtype sdt = x->dtype == OF_FLOAT64 ? OF_FLOAT64 : OF_FLOAT32;
  if (st == OF_OK && !rms) st = of_tensor_new(&R, 1, sdt, dev, &mean);
  if (st == OF_OK) st = of_tensor_new(&R, 1, sdt, dev, &rstd);
  if (st == OF_OK)
    st = rms ? o->rms_norm_rows(xd, wd, R, M, eps, y, rstd)
             : o->layer_norm_rows(xd, wd, bd, R, M, eps, y, mean, rstd);
  of_tensor *ins[3] = {x, w, b};
  if (st == OF_OK && of_grad_needed(ins, rms ? 2 : 3)) {
    of_node *n;
    st = of_record(rms ? &rms_dev_grad : &ln_grad, ins, rms ? 2 : 3, &y, 1, &n);
    if (st == OF_OK) {
      a_norm a;
      memset(&a, 0, sizeof a);
      a.eps = eps;
      a.groups = k;
      OF_NODE_KEEP(n, rms ? OPK_RMS_NORM : OPK_LAYER_NORM, a);
      of_node_save(n, 0, xd);
      of_node_save(n, 1, wd);
      if (!rms) of_node_save(n, 2, mean);
      of_node_save(n, rms ? 2 : 3, rstd);
    }
  }
  of_tensor *rel[5] = {xd, wd, bd, mean, rstd};
  for (int i = 0; i < 5; i++) of_tensor_release(rel[i]);
  if (st != OF_OK) {
    of_tensor_release(y);
    return st;
  }
  *out = y;
  return OF_OK;
}

of_status of_device_layer_norm(of_tensor *x, int32_t k, of_tensor *w, of_tensor *b,
                               double eps, of_tensor **out) {
  OF_ROUTE("layer_norm", dev, o, layer_norm_rows, x, w, b);
  return device_norm(o, dev, false, x, k, w, b, eps, out);
}

of_status of_device_rms_norm(of_tensor *x, int32_t k, of_tensor *w, double eps,
                             of_tensor **out) {
  OF_ROUTE("rms_norm", dev, o, rms_norm_rows, x, w);
  return device_norm(o, dev, true, x, k, w, NULL, eps, out);
}
