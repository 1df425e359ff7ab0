/* autograd.c -- backward graph nodes and the engine that runs them.
 *
 * Each differentiable op records one node per call (of_record): edges to the
 * nodes that produced its inputs (a leaf's edge goes to its AccumulateGrad
 * node), the input/output shapes, saved tensors with their storage version,
 * and attributes. The engine (of_run_backward) finds the nodes reachable
 * from the roots, counts dependencies, and runs them newest first, summing
 * the gradients that meet at a node. */
#include "autograd.h"
#include "graph/graph.h"
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
  if (on && !of_dtype_is_floating(t->dtype))
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

of_status of_impl_detach(of_tensor *t, of_tensor **out) {
  of_tensor *d = of_tensor_alias(t, t->shape, t->strides, t->ndim, t->offset);
  if (!d) return OF_ERR_OOM;
  *out = d;
  return OF_OK;
}

/* ---- nodes ---- */

static void meta_of(of_meta *m, const of_tensor *t) {
  m->ndim = t->ndim;
  m->dtype = t->dtype;
  memcpy(m->shape, t->shape, sizeof m->shape);
}

static of_node *node_new(const of_grad_def *def, int32_t nin, int32_t nout) {
  of_node *n = calloc(1, sizeof *n);
  if (!n) return NULL;
  n->next = calloc((size_t)(nin ? nin : 1), sizeof *n->next);
  n->in_meta = calloc((size_t)(nin ? nin : 1), sizeof *n->in_meta);
  n->out_meta = calloc((size_t)(nout ? nout : 1), sizeof *n->out_meta);
  n->needs = calloc((size_t)(nin ? nin : 1), sizeof *n->needs);
  if (!n->next || !n->in_meta || !n->out_meta || !n->needs) {
    free(n->next); free(n->in_meta); free(n->out_meta); free(n->needs); free(n);
    return NULL;
  }
  n->refcount = 1;
  n->def = def;
  n->nin = nin;
  n->nout = nout;
  n->seq = atomic_fetch_add(&node_seq, 1);
  for (int i = 0; i < OF_NODE_MAX_SAVED; i++) n->saved[i].output_nr = -1;
  return n;
}

static void node_free_saved(of_node *n) {
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
    node_free_saved(x);
    if (x->leaf) {
      x->leaf->grad_acc = NULL;
      of_tensor_release(x->leaf);
    }
    if (x->host_id) host_release(x->host_id);
    for (int32_t i = 0; i < x->npre_hooks; i++) host_release(x->pre_hooks[i]);
    free(x->pre_hooks);
    free(x->pre_hook_nr);
    free(x->next); free(x->in_meta); free(x->out_meta); free(x->needs);
    free(x);
  }
  if (stack != stack_small) free(stack);
}

static const of_grad_def accumulate_def = {"AccumulateGrad", NULL};

