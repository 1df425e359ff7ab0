/*
 * oneflow.h -- the public C API of OneFlow-Lua.
 *
 * This one header serves C hosts and LuaJIT's FFI: the build strips the
 * preprocessor lines and embeds the rest in the library (of_cdef()), which
 * lua/oneflow/init.lua hands to ffi.cdef. So below the include guard there are
 * only fixed-width types, enums and prototypes: no macros in declarations,
 * no `long`, no structs passed by value.
 *
 * Conventions
 *   - Every fallible call returns of_status (OF_OK == 0); on failure
 *     of_last_error() holds a thread-local message naming the op, the shapes
 *     and the dtypes.
 *   - Outputs come last and are written through pointers (`/ * out * /`).
 *     A returned tensor is owned by the caller: of_tensor_release() it.
 *   - Dims are 0-based and may be negative (-1 = last). Ops that take or give
 *     index *values* (gather, argmax, sort, ...) take an `index_base` so a
 *     1-based caller (Lua) needs no conversion pass.
 *   - `out` arguments named `into` may be NULL (allocate a result) or an
 *     existing tensor of the right shape and dtype to write into.
 */
#ifndef ONEFLOW_ONEFLOW_H
#define ONEFLOW_ONEFLOW_H
#include <stdint.h>
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

enum { OF_VERSION = 100, OF_MAX_DIMS = 8 };

typedef int32_t of_status;
enum {
  OF_OK = 0,
  OF_ERR_ARG = 1,      /* bad argument (value, option) */
  OF_ERR_SHAPE = 2,    /* shapes do not fit */
  OF_ERR_DTYPE = 3,    /* dtype not supported by the op */
  OF_ERR_INDEX = 4,    /* index or dim out of range */
  OF_ERR_OOM = 5,      /* allocation failed */
  OF_ERR_IO = 6,       /* file or stream error */
  OF_ERR_DEVICE = 7,   /* device unavailable or mismatched */
  OF_ERR_STATE = 8     /* call not valid in this state */
};

/* The numbers are stored in saved files and graphs: new dtypes are appended
 * (9.. are later additions), so the order is not the promotion order; see
 * of_promote_types. */
typedef int32_t of_dtype;
enum {
  OF_BOOL = 0, OF_UINT8 = 1, OF_INT8 = 2, OF_INT32 = 3, OF_INT64 = 4,
  OF_FLOAT16 = 5, OF_BFLOAT16 = 6, OF_FLOAT32 = 7, OF_FLOAT64 = 8,
  OF_INT16 = 9, OF_UINT16 = 10, OF_UINT32 = 11, OF_UINT64 = 12,
  OF_COMPLEX64 = 13, OF_COMPLEX128 = 14,   /* (re, im) pairs of float32 / float64 */
  OF_NUM_DTYPES = 15
};

/* A device is `type | index << 8`: OF_CPU == 0, cuda:1 == OF_CUDA | 1 << 8. */
typedef int32_t of_device;
enum { OF_CPU = 0, OF_CUDA = 1 };

typedef struct of_tensor of_tensor;

/* ---- library ---------------------------------------------------------- */
int32_t of_version(void);
const char *of_last_error(void);
void of_set_error(of_status code, const char *msg);
void of_clear_error(void);
const char *of_cdef(void);                     /* this header, cdef-ready */
/* OpenMP threads of every parallel op. A fork()ed child of a process that
 * loaded the library runs single-threaded: asking it for more than one
 * thread is an OF_ERR_STATE error; n must be within 1..1024 (GNU OpenMP hangs in a forked child that
 * starts a team); of_in_forked_child says whether this is such a child. */
of_status of_set_num_threads(int32_t n);
int32_t of_get_num_threads(void);
int32_t of_in_forked_child(void);
/* The instruction set of the CPU kernels that pick one at run time
 * (layer_norm, softmax, log_softmax and their backward passes): "AVX512",
 * "AVX2" or "DEFAULT" (the build's baseline). Chosen from the CPU's features
 * when the library loads, capped by the environment variable OF_CPU_ISA
 * (avx512 | avx2 | default). Setting one the CPU lacks is an error. */
const char *of_get_cpu_capability(void);
of_status of_set_cpu_capability(const char *name);
/* 1 when the library was built with oneDNN (torch.backends.mkldnn.is_available()). */
int32_t of_mkldnn_is_available(void);
/* The kernels OpenBLAS runs ("SkylakeX", "Haswell", ...; "" when the BLAS
 * is not OpenBLAS). Where OpenBLAS fell back to its SSE3 "Prescott" kernels
 * on a CPU it does not know but that has AVX2 or AVX-512, the library asks
 * it for the matching ones when it loads, unless OPENBLAS_CORETYPE is set. */
const char *of_get_blas_core(void);

/* ---- dtypes ----------------------------------------------------------- */
const char *of_dtype_name(of_dtype t);          /* "float32", ... */
int32_t of_dtype_size(of_dtype t);
int32_t of_dtype_is_floating(of_dtype t);
int32_t of_dtype_is_complex(of_dtype t);        /* complex64, complex128 */
/* PyTorch's promotion table; -1 where PyTorch has none (uint16, uint32 and
 * uint64 with any other integer or bool dtype). */
of_dtype of_promote_types(of_dtype a, of_dtype b);

/* ---- memory ----------------------------------------------------------- */
typedef struct of_memory_stats {
  int64_t current_bytes;      /* bytes held by live tensors */
  int64_t peak_bytes;         /* high-water mark of current_bytes */
  int64_t cached_bytes;       /* freed blocks kept for reuse */
  int64_t alloc_count;        /* allocations served */
  int64_t cache_hits;         /* ... of which from the cache */
  int64_t bytes_since_sweep;  /* allocated since the last of_memory_mark */
} of_memory_stats;
const of_memory_stats *of_memory_stats_get(of_device dev);
void of_memory_mark(of_device dev);           /* zero bytes_since_sweep */
void of_memory_reset_peak(of_device dev);
void of_empty_cache(of_device dev);
/* Asks the CPU to bring [p, p + bytes) into its caches (prefetch hints, one
 * a 64-byte line): never faults, also where the range is not mapped, and
 * changes nothing. The Lua runtime warms its heap with it before a forced
 * full collection (lua/oneflow/_C.lua). */
void of_prefetch(const void *p, int64_t bytes);
/* Frees what the kernels keep for inference: the bfloat16/float16 copies of
 * parameters that autocast made (core/ops/amp.c), the convolution
 * weights oneDNN keeps reordered (core/device/dnnl.c), the int8
 * kernels' packed weights (core/ops/quant.c) and the Winograd weight
 * transforms (core/ops/winograd.c); flow.empty_cache() calls it before
 * of_empty_cache. */
void of_release_kernel_caches(void);

/* ---- devices (core/device/device.c; kernels in cuda/, liboneflow_cuda.so) ------
 * The CUDA library is loaded on first CUDA use (never at startup): a build
 * with CUDA runs every CPU feature on a machine without a GPU driver.
 * of_cuda_is_available() loads it and checks for a device; when it is 0,
 * of_cuda_why_unavailable() says why (not built, dlopen error, no driver, no
 * device). index -1: the current device. */
int32_t of_cuda_is_available(void);
const char *of_cuda_why_unavailable(void);
int32_t of_cuda_library_loaded(void);   /* 1 once loaded; never loads */
int32_t of_cuda_built(void);            /* 1 when this build has the CUDA part */
int32_t of_cuda_device_count(void);     /* 0 when unavailable */
of_status of_cuda_set_device(int32_t index);
int32_t of_cuda_current_device(void);
/* Waits for queued work; an asynchronous kernel error is reported here with
 * the op that launched it. */
of_status of_cuda_synchronize(int32_t index);
void of_cuda_set_allow_tf32(int32_t on);   /* matmul may use TF32 (default off) */
int32_t of_cuda_get_allow_tf32(void);
/* t on device dev (a copy, recorded for autograd; t itself when already
 * there). non_blocking: from pinned memory or to the GPU, the copy is queued
 * on the current stream. */
of_status of_to_device(of_tensor *t, of_device dev, int32_t non_blocking, of_tensor **out);
/* A copy of a CPU tensor in page-locked memory (cudaHostAlloc) when CUDA is
 * available, else a plain copy; of_tensor_is_pinned tells which. */
