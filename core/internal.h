/* internal.h -- what the core's .c files share and hosts never see. */
#ifndef ONEFLOW_INTERNAL_H
#define ONEFLOW_INTERNAL_H
#include "oneflow/oneflow.h"
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define OF_ALL_DIMS (-100)

/* GCC's per-function optimize("...") attribute, inside an __attribute__
 * list; clang has none and gets the settings that matter (-ffp-contract=off)
 * for the whole build from CMakeLists.txt. */
#if defined(__GNUC__) && !defined(__clang__)
#define OF_GCC_OPTIMIZE(x) optimize(x)
#else
#define OF_GCC_OPTIMIZE(x)
#endif

/* A refcounted block of memory. Views share one; the version counter lives
 * here so that an in-place write through any view bumps it. */
typedef struct of_storage {
  int64_t refcount;
  void *data;
  int64_t nbytes;
  of_device device;
  int64_t id;           /* unique per storage, for of_tensor_storage_id */
  int64_t version;
  of_deleter deleter;   /* from_blob memory; NULL: caching allocator */
  void *deleter_ctx;
  bool frozen;          /* a graph keeps it across runs (exec.c, memo), or it is
                           autocast's kept copy of a parameter (amp.c): it changes
                           only with a version bump, so kernels may key caches on
                           (id, version) as for parameters */
} of_storage;

struct of_node;

struct of_tensor {
  int64_t refcount;
  of_storage *storage;
  int64_t offset;                 /* in elements */
  int64_t numel;
  int64_t shape[OF_MAX_DIMS];
  int64_t strides[OF_MAX_DIMS];   /* in elements */
  int32_t ndim;
  of_dtype dtype;
  /* autograd (core/tensor/tape.c, core/autograd/engine.c) */
  bool requires_grad;
  int32_t output_nr;              /* which output of grad_fn this is */
  struct of_tensor *grad;         /* retained */
  struct of_node *grad_fn;        /* retained; NULL for leaves */
  struct of_node *grad_acc;       /* weak: a leaf's AccumulateGrad node */
  struct of_tensor *view_base;    /* retained: the tensor a view looks into */
  int64_t *hooks;                 /* host hook ids (leaf tensors) */
  int32_t nhooks;
};

/* Zero the autograd fields of a fresh header. */
static inline void of_tensor_clear_autograd(of_tensor *t) {
  t->requires_grad = false;
  t->output_nr = 0;
  t->grad = NULL;
  t->grad_fn = NULL;
  t->grad_acc = NULL;
  t->view_base = NULL;
  t->hooks = NULL;
  t->nhooks = 0;
}
void of_tensor_free_autograd(of_tensor *t);

/* ---- errors (error.c) ---- */
/* printf-style; returns `code` so callers can `return of_fail(...)`. */
of_status of_fail(of_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends "[2,3]" for a shape to buf (returns buf) for messages. */
const char *of_shape_str(const int64_t *shape, int32_t ndim, char *buf, size_t cap);
#define OF_SHAPE_STR(t) of_shape_str((t)->shape, (t)->ndim, (char[96]){0}, 96)
#define OF_DT(t) of_dtype_name((t)->dtype)
#define OF_CHECK(expr)                  \
  do {                                  \
    of_status st_ = (expr);             \
    if (st_ != OF_OK) return st_;       \
  } while (0)

/* ---- size arithmetic (error.c) ----
 * Every size, stride and offset computed from user input goes through these:
 * signed overflow is undefined behaviour, and a wrapped element count once
 * let flow.zeros(2^32, 2^32) allocate nothing and write everywhere.
 * OF_MAX_NUMEL bounds any tensor's (or view's) element count so that its
 * byte size fits int64_t for every 8-byte dtype; complex128 (16 bytes) is
 * checked against half of it where tensors are made (tensor.c). */
#define OF_MAX_NUMEL (INT64_MAX / 8)
/* a*b and a+b into *r; false (and *r unspecified) when they overflow int64_t */
static inline bool of_mul_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_mul_overflow(a, b, r); }
static inline bool of_add_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_add_overflow(a, b, r); }
/* Checks a shape an op is about to create (ndim 0..8, sizes >= 0, element
 * count <= OF_MAX_NUMEL); the error names op and the shape. numel may be NULL. */
of_status of_check_shape(const char *op, const int64_t *shape, int32_t ndim, int64_t *numel);
/* Checks that a view (shape, strides in elements, offset) reaches only
 * elements 0..cap-1 and that none of it overflows; error names op. */
of_status of_check_view(const char *op, const int64_t *shape, const int64_t *strides,
                        int32_t ndim, int64_t offset, int64_t cap);

