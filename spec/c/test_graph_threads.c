/* Thread safety of the C API: THREADS host threads at once, each with its
 * own tensors, run one shared compiled graph CALLS times (and trace and run
 * a graph of their own, and check that of_last_error is theirs); every
 * result must equal the single-threaded run's, bit for bit.
 *
 * The shared graph is the nn.Graph that spec/c/graph_threads_save.lua
 * compiled and saved (OF_THREADS_GRAPH=path; ctest's fixture), loaded here
 * with of_graph_load -- or, without that variable, a graph traced here.
 * Usage: test_graph_threads [threads [calls]] (default 8 x 50; `make soak`
 * runs 8 x 1000; the Helgrind run uses fewer). */
#include <oneflow/oneflow.h>
#include <math.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_THREADS = 64, BATCH = 4 };

static of_graph *shared;
static int64_t in_shape[8];
static int32_t in_ndim;
static int calls = 50;

typedef struct {
  int id;
  of_tensor *x;          /* this thread's input */
  float *want;           /* the single-threaded output */
  int64_t nwant;
  double grad_sum;       /* eager_step's single-threaded result */
  int failures;
  char why[512];
} job;

static void note(job *j, const char *fmt, const char *a) {
  if (j->failures++ == 0) snprintf(j->why, sizeof j->why, fmt, a);
}

/* f(x) = relu(x * 2 + 1) * x over a [3, 4] tensor, traced on this thread */
static of_graph *trace_small(void) {
  int64_t shape[2] = {3, 4};
  double v[12];
  for (int i = 0; i < 12; i++) v[i] = i - 5.5;
  of_tensor *x, *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  of_graph *g = NULL;
  if (of_from_doubles(v, shape, 2, OF_FLOAT32, &x) != OF_OK) return NULL;
  if (of_trace_begin(&x, 1) == OF_OK) {
    if (of_binary_scalar(OF_MUL, x, 2, 0, NULL, &a) == OF_OK &&
        of_binary_scalar(OF_ADD, a, 1, 0, NULL, &b) == OF_OK && of_unary(OF_RELU, b, NULL, &c) == OF_OK &&
        of_binary(OF_MUL, c, x, NULL, &d) == OF_OK) {
      if (of_trace_end(&d, 1, &g) != OF_OK) g = NULL;
    } else {
      of_trace_abort();
    }
  }
  of_tensor *ts[] = {x, a, b, c, d};
  for (int i = 0; i < 5; i++) of_tensor_release(ts[i]);
  if (g && of_graph_optimize(g, NULL) != OF_OK) {
    of_graph_release(g);
    g = NULL;
  }
  return g;
}

/* the shared graph when no saved one is given: a small MLP, [4,16] -> [4,8] */
static of_graph *trace_mlp(void) {
  int64_t xs[2] = {BATCH, 16}, w1s[2] = {16, 32}, w2s[2] = {32, 8};
  of_tensor *x, *w1, *w2, *h = NULL, *r = NULL, *y = NULL, *p = NULL;
  of_graph *g = NULL;
  of_manual_seed(7);
  if (of_randn(xs, 2, OF_FLOAT32, OF_CPU, &x) != OF_OK || of_randn(w1s, 2, OF_FLOAT32, OF_CPU, &w1) != OF_OK ||
      of_randn(w2s, 2, OF_FLOAT32, OF_CPU, &w2) != OF_OK)
    return NULL;
  if (of_trace_begin(&x, 1) == OF_OK) {
    if (of_matmul(x, w1, &h) == OF_OK && of_unary(OF_RELU, h, NULL, &r) == OF_OK &&
        of_matmul(r, w2, &y) == OF_OK && of_softmax(y, 1, 0, &p) == OF_OK) {
      if (of_trace_end(&p, 1, &g) != OF_OK) g = NULL;
    } else {
      of_trace_abort();
    }
  }
  of_tensor *ts[] = {x, w1, w2, h, r, y, p};
  for (int i = 0; i < 7; i++) of_tensor_release(ts[i]);
  if (g && of_graph_optimize(g, NULL) != OF_OK) {
    of_graph_release(g);
    g = NULL;
  }
  return g;
}

static of_status run_shared(of_tensor *x, of_tensor **y) { return of_graph_run(shared, &x, 1, y, 1); }

/* An eager autograd step on this thread's own tensors (big enough for the
 * kernels' OpenMP loops): loss = sum(relu(x @ w)), backward; returns the
 * sum of w's grad, or NAN on an error. */