of_status of_pin_memory(of_tensor *t, of_tensor **out);
int32_t of_tensor_is_pinned(const of_tensor *t);
typedef struct of_stream of_stream;
typedef struct of_event of_event;
of_status of_stream_new(int32_t index, of_stream **out);
void of_stream_release(of_stream *s);
of_status of_stream_synchronize(of_stream *s);
int32_t of_stream_query(of_stream *s);          /* 1: all work done */
of_status of_set_stream(of_stream *s);           /* NULL: the default stream */
of_status of_stream_wait_event(of_stream *s, of_event *e);
of_status of_event_new(int32_t enable_timing, of_event **out);
void of_event_release(of_event *e);
of_status of_event_record(of_event *e, of_stream *s);   /* s NULL: current */
of_status of_event_synchronize(of_event *e);
int32_t of_event_query(of_event *e);
of_status of_event_elapsed_ms(of_event *start, of_event *end, double *out);
/* cuDNN, opened by the CUDA library on first use: "" when usable, else why
 * not (also when CUDA itself is unavailable); version 0 when not usable. */
const char *of_cudnn_why_unavailable(void);
int32_t of_cudnn_version(void);
/* flow.backends.cudnn: benchmark (time every algorithm once per shape),
 * deterministic algorithms only, TF32 for float32 convolutions (default on) */
void of_cudnn_set_flags(int32_t benchmark, int32_t deterministic, int32_t allow_tf32);
/* CUDA graphs: between capture_begin and capture_end the work queued on the
 * device's current stream is recorded (not run); replay launches it. */
typedef struct of_cuda_graph of_cuda_graph;
of_status of_cuda_graph_new(of_cuda_graph **out);
void of_cuda_graph_release(of_cuda_graph *g);
of_status of_cuda_graph_capture_begin(of_cuda_graph *g, int32_t index);
of_status of_cuda_graph_capture_end(of_cuda_graph *g);
of_status of_cuda_graph_replay(of_cuda_graph *g);

/* ---- tensor handles ---------------------------------------------------- */
void of_tensor_retain(of_tensor *t);
void of_tensor_release(of_tensor *t);
/* Release many at once (the Lua side frees collected handles in batches). */
void of_tensor_release_many(of_tensor **ts, int64_t n);

of_dtype of_tensor_dtype(const of_tensor *t);
of_device of_tensor_device(const of_tensor *t);
int32_t of_tensor_ndim(const of_tensor *t);
int64_t of_tensor_size(const of_tensor *t, int32_t dim);     /* dim 0-based */
int64_t of_tensor_stride(const of_tensor *t, int32_t dim);   /* elements */
const int64_t *of_tensor_shape(const of_tensor *t);
const int64_t *of_tensor_strides(const of_tensor *t);
int64_t of_tensor_numel(const of_tensor *t);
int64_t of_tensor_offset(const of_tensor *t);                /* elements */
int32_t of_tensor_is_contiguous(const of_tensor *t);
void *of_tensor_data(const of_tensor *t);        /* first element */
int64_t of_tensor_storage_id(const of_tensor *t);   /* equal => shared */
int64_t of_tensor_version(const of_tensor *t);

/* ---- creation (shape: int64_t[ndim]) ---------------------------------- */
of_status of_empty(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                   of_tensor **out);
of_status of_zeros(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                   of_tensor **out);
of_status of_full(const int64_t *shape, int32_t ndim, double value, of_dtype dt,
                  of_device dev, of_tensor **out);
of_status of_eye(int64_t n, int64_t m, of_dtype dt, of_device dev, of_tensor **out);
of_status of_arange(double start, double end, double step, of_dtype dt, of_device dev,
                    of_tensor **out);
of_status of_linspace(double start, double end, int64_t steps, of_dtype dt,
                      of_device dev, of_tensor **out);
/* Copy `n` doubles into a new tensor of dtype dt (values converted). */
of_status of_from_doubles(const double *values, const int64_t *shape, int32_t ndim,
                          of_dtype dt, of_tensor **out);
/* Copy a C buffer of dtype dt laid out contiguously. */
of_status of_from_buffer(const void *data, const int64_t *shape, int32_t ndim,
                         of_dtype dt, of_tensor **out);
/* Zero-copy: wrap caller memory (strides NULL = contiguous). The caller keeps
 * the memory alive; `deleter(data, ctx)` runs when the last view dies. */
typedef void (*of_deleter)(void *data, void *ctx);
of_status of_from_blob(void *data, const int64_t *shape, const int64_t *strides,
                       int32_t ndim, of_dtype dt, of_deleter deleter, void *ctx,
                       of_tensor **out);
/* Element read/write by linear (row-major logical) index, as doubles. */
of_status of_tensor_get_flat(const of_tensor *t, int64_t i, double *out);
of_status of_tensor_to_doubles(const of_tensor *t, double *buf, int64_t n);

/* ---- views (share storage) -------------------------------------------- */
of_status of_view(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out);
of_status of_reshape(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out);
of_status of_as_strided(of_tensor *t, const int64_t *shape, const int64_t *strides,
                        int32_t ndim, int64_t offset, of_tensor **out);
of_status of_transpose(of_tensor *t, int32_t d0, int32_t d1, of_tensor **out);
of_status of_permute(of_tensor *t, const int32_t *dims, int32_t ndim, of_tensor **out);
of_status of_narrow(of_tensor *t, int32_t dim, int64_t start, int64_t length,
                    of_tensor **out);
of_status of_slice(of_tensor *t, int32_t dim, int64_t start, int64_t end, int64_t step,
                   of_tensor **out);
of_status of_select(of_tensor *t, int32_t dim, int64_t index, of_tensor **out);
of_status of_unsqueeze(of_tensor *t, int32_t dim, of_tensor **out);
of_status of_squeeze(of_tensor *t, int32_t dim, of_tensor **out);   /* dim -100: all */
of_status of_expand(of_tensor *t, const int64_t *shape, int32_t ndim, of_tensor **out);
of_status of_flatten(of_tensor *t, int32_t start, int32_t end, of_tensor **out);
of_status of_contiguous(of_tensor *t, of_tensor **out);  /* t itself if contiguous */
of_status of_clone(of_tensor *t, of_tensor **out);
of_status of_to_dtype(of_tensor *t, of_dtype dt, of_tensor **out);  /* t if same */
/* dst <- src with broadcasting and dtype conversion. */
of_status of_copy_(of_tensor *dst, of_tensor *src);
of_status of_fill_(of_tensor *t, double value);

/* ---- elementwise ------------------------------------------------------- */
/* One table of binary ops (core/ops/binary.c); names from of_binary_name. */
typedef int32_t of_binary_op;
enum {
  OF_ADD = 0, OF_SUB, OF_MUL, OF_DIV, OF_POW, OF_MAXIMUM, OF_MINIMUM,
  OF_FLOOR_DIVIDE, OF_REMAINDER, OF_FMOD, OF_ATAN2,
  OF_EQ, OF_NE, OF_LT, OF_LE, OF_GT, OF_GE,
  OF_LOGICAL_AND, OF_LOGICAL_OR, OF_LOGICAL_XOR,
  OF_BITWISE_AND, OF_BITWISE_OR, OF_BITWISE_XOR,
  OF_NUM_BINARY
};
const char *of_binary_name(of_binary_op op);
/* result = a op b with broadcasting and type promotion. `into` may be NULL,
 * or a tensor to write into (in-place when it is `a`). */
of_status of_binary(of_binary_op op, of_tensor *a, of_tensor *b, of_tensor *into,
                    of_tensor **out);
/* a op s (reverse != 0: s op a). A number has PyTorch's "scalar" priority in
 * promotion: int tensor + 2.5 -> float32, float16 tensor * 2 -> float16. */
of_status of_binary_scalar(of_binary_op op, of_tensor *a, double s, int32_t reverse,
                           of_tensor *into, of_tensor **out);

