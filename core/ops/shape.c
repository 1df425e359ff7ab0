/* shape.c -- ops that rearrange whole tensors: cat, stack, tril/triu, flip,
 * roll, repeat. Most of them describe a piece of the output (or a reordered
 * input) as a strided view and let of_copy_ move and convert the data, so
 * every dtype, layout and 0-size case goes through one tested path. */
#include "autograd.h"
#include "../device.h"
#include <omp.h>
#include <stdlib.h>
#include "family.h"

/* The kernels (*_compute) move data with the of_*_data helpers, which never
 * record; the public entry points at the end of the file record one node per
 * call, with backward rules written in public ops (so double backward works). */

/* A view header on the stack sharing t's storage: never retained or released,
 * only handed to of_copy_data/of_clone_data while t is alive. */
static of_tensor stack_view(const of_tensor *t, const int64_t *shape, const int64_t *strides,
                            int32_t ndim, int64_t offset) {
  of_tensor v = *t;
  v.refcount = 1;
  of_tensor_clear_autograd(&v);
  v.ndim = ndim;
  v.offset = offset;
  for (int32_t i = 0; i < ndim; i++) {
    v.shape[i] = shape[i];
    v.strides[i] = strides[i];
  }
  v.numel = of_shape_numel(shape, ndim);
  return v;
}

/* t itself if contiguous, else a contiguous copy. */
static of_status contig_data(of_tensor *t, of_tensor **out) {
  if (of_tensor_is_contiguous(t)) {
    of_tensor_retain(t);
    *out = t;
    return OF_OK;
  }
  return of_clone_data(t, out);
}

static bool legacy_empty(const of_meta *t) { return t->ndim == 1 && t->shape[0] == 0; }

/* the shapes and dtypes of n tensors (absent: ndim -1), for the plans below */
static of_status metas_of(const char *op, of_tensor **ts, int32_t n, of_meta **out) {
  of_meta *m = malloc(sizeof(of_meta) * (size_t)n);
  if (!m) return of_fail(OF_ERR_OOM, "%s: out of memory for %d tensors' shapes", op, (int)n);
  for (int32_t i = 0; i < n; i++) m[i] = of_meta_of(ts[i]);
  *out = m;
  return OF_OK;
}

/* ---- cat / stack ---- */

/* cat's checks on the inputs' shapes and dtypes and its result (dim d
 * summed over the inputs, the promoted dtype; only legacy empty [0]
 * inputs: an empty 1-D result, *ref -1): cat_compute and infer_cat */
static of_status cat_plan(const of_meta *ts, int32_t n, int32_t dim, int32_t *dout,
                          int32_t *refout, of_meta *res) {
  of_dtype dt = -1;
  int32_t ref = -1;
  for (int32_t i = 0; i < n; i++) {
    if (ts[i].ndim < 0) return of_fail(OF_ERR_ARG, "cat: tensor %d of %d is NULL", (int)i + 1, (int)n);
    if (ts[i].ndim == 0)
      return of_fail(OF_ERR_SHAPE, "cat: zero-dimensional tensor (at position %d) cannot be "
                     "concatenated; unsqueeze it first", (int)i + 1);
    if (dt < 0) dt = ts[i].dtype;
    else OF_CHECK(of_promote_for("cat", dt, ts[i].dtype, &dt));
    if (ref < 0 && !legacy_empty(&ts[i])) ref = i;
  }
  *refout = ref;
  res->dtype = dt;
  if (ref < 0) {   /* only legacy empty tensors: an empty 1-D result */
    int32_t d;
    OF_CHECK(of_norm_dim("cat", dim, 1, &d));
    *dout = d;
    res->ndim = 1;
    res->shape[0] = 0;
    return OF_OK;
  }
  const of_meta *r = &ts[ref];
  int32_t d;
  OF_CHECK(of_norm_dim("cat", dim, r->ndim, &d));
  memcpy(res->shape, r->shape, sizeof res->shape);
  res->ndim = r->ndim;
  res->shape[d] = 0;
  for (int32_t i = 0; i < n; i++) {
    const of_meta *t = &ts[i];
    if (legacy_empty(t) && r->ndim != 1) continue;
    if (t->ndim != r->ndim)
      return of_fail(OF_ERR_SHAPE, "cat: tensors must have the same number of dims: tensor %d "
                     "has shape %s, tensor %d has shape %s", (int)ref + 1, OF_SHAPE_STR(r),
                     (int)i + 1, OF_SHAPE_STR(t));
    for (int32_t k = 0; k < r->ndim; k++)
      if (k != d && t->shape[k] != r->shape[k])
        return of_fail(OF_ERR_SHAPE, "cat: sizes must match except in dim %d: tensor %d has "
                       "shape %s, tensor %d has shape %s (dim %d: %lld vs %lld)", d + 1,
                       (int)ref + 1, OF_SHAPE_STR(r), (int)i + 1, OF_SHAPE_STR(t), k + 1,
                       (long long)r->shape[k], (long long)t->shape[k]);
    if (!of_add_ok(res->shape[d], t->shape[d], &res->shape[d]))
      return of_fail(OF_ERR_SHAPE, "cat: the result's dim %d overflows (tensor %d has shape %s)",
                     d + 1, (int)i + 1, OF_SHAPE_STR(t));
  }
  *dout = d;
  return OF_OK;
}

