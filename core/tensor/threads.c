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

void of_set_num_threads(int32_t n) {
  if (n < 1) n = 1;
  num_threads = n;
  omp_set_num_threads(n);
}

int32_t of_get_num_threads(void) { return of_threads(); }

int32_t of_threads(void) {
  if (num_threads == 0) num_threads = omp_get_max_threads();
  return num_threads;
}
