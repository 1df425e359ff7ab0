// fft.cu -- flow.fft on CUDA through cuFFT (of_device_ops.fft; the CPU
// kernel and the op are core/ops/fft.c). One dim at a time: a strided
// batched 1-D plan (cufftPlanMany) per dim, run once per outer index; r2c
// along the last of the dims first, c2r last (on a copy: cuFFT's c2r
// overwrites its input); the norm factor by one scaling kernel. Plans are
// made and destroyed per call (no cache yet).
#include <cufft.h>
#include "common.cuh"
#include "kernels.cuh"

namespace ofc {

static of_status cufft_fail(cufftResult r, const char *what) {
  return of_fail(OF_ERR_DEVICE, "fft: cuFFT %s failed (cufftResult %d)", what, (int)r);
}
#define CUFFT_CK(call, what)                          \
  do {                                                \
    cufftResult r_ = (call);                          \
    if (r_ != CUFFT_SUCCESS) {                        \
      if (plan) cufftDestroy(plan);                   \
      return cufft_fail(r_, what);                    \
    }                                                 \
  } while (0)

template <typename T>
__global__ void scale_k(T *v, int64_t n, T s) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] *= s;
}

struct Axis { int64_t outer, len, inner; };
static Axis axis_of(const int64_t *shape, int32_t ndim, int32_t d) {
  Axis a = {1, shape[d], 1};
  for (int32_t i = 0; i < d; i++) a.outer *= shape[i];
  for (int32_t i = d + 1; i < ndim; i++) a.inner *= shape[i];
  return a;
}

// one batched plan along an axis: type, element sizes (in elements) of the
// input and output lines (len_in, len_out), transform size n
static of_status run_axis(cufftType type, int64_t n, Axis ax, int64_t len_in, int64_t len_out,
                          char *in, size_t in_es, char *out, size_t out_es, int dir,
                          cudaStream_t s) {
  if (ax.outer * ax.inner == 0 || n == 0) return OF_OK;
  cufftHandle plan = 0;
  int nn = (int)n;
  bool flat = ax.inner == 1;
  int inembed = (int)len_in, onembed = (int)len_out;
  int batch = (int)(flat ? ax.outer : ax.inner);
  int istride = flat ? 1 : (int)ax.inner, ostride = istride;
  int idist = flat ? (int)len_in : 1, odist = flat ? (int)len_out : 1;
  CUFFT_CK(cufftPlanMany(&plan, 1, &nn, &inembed, istride, idist, &onembed, ostride, odist,
                         type, batch), "plan");
  CUFFT_CK(cufftSetStream(plan, s), "set stream");
  int64_t reps = flat ? 1 : ax.outer;
  for (int64_t o = 0; o < reps; o++) {
    char *i = in + (size_t)(o * len_in * ax.inner) * in_es;
    char *q = out + (size_t)(o * len_out * ax.inner) * out_es;
    switch (type) {
      case CUFFT_C2C: CUFFT_CK(cufftExecC2C(plan, (cufftComplex *)i, (cufftComplex *)q, dir), "exec"); break;
      case CUFFT_Z2Z: CUFFT_CK(cufftExecZ2Z(plan, (cufftDoubleComplex *)i, (cufftDoubleComplex *)q, dir), "exec"); break;
      case CUFFT_R2C: CUFFT_CK(cufftExecR2C(plan, (cufftReal *)i, (cufftComplex *)q), "exec"); break;
      case CUFFT_D2Z: CUFFT_CK(cufftExecD2Z(plan, (cufftDoubleReal *)i, (cufftDoubleComplex *)q), "exec"); break;
      case CUFFT_C2R: CUFFT_CK(cufftExecC2R(plan, (cufftComplex *)i, (cufftReal *)q), "exec"); break;
      case CUFFT_Z2D: CUFFT_CK(cufftExecZ2D(plan, (cufftDoubleComplex *)i, (cufftDoubleReal *)q), "exec"); break;
      default: break;
    }
  }
  cufftDestroy(plan);
  return OF_OK;
}

