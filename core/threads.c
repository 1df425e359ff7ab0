/* threads.c -- one knob for OpenMP loops and OpenBLAS. */
#include "internal.h"
#include <omp.h>

void openblas_set_num_threads(int n);

static int32_t num_threads = 0;   /* 0: not set yet, use OpenMP's default */

void of_set_num_threads(int32_t n) {
  if (n < 1) n = 1;
  num_threads = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int32_t of_get_num_threads(void) { return of_threads(); }

int32_t of_threads(void) {
  if (num_threads == 0) num_threads = omp_get_max_threads();
  return num_threads;
}
