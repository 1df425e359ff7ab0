/* views.c -- view ops (share storage), copy, fill, contiguous, dtype casts. */
#include "../autograd.h"
#include "../device.h"
#include <stdlib.h>
#include "family.h"

static of_status alias_out(of_tensor *t, const int64_t *shape, const int64_t *strides,
                           int32_t ndim, int64_t offset, of_tensor **out) {
  of_tensor *v = of_tensor_alias(t, shape, strides, ndim, offset);
  if (!v) return OF_ERR_OOM;
  *out = v;
  return OF_OK;
}

/* Strides for viewing t as `shape` without a copy, or false (PyTorch's
 * computeStride: each run of merged dims must be contiguous in itself). */
static bool view_strides(const of_tensor *t, const int64_t *shape, int32_t ndim,
                         int64_t *strides) {
  if (t->numel == 0 || t->ndim == 0) {
    of_contiguous_strides(shape, ndim, strides);
    return true;
  }
  int32_t view_d = ndim - 1;
  int64_t base = t->strides[t->ndim - 1], chunk = 1, tensor_numel = 1;
  for (int32_t d = t->ndim - 1; d >= 0; d--) {
    tensor_numel *= t->shape[d];
    if (d == 0 || (t->shape[d - 1] != 1 && t->strides[d - 1] != tensor_numel * base)) {
      while (view_d >= 0 && (chunk < tensor_numel || shape[view_d] == 1)) {
        strides[view_d] = chunk * base;
        chunk *= shape[view_d];
        view_d--;
      }
      if (chunk != tensor_numel) return false;
      if (d > 0) {
        base = t->strides[d - 1];
        tensor_numel = 1;
        chunk = 1;
      }
    }
  }
  return view_d == -1;
}

/* Resolves one -1 in a requested shape against the input's numel (from its
 * shape alone: a loaded graph's view / reshape node is checked with it too). */
static of_status infer_shape_of(const char *op, const int64_t *tshape, int32_t tndim,
                                const int64_t *shape, int32_t ndim, int64_t *res) {
  int64_t numel = of_shape_numel(tshape, tndim);
  if (ndim > OF_MAX_DIMS)
    return of_fail(OF_ERR_SHAPE, "%s: %d dims given, at most %d", op, (int)ndim, OF_MAX_DIMS);
  int32_t infer = -1;
  int64_t known = 1;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] == -1) {
      if (infer >= 0) return of_fail(OF_ERR_SHAPE, "%s: only one dimension can be -1", op);
      infer = i;
    } else if (shape[i] < 0) {
      return of_fail(OF_ERR_SHAPE, "%s: invalid size %lld", op, (long long)shape[i]);
    } else if (!of_mul_ok(known, shape[i], &known)) {
      known = INT64_MAX;   /* too large to match any tensor: refused below */
    }
    res[i] = shape[i];
  }
  if (infer >= 0 && known > 0 && numel % known == 0) res[infer] = numel / known;
  if (of_shape_numel(res, ndim) != numel || (infer >= 0 && known == 0)) {
    char b[96], bt[96];
    return of_fail(OF_ERR_SHAPE, "%s: shape %s is invalid for input of size %lld (shape %s)",
                   op, of_shape_str(shape, ndim, b, 96), (long long)numel,
                   of_shape_str(tshape, tndim, bt, 96));
  }
  return OF_OK;
}
static of_status infer_shape(const char *op, const of_tensor *t, const int64_t *shape,
                             int32_t ndim, int64_t *res) {
  return infer_shape_of(op, t->shape, t->ndim, shape, ndim, res);
}

static of_status view_impl(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out) {
  int64_t res[OF_MAX_DIMS], strides[OF_MAX_DIMS];
  OF_CHECK(infer_shape("view", t, shape, ndim, res));
  if (!view_strides(t, res, ndim, strides)) {
    char b[96];
    return of_fail(OF_ERR_SHAPE,
                   "view: shape %s is not compatible with the input's size and strides "
                   "(shape %s, non-contiguous); use reshape or contiguous() first",
                   of_shape_str(res, ndim, b, 96), OF_SHAPE_STR(t));
  }
  return alias_out(t, res, strides, ndim, t->offset, out);
}

static of_status reshape_impl(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out) {
  int64_t res[OF_MAX_DIMS], strides[OF_MAX_DIMS];
  OF_CHECK(infer_shape("reshape", t, shape, ndim, res));
  if (view_strides(t, res, ndim, strides)) return alias_out(t, res, strides, ndim, t->offset, out);
  of_tensor *c;
  OF_CHECK(of_clone_data(t, &c));
  of_status st = view_impl(c, res, ndim, out);
  of_tensor_release(c);
  return st;
}

/* as_strided's check of the view against a storage of cap elements and its
 * result (the given shape, the input's dtype): the body and
 * infer_as_strided, which does not know the storage's extent (an input
 * may view a larger storage than its shape spans) and so checks only
 * that the view reaches no element before the storage's start and that
 * its arithmetic does not overflow; the extent is checked as it runs */
static of_status as_strided_plan(const of_meta *t, const int64_t *shape, const int64_t *strides,
                                 int32_t ndim, int64_t offset, int64_t cap, of_meta *res) {
  OF_CHECK(of_check_view("as_strided", shape, strides, ndim, offset, cap));
  res->ndim = ndim;
  memcpy(res->shape, shape, sizeof(int64_t) * (size_t)ndim);
  res->dtype = t->dtype;
  return OF_OK;
}

static of_status as_strided_body(of_tensor *t, const int64_t *shape, const int64_t *strides,
                             int32_t ndim, int64_t offset, of_tensor **out) {
  if (of_grad_needed(&t, 1))
    return of_fail(OF_ERR_STATE, "as_strided: not differentiable; detach() the input %s first",
                   OF_SHAPE_STR(t));
  int64_t cap = t->storage->nbytes / of_dtype_size(t->dtype);
  of_meta tm = of_meta_of(t), rm;
  OF_CHECK(as_strided_plan(&tm, shape, strides, ndim, offset, cap, &rm));
  return alias_out(t, rm.shape, strides, rm.ndim, offset, out);
}

