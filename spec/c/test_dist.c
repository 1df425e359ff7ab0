/* C API tests for core/dist in a world of one process (no launcher): the
 * communicator works in-process, collectives are identities, bad arguments
 * are errors, and liboneflow needs no MPI to load. */
#include <oneflow/oneflow.h>
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

int main(void) {
  CHECK(of_dist_init() == OF_OK);
  CHECK(strcmp(of_dist_backend(), "self") == 0);
  CHECK(of_dist_rank() == 0 && of_dist_world_size() == 1 && of_dist_local_rank() == 0);
  of_comm *w;
  CHECK(of_comm_world(&w) == OF_OK);
  CHECK(of_comm_rank(w) == 0 && of_comm_size(w) == 1);
  CHECK(of_comm_barrier(w) == OF_OK);

  int64_t shape[1] = {4};
  double vals[4] = {1, 2, 3, 4};
  of_tensor *x, *g, *rs, *a;
  CHECK(of_from_doubles(vals, shape, 1, OF_FLOAT16, &x) == OF_OK);
  CHECK(of_comm_all_reduce(w, x, OF_COMM_SUM) == OF_OK);
  double d;
  CHECK(of_tensor_get_flat(x, 3, &d) == OF_OK && d == 4);
  CHECK(of_comm_all_gather(w, x, NULL, &g) == OF_OK);
  CHECK(of_tensor_numel(g) == 4);
  CHECK(of_comm_reduce_scatter(w, x, NULL, OF_COMM_MAX, &rs) == OF_OK);
  CHECK(of_tensor_get_flat(rs, 2, &d) == OF_OK && d == 3);
  CHECK(of_comm_all_to_all(w, x, NULL, NULL, &a) == OF_OK);
  CHECK(of_tensor_numel(a) == 4);

  /* errors, not crashes */
  int64_t bad[1] = {3};
  of_tensor *o;
  CHECK(of_comm_all_gather(w, x, bad, &o) == OF_ERR_SHAPE);
  CHECK(strstr(of_last_error(), "all_gather") != NULL);
  CHECK(of_comm_all_reduce(w, x, 7) == OF_ERR_ARG);
  CHECK(of_comm_broadcast(w, x, 1) == OF_ERR_INDEX);
  CHECK(of_comm_send(w, x, 0, 0) == OF_ERR_ARG);
  int32_t ranks[1] = {2};
  of_comm *sub;
  CHECK(of_comm_new_group(w, ranks, 1, &sub) == OF_ERR_INDEX);
  ranks[0] = 0;
  CHECK(of_comm_new_group(w, ranks, 1, &sub) == OF_OK);
  CHECK(of_comm_size(sub) == 1);
  of_comm_release(sub);
  CHECK(of_dist_set_timeout(-1) == OF_ERR_ARG);
  CHECK(of_dist_set_timeout(5) == OF_OK && of_dist_get_timeout() == 5);

  of_tensor_release(x);
  of_tensor_release(g);
  of_tensor_release(rs);
  of_tensor_release(a);
  CHECK(of_memory_stats_get(OF_CPU)->current_bytes == 0);
  if (failures) fprintf(stderr, "%d failures\n", failures);
  else puts("test_dist: ok");
  return failures != 0;
}
