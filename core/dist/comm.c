/* comm.c -- processes and communicators (public of_dist_* / of_comm_* API).
 *
 * The backend is chosen once, on first use: a process started by a launcher
 * (mpirun, srun with PMI/PMIx) dlopens liboneflow_mpi.so; any other process
 * is a world of one, served in-process. Tensors are CPU and contiguous on the
 * wire; float16/bfloat16 reductions go through float32, bool through uint8
 * (sum of bools is a logical or). */
#define _GNU_SOURCE
#include "internal.h"
#include "device.h"
#include "dist/backend.h"
#include "dist/comm.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct of_comm {
  int64_t refcount;
  void *bc;            /* the backend's communicator */
  int32_t rank, size;
  void *dc;            /* the device backend's communicator (NCCL), made on first use */
  of_device ddev;      /* its device */
};

static const of_comm_backend *backend;
static const of_comm_device_backend *dbackend;   /* loaded with the first device collective */
static of_comm world = {1, NULL, 0, 1, NULL, OF_CPU};
static int init_state;            /* 0 not tried, 1 ok, -1 failed */
static char init_error[1024];
static double timeout_s = -1;

/* ---- world of one ------------------------------------------------------ */
static int self_dummy;
static const char *self_err = "";
static int s_init(void) { return 0; }
static void *s_world(void) { return &self_dummy; }
static int32_t s_rank(void *c) { return 0; }
static int32_t s_size(void *c) { return 1; }
static int32_t s_local_rank(void) { return 0; }
static int s_group(void *p, const int32_t *r, int32_t n, void **out) {
  *out = &self_dummy;
  return 0;
}
static void s_free(void *c) {}
static int s_barrier(void *c, const char *op, double t) { return 0; }
static int s_all_reduce(void *c, void *b, int64_t n, of_wire w, int32_t r, const char *op,
                        double t) {
  return 0;
}
static int s_broadcast(void *c, void *b, int64_t n, of_wire w, int32_t root, const char *op,
                       double t) {
  return 0;
}
static int64_t wire_size(of_wire w) {
  static const int64_t sz[] = {1, 1, 4, 8, 4, 8, 2};
  return sz[w];
}
static int s_all_gather(void *c, const void *in, void *out, const int64_t *counts, of_wire w,
                        const char *op, double t) {
  memmove(out, in, (size_t)(counts[0] * wire_size(w)));
  return 0;
}
static int s_reduce_scatter(void *c, const void *in, void *out, const int64_t *counts,
                            of_wire w, int32_t r, const char *op, double t) {
  memmove(out, in, (size_t)(counts[0] * wire_size(w)));
  return 0;
}
static int s_all_to_all(void *c, const void *in, const int64_t *sc, void *out,
                        const int64_t *rc, of_wire w, const char *op, double t) {
  memmove(out, in, (size_t)(sc[0] * wire_size(w)));
  return 0;
}
static int s_p2p(void *c, void *b, int64_t n, of_wire w, int32_t peer, int32_t tag,
                 const char *op, double t) {
  self_err = "a world of one process has no peer to send to or receive from "
             "(launch with mpirun to use several processes)";
  return 1;
}
static int s_send(void *c, const void *b, int64_t n, of_wire w, int32_t peer, int32_t tag,
                  const char *op, double t) {
  return s_p2p(c, NULL, n, w, peer, tag, op, t);
}
static const char *s_error(void) { return self_err; }
static int s_iall_reduce(void *c, const void *in, void *out, int64_t n, of_wire w, int32_t r,
                         const char *op, void **req) {
  if (in != out) memmove(out, in, (size_t)(n * wire_size(w)));
  *req = &self_dummy;
  return 0;
}
static int s_test(void *req) { return 1; }
static int s_wait(void *req, double t) { return 0; }
static const of_comm_backend self_backend = {
  OF_COMM_ABI, "self", s_init, s_world, s_rank, s_size, s_local_rank, s_group, s_free,
  s_barrier, s_all_reduce, s_broadcast, s_all_gather, s_reduce_scatter, s_all_to_all,
  s_send, s_p2p, s_error, s_iall_reduce, s_test, s_wait,
};

/* ---- choosing the backend --------------------------------------------- */
/* What the launcher's environment says. Open MPI's mpirun sets
 * OMPI_COMM_WORLD_*; an srun task has SLURM_PROCID and SLURM_STEP_NUM_TASKS
 * (the tasks of its step; SLURM_NTASKS is the job's count, which a batch
 * script sees as well while it runs alone, so it counts only inside a step:
 * with SLURM_STEP_ID); the PMI_ and PMIX_ variables are how srun --mpi=pmix|pmi2 (or
 * another MPI's launcher) hand MPI its wire-up. */
