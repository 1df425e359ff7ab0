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
#include "../device.h"
#include <math.h>
#include <stdlib.h>
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

/* found_inf (optional, float32): a loss scaler saw inf/nan in the grads of
 * this step (of_amp_unscale_), so the update is skipped, as
 * GradScaler.step skips optimizer.step. */
static of_status check_found(const char *op, of_tensor *found_inf) {
  if (found_inf && (found_inf->dtype != OF_FLOAT32 || found_inf->numel != 1))
    return of_fail(OF_ERR_ARG, "%s: found_inf must be a float32 tensor with one element, got %s %s",
                   op, OF_SHAPE_STR(found_inf), OF_DT(found_inf));
  return OF_OK;
}

static of_status skipped(const char *op, of_tensor *found_inf, bool *skip) {
  *skip = false;
  if (!found_inf) return OF_OK;
  OF_CHECK(check_found(op, found_inf));
  *skip = *(const float *)of_ptr(found_inf) != 0;
  return OF_OK;
}

/* The device half of an update or a scale op: hyper/found_inf/scale that
 * live on the CPU are copied to dev for the call (and hyper back, since the
 * step count advances); on the device's own tensors nothing touches the
 * host, which is what a CUDA graph capture needs. */
typedef struct { of_tensor *h, *f; } dev_aux;

static of_status aux_to(of_tensor *t, of_device dev, of_tensor **out) {
  *out = NULL;
  if (!t) return OF_OK;
  if (of_dev(t) == dev) {
    of_tensor_retain(t);
    *out = t;
    return OF_OK;
  }
  return of_to_device(t, dev, 0, out);
}

static of_status aux_begin(of_device dev, of_tensor *hyper, of_tensor *found, dev_aux *a) {
  a->h = a->f = NULL;
  OF_CHECK(aux_to(hyper, dev, &a->h));
  of_status st = aux_to(found, dev, &a->f);
  if (st != OF_OK) of_tensor_release(a->h);
  return st;
}

static of_status aux_end(of_tensor *hyper, dev_aux *a, of_status st) {
  if (st == OF_OK && hyper && a->h && a->h != hyper) st = of_copy_data(hyper, a->h);
  of_tensor_release(a->h);
  of_tensor_release(a->f);
  return st;
}

