/* autograd.h -- the pieces op files use to record backward nodes.
 *
 * An op that can be differentiated calls, after computing its outputs:
 *
 *   if (of_grad_needed(ins, nin)) {
 *     of_node *n;
 *     OF_CHECK(of_record(&my_grad_def, ins, nin, outs, nout, &n));
 *     of_node_save(n, 0, ins[0]);        // tensors the backward rule needs
 *     OF_NODE_KEEP(n, OPK_ROLL, a);      // and the op's attribute record
 *   }
 *
 * and its backward rule reads the record back typed:
 *   const a_roll *a = OF_NODE_ATTRS(a_roll, n);
 * The record is the op's struct of core/ops/op.h, the one tracing stores in
 * a graph node (ops.def names it): one encoding of an op's attributes.
 *
 * The backward rule gets the output grads (NULL where an output got none)
 * and writes one grad per input (NULL = zero; skip inputs with
 * !n->needs[k]). It is written with public ops, so under create_graph the
 * engine records the backward pass itself and double backward works. */
#ifndef ONEFLOW_AUTOGRAD_H
#define ONEFLOW_AUTOGRAD_H
#include "internal.h"

typedef struct of_node of_node;
typedef of_status (*of_backward_fn)(of_node *n, of_tensor **gout, of_tensor **gin);

typedef struct of_grad_def {
  const char *name;          /* "MulBackward" */
  of_backward_fn backward;
} of_grad_def;

enum { OF_NODE_MAX_SAVED = 6, OF_NODE_ATTR_MAX = 320 };

typedef struct of_edge {
  of_node *node;             /* retained; NULL: input needs no grad */
  int32_t input_nr;          /* which output of `node` this input was */
} of_edge;

typedef struct of_meta {     /* shape and dtype of an input or output */
  int64_t shape[OF_MAX_DIMS];
  int32_t ndim;
  of_dtype dtype;
} of_meta;

/* a tensor's shape and dtype (NULL: absent, ndim -1): what the ops' checks
 * on shapes take, so that a loaded graph's node runs them on its record */
