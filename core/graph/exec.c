/* exec.c -- running a graph: the pass pipeline, the executor and the
 * public graph API (oneflow.h, "nn.Graph").
 *
 * The executor walks the live nodes in order with one slot per value.
 * Inputs and externals are borrowed; every other slot owns its tensor (or,
 * for a CAPTURE node's handle, its autograd node) and is released right
 * after its last reader (the plan, passes/plan.c). Grad mode is off while a
 * graph runs: the recorded backward nodes are ordinary ops. */
#include "ops.h"
#include "../device.h"
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
  /* an in-place op (x:mul_(2), clamp_) writes an input made to require
   * grad just above: not a user's leaf */
  int32_t ok_was = of_inplace_leaf_ok();
  of_set_inplace_leaf_ok(1);
  of_status st = d->invoke(n, ins, outs);
  of_set_inplace_leaf_ok(ok_was);
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

/* ---- CUDA graph capture of a step ----
 * While capturing, a node that synchronised with the host (a copy to or
 * from pageable memory, a host-side check) has invalidated the capture:
 * the capture is given up, naming that node, and the step runs as usual. */
static of_status capture_check(of_graph *g, const of_gnode *n, int32_t i, of_status st) {
  const of_device_ops *o = of_device_ops_loaded();
  int32_t cs = o && o->capture_status ? o->capture_status(of_device_index(g->device)) : -1;
  if (st == OF_OK && cs == 1) return OF_OK;
  const of_opdef *d = of_op_def(n->op);
  char why[200];
  snprintf(why, sizeof why, "%s", st != OF_OK ? of_last_error() : "");
  return of_fail(OF_ERR_DEVICE, "node %d (%s) cannot be captured: %s", (int)i + 1,
                 d ? d->name : "?",
                 st != OF_OK ? why : "it synchronised with the host (a copy between the CPU and "
                 "the device, or a host-side check)");
}

/* ---- the executor ---- */
/* A loaded graph's node must make what the file says it makes: the result's
 * dtype, rank and (unless it depends on data) shape are the recorded
 * value's -- the file's shapes were validated at load, the run re-infers
 * them through the ops and compares. */
of_status of_graph_check_result(const of_graph *g, const of_gnode *n, int32_t i, int32_t v,
                                const of_tensor *t) {
  if (!g->loaded || v < 0 || !t) return OF_OK;
  const of_gval *x = &g->vals[v];
  if (x->kind == OF_GV_HANDLE) return OF_OK;
  bool ok = t->dtype == x->dtype && t->ndim == x->ndim;
  for (int32_t k = 0; ok && !x->dynamic && k < t->ndim; k++) ok = t->shape[k] == x->shape[k];
  if (ok) return OF_OK;
  char want[96];
  of_shape_str(x->shape, x->ndim, want, sizeof want);
  const of_opdef *d = of_op_def(n->op);
  return of_fail(OF_ERR_SHAPE, "nn.Graph: node %d (%s): result %%%d is %s %s, the file records "
                 "%s %s", (int)i + 1, d ? d->name : "?", (int)v, OF_SHAPE_STR(t), OF_DT(t), want,
                 of_dtype_name(x->dtype));
}

/* A node's failure names the node (1-based) and its op in front of the op's
 * own message, so that a bad record in a loaded graph is found by its place. */
static of_status node_error(const of_graph *g, const of_gnode *n, int32_t i, of_status st) {
  (void)g;
  const char *msg = of_last_error();
  if (strncmp(msg, "nn.Graph: node ", 15) == 0 || strncmp(msg, "node ", 5) == 0)
    return st;   /* said already */
  char why[400];
  snprintf(why, sizeof why, "%s", msg);
  const of_opdef *d = of_op_def(n->op);
  return of_fail(st, "nn.Graph: node %d (%s): %s", (int)i + 1, d ? d->name : "?", why);
}

static void release_slot(const of_graph *g, int32_t v, void *p) {
  if (!p) return;
  if (g->vals[v].kind == OF_GV_HANDLE) of_node_release(p);
  else of_tensor_release(p);
}

static bool meta_matches(const of_gval *v, const of_tensor *t) {
  if (v->dtype != t->dtype || v->ndim != t->ndim || v->device != of_dev(t)) return false;
  for (int32_t i = 0; i < t->ndim; i++)
    if (v->shape[i] != t->shape[i]) return false;
  return true;
}

