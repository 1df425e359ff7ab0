/* unary.c -- unary elementwise ops, clamp, leaky_relu, where, masked_fill.
 * One table row per op: name, whether integers go to float (exp of an int
 * tensor is float32, as in PyTorch), and kernels per compute dtype. */
#include "elementwise.h"

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
#define INT_UNARY(X, TI)                                                              \
  X(NEG, TI, TI, -a) X(ABS, TI, TI, a < 0 ? -a : a) X(RELU, TI, TI, a > 0 ? a : 0)      \
  X(FLOOR, TI, TI, a) X(CEIL, TI, TI, a) X(ROUND, TI, TI, a) X(TRUNC, TI, TI, a)         \
  X(SIGN, TI, TI, SIGN(a)) X(SQUARE, TI, TI, a * a) X(LOGICAL_NOT, TI, bool, !a)        \
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
#define SET(OP, TI, TO, EXPR) [OF_##OP].loop[DT_##TI] = un_##OP##_##TI,
#define SETF(OP, TI, TO, EXPR) SET(OP, TI, TO, EXPR)
#define DEF(OP, NAME, KIND) [OF_##OP].name = NAME, [OF_##OP].kind = KIND,

static const unary_def unary_ops[OF_NUM_UNARY] = {
    DEF(NEG, "neg", KEEP) DEF(ABS, "abs", KEEP) DEF(EXP, "exp", TO_FLOAT)
    DEF(LOG, "log", TO_FLOAT) DEF(SQRT, "sqrt", TO_FLOAT) DEF(RSQRT, "rsqrt", TO_FLOAT)
    DEF(SIN, "sin", TO_FLOAT) DEF(COS, "cos", TO_FLOAT) DEF(TAN, "tan", TO_FLOAT)
    DEF(TANH, "tanh", TO_FLOAT) DEF(SIGMOID, "sigmoid", TO_FLOAT) DEF(RELU, "relu", KEEP)
    DEF(GELU, "gelu", TO_FLOAT) DEF(GELU_TANH, "gelu_tanh", TO_FLOAT)
    DEF(SILU, "silu", TO_FLOAT) DEF(FLOOR, "floor", KEEP) DEF(CEIL, "ceil", KEEP)
    DEF(ROUND, "round", KEEP) DEF(TRUNC, "trunc", KEEP) DEF(SIGN, "sign", KEEP)
    DEF(RECIPROCAL, "reciprocal", TO_FLOAT) DEF(SQUARE, "square", KEEP)
    DEF(LOG2, "log2", TO_FLOAT) DEF(LOG10, "log10", TO_FLOAT) DEF(LOG1P, "log1p", TO_FLOAT)
    DEF(EXPM1, "expm1", TO_FLOAT) DEF(ASIN, "asin", TO_FLOAT) DEF(ACOS, "acos", TO_FLOAT)
    DEF(ATAN, "atan", TO_FLOAT) DEF(SINH, "sinh", TO_FLOAT) DEF(COSH, "cosh", TO_FLOAT)
    DEF(ERF, "erf", TO_FLOAT) DEF(ERFC, "erfc", TO_FLOAT) DEF(SOFTPLUS, "softplus", TO_FLOAT)
    DEF(MISH, "mish", TO_FLOAT) DEF(HARDSWISH, "hardswish", TO_FLOAT)
    DEF(HARDSIGMOID, "hardsigmoid", TO_FLOAT) DEF(LOGICAL_NOT, "logical_not", TO_BOOL)
    DEF(BITWISE_NOT, "bitwise_not", INT_ONLY) DEF(ISNAN, "isnan", TO_BOOL)
    DEF(ISINF, "isinf", TO_BOOL) DEF(ISFINITE, "isfinite", TO_BOOL)
    FLOAT_UNARY(SETF, float, f) FLOAT_UNARY(SETF, double, )
    INT_UNARY(SET, uint8_t) INT_UNARY(SET, int8_t) INT_UNARY(SET, int32_t)
    INT_UNARY(SET, int64_t) BOOL_UNARY(SET, bool)
};
_Static_assert(OF_NUM_UNARY == 42, "unary op table out of step with oneflow.h");

const char *of_unary_name(of_unary_op op) {
  return op >= 0 && op < OF_NUM_UNARY ? unary_ops[op].name : "invalid";
}

static of_dtype half_to_float(of_dtype t) {
  return t == OF_FLOAT16 || t == OF_BFLOAT16 ? OF_FLOAT32 : t;
}

static of_status unsupported(const char *name, of_tensor *x) {
  return of_fail(OF_ERR_DTYPE, "%s: not supported for dtype %s (shape %s)", name, OF_DT(x),
                 OF_SHAPE_STR(x));
}

