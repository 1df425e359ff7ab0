/* trace.c -- the tracer: while a graph's build() runs eagerly, every
 * outermost public op records a node here (op id, attributes, input and
 * output values).
 *
 * Values are found by tensor pointer (checked against the storage id and
 * the view geometry, since a freed header's address comes back), then by
 * storage: an unknown header over a known storage (a saved tensor's alias,
 * an op's internal view) is the value with the same geometry, or an
 * implicit view node of the latest value on that storage. A storage the
 * tracer has never seen is an external if it existed before tracing began
 * (storage ids only grow), and otherwise the result of code that recorded
 * nothing -- an error that names the op that used it.
 *
 * Backward rules run inside the trace. A rule made of public ops records
 * them like any other op ("transparent"). A rule that computes with
 * internal kernels (pooling, norms, losses) is rolled back and recorded as
 * one opaque node: the forward node keeps its autograd node at run time
 * (CAPTURE) and the opaque node calls the rule on it. */
#include "ops.h"
#include "../device.h"
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  void **keys;
  int32_t *vals;
  int64_t cap, count;
} ptrmap;

typedef struct {
  int64_t *keys;
  int32_t *vals;
  int64_t cap, count;
} sidmap;

struct of_trace {
  of_graph *g;
  int64_t first_sid;
  ptrmap tensors;          /* of_tensor* -> latest value of that header */
  sidmap storages;         /* storage id -> latest value on it */
  ptrmap nodes;            /* of_node* (retained) -> forward gnode << 8 | output nr */
  int32_t *prev_on_storage;   /* per value: the previous value on its storage */
  int32_t prev_cap;
  int32_t rule_depth;
  int32_t engine_depth;    /* inside of_backward: recorded nodes are backward nodes */
  int32_t scope;           /* checkpointed segment being traced (of_trace_set_scope) */
  bool rule_bad;
  bool grad_was;
  int64_t seq_mark;        /* of_node_seq_next() after the last recorded op */
};

/* ---- maps ---- */
static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

static bool ptrmap_grow(ptrmap *m) {
  int64_t cap = m->cap ? m->cap * 2 : 256;
  void **k = calloc((size_t)cap, sizeof *k);
  int32_t *v = calloc((size_t)cap, sizeof *v);
  if (!k || !v) { free(k); free(v); return false; }
  for (int64_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    uint64_t j = mix((uint64_t)(uintptr_t)m->keys[i]) & (uint64_t)(cap - 1);
    while (k[j]) j = (j + 1) & (uint64_t)(cap - 1);
    k[j] = m->keys[i];
    v[j] = m->vals[i];
  }
  free(m->keys);
  free(m->vals);
  m->keys = k;
  m->vals = v;
  m->cap = cap;
  return true;
}

static int32_t ptrmap_get(const ptrmap *m, const void *key) {
  if (!m->cap) return -1;
  for (uint64_t j = mix((uint64_t)(uintptr_t)key) & (uint64_t)(m->cap - 1);;
       j = (j + 1) & (uint64_t)(m->cap - 1)) {
    if (m->keys[j] == key) return m->vals[j];
    if (!m->keys[j]) return -1;
  }
}

/* returns the slot's previous value or -1; -2 when out of memory */
static int32_t ptrmap_put(ptrmap *m, void *key, int32_t val) {
  if ((m->count + 1) * 2 > m->cap && !ptrmap_grow(m)) return -2;
  uint64_t j = mix((uint64_t)(uintptr_t)key) & (uint64_t)(m->cap - 1);
  while (m->keys[j] && m->keys[j] != key) j = (j + 1) & (uint64_t)(m->cap - 1);
  int32_t old = m->keys[j] ? m->vals[j] : -1;
  if (!m->keys[j]) m->count++;
  m->keys[j] = key;
  m->vals[j] = val;
  return old;
}

static bool sidmap_grow(sidmap *m) {
  int64_t cap = m->cap ? m->cap * 2 : 256;
  int64_t *k = calloc((size_t)cap, sizeof *k);
  int32_t *v = calloc((size_t)cap, sizeof *v);
  if (!k || !v) { free(k); free(v); return false; }
  for (int64_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    uint64_t j = mix((uint64_t)m->keys[i]) & (uint64_t)(cap - 1);
    while (k[j]) j = (j + 1) & (uint64_t)(cap - 1);
    k[j] = m->keys[i];
    v[j] = m->vals[i];
  }
  free(m->keys);
  free(m->vals);
  m->keys = k;
  m->vals = v;
  m->cap = cap;
  return true;
}

