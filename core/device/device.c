/* device.c -- loading the CUDA library on first use, the device checks of
 * the op runners, cross-device copies, pinned memory, streams and events.
 *
 * Why a separate library loaded with dlopen: a build with CUDA must still
 * import and run every CPU feature on a machine without the driver, cuDNN or
 * cuBLAS. Nothing here touches CUDA until a CUDA tensor, flow.cuda.* query
 * or pinned allocation asks for it. */
#define _GNU_SOURCE
#include "../device.h"
#include "../autograd.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>


static struct { int benchmark, deterministic, allow_tf32; } dnn_flags = {0, 0, 1};

static struct {
  pthread_mutex_t lock;
  int state;              /* 0 not tried, 1 loaded and usable, -1 unavailable */
  int loaded;             /* dlopen succeeded */
  of_device_ops ops;
  char why[1536];
  int allow_tf32;
} cuda = {.lock = PTHREAD_MUTEX_INITIALIZER};

const char *of_device_str(of_device d, char *buf) {
  if (d == OF_CPU) snprintf(buf, 16, "cpu");
  else if (of_device_type(d) == OF_CUDA) snprintf(buf, 16, "cuda:%d", of_device_index(d));
  else snprintf(buf, 16, "device %d", (int)d);
  return buf;
}

int32_t of_cuda_built(void) {
#ifdef OF_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}

/* Directory of liboneflow itself: the CUDA library is built next to it. */
static int self_path(char *buf, size_t cap) {
  Dl_info info;
  if (!dladdr((void *)&of_cuda_built, &info) || !info.dli_fname) return 0;
  snprintf(buf, cap, "%s", info.dli_fname);
  return 1;
}

static void load_locked(void) {
  if (cuda.state != 0) return;
  cuda.state = -1;
  const char *env = getenv("OF_CUDA_LIBRARY");
  char path[1024], self[1024];
  if (env && *env) {
    snprintf(path, sizeof path, "%s", env);
  } else if (!of_cuda_built()) {
    snprintf(cuda.why, sizeof cuda.why,
             "this build has no CUDA part (configure with the CUDA toolkit and -DOF_CUDA=ON)");
    return;
  } else {
    if (!self_path(self, sizeof self)) {
      snprintf(cuda.why, sizeof cuda.why, "cannot find the directory of liboneflow (dladdr)");
      return;
    }
    char *slash = strrchr(self, '/');
    if (slash) slash[1] = 0;
    else self[0] = 0;
    snprintf(path, sizeof path, "%sliboneflow_cuda.so", self);
  }
  /* liboneflow may have been loaded with RTLD_LOCAL (LuaJIT's ffi.load):
   * make its symbols global so the CUDA library's references resolve to
   * this very copy. */
  if (self_path(self, sizeof self)) dlopen(self, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(cuda.why, sizeof cuda.why, "cannot load the CUDA library: %s", dlerror());
    return;
  }
  cuda.loaded = 1;
  of_device_init_fn init = (of_device_init_fn)dlsym(h, "of_cuda_init");
  if (!init) {
    snprintf(cuda.why, sizeof cuda.why, "%s has no of_cuda_init", path);
    return;
  }
  of_device_ops ops;
  memset(&ops, 0, sizeof ops);
  char why[512] = {0};
  if (init(&ops, why, (int32_t)sizeof why) != 0) {
    snprintf(cuda.why, sizeof cuda.why, "%s", why[0] ? why : "CUDA initialisation failed");
    return;
  }
  if (ops.abi != OF_DEVICE_ABI) {
    snprintf(cuda.why, sizeof cuda.why, "%s has device ABI %d, liboneflow expects %d", path,
             (int)ops.abi, OF_DEVICE_ABI);
    return;
  }
  cuda.ops = ops;
  if (cuda.ops.set_allow_tf32) cuda.ops.set_allow_tf32(cuda.allow_tf32);
  if (cuda.ops.set_dnn_flags)
    cuda.ops.set_dnn_flags(dnn_flags.benchmark, dnn_flags.deterministic, dnn_flags.allow_tf32);
  cuda.state = 1;
}

static const of_device_ops *cuda_ops(void) {
  if (__atomic_load_n(&cuda.state, __ATOMIC_ACQUIRE) == 0) {
    pthread_mutex_lock(&cuda.lock);
    load_locked();
    pthread_mutex_unlock(&cuda.lock);
  }
  return cuda.state == 1 ? &cuda.ops : NULL;
}

const of_device_ops *of_device_ops_loaded(void) {
  return __atomic_load_n(&cuda.state, __ATOMIC_ACQUIRE) == 1 ? &cuda.ops : NULL;
}

int32_t of_cuda_is_available(void) { return cuda_ops() != NULL; }
const char *of_cuda_why_unavailable(void) { return cuda_ops() ? "" : cuda.why; }
int32_t of_cuda_library_loaded(void) { return cuda.loaded; }

static const of_device_ops *ops_for(const char *op, of_device dev) {
  if (of_device_type(dev) != OF_CUDA) {
    of_fail(OF_ERR_DEVICE, "%s: unknown device code %d", op, (int)dev);
    return NULL;
  }
  const of_device_ops *o = cuda_ops();
  if (!o) {
    of_fail(OF_ERR_DEVICE, "%s: %s is not available: %s", op, OF_DEV_STR(dev), cuda.why);
    return NULL;
  }
  if (of_device_index(dev) >= o->device_count()) {
    of_fail(OF_ERR_DEVICE, "%s: device cuda:%d does not exist (%d CUDA devices)", op,
            of_device_index(dev), (int)o->device_count());
    return NULL;
  }
  return o;
}

of_status of_common_device(const char *op, of_tensor *const *ts, int32_t n, of_device *out) {
  int k = -1;   /* the tensor that set the device */
  of_device dev = OF_CPU;
  for (int32_t i = 0; i < n; i++) {
    const of_tensor *t = ts[i];
    if (!t) continue;
    of_device d = t->storage->device;
    if (d == OF_CPU && t->ndim == 0) continue;   /* a scalar joins any device */
    if (k < 0) {
      dev = d;
      k = i;
    } else if (d != dev) {
      char b[96];
      return of_fail(OF_ERR_DEVICE, "%s: expected all tensors on one device, got %s (tensor %s) "
                     "and %s (tensor %s); move them with :to()", op, OF_DEV_STR(dev),
                     OF_SHAPE_STR(ts[k]), OF_DEV_STR(d), of_shape_str(t->shape, t->ndim, b, 96));
    }
  }
  *out = dev;
  return OF_OK;
}

of_status of_device_unsupported(const char *op, of_device dev) {
  return of_fail(OF_ERR_DEVICE, "%s: not implemented on %s yet; move the tensors to the CPU "
                 "with :cpu()", op, OF_DEV_STR(dev));
}

of_status of_prepare_out_on(const char *op, of_tensor *into, const int64_t *shape,
                            int32_t ndim, of_dtype dt, of_device dev, of_tensor **out) {
  if (!into) return of_tensor_new(shape, ndim, dt, dev, out);
  if (of_dev(into) != dev)
    return of_fail(OF_ERR_DEVICE, "%s: output is on %s, the inputs on %s", op,
                   OF_DEV_STR(of_dev(into)), OF_DEV_STR(dev));
  return of_prepare_out(op, into, shape, ndim, dt, out);
}

/* ---- copies between devices -------------------------------------------- */

/* dst and src contiguous, same dtype and numel, on different devices */
static of_status move_bytes(of_tensor *dst, of_tensor *src, int32_t non_blocking) {
  of_device d = of_dev(dst) != OF_CPU ? of_dev(dst) : of_dev(src);
  const of_device_ops *o = of_device_ops_for("to", d);
  if (!o) return OF_ERR_DEVICE;
  return o->memcpy(of_ptr(dst), of_dev(dst), of_ptr(src), of_dev(src),
                   dst->numel * of_dtype_size(dst->dtype), non_blocking);
}

static of_status copy_across(of_tensor *dst, of_tensor *src, int32_t non_blocking) {
  /* bring src to dst's shape, dtype and a dense layout on its own device,
   * move the bytes, then place them into dst on dst's device */
  of_tensor *s = NULL, *m = NULL;
  of_status st = OF_OK;
  bool same = src->ndim == dst->ndim && src->dtype == dst->dtype &&
              of_tensor_is_contiguous(src);
  for (int32_t i = 0; same && i < dst->ndim; i++) same = src->shape[i] == dst->shape[i];
  /* two channels-last tensors of one shape and dtype: the same bytes */
  bool cl = src->ndim == dst->ndim && src->dtype == dst->dtype && of_is_channels_last(src) &&
            of_is_channels_last(dst);
  for (int32_t i = 0; cl && i < dst->ndim; i++) cl = src->shape[i] == dst->shape[i];
  if (cl) return move_bytes(dst, src, non_blocking);
  if (same) {
    s = src;
    of_tensor_retain(s);
  } else {
    st = of_tensor_new(dst->shape, dst->ndim, dst->dtype, of_dev(src), &s);
    if (st == OF_OK) st = of_copy_data(s, src);
    non_blocking = 0;   /* s is a temporary: the copy must finish before it dies */
  }
  if (st != OF_OK) goto done;
  if (of_tensor_is_contiguous(dst)) {
    st = move_bytes(dst, s, non_blocking);
  } else {
    st = of_tensor_new(dst->shape, dst->ndim, dst->dtype, of_dev(dst), &m);
    if (st == OF_OK) st = move_bytes(m, s, 0);
    if (st == OF_OK) st = of_copy_data(dst, m);
  }
done:
  of_tensor_release(s);
  of_tensor_release(m);
  return st;
}

/* storage and data movement call down into the backends through these */
static const of_device_hooks hooks = {ops_for, of_device_ops_loaded, copy_across};
__attribute__((constructor)) static void install_hooks(void) { of_device_install(&hooks); }

/* ---- pinned memory ---- */
static void pinned_free(void *p, void *ctx) {
  (void)ctx;
  if (cuda.state == 1 && cuda.ops.host_free) cuda.ops.host_free(p);
}

int32_t of_tensor_is_pinned(const of_tensor *t) {
  return t && t->storage->deleter == pinned_free;
}

of_status of_pin_memory(of_tensor *t, of_tensor **out) {
  if (!t) return of_fail(OF_ERR_ARG, "pin_memory: tensor is NULL");
  if (of_dev(t) != OF_CPU)
    return of_fail(OF_ERR_DEVICE, "pin_memory: only CPU tensors can be pinned, got one on %s",
                   OF_DEV_STR(of_dev(t)));
  if (of_tensor_is_pinned(t)) {
    of_tensor_retain(t);
    *out = t;
    return OF_OK;
  }
  const of_device_ops *o = cuda_ops();
  int64_t nbytes = t->numel * of_dtype_size(t->dtype);
  void *p = o && o->host_alloc ? o->host_alloc(nbytes ? nbytes : 1) : NULL;
  of_tensor *r;
  if (!p) {   /* no CUDA: a plain copy, as the documentation says */
    OF_CHECK(of_clone_data(t, &r));
  } else {
    of_status st = of_tensor_wrap_blob(p, t->shape, NULL, t->ndim, t->dtype, pinned_free, NULL, &r);
    if (st != OF_OK) {
      o->host_free(p);
      return st;
    }
    st = of_copy_data(r, t);
    if (st != OF_OK) {
      of_tensor_release(r);
      return st;
    }
    r->storage->version = 0;
  }
  *out = r;
  return OF_OK;
}

/* ---- device management ---- */
#define NEED_CUDA(OP)                                                  \
  const of_device_ops *o = cuda_ops();                                 \
  if (!o) return of_fail(OF_ERR_DEVICE, OP ": CUDA is not available: %s", cuda.why)

int32_t of_cuda_device_count(void) {
  const of_device_ops *o = cuda_ops();
  return o ? o->device_count() : 0;
}

of_status of_cuda_set_device(int32_t index) {
  NEED_CUDA("set_device");
  if (index < 0 || index >= o->device_count())
    return of_fail(OF_ERR_DEVICE, "set_device: device %d does not exist (%d CUDA devices)",
                   (int)index, (int)o->device_count());
  return o->set_device(index);
}

int32_t of_cuda_current_device(void) {
  const of_device_ops *o = cuda_ops();
  return o ? o->current_device() : -1;
}

of_status of_cuda_synchronize(int32_t index) {
  NEED_CUDA("synchronize");
  return o->synchronize(index);
}

void of_cuda_set_allow_tf32(int32_t on) {
  cuda.allow_tf32 = on != 0;
  if (cuda.state == 1 && cuda.ops.set_allow_tf32) cuda.ops.set_allow_tf32(on != 0);
}
int32_t of_cuda_get_allow_tf32(void) { return cuda.allow_tf32; }

/* ---- streams and events: thin handles over the library's ---- */
struct of_stream { void *h; };
struct of_event { void *h; };

of_status of_stream_new(int32_t index, of_stream **out) {
  NEED_CUDA("Stream");
  of_stream *s = malloc(sizeof *s);
  if (!s) return of_fail(OF_ERR_OOM, "Stream: out of memory");
  of_status st = o->stream_new(index, &s->h);
  if (st != OF_OK) {
    free(s);
    return st;
  }
  *out = s;
  return OF_OK;
}

void of_stream_release(of_stream *s) {
  if (!s) return;
  if (cuda.state == 1) cuda.ops.stream_free(s->h);
  free(s);
}

of_status of_stream_synchronize(of_stream *s) {
  NEED_CUDA("Stream.synchronize");
  return o->stream_synchronize(s ? s->h : NULL);
}

int32_t of_stream_query(of_stream *s) {
  const of_device_ops *o = cuda_ops();
  return o ? o->stream_query(s ? s->h : NULL) : 1;
}

of_status of_set_stream(of_stream *s) {
  NEED_CUDA("set_stream");
  o->set_stream(s ? s->h : NULL);
  return OF_OK;
}

of_status of_stream_wait_event(of_stream *s, of_event *e) {
  NEED_CUDA("Stream.wait_event");
  if (!e) return of_fail(OF_ERR_ARG, "Stream.wait_event: event is NULL");
  return o->stream_wait_event(s ? s->h : NULL, e->h);
}

of_status of_event_new(int32_t enable_timing, of_event **out) {
  NEED_CUDA("Event");
  of_event *e = malloc(sizeof *e);
  if (!e) return of_fail(OF_ERR_OOM, "Event: out of memory");
  of_status st = o->event_new(enable_timing, &e->h);
  if (st != OF_OK) {
    free(e);
    return st;
  }
  *out = e;
  return OF_OK;
}

void of_event_release(of_event *e) {
  if (!e) return;
  if (cuda.state == 1) cuda.ops.event_free(e->h);
  free(e);
}

of_status of_event_record(of_event *e, of_stream *s) {
  NEED_CUDA("Event.record");
  return o->event_record(e->h, s ? s->h : NULL);
}

of_status of_event_synchronize(of_event *e) {
  NEED_CUDA("Event.synchronize");
  return o->event_synchronize(e->h);
}

int32_t of_event_query(of_event *e) {
  const of_device_ops *o = cuda_ops();
  return o ? o->event_query(e->h) : 1;
}

of_status of_event_elapsed_ms(of_event *start, of_event *end, double *out) {
  NEED_CUDA("Event.elapsed_time");
  return o->event_elapsed(start->h, end->h, out);
}

/* ---- cuDNN and CUDA graphs ---- */

const char *of_cudnn_why_unavailable(void) {
  const of_device_ops *o = cuda_ops();
  if (!o) return cuda.why;
  if (!o->dnn_why_unavailable) return "the CUDA library has no cuDNN part";
  return o->dnn_why_unavailable();
}

int32_t of_cudnn_version(void) {
  const of_device_ops *o = cuda_ops();
  return o && o->dnn_version ? o->dnn_version() : 0;
}

void of_cudnn_set_flags(int32_t benchmark, int32_t deterministic, int32_t allow_tf32) {
  dnn_flags.benchmark = benchmark != 0;
  dnn_flags.deterministic = deterministic != 0;
  dnn_flags.allow_tf32 = allow_tf32 != 0;
  const of_device_ops *o = of_device_ops_loaded();
  if (o && o->set_dnn_flags) o->set_dnn_flags(benchmark, deterministic, allow_tf32);
}

struct of_cuda_graph {
  void *capture;   /* between capture_begin and capture_end */
  void *graph;     /* the instantiated graph */
};

of_status of_cuda_graph_new(of_cuda_graph **out) {
  of_cuda_graph *g = calloc(1, sizeof *g);
  if (!g) return of_fail(OF_ERR_OOM, "CUDAGraph: out of memory");
  *out = g;
  return OF_OK;
}

void of_cuda_graph_release(of_cuda_graph *g) {
  if (!g) return;
  if (cuda.state == 1 && g->graph) cuda.ops.graph_free(g->graph);
  if (cuda.state == 1 && g->capture) {   /* an unfinished capture: end and drop it */
    void *h = NULL;
    if (cuda.ops.graph_capture_end(g->capture, &h) == OF_OK) cuda.ops.graph_free(h);
  }
  free(g);
}

of_status of_cuda_graph_capture_begin(of_cuda_graph *g, int32_t index) {
  NEED_CUDA("CUDAGraph.capture_begin");
  if (!g) return of_fail(OF_ERR_ARG, "CUDAGraph.capture_begin: graph is NULL");
  if (g->capture) return of_fail(OF_ERR_STATE, "CUDAGraph.capture_begin: already capturing");
  if (g->graph) return of_fail(OF_ERR_STATE, "CUDAGraph.capture_begin: this graph was already "
                               "captured; make a new CUDAGraph");
  if (!o->graph_capture_begin)
    return of_fail(OF_ERR_DEVICE, "CUDAGraph: the CUDA library has no graph support");
  if (index >= o->device_count())
    return of_fail(OF_ERR_DEVICE, "CUDAGraph.capture_begin: device %d does not exist (%d CUDA "
                   "devices)", (int)index, (int)o->device_count());
  return o->graph_capture_begin(index, &g->capture);
}

of_status of_cuda_graph_capture_end(of_cuda_graph *g) {
  NEED_CUDA("CUDAGraph.capture_end");
  if (!g || !g->capture)
    return of_fail(OF_ERR_STATE, "CUDAGraph.capture_end: no capture in progress");
  void *c = g->capture;
  g->capture = NULL;
  return o->graph_capture_end(c, &g->graph);
}

of_status of_cuda_graph_replay(of_cuda_graph *g) {
  NEED_CUDA("CUDAGraph.replay");
  if (!g || !g->graph)
    return of_fail(OF_ERR_STATE, "CUDAGraph.replay: nothing captured yet (call capture_begin "
                   "and capture_end first)");
  return o->graph_launch(g->graph);
}
