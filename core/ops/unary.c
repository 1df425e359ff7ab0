/* unary.c -- unary elementwise ops, clamp, leaky_relu, where, masked_fill.
 * One table row per op: name, whether integers go to float (exp of an int
 * tensor is float32, as in PyTorch), and kernels per compute dtype. */
#include "elementwise.h"
#include "../device.h"
#include "../autograd.h"
#include "family.h"
#include "rowk.h"

typedef enum { KEEP, TO_FLOAT, TO_BOOL, INT_ONLY } ukind_t;

static inline double gelu(double x) { return 0.5 * x * (1.0 + erf(x * M_SQRT1_2)); }
static inline double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
static inline double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline double softplus(double x) { return x > 20 ? x : log1p(exp(x)); }
static inline double hswish(double x) { return x * fmin(fmax(x + 3, 0), 6) / 6; }
static inline double hsigmoid(double x) { return fmin(fmax(x + 3, 0), 6) / 6; }
/* round half to even, as torch.round */
static inline double round_even(double x) { return nearbyint(x); }
#define SIGN(a) (((a) > 0) - ((a) < 0))

#define FLOAT_UNARY(X, TI, M)                                                        \
  X(NEG, TI, TI, -a) X(ABS, TI, TI, fabs##M(a)) X(EXP, TI, TI, exp##M(a))             \
  X(LOG, TI, TI, log##M(a)) X(SQRT, TI, TI, sqrt##M(a)) X(RSQRT, TI, TI, 1 / sqrt##M(a)) \
  X(SIN, TI, TI, sin##M(a)) X(COS, TI, TI, cos##M(a)) X(TAN, TI, TI, tan##M(a))        \
  X(TANH, TI, TI, tanh##M(a)) X(SIGMOID, TI, TI, sigmoid##M(a))                        \
  X(RELU, TI, TI, a > 0 ? a : 0) X(GELU, TI, TI, gelu(a)) X(GELU_TANH, TI, TI, gelu_tanh(a)) \
  X(SILU, TI, TI, a * sigmoid##M(a)) X(FLOOR, TI, TI, floor##M(a))                     \
  X(CEIL, TI, TI, ceil##M(a)) X(ROUND, TI, TI, round_even(a)) X(TRUNC, TI, TI, trunc##M(a)) \
  X(SIGN, TI, TI, SIGN(a)) X(RECIPROCAL, TI, TI, 1 / a) X(SQUARE, TI, TI, a * a)      \
  X(LOG2, TI, TI, log2##M(a)) X(LOG10, TI, TI, log10##M(a)) X(LOG1P, TI, TI, log1p##M(a)) \
  X(EXPM1, TI, TI, expm1##M(a)) X(ASIN, TI, TI, asin##M(a)) X(ACOS, TI, TI, acos##M(a)) \
  X(ATAN, TI, TI, atan##M(a)) X(SINH, TI, TI, sinh##M(a)) X(COSH, TI, TI, cosh##M(a))  \
  X(ERF, TI, TI, erf##M(a)) X(ERFC, TI, TI, erfc##M(a)) X(SOFTPLUS, TI, TI, softplus(a)) \
  X(MISH, TI, TI, a * tanh(softplus(a))) X(HARDSWISH, TI, TI, hswish(a))               \
  X(HARDSIGMOID, TI, TI, hsigmoid(a)) X(LOGICAL_NOT, TI, bool, !a)                     \
  X(ISNAN, TI, bool, a != a) X(ISINF, TI, bool, isinf(a)) X(ISFINITE, TI, bool, isfinite(a))

/* integer rows: ops that keep the dtype; TO_FLOAT ops arrive as float */
/* abs and sign written without `a < 0`, which is always false (and warned
 * about) for the unsigned types */
#define INT_UNARY(X, TI)                                                              \
  X(NEG, TI, TI, -a) X(ABS, TI, TI, a > 0 ? a : -a) X(RELU, TI, TI, a > 0 ? a : 0)      \
  X(FLOOR, TI, TI, a) X(CEIL, TI, TI, a) X(ROUND, TI, TI, a) X(TRUNC, TI, TI, a)         \
  X(SIGN, TI, TI, a > 0 ? 1 : (a == 0 ? 0 : -1)) X(SQUARE, TI, TI, a * a)                \
  X(LOGICAL_NOT, TI, bool, !a)                                                          \
  X(BITWISE_NOT, TI, TI, ~a) X(ISNAN, TI, bool, 0) X(ISINF, TI, bool, 0)                \
  X(ISFINITE, TI, bool, 1)
#define BOOL_UNARY(X, TI)                                                             \
  X(ABS, TI, TI, a) X(RELU, TI, TI, a) X(LOGICAL_NOT, TI, bool, !a) X(BITWISE_NOT, TI, TI, !a) \
  X(ISNAN, TI, bool, 0) X(ISINF, TI, bool, 0) X(ISFINITE, TI, bool, 1)

#define DEF_LOOP(OP, TI, TO, EXPR) OF_UNARY_LOOP(un_##OP##_##TI, TI, TO, EXPR)
FLOAT_UNARY(DEF_LOOP, float, f)
FLOAT_UNARY(DEF_LOOP, double, )
INT_UNARY(DEF_LOOP, uint8_t)
INT_UNARY(DEF_LOOP, int8_t)
INT_UNARY(DEF_LOOP, int32_t)
INT_UNARY(DEF_LOOP, int64_t)
INT_UNARY(DEF_LOOP, int16_t)
INT_UNARY(DEF_LOOP, uint16_t)
INT_UNARY(DEF_LOOP, uint32_t)
INT_UNARY(DEF_LOOP, uint64_t)
BOOL_UNARY(DEF_LOOP, bool)

#define sigmoidf_ sigmoidf
typedef struct {
  const char *name;
  ukind_t kind;
  of_loop_fn loop[OF_NUM_DTYPES];
} unary_def;

#define DT_bool OF_BOOL
#define DT__Bool OF_BOOL
#define DT_uint8_t OF_UINT8
#define DT_int8_t OF_INT8
#define DT_int32_t OF_INT32
#define DT_int64_t OF_INT64
#define DT_float OF_FLOAT32
#define DT_double OF_FLOAT64
#define DT_int16_t OF_INT16
#define DT_uint16_t OF_UINT16
#define DT_uint32_t OF_UINT32
#define DT_uint64_t OF_UINT64
#define SET(OP, TI, TO, EXPR) [OF_##OP].loop[DT_##TI] = un_##OP##_##TI,
#define SETF(OP, TI, TO, EXPR) SET(OP, TI, TO, EXPR)
/* One line per unary op: enum member (oneflow.h), name, result dtype rule,
 * autograd node name (NULL: not differentiable). The kernels are the
 * FLOAT_UNARY/INT_UNARY lines above, the derivatives unary_grad_expr. */
#define UNARY_OPS(X) \
  X(NEG, "neg", KEEP, "NegBackward") \
  X(ABS, "abs", KEEP, "AbsBackward") \
  X(EXP, "exp", TO_FLOAT, "ExpBackward") \
  X(LOG, "log", TO_FLOAT, "LogBackward") \
  X(SQRT, "sqrt", TO_FLOAT, "SqrtBackward") \
  X(RSQRT, "rsqrt", TO_FLOAT, "RsqrtBackward") \
  X(SIN, "sin", TO_FLOAT, "SinBackward") \
  X(COS, "cos", TO_FLOAT, "CosBackward") \
  X(TAN, "tan", TO_FLOAT, "TanBackward") \
  X(TANH, "tanh", TO_FLOAT, "TanhBackward") \
  X(SIGMOID, "sigmoid", TO_FLOAT, "SigmoidBackward") \
  X(RELU, "relu", KEEP, "ReluBackward") \
  X(GELU, "gelu", TO_FLOAT, "GeluBackward") \
  X(GELU_TANH, "gelu_tanh", TO_FLOAT, "GeluBackward") \
  X(SILU, "silu", TO_FLOAT, "SiluBackward") \
  X(FLOOR, "floor", KEEP, "FloorBackward") \
  X(CEIL, "ceil", KEEP, "CeilBackward") \
  X(ROUND, "round", KEEP, "RoundBackward") \
  X(TRUNC, "trunc", KEEP, "TruncBackward") \
  X(SIGN, "sign", KEEP, "SignBackward") \
  X(RECIPROCAL, "reciprocal", TO_FLOAT, "ReciprocalBackward") \
  X(SQUARE, "square", KEEP, "SquareBackward") \
  X(LOG2, "log2", TO_FLOAT, "Log2Backward") \
  X(LOG10, "log10", TO_FLOAT, "Log10Backward") \
  X(LOG1P, "log1p", TO_FLOAT, "Log1pBackward") \
  X(EXPM1, "expm1", TO_FLOAT, "Expm1Backward") \
  X(ASIN, "asin", TO_FLOAT, "AsinBackward") \
  X(ACOS, "acos", TO_FLOAT, "AcosBackward") \
  X(ATAN, "atan", TO_FLOAT, "AtanBackward") \
  X(SINH, "sinh", TO_FLOAT, "SinhBackward") \
  X(COSH, "cosh", TO_FLOAT, "CoshBackward") \
  X(ERF, "erf", TO_FLOAT, "ErfBackward") \
  X(ERFC, "erfc", TO_FLOAT, "ErfcBackward") \
  X(SOFTPLUS, "softplus", TO_FLOAT, "SoftplusBackward") \
  X(MISH, "mish", TO_FLOAT, "MishBackward") \
  X(HARDSWISH, "hardswish", TO_FLOAT, "HardswishBackward") \
  X(HARDSIGMOID, "hardsigmoid", TO_FLOAT, "HardsigmoidBackward") \
  X(LOGICAL_NOT, "logical_not", TO_BOOL, NULL) \
  X(BITWISE_NOT, "bitwise_not", INT_ONLY, NULL) \
  X(ISNAN, "isnan", TO_BOOL, NULL) \
  X(ISINF, "isinf", TO_BOOL, NULL) \
  X(ISFINITE, "isfinite", TO_BOOL, NULL)

#define DEF(OP, NAME, KIND, GRAD) [OF_##OP].name = NAME, [OF_##OP].kind = KIND,

static const unary_def unary_ops[OF_NUM_UNARY] = {
    UNARY_OPS(DEF)
    FLOAT_UNARY(SETF, float, f) FLOAT_UNARY(SETF, double, )
    INT_UNARY(SET, uint8_t) INT_UNARY(SET, int8_t) INT_UNARY(SET, int32_t)
    INT_UNARY(SET, int64_t) INT_UNARY(SET, int16_t) INT_UNARY(SET, uint16_t)
    INT_UNARY(SET, uint32_t) INT_UNARY(SET, uint64_t) BOOL_UNARY(SET, bool)
};
#define COUNT_ONE(...) +1
_Static_assert(0 UNARY_OPS(COUNT_ONE) == OF_NUM_UNARY, "UNARY_OPS and oneflow.h's of_unary_op differ");

const char *of_unary_name(of_unary_op op) {
  return op >= 0 && op < OF_NUM_UNARY ? unary_ops[op].name : "invalid";
}

/* Float32 ops with vector loops: GELU and SiLU (rowk.c) and those of
 * vmath.c (exp, log, tanh, sigmoid, sqrt, relu, ...), dispatched at run time
 * (libm's erf, expf, tanhf are scalar, and these loops are built for the
 * baseline). Contiguous runs go straight through; strided runs are gathered
 * into a block, computed by the same loop and scattered, so a value's result
 * does not depend on the layout. Where the CPU or the build has no vector
 * loop for the op, the generic loop runs. */
static void un_fast_float(char **p, const int64_t *s, int64_t n, void *ctx_) {
  of_ew_ctx *ctx = ctx_;
  if (s[0] == sizeof(float) && s[1] == sizeof(float)) {
    const float *x = (const float *)p[1];
    float *y = (float *)p[0];
    if (n * (int64_t)sizeof(float) >= of_stream_min_bytes() && of_vmath_has(ctx->op)) {
      /* too big for the cache: written around it, as OF_BINARY_LOOP does */
      float buf[OF_STREAM_BLOCK];
      for (int64_t i0 = 0; i0 < n; i0 += OF_STREAM_BLOCK) {
        int64_t m = n - i0 < OF_STREAM_BLOCK ? n - i0 : OF_STREAM_BLOCK;
        of_vmath_unary(ctx->op, x + i0, buf, m);
        of_stream_store(y + i0, buf, m * (int64_t)sizeof(float));
      }
      of_stream_fence();
      return;
    }
    if (of_vmath_unary(ctx->op, x, y, n)) return;
  } else if (of_vmath_has(ctx->op)) {
    float buf[256];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
      int64_t k = n - i0 < 256 ? n - i0 : 256;
      for (int64_t i = 0; i < k; i++) memcpy(&buf[i], p[1] + (i0 + i) * s[1], sizeof(float));
      of_vmath_unary(ctx->op, buf, buf, k);
      for (int64_t i = 0; i < k; i++) memcpy(p[0] + (i0 + i) * s[0], &buf[i], sizeof(float));
    }
    return;
  }
  unary_ops[ctx->op].loop[OF_FLOAT32](p, s, n, ctx_);
}

/* The result's dtype, the compute dtype, the kernel and its output dtype,
 * from the input's dtype: what unary_compute runs, and what a loaded graph's
 * node is checked with before it runs (infer_unary). */
typedef struct {
  of_dtype result, compute, kernel_out;
  of_loop_fn fn;
} unary_plan;

of_loop_fn of_unary_kernel(int32_t op, of_dtype dt);   /* below; graph.h declares it too */

static of_status unary_plan_for(of_unary_op op, of_dtype dt, const int64_t *shape, int32_t ndim,
                                unary_plan *p) {
  const unary_def *def = &unary_ops[op];
  of_dtype result = dt;
  if (def->kind == TO_FLOAT && !of_dtype_is_floating(result)) result = OF_FLOAT32;
  of_dtype compute = of_compute_dtype(result);
  if (def->kind == TO_BOOL) {
    compute = of_compute_dtype(dt);
    result = OF_BOOL;
  }
  if (op == OF_SIGN && dt == OF_BOOL) compute = result = OF_BOOL;
  of_loop_fn fn = of_unary_kernel(op, compute);
  if (op == OF_SIGN && compute == OF_BOOL) fn = unary_ops[OF_ABS].loop[OF_BOOL];
  char sb[96];
  if (op == OF_NEG && dt == OF_BOOL)
    return of_fail(OF_ERR_DTYPE, "neg: negation of a bool tensor is not supported; use "
                   "logical_not (shape %s)", of_shape_str(shape, ndim, sb, 96));
  if (!fn)
    return of_fail(OF_ERR_DTYPE, "%s: not supported for dtype %s (shape %s)", def->name,
                   of_dtype_name(dt), of_shape_str(shape, ndim, sb, 96));
  p->result = result;
  p->compute = compute;
  p->kernel_out = (def->kind == TO_BOOL || op == OF_LOGICAL_NOT) ? OF_BOOL : compute;
  p->fn = fn;
  return OF_OK;
}

static of_status unary_compute(of_unary_op op, of_tensor *x, of_tensor *into, of_tensor **out) {
  unary_plan p = {.fn = NULL};
  OF_CHECK(unary_plan_for(op, x->dtype, x->shape, x->ndim, &p));
  of_ew_ctx ctx = {.kind = OF_EWK_UNARY,
                   .op = op == OF_SIGN && p.compute == OF_BOOL ? OF_ABS : op};
  return of_ew_run(unary_ops[op].name, p.fn, &ctx, &x, 1, p.compute, p.kernel_out, p.result,
                   x->shape, x->ndim, into, out);
}

/* ---- parameterised ---- */
/* min(max(a, lo), hi) as torch computes it: with lo > hi everything is hi */
#define CLAMP_LO(v) (ctx->p0 == ctx->p0 && (v) < ctx->p0 ? ctx->p0 : (v))
#define CLAMP_EXPR (ctx->p1 == ctx->p1 && CLAMP_LO(a) > ctx->p1 ? ctx->p1 : CLAMP_LO(a))
#define PARAM_OPS(X, TI)                                            \
  X(clamp, TI, TI, a != a ? a : CLAMP_EXPR)                         \
  X(leaky, TI, TI, a > 0 ? a : (TI)(a * ctx->p0))
#define PARAM_INT_OPS(X, TI) X(clamp, TI, TI, CLAMP_EXPR)
#define DEF_PLOOP(OP, TI, TO, EXPR) OF_UNARY_LOOP(p_##OP##_##TI, TI, TO, EXPR)
PARAM_OPS(DEF_PLOOP, float)
PARAM_OPS(DEF_PLOOP, double)
PARAM_INT_OPS(DEF_PLOOP, uint8_t)
PARAM_INT_OPS(DEF_PLOOP, int8_t)
PARAM_INT_OPS(DEF_PLOOP, int32_t)
PARAM_INT_OPS(DEF_PLOOP, int64_t)
PARAM_INT_OPS(DEF_PLOOP, int16_t)
PARAM_INT_OPS(DEF_PLOOP, uint16_t)
PARAM_INT_OPS(DEF_PLOOP, uint32_t)
PARAM_INT_OPS(DEF_PLOOP, uint64_t)

/* float32 clamp, contiguous runs: the bounds as floats (absent ones NaN, so
 * that their compare is false) and no double compares, so that it
 * vectorises (vmaxps/vminps keep a NaN input: `a < lo ? lo : a` returns a
 * when a is NaN). Bit for bit the generic loop's result: rounding the bound
 * to float is monotone, so max(a, lo) rounds as max(a, (float)lo) for a
 * float a. MobileNetV2's ReLU6 at [8,96,112,112]: 45% of its forward's CPU
 * time went to the generic loop. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void clamp_run_float(float *restrict o, const float *restrict x, int64_t n, float lo,
                            float hi) {
  for (int64_t i = 0; i < n; i++) {
    float a = x[i];
    a = a < lo ? lo : a;
    o[i] = a > hi ? hi : a;
  }
}

/* The in-place case (o == x), which restrict above does not allow. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void clamp_inplace_float(float *o, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; i++) {
    float a = o[i];
    a = a < lo ? lo : a;
    o[i] = a > hi ? hi : a;
  }
}

static void p_clamp_fast_float(char **p, const int64_t *s, int64_t n, void *ctx_) {
  of_ew_ctx *ctx = ctx_;
  if (s[0] != sizeof(float) || s[1] != sizeof(float)) {
    p_clamp_float(p, s, n, ctx_);
    return;
  }
  float lo = (float)ctx->p0, hi = (float)ctx->p1; /* NaN when absent */
  float *o = (float *)p[0];
  const float *x = (const float *)p[1];
  if ((const float *)o == x) clamp_inplace_float(o, n, lo, hi);
  else if (o + n <= x || x + n <= o) clamp_run_float(o, x, n, lo, hi);
  else p_clamp_float(p, s, n, ctx_);
}

static const of_loop_fn clamp_loops[OF_NUM_DTYPES] = {
    [OF_UINT8] = p_clamp_uint8_t, [OF_INT8] = p_clamp_int8_t, [OF_INT32] = p_clamp_int32_t,
    [OF_INT64] = p_clamp_int64_t, [OF_FLOAT32] = p_clamp_fast_float, [OF_FLOAT64] = p_clamp_double,
    [OF_INT16] = p_clamp_int16_t, [OF_UINT16] = p_clamp_uint16_t, [OF_UINT32] = p_clamp_uint32_t,
    [OF_UINT64] = p_clamp_uint64_t};

/* clamp's result and compute dtypes from the input's and the bounds (the
 * body and infer_clamp) */
static of_status clamp_plan(of_dtype dt, const int64_t *shape, int32_t ndim, double lo, double hi,
                            int32_t has_lo, int32_t has_hi, of_dtype *result, of_dtype *compute) {
  char b[96];
  if (!has_lo && !has_hi)
    return of_fail(OF_ERR_ARG, "clamp: at least one of min and max must be given");
  *result = dt;
  /* a fractional bound on an int tensor makes the result float, as in torch */
  if (!of_dtype_is_floating(dt) && ((has_lo && lo != floor(lo)) || (has_hi && hi != floor(hi))))
    *result = OF_FLOAT32;
  *compute = of_compute_dtype(*result);
  if (!clamp_loops[*compute])
    return of_fail(OF_ERR_DTYPE, "clamp: not supported for dtype %s (shape %s)", of_dtype_name(dt),
                   of_shape_str(shape, ndim, b, 96));
  /* a negative bound does not convert to an unsigned element */
  if (of_dtype_is_unsigned(*compute) && ((has_lo && lo < 0) || (has_hi && hi < 0)))
    return of_fail(OF_ERR_ARG, "clamp: negative bound (min %g, max %g) for dtype %s (shape %s)",
                   has_lo ? lo : NAN, has_hi ? hi : NAN, of_dtype_name(dt), of_shape_str(shape, ndim, b, 96));
  return OF_OK;
}

static of_status clamp_compute(of_tensor *x, double lo, double hi, int32_t has_lo, int32_t has_hi,
                   of_tensor *into, of_tensor **out) {
  of_dtype result = 0, compute = 0;
  OF_CHECK(clamp_plan(x->dtype, x->shape, x->ndim, lo, hi, has_lo, has_hi, &result, &compute));
  of_ew_ctx ctx = {.p0 = has_lo ? lo : NAN, .p1 = has_hi ? hi : NAN, .kind = OF_EWK_CLAMP};
  return of_ew_run("clamp", clamp_loops[compute], &ctx, &x, 1, compute, compute, result,
                   x->shape, x->ndim, into, out);
}

static of_status leaky_check(of_dtype dt, const int64_t *shape, int32_t ndim) {
  char b[96];
  if (!of_dtype_is_floating(dt))
    return of_fail(OF_ERR_DTYPE, "leaky_relu: not supported for dtype %s (shape %s)", of_dtype_name(dt),
                   of_shape_str(shape, ndim, b, 96));
  return OF_OK;
}
static of_status leaky_compute(of_tensor *x, double slope, of_tensor *into, of_tensor **out) {
  OF_CHECK(leaky_check(x->dtype, x->shape, x->ndim));
  of_dtype compute = of_compute_dtype(x->dtype);
  of_ew_ctx ctx = {.p0 = slope, .kind = OF_EWK_LEAKY};
  return of_ew_run("leaky_relu", compute == OF_FLOAT64 ? p_leaky_double : p_leaky_float, &ctx, &x,
                   1, compute, compute, x->dtype, x->shape, x->ndim, into, out);
}

/* ---- where / masked_fill: three operands ---- */
#define WHERE_LOOP(T)                                                           \
  static void where_##T(char **p, const int64_t *s, int64_t n, void *ctx) {     \
    (void)ctx;                                                                  \
    for (int64_t i = 0; i < n; i++)                                             \
      *(T *)(p[0] + i * s[0]) = *(const bool *)(p[1] + i * s[1])                \
                                    ? *(const T *)(p[2] + i * s[2])             \
                                    : *(const T *)(p[3] + i * s[3]);            \
  }
WHERE_LOOP(uint8_t)
WHERE_LOOP(uint16_t)
WHERE_LOOP(uint32_t)
WHERE_LOOP(uint64_t)

static of_loop_fn where_loop(of_dtype dt) {
  switch (of_dtype_size(dt)) {
    case 1: return where_uint8_t;
    case 2: return where_uint16_t;
    case 4: return where_uint32_t;
    default: return where_uint64_t;
  }
}

/* where on a device: operands converted (and CPU scalars moved) there */
static of_status device_where(const of_device_ops *dops, of_device dev, of_tensor *cond,
                              of_tensor *a, of_tensor *b, of_dtype dt, const int64_t *shape,
                              int32_t nd, of_tensor *into, of_tensor **out) {
  of_tensor *src[3] = {cond, a, b}, *conv[3] = {NULL, NULL, NULL}, *res = NULL;
  of_dtype want[3] = {OF_BOOL, dt, dt};
  of_status st = OF_OK;
  for (int i = 0; i < 3 && st == OF_OK; i++) {
    of_tensor *t = NULL;
    st = of_cast_data(src[i], want[i], &t);
    if (st == OF_OK && of_dev(t) != dev) {
      st = of_to_device(t, dev, 0, &conv[i]);
      of_tensor_release(t);
    } else {
      conv[i] = t;
    }
  }
  if (st == OF_OK) st = of_prepare_out_on("where", into, shape, nd, dt, dev, &res);
  if (st == OF_OK) st = dops->where(res, conv[0], conv[1], conv[2]);
  for (int i = 0; i < 3; i++) of_tensor_release(conv[i]);
  if (st != OF_OK) {
    of_tensor_release(res);
    return st;
  }
  of_bump_version(res);
  *out = res;
  return OF_OK;
}

/* where's result: the three shapes broadcast, a's and b's dtypes promoted
 * (the body and infer_where) */
static of_status where_plan(const int64_t *cs, int32_t cn, const int64_t *as, int32_t an, of_dtype adt,
                            const int64_t *bs, int32_t bn, of_dtype bdt, int64_t *s2, int32_t *n2,
                            of_dtype *dt) {
  int64_t s1[OF_MAX_DIMS];
  int32_t n1;
  OF_CHECK(of_broadcast_shapes("where", cs, cn, as, an, s1, &n1));
  OF_CHECK(of_broadcast_shapes("where", s1, n1, bs, bn, s2, n2));
  return of_promote_for("where", adt, bdt, dt);
}
static of_status where_compute(of_tensor *cond, of_tensor *a, of_tensor *b, of_tensor **out) {
  int64_t s2[OF_MAX_DIMS];
  int32_t n2;
  of_dtype dt;
  OF_CHECK(where_plan(cond->shape, cond->ndim, a->shape, a->ndim, a->dtype, b->shape, b->ndim,
                      b->dtype, s2, &n2, &dt));
  OF_ROUTE("where", dev, dops, where, cond, a, b);
  if (dops) return device_where(dops, dev, cond, a, b, dt, s2, n2, NULL, out);
  of_tensor *c;
  OF_CHECK(of_cast_data(cond, OF_BOOL, &c));
  of_tensor *ins[3] = {c, a, b}, *conv[3] = {c, NULL, NULL};
  of_status st = of_cast_data(a, dt, &conv[1]);
  if (st == OF_OK) st = of_cast_data(b, dt, &conv[2]);
  (void)ins;
  if (st == OF_OK) {
    of_tensor *res;
    st = of_tensor_new(s2, n2, dt, OF_CPU, &res);
    if (st == OF_OK) {
      of_tensor *ops[4] = {res, conv[0], conv[1], conv[2]};
      of_iter it;
      of_iter_init(&it, ops, 4, s2, n2);
      of_iter_run(&it, where_loop(dt), NULL, true);
      *out = res;
    }
  }
  for (int i = 0; i < 3; i++) of_tensor_release(conv[i]);
  return st;
}

/* masked_fill's checks: a bool mask that broadcasts to the input (the
 * body and infer_masked_fill; the result is the input's shape and dtype) */
static of_status masked_fill_check(const int64_t *xs, int32_t xn, const int64_t *ms, int32_t mn,
                                   of_dtype mdt) {
  char b[96], c[96];
  if (mdt != OF_BOOL)
    return of_fail(OF_ERR_DTYPE, "masked_fill: mask must be bool, got %s (shape %s)",
                   of_dtype_name(mdt), of_shape_str(ms, mn, c, 96));
  int64_t shape[OF_MAX_DIMS];
  int32_t nd;
  OF_CHECK(of_broadcast_shapes("masked_fill", xs, xn, ms, mn, shape, &nd));
  if (nd != xn || of_shape_numel(shape, nd) != of_shape_numel(xs, xn))
    return of_fail(OF_ERR_SHAPE, "masked_fill: mask %s must broadcast to the input %s",
                   of_shape_str(ms, mn, c, 96), of_shape_str(xs, xn, b, 96));
  return OF_OK;
}
static of_status masked_fill_compute(of_tensor *x, of_tensor *mask, double value, of_tensor *into,
                         of_tensor **out) {
  OF_CHECK(masked_fill_check(x->shape, x->ndim, mask->shape, mask->ndim, mask->dtype));
  of_tensor *v, *res;
  OF_ROUTE("masked_fill", dev, dops, where, x, mask, into);
  OF_CHECK(of_full(NULL, 0, value, x->dtype, dev, &v));
  if (dops) {
    of_status st = device_where(dops, dev, mask, v, x, x->dtype, x->shape, x->ndim, into, out);
    of_tensor_release(v);
    return st;
  }
  of_status st = of_prepare_out("masked_fill", into, x->shape, x->ndim, x->dtype, &res);
  if (st == OF_OK) {
    of_tensor *ops[4] = {res, mask, v, x};
    of_iter it;
    of_iter_init(&it, ops, 4, x->shape, x->ndim);
    of_iter_run(&it, where_loop(x->dtype), NULL, true);
    of_bump_version(res);
    *out = res;
  }
  of_tensor_release(v);
  return st;
}

/* ---- autograd ----
 * Rules are written with ops (through of_scope) so that create_graph gives
 * double backward. x is saved in slot 0, the output in slot 1. */

#define S_X of_s_saved(&s, n, 0)
#define S_Y of_s_saved(&s, n, 1)
#define MUL(a, b) of_s_bin(&s, OF_MUL, a, b)
#define DIV(a, b) of_s_bin(&s, OF_DIV, a, b)
#define ADD(a, b) of_s_bin(&s, OF_ADD, a, b)
#define MULS(a, v) of_s_bins(&s, OF_MUL, a, v)
#define ADDS(a, v) of_s_bins(&s, OF_ADD, a, v)
#define RSUB(v, a) of_s_sbin(&s, OF_SUB, v, a)
#define UN(op, a) of_s_unary(&s, OF_##op, a)
#define CAST(a) of_s_cast(&s, a, g->dtype)

static of_tensor *of_s_cast(of_scope *sc, of_tensor *x, of_dtype dt) {
  if (sc->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_to_dtype(x, dt, &r);
  return of_s_keep(sc, st, r);
}
static of_tensor *of_s_cmps(of_scope *sc, of_binary_op op, of_tensor *x, double v) {
  return of_s_bins(sc, op, x, v);
}

/* Whether op's derivative below is written in y (S_Y) alone; all others
 * read x alone (or nothing). Keep the two in step: the other value is not
 * saved. */
static bool unary_grad_uses_y(of_unary_op op) {
  switch (op) {
    case OF_EXP: case OF_SQRT: case OF_RSQRT: case OF_TAN: case OF_TANH: case OF_SIGMOID:
    case OF_RELU: case OF_RECIPROCAL: case OF_EXPM1: return true;
    default: return false;
  }
}

/* d/dx of each op, as an expression in x (S_X) and y (S_Y), times g */
static of_tensor *unary_grad_expr(of_scope *sp, of_unary_op op, of_node *n, of_tensor *g) {
  of_scope s = *sp;   /* macros use `s`; copied back below */
  of_tensor *r = NULL, *x, *y, *sg, *t;
  const double inv_sqrt_pi2 = 1.1283791670955126;   /* 2 / sqrt(pi) */
  switch (op) {
    case OF_NEG: r = UN(NEG, g); break;
    case OF_ABS: r = MUL(g, UN(SIGN, S_X)); break;
    case OF_EXP: r = MUL(g, S_Y); break;
    case OF_LOG: r = DIV(g, S_X); break;
    case OF_SQRT: r = DIV(g, MULS(S_Y, 2)); break;
    case OF_RSQRT: y = S_Y; r = MULS(MUL(g, MUL(y, MUL(y, y))), -0.5); break;
    case OF_SIN: r = MUL(g, UN(COS, S_X)); break;
    case OF_COS: r = UN(NEG, MUL(g, UN(SIN, S_X))); break;
    case OF_TAN: y = S_Y; r = MUL(g, ADDS(MUL(y, y), 1)); break;
    case OF_TANH: y = S_Y; r = MUL(g, RSUB(1, MUL(y, y))); break;
    case OF_SIGMOID: y = S_Y; r = MUL(g, MUL(y, RSUB(1, y))); break;
    case OF_RELU: r = MUL(g, CAST(of_s_cmps(&s, OF_GT, S_Y, 0))); break;
    case OF_GELU:
      x = S_X;
      t = MULS(ADDS(UN(ERF, MULS(x, M_SQRT1_2)), 1), 0.5);                     /* cdf */
      sg = MULS(UN(EXP, MULS(MUL(x, x), -0.5)), 0.3989422804014327);       /* pdf */
      r = MUL(g, ADD(t, MUL(x, sg)));
      break;
    case OF_GELU_TANH: {
      const double k = 0.7978845608028654, c = 0.044715;
      x = S_X;
      t = UN(TANH, MULS(ADD(x, MULS(MUL(x, MUL(x, x)), c)), k));
      sg = MUL(MULS(MUL(x, RSUB(1, MUL(t, t))), 0.5 * k), ADDS(MULS(MUL(x, x), 3 * c), 1));
      r = MUL(g, ADD(MULS(ADDS(t, 1), 0.5), sg));
      break;
    }
    case OF_SILU:
      x = S_X;
      sg = UN(SIGMOID, x);
      r = MUL(g, MUL(sg, ADDS(MUL(x, RSUB(1, sg)), 1)));
      break;
    case OF_RECIPROCAL: y = S_Y; r = UN(NEG, MUL(g, MUL(y, y))); break;
    case OF_SQUARE: r = MUL(g, MULS(S_X, 2)); break;
    case OF_LOG2: r = DIV(g, MULS(S_X, M_LN2)); break;
    case OF_LOG10: r = DIV(g, MULS(S_X, M_LN10)); break;
    case OF_LOG1P: r = DIV(g, ADDS(S_X, 1)); break;
    case OF_EXPM1: r = MUL(g, ADDS(S_Y, 1)); break;
    case OF_ASIN: x = S_X; r = DIV(g, UN(SQRT, RSUB(1, MUL(x, x)))); break;
    case OF_ACOS: x = S_X; r = UN(NEG, DIV(g, UN(SQRT, RSUB(1, MUL(x, x))))); break;
    case OF_ATAN: x = S_X; r = DIV(g, ADDS(MUL(x, x), 1)); break;
    case OF_SINH: r = MUL(g, UN(COSH, S_X)); break;
    case OF_COSH: r = MUL(g, UN(SINH, S_X)); break;
    case OF_ERF: x = S_X; r = MUL(g, MULS(UN(EXP, UN(NEG, MUL(x, x))), inv_sqrt_pi2)); break;
    case OF_ERFC: x = S_X; r = MUL(g, MULS(UN(EXP, UN(NEG, MUL(x, x))), -inv_sqrt_pi2)); break;
    case OF_SOFTPLUS: r = MUL(g, UN(SIGMOID, S_X)); break;
    case OF_MISH:
      x = S_X;
      t = UN(TANH, UN(SOFTPLUS, x));
      r = MUL(g, ADD(t, MUL(MUL(x, UN(SIGMOID, x)), RSUB(1, MUL(t, t)))));
      break;
    case OF_HARDSWISH: {   /* 0 below -3, 1 above 3, (2x + 3) / 6 between */
      x = S_X;
      of_tensor *mid = CAST(of_s_bin(&s, OF_LOGICAL_AND, of_s_cmps(&s, OF_GT, x, -3),
                                     of_s_cmps(&s, OF_LT, x, 3)));
      of_tensor *hi = CAST(of_s_cmps(&s, OF_GE, x, 3));
      r = MUL(g, ADD(MUL(mid, MULS(ADDS(MULS(x, 2), 3), 1.0 / 6)), hi));
      break;
    }
    case OF_HARDSIGMOID:
      x = S_X;
      r = MUL(g, MULS(CAST(of_s_bin(&s, OF_LOGICAL_AND, of_s_cmps(&s, OF_GT, x, -3),
                                    of_s_cmps(&s, OF_LT, x, 3))), 1.0 / 6));
      break;
    default:   /* floor, ceil, round, trunc, sign: zero almost everywhere */
      r = NULL;
      break;
  }
  *sp = s;
  return r;
}

/* ReLU's grad when nothing records it (no create_graph, not tracing): one
 * pass, g where y > 0 else 0 (PyTorch's threshold_backward), instead of a
 * compare, a cast and a product with their temporaries. Written into g
 * itself when the engine holds the only reference to it. *done stays false
 * where the expression rule must run (other dtypes, strided operands). */
/* bits of g where y > 0, else +0: branch-free, so the loop vectorizes even
 * when it writes into g itself (an aliasing check sent it to a branchy
 * scalar loop) */
#define RELU_GRAD_LOOP(T, U)                                                         \
  do {                                                                               \
    const T *yp = (const T *)of_ptr(y), *gp = (const T *)of_ptr(g);                  \
    T *rp = (T *)of_ptr(r);                                                          \
    const int64_t nb = (nel + 4095) / 4096;                                          \
    _Pragma("omp parallel for schedule(static) if (nel > 4 * OF_PARALLEL_GRAIN) num_threads(of_threads())")   \
    for (int64_t blk = 0; blk < nb; blk++) {                                         \
      const int64_t hi = blk * 4096 + 4096 < nel ? blk * 4096 + 4096 : nel;          \
      for (int64_t i = blk * 4096; i < hi; i++) {                                    \
        U bits;                                                                      \
        memcpy(&bits, gp + i, sizeof bits);                                          \
        bits &= (U)0 - (U)(yp[i] > 0);                                               \
        memcpy(rp + i, &bits, sizeof bits);                                          \
      }                                                                              \
    }                                                                                \
  } while (0)

static of_status relu_grad_direct(of_node *n, of_tensor *g, of_tensor **out, bool *done) {
  *done = false;
  if (!n->direct || of_is_grad_enabled()) return OF_OK;
  if ((g->dtype != OF_FLOAT32 && g->dtype != OF_FLOAT64) || !of_tensor_is_contiguous(g))
    return OF_OK;
  of_tensor *y;
  OF_CHECK(of_node_saved(n, 1, &y));
  bool fits = y->dtype == g->dtype && y->ndim == g->ndim && of_tensor_is_contiguous(y);
  for (int32_t d = 0; fits && d < g->ndim; d++) fits = y->shape[d] == g->shape[d];
  if (!fits) {
    of_tensor_release(y);
    return OF_OK;
  }
  of_tensor *r;
  bool own = g->refcount == 1 && g->storage->refcount == 1 && !g->view_base &&
             !g->requires_grad && g->storage != y->storage;
  if (own) {
    of_tensor_retain(g);
    r = g;
  } else {
    of_status st = of_tensor_new(g->shape, g->ndim, g->dtype, OF_CPU, &r);
    if (st != OF_OK) {
      of_tensor_release(y);
      return st;
    }
  }
  int64_t nel = g->numel;
  if (g->dtype == OF_FLOAT32) RELU_GRAD_LOOP(float, uint32_t);
  else RELU_GRAD_LOOP(double, uint64_t);
  if (own) of_bump_version(r);
  of_tensor_release(y);
  *out = r;
  *done = true;
  return OF_OK;
}

/* GELU / SiLU backward on contiguous float32 or bfloat16 CPU tensors without
 * create_graph (grad mode off): one fused pass (rowk.c) instead of the
 * composed derivative's ten. While nn.Graph traces, the fused result makes
 * the rule opaque, so the graph replays this kernel and matches eager mode. */
static of_status act_grad_direct(of_node *n, of_unary_op op, of_tensor *g, of_tensor **out,
                                 bool *done) {
  *done = false;
  if (of_is_grad_enabled() || !of_rowk_dtype(g->dtype) || of_dev(g) != OF_CPU ||
      !of_tensor_is_contiguous(g))
    return OF_OK;
  of_tensor *x;
  OF_CHECK(of_node_saved(n, 0, &x));
  bool fits = x->dtype == g->dtype && x->ndim == g->ndim && of_dev(x) == OF_CPU &&
              of_tensor_is_contiguous(x);
  for (int32_t d = 0; fits && d < g->ndim; d++) fits = x->shape[d] == g->shape[d];
  of_tensor *r = NULL;
  of_status st = fits ? of_tensor_new(g->shape, g->ndim, g->dtype, OF_CPU, &r) : OF_OK;
  if (st == OF_OK && r) {
    *done = of_rowk_unary_grad(op, g->dtype, of_tensor_data(x), of_tensor_data(g),
                               of_tensor_data(r), g->numel);
    if (*done) *out = r;
    else of_tensor_release(r);
  }
  of_tensor_release(x);
  return st;
}

static of_status unary_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const of_unary_op op = (of_unary_op)OF_NODE_ATTRS(a_unary, n)->op;
  if (op == OF_RELU) {
    bool done;
    OF_CHECK(relu_grad_direct(n, g[0], &gi[0], &done));
    if (done) return OF_OK;
  }
  if (op == OF_GELU || op == OF_SILU) {
    bool done;
    OF_CHECK(act_grad_direct(n, op, g[0], &gi[0], &done));
    if (done) return OF_OK;
  }
  of_scope s = {0};
  of_tensor *r = unary_grad_expr(&s, op, n, g[0]);
  if (!r && s.st == OF_OK) return of_s_end(&s, NULL, &gi[0]);
  return of_s_end(&s, r, &gi[0]);
}

#define UGRAD(OP, NAME, KIND, GRAD) [OF_##OP] = {GRAD, unary_backward},
static const of_grad_def unary_grads[OF_NUM_UNARY] = {UNARY_OPS(UGRAD)};

/* Under autograd an in-place op computes out of place and takes the result
 * over (the input is cloned first so its saved value survives). */
typedef of_status (*compute1_fn)(of_tensor *x, of_tensor *into, of_tensor **out, void *ctx);

static of_status inplace_via_result(const char *name, of_tensor *x, of_tensor *into,
                                    of_tensor **out,
                                    of_status (*again)(of_tensor *x, of_tensor **r, void *ctx),
                                    void *ctx) {
  OF_CHECK(of_check_inplace(name, into));
  of_tensor *x2 = x, *r;
  if (x->storage == into->storage) OF_CHECK(of_clone(x, &x2));
  of_status st = again(x2, &r, ctx);
  if (x2 != x) of_tensor_release(x2);
  if (st != OF_OK) return st;
  st = of_assign_result(into, r);
  of_tensor_release(r);
  if (st != OF_OK) return st;
  of_tensor_retain(into);
  *out = into;
  return OF_OK;
}

static of_status unary_again(of_tensor *x, of_tensor **r, void *ctx) {
  return of_unary(*(of_unary_op *)ctx, x, NULL, r);
}

static bool wants_inplace_autograd(of_tensor *x, of_tensor *into, bool diff) {
  return into && ((diff && of_grad_needed(&x, 1)) || (into->requires_grad && of_is_grad_enabled()));
}

static of_status unary_body(of_unary_op op, of_tensor *x, of_tensor *into, of_tensor **out) {
  if (op < 0 || op >= OF_NUM_UNARY) return of_fail(OF_ERR_ARG, "unary: unknown op %d", (int)op);
  const of_grad_def *gd = unary_grads[op].name ? &unary_grads[op] : NULL;
  /* x:relu_() (sigmoid_, tanh_, exp_ ...) whose derivative reads only the
   * result: computed in place, as PyTorch does -- the node's edge is x's
   * history before the write, its saved value the written tensor (a later
   * write to it fails the backward's version check). The general path below
   * clones x and copies a result back: two passes and two blocks more, per
   * ReLU of a torchvision-style ResNet's training step. */
  bool in_place = into == x && gd && unary_grad_uses_y(op) && of_dtype_is_floating(x->dtype);
  if (!in_place && wants_inplace_autograd(x, into, gd != NULL))
    return inplace_via_result(unary_ops[op].name, x, into, out, unary_again, &op);
  const bool grad = gd && of_grad_needed(&x, 1);
  if (in_place && grad) OF_CHECK(of_check_inplace(unary_ops[op].name, into));
  OF_CHECK(unary_compute(op, x, into, out));
  if (!grad || !of_dtype_is_floating((*out)->dtype)) return OF_OK;
  of_node *n;
  of_status st = of_record(gd, &x, 1, out, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    return st;
  }
  a_unary a = {op, 0};
  OF_NODE_KEEP(n, OPK_UNARY, a);
  /* only what the derivative reads (unary_grad_expr): relu, sigmoid, tanh,
   * exp ... keep just their result, so their input (a BatchNorm's output,
   * say) is freed after the forward as PyTorch does */
  if (!unary_grad_uses_y(op)) of_node_save(n, 0, x);
  if (unary_grad_uses_y(op)) of_node_save(n, 1, *out);
  return OF_OK;
}

/* clamp: the grad passes where the input was inside the bounds */
static of_status clamp_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_scope s = {0};
  const a_clamp *a = OF_NODE_ATTRS(a_clamp, n);
  of_tensor *x = S_X;
  of_tensor *lo = a->has_lo ? of_s_cmps(&s, OF_GE, x, a->lo) : NULL;
  of_tensor *hi = a->has_hi ? of_s_cmps(&s, OF_LE, x, a->hi) : NULL;
  of_tensor *keep = lo && hi ? of_s_bin(&s, OF_LOGICAL_AND, lo, hi) : (lo ? lo : hi);
  return of_s_end(&s, MUL(g[0], of_s_cast(&s, keep, g[0]->dtype)), &gi[0]);
}
static const of_grad_def clamp_grad = {"ClampBackward", clamp_backward};

static of_status clamp_again(of_tensor *x, of_tensor **r, void *ctx) {
  const a_clamp *a = ctx;
  return of_clamp(x, a->lo, a->hi, a->has_lo, a->has_hi, NULL, r);
}

/* x:clamp_(lo, hi) under autograd (nn.ReLU6({inplace = true}), as
 * torchvision's MobileNets): the derivative needs where x was within the
 * bounds, so the general path keeps a clone of x and copies the result back
 * (three passes, two blocks). On a contiguous float32 CPU tensor one pass
 * clamps in place and writes that as a byte mask (inclusive bounds, as
 * torch.clamp's derivative), which the node keeps. */
static of_status clamp_mask_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_scope s = {0};
  of_tensor *m = of_s_saved(&s, n, 0);
  return of_s_end(&s, MUL(g[0], of_s_cast(&s, m, g[0]->dtype)), &gi[0]);
}
static const of_grad_def clamp_mask_grad = {"ClampBackward", clamp_mask_backward};

static of_status clamp_inplace_masked(of_tensor *x, double lo, double hi, int32_t has_lo,
                                      int32_t has_hi, of_tensor **out, bool *done) {
  *done = false;
  if (x->dtype != OF_FLOAT32 || of_dev(x) != OF_CPU || !of_tensor_is_contiguous(x) ||
      x->numel == 0 || (has_lo && isnan(lo)) || (has_hi && isnan(hi)) || (!has_lo && !has_hi))
    return OF_OK;
  OF_CHECK(of_check_inplace("clamp", x));
  of_tensor *m;
  OF_CHECK(of_tensor_new(x->shape, x->ndim, OF_BOOL, OF_CPU, &m));
  float *p = (float *)of_ptr(x);
  uint8_t *mp = (uint8_t *)of_ptr(m);
  const float l = has_lo ? (float)lo : -INFINITY, h = has_hi ? (float)hi : INFINITY;
  const int64_t nel = x->numel, nb = (nel + 4095) / 4096;
  /* NaN: outside both bounds (mask 0) and kept, as the clamp kernel keeps it */
  _Pragma("omp parallel for schedule(static) if (nel > 4 * OF_PARALLEL_GRAIN) num_threads(of_threads())")
  for (int64_t blk = 0; blk < nb; blk++) {
    const int64_t e = blk * 4096 + 4096 < nel ? blk * 4096 + 4096 : nel;
    for (int64_t i = blk * 4096; i < e; i++) {
      float v = p[i], t = v < l ? l : v;   /* min(max(v, l), h): h when l > h */
      mp[i] = (uint8_t)((v >= l) & (v <= h));
      p[i] = t > h ? h : t;
    }
  }
  of_bump_version(x);
  of_node *n;
  of_status st = of_record(&clamp_mask_grad, &x, 1, &x, 1, &n);
  if (st == OF_OK) {
    a_clamp a = {lo, hi, has_lo, has_hi};
    OF_NODE_KEEP(n, OPK_CLAMP, a);
    of_node_save(n, 0, m);
    of_tensor_retain(x);
    *out = x;
    *done = true;
  }
  of_tensor_release(m);
  return st;
}

static of_status clamp_body(of_tensor *x, double lo, double hi, int32_t has_lo, int32_t has_hi,
                        of_tensor *into, of_tensor **out) {
  a_clamp a = {lo, hi, has_lo, has_hi};
  if (into == x && of_grad_needed(&x, 1)) {
    bool done;
    OF_CHECK(clamp_inplace_masked(x, lo, hi, has_lo, has_hi, out, &done));
    if (done) return OF_OK;
  }
  if (wants_inplace_autograd(x, into, true))
    return inplace_via_result("clamp", x, into, out, clamp_again, &a);
  OF_CHECK(clamp_compute(x, lo, hi, has_lo, has_hi, into, out));
  if (!of_grad_needed(&x, 1) || !of_dtype_is_floating((*out)->dtype)) return OF_OK;
  of_node *n;
  of_status st = of_record(&clamp_grad, &x, 1, out, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    return st;
  }
  OF_NODE_KEEP(n, OPK_CLAMP, a);
  of_node_save(n, 0, x);
  return OF_OK;
}

static of_status leaky_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_scope s = {0};
  /* slope + (1 - slope) * (x > 0) */
  of_tensor *pos = of_s_cast(&s, of_s_cmps(&s, OF_GT, S_X, 0), g[0]->dtype);
  const double slope = OF_NODE_ATTRS(a_leaky, n)->slope;
  of_tensor *w = ADDS(MULS(pos, 1 - slope), slope);
  return of_s_end(&s, MUL(g[0], w), &gi[0]);
}
static const of_grad_def leaky_grad = {"LeakyReluBackward", leaky_backward};

static of_status leaky_again(of_tensor *x, of_tensor **r, void *ctx) {
  return of_leaky_relu(x, *(double *)ctx, NULL, r);
}

static of_status leaky_relu_body(of_tensor *x, double slope, of_tensor *into, of_tensor **out) {
  if (wants_inplace_autograd(x, into, true))
    return inplace_via_result("leaky_relu", x, into, out, leaky_again, &slope);
  OF_CHECK(leaky_compute(x, slope, into, out));
  if (!of_grad_needed(&x, 1)) return OF_OK;
  of_node *n;
  of_status st = of_record(&leaky_grad, &x, 1, out, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    return st;
  }
  a_leaky a = {slope};
  OF_NODE_KEEP(n, OPK_LEAKY_RELU, a);
  of_node_save(n, 0, x);
  return OF_OK;
}

/* where: inputs (cond, a, b); grads go to a where cond, to b elsewhere */
static of_status where_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_scope s = {0};
  of_tensor *c = S_X, *z = NULL;
  of_status st = of_zeros(NULL, 0, g[0]->dtype, OF_CPU, &z);
  z = of_s_keep(&s, st, z);
  for (int32_t k = 1; k <= 2 && s.st == OF_OK; k++) {
    if (!n->needs[k]) continue;
    of_tensor *w = NULL, *r = NULL;
    if (s.st == OF_OK) s.st = k == 1 ? of_where(c, g[0], z, &w) : of_where(c, z, g[0], &w);
    w = of_s_keep(&s, s.st, w);
    if (s.st == OF_OK) s.st = of_sum_to(w, &n->in_meta[k], &r);
    if (s.st == OF_OK) gi[k] = r;
  }
  return of_s_end(&s, NULL, &gi[0]);
}
static const of_grad_def where_grad = {"WhereBackward", where_backward};

static of_status where_body(of_tensor *cond, of_tensor *a, of_tensor *b, of_tensor **out) {
  OF_CHECK(where_compute(cond, a, b, out));
  of_tensor *ins[3] = {cond, a, b};
  if (!of_grad_needed(ins, 3) || !of_dtype_is_floating((*out)->dtype)) return OF_OK;
  of_node *n;
  of_status st = of_record(&where_grad, ins, 3, out, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    return st;
  }
  of_node_save(n, 0, cond);
  return OF_OK;
}

static of_status masked_fill_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_tensor *m;
  OF_CHECK(of_node_saved(n, 0, &m));
  of_status st = of_masked_fill(g[0], m, 0, NULL, &gi[0]);
  of_tensor_release(m);
  return st;
}
static const of_grad_def masked_fill_grad = {"MaskedFillBackward", masked_fill_backward};

typedef struct { of_tensor *mask; double v; } mf_args;
static of_status masked_fill_again(of_tensor *x, of_tensor **r, void *ctx) {
  mf_args *a = ctx;
  return of_masked_fill(x, a->mask, a->v, NULL, r);
}

static of_status masked_fill_body(of_tensor *x, of_tensor *mask, double value, of_tensor *into,
                              of_tensor **out) {
  mf_args a = {mask, value};
  if (wants_inplace_autograd(x, into, true))
    return inplace_via_result("masked_fill", x, into, out, masked_fill_again, &a);
  OF_CHECK(masked_fill_compute(x, mask, value, into, out));
  if (!of_grad_needed(&x, 1)) return OF_OK;
  of_node *n;
  of_status st = of_record(&masked_fill_grad, &x, 1, out, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    return st;
  }
  of_node_save(n, 0, mask);
  return OF_OK;
}

/* The loop of op at a compute dtype: the eager ops' (unary_plan_for) and
 * nn.Graph's fused elementwise nodes'. Float32 GELU / SiLU and the ops of
 * vmath.c take the vectorised loop (it reads the op from the loop's
 * of_ew_ctx, which both callers fill): the generic loops call libm's scalar
 * erf and expf, ~15x slower (a fused bias + GELU of ViT-S's MLP took 9.9 ms
 * with them, eager GELU 1.3 ms). */
of_loop_fn of_unary_kernel(int32_t op, of_dtype dt) {
  if (op < 0 || op >= OF_NUM_UNARY || dt < 0 || dt >= OF_NUM_DTYPES) return NULL;
  if (dt == OF_FLOAT32 && of_vmath_has(op)) return un_fast_float;
  return unary_ops[op].loop[dt];
}
of_loop_fn of_clamp_kernel(of_dtype dt) {
  return dt >= 0 && dt < OF_NUM_DTYPES ? clamp_loops[dt] : NULL;
}
of_loop_fn of_leaky_kernel(of_dtype dt) {
  return dt == OF_FLOAT32 ? p_leaky_float : dt == OF_FLOAT64 ? p_leaky_double : NULL;
}

/* ---- entry points (dispatch), run functions and table rows ---- */
static of_status pack_unary(of_unary_op op, of_tensor *x, of_tensor *into, of_tensor **out) {
  a_unary a = {op, 0};
  of_tensor *ins[2] = {x, into};
  return OF_RECORD(OPK_UNARY, a, ins, into ? 2 : 1, out, 1);
}
of_status of_unary(of_unary_op op, of_tensor *x, of_tensor *into, of_tensor **out) {
  OF_DISPATCH(unary_body(op, x, into, out), pack_unary(op, x, into, out));
}
static of_status run_unary(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_unary);
  OF_RUN1(of_unary(a->op, ins[0], n->nin > 1 ? ins[1] : NULL, OF_R));
}
static void describe_unary(const void *p, char *b, size_t c) {
  of_catf(b, c, "%s", of_unary_name(((const a_unary *)p)->op));
}

static of_status pack_clamp(of_tensor *x, double lo, double hi, int32_t has_lo, int32_t has_hi,
                           of_tensor *into, of_tensor **out) {
  a_clamp a;
  OF_ZERO(a);
  a.lo = lo;
  a.hi = hi;
  a.has_lo = has_lo;
  a.has_hi = has_hi;
  of_tensor *ins[2] = {x, into};
  return OF_RECORD(OPK_CLAMP, a, ins, into ? 2 : 1, out, 1);
}
of_status of_clamp(of_tensor *x, double lo, double hi, int32_t has_lo, int32_t has_hi,
                   of_tensor *into, of_tensor **out) {
  OF_DISPATCH(clamp_body(x, lo, hi, has_lo, has_hi, into, out),
            pack_clamp(x, lo, hi, has_lo, has_hi, into, out));
}
static of_status run_clamp(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_clamp);
  OF_RUN1(of_clamp(ins[0], a->lo, a->hi, a->has_lo, a->has_hi, n->nin > 1 ? ins[1] : NULL, OF_R));
}
static void describe_clamp(const void *p, char *b, size_t c) {
  const a_clamp *a = p;
  if (a->has_lo) of_catf(b, c, "min=%g", a->lo);
  if (a->has_hi) of_catf(b, c, "%smax=%g", a->has_lo ? " " : "", a->hi);
}

