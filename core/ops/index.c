/* index.c -- ops driven by index values: gather, scatter, index_select,
 * index_add, sort, topk, one_hot, masked_select, nonzero.
 *
 * Index tensors are int64 (int32 accepted). Every index value is checked
 * against its range before anything is read or written through it, and the
 * caller's `index_base` (1 from Lua) is applied here. Ops that only move data
 * copy elements by their size, so every dtype works, halves included.
 * The kernels (*_compute) move data through the of_*_data helpers, which
 * never record; the public entry points at the end of the file record the
 * backward nodes, with rules written in public ops (double backward works). */
#include "autograd.h"
#include "../device.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include "family.h"

/* t itself if contiguous, else a contiguous copy (never a stack header). */
static of_status contig_data(of_tensor *t, of_tensor **out) {
  if (of_tensor_is_contiguous(t)) {
    of_tensor_retain(t);
    *out = t;
    return OF_OK;
  }
  return of_clone_data(t, out);
}

/* t on dev: t itself, or a copy (a 0-d CPU index may join a device op). */
static of_status on_dev(of_tensor *t, of_device dev, of_tensor **out) {
  if (!t || of_dev(t) == dev) {
    if (t) of_tensor_retain(t);
    *out = t;
    return OF_OK;
  }
  return of_to_device(t, dev, 0, out);
}

/* Data operands of a device op must live there (a 0-d CPU tensor may join
 * as a scalar only where the op reads it as one). */
static of_status need_on(const char *op, const of_tensor *t, of_device dev) {
  if (!t || of_dev(t) == dev) return OF_OK;
  return of_fail(OF_ERR_DEVICE, "%s: expected all tensors on %s, got a %s tensor %s; move it "
                 "with :to()", op, OF_DEV_STR(dev), OF_DEV_STR(of_dev(t)), OF_SHAPE_STR(t));
}

/* ---- index checks ---- */

/* on shapes and dtypes (of_meta), so a loaded graph's infer hooks run the very check */
static of_status check_index_dtype_of(const char *op, const of_meta *idx) {
  if (idx->dtype == OF_INT64 || idx->dtype == OF_INT32) return OF_OK;
  return of_fail(OF_ERR_DTYPE, "%s: index must be an int64 (or int32) tensor, got %s (shape %s)",
                 op, OF_DT(idx), OF_SHAPE_STR(idx));
}

static inline int64_t load_idx(const char *p, bool i32) {
  return i32 ? (int64_t) * (const int32_t *)p : *(const int64_t *)p;
}

/* dim < 0: the range is a number of classes (one_hot). */
static of_status range_error(const char *op, int64_t v, int32_t dim, int64_t size,
                             int64_t base) {
  char where[64];
  if (dim >= 0) snprintf(where, sizeof where, "dim %d of size %lld", dim + 1, (long long)size);
  else snprintf(where, sizeof where, "num_classes %lld", (long long)size);
  if (size <= 0)
    return of_fail(OF_ERR_INDEX, "%s: index %lld out of range for %s (no index is valid)", op,
                   (long long)v, where);
  return of_fail(OF_ERR_INDEX, "%s: index %lld out of range for %s (%s: expected %lld..%lld)",
                 op, (long long)v, where,
                 base == 1 ? "1-based" : (base == 0 ? "0-based" : "with index base"),
                 (long long)base, (long long)(base + size - 1));
}

/* Every value of idx must lie in [base, base + size); the error names the
 * first bad one in row-major order. */
static of_status check_range(const char *op, of_tensor *idx, int32_t dim, int64_t size,
                             int64_t base) {
  if (idx->numel == 0) return OF_OK;
  of_tensor *c;
  OF_CHECK(contig_data(idx, &c));
  const bool i32 = c->dtype == OF_INT32;
  const int64_t es = i32 ? 4 : 8, n = c->numel;
  const char *p = of_ptr(c);
  int64_t first = n;
  int nt = n >= OF_PARALLEL_GRAIN ? of_threads() : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) reduction(min : first) schedule(static)
  for (int64_t i = 0; i < n; i++) {
    uint64_t u = (uint64_t)load_idx(p + i * es, i32) - (uint64_t)base;
    if (u >= (uint64_t)size && i < first) first = i;
  }
  of_status st = OF_OK;
  if (first < n) st = range_error(op, load_idx(p + first * es, i32), dim, size, base);
  of_tensor_release(c);
  return st;
}

/* ---- line iteration ----
 * Walks every line along dim `line` of an iteration shape (the index's, for
 * gather/scatter) with up to three operands; a kernel handles one line and
 * reads the operands' strides along it from st[k][line]. Lines are visited
 * by an odometer over the other dims; with `inner` >= 0 that dim turns
 * fastest and threads split only between groups of lines that differ in
 * nothing but `inner` -- scatter writes along `inner` through the index, so
 * two lines of one group may hit the same cell, two groups never. */
typedef struct lines {
  int32_t ndim, line, nops, nord;
  int32_t order[OF_MAX_DIMS];   /* odometer dims, outermost first */
  int64_t group;                /* lines per indivisible group */
  int64_t shape[OF_MAX_DIMS];
  int64_t st[3][OF_MAX_DIMS];   /* bytes */
  char *base[3];
} lines;

typedef void (*line_fn)(const lines *L, char **p, void *ctx);

/* The last dim of size > 1 (the best line for memory access), else `dflt`. */
static int32_t best_line(const int64_t *shape, int32_t ndim, int32_t dflt) {
  for (int32_t d = ndim - 1; d >= 0; d--)
    if (shape[d] > 1) return d;
  return dflt;
}

/* 0-d tensors are walked as shape [1]. */
static void lines_init(lines *L, const int64_t *shape, int32_t ndim, int32_t line,
                       int32_t inner) {
  memset(L, 0, sizeof *L);
  L->ndim = ndim > 0 ? ndim : 1;
  L->line = line;
  for (int32_t d = 0; d < L->ndim; d++) L->shape[d] = ndim > 0 ? shape[d] : 1;
  if (inner == line) inner = -1;
  for (int32_t d = 0; d < L->ndim; d++)
    if (d != line && d != inner) L->order[L->nord++] = d;
  if (inner >= 0) L->order[L->nord++] = inner;
  L->group = inner >= 0 ? L->shape[inner] : 1;
}

/* Operand k: tensor t (strides in elements, stride 0 when t is 0-d). */
static void lines_op(lines *L, int32_t k, const of_tensor *t) {
  int64_t es = of_dtype_size(t->dtype);
  for (int32_t d = 0; d < L->ndim; d++) L->st[k][d] = t->ndim > 0 ? t->strides[d] * es : 0;
  L->base[k] = of_ptr(t);
  if (k + 1 > L->nops) L->nops = k + 1;
}

static int64_t lines_count(const lines *L) {
  int64_t total = of_shape_numel(L->shape, L->ndim);
  return total == 0 ? 0 : total / L->shape[L->line];
}

/* Threads run_lines will use (<= of_threads()); kernels size scratch by it. */
static int lines_threads(const lines *L) {
  int64_t nl = lines_count(L), ng = nl / (L->group > 0 ? L->group : 1);
  if (nl * L->shape[L->line] < OF_PARALLEL_GRAIN || ng < 2) return 1;
  int64_t nt = of_threads();
  return (int)(nt < ng ? nt : ng);
}

static void run_lines(const lines *L, line_fn fn, void *ctx) {
  int64_t nl = lines_count(L);
  if (nl == 0) return;
  int nt = lines_threads(L);
  const int64_t ng = nl / L->group;
  const int32_t nops = L->nops, nord = L->nord;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
    int64_t b = ng * t / T * L->group, e = ng * (t + 1) / T * L->group;
    if (b < e) {
      int64_t c[OF_MAX_DIMS], rem = b;
      char *p[3];
      for (int32_t i = nord - 1; i >= 0; i--) {
        int32_t d = L->order[i];
        c[i] = rem % L->shape[d];
        rem /= L->shape[d];
      }
      for (int32_t k = 0; k < nops; k++) {
        p[k] = L->base[k];
        for (int32_t i = 0; i < nord; i++) p[k] += c[i] * L->st[k][L->order[i]];
      }
      for (int64_t l = b; l < e; l++) {
        fn(L, p, ctx);
        for (int32_t i = nord - 1; i >= 0; i--) {   /* odometer */
          int32_t d = L->order[i];
          if (++c[i] < L->shape[d]) {
            for (int32_t k = 0; k < nops; k++) p[k] += L->st[k][d];
            break;
          }
          for (int32_t k = 0; k < nops; k++) p[k] -= (L->shape[d] - 1) * L->st[k][d];
          c[i] = 0;
        }
      }
    }
  }
}

typedef struct {
  int64_t base;
  int64_t xd;      /* bytes between neighbours along dim of the indexed operand */
  bool i32;
  int32_t esize;
  of_dtype dt;
  int32_t reduce;
} idx_ctx;

/* ---- gather: out[..j..] = x[..index[..j..]..] ---- */

static void gather_line(const lines *L, char **p, void *vctx) {
  const idx_ctx *c = vctx;
  const int32_t ld = L->line;
  const int64_t len = L->shape[ld], so = L->st[0][ld], si = L->st[1][ld], sx = L->st[2][ld],
                xd = c->xd, base = c->base;
  const bool i32 = c->i32;
#define GATHER(T)                                                        \
  for (int64_t j = 0; j < len; j++) {                                    \
    int64_t v = load_idx(p[1] + j * si, i32) - base;                     \
    *(T *)(p[0] + j * so) = *(const T *)(p[2] + j * sx + v * xd);        \
  }                                                                      \
  break;
  switch (c->esize) {
    case 1: GATHER(uint8_t)
    case 2: GATHER(uint16_t)
    case 4: GATHER(uint32_t)
    default: GATHER(uint64_t)
  }
#undef GATHER
}

/* Sizes of t as an n-d tensor (0-d: [1]). */
static int64_t size_at(const of_tensor *t, int32_t d) { return t->ndim > 0 ? t->shape[d] : 1; }

static int64_t size_at_of(const of_meta *t, int32_t d) { return t->ndim > 0 ? t->shape[d] : 1; }

/* gather's checks on shapes and dtypes and its result (the index's shape,
 * the input's dtype): the body and the graph loader's infer_gather */
static of_status gather_plan(const of_meta *x, int32_t dim, const of_meta *index, int32_t *dout,
                             of_meta *res) {
  OF_CHECK(check_index_dtype_of("gather", index));
  int32_t d = 0;
  OF_CHECK(of_norm_dim("gather", dim, x->ndim, &d));
  int32_t xn = x->ndim > 0 ? x->ndim : 1, in = index->ndim > 0 ? index->ndim : 1;
  if (xn != in)
    return of_fail(OF_ERR_SHAPE, "gather: index %s must have as many dims as the input %s "
                   "(%s)", OF_SHAPE_STR(index), OF_SHAPE_STR(x), OF_DT(x));
  for (int32_t k = 0; k < xn; k++)
    if (k != d && size_at_of(index, k) > size_at_of(x, k))
      return of_fail(OF_ERR_SHAPE, "gather: index %s is larger than the input %s in dim %d "
                     "(%lld > %lld); only dim %d may be larger", OF_SHAPE_STR(index),
                     OF_SHAPE_STR(x), k + 1, (long long)size_at_of(index, k),
                     (long long)size_at_of(x, k), d + 1);
  *dout = d;
  *res = *index;
  res->dtype = x->dtype;
  return OF_OK;
}

