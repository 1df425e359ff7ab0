/* binary.c -- the binary elementwise ops: one table row per op (name, kind,
 * kernels per compute dtype). Broadcasting and promotion follow PyTorch. */
#include "elementwise.h"
#include "../autograd.h"
#include "family.h"

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
/* unsigned operands: floor and truncation agree, and uint64 does not fit int64 */
#define UNSIGNED(TI) ((TI)-1 > (TI)0)
#define IFLOORDIV(TI, a, b) (UNSIGNED(TI) ? (TI)((a) / (b)) : (TI)ifloordiv(a, b))
#define IREMAINDER(TI, a, b) (UNSIGNED(TI) ? (TI)((a) % (b)) : (TI)iremainder(a, b))

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
  X(FLOOR_DIVIDE, TI, TI, IDIV0(b, IFLOORDIV(TI, a, b)))                      \
  X(REMAINDER, TI, TI, IDIV0(b, IREMAINDER(TI, a, b)))                        \
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
INT_OPS(DEF_LOOP, int16_t)
INT_OPS(DEF_LOOP, uint16_t)
INT_OPS(DEF_LOOP, uint32_t)
INT_OPS(DEF_LOOP, uint64_t)
BOOL_OPS(DEF_LOOP, bool)
/* complex: add and sub (the autograd engine sums complex gradients with
 * them) and equality; the rest of complex arithmetic is composed of real
 * ops on view_as_real in Lua (lua/oneflow/ops/complex.lua), so that its
 * gradients are PyTorch's without complex backward rules here */
typedef float _Complex cfloat_t;
typedef double _Complex cdouble_t;
#define COMPLEX_OPS(X, TI) \
  X(ADD, TI, TI, a + b) X(SUB, TI, TI, a - b) X(EQ, TI, bool, a == b) X(NE, TI, bool, a != b)
COMPLEX_OPS(DEF_LOOP, cfloat_t)
COMPLEX_OPS(DEF_LOOP, cdouble_t)

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
#define DT_int16_t OF_INT16
#define DT_uint16_t OF_UINT16
#define DT_uint32_t OF_UINT32
#define DT_uint64_t OF_UINT64
#define DT_cfloat_t OF_COMPLEX64
#define DT_cdouble_t OF_COMPLEX128
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
    INT_OPS(SET, int16_t) INT_OPS(SET, uint16_t) INT_OPS(SET, uint32_t) INT_OPS(SET, uint64_t)
    BOOL_OPS(SET, bool) COMPLEX_OPS(SET, cfloat_t) COMPLEX_OPS(SET, cdouble_t)
};
_Static_assert(OF_NUM_BINARY == 23, "binary op table out of step with oneflow.h");

const char *of_binary_name(of_binary_op op) {
  return op >= 0 && op < OF_NUM_BINARY ? binary_ops[op].name : "invalid";
}

/* The result's shape and dtype, and the common dtype the kernel computes
 * in: what the op computes and what a loaded graph's node is checked
 * against (infer_binary). */
static of_status binary_result(of_binary_op op, const of_meta *a, const of_meta *b, of_meta *r,
                               of_dtype *common_out) {
  const binary_def *def = &binary_ops[op];
  of_dtype common;
  OF_CHECK(of_promote_for(def->name, a->dtype, b->dtype, &common));
  of_dtype result = common;
  if (def->kind == TRUE_DIV && !of_dtype_is_floating(common) && !of_dtype_is_complex(common))
    result = common = OF_FLOAT32;
  if (def->kind == COMPARE || def->kind == LOGICAL) result = OF_BOOL;
  if (!def->loop[of_compute_dtype(common)]) {
    char sa[96], sb[96];
    return of_fail(OF_ERR_DTYPE, "%s: not supported for dtypes %s and %s (shapes %s and %s)",
                   def->name, of_dtype_name(a->dtype), of_dtype_name(b->dtype),
                   of_shape_str(a->shape, a->ndim, sa, 96), of_shape_str(b->shape, b->ndim, sb, 96));
  }
  OF_CHECK(of_broadcast_shapes(def->name, a->shape, a->ndim, b->shape, b->ndim, r->shape, &r->ndim));
  r->dtype = result;
  *common_out = common;
  return OF_OK;
}

