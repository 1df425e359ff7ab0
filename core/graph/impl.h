/* impl.h -- the op bodies behind the public entry points. Each public op
 * `of_X` of oneflow.h is defined in core/graph/ops.c as a thin wrapper that
 * calls `of_impl_X` (the original body, in its op file) and, while a graph
 * is being traced, records a node. */
#ifndef ONEFLOW_GRAPH_IMPL_H
#define ONEFLOW_GRAPH_IMPL_H
#include "oneflow/oneflow.h"

/* not exported: the wrappers call them directly, without the PLT */
#pragma GCC visibility push(hidden)

/* views.c, autograd.c */
of_status of_impl_view(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out);
of_status of_impl_reshape(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out);
of_status of_impl_as_strided(of_tensor *t, const int64_t *shape, const int64_t *strides,
                             int32_t ndim, int64_t offset, of_tensor **out);
of_status of_impl_transpose(of_tensor *t, int32_t d0, int32_t d1, of_tensor **out);
of_status of_impl_permute(of_tensor *t, const int32_t *dims, int32_t ndim, of_tensor **out);
of_status of_impl_narrow(of_tensor *t, int32_t dim, int64_t start, int64_t length,
                         of_tensor **out);
of_status of_impl_slice(of_tensor *t, int32_t dim, int64_t start, int64_t end, int64_t step,
                        of_tensor **out);
of_status of_impl_select(of_tensor *t, int32_t dim, int64_t index, of_tensor **out);
of_status of_impl_unsqueeze(of_tensor *t, int32_t dim, of_tensor **out);
of_status of_impl_squeeze(of_tensor *t, int32_t dim, of_tensor **out);
of_status of_impl_expand(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out);
of_status of_impl_flatten(of_tensor *t, int32_t start, int32_t end, of_tensor **out);
of_status of_impl_contiguous(of_tensor *t, of_tensor **out);
of_status of_impl_clone(of_tensor *t, of_tensor **out);
of_status of_impl_to_dtype(of_tensor *t, of_dtype dt, of_tensor **out);
of_status of_impl_copy_(of_tensor *dst, of_tensor *src);
of_status of_impl_detach(of_tensor *t, of_tensor **out);

/* creation.c */
of_status of_impl_fill_(of_tensor *t, double value);
of_status of_impl_empty(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                        of_tensor **out);
of_status of_impl_zeros(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                        of_tensor **out);
of_status of_impl_full(const int64_t *shape, int32_t ndim, double value, of_dtype dt,
                       of_device dev, of_tensor **out);
of_status of_impl_eye(int64_t n, int64_t m, of_dtype dt, of_device dev, of_tensor **out);
of_status of_impl_arange(double start, double end, double step, of_dtype dt, of_device dev,
                         of_tensor **out);
of_status of_impl_linspace(double start, double end, int64_t steps, of_dtype dt,
                           of_device dev, of_tensor **out);
of_status of_impl_from_doubles(const double *values, const int64_t *shape, int32_t ndim,
                               of_dtype dt, of_tensor **out);
of_status of_impl_from_buffer(const void *data, const int64_t *shape, int32_t ndim,
                              of_dtype dt, of_tensor **out);
of_status of_impl_tensor_get_flat(const of_tensor *t, int64_t i, double *out);
of_status of_impl_tensor_to_doubles(const of_tensor *t, double *buf, int64_t n);
of_status of_impl_from_blob(void *data, const int64_t *shape, const int64_t *strides,
                            int32_t ndim, of_dtype dt, of_deleter deleter, void *ctx,
                            of_tensor **out);

/* binary.c, unary.c */
of_status of_impl_binary(of_binary_op op, of_tensor *a, of_tensor *b, of_tensor *into,
                         of_tensor **out);
of_status of_impl_binary_scalar(of_binary_op op, of_tensor *a, double s, int32_t reverse,
                                of_tensor *into, of_tensor **out);
of_status of_impl_unary(of_unary_op op, of_tensor *x, of_tensor *into, of_tensor **out);
of_status of_impl_clamp(of_tensor *x, double lo, double hi, int32_t has_lo, int32_t has_hi,
                        of_tensor *into, of_tensor **out);
