// nccl.cu -- the NCCL communicator backend for CUDA tensors
// (of_comm_device_backend, core/dist/backend.h).
//
// libnccl is loaded with dlopen on the first call of of_device_ops.nccl, so
// liboneflow_cuda.so loads (and every single-GPU feature works) on machines
// without NCCL; nccl.h is only needed at build time (OF_HAVE_NCCL).
//
// Timeouts: communicators are created non-blocking (config.blocking = 0), so
// neither the setup nor a collective can block the host inside NCCL; each
// call is enqueued on the caller's stream, then an event on that stream is
// polled together with ncclCommGetAsyncError. After `timeout` seconds the
// communicator is aborted (ncclCommAbort) and the call fails naming the op;
// later calls on it fail at once.
#include "common.cuh"
#include "kernels.cuh"
extern "C" {
#include "dist/backend.h"
}
#include <dlfcn.h>
#include <stdarg.h>
#include <time.h>
#include <string.h>

#ifdef OF_HAVE_NCCL
#include <nccl.h>

namespace ofc {

static thread_local char t_err[1024];
static const char *nerror() { return t_err; }

// ---- the library, loaded on first use ----
static struct Lib {
  bool tried, ok;
  char why[512];
#define OFC_NCCL_FNS(X)                                                              \
  X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclCommDestroy)  \
  X(ncclCommAbort) X(ncclCommGetAsyncError) X(ncclGetErrorString) X(ncclGetLastError) \
  X(ncclAllReduce) X(ncclBroadcast) X(ncclReduce) X(ncclAllGather)                   \
  X(ncclReduceScatter) X(ncclSend) X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd)
#define OFC_DECL(f) decltype(&::f) f;
  OFC_NCCL_FNS(OFC_DECL)
#undef OFC_DECL
} lib;

static bool load_nccl(char *why, int32_t cap) {
  if (lib.tried) {
    if (!lib.ok) snprintf(why, (size_t)cap, "%s", lib.why);
    return lib.ok;
  }
  lib.tried = true;
  const char *env = getenv("OF_NCCL_LIBRARY");
  const char *names[] = {env && *env ? env : "libnccl.so.2", "libnccl.so"};
  void *h = NULL;
  char first[400] = "";
  for (int i = 0; i < 2 && !h; i++) {
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h && i == 0) snprintf(first, sizeof first, "%s", dlerror());
  }
  if (!h) {
    snprintf(lib.why, sizeof lib.why, "cannot load libnccl: %s", first);
    snprintf(why, (size_t)cap, "%s", lib.why);
    return false;
  }
#define OFC_SYM(f)                                                                 \
  lib.f = (decltype(lib.f))dlsym(h, #f);                                           \
  if (!lib.f) {                                                                    \
    snprintf(lib.why, sizeof lib.why, "libnccl lacks %s (NCCL >= 2.14 is needed)", #f); \
    snprintf(why, (size_t)cap, "%s", lib.why);                                     \
    return false;                                                                  \
  }
  OFC_NCCL_FNS(OFC_SYM)
#undef OFC_SYM
  lib.ok = true;
  return true;
}

// ---- communicators ----
struct Comm {
  ncclComm_t c;
  int device, rank, size;
  bool aborted;
  int64_t ops;          // collectives issued, for messages
  cudaEvent_t done;
};

static double now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nap(double waited) {
  struct timespec ts = {0, waited < 1e-3 ? 20000 : 200000};   // 20 us, then 200 us
  nanosleep(&ts, NULL);
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t_err, sizeof t_err, fmt, ap);
  va_end(ap);
  return 1;
}

