/* ops.h -- graph op ids and the attribute record of each op kind. Records
 * are plain data (fixed-width fields, no pointers, zeroed padding) so that
 * CSE can compare them with memcmp and save/load can copy them as bytes. */
#ifndef ONEFLOW_GRAPH_OPS_H
#define ONEFLOW_GRAPH_OPS_H
#include "graph.h"

enum {
  OPK_VIEW = OF_OPK_FIRST_PUBLIC, OPK_RESHAPE, OPK_AS_STRIDED, OPK_TRANSPOSE, OPK_PERMUTE,
  OPK_NARROW, OPK_SLICE, OPK_SELECT, OPK_UNSQUEEZE, OPK_SQUEEZE, OPK_EXPAND, OPK_FLATTEN,
  OPK_CONTIGUOUS, OPK_CLONE, OPK_TO_DTYPE, OPK_COPY_, OPK_DETACH, OPK_FILL_,
  OPK_EMPTY, OPK_ZEROS, OPK_FULL, OPK_EYE, OPK_ARANGE, OPK_LINSPACE,
  OPK_BINARY, OPK_BINARY_SCALAR, OPK_UNARY, OPK_CLAMP, OPK_LEAKY_RELU, OPK_WHERE,
  OPK_MASKED_FILL,
  OPK_REDUCE, OPK_MAX_DIM, OPK_ARGMAX, OPK_VAR, OPK_SOFTMAX, OPK_CUMULATIVE,
  OPK_MATMUL, OPK_MM, OPK_BMM, OPK_ADDMM,
  OPK_CAT, OPK_STACK, OPK_GATHER, OPK_SCATTER, OPK_INDEX_SELECT, OPK_INDEX_ADD, OPK_SORT,
  OPK_TOPK, OPK_TRI, OPK_FLIP, OPK_ROLL, OPK_REPEAT, OPK_ONE_HOT, OPK_MASKED_SELECT,
  OPK_NONZERO,
  OPK_UNIFORM_, OPK_NORMAL_, OPK_RANDINT_, OPK_BERNOULLI, OPK_BERNOULLI_, OPK_RANDPERM,
  OPK_RAND, OPK_RANDN,
  OPK_CONV, OPK_CONV_TRANSPOSE, OPK_CONV_WEIGHT_GRAD, OPK_MAX_POOL, OPK_AVG_POOL,
  OPK_ADAPTIVE_AVG_POOL, OPK_ADAPTIVE_MAX_POOL,
  OPK_BATCH_NORM, OPK_LAYER_NORM, OPK_GROUP_NORM, OPK_INSTANCE_NORM, OPK_INTERPOLATE,
  OPK_PAD, OPK_CROSS_ENTROPY, OPK_NLL_LOSS,
  OPK_OPTIM_SGD, OPK_OPTIM_ADAM, OPK_AMP_UNSCALE, OPK_AMP_UPDATE,
  OPK_COMM_ALL_REDUCE, OPK_COMM_ALL_REDUCE_TO, OPK_COMM_BROADCAST, OPK_COMM_ALL_GATHER,
  OPK_COMM_REDUCE_SCATTER, OPK_COMM_ALL_TO_ALL,
  OPK_RELU_MAX_POOL, OPK_RELU_MAX_POOL_BACKWARD,   /* graph-only (passes/relupool.c) */
  OPK_COUNT
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

/* ---- reductions ---- */
typedef struct { double p; int32_t dims[OF_MAX_DIMS]; int32_t op, ndims, keepdim, dtype; } a_reduce;
typedef struct { int64_t base; int32_t dim, keepdim, is_max, pad_; } a_max_dim;
typedef struct { double correction; int32_t dims[OF_MAX_DIMS]; int32_t ndims, keepdim, is_std, pad_; } a_var;
typedef struct { int32_t dim, flag; } a_softmax;   /* also cumulative */

typedef struct { double beta, alpha; } a_addmm;

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
typedef struct { int64_t size[3]; double scales[3]; int32_t nsp, mode, align, has; } a_interp;
typedef struct { int64_t pad[2 * OF_MAX_DIMS]; double value; int32_t npad, mode; } a_pad;
typedef struct { double smoothing; int64_t ignore, base; int32_t reduction, pad_; } a_loss;

/* ---- graph-only ---- */
typedef struct { int64_t shape[OF_MAX_DIMS], strides[OF_MAX_DIMS], rel_offset; int32_t ndim, pad_; } a_alias;
enum { OF_BACKWARD_MAX_IN = 32 };
typedef struct { char name[48]; int32_t nin, nout; int32_t in_pos[OF_BACKWARD_MAX_IN]; } a_backward;
/* relu_max_pool(_backward): window kernel[] (= stride), input's last two dims in[] */
typedef struct { int64_t kernel[2], in[2]; } a_relu_pool;

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

of_status of_comm_node_invoke(of_gnode *n, of_tensor **ins, void **outs);
of_status of_comm_node_check(const void *attrs, int32_t size, int32_t nin);
void of_comm_node_describe(const void *attrs, char *buf, size_t cap);

of_status of_amp_unscale_invoke(of_gnode *n, of_tensor **ins, void **outs);
of_status of_amp_update_scale_invoke(of_gnode *n, of_tensor **ins, void **outs);
of_status of_optim_sgd_invoke(of_gnode *n, of_tensor **ins, void **outs);
of_status of_optim_adam_invoke(of_gnode *n, of_tensor **ins, void **outs);
of_status of_backward_invoke(of_gnode *n, of_tensor **ins, void **outs);
of_status of_relu_pool_invoke(of_gnode *n, of_tensor **ins, void **outs);
of_status of_relu_pool_check(const void *attrs, int32_t size, int32_t nin);
void of_relu_pool_describe(const void *attrs, char *buf, size_t cap);
#endif