static of_status fft(int32_t kind, of_tensor *x, const int32_t *dims, int32_t ndims,
                     int32_t forward, int32_t norm, int64_t last_size, of_tensor *out) {
  int dev = use_device(of_dev(x));
  cudaStream_t s = current_stream(dev);
  bool dbl = x->dtype == OF_FLOAT64 || x->dtype == OF_COMPLEX128;
  size_t ces = dbl ? 16 : 8, res = dbl ? 8 : 4;
  cufftType c2c = dbl ? CUFFT_Z2Z : CUFFT_C2C;
  int32_t last = dims[ndims - 1];
  double N = 1;
  for (int32_t i = 0; i < ndims; i++) N *= (double)out->shape[dims[i]];
  if (kind == 1) N = N / (double)out->shape[last] * (double)x->shape[last];
  of_tensor *tmp = NULL;
  of_status st = OF_OK;
  if (kind == 0) {
    OFC_TRY(cudaMemcpyAsync(ptr(out), ptr(x), (size_t)x->numel * ces, cudaMemcpyDeviceToDevice, s),
            "fft_c2c");
    for (int32_t i = 0; st == OF_OK && i < ndims; i++) {
      Axis a = axis_of(out->shape, out->ndim, dims[i]);
      st = run_axis(c2c, a.len, a, a.len, a.len, ptr(out), ces, ptr(out), ces,
                    forward ? CUFFT_FORWARD : CUFFT_INVERSE, s);
    }
  } else if (kind == 1) {
    Axis a = axis_of(x->shape, x->ndim, last);
    st = run_axis(dbl ? CUFFT_D2Z : CUFFT_R2C, a.len, a, a.len, out->shape[last], ptr(x), res,
                  ptr(out), ces, CUFFT_FORWARD, s);
    for (int32_t i = 0; st == OF_OK && i + 1 < ndims; i++) {
      Axis b = axis_of(out->shape, out->ndim, dims[i]);
      st = run_axis(c2c, b.len, b, b.len, b.len, ptr(out), ces, ptr(out), ces, CUFFT_FORWARD, s);
    }
  } else {
    OF_CHECK(of_tensor_new_as("fft_c2r", x->shape, x->ndim, x->dtype, of_dev(x), &tmp));
    cudaError_t e = cudaMemcpyAsync(ptr(tmp), ptr(x), (size_t)x->numel * ces,
                                    cudaMemcpyDeviceToDevice, s);
    if (e != cudaSuccess) st = cuda_fail(e, "fft_c2r", "cudaMemcpyAsync");
    for (int32_t i = 0; st == OF_OK && i + 1 < ndims; i++) {
      Axis b = axis_of(tmp->shape, tmp->ndim, dims[i]);
      st = run_axis(c2c, b.len, b, b.len, b.len, ptr(tmp), ces, ptr(tmp), ces, CUFFT_INVERSE, s);
    }
    Axis a = axis_of(out->shape, out->ndim, last);
    if (st == OF_OK)
      st = run_axis(dbl ? CUFFT_Z2D : CUFFT_C2R, last_size, a, tmp->shape[last], last_size,
                    ptr(tmp), ces, ptr(out), res, CUFFT_INVERSE, s);
  }
  of_tensor_release(tmp);
  if (st != OF_OK) return st;
  double f = norm == 1 ? 1.0 / sqrt(N) : norm == 2 ? 1.0 / N : 1.0;
  int64_t reals = out->numel * (of_dtype_is_complex(out->dtype) ? 2 : 1);
  if (f != 1.0 && reals) {
    if (dbl) scale_k<double><<<blocks_for(reals), kThreads, 0, s>>>((double *)ptr(out), reals, f);
    else scale_k<float><<<blocks_for(reals), kThreads, 0, s>>>((float *)ptr(out), reals, (float)f);
    return launched("fft");
  }
  return OF_OK;
}

void register_fft(of_device_ops *ops) { ops->fft = fft; }

}  // namespace ofc
