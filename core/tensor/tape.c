/* tape.c -- the autograd records that ops leave on their results.
 *
 * Each differentiable op records one node per call (of_record): edges to the
 * nodes that produced its inputs (a leaf's edge goes to its AccumulateGrad
 * node), the input/output shapes, saved tensors with their storage version,
 * and the op's attribute record. Tensors own their grad_fn, so the records
 * live with the tensors, below the ops; the engine that runs them
 * (core/autograd/engine.c) sits above the ops. */
#include "../autograd.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static _Thread_local int grad_disabled;   /* depth of no_grad, thread-local */
static _Atomic int64_t node_seq;
static of_host_fn host_fn;                /* Lua's callback for hooks and Functions */

/* Ids the C side no longer uses. They are queued, not called back: a
 * release can happen inside any op (even one LuaJIT compiled), and LuaJIT
 * cannot enter a callback from compiled code. Lua drains the queue. */
static struct {
  pthread_mutex_t lock;
  int64_t *ids;
  int32_t n, cap;
} released = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void host_release(int64_t id) {
  pthread_mutex_lock(&released.lock);
  if (released.n == released.cap) {
    int32_t cap = released.cap ? released.cap * 2 : 64;
    int64_t *ids = realloc(released.ids, sizeof *ids * (size_t)cap);
    if (!ids) {   /* the Lua side keeps a dead entry; harmless */
      pthread_mutex_unlock(&released.lock);
      return;
    }
    released.ids = ids;
    released.cap = cap;
  }
  released.ids[released.n++] = id;
  pthread_mutex_unlock(&released.lock);
}

int32_t of_host_take_released(int64_t *ids, int32_t cap) {
  pthread_mutex_lock(&released.lock);
  int32_t n = released.n < cap ? released.n : cap;
  for (int32_t i = 0; i < n; i++) ids[i] = released.ids[released.n - 1 - i];
  released.n -= n;
  pthread_mutex_unlock(&released.lock);
  return n;
}

static _Thread_local int32_t inplace_leaf_ok;
void of_set_inplace_leaf_ok(int32_t on) { inplace_leaf_ok = on; }
int32_t of_inplace_leaf_ok(void) { return inplace_leaf_ok; }
int64_t of_node_seq_next(void) { return atomic_load(&node_seq); }

int32_t of_is_grad_enabled(void) { return grad_disabled == 0; }
void of_set_grad_enabled(int32_t on) { grad_disabled = on ? 0 : 1; }
void of_set_host_callback(of_host_fn fn) { host_fn = fn; }

bool of_grad_needed(of_tensor **ins, int32_t nin) {
  if (grad_disabled) return false;
  for (int32_t k = 0; k < nin; k++)
    if (ins[k] && ins[k]->requires_grad) return true;
  return false;
}

/* ---- tensor side ---- */

void of_tensor_free_autograd(of_tensor *t) {
  if (t->grad_acc) t->grad_acc->leaf = NULL;   /* cannot happen: acc retains t */
  of_tensor_release(t->grad);
  if (t->grad_fn) of_node_release(t->grad_fn);
  of_tensor_release(t->view_base);
  for (int32_t i = 0; i < t->nhooks; i++) host_release(t->hooks[i]);
  free(t->hooks);
}

int32_t of_tensor_requires_grad(const of_tensor *t) { return t->requires_grad; }
int32_t of_tensor_is_leaf(const of_tensor *t) { return t->grad_fn == NULL; }
of_tensor *of_tensor_grad(const of_tensor *t) { return t->grad; }
of_node *of_tensor_grad_fn(const of_tensor *t) { return t->grad_fn; }
of_node *of_tensor_grad_accumulator(const of_tensor *t) { return t->grad_acc; }

