/* optim.c -- the optimizer update kernels (optim_kernels.h). Each element
 * goes through exactly the float operations of the op-by-op Lua optimizer
 * (lua/oneflow/optim/sgd.lua, adam.lua), in the parameter's dtype, so fused
 * and unfused updates agree to the last bit.
 *
 * The generic loops below test every option per element and do not
 * vectorize; the common configurations (no maximize, no dampening, lr != -1;
 * Adam with beta1 > 0.5) run through copies of the same loop body
 * specialised on constant options, which do. Both give the same bits: the
 * same operations in the same order, and this file is built for the baseline
 * ISA, which has no FMA to contract into. sqrt without errno changes no
 * result either. */
#ifndef __clang__   /* clang: -fno-math-errno for the whole build (CMakeLists.txt) */
#pragma GCC optimize("no-math-errno")
#endif
#include "../device.h"
#include "ops/optim_kernels.h"
#include <math.h>
#include "family.h"

#define SQRT_float sqrtf
#define SQRT_double sqrt

#define SGD_KERNEL(T)                                                                     \
  static void sgd_generic_##T(int64_t n, T *p, const T *g, T *buf, double lr, double mom,          \
                        double damp, double wd, int nesterov, int maximize, int first) {   \
    const T twd = (T)wd, tmom = (T)mom, talpha = (T)(1 - damp), tlr = (T)(-lr);          \
    const int alpha_one = (1 - damp) == 1, lr_one = -lr == 1;                            \
    _Pragma("omp parallel for schedule(static) if (n > 65536) num_threads(of_threads())")                         \
    for (int64_t i = 0; i < n; i++) {                                                    \
      T gv = g[i];                                                                       \
      if (maximize) gv = -gv;                                                            \
      if (wd != 0) { T t = p[i] * twd; gv = gv + t; }                                    \
      if (mom != 0) {                                                                    \
        T bv;                                                                            \
        if (first) bv = gv;                                                              \
        else {                                                                           \
          bv = buf[i] * tmom;                                                            \
          if (alpha_one) bv = bv + gv;                                                   \
          else { T t = gv * talpha; bv = bv + t; }                                       \
        }                                                                                \
        buf[i] = bv;                                                                     \
        if (nesterov) { T t = bv * tmom; gv = gv + t; }                                  \
        else gv = bv;                                                                    \
      }                                                                                  \
      if (lr_one) p[i] = p[i] + gv;                                                      \
      else { T t = gv * tlr; p[i] = p[i] + t; }                                          \
    }                                                                                    \
  }
SGD_KERNEL(float)
SGD_KERNEL(double)

#define FMAXN(a, b) ((a) != (a) || (a) > (b) ? (a) : (b))
#define ADAM_KERNEL(T)                                                                    \
  static void adam_generic_##T(int64_t n, T *p, const T *g, T *m, T *v, T *vmax, double lr,        \
                       double step, double b1, double b2, double eps, double wd, int amsgrad, \
                       int maximize, int decoupled) {                                    \
    const double w = 1 - b1, c = 1 - b2;                                                 \
    const int w_small = fabs(w) < 0.5, c_one = c == 1;                                   \
    const double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);                       \
    const double step_size = lr / bc1, bc2s = sqrt(bc2), val = -step_size;               \
    const T tw = (T)w, tw1 = (T)(1 - w), tc = (T)c, tb2 = (T)b2, tbc2s = (T)bc2s;        \
    const T teps = (T)eps, tval = (T)val, twd = (T)wd, tdec = (T)(1 - lr * wd);          \
    const int val_one = val == 1;                                                        \
    _Pragma("omp parallel for schedule(static) if (n > 65536) num_threads(of_threads())")                         \
    for (int64_t i = 0; i < n; i++) {                                                    \
      T gv = g[i];                                                                       \
      if (maximize) gv = -gv;                                                            \
      if (wd != 0) {                                                                     \
        if (decoupled) p[i] = p[i] * tdec;                                               \
        else { T t = p[i] * twd; gv = gv + t; }                                          \
      }                                                                                  \
      T d = gv - m[i];                                                                   \
      if (w_small) { d = d * tw; m[i] = m[i] + d; }                                      \
      else { d = d * tw1; d = -d; d = d + gv; m[i] = d; }                                \
      T vv = v[i] * tb2;                                                                 \
      T t2 = c_one ? gv * gv : (T)(gv * tc) * gv;                                        \
      vv = vv + t2;                                                                      \
      v[i] = vv;                                                                         \
      T den;                                                                             \
      if (amsgrad) { T mx = FMAXN(vmax[i], vv); vmax[i] = mx; den = SQRT_##T(mx); }      \
      else den = SQRT_##T(vv);                                                           \
      den = den / tbc2s;                                                                 \
      den = den + teps;                                                                  \
      T u = val_one ? m[i] / den : (T)(m[i] * tval) / den;                               \
      p[i] = p[i] + u;                                                                   \
    }                                                                                    \
  }