static int32_t sidmap_get(const sidmap *m, int64_t key) {
  if (!m->cap) return -1;
  for (uint64_t j = mix((uint64_t)key) & (uint64_t)(m->cap - 1);;
       j = (j + 1) & (uint64_t)(m->cap - 1)) {
    if (m->keys[j] == key) return m->vals[j];
    if (!m->keys[j]) return -1;
  }
}

static bool sidmap_put(sidmap *m, int64_t key, int32_t val) {
  if ((m->count + 1) * 2 > m->cap && !sidmap_grow(m)) return false;
  uint64_t j = mix((uint64_t)key) & (uint64_t)(m->cap - 1);
  while (m->keys[j] && m->keys[j] != key) j = (j + 1) & (uint64_t)(m->cap - 1);
  if (!m->keys[j]) m->count++;
  m->keys[j] = key;
  m->vals[j] = val;
  return true;
}

/* ---- node tags (activation checkpointing) ---- */
static void tag(of_trace *tr, int32_t ni) {
  of_gnode *n = &tr->g->nodes[ni];
  if (tr->engine_depth > 0) n->flags |= OF_GN_BACKWARD;
  else n->scope = tr->scope;
}

static void trace_engine(int32_t delta) {
  if (of_trace_tls) of_trace_tls->engine_depth += delta;
}

int32_t of_trace_set_scope(int32_t scope) {
  of_trace *tr = of_trace_tls;
  if (!tr) return 0;
  int32_t old = tr->scope;
  tr->scope = scope > 0 ? scope : 0;
  return old;
}

/* ---- values ---- */
static bool same_geometry(const of_gval *v, const of_tensor *t) {
  if (v->dtype != t->dtype || v->ndim != t->ndim || v->offset != t->offset) return false;
  for (int32_t i = 0; i < t->ndim; i++)
    if (v->shape[i] != t->shape[i] || v->strides[i] != t->strides[i]) return false;
  return true;
}

static of_status oom(void) { return of_fail(OF_ERR_OOM, "nn.Graph: out of memory while tracing"); }

static bool note_prev(of_trace *tr, int32_t vid, int32_t prev) {
  if (vid >= tr->prev_cap) {
    int32_t cap = tr->prev_cap ? tr->prev_cap * 2 : 256;
    while (cap <= vid) cap *= 2;
    int32_t *p = realloc(tr->prev_on_storage, sizeof *p * (size_t)cap);
    if (!p) return false;
    tr->prev_on_storage = p;
    tr->prev_cap = cap;
  }
  tr->prev_on_storage[vid] = prev;
  return true;
}

/* Makes vid the latest value of header t and of its storage. */
static of_status bind(of_trace *tr, of_tensor *t, int32_t vid) {
  int32_t prev = sidmap_get(&tr->storages, t->storage->id);
  if (!note_prev(tr, vid, prev)) return oom();
  if (!sidmap_put(&tr->storages, t->storage->id, vid)) return oom();
  if (ptrmap_put(&tr->tensors, t, vid) == -2) return oom();
  return OF_OK;
}

static int32_t new_value(of_trace *tr, int8_t kind, of_tensor *t, int32_t producer) {
  int32_t vid = of_graph_add_value(tr->g, kind, t);
  if (vid < 0) return -1;
  of_gval *v = &tr->g->vals[vid];
  v->sid = t->storage->id;
  v->producer = producer;
  return vid;
}

/* The value t currently is, or -1 when the tracer has not seen it. */
static int32_t find_value(of_trace *tr, of_tensor *t, int32_t *latest_on_storage) {
  of_graph *g = tr->g;
  int32_t vid = ptrmap_get(&tr->tensors, t);
  if (vid >= 0 && vid < g->nvals && g->vals[vid].sid == t->storage->id &&
      same_geometry(&g->vals[vid], t))
    return vid;
  int32_t s = sidmap_get(&tr->storages, t->storage->id);
  *latest_on_storage = s;
  for (int32_t v = s; v >= 0; v = tr->prev_on_storage[v])
    if (g->vals[v].kind != OF_GV_HANDLE && same_geometry(&g->vals[v], t)) return v;
  return -1;
}