static of_status cat_compute(of_tensor **ts, int32_t n, int32_t dim, of_tensor **out) {
  if (!ts || n <= 0) return of_fail(OF_ERR_ARG, "cat: expected a non-empty list of tensors");
  of_device dev;
  OF_CHECK(of_common_device("cat", ts, n, &dev));
  for (int32_t i = 0; i < n; i++)
    if (!ts[i]) return of_fail(OF_ERR_ARG, "cat: tensor %d of %d is NULL", (int)i + 1, (int)n);
  of_meta *ms, rm;
  int32_t d = 0, ref = -1;
  OF_CHECK(metas_of("cat", ts, n, &ms));
  of_status pst = cat_plan(ms, n, dim, &d, &ref, &rm);
  free(ms);
  OF_CHECK(pst);
  if (ref < 0) return of_tensor_new(rm.shape, rm.ndim, rm.dtype, dev, out);
  const of_tensor *r = ts[ref];
  of_tensor *res;
  OF_CHECK(of_tensor_new(rm.shape, rm.ndim, rm.dtype, dev, &res));
  int64_t pos = 0;
  for (int32_t i = 0; i < n; i++) {
    of_tensor *t = ts[i];
    of_meta tm = of_meta_of(t);
    if ((legacy_empty(&tm) && r->ndim != 1) || t->shape[d] == 0) continue;
    of_tensor v = stack_view(res, t->shape, res->strides, res->ndim, pos * res->strides[d]);
    of_status st = of_copy_data(&v, t);
    if (st != OF_OK) {
      of_tensor_release(res);
      return st;
    }
    pos += t->shape[d];
  }
  res->storage->version = 0;
  *out = res;
  return OF_OK;
}

/* stack's checks on the inputs' shapes and dtypes and its result (a new
 * dim d of size n, the promoted dtype): stack_compute and infer_stack */
static of_status stack_plan(const of_meta *ts, int32_t n, int32_t dim, int32_t *dout,
                            of_meta *res) {
  for (int32_t i = 0; i < n; i++)
    if (ts[i].ndim < 0)
      return of_fail(OF_ERR_ARG, "stack: tensor %d of %d is NULL", (int)i + 1, (int)n);
  const of_meta *r = &ts[0];
  if (r->ndim >= OF_MAX_DIMS)
    return of_fail(OF_ERR_SHAPE, "stack: tensors already have %d dims (shape %s), the most "
                   "supported", OF_MAX_DIMS, OF_SHAPE_STR(r));
  int32_t d;
  OF_CHECK(of_norm_dim("stack", dim, r->ndim + 1, &d));
  of_dtype dt = r->dtype;
  for (int32_t i = 1; i < n; i++) {
    const of_meta *t = &ts[i];
    bool same = t->ndim == r->ndim;
    for (int32_t k = 0; same && k < r->ndim; k++) same = t->shape[k] == r->shape[k];
    if (!same)
      return of_fail(OF_ERR_SHAPE, "stack: expects each tensor to be equal size, but got %s at "
                     "entry 1 and %s at entry %d", OF_SHAPE_STR(r), OF_SHAPE_STR(t), (int)i + 1);
    OF_CHECK(of_promote_for("stack", dt, t->dtype, &dt));
  }
  for (int32_t k = 0, j = 0; k <= r->ndim; k++) res->shape[k] = k == d ? n : r->shape[j++];
  res->ndim = r->ndim + 1;
  res->dtype = dt;
  *dout = d;
  return OF_OK;
}

