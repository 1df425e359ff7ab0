/* io.c -- saving and loading graphs.
 *
 * A saved graph is one safetensors file: the externals (parameters,
 * buffers, optimizer state, constants) as entries "ext.0", "ext.1", ...,
 * and the IR as a uint8 entry "__graph__", with
 * __metadata__ {"format": "oneflow-graph", "version": "1"}. Lua writes it
 * with the writer of flow.save (of_graph_serialize gives the IR bytes);
 * of_graph_load reads it back here in C so that a host without Lua can run
 * it. The reader trusts nothing: every size, offset, count, id and
 * attribute record is checked, and a checksum over the IR catches edits.
 *
 * IR bytes (little-endian):
 *   "OFGRAPH\0" u32 version u32 0x01020304 u64 payload_len u64 fnv1a64(payload)
 *   payload: u32 nvals nnodes ninputs noutputs nexternals
 *     value: u8 kind u8 is_const i32 dtype ndim root same ext_index
 *            i64 shape[8] strides[8] offset, u16 name_len, name
 *     i32 inputs[ninputs] outputs[noutputs]
 *     node:  u16 name_len, op name, i32 attr_size, attrs,
 *            i32 nin nout nreal nmut flags, u32 needs keep_in keep_out, i32 handle_nr,
 *            i32 in[nin] out[nout] mut[nmut] */
#include "ops.h"
#include "../device.h"
#include "fused.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>

enum { IR_VERSION = 3, MAX_COUNT = 1 << 24 };   /* 2: devices, 3: addmm record 24 bytes */
static const char MAGIC[8] = {'O', 'F', 'G', 'R', 'A', 'P', 'H', 0};

static uint64_t fnv1a(const uint8_t *p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

/* ---- writer ---- */
typedef struct {
  uint8_t *buf;
  size_t len, cap;
  bool oom;
} wbuf;

static void put(wbuf *w, const void *p, size_t n) {
  if (w->oom) return;
  if (w->len + n > w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 4096;
    while (cap < w->len + n) cap *= 2;
    uint8_t *b = realloc(w->buf, cap);
    if (!b) { w->oom = true; return; }
    w->buf = b;
    w->cap = cap;
  }
  memcpy(w->buf + w->len, p, n);
  w->len += n;
}
static void put_u8(wbuf *w, uint8_t v) { put(w, &v, 1); }
static void put_u16(wbuf *w, uint16_t v) { put(w, &v, 2); }
static void put_i32(wbuf *w, int32_t v) { put(w, &v, 4); }
static void put_u32(wbuf *w, uint32_t v) { put(w, &v, 4); }
static void put_i64(wbuf *w, int64_t v) { put(w, &v, 8); }
static void put_str(wbuf *w, const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n > 65535) n = 65535;
  put_u16(w, (uint16_t)n);
  if (n) put(w, s, n);
}

of_status of_graph_serialize(of_graph *g, of_tensor **blob) {
  if (!g) return of_fail(OF_ERR_ARG, "nn.Graph: no graph");
  if (!((const union { uint32_t u; uint8_t b[4]; }){.u = 1}).b[0])
    return of_fail(OF_ERR_STATE, "nn.Graph.save: big-endian hosts are not supported");
  of_graph_compact(g);
  for (int32_t i = 0; i < g->nnodes; i++) {
    const of_opdef *d = of_op_def(g->nodes[i].op);
    if (d && (d->flags & OF_OPF_COLLECTIVE))
      return of_fail(OF_ERR_STATE, "nn.Graph.save: the graph holds a collective (%s): graphs "
                     "with global tensors cannot be saved yet; save the parameters with "
                     "flow.distributed.save instead", d->name);
  }
  int32_t *uses = of_graph_use_counts(g);
  int32_t *ext_index = malloc(sizeof *ext_index * (size_t)(g->nvals ? g->nvals : 1));
  if (!uses || !ext_index) {
    free(uses);
    free(ext_index);
    return of_fail(OF_ERR_OOM, "nn.Graph.save: out of memory");
  }
  int32_t next = 0;
  for (int32_t v = 0; v < g->nvals; v++)
    ext_index[v] = g->vals[v].kind == OF_GV_EXTERNAL && uses[v] > 0 ? next++ : -1;
  free(uses);
  wbuf w = {0};
  put_u32(&w, (uint32_t)g->nvals);
  put_u32(&w, (uint32_t)g->nnodes);
  put_u32(&w, (uint32_t)g->ninputs);
  put_u32(&w, (uint32_t)g->noutputs);
  put_u32(&w, (uint32_t)next);
  put_i32(&w, g->device);
  for (int32_t v = 0; v < g->nvals; v++) {
    const of_gval *x = &g->vals[v];
    put_u8(&w, (uint8_t)x->kind);
    put_u8(&w, x->is_const);
    put_i32(&w, x->dtype);
    put_i32(&w, x->device);
    put_i32(&w, x->ndim);
    put_i32(&w, x->root);
    put_i32(&w, x->same);
    put_i32(&w, ext_index[v]);
    for (int32_t i = 0; i < OF_MAX_DIMS; i++) put_i64(&w, x->shape[i]);
    for (int32_t i = 0; i < OF_MAX_DIMS; i++) put_i64(&w, x->strides[i]);
    put_i64(&w, x->offset);
    put_str(&w, x->name);
  }
  free(ext_index);
  for (int32_t i = 0; i < g->ninputs; i++) put_i32(&w, g->inputs[i]);
  for (int32_t i = 0; i < g->noutputs; i++) put_i32(&w, g->outputs[i]);
  for (int32_t i = 0; i < g->nnodes; i++) {
    const of_gnode *n = &g->nodes[i];
    const of_opdef *d = of_op_def(n->op);
    put_str(&w, d ? d->name : "?");
    put_i32(&w, n->attr_size);
    put(&w, n->attrs, (size_t)n->attr_size);
    put_i32(&w, n->nin);
    put_i32(&w, n->nout);
    put_i32(&w, n->nreal);
    put_i32(&w, n->nmut);
    put_i32(&w, n->flags & OF_GN_CAPTURE);
    put_u32(&w, n->needs);
    put_u32(&w, n->keep_in);
    put_u32(&w, n->keep_out);
    put_i32(&w, n->handle_nr);
    for (int32_t k = 0; k < n->nin; k++) put_i32(&w, n->in[k]);
    for (int32_t j = 0; j < n->nout; j++) put_i32(&w, n->out[j]);
    for (int32_t m = 0; m < n->nmut; m++) put_i32(&w, n->mut[m]);
  }
  if (w.oom) {
    free(w.buf);
    return of_fail(OF_ERR_OOM, "nn.Graph.save: out of memory");
  }
  int64_t total = 8 + 4 + 4 + 8 + 8 + (int64_t)w.len;
  of_tensor *t;
  of_status st = of_tensor_new(&total, 1, OF_UINT8, OF_CPU, &t);
  if (st != OF_OK) {
    free(w.buf);
    return st;
  }
  uint8_t *p = (uint8_t *)of_ptr(t);
  uint32_t version = IR_VERSION, endian = 0x01020304;
  uint64_t plen = w.len, sum = fnv1a(w.buf, w.len);
  memcpy(p, MAGIC, 8);
  memcpy(p + 8, &version, 4);
  memcpy(p + 12, &endian, 4);
  memcpy(p + 16, &plen, 8);
  memcpy(p + 24, &sum, 8);
  memcpy(p + 32, w.buf, w.len);
  free(w.buf);
  *blob = t;
  return OF_OK;
}

/* ---- reader of the IR bytes ---- */
typedef struct {
  const uint8_t *p;
  size_t len, pos;
  bool bad;
} rbuf;

static bool get(rbuf *r, void *out, size_t n) {
  if (r->bad || n > r->len - r->pos) {
    r->bad = true;
    memset(out, 0, n);
    return false;
  }
  memcpy(out, r->p + r->pos, n);
  r->pos += n;
  return true;
}
static uint8_t get_u8(rbuf *r) { uint8_t v; get(r, &v, 1); return v; }
static uint16_t get_u16(rbuf *r) { uint16_t v; get(r, &v, 2); return v; }
static int32_t get_i32(rbuf *r) { int32_t v; get(r, &v, 4); return v; }
static uint32_t get_u32(rbuf *r) { uint32_t v; get(r, &v, 4); return v; }
static int64_t get_i64(rbuf *r) { int64_t v; get(r, &v, 8); return v; }

typedef struct {
  const char *path;
} ctx_t;

static of_status corrupt(const ctx_t *c, const char *what) {
  return of_fail(OF_ERR_IO, "nn.Graph.load: %s: %s", c->path, what);
}

/* An error in node i's record: names the node (1-based, as the IR dump
 * numbers them), its op and the field. */
static of_status node_bad(const ctx_t *c, uint32_t i, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static of_status node_bad(const ctx_t *c, uint32_t i, const char *op, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return of_fail(OF_ERR_IO, "nn.Graph.load: %s: node %u (%s): %s", c->path, i + 1,
                 op ? op : "?", what);
}

/* Inputs below an op's minimum arity that may be absent (NULL): bit k for
 * input k. Every other input below the minimum is required -- the op's run
 * function reads it -- and an input above the minimum is an optional extra
 * (an `into` tensor, found_inf), absent or not. */
static uint32_t optional_inputs(int32_t op) {
  switch (op) {
    case OPK_CONV: case OPK_CONV_TRANSPOSE: case OPK_CONV_WEIGHT_GRAD:
      return 1u << 2;                                   /* bias (unused by the weight grad) */
    case OPK_BATCH_NORM: case OPK_INSTANCE_NORM: case OPK_LAYER_NORM: case OPK_GROUP_NORM:
    case OPK_RMS_NORM:
      return 0x1eu;                                     /* running stats, weight, bias */
    case OPK_BATCH_NORM_EVAL: return 3u << 3;          /* weight, bias */
    case OPK_CROSS_ENTROPY: case OPK_NLL_LOSS: return 1u << 2;   /* class weights */
    case OPK_OPTIM_SGD: return 1u << 2;                 /* momentum buffer */
    case OPK_OPTIM_ADAM: return 1u << 4;                /* max_exp_avg_sq (amsgrad) */
    case OPK_SCATTER: return 1u << 2;                   /* src (a scalar value instead) */
    case OPK_SDPA: return 1u << 3;                      /* attn_mask */
    case OPK_QUANTIZED_LINEAR: case OPK_QUANTIZED_CONV2D: case OPK_DYNAMIC_QUANTIZED_LINEAR:
      return 3u << 3;                                   /* weight zero points, bias */
    case OF_OPK_BACKWARD: return ~1u;                   /* grads of unused outputs */
    default: return 0;
  }
}

/* bytes of a tensor of this shape and dtype, or -1 past 2^48 (no real
 * tensor is that large; the bound keeps every later product in range) */
static int64_t meta_bytes(const int64_t *shape, int32_t ndim, of_dtype dt) {
  const int64_t lim = (int64_t)1 << 48;
  int64_t n = 1;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] < 0) return -1;
    if (shape[i] == 0) return 0;
    if (n > lim / shape[i]) return -1;
    n *= shape[i];
  }
  int64_t es = of_dtype_size(dt);
  return n > lim / (es ? es : 1) ? -1 : n * es;
}

