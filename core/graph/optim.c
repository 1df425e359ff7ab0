/* optim.c -- fused optimizer updates: one pass over a parameter, its grad
 * and its state per step, in place. nn.Graph records these for the
 * optimizers added with add_optimizer; the eager SGD and Adam call them too
 * (the kernels are in core/ops/optim.c). Each element goes through exactly
 * the float operations of the op-by-op Lua optimizer, in the parameter's
 * dtype, so all paths agree to the last bit.
 *
 * `hyper` is a float64 tensor {lr, step}: the learning rate, read at each
 * call (a scheduler writes it), and the number of steps taken so far, which
 * the call increments. */
#include "ops.h"
#include "ops/optim_kernels.h"

static of_status check_pair(const char *op, of_tensor *p, of_tensor *t, const char *what) {
  if (!t) return OF_OK;
  bool same = t->ndim == p->ndim && t->dtype == p->dtype && of_tensor_is_contiguous(t);
  for (int32_t i = 0; same && i < p->ndim; i++) same = t->shape[i] == p->shape[i];
  if (!same)
    return of_fail(OF_ERR_SHAPE, "%s: %s %s (%s) must be contiguous and match the parameter %s (%s)",
                   op, what, OF_SHAPE_STR(t), OF_DT(t), OF_SHAPE_STR(p), OF_DT(p));
  return OF_OK;
}

static of_status check_common(const char *op, of_tensor *p, of_tensor *g, of_tensor *hyper) {
  if (!p || !g || !hyper) return of_fail(OF_ERR_ARG, "%s: param, grad and hyper are required", op);
  if ((p->dtype != OF_FLOAT32 && p->dtype != OF_FLOAT64) || !of_tensor_is_contiguous(p))
    return of_fail(OF_ERR_DTYPE, "%s: the parameter must be a contiguous float32 or float64 "
                   "tensor, got %s %s", op, OF_SHAPE_STR(p), OF_DT(p));
  if (hyper->dtype != OF_FLOAT64 || hyper->numel < 2 || !of_tensor_is_contiguous(hyper))
    return of_fail(OF_ERR_ARG, "%s: hyper must be a contiguous float64 tensor {lr, step}", op);
  return check_pair(op, p, g, "grad");
}

static of_status sgd_impl(of_tensor *param, of_tensor *grad, of_tensor *buf, of_tensor *hyper,
                          double momentum, double dampening, double weight_decay,
                          int32_t nesterov, int32_t maximize) {
  const char *op = "sgd_update";
  OF_CHECK(check_common(op, param, grad, hyper));
  OF_CHECK(check_pair(op, param, buf, "momentum buffer"));
  if (momentum != 0 && !buf) return of_fail(OF_ERR_ARG, "%s: momentum needs a buffer", op);
  double *h = (double *)of_ptr(hyper);
  int first = h[1] == 0;
  of_sgd_kernel(param->dtype, param->numel, of_ptr(param), of_ptr(grad), buf ? of_ptr(buf) : NULL,
                h[0], momentum, dampening, weight_decay, nesterov, maximize, first);
  h[1] += 1;
  of_bump_version(param);
  if (buf) of_bump_version(buf);
  of_bump_version(hyper);
  return OF_OK;
}

static of_status adam_impl(of_tensor *param, of_tensor *grad, of_tensor *m, of_tensor *v,
                           of_tensor *vmax, of_tensor *hyper, double beta1, double beta2,
                           double eps, double weight_decay, int32_t amsgrad, int32_t maximize,
                           int32_t decoupled) {
  const char *op = "adam_update";
  OF_CHECK(check_common(op, param, grad, hyper));
  if (!m || !v) return of_fail(OF_ERR_ARG, "%s: exp_avg and exp_avg_sq are required", op);
  OF_CHECK(check_pair(op, param, m, "exp_avg"));
  OF_CHECK(check_pair(op, param, v, "exp_avg_sq"));
  OF_CHECK(check_pair(op, param, vmax, "max_exp_avg_sq"));
  if (amsgrad && !vmax) return of_fail(OF_ERR_ARG, "%s: amsgrad needs max_exp_avg_sq", op);
  double *h = (double *)of_ptr(hyper);
  double step = h[1] + 1;
  of_adam_kernel(param->dtype, param->numel, of_ptr(param), of_ptr(grad), of_ptr(m), of_ptr(v),
                 vmax ? of_ptr(vmax) : NULL, h[0], step, beta1, beta2, eps, weight_decay, amsgrad,
                 maximize, decoupled);
  h[1] = step;
  of_bump_version(param);
  of_bump_version(m);
  of_bump_version(v);
  if (vmax) of_bump_version(vmax);
  of_bump_version(hyper);
  return OF_OK;
}

