/* op.h -- what an op family file (core/ops/<family>.c) is made of.
 *
 * Each op is one line of ops.def (kind, name, attribute record, arity,
 * flags, family) plus, in its family file:
 *   - the body: checks, kernel routing (CPU or the device table), and the
 *     autograd record with its backward rule;
 *   - the public entry point `of_X` (oneflow.h): OF_DISPATCH(body, record);
 *   - a run function that calls the entry point again from an attribute
 *     record (the graph executor's way in), and optionally a printer of the
 *     record, the inputs it writes in place, and a check of a loaded record;
 *   - its table row: OF_OP_IMPL(KIND, run, mutates, check, describe).
 * The attribute records below are plain data (fixed-width fields, no
 * pointers, zeroed padding) so that the graph's CSE can compare them with
 * memcmp and save/load can copy them as bytes. */
#ifndef ONEFLOW_OPS_OP_H
#define ONEFLOW_OPS_OP_H
#include "../autograd.h"
#include "../dispatch/dispatch.h"
#include <stdarg.h>
#include <stdio.h>

/* ---- op kinds: OPK_<KIND>, in ops.def order ---- */
enum {
#define OF_OP(K, NAME, T, MIN, MAX, NR, FL, FAM) OPK_##K,
#define OF_GRAPH_OP OF_OP
#include "ops.def"
#undef OF_OP
#undef OF_GRAPH_OP
  OPK_COUNT
};
/* the graph-only kinds keep their historical names */
enum { OF_OPK_ALIAS = OPK_ALIAS, OF_OPK_BACKWARD = OPK_BACKWARD, OF_OPK_FUSED = OPK_FUSED };

/* ---- op flags (the table's and the schema's) ---- */
enum {
  OF_OPF_EW = 1,          /* elementwise (fusion candidate; see graph/passes/fuse.c) */
  OF_OPF_RANDOM = 2,      /* draws from the generator: never merged or folded */
  OF_OPF_VIEW = 4,        /* result shares the input's storage */
  OF_OPF_CREATE = 8,      /* no tensor inputs: constant unless RANDOM or EMPTY */
  OF_OPF_EMPTY = 16,      /* uninitialised result */
  OF_OPF_OPAQUE = 32,     /* graph-only op not to be merged (backward of a captured node) */
  OF_OPF_VARIN = 64,      /* variable number of inputs (cat, stack) */
  OF_OPF_INTO = 128,      /* may write into a given tensor and return it */
  /* a collective (comm.c): every rank runs it in the same order, so it is
   * flagged RANDOM as well -- kept, never merged, folded or recomputed, and
   * ordered by the wave scheduler -- and a graph holding one is not saved */
  OF_OPF_COLLECTIVE = 256,
  OF_OPF_VARATTR = 512,   /* the attribute record's size varies (checked by `check`) */
};

/* ---- shared layouts ---- */
typedef struct { int64_t shape[OF_MAX_DIMS]; int32_t ndim, pad_; } a_shape;
typedef struct { int64_t shape[OF_MAX_DIMS], strides[OF_MAX_DIMS], offset; int32_t ndim, pad_; } a_strided;
typedef struct { int32_t a, b; } a_i2;
typedef struct { int64_t a, b, c; int32_t dim, pad_; } a_dim3;   /* narrow, slice, select */
typedef struct { int32_t dims[OF_MAX_DIMS]; int32_t n, pad_; } a_dims;
typedef struct { double v; } a_d1;
typedef struct { int32_t v, pad_; } a_i1;
typedef struct { int64_t shape[OF_MAX_DIMS]; double value; int32_t ndim, dtype, device, pad_; } a_create;
typedef struct { double a, b, c; int32_t dtype, device; } a_range;   /* eye: a=n, b=m */

/* ---- elementwise ---- */
typedef struct { int32_t op, pad_; } a_binary;
typedef struct { double s; int32_t op, reverse; } a_binary_scalar;
typedef struct { int32_t op, pad_; } a_unary;
typedef struct { double lo, hi; int32_t has_lo, has_hi; } a_clamp;
typedef struct { double slope; } a_leaky;
typedef struct { double value; } a_masked_fill;
/* flow.special (special.c): the function (of_special_fn) and polygamma's n */
typedef struct { double p; int32_t fn, pad_; } a_special;
/* fft_c2c / fft_r2c / fft_c2r: dims 0-based; last_size: c2r's output size */
typedef struct { int64_t last_size; int32_t dims[OF_MAX_DIMS]; int32_t ndims, kind, forward, norm; } a_fft;