static of_status binary_compute(of_binary_op op, of_tensor *a, of_tensor *b, of_tensor *into,
                               of_tensor **out) {
  const binary_def *def = &binary_ops[op];
  of_meta ma, mb, r;
  of_dtype common = OF_FLOAT32;
  ma = of_meta_of(a);
  mb = of_meta_of(b);
  OF_CHECK(binary_result(op, &ma, &mb, &r, &common));
  of_dtype compute = of_compute_dtype(common);
  of_dtype kernel_out = (def->kind == COMPARE || def->kind == LOGICAL) ? OF_BOOL : compute;
  of_ew_ctx ctx = {.kind = OF_EWK_BINARY, .op = op};
  of_tensor *ins[2] = {a, b};
  of_status st = of_ew_run(def->name, def->loop[compute], &ctx, ins, 2, compute, kernel_out,
                           r.dtype, r.shape, r.ndim, into, out);
  if (st != OF_OK && ctx.err == 2)
    return of_fail(OF_ERR_ARG, "pow: integers to negative integer powers are not allowed "
                   "(dtype %s)", of_dtype_name(compute));
  return st;
}

/* ---- autograd ---- */

static of_status binary_backward(of_node *n, of_tensor **g, of_tensor **gi);
#define GRAD(OP, NAME) [OF_##OP] = {NAME, binary_backward},
static const of_grad_def binary_grads[OF_NUM_BINARY] = {
    GRAD(ADD, "AddBackward") GRAD(SUB, "SubBackward") GRAD(MUL, "MulBackward")
    GRAD(DIV, "DivBackward") GRAD(POW, "PowBackward") GRAD(MAXIMUM, "MaximumBackward")
    GRAD(MINIMUM, "MinimumBackward") GRAD(REMAINDER, "RemainderBackward")
    GRAD(FMOD, "FmodBackward") GRAD(ATAN2, "Atan2Backward")};

/* t1 op t2 with t1 borrowed, releasing t2 (for chaining in rules). */
static of_status bin(of_binary_op op, of_tensor *x, of_tensor *y, of_tensor **out) {
  return of_binary(op, x, y, NULL, out);
}
static of_status bin_s(of_binary_op op, of_tensor *x, double s, of_tensor **out) {
  return of_binary_scalar(op, x, s, 0, NULL, out);
}

/* gi[k] = sum_to(t) with t consumed */
static of_status reduce_grad(of_node *n, int32_t k, of_tensor *t, of_tensor **gi) {
  of_status st = of_sum_to(t, &n->in_meta[k], &gi[k]);
  of_tensor_release(t);
  return st;
}

static of_status binary_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  of_binary_op op = (of_binary_op)OF_NODE_ATTRS(a_binary, n)->op;
  of_tensor *a = NULL, *b = NULL, *t = NULL, *u = NULL, *v = NULL;
  of_status st = OF_OK;
  if (op != OF_ADD && op != OF_SUB) {
    st = of_node_saved(n, 0, &a);
    if (st == OF_OK) st = of_node_saved(n, 1, &b);
    if (st != OF_OK) goto done;
  }
