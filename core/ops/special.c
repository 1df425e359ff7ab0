/* special.c -- flow.special's elementwise functions that need their own
 * kernels: error-function relatives, the gamma family, Bessel and Airy
 * functions, orthogonal polynomials, incomplete gamma, Hurwitz zeta. One op
 * (`special`) whose record names the function; one or two inputs (the
 * second broadcasts: zeta's q, gammainc's x, a polynomial's n). The scalar
 * code is PyTorch's (special_math.h), so values agree with torch.special.
 * Computed in float64; the result has the input's floating dtype (float32
 * for integer inputs). On CUDA the same scalar code runs in the elementwise
 * kernel (device.h OF_EWK_SPECIAL1/2, cuda/elementwise.cu).
 * Gradients follow PyTorch: where PyTorch has a derivative this records one
 * (written with public ops, the derivative helpers OF_SP_D_* included);
 * where PyTorch raises "not implemented", so does this, at the call. */
#include "../internal.h"
#include "../autograd.h"
#include "../dispatch/dispatch.h"
#include "elementwise.h"
#include "family.h"
#include "special_eval.h"

typedef struct {
  const char *name;
  int32_t nin;       /* 1 or 2 tensor inputs */
} special_def;

static const special_def special_ops[] = {
    [OF_SP_ERFCX] = {"erfcx", 1}, [OF_SP_ERFINV] = {"erfinv", 1},
    [OF_SP_GAMMALN] = {"gammaln", 1}, [OF_SP_DIGAMMA] = {"digamma", 1},
    [OF_SP_POLYGAMMA] = {"polygamma", 1}, [OF_SP_I0] = {"i0", 1}, [OF_SP_I0E] = {"i0e", 1},
    [OF_SP_I1] = {"i1", 1}, [OF_SP_I1E] = {"i1e", 1}, [OF_SP_NDTRI] = {"ndtri", 1},
    [OF_SP_LOG_NDTR] = {"log_ndtr", 1}, [OF_SP_BESSEL_J0] = {"bessel_j0", 1},
    [OF_SP_BESSEL_J1] = {"bessel_j1", 1}, [OF_SP_BESSEL_Y0] = {"bessel_y0", 1},
    [OF_SP_BESSEL_Y1] = {"bessel_y1", 1}, [OF_SP_MODIFIED_BESSEL_I0] = {"modified_bessel_i0", 1},
    [OF_SP_MODIFIED_BESSEL_I1] = {"modified_bessel_i1", 1},
    [OF_SP_MODIFIED_BESSEL_K0] = {"modified_bessel_k0", 1},
    [OF_SP_MODIFIED_BESSEL_K1] = {"modified_bessel_k1", 1},
    [OF_SP_SCALED_MODIFIED_BESSEL_K0] = {"scaled_modified_bessel_k0", 1},
    [OF_SP_SCALED_MODIFIED_BESSEL_K1] = {"scaled_modified_bessel_k1", 1},
    [OF_SP_SPHERICAL_BESSEL_J0] = {"spherical_bessel_j0", 1}, [OF_SP_AIRY_AI] = {"airy_ai", 1},
    [OF_SP_ZETA] = {"zeta", 2}, [OF_SP_GAMMAINC] = {"gammainc", 2},
    [OF_SP_GAMMAINCC] = {"gammaincc", 2},
    [OF_SP_CHEBYSHEV_T] = {"chebyshev_polynomial_t", 2},
    [OF_SP_CHEBYSHEV_U] = {"chebyshev_polynomial_u", 2},
    [OF_SP_CHEBYSHEV_V] = {"chebyshev_polynomial_v", 2},
    [OF_SP_CHEBYSHEV_W] = {"chebyshev_polynomial_w", 2},
    [OF_SP_SHIFTED_CHEBYSHEV_T] = {"shifted_chebyshev_polynomial_t", 2},
    [OF_SP_SHIFTED_CHEBYSHEV_U] = {"shifted_chebyshev_polynomial_u", 2},
    [OF_SP_SHIFTED_CHEBYSHEV_V] = {"shifted_chebyshev_polynomial_v", 2},
    [OF_SP_SHIFTED_CHEBYSHEV_W] = {"shifted_chebyshev_polynomial_w", 2},
    [OF_SP_HERMITE_H] = {"hermite_polynomial_h", 2}, [OF_SP_HERMITE_HE] = {"hermite_polynomial_he", 2},
    [OF_SP_LAGUERRE_L] = {"laguerre_polynomial_l", 2},
    [OF_SP_LEGENDRE_P] = {"legendre_polynomial_p", 2},
    [OF_SP_D_ERFCX] = {"_d_erfcx", 1}, [OF_SP_D_ERFINV] = {"_d_erfinv", 1},
    [OF_SP_D_I0E] = {"_d_i0e", 1}, [OF_SP_D_I1] = {"_d_i1", 1}, [OF_SP_D_I1E] = {"_d_i1e", 1},
    [OF_SP_D_NDTRI] = {"_d_ndtri", 1}, [OF_SP_D_LOG_NDTR] = {"_d_log_ndtr", 1},
    [OF_SP_D_GAMMAINC] = {"_d_gammainc", 2},
};
_Static_assert(sizeof special_ops / sizeof *special_ops == OF_NUM_SPECIAL,
               "special_ops must list every of_special_fn");