/* The leaf's AccumulateGrad node, shared by every use of the leaf. */
static of_node *grad_accumulator(of_tensor *leaf) {
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
      n->next[k].node = grad_accumulator(t);
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
    if (!of_dtype_is_floating(o->dtype)) continue;   /* indices etc. carry no grad */
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

/* ---- engine ---- */

typedef struct {
  of_node **nodes;      /* reachable nodes */
  int64_t n, cap;
} node_list;

typedef struct {
  of_node *node;
  int32_t deps;
  of_tensor **buf;      /* [nout] grads arriving at the node */
  bool needed;          /* on a path to a capture target (autograd.grad) */
  bool visited;
  int32_t capture;      /* index into captures, or -1 */
  int32_t capture_nr;
} node_state;

typedef struct {
  node_state *s;
  int64_t n, cap;
} state_table;

/* Open-addressing map node* -> state index. */
typedef struct {
  of_node **keys;
  int64_t *vals;
  int64_t cap;
} node_map;

static uint64_t hash_ptr(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

static int64_t map_get(const node_map *m, const of_node *k) {
  for (uint64_t i = hash_ptr(k) & (uint64_t)(m->cap - 1);; i = (i + 1) & (uint64_t)(m->cap - 1)) {
    if (m->keys[i] == k) return m->vals[i];
    if (!m->keys[i]) return -1;
  }
}

static bool map_put(node_map *m, of_node *k, int64_t v, int64_t count) {
  if ((count + 1) * 2 > m->cap) {
    node_map nm = {calloc((size_t)m->cap * 2, sizeof(of_node *)),
                   calloc((size_t)m->cap * 2, sizeof(int64_t)), m->cap * 2};
    if (!nm.keys || !nm.vals) { free(nm.keys); free(nm.vals); return false; }
    for (int64_t i = 0; i < m->cap; i++)
      if (m->keys[i]) map_put(&nm, m->keys[i], m->vals[i], 0);
    free(m->keys);
    free(m->vals);
    *m = nm;
  }
  uint64_t i = hash_ptr(k) & (uint64_t)(m->cap - 1);
  while (m->keys[i] && m->keys[i] != k) i = (i + 1) & (uint64_t)(m->cap - 1);
  m->keys[i] = k;
  m->vals[i] = v;
  return true;
}

typedef struct {
  state_table st;
  node_map map;
  int64_t *heap;        /* indices into st, max-heap by node seq */
  int64_t heap_n;
  bool create_graph, retain_graph, accumulate;
  of_tensor **captured; /* autograd.grad results */
} engine;

static int64_t state_of(engine *e, of_node *n, bool *fresh) {
  int64_t idx = map_get(&e->map, n);
  *fresh = idx < 0;
  if (idx >= 0) return idx;
  if (e->st.n == e->st.cap) {
    int64_t cap = e->st.cap ? e->st.cap * 2 : 64;
    node_state *s = realloc(e->st.s, sizeof *s * (size_t)cap);
    if (!s) return -1;
    e->st.s = s;
    e->st.cap = cap;
  }
  idx = e->st.n++;
  node_state *s = &e->st.s[idx];
  memset(s, 0, sizeof *s);
  s->node = n;
  s->capture = -1;
  s->buf = calloc((size_t)(n->nout ? n->nout : 1), sizeof(of_tensor *));
  if (!s->buf || !map_put(&e->map, n, idx, e->st.n)) return -1;
  return idx;
}

/* Discovers every node reachable from `roots` and counts, for each, the
 * edges pointing at it from other reachable nodes. */
static of_status discover(engine *e, of_node **roots, int32_t nroots) {
  int64_t cap = 64, sp = 0;
  of_node **stack = malloc(sizeof *stack * (size_t)cap);
  if (!stack) return of_fail(OF_ERR_OOM, "backward: out of memory");
  for (int32_t r = 0; r < nroots; r++) {
    bool fresh;
    if (!roots[r]) continue;
    if (state_of(e, roots[r], &fresh) < 0) { free(stack); return of_fail(OF_ERR_OOM, "backward: out of memory"); }
    if (fresh) stack[sp++] = roots[r];
    if (sp == cap) {
      of_node **ns = realloc(stack, sizeof *ns * (size_t)(cap *= 2));
      if (!ns) { free(stack); return of_fail(OF_ERR_OOM, "backward: out of memory"); }
      stack = ns;
    }
  }
  while (sp) {
    of_node *n = stack[--sp];
    for (int32_t k = 0; k < n->nin; k++) {
      of_node *m = n->next[k].node;
      if (!m) continue;
      bool fresh;
      int64_t idx = state_of(e, m, &fresh);
      if (idx < 0) { free(stack); return of_fail(OF_ERR_OOM, "backward: out of memory"); }
      e->st.s[idx].deps++;
      if (fresh) {
        if (sp + 1 >= cap) {
          of_node **ns = realloc(stack, sizeof *ns * (size_t)(cap *= 2));
          if (!ns) { free(stack); return of_fail(OF_ERR_OOM, "backward: out of memory"); }
          stack = ns;
        }
        stack[sp++] = m;
      }
    }
  }
  free(stack);
  return OF_OK;
}

/* needed[n] = n is a capture target or leads to one (autograd.grad prunes
 * the rest). Nodes are numbered in discovery order; iterate to a fixpoint in
 * reverse creation order instead of recursing. */
static void mark_needed(engine *e) {
  bool changed = true;
  while (changed) {
    changed = false;
    for (int64_t i = 0; i < e->st.n; i++) {
      node_state *s = &e->st.s[i];
      if (s->needed) continue;
      if (s->capture >= 0) { s->needed = changed = true; continue; }
      for (int32_t k = 0; k < s->node->nin; k++) {
        of_node *m = s->node->next[k].node;
        if (m && e->st.s[map_get(&e->map, m)].needed) { s->needed = changed = true; break; }
      }
    }
  }
}

static bool heap_less(engine *e, int64_t a, int64_t b) {
  return e->st.s[a].node->seq < e->st.s[b].node->seq;
}

static void heap_push(engine *e, int64_t idx) {
  int64_t i = e->heap_n++;
  e->heap[i] = idx;
  while (i > 0) {
    int64_t p = (i - 1) / 2;
    if (!heap_less(e, e->heap[p], e->heap[i])) break;
    int64_t t = e->heap[p]; e->heap[p] = e->heap[i]; e->heap[i] = t;
    i = p;
  }
}

static int64_t heap_pop(engine *e) {
  int64_t top = e->heap[0];
  e->heap[0] = e->heap[--e->heap_n];
  int64_t i = 0;
  for (;;) {
    int64_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < e->heap_n && heap_less(e, e->heap[m], e->heap[l])) m = l;
    if (r < e->heap_n && heap_less(e, e->heap[m], e->heap[r])) m = r;
    if (m == i) break;
    int64_t t = e->heap[m]; e->heap[m] = e->heap[i]; e->heap[i] = t;
    i = m;
  }
  return top;
}

/* buf += g (g consumed). */
/* Whether t is a temporary only the engine holds: nothing else sees it, so
 * a sum may be written into it. */
static bool private_grad(const of_tensor *t) {
  return t->refcount == 1 && t->storage->refcount == 1 && !t->view_base && !t->grad_fn &&
         !t->requires_grad && of_tensor_is_contiguous(t);
}

static of_status accumulate_into(const engine *e, of_tensor **buf, of_tensor *g) {
  if (!*buf) { *buf = g; return OF_OK; }
  of_tensor *a = *buf;
  bool same = !e->create_graph && !of_tracing() && a->dtype == g->dtype && a->ndim == g->ndim &&
              a->storage != g->storage && !a->requires_grad && !g->requires_grad;
  for (int32_t d = 0; same && d < a->ndim; d++) same = a->shape[d] == g->shape[d];
  if (same && (private_grad(a) || private_grad(g))) {
    /* the sum goes into whichever of the two is private (no allocation) */
    of_tensor *dst = private_grad(a) ? a : g, *src = dst == a ? g : a, *res;
    of_status st = of_binary(OF_ADD, dst, src, dst, &res);
    if (st == OF_OK) of_tensor_release(res);
    of_tensor_release(src);
    *buf = dst;
    return st;
  }
  of_tensor *sum;
  of_status st = of_binary(OF_ADD, *buf, g, NULL, &sum);
  of_tensor_release(g);
  if (st != OF_OK) return st;
  of_tensor_release(*buf);
  *buf = sum;
  return OF_OK;
}

/* Runs host hooks on g (a hook may replace it). */
static of_status run_hooks(const int64_t *ids, const int32_t *nrs, int32_t nhooks, int32_t nr,
                           of_tensor **g) {
  for (int32_t h = 0; h < nhooks; h++) {
    if (nrs && nrs[h] != nr) continue;
    if (!host_fn) return of_fail(OF_ERR_STATE, "hook: no host callback installed");
    of_tensor *res = NULL;
    of_status st = host_fn(ids[h], g, 1, &res, 1);
    if (st != OF_OK) return st;
    if (res) { of_tensor_release(*g); *g = res; }
  }
  return OF_OK;
}

/* `slot` is the node's grad buffer: a hook may replace the tensor in it. */
static of_status accumulate_leaf(engine *e, of_node *n, of_tensor **slot) {
  of_tensor *leaf = n->leaf;
  if (!leaf) return OF_OK;
  OF_CHECK(run_hooks(leaf->hooks, NULL, leaf->nhooks, 0, slot));
  of_tensor *g = *slot;
  if (!leaf->grad) {
    /* a fresh grad: own a copy unless it's a private temporary already */
    if (e->create_graph || g->refcount > 1 || g->view_base || !of_tensor_is_contiguous(g)) {
      of_tensor *c;
      if (e->create_graph) { of_tensor_retain(g); c = g; }
      else OF_CHECK(of_clone(g, &c));
      leaf->grad = c;
    } else {
      of_tensor_retain(g);
      leaf->grad = g;
    }
    if (!e->create_graph && leaf->grad->grad_fn) {
      of_node_release(leaf->grad->grad_fn);
      leaf->grad->grad_fn = NULL;
      leaf->grad->requires_grad = false;
    }
    return OF_OK;
  }
  if (e->create_graph) {
    of_tensor *sum;
    OF_CHECK(of_binary(OF_ADD, leaf->grad, g, NULL, &sum));
    of_tensor_release(leaf->grad);
    leaf->grad = sum;
    return OF_OK;
  }
  of_tensor *res;
  OF_CHECK(of_binary(OF_ADD, leaf->grad, g, leaf->grad, &res));
  of_tensor_release(res);
  return OF_OK;
}

static of_status run_node(engine *e, node_state *s) {
  of_node *n = s->node;
  for (int32_t j = 0; j < n->nout; j++)
    if (s->buf[j] && n->npre_hooks)
      OF_CHECK(run_hooks(n->pre_hooks, n->pre_hook_nr, n->npre_hooks, j, &s->buf[j]));
  if (s->capture >= 0) {
    of_tensor *g = s->buf[s->capture_nr];
    if (g) of_tensor_retain(g);
    e->captured[s->capture] = g;
  }
  if (n->leaf) {
    if (e->accumulate && s->buf[0]) return accumulate_leaf(e, n, &s->buf[0]);
    return OF_OK;
  }
  if (!n->def->backward)
    return of_fail(OF_ERR_STATE, "%s: has no backward rule", n->def->name);
  of_tensor **gin = calloc((size_t)(n->nin ? n->nin : 1), sizeof *gin);
  if (!gin) return of_fail(OF_ERR_OOM, "backward: out of memory");
  of_status st = of_tracing() ? of_trace_backward(n, s->buf, gin) : n->def->backward(n, s->buf, gin);
  for (int32_t k = 0; st == OF_OK && k < n->nin; k++) {
    of_node *m = n->next[k].node;
    if (!m || !gin[k]) { of_tensor_release(gin[k]); gin[k] = NULL; continue; }
    int64_t idx = map_get(&e->map, m);
    node_state *ms = &e->st.s[idx];
    if (!ms->needed) { of_tensor_release(gin[k]); gin[k] = NULL; continue; }
    st = accumulate_into(e, &ms->buf[n->next[k].input_nr], gin[k]);
    gin[k] = NULL;
  }
  for (int32_t k = 0; k < n->nin; k++) of_tensor_release(gin[k]);
  free(gin);
  if (!e->retain_graph) {
    node_free_saved(n);
    n->released = true;
  }
  return st;
}

static void engine_free(engine *e) {
  for (int64_t i = 0; i < e->st.n; i++) {
    node_state *s = &e->st.s[i];
    for (int32_t j = 0; j < s->node->nout; j++) of_tensor_release(s->buf[j]);
    free(s->buf);
  }
  free(e->st.s);
  free(e->map.keys);
  free(e->map.vals);
  free(e->heap);
}

/* Grad of a root: the given one, or ones for a scalar. */
static of_status root_grad(of_tensor *root, of_tensor *g, of_tensor **out) {
  if (g) {
    bool same = g->ndim == root->ndim;
    for (int32_t i = 0; same && i < root->ndim; i++) same = g->shape[i] == root->shape[i];
    if (!same) {
      char b[96];
      return of_fail(OF_ERR_SHAPE, "backward: grad of shape %s given for an output of shape %s",
                     OF_SHAPE_STR(g), of_shape_str(root->shape, root->ndim, b, 96));
    }
    of_tensor_retain(g);
    *out = g;
    return OF_OK;
  }
  if (root->numel != 1)
    return of_fail(OF_ERR_SHAPE, "backward: grad can be implicitly created only for scalar "
                   "outputs; the output has shape %s -- pass a gradient",
                   OF_SHAPE_STR(root));
  return of_full(root->shape, root->ndim, 1.0, root->dtype, root->storage->device, out);
}

static of_status run_engine(of_tensor **roots, of_tensor **grads, int32_t n,
                            of_tensor **inputs, int32_t nin, int32_t retain_graph,
                            int32_t create_graph, of_tensor **results) {
  engine e = {0};
  e.create_graph = create_graph != 0;
  e.retain_graph = retain_graph != 0 || create_graph != 0;
  e.accumulate = inputs == NULL;
  e.captured = results;
  e.map.cap = 256;
  e.map.keys = calloc((size_t)e.map.cap, sizeof(of_node *));
  e.map.vals = calloc((size_t)e.map.cap, sizeof(int64_t));
  of_status st = OF_OK;
  of_node **root_nodes = calloc((size_t)(n + nin + 1), sizeof *root_nodes);
  if (!e.map.keys || !e.map.vals || !root_nodes) {
    st = of_fail(OF_ERR_OOM, "backward: out of memory");
    goto done;
  }
  for (int32_t r = 0; r < n; r++) {
    if (!roots[r]->requires_grad) {
      st = of_fail(OF_ERR_STATE, "backward: element %d of the outputs does not require grad "
                   "and has no grad_fn (shape %s)", (int)r + 1, OF_SHAPE_STR(roots[r]));
      goto done;
    }
    if (roots[r]->grad_fn) {
      root_nodes[r] = roots[r]->grad_fn;
      __atomic_add_fetch(&root_nodes[r]->refcount, 1, __ATOMIC_RELAXED);
    } else {
      root_nodes[r] = grad_accumulator(roots[r]);   /* a leaf as its own root */
    }
  }
  st = discover(&e, root_nodes, n);
  if (st != OF_OK) goto done;
  if (inputs) {
    for (int32_t i = 0; i < nin; i++) {
      of_tensor *x = inputs[i];
      of_node *target = x->grad_fn ? x->grad_fn : x->grad_acc;
      int64_t idx = target ? map_get(&e.map, target) : -1;
      if (idx < 0) continue;   /* unreachable: grad stays NULL */
      if (e.st.s[idx].capture >= 0) {
        st = of_fail(OF_ERR_ARG, "autograd.grad: the same tensor is given twice as input");
        goto done;
      }
      e.st.s[idx].capture = i;
      e.st.s[idx].capture_nr = x->grad_fn ? x->output_nr : 0;
    }
    mark_needed(&e);
  } else {
    for (int64_t i = 0; i < e.st.n; i++) e.st.s[i].needed = true;
  }
  e.heap = malloc(sizeof *e.heap * (size_t)(e.st.n + 1));
  if (!e.heap) { st = of_fail(OF_ERR_OOM, "backward: out of memory"); goto done; }
  for (int32_t r = 0; r < n; r++) {
    int64_t idx = map_get(&e.map, root_nodes[r]);
    of_tensor *g;
    st = root_grad(roots[r], grads ? grads[r] : NULL, &g);
    if (st != OF_OK) goto done;
    int32_t nr = roots[r]->grad_fn ? roots[r]->output_nr : 0;
    st = accumulate_into(&e, &e.st.s[idx].buf[nr], g);
    if (st != OF_OK) goto done;
  }
  for (int64_t i = 0; i < e.st.n; i++)
    if (e.st.s[i].deps == 0) heap_push(&e, i);
  int disabled_before = grad_disabled;
  grad_disabled = create_graph ? 0 : 1;
  int32_t amp_before = of_amp_tls;   /* rules run in the forward's dtypes */
  of_amp_tls = 0;
  while (e.heap_n && st == OF_OK) {
    int64_t idx = heap_pop(&e);
    node_state *s = &e.st.s[idx];
    if (s->needed) st = run_node(&e, s);
    for (int32_t k = 0; st == OF_OK && k < s->node->nin; k++) {
      of_node *m = s->node->next[k].node;
      if (!m) continue;
      int64_t mi = map_get(&e.map, m);
      if (--e.st.s[mi].deps == 0) heap_push(&e, mi);
    }
    for (int32_t j = 0; j < s->node->nout; j++) {
      of_tensor_release(s->buf[j]);
      s->buf[j] = NULL;
    }
  }
  grad_disabled = disabled_before;
  of_amp_tls = amp_before;
done:
  engine_free(&e);
  for (int32_t r = 0; root_nodes && r < n; r++)
    if (root_nodes[r]) of_node_release(root_nodes[r]);
  free(root_nodes);
  return st;
}

of_status of_backward(of_tensor **roots, of_tensor **grads, int32_t n, int32_t retain_graph,
                      int32_t create_graph) {
  of_trace_engine(1);
  of_status st = run_engine(roots, grads, n, NULL, 0, retain_graph, create_graph, NULL);
  of_trace_engine(-1);
  return st;
}

of_status of_autograd_grad(of_tensor **outputs, of_tensor **grad_outputs, int32_t nout,
                           of_tensor **inputs, int32_t nin, int32_t retain_graph,
                           int32_t create_graph, int32_t allow_unused, of_tensor **grads) {
  for (int32_t i = 0; i < nin; i++) {
    grads[i] = NULL;
    if (!inputs[i]->requires_grad)
      return of_fail(OF_ERR_ARG, "autograd.grad: input %d does not require grad (shape %s)",
                     (int)i + 1, OF_SHAPE_STR(inputs[i]));
  }
  /* make sure leaves have an accumulator to be found through */
  of_node **tmp = calloc((size_t)(nin + 1), sizeof *tmp);
  if (!tmp) return of_fail(OF_ERR_OOM, "autograd.grad: out of memory");
  for (int32_t i = 0; i < nin; i++)
    if (!inputs[i]->grad_fn && !inputs[i]->grad_acc) tmp[i] = grad_accumulator(inputs[i]);
  of_trace_engine(1);
  of_status st = run_engine(outputs, grad_outputs, nout, inputs, nin, retain_graph,
                            create_graph, grads);
  of_trace_engine(-1);
  for (int32_t i = 0; i < nin; i++) if (tmp[i]) of_node_release(tmp[i]);
  free(tmp);
  if (st != OF_OK) {
    for (int32_t i = 0; i < nin; i++) { of_tensor_release(grads[i]); grads[i] = NULL; }
    return st;
  }
  if (!allow_unused)
    for (int32_t i = 0; i < nin; i++)
      if (!grads[i]) {
        for (int32_t j = 0; j < nin; j++) { of_tensor_release(grads[j]); grads[j] = NULL; }
        return of_fail(OF_ERR_ARG, "autograd.grad: input %d was not used in the graph; pass "
                       "{allow_unused = true} to get nil for it", (int)i + 1);
      }
  return OF_OK;
}

/* ---- custom functions (written in Lua) ---- */

static of_status custom_backward(of_node *n, of_tensor **gout, of_tensor **gin) {
  if (!host_fn) return of_fail(OF_ERR_STATE, "%s: no host callback installed", n->def->name);
  /* missing output grads become zeros: a Lua backward expects tensors */
  of_tensor **g = calloc((size_t)n->nout, sizeof *g);
  if (!g) return of_fail(OF_ERR_OOM, "%s: out of memory", n->def->name);
  of_status st = OF_OK;
  for (int32_t j = 0; j < n->nout && st == OF_OK; j++) {
    if (gout[j]) { g[j] = gout[j]; of_tensor_retain(g[j]); }
    else st = of_zeros(n->out_meta[j].shape, n->out_meta[j].ndim, n->out_meta[j].dtype, OF_CPU, &g[j]);
  }
  if (st == OF_OK) st = host_fn(n->host_id, g, n->nout, gin, n->nin);
  for (int32_t j = 0; j < n->nout; j++) of_tensor_release(g[j]);
  free(g);
  if (st != OF_OK) return st;
  for (int32_t k = 0; k < n->nin; k++) {
    if (!gin[k]) continue;
    const of_meta *m = &n->in_meta[k];
    bool same = gin[k]->ndim == m->ndim;
    for (int32_t i = 0; same && i < m->ndim; i++) same = gin[k]->shape[i] == m->shape[i];
    if (!same) {
      char b[96];
      return of_fail(OF_ERR_SHAPE, "%s: backward returned a grad of shape %s for input %d of "
                     "shape %s", n->def->name, OF_SHAPE_STR(gin[k]), (int)k + 1,
                     of_shape_str(m->shape, m->ndim, b, 96));
    }
  }
  return OF_OK;
}

/* Names must outlive the node; custom function names are interned here. */
typedef struct name_entry { struct name_entry *next; of_grad_def def; char name[64]; } name_entry;
static name_entry *custom_defs;

static const of_grad_def *custom_def(const char *name) {
  for (name_entry *e = custom_defs; e; e = e->next)
    if (strcmp(e->name, name) == 0) return &e->def;
  name_entry *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  snprintf(e->name, sizeof e->name, "%s", name);
  e->def.name = e->name;
  e->def.backward = custom_backward;
  e->next = custom_defs;   /* single-threaded use from one Lua state per def */
  custom_defs = e;
  return &e->def;
}

of_status of_custom_function(int64_t id, const char *name, of_tensor **inputs, int32_t nin,
                             of_tensor **outputs, int32_t nout) {
  const of_grad_def *def = custom_def(name ? name : "CustomFunctionBackward");
  if (!def) return of_fail(OF_ERR_OOM, "Function: out of memory");
  if (!of_grad_needed(inputs, nin)) return OF_OK;
  of_node *n;
  OF_CHECK(of_record(def, inputs, nin, outputs, nout, &n));
  /* of_record left the node alive only if some output took it */
  bool held = false;
  for (int32_t j = 0; j < nout; j++) held = held || outputs[j]->grad_fn == n;
  if (held) n->host_id = id;
  return OF_OK;
}

/* ---- helpers for backward rules and in-place ops ---- */

of_status of_sum_to(of_tensor *g, const of_meta *m, of_tensor **out) {
  int32_t dims[OF_MAX_DIMS], nd = 0, lead = g->ndim - m->ndim;
  if (lead < 0) {
    char b[96];
    return of_fail(OF_ERR_SHAPE, "sum_to: grad %s has fewer dims than %s", OF_SHAPE_STR(g),
                   of_shape_str(m->shape, m->ndim, b, 96));
  }
  for (int32_t d = 0; d < g->ndim; d++)
    if (d < lead || (m->shape[d - lead] == 1 && g->shape[d] != 1)) dims[nd++] = d;
  of_tensor *s;
  if (nd == 0) {
    of_tensor_retain(g);
    s = g;
  } else {
    OF_CHECK(of_reduce(OF_RED_SUM, g, dims, nd, 1, 0, -1, &s));
  }
  of_tensor *r = s;
  of_status st = OF_OK;
  if (s->ndim != m->ndim) {
    st = of_reshape(s, m->shape, m->ndim, &r);
    of_tensor_release(s);
    if (st != OF_OK) return st;
  }
  if (r->dtype != m->dtype && of_dtype_is_floating(m->dtype)) {
    st = of_to_dtype(r, m->dtype, out);
    of_tensor_release(r);
    return st;
  }
  *out = r;
  return OF_OK;
}

of_status of_check_inplace(const char *op, of_tensor *into) {
  if (grad_disabled) return OF_OK;
  if (into->requires_grad && !into->grad_fn)
    return of_fail(OF_ERR_STATE, "%s: a leaf tensor that requires grad (shape %s) is used in an "
                   "in-place operation; wrap it in flow.no_grad or use an out-of-place op", op,
                   OF_SHAPE_STR(into));
  if (into->view_base && (into->requires_grad || into->view_base->requires_grad))
    return of_fail(OF_ERR_STATE, "%s: in-place operation on a view (shape %s) of a tensor that "
                   "requires grad is not supported; clone() the view or use an out-of-place "
                   "op", op, OF_SHAPE_STR(into));
  return OF_OK;
}

of_status of_assign_result(of_tensor *into, of_tensor *result) {
  OF_CHECK(of_copy_data(into, result));
  if (into->grad_fn) of_node_release(into->grad_fn);
  into->grad_fn = result->grad_fn;
  into->output_nr = result->output_nr;
  into->requires_grad = result->requires_grad;
  if (into->grad_fn) __atomic_add_fetch(&into->grad_fn->refcount, 1, __ATOMIC_RELAXED);
  return OF_OK;
}

/* ---- expression scope for backward rules ---- */

of_tensor *of_s_keep(of_scope *s, of_status st, of_tensor *t) {
  if (st != OF_OK) {
    if (s->st == OF_OK) s->st = st;
    return NULL;
  }
  if (s->n == OF_SCOPE_MAX) {
    of_tensor_release(t);
    s->st = of_fail(OF_ERR_STATE, "backward rule: scope overflow");
    return NULL;
  }
  s->t[s->n++] = t;
  return t;
}

of_tensor *of_s_unary(of_scope *s, of_unary_op op, of_tensor *x) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_unary(op, x, NULL, &r);
  return of_s_keep(s, st, r);
}

