/* graph.h -- nn.Graph internals: the IR (values and nodes), the op table,
 * the tracer's recording entry points and the passes.
 *
 * The IR is a list of nodes in execution (trace) order. A value is one
 * tensor object at one point in time: a graph input, an external (a tensor
 * that existed before tracing and is bound by reference: parameters,
 * buffers, optimizer state, captured constants), or an internal result.
 * An in-place op makes a new *version* value of the tensor it writes
 * (`same` names the value whose tensor it is); `root` names the value that
 * owns the storage (views share their base's root). The executor runs the
 * live nodes in order, so views and in-place writes behave as they did in
 * eager mode; passes use `root` to stay clear of memory hazards. */
#ifndef ONEFLOW_GRAPH_H
#define ONEFLOW_GRAPH_H
#include "../ops/op.h"
#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>

enum { OF_GV_INPUT = 0, OF_GV_EXTERNAL = 1, OF_GV_INTERNAL = 2, OF_GV_HANDLE = 3 };

typedef struct of_gval {
  int8_t kind;
  bool is_const;          /* external that nothing writes: folded or captured constant */
  of_dtype dtype;
  int32_t ndim;
  int64_t shape[OF_MAX_DIMS];
  int64_t strides[OF_MAX_DIMS];
  int64_t offset;
  int64_t sid;            /* trace-time storage id (0 after load) */
  int32_t producer;       /* node index; -1 for inputs and externals */
  int32_t root;           /* value owning the storage */
  int32_t same;           /* value whose runtime tensor this is (self unless in-place) */
  int32_t index;          /* input position / external number */
  of_device device;       /* where the tensor lived when traced */
  of_tensor *ext;         /* externals: the tensor (retained) */
  char *name;             /* externals: optional name (malloc'ed) */
  char *note;             /* placement and SBP of a global tensor's shard (of_trace_note) */
  bool dynamic;           /* loaded graphs: the shape depends on data (nonzero, masked_select
                             or downstream of one), so runs check dtype and rank only */
} of_gval;

enum {
  OF_GN_CAPTURE = 1,      /* keeps its autograd node for an opaque backward node */
  OF_GN_BACKWARD = 2,     /* recorded while the autograd engine ran (trace time only) */
  OF_GN_RECOMPUTE = 4,    /* a checkpointed value's recomputation (not saved) */
};

typedef struct of_gnode {
  int32_t op;
  int32_t nin, nout;      /* outputs: [0, nreal) from the op, [nreal, nreal + nmut)
                             versions of mutated inputs, then the autograd handle */
  int32_t nreal, nmut;
  int32_t *in, *out;      /* value ids, -1 for a NULL tensor */
  int32_t *mut;           /* [nmut] input positions written in place */
  void *attrs;
  int32_t attr_size;
  int32_t flags;
  uint32_t needs;         /* inputs that required grad at trace time (CAPTURE re-creates it) */
  uint32_t keep_in, keep_out;   /* CAPTURE: inputs / results its autograd node saves */
  int32_t handle_nr;      /* CAPTURE: the real output whose grad_fn is kept */
  int32_t scope;          /* activation checkpointing: segment (module call) id, 0 none */
  bool dead;
} of_gnode;