static of_status gather_compute(of_tensor *x, int32_t dim, of_tensor *index,
                               int64_t index_base, of_tensor **out) {
  OF_ROUTE("gather", dev, dops, gather, x, index);
  int32_t d = 0;
  of_meta xm = of_meta_of(x), im = of_meta_of(index), rm;
  OF_CHECK(gather_plan(&xm, dim, &im, &d, &rm));
  of_tensor *res;
  if (dops) {   /* index values are checked by the kernel */
    OF_CHECK(need_on("gather", x, dev));
    of_tensor *ix = NULL;
    of_status st = on_dev(index, dev, &ix);
    if (st == OF_OK) st = of_tensor_new(rm.shape, rm.ndim, rm.dtype, dev, &res);
    if (st == OF_OK) {
      st = dops->gather(res, x, d, ix, index_base);
      if (st != OF_OK) of_tensor_release(res);
    }
    of_tensor_release(ix);
    if (st == OF_OK) *out = res;
    return st;
  }
  OF_CHECK(check_range("gather", index, d, size_at(x, d), index_base));
  OF_CHECK(of_tensor_new(rm.shape, rm.ndim, rm.dtype, OF_CPU, &res));
  /* lines along the index's innermost dim; x moves along dim by index value */
  lines L;
  lines_init(&L, index->shape, index->ndim, best_line(index->shape, index->ndim, d), -1);
  lines_op(&L, 0, res);
  lines_op(&L, 1, index);
  lines_op(&L, 2, x);
  L.st[2][d] = 0;
  idx_ctx c = {.base = index_base, .xd = x->ndim > 0 ? x->strides[d] * of_dtype_size(x->dtype) : 0,
               .i32 = index->dtype == OF_INT32, .esize = of_dtype_size(x->dtype)};
  run_lines(&L, gather_line, &c);
  *out = res;
  return OF_OK;
}

/* ---- scatter: out[..index[..j..]..] = src[..j..] (or +=) ---- */

static void scatter_line(const lines *L, char **p, void *vctx) {
  const idx_ctx *c = vctx;
  const int32_t ld = L->line;
  const int64_t len = L->shape[ld], so = L->st[0][ld], si = L->st[1][ld], ss = L->st[2][ld],
                od = c->xd, base = c->base;
  const bool i32 = c->i32;
#define SCATTER(T)                                                       \
  for (int64_t j = 0; j < len; j++) {                                    \
    int64_t v = load_idx(p[1] + j * si, i32) - base;                     \
    *(T *)(p[0] + j * so + v * od) = *(const T *)(p[2] + j * ss);        \
  }                                                                      \
  break;
#define SCATTER_ADD(E, T)                                                \
  case E:                                                                \
    for (int64_t j = 0; j < len; j++) {                                  \
      int64_t v = load_idx(p[1] + j * si, i32) - base;                   \
      T *o = (T *)(p[0] + j * so + v * od);                              \
      *o = (T)(*o + *(const T *)(p[2] + j * ss));                        \
    }                                                                    \
    break;
  if (!c->reduce) {
    switch (c->esize) {
      case 1: SCATTER(uint8_t)
      case 2: SCATTER(uint16_t)
      case 4: SCATTER(uint32_t)
      default: SCATTER(uint64_t)
    }
    return;
  }
  switch (c->dt) {
    OF_FOR_NATIVE_DTYPES(SCATTER_ADD)
    default:   /* halves through double */
      for (int64_t j = 0; j < len; j++) {
        int64_t v = load_idx(p[1] + j * si, i32) - base;
        char *o = p[0] + j * so + v * od;
        of_store_double(o, c->dt, of_load_double(o, c->dt) + of_load_double(p[2] + j * ss, c->dt));
      }
  }
#undef SCATTER
#undef SCATTER_ADD
}

/* The tensor an in-place-capable op writes: a clone of x, x itself, or
 * `into` after copying x there. */
static of_status check_into_of(const char *op, const of_meta *x, const of_meta *into) {
  bool same = into->ndim == x->ndim && into->dtype == x->dtype;
  for (int32_t i = 0; same && i < x->ndim; i++) same = into->shape[i] == x->shape[i];
  if (!same)
    return of_fail(OF_ERR_SHAPE, "%s: output %s (%s) must match the input %s (%s)", op,
                   OF_SHAPE_STR(into), OF_DT(into), OF_SHAPE_STR(x), OF_DT(x));
  return OF_OK;
}
static of_status check_into(const char *op, const of_tensor *x, const of_tensor *into) {
  of_meta xm = of_meta_of(x), om = of_meta_of(into);
  return check_into_of(op, &xm, &om);
}

static of_status inplace_target(const char *op, of_tensor *x, of_tensor *into, of_tensor **res) {
  if (!into) return of_clone_data(x, res);
  OF_CHECK(of_check_inplace(op, into));
  if (into != x) {
    OF_CHECK(check_into(op, x, into));
    OF_CHECK(of_copy_data(into, x));
  }
  of_tensor_retain(into);
  *res = into;
  return OF_OK;
}

/* scatter's checks on shapes and dtypes (src NULL or absent: the value) and
 * its result, the input's shape and dtype (or `into`'s, which must match):
 * the body and the graph loader's infer_scatter */
static of_status scatter_plan(const of_meta *x, int32_t dim, const of_meta *index,
                              const of_meta *src, int32_t use_value, int32_t reduce,
                              const of_meta *into, int32_t *dout, of_meta *res) {
  const char *op = reduce ? "scatter_add" : "scatter";
  if (reduce != 0 && reduce != 1)
    return of_fail(OF_ERR_ARG, "scatter: reduce must be 0 (replace) or 1 (add), got %d",
                   (int)reduce);
  OF_CHECK(check_index_dtype_of(op, index));
  if (!use_value && (!src || src->ndim < 0))
    return of_fail(OF_ERR_ARG, "%s: src tensor or value required", op);
  int32_t d = 0;
  OF_CHECK(of_norm_dim(op, dim, x->ndim, &d));
  int32_t xn = x->ndim > 0 ? x->ndim : 1, in = index->ndim > 0 ? index->ndim : 1;
  if (xn != in)
    return of_fail(OF_ERR_SHAPE, "%s: index %s must have as many dims as the input %s (%s)",
                   op, OF_SHAPE_STR(index), OF_SHAPE_STR(x), OF_DT(x));
  if (!use_value && (src->ndim > 0 ? src->ndim : 1) != in)
    return of_fail(OF_ERR_SHAPE, "%s: src %s must have as many dims as the index %s", op,
                   OF_SHAPE_STR(src), OF_SHAPE_STR(index));
  for (int32_t k = 0; k < xn; k++) {
    if (k != d && size_at_of(index, k) > size_at_of(x, k))
      return of_fail(OF_ERR_SHAPE, "%s: index %s is larger than the input %s in dim %d "
                     "(%lld > %lld); only dim %d may be larger", op, OF_SHAPE_STR(index),
                     OF_SHAPE_STR(x), k + 1, (long long)size_at_of(index, k),
                     (long long)size_at_of(x, k), d + 1);
    if (!use_value && size_at_of(index, k) > size_at_of(src, k))
      return of_fail(OF_ERR_SHAPE, "%s: index %s is larger than src %s in dim %d (%lld > %lld)",
                     op, OF_SHAPE_STR(index), OF_SHAPE_STR(src), k + 1,
                     (long long)size_at_of(index, k), (long long)size_at_of(src, k));
  }
  if (into && into->ndim >= 0) OF_CHECK(check_into_of(op, x, into));
  *dout = d;
  *res = *x;
  return OF_OK;
}

static of_status scatter_compute(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src,
                                double value, int32_t use_value, int32_t reduce,
                                int64_t index_base, of_tensor *into, of_tensor **out) {
  const char *op = reduce ? "scatter_add" : "scatter";
  OF_ROUTE(op, dev, dops, scatter, x, index, use_value ? NULL : src, into);
  int32_t d = 0;
  of_meta xm = of_meta_of(x), im = of_meta_of(index), sm = of_meta_of(src), om = of_meta_of(into),
          rm;
  OF_CHECK(scatter_plan(&xm, dim, &im, &sm, use_value, reduce, &om, &d, &rm));
  of_tensor *s, *res;
  if (dops) {
    OF_CHECK(need_on(op, x, dev));
    OF_CHECK(need_on(op, into, dev));
    OF_CHECK(need_on(op, use_value ? NULL : src, dev));
    of_tensor *ix = NULL;
    s = res = NULL;
    of_status st = on_dev(index, dev, &ix);
    if (st == OF_OK && !use_value) st = of_cast_data(src, x->dtype, &s);
    if (st == OF_OK) st = inplace_target(op, x, into, &res);
    if (st == OF_OK) st = dops->scatter(res, d, ix, s, value, use_value, reduce, index_base);
    if (st == OF_OK) of_bump_version(res);
    of_tensor_release(ix);
    of_tensor_release(s);
    if (st != OF_OK) {
      of_tensor_release(res);
      return st;
    }
    *out = res;
    return OF_OK;
  }
  OF_CHECK(check_range(op, index, d, size_at(x, d), index_base));
  if (use_value) OF_CHECK(of_full(NULL, 0, value, x->dtype, OF_CPU, &s));
  else OF_CHECK(of_cast_data(src, x->dtype, &s));
  of_status st = inplace_target(op, x, into, &res);
  if (st != OF_OK) {
    of_tensor_release(s);
    return st;
  }
  /* lines along the index's innermost dim; lines that differ only along dim
   * may write the same cell, so they stay on one thread, in index order (the
   * last write wins for duplicates, deterministically) */
  lines L;
  lines_init(&L, index->shape, index->ndim, best_line(index->shape, index->ndim, d), d);
  lines_op(&L, 0, res);
  lines_op(&L, 1, index);
  lines_op(&L, 2, s);
  L.st[0][d] = 0;
  if (use_value)   /* one value for every position */
    for (int32_t k = 0; k < L.ndim; k++) L.st[2][k] = 0;
  idx_ctx c = {.base = index_base,
               .xd = res->ndim > 0 ? res->strides[d] * of_dtype_size(res->dtype) : 0,
               .i32 = index->dtype == OF_INT32, .esize = of_dtype_size(x->dtype),
               .dt = x->dtype, .reduce = reduce};
  run_lines(&L, scatter_line, &c);
  of_bump_version(res);
  of_tensor_release(s);
  *out = res;
  return OF_OK;
}

/* ---- index_select ---- */

/* index_select's checks and result (the input's shape with dim sized by
 * the index's count; a 0-d input and 1-d index give [n]): the body and
 * the graph loader's infer_index_select */