static of_status stack_compute(of_tensor **ts, int32_t n, int32_t dim, of_tensor **out) {
  if (!ts || n <= 0) return of_fail(OF_ERR_ARG, "stack: expected a non-empty list of tensors");
  for (int32_t i = 0; i < n; i++)
    if (!ts[i]) return of_fail(OF_ERR_ARG, "stack: tensor %d of %d is NULL", (int)i + 1, (int)n);
  of_device dev;
  OF_CHECK(of_common_device("stack", ts, n, &dev));
  const of_tensor *r = ts[0];
  of_meta *ms, rm;
  int32_t d = 0;
  OF_CHECK(metas_of("stack", ts, n, &ms));
  of_status pst = stack_plan(ms, n, dim, &d, &rm);
  free(ms);
  OF_CHECK(pst);
  of_tensor *res;
  OF_CHECK(of_tensor_new(rm.shape, rm.ndim, rm.dtype, dev, &res));
  int64_t strides[OF_MAX_DIMS];
  for (int32_t k = 0, j = 0; k <= r->ndim; k++)
    if (k != d) strides[j++] = res->strides[k];
  for (int32_t i = 0; i < n && res->numel > 0; i++) {
    of_tensor v = stack_view(res, r->shape, strides, r->ndim, i * res->strides[d]);
    of_status st = of_copy_data(&v, ts[i]);
    if (st != OF_OK) {
      of_tensor_release(res);
      return st;
    }
  }
  res->storage->version = 0;
  *out = res;
  return OF_OK;
}

/* ---- tril / triu ---- */

static of_status tri_compute(of_tensor *x, int64_t k, int32_t upper, of_tensor **out) {
  const char *op = upper ? "triu" : "tril";
  OF_ROUTE(op, dev, dops, tri, x);
  if (x->ndim < 2)
    return of_fail(OF_ERR_SHAPE, "%s: input must have at least 2 dims, got shape %s (%s)", op,
                   OF_SHAPE_STR(x), OF_DT(x));
  of_tensor *res;
  if (dops) {   /* one pass: copy inside the triangle, zero outside */
    OF_CHECK(of_tensor_new(x->shape, x->ndim, x->dtype, dev, &res));
    of_status st = dops->tri(res, x, k, upper);
    if (st != OF_OK) {
      of_tensor_release(res);
      return st;
    }
    *out = res;
    return OF_OK;
  }
  OF_CHECK(of_clone_data(x, &res));   /* contiguous; now zero what falls outside */
  int64_t rows = x->shape[x->ndim - 2], cols = x->shape[x->ndim - 1];
  if (res->numel == 0) {
    *out = res;
    return OF_OK;
  }
  int64_t lim = rows + cols;   /* beyond this every k means "all" or "none" */
  if (k > lim) k = lim;
  if (k < -lim) k = -lim;
  int64_t nrows = res->numel / cols, es = of_dtype_size(res->dtype);
  char *base = of_ptr(res);
  int nt = res->numel >= OF_PARALLEL_GRAIN ? of_threads() : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t r = 0; r < nrows; r++) {
    int64_t i = r % rows, lo, hi;   /* zero columns [lo, hi) */
    if (upper) {
      lo = 0;
      hi = i + k < cols ? i + k : cols;
    } else {
      lo = i + k + 1 > 0 ? i + k + 1 : 0;
      hi = cols;
    }
    if (hi > lo) memset(base + (r * cols + lo) * es, 0, (size_t)((hi - lo) * es));
  }
  *out = res;
  return OF_OK;
}

/* ---- flip ---- */

static of_status flip_compute(of_tensor *x, const int32_t *dims, int32_t ndims,
                             of_tensor **out) {
  if (ndims < 0 || (ndims > 0 && !dims)) return of_fail(OF_ERR_ARG, "flip: bad list of dims");
  int64_t strides[OF_MAX_DIMS], offset = x->offset;
  memcpy(strides, x->strides, sizeof strides);
  bool seen[OF_MAX_DIMS] = {0};
  for (int32_t i = 0; i < ndims; i++) {
    int32_t d;
    OF_CHECK(of_norm_dim("flip", dims[i], x->ndim, &d));
    if (x->ndim == 0) continue;
    if (seen[d])
      return of_fail(OF_ERR_ARG, "flip: dim %d appears multiple times in the list of dims "
                     "(shape %s)", d + 1, OF_SHAPE_STR(x));
    seen[d] = true;
    if (x->shape[d] > 1) {
      offset += (x->shape[d] - 1) * x->strides[d];
      strides[d] = -x->strides[d];
    }
  }
  of_tensor v = stack_view(x, x->shape, strides, x->ndim, offset);
  return of_clone_data(&v, out);
}

/* ---- roll ---- */

/* Copies src rolled by shift[dims[i..n)] into dst (both stack views): along
 * each dim the last `s` entries go first, split into two blocks. */
static of_status roll_blocks(of_tensor *dst, of_tensor *src, const int32_t *dims,
                             const int64_t *shift, int32_t n, int32_t i) {
  if (i == n) return of_copy_data(dst, src);
  int32_t d = dims[i];
  int64_t len = src->shape[d], s = shift[i];
  of_tensor a = *dst, b = *src;   /* dst[s:] <- src[:len-s] */
  a.shape[d] = b.shape[d] = len - s;
  a.offset += s * dst->strides[d];
  a.numel = of_shape_numel(a.shape, a.ndim);
  b.numel = a.numel;
  OF_CHECK(roll_blocks(&a, &b, dims, shift, n, i + 1));
  a = *dst;   /* dst[:s] <- src[len-s:] */
  b = *src;
  a.shape[d] = b.shape[d] = s;
  b.offset += (len - s) * src->strides[d];
  a.numel = of_shape_numel(a.shape, a.ndim);
  b.numel = a.numel;
  return roll_blocks(&a, &b, dims, shift, n, i + 1);
}