ADAM_KERNEL(float)
ADAM_KERNEL(double)

/* Chunks the threads split; a multiple of every vector width. */
#define CHUNK 8192
#define FOR_CHUNKS(n)                                                                     \
  _Pragma("omp parallel for schedule(static) if (n > 65536) num_threads(of_threads())")                           \
  for (int64_t c_ = 0; c_ < ((n) + CHUNK - 1) / CHUNK; c_++)

/* mode 0: no momentum; 1: first step (buffer = g); 2: buffer = mom * buffer + g */
#define SGD_FAST(T)                                                                       \
  static inline __attribute__((always_inline)) void sgd_run_##T(                         \
      int64_t lo, int64_t hi, T *p, const T *g, T *buf, T twd, T tmom, T tlr,            \
      const int wd, const int mode, const int nest) {                                     \
    for (int64_t i = lo; i < hi; i++) {                                                  \
      T pv = p[i], gv = g[i];                                                            \
      if (wd) { T t = pv * twd; gv = gv + t; }                                           \
      if (mode == 1) {                                                                   \
        buf[i] = gv;                                                                     \
        if (nest) { T t = gv * tmom; gv = gv + t; }                                      \
      } else if (mode == 2) {                                                            \
        T bv = buf[i] * tmom;                                                            \
        bv = bv + gv;                                                                    \
        buf[i] = bv;                                                                     \
        if (nest) { T t = bv * tmom; gv = gv + t; }                                      \
        else gv = bv;                                                                    \
      }                                                                                  \
      T u = gv * tlr;                                                                    \
      p[i] = pv + u;                                                                     \
    }                                                                                    \
  }                                                                                      \
  static void sgd_fast_##T(int64_t n, T *p, const T *g, T *buf, double lr, double mom,     \
                           double wd, int nesterov, int first) {                          \
    const T twd = (T)wd, tmom = (T)mom, tlr = (T)(-lr);                                  \
    const int sel = (wd != 0) * 6 + (mom == 0 ? 0 : first ? 1 : 2) * 2 + (nesterov != 0); \
    FOR_CHUNKS(n) {                                                                      \
      int64_t lo = c_ * CHUNK, hi = lo + CHUNK < n ? lo + CHUNK : n;                     \
      switch (sel) {                                                                     \
      case 0: case 1: sgd_run_##T(lo, hi, p, g, buf, twd, tmom, tlr, 0, 0, 0); break;    \
      case 2: sgd_run_##T(lo, hi, p, g, buf, twd, tmom, tlr, 0, 1, 0); break;            \
      case 3: sgd_run_##T(lo, hi, p, g, buf, twd, tmom, tlr, 0, 1, 1); break;            \
      case 4: sgd_run_##T(lo, hi, p, g, buf, twd, tmom, tlr, 0, 2, 0); break;            \
      case 5: sgd_run_##T(lo, hi, p, g, buf, twd, tmom, tlr, 0, 2, 1); break;            \
      case 6: case 7: sgd_run_##T(lo, hi, p, g, buf, twd, tmom, tlr, 1, 0, 0); break;    \
      case 8: sgd_run_##T(lo, hi, p, g, buf, twd, tmom, tlr, 1, 1, 0); break;            \
      case 9: sgd_run_##T(lo, hi, p, g, buf, twd, tmom, tlr, 1, 1, 1); break;            \
      case 10: sgd_run_##T(lo, hi, p, g, buf, twd, tmom, tlr, 1, 2, 0); break;           \
      default: sgd_run_##T(lo, hi, p, g, buf, twd, tmom, tlr, 1, 2, 1); break;           \
      }                                                                                  \
    }                                                                                    \
  }