/* transpose's and permute's source dim for each result dim, from the input's
 * shape alone (a loaded graph's node is checked with the same) */
static of_status transpose_order(int32_t ndim, int32_t d0, int32_t d1, int32_t *src) {
  OF_CHECK(of_norm_dim("transpose", d0, ndim, &d0));
  OF_CHECK(of_norm_dim("transpose", d1, ndim, &d1));
  for (int32_t i = 0; i < ndim; i++) src[i] = i;
  if (ndim > 0) src[d0] = d1, src[d1] = d0;
  return OF_OK;
}
static of_status permute_order(const int64_t *tshape, int32_t tndim, const int32_t *dims,
                               int32_t ndim, int32_t *src) {
  char b[96];
  if (ndim != tndim)
    return of_fail(OF_ERR_SHAPE, "permute: %d dims given for a %d-d tensor %s", (int)ndim,
                   (int)tndim, of_shape_str(tshape, tndim, b, 96));
  bool seen[OF_MAX_DIMS] = {0};
  for (int32_t i = 0; i < ndim; i++) {
    int32_t d;
    OF_CHECK(of_norm_dim("permute", dims[i], ndim, &d));
    if (seen[d]) return of_fail(OF_ERR_ARG, "permute: dim %d repeated", d + 1);
    seen[d] = true;
    src[i] = d;
  }
  return OF_OK;
}
static of_status reorder_out(of_tensor *t, const int32_t *src, of_tensor **out) {
  int64_t shape[OF_MAX_DIMS], strides[OF_MAX_DIMS];
  for (int32_t i = 0; i < t->ndim; i++) {
    shape[i] = t->shape[src[i]];
    strides[i] = t->strides[src[i]];
  }
  return alias_out(t, shape, strides, t->ndim, t->offset, out);
}

static of_status transpose_impl(of_tensor *t, int32_t d0, int32_t d1, of_tensor **out) {
  int32_t src[OF_MAX_DIMS];
  OF_CHECK(transpose_order(t->ndim, d0, d1, src));
  return reorder_out(t, src, out);
}

static of_status permute_impl(of_tensor *t, const int32_t *dims, int32_t ndim, of_tensor **out) {
  int32_t src[OF_MAX_DIMS];
  OF_CHECK(permute_order(t->shape, t->ndim, dims, ndim, src));
  return reorder_out(t, src, out);
}

/* slice's geometry from the input's shape: the dim (normalized), the
 * clamped start and the result's length along the dim -- what the body and
 * the graph loader's re-inference (infer_dim3) both use */
static of_status slice_geometry(const int64_t *tshape, int32_t tndim, int32_t *dim, int64_t *start,
                                int64_t end, int64_t step, int64_t *len) {
  if (tndim == 0) return of_fail(OF_ERR_INDEX, "slice: cannot slice a 0-d tensor");
  OF_CHECK(of_norm_dim("slice", *dim, tndim, dim));
  if (step <= 0) return of_fail(OF_ERR_ARG, "slice: step must be positive, got %lld", (long long)step);
  int64_t n = tshape[*dim], s = *start;
  if (s < 0) s += n;
  if (end < 0) end += n;
  if (s < 0) s = 0;
  if (end > n) end = n;
  if (s > n) s = n;
  if (end < s) end = s;
  *start = s;
  *len = end == s ? 0 : (end - s - 1) / step + 1;   /* no overflow for huge steps */
  return OF_OK;
}