static const char *op_name(int32_t op) {
  const of_opdef *d = of_op_def(op);
  return d ? d->name : "?";
}

/* Resolves an input tensor to a value, adding an external, an implicit view
 * or (inside a rule) a temporary stand-in. */
static of_status input_value(of_trace *tr, int32_t op, of_tensor *t, int32_t *out) {
  int32_t latest = -1;
  int32_t vid = find_value(tr, t, &latest);
  if (vid >= 0) {
    if (ptrmap_get(&tr->tensors, t) != vid && ptrmap_put(&tr->tensors, t, vid) == -2) return oom();
    *out = vid;
    return OF_OK;
  }
  of_graph *g = tr->g;
  if (latest >= 0) {   /* a view over a known storage */
    const of_gval *base = &g->vals[latest];
    if (base->dtype != t->dtype)
      return of_fail(OF_ERR_STATE, "nn.Graph: %s reads a %s view of a %s tensor; "
                     "reinterpreting storage is not supported", op_name(op), OF_DT(t),
                     of_dtype_name(base->dtype));
    a_alias a;
    memset(&a, 0, sizeof a);
    a.ndim = t->ndim;
    memcpy(a.shape, t->shape, sizeof a.shape);
    memcpy(a.strides, t->strides, sizeof a.strides);
    a.rel_offset = t->offset - base->offset;
    int32_t in = latest;
    int32_t ni = of_graph_add_node(g, OF_OPK_ALIAS, &a, sizeof a, &in, 1, 1, 0);
    if (ni < 0) return oom();
    tag(tr, ni);
    int32_t v = new_value(tr, OF_GV_INTERNAL, t, ni);
    if (v < 0) return oom();
    g->vals[v].root = g->vals[latest].root;
    g->nodes[ni].out[0] = v;
    OF_CHECK(bind(tr, t, v));
    *out = v;
    return OF_OK;
  }
  if (t->storage->id >= tr->first_sid) {
    if (tr->rule_depth == 0)
      return of_fail(OF_ERR_STATE, "nn.Graph: %s got a tensor %s (%s) that was made by an "
                     "operation without graph support while tracing build()", op_name(op),
                     OF_SHAPE_STR(t), OF_DT(t));
    tr->rule_bad = true;   /* the rule is rolled back and recorded opaque */
  }
  int32_t v = new_value(tr, OF_GV_EXTERNAL, t, -1);
  if (v < 0) return oom();
  of_tensor_retain(t);
  g->vals[v].ext = t;
  OF_CHECK(bind(tr, t, v));
  *out = v;
  return OF_OK;
}

static void release_outs(of_tensor **outs, int32_t n) {
  for (int32_t j = 0; j < n; j++)
    if (outs[j]) of_tensor_release(outs[j]);
}

/* Registers an op's result (or the new version of a tensor it wrote). */
static of_status output_value(of_trace *tr, of_tensor *t, int32_t node, int32_t version_of,
                              int32_t nr, int32_t *out) {
  of_graph *g = tr->g;
  int32_t v = new_value(tr, OF_GV_INTERNAL, t, node);
  if (v < 0) return oom();
  if (version_of >= 0) {
    g->vals[v].same = g->vals[version_of].same;
    g->vals[v].root = g->vals[version_of].root;
  } else {
    int32_t latest = sidmap_get(&tr->storages, t->storage->id);
    if (latest >= 0) g->vals[v].root = g->vals[latest].root;   /* a view */
  }
  OF_CHECK(bind(tr, t, v));
  /* remember which forward node owns the output's autograd node: a new
   * tensor's, or the new node of a tensor this op wrote in place (x:mul_(2)
   * under autograd; a node the tensor already had is older than the op) */
  if (t->grad_fn && nr >= 0 && (version_of < 0 || t->grad_fn->seq >= tr->seq_mark)) {
    int32_t had = ptrmap_get(&tr->nodes, t->grad_fn);
    if (had < 0) __atomic_add_fetch(&t->grad_fn->refcount, 1, __ATOMIC_RELAXED);
    if (ptrmap_put(&tr->nodes, t->grad_fn, node << 8 | (nr & 0xff)) == -2) return oom();
  }
  *out = v;
  return OF_OK;
}