/* Attribute ranges that the record alone and its inputs' recorded ranks
 * decide: dims within the input's rank, enum codes and dtypes in range,
 * counts within their arrays, positive group and window counts. Writes the
 * field and the reason into why; false when the record is bad. The op's run
 * function checks everything again against the real tensors; this names
 * the node before anything runs. */
static bool dim_ok(int64_t d, int32_t nd) {
  int32_t n = nd > 0 ? nd : 1;   /* a 0-d tensor takes dim 0 / -1 */
  return d >= -n && d < n;
}
static bool dtype_ok(int32_t dt) { return dt >= 0 && dt < OF_NUM_DTYPES; }

static bool attrs_ok(const of_graph *g, const of_gnode *n, char *why, size_t cap) {
  int32_t nd = n->nin > 0 && n->in[0] >= 0 ? g->vals[n->in[0]].ndim : 0;
  int64_t out_numel = 0;
  if (n->nout > 0 && n->out[0] >= 0 && g->vals[n->out[0]].kind != OF_GV_HANDLE)
    out_numel = of_shape_numel(g->vals[n->out[0]].shape, g->vals[n->out[0]].ndim);
  const void *p = n->attrs;
#define BAD(...) do { snprintf(why, cap, __VA_ARGS__); return false; } while (0)
/* a dim, or COUNT of them, of the record: in range for the nd-d input */
#define CHECK_DIM(D)                                                                            \
  do {                                                                                          \
    if (!dim_ok((D), nd)) BAD("attrs.dim: %d is out of range for a %d-d input", (int)(D), (int)nd); \
  } while (0)
#define CHECK_DIMS(COUNT, NAME, DIMS)                                                           \
  do {                                                                                          \
    if (!NDIM_OK(COUNT)) BAD("attrs." NAME ": %d dims", (int)(COUNT));                          \
    for (int32_t i_ = 0; i_ < (COUNT); i_++)                                                    \
      if (!dim_ok((DIMS)[i_], nd))                                                              \
        BAD("attrs.dims[%d]: %d is out of range for a %d-d input", (int)i_ + 1, (int)(DIMS)[i_], (int)nd); \
  } while (0)
#define CHECK_FLAG(X, NAME) \
  do { if ((X) != 0 && (X) != 1) BAD("attrs.%s: %d (0 or 1)", NAME, (int)(X)); } while (0)
#define CHECK_FINITE(X, NAME) \
  do { if (!isfinite(X)) BAD("attrs.%s: %g is not finite", NAME, (double)(X)); } while (0)
/* index values are given 0-based (C) or 1-based (Lua) */
#define CHECK_BASE(X) \
  do { if ((X) != 0 && (X) != 1) BAD("attrs.index_base: %lld (0 or 1)", (long long)(X)); } while (0)
  switch (n->op) {
    case OPK_SOFTMAX: case OPK_CUMULATIVE: {
      const a_softmax *a = p;
      CHECK_DIM(a->dim);
      CHECK_FLAG(a->flag, "flag");
      break;
    }
    case OPK_TRANSPOSE: case OPK_FLATTEN: {
      const a_i2 *a = p;
      if (!dim_ok(a->a, nd) || !dim_ok(a->b, nd))
        BAD("attrs.dims: %d, %d out of range for a %d-d input", (int)a->a, (int)a->b, (int)nd);
      break;
    }
    case OPK_NARROW: case OPK_SLICE: case OPK_SELECT: {
      const a_dim3 *a = p;
      CHECK_DIM(a->dim);
      if (n->op == OPK_NARROW && a->b < 0) BAD("attrs.length: %lld is negative", (long long)a->b);
      if (n->op == OPK_SLICE && a->c < 1) BAD("attrs.step: %lld (at least 1)", (long long)a->c);
      break;
    }
    case OPK_GATHER: case OPK_INDEX_SELECT: {
      const a_gather *a = p;
      CHECK_DIM(a->dim);
      CHECK_BASE(a->base);
      break;
    }
    case OPK_SCATTER: {
      const a_scatter *a = p;
      CHECK_DIM(a->dim);
      CHECK_BASE(a->base);
      CHECK_FLAG(a->use_value, "use_value");
      CHECK_FLAG(a->has_src, "has_src");
      if (a->reduce != 0 && a->reduce != 1) BAD("attrs.reduce: %d (0 replace, 1 add)", (int)a->reduce);
      break;
    }
    case OPK_INDEX_ADD: {
      const a_index_add *a = p;
      CHECK_DIM(a->dim);
      CHECK_BASE(a->base);
      break;
    }
    case OPK_SORT: case OPK_TOPK: {
      const a_sort *a = p;
      CHECK_DIM(a->dim);
      CHECK_BASE(a->base);
      CHECK_FLAG(a->flag1, n->op == OPK_TOPK ? "largest" : "descending");
      CHECK_FLAG(a->flag2, n->op == OPK_TOPK ? "sorted" : "stable");
      if (n->op == OPK_TOPK) {
        int32_t d = a->dim < 0 ? a->dim + (nd > 0 ? nd : 1) : a->dim;
        int64_t len = nd > 0 ? g->vals[n->in[0]].shape[d] : 1;
        if (a->k < 0 || a->k > len)
          BAD("attrs.k: %lld is out of range for a dim of size %lld", (long long)a->k, (long long)len);
      } else if (a->k != 0) BAD("attrs.k: %lld (unused by sort: must be 0)", (long long)a->k);
      break;
    }
    case OPK_PERMUTE: case OPK_FLIP: {
      const a_dims *a = p;
      CHECK_DIMS(a->n, "n", a->dims);
      break;
    }
    case OPK_REDUCE: {
      const a_reduce *a = p;
      CHECK_DIMS(a->ndims, "ndims", a->dims);
      if (a->dtype >= OF_NUM_DTYPES) BAD("attrs.dtype: unknown dtype %d", (int)a->dtype);   /* < 0: default */
      if (a->op < 0 || a->op >= OF_NUM_REDUCE) BAD("attrs.op: unknown reduction %d", (int)a->op);
      CHECK_FLAG(a->keepdim, "keepdim");
      break;
    }
    case OPK_VAR: {
      const a_var *a = p;
      CHECK_DIMS(a->ndims, "ndims", a->dims);
      CHECK_FLAG(a->keepdim, "keepdim");
      CHECK_FLAG(a->is_std, "is_std");
      CHECK_FINITE(a->correction, "correction");
      break;
    }
    case OPK_BINARY: {
      const a_binary *a = p;
      if (a->op < 0 || a->op >= OF_NUM_BINARY) BAD("attrs.op: unknown binary op %d", (int)a->op);
      break;
    }
    case OPK_BINARY_SCALAR: {
      const a_binary_scalar *a = p;
      if (a->op < 0 || a->op >= OF_NUM_BINARY) BAD("attrs.op: unknown binary op %d", (int)a->op);
      CHECK_FLAG(a->reverse, "reverse");
      break;
    }
    case OPK_UNARY: {
      const a_unary *a = p;
      if (a->op < 0 || a->op >= OF_NUM_UNARY) BAD("attrs.op: unknown unary op %d", (int)a->op);
      break;
    }
    case OPK_TO_DTYPE: {
      const a_i1 *a = p;
      if (!dtype_ok(a->v)) BAD("attrs.dtype: unknown dtype %d", (int)a->v);
      break;
    }
    case OPK_EMPTY: case OPK_ZEROS: case OPK_FULL: case OPK_RAND: case OPK_RANDN: {
      const a_create *a = p;
      if (!NDIM_OK(a->ndim)) BAD("attrs.ndim: %d", (int)a->ndim);
      if (!dtype_ok(a->dtype)) BAD("attrs.dtype: unknown dtype %d", (int)a->dtype);
      if (a->device < 0 || (a->device & 0xff) > OF_CUDA) BAD("attrs.device: %d", (int)a->device);
      for (int32_t i = 0; i < a->ndim; i++)
        if (a->shape[i] < 0) BAD("attrs.shape[%d]: %lld is negative", (int)i + 1, (long long)a->shape[i]);
      break;
    }
    case OPK_EYE: case OPK_ARANGE: case OPK_LINSPACE: {
      /* the element count the record asks for may not exceed the recorded
       * result's: the op allocates it before any later check */
      const a_range *a = p;
      if (!dtype_ok(a->dtype)) BAD("attrs.dtype: unknown dtype %d", (int)a->dtype);
      if (a->device < 0 || (a->device & 0xff) > OF_CUDA) BAD("attrs.device: %d", (int)a->device);
      double count;
      if (n->op == OPK_EYE) count = a->a * (a->b < 0 ? a->a : a->b);
      else if (n->op == OPK_LINSPACE) count = a->c;
      else count = a->c != 0 ? (a->b - a->a) / a->c : INFINITY;
      if (!(count >= -1 && count <= (double)out_numel + 1))
        BAD("attrs: asks for %g elements, the recorded result has %lld", count, (long long)out_numel);
      if (n->op == OPK_EYE && (a->a < 0 || a->a > 2147483648.0 || a->b > 2147483648.0))
        BAD("attrs: eye of %g x %g", a->a, a->b);
      break;
    }
    case OPK_VIEW: case OPK_RESHAPE: case OPK_EXPAND: {
      const a_shape *a = p;
      if (!NDIM_OK(a->ndim)) BAD("attrs.ndim: %d", (int)a->ndim);
      int64_t known[OF_MAX_DIMS];
      for (int32_t i = 0; i < a->ndim; i++) {
        if (a->shape[i] < -1 || a->shape[i] > ((int64_t)1 << 40))
          BAD("attrs.shape[%d]: %lld", (int)i + 1, (long long)a->shape[i]);
        known[i] = a->shape[i] < 0 ? 1 : a->shape[i];
      }
      if (meta_bytes(known, a->ndim, OF_UINT8) < 0) BAD("attrs.shape: more than 2^48 elements");
      break;
    }
    case OPK_AS_STRIDED: {
      const a_strided *a = p;
      const int64_t lim = (int64_t)1 << 40;
      if (!NDIM_OK(a->ndim)) BAD("attrs.ndim: %d", (int)a->ndim);
      for (int32_t i = 0; i < a->ndim; i++) {
        if (a->shape[i] < 0 || a->shape[i] > lim) BAD("attrs.shape[%d]: %lld", (int)i + 1, (long long)a->shape[i]);
        if (a->strides[i] < -lim || a->strides[i] > lim)
          BAD("attrs.strides[%d]: %lld", (int)i + 1, (long long)a->strides[i]);
      }
      if (a->offset < 0 || a->offset > ((int64_t)1 << 48)) BAD("attrs.offset: %lld", (long long)a->offset);
      if (meta_bytes(a->shape, a->ndim, OF_UINT8) < 0) BAD("attrs.shape: more than 2^48 elements");
      break;
    }
    case OF_OPK_ALIAS: {
      const a_alias *a = p;
      const int64_t lim = (int64_t)1 << 40;
      if (!NDIM_OK(a->ndim)) BAD("attrs.ndim: %d", (int)a->ndim);
      for (int32_t i = 0; i < a->ndim; i++) {
        if (a->shape[i] < 0 || a->shape[i] > lim) BAD("attrs.shape[%d]: %lld", (int)i + 1, (long long)a->shape[i]);
        if (a->strides[i] < -lim || a->strides[i] > lim)
          BAD("attrs.strides[%d]: %lld", (int)i + 1, (long long)a->strides[i]);
      }
      if (meta_bytes(a->shape, a->ndim, OF_UINT8) < 0) BAD("attrs.shape: more than 2^48 elements");
      if (a->rel_offset < -((int64_t)1 << 48) || a->rel_offset > ((int64_t)1 << 48))
        BAD("attrs.rel_offset: %lld", (long long)a->rel_offset);
      break;
    }
    case OPK_PAD: {
      const a_pad *a = p;
      if (a->npad < 0 || a->npad > OF_MAX_DIMS) BAD("attrs.npad: %d (left, right) pairs", (int)a->npad);
      if (a->mode < OF_PAD_CONSTANT || a->mode > OF_PAD_CIRCULAR) BAD("attrs.mode: unknown padding mode %d", (int)a->mode);
      for (int32_t i = 0; i < 2 * a->npad; i++)
        if (a->pad[i] < -((int64_t)1 << 31) || a->pad[i] > ((int64_t)1 << 31))
          BAD("attrs.pad[%d]: %lld", (int)i + 1, (long long)a->pad[i]);
      break;
    }
    case OPK_INTERPOLATE: {
      const a_interp *a = p;
      if (a->nsp < 1 || a->nsp > 3) BAD("attrs.nsp: %d spatial dims", (int)a->nsp);
      if (a->mode != OF_INTERP_NEAREST && a->mode != OF_INTERP_LINEAR)
        BAD("attrs.mode: unknown interpolation mode %d", (int)a->mode);
      CHECK_FLAG(a->align, "align_corners");
      for (int32_t i = 0; i < a->nsp; i++) {
        if (a->size[i] < 0 || a->size[i] > ((int64_t)1 << 31))
          BAD("attrs.size[%d]: %lld", (int)i + 1, (long long)a->size[i]);
        if (a->scales[i] < 0 || a->scales[i] > 65536.0)   /* NaN: unused */
          BAD("attrs.scales[%d]: %g", (int)i + 1, a->scales[i]);
      }
      break;
    }
    case OPK_REPEAT: {
      const a_roll *a = p;
      if (!NDIM_OK(a->n)) BAD("attrs.n: %d", (int)a->n);
      for (int32_t i = 0; i < a->n; i++)
        if (a->shifts[i] < 0 || a->shifts[i] > ((int64_t)1 << 31))
          BAD("attrs.repeats[%d]: %lld", (int)i + 1, (long long)a->shifts[i]);
      break;
    }
    case OPK_ROLL: {
      const a_roll *a = p;
      CHECK_DIMS(a->n, "n", a->dims);
      break;
    }
    case OPK_ONE_HOT: {
      const a_one_hot *a = p;
      if (a->n < -1 || a->n > ((int64_t)1 << 31)) BAD("attrs.n: %lld classes", (long long)a->n);
      CHECK_BASE(a->base);
      break;
    }
    case OPK_RANDPERM: {
      const a_randperm *a = p;
      if (!dtype_ok(a->dtype)) BAD("attrs.dtype: unknown dtype %d", (int)a->dtype);
      if (a->n < 0) BAD("attrs.n: %lld is negative", (long long)a->n);
      CHECK_BASE(a->base);
      break;
    }
    case OPK_CONV: case OPK_CONV_TRANSPOSE: case OPK_CONV_WEIGHT_GRAD: {
      /* sizes above 2^31 are no real geometry; the bound keeps the op's own
       * arithmetic (input + 2 * padding, dilation * kernel) in range */
      const a_conv *a = p;
      const int64_t big = (int64_t)1 << 31;
      if (a->nsp < 1 || a->nsp > 3) BAD("attrs.nsp: %d spatial dims", (int)a->nsp);
      if (a->groups < 1 || a->groups > big) BAD("attrs.groups: %lld", (long long)a->groups);
      for (int32_t i = 0; i < a->nsp; i++) {
        if (((a->has >> 0) & 1) && (a->stride[i] < 1 || a->stride[i] > big))
          BAD("attrs.stride[%d]: %lld", (int)i + 1, (long long)a->stride[i]);
        if (((a->has >> 1) & 1) && (a->padding[i] < 0 || a->padding[i] > big))
          BAD("attrs.padding[%d]: %lld", (int)i + 1, (long long)a->padding[i]);
        if (((a->has >> 2) & 1) && (a->dilation[i] < 1 || a->dilation[i] > big))
          BAD("attrs.dilation[%d]: %lld", (int)i + 1, (long long)a->dilation[i]);
        if (((a->has >> 3) & 1) && (a->extra[i] < -big || a->extra[i] > big))
          BAD("attrs.extra[%d]: %lld", (int)i + 1, (long long)a->extra[i]);
      }
      break;
    }
    case OPK_MAX_POOL: case OPK_AVG_POOL: case OPK_ADAPTIVE_AVG_POOL: case OPK_ADAPTIVE_MAX_POOL: {
      const a_pool *a = p;
      const int64_t big = (int64_t)1 << 31;
      bool adaptive = n->op == OPK_ADAPTIVE_AVG_POOL || n->op == OPK_ADAPTIVE_MAX_POOL;
      if (a->nsp < 1 || a->nsp > 3) BAD("attrs.nsp: %d spatial dims", (int)a->nsp);
      CHECK_FLAG(a->ceil_mode, "ceil_mode");
      CHECK_FLAG(a->cip, "count_include_pad");
      if (a->divisor < 0 || a->divisor > big) BAD("attrs.divisor_override: %lld", (long long)a->divisor);
      if (a->has & ~0x1f) BAD("attrs.has: unknown bits %d", (int)a->has);
      for (int32_t i = 0; i < a->nsp; i++) {
        if ((a->has & 1) && (a->kernel[i] < (adaptive ? 0 : 1) || a->kernel[i] > big))
          BAD("attrs.kernel[%d]: %lld", (int)i + 1, (long long)a->kernel[i]);
        if (((a->has >> 1) & 1) && (a->stride[i] < 1 || a->stride[i] > big))
          BAD("attrs.stride[%d]: %lld", (int)i + 1, (long long)a->stride[i]);
        if (((a->has >> 2) & 1) && (a->padding[i] < 0 || a->padding[i] > big))
          BAD("attrs.padding[%d]: %lld", (int)i + 1, (long long)a->padding[i]);
        if (!adaptive && (a->has & 1) && ((a->has >> 2) & 1) && a->padding[i] > a->kernel[i] / 2)
          BAD("attrs.padding[%d]: %lld is more than half the window %lld", (int)i + 1,
              (long long)a->padding[i], (long long)a->kernel[i]);
        if (((a->has >> 3) & 1) && (a->dilation[i] < 1 || a->dilation[i] > big))
          BAD("attrs.dilation[%d]: %lld", (int)i + 1, (long long)a->dilation[i]);
      }
      break;
    }
    /* ---- the rest of ops.def: flags are 0 or 1, enums and index bases in
     * range, probabilities and rates where the op's formula needs them,
     * the record's unused words zero (tracing writes zeroed records) ---- */
    case OPK_CONTIGUOUS: case OPK_CLONE: case OPK_DETACH: case OPK_COPY_: case OPK_WHERE:
    case OPK_MASKED_SELECT: case OPK_BERNOULLI: case OPK_AMP_UNSCALE: {
      const a_i1 *a = p;
      if (a->v != 0) BAD("attrs.v: %d (unused by the op: must be 0)", (int)a->v);
      break;
    }
    case OPK_MATMUL: case OPK_MM: case OPK_BMM: {
      const a_i1 *a = p;
      CHECK_FLAG(a->v, "b_t");
      break;
    }
    case OPK_ADDMM: {
      const a_addmm *a = p;
      CHECK_FLAG(a->b_t, "b_t");
      CHECK_FINITE(a->alpha, "alpha");
      CHECK_FINITE(a->beta, "beta");
      break;
    }
    case OPK_CAT: case OPK_STACK: {
      const a_i1 *a = p;
      if (!dim_ok(a->v, nd + (n->op == OPK_STACK)))
        BAD("attrs.dim: %d is out of range for %s %d-d inputs", (int)a->v,
            n->op == OPK_STACK ? "stacking" : "joining", (int)nd);
      break;
    }
    case OPK_UNSQUEEZE: {
      const a_i1 *a = p;
      if (!dim_ok(a->v, nd + 1)) BAD("attrs.dim: %d is out of range for a %d-d input", (int)a->v, (int)nd);
      break;
    }
    case OPK_SQUEEZE: {
      const a_i1 *a = p;
      if (a->v != OF_ALL_DIMS) CHECK_DIM(a->v);
      break;
    }
    case OPK_FILL_: {
      const a_d1 *a = p;
      (void)a;   /* any value, NaN and infinities included, as fill_ takes them */
      break;
    }
    case OPK_CLAMP: {
      const a_clamp *a = p;
      CHECK_FLAG(a->has_lo, "has_lo");
      CHECK_FLAG(a->has_hi, "has_hi");
      if (!a->has_lo && !a->has_hi) BAD("attrs: neither min nor max is given");
      break;
    }
    case OPK_BATCH_NORM_EVAL: {   /* the clamp is optional here */
      const a_bn_eval *a = p;
      if (!(a->eps >= 0 && a->eps < INFINITY)) BAD("attrs.eps: %g", a->eps);
      CHECK_FLAG(a->has_lo, "has_lo");
      CHECK_FLAG(a->has_hi, "has_hi");
      break;
    }
    case OPK_LEAKY_RELU: {
      const a_leaky *a = p;
      CHECK_FINITE(a->slope, "negative_slope");
      break;
    }
    case OPK_MASKED_FILL: break;   /* any value */
    case OPK_VIEW_AS_REAL: case OPK_VIEW_AS_COMPLEX: break;   /* the record is unused */
    case OPK_FFT_C2C: case OPK_FFT_R2C: case OPK_FFT_C2R: {
      const a_fft *a = p;
      int32_t kind = n->op == OPK_FFT_C2C ? 0 : n->op == OPK_FFT_R2C ? 1 : 2;
      CHECK_DIMS(a->ndims, "ndims", a->dims);
      if (a->ndims < 1) BAD("attrs.ndims: %d (at least 1)", (int)a->ndims);
      if (a->kind != kind) BAD("attrs.kind: %d for %s (%d)", (int)a->kind, kind == 0 ? "fft_c2c" : kind == 1 ? "fft_r2c" : "fft_c2r", (int)kind);
      CHECK_FLAG(a->forward, "forward");
      if (a->norm < 0 || a->norm > 2) BAD("attrs.norm: %d (0, 1 or 2)", (int)a->norm);
      if (kind == 2 ? a->last_size < 1 : a->last_size != 0)
        BAD("attrs.last_size: %lld", (long long)a->last_size);
      break;
    }
    case OPK_SPECIAL: {
      const a_special *a = p;
      if (a->fn < 0 || a->fn >= OF_NUM_SPECIAL) BAD("attrs.fn: unknown function %d", (int)a->fn);
      break;
    }
    case OPK_MAX_DIM: case OPK_ARGMAX: {
      const a_max_dim *a = p;
      if (!(n->op == OPK_ARGMAX && a->dim == OF_ALL_DIMS)) CHECK_DIM(a->dim);
      CHECK_FLAG(a->keepdim, "keepdim");
      CHECK_FLAG(a->is_max, "is_max");
      CHECK_BASE(a->base);
      break;
    }
    case OPK_TRI: {
      const a_tri *a = p;
      CHECK_FLAG(a->upper, "upper");
      if (nd < 2) BAD("attrs: triu / tril of a %d-d input", (int)nd);
      break;
    }
    case OPK_NONZERO: {
      const a_one_hot *a = p;
      CHECK_BASE(a->base);
      if (a->n != 0) BAD("attrs.n: %lld (unused by nonzero: must be 0)", (long long)a->n);
      break;
    }
    case OPK_UNIFORM_: case OPK_NORMAL_: case OPK_RANDINT_: case OPK_BERNOULLI_:
    case OPK_DROPOUT: {
      const a_rand2 *a = p;
      if (n->op == OPK_DROPOUT && a->b != 0) BAD("attrs.b: %g (unused by dropout: must be 0)", a->b);
      if (n->op == OPK_BERNOULLI_ || n->op == OPK_DROPOUT) {
        if (!(a->a >= 0 && a->a <= 1)) BAD("attrs.p: %g is not a probability", a->a);
        break;
      }
      CHECK_FINITE(a->a, n->op == OPK_NORMAL_ ? "mean" : "from");
      CHECK_FINITE(a->b, n->op == OPK_NORMAL_ ? "std" : "to");
      if (n->op == OPK_NORMAL_ ? a->b < 0 : n->op == OPK_RANDINT_ ? a->a >= a->b : a->a > a->b)
        BAD("attrs: %s %g, %g", n->op == OPK_NORMAL_ ? "a negative std:" : "an empty range", a->a, a->b);
      break;
    }
    case OPK_BATCH_NORM: case OPK_INSTANCE_NORM: case OPK_LAYER_NORM: case OPK_GROUP_NORM:
    case OPK_RMS_NORM: {
      const a_norm *a = p;
      if (!(a->eps >= 0 && a->eps < INFINITY)) BAD("attrs.eps: %g", a->eps);
      CHECK_FINITE(a->momentum, "momentum");
      CHECK_FLAG(a->flag, "training");
      if ((n->op == OPK_LAYER_NORM || n->op == OPK_RMS_NORM) &&
          (a->groups < 1 || a->groups > (nd > 0 ? nd : 1)))
        BAD("attrs.groups: normalizes %lld dims of a %d-d input", (long long)a->groups, (int)nd);
      if (n->op == OPK_GROUP_NORM) {
        int64_t ch = nd >= 2 ? g->vals[n->in[0]].shape[1] : 0;
        if (a->groups < 1 || (nd >= 2 && ch % a->groups != 0))
          BAD("attrs.groups: %lld groups for %lld channels", (long long)a->groups, (long long)ch);
      }
      break;
    }
    case OPK_CROSS_ENTROPY: case OPK_NLL_LOSS: {
      const a_loss *a = p;
      if (a->reduction < OF_LOSS_NONE || a->reduction > OF_LOSS_SUM)
        BAD("attrs.reduction: unknown reduction %d", (int)a->reduction);
      if (!(a->smoothing >= 0 && a->smoothing <= 1))
        BAD("attrs.label_smoothing: %g is not in [0, 1]", a->smoothing);
      CHECK_BASE(a->base);
      break;
    }
    case OPK_SDPA: {
      const a_sdpa *a = p;
      if (!(a->dropout_p >= 0 && a->dropout_p < 1)) BAD("attrs.dropout_p: %g is not in [0, 1)", a->dropout_p);
      if (isinf(a->scale)) BAD("attrs.scale: %g", a->scale);   /* NaN or 0: the default 1/sqrt(E) */
      CHECK_FLAG(a->causal, "is_causal");
      CHECK_FLAG(a->gqa, "enable_gqa");
      break;
    }
    case OPK_OPTIM_SGD: {
      const a_sgd *a = p;
      if (!(a->momentum >= 0 && a->momentum < INFINITY)) BAD("attrs.momentum: %g", a->momentum);
      CHECK_FINITE(a->dampening, "dampening");
      if (!(a->weight_decay >= 0 && a->weight_decay < INFINITY)) BAD("attrs.weight_decay: %g", a->weight_decay);
      CHECK_FLAG(a->nesterov, "nesterov");
      CHECK_FLAG(a->maximize, "maximize");
      break;
    }
    case OPK_OPTIM_ADAM: {
      const a_adam *a = p;
      if (!(a->beta1 >= 0 && a->beta1 < 1)) BAD("attrs.beta1: %g is not in [0, 1)", a->beta1);
      if (!(a->beta2 >= 0 && a->beta2 < 1)) BAD("attrs.beta2: %g is not in [0, 1)", a->beta2);
      if (!(a->eps >= 0 && a->eps < INFINITY)) BAD("attrs.eps: %g", a->eps);
      if (!(a->weight_decay >= 0 && a->weight_decay < INFINITY)) BAD("attrs.weight_decay: %g", a->weight_decay);
      CHECK_FLAG(a->amsgrad, "amsgrad");
      CHECK_FLAG(a->maximize, "maximize");
      CHECK_FLAG(a->decoupled, "decoupled");
      break;
    }
    case OPK_AMP_UPDATE: {
      const a_amp_update *a = p;
      if (!(a->growth >= 1 && a->growth < INFINITY)) BAD("attrs.growth_factor: %g", a->growth);
      if (!(a->backoff > 0 && a->backoff <= 1)) BAD("attrs.backoff_factor: %g is not in (0, 1]", a->backoff);
      if (a->interval < 1) BAD("attrs.growth_interval: %lld", (long long)a->interval);
      break;
    }
    case OPK_DYNAMIC_QUANTIZED_LINEAR: {
      const a_i1 *a = p;
      CHECK_FLAG(a->v, "reduce_range");
      break;
    }
    case OPK_QUANTIZED_ADD: {
      const a_qadd *a = p;
      if (a->out_dtype != OF_UINT8 && a->out_dtype != OF_INT8)
        BAD("attrs.out_dtype: %d (uint8 or int8)", (int)a->out_dtype);
      if (!(a->a_scale > 0 && a->a_scale < INFINITY)) BAD("attrs.a_scale: %g", a->a_scale);
      if (!(a->b_scale > 0 && a->b_scale < INFINITY)) BAD("attrs.b_scale: %g", a->b_scale);
      if (!(a->out_scale > 0 && a->out_scale < INFINITY)) BAD("attrs.out_scale: %g", a->out_scale);
      if (a->a_zp < -128 || a->a_zp > 255) BAD("attrs.a_zero_point: %lld", (long long)a->a_zp);
      if (a->b_zp < -128 || a->b_zp > 255) BAD("attrs.b_zero_point: %lld", (long long)a->b_zp);
      if (a->out_zp < -128 || a->out_zp > 255) BAD("attrs.out_zero_point: %lld", (long long)a->out_zp);
      CHECK_FLAG(a->relu, "relu");
      break;
    }
    case OPK_QUANTIZED_LINEAR: case OPK_QUANTIZED_CONV2D: case OPK_QUANTIZED_MAX_POOL2D:
    case OPK_QUANTIZE_PER_TENSOR: {
      const a_quant *a = p;
      const int64_t big = (int64_t)1 << 31;
      if (n->op == OPK_QUANTIZE_PER_TENSOR) {
        if (a->out_dtype != OF_UINT8 && a->out_dtype != OF_INT8)
          BAD("attrs.out_dtype: %d (uint8 or int8)", (int)a->out_dtype);
        if (!(a->x_scale > 0 && a->x_scale < INFINITY)) BAD("attrs.x_scale: %g", a->x_scale);
        if (a->x_zp < (a->out_dtype == OF_UINT8 ? 0 : -128) || a->x_zp > (a->out_dtype == OF_UINT8 ? 255 : 127))
          BAD("attrs.x_zero_point: %lld", (long long)a->x_zp);
        break;
      }
      if (n->op == OPK_QUANTIZED_MAX_POOL2D) {
        if ((a->groups >> 16) < 1 || (a->groups & 0xffff) < 1 || a->groups > 0xffffffffLL)
          BAD("attrs.kernel: %lld x %lld", (long long)(a->groups >> 16), (long long)(a->groups & 0xffff));
      } else {
        if (a->out_dtype != OF_FLOAT32 && a->out_dtype != OF_UINT8 && a->out_dtype != OF_INT8)
          BAD("attrs.out_dtype: %d (float32, uint8 or int8)", (int)a->out_dtype);
        if (!(a->x_scale > 0 && a->x_scale < INFINITY)) BAD("attrs.x_scale: %g", a->x_scale);
        if (!(a->out_scale > 0 && a->out_scale < INFINITY)) BAD("attrs.out_scale: %g", a->out_scale);
        if (a->x_zp < -128 || a->x_zp > 255) BAD("attrs.x_zero_point: %lld", (long long)a->x_zp);
        if (a->out_zp < -128 || a->out_zp > 255) BAD("attrs.out_zero_point: %lld", (long long)a->out_zp);
        CHECK_FLAG(a->relu, "relu");
      }
      if (n->op != OPK_QUANTIZED_LINEAR) {
        if (n->op == OPK_QUANTIZED_CONV2D && (a->groups < 1 || a->groups > big))
          BAD("attrs.groups: %lld", (long long)a->groups);
        for (int32_t i = 0; i < 2; i++) {
          if (a->stride[i] < 1 || a->stride[i] > big) BAD("attrs.stride[%d]: %lld", (int)i + 1, (long long)a->stride[i]);
          if (a->padding[i] < 0 || a->padding[i] > big) BAD("attrs.padding[%d]: %lld", (int)i + 1, (long long)a->padding[i]);
          if (a->dilation[i] < 1 || a->dilation[i] > big) BAD("attrs.dilation[%d]: %lld", (int)i + 1, (long long)a->dilation[i]);
        }
      }
      break;
    }
    default: break;
  }
#undef BAD
#undef CHECK_DIM
#undef CHECK_DIMS
#undef CHECK_FLAG
#undef CHECK_FINITE
#undef CHECK_BASE
  return true;
}