static of_status pack_leaky(of_tensor *x, double slope, of_tensor *into, of_tensor **out) {
  a_leaky a = {slope};
  of_tensor *ins[2] = {x, into};
  return OF_RECORD(OPK_LEAKY_RELU, a, ins, into ? 2 : 1, out, 1);
}
of_status of_leaky_relu(of_tensor *x, double slope, of_tensor *into, of_tensor **out) {
  OF_DISPATCH(leaky_relu_body(x, slope, into, out), pack_leaky(x, slope, into, out));
}
static of_status run_leaky(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_leaky);
  OF_RUN1(of_leaky_relu(ins[0], a->slope, n->nin > 1 ? ins[1] : NULL, OF_R));
}

static of_status pack_where(of_tensor *c, of_tensor *x, of_tensor *y, of_tensor **out) {
  a_i1 a = {0, 0};
  of_tensor *ins[3] = {c, x, y};
  return OF_RECORD(OPK_WHERE, a, ins, 3, out, 1);
}
of_status of_where(of_tensor *cond, of_tensor *a, of_tensor *b, of_tensor **out) {
  OF_DISPATCH(where_body(cond, a, b, out), pack_where(cond, a, b, out));
}
static of_status run_where(const of_oprec *n, of_tensor **ins, void **outs) {
  (void)n;
  OF_RUN1(of_where(ins[0], ins[1], ins[2], OF_R));
}