/* ---- reductions ---- */
typedef struct { double p; int32_t dims[OF_MAX_DIMS]; int32_t op, ndims, keepdim, dtype; } a_reduce;
typedef struct { int64_t base; int32_t dim, keepdim, is_max, pad_; } a_max_dim;
typedef struct { double correction; int32_t dims[OF_MAX_DIMS]; int32_t ndims, keepdim, is_std, pad_; } a_var;
typedef struct { int32_t dim, flag; } a_softmax;   /* also cumulative */

/* b_t: b was a transposed (column-major) matrix, as linear's weight.t() -- a
 * layout hint for the backward rule, which the run recomputes; matmul, mm
 * and bmm keep it in a_i1's v */
typedef struct { double beta, alpha; int32_t b_t, pad_; } a_addmm;

/* ---- index / shape ---- */
typedef struct { int64_t base; int32_t dim, pad_; } a_gather;   /* gather, index_select */
typedef struct { double value; int64_t base; int32_t dim, use_value, reduce, has_src; } a_scatter;
typedef struct { double alpha; int64_t base; int32_t dim, pad_; } a_index_add;
typedef struct { int64_t k, base; int32_t dim, flag1, flag2, pad_; } a_sort;   /* sort, topk */
typedef struct { int64_t k; int32_t upper, pad_; } a_tri;
typedef struct { int64_t shifts[OF_MAX_DIMS]; int32_t dims[OF_MAX_DIMS]; int32_t n, pad_; } a_roll;
typedef struct { int64_t n, base; } a_one_hot;   /* one_hot: n = classes; nonzero: base */

/* ---- random ---- */
typedef struct { double a, b; } a_rand2;
typedef struct { int64_t n, base; int32_t dtype, pad_; } a_randperm;

/* ---- nn ---- */
typedef struct {
  int64_t stride[3], padding[3], dilation[3], extra[3];   /* extra: output_padding / kernel */
  int64_t groups;
  int32_t nsp, has;   /* has: bit 0 stride, 1 padding, 2 dilation, 3 extra given */
} a_conv;
typedef struct {
  int64_t kernel[3], stride[3], padding[3], dilation[3];
  int64_t base, divisor;
  int32_t nsp, ceil_mode, cip, has;   /* has: bit 0 kernel, 1 stride, 2 padding, 3 dilation,
                                         4 indices wanted */
} a_pool;
typedef struct { double momentum, eps; int64_t groups; int32_t flag, pad_; } a_norm;
typedef struct { double eps, lo, hi; int32_t has_lo, has_hi; } a_bn_eval;   /* + a clamp */
/* quantized_linear / quantized_conv2d (quant.c): the scales and zero points
 * of input and output; the conv's geometry (2-D) */
typedef struct {
  double x_scale, out_scale;
  int64_t x_zp, out_zp, stride[2], padding[2], dilation[2], groups;
  int32_t out_dtype, relu;
} a_quant;
/* quantized_add (quant.c): both operands' and the output's parameters */
typedef struct {
  double a_scale, b_scale, out_scale;
  int64_t a_zp, b_zp, out_zp;
  int32_t out_dtype, relu;
} a_qadd;
typedef struct { int64_t size[3]; double scales[3]; int32_t nsp, mode, align, has; } a_interp;
typedef struct { int64_t pad[2 * OF_MAX_DIMS]; double value; int32_t npad, mode; } a_pad;
typedef struct { double smoothing; int64_t ignore, base; int32_t reduction, pad_; } a_loss;
/* scaled_dot_product_attention (attention.c): seed and offset are the
 * dropout draws' Philox stream, kept in autograd nodes only (zero in a
 * traced record: each run draws anew) */
typedef struct { double dropout_p, scale; uint64_t seed, offset; int32_t causal, gqa; } a_sdpa;