static of_status sgd_impl(of_tensor *param, of_tensor *grad, of_tensor *buf, of_tensor *hyper,
                          double momentum, double dampening, double weight_decay,
                          int32_t nesterov, int32_t maximize, of_tensor *found_inf) {
  const char *op = "sgd_update";
  OF_CHECK(check_common(op, param, grad, hyper));
  OF_CHECK(check_pair(op, param, buf, "momentum buffer"));
  if (momentum != 0 && !buf) return of_fail(OF_ERR_ARG, "%s: momentum needs a buffer", op);
  OF_CHECK(check_found(op, found_inf));
  OF_ROUTE(op, dev, dops, sgd, param, grad, buf);
  if (dops) {
    dev_aux ax;
    OF_CHECK(aux_begin(dev, hyper, found_inf, &ax));
    of_status st = dops->sgd(param, grad, buf, ax.h, ax.f, momentum, dampening, weight_decay,
                             nesterov, maximize);
    OF_CHECK(aux_end(hyper, &ax, st));
    of_bump_version(param);
    if (buf) of_bump_version(buf);
    of_bump_version(hyper);
    return OF_OK;
  }
  if (of_dev(hyper) != OF_CPU || (found_inf && of_dev(found_inf) != OF_CPU))
    return of_fail(OF_ERR_DEVICE, "%s: hyper and found_inf of a CPU parameter must be on the "
                   "CPU", op);
  bool skip;
  OF_CHECK(skipped(op, found_inf, &skip));
  if (skip) return OF_OK;
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
                           int32_t decoupled, of_tensor *found_inf) {
  const char *op = "adam_update";
  OF_CHECK(check_common(op, param, grad, hyper));
  OF_CHECK(check_found(op, found_inf));
  if (!m || !v) return of_fail(OF_ERR_ARG, "%s: exp_avg and exp_avg_sq are required", op);
  OF_CHECK(check_pair(op, param, m, "exp_avg"));
  OF_CHECK(check_pair(op, param, v, "exp_avg_sq"));
  OF_CHECK(check_pair(op, param, vmax, "max_exp_avg_sq"));
  if (amsgrad && !vmax) return of_fail(OF_ERR_ARG, "%s: amsgrad needs max_exp_avg_sq", op);
  OF_ROUTE(op, dev, dops, adam, param, grad, m, v, vmax);
  if (dops) {
    dev_aux ax;
    OF_CHECK(aux_begin(dev, hyper, found_inf, &ax));
    of_status st = dops->adam(param, grad, m, v, vmax, ax.h, ax.f, beta1, beta2, eps,
                              weight_decay, amsgrad, maximize, decoupled);
    OF_CHECK(aux_end(hyper, &ax, st));
    goto bump;
  }
  if (of_dev(hyper) != OF_CPU || (found_inf && of_dev(found_inf) != OF_CPU))
    return of_fail(OF_ERR_DEVICE, "%s: hyper and found_inf of a CPU parameter must be on the "
                   "CPU", op);
  bool skip;
  OF_CHECK(skipped(op, found_inf, &skip));
  if (skip) return OF_OK;
  double *h = (double *)of_ptr(hyper);
  double step = h[1] + 1;
  of_adam_kernel(param->dtype, param->numel, of_ptr(param), of_ptr(grad), of_ptr(m), of_ptr(v),
                 vmax ? of_ptr(vmax) : NULL, h[0], step, beta1, beta2, eps, weight_decay, amsgrad,
                 maximize, decoupled);
  h[1] = step;
bump:
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
                         int32_t maximize, of_tensor *found_inf) {
  a_sgd a;
  memset(&a, 0, sizeof a);
  a.momentum = momentum;
  a.dampening = dampening;
  a.weight_decay = wd;
  a.nesterov = nesterov;
  a.maximize = maximize;
  of_tensor *ins[5] = {p, g, buf, hyper, found_inf};
  return of_trace_record(OPK_OPTIM_SGD, &a, sizeof a, ins, found_inf ? 5 : 4, NULL, 0);
}

of_status of_optim_sgd_(of_tensor *param, of_tensor *grad, of_tensor *momentum_buf,
                        of_tensor *hyper, double momentum, double dampening,
                        double weight_decay, int32_t nesterov, int32_t maximize,
                        of_tensor *found_inf) {
  OF_TRACED(sgd_impl(param, grad, momentum_buf, hyper, momentum, dampening, weight_decay,
                     nesterov, maximize, found_inf),
            rec_sgd(param, grad, momentum_buf, hyper, momentum, dampening, weight_decay,
                    nesterov, maximize, found_inf));
}

of_status of_optim_sgd_invoke(of_gnode *n, of_tensor **ins, void **outs) {
  const a_sgd *a = n->attrs;
  (void)outs;
  return of_optim_sgd_(ins[0], ins[1], ins[2], ins[3], a->momentum, a->dampening,
                       a->weight_decay, a->nesterov, a->maximize, n->nin > 4 ? ins[4] : NULL);
}

static of_status rec_adam(of_tensor *p, of_tensor *g, of_tensor *m, of_tensor *v,
                          of_tensor *vmax, of_tensor *hyper, double beta1, double beta2,
                          double eps, double wd, int32_t amsgrad, int32_t maximize,
                          int32_t decoupled, of_tensor *found_inf) {
  a_adam a;
  memset(&a, 0, sizeof a);
  a.beta1 = beta1;
  a.beta2 = beta2;
  a.eps = eps;
  a.weight_decay = wd;
  a.amsgrad = amsgrad;
  a.maximize = maximize;
  a.decoupled = decoupled;
  of_tensor *ins[7] = {p, g, m, v, vmax, hyper, found_inf};
  return of_trace_record(OPK_OPTIM_ADAM, &a, sizeof a, ins, found_inf ? 7 : 6, NULL, 0);
}