/* Parses the IR into a graph whose externals are still missing. */
static of_status parse_ir(const ctx_t *c, const uint8_t *bytes, size_t n, of_graph **out,
                          int32_t **ext_of_value, int32_t *next_out) {
  if (n < 32 || memcmp(bytes, MAGIC, 8) != 0) return corrupt(c, "not a saved graph (bad magic)");
  uint32_t version, endian;
  uint64_t plen, sum;
  memcpy(&version, bytes + 8, 4);
  memcpy(&endian, bytes + 12, 4);
  memcpy(&plen, bytes + 16, 8);
  memcpy(&sum, bytes + 24, 8);
  if (endian != 0x01020304) return corrupt(c, "written with another byte order");
  if (version > IR_VERSION)
    return of_fail(OF_ERR_IO, "nn.Graph.load: %s: saved by a newer version (graph format %u, "
                   "this build reads up to %d)", c->path, version, IR_VERSION);
  if (version < 1) return corrupt(c, "bad format version");
  if (plen != n - 32) return corrupt(c, "the graph record is truncated");
  if (fnv1a(bytes + 32, (size_t)plen) != sum)
    return corrupt(c, "checksum mismatch: the graph record is corrupt or was modified");
  rbuf r = {bytes + 32, (size_t)plen, 0, false};
  uint32_t nvals = get_u32(&r), nnodes = get_u32(&r), nin = get_u32(&r), nout = get_u32(&r),
           next = get_u32(&r);
  of_device gdev = version >= 2 ? get_i32(&r) : OF_CPU;
  /* every count is bounded by the bytes that must follow it, so that no
   * allocation is larger than the record can justify */
  size_t left = r.len - r.pos;
  size_t val_rec = 1 + 1 + 4 * (version >= 2 ? 6 : 5) + 8 * (2 * OF_MAX_DIMS + 1) + 2;
  size_t node_rec = 2 + 1 + 4 + 4 * 9;
  if (r.bad || nvals > MAX_COUNT || nnodes > MAX_COUNT || nin > nvals || nout > MAX_COUNT ||
      next > nvals || (uint64_t)nvals * val_rec > left ||
      (uint64_t)nvals * val_rec + 4 * ((uint64_t)nin + nout) + (uint64_t)nnodes * node_rec > left)
    return corrupt(c, "bad counts (more values, inputs, outputs or nodes than the record holds)");
  if ((gdev & 0xff) > OF_CUDA || gdev < 0) return corrupt(c, "bad device");
  of_graph *g = of_graph_new_empty();
  if (g) g->device = gdev;
  int32_t *ext = calloc(nvals ? nvals : 1, sizeof *ext);
  bool *defined = calloc(nvals ? nvals : 1, sizeof *defined);
  if (!g || !ext || !defined) {
    free(g); free(ext); free(defined);
    return of_fail(OF_ERR_OOM, "nn.Graph.load: out of memory");
  }
  of_status st = OF_OK;
#define FAIL(msg) do { st = corrupt(c, msg); goto fail; } while (0)
#define VFAIL(msg) do {                                                                  \
    st = of_fail(OF_ERR_IO, "nn.Graph.load: %s: value %%%u: %s", c->path, v, msg);          \
    goto fail;                                                                           \
  } while (0)
  for (uint32_t v = 0; v < nvals; v++) {
    int32_t id = of_graph_add_value(g, OF_GV_INTERNAL, NULL);
    if (id < 0) { st = of_fail(OF_ERR_OOM, "nn.Graph.load: out of memory"); goto fail; }
    of_gval *x = &g->vals[id];
    x->kind = (int8_t)get_u8(&r);
    x->is_const = get_u8(&r) != 0;
    x->dtype = get_i32(&r);
    x->device = version >= 2 ? get_i32(&r) : OF_CPU;
    x->ndim = get_i32(&r);
    x->root = get_i32(&r);
    x->same = get_i32(&r);
    ext[v] = get_i32(&r);
    for (int32_t i = 0; i < OF_MAX_DIMS; i++) x->shape[i] = get_i64(&r);
    for (int32_t i = 0; i < OF_MAX_DIMS; i++) x->strides[i] = get_i64(&r);
    x->offset = get_i64(&r);
    uint16_t ln = get_u16(&r);
    if (r.bad) VFAIL("truncated value table");
    if (ln) {
      x->name = malloc((size_t)ln + 1);
      if (!x->name) { st = of_fail(OF_ERR_OOM, "nn.Graph.load: out of memory"); goto fail; }
      get(&r, x->name, ln);
      x->name[ln] = 0;
    }
    if (x->kind < OF_GV_INPUT || x->kind > OF_GV_HANDLE) VFAIL("bad value kind");
    if (x->kind != OF_GV_HANDLE && (x->dtype < 0 || x->dtype >= OF_NUM_DTYPES)) VFAIL("bad dtype");
    if (x->ndim < 0 || x->ndim > OF_MAX_DIMS) VFAIL("bad ndim");
    if (x->device < 0 || (x->device & 0xff) > OF_CUDA) VFAIL("bad device");
    for (int32_t i = 0; i < x->ndim; i++)
      if (x->shape[i] < 0 || x->shape[i] > ((int64_t)1 << 40)) VFAIL("bad shape");
    if (x->kind != OF_GV_HANDLE && meta_bytes(x->shape, x->ndim, x->dtype) < 0)
      VFAIL("bad shape (more than 2^48 bytes)");
    for (int32_t i = 0; i < x->ndim; i++)
      if (x->strides[i] < -((int64_t)1 << 48) || x->strides[i] > ((int64_t)1 << 48))
        VFAIL("bad strides");
    if (x->offset < 0 || x->offset > ((int64_t)1 << 48)) VFAIL("bad storage offset");
    /* a view's root and an in-place version's tensor are values made before it */
    if (x->root < 0 || (uint32_t)x->root > v || x->same < 0 || (uint32_t)x->same > v)
      VFAIL("bad value reference");
    if (x->kind == OF_GV_EXTERNAL ? (ext[v] < -1 || ext[v] >= (int32_t)next) : ext[v] != -1)
      VFAIL("bad external index");
    if (x->kind == OF_GV_EXTERNAL || x->kind == OF_GV_INPUT) defined[v] = true;
  }
  g->inputs = calloc(nin ? nin : 1, sizeof *g->inputs);
  g->outputs = calloc(nout ? nout : 1, sizeof *g->outputs);
  if (!g->inputs || !g->outputs) { st = of_fail(OF_ERR_OOM, "nn.Graph.load: out of memory"); goto fail; }
  g->ninputs = (int32_t)nin;
  g->noutputs = (int32_t)nout;
  for (uint32_t i = 0; i < nin; i++) {
    int32_t v = get_i32(&r);
    if (r.bad || v < 0 || (uint32_t)v >= nvals || g->vals[v].kind != OF_GV_INPUT) FAIL("bad input");
    g->vals[v].index = (int32_t)i;
    g->inputs[i] = v;
  }
  for (uint32_t i = 0; i < nout; i++) {
    int32_t v = get_i32(&r);
    if (r.bad || v < 0 || (uint32_t)v >= nvals || g->vals[v].kind == OF_GV_HANDLE) FAIL("bad output");
    g->outputs[i] = v;
  }
  for (uint32_t i = 0; i < nnodes; i++) {
    char name[64];
    uint16_t ln = get_u16(&r);
    if (r.bad || ln == 0 || ln >= sizeof name) {
      st = node_bad(c, i, NULL, "bad op name (%u bytes)", (unsigned)ln);
      goto fail;
    }
    get(&r, name, ln);
    name[ln] = 0;
    for (uint16_t k = 0; k < ln; k++)
      if (name[k] < 0x21 || name[k] > 0x7e) name[k] = '?';   /* printable in messages */
    int32_t op = of_op_find(name);
    if (op < 0) {
      st = node_bad(c, i, name, "unknown op (saved by another version?)");
      goto fail;
    }
    const of_opdef *d = of_op_def(op);
#define NODE_FAIL(...) do { st = node_bad(c, i, d->name, __VA_ARGS__); goto fail; } while (0)
    if (d->flags & OF_OPF_COLLECTIVE)
      NODE_FAIL("a collective; graphs with global tensors cannot be saved or loaded");
    int32_t asz = get_i32(&r);
    /* format 2 wrote addmm's record without its b_t field (zero there) */
    int32_t want = version < 3 && op == OPK_ADDMM ? (int32_t)offsetof(a_addmm, b_t) : d->attr_size;
    if (r.bad || asz != want || asz < 0 || (size_t)asz > r.len - r.pos)
      NODE_FAIL("attrs: bad attribute record size %d (the op's record is %d bytes)", (int)asz,
                (int)want);
    /* an aligned copy: the records are read as structs */
    void *attrs = calloc(1, (size_t)(d->attr_size > asz ? d->attr_size : asz ? asz : 1));
    if (!attrs) { st = of_fail(OF_ERR_OOM, "nn.Graph.load: out of memory"); goto fail; }
    memcpy(attrs, r.p + r.pos, (size_t)asz);
    r.pos += (size_t)asz;
    if (asz < d->attr_size) asz = d->attr_size;
    int32_t nin_ = get_i32(&r), nout_ = get_i32(&r), nreal = get_i32(&r), nmut = get_i32(&r);
    int32_t flags = get_i32(&r);
    uint32_t needs = get_u32(&r), keep_in = get_u32(&r), keep_out = get_u32(&r);
    int32_t handle_nr = get_i32(&r);
    const char *why = NULL;
    char whybuf[160];
    if (r.bad) why = "truncated node header";
    else if (nin_ < d->min_in || nin_ > d->max_in) {
      snprintf(whybuf, sizeof whybuf, "nin: %d inputs, the op takes %d to %d", (int)nin_,
               (int)d->min_in, (int)d->max_in);
      why = whybuf;
    } else if (nreal < 0 || nreal > 64) why = "nreal: bad number of results";
    else if (nmut < 0 || nmut > 8) why = "nmut: bad number of inputs written in place";
    else if ((flags & ~OF_GN_CAPTURE) != 0) why = "flags: unknown bits";
    bool capture = (flags & OF_GN_CAPTURE) != 0;
    if (why) {}
    else if (d->nreal >= 0 && nreal != d->nreal) {
      snprintf(whybuf, sizeof whybuf, "nreal: %d results, the op makes %d", (int)nreal,
               (int)d->nreal);
      why = whybuf;
    } else if (nout_ != nreal + nmut + (capture ? 1 : 0)) why = "nout: bad number of outputs";
    else if (capture && (handle_nr < 0 || handle_nr >= nreal)) why = "handle_nr: bad autograd handle";
    else if (capture && op == OF_OPK_BACKWARD) why = "flags: a backward node cannot keep a handle";
    else if ((size_t)(nin_ + nout_ + nmut) * 4 > r.len - r.pos) why = "truncated node";
    if (why) {
      free(attrs);
      NODE_FAIL("%s", why);
    }
    if (d->check) {
      st = d->check(attrs, asz, nin_);
      if (st != OF_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", of_last_error());
        free(attrs);
        NODE_FAIL("attrs: %s", msg);
      }
    }
    int32_t *ins = malloc(sizeof *ins * (size_t)(nin_ ? nin_ : 1));
    if (!ins) { free(attrs); st = of_fail(OF_ERR_OOM, "nn.Graph.load: out of memory"); goto fail; }
    for (int32_t k = 0; k < nin_; k++) ins[k] = get_i32(&r);
    int32_t ni = of_graph_add_node(g, op, attrs, asz, ins, nin_, nreal, nmut);
    free(ins);
    free(attrs);
    if (ni < 0) { st = of_fail(OF_ERR_OOM, "nn.Graph.load: out of memory"); goto fail; }
    of_gnode *n = &g->nodes[ni];
    if (capture) {
      int32_t *o = realloc(n->out, sizeof *o * (size_t)(nout_ + 1));
      if (!o) { st = of_fail(OF_ERR_OOM, "nn.Graph.load: out of memory"); goto fail; }
      n->out = o;
      n->nout = nout_;
    }
    n->flags = flags;
    n->needs = needs;
    n->keep_in = keep_in;
    n->keep_out = keep_out;
    n->handle_nr = handle_nr;
    for (int32_t j = 0; j < nout_; j++) n->out[j] = get_i32(&r);
    for (int32_t m = 0; m < nmut; m++) n->mut[m] = get_i32(&r);
    if (r.bad) NODE_FAIL("truncated node");
    uint32_t optional = optional_inputs(op);
    for (int32_t k = 0; k < nin_; k++) {
      int32_t v = n->in[k];
      if (v < -1 || v >= (int32_t)nvals)
        NODE_FAIL("in[%d]: value %%%d out of range (%u values)", (int)k + 1, (int)v, nvals);
      if (v < 0) {
        if (k < d->min_in && !(k < 32 && ((optional >> k) & 1)))
          NODE_FAIL("in[%d]: a required input is absent", (int)k + 1);
        continue;
      }
      if (!defined[v])
        NODE_FAIL("in[%d]: reads value %%%d before it is computed", (int)k + 1, (int)v);
      bool handle = g->vals[v].kind == OF_GV_HANDLE;
      if (handle != (op == OF_OPK_BACKWARD && k == 0))
        NODE_FAIL("in[%d]: %s", (int)k + 1, handle ? "an autograd handle used as a tensor"
                                                   : "a tensor where the autograd handle goes");
    }
    if (op == OF_OPK_BACKWARD && n->in[0] < 0) NODE_FAIL("in[1]: no autograd node");
    if (op == OF_OPK_BACKWARD && nreal > OF_BACKWARD_MAX_IN) NODE_FAIL("nreal: too many grads");
    for (int32_t j = 0; j < nout_; j++) {
      int32_t v = n->out[j];
      if (v < -1 || v >= (int32_t)nvals)
        NODE_FAIL("out[%d]: value %%%d out of range (%u values)", (int)j + 1, (int)v, nvals);
      if (v < 0) {
        if (j >= nreal) NODE_FAIL("out[%d]: missing output", (int)j + 1);
        continue;
      }
      bool handle_slot = capture && j == nout_ - 1;
      if (defined[v] || (g->vals[v].kind == OF_GV_HANDLE) != handle_slot ||
          (!handle_slot && g->vals[v].kind != OF_GV_INTERNAL))
        NODE_FAIL("out[%d]: value %%%d is not a fresh value", (int)j + 1, (int)v);
      defined[v] = true;
      g->vals[v].producer = ni;
    }
    for (int32_t m = 0; m < nmut; m++)
      if (n->mut[m] < 0 || n->mut[m] >= nin_ || n->in[n->mut[m]] < 0)
        NODE_FAIL("mut[%d]: bad write target %d", (int)m + 1, (int)n->mut[m]);
    char awhy[160];
    if (!attrs_ok(g, n, awhy, sizeof awhy)) NODE_FAIL("%s", awhy);
    /* results whose shape depends on data: checked for dtype and rank only
     * (one_hot with num_classes -1 takes its class count from the index's
     * largest value, so its last dim is the data's as nonzero's count is) */
    bool dyn = op == OPK_NONZERO || op == OPK_MASKED_SELECT ||
               (op == OPK_ONE_HOT && ((const a_one_hot *)n->attrs)->n == -1);
    for (int32_t k = 0; k < nin_ && !dyn; k++) dyn = n->in[k] >= 0 && g->vals[n->in[k]].dynamic;
    for (int32_t j = 0; j < nout_; j++)
      if (n->out[j] >= 0) g->vals[n->out[j]].dynamic = dyn;
    /* the results' shapes and dtypes re-inferred from the recorded inputs by
     * the op's own function (of_opimpl.infer), where it has one: they must
     * be what the file records, before anything runs -- a creation op's
     * from its record alone, so that an edited record cannot make the first
     * run allocate what the file never described. (Every other op's results
     * are checked against the file as its first run makes them.) */
    if (d->infer && !dyn && nin_ <= OF_BACKWARD_MAX_IN && nreal <= OF_BACKWARD_MAX_IN) {
      of_meta im[OF_BACKWARD_MAX_IN], om[OF_BACKWARD_MAX_IN];
      memset(om, 0, sizeof(of_meta) * (size_t)(nreal ? nreal : 1));
      for (int32_t k = 0; k < nin_; k++) {
        const of_gval *x = n->in[k] >= 0 ? &g->vals[n->in[k]] : NULL;
        im[k].ndim = x ? x->ndim : -1;
        im[k].dtype = x ? x->dtype : 0;
        if (x) memcpy(im[k].shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
      }
      if (d->infer(n->attrs, nin_, im, om) != OF_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", of_last_error());
        NODE_FAIL("the %s: %s", nin_ ? "recorded inputs do not fit" : "record does not fit", msg);
      }
      for (int32_t j = 0; j < nreal; j++) {
        if (n->out[j] < 0) continue;
        const of_gval *y = &g->vals[n->out[j]];
        bool same = y->ndim == om[j].ndim && y->dtype == om[j].dtype;
        for (int32_t k = 0; same && k < y->ndim; k++) same = y->shape[k] == om[j].shape[k];
        if (!same) {
          char a[96], b[96];
          NODE_FAIL("result %%%d is recorded as %s %s, its %s %s %s", (int)n->out[j],
                    of_shape_str(y->shape, y->ndim, a, sizeof a), of_dtype_name(y->dtype),
                    nin_ ? "inputs give" : "record gives",
                    of_shape_str(om[j].shape, om[j].ndim, b, sizeof b), of_dtype_name(om[j].dtype));
        }
      }
    }
#undef NODE_FAIL
  }
  if (r.pos != r.len) FAIL("trailing bytes in the graph record");
  g->loaded = true;
  for (uint32_t i = 0; i < nout; i++)
    if (!defined[g->outputs[i]]) FAIL("an output is never computed");
#undef FAIL
#undef VFAIL
  free(defined);
  *out = g;
  *ext_of_value = ext;
  *next_out = (int32_t)next;
  return OF_OK;
fail:
  free(defined);
  free(ext);
  of_graph_release(g);
  return st;
}