SGD_FAST(float)
SGD_FAST(double)

/* wdm 0: no decay; 1: L2 (g + wd * p); 2: decoupled (p * (1 - lr * wd)).
 * beta1 > 0.5, so the lerp is m + w * (g - m). */
#define ADAM_FAST(T)                                                                      \
  static inline __attribute__((always_inline)) void adam_run_##T(                        \
      int64_t lo, int64_t hi, T *p, const T *g, T *m, T *v, T *vmax, T tw, T tc, T tb2,   \
      T tbc2s, T teps, T tval, T twd, T tdec, const int wdm, const int ams) {             \
    for (int64_t i = lo; i < hi; i++) {                                                  \
      T pv = p[i], gv = g[i];                                                            \
      if (wdm == 2) pv = pv * tdec;                                                      \
      if (wdm == 1) { T t = pv * twd; gv = gv + t; }                                     \
      T mv = m[i];                                                                       \
      T d = gv - mv;                                                                     \
      d = d * tw;                                                                        \
      mv = mv + d;                                                                       \
      m[i] = mv;                                                                         \
      T vv = v[i] * tb2;                                                                 \
      T t2 = (T)(gv * tc) * gv;                                                          \
      vv = vv + t2;                                                                      \
      v[i] = vv;                                                                         \
      T den;                                                                             \
      if (ams) {                                                                         \
        T mx = FMAXN(vmax[i], vv);                                                       \
        vmax[i] = mx;                                                                    \
        den = SQRT_##T(mx);                                                              \
      } else {                                                                           \
        den = SQRT_##T(vv);                                                              \
      }                                                                                  \
      den = den / tbc2s;                                                                 \
      den = den + teps;                                                                  \
      T u = (T)(mv * tval) / den;                                                        \
      p[i] = pv + u;                                                                     \
    }                                                                                    \
  }                                                                                      \
  static void adam_fast_##T(int64_t n, T *p, const T *g, T *m, T *v, T *vmax, double lr,   \
                            double step, double b1, double b2, double eps, double wd,     \
                            int amsgrad, int decoupled) {                                \
    const double w = 1 - b1, c = 1 - b2;                                                 \
    const double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);                       \
    const double step_size = lr / bc1, bc2s = sqrt(bc2), val = -step_size;               \
    const T tw = (T)w, tc = (T)c, tb2 = (T)b2, tbc2s = (T)bc2s;                          \
    const T teps = (T)eps, tval = (T)val, twd = (T)wd, tdec = (T)(1 - lr * wd);          \
    const int sel = (wd == 0 ? 0 : decoupled ? 2 : 1) * 2 + (amsgrad != 0);              \
    FOR_CHUNKS(n) {                                                                      \
      int64_t lo = c_ * CHUNK, hi = lo + CHUNK < n ? lo + CHUNK : n;                     \
      switch (sel) {                                                                     \
      case 0: adam_run_##T(lo, hi, p, g, m, v, vmax, tw, tc, tb2, tbc2s, teps, tval, twd, tdec, 0, 0); break; \
      case 1: adam_run_##T(lo, hi, p, g, m, v, vmax, tw, tc, tb2, tbc2s, teps, tval, twd, tdec, 0, 1); break; \
      case 2: adam_run_##T(lo, hi, p, g, m, v, vmax, tw, tc, tb2, tbc2s, teps, tval, twd, tdec, 1, 0); break; \
      case 3: adam_run_##T(lo, hi, p, g, m, v, vmax, tw, tc, tb2, tbc2s, teps, tval, twd, tdec, 1, 1); break; \
      case 4: adam_run_##T(lo, hi, p, g, m, v, vmax, tw, tc, tb2, tbc2s, teps, tval, twd, tdec, 2, 0); break; \
      default: adam_run_##T(lo, hi, p, g, m, v, vmax, tw, tc, tb2, tbc2s, teps, tval, twd, tdec, 2, 1); break; \
      }                                                                                  \
    }                                                                                    \
  }