#define TRY(x) do { if ((st = (x)) != OF_OK) goto done; } while (0)
  switch (op) {
    case OF_ADD:
    case OF_SUB:
      if (n->needs[0]) { of_tensor_retain(g[0]); TRY(reduce_grad(n, 0, g[0], gi)); }
      if (n->needs[1]) {
        if (op == OF_ADD) of_tensor_retain(g[0]), t = g[0];
        else TRY(of_unary(OF_NEG, g[0], NULL, &t));
        TRY(reduce_grad(n, 1, t, gi));
        t = NULL;
      }
      break;
    case OF_MUL:
      if (n->needs[0]) { TRY(bin(OF_MUL, g[0], b, &t)); TRY(reduce_grad(n, 0, t, gi)); t = NULL; }
      if (n->needs[1]) { TRY(bin(OF_MUL, g[0], a, &t)); TRY(reduce_grad(n, 1, t, gi)); t = NULL; }
      break;
    case OF_DIV:   /* d/da = g / b, d/db = -g * a / b^2 */
      if (n->needs[0]) { TRY(bin(OF_DIV, g[0], b, &t)); TRY(reduce_grad(n, 0, t, gi)); t = NULL; }
      if (n->needs[1]) {
        TRY(bin(OF_MUL, g[0], a, &t));
        TRY(bin(OF_MUL, b, b, &u));
        TRY(bin(OF_DIV, t, u, &v));
        of_tensor_release(t);
        TRY(of_unary(OF_NEG, v, NULL, &t));
        TRY(reduce_grad(n, 1, t, gi));
        t = NULL;
      }
      break;
    case OF_POW:   /* d/da = g * b * a^(b-1); d/db = g * a^b * log(a), 0 where a == 0 */
      if (n->needs[0]) {
        TRY(bin_s(OF_SUB, b, 1, &t));
        TRY(bin(OF_POW, a, t, &u));
        of_tensor_release(t);
        TRY(bin(OF_MUL, u, b, &t));
        of_tensor_release(u);
        TRY(bin(OF_MUL, t, g[0], &u));
        of_tensor_release(t);
        t = NULL;
        TRY(reduce_grad(n, 0, u, gi));
        u = NULL;
      }
      if (n->needs[1]) {
        of_tensor *mask, *la;
        TRY(bin(OF_POW, a, b, &t));
        TRY(of_unary(OF_LOG, a, NULL, &la));
        st = bin(OF_MUL, t, la, &u);
        of_tensor_release(la);
        if (st != OF_OK) goto done;
        of_tensor_release(t);
        t = NULL;
        TRY(bin_s(OF_EQ, a, 0, &mask));
        st = of_masked_fill(u, mask, 0, NULL, &v);
        of_tensor_release(mask);
        if (st != OF_OK) goto done;
        of_tensor_release(u);
        u = NULL;
        TRY(bin(OF_MUL, v, g[0], &t));
        TRY(reduce_grad(n, 1, t, gi));
        t = NULL;
      }
      break;
    case OF_MAXIMUM:
    case OF_MINIMUM: {   /* ties split the grad in half, as PyTorch */
      of_tensor *gt, *eq;
      TRY(bin(op == OF_MAXIMUM ? OF_GT : OF_LT, a, b, &gt));
      st = bin(OF_EQ, a, b, &eq);
      if (st == OF_OK) {
        of_tensor *wa = NULL, *half = NULL;
        st = of_to_dtype(gt, g[0]->dtype, &wa);
        if (st == OF_OK) st = of_to_dtype(eq, g[0]->dtype, &t);
        if (st == OF_OK) st = bin_s(OF_MUL, t, 0.5, &half);
        of_tensor_release(t);
        t = NULL;
        if (st == OF_OK) st = bin(OF_ADD, wa, half, &u);   /* weight of a */
        of_tensor_release(half);
        of_tensor_release(wa);
      }
      of_tensor_release(gt);
      of_tensor_release(eq);
      if (st != OF_OK) goto done;
      if (n->needs[0]) { TRY(bin(OF_MUL, g[0], u, &t)); TRY(reduce_grad(n, 0, t, gi)); t = NULL; }
      if (n->needs[1]) {
        TRY(of_binary_scalar(OF_SUB, u, 1, 1, NULL, &v));   /* 1 - w */
        TRY(bin(OF_MUL, g[0], v, &t));
        TRY(reduce_grad(n, 1, t, gi));
        t = NULL;
      }
      break;
    }
    case OF_REMAINDER:
    case OF_FMOD:   /* d/da = g; d/db = -g * floor(a/b) (trunc for fmod) */
      if (n->needs[0]) { of_tensor_retain(g[0]); TRY(reduce_grad(n, 0, g[0], gi)); }
      if (n->needs[1]) {
        TRY(bin(OF_DIV, a, b, &t));
        TRY(of_unary(op == OF_FMOD ? OF_TRUNC : OF_FLOOR, t, NULL, &u));
        of_tensor_release(t);
        TRY(bin(OF_MUL, g[0], u, &t));
        of_tensor_release(u);
        TRY(of_unary(OF_NEG, t, NULL, &u));
        of_tensor_release(t);
        t = NULL;
        TRY(reduce_grad(n, 1, u, gi));
        u = NULL;
      }
      break;
    case OF_ATAN2: {   /* d/da = g * b / (a^2 + b^2), d/db = -g * a / (a^2 + b^2) */
      of_tensor *den, *a2;
      TRY(bin(OF_MUL, a, a, &a2));
      st = bin(OF_MUL, b, b, &t);
      if (st == OF_OK) st = bin(OF_ADD, a2, t, &den);
      of_tensor_release(a2);
      of_tensor_release(t);
      t = NULL;
      if (st != OF_OK) goto done;
      if (n->needs[0]) {
        st = bin(OF_MUL, g[0], b, &t);
        if (st == OF_OK) st = bin(OF_DIV, t, den, &u);
        of_tensor_release(t);
        t = NULL;
        if (st == OF_OK) { st = reduce_grad(n, 0, u, gi); u = NULL; }
      }
      if (st == OF_OK && n->needs[1]) {
        st = bin(OF_MUL, g[0], a, &t);
        if (st == OF_OK) st = bin(OF_DIV, t, den, &u);
        of_tensor_release(t);
        t = NULL;
        if (st == OF_OK) st = of_unary(OF_NEG, u, NULL, &t);
        of_tensor_release(u);
        u = NULL;
        if (st == OF_OK) { st = reduce_grad(n, 1, t, gi); t = NULL; }
      }
      of_tensor_release(den);
      break;
    }
    default:
      break;
  }