/* ---- memo ----
 * A node whose inputs are all externals that nothing in the graph writes
 * (parameters and buffers of an eval graph), or results of such nodes, and
 * that is pure (no randomness, no in-place writes), gives the same results
 * while those inputs do: bnfold's folded weights, a transposed weight. Its
 * results are kept (retained, their storages marked frozen so the oneDNN
 * weight-reorder cache keeps their reordered copies too) with the inputs'
 * (storage id, version, offset); a later run whose inputs match takes them
 * instead of running the node. An in-place change of a parameter between
 * calls (training, load_state_dict) bumps its version: the node runs again.
 * The memo's allocations bypass the arena (they outlive the run) and are
 * made the same way in every run, so the arena's record stays valid.
 * Results that are graph outputs, or that a node writes into, are not kept.
 * OF_GRAPH_MEMO=0 turns it off; graphs on a device do without. */
typedef struct of_memo {
  int32_t nin, nreal;
  bool valid;
  int64_t *sig;           /* [3 * nin] */
  of_tensor **res;        /* [nreal] */
} of_memo;

/* drops a kept result, and what the kernels keep of it (oneDNN's reordered
 * copy, the Winograd transform: a slot per stale weight would pile up over
 * a training loop's evaluations) */
static void memo_drop(of_tensor *t) {
  if (!t) return;
  of_forget_kept_weight(t->storage->id);
  of_tensor_release(t);
}

static void memo_entry_free(of_memo *m) {
  if (!m) return;
  for (int32_t j = 0; j < m->nreal; j++) memo_drop(m->res[j]);
  free(m->sig);
  free(m->res);
  free(m);
}

void of_graph_memo_free(of_graph *g) {
  if (g->memo)
    for (int32_t i = 0; i < g->nnodes; i++) memo_entry_free(g->memo[i]);
  free(g->memo);
  g->memo = NULL;
  g->memo_ready = false;
}

/* which nodes keep their results (under g->lock, with the plan) */
static void memo_init(of_graph *g) {
  g->memo_ready = true;
  const char *e = getenv("OF_GRAPH_MEMO");
  if ((e && strcmp(e, "0") == 0) || g->device != OF_CPU || g->nnodes == 0) return;
  bool *written = of_graph_written_roots(g);
  bool *mv = calloc((size_t)(g->nvals ? g->nvals : 1), sizeof *mv);
  bool *outroot = calloc((size_t)(g->nvals ? g->nvals : 1), sizeof *outroot);
  of_memo **memo = calloc((size_t)g->nnodes, sizeof *memo);
  int32_t count = 0;
  if (written && mv && outroot && memo) {
    for (int32_t o = 0; o < g->noutputs; o++) outroot[g->vals[g->outputs[o]].root] = true;
    for (int32_t i = 0; i < g->nnodes; i++) {
      of_gnode *n = &g->nodes[i];
      if (n->dead || n->nreal < 1 || n->nout != n->nreal || !of_node_pure(g, n)) continue;
      bool ok = true;
      for (int32_t k = 0; k < n->nin && ok; k++) {
        int32_t v = n->in[k];
        if (v < 0) continue;
        const of_gval *x = &g->vals[v];
        ok = mv[v] || (x->kind == OF_GV_EXTERNAL && !written[x->root]);
      }
      for (int32_t j = 0; j < n->nreal && ok; j++) {
        int32_t v = n->out[j];
        ok = v < 0 || (!written[g->vals[v].root] && !outroot[g->vals[v].root]);
      }
      if (!ok) continue;
      of_memo *m = calloc(1, sizeof *m);
      if (m) {
        m->sig = calloc((size_t)(3 * (n->nin ? n->nin : 1)), sizeof *m->sig);
        m->res = calloc((size_t)n->nreal, sizeof *m->res);
      }
      if (!m || !m->sig || !m->res) {
        memo_entry_free(m);
        continue;
      }
      m->nin = n->nin;
      m->nreal = n->nreal;
      memo[i] = m;
      count++;
      for (int32_t j = 0; j < n->nreal; j++)
        if (n->out[j] >= 0) mv[n->out[j]] = true;
    }
  }
  free(written);
  free(mv);
  free(outroot);
  if (count) g->memo = memo;
  else free(memo);
}

static void memo_sig(of_tensor **ins, int32_t nin, int64_t *sig) {
  for (int32_t k = 0; k < nin; k++) {
    of_tensor *t = ins[k];
    sig[3 * k] = t ? t->storage->id : 0;
    sig[3 * k + 1] = t ? t->storage->version : -1;
    sig[3 * k + 2] = t ? t->offset : 0;
  }
}