/* Checks that a sliding window's arithmetic (conv, pool) cannot overflow:
 * the dilated kernel dil*(k-1)+1, the padded input in+2*pad and the
 * transposed span (in-1)*stride stay <= OF_MAX_NUMEL for each of n dims. */
of_status of_check_window(const char *op, const int64_t *in, const int64_t *k,
                          const int64_t *stride, const int64_t *pad, const int64_t *dil,
                          int32_t n);

/* ---- allocator (alloc.c) ---- */
/* Per-thread free lists of fixed-size headers (core/storage/pool.c):
 * of_pool_get(kind, size) returns a block of at least `size` bytes (the
 * kind's size is fixed: every caller of one kind asks the same size). */
enum { OF_POOL_TENSOR, OF_POOL_STORAGE, OF_POOL_NODE, OF_POOL_KINDS };
void *of_pool_get(int kind, size_t size);
void of_pool_put(int kind, void *block);
void *of_alloc(of_device dev, int64_t nbytes);   /* NULL + error on failure */
void of_free(of_device dev, void *p, int64_t nbytes);

/* ---- tensors (tensor.c) ---- */
/* New contiguous tensor; memory uninitialised. */
of_status of_tensor_new(const int64_t *shape, int32_t ndim, of_dtype dt, of_device dev,
                        of_tensor **out);
/* The same, naming op in errors (shape checks, out of memory). */
of_status of_tensor_new_as(const char *op, const int64_t *shape, int32_t ndim, of_dtype dt,
                           of_device dev, of_tensor **out);
/* What of_tensor_new_as checks before it allocates (the shape, the dtype,
 * the byte count): the graph loader's re-inference of creation ops (their
 * infer hooks) runs it on a record without allocating. numel may be NULL. */
of_status of_tensor_check_new(const char *op, const int64_t *shape, int32_t ndim, of_dtype dt,
                              int64_t *numel);
/* New view header sharing t's storage; NULL (error set) when the shape is
 * not a valid one (of_check_shape) or out of memory. */
of_tensor *of_tensor_alias(const of_tensor *t, const int64_t *shape,
                           const int64_t *strides, int32_t ndim, int64_t offset);
/* A tensor over caller-owned memory (deleter called when the storage dies);
 * strides NULL: contiguous. No autograd, not traced (of_from_blob is). */
of_status of_tensor_wrap_blob(void *data, const int64_t *shape, const int64_t *strides,
                              int32_t ndim, of_dtype dt, of_deleter deleter, void *ctx,
                              of_tensor **out);
int64_t of_shape_numel(const int64_t *shape, int32_t ndim);
void of_contiguous_strides(const int64_t *shape, int32_t ndim, int64_t *strides);
/* Normalise a possibly negative dim against ndim; error names `op`. */
of_status of_norm_dim(const char *op, int32_t dim, int32_t ndim, int32_t *out);
/* Refuses writes into a tensor whose elements share memory (a dim of size
 * > 1 with stride 0): every in-place op and out= result goes through it. */
of_status of_check_overlap(const char *op, const of_tensor *into);
/* `into` given: check shape/dtype and overlap, and retain it; else allocate. */
of_status of_prepare_out(const char *op, of_tensor *into, const int64_t *shape,
                         int32_t ndim, of_dtype dt, of_tensor **out);
static inline char *of_ptr(const of_tensor *t) {
  return (char *)t->storage->data + t->offset * of_dtype_size(t->dtype);
}
static inline void of_bump_version(of_tensor *t) { t->storage->version++; }

/* Kernels compute float16 and bfloat16 in float32. */
static inline of_dtype of_compute_dtype(of_dtype t) {
  return t == OF_FLOAT16 || t == OF_BFLOAT16 ? OF_FLOAT32 : t;
}

/* Data movement without autograd recording (for use inside ops). */
/* whether a source of shape ss broadcasts to a destination of shape ds, as
 * of_copy_data requires (the copy_ op's infer hook checks a loaded node
 * with it) */
of_status of_copy_fits(const int64_t *ds, int32_t dn, const int64_t *ss, int32_t sn);
of_status of_copy_data(of_tensor *dst, of_tensor *src);
of_status of_clone_data(of_tensor *t, of_tensor **out);
of_status of_cast_data(of_tensor *t, of_dtype dt, of_tensor **out);
of_status of_contiguous_data(of_tensor *t, of_tensor **out);
/* t as a contiguous tensor of dtype dt, without history (NULL stays NULL). */
of_status of_dense(of_tensor *t, of_dtype dt, of_tensor **out);

/* ---- memory formats (views.c) ----
 * Channels-last: a 4-D [N, C, H, W] or 5-D [N, C, D, H, W] tensor whose
 * memory is laid out as NHWC / NDHWC (strides of size-1 dims ignored). */
