// optim.cu -- fused SGD and Adam updates and loss scaling: each element goes through the
// float operations of core/ops/optim.c in the parameter's dtype, in the
// same order, so CPU and GPU agree to rounding of the device's sqrt/pow.
#include "common.cuh"
#include "kernels.cuh"

namespace ofc {

// a product rounded on its own, so nvcc cannot fuse it into a following add
__device__ __forceinline__ float __fmul_rn_t(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double __fmul_rn_t(double a, double b) { return __dmul_rn(a, b); }

// {lr, step} and the skip flag are read from device memory (hyper,
// found_inf), so that a captured CUDA graph sees each step's values.
template <typename T>
__global__ void sgd_kernel(int64_t n, T *p, const T *g, T *buf, const double *hyper,
                           const float *found, double mom, double damp, double wd,
                           int nesterov, int maximize) {
  if (found && *found != 0.f) return;
  const double lr = hyper[0];
  const int first = hyper[1] == 0;
  const T twd = (T)wd, tmom = (T)mom, talpha = (T)(1 - damp), tlr = (T)(-lr);
  const bool alpha_one = (1 - damp) == 1, lr_one = -lr == 1;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    T gv = g[i];
    if (maximize) gv = -gv;
    if (wd != 0) { T t = __fmul_rn_t(p[i], twd); gv = gv + t; }
    if (mom != 0) {
      T bv;
      if (first) bv = gv;
      else {
        bv = __fmul_rn_t(buf[i], tmom);
        if (alpha_one) bv = bv + gv;
        else { T t = __fmul_rn_t(gv, talpha); bv = bv + t; }
      }
      buf[i] = bv;
      if (nesterov) { T t = __fmul_rn_t(bv, tmom); gv = gv + t; }
      else gv = bv;
    }
    if (lr_one) p[i] = p[i] + gv;
    else { T t = __fmul_rn_t(gv, tlr); p[i] = p[i] + t; }
  }
}

template <typename T>
__global__ void adam_kernel(int64_t n, T *p, const T *g, T *m, T *v, T *vmax,
                            const double *hyper, const float *found, double b1, double b2,
                            double eps, double wd, int amsgrad, int maximize, int decoupled) {
  if (found && *found != 0.f) return;
  const double lr = hyper[0], step = hyper[1] + 1;
  const double w = 1 - b1, c = 1 - b2;
  const bool w_small = fabs(w) < 0.5, c_one = c == 1;
  const double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
  const double step_size = lr / bc1, bc2s = sqrt(bc2), val = -step_size;
  const T tw = (T)w, tw1 = (T)(1 - w), tc = (T)c, tb2 = (T)b2, tbc2s = (T)bc2s;
  const T teps = (T)eps, tval = (T)val, twd = (T)wd, tdec = (T)(1 - lr * wd);
  const bool val_one = val == 1;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    T gv = g[i];
    if (maximize) gv = -gv;
    if (wd != 0) {
      if (decoupled) p[i] = __fmul_rn_t(p[i], tdec);
      else { T t = __fmul_rn_t(p[i], twd); gv = gv + t; }
    }
    T d = gv - m[i];
    if (w_small) { d = __fmul_rn_t(d, tw); m[i] = m[i] + d; }
    else { d = __fmul_rn_t(d, tw1); d = -d; d = d + gv; m[i] = d; }
    T vv = __fmul_rn_t(v[i], tb2);
    T t2 = c_one ? __fmul_rn_t(gv, gv) : __fmul_rn_t(__fmul_rn_t(gv, tc), gv);
    vv = vv + t2;
    v[i] = vv;
    T den;
    if (amsgrad) {
      T mx = (vmax[i] != vmax[i] || vmax[i] > vv) ? vmax[i] : vv;
      vmax[i] = mx;
      den = sqrt(mx);
    } else {
      den = sqrt(vv);
    }
    den = den / tbc2s;
    den = den + teps;
    T u = val_one ? m[i] / den : __fmul_rn_t(m[i], tval) / den;
    p[i] = p[i] + u;
  }
}

// after the update: hyper's step count advances unless the step was skipped
__global__ void advance_step(double *hyper, const float *found) {
  if (found && *found != 0.f) return;
  hyper[1] = hyper[1] + 1;
}

static const float *found_ptr(of_tensor *found) {
  return found ? (const float *)ptr(found) : nullptr;
}