of_status of_trace_record(int32_t op, const void *attrs, int32_t attr_size, of_tensor **ins,
                          int32_t nin, of_tensor **outs, int32_t nreal) {
  of_trace *tr = of_trace_tls;
  const of_opdef *d = of_op_def(op);
  of_status st = OF_OK;
  /* an op that handed back its input unchanged (contiguous, to_dtype to the
   * same dtype) adds nothing */
  if (nreal == 1 && nin >= 1 && outs[0] == ins[0] && !(d->flags & OF_OPF_INTO)) return OF_OK;
  int32_t mut[8], nmut = 0, nm = d->mutates ? d->mutates(attrs, nin, mut) : 0;
  for (int32_t m = 0; m < nm; m++)
    if (mut[m] < nin && ins[mut[m]]) mut[nmut++] = mut[m];
  int32_t in_v[OF_MAX_DIMS * 8];
  int32_t *inv = nin <= (int32_t)(sizeof in_v / sizeof *in_v) ? in_v : malloc(sizeof *inv * (size_t)nin);
  if (!inv) { release_outs(outs, nreal); return oom(); }
  for (int32_t k = 0; k < nin && st == OF_OK; k++) {
    inv[k] = -1;
    if (ins[k]) st = input_value(tr, op, ins[k], &inv[k]);
  }
  int32_t ni = -1;
  if (st == OF_OK) {
    ni = of_graph_add_node(tr->g, op, attrs, attr_size, inv, nin, nreal, nmut);
    if (ni < 0) st = oom();
    else tag(tr, ni);
  }
  if (st == OF_OK) {
    of_gnode *n = &tr->g->nodes[ni];
    /* inputs that require grad: a node kept for an opaque backward makes
     * the same ones require it when it runs again */
    for (int32_t k = 0; k < nin && k < 32; k++)
      if (ins[k] && ins[k]->requires_grad) n->needs |= 1u << k;
    for (int32_t j = 0; j < nreal; j++) n->out[j] = -1;
    for (int32_t j = 0; j < nreal && st == OF_OK; j++) {
      if (!outs[j]) continue;
      int32_t version_of = -1;
      for (int32_t k = 0; k < nin; k++)
        if (ins[k] == outs[j]) { version_of = inv[k]; break; }
      int32_t v;
      st = output_value(tr, outs[j], ni, version_of, j, &v);
      tr->g->nodes[ni].out[j] = st == OF_OK ? v : -1;
    }
    for (int32_t m = 0; m < nmut && st == OF_OK; m++) {
      n = &tr->g->nodes[ni];
      n->mut[m] = mut[m];
      int32_t v;
      st = output_value(tr, ins[mut[m]], ni, inv[mut[m]], -1, &v);
      tr->g->nodes[ni].out[nreal + m] = st == OF_OK ? v : -1;
    }
  }
  if (inv != in_v) free(inv);
  if (st != OF_OK) release_outs(outs, nreal);
  tr->seq_mark = of_node_seq_next();
  return st;
}

static of_status trace_constant(of_tensor *t) {
  of_trace *tr = of_trace_tls;
  if (tr->rule_depth > 0) {   /* a backward rule computed data itself: opaque */
    tr->rule_bad = true;
    return OF_OK;
  }
  int32_t v = new_value(tr, OF_GV_EXTERNAL, t, -1);
  if (v < 0) { of_tensor_release(t); return oom(); }
  of_tensor_retain(t);
  tr->g->vals[v].ext = t;
  tr->g->vals[v].is_const = true;
  of_status st = bind(tr, t, v);
  if (st != OF_OK) of_tensor_release(t);
  return st;
}

/* ---- rollback (an opaque rule) ---- */
static void rebuild_ptrmap(ptrmap *m, int32_t limit, bool nodes) {
  ptrmap old = *m;
  memset(m, 0, sizeof *m);
  for (int64_t i = 0; i < old.cap; i++) {
    if (!old.keys[i]) continue;
    int32_t v = old.vals[i];
    if ((nodes ? v >> 8 : v) < limit) {
      ptrmap_put(m, old.keys[i], v);   /* smaller than before: cannot fail but for OOM */
    } else if (nodes) {
      of_node_release((of_node *)old.keys[i]);
    }
  }
  free(old.keys);
  free(old.vals);
}