bool of_is_channels_last(const of_tensor *t);
/* Channels-last and not also contiguous (the layout an op should keep). */
bool of_prefers_channels_last(const of_tensor *t);
/* shape/strides dense channels-last (dims of size 1 aside), 4-d or 5-d */
bool of_strides_channels_last(const int64_t *shape, const int64_t *strides, int32_t ndim);
/* PyTorch's memory-format propagation for elementwise results: channels-last
 * when the first operand of the result's full shape (4-d or 5-d) is strictly
 * channels-last; a contiguous one first, ambiguous (C == 1, both layouts at
 * once) and broadcast operands do not decide otherwise. A NULL shape skips
 * an operand. Shared by the eager loops and the graph's fused nodes. */
typedef struct {
  const int64_t *shape, *strides;
  int32_t ndim;
} of_layout_ref;
bool of_layout_wants_channels_last(const of_layout_ref *ops, int32_t n, const int64_t *shape,
                                   int32_t ndim);
/* the same over tensors (NULL entries skipped), the first 16 of them */
bool of_tensors_want_channels_last(of_tensor *const *ins, int32_t n, const int64_t *shape,
                                   int32_t ndim);
of_status of_tensor_new_channels_last(const int64_t *shape, int32_t ndim, of_dtype dt,
                                      of_device dev, of_tensor **out);
/* t dense in the layout (cl: channels-last, else contiguous) and dtype dt,
 * without history; t itself (retained) when it already is. */
of_status of_dense_format(of_tensor *t, bool cl, of_dtype dt, of_tensor **out);
/* ONEFLOW_ENABLE_NHWC=1: CUDA convolutions compute in NHWC whatever the layout */
bool of_nhwc_enabled(void);

/* ---- scalar conversion (dtype.c) ---- */
uint16_t of_f32_to_f16(float f);
float of_f16_to_f32(uint16_t h);
/* bfloat16 <-> float32, one element: widening is exact; rounding is to
 * nearest even, a NaN stays a quiet NaN (the vector forms: ops/simd.h).
 * Inline, so that the loops over blocks vectorise. */
static inline uint16_t of_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t r = x + 0x7fffu + ((x >> 16) & 1);
  return (x & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((x >> 16) | 0x40) : (uint16_t)(r >> 16);
}
static inline float of_bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}
double of_load_double(const void *p, of_dtype dt);
void of_store_double(void *p, of_dtype dt, double v);
bool of_dtype_is_int(of_dtype dt);   /* integral, not bool */
bool of_dtype_is_unsigned(of_dtype dt);   /* uint8, uint16, uint32, uint64 */
/* of_promote_types, or an OF_ERR_DTYPE error naming op where there is none. */
of_status of_promote_for(const char *op, of_dtype a, of_dtype b, of_dtype *out);

/* ---- elementwise iteration (iter.c) ----
 * Walks n operands of one common shape (already broadcast: stride 0 on
 * broadcast dims, strides in bytes), merging dims that are contiguous in all
 * operands, and calls `fn` on 1-D runs. Runs are split across threads when
 * the total is large. */
enum { OF_ITER_MAX = 4 };
typedef void (*of_loop_fn)(char **ptrs, const int64_t *strides, int64_t n, void *ctx);
typedef struct of_iter {
  int32_t nops, ndim;
  int64_t shape[OF_MAX_DIMS];
  int64_t strides[OF_ITER_MAX][OF_MAX_DIMS];   /* bytes */
  char *base[OF_ITER_MAX];
} of_iter;
/* Set up from tensors already broadcast to `shape` (operand 0 is the output). */
of_status of_iter_init(of_iter *it, of_tensor **ops, int32_t nops,
                       const int64_t *shape, int32_t ndim);
void of_iter_run(of_iter *it, of_loop_fn fn, void *ctx, bool parallel);
/* Broadcast shapes a and b to out (PyTorch rules); error names op. */
of_status of_broadcast_shapes(const char *op, const int64_t *a, int32_t na,
                              const int64_t *b, int32_t nb, int64_t *out,
                              int32_t *nout);

/* ---- threading ---- */
int32_t of_threads(void);
enum { OF_PARALLEL_GRAIN = 32768 };
/* The vector instruction set the run-time dispatched CPU kernels use
 * (core/tensor/cpu.c): at most what the CPU has, capped by OF_CPU_ISA. */
enum { OF_ISA_DEFAULT = 0, OF_ISA_AVX2 = 1, OF_ISA_AVX512 = 2 };
int32_t of_cpu_isa(void);
/* whether the AVX-512 kernels are in use and the CPU has AVX512-BF16's
 * conversions (their bfloat16 stores then use them: ops/simd.h "bf16n") */
