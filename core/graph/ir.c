/* ir.c -- building, inspecting and printing the graph IR. */
#include "ops.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

of_graph *of_graph_new_empty(void) {
  of_graph *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  pthread_mutex_init(&g->lock, NULL);
  pthread_mutex_init(&g->cg_lock, NULL);
  pthread_mutex_init(&g->memo_lock, NULL);
  const char *dbg = getenv("OF_DEBUG_PASS");
  g->debug = dbg && *dbg && strcmp(dbg, "0") != 0 ? 2 : 0;
  const char *prof = getenv("OF_GRAPH_PROFILE");
  g->profile = prof && *prof && strcmp(prof, "0") != 0;
  return g;
}

int32_t of_graph_add_value(of_graph *g, int8_t kind, const of_tensor *t) {
  if (g->nvals == g->cap_vals) {
    int32_t cap = g->cap_vals ? g->cap_vals * 2 : 64;
    of_gval *v = realloc(g->vals, sizeof *v * (size_t)cap);
    if (!v) return -1;
    g->vals = v;
    g->cap_vals = cap;
  }
  int32_t id = g->nvals++;
  of_gval *v = &g->vals[id];
  memset(v, 0, sizeof *v);
  v->kind = kind;
  v->producer = -1;
  v->root = v->same = id;
  v->index = -1;
  if (t) {
    v->dtype = t->dtype;
    v->ndim = t->ndim;
    memcpy(v->shape, t->shape, sizeof v->shape);
    memcpy(v->strides, t->strides, sizeof v->strides);
    v->offset = t->offset;
    v->device = t->storage->device;
  }
  return id;
}

int32_t of_graph_add_node(of_graph *g, int32_t op, const void *attrs, int32_t attr_size,
                          const int32_t *ins, int32_t nin, int32_t nreal, int32_t nmut) {
  if (g->nnodes == g->cap_nodes) {
    int32_t cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
    of_gnode *n = realloc(g->nodes, sizeof *n * (size_t)cap);
    if (!n) return -1;
    g->nodes = n;
    g->cap_nodes = cap;
  }
  of_gnode *n = &g->nodes[g->nnodes];
  memset(n, 0, sizeof *n);
  n->op = op;
  n->nin = nin;
  n->nreal = nreal;
  n->nmut = nmut;
  n->nout = nreal + nmut;
  n->in = malloc(sizeof *n->in * (size_t)(nin ? nin : 1));
  n->out = malloc(sizeof *n->out * (size_t)(n->nout + 1));
  n->mut = malloc(sizeof *n->mut * (size_t)(nmut ? nmut : 1));
  n->attrs = malloc((size_t)(attr_size ? attr_size : 1));
  if (!n->in || !n->out || !n->mut || !n->attrs) {
    of_graph_node_free(n);
    return -1;
  }
  if (nin) memcpy(n->in, ins, sizeof *n->in * (size_t)nin);
  for (int32_t j = 0; j < n->nout; j++) n->out[j] = -1;
  if (attr_size) memcpy(n->attrs, attrs, (size_t)attr_size);
  n->attr_size = attr_size;
  return g->nnodes++;
}

void of_graph_node_free(of_gnode *n) {
  free(n->in);
  free(n->out);
  free(n->mut);
  free(n->attrs);
  n->in = n->out = n->mut = NULL;
  n->attrs = NULL;
}

static void plan_free(of_graph *g) {
  of_graph_memo_free(g);        /* node indices changed */
  of_arena_release(g->arena);   /* the node order changed: laid out again */
  g->arena = NULL;
  free(g->prof);
  g->prof = NULL;
  free(g->free_idx);
  free(g->free_start);
  g->free_idx = g->free_start = NULL;
  g->planned = false;
}

void of_graph_compact(of_graph *g) {
  int32_t k = 0;
  for (int32_t i = 0; i < g->nnodes; i++) {
    if (g->nodes[i].dead) {
      of_graph_node_free(&g->nodes[i]);
      continue;
    }
    g->nodes[k++] = g->nodes[i];
  }
  g->nnodes = k;
  for (int32_t v = 0; v < g->nvals; v++) g->vals[v].producer = -1;
  for (int32_t i = 0; i < g->nnodes; i++)
    for (int32_t j = 0; j < g->nodes[i].nout; j++)
      if (g->nodes[i].out[j] >= 0) g->vals[g->nodes[i].out[j]].producer = i;
  plan_free(g);
}

void of_graph_release(of_graph *g) {
  if (!g) return;
  of_graph_release(g->variant);
  for (int32_t i = 0; i < g->nnodes; i++) of_graph_node_free(&g->nodes[i]);
  for (int32_t v = 0; v < g->nvals; v++) {
    if (g->vals[v].kind == OF_GV_EXTERNAL) of_tensor_release(g->vals[v].ext);
    free(g->vals[v].name);
    free(g->vals[v].note);
  }
  of_graph_cuda_graph_drop(g);
  plan_free(g);
  free(g->nodes);
  free(g->vals);
  free(g->inputs);
  free(g->outputs);
  free(g->text);
  pthread_mutex_destroy(&g->lock);
  pthread_mutex_destroy(&g->cg_lock);
  pthread_mutex_destroy(&g->memo_lock);
  free(g);
}

int64_t of_gval_bytes(const of_gval *v) {
  if (v->kind == OF_GV_HANDLE) return 0;
  return of_shape_numel(v->shape, v->ndim) * of_dtype_size(v->dtype);
}

bool of_gval_contiguous(const of_gval *v) {
  int64_t s = 1;
  for (int32_t i = v->ndim - 1; i >= 0; i--) {
    if (v->shape[i] != 1 && v->strides[i] != s) return false;
    s *= v->shape[i];
  }
  return true;
}

/* the node producing internal value v, its only reader being one node, when
 * that node is a plain one-result op of kind op; NULL otherwise */
of_gnode *of_graph_sole(of_graph *g, const int32_t *uses, int32_t v, int32_t op) {
  if (v < 0 || uses[v] != 1 || g->vals[v].producer < 0) return NULL;
  const of_gval *x = &g->vals[v];
  if (x->kind != OF_GV_INTERNAL || x->root != v || x->same != v) return NULL;
  of_gnode *n = &g->nodes[x->producer];
  if (n->dead || n->op != op || n->nreal != 1 || n->nmut || n->nout != 1 ||
      (n->flags & OF_GN_CAPTURE))
    return NULL;
  return n;
}

void of_gval_set_contiguous(of_gval *v, const of_gval *like) {
  v->ndim = like->ndim;
  int64_t st = 1;
  for (int32_t d = like->ndim - 1; d >= 0; d--) {
    v->shape[d] = like->shape[d];
    v->strides[d] = st;
    st *= like->shape[d];
  }
  v->offset = 0;
}

int32_t *of_graph_use_counts(const of_graph *g) {
  int32_t *uses = calloc((size_t)(g->nvals ? g->nvals : 1), sizeof *uses);
  if (!uses) return NULL;
  for (int32_t i = 0; i < g->nnodes; i++) {
    const of_gnode *n = &g->nodes[i];
    if (n->dead) continue;
    for (int32_t k = 0; k < n->nin; k++)
      if (n->in[k] >= 0) uses[n->in[k]]++;
  }
  for (int32_t o = 0; o < g->noutputs; o++) uses[g->outputs[o]]++;
  return uses;
}

int32_t of_node_writes(const of_graph *g, const of_gnode *n, int32_t *roots, int32_t cap) {
  int32_t c = 0;
  for (int32_t m = 0; m < n->nmut && c < cap; m++) {
    int32_t v = n->in[n->mut[m]];
    if (v >= 0) roots[c++] = g->vals[v].root;
  }
  if (n->op == OF_OPK_BACKWARD || n->op == OF_OPK_ALIAS) return c;
  for (int32_t j = 0; j < n->nreal && c < cap; j++) {
    int32_t v = n->out[j];
    if (v >= 0 && g->vals[v].same != v) roots[c++] = g->vals[v].root;
  }
  return c;
}

bool of_graph_written_between(const of_graph *g, int32_t r, int32_t from, int32_t to) {
  int32_t roots[16];
  for (int32_t i = from + 1; i < to; i++) {
    const of_gnode *n = &g->nodes[i];
    if (n->dead) continue;
    int32_t c = of_node_writes(g, n, roots, 16);
    for (int32_t k = 0; k < c; k++)
      if (roots[k] == r) return true;
  }
  return false;
}

bool *of_graph_written_roots(const of_graph *g) {
  bool *w = calloc((size_t)(g->nvals ? g->nvals : 1), sizeof *w);
  if (!w) return NULL;
  int32_t roots[16];
  for (int32_t i = 0; i < g->nnodes; i++) {
    if (g->nodes[i].dead) continue;
    int32_t c = of_node_writes(g, &g->nodes[i], roots, 16);
    for (int32_t k = 0; k < c; k++) w[roots[k]] = true;
  }
  return w;
}

void of_graph_note_pass(of_graph *g, const char *name, int32_t removed) {
  size_t len = strlen(g->passes);
  snprintf(g->passes + len, sizeof g->passes - len, "%s%s(%d)", len ? " " : "", name,
           (int)removed);
}

/* ---- printing ---- */
typedef struct {
  char *buf;
  size_t len, cap;
  bool oom;
} sbuf;

static void sb_printf(sbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *s, const char *fmt, ...) {
  if (s->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s->buf + s->len, s->cap - s->len, fmt, ap);
    va_end(ap);
    if (n < 0) { s->oom = true; return; }
    if (s->len + (size_t)n < s->cap) { s->len += (size_t)n; return; }
    size_t cap = (s->cap ? s->cap * 2 : 4096) + (size_t)n;
    char *b = realloc(s->buf, cap);
    if (!b) { s->oom = true; return; }
    s->buf = b;
    s->cap = cap;
  }
}

static const char *dt_short(of_dtype dt) {
  static const char *names[] = {"b8", "u8", "i8", "i32", "i64", "f16", "bf16", "f32", "f64"};
  return dt >= 0 && dt < OF_NUM_DTYPES ? names[dt] : "?";
}

static void sb_type(sbuf *s, const of_gval *v) {
  if (v->kind == OF_GV_HANDLE) { sb_printf(s, "autograd-node"); return; }
  sb_printf(s, "%s[", dt_short(v->dtype));
  for (int32_t i = 0; i < v->ndim; i++) sb_printf(s, "%s%lld", i ? "," : "", (long long)v->shape[i]);
  sb_printf(s, "]");
  if (!of_gval_contiguous(v)) sb_printf(s, "{view}");
  if (v->note) sb_printf(s, " <%s>", v->note);
}

const char *of_graph_text(of_graph *g, int32_t verbose) {
  sbuf s = {0};
  int32_t next = 0, nint = 0;
  int64_t ext_bytes = 0;
  for (int32_t v = 0; v < g->nvals; v++) {
    if (g->vals[v].kind == OF_GV_EXTERNAL) { next++; ext_bytes += of_gval_bytes(&g->vals[v]); }
    if (g->vals[v].kind == OF_GV_INTERNAL) nint++;
  }
  int32_t live = 0;
  for (int32_t i = 0; i < g->nnodes; i++) live += !g->nodes[i].dead;
  sb_printf(&s, "nn.Graph IR: %d inputs, %d outputs, %d nodes, %d values (%d external, "
            "%.1f KiB)\n  passes: %s\n", (int)g->ninputs, (int)g->noutputs, (int)live,
            (int)g->nvals, (int)next, (double)ext_bytes / 1024, g->passes[0] ? g->passes : "none");
  if (g->prof) {
    double total = 0;
    for (int32_t i = 0; i < g->nnodes; i++) total += g->prof[i];
    sb_printf(&s, "  profile: %.3f ms per run (sum of each node's fastest time)\n", total);
  }
  if (g->planned)
    sb_printf(&s, "  memory: planned peak %.1f KiB of internal values (%.1f KiB if none were "
              "freed); arena %.1f KiB%s\n", (double)g->planned_peak / 1024,
              (double)g->eager_bytes / 1024, (double)of_arena_bytes(g->arena) / 1024,
              g->arena && of_arena_bytes(g->arena) ? "" : " (laid out after the first run)");
  if (verbose) {
    for (int32_t i = 0; i < g->ninputs; i++) {
      sb_printf(&s, "  input %%%d: ", (int)g->inputs[i]);
      sb_type(&s, &g->vals[g->inputs[i]]);
      sb_printf(&s, "\n");
    }
    if (verbose > 1) {
      for (int32_t v = 0; v < g->nvals; v++) {
        const of_gval *x = &g->vals[v];
        if (x->kind != OF_GV_EXTERNAL) continue;
        sb_printf(&s, "  %s %%%d: ", x->is_const ? "const" : "extern", (int)v);
        sb_type(&s, x);
        if (x->name) sb_printf(&s, " \"%s\"", x->name);
        sb_printf(&s, "\n");
      }
    }
    for (int32_t i = 0; i < g->nnodes; i++) {
      const of_gnode *n = &g->nodes[i];
      if (n->dead) continue;
      const of_opdef *d = of_op_def(n->op);
      sb_printf(&s, "  #%-3d ", (int)i);
      for (int32_t j = 0; j < n->nout; j++)
        sb_printf(&s, "%s%%%d", j ? ", " : "", (int)n->out[j]);
      sb_printf(&s, "%s%s(", n->nout ? " = " : "", d ? d->name : "?");
      for (int32_t k = 0; k < n->nin; k++) {
        if (n->in[k] < 0) sb_printf(&s, "%snil", k ? ", " : "");
        else sb_printf(&s, "%s%%%d", k ? ", " : "", (int)n->in[k]);
      }
      sb_printf(&s, ")");
      char attr[256] = {0};
      if (d && d->describe && n->attrs) d->describe(n->attrs, attr, sizeof attr);
      if (attr[0]) sb_printf(&s, " {%s}", attr);
      if (n->flags & OF_GN_CAPTURE) sb_printf(&s, " +autograd");
      if (g->prof && g->prof[i] > 0) sb_printf(&s, " [%.3f ms]", g->prof[i]);
      if (n->nreal > 0 && n->out[0] >= 0) {
        sb_printf(&s, " : ");
        sb_type(&s, &g->vals[n->out[0]]);
      }
      for (int32_t m = 0; m < n->nmut; m++) sb_printf(&s, " writes %%%d", (int)n->in[n->mut[m]]);
      sb_printf(&s, "\n");
    }
    sb_printf(&s, "  outputs:");
    for (int32_t o = 0; o < g->noutputs; o++) sb_printf(&s, " %%%d", (int)g->outputs[o]);
    sb_printf(&s, "\n");
  }
  if (s.oom) {
    free(s.buf);
    return "nn.Graph: out of memory printing the IR";
  }
  free(g->text);
  g->text = s.buf;
  return g->text ? g->text : "";
}

void of_graph_debug_print(of_graph *g, const char *when) {
  if (!g->debug) return;
  int32_t r;
  if (!g->planned && of_pass_plan(g, &r) != OF_OK) of_clear_error();   /* for the memory line */
  fprintf(stderr, "---- %s ----\n%s", when, of_graph_text(g, g->debug));
}