typedef int32_t of_unary_op;
enum {
  OF_NEG = 0, OF_ABS, OF_EXP, OF_LOG, OF_SQRT, OF_RSQRT, OF_SIN, OF_COS, OF_TAN,
  OF_TANH, OF_SIGMOID, OF_RELU, OF_GELU, OF_GELU_TANH, OF_SILU, OF_FLOOR, OF_CEIL,
  OF_ROUND, OF_TRUNC, OF_SIGN, OF_RECIPROCAL, OF_SQUARE, OF_LOG2, OF_LOG10,
  OF_LOG1P, OF_EXPM1, OF_ASIN, OF_ACOS, OF_ATAN, OF_SINH, OF_COSH, OF_ERF,
  OF_ERFC, OF_SOFTPLUS, OF_MISH, OF_HARDSWISH, OF_HARDSIGMOID, OF_LOGICAL_NOT,
  OF_BITWISE_NOT, OF_ISNAN, OF_ISINF, OF_ISFINITE,
  OF_NUM_UNARY
};
const char *of_unary_name(of_unary_op op);
of_status of_unary(of_unary_op op, of_tensor *x, of_tensor *into, of_tensor **out);
/* flow.special's kernels (core/ops/special.c): fn names the function; y is
 * the second tensor of the two-input ones (zeta's q, gammainc's x, a
 * polynomial's degree n), NULL otherwise; p is polygamma's n. Computed in
 * float64, PyTorch's algorithms; CPU only. The OF_SP_D_* are derivatives
 * used by the backward rules. */
typedef int32_t of_special_fn;
enum {
  OF_SP_ERFCX = 0, OF_SP_ERFINV, OF_SP_GAMMALN, OF_SP_DIGAMMA, OF_SP_POLYGAMMA, OF_SP_I0,
  OF_SP_I0E, OF_SP_I1, OF_SP_I1E, OF_SP_NDTRI, OF_SP_LOG_NDTR, OF_SP_BESSEL_J0,
  OF_SP_BESSEL_J1, OF_SP_BESSEL_Y0, OF_SP_BESSEL_Y1, OF_SP_MODIFIED_BESSEL_I0,
  OF_SP_MODIFIED_BESSEL_I1, OF_SP_MODIFIED_BESSEL_K0, OF_SP_MODIFIED_BESSEL_K1,
  OF_SP_SCALED_MODIFIED_BESSEL_K0, OF_SP_SCALED_MODIFIED_BESSEL_K1, OF_SP_SPHERICAL_BESSEL_J0,
  OF_SP_AIRY_AI, OF_SP_ZETA, OF_SP_GAMMAINC, OF_SP_GAMMAINCC, OF_SP_CHEBYSHEV_T,
  OF_SP_CHEBYSHEV_U, OF_SP_CHEBYSHEV_V, OF_SP_CHEBYSHEV_W, OF_SP_SHIFTED_CHEBYSHEV_T,
  OF_SP_SHIFTED_CHEBYSHEV_U, OF_SP_SHIFTED_CHEBYSHEV_V, OF_SP_SHIFTED_CHEBYSHEV_W,
  OF_SP_HERMITE_H, OF_SP_HERMITE_HE, OF_SP_LAGUERRE_L, OF_SP_LEGENDRE_P,
  OF_SP_D_ERFCX, OF_SP_D_ERFINV, OF_SP_D_I0E, OF_SP_D_I1, OF_SP_D_I1E, OF_SP_D_NDTRI,
  OF_SP_D_LOG_NDTR, OF_SP_D_GAMMAINC,
  OF_NUM_SPECIAL
};
const char *of_special_name(of_special_fn fn);
int32_t of_special_arity(of_special_fn fn);   /* 1 or 2 tensor inputs; 0: unknown fn */
of_status of_special(of_special_fn fn, of_tensor *x, of_tensor *y, double p, of_tensor **out);

/* Complex tensors (core/ops/fft.c). view_as_real: complex [*] -> its
 * float (re, im) pairs [*, 2], a view; view_as_complex: the reverse (last
 * dim of size 2 and stride 1). */
of_status of_view_as_real(of_tensor *x, of_tensor **out);
of_status of_view_as_complex(of_tensor *x, of_tensor **out);
/* Discrete Fourier transforms over dims[ndims] (0-based, negative from the
 * end), PyTorch's primitives. norm: 0 none, 1 1/sqrt(N), 2 1/N (N the
 * product of the signal sizes). c2c: complex -> complex, forward (1: e^-)
 * or inverse (0: e^+). r2c: float32/float64 -> complex, forward sign, the
 * last of dims one-sided (n/2 + 1). c2r: one-sided complex -> real, inverse
 * sign, last_size the output size along the last of dims (the input there
 * must have last_size/2 + 1 entries). */
of_status of_fft_c2c(of_tensor *x, const int32_t *dims, int32_t ndims, int32_t forward,
                     int32_t norm, of_tensor **out);
of_status of_fft_r2c(of_tensor *x, const int32_t *dims, int32_t ndims, int32_t norm,
                     of_tensor **out);
of_status of_fft_c2r(of_tensor *x, const int32_t *dims, int32_t ndims, int32_t norm,
                     int64_t last_size, of_tensor **out);
/* Clamp to [lo, hi]; has_lo/has_hi say which bounds apply. */
of_status of_clamp(of_tensor *x, double lo, double hi, int32_t has_lo, int32_t has_hi,
                   of_tensor *into, of_tensor **out);
of_status of_leaky_relu(of_tensor *x, double slope, of_tensor *into, of_tensor **out);
/* where(cond, a, b); cond is bool (or converted), a/b promoted. */
of_status of_where(of_tensor *cond, of_tensor *a, of_tensor *b, of_tensor **out);
of_status of_masked_fill(of_tensor *x, of_tensor *mask, double value, of_tensor *into,
                         of_tensor **out);

/* ---- reductions (core/ops/reduce.c) ------------------------------------ */
typedef int32_t of_reduce_op;
enum {
  OF_RED_SUM = 0, OF_RED_MEAN, OF_RED_PROD, OF_RED_AMAX, OF_RED_AMIN,
  OF_RED_ALL, OF_RED_ANY, OF_RED_LOGSUMEXP, OF_RED_NORM,
  OF_NUM_REDUCE
};
const char *of_reduce_name(of_reduce_op op);
/* Reduce over dims[0..ndims) (ndims == 0: all dims). `p` is the norm order
 * (OF_RED_NORM only: 1, 2, inf = HUGE_VAL, ...). dt < 0 keeps the default
 * result dtype (sum of ints -> int64, all/any -> bool). */
of_status of_reduce(of_reduce_op op, of_tensor *x, const int32_t *dims, int32_t ndims,
                    int32_t keepdim, double p, of_dtype dt, of_tensor **out);
/* values and indices of max (is_max) or min along dim. */
of_status of_max_dim(of_tensor *x, int32_t dim, int32_t keepdim, int32_t is_max,
                     int64_t index_base, of_tensor **values, of_tensor **indices);
of_status of_argmax(of_tensor *x, int32_t dim, int32_t keepdim, int32_t is_max,
                    int64_t index_base, of_tensor **out);   /* dim -100: flat */
/* Variance with `correction` (1 = unbiased); is_std takes the square root. */
of_status of_var(of_tensor *x, const int32_t *dims, int32_t ndims, double correction,
                 int32_t keepdim, int32_t is_std, of_tensor **out);
of_status of_softmax(of_tensor *x, int32_t dim, int32_t log, of_tensor **out);
of_status of_cumulative(of_tensor *x, int32_t dim, int32_t is_prod, of_tensor **out);

/* ---- linear algebra (core/ops/matmul.c) -------------------------------- */
/* PyTorch matmul semantics: 1-D x 1-D dot, 2-D mm, batched with broadcast. */
of_status of_matmul(of_tensor *a, of_tensor *b, of_tensor **out);
of_status of_mm(of_tensor *a, of_tensor *b, of_tensor *into, of_tensor **out);
of_status of_bmm(of_tensor *a, of_tensor *b, of_tensor **out);
/* beta * c + alpha * (a @ b) */
of_status of_addmm(of_tensor *c, of_tensor *a, of_tensor *b, double beta, double alpha,
                   of_tensor **out);

/* ---- flow.linalg kernels (core/ops/linalg_ext.c) ----------------------
 * float32/float64 CPU tensors, batched over leading dims; A: (..., n, n).
 * No autograd history is recorded (the Lua side adds the backward rules).
 * Singular or non-positive-definite inputs fail with torch's messages. */
