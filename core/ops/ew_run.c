/* ew_run.c -- the shared driver of elementwise ops: dtype conversion of the
 * operands, output allocation or in-place writing, then one of_iter pass. */
#include "elementwise.h"
#include "../device.h"
#include "rowk.h"
#include "simd.h"
#include <string.h>

static void release_all(of_tensor **ts, int32_t n) {
  for (int32_t i = 0; i < n; i++) of_tensor_release(ts[i]);
}

/* bfloat16 operands computed in float32 with a bfloat16 result, on the CPU,
 * every operand dense with the result's shape (or one element): blocks of
 * BF_BLOCK elements widened into float32 buffers on the stack, the float32
 * kernel, and the result rounded straight into the output -- one pass
 * instead of a float32 copy of each operand and of the result (the same
 * numbers: the float32 kernel's, rounded once). *done false: not taken. */
enum { BF_BLOCK = 1024 };

/* the block loops, built per ISA (baseline SSE2 has no 32 -> 16 bit
 * narrowing: the rounding loop ran ~3x slower there) */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void widen_block(const uint16_t *restrict x, float *restrict d, int64_t n) {
  for (int64_t j = 0; j < n; j++) d[j] = of_bf16_to_f32(x[j]);
}

/* Rounding: GCC's vectorised form of of_f32_to_bf16 took 28% of a bfloat16
 * GELU's time (more than widening and the float32 kernel's buffer
 * traffic together), so AVX-512 uses simd.h's stores: the integer
 * rounding in one narrowing, or AVX512-BF16's conversion (same bits). */
#define ROUND_BLOCK(NAME, ATTR)                                                                 \
  ATTR static void NAME(const float *restrict x, uint16_t *restrict d, int64_t n) {             \
    for (int64_t j = 0; j < n; j++) d[j] = of_f32_to_bf16(x[j]);                                \
  }
ROUND_BLOCK(round_block_def, )
#if defined(__x86_64__) || defined(__i386__)
ROUND_BLOCK(round_block_avx2, __attribute__((target("avx2"))))
#define ROUND_BLOCK_16(NAME, ATTR, ST)                                                          \
  ATTR static void NAME(const float *restrict x, uint16_t *restrict d, int64_t n) {             \
    int64_t j = 0;                                                                              \
    for (; j + 16 <= n; j += 16) ST(d + j, ld_f32_16(x + j));                                   \
    for (; j < n; j++) d[j] = of_f32_to_bf16(x[j]);                                                   \
  }
ROUND_BLOCK_16(round_block_avx512, VATTR_16, st_bf16_16)
ROUND_BLOCK_16(round_block_bf16n, VATTR_16B, st_bf16n_16)
#endif

typedef void (*round_fn)(const float *restrict, uint16_t *restrict, int64_t);
static round_fn pick_round(void) {
#if defined(__x86_64__) || defined(__i386__)
  int32_t isa = of_cpu_isa();
  if (isa == OF_ISA_AVX512) return of_cpu_bf16_native() ? round_block_bf16n : round_block_avx512;
  if (isa == OF_ISA_AVX2) return round_block_avx2;
#endif
  return round_block_def;
}

static of_status bf16_blocked(const char *op, of_loop_fn fn, of_ew_ctx *ctx, of_tensor **ins,
                              int32_t nin, const int64_t *shape, int32_t ndim, of_tensor *into,
                              of_tensor **out, bool *done) {
  *done = false;
  int64_t total = of_shape_numel(shape, ndim);
  if (nin < 1 || nin >= OF_ITER_MAX || total < 1) return OF_OK;
  bool any_full = false;
  for (int32_t i = 0; i < nin; i++) {
    const of_tensor *t = ins[i];
    if (!t || t->dtype != OF_BFLOAT16 || of_dev(t) != OF_CPU || !of_tensor_is_contiguous(t))
      return OF_OK;
    if (t->numel == 1) continue;
    if (t->ndim != ndim || memcmp(t->shape, shape, sizeof(int64_t) * (size_t)ndim)) return OF_OK;
    any_full = true;
  }
  if (!any_full || (into && (into->dtype != OF_BFLOAT16 || !of_tensor_is_contiguous(into))))
    return OF_OK;
  /* `into` may be an operand itself, element for element (x:add_(y)), but
   * not overlap one elsewhere: other threads' blocks would read results */
  for (int32_t i = 0; into && i < nin; i++)
    if (ins[i]->storage == into->storage && (ins[i]->offset != into->offset || ins[i]->numel == 1))
      return OF_OK;
  of_tensor *res = NULL;
  OF_CHECK(of_prepare_out_on(op, into, shape, ndim, OF_BFLOAT16, OF_CPU, &res));
  if (!of_tensor_is_contiguous(res)) {
    of_tensor_release(res);
    return OF_OK;
  }
  /* an `into` that is also an operand: each block reads its operands
   * before it writes its own elements */
  uint16_t *o = (uint16_t *)of_ptr(res);
  const uint16_t *src[OF_ITER_MAX];
  for (int32_t i = 0; i < nin; i++) src[i] = (const uint16_t *)of_ptr(ins[i]);
  int64_t nblk = (total + BF_BLOCK - 1) / BF_BLOCK;
  int nt = of_threads();
  round_fn round_block = pick_round();
  bool direct = nin == 1 && ins[0]->numel > 1 && ctx->kind == OF_EWK_UNARY &&
                (ctx->op == OF_GELU || ctx->op == OF_SILU);
#pragma omp parallel for schedule(static) num_threads(nt) if (total > 32768)
  for (int64_t b = 0; b < nblk; b++) {
    float buf[OF_ITER_MAX][BF_BLOCK];
    int64_t i0 = b * BF_BLOCK, n = total - i0 < BF_BLOCK ? total - i0 : BF_BLOCK;
    /* GELU and SiLU have bfloat16 loops of their own (rowk.c): the same
     * float32 arithmetic, without the buffers */
    if (direct && of_rowk_unary(ctx->op, OF_BFLOAT16, src[0] + i0, o + i0, n)) continue;
    char *p[OF_ITER_MAX];
    int64_t st[OF_ITER_MAX];
    p[0] = (char *)buf[0], st[0] = 4;
    for (int32_t k = 0; k < nin; k++) {
      float *d = buf[k + 1];
      if (ins[k]->numel == 1) {
        d[0] = of_bf16_to_f32(src[k][0]);
        st[k + 1] = 0;
      } else {
        widen_block(src[k] + i0, d, n);
        st[k + 1] = 4;
      }
      p[k + 1] = (char *)d;
    }
    fn(p, st, n, ctx);
    round_block(buf[0], o + i0, n);
  }
  of_bump_version(res);
  *out = res;
  *done = true;
  return OF_OK;
}

