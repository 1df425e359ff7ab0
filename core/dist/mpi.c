/* mpi.c -- the MPI backend, built as liboneflow_mpi.so (only when CMake finds
 * MPI) and dlopened by core/dist/comm.c.
 *
 * Every operation is started nonblocking and waited on by polling, so that a
 * rank that died or never called the operation turns into an error after the
 * timeout instead of a hang. To name the culprit, ranks answer "what are you
 * doing?" queries on a private duplicate of MPI_COMM_WORLD while they poll:
 * the rank that timed out asks its peers, and those that do not answer
 * within a grace period are the ones named. */
#define _GNU_SOURCE
#include "backend.h"
#include <dlfcn.h>
#include <mpi.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>

enum { TAG_QUERY = 1, TAG_ANSWER = 2, ANSWER_LEN = 160 };

typedef struct mcomm {
  MPI_Comm comm;
  int32_t rank, size;
  int32_t *world_ranks;   /* [size]: for messages */
  int64_t seq;            /* operations started on this communicator */
  int broken;             /* an operation timed out: the state is unknown */
} mcomm;

static _Thread_local char errbuf[2048];
static int inited, finalize_ok = 1, world_rank;
static mcomm world_comm;
static MPI_Comm ctl = MPI_COMM_NULL;   /* queries about progress */
static int32_t node_rank;
static char doing[ANSWER_LEN] = "idle";   /* what this rank waits on now */

static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errbuf, sizeof errbuf, fmt, ap);
  va_end(ap);
  return 1;
}

static int mpi_fail(const char *op, int code) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, s, &len);
  return fail("%s: MPI error on rank %d: %s", op, world_rank, s);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void pause_for(long ns) {
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

static MPI_Datatype mpi_type(of_wire w) {
  switch (w) {
    case OF_WIRE_U8: return MPI_UINT8_T;
    case OF_WIRE_I8: return MPI_INT8_T;
    case OF_WIRE_I32: return MPI_INT32_T;
    case OF_WIRE_I64: return MPI_INT64_T;
    case OF_WIRE_F32: return MPI_FLOAT;
    case OF_WIRE_F64: return MPI_DOUBLE;
    case OF_WIRE_U16: return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

static MPI_Op mpi_op(int32_t red) {
  return red == 1 ? MPI_MAX : red == 2 ? MPI_MIN : MPI_SUM;
}

/* Answer every pending progress query (sent by a rank that timed out). */
static void serve_queries(void) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, TAG_QUERY, ctl, &flag, &st);
    if (!flag) return;
    char dummy;
    MPI_Recv(&dummy, 1, MPI_CHAR, st.MPI_SOURCE, TAG_QUERY, ctl, MPI_STATUS_IGNORE);
    /* small: sent eagerly, so this does not block on the asker */
    MPI_Send(doing, ANSWER_LEN, MPI_CHAR, st.MPI_SOURCE, TAG_ANSWER, ctl);
  }
}

/* Ask the other members of c what they are doing; describe who did not
 * answer within `grace` seconds. */
static void diagnose(mcomm *c, char *out, size_t cap) {
  int n = c->size;
  MPI_Request *reqs = calloc((size_t)n * 2, sizeof *reqs);
  char (*ans)[ANSWER_LEN] = calloc((size_t)n, ANSWER_LEN);
  int *got = calloc((size_t)n, sizeof *got);
  size_t len = 0;
  out[0] = 0;
  if (!reqs || !ans || !got) {
    snprintf(out, cap, "(no memory to ask the other ranks)");
    goto done;
  }
  char q = 0;
  for (int i = 0; i < n; i++) {
    reqs[2 * i] = reqs[2 * i + 1] = MPI_REQUEST_NULL;
    if (i == c->rank) continue;
    int peer = c->world_ranks[i];
    MPI_Isend(&q, 1, MPI_CHAR, peer, TAG_QUERY, ctl, &reqs[2 * i]);
    MPI_Irecv(ans[i], ANSWER_LEN, MPI_CHAR, peer, TAG_ANSWER, ctl, &reqs[2 * i + 1]);
  }
  double grace = 3.0, t0 = now();
  int pending;
  do {
    serve_queries();
    pending = 0;
    for (int i = 0; i < n; i++) {
      if (i == c->rank || got[i]) continue;
      int flag = 0;
      MPI_Test(&reqs[2 * i + 1], &flag, MPI_STATUS_IGNORE);
      if (flag) got[i] = 1; else pending++;
    }
    if (pending) pause_for(1000000);
  } while (pending && now() - t0 < grace);
  int silent = 0;
  for (int i = 0; i < n; i++)
    if (i != c->rank && !got[i]) silent++;
  if (silent) {
    len += (size_t)snprintf(out + len, cap - len, "%s", silent > 1 ? "ranks" : "rank");
    for (int i = 0; i < n && len < cap; i++)
      if (i != c->rank && !got[i])
        len += (size_t)snprintf(out + len, cap - len, " %d", c->world_ranks[i]);
    if (len < cap)
      len += (size_t)snprintf(out + len, cap - len, " %s not responding (dead, hung, or busy "
                              "outside communication)", silent > 1 ? "are" : "is");
  }
  for (int i = 0; i < n && len < cap; i++)
    if (i != c->rank && got[i]) {
      ans[i][ANSWER_LEN - 1] = 0;
      len += (size_t)snprintf(out + len, cap - len, "%srank %d is in %s", len ? "; " : "",
                              c->world_ranks[i], ans[i]);
    }
done:
  free(reqs);
  free(ans);
  free(got);
}

