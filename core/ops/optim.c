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
#pragma GCC optimize("no-math-errno")
#include "ops/optim_kernels.h"
#include <math.h>

#define SQRT_float sqrtf
#define SQRT_double sqrt

#define SGD_KERNEL(T)                                                                     \
  static void sgd_generic_##T(int64_t n, T *p, const T *g, T *buf, double lr, double mom,          \
                        double damp, double wd, int nesterov, int maximize, int first) {   \
    const T twd = (T)wd, tmom = (T)mom, talpha = (T)(1 - damp), tlr = (T)(-lr);          \
    const int alpha_one = (1 - damp) == 1, lr_one = -lr == 1;                            \
    _Pragma("omp parallel for schedule(static) if (n > 65536)")                         \
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
    _Pragma("omp parallel for schedule(static) if (n > 65536)")                         \
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
  _Pragma("omp parallel for schedule(static) if (n > 65536)")                           \
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