of_status of_optim_adam_(of_tensor *param, of_tensor *grad, of_tensor *exp_avg,
                         of_tensor *exp_avg_sq, of_tensor *max_exp_avg_sq, of_tensor *hyper,
                         double beta1, double beta2, double eps, double weight_decay,
                         int32_t amsgrad, int32_t maximize, int32_t decoupled,
                         of_tensor *found_inf) {
  OF_TRACED(adam_impl(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, hyper, beta1, beta2, eps,
                      weight_decay, amsgrad, maximize, decoupled, found_inf),
            rec_adam(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, hyper, beta1, beta2, eps,
                     weight_decay, amsgrad, maximize, decoupled, found_inf));
}

of_status of_optim_adam_invoke(of_gnode *n, of_tensor **ins, void **outs) {
  const a_adam *a = n->attrs;
  (void)outs;
  return of_optim_adam_(ins[0], ins[1], ins[2], ins[3], ins[4], ins[5], a->beta1, a->beta2,
                        a->eps, a->weight_decay, a->amsgrad, a->maximize, a->decoupled,
                        n->nin > 6 ? ins[6] : NULL);
}

/* ---- loss scaling (flow.amp.GradScaler, graph AMP with float16) ----
 * PyTorch's maths: unscale multiplies each grad by float(1 / double(scale))
 * and flags inf/nan; the update halves the scale (backoff) after a bad step
 * and grows it after growth_interval good steps in a row. */
#define UNSCALE_KERNEL(T)                                                                 \
  static int unscale_##T(int64_t n, T *g, T inv) {                                        \
    int bad = 0;                                                                          \
    _Pragma("omp parallel for schedule(static) reduction(|:bad) if (n > 65536)")          \
    for (int64_t i = 0; i < n; i++) {                                                     \
      T v = g[i];                                                                         \
      bad |= !isfinite(v);                                                                \
      g[i] = v * inv;                                                                     \
    }                                                                                     \
    return bad;                                                                           \
  }
UNSCALE_KERNEL(float)
UNSCALE_KERNEL(double)

static of_status check_scalar(const char *op, const char *what, of_tensor *t, of_dtype dt) {
  if (!t || t->dtype != dt || t->numel != 1)
    return of_fail(OF_ERR_ARG, "%s: %s must be a %s tensor with one element%s%s%s", op, what,
                   of_dtype_name(dt), t ? ", got " : "", t ? OF_SHAPE_STR(t) : "",
                   t ? of_dtype_name(t->dtype) : "");
  return OF_OK;
}

static of_status unscale_impl(of_tensor *grad, of_tensor *scale, of_tensor *found_inf) {
  const char *op = "amp_unscale_";
  OF_CHECK(check_scalar(op, "scale", scale, OF_FLOAT32));
  OF_CHECK(check_scalar(op, "found_inf", found_inf, OF_FLOAT32));
  if (!grad || (grad->dtype != OF_FLOAT32 && grad->dtype != OF_FLOAT64) ||
      !of_tensor_is_contiguous(grad))
    return of_fail(OF_ERR_DTYPE, "%s: the grad must be a contiguous float32 or float64 tensor%s%s",
                   op, grad ? ", got " : "", grad ? OF_DT(grad) : "");
  OF_ROUTE(op, dev, dops, amp_unscale, grad, scale, found_inf);
  if (dops) {
    if (of_dev(scale) != dev || of_dev(found_inf) != dev)   /* 0-d CPU tensors joined */
      return of_fail(OF_ERR_DEVICE, "%s: scale and found_inf must be on %s with the grad", op,
                     OF_DEV_STR(dev));
    OF_CHECK(dops->amp_unscale(grad, scale, found_inf));
    of_bump_version(grad);
    of_bump_version(found_inf);
    return OF_OK;
  }
  double inv = (double)(float)(1.0 / (double)*(const float *)of_ptr(scale));
  int bad = grad->dtype == OF_FLOAT32
                ? unscale_float(grad->numel, (float *)of_ptr(grad), (float)inv)
                : unscale_double(grad->numel, (double *)of_ptr(grad), inv);
  if (bad) *(float *)of_ptr(found_inf) = 1;
  of_bump_version(grad);
  of_bump_version(found_inf);
  return OF_OK;
}