/* the kept results into outs (retained) when ins match the kept inputs */
static bool memo_hit(of_graph *g, of_memo *m, of_tensor **ins, void **outs) {
  int64_t sig[3 * 16], *sp = m->nin <= 16 ? sig : malloc(sizeof *sp * (size_t)(3 * m->nin));
  if (!sp) return false;
  memo_sig(ins, m->nin, sp);
  pthread_mutex_lock(&g->memo_lock);
  bool hit = m->valid && memcmp(sp, m->sig, sizeof *sp * (size_t)(3 * m->nin)) == 0;
  for (int32_t j = 0; hit && j < m->nreal; j++) {
    outs[j] = m->res[j];
    if (m->res[j]) of_tensor_retain(m->res[j]);
  }
  if (hit) g->memo_hits++;
  pthread_mutex_unlock(&g->memo_lock);
  if (sp != sig) free(sp);
  return hit;
}

static void memo_store(of_graph *g, of_memo *m, of_tensor **ins, void **outs) {
  pthread_mutex_lock(&g->memo_lock);
  for (int32_t j = 0; j < m->nreal; j++) {
    memo_drop(m->res[j]);
    m->res[j] = outs[j];
    if (outs[j]) {
      of_tensor_retain(outs[j]);
      m->res[j]->storage->frozen = true;
    }
  }
  memo_sig(ins, m->nin, m->sig);
  m->valid = true;
  pthread_mutex_unlock(&g->memo_lock);
}

/* The graphs running on this thread, innermost last: a graph called from
 * inside its own run (a callback) is an error; other threads may run it. */
enum { MAX_NESTED_RUNS = 16 };
static _Thread_local of_graph *running[MAX_NESTED_RUNS];
static _Thread_local int32_t nrunning;

