/* The op profiler through oneflow.h: events with kinds, depths and shapes,
 * nothing recorded when off, one profiling thread at a time. */
#include <oneflow/oneflow.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                     \
    }                                                                 \
  } while (0)

static int32_t kind(const char *name) {
  of_op_info info;
  for (int32_t k = 0; k < of_op_schema_count(); k++)
    if (of_op_schema(k, &info) == OF_OK && strcmp(info.name, name) == 0) return k;
  return -1;
}

static void *other_thread(void *arg) {
  of_status *st = arg;
  *st = of_profiler_start(0);
  return NULL;
}

int main(void) {
  int64_t s23[2] = {2, 3};
  of_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  CHECK(of_full(s23, 2, 1.0, OF_FLOAT32, OF_CPU, &a) == OF_OK);
  CHECK(of_profiler_enabled() == 0);
  CHECK(of_profiler_start(OF_PROF_SHAPES) == OF_OK);
  CHECK(of_profiler_start(0) != OF_OK);                 /* twice on one thread */
  pthread_t th;
  of_status other = OF_OK;
  CHECK(pthread_create(&th, NULL, other_thread, &other) == 0);
  pthread_join(th, NULL);
  CHECK(other != OF_OK);                                /* another thread */
  CHECK(of_binary(OF_ADD, a, a, NULL, &b) == OF_OK);
  CHECK(of_full(s23, 2, 7.0, OF_FLOAT32, OF_CPU, &c) == OF_OK);
  CHECK(of_profiler_stop() == OF_OK);
  CHECK(of_profiler_stop() != OF_OK);
  CHECK(of_binary(OF_ADD, a, a, NULL, &d) == OF_OK);    /* off: no event */
  int64_t n = of_profiler_num_events();
  const of_prof_event *ev = of_profiler_events();
  CHECK(n == 3);
  if (n == 3) {
    CHECK(ev[0].op == kind("binary") && ev[0].depth == 0 && ev[0].nin == 2);
    CHECK(ev[0].in_ndim[0] == 2 && ev[0].in_shape[0][0] == 2 && ev[0].in_shape[0][1] == 3);
    CHECK(ev[0].in_dtype[1] == OF_FLOAT32 && ev[0].in_ndim[2] == -1);
    CHECK(ev[0].bytes_allocated >= 6 * 4 && ev[0].end_ns >= ev[0].start_ns);
    char desc[64];
    CHECK(of_op_describe(ev[0].op, ev[0].attrs, ev[0].attr_size, desc, sizeof desc) == OF_OK);
    CHECK(strcmp(desc, "add") == 0);
    /* full runs fill_ inside it: the inner event ends first */
    CHECK(ev[1].op == kind("fill_") && ev[1].depth == 1);
    CHECK(ev[2].op == kind("full") && ev[2].depth == 0);
    CHECK(ev[2].start_ns <= ev[1].start_ns && ev[1].end_ns <= ev[2].end_ns);
    CHECK(ev[2].out_dtype == OF_FLOAT32 && ev[2].out_device == OF_CPU);
  }
  CHECK(of_profiler_dropped() == 0);
  /* a thread may profile once the first has stopped */
  CHECK(pthread_create(&th, NULL, other_thread, &other) == 0);
  pthread_join(th, NULL);
  CHECK(other == OF_OK);
  of_tensor_release(a);
  of_tensor_release(b);
  of_tensor_release(c);
  of_tensor_release(d);
  if (failures) fprintf(stderr, "%d checks failed\n", failures);
  return failures != 0;
}