static const char *pmi_vars[] = {"PMI_SIZE", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"};

/* A variable holding a non-negative integer: 1 and *v; 0 when unset; -1 (with
 * the error set) when it holds anything else. */
static int env_int(const char *name, int32_t *v) {
  const char *e = getenv(name);
  if (!e) return 0;
  char *end = NULL;
  long x = strtol(e, &end, 10);
  if (!*e || *end || x < 0 || x > INT32_MAX) {
    of_fail(OF_ERR_ARG, "distributed: %s=\"%.40s\" is not a non-negative integer (set by the "
            "launcher; unset it or fix it)", name, e);
    return -1;
  }
  *v = (int32_t)x;
  return 1;
}

of_status of_dist_launch_info(of_dist_launch *out) {
  memset(out, 0, sizeof *out);
  out->rank = out->size = out->local_rank = out->node_rank = out->nodes = -1;
  for (size_t i = 0; i < sizeof pmi_vars / sizeof *pmi_vars; i++)
    if (getenv(pmi_vars[i])) out->pmi = 1;
  if (getenv("OMPI_COMM_WORLD_SIZE")) {
    snprintf(out->launcher, sizeof out->launcher, "mpirun");
    if (env_int("OMPI_COMM_WORLD_RANK", &out->rank) < 0 ||
        env_int("OMPI_COMM_WORLD_SIZE", &out->size) < 0 ||
        env_int("OMPI_COMM_WORLD_LOCAL_RANK", &out->local_rank) < 0)
      return OF_ERR_ARG;
    out->pmi = 1;
    return OF_OK;
  }
  int has_rank = env_int("SLURM_PROCID", &out->rank);
  int has_size = env_int("SLURM_STEP_NUM_TASKS", &out->size);
  int in_step = getenv("SLURM_STEP_ID") || getenv("SLURM_STEPID");
  if (has_rank < 0 || has_size < 0) return OF_ERR_ARG;
  if (has_size == 0 && in_step && (has_size = env_int("SLURM_NTASKS", &out->size)) < 0)
    return OF_ERR_ARG;
  if (has_rank == 1 && has_size == 1) {
    snprintf(out->launcher, sizeof out->launcher, "slurm");
    int n = env_int("SLURM_STEP_NUM_NODES", &out->nodes);
    if (n == 0) n = env_int("SLURM_NNODES", &out->nodes);
    if (n < 0 || env_int("SLURM_LOCALID", &out->local_rank) < 0 ||
        env_int("SLURM_NODEID", &out->node_rank) < 0)
      return OF_ERR_ARG;
    if (out->rank >= out->size)
      return of_fail(OF_ERR_ARG, "distributed: SLURM_PROCID=%d is not below the step's %d "
                     "tasks", (int)out->rank, (int)out->size);
    return OF_OK;
  }
  out->rank = out->size = -1;
  snprintf(out->launcher, sizeof out->launcher, "%s", out->pmi ? "pmi" : "none");
  return OF_OK;
}

static const of_comm_backend *load_mpi(char *err, size_t cap) {
  char path[512];
  const char *env = getenv("OF_MPI_LIBRARY");
  Dl_info info;
  if (env && *env) {
    snprintf(path, sizeof path, "%s", env);
  } else if (dladdr((void *)&of_dist_init, &info) && info.dli_fname &&
             strrchr(info.dli_fname, '/')) {
    const char *slash = strrchr(info.dli_fname, '/');
    snprintf(path, sizeof path, "%.*s/liboneflow_mpi.so", (int)(slash - info.dli_fname),
             info.dli_fname);
  } else {
    snprintf(path, sizeof path, "liboneflow_mpi.so");
  }
  /* RTLD_GLOBAL: Open MPI's components are libraries of their own that
   * expect libmpi's symbols in the global scope. */
  void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    snprintf(err, cap, "cannot load the MPI backend %.300s: %.400s", path, dlerror());
    return NULL;
  }
  of_comm_backend_fn get = (of_comm_backend_fn)dlsym(h, "of_comm_backend_mpi");
  const of_comm_backend *b = get ? get() : NULL;
  if (!b || b->abi != OF_COMM_ABI) {
    snprintf(err, cap, "%.300s is not a matching oneflow MPI backend (rebuild it)", path);
    return NULL;
  }
  return b;
}

double of_dist_get_timeout(void) {
  if (timeout_s < 0) {
    const char *e = getenv("OF_DIST_TIMEOUT");
    double v = e ? atof(e) : 0;
    timeout_s = v > 0 ? v : 60.0;
  }
  return timeout_s;
}

