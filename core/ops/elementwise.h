/* elementwise.h -- loop generators shared by the elementwise op files.
 * A loop gets 1-D runs from of_iter: ptrs[0] is the output, strides in bytes.
 * The contiguous and scalar-operand cases get their own loops so that GCC
 * vectorises them; anything else takes the strided loop. */
#ifndef ONEFLOW_ELEMENTWISE_H
#define ONEFLOW_ELEMENTWISE_H
#include "../internal.h"
#include "../device.h"
#include <math.h>

typedef struct {
  double p0, p1;    /* op parameters (clamp bounds, slope, ...) */
  int err;          /* set by a kernel that met bad input (int division by 0) */
  /* what a device kernel needs instead of the CPU loop (device.h OF_EWK_*) */
  int32_t kind, op, flags;
} of_ew_ctx;

/* elements a block of a streamed output (of_stream_store) */
enum { OF_STREAM_BLOCK = 1024 };

#define OF_BINARY_LOOP(NAME, TI, TO, EXPR)                                        \
  static void NAME(char **p, const int64_t *s, int64_t n, void *ctx_) {           \
    of_ew_ctx *ctx = ctx_;                                                        \
    (void)ctx;                                                                    \
    TO *o = (TO *)p[0];                                                           \
    const TI *x = (const TI *)p[1], *y = (const TI *)p[2];                        \
    if (s[0] == sizeof(TO) && s[1] == sizeof(TI) && s[2] == sizeof(TI) &&         \
        n * (int64_t)sizeof(TO) >= of_stream_min_bytes()) {                       \
      TO buf[OF_STREAM_BLOCK];   /* too big for the cache: written around it */   \
      for (int64_t i0 = 0; i0 < n; i0 += OF_STREAM_BLOCK) {                       \
        int64_t m = n - i0 < OF_STREAM_BLOCK ? n - i0 : OF_STREAM_BLOCK;          \
        for (int64_t i = 0; i < m; i++) { TI a = x[i0 + i], b = y[i0 + i]; buf[i] = (TO)(EXPR); } \
        of_stream_store(o + i0, buf, m * (int64_t)sizeof(TO));                    \
      }                                                                           \
      of_stream_fence();                                                          \
    } else if (s[0] == sizeof(TO) && s[1] == sizeof(TI) && s[2] == sizeof(TI)) {  \
      for (int64_t i = 0; i < n; i++) { TI a = x[i], b = y[i]; o[i] = (TO)(EXPR); } \
    } else if (s[0] == sizeof(TO) && s[1] == sizeof(TI) && s[2] == 0) {           \
      const TI b = *y; (void)b;                                                          \
      for (int64_t i = 0; i < n; i++) { TI a = x[i]; (void)a; o[i] = (TO)(EXPR); } \
    } else if (s[0] == sizeof(TO) && s[1] == 0 && s[2] == sizeof(TI)) {           \
      const TI a = *x; (void)a;                                                            \
      for (int64_t i = 0; i < n; i++) { TI b = y[i]; (void)b; o[i] = (TO)(EXPR); }         \
    } else {                                                                      \
      for (int64_t i = 0; i < n; i++) {                                           \
        TI a = *(const TI *)(p[1] + i * s[1]), b = *(const TI *)(p[2] + i * s[2]); \
        *(TO *)(p[0] + i * s[0]) = (TO)(EXPR);                                    \
      }                                                                           \
    }                                                                             \
  }

#define OF_UNARY_LOOP(NAME, TI, TO, EXPR)                                         \
  static void NAME(char **p, const int64_t *s, int64_t n, void *ctx_) {           \
    of_ew_ctx *ctx = ctx_;                                                        \
    (void)ctx;                                                                    \
    if (s[0] == sizeof(TO) && s[1] == sizeof(TI)) {                               \
      TO *o = (TO *)p[0];                                                         \
      const TI *x = (const TI *)p[1];                                             \
      for (int64_t i = 0; i < n; i++) { TI a = x[i]; (void)a; o[i] = (TO)(EXPR); } \
    } else {                                                                      \
      for (int64_t i = 0; i < n; i++) {                                           \
        TI a = *(const TI *)(p[1] + i * s[1]); (void)a;                           \
        *(TO *)(p[0] + i * s[0]) = (TO)(EXPR);                                    \
      }                                                                           \
    }                                                                             \
  }

/* Run `fn` with the output and inputs converted to `compute` where they
 * differ, writing the result as `result_dt` into `into` or a new tensor of
 * `shape`. Inputs must broadcast to `shape`. */
of_status of_ew_run(const char *op, of_loop_fn fn, of_ew_ctx *ctx, of_tensor **ins, int32_t nin,
                    of_dtype compute, of_dtype kernel_out, of_dtype result_dt,
                    const int64_t *shape, int32_t ndim, of_tensor *into, of_tensor **out);
#endif