static of_status index_select_plan(const of_meta *x, int32_t dim, const of_meta *index,
                                   int32_t *dout, of_meta *res) {
  OF_CHECK(check_index_dtype_of("index_select", index));
  if (index->ndim > 1)
    return of_fail(OF_ERR_SHAPE, "index_select: index must be 0-d or 1-d, got shape %s",
                   OF_SHAPE_STR(index));
  int32_t d = 0;
  OF_CHECK(of_norm_dim("index_select", dim, x->ndim, &d));
  int64_t n = index->ndim == 1 ? index->shape[0] : 1;
  *res = *x;
  if (res->ndim > 0) res->shape[d] = n;
  else if (index->ndim == 1) {
    res->shape[0] = n;
    res->ndim = 1;
  }
  *dout = d;
  return OF_OK;
}

static of_status index_select_compute(of_tensor *x, int32_t dim, of_tensor *index,
                                     int64_t index_base, of_tensor **out) {
  OF_ROUTE("index_select", dev, dops, index_select, x, index);
  int32_t d = 0;
  of_meta xm = of_meta_of(x), im = of_meta_of(index), rm;
  OF_CHECK(index_select_plan(&xm, dim, &im, &d, &rm));
  int64_t size = size_at(x, d), n = index->numel;
  if (!dops) OF_CHECK(check_range("index_select", index, d, size, index_base));
  else OF_CHECK(need_on("index_select", x, dev));
  of_tensor *res, *xc = NULL, *ic = NULL, *id = NULL;
  OF_CHECK(of_tensor_new(rm.shape, rm.ndim, rm.dtype, dev, &res));
  if (res->numel == 0) {
    *out = res;
    return OF_OK;
  }
  of_status st = contig_data(x, &xc);
  if (st == OF_OK) st = on_dev(index, dev, &id);
  if (st == OF_OK) st = contig_data(id, &ic);
  of_tensor_release(id);
  if (st == OF_OK && dops) {
    st = dops->index_select(res, xc, d, ic, index_base);
    of_tensor_release(ic);
    of_tensor_release(xc);
    if (st != OF_OK) {
      of_tensor_release(res);
      return st;
    }
    *out = res;
    return OF_OK;
  }
  if (st != OF_OK) {
    of_tensor_release(xc);
    of_tensor_release(res);
    return st;
  }
  int64_t outer = 1, inner = 1;
  for (int32_t k = 0; k < x->ndim; k++) {
    if (k < d) outer *= x->shape[k];
    if (k > d) inner *= x->shape[k];
  }
  const int64_t es = of_dtype_size(x->dtype), rowbytes = inner * es, base = index_base;
  const bool i32 = ic->dtype == OF_INT32;
  const int64_t ies = i32 ? 4 : 8;
  const char *src = of_ptr(xc), *ip = of_ptr(ic);
  char *dst = of_ptr(res);
  int nt = res->numel >= OF_PARALLEL_GRAIN ? of_threads() : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t r = 0; r < outer * n; r++) {
    int64_t o = r / n, k = r % n;
    int64_t v = load_idx(ip + k * ies, i32) - base;
    memcpy(dst + r * rowbytes, src + (o * size + v) * rowbytes, (size_t)rowbytes);
  }
  of_tensor_release(ic);
  of_tensor_release(xc);
  *out = res;
  return OF_OK;
}

/* ---- index_add: out.select(dim, index[k]) += alpha * src.select(dim, k) ---- */

/* index_add's checks on shapes and dtypes and its result, the input's shape
 * and dtype (or `into`'s, which must match): the body and infer_index_add */
static of_status index_add_plan(const of_meta *x, int32_t dim, const of_meta *index,
                                const of_meta *src, double alpha, const of_meta *into,
                                int32_t *dout, of_meta *res) {
  OF_CHECK(check_index_dtype_of("index_add", index));
  if (index->ndim > 1)
    return of_fail(OF_ERR_SHAPE, "index_add: index must be 0-d or 1-d, got shape %s",
                   OF_SHAPE_STR(index));
  int32_t d = 0;
  OF_CHECK(of_norm_dim("index_add", dim, x->ndim, &d));
  int64_t n = index->ndim == 1 ? index->shape[0] : 1;
  bool fits = (src->ndim > 0 ? src->ndim : 1) == (x->ndim > 0 ? x->ndim : 1);
  for (int32_t k = 0; fits && k < (x->ndim > 0 ? x->ndim : 1); k++)
    fits = size_at_of(src, k) == (k == d ? n : size_at_of(x, k));
  if (!fits)
    return of_fail(OF_ERR_SHAPE, "index_add: source %s must match the input %s except in dim "
                   "%d, whose size must be the number of indices (%lld)", OF_SHAPE_STR(src),
                   OF_SHAPE_STR(x), d + 1, (long long)n);
  if (!of_dtype_is_floating(x->dtype) && alpha != floor(alpha))
    return of_fail(OF_ERR_ARG, "index_add: alpha %g must be an integer for an input of dtype "
                   "%s", alpha, OF_DT(x));
  if (into && into->ndim >= 0) OF_CHECK(check_into_of("index_add", x, into));
  *dout = d;
  *res = *x;
  return OF_OK;
}