of_status of_tensor_set_requires_grad(of_tensor *t, int32_t on) {
  if (t->grad_fn && !on)
    return of_fail(OF_ERR_STATE, "requires_grad_: you can only change requires_grad of leaf "
                   "tensors; use detach() to get a tensor without history (shape %s)",
                   OF_SHAPE_STR(t));
  if (on && !of_dtype_is_floating(t->dtype) && !of_dtype_is_complex(t->dtype))
    return of_fail(OF_ERR_DTYPE, "requires_grad_: only floating point tensors can require "
                   "gradients, got %s (shape %s)", OF_DT(t), OF_SHAPE_STR(t));
  if (t->grad_fn) return OF_OK;
  t->requires_grad = on != 0;
  return OF_OK;
}

of_status of_tensor_set_grad(of_tensor *t, of_tensor *g) {
  if (g) {
    bool same = g->ndim == t->ndim;
    for (int32_t i = 0; same && i < t->ndim; i++) same = g->shape[i] == t->shape[i];
    if (!same) {
      char b[96];
      return of_fail(OF_ERR_SHAPE, "grad: assigned grad has shape %s, the tensor has %s",
                     OF_SHAPE_STR(g), of_shape_str(t->shape, t->ndim, b, 96));
    }
    of_tensor_retain(g);
  }
  of_tensor_release(t->grad);
  t->grad = g;
  return OF_OK;
}

of_status of_tensor_add_hook(of_tensor *t, int64_t id) {
  if (!t->requires_grad)
    return of_fail(OF_ERR_STATE, "register_hook: cannot register a hook on a tensor that "
                   "doesn't require gradient (shape %s)", OF_SHAPE_STR(t));
  if (t->grad_fn) {   /* non-leaf: the hook runs on the grad arriving at grad_fn */
    of_node *n = t->grad_fn;
    int64_t *h = realloc(n->pre_hooks, sizeof(int64_t) * (size_t)(n->npre_hooks + 1));
    int32_t *nr = realloc(n->pre_hook_nr, sizeof(int32_t) * (size_t)(n->npre_hooks + 1));
    if (!h || !nr) return of_fail(OF_ERR_OOM, "register_hook: out of memory");
    n->pre_hooks = h;
    n->pre_hook_nr = nr;
    h[n->npre_hooks] = id;
    nr[n->npre_hooks++] = t->output_nr;
    return OF_OK;
  }
  int64_t *h = realloc(t->hooks, sizeof(int64_t) * (size_t)(t->nhooks + 1));
  if (!h) return of_fail(OF_ERR_OOM, "register_hook: out of memory");
  t->hooks = h;
  h[t->nhooks++] = id;
  return OF_OK;
}

/* ---- nodes ---- */

static void meta_of(of_meta *m, const of_tensor *t) {
  m->ndim = t->ndim;
  m->dtype = t->dtype;
  memcpy(m->shape, t->shape, sizeof m->shape);
}

/* A node and its per-input / per-output arrays are one block; a node of at
 * most POOLED_IO inputs and outputs (nearly all) comes from the node pool
 * (core/storage/pool.c), the rest from malloc. */
enum { POOLED_IO = 4 };
static size_t node_bytes(int32_t nin, int32_t nout) {
  size_t ni = (size_t)(nin ? nin : 1), no = (size_t)(nout ? nout : 1);
  return sizeof(of_node) + ni * sizeof(of_edge) + ni * sizeof(of_meta) + no * sizeof(of_meta) +
         ni * sizeof(bool);
}

static of_node *node_new(const of_grad_def *def, int32_t nin, int32_t nout) {
  bool pooled = nin <= POOLED_IO && nout <= POOLED_IO;
  size_t bytes = pooled ? node_bytes(POOLED_IO, POOLED_IO) : node_bytes(nin, nout);
  of_node *n = pooled ? of_pool_get(OF_POOL_NODE, bytes) : malloc(bytes);
  if (!n) return NULL;
  memset(n, 0, bytes);
  size_t ni = (size_t)(nin ? nin : 1), no = (size_t)(nout ? nout : 1);
  char *p = (char *)(n + 1);
  n->next = (of_edge *)p;
  p += ni * sizeof(of_edge);
  n->in_meta = (of_meta *)p;
  p += ni * sizeof(of_meta);
  n->out_meta = (of_meta *)p;
  p += no * sizeof(of_meta);
  n->needs = (bool *)p;
  n->pooled = pooled;
  n->refcount = 1;
  n->def = def;
  n->nin = nin;
  n->nout = nout;
  n->seq = atomic_fetch_add(&node_seq, 1);
  for (int i = 0; i < OF_NODE_MAX_SAVED; i++) n->saved[i].output_nr = -1;
  return n;
}