/* Wait for req, serving progress queries; on timeout the communicator is
 * marked broken and the error names the ranks that did not take part. */
static int wait_req(mcomm *c, MPI_Request *req, const char *op, double timeout) {
  double t0 = now();
  long nap = 0;
  for (int spins = 0;; spins++) {
    int flag = 0;
    int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_fail(op, rc);
    if (flag) {
      snprintf(doing, sizeof doing, "idle");
      return 0;
    }
    serve_queries();
    if (timeout > 0 && now() - t0 > timeout) {
      char who[1600];
      diagnose(c, who, sizeof who);
      c->broken = 1;
      finalize_ok = 0;
      return fail("%s: timed out after %g s on rank %d (operation #%lld on a group of %d); "
                  "%s. Raise the bound with flow.env.set_timeout or OF_DIST_TIMEOUT",
                  op, timeout, world_rank, (long long)c->seq, c->size,
                  who[0] ? who : "every rank answered");
    }
    /* Open MPI progresses a nonblocking collective only inside MPI calls:
     * keep testing (yielding the core to peers) for a while, so a large
     * message is not slowed by naps between its steps; then back off to
     * spare shared cores while a peer is late. */
    if (now() - t0 < 0.05) {
      if (spins % 16 == 15) sched_yield();
    } else {
      nap = nap ? (nap * 2 > 1000000 ? 1000000 : nap * 2) : 20000;
      pause_for(nap);
    }
  }
}

static int begin(mcomm *c, const char *op) {
  if (!inited) return fail("%s: MPI is not initialised", op);
  if (c->broken)
    return fail("%s: this communicator is unusable after an earlier timeout or error on "
                "rank %d", op, world_rank);
  c->seq++;
  snprintf(doing, sizeof doing, "%s #%lld", op, (long long)c->seq);
  return 0;
}

static int check_count(const char *op, int64_t n) {
  if (n < 0 || n > INT_MAX)
    return fail("%s: %lld elements in one message; MPI counts stop at %d", op, (long long)n,
                INT_MAX);
  return 0;
}

static void at_exit(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  /* after a timeout MPI_Finalize could wait forever on the lost rank */
  if (!fin && finalize_ok) MPI_Finalize();
}

static int fill_world_ranks(mcomm *c) {
  c->world_ranks = malloc(sizeof(int32_t) * (size_t)c->size);
  int *in = malloc(sizeof(int) * (size_t)c->size), *outr = malloc(sizeof(int) * (size_t)c->size);
  if (!c->world_ranks || !in || !outr) {
    free(in);
    free(outr);
    return fail("mpi: out of memory");
  }
  MPI_Group g, w;
  MPI_Comm_group(c->comm, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &w);
  for (int i = 0; i < c->size; i++) in[i] = i;
  MPI_Group_translate_ranks(g, c->size, in, w, outr);
  for (int i = 0; i < c->size; i++) c->world_ranks[i] = outr[i];
  MPI_Group_free(&g);
  MPI_Group_free(&w);
  free(in);
  free(outr);
  return 0;
}