static of_status index_add_compute(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src,
                                  double alpha, int64_t index_base, of_tensor *into,
                                  of_tensor **out) {
  OF_ROUTE("index_add", dev, dops, index_add, x, index, src, into);
  int32_t d = 0;
  of_meta xm = of_meta_of(x), im = of_meta_of(index), sm = of_meta_of(src), om = of_meta_of(into),
          rm;
  OF_CHECK(index_add_plan(&xm, dim, &im, &sm, alpha, &om, &d, &rm));
  int64_t size = size_at(x, d), n = index->numel;
  if (!dops) OF_CHECK(check_range("index_add", index, d, size, index_base));
  if (dops) {
    OF_CHECK(need_on("index_add", x, dev));
    OF_CHECK(need_on("index_add", src, dev));
    OF_CHECK(need_on("index_add", into, dev));
  }
  of_tensor *s0 = NULL, *s = NULL, *ic = NULL, *res = NULL, *work = NULL, *id = NULL;
  of_status st = of_cast_data(src, x->dtype, &s0);
  if (st == OF_OK) st = contig_data(s0, &s);
  if (st == OF_OK) st = on_dev(index, dev, &id);
  if (st == OF_OK) st = contig_data(id, &ic);
  of_tensor_release(id);
  if (st == OF_OK) st = inplace_target("index_add", x, into, &res);
  if (st == OF_OK) st = contig_data(res, &work);
  if (st == OF_OK && dops && res->numel > 0 && n > 0) {
    st = dops->index_add(work, d, ic, s, alpha, index_base);
    if (st == OF_OK && work != res) st = of_copy_data(res, work);
  } else if (st == OF_OK && res->numel > 0 && n > 0) {
    int64_t outer = 1, inner = 1;
    for (int32_t k = 0; k < x->ndim; k++) {
      if (k < d) outer *= x->shape[k];
      if (k > d) inner *= x->shape[k];
    }
    enum { BLK = 1024 };
    const int64_t nblk = (inner + BLK - 1) / BLK, es = of_dtype_size(x->dtype), base = index_base;
    const bool i32 = ic->dtype == OF_INT32;
    const int64_t ies = i32 ? 4 : 8;
    const of_dtype dt = x->dtype;
    char *w = of_ptr(work);
    const char *sp = of_ptr(s), *ip = of_ptr(ic);
    int nt = s->numel >= OF_PARALLEL_GRAIN ? of_threads() : 1;
    /* each (outer, column block) owns its destination cells: no races */
#pragma omp parallel for num_threads(nt) if (nt > 1) collapse(2) schedule(static)
    for (int64_t o = 0; o < outer; o++)
      for (int64_t b = 0; b < nblk; b++) {
        int64_t i0 = b * BLK, m = inner - i0 < BLK ? inner - i0 : BLK;
        for (int64_t k = 0; k < n; k++) {
          int64_t v = load_idx(ip + k * ies, i32) - base;
          char *dr = w + ((o * size + v) * inner + i0) * es;
          const char *sr = sp + ((o * n + k) * inner + i0) * es;
#define ADD_ROW(E, T)                                                         \
  case E: {                                                                   \
    T *dd = (T *)dr;                                                          \
    const T *ss = (const T *)sr;                                              \
    const T a = (T)alpha;                                                     \
    for (int64_t i = 0; i < m; i++) dd[i] = (T)(dd[i] + a * ss[i]);          \
  } break;
          switch (dt) {
            OF_FOR_NATIVE_DTYPES(ADD_ROW)
            default:
              for (int64_t i = 0; i < m; i++)
                of_store_double(dr + i * es, dt, of_load_double(dr + i * es, dt) +
                                alpha * of_load_double(sr + i * es, dt));
          }
#undef ADD_ROW
        }
      }
    if (work != res) st = of_copy_data(res, work);
  }
  if (st == OF_OK) of_bump_version(res);
  of_tensor_release(work);
  of_tensor_release(ic);
  of_tensor_release(s);
  of_tensor_release(s0);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* ---- sort / topk ----
 * Per line: load (key, position) pairs, stable merge sort, then copy the
 * elements by position. Keys are doubles, except int64 which compares as
 * int64 so that values beyond 2^53 keep their order. NaN sorts as the
 * largest value, as in PyTorch. */
typedef struct { double k; int64_t i; } dkey;
typedef struct { int64_t k; int64_t i; } ikey;

#define D_ASC(a, b) ((a).k < (b).k || ((b).k != (b).k && (a).k == (a).k))
#define D_DESC(a, b) ((a).k > (b).k || ((a).k != (a).k && (b).k == (b).k))
#define I_ASC(a, b) ((a).k < (b).k)
#define I_DESC(a, b) ((a).k > (b).k)

/* Stable: an element moves ahead of another only if strictly BEFORE it. */
#define DEF_MERGESORT(NAME, KT, BEFORE)                                         \
  static void NAME(KT *a, KT *tmp, int64_t n) {                                 \
    enum { RUN = 16 };                                                          \
    for (int64_t s = 0; s < n; s += RUN) {                                      \
      int64_t e = s + RUN < n ? s + RUN : n;                                    \
      for (int64_t i = s + 1; i < e; i++) {                                     \
        KT v = a[i];                                                            \
        int64_t j = i;                                                          \
        while (j > s && BEFORE(v, a[j - 1])) {                                  \
          a[j] = a[j - 1];                                                      \
          j--;                                                                  \
        }                                                                       \
        a[j] = v;                                                               \
      }                                                                         \
    }                                                                           \
    KT *from = a, *to = tmp;                                                    \
    for (int64_t w = RUN; w < n; w *= 2) {                                      \
      for (int64_t lo = 0; lo < n; lo += 2 * w) {                               \
        int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n; \
        int64_t i = lo, j = mid, k = lo;                                        \
        while (i < mid && j < hi) to[k++] = BEFORE(from[j], from[i]) ? from[j++] : from[i++]; \
        while (i < mid) to[k++] = from[i++];                                    \
        while (j < hi) to[k++] = from[j++];                                     \
      }                                                                         \
      KT *sw = from;                                                            \
      from = to;                                                                \
      to = sw;                                                                  \
    }                                                                           \
    if (from != a) memcpy(a, from, (size_t)n * sizeof(KT));                     \
  }
DEF_MERGESORT(sort_d_asc, dkey, D_ASC)
DEF_MERGESORT(sort_d_desc, dkey, D_DESC)
DEF_MERGESORT(sort_i_asc, ikey, I_ASC)
DEF_MERGESORT(sort_i_desc, ikey, I_DESC)

/* topk with k much smaller than the line: keep the k best in a heap whose
 * top is the one that sorts last, then heap-sort them. Ties are broken by
 * position, so the result equals the first k of the stable sort. */
#define DEF_SELECT(NAME, KT, BEFORE)                                            \
  static void NAME(const KT *a, int64_t n, KT *h, int64_t k) {                \
    int64_t m = 0;                                                              \
    for (int64_t j = 0; j < n; j++) {                                           \
      if (m < k) {                                                              \
        int64_t c = m++;                                                        \
        h[c] = a[j];                                                            \
        while (c > 0 && LATER(BEFORE, h[c], h[(c - 1) / 2])) {                  \
          KT t = h[c];                                                          \
          h[c] = h[(c - 1) / 2];                                                \
          h[(c - 1) / 2] = t;                                                   \
          c = (c - 1) / 2;                                                      \
        }                                                                       \
      } else if (LATER(BEFORE, h[0], a[j])) {                                   \
        h[0] = a[j];                                                            \
        SIFT_DOWN(BEFORE, KT, h, k);                                            \
      }                                                                         \
    }                                                                           \
    for (int64_t end = k - 1; end > 0; end--) {                                 \
      KT t = h[0];                                                              \
      h[0] = h[end];                                                            \
      h[end] = t;                                                               \
      SIFT_DOWN(BEFORE, KT, h, end);                                            \
    }                                                                           \
  }
/* x sorts after y: y strictly before x, or equal keys and x later in the line */
#define LATER(BEFORE, x, y) (BEFORE(y, x) || (!BEFORE(x, y) && (x).i > (y).i))
#define SIFT_DOWN(BEFORE, KT, h, m)                                             \
  for (int64_t i_ = 0;;) {                                                      \
    int64_t c_ = 2 * i_ + 1;                                                    \
    if (c_ >= (m)) break;                                                       \
    if (c_ + 1 < (m) && LATER(BEFORE, h[c_ + 1], h[c_])) c_++;                  \
    if (!LATER(BEFORE, h[c_], h[i_])) break;                                    \
    KT t_ = h[c_];                                                              \
    h[c_] = h[i_];                                                              \
    h[i_] = t_;                                                                 \
    i_ = c_;                                                                    \
  }
DEF_SELECT(select_d_asc, dkey, D_ASC)
DEF_SELECT(select_d_desc, dkey, D_DESC)
DEF_SELECT(select_i_asc, ikey, I_ASC)
DEF_SELECT(select_i_desc, ikey, I_DESC)

typedef struct {
  int64_t base, take;     /* positions written per line (k for topk) */
  int32_t esize, descending;
  bool select;            /* heap selection of `take` instead of a full sort */
  of_dtype dt;
  char **scratch;         /* per thread: 2 * len keys */
} sort_ctx;

static void sort_line(const lines *L, char **p, void *vctx) {
  const sort_ctx *c = vctx;
  const int32_t dim = L->line;
  const int64_t len = L->shape[dim], sv = L->st[0][dim], si = L->st[1][dim],
                sx = L->st[2][dim];
  char *buf = c->scratch[omp_get_thread_num()];
  const char *x = p[2];
  if (c->dt == OF_INT64) {
    ikey *a = (ikey *)buf;
    for (int64_t j = 0; j < len; j++) {
      a[j].k = *(const int64_t *)(x + j * sx);
      a[j].i = j;
    }
    if (c->select && c->descending) select_i_desc(a, len, a + len, c->take);
    else if (c->select) select_i_asc(a, len, a + len, c->take);
    else if (c->descending) sort_i_desc(a, a + len, len);
    else sort_i_asc(a, a + len, len);
  } else {
    dkey *a = (dkey *)buf;
#define LOAD_KEYS(E, T)                                                   \
  case E:                                                                 \
    for (int64_t j = 0; j < len; j++) {                                   \
      a[j].k = (double)*(const T *)(x + j * sx);                          \
      a[j].i = j;                                                         \
    }                                                                     \
    break;
    switch (c->dt) {
      OF_FOR_NATIVE_DTYPES(LOAD_KEYS)
      default:
        for (int64_t j = 0; j < len; j++) {
          a[j].k = of_load_double(x + j * sx, c->dt);
          a[j].i = j;
        }
    }
#undef LOAD_KEYS
    if (c->select && c->descending) select_d_desc(a, len, a + len, c->take);
    else if (c->select) select_d_asc(a, len, a + len, c->take);
    else if (c->descending) sort_d_desc(a, a + len, len);
    else sort_d_asc(a, a + len, len);
  }
  /* dkey and ikey share their layout: the position is the second field;
   * selection leaves its result behind the keys */
  const ikey *a = (const ikey *)buf + (c->select ? len : 0);
  for (int64_t j = 0; j < c->take; j++) {
    int64_t from = a[j].i;
    memcpy(p[0] + j * sv, x + from * sx, (size_t)c->esize);
    *(int64_t *)(p[1] + j * si) = from + c->base;
  }
}
_Static_assert(sizeof(dkey) == sizeof(ikey), "sort keys share a layout");

/* t [.., take] (dim d moved last) with its last dim moved back to d, dense. */
static of_status last_back(of_tensor *t, int32_t d, int32_t nd, of_tensor **out) {
  if (nd == 0) return of_reshape(t, NULL, 0, out);
  if (d == nd - 1) {
    of_tensor_retain(t);
    *out = t;
    return OF_OK;
  }
  int64_t shape[OF_MAX_DIMS], strides[OF_MAX_DIMS];
  for (int32_t i = 0, k = 0; i < nd; i++) {
    int32_t from = i == d ? nd - 1 : k++;
    shape[i] = t->shape[from];
    strides[i] = t->strides[from];
  }
  of_tensor *v = of_tensor_alias(t, shape, strides, nd, t->offset);
  if (!v) return OF_ERR_OOM;
  of_status st = of_dense(v, t->dtype, out);
  of_tensor_release(v);
  return st;
}

/* sort/topk on a device: rows along d (moved last), sorted by the kernel. */
static of_status device_sort(const char *op, const of_device_ops *dops, of_device dev,
                             of_tensor *x, int32_t d, int64_t take, int32_t descending,
                             int64_t base, of_tensor **values, of_tensor **indices) {
  const int32_t nd = x->ndim;
  int64_t shape[OF_MAX_DIMS], strides[OF_MAX_DIMS], n = size_at(x, d);
  int32_t k = 0;
  for (int32_t i = 0; i < nd; i++)
    if (i != d) {
      shape[k] = x->shape[i];
      strides[k++] = x->strides[i];
    }
  shape[k] = n;
  strides[k++] = nd > 0 ? x->strides[d] : 1;
  int64_t outer = n > 0 ? of_shape_numel(shape, k) / n : 0;
  if (n == 0) outer = of_shape_numel(shape, k - 1);
  of_tensor *v = of_tensor_alias(x, shape, strides, k, x->offset);
  if (!v) return OF_ERR_OOM;
  of_tensor *rows = NULL, *vals = NULL, *ix = NULL;
  of_status st = of_dense(v, x->dtype, &rows);
  of_tensor_release(v);
  shape[k - 1] = take;
  if (st == OF_OK) st = of_tensor_new(shape, k, x->dtype, dev, &vals);
  if (st == OF_OK) st = of_tensor_new(shape, k, OF_INT64, dev, &ix);
  if (st == OF_OK) st = dops->sort_rows(rows, outer, n, take, descending, base, vals, ix);
  of_tensor_release(rows);
  of_tensor *rv = NULL, *ri = NULL;
  if (st == OF_OK) st = last_back(vals, d, nd, &rv);
  if (st == OF_OK) st = last_back(ix, d, nd, &ri);
  of_tensor_release(vals);
  of_tensor_release(ix);
  if (st != OF_OK) {
    of_tensor_release(rv);
    of_tensor_release(ri);
    return st;
  }
  *values = rv;
  *indices = ri;
  return OF_OK;
}

/* sort's and topk's results: x's shape with dim d sized take, the values
 * in x's dtype, the indices int64 (sort_impl and sort_plan) */
static void sort_results(const of_meta *x, int32_t d, int64_t take, of_meta *v, of_meta *i) {
  *v = *x;
  if (x->ndim > 0) v->shape[d] = take;
  *i = *v;
  i->dtype = OF_INT64;
}

/* the checks of sort (the whole dim) and topk (k of it) on x's shape, and
 * their results: the bodies and the graph loader's infer_sort / infer_topk */
static of_status sort_plan(const char *op, const of_meta *x, int32_t dim, bool topk, int64_t k,
                           int32_t *dout, int64_t *take, of_meta *v, of_meta *i) {
  int32_t d = 0;
  OF_CHECK(of_norm_dim(op, dim, x->ndim, &d));
  int64_t len = x->ndim > 0 ? x->shape[d] : 1;
  if (topk && (k < 0 || k > len))
    return of_fail(OF_ERR_INDEX, "topk: k %lld out of range for dim %d of size %lld (expected "
                   "0..%lld; shape %s)", (long long)k, d + 1, (long long)len, (long long)len,
                   OF_SHAPE_STR(x));
  *dout = d;
  *take = topk ? k : len;
  sort_results(x, d, *take, v, i);
  return OF_OK;
}

static of_status sort_impl(const char *op, of_tensor *x, int32_t d, int64_t take,
                           int32_t descending, int64_t base, of_tensor **values,
                           of_tensor **indices) {
  OF_ROUTE(op, dev, dops, sort_rows, x);
  if (dops) return device_sort(op, dops, dev, x, d, take, descending, base, values, indices);
  of_meta xm = of_meta_of(x), vm, im;
  sort_results(&xm, d, take, &vm, &im);
  of_tensor *v, *ix;
  OF_CHECK(of_tensor_new(vm.shape, vm.ndim, vm.dtype, OF_CPU, &v));
  of_status st = of_tensor_new(im.shape, im.ndim, im.dtype, OF_CPU, &ix);
  if (st != OF_OK) {
    of_tensor_release(v);
    return st;
  }
  /* walk lines of x; outputs use their own strides along dim */
  lines L;
  lines_init(&L, x->shape, x->ndim, d, -1);
  lines_op(&L, 0, v);
  lines_op(&L, 1, ix);
  lines_op(&L, 2, x);
  int64_t len = L.shape[d];
  int nt = lines_threads(&L);
  sort_ctx c = {.base = base, .take = take, .esize = of_dtype_size(x->dtype),
                .descending = descending, .select = take * 16 <= len, .dt = x->dtype};
  if (lines_count(&L) > 0 && take > 0) {
    c.scratch = calloc((size_t)nt, sizeof(char *));
    bool ok = c.scratch != NULL;
    for (int i = 0; ok && i < nt; i++) ok = (c.scratch[i] = malloc((size_t)len * 2 * sizeof(dkey))) != NULL;
    if (ok) run_lines(&L, sort_line, &c);
    else st = of_fail(OF_ERR_OOM, "%s: out of memory for sort buffers (%lld elements per line, "
                      "shape %s)", op, (long long)len, OF_SHAPE_STR(x));
    if (c.scratch)
      for (int i = 0; i < nt; i++) free(c.scratch[i]);
    free(c.scratch);
  }
  if (st != OF_OK) {
    of_tensor_release(v);
    of_tensor_release(ix);
    return st;
  }
  *values = v;
  *indices = ix;
  return OF_OK;
}

static of_status sort_compute(of_tensor *x, int32_t dim, int32_t descending,
                             int64_t index_base, of_tensor **values, of_tensor **indices) {
  int32_t d = 0;
  int64_t take = 0;
  of_meta xm = of_meta_of(x), vm, im;
  OF_CHECK(sort_plan("sort", &xm, dim, false, 0, &d, &take, &vm, &im));
  return sort_impl("sort", x, d, take, descending, index_base, values, indices);
}

static of_status topk_compute(of_tensor *x, int64_t k, int32_t dim, int32_t largest,
                             int64_t index_base, of_tensor **values, of_tensor **indices) {
  int32_t d = 0;
  int64_t take = 0;
  of_meta xm = of_meta_of(x), vm, im;
  OF_CHECK(sort_plan("topk", &xm, dim, true, k, &d, &take, &vm, &im));
  return sort_impl("topk", x, d, take, largest, index_base, values, indices);
}

/* ---- one_hot ---- */

/* one_hot's checks on the index's shape and dtype and the class count
 * (-1: from the data) -- the body and infer_one_hot */
static of_status one_hot_check(const of_meta *index, int64_t num_classes) {
  OF_CHECK(check_index_dtype_of("one_hot", index));
  if (index->ndim >= OF_MAX_DIMS)
    return of_fail(OF_ERR_SHAPE, "one_hot: index %s already has %d dims, the most supported",
                   OF_SHAPE_STR(index), OF_MAX_DIMS);
  if (num_classes < -1)
    return of_fail(OF_ERR_ARG, "one_hot: num_classes must be -1 (infer) or >= 0, got %lld",
                   (long long)num_classes);
  return OF_OK;
}
/* one_hot's result for C classes: int64 [index's shape.., C] */
static void one_hot_result(const of_meta *index, int64_t C, of_meta *res) {
  *res = *index;
  res->shape[index->ndim] = C;
  res->ndim = index->ndim + 1;
  res->dtype = OF_INT64;
}

/* On a device: zeros [.., C] with ones scattered along the new last dim. */
static of_status device_one_hot(const of_device_ops *dops, of_device dev, of_tensor *index,
                                int64_t num_classes, int64_t base, of_tensor **out) {
  if (num_classes == -1) {   /* the largest index, read back to the host */
    if (index->numel == 0)
      return of_fail(OF_ERR_ARG, "one_hot: cannot infer the number of classes from an empty "
                     "index %s; pass num_classes", OF_SHAPE_STR(index));
    of_tensor *m = NULL, *h = NULL;
    of_status st = of_reduce(OF_RED_AMAX, index, NULL, 0, 0, 0, -1, &m);
    if (st == OF_OK) st = of_to_device(m, OF_CPU, 0, &h);
    of_tensor_release(m);
    if (st != OF_OK) return st;
    int64_t mx = h->dtype == OF_INT32 ? *(int32_t *)of_ptr(h) : *(int64_t *)of_ptr(h);
    of_tensor_release(h);
    num_classes = mx - base + 1 > 0 ? mx - base + 1 : 0;
  }
  int64_t shape[OF_MAX_DIMS], strides[OF_MAX_DIMS];
  const int32_t nd = index->ndim;
  of_meta im = of_meta_of(index), rm;
  one_hot_result(&im, num_classes, &rm);
  memcpy(shape, index->shape, sizeof shape);
  memcpy(strides, index->strides, sizeof strides);
  strides[nd] = 0;
  of_tensor *res = NULL;
  OF_CHECK(of_zeros(rm.shape, rm.ndim, rm.dtype, dev, &res));
  if (index->numel > 0 && num_classes == 0) {
    of_tensor_release(res);
    return of_fail(OF_ERR_INDEX, "one_hot: index %s out of range for num_classes 0 (no index "
                   "is valid)", OF_SHAPE_STR(index));
  }
  if (res->numel == 0) {
    *out = res;
    return OF_OK;
  }
  shape[nd] = 1;   /* the index as [.., 1]: one write per row */
  of_tensor *iv = of_tensor_alias(index, shape, strides, nd + 1, index->offset);
  of_status st = iv ? dops->scatter(res, nd, iv, NULL, 1, 1, 0, base) : OF_ERR_OOM;
  of_tensor_release(iv);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

static of_status one_hot_body(of_tensor *index, int64_t num_classes, int64_t index_base,
                          of_tensor **out) {
  OF_ROUTE("one_hot", dev, dops, scatter, index);
  of_meta im = of_meta_of(index);
  OF_CHECK(one_hot_check(&im, num_classes));
  if (dops) return device_one_hot(dops, dev, index, num_classes, index_base, out);
  of_tensor *ic;
  OF_CHECK(contig_data(index, &ic));
  const bool i32 = ic->dtype == OF_INT32;
  const int64_t ies = i32 ? 4 : 8, n = ic->numel;
  const char *ip = of_ptr(ic);
  if (num_classes == -1) {
    if (n == 0) {
      of_tensor_release(ic);
      return of_fail(OF_ERR_ARG, "one_hot: cannot infer the number of classes from an empty "
                     "index %s; pass num_classes", OF_SHAPE_STR(index));
    }
    int64_t mx = INT64_MIN;
    for (int64_t i = 0; i < n; i++) {
      int64_t v = load_idx(ip + i * ies, i32);
      if (v > mx) mx = v;
    }
    num_classes = mx - index_base + 1 > 0 ? mx - index_base + 1 : 0;
  }
  of_status st = check_range("one_hot", ic, -1, num_classes, index_base);
  of_meta rm;
  one_hot_result(&im, num_classes, &rm);
  of_tensor *res = NULL;
  if (st == OF_OK) st = of_zeros(rm.shape, rm.ndim, rm.dtype, OF_CPU, &res);
  if (st == OF_OK) {
    int64_t *o = (int64_t *)of_ptr(res);
    const int64_t base = index_base, C = num_classes;
    int nt = res->numel >= OF_PARALLEL_GRAIN ? of_threads() : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t i = 0; i < n; i++) o[i * C + load_idx(ip + i * ies, i32) - base] = 1;
    *out = res;
  }
  of_tensor_release(ic);
  return st;
}

/* ---- masked_select / nonzero: compaction of the true positions ----
 * Two passes over a contiguous bool array: count per chunk, then each chunk
 * writes from its prefix offset, so the order is row-major. */
typedef struct {
  int nt;
  int64_t *offs;   /* nt + 1 prefix offsets */
} chunks;

static of_status count_true(const char *op, const bool *m, int64_t n, chunks *ch) {
  int nt = 1;
  if (n >= OF_PARALLEL_GRAIN) {
    int64_t most = n / (OF_PARALLEL_GRAIN / 4);
    nt = of_threads();
    if (nt > most) nt = (int)most;
  }
  ch->nt = nt;
  ch->offs = calloc((size_t)nt + 1, sizeof(int64_t));
  if (!ch->offs) return of_fail(OF_ERR_OOM, "%s: out of memory", op);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static, 1)
  for (int t = 0; t < nt; t++) {
    int64_t b = n * t / nt, e = n * (t + 1) / nt, cnt = 0;
    for (int64_t i = b; i < e; i++) cnt += m[i];
    ch->offs[t + 1] = cnt;
  }
  for (int t = 0; t < nt; t++) ch->offs[t + 1] += ch->offs[t];
  return OF_OK;
}

