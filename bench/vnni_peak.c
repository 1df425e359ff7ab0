/* vnni_peak.c -- the int8 yardstick for the "Model optimisation" figures:
 * the rate of AVX-512 VNNI vpdpbusd (64 u8 x s8 products into int32 lanes
 * an instruction) on 16 independent accumulators per thread, nothing else
 * in the loop, in an OpenMP region. Prints GMAC/s (multiply-adds per
 * second), the ceiling for any int8 convolution on this CPU without AMX.
 *   usage: bench_vnni_peak [iterations = 100000000]
 * Threads: OMP_NUM_THREADS. Exits 77 on a CPU without AVX-512 VNNI. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <immintrin.h>

/* named accumulators (an array would be kept in memory at -O2) */
#define ACC(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define DECL(i) __m512i c##i = _mm512_set1_epi32(i);
#define STEP(i) c##i = _mm512_dpbusd_epi32(c##i, a, b);
#define SUM(i) s = _mm512_add_epi32(s, c##i);

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static long run(long n) {
  ACC(DECL)
  __m512i a = _mm512_set1_epi32(0x01010101), b = _mm512_set1_epi32(0x02020202);
  for (long k = 0; k < n; k++) {
    ACC(STEP)
    __asm__ volatile("" : "+v"(a));   /* keeps the loop from being folded */
  }
  __m512i s = _mm512_setzero_si512();
  ACC(SUM)
  return _mm512_reduce_add_epi32(s);
}
#endif

int main(int argc, char **argv) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512vnni")) {
    fprintf(stderr, "vnni_peak: this CPU has no AVX-512 VNNI\n");
    return 77;
  }
  const long n = argc > 1 ? atol(argv[1]) : 100000000L;
  int nt = 1;
  long sink = 0;
  const double t0 = omp_get_wtime();
#pragma omp parallel reduction(+ : sink)
  {
#pragma omp single
    nt = omp_get_num_threads();
    sink += run(n);
  }
  const double t = omp_get_wtime() - t0;
  printf("vpdpbusd: %.1f GMAC/s on %d thread(s) (check %ld)\n", nt * (double)n * 16 * 64 / t / 1e9, nt, sink);
  return 0;
#else
  (void)argc, (void)argv;
  fprintf(stderr, "vnni_peak: x86-64 only\n");
  return 77;
#endif
}