/* ---- safetensors reader ---- */
typedef struct {
  const char *s;
  size_t n, pos;
  int depth;
} json;

static void ws(json *j) {
  while (j->pos < j->n && (j->s[j->pos] == ' ' || j->s[j->pos] == '\t' || j->s[j->pos] == '\n' ||
                           j->s[j->pos] == '\r'))
    j->pos++;
}
static bool lit(json *j, char ch) {
  ws(j);
  if (j->pos < j->n && j->s[j->pos] == ch) { j->pos++; return true; }
  return false;
}
static int hexv(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}
/* string into out (cap bytes incl. NUL; longer strings are rejected) */
static bool jstring(json *j, char *out, size_t cap) {
  if (!lit(j, '"')) return false;
  size_t o = 0;
  while (j->pos < j->n) {
    unsigned char ch = (unsigned char)j->s[j->pos++];
    if (ch == '"') {
      if (o >= cap) return false;
      out[o] = 0;
      return true;
    }
    if (ch < 0x20) return false;
    uint32_t cp = ch;
    if (ch == '\\') {
      if (j->pos >= j->n) return false;
      char e = j->s[j->pos++];
      switch (e) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = 8; break;
        case 'f': cp = 12; break;
        case 'n': cp = 10; break;
        case 'r': cp = 13; break;
        case 't': cp = 9; break;
        case 'u': {
          if (j->n - j->pos < 4) return false;
          cp = 0;
          for (int i = 0; i < 4; i++) {
            int h = hexv(j->s[j->pos++]);
            if (h < 0) return false;
            cp = cp * 16 + (uint32_t)h;
          }
          if (cp >= 0xD800 && cp < 0xDC00) {   /* surrogate pair */
            if (j->n - j->pos < 6 || j->s[j->pos] != '\\' || j->s[j->pos + 1] != 'u') return false;
            j->pos += 2;
            uint32_t lo = 0;
            for (int i = 0; i < 4; i++) {
              int h = hexv(j->s[j->pos++]);
              if (h < 0) return false;
              lo = lo * 16 + (uint32_t)h;
            }
            if (lo < 0xDC00 || lo >= 0xE000) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          break;
        }
        default: return false;
      }
      char enc[4];
      size_t ne;
      if (cp < 0x80) { enc[0] = (char)cp; ne = 1; }
      else if (cp < 0x800) { enc[0] = (char)(0xC0 | cp >> 6); enc[1] = (char)(0x80 | (cp & 63)); ne = 2; }
      else if (cp < 0x10000) {
        enc[0] = (char)(0xE0 | cp >> 12); enc[1] = (char)(0x80 | ((cp >> 6) & 63));
        enc[2] = (char)(0x80 | (cp & 63)); ne = 3;
      } else {
        enc[0] = (char)(0xF0 | cp >> 18); enc[1] = (char)(0x80 | ((cp >> 12) & 63));
        enc[2] = (char)(0x80 | ((cp >> 6) & 63)); enc[3] = (char)(0x80 | (cp & 63)); ne = 4;
      }
      if (o + ne >= cap) return false;
      memcpy(out + o, enc, ne);
      o += ne;
      continue;
    }
    if (o + 1 >= cap) return false;
    out[o++] = (char)ch;
  }
  return false;
}
static bool juint(json *j, int64_t *v) {
  ws(j);
  size_t start = j->pos;
  int64_t x = 0;
  while (j->pos < j->n && j->s[j->pos] >= '0' && j->s[j->pos] <= '9') {
    if (x > (INT64_MAX - 9) / 10) return false;
    x = x * 10 + (j->s[j->pos++] - '0');
  }
  if (j->pos == start) return false;
  *v = x;
  return true;
}
static bool jskip(json *j) {
  ws(j);
  if (j->pos >= j->n || ++j->depth > 64) return false;
  char ch = j->s[j->pos];
  bool ok = true;
  if (ch == '"') {
    char tmp[4096];
    ok = jstring(j, tmp, sizeof tmp);
  } else if (ch == '{' || ch == '[') {
    char close = ch == '{' ? '}' : ']';
    j->pos++;
    if (!lit(j, close)) {
      do {
        if (ch == '{') {
          char tmp[4096];
          if (!jstring(j, tmp, sizeof tmp) || !lit(j, ':')) { ok = false; break; }
        }
        if (!jskip(j)) { ok = false; break; }
      } while (lit(j, ','));
      ok = ok && lit(j, close);
    }
  } else {
    size_t start = j->pos;
    while (j->pos < j->n && strchr("0123456789+-.eEtruefalsn", j->s[j->pos])) j->pos++;
    ok = j->pos > start;
  }
  j->depth--;
  return ok;
}