/* ---- optimizers (optim.c) ---- */
typedef struct { double momentum, dampening, weight_decay; int32_t nesterov, maximize; } a_sgd;
typedef struct { double beta1, beta2, eps, weight_decay; int32_t amsgrad, maximize, decoupled, pad_; } a_adam;

typedef struct { double growth, backoff; int64_t interval; } a_amp_update;

/* ---- collectives (dist.c) ----
 * comm: the communicator's number in this process's registry (a graph with
 * collectives is never saved, so the number need not mean anything
 * elsewhere); red: reduction; root: broadcast root; has: bit 0 send/gather
 * counts given, bit 1 receive counts given; counts[n] follow the header. */
typedef struct { int32_t comm, red, root, has, n, pad_; int64_t counts[]; } a_comm;


#define NDIM_OK(x) ((x) >= 0 && (x) <= OF_MAX_DIMS)

/* ---- a family's table row ---- */
typedef of_status (*of_op_run_fn)(const of_oprec *n, of_tensor **ins, void **outs);
typedef struct of_opimpl {
  of_op_run_fn run;       /* runs the op from a record (outs: nreal results) */
  /* inputs written in place (not counting an `into` that is returned) */
  int32_t (*mutates)(const void *attrs, int32_t nin, int32_t *idx);
  /* validate a loaded record; NULL: size check only */
  of_status (*check)(const void *attrs, int32_t size, int32_t nin);
  void (*describe)(const void *attrs, char *buf, size_t cap);
  /* the results' shapes and dtypes from the inputs' (ndim -1: absent) and
   * the record, by the function the op's own body uses: the graph loader
   * re-infers a loaded node with it before anything runs. NULL: the shapes
   * are known only by running the op (checked at the first run). */
  of_status (*infer)(const void *attrs, int32_t nin, const of_meta *ins, of_meta *outs);
} of_opimpl;
#define OF_OP_IMPL(K, RUN, MUT, CHECK, DESCRIBE) \
  const of_opimpl of_opimpl_##K = {RUN, MUT, CHECK, DESCRIBE, NULL}
#define OF_OP_IMPL_INFER(K, RUN, MUT, CHECK, DESCRIBE, INFER) \
  const of_opimpl of_opimpl_##K = {RUN, MUT, CHECK, DESCRIBE, INFER}

/* the schema of an op (table.c); NULL for an unknown kind */
typedef struct of_opschema_row {
  const char *name, *attrs, *family;
  int32_t attr_size, min_in, max_in, nreal;
  uint32_t flags;
  const of_opimpl *impl;   /* NULL for graph-only ops */
} of_opschema_row;
const of_opschema_row *of_op_schema_row(int32_t op);
const char *of_op_name(int32_t op);

static inline void of_copy_i64(int64_t *dst, const int64_t *src, int32_t n) {
  for (int32_t i = 0; i < n; i++) dst[i] = src ? src[i] : 0;
}
static inline void of_copy_i32(int32_t *dst, const int32_t *src, int32_t n) {
  for (int32_t i = 0; i < n; i++) dst[i] = src ? src[i] : 0;
}
/* appending printf for record printers */
size_t of_catf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void of_cat_list(char *buf, size_t cap, const char *name, const int64_t *v, int32_t n);
/* printers and in-place lists that several families share (table.c) */
void of_describe_i1(const void *p, char *b, size_t c);
void of_describe_d1(const void *p, char *b, size_t c);
void of_describe_dims(const void *p, char *b, size_t c);
int32_t of_mutates_first(const void *p, int32_t nin, int32_t *idx);
/* creation ops and random creation ops share their record (creation.c) */
of_status of_record_create(int32_t op, const int64_t *shape, int32_t ndim, double v,
                           of_dtype dt, of_device dev, of_tensor **out);
of_status of_run_create(const of_oprec *n, of_tensor **ins, void **outs);
void of_describe_create(const void *p, char *b, size_t c);
/* the result of a create record (the shape and dtype of_tensor_new_as
 * allocates), for the creation ops' infer hooks */
of_status of_create_meta(const char *op, const a_create *a, of_meta *out);
/* a record's double that an op takes as int64: refused unless integral and
 * in range (eye, linspace, randint_ records hold their integers as doubles) */
of_status of_record_int(const char *op, const char *what, double v, int64_t *out);
#endif