void of_node_free_saved(of_node *n) {
  for (int i = 0; i < OF_NODE_MAX_SAVED; i++) {
    of_tensor_release(n->saved[i].t);
    n->saved[i].t = NULL;
    if (n->saved_grad_fn[i]) of_node_release(n->saved_grad_fn[i]);
    n->saved_grad_fn[i] = NULL;
    of_tensor_release(n->saved_leaf[i]);
    n->saved_leaf[i] = NULL;
  }
}

/* Iterative so that releasing a long chain (an RNN over 10k steps) does not
 * recurse 10k frames deep. */
void of_node_release(of_node *n) {
  of_node *stack_small[64], **stack = stack_small;
  int64_t sp = 0, cap = 64;
  stack[sp++] = n;
  while (sp) {
    of_node *x = stack[--sp];
    if (!x || __atomic_sub_fetch(&x->refcount, 1, __ATOMIC_ACQ_REL) != 0) continue;
    for (int32_t k = 0; k < x->nin; k++) {
      if (!x->next[k].node) continue;
      if (sp == cap) {
        of_node **ns = malloc(sizeof *ns * (size_t)cap * 2);
        if (!ns) break;   /* leak rather than crash when out of memory */
        memcpy(ns, stack, sizeof *ns * (size_t)sp);
        if (stack != stack_small) free(stack);
        stack = ns;
        cap *= 2;
      }
      stack[sp++] = x->next[k].node;
    }
    of_node_free_saved(x);
    if (x->leaf) {
      x->leaf->grad_acc = NULL;
      of_tensor_release(x->leaf);
    }
    if (x->host_id) host_release(x->host_id);
    for (int32_t i = 0; i < x->npre_hooks; i++) host_release(x->pre_hooks[i]);
    free(x->pre_hooks);
    free(x->pre_hook_nr);
    if (x->pooled) of_pool_put(OF_POOL_NODE, x);
    else free(x);
  }
  if (stack != stack_small) free(stack);
}

static const of_grad_def accumulate_def = {"AccumulateGrad", NULL};

/* The leaf's AccumulateGrad node, shared by every use of the leaf. */
of_node *of_grad_accumulator(of_tensor *leaf) {
  if (leaf->grad_acc) {
    __atomic_add_fetch(&leaf->grad_acc->refcount, 1, __ATOMIC_RELAXED);
    return leaf->grad_acc;
  }
  of_node *n = node_new(&accumulate_def, 0, 1);
  if (!n) return NULL;
  meta_of(&n->out_meta[0], leaf);
  n->leaf = leaf;
  of_tensor_retain(leaf);
  leaf->grad_acc = n;
  return n;
}

of_status of_record(const of_grad_def *def, of_tensor **ins, int32_t nin, of_tensor **outs,
                    int32_t nout, of_node **node) {
  of_node *n = node_new(def, nin, nout);
  if (!n) return of_fail(OF_ERR_OOM, "%s: out of memory recording the backward node", def->name);
  for (int32_t k = 0; k < nin; k++) {
    of_tensor *t = ins[k];
    if (!t) continue;
    meta_of(&n->in_meta[k], t);
    if (!t->requires_grad) continue;
    if (t->grad_fn) {
      n->next[k].node = t->grad_fn;
      n->next[k].input_nr = t->output_nr;
      __atomic_add_fetch(&t->grad_fn->refcount, 1, __ATOMIC_RELAXED);
    } else {
      n->next[k].node = of_grad_accumulator(t);
      if (!n->next[k].node) {
        of_node_release(n);
        return of_fail(OF_ERR_OOM, "%s: out of memory", def->name);
      }
    }
    n->needs[k] = true;
  }
  for (int32_t j = 0; j < nout; j++) {
    of_tensor *o = outs[j];
    meta_of(&n->out_meta[j], o);
    if (!of_dtype_is_floating(o->dtype) && !of_dtype_is_complex(o->dtype)) continue;   /* indices etc. carry no grad */
    if (o->grad_fn) of_node_release(o->grad_fn);
    o->grad_fn = n;
    o->output_nr = j;
    o->requires_grad = true;
    __atomic_add_fetch(&n->refcount, 1, __ATOMIC_RELAXED);
  }
  if (node) *node = n;
  of_node_release(n);   /* the outputs hold it now (or nobody: it goes) */
  return OF_OK;
}