static of_status sgd(of_tensor *param, of_tensor *grad, of_tensor *buf, of_tensor *hyper,
                     of_tensor *found, double momentum, double dampening, double wd,
                     int32_t nesterov, int32_t maximize) {
  int64_t n = param->numel;
  int dev = use_device(of_dev(param));
  cudaStream_t s = current_stream(dev);
  double *h = (double *)ptr(hyper);
  const float *f = found_ptr(found);
  if (n > 0) {
    if (param->dtype == OF_FLOAT32)
      sgd_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(
          n, (float *)ptr(param), (const float *)ptr(grad), buf ? (float *)ptr(buf) : nullptr,
          h, f, momentum, dampening, wd, nesterov, maximize);
    else
      sgd_kernel<double><<<blocks_for(n), kThreads, 0, s>>>(
          n, (double *)ptr(param), (const double *)ptr(grad),
          buf ? (double *)ptr(buf) : nullptr, h, f, momentum, dampening, wd, nesterov, maximize);
  }
  advance_step<<<1, 1, 0, s>>>(h, f);
  return launched("sgd_update");
}

static of_status adam(of_tensor *param, of_tensor *grad, of_tensor *m, of_tensor *v,
                      of_tensor *vmax, of_tensor *hyper, of_tensor *found, double b1, double b2,
                      double eps, double wd, int32_t amsgrad, int32_t maximize,
                      int32_t decoupled) {
  int64_t n = param->numel;
  int dev = use_device(of_dev(param));
  cudaStream_t s = current_stream(dev);
  double *h = (double *)ptr(hyper);
  const float *f = found_ptr(found);
  if (n > 0) {
    if (param->dtype == OF_FLOAT32)
      adam_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(
          n, (float *)ptr(param), (const float *)ptr(grad), (float *)ptr(m), (float *)ptr(v),
          vmax ? (float *)ptr(vmax) : nullptr, h, f, b1, b2, eps, wd, amsgrad, maximize,
          decoupled);
    else
      adam_kernel<double><<<blocks_for(n), kThreads, 0, s>>>(
          n, (double *)ptr(param), (const double *)ptr(grad), (double *)ptr(m),
          (double *)ptr(v), vmax ? (double *)ptr(vmax) : nullptr, h, f, b1, b2, eps, wd,
          amsgrad, maximize, decoupled);
  }
  advance_step<<<1, 1, 0, s>>>(h, f);
  return launched("adam_update");
}

// ---- loss scaling (core/ops/optim.c's maths on the device) ----
template <typename T>
__global__ void unscale_kernel(int64_t n, T *g, const float *scale, float *found) {
  const T inv = (T)(float)(1.0 / (double)*scale);
  bool bad = false;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    T v = g[i];
    bad |= !isfinite(v);
    g[i] = v * inv;
  }
  if (bad) *found = 1.f;   // every writer stores the same value
}

static of_status amp_unscale(of_tensor *grad, of_tensor *scale, of_tensor *found) {
  int64_t n = grad->numel;
  if (n == 0) return OF_OK;
  int dev = use_device(of_dev(grad));
  cudaStream_t s = current_stream(dev);
  const float *sc = (const float *)ptr(scale);
  float *f = (float *)ptr(found);
  if (grad->dtype == OF_FLOAT32)
    unscale_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(n, (float *)ptr(grad), sc, f);
  else
    unscale_kernel<double><<<blocks_for(n), kThreads, 0, s>>>(n, (double *)ptr(grad), sc, f);
  return launched("amp_unscale_");
}

__global__ void update_scale_kernel(float *s, int32_t *t, const float *found, double growth,
                                    double backoff, int64_t interval) {
  if (*found != 0.f) {
    *s = *s * (float)backoff;
    *t = 0;
  } else if (*t + 1 >= interval) {
    float grown = *s * (float)growth;
    if (isfinite(grown)) *s = grown;
    *t = 0;
  } else {
    *t += 1;
  }
}

static of_status amp_update_scale(of_tensor *scale, of_tensor *tracker, of_tensor *found,
                                  double growth, double backoff, int64_t interval) {
  int dev = use_device(of_dev(scale));
  cudaStream_t s = current_stream(dev);
  update_scale_kernel<<<1, 1, 0, s>>>((float *)ptr(scale), (int32_t *)ptr(tracker),
                                      (const float *)ptr(found), growth, backoff, interval);
  return launched("amp_update_scale_");
}

void register_optim(of_device_ops *ops) {
  ops->sgd = sgd;
  ops->adam = adam;
  ops->amp_unscale = amp_unscale;
  ops->amp_update_scale = amp_update_scale;
}

}  // namespace ofc