of_status of_linalg_inv(of_tensor *a, of_tensor **out);             /* (..., n, n) */
of_status of_linalg_det(of_tensor *a, of_tensor **out);             /* (...) */
of_status of_linalg_slogdet(of_tensor *a, of_tensor **sign, of_tensor **logabsdet);
/* A X = B; b: (..., n, k) with A's batch dims -> X (..., n, k) */
of_status of_linalg_solve(of_tensor *a, of_tensor *b, of_tensor **out);
/* lower L with A = L L^T (upper != 0: U = L^T); reads A's lower triangle */
of_status of_linalg_cholesky(of_tensor *a, int32_t upper, of_tensor **out);
/* singular values (..., min(m, n)), descending, of a (..., m, n) */
of_status of_linalg_svdvals(of_tensor *a, of_tensor **out);
/* eigenvalues L (..., n) ascending and eigenvectors V (..., n, n) (columns)
 * of symmetric A; reads the upper (upper != 0) or lower triangle; v NULL:
 * eigenvalues only (eigvalsh) */
of_status of_linalg_eigh(of_tensor *a, int32_t upper, of_tensor **l, of_tensor **v);
/* eigenvalues L (..., n) and eigenvectors V (..., n, n) (unit columns) of a
 * general real A, both complex (complex64 for float32 A, complex128 for
 * float64), in LAPACK dgeev's order; non-finite A fails; v NULL: eigenvalues
 * only (eigvals). No autograd (flow.linalg.eig adds torch's rule in Lua). */
of_status of_linalg_eig(of_tensor *a, of_tensor **l, of_tensor **v);
/* A = QR; mode 0 reduced, 1 complete, 2 r (q: an empty tensor) */
of_status of_linalg_qr(of_tensor *a, int32_t mode, of_tensor **q, of_tensor **r);
/* A = U diag(S) Vh; full != 0: U (..., m, m), Vh (..., n, n), else thin */
of_status of_linalg_svd(of_tensor *a, int32_t full, of_tensor **u, of_tensor **s,
                        of_tensor **vh);
/* LU with partial pivoting of a (..., m, n): lu (..., m, n) holding L (unit
 * lower, below the diagonal) and U, pivots int32 (..., min(m, n)) 1-based,
 * info int32 (...) (k > 0: U[k, k] is zero). No autograd. */
of_status of_linalg_lu_factor(of_tensor *a, of_tensor **lu, of_tensor **pivots,
                              of_tensor **info);
/* Bunch-Kaufman LDL^T of symmetric a (..., n, n) from its lower triangle
 * (LAPACK dsytrf): ld (..., n, n), pivots int32 (..., n) (LAPACK's: negative
 * for 2 x 2 blocks), info int32 (...). No autograd. */
of_status of_linalg_ldl_factor(of_tensor *a, of_tensor **ld, of_tensor **pivots,
                               of_tensor **info);
/* X with A X = B from ldl_factor's ld, pivots; b (..., n, k) with their batch dims */
of_status of_linalg_ldl_solve(of_tensor *ld, of_tensor *pivots, of_tensor *b, of_tensor **out);

/* ---- shape and index ops (core/ops/index.c, core/ops/shape.c) ---------- */
of_status of_cat(of_tensor **ts, int32_t n, int32_t dim, of_tensor **out);
of_status of_stack(of_tensor **ts, int32_t n, int32_t dim, of_tensor **out);
of_status of_gather(of_tensor *x, int32_t dim, of_tensor *index, int64_t index_base,
                    of_tensor **out);
/* reduce: 0 replace, 1 add. `into` NULL: out-of-place on a clone of x. */
of_status of_scatter(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src,
                     double value, int32_t use_value, int32_t reduce,
                     int64_t index_base, of_tensor *into, of_tensor **out);
of_status of_index_select(of_tensor *x, int32_t dim, of_tensor *index,
                          int64_t index_base, of_tensor **out);
of_status of_index_add(of_tensor *x, int32_t dim, of_tensor *index, of_tensor *src,
                       double alpha, int64_t index_base, of_tensor *into,
                       of_tensor **out);
of_status of_sort(of_tensor *x, int32_t dim, int32_t descending, int32_t stable,
                  int64_t index_base, of_tensor **values, of_tensor **indices);
of_status of_topk(of_tensor *x, int64_t k, int32_t dim, int32_t largest,
                  int32_t sorted, int64_t index_base, of_tensor **values,
                  of_tensor **indices);
/* diagonal offset k; upper != 0: triu */
of_status of_tri(of_tensor *x, int64_t k, int32_t upper, of_tensor **out);
of_status of_flip(of_tensor *x, const int32_t *dims, int32_t ndims, of_tensor **out);
of_status of_roll(of_tensor *x, const int64_t *shifts, const int32_t *dims,
                  int32_t n, of_tensor **out);   /* n == 0 dims: flattened */
of_status of_repeat(of_tensor *x, const int64_t *repeats, int32_t n, of_tensor **out);
of_status of_one_hot(of_tensor *index, int64_t num_classes, int64_t index_base,
                     of_tensor **out);
of_status of_masked_select(of_tensor *x, of_tensor *mask, of_tensor **out);
of_status of_nonzero(of_tensor *x, int64_t index_base, of_tensor **out);

/* ---- random (core/ops/random.c): Philox4x32-10, counter based --------------- */
void of_manual_seed(uint64_t seed);
uint64_t of_initial_seed(void);
/* The generator state is (seed, offset); saving and restoring it replays. */
void of_rng_get_state(uint64_t *seed, uint64_t *offset);
void of_rng_set_state(uint64_t seed, uint64_t offset);
of_status of_uniform_(of_tensor *t, double lo, double hi);
of_status of_normal_(of_tensor *t, double mean, double std);
of_status of_randint_(of_tensor *t, int64_t lo, int64_t hi);      /* [lo, hi) */
of_status of_bernoulli(of_tensor *p, of_tensor **out);            /* p in [0,1] */
of_status of_bernoulli_(of_tensor *t, double p);
/* Dropout in one pass: out = x * keep / (1 - p), mask = keep (bool), p in
 * [0, 1]; element i keeps when the float32 uniform_ draw for element i from
 * the same generator state is >= p. */
of_status of_dropout(of_tensor *x, double p, of_tensor **out, of_tensor **mask);
of_status of_randperm(int64_t n, int64_t index_base, of_dtype dt, of_tensor **out);
/* New tensors from U[0, 1) and N(0, 1) (floating dt). */
of_status of_rand(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                  of_tensor **out);
of_status of_randn(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                   of_tensor **out);

/* ---- autograd (core/tensor/tape.c, core/autograd/engine.c) ---------------------------------------- */
typedef struct of_node of_node;
int32_t of_is_grad_enabled(void);                  /* thread-local */
void of_set_grad_enabled(int32_t on);
int32_t of_tensor_requires_grad(const of_tensor *t);
of_status of_tensor_set_requires_grad(of_tensor *t, int32_t on);  /* leaves only */
int32_t of_tensor_is_leaf(const of_tensor *t);
of_tensor *of_tensor_grad(const of_tensor *t);       /* borrowed; NULL if none */
of_status of_tensor_set_grad(of_tensor *t, of_tensor *g);   /* g NULL clears */
of_node *of_tensor_grad_fn(const of_tensor *t);      /* borrowed; NULL for leaves */
/* A leaf's grad accumulator while some graph uses it (borrowed; else NULL). */
of_node *of_tensor_grad_accumulator(const of_tensor *t);
const char *of_node_name(const of_node *n);
int32_t of_node_num_next(const of_node *n);
of_node *of_node_next(const of_node *n, int32_t i);  /* NULL: input needs no grad */
/* A view of t's data with no history. */
of_status of_detach(of_tensor *t, of_tensor **out);
/* Accumulates d(roots)/d(leaf) into every leaf's grad. grads[i] may be NULL
 * for a scalar root (ones). */
of_status of_backward(of_tensor **roots, of_tensor **grads, int32_t n, int32_t retain_graph,
                      int32_t create_graph);
/* Autocast (flow.amp.autocast, thread-local): while enabled, matmul, mm,
 * bmm, addmm and convolutions cast floating inputs (not float64) to dt
 * (OF_FLOAT16 or OF_BFLOAT16); reductions, softmax, cumsum, losses and norms
 * cast float16/bfloat16 inputs to float32; other ops follow their inputs.
 * Off inside backward rules and compiled graphs. */
of_status of_set_autocast(int32_t enabled, of_dtype dt);
int32_t of_autocast_enabled(void);
of_dtype of_autocast_dtype(void);
/* The same per device type (OF_CPU, OF_CUDA): each device has its own state,
 * as in PyTorch; an op casts by the state of its inputs' device.
 * of_set_autocast / of_autocast_enabled / of_autocast_dtype are the CPU's. */