static void rollback(of_trace *tr, int32_t nn, int32_t nv) {
  of_graph *g = tr->g;
  for (int32_t i = nn; i < g->nnodes; i++) of_graph_node_free(&g->nodes[i]);
  g->nnodes = nn;
  for (int32_t v = nv; v < g->nvals; v++) {
    of_tensor_release(g->vals[v].ext);
    free(g->vals[v].name);
    free(g->vals[v].note);
  }
  /* storages: step back to the latest value made before the snapshot */
  for (int64_t i = 0; i < tr->storages.cap; i++) {
    if (!tr->storages.keys[i]) continue;
    int32_t v = tr->storages.vals[i];
    while (v >= nv) v = tr->prev_on_storage[v];
    tr->storages.vals[i] = v;   /* -1: forgotten (lookups then miss) */
  }
  g->nvals = nv;
  rebuild_ptrmap(&tr->tensors, nv, false);
  rebuild_ptrmap(&tr->nodes, nn, true);
}

/* ---- backward rules ---- */
static bool known(of_trace *tr, of_tensor *t) {
  int32_t latest = -1;
  if (find_value(tr, t, &latest) >= 0) return true;
  return latest >= 0;
}

static of_status record_opaque(of_trace *tr, of_node *n, of_tensor **gout, of_tensor **gin) {
  of_graph *g = tr->g;
  int32_t key = ptrmap_get(&tr->nodes, n);
  if (key < 0)
    return of_fail(OF_ERR_STATE, "nn.Graph: the backward rule %s cannot be recorded: its "
                   "forward op was not recorded as one graph op", n->def->name);
  int32_t fi = key >> 8, nr = key & 0xff;
  if (n->nin > OF_BACKWARD_MAX_IN || n->nout > 64)
    return of_fail(OF_ERR_STATE, "nn.Graph: backward rule %s has too many inputs (%d) to be "
                   "recorded as one node", n->def->name, (int)n->nin);
  of_gnode *f = &g->nodes[fi];
  if (f->nin > 32)
    return of_fail(OF_ERR_STATE, "nn.Graph: the backward rule %s cannot be recorded: its "
                   "forward op has more than 32 inputs", n->def->name);
  int32_t handle = -1;
  if (f->flags & OF_GN_CAPTURE) {
    handle = f->out[f->nout - 1];
  } else {
    int32_t *no = realloc(f->out, sizeof *no * (size_t)(f->nout + 1));
    if (!no) return oom();
    f->out = no;
    handle = of_graph_add_value(g, OF_GV_HANDLE, NULL);
    if (handle < 0) return oom();
    f = &g->nodes[fi];
    f->out[f->nout++] = handle;
    f->flags |= OF_GN_CAPTURE;
    f->handle_nr = nr;
    /* which of the node's inputs and results the autograd node holds on to
     * until its backward runs (the in-place pass must leave them alone) */
    for (int32_t s = 0; s < OF_NODE_MAX_SAVED; s++) {
      const of_saved *sv = &n->saved[s];
      if (!sv->t) continue;
      if (sv->output_nr >= 0 && sv->output_nr < 32) f->keep_out |= 1u << sv->output_nr;
      for (int32_t k = 0; k < f->nin && k < 32; k++)
        if (f->in[k] >= 0 && g->vals[f->in[k]].sid == sv->t->storage->id) f->keep_in |= 1u << k;
      for (int32_t j = 0; j < f->nreal && j < 32; j++)
        if (f->out[j] >= 0 && g->vals[f->out[j]].sid == sv->t->storage->id) f->keep_out |= 1u << j;
    }
    g->vals[handle].producer = fi;
    if (!note_prev(tr, handle, -1)) return oom();
  }
  a_backward a;
  memset(&a, 0, sizeof a);
  snprintf(a.name, sizeof a.name, "%s", n->def->name);
  a.nin = n->nin;
  a.nout = n->nout;
  int32_t nres = 0;
  for (int32_t k = 0; k < n->nin; k++)
    if (gin[k]) a.in_pos[nres++] = k;
  int32_t ins[65];
  ins[0] = handle;
  for (int32_t j = 0; j < n->nout; j++) {
    ins[1 + j] = -1;
    if (gout[j]) OF_CHECK(input_value(tr, OF_OPK_BACKWARD, gout[j], &ins[1 + j]));
  }
  int32_t bi = of_graph_add_node(g, OF_OPK_BACKWARD, &a, sizeof a, ins, 1 + n->nout, nres, 0);
  if (bi < 0) return oom();
  tag(tr, bi);
  for (int32_t r = 0; r < nres; r++) {
    of_tensor *t = gin[a.in_pos[r]];
    int32_t version_of = -1;
    for (int32_t j = 0; j < n->nout; j++)
      if (gout[j] == t) version_of = ins[1 + j];
    int32_t v = -1;
    OF_CHECK(output_value(tr, t, bi, version_of, -1, &v));
    g->nodes[bi].out[r] = v;
  }
  return OF_OK;
}