#undef TRY
done:
  of_tensor_release(a);
  of_tensor_release(b);
  of_tensor_release(t);
  of_tensor_release(u);
  of_tensor_release(v);
  return st;
}

static of_status binary_body(of_binary_op op, of_tensor *a, of_tensor *b, of_tensor *into,
                         of_tensor **out) {
  if (op < 0 || op >= OF_NUM_BINARY) return of_fail(OF_ERR_ARG, "binary: unknown op %d", (int)op);
  of_tensor *ins[2] = {a, b};
  const of_grad_def *gd = binary_grads[op].name ? &binary_grads[op] : NULL;
  bool grad = gd && of_grad_needed(ins, 2);
  bool tracked = into && (grad || (into->requires_grad && of_is_grad_enabled()));
  /* a:add_(b), a:sub_(b): their grads read no operand, so they run in place
   * under autograd too (the node's edges are a's history before the write),
   * as PyTorch does; the general path below clones and copies back */
  bool in_place = into == a && (op == OF_ADD || op == OF_SUB) && b->storage != into->storage &&
                  of_dtype_is_floating(into->dtype);
  if (tracked && in_place) {
    OF_CHECK(of_check_inplace(binary_ops[op].name, into));
  } else if (tracked) {
    /* in-place under autograd: compute out of place (operands that alias the
     * output are cloned first, so saved values stay intact), then take over
     * the result's data and history */
    OF_CHECK(of_check_inplace(binary_ops[op].name, into));
    of_tensor *a2 = a, *b2 = b, *r;
    of_status st = OF_OK;
    if (a->storage == into->storage) st = of_clone(a, &a2);
    if (st == OF_OK && b->storage == into->storage) st = of_clone(b, &b2);
    if (st == OF_OK) st = of_binary(op, a2, b2, NULL, &r);
    if (a2 != a) of_tensor_release(a2);
    if (b2 != b) of_tensor_release(b2);
    if (st != OF_OK) return st;
    st = of_assign_result(into, r);
    of_tensor_release(r);
    if (st != OF_OK) return st;
    of_tensor_retain(into);
    *out = into;
    return OF_OK;
  }
  OF_CHECK(binary_compute(op, a, b, into, out));
  if (!grad || !of_dtype_is_floating((*out)->dtype)) return OF_OK;
  of_node *n;
  of_status st = of_record(gd, ins, 2, out, 1, &n);
  if (st == OF_OK) {
    a_binary rec = {op, 0};
    OF_NODE_KEEP(n, OPK_BINARY, rec);
    if (op != OF_ADD && op != OF_SUB) {
      of_node_save(n, 0, a);
      of_node_save(n, 1, b);
    }
  } else {
    of_tensor_release(*out);
  }
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

static of_status binary_scalar_body(of_binary_op op, of_tensor *a, double s, int32_t reverse,
                                of_tensor *into, of_tensor **out) {
  if (op < 0 || op >= OF_NUM_BINARY) return of_fail(OF_ERR_ARG, "binary: unknown op %d", (int)op);
  of_tensor *b;
  OF_CHECK(of_full(NULL, 0, s, scalar_dtype(a->dtype, s, binary_ops[op].kind),
                   a->storage->device, &b));
  of_status st = reverse ? of_binary(op, b, a, into, out) : of_binary(op, a, b, into, out);
  of_tensor_release(b);
  return st;
}

/* The kernel for op at a compute dtype, for nn.Graph's fused elementwise nodes. */
of_loop_fn of_binary_kernel(int32_t op, of_dtype dt) {
  if (op < 0 || op >= OF_NUM_BINARY || dt < 0 || dt >= OF_NUM_DTYPES) return NULL;
  return binary_ops[op].loop[dt];
}

/* ---- entry points (dispatch), run functions and table rows ---- */
static of_status pack_binary(of_binary_op op, of_tensor *x, of_tensor *y, of_tensor *into,
                            of_tensor **out) {
  a_binary a = {op, 0};
  of_tensor *ins[3] = {x, y, into};
  return OF_RECORD(OPK_BINARY, a, ins, into ? 3 : 2, out, 1);
}
of_status of_binary(of_binary_op op, of_tensor *a, of_tensor *b, of_tensor *into,
                    of_tensor **out) {
  OF_DISPATCH(binary_body(op, a, b, into, out), pack_binary(op, a, b, into, out));
}
static of_status run_binary(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_binary);
  OF_RUN1(of_binary(a->op, ins[0], ins[1], n->nin > 2 ? ins[2] : NULL, OF_R));
}
static void describe_binary(const void *p, char *b, size_t c) {
  of_catf(b, c, "%s", of_binary_name(((const a_binary *)p)->op));
}