of_status of_impl_leaky_relu(of_tensor *x, double slope, of_tensor *into, of_tensor **out);
of_status of_impl_where(of_tensor *cond, of_tensor *a, of_tensor *b, of_tensor **out);
of_status of_impl_masked_fill(of_tensor *x, of_tensor *mask, double value, of_tensor *into,
                              of_tensor **out);

/* reduce.c */
of_status of_impl_reduce(of_reduce_op op, of_tensor *x, const int32_t *dims, int32_t ndims,
                         int32_t keepdim, double p, of_dtype dt, of_tensor **out);
of_status of_impl_max_dim(of_tensor *x, int32_t dim, int32_t keepdim, int32_t is_max,
                          int64_t index_base, of_tensor **values, of_tensor **indices);
of_status of_impl_argmax(of_tensor *x, int32_t dim, int32_t keepdim, int32_t is_max,
                         int64_t index_base, of_tensor **out);
of_status of_impl_var(of_tensor *x, const int32_t *dims, int32_t ndims, double correction,
                      int32_t keepdim, int32_t is_std, of_tensor **out);
of_status of_impl_softmax(of_tensor *x, int32_t dim, int32_t log, of_tensor **out);
of_status of_impl_cumulative(of_tensor *x, int32_t dim, int32_t is_prod, of_tensor **out);

/* matmul.c */
of_status of_impl_matmul(of_tensor *a, of_tensor *b, of_tensor **out);
of_status of_impl_mm(of_tensor *a, of_tensor *b, of_tensor *into, of_tensor **out);
of_status of_impl_bmm(of_tensor *a, of_tensor *b, of_tensor **out);
of_status of_impl_addmm(of_tensor *c, of_tensor *a, of_tensor *b, double beta, double alpha,
                        of_tensor **out);

/* shape.c, index.c */
of_status of_impl_cat(of_tensor **ts, int32_t n, int32_t dim, of_tensor **out);
of_status of_impl_stack(of_tensor **ts, int32_t n, int32_t dim, of_tensor **out);
of_status of_impl_gather(of_tensor *x, int32_t dim, of_tensor *index, int64_t index_base,
                         of_tensor **out);
of_status of_impl_scatter(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src,
                          double value, int32_t use_value, int32_t reduce,
                          int64_t index_base, of_tensor *into, of_tensor **out);
of_status of_impl_index_select(of_tensor *x, int32_t dim, of_tensor *index,
                               int64_t index_base, of_tensor **out);
of_status of_impl_index_add(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src,
                            double alpha, int64_t index_base, of_tensor *into,
                            of_tensor **out);
of_status of_impl_sort(of_tensor *x, int32_t dim, int32_t descending, int32_t stable,
                       int64_t index_base, of_tensor **values, of_tensor **indices);
of_status of_impl_topk(of_tensor *x, int64_t k, int32_t dim, int32_t largest, int32_t sorted,
                       int64_t index_base, of_tensor **values, of_tensor **indices);
of_status of_impl_tri(of_tensor *x, int64_t k, int32_t upper, of_tensor **out);
of_status of_impl_flip(of_tensor *x, const int32_t *dims, int32_t ndims, of_tensor **out);
of_status of_impl_roll(of_tensor *x, const int64_t *shifts, const int32_t *dims, int32_t n,
                       of_tensor **out);
of_status of_impl_repeat(of_tensor *x, const int64_t *repeats, int32_t n, of_tensor **out);
of_status of_impl_one_hot(of_tensor *index, int64_t num_classes, int64_t index_base,
                          of_tensor **out);
of_status of_impl_masked_select(of_tensor *x, of_tensor *mask, of_tensor **out);
of_status of_impl_nonzero(of_tensor *x, int64_t index_base, of_tensor **out);

/* random.c */
of_status of_impl_uniform_(of_tensor *t, double lo, double hi);
of_status of_impl_normal_(of_tensor *t, double mean, double std);
of_status of_impl_randint_(of_tensor *t, int64_t lo, int64_t hi);
of_status of_impl_bernoulli(of_tensor *p, of_tensor **out);
of_status of_impl_bernoulli_(of_tensor *t, double p);
of_status of_impl_randperm(int64_t n, int64_t index_base, of_dtype dt, of_tensor **out);
of_status of_impl_rand(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                       of_tensor **out);
of_status of_impl_randn(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                        of_tensor **out);