static int nccl_fail(Comm *c, ncclResult_t r, const char *op) {
  const char *last = c && c->c ? lib.ncclGetLastError(c->c) : "";
  return fail("%s: NCCL error on rank %d: %s%s%s", op, c ? c->rank : -1,
              lib.ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

static int timed_out(Comm *c, const char *op, double timeout, const char *what) {
  lib.ncclCommAbort(c->c);
  c->c = NULL;
  c->aborted = true;
  return fail("%s: timed out after %g s on rank %d (NCCL, operation #%lld on a group of %d, "
              "%s); the communicator was aborted: a peer is dead, hung, or calling another "
              "collective", op, timeout, c->rank, (long long)c->ops, c->size, what);
}

// Waits until the communicator leaves ncclInProgress (non-blocking calls).
static int settle(Comm *c, ncclResult_t r, const char *op, double timeout, double t0) {
  if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(c, r, op);
  for (;;) {
    ncclResult_t a = ncclSuccess;
    ncclResult_t q = lib.ncclCommGetAsyncError(c->c, &a);
    if (q != ncclSuccess) return nccl_fail(c, q, op);
    if (a == ncclSuccess) return 0;
    if (a != ncclInProgress) return nccl_fail(c, a, op);
    double w = now() - t0;
    if (timeout > 0 && w > timeout) return timed_out(c, op, timeout, "setting up");
    nap(w);
  }
}

// Waits for the work just enqueued on s, watching for asynchronous errors.
static int finish(Comm *c, cudaStream_t s, const char *op, double timeout, double t0) {
  cudaError_t e = cudaEventRecord(c->done, s);
  if (e != cudaSuccess) return fail("%s: CUDA error: %s", op, cudaGetErrorString(e));
  for (;;) {
    e = cudaEventQuery(c->done);
    if (e == cudaSuccess) return 0;
    if (e != cudaErrorNotReady)
      return fail("%s: CUDA error while waiting for NCCL on rank %d: %s", op, c->rank,
                  cudaGetErrorString(e));
    ncclResult_t a = ncclSuccess;
    lib.ncclCommGetAsyncError(c->c, &a);
    if (a != ncclSuccess && a != ncclInProgress) {
      int rc = nccl_fail(c, a, op);
      lib.ncclCommAbort(c->c);
      c->c = NULL;
      c->aborted = true;
      return rc;
    }
    double w = now() - t0;
    if (timeout > 0 && w > timeout) return timed_out(c, op, timeout, "waiting for peers");
    nap(w);
  }
}

static int usable(Comm *c, const char *op) {
  if (c->aborted)
    return fail("%s: the NCCL communicator was aborted after an earlier timeout or error; "
                "restart the job", op);
  int cur = -1;
  cudaGetDevice(&cur);
  if (cur != c->device) cudaSetDevice(c->device);
  c->ops++;
  return 0;
}

static int unique_id(void *id) {
  ncclUniqueId u;
  ncclResult_t r = lib.ncclGetUniqueId(&u);
  if (r != ncclSuccess) return fail("ncclGetUniqueId: %s", lib.ncclGetErrorString(r));
  static_assert(sizeof u <= OF_COMM_ID_BYTES, "NCCL unique id larger than expected");
  memset(id, 0, OF_COMM_ID_BYTES);
  memcpy(id, &u, sizeof u);
  return 0;
}

static int comm_init(const void *id, int32_t nranks, int32_t rank, int32_t device,
                     const char *op, double timeout, void **out) {
  Comm *c = new Comm();
  c->device = device;
  c->rank = rank;
  c->size = nranks;
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    delete c;
    return fail("%s: CUDA error on cuda:%d: %s", op, device, cudaGetErrorString(e));
  }
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  double t0 = now();
  ncclResult_t r = lib.ncclCommInitRankConfig(&c->c, nranks, u, rank, &cfg);
  int rc = settle(c, r, op, timeout, t0);
  if (rc) {
    if (c->c) lib.ncclCommAbort(c->c);
    cudaEventDestroy(c->done);
    delete c;
    return rc;
  }
  *out = c;
  return 0;
}

static void comm_free(void *p) {
  Comm *c = (Comm *)p;
  if (!c) return;
  if (c->c) lib.ncclCommDestroy(c->c);
  cudaEventDestroy(c->done);
  delete c;
}

static ncclDataType_t nty(of_wire w) {
  switch (w) {
    case OF_WIRE_U8: return ncclUint8;
    case OF_WIRE_I8: return ncclInt8;
    case OF_WIRE_I32: return ncclInt32;
    case OF_WIRE_I64: return ncclInt64;
    case OF_WIRE_F32: return ncclFloat32;
    case OF_WIRE_F64: return ncclFloat64;
    default: return ncclFloat16;   // U16: halves, moved, never reduced
  }
}
static size_t wsize(of_wire w) {
  static const size_t sz[] = {1, 1, 4, 8, 4, 8, 2};
  return sz[w];
}
static ncclRedOp_t nred(int32_t r) { return r == 1 ? ncclMax : r == 2 ? ncclMin : ncclSum; }

#define OFC_BEGIN(c, op)                 \
  Comm *c = (Comm *)cv;                  \
  if (usable(c, op)) return 1;           \
  cudaStream_t s = (cudaStream_t)stream; \
  double t0 = now()
#define OFC_END(c, r, op)                                  \
  do {                                                     \
    int rc_ = settle(c, r, op, timeout, t0);               \
    return rc_ ? rc_ : finish(c, s, op, timeout, t0);      \
  } while (0)

static int all_reduce(void *cv, void *stream, void *buf, int64_t n, of_wire w, int32_t red,
                      const char *op, double timeout) {
  OFC_BEGIN(c, op);
  ncclResult_t r = lib.ncclAllReduce(buf, buf, (size_t)n, nty(w), nred(red), c->c, s);
  OFC_END(c, r, op);
}

static int broadcast(void *cv, void *stream, void *buf, int64_t n, of_wire w, int32_t root,
                     const char *op, double timeout) {
  OFC_BEGIN(c, op);
  ncclResult_t r = lib.ncclBroadcast(buf, buf, (size_t)n, nty(w), root, c->c, s);
  OFC_END(c, r, op);
}

static bool even(const int64_t *counts, int size) {
  for (int i = 1; i < size; i++)
    if (counts[i] != counts[0]) return false;
  return true;
}

// Group calls: the first failing call's result, after closing the group.
static ncclResult_t group_end(ncclResult_t r) {
  ncclResult_t e = lib.ncclGroupEnd();
  if (r != ncclSuccess && r != ncclInProgress) return r;
  return e;
}

static int all_gather(void *cv, void *stream, const void *in, void *out, const int64_t *counts,
                      of_wire w, const char *op, double timeout) {
  OFC_BEGIN(c, op);
  ncclDataType_t t = nty(w);
  ncclResult_t r;
  if (even(counts, c->size)) {
    r = lib.ncclAllGather(in, out, (size_t)counts[0], t, c->c, s);
  } else {   // uneven shards: one broadcast per rank, grouped
    lib.ncclGroupStart();
    r = ncclSuccess;
    char *o = (char *)out;
    for (int i = 0; i < c->size && (r == ncclSuccess || r == ncclInProgress); i++) {
      const void *src = i == c->rank ? in : o;
      r = lib.ncclBroadcast(src, o, (size_t)counts[i], t, i, c->c, s);
      o += counts[i] * wsize(w);
    }
    r = group_end(r);
  }
  OFC_END(c, r, op);
}

static int reduce_scatter(void *cv, void *stream, const void *in, void *out,
                          const int64_t *counts, of_wire w, int32_t red, const char *op,
                          double timeout) {
  OFC_BEGIN(c, op);
  ncclDataType_t t = nty(w);
  ncclResult_t r;
  if (even(counts, c->size)) {
    r = lib.ncclReduceScatter(in, out, (size_t)counts[0], t, nred(red), c->c, s);
  } else {   // uneven: one reduce to each rank, grouped
    lib.ncclGroupStart();
    r = ncclSuccess;
    const char *p = (const char *)in;
    for (int i = 0; i < c->size && (r == ncclSuccess || r == ncclInProgress); i++) {
      r = lib.ncclReduce(p, out, (size_t)counts[i], t, nred(red), i, c->c, s);
      p += counts[i] * wsize(w);
    }
    r = group_end(r);
  }
  OFC_END(c, r, op);
}

static int all_to_all(void *cv, void *stream, const void *in, const int64_t *sc, void *out,
                      const int64_t *rc, of_wire w, const char *op, double timeout) {
  OFC_BEGIN(c, op);
  ncclDataType_t t = nty(w);
  const char *p = (const char *)in;
  char *o = (char *)out;
  lib.ncclGroupStart();
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < c->size && (r == ncclSuccess || r == ncclInProgress); i++) {
    if (sc[i] > 0) r = lib.ncclSend(p, (size_t)sc[i], t, i, c->c, s);
    if (rc[i] > 0 && (r == ncclSuccess || r == ncclInProgress))
      r = lib.ncclRecv(o, (size_t)rc[i], t, i, c->c, s);
    p += sc[i] * wsize(w);
    o += rc[i] * wsize(w);
  }
  r = group_end(r);
  OFC_END(c, r, op);
}