typedef struct {
  char name[256];
  of_dtype dtype;
  int32_t ndim;
  int64_t shape[OF_MAX_DIMS];
  int64_t begin, end;
} st_entry;

static of_dtype dtype_code(const char *s) {
  /* safetensors codes by dtype id (serialization.lua writes the same) */
  static const char *codes[OF_NUM_DTYPES] = {"BOOL", "U8",  "I8",  "I32", "I64", "F16", "BF16",
                                             "F32",  "F64", "I16", "U16", "U32", "U64",
                                             "C64",  "C128"};
  _Static_assert(OF_NUM_DTYPES == 15, "safetensors codes out of step with the dtypes");
  for (int i = 0; i < OF_NUM_DTYPES; i++)
    if (strcmp(s, codes[i]) == 0) return i;
  return -1;
}

static bool parse_entry(json *j, st_entry *e) {
  if (!lit(j, '{')) return false;
  bool has_dt = false, has_shape = false, has_off = false;
  if (lit(j, '}')) return false;
  do {
    char key[64];
    if (!jstring(j, key, sizeof key) || !lit(j, ':')) return false;
    if (strcmp(key, "dtype") == 0) {
      char dt[16];
      if (!jstring(j, dt, sizeof dt)) return false;
      e->dtype = dtype_code(dt);
      if (e->dtype < 0) return false;
      has_dt = true;
    } else if (strcmp(key, "shape") == 0) {
      if (!lit(j, '[')) return false;
      e->ndim = 0;
      if (!lit(j, ']')) {
        do {
          if (e->ndim >= OF_MAX_DIMS || !juint(j, &e->shape[e->ndim])) return false;
          e->ndim++;
        } while (lit(j, ','));
        if (!lit(j, ']')) return false;
      }
      has_shape = true;
    } else if (strcmp(key, "data_offsets") == 0) {
      if (!lit(j, '[') || !juint(j, &e->begin) || !lit(j, ',') || !juint(j, &e->end) ||
          !lit(j, ']'))
        return false;
      has_off = true;
    } else if (!jskip(j)) {
      return false;
    }
  } while (lit(j, ','));
  return lit(j, '}') && has_dt && has_shape && has_off;
}

