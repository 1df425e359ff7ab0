/* tensor.c -- storage, tensor headers, accessors and views. */
#include "../internal.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static _Atomic int64_t next_storage_id = 1;

static of_storage *storage_new(int64_t nbytes, of_device dev) {
  of_storage *s = of_pool_get(OF_POOL_STORAGE, sizeof *s);
  if (!s) {
    of_fail(OF_ERR_OOM, "tensor: out of memory for a storage header");
    return NULL;
  }
  s->data = of_alloc(dev, nbytes);
  if (!s->data) {
    of_pool_put(OF_POOL_STORAGE, s);
    return NULL;
  }
  s->refcount = 1;
  s->nbytes = nbytes;
  s->device = dev;
  s->id = atomic_fetch_add(&next_storage_id, 1);
  s->version = 0;
  s->deleter = NULL;
  s->deleter_ctx = NULL;
  s->frozen = false;
  return s;
}

static void storage_release(of_storage *s) {
  if (__atomic_sub_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  if (s->deleter) s->deleter(s->data, s->deleter_ctx);
  else if (s->data) of_free(s->device, s->data, s->nbytes);
  of_pool_put(OF_POOL_STORAGE, s);
}

/* Saturates at INT64_MAX instead of wrapping: a shape too large to count is
 * then refused by of_check_shape wherever a tensor of it would be made. */
int64_t of_shape_numel(const int64_t *shape, int32_t ndim) {
  int64_t n = 1;
  for (int32_t i = 0; i < ndim; i++) if (shape[i] == 0) return 0;
  for (int32_t i = 0; i < ndim; i++)
    if (!of_mul_ok(n, shape[i], &n)) return INT64_MAX;
  return n;
}

void of_contiguous_strides(const int64_t *shape, int32_t ndim, int64_t *strides) {
  int64_t s = 1;
  for (int32_t i = ndim - 1; i >= 0; i--) {
    strides[i] = s;
    if (!of_mul_ok(s, shape[i] > 1 ? shape[i] : 1, &s)) s = INT64_MAX;
  }
}

static of_tensor *header_new(void) {
  of_tensor *t = of_pool_get(OF_POOL_TENSOR, sizeof *t);
  if (!t) of_fail(OF_ERR_OOM, "tensor: out of memory for a tensor header");
  return t;
}

of_status of_tensor_check_new(const char *op, const int64_t *shape, int32_t ndim, of_dtype dt,
                              int64_t *numel) {
  int64_t n;
  OF_CHECK(of_check_shape(op, shape, ndim, &n));
  if (dt < 0 || dt >= OF_NUM_DTYPES)
    return of_fail(OF_ERR_DTYPE, "%s: unknown dtype %d", op, (int)dt);
  if (n > INT64_MAX / 16 && of_dtype_size(dt) > 8) {
    char b[96];
    return of_fail(OF_ERR_SHAPE, "%s: shape %s has more elements than a %s tensor can hold "
                   "(at most 2^59)", op, of_shape_str(shape, ndim, b, 96), of_dtype_name(dt));
  }
  if (numel) *numel = n;
  return OF_OK;
}

of_status of_tensor_new_as(const char *op, const int64_t *shape, int32_t ndim, of_dtype dt,
                           of_device dev, of_tensor **out) {
  int64_t numel;
  OF_CHECK(of_tensor_check_new(op, shape, ndim, dt, &numel));
  of_tensor *t = header_new();
  if (!t) return OF_ERR_OOM;
  /* numel <= OF_MAX_NUMEL (2^59 for complex128): the byte count cannot overflow */
  t->storage = storage_new(numel * of_dtype_size(dt), dev);
  if (!t->storage) {
    of_pool_put(OF_POOL_TENSOR, t);
    char b[96], msg[1024];
    snprintf(msg, sizeof msg, "%s", of_last_error());
    return of_fail(OF_ERR_OOM, "%s: a tensor of shape %s and dtype %s: %s", op,
                   of_shape_str(shape, ndim, b, 96), of_dtype_name(dt), msg);
  }
  t->refcount = 1;
  of_tensor_clear_autograd(t);
  t->offset = 0;
  t->numel = numel;
  t->ndim = ndim;
  t->dtype = dt;
  for (int32_t i = 0; i < ndim; i++) t->shape[i] = shape[i];
  of_contiguous_strides(shape, ndim, t->strides);
  *out = t;
  return OF_OK;
}

of_status of_tensor_new(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                        of_tensor **out) {
  return of_tensor_new_as("empty", shape, ndim, dt, dev, out);
}

of_tensor *of_tensor_alias(const of_tensor *src, const int64_t *shape,
                           const int64_t *strides, int32_t ndim, int64_t offset) {
  /* views check their shapes with the op's name; this is the backstop that
   * keeps every header's numel exact */
  if (of_check_shape("view", shape, ndim, NULL) != OF_OK) return NULL;
  of_tensor *t = header_new();
  if (!t) return NULL;
  t->refcount = 1;
  of_tensor_clear_autograd(t);
  t->storage = src->storage;
  __atomic_add_fetch(&src->storage->refcount, 1, __ATOMIC_RELAXED);
  t->offset = offset;
  t->ndim = ndim;
  t->dtype = src->dtype;
  for (int32_t i = 0; i < ndim; i++) {
    t->shape[i] = shape[i];
    t->strides[i] = strides[i];
  }
  t->numel = of_shape_numel(shape, ndim);
  return t;
}

void of_tensor_retain(of_tensor *t) {
  if (t) __atomic_add_fetch(&t->refcount, 1, __ATOMIC_RELAXED);
}

void of_tensor_release(of_tensor *t) {
  if (!t || __atomic_sub_fetch(&t->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  of_tensor_free_autograd(t);
  storage_release(t->storage);
  of_pool_put(OF_POOL_TENSOR, t);
}

void of_tensor_release_many(of_tensor **ts, int64_t n) {
  for (int64_t i = 0; i < n; i++) of_tensor_release(ts[i]);
}

of_dtype of_tensor_dtype(const of_tensor *t) { return t->dtype; }
of_device of_tensor_device(const of_tensor *t) { return t->storage->device; }
int32_t of_tensor_ndim(const of_tensor *t) { return t->ndim; }
int64_t of_tensor_size(const of_tensor *t, int32_t d) {
  return d >= 0 && d < t->ndim ? t->shape[d] : -1;
}
int64_t of_tensor_stride(const of_tensor *t, int32_t d) {
  return d >= 0 && d < t->ndim ? t->strides[d] : -1;
}
const int64_t *of_tensor_shape(const of_tensor *t) { return t->shape; }
const int64_t *of_tensor_strides(const of_tensor *t) { return t->strides; }
int64_t of_tensor_numel(const of_tensor *t) { return t->numel; }
int64_t of_tensor_offset(const of_tensor *t) { return t->offset; }
void *of_tensor_data(const of_tensor *t) { return of_ptr(t); }
int64_t of_tensor_storage_id(const of_tensor *t) { return t->storage->id; }
int64_t of_tensor_version(const of_tensor *t) { return t->storage->version; }

int32_t of_tensor_is_contiguous(const of_tensor *t) {
  int64_t s = 1;
  for (int32_t i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != s) return 0;
    s *= t->shape[i];
  }
  return 1;
}

of_status of_norm_dim(const char *op, int32_t dim, int32_t ndim, int32_t *out) {
  int32_t n = ndim > 0 ? ndim : 1;
  if (dim < -n || dim >= n)
    return of_fail(OF_ERR_INDEX, "%s: dim %d out of range for a %d-d tensor "
                   "(1-based: expected %d..%d or -%d..-1)", op, dim >= 0 ? dim + 1 : dim,
                   (int)ndim, 1, n, n);
  *out = dim < 0 ? dim + n : dim;
  return OF_OK;
}

/* A tensor some of whose elements share a memory location: an in-place
 * write would apply to that location once per element (expand(3, 4):add_(1)
 * wrote 3s; a window view of x:unfold(1, 2, 1) adds twice to its inner
 * elements). PyTorch refuses the stride-0 case and lets the others through
 * ("too hard" to decide); here the others are decided too:
 *   - dims of size 1 never overlap; a stride-0 dim of size > 1 always does;
 *   - sorted by |stride|, if each stride passes the span of the smaller dims
 *     (|stride_i| > sum_{j<i} (size_j - 1) |stride_j|) no two elements meet:
 *     every dense, transposed, sliced or permuted view, at no cost;
 *   - otherwise (interleaved strides from as_strided / unfold) the element
 *     offsets are listed and sorted, up to OVERLAP_EXACT elements; a larger
 *     view of that kind is let through, as PyTorch does. */
enum { OVERLAP_EXACT = 1 << 20 };
static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}
static bool offsets_repeat(const int64_t *shape, const int64_t *strides, int32_t nd, int64_t n) {
  int64_t *off = malloc(sizeof *off * (size_t)n);
  if (!off) return false;   /* undecided: let it through, as for larger views */
  int64_t idx[OF_MAX_DIMS] = {0}, cur = 0;
  for (int64_t e = 0; e < n; e++) {
    off[e] = cur;
    for (int32_t d = nd - 1; d >= 0; d--) {
      if (++idx[d] < shape[d]) { cur += strides[d]; break; }
      cur -= (shape[d] - 1) * strides[d];
      idx[d] = 0;
    }
  }
  qsort(off, (size_t)n, sizeof *off, cmp_i64);
  bool rep = false;
  for (int64_t e = 1; e < n && !rep; e++) rep = off[e] == off[e - 1];
  free(off);
  return rep;
}
of_status of_check_overlap(const char *op, const of_tensor *into) {
  int64_t shape[OF_MAX_DIMS], st[OF_MAX_DIMS], n = 1;
  int32_t nd = 0;
  for (int32_t d = 0; d < into->ndim; d++) {
    if (into->shape[d] == 0) return OF_OK;
    if (into->shape[d] == 1) continue;
    if (into->strides[d] == 0)
      return of_fail(OF_ERR_ARG, "%s: unsupported operation: more than one element of the "
                     "written-to tensor %s refers to a single memory location (dim %d is "
                     "expanded); clone() it before writing to it", op, OF_SHAPE_STR(into),
                     (int)d + 1);
    shape[nd] = into->shape[d];
    st[nd++] = into->strides[d] < 0 ? -into->strides[d] : into->strides[d];
    n *= into->shape[d];   /* a tensor's numel: checked at its making */
  }
  /* insertion sort by stride (at most 8 dims), then the span test */
  for (int32_t i = 1; i < nd; i++)
    for (int32_t j = i; j > 0 && st[j] < st[j - 1]; j--) {
      int64_t t = st[j]; st[j] = st[j - 1]; st[j - 1] = t;
      t = shape[j]; shape[j] = shape[j - 1]; shape[j - 1] = t;
    }
  int64_t span = 0;
  bool disjoint = true;
  for (int32_t i = 0; i < nd && disjoint; i++) {
    disjoint = st[i] > span;
    span += (shape[i] - 1) * st[i];   /* below the storage's size: no overflow */
  }
  if (disjoint || n > OVERLAP_EXACT || !offsets_repeat(shape, st, nd, n)) return OF_OK;
  char sb[96];
  return of_fail(OF_ERR_ARG, "%s: unsupported operation: more than one element of the "
                 "written-to tensor %s refers to a single memory location (strides %s "
                 "overlap); clone() it before writing to it", op, OF_SHAPE_STR(into),
                 of_shape_str(into->strides, into->ndim, sb, sizeof sb));
}

of_status of_prepare_out(const char *op, of_tensor *into, const int64_t *shape,
                         int32_t ndim, of_dtype dt, of_tensor **out) {
  if (!into) return of_tensor_new_as(op, shape, ndim, dt, OF_CPU, out);
  OF_CHECK(of_check_overlap(op, into));
  bool same = into->ndim == ndim;
  for (int32_t i = 0; same && i < ndim; i++) same = into->shape[i] == shape[i];
  if (!same) {
    char b[96];
    return of_fail(OF_ERR_SHAPE, "%s: output has shape %s, the result needs %s", op,
                   OF_SHAPE_STR(into), of_shape_str(shape, ndim, b, 96));
  }
  if (into->dtype != dt && !(of_dtype_is_floating(into->dtype) || !of_dtype_is_floating(dt)))
    return of_fail(OF_ERR_DTYPE, "%s: result type %s can't be cast to the output dtype %s",
                   op, of_dtype_name(dt), OF_DT(into));
  of_tensor_retain(into);
  *out = into;
  return OF_OK;
}

/* A tensor over memory the caller owns (of_from_blob, pinned memory). */
static void no_delete(void *data, void *ctx) { (void)data; (void)ctx; }
of_status of_tensor_wrap_blob(void *data, const int64_t *shape, const int64_t *strides, int32_t ndim,
                             of_dtype dt, of_deleter deleter, void *ctx, of_tensor **out) {
  if (!data) return of_fail(OF_ERR_ARG, "from_blob: data pointer is NULL");
  if (dt < 0 || dt >= OF_NUM_DTYPES) return of_fail(OF_ERR_DTYPE, "from_blob: unknown dtype %d", (int)dt);
  OF_CHECK(of_check_shape("from_blob", shape, ndim, NULL));
  int64_t cs[OF_MAX_DIMS], hi = 0, ext;
  if (!strides) {
    of_contiguous_strides(shape, ndim, cs);
    strides = cs;
  }
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] < 0 || strides[i] < 0)
      return of_fail(OF_ERR_SHAPE, "from_blob: negative size or stride at dim %d", (int)i + 1);
    if (shape[i] > 0 && !(of_mul_ok(shape[i] - 1, strides[i], &ext) && of_add_ok(hi, ext, &hi) &&
                          hi < OF_MAX_NUMEL))
      return of_fail(OF_ERR_SHAPE, "from_blob: the strides reach past 2^60 elements (dim %d)",
                     (int)i + 1);
  }
  of_storage *s = of_pool_get(OF_POOL_STORAGE, sizeof *s);
  of_tensor *t = header_new();
  if (!s || !t) {
    if (s) of_pool_put(OF_POOL_STORAGE, s);
    if (t) of_pool_put(OF_POOL_TENSOR, t);
    return of_fail(OF_ERR_OOM, "from_blob: out of memory");
  }
  static int64_t blob_ids = -1;   /* negative ids: never equal to allocator storages */
  *s = (of_storage){.refcount = 1, .data = data, .nbytes = (hi + 1) * of_dtype_size(dt),
                    .device = OF_CPU, .id = __atomic_sub_fetch(&blob_ids, 1, __ATOMIC_RELAXED),
                    .deleter = deleter ? deleter : no_delete, .deleter_ctx = ctx};
  t->refcount = 1;
  of_tensor_clear_autograd(t);
  t->storage = s;
  t->offset = 0;
  t->ndim = ndim;
  t->dtype = dt;
  for (int32_t i = 0; i < ndim; i++) {
    t->shape[i] = shape[i];
    t->strides[i] = strides[i];
  }
  t->numel = of_shape_numel(shape, ndim);
  *out = t;
  return OF_OK;
}