static int m_init(void) {
  if (inited) return 0;
  /* Open MPI's plugins (mca_*.so) resolve libmpi's symbols globally: make
   * sure libmpi is in the global scope however this library was loaded. */
  Dl_info info;
  if (dladdr((void *)&MPI_Init, &info) && info.dli_fname)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  int already = 0, provided = 0;
  MPI_Initialized(&already);
  if (!already) {
    /* Open MPI's default schedule for MPI_Iallreduce (libnbc) runs several
     * times slower than the blocking MPI_Allreduce on large messages;
     * Rabenseifner's (reduce-scatter + all-gather) matches it (see
     * doc/benchmarks.md, Distribution). The user's setting wins. */
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return mpi_fail("MPI_Init_thread", rc);
    atexit(at_exit);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  world_comm.comm = MPI_COMM_WORLD;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  world_comm.rank = world_rank;
  world_comm.size = size;
  if (fill_world_ranks(&world_comm)) return 1;
  MPI_Comm_dup(MPI_COMM_WORLD, &ctl);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
  int nr = 0;
  MPI_Comm_rank(node, &nr);
  node_rank = nr;
  MPI_Comm_free(&node);
  inited = 1;
  return 0;
}

static void *m_world(void) { return &world_comm; }
static int32_t m_rank(void *c) { return ((mcomm *)c)->rank; }
static int32_t m_size(void *c) { return ((mcomm *)c)->size; }
static int32_t m_local_rank(void) { return node_rank; }

static int m_group(void *parent, const int32_t *ranks, int32_t n, void **out) {
  mcomm *p = parent;
  if (begin(p, "new_group")) return 1;
  int *r = malloc(sizeof(int) * (size_t)n);
  mcomm *c = calloc(1, sizeof *c);
  if (!r || !c) {
    free(r);
    free(c);
    return fail("new_group: out of memory");
  }
  for (int i = 0; i < n; i++) r[i] = ranks[i];
  MPI_Group pg, g;
  MPI_Comm_group(p->comm, &pg);
  MPI_Group_incl(pg, n, r, &g);
  /* collective over the members only, so disjoint groups form in parallel */
  int rc = MPI_Comm_create_group(p->comm, g, 7, &c->comm);
  MPI_Group_free(&pg);
  MPI_Group_free(&g);
  free(r);
  snprintf(doing, sizeof doing, "idle");
  if (rc != MPI_SUCCESS) {
    free(c);
    return mpi_fail("new_group", rc);
  }
  MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->comm, &c->rank);
  MPI_Comm_size(c->comm, &c->size);
  if (fill_world_ranks(c)) {
    MPI_Comm_free(&c->comm);
    free(c);
    return 1;
  }
  *out = c;
  return 0;
}

static void m_free(void *cv) {
  mcomm *c = cv;
  if (!c || c == &world_comm) return;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && !c->broken) MPI_Comm_free(&c->comm);
  free(c->world_ranks);
  free(c);
}

