/* dispatch.c -- the dispatcher's thread state and the tracer's hooks (see
 * dispatch.h). Nothing here knows what a graph is. */
#include "dispatch.h"
#include "../autograd.h"

_Thread_local void *of_dispatch_tls OF_TLS_IE;
_Thread_local int32_t of_dispatch_depth OF_TLS_IE;
_Thread_local int32_t of_dispatch_slow OF_TLS_IE;
_Thread_local int32_t of_dispatch_prof OF_TLS_IE;

/* Installed by every trace_begin (the same table each time) and read by
 * every backward pass, on any thread: atomic, and stored only when it
 * changes. */
static const of_dispatch_hooks *hooks_;
#define hooks (__atomic_load_n(&hooks_, __ATOMIC_ACQUIRE))

void of_dispatch_install(const of_dispatch_hooks *h) {
  if (__atomic_load_n(&hooks_, __ATOMIC_ACQUIRE) != h) __atomic_store_n(&hooks_, h, __ATOMIC_RELEASE);
}

void of_dispatch_enter(void) {
  if (of_dispatch_prof) of_prof_enter(of_dispatch_depth);
  of_dispatch_depth++;
}

void of_dispatch_set_tracer(void *tr) {
  of_dispatch_tls = tr;
  of_dispatch_slow = tr != NULL || of_dispatch_prof;
}

/* profile.c: the event of an op that just finished at depth of_dispatch_depth */
void of_prof_event_add(int32_t op, const void *attrs, int32_t attr_size, of_tensor **ins,
                       int32_t nin, of_tensor **outs, int32_t nreal);

of_status of_dispatch_record(int32_t op, const void *attrs, int32_t attr_size, of_tensor **ins,
                             int32_t nin, of_tensor **outs, int32_t nreal) {
  if (of_dispatch_prof) of_prof_event_add(op, attrs, attr_size, ins, nin, outs, nreal);
  if (of_dispatch_tls == NULL || of_dispatch_depth > 0) return OF_OK;
  return hooks->record(op, attrs, attr_size, ins, nin, outs, nreal);
}

of_status of_dispatch_constant(of_tensor *t) {
  if (__builtin_expect(of_dispatch_tls == NULL, 1) || of_dispatch_depth > 0) return OF_OK;
  return hooks->constant(t);
}

/* an op reading its own inputs is fine (depth > 0) */
of_status of_dispatch_data_read(const of_tensor *t) {
  if (__builtin_expect(of_dispatch_tls == NULL, 1) || of_dispatch_depth > 0) return OF_OK;
  return hooks->data_read(t);
}

of_status of_dispatch_untraceable(const char *op) {
  if (__builtin_expect(of_dispatch_tls == NULL, 1)) return OF_OK;
  return of_fail(OF_ERR_STATE, "%s: not supported while tracing an nn.Graph", op);
}

bool of_dispatch_user_level(void) { return of_dispatch_tls && hooks->user_level(); }

of_status of_dispatch_backward(struct of_node *n, of_tensor **gout, of_tensor **gin) {
  if (of_dispatch_tls) return hooks->backward(n, gout, gin);
  return n->def->backward(n, gout, gin);
}

_Thread_local int32_t of_dispatch_in_engine OF_TLS_IE;

void of_dispatch_engine(int32_t delta) {
  of_dispatch_in_engine += delta;
  if (hooks) hooks->engine(delta);
}