ADAM_FAST(float)
ADAM_FAST(double)

void of_sgd_kernel(of_dtype dt, int64_t n, void *p, const void *g, void *buf, double lr,
                   double momentum, double dampening, double weight_decay, int nesterov,
                   int maximize, int first) {
  int fast = !maximize && dampening == 0 && -lr != 1;
  if (dt == OF_FLOAT32) {
    if (fast) sgd_fast_float(n, p, g, buf, lr, momentum, weight_decay, nesterov, first);
    else sgd_generic_float(n, p, g, buf, lr, momentum, dampening, weight_decay, nesterov,
                           maximize, first);
  } else {
    if (fast) sgd_fast_double(n, p, g, buf, lr, momentum, weight_decay, nesterov, first);
    else sgd_generic_double(n, p, g, buf, lr, momentum, dampening, weight_decay, nesterov,
                            maximize, first);
  }
}

void of_adam_kernel(of_dtype dt, int64_t n, void *p, const void *g, void *m, void *v, void *vmax,
                    double lr, double step, double beta1, double beta2, double eps,
                    double weight_decay, int amsgrad, int maximize, int decoupled) {
  /* the generic loop's other branches: lerp with w >= 0.5, (1 - beta2) == 1,
   * a step size of -1 */
  int fast = !maximize && fabs(1 - beta1) < 0.5 && (1 - beta2) != 1 && lr / (1 - pow(beta1, step)) != -1;
  if (dt == OF_FLOAT32) {
    if (fast) adam_fast_float(n, p, g, m, v, vmax, lr, step, beta1, beta2, eps, weight_decay,
                              amsgrad, decoupled);
    else adam_generic_float(n, p, g, m, v, vmax, lr, step, beta1, beta2, eps, weight_decay,
                            amsgrad, maximize, decoupled);
  } else {
    if (fast) adam_fast_double(n, p, g, m, v, vmax, lr, step, beta1, beta2, eps, weight_decay,
                               amsgrad, decoupled);
    else adam_generic_double(n, p, g, m, v, vmax, lr, step, beta1, beta2, eps, weight_decay,
                             amsgrad, maximize, decoupled);
  }
}

/* The fused updates as ops -- fused optimizer updates: one pass over a parameter, its grad
 * and its state per step, in place. nn.Graph records these for the
 * optimizers added with add_optimizer; the eager SGD and Adam call them too
 * (the kernels are in core/ops/optim.c). Each element goes through exactly
 * the float operations of the op-by-op Lua optimizer, in the parameter's
 * dtype, so all paths agree to the last bit.
 *
 * `hyper` is a float64 tensor {lr, step}: the learning rate, read at each
 * call (a scheduler writes it), and the number of steps taken so far, which
 * the call increments. */
/* the checks on shapes and dtypes work on of_meta (ndim < 0: absent), so
 * the graph loader runs them on a loaded update's recorded values
 * (infer_sgd / infer_adam); the tensor versions add contiguity */
static of_status check_pair_meta(const char *op, const of_meta *p, const of_meta *t, bool contiguous,
                                 const char *what) {
  if (t->ndim < 0) return OF_OK;
  bool same = t->ndim == p->ndim && t->dtype == p->dtype && contiguous;
  for (int32_t i = 0; same && i < p->ndim; i++) same = t->shape[i] == p->shape[i];
  char a[96], b[96];
  if (!same)
    return of_fail(OF_ERR_SHAPE, "%s: %s %s (%s) must be contiguous and match the parameter %s (%s)",
                   op, what, of_shape_str(t->shape, t->ndim, a, 96), of_dtype_name(t->dtype),
                   of_shape_str(p->shape, p->ndim, b, 96), of_dtype_name(p->dtype));
  return OF_OK;
}
static of_status check_pair(const char *op, of_tensor *p, of_tensor *t, const char *what) {
  if (!t) return OF_OK;
  of_meta pm = of_meta_of(p), tm = of_meta_of(t);
  return check_pair_meta(op, &pm, &tm, of_tensor_is_contiguous(t), what);
}