static bool parse_metadata(json *j, bool *is_graph) {
  if (!lit(j, '{')) return false;
  if (lit(j, '}')) return true;
  do {
    char key[256], val[256];
    if (!jstring(j, key, sizeof key) || !lit(j, ':')) return false;
    ws(j);
    if (j->pos < j->n && j->s[j->pos] == '"') {
      if (!jstring(j, val, sizeof val)) {
        return false;
      }
      if (strcmp(key, "format") == 0 && strcmp(val, "oneflow-graph") == 0) *is_graph = true;
    } else if (!jskip(j)) {
      return false;
    }
  } while (lit(j, ','));
  return lit(j, '}');
}

static of_status load_impl(const char *path, of_graph **out);

/* The file's externals are read onto the CPU; then the graph goes to its
 * saved device, or to `dev`. */
static of_status load_to(const char *path, bool given, of_device dev, of_graph **out) {
  of_graph *g = NULL;
  OF_CHECK(load_impl(path, &g));
  of_device saved = g->device;
  of_status st = of_graph_to(g, given ? dev : saved);
  if (st != OF_OK) {
    char why[300];
    snprintf(why, sizeof why, "%s", of_last_error());
    of_graph_release(g);
    char a[16];
    return of_fail(OF_ERR_DEVICE, "nn.Graph.load: %s was saved from %s: %s%s", path,
                   of_device_str(saved, a), why,
                   given ? "" : " (load it onto another device: flow.nn.Graph.load(path, "
                   "{device = 'cpu'}), of_graph_load_on)");
  }
  *out = g;
  return OF_OK;
}