static int p2p_send(void *cv, void *stream, const void *buf, int64_t n, of_wire w, int32_t peer,
                const char *op, double timeout) {
  OFC_BEGIN(c, op);
  ncclResult_t r = lib.ncclSend(buf, (size_t)n, nty(w), peer, c->c, s);
  OFC_END(c, r, op);
}

static int p2p_recv(void *cv, void *stream, void *buf, int64_t n, of_wire w, int32_t peer,
                const char *op, double timeout) {
  OFC_BEGIN(c, op);
  ncclResult_t r = lib.ncclRecv(buf, (size_t)n, nty(w), peer, c->c, s);
  OFC_END(c, r, op);
}

static const of_comm_device_backend backend = {
  OF_COMM_DEVICE_ABI, "nccl", unique_id, comm_init, comm_free, all_reduce, broadcast,
  all_gather, reduce_scatter, all_to_all, p2p_send, p2p_recv, nerror,
};

static const of_comm_device_backend *nccl(char *why, int32_t cap) {
  return load_nccl(why, cap) ? &backend : NULL;
}

}  // namespace ofc

#else   // built without nccl.h

namespace ofc {
static const of_comm_device_backend *nccl(char *why, int32_t cap) {
  snprintf(why, (size_t)cap, "this build has no NCCL support (nccl.h was not found when "
           "liboneflow_cuda was built)");
  return NULL;
}
}  // namespace ofc

#endif

namespace ofc {
static void *raw_stream(int32_t index) { return (void *)current_stream(index); }

void register_nccl(of_device_ops *ops) {
  ops->nccl = nccl;
  ops->raw_stream = raw_stream;
}
}  // namespace ofc