of_tensor *of_s_bin(of_scope *s, of_binary_op op, of_tensor *x, of_tensor *y) {
  if (s->st != OF_OK || !x || !y) return NULL;
  of_tensor *r = NULL;
  of_status st = of_binary(op, x, y, NULL, &r);
  return of_s_keep(s, st, r);
}

of_tensor *of_s_bins(of_scope *s, of_binary_op op, of_tensor *x, double v) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_binary_scalar(op, x, v, 0, NULL, &r);
  return of_s_keep(s, st, r);
}

of_tensor *of_s_sbin(of_scope *s, of_binary_op op, double v, of_tensor *x) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_binary_scalar(op, x, v, 1, NULL, &r);
  return of_s_keep(s, st, r);
}

of_tensor *of_s_matmul(of_scope *s, of_tensor *x, of_tensor *y) {
  if (s->st != OF_OK || !x || !y) return NULL;
  of_tensor *r = NULL;
  of_status st = of_matmul(x, y, &r);
  return of_s_keep(s, st, r);
}

of_tensor *of_s_mT(of_scope *s, of_tensor *x) {
  if (s->st != OF_OK || !x) return NULL;
  of_tensor *r = NULL;
  of_status st = of_transpose(x, -1, -2, &r);
  return of_s_keep(s, st, r);
}

of_tensor *of_s_saved(of_scope *s, of_node *n, int32_t slot) {
  if (s->st != OF_OK) return NULL;
  of_tensor *r = NULL;
  of_status st = of_node_saved(n, slot, &r);
  return of_s_keep(s, st, r);
}

of_status of_s_end(of_scope *s, of_tensor *result, of_tensor **out) {
  if (s->st == OF_OK && result) {
    of_tensor_retain(result);
    *out = result;
  }
  for (int32_t i = 0; i < s->n; i++) of_tensor_release(s->t[i]);
  s->n = 0;
  return s->st;
}
