/* sched.c -- running independent nodes concurrently (of_graph_set_concurrency).
 *
 * The executor in exec.c runs nodes one after another and lets every op
 * use all CPU threads inside itself. That leaves threads idle when a graph
 * has many small independent ops (branches, per-parameter updates). With a
 * concurrency of n >= 2 the graph runs in waves instead: every node whose
 * predecessors are done is ready; one ready node runs alone, with all
 * threads; several run side by side, one per thread (up to n; their
 * OpenMP loops are then single-threaded, as OpenMP does not nest).
 *
 * Predecessors: the producers of a node's inputs, and for every storage it
 * touches the last node that wrote it (and, for a write, every reader since)
 * -- an opaque backward node counts as reading what its forward node's
 * autograd node kept. Random ops stay in their order (the generator is
 * shared). A node kept for an opaque backward (CAPTURE) briefly marks its
 * inputs as requiring grad, so it never shares a wave with a node that has
 * one of the same input tensors. Values are released when their last
 * reader has finished, and a checkpointed value's recomputation waits for
 * the node it was placed before. Results are those of the sequential
 * order: each node sees exactly the data it saw there. The arena is not
 * used (the workers' allocations do not follow a fixed order). */
#include "ops.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  int32_t *succ, *succ_start;   /* CSR successors */
  int32_t *npred;               /* remaining predecessors */
  int32_t *reads;               /* value -> readers still to run */
} dag;

static void dag_free(dag *d) {
  free(d->succ); free(d->succ_start); free(d->npred); free(d->reads);
}

typedef struct { int32_t *a; int32_t n, cap; } ivec;
static bool ivec_push(ivec *v, int32_t x) {
  if (v->n == v->cap) {
    int32_t cap = v->cap ? v->cap * 2 : 16;
    int32_t *a = realloc(v->a, sizeof *a * (size_t)cap);
    if (!a) return false;
    v->a = a;
    v->cap = cap;
  }
  v->a[v->n++] = x;
  return true;
}

/* roots node n reads (inputs, and for a handle what its autograd node kept) */
static int32_t read_roots(const of_graph *g, const of_gnode *n, const int32_t *handle_node,
                          int32_t *roots, int32_t cap) {
  int32_t c = 0;
  for (int32_t k = 0; k < n->nin; k++) {
    int32_t v = n->in[k];
    if (v < 0) continue;
    if (g->vals[v].kind != OF_GV_HANDLE) {
      if (c < cap) roots[c++] = g->vals[v].root;
      continue;
    }
    int32_t f = handle_node[v];
    if (f < 0) continue;
    const of_gnode *fn = &g->nodes[f];
    for (int32_t q = 0; q < fn->nin; q++)
      if (fn->in[q] >= 0 && (q >= 32 || ((fn->keep_in >> q) & 1)) && c < cap)
        roots[c++] = g->vals[fn->in[q]].root;
    for (int32_t j = 0; j < fn->nreal; j++)
      if (fn->out[j] >= 0 && (j >= 32 || ((fn->keep_out >> j) & 1)) && c < cap)
        roots[c++] = g->vals[fn->out[j]].root;
  }
  return c;
}