/* conv.c, pool.c */
of_status of_impl_conv(of_tensor *x, of_tensor *w, of_tensor *b, const int64_t *stride,
                       const int64_t *padding, const int64_t *dilation, int32_t nsp,
                       int64_t groups, of_tensor **out);
of_status of_impl_conv_transpose(of_tensor *x, of_tensor *w, of_tensor *b,
                                 const int64_t *stride, const int64_t *padding,
                                 const int64_t *output_padding, const int64_t *dilation,
                                 int32_t nsp, int64_t groups, of_tensor **out);
of_status of_impl_conv_weight_grad(of_tensor *x, of_tensor *grad_out,
                                   const int64_t *kernel_size, const int64_t *stride,
                                   const int64_t *padding, const int64_t *dilation,
                                   int32_t nsp, int64_t groups, of_tensor **out);
of_status of_impl_max_pool(of_tensor *x, const int64_t *kernel, const int64_t *stride,
                           const int64_t *padding, const int64_t *dilation, int32_t nsp,
                           int32_t ceil_mode, int64_t index_base, of_tensor **values,
                           of_tensor **indices);
of_status of_impl_avg_pool(of_tensor *x, const int64_t *kernel, const int64_t *stride,
                           const int64_t *padding, int32_t nsp, int32_t ceil_mode,
                           int32_t count_include_pad, int64_t divisor_override,
                           of_tensor **out);
of_status of_impl_adaptive_avg_pool(of_tensor *x, const int64_t *output_size, int32_t nsp,
                                    of_tensor **out);
of_status of_impl_adaptive_max_pool(of_tensor *x, const int64_t *output_size, int32_t nsp,
                                    int64_t index_base, of_tensor **values,
                                    of_tensor **indices);

/* norm.c, resample.c, loss.c */
of_status of_impl_batch_norm(of_tensor *x, of_tensor *running_mean, of_tensor *running_var,
                             of_tensor *weight, of_tensor *bias, int32_t training,
                             double momentum, double eps, of_tensor **out);
of_status of_impl_layer_norm(of_tensor *x, int32_t normalized_ndim, of_tensor *weight,
                             of_tensor *bias, double eps, of_tensor **out);
of_status of_impl_group_norm(of_tensor *x, int64_t groups, of_tensor *weight,
                             of_tensor *bias, double eps, of_tensor **out);
of_status of_impl_instance_norm(of_tensor *x, of_tensor *running_mean,
                                of_tensor *running_var, of_tensor *weight, of_tensor *bias,
                                int32_t use_input_stats, double momentum, double eps,
                                of_tensor **out);
of_status of_impl_interpolate(of_tensor *x, const int64_t *size, const double *scales,
                              int32_t nsp, of_interp_mode mode, int32_t align_corners,
                              of_tensor **out);
of_status of_impl_pad(of_tensor *x, const int64_t *pad, int32_t npad, of_pad_mode mode,
                      double value, of_tensor **out);
of_status of_impl_cross_entropy(of_tensor *logits, of_tensor *target, of_tensor *weight,
                                of_loss_reduction reduction, int64_t ignore_index,
                                double label_smoothing, int64_t index_base,
                                of_tensor **out);
of_status of_impl_nll_loss(of_tensor *log_probs, of_tensor *target, of_tensor *weight,
                           of_loss_reduction reduction, int64_t ignore_index,
                           int64_t index_base, of_tensor **out);

/* core/dist/comm.c: the collectives (core/graph/dist.c wraps them) */
of_status of_impl_comm_all_reduce(of_comm *c, of_tensor *t, of_comm_op op);
of_status of_impl_comm_all_reduce_to(of_comm *c, of_tensor *x, of_comm_op op, of_tensor **out);
of_status of_impl_comm_broadcast(of_comm *c, of_tensor *t, int32_t root);
of_status of_impl_comm_all_gather(of_comm *c, of_tensor *x, const int64_t *counts,
                                  of_tensor **out);
of_status of_impl_comm_reduce_scatter(of_comm *c, of_tensor *x, const int64_t *counts,
                                      of_comm_op op, of_tensor **out);
of_status of_impl_comm_all_to_all(of_comm *c, of_tensor *x, const int64_t *send_counts,
                                  const int64_t *recv_counts, of_tensor **out);
void of_comm_retain_internal(of_comm *c);
#pragma GCC visibility pop
#endif