of_status of_unary(of_unary_op op, of_tensor *x, of_tensor *into, of_tensor **out) {
  if (op < 0 || op >= OF_NUM_UNARY) return of_fail(OF_ERR_ARG, "unary: unknown op %d", (int)op);
  const unary_def *def = &unary_ops[op];
  of_dtype result = x->dtype;
  if (def->kind == TO_FLOAT && !of_dtype_is_floating(result)) result = OF_FLOAT32;
  of_dtype compute = half_to_float(result);
  if (def->kind == TO_BOOL) {
    compute = half_to_float(x->dtype);
    result = OF_BOOL;
  }
  if (op == OF_SIGN && x->dtype == OF_BOOL) compute = result = OF_BOOL;
  of_loop_fn fn = def->loop[compute];
  if (op == OF_SIGN && compute == OF_BOOL) fn = unary_ops[OF_ABS].loop[OF_BOOL];
  if (op == OF_NEG && x->dtype == OF_BOOL)
    return of_fail(OF_ERR_DTYPE, "neg: negation of a bool tensor is not supported; use "
                   "logical_not (shape %s)", OF_SHAPE_STR(x));
  if (!fn) return unsupported(def->name, x);
  of_dtype kernel_out = (def->kind == TO_BOOL || op == OF_LOGICAL_NOT) ? OF_BOOL : compute;
  of_ew_ctx ctx = {0};
  return of_ew_run(def->name, fn, &ctx, &x, 1, compute, kernel_out, result, x->shape, x->ndim,
                   into, out);
}

/* ---- parameterised ---- */
#define CLAMP_EXPR (ctx->p0 == ctx->p0 && a < ctx->p0 ? ctx->p0 : \
                    (ctx->p1 == ctx->p1 && a > ctx->p1 ? ctx->p1 : a))
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

static const of_loop_fn clamp_loops[OF_NUM_DTYPES] = {
    [OF_UINT8] = p_clamp_uint8_t, [OF_INT8] = p_clamp_int8_t, [OF_INT32] = p_clamp_int32_t,
    [OF_INT64] = p_clamp_int64_t, [OF_FLOAT32] = p_clamp_float, [OF_FLOAT64] = p_clamp_double};

of_status of_clamp(of_tensor *x, double lo, double hi, int32_t has_lo, int32_t has_hi,
                   of_tensor *into, of_tensor **out) {
  if (!has_lo && !has_hi)
    return of_fail(OF_ERR_ARG, "clamp: at least one of min and max must be given");
  of_dtype result = x->dtype;
  /* a fractional bound on an int tensor makes the result float, as in torch */
  if (!of_dtype_is_floating(result) && ((has_lo && lo != floor(lo)) || (has_hi && hi != floor(hi))))
    result = OF_FLOAT32;
  of_dtype compute = half_to_float(result);
  if (!clamp_loops[compute]) return unsupported("clamp", x);
  of_ew_ctx ctx = {.p0 = has_lo ? lo : NAN, .p1 = has_hi ? hi : NAN};
  return of_ew_run("clamp", clamp_loops[compute], &ctx, &x, 1, compute, compute, result,
                   x->shape, x->ndim, into, out);
}

of_status of_leaky_relu(of_tensor *x, double slope, of_tensor *into, of_tensor **out) {
  if (!of_dtype_is_floating(x->dtype)) return unsupported("leaky_relu", x);
  of_dtype compute = half_to_float(x->dtype);
  of_ew_ctx ctx = {.p0 = slope};
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

of_status of_where(of_tensor *cond, of_tensor *a, of_tensor *b, of_tensor **out) {
  int64_t s1[OF_MAX_DIMS], s2[OF_MAX_DIMS];
  int32_t n1, n2;
  OF_CHECK(of_broadcast_shapes("where", cond->shape, cond->ndim, a->shape, a->ndim, s1, &n1));
  OF_CHECK(of_broadcast_shapes("where", s1, n1, b->shape, b->ndim, s2, &n2));
  of_dtype dt = of_promote_types(a->dtype, b->dtype);
  of_tensor *c;
  OF_CHECK(of_to_dtype(cond, OF_BOOL, &c));
  of_tensor *ins[3] = {c, a, b}, *conv[3] = {c, NULL, NULL};
  of_status st = of_to_dtype(a, dt, &conv[1]);
  if (st == OF_OK) st = of_to_dtype(b, dt, &conv[2]);
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

of_status of_masked_fill(of_tensor *x, of_tensor *mask, double value, of_tensor *into,
                         of_tensor **out) {
  if (mask->dtype != OF_BOOL)
    return of_fail(OF_ERR_DTYPE, "masked_fill: mask must be bool, got %s (shape %s)",
                   OF_DT(mask), OF_SHAPE_STR(mask));
  int64_t shape[OF_MAX_DIMS];
  int32_t nd;
  OF_CHECK(of_broadcast_shapes("masked_fill", x->shape, x->ndim, mask->shape, mask->ndim, shape, &nd));
  if (nd != x->ndim || of_shape_numel(shape, nd) != x->numel) {
    char b[96];
    return of_fail(OF_ERR_SHAPE, "masked_fill: mask %s must broadcast to the input %s",
                   OF_SHAPE_STR(mask), of_shape_str(x->shape, x->ndim, b, 96));
  }
  of_tensor *v, *res;
  OF_CHECK(of_full(NULL, 0, value, x->dtype, OF_CPU, &v));
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
