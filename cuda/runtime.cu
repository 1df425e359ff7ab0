// runtime.cu -- the CUDA library's entry point (of_cuda_init), devices,
// error reporting, the allocator, copies, streams and events.
//
// Allocator: CUDA's stream-ordered pool (cudaMallocAsync on the current
// stream) with the release threshold at its maximum, so freed blocks stay
// cached in the pool and are reused in stream order; empty_cache trims it.
// We keep our own statistics per device (bytes held by tensors, peak).
#include "common.cuh"
#include "kernels.cuh"
#include <atomic>
#include <mutex>
#include <string.h>
#include <unordered_set>
#include <vector>

namespace ofc {

enum { kMaxDevices = 64 };

static int g_count = 0;
static std::mutex g_lock;
struct StreamRec {
  cudaStream_t s;
  cudaEvent_t ev;   // recorded on s to order a free after s's queued work
};
static struct DevState {
  bool ready;
  cudaMemPool_t pool;
  of_memory_stats stats;
  int *flag;           // device int: bad-input flag set by kernels
  char free_err[256];  // the first failed cudaFreeAsync since the last report
  // CUDA graph capture: a cudaFreeAsync inside the capture of memory
  // allocated before it (a Lua GC during g:capture) invalidates the capture;
  // such frees wait for its end. Memory allocated during the capture is
  // freed inside it (a free node of the graph).
  std::atomic<int> capturing;
  std::unordered_set<void *> cap_allocs;
  std::vector<void *> deferred;
  // the streams made with stream_new, and an event for the default stream:
  // a free is ordered after the work queued on each of them, so memory used
  // on another stream is not handed out again while that work runs
  std::vector<StreamRec> streams;
  cudaEvent_t default_ev;
} g_dev[kMaxDevices];
static thread_local cudaStream_t t_stream[kMaxDevices];
static thread_local const char *t_last_op = "";
// a failed cudaSetDevice / device initialisation in use_device, reported by
// the launch that follows (launched) instead of blaming a later op
static thread_local char t_use_err[256];

of_status cuda_fail(cudaError_t e, const char *op, const char *what) {
  cudaGetLastError();   // clear a non-sticky error so later calls work
  if (e == cudaErrorMemoryAllocation)
    return of_fail(OF_ERR_OOM, "%s: CUDA out of memory (%s)", op, what);
  return of_fail(OF_ERR_DEVICE, "%s: CUDA error: %s (%s)", op, cudaGetErrorString(e), what);
}

void note_launch(const char *op) { t_last_op = op; }

of_status launched(const char *op) {
  note_launch(op);
  if (t_use_err[0]) {
    of_status st = of_fail(OF_ERR_DEVICE, "%s: %s", op, t_use_err);
    t_use_err[0] = 0;
    cudaGetLastError();
    return st;
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return of_fail(OF_ERR_DEVICE, "%s: CUDA kernel launch failed: %s", op, cudaGetErrorString(e));
  return OF_OK;
}

cudaStream_t current_stream(int dev) { return t_stream[dev]; }
void set_current_stream(int dev, cudaStream_t s) { t_stream[dev] = s; }

static of_status init_device(int d) {
  std::lock_guard<std::mutex> g(g_lock);
  DevState &s = g_dev[d];
  if (s.ready) return OF_OK;
  OFC_TRY(cudaDeviceGetDefaultMemPool(&s.pool, d), "cuda");
  uint64_t thr = UINT64_MAX;
  OFC_TRY(cudaMemPoolSetAttribute(s.pool, cudaMemPoolAttrReleaseThreshold, &thr), "cuda");
  int *flag = NULL;
  OFC_TRY(cudaMalloc(&flag, sizeof(int)), "cuda");
  cudaError_t e = cudaMemset(flag, 0, sizeof(int));
  if (e != cudaSuccess) {
    cudaFree(flag);
    return cuda_fail(e, "cuda", "cudaMemset of the error flag");
  }
  s.flag = flag;   // set only when usable: ready implies a flag
  s.ready = true;
  return OF_OK;
}

int use_device(of_device dv) {
  int d = of_device_index(dv), cur = -1;
  cudaError_t e = cudaGetDevice(&cur);
  if (e == cudaSuccess && cur != d) e = cudaSetDevice(d);
  if (e != cudaSuccess) {
    cudaGetLastError();
    snprintf(t_use_err, sizeof t_use_err, "cannot make cuda:%d current: %s", d,
             cudaGetErrorString(e));
  } else if (!g_dev[d].ready && init_device(d) != OF_OK) {
    snprintf(t_use_err, sizeof t_use_err, "cannot initialise cuda:%d: %s", d, of_last_error());
  }
  return d;
}

// Never NULL for a device that holds tensors (alloc initialises it first);
// kernels still test it (a device whose initialisation failed).
int *error_flag(int dev) { return g_dev[dev].flag; }

// ---- CUDA graph capture and cross-stream frees ----
static bool capturing_now(int d) {
  if (g_dev[d].capturing.load() == 0) return false;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(t_stream[d], &cs) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return cs != cudaStreamCaptureStatusNone;
}

static void note_free_error(int d, cudaError_t e) {
  cudaGetLastError();
  std::lock_guard<std::mutex> g(g_lock);
  if (!g_dev[d].free_err[0])
    snprintf(g_dev[d].free_err, sizeof g_dev[d].free_err, "cudaFreeAsync failed: %s",
             cudaGetErrorString(e));
}

void capture_began(int d) { g_dev[d].capturing++; }

void capture_ended(int d, cudaStream_t prev) {
  std::vector<void *> todo;
  {
    std::lock_guard<std::mutex> g(g_lock);
    g_dev[d].capturing--;
    g_dev[d].cap_allocs.clear();
    todo.swap(g_dev[d].deferred);
  }
  for (void *p : todo) {
    cudaError_t e = cudaFreeAsync(p, prev);
    if (e != cudaSuccess) note_free_error(d, e);
  }
}

// Orders stream s after the work queued so far on the device's other streams
// (only where streams were made: the default stream alone needs nothing).
static void order_after_streams(int d, cudaStream_t s) {
  std::lock_guard<std::mutex> g(g_lock);
  DevState &ds = g_dev[d];
  if (ds.streams.empty()) return;
  if (!ds.default_ev &&
      cudaEventCreateWithFlags(&ds.default_ev, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    ds.default_ev = 0;
  }
  auto after = [&](cudaStream_t o, cudaEvent_t ev) {
    if (o == s || !ev) return;
    if (cudaEventRecord(ev, o) != cudaSuccess || cudaStreamWaitEvent(s, ev, 0) != cudaSuccess)
      cudaGetLastError();
  };
  after(0, ds.default_ev);
  for (const StreamRec &r : ds.streams) after(r.s, r.ev);
}

// ---- devices ----
static int32_t device_count() { return g_count; }
static of_status set_device(int32_t i) {
  OFC_TRY(cudaSetDevice(i), "set_device");
  return init_device(i);
}
static int32_t current_device() {
  int d = 0;
  cudaGetDevice(&d);
  return d;
}

// Ops that name themselves in the flag (flag_code): later launches must not
// take the blame for an earlier kernel's bad input.
static const char *g_flag_ops[256] = {""};
static int g_nflag_ops = 1;

int flag_code(const char *op, int reason) {
  std::lock_guard<std::mutex> g(g_lock);
  int id = 1;
  while (id < g_nflag_ops && strcmp(g_flag_ops[id], op) != 0) id++;
  if (id == g_nflag_ops) {
    if (g_nflag_ops == 256) return reason;   // table full: the last op is named
    g_flag_ops[g_nflag_ops++] = op;
  }
  return reason | id << 8;
}

static of_status check_flag(int d) {
  int h = 0;
  if (!g_dev[d].ready) return OF_OK;
  {
    char err[256] = {0};
    std::lock_guard<std::mutex> g(g_lock);
    if (g_dev[d].free_err[0]) {
      memcpy(err, g_dev[d].free_err, sizeof err);
      g_dev[d].free_err[0] = 0;
      return of_fail(OF_ERR_DEVICE, "synchronize: releasing a tensor's memory on cuda:%d "
                     "failed earlier: %s", d, err);
    }
  }
  OFC_TRY(cudaMemcpy(&h, g_dev[d].flag, sizeof h, cudaMemcpyDeviceToHost), "synchronize");
  if (!h) return OF_OK;
  cudaMemset(g_dev[d].flag, 0, sizeof(int));
  int reason = h & 0xff, id = h >> 8;
  const char *op = id > 0 && id < g_nflag_ops ? g_flag_ops[id] : t_last_op;
  return of_fail(OF_ERR_ARG, "%s: a kernel met bad input on cuda:%d (%s)", op, d,
                 reason == 1 ? "integer division by zero" :
                 reason == 2 ? "integers to negative integer powers are not allowed" :
                 reason == 3 ? "index out of range" : "bad value");
}

static of_status sync_one(int d) {
  int cur = current_device();
  if (cur != d) cudaSetDevice(d);
  cudaError_t e = cudaDeviceSynchronize();
  of_status st = OF_OK;
  if (e != cudaSuccess)
    st = of_fail(OF_ERR_DEVICE, "synchronize: CUDA error on cuda:%d: %s, raised by an "
                 "asynchronous kernel of `%s` or an op before it (run with "
                 "CUDA_LAUNCH_BLOCKING=1 to find it)", d, cudaGetErrorString(e), t_last_op);
  if (st == OF_OK) st = check_flag(d);
  if (cur != d) cudaSetDevice(cur);
  return st;
}

static of_status synchronize(int32_t index) {
  int d = index < 0 ? current_device() : index;
  if (d >= 0 && d < g_count && capturing_now(d))
    return of_fail(OF_ERR_DEVICE, "synchronize: not allowed while cuda:%d captures a CUDA "
                   "graph (it would invalidate the capture)", d);
  return sync_one(d);
}

// ---- memory ----
static void *alloc(of_device dv, int64_t nbytes) {
  int d = use_device(dv);
  DevState &s = g_dev[d];
  if (!s.ready && init_device(d) != OF_OK) return NULL;
  size_t n = (size_t)(nbytes > 0 ? (nbytes + 511) / 512 * 512 : 512);
  void *p = NULL;
  bool cap = capturing_now(d);
  cudaError_t e = cudaMallocAsync(&p, n, t_stream[d]);
  // give cached blocks back and retry once; not while capturing a graph,
  // where synchronising the stream would invalidate the capture
  if (e == cudaErrorMemoryAllocation && !cap) {
    cudaGetLastError();
    cudaStreamSynchronize(t_stream[d]);
    cudaMemPoolTrimTo(s.pool, 0);
    e = cudaMallocAsync(&p, n, t_stream[d]);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    uint64_t reserved = 0;
    cudaMemPoolGetAttribute(s.pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
    if (e == cudaErrorMemoryAllocation)
      of_fail(OF_ERR_OOM, "alloc: CUDA out of memory on cuda:%d: tried to allocate %.2f MiB; "
              "%.2f MiB held by tensors, %.2f MiB reserved by the allocator, %.2f MiB free of "
              "%.2f MiB", d, nbytes / 1048576.0, s.stats.current_bytes / 1048576.0,
              reserved / 1048576.0, fr / 1048576.0, tot / 1048576.0);
    else
      of_fail(OF_ERR_DEVICE, "alloc: CUDA error on cuda:%d allocating %lld bytes: %s", d,
              (long long)nbytes, cudaGetErrorString(e));
    return NULL;
  }
  std::lock_guard<std::mutex> g(g_lock);
  if (cap) s.cap_allocs.insert(p);
  s.stats.alloc_count++;
  s.stats.current_bytes += (int64_t)n;
  s.stats.bytes_since_sweep += (int64_t)n;
  if (s.stats.current_bytes > s.stats.peak_bytes) s.stats.peak_bytes = s.stats.current_bytes;
  return p;
}

static void free_(of_device dv, void *p, int64_t nbytes) {
  int d = use_device(dv);
  size_t n = (size_t)(nbytes > 0 ? (nbytes + 511) / 512 * 512 : 512);
  if (capturing_now(d)) {
    std::lock_guard<std::mutex> g(g_lock);
    g_dev[d].stats.current_bytes -= (int64_t)n;
    if (g_dev[d].cap_allocs.erase(p) == 0) {   // allocated before the capture
      g_dev[d].deferred.push_back(p);
      return;
    }
  } else {
    order_after_streams(d, t_stream[d]);
    std::lock_guard<std::mutex> g(g_lock);
    g_dev[d].stats.current_bytes -= (int64_t)n;
  }
  cudaError_t e = cudaFreeAsync(p, t_stream[d]);
  if (e != cudaSuccess) note_free_error(d, e);
}

static void empty_cache(of_device dv) {
  int d = of_device_index(dv);
  if (d < 0 || d >= g_count || !g_dev[d].ready || capturing_now(d)) return;
  sync_one(d);
  cudaMemPoolTrimTo(g_dev[d].pool, 0);
}

static const of_memory_stats *memory_stats(of_device dv) {
  static of_memory_stats none;
  int d = of_device_index(dv);
  if (d < 0 || d >= g_count || !g_dev[d].ready) return &none;
  DevState &s = g_dev[d];
  uint64_t reserved = 0;
  cudaMemPoolGetAttribute(s.pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
  std::lock_guard<std::mutex> g(g_lock);
  int64_t cached = (int64_t)reserved - s.stats.current_bytes;
  s.stats.cached_bytes = cached > 0 ? cached : 0;
  return &s.stats;
}

static void reset_peak(of_device dv) {
  int d = of_device_index(dv);
  if (d < 0 || d >= g_count) return;
  std::lock_guard<std::mutex> g(g_lock);
  g_dev[d].stats.peak_bytes = g_dev[d].stats.current_bytes;
}

static void *host_alloc(int64_t nbytes) {
  void *p = NULL;
  if (cudaHostAlloc(&p, (size_t)nbytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    return NULL;
  }
  return p;
}
static void host_free(void *p) { cudaFreeHost(p); }

static of_status memcpy_(void *dst, of_device ddev, const void *src, of_device sdev,
                         int64_t nbytes, int32_t non_blocking) {
  if (nbytes == 0) return OF_OK;
  cudaMemcpyKind kind = ddev == OF_CPU ? cudaMemcpyDeviceToHost
                        : sdev == OF_CPU ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice;
  int d = use_device(ddev != OF_CPU ? ddev : sdev);
  cudaStream_t s = t_stream[d];
  if (kind == cudaMemcpyDeviceToDevice && ddev != sdev) {
    OFC_TRY(cudaMemcpyPeerAsync(dst, of_device_index(ddev), src, of_device_index(sdev),
                                (size_t)nbytes, s), "to");
  } else {
    OFC_TRY(cudaMemcpyAsync(dst, src, (size_t)nbytes, kind, s), "to");
  }
  if (non_blocking && kind != cudaMemcpyDeviceToHost) return OF_OK;
  // a copy to the host is where asynchronous errors of earlier kernels show
  cudaError_t e = cudaStreamSynchronize(s);
  if (e != cudaSuccess)
    return of_fail(OF_ERR_DEVICE, "to: CUDA error: %s, raised by an asynchronous kernel of `%s` "
                   "or an op before it (run with CUDA_LAUNCH_BLOCKING=1 to find it)",
                   cudaGetErrorString(e), t_last_op);
  return kind == cudaMemcpyDeviceToHost ? check_flag(d) : OF_OK;
}

// ---- streams and events ----
struct Stream { cudaStream_t s; int dev; };
static of_status stream_new(int32_t index, void **out) {
  int d = index < 0 ? current_device() : index;
  int cur = current_device();
  if (cur != d) cudaSetDevice(d);
  cudaStream_t s;
  cudaEvent_t ev = 0;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e == cudaSuccess) {
    e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) cudaStreamDestroy(s);
  }
  if (cur != d) cudaSetDevice(cur);
  if (e != cudaSuccess) return cuda_fail(e, "Stream", "cudaStreamCreate");
  {
    std::lock_guard<std::mutex> g(g_lock);
    g_dev[d].streams.push_back(StreamRec{s, ev});
  }
  *out = new Stream{s, d};
  return OF_OK;
}
static void stream_free(void *p) {
  Stream *s = (Stream *)p;
  if (!s) return;
  for (int d = 0; d < kMaxDevices; d++)
    if (t_stream[d] == s->s) t_stream[d] = 0;
  {
    std::lock_guard<std::mutex> g(g_lock);
    std::vector<StreamRec> &v = g_dev[s->dev].streams;
    for (size_t i = 0; i < v.size(); i++)
      if (v[i].s == s->s) {
        cudaEventDestroy(v[i].ev);
        v.erase(v.begin() + (long)i);
        break;
      }
  }
  cudaStreamDestroy(s->s);
  delete s;
}
static cudaStream_t raw(void *p) { return p ? ((Stream *)p)->s : t_stream[current_device()]; }
static of_status stream_synchronize(void *p) {
  OFC_TRY(cudaStreamSynchronize(raw(p)), "Stream.synchronize");
  return OF_OK;
}
static int32_t stream_query(void *p) {
  cudaError_t e = cudaStreamQuery(raw(p));
  if (e == cudaErrorNotReady) { cudaGetLastError(); return 0; }
  return 1;
}
static void set_stream(void *p) {
  if (!p) { t_stream[current_device()] = 0; return; }
  Stream *s = (Stream *)p;
  t_stream[s->dev] = s->s;
}
static void *get_stream() { return NULL; }
static of_status stream_wait_event(void *s, void *e) {
  OFC_TRY(cudaStreamWaitEvent(raw(s), (cudaEvent_t)e, 0), "Stream.wait_event");
  return OF_OK;
}
static of_status event_new(int32_t timing, void **out) {
  cudaEvent_t e;
  OFC_TRY(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming),
          "Event");
  *out = (void *)e;
  return OF_OK;
}
static void event_free(void *e) { cudaEventDestroy((cudaEvent_t)e); }
static of_status event_record(void *e, void *s) {
  OFC_TRY(cudaEventRecord((cudaEvent_t)e, raw(s)), "Event.record");
  return OF_OK;
}
static of_status event_synchronize(void *e) {
  OFC_TRY(cudaEventSynchronize((cudaEvent_t)e), "Event.synchronize");
  return OF_OK;
}
static int32_t event_query(void *e) {
  cudaError_t r = cudaEventQuery((cudaEvent_t)e);
  if (r == cudaErrorNotReady) { cudaGetLastError(); return 0; }
  return 1;
}
static of_status event_elapsed(void *a, void *b, double *ms) {
  float f = 0;
  OFC_TRY(cudaEventElapsedTime(&f, (cudaEvent_t)a, (cudaEvent_t)b), "Event.elapsed_time");
  *ms = f;
  return OF_OK;
}

}  // namespace ofc

extern "C" __attribute__((visibility("default"))) int32_t of_cuda_init(of_device_ops *ops,
                                                                       char *why, int32_t cap) {
  using namespace ofc;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    const char *hint = e == cudaErrorInsufficientDriver ? "no CUDA driver (or one too old)"
                       : e == cudaErrorNoDevice ? "no CUDA device" : "CUDA initialisation failed";
    snprintf(why, (size_t)cap, "%s: %s", hint, cudaGetErrorString(e));
    return 1;
  }
  if (n <= 0) {
    snprintf(why, (size_t)cap, "no CUDA device");
    return 1;
  }
  g_count = n < kMaxDevices ? n : kMaxDevices;
  memset(ops, 0, sizeof *ops);
  ops->abi = OF_DEVICE_ABI;
  ops->device_count = device_count;
  ops->set_device = set_device;
  ops->current_device = current_device;
  ops->synchronize = synchronize;
  ops->alloc = alloc;
  ops->free = free_;
  ops->empty_cache = empty_cache;
  ops->memory_stats = memory_stats;
  ops->reset_peak = reset_peak;
  ops->host_alloc = host_alloc;
  ops->host_free = host_free;
  ops->memcpy = memcpy_;
  ops->stream_new = stream_new;
  ops->stream_free = stream_free;
  ops->stream_synchronize = stream_synchronize;
  ops->stream_query = stream_query;
  ops->set_stream = set_stream;
  ops->get_stream = get_stream;
  ops->stream_wait_event = stream_wait_event;
  ops->event_new = event_new;
  ops->event_free = event_free;
  ops->event_record = event_record;
  ops->event_synchronize = event_synchronize;
  ops->event_query = event_query;
  ops->event_elapsed = event_elapsed;
  register_kernels(ops);
  return 0;
}

// For the environment report (tools/gpu_env.lua, through the FFI; not part
// of the device table): out[0] the CUDA runtime this library was built with,
// out[1] the runtime it runs (linked statically: the same), out[2] the
// driver's CUDA version (0 without a driver), as 1000 * major + 10 * minor.
extern "C" __attribute__((visibility("default"))) void of_cuda_versions(int32_t *out) {
  int rt = 0, drv = 0;
  if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
  if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
  cudaGetLastError();
  out[0] = CUDART_VERSION;
  out[1] = rt;
  out[2] = drv;
}
