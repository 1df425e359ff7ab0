/* binary.c -- the binary elementwise ops: one table row per op (name, kind,
 * kernels per compute dtype). Broadcasting and promotion follow PyTorch. */
#include "elementwise.h"

typedef enum { ARITH, TRUE_DIV, COMPARE, LOGICAL, BITWISE } kind_t;

/* ---- scalar maths, per type family ---- */
static inline int64_t ifloordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t iremainder(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline int64_t ipow(int64_t a, int64_t b, int *err) {
  if (b < 0) {
    if (a == 1) return 1;
    if (a == -1) return (b & 1) ? -1 : 1;
    *err = 2;
    return 0;
  }
  int64_t r = 1;
  while (b) {
    if (b & 1) r *= a;
    a *= a;
    b >>= 1;
  }
  return r;
}
static inline double fremainder(double a, double b) {
  double r = fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
#define FMAX(a, b) ((a) != (a) || (a) > (b) ? (a) : (b))   /* NaN propagates */
#define FMIN(a, b) ((a) != (a) || (a) < (b) ? (a) : (b))
#define IDIV0(b, e) ((b) == 0 ? (ctx->err = 1, 0) : (e))

/* ---- loops: F = float types, I = integer types, B = bool ---- */
#define FLOAT_OPS(X, TI)                                          \
  X(ADD, TI, TI, a + b) X(SUB, TI, TI, a - b) X(MUL, TI, TI, a * b) \
  X(DIV, TI, TI, a / b) X(POW, TI, TI, pow(a, b))                 \
  X(MAXIMUM, TI, TI, FMAX(a, b)) X(MINIMUM, TI, TI, FMIN(a, b))   \
  X(FLOOR_DIVIDE, TI, TI, floor(a / b))                           \
  X(REMAINDER, TI, TI, fremainder(a, b)) X(FMOD, TI, TI, fmod(a, b)) \
  X(ATAN2, TI, TI, atan2(a, b)) COMPARE_OPS(X, TI) LOGICAL_OPS(X, TI)

#define INT_OPS(X, TI)                                                        \
  X(ADD, TI, TI, a + b) X(SUB, TI, TI, a - b) X(MUL, TI, TI, a * b)             \
  X(POW, TI, TI, ipow(a, b, &ctx->err))                                       \
  X(MAXIMUM, TI, TI, a > b ? a : b) X(MINIMUM, TI, TI, a < b ? a : b)         \
  X(FLOOR_DIVIDE, TI, TI, IDIV0(b, (TI)ifloordiv(a, b)))                      \
  X(REMAINDER, TI, TI, IDIV0(b, (TI)iremainder(a, b)))                        \
  X(FMOD, TI, TI, IDIV0(b, (TI)(a % b)))                                      \
  COMPARE_OPS(X, TI) LOGICAL_OPS(X, TI) BITWISE_OPS(X, TI)

#define BOOL_OPS(X, TI)                                                        \
  X(ADD, TI, TI, a || b) X(MUL, TI, TI, a && b)                               \
  X(MAXIMUM, TI, TI, a || b) X(MINIMUM, TI, TI, a && b)                        \
  COMPARE_OPS(X, TI) LOGICAL_OPS(X, TI) BITWISE_OPS(X, TI)

#define COMPARE_OPS(X, TI)                                                    \
  X(EQ, TI, bool, a == b) X(NE, TI, bool, a != b) X(LT, TI, bool, a < b)       \
  X(LE, TI, bool, a <= b) X(GT, TI, bool, a > b) X(GE, TI, bool, a >= b)
#define LOGICAL_OPS(X, TI)                                                    \
  X(LOGICAL_AND, TI, bool, (a != 0) && (b != 0))                              \
  X(LOGICAL_OR, TI, bool, (a != 0) || (b != 0))                               \
  X(LOGICAL_XOR, TI, bool, (a != 0) != (b != 0))
#define BITWISE_OPS(X, TI) \
  X(BITWISE_AND, TI, TI, a & b) X(BITWISE_OR, TI, TI, a | b) X(BITWISE_XOR, TI, TI, a ^ b)

#define DEF_LOOP(OP, TI, TO, EXPR) OF_BINARY_LOOP(bin_##OP##_##TI, TI, TO, EXPR)
FLOAT_OPS(DEF_LOOP, float)
FLOAT_OPS(DEF_LOOP, double)
INT_OPS(DEF_LOOP, uint8_t)
INT_OPS(DEF_LOOP, int8_t)
INT_OPS(DEF_LOOP, int32_t)
INT_OPS(DEF_LOOP, int64_t)
BOOL_OPS(DEF_LOOP, bool)

/* ---- the op table ---- */
typedef struct {
  const char *name;
  kind_t kind;
  of_loop_fn loop[OF_NUM_DTYPES];   /* by compute dtype; NULL: unsupported */
} binary_def;

#define SET(OP, TI, TO, EXPR) [OF_##OP].loop[DT_##TI] = bin_##OP##_##TI,
#define DT_bool OF_BOOL
#define DT__Bool OF_BOOL
#define DT_uint8_t OF_UINT8
#define DT_int8_t OF_INT8
#define DT_int32_t OF_INT32
#define DT_int64_t OF_INT64
#define DT_float OF_FLOAT32
#define DT_double OF_FLOAT64
#define DEF(OP, NAME, KIND) [OF_##OP].name = NAME, [OF_##OP].kind = KIND,

static const binary_def binary_ops[OF_NUM_BINARY] = {
    DEF(ADD, "add", ARITH) DEF(SUB, "sub", ARITH) DEF(MUL, "mul", ARITH)
    DEF(DIV, "div", TRUE_DIV) DEF(POW, "pow", ARITH) DEF(MAXIMUM, "maximum", ARITH)
    DEF(MINIMUM, "minimum", ARITH) DEF(FLOOR_DIVIDE, "floor_divide", ARITH)
    DEF(REMAINDER, "remainder", ARITH) DEF(FMOD, "fmod", ARITH)
    DEF(ATAN2, "atan2", TRUE_DIV)
    DEF(EQ, "eq", COMPARE) DEF(NE, "ne", COMPARE) DEF(LT, "lt", COMPARE)
    DEF(LE, "le", COMPARE) DEF(GT, "gt", COMPARE) DEF(GE, "ge", COMPARE)
    DEF(LOGICAL_AND, "logical_and", LOGICAL) DEF(LOGICAL_OR, "logical_or", LOGICAL)
    DEF(LOGICAL_XOR, "logical_xor", LOGICAL)
    DEF(BITWISE_AND, "bitwise_and", BITWISE) DEF(BITWISE_OR, "bitwise_or", BITWISE)
    DEF(BITWISE_XOR, "bitwise_xor", BITWISE)
    FLOAT_OPS(SET, float) FLOAT_OPS(SET, double)
    INT_OPS(SET, uint8_t) INT_OPS(SET, int8_t) INT_OPS(SET, int32_t) INT_OPS(SET, int64_t)
    BOOL_OPS(SET, bool)
};
_Static_assert(OF_NUM_BINARY == 23, "binary op table out of step with oneflow.h");

const char *of_binary_name(of_binary_op op) {
  return op >= 0 && op < OF_NUM_BINARY ? binary_ops[op].name : "invalid";
}

static of_dtype half_to_float(of_dtype t) {
  return t == OF_FLOAT16 || t == OF_BFLOAT16 ? OF_FLOAT32 : t;
}

of_status of_binary(of_binary_op op, of_tensor *a, of_tensor *b, of_tensor *into,
                    of_tensor **out) {
  if (op < 0 || op >= OF_NUM_BINARY) return of_fail(OF_ERR_ARG, "binary: unknown op %d", (int)op);
  const binary_def *def = &binary_ops[op];
  of_dtype common = of_promote_types(a->dtype, b->dtype), result = common;
  if (def->kind == TRUE_DIV && !of_dtype_is_floating(common)) result = common = OF_FLOAT32;
  if (def->kind == COMPARE || def->kind == LOGICAL) result = OF_BOOL;
  of_dtype compute = half_to_float(common);
  of_dtype kernel_out = (def->kind == COMPARE || def->kind == LOGICAL) ? OF_BOOL : compute;
  if (!def->loop[compute]) {
    char sa[96], sb[96];
    return of_fail(OF_ERR_DTYPE, "%s: not supported for dtypes %s and %s (shapes %s and %s)",
                   def->name, OF_DT(a), OF_DT(b), of_shape_str(a->shape, a->ndim, sa, 96),
                   of_shape_str(b->shape, b->ndim, sb, 96));
  }
  int64_t shape[OF_MAX_DIMS];
  int32_t nd;
  OF_CHECK(of_broadcast_shapes(def->name, a->shape, a->ndim, b->shape, b->ndim, shape, &nd));
  of_ew_ctx ctx = {0};
  of_tensor *ins[2] = {a, b};
  of_status st = of_ew_run(def->name, def->loop[compute], &ctx, ins, 2, compute, kernel_out,
                           result, shape, nd, into, out);
  if (st != OF_OK && ctx.err == 2)
    return of_fail(OF_ERR_ARG, "pow: integers to negative integer powers are not allowed "
                   "(dtype %s)", of_dtype_name(compute));
  return st;
}

/* A Lua number is a "wrapped scalar" in PyTorch's sense: it joins the
 * tensor's dtype unless it changes category (int tensor with 2.5 -> float32,
 * bool tensor with 2 -> int64). */
static of_dtype scalar_dtype(of_dtype t, double s, kind_t kind) {
  if (of_dtype_is_floating(t)) return t;
  if (s != floor(s) || !isfinite(s)) return OF_FLOAT32;
  if (t == OF_BOOL && kind != LOGICAL && !(s == 0 || s == 1)) return OF_INT64;
  if (t == OF_BOOL && kind == ARITH) return OF_INT64;
  return t;
}

of_status of_binary_scalar(of_binary_op op, of_tensor *a, double s, int32_t reverse,
                           of_tensor *into, of_tensor **out) {
  if (op < 0 || op >= OF_NUM_BINARY) return of_fail(OF_ERR_ARG, "binary: unknown op %d", (int)op);
  of_tensor *b;
  OF_CHECK(of_full(NULL, 0, s, scalar_dtype(a->dtype, s, binary_ops[op].kind), OF_CPU, &b));
  of_status st = reverse ? of_binary(op, b, a, into, out) : of_binary(op, a, b, into, out);
  of_tensor_release(b);
  return st;
}