/* t broadcast to `shape` (which it must broadcast to), as a contiguous tensor. */
static of_status expand_data(of_tensor *t, const int64_t *shape, int32_t nd, of_tensor **out) {
  if (t->ndim == nd && t->numel == of_shape_numel(shape, nd)) return contig_data(t, out);
  of_tensor v = *t;   /* a stack header: only read by of_clone_data */
  v.refcount = 1;
  of_tensor_clear_autograd(&v);
  v.ndim = nd;
  for (int32_t i = 0; i < nd; i++) {
    int32_t td = i - (nd - t->ndim);
    v.shape[i] = shape[i];
    v.strides[i] = (td < 0 || t->shape[td] != shape[i]) ? 0 : t->strides[td];
  }
  v.numel = of_shape_numel(shape, nd);
  return of_clone_data(&v, out);
}

/* On a device: a prefix count of the (dense) mask gives each true entry its
 * slot; the count is read back to size the result. x NULL: nonzero's
 * coordinates in `shape`. */
static of_status device_compact(const char *op, const of_device_ops *dops, of_device dev,
                                of_tensor *mc, of_tensor *xc, const int64_t *shape,
                                int32_t nd, int64_t base, of_tensor **out) {
  of_tensor *pos = NULL, *res = NULL;
  int64_t n = mc->numel, total = 0;
  of_status st = of_tensor_new(&n, 1, OF_INT64, dev, &pos);
  if (st == OF_OK) st = dops->mask_scan(mc, pos, &total);
  if (st == OF_OK) {
    if (xc) st = of_tensor_new(&total, 1, xc->dtype, dev, &res);
    else {
      int64_t rs[2] = {total, nd};
      st = of_tensor_new(rs, 2, OF_INT64, dev, &res);
    }
  }
  if (st == OF_OK) st = dops->mask_compact(mc, pos, xc, shape, nd, base, res);
  of_tensor_release(pos);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  (void)op;
  *out = res;
  return OF_OK;
}