of_status of_set_autocast_device(int32_t device_type, int32_t enabled, of_dtype dt);
int32_t of_autocast_enabled_device(int32_t device_type);
of_dtype of_autocast_dtype_device(int32_t device_type);
/* d(outputs)/d(inputs) into grads[nin] (NULL: unused, with allow_unused). */
of_status of_autograd_grad(of_tensor **outputs, of_tensor **grad_outputs, int32_t nout,
                           of_tensor **inputs, int32_t nin, int32_t retain_graph,
                           int32_t create_graph, int32_t allow_unused, of_tensor **grads);
/* The host (Lua) runs hooks and custom Functions: `fn(id, ins, nin, outs, nout)`
 * gets borrowed inputs and stores new (owned) outputs. It is only called
 * from inside of_backward / of_autograd_grad. Ids the C side has dropped
 * are queued; of_host_take_released moves up to cap of them into ids. */
typedef of_status (*of_host_fn)(int64_t id, of_tensor **ins, int32_t nin, of_tensor **outs,
                                int32_t nout);
void of_set_host_callback(of_host_fn fn);
int32_t of_host_take_released(int64_t *ids, int32_t cap);
/* Hook `id` runs on the grad of t when it is computed; it may replace it. */
of_status of_tensor_add_hook(of_tensor *t, int64_t id);
/* Attaches a backward node to outputs that calls host function `id` with the
 * output grads and expects the input grads. */
of_status of_custom_function(int64_t id, const char *name, of_tensor **inputs, int32_t nin,
                             of_tensor **outputs, int32_t nout);

/* ---- nn kernels: conv and pooling (core/ops/conv.c, core/ops/pool.c) ---- */
/* Convolution over nsp = 1, 2 or 3 spatial dims: x [N, C_in, *spatial],
 * w [C_out, C_in/groups, *kernel], b [C_out] or NULL. stride, padding and
 * dilation are int64_t[nsp] (NULL: 1, 0, 1). */
of_status of_conv(of_tensor *x, of_tensor *w, of_tensor *b, const int64_t *stride,
                  const int64_t *padding, const int64_t *dilation, int32_t nsp,
                  int64_t groups, of_tensor **out);
/* Transposed convolution (the input grad of of_conv): x [N, C_in, *spatial],
 * w [C_in, C_out/groups, *kernel], b [C_out] or NULL; output size
 * (in-1)*stride - 2*padding + dilation*(k-1) + 1 + output_padding. */
of_status of_conv_transpose(of_tensor *x, of_tensor *w, of_tensor *b, const int64_t *stride,
                            const int64_t *padding, const int64_t *output_padding,
                            const int64_t *dilation, int32_t nsp, int64_t groups,
                            of_tensor **out);
/* Grad of of_conv w.r.t. its weight: x [N, C_in, *in], grad_out
 * [N, C_out, *out] -> [C_out, C_in/groups, *kernel_size]. */
of_status of_conv_weight_grad(of_tensor *x, of_tensor *grad_out, const int64_t *kernel_size,
                              const int64_t *stride, const int64_t *padding,
                              const int64_t *dilation, int32_t nsp, int64_t groups,
                              of_tensor **out);
/* ---- int8 kernels (core/ops/quant.c; flow.quantization) ----
 * x holds uint8/int8 values with x_scale/x_zero_point (a quantized tensor's
 * int_repr), w int8 [out, in] (linear) or [O, C/groups, kh, kw] (conv2d)
 * with float32 scales w_scale and int64 zero points w_zero_point (1 value:
 * per tensor, or one per output channel; w_zero_point NULL: 0), bias float32
 * [out] or NULL. Accumulates exactly in int32; out_dtype float32 gives
 * acc * x_scale * w_scale + bias (out_scale/out_zero_point unused), uint8 or
 * int8 requantises to out_scale/out_zero_point (saturating). relu != 0 fuses
 * a ReLU. stride, padding, dilation: int64_t[2] (NULL: 1, 0, 1). */
of_status of_quantized_linear(of_tensor *x, of_tensor *w, of_tensor *w_scale, of_tensor *w_zero_point,
                              of_tensor *bias, double x_scale, int64_t x_zero_point,
                              double out_scale, int64_t out_zero_point, of_dtype out_dtype,
                              int32_t relu, of_tensor **out);
of_status of_quantized_conv2d(of_tensor *x, of_tensor *w, of_tensor *w_scale,
                              of_tensor *w_zero_point, of_tensor *bias, const int64_t *stride,
                              const int64_t *padding, const int64_t *dilation, int64_t groups,
                              double x_scale, int64_t x_zero_point, double out_scale,
                              int64_t out_zero_point, of_dtype out_dtype, int32_t relu,
                              of_tensor **out);
/* The int8 gemm behind quantized_linear/conv2d: 0 auto (the own AVX2 /
 * AVX-512 VNNI / scalar kernels: measured faster, core/ops/quant.c), 1 the
 * own kernels, 2 oneDNN's int8 matmul where the build has it and it can run.
 * set < 0 only reads. Returns the setting. */
int32_t of_quantized_backend(int32_t set);
/* Max pooling of uint8/int8 integers [N, C, H, W] (a quantized tensor's
 * int_repr; exact). kernel, stride, padding, dilation: int64_t[2] (stride
 * NULL: the kernel; padding NULL: 0; dilation NULL: 1). */
of_status of_quantized_max_pool2d(of_tensor *x, const int64_t *kernel, const int64_t *stride,
                                  const int64_t *padding, const int64_t *dilation, of_tensor **out);
/* float32 x -> its uint8/int8 (dtype) integers clamp(zero_point + rint(x /
 * scale)), ties to even, NaN -> zero_point: one pass (quantize_per_tensor). */
of_status of_quantize_per_tensor(of_tensor *x, double scale, int64_t zero_point, of_dtype dtype,
                                 of_tensor **out);
/* A linear layer on float32 x [..., in] with int8 weights (dynamic
 * quantization; PyTorch's quantized::linear_dynamic): at every call x's own
 * range gives its uint8 scale and zero point (fbgemm's
 * ChooseQuantizationParams over 0..255, or 0..127 with reduce_range), x is
 * quantized with them and multiplied in exact int32 with w [out, in]
 * (w_scale, w_zero_point as of_quantized_linear's; w_zero_point and bias
 * may be NULL); the result is float32 [..., out]. NaN or infinite input is
 * an error. Recorded in graphs as one node, so a saved graph chooses the
 * input's parameters at each run too. */
of_status of_dynamic_quantized_linear(of_tensor *x, of_tensor *w, of_tensor *w_scale,
                                      of_tensor *w_zero_point, of_tensor *bias, int32_t reduce_range,
                                      of_tensor **out);
/* The smallest and largest value of a float32 tensor in one pass (the range
 * that dynamic quantization chooses its scale from): 0 and 0 when empty,
 * NaN for both when x holds a NaN. */
of_status of_quant_range(of_tensor *x, double *min, double *max);
/* The sum of two per-tensor quantized tensors of one shape (their uint8 /
 * int8 integers a, b with scales and zero points), ReLU'd when relu is set,
 * as out_dtype integers of out_scale / out_zero_point:
 *   clamp(rint(relu((a - a_zp) * a_scale + (b - b_zp) * b_scale) / out_scale) + out_zp)
 * each step in float32 as dequantize, add, relu and quantize_per_tensor
 * compute it, in one pass (quantized_add; PyTorch's quantized::add[_relu]). */
of_status of_quantized_add(of_tensor *a, of_tensor *b, double a_scale, int64_t a_zero_point,
                           double b_scale, int64_t b_zero_point, double out_scale,
                           int64_t out_zero_point, of_dtype out_dtype, int32_t relu, of_tensor **out);
/* Pooling over the last nsp dims of x ([N, C, *spatial] or [C, *spatial]).
 * stride NULL: the kernel size. Indices (int64) point into each flattened
 * input plane, plus index_base. */
of_status of_max_pool(of_tensor *x, const int64_t *kernel, const int64_t *stride,
                      const int64_t *padding, const int64_t *dilation, int32_t nsp,
                      int32_t ceil_mode, int64_t index_base, of_tensor **values,
                      of_tensor **indices);