static double eager_step(int id) {
  enum { N = 64 };
  static const int64_t shape[2] = {N, N};
  double *v = malloc(sizeof *v * N * N);
  for (int i = 0; i < N * N; i++) v[i] = ((i * 31 + id * 17) % 41 - 20) / 10.0;
  of_tensor *x = NULL, *w = NULL, *h = NULL, *r = NULL, *loss = NULL;
  double res = NAN;
  if (of_from_doubles(v, shape, 2, OF_FLOAT32, &x) == OF_OK) {
    for (int i = 0; i < N * N; i++) v[i] = ((i * 7) % 13 - 6) / 13.0;
    if (of_from_doubles(v, shape, 2, OF_FLOAT32, &w) == OF_OK && of_tensor_set_requires_grad(w, 1) == OF_OK &&
        of_matmul(x, w, &h) == OF_OK && of_unary(OF_RELU, h, NULL, &r) == OF_OK &&
        of_reduce(OF_RED_SUM, r, NULL, 0, 0, 2, (of_dtype)-1, &loss) == OF_OK &&
        of_backward(&loss, NULL, 1, 0, 0) == OF_OK) {
      const of_tensor *gw = of_tensor_grad(w);
      if (gw) {
        const float *g = of_tensor_data(gw);
        res = 0;
        for (int i = 0; i < N * N; i++) res += g[i];
      }
    }
  }
  of_tensor *ts[] = {x, w, h, r, loss};
  for (int i = 0; i < 5; i++) of_tensor_release(ts[i]);
  free(v);
  return res;
}

