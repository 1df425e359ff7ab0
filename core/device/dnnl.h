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
  /* forward only, after the bias: post_sum adds what r holds before the
   * call (a residual; oneDNN's sum post-op), then post_act applies
   * OF_DNNL_ACT_CLIP, min(max(x, act_lo), act_hi) (an eltwise post-op) */
  int32_t post_sum, post_act;
  float act_lo, act_hi;
} of_dnnl_conv_desc;
enum { OF_DNNL_ACT_NONE = 0, OF_DNNL_ACT_CLIP = 1 };

/* Whether oneDNN can run here: the build has it, and the caller is not
 * inside an OpenMP parallel region (an nn.Graph scheduler wave). Nested
 * there, oneDNN's parallel gets one thread while its backward-weights
 * kernels wait on a barrier for the thread count they were made for, and
 * spin forever (seen in spec/graph). */
bool of_dnnl_usable(void);

/* Who the forward weight q is, for the weight-reorder cache: its storage's
 * id (unique for the process's life), its version (bumped by every in-place
 * write) and its offset in elements. Two calls with equal keys read the
 * same numbers, so the weight reordered to oneDNN's blocked layout by the
 * first is reused by the second. */
typedef struct of_dnnl_wkey {
  int64_t sid, version, offset;
} of_dnnl_wkey;

/* Runs the convolution through oneDNN. *done is false (and nothing was
 * written) when oneDNN has no implementation for it (with post_sum: also
 * when its result layout is not r's, which r's residual would have to be
 * reordered into), or, with native_bf16,
 * when bfloat16 operands would be computed in float32 (no bfloat16 kernel on
 * this CPU); the caller then runs its own kernels. wkey (forward only, may
 * be NULL) keeps the reordered weight for the next call with the same key.
 * Errors (out of memory) are returned as statuses. */
of_status of_dnnl_conv(const of_dnnl_conv_desc *d, const void *p, const void *q,
                       const void *bias, void *r, bool native_bf16,
                       const of_dnnl_wkey *wkey, bool *done);

/* Frees the reordered weights the cache keeps (of_release_kernel_caches). */
void of_dnnl_release_cached(void);
/* Frees the reordered copies of storage sid's weights: a graph's kept
 * result it replaces or drops (exec.c, memo) would otherwise hold a slot
 * until the least recently used ones go. */
void of_dnnl_forget_weight(int64_t sid);

/* int8 gemm for the quantized kernels (core/ops/quant.c): C = A x B^T with
 * A [M, K] uint8 (a_u8) or int8, B [N, K] int8, both row-major and dense,
 * C int32 [M, N] row-major, or [N, M] when c_t. Exact int32 accumulation,
 * no zero points (the caller corrects for them). *done false: not run. */
of_status of_dnnl_gemm_s8(int64_t M, int64_t K, int64_t N, const void *a, bool a_u8,
                          const int8_t *b, int32_t *c, bool c_t, bool *done);

/* A bfloat16 matmul C = A @ B (float32 accumulation) through oneDNN where
 * the CPU computes in bfloat16 (AVX512-BF16 or AMX): nd dims [batch..., rows,
 * cols] of each operand, a batch dim of size 1 broadcast against the
 * other's; strides in elements (the matrix dims: rows or columns contiguous).
 * C is [batch..., M, N]. Zero every unused field: the struct is the cache key. */
enum { OF_DNNL_MM_DIMS = 10 };
typedef struct of_dnnl_mm_desc {
  int32_t nd, pad_;
  int64_t ad[OF_DNNL_MM_DIMS], bd[OF_DNNL_MM_DIMS], cd[OF_DNNL_MM_DIMS];
  int64_t as[OF_DNNL_MM_DIMS], bs[OF_DNNL_MM_DIMS], cs[OF_DNNL_MM_DIMS];
} of_dnnl_mm_desc;

/* Whether this CPU has oneDNN's bfloat16 kernels (AVX512-BF16 or AMX). */
bool of_dnnl_native_bf16(void);

/* *done false (nothing written): not built, no native bfloat16, or oneDNN
 * has no kernel for the layout; the caller then converts to float32. */
of_status of_dnnl_matmul_bf16(const of_dnnl_mm_desc *d, const void *a, const void *b, void *c,
                              bool *done);

#endif