static of_status trace_backward(of_node *n, of_tensor **gout, of_tensor **gin) {
  of_trace *tr = of_trace_tls;
  of_graph *g = tr->g;
  int32_t nn = g->nnodes, nv = g->nvals;
  bool bad_before = tr->rule_bad;
  tr->rule_bad = false;
  tr->rule_depth++;
  of_status st = n->def->backward(n, gout, gin);
  tr->rule_depth--;
  bool bad = tr->rule_bad;
  tr->rule_bad = bad_before;
  if (st != OF_OK) return st;
  for (int32_t k = 0; !bad && k < n->nin; k++)
    if (gin[k] && !known(tr, gin[k])) bad = true;
  if (!bad) return OF_OK;
  rollback(tr, nn, nv);
  return record_opaque(tr, n, gout, gin);
}

/* C code reading tensor values while tracing: inside a backward rule the
 * rule becomes opaque (its result depends on data the trace cannot see);
 * elsewhere it is the data-dependent control flow nn.Graph cannot follow. */
static of_status trace_data_read(const of_tensor *t) {
  of_trace *tr = of_trace_tls;
  if (tr->rule_depth > 0) {
    tr->rule_bad = true;
    return OF_OK;
  }
  return of_fail(OF_ERR_STATE, "nn.Graph: data-dependent control flow on tensor values is not "
                 "supported while tracing (a tensor %s was read); compute it outside build or "
                 "use flow.where", OF_SHAPE_STR(t));
}

of_status of_trace_note(of_tensor *t, const char *text) {
  of_trace *tr = of_trace_tls;
  if (!tr || !t || !text) return OF_OK;
  of_graph *g = tr->g;
  int32_t latest = -1;
  int32_t vid = find_value(tr, t, &latest);
  if (vid < 0) return OF_OK;
  /* the value and its earlier versions (an external parameter, then each
   * in-place update of it) */
  for (int32_t v = vid; v >= 0; v = tr->prev_on_storage[v]) {
    of_gval *x = &g->vals[v];
    if (x->kind == OF_GV_HANDLE || !same_geometry(x, t)) continue;
    if (x->note && v != vid) continue;
    size_t n = strlen(text);
    char *s = malloc(n + 1);
    if (!s) return oom();
    memcpy(s, text, n + 1);
    free(x->note);
    x->note = s;
  }
  return OF_OK;
}

/* ---- begin / end ---- */
int32_t of_tracing(void) { return of_trace_tls != NULL; }

static bool trace_user_level(void) {
  const of_trace *tr = of_trace_tls;
  return tr && of_dispatch_depth == 0 && tr->rule_depth == 0 && tr->engine_depth == 0;
}

/* what the layers below reach the tracer through (core/dispatch) */
static const of_dispatch_hooks trace_hooks = {
  of_trace_record, trace_constant, trace_data_read, trace_backward, trace_engine,
  trace_user_level,
};

/* A graph computes on one device: the non-CPU device of its values (CPU
 * tensors may join as eager ops allow: 0-d scalars, host-side constants
 * that ops copy themselves). Two accelerators in one trace are an error. */