static of_status slice_impl(of_tensor *t, int32_t dim, int64_t start, int64_t end, int64_t step,
                   of_tensor **out) {
  int64_t len = 0;
  OF_CHECK(slice_geometry(t->shape, t->ndim, &dim, &start, end, step, &len));
  int64_t shape[OF_MAX_DIMS], strides[OF_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  memcpy(strides, t->strides, sizeof strides);
  shape[dim] = len;
  strides[dim] = t->strides[dim] * step;
  return alias_out(t, shape, strides, t->ndim, t->offset + start * t->strides[dim], out);
}

/* narrow's and select's checks of the dim and the range against the
 * input's shape (the bodies and infer_dim3) */
static of_status narrow_check(const int64_t *tshape, int32_t tndim, int32_t *dim, int64_t *start,
                              int64_t length) {
  if (tndim == 0) return of_fail(OF_ERR_INDEX, "narrow: cannot narrow a 0-d tensor");
  OF_CHECK(of_norm_dim("narrow", *dim, tndim, dim));
  int64_t n = tshape[*dim];
  if (*start < 0) *start += n;
  if (*start < 0 || length < 0 || *start > n - length)
    return of_fail(OF_ERR_INDEX, "narrow: start %lld (1-based) and length %lld exceed "
                   "dim %d of size %lld (shape %s)", (long long)*start + 1, (long long)length,
                   *dim + 1, (long long)n, of_shape_str(tshape, tndim, (char[96]){0}, 96));
  return OF_OK;
}
static of_status narrow_body(of_tensor *t, int32_t dim, int64_t start, int64_t length, of_tensor **out) {
  OF_CHECK(narrow_check(t->shape, t->ndim, &dim, &start, length));
  return of_slice(t, dim, start, start + length, 1, out);
}

static of_status select_check(const int64_t *tshape, int32_t tndim, int32_t *dim, int64_t *index) {
  if (tndim == 0) return of_fail(OF_ERR_INDEX, "select: cannot index a 0-d tensor");
  OF_CHECK(of_norm_dim("select", *dim, tndim, dim));
  int64_t n = tshape[*dim];
  if (*index < -n || *index >= n)
    return of_fail(OF_ERR_INDEX, "select: index %lld out of range for dim %d of size %lld "
                   "(shape %s; 1-based indices 1..%lld or -%lld..-1)",
                   (long long)(*index >= 0 ? *index + 1 : *index), *dim + 1, (long long)n,
                   of_shape_str(tshape, tndim, (char[96]){0}, 96), (long long)n, (long long)n);
  if (*index < 0) *index += n;
  return OF_OK;
}
static of_status select_impl(of_tensor *t, int32_t dim, int64_t index, of_tensor **out) {
  OF_CHECK(select_check(t->shape, t->ndim, &dim, &index));
  int64_t shape[OF_MAX_DIMS], strides[OF_MAX_DIMS];
  int32_t k = 0;
  for (int32_t i = 0; i < t->ndim; i++) {
    if (i == dim) continue;
    shape[k] = t->shape[i];
    strides[k++] = t->strides[i];
  }
  return alias_out(t, shape, strides, k, t->offset + index * t->strides[dim], out);
}

static of_status unsqueeze_check(int32_t tndim, int32_t *dim) {
  if (tndim >= OF_MAX_DIMS) return of_fail(OF_ERR_SHAPE, "unsqueeze: tensor already has %d dims", OF_MAX_DIMS);
  return of_norm_dim("unsqueeze", *dim, tndim + 1, dim);
}
static of_status unsqueeze_impl(of_tensor *t, int32_t dim, of_tensor **out) {
  OF_CHECK(unsqueeze_check(t->ndim, &dim));
  int64_t shape[OF_MAX_DIMS], strides[OF_MAX_DIMS];
  int32_t k = 0;
  for (int32_t i = 0; i <= t->ndim; i++) {
    if (i == dim) {
      shape[k] = 1;
      strides[k++] = i < t->ndim ? t->strides[i] * t->shape[i] : 1;
    }
    if (i < t->ndim) {
      shape[k] = t->shape[i];
      strides[k++] = t->strides[i];
    }
  }
  return alias_out(t, shape, strides, t->ndim + 1, t->offset, out);
}

/* the dims squeeze keeps (the body and infer_squeeze) */
static of_status squeeze_keep(const int64_t *tshape, int32_t tndim, int32_t dim, int32_t *keep,
                              int32_t *nkeep) {
  if (dim != OF_ALL_DIMS) OF_CHECK(of_norm_dim("squeeze", dim, tndim, &dim));
  int32_t k = 0;
  for (int32_t i = 0; i < tndim; i++)
    if (!(tshape[i] == 1 && (dim == OF_ALL_DIMS || dim == i))) keep[k++] = i;
  *nkeep = k;
  return OF_OK;
}
static of_status squeeze_impl(of_tensor *t, int32_t dim, of_tensor **out) {
  int32_t keep[OF_MAX_DIMS], k;
  OF_CHECK(squeeze_keep(t->shape, t->ndim, dim, keep, &k));
  int64_t shape[OF_MAX_DIMS], strides[OF_MAX_DIMS];
  for (int32_t i = 0; i < k; i++) {
    shape[i] = t->shape[keep[i]];
    strides[i] = t->strides[keep[i]];
  }
  return alias_out(t, shape, strides, k, t->offset, out);
}

/* expand's result shape from the input's shape (a loaded graph's node is
 * checked with it too) */
static of_status expand_shape(const int64_t *tshape, int32_t tndim, const int64_t *shape,
                              int32_t ndim, int64_t *nshape) {
  char bt[96], b[96];
  if (ndim < tndim || ndim > OF_MAX_DIMS)
    return of_fail(OF_ERR_SHAPE, "expand: cannot expand %s to %s (fewer dims)",
                   of_shape_str(tshape, tndim, bt, 96), of_shape_str(shape, ndim, b, 96));
  for (int32_t i = 0; i < ndim; i++) {
    int32_t td = i - (ndim - tndim);
    int64_t have = td >= 0 ? tshape[td] : 1;
    int64_t want = shape[i] == -1 && td >= 0 ? have : shape[i];
    if (want < 0 || (have != 1 && have != want))
      return of_fail(OF_ERR_SHAPE, "expand: cannot expand %s to %s (dim %d: %lld to %lld)",
                     of_shape_str(tshape, tndim, bt, 96), of_shape_str(shape, ndim, b, 96),
                     (int)i + 1, (long long)have, (long long)want);
    nshape[i] = want;
  }
  return of_check_shape("expand", nshape, ndim, NULL);
}

static of_status expand_impl(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out) {
  int64_t nshape[OF_MAX_DIMS], strides[OF_MAX_DIMS];
  OF_CHECK(expand_shape(t->shape, t->ndim, shape, ndim, nshape));
  for (int32_t i = 0; i < ndim; i++) {
    int32_t td = i - (ndim - t->ndim);
    strides[i] = (td >= 0 && t->shape[td] == nshape[i]) ? t->strides[td] : 0;
  }
  return alias_out(t, nshape, strides, ndim, t->offset, out);
}

/* flatten's result shape from the input's (a loaded node is checked with it) */
static of_status flatten_shape(const int64_t *tshape, int32_t tndim, int32_t start, int32_t end,
                               int64_t *shape, int32_t *nd) {
  if (tndim == 0) {
    shape[0] = 1;
    *nd = 1;
    return OF_OK;
  }
  OF_CHECK(of_norm_dim("flatten", start, tndim, &start));
  OF_CHECK(of_norm_dim("flatten", end, tndim, &end));
  if (start > end) return of_fail(OF_ERR_ARG, "flatten: start dim %d after end dim %d", start + 1, end + 1);
  int32_t k = 0;
  for (int32_t i = 0; i < tndim; i++) {
    if (i > start && i <= end) shape[k - 1] *= tshape[i];
    else shape[k++] = tshape[i];
  }
  *nd = k;
  return OF_OK;
}

static of_status flatten_impl(of_tensor *t, int32_t start, int32_t end, of_tensor **out) {
  int64_t shape[OF_MAX_DIMS];
  int32_t k = 0;
  OF_CHECK(flatten_shape(t->shape, t->ndim, start, end, shape, &k));
  return reshape_impl(t, shape, k, out);
}

static of_status contiguous_body(of_tensor *t, of_tensor **out) {
  if (of_tensor_is_contiguous(t)) {
    of_tensor_retain(t);
    *out = t;
    return OF_OK;
  }
  return of_clone(t, out);
}

/* ---- autograd: public entry points record a node per view ---- */

static of_status give(of_tensor *g, of_tensor **gi) {
  of_tensor_retain(g);
  *gi = g;
  return OF_OK;
}

static of_status reshape_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  return of_reshape(g[0], n->in_meta[0].shape, n->in_meta[0].ndim, &gi[0]);
}
static const of_grad_def reshape_grad = {"ReshapeBackward", reshape_backward};
static const of_grad_def view_grad = {"ViewBackward", reshape_backward};