bool of_cpu_bf16_native(void);
/* Streaming (non-temporal) stores for outputs that cannot stay in the cache
 * (core/tensor/cpu.c): a loop writing at least of_stream_min_bytes() bytes
 * computes blocks into a buffer and stores them with of_stream_store, which
 * writes around the cache -- a normal store first reads each line it
 * writes, a third more traffic for c = a + b -- then calls
 * of_stream_fence() before it returns. */
int64_t of_stream_min_bytes(void);
void of_stream_store(void *dst, const void *src, int64_t bytes);
void of_stream_fence(void);

/* Dtype dispatch at the leaf: X(enum, ctype) for each arithmetic dtype the
 * kernels instantiate. Half types are computed through float32. */
#define OF_FOR_NATIVE_DTYPES(X) \
  X(OF_BOOL, bool)              \
  X(OF_UINT8, uint8_t)          \
  X(OF_INT8, int8_t)            \
  X(OF_INT32, int32_t)          \
  X(OF_INT64, int64_t)          \
  X(OF_FLOAT32, float)          \
  X(OF_FLOAT64, double)         \
  X(OF_INT16, int16_t)          \
  X(OF_UINT16, uint16_t)        \
  X(OF_UINT32, uint32_t)        \
  X(OF_UINT64, uint64_t)

/* autocast (amp.c): 0 off, else the low dtype + 1; see of_set_autocast.
 * The CUDA sources (C++) include this header but never read it. */
#ifndef __cplusplus
extern _Thread_local int32_t of_amp_tls __attribute__((tls_model("initial-exec"), visibility("hidden")));
#endif
enum { OF_AMP_LOW = 0, OF_AMP_F32 = 1 };
/* Casts in[0..n) for an op of class cls into cast[] (borrowed when
 * unchanged) and turns autocast off for the op's own body; of_amp_end
 * releases the casts and restores the state. */
of_status of_amp_begin(int32_t cls, of_tensor **in, of_tensor **cast, int32_t n, int32_t *saved);
void of_amp_end(of_tensor **in, of_tensor **cast, int32_t n, int32_t saved);
/* Drops what the kernels keep for the weight on storage sid (oneDNN's
 * reordered copy, the Winograd transform, the packed int8 weight;
 * ops/amp.c): a graph calls it when a folded weight it kept goes, autocast
 * when a kept copy goes. */
void of_forget_kept_weight(int64_t sid);
/* Kept tables (storage/kept.c): bounded, keyed, refcounted entries that
 * kernels keep between calls. An entry is embedded first in the keeper's
 * own struct; key[0] is the source storage's id, key[1] its version, the
 * rest what the kept thing depends on (unused places zero). */
enum { OF_KEPT_KEY = 24 };
typedef struct of_kept {
  int64_t key[OF_KEPT_KEY];
  int64_t bytes;                  /* counted against the table's max_bytes */
  int64_t refs;                   /* the table's reference and each user's */
  uint64_t used;
  void (*free)(struct of_kept *); /* frees the whole entry */
  struct of_kept *next;           /* kept.c's list of entries to free */
} of_kept;
typedef struct of_kept_table {
  of_kept **slot;
  int32_t n;
  int64_t max_bytes;
  int64_t bytes;
  uint64_t tick;
  pthread_mutex_t mu;
} of_kept_table;
#define OF_KEPT_TABLE(slots, max_bytes) \
  {(slots), (int32_t)(sizeof(slots) / sizeof((slots)[0])), (max_bytes), 0, 0, PTHREAD_MUTEX_INITIALIZER}
/* The entry with exactly this key, with a reference for the caller; NULL. */
of_kept *of_kept_find(of_kept_table *t, const int64_t *key);
/* Takes e (refs 1: the caller's) into the table, which adds its reference;
 * the entry with the same key but another version goes, then the least
 * recently used while over the slots or bytes. One larger than max_bytes
 * stays out (freed when the caller releases it). */
void of_kept_put(of_kept_table *t, of_kept *e);
/* Lets go of a reference (NULL: nothing); the last frees the entry. */
void of_kept_release(of_kept_table *t, of_kept *e);
/* Takes out the entries made from storage sid, or all of them. */
void of_kept_forget(of_kept_table *t, int64_t sid, bool all);
/* Graph arenas (alloc.c): allocations on this thread between begin and end
 * come from one block laid out from the first run's record. */
typedef struct of_arena of_arena;
of_arena *of_arena_new(void);
void of_arena_begin(of_arena *a);
void of_arena_end(of_arena *a);
/* this thread's allocations bypass its arena (not recorded, not handed out)
 * until of_arena_resume with what suspend returned */
of_arena *of_arena_suspend(void);
void of_arena_resume(of_arena *a);
void of_arena_release(of_arena *a);   /* freed once no block of it is in use */
int64_t of_arena_bytes(const of_arena *a);
#endif