of_status of_ew_run(const char *op, of_loop_fn fn, of_ew_ctx *ctx, of_tensor **ins, int32_t nin,
                    of_dtype compute, of_dtype kernel_out, of_dtype result_dt,
                    const int64_t *shape, int32_t ndim, of_tensor *into, of_tensor **out) {
  /* a complex operand computed in a real dtype would lose its imaginary
   * part: only the complex kernels (add, sub, eq, ne) take one */
  for (int32_t i = 0; i < nin; i++)
    if (of_dtype_is_complex(ins[i]->dtype) && !of_dtype_is_complex(compute))
      return of_fail(OF_ERR_DTYPE, "%s: %s is not supported (input %d, shape %s)", op,
                     OF_DT(ins[i]), (int)i + 1, OF_SHAPE_STR(ins[i]));
  if (into && of_dtype_is_complex(into->dtype) && !of_dtype_is_complex(result_dt))
    return of_fail(OF_ERR_DTYPE, "%s: %s is not supported (output, shape %s)", op, OF_DT(into),
                   OF_SHAPE_STR(into));
  OF_ROUTE(op, dev, dops, ew, ins[0], nin > 1 ? ins[1] : NULL, nin > 2 ? ins[2] : NULL, into);
  if (!dops && compute == OF_FLOAT32 && kernel_out == OF_FLOAT32 && result_dt == OF_BFLOAT16) {
    bool done = false;
    OF_CHECK(bf16_blocked(op, fn, ctx, ins, nin, shape, ndim, into, out, &done));
    if (done) return OF_OK;
  }
  of_tensor *conv[OF_ITER_MAX] = {0};
  for (int32_t i = 0; i < nin; i++) {
    of_status st = of_cast_data(ins[i], compute, &conv[i]);
    if (st == OF_OK && of_dev(conv[i]) != dev) {   /* a CPU scalar joining a device op */
      of_tensor *m = NULL;
      st = of_to_device(conv[i], dev, 0, &m);
      of_tensor_release(conv[i]);
      conv[i] = m;
    }
    if (st != OF_OK) {
      release_all(conv, i);
      return st;
    }
  }
  of_tensor *res = NULL, *direct = NULL;
  /* the result's layout: conv -> bn -> relu -> add chains keep NHWC */
  bool cl = !into && of_tensors_want_channels_last(ins, nin, shape, ndim);
  of_status st = cl ? of_tensor_new_channels_last(shape, ndim, result_dt, dev, &res)
                    : of_prepare_out_on(op, into, shape, ndim, result_dt, dev, &res);
  if (st != OF_OK) goto done;
  /* the kernel writes kernel_out; a different result dtype goes through a temp */
  if (res->dtype == kernel_out) {
    direct = res;
    of_tensor_retain(direct);
  } else {
    st = cl ? of_tensor_new_channels_last(shape, ndim, kernel_out, dev, &direct)
            : of_tensor_new(shape, ndim, kernel_out, dev, &direct);
    if (st != OF_OK) goto done;
  }
  of_tensor *ops[OF_ITER_MAX + 1] = {direct};
  for (int32_t i = 0; i < nin; i++) ops[i + 1] = conv[i];
  if (dops) {
    st = dops->ew(op, ctx->kind, ctx->op, ctx->p0, ctx->p1, ctx->flags, ops, nin + 1);
    if (st != OF_OK) goto done;
    if (direct != res) st = of_copy_data(res, direct);
    else of_bump_version(res);
    goto done;
  }
  of_iter it;
  of_iter_init(&it, ops, nin + 1, shape, ndim);
  of_iter_run(&it, fn, ctx, true);
  if (ctx->err) {
    st = of_fail(OF_ERR_ARG, "%s: integer division by zero (dtype %s)", op, of_dtype_name(compute));
    goto done;
  }
  if (direct != res) st = of_copy_data(res, direct);
  else of_bump_version(res);
done:
  release_all(conv, nin);
  of_tensor_release(direct);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}