void of_node_save(of_node *n, int32_t slot, of_tensor *t) {
  if (slot < 0 || slot >= OF_NODE_MAX_SAVED || !t) return;
  of_saved *s = &n->saved[slot];
  s->t = of_tensor_alias(t, t->shape, t->strides, t->ndim, t->offset);
  s->version = t->storage->version;
  s->output_nr = t->grad_fn == n ? t->output_nr : -1;
  /* an input keeps its history so that double backward reaches it */
  if (s->output_nr < 0) {
    n->saved_requires_grad[slot] = t->requires_grad;
    n->saved_grad_fn[slot] = t->grad_fn;
    n->saved_output_nr[slot] = t->output_nr;
    if (t->grad_fn) __atomic_add_fetch(&t->grad_fn->refcount, 1, __ATOMIC_RELAXED);
    if (!t->grad_fn && t->requires_grad) n->saved_leaf[slot] = t, of_tensor_retain(t);
  }
}

of_status of_node_saved(of_node *n, int32_t slot, of_tensor **out) {
  of_saved *s = &n->saved[slot];
  if (n->released)
    return of_fail(OF_ERR_STATE, "%s: trying to backward through the graph a second time; "
                   "its saved tensors were freed. Pass {retain_graph = true} to the first "
                   "backward() if you need to backward twice", n->def->name);
  if (!s->t) return of_fail(OF_ERR_STATE, "%s: saved tensor %d missing", n->def->name, slot);
  if (s->t->storage->version != s->version)
    return of_fail(OF_ERR_STATE, "%s: one of the tensors needed for gradient computation has "
                   "been modified by an in-place operation: a tensor of shape %s (%s) is at "
                   "version %lld, expected version %lld", n->def->name, OF_SHAPE_STR(s->t),
                   OF_DT(s->t), (long long)s->t->storage->version, (long long)s->version);
  if (n->saved_leaf[slot]) {   /* a leaf: the tensor itself, so grads reach it */
    of_tensor_retain(n->saved_leaf[slot]);
    *out = n->saved_leaf[slot];
    return OF_OK;
  }
  of_tensor *t = of_tensor_alias(s->t, s->t->shape, s->t->strides, s->t->ndim, s->t->offset);
  if (!t) return OF_ERR_OOM;
  if (s->output_nr >= 0) {
    /* a saved output gets its history back for double backward; the node
     * itself keeps only the history-free alias, so there is no cycle */
    t->grad_fn = n;
    t->output_nr = s->output_nr;
    t->requires_grad = true;
    __atomic_add_fetch(&n->refcount, 1, __ATOMIC_RELAXED);
  } else {
    t->requires_grad = n->saved_requires_grad[slot];
    t->grad_fn = n->saved_grad_fn[slot];
    t->output_nr = n->saved_output_nr[slot];
    if (t->grad_fn) __atomic_add_fetch(&t->grad_fn->refcount, 1, __ATOMIC_RELAXED);
  }
  *out = t;
  return OF_OK;
}

const char *of_node_name(const of_node *n) { return n->def->name; }
int32_t of_node_num_next(const of_node *n) { return n->nin; }
of_node *of_node_next(const of_node *n, int32_t i) {
  return i >= 0 && i < n->nin ? n->next[i].node : NULL;
}

of_host_fn of_host_callback(void) { return host_fn; }

void of_node_keep_attrs(of_node *n, int32_t op, const void *rec, int32_t size) {
  n->attr_op = op;
  n->attr_size = size;
  memcpy(n->attrs.b, rec, (size_t)size);
}
