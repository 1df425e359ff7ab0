/* rowk.h -- vectorised row kernels of the memory-bound ops (layer_norm,
 * rms_norm, softmax, log_softmax and their backward passes) for float32 and
 * bfloat16 data computed in float32, dispatched at run time to AVX-512,
 * AVX2 or the baseline (of_cpu_isa, core/tensor/cpu.c) and threaded over
 * rows. Data are contiguous rows x[R][M]; parameters and statistics are
 * float32 / double. See core/ops/rowk.c. */
#ifndef ONEFLOW_ROWK_H
#define ONEFLOW_ROWK_H
#include "../internal.h"

/* float32 and bfloat16 rows (the others take the older, generic kernels) */
static inline bool of_rowk_dtype(of_dtype dt) { return dt == OF_FLOAT32 || dt == OF_BFLOAT16; }

/* y = (x - mean) * rstd * w + b per row (w, b: [M] or NULL); mean[r] and
 * rstd[r] = 1 / sqrt(var + eps) (biased variance) are written. */
void of_rowk_layer_norm(of_dtype dt, const void *x, void *y, int64_t R, int64_t M,
                        const float *w, const float *b, double eps, double *mean, double *rstd);

/* y = x * rstd * w per row (w: [M] or NULL); rstd[r] = 1 / sqrt(mean(x^2) + eps)
 * is written (rms_norm) */
void of_rowk_rms_norm(of_dtype dt, const void *x, void *y, int64_t R, int64_t M, const float *w,
                      double eps, double *rstd);

/* gx (or NULL) = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = g * w;
 * gwt[j] (or NULL) = sum_r g * xhat, gbt[j] (or NULL) = sum_r g.
 * mean NULL: rms_norm's backward (xhat = x * rstd, no mean(gw) term). */
of_status of_rowk_layer_norm_backward(of_dtype dt, const void *x, const void *g, void *gx,
                                      int64_t R, int64_t M, const float *w, const double *mean,
                                      const double *rstd, double *gwt, double *gbt);

/* softmax (lg = 0) or log_softmax (lg = 1) of each row */
void of_rowk_softmax(of_dtype dt, const void *x, void *y, int64_t R, int64_t M, int32_t lg);

/* from the output y and its grad g: softmax gx = y (g - sum(g y)),
 * log_softmax gx = g - exp(y) sum(g) */
void of_rowk_softmax_backward(of_dtype dt, const void *y, const void *g, void *gx, int64_t R,
                              int64_t M, int32_t lg);
/* y = op(x) over n contiguous elements, one thread (of_iter splits the work):
 * op OF_GELU (erf form) or OF_SILU; false (nothing done) for other ops/dtypes */
bool of_rowk_unary(int32_t op, of_dtype dt, const void *x, void *y, int64_t n);
/* y = op(x) over n contiguous float32 elements, one thread, through the
 * vector loops of vmath.c (exp, log, sin, tanh, sigmoid, erf, sqrt, relu, ...
 * on AVX2 / AVX-512) or rowk.c (GELU, SiLU); false (nothing done) where op
 * has none on this CPU. of_vmath_has(op) says which. */
bool of_vmath_has(int32_t op);
bool of_vmath_unary(int32_t op, const float *x, float *y, int64_t n);
/* gx = g * op'(x) over n contiguous elements of dtype dt (threaded): op
 * OF_GELU (erf form) or OF_SILU; false (nothing done) for other ops/dtypes */
bool of_rowk_unary_grad(int32_t op, of_dtype dt, const void *x, const void *g, void *gx,
                        int64_t n);

/* One row, on the calling thread (cross_entropy's own loops split the rows):
 * log(sum(exp(x))) over M elements (-inf when all are -inf) ... */
double of_rowk_logsumexp_row(of_dtype dt, const void *x, int64_t M, const void *next);
/* ... the sum of x (ab 0) or of |x| (ab 1) over n elements, float32 partials
 * of 16 elements each summed in double ... */
double of_rowk_sum_row(of_dtype dt, const void *x, int64_t n, int32_t ab);
/* ... acc[m] += sum over N rows of x[r * rs + m] for m < M (rs in elements) ... */
void of_rowk_sum_cols(of_dtype dt, double *acc, const void *x, int64_t rs, int64_t M, int64_t N);
/* ... and y = a * exp(x - l) - b. */
void of_rowk_exp_affine_row(of_dtype dt, const void *x, void *y, int64_t M, double l, double a,
                            double b);
#endif
