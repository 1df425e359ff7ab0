/* dispatch.h -- the op dispatch layer: how a public op is entered.
 *
 * Every public op `of_X` (oneflow.h) is defined in its family file
 * (core/ops/<family>.c) as
 *
 *   of_status of_X(args) { OF_DISPATCH(X_body(args), record_X(args)); }
 *
 * On the eager path OF_DISPATCH costs one thread-local load. While a graph
 * is being traced (the tracer has set of_dispatch_tls), only the outermost
 * public op records a node, through the hooks that core/graph installs
 * (of_dispatch_install). No file below core/graph calls the tracer: it
 * reaches them only through these hooks, and kernels never ask whether a
 * trace is running -- the few places that must behave differently under a
 * trace (an op that cannot be replayed, a host constant, a value read on the
 * host) say so to the dispatcher, which asks the hooks.
 *
 * The op kinds, names and attribute records come from core/ops/ops.def
 * (one line per op); see doc/internals.md. */
#ifndef ONEFLOW_DISPATCH_H
#define ONEFLOW_DISPATCH_H
#include "../internal.h"

struct of_node;

/* An op's attribute record as the graph executor hands it to the op's
 * run function (core/ops/<family>.c): which op, how many tensor inputs,
 * and the record's bytes. */
typedef struct of_oprec {
  int32_t op;
  int32_t nin;
  const void *attrs;
  int32_t attr_size;
} of_oprec;

/* What the tracer (core/graph/trace.c) does for the layers below it. */
typedef struct of_dispatch_hooks {
  /* an outermost public op finished: record a node (outs released on failure) */
  of_status (*record)(int32_t op, const void *attrs, int32_t attr_size, of_tensor **ins,
                      int32_t nin, of_tensor **outs, int32_t nreal);
  /* a tensor made from host data: bind it as a constant */
  of_status (*constant)(of_tensor *t);
  /* C code read tensor values on the host */
  of_status (*data_read)(const of_tensor *t);
  /* the autograd engine runs a backward rule */
  of_status (*backward)(struct of_node *n, of_tensor **gout, of_tensor **gin);
  /* the autograd engine starts (+1) / ends (-1) a backward pass */
  void (*engine)(int32_t delta);
  /* no op, backward rule or engine is running: the user's own code */
  bool (*user_level)(void);
} of_dispatch_hooks;

/* initial-exec: one %fs-relative load, no __tls_get_addr call, on every op */
#define OF_TLS_IE __attribute__((tls_model("initial-exec"), visibility("hidden")))
/* the tracer's state on this thread; NULL: eager */
extern _Thread_local void *of_dispatch_tls OF_TLS_IE;
/* public ops running on this thread while tracing (only the outermost records) */
extern _Thread_local int32_t of_dispatch_depth OF_TLS_IE;

/* Nonzero while this thread is tracing or profiling: the one word the
 * eager path of every op reads. */
extern _Thread_local int32_t of_dispatch_slow OF_TLS_IE;
/* The profiler (core/dispatch/profile.c) is on for this thread. */
extern _Thread_local int32_t of_dispatch_prof OF_TLS_IE;
/* backward passes the autograd engine is running on this thread */
extern _Thread_local int32_t of_dispatch_in_engine OF_TLS_IE;

/* core/graph installs its hooks before it starts a trace, and sets (tr) or
 * clears (NULL) the tracer's state through of_dispatch_set_tracer. */
void of_dispatch_install(const of_dispatch_hooks *h);
void of_dispatch_set_tracer(void *tr);

/* The slow path's entry: the profiler's start mark (profile.c), depth + 1.
 * Out of line, so that the eager path of OF_DISPATCH stays a test and a
 * tail call (no registers saved before the test). */
void of_prof_enter(int32_t d);
void of_dispatch_enter(void);

/* The wrapper every public op goes through: one thread-local load when
 * neither tracing nor profiling. While tracing, only the outermost public
 * op records a node; while profiling, every op's RECORD runs (it reaches
 * of_dispatch_record, which logs the event, and records for the tracer only
 * at depth 0). */
#define OF_DISPATCH(CALL, RECORD)                                      \
  do {                                                                 \
    if (__builtin_expect(of_dispatch_slow == 0, 1)) return CALL;       \
    of_dispatch_enter();                                               \
    of_status st_ = CALL;                                              \
    of_dispatch_depth--;                                               \
    if (st_ == OF_OK && (of_dispatch_depth == 0 || of_dispatch_prof))  \
      st_ = (RECORD);                                                  \
    return st_;                                                        \
  } while (0)

/* Records node `op` with attribute record `attrs` (the RECORD of OF_DISPATCH):
 * a profiler event when profiling, a graph node when tracing at depth 0. */
of_status of_dispatch_record(int32_t op, const void *attrs, int32_t attr_size, of_tensor **ins,
                             int32_t nin, of_tensor **outs, int32_t nreal);
#define OF_RECORD(OP, A, INS, NIN, OUTS, NREAL) \
  of_dispatch_record(OP, &(A), (int32_t)sizeof(A), INS, NIN, OUTS, NREAL)

/* A tensor made from host data (from_doubles, from_blob ...): bound as a
 * constant when the user's code made it while tracing. */
of_status of_dispatch_constant(of_tensor *t);
/* Tensor values are about to be read on the host (of_tensor_get_flat ...). */
of_status of_dispatch_data_read(const of_tensor *t);
/* An op the graph cannot replay: an error while tracing. */
of_status of_dispatch_untraceable(const char *op);
/* The user's own code is running under a trace (not an op, rule or engine). */
bool of_dispatch_user_level(void);
/* For the autograd engine: run a backward rule (the tracer records it while
 * tracing), and mark a backward pass. */
of_status of_dispatch_backward(struct of_node *n, of_tensor **gout, of_tensor **gin);
void of_dispatch_engine(int32_t delta);
/* Whether ops on this thread are being recorded (for the engine's own
 * choices between recorded ops and opaque shortcuts, never for kernels). */
static inline bool of_dispatch_recording(void) { return of_dispatch_tls != NULL; }
#endif