static int64_t wrap_shift(int64_t s, int64_t len) {
  if (len <= 0) return 0;
  s %= len;
  return s < 0 ? s + len : s;
}

static of_status roll_compute(of_tensor *x, const int64_t *shifts, const int32_t *dims,
                             int32_t n, of_tensor **out) {
  if (!shifts) return of_fail(OF_ERR_ARG, "roll: shifts must be given");
  if (n < 0 || n > OF_MAX_DIMS)
    return of_fail(OF_ERR_ARG, "roll: %d dims given, at most %d", (int)n, OF_MAX_DIMS);
  of_tensor *res = NULL;
  if (n == 0 || !dims) {   /* roll the flattened tensor by shifts[0] */
    of_tensor *c;
    OF_CHECK(contig_data(x, &c));
    of_status st = of_tensor_new(x->shape, x->ndim, x->dtype, of_dev(x), &res);
    if (st == OF_OK && x->numel > 0) {
      int64_t len = x->numel, one = 1;
      int32_t d0 = 0;
      int64_t s = wrap_shift(shifts[0], len);
      of_tensor dv = stack_view(res, &len, &one, 1, res->offset);
      of_tensor sv = stack_view(c, &len, &one, 1, c->offset);
      st = roll_blocks(&dv, &sv, &d0, &s, 1, 0);
    }
    of_tensor_release(c);
    if (st != OF_OK) {
      if (res) of_tensor_release(res);
      return st;
    }
    res->storage->version = 0;
    *out = res;
    return OF_OK;
  }
  int64_t net[OF_MAX_DIMS] = {0};
  bool used[OF_MAX_DIMS] = {0};
  for (int32_t i = 0; i < n; i++) {
    int32_t d;
    OF_CHECK(of_norm_dim("roll", dims[i], x->ndim, &d));
    if (x->ndim == 0) continue;
    net[d] += shifts[i] % (x->shape[d] > 0 ? x->shape[d] : 1);
    used[d] = true;
  }
  int32_t rd[OF_MAX_DIMS], m = 0;
  int64_t rs[OF_MAX_DIMS];
  for (int32_t d = 0; d < x->ndim; d++) {
    int64_t s = used[d] ? wrap_shift(net[d], x->shape[d]) : 0;
    if (s != 0) {
      rd[m] = d;
      rs[m++] = s;
    }
  }
  OF_CHECK(of_tensor_new(x->shape, x->ndim, x->dtype, of_dev(x), &res));
  of_status st = OF_OK;
  if (x->numel > 0) {
    of_tensor dv = stack_view(res, res->shape, res->strides, res->ndim, res->offset);
    of_tensor sv = stack_view(x, x->shape, x->strides, x->ndim, x->offset);
    st = roll_blocks(&dv, &sv, rd, rs, m, 0);
  }
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  res->storage->version = 0;
  *out = res;
  return OF_OK;
}

/* ---- repeat (torch.Tensor.repeat) ---- */

/* repeat's result shape (and the input's shape as n dims, xs) from the
 * input's shape: the body and infer_repeat */