static of_status transpose_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const a_i2 *a = OF_NODE_ATTRS(a_i2, n);
  return of_transpose(g[0], a->a, a->b, &gi[0]);
}
static const of_grad_def transpose_grad = {"TransposeBackward", transpose_backward};

static of_status permute_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const a_dims *a = OF_NODE_ATTRS(a_dims, n);   /* dims normalized */
  int32_t inv[OF_MAX_DIMS];
  for (int32_t k = 0; k < n->in_meta[0].ndim; k++) inv[a->dims[k]] = k;
  return of_permute(g[0], inv, n->in_meta[0].ndim, &gi[0]);
}
static const of_grad_def permute_grad = {"PermuteBackward", permute_backward};

/* slice and select: the grad lands in a zero tensor of the input's shape,
 * through index_add so that the rule is itself differentiable. Both keep an
 * a_dim3 (slice: a = start, b = end, c = step; select: a = index); the op
 * kind tells them apart. */
static of_status scatter_view_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const of_meta *m = &n->in_meta[0];
  const a_dim3 *a = OF_NODE_ATTRS(a_dim3, n);
  const bool is_slice = n->attr_op == OPK_SLICE;
  int32_t dim = a->dim;
  if (dim < 0) dim += m->ndim;
  int64_t size = m->shape[dim];
  of_tensor *z = NULL, *idx = NULL, *src = NULL;
  of_status st = of_zeros(m->shape, m->ndim, g[0]->dtype, of_dev(g[0]), &z);
  if (st == OF_OK && is_slice) {   /* slice: positions start, start+step, ... */
    int64_t start = a->a, end = a->b, step = a->c;
    if (start < 0) start += size;
    if (end < 0) end += size;
    if (start < 0) start = 0;
    if (end > size) end = size;
    if (start > size) start = size;
    if (end < start) end = start;
    st = of_arange((double)start, (double)end, (double)step, OF_INT64, of_dev(g[0]), &idx);
    if (st == OF_OK) { src = g[0]; of_tensor_retain(src); }
  } else if (st == OF_OK) {            /* select: one position, dim restored */
    int64_t index = a->a < 0 ? a->a + size : a->a;
    st = of_full(&(int64_t){1}, 1, (double)index, OF_INT64, of_dev(g[0]), &idx);
    if (st == OF_OK) st = of_unsqueeze(g[0], dim, &src);
  }
  if (st == OF_OK && of_dev(z) != OF_CPU && !of_is_grad_enabled()) {
    /* on a device, outside double backward: write g into the view of z it
     * came from (no index kernel needed) */
    int64_t first = a->a, step = is_slice ? a->c : 1;
    if (first < 0) first += size;
    if (first < 0) first = 0;
    int64_t shape[OF_MAX_DIMS], strides[OF_MAX_DIMS];
    for (int32_t d = 0; d < z->ndim; d++) {
      shape[d] = d == dim ? src->shape[d] : z->shape[d];
      strides[d] = d == dim ? z->strides[d] * step : z->strides[d];
    }
    of_tensor *v = shape[dim] ? of_tensor_alias(z, shape, strides, z->ndim,
                                                first * z->strides[dim]) : NULL;
    if (shape[dim] && !v) st = OF_ERR_OOM;
    if (v) st = of_copy_data(v, src);
    of_tensor_release(v);
    if (st == OF_OK) {
      gi[0] = z;
      z = NULL;
    }
  } else if (st == OF_OK) {
    st = of_index_add(z, dim, idx, src, 1.0, 0, NULL, &gi[0]);
  }
  of_tensor_release(z);
  of_tensor_release(idx);
  of_tensor_release(src);
  return st;
}
static const of_grad_def slice_grad = {"SliceBackward", scatter_view_backward};
static const of_grad_def select_grad = {"SelectBackward", scatter_view_backward};

static of_status expand_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  return of_sum_to(g[0], &n->in_meta[0], &gi[0]);
}
static const of_grad_def expand_grad = {"ExpandBackward", expand_backward};

static of_status clone_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  (void)n;
  return g[0] ? give(g[0], &gi[0]) : OF_OK;
}
static const of_grad_def clone_grad = {"CloneBackward", clone_backward};

static of_status cast_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  return of_to_dtype(g[0], n->in_meta[0].dtype, &gi[0]);
}
static const of_grad_def cast_grad = {"ToCopyBackward", cast_backward};

static of_status copy_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_tensor *s;
  OF_CHECK(of_sum_to(g[0], &n->in_meta[0], &s));
  of_status st = of_to_dtype(s, n->in_meta[0].dtype, &gi[0]);
  of_tensor_release(s);
  return st;
}
static const of_grad_def copy_grad = {"CopyBackward", copy_backward};