static of_status masked_select_compute(of_tensor *x, of_tensor *mask, of_tensor **out) {
  OF_ROUTE("masked_select", dev, dops, mask_compact, x, mask);
  if (mask->dtype != OF_BOOL)
    return of_fail(OF_ERR_DTYPE, "masked_select: mask must be a bool tensor, got %s (shape %s)",
                   OF_DT(mask), OF_SHAPE_STR(mask));
  int64_t shape[OF_MAX_DIMS];
  int32_t nd;
  OF_CHECK(of_broadcast_shapes("masked_select", x->shape, x->ndim, mask->shape, mask->ndim,
                               shape, &nd));
  of_tensor *xc = NULL, *mc = NULL, *res = NULL, *md = NULL, *xd = NULL;
  chunks ch = {0, NULL};
  of_status st = dops ? on_dev(x, dev, &xd) : OF_OK;
  if (st == OF_OK) st = expand_data(dops ? xd : x, shape, nd, &xc);
  of_tensor_release(xd);
  if (st == OF_OK && dops) {
    st = on_dev(mask, dev, &md);
    if (st == OF_OK) st = expand_data(md, shape, nd, &mc);
    of_tensor_release(md);
    if (st == OF_OK) st = device_compact("masked_select", dops, dev, mc, xc, shape, nd, 0, out);
    of_tensor_release(mc);
    of_tensor_release(xc);
    return st;
  }
  if (st == OF_OK) st = expand_data(mask, shape, nd, &mc);
  if (st == OF_OK) st = count_true("masked_select", (const bool *)of_ptr(mc), mc->numel, &ch);
  if (st == OF_OK) {
    int64_t total = ch.offs[ch.nt];
    st = of_tensor_new(&total, 1, x->dtype, OF_CPU, &res);
  }
  if (st == OF_OK && res->numel > 0) {
    const bool *m = (const bool *)of_ptr(mc);
    const char *src = of_ptr(xc);
    char *dst = of_ptr(res);
    const int64_t n = mc->numel, es = of_dtype_size(x->dtype);
    const int nt = ch.nt;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static, 1)
    for (int t = 0; t < nt; t++) {
      int64_t b = n * t / nt, e = n * (t + 1) / nt, j = ch.offs[t];
      for (int64_t i = b; i < e; i++)
        if (m[i]) memcpy(dst + (j++) * es, src + i * es, (size_t)es);
    }
  }
  free(ch.offs);
  of_tensor_release(mc);
  of_tensor_release(xc);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

static of_status nonzero_body(of_tensor *x, int64_t index_base, of_tensor **out) {
  OF_ROUTE("nonzero", dev, dops, mask_compact, x);
  of_tensor *b = NULL, *bc = NULL, *res = NULL;
  chunks ch = {0, NULL};
  of_status st = of_cast_data(x, OF_BOOL, &b);   /* NaN counts as nonzero, -0.0 does not */
  if (st == OF_OK) st = contig_data(b, &bc);
  if (st == OF_OK && dops) {
    st = device_compact("nonzero", dops, dev, bc, NULL, x->shape, x->ndim, index_base, out);
    of_tensor_release(bc);
    of_tensor_release(b);
    return st;
  }
  if (st == OF_OK) st = count_true("nonzero", (const bool *)of_ptr(bc), bc->numel, &ch);
  const int32_t nd = x->ndim;
  if (st == OF_OK) {
    int64_t shape[2] = {ch.offs[ch.nt], nd};
    st = of_tensor_new(shape, 2, OF_INT64, OF_CPU, &res);
  }
  if (st == OF_OK && res->numel > 0) {
    const bool *m = (const bool *)of_ptr(bc);
    int64_t *o = (int64_t *)of_ptr(res);
    const int64_t n = bc->numel, base = index_base;
    const int nt = ch.nt;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static, 1)
    for (int t = 0; t < nt; t++) {
      int64_t b0 = n * t / nt, e = n * (t + 1) / nt, j = ch.offs[t], c[OF_MAX_DIMS], rem = b0;
      for (int32_t d = nd - 1; d >= 0; d--) {
        c[d] = rem % x->shape[d];
        rem /= x->shape[d];
      }
      for (int64_t i = b0; i < e; i++) {
        if (m[i]) {
          for (int32_t d = 0; d < nd; d++) o[j * nd + d] = c[d] + base;
          j++;
        }
        for (int32_t d = nd - 1; d >= 0; d--) {
          if (++c[d] < x->shape[d]) break;
          c[d] = 0;
        }
      }
    }
  }
  free(ch.offs);
  of_tensor_release(bc);
  of_tensor_release(b);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

/* ---- autograd ----
 * Backward rules use public ops only, so under create_graph they record
 * their own history: gather's grad is a scatter-add, whose grad is a gather,
 * and so on. Index tensors are saved (an in-place change to one is caught at
 * backward time); they never get a grad. */

/* Records `def` for outs = op(ins) when some input requires grad; on failure
 * the outputs are released. *node is NULL when nothing was recorded. */
static of_status record(const of_grad_def *def, of_tensor **ins, int32_t nin, of_tensor **outs,
                        int32_t nout, of_node **node) {
  *node = NULL;
  if (!of_grad_needed(ins, nin) || !of_dtype_is_floating(outs[0]->dtype)) return OF_OK;
  of_status st = of_record(def, ins, nin, outs, nout, node);
  if (st != OF_OK)
    for (int32_t j = 0; j < nout; j++) {
      of_tensor_release(outs[j]);
      outs[j] = NULL;
    }
  return st;
}

/* Scope helpers: SK(s, call) runs `call`, which writes its result to r_, in
 * scope s unless s already failed; never nest SK calls. */
static of_tensor *kept(of_scope *s, of_status st, of_tensor **r) {
  of_tensor *t = st == OF_OK ? *r : NULL;
  *r = NULL;
  return of_s_keep(s, st, t);
}
#define SK(s, call) ((s)->st == OF_OK ? kept((s), (call), &r_) : NULL)

/* Hands t (owned by the scope) out as an input's grad. */
static void give_grad(of_scope *s, of_tensor *t, of_tensor **gi) {
  if (s->st != OF_OK || !t) return;
  of_tensor_retain(t);
  *gi = t;
}

/* t in meta m's dtype (grads go back in their input's dtype). */
static of_tensor *s_cast_to(of_scope *s, of_tensor *t, const of_meta *m) {
  of_tensor *r_ = NULL;
  if (!t || t->dtype == m->dtype || !of_dtype_is_floating(m->dtype)) return t;
  return SK(s, of_to_dtype(t, m->dtype, &r_));
}

/* t (index-shaped) grown with zeros to m's shape: an index may be smaller
 * than src in any dim, and 0-d counts as [1]. */
static of_tensor *s_pad_to(of_scope *s, of_tensor *t, const of_meta *m) {
  of_tensor *r_ = NULL;
  if (!t) return NULL;
  if (t->numel == 0) return SK(s, of_zeros(m->shape, m->ndim, t->dtype, of_dev(t), &r_));
  if (t->ndim != m->ndim) {
    int64_t ones[OF_MAX_DIMS];
    for (int32_t k = 0; k < OF_MAX_DIMS; k++) ones[k] = 1;
    t = SK(s, of_reshape(t, ones, m->ndim, &r_));
  }
  for (int32_t k = 0; t && k < m->ndim; k++) {
    if (t->shape[k] >= m->shape[k]) continue;
    int64_t zs[OF_MAX_DIMS];
    memcpy(zs, t->shape, sizeof zs);
    zs[k] = m->shape[k] - t->shape[k];
    of_tensor *z = SK(s, of_zeros(zs, m->ndim, t->dtype, of_dev(t), &r_));
    if (!z) return NULL;
    of_tensor *pair[2] = {t, z};
    t = SK(s, of_cat(pair, 2, k, &r_));
  }
  return t;
}

/* Under autograd an in-place form computes out of place and takes over the
 * result's data and history (consumes r). */
static of_status take_result(of_tensor *into, of_tensor *r, of_tensor **out) {
  of_status st = of_assign_result(into, r);
  of_tensor_release(r);
  if (st != OF_OK) return st;
  of_tensor_retain(into);
  *out = into;
  return OF_OK;
}

static bool wants_inplace_autograd(of_tensor **ins, int32_t nin, of_tensor *into) {
  return into && (of_grad_needed(ins, nin) || (into->requires_grad && of_is_grad_enabled()));
}

/* An operand that shares into's storage, cloned (with history) so that the
 * out-of-place computation and the saved values see the old data. */
static of_status unalias(of_tensor *t, const of_tensor *into, of_tensor **out) {
  if (t && t->storage == into->storage) return of_clone(t, out);
  *out = t;
  return OF_OK;
}

/* gather: grad x = scatter-add of g into zeros at the same indices;
 * a_gather (dim normalized), saved[0] the index */
static of_status gather_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0] || !n->needs[0]) return OF_OK;
  const of_meta *m = &n->in_meta[0];
  of_scope s = {0};
  of_tensor *r_ = NULL;
  of_tensor *idx = of_s_saved(&s, n, 0);
  of_tensor *z = SK(&s, of_zeros(m->shape, m->ndim, m->dtype, of_dev(g[0]), &r_));
  const a_gather *a = OF_NODE_ATTRS(a_gather, n);
  of_tensor *r = SK(&s, of_scatter(z, a->dim, idx, g[0], 0, 0, 1, a->base, NULL, &r_));
  return of_s_end(&s, r, &gi[0]);
}
static const of_grad_def gather_grad = {"GatherBackward", gather_backward};

static of_status gather_body(of_tensor *x, int32_t dim, of_tensor *index, int64_t index_base,
                         of_tensor **out) {
  OF_CHECK(gather_compute(x, dim, index, index_base, out));
  of_node *n;
  OF_CHECK(record(&gather_grad, &x, 1, out, 1, &n));
  if (n) {
    int32_t d;
    (void)of_norm_dim("gather", dim, x->ndim, &d);
    a_gather a;
    OF_ZERO(a);
    a.dim = d;
    a.base = index_base;
    OF_NODE_KEEP(n, OPK_GATHER, a);
    of_node_save(n, 0, index);
  }
  return OF_OK;
}

/* Replace-scatter with repeated indices keeps the last write along dim
 * (the kernel walks each line in order): true where a src entry was
 * overwritten by a later one, so it gets no grad. Found by scattering each
 * entry's position along dim and reading back which one stayed. */
static of_tensor *s_overwritten(of_scope *s, of_tensor *idx, int32_t d, int64_t base,
                                const of_meta *xm) {
  of_tensor *r_ = NULL;
  if (!idx) return NULL;
  const int64_t len = size_at(idx, d);
  int64_t ps[OF_MAX_DIMS];
  for (int32_t k = 0; k < idx->ndim; k++) ps[k] = k == d ? len : 1;
  of_tensor *ar = SK(s, of_arange(0, (double)len, 1, OF_INT64, of_dev(idx), &r_));
  of_tensor *pv = SK(s, of_reshape(ar, ps, idx->ndim, &r_));
  of_tensor *pos = SK(s, of_expand(pv, idx->shape, idx->ndim, &r_));
  of_tensor *w0 = SK(s, of_full(xm->shape, xm->ndim, -1, OF_INT64, of_dev(idx), &r_));
  of_tensor *w = SK(s, of_scatter(w0, d, idx, pos, 0, 0, 0, base, NULL, &r_));
  of_tensor *back = SK(s, of_gather(w, d, idx, base, &r_));
  return of_s_bin(s, OF_NE, back, pos);
}

/* scatter (inputs x, src): replace -- grad x = g with the written cells
 * zeroed, grad src = gather(g) where the entry was not overwritten; add --
 * grad x = g, grad src = gather(g).
 * a_scatter (dim normalized), saved[0] the index */