/* ---- public entry points, records, invokers ---- */
static of_status rec_sgd(of_tensor *p, of_tensor *g, of_tensor *buf, of_tensor *hyper,
                         double momentum, double dampening, double wd, int32_t nesterov,
                         int32_t maximize) {
  a_sgd a;
  memset(&a, 0, sizeof a);
  a.momentum = momentum;
  a.dampening = dampening;
  a.weight_decay = wd;
  a.nesterov = nesterov;
  a.maximize = maximize;
  of_tensor *ins[4] = {p, g, buf, hyper};
  return of_trace_record(OPK_OPTIM_SGD, &a, sizeof a, ins, 4, NULL, 0);
}

of_status of_optim_sgd_(of_tensor *param, of_tensor *grad, of_tensor *momentum_buf,
                        of_tensor *hyper, double momentum, double dampening,
                        double weight_decay, int32_t nesterov, int32_t maximize) {
  OF_TRACED(sgd_impl(param, grad, momentum_buf, hyper, momentum, dampening, weight_decay,
                     nesterov, maximize),
            rec_sgd(param, grad, momentum_buf, hyper, momentum, dampening, weight_decay,
                    nesterov, maximize));
}

of_status of_optim_sgd_invoke(of_gnode *n, of_tensor **ins, void **outs) {
  const a_sgd *a = n->attrs;
  (void)outs;
  return of_optim_sgd_(ins[0], ins[1], ins[2], ins[3], a->momentum, a->dampening,
                       a->weight_decay, a->nesterov, a->maximize);
}

static of_status rec_adam(of_tensor *p, of_tensor *g, of_tensor *m, of_tensor *v,
                          of_tensor *vmax, of_tensor *hyper, double beta1, double beta2,
                          double eps, double wd, int32_t amsgrad, int32_t maximize,
                          int32_t decoupled) {
  a_adam a;
  memset(&a, 0, sizeof a);
  a.beta1 = beta1;
  a.beta2 = beta2;
  a.eps = eps;
  a.weight_decay = wd;
  a.amsgrad = amsgrad;
  a.maximize = maximize;
  a.decoupled = decoupled;
  of_tensor *ins[6] = {p, g, m, v, vmax, hyper};
  return of_trace_record(OPK_OPTIM_ADAM, &a, sizeof a, ins, 6, NULL, 0);
}

of_status of_optim_adam_(of_tensor *param, of_tensor *grad, of_tensor *exp_avg,
                         of_tensor *exp_avg_sq, of_tensor *max_exp_avg_sq, of_tensor *hyper,
                         double beta1, double beta2, double eps, double weight_decay,
                         int32_t amsgrad, int32_t maximize, int32_t decoupled) {
  OF_TRACED(adam_impl(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, hyper, beta1, beta2, eps,
                      weight_decay, amsgrad, maximize, decoupled),
            rec_adam(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, hyper, beta1, beta2, eps,
                     weight_decay, amsgrad, maximize, decoupled));
}

of_status of_optim_adam_invoke(of_gnode *n, of_tensor **ins, void **outs) {
  const a_adam *a = n->attrs;
  (void)outs;
  return of_optim_adam_(ins[0], ins[1], ins[2], ins[3], ins[4], ins[5], a->beta1, a->beta2,
                        a->eps, a->weight_decay, a->amsgrad, a->maximize, a->decoupled);
}