static of_status repeat_shape(const int64_t *tshape, int32_t tndim, const int64_t *repeats, int32_t n,
                              int64_t *xs, int64_t *shape) {
  char b[96], c[96];
  if (n < tndim)
    return of_fail(OF_ERR_SHAPE, "repeat: number of repeats (%d) cannot be smaller than the "
                   "number of dims of the tensor (%d, shape %s)", (int)n, (int)tndim,
                   of_shape_str(tshape, tndim, c, 96));
  if (n > OF_MAX_DIMS)
    return of_fail(OF_ERR_SHAPE, "repeat: %d repeats given, at most %d dims are supported",
                   (int)n, OF_MAX_DIMS);
  int32_t lead = n - tndim;
  for (int32_t i = 0; i < n; i++) {
    if (repeats[i] < 0)
      return of_fail(OF_ERR_ARG, "repeat: repeats must be non-negative, got %s for shape %s",
                     of_shape_str(repeats, n, b, 96), of_shape_str(tshape, tndim, c, 96));
    xs[i] = i < lead ? 1 : tshape[i - lead];
    if (!of_mul_ok(xs[i], repeats[i], &shape[i]))
      return of_fail(OF_ERR_SHAPE, "repeat: repeats %s of shape %s overflow the result's size",
                     of_shape_str(repeats, n, b, 96), of_shape_str(tshape, tndim, c, 96));
  }
  return OF_OK;
}
static of_status repeat_compute(of_tensor *x, const int64_t *repeats, int32_t n,
                               of_tensor **out) {
  OF_ROUTE("repeat", dev, dops, repeat, x);
  int64_t xs[OF_MAX_DIMS], shape[OF_MAX_DIMS];
  OF_CHECK(repeat_shape(x->shape, x->ndim, repeats, n, xs, shape));
  if (n == 0) return of_clone_data(x, out);
  int32_t lead = n - x->ndim;
  of_tensor *res, *c;
  OF_CHECK(of_tensor_new_as("repeat", shape, n, x->dtype, dev, &res));
  if (res->numel == 0) {
    *out = res;
    return OF_OK;
  }
  if (dops) {   /* x as an n-d view (stride 0 on the leading dims) */
    int64_t st0[OF_MAX_DIMS];
    for (int32_t i = 0; i < n; i++) st0[i] = i < lead ? 0 : x->strides[i - lead];
    of_tensor xv = stack_view(x, xs, st0, n, x->offset);
    of_status st = dops->repeat(res, &xv);
    if (st != OF_OK) {
      of_tensor_release(res);
      return st;
    }
    *out = res;
    return OF_OK;
  }
  of_status st = contig_data(x, &c);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  int64_t cst[OF_MAX_DIMS];   /* strides of the contiguous input, padded */
  of_contiguous_strides(xs, n, cst);
  int64_t es = of_dtype_size(x->dtype), last = xs[n - 1], reps = repeats[n - 1];
  int64_t rowbytes = last * es, nrows = res->numel / shape[n - 1];
  const char *src = of_ptr(c);
  char *dst = of_ptr(res);
  int nt = res->numel >= OF_PARALLEL_GRAIN ? of_threads() : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t r = 0; r < nrows; r++) {
    int64_t rem = r, off = 0;
    for (int32_t d = n - 2; d >= 0; d--) {
      int64_t cd = rem % shape[d];
      rem /= shape[d];
      off += (cd % xs[d]) * cst[d];
    }
    char *o = dst + r * reps * rowbytes;
    for (int64_t t = 0; t < reps; t++) memcpy(o + t * rowbytes, src + off * es, (size_t)rowbytes);
  }
  of_tensor_release(c);
  *out = res;
  return OF_OK;
}

/* ---- autograd ---- */

/* Records `def` for out = op(ins) when some input requires grad; on failure
 * the output is released. *node is NULL when nothing was recorded. */
static of_status record(const of_grad_def *def, of_tensor **ins, int32_t nin, of_tensor **out,
                        of_node **node) {
  *node = NULL;
  if (!of_grad_needed(ins, nin) || !of_dtype_is_floating((*out)->dtype)) return OF_OK;
  of_status st = of_record(def, ins, nin, out, 1, node);
  if (st != OF_OK) {
    of_tensor_release(*out);
    *out = NULL;
  }
  return st;
}

/* t in dtype dt (a grad back in its input's dtype); consumes t. */
static of_status cast_owned(of_tensor *t, of_dtype dt, of_tensor **out) {
  if (t->dtype == dt || !of_dtype_is_floating(dt)) {
    *out = t;
    return OF_OK;
  }
  of_status st = of_to_dtype(t, dt, out);
  of_tensor_release(t);
  return st;
}

/* cat: each input's grad is its slice of g along dim */
static of_status cat_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const int32_t d = OF_NODE_ATTRS(a_i1, n)->v;   /* normalized */
  const bool skip_legacy = n->out_meta[0].ndim != 1;
  int64_t pos = 0;
  for (int32_t k = 0; k < n->nin; k++) {
    const of_meta *m = &n->in_meta[k];
    if (skip_legacy && m->ndim == 1 && m->shape[0] == 0) {   /* skipped by the forward */
      if (n->needs[k]) OF_CHECK(of_zeros(m->shape, 1, m->dtype, of_dev(g[0]), &gi[k]));
      continue;
    }
    if (n->needs[k]) {
      of_tensor *v;
      OF_CHECK(of_narrow(g[0], d, pos, m->shape[d], &v));
      OF_CHECK(cast_owned(v, m->dtype, &gi[k]));
    }
    pos += m->shape[d];
  }
  return OF_OK;
}
static const of_grad_def cat_grad = {"CatBackward", cat_backward};

static of_status cat_body(of_tensor **ts, int32_t n, int32_t dim, of_tensor **out) {
  OF_CHECK(cat_compute(ts, n, dim, out));
  of_node *node;
  OF_CHECK(record(&cat_grad, ts, n, out, &node));
  if (node) {
    int32_t d;
    (void)of_norm_dim("cat", dim, (*out)->ndim, &d);   /* valid: the forward passed */
    a_i1 a = {d, 0};
    OF_NODE_KEEP(node, OPK_CAT, a);
  }
  return OF_OK;
}

