// blas.cu -- gemm through cuBLAS: row-major C = alpha A B + beta C computed
// as column-major C^T = B^T A^T. float32 uses TF32 tensor cores only when
// allowed (flow.backends.cuda.matmul.allow_tf32; off by default, as in
// PyTorch >= 1.12); float16/bfloat16 multiply on tensor cores and
// accumulate in float32.
#include "common.cuh"
#include "kernels.cuh"
#include <cublas_v2.h>

namespace ofc {

static cublasHandle_t g_handles[64];
static void *g_workspace[64];
static int g_tf32 = 0;
// A workspace of our own, set again after every cublasSetStream (which
// resets it): cuBLAS then never allocates on a new stream, so its calls can
// be captured into a CUDA graph (nn.Graph's capture runs on a side stream).
enum : size_t { kWorkspaceBytes = 32u << 20 };

static of_status handle_for(int dev, cublasHandle_t *h) {
  if (!g_handles[dev]) {
    cublasStatus_t s = cublasCreate(&g_handles[dev]);
    if (s != CUBLAS_STATUS_SUCCESS)
      return of_fail(OF_ERR_DEVICE, "matmul: cublasCreate failed on cuda:%d (status %d)", dev,
                     (int)s);
    if (cudaMalloc(&g_workspace[dev], kWorkspaceBytes) != cudaSuccess) {
      cudaGetLastError();
      g_workspace[dev] = nullptr;   // cuBLAS's own pool then (not capturable)
    }
  }
  *h = g_handles[dev];
  return OF_OK;
}

static void bind_stream(int dev, cublasHandle_t h) {
  cublasSetStream(h, current_stream(dev));
  if (g_workspace[dev]) cublasSetWorkspace(h, g_workspace[dev], kWorkspaceBytes);
}

static void set_allow_tf32(int32_t on) { g_tf32 = on != 0; }

static of_status gemm(int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k, double alpha,
                      of_tensor *a, int64_t lda, int64_t sa, of_tensor *b, int64_t ldb,
                      int64_t sb, double beta, of_tensor *c, int64_t ldc, int64_t sc,
                      int64_t batch) {
  int dev = use_device(of_dev(c));
  cublasHandle_t h = nullptr;
  OF_CHECK(handle_for(dev, &h));
  bind_stream(dev, h);
  cudaDataType_t dt;
  cublasComputeType_t ct;
  float af = (float)alpha, bf = (float)beta;
  const void *pa = &af, *pb = &bf;
  switch (c->dtype) {
    case OF_FLOAT32:
      dt = CUDA_R_32F;
      ct = g_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      break;
    case OF_FLOAT16: dt = CUDA_R_16F; ct = CUBLAS_COMPUTE_32F; break;
    case OF_BFLOAT16: dt = CUDA_R_16BF; ct = CUBLAS_COMPUTE_32F; break;
    case OF_FLOAT64:
      dt = CUDA_R_64F;
      ct = CUBLAS_COMPUTE_64F;
      pa = &alpha;
      pb = &beta;
      break;
    default:
      return of_fail(OF_ERR_DTYPE, "matmul: dtype %s is not supported on CUDA",
                     of_dtype_name(c->dtype));
  }
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || batch > INT32_MAX)
    return of_fail(OF_ERR_SHAPE, "matmul: a dim beyond cuBLAS's 2^31-1");
  // row-major X [r, c] with leading dim ld is column-major X^T with the same ld
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t s = cublasGemmStridedBatchedEx(
      h, opb, opa, (int)n, (int)m, (int)k, pa, ptr(b), dt, (int)ldb, sb, ptr(a), dt, (int)lda,
      sa, pb, ptr(c), dt, (int)ldc, sc, (int)batch, ct, CUBLAS_GEMM_DEFAULT);
  note_launch("matmul");
  if (s != CUBLAS_STATUS_SUCCESS)
    return of_fail(OF_ERR_DEVICE, "matmul: cuBLAS gemm failed (status %d) for [%lld x %lld] @ "
                   "[%lld x %lld], batch %lld", (int)s, (long long)m, (long long)k, (long long)k,
                   (long long)n, (long long)batch);
  return OF_OK;
}

void register_blas(of_device_ops *ops) {
  ops->gemm = gemm;
  ops->set_allow_tf32 = set_allow_tf32;
}

}  // namespace ofc