/* Records `def` for out = view(t) when t requires grad; keeps the view base. */
static of_status finish_view(const of_grad_def *def, of_tensor *t, of_tensor **out,
                             of_node **node) {
  of_tensor *o = *out;
  if (o != t && !o->view_base && o->storage == t->storage) {
    o->view_base = t->view_base ? t->view_base : t;
    of_tensor_retain(o->view_base);
  }
  *node = NULL;
  if (!of_grad_needed(&t, 1)) return OF_OK;
  of_status st = of_record(def, &t, 1, out, 1, node);
  if (st != OF_OK) {
    of_tensor_release(*out);
    *out = NULL;
  }
  return st;
}

static of_status view_body(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out) {
  of_node *n;
  OF_CHECK(view_impl(t, shape, ndim, out));
  return finish_view(&view_grad, t, out, &n);
}

static of_status reshape_body(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out) {
  of_node *n;
  OF_CHECK(reshape_impl(t, shape, ndim, out));
  return finish_view(&reshape_grad, t, out, &n);
}

static of_status flatten_body(of_tensor *t, int32_t start, int32_t end, of_tensor **out) {
  of_node *n;
  OF_CHECK(flatten_impl(t, start, end, out));
  return finish_view(&reshape_grad, t, out, &n);
}

static of_status squeeze_body(of_tensor *t, int32_t dim, of_tensor **out) {
  of_node *n;
  OF_CHECK(squeeze_impl(t, dim, out));
  return finish_view(&reshape_grad, t, out, &n);
}

static of_status unsqueeze_body(of_tensor *t, int32_t dim, of_tensor **out) {
  of_node *n;
  OF_CHECK(unsqueeze_impl(t, dim, out));
  return finish_view(&reshape_grad, t, out, &n);
}

static of_status transpose_body(of_tensor *t, int32_t d0, int32_t d1, of_tensor **out) {
  of_node *n;
  OF_CHECK(transpose_impl(t, d0, d1, out));
  OF_CHECK(finish_view(&transpose_grad, t, out, &n));
  if (n) {
    a_i2 a = {d0, d1};
    OF_NODE_KEEP(n, OPK_TRANSPOSE, a);
  }
  return OF_OK;
}

static of_status permute_body(of_tensor *t, const int32_t *dims, int32_t ndim, of_tensor **out) {
  of_node *n;
  OF_CHECK(permute_impl(t, dims, ndim, out));
  OF_CHECK(finish_view(&permute_grad, t, out, &n));
  if (n) {
    a_dims a;
    OF_ZERO(a);
    a.n = ndim;
    for (int32_t k = 0; k < ndim; k++) a.dims[k] = dims[k] < 0 ? dims[k] + ndim : dims[k];
    OF_NODE_KEEP(n, OPK_PERMUTE, a);
  }
  return OF_OK;
}

static of_status slice_body(of_tensor *t, int32_t dim, int64_t start, int64_t end, int64_t step,
                        of_tensor **out) {
  of_node *n;
  OF_CHECK(slice_impl(t, dim, start, end, step, out));
  OF_CHECK(finish_view(&slice_grad, t, out, &n));
  if (n) {
    a_dim3 a;
    OF_ZERO(a);
    a.dim = dim;
    a.a = start;
    a.b = end;
    a.c = step;
    OF_NODE_KEEP(n, OPK_SLICE, a);
  }
  return OF_OK;
}

static of_status select_body(of_tensor *t, int32_t dim, int64_t index, of_tensor **out) {
  of_node *n;
  OF_CHECK(select_impl(t, dim, index, out));
  OF_CHECK(finish_view(&select_grad, t, out, &n));
  if (n) {
    a_dim3 a;
    OF_ZERO(a);
    a.dim = dim;
    a.a = index;
    OF_NODE_KEEP(n, OPK_SELECT, a);
  }
  return OF_OK;
}

static of_status expand_body(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out) {
  of_node *n;
  OF_CHECK(expand_impl(t, shape, ndim, out));
  return finish_view(&expand_grad, t, out, &n);
}

static of_status clone_body(of_tensor *t, of_tensor **out) {
  OF_CHECK(of_clone_data(t, out));
  if (!of_grad_needed(&t, 1)) return OF_OK;
  return of_record(&clone_grad, &t, 1, out, 1, NULL);
}

static of_status to_dtype_body(of_tensor *t, of_dtype dt, of_tensor **out) {
  OF_CHECK(of_cast_data(t, dt, out));
  if (*out == t || !of_grad_needed(&t, 1)) return OF_OK;
  return of_record(&cast_grad, &t, 1, out, 1, NULL);
}

static of_status copy__body(of_tensor *dst, of_tensor *src) {
  OF_CHECK(of_check_inplace("copy_", dst));
  OF_CHECK(of_copy_data(dst, src));
  if (of_grad_needed(&src, 1)) return of_record(&copy_grad, &src, 1, &dst, 1, NULL);
  if (dst->grad_fn) {   /* overwritten: the old history gets no grad */
    of_node_release(dst->grad_fn);
    dst->grad_fn = NULL;
    dst->requires_grad = false;
  }
  return OF_OK;
}

static of_status detach_body(of_tensor *t, of_tensor **out) {
  of_tensor *d = of_tensor_alias(t, t->shape, t->strides, t->ndim, t->offset);
  if (!d) return OF_ERR_OOM;
  *out = d;
  return OF_OK;
}

/* ---- entry points (dispatch), run functions and table rows ---- */
static of_status pack_shape(int32_t op, of_tensor *t, const int64_t *shape, int32_t ndim,
                           of_tensor **out) {
  a_shape a;
  OF_ZERO(a);
  a.ndim = ndim;
  of_copy_i64(a.shape, shape, ndim);
  return OF_RECORD(op, a, &t, 1, out, 1);
}
static void describe_shape(const void *p, char *b, size_t c) {
  const a_shape *a = p;
  of_cat_list(b, c, "shape", a->shape, NDIM_OK(a->ndim) ? a->ndim : 0);
}