static inline of_meta of_meta_of(const of_tensor *t) {
  of_meta m;
  m.ndim = t ? t->ndim : -1;
  m.dtype = t ? t->dtype : (of_dtype)0;
  if (t) memcpy(m.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  return m;
}

typedef struct of_saved {
  of_tensor *t;              /* data alias, no history (no cycles) */
  int64_t version;           /* storage version when saved */
  int32_t output_nr;         /* >= 0: an output of this node */
} of_saved;

struct of_node {
  int64_t refcount;
  const of_grad_def *def;
  int64_t seq;               /* creation order: later nodes run first */
  int32_t nin, nout;
  of_edge *next;             /* [nin] */
  of_meta *in_meta;          /* [nin] */
  of_meta *out_meta;         /* [nout] */
  bool *needs;               /* [nin]: needs[k] = next[k].node != NULL */
  of_saved saved[OF_NODE_MAX_SAVED];
  /* history of saved inputs, so a saved input used in a backward rule under
   * create_graph links back into the graph */
  bool saved_requires_grad[OF_NODE_MAX_SAVED];
  struct of_node *saved_grad_fn[OF_NODE_MAX_SAVED];
  int32_t saved_output_nr[OF_NODE_MAX_SAVED];
  of_tensor *saved_leaf[OF_NODE_MAX_SAVED];
  bool released;             /* saved tensors freed after backward */
  /* set by the engine before it runs the rule: nothing records the rule's
   * ops (no create_graph, no trace), so it may use kernels directly */
  bool direct;
  /* the op's attribute record (OF_NODE_KEEP): op kind, size and bytes */
  int32_t attr_op, attr_size;
  union { double d_; int64_t i_; unsigned char b[OF_NODE_ATTR_MAX]; } attrs;
  of_tensor *leaf;           /* AccumulateGrad: the leaf (retained) */
  int64_t host_id;           /* custom function / host callback id, or 0 */
  int64_t *pre_hooks;        /* host hook ids per output, for non-leaf hooks */
  int32_t npre_hooks;
  int32_t *pre_hook_nr;
  bool pooled;               /* one block from the node pool (tape.c) */
};

bool of_grad_needed(of_tensor **ins, int32_t nin);
/* The seq the next node will get: nodes with seq >= a value read before an
 * op were made by that op (nn.Graph's tracer tells a new node from one the
 * tensor already had). */
int64_t of_node_seq_next(void);
/* Thread-local: while set, an in-place op may write a leaf that requires
 * grad. nn.Graph sets it around a recorded forward op it runs with grad on
 * (exec.c, a CAPTURE node): its inputs then require grad only so that the
 * op makes its autograd node, and the graph routes the grads itself. */
void of_set_inplace_leaf_ok(int32_t on);
int32_t of_inplace_leaf_ok(void);
of_status of_record(const of_grad_def *def, of_tensor **ins, int32_t nin, of_tensor **outs,
                    int32_t nout, of_node **node);
void of_node_save(of_node *n, int32_t slot, of_tensor *t);
/* Saved tensor, checked against in-place changes since it was saved. The
 * caller owns the result (of_tensor_release it). */
of_status of_node_saved(of_node *n, int32_t slot, of_tensor **out);
void of_node_release(of_node *n);
/* Keeps the op's attribute record `rec` (a struct of core/ops/op.h) in the
 * node; the backward rule reads it with OF_NODE_ATTRS. */
#define OF_NODE_KEEP(n, OP, rec)                                                    \
  do {                                                                              \
    _Static_assert(sizeof(rec) <= OF_NODE_ATTR_MAX, "attribute record too large"); \
    of_node_keep_attrs(n, OP, &(rec), (int32_t)sizeof(rec));                        \
  } while (0)
#define OF_NODE_ATTRS(T, n) ((const T *)(const void *)(n)->attrs.b)
void of_node_keep_attrs(of_node *n, int32_t op, const void *rec, int32_t size);
/* For the engine (core/autograd/engine.c): free a node's saved tensors after
 * its backward ran; a leaf's AccumulateGrad node (made on first use); the
 * host (Lua) callback for hooks and custom Functions. */
void of_node_free_saved(of_node *n);
of_node *of_grad_accumulator(of_tensor *leaf);
of_host_fn of_host_callback(void);

/* grad of a broadcast input: sum `g` down to `m`'s shape (and dtype). */
of_status of_sum_to(of_tensor *g, const of_meta *m, of_tensor **out);

/* A scope for writing backward rules as expressions: every tensor made
 * through it is released by of_s_end, which hands out the result; the first
 * failure sticks and later calls return NULL.
 *   of_scope s = {0};
 *   of_tensor *d = of_s_sbin(&s, OF_SUB, 1, of_s_bin(&s, OF_MUL, y, y));
 *   return of_s_end(&s, of_s_bin(&s, OF_MUL, g, d), &gi[0]);   // tanh */
enum { OF_SCOPE_MAX = 48 };
typedef struct of_scope {
  of_tensor *t[OF_SCOPE_MAX];
  int32_t n;
  of_status st;
} of_scope;
of_tensor *of_s_keep(of_scope *s, of_status st, of_tensor *t);
of_tensor *of_s_unary(of_scope *s, of_unary_op op, of_tensor *x);
of_tensor *of_s_bin(of_scope *s, of_binary_op op, of_tensor *x, of_tensor *y);
of_tensor *of_s_bins(of_scope *s, of_binary_op op, of_tensor *x, double v);   /* x op v */
of_tensor *of_s_sbin(of_scope *s, of_binary_op op, double v, of_tensor *x);   /* v op x */
of_tensor *of_s_matmul(of_scope *s, of_tensor *x, of_tensor *y);
of_tensor *of_s_mT(of_scope *s, of_tensor *x);   /* swap the last two dims */
of_tensor *of_s_saved(of_scope *s, of_node *n, int32_t slot);
of_status of_s_end(of_scope *s, of_tensor *result, of_tensor **out);

/* In-place ops under autograd: `into` takes `result`'s data and history. */
of_status of_assign_result(of_tensor *into, of_tensor *result);
/* Errors for in-place writes that autograd can't follow. */
of_status of_check_inplace(const char *op, of_tensor *into);
#endif
