/* comm.c -- the collectives as ops (the family file of the of_comm_* ops).
 *
 * The public of_comm_* collectives (bodies in core/dist/comm.c) are wrapped
 * here like every other public op: while a graph traces build(), the
 * boxing of global tensors (lua/oneflow/distributed/boxing.lua) calls them
 * on the local shards and each call becomes a node -- all_reduce, all_gather,
 * reduce_scatter, all_to_all, broadcast -- that the executor runs through the
 * same communicator at every step.
 *
 * A node names its communicator by a number in a process-wide registry that
 * keeps the communicator alive. Collectives must run in the same order on
 * every rank: the op table flags them OF_OPF_RANDOM too, so no pass drops,
 * merges, folds or recomputes them and the wave scheduler keeps their order.
 * Graphs holding them are not saved (a communicator does not outlive its
 * processes), and a file that claims to hold one is refused. */
#include "family.h"
#include "../dist/comm.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { COMM_MAX = 1024 };
static of_comm *registry[COMM_MAX];
static int32_t registered;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

static of_status comm_id(of_comm *c, int32_t *id) {
  pthread_mutex_lock(&registry_lock);
  int32_t i = 0;
  while (i < registered && registry[i] != c) i++;
  if (i == registered) {
    if (registered == COMM_MAX) {
      pthread_mutex_unlock(&registry_lock);
      return of_fail(OF_ERR_STATE, "nn.Graph: more than %d communicators used by graphs",
                     (int)COMM_MAX);
    }
    of_comm_retain_internal(c);
    registry[registered++] = c;
  }
  pthread_mutex_unlock(&registry_lock);
  *id = i;
  return OF_OK;
}

static of_comm *comm_at(int32_t id) {
  pthread_mutex_lock(&registry_lock);
  of_comm *c = id >= 0 && id < registered ? registry[id] : NULL;
  pthread_mutex_unlock(&registry_lock);
  return c;
}

/* Records a collective: header + counts (a: first list of `na`, b: second). */
static of_status pack_comm(int32_t op, of_comm *c, int32_t red, int32_t root,
                          const int64_t *a, const int64_t *b, of_tensor *in, of_tensor **out) {
  if (!c) return of_fail(OF_ERR_ARG, "nn.Graph: collective without a communicator");
  int32_t size = of_comm_size(c), n = (a ? size : 0) + (b ? size : 0);
  size_t bytes = sizeof(a_comm) + sizeof(int64_t) * (size_t)n;
  a_comm *r = calloc(1, bytes);
  if (!r) {
    if (out && *out) of_tensor_release(*out);
    return of_fail(OF_ERR_OOM, "nn.Graph: out of memory recording a collective");
  }
  of_status st = comm_id(c, &r->comm);
  r->red = red;
  r->root = root;
  r->has = (a ? 1 : 0) | (b ? 2 : 0);
  r->n = n;
  int32_t k = 0;
  for (int32_t i = 0; a && i < size; i++) r->counts[k++] = a[i];
  for (int32_t i = 0; b && i < size; i++) r->counts[k++] = b[i];
  if (st == OF_OK)
    st = of_dispatch_record(op, r, (int32_t)bytes, &in, 1, out, out ? 1 : 0);
  else if (out && *out)
    of_tensor_release(*out);
  free(r);
  return st;
}

of_status of_comm_all_reduce(of_comm *c, of_tensor *t, of_comm_op op) {
  OF_DISPATCH(of_comm_all_reduce_body(c, t, op),
            pack_comm(OPK_COMM_ALL_REDUCE, c, op, 0, NULL, NULL, t, NULL));
}

of_status of_comm_all_reduce_to(of_comm *c, of_tensor *x, of_comm_op op, of_tensor **out) {
  OF_DISPATCH(of_comm_all_reduce_to_body(c, x, op, out),
            pack_comm(OPK_COMM_ALL_REDUCE_TO, c, op, 0, NULL, NULL, x, out));
}

of_status of_comm_broadcast(of_comm *c, of_tensor *t, int32_t root) {
  OF_DISPATCH(of_comm_broadcast_body(c, t, root),
            pack_comm(OPK_COMM_BROADCAST, c, 0, root, NULL, NULL, t, NULL));
}

of_status of_comm_all_gather(of_comm *c, of_tensor *x, const int64_t *counts,
                             of_tensor **out) {
  OF_DISPATCH(of_comm_all_gather_body(c, x, counts, out),
            pack_comm(OPK_COMM_ALL_GATHER, c, 0, 0, counts, NULL, x, out));
}