static of_status build_dag(const of_graph *g, dag *d) {
  int32_t nn = g->nnodes, nv = g->nvals ? g->nvals : 1;
  memset(d, 0, sizeof *d);
  ivec *succ = calloc((size_t)(nn ? nn : 1), sizeof *succ);
  int32_t *last_writer = malloc(sizeof *last_writer * (size_t)nv);
  ivec *readers = calloc((size_t)nv, sizeof *readers);   /* per root, since its last write */
  int32_t *handle_node = malloc(sizeof *handle_node * (size_t)nv);
  d->npred = calloc((size_t)(nn ? nn : 1), sizeof *d->npred);
  d->reads = calloc((size_t)nv, sizeof *d->reads);
  bool ok = succ && last_writer && readers && handle_node && d->npred && d->reads;
  for (int32_t v = 0; ok && v < nv; v++) last_writer[v] = handle_node[v] = -1;
  int32_t last_random = -1, last_plain = -1;
  for (int32_t i = 0; ok && i < nn; i++) {
    const of_gnode *n = &g->nodes[i];
    if (n->dead) continue;
    if ((n->flags & OF_GN_CAPTURE) && n->out[n->nout - 1] >= 0) handle_node[n->out[n->nout - 1]] = i;
    int32_t preds[256], np = 0;
#define ADD_PRED(p) do { if ((p) >= 0 && (p) != i && np < 256) preds[np++] = (p); } while (0)
    for (int32_t k = 0; k < n->nin; k++) {
      int32_t v = n->in[k];
      if (v < 0) continue;
      d->reads[v]++;
      ADD_PRED(g->vals[v].producer);
    }
    int32_t rr[64], nr = read_roots(g, n, handle_node, rr, 64);
    int32_t wr[16], nw = of_node_writes(g, n, wr, 16);
    for (int32_t r = 0; r < nr; r++) ADD_PRED(last_writer[rr[r]]);
    for (int32_t w = 0; w < nw; w++) {
      ADD_PRED(last_writer[wr[w]]);
      for (int32_t q = 0; q < readers[wr[w]].n; q++) ADD_PRED(readers[wr[w]].a[q]);
    }
    /* a recomputation waits for the backward node before it: run as soon
     * as ready it would bring its activations back right after forward */
    if (n->flags & OF_GN_RECOMPUTE) ADD_PRED(last_plain);
    else last_plain = i;
    const of_opdef *def = of_op_def(n->op);
    if (def && (def->flags & OF_OPF_RANDOM)) {
      ADD_PRED(last_random);
      last_random = i;
    }
#undef ADD_PRED
    if (np == 256) ok = false;   /* too many to track: caller runs in order */
    for (int32_t q = 0; ok && q < np; q++) {
      bool dup = false;
      for (int32_t e = 0; e < q && !dup; e++) dup = preds[e] == preds[q];
      if (dup) continue;
      ok = ivec_push(&succ[preds[q]], i);
      d->npred[i]++;
    }
    for (int32_t r = 0; ok && r < nr; r++) ok = ivec_push(&readers[rr[r]], i);
    for (int32_t w = 0; ok && w < nw; w++) {
      last_writer[wr[w]] = i;
      readers[wr[w]].n = 0;
    }
  }
  for (int32_t o = 0; ok && o < g->noutputs; o++) d->reads[g->outputs[o]] += 1 << 28;
  if (ok) {
    d->succ_start = calloc((size_t)nn + 1, sizeof *d->succ_start);
    int32_t total = 0;
    for (int32_t i = 0; i < nn; i++) total += succ[i].n;
    d->succ = malloc(sizeof *d->succ * (size_t)(total ? total : 1));
    ok = d->succ_start && d->succ;
    for (int32_t i = 0, at = 0; ok && i < nn; i++) {
      d->succ_start[i] = at;
      if (succ[i].n) memcpy(d->succ + at, succ[i].a, sizeof *d->succ * (size_t)succ[i].n);
      at += succ[i].n;
      d->succ_start[i + 1] = at;
    }
  }
  for (int32_t i = 0; succ && i < nn; i++) free(succ[i].a);
  for (int32_t v = 0; readers && v < nv; v++) free(readers[v].a);
  free(succ); free(last_writer); free(readers); free(handle_node);
  if (!ok) {
    dag_free(d);
    return of_fail(OF_ERR_OOM, "nn.Graph: scheduler: out of memory or too many dependencies");
  }
  return OF_OK;
}

static void release_slot(const of_graph *g, int32_t v, void *p) {
  if (!p) return;
  if (g->vals[v].kind == OF_GV_HANDLE) of_node_release(p);
  else of_tensor_release(p);
}

/* one node of a wave, on any thread: its inputs from the slots, its
 * results into outs[] (stored by the main thread) */
typedef struct {
  int32_t node;
  of_tensor **ins;
  void **outs;
  of_status st;
  char err[256];
  int32_t thread;
} job;

