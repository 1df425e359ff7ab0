/* dnnl.h -- the oneDNN kernel provider for CPU convolutions (core/device/dnnl.c).
 *
 * An optional dependency: the build defines OF_HAVE_DNNL when CMake found
 * oneDNN (option OF_WITH_DNNL); without it of_dnnl_conv answers "not done"
 * and the caller (core/ops/conv.c) runs its own im2col + OpenBLAS kernels.
 * This layer knows pointers, shapes and strides only; which op runs here is
 * conv.c's choice (OF_CONV_BACKEND, doc/ops.md). */
#ifndef ONEFLOW_DNNL_H
#define ONEFLOW_DNNL_H
#include "../internal.h"

enum { OF_DNNL_FWD = 0, OF_DNNL_BWD_DATA = 1, OF_DNNL_BWD_WEIGHTS = 2 };

/* One convolution in the terms of the forward one: input [N, CI, in...],
 * weight [CO, CI/G, k...] (dense), output [N, CO, out...]. The operands of
 * each kind (p, q -> r, as in conv.c's run_op):
 *   FWD:          p = input,       q = weight,      r = output (+ bias)
 *   BWD_DATA:     p = grad_output, q = weight,      r = grad_input
 *   BWD_WEIGHTS:  p = input,       q = grad_output, r = grad_weight
 * Strides are in elements, for the dims [N, C, spatial...] of each operand
 * (the weight's: dense). All operands have dtype dt (float32 or bfloat16).
 * Zero every unused field: the struct is the primitive cache's key. */
typedef struct of_dnnl_conv_desc {
  int32_t kind, nsp;
  int32_t dt;               /* of_dtype */
  int32_t has_bias;
  int64_t N, CI, CO, groups;
  int64_t in[3], out[3], k[3], stride[3], pad[3], dil[3];
  int64_t ps[5], qs[5], rs[5];
} of_dnnl_conv_desc;

/* Whether oneDNN can run here: the build has it, and the caller is not
 * inside an OpenMP parallel region (an nn.Graph scheduler wave). Nested
 * there, oneDNN's parallel gets one thread while its backward-weights
 * kernels wait on a barrier for the thread count they were made for, and
 * spin forever (seen in spec/graph). */
bool of_dnnl_usable(void);

/* Runs the convolution through oneDNN. *done is false (and nothing was
 * written) when oneDNN has no implementation for it, or, with native_bf16,
 * when bfloat16 operands would be computed in float32 (no bfloat16 kernel on
 * this CPU); the caller then runs its own kernels. Errors (out of memory)
 * are returned as statuses. */
of_status of_dnnl_conv(const of_dnnl_conv_desc *d, const void *p, const void *q,
                       const void *bias, void *r, bool native_bf16, bool *done);

/* int8 gemm for the quantized kernels (core/ops/quant.c): C = A x B^T with
 * A [M, K] uint8 (a_u8) or int8, B [N, K] int8, both row-major and dense,
 * C int32 [M, N] row-major, or [N, M] when c_t. Exact int32 accumulation,
 * no zero points (the caller corrects for them). *done false: not run. */
of_status of_dnnl_gemm_s8(int64_t M, int64_t K, int64_t N, const void *a, bool a_u8,
                          const int8_t *b, int32_t *c, bool c_t, bool *done);

#endif