of_status of_comm_reduce_scatter(of_comm *c, of_tensor *x, const int64_t *counts,
                                 of_comm_op op, of_tensor **out) {
  OF_DISPATCH(of_comm_reduce_scatter_body(c, x, counts, op, out),
            pack_comm(OPK_COMM_REDUCE_SCATTER, c, op, 0, counts, NULL, x, out));
}

of_status of_comm_all_to_all(of_comm *c, of_tensor *x, const int64_t *send_counts,
                             const int64_t *recv_counts, of_tensor **out) {
  OF_DISPATCH(of_comm_all_to_all_body(c, x, send_counts, recv_counts, out),
            pack_comm(OPK_COMM_ALL_TO_ALL, c, 0, 0, send_counts, recv_counts, x, out));
}

static of_status run_comm(const of_oprec *n, of_tensor **ins, void **outs) {
  const a_comm *a = n->attrs;
  of_comm *c = comm_at(a->comm);
  if (!c) return of_fail(OF_ERR_STATE, "nn.Graph: collective node with an unknown communicator");
  int32_t size = of_comm_size(c);
  int32_t want = ((a->has & 1) ? size : 0) + ((a->has & 2) ? size : 0);
  if (a->n != want || n->attr_size != (int32_t)(sizeof(a_comm) + sizeof(int64_t) * (size_t)a->n))
    return of_fail(OF_ERR_STATE, "nn.Graph: collective node's counts do not fit its communicator");
  const int64_t *first = (a->has & 1) ? a->counts : NULL;
  const int64_t *second = (a->has & 2) ? a->counts + ((a->has & 1) ? size : 0) : NULL;
  of_tensor *r = NULL;
  of_status st;
  switch (n->op) {
    case OPK_COMM_ALL_REDUCE: return of_comm_all_reduce(c, ins[0], a->red);
    case OPK_COMM_BROADCAST: return of_comm_broadcast(c, ins[0], a->root);
    case OPK_COMM_ALL_REDUCE_TO: st = of_comm_all_reduce_to(c, ins[0], a->red, &r); break;
    case OPK_COMM_ALL_GATHER: st = of_comm_all_gather(c, ins[0], first, &r); break;
    case OPK_COMM_REDUCE_SCATTER: st = of_comm_reduce_scatter(c, ins[0], first, a->red, &r); break;
    case OPK_COMM_ALL_TO_ALL: st = of_comm_all_to_all(c, ins[0], first, second, &r); break;
    default: return of_fail(OF_ERR_STATE, "nn.Graph: not a collective node");
  }
  if (st == OF_OK) outs[0] = r;
  return st;
}

/* Only a graph traced in this process can hold collectives. */
static of_status check_comm(const void *attrs, int32_t size, int32_t nin) {
  (void)attrs; (void)size; (void)nin;
  return of_fail(OF_ERR_ARG, "nn.Graph: the file holds a collective (a graph with global "
                 "tensors); such graphs cannot be saved or loaded");
}

static void describe_comm(const void *attrs, char *buf, size_t cap) {
  const a_comm *a = attrs;
  of_comm *c = comm_at(a->comm);
  static const char *reds[] = {"sum", "max", "min"};
  size_t len = strlen(buf);
  if (len >= cap) return;
  int w = snprintf(buf + len, cap - len, "comm #%d, %d ranks%s%s", (int)a->comm,
                   c ? (int)of_comm_size(c) : 0, a->red > 0 && a->red <= 2 ? ", " : "",
                   a->red > 0 && a->red <= 2 ? reds[a->red] : "");
  if (w < 0) return;
  len = strlen(buf);
  if (a->n > 0 && len < cap) {
    snprintf(buf + len, cap - len, ", counts=");
    for (int32_t i = 0; i < a->n && i < 16; i++) {
      len = strlen(buf);
      if (len >= cap) return;
      snprintf(buf + len, cap - len, "%s%lld", i ? "," : "", (long long)a->counts[i]);
    }
    if (a->n > 16) {
      len = strlen(buf);
      if (len < cap) snprintf(buf + len, cap - len, ",...");
    }
  }
}

OF_OP_IMPL(COMM_ALL_REDUCE, run_comm, of_mutates_first, check_comm, describe_comm);
OF_OP_IMPL(COMM_ALL_REDUCE_TO, run_comm, NULL, check_comm, describe_comm);
OF_OP_IMPL(COMM_BROADCAST, run_comm, of_mutates_first, check_comm, describe_comm);
OF_OP_IMPL(COMM_ALL_GATHER, run_comm, NULL, check_comm, describe_comm);
OF_OP_IMPL(COMM_REDUCE_SCATTER, run_comm, NULL, check_comm, describe_comm);
OF_OP_IMPL(COMM_ALL_TO_ALL, run_comm, NULL, check_comm, describe_comm);