/* stack: each input's grad is its entry of g along the new dim */
static of_status stack_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  for (int32_t k = 0; k < n->nin; k++) {
    if (!n->needs[k]) continue;
    of_tensor *v;
    OF_CHECK(of_select(g[0], OF_NODE_ATTRS(a_i1, n)->v, k, &v));
    OF_CHECK(cast_owned(v, n->in_meta[k].dtype, &gi[k]));
  }
  return OF_OK;
}
static const of_grad_def stack_grad = {"StackBackward", stack_backward};

static of_status stack_body(of_tensor **ts, int32_t n, int32_t dim, of_tensor **out) {
  OF_CHECK(stack_compute(ts, n, dim, out));
  of_node *node;
  OF_CHECK(record(&stack_grad, ts, n, out, &node));
  if (node) {
    int32_t d;
    (void)of_norm_dim("stack", dim, (*out)->ndim, &d);
    a_i1 a = {d, 0};
    OF_NODE_KEEP(node, OPK_STACK, a);
  }
  return OF_OK;
}

/* tril / triu: the same triangle of g */
static of_status tri_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const a_tri *a = OF_NODE_ATTRS(a_tri, n);
  return of_tri(g[0], a->k, a->upper, &gi[0]);
}
static const of_grad_def tril_grad = {"TrilBackward", tri_backward};
static const of_grad_def triu_grad = {"TriuBackward", tri_backward};

static of_status tri_body(of_tensor *x, int64_t k, int32_t upper, of_tensor **out) {
  OF_CHECK(tri_compute(x, k, upper, out));
  of_node *node;
  OF_CHECK(record(upper ? &triu_grad : &tril_grad, &x, 1, out, &node));
  if (node) {
    a_tri a;
    OF_ZERO(a);
    a.k = k;
    a.upper = upper;
    OF_NODE_KEEP(node, OPK_TRI, a);
  }
  return OF_OK;
}

/* flip: flip g back over the same (normalized) dims */
static of_status flip_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const a_dims *a = OF_NODE_ATTRS(a_dims, n);
  return of_flip(g[0], a->dims, a->n, &gi[0]);
}
static const of_grad_def flip_grad = {"FlipBackward", flip_backward};

static of_status flip_body(of_tensor *x, const int32_t *dims, int32_t ndims, of_tensor **out) {
  OF_CHECK(flip_compute(x, dims, ndims, out));
  of_node *node;
  OF_CHECK(record(&flip_grad, &x, 1, out, &node));
  if (node) {
    a_dims a;
    OF_ZERO(a);
    for (int32_t k = 0; x->ndim > 0 && k < ndims && a.n < OF_MAX_DIMS; k++) {
      int32_t d;
      (void)of_norm_dim("flip", dims[k], x->ndim, &d);
      a.dims[a.n++] = d;
    }
    OF_NODE_KEEP(node, OPK_FLIP, a);
  }
  return OF_OK;
}

/* roll: roll g back. The node keeps the forward as an equivalent a_roll:
 * n = 0 for the flattened form (shifts[0] its shift, in 0..numel), else the
 * dims with a nonzero net shift s (normalized, in 0..len), each rolled back
 * by len - s. */
static of_status roll_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const a_roll *a = OF_NODE_ATTRS(a_roll, n);
  const of_meta *x = &n->in_meta[0];
  int64_t shifts[OF_MAX_DIMS] = {0};
  if (a->n == 0) {
    int64_t numel = 1;
    for (int32_t d = 0; d < x->ndim; d++) numel *= x->shape[d];
    shifts[0] = a->shifts[0] ? numel - a->shifts[0] : 0;
    return of_roll(g[0], shifts, NULL, 0, &gi[0]);
  }
  for (int32_t k = 0; k < a->n; k++) shifts[k] = x->shape[a->dims[k]] - a->shifts[k];
  return of_roll(g[0], shifts, a->dims, a->n, &gi[0]);
}
static const of_grad_def roll_grad = {"RollBackward", roll_backward};

static of_status roll_body(of_tensor *x, const int64_t *shifts, const int32_t *dims, int32_t n,
                       of_tensor **out) {
  OF_CHECK(roll_compute(x, shifts, dims, n, out));
  of_node *node;
  OF_CHECK(record(&roll_grad, &x, 1, out, &node));
  if (!node) return OF_OK;
  a_roll a;
  OF_ZERO(a);
  if (n == 0 || !dims) {
    a.shifts[0] = wrap_shift(shifts[0], x->numel);
    OF_NODE_KEEP(node, OPK_ROLL, a);
    return OF_OK;
  }
  int64_t net[OF_MAX_DIMS] = {0};
  for (int32_t i = 0; i < n && x->ndim > 0; i++) {
    int32_t d;
    (void)of_norm_dim("roll", dims[i], x->ndim, &d);
    net[d] += shifts[i] % (x->shape[d] > 0 ? x->shape[d] : 1);
  }
  for (int32_t d = 0; d < x->ndim; d++) {
    int64_t s = wrap_shift(net[d], x->shape[d]);
    if (s == 0) continue;
    a.dims[a.n] = d;
    a.shifts[a.n++] = s;
  }
  OF_NODE_KEEP(node, OPK_ROLL, a);
  return OF_OK;
}