of_status of_view(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out) {
  OF_DISPATCH(view_body(t, shape, ndim, out), pack_shape(OPK_VIEW, t, shape, ndim, out));
}

of_status of_reshape(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out) {
  OF_DISPATCH(reshape_body(t, shape, ndim, out), pack_shape(OPK_RESHAPE, t, shape, ndim, out));
}

of_status of_expand(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out) {
  OF_DISPATCH(expand_body(t, shape, ndim, out), pack_shape(OPK_EXPAND, t, shape, ndim, out));
}

/* view, reshape and expand share their record */
static of_status run_shape(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_shape);
  OF_NEED(NDIM_OK(a->ndim), "ndim");
  if (n->op == OPK_VIEW) OF_RUN1(of_view(ins[0], a->shape, a->ndim, OF_R));
  if (n->op == OPK_RESHAPE) OF_RUN1(of_reshape(ins[0], a->shape, a->ndim, OF_R));
  OF_RUN1(of_expand(ins[0], a->shape, a->ndim, OF_R));
}

static of_status pack_as_strided(of_tensor *t, const int64_t *shape, const int64_t *strides,
                                int32_t ndim, int64_t offset, of_tensor **out) {
  a_strided a;
  OF_ZERO(a);
  a.ndim = ndim;
  of_copy_i64(a.shape, shape, ndim);
  of_copy_i64(a.strides, strides, ndim);
  a.offset = offset;
  return OF_RECORD(OPK_AS_STRIDED, a, &t, 1, out, 1);
}
of_status of_as_strided(of_tensor *t, const int64_t *shape, const int64_t *strides,
                        int32_t ndim, int64_t offset, of_tensor **out) {
  OF_DISPATCH(as_strided_body(t, shape, strides, ndim, offset, out),
            pack_as_strided(t, shape, strides, ndim, offset, out));
}
static of_status run_as_strided(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_strided);
  OF_NEED(NDIM_OK(a->ndim), "ndim");
  OF_RUN1(of_as_strided(ins[0], a->shape, a->strides, a->ndim, a->offset, OF_R));
}
static void describe_strided(const void *p, char *b, size_t c) {
  const a_strided *a = p;
  int32_t nd = NDIM_OK(a->ndim) ? a->ndim : 0;
  of_cat_list(b, c, "shape", a->shape, nd);
  of_cat_list(b, c, "strides", a->strides, nd);
  of_catf(b, c, " offset=%lld", (long long)a->offset);
}

static of_status pack_i2(int32_t op, of_tensor *t, int32_t x, int32_t y, of_tensor **out) {
  a_i2 a = {x, y};
  return OF_RECORD(op, a, &t, 1, out, 1);
}
static void describe_i2(const void *p, char *b, size_t c) {
  const a_i2 *a = p;
  of_catf(b, c, "%d,%d", (int)a->a, (int)a->b);
}
of_status of_transpose(of_tensor *t, int32_t d0, int32_t d1, of_tensor **out) {
  OF_DISPATCH(transpose_body(t, d0, d1, out), pack_i2(OPK_TRANSPOSE, t, d0, d1, out));
}
static of_status run_transpose(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_i2);
  OF_RUN1(of_transpose(ins[0], a->a, a->b, OF_R));
}
of_status of_flatten(of_tensor *t, int32_t start, int32_t end, of_tensor **out) {
  OF_DISPATCH(flatten_body(t, start, end, out), pack_i2(OPK_FLATTEN, t, start, end, out));
}
static of_status run_flatten(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_i2);
  OF_RUN1(of_flatten(ins[0], a->a, a->b, OF_R));
}

static of_status pack_permute(of_tensor *t, const int32_t *dims, int32_t ndim, of_tensor **out) {
  a_dims a;
  OF_ZERO(a);
  a.n = ndim;
  of_copy_i32(a.dims, dims, ndim);
  return OF_RECORD(OPK_PERMUTE, a, &t, 1, out, 1);
}
of_status of_permute(of_tensor *t, const int32_t *dims, int32_t ndim, of_tensor **out) {
  OF_DISPATCH(permute_body(t, dims, ndim, out), pack_permute(t, dims, ndim, out));
}
static of_status run_permute(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_dims);
  OF_NEED(NDIM_OK(a->n), "ndim");
  OF_RUN1(of_permute(ins[0], a->dims, a->n, OF_R));
}

static of_status pack_dim3(int32_t op, of_tensor *t, int32_t dim, int64_t x, int64_t y,
                          int64_t z, of_tensor **out) {
  a_dim3 a;
  OF_ZERO(a);
  a.dim = dim;
  a.a = x;
  a.b = y;
  a.c = z;
  return OF_RECORD(op, a, &t, 1, out, 1);
}
static void describe_dim3(const void *p, char *b, size_t c) {
  const a_dim3 *a = p;
  of_catf(b, c, "dim=%d %lld,%lld,%lld", (int)a->dim, (long long)a->a, (long long)a->b,
       (long long)a->c);
}
of_status of_narrow(of_tensor *t, int32_t dim, int64_t start, int64_t length, of_tensor **out) {
  OF_DISPATCH(narrow_body(t, dim, start, length, out),
            pack_dim3(OPK_NARROW, t, dim, start, length, 0, out));
}
static of_status run_narrow(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_dim3);
  OF_RUN1(of_narrow(ins[0], a->dim, a->a, a->b, OF_R));
}
of_status of_slice(of_tensor *t, int32_t dim, int64_t start, int64_t end, int64_t step,
                   of_tensor **out) {
  OF_DISPATCH(slice_body(t, dim, start, end, step, out),
            pack_dim3(OPK_SLICE, t, dim, start, end, step, out));
}
static of_status run_slice(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_dim3);
  OF_RUN1(of_slice(ins[0], a->dim, a->a, a->b, a->c, OF_R));
}
of_status of_select(of_tensor *t, int32_t dim, int64_t index, of_tensor **out) {
  OF_DISPATCH(select_body(t, dim, index, out), pack_dim3(OPK_SELECT, t, dim, index, 0, 0, out));
}
static of_status run_select(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_dim3);
  OF_RUN1(of_select(ins[0], a->dim, a->a, OF_R));
}