of_status of_graph_exec(of_graph *g, of_tensor **inputs, int32_t nin, of_tensor **outputs,
                        int32_t nout, bool check_inputs) {
  if (nin != g->ninputs)
    return of_fail(OF_ERR_ARG, "nn.Graph: the graph takes %d inputs, %d given", (int)g->ninputs,
                   (int)nin);
  if (nout != g->noutputs)
    return of_fail(OF_ERR_ARG, "nn.Graph: the graph has %d outputs, room for %d given",
                   (int)g->noutputs, (int)nout);
  for (int32_t i = 0; i < nrunning; i++)
    if (running[i] == g)
      return of_fail(OF_ERR_STATE, "nn.Graph: the graph is already running on this thread (a "
                     "graph called from inside itself)");
  if (nrunning == MAX_NESTED_RUNS)
    return of_fail(OF_ERR_STATE, "nn.Graph: graphs nested more than %d deep", MAX_NESTED_RUNS);
  /* Setup and serial runs under the graph's lock. A plain run needs it only
   * to start: its slots are its own, and one run at a time has the arena. */
  pthread_mutex_lock(&g->lock);
  if (!g->planned) {
    int32_t r;
    of_status pst = of_pass_plan(g, &r);
    if (pst != OF_OK) {
      pthread_mutex_unlock(&g->lock);
      return pst;
    }
  }
  if (!g->memo_ready) memo_init(g);
  if (!g->prof && g->profile) g->prof = calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *g->prof);
  if (!g->arena && !g->no_arena) {   /* first run */
    const char *conc = getenv("OF_GRAPH_CONCURRENCY");
    if (conc && g->concurrency == 0) g->concurrency = atoi(conc);
    const char *env = getenv("OF_GRAPH_ARENA");
    /* the arena lays out CPU memory; a device graph's buffers come from the
     * device's own stream-ordered allocator (of_alloc never asks the arena
     * for them) */
    g->no_arena = (env && strcmp(env, "0") == 0) || g->device != OF_CPU;
    if (!g->no_arena) g->arena = of_arena_new();
  }
  bool waves = g->concurrency >= 2 && !g->prof && !g->cg_capturing;
  /* wave runs (sched.c keeps counters in g), profiled runs (g->prof) and
   * CUDA graph captures keep the lock to the end */
  bool serial = waves || g->prof || g->cg_capturing;
  /* workers' allocations would not follow the arena's record; another run
   * has it: this one allocates from the caches. The claim and its release
   * are under the lock (a plain flag: the lock orders the arena's use from
   * one run to the next, which checkers like Helgrind can see). */
  bool use_arena = !waves && g->arena && !g->arena_busy;
  if (use_arena) g->arena_busy = 1;
  g->active++;
  if (!serial) pthread_mutex_unlock(&g->lock);
  running[nrunning++] = g;
  void **slot = calloc((size_t)(g->nvals ? g->nvals : 1), sizeof *slot);
  bool *own = calloc((size_t)(g->nvals ? g->nvals : 1), sizeof *own);
  of_status st = OF_OK;
  if (!slot || !own) st = of_fail(OF_ERR_OOM, "nn.Graph: out of memory");
  for (int32_t i = 0; i < nin && st == OF_OK; i++) {
    const of_gval *v = &g->vals[g->inputs[i]];
    of_tensor *t = inputs[i];
    if (!t) { st = of_fail(OF_ERR_ARG, "nn.Graph: input %d is nil", (int)i + 1); break; }
    if (check_inputs && !meta_matches(v, t)) {
      char want[96];
      of_shape_str(v->shape, v->ndim, want, sizeof want);
      char d1[16], d2[16];
      st = of_fail(v->device != of_dev(t) ? OF_ERR_DEVICE : OF_ERR_SHAPE,
                   "nn.Graph: input %d is %s %s on %s, the graph was compiled for %s %s on %s",
                   (int)i + 1, OF_SHAPE_STR(t), OF_DT(t), of_device_str(of_dev(t), d1), want,
                   of_dtype_name(v->dtype), of_device_str(v->device, d2));
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
  for (int32_t v = 0; slot && v < g->nvals; v++)
    if (g->vals[v].kind == OF_GV_EXTERNAL) slot[v] = g->vals[v].ext;
  int32_t was = of_is_grad_enabled(), amp_was = of_amp_tls;
  of_set_grad_enabled(0);
  of_amp_tls = 0;   /* the graph's casts are nodes already */
  if (use_arena) of_arena_begin(g->arena);
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
    of_memo *mm = g->memo ? g->memo[i] : NULL;
    if (!mm) {
      st = of_graph_invoke(g, n, ibuf, obuf);
    } else if (!memo_hit(g, mm, ibuf, obuf)) {
      of_arena *ar = of_arena_suspend();   /* kept results outlive the run */
      st = of_graph_invoke(g, n, ibuf, obuf);
      of_arena_resume(ar);
      if (st == OF_OK) memo_store(g, mm, ibuf, obuf);
    }
    if (g->prof) {
      clock_gettime(CLOCK_MONOTONIC, &t1);
      double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
      if (g->prof[i] == 0 || ms < g->prof[i]) g->prof[i] = ms;   /* fastest run */
    }
    if (g->cg_capturing) st = capture_check(g, n, i, st);
    if (st != OF_OK) {
      st = node_error(g, n, i, st);
      break;
    }
    for (int32_t j = 0; j < n->nreal; j++) {
      int32_t v = n->out[j];
      if (v >= 0) {
        if (!obuf[j]) { st = no_node(n, "a result is missing"); continue; }
        release_slot(g, v, own[v] ? slot[v] : NULL);
        slot[v] = obuf[j];
        own[v] = true;
        if (st == OF_OK) st = of_graph_check_result(g, n, i, v, obuf[j]);
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
  if (use_arena) of_arena_end(g->arena);
  nrunning--;
  if (!serial) pthread_mutex_lock(&g->lock);
  if (use_arena) g->arena_busy = 0;
  g->active--;
  pthread_mutex_unlock(&g->lock);
  of_set_grad_enabled(was);
  of_amp_tls = amp_was;
  for (int32_t o = 0; o < nout && st == OF_OK; o++)
    if (!slot || !slot[g->outputs[o]])
      st = of_fail(OF_ERR_STATE, "nn.Graph: output %d was not computed", (int)o + 1);
  for (int32_t o = 0; o < nout; o++) {
    outputs[o] = st == OF_OK ? slot[g->outputs[o]] : NULL;
    if (outputs[o]) of_tensor_retain(outputs[o]);
  }
  for (int32_t v = 0; own && v < g->nvals; v++)
    if (own[v]) release_slot(g, v, slot[v]);
  free(slot);
  free(own);
  if (st == OF_OK) __atomic_add_fetch(&g->runs, 1, __ATOMIC_RELAXED);   /* a statistic */
  return st;
}

/* ---- pipeline ---- */
typedef of_status (*pass_fn)(of_graph *g, int32_t *removed);
static const struct { const char *name; pass_fn fn; } passes[] = {
  {"dce", of_pass_dce},     {"cse", of_pass_cse},         {"fold", of_pass_fold},
  {"bnfold", of_pass_bnfold}, {"checkpoint", of_pass_checkpoint},
  {"fuse", of_pass_fuse},   {"inplace", of_pass_inplace}, {"schedule", of_pass_schedule},
  {"plan", of_pass_plan},     {"poolmask", of_pass_poolmask}, {"relupool", of_pass_relupool},
  {"convfuse", of_pass_convfuse}, {"functionalize", of_pass_functionalize},
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
  char known[256] = "";   /* the table's names: the message cannot miss one */
  for (size_t i = 0, at = 0; i < sizeof passes / sizeof *passes && at < sizeof known; i++)
    at += (size_t)snprintf(known + at, sizeof known - at, "%s%s", i ? ", " : "", passes[i].name);
  return of_fail(OF_ERR_ARG, "nn.Graph: unknown pass '%.*s' (%s)", (int)len, name, known);
}

of_status of_graph_optimize(of_graph *g, const char *list) {
  if (!g) return of_fail(OF_ERR_ARG, "nn.Graph: no graph");
  if (!list)
    list = "functionalize,dce,cse,bnfold,fold,dce,checkpoint,poolmask,relupool,convfuse,fuse,inplace,"
           "schedule";
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

/* ---- CUDA graphs: capture the step once, then replay it ----
 * The first run after compiling is a warm-up (cuDNN picks its algorithms,
 * cuBLAS and the caching allocator settle). The next run copies its inputs
 * into static input tensors and runs the executor on them while the
 * device's stream is captured: every kernel, allocation and free of the step
 * becomes one CUDA graph, whose allocations keep fixed addresses, so the
 * tensors the captured run returned are the static outputs. Later runs
 * copy the inputs into the static ones and launch the graph. */
static void set_status(of_graph *g, const char *fmt, const char *arg) {
  snprintf(g->cg_status, sizeof g->cg_status, fmt, arg);
}

void of_graph_cuda_graph_drop(of_graph *g) {
  if (!g) return;
  const of_device_ops *o = of_device_ops_loaded();
  if (g->cg_graph && o && o->graph_free) o->graph_free(g->cg_graph);
  g->cg_graph = NULL;
  for (int32_t i = 0; g->cg_in && i < g->ninputs; i++) of_tensor_release(g->cg_in[i]);
  for (int32_t i = 0; g->cg_out && i < g->noutputs; i++) of_tensor_release(g->cg_out[i]);
  free(g->cg_in);
  free(g->cg_out);
  g->cg_in = g->cg_out = NULL;
  g->cg_warm = 0;
  g->cg_off = false;
  g->cg_status[0] = 0;
}

/* Why the step cannot be captured before trying, or NULL. */
static const char *not_capturable(const of_graph *g, const of_device_ops *o) {
  if (of_device_type(g->device) != OF_CUDA) return "the graph does not run on a CUDA device";
  if (!o || !o->graph_capture_begin || !o->capture_status)
    return "the CUDA library has no graph capture";
  if (g->concurrency >= 2) return "set_concurrency runs nodes on several threads";
  for (int32_t i = 0; i < g->nnodes; i++) {
    const of_gnode *n = &g->nodes[i];
    const of_opdef *d = of_op_def(n->op);
    if (!n->dead && d && (d->flags & OF_OPF_RANDOM))
      return d->name;   /* the generator's offset is host state: every replay would repeat it */
  }
  return NULL;
}

static of_status give_up(of_graph *g, const char *why) {
  g->cg_off = true;
  set_status(g, "%s", why);
  fprintf(stderr, "nn.Graph: CUDA graph capture is off for this graph: %s; the step runs "
          "without it\n", g->cg_status);
  return OF_OK;
}

static of_status static_outputs(of_graph *g, of_tensor **outputs) {
  of_status st = OF_OK;
  for (int32_t o = 0; o < g->noutputs; o++) outputs[o] = NULL;
  for (int32_t o = 0; o < g->noutputs && st == OF_OK; o++) {
    if (g->cg_mode == 2) {
      of_tensor_retain(g->cg_out[o]);
      outputs[o] = g->cg_out[o];
    } else {
      st = of_clone_data(g->cg_out[o], &outputs[o]);
    }
  }
  if (st != OF_OK)
    for (int32_t o = 0; o < g->noutputs; o++) { of_tensor_release(outputs[o]); outputs[o] = NULL; }
  return st;
}

static of_status capture(of_graph *g, const of_device_ops *o, of_tensor **inputs) {
  of_status st = OF_OK;
  g->cg_in = calloc((size_t)(g->ninputs ? g->ninputs : 1), sizeof *g->cg_in);
  g->cg_out = calloc((size_t)(g->noutputs ? g->noutputs : 1), sizeof *g->cg_out);
  if (!g->cg_in || !g->cg_out) return of_fail(OF_ERR_OOM, "nn.Graph: out of memory");
  for (int32_t i = 0; i < g->ninputs && st == OF_OK; i++) {
    of_tensor *t = inputs[i];
    st = of_tensor_new(t->shape, t->ndim, t->dtype, of_dev(t), &g->cg_in[i]);
    if (st == OF_OK) st = of_copy_data(g->cg_in[i], t);
  }
  if (st != OF_OK) return st;
  void *cap = NULL;
  st = o->graph_capture_begin(of_device_index(g->device), &cap);
  if (st != OF_OK) return give_up(g, of_last_error());
  g->cg_capturing = true;
  of_status run = of_graph_exec(g, g->cg_in, g->ninputs, g->cg_out, g->noutputs, true);
  g->cg_capturing = false;
  char why[320];
  snprintf(why, sizeof why, "%s", run != OF_OK ? of_last_error() : "");
  void *graph = NULL;
  st = o->graph_capture_end(cap, &graph);
  if (run == OF_OK && st != OF_OK) snprintf(why, sizeof why, "%s", of_last_error());
  if (run != OF_OK || st != OF_OK) {
    if (graph) o->graph_free(graph);
    for (int32_t i = 0; i < g->noutputs; i++) { of_tensor_release(g->cg_out[i]); g->cg_out[i] = NULL; }
    return give_up(g, why);
  }
  g->cg_graph = graph;
  set_status(g, "%s", "captured");
  return OF_OK;
}

static of_status run_cuda_graph(of_graph *g, of_tensor **inputs, int32_t nin,
                                of_tensor **outputs, int32_t nout, bool *done) {
  *done = false;
  const of_device_ops *o = of_device_ops_loaded();
  if (!g->cg_graph) {
    const char *why = not_capturable(g, o);
    if (why) {
      char buf[160];
      if (o && of_device_type(g->device) == OF_CUDA && of_op_find(why) >= 0)
        snprintf(buf, sizeof buf, "the graph has a random op (%s): a replay would draw the same "
                 "numbers again", why);
      else
        snprintf(buf, sizeof buf, "%s", why);
      return give_up(g, buf);
    }
    if (g->cg_warm < 1) {   /* warm-up: a plain run */
      g->cg_warm++;
      return OF_OK;
    }
  }
  /* the inputs must match before anything is copied or captured */
  if (nin != g->ninputs || nout != g->noutputs) return OF_OK;   /* exec reports it */
  for (int32_t i = 0; i < nin; i++)
    if (!inputs[i] || !meta_matches(&g->vals[g->inputs[i]], inputs[i])) return OF_OK;
  if (!g->cg_graph) {
    OF_CHECK(capture(g, o, inputs));
    if (!g->cg_graph) return OF_OK;   /* gave up: run as usual */
    g->runs--;                         /* the captured run ran nothing; the launch counts */
  } else {
    for (int32_t i = 0; i < nin; i++)
      if (inputs[i] != g->cg_in[i]) OF_CHECK(of_copy_data(g->cg_in[i], inputs[i]));
  }
  OF_CHECK(o->graph_launch(g->cg_graph));
  OF_CHECK(static_outputs(g, outputs));
  g->runs++;
  *done = true;
  return OF_OK;
}

/* The variant of a loaded graph whose inputs match (g itself when it has
 * none or none matches: its run then reports the mismatch, naming the
 * other compiled shapes). */
static of_graph *pick_variant(of_graph *g, of_tensor **inputs, int32_t nin) {
  if (!g->variant) return g;
  for (of_graph *v = g; v; v = v->variant) {
    bool ok = nin == v->ninputs && inputs;
    for (int32_t i = 0; ok && i < nin; i++)
      ok = inputs[i] && meta_matches(&v->vals[v->inputs[i]], inputs[i]);
    if (ok) return v;
  }
  return g;
}

static int32_t num_variants(const of_graph *g) {
  int32_t n = 0;
  for (; g; g = g->variant) n++;
  return n;
}

int32_t of_graph_num_variants(const of_graph *g) { return num_variants(g); }

of_graph *of_graph_variant(of_graph *g, int32_t i) {
  for (int32_t k = 0; g && i >= 0; g = g->variant, k++)
    if (k == i) return g;
  return NULL;
}

of_status of_graph_run(of_graph *g, of_tensor **inputs, int32_t nin, of_tensor **outputs,
                       int32_t nout) {
  if (!g) return of_fail(OF_ERR_ARG, "nn.Graph: no graph");
  if (of_trace_tls)
    return of_fail(OF_ERR_STATE, "nn.Graph: a compiled graph cannot run inside another graph's "
                   "build()");
  g = pick_variant(g, inputs, nin);
  if (g->cg_mode && !g->cg_off) {   /* the captured graph is one: one thread at a time */
    bool done;
    pthread_mutex_lock(&g->cg_lock);
    of_status st = run_cuda_graph(g, inputs, nin, outputs, nout, &done);
    pthread_mutex_unlock(&g->cg_lock);
    if (st != OF_OK) return st;
    if (done) return OF_OK;
  }
  of_status st = of_graph_exec(g, inputs, nin, outputs, nout, true);
  if (st == OF_ERR_SHAPE && g->variant) {   /* say which signatures there are */
    char why[400], list[400] = "";
    snprintf(why, sizeof why, "%s", of_last_error());
    size_t o = 0;
    for (of_graph *v = g->variant; v && o + 100 < sizeof list; v = v->variant) {
      char sh[96] = "?";
      if (v->ninputs > 0) {
        const of_gval *x = &v->vals[v->inputs[0]];
        of_shape_str(x->shape, x->ndim, sh, sizeof sh);
      }
      o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "", sh);
    }
    return of_fail(OF_ERR_SHAPE, "%s (the file also holds variants whose first input is %s)", why,
                   list);
  }
  return st;
}

of_device of_graph_device(const of_graph *g) { return g ? g->device : OF_CPU; }

/* Moves every value of the graph's device (and every external that is not
 * where its value says: a loaded graph's externals come from the file on
 * the CPU) to dev; ops that create tensors on the old device create them on
 * dev. CPU values of a device graph (scalars, host-side constants) stay. */
static of_status graph_to(of_graph *g, of_device dev);

/* every variant of a loaded graph moves (each makes its own copies of the
 * shared weights on the device) */
of_status of_graph_to(of_graph *g, of_device dev) {
  if (!g) return of_fail(OF_ERR_ARG, "nn.Graph.to: no graph");
  for (of_graph *v = g; v; v = v->variant) OF_CHECK(graph_to(v, dev));
  return OF_OK;
}

static of_status graph_to(of_graph *g, of_device dev) {
  pthread_mutex_lock(&g->lock);
  int32_t active = g->active;
  pthread_mutex_unlock(&g->lock);
  if (active) return of_fail(OF_ERR_STATE, "nn.Graph.to: the graph is running");
  if (of_device_type(dev) != OF_CPU && of_device_type(dev) != OF_CUDA)
    return of_fail(OF_ERR_DEVICE, "nn.Graph.to: unknown device %d", (int)dev);
  if (dev != OF_CPU && !of_device_ops_for("nn.Graph.to", dev)) return OF_ERR_DEVICE;
  of_device old = g->device;
  if (dev != OF_CPU)
    for (int32_t i = 0; i < g->nnodes; i++)
      if (!g->nodes[i].dead && g->nodes[i].op == OF_OPK_FUSED)
        return of_fail(OF_ERR_DEVICE, "nn.Graph.to(%s): the graph has fused elementwise nodes, "
                       "which run on the CPU only; compile it on %s (or compile it with "
                       "config:enable_fusion(false) before saving)", OF_DEV_STR(dev),
                       OF_DEV_STR(dev));
  /* the new externals first, so that a failure leaves the graph as it was */
  of_tensor **moved = calloc((size_t)(g->nvals ? g->nvals : 1), sizeof *moved);
  if (!moved) return of_fail(OF_ERR_OOM, "nn.Graph.to: out of memory");
  of_status st = OF_OK;
  for (int32_t v = 0; v < g->nvals && st == OF_OK; v++) {
    of_gval *x = &g->vals[v];
    if (x->kind != OF_GV_EXTERNAL || !x->ext) continue;
    of_device want = x->device == old ? dev : x->device;
    of_tensor *t = x->ext;
    if (of_dev(t) == want) continue;
    bool cl = of_prefers_channels_last(t);
    if (!cl && !of_tensor_is_contiguous(t)) {
      st = of_fail(OF_ERR_STATE, "nn.Graph.to: external %s %s is a strided view; it cannot be "
                   "moved", x->name ? x->name : "", OF_SHAPE_STR(t));
      break;
    }
    st = cl ? of_tensor_new_channels_last(t->shape, t->ndim, t->dtype, want, &moved[v])
            : of_tensor_new(t->shape, t->ndim, t->dtype, want, &moved[v]);
    if (st == OF_OK) st = of_copy_data(moved[v], t);
  }
  if (st != OF_OK) {
    for (int32_t v = 0; v < g->nvals; v++) of_tensor_release(moved[v]);
    free(moved);
    return st;
  }
  of_graph_cuda_graph_drop(g);
  for (int32_t v = 0; v < g->nvals; v++) {
    of_gval *x = &g->vals[v];
    if (moved[v]) {
      of_tensor_release(x->ext);
      x->ext = moved[v];
      memcpy(x->strides, moved[v]->strides, sizeof x->strides);
      x->offset = moved[v]->offset;
    }
    if (x->kind != OF_GV_HANDLE && x->device == old) x->device = dev;
  }
  free(moved);
  for (int32_t i = 0; i < g->nnodes; i++) {
    of_gnode *n = &g->nodes[i];
    if ((n->op == OPK_EMPTY || n->op == OPK_ZEROS || n->op == OPK_FULL || n->op == OPK_RAND ||
         n->op == OPK_RANDN) && n->attr_size == (int32_t)sizeof(a_create)) {
      a_create *a = n->attrs;
      if (a->device == old) a->device = dev;
    } else if ((n->op == OPK_EYE || n->op == OPK_ARANGE || n->op == OPK_LINSPACE) &&
               n->attr_size == (int32_t)sizeof(a_range)) {
      a_range *a = n->attrs;
      if (a->device == old) a->device = dev;
    }
  }
  g->device = dev;
  of_graph_memo_free(g);   /* kept results on the old device */
  if (g->arena) {   /* laid out for the old device's run */
    of_arena_release(g->arena);
    g->arena = NULL;
  }
  g->no_arena = false;
  return OF_OK;
}

void of_graph_set_cuda_graph(of_graph *g, int32_t mode) {
  if (!g) return;
  of_graph_set_cuda_graph(g->variant, mode);
  mode = mode < 0 ? 0 : mode > 2 ? 2 : mode;
  if (mode == g->cg_mode) return;
  if (mode == 0 || g->cg_mode == 0) of_graph_cuda_graph_drop(g);
  g->cg_mode = mode;
}

const char *of_graph_cuda_graph_status(const of_graph *g) {
  if (!g) return "";
  if (!g->cg_mode) return "off";
  return g->cg_status;
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
    case OF_GRAPH_MEMO_NODES: {
      int64_t c = 0;
      for (int32_t i = 0; g->memo && i < g->nnodes; i++) c += g->memo[i] != NULL;
      return c;
    }
    case OF_GRAPH_MEMO_HITS: return g->memo_hits;
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
  for (; g; g = g->variant) g->concurrency = n;
}

void of_graph_set_profile(of_graph *g, int32_t on) {
  if (!g) return;
  of_graph_set_profile(g->variant, on);
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

/* ---- introspection (oneflow.h) ---- */
int32_t of_graph_node_slots(const of_graph *g) { return g ? g->nnodes : 0; }

of_status of_graph_describe_value(const of_graph *g, int32_t v, of_graph_value_desc *out) {
  if (!g || !out) return of_fail(OF_ERR_ARG, "nn.Graph: describe_value: no graph");
  if (v < 0 || v >= g->nvals)
    return of_fail(OF_ERR_INDEX, "nn.Graph: value %d is not in 0..%d", (int)v, (int)g->nvals - 1);
  const of_gval *x = &g->vals[v];
  memset(out, 0, sizeof *out);
  out->kind = x->kind;
  out->is_const = x->is_const;
  out->dtype = x->dtype;
  out->ndim = x->ndim;
  for (int32_t k = 0; k < x->ndim && k < OF_MAX_DIMS; k++) out->shape[k] = x->shape[k];
  out->producer = x->producer;
  out->index = x->index;
  out->name = x->name;
  out->note = x->note;
  return OF_OK;
}

of_status of_graph_describe_node(const of_graph *g, int32_t i, of_graph_node_desc *out) {
  if (!g || !out) return of_fail(OF_ERR_ARG, "nn.Graph: describe_node: no graph");
  if (i < 0 || i >= g->nnodes)
    return of_fail(OF_ERR_INDEX, "nn.Graph: node %d is not in 0..%d", (int)i, (int)g->nnodes - 1);
  const of_gnode *n = &g->nodes[i];
  const of_opdef *d = of_op_def(n->op);
  memset(out, 0, sizeof *out);
  out->op = d ? d->name : "?";
  out->nin = n->nin;
  out->nout = n->nout;
  out->nreal = n->nreal;
  out->nmut = n->nmut;
  out->in = n->in;
  out->out = n->out;
  out->dead = n->dead;
  out->backward = (n->flags & OF_GN_BACKWARD) != 0;
  out->fused = n->op == OF_OPK_FUSED || n->op == OPK_RELU_MAX_POOL ||
               n->op == OPK_RELU_MAX_POOL_BACKWARD;
  if (d && d->describe && n->attrs) d->describe(n->attrs, out->attrs, sizeof out->attrs);
  return OF_OK;
}

int32_t of_graph_io_value(const of_graph *g, int32_t output, int32_t i) {
  if (!g || i < 0) return -1;
  if (output) return i < g->noutputs ? g->outputs[i] : -1;
  return i < g->ninputs ? g->inputs[i] : -1;
}