of_status of_amp_unscale_(of_tensor *grad, of_tensor *scale, of_tensor *found_inf) {
  a_i1 a = {0, 0};
  of_tensor *ins[3] = {grad, scale, found_inf};
  OF_TRACED(unscale_impl(grad, scale, found_inf),
            of_trace_record(OPK_AMP_UNSCALE, &a, sizeof a, ins, 3, NULL, 0));
}

of_status of_amp_unscale_invoke(of_gnode *n, of_tensor **ins, void **outs) {
  (void)n;
  (void)outs;
  return of_amp_unscale_(ins[0], ins[1], ins[2]);
}

static of_status update_scale_impl(of_tensor *scale, of_tensor *tracker, of_tensor *found_inf,
                                   double growth, double backoff, int64_t interval) {
  const char *op = "amp_update_scale_";
  OF_CHECK(check_scalar(op, "scale", scale, OF_FLOAT32));
  OF_CHECK(check_scalar(op, "growth_tracker", tracker, OF_INT32));
  OF_CHECK(check_scalar(op, "found_inf", found_inf, OF_FLOAT32));
  if (interval < 1) return of_fail(OF_ERR_ARG, "%s: growth_interval must be >= 1", op);
  OF_ROUTE(op, dev, dops, amp_update_scale, scale, tracker, found_inf);
  if (dops) {
    if (of_dev(scale) != dev || of_dev(tracker) != dev || of_dev(found_inf) != dev)
      return of_fail(OF_ERR_DEVICE, "%s: scale, growth_tracker and found_inf must be on one "
                     "device", op);
    OF_CHECK(dops->amp_update_scale(scale, tracker, found_inf, growth, backoff, interval));
    of_bump_version(scale);
    of_bump_version(tracker);
    return OF_OK;
  }
  float *s = (float *)of_ptr(scale);
  int32_t *t = (int32_t *)of_ptr(tracker);
  if (*(const float *)of_ptr(found_inf) != 0) {
    *s = *s * (float)backoff;
    *t = 0;
  } else if (*t + 1 >= interval) {
    float grown = *s * (float)growth;
    if (isfinite(grown)) *s = grown;
    *t = 0;
  } else {
    *t += 1;
  }
  of_bump_version(scale);
  of_bump_version(tracker);
  return OF_OK;
}

of_status of_amp_update_scale_(of_tensor *scale, of_tensor *growth_tracker, of_tensor *found_inf,
                               double growth_factor, double backoff_factor,
                               int64_t growth_interval) {
  a_amp_update a;
  memset(&a, 0, sizeof a);
  a.growth = growth_factor;
  a.backoff = backoff_factor;
  a.interval = growth_interval;
  of_tensor *ins[3] = {scale, growth_tracker, found_inf};
  OF_TRACED(update_scale_impl(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                              growth_interval),
            of_trace_record(OPK_AMP_UPDATE, &a, sizeof a, ins, 3, NULL, 0));
}

of_status of_amp_update_scale_invoke(of_gnode *n, of_tensor **ins, void **outs) {
  const a_amp_update *a = n->attrs;
  (void)outs;
  return of_amp_update_scale_(ins[0], ins[1], ins[2], a->growth, a->backoff, a->interval);
}