static of_status pack_i1(int32_t op, of_tensor *t, int32_t v, of_tensor **out) {
  a_i1 a = {v, 0};
  return OF_RECORD(op, a, &t, 1, out, 1);
}
static void describe_dtype(const void *p, char *b, size_t c) {
  of_catf(b, c, "%s", of_dtype_name(((const a_i1 *)p)->v));
}
of_status of_unsqueeze(of_tensor *t, int32_t dim, of_tensor **out) {
  OF_DISPATCH(unsqueeze_body(t, dim, out), pack_i1(OPK_UNSQUEEZE, t, dim, out));
}
static of_status run_unsqueeze(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_i1);
  OF_RUN1(of_unsqueeze(ins[0], a->v, OF_R));
}
of_status of_squeeze(of_tensor *t, int32_t dim, of_tensor **out) {
  OF_DISPATCH(squeeze_body(t, dim, out), pack_i1(OPK_SQUEEZE, t, dim, out));
}
static of_status run_squeeze(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_i1);
  OF_RUN1(of_squeeze(ins[0], a->v, OF_R));
}
of_status of_to_dtype(of_tensor *t, of_dtype dt, of_tensor **out) {
  OF_DISPATCH(to_dtype_body(t, dt, out), pack_i1(OPK_TO_DTYPE, t, dt, out));
}
static of_status run_to_dtype(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_i1);
  OF_RUN1(of_to_dtype(ins[0], a->v, OF_R));
}

static of_status pack_none(int32_t op, of_tensor *t, of_tensor **out) {
  a_i1 a = {0, 0};
  return OF_RECORD(op, a, &t, 1, out, 1);
}
of_status of_contiguous(of_tensor *t, of_tensor **out) {
  OF_DISPATCH(contiguous_body(t, out), pack_none(OPK_CONTIGUOUS, t, out));
}
static of_status run_contiguous(const of_oprec *n, of_tensor **ins, void **outs) {
  (void)n;
  OF_RUN1(of_contiguous(ins[0], OF_R));
}
of_status of_clone(of_tensor *t, of_tensor **out) {
  OF_DISPATCH(clone_body(t, out), pack_none(OPK_CLONE, t, out));
}
static of_status run_clone(const of_oprec *n, of_tensor **ins, void **outs) {
  (void)n;
  OF_RUN1(of_clone(ins[0], OF_R));
}
of_status of_detach(of_tensor *t, of_tensor **out) {
  OF_DISPATCH(detach_body(t, out), pack_none(OPK_DETACH, t, out));
}
static of_status run_detach(const of_oprec *n, of_tensor **ins, void **outs) {
  (void)n;
  OF_RUN1(of_detach(ins[0], OF_R));
}
static of_status pack_copy_(of_tensor *dst, of_tensor *src) {
  a_i1 a = {0, 0};
  of_tensor *ins[2] = {dst, src};
  return OF_RECORD(OPK_COPY_, a, ins, 2, NULL, 0);
}
of_status of_copy_(of_tensor *dst, of_tensor *src) {
  OF_DISPATCH(copy__body(dst, src), pack_copy_(dst, src));
}
static of_status run_copy_(const of_oprec *n, of_tensor **ins, void **outs) {
  (void)n;
  (void)outs;
  return of_copy_(ins[0], ins[1]);
}

/* a loaded view / reshape / expand node's result: the shape its record asks
 * for, resolved against the recorded input's shape by the functions the
 * ops run; the input's dtype. (Whether a view's strides allow it is known
 * only from the real input: checked when it runs.) */
static of_status infer_shape_op(int32_t opk, const void *p, const of_meta *ins, of_meta *outs) {
  const a_shape *a = p;
  if (!NDIM_OK(a->ndim)) return of_fail(OF_ERR_ARG, "bad ndim %d", (int)a->ndim);
  if (opk == OPK_EXPAND) OF_CHECK(expand_shape(ins[0].shape, ins[0].ndim, a->shape, a->ndim, outs[0].shape));
  else OF_CHECK(infer_shape_of(opk == OPK_VIEW ? "view" : "reshape", ins[0].shape, ins[0].ndim,
                               a->shape, a->ndim, outs[0].shape));
  outs[0].ndim = a->ndim;
  outs[0].dtype = ins[0].dtype;
  return OF_OK;
}
#define INFER_SHAPE(K) \
  static of_status infer_##K(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) { \
    (void)nin; \
    return infer_shape_op(OPK_##K, p, ins, outs); \
  }
INFER_SHAPE(VIEW)
INFER_SHAPE(RESHAPE)
INFER_SHAPE(EXPAND)

OF_OP_IMPL_INFER(VIEW, run_shape, NULL, NULL, describe_shape, infer_VIEW);
OF_OP_IMPL_INFER(RESHAPE, run_shape, NULL, NULL, describe_shape, infer_RESHAPE);
static of_status infer_as_strided(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_strided *a = p;
  (void)nin;
  return as_strided_plan(&ins[0], a->shape, a->strides, a->ndim, a->offset, INT64_MAX, &outs[0]);
}
OF_OP_IMPL_INFER(AS_STRIDED, run_as_strided, NULL, NULL, describe_strided, infer_as_strided);
/* a loaded transpose / permute / flatten node's result: the shape the
 * functions above give for the recorded input; the input's dtype */
