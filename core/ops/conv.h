/* conv.h -- the convolution with post-ops that conv.c runs for the graph's
 * fused conv_fused node (core/graph/passes/convfuse.c). */
#ifndef ONEFLOW_OPS_CONV_H
#define ONEFLOW_OPS_CONV_H
#include "../internal.h"

/* acc (or NULL): a dense tensor of the result's shape, dtype and layout
 * holding the residual; the result is conv + residual, written into acc.
 * act: OF_DNNL_ACT_NONE or OF_DNNL_ACT_CLIP, min(max(x, lo), hi), applied
 * after the sum (core/device/dnnl.h). */
typedef struct {
  of_tensor *acc;
  int32_t act;
  float lo, hi;
} of_conv_post;

/* The float32 CPU forward with the post-ops, through Winograd or oneDNN as
 * conv's routing picks them; *done false (nothing written, OF_OK) where it
 * picks neither, or acc does not fit; errors are returned as statuses. */
of_status of_conv_with_post(of_tensor *x, of_tensor *w, of_tensor *b, const int64_t *stride,
                            const int64_t *padding, const int64_t *dilation, int32_t nsp,
                            int64_t groups, const of_conv_post *post, of_tensor **out,
                            bool *done);

/* OpenBLAS on the calling thread only (its own pool against OpenMP's
 * spinning threads made a conv 4-7x slower); returns what to restore. */
int of_blas_single_begin(void);
void of_blas_single_end(int prev);

/* The float32 forward of a 3x3 convolution with stride 1, no dilation and
 * one group by Winograd's F(2x2, 3x3) or F(4x4, 3x3) (winograd.c): x
 * [N, C, H, W] and y [N, K, OH, OW] contiguous (cl: both dense
 * channels-last, NHWC in memory), w [K, C, 3, 3] contiguous, bias [K] or
 * NULL. acc: y holds a residual, and the result is added to it; then
 * clamped to [lo, hi] (-inf, inf: none). wkey: the weight's storage id,
 * version and offset where its transform may be kept for later calls,
 * else NULL. */
typedef struct {
  int64_t N, C, H, W, K, ph, pw, OH, OW;
  int tile;                 /* 2 or 4 */
  const float *x, *w, *bias;
  float *y;
  bool acc;
  float lo, hi;
  const int64_t *wkey;
  bool cl;
} of_wino_args;
of_status of_conv_winograd(const char *op, const of_wino_args *a);
#endif