static of_status graph_device(of_graph *g) {
  g->device = OF_CPU;
  int32_t first = -1;
  for (int32_t v = 0; v < g->nvals; v++) {
    const of_gval *x = &g->vals[v];
    if (x->kind == OF_GV_HANDLE || x->device == OF_CPU) continue;
    if (first < 0) {
      first = v;
      g->device = x->device;
    } else if (x->device != g->device) {
      char a[16], b[16];
      return of_fail(OF_ERR_DEVICE, "nn.Graph: build() used tensors on %s and %s; a graph runs "
                     "on one device (move the module and the inputs to one of them)",
                     of_device_str(g->device, a), of_device_str(x->device, b));
    }
  }
  return OF_OK;
}

static void trace_free(of_trace *tr) {
  for (int64_t i = 0; i < tr->nodes.cap; i++)
    if (tr->nodes.keys[i]) of_node_release((of_node *)tr->nodes.keys[i]);
  free(tr->nodes.keys);
  free(tr->nodes.vals);
  free(tr->tensors.keys);
  free(tr->tensors.vals);
  free(tr->storages.keys);
  free(tr->storages.vals);
  free(tr->prev_on_storage);
  free(tr);
}

of_status of_trace_begin(of_tensor **inputs, int32_t n) {
  if (of_trace_tls)
    return of_fail(OF_ERR_STATE, "nn.Graph: already tracing a graph on this thread (a graph "
                   "called inside another graph's build?)");
  if (n < 0 || (n > 0 && !inputs)) return of_fail(OF_ERR_ARG, "nn.Graph: bad inputs");
  of_tensor *probe;
  OF_CHECK(of_tensor_new(NULL, 0, OF_FLOAT32, OF_CPU, &probe));
  of_trace *tr = calloc(1, sizeof *tr);
  of_graph *g = of_graph_new_empty();
  if (!tr || !g) {
    free(tr);
    free(g);
    of_tensor_release(probe);
    return oom();
  }
  tr->first_sid = probe->storage->id;
  tr->seq_mark = of_node_seq_next();
  of_tensor_release(probe);
  tr->g = g;
  g->inputs = calloc((size_t)(n ? n : 1), sizeof *g->inputs);
  g->ninputs = n;
  of_status st = g->inputs ? OF_OK : oom();
  for (int32_t i = 0; i < n && st == OF_OK; i++) {
    if (!inputs[i]) { st = of_fail(OF_ERR_ARG, "nn.Graph: input %d is nil", (int)i + 1); break; }
    int32_t v = new_value(tr, OF_GV_INPUT, inputs[i], -1);
    if (v < 0) { st = oom(); break; }
    g->vals[v].index = i;
    g->inputs[i] = v;
    st = bind(tr, inputs[i], v);
  }
  if (st != OF_OK) {
    of_graph_release(g);
    trace_free(tr);
    return st;
  }
  of_dispatch_install(&trace_hooks);
  of_dispatch_depth = 0;
  of_dispatch_set_tracer(tr);
  return OF_OK;
}

void of_trace_abort(void) {
  of_trace *tr = of_trace_tls;
  if (!tr) return;
  of_dispatch_set_tracer(NULL);
  of_graph_release(tr->g);
  trace_free(tr);
}

of_status of_trace_end(of_tensor **outputs, int32_t n, of_graph **out) {
  of_trace *tr = of_trace_tls;
  if (!tr) return of_fail(OF_ERR_STATE, "nn.Graph: not tracing");
  of_graph *g = tr->g;
  of_status st = OF_OK;
  g->outputs = calloc((size_t)(n ? n : 1), sizeof *g->outputs);
  g->noutputs = n;
  if (!g->outputs) st = oom();
  for (int32_t i = 0; i < n && st == OF_OK; i++) {
    if (!outputs[i]) { st = of_fail(OF_ERR_ARG, "nn.Graph: output %d is nil", (int)i + 1); break; }
    st = input_value(tr, -1, outputs[i], &g->outputs[i]);
    if (st != OF_OK)
      st = of_fail(OF_ERR_STATE, "nn.Graph: build() returned a tensor %s (output %d) that "
                   "was not computed by recorded graph ops", OF_SHAPE_STR(outputs[i]),
                   (int)i + 1);
  }
  of_dispatch_set_tracer(NULL);
  trace_free(tr);
  if (st == OF_OK) st = graph_device(g);
  if (st != OF_OK) {
    of_graph_release(g);
    return st;
  }
  *out = g;
  return OF_OK;
}