/* divisor_override <= 0: none. */
of_status of_avg_pool(of_tensor *x, const int64_t *kernel, const int64_t *stride,
                      const int64_t *padding, int32_t nsp, int32_t ceil_mode,
                      int32_t count_include_pad, int64_t divisor_override, of_tensor **out);
of_status of_adaptive_avg_pool(of_tensor *x, const int64_t *output_size, int32_t nsp,
                               of_tensor **out);
of_status of_adaptive_max_pool(of_tensor *x, const int64_t *output_size, int32_t nsp,
                               int64_t index_base, of_tensor **values, of_tensor **indices);

/* ---- nn kernels: norms, resampling, losses ------------------------------
 * (core/ops/norm.c, core/ops/resample.c, core/ops/loss.c). Optional tensors
 * are NULL. Forward and backward are fused C kernels, recorded in autograd;
 * statistics accumulate in double. */
/* x [N, C, *]; running_mean/running_var [C] (training: updated in place,
 * running_var from the unbiased batch variance; else used to normalise);
 * weight/bias [C]. */
of_status of_batch_norm(of_tensor *x, of_tensor *running_mean, of_tensor *running_var,
                        of_tensor *weight, of_tensor *bias, int32_t training,
                        double momentum, double eps, of_tensor **out);
/* of_batch_norm with training 0 (running_mean and running_var needed), then
 * a clamp to [lo, hi] where has_lo / has_hi, as of_clamp: the same numbers,
 * written into `into` (x itself: in place) or a new tensor. */
of_status of_batch_norm_eval(of_tensor *x, of_tensor *running_mean, of_tensor *running_var,
                             of_tensor *weight, of_tensor *bias, double eps, double lo, double hi,
                             int32_t has_lo, int32_t has_hi, of_tensor *into, of_tensor **out);
/* Over the last normalized_ndim dims; weight/bias have that trailing shape. */
of_status of_layer_norm(of_tensor *x, int32_t normalized_ndim, of_tensor *weight,
                        of_tensor *bias, double eps, of_tensor **out);
/* x * rsqrt(mean(x^2 over the last normalized_ndim dims) + eps) * weight
 * (PyTorch 2.4's rms_norm; weight NULL or of the trailing shape; eps >= 0). */
of_status of_rms_norm(of_tensor *x, int32_t normalized_ndim, of_tensor *weight, double eps,
                      of_tensor **out);
/* x [N, C, *], C divisible by groups; weight/bias [C]. */
of_status of_group_norm(of_tensor *x, int64_t groups, of_tensor *weight, of_tensor *bias,
                        double eps, of_tensor **out);
/* Statistics per (sample, channel) when use_input_stats (running stats [C],
 * if given, get their batch average), else batch_norm with the running ones. */
of_status of_instance_norm(of_tensor *x, of_tensor *running_mean, of_tensor *running_var,
                           of_tensor *weight, of_tensor *bias, int32_t use_input_stats,
                           double momentum, double eps, of_tensor **out);
typedef int32_t of_interp_mode;
enum { OF_INTERP_NEAREST = 0, OF_INTERP_LINEAR = 1 };   /* linear: (bi/tri)linear */
/* x [N, C, *spatial] with nsp = 1..3 spatial dims -> [N, C, *size].
 * scales[nsp] (NULL or <= 0: in/out) are the caller's scale factors, used
 * for the source index as PyTorch does; align_corners for linear only. */
of_status of_interpolate(of_tensor *x, const int64_t *size, const double *scales,
                         int32_t nsp, of_interp_mode mode, int32_t align_corners,
                         of_tensor **out);
typedef int32_t of_pad_mode;
enum { OF_PAD_CONSTANT = 0, OF_PAD_REFLECT = 1, OF_PAD_REPLICATE = 2, OF_PAD_CIRCULAR = 3 };
/* pad[2 * npad] in PyTorch's order: (left, right) of the last dim, then of
 * the one before, ... Constant padding may be negative (crops). */
of_status of_pad(of_tensor *x, const int64_t *pad, int32_t npad, of_pad_mode mode,
                 double value, of_tensor **out);
typedef int32_t of_loss_reduction;
enum { OF_LOSS_NONE = 0, OF_LOSS_MEAN = 1, OF_LOSS_SUM = 2 };
/* logits [N, C, *] or [C]. target: integer class indices [N, *] (or 0-d)
 * counted from index_base, ignore_index in the same base; or floating class
 * probabilities shaped like logits. weight [C]. Mean of class indices
 * divides by the summed weights of the targets not ignored. */
of_status of_cross_entropy(of_tensor *logits, of_tensor *target, of_tensor *weight,
                           of_loss_reduction reduction, int64_t ignore_index,
                           double label_smoothing, int64_t index_base, of_tensor **out);
/* log_probs [N, C, *] or [C]; target and weight as for cross_entropy. */
of_status of_nll_loss(of_tensor *log_probs, of_tensor *target, of_tensor *weight,
                      of_loss_reduction reduction, int64_t ignore_index, int64_t index_base,
                      of_tensor **out);
/* Fused attention (core/ops/attention.c): softmax(q k^T * scale + mask) v.
 * q [..., L, E], k [..., S, E], v [..., S, Ev] with equal leading dims, or
 * with enable_gqa the dim before L may differ: Hq heads of q share Hk heads
 * of k/v (Hq a multiple of Hk). attn_mask (or NULL) broadcasts to
 * [..., L, S]: boolean (true = attend) or floating (added). is_causal masks
 * key j > query i (top-left aligned). dropout_p in [0, 1) drops weights
 * with the process generator. out [..., L, Ev] of q's dtype. */
of_status of_scaled_dot_product_attention(of_tensor *q, of_tensor *k, of_tensor *v,
                                          of_tensor *attn_mask, double dropout_p,
                                          int32_t is_causal, double scale, int32_t enable_gqa,
                                          of_tensor **out);


/* ---- processes and communicators (core/dist/) ---------------------------
 * A process started by mpirun or srun (PMI/PMIx in its environment) joins
 * the MPI world on first use through liboneflow_mpi.so; any other process is
 * a world of one. An srun task without PMI in a step of several tasks is an
 * error (not N worlds of one), and so is an MPI world that disagrees with
 * SLURM_PROCID / SLURM_STEP_NUM_TASKS. Collectives are called by every member of the
 * communicator in the same order; they work on CPU tensors of any dtype
 * (float16/bfloat16 reduce in float32, bool sums are logical or). A call
 * that does not complete within the timeout (OF_DIST_TIMEOUT, default 60 s)
 * fails with a message naming the ranks that did not take part, and the
 * communicator is unusable afterwards. Results of gathers are 1-D. */
typedef struct of_comm of_comm;
typedef int32_t of_comm_op;
enum { OF_COMM_SUM = 0, OF_COMM_MAX = 1, OF_COMM_MIN = 2 };
of_status of_dist_init(void);                  /* idempotent; others call it */
const char *of_dist_backend(void);             /* "self", "mpi" or "none" (failed) */
int32_t of_dist_rank(void);
int32_t of_dist_world_size(void);
int32_t of_dist_local_rank(void);              /* rank among processes on this host */
double of_dist_get_timeout(void);
of_status of_dist_set_timeout(double seconds);
/* What the launcher's environment says, read without starting MPI.
 * launcher: "mpirun" (Open MPI's OMPI_COMM_WORLD_*), "slurm" (an srun task:
 * SLURM_PROCID with SLURM_STEP_NUM_TASKS, or SLURM_NTASKS inside a step),
 * "pmi" (PMI/PMIx only) or "none". -1: not given. pmi: 1 when MPI can wire
 * up from it (PMI_*, PMIX_*, or mpirun). A malformed value is OF_ERR_ARG. */
typedef struct of_dist_launch {
  char launcher[16];
  int32_t rank, size, local_rank, node_rank, nodes;
  int32_t pmi;
} of_dist_launch;
of_status of_dist_launch_info(of_dist_launch *out);
/* What the caller is doing (e.g. a global op's name): named in errors and in
 * timeout reports; NULL clears. */
of_status of_dist_set_label(const char *text);
int32_t of_dist_device_backend_loaded(void);   /* 1 once NCCL was loaded for a CUDA collective */
of_status of_comm_world(of_comm **out);        /* borrowed; lives as long as the process */
/* Called by the members only: ranks[n] of parent, in the new group's order. */
of_status of_comm_new_group(of_comm *parent, const int32_t *ranks, int32_t n,
                            of_comm **out);