of_status of_graph_load(const char *path, of_graph **out) {
  if (!path || !out) return of_fail(OF_ERR_ARG, "nn.Graph.load: no path");
  return load_to(path, false, OF_CPU, out);
}

of_status of_graph_load_on(const char *path, of_device dev, of_graph **out) {
  if (!path || !out) return of_fail(OF_ERR_ARG, "nn.Graph.load: no path");
  return load_to(path, true, dev, out);
}

static const st_entry *find_entry(const st_entry *ents, int32_t nent, const char *name) {
  for (int32_t i = 0; i < nent; i++)
    if (strcmp(ents[i].name, name) == 0) return &ents[i];
  return NULL;
}

/* an entry's bytes (malloc'd), NULL when unreadable */
static uint8_t *read_entry(FILE *f, int64_t data_start, const st_entry *e) {
  size_t nb = (size_t)(e->end - e->begin);
  uint8_t *p = malloc(nb ? nb : 1);
  if (p && nb && (fseek(f, (long)(data_start + e->begin), SEEK_SET) != 0 ||
                  fread(p, 1, nb, f) != nb)) {
    free(p);
    return NULL;
  }
  return p;
}

/* Binds graph g's externals (value v's external index ext_of_value[v] <
 * next; map[k]: the file's "ext.N" of the graph's external k, NULL: the
 * same) to the file's tensors, read into cache[] on first use. */