static of_status check_common_meta(const char *op, const of_meta *p, const of_meta *g, const of_meta *h,
                                   bool contiguous) {
  char b[96];
  if (p->ndim < 0 || g->ndim < 0 || h->ndim < 0)
    return of_fail(OF_ERR_ARG, "%s: param, grad and hyper are required", op);
  if ((p->dtype != OF_FLOAT32 && p->dtype != OF_FLOAT64) || !contiguous)
    return of_fail(OF_ERR_DTYPE, "%s: the parameter must be a contiguous float32 or float64 "
                   "tensor, got %s %s", op, of_shape_str(p->shape, p->ndim, b, 96), of_dtype_name(p->dtype));
  if (h->dtype != OF_FLOAT64 || of_shape_numel(h->shape, h->ndim) < 2)
    return of_fail(OF_ERR_ARG, "%s: hyper must be a contiguous float64 tensor {lr, step}", op);
  return OF_OK;
}
static of_status check_common(const char *op, of_tensor *p, of_tensor *g, of_tensor *hyper) {
  if (!p || !g || !hyper) return of_fail(OF_ERR_ARG, "%s: param, grad and hyper are required", op);
  of_meta pm = of_meta_of(p), gm = of_meta_of(g), hm = of_meta_of(hyper);
  OF_CHECK(check_common_meta(op, &pm, &gm, &hm, of_tensor_is_contiguous(p)));
  if (!of_tensor_is_contiguous(hyper))
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

static of_status sgd_body(of_tensor *param, of_tensor *grad, of_tensor *buf, of_tensor *hyper,
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

static of_status adam_body(of_tensor *param, of_tensor *grad, of_tensor *m, of_tensor *v,
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
static of_status pack_sgd(of_tensor *p, of_tensor *g, of_tensor *buf, of_tensor *hyper,
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
  return of_dispatch_record(OPK_OPTIM_SGD, &a, sizeof a, ins, found_inf ? 5 : 4, NULL, 0);
}

of_status of_optim_sgd_(of_tensor *param, of_tensor *grad, of_tensor *momentum_buf,
                        of_tensor *hyper, double momentum, double dampening,
                        double weight_decay, int32_t nesterov, int32_t maximize,
                        of_tensor *found_inf) {
  OF_DISPATCH(sgd_body(param, grad, momentum_buf, hyper, momentum, dampening, weight_decay,
                     nesterov, maximize, found_inf),
            pack_sgd(param, grad, momentum_buf, hyper, momentum, dampening, weight_decay,
                    nesterov, maximize, found_inf));
}

static of_status run_sgd(const of_oprec *n, of_tensor **ins, void **outs) {
  const a_sgd *a = n->attrs;
  (void)outs;
  return of_optim_sgd_(ins[0], ins[1], ins[2], ins[3], a->momentum, a->dampening,
                       a->weight_decay, a->nesterov, a->maximize, n->nin > 4 ? ins[4] : NULL);
}

static of_status pack_adam(of_tensor *p, of_tensor *g, of_tensor *m, of_tensor *v,
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
  return of_dispatch_record(OPK_OPTIM_ADAM, &a, sizeof a, ins, found_inf ? 7 : 6, NULL, 0);
}

of_status of_optim_adam_(of_tensor *param, of_tensor *grad, of_tensor *exp_avg,
                         of_tensor *exp_avg_sq, of_tensor *max_exp_avg_sq, of_tensor *hyper,
                         double beta1, double beta2, double eps, double weight_decay,
                         int32_t amsgrad, int32_t maximize, int32_t decoupled,
                         of_tensor *found_inf) {
  OF_DISPATCH(adam_body(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, hyper, beta1, beta2, eps,
                      weight_decay, amsgrad, maximize, decoupled, found_inf),
            pack_adam(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, hyper, beta1, beta2, eps,
                     weight_decay, amsgrad, maximize, decoupled, found_inf));
}

static of_status run_adam(const of_oprec *n, of_tensor **ins, void **outs) {
  const a_adam *a = n->attrs;
  (void)outs;
  return of_optim_adam_(ins[0], ins[1], ins[2], ins[3], ins[4], ins[5], a->beta1, a->beta2,
                        a->eps, a->weight_decay, a->amsgrad, a->maximize, a->decoupled,
                        n->nin > 6 ? ins[6] : NULL);
}

/* ---- entry points (dispatch), run functions and table rows ---- */
static void describe_sgd(const void *p, char *b, size_t c) {
  const a_sgd *a = p;
  of_catf(b, c, "momentum=%g wd=%g%s", a->momentum, a->weight_decay, a->nesterov ? " nesterov" : "");
}
static void describe_adam(const void *p, char *b, size_t c) {
  const a_adam *a = p;
  of_catf(b, c, "betas=%g,%g eps=%g wd=%g%s%s", a->beta1, a->beta2, a->eps, a->weight_decay,
       a->amsgrad ? " amsgrad" : "", a->decoupled ? " decoupled" : "");
}
static int32_t mutates_sgd(const void *p, int32_t nin, int32_t *idx) {
  (void)p; (void)nin;
  idx[0] = 0;   /* param */
  idx[1] = 2;   /* momentum buffer */
  idx[2] = 3;   /* hyper (step) */
  return 3;
}
static int32_t mutates_adam(const void *p, int32_t nin, int32_t *idx) {
  (void)p; (void)nin;
  idx[0] = 0;   /* param, exp_avg, exp_avg_sq, max_exp_avg_sq, hyper */
  idx[1] = 2;
  idx[2] = 3;
  idx[3] = 4;
  idx[4] = 5;
  return 5;
}

/* a loaded update node (no results): the bodies' shape and dtype checks on
 * the recorded parameter, grad, state buffers, hyper and found_inf */
static of_status check_found_meta(const char *op, const of_meta *f) {
  char b[96];
  if (f->ndim >= 0 && (f->dtype != OF_FLOAT32 || of_shape_numel(f->shape, f->ndim) != 1))
    return of_fail(OF_ERR_ARG, "%s: found_inf must be a float32 tensor with one element, got %s %s",
                   op, of_shape_str(f->shape, f->ndim, b, 96), of_dtype_name(f->dtype));
  return OF_OK;
}
static of_status infer_sgd(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_sgd *a = p;
  const char *op = "sgd_update";
  (void)outs;
  if (nin < 4) return of_fail(OF_ERR_ARG, "%s: %d inputs", op, (int)nin);
  OF_CHECK(check_common_meta(op, &ins[0], &ins[1], &ins[3], true));
  OF_CHECK(check_pair_meta(op, &ins[0], &ins[1], true, "grad"));
  OF_CHECK(check_pair_meta(op, &ins[0], &ins[2], true, "momentum buffer"));
  if (a->momentum != 0 && ins[2].ndim < 0) return of_fail(OF_ERR_ARG, "%s: momentum needs a buffer", op);
  return nin > 4 ? check_found_meta(op, &ins[4]) : OF_OK;
}
static of_status infer_adam(const void *p, int32_t nin, const of_meta *ins, of_meta *outs) {
  const a_adam *a = p;
  const char *op = "adam_update";
  (void)outs;
  if (nin < 6) return of_fail(OF_ERR_ARG, "%s: %d inputs", op, (int)nin);
  OF_CHECK(check_common_meta(op, &ins[0], &ins[1], &ins[5], true));
  OF_CHECK(check_pair_meta(op, &ins[0], &ins[1], true, "grad"));
  if (nin > 6) OF_CHECK(check_found_meta(op, &ins[6]));
  if (ins[2].ndim < 0 || ins[3].ndim < 0)
    return of_fail(OF_ERR_ARG, "%s: exp_avg and exp_avg_sq are required", op);
  OF_CHECK(check_pair_meta(op, &ins[0], &ins[2], true, "exp_avg"));
  OF_CHECK(check_pair_meta(op, &ins[0], &ins[3], true, "exp_avg_sq"));
  OF_CHECK(check_pair_meta(op, &ins[0], &ins[4], true, "max_exp_avg_sq"));
  if (a->amsgrad && ins[4].ndim < 0) return of_fail(OF_ERR_ARG, "%s: amsgrad needs max_exp_avg_sq", op);
  return OF_OK;
}

OF_OP_IMPL_INFER(OPTIM_SGD, run_sgd, mutates_sgd, NULL, describe_sgd, infer_sgd);
OF_OP_IMPL_INFER(OPTIM_ADAM, run_adam, mutates_adam, NULL, describe_adam, infer_adam);