void of_comm_release(of_comm *c);
int32_t of_comm_rank(const of_comm *c);
int32_t of_comm_size(const of_comm *c);
of_status of_comm_barrier(of_comm *c);
of_status of_comm_all_reduce(of_comm *c, of_tensor *t, of_comm_op op);       /* in place */
/* Into a new tensor of x's shape and dtype; x unchanged. */
of_status of_comm_all_reduce_to(of_comm *c, of_tensor *x, of_comm_op op, of_tensor **out);
of_status of_comm_broadcast(of_comm *c, of_tensor *t, int32_t root);         /* in place */
/* counts[size]: elements each rank gives (NULL: all numel(x)) -> [sum]. */
of_status of_comm_all_gather(of_comm *c, of_tensor *x, const int64_t *counts,
                             of_tensor **out);
/* x holds sum(counts) elements (NULL: equal parts); out gets counts[rank]. */
of_status of_comm_reduce_scatter(of_comm *c, of_tensor *x, const int64_t *counts,
                                 of_comm_op op, of_tensor **out);
/* Part i of x (send_counts[i] elements, in order) goes to rank i; out holds
 * what each rank sent here, rank order (NULL counts: equal parts). */
of_status of_comm_all_to_all(of_comm *c, of_tensor *x, const int64_t *send_counts,
                             const int64_t *recv_counts, of_tensor **out);
of_status of_comm_send(of_comm *c, of_tensor *x, int32_t dst, int32_t tag);
of_status of_comm_recv(of_comm *c, of_tensor *into, int32_t src, int32_t tag);
/* Nonblocking in-place all-reduce: returns at once; t holds the result once
 * of_comm_wait returns or of_comm_test sets *done (either frees the request;
 * every request must end in one of them). Ranks start requests in the same
 * order. Leave t alone meanwhile. */
typedef struct of_comm_request of_comm_request;
of_status of_comm_iall_reduce(of_comm *c, of_tensor *t, of_comm_op op,
                              of_comm_request **out);
of_status of_comm_test(of_comm_request *r, int32_t *done);
of_status of_comm_wait(of_comm_request *r);


/* ---- image IO (core/io/image.c) -----------------------------------------
 * JPEG through libjpeg(-turbo), PNG through libpng. Images are uint8
 * [H, W, C]: JPEG gives C = 1 (grey) or 3 (RGB; CMYK is converted); PNG gives
 * 1 (grey), 2 (grey + alpha), 3 (RGB) or 4 (RGBA): palettes expand to RGB,
 * tRNS transparency to an alpha channel, 16-bit samples are scaled to 8.
 * Corrupt or truncated data gives OF_ERR_IO; an image over the limits (by
 * default sides above 32768 or more than 1 GiB of decoded bytes H * W * C;
 * of_image_read: a file over 1 GiB) gives OF_ERR_ARG, before its pixels are
 * allocated; a build without the library gives OF_ERR_STATE ("built without
 * libjpeg"). */
typedef int32_t of_image_format;
enum { OF_IMAGE_PNG = 0, OF_IMAGE_JPEG = 1 };
/* 1 when this build can decode and encode the format. */
int32_t of_image_supported(of_image_format fmt);
/* The format is found from the data's signature. */
of_status of_image_decode(const uint8_t *data, int64_t n, of_tensor **out);
of_status of_image_read(const char *path, of_tensor **out);
/* img uint8 [H, W, C] or [H, W] -> the file's bytes as uint8 [n]. quality:
 * JPEG 1..100 (<= 0: 75); PNG ignores it (zlib level 6). */
of_status of_image_encode(of_tensor *img, of_image_format fmt, int32_t quality,
                          of_tensor **out);
/* Format from the extension: .png, .jpg or .jpeg (any case). */
of_status of_image_write(const char *path, of_tensor *img, int32_t quality);
/* The limits decoding and encoding check (process-wide, safe to change while
 * other threads decode): the longest side (1..2^31-1), the decoded bytes
 * H * W * C and the size of a file of_image_read reads (1..2^48 each); 0
 * keeps a limit as it is. get: any pointer may be NULL. */
of_status of_image_set_limits(int64_t max_side, int64_t max_bytes, int64_t max_file_bytes);
void of_image_get_limits(int64_t *max_side, int64_t *max_bytes, int64_t *max_file_bytes);


/* ---- the op schema (core/ops/ops.def) ------------------------------------
 * One row per op kind, in kind order: the name graphs record and save, the
 * C struct of its attribute record and its size (-1: variable), tensor
 * inputs (min..max), outputs (-1: from the record), OF_OPF_* flags (1
 * elementwise, 2 random, 4 view, 8 creation, 16 uninitialised, 32 opaque,
 * 64 variable inputs, 128 writes into a given output, 256 collective, 512
 * variable record), the family file core/ops/<family>.c, and whether only
 * the graph compiler makes it. Lua reads it as flow._C.op_schema(). */
typedef struct of_op_info {
  const char *name, *attrs, *family;
  int32_t attr_size, min_inputs, max_inputs, outputs;
  uint32_t flags;
  int32_t graph_only;
} of_op_info;
int32_t of_op_schema_count(void);
of_status of_op_schema(int32_t op, of_op_info *out);
/* The text graphs print for an op's attribute record ("add", "dim=1" ...);
 * "" where the op has no description or size is not the record's size. */
of_status of_op_describe(int32_t op, const void *attrs, int32_t size, char *buf, int32_t cap);

/* ---- the op profiler (core/dispatch/profile.c; Lua: flow.profiler) ------
 * While on, every public op this thread runs (also inside other ops, in
 * backward rules and in nn.Graph runs on this thread) appends an event:
 * the op kind, its nesting depth (0: called by the host), start and end
 * on CLOCK_MONOTONIC, the CPU allocator's bytes served during the op and
 * the change of CPU bytes held by live tensors, and with OF_PROF_SHAPES
 * the shapes and dtypes of its first OF_PROF_MAX_INPUTS inputs. When off,
 * an op pays nothing more than before (one thread-local load). Events stay
 * readable until the next of_profiler_start. */
enum { OF_PROF_SHAPES = 1, OF_PROF_MAX_INPUTS = 4, OF_PROF_ATTR_BYTES = 160 };
typedef struct of_prof_event {
  int32_t op, depth;
  int64_t start_ns, end_ns;
  int64_t bytes_allocated;    /* CPU allocator bytes served while it ran */
  int64_t bytes_net;          /* change of CPU bytes held by live tensors */
  int32_t nin, nout;
  int32_t backward;           /* run by the autograd engine */
  int32_t attr_size;          /* the record's size (copied when <= OF_PROF_ATTR_BYTES) */
  int32_t in_ndim[OF_PROF_MAX_INPUTS];    /* -1: no tensor there */
  int32_t in_dtype[OF_PROF_MAX_INPUTS];
  int64_t in_shape[OF_PROF_MAX_INPUTS][OF_MAX_DIMS];
  int32_t out_dtype, out_device;
  uint8_t attrs[OF_PROF_ATTR_BYTES];
} of_prof_event;
of_status of_profiler_start(int32_t flags);    /* on this thread; clears old events */
of_status of_profiler_stop(void);
int32_t of_profiler_enabled(void);
int64_t of_profiler_num_events(void);
const of_prof_event *of_profiler_events(void);
int64_t of_profiler_dropped(void);             /* events lost to a failed allocation */
int64_t of_profiler_now_ns(void);              /* the events' clock */

/* ---- nn.Graph (core/graph/) --------------------------------------------
 * A graph is traced from eager code: between of_trace_begin and
 * of_trace_end every public op called on this thread runs as usual and is
 * also recorded (op, attributes, input and output values). Tensors that
 * existed before are bound by reference (parameters, buffers, optimizer
 * state). of_graph_optimize runs passes ("dce,cse,fold,fuse,inplace";
 * NULL: all), of_graph_run runs the plan on new inputs of the traced shapes
 * and dtypes, with grad mode off; results are new tensors owned by the
 * caller. A saved graph (Lua: graph:save) loads and runs without Lua. */