static void *worker(void *arg) {
  job *j = arg;
  /* a graph of this thread's own, traced while the others run theirs */
  of_graph *mine = trace_small();
  if (!mine) note(j, "tracing a graph on a thread failed: %s", of_last_error());
  int64_t s2[2] = {3, 4};
  double v[12];
  for (int i = 0; i < 12; i++) v[i] = (i - 5.5) * (j->id + 1);
  of_tensor *x2 = NULL;
  if (of_from_doubles(v, s2, 2, OF_FLOAT32, &x2) != OF_OK) note(j, "from_doubles: %s", of_last_error());
  for (int c = 0; c < calls && j->failures < 5; c++) {
    of_tensor *y = NULL;
    if (run_shared(j->x, &y) != OF_OK) {
      note(j, "shared graph run failed: %s", of_last_error());
      continue;
    }
    const float *got = of_tensor_data(y);
    if (of_tensor_numel(y) != j->nwant || memcmp(got, j->want, sizeof *got * (size_t)j->nwant) != 0)
      note(j, "%s", "the shared graph's output differs from the single-threaded run");
    of_tensor_release(y);
    if (mine && x2 && c % 4 == 0) {
      of_tensor *z = NULL;
      if (of_graph_run(mine, &x2, 1, &z, 1) != OF_OK) {
        note(j, "own graph run failed: %s", of_last_error());
      } else {
        const float *p = of_tensor_data(z);
        for (int i = 0; i < 12; i++) {
          float xv = (float)v[i], b = xv * 2 + 1;
          if (p[i] != (b > 0 ? b : 0) * xv) {
            note(j, "%s", "the thread's own graph gave a wrong value");
            break;
          }
        }
        of_tensor_release(z);
      }
    }
    if (c % 16 == 0) {
      double gs = eager_step(j->id);
      if (gs != j->grad_sum) note(j, "%s", "an eager backward gave another gradient than single-threaded");
    }
    if (c % 8 == 0) {   /* errors are per thread: a shape mismatch naming this thread's shapes */
      int64_t sa[1] = {j->id + 2}, sb[1] = {j->id + 3};
      of_tensor *a, *b, *out = NULL;
      if (of_randn(sa, 1, OF_FLOAT32, OF_CPU, &a) == OF_OK && of_randn(sb, 1, OF_FLOAT32, OF_CPU, &b) == OF_OK) {
        if (of_binary(OF_ADD, a, b, NULL, &out) == OF_OK) note(j, "%s", "a shape mismatch did not fail");
        char want1[32], want2[32];
        snprintf(want1, sizeof want1, "[%d]", j->id + 2);
        snprintf(want2, sizeof want2, "[%d]", j->id + 3);
        sched_yield();   /* let the others set their errors */
        const char *e = of_last_error();
        if (!strstr(e, want1) || !strstr(e, want2)) note(j, "of_last_error is not this thread's: %s", e);
        of_tensor_release(a);
        of_tensor_release(b);
        of_tensor_release(out);
      }
    }
  }
  of_tensor_release(x2);
  of_graph_release(mine);
  return NULL;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 8;
  calls = argc > 2 ? atoi(argv[2]) : 50;
  if (threads < 1 || threads > MAX_THREADS || calls < 1) {
    fprintf(stderr, "usage: test_graph_threads [threads (1..%d) [calls]]\n", MAX_THREADS);
    return 2;
  }
  const char *path = getenv("OF_THREADS_GRAPH");
  if (path && *path) {
    if (of_graph_load(path, &shared) != OF_OK) {
      fprintf(stderr, "test_graph_threads: loading %s: %s\n", path, of_last_error());
      return 1;
    }
  } else {
    shared = trace_mlp();
    if (!shared) {
      fprintf(stderr, "test_graph_threads: tracing the MLP: %s\n", of_last_error());
      return 1;
    }
  }
  if (of_graph_num_inputs(shared) != 1 || of_graph_num_outputs(shared) != 1) {
    fprintf(stderr, "test_graph_threads: expected a graph with one input and one output\n");
    return 1;
  }
  if (path && *path) {   /* the file also holds batch 2 (graph_threads_save.lua) */
    char b2[4096];
    snprintf(b2, sizeof b2, "%s.b2", path);
    FILE *f = fopen(b2, "rb");
    float want2[16];
    double v2[32];
    for (int i = 0; i < 32; i++) v2[i] = ((i * 7) % 23 - 11) / 7.0;
    int64_t s2[2] = {2, 16};
    of_tensor *x2 = NULL, *y2 = NULL;
    bool ok = f && fread(want2, sizeof want2, 1, f) == 1 && of_graph_num_variants(shared) == 2 &&
              of_from_doubles(v2, s2, 2, OF_FLOAT32, &x2) == OF_OK && run_shared(x2, &y2) == OF_OK &&
              of_tensor_numel(y2) == 16;
    /* bitwise equal to what Lua computed; within OF_THREADS_RTOL where it is
     * set (under Valgrind, which has no AVX-512, OpenBLAS and the row
     * kernels take other code paths than the native run that wrote the
     * reference; the threads' outputs below are compared byte for byte,
     * within one run) */
    const char *rtol_s = getenv("OF_THREADS_RTOL");
    const double rtol = rtol_s ? atof(rtol_s) : 0;
    for (int i = 0; ok && i < 16; i++) {
      const float got = ((const float *)of_tensor_data(y2))[i];
      ok = rtol > 0 ? fabs((double)got - want2[i]) <= rtol * (1 + fabs((double)want2[i]))
                    : memcmp(&got, &want2[i], sizeof got) == 0;
      if (!ok) fprintf(stderr, "test_graph_threads: batch 2, element %d: %.9g, Lua gave %.9g\n", i,
                       (double)got, (double)want2[i]);
    }
    if (f) fclose(f);
    of_tensor_release(x2);
    of_tensor_release(y2);
    if (!ok) {
      fprintf(stderr, "test_graph_threads: the saved batch-2 signature (%d variants) does not "
              "run as in Lua: %s\n", (int)of_graph_num_variants(shared), of_last_error());
      return 1;
    }
    printf("test_graph_threads: the loaded graph runs batch 2 and batch 4 (2 variants)\n");
  }
  /* the input's shape: from the graph's first run on a probe is not
   * possible without knowing it, so the saved graph is [4, 16] -> [4, k]
   * like the traced one (graph_threads_save.lua) */
  in_ndim = 2;
  in_shape[0] = BATCH;
  in_shape[1] = 16;

  job jobs[MAX_THREADS];
  memset(jobs, 0, sizeof jobs);
  for (int t = 0; t < threads; t++) {   /* inputs and the single-threaded outputs */
    job *j = &jobs[t];
    j->id = t;
    double v[BATCH * 16];
    for (int i = 0; i < BATCH * 16; i++) v[i] = ((i * 7 + t * 13) % 23 - 11) / 7.0;
    of_tensor *y;
    if (of_from_doubles(v, in_shape, in_ndim, OF_FLOAT32, &j->x) != OF_OK || run_shared(j->x, &y) != OF_OK) {
      fprintf(stderr, "test_graph_threads: single-threaded run: %s\n", of_last_error());
      return 1;
    }
    j->grad_sum = eager_step(t);
    if (j->grad_sum != j->grad_sum) {
      fprintf(stderr, "test_graph_threads: eager step: %s\n", of_last_error());
      return 1;
    }
    j->nwant = of_tensor_numel(y);
    j->want = malloc(sizeof *j->want * (size_t)j->nwant);
    memcpy(j->want, of_tensor_data(y), sizeof *j->want * (size_t)j->nwant);
    of_tensor_release(y);
  }
  pthread_t tid[MAX_THREADS];
  for (int t = 0; t < threads; t++)
    if (pthread_create(&tid[t], NULL, worker, &jobs[t]) != 0) {
      fprintf(stderr, "test_graph_threads: pthread_create failed\n");
      return 1;
    }
  int failures = 0;
  for (int t = 0; t < threads; t++) {
    pthread_join(tid[t], NULL);
    if (jobs[t].failures) {
      fprintf(stderr, "thread %d: %d failures; first: %s\n", t, jobs[t].failures, jobs[t].why);
      failures += jobs[t].failures;
    }
    of_tensor_release(jobs[t].x);
    free(jobs[t].want);
  }
  int64_t runs = of_graph_stat(shared, OF_GRAPH_RUNS);
  of_graph_release(shared);
  printf("test_graph_threads: %d threads x %d calls of %s: %lld runs, %d failures\n", threads, calls,
         path && *path ? path : "a traced MLP", (long long)runs, failures);
  if (runs != (int64_t)threads * (calls + 1)) {
    fprintf(stderr, "test_graph_threads: expected %lld runs\n", (long long)threads * (calls + 1));
    failures++;
  }
  return failures ? 1 : 0;
}