static of_status scatter_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const a_scatter *a = OF_NODE_ATTRS(a_scatter, n);
  const int32_t d = a->dim;
  const int64_t base = a->base;
  of_scope s = {0};
  of_tensor *r_ = NULL;
  of_tensor *idx = of_s_saved(&s, n, 0);
  if (n->needs[0]) {
    of_tensor *gx = a->reduce ? g[0] : SK(&s, of_scatter(g[0], d, idx, NULL, 0, 1, 0, base, NULL, &r_));
    give_grad(&s, s_cast_to(&s, gx, &n->in_meta[0]), &gi[0]);
  }
  if (n->needs[1]) {
    of_tensor *gs = SK(&s, of_gather(g[0], d, idx, base, &r_));
    if (!a->reduce) {
      of_tensor *lost = s_overwritten(&s, idx, d, base, &n->in_meta[0]);
      gs = SK(&s, of_masked_fill(gs, lost, 0, NULL, &r_));
    }
    give_grad(&s, s_cast_to(&s, s_pad_to(&s, gs, &n->in_meta[1]), &n->in_meta[1]), &gi[1]);
  }
  return of_s_end(&s, NULL, NULL);
}
static const of_grad_def scatter_grad = {"ScatterBackward", scatter_backward};
static const of_grad_def scatter_add_grad = {"ScatterAddBackward", scatter_backward};

static of_status scatter_body(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src,
                          double value, int32_t use_value, int32_t reduce, int64_t index_base,
                          of_tensor *into, of_tensor **out) {
  of_tensor *ins[2] = {x, use_value ? NULL : src};
  if (wants_inplace_autograd(ins, 2, into)) {
    const char *op = reduce ? "scatter_add" : "scatter";
    OF_CHECK(of_check_inplace(op, into));
    OF_CHECK(check_into(op, x, into));
    of_tensor *x2 = NULL, *s2 = NULL, *r = NULL;
    of_status st = unalias(x, into, &x2);
    if (st == OF_OK) st = unalias(ins[1], into, &s2);
    if (st == OF_OK)
      st = of_scatter(x2, dim, index, s2, value, use_value, reduce, index_base, NULL, &r);
    if (x2 && x2 != x) of_tensor_release(x2);
    if (s2 && s2 != ins[1]) of_tensor_release(s2);
    if (st != OF_OK) return st;
    return take_result(into, r, out);
  }
  OF_CHECK(scatter_compute(x, dim, index, src, value, use_value, reduce, index_base, into, out));
  of_node *n;
  OF_CHECK(record(reduce ? &scatter_add_grad : &scatter_grad, ins, 2, out, 1, &n));
  if (n) {
    int32_t d;
    (void)of_norm_dim("scatter", dim, x->ndim, &d);
    a_scatter a;
    OF_ZERO(a);
    a.dim = d;
    a.value = value;
    a.use_value = use_value;
    a.reduce = reduce;
    a.base = index_base;
    a.has_src = src != NULL;
    OF_NODE_KEEP(n, OPK_SCATTER, a);
    of_node_save(n, 0, index);
  }
  return OF_OK;
}

/* index_select: grad x = index_add of g into zeros; a_gather (dim normalized) */
static of_status index_select_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0] || !n->needs[0]) return OF_OK;
  const of_meta *m = &n->in_meta[0];
  of_scope s = {0};
  of_tensor *r_ = NULL;
  of_tensor *idx = of_s_saved(&s, n, 0);
  of_tensor *z = SK(&s, of_zeros(m->shape, m->ndim, m->dtype, of_dev(g[0]), &r_));
  const a_gather *a = OF_NODE_ATTRS(a_gather, n);
  of_tensor *r = SK(&s, of_index_add(z, a->dim, idx, g[0], 1, a->base, NULL, &r_));
  return of_s_end(&s, r, &gi[0]);
}
static const of_grad_def index_select_grad = {"IndexSelectBackward", index_select_backward};

static of_status index_select_body(of_tensor *x, int32_t dim, of_tensor *index, int64_t index_base,
                               of_tensor **out) {
  OF_CHECK(index_select_compute(x, dim, index, index_base, out));
  of_node *n;
  OF_CHECK(record(&index_select_grad, &x, 1, out, 1, &n));
  if (n) {
    int32_t d;
    (void)of_norm_dim("index_select", dim, x->ndim, &d);
    a_gather a;
    OF_ZERO(a);
    a.dim = d;
    a.base = index_base;
    OF_NODE_KEEP(n, OPK_INDEX_SELECT, a);
    of_node_save(n, 0, index);
  }
  return OF_OK;
}

/* index_add (inputs x, src): grad x = g, grad src = alpha * index_select(g);
 * a_index_add (dim normalized), saved[0] the index */
static of_status index_add_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_scope s = {0};
  of_tensor *r_ = NULL;
  if (n->needs[0]) give_grad(&s, s_cast_to(&s, g[0], &n->in_meta[0]), &gi[0]);
  if (n->needs[1]) {
    const of_meta *m = &n->in_meta[1];
    of_tensor *idx = of_s_saved(&s, n, 0);
    const a_index_add *a = OF_NODE_ATTRS(a_index_add, n);
    of_tensor *t = SK(&s, of_index_select(g[0], a->dim, idx, a->base, &r_));
    if (a->alpha != 1) t = of_s_bins(&s, OF_MUL, t, a->alpha);
    if (t && t->ndim != m->ndim) t = SK(&s, of_reshape(t, m->shape, m->ndim, &r_));
    give_grad(&s, s_cast_to(&s, t, m), &gi[1]);
  }
  return of_s_end(&s, NULL, NULL);
}
static const of_grad_def index_add_grad = {"IndexAddBackward", index_add_backward};

static of_status index_add_body(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src,
                            double alpha, int64_t index_base, of_tensor *into, of_tensor **out) {
  of_tensor *ins[2] = {x, src};
  if (wants_inplace_autograd(ins, 2, into)) {
    OF_CHECK(of_check_inplace("index_add", into));
    OF_CHECK(check_into("index_add", x, into));
    of_tensor *x2 = NULL, *s2 = NULL, *r = NULL;
    of_status st = unalias(x, into, &x2);
    if (st == OF_OK) st = unalias(src, into, &s2);
    if (st == OF_OK) st = of_index_add(x2, dim, index, s2, alpha, index_base, NULL, &r);
    if (x2 && x2 != x) of_tensor_release(x2);
    if (s2 && s2 != src) of_tensor_release(s2);
    if (st != OF_OK) return st;
    return take_result(into, r, out);
  }
  OF_CHECK(index_add_compute(x, dim, index, src, alpha, index_base, into, out));
  of_node *n;
  OF_CHECK(record(&index_add_grad, ins, 2, out, 1, &n));
  if (n) {
    int32_t d;
    (void)of_norm_dim("index_add", dim, x->ndim, &d);
    a_index_add a;
    OF_ZERO(a);
    a.dim = d;
    a.alpha = alpha;
    a.base = index_base;
    OF_NODE_KEEP(n, OPK_INDEX_ADD, a);
    of_node_save(n, 0, index);
  }
  return OF_OK;
}

/* sort / topk: the values' grad goes back to where each value came from
 * (a scatter into zeros at the saved indices output); a_sort (dim
 * normalized) */
static of_status sort_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0] || !n->needs[0]) return OF_OK;
  const of_meta *m = &n->in_meta[0];
  of_scope s = {0};
  of_tensor *r_ = NULL;
  of_tensor *idx = of_s_saved(&s, n, 0);
  of_tensor *z = SK(&s, of_zeros(m->shape, m->ndim, m->dtype, of_dev(g[0]), &r_));
  const a_sort *a = OF_NODE_ATTRS(a_sort, n);
  of_tensor *r = SK(&s, of_scatter(z, a->dim, idx, g[0], 0, 0, 0, a->base, NULL, &r_));
  return of_s_end(&s, r, &gi[0]);
}
static const of_grad_def sort_grad = {"SortBackward", sort_backward};
static const of_grad_def topk_grad = {"TopkBackward", sort_backward};

/* `a`: the op's record as the entry point got it (dim normalized here) */
static of_status record_sort(const of_grad_def *def, int32_t op, a_sort a, of_tensor *x,
                             of_tensor **values, of_tensor **indices) {
  of_tensor *outs[2] = {*values, *indices};
  of_node *n;
  of_status st = record(def, &x, 1, outs, 2, &n);
  if (st != OF_OK) {
    *values = *indices = NULL;
    return st;
  }
  if (n) {
    int32_t d;
    (void)of_norm_dim(def == &sort_grad ? "sort" : "topk", a.dim, x->ndim, &d);
    a.dim = d;
    OF_NODE_KEEP(n, op, a);
    of_node_save(n, 0, *indices);
  }
  return OF_OK;
}

static of_status sort_body(of_tensor *x, int32_t dim, int32_t descending, int32_t stable,
                       int64_t index_base, of_tensor **values, of_tensor **indices) {
  (void)stable;   /* the merge sort is always stable */
  OF_CHECK(sort_compute(x, dim, descending, index_base, values, indices));
  a_sort a;
  OF_ZERO(a);
  a.dim = dim;
  a.flag1 = descending;
  a.flag2 = stable;
  a.base = index_base;
  return record_sort(&sort_grad, OPK_SORT, a, x, values, indices);
}

static of_status topk_body(of_tensor *x, int64_t k, int32_t dim, int32_t largest, int32_t sorted,
                       int64_t index_base, of_tensor **values, of_tensor **indices) {
  (void)sorted;   /* results always come sorted */
  OF_CHECK(topk_compute(x, k, dim, largest, index_base, values, indices));
  a_sort a;
  OF_ZERO(a);
  a.k = k;
  a.dim = dim;
  a.flag1 = largest;
  a.flag2 = sorted;
  a.base = index_base;
  return record_sort(&topk_grad, OPK_TOPK, a, x, values, indices);
}

/* masked_select: g goes back to the true positions of the (broadcast) mask,
 * through an index_add into zeros at the mask's flat nonzero positions, then
 * summed down to x's shape; saved[0] the mask */
static of_status masked_select_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0] || !n->needs[0]) return OF_OK;
  const of_meta *m = &n->in_meta[0];
  of_scope s = {0};
  of_tensor *r_ = NULL, *res = NULL;
  of_tensor *mask = of_s_saved(&s, n, 0);
  int64_t shape[OF_MAX_DIMS], total;
  int32_t nd = 0;
  if (s.st == OF_OK)
    s.st = of_broadcast_shapes("masked_select", m->shape, m->ndim, mask->shape, mask->ndim,
                               shape, &nd);
  total = of_shape_numel(shape, nd);
  of_tensor *me = SK(&s, of_expand(mask, shape, nd, &r_));
  of_tensor *flat = SK(&s, of_reshape(me, &total, 1, &r_));
  of_tensor *nz = SK(&s, of_nonzero(flat, 0, &r_));   /* [K, 1], 0-based */
  int64_t k = nz ? nz->shape[0] : 0;
  of_tensor *idx = SK(&s, of_reshape(nz, &k, 1, &r_));
  of_tensor *z = SK(&s, of_zeros(&total, 1, m->dtype, of_dev(g[0]), &r_));
  of_tensor *sc = SK(&s, of_index_add(z, 0, idx, g[0], 1, 0, NULL, &r_));
  of_tensor *full = SK(&s, of_reshape(sc, shape, nd, &r_));
  if (s.st == OF_OK) s.st = of_sum_to(full, m, &res);
  of_status st = of_s_end(&s, NULL, NULL);
  if (st == OF_OK) gi[0] = res;
  return st;
}
static const of_grad_def masked_select_grad = {"MaskedSelectBackward", masked_select_backward};

