/* engine.c -- runs the backward pass over the records of core/tensor/tape.c.
 *
 * The engine (run_engine) finds the nodes reachable from the roots, counts
 * dependencies, and runs them newest first, summing the gradients that meet
 * at a node. Backward rules are called through the dispatcher, so that a
 * trace records them (core/dispatch). */
#include "../autograd.h"
#include "../dispatch/dispatch.h"
#include <stdio.h>
#include <stdlib.h>

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
  bool same = !e->create_graph && !of_dispatch_recording() && a->dtype == g->dtype && a->ndim == g->ndim &&
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
    if (!of_host_callback()) return of_fail(OF_ERR_STATE, "hook: no host callback installed");
    of_tensor *res = NULL;
    of_status st = of_host_callback()(ids[h], g, 1, &res, 1);
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
  n->direct = !e->create_graph && !of_dispatch_recording();
  of_status st = of_dispatch_backward(n, s->buf, gin);
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
    of_node_free_saved(n);
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
      root_nodes[r] = of_grad_accumulator(roots[r]);   /* a leaf as its own root */
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
  int32_t enabled_before = of_is_grad_enabled();
  of_set_grad_enabled(create_graph ? 1 : 0);
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
  of_set_grad_enabled(enabled_before);
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
  of_dispatch_engine(1);
  of_status st = run_engine(roots, grads, n, NULL, 0, retain_graph, create_graph, NULL);
  of_dispatch_engine(-1);
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
    if (!inputs[i]->grad_fn && !inputs[i]->grad_acc) tmp[i] = of_grad_accumulator(inputs[i]);
  of_dispatch_engine(1);
  of_status st = run_engine(outputs, grad_outputs, nout, inputs, nin, retain_graph,
                            create_graph, grads);
  of_dispatch_engine(-1);
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
  if (!of_host_callback()) return of_fail(OF_ERR_STATE, "%s: no host callback installed", n->def->name);
  /* missing output grads become zeros: a Lua backward expects tensors */
  of_tensor **g = calloc((size_t)n->nout, sizeof *g);
  if (!g) return of_fail(OF_ERR_OOM, "%s: out of memory", n->def->name);
  of_status st = OF_OK;
  for (int32_t j = 0; j < n->nout && st == OF_OK; j++) {
    if (gout[j]) { g[j] = gout[j]; of_tensor_retain(g[j]); }
    else st = of_zeros(n->out_meta[j].shape, n->out_meta[j].ndim, n->out_meta[j].dtype, OF_CPU, &g[j]);
  }
  if (st == OF_OK) st = of_host_callback()(n->host_id, g, n->nout, gin, n->nin);
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