static of_status pack_masked_fill(of_tensor *x, of_tensor *mask, double v, of_tensor *into,
                                 of_tensor **out) {
  a_masked_fill a = {v};
  of_tensor *ins[3] = {x, mask, into};
  return OF_RECORD(OPK_MASKED_FILL, a, ins, into ? 3 : 2, out, 1);
}
of_status of_masked_fill(of_tensor *x, of_tensor *mask, double value, of_tensor *into,
                         of_tensor **out) {
  OF_DISPATCH(masked_fill_body(x, mask, value, into, out),
            pack_masked_fill(x, mask, value, into, out));
}
static of_status run_masked_fill(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_masked_fill);
  OF_RUN1(of_masked_fill(ins[0], ins[1], a->value, n->nin > 2 ? ins[2] : NULL, OF_R));
}

/* a loaded node's result: the input's shape, unary_plan_for's dtype (an
 * output tensor keeps its own) */
static of_status infer_unary(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_unary *a = p;
  if (a->op < 0 || a->op >= OF_NUM_UNARY) return of_fail(OF_ERR_ARG, "unknown unary op %d", (int)a->op);
  unary_plan pl = {.fn = NULL};
  OF_CHECK(unary_plan_for(a->op, ins[0].dtype, ins[0].shape, ins[0].ndim, &pl));
  outs[0].ndim = ins[0].ndim;
  memcpy(outs[0].shape, ins[0].shape, sizeof(int64_t) * (size_t)ins[0].ndim);
  outs[0].dtype = nin > 1 && ins[1].ndim >= 0 ? ins[1].dtype : pl.result;
  return OF_OK;
}