typedef struct of_graph {
  of_gval *vals;
  int32_t nvals, cap_vals;
  of_gnode *nodes;
  int32_t nnodes, cap_nodes;
  int32_t *inputs, ninputs;
  int32_t *outputs, noutputs;
  char passes[512];       /* applied passes, for the summary */
  int32_t pass_removed[16];
  /* plan (exec.c) */
  bool planned;
  int32_t *free_idx;      /* CSR: values released after each node */
  int32_t *free_start;    /* [nnodes + 1] */
  int64_t planned_peak;   /* bytes of internal values live at once, at most */
  int64_t eager_bytes;    /* bytes every internal value would take if none were freed */
  of_arena *arena;        /* the runs' allocations in one block (alloc.c), NULL: none */
  bool no_arena;          /* OF_GRAPH_ARENA=0 when the graph first ran */
  int32_t concurrency;    /* >= 2: run independent nodes side by side (sched.c) */
  int64_t waves_parallel, max_wave, worker_nodes;   /* what the scheduler did */
  int64_t runs;           /* atomic */
  /* Concurrent runs (exec.c): each run has its own slots; the first-run
   * setup (plan, arena), profiled runs and wave-scheduled runs take `lock`;
   * CUDA graph capture/replay takes `cg_lock`; one run at a time uses the
   * arena (`arena_busy`), the others allocate from the caches. */
  pthread_mutex_t lock, cg_lock;
  int32_t active;         /* runs in flight (under lock) */
  int32_t arena_busy;     /* a run is using the arena (under lock) */
  char *text;             /* last dump */
  int32_t debug;          /* print each pass (graph:debug / OF_DEBUG_PASS) */
  bool profile;           /* time each node (graph:profile / OF_GRAPH_PROFILE) */
  double *prof;           /* [nnodes] fastest time seen, ms */
  of_device device;       /* the device it computes on (of_graph_device) */
  bool loaded;            /* from a file: each result is checked against the recorded value */
  /* CUDA graph capture of the whole step (exec.c) */
  int32_t cg_mode;        /* 0 off, 1 outputs cloned, 2 static outputs */
  int32_t cg_warm;        /* runs before capturing */
  bool cg_off;            /* capture failed or impossible: plain runs */
  bool cg_capturing;      /* exec: check the capture after each node */
  void *cg_graph;         /* the instantiated CUDA graph */
  of_tensor **cg_in, **cg_out;   /* static inputs / outputs */
  char cg_status[320];
  /* a loaded graph saved with several input signatures: the next one
   * (owned; shares the externals' tensors) */
  struct of_graph *variant;
  /* memo (exec.c): [nnodes] the kept results of nodes that read only
   * externals nothing writes (or such nodes' results); NULL: none */
  struct of_memo **memo;
  bool memo_ready;        /* memo worked out (with the plan) */
  pthread_mutex_t memo_lock;
  int64_t memo_hits;      /* runs of memo nodes answered from their results */
} of_graph;

/* ---- op table (ops.c): the rows of core/ops plus the graph-only ops ---- */
typedef of_status (*of_invoke_fn)(of_gnode *n, of_tensor **ins, void **outs);

typedef struct of_opdef {
  const char *name;
  int32_t attr_size;      /* -1: variable (checked by `check`) */
  int32_t min_in, max_in; /* tensor inputs (NULL allowed where optional) */
  int32_t nreal;          /* outputs the op makes; -1: from attrs */
  uint32_t flags;
  of_invoke_fn invoke;
  /* inputs written in place (not counting an `into` that is returned) */
  int32_t (*mutates)(const void *attrs, int32_t nin, int32_t *idx);
  /* validate loaded attributes; NULL: size check only */
  of_status (*check)(const void *attrs, int32_t size, int32_t nin);
  void (*describe)(const void *attrs, char *buf, size_t cap);
  /* results' shapes and dtypes from the inputs' (of_opimpl.infer); NULL: none */
  of_status (*infer)(const void *attrs, int32_t nin, const of_meta *ins, of_meta *outs);
} of_opdef;

const of_opdef *of_op_def(int32_t op);
int32_t of_op_count(void);
int32_t of_op_find(const char *name);
/* Whether node n's op with these attrs reads only its inputs and writes
 * only its fresh outputs. */
bool of_node_pure(const of_graph *g, const of_gnode *n);

/* ---- tracer (trace.c) ----
 * The tracer's state is the dispatcher's thread-local (of_dispatch_tls);
 * the public ops reach the tracer only through the hooks trace.c installs
 * (core/dispatch/dispatch.h). */
typedef struct of_trace of_trace;
#define of_trace_tls ((of_trace *)of_dispatch_tls)
/* Records an outermost public op. ins may hold NULLs; outs[nreal]. On
 * failure the outputs are released. */
of_status of_trace_record(int32_t op, const void *attrs, int32_t attr_size, of_tensor **ins,
                          int32_t nin, of_tensor **outs, int32_t nreal);

/* ---- IR helpers (ir.c) ---- */
of_graph *of_graph_new_empty(void);
int32_t of_graph_add_value(of_graph *g, int8_t kind, const of_tensor *t);
int32_t of_graph_add_node(of_graph *g, int32_t op, const void *attrs, int32_t attr_size,
                          const int32_t *ins, int32_t nin, int32_t nreal, int32_t nmut);