/* What the caller is doing (a global op's name), added to the operation
 * name the backend reports in errors and in answers to "what are you
 * doing?" from a rank that timed out. */
static char label[64];
static char labelled_buf[128];

of_status of_dist_set_label(const char *text) {
  if (!text) text = "";
  snprintf(label, sizeof label, "%s", text);
  return OF_OK;
}

static const char *labelled(const char *op) {
  if (!label[0]) return op;
  snprintf(labelled_buf, sizeof labelled_buf, "%s (in %s)", op, label);
  return labelled_buf;
}

of_status of_dist_set_timeout(double seconds) {
  if (!(seconds > 0))
    return of_fail(OF_ERR_ARG, "set_timeout: expected a positive number of seconds, got %g",
                   seconds);
  timeout_s = seconds;
  return OF_OK;
}

of_status of_dist_init(void) {
  if (init_state == 1) return OF_OK;
  if (init_state == -1) return of_fail(OF_ERR_STATE, "%s", init_error);
  const of_comm_backend *b = &self_backend;
  of_dist_launch L;
  if (of_dist_launch_info(&L) != OF_OK) {
    snprintf(init_error, sizeof init_error, "%s", of_last_error());
    init_state = -1;
    return of_fail(OF_ERR_STATE, "%s", init_error);
  }
  int slurm = strcmp(L.launcher, "slurm") == 0;
  if (slurm && !L.pmi && L.size > 1) {
    /* MPI would start each task as a world of one: N copies training alone */
    snprintf(init_error, sizeof init_error,
             "distributed: srun started %d tasks (this is SLURM_PROCID=%d) but gave MPI no "
             "PMI to connect them; launch with srun --mpi=pmix (or --mpi=pmi2; srun "
             "--mpi=list shows this cluster's), or with mpirun inside the allocation",
             (int)L.size, (int)L.rank);
    init_state = -1;
    return of_fail(OF_ERR_STATE, "%s", init_error);
  }
  if (L.pmi) {
    char err[800];
    b = load_mpi(err, sizeof err);
    if (!b) {
      snprintf(init_error, sizeof init_error,
               "distributed: the process was started by an MPI launcher but %.800s", err);
      init_state = -1;
      return of_fail(OF_ERR_STATE, "%s", init_error);
    }
  }
  if (b->init() != 0) {
    snprintf(init_error, sizeof init_error, "distributed: %s backend: %.900s", b->name,
             b->error());
    init_state = -1;
    return of_fail(OF_ERR_STATE, "%s", init_error);
  }
  backend = b;
  world.bc = b->world();
  world.rank = b->rank(world.bc);
  world.size = b->size(world.bc);
  if (slurm && (world.rank != L.rank || world.size != L.size)) {
    snprintf(init_error, sizeof init_error,
             "distributed: srun says task %d of %d (SLURM_PROCID, SLURM_STEP_NUM_TASKS) but "
             "MPI says rank %d of %d: this MPI did not get its ranks from srun's PMI (is it "
             "built with Slurm's PMIx? try srun --mpi=pmix, or mpirun)", (int)L.rank,
             (int)L.size, (int)world.rank, (int)world.size);
    init_state = -1;
    return of_fail(OF_ERR_STATE, "%s", init_error);
  }
  init_state = 1;
  return OF_OK;
}

const char *of_dist_backend(void) {
  return of_dist_init() == OF_OK ? backend->name : "none";
}
int32_t of_dist_rank(void) { return of_dist_init() == OF_OK ? world.rank : 0; }
int32_t of_dist_world_size(void) { return of_dist_init() == OF_OK ? world.size : 1; }
int32_t of_dist_local_rank(void) {
  return of_dist_init() == OF_OK ? backend->local_rank() : 0;
}

of_status of_comm_world(of_comm **out) {
  *out = NULL;
  OF_CHECK(of_dist_init());
  *out = &world;
  return OF_OK;
}

int32_t of_comm_rank(const of_comm *c) { return c->rank; }
int32_t of_comm_size(const of_comm *c) { return c->size; }

static of_status bfail(const char *op) {
  return of_fail(OF_ERR_STATE, "%s", backend->error()[0] ? backend->error() : op);
}