const char *of_special_name(of_special_fn fn) {
  return fn >= 0 && fn < OF_NUM_SPECIAL ? special_ops[fn].name : NULL;
}
int32_t of_special_arity(of_special_fn fn) {
  return fn >= 0 && fn < OF_NUM_SPECIAL ? special_ops[fn].nin : 0;
}

OF_UNARY_LOOP(special1_loop, double, double, of_special1(ctx->op, a, ctx->p0))
OF_BINARY_LOOP(special2_loop, double, double, of_special2(ctx->op, a, b))


/* The function's checks and its result, on of_meta (y NULL: one input):
 * the function and its arity, polygamma's n, no bool inputs; the input's
 * floating dtype (the wider of two, float32 for integers) and the
 * broadcast shape. The body and the infer hook (the graph loader's
 * re-inference) share it. */
static of_status special_plan(of_special_fn fn, const of_meta *x, const of_meta *y, double p,
                              of_meta *res) {
  if (fn < 0 || fn >= OF_NUM_SPECIAL)
    return of_fail(OF_ERR_ARG, "special: unknown function %d", (int)fn);
  const special_def *def = &special_ops[fn];
  if ((def->nin == 2) != (y != NULL))
    return of_fail(OF_ERR_ARG, "special.%s: expected %d tensor input%s, got %d", def->name,
                   (int)def->nin, def->nin == 2 ? "s" : "", y ? 2 : 1);
  if (fn == OF_SP_POLYGAMMA && (p < 0 || p != floor(p) || p > 1e6))
    return of_fail(OF_ERR_ARG, "special.polygamma: n must be a non-negative integer, got %g", p);
  const char *name = def->name;
  of_dtype result = x->dtype;
  if (y && of_dtype_is_floating(y->dtype) &&
      (!of_dtype_is_floating(result) || of_dtype_size(y->dtype) > of_dtype_size(result)))
    result = y->dtype;
  if (!of_dtype_is_floating(result)) result = OF_FLOAT32;
  if (x->dtype == OF_BOOL || (y && y->dtype == OF_BOOL))
    return of_fail(OF_ERR_DTYPE, "special.%s: not supported for bool tensors (shape %s)", name,
                   OF_SHAPE_STR(x));
  res->dtype = result;
  if (!y) {
    res->ndim = x->ndim;
    memcpy(res->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    return OF_OK;
  }
  return of_broadcast_shapes(name, x->shape, x->ndim, y->shape, y->ndim, res->shape, &res->ndim);
}

static of_status special_compute(of_special_fn fn, of_tensor *x, of_tensor *y, const of_meta *rm,
                                 double p, of_tensor **out) {
  const char *name = special_ops[fn].name;
  of_ew_ctx ctx = {.p0 = p, .kind = y ? OF_EWK_SPECIAL2 : OF_EWK_SPECIAL1, .op = fn};
  if (!y)
    return of_ew_run(name, special1_loop, &ctx, &x, 1, OF_FLOAT64, OF_FLOAT64, rm->dtype, rm->shape,
                     rm->ndim, NULL, out);
  of_tensor *ins[2] = {x, y};
  return of_ew_run(name, special2_loop, &ctx, ins, 2, OF_FLOAT64, OF_FLOAT64, rm->dtype, rm->shape,
                   rm->ndim, NULL, out);
}

/* ---- autograd ----
 * The input(s) are saved in slots 0 (and 1); each rule is g times a
 * derivative made of public ops, so create_graph works where the derivative
 * itself is differentiable. */
#define S_X of_s_saved(&s, n, 0)
#define S_Y of_s_saved(&s, n, 1)
#define MUL(a, b) of_s_bin(&s, OF_MUL, a, b)
#define SP(f, a) of_s_special(&s, f, a, NULL, 0)

static of_tensor *of_s_special(of_scope *sc, of_special_fn fn, of_tensor *x, of_tensor *y,
                               double p) {
  if (sc->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_special(fn, x, y, p, &r);
  return of_s_keep(sc, st, r);
}

static of_status special_backward(of_node *n, of_tensor **g, of_tensor **gi) {
  if (!g[0]) return OF_OK;
  const a_special *a = OF_NODE_ATTRS(a_special, n);
  of_scope s = {0};
  of_tensor *d = NULL;
  switch (a->fn) {
    case OF_SP_GAMMALN: d = SP(OF_SP_DIGAMMA, S_X); break;
    case OF_SP_DIGAMMA: d = of_s_special(&s, OF_SP_POLYGAMMA, S_X, NULL, 1); break;
    case OF_SP_POLYGAMMA: d = of_s_special(&s, OF_SP_POLYGAMMA, S_X, NULL, a->p + 1); break;
    case OF_SP_I0: d = SP(OF_SP_I1, S_X); break;
    case OF_SP_ERFCX: d = SP(OF_SP_D_ERFCX, S_X); break;
    case OF_SP_ERFINV: d = SP(OF_SP_D_ERFINV, S_X); break;
    case OF_SP_I0E: d = SP(OF_SP_D_I0E, S_X); break;
    case OF_SP_I1: d = SP(OF_SP_D_I1, S_X); break;
    case OF_SP_I1E: d = SP(OF_SP_D_I1E, S_X); break;
    case OF_SP_NDTRI: d = SP(OF_SP_D_NDTRI, S_X); break;
    case OF_SP_LOG_NDTR: d = SP(OF_SP_D_LOG_NDTR, S_X); break;
    case OF_SP_ZETA: {   /* d/dq zeta(x, q) = -x zeta(x + 1, q); x has none (PyTorch) */
      of_tensor *x = S_X;
      d = MUL(of_s_sbin(&s, OF_SUB, 0, x),
              of_s_special(&s, OF_SP_ZETA, of_s_bins(&s, OF_ADD, x, 1), S_Y, 0));
      break;
    }
    case OF_SP_GAMMAINC:
    case OF_SP_GAMMAINCC: {
      d = of_s_special(&s, OF_SP_D_GAMMAINC, S_X, S_Y, 0);
      if (a->fn == OF_SP_GAMMAINCC) d = of_s_sbin(&s, OF_SUB, 0, d);
      break;
    }
    default:
      of_s_end(&s, NULL, NULL);
      return of_fail(OF_ERR_STATE, "special.%s: no derivative", special_ops[a->fn].name);
  }
  of_tensor *r = MUL(g[0], d);
  int32_t k = special_ops[a->fn].nin == 2 ? 1 : 0;   /* binary ones: the grad is y's */
  if (k == 0) return of_s_end(&s, r, &gi[0]);
  of_tensor *t = NULL;
  OF_CHECK(of_s_end(&s, r, &t));
  of_status st = of_sum_to(t, &n->in_meta[1], &gi[1]);
  of_tensor_release(t);
  return st;
}
static const of_grad_def special_grad = {"SpecialBackward", special_backward};

/* whether fn has a derivative for input k (PyTorch's derivatives.yaml) */
static bool has_derivative(of_special_fn fn, int32_t k) {
  switch (fn) {
    case OF_SP_GAMMALN: case OF_SP_DIGAMMA: case OF_SP_POLYGAMMA: case OF_SP_I0:
    case OF_SP_ERFCX: case OF_SP_ERFINV: case OF_SP_I0E: case OF_SP_I1: case OF_SP_I1E:
    case OF_SP_NDTRI: case OF_SP_LOG_NDTR:
      return k == 0;
    case OF_SP_ZETA: case OF_SP_GAMMAINC: case OF_SP_GAMMAINCC:
      return k == 1;
    default:
      return false;
  }
}

static of_status special_body(of_special_fn fn, of_tensor *x, of_tensor *y, double p,
                              of_tensor **out) {
  if (!x) return of_fail(OF_ERR_ARG, "special: input is NULL");
  of_meta xm = of_meta_of(x), ym = y ? of_meta_of(y) : xm, rm;
  OF_CHECK(special_plan(fn, &xm, y ? &ym : NULL, p, &rm));
  const special_def *def = &special_ops[fn];
  of_tensor *ins[2] = {x, y};
  int32_t nin = y ? 2 : 1;
  for (int32_t k = 0; k < nin; k++) {
    if (of_grad_needed(&ins[k], 1) && !has_derivative(fn, k))
      return of_fail(OF_ERR_STATE, "special.%s: the derivative for input %d is not implemented "
                     "(as in PyTorch); detach() it (shape %s)", def->name, (int)k + 1,
                     OF_SHAPE_STR(ins[k]));
  }
  OF_CHECK(special_compute(fn, x, y, &rm, p, out));
  if (!of_grad_needed(ins, nin)) return OF_OK;
  of_node *n;
  of_status st = of_record(&special_grad, ins, nin, out, 1, &n);
  if (st != OF_OK) {
    of_tensor_release(*out);
    return st;
  }
  a_special a;
  OF_ZERO(a);
  a.fn = fn;
  a.p = p;
  OF_NODE_KEEP(n, OPK_SPECIAL, a);
  of_node_save(n, 0, x);
  if (y) of_node_save(n, 1, y);
  return OF_OK;
}

static of_status pack_special(of_special_fn fn, of_tensor *x, of_tensor *y, double p,
                              of_tensor **out) {
  a_special a;
  OF_ZERO(a);
  a.fn = fn;
  a.p = p;
  of_tensor *ins[2] = {x, y};
  return OF_RECORD(OPK_SPECIAL, a, ins, y ? 2 : 1, out, 1);
}
of_status of_special(of_special_fn fn, of_tensor *x, of_tensor *y, double p, of_tensor **out) {
  OF_DISPATCH(special_body(fn, x, y, p, out), pack_special(fn, x, y, p, out));
}
static of_status run_special(const of_oprec *n, of_tensor **ins, void **outs) {
  OF_ATTRS(a_special);
  OF_NEED(a->fn >= 0 && a->fn < OF_NUM_SPECIAL, "function");
  OF_NEED(n->nin == special_ops[a->fn].nin, "input count");
  OF_RUN1(of_special(a->fn, ins[0], n->nin > 1 ? ins[1] : NULL, a->p, OF_R));
}
static void describe_special(const void *p, char *b, size_t c) {
  const a_special *a = p;
  const char *name = of_special_name(a->fn);
  of_catf(b, c, "%s", name ? name : "?");
  if (a->fn == OF_SP_POLYGAMMA) of_catf(b, c, " n=%g", a->p);
}
/* a loaded node: run_special's input count, then the body's plan */
static of_status infer_special(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_special *a = p;
  const of_meta *y = nin > 1 && ins[1].ndim >= 0 ? &ins[1] : NULL;
  OF_CHECK(special_plan(a->fn, &ins[0], y, a->p, &outs[0]));
  if (nin != special_ops[a->fn].nin)   /* run_special refuses an absent second input's slot */
    return of_fail(OF_ERR_ARG, "special.%s: expected %d tensor input%s, got %d", special_ops[a->fn].name,
                   (int)special_ops[a->fn].nin, special_ops[a->fn].nin == 2 ? "s" : "", (int)nin);
  return OF_OK;
}
OF_OP_IMPL_INFER(SPECIAL, run_special, NULL, NULL, describe_special, infer_special);