void of_graph_node_free(of_gnode *n);
void of_graph_compact(of_graph *g);               /* drop dead nodes */
int64_t of_gval_bytes(const of_gval *v);          /* bytes of a contiguous tensor of v's shape */
bool of_gval_contiguous(const of_gval *v);
/* uses[v] = number of live node inputs reading v (+1 per graph output). */
int32_t *of_graph_use_counts(const of_graph *g);
/* the node making internal value v (a plain one-result op of kind op) when
 * v has exactly one reader; NULL otherwise */
of_gnode *of_graph_sole(of_graph *g, const int32_t *uses, int32_t v, int32_t op);
/* v takes like's shape, contiguous, offset 0 */
void of_gval_set_contiguous(of_gval *v, const of_gval *like);
/* whether some live node in (from, to) writes into storage root r */
bool of_graph_written_between(const of_graph *g, int32_t r, int32_t from, int32_t to);
/* roots written by any live node */
bool *of_graph_written_roots(const of_graph *g);
void of_graph_note_pass(of_graph *g, const char *name, int32_t removed);
const char *of_graph_text(of_graph *g, int32_t verbose);
void of_graph_debug_print(of_graph *g, const char *when);
int32_t of_node_writes(const of_graph *g, const of_gnode *n, int32_t *roots, int32_t cap);

/* ---- passes (core/graph/passes) ---- */
of_status of_pass_dce(of_graph *g, int32_t *removed);
of_status of_pass_cse(of_graph *g, int32_t *removed);
of_status of_pass_fold(of_graph *g, int32_t *removed);
of_status of_pass_fuse(of_graph *g, int32_t *removed);
of_status of_pass_inplace(of_graph *g, int32_t *removed);
of_status of_pass_plan(of_graph *g, int32_t *removed);
of_status of_pass_schedule(of_graph *g, int32_t *removed);
of_status of_pass_bnfold(of_graph *g, int32_t *removed);
of_status of_pass_checkpoint(of_graph *g, int32_t *removed);
of_status of_pass_poolmask(of_graph *g, int32_t *removed);
of_status of_pass_relupool(of_graph *g, int32_t *removed);
of_status of_pass_convfuse(of_graph *g, int32_t *removed);
of_status of_pass_functionalize(of_graph *g, int32_t *removed);

/* ---- runtime (exec.c) ---- */
of_status of_graph_exec(of_graph *g, of_tensor **inputs, int32_t nin, of_tensor **outputs,
                        int32_t nout, bool check_inputs);
/* The wave scheduler (sched.c): runs the live nodes on the executor's slots. */
of_status of_graph_exec_waves(of_graph *g, void **slot, bool *own, int32_t width);
/* Frees a CUDA graph capture of g (exec.c; the next run captures again). */
void of_graph_cuda_graph_drop(of_graph *g);
/* Frees the memo's kept results (exec.c); worked out again at the next run. */
void of_graph_memo_free(of_graph *g);
/* Runs node n on ins; outs[] gets nout entries (tensors or autograd handles). */
of_status of_graph_invoke(of_graph *g, of_gnode *n, of_tensor **ins, void **outs);
/* a loaded graph: node i's result t for value v must match the recorded value (exec.c) */
of_status of_graph_check_result(const of_graph *g, const of_gnode *n, int32_t i, int32_t v,
                                const of_tensor *t);

/* ---- fused elementwise (fuse.c) ---- */
of_status of_fused_invoke(of_gnode *n, of_tensor **ins, void **outs);
of_status of_fused_check(const void *attrs, int32_t size, int32_t nin);
void of_fused_describe(const void *attrs, char *buf, size_t cap);

/* kernels of the eager elementwise ops (binary.c, unary.c), for fusion */
of_loop_fn of_binary_kernel(int32_t op, of_dtype compute);
of_loop_fn of_unary_kernel(int32_t op, of_dtype compute);
of_loop_fn of_clamp_kernel(of_dtype compute);
of_loop_fn of_leaky_kernel(of_dtype compute);

#endif
