/* threads.c -- one knob for OpenMP loops and the gemms split over them.
 *
 * OpenBLAS is kept at one thread: every caller splits its gemms over our
 * OpenMP threads (conv.c, matmul.c). Its own pthread pool, which spins
 * (with sched_yield) after each threaded call, competed for the cores with
 * OpenMP's threads: a LeNet step that ran a threaded Linear took 2-3x
 * longer on 2 cores. */
#include "../internal.h"
#include <omp.h>

void openblas_set_num_threads(int n);

static int32_t num_threads = 0;   /* 0: not set yet, use OpenMP's default */

__attribute__((constructor)) static void blas_single(void) { openblas_set_num_threads(1); }

/* More threads than this is a mistake, not a setting: OpenMP would try to
 * start them all (1e6 threads exhausts memory and the process limit). */
enum { OF_MAX_THREADS = 1024 };

of_status of_set_num_threads(int32_t n) {
  if (n < 1 || n > OF_MAX_THREADS)
    return of_fail(OF_ERR_ARG, "set_num_threads: the number of threads must be within 1..%d, "
                   "got %d", (int)OF_MAX_THREADS, (int)n);
  num_threads = n;
  omp_set_num_threads(n);
  return OF_OK;
}

int32_t of_get_num_threads(void) { return of_threads(); }

int32_t of_threads(void) {
  if (num_threads == 0) num_threads = omp_get_max_threads();
  return num_threads;
}