OF_OP_IMPL_INFER(UNARY, run_unary, NULL, NULL, describe_unary, infer_unary);
/* loaded clamp / leaky_relu / where / masked_fill nodes: the plans and
 * checks above on the recorded inputs; an `into` tensor gives the dtype
 * (of_prepare_out: the shape must be the result's) */
static void into_dtype(int32_t nin, int32_t k, const of_meta *ins, of_meta *out) {
  if (nin > k && ins[k].ndim >= 0) out->dtype = ins[k].dtype;
}
static of_status infer_clamp(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_clamp *a = p;
  of_dtype result = 0, compute = 0;
  OF_CHECK(clamp_plan(ins[0].dtype, ins[0].shape, ins[0].ndim, a->lo, a->hi, a->has_lo, a->has_hi,
                      &result, &compute));
  outs[0] = ins[0];
  outs[0].dtype = result;
  into_dtype(nin, 1, ins, &outs[0]);
  return OF_OK;
}
static of_status infer_leaky(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)p;
  OF_CHECK(leaky_check(ins[0].dtype, ins[0].shape, ins[0].ndim));
  outs[0] = ins[0];
  into_dtype(nin, 1, ins, &outs[0]);
  return OF_OK;
}
static of_status infer_where(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)p;
  (void)nin;
  return where_plan(ins[0].shape, ins[0].ndim, ins[1].shape, ins[1].ndim, ins[1].dtype, ins[2].shape,
                    ins[2].ndim, ins[2].dtype, outs[0].shape, &outs[0].ndim, &outs[0].dtype);
}
static of_status infer_masked_fill(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  (void)p;
  OF_CHECK(masked_fill_check(ins[0].shape, ins[0].ndim, ins[1].shape, ins[1].ndim, ins[1].dtype));
  outs[0] = ins[0];
  into_dtype(nin, 2, ins, &outs[0]);
  return OF_OK;
}

OF_OP_IMPL_INFER(CLAMP, run_clamp, NULL, NULL, describe_clamp, infer_clamp);
OF_OP_IMPL_INFER(LEAKY_RELU, run_leaky, NULL, NULL, of_describe_d1, infer_leaky);
OF_OP_IMPL_INFER(WHERE, run_where, NULL, NULL, NULL, infer_where);
OF_OP_IMPL_INFER(MASKED_FILL, run_masked_fill, NULL, NULL, of_describe_d1, infer_masked_fill);