static void run_job(of_graph *g, job *j) {
  of_set_grad_enabled(0);   /* thread-local: a worker's default is on */
  of_gnode *n = &g->nodes[j->node];
  j->thread = omp_get_thread_num();
  j->st = of_graph_invoke(g, n, j->ins, j->outs);
  if (j->st != OF_OK) snprintf(j->err, sizeof j->err, "%s", of_last_error());
}

static bool shares_input(const of_graph *g, const of_gnode *a, const of_gnode *b, void **slot) {
  for (int32_t p = 0; p < a->nin; p++)
    for (int32_t q = 0; q < b->nin; q++)
      if (a->in[p] >= 0 && b->in[q] >= 0 && slot[a->in[p]] == slot[b->in[q]]) return true;
  (void)g;
  return false;
}

of_status of_graph_exec_waves(of_graph *g, void **slot, bool *own, int32_t width) {
  dag d;
  OF_CHECK(build_dag(g, &d));
  int32_t nn = g->nnodes;
  int32_t *ready = malloc(sizeof *ready * (size_t)(nn ? nn : 1));
  job *jobs = calloc((size_t)width, sizeof *jobs);
  of_tensor **ibufs = NULL;
  void **obufs = NULL;
  int32_t maxin = 1, maxout = 1;
  for (int32_t i = 0; i < nn; i++) {
    if (g->nodes[i].nin > maxin) maxin = g->nodes[i].nin;
    if (g->nodes[i].nout > maxout) maxout = g->nodes[i].nout;
  }
  ibufs = malloc(sizeof *ibufs * (size_t)(maxin * width));
  obufs = malloc(sizeof *obufs * (size_t)(maxout * width));
  if (!ready || !jobs || !ibufs || !obufs) {
    free(ready); free(jobs); free(ibufs); free(obufs);
    dag_free(&d);
    return of_fail(OF_ERR_OOM, "nn.Graph: scheduler: out of memory");
  }
  int32_t nready = 0, done = 0, live = 0;
  for (int32_t i = 0; i < nn; i++) {
    if (g->nodes[i].dead) { done++; continue; }
    live++;
    if (d.npred[i] == 0) ready[nready++] = i;
  }
  (void)live;
  of_status st = OF_OK;
  int32_t threads = of_threads();
  while (st == OF_OK && nready > 0) {
    /* pick the wave: ready nodes in order, CAPTURE nodes only without a
     * shared input tensor */
    int32_t nw = 0;
    for (int32_t r = 0; r < nready && nw < width; r++) {
      const of_gnode *n = &g->nodes[ready[r]];
      bool clash = false;
      for (int32_t q = 0; q < nw && !clash; q++) {
        const of_gnode *m = &g->nodes[jobs[q].node];
        if ((n->flags & OF_GN_CAPTURE) || (m->flags & OF_GN_CAPTURE))
          clash = shares_input(g, n, m, slot);
      }
      if (clash) continue;
      jobs[nw].node = ready[r];
      jobs[nw].ins = ibufs + (size_t)nw * (size_t)maxin;
      jobs[nw].outs = obufs + (size_t)nw * (size_t)maxout;
      jobs[nw].err[0] = 0;
      ready[r] = -1;
      nw++;
    }
    int32_t k = 0;
    for (int32_t r = 0; r < nready; r++)
      if (ready[r] >= 0) ready[k++] = ready[r];
    nready = k;
    for (int32_t q = 0; q < nw; q++) {
      const of_gnode *n = &g->nodes[jobs[q].node];
      for (int32_t p = 0; p < n->nin; p++) {
        int32_t v = n->in[p];
        jobs[q].ins[p] = v >= 0 ? slot[v] : NULL;
        if (v >= 0 && !slot[v])
          st = of_fail(OF_ERR_STATE, "nn.Graph: scheduler: an input was not computed");
      }
    }
    if (st != OF_OK) break;
    if (nw == 1 || threads < 2) {
      for (int32_t q = 0; q < nw; q++) {
        jobs[q].thread = 0;
        jobs[q].st = of_graph_invoke(g, &g->nodes[jobs[q].node], jobs[q].ins, jobs[q].outs);
        if (jobs[q].st != OF_OK) snprintf(jobs[q].err, sizeof jobs[q].err, "%s", of_last_error());
      }
    } else {
      int32_t t = nw < threads ? nw : threads;
      #pragma omp parallel for num_threads(t) schedule(static, 1)   /* job q on thread q % t */
      for (int32_t q = 0; q < nw; q++) run_job(g, &jobs[q]);
      of_set_grad_enabled(0);
      g->waves_parallel++;
      if (nw > g->max_wave) g->max_wave = nw;
      for (int32_t q = 0; q < nw; q++)
        if (jobs[q].thread != 0) g->worker_nodes++;
    }
    for (int32_t q = 0; q < nw && st == OF_OK; q++)
      if (jobs[q].st != OF_OK) st = of_fail(jobs[q].st, "%s", jobs[q].err);
    /* store results, release dead values, release successors */
    for (int32_t q = 0; q < nw; q++) {
      of_gnode *n = &g->nodes[jobs[q].node];
      void **obuf = jobs[q].outs;
      if (jobs[q].st != OF_OK) continue;
      for (int32_t j = 0; j < n->nreal; j++) {
        int32_t v = n->out[j];
        if (v >= 0 && obuf[j]) {
          release_slot(g, v, own[v] ? slot[v] : NULL);
          slot[v] = obuf[j];
          own[v] = true;
          if (st == OF_OK) st = of_graph_check_result(g, n, jobs[q].node, v, obuf[j]);
        } else if (obuf[j]) {
          of_tensor_release(obuf[j]);
        } else if (v >= 0 && st == OF_OK) {
          st = of_fail(OF_ERR_STATE, "nn.Graph: a result is missing");
        }
      }
      for (int32_t m = 0; m < n->nmut; m++) {
        int32_t v = n->out[n->nreal + m];
        of_tensor *t = jobs[q].ins[n->mut[m]];
        if (v < 0 || !t) continue;
        of_tensor_retain(t);
        release_slot(g, v, own[v] ? slot[v] : NULL);
        slot[v] = t;
        own[v] = true;
      }
      if (n->flags & OF_GN_CAPTURE) {
        int32_t v = n->out[n->nout - 1];
        if (v >= 0) { slot[v] = obuf[n->nout - 1]; own[v] = true; }
        else if (obuf[n->nout - 1]) of_node_release(obuf[n->nout - 1]);
      }
    }
    for (int32_t q = 0; q < nw; q++) {
      of_gnode *n = &g->nodes[jobs[q].node];
      for (int32_t p = 0; p < n->nin; p++) {
        int32_t v = n->in[p];
        if (v >= 0 && --d.reads[v] == 0 && own[v]) {
          release_slot(g, v, slot[v]);
          slot[v] = NULL;
          own[v] = false;
        }
      }
      for (int32_t j = 0; j < n->nout; j++) {   /* results nobody reads */
        int32_t v = n->out[j];
        if (v >= 0 && d.reads[v] == 0 && own[v]) {
          release_slot(g, v, slot[v]);
          slot[v] = NULL;
          own[v] = false;
        }
      }
      for (int32_t e = d.succ_start[jobs[q].node]; e < d.succ_start[jobs[q].node + 1]; e++)
        if (--d.npred[d.succ[e]] == 0) ready[nready++] = d.succ[e];
      done++;
    }
    /* keep the ready list in node order (the sequential order's tie-break) */
    for (int32_t a = 1; a < nready; a++) {
      int32_t x = ready[a], b = a - 1;
      while (b >= 0 && ready[b] > x) { ready[b + 1] = ready[b]; b--; }
      ready[b + 1] = x;
    }
  }
  if (st == OF_OK && done != nn)
    st = of_fail(OF_ERR_STATE, "nn.Graph: scheduler: %d nodes never became ready", (int)(nn - done));
  free(ready); free(jobs); free(ibufs); free(obufs);
  dag_free(&d);
  return st;
}