of_status of_comm_new_group(of_comm *parent, const int32_t *ranks, int32_t n,
                            of_comm **out) {
  *out = NULL;
  OF_CHECK(of_dist_init());
  if (n < 1 || n > parent->size)
    return of_fail(OF_ERR_ARG, "new_group: %d ranks for a communicator of %d", (int)n,
                   (int)parent->size);
  int member = 0;
  for (int32_t i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= parent->size)
      return of_fail(OF_ERR_INDEX, "new_group: rank %d out of range for %d processes",
                     (int)ranks[i], (int)parent->size);
    for (int32_t j = 0; j < i; j++)
      if (ranks[j] == ranks[i])
        return of_fail(OF_ERR_ARG, "new_group: rank %d listed twice", (int)ranks[i]);
    if (ranks[i] == parent->rank) member = 1;
  }
  if (!member)
    return of_fail(OF_ERR_ARG, "new_group: rank %d is not in the group; only members may "
                   "create it", (int)parent->rank);
  of_comm *c = calloc(1, sizeof *c);
  if (!c) return of_fail(OF_ERR_OOM, "new_group: out of memory");
  if (backend->group(parent->bc, ranks, n, &c->bc) != 0) {
    free(c);
    return bfail("new_group");
  }
  c->refcount = 1;
  c->rank = backend->rank(c->bc);
  c->size = backend->size(c->bc);
  *out = c;
  return OF_OK;
}

/* nn.Graph keeps the communicators its collective nodes use (core/ops/comm.c). */
void of_comm_retain_internal(of_comm *c) {
  if (c && c != &world) c->refcount++;
}

void of_comm_release(of_comm *c) {
  if (!c || c == &world) return;
  if (--c->refcount > 0) return;
  if (c->dc) dbackend->free(c->dc);
  backend->free(c->bc);
  free(c);
}

/* ---- device tensors: the device backend (NCCL) ------------------------- */
typedef struct {
  const of_comm_device_backend *nb;   /* NULL: host tensors, the host backend */
  void *dc, *stream;
} dctx;

int32_t of_dist_device_backend_loaded(void) { return dbackend != NULL; }

/* The device communicator of c on dev, made on first use: rank 0 makes the
 * id, the host backend broadcasts it (every member is in this collective). */
static of_status dev_ctx(const char *op, of_comm *c, of_device dev, dctx *d) {
  memset(d, 0, sizeof *d);
  if (dev == OF_CPU) return OF_OK;
  const of_device_ops *o = of_device_ops_for(op, dev);
  if (!o) return OF_ERR_DEVICE;
  if (!dbackend) {
    char why[600] = "";
    const of_comm_device_backend *nb = o->nccl ? o->nccl(why, sizeof why) : NULL;
    if (!nb || nb->abi != OF_COMM_DEVICE_ABI)
      return of_fail(OF_ERR_STATE, "%s: tensors on %s need the NCCL backend, which is not "
                     "available: %s", op, OF_DEV_STR(dev),
                     nb ? "liboneflow_cuda does not match (rebuild it)" :
                     why[0] ? why : "this CUDA library has no NCCL support");
    dbackend = nb;
  }
  if (c->dc && c->ddev != dev)
    return of_fail(OF_ERR_DEVICE, "%s: this group already communicates on %s, not %s (one "
                   "device per process and group)", op, OF_DEV_STR(c->ddev), OF_DEV_STR(dev));
  if (!c->dc) {
    unsigned char id[OF_COMM_ID_BYTES] = {0};
    if (c->rank == 0 && dbackend->unique_id(id) != 0)
      return of_fail(OF_ERR_STATE, "%s: %s", op, dbackend->error());
    if (backend->broadcast(c->bc, id, OF_COMM_ID_BYTES, OF_WIRE_U8, 0, op,
                           of_dist_get_timeout()) != 0)
      return bfail(op);
    if (dbackend->comm_init(id, c->size, c->rank, of_device_index(dev), op,
                            of_dist_get_timeout(), &c->dc) != 0)
      return of_fail(OF_ERR_STATE, "%s", dbackend->error());
    c->ddev = dev;
  }
  d->nb = dbackend;
  d->dc = c->dc;
  d->stream = o->raw_stream(of_device_index(dev));
  return OF_OK;
}

static of_status dfail(const dctx *d, const char *op) {
  return of_fail(OF_ERR_STATE, "%s", d->nb->error()[0] ? d->nb->error() : op);
}
#define DFAIL(d, op) ((d).nb ? dfail(&(d), op) : bfail(op))

/* ---- tensors on the wire ----------------------------------------------- */
static of_status wire_of(const char *op, of_dtype dt, int reducing, of_wire *w, of_dtype *as) {
  *as = dt;
  switch (dt) {
    case OF_BOOL: case OF_UINT8: *w = OF_WIRE_U8; return OF_OK;
    case OF_INT8: *w = OF_WIRE_I8; return OF_OK;
    case OF_INT32: *w = OF_WIRE_I32; return OF_OK;
    case OF_INT64: *w = OF_WIRE_I64; return OF_OK;
    case OF_FLOAT32: *w = OF_WIRE_F32; return OF_OK;
    case OF_FLOAT64: *w = OF_WIRE_F64; return OF_OK;
    case OF_FLOAT16: case OF_BFLOAT16:
      if (reducing) {
        *as = OF_FLOAT32;
        *w = OF_WIRE_F32;
      } else {
        *w = OF_WIRE_U16;
      }
      return OF_OK;
  }
  return of_fail(OF_ERR_DTYPE, "%s: dtype %s is not supported by collectives", op,
                 of_dtype_name(dt));
}