typedef struct of_graph of_graph;
int32_t of_tracing(void);                    /* this thread is tracing */
of_status of_trace_begin(of_tensor **inputs, int32_t n);
of_status of_trace_end(of_tensor **outputs, int32_t n, of_graph **out);
void of_trace_abort(void);
/* Activation checkpointing: ops recorded from now on (outside backward)
 * belong to segment `scope` (> 0; 0: none); returns the previous one. The
 * "checkpoint" pass recomputes a segment's values in backward instead of
 * keeping them. */
int32_t of_trace_set_scope(int32_t scope);
/* While tracing: attach `text` (e.g. a global tensor's placement and SBP) to
 * the value t currently is, and to its earlier versions without one; the
 * IR printout shows it after the type. Not tracing, or t unseen: nothing. */
of_status of_trace_note(of_tensor *t, const char *text);
of_status of_graph_optimize(of_graph *g, const char *passes);
of_status of_graph_run(of_graph *g, of_tensor **inputs, int32_t nin, of_tensor **outputs,
                       int32_t nout);
void of_graph_release(of_graph *g);
of_status of_graph_load(const char *path, of_graph **out);
/* The IR as a uint8 tensor (graph:save writes it with the externals). */
of_status of_graph_serialize(of_graph *g, of_tensor **blob);
int32_t of_graph_num_inputs(const of_graph *g);
int32_t of_graph_num_outputs(const of_graph *g);
int32_t of_graph_num_nodes(const of_graph *g);
int32_t of_graph_count_op(const of_graph *g, const char *op);   /* live nodes of op */
enum {
  OF_GRAPH_PLANNED_PEAK = 0,     /* bytes of internal values live at once, at most */
  OF_GRAPH_UNPLANNED_BYTES = 1,  /* bytes of all internal values together */
  OF_GRAPH_NUM_VALUES = 2,
  OF_GRAPH_RUNS = 3,
  OF_GRAPH_NUM_EXTERNALS = 4,
  OF_GRAPH_ARENA_BYTES = 5,      /* the arena laid out after the first run (0: none yet) */
  OF_GRAPH_PARALLEL_WAVES = 6,   /* waves that ran several nodes side by side */
  OF_GRAPH_MAX_WAVE = 7,         /* most nodes run side by side */
  OF_GRAPH_WORKER_NODES = 8,     /* nodes that ran on a worker thread */
  OF_GRAPH_MEMO_NODES = 9,       /* nodes whose results are kept across runs (exec.c) */
  OF_GRAPH_MEMO_HITS = 10        /* their runs answered from the kept results */
};
int64_t of_graph_stat(const of_graph *g, int32_t what);
const char *of_graph_dump(of_graph *g, int32_t verbose);   /* valid until the next call */
const char *of_graph_passes(const of_graph *g);
void of_graph_set_debug(of_graph *g, int32_t level);        /* print IR around each pass */
/* Time every node (also OF_GRAPH_PROFILE=1): the dump shows each node's
 * fastest time over the runs since. */
void of_graph_set_profile(of_graph *g, int32_t on);
/* n >= 2: run nodes whose inputs are ready side by side, up to n at once,
 * one CPU thread each (a lone ready node keeps all threads); 0/1: in order
 * (the default). Results are the same either way. */
void of_graph_set_concurrency(of_graph *g, int32_t n);
/* Externals the graph reads, in save order (borrowed tensors). */
int32_t of_graph_num_externals(const of_graph *g);
of_tensor *of_graph_external(const of_graph *g, int32_t i);
const char *of_graph_external_name(const of_graph *g, int32_t i);
int32_t of_graph_external_is_const(const of_graph *g, int32_t i);
of_status of_graph_set_external_name(of_graph *g, int32_t i, const char *name);
/* Devices: a graph computes on one device, the one its inputs and
 * parameters were on when traced (CPU scalars may join). of_graph_load
 * puts a saved graph on the device it was saved from; of_graph_load_on on
 * `dev`; of_graph_to moves a graph's externals (and device-creating ops)
 * from its device to dev. */
of_device of_graph_device(const of_graph *g);
of_status of_graph_load_on(const char *path, of_device dev, of_graph **out);
of_status of_graph_to(of_graph *g, of_device dev);
/* CUDA graphs (graph:config:enable_cuda_graph): mode 0 off, 1 capture the
 * step after a warm-up run and replay it with outputs cloned, 2 the same
 * but the outputs are the graph's static tensors (overwritten by the next
 * call). A step that cannot be captured runs as usual; the reason is
 * of_graph_cuda_graph_status: "" not captured yet, "captured", or why not. */
void of_graph_set_cuda_graph(of_graph *g, int32_t mode);
const char *of_graph_cuda_graph_status(const of_graph *g);
/* Introspection (graph:to_dot, SummaryWriter:add_graph): value v in
 * 0..OF_GRAPH_NUM_VALUES-1, node i in 0..of_graph_node_slots-1 (dead nodes
 * included, marked), graph input / output i as value ids. Pointers are
 * borrowed from the graph. */
typedef struct of_graph_value_desc {
  int32_t kind;               /* 0 input, 1 external, 2 internal, 3 autograd handle */
  int32_t is_const;
  of_dtype dtype;
  int32_t ndim;
  int64_t shape[OF_MAX_DIMS];
  int32_t producer;           /* node index, -1 for inputs and externals */
  int32_t index;              /* input position / external number */
  const char *name;           /* externals: the parameter's name, or NULL */
  const char *note;           /* a global tensor's placement and SBP, or NULL */
} of_graph_value_desc;
typedef struct of_graph_node_desc {
  const char *op;
  int32_t nin, nout, nreal, nmut;
  const int32_t *in, *out;    /* value ids, -1 for a NULL input */
  int32_t dead, backward, fused;   /* fused: a pass made this node from several ops */
  char attrs[256];            /* the record's description */
} of_graph_node_desc;
int32_t of_graph_node_slots(const of_graph *g);
of_status of_graph_describe_value(const of_graph *g, int32_t v, of_graph_value_desc *out);
of_status of_graph_describe_node(const of_graph *g, int32_t i, of_graph_node_desc *out);
int32_t of_graph_io_value(const of_graph *g, int32_t output, int32_t i);   /* -1: none */
/* Compiled signatures: graph:save writes every input signature the graph
 * compiled (the last one first); a loaded graph holds one variant per
 * signature, sharing the weights, and of_graph_run runs the first variant
 * whose inputs match (e.g. batch 4 and batch 2). Variant 0 is g itself;
 * the others are borrowed (released with g). */
int32_t of_graph_num_variants(const of_graph *g);
of_graph *of_graph_variant(of_graph *g, int32_t i);   /* NULL: out of range */

/* Fused optimizer updates, in place, one pass over memory (the update ops
 * nn.Graph records; usable eagerly too). hyper: float64 {lr, steps taken};
 * the call reads lr and increments the step count (not when found_inf says
 * to skip the step). Arithmetic follows the
 * Lua optimizers exactly. NULL state tensors: none (momentum 0, no amsgrad). */
of_status of_optim_sgd_(of_tensor *param, of_tensor *grad, of_tensor *momentum_buf,
                        of_tensor *hyper, double momentum, double dampening,
                        double weight_decay, int32_t nesterov, int32_t maximize,
                        of_tensor *found_inf);
of_status of_optim_adam_(of_tensor *param, of_tensor *grad, of_tensor *exp_avg,
                         of_tensor *exp_avg_sq, of_tensor *max_exp_avg_sq, of_tensor *hyper,
                         double beta1, double beta2, double eps, double weight_decay,
                         int32_t amsgrad, int32_t maximize, int32_t decoupled,
                         of_tensor *found_inf);
/* Loss scaling (flow.amp.GradScaler): grad *= float(1 / scale); found_inf
 * (float32, one element) is set to 1 when grad had an inf or nan (it is
 * not cleared). The update ops above skip the step when found_inf (may be
 * NULL) is nonzero. of_amp_update_scale_: scale (float32) *= backoff after
 * inf/nan, else growth_tracker (int32) counts up and the scale grows by
 * growth_factor every growth_interval good steps (if finite). */
of_status of_amp_unscale_(of_tensor *grad, of_tensor *scale, of_tensor *found_inf);
of_status of_amp_update_scale_(of_tensor *scale, of_tensor *growth_tracker, of_tensor *found_inf,
                               double growth_factor, double backoff_factor,
                               int64_t growth_interval);

#ifdef __cplusplus
}
#endif
#endif