static of_status masked_select_body(of_tensor *x, of_tensor *mask, of_tensor **out) {
  OF_CHECK(masked_select_compute(x, mask, out));
  of_node *n;
  OF_CHECK(record(&masked_select_grad, &x, 1, out, 1, &n));
  if (n) of_node_save(n, 0, mask);
  return OF_OK;
}
#undef SK

/* ---- entry points (dispatch), run functions and table rows ---- */
static of_status pack_gather(int32_t op, of_tensor *x, int32_t dim, of_tensor *idx, int64_t base,
                            of_tensor **out) {
  a_gather a;
  OF_ZERO(a);
  a.dim = dim;
  a.base = base;
  of_tensor *ins[2] = {x, idx};
  return OF_RECORD(op, a, ins, 2, out, 1);
}
of_status of_gather(of_tensor *x, int32_t dim, of_tensor *index, int64_t index_base,
                    of_tensor **out) {
  OF_DISPATCH(gather_body(x, dim, index, index_base, out),
            pack_gather(OPK_GATHER, x, dim, index, index_base, out));
}
of_status of_index_select(of_tensor *x, int32_t dim, of_tensor *index, int64_t index_base,
                          of_tensor **out) {
  OF_DISPATCH(index_select_body(x, dim, index, index_base, out),
            pack_gather(OPK_INDEX_SELECT, x, dim, index, index_base, out));
}
static of_status run_gather(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_gather);
  if (n->op == OPK_GATHER) OF_RUN1(of_gather(ins[0], a->dim, ins[1], a->base, OF_R));
  OF_RUN1(of_index_select(ins[0], a->dim, ins[1], a->base, OF_R));
}
static void describe_gather(const void *p, char *b, size_t c) {
  of_catf(b, c, "dim=%d", (int)((const a_gather *)p)->dim);
}
/* a loaded gather / index_select node's result, by the bodies' plans */
static of_status infer_gather(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  int32_t d = 0;
  (void)nin;
  return gather_plan(&ins[0], ((const a_gather *)p)->dim, &ins[1], &d, &outs[0]);
}
static of_status infer_index_select(const void *p, int32_t nin, const of_meta *ins,
                                    of_meta *outs) {
  int32_t d = 0;
  (void)nin;
  return index_select_plan(&ins[0], ((const a_gather *)p)->dim, &ins[1], &d, &outs[0]);
}

static of_status pack_scatter(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src,
                             double value, int32_t use_value, int32_t reduce, int64_t base,
                             of_tensor *into, of_tensor **out) {
  a_scatter a;
  OF_ZERO(a);
  a.dim = dim;
  a.value = value;
  a.use_value = use_value;
  a.reduce = reduce;
  a.base = base;
  a.has_src = src != NULL;
  of_tensor *ins[4] = {x, index, src, into};
  return OF_RECORD(OPK_SCATTER, a, ins, into ? 4 : 3, out, 1);
}
of_status of_scatter(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src, double value,
                     int32_t use_value, int32_t reduce, int64_t index_base, of_tensor *into,
                     of_tensor **out) {
  OF_DISPATCH(scatter_body(x, dim, index, src, value, use_value, reduce, index_base, into, out),
            pack_scatter(x, dim, index, src, value, use_value, reduce, index_base, into, out));
}
static of_status run_scatter(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_scatter);
  OF_RUN1(of_scatter(ins[0], a->dim, ins[1], ins[2], a->value, a->use_value, a->reduce, a->base,
                  n->nin > 3 ? ins[3] : NULL, OF_R));
}

/* a loaded scatter / index_add node's result, by the bodies' plans (ins:
 * x, index, src -- absent for a value --, the optional output tensor) */
static of_status infer_scatter(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_scatter *a = p;
  int32_t d = 0;
  return scatter_plan(&ins[0], a->dim, &ins[1], &ins[2], a->use_value, a->reduce,
                      nin > 3 ? &ins[3] : NULL, &d, &outs[0]);
}
static of_status infer_index_add(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_index_add *a = p;
  int32_t d = 0;
  return index_add_plan(&ins[0], a->dim, &ins[1], &ins[2], a->alpha, nin > 3 ? &ins[3] : NULL,
                        &d, &outs[0]);
}

static of_status pack_index_add(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src,
                               double alpha, int64_t base, of_tensor *into, of_tensor **out) {
  a_index_add a;
  OF_ZERO(a);
  a.dim = dim;
  a.alpha = alpha;
  a.base = base;
  of_tensor *ins[4] = {x, index, src, into};
  return OF_RECORD(OPK_INDEX_ADD, a, ins, into ? 4 : 3, out, 1);
}
of_status of_index_add(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src, double alpha,
                       int64_t index_base, of_tensor *into, of_tensor **out) {
  OF_DISPATCH(index_add_body(x, dim, index, src, alpha, index_base, into, out),
            pack_index_add(x, dim, index, src, alpha, index_base, into, out));
}
static of_status run_index_add(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_index_add);
  OF_RUN1(of_index_add(ins[0], a->dim, ins[1], ins[2], a->alpha, a->base,
                    n->nin > 3 ? ins[3] : NULL, OF_R));
}

static of_status pack_sort(int32_t op, of_tensor *x, int64_t k, int32_t dim, int32_t f1,
                          int32_t f2, int64_t base, of_tensor **values, of_tensor **indices) {
  a_sort a;
  OF_ZERO(a);
  a.k = k;
  a.dim = dim;
  a.flag1 = f1;
  a.flag2 = f2;
  a.base = base;
  of_tensor *outs[2] = {*values, *indices};
  return OF_RECORD(op, a, &x, 1, outs, 2);
}
of_status of_sort(of_tensor *x, int32_t dim, int32_t descending, int32_t stable,
                  int64_t index_base, of_tensor **values, of_tensor **indices) {
  OF_DISPATCH(sort_body(x, dim, descending, stable, index_base, values, indices),
            pack_sort(OPK_SORT, x, 0, dim, descending, stable, index_base, values, indices));
}
of_status of_topk(of_tensor *x, int64_t k, int32_t dim, int32_t largest, int32_t sorted,
                  int64_t index_base, of_tensor **values, of_tensor **indices) {
  OF_DISPATCH(topk_body(x, k, dim, largest, sorted, index_base, values, indices),
            pack_sort(OPK_TOPK, x, k, dim, largest, sorted, index_base, values, indices));
}
/* a loaded one_hot node's result. With num_classes -1 the class count is
 * the index data's (the largest value), which a file's shapes cannot tell:
 * the loader treats that node like nonzero's (its result dynamic, checked
 * for dtype and rank only) and never calls this; were it called, it
 * refuses rather than guess. */
static of_status infer_one_hot(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_one_hot *a = p;
  (void)nin;
  OF_CHECK(one_hot_check(&ins[0], a->n));
  if (a->n < 0)
    return of_fail(OF_ERR_ARG, "one_hot: num_classes -1 takes the class count from the index's "
                   "data (index %s)", OF_SHAPE_STR(&ins[0]));
  one_hot_result(&ins[0], a->n, &outs[0]);
  return OF_OK;
}
/* a loaded sort / topk node's values and indices, by the bodies' sort_plan */
static of_status infer_sort(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_sort *a = p;
  int32_t d = 0;
  int64_t take = 0;
  (void)nin;
  return sort_plan("sort", &ins[0], a->dim, false, 0, &d, &take, &outs[0], &outs[1]);
}
static of_status infer_topk(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_sort *a = p;
  int32_t d = 0;
  int64_t take = 0;
  (void)nin;
  return sort_plan("topk", &ins[0], a->dim, true, a->k, &d, &take, &outs[0], &outs[1]);
}
static of_status run_sort(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_sort);
  of_tensor *v = NULL, *i = NULL;
  of_status st = n->op == OPK_SORT
                     ? of_sort(ins[0], a->dim, a->flag1, a->flag2, a->base, &v, &i)
                     : of_topk(ins[0], a->k, a->dim, a->flag1, a->flag2, a->base, &v, &i);
  if (st == OF_OK) { outs[0] = v; outs[1] = i; }
  return st;
}

static of_status pack_one_hot(int32_t op, of_tensor *x, int64_t v, int64_t base, of_tensor **out) {
  a_one_hot a = {v, base};
  return OF_RECORD(op, a, &x, 1, out, 1);
}
of_status of_one_hot(of_tensor *index, int64_t num_classes, int64_t index_base,
                     of_tensor **out) {
  OF_DISPATCH(one_hot_body(index, num_classes, index_base, out),
            pack_one_hot(OPK_ONE_HOT, index, num_classes, index_base, out));
}
of_status of_nonzero(of_tensor *x, int64_t index_base, of_tensor **out) {
  OF_DISPATCH(nonzero_body(x, index_base, out), pack_one_hot(OPK_NONZERO, x, 0, index_base, out));
}
static of_status run_one_hot(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_one_hot);
  if (n->op == OPK_ONE_HOT) OF_RUN1(of_one_hot(ins[0], a->n, a->base, OF_R));
  OF_RUN1(of_nonzero(ins[0], a->base, OF_R));
}

static of_status pack_masked_select(of_tensor *x, of_tensor *mask, of_tensor **out) {
  a_i1 a = {0, 0};
  of_tensor *ins[2] = {x, mask};
  return OF_RECORD(OPK_MASKED_SELECT, a, ins, 2, out, 1);
}
of_status of_masked_select(of_tensor *x, of_tensor *mask, of_tensor **out) {
  OF_DISPATCH(masked_select_body(x, mask, out), pack_masked_select(x, mask, out));
}
static of_status run_masked_select(const of_oprec *n, of_tensor **ins, void **outs) {
  (void)n;
  OF_RUN1(of_masked_select(ins[0], ins[1], OF_R));
}

OF_OP_IMPL_INFER(GATHER, run_gather, NULL, NULL, describe_gather, infer_gather);
OF_OP_IMPL_INFER(SCATTER, run_scatter, NULL, NULL, NULL, infer_scatter);
OF_OP_IMPL_INFER(INDEX_SELECT, run_gather, NULL, NULL, describe_gather, infer_index_select);
OF_OP_IMPL_INFER(INDEX_ADD, run_index_add, NULL, NULL, NULL, infer_index_add);
OF_OP_IMPL_INFER(SORT, run_sort, NULL, NULL, NULL, infer_sort);
OF_OP_IMPL_INFER(TOPK, run_sort, NULL, NULL, NULL, infer_topk);
OF_OP_IMPL_INFER(ONE_HOT, run_one_hot, NULL, NULL, NULL, infer_one_hot);
OF_OP_IMPL(MASKED_SELECT, run_masked_select, NULL, NULL, NULL);
OF_OP_IMPL(NONZERO, run_one_hot, NULL, NULL, NULL);