static int m_barrier(void *cv, const char *op, double timeout) {
  mcomm *c = cv;
  if (begin(c, op)) return 1;
  MPI_Request req;
  int rc = MPI_Ibarrier(c->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_fail(op, rc);
  return wait_req(c, &req, op, timeout);
}

static int m_all_reduce(void *cv, void *buf, int64_t n, of_wire w, int32_t red,
                        const char *op, double timeout) {
  mcomm *c = cv;
  if (begin(c, op) || check_count(op, n)) return 1;
  MPI_Request req;
  int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(w), mpi_op(red), c->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_fail(op, rc);
  return wait_req(c, &req, op, timeout);
}

static int m_broadcast(void *cv, void *buf, int64_t n, of_wire w, int32_t root,
                       const char *op, double timeout) {
  mcomm *c = cv;
  if (begin(c, op) || check_count(op, n)) return 1;
  MPI_Request req;
  int rc = MPI_Ibcast(buf, (int)n, mpi_type(w), root, c->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_fail(op, rc);
  return wait_req(c, &req, op, timeout);
}

/* int counts and displacements for the v-collectives */
static int to_int_counts(const char *op, const int64_t *counts, int n, int **cnt, int **disp) {
  *cnt = malloc(sizeof(int) * (size_t)n);
  *disp = malloc(sizeof(int) * (size_t)n);
  if (!*cnt || !*disp) {
    free(*cnt);
    free(*disp);
    return fail("%s: out of memory", op);
  }
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    if (check_count(op, counts[i]) || check_count(op, off)) {
      free(*cnt);
      free(*disp);
      return 1;
    }
    (*cnt)[i] = (int)counts[i];
    (*disp)[i] = (int)off;
    off += counts[i];
  }
  return 0;
}

static int m_all_gather(void *cv, const void *in, void *out, const int64_t *counts, of_wire w,
                        const char *op, double timeout) {
  mcomm *c = cv;
  int *cnt, *disp;
  if (begin(c, op) || to_int_counts(op, counts, c->size, &cnt, &disp)) return 1;
  MPI_Request req;
  MPI_Datatype t = mpi_type(w);
  int rc = MPI_Iallgatherv(in, cnt[c->rank], t, out, cnt, disp, t, c->comm, &req);
  int r = rc != MPI_SUCCESS ? mpi_fail(op, rc) : wait_req(c, &req, op, timeout);
  free(cnt);
  free(disp);
  return r;
}

static int m_reduce_scatter(void *cv, const void *in, void *out, const int64_t *counts,
                            of_wire w, int32_t red, const char *op, double timeout) {
  mcomm *c = cv;
  int *cnt, *disp;
  if (begin(c, op) || to_int_counts(op, counts, c->size, &cnt, &disp)) return 1;
  MPI_Request req;
  int rc = MPI_Ireduce_scatter(in, out, cnt, mpi_type(w), mpi_op(red), c->comm, &req);
  int r = rc != MPI_SUCCESS ? mpi_fail(op, rc) : wait_req(c, &req, op, timeout);
  free(cnt);
  free(disp);
  return r;
}

static int m_all_to_all(void *cv, const void *in, const int64_t *send_counts, void *out,
                        const int64_t *recv_counts, of_wire w, const char *op,
                        double timeout) {
  mcomm *c = cv;
  int *sc, *sd, *rcn, *rd;
  if (begin(c, op) || to_int_counts(op, send_counts, c->size, &sc, &sd)) return 1;
  if (to_int_counts(op, recv_counts, c->size, &rcn, &rd)) {
    free(sc);
    free(sd);
    return 1;
  }
  MPI_Request req;
  MPI_Datatype t = mpi_type(w);
  int rc = MPI_Ialltoallv(in, sc, sd, t, out, rcn, rd, t, c->comm, &req);
  int r = rc != MPI_SUCCESS ? mpi_fail(op, rc) : wait_req(c, &req, op, timeout);
  free(sc);
  free(sd);
  free(rcn);
  free(rd);
  return r;
}

static int m_send(void *cv, const void *buf, int64_t n, of_wire w, int32_t peer, int32_t tag,
                  const char *op, double timeout) {
  mcomm *c = cv;
  if (begin(c, op) || check_count(op, n)) return 1;
  MPI_Request req;
  int rc = MPI_Isend(buf, (int)n, mpi_type(w), peer, tag, c->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_fail(op, rc);
  return wait_req(c, &req, op, timeout);
}

static int m_recv(void *cv, void *buf, int64_t n, of_wire w, int32_t peer, int32_t tag,
                  const char *op, double timeout) {
  mcomm *c = cv;
  if (begin(c, op) || check_count(op, n)) return 1;
  MPI_Request req;
  int rc = MPI_Irecv(buf, (int)n, mpi_type(w), peer, tag, c->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_fail(op, rc);
  return wait_req(c, &req, op, timeout);
}

/* ---- nonblocking all-reduce ---------------------------------------------
 * Requests complete in any order locally but are started in the same order
 * on every rank (MPI matches collectives by order). While one is pending
 * this rank reports itself idle: it is busy elsewhere, not stuck in it. */
typedef struct mreq {
  MPI_Request req;
  mcomm *c;
  int64_t seq;
  char op[48];
} mreq;

static int m_iall_reduce(void *cv, const void *in, void *buf, int64_t n, of_wire w,
                         int32_t red, const char *op, void **out) {
  mcomm *c = cv;
  *out = NULL;
  if (begin(c, op) || check_count(op, n)) return 1;
  mreq *r = calloc(1, sizeof *r);
  if (!r) return fail("%s: out of memory", op);
  r->c = c;
  r->seq = c->seq;
  snprintf(r->op, sizeof r->op, "%s", op);
  int rc = MPI_Iallreduce(in == buf ? MPI_IN_PLACE : in, buf, (int)n, mpi_type(w),
                          mpi_op(red), c->comm, &r->req);
  snprintf(doing, sizeof doing, "idle");
  if (rc != MPI_SUCCESS) {
    free(r);
    return mpi_fail(op, rc);
  }
  *out = r;
  return 0;
}

static int m_test(void *rv) {
  mreq *r = rv;
  int flag = 0;
  int rc = MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) {
    mpi_fail(r->op, rc);
    free(r);
    return -1;
  }
  serve_queries();
  if (!flag) return 0;
  free(r);
  return 1;
}

static int m_wait(void *rv, double timeout) {
  mreq *r = rv;
  snprintf(doing, sizeof doing, "%s #%lld", r->op, (long long)r->seq);
  int st = wait_req(r->c, &r->req, r->op, timeout);
  free(r);
  return st;
}

static const char *m_error(void) { return errbuf; }

static const of_comm_backend backend = {
  OF_COMM_ABI, "mpi", m_init, m_world, m_rank, m_size, m_local_rank, m_group, m_free,
  m_barrier, m_all_reduce, m_broadcast, m_all_gather, m_reduce_scatter, m_all_to_all,
  m_send, m_recv, m_error, m_iall_reduce, m_test, m_wait,
};

const of_comm_backend *of_comm_backend_mpi(void);
const of_comm_backend *of_comm_backend_mpi(void) { return &backend; }