static void reorder_meta(const of_meta *x, const int32_t *src, of_meta *y) {
  for (int32_t i = 0; i < x->ndim; i++) y->shape[i] = x->shape[src[i]];
  y->ndim = x->ndim;
  y->dtype = x->dtype;
}
static of_status infer_transpose(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_i2 *a = p;
  int32_t src[OF_MAX_DIMS];
  (void)nin;
  OF_CHECK(transpose_order(ins[0].ndim, a->a, a->b, src));
  reorder_meta(&ins[0], src, &outs[0]);
  return OF_OK;
}
static of_status infer_permute(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_dims *a = p;
  int32_t src[OF_MAX_DIMS];
  (void)nin;
  if (!NDIM_OK(a->n)) return of_fail(OF_ERR_ARG, "bad ndim %d", (int)a->n);
  OF_CHECK(permute_order(ins[0].shape, ins[0].ndim, a->dims, a->n, src));
  reorder_meta(&ins[0], src, &outs[0]);
  return OF_OK;
}
static of_status infer_flatten(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_i2 *a = p;
  (void)nin;
  OF_CHECK(flatten_shape(ins[0].shape, ins[0].ndim, a->a, a->b, outs[0].shape, &outs[0].ndim));
  outs[0].dtype = ins[0].dtype;
  return OF_OK;
}

OF_OP_IMPL_INFER(TRANSPOSE, run_transpose, NULL, NULL, describe_i2, infer_transpose);
OF_OP_IMPL_INFER(PERMUTE, run_permute, NULL, NULL, of_describe_dims, infer_permute);
/* a loaded narrow / slice / select node's result: the geometry the bodies
 * compute from the recorded input's shape */
static of_status infer_dim3(int32_t opk, const void *p, const of_meta *ins, of_meta *outs) {
  const a_dim3 *a = p;
  const of_meta *x = &ins[0];
  int32_t dim = a->dim;
  int64_t start = a->a, len = a->b;
  if (opk == OPK_SLICE) OF_CHECK(slice_geometry(x->shape, x->ndim, &dim, &start, a->b, a->c, &len));
  else if (opk == OPK_NARROW) OF_CHECK(narrow_check(x->shape, x->ndim, &dim, &start, len));
  else OF_CHECK(select_check(x->shape, x->ndim, &dim, &start));
  outs[0] = *x;
  if (opk == OPK_SELECT) {
    for (int32_t i = dim; i + 1 < x->ndim; i++) outs[0].shape[i] = x->shape[i + 1];
    outs[0].ndim = x->ndim - 1;
  } else {
    outs[0].shape[dim] = len;
  }
  return OF_OK;
}
#define INFER_DIM3(K) \
  static of_status infer_##K(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) { \
    (void)nin; \
    return infer_dim3(OPK_##K, p, ins, outs); \
  }
INFER_DIM3(NARROW)
INFER_DIM3(SLICE)
INFER_DIM3(SELECT)
static of_status infer_unsqueeze(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  int32_t dim = ((const a_i1 *)p)->v;
  (void)nin;
  OF_CHECK(unsqueeze_check(ins[0].ndim, &dim));
  outs[0].ndim = ins[0].ndim + 1;
  outs[0].dtype = ins[0].dtype;
  for (int32_t i = 0, k = 0; i < outs[0].ndim; i++) outs[0].shape[i] = i == dim ? 1 : ins[0].shape[k++];
  return OF_OK;
}
static of_status infer_squeeze(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  int32_t keep[OF_MAX_DIMS], k;
  (void)nin;
  OF_CHECK(squeeze_keep(ins[0].shape, ins[0].ndim, ((const a_i1 *)p)->v, keep, &k));
  for (int32_t i = 0; i < k; i++) outs[0].shape[i] = ins[0].shape[keep[i]];
  outs[0].ndim = k;
  outs[0].dtype = ins[0].dtype;
  return OF_OK;
}
/* contiguous, clone, detach: the input's shape and dtype; to: the record's dtype */
static of_status infer_same(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)p;
  (void)nin;
  outs[0] = ins[0];
  return OF_OK;
}
static of_status infer_to_dtype(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)nin;
  outs[0] = ins[0];
  outs[0].dtype = (of_dtype)((const a_i1 *)p)->v;
  return OF_OK;
}

OF_OP_IMPL_INFER(NARROW, run_narrow, NULL, NULL, describe_dim3, infer_NARROW);
OF_OP_IMPL_INFER(SLICE, run_slice, NULL, NULL, describe_dim3, infer_SLICE);
OF_OP_IMPL_INFER(SELECT, run_select, NULL, NULL, describe_dim3, infer_SELECT);
OF_OP_IMPL_INFER(UNSQUEEZE, run_unsqueeze, NULL, NULL, of_describe_i1, infer_unsqueeze);
OF_OP_IMPL_INFER(SQUEEZE, run_squeeze, NULL, NULL, of_describe_i1, infer_squeeze);
OF_OP_IMPL_INFER(EXPAND, run_shape, NULL, NULL, describe_shape, infer_EXPAND);
OF_OP_IMPL_INFER(FLATTEN, run_flatten, NULL, NULL, describe_i2, infer_flatten);
OF_OP_IMPL_INFER(CONTIGUOUS, run_contiguous, NULL, NULL, NULL, infer_same);
OF_OP_IMPL_INFER(CLONE, run_clone, NULL, NULL, NULL, infer_same);
OF_OP_IMPL_INFER(TO_DTYPE, run_to_dtype, NULL, NULL, describe_dtype, infer_to_dtype);
/* a loaded copy_ node has no results; its src must broadcast to dst as
 * of_copy_data checks (ins[0] dst, ins[1] src) */
static of_status infer_copy_(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)p, (void)nin, (void)outs;
  return of_copy_fits(ins[0].shape, ins[0].ndim, ins[1].shape, ins[1].ndim);
}
OF_OP_IMPL_INFER(COPY_, run_copy_, of_mutates_first, NULL, NULL, infer_copy_);
OF_OP_IMPL_INFER(DETACH, run_detach, NULL, NULL, NULL, infer_same);