static of_status bind(const ctx_t *c, FILE *f, of_graph *g, const int32_t *ext_of_value,
                      int32_t next, const int32_t *map, of_tensor **cache, int32_t ncache,
                      const st_entry *ents, int32_t nent, int64_t data_start) {
  for (int32_t v = 0; v < g->nvals; v++) {
    of_gval *x = &g->vals[v];
    if (x->kind != OF_GV_EXTERNAL) continue;
    int32_t k = ext_of_value[v];
    if (k < 0) continue;   /* unused */
    if (k >= next) return corrupt(c, "an external index is out of range");
    int32_t fk = map ? map[k] : k;
    if (fk < 0 || fk >= ncache) return corrupt(c, "an external tensor is missing");
    if (!cache[fk]) {
      char want[32];
      snprintf(want, sizeof want, "ext.%d", (int)fk);
      const st_entry *e = find_entry(ents, nent, want);
      if (!e) return corrupt(c, "an external tensor is missing");
      OF_CHECK(of_tensor_new(e->shape, e->ndim, e->dtype, OF_CPU, &cache[fk]));
      size_t nb = (size_t)(e->end - e->begin);
      if (nb && (fseek(f, (long)(data_start + e->begin), SEEK_SET) != 0 ||
                 fread(of_ptr(cache[fk]), 1, nb, f) != nb))
        return corrupt(c, "cannot read an external tensor");
    }
    of_tensor *t = cache[fk];
    bool same = t->dtype == x->dtype && t->ndim == x->ndim;
    for (int32_t i = 0; same && i < x->ndim; i++) same = t->shape[i] == x->shape[i];
    if (!same) return corrupt(c, "an external tensor does not match the graph");
    of_tensor_retain(t);
    x->ext = t;
    memcpy(x->strides, t->strides, sizeof x->strides);
    x->offset = 0;
  }
  int32_t *uses = NULL;
  for (int32_t v = 0; v < g->nvals; v++) {
    /* a used external without data would leave a hole at run time */
    if (g->vals[v].kind == OF_GV_EXTERNAL && !g->vals[v].ext) {
      if (!uses) uses = of_graph_use_counts(g);
      if (uses && uses[v] > 0) {
        free(uses);
        return corrupt(c, "the graph reads an external that was not saved");
      }
    }
  }
  free(uses);
  return OF_OK;
}

static of_status load_impl(const char *path, of_graph **out) {
  if (!path || !out) return of_fail(OF_ERR_ARG, "nn.Graph.load: no path");
  ctx_t c = {path};
  FILE *f = fopen(path, "rb");
  if (!f) return of_fail(OF_ERR_IO, "nn.Graph.load: %s: %s", path, strerror(errno));
  of_status st = OF_OK;
  char *header = NULL;
  st_entry *ents = NULL;
  int32_t nent = 0, cap = 0;
  uint8_t *ir = NULL;
  of_graph *g = NULL;
  int32_t *ext_of_value = NULL, next = 0, next_file = 0;
  of_tensor **ext = NULL;
  long fsize = -1;
  if (fseek(f, 0, SEEK_END) == 0) fsize = ftell(f);
  if (fsize < 0 || fseek(f, 0, SEEK_SET) != 0) { st = corrupt(&c, "cannot seek"); goto done; }
  uint64_t hlen = 0;
  if (fsize < 8 || fread(&hlen, 8, 1, f) != 1) { st = corrupt(&c, "file too short for a header"); goto done; }
  if (hlen > (uint64_t)fsize - 8 || hlen > 100000000u || hlen < 2) {
    st = corrupt(&c, "bad header size (truncated or not a safetensors file)");
    goto done;
  }
  header = malloc((size_t)hlen + 1);
  if (!header) { st = of_fail(OF_ERR_OOM, "nn.Graph.load: out of memory"); goto done; }
  if (fread(header, 1, (size_t)hlen, f) != hlen) { st = corrupt(&c, "truncated header"); goto done; }
  header[hlen] = 0;
  int64_t data_start = 8 + (int64_t)hlen, data_len = (int64_t)fsize - data_start;
  json j = {header, (size_t)hlen, 0, 0};
  bool is_graph = false;
  if (!lit(&j, '{')) { st = corrupt(&c, "header is not a JSON object"); goto done; }
  if (!lit(&j, '}')) {
    do {
      char name[256];
      if (!jstring(&j, name, sizeof name) || !lit(&j, ':')) { st = corrupt(&c, "bad header JSON"); goto done; }
      if (strcmp(name, "__metadata__") == 0) {
        if (!parse_metadata(&j, &is_graph)) { st = corrupt(&c, "bad __metadata__"); goto done; }
        continue;
      }
      if (nent == cap) {
        cap = cap ? cap * 2 : 16;
        if (cap > MAX_COUNT) { st = corrupt(&c, "too many entries"); goto done; }
        st_entry *e2 = realloc(ents, sizeof *e2 * (size_t)cap);
        if (!e2) { st = of_fail(OF_ERR_OOM, "nn.Graph.load: out of memory"); goto done; }
        ents = e2;
      }
      st_entry *e = &ents[nent];
      memset(e, 0, sizeof *e);
      snprintf(e->name, sizeof e->name, "%s", name);
      if (!parse_entry(&j, e)) { st = corrupt(&c, "bad tensor entry in the header"); goto done; }
      int64_t numel = 1;
      for (int32_t i = 0; i < e->ndim; i++) {
        if (e->shape[i] > 0 && numel > ((int64_t)1 << 50) / e->shape[i]) {
          st = corrupt(&c, "tensor shape too large");
          goto done;
        }
        numel *= e->shape[i];
      }
      if (e->begin > e->end || e->end > data_len ||
          e->end - e->begin != numel * of_dtype_size(e->dtype)) {
        st = corrupt(&c, "tensor data offsets out of range (truncated file?)");
        goto done;
      }
      nent++;
    } while (lit(&j, ','));
    if (!lit(&j, '}')) { st = corrupt(&c, "bad header JSON"); goto done; }
  }
  if (!is_graph) { st = corrupt(&c, "not a saved graph (no oneflow-graph metadata)"); goto done; }
  const st_entry *gi = NULL;
  for (int32_t i = 0; i < nent; i++)
    if (strcmp(ents[i].name, "__graph__") == 0) gi = &ents[i];
  if (!gi || gi->dtype != OF_UINT8 || gi->ndim != 1) { st = corrupt(&c, "no __graph__ record"); goto done; }
  size_t irn = (size_t)(gi->end - gi->begin);
  ir = malloc(irn ? irn : 1);
  if (!ir) { st = of_fail(OF_ERR_OOM, "nn.Graph.load: out of memory"); goto done; }
  if (fseek(f, (long)(data_start + gi->begin), SEEK_SET) != 0 || fread(ir, 1, irn, f) != irn) {
    st = corrupt(&c, "cannot read the graph record");
    goto done;
  }
  st = parse_ir(&c, ir, irn, &g, &ext_of_value, &next);
  if (st != OF_OK) goto done;
  /* the file's externals, read once each and shared by the variants */
  for (int32_t i = 0; i < nent; i++) {
    int k;
    char tail;
    if (sscanf(ents[i].name, "ext.%d%c", &k, &tail) == 1 && k >= 0 && k < nent && k >= next_file)
      next_file = k + 1;
  }
  ext = calloc((size_t)(next_file ? next_file : 1), sizeof *ext);
  if (!ext) { st = of_fail(OF_ERR_OOM, "nn.Graph.load: out of memory"); goto done; }
  st = bind(&c, f, g, ext_of_value, next, NULL, ext, next_file, ents, nent, data_start);
  /* more compiled signatures: "__graph__.1", ... with "__graph__.1.ext" (int32: the
   * file's external of each of the variant's externals) */
  of_graph *last = g;
  for (int32_t vi = 1; st == OF_OK && vi < nent; vi++) {
    char want[48], wmap[48];
    snprintf(want, sizeof want, "__graph__.%d", (int)vi);
    snprintf(wmap, sizeof wmap, "__graph__.%d.ext", (int)vi);
    const st_entry *e = find_entry(ents, nent, want), *me = find_entry(ents, nent, wmap);
    if (!e) break;
    if (e->dtype != OF_UINT8 || e->ndim != 1 || !me || me->dtype != OF_INT32 || me->ndim != 1) {
      st = corrupt(&c, "a compiled variant's record or its external map is missing or malformed");
      break;
    }
    of_graph *v = NULL;
    int32_t *vext = NULL, vnext = 0, *map = NULL;
    free(ir);
    ir = read_entry(f, data_start, e);
    map = (int32_t *)read_entry(f, data_start, me);
    if (!ir || !map) st = corrupt(&c, "cannot read a compiled variant");
    if (st == OF_OK) st = parse_ir(&c, ir, (size_t)(e->end - e->begin), &v, &vext, &vnext);
    if (st == OF_OK && me->shape[0] != vnext) st = corrupt(&c, "a variant's external map has the wrong length");
    if (st == OF_OK && (v->ninputs != g->ninputs || v->noutputs != g->noutputs))
      st = corrupt(&c, "a compiled variant has other inputs or outputs than the graph");
    for (int32_t k = 0; st == OF_OK && k < vnext; k++)
      if (map[k] < 0 || map[k] >= next_file) st = corrupt(&c, "a variant's external map is out of range");
    if (st == OF_OK) st = bind(&c, f, v, vext, vnext, map, ext, next_file, ents, nent, data_start);
    free(vext);
    free(map);
    if (st != OF_OK) {
      of_graph_release(v);
      break;
    }
    snprintf(v->passes, sizeof v->passes, "loaded from %.400s", path);
    last->variant = v;
    last = v;
  }
  if (st == OF_OK) {
    snprintf(g->passes, sizeof g->passes, "loaded from %.400s", path);
    int32_t r;
    for (of_graph *v = g; v && st == OF_OK; v = v->variant) st = of_pass_plan(v, &r);
  }
done:
  if (ext)
    for (int32_t k = 0; k < next_file; k++) of_tensor_release(ext[k]);
  free(ext);
  free(ext_of_value);
  free(ir);
  free(ents);
  free(header);
  fclose(f);
  if (st != OF_OK) {
    of_graph_release(g);
    return st;
  }
  *out = g;
  return OF_OK;
}
