/* triad.c -- the memory-bandwidth yardstick for bench/ops.lua: STREAM's
 * triad c[i] = a[i] + s * b[i] over float32 arrays that are already touched,
 * in an OpenMP loop. Prints the best rate in GB/s, counting 3 * 4 * n bytes.
 *   usage: bench_triad [n = 16777216] [repeats = 20]
 * Threads: OMP_NUM_THREADS. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 16L << 20;
  int reps = argc > 2 ? atoi(argv[2]) : 20;
  float *a = aligned_alloc(64, sizeof(float) * (size_t)n);
  float *b = aligned_alloc(64, sizeof(float) * (size_t)n);
  float *c = aligned_alloc(64, sizeof(float) * (size_t)n);
  if (!a || !b || !c) {
    fprintf(stderr, "triad: out of memory\n");
    return 1;
  }
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i++) a[i] = 1.0f, b[i] = 2.0f, c[i] = 0.0f;
  volatile float sv = 1.0f;
  float s = sv;
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    double t0 = omp_get_wtime();
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) c[i] = a[i] + s * b[i];
    double t = omp_get_wtime() - t0;
    if (t < best) best = t;
  }
  double check = 0;
  for (long i = 0; i < n; i += 4096) check += c[i];
  printf("%.3f\n", 3.0 * 4.0 * (double)n / best / 1e9);
  fprintf(stderr, "triad: n=%ld threads=%d best=%.3f ms check=%g\n", n, omp_get_max_threads(),
          best * 1e3, check);
  free(a);
  free(b);
  free(c);
  return 0;
}
