/* profile.c -- the op profiler (oneflow.h: of_profiler_*; Lua: flow.profiler).
 *
 * It rides on the dispatcher's slow path: while on, of_dispatch_slow is set
 * for this thread, so every public op goes through OF_DISPATCH's second
 * branch, which marks the start (of_prof_enter, by nesting depth) and at
 * the end runs the op's RECORD, whose of_dispatch_record call appends the
 * event (of_prof_event_add) with the op kind, attribute record and tensors
 * the tracer would record. When off, ops pay what they paid before: the
 * one thread-local load of of_dispatch_slow.
 *
 * Events go to one process-wide buffer written only by the thread that
 * started the profiler (the flag is thread-local; one thread at a time may
 * profile); the buffer grows by doubling, and an event that cannot be
 * stored is counted as dropped. */
#include "dispatch.h"
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#define PROF_MAX_DEPTH 64

static of_prof_event *events;
static int64_t nevents, cap_events, dropped;
static int32_t prof_flags;
/* the depth the profiler was started at: ops already running then (a host
 * callback inside an op may start it) have no start mark and no event */
static int32_t base_depth;
static int32_t owned;   /* a thread is profiling (atomic) */

/* per depth: start time and the CPU allocator counters at the start. Not
 * thread-local (the library's TLS is initial-exec, and static TLS space is
 * small): only the thread that started the profiler writes them. */
static int64_t t0[PROF_MAX_DEPTH], served0[PROF_MAX_DEPTH], held0[PROF_MAX_DEPTH];

int64_t of_profiler_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* bytes_since_sweep is zeroed by sweeps (between ops, from Lua); the total
 * served is that plus what earlier sweeps zeroed, which the allocator does
 * not keep, so a sweep inside a profiled op makes its figure 0, never < 0 */
void of_prof_enter(int32_t d) {
  if (d < 0 || d >= PROF_MAX_DEPTH) return;
  const of_memory_stats *m = of_memory_stats_get(OF_CPU);
  served0[d] = m->bytes_since_sweep;
  held0[d] = m->current_bytes;
  t0[d] = of_profiler_now_ns();
}

void of_prof_event_add(int32_t op, const void *attrs, int32_t attr_size, of_tensor **ins,
                       int32_t nin, of_tensor **outs, int32_t nreal) {
  int64_t end = of_profiler_now_ns();
  int32_t d = of_dispatch_depth;
  if (d < base_depth || d >= PROF_MAX_DEPTH) return;
  if (nevents == cap_events) {
    int64_t cap = cap_events ? 2 * cap_events : 4096;
    of_prof_event *e = realloc(events, (size_t)cap * sizeof *e);
    if (!e) { dropped++; return; }
    events = e;
    cap_events = cap;
  }
  of_prof_event *e = &events[nevents++];
  memset(e, 0, offsetof(of_prof_event, attrs));
  const of_memory_stats *m = of_memory_stats_get(OF_CPU);
  e->op = op;
  e->depth = d;
  e->start_ns = t0[d];
  e->end_ns = end;
  int64_t served = m->bytes_since_sweep - served0[d];
  e->bytes_allocated = served > 0 ? served : 0;
  e->bytes_net = m->current_bytes - held0[d];
  e->nin = nin;
  e->nout = nreal;
  e->backward = of_dispatch_in_engine > 0;
  e->attr_size = attr_size;
  if (attrs && attr_size > 0 && attr_size <= OF_PROF_ATTR_BYTES) memcpy(e->attrs, attrs, (size_t)attr_size);
  for (int32_t i = 0; i < OF_PROF_MAX_INPUTS; i++) e->in_ndim[i] = -1;
  if (prof_flags & OF_PROF_SHAPES) {
    for (int32_t i = 0; i < nin && i < OF_PROF_MAX_INPUTS; i++) {
      const of_tensor *t = ins ? ins[i] : NULL;
      if (!t) continue;
      e->in_ndim[i] = t->ndim;
      e->in_dtype[i] = t->dtype;
      for (int32_t k = 0; k < t->ndim && k < OF_MAX_DIMS; k++) e->in_shape[i][k] = t->shape[k];
    }
  }
  e->out_dtype = -1;
  e->out_device = -1;
  if (nreal > 0 && outs && outs[0]) {
    e->out_dtype = outs[0]->dtype;
    e->out_device = (int32_t)of_tensor_device(outs[0]);
  }
}

of_status of_profiler_start(int32_t flags) {
  if (of_dispatch_prof) return of_fail(OF_ERR_STATE, "profiler: already running on this thread");
  int32_t expect = 0;
  if (!__atomic_compare_exchange_n(&owned, &expect, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return of_fail(OF_ERR_STATE, "profiler: already running on another thread");
  nevents = 0;
  dropped = 0;
  prof_flags = flags;
  base_depth = of_dispatch_depth;
  of_dispatch_prof = 1;
  of_dispatch_slow = 1;
  return OF_OK;
}

of_status of_profiler_stop(void) {
  if (!of_dispatch_prof) return of_fail(OF_ERR_STATE, "profiler: not running on this thread");
  of_dispatch_prof = 0;
  of_dispatch_slow = of_dispatch_tls != NULL;
  __atomic_store_n(&owned, 0, __ATOMIC_RELEASE);
  return OF_OK;
}

int32_t of_profiler_enabled(void) { return of_dispatch_prof; }
int64_t of_profiler_num_events(void) { return nevents; }
const of_prof_event *of_profiler_events(void) { return events; }
int64_t of_profiler_dropped(void) { return dropped; }