static of_status pack_binary_scalar(of_binary_op op, of_tensor *x, double s, int32_t reverse,
                                   of_tensor *into, of_tensor **out) {
  a_binary_scalar a;
  OF_ZERO(a);
  a.op = op;
  a.s = s;
  a.reverse = reverse;
  of_tensor *ins[2] = {x, into};
  return OF_RECORD(OPK_BINARY_SCALAR, a, ins, into ? 2 : 1, out, 1);
}
of_status of_binary_scalar(of_binary_op op, of_tensor *a, double s, int32_t reverse,
                           of_tensor *into, of_tensor **out) {
  OF_DISPATCH(binary_scalar_body(op, a, s, reverse, into, out),
            pack_binary_scalar(op, a, s, reverse, into, out));
}
static of_status run_binary_scalar(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_binary_scalar);
  OF_RUN1(of_binary_scalar(a->op, ins[0], a->s, a->reverse, n->nin > 1 ? ins[1] : NULL, OF_R));
}
static void describe_binary_scalar(const void *p, char *b, size_t c) {
  const a_binary_scalar *a = p;
  if (a->reverse) of_catf(b, c, "%g %s x", a->s, of_binary_name(a->op));
  else of_catf(b, c, "x %s %g", of_binary_name(a->op), a->s);
}

/* a loaded node's result: binary_result; with an `into` tensor, that tensor
 * (of_prepare_out: the broadcast shape, a dtype the result casts to) */
static of_status infer_binary(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_binary *a = p;
  if (a->op < 0 || a->op >= OF_NUM_BINARY) return of_fail(OF_ERR_ARG, "unknown binary op %d", (int)a->op);
  of_dtype common = OF_FLOAT32;
  OF_CHECK(binary_result(a->op, &ins[0], &ins[1], &outs[0], &common));
  if (nin > 2 && ins[2].ndim >= 0) outs[0].dtype = ins[2].dtype;
  return OF_OK;
}

/* x op s: s is a 0-d tensor of scalar_dtype (binary_scalar_body) */
static of_status infer_binary_scalar(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_binary_scalar *a = p;
  if (a->op < 0 || a->op >= OF_NUM_BINARY) return of_fail(OF_ERR_ARG, "unknown binary op %d", (int)a->op);
  of_meta s = {.ndim = 0, .dtype = scalar_dtype(ins[0].dtype, a->s, binary_ops[a->op].kind)};
  of_dtype common = OF_FLOAT32;
  OF_CHECK(a->reverse ? binary_result(a->op, &s, &ins[0], &outs[0], &common)
                      : binary_result(a->op, &ins[0], &s, &outs[0], &common));
  if (nin > 1 && ins[1].ndim >= 0) outs[0].dtype = ins[1].dtype;
  return OF_OK;
}

OF_OP_IMPL_INFER(BINARY, run_binary, NULL, NULL, describe_binary, infer_binary);
OF_OP_IMPL_INFER(BINARY_SCALAR, run_binary_scalar, NULL, NULL, describe_binary_scalar,
                 infer_binary_scalar);