static of_status check_tensor(const char *op, const of_tensor *t) {
  if (!t) return of_fail(OF_ERR_ARG, "%s: tensor is NULL", op);
  return OF_OK;
}

static of_status check_op(const char *op, of_comm_op r) {
  if (r < OF_COMM_SUM || r > OF_COMM_MIN)
    return of_fail(OF_ERR_ARG, "%s: unknown reduction %d (sum 0, max 1, min 2)", op, (int)r);
  return OF_OK;
}

static int32_t wire_red(of_dtype dt, of_comm_op r) {
  /* a sum of bools saturates: logical or */
  return dt == OF_BOOL && r == OF_COMM_SUM ? OF_COMM_MAX : r;
}

/* A tensor as the wire sees it: wire type, compute dtype, the device
 * context and a dense buffer in that dtype (the tensor itself when it
 * already is one). */
typedef struct {
  of_wire w;
  of_dtype as;
  dctx d;
  of_tensor *buf;
} wired;

static of_status wire_up(const char *op, of_comm *c, of_tensor *t, int reducing, wired *x) {
  x->w = OF_WIRE_U8;
  x->d = (dctx){0};
  x->buf = NULL;
  OF_CHECK(wire_of(op, t->dtype, reducing, &x->w, &x->as));
  OF_CHECK(dev_ctx(op, c, of_dev(t), &x->d));
  return of_dense(t, x->as, &x->buf);
}

/* After a collective that wrote x->buf in place: the result into t. */
static of_status wire_down(of_tensor *t, wired *x, of_status st) {
  if (st == OF_OK) {
    if (x->buf != t) st = of_copy_data(t, x->buf);
    else of_bump_version(t);
  }
  of_tensor_release(x->buf);
  return st;
}

of_status of_comm_barrier(of_comm *c) {
  OF_CHECK(of_dist_init());
  if (backend->barrier(c->bc, labelled("barrier"), of_dist_get_timeout()) != 0)
    return bfail("barrier");
  return OF_OK;
}

of_status of_comm_all_reduce_body(of_comm *c, of_tensor *t, of_comm_op r) {
  const char *op = "all_reduce";
  OF_CHECK(of_dist_init());
  OF_CHECK(check_tensor(op, t));
  OF_CHECK(check_op(op, r));
  wired x;
  of_status st = wire_up(op, c, t, 1, &x);
  if (st == OF_OK) {
    int32_t red = wire_red(t->dtype, r);
    int rc = x.d.nb ? x.d.nb->all_reduce(x.d.dc, x.d.stream, of_ptr(x.buf), x.buf->numel, x.w,
                                         red, labelled(op), of_dist_get_timeout())
                    : backend->all_reduce(c->bc, of_ptr(x.buf), x.buf->numel, x.w, red,
                                          labelled(op), of_dist_get_timeout());
    if (rc != 0) st = DFAIL(x.d, op);
  }
  return wire_down(t, &x, st);
}

of_status of_comm_broadcast_body(of_comm *c, of_tensor *t, int32_t root) {
  const char *op = "broadcast";
  OF_CHECK(of_dist_init());
  OF_CHECK(check_tensor(op, t));
  if (root < 0 || root >= c->size)
    return of_fail(OF_ERR_INDEX, "broadcast: root %d out of range for %d processes",
                   (int)root, (int)c->size);
  wired x;
  of_status st = wire_up(op, c, t, 0, &x);
  if (st == OF_OK) {
    int rc = x.d.nb ? x.d.nb->broadcast(x.d.dc, x.d.stream, of_ptr(x.buf), x.buf->numel, x.w,
                                        root, labelled(op), of_dist_get_timeout())
                    : backend->broadcast(c->bc, of_ptr(x.buf), x.buf->numel, x.w, root,
                                         labelled(op), of_dist_get_timeout());
    if (rc != 0) st = DFAIL(x.d, op);
  }
  return wire_down(t, &x, st);
}

