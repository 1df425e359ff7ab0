/* device.h -- the device-ops table and the routing helpers of the op runners.
 *
 * The CUDA part (cuda/, liboneflow_cuda.so) is loaded on first CUDA use by
 * core/device/device.c and fills one of_device_ops. Op runners check the devices of
 * their tensors once, at the entry of the family's runner:
 *   - all CPU: the CPU kernel runs (one load per tensor on the fast path);
 *   - tensors on two devices: a clear error naming the op and the devices;
 *   - on CUDA: the family's entry of the table, or "not implemented on CUDA".
 * The header compiles as C11 and as C++ (nvcc includes it). */
#ifndef ONEFLOW_DEVICE_H
#define ONEFLOW_DEVICE_H
#include "internal.h"
#ifdef __cplusplus
extern "C" {
#endif

enum { OF_DEVICE_ABI = 2 };
static inline int32_t of_device_type(of_device d) { return d & 0xff; }
static inline int32_t of_device_index(of_device d) { return d >> 8; }
static inline of_device of_dev(const of_tensor *t) { return t->storage->device; }
/* dropout keeps an element when its 32-bit Philox word w is >= this: u24(w) < p
 * <=> (w >> 8) < ceil(p 2^24) <=> w < ceil(p 2^24) << 8; 2^32 (p = 1) keeps
 * nothing. One definition for the CPU kernels and the device's. */
static inline uint64_t of_dropout_threshold(double p) {
  return (uint64_t)__builtin_ceil(p * 0x1p24) << 8;
}
/* "cpu", "cuda:1" (for messages; buf of >= 16 bytes) */
const char *of_device_str(of_device d, char *buf);
#define OF_DEV_STR(d) of_device_str((d), (char[16]){0})

/* Elementwise kernel kinds (the `kind` of of_device_ops.ew). */
/* SPECIAL1/2: flow.special (op an of_special_fn, p0 polygamma's n), float64
 * operands, core/ops/special_eval.h's scalar code */
enum { OF_EWK_BINARY = 0, OF_EWK_UNARY = 1, OF_EWK_CLAMP = 2, OF_EWK_LEAKY = 3,
       OF_EWK_SPECIAL1 = 4, OF_EWK_SPECIAL2 = 5 };

/* cudnn branch: the descriptors of the convolution, pooling and loss entries */
typedef struct of_conv_desc {
  int32_t nsp;              /* spatial dims 1..3 */
  int32_t channels_last;    /* operands are NHWC / NDHWC */
  int64_t groups;
  int64_t stride[3], pad[3], dil[3];
} of_conv_desc;
typedef struct of_pool_desc {
  int32_t adaptive, cip;    /* count_include_pad */
  int64_t divisor;          /* > 0: divisor_override */
  int64_t planes, in[3], out[3];          /* as 3-D: leading dims of 1 */
  int64_t k[3], s[3], p[3], d[3];
} of_pool_desc;
typedef struct of_loss_desc {
  int64_t N, C, S, ignore, base;
  double eps, wsum;         /* label smoothing; class count (0 with weights: the kernel sums them) */
} of_loss_desc;
/* fused attention (ops/attention.c): dense q [BH, L, E], k [BH / group, S,
 * E], v [BH / group, S, Ev] of one compute dtype; q row bh reads k/v row
 * bh / group. The mask (kind 1 boolean as uint8, 2 additive of the compute
 * dtype, 0 none) of row bh, query i, key j is at moff[bh] + i * msl + j * mss.
 * Dropout p keeps element (bh, i, j) when the float32 uniform_ value of
 * element (bh * L + i) * S + j of the stream (seed, offset) is >= p. */
typedef struct of_sdpa_desc {
  int64_t BH, L, S, E, Ev, group, msl, mss;
  double scale, p;
  uint64_t seed, offset;
  int32_t causal, mkind;
} of_sdpa_desc;

typedef struct of_device_ops {
  int32_t abi;                        /* OF_DEVICE_ABI */
  /* ---- devices ---- */
  int32_t (*device_count)(void);
  of_status (*set_device)(int32_t index);
  int32_t (*current_device)(void);
  /* Waits for the device's work; reports an asynchronous kernel error with the
   * op that launched it. index -1: the current device. */
  of_status (*synchronize)(int32_t index);
  /* ---- memory: a stream-ordered caching allocator ---- */
  void *(*alloc)(of_device dev, int64_t nbytes);        /* NULL + of_fail */
  void (*free)(of_device dev, void *p, int64_t nbytes);
  void (*empty_cache)(of_device dev);
  const of_memory_stats *(*memory_stats)(of_device dev);
  void (*reset_peak)(of_device dev);
  void *(*host_alloc)(int64_t nbytes);                  /* pinned; NULL: failed */
  void (*host_free)(void *p);
  /* nbytes between contiguous buffers on any two devices (one may be the CPU);
   * non_blocking: ordered on the current stream, the caller synchronises. */
  of_status (*memcpy)(void *dst, of_device ddev, const void *src, of_device sdev,
                      int64_t nbytes, int32_t non_blocking);
  /* ---- streams and events (opaque handles) ---- */
  of_status (*stream_new)(int32_t index, void **out);
  void (*stream_free)(void *s);
  of_status (*stream_synchronize)(void *s);
  int32_t (*stream_query)(void *s);                    /* 1 done, 0 busy */
  void (*set_stream)(void *s);                         /* NULL: the default stream */
  void *(*get_stream)(void);
  of_status (*stream_wait_event)(void *s, void *e);
  of_status (*event_new)(int32_t timing, void **out);
  void (*event_free)(void *e);
  of_status (*event_record)(void *e, void *s);
  of_status (*event_synchronize)(void *e);
  int32_t (*event_query)(void *e);
  of_status (*event_elapsed)(void *start, void *end, double *ms);
  void (*set_allow_tf32)(int32_t on);
  /* ---- kernels by family; NULL: not implemented on this device ----
   * Callers have checked shapes and dtypes and made every operand live on
   * the same device; results are allocated by the caller unless `out`. */
  /* dst <- src, same device, src broadcast to dst, any two dtypes */
  of_status (*copy)(of_tensor *dst, of_tensor *src);
  of_status (*fill)(of_tensor *t, double value);
  /* ops[0] (output, dtype kernel_out) <- f(ops[1..nops)), inputs of the
   * compute dtype broadcast to ops[0]'s shape. p0/p1: op parameters. */
  of_status (*ew)(const char *name, int32_t kind, int32_t op, double p0, double p1,
                  int32_t flags, of_tensor **ops, int32_t nops);
  /* out <- cond ? a : b, operands broadcast to out, a/b of out's dtype */
  of_status (*where)(of_tensor *out, of_tensor *cond, of_tensor *a, of_tensor *b);
  /* rows: x contiguous [outer, n] of the compute dtype -> out [outer] (op
   * an of_reduce_op, p its norm order, results in out's dtype) */
  of_status (*reduce_rows)(int32_t op, double p, of_tensor *x, int64_t outer, int64_t n,
                           of_tensor *out);
  /* arg-reduce rows: values (may be NULL) and int64 indices + index_base */
  of_status (*argreduce_rows)(int32_t is_max, of_tensor *x, int64_t outer, int64_t n,
                              int64_t index_base, of_tensor *values, of_tensor *indices);
  /* variance rows */
  of_status (*var_rows)(of_tensor *x, int64_t outer, int64_t n, double correction,
                        int32_t is_std, of_tensor *out);
  /* softmax over rows of x [outer, n] into y */
  of_status (*softmax_rows)(of_tensor *x, int64_t outer, int64_t n, int32_t log, of_tensor *y);
  /* layer norm over rows [outer, n]; mean/rstd [outer] saved for backward, float64
   * for float64 x, else float32 */
  of_status (*layer_norm_rows)(of_tensor *x, of_tensor *w, of_tensor *b, int64_t outer,
                               int64_t n, double eps, of_tensor *y, of_tensor *mean,
                               of_tensor *rstd);
  of_status (*layer_norm_back_rows)(of_tensor *g, of_tensor *x, of_tensor *w,
                                    of_tensor *mean, of_tensor *rstd, int64_t outer, int64_t n,
                                    of_tensor *gx, of_tensor *gw, of_tensor *gb);
  /* rms norm over rows [outer, n]: y = x * rstd * w (w [n] or NULL), rstd [outer]
   * saved as layer norm's; backward: gx and gw (each may be NULL) */
  of_status (*rms_norm_rows)(of_tensor *x, of_tensor *w, int64_t outer, int64_t n, double eps,
                             of_tensor *y, of_tensor *rstd);
  of_status (*rms_norm_back_rows)(of_tensor *g, of_tensor *x, of_tensor *w, of_tensor *rstd,
                                  int64_t outer, int64_t n, of_tensor *gx, of_tensor *gw);
  /* Philox: fill t from the (seed, offset) stream of core/ops/random.c, values
   * in logical row-major order. dist 0 uniform (p: lo, hi, largest value
   * below hi), 1 normal (mean, std), 2 bernoulli (p) */
  of_status (*random)(of_tensor *t, int32_t dist, const double *p, uint64_t seed,
                      uint64_t offset);
  /* dropout (core/ops/random.c's stream): y = x * keep / (1 - p) and mask = keep
   * (bool), keep = the element's Philox word >= of_dropout_threshold(p); x, y,
   * mask contiguous, of x's shape */
  of_status (*dropout)(of_tensor *x, double p, uint64_t seed, uint64_t offset, of_tensor *y,
                       of_tensor *mask);
  /* c [batch, m, n] = alpha * a @ b + beta * c, a [batch, m, k] / [batch, k, m]
   * when ta, batch strides in elements (0: broadcast) */
  of_status (*gemm)(int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k, double alpha,
                    of_tensor *a, int64_t lda, int64_t sa, of_tensor *b, int64_t ldb,
                    int64_t sb, double beta, of_tensor *c, int64_t ldc, int64_t sc,
                    int64_t batch);
  /* gather along dim of out's shape (index int64, index_base); scatter: the
   * reverse with reduce 0 replace / 1 add into dst (a clone made by the caller) */
  of_status (*gather)(of_tensor *out, of_tensor *x, int32_t dim, of_tensor *index,
                      int64_t index_base);
  of_status (*scatter)(of_tensor *dst, int32_t dim, of_tensor *index, of_tensor *src,
                       double value, int32_t use_value, int32_t reduce, int64_t index_base);
  /* out = x with rows `index` along dim (index_select), or dst[index] += alpha src */
  of_status (*index_select)(of_tensor *out, of_tensor *x, int32_t dim, of_tensor *index,
                            int64_t index_base);
  of_status (*index_add)(of_tensor *dst, int32_t dim, of_tensor *index, of_tensor *src,
                         double alpha, int64_t index_base);
  /* rows x [outer, n] sorted into values/indices [outer, k] (k <= n) */
  of_status (*sort_rows)(of_tensor *x, int64_t outer, int64_t n, int64_t k, int32_t descending,
                         int64_t index_base, of_tensor *values, of_tensor *indices);
  /* fused optimizer updates (same arithmetic as core/ops/optim.c). hyper
   * (float64 {lr, step}) and found_inf (float32 [1], may be NULL: skip the
   * update when != 0) live on the parameter's device and are read there;
   * the step count advances there too. Nothing is read on the host, so a
   * CUDA graph can capture the updates (cudagraph branch). */
  of_status (*sgd)(of_tensor *param, of_tensor *grad, of_tensor *buf, of_tensor *hyper,
                   of_tensor *found_inf, double momentum, double dampening, double wd,
                   int32_t nesterov, int32_t maximize);
  of_status (*adam)(of_tensor *param, of_tensor *grad, of_tensor *m, of_tensor *v,
                    of_tensor *vmax, of_tensor *hyper, of_tensor *found_inf, double beta1,
                    double beta2, double eps, double wd, int32_t amsgrad, int32_t maximize,
                    int32_t decoupled);
  /* ==== cudnn branch: convolution, pooling and normalisation (cuDNN,
   * cuda/dnn.cu), losses, resampling and padding (cuda/nn.cu), CUDA graphs
   * (cuda/graph.cu). Dense operands of the compute dtype unless said. ==== */
  /* cuDNN is loaded (dlopen) on first use: "" when usable, else why not */
  const char *(*dnn_why_unavailable)(void);
  int32_t (*dnn_version)(void);                        /* 0: not loaded */
  void (*set_dnn_flags)(int32_t benchmark, int32_t deterministic, int32_t allow_tf32);
  /* kind 0: y = conv(x, w) + b; 1: y = conv_backward_data(dy = x, w) + b
   * (= conv_transpose); 2: y = conv_backward_filter(x, dy = w). Operands of
   * one dtype (float16/bfloat16 accumulate in float32), each dense either
   * [N, C, *spatial] or channels-last (d->channels_last: all of them). */
  of_status (*conv)(int32_t kind, const of_conv_desc *d, of_tensor *x, of_tensor *w,
                    of_tensor *b, of_tensor *y);
  /* batch norm over dim 1 of x (dense or channels-last, y likewise); w, b,
   * running stats and the saved mean/invstd [C] are float32 (float64 for a
   * float64 x); running stats may be NULL. Training: batch statistics
   * into smean/sinvstd, running stats updated with momentum (unbiased var). */
  of_status (*batch_norm)(of_tensor *x, of_tensor *w, of_tensor *b, of_tensor *rmean,
                          of_tensor *rvar, int32_t training, double momentum, double eps,
                          of_tensor *y, of_tensor *smean, of_tensor *sinvstd);
  of_status (*batch_norm_back)(of_tensor *x, of_tensor *dy, of_tensor *w, of_tensor *smean,
                               of_tensor *sinvstd, double eps, of_tensor *dx, of_tensor *dw,
                               of_tensor *db);
  /* pools over planes [P, in...] -> [P, out...]; max: int64 indices into
   * each plane + base; avg backward: x is the grad [P, out], y [P, in] */
  of_status (*max_pool)(const of_pool_desc *d, of_tensor *x, of_tensor *y, of_tensor *idx,
                        int64_t base);
  of_status (*avg_pool)(const of_pool_desc *d, int32_t backward, of_tensor *x, of_tensor *y);
  /* max pool backward (scatter: dst[p, idx - base] += src, dst zeroed here)
   * and its adjoint (gather: dst = src[p, idx - base]); src/idx [P, out_sz] */
  of_status (*pool_index)(int32_t scatter, int64_t planes, int64_t in_sz, int64_t out_sz,
                          of_tensor *src, of_tensor *idx, int64_t base, of_tensor *dst);
  /* cross_entropy / nll_loss over x [N, C, S]: per sample i = (n, s) the
   * loss, its weight (0 when ignored) and (cross entropy) the log-sum-exp,
   * all float64 [N*S]. t: int64 class targets, or NULL with q probabilities
   * shaped like x; w: float64 [C] or NULL. */
  of_status (*cross_entropy)(const of_loss_desc *d, of_tensor *x, of_tensor *t, of_tensor *q,
                             of_tensor *w, of_tensor *lse, of_tensor *loss, of_tensor *wt);
  /* sc: float64 per-sample scale of the grad; gx like x; gq (grad of q) or NULL */
  of_status (*cross_entropy_back)(const of_loss_desc *d, of_tensor *x, of_tensor *t,
                                  of_tensor *q, of_tensor *w, of_tensor *lse, of_tensor *sc,
                                  of_tensor *gx, of_tensor *gq);
  of_status (*nll_loss)(const of_loss_desc *d, of_tensor *x, of_tensor *t, of_tensor *w,
                        of_tensor *loss, of_tensor *wt);
  of_status (*nll_loss_back)(const of_loss_desc *d, of_tensor *t, of_tensor *w, of_tensor *sc,
                             of_tensor *gx);
  /* interpolate x [NC, in(3)] -> y [NC, out(3)] (backward: x is the grad
   * [NC, out], y [NC, in], zeroed here). tab: int64 per dim d the source
   * indices i0 then i1 (out[d] each); wts: float64 the weights l0 then l1. */
  of_status (*interpolate)(int32_t backward, int32_t linear, int64_t NC, const int64_t *in,
                           const int64_t *out, of_tensor *tab, of_tensor *wts, of_tensor *x,
                           of_tensor *y);
  /* pad the last k dims: y [B, out(k)] from x [B, in(k)]; map: int64 per dim
   * the source index of each output index (-1: `value`). backward: x is the
   * grad [B, out], y [B, in] (zeroed here). */
  of_status (*pad)(int32_t backward, int32_t k, int64_t B, const int64_t *in,
                   const int64_t *out, of_tensor *map, double value, of_tensor *x,
                   of_tensor *y);
  /* CUDA graphs: capture the work queued on the current stream of device
   * `index` (a side stream is made current meanwhile), instantiate, launch */
  of_status (*graph_capture_begin)(int32_t index, void **capture);
  of_status (*graph_capture_end)(void *capture, void **graph);
  of_status (*graph_launch)(void *graph);
  void (*graph_free)(void *graph);
  /* ---- indexing, scans and shape kernels (cuda/index.cu), NCCL (cuda/nccl.cu) ----
   * Index values outside their range raise the device's error flag (code
   * 3): the op is named at the next synchronising call; nothing is written
   * through a bad index. */
  /* y [outer, n, inner] <- running sum (is_prod 0) or product of x along n;
   * x, y contiguous of one compute dtype (float32/float64 accumulate in
   * double, int64 wraps), each line in order, as on the CPU */
  of_status (*scan)(of_tensor *x, int64_t outer, int64_t n, int64_t inner, int32_t is_prod,
                    of_tensor *y);
  /* out (contiguous, x's shape) <- x where column - row <= k (tril) or >= k
   * (triu) over the last two dims, else 0 */
  of_status (*tri)(of_tensor *out, of_tensor *x, int64_t k, int32_t upper);
  /* out (contiguous) <- x tiled: x has out's rank, out->shape[d] a multiple
   * of x->shape[d] (x may be strided, stride 0 on padded dims) */
  of_status (*repeat)(of_tensor *out, of_tensor *x);
  /* pos (int64 [n]) <- exclusive prefix count of mask (bool contiguous [n]);
   * *total <- the number of true entries (waits for the device) */
  of_status (*mask_scan)(of_tensor *mask, of_tensor *pos, int64_t *total);
  /* with x: out[pos[i]] <- x[i] where mask[i] (x contiguous, mask's numel);
   * without: row pos[i] of out [total, ndim] <- the coordinates (+ base) of
   * i in `shape` */
  of_status (*mask_compact)(of_tensor *mask, of_tensor *pos, of_tensor *x,
                            const int64_t *shape, int32_t ndim, int64_t base, of_tensor *out);
  /* out <- start + i * step for i < n (arange), in out's dtype; linspace:
   * step = (end - start) / (n - 1), the second half counted from `end` */
  of_status (*iota)(of_tensor *out, double start, double step, double end, int32_t linspace);
  /* The raw cudaStream_t of the current stream on device `index`. */
  void *(*raw_stream)(int32_t index);
  /* The NCCL communicator table (libnccl dlopened on the first call), or
   * NULL with the reason in why. */
  const struct of_comm_device_backend *(*nccl)(char *why, int32_t cap);
  /* ==== cudagraph branch: loss scaling on the device and nn.Graph capture ==== */
  /* grad *= float(1 / scale); found_inf = 1 when a grad element is inf/nan
   * (scale, found_inf float32 [1] on the grad's device) */
  of_status (*amp_unscale)(of_tensor *grad, of_tensor *scale, of_tensor *found_inf);
  /* GradScaler.update's rule on scale (float32 [1]) and tracker (int32 [1]) */
  of_status (*amp_update_scale)(of_tensor *scale, of_tensor *tracker, of_tensor *found_inf,
                                double growth, double backoff, int64_t interval);
  /* the current stream of device `index` (-1: current device): 0 not being
   * captured, 1 capturing, -1 a capture that an operation invalidated */
  int32_t (*capture_status)(int32_t index);
  /* ==== fused attention (of_sdpa_desc): o [BH, L, Ev] and the rows'
   * logsumexp lse [BH, L]; the backward from go writes gq, gk, gv. moff:
   * int64 [BH] on the device, mask: NULL without one ==== */
  of_status (*sdpa)(const of_sdpa_desc *d, of_tensor *q, of_tensor *k, of_tensor *v,
                    of_tensor *mask, of_tensor *moff, of_tensor *o, of_tensor *lse);
  of_status (*sdpa_back)(const of_sdpa_desc *d, of_tensor *q, of_tensor *k, of_tensor *v,
                         of_tensor *mask, of_tensor *moff, of_tensor *o, of_tensor *go,
                         of_tensor *lse, of_tensor *gq, of_tensor *gk, of_tensor *gv);
  /* ==== flow.fft through cuFFT (core/ops/fft.c): kind 0 c2c, 1 r2c
   * (one-sided along the last of dims), 2 c2r (last_size: that dim's output
   * size); dims 0-based, x contiguous, out allocated with its shape and dtype;
   * norm 0 none, 1 1/sqrt(N), 2 1/N ==== */
  of_status (*fft)(int32_t kind, of_tensor *x, const int32_t *dims, int32_t ndims,
                   int32_t forward, int32_t norm, int64_t last_size, of_tensor *out);
} of_device_ops;

/* The CUDA library's entry point: fills ops; returns 0 or sets why (cap bytes). */
typedef int32_t (*of_device_init_fn)(of_device_ops *ops, char *why, int32_t cap);


/* ---- core/device/device.c ---- */
/* The ops of dev's type (loading the library on first use), or NULL with an
 * error naming `op` and saying why CUDA is unavailable. */
const of_device_ops *of_device_ops_for(const char *op, of_device dev);
/* Storage and data movement (the layers below the device backends) reach a
 * device through these, which core/device/device.c installs when the
 * library loads (core/storage/alloc.c forwards to them). */
typedef struct of_device_hooks {
  const of_device_ops *(*ops_for)(const char *op, of_device dev);
  const of_device_ops *(*loaded)(void);   /* the CUDA table if loaded, else NULL */
  of_status (*copy_across)(of_tensor *dst, of_tensor *src, int32_t non_blocking);
} of_device_hooks;
void of_device_install(const of_device_hooks *h);
/* The ops when the library is already loaded and usable (never loads). */
const of_device_ops *of_device_ops_loaded(void);
/* The common device of the tensors (NULL entries skipped). A 0-d CPU tensor
 * may join tensors of another device (it is a scalar, as in PyTorch). */
of_status of_common_device(const char *op, of_tensor *const *ts, int32_t n, of_device *out);
/* Error for a family without a kernel on dev. */
of_status of_device_unsupported(const char *op, of_device dev);
/* When an op runs on a device, the op's name is kept for error reports of
 * asynchronous kernel failures. */
extern const char *of_device_last_op;
/* of_prepare_out for a result on `dev`; `into` must live there. */
of_status of_prepare_out_on(const char *op, of_tensor *into, const int64_t *shape,
                            int32_t ndim, of_dtype dt, of_device dev, of_tensor **out);
/* Copies data between tensors on different devices (dst <- src, broadcast,
 * cast); of_copy_data calls it. */
of_status of_copy_across(of_tensor *dst, of_tensor *src);
/* The same, queued on the current stream when non_blocking and the source is
 * pinned or on a device. */
of_status of_copy_across_async(of_tensor *dst, of_tensor *src, int32_t non_blocking);

/* Device halves of CPU runners (core/ops/device_ops.c); inputs checked. */
of_status of_device_matmul(const char *op, of_tensor *a, of_tensor *b, of_tensor *c,
                           double beta, double alpha, int32_t a_vec, int32_t b_vec,
                           of_tensor *into, of_tensor **out);
of_status of_device_layer_norm(of_tensor *x, int32_t k, of_tensor *w, of_tensor *b,
                               double eps, of_tensor **out);
of_status of_device_rms_norm(of_tensor *x, int32_t k, of_tensor *w, double eps,
                             of_tensor **out);

/* Route a family runner: `DEV` is set to the common device of the tensors;
 * for a non-CPU device, `ops` is the table (already checked non-NULL for
 * the entry FIELD). */
#define OF_ROUTE(OP, DEV, OPS, FIELD, ...)                                         \
  of_device DEV = OF_CPU;                                                          \
  const of_device_ops *OPS = NULL;                                                 \
  do {                                                                             \
    of_tensor *ts_[] = {__VA_ARGS__};                                              \
    OF_CHECK(of_common_device(OP, ts_, (int32_t)(sizeof ts_ / sizeof ts_[0]), &DEV)); \
    if (DEV != OF_CPU) {                                                           \
      OPS = of_device_ops_for(OP, DEV);                                            \
      if (!OPS) return OF_ERR_DEVICE;                                              \
      if (!OPS->FIELD) return of_device_unsupported(OP, DEV);                      \
      of_device_last_op = OP;                                                      \
    }                                                                              \
    (void)DEV;                                                                     \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif
