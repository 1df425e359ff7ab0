/* exec.c -- running a graph: the pass pipeline, the executor and the
 * public graph API (oneflow.h, "nn.Graph").
 *
 * The executor walks the live nodes in order with one slot per value.
 * Inputs and externals are borrowed; every other slot owns its tensor (or,
 * for a CAPTURE node's handle, its autograd node) and is released right
 * after its last reader (the plan, passes/plan.c). Grad mode is off while a
 * graph runs: the recorded backward nodes are ordinary ops. */
#include "ops.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* ---- invoking one node ---- */
static of_status no_node(const of_gnode *n, const char *what) {
  const of_opdef *d = of_op_def(n->op);
  return of_fail(OF_ERR_STATE, "nn.Graph: %s: %s", d ? d->name : "?", what);
}

of_status of_graph_invoke(of_graph *g, of_gnode *n, of_tensor **ins, void **outs) {
  (void)g;
  const of_opdef *d = of_op_def(n->op);
  if (!d) return of_fail(OF_ERR_ARG, "nn.Graph: unknown op %d", (int)n->op);
  for (int32_t j = 0; j < n->nout; j++) outs[j] = NULL;
  if (!(n->flags & OF_GN_CAPTURE)) return d->invoke(n, ins, outs);
  /* keep the op's autograd node for the opaque backward node: inputs that
   * needed grad when tracing require it now, just for this call */
  bool made[32] = {0};
  for (int32_t k = 0; k < n->nin && k < 32; k++) {
    of_tensor *t = ins[k];
    if (((n->needs >> k) & 1) && t && !t->requires_grad && of_dtype_is_floating(t->dtype)) {
      t->requires_grad = true;
      made[k] = true;
    }
  }
  int32_t was = of_is_grad_enabled();
  of_set_grad_enabled(1);
  of_status st = d->invoke(n, ins, outs);
  of_set_grad_enabled(was);
  for (int32_t k = 0; k < n->nin && k < 32; k++)
    if (made[k]) ins[k]->requires_grad = false;
  if (st != OF_OK) return st;
  of_tensor *h = n->handle_nr >= 0 && n->handle_nr < n->nreal ? outs[n->handle_nr] : NULL;
  of_node *an = h ? h->grad_fn : NULL;
  if (!an) {
    for (int32_t j = 0; j < n->nreal; j++) of_tensor_release(outs[j]);
    return no_node(n, "no autograd node was made at run time for its backward");
  }
  __atomic_add_fetch(&an->refcount, 1, __ATOMIC_RELAXED);
  /* the results carry no history; the node points at nothing upstream (the
   * graph routes the grads itself) */
  for (int32_t j = 0; j < n->nreal; j++) {
    of_tensor *o = outs[j];
    if (!o) continue;
    if (o->grad_fn) of_node_release(o->grad_fn);
    o->grad_fn = NULL;
    o->requires_grad = false;
  }
  for (int32_t k = 0; k < an->nin; k++) {
    if (an->next[k].node) of_node_release(an->next[k].node);
    an->next[k].node = NULL;
  }
  outs[n->nout - 1] = an;
  return OF_OK;
}

of_status of_backward_invoke(of_gnode *n, of_tensor **ins, void **outs) {
  const a_backward *a = n->attrs;
  of_node *an = (of_node *)(void *)ins[0];
  if (!an) return no_node(n, "missing autograd node");
  if (a->nin != an->nin || a->nout != an->nout || n->nin != 1 + an->nout || n->nreal > an->nin ||
      n->nreal > OF_BACKWARD_MAX_IN)
    return no_node(n, "autograd node does not match the record");
  of_tensor **gi = calloc((size_t)(an->nin ? an->nin : 1), sizeof *gi);
  if (!gi) return of_fail(OF_ERR_OOM, "nn.Graph: out of memory");
  of_status st = an->def->backward(an, ins + 1, gi);
  for (int32_t r = 0; st == OF_OK && r < n->nreal; r++) {
    int32_t k = a->in_pos[r];
    if (k < 0 || k >= an->nin || !gi[k]) {
      st = no_node(n, "the backward rule gave no grad where it did when tracing");
      break;
    }
    outs[r] = gi[k];
    gi[k] = NULL;
  }
  if (st != OF_OK)
    for (int32_t r = 0; r < n->nreal; r++) { of_tensor_release(outs[r]); outs[r] = NULL; }
  for (int32_t k = 0; k < an->nin; k++) of_tensor_release(gi[k]);
  free(gi);
  return st;
}

/* ---- the executor ---- */
static void release_slot(const of_graph *g, int32_t v, void *p) {
  if (!p) return;
  if (g->vals[v].kind == OF_GV_HANDLE) of_node_release(p);
  else of_tensor_release(p);
}

static bool meta_matches(const of_gval *v, const of_tensor *t) {
  if (v->dtype != t->dtype || v->ndim != t->ndim) return false;
  for (int32_t i = 0; i < t->ndim; i++)
    if (v->shape[i] != t->shape[i]) return false;
  return true;
}

of_status of_graph_exec(of_graph *g, of_tensor **inputs, int32_t nin, of_tensor **outputs,
                        int32_t nout, bool check_inputs) {
  if (nin != g->ninputs)
    return of_fail(OF_ERR_ARG, "nn.Graph: the graph takes %d inputs, %d given", (int)g->ninputs,
                   (int)nin);
  if (nout != g->noutputs)
    return of_fail(OF_ERR_ARG, "nn.Graph: the graph has %d outputs, room for %d given",
                   (int)g->noutputs, (int)nout);
  if (!g->planned) {
    int32_t r;
    OF_CHECK(of_pass_plan(g, &r));
  }
  if (!g->prof && g->profile) g->prof = calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *g->prof);
  if (g->busy)
    return of_fail(OF_ERR_STATE, "nn.Graph: the graph is already running (a graph called from "
                   "inside itself or from two threads)");
  void **slot = calloc((size_t)(g->nvals ? g->nvals : 1), sizeof *slot);
  bool *own = calloc((size_t)(g->nvals ? g->nvals : 1), sizeof *own);
  if (!slot || !own) {
    free(slot);
    free(own);
    return of_fail(OF_ERR_OOM, "nn.Graph: out of memory");
  }
  of_status st = OF_OK;
  for (int32_t i = 0; i < nin && st == OF_OK; i++) {
    const of_gval *v = &g->vals[g->inputs[i]];
    of_tensor *t = inputs[i];
    if (!t) { st = of_fail(OF_ERR_ARG, "nn.Graph: input %d is nil", (int)i + 1); break; }
    if (check_inputs && !meta_matches(v, t)) {
      char want[96];
      of_shape_str(v->shape, v->ndim, want, sizeof want);
      st = of_fail(OF_ERR_SHAPE, "nn.Graph: input %d is %s %s, the graph was compiled for %s %s",
                   (int)i + 1, OF_SHAPE_STR(t), OF_DT(t), want, of_dtype_name(v->dtype));
      break;
    }
    if (!of_tensor_is_contiguous(t) && of_gval_contiguous(v)) {
      of_tensor *c;
      st = of_contiguous_data(t, &c);
      if (st == OF_OK) { slot[g->inputs[i]] = c; own[g->inputs[i]] = true; }
    } else {
      slot[g->inputs[i]] = t;
    }
  }
  for (int32_t v = 0; v < g->nvals; v++)
    if (g->vals[v].kind == OF_GV_EXTERNAL) slot[v] = g->vals[v].ext;
  int32_t was = of_is_grad_enabled(), amp_was = of_amp_tls;
  of_set_grad_enabled(0);
  of_amp_tls = 0;   /* the graph's casts are nodes already */
  g->busy = 1;
  if (!g->arena && !g->no_arena) {   /* first run */
    const char *conc = getenv("OF_GRAPH_CONCURRENCY");
    if (conc && g->concurrency == 0) g->concurrency = atoi(conc);
    const char *env = getenv("OF_GRAPH_ARENA");
    g->no_arena = env && strcmp(env, "0") == 0;
    if (!g->no_arena) g->arena = of_arena_new();
  }
  bool waves = g->concurrency >= 2 && !g->prof;
  if (!waves) of_arena_begin(g->arena);   /* workers' allocations would not follow the record */
  of_tensor *ibuf_small[16], **ibuf = ibuf_small;
  void *obuf_small[16], **obuf = obuf_small;
  int32_t icap = 16, ocap = 16;
  if (waves && st == OF_OK) st = of_graph_exec_waves(g, slot, own, g->concurrency);
  for (int32_t i = 0; !waves && i < g->nnodes && st == OF_OK; i++) {
    of_gnode *n = &g->nodes[i];
    if (n->dead) continue;
    if (n->nin > icap || n->nout > ocap) {
      if (ibuf != ibuf_small) free(ibuf);
      if (obuf != obuf_small) free(obuf);
      icap = n->nin > icap ? n->nin : icap;
      ocap = n->nout > ocap ? n->nout : ocap;
      ibuf = malloc(sizeof *ibuf * (size_t)icap);
      obuf = malloc(sizeof *obuf * (size_t)ocap);
      if (!ibuf || !obuf) {
        free(ibuf != ibuf_small ? ibuf : NULL);
        free(obuf != obuf_small ? obuf : NULL);
        ibuf = ibuf_small;
        obuf = obuf_small;
        icap = ocap = 16;
        st = of_fail(OF_ERR_OOM, "nn.Graph: out of memory");
        break;
      }
    }
    for (int32_t k = 0; k < n->nin; k++) {
      int32_t v = n->in[k];
      ibuf[k] = v >= 0 ? slot[v] : NULL;
      if (v >= 0 && !slot[v]) st = no_node(n, "an input was not computed (bad plan or file)");
    }
    if (st != OF_OK) break;
    struct timespec t0, t1;
    if (g->prof) clock_gettime(CLOCK_MONOTONIC, &t0);
    st = of_graph_invoke(g, n, ibuf, obuf);
    if (g->prof) {
      clock_gettime(CLOCK_MONOTONIC, &t1);
      double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
      if (g->prof[i] == 0 || ms < g->prof[i]) g->prof[i] = ms;   /* fastest run */
    }
    if (st != OF_OK) break;
    for (int32_t j = 0; j < n->nreal; j++) {
      int32_t v = n->out[j];
      if (v >= 0) {
        if (!obuf[j]) { st = no_node(n, "a result is missing"); continue; }
        release_slot(g, v, own[v] ? slot[v] : NULL);
        slot[v] = obuf[j];
        own[v] = true;
      } else if (obuf[j]) {
        of_tensor_release(obuf[j]);
      }
    }
    for (int32_t m = 0; m < n->nmut; m++) {
      int32_t v = n->out[n->nreal + m];
      of_tensor *t = ibuf[n->mut[m]];
      if (v < 0 || !t) continue;
      of_tensor_retain(t);
      release_slot(g, v, own[v] ? slot[v] : NULL);
      slot[v] = t;
      own[v] = true;
    }
    if (n->flags & OF_GN_CAPTURE) {
      int32_t v = n->out[n->nout - 1];
      if (v >= 0) {
        slot[v] = obuf[n->nout - 1];
        own[v] = true;
      } else if (obuf[n->nout - 1]) {
        of_node_release(obuf[n->nout - 1]);
      }
    }
    for (int32_t f = g->free_start[i]; f < g->free_start[i + 1]; f++) {
      int32_t v = g->free_idx[f];
      if (own[v]) release_slot(g, v, slot[v]);
      own[v] = false;
      slot[v] = NULL;
    }
  }
  if (ibuf != ibuf_small) free(ibuf);
  if (obuf != obuf_small) free(obuf);
  if (!waves) of_arena_end(g->arena);
  g->busy = 0;
  of_set_grad_enabled(was);
  of_amp_tls = amp_was;
  for (int32_t o = 0; o < nout && st == OF_OK; o++)
    if (!slot[g->outputs[o]])
      st = of_fail(OF_ERR_STATE, "nn.Graph: output %d was not computed", (int)o + 1);
  for (int32_t o = 0; o < nout; o++) {
    outputs[o] = st == OF_OK ? slot[g->outputs[o]] : NULL;
    if (outputs[o]) of_tensor_retain(outputs[o]);
  }
  for (int32_t v = 0; v < g->nvals; v++)
    if (own[v]) release_slot(g, v, slot[v]);
  free(slot);
  free(own);
  if (st == OF_OK) g->runs++;
  return st;
}

/* ---- pipeline ---- */
typedef of_status (*pass_fn)(of_graph *g, int32_t *removed);
static const struct { const char *name; pass_fn fn; } passes[] = {
  {"dce", of_pass_dce},     {"cse", of_pass_cse},         {"fold", of_pass_fold},
  {"bnfold", of_pass_bnfold}, {"checkpoint", of_pass_checkpoint},
  {"fuse", of_pass_fuse},   {"inplace", of_pass_inplace}, {"schedule", of_pass_schedule},
  {"plan", of_pass_plan},
};

static of_status run_pass(of_graph *g, const char *name, size_t len) {
  for (size_t i = 0; i < sizeof passes / sizeof *passes; i++) {
    if (strlen(passes[i].name) != len || strncmp(passes[i].name, name, len) != 0) continue;
    char when[64];
    snprintf(when, sizeof when, "before %s", passes[i].name);
    of_graph_debug_print(g, when);
    int32_t removed = 0;
    OF_CHECK(passes[i].fn(g, &removed));
    if (strcmp(passes[i].name, "plan") != 0) {
      of_graph_compact(g);
      of_graph_note_pass(g, passes[i].name, removed);
    }
    snprintf(when, sizeof when, "after %s", passes[i].name);
    of_graph_debug_print(g, when);
    return OF_OK;
  }
  return of_fail(OF_ERR_ARG, "nn.Graph: unknown pass '%.*s' (dce, cse, bnfold, fold, "
                 "checkpoint, fuse, inplace, schedule, plan)", (int)len, name);
}

of_status of_graph_optimize(of_graph *g, const char *list) {
  if (!g) return of_fail(OF_ERR_ARG, "nn.Graph: no graph");
  if (!list) list = "dce,cse,bnfold,fold,dce,checkpoint,fuse,inplace,schedule";
  const char *p = list;
  while (*p) {
    while (*p == ',' || *p == ' ') p++;
    const char *e = p;
    while (*e && *e != ',' && *e != ' ') e++;
    if (e > p) OF_CHECK(run_pass(g, p, (size_t)(e - p)));
    p = e;
  }
  int32_t r;
  return of_pass_plan(g, &r);
}

of_status of_graph_run(of_graph *g, of_tensor **inputs, int32_t nin, of_tensor **outputs,
                       int32_t nout) {
  if (!g) return of_fail(OF_ERR_ARG, "nn.Graph: no graph");
  if (of_trace_tls)
    return of_fail(OF_ERR_STATE, "nn.Graph: a compiled graph cannot run inside another graph's "
                   "build()");
  return of_graph_exec(g, inputs, nin, outputs, nout, true);
}

/* ---- inspection ---- */
int32_t of_graph_num_inputs(const of_graph *g) { return g ? g->ninputs : 0; }
int32_t of_graph_num_outputs(const of_graph *g) { return g ? g->noutputs : 0; }

int32_t of_graph_num_nodes(const of_graph *g) {
  int32_t c = 0;
  for (int32_t i = 0; g && i < g->nnodes; i++) c += !g->nodes[i].dead;
  return c;
}

int32_t of_graph_count_op(const of_graph *g, const char *name) {
  int32_t c = 0;
  int32_t op = name ? of_op_find(name) : -1;
  for (int32_t i = 0; g && i < g->nnodes; i++)
    if (!g->nodes[i].dead && (op < 0 ? name == NULL : g->nodes[i].op == op)) c++;
  return c;
}

int64_t of_graph_stat(const of_graph *g, int32_t what) {
  if (!g) return 0;
  switch (what) {
    case OF_GRAPH_PLANNED_PEAK: return g->planned_peak;
    case OF_GRAPH_UNPLANNED_BYTES: return g->eager_bytes;
    case OF_GRAPH_NUM_VALUES: return g->nvals;
    case OF_GRAPH_RUNS: return g->runs;
    case OF_GRAPH_NUM_EXTERNALS: return of_graph_num_externals(g);
    case OF_GRAPH_ARENA_BYTES: return of_arena_bytes(g->arena);
    case OF_GRAPH_PARALLEL_WAVES: return g->waves_parallel;
    case OF_GRAPH_MAX_WAVE: return g->max_wave;
    case OF_GRAPH_WORKER_NODES: return g->worker_nodes;
    default: return 0;
  }
}

const char *of_graph_dump(of_graph *g, int32_t verbose) {
  if (!g) return "";
  return of_graph_text(g, verbose);
}

void of_graph_set_debug(of_graph *g, int32_t level) {
  if (g) g->debug = level;
}

void of_graph_set_concurrency(of_graph *g, int32_t n) {
  if (g) g->concurrency = n;
}

void of_graph_set_profile(of_graph *g, int32_t on) {
  if (!g) return;
  g->profile = on != 0;
  free(g->prof);
  g->prof = NULL;
}

const char *of_graph_passes(const of_graph *g) { return g ? g->passes : ""; }

/* Externals are numbered in value order over those the live graph reads. */
static bool ext_used(const of_graph *g, int32_t v, const int32_t *uses) {
  return g->vals[v].kind == OF_GV_EXTERNAL && (uses == NULL || uses[v] > 0);
}

int32_t of_graph_num_externals(const of_graph *g) {
  if (!g) return 0;
  int32_t *uses = of_graph_use_counts(g);
  int32_t c = 0;
  for (int32_t v = 0; v < g->nvals; v++) c += ext_used(g, v, uses);
  free(uses);
  return c;
}

static int32_t ext_value(const of_graph *g, int32_t i) {
  int32_t *uses = of_graph_use_counts(g);
  int32_t c = 0, found = -1;
  for (int32_t v = 0; v < g->nvals && found < 0; v++)
    if (ext_used(g, v, uses) && c++ == i) found = v;
  free(uses);
  return found;
}

of_tensor *of_graph_external(const of_graph *g, int32_t i) {
  if (!g || i < 0) return NULL;
  int32_t v = ext_value(g, i);
  return v >= 0 ? g->vals[v].ext : NULL;
}

const char *of_graph_external_name(const of_graph *g, int32_t i) {
  if (!g || i < 0) return NULL;
  int32_t v = ext_value(g, i);
  return v >= 0 ? g->vals[v].name : NULL;
}

int32_t of_graph_external_is_const(const of_graph *g, int32_t i) {
  if (!g || i < 0) return 0;
  int32_t v = ext_value(g, i);
  return v >= 0 && g->vals[v].is_const;
}

of_status of_graph_set_external_name(of_graph *g, int32_t i, const char *name) {
  if (!g || i < 0) return of_fail(OF_ERR_ARG, "nn.Graph: bad external index");
  int32_t v = ext_value(g, i);
  if (v < 0) return of_fail(OF_ERR_INDEX, "nn.Graph: no external %d", (int)i + 1);
  char *s = NULL;
  if (name) {
    size_t n = strlen(name);
    s = malloc(n + 1);
    if (!s) return of_fail(OF_ERR_OOM, "nn.Graph: out of memory");
    memcpy(s, name, n + 1);
  }
  free(g->vals[v].name);
  g->vals[v].name = s;
  return OF_OK;
}