/* repeat: g summed over the copies. Dim by dim, g (as [A, r, s * B]) is
 * summed over r; each step keeps at most three dims, so any rank works. */
static of_status repeat_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const of_meta *m = &n->in_meta[0];
  const a_roll *a = OF_NODE_ATTRS(a_roll, n);   /* shifts: the repeats */
  const int32_t nd = n->out_meta[0].ndim, lead = nd - m->ndim;
  int64_t cur[OF_MAX_DIMS];
  memcpy(cur, n->out_meta[0].shape, sizeof cur);
  of_tensor *t = g[0];
  of_tensor_retain(t);
  of_status st = OF_OK;
  for (int32_t i = 0; i < nd && st == OF_OK; i++) {
    int64_t r = a->shifts[i], xs = i < lead ? 1 : m->shape[i - lead];
    if (r == 1) continue;
    int64_t sh[3] = {1, r, xs};
    for (int32_t k = 0; k < i; k++) sh[0] *= cur[k];
    for (int32_t k = i + 1; k < nd; k++) sh[2] *= cur[k];
    of_tensor *v = NULL, *sum = NULL;
    const int32_t one = 1;
    st = of_reshape(t, sh, 3, &v);
    if (st == OF_OK) st = of_reduce(OF_RED_SUM, v, &one, 1, 0, 0, -1, &sum);
    of_tensor_release(v);
    of_tensor_release(t);
    t = sum;
    cur[i] = xs;
  }
  if (st == OF_OK) st = of_reshape(t, m->shape, m->ndim, &gi[0]);
  of_tensor_release(t);
  return st;
}
static const of_grad_def repeat_grad = {"RepeatBackward", repeat_backward};

static of_status repeat_body(of_tensor *x, const int64_t *repeats, int32_t n, of_tensor **out) {
  OF_CHECK(repeat_compute(x, repeats, n, out));
  of_node *node;
  OF_CHECK(record(&repeat_grad, &x, 1, out, &node));
  if (node) {
    a_roll a;
    OF_ZERO(a);
    a.n = n;
    of_copy_i64(a.shifts, repeats, n);
    OF_NODE_KEEP(node, OPK_REPEAT, a);
  }
  return OF_OK;
}

/* ---- entry points (dispatch), run functions and table rows ---- */
static of_status pack_cat(int32_t op, of_tensor **ts, int32_t n, int32_t dim, of_tensor **out) {
  a_i1 a = {dim, 0};
  return OF_RECORD(op, a, ts, n, out, 1);
}
of_status of_cat(of_tensor **ts, int32_t n, int32_t dim, of_tensor **out) {
  OF_DISPATCH(cat_body(ts, n, dim, out), pack_cat(OPK_CAT, ts, n, dim, out));
}
of_status of_stack(of_tensor **ts, int32_t n, int32_t dim, of_tensor **out) {
  OF_DISPATCH(stack_body(ts, n, dim, out), pack_cat(OPK_STACK, ts, n, dim, out));
}
static of_status run_cat(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_i1);
  for (int32_t k = 0; k < n->nin; k++) OF_NEED(ins[k], "input");
  if (n->op == OPK_CAT) OF_RUN1(of_cat(ins, n->nin, a->v, OF_R));
  OF_RUN1(of_stack(ins, n->nin, a->v, OF_R));
}

static of_status pack_tri(of_tensor *x, int64_t k, int32_t upper, of_tensor **out) {
  a_tri a;
  OF_ZERO(a);
  a.k = k;
  a.upper = upper;
  return OF_RECORD(OPK_TRI, a, &x, 1, out, 1);
}
of_status of_tri(of_tensor *x, int64_t k, int32_t upper, of_tensor **out) {
  OF_DISPATCH(tri_body(x, k, upper, out), pack_tri(x, k, upper, out));
}
static of_status run_tri(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_tri);
  OF_RUN1(of_tri(ins[0], a->k, a->upper, OF_R));
}