/* counts[size] or NULL (each rank gives `own`); checks and sums them. */
static of_status fill_counts(const char *op, of_comm *c, const int64_t *counts, int64_t own,
                             int64_t *buf, int64_t *total) {
  *total = 0;
  for (int32_t i = 0; i < c->size; i++) {
    buf[i] = counts ? counts[i] : own;
    if (buf[i] < 0)
      return of_fail(OF_ERR_ARG, "%s: negative count %lld for rank %d", op,
                     (long long)buf[i], (int)i);
    *total += buf[i];
  }
  return OF_OK;
}

static int64_t *counts_buf(of_comm *c) { return malloc(sizeof(int64_t) * (size_t)c->size); }

of_status of_comm_all_gather_body(of_comm *c, of_tensor *x, const int64_t *counts,
                             of_tensor **out) {
  const char *op = "all_gather";
  *out = NULL;
  OF_CHECK(of_dist_init());
  OF_CHECK(check_tensor(op, x));
  int64_t *cnt = counts_buf(c), total;
  if (!cnt) return of_fail(OF_ERR_OOM, "%s: out of memory", op);
  of_status st = fill_counts(op, c, counts, x->numel, cnt, &total);
  if (st == OF_OK && cnt[c->rank] != x->numel)
    st = of_fail(OF_ERR_SHAPE, "%s: rank %d gives %lld elements but counts say %lld", op,
                 (int)c->rank, (long long)x->numel, (long long)cnt[c->rank]);
  wired wx = {.buf = NULL};
  of_tensor *res = NULL;
  if (st == OF_OK) st = wire_up(op, c, x, 0, &wx);
  of_wire w = wx.w;
  dctx d = wx.d;
  of_tensor *in = wx.buf;
  if (st == OF_OK) st = of_tensor_new(&total, 1, x->dtype, of_dev(x), &res);
  if (st == OF_OK &&
      (d.nb ? d.nb->all_gather(d.dc, d.stream, of_ptr(in), of_ptr(res), cnt, w, labelled(op),
                               of_dist_get_timeout())
            : backend->all_gather(c->bc, of_ptr(in), of_ptr(res), cnt, w, labelled(op),
                                  of_dist_get_timeout())) != 0)
    st = DFAIL(d, op);
  free(cnt);
  of_tensor_release(in);
  if (st != OF_OK) {
    if (res) of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

of_status of_comm_reduce_scatter_body(of_comm *c, of_tensor *x, const int64_t *counts,
                                 of_comm_op r, of_tensor **out) {
  const char *op = "reduce_scatter";
  *out = NULL;
  OF_CHECK(of_dist_init());
  OF_CHECK(check_tensor(op, x));
  OF_CHECK(check_op(op, r));
  int64_t *cnt = counts_buf(c), total;
  if (!cnt) return of_fail(OF_ERR_OOM, "%s: out of memory", op);
  int64_t even = c->size ? x->numel / c->size : 0;
  of_status st = fill_counts(op, c, counts, even, cnt, &total);
  if (st == OF_OK && total != x->numel)
    st = of_fail(OF_ERR_SHAPE, "%s: counts add up to %lld but the tensor has %lld elements%s",
                 op, (long long)total, (long long)x->numel,
                 counts ? "" : " (not divisible by the number of processes; give counts)");
  wired wx = {.buf = NULL};
  of_tensor *res = NULL;
  if (st == OF_OK) st = wire_up(op, c, x, 1, &wx);
  of_wire w = wx.w;
  of_dtype as = wx.as;
  dctx d = wx.d;
  of_tensor *in = wx.buf;
  int64_t mine = cnt[c->rank];
  if (st == OF_OK) st = of_tensor_new(&mine, 1, as, of_dev(x), &res);
  if (st == OF_OK &&
      (d.nb ? d.nb->reduce_scatter(d.dc, d.stream, of_ptr(in), of_ptr(res), cnt, w,
                                   wire_red(x->dtype, r), labelled(op), of_dist_get_timeout())
            : backend->reduce_scatter(c->bc, of_ptr(in), of_ptr(res), cnt, w,
                                      wire_red(x->dtype, r), labelled(op), of_dist_get_timeout())) != 0)
    st = DFAIL(d, op);
  free(cnt);
  of_tensor_release(in);
  if (st == OF_OK && as != x->dtype) {
    of_tensor *back;
    st = of_cast_data(res, x->dtype, &back);
    of_tensor_release(res);
    res = st == OF_OK ? back : NULL;
  }
  if (st != OF_OK) {
    if (res) of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

of_status of_comm_all_to_all_body(of_comm *c, of_tensor *x, const int64_t *send_counts,
                             const int64_t *recv_counts, of_tensor **out) {
  const char *op = "all_to_all";
  *out = NULL;
  OF_CHECK(of_dist_init());
  OF_CHECK(check_tensor(op, x));
  int64_t *sc = counts_buf(c), *rc = counts_buf(c), stot = 0, rtot = 0;
  of_status st = sc && rc ? OF_OK : of_fail(OF_ERR_OOM, "%s: out of memory", op);
  int64_t even = c->size ? x->numel / c->size : 0;
  if (st == OF_OK) st = fill_counts(op, c, send_counts, even, sc, &stot);
  if (st == OF_OK) st = fill_counts(op, c, recv_counts, even, rc, &rtot);
  if (st == OF_OK && stot != x->numel)
    st = of_fail(OF_ERR_SHAPE, "%s: send counts add up to %lld but the tensor has %lld "
                 "elements", op, (long long)stot, (long long)x->numel);
  wired wx = {.buf = NULL};
  of_tensor *res = NULL;
  if (st == OF_OK) st = wire_up(op, c, x, 0, &wx);
  of_wire w = wx.w;
  dctx d = wx.d;
  of_tensor *in = wx.buf;
  if (st == OF_OK) st = of_tensor_new(&rtot, 1, x->dtype, of_dev(x), &res);
  if (st == OF_OK &&
      (d.nb ? d.nb->all_to_all(d.dc, d.stream, of_ptr(in), sc, of_ptr(res), rc, w, labelled(op),
                               of_dist_get_timeout())
            : backend->all_to_all(c->bc, of_ptr(in), sc, of_ptr(res), rc, w, labelled(op),
                                  of_dist_get_timeout())) != 0)
    st = DFAIL(d, op);
  free(sc);
  free(rc);
  of_tensor_release(in);
  if (st != OF_OK) {
    if (res) of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}

static of_status check_peer(const char *op, of_comm *c, int32_t peer, int32_t tag) {
  if (peer < 0 || peer >= c->size)
    return of_fail(OF_ERR_INDEX, "%s: rank %d out of range for %d processes", op, (int)peer,
                   (int)c->size);
  if (peer == c->rank)
    return of_fail(OF_ERR_ARG, "%s: rank %d cannot %s itself", op, (int)peer,
                   op[0] == 's' ? "send to" : "receive from");
  if (tag < 0 || tag > 32767)
    return of_fail(OF_ERR_ARG, "%s: tag %d outside 0..32767", op, (int)tag);
  return OF_OK;
}

of_status of_comm_send(of_comm *c, of_tensor *t, int32_t dst, int32_t tag) {
  const char *op = "send";
  OF_CHECK(of_dist_init());
  OF_CHECK(check_tensor(op, t));
  OF_CHECK(check_peer(op, c, dst, tag));
  wired x;
  of_status st = wire_up(op, c, t, 0, &x);
  if (st == OF_OK) {
    int rc = x.d.nb ? x.d.nb->send(x.d.dc, x.d.stream, of_ptr(x.buf), x.buf->numel, x.w, dst,
                                   labelled(op), of_dist_get_timeout())
                    : backend->send(c->bc, of_ptr(x.buf), x.buf->numel, x.w, dst, tag,
                                    labelled(op), of_dist_get_timeout());
    if (rc != 0) st = DFAIL(x.d, op);
  }
  of_tensor_release(x.buf);
  return st;
}

of_status of_comm_recv(of_comm *c, of_tensor *into, int32_t src, int32_t tag) {
  const char *op = "recv";
  OF_CHECK(of_dist_init());
  OF_CHECK(check_tensor(op, into));
  OF_CHECK(check_peer(op, c, src, tag));
  wired x;
  of_status st = wire_up(op, c, into, 0, &x);
  if (st == OF_OK) {
    int rc = x.d.nb ? x.d.nb->recv(x.d.dc, x.d.stream, of_ptr(x.buf), x.buf->numel, x.w, src,
                                   labelled(op), of_dist_get_timeout())
                    : backend->recv(c->bc, of_ptr(x.buf), x.buf->numel, x.w, src, tag,
                                    labelled(op), of_dist_get_timeout());
    if (rc != 0) st = DFAIL(x.d, op);
  }
  return wire_down(into, &x, st);
}

/* ---- nonblocking all-reduce ---------------------------------------------
 * The request keeps the tensor (and the dense wire copy, when t is not one
 * already) alive until it completes; the result reaches t then. */
struct of_comm_request {
  void *breq;
  of_tensor *t, *buf;
};

static of_status finish_request(of_comm_request *r) {
  of_status st = OF_OK;
  if (r->buf != r->t) st = of_copy_data(r->t, r->buf);
  else of_bump_version(r->t);
  of_tensor_release(r->buf);
  of_tensor_release(r->t);
  free(r);
  return st;
}

of_status of_comm_iall_reduce(of_comm *c, of_tensor *t, of_comm_op op,
                              of_comm_request **out) {
  const char *name = "all_reduce (async)";
  *out = NULL;
  OF_CHECK(of_dist_init());
  OF_CHECK(check_tensor(name, t));
  OF_CHECK(check_op(name, op));
  of_wire w = OF_WIRE_U8;
  of_dtype as;
  OF_CHECK(wire_of(name, t->dtype, 1, &w, &as));
  of_comm_request *r = calloc(1, sizeof *r);
  if (!r) return of_fail(OF_ERR_OOM, "%s: out of memory", name);
  if (of_dev(t) != OF_CPU) {
    /* device tensors go through NCCL, which is already asynchronous for the
     * host (queued on the device's stream): the request is complete at once
     * (breq NULL) and t is reduced in stream order */
    of_status st = of_comm_all_reduce_body(c, t, op);
    if (st != OF_OK) {
      free(r);
      return st;
    }
    of_tensor_retain(t);
    of_tensor_retain(t);
    r->t = r->buf = t;
    *out = r;
    return OF_OK;
  }
  of_status st = of_dense(t, as, &r->buf);
  if (st != OF_OK) {
    free(r);
    return st;
  }
  if (backend->iall_reduce(c->bc, of_ptr(r->buf), of_ptr(r->buf), r->buf->numel, w,
                           wire_red(t->dtype, op), name, &r->breq) != 0) {
    of_tensor_release(r->buf);
    free(r);
    return bfail(name);
  }
  of_tensor_retain(t);
  r->t = t;
  *out = r;
  return OF_OK;
}

of_status of_comm_test(of_comm_request *r, int32_t *done) {
  *done = 0;
  if (!r) return of_fail(OF_ERR_ARG, "test: request is NULL");
  int k = r->breq ? backend->test(r->breq) : 1;
  if (k < 0) {
    /* the buffer may still be written by MPI: keep it (a leak on a fatal path) */
    free(r);
    return bfail("test");
  }
  if (k == 0) return OF_OK;
  *done = 1;
  return finish_request(r);
}

of_status of_comm_wait(of_comm_request *r) {
  if (!r) return of_fail(OF_ERR_ARG, "wait: request is NULL");
  if (r->breq && backend->wait(r->breq, of_dist_get_timeout()) != 0) {
    free(r);   /* buffers leak on purpose: a late peer could still write them */
    return bfail("wait");
  }
  return finish_request(r);
}

/* Out of place: the reduction goes into a new tensor; x is left as it was.
 * (A reduce-scatter into the result then an in-place all-gather, which
 * would skip MPI's copy of x, measured 2-4x slower with Open MPI 4.1's
 * nonblocking collectives.) */
of_status of_comm_all_reduce_to_body(of_comm *c, of_tensor *x, of_comm_op r, of_tensor **out) {
  const char *op = "all_reduce";
  *out = NULL;
  OF_CHECK(of_dist_init());
  OF_CHECK(check_tensor(op, x));
  OF_CHECK(check_op(op, r));
  of_wire w = OF_WIRE_U8;
  of_dtype as;
  OF_CHECK(wire_of(op, x->dtype, 1, &w, &as));
  if (of_dev(x) != OF_CPU) {
    /* the host backend's out-of-place call would read device memory: reduce
     * a device copy in place (NCCL, on the device's stream) */
    of_tensor *cp = NULL;
    OF_CHECK(of_clone_data(x, &cp));
    of_status st = of_comm_all_reduce_body(c, cp, r);
    if (st != OF_OK) {
      of_tensor_release(cp);
      return st;
    }
    *out = cp;
    return OF_OK;
  }
  of_tensor *in = NULL, *res = NULL;
  OF_CHECK(of_dense(x, as, &in));
  of_status st = of_tensor_new(x->shape, x->ndim, as, OF_CPU, &res);
  void *req = NULL;
  if (st == OF_OK && backend->iall_reduce(c->bc, of_ptr(in), of_ptr(res), in->numel, w,
                                          wire_red(x->dtype, r), labelled(op), &req) != 0)
    st = bfail(op);
  if (st == OF_OK && backend->wait(req, of_dist_get_timeout()) != 0) {
    /* a late peer could still write these buffers: keep them */
    return bfail(op);
  }
  of_tensor_release(in);
  if (st == OF_OK && as != x->dtype) {
    of_tensor *back;
    st = of_cast_data(res, x->dtype, &back);
    of_tensor_release(res);
    res = st == OF_OK ? back : NULL;
  }
  if (st != OF_OK) {
    if (res) of_tensor_release(res);
    return st;
  }
  *out = res;
  return OF_OK;
}
