/* ops.h -- the graph compiler's view of the ops: the op kinds, flags and
 * attribute records of core/ops/op.h, plus the records of the graph-only
 * ops (alias, backward, fused, relu_max_pool, conv_fused). */
#ifndef ONEFLOW_GRAPH_OPS_H
#define ONEFLOW_GRAPH_OPS_H
#include "graph.h"

/* ---- graph-only ---- */
typedef struct { int64_t shape[OF_MAX_DIMS], strides[OF_MAX_DIMS], rel_offset; int32_t ndim, pad_; } a_alias;
enum { OF_BACKWARD_MAX_IN = 32 };
typedef struct { char name[48]; int32_t nin, nout; int32_t in_pos[OF_BACKWARD_MAX_IN]; } a_backward;
/* relu_max_pool(_backward): window kernel[] (= stride), input's last two dims in[] */
typedef struct { int64_t kernel[2], in[2]; } a_relu_pool;
/* conv_fused (passes/convfuse.c): conv's record (a_conv's stride, padding,
 * dilation, groups, nsp, has bits 0-2), then the activation after the
 * residual sum: act 0 none, 1 relu, 2 clamp to [lo, hi] (has_lo, has_hi) */
typedef struct {
  int64_t stride[3], padding[3], dilation[3], groups;
  double lo, hi;
  int32_t nsp, has, act, has_lo, has_hi, pad_;
} a_conv_fused;


of_status of_backward_invoke(of_gnode *n, of_tensor **ins, void **outs);
of_status of_relu_pool_invoke(of_gnode *n, of_tensor **ins, void **outs);
of_status of_relu_pool_check(const void *attrs, int32_t size, int32_t nin);
void of_relu_pool_describe(const void *attrs, char *buf, size_t cap);
/* their results from the recorded inputs (the graph loader's re-inference),
 * by the functions the ops check and allocate with */
of_status of_relu_pool_infer(const void *attrs, int32_t nin, const of_meta *ins, of_meta *outs);
of_status of_relu_pool_backward_infer(const void *attrs, int32_t nin, const of_meta *ins, of_meta *outs);
of_status of_conv_fused_invoke(of_gnode *n, of_tensor **ins, void **outs);
of_status of_conv_fused_check(const void *attrs, int32_t size, int32_t nin);
void of_conv_fused_describe(const void *attrs, char *buf, size_t cap);
of_status of_conv_fused_infer(const void *attrs, int32_t nin, const of_meta *ins, of_meta *outs);
#endif