static of_status pack_flip(of_tensor *x, const int32_t *dims, int32_t ndims, of_tensor **out) {
  a_dims a;
  OF_ZERO(a);
  a.n = ndims;
  of_copy_i32(a.dims, dims, ndims);
  return OF_RECORD(OPK_FLIP, a, &x, 1, out, 1);
}
of_status of_flip(of_tensor *x, const int32_t *dims, int32_t ndims, of_tensor **out) {
  OF_DISPATCH(flip_body(x, dims, ndims, out), pack_flip(x, dims, ndims, out));
}
static of_status run_flip(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_dims);
  OF_NEED(NDIM_OK(a->n), "ndims");
  OF_RUN1(of_flip(ins[0], a->dims, a->n, OF_R));
}

static of_status pack_roll(int32_t op, of_tensor *x, const int64_t *shifts, const int32_t *dims,
                          int32_t n, of_tensor **out) {
  a_roll a;
  OF_ZERO(a);
  if (op == OPK_ROLL && (n == 0 || !dims)) {
    /* roll of the flattened tensor: one shift, no dims (n = 0) */
    a.shifts[0] = shifts ? shifts[0] : 0;
    return OF_RECORD(op, a, &x, 1, out, 1);
  }
  a.n = n;
  of_copy_i64(a.shifts, shifts, n);
  of_copy_i32(a.dims, dims, dims ? n : 0);
  return OF_RECORD(op, a, &x, 1, out, 1);
}
of_status of_roll(of_tensor *x, const int64_t *shifts, const int32_t *dims, int32_t n,
                  of_tensor **out) {
  OF_DISPATCH(roll_body(x, shifts, dims, n, out), pack_roll(OPK_ROLL, x, shifts, dims, n, out));
}
of_status of_repeat(of_tensor *x, const int64_t *repeats, int32_t n, of_tensor **out) {
  OF_DISPATCH(repeat_body(x, repeats, n, out), pack_roll(OPK_REPEAT, x, repeats, NULL, n, out));
}
static of_status run_roll(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_roll);
  OF_NEED(NDIM_OK(a->n), "count");
  if (n->op == OPK_REPEAT) OF_RUN1(of_repeat(ins[0], a->shifts, a->n, OF_R));
  OF_RUN1(of_roll(ins[0], a->shifts, a->dims, a->n, OF_R));
}

/* a loaded cat / stack node's result, by the bodies' cat_plan / stack_plan
 * (the loader calls it for up to OF_BACKWARD_MAX_IN inputs) */
static of_status infer_cat(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  int32_t d, ref;
  if (nin <= 0) return of_fail(OF_ERR_ARG, "cat: expected a non-empty list of tensors");
  return cat_plan(ins, nin, ((const a_i1 *)p)->v, &d, &ref, &outs[0]);
}
static of_status infer_stack(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  int32_t d;
  if (nin <= 0) return of_fail(OF_ERR_ARG, "stack: expected a non-empty list of tensors");
  return stack_plan(ins, nin, ((const a_i1 *)p)->v, &d, &outs[0]);
}
OF_OP_IMPL_INFER(CAT, run_cat, NULL, NULL, of_describe_i1, infer_cat);
OF_OP_IMPL_INFER(STACK, run_cat, NULL, NULL, of_describe_i1, infer_stack);
/* loaded tri / flip / roll nodes: the input's shape and dtype (their dims
 * are range-checked with the record); tri needs 2 dims; repeat:
 * repeat_shape */
static of_status infer_same_shape(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)p;
  (void)nin;
  outs[0] = ins[0];
  return OF_OK;
}
static of_status infer_tri(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  char b[96];
  if (ins[0].ndim < 2)
    return of_fail(OF_ERR_SHAPE, "%s: input must have at least 2 dims, got shape %s (%s)",
                   ((const a_tri *)p)->upper ? "triu" : "tril", of_shape_str(ins[0].shape, ins[0].ndim, b, 96),
                   of_dtype_name(ins[0].dtype));
  return infer_same_shape(p, nin, ins, outs);
}
static of_status infer_repeat(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_roll *a = p;
  int64_t xs[OF_MAX_DIMS];
  (void)nin;
  if (!NDIM_OK(a->n)) return of_fail(OF_ERR_ARG, "repeat: bad count %d", (int)a->n);
  OF_CHECK(repeat_shape(ins[0].shape, ins[0].ndim, a->shifts, a->n, xs, outs[0].shape));
  if (a->n == 0) {
    outs[0] = ins[0];
    return OF_OK;
  }
  outs[0].ndim = a->n;
  outs[0].dtype = ins[0].dtype;
  return OF_OK;
}

OF_OP_IMPL_INFER(TRI, run_tri, NULL, NULL, NULL, infer_tri);
OF_OP_IMPL_INFER(FLIP, run_flip, NULL, NULL, of_describe_dims, infer_same_shape);
OF_OP_IMPL_INFER(ROLL, run_roll, NULL, NULL, NULL, infer_same_shape);
OF_OP_IMPL_INFER(REPEAT, run_roll, NULL, NULL, NULL, infer_repeat);
